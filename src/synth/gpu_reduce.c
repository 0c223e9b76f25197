/*
 * GPU reduction-family templates in the kernel form: axis reductions (sum, mean, max,
 * min, prod, argmax, argmin), softmax / log_softmax over one axis, layer_norm / rms_norm
 * over trailing axes.
 *
 * The input's dims are canonicalised into alternating kept/reduced groups as on the CPU
 * (size-1 dims dropped, neighbours of the same kind merged); an output index decomposes
 * over the kept groups into a base offset, a reduced index r over the reduced groups into
 * a row offset. Two layouts:
 *   row: the innermost group is reduced. A team of ts work-items shares one output
 *        (a group holds wg/ts teams): lane l folds r = l, l + ts, ... (consecutive lanes,
 *        consecutive addresses), then the team combines in local memory with a tree, or,
 *        with sg=1 on a device with sub-groups, with sub-group reductions ($sg_sum,
 *        $sg_max/$sg_min plus a NaN flag, since the languages' max ignores NaN; butterfly
 *        shuffles for prod) and one local slot per sub-group.
 *   col: the innermost group is kept. One work-item per output, folding the reduced rows
 *        in order; neighbouring items read neighbouring columns (coalesced).
 * Two-pass (split > 1) for long rows and full reductions: pass 1 folds `split` chunks of
 * every output's reduced range into partials in scratch (p<stage>, with indices in
 * q<stage> for argmax/argmin); pass 2 combines each output's partials and finalises.
 *
 * Rules shared with the interpreter (src/ir/interp.c): max/min propagate NaN;
 * argmax/argmin return the first NaN's index if any, else the first extreme's (the merge
 * order does not matter: kf_arg_take compares indices on ties); mean divides the sum by
 * the reduced count; sums accumulate in float in blocks (long per-item runs are summed in
 * blocks of 256 before they join the total, so the error does not grow with the run).
 *
 * Softmax: row layout (axis innermost) with one team per row: one pass for the max and the
 * sum of exp (online: a new maximum rescales the sum) and a write pass over the row from
 * global memory; split > 1 adds a two-kernel
 * variant for long rows (pass 1: per-chunk max and sum of exp around it; pass 2: every
 * chunk rescales the partials to the row max and writes its part). Col layout (axis not
 * innermost): one work-item per column, three passes down the column.
 * Norms: one team per row; layer norm's mean and centred sum of squares from one read
 * (blocks of 8 per lane, exact mean and M2 each, merged by the parallel-axis formula), rms
 * norm's sum of squares likewise; the write pass applies eps, weight and bias as the CPU template does; split > 1 computes
 * per-chunk (mean, centred M2) and combines them exactly (the parallel-axis formula) in
 * pass 2.
 *
 * Register rows (rc=1, GPU devices, one-kernel softmax and norms whose lane holds at most
 * KF_RC_MAX elements): each lane loads its elements of the row once into a constant-size
 * array, and the max / sum / mean / M2 passes and the write run over that array, so x is
 * read from memory once instead of two or three times.
 *
 * Parameters: ts (team size), wg (group size), sg (sub-group combine, only when the
 * device has sub-groups), rc (row in registers), split (two-pass chunks, only for long
 * rows and when the plan's launch budget allows). Col layouts: wg, split.
 */
#include "gpu_tpl.h"

#include <stdio.h>
#include <string.h>


/* The stage's geometry: rows of R reduced elements, nrows of them; col = col layout. */
typedef struct rgeom {
    rgroup gr[KF_MAX_DIMS];
    int m;
    int64_t nrows, R;
    int64_t O, N, I; /* softmax: [O, N, I] around the axis; norm: O rows of N */
    int col, copy;   /* copy: nothing to reduce (reduce ops only) */
} rgeom;

static void geometry(const kf_synth *s, const kf_stage *st, rgeom *G) {
    const kf_graph *g = s->g;
    const kf_node *n = &g->nodes[st->nodes[0]];
    const kf_shape *sh = &g->values[n->in[0]].shape;
    memset(G, 0, sizeof *G);
    if (st->kind == KF_STAGE_REDUCE) {
        G->m = kf_synth_canon(sh, n->attr.axes, G->gr);
        G->nrows = kf_shape_numel(&g->values[n->out].shape);
        G->R = 1;
        for (int j = 0; j < G->m; j++)
            if (G->gr[j].reduced) G->R *= G->gr[j].size;
        G->copy = G->m == 0 || G->R == 1;
        G->col = !G->copy && !G->gr[G->m - 1].reduced;
        return;
    }
    if (st->kind == KF_STAGE_SOFTMAX) {
        kf_synth_axis_split(sh, n->attr.axes, &G->O, &G->N, &G->I);
        G->col = G->I > 1;
        G->nrows = G->col ? G->O * G->I : G->O;
        G->R = G->N;
        return;
    }
    G->N = 1;
    for (int j = 0; j < sh->rank; j++)
        if ((n->attr.axes >> j) & 1u) G->N *= sh->d[j];
    G->O = kf_shape_numel(sh) / G->N;
    G->nrows = G->O;
    G->R = G->N;
}

static int64_t pow2_floor(int64_t n) {
    int64_t p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
}

static int is_arg_op(kf_op op) { return kf_op_is_arg(kf_op_get(op)); }

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Most row elements one lane keeps in registers (rc=1): 32 floats leave room for the rest
 * of the kernel within 255 registers at any group size. */
#define KF_RC_MAX 32

void kf_gpu_reduce_params(kf_synth *s, kf_stage *st, int allow_split) {
    kf_gdev d;
    kf_gpu_dev(s, &d);
    rgeom G;
    geometry(s, st, &G);
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    long wgs[KF_MAX_PARAM_VALUES], v[KF_MAX_PARAM_VALUES];
    long wgmax = d.max_wg < 1024 ? d.max_wg : 1024;
    int nwg = kf_gpu_pow2_values(wgmax < 64 ? wgmax : 64, wgmax, wgs);
    if (G.copy || G.col) {
        int dw = kf_gpu_nearest(wgs, nwg, d.is_cpu ? 1024 : 256);
        kf_gpu_param(s, st, "wg", KF_ROLE_GROUP, wgs, nwg, dw);
        if (G.copy || st->kind != KF_STAGE_REDUCE || !allow_split || G.R < 4096) return;
        int nv = 0;
        v[nv++] = 1;
        for (long sp = 4; sp <= 256 && sp * 64 <= G.R; sp *= 4) v[nv++] = sp;
        /* enough items to fill the device: a few groups per compute unit */
        int64_t want = (int64_t)d.cu * wgs[dw] * (d.is_cpu ? 1 : 4);
        int ds = G.nrows >= want ? 0 : kf_gpu_nearest(v, nv, (long)((want + G.nrows - 1) / G.nrows));
        kf_gpu_param(s, st, "split", KF_ROLE_SPLIT, v, nv, ds);
        return;
    }
    /* row layout: team size and group size */
    int nts = kf_gpu_pow2_values(1, wgmax, v);
    int64_t dts = d.is_cpu ? pow2_floor(G.R / 64 > 1 ? G.R / 64 : 1) : pow2_floor(G.R / 4 > 1 ? G.R / 4 : 1);
    if (d.is_cpu && dts > 64) dts = 64;
    if (!d.is_cpu && dts < 32) dts = 32;
    if (dts > 256) dts = 256;
    kf_gpu_param(s, st, "ts", KF_ROLE_NONE, v, nts, kf_gpu_nearest(v, nts, (long)dts));
    long dwg = dts > 256 ? dts : 256;
    int dw = kf_gpu_nearest(wgs, nwg, dwg);
    kf_gpu_param(s, st, "wg", KF_ROLE_GROUP, wgs, nwg, dw);
    /* prod combines with shuffles, which OpenCL has only with cl_khr_subgroup_shuffle */
    const kf_lang *L = kf_lang_by_name(s->platform);
    int sg_ok = !is_arg_op(n->op) && !(kf_op_get(n->op)->combiner == KF_COMB_PROD && L && kf_lang_shuffle_needs_ext(L));
    if (d.sg > 0 && sg_ok) {
        static const long sg[] = {0, 1};
        kf_gpu_param(s, st, "sg", KF_ROLE_SUBGROUP, sg, 2, dts >= d.sg ? 1 : 0);
    }
    /* softmax / norms: keep the row in registers (one read of x, not 2-3); the default on GPUs */
    if (st->kind != KF_STAGE_REDUCE && cdiv(G.R, dts) <= KF_RC_MAX) {
        static const long rc[] = {0, 1};
        kf_gpu_param(s, st, "rc", KF_ROLE_NONE, rc, 2, d.is_cpu ? 0 : 1);
    }
    if (!allow_split || G.R < 4096) return;
    int nv = 0;
    long sv[KF_MAX_PARAM_VALUES];
    sv[nv++] = 1;
    for (long sp = 4; sp <= 256 && sp * 256 <= G.R; sp *= 4) sv[nv++] = sp;
    int64_t rpg = wgs[dw] / dts > 0 ? wgs[dw] / dts : 1;
    int64_t groups = (G.nrows + rpg - 1) / rpg;
    int64_t want = (int64_t)d.cu * (d.is_cpu ? 2 : 4);
    int ds = groups >= want ? 0 : kf_gpu_nearest(sv, nv, (long)((want * rpg + G.nrows - 1) / G.nrows));
    kf_gpu_param(s, st, "split", KF_ROLE_SPLIT, sv, nv, ds);
}

/* ---- code pieces ---- */

typedef enum mop { M_SUM, M_PROD, M_MAX, M_MIN, M_ARGMAX, M_ARGMIN } mop;

static mop mop_of(kf_op op) {
    switch (kf_op_get(op)->combiner) {
    case KF_COMB_SUM: return M_SUM;
    case KF_COMB_PROD: return M_PROD;
    case KF_COMB_MAX: return M_MAX;
    case KF_COMB_MIN: return M_MIN;
    case KF_COMB_ARGMAX: return M_ARGMAX;
    case KF_COMB_ARGMIN: return M_ARGMIN;
    case KF_COMB_LOGSUMEXP: break; /* emit_lse_row */
    }
    return M_SUM;
}

static const char *mop_init(mop m) {
    switch (m) {
    case M_PROD: return "1.0f";
    case M_MAX: case M_ARGMAX: return "(-KF_INF)";
    case M_MIN: case M_ARGMIN: return "KF_INF";
    default: return "0.0f";
    }
}

/* "acc = merge(acc, val)" for the value reductions */
static void emit_merge(kf_buf *o, mop m, const char *acc, const char *val) {
    switch (m) {
    case M_SUM: kf_buf_printf(o, "%s += %s;", acc, val); break;
    case M_PROD: kf_buf_printf(o, "%s *= %s;", acc, val); break;
    case M_MAX: kf_buf_printf(o, "%s = kf_nmax(%s, %s);", acc, acc, val); break;
    case M_MIN: kf_buf_printf(o, "%s = kf_nmin(%s, %s);", acc, acc, val); break;
    default: break;
    }
}

/* Arg merge of candidate (val, idx) into (acc, ai). */
static void emit_arg_merge(kf_buf *o, mop m, const char *acc, const char *ai, const char *val,
                           const char *idx) {
    kf_buf_printf(o, "if (kf_arg_take(%s, %s, %s, %s, %d)) { %s = %s; %s = %s; }", acc, ai, val, idx,
                  m == M_ARGMAX, acc, val, ai, idx);
}

/* A lane's own fold over its elements in increasing index order: a later element never
 * wins a tie, so kf_arg_take's index compares reduce to "the first element, a larger
 * (smaller) value, or the first NaN" (fewer compares per element in the hot loop). */
static void emit_arg_fold_seq(kf_buf *o, mop m, const char *acc, const char *ai, const char *val,
                              const char *idx) {
    kf_buf_printf(o, "if (%s < 0 || %s %s %s || (%s != %s && %s == %s)) { %s = %s; %s = %s; }", ai, val,
                  m == M_ARGMAX ? ">" : "<", acc, val, val, acc, acc, acc, val, ai, idx);
}

/* Combine acc (and ai) across the ts lanes of every team; afterwards every lane holds its
 * team's result. Every work-item of the group must run it (it has barriers). */
static void team_reduce(kf_buf *o, mop m, const char *acc, const char *ai, int64_t ts, int sg,
                        const char *ind) {
    if (ts <= 1) return;
    int arg = m == M_ARGMAX || m == M_ARGMIN;
    if (sg && !arg) {
        /* the languages' sub-group max/min ignore NaN (fmax): a NaN flag restores the rule */
        if (m == M_SUM) {
            kf_buf_printf(o, "%s%s = $sg_sum(%s);\n", ind, acc, acc);
        } else if (m == M_MAX || m == M_MIN) {
            const char *t = m == M_MAX ? "$sg_max" : "$sg_min";
            kf_buf_printf(o, "%s{ const float e_ = %s(%s), n_ = $sg_max(%s != %s ? 1.0f : 0.0f); %s = n_ > 0.0f ? KF_NAN : e_; }\n",
                          ind, t, acc, acc, acc, acc);
        } else {
            kf_buf_printf(o, "%sfor (int h = $sg_size / 2; h > 0; h >>= 1) { const float o_ = $sg_shfl_xor(%s, h); ", ind, acc);
            emit_merge(o, m, acc, "o_");
            kf_buf_puts(o, " }\n");
        }
        kf_buf_printf(o, "%sif ($sg_lid == 0) kf_red[$sg_id] = %s;\n%s$barrier;\n", ind, acc, ind);
        kf_buf_printf(o, "%s{ const int nsg = %lld / $sg_size, s0 = (lid / %lld) * nsg; %s = kf_red[s0];\n",
                      ind, (long long)ts, (long long)ts, acc);
        kf_buf_printf(o, "%s  for (int i = 1; i < nsg; i++) { ", ind);
        emit_merge(o, m, acc, "kf_red[s0 + i]");
        kf_buf_printf(o, " } }\n%s$barrier;\n", ind);
        return;
    }
    kf_buf_printf(o, "%skf_red[lid] = %s;\n", ind, acc);
    if (arg) kf_buf_printf(o, "%skf_redi[lid] = %s;\n", ind, ai);
    kf_buf_printf(o, "%s$barrier;\n", ind);
    kf_buf_printf(o, "%sfor (int h = %lld; h > 0; h >>= 1) {\n", ind, (long long)(ts / 2));
    kf_buf_printf(o, "%s    if (lane < h) { ", ind);
    if (arg)
        kf_buf_printf(o, "if (kf_arg_take(kf_red[lid], kf_redi[lid], kf_red[lid + h], kf_redi[lid + h], %d)) "
                         "{ kf_red[lid] = kf_red[lid + h]; kf_redi[lid] = kf_redi[lid + h]; }",
                      m == M_ARGMAX);
    else
        emit_merge(o, m, "kf_red[lid]", "kf_red[lid + h]");
    kf_buf_printf(o, " }\n%s    $barrier;\n%s}\n", ind, ind);
    kf_buf_printf(o, "%s%s = kf_red[lid - lane];\n", ind, acc);
    if (arg) kf_buf_printf(o, "%s%s = kf_redi[lid - lane];\n", ind, ai);
    kf_buf_printf(o, "%s$barrier;\n", ind);
}

/* Team kernel prologue: ids and the local arrays. */
static void team_header(kf_buf *o, const kf_gplan *gp, int64_t ts, int64_t wg, int arg) {
    kf_buf_printf(o, "    $shared float kf_red[%lld];\n", (long long)wg);
    if (arg) kf_buf_printf(o, "    $shared int kf_redi[%lld];\n", (long long)wg);
    kf_buf_printf(o, "    const int lid = $lid(0);\n");
    kf_buf_printf(o, "    const int lane = lid %% %lld;\n", (long long)ts);
    kf_buf_printf(o, "    const %s team = %s$grp(0) * %lld + lid / %lld;\n", gp->ix, strcmp(gp->ix, "long") == 0 ? "(long)" : "",
                  (long long)(wg / ts), (long long)ts);
    kf_buf_puts(o, "    (void)lane;\n");
}

/* "IX base = offset of output oi" over the kept groups (innermost varies fastest). */
static void emit_base(kf_buf *o, const kf_gplan *gp, const rgroup *gr, int m, const char *oi,
                      const char *ind) {
    int outer = -1, nkept = 0;
    for (int j = 0; j < m; j++)
        if (!gr[j].reduced) {
            if (outer < 0) outer = j;
            nkept++;
        }
    if (nkept == 0) {
        kf_buf_printf(o, "%sconst %s base = 0;\n", ind, gp->ix);
        return;
    }
    if (nkept == 1) {
        kf_buf_printf(o, "%sconst %s base = %s * %lld;\n", ind, gp->ix, oi, (long long)gr[outer].stride);
        return;
    }
    kf_buf_printf(o, "%s%s base = 0;\n%s{ %s rem = %s;\n", ind, gp->ix, ind, gp->ix, oi);
    for (int j = m - 1; j >= 0; j--) {
        if (gr[j].reduced) continue;
        if (j == outer)
            kf_buf_printf(o, "%s  base += rem * %lld;\n", ind, (long long)gr[j].stride);
        else
            kf_buf_printf(o, "%s  base += (rem %% %lld) * %lld; rem = rem / %lld;\n", ind, (long long)gr[j].size,
                          (long long)gr[j].stride, (long long)gr[j].size);
    }
    kf_buf_printf(o, "%s}\n", ind);
}

/* "const IX ro = offset of reduced index r" over the reduced groups. */
static void emit_roff(kf_buf *o, const kf_gplan *gp, const rgroup *gr, int m, const char *ind) {
    int nred = 0, last = -1;
    for (int j = 0; j < m; j++)
        if (gr[j].reduced) nred++, last = j;
    if (nred == 1) {
        if (gr[last].stride == 1) kf_buf_printf(o, "%sconst %s ro = r;\n", ind, gp->ix);
        else kf_buf_printf(o, "%sconst %s ro = r * %lld;\n", ind, gp->ix, (long long)gr[last].stride);
        return;
    }
    int outer = -1;
    for (int j = 0; j < m && outer < 0; j++)
        if (gr[j].reduced) outer = j;
    kf_buf_printf(o, "%s%s ro = 0;\n%s{ %s rr = r;\n", ind, gp->ix, ind, gp->ix);
    for (int j = m - 1; j >= 0; j--) {
        if (!gr[j].reduced) continue;
        if (j == outer)
            kf_buf_printf(o, "%s  ro += rr * %lld;\n", ind, (long long)gr[j].stride);
        else
            kf_buf_printf(o, "%s  ro += (rr %% %lld) * %lld; rr = rr / %lld;\n", ind, (long long)gr[j].size,
                          (long long)gr[j].stride, (long long)gr[j].size);
    }
    kf_buf_printf(o, "%s}\n", ind);
}

/* A strided loop "for (r = start; r < end; r += step) { load; fold }". For sums whose
 * items may run long (per_item > 512) the values are added in blocks of 256 iterations
 * into blk first. `load` declares `v`; `fold_acc` is the accumulator of a sum, or NULL
 * when `fold` (a statement using v) does the folding. */
static void emit_loop(kf_buf *o, const kf_gplan *gp, const char *start, const char *end, int64_t step,
                      int64_t per_item, const char *load, const char *fold_acc, const char *fold,
                      const char *ind) {
    const char *ix = gp->ix;
    if (fold_acc && per_item > 512) {
        kf_buf_printf(o, "%sfor (%s rb = %s; rb < %s; rb += %lld) {\n", ind, ix, start, end, (long long)(step * 256));
        kf_buf_printf(o, "%s    const %s re = rb + %lld < %s ? rb + %lld : %s;\n", ind, ix, (long long)(step * 256),
                      end, (long long)(step * 256), end);
        kf_buf_printf(o, "%s    float blk = 0.0f;\n", ind);
        kf_buf_printf(o, "%s    for (%s r = rb; r < re; r += %lld) {\n%s%s        blk += v;\n%s    }\n", ind, ix,
                      (long long)step, load, ind, ind);
        kf_buf_printf(o, "%s    %s += blk;\n%s}\n", ind, fold_acc, ind);
        return;
    }
    kf_buf_printf(o, "%sfor (%s r = %s; r < %s; r += %lld) {\n%s", ind, ix, start, end, (long long)step, load);
    if (fold_acc) kf_buf_printf(o, "%s    %s += v;\n", ind, fold_acc);
    else kf_buf_printf(o, "%s    %s\n", ind, fold);
    kf_buf_printf(o, "%s}\n", ind);
}

static void launch1(kf_gplan *gp, kf_gk *k, int64_t global, int64_t local) {
    int64_t G[1] = {global}, L[1] = {local};
    kf_gk_launch(gp, k, 1, G, L);
}

typedef struct rparams {
    int64_t ts, wg, split, chunk;
    int sg, dsg; /* sub-group combine on; the device's sub-group size */
    int rc;      /* row in registers: lane keeps its cdiv(chunk, ts) elements */
    int rv;      /* with rc: 4 = the row is read and written as 4-wide vectors (N % 4 == 0) */
} rparams;

static void read_params(const kf_gplan *gp, const kf_stage *st, const kf_point *p, const rgeom *G,
                        rparams *P) {
    kf_gdev d;
    kf_gpu_dev(gp->s, &d);
    P->ts = kf_gpu_get(gp->s, st, p, "ts", 1);
    P->wg = kf_gpu_get(gp->s, st, p, "wg", 256);
    P->sg = (int)kf_gpu_get(gp->s, st, p, "sg", 0);
    P->split = kf_gpu_get(gp->s, st, p, "split", 1);
    if (P->split < 1) P->split = 1;
    if (P->split > G->R) P->split = G->R;
    P->chunk = cdiv(G->R, P->split);
    P->split = cdiv(G->R, P->chunk); /* every chunk non-empty */
    if (P->ts > P->wg) P->ts = P->wg;
    /* lanes without an element are pointless: shrink the team to the chunk */
    int64_t rowcap = kf_gpu_pow2_ceil(P->chunk);
    if (P->ts > rowcap) P->ts = rowcap;
    /* and the group to the teams there are */
    int64_t teams = G->nrows * P->split;
    if (!G->col && teams * P->ts < P->wg) {
        int64_t w = kf_gpu_pow2_ceil(teams * P->ts);
        P->wg = w < P->ts ? P->ts : w;
    }
    P->dsg = d.sg;
    if (P->sg && (d.sg == 0 || P->ts < d.sg)) P->sg = 0;
    P->rc = (int)kf_gpu_get(gp->s, st, p, "rc", 0);
    if (P->split > 1 || cdiv(P->chunk, P->ts) > KF_RC_MAX) P->rc = 0;
    /* a fused prologue computes each element: no vector loads of the input */
    P->rv = P->rc && !st->prologue && G->N % 4 == 0 && 4 * cdiv(G->N / 4, P->ts) <= KF_RC_MAX ? 4 : 1;
}

int kf_gpu_reduce_prologue_ok(const kf_synth *s, const kf_stage *st) {
    rgeom G;
    geometry(s, st, &G);
    if (G.copy) return 0;
    kf_ew_layout lay;
    int x = s->g->nodes[st->nodes[0]].in[0];
    kf_synth_ewise_layout(s, &s->st[s->val_stage[x]], &lay);
    /* the operands replace x among the kernel's parameters (output, weight, bias, scratch) */
    return lay.nreads + 6 <= KF_GK_MAX_PARAMS;
}

/* ---- reductions ---- */

static void reduce_copy(kf_gplan *gp, int k, const kf_stage *st, const rparams *P) {
    const kf_synth *s = gp->s;
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    int64_t nout = kf_shape_numel(&s->g->values[n->out].shape);
    int64_t wg = P->wg;
    if (wg > kf_gpu_pow2_ceil(nout)) wg = kf_gpu_pow2_ceil(nout);
    kf_gk kk;
    char name[32];
    snprintf(name, sizeof name, "kf_s%d", k);
    kf_gk_begin(&kk, name);
    if (!is_arg_op(n->op)) kf_gk_value(gp, &kk, n->in[0], KF_GP_IN);
    kf_gk_value(gp, &kk, n->out, KF_GP_OUT);
    kf_buf_printf(&kk.body, "    /* nothing reduced: %s */\n", is_arg_op(n->op) ? "index 0" : "copy");
    kf_buf_printf(&kk.body, "    const %s i = %s;\n", gp->ix, kf_gpu_gid0(gp));
    if (is_arg_op(n->op))
        kf_buf_printf(&kk.body, "    if (i < %lld) b%d[i] = 0;\n", (long long)nout, n->out);
    else
        kf_buf_printf(&kk.body, "    if (i < %lld) b%d[i] = b%d[i];\n", (long long)nout, n->out, n->in[0]);
    launch1(gp, &kk, cdiv(nout, wg) * wg, wg);
}

/* The final store of an output from acc/ai. */
static void emit_store(kf_buf *o, const kf_node *n, mop m, int64_t R, const char *oi, const char *ind) {
    if (m == M_ARGMAX || m == M_ARGMIN) kf_buf_printf(o, "%sb%d[%s] = (long)ai;\n", ind, n->out, oi);
    else if (kf_op_get(n->op)->mean) kf_buf_printf(o, "%sb%d[%s] = acc / %lld.0f;\n", ind, n->out, oi, (long long)R);
    else kf_buf_printf(o, "%sb%d[%s] = acc;\n", ind, n->out, oi);
}

static void emit_reduce_row(kf_gplan *gp, int k, const kf_stage *st, const rgeom *G, const rparams *P) {
    const kf_synth *s = gp->s;
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    mop m = mop_of(n->op);
    int arg = m == M_ARGMAX || m == M_ARGMIN;
    const int64_t ts = P->ts, wg = P->wg, S = P->split, CH = P->chunk, R = G->R, nout = G->nrows;
    const int64_t rpg = wg / ts;
    char name[32], pname[16], qname[16];
    snprintf(pname, sizeof pname, "p%d", k);
    snprintf(qname, sizeof qname, "q%d", k);
    kf_buf load = {0}, fold = {0};
    emit_roff(&load, gp, G->gr, G->m, "            ");
    kf_buf_printf(&load, "            const float v = b%d[base + ro];\n", n->in[0]);
    if (arg) emit_arg_fold_seq(&fold, m, "acc", "ai", "v", "(int)r");
    else emit_merge(&fold, m, "acc", "v");

    /* pass 1 (or the only pass): team per (output, chunk) */
    kf_gk kk;
    snprintf(name, sizeof name, S > 1 ? "kf_s%d_part" : "kf_s%d", k);
    kf_gk_begin(&kk, name);
    kf_gk_value(gp, &kk, n->in[0], KF_GP_IN);
    if (S > 1) {
        kf_gplan_scratch(gp, pname, nout * S * 4);
        kf_gk_scratch(&kk, pname, "float");
        if (arg) {
            kf_gplan_scratch(gp, qname, nout * S * 4);
            kf_gk_scratch(&kk, qname, "int");
        }
    } else {
        kf_gk_value(gp, &kk, n->out, KF_GP_OUT);
    }
    kf_buf *o = &kk.body;
    kf_buf_printf(o, "    /* row layout: %lld outputs, %lld reduced; teams of %lld, %lld per group%s */\n",
                  (long long)nout, (long long)R, (long long)ts, (long long)rpg,
                  S > 1 ? ", pass 1 of 2" : "");
    team_header(o, gp, ts, wg, arg);
    int64_t nteams = nout * S;
    kf_buf_printf(o, "    float acc = %s;\n", mop_init(m));
    if (arg) kf_buf_puts(o, "    int ai = -1;\n");
    kf_buf_printf(o, "    if (team < %lld) {\n", (long long)nteams);
    if (S > 1) {
        kf_buf_printf(o, "        const %s oi = team / %lld, c = team %% %lld;\n", gp->ix, (long long)S, (long long)S);
        kf_buf_printf(o, "        const %s r0 = c * %lld + lane;\n", gp->ix, (long long)CH);
        kf_buf_printf(o, "        const %s r1 = c * %lld + %lld < %lld ? c * %lld + %lld : %lld;\n", gp->ix,
                      (long long)CH, (long long)CH, (long long)R, (long long)CH, (long long)CH, (long long)R);
    } else {
        kf_buf_printf(o, "        const %s oi = team;\n", gp->ix);
        kf_buf_printf(o, "        const %s r0 = lane, r1 = %lld;\n", gp->ix, (long long)R);
    }
    emit_base(o, gp, G->gr, G->m, "oi", "        ");
    emit_loop(o, gp, "r0", "r1", ts, cdiv(CH, ts), load.data, m == M_SUM ? "acc" : NULL, fold.data, "        ");
    kf_buf_puts(o, "    }\n");
    team_reduce(o, m, "acc", "ai", ts, P->sg, "    ");
    kf_buf_printf(o, "    if (lane == 0 && team < %lld) {\n", (long long)nteams);
    if (S > 1) {
        kf_buf_printf(o, "        %s[team] = acc;\n", pname);
        if (arg) kf_buf_printf(o, "        %s[team] = ai;\n", qname);
    } else {
        emit_store(o, n, m, R, "team", "        ");
    }
    kf_buf_puts(o, "    }\n");
    launch1(gp, &kk, cdiv(nteams, rpg) * wg, wg);
    kf_buf_free(&load);
    kf_buf_free(&fold);
    if (S == 1) return;

    /* pass 2: team per output over its S partials */
    int64_t ts2 = kf_gpu_pow2_ceil(S) < ts ? kf_gpu_pow2_ceil(S) : ts;
    int64_t wg2 = wg;
    if (wg2 < ts2) wg2 = ts2;
    snprintf(name, sizeof name, "kf_s%d", k);
    kf_gk_begin(&kk, name);
    kf_gk_scratch(&kk, pname, "float");
    if (arg) kf_gk_scratch(&kk, qname, "int");
    kf_gk_value(gp, &kk, n->out, KF_GP_OUT);
    o = &kk.body;
    kf_buf_printf(o, "    /* pass 2 of 2: %lld partials per output, teams of %lld */\n", (long long)S, (long long)ts2);
    team_header(o, gp, ts2, wg2, arg);
    kf_buf_printf(o, "    float acc = %s;\n", mop_init(m));
    if (arg) kf_buf_puts(o, "    int ai = -1;\n");
    kf_buf_printf(o, "    if (team < %lld) {\n", (long long)nout);
    kf_buf_printf(o, "        for (int c = lane; c < %lld; c += %lld) {\n", (long long)S, (long long)ts2);
    kf_buf_printf(o, "            const float v = %s[team * %lld + c];\n            ", pname, (long long)S);
    if (arg) {
        kf_buf_printf(o, "const int vi = %s[team * %lld + c];\n            ", qname, (long long)S);
        emit_arg_merge(o, m, "acc", "ai", "v", "vi");
    } else {
        emit_merge(o, m, "acc", "v");
    }
    kf_buf_puts(o, "\n        }\n    }\n");
    team_reduce(o, m, "acc", "ai", ts2, P->sg && ts2 >= P->dsg, "    ");
    kf_buf_printf(o, "    if (lane == 0 && team < %lld) {\n", (long long)nout);
    emit_store(o, n, m, R, "team", "        ");
    kf_buf_puts(o, "    }\n");
    launch1(gp, &kk, cdiv(nout, wg2 / ts2) * wg2, wg2);
}

static void emit_reduce_col(kf_gplan *gp, int k, const kf_stage *st, const rgeom *G, const rparams *P) {
    const kf_synth *s = gp->s;
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    mop m = mop_of(n->op);
    int arg = m == M_ARGMAX || m == M_ARGMIN;
    const int64_t S = P->split, CH = P->chunk, R = G->R, nout = G->nrows;
    int64_t wg = P->wg;
    if (wg > kf_gpu_pow2_ceil(nout * S)) wg = kf_gpu_pow2_ceil(nout * S);
    char name[32], pname[16], qname[16];
    snprintf(pname, sizeof pname, "p%d", k);
    snprintf(qname, sizeof qname, "q%d", k);
    kf_buf load = {0}, fold = {0};
    emit_roff(&load, gp, G->gr, G->m, "            ");
    kf_buf_printf(&load, "            const float v = b%d[base + ro];\n", n->in[0]);
    if (arg) emit_arg_fold_seq(&fold, m, "acc", "ai", "v", "(int)r");
    else emit_merge(&fold, m, "acc", "v");

    kf_gk kk;
    snprintf(name, sizeof name, S > 1 ? "kf_s%d_part" : "kf_s%d", k);
    kf_gk_begin(&kk, name);
    kf_gk_value(gp, &kk, n->in[0], KF_GP_IN);
    if (S > 1) {
        kf_gplan_scratch(gp, pname, nout * S * 4);
        kf_gk_scratch(&kk, pname, "float");
        if (arg) {
            kf_gplan_scratch(gp, qname, nout * S * 4);
            kf_gk_scratch(&kk, qname, "int");
        }
    } else {
        kf_gk_value(gp, &kk, n->out, KF_GP_OUT);
    }
    kf_buf *o = &kk.body;
    kf_buf_printf(o, "    /* col layout: %lld outputs, %lld reduced, one item per output%s */\n", (long long)nout,
                  (long long)R, S > 1 ? " and chunk, pass 1 of 2" : "");
    kf_buf_printf(o, "    const %s t = %s;\n", gp->ix, kf_gpu_gid0(gp));
    kf_buf_printf(o, "    if (t < %lld) {\n", (long long)(nout * S));
    if (S > 1) {
        kf_buf_printf(o, "        const %s oi = t %% %lld, c = t / %lld;\n", gp->ix, (long long)nout, (long long)nout);
        kf_buf_printf(o, "        const %s r0 = c * %lld;\n", gp->ix, (long long)CH);
        kf_buf_printf(o, "        const %s r1 = r0 + %lld < %lld ? r0 + %lld : %lld;\n", gp->ix, (long long)CH,
                      (long long)R, (long long)CH, (long long)R);
    } else {
        kf_buf_printf(o, "        const %s oi = t, r0 = 0, r1 = %lld;\n", gp->ix, (long long)R);
    }
    kf_buf_printf(o, "        float acc = %s;\n", mop_init(m));
    if (arg) kf_buf_puts(o, "        int ai = -1;\n");
    emit_base(o, gp, G->gr, G->m, "oi", "        ");
    emit_loop(o, gp, "r0", "r1", 1, CH, load.data, m == M_SUM ? "acc" : NULL, fold.data, "        ");
    if (S > 1) {
        kf_buf_printf(o, "        %s[t] = acc;\n", pname);
        if (arg) kf_buf_printf(o, "        %s[t] = ai;\n", qname);
    } else {
        emit_store(o, n, m, R, "oi", "        ");
    }
    kf_buf_puts(o, "    }\n");
    launch1(gp, &kk, cdiv(nout * S, wg) * wg, wg);
    kf_buf_free(&load);
    kf_buf_free(&fold);
    if (S == 1) return;

    /* pass 2: one item per output folds its S partials in chunk order */
    wg = P->wg;
    if (wg > kf_gpu_pow2_ceil(nout)) wg = kf_gpu_pow2_ceil(nout);
    snprintf(name, sizeof name, "kf_s%d", k);
    kf_gk_begin(&kk, name);
    kf_gk_scratch(&kk, pname, "float");
    if (arg) kf_gk_scratch(&kk, qname, "int");
    kf_gk_value(gp, &kk, n->out, KF_GP_OUT);
    o = &kk.body;
    kf_buf_printf(o, "    /* pass 2 of 2: %lld partials per output */\n", (long long)S);
    kf_buf_printf(o, "    const %s oi = %s;\n", gp->ix, kf_gpu_gid0(gp));
    kf_buf_printf(o, "    if (oi < %lld) {\n", (long long)nout);
    kf_buf_printf(o, "        float acc = %s;\n", mop_init(m));
    if (arg) kf_buf_puts(o, "        int ai = -1;\n");
    kf_buf_printf(o, "        for (int c = 0; c < %lld; c++) {\n", (long long)S);
    kf_buf_printf(o, "            const float v = %s[c * %lld + oi];\n            ", pname, (long long)nout);
    if (arg) {
        kf_buf_printf(o, "const int vi = %s[c * %lld + oi];\n            ", qname, (long long)nout);
        emit_arg_merge(o, m, "acc", "ai", "v", "vi");
    } else {
        emit_merge(o, m, "acc", "v");
    }
    kf_buf_puts(o, "\n        }\n");
    emit_store(o, n, m, R, "oi", "        ");
    kf_buf_puts(o, "    }\n");
    launch1(gp, &kk, cdiv(nout, wg) * wg, wg);
}

/* ---- softmax ---- */

/* One read of the lane's elements for the row max and the sum of exp around it (the
 * online form: a new maximum rescales the sum so far). mx starts at -FLT_MAX, not -inf, so
 * a -inf element adds exp(-inf) = 0 instead of exp(NaN); an element equal to the max adds
 * 1 (so +inf, +inf adds 1, not exp(NaN)); a NaN makes the sum NaN. `roff` computes the
 * element's offset `idx` from r (may be empty). Lanes keep their own max in lmx for the team
 * combine (sum_l * exp(lmx - max)). Long per-lane runs fold blocks of 256 elements first,
 * each merged into the total, so the error does not grow with the run (as emit_loop). */
static void emit_online_maxsum(kf_buf *o, const kf_gplan *gp, int x, int64_t ts, int64_t per, const char *roff,
                               const char *idx) {
    const char *ix = gp->ix;
    kf_buf_puts(o, "    float mx = -3.402823466e+38f, sum = 0.0f;\n");
    if (per > 512) {
        kf_buf_printf(o, "    for (%s rb = r0; rb < r1; rb += %lld) {\n", ix, (long long)(ts * 256));
        kf_buf_printf(o, "        const %s re = rb + %lld < r1 ? rb + %lld : r1;\n", ix, (long long)(ts * 256),
                      (long long)(ts * 256));
        kf_buf_puts(o, "        float bm = -3.402823466e+38f, bs = 0.0f;\n");
        kf_buf_printf(o, "        for (%s r = rb; r < re; r += %lld) {\n%s            const float v = b%d[base + %s];\n", ix,
                      (long long)ts, roff, x, idx);
        kf_buf_puts(o, "            if (v > bm) { bs = bs * kf_expf(bm - v) + 1.0f; bm = v; } else bs += v == bm ? 1.0f : kf_expf(v - bm);\n        }\n");
        kf_buf_puts(o, "        if (bm > mx) { sum = sum * kf_expf(mx - bm) + bs; mx = bm; } else sum += bm == mx ? bs : bs * kf_expf(bm - mx);\n    }\n");
    } else {
        kf_buf_printf(o, "    for (%s r = r0; r < r1; r += %lld) {\n%s        const float v = b%d[base + %s];\n", ix,
                      (long long)ts, roff, x, idx);
        kf_buf_puts(o, "        if (v > mx) { sum = sum * kf_expf(mx - v) + 1.0f; mx = v; } else sum += v == mx ? 1.0f : kf_expf(v - mx);\n    }\n");
    }
    kf_buf_puts(o, "    const float lmx = mx;\n");
}

/* Elements a lane keeps with rc=1. */
static int64_t rc_per(const rparams *P, int64_t N) {
    return P->rv == 4 ? 4 * cdiv(N / 4, P->ts) : cdiv(N, P->ts);
}

/* The row index of the lane's element j with rc=1: r0 + j*ts, or with vectors element
 * j % 4 of the lane's vector j / 4, (r0 + (j / 4) * ts) * 4 + j % 4. */
static void rc_idx(char *buf, size_t cap, const kf_gplan *gp, const rparams *P) {
    if (P->rv == 4)
        snprintf(buf, cap, "(r0 + (%s)(j >> 2) * %lld) * 4 + (j & 3)", gp->ix, (long long)P->ts);
    else
        snprintf(buf, cap, "r0 + (%s)j * %lld", gp->ix, (long long)P->ts);
}

/* "float xv[PER]" filled with the lane's elements of the row (absent ones set to pad);
 * loops over j have constant bounds, so the compiler keeps xv in registers. */
static void emit_rc_load(kf_buf *o, const kf_gplan *gp, int x, int64_t per, const rparams *P, const char *pad) {
    kf_buf_printf(o, "    float xv[%lld];\n", (long long)per);
    if (P->rv == 4) {
        kf_buf_printf(o, "    for (int j4 = 0; j4 < %lld; j4++) {\n        const %s q = r0 + (%s)j4 * %lld;\n", (long long)(per / 4),
                      gp->ix, gp->ix, (long long)P->ts);
        kf_buf_printf(o, "        if (q < r1 / 4) { const $vec(float, 4) t = $vload(4, b%d, base + q * 4); "
                         "xv[4 * j4] = t.x; xv[4 * j4 + 1] = t.y; xv[4 * j4 + 2] = t.z; xv[4 * j4 + 3] = t.w; }\n", x);
        kf_buf_printf(o, "        else { xv[4 * j4] = %s; xv[4 * j4 + 1] = %s; xv[4 * j4 + 2] = %s; xv[4 * j4 + 3] = %s; }\n    }\n",
                      pad, pad, pad, pad);
        return;
    }
    char ri[96];
    rc_idx(ri, sizeof ri, gp, P);
    kf_buf_printf(o, "    for (int j = 0; j < %lld; j++) { const %s r = %s; xv[j] = r < r1 ? b%d[base + r] : %s; }\n",
                  (long long)per, gp->ix, ri, x, pad);
}

/* With vectors: store xv (already transformed) to y as 4-wide vectors. */
static void emit_rc_vstore(kf_buf *o, const kf_gplan *gp, int y, int64_t per, const rparams *P) {
    kf_buf_printf(o, "    for (int j4 = 0; j4 < %lld; j4++) {\n        const %s q = r0 + (%s)j4 * %lld;\n", (long long)(per / 4),
                  gp->ix, gp->ix, (long long)P->ts);
    kf_buf_printf(o, "        if (q < r1 / 4) $vstore(4, $vmake(float, 4, xv[4 * j4], xv[4 * j4 + 1], xv[4 * j4 + 2], "
                     "xv[4 * j4 + 3]), b%d, base + q * 4);\n    }\n", y);
}

/* Softmax with the row in registers (rc=1, one kernel): x is read once. */
static void emit_softmax_rc(kf_gplan *gp, int k, const kf_stage *st, const rgeom *G, const rparams *P) {
    const kf_node *n = &gp->s->g->nodes[st->nodes[0]];
    int x = n->in[0], y = n->out, logsm = kf_op_get(n->op)->log_out;
    const int64_t ts = P->ts, wg = P->wg, N = G->N, rows = G->O, rpg = wg / ts, per = rc_per(P, N);
    kf_gk kk;
    char name[32], ri[96];
    rc_idx(ri, sizeof ri, gp, P);
    snprintf(name, sizeof name, "kf_s%d", k);
    kf_gk_begin(&kk, name);
    kf_gk_value(gp, &kk, x, KF_GP_IN);
    kf_gk_value(gp, &kk, y, KF_GP_OUT);
    kf_buf *o = &kk.body;
    kf_buf_printf(o, "    /* row layout: %lld rows of %lld; teams of %lld, %lld per group; %lld elements a lane in registers */\n",
                  (long long)rows, (long long)N, (long long)ts, (long long)rpg, (long long)per);
    team_header(o, gp, ts, wg, 0);
    kf_buf_printf(o, "    const int valid = team < %lld;\n", (long long)rows);
    kf_buf_printf(o, "    const %s row = team, r0 = lane, r1 = valid ? %lld : 0;\n", gp->ix, (long long)N);
    kf_buf_printf(o, "    const %s base = row * %lld;\n", gp->ix, (long long)N);
    emit_rc_load(o, gp, x, per, P, "-KF_INF");
    kf_buf_printf(o, "    float mx = -KF_INF;\n    for (int j = 0; j < %lld; j++) mx = kf_nmax(mx, xv[j]);\n", (long long)per);
    team_reduce(o, M_MAX, "mx", NULL, ts, P->sg, "    ");
    /* padding is -inf: exp(-inf - mx) adds 0 unless the whole row is -inf (then NaN, as
     * the reference gives); keep padding out of the sum anyway */
    kf_buf_printf(o, "    float sum = 0.0f;\n    for (int j = 0; j < %lld; j++) { if (%s < r1) sum += %s; }\n",
                  (long long)per, ri, logsm ? "kf_expf(xv[j] - mx)" : "(xv[j] = kf_expf(xv[j] - mx))");
    team_reduce(o, M_SUM, "sum", NULL, ts, P->sg, "    ");
    if (logsm) kf_buf_puts(o, "    const float ls = kf_logf(sum);\n");
    else kf_buf_puts(o, "    const float inv = 1.0f / sum;\n");
    if (P->rv == 4) {
        kf_buf_printf(o, "    for (int j = 0; j < %lld; j++) xv[j] = %s;\n", (long long)per, logsm ? "(xv[j] - mx) - ls" : "xv[j] * inv");
        emit_rc_vstore(o, gp, y, per, P);
    } else {
        kf_buf_printf(o, "    for (int j = 0; j < %lld; j++) { const %s r = %s; if (r < r1) b%d[base + r] = %s; }\n",
                      (long long)per, gp->ix, ri, y, logsm ? "(xv[j] - mx) - ls" : "xv[j] * inv");
    }
    launch1(gp, &kk, cdiv(rows, rpg) * wg, wg);
}

static void emit_softmax_row(kf_gplan *gp, int k, const kf_stage *st, const rgeom *G, const rparams *P) {
    if (P->rc) {
        emit_softmax_rc(gp, k, st, G, P);
        return;
    }
    const kf_synth *s = gp->s;
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    int x = n->in[0], y = n->out, logsm = kf_op_get(n->op)->log_out;
    const int64_t ts = P->ts, wg = P->wg, S = P->split, CH = P->chunk, N = G->N, rows = G->O;
    const int64_t rpg = wg / ts, nteams = rows * S;
    char name[32], pname[16];
    snprintf(pname, sizeof pname, "p%d", k);
    const int64_t per = cdiv(CH, ts);

    kf_gk kk;
    snprintf(name, sizeof name, S > 1 ? "kf_s%d_part" : "kf_s%d", k);
    kf_gk_begin(&kk, name);
    kf_gk_value(gp, &kk, x, KF_GP_IN);
    if (S > 1) {
        kf_gplan_scratch(gp, pname, rows * S * 2 * 4);
        kf_gk_scratch(&kk, pname, "float");
    } else {
        kf_gk_value(gp, &kk, y, KF_GP_OUT);
    }
    kf_buf *o = &kk.body;
    kf_buf_printf(o, "    /* row layout: %lld rows of %lld; teams of %lld, %lld per group%s */\n", (long long)rows,
                  (long long)N, (long long)ts, (long long)rpg, S > 1 ? ", pass 1 of 2 (chunk max, sum)" : "");
    team_header(o, gp, ts, wg, 0);
    kf_buf_printf(o, "    const int valid = team < %lld;\n", (long long)nteams);
    if (S > 1) {
        kf_buf_printf(o, "    const %s row = team / %lld, c = team %% %lld;\n", gp->ix, (long long)S, (long long)S);
        kf_buf_printf(o, "    const %s r0 = c * %lld + lane;\n", gp->ix, (long long)CH);
        kf_buf_printf(o, "    const %s r1 = !valid ? 0 : (c * %lld + %lld < %lld ? c * %lld + %lld : %lld);\n", gp->ix,
                      (long long)CH, (long long)CH, (long long)N, (long long)CH, (long long)CH, (long long)N);
    } else {
        kf_buf_printf(o, "    const %s row = team, r0 = lane, r1 = valid ? %lld : 0;\n", gp->ix, (long long)N);
    }
    kf_buf_printf(o, "    const %s base = row * %lld;\n", gp->ix, (long long)N);
    emit_online_maxsum(o, gp, x, ts, per, "", "r");
    team_reduce(o, M_MAX, "mx", NULL, ts, P->sg, "    ");
    kf_buf_puts(o, "    if (lmx != mx) sum *= kf_expf(lmx - mx);\n");
    team_reduce(o, M_SUM, "sum", NULL, ts, P->sg, "    ");
    /* a +inf in the row makes x - max NaN for it, so the row's sum is NaN (as in the
     * reference); the online sum skipped that term (pass 2 of split > 1 meets it itself) */
    if (S == 1) kf_buf_puts(o, "    if (mx == KF_INF) sum = KF_NAN;\n");
    if (S > 1) {
        /* a chunk of -inf keeps mx = -FLT_MAX and a sum of 0: it adds 0 in pass 2 */
        kf_buf_printf(o, "    if (lane == 0 && valid) { %s[team * 2] = mx; %s[team * 2 + 1] = sum; }\n", pname, pname);
        launch1(gp, &kk, cdiv(nteams, rpg) * wg, wg);
        /* pass 2: every chunk combines its row's partials and writes its part */
        snprintf(name, sizeof name, "kf_s%d", k);
        kf_gk_begin(&kk, name);
        kf_gk_value(gp, &kk, x, KF_GP_IN);
        kf_gk_scratch(&kk, pname, "float");
        kf_gk_value(gp, &kk, y, KF_GP_OUT);
        o = &kk.body;
        kf_buf_printf(o, "    /* pass 2 of 2: rescale %lld chunk sums to the row max, write chunk */\n", (long long)S);
        team_header(o, gp, ts, wg, 0);
        kf_buf_printf(o, "    const int valid = team < %lld;\n", (long long)nteams);
        kf_buf_printf(o, "    const %s row = team / %lld, c = team %% %lld;\n", gp->ix, (long long)S, (long long)S);
        kf_buf_printf(o, "    const %s r0 = c * %lld + lane;\n", gp->ix, (long long)CH);
        kf_buf_printf(o, "    const %s r1 = !valid ? 0 : (c * %lld + %lld < %lld ? c * %lld + %lld : %lld);\n", gp->ix,
                      (long long)CH, (long long)CH, (long long)N, (long long)CH, (long long)CH, (long long)N);
        kf_buf_printf(o, "    const %s base = row * %lld;\n", gp->ix, (long long)N);
        kf_buf_puts(o, "    float mx = -KF_INF;\n");
        kf_buf_printf(o, "    for (int q = lane; valid && q < %lld; q += %lld) mx = kf_nmax(mx, %s[(row * %lld + q) * 2]);\n",
                      (long long)S, (long long)ts, pname, (long long)S);
        team_reduce(o, M_MAX, "mx", NULL, ts, P->sg, "    ");
        kf_buf_puts(o, "    float sum = 0.0f;\n");
        kf_buf_printf(o, "    for (int q = lane; valid && q < %lld; q += %lld) {\n", (long long)S, (long long)ts);
        kf_buf_printf(o, "        const float cm = %s[(row * %lld + q) * 2], cs = %s[(row * %lld + q) * 2 + 1];\n",
                      pname, (long long)S, pname, (long long)S);
        kf_buf_puts(o, "        if (cm != -KF_INF) sum += cs * kf_expf(cm - mx);\n    }\n");
        team_reduce(o, M_SUM, "sum", NULL, ts, P->sg, "    ");
    }
    if (logsm) {
        kf_buf_puts(o, "    const float ls = kf_logf(sum);\n");
        kf_buf_printf(o, "    for (%s r = r0; r < r1; r += %lld) b%d[base + r] = (b%d[base + r] - mx) - ls;\n", gp->ix,
                      (long long)ts, y, x);
    } else {
        kf_buf_puts(o, "    const float inv = 1.0f / sum;\n");
        kf_buf_printf(o, "    for (%s r = r0; r < r1; r += %lld) b%d[base + r] = kf_expf(b%d[base + r] - mx) * inv;\n",
                      gp->ix, (long long)ts, y, x);
    }
    launch1(gp, &kk, cdiv(nteams, rpg) * wg, wg);
}

/* logsumexp (a composite with the log-sum-exp combiner) in the row layout: the row max
 * and the sum of exp around it from one read, as softmax's first pass; the result is
 * log(sum) + max, NaN when the row holds a NaN, +inf when it holds +inf, -inf when every
 * element is -inf (torch's rules; the record's reference). split > 1: pass 1 writes each
 * chunk's (max, sum) pair, pass 2 merges a row's pairs, one work-item per row. */
static void emit_lse_row(kf_gplan *gp, int k, const kf_stage *st, const rgeom *G, const rparams *P) {
    const kf_node *n = &gp->s->g->nodes[st->nodes[0]];
    const int64_t ts = P->ts, wg = P->wg, S = P->split, CH = P->chunk, R = G->R, nout = G->nrows;
    const int64_t rpg = wg / ts, nteams = nout * S;
    const char *ix = gp->ix;
    static const char lse[] = "(sum != sum ? sum : mx == KF_INF ? mx : kf_logf(sum) + mx)";
    char name[32], pname[16];
    snprintf(pname, sizeof pname, "p%d", k);
    kf_buf roff = {0};
    emit_roff(&roff, gp, G->gr, G->m, "            ");
    kf_gk kk;
    snprintf(name, sizeof name, S > 1 ? "kf_s%d_part" : "kf_s%d", k);
    kf_gk_begin(&kk, name);
    kf_gk_value(gp, &kk, n->in[0], KF_GP_IN);
    if (S > 1) {
        kf_gplan_scratch(gp, pname, nteams * 2 * 4);
        kf_gk_scratch(&kk, pname, "float");
    } else {
        kf_gk_value(gp, &kk, n->out, KF_GP_OUT);
    }
    kf_buf *o = &kk.body;
    kf_buf_printf(o, "    /* logsumexp, row layout: %lld outputs, %lld reduced; teams of %lld, %lld per group%s */\n",
                  (long long)nout, (long long)R, (long long)ts, (long long)rpg,
                  S > 1 ? ", pass 1 of 2 (chunk max, sum)" : "");
    team_header(o, gp, ts, wg, 0);
    kf_buf_printf(o, "    const int valid = team < %lld;\n", (long long)nteams);
    if (S > 1) {
        kf_buf_printf(o, "    const %s oi = valid ? team / %lld : 0, c = team %% %lld;\n", ix, (long long)S, (long long)S);
        kf_buf_printf(o, "    const %s r0 = c * %lld + lane;\n", ix, (long long)CH);
        kf_buf_printf(o, "    const %s r1 = !valid ? 0 : (c * %lld + %lld < %lld ? c * %lld + %lld : %lld);\n", ix,
                      (long long)CH, (long long)CH, (long long)R, (long long)CH, (long long)CH, (long long)R);
    } else {
        kf_buf_printf(o, "    const %s oi = valid ? team : 0, r0 = lane, r1 = valid ? %lld : 0;\n", ix, (long long)R);
    }
    emit_base(o, gp, G->gr, G->m, "oi", "    ");
    emit_online_maxsum(o, gp, n->in[0], ts, cdiv(CH, ts), roff.data, "ro");
    kf_buf_free(&roff);
    team_reduce(o, M_MAX, "mx", NULL, ts, P->sg, "    ");
    kf_buf_puts(o, "    if (lmx != mx) sum *= kf_expf(lmx - mx);\n");
    team_reduce(o, M_SUM, "sum", NULL, ts, P->sg, "    ");
    if (S > 1)
        kf_buf_printf(o, "    if (lane == 0 && valid) { %s[team * 2] = mx; %s[team * 2 + 1] = sum; }\n", pname, pname);
    else
        kf_buf_printf(o, "    if (lane == 0 && valid) b%d[team] = %s;\n", n->out, lse);
    launch1(gp, &kk, cdiv(nteams, rpg) * wg, wg);
    if (S == 1) return;

    snprintf(name, sizeof name, "kf_s%d", k);
    kf_gk_begin(&kk, name);
    kf_gk_scratch(&kk, pname, "float");
    kf_gk_value(gp, &kk, n->out, KF_GP_OUT);
    o = &kk.body;
    kf_buf_printf(o, "    /* pass 2 of 2: merge %lld (max, sum) pairs per output, one work-item each */\n", (long long)S);
    kf_buf_printf(o, "    const %s oi = %s$grp(0) * 256 + $lid(0);\n", ix, strcmp(ix, "long") == 0 ? "(long)" : "");
    kf_buf_printf(o, "    if (oi < %lld) {\n        float mx = -3.402823466e+38f, sum = 0.0f;\n", (long long)nout);
    kf_buf_printf(o, "        for (int c = 0; c < %lld; c++) {\n", (long long)S);
    kf_buf_printf(o, "            const float cm = %s[(oi * %lld + c) * 2], cs = %s[(oi * %lld + c) * 2 + 1];\n", pname,
                  (long long)S, pname, (long long)S);
    kf_buf_puts(o, "            if (cm > mx) { sum = sum * kf_expf(mx - cm) + cs; mx = cm; } else sum += cm == mx ? cs : cs * kf_expf(cm - mx);\n");
    kf_buf_printf(o, "        }\n        b%d[oi] = %s;\n    }\n", n->out, lse);
    launch1(gp, &kk, cdiv(nout, 256) * 256, 256);
}

static void emit_softmax_col(kf_gplan *gp, int k, const kf_stage *st, const rgeom *G, const rparams *P) {
    const kf_synth *s = gp->s;
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    int x = n->in[0], y = n->out, logsm = kf_op_get(n->op)->log_out;
    const int64_t O = G->O, N = G->N, I = G->I, cols = O * I;
    int64_t wg = P->wg;
    if (wg > kf_gpu_pow2_ceil(cols)) wg = kf_gpu_pow2_ceil(cols);
    char name[32], l1[160], l2[160];
    snprintf(name, sizeof name, "kf_s%d", k);
    kf_gk kk;
    kf_gk_begin(&kk, name);
    kf_gk_value(gp, &kk, x, KF_GP_IN);
    kf_gk_value(gp, &kk, y, KF_GP_OUT);
    kf_buf *o = &kk.body;
    kf_buf_printf(o, "    /* col layout: %lld x [%lld] x %lld, one item per column */\n", (long long)O, (long long)N,
                  (long long)I);
    kf_buf_printf(o, "    const %s t = %s;\n", gp->ix, kf_gpu_gid0(gp));
    kf_buf_printf(o, "    if (t < %lld) {\n", (long long)cols);
    kf_buf_printf(o, "        const %s base = (t / %lld) * %lld + t %% %lld;\n", gp->ix, (long long)I, (long long)(N * I),
                  (long long)I);
    snprintf(l1, sizeof l1, "            const float v = b%d[base + r * %lld];\n", x, (long long)I);
    snprintf(l2, sizeof l2, "            const float v = kf_expf(b%d[base + r * %lld] - mx);\n", x, (long long)I);
    kf_buf_puts(o, "        float mx = -KF_INF;\n");
    emit_loop(o, gp, "0", "N_", 1, N, l1, NULL, "mx = kf_nmax(mx, v);", "        ");
    kf_buf_puts(o, "        float sum = 0.0f;\n");
    emit_loop(o, gp, "0", "N_", 1, N, l2, "sum", NULL, "        ");
    if (logsm) {
        kf_buf_puts(o, "        const float ls = kf_logf(sum);\n");
        kf_buf_printf(o, "        for (%s r = 0; r < N_; r++) b%d[base + r * %lld] = (b%d[base + r * %lld] - mx) - ls;\n",
                      gp->ix, y, (long long)I, x, (long long)I);
    } else {
        kf_buf_puts(o, "        const float inv = 1.0f / sum;\n");
        kf_buf_printf(o, "        for (%s r = 0; r < N_; r++) b%d[base + r * %lld] = kf_expf(b%d[base + r * %lld] - mx) * inv;\n",
                      gp->ix, y, (long long)I, x, (long long)I);
    }
    kf_buf_puts(o, "    }\n");
    /* N_ is the axis length; a local constant keeps the loop headers short */
    kf_buf body = {0};
    kf_buf_printf(&body, "    const %s N_ = %lld;\n%s", gp->ix, (long long)N, o->data);
    kf_buf_free(o);
    kk.body = body;
    launch1(gp, &kk, cdiv(cols, wg) * wg, wg);
}

/* ---- norms ---- */

/* How a norm's weight/bias is indexed (as the interpreter's ip_affine_setup): "0" for a
 * single value, "r" per normalised position, or through the broadcast strides over x. */
static void affine_index(const kf_gplan *gp, int v, const kf_shape *xs, int64_t N, kf_buf *decl, char *idx,
                         size_t cap) {
    const kf_shape *ws = &gp->s->g->values[v].shape;
    int64_t wn = kf_shape_numel(ws);
    if (wn == 1) { snprintf(idx, cap, "0"); return; }
    int lead = 0;
    while (lead < ws->rank && ws->d[lead] == 1) lead++;
    int kd = ws->rank - lead, match = wn == N && kd <= xs->rank;
    for (int j = 0; match && j < kd; j++) match = ws->d[lead + j] == xs->d[xs->rank - kd + j];
    if (match) { snprintf(idx, cap, "r"); return; }
    /* general broadcast: decompose the flat element e = row * N + r over x's dims */
    int64_t run = 1, str[KF_MAX_DIMS];
    for (int j = xs->rank - 1; j >= 0; j--) {
        int wj = j - (xs->rank - ws->rank);
        str[j] = (wj < 0 || ws->d[wj] == 1) ? 0 : run;
        if (wj >= 0) run *= ws->d[wj];
    }
    kf_buf_printf(decl, "            %s w%d_ = 0; { %s e = base + r;\n", gp->ix, v, gp->ix);
    for (int j = xs->rank - 1; j >= 0; j--) {
        if (str[j]) kf_buf_printf(decl, "              w%d_ += (e %% %lld) * %lld;\n", v, (long long)xs->d[j], (long long)str[j]);
        kf_buf_printf(decl, "              e = e / %lld;\n", (long long)xs->d[j]);
    }
    kf_buf_printf(decl, "              (void)e; }\n");
    snprintf(idx, cap, "w%d_", v);
}

static void emit_norm(kf_gplan *gp, int k, const kf_stage *st, const rgeom *G, const rparams *P) {
    const kf_synth *s = gp->s;
    const kf_graph *g = s->g;
    const kf_node *n = &g->nodes[st->nodes[0]];
    int x = n->in[0], y = n->out, layer = kf_op_get(n->op)->centered;
    int w = n->nin > 1 ? n->in[1] : -1, b = layer && n->nin > 2 ? n->in[2] : -1;
    const int64_t ts = P->ts, wg = P->wg, S = P->split, CH = P->chunk, N = G->N, rows = G->O;
    const int64_t rpg = wg / ts, nteams = rows * S, per = P->rc ? rc_per(P, N) : cdiv(CH, ts);
    char name[32], pname[16], eps[64], l[192], ri[96];
    rc_idx(ri, sizeof ri, gp, P);
    snprintf(pname, sizeof pname, "p%d", k);
    kf_synth_float_lit(n->attr.eps, eps, sizeof eps);

    kf_gk kk;
    snprintf(name, sizeof name, S > 1 ? "kf_s%d_part" : "kf_s%d", k);
    kf_gk_begin(&kk, name);
    kf_gk_value(gp, &kk, x, KF_GP_IN);
    if (S > 1) {
        kf_gplan_scratch(gp, pname, nteams * 2 * 4);
        kf_gk_scratch(&kk, pname, "float");
    } else {
        if (w >= 0) kf_gk_value(gp, &kk, w, KF_GP_IN);
        if (b >= 0 && b != w) kf_gk_value(gp, &kk, b, KF_GP_IN);
        kf_gk_value(gp, &kk, y, KF_GP_OUT);
    }
    kf_buf *o = &kk.body;
    kf_buf_printf(o, "    /* %s: %lld rows of %lld; teams of %lld, %lld per group%s */\n", kf_op_get(n->op)->name,
                  (long long)rows, (long long)N, (long long)ts, (long long)rpg,
                  S > 1 ? ", pass 1 of 2 (chunk mean, M2)" : "");
    team_header(o, gp, ts, wg, 0);
    kf_buf_printf(o, "    const int valid = team < %lld;\n", (long long)nteams);
    if (S > 1) {
        kf_buf_printf(o, "    const %s row = team / %lld, c = team %% %lld;\n", gp->ix, (long long)S, (long long)S);
        kf_buf_printf(o, "    const %s c0 = c * %lld, r0 = c0 + lane;\n", gp->ix, (long long)CH);
        kf_buf_printf(o, "    const %s r1 = !valid ? 0 : (c0 + %lld < %lld ? c0 + %lld : %lld);\n", gp->ix, (long long)CH,
                      (long long)N, (long long)CH, (long long)N);
        if (layer)
            kf_buf_printf(o, "    const float cnt = (float)(c0 + %lld < %lld ? %lld : %lld - c0);\n", (long long)CH,
                          (long long)N, (long long)CH, (long long)N);
    } else {
        kf_buf_printf(o, "    const %s row = team, r0 = lane, r1 = valid ? %lld : 0;\n", gp->ix, (long long)N);
        if (layer) kf_buf_printf(o, "    const float cnt = %lld.0f;\n", (long long)N);
    }
    kf_buf_printf(o, "    const %s base = row * %lld;\n", gp->ix, (long long)N);
    kf_buf_puts(o, "    float mean = 0.0f;\n");
    if (P->rc) {
        /* the row in registers (S == 1): x read once; padding is 0 and is kept out of M2 */
        emit_rc_load(o, gp, x, per, P, "0.0f");
        if (layer) {
            kf_buf_printf(o, "    float sum = 0.0f;\n    for (int j = 0; j < %lld; j++) sum += xv[j];\n", (long long)per);
            team_reduce(o, M_SUM, "sum", NULL, ts, P->sg, "    ");
            kf_buf_puts(o, "    mean = sum / cnt;\n");
        }
        kf_buf_printf(o, "    float sq = 0.0f;\n    for (int j = 0; j < %lld; j++) { if (%s < r1) { const float dv = xv[j] - mean; sq += dv * dv; } }\n",
                      (long long)per, ri);
        team_reduce(o, M_SUM, "sq", NULL, ts, P->sg, "    ");
    } else if (layer) {
        /* one read of x: the lane's elements in blocks of 8 (a block's mean and M2 exact,
         * from registers), blocks merged into the lane's (n, mean, M2), lanes combined by
         * the parallel-axis formula: sum of n mean, then sum of M2 + n (mean - row mean)^2 */
        kf_buf_puts(o, "    float nacc = 0.0f, sq = 0.0f;\n");
        kf_buf_printf(o, "    for (%s rb = r0; rb < r1; rb += %lld) {\n", gp->ix, (long long)(8 * ts));
        kf_buf_puts(o, "        float xb[8], bs = 0.0f;\n        int bn = 0;\n");
        kf_buf_printf(o, "        for (int j = 0; j < 8; j++) {\n            const %s r = rb + j * %lld;\n", gp->ix,
                      (long long)ts);
        kf_buf_printf(o, "            xb[j] = r < r1 ? b%d[base + r] : 0.0f;\n", x);
        kf_buf_puts(o, "            if (r < r1) { bs += xb[j]; bn++; }\n        }\n");
        kf_buf_puts(o, "        const float bm = bs / (float)bn;\n        float bq = 0.0f;\n");
        kf_buf_puts(o, "        for (int j = 0; j < 8; j++) { const float d = xb[j] - bm; if (j < bn) bq += d * d; }\n");
        kf_buf_puts(o, "        const float nn = nacc + (float)bn, dl = bm - mean;\n");
        kf_buf_puts(o, "        mean += dl * ((float)bn / nn);\n        sq += bq + dl * dl * (nacc * (float)bn / nn);\n");
        kf_buf_puts(o, "        nacc = nn;\n    }\n");
        kf_buf_puts(o, "    float sum = mean * nacc;\n");
        team_reduce(o, M_SUM, "sum", NULL, ts, P->sg, "    ");
        kf_buf_puts(o, "    { const float dm = mean - sum / cnt; sq += nacc * dm * dm; }\n");
        kf_buf_puts(o, "    mean = sum / cnt;\n");
        team_reduce(o, M_SUM, "sq", NULL, ts, P->sg, "    ");
    }
    if (!P->rc && !layer) {
        snprintf(l, sizeof l, "        const float dv = b%d[base + r] - mean;\n        const float v = dv * dv;\n", x);
        kf_buf_puts(o, "    float sq = 0.0f;\n");
        emit_loop(o, gp, "r0", "r1", ts, per, l, "sq", NULL, "    ");
        team_reduce(o, M_SUM, "sq", NULL, ts, P->sg, "    ");
    }
    if (S > 1) {
        kf_buf_printf(o, "    if (lane == 0 && valid) { %s[team * 2] = mean; %s[team * 2 + 1] = sq; }\n", pname, pname);
        launch1(gp, &kk, cdiv(nteams, rpg) * wg, wg);
        snprintf(name, sizeof name, "kf_s%d", k);
        kf_gk_begin(&kk, name);
        kf_gk_value(gp, &kk, x, KF_GP_IN);
        kf_gk_scratch(&kk, pname, "float");
        if (w >= 0) kf_gk_value(gp, &kk, w, KF_GP_IN);
        if (b >= 0 && b != w) kf_gk_value(gp, &kk, b, KF_GP_IN);
        kf_gk_value(gp, &kk, y, KF_GP_OUT);
        o = &kk.body;
        kf_buf_printf(o, "    /* pass 2 of 2: combine %lld chunk (mean, M2) pairs, write chunk */\n", (long long)S);
        team_header(o, gp, ts, wg, 0);
        kf_buf_printf(o, "    const int valid = team < %lld;\n", (long long)nteams);
        kf_buf_printf(o, "    const %s row = team / %lld, c = team %% %lld;\n", gp->ix, (long long)S, (long long)S);
        kf_buf_printf(o, "    const %s r0 = c * %lld + lane;\n", gp->ix, (long long)CH);
        kf_buf_printf(o, "    const %s r1 = !valid ? 0 : (c * %lld + %lld < %lld ? c * %lld + %lld : %lld);\n", gp->ix,
                      (long long)CH, (long long)CH, (long long)N, (long long)CH, (long long)CH, (long long)N);
        kf_buf_printf(o, "    const %s base = row * %lld;\n", gp->ix, (long long)N);
        /* the row mean from the chunk sums, then M2 = sum of chunk M2 + n_c (mean_c - mean)^2 */
        const char *cntq = "(float)(q * CH_ + CH_ < N_ ? CH_ : N_ - q * CH_)";
        kf_buf_printf(o, "    const %s CH_ = %lld, N_ = %lld;\n", gp->ix, (long long)CH, (long long)N);
        kf_buf_puts(o, "    float mean = 0.0f;\n");
        if (layer) {
            kf_buf_puts(o, "    float sum = 0.0f;\n");
            kf_buf_printf(o, "    for (int q = lane; valid && q < %lld; q += %lld) sum += %s[(row * %lld + q) * 2] * %s;\n",
                          (long long)S, (long long)ts, pname, (long long)S, cntq);
            team_reduce(o, M_SUM, "sum", NULL, ts, P->sg, "    ");
            kf_buf_printf(o, "    mean = sum / %lld.0f;\n", (long long)N);
        }
        kf_buf_puts(o, "    float sq = 0.0f;\n");
        kf_buf_printf(o, "    for (int q = lane; valid && q < %lld; q += %lld) {\n", (long long)S, (long long)ts);
        kf_buf_printf(o, "        const float dm = %s[(row * %lld + q) * 2] - mean;\n", pname, (long long)S);
        kf_buf_printf(o, "        sq += %s[(row * %lld + q) * 2 + 1] + %s * dm * dm;\n    }\n", pname, (long long)S,
                      layer ? cntq : "0.0f");
        team_reduce(o, M_SUM, "sq", NULL, ts, P->sg, "    ");
    }
    kf_buf_printf(o, "    const float rstd = 1.0f / kf_sqrtf(sq / %lld.0f + %s);\n", (long long)N, eps);
    kf_buf wdecl = {0};
    char wi[16] = "", bi[16] = "";
    const kf_shape *xs = &g->values[x].shape;
    if (w >= 0) affine_index(gp, w, xs, N, &wdecl, wi, sizeof wi);
    if (b >= 0 && b != w) affine_index(gp, b, xs, N, &wdecl, bi, sizeof bi);
    else if (b >= 0) snprintf(bi, sizeof bi, "%s", wi);
    if (P->rc)
        kf_buf_printf(o, "    for (int j = 0; j < %lld; j++) {\n        const %s r = %s;\n        if (r >= r1) %s;\n",
                      (long long)per, gp->ix, ri, P->rv == 4 ? "continue" : "break");
    else
        kf_buf_printf(o, "    for (%s r = r0; r < r1; r += %lld) {\n", gp->ix, (long long)ts);
    if (wdecl.data) kf_buf_puts(o, wdecl.data);
    if (P->rc && P->rv == 4) kf_buf_puts(o, "        xv[j] = (xv[j] - mean) * rstd");
    else if (P->rc) kf_buf_printf(o, "        b%d[base + r] = (xv[j] - mean) * rstd", y);
    else kf_buf_printf(o, "        b%d[base + r] = (b%d[base + r] - mean) * rstd", y, x);
    if (w >= 0) kf_buf_printf(o, " * b%d[%s]", w, wi);
    if (b >= 0) kf_buf_printf(o, " + b%d[%s]", b, bi);
    kf_buf_puts(o, ";\n    }\n");
    if (P->rc && P->rv == 4) emit_rc_vstore(o, gp, y, per, P);
    kf_buf_free(&wdecl);
    launch1(gp, &kk, cdiv(nteams, rpg) * wg, wg);
}

void kf_gpu_reduce_emit(kf_gplan *gp, int k, const kf_stage *st, const kf_point *p) {
    rgeom G;
    geometry(gp->s, st, &G);
    rparams P;
    read_params(gp, st, p, &G, &P);
    switch (st->kind) {
    case KF_STAGE_REDUCE:
        if (kf_op_get(gp->s->g->nodes[st->nodes[0]].op)->combiner == KF_COMB_LOGSUMEXP) emit_lse_row(gp, k, st, &G, &P);
        else if (G.copy) reduce_copy(gp, k, st, &P);
        else if (G.col) emit_reduce_col(gp, k, st, &G, &P);
        else emit_reduce_row(gp, k, st, &G, &P);
        break;
    case KF_STAGE_SOFTMAX:
        if (G.col) emit_softmax_col(gp, k, st, &G, &P);
        else emit_softmax_row(gp, k, st, &G, &P);
        break;
    default: emit_norm(gp, k, st, &G, &P); break;
    }
}
