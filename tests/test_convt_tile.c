/*
 * Tests of the CPU GEMM's zero-row skip for a gathered B (src/synth/tpl_matmul.c, "zs"):
 * a stride-1 conv_transpose runs as a convolution over its input padded by the kernel size
 * less one, so many of B's rows, within one packed strip, read only the padding. The
 * packing lists each strip's rows that hold a value other than +-0 and the micro-kernel
 * runs over those only, where A's block is finite (0 * inf is NaN: such a block runs whole).
 *
 * Each case builds a padded source (a zero border, random values inside: a conv_transpose's
 * shape, 16 output channels, or counts that are no multiple of the micro-kernel's rows or of
 * the vector length; output widths that leave a partial last strip; K cut into several
 * slices), emits the GEMM, compiles it with the CPU backend's flags, and compares it with a
 * double-precision loop written here that multiplies every term (NaN where the strict
 * product is NaN). C is NaN-poisoned and fenced by sentinels.
 */
#include <math.h>

#include "tpl_cpu_common.h"

typedef struct zc_case {
    int64_t M, C, h, w, kh, kw; /* output channels, input channels, input plane, kernel */
    const char *params;         /* overrides of the default point ("zs=1 mk=424 ...") */
    int simd;                   /* 256 (AVX2 device) or 512 (AVX-512 device) */
    int inf_at;                 /* 1 + the A element set to +inf (0: none) */
    int zero_channel;           /* 1 + an input channel whose interior is zero too (0: none) */
    int padded;                 /* kf_mm_gather.padded (the default of zs) */
} zc_case;

/* The implicit GEMM of a stride-1 conv over the padded source: rows k = (c, ky, kx), columns
 * j = (oy, ox); the source is C planes of (h + 2p) x (w + 2p), p = kh - 1 (kw - 1). */
static kf_mm_gather padded_cols(const zc_case *c, int64_t *H, int64_t *W) {
    *H = c->h + 2 * (c->kh - 1);
    *W = c->w + 2 * (c->kw - 1);
    kf_mm_gather g = {.on = 1, .nrow = 3, .ncol = 2, .padded = c->padded};
    g.rdim[0] = c->C, g.rstr[0] = *H * *W;
    g.rdim[1] = c->kh, g.rstr[1] = *W;
    g.rdim[2] = c->kw, g.rstr[2] = 1;
    g.cdim[0] = *H - c->kh + 1, g.cstr[0] = *W;
    g.cdim[1] = *W - c->kw + 1, g.cstr[1] = 1;
    return g;
}

/* Emit, compile and check one case; returns the emitted source (the caller frees it). */
static char *run_case(const zc_case *c) {
    int64_t H, W;
    kf_matmul_desc d;
    memset(&d, 0, sizeof d);
    d.batch = 1;
    d.M = c->M;
    d.gb = padded_cols(c, &H, &W);
    d.N = d.gb.cdim[0] * d.gb.cdim[1];
    d.K = c->C * c->kh * c->kw;
    char dir[64], *src = NULL;
    void *h = NULL;
    int (*fn)(void *const *) = mm_kernel_load(&d, c->simd, c->params, "kf_zskip", dir, sizeof dir, &src, &h);

    const int64_t N = d.N, K = d.K, pk = c->kh - 1, pw = c->kw - 1;
    int64_t na = c->M * K, nb = c->C * H * W, nc = c->M * N;
    float *A = malloc(sizeof(float) * (size_t)na), *Cg = malloc(sizeof(float) * (size_t)(nc + 2 * GUARD));
    cr_assert(A && Cg);
    fenced fb = fenced_alloc(nb, 0);
    float *B = fb.p;
    for (int64_t i = 0; i < na; i++) A[i] = frand();
    if (c->inf_at) A[c->inf_at - 1] = INFINITY;
    for (int64_t ch = 0; ch < c->C; ch++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                int inside = y >= pk && y < H - pk && x >= pw && x < W - pw && ch != c->zero_channel - 1;
                float v = frand();
                B[(ch * H + y) * W + x] = inside ? (v != 0.0f ? v : 0.5f) : ((x + y) & 1 ? -0.0f : 0.0f);
            }
    for (int64_t i = 0; i < nc + 2 * GUARD; i++) Cg[i] = SENTINEL;
    float *C = Cg + GUARD;
    for (int64_t i = 0; i < nc; i++) C[i] = NAN;
    void *args[3] = {A, B, C};
    cr_assert(fn(args) == 0);

    for (int i = 0; i < GUARD; i++)
        cr_assert(Cg[i] == SENTINEL && Cg[GUARD + nc + i] == SENTINEL, "%s: a write outside C", c->params);
    double tol = 2e-5 * sqrt((double)K);
    for (int64_t i = 0; i < c->M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, sa = 0;
            for (int64_t k = 0; k < K; k++) {
                double x = A[i * K + k], y = B[gather_at(&d.gb, k, j)];
                s += x * y;
                sa += fabs(x * y);
            }
            double got = C[i * N + j];
            if (isnan(s) || isinf(s)) {
                cr_assert(isnan(s) ? isnan(got) : got == s, "%s (M=%lld N=%lld K=%lld): C[%lld][%lld] = %.9g, want %.9g",
                          c->params, (long long)c->M, (long long)N, (long long)K, (long long)i, (long long)j, got, s);
                continue;
            }
            cr_assert(isfinite(got) && fabs(got - s) <= tol * sa + 1e-30,
                      "%s (M=%lld N=%lld K=%lld): C[%lld][%lld] = %.9g, want %.9g", c->params, (long long)c->M,
                      (long long)N, (long long)K, (long long)i, (long long)j, got, s);
        }
    fenced_free(&fb);
    free(A);
    free(Cg);
    dlclose(h);
    remove_dir(dir);
    return src;
}

/* A conv_transpose's shapes: 16 output channels (the M of KernelBench 77, 61), and 13 and 20
 * (no multiple of the micro-kernel's rows or of the vector); output rows of 8, 11, 19 columns
 * (partial strips, strips that hold the ends of rows); K in several slices (kc 16, 20). */
Test(convt_tile, zero_rows_skipped_right) {
    const zc_case cs[] = {
        {.M = 16, .C = 2, .h = 6, .w = 6, .kh = 3, .kw = 3, .params = "zs=1 mk=424", .simd = 256},
        {.M = 16, .C = 3, .h = 7, .w = 7, .kh = 5, .kw = 5, .params = "zs=1 mk=424 kc=20 threads=2", .simd = 256},
        {.M = 13, .C = 2, .h = 7, .w = 5, .kh = 5, .kw = 3, .params = "zs=1 mk=616 kc=16", .simd = 256},
        {.M = 20, .C = 4, .h = 5, .w = 15, .kh = 3, .kw = 5, .params = "zs=1 mk=808 threads=2 split=2", .simd = 256},
        /* an input channel zero inside too: rows that are zero without being padding */
        {.M = 16, .C = 3, .h = 6, .w = 9, .kh = 3, .kw = 3, .params = "zs=1 mk=424 kc=16", .simd = 256,
         .zero_channel = 2},
        /* A not finite: the block runs every row, so that 0 * inf gives NaN as it should; the
         * inf at a row k that is all padding in some strip (k = 6: the bottom taps of the
         * last strip's output rows; k = 1: the top taps of the first strip's) */
        {.M = 16, .C = 2, .h = 6, .w = 6, .kh = 3, .kw = 3, .params = "zs=1 mk=424", .simd = 256, .inf_at = 1 + 6},
        {.M = 13, .C = 2, .h = 5, .w = 7, .kh = 3, .kw = 3, .params = "zs=1 mk=616 kc=16", .simd = 256,
         .inf_at = 1 + 5 * 18 + 1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        char *src = run_case(&cs[i]);
        cr_expect(strstr(src, "_ukr_z(") != NULL, "case %zu: the skipping micro-kernel is not called", i);
        free(src);
    }
}

/* The same on an AVX-512 device (16-wide vectors, 8x48 and 4x32 micro-kernels), where this
 * machine can run it. */
Test(convt_tile, zero_rows_skipped_right_avx512) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) {
        cr_skip_test("no AVX-512 on this CPU");
    }
    const zc_case cs[] = {
        {.M = 16, .C = 2, .h = 16, .w = 16, .kh = 5, .kw = 5, .params = "zs=1 mk=848 kc=20", .simd = 512},
        {.M = 13, .C = 3, .h = 6, .w = 11, .kh = 3, .kw = 3, .params = "zs=1 mk=432 threads=2", .simd = 512},
        {.M = 16, .C = 2, .h = 6, .w = 6, .kh = 3, .kw = 3, .params = "zs=1 mk=848", .simd = 512, .inf_at = 1 + 6},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) free(run_case(&cs[i]));
}

/* The default follows the source: on where it is a padding's result, off elsewhere; both
 * compute the same. */
Test(convt_tile, default_follows_padding) {
    zc_case c = {.M = 16, .C = 2, .h = 6, .w = 6, .kh = 3, .kw = 3, .params = NULL, .simd = 256, .padded = 1};
    char *src = run_case(&c);
    cr_expect(strstr(src, "_ukr_z(") != NULL, "a padded source: zs should be on by default");
    free(src);
    c.padded = 0;
    src = run_case(&c);
    cr_expect(strstr(src, "_ukr_z(") == NULL, "a source that is no padding: zs should be off by default");
    free(src);
}
