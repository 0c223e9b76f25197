/*
 * CPU row-blocked chain: C = softmax(pro(A1 x B1)) x B2, the three stages of a matmul
 * whose result only a softmax over its rows reads (through an elementwise prologue, if
 * any), whose result only another matmul reads as its A. Scaled-dot-product attention is
 * the common case (Q K^T * scale, softmax, times V). The planner makes the chain
 * (synth.c fuse_chains); this row of the registry computes it.
 *
 * Design: a thread takes a group of row blocks of one batch matrix, packs that matrix's
 * B1 and B2 whole once (the GEMM's packing, kf_tpl_matmul_emit_panel), and for each block
 * of RB rows computes the RB x N1 scores into its own buffer (L2-sized), runs the prologue
 * and the softmax over each row there, in place (the max, then e^(x - max) and its sum in
 * one pass), and multiplies the block by B2 straight into C, whose rows it then divides by
 * their sums (N2 values a row instead of N1; log_softmax finishes its rows before the
 * product instead). The intermediates never reach memory: two tensors of batch x M x N1 floats
 * (32 MiB each for 32 heads of 512 x 512) are neither written, read back, nor faulted in.
 * The groups are the fewest per matrix that give every thread work twice over (one a
 * matrix for a large batch), handed out dynamically.
 *
 * Parameters ("<prefix>NAME"): threads, rb (rows per block; balanced to the real M and
 * rounded to the first GEMM's MR at emit time), and each GEMM's vl, mk, kc and pa under
 * "<prefix>q." and "<prefix>v.".
 */
#include "synth_int.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

typedef struct chain_parts {
    const kf_stage *m1, *sm, *pro; /* the first matmul, the softmax, its prologue (or NULL) */
    int S;                         /* the first matmul's result */
    int x;                         /* the softmax's input (S, or the prologue's result) */
} chain_parts;

static void parts(const kf_synth *s, const kf_stage *st, chain_parts *c) {
    assert(st->chain_mm > 0 && st->chain_sm > 0);
    c->m1 = &s->st[st->chain_mm - 1];
    c->sm = &s->st[st->chain_sm - 1];
    c->pro = c->sm->prologue ? &s->st[c->sm->prologue - 1] : NULL;
    c->S = s->g->nodes[c->m1->nodes[0]].out;
    c->x = s->g->nodes[c->sm->nodes[0]].in[0];
}

int kf_synth_chain_supports(const kf_synth *s, const kf_stage *st, kf_buf *why) {
    (void)s;
    if (st->kind == KF_STAGE_MATMUL && st->chain_mm > 0) return 1;
    kf_buf_puts(why, "not the last matmul of a matmul -> softmax -> matmul chain");
    return 0;
}

int kf_synth_chain_reads(const kf_synth *s, const kf_stage *st, int *vals) {
    chain_parts c;
    parts(s, st, &c);
    int n = 0;
    vals[n++] = c.m1->mm.a_val;
    vals[n++] = c.m1->mm.b_val;
    if (c.pro) {
        kf_ew_layout lay;
        kf_synth_ewise_layout(s, c.pro, &lay);
        for (int r = 0; r < lay.nreads; r++)
            if (lay.v[r] != c.S) vals[n++] = lay.v[r];
    }
    vals[n++] = st->mm.b_val;
    /* one parameter per buffer */
    int m = 0;
    for (int i = 0; i < n; i++) {
        int dup = 0;
        for (int j = 0; j < m; j++) dup |= vals[j] == vals[i];
        if (!dup) vals[m++] = vals[i];
    }
    return m;
}

static void sub_prefix(const kf_stage *st, const char *part, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s.", st->prefix, part);
}

void kf_synth_chain_params(kf_synth *s, kf_stage *st) {
    chain_parts c;
    parts(s, st, &c);
    const kf_matmul_desc *d1 = &c.m1->mm;
    long tv[KF_MAX_PARAM_VALUES];
    int nt = kf_tpl_thread_values(&s->dev, tv);
    double work = (double)d1->batch * (double)d1->M * (double)d1->N * (double)(d1->K + st->mm.N);
    kf_tpl_add_param(&s->space, st->prefix, "threads", KF_ROLE_THREADS, tv, nt,
                     work < KF_TPL_THREADS_MIN_WORK ? 0 : nt - 1);
    /* rows per block: the block's scores (rb x N1) should stay in L2 with the two packed
     * B matrices, about half of it in all */
    long rbv[] = {24, 48, 96, 192, 384};
    int n = 0;
    while (n < 5 && (n == 0 || rbv[n - 1] < d1->M)) n++;
    int64_t l2 = s->dev.l2_bytes > 0 ? s->dev.l2_bytes : 512 * 1024;
    int64_t packed = 4 * (d1->K * d1->N + st->mm.K * st->mm.N);
    int dflt = 0;
    for (int i = 0; i < n; i++)
        if (rbv[i] * d1->N * 4 + packed <= l2 / 2) dflt = i;
    kf_tpl_add_param(&s->space, st->prefix, "rb", KF_ROLE_NONE, rbv, n, dflt);
    char pre[48];
    sub_prefix(st, "q", pre, sizeof pre);
    kf_tpl_matmul_params_inner(d1, &s->dev, &s->space, pre);
    sub_prefix(st, "v", pre, sizeof pre);
    kf_tpl_matmul_params_inner(&st->mm, &s->dev, &s->space, pre);
}

static long long LL(int64_t v) { return (long long)v; }

void kf_synth_chain_emit(const kf_synth *s, const kf_stage *st, const kf_point *p, const char *fname, kf_buf *o) {
    const kf_graph *g = s->g;
    chain_parts c;
    parts(s, st, &c);
    const kf_matmul_desc *d1 = &c.m1->mm, *d2 = &st->mm;
    const kf_node *smn = &g->nodes[c.sm->nodes[0]];
    const int64_t M = d1->M, N1 = d1->N, batch = d1->batch;
    int threads = (int)kf_tpl_get(&s->space, p, st->prefix, "threads");
    if (threads < 1) threads = 1;
    int64_t RB = kf_tpl_get(&s->space, p, st->prefix, "rb");

    /* the GEMM parts: blocks of at most rbr rows, a whole number of the first's MR */
    char pre[48], n1[64], n2[64], pname[64];
    snprintf(n1, sizeof n1, "%s_q", fname);
    snprintf(n2, sizeof n2, "%s_v", fname);
    snprintf(pname, sizeof pname, "%s_pro", fname);
    sub_prefix(st, "q", pre, sizeof pre);
    int mr1 = (int)(kf_tpl_get(&s->space, p, pre, "mk") / 100);
    int64_t nrb = ceil_div(M, RB);
    int64_t rbr = ceil_div(ceil_div(M, nrb), mr1) * mr1;
    if (rbr > M) rbr = M;
    nrb = ceil_div(M, rbr);
    kf_buf_puts(o, "#include <stdint.h>\n#include <stdlib.h>\n#include <math.h>\n"
                   "#ifdef _OPENMP\n#include <omp.h>\n#endif\n\n");
    kf_tpl_panel P1, P2;
    kf_tpl_matmul_emit_panel(o, n1, d1, &s->space, p, pre, rbr, &P1);
    sub_prefix(st, "v", pre, sizeof pre);
    kf_tpl_matmul_emit_panel(o, n2, d2, &s->space, p, pre, rbr, &P2);
    if (c.pro) kf_synth_prologue_emit(s, c.pro, c.x, c.S, pname, o);

    /* groups of row blocks: every thread gets work twice over; one group a matrix when
     * the batch alone does that */
    int64_t gpb = batch >= 2 * threads ? 1 : ceil_div(2 * threads, batch);
    if (gpb > nrb) gpb = nrb;
    int64_t ngroups = batch * gpb;
    int64_t ap = P1.ap_floats > P2.ap_floats ? P1.ap_floats : P2.ap_floats;
    int64_t sbuf = ((rbr * N1 + 15) / 16) * 16;
    int64_t per = P1.bp_floats + P2.bp_floats + ap + sbuf;
    int logsm = kf_op_get(smn->op)->log_out;

    char invdecl[96] = ""; /* the rows' 1 / sum, applied to the product's rows */
    if (!logsm) snprintf(invdecl, sizeof invdecl, "                float inv[%lld];\n", LL(rbr));
    int reads[KF_EW_MAX_OPS + 3];
    int nr = kf_synth_chain_reads(s, st, reads);
    int out = g->nodes[st->nodes[0]].out;
    kf_buf_printf(o,
                  "/* ---- %s: row-blocked chain matmul -> %s -> matmul: %lld matrices of %lld rows in "
                  "%lld blocks of <= %lld, %lld groups, threads=%d ---- */\n"
                  "static int %s(",
                  fname, kf_op_get(smn->op)->name, LL(batch), LL(M), LL(nrb), LL(rbr), LL(ngroups), threads,
                  fname);
    for (int r = 0; r < nr; r++) kf_buf_printf(o, "const float *restrict b%d, ", reads[r]);
    kf_buf_printf(o, "float *restrict b%d)\n{\n", out);
    kf_buf_printf(o,
                  "    float *buf = aligned_alloc(64, %lldULL);\n"
                  "    if (!buf) return 12; /* ENOMEM */\n",
                  LL(per * 4 * threads));
    if (threads > 1) kf_buf_printf(o, "#pragma omp parallel num_threads(%d)\n", threads);
    kf_buf_printf(o,
                  "    {\n"
                  "#ifdef _OPENMP\n"
                  "        const int64_t tid = omp_get_thread_num();\n"
                  "#else\n"
                  "        const int64_t tid = 0;\n"
                  "#endif\n"
                  "        float *restrict bp1 = buf + tid * %lldLL;\n"
                  "        float *restrict bp2 = bp1 + %lldLL;\n"
                  "        float *restrict ap = bp2 + %lldLL;\n"
                  "        float *restrict sb = ap + %lldLL;\n",
                  LL(per), LL(P1.bp_floats), LL(P2.bp_floats), LL(ap));
    if (threads > 1)
        kf_buf_printf(o, "#pragma omp for schedule(%s) nowait\n", ngroups > threads ? "dynamic, 1" : "static");
    kf_buf_printf(o,
                  "        for (int64_t gi = 0; gi < %lldLL; gi++) {\n"
                  "            const int64_t bt = gi / %lldLL, q = gi %% %lldLL;\n"
                  "            %s_pack_all(b%d + %s_boff(bt), bp1);\n"
                  "            %s_pack_all(b%d + %s_boff(bt), bp2);\n"
                  "            for (int64_t rb = q * %lldLL / %lldLL; rb < (q + 1) * %lldLL / %lldLL; rb++) {\n"
                  "                const int64_t r0 = rb * %lldLL;\n"
                  "                const int64_t rows = %lldLL - r0 < %lldLL ? %lldLL - r0 : %lldLL;\n"
                  "                %s_rows(b%d + %s_aoff(bt) + r0 * %lldLL, bp1, sb, ap, rows);\n"
                  "%s"
                  "                for (int64_t i = 0; i < rows; i++) {\n"
                  "                    float *row = sb + i * %lldLL;\n",
                  LL(ngroups), LL(gpb), LL(gpb), n1, d1->b_val, n1, n2, d2->b_val, n2, LL(nrb), LL(gpb), LL(nrb),
                  LL(gpb), LL(rbr), LL(M), LL(rbr), LL(M), LL(rbr), n1, d1->a_val, n1, d1->ta ? 1LL : LL(d1->K),
                  invdecl, LL(N1));
    if (c.pro) {
        kf_ew_layout lay;
        kf_synth_ewise_layout(s, c.pro, &lay);
        kf_buf_printf(o,
                      "                    float xr_pro[%lld] __attribute__((aligned(64)));\n"
                      "                    %s((bt * %lldLL + r0 + i) * %lldLL, %lldL, xr_pro",
                      LL(N1), pname, LL(M), LL(N1), LL(N1));
        for (int r = 0; r < lay.nreads; r++) {
            if (lay.v[r] == c.S) kf_buf_puts(o, ", row");
            else kf_buf_printf(o, ", b%d", lay.v[r]);
        }
        kf_buf_puts(o, ");\n                    const float *xr = xr_pro;\n");
    } else {
        kf_buf_puts(o, "                    const float *xr = row; /* in place */\n");
    }
    kf_buf_printf(o, "                    const float m = kf_vextreme(xr, %lldL, 1);\n", LL(N1));
    if (logsm) {
        kf_buf_printf(o,
                      "                    double sum = 0.0;\n"
                      "                    for (long j = 0; j < %lldL; j++) sum += kf_expf(xr[j] - m);\n"
                      "                    const float lse = m + logf((float)sum);\n"
                      "                    for (long j = 0; j < %lldL; j++) row[j] = xr[j] - lse;\n",
                      LL(N1), LL(N1));
    } else {
        /* e^(x - max) and its sum in one pass; the division by the sum waits for the
         * product's row (N2 values instead of N1), as in flash attention */
        kf_buf_printf(o,
                      "                    kf_vf acc = kf_vsplat(0.0f);\n"
                      "                    long j = 0;\n"
                      "                    for (; j + KF_VW <= %lldL; j += KF_VW) {\n"
                      "                        float e[KF_VW] __attribute__((aligned(64)));\n"
                      "                        for (int l = 0; l < KF_VW; l++) e[l] = kf_expf(xr[j + l] - m);\n"
                      "                        const kf_vf ev = kf_vload(e);\n"
                      "                        kf_vstore(row + j, ev);\n"
                      "                        acc += ev;\n"
                      "                    }\n"
                      "                    float sum = kf_hsum(acc);\n"
                      "                    for (; j < %lldL; j++) {\n"
                      "                        row[j] = kf_expf(xr[j] - m);\n"
                      "                        sum += row[j];\n"
                      "                    }\n"
                      "                    inv[i] = 1.0f / sum;\n",
                      LL(N1), LL(N1));
    }
    kf_buf_printf(o,
                  "                }\n"
                  "                float *restrict cb = b%d + bt * %lldLL + r0 * %lldLL;\n"
                  "                %s_rows(sb, bp2, cb, ap, rows);\n",
                  out, LL(M * d2->N), LL(d2->N), n2);
    if (!logsm)
        kf_buf_printf(o,
                      "                for (int64_t i = 0; i < rows; i++)\n"
                      "                    for (long j = 0; j < %lldL; j++) cb[i * %lldLL + j] *= inv[i];\n",
                      LL(d2->N), LL(d2->N));
    kf_buf_puts(o,
                  "            }\n"
                  "        }\n"
                  "    }\n"
                  "    free(buf);\n"
                  "    return 0;\n"
                  "}\n\n");
}
