/*
 * kforge index maps: how a read addresses its source (../shared/DESIGN.md §8). A map takes
 * an index of its output (a view's result) to an index of its input, affinely per input
 * dimension:
 *
 *     in[d] = off[d] + sum_j coef[d][j] * out[j]
 *
 * with optional guards: affine expressions of the output index that must lie in [0, n)
 * for the read to happen; where one does not, the element is the map's pad value. A
 * broadcast is a coefficient 0, a permutation a permuted identity, a slice an offset and a
 * step, a flip a coefficient -1 with offset n-1, a window (unfold) two output dims feeding
 * one input dim (step and dilation), a constant pad a shifted identity with guards.
 *
 * The struct is plain data so that the op records (src/ops/view.c, below the IR) can fill
 * it; composing, applying and turning a map into strides is src/ir/imap.c (kforge/ir.h).
 */
#ifndef KFORGE_IMAP_H
#define KFORGE_IMAP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KF_MAX_DIMS 8
/* Guards a map holds: one per input dim of each padded view it was composed from. */
#define KF_IMAP_MAX_GUARDS 16

/* One affine expression of the output index: off + sum_j coef[j] * out[j]. */
typedef struct kf_affine {
    int64_t off;
    int64_t coef[KF_MAX_DIMS];
} kf_affine;

typedef struct kf_imap {
    int in_rank, out_rank;
    int64_t in_dims[KF_MAX_DIMS];  /* the source's shape */
    int64_t out_dims[KF_MAX_DIMS]; /* the view's shape */
    kf_affine in[KF_MAX_DIMS];     /* the source index, per input dim */
    int nguards;                   /* guards: each expression must lie in [0, guard_n) */
    kf_affine guard[KF_IMAP_MAX_GUARDS];
    int64_t guard_n[KF_IMAP_MAX_GUARDS];
    double pad;                    /* the value where a guard fails */
    int flat;                      /* in[0] is the source's row-major flat index (above) */
} kf_imap;

#ifdef __cplusplus
}
#endif
#endif
