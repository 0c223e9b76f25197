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

/* KF_NAN / KF_INF and a float-suffixed literal are spelled alike in C, OpenCL C, CUDA and
 * MSL (MSL has no double, so "(float)0.1" would not do); nine digits round-trip a float. */
void kf_synth_float_lit(double v, char *buf, size_t cap) {
    if (isnan(v)) snprintf(buf, cap, "KF_NAN");
    else if (isinf(v)) snprintf(buf, cap, v > 0 ? "KF_INF" : "(-KF_INF)");
    else snprintf(buf, cap, "(%.9ef)", (double)(float)v);
}

void kf_synth_ewise_params(kf_synth *s, kf_stage *st) {
    static const long blocks[] = {2048, 8192, 32768, 131072};
    static const long unroll[] = {1, 2, 4};
    static const long nt[] = {0, 1};
    kf_tpl_add_param(&s->space, st->prefix, "block", blocks, 4, 2);
    kf_tpl_add_param(&s->space, st->prefix, "unroll", unroll, 3, 0);
    /* streaming stores pay off when the outputs do not fit in the last-level cache */
    int64_t bytes = 0;
    for (int i = 0; i < st->nnodes; i++) {
        int v = s->g->nodes[st->nodes[i]].out;
        if (s->g->values[v].output_index >= 0) bytes += kf_shape_numel(&s->g->values[v].shape) * 4;
    }
    kf_tpl_add_param(&s->space, st->prefix, "nt", nt, 2, s->dev.l3_bytes > 0 && bytes > s->dev.l3_bytes ? 1 : 0);
}

/* operand reference in the loop body */
static void operand(const kf_synth *s, int v, char *buf, size_t cap) {
    const kf_value *val = &s->g->values[v];
    if (val->is_const) kf_synth_float_lit(val->cval, buf, cap);
    else snprintf(buf, cap, "r%d", v);
}

static int const_int_exponent(const kf_value *b, long *n) {
    if (!b->is_const) return 0;
    double e = b->cval;
    if (e != floor(e) || fabs(e) > 8) return 0;
    *n = (long)e;
    return 1;
}

void kf_synth_node_expr(const kf_synth *s, const kf_node *n, kf_buf *o) {
    char a[64], b[64] = "", al[64], be[64];
    operand(s, n->in[0], a, sizeof a);
    if (n->nin > 1) operand(s, n->in[1], b, sizeof b);
    kf_synth_float_lit(n->attr.alpha, al, sizeof al);
    kf_synth_float_lit(n->attr.beta, be, sizeof be);
    switch (n->op) {
    case KF_OP_RELU: kf_buf_printf(o, "(%s < 0.0f ? 0.0f : %s)", a, a); break;
    case KF_OP_LEAKY_RELU: kf_buf_printf(o, "(%s >= 0.0f ? %s : %s * %s)", a, a, al, a); break;
    case KF_OP_SIGMOID: kf_buf_printf(o, "kf_sigmoidf(%s)", a); break;
    case KF_OP_TANH: {
        /* tanh(softplus(x)) with beta 1 (mish's core): with n = e^x, tanh(log(1 + n)) =
         * n(n + 2) / (n(n + 2) + 2), one exp and one division instead of exp, log1p and tanh
         * (the ALU cost that kept mish from the memory floor on the H200); exact in real
         * arithmetic, a few ulp in float, and taken only below softplus's threshold (<= 20,
         * where n(n + 2) cannot overflow). Past it softplus is x itself. The softplus node
         * is still emitted; a compiler drops it when tanh was its only reader. Only when
         * softplus is computed in the same stage: elsewhere its input is not in a register
         * here (tanh then reads softplus's stored result). */
        const kf_value *xv = &s->g->values[n->in[0]];
        const kf_node *sp = xv->producer >= 0 ? &s->g->nodes[xv->producer] : NULL;
        if (sp && sp->op == KF_OP_SOFTPLUS && sp->attr.alpha == 1.0 && sp->attr.beta <= 20.0 &&
            s->val_stage[sp->out] == s->val_stage[n->out]) {
            char x[64], th[64];
            operand(s, sp->in[0], x, sizeof x);
            kf_synth_float_lit(sp->attr.beta, th, sizeof th);
            kf_buf_printf(o, "(%s > %s ? kf_tanhf(%s) : kf_tanh_softplusf(%s))", x, th, x, x);
        } else {
            kf_buf_printf(o, "kf_tanhf(%s)", a);
        }
        break;
    }
    case KF_OP_GELU:
        kf_buf_printf(o, "0.5f * %s * (1.0f + kf_erff(%s * 0.70710678118654752f))", a, a);
        break;
    case KF_OP_GELU_TANH:
        kf_buf_printf(o, "0.5f * %s * (1.0f + kf_tanhf(0.79788456080286536f * (%s + "
                         "0.044715f * %s * %s * %s)))", a, a, a, a, a);
        break;
    case KF_OP_SILU:
    case KF_OP_SWISH: kf_buf_printf(o, "%s / (1.0f + kf_expf(-%s))", a, a); break;
    case KF_OP_SELU:
        kf_buf_printf(o, "1.0507009873554804934f * (%s > 0.0f ? %s : "
                         "1.6732632423543772848f * kf_expm1f(%s))", a, a, a);
        break;
    case KF_OP_ELU: kf_buf_printf(o, "(%s > 0.0f ? %s : %s * kf_expm1f(%s))", a, a, al, a); break;
    case KF_OP_HARDSIGMOID:
        kf_buf_printf(o, "kf_clampf(%s / 6.0f + 0.5f, 0.0f, 1.0f)", a);
        break;
    case KF_OP_HARDTANH: kf_buf_printf(o, "kf_clampf(%s, %s, %s)", a, al, be); break;
    case KF_OP_SOFTPLUS:
        kf_buf_printf(o, "(%s * %s > %s ? %s : kf_log1pf(kf_expf(%s * %s)) / %s)", a, al, be, a,
                      al, a, al);
        break;
    case KF_OP_SOFTSIGN: kf_buf_printf(o, "%s / (1.0f + kf_fabsf(%s))", a, a); break;
    case KF_OP_EXP: kf_buf_printf(o, "kf_expf(%s)", a); break;
    case KF_OP_LOG: kf_buf_printf(o, "kf_logf(%s)", a); break;
    case KF_OP_SQRT: kf_buf_printf(o, "kf_sqrtf(%s)", a); break;
    case KF_OP_RSQRT: kf_buf_printf(o, "1.0f / kf_sqrtf(%s)", a); break;
    case KF_OP_ABS: kf_buf_printf(o, "kf_fabsf(%s)", a); break;
    case KF_OP_NEG: kf_buf_printf(o, "-%s", a); break;
    case KF_OP_SQUARE: kf_buf_printf(o, "%s * %s", a, a); break;
    case KF_OP_ADD: kf_buf_printf(o, "%s + %s", a, b); break;
    case KF_OP_SUB: kf_buf_printf(o, "%s - %s", a, b); break;
    case KF_OP_MUL: kf_buf_printf(o, "%s * %s", a, b); break;
    case KF_OP_DIV: kf_buf_printf(o, "%s / %s", a, b); break;
    /* NaN-propagating max/min: when either is NaN both compares fail and a + b is NaN.
     * (Self-compares such as a != a stop GCC 12 from vectorising some loops.) */
    case KF_OP_MAXIMUM: kf_buf_printf(o, "((%s < %s) ? %s : ((%s >= %s) ? %s : %s + %s))", b, a, a, b, a, b, a, b); break;
    case KF_OP_MINIMUM: kf_buf_printf(o, "((%s > %s) ? %s : ((%s <= %s) ? %s : %s + %s))", b, a, a, b, a, b, a, b); break;
    case KF_OP_POW: {
        long e;
        if (const_int_exponent(&s->g->values[n->in[1]], &e)) {
            if (e == 0) { kf_buf_puts(o, "1.0f"); break; }
            kf_buf_puts(o, e < 0 ? "1.0f / (" : "(");
            for (long i = 0; i < (e < 0 ? -e : e); i++) kf_buf_printf(o, "%s%s", i ? " * " : "", a);
            kf_buf_puts(o, ")");
        } else if (s->g->values[n->in[1]].is_const && s->g->values[n->in[1]].cval == 0.5) {
            kf_buf_printf(o, "kf_sqrtf(%s)", a);
        } else {
            kf_buf_printf(o, "kf_powf(%s, %s)", a, b);
        }
        break;
    }
    default: kf_buf_printf(o, "0.0f /* op %s is not elementwise */", kf_op_get(n->op)->name); break;
    }
}

/* Emit "const float r<out> = <expr>;" for node n. */
static void emit_node(const kf_synth *s, const kf_node *n, kf_buf *o) {
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
    for (int i = 0; i < st->nnodes; i++) {
        const kf_node *n = &g->nodes[st->nodes[i]];
        for (int a = 0; a < n->nin; a++) {
            int v = n->in[a];
            if (g->values[v].is_const || s->val_stage[v] == s->val_stage[n->out]) continue;
            int dup = 0;
            for (int r = 0; r < L->nops; r++) dup |= L->v[r] == v;
            if (dup || L->nops >= KF_EW_MAX_OPS / 2) continue;
            L->v[L->nops] = v;
            domain_strides(&st->dom, &g->values[v].shape, stride[L->nops]);
            L->nops++;
        }
    }
    L->nreads = L->nops;
    for (int i = 0; i < st->nnodes; i++) {
        int v = g->nodes[st->nodes[i]].out;
        if (!s->materialize[v] || L->nops >= KF_EW_MAX_OPS) continue;
        L->v[L->nops] = v;
        domain_strides(&st->dom, &g->values[v].shape, stride[L->nops]);
        L->nops++;
    }

    /* coalesce dims: drop size-1 dims, merge neighbours that every operand walks alike */
    int q = 0;
    for (int j = 0; j < st->dom.rank; j++) {
        if (st->dom.d[j] == 1) continue;
        int merge = q > 0;
        for (int r = 0; r < L->nops && merge; r++) {
            int64_t prev = L->str[r][q - 1], cur = stride[r][j];
            if (!((prev == 0 && cur == 0) || (cur != 0 && prev == cur * st->dom.d[j]))) merge = 0;
        }
        if (merge) {
            L->dim[q - 1] *= st->dom.d[j];
            for (int r = 0; r < L->nops; r++) L->str[r][q - 1] = stride[r][j];
        } else {
            L->dim[q] = st->dom.d[j];
            for (int r = 0; r < L->nops; r++) L->str[r][q] = stride[r][j];
            q++;
        }
    }
    L->q = q;
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
        kf_buf_printf(o, "        long off%d = 0;\n", r);
    }
    if (q > 1) {
        kf_buf_puts(o, "        { long rem = o, idx;\n");
        for (int j = q - 2; j >= 0; j--) {
            kf_buf_printf(o, "          idx = rem %% %lldL; rem /= %lldL;\n", (long long)dim[j],
                          (long long)dim[j]);
            for (int r = 0; r < nops; r++)
                if (str[r][j]) kf_buf_printf(o, "          off%d += idx * %lldL;\n", r, (long long)str[r][j]);
        }
        kf_buf_puts(o, "          (void)rem; }\n");
    }
    for (int r = 0; r < nops; r++) {
        int v = lay.v[r];
        const char *ct = kf_synth_ctype(g, v);
        int64_t inner_stride = q ? str[r][q - 1] : 0;
        if (r < nreads) {
            if (inner_stride) kf_buf_printf(o, "        const %s *restrict p%d = b%d + off%d;\n", ct, v, v, r);
            else kf_buf_printf(o, "        const %s s%d = b%d[off%d];\n", ct, v, v, r);
        } else {
            kf_buf_printf(o, "        %s *restrict p%d = b%d + off%d;\n", ct, v, v, r);
        }
    }
    const char *ind = nt ? "    " : "";
    if (nt) {
        kf_buf_puts(o, "        for (long jb = j0; jb < j1; jb += 512) {\n");
        kf_buf_puts(o, "          const long je = jb + 512 < j1 ? jb + 512 : j1;\n");
        for (int r = nreads; r < nops; r++)
            kf_buf_printf(o, "          float t%d[512] __attribute__((aligned(64)));\n", lay.v[r]);
    }
    if (unroll > 1) kf_buf_printf(o, "%s        #pragma GCC unroll %ld\n", ind, unroll);
    kf_buf_printf(o, "%s        for (long j = %s; j < %s; j++) {\n", ind, nt ? "jb" : "j0", nt ? "je" : "j1");
    for (int r = 0; r < nreads; r++) {
        int v = lay.v[r];
        int64_t inner_stride = q ? str[r][q - 1] : 0;
        if (inner_stride) kf_buf_printf(o, "            const float r%d = p%d[j];\n", v, v);
        else kf_buf_printf(o, "            const float r%d = s%d;\n", v, v);
    }
    for (int i = 0; i < st->nnodes; i++) emit_node(s, &g->nodes[st->nodes[i]], o);
    for (int r = nreads; r < nops; r++) {
        if (nt) kf_buf_printf(o, "            t%d[j - jb] = r%d;\n", lay.v[r], lay.v[r]);
        else kf_buf_printf(o, "            p%d[j] = r%d;\n", lay.v[r], lay.v[r]);
    }
    kf_buf_printf(o, "%s        }\n", ind);
    if (nt) {
        for (int r = nreads; r < nops; r++)
            kf_buf_printf(o, "          kf_stream_copy(p%d + jb, t%d, je - jb);\n", lay.v[r], lay.v[r]);
        kf_buf_puts(o, "        }\n        kf_sfence();\n");
    }
    kf_buf_puts(o, "    }\n");
}

void kf_synth_prologue_emit(const kf_synth *s, const kf_stage *st, int x, const char *fname,
                            kf_buf *o) {
    const kf_graph *g = s->g;
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, st, &lay);
    const int q = lay.q;
    const int64_t inner = q ? lay.dim[q - 1] : 1;
    kf_buf_printf(o, "static inline void %s(long f0, long len, float *restrict out", fname);
    for (int r = 0; r < lay.nreads; r++)
        kf_buf_printf(o, ", const %s *restrict b%d", kf_synth_ctype(g, lay.v[r]), lay.v[r]);
    kf_buf_puts(o, ") {\n");
    kf_buf_printf(o, "    /* elements of %s over a domain coalesced to rows of %lld */\n",
                  g->values[x].name, (long long)inner);
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
        if (q && lay.str[r][q - 1]) kf_buf_printf(o, "        const %s *restrict p%d = b%d + off%d + j0;\n", ct, v, v, r);
        else kf_buf_printf(o, "        const %s s%d = b%d[off%d];\n", ct, v, v, r);
    }
    kf_buf_puts(o, "        for (long j = 0; j < n; j++) {\n");
    for (int r = 0; r < lay.nreads; r++) {
        int v = lay.v[r];
        if (q && lay.str[r][q - 1]) kf_buf_printf(o, "            const float r%d = p%d[j];\n", v, v);
        else kf_buf_printf(o, "            const float r%d = s%d;\n", v, v);
    }
    for (int i = 0; i < st->nnodes; i++) {
        const kf_node *n = &g->nodes[st->nodes[i]];
        emit_node(s, n, o);
        if (n->out == x) break; /* later members do not feed x */
    }
    kf_buf_printf(o, "            out[j] = r%d;\n        }\n", x);
    kf_buf_puts(o, "        out += n; f0 += n; len -= n;\n    }\n}\n");
}
