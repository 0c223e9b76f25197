/*
 * Epilogues on the GPU path (issue 29): an elementwise stage that reads a matmul's (or an
 * axis reduction's) result element for element is computed where the template stores that
 * result, so the result never goes through memory and the chain costs no kernel of its
 * own. The planner decides it (synth.c fuse_epilogues, kf_stage.epilogue) as on the CPU;
 * this file holds the GPU half:
 *
 *   - kf_gpu_epilogue_fits: the kernel that takes the epilogue keeps within the kernel
 *     form's parameter limit;
 *   - kf_gpu_emit_epilogue: the helper `kf_epi<y>(f, v, operands..., results...)`, which
 *     computes the elementwise stage at flat index f of y (y's element there being v) and
 *     writes the stage's results;
 *   - kf_gpu_substitute_epilogue (from kf_gk_launch): in a kernel with the parameter b<y>,
 *     every store `b<y>[i] = e;` becomes `kf_epi<y>(i, e, operands..., results...);` and
 *     the parameter b<y> gives way to the epilogue's operands and results. The templates
 *     write their stores as usual and know nothing of the chain (the store-side twin of
 *     the prologue's load substitution in gpu.c); a template stores y only as scalar
 *     `b<y>[i] = e;` statements where its stage has an epilogue (the matmul's vector
 *     stores are scalar there);
 *   - kf_gpu_epilogue_params: the parameter "<prefix>epi" (1 fused, 0 apart) on the host,
 *     and the elementwise stage's own parameters gated on epi=0 (kf_synth_render then
 *     renders the point from a copy of the plan with that stage apart: synth.c
 *     partition_at).
 */
#include "gpu_tpl.h"

#include <stdio.h>
#include <string.h>

/* Kernel parameters the host stage's kernels take besides its result (a matmul: A and B,
 * or at most one of them and its prologue's operands; a reduction: its input or its
 * prologue's operands, and up to two scratch partials). */
static int host_params(const kf_synth *s, const kf_stage *h) {
    int n = h->kind == KF_STAGE_MATMUL ? 2 : 3;
    if (h->prologue) {
        kf_ew_layout pl;
        kf_synth_ewise_layout(s, &s->st[h->prologue - 1], &pl);
        n = pl.nbufs + 2;
    }
    return n;
}

int kf_gpu_epilogue_fits(const kf_synth *s, const kf_stage *h, const kf_stage *e) {
    const kf_graph *g = s->g;
    int y = g->nodes[h->nodes[0]].out;
    if (g->values[y].dtype != KF_F32) return 0; /* v is handed over as a float */
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, e, &lay);
    int n = host_params(s, h) + (lay.nops - lay.nreads);
    for (int b = 0; b < lay.nbufs; b++) n += lay.bufs[b] != y;
    return n <= KF_GK_MAX_PARAMS;
}

/* The value y whose stores stage k's kernels hand to an epilogue, or -1. */
static int epilogue_value(const kf_synth *s, int v) {
    int k = v >= 0 && v < s->g->nvalues ? s->val_stage[v] : -1;
    if (k < 0 || !s->st[k].epilogue || s->materialize[v]) return -1;
    return s->g->nodes[s->st[k].nodes[0]].out == v ? k : -1;
}

int kf_gpu_stage_has_epilogue(const kf_synth *s, const kf_stage *st) {
    return st->epilogue != 0 && epilogue_value(s, s->g->nodes[st->nodes[0]].out) >= 0;
}

void kf_gpu_emit_epilogue(kf_gplan *gp, const kf_stage *h) {
    const kf_synth *s = gp->s;
    kf_gpu_emit_pointwise_at(gp, &s->st[h->epilogue - 1], s->g->nodes[h->nodes[0]].out, -1);
}

void kf_gpu_emit_pointwise_at(kf_gplan *gp, const kf_stage *e, int y, int x) {
    const kf_synth *s = gp->s;
    const kf_graph *g = s->g;
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, e, &lay);
    const int q = lay.q;
    const int64_t inner = q ? lay.dim[q - 1] : 1;
    const char *ix = gp->ix;
    char lit[32];
    kf_buf f = {0};
    kf_buf_printf(&f, "/* the fused elementwise stage at flat index f of %s, whose value there is v%s */\n",
                  g->values[y].name, x >= 0 ? ": its value x there" : "");
    if (x >= 0) kf_buf_printf(&f, "$fn float kf_rp%d(%s f, float v", x, ix);
    else kf_buf_printf(&f, "$fn void kf_epi%d(%s f, float v", y, ix);
    for (int b = 0; b < lay.nbufs; b++)
        if (lay.bufs[b] != y)
            kf_buf_printf(&f, ", $global const %s *$restrict b%d", kf_gpu_ctype(g, lay.bufs[b]), lay.bufs[b]);
    for (int r = lay.nreads; r < lay.nops; r++)
        kf_buf_printf(&f, ", $global %s *$restrict b%d", kf_gpu_ctype(g, lay.v[r]), lay.v[r]);
    kf_buf_puts(&f, ") {\n");
    kf_buf_printf(&f, "    %s o = f / %s;\n", ix, kf_gpu_lit(gp, inner, lit, sizeof lit));
    kf_buf_printf(&f, "    const %s j = f - o * %s;\n", ix, lit);
    /* offsets of the other operands (a view: its base in its buffer) and of the results */
    for (int r = 0; r < lay.nops; r++) {
        if (r < lay.nreads && lay.buf[r] == y) continue;
        int64_t base = r < lay.nreads ? lay.base[r] : 0, is = q ? lay.str[r][q - 1] : 0;
        kf_buf_printf(&f, "    %s off%d = ", ix, r);
        if (base) kf_buf_printf(&f, "%s%s", kf_gpu_lit(gp, base, lit, sizeof lit), is ? " + " : "");
        if (is == 1) kf_buf_puts(&f, "j");
        else if (is) kf_buf_printf(&f, "j * %s", kf_gpu_lit(gp, is, lit, sizeof lit));
        else if (!base) kf_buf_puts(&f, "0");
        kf_buf_puts(&f, ";\n");
    }
    /* the outer dims down to the outermost that an operand walks (none: no walk, which
     * nvcc would warn of as a variable set and never used) */
    int dmin = q - 1;
    for (int d = 0; d < q - 1 && dmin == q - 1; d++)
        for (int r = 0; r < lay.nops; r++)
            if (lay.str[r][d] && !(r < lay.nreads && lay.buf[r] == y)) dmin = d;
    if (dmin < q - 1) {
        kf_buf_printf(&f, "    { %s idx;\n", ix);
        for (int d = q - 2; d >= dmin; d--) {
            char dl[32];
            kf_gpu_lit(gp, lay.dim[d], dl, sizeof dl);
            kf_buf_printf(&f, "      idx = o %% %s; o = o / %s;\n", dl, dl);
            for (int r = 0; r < lay.nops; r++)
                if (lay.str[r][d] && !(r < lay.nreads && lay.buf[r] == y))
                    kf_buf_printf(&f, "      off%d += idx * %s;\n", r, kf_gpu_lit(gp, lay.str[r][d], lit, sizeof lit));
        }
        kf_buf_puts(&f, "      (void)idx; }\n");
    }
    kf_buf_puts(&f, "    (void)o; (void)j;\n");
    for (int r = 0; r < lay.nreads; r++) {
        if (lay.buf[r] == y) kf_buf_printf(&f, "    const float r%d = v;\n", lay.v[r]);
        else kf_buf_printf(&f, "    const float r%d = %sb%d[off%d];\n", lay.v[r],
                           g->values[lay.buf[r]].dtype == KF_F32 ? "" : "(float)", lay.buf[r], r);
    }
    for (int i = 0; i < e->nnodes; i++) {
        const kf_node *n = &g->nodes[e->nodes[i]];
        if (kf_synth_is_read_op(n->op)) continue; /* loaded as a read */
        kf_buf_printf(&f, "    const float r%d = ", n->out);
        kf_synth_node_expr(s, n, &f);
        kf_buf_puts(&f, ";\n");
    }
    for (int r = lay.nreads; r < lay.nops; r++) kf_buf_printf(&f, "    b%d[off%d] = r%d;\n", lay.v[r], r, lay.v[r]);
    if (x >= 0) kf_buf_printf(&f, "    return r%d;\n", x);
    kf_buf_puts(&f, "}\n\n");
    kf_gplan_text(gp, f.data);
    kf_buf_free(&f);
}


/* The end of the bracketed or parenthesised text from b[i] (an opening bracket) on: the
 * index of its closing partner, or 0 when there is none. */
static size_t closing(const char *b, size_t i) {
    int depth = 0;
    for (size_t j = i; b[j]; j++) {
        if (b[j] == '[' || b[j] == '(') depth++;
        else if (b[j] == ']' || b[j] == ')') {
            if (--depth == 0) return j;
        }
    }
    return 0;
}

void kf_gpu_substitute_epilogue(kf_gplan *gp, kf_gk *k) {
    const kf_synth *s = gp->s;
    int pi = -1, y = -1;
    for (int i = 0; i < k->k.nparams && pi < 0; i++) {
        int v = -1;
        if (k->k.p[i].kind == KF_GP_OUT && sscanf(k->k.p[i].name, "b%d", &v) == 1 && epilogue_value(s, v) >= 0)
            pi = i, y = v;
    }
    if (pi < 0) return;
    const kf_stage *e = &s->st[s->st[s->val_stage[y]].epilogue - 1];
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, e, &lay);
    for (int i = pi; i + 1 < k->k.nparams; i++) { /* drop b<y> */
        k->k.p[i] = k->k.p[i + 1];
        memcpy(k->arg[i], k->arg[i + 1], sizeof k->arg[0]);
    }
    k->k.nparams--;
    kf_buf args = {0};
    for (int r = 0; r < lay.nbufs + lay.nops - lay.nreads; r++) {
        int v = r < lay.nbufs ? lay.bufs[r] : lay.v[lay.nreads + r - lay.nbufs];
        char name[16];
        snprintf(name, sizeof name, "b%d", v);
        int have = v == y;
        for (int i = 0; i < k->k.nparams; i++) have |= strcmp(k->k.p[i].name, name) == 0;
        if (!have) kf_gk_value(gp, k, v, r < lay.nbufs ? KF_GP_IN : KF_GP_OUT);
    }
    /* the helper's operand order: the layout's buffers but y, then its results */
    for (int b = 0; b < lay.nbufs; b++)
        if (lay.bufs[b] != y) kf_buf_printf(&args, ", b%d", lay.bufs[b]);
    for (int r = lay.nreads; r < lay.nops; r++) kf_buf_printf(&args, ", b%d", lay.v[r]);
    char tok[16];
    const size_t tl = (size_t)snprintf(tok, sizeof tok, "b%d", y);
    const char *b = k->body.data ? k->body.data : "";
    kf_buf out = {0};
    int stray = 0;
    for (size_t i = 0; b[i] && !stray;) {
        if (strncmp(b + i, tok, tl) != 0 || (i > 0 && kf_gpu_ident_char(b[i - 1])) || kf_gpu_ident_char(b[i + tl])) {
            kf_buf_putn(&out, b + i, 1);
            i++;
            continue;
        }
        /* b<y>[index] = value; */
        size_t j = b[i + tl] == '[' ? closing(b, i + tl) : 0, a = j + 1;
        while (j && (b[a] == ' ' || b[a] == '\t')) a++;
        if (!j || b[a] != '=' || b[a + 1] == '=') {
            stray = 1;
            break;
        }
        size_t vs = a + 1, ve = vs;
        for (int depth = 0; b[ve] && (depth || b[ve] != ';'); ve++) {
            if (b[ve] == '(' || b[ve] == '[') depth++;
            else if (b[ve] == ')' || b[ve] == ']') depth--;
        }
        if (!b[ve]) {
            stray = 1;
            break;
        }
        while (b[vs] == ' ') vs++;
        kf_buf_printf(&out, "kf_epi%d(", y);
        kf_buf_putn(&out, b + i + tl + 1, j - (i + tl + 1));
        kf_buf_puts(&out, ", ");
        kf_buf_putn(&out, b + vs, ve - vs);
        kf_buf_printf(&out, "%s)", args.data ? args.data : "");
        i = ve; /* the ';' is copied next */
    }
    if (stray && gp->st == KF_OK)
        gp->st = kf_error_set(gp->err, KF_ERR_INTERNAL, NULL, 0, 0,
                              "kernel %s uses b%d, whose stores go to an epilogue, other than as `b%d[i] = v;`",
                              k->k.name, y, y);
    kf_buf_free(&args);
    kf_buf_free(&k->body);
    k->body = out;
}

void kf_gpu_epilogue_params(kf_synth *s, kf_stage *st) {
    const kf_stage *h = st->fused ? &s->st[st->fused_into] : NULL;
    const int hsel = !h ? 0 : h->epilogue == st->index + 1 ? h->epi_sel : h->redepi == st->index + 1 ? h->red_sel : 0;
    if (hsel) {
        /* the epilogue's (or the fused reduction's) own schedule, in use where its host
         * computes it apart (epi=0, red=0) */
        int first = s->space.nparams;
        kf_tpl_stage_params(s, st, 0);
        for (int i = first; i < s->space.nparams; i++)
            if (!s->space.p[i].gate) {
                s->space.p[i].gate = hsel;
                s->space.p[i].gate_value = 0;
            }
        return;
    }
    if (st->redepi && s->space.nparams < KF_MAX_PARAMS) { /* fused (1) or apart (0) */
        kf_gpu_redepi_param(s, st);
        return;
    }
    if (st->epilogue && s->space.nparams < KF_MAX_PARAMS) { /* fused (1) or apart (0) */
        long v[] = {1, 0};
        int sel = s->space.nparams;
        kf_tpl_add_param(&s->space, st->prefix, "epi", KF_ROLE_NONE, v, 2, 0);
        if (s->space.nparams > sel) st->epi_sel = sel + 1;
    }
}
