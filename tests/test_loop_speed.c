/*
 * The fast loop's timing rules (issue 30): with kf_verify_opts.stable_rel the timing run ends
 * once the median has settled instead of running until min_time_s, and without it the run
 * is as before. The kernel spins for 20 ms by the clock, so its times hardly vary. No time is
 * asserted: only how many reps the parent took.
 *
 * The cache flush between timed CPU calls: the parent evicts the task's buffers (every
 * timed call and the final one start on evicted buffers), and the runner no longer writes
 * a buffer of twice the cache, which the kernel below would see as a large mapped block
 * of the process's heap (it fails the call then).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__aarch64__)
#define CAN_EVICT 1
#else
#define CAN_EVICT 0
#endif

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"
#include "verify_once.h"

static const char *task = "task spin\ninput x: f32[1024]\noutput y = x * sigmoid(x)\n";
static const char *spin = "#include <math.h>\n#include <time.h>\n"
                          "static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);"
                          " return t.tv_sec + 1e-9 * t.tv_nsec; }\n"
                          "int kforge_kernel(void *const *a) {\n"
                          "    const float *x = a[0]; float *y = a[1];\n"
                          "    double t0 = now(); while (now() - t0 < 0.02) {}\n"
                          "    for (long i = 0; i < 1024; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
                          "    return 0;\n}\n";

/* 1 when the process holds a mapped heap block of 32 MiB or more (a flush buffer) */
static const char *heap_watch = "#include <malloc.h>\n"
                                "int kforge_kernel(void *const *a) {\n"
                                "    const float *x = a[0]; float *y = a[1];\n"
                                "    struct mallinfo2 m = mallinfo2();\n"
                                "    if (m.hblkhd >= ((size_t)32 << 20)) return 7;\n"
                                "    for (long i = 0; i < 1024; i++) y[i] = x[i] / (1.0f + __builtin_expf(-x[i]));\n"
                                "    return 0;\n}\n";

static kf_vresult timed_run_src(const char *src, double stable_rel, int64_t cache_bytes) {
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.seed = 3;
    o.threads = 1;
    o.time_it = 1;
    o.min_reps = 5;
    /* far more than the cap's 30 reps of 20 ms: the cap ends it without a stable stop (the
     * wall limit, and with it the run's budget, is wide for a loaded machine) */
    o.min_time_s = 100;
    o.max_reps = 30;
    o.wall_limit_s = 120;
    o.stable_rel = stable_rel;
    o.cache_bytes = cache_bytes;
    return verify_once(task, src, "loop-speed", o, 0);
}

static kf_vresult timed_run(double stable_rel) { return timed_run_src(spin, stable_rel, 0); }

Test(loop_speed, stable_median_ends_the_timing) {
    /* a wide stability band: the rule, not the machine's noise, is under test */
    kf_vresult r = timed_run(0.2);
    cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
    cr_assert(r.timed);
    cr_expect_geq(r.reps, 7, "at least min_reps + 2 reps, got %d", r.reps);
    cr_expect_lt(r.reps, 30, "the median of a 20 ms spin settles before the cap; %d reps (median %.3f ms, min %.3f, mean %.3f)",
                 r.reps, r.time_ms, r.time_min_ms, r.time_mean_ms);
}

Test(loop_speed, without_it_min_time_rules) {
    kf_vresult r = timed_run(0);
    cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
    cr_expect_eq(r.reps, 30, "fixed: until min_time or the cap; %d reps", r.reps);
}

Test(loop_speed, timed_calls_start_on_evicted_buffers) {
    /* 8 KiB of data under a 64 MiB cache: flushed before every timed call; the runner's
     * buffer would have been 128 MiB */
    kf_vresult r = timed_run_src(heap_watch, 0.2, 64ll << 20);
    cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
    cr_assert(r.timed);
    if (CAN_EVICT)
        cr_expect_geq(r.evicted, r.reps + 1, "every timed call and the final one: %d evicted, %d reps",
                      r.evicted, r.reps);
    else
        cr_expect_eq(r.evicted, 0);
}

Test(loop_speed, data_beyond_the_cache_is_not_flushed) {
    /* 8 KiB of data over a 4 KiB "cache": no flush, no eviction (as before) */
    kf_vresult r = timed_run_src(heap_watch, 0.2, 4096);
    cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
    cr_expect_eq(r.evicted, 0);
}

/* ---- the reference of a pointwise graph, chunk by chunk (kf_interp_fusable) ---- */

static kf_graph *parse(const char *src) {
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(src, "<test>", &g, &err), KF_OK, "%s", err.msg);
    return g;
}

/* kf_interp_run (chunk by chunk where fusable) against the node-by-node walk (the bounds
 * run never fuses): the same bits, and the same beyond-float32 verdict */
static int same_as_the_walk(const char *src, double scale) {
    kf_graph *g = parse(src);
    kf_error err = {0};
    double *in[4] = {0}, *a[4] = {0}, *b[4] = {0}, *bd[4] = {0};
    unsigned long long x = 12345;
    for (int i = 0; i < g->ninputs; i++) {
        int64_t n = kf_shape_numel(&g->values[g->inputs[i]].shape);
        in[i] = malloc(sizeof(double) * (size_t)n);
        for (int64_t e = 0; e < n; e++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            in[i][e] = scale * (0.05 + (double)(x >> 11) / 9007199254740992.0); /* (0.05, 1.05) */
        }
    }
    for (int j = 0; j < g->noutputs; j++) {
        int64_t n = kf_shape_numel(&g->values[g->outputs[j]].shape);
        a[j] = malloc(sizeof(double) * (size_t)n);
        b[j] = malloc(sizeof(double) * (size_t)n);
        bd[j] = malloc(sizeof(double) * (size_t)n);
    }
    int fa = -1, fb = -1;
    cr_assert_eq(kf_interp_run_checked(g, (const double *const *)in, a, NULL, &fa, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_interp_run_checked(g, (const double *const *)in, b, bd, &fb, &err), KF_OK, "%s", err.msg);
    cr_expect_eq(fa, fb, "beyond float32: %d chunked, %d walked", fa, fb);
    for (int j = 0; j < g->noutputs; j++) {
        int64_t n = kf_shape_numel(&g->values[g->outputs[j]].shape);
        cr_expect_eq(memcmp(a[j], b[j], sizeof(double) * (size_t)n), 0, "output %d differs", j);
        free(a[j]);
        free(b[j]);
        free(bd[j]);
    }
    for (int i = 0; i < g->ninputs; i++) free(in[i]);
    kf_graph_free(g);
    return fa;
}

static const char *swish_big = "task s\ninput x: f32[300, 1001]\noutput y = x * sigmoid(x)\n";
static const char *two_outputs = "task t\ninput x: f32[300, 1001]\ninput z: f32[300, 1001]\n"
                                 "a = log(x) + sqrt(x)\nb = rsqrt(x) * exp(neg(abs(z)))\n"
                                 "output y = a + b - square(z) * 0.5\noutput q = a * y\n";
static const char *one_elem = "task o\ninput x: f32[70000]\ninput s: f32[1]\noutput y = tanh(x * s) - 2.0\n";
static const char *huge = "task h\ninput x: f32[40000]\noutput y = x * 1e30 * 1e6\n";
/* broadcast graph inputs: a row, a column, a leading axis (rows of 1001: chunks of 16384
 * start mid-row) */
static const char *bcast = "task m\ninput x: f32[300, 1001]\ninput w: f32[1001]\ninput s: f32[300, 1]\n"
                           "p = pow(x, w)\nm = maximum(p, w)\nn = minimum(m, s)\n"
                           "output y = n / (x + 1.0) - w\n";
static const char *lead = "task l\ninput x: f32[3, 50, 700]\ninput b: f32[50, 1]\ninput c: f32[3, 1, 700]\n"
                          "output y = tanh(x + b) * c\n";

Test(loop_speed, pointwise_reference_chunk_by_chunk) {
    const char *fused[] = {swish_big, two_outputs, one_elem, huge, bcast, lead};
    for (int k = 0; k < 6; k++) {
        kf_graph *g = parse(fused[k]);
        cr_expect(kf_interp_fusable(g), "graph %d runs chunk by chunk", k);
        kf_graph_free(g);
        cr_expect_eq(same_as_the_walk(fused[k], 1.0), 0);
    }
    cr_expect_eq(same_as_the_walk(huge, 1e3), 1, "beyond float32 (2^124)");
    /* an intermediate of another shape (broadcast), a reduction: node by node */
    const char *walked[] = {"task b\ninput x: f32[64, 32]\ninput w: f32[32]\nt = exp(w)\noutput y = x * t\n",
                            "task r\ninput x: f32[64, 32]\noutput y = sum(x, axes=[1])\n"};
    for (int k = 0; k < 2; k++) {
        kf_graph *g = parse(walked[k]);
        cr_expect(!kf_interp_fusable(g), "graph %d walks node by node", k);
        kf_graph_free(g);
    }
}
