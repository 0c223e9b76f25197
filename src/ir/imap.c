/*
 * Index maps (kforge/imap.h): identity, composition, application to one index, a gather
 * of a range of output elements a row at a time (the interpreter's views), and the
 * strided form a planner folds into its addressing. The maps themselves come from the VIEW
 * records (src/ops/view.c); this file knows no view by name.
 *
 * Design note. Composition keeps every guard: the guards of the outer map stay as they
 * are (expressions of the output index), the inner map's guards are rewritten through the
 * outer map's affine part. One pad value per map: composing two padded maps with different
 * values has no single map and is refused (the planner then reads the inner view from
 * memory; the interpreter never composes). A flat map (a reshape that merges dims)
 * composes only onto a map that keeps the row-major order (kf_imap_is_linear): then the
 * flat index of the inner view's result is the flat index of its source.
 */
#include "kforge/ir.h"

#include <assert.h>
#include <string.h>

void kf_imap_identity(kf_imap *m, const kf_shape *s) {
    memset(m, 0, sizeof *m);
    m->in_rank = m->out_rank = s->rank;
    for (int i = 0; i < s->rank; i++) {
        m->in_dims[i] = m->out_dims[i] = s->d[i];
        m->in[i].coef[i] = 1;
    }
}

/* e rewritten through outer: e(outer(o)) as an expression of o */
static kf_affine through(const kf_affine *e, const kf_imap *outer) {
    kf_affine r;
    memset(&r, 0, sizeof r);
    r.off = e->off;
    for (int k = 0; k < outer->in_rank; k++) {
        if (!e->coef[k]) continue;
        r.off += e->coef[k] * outer->in[k].off;
        for (int j = 0; j < outer->out_rank; j++) r.coef[j] += e->coef[k] * outer->in[k].coef[j];
    }
    return r;
}

int kf_imap_is_linear(const kf_imap *m) {
    if (m->nguards) return 0;
    int64_t str[KF_MAX_DIMS], base, run = 1;
    kf_imap_strides(m, str, &base);
    if (base) return 0;
    for (int j = m->out_rank - 1; j >= 0; j--) {
        if (m->out_dims[j] != 1 && str[j] != run) return 0;
        run *= m->out_dims[j];
    }
    int64_t n = 1;
    for (int d = 0; d < m->in_rank; d++) n *= m->in_dims[d];
    return n == run;
}

int kf_imap_compose(const kf_imap *outer, const kf_imap *inner, kf_imap *r) {
    if (outer->flat) { /* a flat index of inner's result: inner must keep the flat order */
        if (!kf_imap_is_linear(inner)) return 0;
        if (r != outer) *r = *outer; /* the same flat index of inner's source */
        return 1;
    }
    assert(outer->in_rank == inner->out_rank);
    for (int i = 0; i < outer->in_rank; i++) assert(outer->in_dims[i] == inner->out_dims[i]);
    if (outer->nguards && inner->nguards && outer->pad != inner->pad) return 0;
    if (outer->nguards + inner->nguards > KF_IMAP_MAX_GUARDS) return 0;
    kf_imap t;
    memset(&t, 0, sizeof t);
    t.in_rank = inner->in_rank;
    t.out_rank = outer->out_rank;
    memcpy(t.in_dims, inner->in_dims, sizeof t.in_dims);
    memcpy(t.out_dims, outer->out_dims, sizeof t.out_dims);
    for (int d = 0; d < inner->in_rank; d++) t.in[d] = through(&inner->in[d], outer);
    for (int k = 0; k < outer->nguards; k++) {
        t.guard[t.nguards] = outer->guard[k];
        t.guard_n[t.nguards++] = outer->guard_n[k];
    }
    for (int k = 0; k < inner->nguards; k++) {
        t.guard[t.nguards] = through(&inner->guard[k], outer);
        t.guard_n[t.nguards++] = inner->guard_n[k];
    }
    t.pad = outer->nguards ? outer->pad : inner->pad;
    t.flat = inner->flat;
    *r = t;
    return 1;
}

static int64_t eval(const kf_affine *e, int rank, const int64_t *o) {
    int64_t v = e->off;
    for (int j = 0; j < rank; j++) v += e->coef[j] * o[j];
    return v;
}

int kf_imap_apply(const kf_imap *m, const int64_t *out_idx, int64_t *in_idx) {
    for (int k = 0; k < m->nguards; k++) {
        int64_t v = eval(&m->guard[k], m->out_rank, out_idx);
        if (v < 0 || v >= m->guard_n[k]) return 0;
    }
    for (int d = 0; d < m->in_rank; d++) in_idx[d] = eval(&m->in[d], m->out_rank, out_idx);
    return 1;
}

/* floor(a / b) for b > 0 */
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* [*lo, *hi) narrowed to the u where 0 <= g0 + c * u < n (an interval: the expression is
 * affine in u). Both ends passing, the whole stretch does (the common case: no division). */
static void narrow(int64_t g0, int64_t c, int64_t n, int64_t *lo, int64_t *hi) {
    if (*lo >= *hi) return;
    int64_t a = g0 + c * *lo, b = g0 + c * (*hi - 1);
    if (a >= 0 && a < n && b >= 0 && b < n) return;
    int64_t from, to; /* the passing u: from <= u <= to */
    if (c == 0) {
        *hi = *lo; /* g0 fails, everywhere */
        return;
    }
    if (c > 0) {
        from = -floor_div(g0, c);                 /* ceil(-g0 / c) */
        to = floor_div(n - 1 - g0, c);
    } else {
        from = -floor_div(n - 1 - g0, -c);        /* ceil((g0 - (n - 1)) / -c) */
        to = floor_div(g0, -c);
    }
    if (from > *lo) *lo = from;
    if (to + 1 < *hi) *hi = to + 1;
    if (*hi < *lo) *hi = *lo;
}

void kf_imap_gather(const kf_imap *m, const double *x, double pad, int64_t e0, int64_t e1, double *out) {
    if (e1 <= e0) return;
    int R = m->out_rank, G = m->nguards;
    int64_t str[KF_MAX_DIMS], f, o[KF_MAX_DIMS] = {0}, gv[KF_IMAP_MAX_GUARDS], gc[KF_IMAP_MAX_GUARDS];
    kf_imap_strides(m, str, &f);
    /* the last dim is the row (a rank-0 output: one row of one element) */
    int64_t L = R ? m->out_dims[R - 1] : 1, s = R ? str[R - 1] : 0, rest = e0;
    for (int j = R - 1; j >= 0; j--) {
        o[j] = rest % m->out_dims[j];
        rest /= m->out_dims[j];
    }
    /* f and gv: the flat offset and the guards' values at column 0 of the current row */
    for (int j = 0; j < R - 1; j++) f += str[j] * o[j];
    for (int k = 0; k < G; k++) {
        gv[k] = m->guard[k].off;
        for (int j = 0; j < R - 1; j++) gv[k] += m->guard[k].coef[j] * o[j];
        gc[k] = R ? m->guard[k].coef[R - 1] : 0;
    }
    int64_t t = R ? o[R - 1] : 0, e = e0;
    while (e < e1) {
        int64_t n = L - t < e1 - e ? L - t : e1 - e, lo = t, hi = t + n, u = t;
        for (int k = 0; k < G; k++) narrow(gv[k], gc[k], m->guard_n[k], &lo, &hi);
        if (hi <= lo) lo = hi = t + n;
#ifndef NDEBUG
        if (lo < hi) { /* the stretch's two ends read inside x; affine, so all between do */
            int64_t oi[KF_MAX_DIMS], ii[KF_MAX_DIMS];
            memcpy(oi, o, sizeof oi);
            for (int end = 0; end < 2; end++) {
                if (R) oi[R - 1] = end ? hi - 1 : lo;
                int ok = kf_imap_apply(m, oi, ii);
                assert(ok);
                int64_t ff = 0;
                for (int d = 0; d < m->in_rank; d++) {
                    assert(ii[d] >= 0 && ii[d] < m->in_dims[d]);
                    ff = ff * m->in_dims[d] + ii[d];
                }
                assert(ff == f + (R ? oi[R - 1] : 0) * s);
                (void)ok;
            }
        }
#endif
        for (; u < lo; u++) *out++ = pad;
        if (lo < hi) { /* (f alone may lie before x: a pad's first row) */
            const double *p = x + (f + lo * s);
            if (s == 1) {
                memcpy(out, p, (size_t)(hi - lo) * sizeof *out);
                out += hi - lo;
            } else {
                for (int64_t q = lo; q < hi; q++, p += s) *out++ = *p;
            }
        }
        for (u = hi; u < t + n; u++) *out++ = pad;
        e += n;
        t = 0;
        for (int j = R - 2; j >= 0; j--) { /* the next row, row-major */
            if (++o[j] < m->out_dims[j]) {
                f += str[j];
                for (int k = 0; k < G; k++) gv[k] += m->guard[k].coef[j];
                break;
            }
            o[j] = 0;
            f -= str[j] * (m->out_dims[j] - 1);
            for (int k = 0; k < G; k++) gv[k] -= m->guard[k].coef[j] * (m->out_dims[j] - 1);
        }
    }
}

void kf_imap_strides(const kf_imap *m, int64_t *str, int64_t *base) {
    int64_t cs[KF_MAX_DIMS], run = 1;
    for (int d = m->in_rank - 1; d >= 0; d--) {
        cs[d] = run;
        run *= m->in_dims[d];
    }
    *base = 0;
    for (int d = 0; d < m->in_rank; d++) *base += m->in[d].off * cs[d];
    for (int j = 0; j < m->out_rank; j++) {
        str[j] = 0;
        for (int d = 0; d < m->in_rank; d++) str[j] += m->in[d].coef[j] * cs[d];
    }
}

int kf_imap_is_identity(const kf_imap *m) {
    if (m->nguards || m->flat || m->in_rank != m->out_rank) return 0;
    for (int d = 0; d < m->in_rank; d++) {
        if (m->in[d].off || m->in_dims[d] != m->out_dims[d]) return 0;
        for (int j = 0; j < m->out_rank; j++)
            if (m->in[d].coef[j] != (j == d)) return 0;
    }
    return 1;
}

kf_status kf_node_imap(const kf_graph *g, const kf_node *n, kf_imap *m, kf_error *err) {
    const kf_op_def *d = kf_op_get(n->op);
    assert(d->cls == KF_CLASS_VIEW);
    const kf_shape *s = &g->values[n->in[0]].shape;
    char why[300];
    if (d->view(s->rank, s->d, &n->attr, m, why, sizeof why) < 0)
        return kf_error_set(err, KF_ERR_TYPE, g->path, n->line, n->col, "%s", why);
    return KF_OK;
}

int kf_value_imap(const kf_graph *g, int v, kf_imap *m) {
    kf_imap_identity(m, &g->values[v].shape);
    for (;;) {
        const kf_value *val = &g->values[v];
        if (val->producer < 0) return v;
        const kf_node *n = &g->nodes[val->producer];
        if (kf_op_get(n->op)->cls != KF_CLASS_VIEW) return v;
        kf_imap inner, r;
        if (kf_node_imap(g, n, &inner, NULL) != KF_OK) return v; /* the graph checked it */
        if (!kf_imap_compose(m, &inner, &r)) return v;
        *m = r;
        v = n->in[0];
    }
}
