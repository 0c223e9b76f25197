/*
 * A CPU candidate's check calls in one runner process (issue 30): one call per input set,
 * each on its own freshly written set with poisoned outputs and fresh guards, checked in
 * full before the next, then the timing's calls in the same process. A failure names its
 * set; a hang costs one call's limit; with KFORGE_CHECK_PROCS=1 each set gets its own
 * process again. The kernels count their calls in a static, so they see which call of
 * their process they are in.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify_once.h"

static const char *task = "task swish\ninput x: f32[4099]\noutput y = x * sigmoid(x)\n";

#define HEAD                                                                                       \
    "#include <math.h>\n#include <stdio.h>\n#include <unistd.h>\n"                                 \
    "static int calls; static char seen[512];\n"                                                   \
    "static void good(const float *x, float *y) {\n"                                               \
    "    for (long i = 0; i < 4099; i++) y[i] = x[i] / (1.0f + expf(-x[i])); }\n"

/* wrong (every output halved) on its fourth call only */
static const char *wrong_on_4 = HEAD "int kforge_kernel(void *const *a) {\n"
                                     "    good(a[0], a[1]);\n"
                                     "    if (++calls == 4) for (long i = 0; i < 4099; i++) ((float *)a[1])[i] *= 0.5f;\n"
                                     "    return 0;\n}\n";

/* notes the pid of every call; fails its sixth (the last check call) saying them */
static const char *pids = HEAD "int kforge_kernel(void *const *a) {\n"
                               "    good(a[0], a[1]);\n"
                               "    size_t n = strlen(seen);\n"
                               "    snprintf(seen + n, sizeof seen - n, \" %ld\", (long)getpid());\n"
                               "    if (++calls == 6) { printf(\"PIDS%s\\n\", seen); fflush(stdout); return 3; }\n"
                               "    return 0;\n}\n";

/* hangs on its third call */
static const char *hang_on_3 = HEAD "int kforge_kernel(void *const *a) {\n"
                                    "    if (++calls == 3) for (;;) pause();\n"
                                    "    good(a[0], a[1]);\n"
                                    "    return 0;\n}\n";

static const char *honest = HEAD "int kforge_kernel(void *const *a) { good(a[0], a[1]); return 0; }\n";

static kf_vresult verify(const char *src, int time_it, double wall) {
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.seed = 11;
    o.threads = 1;
    o.time_it = time_it;
    o.min_time_s = 0.02;
    o.wall_limit_s = wall;
    return verify_once(task, src, "check-calls", o, 0);
}

Test(check_calls, a_failure_names_its_set) {
    kf_vresult r = verify(wrong_on_4, 1, 20);
    cr_assert_eq(r.status, KF_V_MISMATCH, "%s: %s", kf_vstatus_name(r.status), r.detail);
    cr_expect(strstr(r.detail, "set 3"), "the fourth call is set 3's: %s", r.detail);
    cr_expect_eq(r.sets_run, 4, "sets run %d", r.sets_run);
    cr_expect_eq(r.timed, 0);
}

Test(check_calls, one_process_for_the_check_calls) {
    kf_vresult r = verify(pids, 0, 20);
    cr_assert_eq(r.status, KF_V_KERNEL_ERROR, "%s: %s", kf_vstatus_name(r.status), r.detail);
    const char *p = strstr(r.detail, "PIDS ");
    cr_assert(p, "no pids in %s", r.detail);
    long v[6];
    cr_assert_eq(sscanf(p, "PIDS %ld %ld %ld %ld %ld %ld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]), 6, "%s", p);
    for (int i = 1; i < 6; i++) cr_expect_eq(v[i], v[0], "call %d in pid %ld, call 1 in %ld", i + 1, v[i], v[0]);
}

Test(check_calls, one_process_per_set_when_asked) {
    cr_assert_eq(setenv("KFORGE_CHECK_PROCS", "1", 1), 0);
    /* a process per set: no process has a sixth call, so the check passes */
    kf_vresult r = verify(pids, 0, 20);
    kf_vresult w = verify(wrong_on_4, 0, 20);
    unsetenv("KFORGE_CHECK_PROCS");
    cr_expect_eq(r.status, KF_V_OK, "%s: %s", kf_vstatus_name(r.status), r.detail);
    cr_expect_eq(w.status, KF_V_OK, "each set's process calls once: %s", w.detail);
}

Test(check_calls, a_hang_costs_one_call) {
    kf_vresult r = verify(hang_on_3, 1, 2);
    cr_assert_eq(r.status, KF_V_TIMEOUT, "%s: %s", kf_vstatus_name(r.status), r.detail);
    cr_expect(strstr(r.detail, "call 3"), "%s", r.detail);
}

Test(check_calls, honest_kernel_verified_and_timed) {
    kf_vresult r = verify(honest, 1, 20);
    cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
    cr_expect_eq(r.sets_run, KF_VERIFY_DEFAULT_SETS);
    cr_expect(r.timed);
    cr_expect_geq(r.reps, 5);
}
