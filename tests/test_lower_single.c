/*
 * Reductions over a single element (src/ir/lower.c, unroll_count's extent-1 case): a sum,
 * max, mean or logsumexp over an axis of extent 1 is the element itself, so the lowering
 * writes it as an elementwise op (or a select where the axis goes) that fuses with its
 * neighbours, instead of a reduction stage each (KernelBench level 2's 18: a keepdim sum
 * then max, mean and two logsumexps over that axis took 12 GPU kernels and 11 scratch
 * buffers, past the launch plan's 8 and 8).
 *
 * Mutations checked by hand: unroll_count without the extent-1 case (the reductions and
 * their stages come back: 2 and 3 fail); has_single_reduction's further passes dropped
 * (logsumexp's own max and sum stay: 2 fails); the keepdim identity written "_0 * 2" (1
 * fails: the lowered graph's values differ from the original's).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpu_common.h"
#include "synth/synth_int.h"

static const char *chain = "task single\n"
                           "input x: f32[6, 40]\n"
                           "input w: f32[24, 40]\n"
                           "y = matmul(x, w, transpose_b=true)\n"
                           "s = sum(y, axes=[1], keepdim=true)\n"
                           "m = max(s, axes=[1], keepdim=true)\n"
                           "a = mean(m, axes=[1], keepdim=true)\n"
                           "l = logsumexp(a, axes=[1], keepdim=true)\n"
                           "output z = logsumexp(l, axes=[1], keepdim=true)\n"
                           "output q = sum(s, axes=[1])\n";

/* The CPU as the planner sees a 2-core AVX2 machine; a GPU as gpu_common.h's gpu_like. */
static void device(const char *platform, kf_device_info *d) {
    if (strcmp(platform, "cpu") != 0) {
        gpu_like(d, platform);
        return;
    }
    memset(d, 0, sizeof *d);
    snprintf(d->platform, sizeof d->platform, "cpu");
    snprintf(d->arch, sizeof d->arch, "x86_64 avx2 fma");
    d->cores = d->threads = 2;
    d->simd_bits = 256;
    d->l1d_bytes = 32 << 10, d->l2_bytes = 1 << 20, d->l3_bytes = 16 << 20;
}

static kf_graph *lowered(const kf_graph *t) {
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert(kf_graph_has_lowering(t));
    cr_assert_eq(kf_graph_lower(t, &g, &err), KF_OK, "%s", err.msg);
    return g;
}

/* Reductions of the lowered graph, and its nodes whose operand is an axis of extent 1. */
static int count_reductions(const kf_graph *g, int *single) {
    int n = 0;
    *single = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const kf_node *nd = &g->nodes[i];
        const kf_op_def *d = kf_op_get(nd->op);
        if (d->cls != KF_CLASS_REDUCE && d->kind != KF_KIND_REDUCE) continue;
        n++;
        const kf_shape *xs = &g->values[nd->in[0]].shape;
        int64_t r = 1;
        for (int a = 0; a < xs->rank; a++)
            if (nd->attr.axes >> a & 1u) r *= xs->d[a];
        *single += r == 1;
    }
    return n;
}

/* The lowered graph computes what the original does, in float64 (the interpreter evaluates
 * the original's logsumexp with its own rows reference, the lowered one through its
 * lowering), on data with both signs and a wide range. */
Test(lower_single, the_lowered_chain_computes_the_same_values) {
    kf_graph *t = parse(chain), *g = lowered(t);
    double *in[2], *o1[2], *o2[2];
    int64_t nin[2] = {6 * 40, 24 * 40};
    for (int i = 0; i < 2; i++) {
        in[i] = malloc((size_t)nin[i] * sizeof(double));
        for (int64_t k = 0; k < nin[i]; k++) in[i][k] = sin(1.7 * (double)k + i) * (1 + (double)(k % 7));
    }
    for (int j = 0; j < 2; j++) o1[j] = calloc(6, sizeof(double)), o2[j] = calloc(6, sizeof(double));
    kf_error err = {0};
    cr_assert_eq(kf_interp_run(t, (const double *const *)in, o1, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_interp_run(g, (const double *const *)in, o2, &err), KF_OK, "%s", err.msg);
    for (int j = 0; j < 2; j++)
        for (int k = 0; k < 6; k++)
            cr_assert(fabs(o1[j][k] - o2[j][k]) <= 1e-12 * (1 + fabs(o1[j][k])), "output %d [%d]: %.17g vs %.17g",
                      j, k, o1[j][k], o2[j][k]);
    for (int i = 0; i < 2; i++) free(in[i]);
    for (int j = 0; j < 2; j++) free(o1[j]), free(o2[j]);
    kf_graph_free(g);
    kf_graph_free(t);
}

/* No reduction over a single element is left, the logsumexps' own ones included; the one
 * real reduction (the row sum of the matmul) stays. */
Test(lower_single, no_reduction_over_one_element_is_left) {
    kf_graph *t = parse(chain), *g = lowered(t);
    int single = 0;
    int n = count_reductions(g, &single);
    cr_assert_eq(single, 0, "%d reductions over one element left", single);
    cr_assert_eq(n, 1, "the row sum of the matmul stays, alone (found %d reductions)", n);
    kf_graph_free(g);
    kf_graph_free(t);
}

/* On every platform the chain after the row sum is one elementwise stage: two stages in
 * all (the matmul with its row sum, the chain), not a stage per op. */
Test(lower_single, the_chain_after_the_sum_is_one_stage) {
    const char *plats[] = {"cpu", "opencl", "cuda"};
    kf_graph *t = parse(chain);
    for (int p = 0; p < 3; p++) {
        kf_graph *g = lowered(t);
        kf_device_info dev;
        device(plats[p], &dev);
        kf_synth *s = NULL;
        kf_error err = {0};
        cr_assert_eq(kf_synth_plan(g, plats[p], &dev, &s, &err), KF_OK, "%s: %s", plats[p], err.msg);
        int live = 0, reds = 0;
        for (int k = 0; k < s->nst; k++) {
            if (s->st[k].fused) continue;
            live++;
            reds += s->st[k].kind == KF_STAGE_REDUCE;
        }
        cr_assert_leq(live, 2, "%s: %d stages", plats[p], live);
        cr_assert_leq(reds, 1, "%s: %d reduction stages", plats[p], reds);
        kf_synth_free(s);
        kf_graph_free(g);
    }
    kf_graph_free(t);
}
