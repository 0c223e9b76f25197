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
 *   - A matmul reads a view whose map reads whole matrices of its source, as they are or
 *     with the last two dims swapped, as its layout (ta/tb) on the source, with the map's
 *     batch strides (a permutation or broadcast of batch dims): a transpose feeding a
 *     matmul is an index map, not a flag. A reshape of a dense buffer (a map that keeps
 *     the row-major order) is read as that buffer.
 *   - On the CPU, a matmul's B operand whose map is strided below a reshape that merges or
 *     splits dims (a convolution's column matrix: reshape(permute(unfold(x)))) is gathered
 *     by the matmul's packing, each matrix dim a mixed-radix run of strides into the value
 *     below (kf_mm_gather): an implicit GEMM, the column matrix never stored. A pad below
 *     is the value read (copied once, it is as small as the input).
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

/* How a matmul reads the map m as an operand: 1 when the source's last two dims are read
 * whole and swapped, 0 when whole as they are, -1 when the map is anything else. The batch
 * dims may be any map that moves whole matrices (a permutation or broadcast of batch dims,
 * a strided batch slice from the start): their strides, in the source's matrices, go to
 * bstr[j] for the map's output batch dims j. */
static int matrix_layout(const kf_imap *m, int64_t *bstr) {
    int r = m->out_rank, ri = m->in_rank;
    if (m->nguards || r < 2 || ri < 2) return -1;
    const kf_affine *a = &m->in[ri - 2], *b = &m->in[ri - 1];
    if (a->off || b->off) return -1;
    for (int j = 0; j < r - 2; j++)
        if (a->coef[j] || b->coef[j]) return -1;
    int t;
    if (a->coef[r - 2] == 1 && b->coef[r - 1] == 1 && !a->coef[r - 1] && !b->coef[r - 2]) t = 0;
    else if (a->coef[r - 1] == 1 && b->coef[r - 2] == 1 && !a->coef[r - 2] && !b->coef[r - 1]) t = 1;
    else return -1;
    /* whole matrices: the kernels take dense [rows, cols] with no offset inside */
    if (m->out_dims[r - 2] != m->in_dims[t ? ri - 1 : ri - 2] || m->out_dims[r - 1] != m->in_dims[t ? ri - 2 : ri - 1])
        return -1;
    for (int d = 0; d < ri - 2; d++)
        if (m->in[d].off || m->in[d].coef[r - 2] || m->in[d].coef[r - 1]) return -1;
    int64_t str[KF_MAX_DIMS], base, mat = m->in_dims[ri - 2] * m->in_dims[ri - 1];
    kf_imap_strides(m, str, &base);
    if (base) return -1;
    for (int j = 0; j < r - 2; j++) {
        if (str[j] < 0 || str[j] % mat) return -1;
        if (bstr) bstr[j] = str[j] / mat;
    }
    return t;
}

/* The atoms of a reshape from shape us (element strides ust) to shape ws: each ws dim as
 * the us sub-dims it takes, outer first (a us dim split over ws dims gives each its part,
 * ws dims merging us dims take them all). 0 when the sizes do not line up that way. */
static int reshape_atoms(const kf_shape *us, const int64_t *ust, const kf_shape *ws, int *na,
                         int64_t (*asz)[KF_MM_MAX_ATOMS], int64_t (*ast)[KF_MM_MAX_ATOMS]) {
    int i = 0, j = 0;
    int64_t ru = 1, rw = 1;
    for (int q = 0; q < ws->rank; q++) na[q] = 0;
    for (;;) {
        while (ru == 1 && i < us->rank) ru = us->d[i++];
        while (rw == 1 && j < ws->rank) rw = ws->d[j++];
        if (ru == 1 || rw == 1) return ru == rw;
        int64_t a = ru < rw ? ru : rw, big = ru < rw ? rw : ru;
        if (big % a || na[j - 1] == KF_MM_MAX_ATOMS) return 0;
        asz[j - 1][na[j - 1]] = a;
        ast[j - 1][na[j - 1]++] = ust[i - 1] * (ru / a); /* the outer part of us dim i-1 */
        ru /= a;
        rw /= a;
    }
}

int kf_synth_mm_gather(const kf_graph *g, const kf_node *n, int k, kf_mm_gather *gd) {
    memset(gd, 0, sizeof *gd);
    int w = n->in[k];
    const kf_shape *ws = &g->values[w].shape, *os = &g->values[n->out].shape;
    if (!kf_synth_is_view(g, w) || ws->rank < 2 || g->values[w].dtype != KF_F32) return -1;
    /* a reshape on top: the rest is composed below it */
    int u = w;
    kf_imap top;
    if (kf_node_imap(g, &g->nodes[g->values[w].producer], &top, NULL) != KF_OK) return -1;
    if (top.flat) u = g->nodes[g->values[w].producer].in[0];
    kf_imap m;
    kf_imap_identity(&m, &g->values[u].shape);
    int v = u;
    for (;;) { /* down to the first view that pads (read from memory) or a non-view */
        int p = g->values[v].producer;
        if (p < 0 || kf_op_get(g->nodes[p].op)->cls != KF_CLASS_VIEW) break;
        kf_imap inner, r;
        if (kf_node_imap(g, &g->nodes[p], &inner, NULL) != KF_OK || inner.nguards) break;
        if (!kf_imap_compose(&m, &inner, &r) || r.nguards) break;
        m = r;
        v = g->nodes[p].in[0];
    }
    if (v == w) return -1; /* w itself pads: its copy is the operand */
    int pv = g->values[v].producer;
    if (pv >= 0 && kf_op_get(g->nodes[pv].op)->cls == KF_CLASS_VIEW) {
        kf_imap pm;
        gd->padded = kf_node_imap(g, &g->nodes[pv], &pm, NULL) == KF_OK && pm.nguards > 0;
    }
    int64_t ust[KF_MAX_DIMS], base;
    kf_imap_strides(&m, ust, &base);
    int na[KF_MAX_DIMS];
    int64_t asz[KF_MAX_DIMS][KF_MM_MAX_ATOMS], ast[KF_MAX_DIMS][KF_MM_MAX_ATOMS];
    if (!reshape_atoms(&g->values[u].shape, ust, ws, na, asz, ast)) return -1;
    int r = ws->rank, nb = os->rank - 2;
    for (int j = 0; j < nb; j++) { /* the output's batch dims: one stride each */
        int wj = j - (nb - (r - 2));
        if (wj < 0 || ws->d[wj] == 1) continue;
        if (na[wj] != 1) return -1;
        gd->bstr[j] = ast[wj][0];
    }
    gd->nrow = na[r - 2];
    gd->ncol = na[r - 1];
    memcpy(gd->rdim, asz[r - 2], sizeof gd->rdim);
    memcpy(gd->rstr, ast[r - 2], sizeof gd->rstr);
    memcpy(gd->cdim, asz[r - 1], sizeof gd->cdim);
    memcpy(gd->cstr, ast[r - 1], sizeof gd->cstr);
    gd->base = base;
    gd->on = 1;
    return v;
}

int kf_synth_mm_operand(const kf_graph *g, const kf_node *n, int k, int gather, int *transposed, int64_t *bstr,
                        kf_mm_gather *gd) {
    int w = n->in[k];
    if (gd) gd->on = 0;
    const kf_shape *ws = &g->values[w].shape;
    *transposed = 0;
    if (bstr) { /* a dense operand's batch strides, in matrices */
        int64_t run = 1;
        for (int j = ws->rank - 3; j >= 0; j--) {
            bstr[j] = run;
            run *= ws->d[j];
        }
    }
    if (!kf_synth_is_view(g, w)) return w;
    kf_imap m;
    int src = kf_value_imap(g, w, &m);
    int linear = src != w && kf_imap_is_linear(&m); /* a relabelling (reshape): dense as it is */
    if (linear && !kf_synth_is_view(g, src)) return src;
    int64_t vb[KF_MAX_DIMS];
    int t = src != w && !linear ? matrix_layout(&m, vb) : -1;
    if (t < 0) { /* gathered through its map, else read from the materialised view */
        kf_mm_gather tmp;
        int v = gather && k == 1 ? kf_synth_mm_gather(g, n, k, gd ? gd : &tmp) : -1;
        return v >= 0 ? v : linear ? src : w;
    }
    *transposed = t;
    if (bstr)
        for (int j = 0; j < ws->rank - 2; j++) bstr[j] = vb[j];
    return src;
}

int *kf_synth_view_skips(const kf_graph *g, int gather) {
    int *skip = kf_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *skip);
    int *needed = kf_calloc((size_t)g->nvalues, sizeof *needed);
    /* a value is needed when a reader reads it itself, not through it */
    for (int ni = 0; ni < g->nnodes; ni++) {
        const kf_node *n = &g->nodes[ni];
        const kf_op_def *d = kf_op_get(n->op);
        if (d->cls == KF_CLASS_VIEW) continue;
        for (int a = 0; a < n->nin; a++) {
            int t, v = d->kind == KF_KIND_MATMUL && a < 2 ? kf_synth_mm_operand(g, n, a, gather, &t, NULL, NULL)
                                                         : n->in[a];
            needed[v] = 1;
        }
    }
    for (int j = 0; j < g->noutputs; j++) needed[g->outputs[j]] = 1;
    /* a needed view reads where its composed map starts; its readers come after it, so
     * walking back decides each view after all of them */
    for (int ni = g->nnodes - 1; ni >= 0; ni--) {
        const kf_node *n = &g->nodes[ni];
        if (kf_op_get(n->op)->cls != KF_CLASS_VIEW || !needed[n->out]) continue;
        kf_imap m;
        needed[kf_value_imap(g, n->out, &m)] = 1;
    }
    for (int ni = 0; ni < g->nnodes; ni++)
        skip[ni] = kf_op_get(g->nodes[ni].op)->cls == KF_CLASS_VIEW && !needed[g->nodes[ni].out];
    /* a node no output depends on (an unused intermediate of a task) is not planned */
    int *live = needed;
    memset(live, 0, (size_t)g->nvalues * sizeof *live);
    for (int j = 0; j < g->noutputs; j++) live[g->outputs[j]] = 1;
    for (int ni = g->nnodes - 1; ni >= 0; ni--) {
        const kf_node *n = &g->nodes[ni];
        if (!live[n->out]) {
            skip[ni] = 1;
            continue;
        }
        for (int a = 0; a < n->nin; a++) live[n->in[a]] = 1;
    }
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

int kf_synth_is_read_op(kf_op op) {
    kf_op_class c = kf_op_get(op)->cls;
    return c == KF_CLASS_VIEW || c == KF_CLASS_GATHER;
}

/* A gather is a read of its data operand (always a buffer: the planner keeps it out of the
 * gather's own stage) with that operand's row-major strides on every dim but the gathered
 * one, whose offset is the index's value times its stride. */
void kf_synth_gather_read(const kf_synth *s, const kf_stage *st, const kf_node *n, kf_ew_layout *L, int64_t *stride) {
    const kf_graph *g = s->g;
    const kf_shape *dom = &st->dom, *xs = &g->values[n->in[0]].shape, *os = &g->values[n->out].shape;
    int r = L->nops, ax = __builtin_ctz(n->attr.axes);
    int64_t xstr[KF_MAX_DIMS], run = 1;
    for (int d = xs->rank - 1; d >= 0; d--) {
        xstr[d] = run;
        run *= xs->d[d];
    }
    L->buf[r] = n->in[0];
    L->base[r] = 0;
    L->pad[r] = n->attr.alpha;
    L->take[r] = n->in[1];
    L->take_str[r] = xstr[ax];
    L->take_n[r] = xs->d[ax];
    /* the result's dims right-aligned in the domain; a dim of 1 (or a missing one) broadcasts */
    for (int j = 0; j < dom->rank; j++) {
        int oj = j - (dom->rank - os->rank);
        stride[j] = oj < 0 || os->d[oj] == 1 || oj == ax ? 0 : xstr[oj];
    }
}

int kf_synth_ewise_guarded(const kf_ew_layout *L, int r) {
    for (int k = 0; k < L->ng; k++)
        if (L->gop[k] == r) return 1;
    return 0;
}

int kf_synth_prologue_reads_ok(const kf_synth *s, const kf_stage *st) {
    kf_ew_layout L;
    kf_synth_ewise_layout(s, st, &L);
    for (int r = 0; r < L.nreads; r++)
        if (L.take[r] >= 0 || s->g->values[L.buf[r]].dtype != KF_F32) return 0;
    for (int r = L.nreads; r < L.nops; r++)
        if (s->g->values[L.v[r]].dtype != KF_F32) return 0;
    return 1;
}

int kf_synth_stage_has_views(const kf_synth *s, const kf_stage *st) {
    for (int i = 0; i < st->nnodes; i++)
        if (kf_synth_is_read_op(s->g->nodes[st->nodes[i]].op)) return 1;
    return 0;
}
