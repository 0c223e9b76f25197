/*
 * The builtin generator's GPU templates (src/synth/gpu*.c) for every op family:
 *   - opencl: verified against the float64 interpreter through the real pipeline
 *     (plan -> render -> compile -> sandboxed run on the OpenCL device -> compare) at odd
 *     sizes (1, 3, 17, 1000003 elements; odd rows and row counts, one row, rows long
 *     enough for the two-pass variants; matmul at odd M/N/K with transposes and batch
 *     broadcasting) and at two schedule points per task (the default, and one that moves
 *     every parameter to its next value). Skips without an OpenCL device;
 *     KFORGE_TEST_OPENCL picks the device (default "opencl", device 0), and
 *     KFORGE_TEST_GPU=cuda runs the same checks through the CUDA backend instead.
 *   - cuda: every family rendered for a GPU-like device (sub-groups on, so the sub-group
 *     paths are rendered too) and compiled with `nvcc -arch=sm_90 -c`; skips without nvcc.
 *   - metal: every family rendered without error and without a token left over.
 *   - the candidate text itself: launch lines that parse, scratch buffers for
 *     intermediates and partials, the point baked in (label = point, no flags), vector
 *     loads only where the inner dim allows them, sub-group code only on devices with
 *     sub-groups.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/synth.h"
#include "kforge/verify.h"
#include "gpu_common.h"

/* ---- shared helpers ---- */

/* The default point (variant 0) or the one with every parameter moved to its next value
 * (variant 1). Returns 0 when variant 1 equals the default (no parameter has a choice). */
static int point_of(const kf_synth *s, int variant, kf_point *p) {
    const kf_space *sp = kf_synth_space(s);
    kf_synth_default_point(s, p);
    if (variant == 0) return 1;
    int moved = 0;
    for (int i = 0; i < sp->nparams; i++)
        if (sp->p[i].nvalues > 1) {
            p->idx[i] = (p->idx[i] + 1) % sp->p[i].nvalues;
            moved = 1;
        }
    return moved;
}

/* f16/bf16 matmuls: the tensor-core template (cuda, sm_80+). Every operand layout, edges
 * in every dim, contiguous dims that are not multiples of 8 (element-wise tile copies),
 * broadcast batches. */
static const char *const mma_tasks[] = {
    "input a: bf16[256, 512]\ninput b: bf16[512, 384]\noutput c = matmul(a, b)\n",
    "input a: f16[200, 136]\ninput b: f16[136, 72]\noutput c = matmul(a, b)\n",
    "input a: bf16[64, 200]\ninput b: bf16[96, 64]\noutput c = matmul(a, b, transpose_a=true, transpose_b=true)\n",
    "input a: bf16[3, 40, 33]\ninput b: bf16[3, 40, 17]\noutput c = matmul(a, b, transpose_a=true)\n",
    "input a: f16[2, 3, 17, 45]\ninput b: f16[45, 30]\noutput c = matmul(a, b)\n",
    "input a: bf16[130, 96]\ninput b: bf16[70, 96]\noutput c = matmul(a, b, transpose_b=true)\n",
    "input a: bf16[1, 1]\ninput b: bf16[1, 1]\noutput c = matmul(a, b)\n",
};
#define NMMA (int)(sizeof mma_tasks / sizeof mma_tasks[0])
/* points of the mma template's space that render different code */
static const char *const mma_points[] = {"", "st=2 bk=64", "st=4 gm=1", "bm=64 bn=256 wm=32", "bm=256 wn=32 bk=64"};
#define NMMA_POINTS (int)(sizeof mma_points / sizeof mma_points[0])

/* f32 matmuls on tensor cores, 3xTF32 (cuda, sm_80+; the SIMT template's tc=1): every
 * operand layout, edges in every dim (M, N, K not multiples of the tiles), contiguous dims
 * that are not multiples of 4 (element-wise tile copies), odd N (scalar stores), broadcast
 * batches. */
static const char *const tf32_tasks[] = {
    "input a: f32[256, 512]\ninput b: f32[512, 384]\noutput c = matmul(a, b)\n",
    "input a: f32[200, 136]\ninput b: f32[136, 72]\noutput c = matmul(a, b)\n",
    "input a: f32[64, 200]\ninput b: f32[96, 64]\noutput c = matmul(a, b, transpose_a=true, transpose_b=true)\n",
    "input a: f32[3, 40, 33]\ninput b: f32[3, 40, 17]\noutput c = matmul(a, b, transpose_a=true)\n",
    "input a: f32[2, 3, 17, 45]\ninput b: f32[45, 30]\noutput c = matmul(a, b)\n",
    "input a: f32[130, 96]\ninput b: f32[70, 96]\noutput c = matmul(a, b, transpose_b=true)\n",
    "input a: f32[3, 3]\ninput b: f32[3, 2]\noutput c = matmul(a, b)\n",
};
#define NTF32 (int)(sizeof tf32_tasks / sizeof tf32_tasks[0])
/* points of the 3xTF32 path that render different code */
static const char *const tf32_points[] = {"tc=1", "tc=1 st=2 bk=16 mb=2 acc=1", "tc=1 st=4 gm=1", "tc=1 bm=64 bn=256 wm=32",
                                          "tc=1 bm=256 wn=64 bk=16 acc=1", "tc=1 bn=64 wm=32 wn=32"};
#define NTF32_POINTS (int)(sizeof tf32_points / sizeof tf32_points[0])

/* f32 matmuls with a fused pointwise epilogue on the 3xTF32 path (issue 29): a bias over
 * columns with M past the tiles (N even), a bias over rows with a scale and a clamp (N and
 * K odd: scalar stores at the edge, element-wise copies), a residual input beside a batched
 * product, both operands transposed, two results of one chain, a transposed read of another
 * input, a convolution's bias (its implicit GEMM), and a product the tiles divide (no edge
 * checks at all). */
static const char *const tf32_epi_tasks[] = {
    "input a: f32[200, 136]\ninput b: f32[136, 72]\ninput c: f32[72]\noutput y = relu(matmul(a, b) + c)\n",
    "input a: f32[37, 67]\ninput b: f32[67, 45]\ninput r: f32[37, 1]\n"
    "output y = hardtanh(matmul(a, b) * 0.5 + r, min_val=-2.0, max_val=3.0)\n",
    "input p: f32[3, 19, 33]\ninput q: f32[33, 23]\ninput s: f32[3, 19, 23]\noutput y = sigmoid(matmul(p, q)) + s\n",
    "input a: f32[29, 70]\ninput b: f32[31, 29]\n"
    "output y = gelu(matmul(a, b, transpose_a=true, transpose_b=true) - 1.0)\n",
    "input a: f32[21, 13]\ninput b: f32[13, 11]\ninput c: f32[11]\nt = matmul(a, b) + c\noutput y = relu(t)\n"
    "output z = t * t\n",
    "input a: f32[130, 96]\ninput b: f32[70, 96]\ninput d: f32[70, 130]\n"
    "output y = tanh(matmul(a, b, transpose_b=true)) * transpose(d)\n",
    "input x: f32[2, 3, 9, 7]\ninput w: f32[5, 3, 3, 3]\ninput v: f32[5]\noutput y = relu(conv(x, w, v, padding=[1, 1]))\n",
    "input a: f32[256, 512]\ninput b: f32[512, 384]\ninput c: f32[384]\noutput y = silu(matmul(a, b) + c)\n",
};
#define NTF32_EPI (int)(sizeof tf32_epi_tasks / sizeof tf32_epi_tasks[0])

#define RELABEL_TASK                                                                                  \
    "input x: f32[4, 6, 5, 7]\ninput w: f32[6]\n"                                                       \
    "output n = reshape(layer_norm(reshape(x, shape=[4, 2, -1])), shape=[4, 6, 5, 7]) * reshape(w, shape=[-1, 1, 1])\n" \
    "output s = reshape(sum(reshape(x, shape=[24, 35]), axes=[1]), shape=[4, 6])\n"

/* One task per family, rendered for cuda and metal (and checked as text). */
static const char *const family_tasks[] = {
    "input x: f32[1000003]\noutput y = x * sigmoid(x)\n",
    "input x: f32[17, 4, 8]\ninput s: f32[17, 1, 8]\ninput t: f32[4, 1]\n"
    "output y = gelu((x * s - t) * 0.5)\noutput z = exp(-x) + softsign(x) + abs(x) + sqrt(abs(x))\n",
    "input x: f32[3, 1000003]\noutput y = mean(x, axes=[1])\n",
    "input x: f32[17, 3, 5]\noutput y = max(x, axes=[0, 2])\n",
    "input x: f32[3, 17] range(0.5, 1.5)\noutput y = prod(x, axes=[1])\n",
    "input x: f32[100003, 3]\noutput y = sum(x, axes=[0])\n",
    "input x: f32[1000003]\noutput i = argmin(x, axis=0)\n",
    "input x: f32[17, 3, 5]\noutput i = argmax(x, axis=1)\n",
    "input x: f32[1, 1000003]\noutput y = log_softmax(x, axis=-1)\n",
    "input x: f32[3, 17, 5]\noutput y = softmax(x, axis=1)\n",
    "input x: f32[3, 1000003]\ninput w: f32[1000003]\ninput b: f32[1000003]\noutput y = layer_norm(x, w, b)\n",
    "input x: f32[3, 17]\ninput w: f32[17]\noutput y = rms_norm(x, w, eps=1e-5)\n",
    "input a: f32[2, 3, 17, 8]\ninput b: f32[17, 4]\noutput c = matmul(a, b, transpose_a=true)\n",
    "input a: f32[64, 128]\ninput b: f32[96, 128]\noutput c = matmul(a, b, transpose_b=true)\n",
    "input a: f32[17, 8]\ninput b: f32[8, 9]\ninput bias: f32[9]\noutput y = relu(matmul(a, b) + bias)\n",
    /* epilogues at the stores: a residual beside a batched product (4-wide register layout,
     * N % 4 == 0), a matrix-vector product's reduction */
    "input p: f32[3, 64, 33]\ninput q: f32[33, 128]\ninput s: f32[3, 64, 128]\noutput y = sigmoid(matmul(p, q)) + s\n",
    "input a: f32[9, 70001]\ninput b: f32[70001, 1]\ninput c: f32[1]\noutput y = tanh(matmul(a, b) * 0.5 + c)\n",
    /* scans: lines (chunked group scan) and columns */
    "input x: f32[3, 100003]\noutput y = cumsum(x, reverse=true, exclusive=true)\n",
    "input x: f32[17, 3, 5]\noutput y = cumprod(x, axis=1, reverse=true)\n",
    /* elementwise prologues fused into the reduction-family stage they feed */
    "input x: f32[3, 4096]\ninput r: f32[3, 4096]\ninput w: f32[4096]\noutput y = layer_norm(x + r, w)\n",
    "input x: f32[1000003]\ninput y: f32[1000003]\noutput l = mean((x - y) * (x - y))\n",
    "input x: f32[17, 3, 5]\ninput s: f32[3, 1]\noutput y = softmax(x * s, axis=1)\n",
    /* index maps: strided, flipped and padded (guarded) reads; a window materialised for a
     * reduction; a transpose folded into a matmul */
    "input x: f32[17, 9]\ninput y: f32[9, 17]\noutput z = pad(flip(transpose(x), dims=[0]), pads=[1, 2], value=0.5) * 2\n"
    "output w = slice(y, dim=1, start=1, step=3) + slice(slice(flip(x, dims=[0, 1]), dim=0, end=9), dim=1, start=3)\n",
    "input x: f32[4, 33]\ninput a: f32[33, 8]\noutput m = max(unfold(x, dim=1, size=3, step=2, dilation=2), axes=[2])\n"
    "output p = matmul(transpose(a), transpose(x))\n",
    /* gathers: a load at the index's value (fill outside the axis), beside a view read */
    "input x: f32[17, 9]\ninput i: i64[17, 4] range(-1, 9)\noutput y = gather(x, i, axis=1) * 2\n"
    "output l = logsumexp(x, axes=[1], keepdim=true) - gather(x, slice(i, dim=1, end=1), axis=1, fill=0)\n",
    /* a padded max pool (guarded reads, the NaN-propagating maximum) and minimum */
    "input x: f32[2, 3, 9, 9]\noutput m = max(unfold(unfold(pad(x, pads=[1, 1, 1, 1], value=-inf), dim=2, size=3, "
    "step=2), dim=3, size=3, step=2), axes=[-2, -1])\noutput y = maximum(x, 0.5) - minimum(x, -0.5)\n",
    /* relabellings read in place: a group norm's rows, a reduction's result as the output */
    RELABEL_TASK,
    /* a bool mask (a live dropout's, bytes) read in a matmul's epilogue or the softmax's
     * prologue: CUDA helpers' parameters spell its type as the kernels' do */
    "input a: f32[17, 8]\ninput b: f32[8, 9]\ninput m: bool[17, 9]\noutput y = softmax(matmul(a, b) * m * 1.25, axis=1)\n",
    /* more than 8 kernels (alternating_softmaxes(10)'s plan) */
    "input x: f32[6, 33]\ny0 = softmax(x, axis=0)\ny1 = softmax(y0, axis=1)\ny2 = softmax(y1, axis=0)\n"
    "y3 = softmax(y2, axis=1)\ny4 = softmax(y3, axis=0)\ny5 = softmax(y4, axis=1)\ny6 = softmax(y5, axis=0)\n"
    "y7 = softmax(y6, axis=1)\ny8 = softmax(y7, axis=0)\noutput y9 = softmax(y8, axis=1)\n",
};
#define NFAMILY (int)(sizeof family_tasks / sizeof family_tasks[0])

/* ---- opencl: the real pipeline ---- */

/* Check the task at the default point and at the "every parameter moved" point. */
static void check_task(const char *text) {
    kf_error err = {0};
    kf_graph *g = parse(text);
    kf_synth *s = NULL;
    cr_assert_eq(kf_synth_plan(g, ocl->info.platform, &ocl->info, &s, &err), KF_OK, "plan: %s\n%s", err.msg, text);
    kf_verify_ctx *ctx = test_ctx(g, 42, 2);
    for (int variant = 0; variant < 2; variant++) {
        kf_point p;
        if (!point_of(s, variant, &p)) break;
        expect_verifies(s, ctx, &p, text, NULL);
    }
    kf_verify_ctx_free(ctx);
    kf_synth_free(s);
    kf_graph_free(g);
}

static void check_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void check_fmt(const char *fmt, ...) {
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    check_task(text);
}

/* Eight stages: as many launches as a candidate holds, more parameters than a space holds
 * (d is an output too, so the softmax does not take d's stage as its prologue; a is a
 * chain of two ops, so b does not compute it again, kf_synth_remat). */
static const char eight_stages[] = "input x: f32[17, 33]\n"
                                   "a = exp(x * 2)\ns = sum(a, axes=[1], keepdim=true)\nb = a / s\n"
                                   "m = max(b, axes=[1], keepdim=true)\nc = b - m\n"
                                   "n = min(c, axes=[1], keepdim=true)\noutput d = c * n\n"
                                   "output y = softmax(d)\n";

/* n softmaxes over alternating axes: n kernels and n - 1 scratch buffers (a softmax over
 * one axis of another's result takes no prologue), as level 2's conv_transpose + batch
 * norm + pool + group norm chains plan with 11 and 12 on CUDA */
static char *alternating_softmaxes(int n) {
    kf_buf b = {0};
    kf_buf_puts(&b, "input x: f32[6, 33]\n");
    for (int i = 0; i < n; i++) {
        char prev[16];
        snprintf(prev, sizeof prev, i ? "y%d" : "x", i - 1);
        kf_buf_printf(&b, "%sy%d = softmax(%s, axis=%d)\n", i == n - 1 ? "output " : "", i, prev, i % 2);
    }
    return kf_buf_take(&b);
}

TestSuite(gpu_verify, .init = ocl_setup, .fini = ocl_teardown, .timeout = 600);

static const long kSizes[] = {1, 3, 17, 1000003};

Test(gpu_verify, elementwise_odd_sizes) {
    NEED_OCL();
    for (int i = 0; i < 4; i++) check_fmt("input x: f32[%ld]\noutput y = x * sigmoid(x)\n", kSizes[i]);
}

Test(gpu_verify, elementwise_all_ops) {
    NEED_OCL();
    check_task("input x: f32[17, 3]\n"
               "a = relu(x) + leaky_relu(x, negative_slope=0.2) + tanh(x) + gelu(x) + gelu_tanh(x)\n"
               "b = silu(x) + swish(x) + selu(x) + elu(x, alpha=0.7) + hardsigmoid(x)\n"
               "c = hardtanh(x, min_val=-0.5, max_val=0.8) + softplus(x) + softsign(x) + exp(x)\n"
               "d = abs(x) + neg(x) + square(x) + sigmoid(x)\n"
               "output y = a + b + c + d\n");
    check_task("input x: f32[1000003] range(0.01, 8)\n"
               "output y = log(x) + sqrt(x) + rsqrt(x) + pow(x, 1.7) + pow(x, 2.0) + pow(x, -1.0)\n");
}

Test(gpu_verify, tanh_of_softplus) {
    NEED_OCL();
    check_task("input x: f32[1000003]\noutput y = x * tanh(softplus(x))\n");
    check_task("input x: f32[3, 17]\noutput y = tanh(softplus(x, threshold=5.0))\n");
}

Test(gpu_verify, elementwise_broadcast_and_vectors) {
    NEED_OCL();
    check_task("input x: f32[3, 17]\ninput b: f32[17]\noutput y = gelu_tanh(x + b)\n");
    /* inner dim a multiple of 4: vector loads of x and y, the broadcast bias as scalars */
    check_task("input x: f32[5, 16]\ninput b: f32[16]\ninput c: f32[5, 1]\noutput y = x * b - c\n");
    check_task("input a: f32[3, 1]\ninput b: f32[1, 4]\noutput y = maximum(a, b) - minimum(a, 0.25) / (2.0 - b)\n");
    check_task("input x: f32[17, 5, 3]\ninput s: f32[17, 1, 3]\ninput t: f32[5, 1]\n"
               "output y = (x * s - t) * 0.5\noutput z = exp(-x)\n");
    check_task("input x: f32[1, 1000003]\ninput c: f32[1, 1]\noutput y = x * c + 1.0\n");
}

Test(gpu_verify, reductions_all_layouts) {
    NEED_OCL();
    /* the row layout, the col layout and mixed groups, each with an additive op (sum or
     * mean: the mean's division at the store) and an ordered one (max or min: the init at
     * -inf/+inf and the NaN-propagating merge); every op at least once. An op's code (its
     * init, merge and store: mop_of, mop_init, emit_merge, emit_store in gpu_reduce.c) is
     * one set of functions every layout calls, a layout's one emitter every op goes
     * through, so these six run every path the 4 x 3 product did (it was 24 of this file's
     * ~215 PoCL verifications; docs/design-notes.md, "CI under an hour") */
    static const char *const row_col_mixed[][3] = {{"sum", "mean", "max"}, {"max", "min", "mean"}};
    for (int k = 0; k < 2; k++) {
        check_fmt("input x: f32[3, 17]\noutput y = %s(x, axes=[1], keepdim=true)\n", row_col_mixed[k][0]);
        check_fmt("input x: f32[17, 3]\noutput y = %s(x, axes=[0])\n", row_col_mixed[k][1]);
        check_fmt("input x: f32[17, 3, 5]\noutput y = %s(x, axes=[0, 2])\n", row_col_mixed[k][2]);
    }
    check_task("input x: f32[17]\noutput y = sum(x)\n");
    check_task("input x: f32[3, 17, 5]\noutput y = max(x, axes=[1], keepdim=true)\n");
    check_task("input x: f32[1, 17]\noutput y = min(x, axes=[0])\n"); /* nothing reduced */
    check_task("input x: f32[3, 17] range(0.5, 1.5)\noutput y = prod(x, axes=[1])\n"
               "output z = prod(x, axes=[0], keepdim=true)\n");
}

Test(gpu_verify, reductions_two_pass) {
    NEED_OCL();
    check_task("input x: f32[1000003]\noutput y = sum(x)\n");
    check_task("input x: f32[1000003]\noutput y = max(x)\n");
    check_task("input x: f32[3, 1000003]\noutput y = mean(x, axes=[1])\n");
    check_task("input x: f32[100003, 3]\noutput y = min(x, axes=[0])\n");
}

Test(gpu_verify, argmax_argmin) {
    NEED_OCL();
    check_task("input x: f32[3, 17]\noutput i = argmax(x, axis=1)\noutput j = argmin(x, axis=0)\n");
    check_task("input x: f32[17, 3, 5]\noutput i = argmax(x, axis=1, keepdim=true)\n");
    check_task("input x: f32[1000003]\noutput i = argmin(x, axis=0)\n");
    check_task("input x: f32[100003, 3]\noutput i = argmax(x, axis=0)\n");
}

Test(gpu_verify, softmax_family) {
    NEED_OCL();
    check_task("input x: f32[3, 17]\noutput y = softmax(x)\n");
    check_task("input x: f32[17, 3]\noutput y = softmax(x, axis=0)\noutput z = log_softmax(x, axis=0)\n");
    check_task("input x: f32[3, 17, 5]\noutput y = log_softmax(x, axis=1)\n");
    check_task("input x: f32[1, 1000003]\noutput y = softmax(x, axis=-1)\n");
    check_task("input x: f32[1, 1]\noutput y = log_softmax(x, axis=-1)\n");
}

Test(gpu_verify, norms) {
    NEED_OCL();
    check_task("input x: f32[3, 17]\ninput w: f32[17]\ninput b: f32[17]\noutput y = layer_norm(x, w, b)\n");
    check_task("input x: f32[17, 3, 5]\noutput y = layer_norm(x, axes=[1, 2])\n");
    check_task("input x: f32[3, 17]\ninput w: f32[17]\noutput y = rms_norm(x, w, eps=1e-5)\n");
    check_task("input x: f32[3, 1000003]\noutput y = rms_norm(x)\n");
    check_task("input x: f32[1, 100003]\ninput w: f32[100003]\ninput b: f32[100003]\noutput y = layer_norm(x, w, b)\n");
}

/* Softmax's max and sum of exp from one read (online), layer norm's mean and M2 from one
 * read (blocks of 8 merged), on every distribution: per-lane runs long enough for the
 * blocked fold (20000 / 32 > 512), two-pass splits, rows shorter than a team. */
Test(gpu_verify, row_statistics_in_one_read) {
    NEED_OCL();
    const char *sm = "input x: f32[3, 20000]\noutput y = softmax(x)\noutput z = log_softmax(x)\n";
    check_point_sets(sm, "ts=32 split=1", "const float lmx", 6);
    check_point_sets(sm, "ts=32 split=4", "const float lmx", 6);
    /* short rows: rc=0, or a GPU device would keep them in registers (one read already) */
    check_point_sets("input x: f32[5, 7]\noutput y = softmax(x)\n", "ts=32 rc=0", "const float lmx", 6);
    const char *ln = "input x: f32[3, 20000]\ninput w: f32[20000]\ninput b: f32[20000]\n"
                     "output y = layer_norm(x, w, b)\n";
    check_point_sets(ln, "ts=32 split=1", "nacc", 6);
    check_point_sets(ln, "ts=64 split=16", "nacc", 6);
    check_point_sets("input x: f32[4, 13]\noutput y = layer_norm(x)\n", "ts=8 rc=0", "nacc", 6);
}

/* logsumexp's own GPU kernel: rows over one or several innermost axes, keepdim, one
 * read with the long-run blocks, the two-pass split, a row shorter than the team, and the
 * cross-entropy chain that reads it (the gather joins the stage after it); every
 * distribution. */
Test(gpu_verify, logsumexp_rows) {
    NEED_OCL();
    check_point_sets("input x: f32[5, 3001]\noutput y = logsumexp(x, axes=[1])\n", "ts=32", "logsumexp, row layout", 6);
    check_point_sets("input x: f32[3, 17, 5]\noutput y = logsumexp(x, axes=[1, 2], keepdim=true)\n", "ts=32",
                     "logsumexp, row layout", 6);
    const char *long_rows = "input x: f32[3, 20000]\noutput y = logsumexp(x, axes=[1])\n";
    check_point_sets(long_rows, "ts=32 split=1", "logsumexp, row layout", 6);
    check_point_sets(long_rows, "ts=32 split=4", "pass 2 of 2: merge", 6);
    check_point_sets("input x: f32[4, 3]\noutput y = logsumexp(x, axes=[1])\n", "ts=32", "logsumexp, row layout", 6);
    check_task("input x: f32[64, 1000]\ninput t: i64[64] range(0, 999)\n"
               "output loss = mean(logsumexp(x, axes=[1], keepdim=true) - gather(x, reshape(t, shape=[64, 1]), axis=1, fill=0))\n");
}

Test(gpu_verify, scans) {
    NEED_OCL();
    check_task("input x: f32[3, 17]\noutput y = cumsum(x)\noutput z = cumprod(x, reverse=true)\n");
    check_task("input x: f32[17, 3, 5]\noutput y = cumsum(x, axis=0, exclusive=true)\n"
               "output z = cumsum(x, axis=1, reverse=true, exclusive=true)\n");
    check_task("input x: f32[2, 100003]\noutput y = cumsum(x, reverse=true)\n");
    check_task("input x: f32[3, 7001] range(0.999, 1.001)\noutput y = cumprod(x, exclusive=true)\n");
    check_task("input x: f32[1]\noutput y = cumsum(x, exclusive=true)\n");
}

Test(gpu_verify, matmul_family) {
    NEED_OCL();
    check_task("input a: f32[1, 1]\ninput b: f32[1, 1]\noutput c = matmul(a, b)\n");
    check_task("input a: f32[3, 17]\ninput b: f32[17, 5]\noutput c = matmul(a, b)\n");
    check_task("input a: f32[33, 67]\ninput b: f32[129, 33]\noutput c = matmul(a, b, transpose_a=true, transpose_b=true)\n");
    check_task("input a: f32[2, 3, 17, 5]\ninput b: f32[17, 4]\noutput c = matmul(a, b, transpose_a=true)\n");
    check_task("input a: f32[3, 1, 20, 12]\ninput b: f32[4, 12, 8]\noutput c = matmul(a, b)\n");
    /* sizes the tiles divide: no bounds checks, vector tile loads */
    check_task("input a: f32[64, 128]\ninput b: f32[96, 128]\noutput c = matmul(a, b, transpose_b=true)\n");
}

/* A matrix times a vector (N == 1) and a vector times a matrix (M == 1) are planned as a
 * reduction of a product (src/synth/gemv.c) and verify against the task's matmul, with odd
 * K, a transposed vector and a bias after the product; a transposed matrix keeps the GEMM
 * (the last task). */
static const char *gemv_tasks[] = {
    "input a: f32[37, 1031]\ninput b: f32[1031, 1]\noutput c = matmul(a, b)\n",
    "input a: f32[1, 1031]\ninput b: f32[1031, 45]\noutput c = matmul(a, b)\n",
    "input a: f32[37, 1031]\ninput b: f32[1, 1031]\noutput c = matmul(a, b, transpose_b=true)\n",
    "input a: f32[9, 70001]\ninput b: f32[70001, 1]\ninput bias: f32[1]\noutput c = relu(matmul(a, b) + bias)\n",
    "input a: f32[1031, 37]\ninput b: f32[1, 1031]\noutput c = matmul(a, b, transpose_a=true, transpose_b=true)\n",
};
#define NGEMV_REDUCED 4 /* the first four are reductions */

Test(gpu_verify, matrix_vector_products_as_reductions) {
    NEED_OCL();
    /* gemv_tasks[3] (the bias and relu after the product) is the same task that
     * gpu_verify/epilogue_fusion verifies at the same two points (and with the epilogue apart), so it is
     * not verified a second time here; its plan is checked by
     * gpu_text/matrix_vector_products_plan_as_reductions */
    for (size_t t = 0; t < sizeof gemv_tasks / sizeof gemv_tasks[0]; t++)
        if (t != 3) check_task(gemv_tasks[t]);
}

/* f16/bf16 on tensor cores: only where the device under test runs them (KFORGE_TEST_GPU=cuda
 * on sm_80 or newer) */
Test(gpu_verify, mma_matmul) {
    NEED_OCL();
    if (!tc_device_or_skip("the tensor-core template")) return;
    for (int t = 0; t < NMMA; t++) {
        for (int v = 0; v < NMMA_POINTS; v++) {
            /* every point on the first task, the default and one moved point elsewhere */
            if (t > 0 && v > 1) break;
            check_point(mma_tasks[t], mma_points[v], v ? NULL : "mma.sync");
        }
    }
}

/* f32 on tensor cores (3xTF32, tc=1): only where the device under test runs them
 * (KFORGE_TEST_GPU=cuda on sm_80 or newer); verified against the float64 reference like
 * every candidate */
Test(gpu_verify, tf32_matmul) {
    NEED_OCL();
    if (!tc_device_or_skip("the 3xTF32 path")) return;
    for (int t = 0; t < NTF32; t++) {
        for (int v = 0; v < NTF32_POINTS; v++) {
            if (t > 0 && v > 1) break; /* every point on the first task, two elsewhere */
            /* every distribution (wide magnitudes included) on the first point */
            check_point_sets(tf32_tasks[t], tf32_points[v], "cvt.rna.tf32.f32", t == 0 && v == 0 ? 6 : 2);
        }
    }
}

/* The 3xTF32 path with a fused epilogue (tc=1, epi=1: the stores call kf_epi<y>), at the
 * tf32 points that render different code, and with the chain apart (tc=1 epi=0: the
 * product stored by the tensor-core kernel, the chain a kernel of its own), against the
 * float64 reference; only where the device under test runs the path (KFORGE_TEST_GPU=cuda
 * on sm_80 or newer). */
Test(gpu_verify, tf32_epilogue) {
    NEED_OCL();
    if (!tc_device_or_skip("the 3xTF32 path")) return;
    static const char *const mma = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";
    for (int t = 0; t < NTF32_EPI; t++) {
        kf_error err = {0};
        kf_graph *g = parse(tf32_epi_tasks[t]);
        kf_synth *s = NULL;
        cr_assert_eq(kf_synth_plan(g, ocl->info.platform, &ocl->info, &s, &err), KF_OK, "plan: %s", err.msg);
        cr_expect(strstr(kf_synth_describe(s), "+ewise[") != NULL, "task:\n%s\nplan %s: no epilogue",
                  tf32_epi_tasks[t], kf_synth_describe(s));
        kf_verify_ctx *ctx = test_ctx(g, 29, 2);
        for (int v = 0; v <= NTF32_POINTS; v++) {
            if (t > 0 && v > 1 && v < NTF32_POINTS) continue; /* every point on the first task */
            const int apart = v == NTF32_POINTS;
            char assign[128];
            snprintf(assign, sizeof assign, "%s epi=%d", apart ? "tc=1" : tf32_points[v], apart ? 0 : 1);
            kf_point p;
            cr_assert(point_assign(s, assign, &p), "task:\n%s\nno parameter for '%s' in %s", tf32_epi_tasks[t], assign,
                      kf_synth_describe(s));
            kf_candidate c;
            cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "render: %s", err.msg);
            cr_expect(strstr(c.source, mma) != NULL, "[%s]: no 3xTF32 kernel", c.label);
            cr_expect_eq(strstr(c.source, "kf_epi") != NULL, !apart, "[%s]: kf_epi", c.label);
            kf_candidate_clear(&c);
            expect_verifies(s, ctx, &p, tf32_epi_tasks[t], apart ? mma : "kf_epi");
        }
        kf_verify_ctx_free(ctx);
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

/* A copy of src with the first occurrence of `from` after `after` replaced by `to`; NULL
 * when there is none. */
static char *mutate(const char *src, const char *after, const char *from, const char *to) {
    const char *a = strstr(src, after), *at = a ? strstr(a, from) : NULL;
    if (!at) return NULL;
    kf_buf b = {0};
    kf_buf_putn(&b, src, (size_t)(at - src));
    kf_buf_puts(&b, to);
    kf_buf_puts(&b, at + strlen(from));
    return kf_buf_take(&b);
}

/* Planted faults in a fused epilogue are caught by the checks gpu_verify/tf32_epilogue and
 * gpu_verify/epilogue_fusion make: the helper kf_epi<y> with its first operand read (a bias
 * over columns, a bias over rows, a residual) replaced by 0, and on the 3xTF32 path (cuda
 * sm_80+, tc=1; elsewhere the SIMT kernel, whose stores call the same helper) the second
 * column of a lane's pair stored with the first one's value. The unmutated candidate
 * verifies first, so the mutation alone makes the difference. */
Test(gpu_verify, epilogue_faults_are_caught) {
    NEED_OCL();
    int sm = 0;
    const int tc = strcmp(ocl->info.platform, "cuda") == 0 && sscanf(ocl->info.arch, "sm_%d", &sm) == 1 && sm >= 80;
    for (int t = 0; t < 3; t++) {
        const char *text = tf32_epi_tasks[t];
        kf_error err = {0};
        kf_graph *g = parse(text);
        kf_synth *s = NULL;
        cr_assert_eq(kf_synth_plan(g, ocl->info.platform, &ocl->info, &s, &err), KF_OK, "plan: %s", err.msg);
        kf_verify_ctx *ctx = test_ctx(g, 29, 2);
        kf_point p;
        cr_assert(point_assign(s, tc ? "tc=1 epi=1" : "epi=1", &p), "%s", kf_synth_describe(s));
        expect_verifies(s, ctx, &p, text, "kf_epi");
        kf_candidate c;
        cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "render: %s", err.msg);
        /* the helper's first read of another operand: "const float r<i> = b<v>[off<r>];" */
        char read[64] = "";
        const char *def = strstr(c.source, "void kf_epi");
        cr_assert_not_null(def);
        for (const char *q = strstr(def, "= b"); q && !read[0]; q = strstr(q + 1, "= b")) {
            int v = -1, r = -1, n = 0;
            if (sscanf(q, "= b%d[off%d];%n", &v, &r, &n) == 2 && n > 0) /* "b<v>[off<r>]" */
                snprintf(read, sizeof read, "%.*s", n - 3, q + 2);
        }
        cr_assert(read[0], "no operand read in\n%s", def);
        struct { const char *after, *from, *to; } faults[] = {
            {"void kf_epi", read, "0.0f"},
            {"__global__", "acc[mi][ni][2 * h + x]", "acc[mi][ni][2 * h]"},
        };
        for (int f = 0; f < (tc ? 2 : 1); f++) {
            char *src = mutate(c.source, faults[f].after, faults[f].from, faults[f].to);
            cr_assert_not_null(src, "task:\n%s\nno '%s' to mutate in\n%s", text, faults[f].from, c.source);
            kf_candidate m;
            cr_assert_eq(kf_candidate_init(&m, c.platform, src, c.entry, &err), KF_OK, "%s", err.msg);
            free(src);
            kf_vresult r;
            cr_assert_eq(kf_verify_candidate(ctx, ocl, &m, &r, &err), KF_OK, "verify: %s", err.msg);
            cr_expect_eq(r.status, KF_V_MISMATCH, "task:\n%s\n'%s' -> '%s' gave %s: %s", text, faults[f].from,
                         faults[f].to, kf_vstatus_name(r.status), r.detail);
            kf_candidate_clear(&m);
        }
        kf_candidate_clear(&c);
        kf_verify_ctx_free(ctx);
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

Test(gpu_verify, matmul_double_buffer) {
    NEED_OCL();
    /* tiles that the group's items do not divide evenly (the `e < n` guard on the prefetch
     * registers), edges in every dim, both transposes, and a batch */
    check_point("input a: f32[33, 67]\ninput b: f32[129, 33]\noutput c = matmul(a, b, transpose_a=true, transpose_b=true)\n",
                "tm=16 tn=16 rm=1 rn=1 tk=8 db=1", "if (e < ");
    check_point("input a: f32[16, 64]\ninput b: f32[64, 1024]\noutput c = matmul(a, b)\n",
                "tm=16 rm=1 rn=1 tk=8 db=1", "double-buffered");
    check_point("input a: f32[3, 70, 21]\ninput b: f32[21, 45]\noutput c = matmul(a, b)\n",
                "tm=32 tn=32 rm=4 rn=4 tk=8 db=1 rl=1", "double-buffered");
}

Test(gpu_verify, multi_stage_graphs) {
    NEED_OCL();
    /* elementwise -> reduction -> elementwise; temporaries cross kernels in scratch */
    check_task("input x: f32[17, 33]\ninput w: f32[33]\n"
               "t = x * w\ns = sum(t, axes=[1], keepdim=true)\noutput y = t / (s + 100.0)\n");
    check_task("input a: f32[17, 8]\ninput b: f32[8, 9]\ninput bias: f32[9]\n"
               "output y = relu(matmul(a, b) + bias)\n");
    check_task("input x: f32[4, 5000]\ny = layer_norm(x)\nz = sum(y * y, axes=[1], keepdim=true)\n"
               "output o = y / z\noutput i = argmax(y, axis=1)\n");
    check_task(eight_stages);
    char *eleven = alternating_softmaxes(11);
    check_task(eleven);
    free(eleven);
}

/* The plan fuses an elementwise producer into the stage it feeds ("op(ewise[..])") as
 * fused says, and the candidates verify on the device at the default and moved points. */
static void check_fusion(const char *text, int fused) {
    kf_error err = {0};
    kf_graph *g = parse(text);
    kf_synth *s = NULL;
    cr_assert_eq(kf_synth_plan(g, ocl->info.platform, &ocl->info, &s, &err), KF_OK, "plan: %s\n%s", err.msg, text);
    const char *d = kf_synth_describe(s);
    cr_expect_eq(strstr(d, "(ewise") != NULL, fused, "task:\n%s\nplan %s: expected %s", text, d,
                 fused ? "a fused prologue" : "no fusion");
    kf_synth_free(s);
    kf_graph_free(g);
    check_task(text);
}

Test(gpu_verify, prologue_fusion) {
    NEED_OCL();
    /* row and col reductions (broadcast operands), a two-pass full reduction, argmax */
    check_fusion("input x: f32[5, 33]\ninput m: f32[5, 1]\noutput y = sum(exp(x - m), axes=[1], keepdim=true)\n", 1);
    check_fusion("input x: f32[17, 3, 5]\ninput s: f32[3, 1]\noutput y = max(x * s, axes=[0, 2])\n", 1);
    check_fusion("input x: f32[100003, 3]\ninput b: f32[3]\noutput y = sum(x - b, axes=[0])\n", 1);
    check_fusion("input x: f32[1000003]\ninput y: f32[1000003]\noutput l = mean((x - y) * (x - y))\n", 1);
    check_fusion("input x: f32[4, 33]\noutput i = argmax(abs(x) - 1.0, axis=1)\n", 1);
    /* softmax rows (rows in registers at some points), columns; norms; a long row */
    check_fusion("input x: f32[3, 17]\noutput y = softmax(x * 0.125)\n", 1);
    check_fusion("input x: f32[17, 3]\ninput b: f32[3]\noutput y = log_softmax(x - b, axis=0)\n", 1);
    check_fusion("input x: f32[3, 256]\ninput r: f32[3, 256]\ninput w: f32[256]\ninput b: f32[256]\n"
                 "output y = layer_norm(x + r, w, b)\n", 1);
    check_fusion("input x: f32[3, 100003]\noutput y = rms_norm(x * 2.0)\n", 1);
    check_fusion("input x: f32[5, 33]\ninput m: bool[5, 33]\noutput y = softmax(x * m * 1.25, axis=1)\n", 1);
    /* not fused: the producer's result is also an output */
    check_fusion("input x: f32[5, 33]\nt = x * x\noutput u = t + 1.0\noutput s = sum(t, axes=[1])\n", 0);
}

/* The plan computes an elementwise reader in its matmul's or reduction's stores
 * ("+ewise[..]") with the parameter "<stage>epi"; the candidates verify on the device at
 * the default point (fused: the stores call kf_epi<y>, one kernel fewer than apart), at the
 * moved point, at `assign` (when given), and with every epi=0 (the reader its own kernel,
 * the product stored); a pin of "epi" to 0 (kforge synth --no-fuse) describes the plan
 * apart. */
static void check_epilogue(const char *text, const char *assign) {
    kf_error err = {0};
    kf_graph *g = parse(text);
    kf_synth *s = NULL;
    cr_assert_eq(kf_synth_plan(g, ocl->info.platform, &ocl->info, &s, &err), KF_OK, "plan: %s\n%s", err.msg, text);
    const char *d = kf_synth_describe(s);
    cr_expect(strstr(d, "+ewise[") != NULL, "task:\n%s\nplan %s: no epilogue", text, d);
    const kf_space *sp = kf_synth_space(s);
    int nepi = 0;
    for (int i = 0; i < sp->nparams; i++) {
        size_t ln = strlen(sp->p[i].name);
        nepi += ln >= 4 && strcmp(sp->p[i].name + ln - 4, ".epi") == 0 && sp->p[i].nvalues == 2;
    }
    cr_assert_geq(nepi, 1, "task:\n%s\nplan %s: no epi parameter", text, d);
    kf_verify_ctx *ctx = test_ctx(g, 29, 2);
    kf_point p, apart;
    kf_synth_default_point(s, &p);
    kf_candidate c;
    cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "render: %s", err.msg);
    const int fused_launches = count_launches(c.source);
    kf_candidate_clear(&c);
    expect_verifies(s, ctx, &p, text, "kf_epi");
    if (point_of(s, 1, &p)) expect_verifies(s, ctx, &p, text, NULL);
    if (assign) {
        cr_assert(point_assign(s, assign, &p), "no parameter for '%s' in %s", assign, d);
        expect_verifies(s, ctx, &p, text, "kf_epi");
    }
    kf_synth_default_point(s, &apart);
    for (int i = 0; i < sp->nparams; i++) {
        size_t ln = strlen(sp->p[i].name);
        if (ln >= 4 && strcmp(sp->p[i].name + ln - 4, ".epi") == 0) apart.idx[i] = sp->p[i].values[0] == 0 ? 0 : 1;
    }
    cr_assert_eq(kf_synth_render(s, &apart, &c, &err), KF_OK, "render: %s", err.msg);
    cr_expect(strstr(c.source, "kf_epi") == NULL, "epi=0 still fuses:\n%s", c.source);
    cr_expect_eq(count_launches(c.source), fused_launches + nepi, "task:\n%s\nfused %d launches, apart %d", text,
                 fused_launches, count_launches(c.source));
    kf_candidate_clear(&c);
    expect_verifies(s, ctx, &apart, text, NULL);
    cr_expect_eq(kf_synth_pin(s, "epi", 0), nepi);
    cr_expect(strstr(kf_synth_describe(s), "+ewise[") == NULL, "pinned apart, yet %s", kf_synth_describe(s));
    kf_verify_ctx_free(ctx);
    kf_synth_free(s);
    kf_graph_free(g);
}

/* Pointwise epilogues at the GPU matmul's stores (issue 29) at shapes the tiles do not
 * divide (M, N, K odd): a bias over columns, a bias over rows with a scale and a clamp, a
 * residual input beside a batched product, transposed operands, two results, a transposed
 * read of another input, a convolution's bias (its implicit GEMM); with the 4-wide register
 * layout where N % 4 == 0 (the stores are scalar there); and an axis reduction's (a
 * matrix-vector product planned as one, gemv.c) with its two-pass form. */
Test(gpu_verify, epilogue_fusion) {
    NEED_OCL();
    check_epilogue("input a: f32[37, 67]\ninput b: f32[67, 45]\ninput c: f32[45]\noutput y = relu(matmul(a, b) + c)\n",
                   "tm=16 tn=16 rm=2 rn=2 tk=8");
    check_epilogue("input a: f32[37, 67]\ninput b: f32[67, 45]\ninput r: f32[37, 1]\n"
                   "output y = hardtanh(matmul(a, b) * 0.5 + r, min_val=-2.0, max_val=3.0)\n", NULL);
    check_epilogue("input p: f32[3, 19, 33]\ninput q: f32[33, 23]\ninput s: f32[3, 19, 23]\n"
                   "output y = sigmoid(matmul(p, q)) + s\n", "tm=16 tn=16 rm=4 rn=4 tk=8 db=1");
    check_epilogue("input a: f32[29, 70]\ninput b: f32[31, 29]\noutput y = gelu(matmul(a, b, transpose_a=true, "
                   "transpose_b=true) - 1.0)\n", NULL);
    check_epilogue("input a: f32[21, 13]\ninput b: f32[13, 11]\ninput c: f32[11]\n"
                   "t = matmul(a, b) + c\noutput y = relu(t)\noutput z = t * t\n", NULL);
    check_epilogue("input a: f32[21, 13]\ninput b: f32[13, 11]\ninput d: f32[11, 21]\n"
                   "output y = tanh(matmul(a, b)) * transpose(d)\n", NULL);
    check_epilogue("input x: f32[2, 3, 9, 7]\ninput w: f32[5, 3, 3, 3]\ninput v: f32[5]\n"
                   "output y = relu(conv(x, w, v, padding=[1, 1]))\n", NULL);
    check_epilogue("input a: f32[36, 67]\ninput b: f32[67, 64]\ninput c: f32[64]\noutput y = silu(matmul(a, b) + c)\n",
                   "tm=32 tn=32 rm=4 rn=4 tk=8 rl=1");
    check_epilogue("input a: f32[9, 70001]\ninput b: f32[70001, 1]\ninput bias: f32[1]\n"
                   "output c = relu(matmul(a, b) + bias)\n", NULL);
    check_epilogue("input x: f32[13, 1031]\ninput b: f32[13]\noutput y = mean(x, axes=[1]) * 2.0 + b\n", NULL);
}

/* ---- cuda: rendered and compiled with nvcc ---- */

Test(gpu_cuda, every_family_compiles_with_nvcc, .timeout = 600) {
    if (!nvcc_or_skip()) return;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/test-work/gpu-cuda-%ld", KF_BUILD_DIR, (long)getpid());
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(dir, &err), KF_OK, "%s", err.msg);
    kf_device_info dev;
    gpu_like(&dev, "cuda");
    int compiled = 0;
    for (int t = 0; t < NFAMILY; t++) {
        kf_graph *g = parse(family_tasks[t]);
        kf_synth *s = NULL;
        cr_assert_eq(kf_synth_plan(g, "cuda", &dev, &s, &err), KF_OK, "plan: %s", err.msg);
        /* the moved point only where it renders a different schedule family (two-pass,
         * sub-groups off/on): the default for all, the moved one for every other task */
        for (int variant = 0; variant < (t % 2 ? 2 : 1); variant++) {
            kf_point p;
            if (!point_of(s, variant, &p)) break;
            kf_candidate c;
            cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "render: %s", err.msg);
            cr_assert_str_eq(c.platform, "cuda");
            char path[600];
            snprintf(path, sizeof path, "%s/k%d_%d.cu", dir, t, variant);
            expect_nvcc_builds(path, c.source, strlen(c.source), "", family_tasks[t], c.label);
            compiled++;
            kf_candidate_clear(&c);
        }
        kf_synth_free(s);
        kf_graph_free(g);
    }
    cr_expect_geq(compiled, NFAMILY);
    remove_dir(dir);
}

/* The tensor-core template on every layout and at points that render different code. */
Test(gpu_cuda, mma_matmul_compiles_with_nvcc, .timeout = 600) {
    if (!nvcc_or_skip()) return;
    static const char *const want[] = {"mma.sync.aligned.m16n8k16", "ushort *__restrict__"};
    cr_expect_geq(nvcc_every_point("mma", mma_tasks, NMMA, mma_points, NMMA_POINTS, 0, want, 2), NMMA * 3);
}

/* The 3xTF32 path (the f32 matmul's tc=1) on every layout and at points that render
 * different code, compiled with nvcc for sm_90 as warnings-as-errors. */
Test(gpu_cuda, tf32_matmul_compiles_with_nvcc, .timeout = 600) {
    if (!nvcc_or_skip()) return;
    static const char *const want[] = {"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "cvt.rna.tf32.f32"};
    cr_expect_eq(nvcc_every_point("tf32", tf32_tasks, NTF32, tf32_points, NTF32_POINTS, 1, want, 2), NTF32 * NTF32_POINTS);
}

/* The 3xTF32 path with the fused epilogues of tf32_epi_tasks at every tf32 point (the
 * stores handed to kf_epi<y>), compiled with nvcc for sm_90 as warnings-as-errors. */
Test(gpu_cuda, tf32_epilogue_compiles_with_nvcc, .timeout = 600) {
    if (!nvcc_or_skip()) return;
    static const char *const want[] = {"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "kf_epi"};
    cr_expect_eq(nvcc_every_point("tf32epi", tf32_epi_tasks, NTF32_EPI, tf32_points, NTF32_POINTS, 1, want, 2),
                 NTF32_EPI * NTF32_POINTS);
}

/* The f32 matmul's tc parameter picks the path: on cuda sm_80+ a 3xTF32 kernel where it is
 * 1 (the default for a large matrix) and the SIMT kernel where it is 0 (the default for a
 * small one); no tc, and SIMT only, on sm_75 and on opencl. */
Test(gpu_text, f32_matmul_tc_selects_the_path) {
    static const char big[] = "input a: f32[4096, 4096]\ninput b: f32[4096, 4096]\noutput c = matmul(a, b)\n";
    static const char small[] = "input a: f32[64, 64]\ninput b: f32[64, 64]\noutput c = matmul(a, b)\n";
    static const char *const mma = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";
    kf_device_info dev;
    gpu_like(&dev, "cuda");
    struct { const char *text, *assign; int want_tc; } cases[] = {
        {big, "", 1}, {big, "tc=0", 0}, {big, "tc=1", 1}, {small, "", 0}, {small, "tc=1", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kf_graph *g = parse(cases[i].text);
        kf_synth *s = NULL;
        kf_error err = {0};
        cr_assert_eq(kf_synth_plan(g, "cuda", &dev, &s, &err), KF_OK, "%s", err.msg);
        kf_point p;
        cr_assert(point_assign(s, cases[i].assign, &p), "case %zu", i);
        char pt[1024], spaced[1030];
        kf_point_format(kf_synth_space(s), &p, pt, sizeof pt);
        snprintf(spaced, sizeof spaced, " %s ", pt);
        cr_expect(strstr(spaced, cases[i].want_tc ? " tc=1 " : " tc=0 ") != NULL, "case %zu: point %s", i, pt);
        kf_candidate c;
        cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
        const int has = strstr(c.source, mma) != NULL;
        cr_expect_eq(has, cases[i].want_tc, "case %zu [%s]: mma %d", i, cases[i].assign, has);
        cr_expect_eq(strstr(c.source, "register block") != NULL, !cases[i].want_tc, "case %zu: SIMT kernel", i);
        /* each path's parameters are gated on tc: those of the other path are not in use */
        const kf_space *sp = kf_synth_space(s);
        int gated = 0;
        for (int j = 0; j < sp->nparams; j++) {
            const char *nm = sp->p[j].name;
            int simt = strcmp(nm, "s0.tm") == 0, tf = strcmp(nm, "s0.bm") == 0;
            if (!simt && !tf) continue;
            gated++;
            cr_expect_eq(kf_param_active(sp, &p, j), tf ? cases[i].want_tc : !cases[i].want_tc, "case %zu: %s", i, nm);
        }
        cr_expect_eq(gated, 2, "case %zu: s0.tm and s0.bm both in the space", i);
        /* the search times both kernels before it tunes either (kf_walk_template) */
        for (int j = 0; j < sp->nparams; j++)
            if (strcmp(sp->p[j].name, "s0.tc") == 0) cr_expect_eq(sp->p[j].role, KF_ROLE_KERNEL, "tc's role");
        kf_candidate_clear(&c);
        kf_synth_free(s);
        kf_graph_free(g);
    }
    /* no tensor-core choice: pre-Ampere, another platform */
    const char *plats[][2] = {{"cuda", "sm_75"}, {"opencl", ""}};
    for (size_t i = 0; i < 2; i++) {
        gpu_like(&dev, plats[i][0]);
        snprintf(dev.arch, sizeof dev.arch, "%s", plats[i][1]);
        kf_graph *g = parse(big);
        kf_synth *s = NULL;
        kf_error err = {0};
        cr_assert_eq(kf_synth_plan(g, plats[i][0], &dev, &s, &err), KF_OK, "%s", err.msg);
        kf_point p;
        cr_expect_eq(point_assign(s, "tc=1", &p), 0, "%s %s has a tc parameter", plats[i][0], plats[i][1]);
        kf_synth_default_point(s, &p);
        kf_candidate c;
        cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
        cr_expect(strstr(c.source, "tf32") == NULL, "%s %s renders tf32", plats[i][0], plats[i][1]);
        kf_candidate_clear(&c);
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

/* A matmul with a fused epilogue on cuda sm_80+ is offered the 3xTF32 path (tc) beside
 * the chain's epi: a large one takes it by default, its stores call kf_epi<y> once in the
 * text (an unrolled loop over the lane's pair), y is never written and the plan is one
 * launch; tc=0 is the SIMT kernel with the same helper; epi=0 stores the product with the
 * paired 8-byte stores and runs the chain as a kernel of its own. */
/* acc picks where the 3xTF32 products meet the f32 accumulators: a zeroed fragment of the
 * warp tile added once a BK step (0), or a zeroed t4 a tile added after its three products
 * (1); never the mma chained through the accumulators (its rounding toward zero biased them) */
Test(gpu_text, tf32_accumulates_outside_the_mma_chain) {
    kf_device_info dev;
    gpu_like(&dev, "cuda");
    kf_graph *g = parse("input a: f32[1024, 512]\ninput b: f32[512, 1024]\noutput c = matmul(a, b)\n");
    kf_synth *s = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_synth_plan(g, "cuda", &dev, &s, &err), KF_OK, "%s", err.msg);
    for (int acc = 0; acc < 2; acc++) {
        char assign[32];
        snprintf(assign, sizeof assign, "tc=1 acc=%d", acc);
        char *src = render_at(s, assign);
        cr_expect_eq(strstr(src, "kf_mma_tf32(tq[mi][ni]") != NULL, acc == 0, "acc=%d", acc);
        cr_expect_eq(strstr(src, "acc[i][j][q] += tq[i][j][q]") != NULL, acc == 0, "acc=%d", acc);
        cr_expect_eq(strstr(src, "kf_mma_tf32(t4, ah[mi], bh[ni])") != NULL, acc == 1, "acc=%d", acc);
        cr_expect_eq(strstr(src, "acc[mi][ni][q] += t4[q]") != NULL, acc == 1, "acc=%d", acc);
        cr_expect_null(strstr(src, "kf_mma_tf32(acc["), "acc=%d: the products chained through the accumulators", acc);
        free(src);
    }
    kf_synth_free(s);
    kf_graph_free(g);
}

Test(gpu_text, tf32_takes_the_epilogue) {
    static const char task[] = "input a: f32[2048, 1024]\ninput b: f32[1024, 2048]\ninput c: f32[2048]\n"
                               "output y = relu(matmul(a, b) + c)\n";
    static const char *const mma = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";
    kf_device_info dev;
    gpu_like(&dev, "cuda");
    struct { const char *assign; int tc, epi; } cases[] = {{"", 1, 1}, {"tc=0", 0, 1}, {"epi=0", 1, 0}, {"tc=0 epi=0", 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kf_graph *g = parse(task);
        kf_synth *s = NULL;
        kf_error err = {0};
        cr_assert_eq(kf_synth_plan(g, "cuda", &dev, &s, &err), KF_OK, "%s", err.msg);
        cr_expect_str_eq(kf_synth_describe(s), "matmul+ewise[2 ops]");
        kf_point p;
        cr_assert(point_assign(s, cases[i].assign, &p), "case %zu", i);
        const kf_space *sp = kf_synth_space(s);
        cr_expect_eq(kf_point_get(sp, &p, "s0.tc", -1), cases[i].tc, "case %zu", i);
        cr_expect_eq(kf_point_get(sp, &p, "s0.epi", -1), cases[i].epi, "case %zu", i);
        kf_candidate c;
        cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
        cr_expect_eq(strstr(c.source, mma) != NULL, cases[i].tc, "case %zu [%s]", i, cases[i].assign);
        int sites = 0;
        for (const char *q = strstr(c.source, "kf_epi"); q; q = strstr(q + 1, "kf_epi")) sites++;
        cr_expect_eq(sites, cases[i].epi ? 2 : 0, "case %zu: the helper and one call, not %d:\n%s", i, sites, c.source);
        cr_expect_eq(count_launches(c.source), cases[i].epi ? 1 : 2, "case %zu", i);
        if (cases[i].tc)
            cr_expect_eq(strstr(c.source, "*(float2 *)(b") != NULL, !cases[i].epi, "case %zu: paired stores", i);
        kf_candidate_clear(&c);
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

/* every point of the mma space renders a block of at most 8 warps (16 would cap the
 * registers at 128 a thread: a spilling 256 x 256 block ran 4x slower on the H200) and a
 * launch whose smem= holds the stage ring */
Test(gpu_text, mma_blocks_stay_within_8_warps) {
    kf_device_info dev;
    gpu_like(&dev, "cuda");
    kf_graph *g = parse("input a: bf16[4096, 4096]\ninput b: bf16[4096, 4096]\noutput c = matmul(a, b)\n");
    kf_synth *s = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_synth_plan(g, "cuda", &dev, &s, &err), KF_OK, "%s", err.msg);
    const char *pts[] = {"", "bm=256 bn=256", "bm=256 bn=256 wm=32 wn=32", "bm=256 bn=64 wm=32"};
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
        kf_point p;
        cr_assert(point_assign(s, pts[i], &p));
        kf_candidate c;
        cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
        long threads = 0, smem = 0;
        const char *l = strstr(c.source, "kforge:launch");
        cr_assert(l && sscanf(strstr(l, "local=") + 6, "%ld", &threads) == 1);
        cr_assert(sscanf(strstr(l, "smem=") + 5, "%ld", &smem) == 1, "no smem= in\n%.200s", l);
        cr_expect(threads >= 32 && threads <= 256, "[%s]: %ld threads", pts[i], threads);
        cr_expect(smem > 0 && smem <= dev.local_mem_optin_bytes, "[%s]: smem %ld", pts[i], smem);
        kf_candidate_clear(&c);
    }
    kf_synth_free(s);
    kf_graph_free(g);
}

/* 16-bit tensors: matmul on cuda sm_80+ only, said with the value's place in the task */
Test(gpu_text, sixteen_bit_only_as_tensor_core_matmul) {
    static const char mm[] = "input a: bf16[64, 64]\ninput b: bf16[64, 64]\noutput c = matmul(a, b)\n";
    struct { const char *text, *platform, *arch, *want; } cases[] = {
        {mm, "opencl", "", "cuda on sm_80 or newer only"},
        {mm, "metal", "", "cuda on sm_80 or newer only"},
        {mm, "cuda", "sm_75", "this is cuda, sm_75"},
        {"input a: f16[64, 64]\ninput b: f16[64, 64]\noutput c = relu(matmul(a, b))\n", "cuda", "sm_90",
         "only as operands and results of matmul"},
        {"input x: bf16[64]\noutput y = x * 2.0\n", "cuda", "sm_90", "'x' is bf16 and is used by another op"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kf_device_info dev;
        gpu_like(&dev, cases[i].platform);
        snprintf(dev.arch, sizeof dev.arch, "%s", cases[i].arch);
        kf_graph *g = parse(cases[i].text);
        kf_synth *s = NULL;
        kf_error err = {0};
        cr_expect_eq(kf_synth_plan(g, cases[i].platform, &dev, &s, &err), KF_ERR_UNSUPPORTED, "case %zu planned", i);
        cr_expect(strstr(err.msg, cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, err.msg, cases[i].want);
        cr_expect(err.line > 0, "case %zu: no line in the error", i);
        kf_synth_free(s);
        kf_graph_free(g);
    }
    /* the CPU generator says the same */
    kf_device_info cpu;
    memset(&cpu, 0, sizeof cpu);
    snprintf(cpu.platform, sizeof cpu.platform, "cpu");
    kf_graph *g = parse(mm);
    kf_synth *s = NULL;
    kf_error err = {0};
    cr_expect_eq(kf_synth_plan(g, "cpu", &cpu, &s, &err), KF_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "cuda on sm_80 or newer only") != NULL, "%s", err.msg);
    kf_graph_free(g);
}

/* ---- metal: rendered without error ---- */

Test(gpu_metal, every_family_renders) {
    kf_device_info dev;
    gpu_like(&dev, "metal");
    kf_error err = {0};
    for (int t = 0; t < NFAMILY; t++) {
        kf_graph *g = parse(family_tasks[t]);
        kf_synth *s = NULL;
        cr_assert_eq(kf_synth_plan(g, "metal", &dev, &s, &err), KF_OK, "plan: %s", err.msg);
        for (int variant = 0; variant < 2; variant++) {
            kf_point p;
            if (!point_of(s, variant, &p)) break;
            kf_candidate c;
            cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "render (metal) of\n%s: %s", family_tasks[t], err.msg);
            cr_expect_str_eq(c.platform, "metal");
            cr_expect(strstr(c.source, "kernel void") != NULL, "no Metal kernel in\n%s", c.source);
            cr_expect(strstr(c.source, "[[buffer(0)]]") != NULL, "no buffer bindings in\n%s", c.source);
            /* every token was substituted: no '$' is left in the code */
            cr_expect(strchr(c.source, '$') == NULL, "a '$' token survived in\n%s", c.source);
            kf_launch_plan plan;
            cr_expect_eq(kf_launch_plan_parse(c.source, c.flags, g->ninputs + g->noutputs, &plan, &err), KF_OK,
                         "%s", err.msg);
            kf_candidate_clear(&c);
        }
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

/* The launch lines and kernels of an elementwise candidate for Metal, byte for byte
 * (the prelude is the renderer's golden, tests/golden/prelude.metal). The vector path:
 * [4, 16] with a broadcast bias, vw=4. KFORGE_UPDATE_GOLDEN=1 rewrites the file. */
Test(gpu_metal, elementwise_golden) {
    kf_device_info dev;
    gpu_like(&dev, "metal");
    kf_error err = {0};
    kf_graph *g = parse("input x: f32[4, 16]\ninput b: f32[16]\noutput y = gelu(x + b) * 0.5\n");
    kf_synth *s = NULL;
    cr_assert_eq(kf_synth_plan(g, "metal", &dev, &s, &err), KF_OK, "%s", err.msg);
    kf_point p;
    point_of(s, 0, &p);
    kf_candidate c;
    cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
    kf_buf got = {0};
    for (const char *l = c.source; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l + 1) : strlen(l);
        if (strncmp(l, "// kforge:", 10) == 0) kf_buf_putn(&got, l, n);
        l += n;
    }
    const char *k = strstr(c.source, "kernel void");
    cr_assert_not_null(k, "%s", c.source);
    kf_buf_puts(&got, k);
    char path[512];
    snprintf(path, sizeof path, "%s/tests/golden/gpu_ewise.metal", KF_SOURCE_DIR);
    const char *upd = getenv("KFORGE_UPDATE_GOLDEN");
    if (upd && strcmp(upd, "1") == 0) {
        cr_assert_eq(kf_write_file(path, got.data, got.len, &err), KF_OK, "%s", err.msg);
    } else {
        char *want = NULL;
        size_t n = 0;
        cr_assert_eq(kf_read_file(path, &want, &n, &err), KF_OK, "%s (KFORGE_UPDATE_GOLDEN=1 writes it)", err.msg);
        cr_expect_str_eq(got.data, want, "differs from %s (review, then KFORGE_UPDATE_GOLDEN=1)", path);
        free(want);
    }
    kf_buf_free(&got);
    kf_candidate_clear(&c);
    kf_synth_free(s);
    kf_graph_free(g);
}

/* ---- the candidate text, without a device ---- */

typedef struct rendered {
    kf_graph *g;
    kf_synth *s;
    kf_candidate c;
    kf_launch_plan plan;
} rendered;

/* Plan + render text for platform on dev at the default point, with its launch plan. */
static void render_default(const char *text, const char *platform, const kf_device_info *dev, rendered *r) {
    kf_error err = {0};
    r->g = parse(text);
    cr_assert_eq(kf_synth_plan(r->g, platform, dev, &r->s, &err), KF_OK, "plan: %s", err.msg);
    kf_point p;
    point_of(r->s, 0, &p);
    cr_assert_eq(kf_synth_render(r->s, &p, &r->c, &err), KF_OK, "render: %s", err.msg);
    cr_assert_eq(kf_launch_plan_parse(r->c.source, r->c.flags, r->g->ninputs + r->g->noutputs, &r->plan, &err),
                 KF_OK, "launch plan: %s\n%s", err.msg, r->c.source);
}

static void rendered_free(rendered *r) {
    kf_candidate_clear(&r->c);
    kf_synth_free(r->s);
    kf_graph_free(r->g);
}

Test(gpu_text, point_is_baked_in) {
    kf_device_info dev;
    gpu_like(&dev, "opencl");
    for (int t = 0; t < NFAMILY; t++) {
        rendered r;
        render_default(family_tasks[t], "opencl", &dev, &r);
        char pt[512];
        kf_point p;
        point_of(r.s, 0, &p);
        kf_point_format(kf_synth_space(r.s), &p, pt, sizeof pt);
        cr_expect_str_eq(r.c.label, pt);
        cr_expect_str_eq(r.c.flags, "");
        cr_expect_eq(r.c.ntunables, 0, "GPU candidates carry no tunables");
        cr_expect_str_eq(r.c.entry, r.plan.l[0].kernel, "entry is the first launch's kernel");
        for (int l = 0; l < r.plan.nlaunches; l++) {
            cr_expect(strstr(r.c.source, r.plan.l[l].kernel) != NULL);
            for (int d = 0; d < r.plan.l[l].ndims; d++) {
                cr_expect_eq(r.plan.l[l].global[d] % r.plan.l[l].local[d], 0);
                cr_expect_leq(r.plan.l[l].local[0] * (r.plan.l[l].ndims > 1 ? r.plan.l[l].local[1] : 1), 1024);
            }
        }
        rendered_free(&r);
    }
}

Test(gpu_text, matrix_vector_products_plan_as_reductions) {
    kf_device_info dev;
    gpu_like(&dev, "cuda");
    for (size_t t = 0; t < sizeof gemv_tasks / sizeof gemv_tasks[0]; t++) {
        rendered r;
        render_default(gemv_tasks[t], "cuda", &dev, &r);
        const char *d = kf_synth_describe(r.s);
        if (t < NGEMV_REDUCED)
            cr_expect(strstr(d, "sum(ewise") && !strstr(d, "matmul"), "task:\n%s\nplan %s", gemv_tasks[t], d);
        else
            cr_expect(strstr(d, "matmul") != NULL, "task:\n%s\nplan %s", gemv_tasks[t], d);
        rendered_free(&r);
    }
    /* a matrix product keeps the GEMM; so does the CPU, whose matvec template reads the
     * vector once per row block */
    rendered r;
    render_default("input a: f32[37, 1031]\ninput b: f32[1031, 2]\noutput c = matmul(a, b)\n", "cuda", &dev, &r);
    cr_expect(strstr(kf_synth_describe(r.s), "matmul"), "%s", kf_synth_describe(r.s));
    rendered_free(&r);
}

Test(gpu_text, chains_use_scratch_between_kernels) {
    kf_device_info dev;
    gpu_like(&dev, "opencl");
    rendered r;
    render_default("input x: f32[17, 33]\ninput w: f32[33]\n"
                   "t = exp(x) * w\ns = sum(t, axes=[1], keepdim=true)\noutput y = t / (s + 100.0)\n",
                   "opencl", &dev, &r);
    /* t (a chain of two ops, so y does not compute it again, kf_synth_remat), s (and
     * s + 100, which the planner keeps apart from t's cluster) are
     * intermediates: scratch buffers, each written by one kernel (its last argument) and
     * read by a later one */
    cr_assert_geq(r.plan.nlaunches, 3, "%s", r.c.source);
    cr_assert_geq(r.plan.nscratch, 2, "%s", r.c.source);
    cr_expect_eq(r.plan.scratch_bytes[0], 17 * 33 * 4);
    cr_expect_eq(r.plan.scratch_bytes[1], 17 * 4);
    for (int k = 0; k < r.plan.nscratch; k++) {
        int writer = -1, reader = -1;
        for (int l = 0; l < r.plan.nlaunches; l++)
            for (int a = 0; a < r.plan.l[l].nargs; a++)
                if (r.plan.l[l].args[a] == -1 - k) {
                    if (a == r.plan.l[l].nargs - 1 && writer < 0) writer = l;
                    else if (writer >= 0 && reader < 0) reader = l;
                }
        cr_expect(writer >= 0 && reader > writer, "scratch %s: written by launch %d, read by %d\n%s",
                  r.plan.scratch_name[k], writer, reader, r.c.source);
    }
    cr_expect_eq(r.plan.l[0].args[0], 0);
    const kf_launch *last = &r.plan.l[r.plan.nlaunches - 1];
    cr_expect_eq(last->args[last->nargs - 1], 2, "the last kernel writes output 0 (buffer 2)");
    rendered_free(&r);
}

/* A reshape of the input read by a norm and a reduction is bound as the input itself (no
 * copy kernel, nothing written to it), and the reduction whose result the output relabels
 * writes the output's buffer. */
Test(gpu_text, relabelled_buffers_are_bound_in_place) {
    const char *plats[] = {"opencl", "cuda"};
    for (int pl = 0; pl < 2; pl++) {
        kf_device_info dev;
        gpu_like(&dev, plats[pl]);
        rendered r;
        render_default(RELABEL_TASK, plats[pl], &dev, &r);
        /* layer_norm (x -> scratch), the affine (scratch, w -> n), sum (x -> s) */
        cr_assert_eq(r.plan.nlaunches, 3, "%s\n%s", plats[pl], r.c.source);
        cr_expect_eq(r.plan.nscratch, 1, "%s: the norm's result only", plats[pl]);
        int reads_x = 0;
        for (int l = 0; l < r.plan.nlaunches; l++) {
            const kf_launch *k = &r.plan.l[l];
            for (int a = 0; a + 1 < k->nargs; a++) reads_x += k->args[a] == 0;
            cr_expect_neq(k->args[k->nargs - 1], 0, "%s: launch %d writes the input", plats[pl], l);
        }
        cr_expect_eq(reads_x, 2, "%s: the norm and the sum read x's buffer\n%s", plats[pl], r.c.source);
        const kf_launch *last = &r.plan.l[r.plan.nlaunches - 1];
        cr_expect_eq(last->args[last->nargs - 1], 3, "%s: the sum writes output s (buffer 3)", plats[pl]);
        rendered_free(&r);
    }
}

/* A matmul's epilogue is in the kernel once (a loop over the register block stores it), not
 * once per register: PoCL took 25 s to build 64 inlined sigmoids. Apart (epi=0) the product
 * is stored in scratch and the chain is a kernel of its own. */
Test(gpu_text, matmul_epilogue_is_written_once) {
    const char *plats[] = {"opencl", "cuda"};
    for (int pl = 0; pl < 2; pl++) {
        kf_device_info dev;
        gpu_like(&dev, plats[pl]);
        rendered r;
        render_default("input a: f32[4, 128, 96]\ninput b: f32[4, 96, 160]\ninput c: f32[128, 1]\n"
                       "output y = sigmoid(matmul(a, b) * 0.25 + c)\n", plats[pl], &dev, &r);
        cr_expect_str_eq(kf_synth_describe(r.s), "matmul+ewise[3 ops]");
        int sites = 0;
        for (const char *q = strstr(r.c.source, "kf_epi"); q; q = strstr(q + 1, "kf_epi")) sites++;
        cr_expect_eq(sites, 2, "%s: the helper and one call, not %d:\n%s", plats[pl], sites, r.c.source);
        cr_expect_eq(r.plan.nlaunches, 1);
        cr_expect_eq(r.plan.nscratch, 0);
        rendered_free(&r);
    }
}

Test(gpu_text, two_pass_reduction_has_partials) {
    kf_device_info dev;
    gpu_like(&dev, "opencl");
    rendered r;
    render_default("input x: f32[1000003]\noutput i = argmax(x, axis=0)\n", "opencl", &dev, &r);
    /* one output over a long row: the default splits it, values and indices in scratch */
    cr_assert_eq(r.plan.nlaunches, 2, "%s", r.c.source);
    cr_expect_eq(r.plan.nscratch, 2);
    cr_expect(strstr(r.c.source, "kf_arg_take") != NULL);
    cr_expect(strstr(r.c.source, "(long)ai") != NULL, "i64 result stored as long");
    rendered_free(&r);
}

/* A float32 logsumexp over the innermost dims is one stage of its own on GPUs (one read of
 * the rows), not its lowering's max stage and sum-of-exp stage; over an outer axis it is
 * still lowered. */
Test(gpu_text, logsumexp_rows_in_one_stage) {
    kf_device_info dev;
    gpu_like(&dev, "opencl");
    rendered r;
    render_default("input x: f32[64, 1000]\noutput y = logsumexp(x, axes=[1])\n", "opencl", &dev, &r);
    cr_expect(strstr(r.c.source, "logsumexp, row layout") != NULL, "%s", r.c.source);
    cr_expect(strstr(r.c.source, "max -> ") == NULL, "one stage:\n%s", r.c.source);
    rendered_free(&r);
    render_default("input x: f32[64, 1000]\noutput y = logsumexp(x, axes=[0])\n", "opencl", &dev, &r);
    cr_expect(strstr(r.c.source, "logsumexp, row layout") == NULL, "%s", r.c.source);
    cr_expect(strstr(r.c.source, "max -> ") != NULL, "the lowering's stages:\n%s", r.c.source);
    rendered_free(&r);
}

Test(gpu_text, vector_loads_only_where_aligned) {
    kf_device_info dev;
    gpu_like(&dev, "opencl");
    rendered r;
    render_default("input x: f32[5, 16]\ninput b: f32[16]\ninput c: f32[5, 1]\noutput y = x * b - c\n", "opencl",
                   &dev, &r);
    cr_expect(strstr(r.c.source, "vload4") != NULL, "%s", r.c.source);
    cr_expect(strstr(r.c.source, "vstore4") != NULL);
    rendered_free(&r);
    render_default("input x: f32[5, 17]\ninput b: f32[17]\noutput y = x * b\n", "opencl", &dev, &r);
    cr_expect(strstr(r.c.source, "vload") == NULL, "an odd inner dim cannot use vectors:\n%s", r.c.source);
    const kf_space *sp = kf_synth_space(r.s);
    for (int i = 0; i < sp->nparams; i++)
        cr_expect_str_neq(sp->p[i].name, "s0.vw", "only vw=1 is possible: it is no parameter");
    rendered_free(&r);
}

Test(gpu_text, subgroups_only_where_the_device_has_them) {
    kf_device_info dev;
    gpu_like(&dev, "cuda");
    const char *task = "input x: f32[64, 4096]\noutput y = sum(x, axes=[1])\noutput z = softmax(x)\n";
    rendered r;
    render_default(task, "cuda", &dev, &r);
    /* the kernels, after the prelude (which defines the warp helpers either way) */
    const char *k = strstr(r.c.source, "__global__");
    cr_assert_not_null(k);
    cr_expect(strstr(k, "kf_warp_sum(") != NULL && strstr(k, "kf_warp_max(") != NULL,
              "default on a device with sub-groups combines with them:\n%s", k);
    rendered_free(&r);
    dev.subgroup_size = 0;
    render_default(task, "cuda", &dev, &r);
    k = strstr(r.c.source, "__global__");
    cr_assert_not_null(k);
    cr_expect(strstr(k, "kf_warp_") == NULL && strstr(k, "__shfl") == NULL, "no sub-group code without sub-groups:\n%s", k);
    const kf_space *sp = kf_synth_space(r.s);
    for (int i = 0; i < sp->nparams; i++) cr_expect(strstr(sp->p[i].name, ".sg") == NULL, "%s", sp->p[i].name);
    rendered_free(&r);
}

Test(gpu_text, cpu_type_device_gets_its_own_defaults) {
    kf_device_info dev;
    gpu_like(&dev, "opencl");
    snprintf(dev.device_type, sizeof dev.device_type, "cpu");
    dev.subgroup_size = 0;
    dev.max_wg = 4096;
    dev.compute_units = 2;
    kf_graph *g = parse("input x: f32[5, 16]\noutput y = x * 2.0\n");
    kf_synth *s = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_synth_plan(g, "opencl", &dev, &s, &err), KF_OK, "%s", err.msg);
    kf_point p;
    point_of(s, 0, &p);
    cr_expect_eq(kf_point_get(kf_synth_space(s), &p, "s0.vw", -1), 1, "PoCL vectorises scalar code itself");
    kf_synth_free(s);
    gpu_like(&dev, "opencl");
    cr_assert_eq(kf_synth_plan(g, "opencl", &dev, &s, &err), KF_OK, "%s", err.msg);
    point_of(s, 0, &p);
    cr_expect_eq(kf_point_get(kf_synth_space(s), &p, "s0.vw", -1), 4, "a GPU takes the widest vector");
    kf_synth_free(s);
    kf_graph_free(g);
}

Test(gpu_text, long_chains_stay_within_the_budgets) {
    kf_device_info dev;
    gpu_like(&dev, "opencl");
    rendered r;
    render_default(eight_stages, "opencl", &dev, &r);
    cr_expect_eq(r.plan.nlaunches, 8, "%s", kf_synth_describe(r.s));
    cr_expect_leq(kf_synth_space(r.s)->nparams, KF_MAX_PARAMS);
    cr_expect_geq(kf_synth_space(r.s)->nparams, 8, "every stage keeps some choice");
    rendered_free(&r);
    /* as many launches as a candidate holds, then one stage more: unsupported, not a crash */
    char *full = alternating_softmaxes(KF_MAX_LAUNCHES), *over = alternating_softmaxes(KF_MAX_LAUNCHES + 1);
    render_default(full, "opencl", &dev, &r);
    cr_expect_eq(r.plan.nlaunches, KF_MAX_LAUNCHES, "%s", kf_synth_describe(r.s));
    cr_expect_eq(r.plan.nscratch, KF_MAX_LAUNCHES - 1, "%s", kf_synth_describe(r.s));
    rendered_free(&r);
    kf_graph *g = parse(over);
    kf_synth *s = NULL;
    kf_error err = {0};
    cr_expect_eq(kf_synth_plan(g, "opencl", &dev, &s, &err), KF_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "kernels") != NULL, "%s", err.msg);
    kf_graph_free(g);
    free(full);
    free(over);
}

Test(gpu_text, unknown_platform_is_unsupported) {
    kf_graph *g = parse("input x: f32[3]\noutput y = x + 1.0\n");
    kf_device_info dev;
    gpu_like(&dev, "vulkan");
    kf_synth *s = NULL;
    kf_error err = {0};
    cr_expect_eq(kf_synth_plan(g, "vulkan", &dev, &s, &err), KF_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "opencl") != NULL, "%s", err.msg);
    cr_expect_null(s);
    kf_graph_free(g);
}
