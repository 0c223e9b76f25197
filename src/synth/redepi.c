/*
 * Reduction epilogues of the CPU GEMM (issue 29): a reduction over the product's last axis
 * (N), possibly of an elementwise chain of it (the reduction's fused prologue), computed in
 * the GEMM's store stage instead of from a stored [.., M, N] product.
 *
 * The GEMM hands every run of complete sums of one row to NAME_epi (kf_matmul_desc.epi, the
 * hook the elementwise epilogue uses). Here NAME_epi computes the chain on the run (the
 * prologue function kf_pro<r>, whose input is the run itself) and combines it into the
 * calling thread's partial of that row: part[tid * R + row], R rows, a double per row and
 * thread. Tasks that share rows run on different threads (the GEMM cuts N among tasks), and
 * a thread runs its tasks one after another, so no partial is ever written by two threads:
 * no atomics. After the GEMM, a second small pass (NAME_red, serial: T x R values) combines
 * the threads' partials of each row in thread order and writes the reduction's result
 * (divided by N for a mean). The product's buffer stays the GEMM's C: it holds the partial
 * K-sums where K is cut into slices; with one slice it is never written.
 *
 * Decided by kf_synth_fuse_reductions after the other fusions; the parameter
 * "<prefix>red" (1 fused, 0 apart: kf_synth_render's partition) keeps it a searched choice,
 * and the reduction's own parameters are gated on red=0 (plan_params).
 * The op's identity comes from its record only: its class, combiner and mean flag.
 */
#include "synth_int.h"
#include "render/render.h"

#include <stdio.h>
#include <string.h>

/* The combiners this fusion computes (sum and mean, max, min), and the reduce-shaped
 * composite with the log-sum-exp combiner that the CPU keeps unlowered after a product
 * (kf_synth_cpu_keeps). */
static int red_comb_ok(const kf_op_def *d) {
    if (d->cls == KF_CLASS_COMPOSITE) return d->kind == KF_KIND_REDUCE && d->combiner == KF_COMB_LOGSUMEXP;
    return d->cls == KF_CLASS_REDUCE && !kf_op_is_arg(d) &&
           (d->combiner == KF_COMB_SUM || d->combiner == KF_COMB_MAX || d->combiner == KF_COMB_MIN);
}

/* 1 for a log-sum-exp node, whose partial is a pair (max, sum of exp around it). */
static int is_lse(const kf_op_def *d) { return d->combiner == KF_COMB_LOGSUMEXP; }

/* 1 when reduction node n reduces its input's last axis and otherwise only axes of size 1. */
static int reduces_last_axis(const kf_graph *g, const kf_node *n) {
    const kf_shape *sh = &g->values[n->in[0]].shape;
    if (sh->rank < 1 || !((n->attr.axes >> (sh->rank - 1)) & 1u)) return 0;
    for (int j = 0; j < sh->rank - 1; j++)
        if (((n->attr.axes >> j) & 1u) && sh->d[j] != 1) return 0;
    return 1;
}

void kf_synth_fuse_reductions(kf_synth *s) {
    const kf_graph *g = s->g;
    const int gpu = kf_synth_is_gpu(s->platform);
    for (int k = 0; k < s->nst; k++) {
        kf_stage *h = &s->st[k];
        if (h->kind != KF_STAGE_MATMUL || h->fused || h->chain_mm || h->epilogue || h->redepi || !h->tpl ||
            !h->tpl->epilogue || h->nalts != 1 || h->mm.gb.on)
            continue;
        /* GPUs: the SIMT matmul's store stage (gpu_redepi.c); CPUs: the GEMM's hook */
        if (gpu ? !h->tpl->row_reduce : !h->tpl->cpu_emit_fn) continue;
        /* (an empty product hands its zeros to the hook in runs that cross rows) */
        if (h->mm.M == 0 || h->mm.N == 0 || h->mm.K == 0) continue;
        int y = g->nodes[h->nodes[0]].out;
        if (g->values[y].output_index >= 0 || (s->out_alias && s->out_alias[y] >= 0)) continue;
        if (g->values[y].dtype != KF_F32) continue;
        int ok = 1;
        for (int v = 0; v < g->nvalues && ok; v++) /* y only through the reduction (no relabelling) */
            if (s->alias && s->alias[v] == y) ok = 0;
        int r = -1; /* the one stage that reads y: the reduction, or the elementwise stage fused into it */
        for (int j = 0; j < s->nst && ok; j++) {
            if (j == k || !kf_synth_stage_reads(s, j, y)) continue;
            if (r >= 0 || j < k) ok = 0;
            r = j;
        }
        if (!ok || r < 0) continue;
        int pro = -1;
        if (s->st[r].kind == KF_STAGE_EWISE) { /* a prologue: find the reduction it is fused into */
            if (!s->st[r].fused) continue;
            pro = r;
            r = s->st[pro].fused_into;
            if (s->st[r].prologue != pro + 1) continue;
        }
        kf_stage *rs = &s->st[r];
        /* (GPUs: the combine launch stores the result, so a fused epilogue of the
         * reduction takes it there, gpu_redepi.c) */
        if (rs->kind != KF_STAGE_REDUCE || rs->fused || (rs->epilogue && !gpu) || rs->nalts != 1) continue;
        const kf_node *rn = &g->nodes[rs->nodes[0]];
        if (!red_comb_ok(kf_op_get(rn->op)) || !reduces_last_axis(g, rn)) continue;
        int64_t N = h->mm.N, rows = h->mm.batch * h->mm.M;
        if (kf_shape_numel(&g->values[rn->in[0]].shape) != rows * N ||
            kf_shape_numel(&g->values[rn->out].shape) != rows || g->values[rn->out].dtype != KF_F32)
            continue;
        if (pro < 0) {
            if (rn->in[0] != y) continue;
        } else {
            const kf_stage *ps = &s->st[pro];
            if (!kf_synth_epilogue_ok(s, ps, y) || kf_shape_numel(&ps->dom) != rows * N) continue;
            kf_ew_layout lay;
            kf_synth_ewise_layout(s, ps, &lay);
            if (lay.nbufs != lay.nreads) continue; /* a view read: not a prologue form */
            for (int b = 0; b < lay.nbufs; b++)
                if (lay.bufs[b] != y && s->val_stage[lay.bufs[b]] > k) ok = 0; /* not ready yet */
            /* GPUs: the chain computes its value x only (gpu_redepi.c kf_rp<x>), and the
             * product kernel takes its operands besides A and B (or a fused prologue's
             * operands) and the partials, within the kernel form's parameter limit */
            if (gpu) {
                int np = 2 + 1 + (lay.nbufs - 1);
                if (h->prologue) {
                    kf_ew_layout pl;
                    kf_synth_ewise_layout(s, &s->st[h->prologue - 1], &pl);
                    np += pl.nbufs;
                }
                if (lay.nops != lay.nreads || np > KF_GK_MAX_PARAMS) ok = 0;
            }
            if (!ok) continue;
        }
        h->redepi = r + 1;
        if (gpu) s->materialize[y] = 0; /* per-block partials instead (red=0 stores it again) */
        else h->mm.epi = 1;
        rs->fused = 1;
        rs->fused_into = k;
    }
}

/* The reduction's operands other than y: its prologue's reads (or none). */
static int red_reads(const kf_synth *s, const kf_stage *rs, int y, int *v) {
    int n = 0;
    if (!rs->prologue) return 0;
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, &s->st[rs->prologue - 1], &lay);
    for (int r = 0; r < lay.nreads; r++)
        if (lay.v[r] != y) v[n++] = lay.v[r];
    return n;
}

void kf_synth_redepi_glue(const kf_synth *s, int k, const char *fname, kf_buf *o) {
    const kf_graph *g = s->g;
    const kf_stage *h = &s->st[k], *rs = &s->st[h->redepi - 1];
    const kf_node *rn = &g->nodes[rs->nodes[0]];
    const kf_op_def *d = kf_op_get(rn->op);
    int y = g->nodes[h->nodes[0]].out;
    int64_t N = h->mm.N, R = h->mm.batch * h->mm.M;
    int v[KF_EW_MAX_OPS], nv = red_reads(s, rs, y, v);
    char pname[40];
    snprintf(pname, sizeof pname, "kf_pro%d", rs->index);
    if (rs->prologue) {
        kf_buf_puts(o, "\n");
        kf_synth_prologue_emit(s, &s->st[rs->prologue - 1], rn->in[0], y, pname, o);
    }
    kf_buf_printf(o, "typedef struct %s_ex {", fname);
    for (int i = 0; i < nv; i++) kf_buf_printf(o, " const %s *b%d;", kf_synth_ctype(g, v[i]), v[i]);
    kf_buf_printf(o, " double *part; } %s_ex;\n", fname);
    const int w = is_lse(d) ? 2 : 1; /* doubles per partial */
    kf_buf_printf(o,
                  "/* %s over each row of %lld: a run of the row's sums into this thread's partial */\n"
                  "static inline void %s_epi(const %s_ex *x, long f, long len, const float *in) {\n"
                  "    double *acc = x->part + %d * ((long)omp_get_thread_num() * %lldL + f / %lldL);\n",
                  d->name, (long long)N, fname, fname, w, (long long)R, (long long)N);
    if (rs->prologue) {
        kf_buf_printf(o,
                      "    float t[64];\n"
                      "    while (len > 0) {\n"
                      "        const long n = len < 64 ? len : 64;\n"
                      "        %s(f, n, t", pname);
        kf_ew_layout lay;
        kf_synth_ewise_layout(s, &s->st[rs->prologue - 1], &lay);
        for (int r = 0; r < lay.nreads; r++)
            if (lay.v[r] == y) kf_buf_puts(o, ", in");
            else kf_buf_printf(o, ", x->b%d", lay.v[r]);
        kf_buf_puts(o, ");\n        const float *row = t;\n");
    } else {
        kf_buf_puts(o, "    {\n        const long n = len;\n        const float *row = in;\n");
    }
    if (is_lse(d))
        kf_buf_puts(o, "        kf_lse_fold(row, n, acc, acc + 1);\n");
    else if (d->combiner == KF_COMB_SUM)
        kf_buf_puts(o, "        *acc += kf_vsum(row, n);\n");
    else
        kf_buf_printf(o, "        { const double v = kf_vextreme(row, n, %d); *acc = (v %s *acc || v != v) ? v : *acc; }\n",
                      d->combiner == KF_COMB_MAX, d->combiner == KF_COMB_MAX ? ">" : "<");
    if (rs->prologue) kf_buf_puts(o, "        f += n;\n        in += n;\n        len -= n;\n");
    kf_buf_puts(o, "    }\n}\n");
}

void kf_synth_redepi_pass(const kf_synth *s, int k, const kf_point *p, const char *fname, kf_buf *o) {
    const kf_graph *g = s->g;
    const kf_stage *h = &s->st[k], *rs = &s->st[h->redepi - 1];
    const kf_node *rn = &g->nodes[rs->nodes[0]];
    const kf_op_def *d = kf_op_get(rn->op);
    int y = g->nodes[h->nodes[0]].out;
    int64_t N = h->mm.N, R = h->mm.batch * h->mm.M;
    int v[KF_EW_MAX_OPS], nv = red_reads(s, rs, y, v);
    long threads = kf_tpl_get(&s->space, p, h->prefix, "threads");
    if (threads < 1) threads = 1;
    const char *init = d->combiner == KF_COMB_SUM ? "0.0" : d->combiner == KF_COMB_MAX ? "-INFINITY" : "INFINITY";
    const int w = is_lse(d) ? 2 : 1; /* doubles per partial */
    kf_buf_printf(o, "\n/* the GEMM with its rows' %s, then the threads' partials combined: 0 or ENOMEM */\n"
                     "static int %s_red(const float *restrict A, const float *restrict B, float *C", d->name, fname);
    for (int i = 0; i < nv; i++) kf_buf_printf(o, ", const %s *b%d", kf_synth_ctype(g, v[i]), v[i]);
    kf_buf_printf(o, ", float *restrict out) {\n"
                     "    const long T = omp_get_max_threads() > %ld ? omp_get_max_threads() : %ld;\n"
                     "    double *part = kf_scratch((size_t)T * %lldU * sizeof(double));\n"
                     "    if (!part) return 12;\n",
                  threads, threads, (long long)(w * R));
    if (is_lse(d)) /* (max, sum of exp) pairs */
        kf_buf_printf(o, "    for (long i = 0; i < T * %lldL; i++) { part[2 * i] = -INFINITY; part[2 * i + 1] = 0.0; }\n",
                      (long long)R);
    else
        kf_buf_printf(o, "    for (long i = 0; i < T * %lldL; i++) part[i] = %s;\n", (long long)R, init);
    kf_buf_printf(o, "    %s(A, B, C, &(%s_ex){", fname, fname);
    for (int i = 0; i < nv; i++) kf_buf_printf(o, "b%d, ", v[i]);
    kf_buf_printf(o, "part});\n    for (long r = 0; r < %lldL; r++) {\n", (long long)R);
    if (is_lse(d)) {
        kf_buf_printf(o, "        double m = part[2 * r], sm = part[2 * r + 1];\n"
                         "        for (long t = 1; t < T; t++)\n"
                         "            kf_lse_merge(&m, &sm, part[2 * (t * %lldL + r)], part[2 * (t * %lldL + r) + 1]);\n"
                         "        out[r] = kf_lse_final(m, sm);\n"
                         "    }\n    free(part);\n    return 0;\n}\n",
                      (long long)R, (long long)R);
        return;
    }
    kf_buf_printf(o, "        double a = part[r];\n"
                     "        for (long t = 1; t < T; t++) {\n"
                     "            const double v = part[t * %lldL + r];\n",
                  (long long)R);
    if (d->combiner == KF_COMB_SUM)
        kf_buf_puts(o, "            a += v;\n");
    else
        kf_buf_printf(o, "            a = (v %s a || v != v) ? v : a;\n", d->combiner == KF_COMB_MAX ? ">" : "<");
    kf_buf_puts(o, "        }\n");
    if (d->mean) kf_buf_printf(o, "        out[r] = (float)(a / %lld.0);\n", (long long)N);
    else kf_buf_puts(o, "        out[r] = (float)a;\n");
    kf_buf_puts(o, "    }\n    free(part);\n    return 0;\n}\n");
}

void kf_synth_redepi_call(const kf_synth *s, int k, kf_buf *o) {
    const kf_graph *g = s->g;
    const kf_stage *h = &s->st[k], *rs = &s->st[h->redepi - 1];
    int y = g->nodes[h->nodes[0]].out;
    int v[KF_EW_MAX_OPS], nv = red_reads(s, rs, y, v);
    kf_buf_printf(o, "    if (kf_stage%d_red(b%d, b%d, b%d", k, h->mm.a_val, h->mm.b_val, y);
    for (int i = 0; i < nv; i++) kf_buf_printf(o, ", b%d", v[i]);
    kf_buf_printf(o, ", b%d)) return 12;\n", g->nodes[rs->nodes[0]].out);
}

/* ---- log-sum-exp rows on the CPU (the template cpu.logsumexp_rows) ---- */

/* 1 when value v is a product's result, directly or through pointwise nodes. */
static int from_product(const kf_graph *g, int v, int depth) {
    int pn = g->values[v].producer;
    if (pn < 0 || depth > 16) return 0;
    const kf_node *n = &g->nodes[pn];
    const kf_op_def *d = kf_op_get(n->op);
    if (d->kind == KF_KIND_MATMUL) return 1;
    if (d->cls != KF_CLASS_POINTWISE) return 0;
    for (int a = 0; a < n->nin; a++)
        if (from_product(g, n->in[a], depth + 1)) return 1;
    return 0;
}

/* The rows a log-sum-exp node reads: its input as [R, L] (its reduced dims innermost and
 * together, size-1 dims aside); 0 when it is not of that form. */
static int lse_rows(const kf_graph *g, const kf_node *n, int64_t *R, int64_t *L) {
    rgroup gr[KF_MAX_DIMS];
    int m = kf_synth_canon(&g->values[n->in[0]].shape, n->attr.axes, gr);
    if (m < 1 || m > 2 || !gr[m - 1].reduced) return 0;
    *L = gr[m - 1].size;
    *R = m == 2 ? gr[0].size : 1;
    return 1;
}

int kf_synth_cpu_keeps(const kf_graph *g, const kf_node *n, void *ctx) {
    (void)ctx;
    const kf_op_def *d = kf_op_get(n->op);
    int64_t R, L;
    return d->combiner == KF_COMB_LOGSUMEXP && d->cls == KF_CLASS_COMPOSITE && g->values[n->in[0]].dtype == KF_F32 &&
           lse_rows(g, n, &R, &L) && from_product(g, n->in[0], 0);
}

int kf_synth_lse_rows_supports(const kf_synth *s, const kf_stage *st, kf_buf *why) {
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    const kf_op_def *d = kf_op_get(n->op);
    int64_t R, L;
    if (d->combiner != KF_COMB_LOGSUMEXP || d->cls != KF_CLASS_COMPOSITE) {
        kf_buf_printf(why, "%s is not a log-sum-exp reduction", d->name);
        return 0;
    }
    if (lse_rows(s->g, n, &R, &L)) return 1;
    kf_buf_puts(why, "its reduced dims are not innermost and together (rows only)");
    return 0;
}

int kf_synth_lse_rows_prologue_ok(const kf_synth *s, const kf_stage *st) {
    (void)s, (void)st;
    return 1; /* rows are read in chunks, each through the producer once */
}

void kf_synth_lse_rows_emit(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *o) {
    const kf_graph *g = s->g;
    const kf_node *n = &g->nodes[st->nodes[0]];
    int64_t R = 1, L = 1;
    int ok = lse_rows(g, n, &R, &L);
    (void)ok;
    long threads = kf_tpl_get(&s->space, p, st->prefix, "threads");
    const int64_t chunk = 2048;
    kf_buf_printf(o, "    /* %lld rows of %lld: the max and the sum of exp around it from one read */\n", (long long)R,
                  (long long)L);
    if (threads > 1 && R > 1)
        kf_buf_printf(o, "#pragma omp parallel for schedule(static) num_threads(%ld)\n", threads);
    kf_buf_printf(o,
                  "    for (long oi = 0; oi < %lldL; oi++) {\n"
                  "        double m = -INFINITY, sm = 0.0;\n"
                  "        for (long c0 = 0; c0 < %lldL; c0 += %lldL) {\n"
                  "            const long cn = %lldL - c0 < %lldL ? %lldL - c0 : %lldL;\n",
                  (long long)R, (long long)L, (long long)chunk, (long long)L, (long long)chunk, (long long)L,
                  (long long)chunk);
    if (st->prologue) {
        kf_ew_layout lay;
        kf_synth_ewise_layout(s, &s->st[st->prologue - 1], &lay);
        kf_buf_printf(o, "            float row[%lld] __attribute__((aligned(64)));\n", (long long)chunk);
        kf_buf_printf(o, "            kf_pro%d(oi * %lldL + c0, cn, row", st->index, (long long)L);
        for (int r = 0; r < lay.nreads; r++) kf_buf_printf(o, ", b%d", lay.v[r]);
        kf_buf_puts(o, ");\n");
    } else {
        kf_buf_printf(o, "            const float *row = b%d + oi * %lldL + c0;\n", n->in[0], (long long)L);
    }
    kf_buf_printf(o,
                  "            kf_lse_fold(row, cn, &m, &sm);\n"
                  "        }\n"
                  "        b%d[oi] = kf_lse_final(m, sm);\n"
                  "    }\n",
                  n->out);
}
