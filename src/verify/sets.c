/*
 * The input sets and their reference (verify_int.h, "sets.c"): each set drawn from the
 * seed in independently seeded blocks, its float64 reference computed by the interpreter,
 * and the memory plan that decides what a context keeps between checks.
 *
 * The plan. A context keeps, per set, every input and every output's reference (and error
 * bound) when the machine's memory holds them; at KernelBench's official GPU shapes it
 * does not (an activation over [4096, 393216] is 6 GiB a tensor, six sets of inputs,
 * references and the float64 scratch about 100 GiB). Then, in this order:
 *   1. keep no inputs (keep_in 0): a run's input buffers are filled by drawing the set
 *      again from the seed (the same blocks, so the same bytes), and the unchanged-input
 *      check compares keyed hashes of KF_DRAW_BLOCK-element blocks taken when the set was
 *      first drawn; a mismatch is then located by drawing the set once more;
 *   2. keep one reference (keep_ref 0): only one set's reference and bound live, in shared
 *      buffers, and a check of another set computes that set's again (the float64 scratch
 *      stays allocated, so it is faulted in once).
 * Nothing is checked less in either: every set, every element, the same tolerances. What
 * the plans cost is time (a redraw per run, a reference per set per candidate). The memory
 * the context may hold: kf_verify_opts.host_mem, else KFORGE_HOST_MEM (GiB), else the
 * machine's physical memory; beyond the leanest plan the task is refused before anything
 * is allocated.
 */
#include "verify/verify_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t mix_seed(uint64_t seed, int set, int input) {
    uint64_t x = seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(set + 1));
    x ^= 0xD1B54A32D192ED03ull * (uint64_t)(input + 1);
    x ^= x >> 29;
    return x * 0xBF58476D1CE4E5B9ull;
}

/* A keyed hash of one block's bytes: four multiply-rotate lanes over 32-byte steps, the
 * tail and the length folded in. Not a cryptographic hash, but the key is this process's
 * secret: a kernel that changes an input and keeps every block's hash would have to know
 * it. */
static uint64_t block_hash(uint64_t key, const void *p, size_t bytes) {
    const unsigned char *b = p;
    const uint64_t k1 = key | 1, k2 = 0x9E3779B97F4A7C15ull, k3 = (key >> 17 | key << 47) | 1;
    uint64_t h[4] = {key, key ^ k2, ~key, key * k2};
    size_t i = 0;
    for (; i + 32 <= bytes; i += 32) {
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, b + i + 8 * l, 8);
            uint64_t x = h[l] ^ (w * k1);
            h[l] = (x << 29 | x >> 35) * k3;
        }
    }
    uint64_t t = 0, r = h[0] ^ (h[1] * k2) ^ (h[2] * k1) ^ (h[3] * k3) ^ (uint64_t)bytes;
    for (; i < bytes; i++) t = t << 8 | b[i];
    r ^= t * k1;
    r ^= r >> 31;
    r *= 0x94D049BB133111EBull;
    r ^= r >> 29;
    return r;
}

/* Draw input i of set s (magnitude limit mag): into data (typed; NULL: only as needed for
 * the rest), vals (float64; may be NULL) and hash (per block; may be NULL). */
static void draw_input(const kf_verify_ctx *c, int s, int i, int pos, double mag, void *data,
                       double *vals, uint64_t *hash, int par) {
    const kf_value *x = &c->g->values[c->g->inputs[i]];
    int64_t n = c->in_numel[i];
    int es = kf_dtype_size(x->dtype);
    int64_t nblk = (n + KF_DRAW_BLOCK - 1) / KF_DRAW_BLOCK;
    uint64_t base = mix_seed(c->seed, s, i);
    int dist = c->sets[s].dist;
#pragma omp parallel if (par && nblk > 1)
    {
    /* without a destination: one block's room per thread, not one allocation per block */
    void *own = data ? NULL : kf_malloc((size_t)KF_DRAW_BLOCK * (size_t)es);
#pragma omp for schedule(dynamic, 1)
    for (int64_t k = 0; k < nblk; k++) {
        int64_t from = k * KF_DRAW_BLOCK, cnt = n - from < KF_DRAW_BLOCK ? n - from : KF_DRAW_BLOCK;
        void *p = data ? (char *)data + from * es : own;
        kf_verify_draw_block(kf_verify_block_key(base, k), dist, x->dtype, pos, mag, x->has_range, x->lo, x->hi, p,
                             vals ? vals + from : NULL, cnt);
        if (hash) hash[k] = block_hash(c->hkey, p, (size_t)(cnt * es));
    }
    free(own);
    }
}

/* A large buffer (a set's data, a reference, the float64 scratch): at 64 MiB and more
 * aligned to 2 MiB and offered transparent huge pages, so that first touching gigabytes
 * takes one fault per 2 MiB, not per 4 KiB (on the GPU machine's microVM each fault also
 * grows the guest's memory: the faults of ~64 GB were minutes of system time). n > 0. */
static void *big_alloc(size_t n) {
    if (n < (64u << 20)) return kf_malloc(n);
    void *p = NULL;
    size_t al = 2u << 20, rounded = (n + al - 1) & ~(al - 1);
    if (posix_memalign(&p, al, rounded) != 0) return kf_malloc(n); /* kf_malloc aborts cleanly */
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE); /* a hint: failure is harmless */
#endif
    return p;
}

/* The smallest float at or above v (v >= 0; a bound is rounded up). */
static inline float round_up_f32(double v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t up = (double)f < v;
    if (f >= 0 && u < 0x7f800000u) {
        u += up; /* the next float up of a finite non-negative one */
        memcpy(&f, &u, 4);
    } else if (up) {
        f = nextafterf(f, INFINITY);
    }
    return f;
}

/* Elements [e0, e1) of a reference in dtype dt from their float64 values (dj[0] is element
 * e0), and their sum of squares and count of the finite ones (the RMS's terms). */
static void ref_chunk(kf_dtype dt, void *ref, const double *dj, int64_t e0, int64_t e1, double *ss_out,
                      int64_t *nf_out) {
    double ss = 0;
    int64_t nf = 0;
    for (int64_t e = e0; e < e1; e++) {
        double w;
        if (dt == KF_F32) { /* the common case without a call per element */
            float f = (float)dj[e - e0];
            ((float *)ref)[e] = f;
            w = (double)f;
        } else {
            kf_verify_store(dt, ref, e, dj[e - e0]);
            w = kf_verify_load(dt, ref, e);
        }
        if (isfinite(w)) {
            ss += w * w;
            nf++;
        }
    }
    *ss_out = ss;
    *nf_out = nf;
}

/* See verify_int.h: output j of set v from its float64 reference (kept per set, or into the
 * shared buffers with one reference at a time). */
void kf_verify_set_ref(kf_verify_ctx *c, kf_vset *v, int j, const double *dj, const double *bd) {
    const kf_graph *g = c->g;
    kf_dtype dt = g->values[g->outputs[j]].dtype;
    if (c->keep_ref) {
        free(v->ref[j]);
        v->ref[j] = big_alloc(c->out_bytes[j] ? c->out_bytes[j] : 1);
    } else {
        v->ref[j] = c->lz_ref[j];
    }
    /* the reference in the output's dtype and its RMS; the sums per fixed chunk, added in
     * chunk order, so the scale does not depend on the thread count */
    int64_t n = c->out_numel[j], nch = (n + KF_VERIFY_CHUNK - 1) / KF_VERIFY_CHUNK;
    double *css = kf_calloc((size_t)nch + 1, sizeof *css);
    int64_t *cnf = kf_calloc((size_t)nch + 1, sizeof *cnf);
    char *cpos = kf_calloc((size_t)nch + 1, 1);
    void *ref = v->ref[j];
#pragma omp parallel for schedule(dynamic, 1) if (nch > 1)
    for (int64_t k = 0; k < nch; k++) {
        int64_t e1 = (k + 1) * KF_VERIFY_CHUNK < n ? (k + 1) * KF_VERIFY_CHUNK : n;
        double ss = 0;
        int64_t nf = 0;
        char any = 0;
        ref_chunk(dt, ref, dj + k * KF_VERIFY_CHUNK, k * KF_VERIFY_CHUNK, e1, &ss, &nf);
        if (bd)
            for (int64_t e = k * KF_VERIFY_CHUNK; e < e1; e++) any |= bd[e] > 0;
        css[k] = ss;
        cnf[k] = nf;
        cpos[k] = any;
    }
    double ss = 0;
    int64_t nf = 0, anypos = 0;
    for (int64_t k = 0; k < nch; k++) {
        ss += css[k];
        nf += cnf[k];
        anypos |= cpos[k];
    }
    free(css);
    free(cnf);
    free(cpos);
    v->ref_rms[j] = nf ? sqrt(ss / (double)nf) : 0;
    if (c->keep_ref) {
        free(v->bound[j]);
        v->bound[j] = NULL;
    }
    if (bd && anypos) { /* rounded up: a bound */
        float *bj = c->keep_ref ? big_alloc(sizeof(float) * (size_t)n) : c->lz_bound[j];
#pragma omp parallel for schedule(static) if (n >= KF_VERIFY_CHUNK)
        for (int64_t e = 0; e < n; e++) bj[e] = round_up_f32(bd[e]);
        v->bound[j] = bj;
    } else {
        v->bound[j] = NULL;
    }
}

void kf_verify_draw_input(const kf_verify_ctx *c, int s, int i, double mag, void *data) {
    draw_input(c, s, i, 0, mag, data, NULL, NULL, 1);
}

/* Whether input i is drawn chunk by chunk by set_pipe: it has the output shape (the
 * others, broadcast or single elements, are drawn whole first). */
static int pipe_chunked(const kf_verify_ctx *c, int i) {
    const kf_graph *g = c->g;
    return kf_shape_equal(&g->values[g->inputs[i]].shape, &g->values[g->outputs[0]].shape);
}

/* Set s of a pointwise graph (c->pipe) drawn and referenced one chunk of KF_VERIFY_CHUNK
 * elements at a time, each chunk on one thread: its inputs' block (the same blocks, keys
 * and calls as draw_input, into the kept inputs and a chunk of float64 values), the
 * interpreter on those elements (kf_interp_run_span: the same f64 calls as the whole
 * graph's run), the reference rounded to the outputs' dtypes with the RMS's sums per chunk,
 * added in chunk order (as kf_verify_set_ref). So the same bytes as drawing the whole set,
 * running the graph and rounding, bit for bit, without the whole-tensor float64 scratch
 * (for swish, 256 MiB of fresh memory: on a VM whose freed memory goes back to the host,
 * first touching a page costs more than computing it) and with each chunk's values in
 * cache from the draw to the reference. *beyond as kf_interp_run_checked's. */
static kf_status set_pipe(kf_verify_ctx *c, int s, double shrink, int *beyond, kf_error *err) {
    _Static_assert(KF_VERIFY_CHUNK == KF_DRAW_BLOCK, "a chunk is one draw block");
    const kf_graph *g = c->g;
    kf_vset *v = &c->sets[s];
    int nin = c->nin, nout = c->nout;
    int64_t n = c->out_numel[0], nch = (n + KF_VERIFY_CHUNK - 1) / KF_VERIFY_CHUNK;
    double tm = kf_now();
    for (int i = 0; i < nin; i++)
        if (!pipe_chunked(c, i)) draw_input(c, s, i, c->pos[i], c->mag[i] * shrink, v->in[i], c->din[i], NULL, 1);
    double tw = kf_now();
    for (int j = 0; j < nout; j++)
        if (!v->ref[j]) v->ref[j] = big_alloc(c->out_bytes[j] ? c->out_bytes[j] : 1);
    double *css = kf_calloc((size_t)(nch * nout) + 1, sizeof *css);
    int64_t *cnf = kf_calloc((size_t)(nch * nout) + 1, sizeof *cnf);
    double t_draw = 0, t_ref = 0;
    int far = 0, bad = 0;
#pragma omp parallel reduction(+ : t_draw, t_ref) reduction(| : far, bad)
    {
        double *mine = kf_malloc(sizeof(double) * (size_t)KF_VERIFY_CHUNK * (size_t)(nin + nout));
        const double **ins = kf_calloc((size_t)nin + 1, sizeof *ins);
        double **outs = kf_calloc((size_t)nout, sizeof *outs);
        for (int j = 0; j < nout; j++) outs[j] = mine + (size_t)KF_VERIFY_CHUNK * (size_t)(nin + j);
#pragma omp for schedule(dynamic, 1)
        for (int64_t k = 0; k < nch; k++) {
            int64_t from = k * KF_VERIFY_CHUNK, cnt = n - from < KF_VERIFY_CHUNK ? n - from : KF_VERIFY_CHUNK;
            double t0 = kf_now();
            for (int i = 0; i < nin; i++) {
                if (!pipe_chunked(c, i)) {
                    ins[i] = c->din[i];
                    continue;
                }
                const kf_value *x = &g->values[g->inputs[i]];
                double *vals = mine + (size_t)KF_VERIFY_CHUNK * (size_t)i;
                kf_verify_draw_block(kf_verify_block_key(mix_seed(c->seed, s, i), k), v->dist, x->dtype, c->pos[i],
                                     c->mag[i] * shrink, x->has_range, x->lo, x->hi,
                                     (char *)v->in[i] + from * kf_dtype_size(x->dtype), vals, cnt);
                ins[i] = vals;
            }
            double t1 = kf_now();
            int fk = 0;
            kf_error e = {0};
            if (kf_interp_run_span(g, from, cnt, ins, outs, &fk, &e) != KF_OK) bad = 1;
            far |= fk;
            for (int j = 0; j < nout; j++)
                ref_chunk(g->values[g->outputs[j]].dtype, v->ref[j], outs[j], from, from + cnt, &css[j * nch + k],
                          &cnf[j * nch + k]);
            double t2 = kf_now();
            t_draw += t1 - t0;
            t_ref += t2 - t1;
        }
        free(ins);
        free(outs);
        free(mine);
    }
    for (int j = 0; j < nout; j++) {
        double ss = 0;
        int64_t nf = 0;
        for (int64_t k = 0; k < nch; k++) {
            ss += css[j * nch + k];
            nf += cnf[j * nch + k];
        }
        v->ref_rms[j] = nf ? sqrt(ss / (double)nf) : 0;
        free(v->bound[j]);
        v->bound[j] = NULL;
    }
    free(css);
    free(cnf);
    /* the wall time split between the draw and the reference as the threads' time was */
    double wall = kf_now() - tw, share = t_draw + t_ref > 0 ? t_draw / (t_draw + t_ref) : 0.5;
    c->t_draw += tw - tm + wall * share;
    c->t_ref += wall * (1 - share);
    *beyond = far;
    if (bad) return kf_error_set(err, KF_ERR_INTERNAL, g->path, 0, 0, "the reference of '%s' by chunks failed", g->name);
    return KF_OK;
}

/* Set s: draw its inputs, compute its reference, store it rounded to the outputs' dtypes
 * (kept per set, or into the shared buffers). first: the set's first computation, which
 * settles its magnitude factor and, without kept inputs, takes the block hashes. */
static kf_status set_compute(kf_verify_ctx *c, int s, int first, kf_error *err) {
    const kf_graph *g = c->g;
    kf_vset *v = &c->sets[s];
    kf_status st = KF_OK;
    if (!c->keep_ref && c->ready >= 0) { /* the shared buffers change hands */
        kf_vset *o = &c->sets[c->ready];
        for (int j = 0; j < c->nout; j++) o->ref[j] = NULL, o->bound[j] = NULL;
        c->ready = -1;
    }
    double shrink = first ? 1 : v->shrink;
    for (;; shrink *= 0.5) {
        int beyond = 0;
        if (c->pipe) {
            st = set_pipe(c, s, shrink, &beyond, err);
            goto drawn;
        }
        double tm = kf_now();
        for (int i = 0; i < c->nin; i++)
            draw_input(c, s, i, c->pos[i], c->mag[i] * shrink, c->keep_in ? v->in[i] : NULL, c->din[i],
                       first && !c->keep_in ? v->in_hash[i] : NULL, 1);
        double tb = kf_now();
        /* bounds only where an op can amplify or accumulate rounding (kf_verify_ctx_new) */
        st = kf_interp_run_checked(g, (const double *const *)c->din, c->dout, c->bounded ? c->dbnd : NULL,
                                   &beyond, err);
        c->t_draw += tb - tm;
        c->t_ref += kf_now() - tb;
    drawn:
        /* the offset and large-magnitude sets reach each input's magnitude limit; where the
         * reference then holds a value that float32 cannot (exp(80) times 1e4, finite in
         * float64), no float32 kernel can match it: the set is drawn again at half the
         * magnitude, until the reference stays within float32's range */
        if (!first || st != KF_OK || !beyond || (v->dist != KF_DIST_LARGE && v->dist != KF_DIST_OFFSET) ||
            shrink < 1e-6)
            break;
    }
    v->shrink = shrink;
    for (int j = 0; j < c->nout && st == KF_OK && !c->pipe; j++)
        kf_verify_set_ref(c, v, j, c->dout[j], c->bounded ? c->dbnd[j] : NULL);
    if (st == KF_OK && !c->keep_ref) c->ready = s;
    return st;
}

static void free_scratch(kf_verify_ctx *c) {
    for (int i = 0; c->din && i < c->nin; i++) free(c->din[i]);
    for (int j = 0; c->dout && j < c->nout; j++) free(c->dout[j]);
    for (int j = 0; c->dbnd && j < c->nout; j++) free(c->dbnd[j]);
    free(c->din);
    free(c->dout);
    free(c->dbnd);
    c->din = c->dout = c->dbnd = NULL;
}

void kf_verify_sets_free(kf_verify_ctx *c) {
    if (c->sets) {
        for (int s = 0; s < c->nsets; s++) {
            kf_vset *v = &c->sets[s];
            for (int i = 0; v->in && i < c->nin; i++) free(v->in[i]);
            for (int i = 0; v->in_hash && i < c->nin; i++) free(v->in_hash[i]);
            for (int j = 0; c->keep_ref && v->ref && j < c->nout; j++) free(v->ref[j]);
            for (int j = 0; c->keep_ref && v->bound && j < c->nout; j++) free(v->bound[j]);
            free(v->in);
            free(v->in_hash);
            free(v->ref);
            free(v->bound);
            free(v->ref_rms);
        }
        free(c->sets);
        c->sets = NULL;
    }
    for (int j = 0; c->lz_ref && j < c->nout; j++) free(c->lz_ref[j]);
    for (int j = 0; c->lz_bound && j < c->nout; j++) free(c->lz_bound[j]);
    free(c->lz_ref);
    free(c->lz_bound);
    c->lz_ref = NULL;
    c->lz_bound = NULL;
    free_scratch(c);
    free(c->pos);
    free(c->mag);
    c->pos = NULL;
    c->mag = NULL;
}

/* n bytes as "1.5 GiB" or "340 MiB" into buf. */
static const char *size_str(uint64_t n, char *buf, size_t cap) {
    if (n >= (1ull << 30)) snprintf(buf, cap, "%.1f GiB", (double)n / (1ull << 30));
    else snprintf(buf, cap, "%.1f MiB", (double)n / (1ull << 20));
    return buf;
}

/* The memory the context may hold, in bytes (see the file comment). */
static uint64_t host_memory(const kf_verify_opts *o) {
    if (o && o->host_mem > 0) return (uint64_t)o->host_mem;
    const char *env = getenv("KFORGE_HOST_MEM");
    if (env && env[0]) {
        char *end;
        double gib = strtod(env, &end);
        if (end != env && gib > 0) return (uint64_t)(gib * (double)(1ull << 30));
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

/* Draw the sets and their references; see verify.h. g must outlive the context. */
kf_status kf_verify_ctx_new(const kf_graph *g, const kf_verify_opts *o, kf_verify_ctx **out,
                            kf_error *err) {
    *out = NULL;
    if (!g) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_verify_ctx_new: no graph");
    if (g->noutputs < 1)
        return kf_error_set(err, KF_ERR_TYPE, g->path, 0, 0, "task '%s' has no outputs", g->name);
    if (g->ninputs + g->noutputs > KF_RUN_MAX_BUFS)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, 0, 0,
                            "the verifier supports at most %d inputs+outputs", KF_RUN_MAX_BUFS);
    for (int k = 0; k < g->ninputs + g->noutputs; k++) {
        int id = k < g->ninputs ? g->inputs[k] : g->outputs[k - g->ninputs];
        const kf_value *v = &g->values[id];
        if (!kf_verify_dtype_ok(v->dtype))
            return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, v->line, v->col,
                                "the verifier cannot store dtype %s of '%s'",
                                kf_dtype_name(v->dtype), v->name);
    }
    if (o) {
        kf_status mst = kf_module_ref_check(g, o->module_ref, err);
        if (mst != KF_OK) return mst;
    }
    int nsets = o && o->nsets > 1 ? o->nsets : 1;
    /* error bounds (kf_interp_run_bounds) where an op can amplify or accumulate rounding: a
     * graph of pointwise ops alone has none beyond rounding its result (rtol covers it) */
    int bounded = 0;
    for (int k = 0; k < g->nnodes; k++) {
        kf_op_class cls = kf_op_get(g->nodes[k].op)->cls;
        if (cls != KF_CLASS_POINTWISE && cls != KF_CLASS_VIEW) bounded = 1;
    }
    /* the longest sum's length: a contraction's K, a sum's or running sum's extent (the
     * interpreter's softmax bound reads the same K) */
    const double bound_k = (double)kf_graph_longest_sum(g);
    /* The plan: what each set keeps against the memory there is. Always: the float64
     * scratch (inputs, outputs, bounds) and a run's buffers (inputs and outputs). */
    uint64_t in_b = 0, out_b = 0, in_n = 0, out_n = 0;
    for (int k = 0; k < g->ninputs + g->noutputs; k++) {
        const kf_value *v = &g->values[k < g->ninputs ? g->inputs[k] : g->outputs[k - g->ninputs]];
        uint64_t bytes;
        if (!kf_shape_bytes(&v->shape, v->dtype, &bytes))
            return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, v->line, v->col,
                                "'%s' is too large to verify", v->name);
        uint64_t numel = bytes / (uint64_t)kf_dtype_size(v->dtype);
        if (k < g->ninputs) in_b += bytes, in_n += numel;
        else out_b += bytes, out_n += numel;
    }
    uint64_t fixed = 8 * in_n + 8 * out_n + (bounded ? 8 * out_n : 0) + in_b + out_b;
    uint64_t refs = out_b + (bounded ? 4 * out_n : 0); /* one set's reference and bounds */
    uint64_t need_all = fixed + (uint64_t)nsets * (in_b + refs);
    uint64_t need_refs = fixed + (uint64_t)nsets * refs;
    uint64_t need_one = fixed + refs;
    uint64_t have = host_memory(o);
    int keep_in = 1, keep_ref = 1;
    /* a module task's sets come from its reference process whole (refproc.c) */
    if (have && need_all > have && !g->module) keep_in = 0;
    if (have && need_refs > have && !g->module) keep_ref = 0;
    char b1[32], b2[32], b3[32];
    if (have && need_one > have)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, 0, 0,
                            "task '%s' needs %s to verify (one input set's reference and the "
                            "float64 scratch, at the least), more than the %s of memory here "
                            "(KFORGE_HOST_MEM sets it, in GiB)",
                            g->name, size_str(need_one, b1, sizeof b1), size_str(have, b2, sizeof b2));
    kf_verify_ctx *c = kf_verify_ctx_shell(g, o);
    c->bound_k = bound_k;
    c->bounded = bounded;
    c->keep_in = keep_in;
    c->keep_ref = keep_ref;
    if (!keep_in || !keep_ref)
        kf_log(1, "verify: '%s' would need %s to keep its %d input sets (%s here): %s (%s)",
               g->name, size_str(need_all, b1, sizeof b1), nsets, size_str(have, b2, sizeof b2),
               keep_ref ? "inputs drawn again for each run" :
                          "inputs drawn again, one reference at a time, computed again per check",
               size_str(keep_ref ? need_refs : need_one, b3, sizeof b3));
    if (!c->seed) {
        double t = kf_now();
        uint64_t pid = (uint64_t)getpid();
        c->seed = kf_hash64(&t, sizeof t, pid) | 1;
    }
    {
        double t = kf_now();
        uint64_t here = (uint64_t)(uintptr_t)c ^ (uint64_t)(uintptr_t)&t;
        c->hkey = kf_hash64(&t, sizeof t, here ^ ((uint64_t)getpid() << 32));
    }

    if (g->module) { /* the module's reference comes from its own process (refproc.c) */
        kf_status mst = kf_verify_module_sets(c, err);
        if (mst != KF_OK) {
            kf_verify_ctx_free(c);
            return mst;
        }
        kf_log(2, "verify: %d input sets of module task '%s' drawn in %.2f s, reference process took %.2f s "
                  "(seed %llu)", c->nsets, g->name, c->t_draw, c->t_ref, (unsigned long long)c->seed);
        *out = c;
        return KF_OK;
    }
    c->pos = kf_calloc((size_t)c->nin + 1, sizeof *c->pos);
    c->mag = kf_calloc((size_t)c->nin + 1, sizeof *c->mag);
    kf_graph_input_domains(g, c->pos, c->mag);
    c->nsets = c->opts.nsets;
    c->sets = kf_calloc((size_t)c->nsets, sizeof *c->sets);
    /* the float64 copies the interpreter reads and writes: allocated once and reused by
     * every set (at official GPU shapes an output is a gigabyte or more of doubles: faulting
     * it in again per set cost more than computing it) */
    c->din = kf_calloc((size_t)c->nin + 1, sizeof *c->din);
    c->dout = kf_calloc((size_t)c->nout, sizeof *c->dout);
    c->dbnd = kf_calloc((size_t)c->nout, sizeof *c->dbnd);
    /* a pointwise graph whose sets are all kept: drawn and referenced chunk by chunk
     * (set_pipe), with float64 copies of the broadcast inputs alone */
    c->pipe = keep_in && keep_ref && !bounded && kf_interp_fusable(g) && !getenv("KFORGE_SETS_WHOLE");
    for (int i = 0; i < c->nin; i++)
        if (!c->pipe || !pipe_chunked(c, i))
            c->din[i] = big_alloc(sizeof(double) * (size_t)(c->in_numel[i] ? c->in_numel[i] : 1));
    for (int j = 0; j < c->nout && !c->pipe; j++) {
        c->dout[j] = big_alloc(sizeof(double) * (size_t)(c->out_numel[j] ? c->out_numel[j] : 1));
        if (bounded) c->dbnd[j] = big_alloc(sizeof(double) * (size_t)(c->out_numel[j] ? c->out_numel[j] : 1));
    }
    if (!keep_ref) {
        c->lz_ref = kf_calloc((size_t)c->nout, sizeof *c->lz_ref);
        c->lz_bound = kf_calloc((size_t)c->nout, sizeof *c->lz_bound);
        for (int j = 0; j < c->nout; j++) {
            c->lz_ref[j] = big_alloc(c->out_bytes[j] ? c->out_bytes[j] : 1);
            if (bounded) c->lz_bound[j] = big_alloc(sizeof(float) * (size_t)(c->out_numel[j] ? c->out_numel[j] : 1));
        }
    }
    kf_status st = KF_OK;
    kf_interp_hold(1); /* the sets' walks reuse each other's arrays */
    for (int s = 0; s < c->nsets && st == KF_OK; s++) {
        kf_vset *v = &c->sets[s];
        v->dist = s % KF_DIST_COUNT;
        v->shrink = 1;
        v->in = kf_calloc((size_t)c->nin + 1, sizeof *v->in);
        v->in_hash = kf_calloc((size_t)c->nin + 1, sizeof *v->in_hash);
        v->ref = kf_calloc((size_t)c->nout, sizeof *v->ref);
        v->ref_rms = kf_calloc((size_t)c->nout, sizeof *v->ref_rms);
        v->bound = kf_calloc((size_t)c->nout, sizeof *v->bound);
        for (int i = 0; i < c->nin; i++) {
            if (keep_in) v->in[i] = big_alloc(c->in_bytes[i] ? c->in_bytes[i] : 1);
            else v->in_hash[i] = kf_calloc((size_t)((c->in_numel[i] + KF_DRAW_BLOCK - 1) / KF_DRAW_BLOCK) + 1, 8);
        }
        /* every set is computed once here, whatever is kept: that settles its magnitude
         * factor and hashes, and a reference the interpreter cannot compute fails now */
        st = set_compute(c, s, 1, err);
    }
    kf_interp_hold(0);
    if (keep_ref) free_scratch(c);
    kf_log(2, "verify: %d input sets of '%s' drawn in %.2f s, reference computed in %.2f s "
              "(seed %llu)", c->nsets, g->name, c->t_draw, c->t_ref, (unsigned long long)c->seed);
    if (st != KF_OK) {
        kf_verify_ctx_free(c);
        return st;
    }
    *out = c;
    return KF_OK;
}

kf_status kf_verify_set_ready(kf_verify_ctx *c, int s, kf_error *err) {
    if (c->keep_ref || c->ready == s) return KF_OK;
    return set_compute(c, s, 0, err);
}

void kf_verify_put_inputs(const kf_verify_ctx *c, kf_sbx *sb, int s, int par) {
    const kf_vset *v = &c->sets[s];
    for (int i = 0; i < c->nin; i++) {
        if (c->keep_in) {
            int64_t nb = (int64_t)c->in_bytes[i], ch = (int64_t)1 << 20, nck = (nb + ch - 1) / ch;
            char *dst = kf_sbx_data(sb, kf_sbx_in_buf(sb, s, i)); /* (its slot, with resident sets) */
            const char *src = v->in[i];
            if (!par) { /* between a CPU candidate's calls (stream.c) */
                kf_verify_stream_copy(dst, src, (size_t)nb);
                continue;
            }
#pragma omp parallel for schedule(static) if (par && nck > 1)
            for (int64_t k = 0; k < nck; k++)
                memcpy(dst + k * ch, src + k * ch, (size_t)(nb - k * ch < ch ? nb - k * ch : ch));
        } else draw_input(c, s, i, c->pos[i], c->mag[i] * v->shrink, kf_sbx_data(sb, kf_sbx_in_buf(sb, s, i)),
                          NULL, NULL, par);
    }
}

/* The first changed element of n (size es) between now and was, and how many changed. */
static int64_t first_change(const void *now, const void *was, int64_t n, int es, int64_t *count) {
    int64_t e = 0, cnt = 0;
    while (e < n && memcmp((const char *)now + e * es, (const char *)was + e * es, (size_t)es) == 0) e++;
    for (int64_t k = e; k < n; k++)
        cnt += memcmp((const char *)now + k * es, (const char *)was + k * es, (size_t)es) != 0;
    *count = cnt;
    return e;
}

int kf_verify_input_changed(const kf_verify_ctx *c, const kf_sbx *sb, int s, int *which,
                            int64_t *first, int64_t *nchanged, double *was, double *now) {
    const kf_vset *v = &c->sets[s];
    for (int i = 0; i < c->nin; i++) {
        const kf_value *x = &c->g->values[c->g->inputs[i]];
        int es = kf_dtype_size(x->dtype);
        const void *got = kf_sbx_data(sb, kf_sbx_in_buf(sb, s, i));
        void *drawn = NULL;
        const void *want = v->in[i];
        if (c->keep_in) {
            /* in chunks on every thread where the caller's cores are free (a device
             * candidate's checked calls compare a whole set's inputs each time) */
            int64_t nb = (int64_t)c->in_bytes[i], ch = (int64_t)1 << 20, nck = (nb + ch - 1) / ch, diff = 0;
            int par = !c->host_timing;
#pragma omp parallel for schedule(static) reduction(+ : diff) if (par && nck > 1)
            for (int64_t k = 0; k < nck; k++)
                diff += memcmp((const char *)got + k * ch, (const char *)want + k * ch,
                               (size_t)(nb - k * ch < ch ? nb - k * ch : ch)) != 0;
            if (!diff) continue;
        } else {
            int64_t n = c->in_numel[i], nblk = (n + KF_DRAW_BLOCK - 1) / KF_DRAW_BLOCK;
            int64_t bad = 0;
            const uint64_t *h = v->in_hash[i];
            int par = !c->host_timing;
#pragma omp parallel for schedule(dynamic, 4) reduction(+ : bad) if (par && nblk > 1)
            for (int64_t k = 0; k < nblk; k++) {
                int64_t from = k * KF_DRAW_BLOCK, cnt = n - from < KF_DRAW_BLOCK ? n - from : KF_DRAW_BLOCK;
                bad += block_hash(c->hkey, (const char *)got + from * es, (size_t)(cnt * es)) != h[k];
            }
            if (!bad) continue;
            /* located on the set drawn once more */
            drawn = kf_malloc(c->in_bytes[i] ? c->in_bytes[i] : 1);
            draw_input(c, s, i, c->pos[i], c->mag[i] * v->shrink, drawn, NULL, NULL, par);
            want = drawn;
        }
        *which = i;
        *first = first_change(got, want, c->in_numel[i], es, nchanged);
        *was = *first < c->in_numel[i] ? kf_verify_load(x->dtype, want, *first) : NAN;
        *now = *first < c->in_numel[i] ? kf_verify_load(x->dtype, got, *first) : NAN;
        free(drawn);
        return 1;
    }
    return 0;
}

void kf_verify_ctx_plan(const kf_verify_ctx *c, int *keeps_inputs, int *keeps_refs) {
    *keeps_inputs = c ? c->keep_in : 1;
    *keeps_refs = c ? c->keep_ref : 1;
}
