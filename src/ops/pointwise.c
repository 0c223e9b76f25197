/*
 * The POINTWISE records: one output element from one element of each input.
 *
 * Each record carries its float64 reference (an expression in x, or in a and b, with the
 * node's attributes alpha and beta) and its float32 expression for the kernels, side by side
 * and written independently: the reference follows PyTorch's definition in double
 * precision, the f32 text is what a fast kernel computes (the prelude's branch-free
 * kf_expf, kf_tanhf, ...). A wrong f32 text is caught by every verification against the
 * f64 one; nothing derives one from the other.
 *
 * f32 text: $0 and $1 are the operands, ${name} an attribute's value as a float literal.
 * The f64 macros below make each expression a run over strided arrays (one indirect call
 * per run, not per element: the interpreter walks 16M-element tensors with them).
 */
#include "ops_int.h"

#include <math.h>
#include <stddef.h>

/* ------------------------------------------------------------ f64 helpers */

/* c ? a : b with both operands computed: GCC if-converts (and vectorises) a select of
 * values, not an operation on one side of a ?: (pointwise.c is built -fno-trapping-math so
 * that it may compute both; the values are the ?:'s) */
static inline double u_sel(int c, double a, double b) { return c ? a : b; }

static inline double u_clamp(double x, double lo, double hi) {
    return x < lo ? lo : (x > hi ? hi : x); /* NaN passes through, as torch.clamp does */
}

/* softplus's log1p(exp(beta x)) over a block (beta x given) */
static void vm_exp_log1p(const double *x, double *y, int64_t n) {
    kf_vm_exp(x, y, n);
    kf_vm_log1p(y, y, n);
}

#define KF_GELU_C 0.79788456080286535587989211986876 /* sqrt(2/pi) */

#define KF_SELU_SCALE 1.0507009873554804934193349852946
#define KF_SELU_ALPHA 1.6732632423543772848170429916717

static inline double b_maximum(double a, double b) {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
}

static inline double b_minimum(double a, double b) {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? a : b;
}

/* A unary f64 run from an expression in x (and the attributes alpha and beta). */
#define UNARY_F64(fn, expr)                                                                 \
    static void fn(const double *pa, int64_t sa, const double *pb, int64_t sb, double *po,  \
                   int64_t n, const kf_attrs *A) {                                          \
        (void)pb, (void)sb;                                                                 \
        /* the attributes in locals: po might alias *A, which keeps loads in the loop */    \
        const double alpha = A ? A->alpha : 0.0, beta = A ? A->beta : 0.0;                  \
        (void)alpha, (void)beta;                                                            \
        if (sa == 1)                                                                        \
            for (int64_t j = 0; j < n; j++) {                                               \
                double x = pa[j];                                                           \
                po[j] = (expr);                                                             \
            }                                                                               \
        else                                                                                \
            for (int64_t j = 0; j < n; j++) {                                               \
                double x = pa[j * sa];                                                      \
                po[j] = (expr);                                                             \
            }                                                                               \
    }

/* A binary f64 run from an expression in a and b; the common stride patterns get their
 * own loops so that the compiler vectorises them. */
#define BINARY_F64(fn, expr)                                                                \
    static void fn(const double *pa, int64_t sa, const double *pb, int64_t sb, double *po,  \
                   int64_t n, const kf_attrs *A) {                                          \
        (void)A;                                                                            \
        if (sa == 1 && sb == 1) {                                                           \
            for (int64_t j = 0; j < n; j++) {                                               \
                double a = pa[j], b = pb[j];                                                \
                po[j] = (expr);                                                             \
            }                                                                               \
        } else if (sb == 0) {                                                               \
            double b = pb[0];                                                               \
            for (int64_t j = 0; j < n; j++) {                                               \
                double a = pa[j * sa];                                                      \
                po[j] = (expr);                                                             \
            }                                                                               \
        } else if (sa == 0) {                                                               \
            double a = pa[0];                                                               \
            for (int64_t j = 0; j < n; j++) {                                               \
                double b = pb[j * sb];                                                      \
                po[j] = (expr);                                                             \
            }                                                                               \
        } else {                                                                            \
            for (int64_t j = 0; j < n; j++) {                                               \
                double a = pa[j * sa], b = pb[j * sb];                                      \
                po[j] = (expr);                                                             \
            }                                                                               \
        }                                                                                   \
    }

/* A unary f64 run whose expression needs one of libm's functions: the function's argument
 * (arg, in x) for a block of elements, the function over the block at once (vm, one of
 * vmath.c's kf_vm_), then the expression (in x and the function's value v) in a loop the
 * compiler vectorises. Elementwise the same formula as the scalar one, with libmvec's
 * function for libm's (a few ulp, tests/test_vmath.c). The attributes are alpha and beta. */
#define VM_BLOCK 512
#define UNARY_F64_VM(fn, vm, arg, expr)                                                     \
    static void fn(const double *pa, int64_t sa, const double *pb, int64_t sb, double *po,  \
                   int64_t n, const kf_attrs *A) {                                          \
        (void)pb, (void)sb;                                                                 \
        /* the attributes in locals: po might alias *A, which keeps loads in the loop */    \
        const double alpha = A ? A->alpha : 0.0, beta = A ? A->beta : 0.0;                  \
        (void)alpha, (void)beta;                                                            \
        double t[VM_BLOCK];                                                                 \
        for (int64_t j0 = 0; j0 < n; j0 += VM_BLOCK) {                                      \
            int64_t m = n - j0 < VM_BLOCK ? n - j0 : VM_BLOCK;                              \
            const double *px = pa + j0 * sa;                                                \
            double *py = po + j0;                                                           \
            if (sa == 1)                                                                    \
                for (int64_t j = 0; j < m; j++) {                                           \
                    double x = px[j];                                                       \
                    t[j] = (arg);                                                           \
                }                                                                           \
            else                                                                            \
                for (int64_t j = 0; j < m; j++) {                                           \
                    double x = px[j * sa];                                                  \
                    t[j] = (arg);                                                           \
                }                                                                           \
            vm(t, t, m);                                                                    \
            if (sa == 1)                                                                    \
                for (int64_t j = 0; j < m; j++) {                                           \
                    double x = px[j], v = t[j];                                             \
                    py[j] = (expr);                                                         \
                }                                                                           \
            else                                                                            \
                for (int64_t j = 0; j < m; j++) {                                           \
                    double x = px[j * sa], v = t[j];                                        \
                    py[j] = (expr);                                                         \
                }                                                                           \
        }                                                                                   \
    }

/* sigmoid from e = exp(-|x|) (u_sigmoid's two branches: exp(-x) for x >= 0, exp(x) below;
 * NaN: exp(NaN) / (1 + exp(NaN))) */
#define SIGMOID_V(x, v) (((x) >= 0 ? 1.0 : (v)) / (1.0 + (v)))

/* selu's and elu's expm1 is taken only where x <= 0 (or NaN): for x > 0 the argument is 0,
 * as the value is x there; a large x would send the lane to libm's scalar expm1 (overflow) */
#define NONPOS(x) ((x) > 0 ? 0.0 : (x))

UNARY_F64(f64_relu, x < 0 ? 0.0 : x)
UNARY_F64(f64_leaky_relu, u_sel(x >= 0, x, alpha * x))
UNARY_F64_VM(f64_sigmoid, kf_vm_exp, -fabs(x), SIGMOID_V(x, v))
UNARY_F64_VM(f64_tanh, kf_vm_tanh, x, ((void)x, v))
UNARY_F64_VM(f64_gelu, kf_vm_erfc, -x * M_SQRT1_2, 0.5 * x * v)
UNARY_F64_VM(f64_gelu_tanh, kf_vm_tanh, KF_GELU_C * (x + 0.044715 * x * x * x), 0.5 * x * (1.0 + v))
UNARY_F64_VM(f64_silu, kf_vm_exp, -fabs(x), x * SIGMOID_V(x, v))
UNARY_F64_VM(f64_selu, kf_vm_expm1, NONPOS(x), KF_SELU_SCALE * u_sel(x > 0, x, KF_SELU_ALPHA * v))
UNARY_F64_VM(f64_elu, kf_vm_expm1, NONPOS(x), u_sel(x > 0, x, alpha * v))
UNARY_F64(f64_hardsigmoid, u_clamp(x / 6.0 + 0.5, 0.0, 1.0))
UNARY_F64(f64_hardtanh, u_clamp(x, alpha, beta))
UNARY_F64_VM(f64_softplus, vm_exp_log1p, alpha * x, x * alpha > beta ? x : v / alpha)
UNARY_F64(f64_softsign, x / (1.0 + fabs(x)))
UNARY_F64_VM(f64_exp, kf_vm_exp, x, ((void)x, v))
UNARY_F64_VM(f64_log, kf_vm_log, x, ((void)x, v))
UNARY_F64(f64_sqrt, sqrt(x))
UNARY_F64(f64_rsqrt, 1.0 / sqrt(x))
UNARY_F64(f64_abs, fabs(x))
UNARY_F64(f64_neg, -x)
UNARY_F64(f64_square, x * x)
UNARY_F64(f64_hardswish, x * u_clamp(x + 3.0, 0.0, 6.0) / 6.0)
UNARY_F64(f64_full_like, ((void)x, alpha))
BINARY_F64(f64_add, a + b)
BINARY_F64(f64_sub, a - b)
BINARY_F64(f64_mul, a * b)
BINARY_F64(f64_div, a / b)
BINARY_F64(f64_maximum, b_maximum(a, b))
BINARY_F64(f64_minimum, b_minimum(a, b))
BINARY_F64(f64_pow, pow(a, b))
BINARY_F64(f64_eq, a == b ? 1.0 : 0.0)

/* ------------------------------------------------------ f32 special forms */

/* tanh(softplus(x)) with beta 1 (mish's core): with n = e^x, tanh(log(1 + n)) =
 * n(n + 2) / (n(n + 2) + 2), one exp and one division instead of exp, log1p and tanh (the
 * ALU cost that kept mish from the memory floor on the H200); exact in real arithmetic, a
 * few ulp in float, and taken only below softplus's threshold (<= 20, where n(n + 2)
 * cannot overflow). Past it softplus is x itself. Only where softplus's own input is at
 * hand (the caller sets producer only when it is computed in the same scope). */
static int f32_tanh(const kf_pw_emit *e, kf_buf *o) {
    if (e->producer != KF_OP_SOFTPLUS || !e->producer_in0) return 0;
    if (e->producer_attr->alpha != 1.0 || e->producer_attr->beta > 20.0) return 0;
    char th[64];
    kf_op_float_lit(e->producer_attr->beta, th, sizeof th);
    const char *x = e->producer_in0;
    kf_buf_printf(o, "(%s > %s ? kf_tanhf(%s) : kf_tanh_softplusf(%s))", x, th, x, x);
    return 1;
}

/* pow with a literal exponent: small integers as products, 0.5 as a square root. */
static int f32_pow(const kf_pw_emit *e, kf_buf *o) {
    if (!e->is_const[1]) return 0;
    double x = e->value[1];
    if (x == 0.5) {
        kf_buf_printf(o, "kf_sqrtf(%s)", e->in[0]);
        return 1;
    }
    if (x != floor(x) || fabs(x) > 8) return 0;
    long k = (long)x;
    if (k == 0) {
        kf_buf_puts(o, "1.0f");
        return 1;
    }
    kf_buf_puts(o, k < 0 ? "1.0f / (" : "(");
    for (long i = 0; i < (k < 0 ? -k : k); i++) kf_buf_printf(o, "%s%s", i ? " * " : "", e->in[0]);
    kf_buf_puts(o, ")");
    return 1;
}

/* ---------------------------------------------------------------- records */

#define FLT(nm, field, dflt, aten) {nm, KF_ATTR_FLOAT, offsetof(kf_attrs, field), dflt, aten, NULL}
#define UNARY .cls = KF_CLASS_POINTWISE, .kind = KF_KIND_UNARY, .min_in = 1, .max_in = 1
#define BINARY .cls = KF_CLASS_POINTWISE, .kind = KF_KIND_BINARY, .min_in = 2, .max_in = 2

const kf_op_def kf_ops_pointwise[] = {
    {.op = KF_OP_RELU, .name = "relu", UNARY, .flops = 1, .doc = "max(x, 0)",
     .aten = {"aten.relu"}, .torch = "torch.relu",
     .f64 = f64_relu, .f32 = "($0 < 0.0f ? 0.0f : $0)"},
    {.op = KF_OP_LEAKY_RELU, .name = "leaky_relu", UNARY, .flops = 2,
     .doc = "x if x >= 0 else negative_slope * x",
     .attrs = {FLT("negative_slope", alpha, "0.01", "1")},
     .aten = {"aten.leaky_relu"},
     .torch = "lambda x, negative_slope=0.01: F.leaky_relu(x, negative_slope)",
     .f64 = f64_leaky_relu, .f32 = "($0 >= 0.0f ? $0 : ${negative_slope} * $0)"},
    {.op = KF_OP_SIGMOID, .name = "sigmoid", UNARY, .flops = 4, .doc = "1 / (1 + exp(-x))",
     .aten = {"aten.sigmoid"}, .torch = "torch.sigmoid",
     .f64 = f64_sigmoid, .f32 = "kf_sigmoidf($0)"},
    {.op = KF_OP_TANH, .name = "tanh", UNARY, .flops = 6, .doc = "hyperbolic tangent",
     .aten = {"aten.tanh"}, .torch = "torch.tanh",
     .f64 = f64_tanh, .f32 = "kf_tanhf($0)", .f32_special = f32_tanh},
    {.op = KF_OP_GELU, .name = "gelu", UNARY, .flops = 14, .doc = "x * Phi(x) (exact, erf)",
     .aten = {"aten.gelu"}, .torch = "F.gelu",
     .f64 = f64_gelu, .f32 = "0.5f * $0 * (1.0f + kf_erff($0 * 0.70710678118654752f))"},
    {.op = KF_OP_GELU_TANH, .name = "gelu_tanh", UNARY, .flops = 12,
     .doc = "gelu's tanh approximation", .torch = "lambda x: F.gelu(x, approximate='tanh')",
     .f64 = f64_gelu_tanh,
     .f32 = "0.5f * $0 * (1.0f + kf_tanhf(0.79788456080286536f * ($0 + 0.044715f * $0 * $0 * $0)))"},
    {.op = KF_OP_SILU, .name = "silu", UNARY, .flops = 5, .doc = "x * sigmoid(x)",
     .aten = {"aten.silu"}, .torch = "F.silu",
     .f64 = f64_silu, .f32 = "$0 / (1.0f + kf_expf(-$0))"},
    {.op = KF_OP_SWISH, .name = "swish", UNARY, .flops = 5, .doc = "x * sigmoid(x) (silu)",
     .torch = "F.silu", .f64 = f64_silu, .f32 = "$0 / (1.0f + kf_expf(-$0))"},
    {.op = KF_OP_SELU, .name = "selu", UNARY, .flops = 5, .doc = "scale * (x if x > 0 else alpha * (exp(x) - 1))",
     .aten = {"aten.selu"}, .torch = "F.selu",
     .f64 = f64_selu,
     .f32 = "1.0507009873554804934f * ($0 > 0.0f ? $0 : 1.6732632423543772848f * kf_expm1f($0))"},
    {.op = KF_OP_ELU, .name = "elu", UNARY, .flops = 4, .doc = "x if x > 0 else alpha * (exp(x) - 1)",
     .attrs = {FLT("alpha", alpha, "1.0", "1")},
     .aten = {"aten.elu"}, .torch = "lambda x, alpha=1.0: F.elu(x, alpha)",
     .f64 = f64_elu, .f32 = "($0 > 0.0f ? $0 : ${alpha} * kf_expm1f($0))"},
    {.op = KF_OP_HARDSIGMOID, .name = "hardsigmoid", UNARY, .flops = 4, .doc = "clamp(x / 6 + 1/2, 0, 1)",
     .aten = {"aten.hardsigmoid"}, .torch = "F.hardsigmoid",
     .f64 = f64_hardsigmoid, .f32 = "kf_clampf($0 / 6.0f + 0.5f, 0.0f, 1.0f)"},
    {.op = KF_OP_HARDTANH, .name = "hardtanh", UNARY, .flops = 2, .doc = "clamp(x, min_val, max_val)",
     .attrs = {FLT("min_val", alpha, "-1.0", "1"), FLT("max_val", beta, "1.0", "2")},
     .aten = {"aten.hardtanh"},
     .torch = "lambda x, min_val=-1.0, max_val=1.0: F.hardtanh(x, min_val, max_val)",
     .f64 = f64_hardtanh, .f32 = "kf_clampf($0, ${min_val}, ${max_val})"},
    {.op = KF_OP_SOFTPLUS, .name = "softplus", UNARY, .flops = 5,
     .doc = "log(1 + exp(beta * x)) / beta, x above the threshold",
     .attrs = {FLT("beta", alpha, "1.0", "1"), FLT("threshold", beta, "20.0", "2")},
     .aten = {"aten.softplus"},
     .torch = "lambda x, beta=1.0, threshold=20.0: F.softplus(x, beta, threshold)",
     .f64 = f64_softplus,
     .f32 = "($0 * ${beta} > ${threshold} ? $0 : kf_log1pf(kf_expf($0 * ${beta})) / ${beta})"},
    {.op = KF_OP_SOFTSIGN, .name = "softsign", UNARY, .flops = 3, .doc = "x / (1 + |x|)",
     .aten = {"aten.softsign"}, .torch = "F.softsign",
     .f64 = f64_softsign, .f32 = "$0 / (1.0f + kf_fabsf($0))"},
    {.op = KF_OP_EXP, .name = "exp", UNARY, .flops = 1, .doc = "e^x", .mag = 80,
     .aten = {"aten.exp"}, .torch = "torch.exp", .f64 = f64_exp, .f32 = "kf_expf($0)"},
    {.op = KF_OP_LOG, .name = "log", UNARY, .flops = 1, .domain = KF_DOMAIN_POS,
     .doc = "natural logarithm", .aten = {"aten.log"}, .torch = "torch.log",
     .f64 = f64_log, .f32 = "kf_logf($0)"},
    {.op = KF_OP_SQRT, .name = "sqrt", UNARY, .flops = 1, .domain = KF_DOMAIN_POS,
     .doc = "square root", .aten = {"aten.sqrt"}, .torch = "torch.sqrt",
     .f64 = f64_sqrt, .f32 = "kf_sqrtf($0)"},
    {.op = KF_OP_RSQRT, .name = "rsqrt", UNARY, .flops = 2, .domain = KF_DOMAIN_POS,
     .doc = "1 / sqrt(x)", .aten = {"aten.rsqrt"}, .torch = "torch.rsqrt",
     .f64 = f64_rsqrt, .f32 = "1.0f / kf_sqrtf($0)"},
    {.op = KF_OP_ABS, .name = "abs", UNARY, .flops = 1, .doc = "|x|",
     .aten = {"aten.abs"}, .torch = "torch.abs", .f64 = f64_abs, .f32 = "kf_fabsf($0)"},
    {.op = KF_OP_NEG, .name = "neg", UNARY, .flops = 1, .doc = "-x",
     .aten = {"aten.neg"}, .torch = "torch.neg", .f64 = f64_neg, .f32 = "-$0"},
    {.op = KF_OP_SQUARE, .name = "square", UNARY, .flops = 1, .doc = "x * x",
     .aten = {"aten.square"}, .torch = "torch.square", .f64 = f64_square, .f32 = "$0 * $0"},
    {.op = KF_OP_HARDSWISH, .name = "hardswish", UNARY, .flops = 4, .doc = "x * clamp(x + 3, 0, 6) / 6",
     .aten = {"aten.hardswish"}, .torch = "F.hardswish",
     .f64 = f64_hardswish, .f32 = "$0 * kf_clampf($0 + 3.0f, 0.0f, 6.0f) * (1.0f / 6.0f)"},
    /* the operand gives only the shape: an average pool's divisor is the window sum of
     * full_like(x, value=1) padded with zeros (x * 0 + 1 would be NaN where x is inf or NaN) */
    {.op = KF_OP_FULL_LIKE, .name = "full_like", UNARY, .flops = 1, /* a write; counted as 1 */
     .doc = "value everywhere, in the shape of x (whatever x holds, NaN and inf included)",
     .attrs = {FLT("value", alpha, "0", NULL)},
     .torch = "lambda x, value=0.0: torch.full_like(x, value)",
     .f64 = f64_full_like, .f32 = "${value}"},
    {.op = KF_OP_ADD, .name = "add", BINARY, .flops = 1, .doc = "a + b (also written a + b)",
     .torch = "lambda a, b: a + b", .f64 = f64_add, .f32 = "$0 + $1"},
    {.op = KF_OP_SUB, .name = "sub", BINARY, .flops = 1, .doc = "a - b (also written a - b)",
     .torch = "lambda a, b: a - b", .f64 = f64_sub, .f32 = "$0 - $1"},
    {.op = KF_OP_MUL, .name = "mul", BINARY, .flops = 1, .doc = "a * b (also written a * b)",
     .torch = "lambda a, b: a * b", .f64 = f64_mul, .f32 = "$0 * $1"},
    {.op = KF_OP_DIV, .name = "div", BINARY, .flops = 1, .doc = "a / b (also written a / b)",
     .torch = "lambda a, b: a / b", .f64 = f64_div, .f32 = "$0 / $1"},
    /* NaN-propagating max/min: a + b (NaN) where the operands are unordered, else one
     * compare and select (one vmaxps/vminps on x86). KF_UNORD is each prelude's
     * unordered compare (CPU: __builtin_isunordered, a single vcmpunordps); self-compares
     * such as a != a stop GCC 12 from vectorising some loops. */
    {.op = KF_OP_MAXIMUM, .name = "maximum", BINARY, .flops = 1,
     .doc = "elementwise max, NaN propagating", .aten = {"aten.maximum"},
     .torch = "lambda a, b: torch.maximum(*_pair(a, b))", .f64 = f64_maximum,
     .f32 = "(KF_UNORD($0, $1) ? $0 + $1 : (($1 < $0) ? $0 : $1))"},
    {.op = KF_OP_MINIMUM, .name = "minimum", BINARY, .flops = 1,
     .doc = "elementwise min, NaN propagating", .aten = {"aten.minimum"},
     .torch = "lambda a, b: torch.minimum(*_pair(a, b))", .f64 = f64_minimum,
     .f32 = "(KF_UNORD($0, $1) ? $0 + $1 : (($1 > $0) ? $0 : $1))"},
    {.op = KF_OP_POW, .name = "pow", BINARY, .flops = 2, .domain = KF_DOMAIN_POS, .mag = 20,
     .doc = "a ^ b", .torch = "torch.pow", .f64 = f64_pow, .f32 = "kf_powf($0, $1)",
     .f32_special = f32_pow},
    /* a one-hot mask from class indices: eq(iota, targets) (the importer's cross entropy) */
    {.op = KF_OP_EQ, .name = "eq", BINARY, .flops = 1, .int_operands = 1,
     .doc = "1 where a == b, else 0, as floats (operands may be i64, e.g. class indices)",
     .torch = "lambda a, b: (torch.eq(a, b) if torch.is_tensor(a) else torch.eq(b, a)).float()",
     .f64 = f64_eq, .f32 = "(($0 == $1) ? 1.0f : 0.0f)"},
};
const int kf_ops_pointwise_count = sizeof kf_ops_pointwise / sizeof kf_ops_pointwise[0];
