/*
 * The GATHER record: take-along-axis (torch.gather). gather(x, index, axis=A) has the
 * index's shape; element i reads x at i with dim A replaced by index[i]. The index is i64
 * and has x's rank; on every other dim it is at most as large as x (torch's rule: it reads
 * a corner of x there). Its float64 reference is below; the shape rule and the type checks
 * are the IR's (src/ir/graph.c, rule_gather); the planner makes it a load of an elementwise
 * stage whose offset along A comes from the index's value (src/synth/tpl_ewise.c,
 * gpu_ewise.c), so it fuses with its neighbours and never materialises anything of x's size.
 *
 * An index outside [0, size of dim A) reads the `fill` attribute, NaN by default, in the
 * reference and in every kernel alike: never memory outside x (PyTorch raises instead).
 * The importer uses fill=0 where a loss drops a target (nll_loss's ignore_index).
 */
#include "ops_int.h"

#include <math.h>
#include <stddef.h>

static void gather_f64(const kf_op_dims *s, const kf_attrs *A, const double *const *in, double *out) {
    int r = s->rank[0], ax = A->axes ? __builtin_ctz(A->axes) : 0;
    const int64_t *xd = s->d[0], *id = s->d[1];
    int64_t xs[KF_MAX_DIMS], run = 1, n = 1;
    for (int d = r - 1; d >= 0; d--) {
        xs[d] = run;
        run *= xd[d];
        n *= id[d];
    }
    int64_t at[KF_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; e++) {
        double t = in[1][e];
        if (t >= 0 && t < (double)xd[ax] && t == floor(t)) {
            int64_t off = (int64_t)t * xs[ax];
            for (int d = 0; d < r; d++)
                if (d != ax) off += at[d] * xs[d];
            out[e] = in[0][off];
        } else {
            out[e] = A->alpha;
        }
        for (int d = r - 1; d >= 0; d--) { /* the next index, row-major */
            if (++at[d] < id[d]) break;
            at[d] = 0;
        }
    }
}

const kf_op_def kf_ops_gather[] = {
    {.op = KF_OP_GATHER, .name = "gather", .cls = KF_CLASS_GATHER, .kind = KF_KIND_GATHER, .min_in = 2, .max_in = 2,
     .attrs = {{"axis", KF_ATTR_AXIS, offsetof(kf_attrs, axes), "-1", "1", NULL},
               {"fill", KF_ATTR_FLOAT, offsetof(kf_attrs, alpha), "nan", NULL, NULL}},
     .flops = 0,
     .doc = "take along an axis: y[i] = x[i with dim axis replaced by index[i]] (torch.gather); "
            "an index outside [0, size) gives fill (NaN), never a read",
     .aten = {"aten.gather"},
     .torch = "lambda x, index, axis=-1, fill=float('nan'): torch.where((index >= 0) & (index < x.shape[axis]), "
              "torch.gather(x, axis, index.clamp(0, x.shape[axis] - 1)), torch.full((), fill, dtype=x.dtype, "
              "device=x.device))",
     .own_f64 = gather_f64,
     /* every other dim of the index smaller than x's, a broadcast dim, and indices past both
      * ends of the axis (NaN in the reference and the kernel) */
     .example = "input x: f32[3, 7, 5]\ninput i: i64[3, 9, 1] range(-2, 8)\ninput j: i64[2, 4, 5] range(0, 4)\n"
                "input w: f32[9, 1]\n"
                "output y = gather(x, i, axis=1) * 2 + w\noutput z = gather(x, j, axis=-1)\n"
                "output s = sum(gather(x, j, axis=2), axes=[2])\n"},
};
const int kf_ops_gather_count = sizeof kf_ops_gather / sizeof kf_ops_gather[0];
