/*
 * The float64 reference interpreter: kforge's ground truth.
 *
 * Design note. Every value is a dense row-major array of doubles, whatever its dtype (f16,
 * bf16 and f32 data arrive already widened; i64 values are exact integers). Nodes run in
 * graph order. Before running, a backward pass marks the nodes that reach an output (dead
 * nodes are skipped) and records each value's last consumer, so that an intermediate
 * buffer is freed right after its last use; elementwise nodes reuse a dying operand's
 * buffer in place, and nodes whose result is a graph output write straight into the
 * caller's array. Peak memory is therefore about the live working set, not the graph.
 *
 * Each op's formula is its record's (src/ops/): the pointwise expressions, the reduction
 * combiners, the composites' row and reduction functions; this file walks the graph, lays
 * the data out for them and holds the one CONTRACT reference (matmul, dgemm on doubles).
 * Semantics follow PyTorch: NaN propagates through max/min/maximum/minimum, argmax/argmin
 * return the first extreme (or the first NaN), softmax subtracts the row max, layer_norm
 * uses the biased variance. All arithmetic is double; nothing rounds to the task's dtype.
 *
 * Speed. Elementwise work goes through a "broadcast plan": the output's dims with each
 * operand's strides (0 where broadcast), with unit dims dropped and mergeable dims merged,
 * so the inner loop is one long contiguous (or stride-0) run and the per-row offset is
 * computed once per row, never per element. Reductions are viewed as [O, R, In] (outer kept,
 * reduced, inner kept); a reduction over non-adjacent axes first permutes the data so the
 * reduced axes are trailing. Work is split into (row, block) units for OpenMP; when there
 * are few output units, the reduced extent is split into ordered chunks whose partial
 * results are combined in order, the split chosen as for KF_INTERP_SPLIT threads whatever
 * the machine has (so results do not depend on the thread count). A graph local to the
 * rows of axis 0 runs a chunk of rows at a time, chunks on the threads (interp_rows.c). Matmul calls OpenBLAS dgemm once per output batch matrix, from one thread
 * (the pthread OpenBLAS parallelises each call itself).
 */
#include "ir/interp_int.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Below this many elements a loop runs on one thread: fork/join would cost more. */
#define KF_INTERP_PAR_MIN 32768
/* Elements per unit of parallel elementwise work, and lanes per reduction block. */
#define KF_INTERP_CHUNK 16384
#define KF_INTERP_LANES 256
/* A reduction over few outputs splits its reduced extent into ordered chunks as for this
 * many threads, whatever the machine has. */
#define KF_INTERP_SPLIT 16

/* ------------------------------------------------------------------------------------ */
/* Shapes and broadcast plans                                                            */

static int64_t ip_numel(const kf_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) n *= s->d[i];
    return n;
}

static void ip_contig_strides(const kf_shape *s, int64_t *st) {
    int64_t acc = 1;
    for (int i = s->rank - 1; i >= 0; i--) {
        st[i] = acc;
        acc *= s->d[i];
    }
}

/* Strides of in, read as if broadcast to out (right-aligned, 0 where broadcast). Returns 0
 * when in does not broadcast to out. */
static int ip_bcast_strides(const kf_shape *in, const kf_shape *out, int64_t *st) {
    int64_t cs[KF_MAX_DIMS];
    if (in->rank > out->rank) return 0;
    ip_contig_strides(in, cs);
    int lead = out->rank - in->rank;
    for (int k = 0; k < out->rank; k++) {
        int j = k - lead;
        if (j < 0 || in->d[j] == 1) st[k] = 0;
        else if (in->d[j] == out->d[k]) st[k] = cs[j];
        else return 0;
    }
    return 1;
}

/* Output dims (contiguous) with each operand's element strides, coalesced. */
typedef struct ip_plan {
    int rank, nops;
    int64_t n[KF_MAX_DIMS];
    int64_t st[2][KF_MAX_DIMS];
} ip_plan;

static void ip_plan_init(ip_plan *p, int rank, const int64_t *dims, int nops,
                         int64_t st[][KF_MAX_DIMS]) {
    p->rank = 0;
    p->nops = nops;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1) continue;
        int merge = p->rank > 0;
        for (int o = 0; merge && o < nops; o++)
            merge = p->st[o][p->rank - 1] == st[o][d] * dims[d];
        if (merge) {
            p->n[p->rank - 1] *= dims[d];
            for (int o = 0; o < nops; o++) p->st[o][p->rank - 1] = st[o][d];
        } else {
            p->n[p->rank] = dims[d];
            for (int o = 0; o < nops; o++) p->st[o][p->rank] = st[o][d];
            p->rank++;
        }
    }
    if (p->rank == 0) {
        p->rank = 1;
        p->n[0] = 1;
        for (int o = 0; o < nops; o++) p->st[o][0] = 0;
    }
}

/* Offsets of row `row` (all dims but the last), and that row's index per dim. */
static void ip_plan_row(const ip_plan *p, int64_t row, int64_t off[2], int64_t *idx) {
    off[0] = off[1] = 0;
    for (int d = p->rank - 2; d >= 0; d--) {
        int64_t i = row % p->n[d];
        row /= p->n[d];
        idx[d] = i;
        for (int o = 0; o < p->nops; o++) off[o] += i * p->st[o][d];
    }
}

/* Advance (off, idx) to the next row, odometer style: no division. */
static void ip_plan_next(const ip_plan *p, int64_t off[2], int64_t *idx) {
    for (int d = p->rank - 2; d >= 0; d--) {
        for (int o = 0; o < p->nops; o++) off[o] += p->st[o][d];
        if (++idx[d] < p->n[d]) return;
        for (int o = 0; o < p->nops; o++) off[o] -= p->n[d] * p->st[o][d];
        idx[d] = 0;
    }
}

/* One run of a binary op's f64 reference (or a strided copy when d is NULL). */
static void ip_bin_run(const kf_op_def *d, const kf_attrs *A, const double *pa, int64_t sa,
                       const double *pb, int64_t sb, double *po, int64_t n) {
    if (d) {
        d->f64(pa, sa, pb, sb, po, n, A);
    } else if (sa == 1) {
        memmove(po, pa, (size_t)n * sizeof *po);
    } else {
        for (int64_t j = 0; j < n; j++) po[j] = pa[j * sa];
    }
}

/* Run a plan: out (contiguous over the plan's dims) = d(a, b); d NULL copies a. */
static void ip_plan_exec(const ip_plan *p, const kf_op_def *d, const kf_attrs *A,
                         const double *a, const double *b, double *out) {
    int64_t inner = p->n[p->rank - 1], rows = 1;
    for (int d = 0; d < p->rank - 1; d++) rows *= p->n[d];
    /* a unit is a column chunk of one long row, or a block of whole short rows */
    int64_t per_row = 1, row_block = 1;
    if (inner >= KF_INTERP_CHUNK) per_row = (inner + KF_INTERP_CHUNK - 1) / KF_INTERP_CHUNK;
    else row_block = KF_INTERP_CHUNK / (inner > 0 ? inner : 1);
    int64_t units = ((rows + row_block - 1) / row_block) * per_row;
    int64_t sa = p->st[0][p->rank - 1], sb = p->nops > 1 ? p->st[1][p->rank - 1] : 0;
    if (!b) b = a;
#pragma omp parallel for schedule(static) if (rows * inner >= KF_INTERP_PAR_MIN)
    for (int64_t u = 0; u < units; u++) {
        int64_t r0 = (u / per_row) * row_block, j0 = (u % per_row) * KF_INTERP_CHUNK;
        int64_t r1 = r0 + row_block < rows ? r0 + row_block : rows;
        int64_t j1 = j0 + KF_INTERP_CHUNK < inner ? j0 + KF_INTERP_CHUNK : inner;
        int64_t off[2], idx[KF_MAX_DIMS];
        ip_plan_row(p, r0, off, idx);
        for (int64_t row = r0; row < r1; row++) {
            ip_bin_run(d, A, a + off[0] + j0 * sa, sa, b + off[1] + j0 * sb, sb,
                       out + row * inner + j0, j1 - j0);
            if (row + 1 < r1) ip_plan_next(p, off, idx);
        }
    }
}

/* Write src (shape s) broadcast to shape d into dst. Returns 0 if it does not broadcast. */
static int ip_broadcast_to(const double *src, const kf_shape *s, double *dst,
                           const kf_shape *d) {
    int64_t st[1][KF_MAX_DIMS];
    if (!ip_bcast_strides(s, d, st[0])) return 0;
    ip_plan p;
    ip_plan_init(&p, d->rank, d->d, 1, st);
    ip_plan_exec(&p, NULL, NULL, src, NULL, dst);
    return 1;
}

/* ------------------------------------------------------------------------------------ */
/* Elementwise ops                                                                       */

static void ip_unary(const kf_op_def *d, const kf_attrs *A, const double *in, double *out,
                     int64_t n) {
    int64_t chunks = (n + KF_INTERP_CHUNK - 1) / KF_INTERP_CHUNK;
#pragma omp parallel for schedule(static) if (n >= KF_INTERP_PAR_MIN)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i0 = c * KF_INTERP_CHUNK, len = n - i0 < KF_INTERP_CHUNK ? n - i0 : KF_INTERP_CHUNK;
        d->f64(in + i0, 1, NULL, 0, out + i0, len, A);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Reductions                                                                            */

static inline int ip_is_arg(kf_combiner op) { return op == KF_COMB_ARGMAX || op == KF_COMB_ARGMIN; }

/* Fold (v, index j) into (acc, arg) for combiner op. For arg ops the earlier element wins ties and
 * a NaN, once taken, sticks (torch returns the first NaN's index). */
static inline void ip_red_fold(kf_combiner op, double *acc, double *arg, double v, double j) {
    switch (op) {
    case KF_COMB_SUM: *acc += v; break;
    case KF_COMB_PROD: *acc *= v; break;
    case KF_COMB_MAX:
        if (v > *acc || v != v) *acc = (*acc != *acc) ? *acc : v;
        break;
    case KF_COMB_MIN:
        if (v < *acc || v != v) *acc = (*acc != *acc) ? *acc : v;
        break;
    case KF_COMB_ARGMAX:
        if (*acc == *acc && (v != v || v > *acc)) *acc = v, *arg = j;
        break;
    case KF_COMB_ARGMIN:
        if (*acc == *acc && (v != v || v < *acc)) *acc = v, *arg = j;
        break;
    case KF_COMB_LOGSUMEXP: /* a composite: its own f64_rows reference, never folded here */
        break;
    }
}

/* Reduce x[r * In + i] over r in [r0, r1) for lanes i in [0, ni) into acc/arg (absolute r
 * as the index). r1 > r0 is required for arg ops. */
/* A sum of magnitudes, sum |x| (an error bound's own-rounding term, kf_interp_run_bounds):
 * the interpreter's private combiner, never on a record. */
#define IP_COMB_ABSSUM ((kf_combiner)(KF_COMB_LOGSUMEXP + 1))

static void ip_red_block(kf_combiner op, const double *x, int64_t In, int64_t r0, int64_t r1,
                         int64_t ni, double *acc, double *arg) {
    if (op == IP_COMB_ABSSUM) {
        for (int64_t i = 0; i < ni; i++) acc[i] = 0.0;
        for (int64_t r = r0; r < r1; r++) {
            const double *row = x + r * In;
            for (int64_t i = 0; i < ni; i++) acc[i] += fabs(row[i]);
        }
        return;
    }
    if (ip_is_arg(op)) {
        for (int64_t i = 0; i < ni; i++) acc[i] = x[r0 * In + i], arg[i] = (double)r0;
        r0++;
    } else {
        double init = op == KF_COMB_PROD ? 1.0 : op == KF_COMB_MAX ? -INFINITY
                                            : op == KF_COMB_MIN ? INFINITY : 0.0;
        for (int64_t i = 0; i < ni; i++) acc[i] = init;
    }
    if (ni == 1 && (op == KF_COMB_SUM)) {
        /* four accumulators: more accurate and four times the ILP of one */
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) {
            s0 += x[r * In];
            s1 += x[(r + 1) * In];
            s2 += x[(r + 2) * In];
            s3 += x[(r + 3) * In];
        }
        for (; r < r1; r++) s0 += x[r * In];
        acc[0] = (s0 + s1) + (s2 + s3);
        return;
    }
    if (ni == 1) {
        for (int64_t r = r0; r < r1; r++) ip_red_fold(op, acc, arg, x[r * In], (double)r);
        return;
    }
    switch (op) {
    case KF_COMB_SUM:
        for (int64_t r = r0; r < r1; r++) {
            const double *row = x + r * In;
            for (int64_t i = 0; i < ni; i++) acc[i] += row[i];
        }
        break;
    case KF_COMB_PROD:
        for (int64_t r = r0; r < r1; r++) {
            const double *row = x + r * In;
            for (int64_t i = 0; i < ni; i++) acc[i] *= row[i];
        }
        break;
    default:
        for (int64_t r = r0; r < r1; r++) {
            const double *row = x + r * In;
            for (int64_t i = 0; i < ni; i++) ip_red_fold(op, &acc[i], &arg[i], row[i], (double)r);
        }
        break;
    }
}

/* Fold partial result (v, j) of a later chunk into (acc, arg). */
static inline void ip_red_merge(kf_combiner op, double *acc, double *arg, double v, double j) {
    if (op == KF_COMB_SUM || op == IP_COMB_ABSSUM) *acc += v;
    else ip_red_fold(op, acc, arg, v, j);
}

/* out[o * In + i] = reduce over r of x[(o * R + r) * In + i]. R >= 1 for max/min/arg ops. */
static void ip_reduce_ori(kf_combiner op, int mean, const double *x, int64_t O, int64_t R,
                          int64_t In, double *out) {
    int64_t nlb = (In + KF_INTERP_LANES - 1) / KF_INTERP_LANES;
    int64_t units = O * nlb;
    int64_t total = O * R * In;
    /* the reduced extent's chunks from the shape alone, as if for KF_INTERP_SPLIT threads:
     * the order of the partial sums must not depend on the thread count */
    int64_t nc = 1;
    if (units < 2 * KF_INTERP_SPLIT && total >= KF_INTERP_PAR_MIN) {
        nc = (4 * KF_INTERP_SPLIT + units - 1) / units;
        if (nc > R / 1024) nc = R / 1024;
        if (nc < 1) nc = 1;
    }
    int arg = ip_is_arg(op);
    if (R == 0) {
        assert(!arg && op != KF_COMB_MAX && op != KF_COMB_MIN);
        double v = op == KF_COMB_PROD ? 1.0 : mean ? NAN : 0.0;
        for (int64_t k = 0; k < O * In; k++) out[k] = v;
        return;
    }
    double *pacc = NULL, *parg = NULL;
    if (nc > 1) {
        pacc = kf_ip_alloc((size_t)(nc * O * In) * sizeof *pacc);
        if (arg) parg = kf_ip_alloc((size_t)(nc * O * In) * sizeof *parg);
    }
#pragma omp parallel for schedule(static) if (total >= KF_INTERP_PAR_MIN)
    for (int64_t w = 0; w < units * nc; w++) {
        double acc[KF_INTERP_LANES], idx[KF_INTERP_LANES];
        int64_t unit = w / nc, c = w % nc;
        int64_t o = unit / nlb, i0 = (unit % nlb) * KF_INTERP_LANES;
        int64_t ni = In - i0 < KF_INTERP_LANES ? In - i0 : KF_INTERP_LANES;
        int64_t r0 = c * R / nc, r1 = (c + 1) * R / nc;
        ip_red_block(op, x + o * R * In + i0, In, r0, r1, ni, acc, idx);
        if (nc > 1) {
            memcpy(pacc + c * O * In + o * In + i0, acc, (size_t)ni * sizeof *acc);
            if (arg) memcpy(parg + c * O * In + o * In + i0, idx, (size_t)ni * sizeof *idx);
        } else {
            for (int64_t i = 0; i < ni; i++) out[o * In + i0 + i] = arg ? idx[i] : acc[i];
        }
    }
    if (nc > 1) {
        for (int64_t k = 0; k < O * In; k++) {
            double a = pacc[k], j = arg ? parg[k] : 0.0;
            for (int64_t c = 1; c < nc; c++)
                ip_red_merge(op, &a, &j, pacc[c * O * In + k], arg ? parg[c * O * In + k] : 0.0);
            out[k] = arg ? j : a;
        }
        kf_ip_free(pacc);
        kf_ip_free(parg);
    }
    if (mean)
        for (int64_t k = 0; k < O * In; k++) out[k] /= (double)R;
}

/* View shape s reduced over the axes in mask as [O, R, In]. Returns 0 when the reduced axes
 * (ignoring unit dims) are not adjacent, so that no such view exists. */
static int ip_ori(const kf_shape *s, uint32_t mask, int64_t *O, int64_t *R, int64_t *In) {
    int phase = 0; /* 0: before the reduced run, 1: inside it, 2: after it */
    *O = *R = *In = 1;
    for (int d = 0; d < s->rank; d++) {
        int red = (mask >> d) & 1u;
        if (s->d[d] == 1) continue;
        if (red) {
            if (phase == 2) return 0;
            phase = 1;
            *R *= s->d[d];
        } else {
            if (phase == 1) phase = 2;
            if (phase == 0) *O *= s->d[d];
            else *In *= s->d[d];
        }
    }
    return 1;
}

static kf_status ip_reduce_as(const kf_graph *g, const kf_node *n, const double *x, double *out,
                              kf_combiner comb, int mean, kf_error *err) {
    const kf_shape *s = &g->values[n->in[0]].shape;
    uint32_t mask = n->attr.axes & (s->rank >= 32 ? 0xffffffffu : ((1u << s->rank) - 1u));
    int64_t O, R, In, total = ip_numel(s);
    double *perm = NULL;
    if (!ip_ori(s, mask, &O, &R, &In)) {
        /* gather the kept axes first and the reduced axes last, then reduce rows */
        int64_t cs[KF_MAX_DIMS], dims[KF_MAX_DIMS], st[1][KF_MAX_DIMS];
        int k = 0;
        ip_contig_strides(s, cs);
        O = R = 1;
        In = 1;
        for (int pass = 0; pass < 2; pass++)
            for (int d = 0; d < s->rank; d++)
                if ((int)((mask >> d) & 1u) == pass) {
                    dims[k] = s->d[d];
                    st[0][k++] = cs[d];
                    if (pass) R *= s->d[d];
                    else O *= s->d[d];
                }
        perm = kf_ip_alloc((size_t)(total > 0 ? total : 1) * sizeof *perm);
        ip_plan p;
        ip_plan_init(&p, k, dims, 1, st);
        if (total > 0) ip_plan_exec(&p, NULL, NULL, x, NULL, perm);
        x = perm;
    }
    if (ip_numel(&g->values[n->out].shape) != O * In) {
        kf_ip_free(perm);
        return kf_error_set(err, KF_ERR_INTERNAL, g->path, n->line, n->col,
                            "%s: result has %lld elements, expected %lld",
                            kf_op_get(n->op)->name,
                            (long long)ip_numel(&g->values[n->out].shape),
                            (long long)(O * In));
    }
    if (R == 0 && O * In > 0 && comb != KF_COMB_SUM && comb != KF_COMB_PROD) {
        kf_ip_free(perm);
        return kf_error_set(err, KF_ERR_ARG, g->path, n->line, n->col,
                            "%s over an empty axis has no result", kf_op_get(n->op)->name);
    }
    if (O * In > 0) ip_reduce_ori(comb, mean, x, O, R, In, out);
    kf_ip_free(perm);
    return KF_OK;
}

static kf_status ip_reduce(const kf_graph *g, const kf_node *n, const double *x,
                           double *out, kf_error *err) {
    const kf_op_def *d = kf_op_get(n->op);
    return ip_reduce_as(g, n, x, out, d->combiner, d->mean, err);
}

/* A reduce-shaped composite: each output element is the record's f64_rows over the
 * elements it reduces, gathered (kept axes first, reduced axes last) into rows. */
static kf_status ip_reduce_rows(const kf_graph *g, const kf_node *n, const double *x,
                                const double *e, double *out, kf_error *err) {
    const kf_op_def *d = kf_op_get(n->op);
    const kf_shape *s = &g->values[n->in[0]].shape;
    uint32_t mask = n->attr.axes;
    int64_t cs[KF_MAX_DIMS], dims[KF_MAX_DIMS], st[1][KF_MAX_DIMS], O = 1, R = 1, total = ip_numel(s);
    int k = 0;
    ip_contig_strides(s, cs);
    for (int pass = 0; pass < 2; pass++)
        for (int dd = 0; dd < s->rank; dd++)
            if ((int)((mask >> dd) & 1u) == pass) {
                dims[k] = s->d[dd];
                st[0][k++] = cs[dd];
                if (pass) R *= s->d[dd];
                else O *= s->d[dd];
            }
    if (ip_numel(&g->values[n->out].shape) != O)
        return kf_error_set(err, KF_ERR_INTERNAL, g->path, n->line, n->col, "%s: result has %lld elements, "
                            "expected %lld", d->name, (long long)ip_numel(&g->values[n->out].shape), (long long)O);
    /* with e (bound mode): the record's f64_rows_bound of the rows of x and of e into out */
    double *rows = kf_ip_alloc((size_t)(total > 0 ? total : 1) * sizeof *rows);
    double *erows = e ? kf_ip_alloc((size_t)(total > 0 ? total : 1) * sizeof *erows) : NULL;
    if (total > 0) {
        ip_plan p;
        ip_plan_init(&p, k, dims, 1, st);
        ip_plan_exec(&p, NULL, NULL, x, NULL, rows);
        if (e) ip_plan_exec(&p, NULL, NULL, e, NULL, erows);
    }
#pragma omp parallel for schedule(static) if (total >= KF_INTERP_PAR_MIN && O > 1)
    for (int64_t o = 0; o < O; o++)
        out[o] = e ? d->f64_rows_bound(rows + o * R, erows + o * R, R, &n->attr)
                   : d->f64_rows(rows + o * R, R, &n->attr);
    kf_ip_free(rows);
    kf_ip_free(erows);
    return KF_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Row-wise composites: the softmax family and the norms                                 */

/* A norm's weight or bias: one value, one value per normalised position r (the torch
 * case, normalized_shape), or, for any other broadcastable shape, materialised at the
 * input's full size and indexed by the flat element o * R + r. */
typedef struct ip_affine {
    const double *p;
    int full;   /* indexed by the flat element (materialised broadcast) */
    int scalar; /* one value for everything */
    double *owned;
} ip_affine;

/* Decide how the norm's weight/bias (value v) is indexed against input shape xs, whose
 * trailing R elements are normalised together. */
static kf_status ip_affine_setup(const kf_graph *g, const kf_node *n, int v, const double *p,
                                 const kf_shape *xs, int64_t R, ip_affine *a, kf_error *err) {
    const kf_shape *ws = &g->values[v].shape;
    memset(a, 0, sizeof *a);
    a->p = p;
    int64_t wn = ip_numel(ws);
    if (wn == 1) {
        a->scalar = 1;
        return KF_OK;
    }
    int lead = 0;
    while (lead < ws->rank && ws->d[lead] == 1) lead++;
    int k = ws->rank - lead, match = wn == R && k <= xs->rank;
    for (int j = 0; match && j < k; j++) match = ws->d[lead + j] == xs->d[xs->rank - k + j];
    if (match) return KF_OK;
    int64_t xn = ip_numel(xs);
    a->owned = kf_ip_alloc((size_t)(xn > 0 ? xn : 1) * sizeof *a->owned);
    if (!ip_broadcast_to(p, ws, a->owned, xs)) {
        kf_ip_free(a->owned);
        a->owned = NULL;
        return kf_error_set(err, KF_ERR_TYPE, g->path, n->line, n->col,
                            "%s: affine operand does not broadcast to the input",
                            kf_op_get(n->op)->name);
    }
    a->p = a->owned;
    a->full = 1;
    return KF_OK;
}


/* A row-wise op (the softmax family and the scans along one axis, the norms along trailing axes):
 * the record's own f64_row on every row along the op's axes, gathered when the axis is not
 * the innermost, with the norm's weight and bias rows (a scalar spread over the row, one
 * value per normalised position, or any other broadcast materialised at full size). */
static kf_status ip_rowwise(const kf_graph *g, const kf_node *n, const double *const *in,
                            const double *e, double *y, kf_error *err) {
    const kf_op_def *d = kf_op_get(n->op);
    const kf_shape *s = &g->values[n->in[0]].shape;
    uint32_t mask = n->attr.axes;
    int64_t O = 1, R = 1, In = 1;
    if (d->kind == KF_KIND_SOFTMAX || d->kind == KF_KIND_SCAN) {
        int axis = -1;
        for (int k = 0; k < s->rank; k++)
            if ((mask >> k) & 1u) {
                if (axis >= 0)
                    return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, n->line, n->col,
                                        "%s over more than one axis", d->name);
                axis = k;
            }
        for (int k = 0; k < s->rank; k++) {
            if (k < axis) O *= s->d[k];
            else if (k == axis) R = s->d[k];
            else In *= s->d[k];
        }
    } else if (!ip_ori(s, mask, &O, &R, &In) || In != 1) {
        return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, n->line, n->col,
                            "%s over axes that are not trailing", d->name);
    }
    int64_t total = O * R * In;
    if (total == 0) return KF_OK;
    ip_affine aff[2];
    memset(aff, 0, sizeof aff);
    int naff = n->nin - 1;
    kf_status st = KF_OK;
    for (int k = 0; k < naff && st == KF_OK; k++) st = ip_affine_setup(g, n, n->in[1 + k], in[1 + k], s, R, &aff[k], err);
    /* a scalar weight or bias spread over one row */
    double *spread[2] = {NULL, NULL};
    for (int k = 0; k < naff && st == KF_OK; k++)
        if (aff[k].scalar) {
            spread[k] = kf_ip_alloc((size_t)R * sizeof *spread[k]);
            for (int64_t r = 0; r < R; r++) spread[k][r] = aff[k].p[0];
        }
    if (st == KF_OK) {
        /* with e (bound mode): the record's f64_row_bound of the rows of x and of e into y */
        const double *x = in[0];
#pragma omp parallel if (total >= KF_INTERP_PAR_MIN && O * In > 1)
        {
            double *xr = In > 1 ? kf_ip_alloc((size_t)R * 3 * sizeof *xr) : NULL, *yr = xr ? xr + R : NULL;
            double *er = xr ? xr + 2 * R : NULL;
#pragma omp for schedule(static)
            for (int64_t u = 0; u < O * In; u++) {
                int64_t o = u / In, i = u % In;
                const double *rw[2] = {NULL, NULL};
                for (int k = 0; k < naff; k++)
                    rw[k] = spread[k] ? spread[k] : aff[k].full ? aff[k].p + o * R : aff[k].p;
                if (In == 1) {
                    if (e) d->f64_row_bound(x + o * R, e + o * R, y + o * R, R, rw[0], rw[1], &n->attr);
                    else d->f64_row(x + o * R, y + o * R, R, rw[0], rw[1], &n->attr);
                } else {
                    for (int64_t r = 0; r < R; r++) xr[r] = x[(o * R + r) * In + i];
                    if (e) {
                        for (int64_t r = 0; r < R; r++) er[r] = e[(o * R + r) * In + i];
                        d->f64_row_bound(xr, er, yr, R, rw[0], rw[1], &n->attr);
                    } else {
                        d->f64_row(xr, yr, R, rw[0], rw[1], &n->attr);
                    }
                    for (int64_t r = 0; r < R; r++) y[(o * R + r) * In + i] = yr[r];
                }
            }
            kf_ip_free(xr);
        }
    }
    for (int k = 0; k < 2; k++) {
        kf_ip_free(aff[k].owned);
        kf_ip_free(spread[k]);
    }
    return st;
}

/* ------------------------------------------------------------------------------------ */
/* Matmul                                                                                */

static kf_status ip_matmul(const kf_graph *g, const kf_node *n, const double *A,
                           const double *B, double *C, kf_error *err) {
    const kf_shape *as = &g->values[n->in[0]].shape, *bs = &g->values[n->in[1]].shape;
    const int ta = 0, tb = 0; /* a transposed operand is a transpose view before it */
    int64_t M, K, Kb, N;
    if (as->rank < 1 || bs->rank < 1)
        return kf_error_set(err, KF_ERR_TYPE, g->path, n->line, n->col,
                            "matmul of a scalar");
    if (as->rank == 1) M = 1, K = as->d[0];
    else if (ta) K = as->d[as->rank - 2], M = as->d[as->rank - 1];
    else M = as->d[as->rank - 2], K = as->d[as->rank - 1];
    if (bs->rank == 1) Kb = bs->d[0], N = 1;
    else if (tb) N = bs->d[bs->rank - 2], Kb = bs->d[bs->rank - 1];
    else Kb = bs->d[bs->rank - 2], N = bs->d[bs->rank - 1];
    if (K != Kb)
        return kf_error_set(err, KF_ERR_TYPE, g->path, n->line, n->col,
                            "matmul: inner dims differ (%lld vs %lld)", (long long)K,
                            (long long)Kb);
    /* batch dims, broadcast; strides in whole matrices */
    kf_shape ab = {0}, bb = {0}, ob = {0};
    ab.rank = as->rank > 2 ? as->rank - 2 : 0;
    bb.rank = bs->rank > 2 ? bs->rank - 2 : 0;
    memcpy(ab.d, as->d, (size_t)ab.rank * sizeof ab.d[0]);
    memcpy(bb.d, bs->d, (size_t)bb.rank * sizeof bb.d[0]);
    ob.rank = ab.rank > bb.rank ? ab.rank : bb.rank;
    for (int k = 0; k < ob.rank; k++) {
        int ja = k - (ob.rank - ab.rank), jb = k - (ob.rank - bb.rank);
        int64_t da = ja >= 0 ? ab.d[ja] : 1, db = jb >= 0 ? bb.d[jb] : 1;
        if (da != db && da != 1 && db != 1)
            return kf_error_set(err, KF_ERR_TYPE, g->path, n->line, n->col,
                                "matmul: batch dims do not broadcast");
        ob.d[k] = da == 1 ? db : da;
    }
    int64_t sa[KF_MAX_DIMS], sb[KF_MAX_DIMS];
    ip_bcast_strides(&ab, &ob, sa);
    ip_bcast_strides(&bb, &ob, sb);
    int64_t nb = ip_numel(&ob);
    if (ip_numel(&g->values[n->out].shape) != nb * M * N)
        return kf_error_set(err, KF_ERR_INTERNAL, g->path, n->line, n->col,
                            "matmul: result has %lld elements, expected %lld",
                            (long long)ip_numel(&g->values[n->out].shape),
                            (long long)(nb * M * N));
    if (nb * M * N == 0) return KF_OK;
    if (K == 0) {
        memset(C, 0, (size_t)(nb * M * N) * sizeof *C);
        return KF_OK;
    }
    for (int64_t bi = 0; bi < nb; bi++) {
        int64_t rem = bi, ia = 0, ib = 0;
        for (int k = ob.rank - 1; k >= 0; k--) {
            int64_t i = rem % ob.d[k];
            rem /= ob.d[k];
            ia += i * sa[k];
            ib += i * sb[k];
        }
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (blasint)M, (blasint)N, (blasint)K, 1.0, A + ia * M * K,
                    (blasint)(ta ? M : K), B + ib * K * N, (blasint)(tb ? K : N), 0.0,
                    C + bi * M * N, (blasint)N);
    }
    return KF_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Error bounds (kf_interp_run_bounds)                                                   */

/* The unit roundoff of arithmetic in dtype dt (f32 for anything that is not a float of
 * another width: the kernels compute in f32 then). */
static double ip_unit_roundoff(kf_dtype dt) {
    switch (dt) {
    case KF_F64: return 0x1p-53;
    case KF_F16: return 0x1p-11;
    case KF_BF16: return 0x1p-8;
    default: return 0x1p-24;
    }
}

/* A binary pointwise node's f64 form on operands a and b (shaped as its inputs) into out. */
static void ip_binary_into(const kf_graph *g, const kf_node *n, const double *a, const double *b,
                           double *out) {
    const kf_value *ov = &g->values[n->out];
    int64_t st[2][KF_MAX_DIMS];
    for (int k = 0; k < 2; k++) ip_bcast_strides(&g->values[n->in[k]].shape, &ov->shape, st[k]);
    ip_plan p;
    ip_plan_init(&p, ov->shape.rank, ov->shape.d, 2, st);
    ip_plan_exec(&p, kf_op_get(n->op), &n->attr, a, b, out);
}

/* v + sign * e elementwise (e NULL: v itself, not copied). */
static const double *ip_shifted(const double *v, const double *e, double sign, int64_t cnt,
                                double **own) {
    *own = NULL;
    if (!e) return v;
    double *r = kf_ip_alloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *r);
#pragma omp parallel for schedule(static) if (cnt >= KF_INTERP_PAR_MIN)
    for (int64_t i = 0; i < cnt; i++) r[i] = v[i] + sign * e[i];
    *own = r;
    return r;
}

/* The error bound of node n's result (see kf_interp_run_bounds for the rules), given its
 * operands in[] and their bounds eb[] (NULL: exact), its f64 result out. Returns a new
 * array, or NULL when the result carries no bound (exact operands of a non-CONTRACT node,
 * or an op without a rule). */
static kf_status ip_gather(const kf_graph *g, const kf_node *n, const double *x, double *out, double pad,
                           int own_pad, kf_error *err);

static double *ip_bound(const kf_graph *g, const kf_node *n, const double *const *in,
                        const double *const *eb, const double *out, kf_status *st,
                        kf_error *err) {
    const kf_op_def *d = kf_op_get(n->op);
    int64_t cnt = ip_numel(&g->values[n->out].shape);
    int any = 0;
    for (int a = 0; a < n->nin; a++) any |= eb[a] != NULL;
    if (cnt == 0) return NULL;
    double *res = NULL;
    if (d->kind == KF_KIND_MATMUL) {
        const kf_shape *as = &g->values[n->in[0]].shape;
        /* a transposed operand is a transpose view before the matmul */
        int64_t K = as->rank == 1 ? as->d[0] : as->d[as->rank - 1];
        int64_t na = ip_numel(as), nb = ip_numel(&g->values[n->in[1]].shape);
        double *aa = kf_ip_alloc((size_t)(na > 0 ? na : 1) * sizeof *aa);
        double *ab = kf_ip_alloc((size_t)(nb > 0 ? nb : 1) * sizeof *ab);
#pragma omp parallel for schedule(static) if (na >= KF_INTERP_PAR_MIN)
        for (int64_t i = 0; i < na; i++) aa[i] = fabs(in[0][i]);
#pragma omp parallel for schedule(static) if (nb >= KF_INTERP_PAR_MIN)
        for (int64_t i = 0; i < nb; i++) ab[i] = fabs(in[1][i]);
        res = kf_ip_alloc((size_t)cnt * sizeof *res);
        *st = ip_matmul(g, n, aa, ab, res, err);
        double f = (double)K * ip_unit_roundoff(g->values[n->out].dtype);
#pragma omp parallel for schedule(static) if (cnt >= KF_INTERP_PAR_MIN)
        for (int64_t i = 0; i < cnt; i++) res[i] *= f;
        double *tmp = any && !*st ? kf_ip_alloc((size_t)cnt * sizeof *tmp) : NULL;
        for (int a = 0; a < 2 && tmp && !*st; a++) {
            if (!eb[a]) continue;
            *st = ip_matmul(g, n, a ? aa : eb[0], a ? eb[1] : ab, tmp, err);
#pragma omp parallel for schedule(static) if (cnt >= KF_INTERP_PAR_MIN)
            for (int64_t i = 0; i < cnt; i++) res[i] += tmp[i];
        }
        kf_ip_free(tmp);
        kf_ip_free(aa);
        kf_ip_free(ab);
        return res;
    }
    if (d->cls == KF_CLASS_POINTWISE && !any) {
        /* exact operands: the rounding of the result to the node's dtype, which a later
         * norm or difference may amplify (x + r at 512 +- 2 loses 3e-5 before a layer norm) */
        double u = ip_unit_roundoff(g->values[n->out].dtype);
        if (g->values[n->out].dtype == KF_I64) return NULL;
        res = kf_ip_alloc((size_t)cnt * sizeof *res);
#pragma omp parallel for schedule(static) if (cnt >= KF_INTERP_PAR_MIN)
        for (int64_t i = 0; i < cnt; i++) res[i] = isfinite(out[i]) ? u * fabs(out[i]) : 0.0;
        return res;
    }
    if (d->kind == KF_KIND_NORM && d->f64_row_bound) {
        /* a norm's own rounding: its row mean (or mean square), accumulated in the dtype,
         * is off by up to about (2 + log2 n) u |x|, which x - mean and the scale carry on;
         * at an offset (rows of 256 +- 1) that is most of the result's error, so it joins
         * the operand's bound as an error of each element */
        const kf_shape *xs = &g->values[n->in[0]].shape;
        int64_t len = 1, nx = ip_numel(xs);
        for (int a = 0; a < xs->rank; a++)
            if (n->attr.axes >> a & 1u) len *= xs->d[a];
        double k = (2.0 + ceil(log2((double)(len > 1 ? len : 1)))) * ip_unit_roundoff(g->values[n->out].dtype);
        double *te = kf_ip_alloc((size_t)(nx > 0 ? nx : 1) * sizeof *te);
#pragma omp parallel for schedule(static) if (nx >= KF_INTERP_PAR_MIN)
        for (int64_t i = 0; i < nx; i++) te[i] = (eb[0] ? eb[0][i] : 0) + k * fabs(in[0][i]);
        res = kf_ip_alloc((size_t)cnt * sizeof *res);
        *st = ip_rowwise(g, n, in, te, res, err);
        kf_ip_free(te);
        return res;
    }
    if (d->kind == KF_KIND_OWN && d->own_terms && d->own_f64) {
        /* a sum of products (a convolution), bounded as a matmul is: (terms + 1) u times
         * the sum of |x||w| (and |b|), plus each operand's bound carried through with the
         * others' magnitudes (first order; the bias's bound alone) */
        kf_op_dims s = kf_node_dims(g, n);
        double *ab[KF_MAX_NODE_IN] = {0}, *zero[KF_MAX_NODE_IN] = {0};
        const double *args[KF_MAX_NODE_IN];
        for (int a = 0; a < n->nin; a++) {
            int64_t na = ip_numel(&g->values[n->in[a]].shape);
            ab[a] = kf_ip_alloc((size_t)(na > 0 ? na : 1) * sizeof *ab[a]);
            zero[a] = kf_ip_zalloc((size_t)(na > 0 ? na : 1), sizeof *zero[a]);
            #pragma omp parallel for schedule(static) if (na >= KF_INTERP_PAR_MIN)
            for (int64_t i = 0; i < na; i++) ab[a][i] = fabs(in[a][i]);
            args[a] = ab[a];
        }
        res = kf_ip_alloc((size_t)cnt * sizeof *res);
        d->own_f64(&s, &n->attr, args, res);
        double f = (double)(d->own_terms(&s, &n->attr) + 1) * ip_unit_roundoff(g->values[n->out].dtype);
#pragma omp parallel for schedule(static) if (cnt >= KF_INTERP_PAR_MIN)
        for (int64_t i = 0; i < cnt; i++) res[i] *= f;
        double *tmp = any ? kf_ip_alloc((size_t)cnt * sizeof *tmp) : NULL;
        for (int a = 0; a < n->nin && tmp; a++) {
            if (!eb[a]) continue;
            for (int k = 0; k < n->nin; k++) /* the bias's bound alone, the others' with magnitudes */
                args[k] = k == a ? eb[a] : (a >= 2 || k >= 2) ? zero[k] : ab[k];
            d->own_f64(&s, &n->attr, args, tmp);
#pragma omp parallel for schedule(static) if (cnt >= KF_INTERP_PAR_MIN)
            for (int64_t i = 0; i < cnt; i++) res[i] += fabs(tmp[i]);
        }
        kf_ip_free(tmp);
        for (int a = 0; a < n->nin; a++) {
            kf_ip_free(ab[a]);
            kf_ip_free(zero[a]);
        }
        return res;
    }
    kf_dtype odt = g->values[n->out].dtype;
    if ((d->cls == KF_CLASS_REDUCE || d->cls == KF_CLASS_SCAN) && d->combiner == KF_COMB_SUM &&
        odt != KF_I64 && odt != KF_BOOL) {
        /* a sum's own rounding: R terms added in the dtype, in whatever order the kernel
         * chooses, stray up to about R u sum |x| (a contraction's K u sum |a||b|; the
         * verifier's NMSE share divides by the longest such R), a mean's by that over R;
         * plus the sum of its terms' bounds. Without it a sum that nearly cancels against
         * what follows fails an honest kernel that sums in another order. */
        double f = (double)kf_node_sum_terms(g, n) * ip_unit_roundoff(odt);
        int scan = d->cls == KF_CLASS_SCAN;
        res = kf_ip_alloc((size_t)cnt * sizeof *res);
        if (scan) { /* a running sum of magnitudes: |x| as the scan's operand */
            int64_t nx = ip_numel(&g->values[n->in[0]].shape);
            double *ax = kf_ip_alloc((size_t)(nx > 0 ? nx : 1) * sizeof *ax);
#pragma omp parallel for schedule(static) if (nx >= KF_INTERP_PAR_MIN)
            for (int64_t i = 0; i < nx; i++) ax[i] = fabs(in[0][i]);
            const double *ain[1] = {ax};
            *st = ip_rowwise(g, n, ain, NULL, res, err);
            kf_ip_free(ax);
        } else {
            *st = ip_reduce_as(g, n, in[0], res, IP_COMB_ABSSUM, d->mean, err);
        }
#pragma omp parallel for schedule(static) if (cnt >= KF_INTERP_PAR_MIN)
        for (int64_t i = 0; i < cnt; i++) res[i] *= f;
        if (eb[0] && !*st) {
            double *tmp = kf_ip_alloc((size_t)cnt * sizeof *tmp);
            const double *ein[1] = {eb[0]};
            *st = scan ? ip_rowwise(g, n, ein, NULL, tmp, err)
                       : ip_reduce_as(g, n, eb[0], tmp, KF_COMB_SUM, d->mean, err);
#pragma omp parallel for schedule(static) if (cnt >= KF_INTERP_PAR_MIN)
            for (int64_t i = 0; i < cnt; i++) res[i] += tmp[i];
            kf_ip_free(tmp);
        }
        return res;
    }
    if (!any) return NULL;
    if (d->cls == KF_CLASS_POINTWISE) {
        /* the result's spread over the corners of the operands' intervals, and its rounding.
         * As for the softmax (below): the NMSE allowance reads bound / sqrt(K) as the typical
         * error, which a saturating op (a clamp, tanh) breaks when its operand's bound is
         * large: f(E) is capped, f(E / sqrt(K)) is not far below it. So the bound is the
         * larger of the spread over E and sqrt(K) times the spread over E / sqrt(K); for an
         * op linear over the interval the two agree. */
        int two = d->kind == KF_KIND_BINARY;
        int64_t n0 = ip_numel(&g->values[n->in[0]].shape);
        int64_t n1 = two ? ip_numel(&g->values[n->in[1]].shape) : 0;
        const double K = (double)kf_graph_longest_sum(g), rk = K > 1 ? sqrt(K) : 1;
        double *tmp = kf_ip_alloc((size_t)cnt * sizeof *tmp);
        res = kf_ip_zalloc((size_t)cnt, sizeof *res);
        for (int c = 0; c < (two ? 4 : 2) * (rk > 1 ? 2 : 1); c++) {
            /* c >= 4 (2): the corners of the intervals shrunk by sqrt(K) */
            int typ = c >= (two ? 4 : 2);
            double sg = typ ? 1.0 / rk : 1.0, *oa = NULL, *ob = NULL, *s0 = NULL, *s1 = NULL;
            const double *e0 = eb[0], *e1 = two ? eb[1] : NULL;
            if (typ && e0) {
                s0 = kf_ip_alloc((size_t)(n0 > 0 ? n0 : 1) * sizeof *s0);
#pragma omp parallel for schedule(static) if (n0 >= KF_INTERP_PAR_MIN)
                for (int64_t i = 0; i < n0; i++) s0[i] = e0[i] * sg;
                e0 = s0;
            }
            if (typ && e1) {
                s1 = kf_ip_alloc((size_t)(n1 > 0 ? n1 : 1) * sizeof *s1);
#pragma omp parallel for schedule(static) if (n1 >= KF_INTERP_PAR_MIN)
                for (int64_t i = 0; i < n1; i++) s1[i] = e1[i] * sg;
                e1 = s1;
            }
            const double *pa = ip_shifted(in[0], e0, (c & 1) ? -1.0 : 1.0, n0, &oa);
            if (two) {
                const double *pb = ip_shifted(in[1], e1, (c & 2) ? -1.0 : 1.0, n1, &ob);
                ip_binary_into(g, n, pa, pb, tmp);
            } else {
                ip_unary(d, &n->attr, pa, tmp, cnt);
            }
            double w = typ ? rk : 1.0;
#pragma omp parallel for schedule(static) if (cnt >= KF_INTERP_PAR_MIN)
            for (int64_t i = 0; i < cnt; i++) {
                double dv = w * fabs(tmp[i] - out[i]);
                if (isfinite(dv) && dv > res[i]) res[i] = dv;
            }
            kf_ip_free(oa);
            kf_ip_free(ob);
            kf_ip_free(s0);
            kf_ip_free(s1);
        }
        kf_ip_free(tmp);
        double u = ip_unit_roundoff(g->values[n->out].dtype);
#pragma omp parallel for schedule(static) if (cnt >= KF_INTERP_PAR_MIN)
        for (int64_t i = 0; i < cnt; i++)
            if (isfinite(out[i])) res[i] += u * fabs(out[i]);
        return res;
    }
    if (d->cls == KF_CLASS_REDUCE && (d->combiner == KF_COMB_SUM || d->combiner == KF_COMB_MAX ||
                                      d->combiner == KF_COMB_MIN)) {
        /* a max or min is one of its terms: its bound is the largest of theirs (an integer
         * sum's, the sum of theirs) */
        int sum = d->combiner == KF_COMB_SUM;
        res = kf_ip_alloc((size_t)cnt * sizeof *res);
        *st = ip_reduce_as(g, n, eb[0], res, sum ? KF_COMB_SUM : KF_COMB_MAX, sum && d->mean, err);
        return res;
    }
    /* a composite with its record's bound of one row (the bound of x; its weight and bias
     * are taken as exact) */
    if (eb[0] && d->kind == KF_KIND_REDUCE && d->f64_rows_bound) {
        res = kf_ip_alloc((size_t)cnt * sizeof *res);
        *st = ip_reduce_rows(g, n, in[0], eb[0], res, err);
        return res;
    }
    /* a view moves its operand's bounds with its elements (a pad's constant is exact) */
    if (eb[0] && d->cls == KF_CLASS_VIEW) {
        res = kf_ip_alloc((size_t)cnt * sizeof *res);
        *st = ip_gather(g, n, eb[0], res, 0.0, 0, err);
        return res;
    }
    /* an integer running sum carries the running sum of its terms' bounds */
    if (eb[0] && d->cls == KF_CLASS_SCAN && d->combiner == KF_COMB_SUM) {
        const double *ein[1] = {eb[0]};
        res = kf_ip_alloc((size_t)cnt * sizeof *res);
        *st = ip_rowwise(g, n, ein, NULL, res, err);
        return res;
    }
    if (eb[0] && d->kind == KF_KIND_SOFTMAX && d->f64_row_bound) {
        res = kf_ip_alloc((size_t)cnt * sizeof *res);
        *st = ip_rowwise(g, n, in, eb[0], res, err);
        /* The verifier's NMSE allowance takes bound / sqrt(K) as an honest kernel's typical
         * error (K: the graph's longest sum, compare.c), which holds where the bound grows
         * with its operand's at least linearly. A softmax's saturates (p_i stays in [0, 1]):
         * with its operand's bound E large, f(E) / sqrt(K) is far below f(E / sqrt(K)), the
         * bound of the typical operand error, and an honest float32 kernel failed the NMSE
         * (a GEMM and a batch norm before it, offset inputs). So the bound is the larger of
         * f(E) (the element check's worst case) and sqrt(K) f(E / sqrt(K)); the two agree
         * where f is linear (log_softmax), and the softmax's result is never below f(E). */
        const double K = (double)kf_graph_longest_sum(g);
        if (!d->log_out && K > 1 && !*st) {
            int64_t nx = ip_numel(&g->values[n->in[0]].shape);
            double rk = sqrt(K), *es = kf_ip_alloc((size_t)(nx > 0 ? nx : 1) * sizeof *es);
            double *typ = kf_ip_alloc((size_t)cnt * sizeof *typ);
#pragma omp parallel for schedule(static) if (nx >= KF_INTERP_PAR_MIN)
            for (int64_t i = 0; i < nx; i++) es[i] = eb[0][i] / rk;
            *st = ip_rowwise(g, n, in, es, typ, err);
            if (!*st)
#pragma omp parallel for schedule(static) if (cnt >= KF_INTERP_PAR_MIN)
                for (int64_t i = 0; i < cnt; i++) res[i] = fmax(res[i], rk * typ[i]);
            kf_ip_free(es);
            kf_ip_free(typ);
        }
        return res;
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Views                                                                                 */

/* A view node as a direct gather through its own map: out[o] = x[map(o)], or the map's
 * pad value where a guard fails. Independent of the planner's folding and composition. */
static kf_status ip_gather(const kf_graph *g, const kf_node *n, const double *x, double *out, double pad,
                           int own_pad, kf_error *err) {
    kf_imap m;
    kf_status st = kf_node_imap(g, n, &m, err);
    if (st != KF_OK) return st;
    int64_t cnt = ip_numel(&g->values[n->out].shape);
    /* in chunks of output elements on the threads (a pooling window's gather at official
     * GPU shapes is gigabytes); each chunk a row of the last dim at a time (kf_imap_gather:
     * the same reads as kf_imap_apply per element) */
    int64_t chunk = 1 << 16, nch = (cnt + chunk - 1) / chunk;
    double fill = own_pad ? m.pad : pad;
#pragma omp parallel for schedule(dynamic, 1) if (nch > 1)
    for (int64_t c = 0; c < nch; c++) {
        int64_t e0 = c * chunk, e1 = e0 + chunk < cnt ? e0 + chunk : cnt;
        kf_imap_gather(&m, x, fill, e0, e1, out + e0);
    }
    return KF_OK;
}

static kf_status ip_view(const kf_graph *g, const kf_node *n, const double *x, double *out, kf_error *err) {
    return ip_gather(g, n, x, out, 0, 1, err);
}

/* ------------------------------------------------------------------------------------ */
/* Driver                                                                                */

static kf_status ip_node(const kf_graph *g, const kf_node *n, const double *const *in,
                         double *out, kf_error *err) {
    const kf_op_def *info = kf_op_get(n->op);
    const kf_value *ov = &g->values[n->out];
    switch (info->kind) {
    case KF_KIND_UNARY:
        ip_unary(info, &n->attr, in[0], out, ip_numel(&ov->shape));
        return KF_OK;
    case KF_KIND_BINARY: {
        int64_t st[2][KF_MAX_DIMS];
        for (int k = 0; k < 2; k++)
            if (!ip_bcast_strides(&g->values[n->in[k]].shape, &ov->shape, st[k]))
                return kf_error_set(err, KF_ERR_TYPE, g->path, n->line, n->col,
                                    "%s: operand %d does not broadcast to the result",
                                    info->name, k + 1);
        if (ip_numel(&ov->shape) == 0) return KF_OK;
        ip_plan p;
        ip_plan_init(&p, ov->shape.rank, ov->shape.d, 2, st);
        ip_plan_exec(&p, info, &n->attr, in[0], in[1], out);
        return KF_OK;
    }
    case KF_KIND_REDUCE:
        if (info->cls != KF_CLASS_REDUCE) return ip_reduce_rows(g, n, in[0], NULL, out, err);
        return ip_reduce(g, n, in[0], out, err);
    case KF_KIND_SOFTMAX:
    case KF_KIND_SCAN:
    case KF_KIND_NORM: return ip_rowwise(g, n, in, NULL, out, err);
    case KF_KIND_MATMUL: return ip_matmul(g, n, in[0], in[1], out, err);
    case KF_KIND_VIEW: return ip_view(g, n, in[0], out, err);
    case KF_KIND_OWN:
    case KF_KIND_GATHER: { /* the record's own reference over whole tensors */
        kf_op_dims s = kf_node_dims(g, n);
        info->own_f64(&s, &n->attr, in, out);
        return KF_OK;
    }
    }
    return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, n->line, n->col,
                        "op %s is not supported by the interpreter", info->name);
}

/* ------------------------------------------------------------------------------------ */
/* Pointwise graphs, chunk by chunk                                                      */

/* The shape every live node of g produces when g is a chain of elementwise (unary and
 * binary) ops over one shape, whose operands have that shape, a single element, or (graph
 * inputs) a shape that broadcasts to it, and whose outputs are all computed by nodes; NULL
 * otherwise (kf_interp_fusable). */
static const kf_shape *ip_fused_shape(const kf_graph *g, const char *live) {
    if (g->noutputs < 1) return NULL;
    const kf_value *o0 = &g->values[g->outputs[0]];
    const kf_shape *sh = &o0->shape;
    int any = 0;
    for (int j = 0; j < g->noutputs; j++) {
        const kf_value *v = &g->values[g->outputs[j]];
        if (v->producer < 0 || !kf_shape_equal(&v->shape, sh)) return NULL;
    }
    for (int k = 0; k < g->nnodes; k++) {
        if (!live[k]) continue;
        const kf_node *n = &g->nodes[k];
        const kf_op_def *d = kf_op_get(n->op);
        if ((d->kind != KF_KIND_UNARY && d->kind != KF_KIND_BINARY) || !d->f64) return NULL;
        if (!kf_shape_equal(&g->values[n->out].shape, sh)) return NULL;
        for (int a = 0; a < n->nin; a++) {
            const kf_value *iv = &g->values[n->in[a]];
            int64_t st[KF_MAX_DIMS];
            if (kf_shape_equal(&iv->shape, sh) || ip_numel(&iv->shape) == 1) continue;
            if (iv->input_index < 0 || !ip_bcast_strides(&iv->shape, sh, st)) return NULL;
        }
        any = 1;
    }
    return any ? sh : NULL;
}

/* The nodes that an output needs (the walk's liveness). */
static void ip_liveness(const kf_graph *g, char *need, char *live) {
    for (int j = 0; j < g->noutputs; j++) need[g->outputs[j]] = 1;
    for (int k = g->nnodes - 1; k >= 0; k--) {
        const kf_node *n = &g->nodes[k];
        if (!need[n->out]) continue;
        live[k] = 1;
        for (int a = 0; a < n->nin; a++) need[n->in[a]] = 1;
    }
}

int kf_interp_fusable(const kf_graph *g) {
    if (!g) return 0;
    char *need = kf_ip_zalloc((size_t)g->nvalues + 1, 1);
    char *live = kf_ip_zalloc((size_t)g->nnodes + 1, 1);
    ip_liveness(g, need, live);
    int ok = ip_fused_shape(g, live) != NULL;
    kf_ip_free(need);
    kf_ip_free(live);
    return ok;
}

/* A pointwise graph's plan for running it chunk by chunk (ip_fused_shape): where each value
 * of a chunk lives (the caller's output arrays, or a row of the thread's scratch) and the
 * element strides of graph inputs that broadcast to the shape. */
typedef struct {
    const kf_graph *g;
    const char *live;
    const kf_shape *sh;
    int64_t N;                    /* the shape's element count */
    double **dest;                /* per value: the caller's output array, or NULL */
    int *slot;                    /* per value: its scratch row, or -1 */
    int nslots, ngather, *gv;     /* the broadcast inputs gathered per chunk */
    int64_t (*gst)[KF_MAX_DIMS];
} ip_fused;

static void ip_fused_init(ip_fused *f, const kf_graph *g, const char *live, double *const *outputs) {
    int nv = g->nvalues;
    f->g = g;
    f->live = live;
    f->sh = &g->values[g->outputs[0]].shape;
    f->N = ip_numel(f->sh);
    f->dest = kf_ip_zalloc((size_t)nv + 1, sizeof *f->dest);
    f->slot = kf_ip_alloc(((size_t)nv + 1) * sizeof *f->slot);
    f->nslots = 0;
    for (int j = 0; j < g->noutputs; j++)
        if (!f->dest[g->outputs[j]]) f->dest[g->outputs[j]] = outputs[j];
    for (int v = 0; v < nv; v++) f->slot[v] = -1;
    for (int k = 0; k < g->nnodes; k++)
        if (live[k] && !f->dest[g->nodes[k].out] && f->slot[g->nodes[k].out] < 0) f->slot[g->nodes[k].out] = f->nslots++;
    /* graph inputs broadcast to the shape (a bias row, a column): gathered per chunk into a
     * row of their own, from the element strides of the broadcast */
    f->ngather = 0;
    f->gv = kf_ip_alloc(((size_t)g->ninputs + 1) * sizeof *f->gv);
    f->gst = kf_ip_alloc(((size_t)g->ninputs + 1) * sizeof *f->gst);
    for (int i = 0; i < g->ninputs; i++) {
        const kf_value *iv = &g->values[g->inputs[i]];
        if (kf_shape_equal(&iv->shape, f->sh) || ip_numel(&iv->shape) == 1 ||
            !ip_bcast_strides(&iv->shape, f->sh, f->gst[f->ngather]))
            continue;
        f->gv[f->ngather++] = g->inputs[i];
        f->slot[g->inputs[i]] = f->nslots++;
    }
}

static void ip_fused_free(ip_fused *f) {
    kf_ip_free(f->dest);
    kf_ip_free(f->slot);
    kf_ip_free(f->gv);
    kf_ip_free(f->gst);
}

/* Elements [i0, i0 + len) (len <= KF_INTERP_CHUNK) of every live node, in scratch (room
 * for nslots rows of KF_INTERP_CHUNK). Arrays of the shape (graph inputs of the shape, the
 * caller's outputs) hold element e at index e - shift; broadcast inputs are whole. Returns
 * 1 when an f32 value went beyond 2^124 (check_far: looked for). */
static int ip_fused_chunk(const ip_fused *f, const double *const *inputs, double *scratch, int64_t i0, int64_t len,
                          int64_t shift, int check_far) {
    const kf_graph *g = f->g;
    const kf_shape *sh = f->sh;
    int far = 0;
    for (int q = 0; q < f->ngather; q++) { /* this chunk's elements of each broadcast input */
        const double *src = inputs[g->values[f->gv[q]].input_index];
        double *row = scratch + (size_t)f->slot[f->gv[q]] * KF_INTERP_CHUNK;
        int64_t idx[KF_MAX_DIMS], off = 0, rest = i0;
        for (int d = sh->rank - 1; d >= 0; d--) {
            idx[d] = sh->d[d] ? rest % sh->d[d] : 0;
            rest = sh->d[d] ? rest / sh->d[d] : 0;
            off += idx[d] * f->gst[q][d];
        }
        for (int64_t e = 0; e < len; e++) {
            row[e] = src[off];
            for (int d = sh->rank - 1; d >= 0; d--) { /* the next element's index */
                off += f->gst[q][d];
                if (++idx[d] < sh->d[d]) break;
                off -= idx[d] * f->gst[q][d];
                idx[d] = 0;
            }
        }
    }
    for (int k = 0; k < g->nnodes; k++) {
        if (!f->live[k]) continue;
        const kf_node *n = &g->nodes[k];
        const kf_op_def *d = kf_op_get(n->op);
        const double *in[2] = {NULL, NULL};
        int64_t st[2] = {0, 0};
        for (int a = 0; a < n->nin && a < 2; a++) {
            int u = n->in[a];
            const kf_value *uv = &g->values[u];
            if (uv->is_const) { /* a literal: one value for every element */
                in[a] = &uv->cval;
            } else if (f->slot[u] >= 0) { /* an intermediate or a gathered input: this chunk's row */
                in[a] = scratch + (size_t)f->slot[u] * KF_INTERP_CHUNK;
                st[a] = 1;
            } else { /* a graph input or an output computed before: whole arrays */
                const double *base = uv->input_index >= 0 ? inputs[uv->input_index] : f->dest[u];
                int whole = ip_numel(&uv->shape) != 1 || f->N == 1;
                in[a] = whole ? base + (i0 - shift) : base;
                st[a] = whole;
            }
        }
        double *out = f->dest[n->out] ? f->dest[n->out] + (i0 - shift)
                                      : scratch + (size_t)f->slot[n->out] * KF_INTERP_CHUNK;
        if (d->kind == KF_KIND_UNARY) d->f64(in[0], 1, NULL, 0, out, len, &n->attr);
        else d->f64(in[0], st[0], in[1], st[1], out, len, &n->attr);
        if (check_far && !far && g->values[n->out].dtype == KF_F32) {
            /* finite beyond 2^124 (fabs < inf is isfinite: NaN compares false), in a loop
             * without an exit that GCC vectorises: with the exit it was a third of a
             * ten-node chain's reference (docs/benchmarks/loop.md, the reference pass) */
            int64_t any = 0;
#if defined(__GNUC__) && !defined(__clang__)
            /* (clang, the fuzz build's compiler, reports the hint it cannot follow as an error
             * under -Werror) */
#pragma omp simd reduction(| : any)
#endif
            for (int64_t e = 0; e < len; e++) {
                double a = fabs(out[e]);
                any |= a > 0x1p124 && a < HUGE_VAL;
            }
            far = any != 0;
        }
    }
    return far;
}

/* A pointwise graph (ip_fused_shape) run chunk by chunk: every node over KF_INTERP_CHUNK
 * elements before the next chunk, the intermediates in a scratch row per thread (in cache,
 * never a whole-tensor allocation). The same f64 calls on the same elements as the
 * node-by-node walk, so the same results bit for bit; beyond as the walk's. */
static kf_status ip_run_fused(const kf_graph *g, const char *live, const double *const *inputs,
                              double *const *outputs, int *beyond) {
    ip_fused f;
    ip_fused_init(&f, g, live, outputs);
    int64_t N = f.N, chunks = (N + KF_INTERP_CHUNK - 1) / KF_INTERP_CHUNK;
    int far = 0;
#pragma omp parallel if (N >= KF_INTERP_PAR_MIN) reduction(| : far)
    {
        double *scratch = kf_ip_alloc(sizeof(double) * (size_t)KF_INTERP_CHUNK * (size_t)(f.nslots ? f.nslots : 1));
#pragma omp for schedule(static)
        for (int64_t c = 0; c < chunks; c++) {
            int64_t i0 = c * KF_INTERP_CHUNK, len = N - i0 < KF_INTERP_CHUNK ? N - i0 : KF_INTERP_CHUNK;
            far |= ip_fused_chunk(&f, inputs, scratch, i0, len, 0, beyond && !far);
        }
        kf_ip_free(scratch);
    }
    /* an output named twice: the second gets the first's values */
    for (int j = 0; j < g->noutputs; j++)
        if (f.dest[g->outputs[j]] != outputs[j]) memcpy(outputs[j], f.dest[g->outputs[j]], (size_t)N * sizeof(double));
    if (beyond) *beyond = far;
    ip_fused_free(&f);
    return KF_OK;
}

/* Contract: see ir.h. */
kf_status kf_interp_run_span(const kf_graph *g, int64_t lo, int64_t n, const double *const *inputs,
                             double *const *outputs, int *beyond_f32, kf_error *err) {
    if (beyond_f32) *beyond_f32 = 0;
    if (!g || !inputs || !outputs) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_interp_run_span: missing argument");
    char *need = kf_calloc((size_t)g->nvalues + 1, 1);
    char *live = kf_calloc((size_t)g->nnodes + 1, 1);
    ip_liveness(g, need, live);
    const kf_shape *sh = ip_fused_shape(g, live);
    kf_status st = KF_OK;
    if (!sh || lo < 0 || n < 0 || lo + n > ip_numel(sh)) {
        st = kf_error_set(err, KF_ERR_ARG, g->path, 0, 0,
                          sh ? "kf_interp_run_span: elements [%lld, %lld) outside the shape"
                             : "kf_interp_run_span: the graph is not pointwise over one shape",
                          (long long)lo, (long long)(lo + n));
        goto done;
    }
    ip_fused f;
    ip_fused_init(&f, g, live, outputs);
    double *scratch = kf_malloc(sizeof(double) * (size_t)KF_INTERP_CHUNK * (size_t)(f.nslots ? f.nslots : 1));
    int far = 0;
    for (int64_t i0 = lo; i0 < lo + n; i0 += KF_INTERP_CHUNK) {
        int64_t len = lo + n - i0 < KF_INTERP_CHUNK ? lo + n - i0 : KF_INTERP_CHUNK;
        far |= ip_fused_chunk(&f, inputs, scratch, i0, len, lo, beyond_f32 && !far);
    }
    free(scratch);
    for (int j = 0; j < g->noutputs; j++)
        if (f.dest[g->outputs[j]] != outputs[j]) memcpy(outputs[j], f.dest[g->outputs[j]], (size_t)n * sizeof(double));
    if (beyond_f32) *beyond_f32 = far;
    ip_fused_free(&f);
done:
    free(need);
    free(live);
    kf_ip_pool_end_walk();
    return st;
}

/* Contract: see ir.h. g must be type-checked (kf_graph_add_node / the parser do this).
 * inputs[i] holds numel(g->inputs[i]) doubles, outputs[j] room for numel(g->outputs[j]).
 * Returns KF_OK, KF_ERR_ARG for missing buffers or an empty-axis max/argmax, KF_ERR_TYPE /
 * KF_ERR_INTERNAL for shapes that contradict the op, KF_ERR_UNSUPPORTED for dtypes/ops
 * this interpreter does not evaluate. Nothing is retained; outputs may be partly written
 * on failure. */
kf_status kf_interp_walk(const kf_graph *g, const double *const *inputs, double *const *outputs,
                         double *const *bounds, int *beyond, int rows, kf_error *err) {
    if (!g) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_interp_run: no graph");
    if ((g->ninputs > 0 && !inputs) || (g->noutputs > 0 && !outputs))
        return kf_error_set(err, KF_ERR_ARG, g->path, 0, 0,
                            "kf_interp_run: missing input or output array");
    int nv = g->nvalues;
    const double **ptr = kf_ip_zalloc((size_t)nv + 1, sizeof *ptr);
    double **owned = kf_ip_zalloc((size_t)nv + 1, sizeof *owned);
    double **dest = kf_ip_zalloc((size_t)nv + 1, sizeof *dest); /* caller's output array */
    int *last = kf_ip_alloc(((size_t)nv + 1) * sizeof *last);
    char *need = kf_ip_zalloc((size_t)nv + 1, 1);
    char *live = kf_ip_zalloc((size_t)g->nnodes + 1, 1);
    double **eb = bounds ? kf_ip_zalloc((size_t)nv + 1, sizeof *eb) : NULL; /* NULL: exact */
    kf_status st = KF_OK;

    for (int v = 0; v < nv; v++) {
        last[v] = -1;
        if ((int)g->values[v].dtype < 0 || (int)g->values[v].dtype >= (int)KF_DTYPE_COUNT) {
            st = kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, g->values[v].line,
                              g->values[v].col, "value %s has an unknown dtype",
                              g->values[v].name);
            goto done;
        }
        if (g->values[v].is_const) ptr[v] = &g->values[v].cval;
    }
    for (int i = 0; i < g->ninputs; i++) {
        int v = g->inputs[i];
        if (!inputs[i] && ip_numel(&g->values[v].shape) > 0) {
            st = kf_error_set(err, KF_ERR_ARG, g->path, 0, 0, "input %d (%s) has no data", i,
                              g->values[v].name);
            goto done;
        }
        ptr[v] = inputs[i];
    }
    for (int j = 0; j < g->noutputs; j++) {
        int v = g->outputs[j];
        assert(v >= 0 && v < nv);
        if (!outputs[j] && ip_numel(&g->values[v].shape) > 0) {
            st = kf_error_set(err, KF_ERR_ARG, g->path, 0, 0, "output %d (%s) has no room", j,
                              g->values[v].name);
            goto done;
        }
        need[v] = 1;
        if (g->values[v].producer >= 0 && !dest[v]) dest[v] = outputs[j];
    }
    /* liveness: a node runs only if its result is needed */
    ip_liveness(g, need, live);
    /* a pointwise graph without bounds: chunk by chunk (issue 30: the reference of a 16M
     * element swish walked node by node spent as much on faulting in its whole-tensor
     * intermediates as on computing them) */
    if (!bounds && ip_fused_shape(g, live)) {
        st = ip_run_fused(g, live, inputs, outputs, beyond);
        goto done;
    }
    /* a graph local to the rows of axis 0: a chunk of rows at a time on the threads, so that
     * no intermediate is a whole tensor and no pass runs on one core (interp_rows.c) */
    if (rows && kf_interp_run_rows(g, live, inputs, outputs, bounds, beyond, &st, err)) goto done;
    for (int k = 0; k < g->nnodes; k++)
        if (live[k])
            for (int a = 0; a < g->nodes[k].nin; a++) last[g->nodes[k].in[a]] = k;

    for (int k = 0; k < g->nnodes && !st; k++) {
        if (!live[k]) continue;
        const kf_node *n = &g->nodes[k];
        const kf_value *ov = &g->values[n->out];
        const double *in[KF_MAX_NODE_IN] = {0};
        assert(n->nin >= 1 && n->nin <= KF_MAX_NODE_IN);
        for (int a = 0; a < n->nin; a++) {
            in[a] = ptr[n->in[a]];
            if (!in[a] && ip_numel(&g->values[n->in[a]].shape) > 0) {
                st = kf_error_set(err, KF_ERR_INTERNAL, g->path, n->line, n->col,
                                  "operand %s used before it is defined",
                                  g->values[n->in[a]].name);
                break;
            }
        }
        if (st) break;
        double *out = dest[n->out];
        if (!out && !eb && kf_op_is_elementwise(n->op)) {
            /* reuse a dying operand of the same shape: out[i] reads only operand[i] */
            for (int a = 0; a < n->nin && !out; a++) {
                int u = n->in[a];
                if (owned[u] && last[u] == k && kf_shape_equal(&g->values[u].shape, &ov->shape)) {
                    out = owned[u];
                    owned[u] = NULL;
                }
            }
        }
        if (!out) {
            int64_t cnt = ip_numel(&ov->shape);
            out = kf_ip_alloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *out);
            owned[n->out] = out;
        } else if (!dest[n->out]) {
            owned[n->out] = out;
        }
        ptr[n->out] = out;
        st = ip_node(g, n, in, out, err);
        if (beyond && !st && !*beyond && g->values[n->out].dtype == KF_F32) {
            /* within 16x of float32's largest value (2^128), the order of a float32 sum
             * decides whether it overflows: -3.2e38 as a sum of terms near 1e38 */
            int64_t cnt = ip_numel(&ov->shape);
            int far = 0;
#pragma omp parallel for schedule(static) reduction(| : far) if (cnt >= KF_INTERP_PAR_MIN)
            for (int64_t e = 0; e < cnt; e++) far |= fabs(out[e]) > 0x1p124 && isfinite(out[e]);
            *beyond = far;
        }
        if (eb && !st) {
            const double *ein[KF_MAX_NODE_IN] = {0};
            for (int a = 0; a < n->nin; a++) ein[a] = eb[n->in[a]];
            eb[n->out] = ip_bound(g, n, in, ein, out, &st, err);
        }
        for (int a = 0; a < n->nin; a++) {
            int u = n->in[a];
            if (last[u] == k && owned[u]) {
                kf_ip_free(owned[u]);
                owned[u] = NULL;
                ptr[u] = NULL;
            }
            if (eb && last[u] == k && !dest[u]) {
                kf_ip_free(eb[u]);
                eb[u] = NULL;
            }
        }
    }
    if (st) goto done;
    for (int j = 0; bounds && j < g->noutputs; j++) {
        int64_t cnt = ip_numel(&g->values[g->outputs[j]].shape);
        const double *e = eb[g->outputs[j]];
        if (!bounds[j] || cnt == 0) continue;
        if (e) memcpy(bounds[j], e, (size_t)cnt * sizeof *e);
        else memset(bounds[j], 0, (size_t)cnt * sizeof *bounds[j]);
    }
    /* outputs that were not written in place: graph inputs and repeated outputs */
    for (int j = 0; j < g->noutputs; j++) {
        int v = g->outputs[j];
        int64_t cnt = ip_numel(&g->values[v].shape);
        if (cnt == 0 || dest[v] == outputs[j]) continue;
        if (g->values[v].is_const) {
            for (int64_t e = 0; e < cnt; e++) outputs[j][e] = g->values[v].cval;
            continue;
        }
        const double *src = dest[v] ? dest[v] : ptr[v];
        assert(src);
        memmove(outputs[j], src, (size_t)cnt * sizeof *outputs[j]);
    }
done:
    for (int v = 0; v < nv; v++) {
        kf_ip_free(owned[v]);
        if (eb) kf_ip_free(eb[v]);
    }
    kf_ip_free(eb);
    kf_ip_free(ptr);
    kf_ip_free(owned);
    kf_ip_free(dest);
    kf_ip_free(last);
    kf_ip_free(need);
    kf_ip_free(live);
    if (rows) kf_ip_pool_end_walk(); /* the outermost walk: nothing kept past it, unless held */
    return st;
}

kf_status kf_interp_run(const kf_graph *g, const double *const *inputs, double *const *outputs,
                        kf_error *err) {
    return kf_interp_walk(g, inputs, outputs, NULL, NULL, 1, err);
}

/* Contract: see ir.h. */
kf_status kf_interp_run_bounds(const kf_graph *g, const double *const *inputs,
                               double *const *outputs, double *const *bounds, kf_error *err) {
    return kf_interp_walk(g, inputs, outputs, bounds, NULL, 1, err);
}

kf_status kf_interp_run_checked(const kf_graph *g, const double *const *inputs, double *const *outputs,
                                double *const *bounds, int *beyond_f32, kf_error *err) {
    *beyond_f32 = 0;
    return kf_interp_walk(g, inputs, outputs, bounds, beyond_f32, 1, err);
}
