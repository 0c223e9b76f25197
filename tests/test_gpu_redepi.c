/*
 * Row reductions in the GPU matmul's store stage (issue 29, GPU slice; src/synth/
 * gpu_redepi.c): sum, mean, max, min and logsumexp over the product's last axis computed
 * from the SIMT matmul's register block (per-block partials in scratch, a second launch
 * that combines them), the parameter s<k>.red (1 fused, 0 apart), at tc=0 and tc=1 alike
 * where the 3xTF32 path exists (whose store stage test_gpu_tf32red.c checks).
 *   - gpu_text: the plans and texts (OpenCL and CUDA from the same generator);
 *   - gpu_verify: every kind against the float64 reference on the device under test
 *     (PoCL here), fused at several points and apart, and planted faults that must fail;
 *   - gpu_cuda: the same tasks compiled with nvcc for sm_90 (skips without nvcc).
 */
#include "gpu_common.h"

/* N not a multiple of the tiles, M neither; keepdim; a batched and a transposed product */
static const char *const red_tasks[] = {
    "input a: f32[37, 45]\ninput b: f32[45, 71]\noutput y = sum(matmul(a, b), axes=[1])\n",
    "input a: f32[3, 19, 40]\ninput b: f32[3, 57, 40]\noutput y = mean(matmul(a, b, transpose_b=true), axes=[2], keepdim=true)\n",
    "input a: f32[29, 33]\ninput b: f32[33, 130]\noutput y = max(matmul(a, b), axes=[-1])\n",
    "input a: f32[50, 27]\ninput b: f32[27, 93]\noutput y = min(matmul(a, b), axes=[1], keepdim=true)\n",
    "input x: f32[67, 45]\ninput w: f32[83, 45]\noutput y = logsumexp(matmul(x, w, transpose_b=true), axes=[1], keepdim=true)\n",
    /* the reduction's own epilogue, taken by the combine launch's stores */
    "input x: f32[5, 33]\ninput w: f32[33, 150]\ninput c: f32[5]\noutput y = relu(mean(matmul(x, w), axes=[-1]) * 3.0 - c)\n",
};
#define NRED (int)(sizeof red_tasks / sizeof red_tasks[0])
static const char *const red_names[] = {"sum", "mean", "max", "min", "logsumexp", "mean+ewise[3 ops]"};

/* points that render different store stages: small tiles (several blocks a row), the
 * 4-wide register layout, double buffering with the prefetch, one column a work-item */
static const char *const red_points[] = {"", "tm=16 tn=16 rm=1 rn=1", "tm=32 tn=32 rm=4 rn=4 rl=1 db=1 rp=1",
                                         "tm=16 tn=32 rm=2 rn=1 tk=8", "tm=64 tn=64 rm=4 rn=8 rl=1"};
#define NPOINTS (int)(sizeof red_points / sizeof red_points[0])

/* ---- the plans ---- */

Test(gpu_text, row_reduction_is_fused_into_the_matmul) {
    static const char *const platforms[] = {"opencl", "cuda"};
    for (int pl = 0; pl < 2; pl++)
        for (int t = 0; t < NRED; t++) {
            kf_graph *g;
            kf_synth *s = plan_gpu(red_tasks[t], platforms[pl], pl ? "sm_75" : NULL, &g);
            char want[64];
            snprintf(want, sizeof want, "matmul+%s", red_names[t]);
            cr_expect_str_eq(kf_synth_describe(s), want, "%s", red_tasks[t]);
            char *fused = render_at(s, "red=1"), *apart = render_at(s, "red=0");
            /* fused: the matmul writes partials, the combine the result; y never stored */
            cr_expect(strstr(fused, "kforge:scratch pr0") != NULL, "%s", fused);
            cr_expect(strstr(fused, "kf_rr") != NULL && strstr(fused, "pass 2 of 2") != NULL);
            cr_expect(strstr(fused, "kforge:scratch t") == NULL, "the product is stored:\n%s", fused);
            cr_expect_eq(count_launches(fused), 2);
            if (strstr(red_names[t], "ewise")) cr_expect(strstr(fused, "kf_epi") != NULL, "%s", fused);
            /* apart: the product stored, the reduction its own kernel(s), no partials */
            cr_expect(strstr(apart, "kforge:scratch t") != NULL, "%s", apart);
            cr_expect(strstr(apart, "pr0") == NULL && strstr(apart, "kf_rr") == NULL);
            free(fused);
            free(apart);
            kf_synth_free(s);
            kf_graph_free(g);
        }
}

/* A product another stage reads, a reduction over M, and a chain between the product and
 * the reduction that reads a padded view (not a prologue form) are not fused on GPUs (a
 * pointwise chain is: test_gpu_tf32red.c). */
Test(gpu_text, what_is_not_fused) {
    static const char *const tasks[] = {
        "input a: f32[37, 45]\ninput b: f32[45, 71]\noutput c = matmul(a, b)\noutput y = sum(c, axes=[1])\n",
        "input a: f32[37, 45]\ninput b: f32[45, 71]\noutput y = sum(matmul(a, b), axes=[0])\n",
        "input a: f32[37, 45]\ninput b: f32[45, 71]\ninput p: f32[37, 69]\n"
        "output y = sum(matmul(a, b) + pad(p, pads=[1, 1], value=0.5), axes=[1])\n",
    };
    for (int t = 0; t < 3; t++) {
        kf_graph *g;
        kf_synth *s = plan_gpu(tasks[t], "opencl", NULL, &g);
        cr_expect(strstr(kf_synth_describe(s), "+sum") == NULL, "%s: %s", tasks[t], kf_synth_describe(s));
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

/* On cuda sm_80+ "red" is one parameter for both kernels (not gated on tc): at tc=1 the
 * 3xTF32 kernel takes the reduction in its store stage (test_gpu_tf32red.c), at tc=0 the
 * SIMT kernel; neither stores the product. */
Test(gpu_text, both_paths_take_the_reduction) {
    const char *text = "input a: f32[512, 256]\ninput b: f32[256, 1024]\noutput y = sum(matmul(a, b), axes=[1])\n";
    kf_graph *g;
    kf_synth *s = plan_gpu(text, "cuda", "sm_90", &g);
    const kf_space *sp = kf_synth_space(s);
    int red = -1, tc = -1;
    for (int i = 0; i < sp->nparams; i++) {
        if (strcmp(sp->p[i].name, "s0.red") == 0) red = i;
        if (strcmp(sp->p[i].name, "s0.tc") == 0) tc = i;
    }
    cr_assert(red >= 0 && tc >= 0);
    cr_expect_eq(sp->p[red].gate, 0);
    char *t1 = render_at(s, "tc=1 red=1"), *t0 = render_at(s, "tc=0 red=1");
    cr_expect(strstr(t1, "mma.sync") != NULL && strstr(t1, "kforge:scratch pr0") != NULL && strstr(t1, "kforge:scratch t2") == NULL);
    cr_expect(strstr(t0, "mma.sync") == NULL && strstr(t0, "kf_rr") != NULL && strstr(t0, "kforge:scratch t2") == NULL);
    free(t1);
    free(t0);
    kf_synth_free(s);
    kf_graph_free(g);
}

/* ---- verified on the device under test (PoCL here) ---- */

TestSuite(gpu_verify, .init = ocl_setup, .fini = ocl_teardown, .timeout = 900);

Test(gpu_verify, row_reductions_fused_and_apart) {
    NEED_OCL();
    /* every task at the default point and at one other, the others in turn, so that every
     * point verifies some task (every pair took 13 minutes of the CI machine's PoCL; the
     * store stages differ by point, the folds by task) */
    for (int t = 0; t < NRED; t++) {
        int other[2] = {0, 1 + t % (NPOINTS - 1)};
        for (int k = 0; k < 2; k++) {
            int v = other[k];
            char assign[128];
            snprintf(assign, sizeof assign, "%s%sred=1", red_points[v], red_points[v][0] ? " " : "");
            check_point_sets(red_tasks[t], assign, "kf_rr", 6);
        }
        check_point(red_tasks[t], "red=0", NULL);
    }
}

/* Planted faults that the verification must catch: a tile column left out of each
 * work-item's fold, the first block's partial left out of the combine, and the tree's
 * last step skipped (half of every block's columns dropped). Each mutation keeps the
 * text's length, and each is checked to have applied. */
Test(gpu_verify, dropped_columns_and_partials_are_caught) {
    NEED_OCL();
    for (int t = 0; t < NRED; t++) {
        expect_fault_caught(red_tasks[t], "tm=16 tn=16 rm=2 rn=2 red=1", "for (int j = 0; j < 2; j++) {",
                            "for (int j = 1; j < 2; j++) {");
        expect_fault_caught(red_tasks[t], "tm=16 tn=16 rm=2 rn=2 red=1", "for (int c = 0; c <", "for (int c = 1; c <");
        expect_fault_caught(red_tasks[t], "tm=16 tn=16 rm=2 rn=2 red=1", "h > 0; h >>= 1", "h > 1; h >>= 1");
    }
}

/* ---- cuda: compiled with nvcc ---- */

Test(gpu_cuda, row_reductions_compile_with_nvcc, .timeout = 600) {
    if (!nvcc_or_skip()) return;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/test-work/gpu-redepi-%ld", KF_BUILD_DIR, (long)getpid());
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(dir, &err), KF_OK, "%s", err.msg);
    for (int t = 0; t < NRED; t++) {
        kf_graph *g;
        kf_synth *s = plan_gpu(red_tasks[t], "cuda", "sm_90", &g);
        /* one point per task, in turn: every point and every task through nvcc once (nvcc
         * takes seconds per source; the text at each point is checked above) */
        {
            int v = t % NPOINTS;
            char assign[128], path[600];
            snprintf(assign, sizeof assign, "%s%stc=0 red=1", red_points[v], red_points[v][0] ? " " : "");
            char *src = render_at(s, assign);
            cr_expect(strstr(src, "kf_rr") != NULL);
            snprintf(path, sizeof path, "%s/t%d_p%d.cu", dir, t, v);
            expect_nvcc_builds(path, src, strlen(src), "-Werror all-warnings", red_tasks[t], assign);
            free(src);
        }
        kf_synth_free(s);
        kf_graph_free(g);
    }
    remove_dir(dir);
}

/* Special values through the fused store stage: 1 / relu(b) is +inf where b <= 0 (exactly,
 * in f32 and in the float64 reference alike), so with K = 2 the products hold +inf (or,
 * negated, -inf), NaN (0 * inf) and numbers: max/min must propagate NaN, logsumexp
 * follow the reference's rules for NaN, +inf and -inf, sum/mean carry them. Each is
 * checked fused at a point with several blocks a row; with the NaN-ignoring fmax/fmin
 * planted, max/min must fail. */
#define SPECIAL_IN "input a: f32[37, 2]\ninput b: f32[2, 71]\n"
static const char *const special_tasks[] = {
    SPECIAL_IN "output y = max(matmul(relu(a), 1.0 / relu(b)), axes=[1])\n",
    SPECIAL_IN "output y = min(matmul(relu(a), -1.0 / relu(b)), axes=[1])\n",
    SPECIAL_IN "output y = logsumexp(matmul(relu(a), 1.0 / relu(b)), axes=[1])\n",
    SPECIAL_IN "output y = logsumexp(matmul(relu(a), -1.0 / relu(b)), axes=[1], keepdim=true)\n",
    SPECIAL_IN "output y = mean(matmul(relu(a), -1.0 / relu(b)), axes=[1])\n",
};

Test(gpu_verify, special_values_follow_the_reference) {
    NEED_OCL();
    for (int t = 0; t < 5; t++) check_point_sets(special_tasks[t], "tm=16 tn=16 rm=2 rn=2 red=1", "kf_rr", 6);
    expect_fault_caught(special_tasks[0], "tm=16 tn=16 rm=2 rn=2 red=1", "kf_nmax(acc, v)", "   fmax(acc, v)");
    expect_fault_caught(special_tasks[1], "tm=16 tn=16 rm=2 rn=2 red=1", "kf_nmin(acc, v)", "   fmin(acc, v)");
}
