/*
 * GPU template of the SCAN class in the kernel form: a prefix sum or product along one
 * axis, inclusive or exclusive, from either end. The input is seen as [O, N, I] around the
 * axis.
 *   lines   (I = 1): one group a line. The group walks the line in chunks of wg * ept
 *           elements: each item folds its ept consecutive elements in order, the items'
 *           totals are scanned in local memory (Hillis-Steele, log2(wg) steps), each item
 *           then writes its elements from the chunk's carry, the totals before it and its
 *           own running value; the carry advances by the chunk's total. The error grows
 *           with log2(wg) + ept + the number of chunks, not with the line's length.
 *   columns (I > 1): one item a column (neighbouring items, neighbouring columns:
 *           coalesced), folding down the axis in order; sums are compensated (Kahan), so
 *           the error does not grow with N either.
 * Parameters: wg (group size), ept (lines: elements an item folds per chunk).
 */
#include "gpu_tpl.h"

#include <stdio.h>

/* the stage's input as [O, N, I] around the axis */
static void geometry(const kf_synth *s, const kf_stage *st, int64_t *O, int64_t *N, int64_t *I) {
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    kf_synth_axis_split(&s->g->values[n->in[0]].shape, n->attr.axes, O, N, I);
}

void kf_gpu_scan_params(kf_synth *s, kf_stage *st, int allow_split) {
    (void)allow_split;
    kf_gdev d;
    kf_gpu_dev(s, &d);
    int64_t O, N, I;
    geometry(s, st, &O, &N, &I);
    long wgs[KF_MAX_PARAM_VALUES];
    long wgmax = d.max_wg < 1024 ? d.max_wg : 1024;
    int nwg = kf_gpu_pow2_values(wgmax < 32 ? wgmax : 32, wgmax, wgs);
    if (I > 1) {
        kf_gpu_param(s, st, "wg", KF_ROLE_GROUP, wgs, nwg, kf_gpu_nearest(wgs, nwg, d.is_cpu ? 1024 : 256));
        return;
    }
    /* a line shorter than a group needs only a group of its length */
    int64_t want = d.is_cpu ? 64 : 256;
    while (want > 32 && want / 2 >= N) want /= 2;
    kf_gpu_param(s, st, "wg", KF_ROLE_GROUP, wgs, nwg, kf_gpu_nearest(wgs, nwg, want));
    static const long epts[] = {1, 2, 4, 8};
    kf_gpu_param(s, st, "ept", KF_ROLE_PER_ITEM, epts, 4, N >= 4096 && !d.is_cpu ? 2 : 0);
}

void kf_gpu_scan_emit(kf_gplan *gp, int k, const kf_stage *st, const kf_point *p) {
    const kf_synth *s = gp->s;
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    const kf_op_def *d = kf_op_get(n->op);
    int prod = d->combiner == KF_COMB_PROD, excl = n->attr.exclusive, rev = n->attr.reverse;
    const char *id = prod ? "1.0f" : "0.0f";
    int64_t o64, n64, i64;
    geometry(s, st, &o64, &n64, &i64);
    const long long O = o64, N = n64, I = i64;
    int64_t wg = kf_gpu_get(s, st, p, "wg", 256);
    char name[32], lit[32];
    snprintf(name, sizeof name, "kf_s%d", k);
    kf_gk kk;
    kf_gk_begin(&kk, name);
    kf_gk_value(gp, &kk, n->in[0], KF_GP_IN);
    kf_gk_value(gp, &kk, n->out, KF_GP_OUT);
    kf_buf *o = &kk.body;
    const char *ix = gp->ix;
    if (I > 1) {
        kf_buf_printf(o, "    /* columns: %lld x %lld, down %lld, one item a column, %s%s %s */\n", O, I, N,
                      excl ? "exclusive " : "", rev ? "reverse" : "forward", d->name);
        kf_buf_printf(o, "    const %s N_ = %s;\n", ix, kf_gpu_lit(gp, N, lit, sizeof lit));
        kf_buf_printf(o, "    const %s t = %s;\n", ix, kf_gpu_gid0(gp));
        kf_buf_printf(o, "    if (t < %s) {\n", kf_gpu_lit(gp, O * I, lit, sizeof lit));
        kf_buf_printf(o, "        const %s l = t / %s, c = t %% %s;\n", ix, kf_gpu_lit(gp, I, lit, sizeof lit), lit);
        kf_buf_printf(o, "        float acc = %s, comp = 0.0f;\n", id);
        kf_buf_printf(o, "        for (%s j = 0; j < N_; j++) {\n", ix);
        kf_buf_printf(o, "            const %s r = %s;\n", ix, rev ? "N_ - 1 - j" : "j");
        kf_buf_printf(o, "            const %s at = (l * N_ + r) * %s + c;\n", ix, kf_gpu_lit(gp, I, lit, sizeof lit));
        if (excl) kf_buf_printf(o, "            b%d[at] = acc;\n", n->out);
        if (prod) {
            kf_buf_printf(o, "            acc = acc * b%d[at];\n", n->in[0]);
        } else { /* compensated: comp carries what the last addition lost */
            kf_buf_printf(o, "            const float yk = b%d[at] - comp;\n", n->in[0]);
            kf_buf_puts(o, "            const float tk = acc + yk;\n");
            kf_buf_puts(o, "            comp = (tk - acc) - yk;\n");
            kf_buf_puts(o, "            acc = tk;\n");
        }
        if (!excl) kf_buf_printf(o, "            b%d[at] = acc;\n", n->out);
        kf_buf_puts(o, "        }\n    }\n");
        if (wg > kf_gpu_pow2_ceil(O * I)) wg = kf_gpu_pow2_ceil(O * I);
        int64_t gl[1] = {(O * I + wg - 1) / wg * wg}, lo[1] = {wg};
        kf_gk_launch(gp, &kk, 1, gl, lo);
        return;
    }
    int64_t ept = kf_gpu_get(s, st, p, "ept", 1);
    const char *op = prod ? "*" : "+";
    kf_buf_printf(o, "    /* lines: %lld of %lld, a group a line, chunks of %lld x %lld, %s%s %s */\n", O, N,
                  (long long)wg, (long long)ept, excl ? "exclusive " : "", rev ? "reverse" : "forward", d->name);
    kf_buf_printf(o, "    $shared float kf_tot[%lld];\n", (long long)wg);
    kf_buf_printf(o, "    const %s N_ = %s;\n", ix, kf_gpu_lit(gp, N, lit, sizeof lit));
    kf_buf_printf(o, "    const %s base = (%s)$grp(0) * N_;\n", ix, ix);
    kf_buf_puts(o, "    const int lid = $lid(0);\n");
    kf_buf_printf(o, "    float carry = %s;\n", id);
    kf_buf_printf(o, "    for (%s c0 = 0; c0 < N_; c0 += %lld) {\n", ix, (long long)(wg * ept));
    kf_buf_printf(o, "        const %s k0 = c0 + (%s)lid * %lld;\n", ix, ix, (long long)ept);
    kf_buf_printf(o, "        float v[%lld];\n", (long long)ept);
    kf_buf_printf(o, "        float run = %s;\n", id);
    kf_buf_printf(o, "        for (int e = 0; e < %lld; e++) {\n", (long long)ept);
    kf_buf_printf(o, "            const %s kk = k0 + e;\n", ix);
    kf_buf_printf(o, "            v[e] = kk < N_ ? b%d[base + (%s)] : %s;\n", n->in[0], rev ? "N_ - 1 - kk" : "kk", id);
    kf_buf_printf(o, "            run = run %s v[e];\n", op);
    kf_buf_puts(o, "        }\n");
    kf_buf_puts(o, "        kf_tot[lid] = run;\n");
    kf_buf_puts(o, "        $barrier;\n");
    kf_buf_printf(o, "        for (int off = 1; off < %lld; off <<= 1) {\n", (long long)wg);
    kf_buf_printf(o, "            const float t = lid >= off ? kf_tot[lid - off] : %s;\n", id);
    kf_buf_puts(o, "            $barrier;\n");
    kf_buf_printf(o, "            kf_tot[lid] = t %s kf_tot[lid];\n", op);
    kf_buf_puts(o, "            $barrier;\n");
    kf_buf_puts(o, "        }\n");
    kf_buf_printf(o, "        float acc = carry %s (lid > 0 ? kf_tot[lid - 1] : %s);\n", op, id);
    kf_buf_printf(o, "        for (int e = 0; e < %lld; e++) {\n", (long long)ept);
    kf_buf_printf(o, "            const %s kk = k0 + e;\n", ix);
    if (excl) kf_buf_printf(o, "            if (kk < N_) b%d[base + (%s)] = acc;\n", n->out, rev ? "N_ - 1 - kk" : "kk");
    kf_buf_printf(o, "            acc = acc %s v[e];\n", op);
    if (!excl) kf_buf_printf(o, "            if (kk < N_) b%d[base + (%s)] = acc;\n", n->out, rev ? "N_ - 1 - kk" : "kk");
    kf_buf_puts(o, "        }\n");
    kf_buf_printf(o, "        carry = carry %s kf_tot[%lld];\n", op, (long long)(wg - 1));
    kf_buf_puts(o, "        $barrier;\n");
    kf_buf_puts(o, "    }\n");
    int64_t gl[1] = {O * wg}, lo[1] = {wg};
    kf_gk_launch(gp, &kk, 1, gl, lo);
}
