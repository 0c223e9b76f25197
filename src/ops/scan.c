/*
 * The SCAN records: a prefix combiner along one axis. y[k] combines x[0..k] (inclusive)
 * or x[0..k-1] (exclusive, y[0] the identity); with reverse, the prefixes run from the
 * end of the axis (torch: x.flip(d).cumsum(d).flip(d)). The float64 reference is the row
 * function below, a plain sequential fold in double; the templates read the combiner.
 */
#include "ops_int.h"

#include <stddef.h>

#define AXIS {"axis", KF_ATTR_AXIS, offsetof(kf_attrs, axes), "-1", "1", NULL}
#define REVERSE {"reverse", KF_ATTR_BOOL, offsetof(kf_attrs, reverse), "false", NULL, NULL}
#define EXCLUSIVE {"exclusive", KF_ATTR_BOOL, offsetof(kf_attrs, exclusive), "false", NULL, NULL}
#define SCAN .cls = KF_CLASS_SCAN, .kind = KF_KIND_SCAN, .min_in = 1, .max_in = 1, .flops = 1, \
             .attrs = {AXIS, REVERSE, EXCLUSIVE}

/* one row: the fold of comb over x in the row's direction, before or after each element */
static void row_scan(const double *x, double *y, int64_t n, int prod, const kf_attrs *A) {
    double acc = prod ? 1.0 : 0.0;
    for (int64_t k = 0; k < n; k++) {
        int64_t i = A->reverse ? n - 1 - k : k;
        if (A->exclusive) y[i] = acc;
        acc = prod ? acc * x[i] : acc + x[i];
        if (!A->exclusive) y[i] = acc;
    }
}

static void row_cumsum(const double *x, double *y, int64_t n, const double *w, const double *b,
                       const kf_attrs *A) {
    (void)w, (void)b;
    row_scan(x, y, n, 0, A);
}

static void row_cumprod(const double *x, double *y, int64_t n, const double *w, const double *b,
                        const kf_attrs *A) {
    (void)w, (void)b;
    row_scan(x, y, n, 1, A);
}

const kf_op_def kf_ops_scan[] = {
    {.op = KF_OP_CUMSUM, .name = "cumsum", SCAN, .combiner = KF_COMB_SUM, .f64_row = row_cumsum,
     .doc = "running sum along one axis (reverse: from its end; exclusive: without the element)",
     .aten = {"aten.cumsum"},
     .torch = "lambda x, axis=-1, reverse=False, exclusive=False: _scan(torch.cumsum, x, axis, reverse, exclusive)"},
    {.op = KF_OP_CUMPROD, .name = "cumprod", SCAN, .combiner = KF_COMB_PROD, .f64_row = row_cumprod,
     .doc = "running product along one axis (reverse: from its end; exclusive: without the element)",
     .aten = {"aten.cumprod"},
     .torch = "lambda x, axis=-1, reverse=False, exclusive=False: _scan(torch.cumprod, x, axis, reverse, exclusive)"},
};
const int kf_ops_scan_count = sizeof kf_ops_scan / sizeof kf_ops_scan[0];
