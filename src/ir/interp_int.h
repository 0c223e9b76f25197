/*
 * Internal interface of the reference interpreter (src/ir/interp.c, interp_rows.c).
 *
 *   interp.c       the graph walk, node by node (and pointwise graphs chunk by chunk)
 *   interp_rows.c  graphs whose every node is local to the rows of axis 0, a chunk of rows
 *                  at a time on the threads
 *   interp_pool.c  the walk's large arrays kept for reuse between its nodes
 */
#ifndef KF_INTERP_INT_H
#define KF_INTERP_INT_H

#include "kforge/ir.h"

/* The graph walk (kf_interp_run_checked's contract; bounds, beyond may be NULL). rows: the
 * graph may be split into chunks of rows (interp_rows.c); 0 for a chunk itself. */
kf_status kf_interp_walk(const kf_graph *g, const double *const *inputs, double *const *outputs,
                         double *const *bounds, int *beyond, int rows, kf_error *err);

/* Rows of axis 0 per chunk (at least one) for a row width of w elements: about
 * KF_INTERP_ROW_CHUNK elements, a function of the shape alone (never of the thread
 * count), so that the results are the same on any number of threads. */
#define KF_INTERP_ROW_CHUNK ((int64_t)1 << 17)

/* g as chunks of rows of axis 0, when every live node is local to those rows and there
 * are at least two chunks: each chunk walked on its own (kf_interp_walk, rows 0) on one
 * thread, chunks spread over the threads. Returns 0 (nothing done) when g does not split
 * that way; else 1, with *st the walk's status. */
int kf_interp_run_rows(const kf_graph *g, const char *live, const double *const *inputs,
                       double *const *outputs, double *const *bounds, int *beyond, kf_status *st,
                       kf_error *err);

/* The walk's arrays (interp_pool.c): kf_ip_alloc as kf_malloc, kf_ip_zalloc as kf_calloc,
 * kf_ip_free as free (any malloc'd block; a large one is kept for the next kf_ip_alloc it
 * fits), kf_ip_pool_drain frees what is kept (the outermost walk, when it returns). */
void *kf_ip_alloc(size_t bytes);
void *kf_ip_zalloc(size_t count, size_t size);
void kf_ip_free(void *p);
void kf_ip_pool_drain(void);
/* The outermost walk's end: the pool drained unless a caller holds it (kf_interp_hold). */
void kf_ip_pool_end_walk(void);
/* Bytes the pool keeps now. */
size_t kf_ip_pool_held(void);

#endif
