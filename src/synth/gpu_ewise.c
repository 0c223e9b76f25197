/*
 * GPU elementwise template: a fused cluster of unary/binary ops over one iteration
 * domain, one kernel, in the kernel form of src/render/render.h.
 *
 * The domain is coalesced exactly as on the CPU (kf_synth_ewise_layout): an outer index
 * over the coalesced outer dims and a contiguous inner dim in which every operand either
 * streams (stride 1) or broadcasts (stride 0). The kernel walks "units" of vw contiguous
 * elements of the flattened domain; consecutive work-items take consecutive units, so
 * every streaming access is coalesced. A unit never crosses a row of the inner dim (vw
 * divides it), so broadcast operands are one scalar per unit and streaming operands are
 * one aligned vector ($vload/$vstore) when every offset is a multiple of vw. The
 * expressions are the CPU template's (kf_synth_node_expr), computed per vector
 * component.
 *
 * Parameters (stage-prefixed):
 *   vw   elements per unit: 1, 2 or 4 where the inner dim and all strides allow;
 *   ept  units per work-item (1, 2, 4, 8), strided by the grid size;
 *   wg   work-group size (64 .. min(1024, max_wg));
 *   gs   0: one pass (enough groups to cover the domain), 1: a grid-stride loop over a
 *        grid sized to the device (a few groups per compute unit).
 * Defaults: one unit per item, 256-item groups, one pass; a GPU takes the widest legal
 * vector, a CPU-type device (PoCL) scalar units, since PoCL runs a group's work-items as
 * a loop that it vectorises itself (on PoCL 4M-element sigmoid: vw=1 2.2-2.5 ms, vw=4
 * 3.6 ms, grid-stride loops 2-3x slower).
 */
#include "gpu_tpl.h"

#include <stdio.h>
#include <string.h>

static int vw_legal(const kf_synth *s, const kf_ew_layout *L, int vw) {
    if (vw == 1) return 1;
    if (L->q == 0 || L->dim[L->q - 1] % vw != 0) return 0;
    for (int r = 0; r < L->nreads; r++) /* reads through index maps load scalars */
        if (L->buf[r] != L->v[r]) return 0;
    for (int r = 0; r < L->nops; r++) {
        if (s->g->values[L->v[r]].dtype != KF_F32) return 0;
        if (L->str[r][L->q - 1] == 0) continue; /* broadcast: scalar reads */
        for (int j = 0; j + 1 < L->q; j++)
            if (L->str[r][j] % vw != 0) return 0;
    }
    return 1;
}

static int64_t numel_of_layout(const kf_ew_layout *L) {
    int64_t n = 1;
    for (int j = 0; j < L->q; j++) n *= L->dim[j];
    return n;
}

void kf_gpu_ewise_params(kf_synth *s, kf_stage *st) {
    kf_gdev d;
    kf_gpu_dev(s, &d);
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, st, &lay);
    long vws[3];
    int nvw = 0;
    for (int w = 1; w <= 4; w *= 2)
        if (vw_legal(s, &lay, w)) vws[nvw++] = w;
    /* PoCL vectorises scalar code across work-items itself: explicit vectors and per-item
     * loops only get in its way (measured on a 2-core Skylake VM, 4M elements) */
    kf_gpu_param(s, st, "vw", KF_ROLE_VECTOR, vws, nvw, d.is_cpu ? 0 : nvw - 1);
    long wgs[KF_MAX_PARAM_VALUES];
    int nwg = kf_gpu_pow2_values(64, d.max_wg < 1024 ? d.max_wg : 1024, wgs);
    kf_gpu_param(s, st, "wg", KF_ROLE_GROUP, wgs, nwg, kf_gpu_nearest(wgs, nwg, 256));
    static const long epts[] = {1, 2, 4, 8};
    kf_gpu_param(s, st, "ept", KF_ROLE_PER_ITEM, epts, 4, 0);
    static const long gs[] = {0, 1};
    kf_gpu_param(s, st, "gs", KF_ROLE_NONE, gs, 2, 0);
}

static const char comp[4] = {'x', 'y', 'z', 'w'};

void kf_gpu_ewise_emit(kf_gplan *gp, const kf_stage *st, const kf_point *p) {
    const kf_synth *s = gp->s;
    const kf_graph *g = s->g;
    kf_gdev d;
    kf_gpu_dev(s, &d);
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, st, &lay);
    int vw = (int)kf_gpu_get(s, st, p, "vw", 1);
    int64_t ept = kf_gpu_get(s, st, p, "ept", 1);
    int64_t wg = kf_gpu_get(s, st, p, "wg", 256);
    int gs = (int)kf_gpu_get(s, st, p, "gs", 0);
    if (!vw_legal(s, &lay, vw)) vw = 1;
    const int q = lay.q;
    const int64_t inner = q ? lay.dim[q - 1] : 1;
    const int64_t units = numel_of_layout(&lay) / vw;
    /* small domains: no more items per group than there is work */
    int64_t per_item = (units + ept - 1) / ept;
    if (wg > kf_gpu_pow2_ceil(per_item)) wg = kf_gpu_pow2_ceil(per_item);
    int64_t groups = (units + ept * wg - 1) / (ept * wg);
    int64_t cap = (int64_t)d.cu * (d.is_cpu ? 4 : 8);
    if (groups * wg > (1LL << 30)) gs = 1;
    if (gs && groups > cap) groups = cap;
    else gs = 0; /* the grid already covers the domain in one pass */
    const int64_t global = groups * wg;
    const char *ix = gp->ix;
    char b1[32], b2[32], b3[32];

    kf_gk k;
    char name[32];
    snprintf(name, sizeof name, "kf_s%d", st->index);
    kf_gk_begin(&k, name);
    for (int b = 0; b < lay.nbufs; b++) kf_gk_value(gp, &k, lay.bufs[b], KF_GP_IN);
    for (int r = lay.nreads; r < lay.nops; r++) kf_gk_value(gp, &k, lay.v[r], KF_GP_OUT);
    kf_buf *o = &k.body;
    kf_buf_printf(o, "    /* %lld units of %d (domain coalesced to %d dims, inner %lld); %lld items, %lld unit(s) each%s */\n",
                  (long long)units, vw, q, (long long)inner, (long long)global, (long long)ept,
                  gs ? ", grid-stride" : "");
    const char *ind = "        ";
    if (gs) {
        kf_buf_printf(o, "    for (%s t0 = %s; t0 < %s; t0 += %s) {\n", ix, kf_gpu_gid0(gp),
                      kf_gpu_lit(gp, units, b1, sizeof b1), kf_gpu_lit(gp, global * ept, b2, sizeof b2));
    } else {
        kf_buf_printf(o, "    {\n        const %s t0 = %s;\n", ix, kf_gpu_gid0(gp));
    }
    int need_check = gs || groups * wg * ept != units;
    kf_buf_printf(o, "%sfor (int k = 0; k < %lld; k++) {\n", ind, (long long)ept);
    kf_buf_printf(o, "%s    const %s t = t0 + k * %s;\n", ind, ix, kf_gpu_lit(gp, global, b1, sizeof b1));
    if (need_check) kf_buf_printf(o, "%s    if (t >= %s) break;\n", ind, kf_gpu_lit(gp, units, b1, sizeof b1));
    ind = "            ";
    kf_buf_printf(o, "%sconst %s e = t%s;\n", ind, ix, vw > 1 ? (vw == 2 ? " * 2" : " * 4") : "");
    if (q >= 2) {
        kf_buf_printf(o, "%sconst %s j = e %% %s;\n", ind, ix, kf_gpu_lit(gp, inner, b1, sizeof b1));
        kf_buf_printf(o, "%s%s rem = e / %s;\n", ind, ix, kf_gpu_lit(gp, inner, b1, sizeof b1));
        for (int jd = q - 2; jd >= 1; jd--) {
            kf_buf_printf(o, "%sconst %s i%d = rem %% %s; rem = rem / %s;\n", ind, ix, jd,
                          kf_gpu_lit(gp, lay.dim[jd], b1, sizeof b1), kf_gpu_lit(gp, lay.dim[jd], b2, sizeof b2));
        }
        kf_buf_printf(o, "%sconst %s i0 = rem;\n", ind, ix);
    }
    /* per-operand offsets, and the guards of padded index maps: base + sum(index * stride) */
    for (int r = 0; r < lay.nops + lay.ng; r++) {
        const int64_t *sv = r < lay.nops ? lay.str[r] : lay.gstr[r - lay.nops];
        int64_t c0 = r < lay.nops ? (r < lay.nreads ? lay.base[r] : 0) : lay.goff[r - lay.nops];
        if (r < lay.nops) /* a view read is "fv": its value may be written too */
            kf_buf_printf(o, "%sconst %s f%s%d = ", ind, ix, r < lay.nreads && lay.buf[r] != lay.v[r] ? "v" : "",
                          lay.v[r]);
        else kf_buf_printf(o, "%sconst %s g%d = ", ind, ix, r - lay.nops);
        int terms = 0;
        if (c0) kf_buf_printf(o, "%s", kf_gpu_lit(gp, c0, b3, sizeof b3)), terms++;
        for (int jd = 0; jd < q; jd++) {
            if (!sv[jd]) continue;
            const char *iv = q == 1 ? "e" : jd == q - 1 ? "j" : NULL;
            char nm[16];
            if (!iv) snprintf(nm, sizeof nm, "i%d", jd), iv = nm;
            if (sv[jd] == 1) kf_buf_printf(o, "%s%s", terms++ ? " + " : "", iv);
            else kf_buf_printf(o, "%s%s * %s", terms++ ? " + " : "", iv, kf_gpu_lit(gp, sv[jd], b3, sizeof b3));
        }
        kf_buf_puts(o, terms ? ";\n" : "0;\n");
    }
    /* reads: broadcast operands and (vw = 1) streaming operands as scalars; a padded
     * map's read under its guards */
    for (int r = 0; r < lay.nreads; r++) {
        int v = lay.v[r], bv = lay.buf[r];
        int streams = q > 0 && lay.str[r][q - 1] != 0;
        const char *cast = g->values[bv].dtype == KF_F32 ? "" : "(float)";
        if (g->values[v].dtype == KF_I64 && !kf_synth_ewise_guarded(&lay, r)) {
            /* an i64 index: its exact value too (a gather's offset), then as a float */
            kf_buf_printf(o, "%sconst long i%d = b%d[f%s%d];\n", ind, v, bv, bv != v ? "v" : "", v);
            kf_buf_printf(o, "%sconst float r%d = (float)i%d;\n", ind, v, v);
        } else if (lay.take[r] >= 0) { /* a gather: the index's value along its axis, fill outside */
            char fill[64];
            int t = lay.take[r];
            kf_synth_float_lit(lay.pad[r], fill, sizeof fill);
            kf_buf_printf(o, "%sconst float r%d = (i%d >= 0 && i%d < %lldL) ? b%d[fv%d + i%d * %lldL] : %s;\n", ind, v, t,
                          t, (long long)lay.take_n[r], bv, v, t, (long long)lay.take_str[r], fill);
        } else if (kf_synth_ewise_guarded(&lay, r)) {
            char pad[64];
            kf_synth_float_lit(lay.pad[r], pad, sizeof pad);
            kf_buf_printf(o, "%sconst float r%d = (", ind, v);
            for (int gk = 0, n = 0; gk < lay.ng; gk++)
                if (lay.gop[gk] == r)
                    kf_buf_printf(o, "%sg%d >= 0 && g%d < %s", n++ ? " && " : "", gk, gk,
                                  kf_gpu_lit(gp, lay.gn[gk], b3, sizeof b3));
            kf_buf_printf(o, ") ? %sb%d[f%s%d] : %s;\n", cast, bv, bv != v ? "v" : "", v, pad);
            if (g->values[v].dtype == KF_I64) /* a padded index */
                kf_buf_printf(o, "%sconst long i%d = (long)r%d;\n", ind, v, v);
        } else if (streams && vw > 1) {
            kf_buf_printf(o, "%sconst $vec(float, %d) v%d = $vload(%d, b%d, f%d);\n", ind, vw, v, vw, bv, v);
        } else {
            kf_buf_printf(o, "%sconst float r%d = %sb%d[f%s%d];\n", ind, v, cast, bv, bv != v ? "v" : "", v);
        }
    }
    if (vw == 1) {
        for (int i = 0; i < st->nnodes; i++) {
            const kf_node *n = &g->nodes[st->nodes[i]];
            if (kf_synth_is_read_op(n->op)) continue; /* loaded as a read */
            kf_buf_printf(o, "%sconst float r%d = ", ind, n->out);
            kf_synth_node_expr(s, n, o);
            kf_buf_puts(o, ";\n");
        }
        for (int r = lay.nreads; r < lay.nops; r++)
            kf_buf_printf(o, "%sb%d[f%d] = r%d;\n", ind, lay.v[r], lay.v[r], lay.v[r]);
    } else {
        for (int r = lay.nreads; r < lay.nops; r++)
            kf_buf_printf(o, "%s$vec(float, %d) w%d;\n", ind, vw, lay.v[r]);
        for (int c = 0; c < vw; c++) {
            kf_buf_printf(o, "%s{\n", ind);
            for (int r = 0; r < lay.nreads; r++) {
                int v = lay.v[r];
                if (q > 0 && lay.str[r][q - 1] != 0)
                    kf_buf_printf(o, "%s    const float r%d = v%d.%c;\n", ind, v, v, comp[c]);
            }
            for (int i = 0; i < st->nnodes; i++) {
                const kf_node *n = &g->nodes[st->nodes[i]];
                if (kf_synth_is_read_op(n->op)) continue; /* vw > 1: none */
                kf_buf_printf(o, "%s    const float r%d = ", ind, n->out);
                kf_synth_node_expr(s, n, o);
                kf_buf_puts(o, ";\n");
            }
            for (int r = lay.nreads; r < lay.nops; r++)
                kf_buf_printf(o, "%s    w%d.%c = r%d;\n", ind, lay.v[r], comp[c], lay.v[r]);
            kf_buf_printf(o, "%s}\n", ind);
        }
        for (int r = lay.nreads; r < lay.nops; r++)
            kf_buf_printf(o, "%s$vstore(%d, w%d, b%d, f%d);\n", ind, vw, lay.v[r], lay.v[r], lay.v[r]);
    }
    kf_buf_puts(o, "        }\n    }\n");
    int64_t G[1] = {global}, Lc[1] = {wg};
    kf_gk_launch(gp, &k, 1, G, Lc);
}
