/*
 * CPU matrix-vector template of the builtin generator (row cpu.matvec): a matmul stage
 * whose output matrices have one row (M == 1: a vector times a matrix) or one column
 * (N == 1: a matrix times a vector). The GEMM (tpl_matmul.c) computes these too, but packs
 * B into NR-wide strips that are then mostly zeros and runs a micro-kernel over them; here
 * every output element is one dot product along K, read straight from the operands.
 *
 * The product is seen as y[l] = sum_k W(l, k) x[k], l < L, with x the operand that is a
 * vector (B when N == 1, A when M == 1; K contiguous floats in any ta/tb layout) and W the
 * matrix. Two loop nests follow from W's layout:
 *   dot:  W(l, k) at l*K + k (A as stored, or B transposed): each output is a dot product
 *         of contiguous runs, `rows` outputs at a time sharing the loads of x, `unroll`
 *         vector accumulators per output (GCC vector extensions), the lanes summed at the
 *         end and the tail of K added in scalar;
 *   axpy: W(l, k) at k*L + l (A transposed, or B as stored): a block of outputs is
 *         accumulated in a stack buffer over the rows of W, `unroll` rows of W a pass, the
 *         inner loop over the outputs left to the auto-vectoriser.
 * When L == 1 both layouts are contiguous and the dot nest is used.
 *
 * Threads: tasks of `block` consecutive outputs of one output matrix (the batch times the
 * blocks of a matrix), shared out statically (they are equal). Batch broadcasting is the
 * GEMM's (kf_matmul_desc's batch strides). A B gathered through a strided map (an
 * implicit GEMM's columns) is refused: this template reads dense operands.
 *
 * Parameters ("<prefix>NAME"): threads, vl (dot: the vector length in floats, one value,
 * the device's), block (outputs per task), rows (dot: outputs at once), unroll (dot:
 * accumulators per output; axpy: rows of W per pass).
 */
#include "tpl.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int kf_tpl_matvec_supports(const kf_matmul_desc *d, kf_buf *why) {
    if (d->gb.on) {
        kf_buf_printf(why, "B is gathered through a strided map (an implicit GEMM's columns); this template "
                           "reads dense operands");
        return 0;
    }
    if (d->M != 1 && d->N != 1) {
        kf_buf_printf(why, "the output matrices are %lldx%lld (this template computes one row or one column)",
                      (long long)d->M, (long long)d->N);
        return 0;
    }
    return 1;
}

/* The product as y = W x: outputs per matrix, and whether W's rows run along K. */
typedef struct mv_view {
    int64_t L;
    int w_is_a; /* W is A (N == 1); else B (M == 1) */
    int dot;    /* W(l, k) at l*K + k; else at k*L + l */
} mv_view;

static void view_of(const kf_matmul_desc *d, mv_view *v) {
    v->w_is_a = d->N == 1;
    v->L = v->w_is_a ? d->M : d->N;
    v->dot = v->w_is_a ? !d->ta : d->tb;
    if (v->L == 1) v->dot = 1;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void kf_tpl_matvec_params(const kf_matmul_desc *d, const kf_device_info *dev, kf_space *sp, const char *prefix) {
    assert(d && sp && !d->gb.on && (d->M == 1 || d->N == 1));
    mv_view v;
    view_of(d, &v);
    double work = (double)d->batch * (double)v.L * (double)d->K;

    /* threads: the GEMM's list and default rule (one thread below its work threshold:
     * two threads measured 11 ms against one's 0.6 ms for tasks/matvec.kf while other
     * work shared the two cores); the search tries more */
    long tv[KF_MAX_PARAM_VALUES];
    int nt = kf_tpl_thread_values(dev, tv);
    int tdef = work < KF_TPL_THREADS_MIN_WORK ? 0 : nt - 1;
    kf_tpl_add_param(sp, prefix, "threads", KF_ROLE_THREADS, tv, nt, tdef);

    int64_t T = tv[tdef];
    /* block: outputs per task; the default leaves about four tasks per thread */
    long dotb[] = {8, 32, 128, 512, 2048}, axb[] = {64, 256, 1024};
    long *bv = v.dot ? dotb : axb;
    int nb0 = v.dot ? 5 : 3, nb = 0;
    for (int i = 0; i < nb0; i++) { /* the values below L and the first at or above it */
        bv[nb++] = bv[i];
        if (bv[i] >= v.L) break;
    }
    int bdef = 0;
    for (int i = 0; i < nb; i++)
        if (d->batch * ceil_div(v.L > 0 ? v.L : 1, bv[i]) >= 4 * T) bdef = i;
    kf_tpl_add_param(sp, prefix, "block", KF_ROLE_BLOCK, bv, nb, bdef);

    if (v.dot) {
        long vlv[] = {kf_tpl_cpu_vl(dev)};
        kf_tpl_add_param(sp, prefix, "vl", KF_ROLE_VECTOR_LOADS, vlv, 1, 0);
        /* outputs at once (they share the loads of x) and vector accumulators per output:
         * rows x unroll accumulators + unroll loads of x live in registers */
        long rows[] = {1, 2, 4}, unroll[] = {1, 2, 4};
        kf_tpl_add_param(sp, prefix, "rows", KF_ROLE_REG_M, rows, v.L >= 4 ? 3 : v.L >= 2 ? 2 : 1,
                         v.L >= 4 ? 2 : v.L >= 2 ? 1 : 0);
        kf_tpl_add_param(sp, prefix, "unroll", KF_ROLE_UNROLL, unroll, 3, 1);
    } else {
        long unroll[] = {1, 2, 4, 8};
        kf_tpl_add_param(sp, prefix, "unroll", KF_ROLE_UNROLL, unroll, 4, 2);
    }
}

/* ---- emitter ----------------------------------------------------------------------- */

typedef struct mv_plan {
    const kf_matmul_desc *d;
    const char *name;
    mv_view v;
    int threads, vl, rows, unroll;
    int64_t K, block, tpm, ntasks;
} mv_plan;

/* printf into out, with every '@' replaced by the stage's function name. */
static void put(kf_buf *out, const mv_plan *pl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(kf_buf *out, const mv_plan *pl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kf_tpl_vput_named(out, pl->name, fmt, ap);
    va_end(ap);
}

static long long LL(int64_t v) { return (long long)v; }

/* `static inline void @_dotR(w, x, y)`: y[r] = W row r (rows K apart) . x for r < R. */
static void emit_dot(kf_buf *out, const mv_plan *pl, int R) {
    int U = pl->unroll, VL = pl->vl;
    int64_t K = pl->K;
    put(out, pl,
        "static inline __attribute__((always_inline)) void\n"
        "@_dot%d(const float *restrict w, const float *restrict x, float *restrict y)\n{\n", R);
    for (int r = 0; r < R; r++) {
        put(out, pl, "    @_vf");
        for (int u = 0; u < U; u++) put(out, pl, "%s a%d_%d = {0}", u ? "," : "", r, u);
        put(out, pl, ";\n");
    }
    put(out, pl, "    int64_t k = 0;\n    for (; k + %d <= %lldLL; k += %d) {\n", U * VL, LL(K), U * VL);
    for (int u = 0; u < U; u++) put(out, pl, "        const @_vf x%d = *(const @_vfu *)(x + k + %d);\n", u, u * VL);
    for (int r = 0; r < R; r++)
        for (int u = 0; u < U; u++)
            put(out, pl, "        a%d_%d += *(const @_vfu *)(w + %lldLL + k + %d) * x%d;\n", r, u, LL(r * K), u * VL, u);
    put(out, pl, "    }\n");
    if (U > 1) {
        put(out, pl, "    for (; k + %d <= %lldLL; k += %d) {\n        const @_vf x0 = *(const @_vfu *)(x + k);\n", VL,
            LL(K), VL);
        for (int r = 0; r < R; r++) put(out, pl, "        a%d_0 += *(const @_vfu *)(w + %lldLL + k) * x0;\n", r, LL(r * K));
        put(out, pl, "    }\n");
    }
    for (int r = 0; r < R; r++) {
        put(out, pl, "    {\n        const @_vf t = a%d_0", r);
        for (int u = 1; u < U; u++) put(out, pl, " + a%d_%d", r, u);
        put(out, pl,
            ";\n"
            "        float s = 0.0f;\n"
            "        for (int q = 0; q < %d; q++) s += t[q];\n"
            "        for (int64_t j = k; j < %lldLL; j++) s += w[%lldLL + j] * x[j];\n"
            "        y[%d] = s;\n"
            "    }\n",
            VL, LL(K), LL(r * K), r);
    }
    put(out, pl, "}\n\n");
}

/* `static inline void @_cols(w, x, y, n)`: y[l] = sum_k W[k*L + l] x[k] for l < n <= block
 * (w points at the block's first column). */
static void emit_axpy(kf_buf *out, const mv_plan *pl) {
    int R = pl->unroll;
    int64_t K = pl->K, L = pl->v.L;
    put(out, pl,
        "static inline void @_cols(const float *restrict w, const float *restrict x, float *restrict y, int64_t n)\n"
        "{\n"
        "    float acc[%lld] __attribute__((aligned(64)));\n"
        "    for (int64_t l = 0; l < n; l++) acc[l] = 0.0f;\n"
        "    int64_t k = 0;\n",
        LL(pl->block));
    if (R > 1) {
        put(out, pl, "    for (; k + %d <= %lldLL; k += %d) {\n        const float *restrict w0 = w + k * %lldLL;\n", R,
            LL(K), R, LL(L));
        for (int r = 0; r < R; r++) put(out, pl, "        const float x%d = x[k + %d];\n", r, r);
        put(out, pl, "        for (int64_t l = 0; l < n; l++)\n            acc[l] += w0[l] * x0");
        for (int r = 1; r < R; r++) put(out, pl, " + w0[l + %lldLL] * x%d", LL(r * L), r);
        put(out, pl, ";\n    }\n");
    }
    put(out, pl,
        "    for (; k < %lldLL; k++) {\n"
        "        const float *restrict w0 = w + k * %lldLL;\n"
        "        const float x0 = x[k];\n"
        "        for (int64_t l = 0; l < n; l++) acc[l] += w0[l] * x0;\n"
        "    }\n"
        "    for (int64_t l = 0; l < n; l++) y[l] = acc[l];\n"
        "}\n\n",
        LL(K), LL(L));
}

void kf_tpl_matvec_emit(kf_buf *out, const char *fname, const kf_matmul_desc *d, const kf_space *sp,
                        const kf_point *p, const char *prefix) {
    assert(out && fname && d && sp && p);
    assert(d->batch >= 1 && d->M >= 0 && d->N >= 0 && d->K >= 0 && !d->gb.on);
    mv_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.d = d;
    pl.name = fname;
    view_of(d, &pl.v);
    pl.K = d->K;
    pl.threads = (int)kf_tpl_get(sp, p, prefix, "threads");
    if (pl.threads < 1) pl.threads = 1;
    pl.block = kf_tpl_get(sp, p, prefix, "block");
    if (pl.block < 1) pl.block = 1;
    pl.unroll = (int)kf_tpl_get(sp, p, prefix, "unroll");
    if (pl.unroll < 1) pl.unroll = 1;
    if (pl.v.dot) {
        pl.vl = (int)kf_tpl_get(sp, p, prefix, "vl");
        assert(pl.vl == 4 || pl.vl == 8 || pl.vl == 16);
        pl.rows = (int)kf_tpl_get(sp, p, prefix, "rows");
        if (pl.rows < 1) pl.rows = 1;
    }
    int64_t L = pl.v.L;
    pl.tpm = L > 0 ? ceil_div(L, pl.block) : 0;
    pl.ntasks = d->batch * pl.tpm;
    const char *W = pl.v.w_is_a ? "A" : "B", *X = pl.v.w_is_a ? "B" : "A";

    put(out, &pl,
        "/* ---- @: matrix-vector product batch=%lld M=%lld N=%lld K=%lld ta=%d tb=%d: %lld outputs a "
        "matrix, %s ---- */\n"
        "#include <stdint.h>\n\n",
        LL(d->batch), LL(d->M), LL(d->N), LL(d->K), d->ta, d->tb, LL(L),
        pl.v.dot ? "dot products along K's contiguous runs" : "W's rows accumulated into blocks of outputs");
    kf_tpl_mm_batch_offset(out, fname, d, "a", d->a_bstride, d->M * d->K);
    kf_tpl_mm_batch_offset(out, fname, d, "b", d->b_bstride, d->K * d->N);
    if (pl.v.dot) {
        put(out, &pl,
            "/* rows=%d unroll=%d vl=%d block=%lld threads=%d, %lld tasks */\n"
            "typedef float @_vf __attribute__((vector_size(%d)));\n"
            "typedef float @_vfu __attribute__((vector_size(%d), aligned(4)));\n\n",
            pl.rows, pl.unroll, pl.vl, LL(pl.block), pl.threads, LL(pl.ntasks), pl.vl * 4, pl.vl * 4);
        emit_dot(out, &pl, pl.rows);
        if (pl.rows > 1) emit_dot(out, &pl, 1);
    } else {
        put(out, &pl, "/* unroll=%d block=%lld threads=%d, %lld tasks */\n", pl.unroll, LL(pl.block), pl.threads,
            LL(pl.ntasks));
        emit_axpy(out, &pl);
    }
    put(out, &pl, "static void @(const float *restrict A, const float *restrict B, float *restrict C)\n{\n");
    if (pl.ntasks == 0) {
        put(out, &pl, "    (void)A;\n    (void)B;\n    (void)C;\n}\n\n");
        return;
    }
    if (pl.threads > 1 && pl.ntasks > 1)
        put(out, &pl, "#pragma omp parallel for schedule(static) num_threads(%d)\n", pl.threads);
    put(out, &pl,
        "    for (int64_t t = 0; t < %lldLL; t++) {\n"
        "        const int64_t bt = t / %lldLL, l0 = (t %% %lldLL) * %lldLL;\n"
        "        const int64_t l1 = l0 + %lldLL < %lldLL ? l0 + %lldLL : %lldLL;\n"
        "        const float *restrict w = %s + @_%soff(bt);\n"
        "        const float *restrict x = %s + @_%soff(bt);\n"
        "        float *restrict y = C + bt * %lldLL;\n",
        LL(pl.ntasks), LL(pl.tpm), LL(pl.tpm), LL(pl.block), LL(pl.block), LL(L), LL(pl.block), LL(L), W,
        pl.v.w_is_a ? "a" : "b", X, pl.v.w_is_a ? "b" : "a", LL(L));
    if (pl.v.dot) {
        put(out, &pl, "        int64_t l = l0;\n");
        if (pl.rows > 1)
            put(out, &pl, "        for (; l + %d <= l1; l += %d) @_dot%d(w + l * %lldLL, x, y + l);\n", pl.rows, pl.rows,
                pl.rows, LL(pl.K));
        put(out, &pl, "        for (; l < l1; l++) @_dot1(w + l * %lldLL, x, y + l);\n", LL(pl.K));
    } else {
        put(out, &pl, "        @_cols(w + l0, x, y + l0, l1 - l0);\n");
    }
    put(out, &pl, "    }\n}\n\n");
}
