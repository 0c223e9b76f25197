/*
 * Row reductions in the GPU matmul's store stage (issue 29, GPU slice): a sum, mean, max,
 * min or logsumexp over the last axis (N) of a product that nothing else reads is computed
 * by the f32 matmul template from its registers instead of from a stored [.., M, N]
 * product: the SIMT kernel (gpu_matmul.c, tc=0) from its register block, the 3xTF32 kernel
 * (gpu_mma32.c, tc=1) from its accumulator fragments. The planner's decision is the CPU one (redepi.c
 * kf_synth_fuse_reductions, kf_stage.redepi); this file holds the GPU half.
 *
 *   - Store stage: after the K loop each work-item folds the rn columns of each of its rm
 *     rows (columns past N left out), the TX items that share a row combine their values
 *     in local memory with a tree (kf_rr, and kf_rs for logsumexp's sums), and item tx = 0
 *     writes the block's partial of that row to scratch pr<stage>[row * gx + block column]
 *     (a pair for logsumexp). Blocks split N (gx of them over a row), so a row's partials
 *     come from several blocks: no atomics, no ordering between blocks.
 *   - 3xTF32 store stage (kf_gpu_redepi_mma_store): each lane folds its columns of its
 *     rows g and g + 8 of every 16-row tile, the four lanes of a quad (same rows) combine
 *     by shuffles, lane t = 0 of each warp puts its rows' values in shared memory (the
 *     operand ring, idle after the last wait and a barrier; [row][warp along N]), and
 *     after a barrier thread i < BM merges row i's warps in order and writes the block's
 *     partial at pr<stage>[row * gx + tn_] (tn_: the block's tile column, the tile order
 *     being grouped). Same partial layout, same combine launch.
 *   - Combine: a second small launch, named as the reduction's own kernel (kf_s<r>), one
 *     work-item per row, merges the row's gx partials in block order and writes the
 *     result (a mean divided by N).
 *
 * Semantics as the reduction template's (gpu_reduce.c) and the reference's: max/min
 * propagate NaN (kf_nmax/kf_nmin); logsumexp keeps a pair (max m, sum s of exp(x - m))
 * merged online, m starting at -FLT_MAX so that a -inf element adds exp(-inf) = 0; a NaN
 * makes s NaN, +inf gives +inf, a row of -inf gives log(0) + m = -inf; sums in float.
 *
 * The parameter "<prefix>red" (1 fused, the default; 0 apart) on the host, at either path
 * (not gated on tc, so a large CUDA product defaults to tc=1 red=1: one product kernel and
 * the small combine); the reduction's own parameters are gated on red=0. f16/bf16
 * products (gpu_mma.c) never take it: their result is not f32 (kf_synth_fuse_reductions).
 */
#include "gpu_tpl.h"

#include <stdio.h>
#include <string.h>

void kf_gpu_redepi_param(kf_synth *s, kf_stage *st) {
    /* both kernels of an f32 product take it (the SIMT one and the 3xTF32 one), so it is
     * not gated on tc: the search moves it at either path */
    long v[] = {1, 0};
    int sel = s->space.nparams;
    kf_tpl_add_param(&s->space, st->prefix, "red", KF_ROLE_NONE, v, 2, 0);
    if (s->space.nparams > sel) st->red_sel = sel + 1;
}

typedef enum rkind { R_SUM, R_MAX, R_MIN, R_LSE } rkind;

static rkind kind_of(const kf_op_def *d) {
    switch (d->combiner) {
    case KF_COMB_MAX: return R_MAX;
    case KF_COMB_MIN: return R_MIN;
    case KF_COMB_LOGSUMEXP: return R_LSE;
    default: return R_SUM;
    }
}

static const kf_node *red_node(const kf_gplan *gp, const kf_stage *st) {
    return &gp->s->g->nodes[gp->s->st[st->redepi - 1].nodes[0]];
}

/* acc = merge(acc, v) for one element or one partial (not logsumexp) */
static void merge(kf_buf *o, rkind k, const char *acc, const char *v) {
    if (k == R_SUM) kf_buf_printf(o, "%s += %s;", acc, v);
    else kf_buf_printf(o, "%s = %s(%s, %s);", acc, k == R_MAX ? "kf_nmax" : "kf_nmin", acc, v);
}

/* (mx, sm) = merge((mx, sm), (cm, cs)): logsumexp's online pair merge */
static void lse_merge(kf_buf *o, const char *mx, const char *sm, const char *cm, const char *cs) {
    kf_buf_printf(o, "if (%s > %s) { %s = %s * kf_expf(%s - %s) + %s; %s = %s; } else %s += %s == %s ? %s : %s * kf_expf(%s - %s);",
                  cm, mx, sm, sm, mx, cm, cs, mx, cm, sm, cm, mx, cs, cs, cm, mx);
}

static const char *init_of(rkind k) { return k == R_MAX ? "(-KF_INF)" : k == R_MIN ? "KF_INF" : "0.0f"; }

/* The elementwise stage between the product y and the reduction (the reduction's
 * prologue, computing its input x from y's elements), or NULL. */
static const kf_stage *chain_of(const kf_synth *s, const kf_stage *st, int *x, int *y) {
    const kf_stage *rs = &s->st[st->redepi - 1];
    if (!rs->prologue) return NULL;
    *x = s->g->nodes[rs->nodes[0]].in[0];
    *y = s->g->nodes[st->nodes[0]].out;
    return &s->st[rs->prologue - 1];
}

void kf_gpu_redepi_scratch(kf_gplan *gp, kf_gk *k, const kf_stage *st, int64_t rows, int64_t gx) {
    const int w = kind_of(kf_op_get(red_node(gp, st)->op)) == R_LSE ? 2 : 1;
    char name[16];
    snprintf(name, sizeof name, "pr%d", st->index);
    kf_gplan_scratch(gp, name, rows * gx * w * 4);
    kf_gk_scratch(k, name, "float");
    int x, y;
    const kf_stage *e = chain_of(gp->s, st, &x, &y);
    if (!e) return;
    /* the chain's helper kf_rp<x>, rendered before this kernel, and its operands */
    kf_gpu_emit_pointwise_at(gp, e, y, x);
    kf_ew_layout lay;
    kf_synth_ewise_layout(gp->s, e, &lay);
    for (int b = 0; b < lay.nbufs; b++) {
        if (lay.bufs[b] == y) continue;
        char pn[16];
        snprintf(pn, sizeof pn, "b%d", lay.bufs[b]);
        int have = 0;
        for (int i = 0; i < k->k.nparams; i++) have |= strcmp(k->k.p[i].name, pn) == 0;
        if (!have) kf_gk_value(gp, k, lay.bufs[b], KF_GP_IN);
    }
}

int kf_gpu_redepi_chained(const kf_synth *s, const kf_stage *st) {
    int x, y;
    return st->redepi && chain_of(s, st, &x, &y) != NULL;
}

/* "const float v = <the element folded>;": the product's value raw at row r, column c
 * (expressions of the kernel), or the chain's value there, kf_rp<x>(flat index, raw,
 * operands...) */
static void fold_value(const kf_gplan *gp, const kf_stage *st, const char *raw, const char *r, const char *c,
                       int64_t N, kf_buf *o) {
    int x, y;
    const kf_stage *e = chain_of(gp->s, st, &x, &y);
    if (!e) {
        kf_buf_printf(o, "const float v = %s;", raw);
        return;
    }
    kf_buf_printf(o, "const float v = kf_rp%d(coff + (%s)(%s) * %lld + (%s), %s", x, gp->ix, r, (long long)N, c, raw);
    kf_ew_layout lay;
    kf_synth_ewise_layout(gp->s, e, &lay);
    for (int b = 0; b < lay.nbufs; b++)
        if (lay.bufs[b] != y) kf_buf_printf(o, ", b%d", lay.bufs[b]);
    kf_buf_puts(o, ");");
}

void kf_gpu_redepi_decl(kf_gplan *gp, kf_gk *k, const kf_stage *st, const kf_gpu_redtile *t) {
    const rkind rk = kind_of(kf_op_get(red_node(gp, st)->op));
    kf_gpu_redepi_scratch(gp, k, st, t->rows, t->gx);
    kf_buf_printf(&k->body, "    $shared float kf_rr[%lld];\n", (long long)(t->TX * t->TY));
    if (rk == R_LSE) kf_buf_printf(&k->body, "    $shared float kf_rs[%lld];\n", (long long)(t->TX * t->TY));
}

int64_t kf_gpu_redepi_local_bytes(const kf_synth *s, const kf_stage *st, int64_t nt) {
    if (!st->redepi) return 0;
    const kf_op_def *d = kf_op_get(s->g->nodes[s->st[st->redepi - 1].nodes[0]].op);
    return nt * 4 * (d->combiner == KF_COMB_LOGSUMEXP ? 2 : 1);
}

void kf_gpu_redepi_store(kf_gplan *gp, kf_gk *k, const kf_stage *st, const kf_gpu_redtile *t) {
    const kf_op_def *d = kf_op_get(red_node(gp, st)->op);
    const rkind rk = kind_of(d);
    const int64_t rm = t->rm, rn = t->rn, TX = t->TX, TY = t->TY, M = t->M, N = t->N;
    kf_buf *o = &k->body;
    kf_buf_printf(o, "    /* %s over each row of the tile: every item folds its %lld columns of each of its %lld rows, "
                     "the %lld items of a row combine in local memory, item tx = 0 writes the block's partial */\n",
                  d->name, (long long)rn, (long long)rm, (long long)TX);
    kf_buf_printf(o, "    float cv[%lld];\n", (long long)(rm * rn));
    for (int i = 0; i < rm; i++) {
        kf_buf_puts(o, "   ");
        for (int j = 0; j < rn; j++) kf_buf_printf(o, " cv[%lld] = c%d_%d;", (long long)(i * rn + j), i, j);
        kf_buf_puts(o, "\n");
    }
    kf_buf_printf(o, "    for (int i = 0; i < %lld; i++) {\n", (long long)rm);
    if (t->rl)
        kf_buf_printf(o, "        const int r = row0 + ty * 4 + (i / 4) * %lld + i %% 4;\n", (long long)(4 * TY));
    else
        kf_buf_printf(o, "        const int r = row0 + ty + i * %lld;\n", (long long)TY);
    if (rk == R_LSE) kf_buf_puts(o, "        float mx = -3.402823466e+38f, sm = 0.0f;\n");
    else kf_buf_printf(o, "        float acc = %s;\n", init_of(rk));
    kf_buf_printf(o, "        for (int j = 0; j < %lld; j++) {\n", (long long)rn);
    if (t->rl) kf_buf_printf(o, "            const int c = col0 + tx * 4 + (j / 4) * %lld + j %% 4;\n", (long long)(4 * TX));
    else kf_buf_printf(o, "            const int c = col0 + tx + j * %lld;\n", (long long)TX);
    /* columns past N hold zeros (the tiles are zero-filled): left out; so are rows past M
     * where a chain reads operands at the element's index */
    char cc[96] = "", raw[48];
    const int cr = M % t->tm != 0 && kf_gpu_redepi_chained(gp->s, st), ccn = N % t->tn != 0;
    if (cr && ccn) snprintf(cc, sizeof cc, "if (r < %lld && c < %lld) ", (long long)M, (long long)N);
    else if (cr) snprintf(cc, sizeof cc, "if (r < %lld) ", (long long)M);
    else if (ccn) snprintf(cc, sizeof cc, "if (c < %lld) ", (long long)N);
    snprintf(raw, sizeof raw, "cv[i * %lld + j]", (long long)rn);
    kf_buf_printf(o, "            %s{ ", cc);
    fold_value(gp, st, raw, "r", "c", N, o);
    kf_buf_puts(o, " ");
    if (rk == R_LSE)
        kf_buf_puts(o, "if (v > mx) { sm = sm * kf_expf(mx - v) + 1.0f; mx = v; } else sm += v == mx ? 1.0f : kf_expf(v - mx);");
    else merge(o, rk, "acc", "v");
    kf_buf_puts(o, " }\n            (void)c;\n        }\n");
    if (rk == R_LSE) kf_buf_puts(o, "        kf_rr[tid] = mx;\n        kf_rs[tid] = sm;\n");
    else kf_buf_puts(o, "        kf_rr[tid] = acc;\n");
    kf_buf_puts(o, "        $barrier;\n");
    if (TX > 1) {
        kf_buf_printf(o, "        for (int h = %lld; h > 0; h >>= 1) {\n            if (tx < h) { ", (long long)(TX / 2));
        if (rk == R_LSE) {
            kf_buf_puts(o, "float m2 = kf_rr[tid], s2 = kf_rs[tid]; const float cm = kf_rr[tid + h], cs = kf_rs[tid + h]; ");
            lse_merge(o, "m2", "s2", "cm", "cs");
            kf_buf_puts(o, " kf_rr[tid] = m2; kf_rs[tid] = s2;");
        } else {
            merge(o, rk, "kf_rr[tid]", "kf_rr[tid + h]");
        }
        kf_buf_puts(o, " }\n            $barrier;\n        }\n");
    }
    char at[96];
    snprintf(at, sizeof at, "(coff / %lld + r) * %lld + $grp(0)", (long long)N, (long long)t->gx);
    if (M % t->tm != 0) kf_buf_printf(o, "        if (tx == 0 && r < %lld) { ", (long long)M);
    else kf_buf_puts(o, "        if (tx == 0) { ");
    if (rk == R_LSE)
        kf_buf_printf(o, "pr%d[(%s) * 2] = kf_rr[tid]; pr%d[(%s) * 2 + 1] = kf_rs[tid];", st->index, at, st->index, at);
    else
        kf_buf_printf(o, "pr%d[%s] = kf_rr[tid];", st->index, at);
    kf_buf_puts(o, " }\n        $barrier;\n        (void)r;\n    }\n");
}

int64_t kf_gpu_redepi_mma_smem(const kf_synth *s, const kf_stage *st, int64_t bm, int64_t warps_n) {
    if (!st->redepi) return 0;
    const kf_op_def *d = kf_op_get(s->g->nodes[s->st[st->redepi - 1].nodes[0]].op);
    return bm * warps_n * 4 * (d->combiner == KF_COMB_LOGSUMEXP ? 2 : 1);
}

/* acc = merge(acc, v) for the fold of one element v (logsumexp's pair too) */
static void fold(kf_buf *o, rkind k, const char *acc, const char *v) {
    if (k != R_LSE) {
        merge(o, k, acc, v);
        return;
    }
    kf_buf_printf(o, "if (%s > mx) { sm = sm * kf_expf(mx - %s) + 1.0f; mx = %s; } else sm += %s == mx ? 1.0f : kf_expf(%s - mx);",
                  v, v, v, v, v);
}

void kf_gpu_redepi_mma_store(kf_gplan *gp, kf_gk *k, const kf_stage *st, const kf_gpu_redmma *t) {
    const kf_op_def *d = kf_op_get(red_node(gp, st)->op);
    const rkind rk = kind_of(d);
    const int64_t W = t->warps_n, BM = t->bm;
    kf_buf *o = &k->body;
    kf_buf_printf(o, "    /* %s over each row of the block tile, in its store stage: every lane folds its columns of "
                     "its rows g and g + 8 of each 16-row tile, the quad of lanes of a row combines by shuffles, the "
                     "%lld warps along N through shared memory (the operand ring, now idle), and the block's "
                     "partial of each row goes to scratch */\n",
                  d->name, (long long)W);
    /* every warp is past its last read of the ring (cp.async.wait_group 0 above) */
    kf_buf_puts(o, "    $barrier;\n    {\n");
    kf_buf_printf(o, "      const int wcol = warp %% %lld;\n", (long long)W);
    kf_buf_printf(o, "      #pragma unroll\n      for (int mi = 0; mi < %lld; mi++)\n        #pragma unroll\n"
                     "        for (int h = 0; h < 2; h++) {\n",
                  (long long)t->MI);
    if (rk == R_LSE) kf_buf_puts(o, "          float mx = -3.402823466e+38f, sm = 0.0f;\n");
    else kf_buf_printf(o, "          float a = %s;\n", init_of(rk));
    kf_buf_printf(o, "          #pragma unroll\n          for (int ni = 0; ni < %lld; ni++)\n            #pragma unroll\n"
                     "            for (int x = 0; x < 2; x++) {\n",
                  (long long)t->NI);
    kf_buf_puts(o, "              const int r = row0 + wm0 + mi * 16 + g + h * 8, c = col0 + wn0 + ni * 8 + t * 2 + x;\n");
    /* columns past N hold zeros (the tiles are zero-filled): left out; so are rows past M
     * where a chain reads operands at the element's index */
    char cc[96] = "";
    const int cr = t->M % t->bm != 0 && kf_gpu_redepi_chained(gp->s, st), ccn = t->N % t->bn != 0;
    if (cr && ccn) snprintf(cc, sizeof cc, "if (r < %lld && c < %lld) ", (long long)t->M, (long long)t->N);
    else if (cr) snprintf(cc, sizeof cc, "if (r < %lld) ", (long long)t->M);
    else if (ccn) snprintf(cc, sizeof cc, "if (c < %lld) ", (long long)t->N);
    kf_buf_printf(o, "              %s{ ", cc);
    fold_value(gp, st, "acc[mi][ni][2 * h + x]", "r", "c", t->N, o);
    kf_buf_puts(o, " ");
    fold(o, rk, "a", "v");
    kf_buf_puts(o, " }\n              (void)r; (void)c;\n            }\n");
    /* lanes 4g .. 4g + 3 hold the same two rows */
    kf_buf_puts(o, "          #pragma unroll\n          for (int q = 1; q < 4; q <<= 1) {\n");
    if (rk == R_LSE) {
        kf_buf_puts(o, "            const float cm = __shfl_xor_sync(0xffffffffu, mx, q), cs = __shfl_xor_sync(0xffffffffu, sm, q);\n            ");
        lse_merge(o, "mx", "sm", "cm", "cs");
        kf_buf_puts(o, "\n");
    } else {
        kf_buf_puts(o, "            const float u = __shfl_xor_sync(0xffffffffu, a, q);\n            ");
        merge(o, rk, "a", "u");
        kf_buf_puts(o, "\n");
    }
    kf_buf_puts(o, "          }\n");
    kf_buf_printf(o, "          if (t == 0) { const int lr = wm0 + mi * 16 + g + h * 8; ");
    if (rk == R_LSE)
        kf_buf_printf(o, "kf_smf[lr * %lld + wcol] = mx; kf_smf[%lld + lr * %lld + wcol] = sm; }\n", (long long)W,
                      (long long)(BM * W), (long long)W);
    else kf_buf_printf(o, "kf_smf[lr * %lld + wcol] = a; }\n", (long long)W);
    kf_buf_puts(o, "        }\n    }\n    $barrier;\n");
    /* the block's partial of each of its rows: the warps' values in order */
    kf_buf_printf(o, "    for (int i = tid; i < %lld; i += %lld) {\n", (long long)BM, (long long)t->NT);
    kf_buf_puts(o, "      const int r = row0 + i;\n");
    if (rk == R_LSE) {
        kf_buf_printf(o, "      float mx = kf_smf[i * %lld], sm = kf_smf[%lld + i * %lld];\n", (long long)W,
                      (long long)(BM * W), (long long)W);
        kf_buf_printf(o, "      for (int w = 1; w < %lld; w++) { const float cm = kf_smf[i * %lld + w], cs = kf_smf[%lld + i * %lld + w]; ",
                      (long long)W, (long long)W, (long long)(BM * W), (long long)W);
        lse_merge(o, "mx", "sm", "cm", "cs");
        kf_buf_puts(o, " }\n");
    } else {
        kf_buf_printf(o, "      float a = kf_smf[i * %lld];\n", (long long)W);
        kf_buf_printf(o, "      for (int w = 1; w < %lld; w++) { const float u = kf_smf[i * %lld + w]; ", (long long)W,
                      (long long)W);
        merge(o, rk, "a", "u");
        kf_buf_puts(o, " }\n");
    }
    char at[96];
    snprintf(at, sizeof at, "(coff / %lld + r) * %lld + tn_", (long long)t->N, (long long)t->gx);
    if (t->M % BM != 0) kf_buf_printf(o, "      if (r < %lld) { ", (long long)t->M);
    else kf_buf_puts(o, "      { ");
    if (rk == R_LSE)
        kf_buf_printf(o, "pr%d[(%s) * 2] = mx; pr%d[(%s) * 2 + 1] = sm;", st->index, at, st->index, at);
    else kf_buf_printf(o, "pr%d[%s] = a;", st->index, at);
    kf_buf_puts(o, " }\n      (void)r;\n    }\n");
}

void kf_gpu_redepi_combine(kf_gplan *gp, const kf_stage *st, const kf_gpu_redtile *t) {
    const kf_synth *s = gp->s;
    const kf_stage *rs = &s->st[st->redepi - 1];
    const kf_node *n = red_node(gp, st);
    const kf_op_def *d = kf_op_get(n->op);
    const rkind rk = kind_of(d);
    const char *ix = gp->ix;
    if (rs->epilogue) kf_gpu_emit_epilogue(gp, rs); /* its stores of the result go to kf_epi<out> */
    kf_gdev dv;
    kf_gpu_dev(s, &dv);
    int64_t wg = dv.max_wg < 256 ? dv.max_wg : 256;
    kf_gk k;
    char name[32], pname[16];
    snprintf(name, sizeof name, "kf_s%d", rs->index);
    snprintf(pname, sizeof pname, "pr%d", st->index);
    kf_gk_begin(&k, name);
    kf_gk_scratch(&k, pname, "float");
    kf_gk_value(gp, &k, n->out, KF_GP_OUT);
    kf_buf *o = &k.body;
    kf_buf_printf(o, "    /* %s of the matmul's rows, pass 2 of 2: merge each row's %lld block partials in order, "
                     "one work-item a row */\n",
                  d->name, (long long)t->gx);
    kf_buf_printf(o, "    const %s oi = (%s)$grp(0) * %lld + $lid(0);\n", ix, ix, (long long)wg);
    kf_buf_printf(o, "    if (oi < %lld) {\n", (long long)t->rows);
    if (rk == R_LSE) {
        kf_buf_puts(o, "        float mx = -3.402823466e+38f, sm = 0.0f;\n");
        kf_buf_printf(o, "        for (int c = 0; c < %lld; c++) {\n", (long long)t->gx);
        kf_buf_printf(o, "            const float cm = %s[(oi * %lld + c) * 2], cs = %s[(oi * %lld + c) * 2 + 1];\n            ",
                      pname, (long long)t->gx, pname, (long long)t->gx);
        lse_merge(o, "mx", "sm", "cm", "cs");
        kf_buf_printf(o, "\n        }\n        b%d[oi] = sm != sm ? sm : mx == KF_INF ? mx : kf_logf(sm) + mx;\n", n->out);
    } else {
        kf_buf_printf(o, "        float acc = %s;\n", init_of(rk));
        kf_buf_printf(o, "        for (int c = 0; c < %lld; c++) { const float v = %s[oi * %lld + c]; ", (long long)t->gx,
                      pname, (long long)t->gx);
        merge(o, rk, "acc", "v");
        kf_buf_puts(o, " }\n");
        if (d->mean) kf_buf_printf(o, "        b%d[oi] = acc / %lld.0f;\n", n->out, (long long)t->N);
        else kf_buf_printf(o, "        b%d[oi] = acc;\n", n->out);
    }
    kf_buf_puts(o, "    }\n");
    int64_t G[1] = {(t->rows + wg - 1) / wg * wg}, L[1] = {wg};
    kf_gk_launch(gp, &k, 1, G, L);
}
