/*
 * The kforge command line: `kforge synth`, `kforge verify`, `kforge ops`, `kforge devices`.
 * Each subcommand parses its flags, calls the library, and maps the outcome to an exit
 * code: 0 success, 1 no verified kernel / verification failed, 2 usage or task error,
 * 3 internal error.
 */
#include "cli/cli.h"
#include "kforge/agent.h"
#include "kforge/llm.h"
#include "kforge/backend.h"
#include "kforge/calib.h"
#include "kforge/platform.h"
#include "kforge/ir.h"
#include "kforge/synth.h"
#include "kforge/verify.h"
#include "kforge/perf.h"
#include "kforge/store.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <sys/prctl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_VERIFY KF_EXIT_VERIFY
#define EXIT_USAGE KF_EXIT_USAGE
#define EXIT_INTERNAL KF_EXIT_INTERNAL

static const char *kVersion = "0.1.0";

static void usage_main(FILE *f) {
    fprintf(f,
            "usage: kforge <command> [options]\n"
            "\n"
            "Synthesize compute kernels that are verified against a float64 reference and\n"
            "measured against the hardware's roofline.\n"
            "\n"
            "commands:\n"
            "  synth TASK.kf     search for the fastest verified kernel for a task\n"
            "  verify TASK.kf KERNEL.c\n"
            "                    check a hand-written kernel with the same harness\n"
            "  ops               list the supported operators\n"
            "  devices           list the platforms and devices kforge can use\n"
            "  calibrate         measure the device's bandwidth, peak and launch overhead\n"
            "  analyze RUN.json  diagnose a recorded run's candidates (with --ncu counters)\n"
            "  import MODEL.py   a KernelBench-format PyTorch module -> a task (torch.export)\n"
            "  bench SUITE       every task of a folder, timed against PyTorch eager and compile\n"
            "                    (--jobs N parallel slots, --shard I/N, --merge-from DIR)\n"
            "  export RUN        the kernel as a torch custom op and a ModelNew (--as torch)\n"
            "  runs              list the runs in the store (id, task, device, status, best)\n"
            "  show RUN          a stored run's iteration table and best kernel\n"
            "  show --best TASK.kf\n"
            "                    the best verified kernel of a task on each platform in the store\n"
            "  report RUN --html FILE\n"
            "                    a stored run as one self-contained HTML page (charts, roofline)\n"
            "  store merge OUT IN...\n"
            "                    merge stores (runs, evaluations, transcripts) into one\n"
            "  slurm SUITE --array N\n"
            "                    a Slurm job array that benches a suite in N shards, then merges\n"
            "  help [COMMAND]    show help\n"
            "\n"
            "exit codes: 0 success, 1 no verified kernel / verification failed,\n"
            "            2 usage or task error, 3 internal error\n"
            "store: every run is recorded in $KFORGE_STORE, else $XDG_DATA_HOME/kforge/kforge.db,\n"
            "       else ~/.local/share/kforge/kforge.db (--store PATH, --no-store; docs/store.md)\n"
            "Run 'kforge COMMAND --help' for a command's options.\n");
}

static void usage_synth(FILE *f) {
    fprintf(f,
            "usage: kforge synth TASK.kf [options]\n"
            "       kforge synth --resume RUN [--store PATH] [--no-cache] [-q] [--json]\n"
            "\n"
            "Runs the synthesis loop: the builtin agent proposes candidates from the generator's\n"
            "schedule space (or a chat model writes them: --agent); each is compiled, run in a\n"
            "sandboxed child process on several input sets, compared with the float64 reference, timed and placed on the roofline. Prints a\n"
            "live iteration table and writes the best kernel (kernel.c), its manifest\n"
            "(manifest.json) and the run record (run.json) into the output directory.\n"
            "\n"
            "options:\n"
            "  --target T         cpu (default), opencl[:N], cuda[:N] (N: device N of\n"
            "                     `kforge devices`)\n"
            "  --iters N          evaluate at most N candidates (default 12)\n"
            "  --time-budget S    stop starting candidates after S seconds\n"
            "  --out DIR          output directory (default kforge-out/<task>)\n"
            "  --threads N        threads for candidates (default: all usable)\n"
            "  --seed N           seed for the input sets and the search\n"
            "  --recalibrate      re-measure the device's ceilings\n"
            "  --fresh-outputs    cpu: time each candidate writing into freshly faulted\n"
            "                     output pages, as when the caller allocates outputs on\n"
            "                     every call (PyTorch on the CPU; kforge bench sets it)\n"
            "  --no-race          time every candidate in full; by default a candidate's\n"
            "                     timing stops after its first reps when even the fastest\n"
            "                     of them is 1.25x slower than the best so far (status\n"
            "                     \"ok (raced)\": its time is the median of those reps;\n"
            "                     every check still runs)\n"
            "  --memcheck M       memory checker (valgrind on cpu, compute-sanitizer on cuda;\n"
            "                     none on opencl, reported as skipped): auto (default: the\n"
            "                     final kernel, when it would take under a minute: nearly\n"
            "                     always on cuda), on (the final kernel), every (every\n"
            "                     verified candidate; one it flags is rejected), off\n"
            "  --analysis A       performance analysis agent: builtin (default: every verified\n"
            "                     candidate is diagnosed, the builtin agent follows the best\n"
            "                     one's recommendations, the model reads the diagnosis), off\n"
            "                     (no analysis: random search), llm (the model gets the raw\n"
            "                     profile instead of the diagnosis)\n"
            "  --counters C       profiler counters per verified candidate: off (default) or\n"
            "                     ncu (cuda: each one runs once more under Nsight Compute;\n"
            "                     the diagnosis reads achieved occupancy, DRAM/SM throughput,\n"
            "                     stalls, cache hits; seconds more per candidate: softmax\n"
            "                     on an H200, 4 candidates in 20.4 s with it)\n"
            "  --start S          first candidate: default (the template's point for this\n"
            "                     device) or random (a random point from the seed: to compare\n"
            "                     searches without the defaults' head start)\n"
            "  --pin NAME=VALUE   hold a schedule parameter at one value, named as in the\n"
            "                     candidate labels (repeatable; a whole label in quotes\n"
            "                     pins every parameter: --pin 'block=8192 unroll=4 nt=1';\n"
            "                     a stage's template by its name: --pin tpl=matvec; every\n"
            "                     stage's parameter NAME, where there is one: --pin '*.NAME=V')\n"
            "  --no-fuse          compute every epilogue (an elementwise reader fused into a\n"
            "                     GEMM's, a norm's or, on GPUs, a reduction's store; a row\n"
            "                     reduction in a GEMM's, CPU or GPU) as its own stage:\n"
            "                     --pin '*.epi=0 *.red=0'\n"
            "  --json             print the run record as JSON on stdout (table goes to stderr)\n"
            "  -q, --quiet        no table\n"
            "  -v, --verbose      after the run, where its time went (parse, input draw,\n"
            "                     reference, compile, sandbox start, check runs, timing runs,\n"
            "                     analysis, store, memcheck; run.json keeps them: phases_s)\n"
            "\n"
            "store (docs/store.md):\n"
            "  --store PATH       record the run here (default: $KFORGE_STORE, else\n"
            "                     $XDG_DATA_HOME/kforge/kforge.db, else ~/.local/share/kforge/kforge.db)\n"
            "  --no-store         record nothing (and no cache)\n"
            "  --no-cache         evaluate every candidate, even one the store has a result for\n"
            "                     (same task, source, flags, device, compiler and settings)\n"
            "  --resume RUN       continue an interrupted run (id or unique prefix from\n"
            "                     `kforge runs`) with its stored task and options: its stored\n"
            "                     candidates are replayed from the cache, then the search goes on\n"
            "                     to the planned iterations (builtin agent only)\n"
            "  (a model's calls are stored one by one as they return: a killed model run keeps\n"
            "  every call but the one in flight)\n"
            "  -h, --help         this help\n"
            "\n"
            "generation agent (docs/llm.md):\n"
            "  --agent A          builtin (default), llm (a chat model writes every candidate),\n"
            "                     both (the builtin first, then the model from its best kernel;\n"
            "                     a module task: the builtin writes the parts kforge lowers,\n"
            "                     the model the whole forward from them)\n"
            "  --model M          model name (else KFORGE_LLM_MODEL, else the config file)\n"
            "  --llm-url URL      endpoint base URL, e.g. https://api.openai.com/v1 or\n"
            "                     http://127.0.0.1:8080/v1 (else KFORGE_LLM_URL, else config)\n"
            "  --llm-protocol P   openai, anthropic or auto (default: from the URL)\n"
            "  --llm-config FILE  JSON config file (default ~/.config/kforge/config.json);\n"
            "                     keys come from OPENAI_API_KEY / ANTHROPIC_API_KEY or the file\n"
            "  --llm-timeout S    seconds per request (default 300); a request that timed out\n"
            "                     is not retried (the server may still be computing it)\n"
            "  --llm-retry-timeouts  retry a timed-out request anyway (hosted APIs)\n"
            "  --reply-tokens N   tokens the model may write per reply (default 8192; config\n"
            "                     key max_tokens)\n"
            "  --context N        the model's context window in tokens (default: what the\n"
            "                     server reports, if it does); each prompt and reply limit is\n"
            "                     fitted into it: older rounds, the reference kernel and the\n"
            "                     example are left out first, and the table says so\n"
            "  --max-calls N      stop after N model calls\n"
            "  --max-tokens N     stop once N prompt + completion tokens are used (the whole\n"
            "                     run; per reply: --reply-tokens)\n"
            "  --reference FILE   a correct kernel the model may start from (default: the\n"
            "                     store's best verified kernel of the same task on another\n"
            "                     platform, by %% of floor: `kforge show --best TASK.kf`)\n"
            "  --no-reference     no reference kernel, not even from the store\n"
            "  --module-ref R     a module task's reference (docs/task-format.md): cpu-f64\n"
            "                     (default: the module in float64 on the CPU), cuda-f64 (in\n"
            "                     float64 on torch's CUDA device: the same tolerance, fast on\n"
            "                     GPUs with FP64 units such as H100/H200) or cuda-f32 (in\n"
            "                     float32 on it, TF32 off, for modules too slow in float64;\n"
            "                     tolerance doubled); the GPU kinds are refused without a\n"
            "                     CUDA device in torch, never a fallback\n"
            "  --builtin-iters N  --agent both: builtin candidates first (default: half; a\n"
            "                     module task: per part, the model keeps --iters)\n"
            "  --prompts DIR      prompt files (default: $KFORGE_PROMPTS, else kforge's prompts/)\n"
            "\n"
            "exit codes: 0 a kernel verified, 1 none verified, 2 usage or task error, 3 internal\n");
}

static void usage_verify(FILE *f) {
    fprintf(f,
            "usage: kforge verify TASK.kf KERNEL [options]\n"
            "\n"
            "Compiles a kernel written to the kernel contract (docs/kernel-contract.md: C for cpu,\n"
            "OpenCL C with kforge:launch lines for opencl, CUDA C (NVRTC form with kforge:launch\n"
            "lines, or a whole .cu with host code) for cuda) and\n"
            "checks it with the synthesis loop's harness: several input sets, NaN-poisoned outputs,\n"
            "guard zones, unchanged inputs, tolerances and NMSE, in a sandboxed child process.\n"
            "\n"
            "options:\n"
            "  --sets N           input sets (default 6: uniform, normal, wide, heavy-tailed,\n"
            "                     offset, large-magnitude; fewer sets leave the last out)\n"
            "  --seed N           seed for the input sets\n"
            "  --target T         cpu (default), opencl[:N], cuda[:N]\n"
            "  --time             also time the kernel when it verifies (every call started\n"
            "                     and timed by kforge, its inputs rotated and its outputs\n"
            "                     checked at random; a time under the roofline floor is\n"
            "                     `impossible`: the machine's calibration, measured once per\n"
            "                     machine and thread count (seconds, the first time) and cached)\n"
            "  --threads N        threads for the kernel (OMP_NUM_THREADS), enforced: the\n"
            "                     kernel runs on N CPUs\n"
            "  --timeout S        wall-clock limit per run (default 20)\n"
            "  -D NAME=VALUE      set a tunable / macro (repeatable)\n"
            "  --module-ref R     a module task's reference: cpu-f64 (default: the module in\n"
            "                     float64 on the CPU), cuda-f64 (in float64 on torch's CUDA\n"
            "                     device, the same tolerance) or cuda-f32 (in float32 on it,\n"
            "                     TF32 off, tolerance doubled); the GPU kinds are refused\n"
            "                     without a CUDA device in torch\n"
            "  --json             print the verification record as JSON\n"
            "  -h, --help         this help\n"
            "\n"
            "exit codes: 0 verified, 1 failed verification, 2 usage or task error, 3 internal\n");
}

static void usage_ops(FILE *f) {
    fprintf(f, "usage: kforge ops [--json]\n\nLists every operator of the op registry (src/ops/) with its class,\n"
               "arity, input domain, attributes (with defaults) and, per platform, whether the\n"
               "builtin generator can write its kernel (with --json: the reason where it cannot,\n"
               "the attribute types, the ATen names it is imported from and its PyTorch peer).\n");
}

static void usage_devices(FILE *f) {
    fprintf(f, "usage: kforge devices [--json]\n\nLists every platform compiled into kforge and every\n"
               "device each one sees (as PLATFORM:INDEX, the form --target takes), with its\n"
               "architecture data; a platform that cannot work here says why.\n");
}

int kf_cli_error(const kf_error *e);
static int print_error(const kf_error *e) { return kf_cli_error(e); }

int kf_cli_error(const kf_error *e) {
    char buf[1400];
    kf_error_format(e, buf, sizeof buf);
    fprintf(stderr, "kforge: %s\n", buf);
    switch (e->code) {
    case KF_ERR_ARG:
    case KF_ERR_IO:
    case KF_ERR_PARSE:
    case KF_ERR_TYPE:
    case KF_ERR_UNSUPPORTED: return EXIT_USAGE;
    default: return EXIT_INTERNAL;
    }
}

/* Strict numbers for flags: the whole text, no blanks, in range; an overflow is an error,
 * never a value cut to 32 bits. */
int kf_cli_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    if (!*s || isspace((unsigned char)*s)) return 0;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno == ERANGE || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int kf_cli_seed(const char *s, uint64_t *out) {
    long long v;
    if (*s == '-') {
        if (!kf_cli_int(s, LLONG_MIN, -1, &v)) return 0;
        *out = (uint64_t)v;
        return 1;
    }
    char *end;
    if (!*s || !isdigit((unsigned char)*s)) return 0;
    errno = 0;
    unsigned long long u = strtoull(s, &end, 10);
    if (*end || errno == ERANGE) return 0;
    *out = u;
    return 1;
}

int kf_cli_seconds(const char *s, double *out) {
    char *end;
    if (!*s || isspace((unsigned char)*s)) return 0;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(v) || !(v > 0)) return 0;
    *out = v;
    return 1;
}

#define MAX_THREADS 65536

static int synth_run(const kf_graph *g, const kf_loop_opts *opts, int json);
static int synth_resume(const char *ref, const char *store_path, int no_cache, int quiet, int json);

/* kforge synth --verbose: the run's per-phase breakdown after the table */
static int synth_verbose;

static int cmd_synth(int argc, char **argv) {
    static const struct option lo[] = {
        {"target", required_argument, 0, 't'}, {"iters", required_argument, 0, 'n'},
        {"time-budget", required_argument, 0, 'b'}, {"out", required_argument, 0, 'o'},
        {"threads", required_argument, 0, 'j'}, {"seed", required_argument, 0, 's'},
        {"recalibrate", no_argument, 0, 'R'}, {"json", no_argument, 0, 'J'},
        {"fresh-outputs", no_argument, 0, 'F'}, {"no-race", no_argument, 0, 'L'},
        {"memcheck", required_argument, 0, 'M'},
        {"agent", required_argument, 0, 'A'}, {"model", required_argument, 0, 'm'},
        {"llm-url", required_argument, 0, 'U'}, {"llm-protocol", required_argument, 0, 'P'},
        {"llm-config", required_argument, 0, 'C'}, {"max-calls", required_argument, 0, 'c'},
        {"max-tokens", required_argument, 0, 'k'}, {"reference", required_argument, 0, 'r'},
        {"prompts", required_argument, 0, 'p'}, {"builtin-iters", required_argument, 0, 'B'},
        {"llm-timeout", required_argument, 0, 'W'}, {"analysis", required_argument, 0, 'Y'},
        {"reply-tokens", required_argument, 0, 1001}, {"context", required_argument, 0, 1002},
        {"llm-retry-timeouts", no_argument, 0, 1003}, {"module-ref", required_argument, 0, 1004},
        {"store", required_argument, 0, 'S'}, {"no-store", no_argument, 0, 'N'},
        {"no-cache", no_argument, 0, 'K'}, {"resume", required_argument, 0, 'X'},
        {"no-reference", no_argument, 0, 'Z'}, {"pin", required_argument, 0, 'I'},
        {"no-fuse", no_argument, 0, '1'},
        {"start", required_argument, 0, 'G'}, {"counters", required_argument, 0, 'Q'},
        {"verbose", no_argument, 0, 'v'},
        {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    kf_loop_opts o;
    kf_loop_opts_default(&o);
    const char *f_store = NULL, *f_resume = NULL;
    int no_store = 0, no_cache = 0;
    /* the model's endpoint: flags override the environment, which overrides the file */
    const char *f_model = NULL, *f_url = NULL, *f_proto = NULL, *f_config = NULL;
    long f_calls = -1, f_tokens = -1, f_reply = -1, f_context = -1;
    int f_retry_timeouts = 0;
    double f_timeout = -1;
    int json = 0, quiet = 0, c;
    long long lv;
    double dv;
    static char pins[1024];
    pins[0] = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "qhv", lo, NULL)) != -1) {
        switch (c) {
        case 't': o.target = optarg; break;
        case 'n':
            if (!kf_cli_int(optarg, 1, INT_MAX, &lv)) { fprintf(stderr, "kforge synth: --iters needs an integer from 1 to %d, got '%s'\n", INT_MAX, optarg); return EXIT_USAGE; }
            o.iters = (int)lv;
            break;
        case 'b':
            if (!kf_cli_seconds(optarg, &dv)) { fprintf(stderr, "kforge synth: --time-budget needs a finite number of seconds > 0, got '%s'\n", optarg); return EXIT_USAGE; }
            o.time_budget_s = dv;
            break;
        case 'o': o.out_dir = optarg; break;
        case 'j':
            if (!kf_cli_int(optarg, 1, MAX_THREADS, &lv)) { fprintf(stderr, "kforge synth: --threads needs an integer from 1 to %d, got '%s'\n", MAX_THREADS, optarg); return EXIT_USAGE; }
            o.threads = (int)lv;
            break;
        case 's':
            if (!kf_cli_seed(optarg, &o.seed)) { fprintf(stderr, "kforge synth: --seed needs a 64-bit integer, got '%s'\n", optarg); return EXIT_USAGE; }
            break;
        case 'R': o.recalibrate = 1; break;
        case 'F': o.fresh_outputs = 1; break;
        case 'L': o.no_race = 1; break;
        case 'M':
            if (!strcmp(optarg, "auto")) o.memcheck = KF_MEMCHECK_AUTO;
            else if (!strcmp(optarg, "on")) o.memcheck = KF_MEMCHECK_ON;
            else if (!strcmp(optarg, "every")) o.memcheck = KF_MEMCHECK_EVERY;
            else if (!strcmp(optarg, "off")) o.memcheck = KF_MEMCHECK_OFF;
            else { fprintf(stderr, "kforge synth: --memcheck takes auto, on, every or off, got '%s'\n", optarg); return EXIT_USAGE; }
            break;
        case 'A':
            if (!strcmp(optarg, "builtin")) o.agent = KF_AGENT_BUILTIN;
            else if (!strcmp(optarg, "llm")) o.agent = KF_AGENT_LLM;
            else if (!strcmp(optarg, "both")) o.agent = KF_AGENT_BOTH;
            else { fprintf(stderr, "kforge synth: --agent takes builtin, llm or both, got '%s'\n", optarg); return EXIT_USAGE; }
            break;
        case 'm': f_model = optarg; break;
        case 'U': f_url = optarg; break;
        case 'P':
            if (strcmp(optarg, "openai") && strcmp(optarg, "anthropic") && strcmp(optarg, "auto")) {
                fprintf(stderr, "kforge synth: --llm-protocol takes openai, anthropic or auto, got '%s'\n", optarg);
                return EXIT_USAGE;
            }
            f_proto = optarg;
            break;
        case 'C': f_config = optarg; break;
        case 'c':
            if (!kf_cli_int(optarg, 1, INT_MAX, &lv)) { fprintf(stderr, "kforge synth: --max-calls needs an integer from 1 to %d, got '%s'\n", INT_MAX, optarg); return EXIT_USAGE; }
            f_calls = lv;
            break;
        case 'k':
            if (!kf_cli_int(optarg, 1, LONG_MAX, &lv)) { fprintf(stderr, "kforge synth: --max-tokens needs an integer from 1 to %ld, got '%s'\n", LONG_MAX, optarg); return EXIT_USAGE; }
            f_tokens = lv;
            break;
        case 1001:
            if (!kf_cli_int(optarg, 1, 100000000, &lv)) { fprintf(stderr, "kforge synth: --reply-tokens needs an integer from 1 to 100000000, got '%s'\n", optarg); return EXIT_USAGE; }
            f_reply = lv;
            break;
        case 1002:
            if (!kf_cli_int(optarg, 1, 100000000, &lv)) { fprintf(stderr, "kforge synth: --context needs an integer from 1 to 100000000 (tokens), got '%s'\n", optarg); return EXIT_USAGE; }
            f_context = lv;
            break;
        case 1003: f_retry_timeouts = 1; break;
        case 1004:
            o.module_ref = kf_module_ref_parse(optarg);
            if (o.module_ref < 0) { fprintf(stderr, "kforge synth: --module-ref takes cpu-f64, cuda-f64 or cuda-f32, got '%s'\n", optarg); return EXIT_USAGE; }
            break;
        case 'W':
            if (!kf_cli_seconds(optarg, &dv)) { fprintf(stderr, "kforge synth: --llm-timeout needs a finite number of seconds > 0, got '%s'\n", optarg); return EXIT_USAGE; }
            f_timeout = dv;
            break;
        case 'r': o.reference_path = optarg; break;
        case 'Z': o.no_reference = 1; break;
        case 'p': o.prompts_dir = optarg; break;
        case 'B':
            if (!kf_cli_int(optarg, 1, INT_MAX, &lv)) { fprintf(stderr, "kforge synth: --builtin-iters needs an integer from 1 to %d, got '%s'\n", INT_MAX, optarg); return EXIT_USAGE; }
            o.builtin_iters = (int)lv;
            break;
        case 'Y':
            if (!strcmp(optarg, "builtin")) o.analysis = KF_ANALYSIS_BUILTIN;
            else if (!strcmp(optarg, "off")) o.analysis = KF_ANALYSIS_OFF;
            else if (!strcmp(optarg, "llm")) o.analysis = KF_ANALYSIS_LLM;
            else { fprintf(stderr, "kforge synth: --analysis takes builtin, off or llm, got '%s'\n", optarg); return EXIT_USAGE; }
            break;
        case 'G':
            if (!strcmp(optarg, "default")) o.start_random = 0;
            else if (!strcmp(optarg, "random")) o.start_random = 1;
            else { fprintf(stderr, "kforge synth: --start takes default or random, got '%s'\n", optarg); return EXIT_USAGE; }
            break;
        case 'Q':
            if (!strcmp(optarg, "off")) o.counters = KF_COUNTERS_OFF;
            else if (!strcmp(optarg, "ncu")) o.counters = KF_COUNTERS_NCU;
            else { fprintf(stderr, "kforge synth: --counters takes off or ncu, got '%s'\n", optarg); return EXIT_USAGE; }
            break;
        case '1':
        case 'I': {
            if (c == '1') optarg = (char *)"*.epi=0 *.red=0";
            size_t have = strlen(pins);
            if (have + strlen(optarg) + 2 > sizeof pins) { fprintf(stderr, "kforge synth: too many --pin values\n"); return EXIT_USAGE; }
            snprintf(pins + have, sizeof pins - have, "%s%s", have ? " " : "", optarg);
            o.pins = pins;
            break;
        }
        case 'S': f_store = optarg; break;
        case 'N': no_store = 1; break;
        case 'K': no_cache = 1; break;
        case 'X': f_resume = optarg; break;
        case 'J': json = 1; break;
        case 'q': quiet = 1; break;
        case 'v': synth_verbose = 1; break;
        case 'h': usage_synth(stdout); return 0;
        default: usage_synth(stderr); return EXIT_USAGE;
        }
    }
    if (f_resume) {
        if (optind != argc || no_store || pins[0] || o.start_random || o.counters || o.module_ref) {
            fprintf(stderr, "kforge synth: --resume takes the task and options from the store: give no task "
                            "file%s\n", no_store ? " and not --no-store" : optind == argc ? " and no --pin, --start, --counters or --module-ref" : "");
            return EXIT_USAGE;
        }
        return synth_resume(f_resume, f_store, no_cache, quiet, json);
    }
    if (o.reference_path && o.no_reference) {
        fprintf(stderr, "kforge synth: --reference FILE and --no-reference contradict each other\n");
        return EXIT_USAGE;
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "kforge synth: expected one task file, got %d arguments\n", argc - optind);
        usage_synth(stderr);
        return EXIT_USAGE;
    }
    kf_error err = {0};
    kf_graph *g = NULL;
    double t_parse = kf_now();
    if (kf_parse_file(argv[optind], &g, &err) != KF_OK) return print_error(&err);
    o.parse_s = kf_now() - t_parse;
    o.table = quiet ? NULL : (json ? stderr : stdout);
    kf_store *store = NULL;
    if (!no_store) {
        int src = kf_cli_store_open(f_store, 1, &store);
        if (src) {
            kf_graph_free(g);
            return src;
        }
    }
    o.store = store;
    o.no_cache = no_cache;
    o.target_spec = o.target;
    kf_llm_config llm;
    char *task_text = NULL;
    if (o.agent != KF_AGENT_BUILTIN) {
        kf_llm_config_default(&llm);
        if (kf_llm_config_file(&llm, f_config, &err) != KF_OK) {
            kf_graph_free(g);
            return print_error(&err);
        }
        kf_llm_config_env(&llm);
        if (f_url) snprintf(llm.url, sizeof llm.url, "%s", f_url), snprintf(llm.origin, sizeof llm.origin, "flags");
        if (f_model) snprintf(llm.model, sizeof llm.model, "%s", f_model);
        if (f_proto) llm.protocol = !strcmp(f_proto, "openai") ? KF_LLM_OPENAI : !strcmp(f_proto, "anthropic") ? KF_LLM_ANTHROPIC : KF_LLM_AUTO;
        if (f_calls > 0) llm.max_calls = (int)f_calls;
        if (f_tokens > 0) llm.max_total_tokens = f_tokens;
        if (f_timeout > 0) llm.timeout_s = f_timeout;
        if (f_reply > 0) llm.max_tokens = (int)f_reply;
        if (f_context > 0) llm.context_tokens = f_context;
        if (f_retry_timeouts) llm.retry_timeouts = 1;
        o.llm = &llm;
    }
    /* the task's text: shown to the model, and the store keeps it (resume, task hash) */
    if (kf_read_file_max(argv[optind], KF_TASK_MAX_BYTES, &task_text, NULL, &err) != KF_OK) {
        kf_graph_free(g);
        kf_store_close(store);
        return print_error(&err);
    }
    o.task_text = task_text;
    int rc = synth_run(g, &o, json);
    kf_graph_free(g);
    free(task_text);
    kf_store_close(store);
    return rc;
}

/* Run the loop and report: the part of synth that --resume shares. */
static int synth_run(const kf_graph *g, const kf_loop_opts *opts, int json) {
    kf_loop_opts o = *opts;
    kf_error err = {0};
    kf_run_result r;
    kf_status st = kf_loop_run(g, &o, &r, &err);
    int rc;
    if (st != KF_OK) {
        rc = print_error(&err);
    } else {
        rc = r.best >= 0 ? 0 : EXIT_VERIFY;
        if (r.best < 0 && g->module && r.outcome[0]) {
            /* a module task: why no kernel, and why nothing of the builtin's stands in */
            fprintf(stderr, "kforge: %s\n", r.outcome);
        } else if (r.best < 0 && !o.table) {
            /* -q hides the table, not why the run found nothing (an LLM run whose endpoint
             * failed ended in silence): the stop reason and the last iteration's verdict */
            const kf_iter_record *last = r.niters ? &r.iters[r.niters - 1] : NULL;
            char detail[600] = "";
            if (last) snprintf(detail, sizeof detail, "%s", last->res.detail);
            for (char *p = detail; *p; p++)
                if (*p == '\n' || *p == '\r' || *p == '\t') *p = ' ';
            fprintf(stderr, "kforge: no verified kernel in %d iteration%s%s%s%s%s%s%s\n", r.niters,
                    r.niters == 1 ? "" : "s", r.stop_reason[0] ? "; stopped: " : "", r.stop_reason,
                    last ? "; the last was " : "", last ? kf_vstatus_name(last->res.status) : "",
                    detail[0] ? ": " : "", detail);
        }
        if (o.table && r.best >= 0)
            fprintf(o.table, "wrote %s/%s, manifest.json, run.json\n", r.out_dir,
                    kf_loop_kernel_file(r.dev.platform));
        if (synth_verbose) kf_phase_times_print(stderr, &r.phases);
        if (r.store_error[0]) {
            /* said whatever -q: the run's record is incomplete, and the exit says so */
            fprintf(stderr, "kforge: the store did not record all of the run (%d write%s failed, the first: %s)%s%.10s\n",
                    r.store_failures, r.store_failures == 1 ? "" : "s", r.store_error,
                    r.run_id[0] ? "; incomplete in the store: run " : "", r.run_id);
            rc = EXIT_USAGE;
        } else if (o.table && r.run_id[0]) {
            fprintf(o.table, "run %.10s stored (%d of %d iterations from the cache): kforge show %.10s\n",
                    r.run_id, r.cache_hits, r.niters, r.run_id);
        }
        if (json) {
            char path[600];
            snprintf(path, sizeof path, "%s/run.json", r.out_dir);
            char *text = NULL;
            if (kf_read_file(path, &text, NULL, &err) == KF_OK) {
                fputs(text, stdout);
                fputc('\n', stdout);
                free(text);
            }
        }
    }
    kf_run_result_free(&r);
    return rc;
}

/* kforge synth --resume RUN: the stored run's task and options, continued. */
static int synth_resume(const char *ref, const char *store_path, int no_cache, int quiet, int json) {
    kf_store *store = NULL;
    int rc = kf_cli_store_open(store_path, 0, &store);
    if (rc) return rc;
    if (kf_store_readonly(store)) { /* a resume records every iteration: refuse before any runs */
        fprintf(stderr, "kforge synth --resume: the store %s can only be read here (a read-only file, folder "
                        "or mount); a resumed run must record its iterations\n",
                kf_store_path(store));
        kf_store_close(store);
        return EXIT_USAGE;
    }
    kf_run_resume rs;
    kf_error err = {0};
    if (kf_run_resume_load(store, ref, &rs, &err) != KF_OK) {
        rc = print_error(&err);
        kf_store_close(store);
        return rc;
    }
    rs.o.no_cache = no_cache;
    rs.o.table = quiet ? NULL : (json ? stderr : stdout);
    if (rs.o.table)
        fprintf(rs.o.table, "resuming run %.10s (%s, %d of %d iterations stored, seed %llu)\n", rs.info.id,
                rs.info.task_name, rs.info.iters_done, rs.info.iters_planned, (unsigned long long)rs.info.seed);
    rc = synth_run(rs.g, &rs.o, json);
    kf_run_resume_free(&rs);
    kf_store_close(store);
    return rc;
}

static json_t *vresult_json(const kf_vresult *r) {
    json_t *j = json_object();
    json_object_set_new(j, "status", json_string(kf_vstatus_name(r->status)));
    json_object_set_new(j, "detail", json_string(r->detail));
    json_object_set_new(j, "sets_run", json_integer(r->sets_run));
    json_object_set_new(j, "bad_set", json_integer(r->bad_set));
    json_object_set_new(j, "bad_dist", json_string(r->bad_dist));
    json_object_set_new(j, "bad_output", json_integer(r->bad_output));
    json_object_set_new(j, "first_bad", json_integer(r->first_bad));
    json_object_set_new(j, "got", json_real(r->got));
    json_object_set_new(j, "want", json_real(r->want));
    json_object_set_new(j, "max_abs_err", json_real(r->max_abs_err));
    json_object_set_new(j, "max_rel_err", json_real(r->max_rel_err));
    json_object_set_new(j, "nmse", json_real(r->nmse));
    /* the worst errors of each input distribution's sets (an accuracy that depends on the
     * inputs' magnitude shows here, not in the overall worst) */
    json_t *bd = json_object();
    for (int d = 0; d < KF_VERIFY_NDIST; d++) {
        if (!(r->dist_seen & (1u << d))) continue;
        json_t *e = json_object();
        json_object_set_new(e, "nmse", json_real(r->dist_nmse[d]));
        json_object_set_new(e, "max_rel_err", json_real(r->dist_max_rel[d]));
        json_object_set_new(bd, kf_verify_dist_name(d), e);
    }
    json_object_set_new(j, "by_dist", bd);
    if (r->resources[0]) json_object_set_new(j, "resources", json_string(r->resources));
    if (r->timed) {
        json_object_set_new(j, "time_ms", json_real(r->time_ms));
        json_object_set_new(j, "time_min_ms", json_real(r->time_min_ms));
        json_object_set_new(j, "reps", json_integer(r->reps));
        json_object_set_new(j, "time_stop", json_string(r->time_stop));
        /* kforge's own clock around each call (on a device it bounds time_ms), and the
         * CPU-time witness (docs/kernel-contract.md, the threat model) */
        json_object_set_new(j, "time_host_ms", json_real(r->time_host_ms));
        if (r->time_allow_ms > 0) {
            json_object_set_new(j, "time_gap_ms", json_real(r->time_gap_ms));
            json_object_set_new(j, "time_wait_ms", json_real(r->time_wait_ms));
            json_object_set_new(j, "time_ping_ms", json_real(r->time_ping_ms));
            json_object_set_new(j, "time_allow_ms", json_real(r->time_allow_ms));
        }
        json_object_set_new(j, "timing_cpu_s", json_real(r->timing_cpu_s));
        json_object_set_new(j, "timing_run_s", json_real(r->timing_run_s));
    }
    json_object_set_new(j, "run_wall_s", json_real(r->run_wall_s));
    return j;
}

static int cmd_verify(int argc, char **argv) {
    static const struct option lo[] = {
        {"sets", required_argument, 0, 'n'}, {"seed", required_argument, 0, 's'},
        {"time", no_argument, 0, 'T'}, {"threads", required_argument, 0, 'j'},
        {"timeout", required_argument, 0, 'w'}, {"json", no_argument, 0, 'J'},
        {"target", required_argument, 0, 't'}, {"module-ref", required_argument, 0, 1004},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *target = "cpu";
    kf_verify_opts vo;
    kf_verify_opts_default(&vo);
    int json = 0, c;
    long long lv;
    double dv;
    char flags[512] = "";
    optind = 1;
    while ((c = getopt_long(argc, argv, "hD:", lo, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (!kf_cli_int(optarg, 1, 16, &lv)) { fprintf(stderr, "kforge verify: --sets needs 1..16, got '%s'\n", optarg); return EXIT_USAGE; }
            vo.nsets = (int)lv;
            break;
        case 's':
            if (!kf_cli_seed(optarg, &vo.seed)) { fprintf(stderr, "kforge verify: --seed needs a 64-bit integer, got '%s'\n", optarg); return EXIT_USAGE; }
            break;
        case 'T': vo.time_it = 1; break;
        case 'j':
            if (!kf_cli_int(optarg, 1, MAX_THREADS, &lv)) { fprintf(stderr, "kforge verify: --threads needs an integer from 1 to %d, got '%s'\n", MAX_THREADS, optarg); return EXIT_USAGE; }
            vo.threads = (int)lv;
            break;
        case 'w':
            if (!kf_cli_seconds(optarg, &dv)) { fprintf(stderr, "kforge verify: --timeout needs a finite number of seconds > 0, got '%s'\n", optarg); return EXIT_USAGE; }
            vo.wall_limit_s = dv;
            if (vo.cpu_limit_s < dv) vo.cpu_limit_s = dv * 4;
            break;
        case 'D': {
            size_t used = strlen(flags);
            snprintf(flags + used, sizeof flags - used, "%s-D%s", used ? " " : "", optarg);
            break;
        }
        case 'J': json = 1; break;
        case 't': target = optarg; break;
        case 1004:
            vo.module_ref = kf_module_ref_parse(optarg);
            if (vo.module_ref < 0) { fprintf(stderr, "kforge verify: --module-ref takes cpu-f64, cuda-f64 or cuda-f32, got '%s'\n", optarg); return EXIT_USAGE; }
            break;
        case 'h': usage_verify(stdout); return 0;
        default: usage_verify(stderr); return EXIT_USAGE;
        }
    }
    if (optind + 2 != argc) {
        fprintf(stderr, "kforge verify: expected TASK.kf KERNEL.c\n");
        usage_verify(stderr);
        return EXIT_USAGE;
    }
    kf_error err = {0};
    kf_graph *g = NULL;
    char *src = NULL;
    kf_backend *be = NULL;
    kf_verify_ctx *ctx = NULL;
    kf_candidate cand;
    memset(&cand, 0, sizeof cand);
    int rc = EXIT_INTERNAL;
    char work[] = "/tmp/kforge-verify-XXXXXX";
    if (kf_parse_file(argv[optind], &g, &err) != KF_OK) { rc = print_error(&err); goto out; }
    if (kf_read_file(argv[optind + 1], &src, NULL, &err) != KF_OK) { rc = print_error(&err); goto out; }
    if (kf_backend_open(target, &be, &err) != KF_OK) { rc = print_error(&err); goto out; }
    if (kf_candidate_init(&cand, be->info.platform, src, NULL, &err) != KF_OK) {
        snprintf(err.file, sizeof err.file, "%s", argv[optind + 1]);
        rc = print_error(&err);
        goto out;
    }
    snprintf(cand.flags, sizeof cand.flags, "%s", flags);
    snprintf(cand.label, sizeof cand.label, "%s", argv[optind + 1]);
    /* a device kernel must declare its launch plan; say so before compiling (a CUDA source
     * without launch lines is the nvcc form, with no plan to check). The candidate carries
     * the plan: verification reads it without parsing again. */
    if (kf_platform_declares_plan(be->info.platform, src)) {
        const kf_launch_plan *plan;
        if (kf_candidate_plan(&cand, g->ninputs + g->noutputs, &plan, &err) != KF_OK) {
            snprintf(err.file, sizeof err.file, "%s", argv[optind + 1]);
            rc = print_error(&err);
            goto out;
        }
    }
    if (!mkdtemp(work)) { fprintf(stderr, "kforge verify: cannot create a scratch directory in /tmp\n"); goto out; }
    vo.workdir = work;
    if (vo.time_it) {
        /* the roofline floor, as synth sets it: a time under it is `impossible` here too
         * (the cached calibration, measured once per machine and thread count) */
        kf_ceilings ceil;
        kf_error cerr = {0};
        if (kf_calib_ceilings(be, vo.threads, KF_CALIB_CACHED_OR_MEASURE, &ceil, &cerr) == KF_OK) {
            if (kf_graph_has_mm16(g)) {
                char said[512];
                kf_calib_mm16(&be->info, &ceil, said, sizeof said);
                fprintf(stderr, "kforge verify: floor: %s\n", said);
            }
            if (kf_graph_has_mm32(g) && kf_device_is_gpu(&be->info)) {
                char said[512];
                kf_calib_tf32(&be->info, &ceil, said, sizeof said);
                fprintf(stderr, "kforge verify: floor: %s\n", said);
            }
            kf_roofline roof;
            kf_roofline_of(g, &ceil, &roof);
            vo.floor_s = roof.floor_s;
        } else {
            fprintf(stderr, "kforge verify: no roofline floor (the device's ceilings could not be "
                    "measured: %s); times are checked only for being positive and finite\n", cerr.msg);
        }
    }
    if (kf_verify_ctx_new(g, &vo, &ctx, &err) != KF_OK) { rc = print_error(&err); goto out; }
    kf_vresult r;
    if (kf_verify_candidate(ctx, be, &cand, &r, &err) != KF_OK) { rc = print_error(&err); goto out; }
    if (json) {
        json_t *j = vresult_json(&r);
        json_object_set_new(j, "task", json_string(g->name));
        json_object_set_new(j, "kernel", json_string(argv[optind + 1]));
        if (vo.floor_s > 0) json_object_set_new(j, "floor_ms", json_real(vo.floor_s * 1e3));
        if (g->module) json_object_set_new(j, "reference", json_string(kf_module_ref_describe(vo.module_ref)));
        char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        puts(text);
        free(text);
        json_decref(j);
    } else {
        printf("%s: %s (%d input set%s)\n", argv[optind + 1], kf_vstatus_name(r.status), r.sets_run,
               r.sets_run == 1 ? "" : "s");
        if (g->module) printf("  reference: %s\n", kf_module_ref_describe(vo.module_ref));
        if (r.status != KF_V_OK && r.detail[0]) printf("  %s\n", r.detail);
        if (r.status == KF_V_OK)
            printf("  max abs err %.3g, max rel err %.3g, nmse %.3g\n", r.max_abs_err, r.max_rel_err, r.nmse);
        if (r.status == KF_V_OK && kf_log_level() >= 1) {
            printf("  nmse by input distribution:");
            for (int d = 0; d < KF_VERIFY_NDIST; d++)
                if (r.dist_seen & (1u << d)) printf(" %s %.3g", kf_verify_dist_name(d), r.dist_nmse[d]);
            printf("\n");
        }
        if (r.timed) printf("  time %.4f ms (median of %d, min %.4f ms)\n", r.time_ms, r.reps, r.time_min_ms);
        if (r.timed && vo.floor_s > 0)
            printf("  roofline floor %.4f ms (%.1f%% of floor)\n", vo.floor_s * 1e3, 100 * vo.floor_s * 1e3 / r.time_ms);
        if (r.resources[0]) printf("  resources: %s\n", r.resources);
    }
    rc = r.status == KF_V_OK ? 0 : EXIT_VERIFY;
out:
    kf_verify_ctx_free(ctx);
    kf_backend_close(be);
    kf_candidate_clear(&cand);
    free(src);
    kf_graph_free(g);
    if (strstr(work, "XXXXXX") == NULL) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
        if (system(cmd) != 0) fprintf(stderr, "kforge verify: could not remove %s\n", work);
    }
    return rc;
}

/* The platforms of the op x platform matrix: every row of the platform table. */
#define N_OPS_PLATFORMS kf_platform_count()
#define ops_platform(p) (kf_platform_at(p)->name)

static int cmd_ops(int argc, char **argv) {
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage_ops(stdout); return 0; }
        else { fprintf(stderr, "kforge ops: unknown option '%s'\n", argv[i]); usage_ops(stderr); return EXIT_USAGE; }
    }
    kf_error err = {0};
    if (kf_ops_check(&err) != KF_OK) return kf_cli_error(&err);
    json_t *arr = json ? json_array() : NULL;
    if (!json) {
        printf("%-12s %-10s %-6s %-7s", "op", "class", "inputs", "domain");
        for (int p = 0; p < N_OPS_PLATFORMS; p++) printf(" %-6s", ops_platform(p));
        printf(" attributes (defaults)\n");
    }
    int unsupported = 0;
    for (int k = 0; k < KF_OP_COUNT; k++) {
        const kf_op_def *in = kf_op_get((kf_op)k);
        char arity[16], attrs[256];
        if (in->min_in == in->max_in) snprintf(arity, sizeof arity, "%d", in->min_in);
        else snprintf(arity, sizeof arity, "%d-%d", in->min_in, in->max_in);
        const char *dom = in->domain == KF_DOMAIN_POS ? "x>0" : "any";
        size_t used = 0;
        attrs[0] = 0;
        json_t *jattrs = json ? json_array() : NULL, *jaten = json ? json_array() : NULL;
        for (int a = 0; in->attrs[a].name; a++) {
            const kf_attr_def *ad = &in->attrs[a];
            used += (size_t)snprintf(attrs + used, used < sizeof attrs ? sizeof attrs - used : 0,
                                     "%s%s=%s", a ? ", " : "", ad->name, ad->dflt);
            if (json)
                json_array_append_new(jattrs, json_pack("{s:s, s:s, s:s}", "name", ad->name, "type",
                                                        kf_attr_type_name(ad->type), "default", ad->dflt));
        }
        for (int a = 0; json && a < KF_MAX_OP_ATEN && in->aten[a]; a++)
            json_array_append_new(jaten, json_string(in->aten[a]));
        json_t *jplat = json ? json_object() : NULL;
        if (!json)
            printf("%-12s %-10s %-6s %-7s", in->name, kf_op_class_name(in->cls), arity, dom);
        for (int p = 0; p < N_OPS_PLATFORMS; p++) {
            kf_error why = {0};
            int ok = kf_synth_op_support((kf_op)k, ops_platform(p), &why) == KF_OK;
            unsupported += !ok;
            if (json)
                json_object_set_new(jplat, ops_platform(p),
                                    ok ? json_pack("{s:b}", "supported", 1)
                                       : json_pack("{s:b, s:s}", "supported", 0, "reason", why.msg));
            else
                printf(" %-6s", ok ? "yes" : "no");
        }
        if (json) {
            json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:i, s:o, s:s, s:f, s:f, s:s, s:o, s:s, s:o}",
                                  "name", in->name, "class", kf_op_class_name(in->cls), "kind",
                                  kf_op_kind_name(in->kind), "min_inputs", in->min_in,
                                  "max_inputs", in->max_in, "attributes", jattrs, "domain", dom,
                                  "magnitude", in->mag > 0 ? in->mag : KF_MAG_DEFAULT,
                                  "flops", in->flops, "doc", in->doc, "aten", jaten, "torch",
                                  in->torch, "platforms", jplat);
            json_array_append_new(arr, o);
        } else {
            printf(" %s\n", attrs[0] ? attrs : "-");
        }
    }
    if (json) {
        char *text = json_dumps(arr, JSON_INDENT(2));
        puts(text);
        free(text);
        json_decref(arr);
    } else if (unsupported) {
        printf("\n'no': the builtin generator has no template for that class on that platform "
               "(kforge ops --json gives each reason); the llm agent may still write one.\n");
    }
    return 0;
}

static json_t *device_info_json(const kf_device_info *d) {
    json_t *j = json_pack("{s:s, s:i, s:s, s:s, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:s, s:s}",
                          "platform", d->platform, "index", d->index, "name", d->name, "arch",
                          d->arch, "cores", d->cores, "threads", d->threads, "simd_bits",
                          d->simd_bits, "l1d_bytes", (json_int_t)d->l1d_bytes, "l2_bytes",
                          (json_int_t)d->l2_bytes, "l3_bytes", (json_int_t)d->l3_bytes,
                          "mem_bytes", (json_int_t)d->mem_bytes, "compiler", d->compiler,
                          "flags", d->flags);
    if (!kf_platform_is_host(d->platform)) {
        json_object_update_new(j, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:[i,i,i], "
                                            "s:I, s:I, s:I, s:i, s:i, s:I, s:b}",
                                            "device_type", d->device_type, "vendor", d->vendor,
                                            "driver", d->driver, "version", d->version,
                                            "lang_version", d->lang_version, "platform_name",
                                            d->platform_name, "compute_units", d->compute_units,
                                            "max_work_group", d->max_wg, "max_work_items",
                                            d->max_wi[0], d->max_wi[1], d->max_wi[2],
                                            "local_mem_bytes", (json_int_t)d->local_mem_bytes,
                                            "global_mem_bytes", (json_int_t)d->global_mem_bytes,
                                            "max_alloc_bytes", (json_int_t)d->max_alloc_bytes,
                                            "subgroup_size", d->subgroup_size, "base_align_bytes",
                                            d->base_align_bytes, "clock_mhz", (json_int_t)d->clock_mhz,
                                            "fp64", d->fp64));
    }
    return j;
}

static void device_info_print(const kf_device_info *d) {
    printf("%s:%d  %s\n", d->platform, d->index, d->name);
    if (kf_platform_is_host(d->platform)) {
        printf("        arch %s, %d cores / %d threads, SIMD %d bits\n", d->arch, d->cores,
               d->threads, d->simd_bits);
        printf("        L1d %lld KiB, L2 %lld KiB, L3 %lld MiB, memory %lld MiB\n",
               (long long)d->l1d_bytes >> 10, (long long)d->l2_bytes >> 10,
               (long long)d->l3_bytes >> 20, (long long)d->mem_bytes >> 20);
        printf("        compiler %s\n        flags %s\n", d->compiler, d->flags);
        return;
    }
    printf("        %s device of %s (%s), driver %s\n", d->device_type, d->vendor,
           d->platform_name, d->driver);
    printf("        %s, %s\n", d->version, d->lang_version);
    printf("        %d compute units at %lld MHz, work-groups up to %d (%d x %d x %d)\n",
           d->compute_units, (long long)d->clock_mhz, d->max_wg, d->max_wi[0], d->max_wi[1],
           d->max_wi[2]);
    printf("        local memory %lld KiB, global %lld MiB (max buffer %lld MiB), "
           "cache %lld KiB\n",
           (long long)d->local_mem_bytes >> 10, (long long)d->global_mem_bytes >> 20,
           (long long)d->max_alloc_bytes >> 20,
           (long long)(d->l3_bytes > 0 ? d->l3_bytes : d->l2_bytes) >> 10);
    if (d->subgroup_size > 0)
        printf("        sub-groups of %d, fp64 %s\n", d->subgroup_size, d->fp64 ? "yes" : "no");
    else
        printf("        no sub-group operations, fp64 %s\n", d->fp64 ? "yes" : "no");
    printf("        build options %s\n", d->flags);
}

static int cmd_devices(int argc, char **argv) {
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage_devices(stdout); return 0; }
        else { fprintf(stderr, "kforge devices: unknown option '%s'\n", argv[i]); return EXIT_USAGE; }
    }
    json_t *arr = json ? json_array() : NULL;
    for (const char *const *n = kf_backend_names(); *n; n++) {
        kf_device_info *infos = NULL;
        int count = 0;
        kf_error err = {0};
        if (kf_backend_list(*n, &infos, &count, &err) != KF_OK) {
            if (json) json_array_append_new(arr, json_pack("{s:s, s:s}", "platform", *n, "error", err.msg));
            else printf("%s  unavailable: %s\n", *n, err.msg);
            continue;
        }
        for (int k = 0; k < count; k++) {
            if (json) json_array_append_new(arr, device_info_json(&infos[k]));
            else device_info_print(&infos[k]);
        }
        free(infos);
    }
    if (json) {
        char *text = json_dumps(arr, JSON_INDENT(2));
        puts(text);
        free(text);
        json_decref(arr);
    } else {
        printf("\npick one with --target PLATFORM[:INDEX] (e.g. --target opencl:0)\n");
    }
    return 0;
}

/* Out of memory anywhere in kforge: the documented exit 3 with a message, not an abort
 * (SIGABRT, exit 134, a core file). */
static void oom_exit(size_t requested) {
    char msg[120];
    int n = snprintf(msg, sizeof msg, "kforge: out of memory (asked for %zu bytes)\n", requested);
    if (n > 0 && write(2, msg, (size_t)n) < 0) {} /* no stdio: it may need memory */
    _exit(EXIT_INTERNAL);
}

static int dispatch(int argc, char **argv);

int main(int argc, char **argv) {
    /* candidates run as our children: keep them out of our memory and environment
     * (/proc/PID/environ holds the API key) */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    kf_set_oom_hook(oom_exit);
    /* KFORGE_LOG=2: the library's diagnostic lines (the sandbox's per-run breakdown, the
     * device-time checks) on stderr; 1 (default) warnings only, 0 none */
    const char *lv = getenv("KFORGE_LOG");
    if (lv && lv[0] >= '0' && lv[0] <= '9' && !lv[1]) kf_log_set_level(lv[0] - '0');
    int rc = dispatch(argc, argv);
    /* what was printed must have arrived: `kforge runs --json > full-disk` is no success */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kforge: cannot write the output: %s\n", strerror(errno ? errno : EIO));
        if (rc == 0) rc = EXIT_USAGE;
    }
    return rc;
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        usage_main(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "verify")) return cmd_verify(argc - 1, argv + 1);
    if (!strcmp(cmd, "ops")) return cmd_ops(argc - 1, argv + 1);
    if (!strcmp(cmd, "devices")) return cmd_devices(argc - 1, argv + 1);
    if (!strcmp(cmd, "calibrate")) return kf_cli_calibrate(argc - 1, argv + 1);
    if (!strcmp(cmd, "analyze")) return kf_cli_analyze(argc - 1, argv + 1);
    if (!strcmp(cmd, "import")) return kf_cli_import(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return kf_cli_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "export")) return kf_cli_export(argc - 1, argv + 1);
    if (!strcmp(cmd, "runs")) return kf_cli_runs(argc - 1, argv + 1);
    if (!strcmp(cmd, "show")) return kf_cli_show(argc - 1, argv + 1);
    if (!strcmp(cmd, "report")) return kf_cli_report(argc - 1, argv + 1);
    if (!strcmp(cmd, "store")) return kf_cli_store(argc - 1, argv + 1);
    if (!strcmp(cmd, "slurm")) return kf_cli_slurm(argc - 1, argv + 1);
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("kforge %s\n", kVersion);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
        const char *sub = argc > 2 ? argv[2] : NULL;
        if (!sub) usage_main(stdout);
        else if (!strcmp(sub, "synth")) usage_synth(stdout);
        else if (!strcmp(sub, "verify")) usage_verify(stdout);
        else if (!strcmp(sub, "ops")) usage_ops(stdout);
        else if (!strcmp(sub, "devices")) usage_devices(stdout);
        else if (!strcmp(sub, "calibrate")) {
            char *hv[] = {"calibrate", "--help", NULL};
            return kf_cli_calibrate(2, hv);
        } else if (!strcmp(sub, "analyze")) {
            char *hv[] = {"analyze", "--help", NULL};
            return kf_cli_analyze(2, hv);
        } else if (!strcmp(sub, "runs") || !strcmp(sub, "show")) {
            char *hv[] = {(char *)sub, "--help", NULL};
            return !strcmp(sub, "runs") ? kf_cli_runs(2, hv) : kf_cli_show(2, hv);
        } else if (!strcmp(sub, "report")) {
            char *hv[] = {"report", "--help", NULL};
            return kf_cli_report(2, hv);
        } else if (!strcmp(sub, "store") || !strcmp(sub, "slurm")) {
            char *hv[] = {(char *)sub, "--help", NULL};
            return !strcmp(sub, "store") ? kf_cli_store(2, hv) : kf_cli_slurm(2, hv);
        } else if (!strcmp(sub, "import") || !strcmp(sub, "bench") || !strcmp(sub, "export")) {
            char *hv[] = {(char *)sub, "--help", NULL};
            return !strcmp(sub, "import") ? kf_cli_import(2, hv)
                   : !strcmp(sub, "bench") ? kf_cli_bench(2, hv) : kf_cli_export(2, hv);
        }
        else { fprintf(stderr, "kforge: no command '%s'\n", sub); return EXIT_USAGE; }
        return 0;
    }
    fprintf(stderr, "kforge: unknown command '%s'\n\n", cmd);
    usage_main(stderr);
    return EXIT_USAGE;
}
