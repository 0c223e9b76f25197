/*
 * Tests of the CPU GEMM's packing of a gathered B (src/synth/tpl_matmul.c, emit_pack_b):
 * an implicit GEMM's columns copied a vector at a time, a vector of consecutive source
 * columns as one load, a vector holding the end of one run and the start of the next as
 * two loads and a select, anything else element by element.
 *
 * Each case emits the GEMM for a desc whose B is gathered (the column layouts of
 * convolutions whose output rows are shorter than a strip, as KernelBench level 2's are at
 * CPU sizes), compiles it with the CPU backend's flags, and runs it on a source that sits
 * flush against an inaccessible page, at its end or at its start: a two-load vector reads
 * past its runs, and this checks that it never leaves the source. Results are compared with
 * a double-precision loop written here; C is NaN-poisoned and fenced by sentinels.
 */
#include <math.h>

#include "tpl_cpu_common.h"

typedef struct gp_case {
    int64_t M;
    kf_mm_gather gb; /* N and K: the products of its column and row atoms */
    const char *params; /* "mk=424 threads=2 ..." */
    int at_start;       /* the source starts at the inaccessible page (else ends at it) */
} gp_case;

static void make_desc(const gp_case *c, kf_matmul_desc *d) {
    memset(d, 0, sizeof *d);
    d->batch = 1;
    d->M = c->M;
    d->N = d->K = 1;
    for (int i = 0; i < c->gb.ncol; i++) d->N *= c->gb.cdim[i];
    for (int i = 0; i < c->gb.nrow; i++) d->K *= c->gb.rdim[i];
    d->gb = c->gb;
}

/* The source offset of B's element (k, j), decoded independently of the template. */
/* The source's size: one past its greatest offset (every offset is at least 0 here). */
static int64_t source_len(const kf_matmul_desc *d) {
    int64_t hi = 0;
    for (int64_t k = 0; k < d->K; k++)
        for (int64_t j = 0; j < d->N; j++) {
            int64_t o = gather_at(&d->gb, k, j);
            cr_assert(o >= 0);
            if (o + 1 > hi) hi = o + 1;
        }
    return hi;
}







/* Emit, compile and check one case; returns the emitted source (the caller frees it). */
static char *run_case(const gp_case *c) {
    kf_matmul_desc d;
    make_desc(c, &d);
    char dir[64], *src = NULL;
    void *h = NULL;
    int (*fn)(void *const *) = mm_kernel_load(&d, 256, c->params, "kf_gpack", dir, sizeof dir, &src, &h);

    const int64_t N = d.N, K = d.K;
    int64_t na = c->M * K, nb = source_len(&d), nc = c->M * N;
    float *A = malloc(sizeof(float) * (size_t)na), *Cg = malloc(sizeof(float) * (size_t)(nc + 2 * GUARD));
    cr_assert(A && Cg);
    fenced fb = fenced_alloc(nb, c->at_start);
    float *B = fb.p;
    for (int64_t i = 0; i < na; i++) A[i] = frand();
    for (int64_t i = 0; i < nb; i++) B[i] = frand();
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
                double x = A[i * K + k], y = B[gather_at(&c->gb, k, j)];
                s += x * y;
                sa += fabs(x * y);
            }
            double got = C[i * N + j];
            cr_assert(isfinite(got) && fabs(got - s) <= tol * sa + 1e-30,
                      "%s (M=%lld N=%lld K=%lld): C[%lld][%lld] = %.9g, want %.9g", c->params,
                      (long long)c->M, (long long)N, (long long)K, (long long)i, (long long)j, got, s);
        }
    fenced_free(&fb);
    free(A);
    free(Cg);
    dlclose(h);
    remove_dir(dir);
    return src;
}

/* A stride-1 convolution's columns over a source of rows w wide (an input plane, padded or
 * not): j = (oy oh, ox ow), k = (c, ky kh, kx kw); ow < w, so runs of ow columns. */
static kf_mm_gather conv2d_cols(int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sx) {
    kf_mm_gather g = {.on = 1, .nrow = 3, .ncol = 2};
    int64_t oh = h - kh + 1, ow = (w - kw) / sx + 1;
    g.rdim[0] = c, g.rstr[0] = h * w;
    g.rdim[1] = kh, g.rstr[1] = w;
    g.rdim[2] = kw, g.rstr[2] = 1;
    g.cdim[0] = oh, g.cstr[0] = w;
    g.cdim[1] = ow, g.cstr[1] = sx;
    return g;
}

/* Output rows of 20 (a 5x5 conv_transpose's over a 16-wide input, padded to 24) on 24-wide
 * strips, rows of 13 (a 4x4 conv over 16) on 16-wide strips, of 30 (3x3 over 32) on 8-wide
 * ones: every vector is one run or the end of one and the start of the next. The source ends
 * (or starts) at an inaccessible page, so a two-load vector that read beyond the matrix's
 * last (first) column would crash. */
Test(gather_pack, two_runs_per_vector) {
    kf_mm_gather up = conv2d_cols(2, 24, 24, 5, 5, 1);
    up.base = 19 * 24; /* rows taken bottom to top: the next run starts below this one */
    up.cstr[0] = -24;
    const gp_case cs[] = {
        {.M = 16, .gb = conv2d_cols(2, 24, 24, 5, 5, 1), .params = "mk=424 threads=2"},
        {.M = 16, .gb = conv2d_cols(2, 24, 24, 5, 5, 1), .params = "mk=424", .at_start = 1},
        {.M = 16, .gb = up, .params = "mk=424", .at_start = 1},
        {.M = 16, .gb = up, .params = "mk=616 threads=2"},
        {.M = 16, .gb = conv2d_cols(3, 16, 16, 4, 4, 1), .params = "mk=616 threads=2"},
        {.M = 32, .gb = conv2d_cols(8, 32, 32, 3, 3, 1), .params = "mk=808 kc=64 nc=256"},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        char *src = run_case(&cs[i]);
        /* the two-load, one-select copy is in the emitted packing */
        cr_expect(strstr(src, "kind[q] == 1") && strstr(src, "(m & x) | (~m & y)"), "case %zu", i);
        free(src);
    }
}

/* Runs shorter than half a vector (three runs in one: element by element), runs of one (a
 * stride-2 conv: every column its own run) and a flipped column atom (runs descending):
 * the vectors that are not one or two ascending runs are still copied right. */
Test(gather_pack, other_vectors) {
    kf_mm_gather flipped = conv2d_cols(2, 12, 24, 3, 3, 1);
    flipped.base = 23 - 2; /* ox runs 21 .. 0 over the row: stride -1 from the row's end */
    flipped.cstr[1] = -1;
    const gp_case cs[] = {
        {.M = 8, .gb = conv2d_cols(2, 12, 5, 3, 3, 1), .params = "mk=424"},
        {.M = 16, .gb = conv2d_cols(2, 10, 5, 3, 3, 1), .params = "mk=616", .at_start = 1},
        {.M = 16, .gb = conv2d_cols(3, 16, 17, 3, 3, 2), .params = "mk=424 threads=2"},
        {.M = 12, .gb = flipped, .params = "mk=424"},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) free(run_case(&cs[i]));
}
