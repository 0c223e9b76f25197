/*
 * The planner's internal state, shared by synth.c and the elementwise and reduction
 * templates (tpl_ewise.c, tpl_reduce.c). Not part of the public API.
 */
#ifndef KF_SYNTH_INT_H
#define KF_SYNTH_INT_H

#include "tpl.h"

typedef enum kf_stage_kind {
    KF_STAGE_EWISE, KF_STAGE_REDUCE, KF_STAGE_SOFTMAX, KF_STAGE_NORM, KF_STAGE_MATMUL
} kf_stage_kind;

typedef struct kf_stage {
    kf_stage_kind kind;
    int *nodes;        /* node indices in topological order (one for non-elementwise) */
    int nnodes;
    kf_shape dom;      /* iteration domain: shape of the nodes' results */
    char prefix[8];    /* parameter prefix "s<k>." */
    kf_matmul_desc mm; /* matmul stages */
} kf_stage;

struct kf_synth {
    const kf_graph *g;
    kf_device_info dev;
    char platform[16];
    kf_stage *st;
    int nst;
    int *val_stage;    /* stage producing each value, -1 for inputs and constants */
    int *materialize;  /* value is kept in a buffer */
    kf_space space;
    char desc[512];
};

/* C element type of value v ("float" or "int64_t"). */
const char *kf_synth_ctype(const kf_graph *g, int v);
/* Fill a matmul description from a matmul node (batch dims merged, broadcast strides). */
void kf_synth_matmul_desc(const kf_graph *g, const kf_node *n, kf_matmul_desc *d);

void kf_synth_ewise_params(kf_synth *s, kf_stage *st);
void kf_synth_ewise_emit(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *out);
void kf_synth_reduce_params(kf_synth *s, kf_stage *st);
void kf_synth_reduce_emit(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *out);

/* C expression for a float literal (handles inf and NaN). */
void kf_synth_float_lit(double v, char *buf, size_t cap);

#endif
