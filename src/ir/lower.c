/*
 * Lowering of COMPOSITE operators (and of reductions over a few elements of a view,
 * unrolled: unroll_count) for the kernels: a graph in which every node whose
 * record has a lowering (kf_op_def.lower, a .kf expression over the operands _0, _1, ...
 * and the attributes ${name}) is replaced by the nodes of that expression, and every other
 * node is copied. The reference interpreter never sees the result: it evaluates the
 * composite with the record's own float64 reference, so a wrong lowering is caught like a
 * wrong kernel.
 *
 * The lowered graph has the original's inputs (names, dtypes, shapes, ranges) and outputs
 * in the same order, so a kernel written for it takes the original's buffers.
 */
#include "kforge/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends the attribute's value as .kf text. */
static void attr_text(const kf_attrs *a, const kf_attr_def *d, kf_buf *o) {
    switch (d->type) {
    case KF_ATTR_FLOAT: kf_buf_printf(o, "%.17g", kf_attr_get_float(a, d)); break;
    case KF_ATTR_BOOL: kf_buf_puts(o, kf_attr_get_bool(a, d) ? "true" : "false"); break;
    case KF_ATTR_AXES:
    case KF_ATTR_AXIS: {
        uint32_t m = kf_attr_get_axes(a, d);
        kf_buf_puts(o, "[");
        for (int i = 0, n = 0; i < 32; i++)
            if (m & (1u << i)) kf_buf_printf(o, "%s%d", n++ ? ", " : "", i);
        kf_buf_puts(o, "]");
        break;
    }
    case KF_ATTR_INT: kf_buf_printf(o, "%lld", (long long)kf_attr_get_int(a, d)); break;
    case KF_ATTR_INTS: {
        const kf_ints *v = kf_attr_get_ints(a, d);
        kf_buf_puts(o, "[");
        for (int i = 0; i < v->n; i++) kf_buf_printf(o, "%s%lld", i ? ", " : "", (long long)v->v[i]);
        kf_buf_puts(o, "]");
        break;
    }
    case KF_ATTR_OPERAND_VIEW: kf_buf_puts(o, "false"); break; /* never stored */
    }
}

/* The record's lowering with its attributes written in. */
static char *lowering_text(const kf_op_def *d, const kf_attrs *a) {
    kf_buf o = {0};
    for (const char *p = d->lower; *p;) {
        if (p[0] == '$' && p[1] == '{') {
            const char *end = strchr(p, '}');
            char nm[64];
            snprintf(nm, sizeof nm, "%.*s", (int)(end - p - 2), p + 2);
            attr_text(a, kf_op_attr(d, nm), &o); /* kf_ops_check: every name is an attribute */
            p = end + 1;
        } else {
            size_t n = strcspn(p, "$");
            if (n == 0) n = 1;
            kf_buf_putn(&o, p, n);
            p += n;
        }
    }
    return kf_buf_take(&o);
}

/* A reduction over a few elements of a view (a pooling window, a short row of a padded
 * or strided view), or over a single element of any value, is unrolled into elementwise
 * ops on selects of the view: the selects compose with the view's map, so the whole
 * reduction is one fused elementwise stage that reads the source in place (or a few, past a
 * stage's limits of guards and view reads), instead of a copy of every window followed by
 * a reduction.
 * The number of elements it takes: 0 when n is not such a reduction. */
#define KF_UNROLL_MAX 27 /* a 3x3x3 window */
static int64_t unroll_count(const kf_graph *g, const kf_node *n) {
    const kf_op_def *d = kf_op_get(n->op);
    if (d->cls != KF_CLASS_REDUCE || kf_op_is_arg(d)) return 0;
    const kf_shape *xs = &g->values[n->in[0]].shape;
    int64_t r = 1;
    for (int a = 0; a < xs->rank; a++)
        if (n->attr.axes >> a & 1u) r *= xs->d[a];
    /* a reduction over axes of extent 1, whatever its operand: the element itself (a sum
     * over a keepdim sum's axis: no kernel of its own, fused into its neighbours) */
    if (r == 1) return 1;
    int p = g->values[n->in[0]].producer;
    if (p < 0 || kf_op_get(g->nodes[p].op)->cls != KF_CLASS_VIEW) return 0;
    if (r >= 2 && r <= KF_UNROLL_MAX) return r;
    /* a larger window (an 11x11 average pool): its innermost reduced axis alone, when that is
     * short and others remain; unrolled_text reduces the rest of the window after it */
    int last = -1, more = 0;
    for (int a = 0; a < xs->rank; a++)
        if (n->attr.axes >> a & 1u) more += last >= 0, last = a;
    return r > KF_UNROLL_MAX && more && xs->d[last] >= 2 && xs->d[last] <= KF_UNROLL_MAX ? r : 0;
}

/* n's unrolled form (unroll_count(g, n) elements) as .kf text over _0: the combiner over a
 * balanced tree of selects, the mean's division, keepdim's reshape. */
static void terms(kf_buf *o, const kf_op_def *d, const int *ax, const int64_t *ext, int nax, int64_t lo, int64_t hi) {
    if (hi - lo == 1) {
        int64_t idx[KF_MAX_DIMS], f = lo;
        for (int k = nax - 1; k >= 0; k--) idx[k] = f % ext[k], f /= ext[k];
        for (int k = 0; k < nax; k++) kf_buf_puts(o, "select(");
        kf_buf_puts(o, "_0");
        for (int k = nax - 1; k >= 0; k--) kf_buf_printf(o, ", dim=%d, index=%lld)", ax[k], (long long)idx[k]);
        return;
    }
    int64_t mid = lo + (hi - lo) / 2;
    const char *fn = d->combiner == KF_COMB_MAX ? "maximum" : d->combiner == KF_COMB_MIN ? "minimum" : NULL;
    kf_buf_printf(o, "%s(", fn ? fn : "");
    terms(o, d, ax, ext, nax, lo, mid);
    kf_buf_puts(o, fn ? ", " : d->combiner == KF_COMB_PROD ? " * " : " + ");
    terms(o, d, ax, ext, nax, mid, hi);
    kf_buf_puts(o, ")");
}

static char *unrolled_text(const kf_graph *g, const kf_node *n, int64_t count) {
    const kf_op_def *d = kf_op_get(n->op);
    const kf_shape *xs = &g->values[n->in[0]].shape, *os = &g->values[n->out].shape;
    int ax[KF_MAX_DIMS], nax = 0;
    int64_t ext[KF_MAX_DIMS];
    for (int a = 0; a < xs->rank; a++)
        if (n->attr.axes >> a & 1u) ax[nax] = a, ext[nax++] = xs->d[a];
    kf_buf o = {0};
    if (count == 1 && n->attr.keepdim) {
        /* the element itself in its own place: an elementwise op (exact: x * 1 is x), which
         * fuses with its neighbours where a select or reshape, a view, would be copied */
        kf_buf_puts(&o, "_0 * 1");
        return kf_buf_take(&o);
    }
    if (n->attr.keepdim) kf_buf_puts(&o, "reshape(");
    if (count > KF_UNROLL_MAX) {
        /* the innermost reduced axis unrolled (its selects drop it), then the op itself over
         * the other reduced axes (all before it) of that elementwise value: a reduction
         * whose rows are computed from the view in place, never a copy of every window. A
         * mean's inner part is a sum, divided by its count after the outer mean. */
        kf_buf_printf(&o, "%s(", d->name);
        terms(&o, d, ax + nax - 1, ext + nax - 1, 1, 0, ext[nax - 1]);
        kf_buf_puts(&o, ", axes=[");
        for (int k = 0; k < nax - 1; k++) kf_buf_printf(&o, "%s%d", k ? ", " : "", ax[k]);
        kf_buf_puts(&o, "])");
        if (d->mean) kf_buf_printf(&o, " / %lld", (long long)ext[nax - 1]);
    } else {
        if (d->mean) kf_buf_puts(&o, "(");
        terms(&o, d, ax, ext, nax, 0, count);
        if (d->mean) kf_buf_printf(&o, ") / %lld", (long long)count);
    }
    if (n->attr.keepdim) {
        kf_buf_puts(&o, ", shape=[");
        for (int j = 0; j < os->rank; j++) kf_buf_printf(&o, "%s%lld", j ? ", " : "", (long long)os->d[j]);
        kf_buf_puts(&o, "])");
    }
    return kf_buf_take(&o);
}

/* 1 when a and b are the same attribute values (doubles bit for bit: NaN equals NaN). */
static int attrs_same(const kf_attrs *a, const kf_attrs *b) {
    if (memcmp(&a->alpha, &b->alpha, sizeof a->alpha) || memcmp(&a->beta, &b->beta, sizeof a->beta) ||
        memcmp(&a->eps, &b->eps, sizeof a->eps))
        return 0;
    if (a->axes != b->axes || a->keepdim != b->keepdim || a->reverse != b->reverse || a->exclusive != b->exclusive ||
        a->dim != b->dim || a->dim1 != b->dim1 || a->start != b->start || a->end != b->end || a->step != b->step ||
        a->size != b->size || a->dilation != b->dilation || a->groups != b->groups)
        return 0;
    const kf_ints *x[4] = {&a->ints, &a->ints2, &a->ints3, &a->ints4}, *y[4] = {&b->ints, &b->ints2, &b->ints3, &b->ints4};
    for (int k = 0; k < 4; k++)
        if (x[k]->n != y[k]->n || memcmp(x[k]->v, y[k]->v, (size_t)x[k]->n * sizeof x[k]->v[0])) return 0;
    return 1;
}

/* One lowering's nodes (h's nodes from first on) with every repeat of an earlier one of
 * them (same op, operands and attributes: logsumexp's lowering names the row maximum twice)
 * read from that earlier one instead: the repeat is left with no reader, so the planner
 * never plans it (one pass over the rows, not two). Returns the lowering's result id,
 * redirected likewise. */
static int merge_repeats(kf_graph *h, int first, int id) {
    int nv = h->nvalues, *to = kf_malloc((size_t)nv * sizeof *to);
    for (int v = 0; v < nv; v++) to[v] = v;
    for (int j = first; j < h->nnodes; j++) {
        kf_node *nj = &h->nodes[j];
        for (int a = 0; a < nj->nin; a++) nj->in[a] = to[nj->in[a]];
        for (int i = first; i < j; i++) {
            const kf_node *ni = &h->nodes[i];
            if (ni->op != nj->op || ni->nin != nj->nin || to[ni->out] != ni->out ||
                memcmp(ni->in, nj->in, (size_t)nj->nin * sizeof nj->in[0]) || !attrs_same(&ni->attr, &nj->attr))
                continue;
            to[nj->out] = ni->out;
            break;
        }
    }
    int r = to[id];
    free(to);
    return r;
}

int kf_graph_has_lowering(const kf_graph *g) {
    for (int i = 0; i < g->nnodes; i++)
        if (kf_op_get(g->nodes[i].op)->lower || kf_op_get(g->nodes[i].op)->own_lower || unroll_count(g, &g->nodes[i]))
            return 1;
    return 0;
}

kf_status kf_graph_lower(const kf_graph *g, kf_graph **out, kf_error *err) {
    return kf_graph_lower_keeping(g, NULL, NULL, out, err);
}

static kf_status lower_once(const kf_graph *g, kf_lower_keep_fn keep, void *ctx, kf_graph **out, kf_error *err);

/* 1 when a node of g reduces over a single element (a lowering's own max or sum over an
 * axis of extent 1: logsumexp over a keepdim sum's axis), which a further pass removes. */
static int has_single_reduction(const kf_graph *g) {
    for (int i = 0; i < g->nnodes; i++)
        if (unroll_count(g, &g->nodes[i]) == 1) return 1;
    return 0;
}

kf_status kf_graph_lower_keeping(const kf_graph *g, kf_lower_keep_fn keep, void *ctx, kf_graph **out,
                                 kf_error *err) {
    kf_status st = lower_once(g, keep, ctx, out, err);
    /* the lowerings' own reductions over a single element, lowered in turn (each pass
     * removes the ones it sees and adds none: bounded for safety all the same) */
    for (int pass = 0; st == KF_OK && pass < 4 && has_single_reduction(*out); pass++) {
        kf_graph *h = *out;
        st = lower_once(h, keep, ctx, out, err);
        kf_graph_free(h);
    }
    return st;
}

static kf_status lower_once(const kf_graph *g, kf_lower_keep_fn keep, void *ctx, kf_graph **out, kf_error *err) {
    *out = NULL;
    kf_graph *h = kf_graph_new(g->name);
    snprintf(h->path, sizeof h->path, "%s", g->path);
    h->has_tol = g->has_tol;
    h->atol = g->atol, h->rtol = g->rtol, h->nmse = g->nmse;
    int *map = kf_malloc((size_t)(g->nvalues > 0 ? g->nvalues : 1) * sizeof *map);
    kf_status st = KF_OK;
    for (int i = 0; i < g->nvalues; i++) map[i] = -1;
    for (int i = 0; i < g->ninputs && st == KF_OK; i++) {
        const kf_value *v = &g->values[g->inputs[i]];
        int id = kf_graph_add_input(h, v->name, v->dtype, &v->shape, err);
        if (id < 0) {
            st = err ? err->code : KF_ERR_INTERNAL;
            break;
        }
        kf_value *nv = &h->values[id];
        nv->has_range = v->has_range, nv->lo = v->lo, nv->hi = v->hi;
        nv->line = v->line, nv->col = v->col;
        map[g->inputs[i]] = id;
    }
    for (int ni = 0; ni < g->nnodes && st == KF_OK; ni++) {
        const kf_node *n = &g->nodes[ni];
        const kf_op_def *d = kf_op_get(n->op);
        int ins[KF_MAX_NODE_IN];
        for (int a = 0; a < n->nin; a++) {
            int v = n->in[a];
            if (map[v] < 0) map[v] = kf_graph_add_const(h, g->values[v].cval); /* constants */
            ins[a] = map[v];
        }
        const kf_value *ov = &g->values[n->out];
        int id;
        int64_t unroll = unroll_count(g, n);
        if ((d->lower || d->own_lower || unroll) && !(keep && keep(g, n, ctx))) {
            char *text = NULL;
            if (unroll) {
                text = unrolled_text(g, n, unroll);
            } else if (d->own_lower) { /* a function of the operands' shapes */
                kf_op_dims s = kf_node_dims(g, n);
                kf_buf o = {0};
                char why[300];
                if (d->own_lower(&s, &n->attr, &o, why, sizeof why) < 0) {
                    kf_buf_free(&o);
                    st = kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, n->line, n->col, "%s: %s", d->name, why);
                    break;
                }
                text = kf_buf_take(&o);
            } else {
                text = lowering_text(d, &n->attr);
            }
            kf_error why = {0}; /* the parser's message, quoted into err's */
            int first = h->nnodes;
            st = kf_parse_expr_into(h, text, ins, n->nin, n->line, n->col, &id, &why);
            if (st == KF_OK) id = merge_repeats(h, first, id);
            if (st != KF_OK) {
                st = kf_error_set(err, KF_ERR_INTERNAL, g->path, n->line, n->col,
                                  "%s: its lowering '%s' does not apply here: %s", d->name, text, why.msg);
            } else if (!kf_shape_equal(&h->values[id].shape, &ov->shape) ||
                       h->values[id].dtype != ov->dtype || h->values[id].producer < 0) {
                st = kf_error_set(err, KF_ERR_INTERNAL, g->path, n->line, n->col,
                                  "%s: its lowering '%s' gives another shape or dtype than the op",
                                  d->name, text);
            } else if (ov->name[0] != '%') {
                kf_graph_set_name(h, id, ov->name);
            }
            free(text);
        } else {
            id = kf_graph_add_node(h, n->op, ins, n->nin, &n->attr, ov->name[0] == '%' ? NULL : ov->name,
                                   n->line, n->col, err);
            if (id < 0) st = err ? err->code : KF_ERR_INTERNAL;
        }
        if (st == KF_OK) map[n->out] = id;
    }
    for (int j = 0; j < g->noutputs && st == KF_OK; j++)
        st = kf_graph_mark_output(h, map[g->outputs[j]], err);
    free(map);
    if (st != KF_OK) {
        kf_graph_free(h);
        return st;
    }
    *out = h;
    return KF_OK;
}
