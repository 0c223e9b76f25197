/*
 * Row reductions in the 3xTF32 matmul's store stage (issue 29; src/synth/gpu_redepi.c
 * kf_gpu_redepi_mma_store, src/synth/gpu_mma32.c): sum, mean, max, min and logsumexp over
 * the product's last axis computed from the accumulator fragments (quad shuffles, the
 * warps along N through shared memory, per-block partials in scratch pr<k>) and the combine
 * launch the SIMT path uses; s<k>.red (1 fused, 0 apart) holds at tc=1 as at tc=0, and
 * kforge synth --no-fuse (a pin of every "red" to 0) keeps two kernels on both paths.
 * And a pointwise chain between the product and the reduction (product -> ewise ->
 * reduce: the reduction's prologue) computed in the same store stage through the helper
 * kf_rp<x>(flat index, product value, operands...), on the SIMT and the 3xTF32 kernel.
 *   - gpu_text: the plans and texts for cuda sm_90 (no device needed);
 *   - gpu_cuda: every task at every tf32 point compiled with nvcc for sm_90 (skips
 *     without nvcc);
 *   - gpu_verify: on the device under test. The 3xTF32 tests need cuda on sm_80+
 *     (KFORGE_TEST_GPU=cuda on a GPU machine) and skip elsewhere, saying why; the chains
 *     through the SIMT kernel, and with them the combine launch both paths share (every
 *     kind: sum, mean, max, logsumexp, min), verify on any device (PoCL here; the plain
 *     reductions through the SIMT kernel are test_gpu_redepi.c's). Each test prints what
 *     it ran.
 */
#include "gpu_common.h"

/* M, N not multiples of the tiles (N > 64, so that 64-wide blocks give several partials
 * a row), K odd or not a multiple of 4 (element-wise copies); a batched transposed
 * product; the reduction's own epilogue, taken by the combine launch's stores */
static const char *const red_tasks[] = {
    "input a: f32[70, 45]\ninput b: f32[45, 150]\noutput y = sum(matmul(a, b), axes=[1])\n",
    "input a: f32[3, 40, 36]\ninput b: f32[3, 130, 36]\noutput y = mean(matmul(a, b, transpose_b=true), axes=[2], keepdim=true)\n",
    "input a: f32[29, 33]\ninput b: f32[33, 130]\noutput y = max(matmul(a, b), axes=[-1])\n",
    "input a: f32[50, 28]\ninput b: f32[28, 193]\noutput y = min(matmul(a, b), axes=[1], keepdim=true)\n",
    "input x: f32[67, 48]\ninput w: f32[140, 48]\noutput y = logsumexp(matmul(x, w, transpose_b=true), axes=[1], keepdim=true)\n",
    "input x: f32[5, 33]\ninput w: f32[33, 150]\ninput c: f32[5]\noutput y = relu(mean(matmul(x, w), axes=[-1]) * 3.0 - c)\n",
};
#define NRED (int)(sizeof red_tasks / sizeof red_tasks[0])
static const char *const red_names[] = {"sum", "mean", "max", "min", "logsumexp", "mean+ewise[3 ops]"};

/* tf32 points whose store stages differ: the default (tiles cut to the matrix), 64 x 64
 * blocks of 2 x 2 warps (several blocks a row, two warps along N), 64-wide blocks of two
 * warps along N with a shallow ring, a 256-row block of 64 x 64 warps */
static const char *const tf32_points[] = {"tc=1 red=1", "tc=1 red=1 bm=64 bn=64 wm=32 wn=32",
                                          "tc=1 red=1 bn=64 wn=32 st=2 bk=16", "tc=1 red=1 bm=256 wn=64 bk=16"};
#define NPOINTS (int)(sizeof tf32_points / sizeof tf32_points[0])

static const char mma[] = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";

static int param_index(const kf_synth *s, const char *name) {
    const kf_space *sp = kf_synth_space(s);
    for (int i = 0; i < sp->nparams; i++)
        if (strcmp(sp->p[i].name, name) == 0) return i;
    return -1;
}

/* ---- the plans ---- */

/* At tc=1 and red=1 the tensor-core kernel writes the block partials (no product stored)
 * and the combine launch the result: two launches; at tc=1 red=0 the product is stored
 * and the reduction is its own kernel. */
Test(gpu_text, tf32_takes_the_row_reduction) {
    for (int t = 0; t < NRED; t++) {
        kf_graph *g;
        kf_synth *s = plan_gpu(red_tasks[t], "cuda", NULL, &g);
        char want[64];
        snprintf(want, sizeof want, "matmul+%s", red_names[t]);
        cr_expect_str_eq(kf_synth_describe(s), want, "%s", red_tasks[t]);
        for (int v = 0; v < NPOINTS; v++) {
            char *fused = render_at(s, tf32_points[v]);
            cr_expect(strstr(fused, mma) != NULL, "task %d [%s]: not the 3xTF32 kernel", t, tf32_points[v]);
            cr_expect(strstr(fused, "kforge:scratch pr0") != NULL, "task %d [%s]: no partials\n%s", t, tf32_points[v], fused);
            cr_expect(strstr(fused, "combines by shuffles") != NULL && strstr(fused, "pass 2 of 2") != NULL);
            cr_expect(strstr(fused, "kforge:scratch t") == NULL, "task %d [%s]: the product is stored", t, tf32_points[v]);
            cr_expect(strstr(fused, "*(float2 *)(b") == NULL, "task %d: a store of C", t);
            cr_expect_eq(count_launches(fused), 2, "task %d [%s]", t, tf32_points[v]);
            if (strstr(red_names[t], "ewise")) cr_expect(strstr(fused, "kf_epi") != NULL);
            free(fused);
        }
        char *apart = render_at(s, "tc=1 red=0");
        cr_expect(strstr(apart, mma) != NULL && strstr(apart, "kforge:scratch t") != NULL, "%s", apart);
        cr_expect(strstr(apart, "pr0") == NULL && strstr(apart, "combines by shuffles") == NULL, "task %d apart", t);
        free(apart);
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

/* "red" is one parameter for both kernels (no gate on tc); a product large enough for the
 * 3xTF32 default is planned fused at the default point (tc=1 red=1: the product kernel
 * and the combine); --no-fuse (a pin of every "red" to 0) gives two kernels of which the
 * first stores the product, on both paths. */
Test(gpu_text, large_product_defaults_to_fused_tf32_and_no_fuse_splits_it) {
    static const char text[] = "input a: f32[2048, 512]\ninput b: f32[512, 2048]\noutput y = sum(matmul(a, b), axes=[1])\n";
    kf_graph *g;
    kf_synth *s = plan_gpu(text, "cuda", NULL, &g);
    cr_expect_str_eq(kf_synth_describe(s), "matmul+sum");
    int red = param_index(s, "s0.red"), tc = param_index(s, "s0.tc");
    cr_assert(red >= 0 && tc >= 0, "red %d tc %d in %s", red, tc, kf_synth_describe(s));
    const kf_space *sp = kf_synth_space(s);
    cr_expect_eq(sp->p[red].gate, 0, "red is gated (on %d)", sp->p[red].gate);
    kf_point p;
    kf_synth_default_point(s, &p);
    cr_expect_eq(sp->p[tc].values[p.idx[tc]], 1, "default tc");
    cr_expect_eq(sp->p[red].values[p.idx[red]], 1, "default red");
    char *src = render_point(s, &p);
    cr_expect(strstr(src, mma) != NULL && strstr(src, "kforge:scratch pr0") != NULL, "%s", src);
    cr_expect(strstr(src, "kforge:scratch t") == NULL);
    cr_expect_eq(count_launches(src), 2);
    free(src);
    cr_expect_eq(kf_synth_pin(s, "red", 0), 1);
    cr_expect_str_eq(kf_synth_describe(s), "matmul -> sum");
    for (int path = 0; path < 2; path++) {
        src = render_at(s, path ? "tc=1" : "tc=0");
        cr_expect_eq(strstr(src, mma) != NULL, path, "tc=%d", path);
        cr_expect(strstr(src, "kforge:scratch t2") != NULL, "tc=%d: the product is not stored", path);
        cr_expect(strstr(src, "pr0") == NULL && strstr(src, "combines by shuffles") == NULL && strstr(src, "kf_rr") == NULL,
                  "tc=%d: still fused", path);
        free(src);
    }
    kf_synth_free(s);
    kf_graph_free(g);
}

/* ---- cuda: compiled with nvcc ---- */

/* The plain reductions through nvcc_every_point (one translation unit a task, its
 * kernels renamed per point): every task at the first two points, two tasks (max over an
 * N of 130, min over 193) at the other two; the one with the reduction's epilogue (a
 * helper emitted after the product kernel) at one point on its own. */
Test(gpu_cuda, tf32_row_reductions_compile_with_nvcc, .timeout = 600) {
    if (!nvcc_or_skip()) return;
    static const char *const want[] = {mma, "combines by shuffles", "pass 2 of 2"};
    cr_expect_eq(nvcc_every_point("tf32red", red_tasks, NRED - 1, tf32_points, 2, 1, want, 3), (NRED - 1) * 2);
    const char *const more[] = {red_tasks[2], red_tasks[3]};
    cr_expect_eq(nvcc_every_point("tf32red2", more, 2, tf32_points + 2, NPOINTS - 2, 1, want, 3), 2 * (NPOINTS - 2));
    char dir[512];
    snprintf(dir, sizeof dir, "%s/test-work/gpu-tf32red-epi-%ld", KF_BUILD_DIR, (long)getpid());
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(dir, &err), KF_OK, "%s", err.msg);
    kf_graph *g;
    kf_synth *s = plan_gpu(red_tasks[NRED - 1], "cuda", NULL, &g);
    char *src = render_at(s, tf32_points[1]);
    cr_expect(strstr(src, "kf_epi") != NULL && strstr(src, mma) != NULL);
    char path[600];
    snprintf(path, sizeof path, "%s/epi.cu", dir);
    expect_nvcc_builds(path, src, strlen(src), "-Werror all-warnings", red_tasks[NRED - 1], tf32_points[1]);
    free(src);
    kf_synth_free(s);
    kf_graph_free(g);
    remove_dir(dir);
    fprintf(stderr, "gpu_cuda/tf32_row_reductions_compile_with_nvcc: nvcc (sm_90) built %d tasks x 2 tf32 points, "
                    "2 of them x %d more, the epilogue task at 1\n", NRED - 1, NPOINTS - 2);
}

/* ---- the device under test ---- */

TestSuite(gpu_verify, .init = ocl_setup, .fini = ocl_teardown, .timeout = 900);

/* Every kind fused in the 3xTF32 kernel at every tf32 point (the first task on every
 * distribution) and apart (tc=1 red=0), against the float64 reference; only on cuda
 * sm_80+. */
Test(gpu_verify, tf32_row_reductions) {
    NEED_OCL();
    if (!tc_device_or_skip("the 3xTF32 row reductions")) return;
    for (int t = 0; t < NRED; t++) {
        for (int v = 0; v < NPOINTS; v++)
            check_point_sets(red_tasks[t], tf32_points[v], "combines by shuffles", t == 0 && v == 0 ? 6 : 2);
        check_point(red_tasks[t], "tc=1 red=0", mma);
    }
    fprintf(stderr, "gpu_verify/tf32_row_reductions: ran on %s %s: %d tasks x %d fused tf32 points + apart\n",
            ocl->info.platform, ocl->info.arch, NRED, NPOINTS);
}

/* The chain's planted faults (chain_tasks[t] at assign): the helper kf_rp<x> returns the
 * product's value (the chain skipped); for the tasks whose operand varies along N (the
 * bias, the residual) the element's column is read as 0. */
static void chain_faults(const char *text, const char *assign, int t) {
    kf_error err = {0};
    kf_graph *g = parse(text);
    kf_synth *s = NULL;
    cr_assert_eq(kf_synth_plan(g, ocl->info.platform, &ocl->info, &s, &err), KF_OK, "plan: %s", err.msg);
    kf_point p;
    cr_assert(point_assign(s, assign, &p));
    char *src = render_point(s, &p);
    const char *h = strstr(src, "float kf_rp"), *ret = h ? strstr(h, "    return r") : NULL;
    cr_assert(ret != NULL, "no kf_rp helper in\n%s", src);
    char from[32], to[32];
    int x = -1;
    cr_assert_eq(sscanf(ret, "    return r%d;", &x), 1);
    snprintf(from, sizeof from, "return r%d;", x);
    snprintf(to, sizeof to, "return v;%*s", (int)strlen(from) - 9, "");
    free(src);
    kf_synth_free(s);
    kf_graph_free(g);
    expect_fault_caught(text, assign, from, to);
    if (t == 1 || t == 4) expect_fault_caught(text, assign, " + (c), ", " + (0), ");
}

/* Planted faults in the 3xTF32 store stage: the second column of each lane's pairs left
 * out of its fold, the quad's first shuffle step skipped (two lanes' columns dropped), the
 * second warp along N left out of the block's partial, and the first block's partial left
 * out of the combine. Only on cuda sm_80+. */
Test(gpu_verify, tf32_planted_faults_are_caught) {
    NEED_OCL();
    if (!tc_device_or_skip("the 3xTF32 row reductions")) return;
    static const char pt[] = "tc=1 red=1 bm=64 bn=64 wm=32 wn=32";
    for (int t = 0; t < NRED; t++) {
        expect_fault_caught(red_tasks[t], pt, "for (int x = 0; x < 2; x++) {", "for (int x = 0; x < 1; x++) {");
        expect_fault_caught(red_tasks[t], pt, "for (int q = 1; q < 4; q <<= 1)", "for (int q = 2; q < 4; q <<= 1)");
        expect_fault_caught(red_tasks[t], pt, "for (int w = 1; w < 2; w++)", "for (int w = 2; w < 2; w++)");
        expect_fault_caught(red_tasks[t], pt, "for (int c = 0; c <", "for (int c = 1; c <");
    }
    fprintf(stderr, "gpu_verify/tf32_planted_faults_are_caught: ran on %s %s: %d tasks x 4 faults\n", ocl->info.platform,
            ocl->info.arch, NRED);
}

/* ---- a pointwise chain between the product and the reduction ---- */

/* an activation alone; a bias over N and an activation on a batched product; a scale and a
 * per-row operand; a chain under logsumexp; a residual of the product's own shape */
static const char *const chain_tasks[] = {
    "input a: f32[37, 45]\ninput b: f32[45, 71]\noutput y = sum(relu(matmul(a, b)), axes=[1])\n",
    "input x: f32[3, 19, 40]\ninput w: f32[40, 90]\ninput c: f32[90]\noutput y = mean(gelu(matmul(x, w) + c), axes=[2])\n",
    "input a: f32[29, 33]\ninput b: f32[33, 130]\ninput r: f32[29, 1]\noutput y = max(matmul(a, b) * 0.5 - r, axes=[-1])\n",
    "input x: f32[67, 48]\ninput w: f32[140, 48]\n"
    "output y = logsumexp(tanh(matmul(x, w, transpose_b=true)) * 2.0, axes=[1], keepdim=true)\n",
    "input a: f32[50, 28]\ninput b: f32[28, 93]\ninput s: f32[50, 93]\noutput y = min(matmul(a, b) + s, axes=[1])\n",
};
#define NCHAIN (int)(sizeof chain_tasks / sizeof chain_tasks[0])
static const char *const chain_names[] = {"matmul+sum(ewise[1 op])", "matmul+mean(ewise[2 ops])",
                                          "matmul+max(ewise[2 ops])", "matmul+logsumexp(ewise[2 ops])",
                                          "matmul+min(ewise[1 op])"};

/* Fused (red=1): the product kernel folds kf_rp<x>(...) of each element, nothing stored
 * but the partials, two launches; apart (red=0): the product stored and the reduction
 * reading it through its prologue (kf_pro); on opencl (SIMT) and on cuda at tc=0 and tc=1. */
Test(gpu_text, chain_is_fused_on_both_paths) {
    for (int t = 0; t < NCHAIN; t++)
        for (int pl = 0; pl < 2; pl++) {
            kf_device_info dev;
            gpu_like(&dev, pl ? "cuda" : "opencl");
            kf_error err = {0};
            kf_graph *g = parse(chain_tasks[t]);
            kf_synth *s = NULL;
            cr_assert_eq(kf_synth_plan(g, dev.platform, &dev, &s, &err), KF_OK, "plan: %s", err.msg);
            cr_expect_str_eq(kf_synth_describe(s), chain_names[t], "%s on %s", chain_tasks[t], dev.platform);
            for (int tc = 0; tc < 1 + pl; tc++) {
                char fa[32], aa[32];
                snprintf(fa, sizeof fa, "%sred=1", pl ? (tc ? "tc=1 " : "tc=0 ") : "");
                snprintf(aa, sizeof aa, "%sred=0", pl ? (tc ? "tc=1 " : "tc=0 ") : "");
                char *fused = render_at(s, fa), *apart = render_at(s, aa);
                cr_expect(strstr(fused, "kf_rp") != NULL && strstr(fused, "kforge:scratch pr0") != NULL,
                          "task %d %s [%s]:\n%s", t, dev.platform, fa, fused);
                cr_expect(strstr(fused, "kforge:scratch t") == NULL && strstr(fused, "kf_pro") == NULL);
                cr_expect_eq(count_launches(fused), 2, "task %d %s [%s]", t, dev.platform, fa);
                cr_expect_eq(strstr(fused, mma) != NULL, tc);
                cr_expect(strstr(apart, "kf_rp") == NULL && strstr(apart, "kf_pro") != NULL &&
                              strstr(apart, "kforge:scratch t") != NULL,
                          "task %d %s [%s]:\n%s", t, dev.platform, aa, apart);
                free(fused);
                free(apart);
            }
            kf_synth_free(s);
            kf_graph_free(g);
        }
}

/* Each chain task through nvcc (sm_90) at one point, tc=1 points and tc=0 in turn. */
Test(gpu_cuda, chains_compile_with_nvcc, .timeout = 600) {
    if (!nvcc_or_skip()) return;
    static const char *const pts[] = {"tc=1 red=1", "tc=0 red=1 tm=16 tn=16 rm=2 rn=2", tf32_points[1],
                                      "tc=0 red=1 rl=1", tf32_points[2]};
    char dir[512];
    snprintf(dir, sizeof dir, "%s/test-work/gpu-tf32red-chain-%ld", KF_BUILD_DIR, (long)getpid());
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(dir, &err), KF_OK, "%s", err.msg);
    for (int t = 0; t < NCHAIN; t++) {
        kf_graph *g;
        kf_synth *s = plan_gpu(chain_tasks[t], "cuda", NULL, &g);
        char *src = render_at(s, pts[t]);
        cr_expect(strstr(src, "kf_rp") != NULL);
        char path[600];
        snprintf(path, sizeof path, "%s/chain%d.cu", dir, t);
        expect_nvcc_builds(path, src, strlen(src), "-Werror all-warnings", chain_tasks[t], pts[t]);
        free(src);
        kf_synth_free(s);
        kf_graph_free(g);
    }
    remove_dir(dir);
    fprintf(stderr, "gpu_cuda/chains_compile_with_nvcc: nvcc (sm_90) built %d chain tasks, one point each\n", NCHAIN);
}

/* The chain fused in the SIMT kernel (tc=0 where tc exists) at a point of several blocks a
 * row (the bias task on every distribution; the logsumexp one at the default point too:
 * the 4-wide register layout on GPUs), and one task apart, against the float64 reference
 * on any device under test (PoCL here); planted in each: the helper returning the
 * product instead of the chain's value, and (where an operand varies along N) the
 * operands read at column 0. */
Test(gpu_verify, chain_through_the_simt_kernel) {
    NEED_OCL();
    for (int t = 0; t < NCHAIN; t++) {
        kf_graph *g = parse(chain_tasks[t]);
        kf_synth *s = NULL;
        kf_error err = {0};
        cr_assert_eq(kf_synth_plan(g, ocl->info.platform, &ocl->info, &s, &err), KF_OK, "plan: %s", err.msg);
        const int has_tc = param_index(s, "s0.tc") >= 0;
        kf_synth_free(s);
        kf_graph_free(g);
        const char *pt = has_tc ? "tc=0 tm=16 tn=16 rm=2 rn=2 red=1" : "tm=16 tn=16 rm=2 rn=2 red=1";
        check_point_sets(chain_tasks[t], pt, "kf_rp", t == 1 ? 6 : 2);
        if (t == 3) check_point(chain_tasks[t], has_tc ? "tc=0 red=1" : "red=1", "kf_rp");
        if (t == 0) check_point(chain_tasks[t], "red=0", "kf_pro");
        chain_faults(chain_tasks[t], pt, t);
    }
    fprintf(stderr, "gpu_verify/chain_through_the_simt_kernel: ran on %s %s: %d chain tasks\n", ocl->info.platform,
            ocl->info.arch, NCHAIN);
}

/* The same chains fused in the 3xTF32 kernel at every tf32 point, apart at tc=1, and the
 * planted faults; only on cuda sm_80+. */
Test(gpu_verify, chain_through_the_tf32_kernel) {
    NEED_OCL();
    if (!tc_device_or_skip("the 3xTF32 chains")) return;
    for (int t = 0; t < NCHAIN; t++) {
        for (int v = 0; v < NPOINTS; v++) check_point_sets(chain_tasks[t], tf32_points[v], "kf_rp", v == 0 ? 6 : 2);
        check_point(chain_tasks[t], "tc=1 red=0", mma);
        chain_faults(chain_tasks[t], tf32_points[1], t);
    }
    fprintf(stderr, "gpu_verify/chain_through_the_tf32_kernel: ran on %s %s: %d chain tasks x %d tf32 points\n",
            ocl->info.platform, ocl->info.arch, NCHAIN, NPOINTS);
}
