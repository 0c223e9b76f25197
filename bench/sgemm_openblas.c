/*
 * Standalone benchmark: a generated matmul kernel (.so exporting
 * `int kforge_kernel(void *const *args)` with args = {A, B, C}) against OpenBLAS's
 * cblas_sgemm on the same sizes, in the same run. The two alternate in blocks (ROUNDS
 * rounds of: kernel x (1 + reps), OpenBLAS x (1 + reps)); the first call of each block is
 * a warm-up and is not counted, so that neither library is timed while the other's idle
 * worker threads still busy-wait (OpenBLAS's pthreads spin for ~0.1 s after a call,
 * libgomp's for a while too: on a 2-core machine they would steal the cores), and both
 * are timed in steady state, as a caller running them repeatedly sees them. Reports the
 * median over all counted calls in GFLOP/s, the best, and the largest difference between
 * the two results relative to max |C|.
 *
 * Build: cc -O2 -fopenmp -Iinclude -Isrc bench/sgemm_openblas.c BUILD/libkforge.a \
 *           $(pkg-config --cflags --libs openblas jansson) -ldl -lm
 * Usage: sgemm_openblas KERNEL.so M N K [ta tb [reps [threads [rounds]]]]
 *        sgemm_openblas --emit M N K ta tb [name=value ...] > k.c
 *   --emit prints the matmul template's source for that size (default point of its
 *   space on this machine's cache sizes and 2 threads, with the overrides given, e.g.
 *   threads=1 mk=424 kc=384) plus the kforge_kernel wrapper; compile it with the CPU
 *   backend's flags: cc -O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math
 *   -fPIC -shared k.c -o k.so. Build with -DKF_BENCH_NO_EMIT to drop this mode (and the
 *   link against libkforge).
 * OpenBLAS's threads are set with openblas_set_num_threads; the kernel picks its own (it
 * was generated with a thread count). OPENBLAS_* and OMP_* environment variables are left
 * as they are and printed.
 */
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void openblas_set_num_threads(int);
char *openblas_get_config(void);
char *openblas_get_corename(void);

typedef int (*kernel_fn)(void *const *args);

#ifndef KF_BENCH_NO_EMIT
#include "synth/tpl.h"

/* --emit M N K ta tb [name=value ...]: print the generated stage and its wrapper. */
static int emit_main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s --emit M N K ta tb [name=value ...]\n", argv[0]);
        return 2;
    }
    kf_matmul_desc d;
    memset(&d, 0, sizeof d);
    d.batch = 1;
    d.M = atol(argv[2]);
    d.N = atol(argv[3]);
    d.K = atol(argv[4]);
    d.ta = atoi(argv[5]);
    d.tb = atoi(argv[6]);
    kf_device_info dev;
    memset(&dev, 0, sizeof dev);
    dev.threads = 2;
    dev.simd_bits = 256;
    dev.l1d_bytes = 32 * 1024;
    dev.l2_bytes = 512 * 1024;
    dev.l3_bytes = 32 * 1024 * 1024;
    kf_space sp;
    memset(&sp, 0, sizeof sp);
    kf_tpl_matmul_params(&d, &dev, &sp, "s0.");
    kf_point pt;
    memset(&pt, 0, sizeof pt);
    for (int i = 0; i < sp.nparams; i++) pt.idx[i] = sp.p[i].dflt;
    for (int a = 7; a < argc; a++) {
        char name[32];
        long v;
        int found = 0;
        if (sscanf(argv[a], "%31[^=]=%ld", name, &v) != 2) {
            fprintf(stderr, "bad override %s\n", argv[a]);
            return 2;
        }
        for (int i = 0; i < sp.nparams && !found; i++) {
            if (strcmp(sp.p[i].name + 3, name) != 0) continue;
            found = 1;
            int j;
            for (j = 0; j < sp.p[i].nvalues && sp.p[i].values[j] != v; j++) {}
            if (j == sp.p[i].nvalues) { /* off the list: try it anyway */
                j = sp.p[i].dflt;
                sp.p[i].values[j] = v;
            }
            pt.idx[i] = j;
        }
        if (!found) {
            fprintf(stderr, "no parameter %s\n", name);
            return 2;
        }
    }
    char label[512];
    kf_point_format(&sp, &pt, label, sizeof label);
    kf_buf b = {0};
    kf_buf_printf(&b, "/* %s */\n", label);
    kf_tpl_matmul_emit(&b, "mm0", &d, &sp, &pt, "s0.");
    kf_buf_puts(&b, "int kforge_kernel(void *const *args) {\n"
                    "    mm0(args[0], args[1], args[2]);\n    return 0;\n}\n");
    fputs(b.data, stdout);
    fprintf(stderr, "%s\n", label);
    kf_buf_free(&b);
    return 0;
}
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float *alloc_random(size_t n, unsigned *seed) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        p[i] = (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return p;
}

int main(int argc, char **argv) {
#ifndef KF_BENCH_NO_EMIT
    if (argc > 1 && strcmp(argv[1], "--emit") == 0) return emit_main(argc, argv);
#endif
    if (argc < 5) {
        fprintf(stderr, "usage: %s KERNEL.so M N K [ta tb [reps [threads [rounds]]]]\n",
                argv[0]);
        return 2;
    }
    const char *so = argv[1];
    long M = atol(argv[2]), N = atol(argv[3]), K = atol(argv[4]);
    int ta = argc > 5 ? atoi(argv[5]) : 0, tb = argc > 6 ? atoi(argv[6]) : 0;
    int reps = argc > 7 ? atoi(argv[7]) : 7;
    int threads = argc > 8 ? atoi(argv[8]) : 2;
    int rounds = argc > 9 ? atoi(argv[9]) : 3;
    if (M <= 0 || N <= 0 || K <= 0 || reps < 1 || threads < 1 || rounds < 1) {
        fprintf(stderr, "bad sizes\n");
        return 2;
    }

    /* NODELETE: the kernel pulls in libgomp, whose idle threads must outlive dlclose */
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    kernel_fn fn = (kernel_fn)(uintptr_t)dlsym(h, "kforge_kernel");
    if (!fn) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 1;
    }

    const char *env[] = {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
                         "OMP_NUM_THREADS", "OMP_PROC_BIND", "GOMP_CPU_AFFINITY"};
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) {
        const char *v = getenv(env[i]);
        printf("env %s=%s\n", env[i], v ? v : "(unset)");
    }
    printf("openblas: %s | core %s\n", openblas_get_config(), openblas_get_corename());
    openblas_set_num_threads(threads);

    unsigned seed = 12345u;
    float *A = alloc_random((size_t)M * K, &seed);
    float *B = alloc_random((size_t)K * N, &seed);
    float *C1 = alloc_random((size_t)M * N, &seed);
    float *C2 = alloc_random((size_t)M * N, &seed);
    int total = reps * rounds;
    double *tk = malloc(sizeof(double) * total), *tb_ = malloc(sizeof(double) * total);
    void *args[3] = {A, B, C1};
    int nk = 0, nb = 0;
    for (int round = 0; round < rounds; round++) {
        for (int r = 0; r <= reps; r++) {
            double t0 = now_s();
            fn(args);
            double t1 = now_s();
            if (r > 0) tk[nk++] = t1 - t0;
        }
        for (int r = 0; r <= reps; r++) {
            double t0 = now_s();
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A,
                        ta ? (int)M : (int)K, B, tb ? (int)K : (int)N, 0.0f, C2, (int)N);
            double t1 = now_s();
            if (r > 0) tb_[nb++] = t1 - t0;
        }
    }
    reps = total;
    qsort(tk, (size_t)reps, sizeof(double), cmp_double);
    qsort(tb_, (size_t)reps, sizeof(double), cmp_double);
    double flops = 2.0 * (double)M * (double)N * (double)K;
    double gk = flops / tk[reps / 2] * 1e-9, gb = flops / tb_[reps / 2] * 1e-9;

    double maxc = 0, maxd = 0;
    for (long i = 0; i < M * N; i++) {
        maxc = fmax(maxc, fabs((double)C2[i]));
        maxd = fmax(maxd, fabs((double)C1[i] - (double)C2[i]));
    }
    printf("sgemm M=%ld N=%ld K=%ld ta=%d tb=%d counted calls=%d (%d rounds)\n", M, N, K, ta,
           tb, reps, rounds);
    printf("kernel   median %.3f ms  %.1f GFLOP/s (best %.1f)\n", tk[reps / 2] * 1e3, gk,
           flops / tk[0] * 1e-9);
    printf("openblas median %.3f ms  %.1f GFLOP/s (best %.1f) threads=%d\n", tb_[reps / 2] * 1e3,
           gb, flops / tb_[0] * 1e-9, threads);
    printf("ratio kernel/openblas %.3f\n", gk / gb);
    printf("max |diff| / max |C| = %.3g\n", maxc > 0 ? maxd / maxc : maxd);

    free(A);
    free(B);
    free(C1);
    free(C2);
    free(tk);
    free(tb_);
    dlclose(h);
    return maxc > 0 && maxd / maxc > 1e-3 ? 1 : 0;
}
