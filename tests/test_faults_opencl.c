/*
 * The planted-fault suite re-run with OpenCL candidates on the first OpenCL device (PoCL
 * in CI): hand-written kernels, each with one known defect, must come back with the right
 * kf_vstatus and a detail that names the problem, and the test process must survive them.
 *
 * Task: swish y = x * sigmoid(x) on f32[1000003] (an odd size). Kernels are one template
 * with a fault statement spliced in after the correct store, launched with 1000064
 * work-items in groups of 64 (so the tail work-items must be masked off).
 *
 * Without an OpenCL device every test skips, saying why.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/platform.h"
#include "kforge/verify.h"

#define N 1000003

static const char *task = "task swish_odd\n"
                          "input x: f32[1000003]\n"
                          "output y = x * sigmoid(x)\n";

typedef struct fixture {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *ctx;
    kf_verify_opts o;
    char wd[512];
} fixture;

static int fx_open(fixture *f, double wall) {
    memset(f, 0, sizeof *f);
    kf_error err = {0};
    if (kf_backend_open("opencl", &f->b, &err) != KF_OK) {
        cr_skip_test("no OpenCL device: %s", err.msg);
        return 0;
    }
    kf_status st = kf_parse_string(task, "<test>", &f->g, &err);
    cr_assert_eq(st, KF_OK, "parse: %s", err.msg);
    snprintf(f->wd, sizeof f->wd, "%s/test-work/faults-opencl", KF_BUILD_DIR);
    cr_assert_eq(kf_mkdirs(f->wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts_default(&f->o);
    f->o.workdir = f->wd;
    f->o.seed = 4242;
    f->o.nsets = 2;
    f->o.wall_limit_s = wall;
    f->o.cpu_limit_s = 4 * wall;
    st = kf_verify_ctx_new(f->g, &f->o, &f->ctx, &err);
    cr_assert_eq(st, KF_OK, "ctx: %s", err.msg);
    return 1;
}

static void fx_close(fixture *f) {
    kf_verify_ctx_free(f->ctx);
    kf_backend_close(f->b);
    kf_graph_free(f->g);
}

static kf_vresult run_src(fixture *f, const char *src) {
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "opencl", src, NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    kf_status st = kf_verify_candidate(f->ctx, f->b, &c, &r, &err);
    cr_assert_eq(st, KF_OK, "the check could not be carried out: %s", err.msg);
    kf_candidate_clear(&c);
    if (getenv("KF_TEST_VERBOSE"))
        fprintf(stderr, "[%s] %s (%.2f s)%s%.4g ms (host %.4g ms; gap %.4g ms, wait %.4g ms, "
                "ping %.4g ms, allowed %.4g ms)\n", kf_vstatus_name(r.status), r.detail,
                r.run_wall_s, r.timed ? "; median " : "", r.timed ? r.time_ms : 0.0,
                r.time_host_ms, r.time_gap_ms, r.time_wait_ms, r.time_ping_ms, r.time_allow_ms);
    return r;
}

/* The swish kernel with `fault` spliced in after the guarded store; `launch` overrides
 * the launch line when non-NULL. */
static char *kernel(const char *fault, const char *launch) {
    char *s = NULL;
    int n = asprintf(&s,
                     "%s\n"
                     "__kernel void swish(__global const float *restrict x,\n"
                     "                    __global float *restrict y) {\n"
                     "    int i = (int)get_global_id(0);\n"
                     "    if (i < %d) y[i] = x[i] / (1.0f + exp(-x[i]));\n"
                     "    %s\n"
                     "}\n",
                     launch ? launch : "// kforge:launch swish global=1000064 local=64 args=0,1",
                     N, fault ? fault : "");
    cr_assert(n > 0);
    return s;
}

static kf_vresult run_fault(fixture *f, const char *fault, const char *launch) {
    char *src = kernel(fault, launch);
    kf_vresult r = run_src(f, src);
    free(src);
    return r;
}

#define EXPECT(r, st, needle)                                                                     \
    do {                                                                                          \
        cr_assert_eq((r).status, (st), "status %s, want %s: %s", kf_vstatus_name((r).status),    \
                     kf_vstatus_name(st), (r).detail);                                            \
        const char *nd_ = (needle);                                                               \
        if (nd_) cr_assert(strstr((r).detail, nd_), "detail lacks '%s': %s", nd_, (r).detail);    \
    } while (0)

Test(faults_opencl, correct_is_ok_and_timed) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    f.o.time_it = 1;
    kf_verify_ctx_free(f.ctx);
    kf_error err = {0};
    cr_assert_eq(kf_verify_ctx_new(f.g, &f.o, &f.ctx, &err), KF_OK, "%s", err.msg);
    kf_vresult r = run_fault(&f, NULL, NULL);
    EXPECT(r, KF_V_OK, NULL);
    cr_assert_eq(r.sets_run, 2);
    cr_assert(r.timed && r.time_ms > 0 && r.reps >= 1, "timed %d, %.4f ms", r.timed, r.time_ms);
    fx_close(&f);
}

Test(faults_opencl, unmasked_tail_writes_past_the_end) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    /* every work-item stores, including the 61 past the end */
    kf_vresult r = run_fault(&f, "if (i >= 1000003) y[i] = 0.0f;", NULL);
    EXPECT(r, KF_V_OOB_WRITE, "guard");
    fx_close(&f);
}

Test(faults_opencl, writes_before_the_start) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    kf_vresult r = run_fault(&f, "if (i == 0) y[-3] = 1.0f;", NULL);
    EXPECT(r, KF_V_OOB_WRITE, "before");
    fx_close(&f);
}

Test(faults_opencl, too_few_work_items_leaves_elements_unwritten) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    kf_vresult r = run_fault(&f, NULL, "// kforge:launch swish global=999936 local=64 args=0,1");
    EXPECT(r, KF_V_UNWRITTEN, NULL);
    fx_close(&f);
}

Test(faults_opencl, one_wrong_element) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    kf_vresult r = run_fault(&f, "if (i == 777777) y[i] = x[i] + 1.0f;", NULL);
    EXPECT(r, KF_V_MISMATCH, "777777");
    fx_close(&f);
}

Test(faults_opencl, overwrites_its_input) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    kf_vresult r = run_fault(&f, "if (i == 5) ((__global float *)x)[i] = 0.5f;", NULL);
    EXPECT(r, KF_V_INPUT_MODIFIED, NULL);
    fx_close(&f);
}

Test(faults_opencl, hang_is_killed) {
    fixture f;
    if (!fx_open(&f, 3)) return;
    /* the verdict is a limit's, so a limit cut it (no bound on time: a loaded machine) */
    kf_vresult r = run_fault(&f, "if (i == 0) { volatile int k = 1; while (k) { } }", NULL);
    cr_assert(r.status == KF_V_TIMEOUT || r.status == KF_V_CPU_LIMIT, "status %s: %s",
              kf_vstatus_name(r.status), r.detail);
    fx_close(&f);
}

Test(faults_opencl, build_failure_reports_the_log) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    kf_vresult r = run_fault(&f, "y[i] = undefined_thing;", NULL);
    EXPECT(r, KF_V_COMPILE_ERROR, "undefined_thing");
    fx_close(&f);
}

Test(faults_opencl, plan_names_a_missing_kernel) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    kf_vresult r = run_fault(&f, NULL, "// kforge:launch swoosh global=1000064 local=64 args=0,1");
    EXPECT(r, KF_V_COMPILE_ERROR, "swoosh");
    fx_close(&f);
}

Test(faults_opencl, work_group_too_large_for_the_device) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    char launch[128];
    long wg = 1;
    while (wg <= f.b->info.max_wg) wg *= 2;
    snprintf(launch, sizeof launch, "// kforge:launch swish global=%ld local=%ld args=0,1",
             wg * ((N + wg - 1) / wg), wg);
    kf_vresult r = run_fault(&f, NULL, launch);
    cr_assert(r.status == KF_V_COMPILE_ERROR || r.status == KF_V_CRASH, "status %s: %s",
              kf_vstatus_name(r.status), r.detail);
    cr_assert(strstr(r.detail, "work") || strstr(r.detail, "WORK"), "detail: %s", r.detail);
    fx_close(&f);
}

Test(faults_opencl, no_launch_plan) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    kf_vresult r = run_fault(&f, NULL, "// (no plan)");
    EXPECT(r, KF_V_COMPILE_ERROR, "kforge:launch");
    fx_close(&f);
}

Test(faults_opencl, survives_faults_in_sequence_then_verifies) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    const char *faults[] = {"if (i >= 1000003) y[i] = 0.0f;", "y[i] = nope;",
                            "if (i == 1) y[i] = NAN;"};
    kf_vstatus want[] = {KF_V_OOB_WRITE, KF_V_COMPILE_ERROR, KF_V_MISMATCH};
    for (int k = 0; k < 3; k++) {
        kf_vresult r = run_fault(&f, faults[k], NULL);
        EXPECT(r, want[k], NULL);
    }
    kf_vresult r = run_fault(&f, NULL, NULL);
    EXPECT(r, KF_V_OK, NULL);
    fx_close(&f);
}

/* A plan that does not parse is the candidate's compile error, found once, before the
 * build, with its line and reason, in the words the backend's compile used for it; the
 * candidate carries the error (its readers do not parse again). An arg past the task's
 * buffers is such an error too. */
Test(faults_opencl, bad_plan_fails_once_with_the_line) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    char *src = kernel(NULL, "// kforge:launch swish global=1000064 local=64 args=0,7");
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "opencl", src, NULL, &err), KF_OK, "%s", err.msg);
    free(src);
    kf_vresult r;
    cr_assert_eq(kf_verify_candidate(f.ctx, f.b, &c, &r, &err), KF_OK, "%s", err.msg);
    EXPECT(r, KF_V_COMPILE_ERROR, "task buffer");
    const kf_launch_plan *p;
    kf_error pe = {0};
    cr_assert_eq(kf_candidate_plan(&c, 2, &p, &pe), KF_ERR_PARSE);
    cr_assert_eq(pe.line, 1);
    char want[2200];
    snprintf(want, sizeof want, "%s\nkforge: bad launch plan: %s\n", pe.msg, pe.msg);
    cr_assert_str_eq(r.detail, want);
    kf_candidate_clear(&c);
    fx_close(&f);
}

/* ---- issue 24 on a device: timed calls checked, the device's times checked ---- */

static void timed_opts(fixture *f, int max_reps) {
    f->o.time_it = 1;
    f->o.min_reps = 5;
    f->o.max_reps = max_reps;
    f->o.min_time_s = 0.02;
    kf_verify_ctx_free(f->ctx);
    kf_error err = {0};
    cr_assert_eq(kf_verify_ctx_new(f->g, &f->o, &f->ctx, &err), KF_OK, "%s", err.msg);
}

/* An honest kernel, timed: ok, and its device time lies inside kforge's own clock around
 * the calls (time_host_ms), which is what the checks below rely on. */
Test(faults_opencl, honest_device_time_lies_inside_the_parents_clock) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    timed_opts(&f, 20);
    kf_vresult r = run_fault(&f, NULL, NULL);
    EXPECT(r, KF_V_OK, NULL);
    cr_assert(r.timed && r.time_ms > 0 && r.time_host_ms > 0, "timed %d, %.4f ms, host %.4f ms",
              r.timed, r.time_ms, r.time_host_ms);
    cr_assert(r.time_ms <= r.time_host_ms * 1.01 + 0.05, "device %.4f ms, host %.4f ms",
              r.time_ms, r.time_host_ms);
    fx_close(&f);
}

/* A swish that is correct until `idle` (an OpenCL condition on the scratch buffer memo)
 * holds and does nothing afterwards; `mark` (the body of a second launch) keeps its count.
 * memo is device memory the runner keeps for the module's life, so across calls, and
 * uninitialised. Returns the verifier's result for it, the fixture timed. */
static kf_vresult run_memo_swish(fixture *f, const char *idle, const char *mark) {
    timed_opts(f, 20);
    char src[2048];
    snprintf(src, sizeof src,
             "// kforge:scratch memo 64\n"
             "// kforge:launch swish global=1000064 local=64 args=0,1,memo\n"
             "// kforge:launch mark global=1 local=1 args=memo\n"
             "__kernel void swish(__global const float *restrict x, __global float *restrict y,\n"
             "                    __global int *memo) {\n"
             "    if (%s) return;\n"
             "    int i = (int)get_global_id(0);\n"
             "    if (i < %d) y[i] = x[i] / (1.0f + exp(-x[i]));\n"
             "}\n"
             "__kernel void mark(__global int *memo) { %s }\n",
             idle, N, mark);
    kf_vresult r = run_src(f, src);
    cr_assert(r.status == KF_V_UNWRITTEN || r.status == KF_V_MISMATCH, "status %s: %s",
              kf_vstatus_name(r.status), r.detail);
    return r;
}

/* Correct on its first call in a process, idle afterwards. A device candidate's check sets
 * run in one process, one call each (issue 30), so the second set's call already finds the
 * poison unwritten; were each set a process of its own, only a timing run whose calls are
 * checked would catch it (it does: the CPU's test_cheats). Before issue 24 reached devices,
 * the timing run launched the plan again and again on the same buffers and compared
 * nothing. */
Test(faults_opencl, correct_once_then_idle_via_scratch_is_caught) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    kf_vresult r = run_memo_swish(&f, "memo[0] == 0x5eed1234", "memo[0] = 0x5eed1234;");
    cr_assert(r.bad_set >= 1, "caught on set %d (the first call is correct): %s", r.bad_set, r.detail);
    fx_close(&f);
}

/* The same kernel made patient: correct on the first four calls of any process, idle
 * afterwards. The check run's calls (one per set, two sets here) all come before that, so
 * the checks pass; the timing run's calls are checked like them (random ones and the last,
 * on rotating sets with poisoned outputs) and catch it. */
Test(faults_opencl, correct_for_the_check_calls_then_idle_is_caught_in_timing) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    kf_vresult r = run_memo_swish(&f, "memo[1] == 0x5eed1234 && memo[0] >= 4",
                                  "if (memo[1] != 0x5eed1234) { memo[1] = 0x5eed1234; memo[0] = 1; }"
                                  " else memo[0] = memo[0] + 1;");
    cr_assert(strstr(r.detail, "timing run"), "caught outside the timing run: %s", r.detail);
    fx_close(&f);
}

/* With one input set every timed call is on the same set, so the runner is told to keep
 * the inputs on the device and only to refresh the outputs' guards and poison them there
 * ('j', issue 30). A kernel correct on its first call and idle afterwards must still find
 * its outputs poisoned: left as the last call wrote them they would be correct. */
Test(faults_opencl, idle_on_repeats_of_one_set_finds_its_outputs_poisoned) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    f.o.nsets = 1;
    kf_vresult r = run_memo_swish(&f, "memo[0] == 0x5eed1234", "memo[0] = 0x5eed1234;");
    cr_assert_eq(r.status, KF_V_UNWRITTEN, "status %s: %s", kf_vstatus_name(r.status), r.detail);
    cr_assert(strstr(r.detail, "timing run"), "caught outside the timing run: %s", r.detail);
    fx_close(&f);
}

/* The same kernel under a slow plan: ~64 passes over each element, tens of ms a call, so
 * that a forged device time well under the real one is outside the overheads' allowance. */
static const char *slow_kernel(void) {
    static char src[1024];
    snprintf(src, sizeof src,
             "// kforge:launch swish global=1000064 local=64 args=0,1\n"
             "__kernel void swish(__global const float *restrict x, __global float *restrict y) {\n"
             "    int i = (int)get_global_id(0);\n"
             "    if (i >= %d) return;\n"
             "    float v = x[i];\n"
             "    for (int k = 0; k < 64; k++) v = v * 0.5f + x[i] * 0.5f;\n"
             "    y[i] = v / (1.0f + exp(-v));\n"
             "}\n",
             N);
    return src;
}

/* The device's time of each call comes from the runner, a process the candidate shares
 * (a host-form candidate's code, or a device kernel writing the runner's memory under
 * PoCL). kforge-runner-forge is that runner with the time forged; whatever it reports,
 * kforge may verify only a time its own clock around the calls allows. */
static kf_vresult forged(fixture *f, const char *how, const char *src) {
    cr_assert_eq(setenv("KF_TEST_FORGE_DEVICE_TIME", how, 1), 0);
    f->o.runner = KF_BUILD_DIR "/kforge-runner-forge";
    timed_opts(f, 12);
    kf_vresult r = run_src(f, src);
    unsetenv("KF_TEST_FORGE_DEVICE_TIME");
    return r;
}

Test(faults_opencl, forged_nan_or_zero_device_time_is_impossible) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    char *src = kernel(NULL, NULL);
    kf_vresult r = forged(&f, "nan", src);
    EXPECT(r, KF_V_IMPOSSIBLE, "positive finite");
    r = forged(&f, "zero", src);
    EXPECT(r, KF_V_IMPOSSIBLE, "positive finite");
    free(src);
    fx_close(&f);
}

Test(faults_opencl, device_time_over_the_parents_clock_is_impossible) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    char *src = kernel(NULL, NULL);
    kf_vresult r = forged(&f, "over", src);
    EXPECT(r, KF_V_IMPOSSIBLE, "cannot exceed");
    free(src);
    fx_close(&f);
}

Test(faults_opencl, device_time_far_under_the_parents_clock_is_impossible) {
    fixture f;
    if (!fx_open(&f, 60)) return;
    kf_vresult r = forged(&f, "tiny", slow_kernel());
    EXPECT(r, KF_V_IMPOSSIBLE, "kforge's own clock");
    /* the control: the same runner, nothing forged, the same slow kernel verifies */
    r = forged(&f, "none", slow_kernel());
    EXPECT(r, KF_V_OK, NULL);
    fx_close(&f);
}

/* Under-reporting by half: the old bound (the median device time at least half the
 * shortest host time less 5 ms) let it pass whatever the kernel's length (half of the
 * device time is at least half the host time less 5 ms while the overheads are under
 * 10 ms); the gap between kforge's clock and the device's (half of a call of hundreds of
 * ms here), less what the runner and kforge waited for a CPU, is far beyond what an empty
 * round trip with the runner and a launch explain. */
Test(faults_opencl, device_time_under_reported_by_half_is_impossible) {
    fixture f;
    if (!fx_open(&f, 60)) return;
    kf_vresult r = forged(&f, "half", slow_kernel());
    EXPECT(r, KF_V_IMPOSSIBLE, "beyond the time the runner and kforge waited for a CPU");
    cr_expect_gt(r.time_ping_ms, 0);
    cr_expect_geq(r.time_wait_ms, 0, "the waits were read (schedstat)");
    fx_close(&f);
}

/* The honest controls of the bound, a short kernel and a long one, through the same
 * runner with nothing forged: both verify, with the gap, the wait, the ping and the
 * allowance recorded (the design notes' measurements; KF_TEST_VERBOSE=1 prints them). On
 * a loaded machine an honest short kernel's calls take 10-14 ms more than its device time
 * (measured on the 2-vCPU VM at load 13): the waits must explain it, or this fails. */
Test(faults_opencl, honest_device_times_within_the_allowance) {
    fixture f;
    if (!fx_open(&f, 60)) return;
    char *fast = kernel(NULL, NULL);
    const char *srcs[2] = {fast, slow_kernel()};
    for (int k = 0; k < 2; k++) {
        kf_vresult r = forged(&f, "none", srcs[k]);
        EXPECT(r, KF_V_OK, NULL);
        cr_expect_gt(r.time_allow_ms, 0, "the allowance is recorded");
        cr_expect_gt(r.time_ping_ms, 0, "the pings were timed");
        cr_expect_geq(r.time_wait_ms, 0, "the waits were read (schedstat)");
        /* the absolute part is the platform table's for opencl (PoCL), not CUDA's */
        cr_expect_float_eq(r.time_allow_ms - 8.0 * r.time_ping_ms,
                           kf_platform_find("opencl")->dev_gap_abs_ms, 1e-6, "allowance %.4f ms",
                           r.time_allow_ms);
    }
    free(fast);
    fx_close(&f);
}

/* The roofline floor holds on a device as on the CPU: a floor no kernel can reach (ten
 * seconds for a call) makes an honest kernel's time impossible. */
Test(faults_opencl, device_time_under_the_floor_is_impossible) {
    fixture f;
    if (!fx_open(&f, 30)) return;
    f.o.floor_s = 10;
    timed_opts(&f, 8);
    kf_vresult r = run_fault(&f, NULL, NULL);
    EXPECT(r, KF_V_IMPOSSIBLE, "roofline floor");
    fx_close(&f);
}
