/*
 * The COMPOSITE records (softmax family over one axis, norms over trailing axes,
 * logsumexp) and the CONTRACT record (batched matmul). Each composite carries its own
 * float64 reference, written from PyTorch's definition and independent of every kernel: a
 * row function (the interpreter gathers each row along the op's axes, calls it, and
 * scatters the result back) or, for logsumexp, a reduction of one row. Their kernels are
 * the fast-path templates of their shape rule (row softmax, norms) or, for logsumexp, its
 * lowering. Matmul's reference is the interpreter's sum of products (OpenBLAS dgemm on
 * doubles); its kernels are the SIMT, tensor-core and CPU GEMMs.
 */
#include "ops_int.h"

#include <math.h>
#include <stddef.h>

#define AXIS_LAST {"axis", KF_ATTR_AXIS, offsetof(kf_attrs, axes), "-1", "1", NULL}
#define NORM_AXES {"axes", KF_ATTR_AXES, offsetof(kf_attrs, axes), "-1", NULL, NULL}

/* log(sum(exp(x))) of one row, shifted by its maximum (torch: NaN if any is NaN, -inf for
 * an empty row or all -inf, +inf if any is +inf). */
static double rows_logsumexp(const double *row, int64_t n, const kf_attrs *A) {
    (void)A;
    double m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (row[i] != row[i]) return row[i];
        if (row[i] > m) m = row[i];
    }
    if (isinf(m)) return m;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += exp(row[i] - m);
    return m + log(s);
}

/* max with NaN propagation (torch's rule) */
static inline double nanmax(double a, double b) {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
}

/* softmax of one row: exp(x - max) / sum(exp(x - max)) */
static void row_softmax(const double *x, double *y, int64_t n, const double *w, const double *b,
                        const kf_attrs *A) {
    (void)w, (void)b, (void)A;
    double m = -INFINITY, s = 0;
    for (int64_t r = 0; r < n; r++) m = nanmax(m, x[r]);
    for (int64_t r = 0; r < n; r++) y[r] = x[r] - m;
    kf_vm_exp(y, y, n); /* libmvec's exp over the row (vmath.c: within 4 ulp of libm's) */
    for (int64_t r = 0; r < n; r++) s += y[r];
    double inv = 1.0 / s;
    for (int64_t r = 0; r < n; r++) y[r] *= inv;
}

/* log_softmax of one row: x - max - log(sum(exp(x - max))) */
static void row_log_softmax(const double *x, double *y, int64_t n, const double *w, const double *b,
                            const kf_attrs *A) {
    (void)w, (void)b, (void)A;
    double m = -INFINITY, s = 0;
    for (int64_t r = 0; r < n; r++) m = nanmax(m, x[r]);
    if (x != y) { /* the row's exp in y first (libmvec's, vmath.c), summed in the same order */
        for (int64_t r = 0; r < n; r++) y[r] = x[r] - m;
        kf_vm_exp(y, y, n);
        for (int64_t r = 0; r < n; r++) s += y[r];
    } else {
        for (int64_t r = 0; r < n; r++) s += exp(x[r] - m);
    }
    double ls = log(s);
    for (int64_t r = 0; r < n; r++) y[r] = x[r] - m - ls;
}

/* layer norm of one row: (x - mean) / sqrt(biased variance + eps), then * w + b */
static void row_layer_norm(const double *x, double *y, int64_t n, const double *w, const double *b,
                           const kf_attrs *A) {
    double sum = 0, sq = 0;
    for (int64_t r = 0; r < n; r++) sum += x[r];
    double mean = sum / (double)n;
    for (int64_t r = 0; r < n; r++) sq += (x[r] - mean) * (x[r] - mean);
    double scale = 1.0 / sqrt(sq / (double)n + A->eps);
    for (int64_t r = 0; r < n; r++) {
        double v = (x[r] - mean) * scale;
        if (w) v *= w[r];
        if (b) v += b[r];
        y[r] = v;
    }
}

/* rms norm of one row: x / sqrt(mean(x^2) + eps), then * w */
static void row_rms_norm(const double *x, double *y, int64_t n, const double *w, const double *b,
                         const kf_attrs *A) {
    (void)b;
    double sq = 0;
    for (int64_t r = 0; r < n; r++) sq += x[r] * x[r];
    double scale = 1.0 / sqrt(sq / (double)n + A->eps);
    for (int64_t r = 0; r < n; r++) y[r] = w ? x[r] * scale * w[r] : x[r] * scale;
}

/* ---- error bounds (kf_interp_run_bounds): how far each result may move when every
 * element x[r] of its row may be off by up to e[r] (first order, worst case) ---- */

static double row_emax(const double *e, int64_t n) {
    double m = 0;
    for (int64_t r = 0; r < n; r++)
        if (e[r] > m) m = e[r];
    return m;
}

/* logsumexp moves by at most the largest change of its row (1-Lipschitz in max-norm). */
static double rows_logsumexp_bound(const double *row, const double *e, int64_t n, const kf_attrs *A) {
    (void)row, (void)A;
    return row_emax(e, n);
}

/* softmax: log p_i = x_i - logsumexp(x) moves by at most 2E, so p_i by p_i (e^2E - 1);
 * and p_i stays in [0, 1], so by no more than max(p_i, 1 - p_i) however large E is. The
 * product is taken in logs, exp(x_i - lse + log(e^2E - 1)): p_i times e^2E - 1 as written
 * is 0 * inf = NaN where p_i underflows and E is large (rows of inputs near 1e5 that a
 * float32 GEMM and batch norm feed it), and a NaN bound made the element check pass
 * anything and dropped the NMSE share. */
static void row_softmax_bound(const double *x, const double *e, double *yb, int64_t n,
                              const double *w, const double *b, const kf_attrs *A) {
    row_softmax(x, yb, n, w, b, A);
    double E2 = 2.0 * row_emax(e, n), m = -INFINITY, s = 0;
    for (int64_t r = 0; r < n; r++) m = nanmax(m, x[r]);
    if (m != m || isinf(m) || !(E2 > 0)) { /* NaN/inf rows: the product, fmin dropping 0 * inf's NaN */
        double f = E2 > 0 ? expm1(E2) : 0.0;
        for (int64_t r = 0; r < n; r++) yb[r] = fmin(yb[r] * f, fmax(yb[r], 1.0 - yb[r]));
        return;
    }
    for (int64_t r = 0; r < n; r++) s += exp(x[r] - m);
    double lse = m + log(s), lf = E2 + log(-expm1(-E2)); /* log(e^2E - 1), no overflow */
    for (int64_t r = 0; r < n; r++) {
        double p = yb[r];
        yb[r] = fmin(exp(x[r] - lse + lf), fmax(p, 1.0 - p));
    }
}

static void row_log_softmax_bound(const double *x, const double *e, double *yb, int64_t n,
                                  const double *w, const double *b, const kf_attrs *A) {
    (void)x, (void)w, (void)b, (void)A;
    double E = 2.0 * row_emax(e, n);
    for (int64_t r = 0; r < n; r++) yb[r] = E;
}

/* layer norm: z = (x - mean) / s with s = sqrt(var + eps); x - mean moves by at most 2E and
 * s by at most 2E, so z_r by 2E (1 + |z_r|) / s; then * |w_r|. */
static void row_layer_norm_bound(const double *x, const double *e, double *yb, int64_t n,
                                 const double *w, const double *b, const kf_attrs *A) {
    (void)b;
    double sum = 0, sq = 0, E = row_emax(e, n);
    for (int64_t r = 0; r < n; r++) sum += x[r];
    double mean = sum / (double)n;
    for (int64_t r = 0; r < n; r++) sq += (x[r] - mean) * (x[r] - mean);
    double sd = sqrt(sq / (double)n + A->eps);
    for (int64_t r = 0; r < n; r++) {
        double z = (x[r] - mean) / sd;
        yb[r] = 2.0 * E * (1.0 + fabs(z)) / sd * (w ? fabs(w[r]) : 1.0);
    }
}

/* rms norm: q = sqrt(mean(x^2) + eps) moves by at most E, so x_r / q by E (1 + |x_r| / q) / q. */
static void row_rms_norm_bound(const double *x, const double *e, double *yb, int64_t n,
                               const double *w, const double *b, const kf_attrs *A) {
    (void)b;
    double sq = 0, E = row_emax(e, n);
    for (int64_t r = 0; r < n; r++) sq += x[r] * x[r];
    double q = sqrt(sq / (double)n + A->eps);
    for (int64_t r = 0; r < n; r++) yb[r] = E * (1.0 + fabs(x[r]) / q) / q * (w ? fabs(w[r]) : 1.0);
}

#define AXES_ALL {"axes", KF_ATTR_AXES, offsetof(kf_attrs, axes), "all", "1", NULL}
#define KEEPDIM {"keepdim", KF_ATTR_BOOL, offsetof(kf_attrs, keepdim), "false", "2", NULL}

const kf_op_def kf_ops_composite[] = {
    {.op = KF_OP_SOFTMAX, .name = "softmax", .cls = KF_CLASS_COMPOSITE, .kind = KF_KIND_SOFTMAX,
     .min_in = 1, .max_in = 1, .flops = 5, .doc = "exp(x - max) / sum(exp(x - max)) along one axis",
     .attrs = {AXIS_LAST}, .aten = {"aten.softmax", "aten._softmax"}, .f64_row = row_softmax, .f64_row_bound = row_softmax_bound,
     .torch = "lambda x, axis=-1: torch.softmax(x, dim=axis)"},
    {.op = KF_OP_LOG_SOFTMAX, .name = "log_softmax", .cls = KF_CLASS_COMPOSITE,
     .kind = KF_KIND_SOFTMAX, .min_in = 1, .max_in = 1, .flops = 5,
     .doc = "x - max - log(sum(exp(x - max))) along one axis", .attrs = {AXIS_LAST}, .log_out = 1,
     .f64_row = row_log_softmax, .f64_row_bound = row_log_softmax_bound,
     .aten = {"aten.log_softmax", "aten._log_softmax"},
     .torch = "lambda x, axis=-1: torch.log_softmax(x, dim=axis)"},
    {.op = KF_OP_LAYER_NORM, .name = "layer_norm", .cls = KF_CLASS_COMPOSITE, .kind = KF_KIND_NORM,
     .min_in = 1, .max_in = 3, .flops = 8, .centered = 1, .f64_row = row_layer_norm, .f64_row_bound = row_layer_norm_bound,
     .doc = "(x - mean) / sqrt(var + eps) over trailing axes (biased variance), then * weight + bias",
     .attrs = {NORM_AXES, {"eps", KF_ATTR_FLOAT, offsetof(kf_attrs, eps), "1e-5", NULL, NULL}},
     .aten = {"aten.layer_norm", "aten.native_layer_norm"},
     .torch = "lambda x, w=None, b=None, axes=-1, eps=1e-5: F.layer_norm(x, _norm_shape(x, axes), w, b, eps)"},
    {.op = KF_OP_RMS_NORM, .name = "rms_norm", .cls = KF_CLASS_COMPOSITE, .kind = KF_KIND_NORM,
     .min_in = 1, .max_in = 2, .flops = 6, .doc = "x / sqrt(mean(x^2) + eps) over trailing axes, then * weight",
     .f64_row = row_rms_norm, .f64_row_bound = row_rms_norm_bound,
     .attrs = {NORM_AXES, {"eps", KF_ATTR_FLOAT, offsetof(kf_attrs, eps), "1e-6", NULL, NULL}},
     .aten = {"aten.rms_norm"},
     .torch = "lambda x, w=None, axes=-1, eps=1e-6: F.rms_norm(x, _norm_shape(x, axes), w, eps)"},
    {.op = KF_OP_LOGSUMEXP, .name = "logsumexp", .cls = KF_CLASS_COMPOSITE, .kind = KF_KIND_REDUCE,
     .min_in = 1, .max_in = 1, .flops = 4, .doc = "log(sum(exp(x))) over axes, computed stably",
     .combiner = KF_COMB_LOGSUMEXP,
     .attrs = {AXES_ALL, KEEPDIM}, .aten = {"aten.logsumexp"},
     .torch = "lambda x, axes=None, keepdim=False: torch.logsumexp(x, dim=_dims(x, axes), keepdim=keepdim)",
     .f64_rows = rows_logsumexp, .f64_rows_bound = rows_logsumexp_bound,
     .lower = "log(sum(exp(_0 - max(_0, axes=${axes}, keepdim=true)), axes=${axes}, keepdim=${keepdim}))"
              " + max(_0, axes=${axes}, keepdim=${keepdim})"},
    {.op = KF_OP_MATMUL, .name = "matmul", .cls = KF_CLASS_CONTRACT, .kind = KF_KIND_MATMUL,
     .min_in = 2, .max_in = 2, .flops = 2,
     .doc = "batched matrix product, batch dims broadcast; transpose_a/b: sugar for a transpose view of "
            "the operand",
     .attrs = {{"transpose_a", KF_ATTR_OPERAND_VIEW, 0, "false", NULL, "transpose"},
               {"transpose_b", KF_ATTR_OPERAND_VIEW, 1, "false", NULL, "transpose"}},
     .aten = {"aten.mm", "aten.bmm", "aten.matmul", "aten.linear", "aten.addmm"},
     .torch = "lambda a, b, transpose_a=False, transpose_b=False: torch.matmul("
              "a.transpose(-1, -2) if transpose_a else a, b.transpose(-1, -2) if transpose_b else b)"},
};
const int kf_ops_composite_count = sizeof kf_ops_composite / sizeof kf_ops_composite[0];
