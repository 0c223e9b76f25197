/*
 * Racing (issue 30, kf_verify_race): a candidate whose fastest timed rep is more than
 * KF_VERIFY_RACE_MARGIN times the best time so far ends its timing after min_reps reps,
 * "slower", as does one whose median is shown more than KF_VERIFY_RACE_MEDIAN_MARGIN times
 * the best; one that could still be the best, or any candidate with racing off, is timed
 * as before; and a raced timing keeps its final call checked in full. The kernels spin
 * 20 ms by the clock, far from both the 1 ms and the 1000 s "best" below, so the machine's
 * load cannot move the verdicts. No time is asserted: only reps, stop reasons and verdicts.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "verify_once.h"

static const char *task = "task spin\ninput x: f32[1024]\noutput y = x * sigmoid(x)\n";

#define SPIN_HEAD                                                                                  \
    "#include <math.h>\n#include <time.h>\n"                                                       \
    "static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);"             \
    " return t.tv_sec + 1e-9 * t.tv_nsec; }\n"

static const char *spin = SPIN_HEAD "int kforge_kernel(void *const *a) {\n"
                                    "    const float *x = a[0]; float *y = a[1];\n"
                                    "    double t0 = now(); while (now() - t0 < 0.02) {}\n"
                                    "    for (long i = 0; i < 1024; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
                                    "    return 0;\n}\n";

/* right for its process's first eight calls (the six check calls, the warm-up, the first
 * timed call), then it writes zeros: every later call of the timing run, the final one
 * included, is wrong */
static const char *turns = SPIN_HEAD "static int calls;\n"
                                     "int kforge_kernel(void *const *a) {\n"
                                     "    const float *x = a[0]; float *y = a[1];\n"
                                     "    double t0 = now(); while (now() - t0 < 0.02) {}\n"
                                     "    int ok = ++calls <= 8;\n"
                                     "    for (long i = 0; i < 1024; i++) y[i] = ok ? x[i] / (1.0f + expf(-x[i])) : 0.0f;\n"
                                     "    return 0;\n}\n";

/* 20 ms, but 100 ms on every fifth call: outliers far above the best, a median below it */
static const char *jumpy = SPIN_HEAD "static int calls;\n"
                                     "int kforge_kernel(void *const *a) {\n"
                                     "    const float *x = a[0]; float *y = a[1];\n"
                                     "    double t0 = now(), d = ++calls % 5 ? 0.02 : 0.1; while (now() - t0 < d) {}\n"
                                     "    for (long i = 0; i < 1024; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
                                     "    return 0;\n}\n";

static kf_vresult timed(const char *src, double best_s) {
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.seed = 5;
    o.threads = 1;
    o.time_it = 1;
    o.min_reps = 5;
    /* the cap (20 reps of 20 ms) ends an unraced timing; the wall limit is wide for a
     * loaded machine */
    o.min_time_s = 100;
    o.max_reps = 20;
    o.wall_limit_s = 120;
    return verify_once(task, src, "race", o, best_s);
}

Test(race, a_clear_loser_stops_after_min_reps) {
    kf_vresult r = timed(spin, 1e-3); /* 20 ms against a best of 1 ms */
    cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
    cr_assert(r.timed);
    cr_expect_str_eq(r.time_stop, "slower");
    cr_expect_eq(r.reps, 5, "min_reps, then the race ends it: %d reps", r.reps);
    cr_expect_gt(r.time_min_ms, 1e3 * KF_VERIFY_RACE_MARGIN * 1e-3, "its fastest rep %.3f ms", r.time_min_ms);
}

Test(race, a_little_slower_stops_by_its_median) {
    /* 20 ms against a best of 17 ms: its fastest rep is not 1.25x the best (21.25 ms would
     * be), but every rep is at least 20 ms (the spin waits that long), so from
     * KF_VERIFY_RACE_MEDIAN_REPS reps on the median's lower bound (the fastest of 10) is
     * above 1.05x the best. On a loaded machine the fastest-rep rule may end it sooner. */
    kf_vresult r = timed(spin, 17e-3);
    cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
    cr_expect_str_eq(r.time_stop, "slower");
    cr_expect(r.reps >= 5 && r.reps <= KF_VERIFY_RACE_MEDIAN_REPS, "%d reps, not the cap's 20", r.reps);
}

Test(race, outliers_do_not_race_a_possible_best) {
    /* a best of 25 ms against reps of 20 ms with every fifth at 100 ms: the median's lower
     * bound stays near 20 ms, so it is timed to the cap */
    kf_vresult r = timed(jumpy, 25e-3);
    cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
    cr_expect_str_eq(r.time_stop, "reps");
    cr_expect_eq(r.reps, 20, "to the cap: %d reps", r.reps);
}

Test(race, a_possible_best_is_timed_in_full) {
    kf_vresult r = timed(spin, 1000); /* a best it beats */
    cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
    cr_expect_str_eq(r.time_stop, "reps");
    cr_expect_eq(r.reps, 20, "to the cap: %d reps", r.reps);
}

Test(race, off_is_as_before) {
    const double offs[] = {0, -1, NAN, INFINITY};
    for (int k = 0; k < 4; k++) {
        kf_vresult r = timed(spin, offs[k]);
        cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
        cr_expect_str_eq(r.time_stop, "reps", "best %g", offs[k]);
        cr_expect_eq(r.reps, 20, "best %g: %d reps", offs[k], r.reps);
    }
}

Test(race, the_final_call_is_still_checked) {
    /* raced after min_reps, it still gets the final call, checked in full: caught there
     * (or at a random timed call checked before it) */
    kf_vresult r = timed(turns, 1e-3);
    cr_expect_eq(r.status, KF_V_MISMATCH, "a kernel wrong after its fourth call: %s (%s)",
                 kf_vstatus_name(r.status), r.detail);
    kf_vresult f = timed(turns, 0);
    cr_expect_eq(f.status, KF_V_MISMATCH, "unraced too: %s", kf_vstatus_name(f.status));
}
