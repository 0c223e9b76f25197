/*
 * The float64 reference's CPU time per element for a pointwise task (issue 30): the task's
 * graph through kf_interp_run_span, chunk by chunk as the sets are made, on one thread,
 * timed by the thread's CPU clock (CLOCK_THREAD_CPUTIME_ID), which a shared machine's load
 * disturbs far less than a wall clock. Inputs: each input's declared range, else half of
 * the elements uniform in [-4, 4] and half of wide magnitude (2^[-20, 20], either sign),
 * as the verifier's sets mix small and wide values.
 *
 *   cc -O2 -Iinclude -Isrc bench/ref_cpu.c build/libkforge.a $(libs) -o /tmp/ref_cpu
 *   /tmp/ref_cpu tasks/swish.kf [reps]       prints ns per element, median of reps
 *
 * To compare with an older reference, link the older src/ops/pointwise.c's object before
 * the library (bench/ref_cpu_ab.sh does both).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kforge/ir.h"

#define CHUNK 65536

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double unit(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 0x2545f4914f6cdd1dull) >> 11) * 0x1p-53;
}

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s TASK.kf [reps]\n", argv[0]);
        return 2;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    kf_graph *g = NULL;
    kf_error err = {0};
    if (kf_parse_file(argv[1], &g, &err) != KF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (!kf_interp_fusable(g)) {
        fprintf(stderr, "%s: not a pointwise graph over one shape\n", argv[1]);
        return 1;
    }
    const kf_shape *sh = &g->values[g->outputs[0]].shape;
    int64_t N = 1;
    for (int d = 0; d < sh->rank; d++) N *= sh->d[d];
    double **in = calloc((size_t)g->ninputs, sizeof *in), **out = calloc((size_t)g->noutputs, sizeof *out);
    for (int i = 0; i < g->ninputs; i++) {
        const kf_value *v = &g->values[g->inputs[i]];
        int64_t n = 1;
        for (int d = 0; d < v->shape.rank; d++) n *= v->shape.d[d];
        in[i] = malloc(sizeof **in * (size_t)n);
        for (int64_t e = 0; e < n; e++) {
            double u = unit();
            if (v->has_range) in[i][e] = v->lo + (v->hi - v->lo) * u;
            else if (e & 1) in[i][e] = (unit() < 0.5 ? -1 : 1) * ldexp(1.0 + u, (int)(unit() * 41) - 20);
            else in[i][e] = 8.0 * u - 4.0;
        }
    }
    for (int j = 0; j < g->noutputs; j++) out[j] = malloc(sizeof **out * CHUNK);
    double *t = malloc(sizeof *t * (size_t)reps), sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_s();
        for (int64_t lo = 0; lo < N; lo += CHUNK) {
            int64_t n = N - lo < CHUNK ? N - lo : CHUNK;
            int far = 0;
            /* each input's chunk from element lo, as set_pipe hands them */
            const double *ins[16];
            for (int i = 0; i < g->ninputs && i < 16; i++) {
                const kf_value *v = &g->values[g->inputs[i]];
                int whole = kf_shape_equal(&v->shape, sh);
                ins[i] = whole ? in[i] + lo : in[i];
            }
            if (kf_interp_run_span(g, lo, n, ins, out, &far, &err) != KF_OK) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            sink += out[0][0];
        }
        t[r] = cpu_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    printf("%s: %lld elements, %.2f ns/element (median of %d, min %.2f), %.3f s per set on one thread%s\n", argv[1],
           (long long)N, 1e9 * t[reps / 2] / (double)N, reps, 1e9 * t[0] / (double)N, t[reps / 2],
           sink == 12345.678 ? "!" : "");
    kf_graph_free(g);
    return 0;
}
