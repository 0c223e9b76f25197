/*
 * The PyTorch commands: `kforge import` (a KernelBench-format module to a task bundle),
 * `kforge bench` (a suite against PyTorch) and `kforge export --as torch` (a kernel back
 * into PyTorch). The PyTorch side is the python/ package (kforge_torch); these commands
 * run it with the interpreter named by $KFORGE_PYTHON (default python3), with this
 * checkout's python/ folder on PYTHONPATH when the package is not installed, and keep the
 * C side (the lowering to the graph IR) here in the library.
 */
#include "cli.h"
#include "kforge/ir.h"

#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char *python(void) {
    const char *p = getenv("KFORGE_PYTHON");
    return p && *p ? p : "python3";
}

/* PYTHONPATH with this checkout's python/ in front, when that folder exists. */
static void python_path_env(void) {
#ifdef KF_SOURCE_DIR
    const char *dir = KF_SOURCE_DIR "/python";
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return;
    const char *old = getenv("PYTHONPATH");
    kf_buf b = {0};
    kf_buf_printf(&b, "%s%s%s", dir, old && *old ? ":" : "", old && *old ? old : "");
    setenv("PYTHONPATH", b.data, 1);
    kf_buf_free(&b);
#endif
}

/* Runs `python3 -m MODULE ARGS...`; returns its exit status (127 when it could not start,
 * with the reason printed). */
static int run_python_module(const char *module, char *const *args, int nargs) {
    python_path_env();
    char **argv = calloc((size_t)nargs + 4, sizeof *argv);
    if (!argv) return KF_EXIT_INTERNAL;
    argv[0] = (char *)python();
    argv[1] = "-m";
    argv[2] = (char *)module;
    for (int i = 0; i < nargs; i++) argv[3 + i] = args[i];
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
    free(argv);
    if (rc != 0) {
        fprintf(stderr, "kforge: cannot start %s: %s (set KFORGE_PYTHON to a Python with torch, and "
                "pip install -e python/)\n", python(), strerror(rc));
        return 127;
    }
    int ws;
    while (waitpid(pid, &ws, 0) < 0)
        if (errno != EINTR) return KF_EXIT_INTERNAL;
    if (WIFEXITED(ws)) return WEXITSTATUS(ws);
    fprintf(stderr, "kforge: %s -m %s was killed by signal %d\n", python(), module, WTERMSIG(ws));
    return KF_EXIT_INTERNAL;
}

static int lower_bundle(const char *what, const char *out, int graph_only);
static void self_path(char *buf, size_t cap);

static void usage_import(FILE *f) {
    fprintf(f,
            "usage: kforge import MODEL.py [--out DIR] [--seed N] [--name NAME] [--eval] [--graph-only] [--verbose]\n"
            "       kforge import --lower DIR [--graph-only]\n\n"
            "Imports a KernelBench-format PyTorch module (class Model, get_inputs(),\n"
            "get_init_inputs()): exports its forward with torch.export, writes the task bundle\n"
            "(DIR/graph.json, DIR/params.safetensors, DIR/ref.safetensors: docs/pytorch.md), lowers\n"
            "the ATen ops to kforge's graph IR and writes DIR/task.kf, ready for kforge synth.\n"
            "Parameters and buffers become task inputs. Every op kforge cannot lower is named,\n"
            "and the module itself becomes the task (a module task: its reference is the module,\n"
            "run in float64 by PyTorch; a model writes its kernel: kforge synth --agent llm).\n\n"
            "options:\n"
            "  --out DIR     bundle directory (default kforge-out/import/<model file name>)\n"
            "  --seed N      seed for Model(*get_init_inputs()) and get_inputs() (default 0)\n"
            "  --name NAME   task name, an identifier (default: from the file name)\n"
            "  --eval        import in inference mode (model.eval(): BatchNorm's running\n"
            "                statistics, dropout off); default: the mode after construction, as\n"
            "                KernelBench runs it (training: batch statistics; a live dropout's\n"
            "                mask becomes a bool input of the task)\n"
            "  --verbose     when the module fails: the traceback and torch's output too\n"
            "  --graph-only  refuse a module whose ops do not all lower (exit 2, naming them)\n"
            "                instead of writing a module task\n"
            "  --lower DIR   only lower an existing bundle's DIR/graph.json to DIR/task.kf (no\n"
            "                Python: for a bundle written by kforge_torch.importer.write_bundle,\n"
            "                as kforge bench does in its own process)\n"
            "  -h, --help    this help\n\n"
            "environment: KFORGE_PYTHON, the Python with torch (default python3)\n"
            "exit codes: 0 written, 2 usage, or a module that cannot be loaded, run, exported or\n"
            "lowered (one line: the file, the step, why), 3 internal\n");
}

/* The checks that need no Python (which takes seconds to start with torch): the module is
 * a readable .py file, the seed a number, the name an identifier, --out no file. 0 or the
 * exit code after the message. */
static int check_import_args(const char *model, const char *out, const char *seed, const char *name) {
    struct stat st;
    uint64_t sv;
    if (stat(model, &st) != 0) {
        fprintf(stderr, "kforge import: %s: %s\n", model, errno == ENOENT ? "no such file" : strerror(errno));
        return KF_EXIT_USAGE;
    }
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "kforge import: %s: not a file (a KernelBench module MODEL.py)\n", model);
        return KF_EXIT_USAGE;
    }
    size_t n = strlen(model);
    if (n < 3 || strcmp(model + n - 3, ".py") != 0) {
        fprintf(stderr, "kforge import: %s: not a Python file (a KernelBench module ends in .py)\n", model);
        return KF_EXIT_USAGE;
    }
    if (access(model, R_OK) != 0) {
        fprintf(stderr, "kforge import: %s: %s\n", model, strerror(errno));
        return KF_EXIT_USAGE;
    }
    if (seed && !kf_cli_seed(seed, &sv)) {
        fprintf(stderr, "kforge import: --seed needs a 64-bit integer, got '%s'\n", seed);
        return KF_EXIT_USAGE;
    }
    if (name) {
        int ok = name[0] && strlen(name) < 64 && !(name[0] >= '0' && name[0] <= '9');
        for (const char *p = name; ok && *p; p++)
            ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_';
        if (!ok) {
            fprintf(stderr, "kforge import: --name '%s' is not a task name (letters, digits and _, not starting "
                    "with a digit, under 64 characters)\n", name);
            return KF_EXIT_USAGE;
        }
    }
    if (out && stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "kforge import: --out %s: exists and is not a directory\n", out);
        return KF_EXIT_USAGE;
    }
    return 0;
}

int kf_cli_import(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *seed = NULL, *name = NULL, *lower = NULL;
    int verbose = 0, eval = 0, graph_only = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage_import(stdout); return 0; }
        if (!strcmp(a, "--graph-only")) {
            graph_only = 1;
            continue;
        }
        if (!strcmp(a, "--eval")) {
            eval = 1;
            continue;
        }
        if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            verbose = 1;
            continue;
        }
        if (!strcmp(a, "--lower") && i + 1 < argc) {
            lower = argv[++i];
            continue;
        }
        if ((!strcmp(a, "--out") || !strcmp(a, "--seed") || !strcmp(a, "--name")) && i + 1 < argc) {
            const char **dst = !strcmp(a, "--out") ? &out : !strcmp(a, "--seed") ? &seed : &name;
            *dst = argv[++i];
        } else if (a[0] == '-') {
            fprintf(stderr, "kforge import: unknown option '%s'\n", a);
            usage_import(stderr);
            return KF_EXIT_USAGE;
        } else if (!model) model = a;
        else { fprintf(stderr, "kforge import: one MODEL.py at a time ('%s')\n", a); return KF_EXIT_USAGE; }
    }
    if (lower && (model || seed || name || out || eval)) {
        fprintf(stderr, "kforge import: --lower DIR takes no MODEL.py, --out, --seed or --name\n");
        return KF_EXIT_USAGE;
    }
    if (lower) return lower_bundle(lower, lower, graph_only);
    if (!model) { usage_import(stderr); return KF_EXIT_USAGE; }
    int crc = check_import_args(model, out, seed, name);
    if (crc) return crc;
    char dflt[PATH_MAX];
    if (!out) {
        const char *base = strrchr(model, '/') ? strrchr(model, '/') + 1 : model;
        size_t n = strcspn(base, ".");
        snprintf(dflt, sizeof dflt, "kforge-out/import/%.*s", (int)n, base);
        out = dflt;
    }
    char *args[12];
    int na = 0;
    args[na++] = (char *)model;
    args[na++] = (char *)out;
    if (seed) { args[na++] = "--seed"; args[na++] = (char *)seed; }
    if (name) { args[na++] = "--name"; args[na++] = (char *)name; }
    if (verbose) args[na++] = "--verbose";
    if (eval) args[na++] = "--eval";
    if (graph_only) args[na++] = "--graph-only";
    int rc = run_python_module("kforge_torch.importer", args, na);
    if (rc == 10) { /* torch.export failed; the importer wrote a module task instead */
        printf("next: kforge synth %s/task.kf --agent llm\n", out);
        return 0;
    }
    if (rc != 0) return rc == 127 ? KF_EXIT_USAGE : rc;
    return lower_bundle(model, out, graph_only);
}

/* DIR/graph.json -> DIR/task.kf; `what` names the model (or the bundle) in errors. */
static int lower_bundle(const char *what, const char *out, int graph_only) {
    char gpath[PATH_MAX + 16], tpath[PATH_MAX + 16];
    snprintf(gpath, sizeof gpath, "%s/graph.json", out);
    snprintf(tpath, sizeof tpath, "%s/task.kf", out);
    char *text = NULL;
    kf_graph *g = NULL;
    kf_error err = {0};
    kf_status lst = kf_import_torch_graph(gpath, &text, &g, &err);
    if (lst == KF_ERR_UNSUPPORTED && !graph_only) {
        /* some op does not lower: the module itself becomes the task, its reference PyTorch */
        fprintf(stderr, "kforge import: %s: kforge cannot lower every op (%s); writing a module task: its reference "
                        "is the module itself (run in float64 by PyTorch), its kernel is written by a model "
                        "(--agent llm)\n", what, err.msg);
        /* with this kforge for the Python side to lower the parts it can (a mixed task) */
        char self[PATH_MAX];
        self_path(self, sizeof self);
        char *args[] = {"--bundle", (char *)out, "--why", err.msg, "--kforge", self};
        int rc = run_python_module("kforge_torch.module_task", args, 6);
        if (rc != 0) return rc == 127 ? KF_EXIT_USAGE : rc;
        printf("next: kforge synth %s --agent llm\n", tpath);
        return 0;
    }
    if (lst != KF_OK) {
        fprintf(stderr, "kforge import: %s: ", what);
        return kf_cli_error(&err);
    }
    FILE *f = fopen(tpath, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "kforge import: cannot write %s: %s\n", tpath, strerror(errno));
        free(text);
        kf_graph_free(g);
        return KF_EXIT_INTERNAL;
    }
    printf("wrote %s: task %s, %d inputs, %d ops, %d outputs, %.3g MB moved at least\n", tpath, g->name,
           g->ninputs, g->nnodes, g->noutputs, kf_graph_min_bytes(g) / 1e6);
    printf("next: kforge synth %s\n", tpath);
    free(text);
    kf_graph_free(g);
    return 0;
}

/* The path of this kforge binary, for the Python side to call back. */
static void self_path(char *buf, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0) snprintf(buf, cap, "kforge");
    else buf[n] = 0;
}

/* kforge bench's suite (its one argument that is no option), checked before Python starts:
 * a missing folder is a usage error (exit 2), said at once. 0 when fine or not found. */
static int check_bench_suite(int argc, char **argv) {
    /* the options that take a value (python/kforge_torch/bench.py) */
    static const char *const valued[] = {"--target", "--iters", "--time-budget", "--memcheck", "--reps", "--seed",
                                         "--out", "--json", "--csv", "--only", "--threads", "--kforge", "--shard",
                                         "--jobs", "--task-timeout", "--merge-from", "--agent", "--llm-url",
                                         "--model", NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 0;
        if (a[0] == '-') {
            for (int k = 0; valued[k]; k++)
                if (!strcmp(a, valued[k])) i++;
            continue;
        }
        struct stat st;
        if (stat(a, &st) != 0) {
            fprintf(stderr, "kforge bench: %s: %s (a folder of KernelBench .py files and .kf tasks, or one "
                    "file)\n", a, errno == ENOENT ? "no such file or folder" : strerror(errno));
            return KF_EXIT_USAGE;
        }
        return 0;
    }
    return 0;
}

/* "--kforge SELF" and argv[1..]: what kforge bench and kforge slurm hand their Python module
 * (NULL when out of memory; the caller frees the array, not its strings). */
static char **self_args(int argc, char **argv, char self[PATH_MAX], int *na) {
    self_path(self, PATH_MAX);
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) return NULL;
    int n = 0;
    args[n++] = "--kforge";
    args[n++] = self;
    for (int i = 1; i < argc; i++) args[n++] = argv[i];
    *na = n;
    return args;
}

int kf_cli_bench(int argc, char **argv) {
    int crc = check_bench_suite(argc, argv);
    if (crc) return crc;
    char self[PATH_MAX];
    int na = 0;
    char **args = self_args(argc, argv, self, &na);
    if (!args) return KF_EXIT_INTERNAL;
    /* a merge needs no torch, and the parent of parallel slots none either: each runs in a
     * module that does not import it (docs/cluster.md) */
    const char *module = "kforge_torch.bench";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--merge-from") || !strncmp(argv[i], "--merge-from=", 13)) {
            module = "kforge_torch.suite";
            break;
        }
        const char *jobs = !strcmp(argv[i], "--jobs") && i + 1 < argc ? argv[i + 1]
                           : !strncmp(argv[i], "--jobs=", 7) ? argv[i] + 7 : NULL;
        if (jobs && strcmp(jobs, "1") != 0) module = "kforge_torch.slots";
    }
    int rc = run_python_module(module, args, na);
    free(args);
    return rc == 127 ? KF_EXIT_USAGE : rc;
}

static void usage_export(FILE *f) {
    fprintf(f,
            "usage: kforge export RUN --as torch [--out FILE.py]\n"
            "       kforge export --check FILE.py\n\n"
            "Writes a Python module that registers RUN's best kernel (RUN: a kforge synth output\n"
            "directory, --target cpu or cuda) as a torch custom op, kforge::<task>, and a ModelNew\n"
            "that calls it: for a task imported from a PyTorch module, ModelNew subclasses that\n"
            "Model (same constructor, same parameters), as KernelBench's harness expects. A cuda\n"
            "kernel is compiled with NVRTC for the current GPU at import and launched on PyTorch's\n"
            "stream (ModelNew takes CUDA tensors). --check compares ModelNew with Model (eager and\n"
            "under torch.compile) on get_inputs(), on the GPU for a cuda kernel.\n\n"
            "options:\n"
            "  --as torch    the target framework (torch is the one there is)\n"
            "  --out FILE    where to write (default RUN/kforge_torch_export.py)\n"
            "  -h, --help    this help\n");
}

int kf_cli_export(int argc, char **argv) {
    int as_torch = 0, check = 0;
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) return KF_EXIT_INTERNAL;
    int na = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage_export(stdout); free(args); return 0; }
        if (!strcmp(argv[i], "--as") && i + 1 < argc) {
            if (strcmp(argv[++i], "torch") != 0) {
                fprintf(stderr, "kforge export: --as %s: only 'torch' is supported\n", argv[i]);
                free(args);
                return KF_EXIT_USAGE;
            }
            as_torch = 1;
            continue;
        }
        if (!strcmp(argv[i], "--check")) check = 1;
        args[na++] = argv[i];
    }
    if (!na || (!as_torch && !check)) {
        usage_export(stderr);
        free(args);
        return KF_EXIT_USAGE;
    }
    int rc = run_python_module("kforge_torch.export", args, na);
    free(args);
    return rc == 127 ? KF_EXIT_USAGE : rc;
}

/* `kforge slurm SUITE --array N ...`: writes (and with --submit submits) the job array
 * (kforge_torch.slurm, which needs no torch; docs/cluster.md). */
int kf_cli_slurm(int argc, char **argv) {
    char self[PATH_MAX];
    int na = 0;
    char **args = self_args(argc, argv, self, &na);
    if (!args) return KF_EXIT_INTERNAL;
    int rc = run_python_module("kforge_torch.slurm", args, na);
    free(args);
    return rc == 127 ? KF_EXIT_USAGE : rc;
}
