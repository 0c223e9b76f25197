/*
 * The builtin generator's GPU path: plan parameters and candidate assembly for the
 * opencl, cuda and metal platforms (gpu_tpl.h describes the conventions).
 *
 * A candidate is
 *
 *     header comment, scratch and launch lines
 *     language prelude (kf_render_prelude: KF_INF, kf_expf, ...)
 *     shared helpers (NaN-propagating max/min, the arg-reduction tie rule)
 *     one or two kernels per stage
 *
 * and the launch plan runs the kernels in stage order on one queue, so a stage's scratch
 * output is complete before the next stage reads it. The schedule point is baked in:
 * sizes are literals, c->flags is empty and c->label is the point text.
 *
 * Budgets: a plan holds at most KF_MAX_LAUNCHES launches and KF_MAX_SCRATCH scratch
 * buffers. Every stage needs one launch; a two-pass reduction needs one more launch and
 * one or two partial buffers, so two-pass variants are offered (in stage order) only while
 * the budget allows, and a graph whose one-pass plan does not fit is unsupported. The
 * space holds KF_MAX_PARAMS parameters: they are shared out over the stages, each stage
 * declaring its parameters in order of importance, and a parameter without a choice or
 * beyond its stage's share is fixed at its default (kf_gpu_param / kf_gpu_get).
 */
#include "gpu_tpl.h"
#include "kforge/platform.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kf_synth_is_gpu(const char *platform) {
    const kf_platform *p = kf_platform_find(platform);
    return p && p->templates == KF_TPL_GPU;
}

void kf_gpu_dev(const kf_synth *s, kf_gdev *d) {
    const kf_device_info *i = &s->dev;
    d->is_cpu = kf_device_type_is_cpu(i);
    d->max_wg = i->max_wg > 0 ? i->max_wg : 1024; /* CUDA's and Metal's usual limit */
    if (i->max_wi[0] > 0 && i->max_wi[0] < d->max_wg) d->max_wg = i->max_wi[0];
    d->local_mem = i->local_mem_bytes > 0 ? i->local_mem_bytes : 32768;
    d->local_mem_optin = i->local_mem_optin_bytes > d->local_mem ? i->local_mem_optin_bytes : d->local_mem;
    d->sg = i->subgroup_size > 0 ? i->subgroup_size : 0;
    /* sub-group code assumes power-of-two lanes (butterfly shuffles) */
    if (d->sg & (d->sg - 1)) d->sg = 0;
    d->cu = i->compute_units > 0 ? i->compute_units : (d->is_cpu ? (i->threads > 0 ? i->threads : 4) : 16);
}

const char *kf_gpu_ctype(const kf_graph *g, int v) {
    kf_dtype t = g->values[v].dtype;
    return t == KF_I64 ? "long" : t == KF_F16 || t == KF_BF16 ? "ushort" : t == KF_BOOL ? "uchar" : "float";
}

int64_t kf_gpu_pow2_ceil(int64_t n) {
    int64_t p = 1;
    while (p < n) p *= 2;
    return p;
}

int kf_gpu_pow2_values(long lo, long hi, long *vals) {
    int n = 0;
    for (long v = lo; v <= hi && n < KF_MAX_PARAM_VALUES; v *= 2) vals[n++] = v;
    if (n == 0) vals[n++] = lo;
    return n;
}

int kf_gpu_nearest(const long *vals, int n, long want) {
    int best = 0;
    for (int i = 1; i < n; i++) {
        long d0 = vals[best] > want ? vals[best] - want : want - vals[best];
        long d1 = vals[i] > want ? vals[i] - want : want - vals[i];
        if (d1 < d0) best = i;
    }
    return best;
}

const char *kf_gpu_gid0(const kf_gplan *gp) {
    return strcmp(gp->ix, "long") == 0 ? "(long)$gid(0)" : "$gid(0)";
}

const char *kf_gpu_lit(const kf_gplan *gp, int64_t v, char *buf, size_t cap) {
    snprintf(buf, cap, "%lld%s", (long long)v, strcmp(gp->ix, "long") == 0 ? "L" : "");
    return buf;
}

/* ---- stage parameters ---- */

void kf_gpu_param(kf_synth *s, kf_stage *st, const char *name, kf_role role, const long *values, int n,
                  int dflt) {
    if (n > 1 && st->gpu_budget > 0 && s->space.nparams < KF_MAX_PARAMS) {
        kf_tpl_add_param(&s->space, st->prefix, name, role, values, n, dflt);
        st->gpu_budget--;
        return;
    }
    assert(st->nfixed < (int)(sizeof st->fixed_val / sizeof st->fixed_val[0]));
    snprintf(st->fixed_name[st->nfixed], sizeof st->fixed_name[0], "%s%s", st->prefix, name);
    st->fixed_val[st->nfixed++] = values[dflt];
}

long kf_gpu_get(const kf_synth *s, const kf_stage *st, const kf_point *p, const char *name, long def) {
    char full[48];
    snprintf(full, sizeof full, "%s%s", st->prefix, name);
    for (int i = 0; i < s->space.nparams; i++)
        if (strcmp(s->space.p[i].name, full) == 0) return s->space.p[i].values[p->idx[i]];
    for (int i = 0; i < st->nfixed; i++)
        if (strcmp(st->fixed_name[i], full) == 0) return st->fixed_val[i];
    return def;
}

/* ---- kernels and launch lines ---- */

void kf_gk_begin(kf_gk *k, const char *name) {
    memset(k, 0, sizeof *k);
    snprintf(k->k.name, sizeof k->k.name, "%s", name);
}

static void gk_param(kf_gk *k, const char *name, const char *ctype, kf_gparam_kind kind,
                     const char *arg) {
    assert(k->k.nparams < KF_GK_MAX_PARAMS);
    snprintf(k->arg[k->k.nparams], sizeof k->arg[0], "%s", arg);
    kf_gkernel_param(&k->k, name, ctype, kind);
}

/* The value whose buffer holds v's elements: the source of a relabelling view read in
 * place (kf_synth.alias), then the output a computed value is written into (out_alias). */
static int buffer_of(const kf_synth *s, int v) {
    if (s->alias && s->alias[v] >= 0) v = s->alias[v];
    if (s->out_alias && s->out_alias[v] >= 0) v = s->out_alias[v];
    return v;
}

void kf_gk_value(const kf_gplan *gp, kf_gk *k, int v, kf_gparam_kind kind) {
    const kf_graph *g = gp->s->g;
    const kf_value *val = &g->values[buffer_of(gp->s, v)];
    char name[16], arg[16];
    snprintf(name, sizeof name, "b%d", v);
    /* a relabelling view is only read: an input it relabels stays unchanged */
    assert(kind == KF_GP_IN || !(gp->s->alias && gp->s->alias[v] >= 0));
    if (val->input_index >= 0) snprintf(arg, sizeof arg, "%d", val->input_index);
    else if (val->output_index >= 0) snprintf(arg, sizeof arg, "%d", g->ninputs + val->output_index);
    else snprintf(arg, sizeof arg, "t%d", buffer_of(gp->s, v));
    gk_param(k, name, kf_gpu_ctype(g, v), kind, arg);
}

void kf_gk_scratch(kf_gk *k, const char *name, const char *ctype) {
    gk_param(k, name, ctype, KF_GP_SCRATCH, name);
}

void kf_gplan_scratch(kf_gplan *gp, const char *name, int64_t bytes) {
    kf_buf_printf(&gp->lines, "// kforge:scratch %s %lld\n", name, (long long)(bytes > 4 ? bytes : 4));
    gp->nscratch++;
}

/* ---- fused prologues ---- */

/* The value a fused elementwise stage computes for the stage it feeds (-1: none); not a
 * reduction fused into a matmul's stores (gpu_redepi.c), whose combine launch writes it. */
static int fused_value(const kf_synth *s, int v) {
    int e = v >= 0 && v < s->g->nvalues ? s->val_stage[v] : -1;
    if (e >= 0 && s->st[e].fused && s->st[s->st[e].fused_into].redepi == e + 1) return -1;
    return e >= 0 && s->st[e].fused && !s->materialize[v] ? e : -1;
}

/* The value a stage's fused prologue computes: the input of the stage's first node that
 * the fused elementwise stage writes (a reduction's input; a matmul's A or B). */
int kf_gpu_prologue_value(const kf_synth *s, const kf_stage *st) {
    if (!st->prologue) return -1;
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    for (int a = 0; a < n->nin; a++) {
        int v = n->in[a], t;
        /* a matmul's operand: the value it reads (a view's source, kf_synth_mm_operand) */
        if (st->kind == KF_STAGE_MATMUL && a < 2) v = kf_synth_mm_operand(s->g, n, a, 0, &t, NULL, NULL);
        if (s->val_stage[v] == st->prologue - 1) return v;
    }
    return -1;
}

int kf_gpu_prologue_reads(const kf_synth *s, const kf_stage *st, int v) {
    return v >= 0 && v == kf_gpu_prologue_value(s, st);
}

/* The prologue helpers' common tail: with off<r> and gd<k> declared, each read's register
 * r<v> (its pad where one of its guards is out of range), the fused stage's nodes up to x,
 * then `return r<x>; }`. */
void kf_gpu_prologue_body(const kf_gplan *gp, const kf_stage *e, const kf_ew_layout *lay, int x, kf_buf *f) {
    const kf_synth *s = gp->s;
    const kf_graph *g = s->g;
    char lit[32];
    for (int r = 0; r < lay->nreads; r++) {
        const int v = lay->v[r], bv = lay->buf[r];
        if (!kf_synth_ewise_guarded(lay, r)) {
            kf_buf_printf(f, "    const float r%d = b%d[off%d];\n", v, bv, r);
            continue;
        }
        char pad[64];
        kf_synth_float_lit(lay->pad[r], pad, sizeof pad);
        kf_buf_printf(f, "    const float r%d = (", v);
        for (int k = 0, n = 0; k < lay->ng; k++)
            if (lay->gop[k] == r)
                kf_buf_printf(f, "%sgd%d >= 0 && gd%d < %s", n++ ? " && " : "", k, k,
                              kf_gpu_lit(gp, lay->gn[k], lit, sizeof lit));
        kf_buf_printf(f, ") ? b%d[off%d] : %s;\n", bv, r, pad);
    }
    for (int i = 0; i < e->nnodes; i++) {
        const kf_node *n = &g->nodes[e->nodes[i]];
        if (kf_synth_is_read_op(n->op)) { /* loaded above */
            if (n->out == x) break;
            continue;
        }
        kf_buf_printf(f, "    const float r%d = ", n->out);
        kf_synth_node_expr(s, n, f);
        kf_buf_puts(f, ";\n");
        if (n->out == x) break;
    }
    kf_buf_printf(f, "    return r%d;\n}\n\n", x);
}

/* Helper `float kf_pro<x>(index f, buffers...)`: element f (flat, row-major) of the
 * stage's input x, computed from the fused elementwise stage's operands; a read through an
 * index map (view.c) loads its source buffer at the map's offset, or its pad where one of
 * the map's guards falls outside its range. */
static void emit_prologue(kf_gplan *gp, const kf_stage *st) {
    const kf_synth *s = gp->s;
    const kf_graph *g = s->g;
    int x = kf_gpu_prologue_value(s, st);
    const kf_stage *e = &s->st[st->prologue - 1];
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, e, &lay);
    const int q = lay.q;
    const int64_t inner = q ? lay.dim[q - 1] : 1;
    const char *ix = gp->ix;
    char lit[32];
    kf_buf f = {0};
    kf_buf_printf(&f, "/* %s of the fused elementwise stage, at flat index f */\n", g->values[x].name);
    kf_buf_printf(&f, "$fn float kf_pro%d(%s f", x, ix);
    for (int b = 0; b < lay.nbufs; b++)
        kf_buf_printf(&f, ", $global const %s *$restrict b%d", kf_gpu_ctype(g, lay.bufs[b]), lay.bufs[b]);
    kf_buf_puts(&f, ") {\n");
    kf_buf_printf(&f, "    %s o = f / %s;\n", ix, kf_gpu_lit(gp, inner, lit, sizeof lit));
    kf_buf_printf(&f, "    const %s j = f - o * %s;\n", ix, lit);
    /* offsets of the reads (a view's base first) and of the guards */
    const int nr = lay.nreads, nt = nr + lay.ng;
    for (int r = 0; r < nt; r++) {
        const int64_t *sv = r < nr ? lay.str[r] : lay.gstr[r - nr];
        const int64_t c0 = r < nr ? (lay.buf[r] != lay.v[r] ? lay.base[r] : 0) : lay.goff[r - nr];
        char t[96] = "0";
        const int64_t si = q ? sv[q - 1] : 0;
        if (si == 1) snprintf(t, sizeof t, "j");
        else if (si) snprintf(t, sizeof t, "j * %s", kf_gpu_lit(gp, si, lit, sizeof lit));
        if (c0) kf_buf_printf(&f, "    %s %s%d = %s%s%s;\n", ix, r < nr ? "off" : "gd", r < nr ? r : r - nr,
                              kf_gpu_lit(gp, c0, lit, sizeof lit), si ? " + " : "", si ? t : "");
        else kf_buf_printf(&f, "    %s %s%d = %s;\n", ix, r < nr ? "off" : "gd", r < nr ? r : r - nr, t);
    }
    if (q > 1) {
        kf_buf_printf(&f, "    { %s idx;\n", ix);
        for (int d = q - 2; d >= 0; d--) {
            char dl[32];
            kf_gpu_lit(gp, lay.dim[d], dl, sizeof dl);
            kf_buf_printf(&f, "      idx = o %% %s; o = o / %s;\n", dl, dl);
            for (int r = 0; r < nt; r++) {
                const int64_t sd = r < nr ? lay.str[r][d] : lay.gstr[r - nr][d];
                if (sd)
                    kf_buf_printf(&f, "      %s%d += idx * %s;\n", r < nr ? "off" : "gd", r < nr ? r : r - nr,
                                  kf_gpu_lit(gp, sd, lit, sizeof lit));
            }
        }
        kf_buf_puts(&f, "    }\n");
    }
    kf_gpu_prologue_body(gp, e, &lay, x, &f);
    kf_gplan_text(gp, f.data);
    kf_buf_free(&f);
    /* a matmul's operand: its addressing split into row and column parts (gpu_prosplit.c) */
    kf_gpu_prosplit sp;
    kf_gpu_prologue_split(s, st, x, &sp);
    if (sp.on) kf_gpu_emit_prologue_split(gp, st, &sp);
}

int kf_gpu_ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

void kf_gplan_text(kf_gplan *gp, const char *text) {
    if (gp->st != KF_OK) return;
    kf_status rs = kf_render_text(gp->L, text, &gp->kernels, gp->err);
    if (rs != KF_OK) gp->st = rs;
}

/* In kernel k, replace the parameter b<x> of a fused value by the prologue's operands and
 * every load b<x>[i] by kf_pro<x>(i, operands). Any other use of b<x> is an error. */
static void substitute_prologue(kf_gplan *gp, kf_gk *k, int pi, int x) {
    const kf_synth *s = gp->s;
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, &s->st[s->val_stage[x]], &lay);
    /* drop param pi, then add the operands not already there */
    for (int i = pi; i + 1 < k->k.nparams; i++) {
        k->k.p[i] = k->k.p[i + 1];
        memcpy(k->arg[i], k->arg[i + 1], sizeof k->arg[0]);
    }
    k->k.nparams--;
    for (int r = 0; r < lay.nbufs; r++) {
        char name[16];
        snprintf(name, sizeof name, "b%d", lay.bufs[r]);
        int have = 0;
        for (int i = 0; i < k->k.nparams; i++) have |= strcmp(k->k.p[i].name, name) == 0;
        if (!have) kf_gk_value(gp, k, lay.bufs[r], KF_GP_IN);
    }
    char args[512] = "";
    for (int r = 0; r < lay.nbufs; r++) {
        size_t l = strlen(args);
        snprintf(args + l, sizeof args - l, ", b%d", lay.bufs[r]);
    }
    char tok[16];
    int tl = snprintf(tok, sizeof tok, "b%d", x);
    const char *b = k->body.data ? k->body.data : "";
    kf_buf out = {0};
    int stray = 0;
    for (size_t i = 0; b[i];) {
        if (strncmp(b + i, tok, (size_t)tl) == 0 && (i == 0 || !kf_gpu_ident_char(b[i - 1])) &&
            !kf_gpu_ident_char(b[i + (size_t)tl])) {
            if (b[i + (size_t)tl] != '[') {
                stray = 1;
                break;
            }
            size_t j = i + (size_t)tl + 1;
            int depth = 1;
            while (b[j] && depth) {
                if (b[j] == '[') depth++;
                else if (b[j] == ']') depth--;
                if (depth) j++;
            }
            if (!b[j]) { stray = 1; break; }
            kf_buf_printf(&out, "kf_pro%d(", x);
            kf_buf_putn(&out, b + i + (size_t)tl + 1, j - (i + (size_t)tl + 1));
            kf_buf_printf(&out, "%s)", args);
            i = j + 1;
            continue;
        }
        kf_buf_putn(&out, b + i, 1);
        i++;
    }
    if (stray && gp->st == KF_OK)
        gp->st = kf_error_set(gp->err, KF_ERR_INTERNAL, NULL, 0, 0,
                              "kernel %s uses the fused value b%d other than by index", k->k.name, x);
    kf_buf_free(&k->body);
    k->body = out;
}

void kf_gk_launch(kf_gplan *gp, kf_gk *k, int ndims, const int64_t *global,
                  const int64_t *local) {
    for (int i = 0; i < k->k.nparams; i++) {
        int v = -1;
        if (sscanf(k->k.p[i].name, "b%d", &v) == 1 && fused_value(gp->s, v) >= 0) {
            substitute_prologue(gp, k, i, v);
            break;
        }
    }
    kf_gpu_substitute_epilogue(gp, k);
    for (int d = 0; d < 3; d++) k->k.wg[d] = d < ndims ? (int)local[d] : 1;
    k->k.body = k->body.data ? k->body.data : "";
    k->k.uses_subgroups = strstr(k->k.body, "$sg_") != NULL;
    if (gp->st == KF_OK) {
        kf_status st = kf_render_kernel(gp->L, &k->k, &gp->kernels, gp->err);
        if (st != KF_OK) gp->st = st;
        kf_buf_puts(&gp->kernels, "\n");
    }
    kf_buf_printf(&gp->lines, "// kforge:launch %s global=", k->k.name);
    for (int d = 0; d < ndims; d++) {
        assert(global[d] > 0 && local[d] > 0 && global[d] % local[d] == 0);
        kf_buf_printf(&gp->lines, "%s%lld", d ? "," : "", (long long)global[d]);
    }
    kf_buf_puts(&gp->lines, " local=");
    for (int d = 0; d < ndims; d++) kf_buf_printf(&gp->lines, "%s%lld", d ? "," : "", (long long)local[d]);
    if (k->smem > 0) kf_buf_printf(&gp->lines, " smem=%lld", (long long)k->smem);
    kf_buf_puts(&gp->lines, " args=");
    for (int i = 0; i < k->k.nparams; i++) kf_buf_printf(&gp->lines, "%s%s", i ? "," : "", k->arg[i]);
    kf_buf_puts(&gp->lines, "\n");
    gp->nlaunch++;
    kf_buf_free(&k->body);
    k->k.body = NULL;
}

/* ---- planning ---- */

/* Scratch buffers a two-pass variant of stage st needs. */
static int split_scratch(const kf_synth *s, const kf_stage *st) {
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    return kf_op_is_arg(kf_op_get(n->op)) ? 2 : 1;
}

/* 1 when stage k is an epilogue fused into another stage (it has a kernel of its own at
 * the points that hold it apart, epi=0). */
static int is_epilogue(const kf_synth *s, int k) {
    const kf_stage *st = &s->st[k];
    return st->fused && (s->st[st->fused_into].epilogue == k + 1 || s->st[st->fused_into].redepi == k + 1);
}

/* Scratch buffers of the plan; a fused epilogue's input counts, since a point may hold
 * the epilogue apart (epi=0) and store it; so does a fused reduction's (red=0), whose
 * per-block partials take its place where it is fused (gpu_redepi.c). */
static int base_scratch(const kf_synth *s) {
    int n = 0;
    for (int v = 0; v < s->g->nvalues; v++) {
        int k = s->val_stage[v];
        int apart = k >= 0 && (s->st[k].epilogue || s->st[k].redepi) && s->g->nodes[s->st[k].nodes[0]].out == v;
        if ((s->materialize[v] || apart) && s->g->values[v].output_index < 0 && !(s->out_alias && s->out_alias[v] >= 0))
            n++;
    }
    return n;
}

kf_status kf_synth_gpu_check(const kf_synth *s, kf_error *err) {
    const kf_graph *g = s->g;
    if (!kf_lang_by_name(s->platform))
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "no kernel language for platform '%s'",
                            s->platform);
    int nkernels = 0;
    for (int k = 0; k < s->nst; k++) nkernels += !s->st[k].fused || is_epilogue(s, k);
    if (nkernels > KF_MAX_LAUNCHES || base_scratch(s) > KF_MAX_SCRATCH)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, 0, 0,
                            "the %s plan of this task needs %d kernels and %d scratch buffers; "
                            "a GPU candidate holds at most %d and %d",
                            s->platform, nkernels, base_scratch(s), KF_MAX_LAUNCHES, KF_MAX_SCRATCH);
    for (int k = 0; k < s->nst; k++) {
        const kf_stage *st = &s->st[k];
        const kf_node *n = &g->nodes[st->nodes[0]];
        const kf_shape *xs = &g->values[n->in[0]].shape;
        if (kf_shape_numel(&g->values[n->out].shape) <= 0 || kf_shape_numel(xs) <= 0)
            return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, n->line, n->col,
                                "%s: empty tensors are not handled by the GPU templates",
                                kf_op_get(n->op)->name);
    }
    return KF_OK;
}

/* Whether full is stage prefix's "split" parameter, of the stage or of one of its rows. */
static int is_split(const char *full, const char *prefix) {
    size_t lp = strlen(prefix), lf = strlen(full);
    if (strncmp(full, prefix, lp) != 0) return 0;
    const char *rest = full + lp;
    return strcmp(rest, "split") == 0 || (lf >= lp + 6 && strcmp(full + lf - 6, ".split") == 0);
}

void kf_synth_gpu_params(kf_synth *s) {
    int launches = 0, scratch = base_scratch(s);
    for (int k = 0; k < s->nst; k++) launches += !s->st[k].fused || is_epilogue(s, k);
    for (int k = 0; k < s->nst; k++) {
        kf_stage *st = &s->st[k];
        snprintf(st->prefix, sizeof st->prefix, "s%d.", k);
        /* the space's slots shared out over the stages still to come; what a stage
         * leaves unused goes to the later ones */
        st->gpu_budget = (KF_MAX_PARAMS - s->space.nparams) / (s->nst - k);
        st->nfixed = 0;
        if (st->fused) { /* computed inside another stage: an epilogue has a schedule for epi=0 */
            kf_gpu_epilogue_params(s, st);
            continue;
        }
        if (st->epilogue && st->gpu_budget > 1) st->gpu_budget--; /* the room of "<prefix>epi" */
        if (st->redepi && st->gpu_budget > 1) st->gpu_budget--;   /* and of "<prefix>red" */
        /* a stage's templates agree on can_split (kf_tpl_select) */
        if (!st->tpl->can_split) {
            kf_tpl_stage_params(s, st, 0);
            kf_gpu_epilogue_params(s, st);
            continue;
        }
        int need = split_scratch(s, st);
        int allow = launches + 1 <= KF_MAX_LAUNCHES && scratch + need <= KF_MAX_SCRATCH;
        int first = s->space.nparams;
        kf_tpl_stage_params(s, st, allow);
        /* a stage whose split may exceed 1 (in any of its templates: "<prefix>split" or
         * "<prefix><row>.split") uses the launch and scratch budget */
        int declared = 0;
        for (int i = first; i < s->space.nparams; i++)
            if (is_split(s->space.p[i].name, st->prefix)) declared = 1;
        for (int i = 0; i < st->nfixed; i++)
            if (is_split(st->fixed_name[i], st->prefix) && st->fixed_val[i] > 1) declared = 1;
        if (declared) {
            launches++;
            scratch += need;
        }
        kf_gpu_epilogue_params(s, st);
    }
}

/* Helpers every candidate may use; they follow the interpreter's NaN rules. */
static const char gpu_helpers[] =
    "/* NaN-propagating max/min (a NaN on either side gives NaN, as the reference does) */\n"
    "$fn float kf_nmax(float a, float b) { return (b < a) ? a : ((b >= a) ? b : a + b); }\n"
    "$fn float kf_nmin(float a, float b) { return (b > a) ? a : ((b <= a) ? b : a + b); }\n"
    "/* argmax/argmin merge: 1 when candidate (bv, bi) beats (av, ai). A NaN beats any number,\n"
    " * then the larger (max) or smaller (min) value, and ties go to the lower index, so the\n"
    " * result is the first NaN's index, else the first extreme's, whatever the merge order.\n"
    " * Index -1 marks an empty partial. */\n"
    "$fn int kf_arg_take(float av, int ai, float bv, int bi, int want_max) {\n"
    "    if (bi < 0) return 0;\n"
    "    if (ai < 0) return 1;\n"
    "    const int an = av != av, bn = bv != bv;\n"
    "    if (an || bn) return bn && (!an || bi < ai);\n"
    "    if (bv == av) return bi < ai;\n"
    "    return want_max ? (bv > av) : (bv < av);\n"
    "}\n";

kf_status kf_synth_gpu_render(const kf_synth *s, const kf_point *p, kf_candidate *c,
                              kf_error *err) {
    const kf_graph *g = s->g;
    memset(c, 0, sizeof *c);
    kf_gplan gp;
    memset(&gp, 0, sizeof gp);
    gp.s = s;
    gp.L = kf_lang_by_name(s->platform);
    gp.err = err;
    gp.st = KF_OK;
    if (!gp.L)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "no kernel language for platform '%s'",
                            s->platform);
    int64_t maxn = 1;
    for (int v = 0; v < g->nvalues; v++) {
        int64_t n = kf_shape_numel(&g->values[v].shape);
        if (n > maxn) maxn = n;
    }
    /* int indices while every tensor (and the largest offset into it, plus a row of
     * lookahead) stays below 2^31 */
    snprintf(gp.ix, sizeof gp.ix, "%s", maxn < (1LL << 30) ? "int" : "long");

    for (int v = 0; v < g->nvalues; v++) {
        if (!s->materialize[v] || g->values[v].output_index >= 0 || (s->out_alias && s->out_alias[v] >= 0)) continue;
        char name[16];
        snprintf(name, sizeof name, "t%d", v);
        kf_gplan_scratch(&gp, name, kf_shape_numel(&g->values[v].shape) * kf_dtype_size(g->values[v].dtype));
    }
    for (int k = 0; k < s->nst && gp.st == KF_OK; k++) {
        const kf_stage *st = &s->st[k];
        if (st->fused) continue;
        if (st->prologue) emit_prologue(&gp, st);
        if (st->epilogue) kf_gpu_emit_epilogue(&gp, st);
        kf_stage view; /* the stage as the template the point picks sees it */
        kf_tpl_chosen(s, st, p, &view)->gpu_emit(&gp, k, &view, p);
    }
    kf_status st = gp.st;
    char first[64] = "";
    kf_buf src = {0};
    if (st == KF_OK && (gp.nlaunch > KF_MAX_LAUNCHES || gp.nscratch > KF_MAX_SCRATCH))
        st = kf_error_set(err, KF_ERR_INTERNAL, NULL, 0, 0,
                          "GPU plan has %d launches and %d scratch buffers (limits %d, %d)",
                          gp.nlaunch, gp.nscratch, KF_MAX_LAUNCHES, KF_MAX_SCRATCH);
    if (st == KF_OK) {
        char pt[512];
        kf_point_format(&s->space, p, pt, sizeof pt);
        kf_buf_printf(&src, "/* kforge builtin %s candidate for task '%s': %s\n * schedule: %s */\n",
                      s->platform, g->name, s->desc, pt);
        kf_buf_puts(&src, gp.lines.data ? gp.lines.data : "");
        kf_buf_puts(&src, "\n");
        kf_render_prelude(gp.L, &src);
        kf_buf_puts(&src, "\n");
        st = kf_render_text(gp.L, gpu_helpers, &src, err);
        kf_buf_puts(&src, "\n");
        kf_buf_puts(&src, gp.kernels.data ? gp.kernels.data : "");
        /* the entry is the first launch's kernel: the backends run the whole plan */
        const char *l = strstr(gp.lines.data ? gp.lines.data : "", "kforge:launch ");
        if (l) sscanf(l + 14, "%63s", first);
        if (st == KF_OK) {
            char *text = kf_buf_take(&src);
            st = kf_candidate_init(c, s->platform, text, first[0] ? first : NULL, err);
            free(text);
            if (st == KF_OK) snprintf(c->label, sizeof c->label, "%s", pt);
        }
    }
    kf_buf_free(&src);
    kf_buf_free(&gp.kernels);
    kf_buf_free(&gp.lines);
    return st;
}
