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
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "%s", err.msg);
    kf_backend *be = NULL;
    cr_assert_eq(kf_backend_open("cpu", &be, &err), KF_OK, "%s", err.msg);
    char wd[512];
    snprintf(wd, sizeof wd, "%s/test-work/loop-speed-%ld", KF_BUILD_DIR, (long)getpid());
    cr_assert_eq(kf_mkdirs(wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.workdir = wd;
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
    kf_verify_ctx *c = NULL;
    cr_assert_eq(kf_verify_ctx_new(g, &o, &c, &err), KF_OK, "%s", err.msg);
    kf_candidate cand;
    cr_assert_eq(kf_candidate_init(&cand, "cpu", src, NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    cr_assert_eq(kf_verify_candidate(c, be, &cand, &r, &err), KF_OK, "%s", err.msg);
    kf_candidate_clear(&cand);
    kf_verify_ctx_free(c);
    kf_backend_close(be);
    kf_graph_free(g);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", wd);
    cr_expect_eq(system(cmd), 0);
    return r;
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
