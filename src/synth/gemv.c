/*
 * Matrix-vector products as reductions on GPUs (the planner's graph rewrite, GPU platforms
 * only). A matmul whose result has one column (A [M, K] times b [K, 1]) or one row
 * (a [1, K] times B [K, N]) reuses nothing: each element of the matrix is read once and
 * used once. The SIMT GEMM tiles it anyway, as M/64 blocks of one useful column, so the
 * whole GPU works on a few dozen tiles (KernelBench 4, [2048, 1048576] times a vector, ran
 * at 5 % of its memory floor on the H100, 22x slower than cuBLAS's GEMV). Written as
 *
 *     c = sum(A * reshape(b, [1, K]), axes=1, keepdim)      (N == 1, a row reduction)
 *     c = sum(reshape(a, [K, 1]) * B, axes=0, keepdim)      (M == 1, a column reduction)
 *
 * it is a reduction with an elementwise prologue, which the reduction templates run at
 * memory speed and split along K when there are few rows. The reference still evaluates
 * the task's own matmul (its float64 dgemm and its error bound), so the verifier judges the
 * rewritten kernels against the product as written.
 */
#include "synth_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 when node n is an f32 matrix-vector product this rewrite takes: rank-2 operands, no
 * batch, M or N equal to 1 (not both: a dot product is left to the GEMM's one tile), the
 * matrix not a view. */
static int is_gemv(const kf_graph *g, const kf_node *n, int *n_is_one) {
    if (kf_op_get(n->op)->kind != KF_KIND_MATMUL || n->nin != 2) return 0;
    const kf_value *A = &g->values[n->in[0]], *B = &g->values[n->in[1]], *C = &g->values[n->out];
    if (A->shape.rank != 2 || B->shape.rank != 2 || C->shape.rank != 2) return 0;
    if (A->dtype != KF_F32 || B->dtype != KF_F32 || C->dtype != KF_F32) return 0;
    int64_t M = A->shape.d[0], K = A->shape.d[1], N = B->shape.d[1];
    if (K < 2 || (M == 1) == (N == 1)) return 0;
    /* the matrix read as it lies (row-major [M, K] or [K, N]): a transposed one would be a
     * strided read in the reduction's prologue, which the planner stores first; those keep
     * the GEMM */
    const kf_value *mat = N == 1 ? A : B;
    if (mat->producer >= 0 && kf_op_get(g->nodes[mat->producer].op)->cls == KF_CLASS_VIEW) return 0;
    *n_is_one = N == 1;
    return 1;
}

kf_graph *kf_synth_gemv_rewrite(const kf_graph *g) {
    int any = 0, dummy;
    for (int k = 0; k < g->nnodes && !any; k++) any = is_gemv(g, &g->nodes[k], &dummy);
    if (!any) return NULL;
    int *map = NULL;
    kf_graph *h = kf_synth_graph_with_inputs(g, &map);
    if (!h) return NULL;
    int ok = 1;
    kf_op reshape = kf_op_lookup("reshape"), mul = kf_op_lookup("mul"), sum = kf_op_lookup("sum");
    for (int ni = 0; ni < g->nnodes && ok; ni++) {
        const kf_node *n = &g->nodes[ni];
        int ins[KF_MAX_NODE_IN];
        for (int a = 0; a < n->nin; a++) {
            int v = n->in[a];
            if (map[v] < 0) map[v] = kf_graph_add_const(h, g->values[v].cval);
            ins[a] = map[v];
        }
        const kf_value *ov = &g->values[n->out];
        const char *name = ov->name[0] == '%' ? NULL : ov->name;
        int col, id;
        if (is_gemv(g, n, &col)) {
            /* the vector laid along the matrix's K axis (a reshape: read in place, no copy),
             * the product, its sum */
            int vec = ins[col ? 1 : 0];
            int64_t K = g->values[n->in[0]].shape.d[1];
            kf_attrs ra = kf_attrs_default(reshape, 2);
            ra.ints.n = 2;
            ra.ints.v[0] = col ? 1 : K;
            ra.ints.v[1] = col ? K : 1;
            int t = kf_graph_add_node(h, reshape, &vec, 1, &ra, NULL, n->line, n->col, NULL);
            int pins[2] = {col ? ins[0] : t, col ? t : ins[1]};
            int p = t < 0 ? -1 : kf_graph_add_node(h, mul, pins, 2, NULL, NULL, n->line, n->col, NULL);
            kf_attrs sa = kf_attrs_default(sum, 2);
            sa.axes = col ? 2u : 1u;
            sa.keepdim = 1;
            id = p < 0 ? -1 : kf_graph_add_node(h, sum, &p, 1, &sa, name, n->line, n->col, NULL);
        } else {
            id = kf_graph_add_node(h, n->op, ins, n->nin, &n->attr, name, n->line, n->col, NULL);
        }
        if (id < 0) ok = 0;
        else map[n->out] = id;
    }
    for (int j = 0; j < g->noutputs && ok; j++) ok = kf_graph_mark_output(h, map[g->outputs[j]], NULL) == KF_OK;
    free(map);
    if (!ok) { /* the rewrite type-checks whenever the matmul did: a bug, not the task's */
        kf_graph_free(h);
        return NULL;
    }
    return h;
}
