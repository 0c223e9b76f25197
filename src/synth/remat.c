/*
 * Recomputation of cheap elementwise values (the planner's graph rewrite before it splits
 * stages). A normalisation written out by hand or lowered from a composite,
 *
 *     d = x - mean(x);  v = mean(square(d));  y = d * rsqrt(v + eps)
 *
 * reads d twice: once before the reduction of d and once after it. The elementwise stage
 * that computes d cannot hold y (y needs v, which needs all of d), so d went through a
 * scratch tensor: written once, read once, as large as x. Computing d again where y is
 * computed reads x instead (no more bytes than d when x is d's only full-size operand),
 * writes nothing, and leaves d's first stage with one reader, the reduction, into which
 * it fuses as a prologue. The rewrite copies such a node in front of each reader that
 * comes after a reduction of it; the copy is placed with that reader (synth.c cluster()).
 */
#include "synth_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 when value v is computed anyway in memory when the planner runs: a graph input, a
 * constant, or the result of a stage that is not elementwise (a reduction, a norm,
 * softmax, a scan, a matmul). */
static int resident(const kf_graph *g, int v) {
    const kf_value *val = &g->values[v];
    if (val->producer < 0) return 1;
    const kf_op_def *d = kf_op_get(g->nodes[val->producer].op);
    return d->cls != KF_CLASS_POINTWISE && d->cls != KF_CLASS_VIEW;
}

/* Node u qualifies for copies: an f32 elementwise node, not an output, whose operands are
 * all resident and at most one of them as large as its result (the others broadcast). */
static int cheap(const kf_graph *g, const kf_node *u) {
    const kf_value *U = &g->values[u->out];
    if (!kf_op_is_elementwise(u->op) || U->output_index >= 0 || U->dtype != KF_F32) return 0;
    int64_t n = kf_shape_numel(&U->shape);
    int full = 0;
    for (int a = 0; a < u->nin; a++) {
        const kf_value *o = &g->values[u->in[a]];
        if (!resident(g, u->in[a]) || o->dtype != KF_F32) return 0;
        if (!o->is_const && kf_shape_numel(&o->shape) >= n) full++;
    }
    return full <= 1;
}

/* Per node of g, the node whose result it reads late (see remat_plan): late[ri] = u when
 * reader ri gets a copy of u, else -1. Returns the number of copies. */
static int remat_plan(const kf_graph *g, int *late) {
    int copies = 0;
    char *reach = kf_malloc((size_t)g->nvalues), *after = kf_malloc((size_t)g->nvalues);
    for (int ri = 0; ri < g->nnodes; ri++) late[ri] = -1;
    for (int ui = 0; ui < g->nnodes; ui++) {
        const kf_node *u = &g->nodes[ui];
        if (!cheap(g, u)) continue;
        /* reach: depends on u's result; after: depends on it through a stage that is not
         * elementwise (so not before that stage is complete) */
        memset(reach, 0, (size_t)g->nvalues);
        memset(after, 0, (size_t)g->nvalues);
        reach[u->out] = 1;
        for (int ni = ui + 1; ni < g->nnodes; ni++) {
            const kf_node *n = &g->nodes[ni];
            const kf_op_def *d = kf_op_get(n->op);
            int r = 0, a2 = 0;
            for (int a = 0; a < n->nin; a++) {
                r |= reach[n->in[a]];
                a2 |= after[n->in[a]];
            }
            reach[n->out] = (char)r;
            after[n->out] = (char)(a2 || (r && d->cls != KF_CLASS_POINTWISE && d->cls != KF_CLASS_VIEW));
            /* an elementwise reader of u of u's shape that also reads what follows a
             * reduction of u: it gets its own copy of u */
            if (!kf_op_is_elementwise(n->op) || late[ni] >= 0 ||
                !kf_shape_equal(&g->values[n->out].shape, &g->values[u->out].shape))
                continue;
            int reads_u = 0, reads_after = 0;
            for (int a = 0; a < n->nin; a++) {
                reads_u |= n->in[a] == u->out;
                reads_after |= after[n->in[a]] && n->in[a] != u->out;
            }
            if (reads_u && reads_after) {
                late[ni] = ui;
                copies++;
            }
        }
    }
    free(reach);
    free(after);
    return copies;
}

/* See synth_int.h. */
kf_graph *kf_synth_graph_with_inputs(const kf_graph *g, int **map_out) {
    kf_graph *h = kf_graph_new(g->name);
    snprintf(h->path, sizeof h->path, "%s", g->path);
    h->has_tol = g->has_tol;
    h->atol = g->atol, h->rtol = g->rtol, h->nmse = g->nmse;
    int *map = kf_malloc((size_t)g->nvalues * sizeof *map);
    for (int i = 0; i < g->nvalues; i++) map[i] = -1;
    for (int i = 0; i < g->ninputs; i++) {
        const kf_value *v = &g->values[g->inputs[i]];
        int id = kf_graph_add_input(h, v->name, v->dtype, &v->shape, NULL);
        if (id < 0) { /* they were valid in g: a bug, not the task's */
            free(map);
            kf_graph_free(h);
            *map_out = NULL;
            return NULL;
        }
        kf_value *nv = &h->values[id];
        nv->has_range = v->has_range, nv->lo = v->lo, nv->hi = v->hi;
        nv->line = v->line, nv->col = v->col;
        map[g->inputs[i]] = id;
    }
    *map_out = map;
    return h;
}

kf_graph *kf_synth_remat(const kf_graph *g, int **copy_nodes) {
    *copy_nodes = NULL;
    if (g->nnodes == 0) return NULL;
    int *late = kf_malloc((size_t)g->nnodes * sizeof *late);
    if (remat_plan(g, late) == 0) {
        free(late);
        return NULL;
    }
    int *map = NULL;
    kf_graph *h = kf_synth_graph_with_inputs(g, &map);
    int *copy = kf_calloc((size_t)(2 * g->nnodes), sizeof *copy);
    int ok = h != NULL;
    for (int ni = 0; ni < g->nnodes && ok; ni++) {
        const kf_node *n = &g->nodes[ni];
        int ins[KF_MAX_NODE_IN];
        for (int a = 0; a < n->nin; a++) {
            int v = n->in[a];
            if (map[v] < 0) map[v] = kf_graph_add_const(h, g->values[v].cval);
            ins[a] = map[v];
        }
        if (late[ni] >= 0) { /* u's copy, just before this reader */
            const kf_node *u = &g->nodes[late[ni]];
            int uins[KF_MAX_NODE_IN];
            for (int a = 0; a < u->nin; a++) uins[a] = map[u->in[a]];
            int c = kf_graph_add_node(h, u->op, uins, u->nin, &u->attr, NULL, u->line, u->col, NULL);
            if (c < 0) {
                ok = 0;
                break;
            }
            copy[h->nnodes - 1] = 1;
            for (int a = 0; a < n->nin; a++)
                if (n->in[a] == u->out) ins[a] = c;
        }
        const kf_value *ov = &g->values[n->out];
        int id = kf_graph_add_node(h, n->op, ins, n->nin, &n->attr, ov->name[0] == '%' ? NULL : ov->name, n->line,
                                   n->col, NULL);
        if (id < 0) ok = 0;
        else map[n->out] = id;
    }
    for (int j = 0; j < g->noutputs && ok; j++) ok = kf_graph_mark_output(h, map[g->outputs[j]], NULL) == KF_OK;
    free(map);
    free(late);
    if (!ok) { /* the copy type-checks as the original did: a bug, not the task's */
        free(copy);
        kf_graph_free(h);
        return NULL;
    }
    *copy_nodes = copy;
    return h;
}
