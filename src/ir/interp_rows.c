/*
 * The reference a chunk of rows at a time (interp_int.h): graphs whose every live node is
 * local to the rows of axis 0 (the softmax family, the norms and the scans over other axes,
 * reductions that keep axis 0, and pointwise nodes between them).
 *
 * Design note. At KernelBench's official shapes a row-wise task is gigabytes: walked node
 * by node, each node's result, each error bound and each node's scratch (a norm's bound
 * alone takes two more tensors) is a whole float64 tensor, and the passes between the
 * nodes' parallel loops (the float32 range scan, the bound's terms) run on one core. Split
 * into chunks of rows, a chunk is the whole graph on a few rows: its intermediates are
 * chunk-sized, freed before the next chunk, and the chunks run side by side on the threads,
 * each walked by one thread with the same code as a whole graph (the node-by-node walk with
 * its bounds), so nothing is computed differently, only on fewer rows at a time.
 *
 * A chunk is the graph with axis 0 of every row-carrying value shortened to the chunk's
 * rows, and those values' arrays offset to its first row (row-major: a row is one
 * contiguous run). Graph inputs that broadcast over axis 0 (a norm's weight, a bias row, a
 * literal) are read whole by every chunk. The rows per chunk depend on the shape alone
 * (KF_INTERP_ROW_CHUNK), so the results are the same bit for bit on any number of threads.
 */
#include "ir/interp_int.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum { RW_UNSEEN, RW_WHOLE, RW_ROWED };

static int mark(char *cls, int v, char how) {
    if (cls[v] != RW_UNSEEN && cls[v] != how) return 0;
    cls[v] = how;
    return 1;
}

/* Operand u of an elementwise node whose result has rank rk: rowed when it has the
 * result's rank and O rows, whole when it broadcasts over axis 0 (a lower rank, one row,
 * a literal); a node's result must be rowed. 0: neither. */
static int mark_operand(const kf_graph *g, int u, int rk, int64_t O, char *cls) {
    const kf_value *uv = &g->values[u];
    if (uv->is_const) return mark(cls, u, RW_WHOLE);
    if (uv->shape.rank == rk && uv->shape.d[0] == O) return mark(cls, u, RW_ROWED);
    if (uv->producer >= 0) return 0;
    if (uv->shape.rank < rk || uv->shape.d[0] == 1) return mark(cls, u, RW_WHOLE);
    return 0;
}

/* Whether g's live nodes are all local to the rows of axis 0 (O rows): cls[v] then says
 * how each value they touch is read. */
static int row_local(const kf_graph *g, const char *live, int64_t *O_out, char *cls) {
    const kf_value *o0 = &g->values[g->outputs[0]];
    if (o0->shape.rank < 1 || o0->shape.d[0] < 2) return 0;
    int64_t O = o0->shape.d[0];
    for (int j = 0; j < g->noutputs; j++) {
        const kf_value *v = &g->values[g->outputs[j]];
        if (v->producer < 0 || v->shape.rank < 1 || v->shape.d[0] != O) return 0;
    }
    for (int k = 0; k < g->nnodes; k++) {
        if (!live[k]) continue;
        const kf_node *n = &g->nodes[k];
        const kf_op_def *d = kf_op_get(n->op);
        const kf_value *ov = &g->values[n->out];
        int rk = ov->shape.rank;
        if (rk < 1 || ov->shape.d[0] != O || !mark(cls, n->out, RW_ROWED)) return 0;
        switch (d->kind) {
        case KF_KIND_UNARY:
        case KF_KIND_BINARY:
            for (int a = 0; a < n->nin; a++)
                if (!mark_operand(g, n->in[a], rk, O, cls)) return 0;
            break;
        case KF_KIND_SOFTMAX:
        case KF_KIND_SCAN:
        case KF_KIND_NORM:
        case KF_KIND_REDUCE: {
            /* along other axes than 0: the rows of x are independent (a reduction that
             * keeps axis 0 keeps it first) */
            const kf_value *xv = &g->values[n->in[0]];
            if ((n->attr.axes & 1u) || xv->shape.rank < 1 || xv->shape.d[0] != O || !mark(cls, n->in[0], RW_ROWED))
                return 0;
            /* a norm's weight and bias, broadcast against x */
            for (int a = 1; a < n->nin; a++)
                if (d->kind != KF_KIND_NORM || !mark_operand(g, n->in[a], xv->shape.rank, O, cls)) return 0;
            break;
        }
        default: return 0; /* matmul, views, gathers and own references read across rows */
        }
    }
    *O_out = O;
    return 1;
}

int kf_interp_run_rows(const kf_graph *g, const char *live, const double *const *inputs,
                       double *const *outputs, double *const *bounds, int *beyond, kf_status *st,
                       kf_error *err) {
    int nv = g->nvalues;
    char *cls = kf_calloc((size_t)nv + 1, 1);
    int64_t O = 0;
    if (!row_local(g, live, &O, cls)) {
        free(cls);
        return 0;
    }
    /* elements per row of each rowed value, and the widest */
    int64_t *rowel = kf_calloc((size_t)nv + 1, sizeof *rowel), w = 1;
    for (int v = 0; v < nv; v++) {
        if (cls[v] != RW_ROWED) continue;
        int64_t e = 1;
        for (int d = 1; d < g->values[v].shape.rank; d++) e *= g->values[v].shape.d[d];
        rowel[v] = e;
        if (e > w) w = e;
    }
    int64_t per = KF_INTERP_ROW_CHUNK / w > 1 ? KF_INTERP_ROW_CHUNK / w : 1;
    int64_t nch = (O + per - 1) / per;
    if (nch < 2) {
        free(cls);
        free(rowel);
        return 0;
    }
    kf_status first_st = KF_OK;
    int64_t first_at = nch;
    int far = 0;
    int ni = g->ninputs, no = g->noutputs;
#pragma omp parallel reduction(| : far)
    {
        kf_graph cg = *g;
        cg.values = kf_malloc(((size_t)nv + 1) * sizeof *cg.values);
        const double **cin = kf_calloc((size_t)ni + 1, sizeof *cin);
        double **cout = kf_calloc((size_t)no + 1, sizeof *cout), **cb = kf_calloc((size_t)no + 1, sizeof *cb);
        kf_error e;
#pragma omp for schedule(dynamic, 1)
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t r0 = ch * per, rows = O - r0 < per ? O - r0 : per;
            memcpy(cg.values, g->values, (size_t)nv * sizeof *cg.values);
            for (int v = 0; v < nv; v++)
                if (cls[v] == RW_ROWED) cg.values[v].shape.d[0] = rows;
            for (int i = 0; i < ni; i++) {
                int v = g->inputs[i];
                cin[i] = inputs[i] && cls[v] == RW_ROWED ? inputs[i] + r0 * rowel[v] : inputs[i];
            }
            for (int j = 0; j < no; j++) {
                int64_t off = r0 * rowel[g->outputs[j]];
                cout[j] = outputs[j] + off;
                cb[j] = bounds && bounds[j] ? bounds[j] + off : NULL;
            }
            int b = 0;
            kf_status s = kf_interp_walk(&cg, cin, cout, bounds ? cb : NULL, beyond ? &b : NULL, 0, &e);
            far |= b;
            if (s != KF_OK) {
#pragma omp critical(kf_interp_rows_err)
                if (ch < first_at) { /* the first chunk's error, whatever the threads */
                    first_at = ch;
                    first_st = s;
                    if (err) *err = e;
                }
            }
        }
        free(cg.values);
        free(cin);
        free(cout);
        free(cb);
    }
    if (beyond) *beyond = far;
    *st = first_st;
    free(cls);
    free(rowel);
    return 1;
}
