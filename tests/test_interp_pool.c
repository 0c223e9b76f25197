/*
 * The reference walk's pool of large arrays (src/ir/interp_pool.c): a freed block is handed
 * to the next request it fits, never to one it is far too large for, is zeroed where a
 * zeroed array is asked for, and the walk's results and bounds do not depend on what a
 * reused block held before.
 *
 * Mutations checked by hand: kf_ip_zalloc without its memset (3 and 4 fail: the pointwise
 * bound's maximum starts from the poison); kf_ip_alloc handing out any block at least as
 * large (2 fails); kf_ip_pool_end_walk draining under a hold (5 fails); kf_interp_hold(0)
 * not draining (5 fails).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ir/interp_int.h"

#define MB ((size_t)1 << 20)

/* The task text parsed (name: its file name in messages). */
static kf_graph *parsed(const char *text, const char *name) {
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(text, name, &g, &err), KF_OK, "%s", err.msg);
    return g;
}

Test(interp_pool, a_freed_block_serves_the_next_request_of_its_size) {
    kf_ip_pool_drain();
    void *a = kf_ip_alloc(3 * MB);
    memset(a, 0x5a, 3 * MB);
    kf_ip_free(a);
    void *b = kf_ip_alloc(3 * MB);
    cr_assert_eq(a, b, "the block kept is handed out again");
    kf_ip_free(b);
    kf_ip_pool_drain();
    /* small blocks are plain malloc/free */
    void *s = kf_ip_alloc(1000);
    kf_ip_free(s);
}

Test(interp_pool, a_block_far_larger_than_asked_is_not_handed_out) {
    kf_ip_pool_drain();
    void *big = kf_ip_alloc(16 * MB);
    kf_ip_free(big);
    void *small = kf_ip_alloc(2 * MB);
    cr_assert_neq(small, big, "a 16 MiB block for a 2 MiB request");
    void *again = kf_ip_alloc(16 * MB);
    cr_assert_eq(again, big, "the 16 MiB block is still kept for its size");
    kf_ip_free(small);
    kf_ip_free(again);
    kf_ip_pool_drain();
}

/* A reused block asked for zeroed comes back zeroed. */
Test(interp_pool, a_zeroed_request_is_zeroed_even_when_reused) {
    kf_ip_pool_drain();
    size_t n = (4 * MB) / sizeof(double);
    double *a = kf_ip_alloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = NAN;
    kf_ip_free(a);
    double *z = kf_ip_zalloc(n, sizeof *z);
    cr_assert_eq((void *)z, (void *)a, "the poisoned block is the one reused");
    for (size_t i = 0; i < n; i++) cr_assert(z[i] == 0.0, "element %zu is %g", i, z[i]);
    kf_ip_free(z);
    kf_ip_pool_drain();
}

/* A GEMM into a pointwise chain and a layer norm, large enough that its arrays go through
 * the pool (256 x 1024 doubles, 2 MiB): results and bounds the same bit for bit whether the
 * pool starts empty or full of NaN-poisoned blocks of exactly the walk's sizes. */
Test(interp_pool, the_walk_does_not_read_what_a_reused_block_held) {
    const char *task = "task pool\n"
                       "input x: f32[256, 48]\n"
                       "input w: f32[1024, 48]\n"
                       "input b: f32[1024]\n"
                       "y = matmul(x, w, transpose_b=true) + b\n"
                       "s = sigmoid(y) * y + b\n"
                       "output z = hardtanh(layer_norm(s, axes=[-1], eps=1e-05), min_val=-2, max_val=2)\n";
    kf_graph *g = parsed(task, "pool.kf");
    kf_error err = {0};
    size_t nin[3] = {256 * 48, 1024 * 48, 1024}, nout = 256 * 1024;
    double *in[3];
    for (int i = 0; i < 3; i++) {
        in[i] = malloc(nin[i] * sizeof(double));
        for (size_t k = 0; k < nin[i]; k++) in[i][k] = sin(0.37 * (double)k + i) * 0.5;
    }
    double *o[2], *bd[2];
    for (int r = 0; r < 2; r++) {
        o[r] = calloc(nout, sizeof(double));
        bd[r] = calloc(nout, sizeof(double));
        if (r == 1) { /* the pool full of poison of the walk's sizes */
            void *blk[8];
            for (int k = 0; k < 8; k++) {
                blk[k] = kf_ip_alloc(nout * sizeof(double));
                double *d = blk[k];
                for (size_t i = 0; i < nout; i++) d[i] = NAN;
            }
            for (int k = 0; k < 8; k++) kf_ip_free(blk[k]);
        }
        cr_assert_eq(kf_interp_run_bounds(g, (const double *const *)in, &o[r], &bd[r], &err), KF_OK, "%s", err.msg);
    }
    cr_assert(memcmp(o[0], o[1], nout * sizeof(double)) == 0, "the outputs differ");
    cr_assert(memcmp(bd[0], bd[1], nout * sizeof(double)) == 0, "the bounds differ");
    int finite = 1;
    for (size_t i = 0; i < nout; i++) finite &= isfinite(o[1][i]) && isfinite(bd[1][i]) && bd[1][i] > 0;
    cr_assert(finite, "a NaN or a zero bound");
    for (int i = 0; i < 3; i++) free(in[i]);
    for (int r = 0; r < 2; r++) free(o[r]), free(bd[r]);
    kf_graph_free(g);
}

/* Held across runs (the verifier's sets), the walk's arrays stay in the pool after it
 * returns; without a hold, and once the hold ends, nothing stays. */
Test(interp_pool, a_hold_keeps_the_arrays_between_runs_and_its_end_frees_them) {
    const char *task = "task hold\n"
                       "input x: f32[512, 1024]\n"
                       "input w: f32[1024]\n"
                       "output z = layer_norm(exp(x) * w + x, axes=[-1], eps=1e-05)\n";
    kf_graph *g = parsed(task, "hold.kf");
    kf_error err = {0};
    size_t nx = 512 * 1024;
    double *x = malloc(nx * sizeof *x), *w = malloc(1024 * sizeof *w), *o = malloc(nx * sizeof *o);
    double *bd = malloc(nx * sizeof *bd);
    for (size_t i = 0; i < nx; i++) x[i] = cos(0.1 * (double)i);
    for (size_t i = 0; i < 1024; i++) w[i] = 1 + 0.001 * (double)i;
    const double *in[2] = {x, w};
    kf_ip_pool_drain();
    cr_assert_eq(kf_interp_run_bounds(g, in, &o, &bd, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_ip_pool_held(), 0, "no hold: the walk drained the pool");
    kf_interp_hold(1);
    cr_assert_eq(kf_interp_run_bounds(g, in, &o, &bd, &err), KF_OK, "%s", err.msg);
    size_t held = kf_ip_pool_held();
    cr_assert_geq(held, nx * sizeof(double), "held: %zu bytes", held);
    cr_assert_eq(kf_interp_run_bounds(g, in, &o, &bd, &err), KF_OK, "%s", err.msg);
    /* (how much a second run adds depends on which threads freed which chunk's arrays: only
     * that the pool still holds the arrays is asserted) */
    cr_assert_geq(kf_ip_pool_held(), nx * sizeof(double), "a second run under the hold: held %zu", kf_ip_pool_held());
    kf_interp_hold(0);
    cr_assert_eq(kf_ip_pool_held(), 0, "the hold's end frees what was kept");
    free(x), free(w), free(o), free(bd);
    kf_graph_free(g);
}
