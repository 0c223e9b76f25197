/*
 * Index maps in the builtin generator: how the planner reads a VIEW node's result
 * without copying it (docs/design-notes.md, "Index maps").
 *
 *   - An elementwise stage reads a view through its map: the chain of views is composed
 *     into one map of the buffer it starts from (kf_value_imap), which becomes that read's
 *     element strides over the stage's domain, a base offset and, where the map pads,
 *     guards (affine expressions of the domain index that must lie in [0, n), else the
 *     pad value is read). The templates fold these into their addressing
 *     (kf_synth_ewise_layout, tpl_ewise.c, gpu_ewise.c).
 *   - A matmul reads a view whose map is its source with the last two dims swapped (and
 *     the batch dims as they are) as its transposed layout (ta/tb) on the source: a
 *     transpose feeding a matmul is an index map, not a flag.
 *   - Every other stage (reductions, softmax, norms, a matmul operand of any other map)
 *     reads a view materialised by the elementwise stage that computes it (a copy through
 *     the map), which is correct on every platform.
 *   - A view node none of whose readers needs its own result (every reader is a view that
 *     composes through it, or a matmul that folds it) is not planned at all.
 *
 * Nothing here knows which view op is which: only their maps.
 */
#include "synth_int.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int kf_synth_is_view(const kf_graph *g, int v) {
    int p = g->values[v].producer;
    return p >= 0 && kf_op_get(g->nodes[p].op)->cls == KF_CLASS_VIEW;
}

/* 1 when m (rank r onto a source of the same rank) keeps the batch dims and swaps the
 * last two, 0 when it keeps them too (the identity), -1 for any other map. */
static int matrix_layout(const kf_imap *m) {
    int r = m->out_rank;
    if (m->nguards || m->in_rank != r || r < 2) return -1;
    for (int d = 0; d < r; d++) {
        if (m->in[d].off) return -1;
        for (int j = 0; j < r; j++) {
            int batch_entry = d < r - 2 || j < r - 2;
            if (batch_entry && m->in[d].coef[j] != (d == j)) return -1;
        }
    }
    const kf_affine *a = &m->in[r - 2], *b = &m->in[r - 1];
    if (a->coef[r - 2] == 1 && b->coef[r - 1] == 1 && !a->coef[r - 1] && !b->coef[r - 2]) return 0;
    if (a->coef[r - 1] == 1 && b->coef[r - 2] == 1 && !a->coef[r - 2] && !b->coef[r - 1]) return 1;
    return -1;
}

int kf_synth_mm_operand(const kf_graph *g, const kf_node *n, int k, int *transposed) {
    int w = n->in[k];
    *transposed = 0;
    if (!kf_synth_is_view(g, w)) return w;
    kf_imap m;
    int src = kf_value_imap(g, w, &m);
    int t = src != w ? matrix_layout(&m) : -1;
    if (t < 0) return w; /* read from the view's materialised result */
    *transposed = t;
    return src;
}

int *kf_synth_view_skips(const kf_graph *g) {
    int *skip = kf_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *skip);
    int *needed = kf_calloc((size_t)g->nvalues, sizeof *needed);
    /* a value is needed when a reader reads it itself, not through it */
    for (int ni = 0; ni < g->nnodes; ni++) {
        const kf_node *n = &g->nodes[ni];
        const kf_op_def *d = kf_op_get(n->op);
        if (d->cls == KF_CLASS_VIEW) { /* reads where its composed map starts */
            kf_imap m;
            needed[kf_value_imap(g, n->out, &m)] = 1;
            continue;
        }
        for (int a = 0; a < n->nin; a++) {
            int t, v = d->kind == KF_KIND_MATMUL && a < 2 ? kf_synth_mm_operand(g, n, a, &t) : n->in[a];
            needed[v] = 1;
        }
    }
    for (int j = 0; j < g->noutputs; j++) needed[g->outputs[j]] = 1;
    for (int ni = 0; ni < g->nnodes; ni++)
        skip[ni] = kf_op_get(g->nodes[ni].op)->cls == KF_CLASS_VIEW && !needed[g->nodes[ni].out];
    free(needed);
    return skip;
}

void kf_synth_view_read(const kf_synth *s, const kf_stage *st, int w, kf_ew_layout *L,
                        int64_t *stride) {
    const kf_graph *g = s->g;
    const kf_shape *dom = &st->dom, *ws = &g->values[w].shape;
    int r = L->nops;
    kf_imap m;
    int src = kf_value_imap(g, w, &m);
    int64_t wstr[KF_MAX_DIMS], base;
    kf_imap_strides(&m, wstr, &base);
    L->buf[r] = src;
    L->base[r] = base;
    L->pad[r] = m.pad;
    /* w's dims right-aligned in the domain; a dim of 1 (or a missing one) broadcasts */
    for (int j = 0; j < dom->rank; j++) {
        int wj = j - (dom->rank - ws->rank);
        stride[j] = wj < 0 || ws->d[wj] == 1 ? 0 : wstr[wj];
    }
    assert(L->ng + m.nguards <= KF_EW_MAX_GUARDS); /* cluster() keeps a stage's guards within */
    for (int k = 0; k < m.nguards; k++) {
        int gi = L->ng++;
        L->gop[gi] = r;
        L->goff[gi] = m.guard[k].off;
        L->gn[gi] = m.guard_n[k];
        for (int j = 0; j < dom->rank; j++) {
            int wj = j - (dom->rank - ws->rank);
            L->graw[gi][j] = wj < 0 || ws->d[wj] == 1 ? 0 : m.guard[k].coef[wj];
        }
    }
}

int kf_synth_ewise_guarded(const kf_ew_layout *L, int r) {
    for (int k = 0; k < L->ng; k++)
        if (L->gop[k] == r) return 1;
    return 0;
}

int kf_synth_stage_has_views(const kf_synth *s, const kf_stage *st) {
    for (int i = 0; i < st->nnodes; i++)
        if (kf_op_get(s->g->nodes[st->nodes[i]].op)->cls == KF_CLASS_VIEW) return 1;
    return 0;
}
