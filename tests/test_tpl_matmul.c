/*
 * Tests of the CPU matmul templates: the GEMM (src/synth/tpl_matmul.c) and the
 * matrix-vector product (src/synth/tpl_matvec.c, suite tpl_matvec), through one harness.
 *
 * Each case emits stage functions for a desc at a point of its space, adds an exported
 * wrapper per stage, compiles the text with the system compiler and the CPU backend's
 * flags into a .so in a temp dir, dlopens it and runs it on random data. Outputs are
 * NaN-poisoned before the run and fenced by guard words; inputs are checked unchanged;
 * results are compared against a double-precision triple loop written here, with a
 * tolerance scaled by sqrt(K) and by sum_k |a||b|. Inputs end right at a PROT_NONE page and
 * are read-only during the run, so reads past their end and writes to them crash. Several stages go into one file, which
 * also checks that two matmul stages coexist.
 */
#include <math.h>

#include "tpl_cpu_common.h"

typedef struct mm_case {
    int64_t M, N, K;
    int ta, tb;
    int nbdims;
    int64_t bdim[4], astr[4], bstr[4]; /* strides in matrices, 0 = broadcast */
    const char *params;                /* "threads=2 mk=616 kc=64 ..." overrides */
    int simd_bits;                     /* device SIMD width for the space (0 = 256) */
    const kf_mm_gather *gb;            /* B gathered from a source of bsrc floats */
    int64_t bsrc;
} mm_case;

static void make_desc(const mm_case *c, kf_matmul_desc *d) {
    memset(d, 0, sizeof *d);
    d->M = c->M;
    d->N = c->N;
    d->K = c->K;
    d->ta = c->ta;
    d->tb = c->tb;
    d->nbdims = c->nbdims;
    d->batch = 1;
    for (int i = 0; i < c->nbdims; i++) {
        d->bdim[i] = c->bdim[i];
        d->a_bstride[i] = c->astr[i];
        d->b_bstride[i] = c->bstr[i];
        d->batch *= c->bdim[i];
    }
    if (c->gb) d->gb = *c->gb;
}

/* A gathered B's element (bt, k, j), decoded here independently of the template. */
static int64_t gather_bt(const mm_case *c, int64_t bt, int64_t k, int64_t j) {
    const kf_mm_gather *g = c->gb;
    int64_t o = gather_at(g, k, j); /* tpl_cpu_common.h: the row and column dims */
    for (int i = c->nbdims - 1; i >= 0; i--) {
        o += (bt % c->bdim[i]) * g->bstr[i];
        bt /= c->bdim[i];
    }
    return o;
}




static int64_t operand_matrix(const mm_case *c, const int64_t *str, int64_t bt) {
    int64_t m = 0;
    for (int i = c->nbdims - 1; i >= 0; i--) {
        m += (bt % c->bdim[i]) * str[i];
        bt /= c->bdim[i];
    }
    return m;
}

static int64_t operand_count(const mm_case *c, const int64_t *str) {
    int64_t n = 1;
    for (int i = 0; i < c->nbdims; i++)
        if (str[i]) n *= c->bdim[i];
    return n;
}






/* Run one compiled stage on random data and check it. */
static void check_case(void *h, int idx, const mm_case *c) {
    kf_matmul_desc d;
    make_desc(c, &d);
    char sym[32];
    snprintf(sym, sizeof sym, idx == 0 ? "kforge_kernel" : "kf_case_%d", idx);
    int (*fn)(void *const *) = (int (*)(void *const *))(uintptr_t)dlsym(h, sym);
    cr_assert(fn != NULL, "missing %s", sym);

    int64_t na = operand_count(c, c->astr) * c->M * c->K;
    int64_t nb = c->gb ? c->bsrc : operand_count(c, c->bstr) * c->K * c->N;
    int64_t nc = d.batch * c->M * c->N;
    fenced fa = fenced_alloc(na, 0), fb = fenced_alloc(nb, 0);
    float *A = fa.p, *B = fb.p;
    float *A0 = malloc(sizeof(float) * (size_t)(na + 1)), *B0 = malloc(sizeof(float) * (size_t)(nb + 1));
    float *Cg = malloc(sizeof(float) * (size_t)(nc + 2 * GUARD));
    cr_assert(A0 && B0 && Cg);
    for (int64_t i = 0; i < na; i++) A[i] = A0[i] = frand();
    for (int64_t i = 0; i < nb; i++) B[i] = B0[i] = frand();
    fenced_seal(&fa);
    fenced_seal(&fb);
    for (int64_t i = 0; i < nc + 2 * GUARD; i++) Cg[i] = SENTINEL;
    float *C = Cg + GUARD;
    for (int64_t i = 0; i < nc; i++) C[i] = NAN;

    void *args[3] = {A, B, C};
    cr_assert(fn(args) == 0);

    for (int i = 0; i < GUARD; i++) {
        cr_assert(Cg[i] == SENTINEL, "case %d: write before C at -%d", idx, GUARD - i);
        cr_assert(Cg[GUARD + nc + i] == SENTINEL, "case %d: write after C at +%d", idx, i);
    }
    cr_assert(memcmp(A, A0, sizeof(float) * (size_t)na) == 0, "case %d: A changed", idx);
    cr_assert(memcmp(B, B0, sizeof(float) * (size_t)nb) == 0, "case %d: B changed", idx);

    double tol = 2e-5 * sqrt((double)(c->K > 0 ? c->K : 1));
    for (int64_t bt = 0; bt < d.batch; bt++) {
        const float *a = A + operand_matrix(c, c->astr, bt) * c->M * c->K;
        const float *b = c->gb ? B : B + operand_matrix(c, c->bstr, bt) * c->K * c->N;
        const float *cc = C + bt * c->M * c->N;
        for (int64_t i = 0; i < c->M; i++)
            for (int64_t j = 0; j < c->N; j++) {
                double s = 0, sa = 0;
                for (int64_t k = 0; k < c->K; k++) {
                    double x = c->ta ? a[k * c->M + i] : a[i * c->K + k];
                    double y = c->gb ? B[gather_bt(c, bt, k, j)] : c->tb ? b[j * c->K + k] : b[k * c->N + j];
                    s += x * y;
                    sa += fabs(x * y);
                }
                double got = cc[i * c->N + j];
                cr_assert(isfinite(got),
                          "case %d (M=%lld N=%lld K=%lld ta=%d tb=%d %s): C[%lld][%lld][%lld] "
                          "not written (%g)",
                          idx, (long long)c->M, (long long)c->N, (long long)c->K, c->ta, c->tb,
                          c->params ? c->params : "", (long long)bt, (long long)i, (long long)j,
                          got);
                cr_assert(fabs(got - s) <= tol * sa + 1e-30,
                          "case %d (M=%lld N=%lld K=%lld ta=%d tb=%d %s): C[%lld][%lld][%lld] "
                          "= %.9g, want %.9g",
                          idx, (long long)c->M, (long long)c->N, (long long)c->K, c->ta, c->tb,
                          c->params ? c->params : "", (long long)bt, (long long)i, (long long)j,
                          got, s);
            }
    }
    fenced_free(&fa);
    fenced_free(&fb);
    free(A0);
    free(B0);
    free(Cg);
}

/* A CPU template of matmul stages: the GEMM's functions or the matrix-vector product's. */
typedef struct mm_tpl {
    void (*params)(const kf_matmul_desc *, const kf_device_info *, kf_space *, const char *);
    void (*emit)(kf_buf *, const char *, const kf_matmul_desc *, const kf_space *, const kf_point *, const char *);
} mm_tpl;
static const mm_tpl gemm_tpl = {kf_tpl_matmul_params, kf_tpl_matmul_emit};
static const mm_tpl matvec_tpl = {kf_tpl_matvec_params, kf_tpl_matvec_emit};

/* Emit every case as its own stage of template t into one file, compile once, run and
 * check all. */
static void run_cases_with(const mm_tpl *t, const mm_case *cs, int n) {
    kf_buf src = {0};
    for (int i = 0; i < n; i++) {
        kf_matmul_desc d;
        make_desc(&cs[i], &d);
        kf_device_info dev;
        make_dev(&dev, cs[i].simd_bits);
        kf_space sp;
        memset(&sp, 0, sizeof sp);
        t->params(&d, &dev, &sp, "s0.");
        kf_point pt;
        make_point(&sp, &pt, cs[i].params);
        char fname[32];
        snprintf(fname, sizeof fname, "kf_mm%d", i);
        t->emit(&src, fname, &d, &sp, &pt, "s0.");
        if (i == 0)
            kf_buf_printf(&src, "int kforge_kernel(void *const *args) {\n");
        else
            kf_buf_printf(&src, "int kf_case_%d(void *const *args) {\n", i);
        kf_buf_printf(&src, "    %s(args[0], args[1], args[2]);\n    return 0;\n}\n\n", fname);
    }
    char dir[64];
    void *h = compile_and_load(src.data, "kf_tpl_mm", dir, sizeof dir);
    for (int i = 0; i < n; i++) check_case(h, i, &cs[i]);
    dlclose(h);
    remove_dir(dir);
    kf_buf_free(&src);
}

static void run_cases(const mm_case *cs, int n) { run_cases_with(&gemm_tpl, cs, n); }

#define MM(m, n, k, a, b, p) {.M = m, .N = n, .K = k, .ta = a, .tb = b, .params = p}

Test(tpl_matmul, odd_sizes) {
    const mm_case cs[] = {
        MM(1, 1, 1, 0, 0, NULL),
        MM(1, 1, 1, 1, 1, "threads=2"),
        MM(7, 5, 3, 0, 0, NULL),
        MM(13, 17, 19, 0, 0, "threads=2"),
        MM(31, 37, 1, 0, 0, "threads=2"),  /* K = 1 */
        MM(2, 3, 300, 0, 0, "threads=2"),  /* M, N below one tile; K above kc */
        MM(1, 300, 40, 0, 0, "threads=2"), /* one row: threads split N */
        MM(5, 100, 20, 1, 1, "threads=2"),
        MM(300, 1, 40, 0, 1, "threads=2"), /* one column */
        MM(97, 89, 83, 0, 0, "threads=2"),
    };
    run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

Test(tpl_matmul, transposes) {
    const mm_case cs[] = {
        MM(61, 67, 71, 0, 0, "threads=2"), MM(61, 67, 71, 1, 0, "threads=2"),
        MM(61, 67, 71, 0, 1, "threads=2"), MM(61, 67, 71, 1, 1, "threads=2"),
        MM(29, 45, 33, 1, 0, "threads=1"), MM(29, 45, 33, 0, 1, "threads=1"),
    };
    run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

Test(tpl_matmul, edge_heavy_blocks) {
    /* tiny and odd blocks: many partial tiles, K slices, N panels, unbalanced tasks */
    const mm_case cs[] = {
        MM(100, 130, 520, 0, 0, "threads=2 kc=64 mc=24 nc=256"),
        MM(100, 130, 520, 1, 1, "threads=2 kc=7 mc=7 nc=17"),
        MM(53, 59, 61, 0, 1, "threads=1 kc=5 mc=1 nc=1"),
        MM(53, 59, 61, 1, 0, "threads=2 kc=13 mc=30 nc=40"),
        MM(257, 129, 65, 0, 0, "threads=2 kc=64 mc=48 nc=64"),
        /* more tasks than threads, and thread counts that do not divide anything */
        MM(101, 77, 45, 0, 0, "threads=2 split=4 mc=24"),
        MM(101, 77, 45, 1, 1, "threads=3 split=2"),
        MM(7, 300, 45, 0, 1, "threads=4"),   /* fewer M strips than threads: split N */
        MM(2, 3, 5, 1, 0, "threads=4 split=4"), /* more threads than tiles */
    };
    run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

Test(tpl_matmul, micro_kernels) {
    /* every shape of the AVX2 table, plus the SSE/NEON-width and AVX-512-width tables
     * (they compile to narrower registers here but must stay correct) */
    const long shapes[] = {616, 424, 808, 416, 408};
    mm_case cs[16];
    char params[16][64];
    int n = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        snprintf(params[n], sizeof params[n], "threads=2 mk=%ld", shapes[i]);
        cs[n] = (mm_case)MM(29, 45, 33, (int)(i & 1), (int)((i >> 1) & 1), params[n]);
        n++;
    }
    const long sse[] = {608, 412, 804}, avx512[] = {1232, 848, 1432};
    for (size_t i = 0; i < 3; i++) {
        snprintf(params[n], sizeof params[n], "threads=2 mk=%ld", sse[i]);
        cs[n] = (mm_case)MM(37, 41, 43, 0, (int)(i & 1), params[n]);
        cs[n++].simd_bits = 128;
        snprintf(params[n], sizeof params[n], "threads=1 mk=%ld", avx512[i]);
        cs[n] = (mm_case)MM(37, 70, 43, (int)(i & 1), 0, params[n]);
        cs[n++].simd_bits = 512;
    }
    run_cases(cs, n);
}

Test(tpl_matmul, naive_variant) {
    const mm_case cs[] = {
        MM(33, 29, 17, 0, 0, "naive=1"),
        MM(33, 29, 17, 1, 1, "naive=1 threads=2"),
        MM(1, 1, 1, 0, 1, "naive=1"),
    };
    run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

Test(tpl_matmul, batched_broadcast) {
    const mm_case cs[] = {
        /* dense batch of 4, over threads and over the batch */
        {.M = 19, .N = 23, .K = 29, .nbdims = 1, .bdim = {4}, .astr = {1}, .bstr = {1},
         .params = "threads=2 split=1"},
        {.M = 19, .N = 23, .K = 29, .nbdims = 1, .bdim = {4}, .astr = {1}, .bstr = {1},
         .params = "threads=2 split=2"},
        /* A broadcast over the batch */
        {.M = 17, .N = 31, .K = 13, .ta = 1, .nbdims = 1, .bdim = {3}, .astr = {0},
         .bstr = {1}, .params = "threads=2 split=2"},
        /* B broadcast over the inner batch dim: out [2,3], A [2,3], B [2,1] */
        {.M = 9, .N = 40, .K = 21, .tb = 1, .nbdims = 2, .bdim = {2, 3}, .astr = {3, 1},
         .bstr = {1, 0}, .params = "threads=2 split=1"},
        /* A [1,3] B [2,1] -> out [2,3] */
        {.M = 7, .N = 11, .K = 300, .nbdims = 2, .bdim = {2, 3}, .astr = {0, 1},
         .bstr = {1, 0}, .params = "threads=2 split=2 kc=64"},
        /* odd batch with threads splitting each matrix */
        {.M = 65, .N = 33, .K = 17, .ta = 1, .tb = 1, .nbdims = 1, .bdim = {5}, .astr = {1},
         .bstr = {0}, .params = "threads=2 split=1"},
        {.M = 1, .N = 1, .K = 1, .nbdims = 1, .bdim = {3}, .astr = {1}, .bstr = {1},
         .params = "threads=2 naive=1"},
        /* batch 3 on 2 and 4 threads: matrices are split so that tasks balance */
        {.M = 30, .N = 50, .K = 20, .nbdims = 1, .bdim = {3}, .astr = {1}, .bstr = {1},
         .params = "threads=2"},
        {.M = 30, .N = 50, .K = 20, .ta = 1, .nbdims = 2, .bdim = {3, 1}, .astr = {1, 0},
         .bstr = {0, 1}, .params = "threads=4 split=2"},
        /* a large batch: whole matrices per task, handed out dynamically */
        {.M = 5, .N = 9, .K = 7, .nbdims = 2, .bdim = {6, 7}, .astr = {7, 1}, .bstr = {0, 1},
         .params = "threads=2"},
    };
    run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* B read through a strided map of a source (kf_mm_gather, an implicit GEMM): rows and
 * columns each a mixed-radix run of strides, overlapping reads (windows), a flipped
 * atom, batch strides in elements, slices over several kc and nc blocks. */
Test(tpl_matmul, gathered_b) {
    /* a 2-D convolution's columns over x [C=3, H=9, W=8]: k = (c, kh, kw dilated 2),
     * j = (oh, ow) */
    static const kf_mm_gather conv = {.on = 1, .nrow = 3, .rdim = {3, 3, 2}, .rstr = {72, 8, 2},
                                      .ncol = 2, .cdim = {7, 6}, .cstr = {8, 1}};
    /* the same over a batch [2, 2] of such sources, the columns flipped in w */
    static const kf_mm_gather batched = {.on = 1, .base = 5, .bstr = {432, 216}, .nrow = 3,
                                         .rdim = {3, 3, 2}, .rstr = {72, 8, 1}, .ncol = 2,
                                         .cdim = {7, 6}, .cstr = {8, -1}};
    /* K = 3 x 64 over strided rows, N over two atoms: several kc slices and nc panels */
    static const kf_mm_gather big = {.on = 1, .nrow = 2, .rdim = {3, 64}, .rstr = {1, 3}, .ncol = 2,
                                     .cdim = {20, 29}, .cstr = {192 * 29, 192}};
    /* rows of 40 consecutive columns, 50 apart: strips inside a row are contiguous runs,
     * the strip across a row's end is not */
    static const kf_mm_gather runs = {.on = 1, .base = 3, .nrow = 1, .rdim = {30}, .rstr = {200}, .ncol = 2,
                                      .cdim = {4, 40}, .cstr = {50, 1}};
    /* a 3-D convolution's columns over x [C=2, 6, 8, 10] (padded): output rows of 7 (j =
     * (oz 3, oy 5, ox 7)), so every strip holds several rows' runs, and panels of 48
     * columns cut rows apart; k = (c, kz 2, ky 2, kx 3) */
    static const kf_mm_gather rows3 = {.on = 1, .base = 1, .nrow = 4, .rdim = {2, 2, 2, 3},
                                       .rstr = {480, 80, 10, 1}, .ncol = 3, .cdim = {3, 5, 7},
                                       .cstr = {80, 10, 1}};
    const mm_case cs[] = {
        {.M = 5, .N = 42, .K = 18, .gb = &conv, .bsrc = 216, .params = "threads=2"},
        {.M = 16, .N = 105, .K = 24, .gb = &rows3, .bsrc = 961, .params = "threads=2"},
        {.M = 16, .N = 105, .K = 24, .gb = &rows3, .bsrc = 961, .params = "mk=616 nc=48 kc=64"},
        {.M = 11, .N = 105, .K = 24, .gb = &rows3, .bsrc = 961, .params = "mk=408 nc=256"},
        {.M = 9, .N = 160, .K = 30, .gb = &runs, .bsrc = 6000, .params = "threads=2 mk=616"},
        {.M = 9, .N = 160, .K = 30, .gb = &runs, .bsrc = 6000, .params = "mk=408"},
        {.M = 5, .N = 42, .K = 18, .gb = &conv, .bsrc = 216, .params = "naive=1"},
        {.M = 13, .N = 42, .K = 18, .nbdims = 2, .bdim = {2, 2}, .astr = {0, 1}, .gb = &batched,
         .bsrc = 864, .params = "threads=2 split=2"},
        {.M = 7, .N = 580, .K = 192, .gb = &big, .bsrc = 192 * 29 * 20, .params = "threads=2 kc=64 nc=256"},
    };
    run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
    /* strips of 48 (an AVX-512 8x48 micro-kernel) across rows of 40 and of 7: the panel
     * copied a vector at a time, one load where a vector is one run, two loads and a select
     * where a row ends inside it, element by element otherwise (tpl_matmul.c emit_pack_b) */
    if (__builtin_cpu_supports("avx512f")) {
        const mm_case wide[] = {
            {.M = 9, .N = 160, .K = 30, .gb = &runs, .bsrc = 6000, .params = "mk=848"},
            {.M = 16, .N = 105, .K = 24, .gb = &rows3, .bsrc = 961, .params = "mk=848 threads=2"},
        };
        run_cases(wide, (int)(sizeof wide / sizeof wide[0]));
    }
}

Test(tpl_matmul, larger_default) {
    const mm_case cs[] = {
        MM(256, 256, 256, 0, 0, NULL),
        MM(300, 200, 700, 1, 0, NULL),
    };
    run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

Test(tpl_matmul, empty_k_writes_zeros) {
    kf_matmul_desc d;
    mm_case c = MM(3, 4, 0, 0, 0, NULL);
    make_desc(&c, &d);
    kf_device_info dev;
    make_dev(&dev, 256);
    kf_space sp;
    memset(&sp, 0, sizeof sp);
    kf_tpl_matmul_params(&d, &dev, &sp, "s1.");
    kf_point pt;
    make_point(&sp, &pt, NULL);
    kf_buf src = {0};
    kf_tpl_matmul_emit(&src, "kf_mm0", &d, &sp, &pt, "s1.");
    kf_buf_puts(&src, "int kforge_kernel(void *const *args) {\n"
                      "    kf_mm0(args[0], args[1], args[2]);\n    return 0;\n}\n");
    char dir[64];
    void *h = compile_and_load(src.data, "kf_tpl_mm", dir, sizeof dir);
    int (*fn)(void *const *) = (int (*)(void *const *))(uintptr_t)dlsym(h, "kforge_kernel");
    cr_assert(fn != NULL);
    float a[1] = {1}, b[1] = {1}, out[12];
    for (int i = 0; i < 12; i++) out[i] = NAN;
    void *args[3] = {a, b, out};
    cr_assert(fn(args) == 0);
    for (int i = 0; i < 12; i++) cr_assert(out[i] == 0.0f);
    dlclose(h);
    remove_dir(dir);
    kf_buf_free(&src);
}

Test(tpl_matmul, space_shape) {
    kf_matmul_desc d;
    mm_case c = MM(2048, 2048, 2048, 0, 0, NULL);
    make_desc(&c, &d);
    kf_device_info dev;
    make_dev(&dev, 256);
    kf_space sp;
    memset(&sp, 0, sizeof sp);
    kf_tpl_matmul_params(&d, &dev, &sp, "s0.");
    kf_point pt;
    make_point(&sp, &pt, NULL);
    cr_assert_eq(kf_tpl_get(&sp, &pt, "s0.", "threads"), 2);
    cr_assert_eq(kf_tpl_get(&sp, &pt, "s0.", "naive"), 0);
    cr_assert_eq(kf_tpl_get(&sp, &pt, "s0.", "vl"), 8);
    cr_assert_eq(kf_tpl_get(&sp, &pt, "s0.", "mk"), 616);
    cr_assert_eq(kf_tpl_get(&sp, &pt, "s0.", "kc"), 256);
    cr_assert_eq(kf_tpl_get(&sp, &pt, "s0.", "split"), 1);
    /* many M blocks: the B panel is sized for L3 (well over a quarter of L2) */
    cr_assert(kf_tpl_get(&sp, &pt, "s0.", "nc") * kf_tpl_get(&sp, &pt, "s0.", "kc") * 4 > 512 * 1024 / 4);
    /* every micro-kernel fits 16 registers: MR*NV accumulators + NV + 1 */
    for (int i = 0; i < sp.nparams; i++) {
        if (strcmp(sp.p[i].name, "s0.mk") != 0) continue;
        for (int j = 0; j < sp.p[i].nvalues; j++) {
            long mr = sp.p[i].values[j] / 100, nv = sp.p[i].values[j] % 100 / 8;
            cr_assert(mr * nv + nv + 1 <= 16, "mk=%ld needs too many registers",
                      sp.p[i].values[j]);
        }
    }

    /* a convolution's few output channels (M 16): the default micro-kernel pads M by
     * under an eighth (below 6-row strips' 18 on AVX2 and 12-row strips' 24 on AVX-512), and the
     * one M block's B panel fits a quarter of L2 */
    for (int bits = 256; bits <= 512; bits += 256) {
        mm_case cv = MM(16, 7920, 1680, 0, 0, NULL);
        make_desc(&cv, &d);
        kf_device_info dv;
        make_dev(&dv, bits);
        memset(&sp, 0, sizeof sp);
        kf_tpl_matmul_params(&d, &dv, &sp, "s3.");
        make_point(&sp, &pt, NULL);
        long mk = kf_tpl_get(&sp, &pt, "s3.", "mk"), mr = mk / 100;
        cr_assert((mr - 16 % mr) % mr * 8 < 16, "mk %ld pads M 16 by an eighth or more", mk);
        cr_assert_eq(mk, bits == 512 ? 848 : 424);
        long kc = kf_tpl_get(&sp, &pt, "s3.", "kc"), nc = kf_tpl_get(&sp, &pt, "s3.", "nc");
        cr_assert(4 * kc * nc <= dv.l2_bytes / 4, "B panel %ld x %ld over a quarter of L2", kc, nc);
    }

    /* a tiny matmul: one thread by default, block values capped by the sizes */
    mm_case t = MM(5, 7, 3, 0, 0, NULL);
    make_desc(&t, &d);
    memset(&sp, 0, sizeof sp);
    kf_tpl_matmul_params(&d, &dev, &sp, "s2.");
    make_point(&sp, &pt, NULL);
    cr_assert_eq(kf_tpl_get(&sp, &pt, "s2.", "threads"), 1);
    for (int i = 0; i < sp.nparams; i++)
        if (strcmp(sp.p[i].name, "s2.kc") == 0) cr_assert_eq(sp.p[i].nvalues, 1);

    /* the naive point emits no micro-kernel */
    make_point(&sp, &pt, "naive=1");
    kf_buf src = {0};
    kf_tpl_matmul_emit(&src, "kf_mmx", &d, &sp, &pt, "s2.");
    cr_assert(strstr(src.data, "kf_mmx_ukr") == NULL);
    cr_assert(strstr(src.data, "static void kf_mmx(") != NULL);
    kf_buf_free(&src);
}

/* ---- the matrix-vector template (src/synth/tpl_matvec.c): the same harness ---- */

/* one column (N == 1: W = A, dot products when A is [M, K], column blocks when it is
 * [K, M]) and one row (M == 1: W = B, dot products when B is [N, K]), K prime and below,
 * at and above a vector, every loop nest at threads 1 and 2 */
Test(tpl_matvec, odd_sizes) {
    const mm_case cs[] = {
        MM(1, 1, 1, 0, 0, NULL),
        MM(1, 1, 1, 1, 1, "threads=2"),
        MM(1, 1, 37, 1, 0, NULL),           /* L = 1: the dot nest whatever the layout */
        MM(7, 1, 3, 0, 0, "threads=2"),     /* K below a vector: the scalar tail only */
        MM(67, 1, 101, 0, 0, "threads=1"),
        MM(67, 1, 101, 0, 1, "threads=2 rows=4 unroll=4 block=8"),
        MM(67, 1, 101, 1, 0, "threads=2 unroll=8 block=64"), /* A [K, M]: column blocks */
        MM(67, 1, 101, 1, 1, "threads=1 unroll=1"),
        MM(1, 53, 97, 0, 1, "threads=2 rows=2 unroll=1 block=8"), /* B [N, K]: dot */
        MM(1, 53, 97, 1, 0, "threads=2 unroll=4 block=64"),       /* B [K, N]: column blocks */
        MM(1, 300, 13, 0, 0, "threads=2 unroll=2"),
        MM(300, 1, 1, 0, 0, "threads=2 rows=4 unroll=2"),         /* K = 1 */
        MM(1031, 1, 257, 0, 0, NULL),                             /* the defaults */
        MM(1, 1031, 257, 0, 0, NULL),
        MM(5, 1, 0, 0, 0, "threads=2"),                           /* K = 0: zeros */
        MM(1, 5, 0, 1, 1, NULL),
    };
    run_cases_with(&matvec_tpl, cs, (int)(sizeof cs / sizeof cs[0]));
}

/* rows x unroll over every value, on a 128- and a 512-bit vector width too */
Test(tpl_matvec, every_register_shape) {
    mm_case cs[32];
    char params[32][64];
    int n = 0;
    const long rows[] = {1, 2, 4}, unroll[] = {1, 2, 4};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            snprintf(params[n], sizeof params[n], "threads=%d rows=%ld unroll=%ld block=32", 1 + (i + j) % 2, rows[i],
                     unroll[j]);
            cs[n] = (mm_case)MM(71, 1, 139, 0, 0, params[n]);
            cs[n].simd_bits = (int[]){128, 256, 512}[(i + 2 * j) % 3];
            n++;
        }
    run_cases_with(&matvec_tpl, cs, n);
}

Test(tpl_matvec, batched_broadcast) {
    const mm_case cs[] = {
        /* a dense batch of matrices times a batch of vectors */
        {.M = 19, .N = 1, .K = 29, .nbdims = 1, .bdim = {4}, .astr = {1}, .bstr = {1}, .params = "threads=2 block=8"},
        /* one vector for the whole batch (B broadcast), A transposed */
        {.M = 33, .N = 1, .K = 31, .ta = 1, .nbdims = 1, .bdim = {3}, .astr = {1}, .bstr = {0},
         .params = "threads=2 block=64"},
        /* one matrix for a batch of vectors (A broadcast): out [2, 3], A [1, 1], B [2, 3] */
        {.M = 23, .N = 1, .K = 17, .tb = 1, .nbdims = 2, .bdim = {2, 3}, .astr = {0, 0}, .bstr = {3, 1},
         .params = "threads=2 rows=2"},
        /* rows of vectors times one matrix: out [2, 3] of 1 x N, A [2, 3], B [1, 1] */
        {.M = 1, .N = 41, .K = 37, .nbdims = 2, .bdim = {2, 3}, .astr = {3, 1}, .bstr = {0, 0},
         .params = "threads=2 unroll=2"},
        /* A [2, 1] x B [1, 3] -> out [2, 3], B transposed (the dot nest over N) */
        {.M = 1, .N = 29, .K = 43, .tb = 1, .nbdims = 2, .bdim = {2, 3}, .astr = {1, 0}, .bstr = {0, 1},
         .params = "threads=1"},
        /* a large batch of tiny products, one task a matrix */
        {.M = 5, .N = 1, .K = 7, .nbdims = 2, .bdim = {6, 7}, .astr = {7, 1}, .bstr = {0, 1}, .params = "threads=2"},
    };
    run_cases_with(&matvec_tpl, cs, (int)(sizeof cs / sizeof cs[0]));
}

/* supports: one row or column, and B read densely (a gathered B is refused with its reason) */
Test(tpl_matvec, supports_and_space) {
    kf_matmul_desc d;
    mm_case c = MM(2048, 1, 1024, 0, 0, NULL);
    make_desc(&c, &d);
    kf_buf why = {0};
    cr_assert_eq(kf_tpl_matvec_supports(&d, &why), 1);
    mm_case sq = MM(8, 8, 8, 0, 0, NULL);
    make_desc(&sq, &d);
    cr_assert_eq(kf_tpl_matvec_supports(&d, &why), 0);
    cr_assert(strstr(why.data, "8x8"), "%s", why.data);
    kf_buf_free(&why);
    static const kf_mm_gather conv = {.on = 1, .nrow = 1, .rdim = {18}, .rstr = {1}, .ncol = 1, .cdim = {1}, .cstr = {1}};
    mm_case gc = {.M = 4, .N = 1, .K = 18, .gb = &conv};
    make_desc(&gc, &d);
    cr_assert_eq(kf_tpl_matvec_supports(&d, &why), 0);
    cr_assert(strstr(why.data, "gathered"), "%s", why.data);
    kf_buf_free(&why);

    /* the space: threads with the GEMM's role, the loop nest's own parameters */
    make_desc(&c, &d);
    kf_device_info dev;
    make_dev(&dev, 256);
    kf_space sp;
    memset(&sp, 0, sizeof sp);
    kf_tpl_matvec_params(&d, &dev, &sp, "s0.");
    int roles[KF_ROLE_COUNT] = {0};
    for (int i = 0; i < sp.nparams; i++) roles[sp.p[i].role]++;
    cr_assert_eq(roles[KF_ROLE_THREADS], 1);
    cr_assert_eq(roles[KF_ROLE_BLOCK], 1);
    cr_assert_eq(roles[KF_ROLE_UNROLL], 1);
    kf_point pt;
    make_point(&sp, &pt, NULL);
    cr_assert_eq(kf_tpl_get(&sp, &pt, "s0.", "threads"), 1, "8 MB of A: one thread (the GEMM's threshold)");
    cr_assert_eq(kf_tpl_get(&sp, &pt, "s0.", "vl"), 8);
    cr_assert_geq(2048 / kf_tpl_get(&sp, &pt, "s0.", "block"), 4, "at least four tasks a thread");
    mm_case big = MM(4096, 1, 2048, 0, 0, NULL);
    make_desc(&big, &d);
    memset(&sp, 0, sizeof sp);
    kf_tpl_matvec_params(&d, &dev, &sp, "s0.");
    make_point(&sp, &pt, NULL);
    cr_assert_eq(kf_tpl_get(&sp, &pt, "s0.", "threads"), 2, "32 MB of A: both threads");
    cr_assert_geq(4096 / kf_tpl_get(&sp, &pt, "s0.", "block"), 8, "at least four tasks a thread");
}

/* ---- a GEMM as a chain's part (kf_tpl_matmul_params_inner, kf_tpl_matmul_emit_panel) ---- */

/* the part's space is vl, mk, kc and pa only; a product no wider than a vector defaults to
 * a one-vector micro-kernel (the table's shapes would pad it), a wide one to the table's
 * default; the part packs B whole and computes row blocks, reading A's full strips in
 * place unless pa=1 */
Test(tpl_matmul, panel_space_and_parts) {
    kf_device_info dev;
    make_dev(&dev, 512);
    static const struct { int64_t N; long mk; } cs[] = {{16, 1616}, {5, 1616}, {512, 1232}, {64, 1232}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        kf_matmul_desc d;
        mm_case c = MM(40, cs[i].N, 64, 0, 1, NULL);
        make_desc(&c, &d);
        kf_space sp;
        memset(&sp, 0, sizeof sp);
        kf_tpl_matmul_params_inner(&d, &dev, &sp, "q.");
        cr_assert_eq(sp.nparams, 4, "vl, mk, kc, pa");
        kf_point pt;
        make_point(&sp, &pt, NULL);
        cr_expect_eq(kf_tpl_get(&sp, &pt, "q.", "mk"), cs[i].mk, "N=%lld", (long long)cs[i].N);
        kf_tpl_panel info;
        kf_buf src = {0};
        kf_tpl_matmul_emit_panel(&src, "kf_px", &d, &sp, &pt, "q.", 24, &info);
        cr_assert(strstr(src.data, "static void kf_px_pack_all(") != NULL);
        cr_assert(strstr(src.data, "static void kf_px_rows(") != NULL);
        cr_expect_eq(info.nr, cs[i].mk % 100);
        cr_expect_geq(info.bp_floats, 64 * cs[i].N);
        /* by default full strips of A are read in place (a second micro-kernel) */
        cr_expect(strstr(src.data, "kf_px_ukr_d(") != NULL);
        kf_buf_free(&src);
        make_point(&sp, &pt, "pa=1");
        kf_tpl_matmul_emit_panel(&src, "kf_px", &d, &sp, &pt, "q.", 24, &info);
        cr_expect(strstr(src.data, "kf_px_ukr_d(") == NULL);
        kf_buf_free(&src);
    }
}
