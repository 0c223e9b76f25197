/*
 * The reference of a module task (docs/task-format.md, "Module tasks"): the PyTorch module
 * itself, run in float64 on the CPU by a separate process, on the input sets drawn here.
 *
 * Design note. The sets are drawn as for a graph task (verify.c's draw, the same
 * distributions, seeds and rounding to the input's dtype). The params are not drawn here:
 * set 0 holds the module's weights file, and every other set the params the reference
 * process draws for it under the seed as the module's own init would (w.S), so that the
 * reference and the candidate use the same weights and a kernel that hard-codes the
 * module's weights fails from set 1 on. Each set's forward arguments go, as raw bytes, to a
 * private folder (WORKDIR/kf-ref-XXXXXX, mode 0700); `python3 -m kforge_torch.reference
 * SPEC DIR SETS SEED` loads the module, draws the params, runs forward in float64 on each
 * set with them and writes the outputs back as float64 (out.S), and marks a set (of.S)
 * where the module in float32 gives
 * an infinity or NaN that float64 does not: no float32 kernel can be held to such a
 * reference, so that set, if it is an offset or large-magnitude one, is drawn again at a
 * sixteenth of the magnitude (at most 4 times), as the interpreter's sets are halved.
 * The folder is removed before the candidate runs: the candidate never sees the
 * reference. The process runs with a wall-clock limit (KFORGE_REF_TIMEOUT seconds, default
 * 600) in a process group of its own (kf_run_capture); a crash, a hang, a non-zero exit or
 * output files of the wrong size are an error naming the task and what the process said,
 * never a crash of kforge. The module is the user's own code and trusted as the
 * reference; the process only refuses sockets (kforge_torch.reference), it is no sandbox.
 *
 * --module-ref cuda-f32 (opts.module_ref, the user's choice, never a fallback) runs the
 * module in float32 on torch's CUDA device instead, TF32 off: the process refuses, exit 4
 * naming why, where torch has no CUDA device, and marks of.S where the float32 forward gives
 * an infinity or NaN at all (it has no float64 to tell an overflow of its own from the
 * module's). compare.c allows such a reference twice the tolerance (verify.h).
 *
 * --module-ref cuda-f64 runs the module in float64 on torch's CUDA device, the same device
 * path with another dtype: the task's tolerance unchanged, of.S as on the CPU (a float32
 * forward on the same device, marked where it gives an infinity or NaN that float64 does
 * not), refused (exit 4) without a CUDA device like cuda-f32.
 */
#include "verify/verify_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Rounds of redrawing a set whose float32 forward overflows, each at 1/16 the magnitude. */
#define REF_REDRAW_ROUNDS 4

const char *kf_module_ref_name(int kind) {
    return kind == KF_MODULE_REF_CPU_F64    ? "cpu-f64"
           : kind == KF_MODULE_REF_CUDA_F32 ? "cuda-f32"
           : kind == KF_MODULE_REF_CUDA_F64 ? "cuda-f64"
                                            : NULL;
}

int kf_module_ref_parse(const char *name) {
    for (int k = KF_MODULE_REF_CPU_F64; k <= KF_MODULE_REF_CUDA_F64; k++)
        if (name && !strcmp(name, kf_module_ref_name(k))) return k;
    return -1;
}

const char *kf_module_ref_describe(int kind) {
    if (kind == KF_MODULE_REF_CUDA_F32)
        return "cuda-f32: the module in float32 on torch's CUDA device (TF32 off), in a separate process; "
               "tolerance doubled (atol, rtol x2, NMSE x4) for the reference's own float32 rounding";
    if (kind == KF_MODULE_REF_CUDA_F64)
        return "cuda-f64: the module in float64 on torch's CUDA device, in a separate process; the task's "
               "tolerance (a float64 reference, as on the CPU)";
    return "cpu-f64: the module in float64 on the CPU, in a separate process";
}

const char *kf_module_ref_phrase(int kind) {
    return kind == KF_MODULE_REF_CUDA_F32   ? "float32 reference on the GPU (--module-ref cuda-f32, TF32 off; tolerance doubled)"
           : kind == KF_MODULE_REF_CUDA_F64 ? "float64 reference on the GPU (--module-ref cuda-f64)"
                                            : "float64 reference";
}

kf_status kf_module_ref_check(const kf_graph *g, int kind, kf_error *err) {
    if (kind == KF_MODULE_REF_CPU_F64 || g->module) return KF_OK;
    return kf_error_set(err, KF_ERR_ARG, g->path, 0, 0,
                        "--module-ref %s: task '%s' is a graph task, whose reference is kforge's float64 "
                        "interpreter; a module reference applies to module tasks only",
                        kf_module_ref_name(kind) ? kf_module_ref_name(kind) : "?", g->name);
}

static double ref_timeout_s(void) {
    const char *e = getenv("KFORGE_REF_TIMEOUT");
    double t = e && *e ? strtod(e, NULL) : 0;
    return t > 0 ? t : 600;
}

static kf_status write_set_inputs(const kf_verify_ctx *c, const char *dir, int s, kf_error *err) {
    char path[1200];
    snprintf(path, sizeof path, "%s/in.%d", dir, s);
    FILE *f = fopen(path, "wb");
    if (!f) return kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot write the reference's inputs: %s", strerror(errno));
    int ok = 1;
    for (int i = 0; i < c->nin && ok; i++) {
        if (c->g->values[c->g->inputs[i]].is_param) continue;
        if (c->in_bytes[i] && fwrite(c->sets[s].in[i], 1, c->in_bytes[i], f) != c->in_bytes[i]) ok = 0;
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) return kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot write the reference's inputs: %s", strerror(errno));
    return KF_OK;
}

/* The last `keep` bytes of text, from a line start where there is one. */
static const char *tail_of(const char *text, size_t keep) {
    size_t n = strlen(text);
    if (n <= keep) return text;
    const char *t = text + n - keep, *nl = strchr(t, '\n');
    return nl && nl[1] ? nl + 1 : t;
}

/* Runs the reference process on the sets listed in todo (ntodo of them). */
static kf_status run_reference(const kf_verify_ctx *c, const char *dir, const int *todo, int ntodo, kf_error *err) {
    const kf_graph *g = c->g;
    char spec[1024], pypath[2048], sets[4096], seed[32];
    if (!kf_module_file(g, "json", spec, sizeof spec))
        return kf_error_set(err, KF_ERR_ARG, g->path, 0, 0, "task '%s': the module's path is too long", g->name);
    size_t n = 0;
    sets[0] = 0;
    for (int k = 0; k < ntodo && n + 16 < sizeof sets; k++)
        n += (size_t)snprintf(sets + n, sizeof sets - n, "%s%d", k ? "," : "", todo[k]);
    const char *old = getenv("PYTHONPATH");
#ifdef KF_SOURCE_DIR
    snprintf(pypath, sizeof pypath, "PYTHONPATH=%s/python%s%s", KF_SOURCE_DIR, old && *old ? ":" : "",
             old && *old ? old : "");
#else
    snprintf(pypath, sizeof pypath, "PYTHONPATH=%s", old ? old : "");
#endif
    const char *py = getenv("KFORGE_PYTHON");
    if (!py || !*py) py = "python3";
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->seed);
    const char *kind = kf_module_ref_name(c->opts.module_ref);
    char *argv[] = {"env", pypath, (char *)py, "-m", "kforge_torch.reference", spec, (char *)dir, sets, seed,
                    (char *)kind, NULL};
    kf_buf out = {0};
    int ws = 0;
    char why[300] = "";
    double t = ref_timeout_s();
    int rc = kf_run_capture(argv, t, &out, 16 << 10, &ws, why, sizeof why);
    const char *said = out.data ? tail_of(out.data, 1500) : "";
    kf_status st = KF_OK;
    if (rc != 0)
        st = kf_error_set(err, KF_ERR_RUNTIME, g->path, 0, 0,
                          "task '%s': the reference process (%s -m kforge_torch.reference) %s%s%s", g->name, py,
                          why[0] ? why : "could not run", said[0] ? "; it said:\n" : "", said);
    else if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        char how[64];
        if (WIFSIGNALED(ws)) snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(ws));
        else snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(ws));
        /* exit 4: the chosen reference cannot run on this machine (cuda-f32/f64 without a CUDA
         * device in torch): the user's choice to change, not a failure of the module */
        int here = WIFEXITED(ws) && WEXITSTATUS(ws) == 4;
        st = kf_error_set(err, here ? KF_ERR_UNSUPPORTED : KF_ERR_RUNTIME, g->path, 0, 0,
                          "task '%s': the reference process (%s -m kforge_torch.reference) %s%s%s", g->name, py, how,
                          said[0] ? "; it said:\n" : "", said);
    }
    kf_buf_free(&out);
    return st;
}

/* Reads out.S (every output as float64, in order) into dout; KF_ERR_RUNTIME when the
 * process wrote another size. */
static kf_status read_set_outputs(const kf_verify_ctx *c, const char *dir, int s, double **dout, kf_error *err) {
    char path[1200];
    snprintf(path, sizeof path, "%s/out.%d", dir, s);
    size_t want = 0;
    for (int j = 0; j < c->nout; j++) want += (size_t)c->out_numel[j] * sizeof(double);
    struct stat st;
    if (stat(path, &st) != 0)
        return kf_error_set(err, KF_ERR_RUNTIME, c->g->path, 0, 0,
                            "task '%s': the reference process wrote no outputs for input set %d", c->g->name, s);
    if ((size_t)st.st_size != want)
        return kf_error_set(err, KF_ERR_RUNTIME, c->g->path, 0, 0,
                            "task '%s': the reference process wrote %lld bytes of outputs for input set %d, "
                            "expected %zu (the outputs' elements as float64)", c->g->name, (long long)st.st_size, s,
                            want);
    FILE *f = fopen(path, "rb");
    if (!f) return kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot read the reference's outputs: %s", strerror(errno));
    int ok = 1;
    for (int j = 0; j < c->nout && ok; j++)
        if (c->out_numel[j] && fread(dout[j], sizeof(double), (size_t)c->out_numel[j], f) != (size_t)c->out_numel[j])
            ok = 0;
    fclose(f);
    if (!ok) return kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot read the reference's outputs");
    return KF_OK;
}

/* Reads w.S (set s's params, drawn by the reference process, in the weights file's layout)
 * into the set's param inputs; KF_ERR_RUNTIME when the process wrote none or another size. */
static kf_status read_set_params(kf_verify_ctx *c, const char *dir, int s, kf_error *err) {
    char path[1200];
    snprintf(path, sizeof path, "%s/w.%d", dir, s);
    char *w = NULL;
    size_t n = 0;
    kf_error e2 = {0};
    if (kf_read_file_max(path, (size_t)1 << 40, &w, &n, &e2) != KF_OK)
        return kf_error_set(err, KF_ERR_RUNTIME, c->g->path, 0, 0,
                            "task '%s': the reference process wrote no params for input set %d", c->g->name, s);
    kf_status st = KF_OK;
    if ((int64_t)n != c->g->module->weight_bytes)
        st = kf_error_set(err, KF_ERR_RUNTIME, c->g->path, 0, 0,
                          "task '%s': the reference process wrote %zu bytes of params for input set %d, expected "
                          "%lld (the weights file's size)",
                          c->g->name, n, s, (long long)c->g->module->weight_bytes);
    for (int i = 0; i < c->nin && st == KF_OK; i++) {
        const kf_value *x = &c->g->values[c->g->inputs[i]];
        if (x->is_param) memcpy(c->sets[s].in[i], w + x->param_offset, c->in_bytes[i]);
    }
    free(w);
    return st;
}

static void remove_dir(const char *dir, int nsets) {
    static const char *const pre[] = {"in.%d", "out.%d", "of.%d", "out.%d.tmp", "w.%d", "w.%d.tmp"};
    char path[1200], name[64];
    for (int s = 0; s < nsets; s++)
        for (size_t k = 0; k < sizeof pre / sizeof *pre; k++) {
            snprintf(name, sizeof name, pre[k], s);
            snprintf(path, sizeof path, "%s/%s", dir, name);
            unlink(path);
        }
    if (rmdir(dir) != 0) kf_log(1, "refproc: could not remove %s: %s", dir, strerror(errno));
}

/* Draws set s's forward arguments at magnitude limit mag (params: the weights file's, until
 * read_set_params replaces them with the set's own). */
static void draw_set(kf_verify_ctx *c, int s, double mag, const char *weights) {
    for (int i = 0; i < c->nin; i++) {
        const kf_value *x = &c->g->values[c->g->inputs[i]];
        if (x->is_param) memcpy(c->sets[s].in[i], weights + x->param_offset, c->in_bytes[i]);
        else kf_verify_draw_input(c, s, i, mag, c->sets[s].in[i]);
    }
}

kf_status kf_verify_module_sets(kf_verify_ctx *c, kf_error *err) {
    const kf_graph *g = c->g;
    const kf_module_task *m = g->module;
    char wpath[1024];
    if (!kf_module_file(g, "weights", wpath, sizeof wpath))
        return kf_error_set(err, KF_ERR_ARG, g->path, 0, 0, "task '%s': the module's path is too long", g->name);
    char *weights = NULL;
    size_t wlen = 0;
    kf_status st = kf_read_file_max(wpath, (size_t)1 << 40, &weights, &wlen, err);
    if (st != KF_OK) return st;
    if ((int64_t)wlen != m->weight_bytes) {
        free(weights);
        return kf_error_set(err, KF_ERR_PARSE, wpath, 0, 0,
                            "task '%s': the weights file holds %zu bytes; its params take %lld", g->name, wlen,
                            (long long)m->weight_bytes);
    }
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/kf-ref-XXXXXX", c->workdir);
    if (!mkdtemp(dir)) {
        free(weights);
        return kf_error_set(err, KF_ERR_IO, c->workdir, 0, 0, "cannot make the reference's folder: %s", strerror(errno));
    }
    c->nsets = c->opts.nsets;
    c->sets = kf_calloc((size_t)c->nsets, sizeof *c->sets);
    double *mag = kf_calloc((size_t)c->nsets, sizeof *mag);
    int *todo = kf_calloc((size_t)c->nsets, sizeof *todo);
    double **dout = kf_calloc((size_t)c->nout, sizeof *dout);
    for (int j = 0; j < c->nout; j++) dout[j] = kf_malloc(sizeof(double) * (size_t)(c->out_numel[j] ? c->out_numel[j] : 1));
    double t_draw = 0, t_ref = 0;
    int ntodo = 0;
    for (int s = 0; s < c->nsets; s++) {
        kf_vset *v = &c->sets[s];
        v->dist = s % KF_DIST_COUNT;
        v->in = kf_calloc((size_t)c->nin + 1, sizeof *v->in);
        v->ref = kf_calloc((size_t)c->nout, sizeof *v->ref);
        v->ref_rms = kf_calloc((size_t)c->nout, sizeof *v->ref_rms);
        v->bound = kf_calloc((size_t)c->nout, sizeof *v->bound);
        for (int i = 0; i < c->nin; i++) v->in[i] = kf_malloc(c->in_bytes[i] ? c->in_bytes[i] : 1);
        mag[s] = KF_MAG_DEFAULT;
        todo[ntodo++] = s;
    }
    for (int round = 0; ntodo > 0 && st == KF_OK; round++) {
        double t0 = kf_now();
        for (int k = 0; k < ntodo && st == KF_OK; k++) {
            draw_set(c, todo[k], mag[todo[k]], weights);
            st = write_set_inputs(c, dir, todo[k], err);
        }
        double t1 = kf_now();
        t_draw += t1 - t0;
        if (st == KF_OK) st = run_reference(c, dir, todo, ntodo, err);
        t_ref += kf_now() - t1;
        /* the sets to draw again: float32 overflows where float64 does not */
        int again = 0;
        for (int k = 0; k < ntodo && st == KF_OK; k++) {
            int s = todo[k];
            char of[1200];
            snprintf(of, sizeof of, "%s/of.%d", dir, s);
            int dist = c->sets[s].dist;
            if (access(of, F_OK) == 0 && round < REF_REDRAW_ROUNDS && (dist == KF_DIST_OFFSET || dist == KF_DIST_LARGE)) {
                unlink(of);
                mag[s] /= 16;
                todo[again++] = s;
                continue;
            }
            st = read_set_outputs(c, dir, s, dout, err);
            if (st == KF_OK && s > 0) st = read_set_params(c, dir, s, err);
            for (int j = 0; j < c->nout && st == KF_OK; j++) kf_verify_set_ref(c, &c->sets[s], j, dout[j], NULL);
        }
        ntodo = st == KF_OK ? again : 0;
    }
    remove_dir(dir, c->nsets);
    for (int j = 0; j < c->nout; j++) free(dout[j]);
    free(dout);
    free(todo);
    free(mag);
    free(weights);
    c->t_draw = t_draw;
    c->t_ref = t_ref;
    return st;
}
