/*
 * An input set on which float32 cannot determine the output (issues 24 and 29): a long GEMM
 * (K = 8192), a group norm, an affine and a hardtanh, as KernelBench level 2's
 * 30_Gemm_GroupNorm_Hardtanh. On the offset set (every input, the parameters too, far from
 * zero) the GEMM's outputs in a group are nearly equal, the norm divides their rounding
 * by a tiny deviation, and the reference's error bound reaches the output's whole range.
 * The NMSE allowance reads bound / sqrt(K) as an honest kernel's typical error; the clamp
 * capped the bound but not the amplified error beneath it, so each honest float32 kernel
 * failed there ("NMSE 0.002 exceeds 0.000489 although every element is within tolerance";
 * the builtin's CPU and CUDA kernels alike). A pointwise op's bound is now the larger of
 * its spread over the operand's bound E and sqrt(K) times its spread over E / sqrt(K)
 * (src/ir/interp.c, as the softmax's already was): the honest kernel verifies, and a kernel
 * that drops one product of the GEMM, or the norm's gamma, is still caught.
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include "verify_once.h"

#define B 8
#define K 8192
#define N 512
#define G 16

static const char *task = "task gn30\n"
                          "input w: f32[512, 8192]\n"
                          "input bias: f32[512]\n"
                          "input gw: f32[512]\n"
                          "input gb: f32[512]\n"
                          "input x: f32[8, 8192]\n"
                          "linear = matmul(x, w, transpose_b=true) + bias\n"
                          "g0 = reshape(linear, shape=[8, 16, -1])\n"
                          "g1 = reshape(layer_norm(g0, axes=[-1], eps=1e-05), shape=[8, 512])\n"
                          "g = g1 * gw + gb\n"
                          "output y = hardtanh(g, min_val=-2, max_val=2)\n";

static char src[4096];

/* A plain float32 kernel: `term` is the GEMM's accumulation, `aff` the affine. */
static const char *kernel(const char *term, const char *aff) {
    snprintf(src, sizeof src,
             "#include <math.h>\n"
             "int kforge_kernel(void *const *a) {\n"
             "    const float *w = a[0], *bias = a[1], *gw = a[2], *gb = a[3], *x = a[4];\n"
             "    float *y = a[5];\n"
             "    static float lin[%d * %d];\n"
             "    for (int i = 0; i < %d; i++)\n"
             "        for (int j = 0; j < %d; j++) {\n"
             "            float s = 0.0f;\n"
             "            for (int k = 0; k < %d; k++) { %s }\n"
             "            lin[i * %d + j] = s + bias[j];\n"
             "        }\n"
             "    const int per = %d / %d;\n"
             "    for (int i = 0; i < %d; i++)\n"
             "        for (int q = 0; q < %d; q++) {\n"
             "            const float *r = lin + i * %d + q * per;\n"
             "            float m = 0.0f, v = 0.0f;\n"
             "            for (int t = 0; t < per; t++) m += r[t];\n"
             "            m /= per;\n"
             "            for (int t = 0; t < per; t++) { float d = r[t] - m; v += d * d; }\n"
             "            float rs = 1.0f / sqrtf(v / per + 1e-5f);\n"
             "            for (int t = 0; t < per; t++) {\n"
             "                int j = q * per + t;\n"
             "                float g = %s;\n"
             "                y[i * %d + j] = fminf(fmaxf(g, -2.0f), 2.0f);\n"
             "            }\n"
             "        }\n"
             "    return 0;\n"
             "}\n",
             B, N, B, N, K, term, N, N, G, B, G, N, aff, N);
    return src;
}

#define TERM "s += x[i * 8192 + k] * w[j * 8192 + k];"
#define AFF "(r[t] - m) * rs * gw[j] + gb[j]"

static kf_vresult check(const char *s) {
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.seed = 11;
    o.threads = 1;
    return verify_once(task, s, "illcond", o, 0);
}

Test(illcond, honest_float32_kernel_verifies_on_every_set) {
    kf_vresult r = check(kernel(TERM, AFF));
    cr_expect_eq(r.status, KF_V_OK, "%s: %s", kf_vstatus_name(r.status), r.detail);
}

Test(illcond, a_dropped_product_is_still_caught) {
    kf_vresult r = check(kernel("if (k != 4097) " TERM, AFF));
    cr_expect_eq(r.status, KF_V_MISMATCH, "%s: %s", kf_vstatus_name(r.status), r.detail);
}

Test(illcond, a_missing_gamma_is_still_caught) {
    kf_vresult r = check(kernel(TERM, "(r[t] - m) * rs + gb[j]"));
    cr_expect_eq(r.status, KF_V_MISMATCH, "%s: %s", kf_vstatus_name(r.status), r.detail);
}
