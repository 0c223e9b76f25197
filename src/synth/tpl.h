/*
 * Internal interface between the generator's planner (synth.c) and its op templates.
 *
 * Every template works on one stage and offers two things:
 *   - *_params: append its tunable parameters (prefixed with the stage's prefix, e.g.
 *     "s0.") to a space, each with the values worth trying on this device and a default;
 *   - *_emit: append to a C source buffer one `static void NAME(...)` function that
 *     computes the stage for the parameter values it is given.
 * The planner writes the entry point `kforge_kernel` that calls the stage functions.
 * Generated code is plain C11 + OpenMP + GCC vector extensions; the CPU backend compiles it
 * with -O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math (no -ffast-math: NaN
 * and Inf semantics are kept).
 */
#ifndef KF_SYNTH_TPL_H
#define KF_SYNTH_TPL_H

#include "kforge/synth.h"

#include <stdarg.h>

/* Look up "<prefix><name>" in the space at point p. Asserts the parameter exists. */
long kf_tpl_get(const kf_space *sp, const kf_point *p, const char *prefix, const char *name);
/* Append a parameter "<prefix><name>" with role (what it does, for the analysis agent) and
 * values[0..n-1]; dflt is the default's index. */
void kf_tpl_add_param(kf_space *sp, const char *prefix, const char *name, kf_role role,
                      const long *values, int n, int dflt);

/* The CPU matmul templates' shared choices: the vector length in floats of dev's SIMD
 * width (4, 8 or 16); the thread counts worth trying (1..threads, thinned to powers of two
 * plus the maximum when there are many) into tv, returning how many; and the work (in
 * multiply-adds) below which one thread is the default: below ~160^3 (~0.1 ms on one core)
 * waking a thread team costs more than it saves, and on a busy machine a worker may not
 * get a core for milliseconds. */
int kf_tpl_cpu_vl(const kf_device_info *dev);
int kf_tpl_thread_values(const kf_device_info *dev, long *tv);
#define KF_TPL_THREADS_MIN_WORK 4194304.0

/* Append printf(fmt, ap) to out with every '@' replaced by name (a stage function's name,
 * which prefixes the helpers a template emits). */
void kf_tpl_vput_named(kf_buf *out, const char *name, const char *fmt, va_list ap);

/* The math prelude every CPU candidate starts with: branch-free, vectorisable float
 * versions of exp, log, tanh, erf, sigmoid, ... (names kf_expf, kf_logf, kf_tanhf,
 * kf_erff, kf_sigmoidf, kf_log1pf, kf_expm1f, kf_powf). Accurate to a few ulp. */
void kf_tpl_prelude_c(kf_buf *out);

/* ---- matmul (src/synth/tpl_matmul.c) ---- */

/* A matmul operand read through a strided map of its source instead of as a dense matrix
 * (an implicit GEMM: a convolution's column matrix is never stored). Each of the operand's
 * matrix dims is a mixed-radix run of sub-dims ("atoms", outer first), each with its own
 * stride in the source's elements; the batch dims have one stride each. The CPU template
 * gathers through it when it packs (src/synth/view.c finds it, docs/design-notes.md). */
#define KF_MM_MAX_ATOMS (2 * KF_MAX_DIMS)
typedef struct kf_mm_gather {
    int on;
    int64_t base;                      /* element offset of index 0 in the source */
    int nrow, ncol;                    /* atoms of the matrix's rows and of its columns */
    int64_t rdim[KF_MM_MAX_ATOMS], rstr[KF_MM_MAX_ATOMS];
    int64_t cdim[KF_MM_MAX_ATOMS], cstr[KF_MM_MAX_ATOMS];
    int64_t bstr[KF_MAX_DIMS];         /* per output batch dim, in elements (0: broadcast) */
    int padded;                        /* the source is a padding view's result (a border of
                                        * pad values: the default skips B's zero rows) */
} kf_mm_gather;
typedef struct kf_matmul_desc {
    int64_t batch;           /* number of (M x N) output matrices */
    int64_t M, N, K;
    int ta, tb;              /* A stored as [K, M] (ta) / B stored as [N, K] (tb) */
    /* batch broadcasting: output matrix b uses A matrix a_index(b) and B matrix b_index(b).
     * Batch dims are given merged: out batch shape [nb dims] and per-operand strides in
     * matrices (0 where broadcast). */
    int nbdims;
    int64_t bdim[KF_MAX_DIMS];
    int64_t a_bstride[KF_MAX_DIMS], b_bstride[KF_MAX_DIMS];
    /* the graph values read as A and B: the operands, or the source of a transpose view
     * folded into ta/tb (src/synth/view.c) */
    int a_val, b_val;
    /* B gathered through a map of b_val (CPU only; tb is 0 then): b_bstride unused */
    kf_mm_gather gb;
    /* an epilogue in the store stage (CPU GEMM only): NAME takes a fourth argument
     * `const NAME_ex *ex`, and each element of C, once its K-sum is complete, goes to
     * `NAME_epi(ex, f, len, in)` (len consecutive elements of one row, their sums in in[],
     * the first at flat index f of C) instead of into C; the caller defines NAME_ex and
     * NAME_epi before the function, and C holds only partial sums (it may be a buffer the
     * epilogue writes). 0: C is stored. */
    int epi;
} kf_matmul_desc;

void kf_tpl_matmul_params(const kf_matmul_desc *d, const kf_device_info *dev, kf_space *sp,
                          const char *prefix);
/* Emits: static void NAME(const float *restrict A, const float *restrict B,
 *                         float *restrict C)   (with d->epi: float *C, const NAME_ex *ex)
 * C is dense [batch, M, N]; A dense [A-batch, M, K] (or [.., K, M] when ta); B likewise. */
void kf_tpl_matmul_emit(kf_buf *out, const char *fname, const kf_matmul_desc *d,
                        const kf_space *sp, const kf_point *p, const char *prefix);
/* Emits `static inline int64_t FNAME_<which>off(int64_t bt)`: the element offset of output
 * matrix bt's operand (batch strides bstride, in matrices of msize elements). */
void kf_tpl_mm_batch_offset(kf_buf *out, const char *fname, const kf_matmul_desc *d, const char *which,
                            const int64_t *bstride, int64_t msize);

/* A GEMM as one part of a row-blocked chain (tpl_chain.c): its parameters are only vl, mk,
 * kc and pa (0: the micro-kernel reads A's full strips in place, 1: A is packed; the chain
 * decides threads and blocks); the emitter writes, every name prefixed
 * with fname:
 *   static inline int64_t fname_aoff(int64_t bt), fname_boff(int64_t bt)  batch offsets;
 *   static void fname_pack_all(const float *B, float *bp)  the whole of B, packed;
 *   static void fname_rows(const float *A, const float *bp, float *C, float *ap, int64_t rows)
 *       C's rows [0, rows) (row stride N) from A's (A at the block's first row, or its first
 *       column when ta), rows <= rows_max;
 * and fills info with the buffer sizes those take. d must not gather B. */
typedef struct kf_tpl_panel {
    int mr, nr;
    int64_t kc;
    int64_t bp_floats, ap_floats; /* floats of bp and ap (multiples of 16) */
} kf_tpl_panel;
void kf_tpl_matmul_params_inner(const kf_matmul_desc *d, const kf_device_info *dev, kf_space *sp,
                                const char *prefix);
void kf_tpl_matmul_emit_panel(kf_buf *out, const char *fname, const kf_matmul_desc *d, const kf_space *sp,
                              const kf_point *p, const char *prefix, int64_t rows_max, kf_tpl_panel *info);

/* ---- matrix-vector products (src/synth/tpl_matvec.c) ---- */

/* 1 when the matvec template computes d (M == 1 or N == 1, B not gathered); else 0 with
 * the reason appended to why. */
int kf_tpl_matvec_supports(const kf_matmul_desc *d, kf_buf *why);
/* Parameters and emitter as the GEMM's (same signature NAME(A, B, C), same operands). */
void kf_tpl_matvec_params(const kf_matmul_desc *d, const kf_device_info *dev, kf_space *sp,
                          const char *prefix);
void kf_tpl_matvec_emit(kf_buf *out, const char *fname, const kf_matmul_desc *d,
                        const kf_space *sp, const kf_point *p, const char *prefix);

#endif
