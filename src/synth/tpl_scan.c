/*
 * CPU template of the SCAN class: a prefix sum or product along one axis, inclusive or
 * exclusive, from either end. The input is seen as [O, N, I] around the axis (N along
 * it). Each running value is kept in double (one conversion per element, the loop is
 * memory-bound), so the kernel's error does not grow with the length of the axis.
 *   lines   (I = 1): one task a line of N contiguous elements, folded in order.
 *   columns (I > 1): one task a block of ib neighbouring columns of one outer index; the
 *           block's ib running values advance together down the axis, so every step reads
 *           and writes ib contiguous elements (vectorised).
 * Parameters: threads (the planner's), ib (columns only: 8 .. 512, bounded by I).
 */
#include "tpl.h"
#include "synth_int.h"

#include <stdio.h>

/* the stage's input as [O, N, I] around the axis */
static void geometry(const kf_synth *s, const kf_stage *st, int64_t *O, int64_t *N, int64_t *I) {
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    kf_synth_axis_split(&s->g->values[n->in[0]].shape, n->attr.axes, O, N, I);
}

void kf_synth_scan_params(kf_synth *s, kf_stage *st) {
    int64_t O, N, I;
    geometry(s, st, &O, &N, &I);
    if (I == 1) return;
    long vals[KF_MAX_PARAM_VALUES];
    int n = 0;
    for (long b = 8; b <= 512 && n < KF_MAX_PARAM_VALUES; b *= 4) {
        vals[n++] = b;
        if (b >= I) break;
    }
    int dflt = n - 1 < 2 ? n - 1 : 2; /* 128 columns when there are that many */
    kf_tpl_add_param(&s->space, st->prefix, "ib", KF_ROLE_BLOCK, vals, n, dflt);
}

void kf_synth_scan_emit(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *o) {
    const kf_graph *g = s->g;
    const kf_node *n = &g->nodes[st->nodes[0]];
    const kf_op_def *d = kf_op_get(n->op);
    int x = n->in[0], y = n->out;
    int prod = d->combiner == KF_COMB_PROD;
    const char *id = prod ? "1.0" : "0.0", *op = prod ? "*" : "+";
    long threads = kf_tpl_get(&s->space, p, st->prefix, "threads");
    int64_t o64, n64, i64;
    geometry(s, st, &o64, &n64, &i64);
    const long long O = o64, N = n64, I = i64;
    const char *pos = n->attr.reverse ? "N_ - 1 - k" : "k";
    if (I == 1) {
        kf_buf_printf(o, "    /* lines: %lld of %lld, %s%s %s */\n", O, N, n->attr.exclusive ? "exclusive " : "",
                      n->attr.reverse ? "reverse" : "forward", d->name);
        kf_buf_printf(o, "    const long N_ = %lldL;\n", N);
        if (threads > 1 && O > 1)
            kf_buf_printf(o, "    #pragma omp parallel for schedule(static) num_threads(%ld)\n", threads);
        kf_buf_printf(o, "    for (long l = 0; l < %lldL; l++) {\n", O);
        kf_buf_printf(o, "        const float *restrict xs = b%d + l * N_;\n", x);
        kf_buf_printf(o, "        float *restrict ys = b%d + l * N_;\n", y);
        kf_buf_printf(o, "        double acc = %s;\n", id);
        kf_buf_puts(o, "        for (long k = 0; k < N_; k++) {\n");
        kf_buf_printf(o, "            const long i = %s;\n", pos);
        if (n->attr.exclusive) kf_buf_puts(o, "            ys[i] = (float)acc;\n");
        kf_buf_printf(o, "            acc = acc %s (double)xs[i];\n", op);
        if (!n->attr.exclusive) kf_buf_puts(o, "            ys[i] = (float)acc;\n");
        kf_buf_puts(o, "        }\n    }\n");
        return;
    }
    long long ib = kf_tpl_get(&s->space, p, st->prefix, "ib");
    if (ib > I) ib = I;
    long long nb = (I + ib - 1) / ib;
    kf_buf_printf(o, "    /* columns: %lld x %lld, down %lld, blocks of %lld, %s%s %s */\n", O, I, N, ib,
                  n->attr.exclusive ? "exclusive " : "", n->attr.reverse ? "reverse" : "forward", d->name);
    kf_buf_printf(o, "    const long N_ = %lldL;\n", N);
    if (threads > 1 && O * nb > 1)
        kf_buf_printf(o, "    #pragma omp parallel for schedule(static) num_threads(%ld)\n", threads);
    kf_buf_printf(o, "    for (long t = 0; t < %lldL; t++) {\n", O * nb);
    kf_buf_printf(o, "        const long l = t / %lldL, i0 = (t %% %lldL) * %lldL;\n", nb, nb, ib);
    kf_buf_printf(o, "        const long w = %lldL - i0 < %lldL ? %lldL - i0 : %lldL;\n", I, ib, I, ib);
    kf_buf_printf(o, "        double acc[%lld];\n", ib);
    kf_buf_printf(o, "        for (long i = 0; i < w; i++) acc[i] = %s;\n", id);
    kf_buf_puts(o, "        for (long k = 0; k < N_; k++) {\n");
    kf_buf_printf(o, "            const long r = %s;\n", pos);
    kf_buf_printf(o, "            const float *restrict xs = b%d + (l * N_ + r) * %lldL + i0;\n", x, I);
    kf_buf_printf(o, "            float *restrict ys = b%d + (l * N_ + r) * %lldL + i0;\n", y, I);
    kf_buf_puts(o, "            for (long i = 0; i < w; i++) {\n");
    if (n->attr.exclusive) kf_buf_puts(o, "                ys[i] = (float)acc[i];\n");
    kf_buf_printf(o, "                acc[i] = acc[i] %s (double)xs[i];\n", op);
    if (!n->attr.exclusive) kf_buf_puts(o, "                ys[i] = (float)acc[i];\n");
    kf_buf_puts(o, "            }\n        }\n    }\n");
}
