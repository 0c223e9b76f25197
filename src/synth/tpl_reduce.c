/*
 * Reduction-family templates: axis reductions (sum, mean, max, min, prod, argmax, argmin),
 * softmax / log_softmax over one axis, and layer_norm / rms_norm over trailing axes, each
 * as one fused kernel.
 *
 * The input's dims are canonicalised into alternating kept/reduced groups (size-1 dims
 * dropped, neighbours of the same kind merged). Two layouts follow:
 *   row: the innermost group is reduced, so each output reduces contiguous rows with the
 *        prelude's vector helpers (several accumulators, blocks summed in double);
 *   col: the innermost group is kept, so a block of neighbouring outputs is accumulated
 *        together across the reduced rows (vectorised over the kept dim).
 * Softmax and norms work row by row (rows stay in cache between their passes) or, for a
 * softmax over a non-innermost axis, in the col layout.
 *
 * Parameters: threads (all), block (col layouts: outputs per task).
 */
#include "synth_int.h"

#include <stdio.h>
#include <string.h>

/* The node's combiner (the op's record says which; no op is named here). */
static inline kf_combiner comb(const kf_node *n) { return kf_op_get(n->op)->combiner; }


/* Canonical groups of shape sh under reduced-axes mask; see synth_int.h. */
int kf_synth_canon(const kf_shape *sh, uint32_t mask, rgroup *gr) {
    int64_t stride[KF_MAX_DIMS], run = 1;
    for (int j = sh->rank - 1; j >= 0; j--) { stride[j] = run; run *= sh->d[j]; }
    int m = 0;
    for (int j = 0; j < sh->rank; j++) {
        if (sh->d[j] == 1) continue;
        int red = (mask >> j) & 1u;
        if (m > 0 && gr[m - 1].reduced == red) {
            gr[m - 1].size *= sh->d[j];
            gr[m - 1].stride = stride[j];
        } else {
            gr[m].size = sh->d[j];
            gr[m].stride = stride[j];
            gr[m].reduced = red;
            m++;
        }
    }
    return m;
}

static int is_col_layout(const kf_synth *s, const kf_stage *st) {
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    rgroup gr[KF_MAX_DIMS];
    int m = kf_synth_canon(&s->g->values[n->in[0]].shape, n->attr.axes, gr);
    return m > 0 && !gr[m - 1].reduced;
}

static int64_t softmax_inner(const kf_graph *g, const kf_node *n, int64_t *N) {
    int64_t O, I;
    kf_synth_axis_split(&g->values[n->in[0]].shape, n->attr.axes, &O, N, &I);
    return I;
}

int kf_synth_reduce_prologue_ok(const kf_synth *s, const kf_stage *st) {
    const kf_graph *g = s->g;
    const kf_node *n = &g->nodes[st->nodes[0]];
    const kf_shape *sh = &g->values[n->in[0]].shape;
    if (st->kind == KF_STAGE_SOFTMAX) { /* row layout only: its passes read the staged row */
        int64_t N, I = softmax_inner(g, n, &N);
        return I == 1 && N <= KF_PRO_MAX;
    }
    if (st->kind == KF_STAGE_NORM) {
        int64_t N = 1;
        for (int j = 0; j < sh->rank; j++)
            if ((n->attr.axes >> j) & 1u) N *= sh->d[j];
        return N <= KF_PRO_MAX;
    }
    rgroup gr[KF_MAX_DIMS];
    int m = kf_synth_canon(sh, n->attr.axes, gr);
    int64_t count = 1;
    for (int j = 0; j < m; j++)
        if (gr[j].reduced) count *= gr[j].size;
    if (m == 0 || count == 1) return 0;
    if (!gr[m - 1].reduced) return 1; /* col layout: runs of at most block (<= 16384) */
    /* row layout: long rows are reduced in chunks, except argmax/argmin's two passes */
    int isarg = kf_op_is_arg(kf_op_get(n->op));
    return !isarg || gr[m - 1].size <= KF_PRO_MAX;
}

/* Declare `const float *restrict NAME` pointing at LEN (at most maxlen) elements of the
 * stage's input from flat offset OFF: the input buffer itself, or, with a prologue, a
 * stack buffer the fused elementwise producer fills. */
static void emit_src(const kf_synth *s, const kf_stage *st, kf_buf *o, const char *name,
                     const char *off, const char *len, int64_t maxlen, const char *ind) {
    const kf_graph *g = s->g;
    const kf_node *n = &g->nodes[st->nodes[0]];
    if (!st->prologue) {
        kf_buf_printf(o, "%sconst float *restrict %s = b%d + (%s);\n", ind, name, n->in[0], off);
        return;
    }
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, &s->st[st->prologue - 1], &lay);
    kf_buf_printf(o, "%sfloat %s_pro[%lld] __attribute__((aligned(64)));\n", ind, name,
                  (long long)maxlen);
    kf_buf_printf(o, "%skf_pro%d(%s, %s, %s_pro", ind, st->index, off, len, name);
    for (int r = 0; r < lay.nreads; r++) kf_buf_printf(o, ", b%d", lay.v[r]);
    kf_buf_puts(o, ");\n");
    kf_buf_printf(o, "%sconst float *restrict %s = %s_pro;\n", ind, name, name);
}

/* Rows short enough to stage in a stack buffer (softmax's streaming-store path). */
#define KF_STAGE_ROW_MAX 8192

/* Row layout with a reduced group outside the row (groups alternate, so m >= 3): the
 * outputs can be walked in blocks (parameter oblock). Not argmax/argmin (one axis). */
static int row_blockable(const kf_synth *s, const kf_stage *st) {
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    if (st->kind != KF_STAGE_REDUCE || kf_op_is_arg(kf_op_get(n->op))) return 0;
    rgroup gr[KF_MAX_DIMS];
    int m = kf_synth_canon(&s->g->values[n->in[0]].shape, n->attr.axes, gr);
    return m >= 3 && gr[m - 1].reduced;
}

static long row_oblock(const kf_synth *s, const kf_stage *st, const kf_point *p) {
    if (!row_blockable(s, st)) return 1;
    char full[48];
    snprintf(full, sizeof full, "%soblock", st->prefix);
    return kf_point_get(&s->space, p, full, 1);
}

void kf_synth_reduce_params(kf_synth *s, kf_stage *st) {
    static const long blocks[] = {64, 256, 1024, 4096, 16384};
    static const long nt[] = {0, 1};
    int col = is_col_layout(s, st);
    if ((st->kind == KF_STAGE_REDUCE || st->kind == KF_STAGE_SOFTMAX) && col)
        kf_tpl_add_param(&s->space, st->prefix, "block", KF_ROLE_BLOCK, blocks, 5, 1);
    if (row_blockable(s, st)) {
        static const long obs[] = {1, 8, 64};
        kf_tpl_add_param(&s->space, st->prefix, "oblock", KF_ROLE_NONE, obs, 3, 2);
    }
    /* row softmax and norms write a full-size output once: streaming stores avoid reading
     * the output lines before writing them, which pays when they do not fit in cache */
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    int64_t bytes = kf_shape_numel(&s->g->values[n->out].shape) * 4;
    int big = s->dev.l3_bytes > 0 && bytes > s->dev.l3_bytes;
    int rowlen_ok = 1;
    if (st->kind == KF_STAGE_SOFTMAX) {
        const kf_shape *sh = &s->g->values[n->in[0]].shape;
        int ax = 0;
        while (ax < sh->rank && !((n->attr.axes >> ax) & 1u)) ax++;
        rowlen_ok = ax == sh->rank - 1 && sh->d[ax] <= KF_STAGE_ROW_MAX;
    }
    if ((st->kind == KF_STAGE_NORM || st->kind == KF_STAGE_SOFTMAX) && rowlen_ok && !st->epilogue)
        kf_tpl_add_param(&s->space, st->prefix, "nt", KF_ROLE_STREAM, nt, 2, big ? 1 : 0);
}

static void omp_for(kf_buf *o, long threads, int64_t tasks, const char *ind) {
    if (threads > 1 && tasks > 1)
        kf_buf_printf(o, "%s#pragma omp parallel for schedule(static) num_threads(%ld)\n", ind, threads);
}

/* Emit code decomposing "o" over the kept groups (all but skip) into offset "base". */
static void emit_decompose(kf_buf *o, const rgroup *gr, int m, int skip, const char *ind) {
    kf_buf_printf(o, "%slong base = 0;\n%s{ long rem = oi, idx;\n", ind, ind);
    for (int j = m - 1; j >= 0; j--) {
        if (gr[j].reduced || j == skip) continue;
        kf_buf_printf(o, "%s  idx = rem %% %lldL; rem /= %lldL; base += idx * %lldL;\n", ind,
                      (long long)gr[j].size, (long long)gr[j].size, (long long)gr[j].stride);
    }
    kf_buf_printf(o, "%s  (void)rem; (void)idx; }\n", ind);
}

/* Open nested loops over the reduced groups except skip; offset "roff". Returns depth. */
static int emit_reduce_loops(kf_buf *o, const rgroup *gr, int m, int skip, const char *ind) {
    int depth = 0;
    kf_buf_printf(o, "%slong roff0 = 0;\n", ind);
    for (int j = 0; j < m; j++) {
        if (!gr[j].reduced || j == skip) continue;
        kf_buf_printf(o, "%sfor (long q%d = 0; q%d < %lldL; q%d++) { const long roff%d = roff%d + q%d * %lldL;\n",
                      ind, j, j, (long long)gr[j].size, j, depth + 1, depth, j,
                      (long long)gr[j].stride);
        depth++;
    }
    kf_buf_printf(o, "%sconst long roff = roff%d;\n", ind, depth);
    return depth;
}

/* Accumulate one row (at base + roff, rowlen long) into acc (and arg for argmax/argmin),
 * through the fused producer when the stage has one, in chunks when the row is long. */
static void emit_row_body(const kf_synth *s, const kf_stage *st, kf_buf *o, int64_t rowlen,
                          int wantmax, const char *ind) {
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    if (st->prologue && rowlen > KF_PRO_MAX) {
        /* a long row through the fused producer, a chunk at a time (not argmax/argmin) */
        kf_buf_printf(o, "%sfor (long c0 = 0; c0 < %lldL; c0 += %dL) {\n", ind, (long long)rowlen, KF_PRO_MAX);
        kf_buf_printf(o, "%s  const long cn = %lldL - c0 < %dL ? %lldL - c0 : %dL;\n", ind,
                      (long long)rowlen, KF_PRO_MAX, (long long)rowlen, KF_PRO_MAX);
        char ind2[32];
        snprintf(ind2, sizeof ind2, "%s  ", ind);
        emit_src(s, st, o, "row", "base + roff + c0", "cn", KF_PRO_MAX, ind2);
        switch (comb(n)) {
        case KF_COMB_SUM: kf_buf_printf(o, "%s  acc += kf_vsum(row, cn);\n", ind); break;
        case KF_COMB_PROD: kf_buf_printf(o, "%s  for (long j = 0; j < cn; j++) acc *= (double)row[j];\n", ind); break;
        default:
            kf_buf_printf(o, "%s  { float v = kf_vextreme(row, cn, %d); acc = (v %s acc || v != v) ? v : acc; }\n",
                          ind, wantmax, wantmax ? ">" : "<");
            break;
        }
        kf_buf_printf(o, "%s}\n", ind);
        return;
    }
    char len[32];
    snprintf(len, sizeof len, "%lldL", (long long)rowlen);
    emit_src(s, st, o, "row", "base + roff", len, rowlen, ind);
    switch (comb(n)) {
    case KF_COMB_SUM: kf_buf_printf(o, "%sacc += kf_vsum(row, %lldL);\n", ind, (long long)rowlen); break;
    case KF_COMB_PROD:
        kf_buf_printf(o, "%sfor (long j = 0; j < %lldL; j++) acc *= (double)row[j];\n", ind, (long long)rowlen);
        break;
    case KF_COMB_MAX:
    case KF_COMB_MIN:
        kf_buf_printf(o, "%s{ float v = kf_vextreme(row, %lldL, %d); acc = (v %s acc || v != v) ? v : acc; }\n",
                      ind, (long long)rowlen, wantmax, wantmax ? ">" : "<");
        break;
    default:
        /* single reduced axis: find the extreme with vectors, then its first position */
        kf_buf_printf(o, "%sacc = kf_vextreme(row, %lldL, %d);\n", ind, (long long)rowlen, wantmax);
        kf_buf_printf(o, "%sif (acc != acc) { for (long j = 0; j < %lldL; j++) if (row[j] != row[j]) { arg = j; break; } }\n",
                      ind, (long long)rowlen);
        kf_buf_printf(o, "%selse { for (long j = 0; j < %lldL; j++) if (row[j] == acc) { arg = j; break; } }\n",
                      ind, (long long)rowlen);
        break;
    }
}

static void emit_row_store(kf_buf *o, const kf_node *n, int y, int64_t count, const char *acc,
                           const char *ind) {
    if (kf_op_get(n->op)->mean) kf_buf_printf(o, "%sb%d[oi] = (float)(%s / %lld.0);\n", ind, y, acc, (long long)count);
    else kf_buf_printf(o, "%sb%d[oi] = (float)%s;\n", ind, y, acc);
}

static void emit_reduce(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *o) {
    const kf_graph *g = s->g;
    const kf_node *n = &g->nodes[st->nodes[0]];
    int x = n->in[0], y = n->out;
    long threads = kf_tpl_get(&s->space, p, st->prefix, "threads");
    rgroup gr[KF_MAX_DIMS];
    int m = kf_synth_canon(&g->values[x].shape, n->attr.axes, gr);
    int64_t nout = kf_shape_numel(&g->values[y].shape);
    int64_t count = 1;
    for (int j = 0; j < m; j++)
        if (gr[j].reduced) count *= gr[j].size;
    int isarg = kf_op_is_arg(kf_op_get(n->op));
    int wantmax = comb(n) == KF_COMB_MAX || comb(n) == KF_COMB_ARGMAX;

    if (m == 0 || count == 1) { /* nothing reduced: copy (or index 0) */
        omp_for(o, threads, nout, "    ");
        if (isarg)
            kf_buf_printf(o, "    for (long i = 0; i < %lldL; i++) b%d[i] = 0;\n", (long long)nout, y);
        else
            kf_buf_printf(o, "    for (long i = 0; i < %lldL; i++) b%d[i] = b%d[i];\n", (long long)nout, y, x);
        return;
    }
    if (!gr[m - 1].reduced) { /* col layout */
        long block = kf_tpl_get(&s->space, p, st->prefix, "block");
        int64_t inner = gr[m - 1].size;
        if (block > inner) block = inner;
        int64_t chunks = (inner + block - 1) / block, outer = nout / inner;
        /* sums accumulate in double; a product of a few hundred factors keeps float's
         * precision (relative error ~ count x 2^-24), and float halves its vector work */
        const char *acct = (comb(n) == KF_COMB_SUM || (comb(n) == KF_COMB_PROD && count > 256))
                               ? "double" : "float";
        kf_buf_printf(o, "    /* col layout: %lld outputs x %lld inner, %lld reduced */\n",
                      (long long)outer, (long long)inner, (long long)count);
        omp_for(o, threads, outer * chunks, "    ");
        kf_buf_printf(o, "    for (long task = 0; task < %lldL; task++) {\n", (long long)(outer * chunks));
        kf_buf_printf(o, "        const long oi = task / %lldL, j0 = (task %% %lldL) * %ldL;\n",
                      (long long)chunks, (long long)chunks, block);
        kf_buf_printf(o, "        const long len = j0 + %ldL < %lldL ? %ldL : %lldL - j0;\n", block,
                      (long long)inner, block, (long long)inner);
        emit_decompose(o, gr, m, m - 1, "        ");
        kf_buf_printf(o, "        %s acc[%ld];\n", acct, block);
        if (isarg) kf_buf_printf(o, "        int64_t arg[%ld];\n", block);
        const char *init = comb(n) == KF_COMB_PROD ? "1.0" : comb(n) == KF_COMB_SUM ? "0.0"
                           : wantmax ? "-INFINITY" : "INFINITY";
        kf_buf_printf(o, "        for (long j = 0; j < len; j++) acc[j] = %s;\n", init);
        if (isarg) kf_buf_puts(o, "        for (long j = 0; j < len; j++) arg[j] = 0;\n");
        int depth = emit_reduce_loops(o, gr, m, -1, "        ");
        emit_src(s, st, o, "row", "base + roff + j0", "len", block, "        ");
        switch (comb(n)) {
        case KF_COMB_SUM: kf_buf_puts(o, "        for (long j = 0; j < len; j++) acc[j] += (double)row[j];\n"); break;
        case KF_COMB_PROD: kf_buf_printf(o, "        for (long j = 0; j < len; j++) acc[j] *= (%s)row[j];\n", acct); break;
        case KF_COMB_MAX:
            kf_buf_puts(o, "        for (long j = 0; j < len; j++) { float v = row[j]; acc[j] = (acc[j] < v) ? v : ((acc[j] >= v) ? acc[j] : acc[j] + v); }\n");
            break;
        case KF_COMB_MIN:
            kf_buf_puts(o, "        for (long j = 0; j < len; j++) { float v = row[j]; acc[j] = (acc[j] > v) ? v : ((acc[j] <= v) ? acc[j] : acc[j] + v); }\n");
            break;
        default: {
            /* argmax/argmin: the flat index along the single reduced axis is roff / stride */
            int64_t rstride = 1;
            for (int j = 0; j < m; j++) if (gr[j].reduced) rstride = gr[j].stride;
            kf_buf_printf(o, "        const int64_t ri = roff / %lldL;\n", (long long)rstride);
            kf_buf_printf(o, "        for (long j = 0; j < len; j++) { float v = row[j]; int take = (v %s acc[j]) | ((v != v) & (acc[j] == acc[j])); acc[j] = take ? v : acc[j]; arg[j] = take ? ri : arg[j]; }\n",
                          wantmax ? ">" : "<");
            break;
        }
        }
        for (int d = 0; d < depth; d++) kf_buf_puts(o, "        }\n");
        kf_buf_printf(o, "        %s *restrict out = b%d + oi * %lldL + j0;\n", kf_synth_ctype(g, y), y,
                      (long long)inner);
        if (isarg) kf_buf_puts(o, "        for (long j = 0; j < len; j++) out[j] = arg[j];\n");
        else if (kf_op_get(n->op)->mean)
            kf_buf_printf(o, "        for (long j = 0; j < len; j++) out[j] = (float)(acc[j] / %lld.0);\n", (long long)count);
        else kf_buf_puts(o, "        for (long j = 0; j < len; j++) out[j] = (float)acc[j];\n");
        kf_buf_puts(o, "    }\n");
        return;
    }
    /* row layout: innermost group reduced and contiguous */
    int64_t rowlen = gr[m - 1].size;
    if (nout == 1 && m == 1 && !isarg && comb(n) != KF_COMB_PROD && threads > 1) {
        /* one output over one contiguous run: split the run across threads */
        kf_buf_printf(o, "    double part[%ld]; float ext[%ld];\n", threads, threads);
        kf_buf_printf(o, "    #pragma omp parallel num_threads(%ld)\n    {\n", threads);
        kf_buf_puts(o, "        const int t = omp_get_thread_num(), nt = omp_get_num_threads();\n");
        kf_buf_printf(o, "        const long lo = %lldL * t / nt, hi = %lldL * (t + 1) / nt;\n",
                      (long long)rowlen, (long long)rowlen);
        if (st->prologue) { /* the fused producer's elements, a chunk at a time */
            kf_buf_printf(o, "        double ps = 0; float pe = %s;\n", wantmax ? "-INFINITY" : "INFINITY");
            kf_buf_printf(o, "        for (long c0 = lo; c0 < hi; c0 += %dL) {\n", KF_PRO_MAX);
            kf_buf_printf(o, "          const long cn = hi - c0 < %dL ? hi - c0 : %dL;\n", KF_PRO_MAX, KF_PRO_MAX);
            emit_src(s, st, o, "row", "c0", "cn", KF_PRO_MAX, "          ");
            if (comb(n) == KF_COMB_SUM)
                kf_buf_puts(o, "          ps += kf_vsum(row, cn);\n");
            else
                kf_buf_printf(o, "          { float v = kf_vextreme(row, cn, %d); pe = (v %s pe || v != v) ? v : pe; }\n",
                              wantmax, wantmax ? ">" : "<");
            kf_buf_puts(o, "        }\n        part[t] = ps; ext[t] = pe;\n");
        } else if (comb(n) == KF_COMB_SUM)
            kf_buf_printf(o, "        part[t] = kf_vsum(b%d + lo, hi - lo); ext[t] = 0;\n", x);
        else
            kf_buf_printf(o, "        ext[t] = kf_vextreme(b%d + lo, hi - lo, %d); part[t] = 0;\n", x, wantmax);
        kf_buf_printf(o, "        if (t == 0) for (int k = nt; k < %ld; k++) { part[k] = 0; ext[k] = %s; }\n",
                      threads, wantmax ? "-INFINITY" : "INFINITY");
        kf_buf_puts(o, "    }\n");
        if (comb(n) == KF_COMB_SUM) {
            kf_buf_printf(o, "    double tot = 0; for (int k = 0; k < %ld; k++) tot += part[k];\n", threads);
            if (kf_op_get(n->op)->mean)
                kf_buf_printf(o, "    b%d[0] = (float)(tot / %lld.0);\n", y, (long long)count);
            else
                kf_buf_printf(o, "    b%d[0] = (float)tot;\n", y);
        } else {
            kf_buf_printf(o, "    float r = ext[0]; for (int k = 1; k < %ld; k++) { float v = ext[k]; r = (v %s r || v != v) ? v : r; }\n",
                          threads, wantmax ? ">" : "<");
            kf_buf_printf(o, "    b%d[0] = r;\n", y);
        }
        return;
    }
    const char *acct = isarg ? "float" : (comb(n) == KF_COMB_MAX || comb(n) == KF_COMB_MIN) ? "float" : "double";
    const char *init = comb(n) == KF_COMB_PROD ? "1.0" : comb(n) == KF_COMB_SUM ? "0.0"
                       : wantmax ? "-INFINITY" : "INFINITY";
    long ob = row_oblock(s, st, p);
    /* a block per task: fewer outputs than threads x block would leave threads idle (64
     * channel sums in blocks of 64 ran on one thread), so the block shrinks to share them */
    if (threads > 1 && ob > 1 && (nout + ob - 1) / ob < threads) ob = (long)((nout + threads - 1) / threads);
    kf_buf_printf(o, "    /* row layout: %lld outputs, rows of %lld, %lld reduced", (long long)nout,
                  (long long)rowlen, (long long)count);
    if (ob <= 1) {
        kf_buf_puts(o, " */\n");
        omp_for(o, threads, nout, "    ");
        kf_buf_printf(o, "    for (long oi = 0; oi < %lldL; oi++) {\n", (long long)nout);
        emit_decompose(o, gr, m, -1, "        ");
        kf_buf_printf(o, "        %s acc = %s;\n", acct, init);
        if (isarg) kf_buf_puts(o, "        int64_t arg = 0;\n");
        int depth = emit_reduce_loops(o, gr, m, m - 1, "        ");
        emit_row_body(s, st, o, rowlen, wantmax, "        ");
        for (int d = 0; d < depth; d++) kf_buf_puts(o, "        }\n");
        if (isarg) kf_buf_printf(o, "        b%d[oi] = arg;\n", y);
        else emit_row_store(o, n, y, count, "acc", "        ");
        kf_buf_puts(o, "    }\n");
        return;
    }
    /* blocks of neighbouring outputs: the reduced groups outside the row are walked once
     * per block, so that the rows read one after another lie next to each other */
    int64_t ntask = (nout + ob - 1) / ob;
    kf_buf_printf(o, ", blocks of %ld outputs */\n", ob);
    omp_for(o, threads, ntask, "    ");
    kf_buf_printf(o, "    for (long task = 0; task < %lldL; task++) {\n", (long long)ntask);
    kf_buf_printf(o, "        const long o0 = task * %ldL, on = %lldL - o0 < %ldL ? %lldL - o0 : %ldL;\n",
                  ob, (long long)nout, ob, (long long)nout, ob);
    kf_buf_printf(o, "        %s accv[%ld];\n", acct, ob);
    kf_buf_printf(o, "        for (long b = 0; b < on; b++) accv[b] = %s;\n", init);
    int depth = emit_reduce_loops(o, gr, m, m - 1, "        ");
    kf_buf_puts(o, "        for (long b = 0; b < on; b++) {\n          const long oi = o0 + b;\n");
    emit_decompose(o, gr, m, -1, "          ");
    kf_buf_printf(o, "          %s acc = accv[b];\n", acct);
    emit_row_body(s, st, o, rowlen, wantmax, "          ");
    kf_buf_puts(o, "          accv[b] = acc;\n        }\n");
    for (int d = 0; d < depth; d++) kf_buf_puts(o, "        }\n");
    kf_buf_puts(o, "        for (long b = 0; b < on; b++) {\n          const long oi = o0 + b;\n");
    emit_row_store(o, n, y, count, "accv[b]", "          ");
    kf_buf_puts(o, "        }\n    }\n");
}

static void emit_softmax(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *o) {
    const kf_graph *g = s->g;
    const kf_node *n = &g->nodes[st->nodes[0]];
    int x = n->in[0], y = n->out;
    long threads = kf_tpl_get(&s->space, p, st->prefix, "threads");
    const kf_shape *sh = &g->values[x].shape;
    int64_t O, N, I;
    kf_synth_axis_split(sh, n->attr.axes, &O, &N, &I);
    int logsm = kf_op_get(n->op)->log_out;
    if (I == 1) {
        kf_buf_printf(o, "    /* row layout: %lld rows of %lld */\n", (long long)O, (long long)N);
        omp_for(o, threads, O, "    ");
        kf_buf_printf(o, "    for (long oi = 0; oi < %lldL; oi++) {\n", (long long)O);
        {
            char off[48], len[32];
            snprintf(off, sizeof off, "oi * %lldL", (long long)N);
            snprintf(len, sizeof len, "%lldL", (long long)N);
            emit_src(s, st, o, "xr", off, len, N, "        ");
        }
        kf_buf_printf(o, "        float *restrict yr = b%d + oi * %lldL;\n", y, (long long)N);
        char full[48];
        snprintf(full, sizeof full, "%snt", st->prefix);
        long nt = kf_point_get(&s->space, p, full, 0);
        /* nt: stage the row in a stack buffer and stream it out once */
        const char *t = nt ? "tr" : "yr";
        if (nt) kf_buf_printf(o, "        float tr[%lld] __attribute__((aligned(64)));\n", (long long)N);
        kf_buf_printf(o, "        const float m = kf_vextreme(xr, %lldL, 1);\n", (long long)N);
        kf_buf_printf(o, "        for (long j = 0; j < %lldL; j++) %s[j] = kf_expf(xr[j] - m);\n", (long long)N, t);
        kf_buf_printf(o, "        const float sum = (float)kf_vsum(%s, %lldL);\n", t, (long long)N);
        if (logsm) {
            kf_buf_puts(o, "        const float lse = m + logf(sum);\n");
            kf_buf_printf(o, "        for (long j = 0; j < %lldL; j++) %s[j] = xr[j] - lse;\n", (long long)N, t);
        } else {
            kf_buf_puts(o, "        const float inv = 1.0f / sum;\n");
            kf_buf_printf(o, "        for (long j = 0; j < %lldL; j++) %s[j] *= inv;\n", (long long)N, t);
        }
        if (nt) kf_buf_printf(o, "        kf_stream_copy(yr, tr, %lldL);\n        kf_sfence();\n", (long long)N);
        kf_buf_puts(o, "    }\n");
        return;
    }
    long block = kf_tpl_get(&s->space, p, st->prefix, "block");
    if (block > I) block = I;
    int64_t chunks = (I + block - 1) / block;
    kf_buf_printf(o, "    /* col layout: %lld x [%lld] x %lld */\n", (long long)O, (long long)N, (long long)I);
    omp_for(o, threads, O * chunks, "    ");
    kf_buf_printf(o, "    for (long task = 0; task < %lldL; task++) {\n", (long long)(O * chunks));
    kf_buf_printf(o, "        const long oi = task / %lldL, j0 = (task %% %lldL) * %ldL;\n", (long long)chunks,
                  (long long)chunks, block);
    kf_buf_printf(o, "        const long len = j0 + %ldL < %lldL ? %ldL : %lldL - j0;\n", block, (long long)I,
                  block, (long long)I);
    kf_buf_printf(o, "        const float *restrict xb = b%d + oi * %lldL + j0;\n", x, (long long)(N * I));
    kf_buf_printf(o, "        float *restrict yb = b%d + oi * %lldL + j0;\n", y, (long long)(N * I));
    kf_buf_printf(o, "        float m[%ld], sum[%ld];\n", block, block);
    kf_buf_puts(o, "        for (long j = 0; j < len; j++) { m[j] = -INFINITY; sum[j] = 0.0f; }\n");
    kf_buf_printf(o, "        for (long r = 0; r < %lldL; r++) { const float *xr = xb + r * %lldL;\n", (long long)N, (long long)I);
    kf_buf_puts(o, "            for (long j = 0; j < len; j++) { float v = xr[j]; m[j] = (m[j] < v) ? v : ((m[j] >= v) ? m[j] : m[j] + v); } }\n");
    kf_buf_printf(o, "        for (long r = 0; r < %lldL; r++) { const float *xr = xb + r * %lldL; float *yr = yb + r * %lldL;\n",
                  (long long)N, (long long)I, (long long)I);
    kf_buf_puts(o, "            for (long j = 0; j < len; j++) { float e = kf_expf(xr[j] - m[j]); yr[j] = e; sum[j] += e; } }\n");
    if (logsm) {
        kf_buf_puts(o, "        for (long j = 0; j < len; j++) sum[j] = m[j] + logf(sum[j]);\n");
        kf_buf_printf(o, "        for (long r = 0; r < %lldL; r++) { const float *xr = xb + r * %lldL; float *yr = yb + r * %lldL;\n",
                      (long long)N, (long long)I, (long long)I);
        kf_buf_puts(o, "            for (long j = 0; j < len; j++) yr[j] = xr[j] - sum[j]; }\n");
    } else {
        kf_buf_puts(o, "        for (long j = 0; j < len; j++) sum[j] = 1.0f / sum[j];\n");
        kf_buf_printf(o, "        for (long r = 0; r < %lldL; r++) { float *yr = yb + r * %lldL;\n", (long long)N, (long long)I);
        kf_buf_puts(o, "            for (long j = 0; j < len; j++) yr[j] *= sum[j]; }\n");
    }
    kf_buf_puts(o, "    }\n");
}

static void emit_norm(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *o) {
    const kf_graph *g = s->g;
    const kf_node *n = &g->nodes[st->nodes[0]];
    int x = n->in[0], y = n->out;
    long threads = kf_tpl_get(&s->space, p, st->prefix, "threads");
    const kf_shape *sh = &g->values[x].shape;
    int64_t N = 1;
    for (int j = 0; j < sh->rank; j++)
        if ((n->attr.axes >> j) & 1u) N *= sh->d[j];
    int64_t rows = kf_shape_numel(sh) / N;
    int w = n->nin > 1 ? n->in[1] : -1, b = n->nin > 2 ? n->in[2] : -1;
    char eps[64];
    kf_synth_float_lit(n->attr.eps, eps, sizeof eps);
    kf_buf_printf(o, "    /* %lld rows of %lld */\n", (long long)rows, (long long)N);
    omp_for(o, threads, rows, "    ");
    kf_buf_printf(o, "    for (long oi = 0; oi < %lldL; oi++) {\n", (long long)rows);
    {
        char off[48], len[32];
        snprintf(off, sizeof off, "oi * %lldL", (long long)N);
        snprintf(len, sizeof len, "%lldL", (long long)N);
        emit_src(s, st, o, "xr", off, len, N, "        ");
    }
    if (!st->epilogue) kf_buf_printf(o, "        float *restrict yr = b%d + oi * %lldL;\n", y, (long long)N);
    char full[48];
    snprintf(full, sizeof full, "%snt", st->prefix);
    long nt = kf_point_get(&s->space, p, full, 0);
    if (kf_op_get(n->op)->centered) {
        kf_buf_printf(o, "        const float mean = (float)(kf_vsum(xr, %lldL) / %lld.0);\n", (long long)N, (long long)N);
        kf_buf_printf(o, "        const float var = (float)(kf_vsumsqdev(xr, %lldL, mean) / %lld.0);\n", (long long)N, (long long)N);
        kf_buf_printf(o, "        const float rstd = 1.0f / sqrtf(var + %s);\n", eps);
    } else {
        kf_buf_puts(o, "        const float mean = 0.0f;\n");
        kf_buf_printf(o, "        const float ms = (float)(kf_vsumsqdev(xr, %lldL, 0.0f) / %lld.0);\n", (long long)N, (long long)N);
        kf_buf_printf(o, "        const float rstd = 1.0f / sqrtf(ms + %s);\n", eps);
    }
    /* nt: write the row in 512-element blocks through a stack buffer with streaming stores;
     * an epilogue takes the row in blocks from a stack buffer and writes its own results */
    if (st->epilogue) {
        kf_buf_printf(o, "        for (long jb = 0; jb < %lldL; jb += %dL) {\n", (long long)N, KF_EPI_CHUNK);
        kf_buf_printf(o, "          const long je = jb + %dL < %lldL ? jb + %dL : %lldL;\n", KF_EPI_CHUNK, (long long)N,
                      KF_EPI_CHUNK, (long long)N);
        kf_buf_printf(o, "          float tb[%d] __attribute__((aligned(64)));\n", KF_EPI_CHUNK);
        kf_buf_puts(o, "          for (long j = jb; j < je; j++) tb[j - jb] = (xr[j] - mean) * rstd");
    } else if (nt) {
        kf_buf_printf(o, "        for (long jb = 0; jb < %lldL; jb += 512) {\n", (long long)N);
        kf_buf_printf(o, "          const long je = jb + 512 < %lldL ? jb + 512 : %lldL;\n", (long long)N, (long long)N);
        kf_buf_puts(o, "          float tb[512] __attribute__((aligned(64)));\n");
        kf_buf_puts(o, "          for (long j = jb; j < je; j++) tb[j - jb] = (xr[j] - mean) * rstd");
    } else {
        kf_buf_printf(o, "        for (long j = 0; j < %lldL; j++) yr[j] = (xr[j] - mean) * rstd", (long long)N);
    }
    if (w >= 0) kf_buf_printf(o, " * b%d[j]", w);
    if (b >= 0) kf_buf_printf(o, " + b%d[j]", b);
    kf_buf_puts(o, ";\n");
    if (st->epilogue) {
        const kf_stage *e = &s->st[st->epilogue - 1];
        kf_ew_layout lay;
        kf_synth_ewise_layout(s, e, &lay);
        kf_buf_printf(o, "          kf_epi%d(oi * %lldL + jb, je - jb, tb", st->index, (long long)N);
        for (int k = 0; k < lay.nbufs; k++)
            if (lay.bufs[k] != y) kf_buf_printf(o, ", b%d", lay.bufs[k]);
        for (int r = lay.nreads; r < lay.nops; r++) kf_buf_printf(o, ", b%d", lay.v[r]);
        kf_buf_puts(o, ");\n        }\n");
    } else if (nt) {
        kf_buf_puts(o, "          kf_stream_copy(yr + jb, tb, je - jb);\n        }\n        kf_sfence();\n");
    }
    kf_buf_puts(o, "    }\n");
}

void kf_synth_reduce_emit(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *o) {
    switch (st->kind) {
    case KF_STAGE_REDUCE: emit_reduce(s, st, p, o); break;
    case KF_STAGE_SOFTMAX: emit_softmax(s, st, p, o); break;
    case KF_STAGE_NORM: emit_norm(s, st, p, o); break;
    default: break;
    }
}
