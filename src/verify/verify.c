/*
 * The verifier's public API (include/kforge/verify.h): draws the input sets, computes the
 * reference once with the float64 interpreter, and checks a candidate by running it in
 * the sandbox on every set, then (when asked and correct) times it in one more sandboxed
 * process.
 *
 * Per set the parent writes the inputs, poisons the outputs and fills the guard zones,
 * runs the runner, and then judges in a fixed order: the run itself (crash, timeout,
 * limits, load or kernel error), guard zones (oob-write), inputs (input-modified), then
 * each output (unwritten, mismatch). The first failure is the verdict; the set that
 * showed it and its distribution are recorded, and the seed is printed so a failure can
 * be reproduced with opts.seed.
 *
 * What each input's values must satisfy comes from the ops that read it:
 * positive where an op of KF_DOMAIN_POS lies on a path from it, and within the smallest
 * magnitude limit (kf_op_def.mag) of those ops for the offset and large-magnitude sets
 * (kf_graph_input_domains). A
 * range the task gives an input replaces the distributions for that input.
 */
#include "verify/verify_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Short stable name of a verdict, e.g. "oob-write". */
const char *kf_vstatus_name(kf_vstatus s) {
    switch (s) {
    case KF_V_OK: return "ok";
    case KF_V_COMPILE_ERROR: return "compile-error";
    case KF_V_LOAD_ERROR: return "load-error";
    case KF_V_CRASH: return "crash";
    case KF_V_TIMEOUT: return "timeout";
    case KF_V_CPU_LIMIT: return "cpu-limit";
    case KF_V_MEM_LIMIT: return "mem-limit";
    case KF_V_OUTPUT_FLOOD: return "output-flood";
    case KF_V_KERNEL_ERROR: return "kernel-error";
    case KF_V_UNWRITTEN: return "unwritten";
    case KF_V_OOB_WRITE: return "oob-write";
    case KF_V_INPUT_MODIFIED: return "input-modified";
    case KF_V_MISMATCH: return "mismatch";
    case KF_V_IMPOSSIBLE: return "impossible";
    case KF_V_INTERNAL: return "internal";
    case KF_V_MEMCHECK: return "memcheck";
    case KF_V_NO_CODE: return "no-code";
    case KF_V_AGENT_ERROR: return "agent-error";
    case KF_V_FORBIDDEN: return "forbidden-call";
    case KF_V_COUNT: break;
    }
    return "unknown";
}

/* Defaults of verify.h; time_it is off (callers that want timing ask for it). */
void kf_verify_opts_default(kf_verify_opts *o) {
    memset(o, 0, sizeof *o);
    o->nsets = KF_VERIFY_DEFAULT_SETS;
    o->seed = 0;
    o->wall_limit_s = 20;
    o->cpu_limit_s = 60;
    o->mem_limit = 2ll << 30;
    o->output_cap = 64 << 10;
    o->threads = 0;
    o->time_it = 0;
    o->min_reps = 5;
    o->min_time_s = 0.2;
    o->max_reps = 200;
    o->floor_s = 0;
    o->cache_bytes = 0;
    o->workdir = NULL;
    o->runner = NULL;
}

/* See verify.h. */
void kf_verify_race(kf_verify_ctx *c, double best_s) {
    if (!c) return;
    double v = best_s > 0 && isfinite(best_s) ? best_s : 0;
    __atomic_store(&c->race_s, &v, __ATOMIC_RELAXED);
}

/* Release a context; NULL is a no-op. */
void kf_verify_ctx_free(kf_verify_ctx *c) {
    if (!c) return;
    if (c->kept_region) {
        kf_sbx_free(c->kept_region);
        free(c->kept_region);
    }
    kf_verify_sets_free(c);
    free(c->in_numel);
    free(c->out_numel);
    free(c->in_bytes);
    free(c->out_bytes);
    free(c);
}

/* The context's fixed part, before any set is drawn or read (verify_int.h). */
kf_verify_ctx *kf_verify_ctx_shell(const kf_graph *g, const kf_verify_opts *o) {
    kf_verify_ctx *c = kf_calloc(1, sizeof *c);
    c->g = g;
    if (o) c->opts = *o;
    else kf_verify_opts_default(&c->opts);
    if (c->opts.nsets < 1) c->opts.nsets = 1;
    c->seed = c->opts.seed;
    c->keep_in = c->keep_ref = 1;
    c->ready = -1;
    const char *wd = c->opts.workdir;
    if (!wd || !wd[0]) wd = getenv("TMPDIR");
    if (!wd || !wd[0]) wd = "/tmp";
    snprintf(c->workdir, sizeof c->workdir, "%s", wd);
    c->opts.workdir = c->workdir;
    if (c->opts.runner) {
        snprintf(c->runner, sizeof c->runner, "%s", c->opts.runner);
        c->opts.runner = c->runner;
    }
    c->nin = g->ninputs;
    c->nout = g->noutputs;
    c->in_numel = kf_calloc((size_t)c->nin + 1, sizeof *c->in_numel);
    c->in_bytes = kf_calloc((size_t)c->nin + 1, sizeof *c->in_bytes);
    c->out_numel = kf_calloc((size_t)c->nout + 1, sizeof *c->out_numel);
    c->out_bytes = kf_calloc((size_t)c->nout + 1, sizeof *c->out_bytes);
    for (int i = 0; i < c->nin; i++) {
        const kf_value *v = &g->values[g->inputs[i]];
        c->in_numel[i] = kf_shape_numel(&v->shape);
        c->in_bytes[i] = (size_t)c->in_numel[i] * (size_t)kf_dtype_size(v->dtype);
    }
    for (int j = 0; j < c->nout; j++) {
        const kf_value *v = &g->values[g->outputs[j]];
        c->out_numel[j] = kf_shape_numel(&v->shape);
        c->out_bytes[j] = (size_t)c->out_numel[j] * (size_t)kf_dtype_size(v->dtype);
    }
    return c;
}

void kf_verify_ctx_times(const kf_verify_ctx *c, double *draw_s, double *ref_s) {
    *draw_s = c ? c->t_draw : 0;
    *ref_s = c ? c->t_ref : 0;
}

/* ---- checking ---- */

kf_status kf_verify_find_runner(const kf_verify_ctx *c, char *out, size_t cap, kf_error *err) {
    if (c->runner[0]) {
        if (access(c->runner, X_OK) != 0)
            return kf_error_set(err, KF_ERR_IO, c->runner, 0, 0, "kforge-runner is not executable: %s",
                                strerror(errno));
        snprintf(out, cap, "%s", c->runner);
        return KF_OK;
    }
    const char *env = getenv("KFORGE_RUNNER");
    if (env && env[0]) {
        if (access(env, X_OK) != 0)
            return kf_error_set(err, KF_ERR_IO, env, 0, 0,
                                "KFORGE_RUNNER names '%s', which is not executable: %s", env,
                                strerror(errno));
        snprintf(out, cap, "%s", env);
        return KF_OK;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            char p[PATH_MAX + 32];
            snprintf(p, sizeof p, "%s/kforge-runner", exe);
            if (access(p, X_OK) == 0) {
                snprintf(out, cap, "%s", p);
                return KF_OK;
            }
        }
    }
#ifdef KF_BUILD_DIR
    if (access(KF_BUILD_DIR "/kforge-runner", X_OK) == 0) {
        snprintf(out, cap, "%s", KF_BUILD_DIR "/kforge-runner");
        return KF_OK;
    }
#endif
    return kf_error_set(err, KF_ERR_IO, NULL, 0, 0,
                        "cannot find kforge-runner (set KFORGE_RUNNER or opts.runner, or keep it "
                        "next to the executable)");
}

/* The "kforge: resources ..." lines of a compile log, without the prefix, "; "-joined. */
static void resource_lines(const char *log, char *out, size_t cap) {
    static const char pre[] = "kforge: resources ";
    size_t n = 0;
    out[0] = 0;
    for (const char *p = log ? strstr(log, pre) : NULL; p; p = strstr(p, pre)) {
        p += sizeof pre - 1;
        size_t len = strcspn(p, "\n");
        int w = snprintf(out + n, cap - n, "%s%.*s", n ? "; " : "", (int)len, p);
        if (w < 0 || (size_t)w >= cap - n) break;
        n += (size_t)w;
    }
}

static void result_init(kf_vresult *r) {
    memset(r, 0, sizeof *r);
    r->status = KF_V_INTERNAL;
    r->bad_set = -1;
    r->bad_output = -1;
    r->first_bad = -1;
}

static void fail_set(kf_verify_ctx *c, kf_vresult *r, kf_vstatus vs, int s, const char *what,
                     const char *detail) {
    r->status = vs;
    r->bad_set = s;
    snprintf(r->bad_dist, sizeof r->bad_dist, "%s", kf_verify_dist_name(c->sets[s].dist));
    snprintf(r->detail, sizeof r->detail, "%s %d (%s inputs, seed %llu): %s", what, s,
             r->bad_dist, (unsigned long long)c->seed, detail);
}

static const char *buf_name(const kf_verify_ctx *c, int k, int *is_out) {
    const kf_graph *g = c->g;
    *is_out = k >= c->nin;
    int id = k < c->nin ? g->inputs[k] : g->outputs[k - c->nin];
    return g->values[id].name;
}

/* Guards and inputs after a run; returns the failing status or KF_V_OK. */
static kf_vstatus check_memory(kf_verify_ctx *c, const kf_sbx *sb, int s, kf_vresult *r,
                               char *detail, size_t cap) {
    const kf_graph *g = c->g;
    int b;
    int64_t off;
    if (kf_sbx_check_guards(sb, &b, &off)) {
        int is_out, slot = 0;
        if (sb->nslots > 0 && b >= sb->nargs) { /* a resident set's slot (kf_sbx_in_buf) */
            slot = 1 + (b - sb->nargs) / sb->slot_nin;
            b = (b - sb->nargs) % sb->slot_nin;
        }
        const char *name = buf_name(c, b, &is_out);
        int id = b < c->nin ? g->inputs[b] : g->outputs[b - c->nin];
        const kf_value *v = &g->values[id];
        int es = kf_dtype_size(v->dtype);
        char shp[128];
        kf_shape_format(&v->shape, shp, sizeof shp);
        int64_t size = (int64_t)sb->size[b];
        if (slot > 0) /* the input's copy in another set's slot: "input 'x' (f32 [N], resident set 3)" */
            snprintf(shp + strlen(shp), sizeof shp - strlen(shp), ", resident set %d", slot);
        if (off == size)
            snprintf(detail, cap,
                     "%s '%s' (%s %s, %lld bytes): wrote into the guard zone right after its "
                     "end (element index %lld; valid indices are 0..%lld)",
                     is_out ? "output" : "input", name, kf_dtype_name(v->dtype), shp,
                     (long long)size, (long long)(off / es), (long long)(size / es - 1));
        else if (off > size)
            snprintf(detail, cap,
                     "%s '%s' (%s %s, %lld bytes): wrote into the guard zone %lld bytes after "
                     "its end (element index %lld; valid indices are 0..%lld)",
                     is_out ? "output" : "input", name, kf_dtype_name(v->dtype), shp,
                     (long long)size, (long long)(off - size), (long long)(off / es),
                     (long long)(size / es - 1));
        else
            snprintf(detail, cap,
                     "%s '%s' (%s %s): wrote into the guard zone %lld bytes before its start "
                     "(element index %lld)",
                     is_out ? "output" : "input", name, kf_dtype_name(v->dtype), shp,
                     (long long)-off, (long long)-((-off + es - 1) / es));
        if (is_out && r) r->bad_output = b - c->nin;
        return KF_V_OOB_WRITE;
    }
    int i;
    int64_t e, nchanged;
    double was, now;
    if (kf_verify_input_changed(c, sb, s, &i, &e, &nchanged, &was, &now)) {
        const kf_value *v = &g->values[g->inputs[i]];
        char idx[160];
        kf_verify_format_index(&v->shape, e, idx, sizeof idx);
        snprintf(detail, cap,
                 "input '%s' was written (inputs are read-only): element %lld %s changed from "
                 "%.9g to %.9g; %lld of %lld elements changed",
                 v->name, (long long)e, idx, was, now, (long long)nchanged,
                 (long long)c->in_numel[i]);
        if (r) r->first_bad = e;
        return KF_V_INPUT_MODIFIED;
    }
    return KF_V_OK;
}

/* The outputs poisoned: the whole of each, or, where the runner spreads an output's poison
 * on the device (sb->poison_size: a device target's handshake runs), its first element. */
static void poison_outputs(const kf_verify_ctx *c, kf_sbx *sb, int par) {
    const kf_graph *g = c->g;
    for (int j = 0; j < c->nout; j++)
        kf_verify_poison(g->values[g->outputs[j]].dtype, kf_sbx_data(sb, c->nin + j),
                         sb->poison_size[c->nin + j] > 0 && c->out_numel[j] > 0 ? 1 : c->out_numel[j], par);
}

void kf_verify_load_set(const kf_verify_ctx *c, kf_sbx *sb, int s) {
    /* with resident sets the set is in its slot already (written once, resident_sweep):
     * the call reads it there ('G') */
    if (sb->nslots > 0 && sb->slots_ok) sb->call_slot = sb->slot_of[s];
    else kf_verify_put_inputs(c, sb, s, 1);
    poison_outputs(c, sb, 1);
    kf_sbx_fill_guards(sb);
}

/* Whether a CPU candidate's region keeps every input set resident, each in a slot of its
 * own, the kernel's input pointers moved to the call's set ('G', runproto.h) instead of the
 * set copied into the input buffers before every call (issue 30). Not where the slots would
 * not fit (KF_RUN_MAX_BUFS buffers, 64 slots, the extra memory: at most mem_limit and a
 * quarter of the machine's memory) or KFORGE_SETS_COPIED=1: then the sets are copied as
 * before, and why is said (once at level 1, every candidate at level 2). */
static int resident_plan(kf_verify_ctx *c) {
    const char *env = getenv("KFORGE_SETS_COPIED");
    char why[200] = "";
    uint64_t extra = 0;
    for (int i = 0; i < c->nin; i++) extra += c->in_bytes[i] + 2 * KF_RUN_GUARD + KF_RUN_ALIGN;
    extra *= (uint64_t)(c->nsets > 1 ? c->nsets - 1 : 0);
    long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
    double phys = pages > 0 && pg > 0 ? (double)pages * (double)pg : 0;
    if (env && env[0] == '1') snprintf(why, sizeof why, "KFORGE_SETS_COPIED=1");
    else if (c->nsets < 2 || c->nin < 1) return 0; /* nothing to move between */
    else if (c->nsets > KF_RUN_STASH_SLOTS || c->nin + c->nout + (c->nsets - 1) * c->nin > KF_RUN_MAX_BUFS)
        snprintf(why, sizeof why, "%d sets of %d inputs need more than the region's %d buffers", c->nsets, c->nin,
                 KF_RUN_MAX_BUFS);
    else if ((c->opts.mem_limit > 0 && (double)extra > (double)c->opts.mem_limit) || (phys > 0 && (double)extra > 0.25 * phys))
        snprintf(why, sizeof why, "the %d other sets' %.0f MiB exceed the memory limit or a quarter of the machine's "
                 "%.0f MiB", c->nsets - 1, (double)extra / (1 << 20), phys / (1 << 20));
    if (!why[0]) return 1;
    /* (said once at level 1 where the region cannot hold them; asked for: level 2) */
    int said = env && env[0] == '1' ? 1 : __atomic_exchange_n(&c->copied_said, 1, __ATOMIC_RELAXED);
    kf_log(said ? 2 : 1, "verify: input sets copied into the region before every call, not resident (%s)", why);
    return 0;
}

/* After a candidate's runs (its runner reaped): every resident set compared with the set as
 * drawn; one the kernel changed is written again, and fails the candidate (when nothing else
 * did): a later candidate in this region gets every set as drawn (issue 30). */
static void resident_sweep(kf_verify_ctx *c, kf_sbx *sb, kf_vresult *r) {
    if (sb->nslots <= 0 || !sb->base || !sb->slots_ok) return;
    double t0 = kf_now();
    int changed = 0;
    /* the slots the parent lent to another set (timed_prepare's final call) back to their own */
    uint64_t lent = sb->slots_lent;
    for (int s = 0; s < sb->nslots; s++) sb->slot_of[s] = (signed char)s;
    sb->slots_lent = 0;
    for (int s = 0; s < c->nsets && s < sb->nslots; s++) {
        int i;
        int64_t e, n;
        double was, now;
        if (lent >> s & 1) {
            kf_verify_put_inputs(c, sb, s, 1);
            continue;
        }
        if (!kf_verify_input_changed(c, sb, s, &i, &e, &n, &was, &now)) continue;
        changed++;
        kf_verify_put_inputs(c, sb, s, 1);
        __atomic_add_fetch(&c->slot_sets_restored, 1, __ATOMIC_RELAXED);
        if (r && (r->status == KF_V_OK || r->status == KF_V_INTERNAL)) {
            const kf_value *v = &c->g->values[c->g->inputs[i]];
            char d[600];
            snprintf(d, sizeof d,
                     "input '%s' of resident set %d was written (inputs are read-only; found after the "
                     "candidate's runs): element %lld changed from %.9g to %.9g; %lld of %lld elements changed",
                     v->name, s, (long long)e, was, now, (long long)n, (long long)c->in_numel[i]);
            r->timed = 0;
            r->first_bad = e;
            fail_set(c, r, KF_V_INPUT_MODIFIED, s, "set", d);
        }
    }
    kf_log(2, "verify: %d resident sets checked unchanged after the runs in %.4f s (%d written again)",
           sb->nslots, kf_now() - t0, changed);
}

/* The region kf_verify_artifact keeps for the task's next CPU candidate (verify_int.h):
 * taken out of the context (NULL when there is none, another thread holds it, or
 * KFORGE_REGION_FRESH=1), handed back after the candidate's last run (the runner reaped
 * first, as kf_sbx_free would). */
static kf_sbx *region_take(kf_verify_ctx *c) {
    const char *env = getenv("KFORGE_REGION_FRESH");
    if (env && env[0] == '1') return NULL;
    return __atomic_exchange_n(&c->kept_region, NULL, __ATOMIC_ACQ_REL);
}

static void region_give_back(kf_verify_ctx *c, kf_sbx *sb) {
    const char *env = getenv("KFORGE_REGION_FRESH");
    /* kf_sbx_reuse reaps the last runner now, not at the next candidate (no child of ours is
     * left between two verifications), and refuses a region that is not safe to keep */
    if ((env && env[0] == '1') || !sb->base || !kf_sbx_reuse(sb)) {
        kf_sbx_free(sb);
        return;
    }
    kf_sbx *mine = kf_malloc(sizeof *mine);
    *mine = *sb;
    memset(sb, 0, sizeof *sb);
    sb->fd = -1;
    kf_sbx *none = NULL;
    if (__atomic_compare_exchange_n(&c->kept_region, &none, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    kf_sbx_free(mine); /* another thread's region is kept already */
    free(mine);
}

static kf_status open_region(const kf_verify_ctx *c, kf_verify_ctx *keep, kf_backend *b,
                             const char **artifact, char runner[PATH_MAX], char abs_art[PATH_MAX],
                             int *threads, kf_sbx *sb, kf_vresult *r, kf_error *err, int resident);

/* Shared by every run of a candidate: resolve the runner and the artifact's absolute path
 * (*artifact may be redirected into abs_art), the thread count, and a fresh buffer region
 * sized for the task. On failure fills r->detail and err. */
kf_status kf_verify_open_region(const kf_verify_ctx *c, kf_backend *b, const char **artifact,
                                char runner[PATH_MAX], char abs_art[PATH_MAX], int *threads,
                                kf_sbx *sb, kf_vresult *r, kf_error *err) {
    return open_region(c, NULL, b, artifact, runner, abs_art, threads, sb, r, err, 0);
}

/* kf_verify_open_region; with keep, the region kept in keep (the same context) when
 * kf_sbx_reuse accepts it, else a new one. */
static kf_status open_region(const kf_verify_ctx *c, kf_verify_ctx *keep, kf_backend *b,
                             const char **artifact, char runner[PATH_MAX], char abs_art[PATH_MAX],
                             int *threads, kf_sbx *sb, kf_vresult *r, kf_error *err, int resident) {
    kf_status st = kf_verify_find_runner(c, runner, PATH_MAX, err);
    if (st != KF_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", err ? err->msg : "cannot find kforge-runner");
        return st;
    }
    if ((*artifact)[0] != '/' && realpath(*artifact, abs_art)) *artifact = abs_art;
    if (strlen(*artifact) >= sizeof ((kf_run_ctl *)0)->artifact) {
        snprintf(r->detail, sizeof r->detail, "artifact path too long");
        return kf_error_set(err, KF_ERR_ARG, *artifact, 0, 0, "artifact path too long");
    }
    const kf_verify_opts *o = &c->opts;
    int nthr = o->threads > 0 ? o->threads : (b && b->info.threads > 0 ? b->info.threads : 0);
    if (nthr <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nthr = n > 0 ? (int)n : 1;
    }
    *threads = nthr;

    kf_sbx *kept = keep ? region_take(keep) : NULL;
    /* resident sets: a slot per set after the kernel's arguments (kf_sbx_in_buf), added to the
     * region kept from the task's last candidate (kf_sbx_add_slots); a new region has none:
     * the task's first candidate copies its sets in (its slots would cost more to allocate
     * than its copies: docs/design-notes.md), the next ones find them resident */
    int nslots = resident ? c->nsets : 0;
    if (kept && kept->nslots != nslots && !(kept->nslots == 0 && nslots > 0)) {
        kf_log(2, "verify: the kept buffer region has %d resident sets, this candidate needs %d: a new one",
               kept->nslots, nslots);
        kf_sbx_free(kept);
        free(kept);
        kept = NULL;
    }
    if (kept && kf_sbx_reuse(kept)) {
        *sb = *kept;
        free(kept);
        sb->reused++;
        __atomic_add_fetch(&keep->regions_reused, 1, __ATOMIC_RELAXED);
        kf_error e2 = {0};
        if (nslots > 0 && sb->nslots == 0 && kf_sbx_add_slots(sb, nslots, c->nin, &e2) != KF_OK)
            kf_log(1, "verify: input sets copied into the region before every call, not resident (%s)", e2.msg);
        kf_log(2, "verify: the buffer region kept from the last candidate (taken %d times)", sb->reused);
    } else {
        if (kept) {
            kf_log(2, "verify: the kept buffer region refused (resized, sealed, or its last run's "
                   "processes not all gone): a new one");
            kf_sbx_free(kept);
            free(kept);
        }
        if (nslots > 0) kf_log(2, "verify: a new buffer region: this candidate's input sets copied in, resident from "
                               "the task's next candidate on");
        int nb = c->nin + c->nout;
        size_t *sizes = kf_calloc((size_t)nb, sizeof *sizes);
        int *is_out = kf_calloc((size_t)nb, sizeof *is_out);
        for (int i = 0; i < c->nin; i++) sizes[i] = c->in_bytes[i];
        for (int j = 0; j < c->nout; j++) {
            sizes[c->nin + j] = c->out_bytes[j];
            is_out[c->nin + j] = 1;
        }
        st = kf_sbx_new(sizes, is_out, nb, sb, err);
        free(sizes);
        free(is_out);
        if (st == KF_OK && keep) __atomic_add_fetch(&keep->regions_made, 1, __ATOMIC_RELAXED);
    }
    if (st != KF_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", err ? err->msg : "cannot create the buffer region");
        return st;
    }
    /* which backend the runner opens: the CPU path dlopens; device targets go through
     * the platform interface on the same device as b */
    if (b && kf_verify_is_device(b))
        snprintf(sb->ctl->target, sizeof sb->ctl->target, "%s:%d", b->info.platform,
                 b->info.index);
    else
        sb->ctl->target[0] = 0;
    return KF_OK;
}

/* A backend whose candidates run on a device through the platform interface (not the
 * CPU's dlopen path). */
int kf_verify_is_device(const kf_backend *b) {
    return b && b->info.platform[0] && !kf_platform_is_host(b->info.platform);
}

/* The device-time bound's absolute allowance for b's platform, in seconds: the platform
 * table's measured value (platform.h, dev_gap_abs_ms), else 1 ms. */
#define KF_DEV_GAP_ABS_DEFAULT 1e-3
static double dev_gap_abs(const kf_backend *b) {
    const kf_platform *p = b ? kf_platform_find(b->info.platform) : NULL;
    return p && p->dev_gap_abs_ms > 0 ? p->dev_gap_abs_ms * 1e-3 : KF_DEV_GAP_ABS_DEFAULT;
}

/* Names the runner's output files uniquely across contexts and threads of this process. */
static unsigned long run_counter;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The timing run's calls are checked like the check runs (issue 24): before each call the
 * parent puts one of the input sets, chosen at random by this process, into the input
 * buffers and poisons the outputs; a random few calls and the last are compared with that
 * set's reference. */
typedef struct timed_calls {
    kf_verify_ctx *c;
    kf_sbx *sb;
    int par;            /* the inputs and poison written by every thread (a device target) */
    kf_rng rng;
    int cur;            /* the set now in the input buffers */
    int first;          /* the first call's set; -1 before it */
    int lent_bad;       /* resident sets: the previous call's set, found changed when its slot
                           was lent to the final call's set; -1 when not */
    char lent_detail[600];
} timed_calls;

static int timed_prepare(void *arg, int final, int poison) {
    timed_calls *t = arg;
    kf_verify_ctx *c = t->c;
    int s = 0;
    for (int tries = 0; tries < 64; tries++) {
        s = (int)(kf_verify_rng_next(&t->rng) % (uint64_t)c->nsets);
        /* the final call: neither the first call's set nor the previous one (as far as
         * there are sets to choose from) */
        if (!final || ((s != t->first || c->nsets < 3) && (s != t->cur || c->nsets < 2))) break;
    }
    if (t->first < 0) t->first = s;
    /* (a set the runner keeps on the device needs nothing written: kf_sbx_set_kept; a
     * resident one neither: the call's input pointers are its slot's) */
    kf_sbx *sb = t->sb;
    if (sb->nslots > 0 && sb->slots_ok) {
        /* the final call (on a set other than the previous call's): written into the previous
         * call's slot, so its input pointers are the ones the kernel got last, with other
         * inputs: a kernel memoising on its input pointers replays the previous result and
         * fails it, as with the inputs copied into one buffer (resident_sweep writes the
         * slot back) */
        int prev = t->cur, lend = prev >= 0 && prev < sb->nslots ? sb->slot_of[prev] : -1;
        if (final && s != prev && lend >= 0 && sb->slot_of[s] == s) {
            /* the previous set's inputs as drawn before they give way (what a kernel wrote
             * there must not be written over unseen) */
            int i;
            int64_t e, n;
            double was, now;
            if (kf_verify_input_changed(c, sb, prev, &i, &e, &n, &was, &now)) {
                t->lent_bad = prev;
                snprintf(t->lent_detail, sizeof t->lent_detail,
                         "input '%s' was written (inputs are read-only; found before the final call): "
                         "element %lld changed from %.9g to %.9g; %lld of %lld elements changed",
                         c->g->values[c->g->inputs[i]].name, (long long)e, was, now, (long long)n,
                         (long long)c->in_numel[i]);
            }
            sb->slot_of[s] = (signed char)lend;
            sb->slot_of[prev] = -1;
            sb->slots_lent |= 1ull << lend;
            kf_verify_put_inputs(c, sb, s, t->par);
        }
        sb->call_slot = sb->slot_of[s], t->cur = s;
    } else if (kf_sbx_set_kept(t->sb, s)) t->cur = -1;
    else if (s != t->cur) kf_verify_put_inputs(c, t->sb, s, t->par), t->cur = s;
    if (poison) poison_outputs(c, t->sb, t->par);
    return s;
}

/* Guards, set s's inputs unchanged, every output against set s's reference: a check run's
 * call and a checked timed call alike. With r, the errors are accumulated into it and the
 * first bad element is noted. */
static kf_vstatus check_call(kf_verify_ctx *c, const kf_sbx *sb, int s, kf_vresult *r,
                             char *detail, size_t cap) {
    kf_vstatus vs = check_memory(c, sb, s, r, detail, cap);
    kf_error e = {0};
    if (vs == KF_V_OK && kf_verify_set_ready(c, s, &e) != KF_OK) {
        snprintf(detail, cap, "the reference of set %d could not be computed again: %s", s, e.msg);
        return KF_V_INTERNAL;
    }
    /* the region's inputs: set s's, unchanged (check_memory), for the ties of an argmax */
    const void *ins[KF_RUN_MAX_BUFS];
    for (int i = 0; i < c->nin; i++) ins[i] = kf_sbx_data(sb, kf_sbx_in_buf(sb, s, i));
    for (int j = 0; j < c->nout && vs == KF_V_OK; j++) {
        kf_cmp cmp;
        kf_verify_compare(c, s, j, kf_sbx_data(sb, c->nin + j), ins, &cmp);
        if (r) {
            r->max_abs_err = fmax(r->max_abs_err, cmp.max_abs);
            r->max_rel_err = fmax(r->max_rel_err, cmp.max_rel);
            r->nmse = fmax(r->nmse, cmp.nmse);
            const int d = c->sets[s].dist;
            if (d >= 0 && d < KF_VERIFY_NDIST) {
                r->dist_nmse[d] = fmax(r->dist_nmse[d], cmp.nmse);
                r->dist_max_rel[d] = fmax(r->dist_max_rel[d], cmp.max_rel);
                r->dist_seen |= 1u << d;
            }
        }
        if (cmp.status != KF_V_OK) {
            snprintf(detail, cap, "%s", cmp.detail);
            if (r) {
                r->bad_output = j;
                r->first_bad = cmp.first_bad;
                r->got = cmp.got;
                r->want = cmp.want;
            }
            vs = cmp.status;
        }
    }
    return vs;
}

/* A device candidate's check sets in one runner process (kf_sbx_limits.calls): the sets in
 * order, each loaded with poisoned outputs and fresh guards before its call, every call
 * but the last checked in full as it returns (the last by the caller), the errors
 * accumulated into r as the per-set runs do. */
typedef struct check_sets {
    kf_verify_ctx *c;
    kf_sbx *sb;
    kf_vresult *r;
    int next;           /* the set the next call gets */
} check_sets;

static int check_sets_prepare(void *arg, int final, int poison) {
    (void)final;
    (void)poison;
    check_sets *t = arg;
    int s = t->next++;
    kf_verify_load_set(t->c, t->sb, s);
    return s;
}

static kf_vstatus check_sets_check(void *arg, int set, char *detail, size_t cap) {
    check_sets *t = arg;
    return check_call(t->c, t->sb, set, t->r, detail, cap);
}

static kf_vstatus timed_check(void *arg, int set, char *detail, size_t cap) {
    timed_calls *t = arg;
    char d[1100];
    kf_vstatus vs = check_call(t->c, t->sb, set, NULL, d, sizeof d);
    if (vs != KF_V_OK) snprintf(detail, cap, "set %d: %s", set, d);
    return vs;
}

/* A run's calls (kf_sbx_limits.prepare/check): the first ncheck are check calls, one per
 * set in order (check_sets), the rest the timing plan's (timed_calls). */
typedef struct calls_cb {
    check_sets cs;
    timed_calls tc;
    int ncheck, prepared;
    int cur_check;      /* the call now prepared is a check call */
    int host;           /* a CPU candidate's timed calls: kf_verify_ctx.host_timing once the
                           check calls are over (their writes and checks use every thread) */
} calls_cb;

static int calls_prepare(void *arg, int final, int poison) {
    calls_cb *u = arg;
    u->cur_check = u->prepared < u->ncheck;
    u->cs.c->host_timing = u->host && !u->cur_check;
    if (u->cur_check) {
        u->prepared++;
        return check_sets_prepare(&u->cs, final, poison);
    }
    return timed_prepare(&u->tc, final, poison);
}

static kf_vstatus calls_check(void *arg, int set, char *detail, size_t cap) {
    calls_cb *u = arg;
    return u->cur_check ? check_sets_check(&u->cs, set, detail, cap) : timed_check(&u->tc, set, detail, cap);
}

/* The run's request in the control page, written again before every run: the page is the
 * kernel's to write during a run (a check run must not pick the next run's entry,
 * artifact or target). */
static void request(kf_run_ctl *ctl, const kf_candidate *cand, const char *artifact,
                    const char *target) {
    snprintf(ctl->entry, sizeof ctl->entry, "%s", cand->entry[0] ? cand->entry : "kforge_kernel");
    snprintf(ctl->artifact, sizeof ctl->artifact, "%s", artifact);
    snprintf(ctl->target, sizeof ctl->target, "%s", target);
}

/* The median of n values (copied: v is left as it is). */
static double median_of(const double *v, int n) {
    if (n < 1) return 0;
    double *t = kf_malloc(sizeof *t * (size_t)n);
    memcpy(t, v, sizeof *t * (size_t)n);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

/* A device's own times of the timed calls (dev, from the runner, the candidate's process)
 * against the parent's clock around the same calls (host): the device's interval lies
 * inside the parent's, so a call's device time may not pass its host time by more than
 * KF_DEV_OVER_REL of it plus KF_DEV_OVER_ABS (clock granularity: the two clocks are not the
 * same clock on a GPU). And a call's host time holds its device time plus the overheads:
 * the parent's byte to the runner and back, the runner's and the parent's wake-ups, the
 * launch and the wait for completion; on a loaded machine also the time the runner's
 * main thread (launch, completion) and the parent's waited for a CPU, which the parent
 * reads from schedstat around each call (wait: milliseconds under load, and on PoCL the
 * whole of an honest call's gap there: measured in the design notes, issue 24). What is
 * left of a call's gap (host less device less wait) is the unloaded overhead: an empty
 * round trip with the runner (ping: one after each timed call, by the same clock) and the
 * launch (PoCL: under 0.5 ms measured; CUDA on an H100: median rests of 0.002-0.16 ms,
 * bench/gap_load.sh). So the median over the calls of that rest may not pass
 * KF_DEV_GAP_PINGS times the median ping plus the platform's absolute allowance
 * (dev_gap_abs: the platform table's, 1 ms on OpenCL, 0.4 ms on CUDA). The median, not
 * the largest: an honest kernel must never fail, and a forger must under-report more than half the calls to move the
 * median device time, which moves the median rest as much. Without schedstat (a wait < 0)
 * the old bound holds instead: the median device time at least KF_DEV_UNDER_FRAC of the
 * shortest host time less KF_DEV_UNDER_ABS (on this VM at load 14 it failed an honest
 * PoCL kernel whose every call waited 10 ms for a CPU: it is not kept beside the new one).
 * A kernel that makes the runner's main thread wait (threads of its own competing for the
 * runner's CPUs: a host-form candidate) or slows the pings widens its allowance by as
 * much; the pinning to --threads CPUs, the CPU-time witness and the roofline floor are
 * what limit that (design notes). Every device time is positive and finite (checked
 * before). 1 when believable, else 0 with the reason in detail; r gets the
 * medians of the gap, the wait and the ping, and the allowance. */
#define KF_CPU_OVER_REL 1.2
#define KF_CPU_OVER_ABS 0.05
#define KF_DEV_OVER_REL 0.01
#define KF_DEV_OVER_ABS 50e-6
#define KF_DEV_UNDER_FRAC 0.5
#define KF_DEV_UNDER_ABS 5e-3
#define KF_DEV_GAP_PINGS 8.0
static int dev_times_believable(const double *dev, const double *host, const double *wait, int n,
                                const double *ping, int npings, double gap_abs, kf_vresult *r,
                                char *detail, size_t cap) {
    for (int i = 0; i < n; i++)
        if (dev[i] > host[i] * (1 + KF_DEV_OVER_REL) + KF_DEV_OVER_ABS) {
            snprintf(detail, cap,
                     "timed call %d of %d: the device reported %.4g ms, but the call took %.4g ms "
                     "by kforge's own clock around it; a device time cannot exceed that (the "
                     "timing was tampered with?)", i + 1, n, dev[i] * 1e3, host[i] * 1e3);
            return 0;
        }
    double md = median_of(dev, n), mh = host[0];
    for (int i = 1; i < n; i++) mh = fmin(mh, host[i]);
    double *gap = kf_malloc(sizeof *gap * (size_t)n), *rest = kf_malloc(sizeof *rest * (size_t)n);
    int waits = 1;
    for (int i = 0; i < n; i++) {
        gap[i] = host[i] - dev[i];
        if (wait[i] < 0) waits = 0;
        rest[i] = gap[i] - (wait[i] > 0 ? wait[i] : 0);
    }
    double mg = median_of(gap, n), mr = median_of(rest, n);
    for (int i = 0; i < n; i++) gap[i] = wait[i] > 0 ? wait[i] : 0;
    double mw = median_of(gap, n);
    free(gap);
    free(rest);
    double mp = npings > 0 ? median_of(ping, npings) : 0;
    double allow = KF_DEV_GAP_PINGS * mp + gap_abs;
    r->time_gap_ms = mg * 1e3;
    r->time_wait_ms = waits ? mw * 1e3 : -1;
    r->time_ping_ms = mp * 1e3;
    r->time_allow_ms = allow * 1e3;
    kf_log(2, "verify: device times: median %.4g ms, host %.4g ms (shortest %.4g), gap %.4g ms, "
           "waiting for a CPU %.4g ms, rest %.4g ms, ping %.4g ms (%d), allowance %.4g ms",
           md * 1e3, median_of(host, n) * 1e3, mh * 1e3, mg * 1e3, waits ? mw * 1e3 : -1.0,
           mr * 1e3, mp * 1e3, npings, allow * 1e3);
    if (waits && mr > allow) {
        snprintf(detail, cap,
                 "the device reported a median of %.4g ms per call, but by kforge's own clock "
                 "the calls took %.4g ms more, %.4g ms of it beyond the time the runner and "
                 "kforge waited for a CPU (medians over %d calls); an empty round trip with the "
                 "runner took %.4g ms (median of %d), and launch and completion overheads do "
                 "not explain more than %.0f times that plus %.2g ms, %.4g ms (the timing was "
                 "tampered with?)", md * 1e3, mg * 1e3, mr * 1e3, n, mp * 1e3, npings,
                 KF_DEV_GAP_PINGS, gap_abs * 1e3, allow * 1e3);
        return 0;
    }
    if (!waits && md < KF_DEV_UNDER_FRAC * mh - KF_DEV_UNDER_ABS) {
        snprintf(detail, cap,
                 "the device reported a median of %.4g ms per call, but the shortest call took "
                 "%.4g ms by kforge's own clock around it; launch and completion overheads "
                 "do not explain more than %.0f%% + %.0f ms of that (the timing was tampered "
                 "with?)", md * 1e3, mh * 1e3, 100 * (1 - KF_DEV_UNDER_FRAC), KF_DEV_UNDER_ABS * 1e3);
        return 0;
    }
    return 1;
}

int kf_verify_refuse_forbidden(kf_backend *b, const kf_candidate *cand, const char *artifact, kf_vresult *r) {
    char why[sizeof r->detail];
    if (!kf_verify_forbidden(cand->source, artifact, b && kf_verify_is_device(b), why, sizeof why)) return 0;
    r->status = KF_V_FORBIDDEN;
    snprintf(r->detail, sizeof r->detail, "%s", why);
    return 1;
}

/* Check (and time) an artifact; see verify.h. */
kf_status kf_verify_artifact(kf_verify_ctx *c, kf_backend *b, const kf_candidate *cand,
                             const char *artifact, kf_vresult *r, kf_error *err) {
    result_init(r);
    double t0 = kf_now();
    if (!c || !cand || !artifact) {
        snprintf(r->detail, sizeof r->detail, "kf_verify_artifact: missing argument");
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_verify_artifact: missing argument");
    }
    /* a kernel that calls a library is refused before anything of it runs */
    if (kf_verify_refuse_forbidden(b, cand, artifact, r)) {
        r->run_wall_s = kf_now() - t0;
        return KF_OK;
    }
    char runner[PATH_MAX], abs_art[PATH_MAX];
    int threads;
    kf_sbx sb;
    int dev = b && kf_verify_is_device(b);
    /* a CPU candidate's region is the one the task's last candidate ran in, where it can be
     * (kf_sbx_reuse): the parent poisons every output in full before every call there, and
     * writes every input and guard before the first run, as in a new region. A device's
     * stays per candidate (its outputs are poisoned on the device, the host copy is the
     * last call's) */
    double t_open = kf_now();
    kf_status st = open_region(c, dev ? NULL : c, b, &artifact, runner, abs_art, &threads, &sb, r, err,
                               !dev && resident_plan(c));
    if (st != KF_OK) return st;
    if (sb.nslots > 0 && !sb.slots_ok) {
        /* every set into its slot, once for the region (resident_sweep keeps them as drawn) */
        for (int s = 0; s < c->nsets; s++) kf_verify_put_inputs(c, &sb, s, 1);
        sb.slots_ok = 1;
        __atomic_add_fetch(&c->slot_sets_written, c->nsets, __ATOMIC_RELAXED);
    }
    t_open = kf_now() - t_open;
    const kf_verify_opts *o = &c->opts;
    kf_run_ctl *ctl = sb.ctl;
    kf_sbx_limits lim = {
        .wall_s = o->wall_limit_s, .cpu_s = o->cpu_limit_s, .mem_bytes = o->mem_limit,
        .output_cap = o->output_cap, .threads = threads, .runner = runner,
        .workdir = c->workdir,
        /* device drivers reserve far more address space than they use */
        .no_mem_limit = b && kf_verify_is_device(b),
        .poll_output = b && kf_verify_is_device(b),
        /* the parent starts and times every call and kills the runner after the last
         * (runproto.h); a device's own time of a call is checked against the parent's */
        .handshake = 1,
    };
    /* a device target's outputs are poisoned on the device: the parent writes one element
     * of the pattern, the runner spreads it (runproto.h 'i'), instead of writing and
     * copying in the whole output before every call (issue 30) */
    for (int j = 0; j < c->nout && dev; j++)
        sb.poison_size[c->nin + j] = kf_dtype_size(c->g->values[c->g->outputs[j]].dtype);
    char detail[1500];
    kf_vstatus vs = KF_V_OK;
    double slowest = 0;
    /* the cache flush before each timed call: when the task's data fits in the last-level
     * cache. CPU (handshake) runs on x86-64 and arm64: the parent evicts the task's buffers
     * line by line (lim.evict); elsewhere the runner writes a buffer of twice the cache
     * (flush_bytes), set for the check runs too, so that their control page reads like the
     * timing run's (the runner flushes only when told to). docs/design-notes.md has the
     * numbers that decided it (issue 30). */
    int64_t llc = b ? (b->info.l3_bytes > 0 ? b->info.l3_bytes : b->info.l2_bytes) : 0;
    int64_t cache = o->cache_bytes > 0 ? o->cache_bytes : (llc > 0 ? llc : (32ll << 20));
    int fits = (int64_t)sb.data_bytes < cache;
    lim.evict = fits && !dev && kf_sbx_can_evict();
    uint64_t flush_bytes = fits && !lim.evict ? (uint64_t)(2 * cache) : 0;
    /* the request as the parent wrote it: the control page is the kernel's to write during a
     * run, so every run gets these fields again from this copy (a check run must not pick
     * the next run's entry, artifact or target) */
    char req_target[sizeof ctl->target];
    snprintf(req_target, sizeof req_target, "%s", ctl->target);
    /* A device candidate runs in ONE runner process (one context: about 0.14 s to create,
     * in a new process or in the same one; docs/design-notes.md, issue 30): a check call
     * per set, each on its freshly loaded set with poisoned outputs and fresh guards,
     * copied back and checked in full before the next; then, with --time, the timing plan
     * in the same process. So does a CPU candidate (issue 30: seven runner starts and
     * stops a candidate), unless KFORGE_CHECK_PROCS=1 asks for one process per set and
     * one for the timing, as before (docs/design-notes.md). */
    const char *procs = getenv("KFORGE_CHECK_PROCS");
    int merged = dev || !(procs && procs[0] == '1');
    calls_cb cb = {.cs = {.c = c, .sb = &sb, .r = r, .next = 0}, .ncheck = c->nsets};
    double t_load = 0, t_run = 0, t_cmp = 0; /* the check runs' parts (KFORGE_LOG=2) */
    for (int s = 0; s < c->nsets && !merged; s++) {
        double tl = kf_now();
        kf_verify_load_set(c, &sb, s);
        t_load += kf_now() - tl;
        request(ctl, cand, artifact, req_target);
        if (o->time_it) {
            ctl->flush_bytes = flush_bytes;
            ctl->fresh_outputs = o->fresh_outputs;
        }
        ctl->mode = KF_RUN_CHECK;
        lim.tag = __atomic_add_fetch(&run_counter, 1, __ATOMIC_RELAXED);
        double w = 0, tr = kf_now();
        st = kf_sbx_run(&sb, &lim, &vs, detail, sizeof detail, &w, err);
        t_run += kf_now() - tr;
        r->start_s += sb.start_s;
        if (w > slowest) slowest = w;
        if (st != KF_OK) {
            snprintf(r->detail, sizeof r->detail, "%s", err ? err->msg : "the runner could not be started");
            goto done;
        }
        r->sets_run = s + 1;
        double tc = kf_now();
        if (vs == KF_V_OK) vs = check_call(c, &sb, s, r, detail, sizeof detail);
        t_cmp += kf_now() - tc;
        if (vs != KF_V_OK) {
            fail_set(c, r, vs, s, "set", detail);
            goto done;
        }
    }
    if (!merged) {
        r->status = KF_V_OK;
        r->check_s = kf_now() - t0 - r->start_s;
        kf_log(2, "verify: %d check runs in %.3f s: sets written %.3f s, runs %.3f s (starts %.3f s), "
               "checked %.3f s", c->nsets, r->check_s + r->start_s, t_load, t_run, r->start_s, t_cmp);
    }

    if (o->time_it || merged) {
        double tt = kf_now(), start0 = r->start_s;
        if (!merged) kf_verify_load_set(c, &sb, 0); /* (merged: the first check call's) */
        request(ctl, cand, artifact, req_target);
        ctl->mode = o->time_it ? KF_RUN_TIME : KF_RUN_CHECK;
        ctl->min_reps = o->min_reps > 0 ? o->min_reps : 1;
        ctl->max_reps = o->max_reps > 0 ? o->max_reps : 1;
        if (ctl->max_reps > KF_RUN_MAX_REPS) ctl->max_reps = KF_RUN_MAX_REPS;
        if (ctl->min_reps > ctl->max_reps) ctl->min_reps = ctl->max_reps;
        ctl->min_time_s = o->min_time_s;
        /* a CPU candidate's check calls ran in this process just before: they warmed it
         * (code, libraries, threads, pages), so one warm-up call follows them, not 50 ms
         * of calls (a device keeps its 50 ms: clocks and caches of its own) */
        ctl->warmup_s = merged && !dev ? 0 : 0.05;
        ctl->budget_s = o->wall_limit_s > 0 ? 0.5 * o->wall_limit_s : 10.0;
        ctl->flush_bytes = flush_bytes;
        ctl->fresh_outputs = o->fresh_outputs;
        if (merged) {
            /* the check calls' limits times the sets, and (timed) the timing's room; one call
             * past the wall limit is a hang however many are left */
            double per = o->wall_limit_s > 0 ? o->wall_limit_s : 0;
            double room = per > 0 ? per * c->nsets + (o->time_it ? ctl->budget_s + 3.0 * per + 1.0 : 0) : 0;
            if (lim.cpu_s > 0 && per > 0) lim.cpu_s *= room / per;
            lim.wall_s = room;
            lim.call_wall_s = per;
            lim.calls = c->nsets;
            /* each set's inputs kept on the device after its first call, where a quarter
             * of the device's memory holds them all (issue 30: a timed call's inputs were
             * written and copied in again, 5 ms a call for swish on the H100) */
            uint64_t in_span = 0;
            for (int i = 0; i < c->nin; i++) in_span += c->in_bytes[i] + 2 * KF_RUN_GUARD + KF_RUN_ALIGN;
            lim.keep_sets = dev && b->iface->copy_dd && c->nsets <= KF_RUN_STASH_SLOTS &&
                            b->info.global_mem_bytes > 0 &&
                            (double)in_span * c->nsets <= 0.25 * (double)b->info.global_mem_bytes;
        } else {
            /* A kernel that passed the check within the wall limit is not hanging; the
             * timing run needs at least a warm-up and a rep, so it gets room for a few more. */
            double need = ctl->budget_s + 3.0 * slowest + 1.0;
            if (lim.wall_s > 0 && lim.wall_s < need) lim.wall_s = need;
        }
        lim.tag = __atomic_add_fetch(&run_counter, 1, __ATOMIC_RELAXED);
        /* between a device candidate's calls the host's cores are free: the inputs, the
         * poison and the checks use every thread (at official GPU shapes a call's set is
         * gigabytes: one thread took seconds per call); a CPU candidate's stay on one */
        cb.tc = (timed_calls){.c = c, .sb = &sb, .par = dev, .cur = merged ? -1 : 0, .first = -1, .lent_bad = -1};
        /* an order of sets only this process knows: seeded from the clock, not the task's seed */
        double now = kf_now();
        kf_verify_rng_seed(&cb.tc.rng, kf_hash64(&now, sizeof now, (uint64_t)(uintptr_t)&cb));
        if (!merged) cb.ncheck = 0;
        if (lim.handshake) {
            lim.stable_rel = o->stable_rel;
            __atomic_load(&c->race_s, &lim.race_s, __ATOMIC_RELAXED);
            lim.prepare = calls_prepare;
            lim.check = calls_check;
            lim.cb_arg = &cb;
        }
        cb.host = lim.handshake && !dev && o->time_it;
        c->host_timing = cb.host && !merged;
        st = kf_sbx_run(&sb, &lim, &vs, detail, sizeof detail, NULL, err);
        c->host_timing = 0;
        r->start_s += sb.start_s;
        if (merged) {
            /* the check calls' share of the run and the timing's */
            double run = kf_now() - tt - (r->start_s - start0);
            double chk = sb.hs_checks_end_s > 0 ? sb.hs_checks_end_s - sb.start_s : run;
            r->check_s = chk < run ? chk : run;
            r->timing_s = o->time_it ? run - r->check_s : 0;
        } else {
            r->timing_s = kf_now() - tt - (r->start_s - start0);
        }
        r->evicted = lim.handshake ? sb.hs_evicted : 0;
        if (st != KF_OK) {
            r->status = KF_V_INTERNAL;
            snprintf(r->detail, sizeof r->detail, "%s", err ? err->msg : "the runner could not be started");
            goto done;
        }
        if (merged) {
            /* the check calls: each was checked in the run; a failure there is its set's */
            int in_checks = sb.hs_checks_end_s <= 0;
            r->sets_run = in_checks ? (vs != KF_V_OK && sb.hs_fail_call > 0 ? sb.hs_fail_call : sb.hs_calls) : c->nsets;
            if (r->sets_run < 1) r->sets_run = 1;
            if (r->sets_run > c->nsets) r->sets_run = c->nsets;
            if (vs != KF_V_OK && in_checks) {
                fail_set(c, r, vs, sb.hs_fail_call > 0 ? sb.hs_fail_set : sb.hs_last_set, "set", detail);
                goto done;
            }
            if (vs == KF_V_OK && in_checks) {
                r->status = KF_V_INTERNAL;
                snprintf(r->detail, sizeof r->detail, "the check calls ended before the last was checked");
                goto done;
            }
            r->status = KF_V_OK;
            if (!o->time_it) goto done;
        }
        /* the last call, as it left the region: checked in full */
        int tset = lim.handshake ? sb.hs_last_set : 0;
        if (vs != KF_V_OK && lim.handshake && sb.hs_fail_call > 0) tset = sb.hs_fail_set;
        else if (vs == KF_V_OK && lim.handshake) vs = check_call(c, &sb, tset, r, detail, sizeof detail);
        else if (vs == KF_V_OK) vs = check_memory(c, &sb, 0, r, detail, sizeof detail);
        if (vs == KF_V_OK && cb.tc.lent_bad >= 0) {
            /* (resident sets) the first set's slot, changed when it was lent to the final call */
            vs = KF_V_INPUT_MODIFIED;
            tset = cb.tc.lent_bad;
            snprintf(detail, sizeof detail, "%s", cb.tc.lent_detail);
        }
        if (vs != KF_V_OK) {
            fail_set(c, r, vs, tset, "timing run on set", detail);
            goto done;
        }
        /* The CPU-time witness: the run's processes, pinned to --threads CPUs, cannot use
         * more CPU time than those CPUs give in the time they were running (a process or
         * thread that escaped the pinning, or ran while the run was meant to be stopped,
         * would). KF_CPU_OVER_REL and KF_CPU_OVER_ABS cover the accounting's granularity. */
        r->timing_cpu_s = sb.hs_cpu_s;
        r->timing_run_s = sb.hs_run_s;
        if (sb.hs_pinned > 0 && sb.hs_run_s > 0 &&
            sb.hs_cpu_s > sb.hs_pinned * sb.hs_run_s * KF_CPU_OVER_REL + KF_CPU_OVER_ABS) {
            r->status = KF_V_IMPOSSIBLE;
            snprintf(r->detail, sizeof r->detail,
                     "the timing run's processes used %.3f s of CPU time in %.3f s of running on "
                     "%d CPU%s: more than --threads %d allows (work moved to processes or threads "
                     "beyond the CPUs the run was pinned to?)", sb.hs_cpu_s, sb.hs_run_s,
                     sb.hs_pinned, sb.hs_pinned == 1 ? "" : "s", sb.hs_pinned);
            goto done;
        }
        int reps = lim.handshake ? sb.hs_reps : ctl->reps;
        if (reps < 1 || reps > KF_RUN_MAX_REPS) {
            r->status = KF_V_INTERNAL;
            snprintf(r->detail, sizeof r->detail, "the timing run reported %d reps", reps);
            goto done;
        }
        double *t = kf_malloc(sizeof *t * (size_t)reps);
        /* on a device the device's own times count, each checked against the parent's
         * clock around its call (dev_times_believable) */
        memcpy(t, dev ? sb.hs_dev : lim.handshake ? sb.hs_times : ctl->times, sizeof *t * (size_t)reps);
        r->time_host_ms = median_of(sb.hs_times, reps) * 1e3;
        /* A rep time that is not a positive finite number is no measurement: NaN would
         * sort anywhere and compare false against every bound below (a 'nan ms' best
         * kernel was seen), zero or negative is faster than anything. The whole timing
         * is then rejected, as a time under the floor is. */
        int bad_rep = -1;
        for (int i = 0; i < reps && bad_rep < 0; i++)
            if (!(t[i] > 0) || !isfinite(t[i])) bad_rep = i;
        if (bad_rep >= 0) {
            r->status = KF_V_IMPOSSIBLE;
            snprintf(r->detail, sizeof r->detail,
                     "timed rep %d of %d took %g ms: a time must be a positive finite number "
                     "(the timing was tampered with?)", bad_rep + 1, reps, t[bad_rep] * 1e3);
            free(t);
            goto done;
        }
        if (dev && !dev_times_believable(sb.hs_dev, sb.hs_times, sb.hs_delay, reps, sb.hs_ping, sb.hs_pings,
                                         dev_gap_abs(b), r, r->detail, sizeof r->detail)) {
            r->status = KF_V_IMPOSSIBLE;
            free(t);
            goto done;
        }
        if (kf_log_level() >= 3) {
            /* the reps in the order they ran (KFORGE_LOG=3): the timing's noise, call by call */
            kf_buf tl = {0};
            for (int i = 0; i < reps; i++) kf_buf_printf(&tl, " %.3f", t[i] * 1e3);
            kf_log(3, "verify: %d timed reps (ms):%s", reps, tl.data ? tl.data : "");
            kf_buf_free(&tl);
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        double sum = 0;
        for (int i = 0; i < reps; i++) sum += t[i];
        double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
        r->timed = 1;
        r->reps = reps;
        snprintf(r->time_stop, sizeof r->time_stop, "%s", lim.handshake ? sb.hs_stop : "");
        r->time_ms = med * 1e3;
        r->time_min_ms = t[0] * 1e3;
        r->time_mean_ms = sum / reps * 1e3;
        free(t);
        if (o->floor_s > 0 && med < 0.9 * o->floor_s) { /* every rep is positive and finite (above) */
            r->status = KF_V_IMPOSSIBLE;
            snprintf(r->detail, sizeof r->detail,
                     "median time %.4g ms is below 90%% of the roofline floor %.4g ms: no kernel "
                     "can move the task's bytes or do its FLOPs that fast (results cached "
                     "across calls, or work skipped?)",
                     r->time_ms, o->floor_s * 1e3);
        }
    }
done:;
    double t_close = kf_now();
    int reused = sb.reused;
    double mib = (double)sb.total / (1 << 20);
    if (!dev && sb.nslots > 0) {
        /* nothing of the runs left to write (the last runner reaped; kf_sbx_reuse refuses the
         * region when another process of its group is left) */
        kf_sbx_reap(&sb);
        resident_sweep(c, &sb, r);
    }
    if (dev) kf_sbx_free(&sb);
    else region_give_back(c, &sb);
    kf_log(2, "verify: the buffer region (%.1f MiB, %s) opened in %.4f s, %s in %.4f s", mib,
           reused ? "kept" : "new", t_open, c->kept_region ? "kept" : "freed", kf_now() - t_close);
    r->run_wall_s = kf_now() - t0;
    if (!r->timing_s) r->check_s = r->run_wall_s - r->start_s; /* a failed check: all of it */
    return st;
}

/* Compile with b into the context's workdir, then check; see verify.h. */
kf_status kf_verify_candidate(kf_verify_ctx *c, kf_backend *b, const kf_candidate *cand,
                              kf_vresult *r, kf_error *err) {
    result_init(r);
    double t0 = kf_now();
    if (!c || !b || !cand || !cand->source) {
        snprintf(r->detail, sizeof r->detail, "kf_verify_candidate: missing argument");
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_verify_candidate: missing argument");
    }
    if (cand->platform[0] && strcmp(cand->platform, b->info.platform) != 0) {
        snprintf(r->detail, sizeof r->detail, "candidate is for platform '%s', backend is '%s'",
                 cand->platform, b->info.platform);
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "%s", r->detail);
    }
    kf_buf log = {0};
    char art[PATH_MAX];
    kf_error e = {0};
    kf_status st;
    double compile_s = 0;
    const kf_launch_plan *plan = NULL;
    if (kf_platform_declares_plan(b->info.platform, cand->source) &&
        (st = kf_candidate_plan(cand, c->nin + c->nout, &plan, &e)) != KF_OK) {
        /* the candidate's plan, parsed once and carried (the analysis reads it too); its
         * error reads as the backend's compile reports one */
        kf_buf_printf(&log, "kforge: bad launch plan: %s\n", e.msg);
    } else {
        double tc = kf_now();
        st = kf_backend_compile(b, cand->source, cand->flags, c->workdir, art, sizeof art, &log, &e);
        compile_s = kf_now() - tc;
    }
    /* a malformed launch plan (KF_ERR_PARSE) is the candidate's fault, like a build error */
    if (st == KF_ERR_COMPILE || st == KF_ERR_PARSE) {
        r->status = KF_V_COMPILE_ERROR;
        const char *tail = log.data ? log.data : "";
        size_t keep = sizeof r->detail - strlen(e.msg) - 8;
        if (log.len > keep) {
            tail = log.data + log.len - keep;
            const char *nl = strchr(tail, '\n');
            if (nl && nl[1]) tail = nl + 1;
        }
        snprintf(r->detail, sizeof r->detail, "%s\n%s", e.msg, tail);
        kf_buf_free(&log);
        r->compile_s = compile_s;
        r->run_wall_s = kf_now() - t0;
        return KF_OK;
    }
    char res[sizeof r->resources];
    resource_lines(log.data, res, sizeof res);
    kf_buf_free(&log);
    if (st != KF_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", e.msg);
        if (err) *err = e;
        r->compile_s = compile_s;
        r->run_wall_s = kf_now() - t0;
        return st;
    }
    st = kf_verify_artifact(c, b, cand, art, r, err);
    r->compile_s = compile_s;
    snprintf(r->resources, sizeof r->resources, "%s", res);
    r->run_wall_s = kf_now() - t0;
    return st;
}
