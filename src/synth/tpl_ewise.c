/*
 * Elementwise template: a fused cluster of unary/binary ops over one iteration domain,
 * computed in a single pass. Broadcast operands are handled by coalescing the domain's
 * dimensions (adjacent dims merge when every operand is contiguous or broadcast across
 * both), then looping over the outer dims with a contiguous inner loop in which each
 * operand either streams (stride 1) or is a hoisted scalar (stride 0). The inner loop is
 * straight-line float code over the prelude's branch-free math, so GCC vectorises it.
 *
 * Parameters: threads, block (inner elements per parallel task), unroll.
 */
#include "synth_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* rows shorter than this are walked two dims at a time (kf_synth_ewise_emit) */
#define KF_EW_SHORT_ROW 8

void kf_synth_float_lit(double v, char *buf, size_t cap) { kf_op_float_lit(v, buf, cap); }

void kf_synth_ewise_params(kf_synth *s, kf_stage *st) {
    static const long blocks[] = {2048, 8192, 32768, 131072};
    static const long unroll[] = {1, 2, 4};
    static const long nt[] = {0, 1};
    kf_tpl_add_param(&s->space, st->prefix, "block", KF_ROLE_BLOCK, blocks, 4, 2);
    kf_tpl_add_param(&s->space, st->prefix, "unroll", KF_ROLE_UNROLL, unroll, 3, 0);
    /* streaming stores pay off when the outputs do not fit in the last-level cache */
    int64_t bytes = 0;
    for (int i = 0; i < st->nnodes; i++) {
        int v = s->g->nodes[st->nodes[i]].out;
        if (s->g->values[v].output_index >= 0) bytes += kf_shape_numel(&s->g->values[v].shape) * 4;
    }
    kf_tpl_add_param(&s->space, st->prefix, "nt", KF_ROLE_STREAM, nt, 2, s->dev.l3_bytes > 0 && bytes > s->dev.l3_bytes ? 1 : 0);
}

/* operand reference in the loop body */
static void operand(const kf_synth *s, int v, char *buf, size_t cap) {
    const kf_value *val = &s->g->values[v];
    if (val->is_const) kf_synth_float_lit(val->cval, buf, cap);
    else snprintf(buf, cap, "r%d", v);
}

void kf_synth_node_expr(const kf_synth *s, const kf_node *n, kf_buf *o) {
    char a[64], b[64] = "", x[64];
    operand(s, n->in[0], a, sizeof a);
    if (n->nin > 1) operand(s, n->in[1], b, sizeof b);
    kf_pw_emit e = {.in = {a, b}, .attr = &n->attr, .producer = KF_OP_COUNT};
    for (int k = 0; k < n->nin; k++) {
        const kf_value *v = &s->g->values[n->in[k]];
        e.is_const[k] = v->is_const;
        e.value[k] = v->cval;
    }
    /* operand 0's producer, when its own first operand is at hand in this stage's registers */
    const kf_value *xv = &s->g->values[n->in[0]];
    if (xv->producer >= 0) {
        const kf_node *pn = &s->g->nodes[xv->producer];
        if (s->val_stage[pn->out] == s->val_stage[n->out] && kf_op_is_elementwise(pn->op)) {
            operand(s, pn->in[0], x, sizeof x);
            e.producer = pn->op;
            e.producer_attr = &pn->attr;
            e.producer_in0 = x;
        }
    }
    kf_op_render_f32(kf_op_get(n->op), &e, o);
}

/* Emit "const float r<out> = <expr>;" for node n. */
static void emit_node(const kf_synth *s, const kf_node *n, kf_buf *o) {
    if (kf_synth_is_read_op(n->op)) return; /* loaded as a read */
    kf_buf_printf(o, "            const float r%d = ", n->out);
    kf_synth_node_expr(s, n, o);
    kf_buf_puts(o, ";\n");
}

/* strides of value v (shape vs, row-major) seen over domain dom (right-aligned) */
static void domain_strides(const kf_shape *dom, const kf_shape *vs, int64_t *stride) {
    int64_t run = 1;
    for (int j = dom->rank - 1; j >= 0; j--) {
        int vj = j - (dom->rank - vs->rank);
        if (vj < 0) { stride[j] = 0; continue; }
        stride[j] = vs->d[vj] == 1 ? 0 : run; /* size-1 dims broadcast */
        run *= vs->d[vj];
    }
}

void kf_synth_ewise_layout(const kf_synth *s, const kf_stage *st, kf_ew_layout *L) {
    const kf_graph *g = s->g;
    int64_t stride[KF_EW_MAX_OPS][KF_MAX_DIMS];
    /* operands: external reads and materialised writes */
    L->nops = 0;
    L->ng = 0;
    for (int i = 0; i < st->nnodes; i++) {
        const kf_node *n = &g->nodes[st->nodes[i]];
        kf_op_class cls = kf_op_get(n->op)->cls;
        if (cls == KF_CLASS_VIEW) { /* a read through its index map */
            if (L->nops >= KF_EW_MAX_OPS / 2) continue;
            L->v[L->nops] = n->out;
            L->take[L->nops] = -1;
            kf_synth_view_read(s, st, n->out, L, stride[L->nops]);
            L->nops++;
            continue;
        }
        /* a gather reads its index like any operand (before it), its data as its own read */
        for (int a = cls == KF_CLASS_GATHER; a < n->nin; a++) {
            int v = n->in[a];
            if (g->values[v].is_const || s->val_stage[v] == s->val_stage[n->out]) continue;
            int dup = 0;
            for (int r = 0; r < L->nops; r++) dup |= L->v[r] == v;
            if (dup || L->nops >= KF_EW_MAX_OPS / 2) continue;
            L->v[L->nops] = L->buf[L->nops] = v;
            L->base[L->nops] = 0;
            L->pad[L->nops] = 0;
            L->take[L->nops] = -1;
            domain_strides(&st->dom, &g->values[v].shape, stride[L->nops]);
            L->nops++;
        }
        if (cls == KF_CLASS_GATHER && L->nops < KF_EW_MAX_OPS / 2) {
            L->v[L->nops] = n->out;
            kf_synth_gather_read(s, st, n, L, stride[L->nops]);
            L->nops++;
        }
    }
    L->nreads = L->nops;
    L->nbufs = 0;
    for (int r = 0; r < L->nreads; r++) {
        int dup = 0;
        for (int k = 0; k < L->nbufs; k++) dup |= L->bufs[k] == L->buf[r];
        if (!dup) L->bufs[L->nbufs++] = L->buf[r];
    }
    for (int i = 0; i < st->nnodes; i++) {
        int v = g->nodes[st->nodes[i]].out;
        if (!s->materialize[v] || L->nops >= KF_EW_MAX_OPS) continue;
        L->v[L->nops] = L->buf[L->nops] = v;
        L->base[L->nops] = 0;
        L->take[L->nops] = -1;
        domain_strides(&st->dom, &g->values[v].shape, stride[L->nops]);
        L->nops++;
    }

    /* coalesce dims: drop size-1 dims, merge neighbours that every operand (and every
     * guard, an affine expression of the index like an offset) walks alike */
    int q = 0;
    for (int j = 0; j < st->dom.rank; j++) {
        if (st->dom.d[j] == 1) continue;
        int merge = q > 0;
        for (int r = 0; r < L->nops + L->ng && merge; r++) {
            int64_t prev = r < L->nops ? L->str[r][q - 1] : L->gstr[r - L->nops][q - 1];
            int64_t cur = r < L->nops ? stride[r][j] : L->graw[r - L->nops][j];
            if (!((prev == 0 && cur == 0) || (cur != 0 && prev == cur * st->dom.d[j]))) merge = 0;
        }
        int at = merge ? q - 1 : q;
        if (merge) L->dim[q - 1] *= st->dom.d[j];
        else L->dim[q++] = st->dom.d[j];
        for (int r = 0; r < L->nops; r++) L->str[r][at] = stride[r][j];
        for (int k = 0; k < L->ng; k++) L->gstr[k][at] = L->graw[k][j];
    }
    L->q = q;
}

/* The body of the inner loop for element j: the reads, the stage's nodes, the writes (to
 * the streaming buffers under nt). With plain, a padded read loads without its guards: the
 * caller runs j only where they all hold. */
static void emit_element(const kf_synth *s, const kf_stage *st, const kf_ew_layout *L, int plain, int nt,
                         kf_buf *o) {
    const int q = L->q;
    for (int r = 0; r < L->nreads; r++) {
        int v = L->v[r];
        int64_t inner_stride = q ? L->str[r][q - 1] : 0;
        /* an integer (an i64 index) is loaded as i<v> too: a gather takes its exact value */
        int integer = s->g->values[v].dtype == KF_I64;
        char idx[64], pad[64];
        if (inner_stride == 1) snprintf(idx, sizeof idx, "j");
        else snprintf(idx, sizeof idx, "j * %lldL", (long long)inner_stride);
        if (integer) snprintf(pad, sizeof pad, "%lldL", (long long)L->pad[r]);
        else kf_synth_float_lit(L->pad[r], pad, sizeof pad);
        kf_buf_printf(o, "            const %s %c%d = ", integer ? "long" : "float", integer ? 'i' : 'r', v);
        if (L->take[r] >= 0) { /* a gather: the index's value along its axis, fill outside */
            int t = L->take[r];
            kf_buf_printf(o, "(i%d >= 0 && i%d < %lldL) ? pv%d[%s + i%d * %lldL] : %s;\n", t, t, (long long)L->take_n[r], v,
                          inner_stride ? idx : "0", t, (long long)L->take_str[r], pad);
        } else if (kf_synth_ewise_guarded(L, r) && plain) { /* inside the run: every guard holds */
            kf_buf_printf(o, "b%d[off%d + %s];\n", L->buf[r], r, idx);
        } else if (kf_synth_ewise_guarded(L, r)) { /* a padded map: the pad value outside */
            kf_buf_puts(o, "(");
            for (int k = 0, n = 0; k < L->ng; k++) {
                if (L->gop[k] != r) continue;
                int64_t gs = q ? L->gstr[k][q - 1] : 0;
                kf_buf_printf(o, "%s(unsigned long)(g%d + j * %lldL) < %lldUL", n++ ? " && " : "", k, (long long)gs,
                              (long long)L->gn[k]);
            }
            kf_buf_printf(o, ") ? b%d[off%d + %s] : %s;\n", L->buf[r], r, idx, pad);
        } else if (inner_stride) {
            kf_buf_printf(o, "p%s%d[%s];\n", L->buf[r] != v ? "v" : "", v, idx);
        } else {
            kf_buf_printf(o, "s%d;\n", v);
        }
        if (integer) kf_buf_printf(o, "            const float r%d = (float)i%d;\n", v, v);
    }
    for (int i = 0; i < st->nnodes; i++) emit_node(s, &s->g->nodes[st->nodes[i]], o);
    for (int r = L->nreads; r < L->nops; r++) {
        if (nt) kf_buf_printf(o, "            t%d[j - jb] = r%d;\n", L->v[r], L->v[r]);
        else kf_buf_printf(o, "            p%d[j] = r%d;\n", L->v[r], L->v[r]);
    }
}

/* The run [lo, hi) of this row's j in [j0, j1) where every guard of every padded read
 * holds, computed once per row: a guard (unsigned)(g + j*a) < n is row-invariant when
 * a == 0 (the run is empty when it fails), else it bounds j on both sides,
 * 0 <= g + j*a <= n-1, by floor divisions (g may be negative); each bound moves one way
 * with g, so of guards that differ only in their offset the extreme two decide. lo <= hi
 * always; outside
 * the run every read keeps its guards. */
static void emit_run(const kf_ew_layout *L, kf_buf *o) {
    const int q = L->q;
    kf_buf_puts(o, "        long lo = j0, hi = j1; /* every guard holds on [lo, hi) */\n");
    for (int k = 0; k < L->ng; k++) {
        /* guards alike but for their offset (a window's taps along one dim) hold together
         * where the lowest and the highest offset hold: only those two bound the run */
        int lowest = 1, highest = 1;
        for (int k2 = 0; k2 < L->ng && (lowest || highest); k2++) {
            int alike = k2 != k && L->gn[k2] == L->gn[k];
            for (int j = 0; j < q && alike; j++) alike = L->gstr[k2][j] == L->gstr[k][j];
            if (!alike) continue;
            if (L->goff[k2] < L->goff[k] || (L->goff[k2] == L->goff[k] && k2 < k)) lowest = 0;
            if (L->goff[k2] > L->goff[k] || (L->goff[k2] == L->goff[k] && k2 < k)) highest = 0;
        }
        if (!lowest && !highest) continue;
        long long a = q ? (long long)L->gstr[k][q - 1] : 0, n = (long long)L->gn[k];
        if (a == 0) {
            kf_buf_printf(o, "        if ((unsigned long)g%d >= %lldUL) hi = j0;\n", k, n);
        } else if (a > 0) { /* j >= ceil(-g/a), j <= floor((n-1-g)/a) */
            kf_buf_printf(o, "        { const long t = -kf_floordiv(g%d, %lldL); if (t > lo) lo = t; }\n", k, a);
            kf_buf_printf(o, "        { const long t = kf_floordiv(%lldL - g%d, %lldL) + 1; if (t < hi) hi = t; }\n",
                          n - 1, k, a);
        } else { /* b = -a: j >= floor((g-n)/b) + 1, j <= floor(g/b) */
            kf_buf_printf(o, "        { const long t = kf_floordiv(g%d - %lldL, %lldL) + 1; if (t > lo) lo = t; }\n", k,
                          n, -a);
            kf_buf_printf(o, "        { const long t = kf_floordiv(g%d, %lldL) + 1; if (t < hi) hi = t; }\n", k, -a);
        }
    }
    kf_buf_puts(o, "        if (lo > j1) lo = j1;\n        if (hi < lo) hi = lo;\n");
}

void kf_synth_ewise_emit(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *o) {
    const kf_graph *g = s->g;
    const kf_space *sp = &s->space;
    long threads = kf_tpl_get(sp, p, st->prefix, "threads");
    long block = kf_tpl_get(sp, p, st->prefix, "block");
    long unroll = kf_tpl_get(sp, p, st->prefix, "unroll");
    long nt = kf_tpl_get(sp, p, st->prefix, "nt");

    kf_ew_layout lay;
    kf_synth_ewise_layout(s, st, &lay);
    const int nops = lay.nops, nreads = lay.nreads, q = lay.q;
    const int64_t *dim = lay.dim;
    int64_t (*str)[KF_MAX_DIMS] = lay.str;
    int64_t inner = q ? dim[q - 1] : 1, outer = 1;
    for (int j = 0; j + 1 < q; j++) outer *= dim[j];
    if (block > inner) block = inner;
    int64_t chunks = (inner + block - 1) / block;
    /* rows shorter than a few elements (a strided conv_transpose's interleave: rows of its
     * 2 phases): a task takes the next dim's rows too, stepping the offsets, so that the
     * division chain that places a row is paid once per dim2 rows, not per row */
    int two = q >= 2 && inner < KF_EW_SHORT_ROW && chunks == 1 && lay.ng == 0 && !nt;
    for (int r = 0; r < nreads; r++) two &= lay.take[r] < 0;
    const int64_t dim2 = two ? dim[q - 2] : 1;
    outer /= dim2;

    if (two)
        kf_buf_printf(o, "    /* domain coalesced to %lld x %lld rows of %lld, a task's rows together */\n",
                      (long long)outer, (long long)dim2, (long long)inner);
    else
        kf_buf_printf(o, "    /* domain coalesced to %lld x %lld, %lld chunk(s) of %ld per row */\n",
                      (long long)outer, (long long)inner, (long long)chunks, block);
    if (threads > 1 && outer * chunks > 1)
        kf_buf_printf(o, "    #pragma omp parallel for schedule(static) num_threads(%ld)\n", threads);
    kf_buf_printf(o, "    for (long task = 0; task < %lldL; task++) {\n", (long long)(outer * chunks));
    kf_buf_printf(o, "        const long o = task / %lldL, c = task %% %lldL;\n", (long long)chunks,
                  (long long)chunks);
    kf_buf_printf(o, "        const long j0 = c * %ldL;\n", block);
    kf_buf_printf(o, "        const long j1 = j0 + %ldL < %lldL ? j0 + %ldL : %lldL;\n", block,
                  (long long)inner, block, (long long)inner);
    kf_buf_puts(o, "        (void)o;\n");
    for (int r = 0; r < nops; r++) {
        kf_buf_printf(o, "        long off%d = %lldL;\n", r, (long long)(r < nreads ? lay.base[r] : 0));
    }
    for (int k = 0; k < lay.ng; k++) kf_buf_printf(o, "        long g%d = %lldL;\n", k, (long long)lay.goff[k]);
    if (q > 1 + two) {
        kf_buf_puts(o, "        { long rem = o, idx;\n");
        for (int j = q - 2 - two; j >= 0; j--) {
            kf_buf_printf(o, "          idx = rem %% %lldL; rem /= %lldL;\n", (long long)dim[j],
                          (long long)dim[j]);
            for (int r = 0; r < nops; r++)
                if (str[r][j]) kf_buf_printf(o, "          off%d += idx * %lldL;\n", r, (long long)str[r][j]);
            for (int k = 0; k < lay.ng; k++)
                if (lay.gstr[k][j]) kf_buf_printf(o, "          g%d += idx * %lldL;\n", k, (long long)lay.gstr[k][j]);
        }
        kf_buf_puts(o, "          (void)rem; }\n");
    }
    if (two) kf_buf_printf(o, "        for (long i2 = 0; i2 < %lldL; i2++) {\n", (long long)dim2);
    for (int r = 0; r < nops; r++) {
        int v = lay.v[r];
        const char *ct = kf_synth_ctype(g, v);
        int64_t inner_stride = q ? str[r][q - 1] : 0;
        if (r < nreads && kf_synth_ewise_guarded(&lay, r)) {
            continue; /* loaded in the loop, under its guards */
        } else if (r < nreads) { /* a view read is "pv": its value may be written too */
            if (inner_stride || lay.take[r] >= 0) /* a gather loads per element */
                kf_buf_printf(o, "        const %s *restrict p%s%d = b%d + off%d;\n", ct, lay.buf[r] != v ? "v" : "", v,
                              lay.buf[r], r);
            else kf_buf_printf(o, "        const %s s%d = b%d[off%d];\n", ct, v, lay.buf[r], r);
        } else {
            kf_buf_printf(o, "        %s *restrict p%d = b%d + off%d;\n", ct, v, v, r);
        }
    }
    const char *ind = nt ? "    " : "";
    const int split = lay.ng > 0; /* padded reads: borders under guards, the interior plain */
    if (split) emit_run(&lay, o);
    if (nt) {
        kf_buf_puts(o, "        for (long jb = j0; jb < j1; jb += 512) {\n");
        kf_buf_puts(o, "          const long je = jb + 512 < j1 ? jb + 512 : j1;\n");
        for (int r = nreads; r < nops; r++)
            kf_buf_printf(o, "          float t%d[512] __attribute__((aligned(64)));\n", lay.v[r]);
    }
    const char *ja = nt ? "jb" : "j0", *jz = nt ? "je" : "j1";
    if (split) {
        kf_buf_printf(o, "%s        const long jl = lo < %s ? %s : lo > %s ? %s : lo;\n", ind, ja, ja, jz, jz);
        kf_buf_printf(o, "%s        const long jh = hi < jl ? jl : hi > %s ? %s : hi;\n", ind, jz, jz);
        kf_buf_printf(o, "%s        for (int side = 0; side < 2; side++)\n", ind);
        kf_buf_printf(o, "%s        for (long j = side ? jh : %s; j < (side ? %s : jl); j++) {\n", ind, ja, jz);
        emit_element(s, st, &lay, 0, nt, o);
        kf_buf_printf(o, "%s        }\n", ind);
        ja = "jl";
        jz = "jh";
    }
    if (unroll > 1) kf_buf_printf(o, "%s        #pragma GCC unroll %ld\n", ind, unroll);
    kf_buf_printf(o, "%s        for (long j = %s; j < %s; j++) {\n", ind, ja, jz);
    emit_element(s, st, &lay, split, nt, o);
    kf_buf_printf(o, "%s        }\n", ind);
    if (nt) {
        for (int r = nreads; r < nops; r++)
            kf_buf_printf(o, "          kf_stream_copy(p%d + jb, t%d, je - jb);\n", lay.v[r], lay.v[r]);
        kf_buf_puts(o, "        }\n        kf_sfence();\n");
    }
    if (two) {
        for (int r = 0; r < nops; r++)
            if (str[r][q - 2]) kf_buf_printf(o, "        off%d += %lldL;\n", r, (long long)str[r][q - 2]);
        kf_buf_puts(o, "        }\n");
    }
    kf_buf_puts(o, "    }\n");
}

void kf_synth_prologue_emit(const kf_synth *s, const kf_stage *st, int x, int local, const char *fname,
                            kf_buf *o) {
    const kf_graph *g = s->g;
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, st, &lay);
    const int q = lay.q;
    const int64_t inner = q ? lay.dim[q - 1] : 1;
    kf_buf_printf(o, "static inline void %s(long f0, long len, float *restrict out", fname);
    for (int r = 0; r < lay.nreads; r++) /* a stage with views is never a prologue */
        kf_buf_printf(o, ", const %s *restrict b%d", kf_synth_ctype(g, lay.v[r]), lay.v[r]);
    kf_buf_puts(o, ") {\n");
    kf_buf_printf(o, "    /* elements of %s over a domain coalesced to rows of %lld */\n",
                  g->values[x].name, (long long)inner);
    if (local >= 0) kf_buf_puts(o, "    long done = 0;\n");
    kf_buf_puts(o, "    while (len > 0) {\n");
    kf_buf_printf(o, "        const long o = f0 / %lldL, j0 = f0 %% %lldL;\n", (long long)inner,
                  (long long)inner);
    kf_buf_printf(o, "        const long n = %lldL - j0 < len ? %lldL - j0 : len;\n", (long long)inner,
                  (long long)inner);
    kf_buf_puts(o, "        (void)o;\n");
    for (int r = 0; r < lay.nreads; r++) kf_buf_printf(o, "        long off%d = 0;\n", r);
    if (q > 1) {
        kf_buf_puts(o, "        { long rem = o, idx;\n");
        for (int j = q - 2; j >= 0; j--) {
            kf_buf_printf(o, "          idx = rem %% %lldL; rem /= %lldL;\n", (long long)lay.dim[j],
                          (long long)lay.dim[j]);
            for (int r = 0; r < lay.nreads; r++)
                if (lay.str[r][j])
                    kf_buf_printf(o, "          off%d += idx * %lldL;\n", r, (long long)lay.str[r][j]);
        }
        kf_buf_puts(o, "          (void)rem; }\n");
    }
    for (int r = 0; r < lay.nreads; r++) {
        int v = lay.v[r];
        const char *ct = kf_synth_ctype(g, v);
        if (v == local) /* b<local> holds the requested elements themselves, from f0 on */
            kf_buf_printf(o, "        const %s *restrict p%d = b%d + done;\n", ct, v, v);
        else if (q && lay.str[r][q - 1]) kf_buf_printf(o, "        const %s *restrict p%d = b%d + off%d + j0;\n", ct, v, v, r);
        else kf_buf_printf(o, "        const %s s%d = b%d[off%d];\n", ct, v, v, r);
    }
    kf_buf_puts(o, "        for (long j = 0; j < n; j++) {\n");
    for (int r = 0; r < lay.nreads; r++) {
        int v = lay.v[r];
        if (v == local || (q && lay.str[r][q - 1])) kf_buf_printf(o, "            const float r%d = p%d[j];\n", v, v);
        else kf_buf_printf(o, "            const float r%d = s%d;\n", v, v);
    }
    for (int i = 0; i < st->nnodes; i++) {
        const kf_node *n = &g->nodes[st->nodes[i]];
        emit_node(s, n, o);
        if (n->out == x) break; /* later members do not feed x */
    }
    kf_buf_printf(o, "            out[j] = r%d;\n        }\n", x);
    kf_buf_printf(o, "        out += n; f0 += n; len -= n;%s\n    }\n}\n", local >= 0 ? " done += n;" : "");
}

int kf_synth_epilogue_ok(const kf_synth *s, const kf_stage *e, int y) {
    const kf_graph *g = s->g;
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, e, &lay);
    if (lay.ng || kf_shape_numel(&e->dom) != kf_shape_numel(&g->values[y].shape)) return 0;
    for (int r = 0; r < lay.nreads; r++)
        if (lay.take[r] >= 0) return 0; /* a gather: kf_synth_epilogue_emit loads plainly */
    int ys = 0;
    for (int r = 0; r < lay.nreads; r++) {
        if (lay.buf[r] != y) continue;
        /* y read element for element: at the domain's flat index */
        int64_t run = 1;
        for (int j = lay.q - 1; j >= 0; j--) {
            if (lay.str[r][j] != run) return 0;
            run *= lay.dim[j];
        }
        if (lay.base[r] != 0) return 0;
        ys++;
    }
    return ys > 0;
}

void kf_synth_epilogue_emit(const kf_synth *s, const kf_stage *e, int y, const char *fname, kf_buf *o) {
    const kf_graph *g = s->g;
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, e, &lay);
    const int q = lay.q, nreads = lay.nreads, nops = lay.nops;
    const int64_t inner = q ? lay.dim[q - 1] : 1;
    kf_buf_printf(o, "static inline void %s(long f0, long len, const float *restrict in", fname);
    for (int b = 0; b < lay.nbufs; b++)
        if (lay.bufs[b] != y) kf_buf_printf(o, ", const %s *restrict b%d", kf_synth_ctype(g, lay.bufs[b]), lay.bufs[b]);
    for (int r = nreads; r < nops; r++) kf_buf_printf(o, ", %s *restrict b%d", kf_synth_ctype(g, lay.v[r]), lay.v[r]);
    kf_buf_puts(o, ") {\n");
    kf_buf_printf(o, "    /* the elementwise stage on elements f0 .. f0+len-1 of %s (in), rows of %lld */\n",
                  g->values[y].name, (long long)inner);
    kf_buf_puts(o, "    while (len > 0) {\n");
    kf_buf_printf(o, "        const long o = f0 / %lldL, j0 = f0 %% %lldL;\n", (long long)inner, (long long)inner);
    kf_buf_printf(o, "        const long n = %lldL - j0 < len ? %lldL - j0 : len;\n", (long long)inner, (long long)inner);
    kf_buf_puts(o, "        (void)o;\n");
    for (int r = 0; r < nops; r++)
        if (r >= nreads || lay.buf[r] != y)
            kf_buf_printf(o, "        long off%d = %lldL;\n", r, (long long)(r < nreads ? lay.base[r] : 0));
    if (q > 1) {
        kf_buf_puts(o, "        { long rem = o, idx;\n");
        for (int j = q - 2; j >= 0; j--) {
            kf_buf_printf(o, "          idx = rem %% %lldL; rem /= %lldL;\n", (long long)lay.dim[j], (long long)lay.dim[j]);
            for (int r = 0; r < nops; r++)
                if (lay.str[r][j] && (r >= nreads || lay.buf[r] != y))
                    kf_buf_printf(o, "          off%d += idx * %lldL;\n", r, (long long)lay.str[r][j]);
        }
        kf_buf_puts(o, "          (void)rem; }\n");
    }
    for (int r = 0; r < nops; r++) {
        int v = lay.v[r];
        const char *ct = kf_synth_ctype(g, v);
        int64_t is = q ? lay.str[r][q - 1] : 0;
        if (r < nreads && lay.buf[r] == y) continue;
        if (r >= nreads) kf_buf_printf(o, "        %s *restrict p%d = b%d + off%d + j0;\n", ct, v, v, r);
        else if (is) kf_buf_printf(o, "        const %s *restrict p%d = b%d + off%d + j0 * %lldL;\n", ct, v, lay.buf[r], r, (long long)is);
        else kf_buf_printf(o, "        const %s s%d = b%d[off%d];\n", ct, v, lay.buf[r], r);
    }
    kf_buf_puts(o, "        for (long j = 0; j < n; j++) {\n");
    for (int r = 0; r < nreads; r++) {
        int v = lay.v[r];
        int64_t is = q ? lay.str[r][q - 1] : 0;
        if (lay.buf[r] == y) kf_buf_printf(o, "            const float r%d = in[j];\n", v);
        else if (is == 1) kf_buf_printf(o, "            const float r%d = p%d[j];\n", v, v);
        else if (is) kf_buf_printf(o, "            const float r%d = p%d[j * %lldL];\n", v, v, (long long)is);
        else kf_buf_printf(o, "            const float r%d = s%d;\n", v, v);
    }
    for (int i = 0; i < e->nnodes; i++) emit_node(s, &g->nodes[e->nodes[i]], o);
    for (int r = nreads; r < nops; r++) kf_buf_printf(o, "            p%d[j] = r%d;\n", lay.v[r], lay.v[r]);
    kf_buf_puts(o, "        }\n        in += n; f0 += n; len -= n;\n    }\n}\n");
}
