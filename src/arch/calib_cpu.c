/*
 * kforge CPU calibration: measures the ceilings the roofline floor is computed from.
 *
 * Design note.
 *  - Bandwidth is measured over two float arrays far larger than the last-level cache
 *    (8 x L3, clamped to 256..384 MiB each; halved down to 32 MiB if memory is short). The
 *    pages are first touched in parallel with the very same static partition as the timed
 *    loops, so on a NUMA host each thread streams from local memory.
 *  - Timing is by short samples (~1-2 ms, one 32 MiB segment of the arrays, or one FMA
 *    burst) taken inside the parallel region between barriers; the best sample is kept
 *    (the least disturbed one: the ceiling is what the machine can do, not what it does on
 *    average while other processes share it). With several threads the whole set is also
 *    measured with one thread and each ceiling is the better of the two, since a team is
 *    spoilt by any member being descheduled; a team slower than one thread is logged as a
 *    busy machine.
 *  - The floor built from these numbers must be a true lower bound: a candidate that beats
 *    it is rejected as impossible. Stores are therefore measured both as ordinary stores
 *    (what compiled loops emit) and as non-temporal streaming stores (what memcpy/memset
 *    use for large blocks, and what avoids the read-for-ownership traffic); copy and write
 *    report the faster of the two. Copy counts read+write bytes (2 x 4 per element), the
 *    STREAM convention.
 *  - Peak FLOP/s comes from an FMA-bound loop with 12 independent vector accumulators per
 *    thread (enough to cover FMA latency x pipes on current cores); each FMA lane counts 2
 *    flops. The library is built without -march=native, so the hot loops are compiled twice:
 *    under target("avx2,fma") (the FMA peak also under target("avx512f") where the CPU has
 *    it, as the candidates use 512-bit vectors there), chosen at run time with
 *    __builtin_cpu_supports, and as a
 *    portable 128-bit GCC-vector fallback (mul + add, 2 flops per lane).
 *  - The kernels are compiled at -O2 whatever the build type (a pragma): at -O0 the FMA
 *    accumulators would live on the stack and the peak would read ten times too low.
 *  - Load: the machine's busy time from /proc/stat (steal included) minus this process's
 *    own CPU time, over the calibration's wall time and the online CPUs, is the share other
 *    processes took (kf_ceilings.busy). Best samples and the one-thread pass cannot undo a
 *    machine that is busy throughout (on 2026-12-04 a calibration taken while the sanitizer
 *    tests ran read 14.4 GB/s and 40.1 GFLOP/s, against 27.0 and 79.3 idle, and was cached):
 *    above KF_CALIB_BUSY_MAX it is warned about and kf_arch_get_cpu measures again
 *    once KF_CALIB_BUSY_RETRY_S have passed.
 *  - A whole calibration takes about 2 s on an idle 2-core VM (up to ~4 s when busy).
 */
#include "kforge/arch.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KF_ARCH_X86 1
#else
#define KF_ARCH_X86 0
#endif

#define MIB (1024.0 * 1024.0)

/* Portable vector types (GCC vector extensions); 128 bits is SSE2 on x86-64, NEON on arm64. */
typedef float kf_v4f __attribute__((vector_size(16)));
typedef double kf_v2d __attribute__((vector_size(16)));

/* Results are written here so that no kernel can be optimised away. */
static volatile double kf_arch_sink;

/* The kernels are what is measured, so they are compiled optimised whatever the build type:
 * at -O0 (Debug, sanitizer builds) every accumulator would live on the stack and the FMA
 * peak would come out ten times too low, which would make the roofline floor wrong. */
#pragma GCC push_options
#pragma GCC optimize("O2")

/* Nor are they instrumented by AddressSanitizer (their bounds are the plain [lo, hi) of
 * arrays allocated here), so that a sanitizer build measures the same ceilings. */
#define KF_KERNEL __attribute__((no_sanitize_address))

KF_KERNEL static void touch_pages(float *restrict a, float *restrict b, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++) {
        a[i] = 0.0f;
        b[i] = 1.0f;
    }
}

/* ---------------------------------------------------------------------------------------
 * Kernels: each works on [lo, hi) of its thread's share; lo and hi are multiples of 64
 * elements except possibly the array end, and the arrays are 2 MiB aligned.
 * ------------------------------------------------------------------------------------- */

KF_KERNEL static void copy_generic(float *restrict a, const float *restrict b, size_t lo,
                                   size_t hi) {
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        kf_v4f x0, x1, x2, x3;
        memcpy(&x0, b + i, 16);
        memcpy(&x1, b + i + 4, 16);
        memcpy(&x2, b + i + 8, 16);
        memcpy(&x3, b + i + 12, 16);
        memcpy(a + i, &x0, 16);
        memcpy(a + i + 4, &x1, 16);
        memcpy(a + i + 8, &x2, 16);
        memcpy(a + i + 12, &x3, 16);
    }
    for (; i < hi; i++) a[i] = b[i];
}

KF_KERNEL static float read_generic(const float *restrict b, size_t lo, size_t hi) {
    kf_v4f s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        kf_v4f x0, x1, x2, x3;
        memcpy(&x0, b + i, 16);
        memcpy(&x1, b + i + 4, 16);
        memcpy(&x2, b + i + 8, 16);
        memcpy(&x3, b + i + 12, 16);
        s0 += x0;
        s1 += x1;
        s2 += x2;
        s3 += x3;
    }
    kf_v4f s = (s0 + s1) + (s2 + s3);
    float r = s[0] + s[1] + s[2] + s[3];
    for (; i < hi; i++) r += b[i];
    return r;
}

KF_KERNEL static void fill_generic(float *restrict a, float v, size_t lo, size_t hi) {
    kf_v4f x = {v, v, v, v};
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        memcpy(a + i, &x, 16);
        memcpy(a + i + 4, &x, 16);
        memcpy(a + i + 8, &x, 16);
        memcpy(a + i + 12, &x, 16);
    }
    for (; i < hi; i++) a[i] = v;
}

/* 12 independent a*m+c chains, 4 lanes each: 12 * 4 * 2 flops per iteration. */
KF_KERNEL static double peak_f32_generic(long iters, float m, float c) {
    kf_v4f mv = {m, m, m, m}, cv = {c, c, c, c};
    kf_v4f acc[12];
    for (int k = 0; k < 12; k++) acc[k] = (kf_v4f){1.0f + k, 1.0f, 1.0f, 1.0f};
    for (long it = 0; it < iters; it++) {
        acc[0] = acc[0] * mv + cv;
        acc[1] = acc[1] * mv + cv;
        acc[2] = acc[2] * mv + cv;
        acc[3] = acc[3] * mv + cv;
        acc[4] = acc[4] * mv + cv;
        acc[5] = acc[5] * mv + cv;
        acc[6] = acc[6] * mv + cv;
        acc[7] = acc[7] * mv + cv;
        acc[8] = acc[8] * mv + cv;
        acc[9] = acc[9] * mv + cv;
        acc[10] = acc[10] * mv + cv;
        acc[11] = acc[11] * mv + cv;
    }
    kf_v4f s = acc[0];
    for (int k = 1; k < 12; k++) s += acc[k];
    return (double)(s[0] + s[1] + s[2] + s[3]);
}

KF_KERNEL static double peak_f64_generic(long iters, double m, double c) {
    kf_v2d mv = {m, m}, cv = {c, c};
    kf_v2d acc[12];
    for (int k = 0; k < 12; k++) acc[k] = (kf_v2d){1.0 + k, 1.0};
    for (long it = 0; it < iters; it++) {
        acc[0] = acc[0] * mv + cv;
        acc[1] = acc[1] * mv + cv;
        acc[2] = acc[2] * mv + cv;
        acc[3] = acc[3] * mv + cv;
        acc[4] = acc[4] * mv + cv;
        acc[5] = acc[5] * mv + cv;
        acc[6] = acc[6] * mv + cv;
        acc[7] = acc[7] * mv + cv;
        acc[8] = acc[8] * mv + cv;
        acc[9] = acc[9] * mv + cv;
        acc[10] = acc[10] * mv + cv;
        acc[11] = acc[11] * mv + cv;
    }
    kf_v2d s = acc[0];
    for (int k = 1; k < 12; k++) s += acc[k];
    return s[0] + s[1];
}

#if KF_ARCH_X86
#define KF_AVX2 __attribute__((target("avx2,fma")))

KF_AVX2 KF_KERNEL static void copy_avx2(float *restrict a, const float *restrict b, size_t lo,
                                        size_t hi, int stream) {
    size_t i = lo;
    if (stream) {
        for (; i + 32 <= hi; i += 32) {
            __m256 x0 = _mm256_load_ps(b + i), x1 = _mm256_load_ps(b + i + 8);
            __m256 x2 = _mm256_load_ps(b + i + 16), x3 = _mm256_load_ps(b + i + 24);
            _mm256_stream_ps(a + i, x0);
            _mm256_stream_ps(a + i + 8, x1);
            _mm256_stream_ps(a + i + 16, x2);
            _mm256_stream_ps(a + i + 24, x3);
        }
        _mm_sfence();
    } else {
        for (; i + 32 <= hi; i += 32) {
            __m256 x0 = _mm256_load_ps(b + i), x1 = _mm256_load_ps(b + i + 8);
            __m256 x2 = _mm256_load_ps(b + i + 16), x3 = _mm256_load_ps(b + i + 24);
            _mm256_store_ps(a + i, x0);
            _mm256_store_ps(a + i + 8, x1);
            _mm256_store_ps(a + i + 16, x2);
            _mm256_store_ps(a + i + 24, x3);
        }
    }
    for (; i < hi; i++) a[i] = b[i];
}

KF_AVX2 KF_KERNEL static float read_avx2(const float *restrict b, size_t lo, size_t hi) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0,
           s7 = s0;
    size_t i = lo;
    for (; i + 64 <= hi; i += 64) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(b + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(b + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(b + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(b + i + 24));
        s4 = _mm256_add_ps(s4, _mm256_load_ps(b + i + 32));
        s5 = _mm256_add_ps(s5, _mm256_load_ps(b + i + 40));
        s6 = _mm256_add_ps(s6, _mm256_load_ps(b + i + 48));
        s7 = _mm256_add_ps(s7, _mm256_load_ps(b + i + 56));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)),
                             _mm256_add_ps(_mm256_add_ps(s4, s5), _mm256_add_ps(s6, s7)));
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    float r = 0;
    for (int k = 0; k < 8; k++) r += lanes[k];
    for (; i < hi; i++) r += b[i];
    return r;
}

KF_AVX2 KF_KERNEL static void fill_avx2(float *restrict a, float v, size_t lo, size_t hi,
                                        int stream) {
    __m256 x = _mm256_set1_ps(v);
    size_t i = lo;
    if (stream) {
        for (; i + 32 <= hi; i += 32) {
            _mm256_stream_ps(a + i, x);
            _mm256_stream_ps(a + i + 8, x);
            _mm256_stream_ps(a + i + 16, x);
            _mm256_stream_ps(a + i + 24, x);
        }
        _mm_sfence();
    } else {
        for (; i + 32 <= hi; i += 32) {
            _mm256_store_ps(a + i, x);
            _mm256_store_ps(a + i + 8, x);
            _mm256_store_ps(a + i + 16, x);
            _mm256_store_ps(a + i + 24, x);
        }
    }
    for (; i < hi; i++) a[i] = v;
}

/* AVX-512 (candidates on such a CPU are built -march=native -mprefer-vector-width=512):
 * 12 independent FMA chains of 16 f32 / 8 f64 lanes. Without it the peak read half of what
 * MKL reached on an AVX-512 VM, and matmuls showed at 140 % of their "floor". */
#define KF_AVX512 __attribute__((target("avx512f")))
#define KF_CHAINS512(T, SET, FMA)                                                         \
    T a0 = SET(1), a1 = SET(2), a2 = SET(3), a3 = SET(4), a4 = SET(5), a5 = SET(6),    \
      a6 = SET(7), a7 = SET(8), a8 = SET(9), a9 = SET(10), a10 = SET(11), a11 = SET(12); \
    for (long i = 0; i < iters; i++) {                                                  \
        a0 = FMA(a0, mv, cv); a1 = FMA(a1, mv, cv); a2 = FMA(a2, mv, cv);               \
        a3 = FMA(a3, mv, cv); a4 = FMA(a4, mv, cv); a5 = FMA(a5, mv, cv);               \
        a6 = FMA(a6, mv, cv); a7 = FMA(a7, mv, cv); a8 = FMA(a8, mv, cv);               \
        a9 = FMA(a9, mv, cv); a10 = FMA(a10, mv, cv); a11 = FMA(a11, mv, cv);           \
    }
KF_AVX512 KF_KERNEL static double peak_f32_avx512(long iters, float m, float c) {
    __m512 mv = _mm512_set1_ps(m), cv = _mm512_set1_ps(c);
    KF_CHAINS512(__m512, _mm512_set1_ps, _mm512_fmadd_ps)
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return (double)_mm512_reduce_add_ps(s);
}
KF_AVX512 KF_KERNEL static double peak_f64_avx512(long iters, double m, double c) {
    __m512d mv = _mm512_set1_pd(m), cv = _mm512_set1_pd(c);
    KF_CHAINS512(__m512d, _mm512_set1_pd, _mm512_fmadd_pd)
    __m512d s = _mm512_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)),
                              _mm512_add_pd(_mm512_add_pd(a4, a5), _mm512_add_pd(a6, a7)));
    s = _mm512_add_pd(s, _mm512_add_pd(_mm512_add_pd(a8, a9), _mm512_add_pd(a10, a11)));
    return _mm512_reduce_add_pd(s);
}
#undef KF_CHAINS512

/* 12 independent FMA chains, 8 lanes each: 12 * 8 * 2 flops per iteration. */
KF_AVX2 KF_KERNEL static double peak_f32_avx2(long iters, float m, float c) {
    __m256 mv = _mm256_set1_ps(m), cv = _mm256_set1_ps(c);
    __m256 a0 = _mm256_set1_ps(1.0f), a1 = _mm256_set1_ps(2.0f), a2 = _mm256_set1_ps(3.0f),
           a3 = _mm256_set1_ps(4.0f), a4 = _mm256_set1_ps(5.0f), a5 = _mm256_set1_ps(6.0f),
           a6 = _mm256_set1_ps(7.0f), a7 = _mm256_set1_ps(8.0f), a8 = _mm256_set1_ps(9.0f),
           a9 = _mm256_set1_ps(10.0f), a10 = _mm256_set1_ps(11.0f), a11 = _mm256_set1_ps(12.0f);
    for (long it = 0; it < iters; it++) {
        a0 = _mm256_fmadd_ps(a0, mv, cv);
        a1 = _mm256_fmadd_ps(a1, mv, cv);
        a2 = _mm256_fmadd_ps(a2, mv, cv);
        a3 = _mm256_fmadd_ps(a3, mv, cv);
        a4 = _mm256_fmadd_ps(a4, mv, cv);
        a5 = _mm256_fmadd_ps(a5, mv, cv);
        a6 = _mm256_fmadd_ps(a6, mv, cv);
        a7 = _mm256_fmadd_ps(a7, mv, cv);
        a8 = _mm256_fmadd_ps(a8, mv, cv);
        a9 = _mm256_fmadd_ps(a9, mv, cv);
        a10 = _mm256_fmadd_ps(a10, mv, cv);
        a11 = _mm256_fmadd_ps(a11, mv, cv);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    double r = 0;
    for (int k = 0; k < 8; k++) r += lanes[k];
    return r;
}

KF_AVX2 KF_KERNEL static double peak_f64_avx2(long iters, double m, double c) {
    __m256d mv = _mm256_set1_pd(m), cv = _mm256_set1_pd(c);
    __m256d a0 = _mm256_set1_pd(1.0), a1 = _mm256_set1_pd(2.0), a2 = _mm256_set1_pd(3.0),
            a3 = _mm256_set1_pd(4.0), a4 = _mm256_set1_pd(5.0), a5 = _mm256_set1_pd(6.0),
            a6 = _mm256_set1_pd(7.0), a7 = _mm256_set1_pd(8.0), a8 = _mm256_set1_pd(9.0),
            a9 = _mm256_set1_pd(10.0), a10 = _mm256_set1_pd(11.0), a11 = _mm256_set1_pd(12.0);
    for (long it = 0; it < iters; it++) {
        a0 = _mm256_fmadd_pd(a0, mv, cv);
        a1 = _mm256_fmadd_pd(a1, mv, cv);
        a2 = _mm256_fmadd_pd(a2, mv, cv);
        a3 = _mm256_fmadd_pd(a3, mv, cv);
        a4 = _mm256_fmadd_pd(a4, mv, cv);
        a5 = _mm256_fmadd_pd(a5, mv, cv);
        a6 = _mm256_fmadd_pd(a6, mv, cv);
        a7 = _mm256_fmadd_pd(a7, mv, cv);
        a8 = _mm256_fmadd_pd(a8, mv, cv);
        a9 = _mm256_fmadd_pd(a9, mv, cv);
        a10 = _mm256_fmadd_pd(a10, mv, cv);
        a11 = _mm256_fmadd_pd(a11, mv, cv);
    }
    __m256d s = _mm256_add_pd(_mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)),
                              _mm256_add_pd(_mm256_add_pd(a4, a5), _mm256_add_pd(a6, a7)));
    s = _mm256_add_pd(s, _mm256_add_pd(_mm256_add_pd(a8, a9), _mm256_add_pd(a10, a11)));
    double lanes[4];
    _mm256_storeu_pd(lanes, s);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif /* KF_ARCH_X86 */

#pragma GCC pop_options

/* ---------------------------------------------------------------------------------------
 * Driver
 *
 * Timing is done inside the parallel region, in short samples (~1-2 ms): every sample
 * starts at a barrier, each thread stamps its own start and end, and the sample lasts from
 * the earliest start to the latest end. The best sample wins. Short samples matter on a
 * shared machine: a compile job that takes a core for a few milliseconds spoils a few
 * samples instead of the whole measurement, and thread wake-up latency is never counted.
 * ------------------------------------------------------------------------------------- */

enum { K_TOUCH, K_COPY, K_COPY_NT, K_READ, K_FILL, K_FILL_NT, K_PEAK32, K_PEAK64 };

#define SEG_BYTES (32u << 20) /* bytes of one array that one bandwidth sample streams */

typedef struct calib {
    float *a, *b;
    size_t n;        /* elements per array, a multiple of the segment length */
    size_t seg;      /* elements per segment */
    int threads;     /* team size asked for */
    int team;        /* team size the last run_samples obtained */
    int avx2;        /* run the AVX2+FMA kernels */
    int avx512;      /* the FMA peak with AVX-512 (the bandwidth kernels stay AVX2) */
    long iters;      /* FMA loop trip count of one peak sample, per thread */
    double *start, *end; /* [sample * threads + tid] */
    int max_samples;
} calib;

/* Thread tid's share of [base, base + n): a static partition in 64-element (256-byte)
 * blocks, the same for the first touch and every timed loop. */
static void share(size_t base, size_t n, int nth, int tid, size_t *lo, size_t *hi) {
    size_t blocks = (n + 63) / 64;
    size_t per = (blocks + (size_t)nth - 1) / (size_t)nth;
    size_t l = (size_t)tid * per * 64, h = l + per * 64;
    if (l > n) l = n;
    if (h > n) h = n;
    *lo = base + l;
    *hi = base + h;
}

/* One thread's part of one sample of kernel k on [lo, hi); returns a value to sink. */
static double kernel_part(calib *c, int k, int tid, size_t lo, size_t hi) {
    float *a = c->a, *b = c->b;
    double acc = 0;
    switch (k) {
    case K_TOUCH: touch_pages(a, b, lo, hi); break;
    case K_COPY:
    case K_COPY_NT:
#if KF_ARCH_X86
        if (c->avx2) copy_avx2(a, b, lo, hi, k == K_COPY_NT);
        else
#endif
            copy_generic(a, b, lo, hi);
        if (hi > lo) acc = a[lo];
        break;
    case K_READ:
#if KF_ARCH_X86
        if (c->avx2) acc = read_avx2(b, lo, hi);
        else
#endif
            acc = read_generic(b, lo, hi);
        break;
    case K_FILL:
    case K_FILL_NT:
#if KF_ARCH_X86
        if (c->avx2) fill_avx2(a, 2.0f, lo, hi, k == K_FILL_NT);
        else
#endif
            fill_generic(a, 2.0f, lo, hi);
        if (hi > lo) acc = a[lo];
        break;
    case K_PEAK32:
#if KF_ARCH_X86
        if (c->avx512) acc = peak_f32_avx512(c->iters, 0.9999f, 1e-4f * (float)(tid + 1));
        else if (c->avx2) acc = peak_f32_avx2(c->iters, 0.9999f, 1e-4f * (float)(tid + 1));
        else
#endif
            acc = peak_f32_generic(c->iters, 0.9999f, 1e-4f * (float)(tid + 1));
        break;
    case K_PEAK64:
#if KF_ARCH_X86
        if (c->avx512) acc = peak_f64_avx512(c->iters, 0.9999, 1e-4 * (tid + 1));
        else if (c->avx2) acc = peak_f64_avx2(c->iters, 0.9999, 1e-4 * (tid + 1));
        else
#endif
            acc = peak_f64_generic(c->iters, 0.9999, 1e-4 * (tid + 1));
        break;
    default: assert(!"unknown calibration kernel");
    }
    return acc;
}

/* Run `samples` samples of kernel k. Bandwidth kernels walk the arrays segment by segment
 * (sample s streams segment s mod nseg, which was last touched a whole pass earlier and so
 * is out of cache); peak kernels run c->iters per thread. Returns the shortest sample. */
static double run_samples(calib *c, int k, int samples) {
    assert(samples <= c->max_samples);
    int bandwidth = k != K_PEAK32 && k != K_PEAK64;
    size_t nseg = c->n / c->seg;
    double acc = 0;
    int team = c->threads;
#pragma omp parallel num_threads(c->threads) reduction(+ : acc)
    {
        int nth = omp_get_num_threads(), tid = omp_get_thread_num();
        if (tid == 0) team = nth;
        for (int s = 0; s < samples; s++) {
            size_t lo = 0, hi = 0;
            if (bandwidth) share((size_t)s % nseg * c->seg, c->seg, nth, tid, &lo, &hi);
#pragma omp barrier
            c->start[s * c->threads + tid] = kf_now();
            acc += kernel_part(c, k, tid, lo, hi);
            c->end[s * c->threads + tid] = kf_now();
        }
    }
    kf_arch_sink = acc;
    c->team = team;
    double best = INFINITY;
    for (int s = 0; s < samples; s++) {
        double t0 = INFINITY, t1 = -INFINITY;
        for (int t = 0; t < team; t++) {
            t0 = fmin(t0, c->start[s * c->threads + t]);
            t1 = fmax(t1, c->end[s * c->threads + t]);
        }
        if (t1 - t0 > 0 && t1 - t0 < best) best = t1 - t0;
    }
    return best;
}

/* Best bandwidth in GB/s of kernel k over `passes` passes over the arrays; bytes_per_el is
 * what one element of a segment moves (8 for copy, 4 for read and fill). */
static double measure_bw(calib *c, int k, int passes, double bytes_per_el) {
    int nseg = (int)(c->n / c->seg);
    double best = run_samples(c, k, nseg * passes);
    return bytes_per_el * (double)c->seg / best / 1e9;
}

/* Trip count of kernel k for a ~1 ms sample, sized on the calling thread whatever the
 * machine's speed. */
static long size_peak(calib *c, int k) {
    c->iters = 1000;
    double t = 0;
    for (int guard = 0; guard < 24; guard++) {
        t = INFINITY;
        for (int r = 0; r < 3; r++) {
            double t0 = kf_now();
            kf_arch_sink = kernel_part(c, k, 0, 0, 0);
            t = fmin(t, kf_now() - t0);
        }
        if (t >= 2e-4) break;
        c->iters *= 2;
    }
    double scaled = (double)c->iters * 1e-3 / (t > 0 ? t : 1e-3);
    return scaled < 1000 ? 1000 : scaled > 1e9 ? 1000000000L : (long)scaled;
}

/* FMA peaks in GFLOP/s, f32 and f64. The two dtypes are measured in alternating rounds of
 * PEAK_ROUND samples so that both see the same disturbances (a busy spell of the machine
 * cannot make f64 look faster than f32 just by timing). */
#define PEAK_ROUND 10
static void measure_peaks(calib *c, int rounds, double *f32, double *f64) {
    long it32 = size_peak(c, K_PEAK32), it64 = size_peak(c, K_PEAK64);
    double lanes32 = c->avx512 ? 16 : c->avx2 ? 8 : 4, lanes64 = c->avx512 ? 8 : c->avx2 ? 4 : 2;
    *f32 = *f64 = 0;
    for (int r = 0; r < rounds; r++) {
        c->iters = it32;
        double t = run_samples(c, K_PEAK32, PEAK_ROUND);
        *f32 = fmax(*f32, (double)c->team * (double)it32 * 12.0 * lanes32 * 2.0 / t / 1e9);
        c->iters = it64;
        t = run_samples(c, K_PEAK64, PEAK_ROUND);
        *f64 = fmax(*f64, (double)c->team * (double)it64 * 12.0 * lanes64 * 2.0 / t / 1e9);
    }
}

typedef struct set {
    double copy, copy_nt, rd, fill, fill_nt, peak32, peak64;
} set;

/* Every ceiling with c->threads threads; streaming-store variants only with AVX2. */
static set measure_set(calib *c, int passes, int peak_rounds) {
    set r = {0};
    r.copy = measure_bw(c, K_COPY, passes, 8.0);
    if (c->avx2) r.copy_nt = measure_bw(c, K_COPY_NT, passes, 8.0);
    r.rd = measure_bw(c, K_READ, passes, 4.0);
    r.fill = measure_bw(c, K_FILL, passes, 4.0);
    if (c->avx2) r.fill_nt = measure_bw(c, K_FILL_NT, passes, 4.0);
    measure_peaks(c, peak_rounds, &r.peak32, &r.peak64);
    return r;
}

/* Jiffies the whole machine spent busy (user, nice, system, irq, softirq, steal: every
 * state but idle and iowait) from /proc/stat's first line, in seconds; -1 when unreadable. */
static double machine_busy_s(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6], &v[7]);
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (n < 8 || hz <= 0) return -1;
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
}

/* CPU seconds this process has used (every thread). */
static double self_cpu_s(void) {
    struct timespec t;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0) return -1;
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The load tracker: what the machine and this process had used at the start. */
typedef struct load_mark {
    double wall, machine, self;
} load_mark;

static load_mark load_start(void) {
    load_mark m = {kf_now(), machine_busy_s(), self_cpu_s()};
    return m;
}

/* The share of the machine's CPUs that others used since m, 0..1; 0 when unreadable. */
static double load_others(const load_mark *m) {
    double machine = machine_busy_s(), self = self_cpu_s(), wall = kf_now() - m->wall;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (m->machine < 0 || machine < 0 || m->self < 0 || self < 0 || wall <= 0 || ncpu <= 0) return 0;
    double others = ((machine - m->machine) - (self - m->self)) / (wall * (double)ncpu);
    return others < 0 ? 0 : others > 1 ? 1 : others;
}

/* Size of the last-level cache in bytes, 0 if unknown. sysfs first: under some hypervisors
 * glibc's sysconf reports the host's whole L3 instead of the slice this VM shares. */
static double l3_bytes(void) {
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    if (f) {
        double v = 0;
        char unit = 0;
        int n = fscanf(f, "%lf%c", &v, &unit);
        fclose(f);
        if (n >= 1 && v > 0) {
            if (n == 2 && (unit == 'K' || unit == 'k')) v *= 1024.0;
            else if (n == 2 && (unit == 'M' || unit == 'm')) v *= MIB;
            return v;
        }
    }
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return l3 > 0 ? (double)l3 : 0.0;
}

/* Bytes per array: far above the last-level cache (8x, at least 256 MiB), at most 384 MiB
 * so that both arrays stay under 1 GiB; a multiple of the segment size. */
static size_t array_bytes(void) {
    double l3 = l3_bytes();
    double want = l3 > 0 ? 8.0 * l3 : 256 * MIB;
    if (want < 256 * MIB) want = 256 * MIB;
    if (want > 384 * MIB) want = 384 * MIB;
    size_t b = (size_t)want;
    return b / SEG_BYTES * SEG_BYTES;
}

static float *alloc_huge(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 2u << 20, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE); /* fewer TLB misses; a hint, failure is harmless */
#endif
    return p;
}

/* Contract: measure the ceilings with `threads` OpenMP threads (0 = every CPU in this
 * process's affinity mask). On success fills *out completely (device_key = "", for the
 * caller to fill; measured = 1; threads = the team size obtained; when = UTC ISO 8601
 * time) and returns KF_OK. KF_ERR_ARG for threads < 0 or out == NULL, KF_ERR_NOMEM when
 * not even 2 x 32 MiB could be allocated. Takes about 2 s; allocates and frees up to
 * 768 MiB. Debug logging (level 2) prints every number, plain and streaming stores apart. */
/* Overhead of one empty OpenMP parallel region of `threads` threads (the fork/join every
 * CPU candidate pays once per call), seconds: the median of many. */
static double fork_join_s(int threads) {
    enum { N = 201 };
    double t[N];
    volatile int sink = 0;
    for (int i = 0; i < N + 20; i++) {
        double a = kf_now();
#pragma omp parallel num_threads(threads)
        {
            if (sink < 0) sink = 1;
        }
        if (i >= 20) t[i - 20] = kf_now() - a; /* the first regions start the pool */
    }
    for (int i = 1; i < N; i++) /* insertion sort: N is small */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return t[N / 2];
}

kf_status kf_arch_calibrate_cpu(int threads, kf_ceilings *out, kf_error *err) {
    if (!out) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "calibrate: out is NULL");
    if (threads < 0)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "calibrate: threads must be >= 0, got %d", threads);
    calib c = {0};
    c.threads = threads ? threads : kf_usable_cpus();
#if KF_ARCH_X86
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    c.avx512 = c.avx2 && __builtin_cpu_supports("avx512f");
#endif

    size_t bytes = array_bytes();
    while (bytes >= SEG_BYTES) {
        c.a = alloc_huge(bytes);
        c.b = c.a ? alloc_huge(bytes) : NULL;
        if (c.a && c.b) break;
        free(c.a);
        c.a = NULL;
        bytes /= 2;
    }
    if (!c.a || !c.b)
        return kf_error_set(err, KF_ERR_NOMEM, NULL, 0, 0,
                            "calibrate: cannot allocate two %u MiB arrays", SEG_BYTES >> 20);
    c.n = bytes / sizeof(float);
    c.seg = SEG_BYTES / sizeof(float);
    int nseg = (int)(c.n / c.seg);
    enum { BW_PASSES = 4, PEAK_ROUNDS = 8 };
    c.max_samples = nseg * BW_PASSES > PEAK_ROUND ? nseg * BW_PASSES : PEAK_ROUND;
    c.start = kf_calloc((size_t)c.max_samples * (size_t)c.threads, sizeof(double));
    c.end = kf_calloc((size_t)c.max_samples * (size_t)c.threads, sizeof(double));

    double t0 = kf_now();
    load_mark lm = load_start();
    run_samples(&c, K_TOUCH, nseg); /* first touch, with the timed loops' partition */
    double t_touch = kf_now() - t0;
    set all = measure_set(&c, BW_PASSES, PEAK_ROUNDS);
    int team = c.team;
    if (c.threads > 1) {
        /* Every ceiling of a team is at least what one of its threads reaches alone, and one
         * thread is far less exposed to other processes (a team sample is spoilt when any
         * member is descheduled): take the better of the two, and say so when the team lost. */
        c.threads = 1;
        set one = measure_set(&c, 2, PEAK_ROUNDS / 2);
        c.threads = team;
        double worst = fmin(fmin(all.copy / one.copy, all.rd / one.rd),
                            fmin(all.peak32 / one.peak32, all.peak64 / one.peak64));
        if (worst < 0.95)
            kf_log(1,
                   "warning: calibration: %d threads measured below 1 thread (down to %.0f%%): "
                   "the machine looks busy; the ceilings may be low (re-calibrate when idle)",
                   team, 100.0 * worst);
        all.copy = fmax(all.copy, one.copy);
        all.copy_nt = fmax(all.copy_nt, one.copy_nt);
        all.rd = fmax(all.rd, one.rd);
        all.fill = fmax(all.fill, one.fill);
        all.fill_nt = fmax(all.fill_nt, one.fill_nt);
        all.peak32 = fmax(all.peak32, one.peak32);
        all.peak64 = fmax(all.peak64, one.peak64);
    }
    double busy = load_others(&lm);
    if (busy > KF_CALIB_BUSY_MAX)
        kf_log(1,
               "warning: calibration: other processes used %.0f%% of the machine's %ld CPUs while it "
               "measured: the ceilings may be low (a run 5 minutes on measures again; `kforge "
               "calibrate` when the machine is idle)",
               100.0 * busy, sysconf(_SC_NPROCESSORS_ONLN));
    free(c.a);
    free(c.b);
    free(c.start);
    free(c.end);

    memset(out, 0, sizeof *out);
    out->busy = busy;
    out->measured = 1;
    out->threads = team;
    out->copy_gbs = fmax(all.copy, all.copy_nt);
    out->read_gbs = all.rd;
    out->write_gbs = fmax(all.fill, all.fill_nt);
    out->peak_gflops_f32 = all.peak32;
    out->peak_gflops_f64 = all.peak64;
    out->launch_us = fork_join_s(team) * 1e6;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out->when, sizeof out->when, "%Y-%m-%dT%H:%M:%SZ", &tm);

    kf_log(2,
           "calibrate: %d threads, %s, arrays 2 x %zu MiB: copy %.1f GB/s (plain %.1f, "
           "streaming %.1f), read %.1f GB/s, write %.1f GB/s (plain %.1f, streaming %.1f), "
           "peak %.1f GFLOP/s f32, %.1f f64, fork/join %.1f us (%.2f s, first touch %.2f s)",
           out->threads, c.avx2 ? "avx2+fma" : "128-bit generic", bytes >> 20, out->copy_gbs,
           all.copy, all.copy_nt, out->read_gbs, out->write_gbs, all.fill, all.fill_nt,
           all.peak32, all.peak64, out->launch_us, kf_now() - t0, t_touch);
    return KF_OK;
}
