/*
 * Output comparison against the reference (DESIGN.md section 5).
 *
 * First every element is checked for the poison pattern (unwritten). Then, for float
 * outputs, element i passes when |got - want| <= atol*s + rtol*|want|, where want is the
 * reference already rounded to the output dtype (so an f32 overflow is expected as inf)
 * and s = max(1, RMS of that reference output): the RMS scale keeps the absolute term
 * meaningful for outputs far from unit size. Where the reference carries an error bound
 * for the element (kf_interp_run_bounds: a contraction's K * u * sum |a||b|, carried
 * through the ops after it), the bound is added to the tolerance: a float32 sum of products
 * strays from the exact value in proportion to its length and the size of its terms, not
 * of its result, so a correct kernel on wide-magnitude or cancelling data would otherwise
 * fail (and likewise a plain sum of R terms: R * u * sum |x|, kf_node_sum_terms). NMSE gets
 * the bounds' own share divided by the longest sum's length K (a contraction's or a sum's):
 * nmse + sum bound^2 / (K sum want^2), the worst case K u sum|a||b| scaled to the
 * sqrt(K)-sized error of random roundings (u^2 K^2 for a plain GEMM on random data, 2.4e-7 at
 * K = 8192), so a wrong kernel (a term skipped: NMSE about 1/K; a half-precision
 * accumulator) still fails it. A NaN on one side only, or an infinity that
 * is not matched exactly, fails. Over the whole output NMSE = sum (got-want)^2 / sum want^2
 * (finite elements) must stay within nmse.
 *
 * Integer outputs (argmax/argmin indices) must be exact, except that a different index of
 * an equal input value is a legal tie; that is checked when the index op reads a graph
 * input directly (the only place the verifier has the values it compared).
 */
#include "verify/verify_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends to a mismatch's detail why its tolerance is twice the task's. */
static void f32_ref_note(char *detail, size_t cap) {
    size_t n = strlen(detail);
    if (n + 1 < cap)
        snprintf(detail + n, cap - n, " (tolerances x2, NMSE x4: a float32 reference, --module-ref cuda-f32)");
}

/* "[3, 17]" (row-major coordinates of flat index i). */
void kf_verify_format_index(const kf_shape *sh, int64_t i, char *buf, size_t cap) {
    int64_t c[KF_MAX_DIMS];
    for (int d = sh->rank - 1; d >= 0; d--) {
        int64_t n = sh->d[d] > 0 ? sh->d[d] : 1;
        c[d] = i % n;
        i /= n;
    }
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "[");
    for (int d = 0; d < sh->rank && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)c[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* When output j is argmax/argmin of a graph input, fill the reduction geometry. */
static int tie_geometry(const kf_graph *g, int j, int *in_index, int64_t *outer, int64_t *axn,
                        int64_t *inner, int *is_max) {
    const kf_value *v = &g->values[g->outputs[j]];
    if (v->producer < 0) return 0;
    const kf_node *n = &g->nodes[v->producer];
    if (!kf_op_get(n->op)->index_ties) return 0;
    const kf_value *x = &g->values[n->in[0]];
    if (x->input_index < 0) return 0;
    uint32_t axes = n->attr.axes;
    if (axes == 0 || (axes & (axes - 1)) != 0) return 0; /* exactly one axis */
    int ax = 0;
    while (!(axes & (1u << ax))) ax++;
    if (ax >= x->shape.rank) return 0;
    int64_t o = 1, in = 1;
    for (int d = 0; d < ax; d++) o *= x->shape.d[d];
    for (int d = ax + 1; d < x->shape.rank; d++) in *= x->shape.d[d];
    if (o * in != kf_shape_numel(&v->shape)) return 0;
    *in_index = x->input_index;
    *outer = o;
    *axn = x->shape.d[ax];
    *inner = in;
    *is_max = kf_op_get(n->op)->combiner == KF_COMB_ARGMAX;
    return 1;
}

static void compare_int(const kf_verify_ctx *ctx, int s, int j, const void *data,
                        const void *const *ins, kf_cmp *res) {
    const kf_graph *g = ctx->g;
    const kf_value *v = &g->values[g->outputs[j]];
    const void *ref = ctx->sets[s].ref[j];
    int64_t n = ctx->out_numel[j];
    int tin = -1, is_max = 0;
    int64_t outer = 0, axn = 0, inner = 0;
    int ties = tie_geometry(g, j, &tin, &outer, &axn, &inner, &is_max);
    const void *x = ties ? ins[tin] : NULL;
    kf_dtype xdt = ties ? g->values[g->inputs[tin]].dtype : KF_F32;
    int64_t ntie = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t got = ((const int64_t *)data)[i], want = ((const int64_t *)ref)[i];
        if (got == want) continue;
        if (ties && got >= 0 && got < axn) {
            int64_t base = (i / inner) * axn * inner + i % inner;
            double a = kf_verify_load(xdt, x, base + got * inner);
            double b = kf_verify_load(xdt, x, base + want * inner);
            if (a == b) {
                ntie++;
                continue;
            }
        }
        double d = fabs((double)got - (double)want);
        if (d > res->max_abs) res->max_abs = d;
        if (want != 0 && d / fabs((double)want) > res->max_rel) res->max_rel = d / fabs((double)want);
        if (res->nbad++ == 0) {
            res->first_bad = i;
            res->got = (double)got;
            res->want = (double)want;
        }
    }
    res->nmse = 0;
    if (res->nbad) {
        char idx[160];
        kf_verify_format_index(&v->shape, res->first_bad, idx, sizeof idx);
        res->status = KF_V_MISMATCH;
        snprintf(res->detail, sizeof res->detail,
                 "output '%s' (i64, exact): element %lld %s got %lld want %lld; %lld of %lld "
                 "elements differ%s",
                 v->name, (long long)res->first_bad, idx, (long long)res->got,
                 (long long)res->want, (long long)res->nbad, (long long)n,
                 ties ? " (ties of equal input values accepted)" : "");
    }
    (void)ntie;
}

/* One chunk's share of a float comparison (compare_chunk); the chunks are combined in
 * order, so the verdict, the first bad element and the sums do not depend on how many
 * threads compared them. */
typedef struct cmp_part {
    double err2, ref2, bnd2, max_abs, max_rel, worst_excess, got, want;
    int64_t nbad, first_bad, worst;
} cmp_part;

static void compare_chunk(kf_dtype dt, const void *data, const void *ref, const float *bnd,
                          double atol, double scale, double rtol, int64_t i0, int64_t i1,
                          cmp_part *p) {
    memset(p, 0, sizeof *p);
    p->worst_excess = -1;
    p->first_bad = p->worst = -1;
    for (int64_t i = i0; i < i1; i++) {
        double got, want;
        if (dt == KF_F32) {
            got = (double)((const float *)data)[i];
            want = (double)((const float *)ref)[i];
        } else {
            got = kf_verify_load(dt, data, i);
            want = kf_verify_load(dt, ref, i);
        }
        int bad = 0;
        double d = 0;
        if (isnan(want) || isnan(got)) {
            bad = isnan(want) != isnan(got);
        } else if (isinf(want) || isinf(got)) {
            bad = got != want;
        } else {
            d = fabs(got - want);
            double tol = atol * scale + rtol * fabs(want) + (bnd ? (double)bnd[i] : 0.0);
            bad = d > tol;
            p->err2 += d * d;
            p->ref2 += want * want;
            if (bnd) p->bnd2 += (double)bnd[i] * (double)bnd[i];
            if (d > p->max_abs) p->max_abs = d;
            if (want != 0 && d / fabs(want) > p->max_rel) p->max_rel = d / fabs(want);
            if (d - tol > p->worst_excess) {
                p->worst_excess = d - tol;
                p->worst = i;
            }
        }
        if (bad && p->nbad++ == 0) {
            p->first_bad = i;
            p->got = got;
            p->want = want;
        }
    }
}

/* The float32 fast pass over a chunk (issue 30): the same per-element rule as compare_chunk
 * (d = |got - want| against atol * scale + rtol * |want| + bound, in double, the same
 * operations in the same order: compare.c is built without contraction), four elements
 * to a vector, no branch per element. It answers only for a clean chunk: 1 with p filled
 * when every element on both sides is finite and within its tolerance; 0 when any is not
 * (a NaN, the poison pattern included, an infinity, an element out of tolerance), and the
 * caller then runs compare_chunk on the chunk, which finds and reports it as before. The
 * sums err2, ref2, bnd2 are kept in four lanes, added in a fixed order: they may differ
 * from compare_chunk's in their last bits, the same on every machine and thread count;
 * the maxima are exact. p->worst is not located (-1): the caller finds the worst element
 * with compare_chunk when it needs it (an NMSE failure). */
typedef float kf_v4f __attribute__((vector_size(16)));
typedef int32_t kf_v4i __attribute__((vector_size(16)));
typedef double kf_v4d __attribute__((vector_size(32)));
typedef int64_t kf_v4l __attribute__((vector_size(32)));

/* a where the mask m is set, else b (a macro: a function passing 32-byte vectors would
 * change the ABI on a baseline x86-64 build) */
#define V4D_SELECT(m, a, b) ((kf_v4d)(((kf_v4l)(a) & (m)) | ((kf_v4l)(b) & ~(m))))

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static int compare_chunk_f32(const float *got, const float *want, const float *bnd, double atol_s,
                             double rtol, int64_t i0, int64_t i1, cmp_part *p) {
    const kf_v4d zero = {0, 0, 0, 0}, av = {atol_s, atol_s, atol_s, atol_s}, rv = {rtol, rtol, rtol, rtol};
    const kf_v4i expo = {0x7f800000, 0x7f800000, 0x7f800000, 0x7f800000};
    const kf_v4l absm = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
    kf_v4d e2 = zero, r2 = zero, b2 = zero, mabs = zero, mrel = zero;
    kf_v4i spec = {0, 0, 0, 0};
    kf_v4l badv = {0, 0, 0, 0};
    int64_t i = i0;
    for (; i + 4 <= i1; i += 4) {
        kf_v4f gf, wf;
        memcpy(&gf, got + i, sizeof gf);
        memcpy(&wf, want + i, sizeof wf);
        /* an exponent of all ones: an infinity or a NaN (the poison pattern is one) */
        spec |= (((kf_v4i)gf & expo) == expo) | (((kf_v4i)wf & expo) == expo);
        kf_v4d g = __builtin_convertvector(gf, kf_v4d), w = __builtin_convertvector(wf, kf_v4d);
        kf_v4d d = (kf_v4d)((kf_v4l)(g - w) & absm), aw = (kf_v4d)((kf_v4l)w & absm);
        kf_v4d tol = av + rv * aw;
        if (bnd) {
            kf_v4f bf;
            memcpy(&bf, bnd + i, sizeof bf);
            kf_v4d b = __builtin_convertvector(bf, kf_v4d);
            tol = tol + b;
            b2 += b * b;
        }
        badv |= d > tol;
        e2 += d * d;
        r2 += w * w;
        mabs = V4D_SELECT(d > mabs, d, mabs);
        kf_v4d rel = d / aw; /* where want is 0: masked out below */
        mrel = V4D_SELECT((rel > mrel) & (aw != zero), rel, mrel);
    }
    int special = 0, bad = 0;
    for (int l = 0; l < 4; l++) special |= spec[l] != 0, bad |= badv[l] != 0;
    if (special || bad) return 0;
    double err2 = (e2[0] + e2[1]) + (e2[2] + e2[3]), ref2 = (r2[0] + r2[1]) + (r2[2] + r2[3]);
    double bnd2 = (b2[0] + b2[1]) + (b2[2] + b2[3]);
    double max_abs = fmax(fmax(mabs[0], mabs[1]), fmax(mabs[2], mabs[3]));
    double max_rel = fmax(fmax(mrel[0], mrel[1]), fmax(mrel[2], mrel[3]));
    for (; i < i1; i++) {
        double g = (double)got[i], w = (double)want[i];
        if (!isfinite(g) || !isfinite(w)) return 0;
        double d = fabs(g - w), b = bnd ? (double)bnd[i] : 0.0;
        double tol = atol_s + rtol * fabs(w) + b;
        if (d > tol) return 0;
        err2 += d * d;
        ref2 += w * w;
        bnd2 += b * b;
        if (d > max_abs) max_abs = d;
        if (w != 0 && d / fabs(w) > max_rel) max_rel = d / fabs(w);
    }
    memset(p, 0, sizeof *p);
    p->err2 = err2;
    p->ref2 = ref2;
    p->bnd2 = bnd2;
    p->max_abs = max_abs;
    p->max_rel = max_rel;
    p->worst_excess = -1;
    p->first_bad = p->worst = -1;
    return 1;
}

/* The first element of an output still holding the poison pattern and how many do (-1, 0:
 * none), in parallel chunks. */
static int64_t first_poison(kf_dtype dt, const void *data, int64_t n, int par, int64_t *count) {
    int64_t nch = (n + KF_VERIFY_CHUNK - 1) / KF_VERIFY_CHUNK;
    int64_t first = -1, cnt = 0;
#pragma omp parallel for schedule(static) reduction(+ : cnt) if (par && nch > 1)
    for (int64_t k = 0; k < nch; k++) {
        int64_t e1 = (k + 1) * KF_VERIFY_CHUNK < n ? (k + 1) * KF_VERIFY_CHUNK : n, f = -1;
        if (dt == KF_F32) { /* the common case without a call per element */
            uint32_t pat;
            kf_verify_poison(KF_F32, &pat, 1, 0);
            const uint32_t *u = data;
            for (int64_t i = k * KF_VERIFY_CHUNK; i < e1; i++)
                if (u[i] == pat) {
                    if (f < 0) f = i;
                    cnt++;
                }
        } else {
            for (int64_t i = k * KF_VERIFY_CHUNK; i < e1; i++)
                if (kf_verify_is_poison(dt, data, i)) {
                    if (f < 0) f = i;
                    cnt++;
                }
        }
        if (f >= 0) {
#pragma omp critical(kf_first_poison)
            if (first < 0 || f < first) first = f;
        }
    }
    *count = cnt;
    return first;
}

/* Output j's first element still holding the poison pattern, if any: res filled as an
 * UNWRITTEN verdict and 1; else 0 with res untouched. */
static int unwritten(const kf_verify_ctx *ctx, int s, int j, const void *data, int par, kf_cmp *res) {
    const kf_value *v = &ctx->g->values[ctx->g->outputs[j]];
    kf_dtype dt = v->dtype;
    int64_t n = ctx->out_numel[j], cnt = 0, i = first_poison(dt, data, n, par, &cnt);
    if (i < 0) return 0;
    char idx[160];
    kf_verify_format_index(&v->shape, i, idx, sizeof idx);
    memset(res, 0, sizeof *res);
    res->status = KF_V_UNWRITTEN;
    res->first_bad = i;
    res->nbad = cnt;
    res->got = NAN;
    res->want = kf_verify_load(dt, ctx->sets[s].ref[j], i);
    snprintf(res->detail, sizeof res->detail,
             "output '%s': element %lld %s was never written (still the poison NaN); %lld "
             "of %lld elements unwritten",
             v->name, (long long)i, idx, (long long)cnt, (long long)n);
    return 1;
}

/* The element with the largest excess over its tolerance (the first of equals), as
 * compare_chunk finds it chunk by chunk: for the detail of an NMSE failure, where the fast
 * pass did not locate it. */
static int64_t locate_worst(const void *data, const void *ref, const float *bnd, double atol,
                            double scale, double rtol, int64_t n) {
    double worst_excess = -1;
    int64_t worst = -1;
    for (int64_t i0 = 0; i0 < n; i0 += KF_VERIFY_CHUNK) {
        cmp_part p;
        compare_chunk(KF_F32, data, ref, bnd, atol, scale, rtol, i0,
                      n - i0 < KF_VERIFY_CHUNK ? n : i0 + KF_VERIFY_CHUNK, &p);
        if (p.worst >= 0 && p.worst_excess > worst_excess) worst_excess = p.worst_excess, worst = p.worst;
    }
    return worst;
}

/* Compare output j of set s with the reference; see the file comment for the rules. */
void kf_verify_compare(const kf_verify_ctx *ctx, int s, int j, const void *data,
                       const void *const *ins, kf_cmp *res) {
    const kf_graph *g = ctx->g;
    const kf_value *v = &g->values[g->outputs[j]];
    kf_dtype dt = v->dtype;
    int64_t n = ctx->out_numel[j];
    int par = !ctx->host_timing;
    memset(res, 0, sizeof *res);
    res->status = KF_V_OK;
    res->first_bad = -1;

    /* float32: the poison is a NaN, which the fast pass sends to compare_chunk; the search
     * for it waits until a chunk did (below). Other dtypes: first, as before. */
    if (dt != KF_F32 && unwritten(ctx, s, j, data, par, res)) return;
    if (dt == KF_I64) {
        compare_int(ctx, s, j, data, ins, res);
        return;
    }

    double atol, rtol, nmse_tol;
    if (g->has_tol) {
        atol = g->atol;
        rtol = g->rtol;
        nmse_tol = g->nmse;
    } else {
        kf_tolerance_default(dt, &atol, &rtol, &nmse_tol);
    }
    /* a float32 reference strays from the exact result as far as a correct kernel may: their
     * difference up to twice the tolerance, its square four times (verify.h, design notes) */
    const int f32_ref = g->module && ctx->opts.module_ref == KF_MODULE_REF_CUDA_F32;
    if (f32_ref) atol *= 2, rtol *= 2, nmse_tol *= 4;
    const void *ref = ctx->sets[s].ref[j];
    const float *bnd = ctx->sets[s].bound ? ctx->sets[s].bound[j] : NULL;
    double scale = ctx->sets[s].ref_rms[j];
    if (!(scale > 1.0)) scale = 1.0;
    int64_t nch = (n + KF_VERIFY_CHUNK - 1) / KF_VERIFY_CHUNK;
    cmp_part *parts = kf_calloc((size_t)nch + 1, sizeof *parts);
    int64_t slow = 0; /* chunks compare_chunk had to look at */
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : slow) if (par && nch > 1)
    for (int64_t k = 0; k < nch; k++) {
        int64_t i0 = k * KF_VERIFY_CHUNK, i1 = (k + 1) * KF_VERIFY_CHUNK < n ? (k + 1) * KF_VERIFY_CHUNK : n;
        if (dt == KF_F32 && compare_chunk_f32(data, ref, bnd, atol * scale, rtol, i0, i1, &parts[k])) continue;
        compare_chunk(dt, data, ref, bnd, atol, scale, rtol, i0, i1, &parts[k]);
        slow++;
    }
    /* an unwritten element is the verdict before any mismatch: looked for wherever a chunk
     * was not clean (a clean float32 chunk holds no NaN, so no poison) */
    if (dt == KF_F32 && slow && unwritten(ctx, s, j, data, par, res)) {
        free(parts);
        return;
    }
    double err2 = 0, ref2 = 0, bnd2 = 0, worst_excess = -1;
    int64_t worst = -1;
    for (int64_t k = 0; k < nch; k++) {
        const cmp_part *p = &parts[k];
        err2 += p->err2;
        ref2 += p->ref2;
        bnd2 += p->bnd2;
        if (p->max_abs > res->max_abs) res->max_abs = p->max_abs;
        if (p->max_rel > res->max_rel) res->max_rel = p->max_rel;
        if (p->worst >= 0 && p->worst_excess > worst_excess) {
            worst_excess = p->worst_excess;
            worst = p->worst;
        }
        if (p->nbad && res->nbad == 0) {
            res->first_bad = p->first_bad;
            res->got = p->got;
            res->want = p->want;
        }
        res->nbad += p->nbad;
    }
    free(parts);
    res->nmse = ref2 > 0 ? err2 / ref2 : (err2 > 0 ? INFINITY : 0.0);
    double nmse_base = nmse_tol;
    if (bnd2 > 0 && ref2 > 0) nmse_tol += bnd2 / (ctx->bound_k * ref2);
    char idx[160];
    if (res->nbad) {
        kf_verify_format_index(&v->shape, res->first_bad, idx, sizeof idx);
        double eb = bnd ? (double)bnd[res->first_bad] : 0.0;
        double tol = isfinite(res->want) ? atol * scale + rtol * fabs(res->want) + eb : 0;
        char bpart[64] = "";
        if (eb > 0) snprintf(bpart, sizeof bpart, " + error bound %.3g", eb);
        res->status = KF_V_MISMATCH;
        snprintf(res->detail, sizeof res->detail,
                 "output '%s': element %lld %s got %.9g want %.9g (|err| %.3g > tol %.3g = "
                 "atol %.3g * scale %.3g + rtol %.3g * |want|%s); %lld of %lld elements out of "
                 "tolerance; max abs err %.3g, NMSE %.3g",
                 v->name, (long long)res->first_bad, idx, res->got, res->want,
                 fabs(res->got - res->want), tol, atol, scale, rtol, bpart, (long long)res->nbad,
                 (long long)n, res->max_abs, res->nmse);
        if (f32_ref) f32_ref_note(res->detail, sizeof res->detail);
    } else if (res->nmse > nmse_tol) {
        res->status = KF_V_MISMATCH;
        if (dt == KF_F32) worst = locate_worst(data, ref, bnd, atol, scale, rtol, n);
        res->first_bad = worst;
        if (worst >= 0) {
            res->got = kf_verify_load(dt, data, worst);
            res->want = kf_verify_load(dt, ref, worst);
        }
        kf_verify_format_index(&v->shape, worst < 0 ? 0 : worst, idx, sizeof idx);
        char bpart[80] = "";
        if (nmse_tol > nmse_base)
            snprintf(bpart, sizeof bpart, " (%.3g + the error bounds' %.3g)", nmse_base, nmse_tol - nmse_base);
        snprintf(res->detail, sizeof res->detail,
                 "output '%s': NMSE %.3g exceeds %.3g%s although every element is within "
                 "tolerance (largest error at element %lld %s: got %.9g want %.9g)",
                 v->name, res->nmse, nmse_tol, bpart, (long long)worst, idx, res->got, res->want);
        if (f32_ref) f32_ref_note(res->detail, sizeof res->detail);
    }
}
