/*
 * libm's functions over arrays, for the float64 references of the pointwise records.
 *
 * The interpreter runs a pointwise op over 65,536 elements at a time, and per element
 * glibc's scalar exp, tanh, erfc, ... were most of a pointwise reference's time (exp and
 * the sigmoid around it: 21% of a swish run's CPU). Where the build found glibc's vector
 * math library (libmvec, KF_HAVE_LIBMVEC: glibc >= 2.35 on x86_64, for erfc, tanh, expm1
 * and log1p beside exp and log), each function is taken four lanes at a time through its
 * AVX2 variant (_ZGVdN4v_*) on a CPU that has AVX2 and FMA, two lanes at a time through
 * its SSE variant (_ZGVbN2v_*, any x86_64) otherwise; elsewhere, per element from libm.
 *
 * Why it stays a reference: libmvec is glibc's own library, its functions' errors are
 * documented (glibc's libm-test-ulps: a few ulp) and tests/test_vmath.c bounds them against
 * the scalar functions over random and edge arguments (NaN, infinities, zeros, denormals,
 * the overflow and underflow thresholds): NaN in gives NaN out, infinities and overflow as
 * libm's. The reference is compared with float32 kernels at tolerances near 1e-5 relative;
 * a few float64 ulp are 1e-15.
 *
 * A value depends on its argument only, never on its place in the array: a tail shorter
 * than a vector goes through the same vector function (padded), so a chunked run and a
 * whole-tensor run of the same graph give the same bytes.
 */
#include "ops_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(KF_HAVE_LIBMVEC) && defined(__x86_64__)
#include <immintrin.h>

/* glibc's vector ABI names (x86_64 vector function ABI: b = SSE, 2 lanes; d = AVX2, 4) */
#define VM_DECL(f)                                                                          \
    __m128d _ZGVbN2v_##f(__m128d);                                                          \
    __attribute__((target("avx2,fma"))) __m256d _ZGVdN4v_##f(__m256d);
VM_DECL(exp)
VM_DECL(log)
VM_DECL(tanh)
VM_DECL(erfc)
VM_DECL(expm1)
VM_DECL(log1p)

/* Each function over n elements: whole vectors, then the tail padded with zeros. x and y
 * may be the same array. */
#define VM_DEF(f)                                                                           \
    __attribute__((target("avx2,fma"))) static void vm_##f##_avx2(const double *x, double *y, \
                                                                   int64_t n) {             \
        int64_t i = 0;                                                                      \
        for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, _ZGVdN4v_##f(_mm256_loadu_pd(x + i))); \
        if (i < n) {                                                                        \
            double t[4] = {0, 0, 0, 0};                                                     \
            memcpy(t, x + i, (size_t)(n - i) * sizeof *t);                                  \
            _mm256_storeu_pd(t, _ZGVdN4v_##f(_mm256_loadu_pd(t)));                          \
            memcpy(y + i, t, (size_t)(n - i) * sizeof *t);                                  \
        }                                                                                   \
    }                                                                                       \
    static void vm_##f##_sse(const double *x, double *y, int64_t n) {                       \
        int64_t i = 0;                                                                      \
        for (; i + 2 <= n; i += 2) _mm_storeu_pd(y + i, _ZGVbN2v_##f(_mm_loadu_pd(x + i))); \
        if (i < n) {                                                                        \
            double t[2] = {x[i], 0};                                                        \
            _mm_storeu_pd(t, _ZGVbN2v_##f(_mm_loadu_pd(t)));                                \
            y[i] = t[0];                                                                    \
        }                                                                                   \
    }                                                                                       \
    static void vm_##f(const double *x, double *y, int64_t n) {                             \
        if (kf_vm_path() == KF_VM_AVX2) vm_##f##_avx2(x, y, n);                             \
        else vm_##f##_sse(x, y, n);                                                         \
    }

/* Which variant this CPU takes (-1: not chosen yet). */
static int vm_path_sel = -1;

int kf_vm_path(void) {
    int p = __atomic_load_n(&vm_path_sel, __ATOMIC_RELAXED);
    if (p < 0) {
        __builtin_cpu_init();
        p = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? KF_VM_AVX2 : KF_VM_SSE;
        __atomic_store_n(&vm_path_sel, p, __ATOMIC_RELAXED);
    }
    return p;
}

int kf_vm_set_path(int path) {
    int old = kf_vm_path();
    if (path == KF_VM_SSE || (path == KF_VM_AVX2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
        __atomic_store_n(&vm_path_sel, path, __ATOMIC_RELAXED);
    else if (path < 0)
        __atomic_store_n(&vm_path_sel, -1, __ATOMIC_RELAXED);
    return old;
}

#else /* per element from libm */

#define VM_DEF(f)                                                                           \
    static void vm_##f(const double *x, double *y, int64_t n) {                             \
        for (int64_t i = 0; i < n; i++) y[i] = f(x[i]);                                     \
    }

int kf_vm_path(void) { return KF_VM_SCALAR; }

int kf_vm_set_path(int path) {
    (void)path;
    return KF_VM_SCALAR;
}

#endif

VM_DEF(exp)
VM_DEF(log)
VM_DEF(tanh)
VM_DEF(erfc)
VM_DEF(expm1)
VM_DEF(log1p)

void kf_vm_log(const double *x, double *y, int64_t n) { vm_log(x, y, n); }
void kf_vm_tanh(const double *x, double *y, int64_t n) { vm_tanh(x, y, n); }
void kf_vm_erfc(const double *x, double *y, int64_t n) { vm_erfc(x, y, n); }
void kf_vm_expm1(const double *x, double *y, int64_t n) { vm_expm1(x, y, n); }
void kf_vm_log1p(const double *x, double *y, int64_t n) { vm_log1p(x, y, n); }

/* exp's results outside its finite, nonzero range set here, not by the library: beyond
 * these bounds libmvec hands each lane to the scalar exp, whose underflow path (errno,
 * the exception's operation) cost as much as the vector exp itself on the sets' wide-
 * magnitude draws (sigmoid's exp(-|x|)). Exact: e^-746 = 2^-1076.3 is below half the
 * smallest subnormal (2^-1075), so it rounds to +0; e^710 = 2^1024.3 is above DBL_MAX, so
 * it rounds to +inf (round to nearest); libm's exp gives the same (tests/test_vmath.c).
 * NaN compares false both ways and goes to the library. */
#define VM_EXP_ZERO (-746.0)
#define VM_EXP_INF 710.0
#define VM_EXP_BLOCK 512

void kf_vm_exp(const double *x, double *y, int64_t n) {
    double t[VM_EXP_BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += VM_EXP_BLOCK) {
        int64_t m = n - i0 < VM_EXP_BLOCK ? n - i0 : VM_EXP_BLOCK;
        const double *px = x + i0;
        double *py = y + i0;
        for (int64_t i = 0; i < m; i++) t[i] = px[i] < VM_EXP_ZERO || px[i] > VM_EXP_INF ? 0.0 : px[i];
        vm_exp(t, t, m);
        for (int64_t i = 0; i < m; i++) py[i] = px[i] < VM_EXP_ZERO ? 0.0 : px[i] > VM_EXP_INF ? HUGE_VAL : t[i];
    }
}
