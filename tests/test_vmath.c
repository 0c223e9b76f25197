/*
 * The float64 references' vector math (src/ops/vmath.c, issue 30): glibc's vector exp, log,
 * tanh, erfc, expm1 and log1p (libmvec) against glibc's scalar functions, and the pointwise
 * records that take them against the scalar formulas they had before (written out here),
 * over random arguments of every magnitude and the edges (signed zeros, subnormals, the
 * overflow and underflow thresholds, infinities, NaN).
 *
 * The bound kept (VM_ULP): a function within 4 float64 ulp of libm's (libmvec's documented
 * accuracy); a record within that plus one ulp per operation around it, and where the
 * formula cancels (gelu_tanh's 1 + tanh near -1) within that many float64 epsilons of |x|.
 * Where the function's result is subnormal (fewer bits) and the record multiplies it by x,
 * the bound is that many subnormal units times |x| (results below 1e-305). NaN where libm
 * gives NaN and nowhere else, the same infinities. The references are compared with float32 kernels at ~1e-5 relative: 4 ulp of
 * float64 are ~1e-15.
 *
 * Every path this machine has (AVX2, SSE, or libm per element in a build without libmvec)
 * is checked, and a value must not depend on its place in the array (a chunked reference
 * and a whole-tensor one give the same bytes, tests/test_sets_chunked.c).
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kforge/ir.h"
#include "kforge/ops.h"
#include "ops/ops_int.h"

#define VM_ULP 4
#define NRAND 200000

/* ------------------------------------------------------------------------ values */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) { /* xorshift64* */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

static double rnd_unit(void) { return (double)(rnd() >> 11) * 0x1p-53; }

static double bits(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static const double edges[] = {
    0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1e-300, -1e-300, 4.9406564584124654e-324,
    -4.9406564584124654e-324, 2.2250738585072014e-308, -2.2250738585072014e-308,
    2.2250738585072009e-308, DBL_MAX, -DBL_MAX, INFINITY, -INFINITY, NAN, -NAN,
    /* exp: the overflow threshold, the underflow to subnormals and to zero, vmath's bounds */
    709.782712893384, 709.7827128933841, 709.79, 710.0, 710.0000000000001, 711.0, 1000.0,
    -708.3964185322641, -708.4, -709.0, -744.44007192138126, -745.1332191019411,
    -745.1332191019412, -745.2, -746.0, -746.0000000000001, -745.9999999999999, -747.0, -1e5,
    -1e300,
    /* tanh's saturation, erfc's underflow, log1p's pole, expm1's saturation */
    19.0, 19.06, 20.0, 22.0, -19.06, -22.0, 0x1p-28, -0x1p-28, 0x1p-55, 26.5, 26.55,
    27.3, 27.5, -26.5, -6.0, 38.0, -38.0, -1.0000000000000002, -0.9999999999999999,
    -36.04365338911715, -37.0, -40.0, 1e-17, -1e-17,
};
#define NEDGES ((int)(sizeof edges / sizeof edges[0]))

/* n arguments: the edges, their neighbours, random values in [-40, 40], of every binary
 * magnitude (subnormals included) with either sign, and random bit patterns (NaNs with
 * payloads, infinities) */
static double *args(int *n) {
    int cap = NEDGES * 3 + NRAND;
    double *x = malloc(sizeof *x * (size_t)cap);
    int k = 0;
    for (int i = 0; i < NEDGES; i++) {
        x[k++] = edges[i];
        x[k++] = nextafter(edges[i], INFINITY);
        x[k++] = nextafter(edges[i], -INFINITY);
    }
    for (int i = 0; i < NRAND; i++) {
        uint64_t r = rnd();
        switch (i % 5) {
        case 0: x[k++] = 80.0 * rnd_unit() - 40.0; break;
        case 1: x[k++] = 1600.0 * rnd_unit() - 800.0; break;
        case 2: x[k++] = 4.0 * rnd_unit() - 2.0; break;
        case 3: x[k++] = ldexp(1.0 + rnd_unit(), (int)(r % 2098) - 1074) * (r >> 63 ? -1 : 1); break;
        default: x[k++] = bits(r); break;
        }
    }
    *n = k;
    return x;
}

/* ------------------------------------------------------------------- distances */

static int64_t ordered(double x) {
    int64_t i;
    memcpy(&i, &x, sizeof i);
    return i < 0 ? INT64_MIN - i : i;
}

static double ulps(double a, double b) {
    int64_t oa = ordered(a), ob = ordered(b);
    return oa > ob ? (double)((uint64_t)oa - (uint64_t)ob) : (double)((uint64_t)ob - (uint64_t)oa);
}

/* got against ref: the same NaNs and infinities, then within k ulp or slack (absolute). */
static int near(double got, double ref, double k, double slack) {
    if (isnan(ref) || isnan(got)) return isnan(ref) && isnan(got);
    if (isinf(ref) || isinf(got)) return got == ref;
    if (ref == 0 && got != 0 && slack == 0 && k < 1) return 0;
    return ulps(got, ref) <= k || fabs(got - ref) <= slack;
}

/* ----------------------------------------------------------------- the functions */

typedef void (*vm_fn)(const double *, double *, int64_t);
static const struct {
    const char *name;
    vm_fn vec;
    double (*lib)(double);
} fns[] = {
    {"exp", kf_vm_exp, exp},       {"log", kf_vm_log, log},       {"tanh", kf_vm_tanh, tanh},
    {"erfc", kf_vm_erfc, erfc},    {"expm1", kf_vm_expm1, expm1}, {"log1p", kf_vm_log1p, log1p},
};
#define NFNS ((int)(sizeof fns / sizeof fns[0]))

/* the paths this machine runs, the CPU's own first */
static int paths(int *p) {
    int n = 0, own = kf_vm_path();
    p[n++] = own;
    if (own == KF_VM_AVX2) p[n++] = KF_VM_SSE;
    return n;
}

Test(vmath, functions_within_bound_of_libm) {
    int n, pv[2], np = paths(pv);
    double *x = args(&n), *y = malloc(sizeof *y * (size_t)n);
    for (int q = 0; q < np; q++) {
        kf_vm_set_path(pv[q]);
        cr_assert_eq(kf_vm_path(), pv[q]);
        for (int f = 0; f < NFNS; f++) {
            fns[f].vec(x, y, n);
            double worst = 0;
            for (int i = 0; i < n; i++) {
                double r = fns[f].lib(x[i]);
                cr_assert(near(y[i], r, VM_ULP, 0), "%s path %d: %s(%a) = %a, libm %a (%.0f ulp)",
                          fns[f].name, pv[q], fns[f].name, x[i], y[i], r, ulps(y[i], r));
                if (!isnan(r) && !isinf(r) && ulps(y[i], r) > worst) worst = ulps(y[i], r);
            }
            fprintf(stderr, "vmath: %s, path %d: at most %.0f ulp from libm over %d arguments\n",
                    fns[f].name, pv[q], worst, n);
        }
    }
    kf_vm_set_path(-1);
    free(x);
    free(y);
}

/* exp's bounds set in vmath.c, and the IEEE values every function must give exactly */
Test(vmath, special_values_exact) {
    int pv[2], np = paths(pv);
    for (int q = 0; q < np; q++) {
        kf_vm_set_path(pv[q]);
        double x[] = {-746.0, -745.2, -1e300, -INFINITY, 710.0, 1e300, INFINITY, NAN, 0.0, -708.4};
        double y[10];
        kf_vm_exp(x, y, 10);
        cr_expect(y[0] == 0 && y[1] == 0 && y[2] == 0 && y[3] == 0 && !signbit(y[0]), "exp underflow to +0");
        cr_expect(y[4] == INFINITY && y[5] == INFINITY && y[6] == INFINITY, "exp overflow to +inf");
        cr_expect(isnan(y[7]) && y[8] == 1.0, "exp(NaN), exp(0)");
        cr_expect(y[9] > 0 && y[9] == exp(-708.4), "exp(-708.4) is libm's: %a vs %a", y[9], exp(-708.4));
        double l[] = {0.0, -0.0, -1.0, INFINITY, -INFINITY, NAN, 1.0};
        kf_vm_log(l, y, 7);
        cr_expect(y[0] == -INFINITY && y[1] == -INFINITY && isnan(y[2]) && y[3] == INFINITY && isnan(y[4]) &&
                  isnan(y[5]) && y[6] == 0.0, "log's special values");
        double p[] = {-1.0, -2.0, INFINITY, NAN};
        kf_vm_log1p(p, y, 4);
        cr_expect(y[0] == -INFINITY && isnan(y[1]) && y[2] == INFINITY && isnan(y[3]), "log1p's special values");
        double t[] = {INFINITY, -INFINITY, NAN, -0.0};
        kf_vm_tanh(t, y, 4);
        cr_expect(y[0] == 1.0 && y[1] == -1.0 && isnan(y[2]) && y[3] == 0 && signbit(y[3]), "tanh's");
        kf_vm_erfc(t, y, 4);
        cr_expect(y[0] == 0.0 && y[1] == 2.0 && isnan(y[2]) && y[3] == 1.0, "erfc's");
        kf_vm_expm1(t, y, 4);
        cr_expect(y[0] == INFINITY && y[1] == -1.0 && isnan(y[2]) && y[3] == 0 && signbit(y[3]), "expm1's");
    }
    kf_vm_set_path(-1);
}

/* a value is its argument's, whatever the array's length, its index and the aliasing */
Test(vmath, value_independent_of_place) {
    int n;
    double *x = args(&n), *y = malloc(sizeof *y * (size_t)n), *z = malloc(sizeof *z * (size_t)n);
    for (int f = 0; f < NFNS; f++) {
        fns[f].vec(x, y, n);
        memcpy(z, x, sizeof *z * (size_t)n);
        fns[f].vec(z, z, n); /* in place */
        cr_assert(!memcmp(y, z, sizeof *y * (size_t)n), "%s in place", fns[f].name);
        for (int i = 0; i < n; i += 97) {
            for (int len = 1; len <= 7 && i + len <= n; len += 2) {
                double w[8];
                fns[f].vec(x + i, w, len);
                for (int j = 0; j < len; j++)
                    cr_assert(!memcmp(&w[j], &y[i + j], sizeof w[j]), "%s(%a): %a alone, %a in the array",
                              fns[f].name, x[i + j], w[j], y[i + j]);
            }
        }
    }
    free(x);
    free(y);
    free(z);
}

/* ------------------------------------------------------------------- the records */

/* the scalar formulas the records had before the vector math (src/ops/pointwise.c) */
static double s_sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}
static double o_sigmoid(double x, const kf_attrs *A) { return s_sigmoid(x); }
static double o_silu(double x, const kf_attrs *A) { return x * s_sigmoid(x); }
static double o_tanh(double x, const kf_attrs *A) { return tanh(x); }
static double o_gelu(double x, const kf_attrs *A) { return 0.5 * x * erfc(-x * M_SQRT1_2); }
static double o_gelu_tanh(double x, const kf_attrs *A) {
    const double c = 0.79788456080286535587989211986876;
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}
static double o_selu(double x, const kf_attrs *A) {
    return 1.0507009873554804934193349852946 * (x > 0 ? x : 1.6732632423543772848170429916717 * expm1(x));
}
static double o_elu(double x, const kf_attrs *A) { return x > 0 ? x : A->alpha * expm1(x); }
static double o_softplus(double x, const kf_attrs *A) {
    return x * A->alpha > A->beta ? x : log1p(exp(A->alpha * x)) / A->alpha;
}
static double o_exp(double x, const kf_attrs *A) { return exp(x); }
static double o_log(double x, const kf_attrs *A) { return log(x); }

/* ulp: the function's bound plus one per operation after it; eps_x: a slack of that many
 * float64 epsilons of |x| where the formula cancels */
static const struct {
    const char *op;
    double (*old)(double, const kf_attrs *);
    double ulp, eps_x;
    double alpha, beta; /* attributes, where the record has them */
} recs[] = {
    {"sigmoid", o_sigmoid, VM_ULP + 2, 0, 0, 0},
    {"silu", o_silu, VM_ULP + 3, 0, 0, 0},
    {"swish", o_silu, VM_ULP + 3, 0, 0, 0},
    {"tanh", o_tanh, VM_ULP, 0, 0, 0},
    {"gelu", o_gelu, VM_ULP + 2, 0, 0, 0},
    {"gelu_tanh", o_gelu_tanh, VM_ULP + 3, 0.5 * (VM_ULP + 2), 0, 0},
    {"selu", o_selu, VM_ULP + 2, 0, 0, 0},
    {"elu", o_elu, VM_ULP + 1, 0, 1.0, 0},
    {"elu", o_elu, VM_ULP + 1, 0, 0.3, 0},
    {"softplus", o_softplus, 2 * VM_ULP + 2, 0, 1.0, 20.0},
    {"softplus", o_softplus, 2 * VM_ULP + 2, 0, 2.0, 10.0},
    {"softplus", o_softplus, 2 * VM_ULP + 2, 0, 0.5, 20.0},
    {"exp", o_exp, VM_ULP, 0, 0, 0},
    {"log", o_log, VM_ULP, 0, 0, 0},
};
#define NRECS ((int)(sizeof recs / sizeof recs[0]))

/* A function's subnormal result carries its ulp bound in units of the smallest subnormal,
 * which a normal result made from it (x times it) cannot hold in ulp of its own: there the
 * slack is those units times |x| (results below 1e-305, far under any float32 tolerance). */
static double sub_slack(double ulp, double x) { return ulp * (1.0 + fabs(x)) * DBL_TRUE_MIN; }

Test(vmath, records_within_bound_of_scalar_formulas) {
    int n, pv[2], np = paths(pv);
    double *x = args(&n), *y = malloc(sizeof *y * (size_t)n), *xs = malloc(sizeof *xs * (size_t)n * 3);
    for (int i = 0; i < n; i++) xs[3 * i] = x[i], xs[3 * i + 1] = xs[3 * i + 2] = NAN;
    for (int q = 0; q < np; q++) {
        kf_vm_set_path(pv[q]);
        for (int r = 0; r < NRECS; r++) {
            kf_op op = kf_op_lookup(recs[r].op);
            cr_assert(op >= 0, "%s", recs[r].op);
            const kf_op_def *d = kf_op_get(op);
            kf_attrs A = kf_attrs_default(op, 1);
            if (recs[r].alpha) A.alpha = recs[r].alpha;
            if (recs[r].beta) A.beta = recs[r].beta;
            for (int stride = 1; stride <= 3; stride += 2) {
                d->f64(stride == 1 ? x : xs, stride, NULL, 0, y, n, &A);
                double worst = 0;
                for (int i = 0; i < n; i++) {
                    double o = recs[r].old(x[i], &A);
                    double slack = recs[r].eps_x * fabs(x[i]) * DBL_EPSILON + sub_slack(recs[r].ulp, x[i]);
                    cr_assert(near(y[i], o, recs[r].ulp, slack),
                              "%s(%g, %g) path %d stride %d: at %a %a, the scalar formula %a (%.0f ulp)",
                              recs[r].op, A.alpha, A.beta, pv[q], stride, x[i], y[i], o, ulps(y[i], o));
                    if (isfinite(o) && ulps(y[i], o) > worst && fabs(y[i] - o) > slack)
                        worst = ulps(y[i], o);
                }
                if (stride == 1)
                    fprintf(stderr, "vmath: record %s(%g, %g), path %d: at most %.0f ulp beyond the slack\n",
                            recs[r].op, A.alpha, A.beta, pv[q], worst);
            }
        }
    }
    kf_vm_set_path(-1);
    free(x);
    free(y);
    free(xs);
}

/* a record's value does not depend on the run's length (a chunk's tail, a whole tensor) */
Test(vmath, records_independent_of_run_length) {
    int n;
    double *x = args(&n), *y = malloc(sizeof *y * (size_t)n);
    for (int r = 0; r < NRECS; r++) {
        kf_op op = kf_op_lookup(recs[r].op);
        const kf_op_def *d = kf_op_get(op);
        kf_attrs A = kf_attrs_default(op, 1);
        if (recs[r].alpha) A.alpha = recs[r].alpha;
        if (recs[r].beta) A.beta = recs[r].beta;
        d->f64(x, 1, NULL, 0, y, n, &A);
        for (int i = 0; i + 5 <= n; i += 301) {
            double w[5];
            d->f64(x + i, 1, NULL, 0, w, 5, &A);
            cr_assert(!memcmp(w, y + i, sizeof w), "%s at %d", recs[r].op, i);
        }
    }
    free(x);
    free(y);
}

/* ------------------------------------------- the records whose formula did not change */

/* pointwise.c is built -fno-math-errno -fno-trapping-math (its loops vectorise, selects
 * compute both sides): its other records must give libm's and IEEE's values bit for bit,
 * NaN where the formula gives NaN */
static double e_relu(double x, double al, double be) { return x < 0 ? 0.0 : x; }
static double e_leaky(double x, double al, double be) { return x >= 0 ? x : al * x; }
static double e_clamp(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }
static double e_hardsigmoid(double x, double al, double be) { return e_clamp(x / 6.0 + 0.5, 0.0, 1.0); }
static double e_hardtanh(double x, double al, double be) { return e_clamp(x, al, be); }
static double e_softsign(double x, double al, double be) { return x / (1.0 + fabs(x)); }
static double e_sqrt(double x, double al, double be) { return sqrt(x); }
static double e_rsqrt(double x, double al, double be) { return 1.0 / sqrt(x); }
static double e_abs(double x, double al, double be) { return fabs(x); }
static double e_neg(double x, double al, double be) { return -x; }
static double e_square(double x, double al, double be) { return x * x; }
static double e_hardswish(double x, double al, double be) { return x * e_clamp(x + 3.0, 0.0, 6.0) / 6.0; }
static double e_full_like(double x, double al, double be) { return al; }

static const struct {
    const char *op;
    double (*old)(double, double, double);
    double alpha, beta;
} same1[] = {
    {"relu", e_relu, 0, 0},           {"leaky_relu", e_leaky, 0.01, 0}, {"leaky_relu", e_leaky, 0.2, 0},
    {"hardsigmoid", e_hardsigmoid, 0, 0}, {"hardtanh", e_hardtanh, -1.0, 1.0}, {"hardtanh", e_hardtanh, -0.5, 0.25},
    {"softsign", e_softsign, 0, 0},   {"sqrt", e_sqrt, 0, 0},           {"rsqrt", e_rsqrt, 0, 0},
    {"abs", e_abs, 0, 0},             {"neg", e_neg, 0, 0},             {"square", e_square, 0, 0},
    {"hardswish", e_hardswish, 0, 0}, {"full_like", e_full_like, 2.5, 0},
};

static int same_bits(double a, double b) { return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof a); }

Test(vmath, unchanged_unary_records_bit_for_bit) {
    int n;
    double *x = args(&n), *y = malloc(sizeof *y * (size_t)n);
    for (int r = 0; r < (int)(sizeof same1 / sizeof same1[0]); r++) {
        kf_op op = kf_op_lookup(same1[r].op);
        cr_assert(op >= 0, "%s", same1[r].op);
        kf_attrs A = kf_attrs_default(op, 1);
        A.alpha = same1[r].alpha;
        A.beta = same1[r].beta;
        kf_op_get(op)->f64(x, 1, NULL, 0, y, n, &A);
        for (int i = 0; i < n; i++) {
            double o = same1[r].old(x[i], A.alpha, A.beta);
            cr_assert(same_bits(y[i], o), "%s(%a) = %a, the formula %a", same1[r].op, x[i], y[i], o);
        }
    }
    free(x);
    free(y);
}

static double e_add(double a, double b) { return a + b; }
static double e_sub(double a, double b) { return a - b; }
static double e_mul(double a, double b) { return a * b; }
static double e_div(double a, double b) { return a / b; }
static double e_max(double a, double b) { return a != a ? a : b != b ? b : a > b ? a : b; }
static double e_min(double a, double b) { return a != a ? a : b != b ? b : a < b ? a : b; }
static double e_pow(double a, double b) { return pow(a, b); }
static double e_eq(double a, double b) { return a == b ? 1.0 : 0.0; }

Test(vmath, binary_records_bit_for_bit) {
    static const struct {
        const char *op;
        double (*old)(double, double);
    } bin[] = {{"add", e_add}, {"sub", e_sub}, {"mul", e_mul}, {"div", e_div}, {"maximum", e_max},
               {"minimum", e_min}, {"pow", e_pow}, {"eq", e_eq}};
    int n;
    double *a = args(&n), *b = malloc(sizeof *b * (size_t)n), *y = malloc(sizeof *y * (size_t)n);
    for (int i = 0; i < n; i++) b[i] = a[(i * 7919 + 13) % n];
    for (int i = 0; i < n; i += 11) b[i] = a[i]; /* equal operands for eq, max, min */
    for (int r = 0; r < (int)(sizeof bin / sizeof bin[0]); r++) {
        kf_op op = kf_op_lookup(bin[r].op);
        kf_attrs A = kf_attrs_default(op, 1);
        /* the four stride patterns the records loop over: both arrays, b one value, a one value,
         * and both strided */
        int64_t pat[4][2] = {{1, 1}, {1, 0}, {0, 1}, {2, 2}};
        for (int p = 0; p < 4; p++) {
            int64_t sa = pat[p][0], sb = pat[p][1], m = sa == 2 ? (n - 5) / 2 : n - 5;
            kf_op_get(op)->f64(a, sa, b + 5, sb, y, m, &A);
            for (int64_t i = 0; i < m; i++) {
                double o = bin[r].old(a[i * sa], b[5 + i * sb]);
                cr_assert(same_bits(y[i], o), "%s(%a, %a) strides %lld %lld = %a, the formula %a", bin[r].op,
                          a[i * sa], b[5 + i * sb], (long long)sa, (long long)sb, y[i], o);
            }
        }
    }
    free(a);
    free(b);
    free(y);
}

/* ------------------------------------------------------------ softmax's row exp */

/* softmax and log_softmax take their rows' exp from kf_vm_exp: within 2 * VM_ULP + 2 ulp of
 * the scalar formula (each exp within VM_ULP, the sum of positive terms within VM_ULP
 * relative, one division; log_softmax: x - max - log(sum), within that many ulp of the
 * largest of its terms, where the subtraction cancels), rows of NaN and infinities alike */
Test(vmath, softmax_rows_within_bound) {
    const char *task = "task t\ninput x: f32[64, 300]\noutput y = softmax(x, axis=-1)\noutput z = log_softmax(x, axis=-1)\n";
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<t>", &g, &err), KF_OK, "%s", err.msg);
    int R = 64, C = 300;
    double *x = malloc(sizeof *x * (size_t)(R * C)), *y = malloc(sizeof *y * (size_t)(R * C)),
           *z = malloc(sizeof *z * (size_t)(R * C));
    for (int i = 0; i < R * C; i++) {
        int r = i / C;
        x[i] = r < 20 ? 8.0 * rnd_unit() - 4.0 : r < 40 ? ldexp(rnd_unit() - 0.5, (int)(rnd() % 24)) : 1400 * rnd_unit() - 700;
    }
    x[41 * C + 3] = NAN, x[42 * C + 7] = INFINITY, x[43 * C + 9] = -INFINITY;
    for (int c = 0; c < C; c++) x[44 * C + c] = -INFINITY;
    const double *ins[1] = {x};
    double *outs[2] = {y, z};
    cr_assert_eq(kf_interp_run(g, ins, outs, &err), KF_OK, "%s", err.msg);
    for (int r = 0; r < R; r++) {
        const double *xr = x + r * C;
        double m = -INFINITY, s = 0;
        for (int c = 0; c < C; c++) m = xr[c] != xr[c] || m != m ? NAN : (xr[c] > m ? xr[c] : m);
        for (int c = 0; c < C; c++) s += exp(xr[c] - m);
        for (int c = 0; c < C; c++) {
            double o = exp(xr[c] - m) / s, ol = xr[c] - m - log(s);
            double big = fmax(fmax(fabs(xr[c] - m), fabs(log(s))), fabs(ol));
            cr_assert(near(y[r * C + c], o, 2 * VM_ULP + 2, 0), "softmax row %d col %d: %a, the formula %a", r, c,
                      y[r * C + c], o);
            cr_assert(near(z[r * C + c], ol, 2 * VM_ULP + 2, (2 * VM_ULP + 2) * DBL_EPSILON * big),
                      "log_softmax row %d col %d: %a, the formula %a", r, c, z[r * C + c], ol);
        }
    }
    kf_graph_free(g);
    free(x);
    free(y);
    free(z);
}
