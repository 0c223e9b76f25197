/*
 * The VIEW records: ops that compute nothing and only say where each element of their
 * result is read from, as an index map (kforge/imap.h). Each record's `view` builds the
 * map from the input's shape and the node's attributes; the map gives the result's shape
 * (the shape rule), the interpreter gathers through it, and the planner folds it into the
 * addressing of the stage that reads it (src/synth/view.c). Nothing outside this file knows
 * which view is which.
 *
 * Dims may be negative (counted from the end, as in PyTorch); the builders resolve them
 * against the input's rank and give the reason when an attribute does not fit the input.
 */
#include "ops_int.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The identity map of an input of rank r and dims d: out = in. */
static void identity(kf_imap *m, int r, const int64_t *d) {
    memset(m, 0, sizeof *m);
    m->in_rank = m->out_rank = r;
    for (int i = 0; i < r; i++) {
        m->in_dims[i] = m->out_dims[i] = d[i];
        m->in[i].coef[i] = 1;
    }
}

/* dim resolved against rank r (negative counts from the end); -1 with why when outside. */
static int resolve(const char *op, const char *what, int64_t dim, int r, char *why, size_t cap) {
    if (dim < -r || dim >= r) {
        snprintf(why, cap, "%s: %s %lld is out of range for a rank-%d input (expected -%d to %d)", op,
                 what, (long long)dim, r, r, r - 1);
        return -1;
    }
    return (int)(dim < 0 ? dim + r : dim);
}

/* out dim j reads input dim p[j] (p a permutation of 0..r-1) */
static void permuted(kf_imap *m, int r, const int64_t *d, const int *p) {
    identity(m, r, d);
    for (int i = 0; i < r; i++) memset(m->in[i].coef, 0, sizeof m->in[i].coef);
    for (int j = 0; j < r; j++) {
        m->out_dims[j] = d[p[j]];
        m->in[p[j]].coef[j] = 1;
    }
}

static int view_transpose(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    if (r < 2) {
        snprintf(why, cap, "transpose: needs rank >= 2, found a rank-%d input", r);
        return -1;
    }
    int a = resolve("transpose", "dim0", A->dim, r, why, cap);
    int b = a < 0 ? -1 : resolve("transpose", "dim1", A->dim1, r, why, cap);
    if (b < 0) return -1;
    int p[KF_MAX_DIMS];
    for (int i = 0; i < r; i++) p[i] = i;
    p[a] = b;
    p[b] = a;
    permuted(m, r, d, p);
    return 0;
}

static int view_permute(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    int p[KF_MAX_DIMS], seen[KF_MAX_DIMS] = {0};
    if (A->ints.n == 0) { /* reverse every dim (numpy's transpose) */
        for (int i = 0; i < r; i++) p[i] = r - 1 - i;
    } else {
        if (A->ints.n != r) {
            snprintf(why, cap, "permute: dims has %d entries, the input has rank %d (a permutation of "
                     "0..%d is needed)", A->ints.n, r, r - 1);
            return -1;
        }
        for (int i = 0; i < r; i++) {
            p[i] = resolve("permute", "dim", A->ints.v[i], r, why, cap);
            if (p[i] < 0) return -1;
            if (seen[p[i]]++) {
                snprintf(why, cap, "permute: dims is not a permutation of 0..%d (dim %d appears twice)",
                         r - 1, p[i]);
                return -1;
            }
        }
    }
    permuted(m, r, d, p);
    return 0;
}

static int view_slice(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    int k = resolve("slice", "dim", A->dim, r, why, cap);
    if (k < 0) return -1;
    int64_t n = d[k], start = A->start, end = A->end;
    if (A->step < 1) {
        snprintf(why, cap, "slice: step %lld, expected a positive step", (long long)A->step);
        return -1;
    }
    if (start < 0) start += n;
    if (end < 0) end += n;
    if (end > n) end = n; /* PyTorch clamps the end: x[2:100] of 5 elements is x[2:5] */
    if (start < 0 || start >= n || end <= start) {
        snprintf(why, cap, "slice: [%lld:%lld] of dimension %d (size %lld) is out of range or empty "
                 "(kforge's tensors have no empty dimensions)", (long long)A->start,
                 (long long)(A->end == INT64_MAX ? n : A->end), k, (long long)n);
        return -1;
    }
    identity(m, r, d);
    m->out_dims[k] = (end - start + A->step - 1) / A->step;
    m->in[k].off = start;
    m->in[k].coef[k] = A->step;
    return 0;
}

static int view_flip(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    identity(m, r, d);
    int seen[KF_MAX_DIMS] = {0};
    for (int i = 0; i < A->ints.n; i++) {
        int k = resolve("flip", "dim", A->ints.v[i], r, why, cap);
        if (k < 0) return -1;
        if (seen[k]++) {
            snprintf(why, cap, "flip: dim %d given twice", k);
            return -1;
        }
        m->in[k].off = d[k] - 1;
        m->in[k].coef[k] = -1;
    }
    return 0;
}

/* pads as torch.nn.functional.pad takes them: (before, after) pairs from the last dim
 * backwards; a negative pad crops. */
static int view_pad(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    if (A->ints.n % 2 || A->ints.n > 2 * r) {
        snprintf(why, cap, "pad: pads has %d entries, expected (before, after) pairs for at most the "
                 "%d dims of the input", A->ints.n, r);
        return -1;
    }
    identity(m, r, d);
    m->pad = A->alpha;
    for (int i = 0; i < A->ints.n / 2; i++) {
        int k = r - 1 - i;
        int64_t lo = A->ints.v[2 * i], hi = A->ints.v[2 * i + 1], n = d[k] + lo + hi;
        if (n < 1) {
            snprintf(why, cap, "pad: pads (%lld, %lld) leave dimension %d of size %lld empty",
                     (long long)lo, (long long)hi, k, (long long)d[k]);
            return -1;
        }
        m->out_dims[k] = n;
        m->in[k].off = -lo;
        if (lo > 0 || hi > 0) { /* reads outside the input: guarded */
            m->guard[m->nguards] = m->in[k];
            m->guard_n[m->nguards++] = d[k];
        }
    }
    return 0;
}

/* torch.Tensor.expand: leading new dims, -1 keeps a dim, a dim of 1 broadcasts. */
static int view_expand(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    if (A->ints.n == 0) {
        identity(m, r, d);
        return 0;
    }
    int q = A->ints.n;
    if (q < r || q > KF_MAX_DIMS) {
        snprintf(why, cap, "expand: shape has %d entries, expected %d to %d (the input has rank %d)", q, r,
                 KF_MAX_DIMS, r);
        return -1;
    }
    memset(m, 0, sizeof *m);
    m->in_rank = r;
    m->out_rank = q;
    for (int i = 0; i < r; i++) m->in_dims[i] = d[i];
    for (int j = 0; j < q; j++) {
        int i = j - (q - r); /* the input dim aligned from the right */
        int64_t want = A->ints.v[j];
        if (i < 0) {
            if (want < 1) {
                snprintf(why, cap, "expand: a new leading dimension %d must have a positive size, found %lld",
                         j, (long long)want);
                return -1;
            }
            m->out_dims[j] = want;
            continue;
        }
        if (want == -1) want = d[i];
        if (want != d[i] && d[i] != 1) {
            snprintf(why, cap, "expand: dimension %d of size %lld cannot expand to %lld (only a dimension "
                     "of size 1 broadcasts)", i, (long long)d[i], (long long)want);
            return -1;
        }
        if (want < 1) {
            snprintf(why, cap, "expand: size %lld for dimension %d, expected a positive size", (long long)want, j);
            return -1;
        }
        m->out_dims[j] = want;
        m->in[i].coef[j] = d[i] == 1 ? 0 : 1; /* broadcast: coefficient 0 */
    }
    return 0;
}

/* torch.Tensor.unfold(dim, size, step) with a dilation: dim becomes the window starts, a
 * trailing dim of `size` walks one window, `dilation` apart. */
static int view_unfold(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    int k = resolve("unfold", "dim", A->dim, r, why, cap);
    if (k < 0) return -1;
    if (r + 1 > KF_MAX_DIMS) {
        snprintf(why, cap, "unfold: the result would have rank %d, more than %d", r + 1, KF_MAX_DIMS);
        return -1;
    }
    if (A->size < 1 || A->step < 1 || A->dilation < 1) {
        snprintf(why, cap, "unfold: size %lld, step %lld, dilation %lld; each must be positive",
                 (long long)A->size, (long long)A->step, (long long)A->dilation);
        return -1;
    }
    int64_t extent = A->dilation * (A->size - 1) + 1;
    if (extent > d[k]) {
        snprintf(why, cap, "unfold: a window spans %lld elements (size %lld, dilation %lld), dimension %d "
                 "has %lld", (long long)extent, (long long)A->size, (long long)A->dilation, k, (long long)d[k]);
        return -1;
    }
    identity(m, r, d);
    m->out_rank = r + 1;
    m->out_dims[k] = (d[k] - extent) / A->step + 1;
    m->out_dims[r] = A->size;
    m->in[k].coef[k] = A->step;
    m->in[k].coef[r] = A->dilation;
    return 0;
}

/* torch reshape/view/flatten/squeeze/unsqueeze: the same elements in row-major order under
 * another shape (one -1 is inferred). Where every input dim maps onto consecutive result
 * dims (splits, and dims of 1 added or dropped) the map is affine in the input's dims, and
 * composes with any view below; where dims merge it is flat (kforge/imap.h). */
static int view_reshape(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    int q = A->ints.n, infer = -1;
    int64_t n = 1, known = 1, s[KF_MAX_DIMS];
    for (int i = 0; i < r; i++) n *= d[i];
    if (q > KF_MAX_DIMS) {
        snprintf(why, cap, "reshape: shape has %d entries, at most %d", q, KF_MAX_DIMS);
        return -1;
    }
    for (int j = 0; j < q; j++) {
        s[j] = A->ints.v[j];
        if (s[j] == -1 && infer < 0) infer = j;
        else if (s[j] < 1) {
            snprintf(why, cap, "reshape: size %lld for dimension %d (sizes are positive; one may be -1)",
                     (long long)s[j], j);
            return -1;
        } else known *= s[j];
    }
    if (infer >= 0) s[infer] = known && n % known == 0 ? n / known : -1;
    if ((infer >= 0 && s[infer] < 1) || (infer < 0 && known != n)) {
        snprintf(why, cap, "reshape: %lld elements do not fit the shape given (%d entries, %lld elements "
                 "without the -1)", (long long)n, q, (long long)known);
        return -1;
    }
    memset(m, 0, sizeof *m);
    m->out_rank = q;
    for (int j = 0; j < q; j++) m->out_dims[j] = s[j];
    /* affine: each input dim of more than 1 is a run of result dims whose product it is */
    m->in_rank = r;
    for (int i = 0; i < r; i++) m->in_dims[i] = d[i];
    int j = 0, ok = 1;
    for (int i = 0; i < r && ok; i++) {
        if (d[i] == 1) continue;
        while (j < q && s[j] == 1) j++;
        int64_t p = 1;
        int j0 = j;
        while (j < q && p < d[i]) p *= s[j++];
        if (p != d[i]) ok = 0;
        for (int k = j - 1, run = 1; ok && k >= j0; run *= (int)s[k], k--) m->in[i].coef[k] = run;
    }
    if (ok) return 0;
    memset(m->in, 0, sizeof m->in); /* flat: in[0] = the row-major index of the result */
    m->in_rank = 1;
    m->in_dims[0] = n;
    m->flat = 1;
    for (int k = q - 1, run = 1; k >= 0; run *= (int)s[k], k--) m->in[0].coef[k] = run;
    return 0;
}

/* torch select(dim, index): one index of a dim, which goes away. */
static int view_select(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    int k = resolve("select", "dim", A->dim, r, why, cap);
    if (k < 0) return -1;
    int64_t at = A->start < 0 ? A->start + d[k] : A->start;
    if (at < 0 || at >= d[k]) {
        snprintf(why, cap, "select: index %lld is out of range for dimension %d of size %lld",
                 (long long)A->start, k, (long long)d[k]);
        return -1;
    }
    memset(m, 0, sizeof *m);
    m->in_rank = r;
    m->out_rank = r - 1;
    for (int i = 0, j = 0; i < r; i++) {
        m->in_dims[i] = d[i];
        if (i == k) {
            m->in[i].off = at;
            continue;
        }
        m->out_dims[j] = d[i];
        m->in[i].coef[j++] = 1;
    }
    return 0;
}

/* The last two dims of a rank >= 2 input as (row, col) for the triangle views. */
static int rowcol(const char *op, int r, char *why, size_t cap) {
    if (r >= 2) return 0;
    snprintf(why, cap, "%s: needs rank >= 2 (matrices in the last two dims), found a rank-%d input", op, r);
    return -1;
}

/* torch.triu / torch.tril over the last two dims, with the elements outside the triangle
 * `value` instead of 0 (an attention mask's -inf): the identity map with one guard,
 * col - row - diagonal >= 0 (triu) or diagonal + row - col >= 0 (tril), bounded above by
 * more than the expression reaches. */
static int view_triangle(int upper, int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why,
                         size_t cap) {
    if (rowcol(upper ? "triu" : "tril", r, why, cap) < 0) return -1;
    int64_t k = A->start, s = upper ? 1 : -1;
    identity(m, r, d);
    m->pad = A->alpha;
    kf_affine *g = &m->guard[m->nguards];
    g->off = -s * k;
    g->coef[r - 1] = s;
    g->coef[r - 2] = -s;
    m->guard_n[m->nguards++] = d[r - 1] + d[r - 2] + (k < 0 ? -k : k) + 1;
    return 0;
}

static int view_triu(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    return view_triangle(1, r, d, A, m, why, cap);
}

static int view_tril(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    return view_triangle(0, r, d, A, m, why, cap);
}

/* torch.diag_embed(x, offset, dim1, dim2): the last dim of x on the offset diagonal of new
 * square matrices in output dims (dim1, dim2) (counted in the result's rank), zero
 * elsewhere; the other dims of x keep their order. The element (i, j) of a matrix reads
 * x[..., i] (offset >= 0) or x[..., j] (offset < 0) when j - i == offset. */
static int view_diag_embed(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    int q = r + 1;
    if (q > KF_MAX_DIMS) {
        snprintf(why, cap, "diag_embed: the result would have rank %d, more than %d", q, KF_MAX_DIMS);
        return -1;
    }
    int a = resolve("diag_embed", "dim1", A->dim, q, why, cap);
    int b = a < 0 ? -1 : resolve("diag_embed", "dim2", A->dim1, q, why, cap);
    if (b < 0) return -1;
    if (a == b) {
        snprintf(why, cap, "diag_embed: dim1 and dim2 are both dimension %d of the result", a);
        return -1;
    }
    int64_t k = A->start, n = d[r - 1] + (k < 0 ? -k : k);
    memset(m, 0, sizeof *m);
    m->in_rank = r;
    m->out_rank = q;
    for (int i = 0; i < r; i++) m->in_dims[i] = d[i];
    for (int j = 0, i = 0; j < q; j++) {
        if (j == a || j == b) {
            m->out_dims[j] = n;
            continue;
        }
        m->out_dims[j] = d[i];
        m->in[i++].coef[j] = 1;
    }
    m->in[r - 1].coef[k >= 0 ? a : b] = 1;
    kf_affine *g = &m->guard[m->nguards];
    g->off = -k;
    g->coef[b] = 1;
    g->coef[a] = -1;
    m->guard_n[m->nguards++] = 1;
    return 0;
}

/* torch.diagonal(x, offset, dim1, dim2): dims dim1 and dim2 removed, their offset diagonal
 * (x[..., i, i + offset] for offset >= 0, x[..., i - offset, i] below) as a new last dim. */
static int view_diagonal(int r, const int64_t *d, const kf_attrs *A, kf_imap *m, char *why, size_t cap) {
    if (r < 2) {
        snprintf(why, cap, "diagonal: needs rank >= 2, found a rank-%d input", r);
        return -1;
    }
    int a = resolve("diagonal", "dim1", A->dim, r, why, cap);
    int b = a < 0 ? -1 : resolve("diagonal", "dim2", A->dim1, r, why, cap);
    if (b < 0) return -1;
    if (a == b) {
        snprintf(why, cap, "diagonal: dim1 and dim2 are both dimension %d", a);
        return -1;
    }
    int64_t k = A->start, ra = k < 0 ? -k : 0, cb = k > 0 ? k : 0;
    int64_t n = d[a] - ra < d[b] - cb ? d[a] - ra : d[b] - cb;
    if (n < 1) {
        snprintf(why, cap, "diagonal: offset %lld leaves no element of the %lld x %lld matrices (kforge's "
                 "tensors have no empty dimensions)", (long long)k, (long long)d[a], (long long)d[b]);
        return -1;
    }
    memset(m, 0, sizeof *m);
    m->in_rank = r;
    m->out_rank = r - 1;
    for (int i = 0; i < r; i++) m->in_dims[i] = d[i];
    int j = 0;
    for (int i = 0; i < r; i++) {
        if (i == a || i == b) continue;
        m->out_dims[j] = d[i];
        m->in[i].coef[j++] = 1;
    }
    m->out_dims[j] = n;
    m->in[a].off = ra;
    m->in[a].coef[j] = 1;
    m->in[b].off = cb;
    m->in[b].coef[j] = 1;
    return 0;
}

#define VIEW .cls = KF_CLASS_VIEW, .kind = KF_KIND_VIEW, .min_in = 1, .max_in = 1, .flops = 0
#define INT(nm, field, dflt, aten) {nm, KF_ATTR_INT, offsetof(kf_attrs, field), dflt, aten, NULL}
#define INTS(nm, dflt, aten) {nm, KF_ATTR_INTS, offsetof(kf_attrs, ints), dflt, aten, NULL}

const kf_op_def kf_ops_view[] = {
    {.op = KF_OP_TRANSPOSE, .name = "transpose", VIEW, .view = view_transpose,
     .doc = "swap two dims (default the last two)",
     .attrs = {INT("dim0", dim, "-2", "1"), INT("dim1", dim1, "-1", "2")},
     .aten = {"aten.transpose", "aten.t", "aten.swapaxes"},
     .torch = "lambda x, dim0=-2, dim1=-1: x.transpose(dim0, dim1)"},
    {.op = KF_OP_PERMUTE, .name = "permute", VIEW, .view = view_permute,
     .doc = "reorder dims: result dim i is input dim dims[i] (default: all reversed)",
     .attrs = {INTS("dims", "[]", "1")}, .aten = {"aten.permute", "aten.numpy_T"},
     .torch = "lambda x, dims=(): x.permute(*(dims or range(x.dim() - 1, -1, -1)))"},
    {.op = KF_OP_SLICE, .name = "slice", VIEW, .view = view_slice,
     .doc = "x[start:end:step] along one dim (end clamped to the size, negative values from the end)",
     .attrs = {INT("dim", dim, "0", "1"), INT("start", start, "0", "2"), INT("end", end, "max", "3"),
               INT("step", step, "1", "4")},
     .aten = {"aten.slice"},
     .torch = "lambda x, dim=0, start=0, end=None, step=1: torch.ops.aten.slice(x, dim, start, end, step)"},
    {.op = KF_OP_PAD, .name = "pad", VIEW, .view = view_pad,
     .doc = "constant pad: pads as F.pad's (before, after) pairs from the last dim back; negative crops",
     .attrs = {INTS("pads", "[]", "1"), {"value", KF_ATTR_FLOAT, offsetof(kf_attrs, alpha), "0", "2", NULL}},
     .aten = {"aten.constant_pad_nd"},
     .torch = "lambda x, pads=(), value=0.0: F.pad(x, list(pads), value=value)"},
    {.op = KF_OP_FLIP, .name = "flip", VIEW, .view = view_flip, .doc = "reverse the order along dims",
     .attrs = {INTS("dims", "[-1]", "1")}, .aten = {"aten.flip"},
     .torch = "lambda x, dims=(-1,): torch.flip(x, list(dims))"},
    {.op = KF_OP_EXPAND, .name = "expand", VIEW, .view = view_expand,
     .doc = "broadcast to shape (new leading dims; -1 keeps a dim; a dim of 1 repeats)",
     .attrs = {INTS("shape", "[]", "1")}, .aten = {"aten.expand", "aten.broadcast_to"},
     .torch = "lambda x, shape=(): x.expand(*(shape or x.shape))"},
    {.op = KF_OP_UNFOLD, .name = "unfold", VIEW, .view = view_unfold,
     .doc = "sliding windows along dim (torch unfold plus dilation): window starts, then a trailing window dim",
     .attrs = {INT("dim", dim, "-1", "1"), INT("size", size, "1", "2"), INT("step", step, "1", "3"),
               INT("dilation", dilation, "1", NULL)},
     .aten = {"aten.unfold"},
     .torch = "lambda x, dim=-1, size=1, step=1, dilation=1: "
              "x.unfold(dim, dilation * (size - 1) + 1, step)[..., ::dilation]"},
    {.op = KF_OP_RESHAPE, .name = "reshape", VIEW, .view = view_reshape,
     .doc = "the same elements, row-major, under another shape (one -1 inferred; default: flattened)",
     .attrs = {INTS("shape", "[-1]", "1")},
     .aten = {"aten.view", "aten.reshape", "aten._unsafe_view", "aten.flatten", "aten.squeeze",
              "aten.unsqueeze"},
     .torch = "lambda x, shape=(-1,): x.reshape(*shape)"},
    {.op = KF_OP_SELECT, .name = "select", VIEW, .view = view_select,
     .doc = "one index along dim (the dim goes away; a negative index counts from the end)",
     .attrs = {INT("dim", dim, "0", "1"), INT("index", start, "0", "2")},
     .aten = {"aten.select"},
     .torch = "lambda x, dim=0, index=0: x.select(dim, index)"},
    {.op = KF_OP_TRIU, .name = "triu", VIEW, .view = view_triu,
     .doc = "upper triangle of the last two dims (col - row >= diagonal), `value` elsewhere",
     .attrs = {INT("diagonal", start, "0", "1"), {"value", KF_ATTR_FLOAT, offsetof(kf_attrs, alpha), "0", NULL, NULL}},
     .aten = {"aten.triu"},
     .torch = "lambda x, diagonal=0, value=0.0: torch.where(torch.ones(x.shape[-2:], dtype=torch.bool, "
              "device=x.device).triu(diagonal), x, torch.tensor(value, dtype=x.dtype, device=x.device))"},
    {.op = KF_OP_TRIL, .name = "tril", VIEW, .view = view_tril,
     .doc = "lower triangle of the last two dims (col - row <= diagonal), `value` elsewhere",
     .attrs = {INT("diagonal", start, "0", "1"), {"value", KF_ATTR_FLOAT, offsetof(kf_attrs, alpha), "0", NULL, NULL}},
     .aten = {"aten.tril"},
     .torch = "lambda x, diagonal=0, value=0.0: torch.where(torch.ones(x.shape[-2:], dtype=torch.bool, "
              "device=x.device).tril(diagonal), x, torch.tensor(value, dtype=x.dtype, device=x.device))"},
    {.op = KF_OP_DIAG_EMBED, .name = "diag_embed", VIEW, .view = view_diag_embed,
     .doc = "the last dim on the offset diagonal of new square matrices in dims (dim1, dim2), 0 elsewhere",
     .attrs = {INT("offset", start, "0", "1"), INT("dim1", dim, "-2", "2"), INT("dim2", dim1, "-1", "3")},
     .aten = {"aten.diag_embed"},
     .torch = "lambda x, offset=0, dim1=-2, dim2=-1: torch.diag_embed(x, offset, dim1, dim2)"},
    {.op = KF_OP_DIAGONAL, .name = "diagonal", VIEW, .view = view_diagonal,
     .doc = "the offset diagonal of dims (dim1, dim2) as a new last dim (those two removed)",
     .attrs = {INT("offset", start, "0", "1"), INT("dim1", dim, "0", "2"), INT("dim2", dim1, "1", "3")},
     .aten = {"aten.diagonal"},
     .torch = "lambda x, offset=0, dim1=0, dim2=1: torch.diagonal(x, offset, dim1, dim2)"},
};
const int kf_ops_view_count = sizeof kf_ops_view / sizeof kf_ops_view[0];
