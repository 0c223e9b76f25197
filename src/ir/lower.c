/*
 * Lowering of COMPOSITE operators for the kernels: a graph in which every node whose
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

int kf_graph_has_lowering(const kf_graph *g) {
    for (int i = 0; i < g->nnodes; i++)
        if (kf_op_get(g->nodes[i].op)->lower || kf_op_get(g->nodes[i].op)->own_lower) return 1;
    return 0;
}

kf_status kf_graph_lower(const kf_graph *g, kf_graph **out, kf_error *err) {
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
        if (d->lower || d->own_lower) {
            char *text = NULL;
            if (d->own_lower) { /* a function of the operands' shapes */
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
            st = kf_parse_expr_into(h, text, ins, n->nin, n->line, n->col, &id, &why);
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
