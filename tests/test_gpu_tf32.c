/*
 * The f32 matmul's 3xTF32 path (src/synth/gpu_mma32.c, tc=1) and its SIMT alternative
 * (tc=0) with a fused elementwise prologue (kf_stage.prologue, views included): an
 * implicit GEMM's columns (conv1d and conv2d with stride, padding and dilation; a conv
 * with a bias and an activation, so with an epilogue too; a grouped conv2d; a conv3d), a strided slice read
 * transposed, a pointwise op of a flipped B (N-contiguous, and K-contiguous read transposed),
 * a padded A read transposed (a producer without a view is not fused: see the last gpu_text test). Where the 3xTF32 path
 * exists (cuda sm_80+) such a producer is computed inside the operand loads (kf_pro<x>)
 * instead of being copied into a buffer first:
 *   - gpu_cuda: every task at every tf32 point and at tc=0, compiled with nvcc for sm_90
 *     as warnings-as-errors (skips without nvcc);
 *   - gpu_verify: the same against the float64 reference on the device under test
 *     (KFORGE_TEST_GPU=cuda on sm_80 or newer; skips elsewhere);
 *   - gpu_text: the plans: fused on cuda sm_80+, a large conv defaults to tc=1 in one
 *     launch, and the plan is unchanged (the columns copied) on sm_75 and opencl.
 */
#include "gpu_common.h"

static const char *const pro_tasks[] = {
    "input x: f32[2, 5, 13, 11]\ninput w: f32[7, 5, 3, 3]\n"
    "output y = conv(x, w, stride=[2, 1], padding=[1, 2], dilation=[2, 1])\n",
    "input x: f32[3, 6, 37]\ninput w: f32[9, 6, 5]\noutput y = conv(x, w, padding=[2], stride=[3])\n",
    "input a: f32[70, 45]\ninput b: f32[35, 23]\noutput c = matmul(transpose(slice(a, dim=0, start=1, step=2)), b)\n",
    "input a: f32[37, 67]\ninput b: f32[67, 45]\noutput c = matmul(a, exp(flip(b, dims=[-1]) * 0.1))\n",
    "input x: f32[2, 3, 9, 7]\ninput w: f32[5, 3, 3, 3]\ninput v: f32[5]\noutput y = relu(conv(x, w, v, padding=[1, 1]))\n",
    "input a: f32[64, 200]\ninput b: f32[96, 64]\n"
    "output c = matmul(pad(a, pads=[0, 3], value=0.5), b, transpose_a=true, transpose_b=true)\n",
    "input a: f32[45, 29]\ninput b: f32[33, 29]\noutput c = matmul(a, relu(flip(b, dims=[0]) - 0.25), transpose_b=true)\n",
    "input x: f32[2, 6, 13, 11]\ninput w: f32[8, 3, 3, 3]\noutput y = conv(x, w, padding=[1, 1], groups=2)\n",
    "input x: f32[2, 4, 7, 9, 5]\ninput w: f32[6, 4, 3, 3, 3]\noutput y = conv(x, w, padding=[1, 0, 1], stride=[1, 2, 1])\n",
};
#define NPRO (int)(sizeof pro_tasks / sizeof pro_tasks[0])

/* points of the 3xTF32 path that render different code (as test_gpu_templates.c's) */
static const char *const tf32_points[] = {"tc=1", "tc=1 st=2 bk=16 mb=2", "tc=1 st=4 gm=1", "tc=1 bm=64 bn=256 wm=32",
                                          "tc=1 bm=256 wn=64 bk=16", "tc=1 bn=64 wm=32 wn=32"};
#define NTF32_POINTS (int)(sizeof tf32_points / sizeof tf32_points[0])

static const char mma[] = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";

/* ---- cuda: rendered and compiled with nvcc ---- */

Test(gpu_cuda, tf32_prologue_compiles_with_nvcc, .timeout = 600) {
    if (!nvcc_or_skip()) return;
    static const char *const want[] = {mma, "kf_pro"};
    cr_expect_eq(nvcc_every_point("tf32pro", pro_tasks, NPRO, tf32_points, NTF32_POINTS, 1, want, 2),
                 NPRO * NTF32_POINTS);
}

/* the SIMT kernel (tc=0) with the same prologues: element-wise tile loads through kf_pro */
Test(gpu_cuda, simt_prologue_compiles_with_nvcc, .timeout = 600) {
    if (!nvcc_or_skip()) return;
    static const char *const points[] = {"tc=0"};
    static const char *const want[] = {"register block", "kf_pro"};
    cr_expect_eq(nvcc_every_point("simtpro", pro_tasks, NPRO, points, 1, 1, want, 2), NPRO);
}

/* ---- the plans ---- */

/* Every task fuses its producer into the matmul on cuda sm_80+: one stage, no scratch
 * buffer, the operand loaded through kf_pro<x> on both paths. */
Test(gpu_text, matmul_takes_the_prologue_on_sm80) {
    for (int t = 0; t < NPRO; t++) {
        kf_graph *g = NULL;
        kf_synth *s = plan_gpu(pro_tasks[t], "cuda", "sm_90", &g);
        cr_expect(strncmp(kf_synth_describe(s), "matmul(ewise[", 13) == 0, "task %d: %s", t, kf_synth_describe(s));
        for (int tc = 0; tc < 2; tc++) {
            kf_point p;
            cr_assert(point_assign(s, tc ? "tc=1" : "tc=0", &p), "task %d: no tc", t);
            kf_candidate c;
            kf_error err = {0};
            cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
            cr_expect(strstr(c.source, "kf_pro") != NULL, "task %d tc=%d: no kf_pro", t, tc);
            cr_expect_eq(strstr(c.source, mma) != NULL, tc, "task %d tc=%d", t, tc);
            cr_expect(strstr(c.source, "// kforge:scratch") == NULL, "task %d tc=%d: a scratch buffer", t, tc);
            cr_expect_eq(count_launches(c.source), 1, "task %d tc=%d", t, tc);
            if (tc) { /* the prologue's operand is copied element by element, prefetched into
                       * registers in the main loop */
                cr_expect(strstr(c.source, "copied element-wise") != NULL, "task %d: no element-wise copy", t);
                cr_expect(strstr(c.source, "float pga[") != NULL || strstr(c.source, "float pgb[") != NULL,
                          "task %d: no register prefetch", t);
            }
            kf_candidate_clear(&c);
        }
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

/* A KernelBench-sized conv2d (16 x 64 x 56 x 56, 128 3 x 3 filters, padding 1: a batch of
 * 16 [128 x 576] x [576 x 3136] products) defaults to the 3xTF32 path with its columns
 * computed in the loads, and is offered tc=0 too; on sm_75 and on opencl the plan is
 * the columns' copy and a matmul, as before. */
Test(gpu_text, large_conv_defaults_to_tf32_with_the_prologue) {
    static const char task[] = "input x: f32[16, 64, 56, 56]\ninput w: f32[128, 64, 3, 3]\n"
                               "output y = conv(x, w, padding=[1, 1])\n";
    kf_graph *g = NULL;
    kf_synth *s = plan_gpu(task, "cuda", "sm_90", &g);
    cr_expect_str_eq(kf_synth_describe(s), "matmul(ewise[1 op])");
    const kf_space *sp = kf_synth_space(s);
    int tci = -1;
    for (int i = 0; i < sp->nparams; i++)
        if (strcmp(sp->p[i].name + strlen(sp->p[i].name) - 3, ".tc") == 0) tci = i;
    cr_assert_geq(tci, 0, "no tc parameter");
    cr_expect_eq(sp->p[tci].nvalues, 2, "both kernels offered");
    cr_expect_eq(sp->p[tci].role, KF_ROLE_KERNEL);
    kf_point p;
    kf_synth_default_point(s, &p);
    cr_expect_eq(sp->p[tci].values[p.idx[tci]], 1, "default tc");
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
    cr_expect(strstr(c.source, mma) != NULL);
    cr_expect(strstr(c.source, "kf_pro") != NULL);
    cr_expect(strstr(c.source, "kf_cp16(") != NULL, "the weights keep cp.async");
    cr_expect_eq(count_launches(c.source), 1);
    kf_candidate_clear(&c);
    kf_synth_free(s);
    kf_graph_free(g);

    /* no tensor-core path: the columns copied as before */
    s = plan_gpu(task, "cuda", "sm_75", &g);
    cr_expect_str_eq(kf_synth_describe(s), "ewise[1 op] -> matmul");
    kf_synth_free(s);
    kf_graph_free(g);
    kf_device_info dev;
    gpu_like(&dev, "opencl");
    g = parse(task);
    cr_assert_eq(kf_synth_plan(g, "opencl", &dev, &s, &err), KF_OK, "%s", err.msg);
    cr_expect_str_eq(kf_synth_describe(s), "ewise[1 op] -> matmul");
    kf_synth_free(s);
    kf_graph_free(g);
}

/* A pointwise producer of a plain operand (no view) stays a stage of its own on sm_90 too:
 * computed once with vector loads rather than again in every block's loads. */
Test(gpu_text, a_pointwise_operand_without_views_stays_apart) {
    static const char *const tasks[] = {
        "input a: f32[37, 67]\ninput b: f32[67, 45]\noutput c = matmul(a, exp(b * 0.1))\n",
        "input a: f32[45, 29]\ninput b: f32[33, 29]\noutput c = matmul(a, relu(b - 0.25), transpose_b=true)\n",
    };
    for (int t = 0; t < 2; t++) {
        kf_graph *g = NULL;
        kf_synth *s = plan_gpu(tasks[t], "cuda", "sm_90", &g);
        const char *d = kf_synth_describe(s);
        cr_expect(strncmp(d, "ewise[", 6) == 0 && strstr(d, "] -> matmul") != NULL, "task %d: %s", t, d);
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

/* ---- the device under test ---- */

TestSuite(gpu_verify, .init = ocl_setup, .fini = ocl_teardown, .timeout = 600);

/* Every task at every tf32 point, at tc=0, and (the first task) on every distribution,
 * against the float64 reference; only where the device under test runs the path
 * (KFORGE_TEST_GPU=cuda on sm_80 or newer). */
Test(gpu_verify, tf32_prologue) {
    NEED_OCL();
    if (!tc_device_or_skip("the 3xTF32 path")) return;
    for (int t = 0; t < NPRO; t++) {
        for (int v = 0; v < NTF32_POINTS; v++)
            check_point_sets(pro_tasks[t], tf32_points[v], "kf_pro", t == 0 && v == 0 ? 6 : 2);
        check_point_sets(pro_tasks[t], "tc=0", "kf_pro", 2);
    }
}
