/*
 * A GPU matmul's gathered operand (a fused prologue's: an implicit GEMM's columns, a padded
 * or flipped operand) with its addressing split into a part per M/N index and a part per K
 * index (src/synth/gpu_prosplit.c), on the 3xTF32 kernel (tc=1) and the SIMT kernel (tc=0):
 *   - gpu_text: which form each operand takes on cuda sm_90 (the split where the layout
 *     factors at the operand's row length, the flat kf_pro<x> where it does not), and what
 *     each part holds (a conv2d's K part: its kw and kh taken apart, nothing of oh, ow);
 *   - gpu_cuda: every task at the tf32 points and at tc=0 (default tiles), compiled with nvcc for sm_90
 *     as warnings-as-errors (skips without nvcc);
 *   - gpu_verify: every task at those points against the float64 reference on the device
 *     under test, where its plan fuses the prologue into the matmul (cuda sm_80+; skips
 *     elsewhere: PoCL keeps the columns' copy).
 */
#include "gpu_common.h"

/* the split where the layout factors: a conv2d (B, M/N-major, its batch of images the
 * matrices' part), a conv3d, a flipped B read transposed (K-contiguous), a padded A read
 * transposed (the planner folds the transpose: K-contiguous), a batched A whose matrices fall inside a dim (the row part takes them, as
 * m*R + row), a batched B likewise (the K part takes them) */
static const char *const split_tasks[] = {
    "input x: f32[2, 5, 13, 11]\ninput w: f32[7, 5, 3, 3]\n"
    "output y = conv(x, w, stride=[2, 1], padding=[1, 2], dilation=[2, 1])\n",
    "input x: f32[2, 4, 7, 9, 5]\ninput w: f32[6, 4, 3, 3, 3]\noutput y = conv(x, w, padding=[1, 0, 1], stride=[1, 2, 1])\n",
    "input a: f32[45, 29]\ninput b: f32[33, 29]\noutput c = matmul(a, relu(flip(b, dims=[0]) - 0.25), transpose_b=true)\n",
    "input a: f32[64, 200]\ninput b: f32[96, 64]\n"
    "output c = matmul(pad(a, pads=[0, 3], value=0.5), b, transpose_a=true, transpose_b=true)\n",
    "input x: f32[2, 4, 8]\ninput w: f32[10, 5]\noutput y = matmul(reshape(pad(x, pads=[1, 1, 1, 1]), shape=[3, 4, 10]), w)\n",
    "input x: f32[2, 4, 8]\ninput w: f32[5, 4]\noutput y = matmul(w, reshape(pad(x, pads=[1, 1, 1, 1]), shape=[3, 4, 10]))\n",
};
#define NSPLIT (int)(sizeof split_tasks / sizeof split_tasks[0])

/* the flat helper where the operand's rows (4 columns) end inside the padded rows of 10 */
static const char fallback_task[] =
    "input x: f32[6, 8]\ninput w: f32[7, 15]\noutput y = matmul(w, reshape(pad(x, pads=[1, 1]), shape=[15, 4]))\n";

static const char *const points[] = {"tc=1", "tc=1 st=2 bk=16 mb=2", "tc=1 bm=64 bn=256 wm=32", "tc=1 bn=64 wm=32 wn=32",
                                     "tc=1 acc=1"};
#define NPOINTS (int)(sizeof points / sizeof points[0])

/* The text of helper `name` (from its definition to the closing brace at column 0). */
static char *helper_text(const char *src, const char *name) {
    char want[64];
    snprintf(want, sizeof want, " %s(", name);
    const char *a = strstr(src, want);
    cr_assert(a != NULL, "no helper %s", name);
    const char *e = strstr(a, "\n}\n");
    cr_assert(e != NULL);
    return strndup(a, (size_t)(e - a));
}

static int count_of(const char *s, const char *what) {
    int n = 0;
    for (const char *q = strstr(s, what); q; q = strstr(q + 1, what)) n++;
    return n;
}

/* The kernel (CUDA): from its definition on. */
static const char *kernel_of(const char *src) {
    const char *k = strstr(src, "__global__");
    cr_assert(k != NULL, "no kernel in\n%s", src);
    return k;
}

/* A conv2d as a KernelBench-like implicit GEMM: both kernels read B through the split
 * parts, not kf_pro; the K part holds the filter taps (kw, kh: two remainders), the M/N
 * part the output position (ow: one remainder) and the image (the matrix index). */
Test(gpu_text, conv2d_takes_the_split_form) {
    static const char task[] = "input x: f32[4, 16, 20, 20]\ninput w: f32[32, 16, 3, 3]\n"
                               "output y = conv(x, w, padding=[1, 1])\n";
    kf_graph *g = NULL;
    kf_synth *s = plan_gpu(task, "cuda", "sm_90", &g);
    cr_assert_str_eq(kf_synth_describe(s), "matmul(ewise[1 op])");
    for (int tc = 0; tc < 2; tc++) {
        char *src = render_at(s, tc ? "tc=1" : "tc=0");
        const char *k = kernel_of(src);
        cr_expect(strstr(k, "kf_pro") == NULL, "tc=%d: the flat helper in the kernel", tc);
        char *pk = NULL, *pm = NULL;
        int x = -1;
        const char *h = strstr(src, "void kf_prk");
        if (h && sscanf(h, "void kf_prk%d(", &x) == 1) { /* the value's index in the lowered graph */
            char name[32];
            snprintf(name, sizeof name, "kf_prk%d", x);
            pk = helper_text(src, name);
            snprintf(name, sizeof name, "kf_prm%d", x);
            pm = helper_text(src, name);
        }
        cr_assert(pk && pm, "tc=%d: no split helpers in\n%s", tc, src);
        cr_expect_eq(count_of(pk, " % "), 2, "K part:\n%s", pk);
        cr_expect_eq(count_of(pm, " % "), 1, "M/N part:\n%s", pm);
        cr_expect(strstr(pm, "idx = m;") != NULL, "the image is the M/N part's:\n%s", pm);
        cr_expect(strstr(pk, "m *") == NULL, "K part:\n%s", pk);
        if (tc) {
            cr_expect(strstr(k, "its addresses split into M/N and K parts") != NULL);
            cr_expect(strstr(k, "ok ? kf_prs") != NULL && strstr(k, "(pk[q], pmb[j]") != NULL, "tc=1:\n%s", k);
            /* the M/N parts once, before the ring's first steps */
            const char *once = strstr(k, "kf_prm"), *ring = strstr(k, "for (int s0 = 0;");
            cr_expect(once && ring && once < ring, "the M/N parts are not computed before the ring");
            cr_expect_eq(count_of(k, "kf_prm"), 1);
        } else {
            cr_expect(strstr(k, "kf_prx") != NULL && strstr(k, "kf_prx") > strstr(k, "kf_prm"), "tc=0:\n%s", k);
            cr_expect_eq(count_of(k, "kf_prm"), 1);
        }
        free(pk);
        free(pm);
        free(src);
    }
    kf_synth_free(s);
    kf_graph_free(g);
}

/* Each split task's 3xTF32 kernel takes the split form, with the parts the right way round:
 * K-contiguous operands (A plain or transposed B) take pk[j] (a K index per chunk column)
 * and pm[q] (an M/N index per row); M/N-major ones the other way. The batched tasks whose
 * matrices fall inside a dim fold them into the row part's index (m * R + i). */
Test(gpu_text, split_tasks_take_the_split_form) {
    static const char *const want[NSPLIT] = {"(pk[q], pmb[j]", "(pk[q], pmb[j]", "(pk[j], pmb[q]",
                                             "(pk[j], pma[q]", "(pk[j], pma[q]", "(pk[q], pmb[j]"};
    for (int t = 0; t < NSPLIT; t++) {
        kf_graph *g = NULL;
        kf_synth *s = plan_gpu(split_tasks[t], "cuda", "sm_90", &g);
        cr_assert(strncmp(kf_synth_describe(s), "matmul(ewise[", 13) == 0, "task %d: %s", t, kf_synth_describe(s));
        char *src = render_at(s, "tc=1");
        const char *k = kernel_of(src);
        cr_expect(strstr(k, "kf_pro") == NULL, "task %d: the flat helper", t);
        cr_expect(strstr(k, want[t]) != NULL, "task %d: no '%s' in\n%s", t, want[t], k);
        const int folded = strstr(src, "i = m * 4 + i;") != NULL;
        cr_expect_eq(folded, t >= 4, "task %d: matrices folded into the row part: %d", t, folded);
        free(src);
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

/* Where the operand's row length falls inside a dim of the layout at no divisor of it, both
 * kernels keep the flat helper; a stage without a prologue has none of it. */
Test(gpu_text, the_flat_helper_where_the_layout_does_not_factor) {
    kf_graph *g = NULL;
    kf_synth *s = plan_gpu(fallback_task, "cuda", "sm_90", &g);
    cr_assert(strncmp(kf_synth_describe(s), "matmul(ewise[", 13) == 0, "%s", kf_synth_describe(s));
    for (int tc = 0; tc < 2; tc++) {
        char *src = render_at(s, tc ? "tc=1" : "tc=0");
        cr_expect(strstr(src, "kf_prm") == NULL, "tc=%d: split helpers", tc);
        cr_expect(strstr(kernel_of(src), "kf_pro") != NULL, "tc=%d: no flat helper in the kernel", tc);
        free(src);
    }
    kf_synth_free(s);
    kf_graph_free(g);
    s = plan_gpu("input a: f32[300, 200]\ninput b: f32[200, 260]\noutput c = matmul(a, b)\n", "cuda", "sm_90", &g);
    for (int tc = 0; tc < 2; tc++) {
        char *src = render_at(s, tc ? "tc=1" : "tc=0");
        cr_expect(strstr(src, "kf_pr") == NULL && strstr(src, "pmt") == NULL, "tc=%d", tc);
        free(src);
    }
    kf_synth_free(s);
    kf_graph_free(g);
}

Test(gpu_cuda, split_prologue_compiles_with_nvcc, .timeout = 600) {
    if (!nvcc_or_skip()) return;
    static const char *const want[] = {"kf_prs"}, *const simt[] = {"tc=0"};
    cr_expect_eq(nvcc_every_point("split", split_tasks, NSPLIT, points, NPOINTS, 1, want, 1), NSPLIT * NPOINTS);
    cr_expect_eq(nvcc_every_point("splitsimt", split_tasks, NSPLIT, simt, 1, 1, want, 1), NSPLIT);
    static const char *const fb[] = {fallback_task};
    static const char *const fwant[] = {"kf_pro"};
    cr_expect_eq(nvcc_every_point("splitfb", fb, 1, points, NPOINTS, 1, fwant, 1), NPOINTS);
    cr_expect_eq(nvcc_every_point("splitfbsimt", fb, 1, simt, 1, 1, fwant, 1), 1);
}

TestSuite(gpu_verify, .init = ocl_setup, .fini = ocl_teardown, .timeout = 900);

/* SIMT points that take the split (a group of 256 items, a multiple of the tile's M/N
 * extent) and one that keeps the flat helper on PoCL's default tiles; "tc=0" where the
 * device has the choice */
static const char *const simt_points[] = {"", "tm=16 tn=16 rm=1 rn=1", "tm=32 tn=32 rm=2 rn=2 db=0",
                                          "tm=32 tn=32 rm=2 rn=2 db=1 rp=1"};
#define NSIMT (int)(sizeof simt_points / sizeof simt_points[0])

static int assign_simt(const kf_synth *s, const char *rest, kf_point *p) {
    char a[160];
    snprintf(a, sizeof a, "tc=0%s%s", rest[0] ? " " : "", rest);
    return point_assign(s, a, p) || point_assign(s, rest, p);
}

/* Every task (the fallback too) at every point against the float64 reference, where the
 * device under test's plan fuses the prologue (cuda sm_80+; PoCL with a local build that
 * lets kf_gpu_matmul_prologue_ok accept opencl, docs/design-notes.md); the tf32 points
 * only where the device has them. */
Test(gpu_verify, split_prologue) {
    NEED_OCL();
    int ran = 0;
    for (int t = 0; t <= NSPLIT; t++) {
        const char *text = t < NSPLIT ? split_tasks[t] : fallback_task;
        kf_graph *g = parse(text);
        kf_synth *s = NULL;
        kf_error err = {0};
        cr_assert_eq(kf_synth_plan(g, ocl->info.platform, &ocl->info, &s, &err), KF_OK, "plan: %s", err.msg);
        const int fused = strncmp(kf_synth_describe(s), "matmul(ewise[", 13) == 0;
        for (int v = 0; fused && v < NPOINTS + NSIMT; v++) {
            kf_point p;
            if (v < NPOINTS ? !strstr(points[v], "tc=1") || !point_assign(s, points[v], &p)
                            : !assign_simt(s, simt_points[v - NPOINTS], &p))
                continue;
            kf_verify_ctx *ctx = test_ctx(g, 7, ran == 0 ? 6 : 2);
            expect_verifies(s, ctx, &p, text, v < NPOINTS ? (t < NSPLIT ? "kf_prs" : "kf_pro") : NULL);
            kf_verify_ctx_free(ctx);
            ran++;
        }
        kf_synth_free(s);
        kf_graph_free(g);
    }
    if (!ran) cr_skip_test("no plan on %s %s fuses the prologue into the matmul (cuda sm_80+ does)", ocl->info.platform,
                           ocl->info.arch);
}
