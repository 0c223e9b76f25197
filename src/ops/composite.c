/*
 * The COMPOSITE records (softmax family over one axis, norms over trailing axes) and the
 * CONTRACT record (batched matmul). Their float64 references are the interpreter's class
 * code (src/ir/interp.c: ip_softmax, ip_norm, ip_matmul), written from PyTorch's
 * definitions and independent of every kernel; their kernels are the fast-path templates
 * (row softmax, norms, the SIMT, tensor-core and CPU GEMMs), chosen by the stage the op's
 * shape rule gives. None of them has a lowering onto the other classes yet (see
 * docs/design-notes.md, "Operators as data").
 */
#include "ops_int.h"

#include <math.h>
#include <stddef.h>

#define AXIS_LAST {"axis", KF_ATTR_AXIS, offsetof(kf_attrs, axes), "-1", "1"}
#define NORM_AXES {"axes", KF_ATTR_AXES, offsetof(kf_attrs, axes), "-1", NULL}

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

#define AXES_ALL {"axes", KF_ATTR_AXES, offsetof(kf_attrs, axes), "all", "1"}
#define KEEPDIM {"keepdim", KF_ATTR_BOOL, offsetof(kf_attrs, keepdim), "false", "2"}

const kf_op_def kf_ops_composite[] = {
    {.op = KF_OP_SOFTMAX, .name = "softmax", .cls = KF_CLASS_COMPOSITE, .kind = KF_KIND_SOFTMAX,
     .min_in = 1, .max_in = 1, .flops = 5, .doc = "exp(x - max) / sum(exp(x - max)) along one axis",
     .attrs = {AXIS_LAST}, .aten = {"aten.softmax", "aten._softmax"},
     .torch = "lambda x, axis=-1: torch.softmax(x, dim=axis)"},
    {.op = KF_OP_LOG_SOFTMAX, .name = "log_softmax", .cls = KF_CLASS_COMPOSITE,
     .kind = KF_KIND_SOFTMAX, .min_in = 1, .max_in = 1, .flops = 5,
     .doc = "x - max - log(sum(exp(x - max))) along one axis", .attrs = {AXIS_LAST}, .log_out = 1,
     .aten = {"aten.log_softmax", "aten._log_softmax"},
     .torch = "lambda x, axis=-1: torch.log_softmax(x, dim=axis)"},
    {.op = KF_OP_LAYER_NORM, .name = "layer_norm", .cls = KF_CLASS_COMPOSITE, .kind = KF_KIND_NORM,
     .min_in = 1, .max_in = 3, .flops = 8, .centered = 1,
     .doc = "(x - mean) / sqrt(var + eps) over trailing axes (biased variance), then * weight + bias",
     .attrs = {NORM_AXES, {"eps", KF_ATTR_FLOAT, offsetof(kf_attrs, eps), "1e-5", NULL}},
     .aten = {"aten.layer_norm", "aten.native_layer_norm"},
     .torch = "lambda x, w=None, b=None, axes=-1, eps=1e-5: F.layer_norm(x, _norm_shape(x, axes), w, b, eps)"},
    {.op = KF_OP_RMS_NORM, .name = "rms_norm", .cls = KF_CLASS_COMPOSITE, .kind = KF_KIND_NORM,
     .min_in = 1, .max_in = 2, .flops = 6, .doc = "x / sqrt(mean(x^2) + eps) over trailing axes, then * weight",
     .attrs = {NORM_AXES, {"eps", KF_ATTR_FLOAT, offsetof(kf_attrs, eps), "1e-6", NULL}},
     .aten = {"aten.rms_norm"},
     .torch = "lambda x, w=None, axes=-1, eps=1e-6: F.rms_norm(x, _norm_shape(x, axes), w, eps)"},
    {.op = KF_OP_LOGSUMEXP, .name = "logsumexp", .cls = KF_CLASS_COMPOSITE, .kind = KF_KIND_REDUCE,
     .min_in = 1, .max_in = 1, .flops = 4, .doc = "log(sum(exp(x))) over axes, computed stably",
     .attrs = {AXES_ALL, KEEPDIM}, .aten = {"aten.logsumexp"},
     .torch = "lambda x, axes=None, keepdim=False: torch.logsumexp(x, dim=_dims(x, axes), keepdim=keepdim)",
     .f64_rows = rows_logsumexp,
     .lower = "log(sum(exp(_0 - max(_0, axes=${axes}, keepdim=true)), axes=${axes}, keepdim=${keepdim}))"
              " + max(_0, axes=${axes}, keepdim=${keepdim})"},
    {.op = KF_OP_MATMUL, .name = "matmul", .cls = KF_CLASS_CONTRACT, .kind = KF_KIND_MATMUL,
     .min_in = 2, .max_in = 2, .flops = 2,
     .doc = "batched matrix product, batch dims broadcast; transpose_a/b read an operand transposed",
     .attrs = {{"transpose_a", KF_ATTR_BOOL, offsetof(kf_attrs, ta), "false", NULL},
               {"transpose_b", KF_ATTR_BOOL, offsetof(kf_attrs, tb), "false", NULL}},
     .aten = {"aten.mm", "aten.bmm", "aten.matmul", "aten.linear", "aten.addmm"},
     .torch = "lambda a, b, transpose_a=False, transpose_b=False: torch.matmul("
              "a.transpose(-1, -2) if transpose_a else a, b.transpose(-1, -2) if transpose_b else b)"},
};
const int kf_ops_composite_count = sizeof kf_ops_composite / sizeof kf_ops_composite[0];
