/*
 * Tests of the float64 reference interpreter (src/ir/interp.c).
 *
 * Design note: every expected value here is computed independently of the interpreter:
 * by hand, with Python's math module (constants pasted with full precision), or with a
 * naive loop in the test itself. Graphs are built with the hand-built graph API so that
 * the tests do not depend on the .kf parser. Large cases exercise the interpreter's
 * parallel and chunked paths (row chunks, lane blocks, split reductions).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/ir.h"

/* ---- helpers ---- */

static kf_shape S(int rank, ...) {
    kf_shape s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++) s.d[i] = va_arg(ap, int);
    va_end(ap);
    return s;
}

static int input(kf_graph *g, const char *name, kf_shape s) {
    kf_error e = {0};
    int v = kf_graph_add_input(g, name, KF_F32, &s, &e);
    cr_assert(v >= 0, "add_input %s: %s", name, e.msg);
    return v;
}

static int node(kf_graph *g, kf_op op, const int *ins, int nin, const kf_attrs *at) {
    kf_error e = {0};
    int v = kf_graph_add_node(g, op, ins, nin, at, NULL, 0, 0, &e);
    cr_assert(v >= 0, "add_node %s: %s", kf_op_get(op)->name, e.msg);
    return v;
}

static int op1(kf_graph *g, kf_op op, int x, const kf_attrs *at) { return node(g, op, &x, 1, at); }

static int op2(kf_graph *g, kf_op op, int a, int b) {
    int ins[2] = {a, b};
    return node(g, op, ins, 2, NULL);
}

static void output(kf_graph *g, int v) {
    kf_error e = {0};
    cr_assert_eq(kf_graph_mark_output(g, v, &e), KF_OK, "mark_output: %s", e.msg);
}

static void run(const kf_graph *g, const double *const *ins, double *const *outs) {
    kf_error e = {0};
    kf_status st = kf_interp_run(g, ins, outs, &e);
    cr_assert_eq(st, KF_OK, "kf_interp_run: %s", e.msg);
}

/* Run a graph with one input and one output. */
static void run11(const kf_graph *g, const double *x, double *y) {
    const double *ins[1] = {x};
    double *outs[1] = {y};
    run(g, ins, outs);
}

static void near(const char *what, const double *got, const double *want, int64_t n,
                 double tol) {
    for (int64_t i = 0; i < n; i++) {
        if (isnan(want[i])) {
            cr_assert(isnan(got[i]), "%s[%lld]: got %.17g, want NaN", what, (long long)i, got[i]);
            continue;
        }
        cr_assert(fabs(got[i] - want[i]) <= tol * (1.0 + fabs(want[i])),
                  "%s[%lld]: got %.17g, want %.17g", what, (long long)i, got[i], want[i]);
    }
}

static int64_t numel_of(const kf_graph *g, int v) { return kf_shape_numel(&g->values[v].shape); }

/* ---- unary ---- */

#define NX 7
static const double xs[NX] = {-3.0, -1.0, -0.25, 0.0, 0.5, 2.0, 25.0};
static const double ps[NX] = {0.25, 1.0, 4.0, 9.0, 2.0, 0.5, 100.0};

static const struct {
    kf_op op;
    double want[NX];
} unary_cases[] = {
    /* from Python's math module, with the ops' default attributes */
    {KF_OP_RELU, {0.0, 0.0, 0.0, 0.0, 0.5, 2.0, 25.0}},
    {KF_OP_LEAKY_RELU, {-0.03, -0.01, -0.0025, 0.0, 0.5, 2.0, 25.0}},
    {KF_OP_SIGMOID, {0.04742587317756678, 0.2689414213699951, 0.43782349911420193, 0.5,
                     0.6224593312018546, 0.8807970779778823, 0.999999999986112}},
    {KF_OP_TANH, {-0.9950547536867305, -0.7615941559557649, -0.24491866240370913, 0.0,
                  0.46211715726000974, 0.9640275800758169, 1.0}},
    {KF_OP_GELU, {-0.00404969409489031, -0.15865525393145707, -0.10032341857926907, 0.0,
                  0.34573123063700656, 1.9544997361036416, 25.0}},
    {KF_OP_GELU_TANH, {-0.0036373920817729943, -0.15880800939172324, -0.100324649298315, 0.0,
                       0.34571400982514394, 1.954597694087775, 25.0}},
    {KF_OP_SILU, {-0.14227761953270035, -0.2689414213699951, -0.10945587477855048, 0.0,
                  0.3112296656009273, 1.7615941559557646, 24.9999999996528}},
    {KF_OP_SWISH, {-0.14227761953270035, -0.2689414213699951, -0.10945587477855048, 0.0,
                   0.3112296656009273, 1.7615941559557646, 24.9999999996528}},
    {KF_OP_SELU, {-1.6705687287671118, -1.1113307378125625, -0.3888901974781189, 0.0,
                  0.5253504936777402, 2.101401974710961, 26.26752468388701}},
    {KF_OP_ELU, {-0.950212931632136, -0.6321205588285577, -0.22119921692859512, 0.0, 0.5, 2.0,
                 25.0}},
    {KF_OP_HARDSIGMOID, {0.0, 0.33333333333333337, 0.4583333333333333, 0.5, 0.5833333333333334,
                         0.8333333333333333, 1.0}},
    {KF_OP_HARDTANH, {-1.0, -1.0, -0.25, 0.0, 0.5, 1.0, 1.0}},
    {KF_OP_SOFTPLUS, {0.04858735157374206, 0.31326168751822286, 0.5759394198788436,
                      0.6931471805599453, 0.9740769841801067, 2.1269280110429727, 25.0}},
    {KF_OP_SOFTSIGN, {-0.75, -0.5, -0.2, 0.0, 0.3333333333333333, 0.6666666666666666,
                      0.9615384615384616}},
    {KF_OP_EXP, {0.049787068367863944, 0.36787944117144233, 0.7788007830714049, 1.0,
                 1.6487212707001282, 7.38905609893065, 72004899337.38588}},
    {KF_OP_ABS, {3.0, 1.0, 0.25, 0.0, 0.5, 2.0, 25.0}},
    {KF_OP_NEG, {3.0, 1.0, 0.25, -0.0, -0.5, -2.0, -25.0}},
    {KF_OP_SQUARE, {9.0, 1.0, 0.0625, 0.0, 0.25, 4.0, 625.0}},
};

/* positive-domain ops, on ps */
static const struct {
    kf_op op;
    double want[NX];
} pos_cases[] = {
    {KF_OP_LOG, {-1.3862943611198906, 0.0, 1.3862943611198906, 2.1972245773362196,
                 0.6931471805599453, -0.6931471805599453, 4.605170185988092}},
    {KF_OP_SQRT, {0.5, 1.0, 2.0, 3.0, 1.4142135623730951, 0.7071067811865476, 10.0}},
    {KF_OP_RSQRT, {2.0, 1.0, 0.5, 0.3333333333333333, 0.7071067811865475, 1.414213562373095,
                   0.1}},
};

static void check_unary(kf_op op, const double *x, const double *want) {
    kf_graph *g = kf_graph_new("unary");
    int v = input(g, "x", S(1, NX));
    output(g, op1(g, op, v, NULL));
    double y[NX];
    run11(g, x, y);
    near(kf_op_get(op)->name, y, want, NX, 1e-14);
    /* the scalar entry point agrees with the interpreter */
    kf_attrs at = kf_attrs_default(op, 1);
    double ys[NX];
    for (int i = 0; i < NX; i++) ys[i] = kf_op_eval(op, &at, x[i], 0.0);
    near("kf_op_eval", ys, y, NX, 1e-15);
    kf_graph_free(g);
}

Test(interp, unary_ops_defaults) {
    for (size_t k = 0; k < sizeof unary_cases / sizeof unary_cases[0]; k++)
        check_unary(unary_cases[k].op, xs, unary_cases[k].want);
    for (size_t k = 0; k < sizeof pos_cases / sizeof pos_cases[0]; k++)
        check_unary(pos_cases[k].op, ps, pos_cases[k].want);
}

Test(interp, unary_attributes) {
    kf_attrs at = kf_attrs_default(KF_OP_LEAKY_RELU, 1);
    at.alpha = 0.1;
    cr_assert_float_eq(kf_op_eval(KF_OP_LEAKY_RELU, &at, -2.0, 0), -0.2, 1e-15);
    at = kf_attrs_default(KF_OP_ELU, 1);
    at.alpha = 0.5;
    cr_assert_float_eq(kf_op_eval(KF_OP_ELU, &at, -1.0, 0), -0.31606027941427883, 1e-15);
    at = kf_attrs_default(KF_OP_HARDTANH, 1);
    at.alpha = -0.5;
    at.beta = 2.0;
    cr_assert_eq(kf_op_eval(KF_OP_HARDTANH, &at, -3.0, 0), -0.5);
    cr_assert_eq(kf_op_eval(KF_OP_HARDTANH, &at, 3.0, 0), 2.0);
    cr_assert_eq(kf_op_eval(KF_OP_HARDTANH, &at, 1.5, 0), 1.5);
    /* softplus: beta in the alpha slot, threshold in the beta slot */
    at = kf_attrs_default(KF_OP_SOFTPLUS, 1);
    at.alpha = 2.0;
    cr_assert_float_eq(kf_op_eval(KF_OP_SOFTPLUS, &at, 0.5, 0), 0.6566308437591114, 1e-15);
    cr_assert_eq(kf_op_eval(KF_OP_SOFTPLUS, &at, 10.5, 0), 10.5); /* 21 > 20 */
    at.beta = 5.0;
    cr_assert_eq(kf_op_eval(KF_OP_SOFTPLUS, &at, 3.0, 0), 3.0);
    /* attributes travel through a graph node */
    kf_graph *g = kf_graph_new("attrs");
    int x = input(g, "x", S(1, 3));
    at = kf_attrs_default(KF_OP_HARDTANH, 1);
    at.alpha = -0.5;
    at.beta = 2.0;
    output(g, op1(g, KF_OP_HARDTANH, x, &at));
    double in[3] = {-3, 1, 5}, out[3], want[3] = {-0.5, 1, 2};
    run11(g, in, out);
    near("hardtanh", out, want, 3, 0);
    kf_graph_free(g);
}

Test(interp, unary_extremes_and_nan) {
    kf_attrs at = kf_attrs_default(KF_OP_SIGMOID, 0);
    cr_assert_eq(kf_op_eval(KF_OP_SIGMOID, &at, -800.0, 0), 0.0);
    cr_assert_eq(kf_op_eval(KF_OP_SIGMOID, &at, 800.0, 0), 1.0);
    cr_assert(fabs(kf_op_eval(KF_OP_SILU, &at, -800.0, 0)) < 1e-300);
    cr_assert_eq(kf_op_eval(KF_OP_GELU, &at, -40.0, 0), -0.0);
    cr_assert(isfinite(kf_op_eval(KF_OP_SOFTPLUS, NULL, 1000.0, 0)));
    /* NaN goes through like torch: relu, clamps, activations */
    kf_op nan_ops[] = {KF_OP_RELU, KF_OP_HARDTANH, KF_OP_HARDSIGMOID, KF_OP_SIGMOID,
                       KF_OP_LEAKY_RELU, KF_OP_ELU, KF_OP_SELU, KF_OP_GELU, KF_OP_TANH};
    for (size_t k = 0; k < sizeof nan_ops / sizeof nan_ops[0]; k++)
        cr_assert(isnan(kf_op_eval(nan_ops[k], NULL, NAN, 0)), "%s(NaN)",
                  kf_op_get(nan_ops[k])->name);
}

Test(interp, unary_large_parallel) {
    const int n = 1 << 20;
    kf_graph *g = kf_graph_new("big");
    int x = input(g, "x", S(2, 1024, 1024));
    output(g, op1(g, KF_OP_SQUARE, x, NULL));
    double *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
    for (int i = 0; i < n; i++) in[i] = i * 0.5;
    run11(g, in, out);
    for (int i = 0; i < n; i++) cr_assert_eq(out[i], in[i] * in[i], "at %d", i);
    free(in);
    free(out);
    kf_graph_free(g);
}

/* ---- binary ---- */

Test(interp, binary_broadcast_column_row) {
    kf_graph *g = kf_graph_new("bc");
    int a = input(g, "a", S(2, 3, 1)), b = input(g, "b", S(2, 1, 4));
    int y = op2(g, KF_OP_ADD, a, b);
    output(g, y);
    cr_assert_eq(g->values[y].shape.rank, 2);
    double av[3] = {1, 2, 3}, bv[4] = {10, 20, 30, 40}, out[12];
    const double *ins[2] = {av, bv};
    double *outs[1] = {out};
    run(g, ins, outs);
    double want[12] = {11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43};
    near("[3,1]+[1,4]", out, want, 12, 0);
    kf_graph_free(g);
}

Test(interp, binary_rank_mismatch_broadcast) {
    kf_graph *g = kf_graph_new("bc2");
    int a = input(g, "a", S(3, 2, 3, 4)), b = input(g, "b", S(1, 4)), c = input(g, "c", S(2, 3, 1));
    int y = op2(g, KF_OP_MUL, a, b);
    int z = op2(g, KF_OP_SUB, y, c);
    output(g, z);
    double av[24], bv[4] = {1, 2, 3, 4}, cv[3] = {100, 200, 300}, out[24], want[24];
    for (int i = 0; i < 24; i++) av[i] = i;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++)
                want[(i * 3 + j) * 4 + k] = av[(i * 3 + j) * 4 + k] * bv[k] - cv[j];
    const double *ins[3] = {av, bv, cv};
    double *outs[1] = {out};
    run(g, ins, outs);
    near("a*b-c", out, want, 24, 0);
    kf_graph_free(g);
}

Test(interp, binary_constants_either_side) {
    kf_graph *g = kf_graph_new("consts");
    int x = input(g, "x", S(1, 4));
    int two = kf_graph_add_const(g, 2.0), four = kf_graph_add_const(g, 4.0);
    output(g, op2(g, KF_OP_SUB, x, two));
    output(g, op2(g, KF_OP_SUB, two, x));
    output(g, op2(g, KF_OP_DIV, x, four));
    output(g, op2(g, KF_OP_DIV, four, x));
    output(g, op2(g, KF_OP_POW, x, two));
    double in[4] = {1, 2, 4, 8}, o[5][4];
    const double *ins[1] = {in};
    double *outs[5] = {o[0], o[1], o[2], o[3], o[4]};
    run(g, ins, outs);
    double w0[4] = {-1, 0, 2, 6}, w1[4] = {1, 0, -2, -6}, w2[4] = {0.25, 0.5, 1, 2},
           w3[4] = {4, 2, 1, 0.5}, w4[4] = {1, 4, 16, 64};
    near("x-2", o[0], w0, 4, 0);
    near("2-x", o[1], w1, 4, 0);
    near("x/4", o[2], w2, 4, 0);
    near("4/x", o[3], w3, 4, 0);
    near("x^2", o[4], w4, 4, 0);
    kf_graph_free(g);
}

Test(interp, binary_max_min_pow_nan) {
    kf_graph *g = kf_graph_new("mm");
    int a = input(g, "a", S(1, 4)), b = input(g, "b", S(1, 4));
    output(g, op2(g, KF_OP_MAXIMUM, a, b));
    output(g, op2(g, KF_OP_MINIMUM, a, b));
    output(g, op2(g, KF_OP_POW, a, b));
    double av[4] = {1, NAN, 3, 2}, bv[4] = {2, 0, NAN, 0.5}, o[3][4];
    const double *ins[2] = {av, bv};
    double *outs[3] = {o[0], o[1], o[2]};
    run(g, ins, outs);
    double wmax[4] = {2, NAN, NAN, 2}, wmin[4] = {1, NAN, NAN, 0.5};
    double wpow[4] = {1, 1, NAN, 1.4142135623730951}; /* pow(NaN, 0) = 1, as in torch */
    near("maximum", o[0], wmax, 4, 0);
    near("minimum", o[1], wmin, 4, 0);
    near("pow", o[2], wpow, 4, 1e-15);
    cr_assert_eq(kf_op_eval(KF_OP_POW, NULL, 2.0, 10.0), 1024.0);
    cr_assert_eq(kf_op_eval(KF_OP_ADD, NULL, 2.0, 10.0), 12.0);
    cr_assert_eq(kf_op_eval(KF_OP_DIV, NULL, 1.0, 4.0), 0.25);
    kf_graph_free(g);
}

Test(interp, binary_large_row_broadcast) {
    /* inner dim shorter than a chunk, many rows: row offsets per unit */
    kf_graph *g = kf_graph_new("bigbc");
    int a = input(g, "a", S(2, 3000, 100)), b = input(g, "b", S(1, 100));
    int c = input(g, "c", S(2, 3000, 1));
    output(g, op2(g, KF_OP_ADD, op2(g, KF_OP_MUL, a, b), c));
    int n = 300000;
    double *av = malloc(n * sizeof *av), bv[100], cv[3000], *out = malloc(n * sizeof *out);
    for (int i = 0; i < n; i++) av[i] = i % 17;
    for (int j = 0; j < 100; j++) bv[j] = j;
    for (int r = 0; r < 3000; r++) cv[r] = -r;
    const double *ins[3] = {av, bv, cv};
    double *outs[1] = {out};
    run(g, ins, outs);
    for (int r = 0; r < 3000; r++)
        for (int j = 0; j < 100; j++)
            cr_assert_eq(out[r * 100 + j], av[r * 100 + j] * j - r, "at %d,%d", r, j);
    free(av);
    free(out);
    kf_graph_free(g);
}

/* ---- reductions ---- */

static kf_attrs red_attrs(kf_op op, int rank, uint32_t axes, int keepdim) {
    kf_attrs at = kf_attrs_default(op, rank);
    at.axes = axes;
    at.keepdim = keepdim;
    return at;
}

Test(interp, reduce_axes_0_2_of_2x3x4) {
    double x[24];
    for (int i = 0; i < 24; i++) x[i] = i + 1; /* x[i,j,k] = 12i + 4j + k + 1 */
    struct {
        kf_op op;
        double want[3];
    } cases[] = {
        {KF_OP_SUM, {68, 100, 132}},
        {KF_OP_MEAN, {8.5, 12.5, 16.5}},
        {KF_OP_MAX, {16, 20, 24}},
        {KF_OP_MIN, {1, 5, 9}},
        {KF_OP_PROD, {1048320, 195350400, 3029685120.0}},
    };
    for (int keep = 0; keep < 2; keep++)
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            kf_graph *g = kf_graph_new("red");
            int v = input(g, "x", S(3, 2, 3, 4));
            kf_attrs at = red_attrs(cases[k].op, 3, 0x5, keep);
            int y = op1(g, cases[k].op, v, &at);
            output(g, y);
            if (keep) {
                cr_assert_eq(g->values[y].shape.rank, 3);
                cr_assert_eq(g->values[y].shape.d[0], 1);
                cr_assert_eq(g->values[y].shape.d[2], 1);
            }
            double out[3];
            run11(g, x, out);
            near(kf_op_get(cases[k].op)->name, out, cases[k].want, 3, 0);
            kf_graph_free(g);
        }
}

Test(interp, reduce_middle_and_all_axes) {
    double x[24];
    for (int i = 0; i < 24; i++) x[i] = i;
    kf_graph *g = kf_graph_new("red2");
    int v = input(g, "x", S(3, 2, 3, 4));
    kf_attrs mid = red_attrs(KF_OP_SUM, 3, 0x2, 0);
    kf_attrs all = kf_attrs_default(KF_OP_SUM, 3);
    kf_attrs mx = red_attrs(KF_OP_MAX, 3, 0x3, 1);
    output(g, op1(g, KF_OP_SUM, v, &mid)); /* [2, 4] */
    output(g, op1(g, KF_OP_SUM, v, &all)); /* scalar */
    output(g, op1(g, KF_OP_MAX, v, &mx));  /* [1, 1, 4] */
    double o0[8], o1[1], o2[4];
    const double *ins[1] = {x};
    double *outs[3] = {o0, o1, o2};
    run(g, ins, outs);
    double w0[8] = {12, 15, 18, 21, 48, 51, 54, 57}, w1[1] = {276}, w2[4] = {20, 21, 22, 23};
    near("sum axis 1", o0, w0, 8, 0);
    near("sum all", o1, w1, 1, 0);
    near("max axes 0,1", o2, w2, 4, 0);
    kf_graph_free(g);
}

Test(interp, argmax_ties_keepdim) {
    double x[8] = {1, 3, 3, 2, 5, 5, 0, 5};
    for (int keep = 0; keep < 2; keep++) {
        kf_graph *g = kf_graph_new("arg");
        int v = input(g, "x", S(2, 2, 4));
        kf_attrs a1 = red_attrs(KF_OP_ARGMAX, 2, 0x2, keep);
        kf_attrs a0 = red_attrs(KF_OP_ARGMAX, 2, 0x1, keep);
        kf_attrs n1 = red_attrs(KF_OP_ARGMIN, 2, 0x2, keep);
        int y = op1(g, KF_OP_ARGMAX, v, &a1);
        output(g, y);
        output(g, op1(g, KF_OP_ARGMAX, v, &a0));
        output(g, op1(g, KF_OP_ARGMIN, v, &n1));
        cr_assert_eq(g->values[y].dtype, KF_I64);
        cr_assert_eq(g->values[y].shape.rank, keep ? 2 : 1);
        double o0[2], o1[4], o2[2];
        const double *ins[1] = {x};
        double *outs[3] = {o0, o1, o2};
        run(g, ins, outs);
        double w0[2] = {1, 0}, w1[4] = {1, 1, 0, 1}, w2[2] = {0, 2};
        near("argmax axis 1", o0, w0, 2, 0);
        near("argmax axis 0", o1, w1, 4, 0);
        near("argmin axis 1", o2, w2, 2, 0);
        kf_graph_free(g);
    }
}

Test(interp, reduce_nan) {
    double x[4] = {1, NAN, 5, NAN};
    kf_graph *g = kf_graph_new("nan");
    int v = input(g, "x", S(1, 4));
    output(g, op1(g, KF_OP_ARGMAX, v, NULL));
    output(g, op1(g, KF_OP_ARGMIN, v, NULL));
    output(g, op1(g, KF_OP_MAX, v, NULL));
    output(g, op1(g, KF_OP_MIN, v, NULL));
    double o[4];
    const double *ins[1] = {x};
    double *outs[4] = {&o[0], &o[1], &o[2], &o[3]};
    run(g, ins, outs);
    cr_assert_eq(o[0], 1.0);
    cr_assert_eq(o[1], 1.0);
    cr_assert(isnan(o[2]) && isnan(o[3]));
    kf_graph_free(g);
}

Test(interp, reduce_large_split_rows) {
    /* one long row: the reduced extent is split into ordered chunks */
    const int n = 1 << 20;
    double *x = malloc(n * sizeof *x);
    for (int i = 0; i < n; i++) x[i] = i;
    kf_graph *g = kf_graph_new("bigsum");
    int v = input(g, "x", S(1, n));
    output(g, op1(g, KF_OP_SUM, v, NULL));
    output(g, op1(g, KF_OP_MEAN, v, NULL));
    output(g, op1(g, KF_OP_ARGMAX, v, NULL));
    output(g, op1(g, KF_OP_MAX, v, NULL));
    double o[4];
    const double *ins[1] = {x};
    double *outs[4] = {&o[0], &o[1], &o[2], &o[3]};
    run(g, ins, outs);
    cr_assert_eq(o[0], (double)n * (n - 1) / 2);
    cr_assert_eq(o[1], (double)(n - 1) / 2);
    cr_assert_eq(o[2], (double)(n - 1));
    cr_assert_eq(o[3], (double)(n - 1));
    /* ties across chunks: the first occurrence wins; then the first NaN wins */
    for (int i = 0; i < n; i++) x[i] = 0;
    x[300000] = x[900000] = 7;
    run(g, ins, outs);
    cr_assert_eq(o[2], 300000.0);
    x[800000] = NAN;
    x[500000] = NAN;
    run(g, ins, outs);
    cr_assert_eq(o[2], 500000.0);
    cr_assert(isnan(o[3]) && isnan(o[0]));
    free(x);
    kf_graph_free(g);
}

Test(interp, reduce_large_columns) {
    /* reduce the leading axis of [3000, 300]: lane blocks, split over rows */
    const int R = 3000, C = 300;
    double *x = malloc((size_t)R * C * sizeof *x);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) x[r * C + c] = r + c;
    x[2500 * C + 7] = 1e6;
    x[100 * C + 9] = 1e6;
    x[2000 * C + 9] = 1e6;
    kf_graph *g = kf_graph_new("cols");
    int v = input(g, "x", S(2, R, C));
    kf_attrs s0 = red_attrs(KF_OP_SUM, 2, 0x1, 0), a0 = red_attrs(KF_OP_ARGMAX, 2, 0x1, 0);
    kf_attrs m0 = red_attrs(KF_OP_MIN, 2, 0x1, 0);
    output(g, op1(g, KF_OP_SUM, v, &s0));
    output(g, op1(g, KF_OP_ARGMAX, v, &a0));
    output(g, op1(g, KF_OP_MIN, v, &m0));
    double o0[300], o1[300], o2[300];
    const double *ins[1] = {x};
    double *outs[3] = {o0, o1, o2};
    run(g, ins, outs);
    for (int c = 0; c < C; c++) {
        double want = (double)R * (R - 1) / 2 + (double)R * c;
        if (c == 7) want += 1e6 - (2500 + 7);
        if (c == 9) want += 2e6 - (100 + 9) - (2000 + 9);
        cr_assert_eq(o0[c], want, "sum col %d", c);
        cr_assert_eq(o1[c], c == 7 ? 2500.0 : c == 9 ? 100.0 : (double)(R - 1), "argmax col %d", c);
        cr_assert_eq(o2[c], (double)c, "min col %d", c);
    }
    free(x);
    kf_graph_free(g);
}

/* ---- softmax ---- */

Test(interp, softmax_and_log_softmax) {
    kf_graph *g = kf_graph_new("sm");
    int v = input(g, "x", S(1, 3));
    output(g, op1(g, KF_OP_SOFTMAX, v, NULL));
    output(g, op1(g, KF_OP_LOG_SOFTMAX, v, NULL));
    double o0[3], o1[3];
    const double ws[3] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
    const double wl[3] = {-2.40760596444438, -1.4076059644443801, -0.40760596444438013};
    double x[3] = {1, 2, 3}, big[3] = {1000, 1001, 1002};
    const double *ins[1] = {x};
    double *outs[2] = {o0, o1};
    run(g, ins, outs);
    near("softmax", o0, ws, 3, 1e-15);
    near("log_softmax", o1, wl, 3, 1e-15);
    ins[0] = big; /* stable: the max is subtracted */
    run(g, ins, outs);
    near("softmax big", o0, ws, 3, 1e-15);
    near("log_softmax big", o1, wl, 3, 1e-13);
    kf_graph_free(g);
}

Test(interp, softmax_leading_axis) {
    kf_graph *g = kf_graph_new("sm0");
    int v = input(g, "x", S(2, 3, 2));
    kf_attrs at = kf_attrs_default(KF_OP_SOFTMAX, 2);
    at.axes = 0x1;
    output(g, op1(g, KF_OP_SOFTMAX, v, &at));
    double x[6] = {1, 4, 2, 5, 3, 6}, o[6];
    run11(g, x, o);
    const double w[6] = {0.09003057317038046, 0.09003057317038046, 0.24472847105479767,
                         0.24472847105479767, 0.6652409557748219, 0.6652409557748219};
    near("softmax axis 0", o, w, 6, 1e-15);
    kf_graph_free(g);
}

Test(interp, softmax_large_rows) {
    const int rows = 512, cols = 1000;
    double *x = malloc((size_t)rows * cols * sizeof *x), *o = malloc((size_t)rows * cols * sizeof *o);
    for (int i = 0; i < rows * cols; i++) x[i] = sin(i * 0.37) * 5;
    kf_graph *g = kf_graph_new("smbig");
    int v = input(g, "x", S(2, rows, cols));
    output(g, op1(g, KF_OP_SOFTMAX, v, NULL));
    run11(g, x, o);
    for (int r = 0; r < rows; r++) {
        double s = 0, m = -INFINITY;
        for (int c = 0; c < cols; c++) m = fmax(m, x[r * cols + c]);
        for (int c = 0; c < cols; c++) s += exp(x[r * cols + c] - m);
        for (int c = 0; c < cols; c += 97) {
            double want = exp(x[r * cols + c] - m) / s;
            cr_assert(fabs(o[r * cols + c] - want) <= 1e-15, "row %d col %d", r, c);
        }
    }
    free(x);
    free(o);
    kf_graph_free(g);
}

/* ---- norms ---- */

Test(interp, layer_norm_weight_bias) {
    kf_graph *g = kf_graph_new("ln");
    int x = input(g, "x", S(2, 2, 3)), w = input(g, "w", S(1, 3)), b = input(g, "b", S(1, 3));
    int ins3[3] = {x, w, b};
    output(g, node(g, KF_OP_LAYER_NORM, ins3, 3, NULL));
    output(g, node(g, KF_OP_LAYER_NORM, ins3, 2, NULL)); /* weight only */
    double xv[6] = {1, 2, 3, 4, 6, 11}, wv[3] = {1, 2, 0.5}, bv[3] = {0, 1, -1};
    double o0[6], o1[6];
    const double *ins[3] = {xv, wv, bv};
    double *outs[2] = {o0, o1};
    run(g, ins, outs);
    const double want[6] = {-1.2247356859083902, 1.0, -0.3876321570458049,
                            -1.0190487428175694, 0.32063417145495365, -0.32063417145495365};
    const double want_w[6] = {-1.2247356859083902, 0.0, 0.6123678429541951,
                              -1.0190487428175694, -0.67936582854504635, 0.67936582854504635};
    near("layer_norm", o0, want, 6, 1e-14);
    near("layer_norm weight only", o1, want_w, 6, 1e-14);
    kf_graph_free(g);
}

Test(interp, layer_norm_two_axes_and_rms_norm) {
    kf_graph *g = kf_graph_new("norms");
    int x = input(g, "x", S(3, 2, 2, 2)), y = input(g, "y", S(2, 2, 3)), w = input(g, "w", S(1, 3));
    kf_attrs at = kf_attrs_default(KF_OP_LAYER_NORM, 3);
    at.axes = 0x6;
    output(g, op1(g, KF_OP_LAYER_NORM, x, &at));
    int rin[2] = {y, w};
    output(g, node(g, KF_OP_RMS_NORM, rin, 2, NULL));
    output(g, op1(g, KF_OP_RMS_NORM, y, NULL));
    double xv[8] = {0, 1, 2, 3, 4, 5, 6, 7}, yv[6] = {1, 2, 3, -2, 0, 2}, wv[3] = {1, 0.5, 2};
    double o0[8], o1[6], o2[6];
    const double *ins[3] = {xv, yv, wv};
    double *outs[3] = {o0, o1, o2};
    run(g, ins, outs);
    const double w0[8] = {-1.3416354199689269, -0.447211806656309, 0.447211806656309,
                          1.3416354199689269, -1.3416354199689269, -0.447211806656309,
                          0.447211806656309, 1.3416354199689269};
    const double w1[6] = {0.4629100002887783, 0.4629100002887783, 2.77746000173267,
                          -1.2247446417519903, 0.0, 2.4494892835039805};
    const double w2[6] = {0.4629100002887783, 0.9258200005775566, 1.3887300008663350,
                          -1.2247446417519903, 0.0, 1.2247446417519903};
    near("layer_norm axes -2,-1", o0, w0, 8, 1e-14);
    near("rms_norm weight", o1, w1, 6, 1e-14);
    near("rms_norm", o2, w2, 6, 1e-14);
    kf_graph_free(g);
}

/* ---- matmul ---- */

static void naive_mm(const double *a, const double *b, double *c, int M, int N, int K) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += a[i * K + k] * b[k * N + j];
            c[i * N + j] = s;
        }
}

Test(interp, matmul_2x3_3x2_transposes) {
    const double A[6] = {1, 2, 3, 4, 5, 6}, At[6] = {1, 4, 2, 5, 3, 6};
    const double B[6] = {7, 8, 9, 10, 11, 12}, Bt[6] = {7, 9, 11, 8, 10, 12};
    const double want[4] = {58, 64, 139, 154};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            kf_graph *g = kf_graph_new("mm");
            int a = input(g, "a", ta ? S(2, 3, 2) : S(2, 2, 3));
            int b = input(g, "b", tb ? S(2, 2, 3) : S(2, 3, 2));
            int ins2[2] = {a, b}; /* a transposed operand is a transpose view */
            if (ta) ins2[0] = node(g, KF_OP_TRANSPOSE, &a, 1, NULL);
            if (tb) ins2[1] = node(g, KF_OP_TRANSPOSE, &b, 1, NULL);
            int y = node(g, KF_OP_MATMUL, ins2, 2, NULL);
            output(g, y);
            cr_assert_eq(numel_of(g, y), 4);
            double o[4];
            const double *ins[2] = {ta ? At : A, tb ? Bt : B};
            double *outs[1] = {o};
            run(g, ins, outs);
            near(ta ? (tb ? "matmul ta tb" : "matmul ta") : (tb ? "matmul tb" : "matmul"), o,
                 want, 4, 0);
            kf_graph_free(g);
        }
}

Test(interp, matmul_batched_broadcast) {
    /* [2, 1, 2, 3] @ [3, 3, 2] -> [2, 3, 2, 2] */
    kf_graph *g = kf_graph_new("bmm");
    int a = input(g, "a", S(4, 2, 1, 2, 3)), b = input(g, "b", S(3, 3, 3, 2));
    int y = op2(g, KF_OP_MATMUL, a, b);
    output(g, y);
    cr_assert_eq(g->values[y].shape.rank, 4);
    cr_assert_eq(numel_of(g, y), 24);
    double av[12], bv[18], o[24], want[24];
    for (int i = 0; i < 12; i++) av[i] = i - 5;
    for (int i = 0; i < 18; i++) bv[i] = (i * 7) % 5 - 2;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) naive_mm(av + i * 6, bv + j * 6, want + (i * 3 + j) * 4, 2, 2, 3);
    const double *ins[2] = {av, bv};
    double *outs[1] = {o};
    run(g, ins, outs);
    near("batched matmul", o, want, 24, 0);
    kf_graph_free(g);
}

Test(interp, matmul_medium_tb) {
    const int M = 67, N = 45, K = 129;
    double *a = malloc(M * K * sizeof *a), *bt = malloc(N * K * sizeof *bt),
           *b = malloc(K * N * sizeof *b), *o = malloc(M * N * sizeof *o),
           *want = malloc(M * N * sizeof *want);
    for (int i = 0; i < M * K; i++) a[i] = cos(i * 0.1);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) b[k * N + n] = bt[n * K + k] = sin(n + 0.3 * k);
    naive_mm(a, b, want, M, N, K);
    kf_graph *g = kf_graph_new("mmt");
    int va = input(g, "a", S(2, M, K)), vb = input(g, "b", S(2, N, K));
    int ins2[2] = {va, node(g, KF_OP_TRANSPOSE, &vb, 1, NULL)};
    output(g, node(g, KF_OP_MATMUL, ins2, 2, NULL));
    const double *ins[2] = {a, bt};
    double *outs[1] = {o};
    run(g, ins, outs);
    near("matmul 67x129x45 tb", o, want, M * N, 1e-12);
    free(a);
    free(bt);
    free(b);
    free(o);
    free(want);
    kf_graph_free(g);
}

/* ---- the driver ---- */

Test(interp, chain_outputs_dead_nodes_and_reuse) {
    /* y = exp(x) (an output, also consumed), z = y * y, w = relu(z - 3), dead = tanh(x) */
    kf_graph *g = kf_graph_new("chain");
    int x = input(g, "x", S(1, 4));
    int y = op1(g, KF_OP_EXP, x, NULL);
    int dead = op1(g, KF_OP_TANH, x, NULL);
    (void)dead;
    int z = op2(g, KF_OP_MUL, y, y);
    int w = op1(g, KF_OP_RELU, op2(g, KF_OP_SUB, z, kf_graph_add_const(g, 3.0)), NULL);
    int s = op1(g, KF_OP_SUM, w, NULL);
    output(g, s); /* outputs in a different order than they are defined */
    output(g, y);
    output(g, w);
    double xv[4] = {0, 0.5, 1, -1}, os[1], oy[4], ow[4];
    const double *ins[1] = {xv};
    double *outs[3] = {os, oy, ow};
    run(g, ins, outs);
    double wy[4], ww[4], ws = 0;
    for (int i = 0; i < 4; i++) {
        wy[i] = exp(xv[i]);
        ww[i] = fmax(wy[i] * wy[i] - 3, 0);
        ws += ww[i];
    }
    near("y", oy, wy, 4, 1e-15);
    near("w", ow, ww, 4, 1e-15);
    near("sum", os, &ws, 1, 1e-15);
    cr_assert_eq(xv[0], 0.0, "inputs are not modified");
    cr_assert_eq(xv[3], -1.0);
    kf_graph_free(g);
}

Test(interp, bad_arguments) {
    kf_error e = {0};
    cr_assert_eq(kf_interp_run(NULL, NULL, NULL, &e), KF_ERR_ARG);
    kf_graph *g = kf_graph_new("bad");
    int x = input(g, "x", S(1, 4));
    output(g, op1(g, KF_OP_RELU, x, NULL));
    double out[4];
    double *outs[1] = {out};
    cr_assert_eq(kf_interp_run(g, NULL, outs, &e), KF_ERR_ARG);
    const double *ins[1] = {NULL};
    cr_assert_eq(kf_interp_run(g, ins, outs, &e), KF_ERR_ARG);
    cr_assert(strlen(e.msg) > 0);
    kf_graph_free(g);
}

/* The error bound of a contraction (K * u * sum |a||b|), carried through a clamp (where it
 * saturates far from the edge, only the clamp's own rounding is left) and a sum; a pointwise
 * op of exact operands has its rounding alone. */
Test(interp, bounds_follow_the_contraction) {
    const char *task = "task b\ninput a: f32[2, 4]\ninput w: f32[4, 2]\n"
                       "m = matmul(a, w)\n"
                       "output c = hardtanh(m, min_val=-1, max_val=1)\n"
                       "output s = sum(m, axes=1)\n"
                       "output p = a * 2\n";
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<t>", &g, &err), KF_OK, "%s", err.msg);
    double a[8] = {1, -1, 2, -2, 0.25, 0.25, 0.25, 0.25};
    double w[8] = {1, 100, 1, 100, 1, 100, 1, 100}; /* row 0: m = [0, 0]; row 1: [1, 100] */
    double c[4], s[2], p[8], bc[4], bs[2], bp[8];
    const double *in[2] = {a, w};
    double *out[3] = {c, s, p}, *bnd[3] = {bc, bs, bp};
    cr_assert_eq(kf_interp_run_bounds(g, in, out, bnd, &err), KF_OK, "%s", err.msg);
    double u = 0x1p-24;
    /* m[0][0] = 0 with sum |a||w| = 6: bound 4 * u * 6, kept by the clamp (slope 1 there) */
    cr_assert_float_eq(bc[0], 4 * u * 6, 1e-20);
    cr_assert_float_eq(bc[1], 4 * u * 600, 1e-18);
    /* m[1][1] = 100, far above the clamp's edge: the clamp's result cannot move; what is
     * left is the rounding of that result, u * 1 */
    cr_assert_float_eq(bc[3], u, 1e-22);
    /* the sum of the row's bounds */
    cr_assert_float_eq(bs[0], 4 * u * 606, 1e-17);
    /* no contraction on the path: the rounding of the pointwise result alone */
    for (int i = 0; i < 8; i++) cr_assert_float_eq(bp[i], u * fabs(2 * a[i]), 1e-22);
    kf_graph_free(g);
}

/* A view moves its operand's error bounds with its elements; a pad's constant is exact;
 * a running sum carries the running sum of the bounds. */
Test(interp, bounds_follow_views_and_scans) {
    const char *task = "task b\ninput a: f32[2, 4]\ninput w: f32[4, 3]\n"
                       "m = matmul(a, w)\n"
                       "output t = transpose(m, dim0=0, dim1=1)\n"
                       "output p = pad(m, pads=[1, 0], value=5)\n"
                       "output c = cumsum(m, axis=1)\n";
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<t>", &g, &err), KF_OK, "%s", err.msg);
    double a[8] = {1, -1, 2, -2, 0.25, 0.5, 0.25, 0.5};
    double w[12] = {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3};
    double t[6], p[8], c[6], bt[6], bp[8], bc[6];
    const double *in[2] = {a, w};
    double *out[3] = {t, p, c}, *bnd[3] = {bt, bp, bc};
    cr_assert_eq(kf_interp_run_bounds(g, in, out, bnd, &err), KF_OK, "%s", err.msg);
    /* m's own bounds: K * u * sum_k |a_ik||w_kj|, read back through each view */
    double u = 0x1p-24, bm[2][3];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            double s = 0, v = 0;
            for (int k = 0; k < 4; k++) s += fabs(a[i * 4 + k]) * fabs(w[k * 3 + j]), v += a[i * 4 + k] * w[k * 3 + j];
            bm[i][j] = 4 * u * s;
            (void)v;
        }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) cr_assert_float_eq(bt[j * 2 + i], bm[i][j], 1e-18, "transpose [%d][%d]", j, i);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(p[i * 4], 5.0);
        cr_assert_eq(bp[i * 4], 0.0, "the pad value is exact");
        for (int j = 0; j < 3; j++) cr_assert_float_eq(bp[i * 4 + 1 + j], bm[i][j], 1e-18);
    }
    for (int i = 0; i < 2; i++) {
        double run = 0;
        for (int j = 0; j < 3; j++) {
            run += bm[i][j];
            cr_assert_geq(bc[i * 3 + j], run * (1 - 1e-12), "cumsum [%d][%d]: %g < %g", i, j, bc[i * 3 + j], run);
        }
    }
    kf_graph_free(g);
}

/* ---- index maps: view nodes gathered one by one, and the same chain as one composed map ---- */

static int view(kf_graph *g, kf_op op, int x) { return node(g, op, &x, 1, NULL); }

static int view_at(kf_graph *g, kf_op op, int x, kf_attrs a) { return node(g, op, &x, 1, &a); }

/* out[e] of value v gathered through the composed map from source values src */
static void gather_composed(const kf_graph *g, int v, const double *src, double *out) {
    kf_imap m;
    kf_value_imap(g, v, &m);
    int64_t o[KF_MAX_DIMS] = {0}, i[KF_MAX_DIMS];
    int64_t cnt = numel_of(g, v);
    for (int64_t e = 0; e < cnt; e++) {
        if (kf_imap_apply(&m, o, i)) {
            int64_t f = 0;
            for (int d = 0; d < m.in_rank; d++) f = f * m.in_dims[d] + i[d];
            out[e] = src[f];
        } else {
            out[e] = m.pad;
        }
        for (int j = m.out_rank - 1; j >= 0; j--) {
            if (++o[j] < m.out_dims[j]) break;
            o[j] = 0;
        }
    }
}

Test(interp, views_gather_and_compose) {
    kf_graph *g = kf_graph_new("views");
    int x = input(g, "x", S(2, 3, 5));
    int t = view(g, KF_OP_TRANSPOSE, x);                      /* [5, 3] */
    kf_attrs a = kf_attrs_default(KF_OP_SLICE, 2);
    a.dim = 0, a.start = 1, a.end = 5, a.step = 2;
    int s = view_at(g, KF_OP_SLICE, t, a);                         /* rows 1, 3 of t: [2, 3] */
    a = kf_attrs_default(KF_OP_PAD, 2);
    a.ints = (kf_ints){4, {1, 1, 1, 0}};
    a.alpha = -7;
    int p = view_at(g, KF_OP_PAD, s, a);                           /* [3, 5] */
    a = kf_attrs_default(KF_OP_FLIP, 2);
    a.ints = (kf_ints){1, {1}};
    int f = view_at(g, KF_OP_FLIP, p, a);                          /* [3, 5] */
    a = kf_attrs_default(KF_OP_UNFOLD, 2);
    a.dim = 1, a.size = 2, a.step = 2, a.dilation = 2;
    int u = view_at(g, KF_OP_UNFOLD, x, a);                        /* [3, 2, 2] */
    a = kf_attrs_default(KF_OP_SLICE, 2);
    a.dim = 1, a.end = 1;
    int c0 = view_at(g, KF_OP_SLICE, x, a);                        /* [3, 1] */
    a = kf_attrs_default(KF_OP_EXPAND, 2);
    a.ints = (kf_ints){3, {2, -1, 4}};
    int e = view_at(g, KF_OP_EXPAND, c0, a);                       /* [2, 3, 4] */
    output(g, f);
    output(g, u);
    output(g, e);
    cr_assert_eq(numel_of(g, f), 15);
    cr_assert_eq(numel_of(g, u), 12);
    cr_assert_eq(numel_of(g, e), 24);
    double xv[15], of[15], ou[12], oe[24], wf[15], wu[12], we[24], cf[15], cu[12], ce[24];
    for (int i = 0; i < 15; i++) xv[i] = i + 1;
    for (int r = 0; r < 3; r++) /* f[r][b] = p[r][4-b]; p[r][c] = s[r-1][c-1] inside, else -7 */
        for (int b = 0; b < 5; b++) {
            int c = 4 - b;
            wf[r * 5 + b] = (r >= 1 && c >= 1 && c <= 3) ? xv[(c - 1) * 5 + 1 + 2 * (r - 1)] : -7;
        }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 2; k++) wu[(i * 2 + j) * 2 + k] = xv[i * 5 + 2 * j + 2 * k];
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) we[(q * 3 + i) * 4 + j] = xv[i * 5];
    const double *ins[1] = {xv};
    double *outs[3] = {of, ou, oe};
    run(g, ins, outs);
    near("flip(pad(slice(transpose(x))))", of, wf, 15, 0);
    near("unfold with step and dilation", ou, wu, 12, 0);
    near("expand(slice(x))", oe, we, 24, 0);
    /* the chains as one composed map each, from x */
    kf_imap m;
    cr_assert_eq(kf_value_imap(g, f, &m), x, "four views compose into one map of x");
    cr_assert_eq(m.nguards, 2, "the pad's two guarded dims");
    cr_assert_eq(kf_value_imap(g, e, &m), x);
    int64_t str[KF_MAX_DIMS], base;
    kf_imap_strides(&m, str, &base);
    cr_assert(str[0] == 0 && str[1] == 5 && str[2] == 0 && base == 0, "expand of a column: strides 0, 5, 0");
    gather_composed(g, f, xv, cf);
    gather_composed(g, u, xv, cu);
    gather_composed(g, e, xv, ce);
    near("composed flip(pad(slice(transpose)))", cf, wf, 15, 0);
    near("composed unfold", cu, wu, 12, 0);
    near("composed expand(slice)", ce, we, 24, 0);
    cr_assert_float_eq(kf_graph_flops(g), 0, 0);
    kf_graph_free(g);
}

/* A slice padded back out: the pad's guard is on the slice's extent, not on x's (x has
 * elements there that the composed map must not read). Two pads of different values do
 * not compose. */
Test(interp, views_compose_keeps_inner_bounds) {
    kf_graph *g = kf_graph_new("pads");
    int x = input(g, "x", S(1, 6));
    kf_attrs a = kf_attrs_default(KF_OP_SLICE, 1);
    a.start = 2, a.end = 4;
    int s = view_at(g, KF_OP_SLICE, x, a); /* x[2:4] */
    a = kf_attrs_default(KF_OP_PAD, 1);
    a.ints = (kf_ints){2, {1, 1}};
    a.alpha = 9;
    int p = view_at(g, KF_OP_PAD, s, a);   /* [9, x2, x3, 9] */
    a.alpha = 5;
    int q = view_at(g, KF_OP_PAD, p, a);   /* [5, 9, x2, x3, 9, 5] */
    a.alpha = 9;
    int r = view_at(g, KF_OP_PAD, p, a);   /* [9, 9, x2, x3, 9, 9] */
    output(g, p);
    output(g, q);
    output(g, r);
    double xv[6] = {10, 11, 12, 13, 14, 15}, op[4], oq[6], orr[6], cp[4], cr_[6];
    const double wp[4] = {9, 12, 13, 9}, wq[6] = {5, 9, 12, 13, 9, 5}, wr[6] = {9, 9, 12, 13, 9, 9};
    const double *ins[1] = {xv};
    double *outs[3] = {op, oq, orr};
    run(g, ins, outs);
    near("pad(slice)", op, wp, 4, 0);
    near("pad 5 of pad 9", oq, wq, 6, 0);
    near("pad 9 of pad 9", orr, wr, 6, 0);
    kf_imap m;
    cr_assert_eq(kf_value_imap(g, p, &m), x);
    gather_composed(g, p, xv, cp);
    near("composed pad(slice)", cp, wp, 4, 0);
    cr_assert_eq(kf_value_imap(g, q, &m), p, "pads of different values stop the composition");
    cr_assert_eq(kf_value_imap(g, r, &m), x, "pads of one value compose");
    gather_composed(g, r, xv, cr_);
    near("composed pad 9 of pad 9", cr_, wr, 6, 0);
    kf_graph_free(g);
}

/* gather: the index's shape, x read along the axis at the index's value, every other dim
 * as it is (a corner of x where the index is smaller); an index outside [0, size) or not
 * an integer gives the fill (NaN by default) and reads nothing. */
Test(interp, gather_along_each_axis_and_out_of_range) {
    kf_graph *g = kf_graph_new("gather");
    kf_error e = {0};
    int x = input(g, "x", S(2, 3, 4));
    kf_shape is = S(2, 2, 3);
    int i = kf_graph_add_input(g, "i", KF_I64, &is, &e);
    cr_assert(i >= 0, "%s", e.msg);
    kf_attrs a1 = kf_attrs_default(KF_OP_GATHER, 2), a0 = a1;
    a1.axes = 1u << 1;
    a0.axes = 1u << 0;
    a0.alpha = -7; /* fill */
    int ins[2] = {x, i};
    int y1 = node(g, KF_OP_GATHER, ins, 2, &a1), y0 = node(g, KF_OP_GATHER, ins, 2, &a0);
    output(g, y1);
    output(g, y0);
    cr_assert(isnan(a1.alpha), "fill defaults to NaN");
    double xv[12], iv[6] = {3, 0, -1, 1, 4, 2.5}, o1[6], o0[6];
    for (int k = 0; k < 12; k++) xv[k] = 10 * k + 1;
    const double *in[2] = {xv, iv};
    double *out[2] = {o1, o0};
    run(g, in, out);
    /* axis 1: row r, column i[r][c] of x [3, 4] (rows 0 and 1 of x's 3) */
    const double w1[6] = {xv[3], xv[0], NAN, xv[4 + 1], NAN, NAN};
    near("gather axis 1", o1, w1, 6, 0);
    /* axis 0: row i[r][c], column c; indices 3, -1, 4 (rows of x: 3) and 2.5 give the fill */
    const double w0[6] = {-7, xv[0 * 4 + 1], -7, xv[1 * 4 + 0], -7, -7};
    near("gather axis 0", o0, w0, 6, 0);
    kf_graph_free(g);
}

/* ---- the row-at-a-time gather (kf_imap_gather) against kf_imap_apply, element by element ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static int64_t rnd(int64_t n) { /* 0 .. n-1 */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (int64_t)(rng_state % (uint64_t)n);
}

/* A random view of value x with random attributes; -1 when they do not fit x. */
static int random_view(kf_graph *g, int x) {
    static const kf_op ops[] = {KF_OP_TRANSPOSE, KF_OP_PERMUTE, KF_OP_SLICE,  KF_OP_FLIP,
                                KF_OP_PAD,       KF_OP_EXPAND,  KF_OP_UNFOLD, KF_OP_RESHAPE,
                                KF_OP_SELECT,    KF_OP_TRIU,    KF_OP_TRIL,   KF_OP_DIAG_EMBED,
                                KF_OP_DIAGONAL,  KF_OP_PAD,     KF_OP_UNFOLD};
    const kf_shape *s = &g->values[x].shape;
    int r = s->rank;
    kf_op op = ops[rnd(sizeof ops / sizeof ops[0])];
    kf_attrs a = kf_attrs_default(op, r);
    a.dim = rnd(2 * r + 1) - r, a.dim1 = rnd(2 * r + 1) - r;
    switch (op) {
    case KF_OP_PERMUTE:
        a.ints.n = r;
        for (int i = 0; i < r; i++) a.ints.v[i] = i;
        for (int i = r - 1; i > 0; i--) {
            int j = (int)rnd(i + 1);
            int64_t t = a.ints.v[i];
            a.ints.v[i] = a.ints.v[j], a.ints.v[j] = t;
        }
        break;
    case KF_OP_SLICE:
        a.start = rnd(7) - 3, a.end = rnd(3) ? rnd(9) - 3 : INT64_MAX, a.step = 1 + rnd(3);
        break;
    case KF_OP_FLIP:
        a.ints.n = 1 + (int)rnd(r > 0 ? r : 1);
        for (int i = 0; i < a.ints.n; i++) a.ints.v[i] = i - (int)rnd(2) * r; /* dims i or i - r */
        break;
    case KF_OP_PAD: /* ceil_mode's pools pad more on the right; a negative pad crops */
        a.ints.n = 2 * (1 + (int)rnd(r > 0 ? r : 1));
        for (int i = 0; i < a.ints.n; i++) a.ints.v[i] = rnd(5) - 1;
        a.alpha = rnd(2) ? -INFINITY : -0.5;
        break;
    case KF_OP_EXPAND:
        a.ints.n = r + (int)rnd(2);
        for (int j = 0; j < a.ints.n; j++) {
            int i = j - (a.ints.n - r);
            a.ints.v[j] = i >= 0 && s->d[i] != 1 ? -1 : 1 + rnd(3);
        }
        break;
    case KF_OP_UNFOLD:
        a.size = 1 + rnd(3), a.step = 1 + rnd(3), a.dilation = 1 + rnd(2);
        break;
    case KF_OP_RESHAPE: { /* split the last dim or merge two (merging strided dims: a flat map) */
        a.ints.n = 0;
        int64_t last = r ? s->d[r - 1] : 1;
        if (r >= 2 && rnd(2)) {
            for (int i = 0; i < r - 2; i++) a.ints.v[a.ints.n++] = s->d[i];
            a.ints.v[a.ints.n++] = s->d[r - 2] * last;
        } else {
            for (int i = 0; i < r - 1; i++) a.ints.v[a.ints.n++] = s->d[i];
            int64_t f = last % 2 == 0 ? 2 : last % 3 == 0 ? 3 : 1;
            a.ints.v[a.ints.n++] = f;
            a.ints.v[a.ints.n++] = last / f;
        }
        break;
    }
    case KF_OP_SELECT:
    case KF_OP_TRIU:
    case KF_OP_TRIL:
    case KF_OP_DIAG_EMBED:
    case KF_OP_DIAGONAL:
        a.start = rnd(5) - 2;
        a.alpha = -0.5;
        break;
    default:
        break;
    }
    kf_error e = {0};
    return kf_graph_add_node(g, op, &x, 1, &a, NULL, 0, 0, &e);
}

/* x[f] = f: what the gather read names the element it read */
static void check_gather(const kf_imap *m, const double *x, const char *what) {
    int64_t cnt = 1, o[KF_MAX_DIMS] = {0}, i[KF_MAX_DIMS];
    for (int j = 0; j < m->out_rank; j++) cnt *= m->out_dims[j];
    const double pad = -1e300; /* no flat index */
    double *want = malloc((size_t)cnt * sizeof *want), *got = malloc((size_t)cnt * sizeof *got);
    for (int64_t e = 0; e < cnt; e++) {
        if (kf_imap_apply(m, o, i)) {
            int64_t f = 0;
            for (int d = 0; d < m->in_rank; d++) {
                cr_assert(i[d] >= 0 && i[d] < m->in_dims[d], "%s: the map reads outside its input", what);
                f = f * m->in_dims[d] + i[d];
            }
            want[e] = x[f];
        } else {
            want[e] = pad;
        }
        for (int j = m->out_rank - 1; j >= 0; j--) {
            if (++o[j] < m->out_dims[j]) break;
            o[j] = 0;
        }
    }
    /* the whole output, then random pieces (a piece starts and ends mid-row) */
    for (int piece = 0; piece < 6; piece++) {
        int64_t e0 = piece ? rnd(cnt) : 0, e1 = piece ? e0 + rnd(cnt - e0 + 1) : cnt;
        for (int64_t e = 0; e < cnt; e++) got[e] = 7.5; /* not an index, not the pad */
        kf_imap_gather(m, x, pad, e0, e1, got + e0);
        for (int64_t e = 0; e < cnt; e++) {
            double w = e >= e0 && e < e1 ? want[e] : 7.5;
            cr_assert(got[e] == w, "%s, elements [%lld, %lld) of %lld: element %lld is %.17g, kf_imap_apply's %.17g",
                      what, (long long)e0, (long long)e1, (long long)cnt, (long long)e, got[e], w);
        }
    }
    free(want);
    free(got);
}

/* Random chains of views over random shapes: every view's own map (the interpreter's
 * gather) and the chain's composed map (several guards, flat maps), gathered both ways. */
Test(interp, gather_rows_match_apply_on_random_views) {
    int checked = 0, guarded = 0, flat = 0, composed = 0;
    for (int trial = 0; trial < 400; trial++) {
        kf_graph *g = kf_graph_new("gather");
        kf_shape s;
        memset(&s, 0, sizeof s);
        s.rank = 1 + (int)rnd(4);
        for (int i = 0; i < s.rank; i++) s.d[i] = 1 + rnd(i == s.rank - 1 ? 9 : 5);
        int x = input(g, "x", s);
        int v = x;
        for (int step = 0; step < 4; step++) {
            int w = -1;
            for (int attempt = 0; attempt < 20 && w < 0; attempt++) w = random_view(g, v);
            if (w < 0 || numel_of(g, w) > 20000) break;
            kf_imap m;
            kf_error e = {0};
            cr_assert_eq(kf_node_imap(g, &g->nodes[g->values[w].producer], &m, &e), KF_OK, "%s", e.msg);
            int64_t nin = 1;
            for (int d = 0; d < m.in_rank; d++) nin *= m.in_dims[d];
            double *xv = malloc((size_t)nin * sizeof *xv);
            for (int64_t f = 0; f < nin; f++) xv[f] = (double)f;
            char what[160];
            snprintf(what, sizeof what, "trial %d, %s (step %d)", trial,
                     kf_op_get(g->nodes[g->values[w].producer].op)->name, step);
            check_gather(&m, xv, what);
            free(xv);
            checked++, guarded += m.nguards > 0, flat += m.flat;
            int src = kf_value_imap(g, w, &m);
            if (src != v) { /* two views or more down to src, as one map */
                nin = numel_of(g, src);
                xv = malloc((size_t)nin * sizeof *xv);
                for (int64_t f = 0; f < nin; f++) xv[f] = (double)f;
                snprintf(what, sizeof what, "trial %d, the chain composed at step %d", trial, step);
                check_gather(&m, xv, what);
                free(xv);
                composed++;
            }
            v = w;
        }
        kf_graph_free(g);
    }
    /* the random draw reached what it is for */
    cr_assert_gt(checked, 600, "views checked: %d", checked);
    cr_assert_gt(guarded, 100, "guarded maps: %d", guarded);
    cr_assert_gt(flat, 10, "flat maps: %d", flat);
    cr_assert_gt(composed, 100, "composed chains: %d", composed);
}
