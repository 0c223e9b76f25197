/*
 * The planted-cheat suite (issue 24): CPU kernels that compute the right answer but try to
 * fool the verifier's timing or outlive their run, one per mechanism of
 * docs/kernel-contract.md's threat model, each written from the mechanism (what any kernel
 * could do), not from a particular exploit; and honest kernels that must still verify.
 *
 * A cheat passes when kforge believes it: a forged time is reported, a file survives
 * from one run into the next, a process outlives the run, more CPUs than --threads are
 * used. Each test states what the verifier must do instead. No test asserts a time bound.
 *
 * Task: swish y = x * sigmoid(x) on f32[65537] (small: these tests are about the runs, not
 * the arithmetic).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <glob.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kforge/arch.h"
#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"
#include "verify/runproto.h"

#define N 65537
/* A candidate's first calls in its process are its check calls, one per input set (the
 * default six; KFORGE_CHECK_PROCS=1: one process per set, so a timing run's calls are the
 * only ones past the first): a cheat below stays honest for them, so that what it does
 * afterwards meets the timing run's checks. */
#define HONEST "6"
_Static_assert(KF_VERIFY_DEFAULT_SETS == 6, "HONEST is the default set count");

static const char *task = "task swish_cheat\n"
                          "input x: f32[65537]\n"
                          "output y = x * sigmoid(x)\n";

typedef struct fixture {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *ctx;
    kf_verify_opts o;
    char wd[512];
} fixture;

static void fx_open(fixture *f, void (*tweak)(kf_verify_opts *)) {
    memset(f, 0, sizeof *f);
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<test>", &f->g, &err), KF_OK, "parse: %s", err.msg);
    cr_assert_eq(kf_backend_open("cpu", &f->b, &err), KF_OK, "backend: %s", err.msg);
    snprintf(f->wd, sizeof f->wd, "%s/test-work/cheats-%ld", KF_BUILD_DIR, (long)getpid());
    cr_assert_eq(kf_mkdirs(f->wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts_default(&f->o);
    f->o.workdir = f->wd;
    f->o.seed = 4242;
    f->o.threads = 2;
    f->o.wall_limit_s = 15;
    f->o.cpu_limit_s = 30;
    f->o.mem_limit = 512ll << 20;
    if (tweak) tweak(&f->o);
    cr_assert_eq(kf_verify_ctx_new(f->g, &f->o, &f->ctx, &err), KF_OK, "ctx: %s", err.msg);
}

static void fx_close(fixture *f) {
    kf_verify_ctx_free(f->ctx);
    kf_backend_close(f->b);
    kf_graph_free(f->g);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->wd);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", f->wd);
}

static kf_vresult run_src(fixture *f, const char *src) {
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "cpu", src, NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    kf_status st = kf_verify_candidate(f->ctx, f->b, &c, &r, &err);
    kf_candidate_clear(&c);
    cr_assert_eq(st, KF_OK, "verify could not run: %s (%s)", err.msg, r.detail);
    if (getenv("KF_TEST_VERBOSE"))
        fprintf(stderr, "[%s] %s (%.2f s)%s%.4g ms; cpu %.3f s in %.3f s running\n",
                kf_vstatus_name(r.status), r.detail, r.run_wall_s, r.timed ? "; median " : "",
                r.timed ? r.time_ms : 0.0, r.timing_cpu_s, r.timing_run_s);
    return r;
}

static void expect(const kf_vresult *r, kf_vstatus want, const char *phrase) {
    cr_assert_eq(r->status, want, "status %s, want %s; detail: %s", kf_vstatus_name(r->status),
                 kf_vstatus_name(want), r->detail);
    if (phrase) cr_assert(strstr(r->detail, phrase), "detail lacks '%s': %s", phrase, r->detail);
}

static void timed(kf_verify_opts *o) {
    o->time_it = 1;
    o->min_reps = 5;
    o->min_time_s = 0.02;
    o->max_reps = 40;
    /* as kforge synth times (issue 30): the run may end early on a stable median, and every
     * cheat must still be caught */
    o->stable_rel = 0.01;
}

static void one_thread(kf_verify_opts *o) { o->threads = 1; }

static char srcbuf[16384];

/* The output's data offset in the region (the control and live pages, the input's guard,
 * data and guard, the output's guard): the kernels below find the region from args[1], the
 * output, whose place does not depend on the call's input set (with resident input sets,
 * args[0] is the call's set's slot; runproto.h 'G'). */
static size_t out_off(size_t ctl_size) {
    return kf_run_round_up(ctl_size + KF_RUN_PAGE + KF_RUN_GUARD + 4 * (uint64_t)N + KF_RUN_GUARD, KF_RUN_ALIGN) +
           KF_RUN_GUARD;
}

/* A correct swish kernel with `globals` at file scope and `pre` run before the loop. */
static const char *swish(const char *globals, const char *pre) {
    snprintf(srcbuf, sizeof srcbuf,
             "#define _GNU_SOURCE\n#include <errno.h>\n#include <fcntl.h>\n#include <math.h>\n#include <sched.h>\n"
             "#include <signal.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
             "#include <string.h>\n#include <sys/mman.h>\n#include <sys/prctl.h>\n"
             "#include <sys/stat.h>\n#include <unistd.h>\n"
             "#define N %dL\n"
             "%s\n"
             "int kforge_kernel(void *const *args) {\n"
             "    const float *x = args[0];\n"
             "    float *y = args[1];\n"
             "    { %s }\n"
             "    #pragma omp parallel for schedule(static)\n"
             "    for (long i = 0; i < N; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
             "    return 0;\n"
             "}\n",
             N, globals, pre);
    return srcbuf;
}

/* ---- 1. a time that is NaN, zero, negative or under the floor is rejected ---- */

/* The runner's results live in the shared control page, which the kernel's process can
 * map writable again. An exit handler planted by the kernel runs after the runner wrote
 * its times and overwrites them. Whatever kforge then reports as a verified time must be
 * a positive finite number. */
static const char *forge_times(const char *value) {
    static char globals[2048], pre[512];
    size_t ctl_size = kf_run_round_up(sizeof(kf_run_ctl), KF_RUN_PAGE);
    /* the region found from the output (out_off) */
    snprintf(globals, sizeof globals,
             "static char *g_base;\n"
             "static void forge(void) {\n"
             "    mprotect(g_base, %zu, PROT_READ | PROT_WRITE);\n"
             "    int32_t reps = *(int32_t *)(g_base + %zu);\n"
             "    double *t = (double *)(g_base + %zu);\n"
             "    for (int32_t i = 0; i < reps && i < %d; i++) t[i] = %s;\n"
             "}\n",
             ctl_size, offsetof(kf_run_ctl, reps), offsetof(kf_run_ctl, times), KF_RUN_MAX_REPS,
             value);
    snprintf(pre, sizeof pre,
             "static int planted; if (!planted) { planted = 1; g_base = (char *)args[1] - %zu;"
             " atexit(forge); }",
             out_off(ctl_size));
    return swish(globals, pre);
}

static void assert_time_believable(const kf_vresult *r, const char *what) {
    if (r->status == KF_V_OK) {
        cr_assert_eq(r->timed, 1, "%s: ok but not timed", what);
        cr_assert(r->time_ms > 0 && isfinite(r->time_ms) && r->time_min_ms > 0 &&
                      isfinite(r->time_min_ms),
                  "%s: verified with a time of %g ms (min %g ms)", what, r->time_ms, r->time_min_ms);
    } else {
        cr_assert_eq(r->status, KF_V_IMPOSSIBLE, "%s: status %s: %s", what,
                     kf_vstatus_name(r->status), r->detail);
    }
}

Test(cheats, forged_nan_time_is_never_reported) {
    fixture f;
    fx_open(&f, timed);
    kf_vresult r = run_src(&f, forge_times("NAN"));
    assert_time_believable(&r, "NaN times");
    fx_close(&f);
}

Test(cheats, forged_zero_and_negative_times_are_never_reported) {
    fixture f;
    fx_open(&f, timed);
    kf_vresult r = run_src(&f, forge_times("0.0"));
    assert_time_believable(&r, "zero times");
    r = run_src(&f, forge_times("-1e-3"));
    assert_time_believable(&r, "negative times");
    fx_close(&f);
}

/* `kforge verify --time` places the time against the roofline floor, as synth does: with a
 * calibration that says this machine moves 1 MB/s, no kernel can do the task's 0.5 MB in
 * under half a second, so an honest kernel's time is `impossible`. (The calibration is
 * planted in a private cache directory; nothing here depends on the machine's speed.) */
Test(cheats, verify_cli_sets_the_roofline_floor) {
    char dir[] = "/tmp/kf_test_cheats_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cache[600], taskf[600], kern[600], cmd[3000];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    cr_assert_eq(setenv("KFORGE_CACHE_DIR", cache, 1), 0);
    kf_backend *b = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_backend_open("cpu", &b, &err), KF_OK, "%s", err.msg);
    kf_ceilings c;
    memset(&c, 0, sizeof c);
    snprintf(c.device_key, sizeof c.device_key, "cpu|%s|1", b->info.name);
    kf_backend_close(b);
    c.measured = 1;
    c.threads = 1;
    c.copy_gbs = c.read_gbs = c.write_gbs = 1e-3;
    c.peak_gflops_f32 = c.peak_gflops_f64 = 1e-3;
    time_t now = time(NULL);
    strftime(c.when, sizeof c.when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cr_assert_eq(kf_arch_save(&c, &err), KF_OK, "%s", err.msg);
    snprintf(taskf, sizeof taskf, "%s/t.kf", dir);
    snprintf(kern, sizeof kern, "%s/k.c", dir);
    FILE *tf = fopen(taskf, "w");
    fputs(task, tf);
    fclose(tf);
    FILE *kf = fopen(kern, "w");
    fputs(swish("", ""), kf);
    fclose(kf);
    snprintf(cmd, sizeof cmd, "%s/kforge verify '%s' '%s' --time --threads 1 --seed 5 2>&1",
             KF_BUILD_DIR, taskf, kern);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char out[8192];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int rc = pclose(p);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "exit status %d, output:\n%s", rc, out);
    cr_assert(strstr(out, "impossible") && strstr(out, "roofline floor"), "output:\n%s", out);
}

/* ---- 3. times are taken outside the kernel's process; nothing runs after the last call ---- */

/* The kernel's process can write anything the runner would report: here, on its second
 * call past its check calls (HONEST: a timing run's), complete results with a time
 * of 123.456 ms, then exit(0) as a finished runner would. A process that did not finish
 * its calls must not verify. */
Test(cheats, forged_results_and_exit_are_not_believed) {
    fixture f;
    fx_open(&f, timed);
    char globals[64] = "", pre[2048];
    size_t ctl_size = kf_run_round_up(sizeof(kf_run_ctl), KF_RUN_PAGE);
    snprintf(pre, sizeof pre,
             "static int calls; if (++calls == " HONEST " + 1) {\n"
             "  char *base = (char *)args[1] - %zu;\n"
             "  mprotect(base, %zu, PROT_READ | PROT_WRITE);\n"
             "  for (long i = 0; i < N; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
             "  *(int32_t *)(base + %zu) = 0;\n"          /* kernel_rc */
             "  *(int32_t *)(base + %zu) = 5;\n"          /* reps */
             "  for (int i = 0; i < 5; i++) ((double *)(base + %zu))[i] = 0.123456;\n"
             "  *(int32_t *)(base + %zu) = 1;\n"          /* done */
             "  *(volatile int32_t *)(base + %zu) = %d;\n" /* live stage: DONE */
             "  _exit(0);\n"
             "}\n",
             out_off(ctl_size), ctl_size, offsetof(kf_run_ctl, kernel_rc),
             offsetof(kf_run_ctl, reps), offsetof(kf_run_ctl, times), offsetof(kf_run_ctl, done),
             ctl_size + offsetof(kf_run_live, stage), (int)KF_STAGE_DONE);
    kf_vresult r = run_src(&f, swish(globals, pre));
    cr_assert_neq(r.status, KF_V_OK, "verified with the forged results (%g ms)", r.time_ms);
    expect(&r, KF_V_CRASH, "timing run");
    fx_close(&f);
}

/* Exit handlers and destructors of the kernel run, in a runner that exits normally, after
 * the last call was measured and its results written; one that touches an input (here)
 * could as well finish the outputs or rewrite the times. The runner is killed as soon as
 * its last call has returned, so none of them runs. */
Test(cheats, nothing_of_the_kernel_runs_after_its_last_call) {
    fixture f;
    fx_open(&f, timed);
    kf_vresult r = run_src(&f, swish(
        "static float *g_x;\n"
        "static void late(void) { if (g_x) g_x[7] += 1.0f; }\n"
        "__attribute__((destructor)) static void late_dtor(void) { if (g_x) g_x[8] += 1.0f; }\n",
        "static int planted; if (!planted) { planted = 1; g_x = (float *)args[0]; atexit(late); }"));
    expect(&r, KF_V_OK, NULL);
    cr_assert_eq(r.timed, 1);
    fx_close(&f);
}

/* The runner is linked with immediate binding and full RELRO: no lazily bound GOT slot
 * (clock_gettime, write) for a kernel to patch. */
Test(cheats, runner_is_linked_now_and_relro) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "readelf -d '%s/kforge-runner' | grep -q 'BIND_NOW\\|Flags:.* NOW' && "
             "readelf -lW '%s/kforge-runner' | grep -q GNU_RELRO",
             KF_BUILD_DIR, KF_BUILD_DIR);
    if (system("command -v readelf >/dev/null 2>&1") != 0) cr_skip_test("no readelf");
    cr_assert_eq(system(cmd), 0, "kforge-runner lacks BIND_NOW or GNU_RELRO");
}

/* ---- 2. timed calls are checked like verification calls; 5. outputs read at return ---- */

/* Correct on its check calls (HONEST), then nothing: the
 * outputs of the calls that are timed must be checked too. */
Test(cheats, correct_once_then_idle_is_caught) {
    fixture f;
    fx_open(&f, timed);
    kf_vresult r = run_src(&f, swish("", "static int calls; if (++calls > " HONEST ") return 0;"));
    cr_assert_neq(r.status, KF_V_OK, "verified while skipping the work of every timed call (%g ms)",
                  r.time_ms);
    expect(&r, KF_V_UNWRITTEN, "timing run");
    fx_close(&f);
}

/* Memoised on the input pointer: past its check calls (HONEST), copies its last result as
 * long as args[0] is the same buffer. The same buffer must not mean the same inputs. */
Test(cheats, memo_on_buffer_pointer_is_caught) {
    fixture f;
    fx_open(&f, timed);
    kf_vresult r = run_src(&f, swish(
        "static const void *memo_in; static float memo_out[N]; static int calls;\n",
        "if (++calls > " HONEST " && memo_in == args[0]) { memcpy(y, memo_out, sizeof memo_out); return 0; }\n"
        "for (long i = 0; i < N; i++) memo_out[i] = x[i] / (1.0f + expf(-x[i]));\n"
        "memo_in = args[0];\n"));
    cr_assert_neq(r.status, KF_V_OK, "verified replaying its first result (%g ms)", r.time_ms);
    expect(&r, KF_V_MISMATCH, "timing run");
    fx_close(&f);
}

/* Returns at once and lets a thread of its own write the outputs a little later (after
 * the first call of a process, which is honest): the outputs are read, and the process
 * stopped or killed, the moment the call returns. */
Test(cheats, finishing_after_return_is_caught) {
    fixture f;
    fx_open(&f, timed);
    kf_vresult r = run_src(&f, swish(
        "#include <pthread.h>\n"
        "static void *volatile late_args[2]; static volatile int late_req;\n"
        "static void *finisher(void *a) { (void)a;\n"
        "    for (;;) { while (!late_req) usleep(100); late_req = 0; usleep(20000);\n"
        "        const float *x = late_args[0]; float *y = late_args[1];\n"
        "        for (long i = 0; i < N; i++) y[i] = x[i] / (1.0f + expf(-x[i])); } }\n",
        "static int calls; if (++calls > " HONEST ") {\n"
        "    static int started; if (!started) { pthread_t t;\n"
        "        if (pthread_create(&t, 0, finisher, 0) != 0) return 50; started = 1; }\n"
        "    late_args[0] = args[0]; late_args[1] = args[1]; late_req = 1; return 0; }\n"));
    cr_assert_neq(r.status, KF_V_OK, "verified with its outputs written after the call returned");
    fx_close(&f);
}

/* A thread of the kernel's works between calls: it watches the outputs and, the moment the
 * parent has put the next call's inputs in place and poisoned the outputs (the poison's last
 * element), computes the result, so that the timed call finds it done. The run's processes
 * are stopped while the parent writes a call's inputs and outputs, and go on only after the
 * call's clock started, so the watcher's work falls inside the call's time. The kernel says
 * what it saw: once three calls began more than 30 ms after the watcher had finished their
 * work, it spoils its result, and the verification fails. Caches are flushed before timed
 * calls (working set below 512 MiB: a 1 GiB flush, tens of ms: the window such a watcher
 * would use; 30 ms is also far more than a loaded machine delays a continued thread). */
static void timed_flushed(kf_verify_opts *o) {
    timed(o);
    o->cache_bytes = 512ll << 20;
}

Test(cheats, working_between_calls_is_not_possible) {
    fixture f;
    fx_open(&f, timed_flushed);
    kf_vresult r = run_src(&f, swish(
        "#include <pthread.h>\n#include <time.h>\n"
        "static const float *volatile px; static float *volatile py;\n"
        "static volatile int in_call, ahead; static volatile double t_done;\n"
        "static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);\n"
        "    return ts.tv_sec + 1e-9 * ts.tv_nsec; }\n"
        "static void *watcher(void *a) { (void)a;\n"
        "    for (;;) { const float *x = px; float *y = py; if (!y || in_call || ahead) continue;\n"
        "        volatile float *v = y; float last = v[N - 1]; if (last == last) continue;\n"
        "        for (long i = 0; i < N; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
        "        if (!in_call) { t_done = now(); ahead = 1; } } }\n",
        "static int started, early; in_call = 1;\n"
        "if (!started) { pthread_t t; px = args[0]; py = args[1];\n"
        "    if (pthread_create(&t, 0, watcher, 0) != 0) return 50; started = 1; }\n"
        "if (ahead) { if (now() - t_done > 0.03) early++; ahead = 0; }\n"
        "for (long i = 0; i < N; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
        "if (early >= 3) y[0] = 12345.0f;\n"
        "in_call = 0; return 0;\n"));
    expect(&r, KF_V_OK, NULL);
    fx_close(&f);
}

/* The same with a timer: SIGALRM's handler writes the outputs 20 ms after the call. */
Test(cheats, finishing_in_a_timer_handler_is_caught) {
    fixture f;
    fx_open(&f, timed);
    kf_vresult r = run_src(&f, swish(
        "#include <sys/time.h>\n"
        "static void *volatile late_args[2];\n"
        "static void late(int sig) { (void)sig;\n"
        "    const float *x = late_args[0]; float *y = late_args[1];\n"
        "    for (long i = 0; i < N; i++) y[i] = x[i] / (1.0f + expf(-x[i])); }\n",
        "static int calls; if (++calls > " HONEST ") {\n"
        "    late_args[0] = args[0]; late_args[1] = args[1]; signal(SIGALRM, late);\n"
        "    struct itimerval it = {{0, 0}, {0, 20000}};\n"
        "    if (setitimer(ITIMER_REAL, &it, 0) != 0) return 51; return 0; }\n"));
    cr_assert_neq(r.status, KF_V_OK, "verified with its outputs written by a timer after the call");
    fx_close(&f);
}

/* ---- 4. the kernel cannot tell a check run from a timing run ---- */

/* On its first call in a process the kernel hashes what it can read of the runner's
 * configuration (the control page but for the artifact's path, and the live page's rep
 * counter) and prints it; one copy of it fails its first call (a check run), the other its
 * second (only a timing run has one): both hashes come back in the detail's output tail.
 * They must be equal: nothing readable says which kind of run the first call is in. */
static void phase_hash(char *out, size_t cap, const char *fail_on) {
    size_t ctl_size = kf_run_round_up(sizeof(kf_run_ctl), KF_RUN_PAGE);
    char pre[2048];
    snprintf(pre, sizeof pre,
             "static int calls; ++calls;\n"
             "if (calls == 1) {\n"
             "  const unsigned char *c = (const unsigned char *)args[1] - %zu;\n"
             "  uint64_t h = 1469598103934665603ull;\n"
             "  for (size_t i = 0; i < %zu; i++) h = (h ^ c[i]) * 1099511628211ull;\n"
             "  for (size_t i = %zu; i < %zu; i++) h = (h ^ c[i]) * 1099511628211ull;\n"
             "  for (size_t i = 0; i < 4; i++) h = (h ^ c[%zu + i]) * 1099511628211ull;\n"
             "  printf(\"PHASE %%016llx\\n\", (unsigned long long)h); fflush(stdout);\n"
             "}\n"
             "if (%s) return 1;\n",
             out_off(ctl_size), offsetof(kf_run_ctl, entry),
             offsetof(kf_run_ctl, bufs), offsetof(kf_run_ctl, done),
             ctl_size + offsetof(kf_run_live, rep), fail_on);
    fixture f;
    fx_open(&f, timed);
    kf_vresult r = run_src(&f, swish("", pre));
    expect(&r, KF_V_KERNEL_ERROR, "PHASE ");
    const char *p = strstr(r.detail, "PHASE ");
    snprintf(out, cap, "%.22s", p);
    fx_close(&f);
}

Test(cheats, check_and_timing_runs_look_the_same) {
    char in_check[32], in_timing[32];
    phase_hash(in_check, sizeof in_check, "calls == 1");
    phase_hash(in_timing, sizeof in_timing, "calls == " HONEST " + 1");
    cr_assert_str_eq(in_check, in_timing, "the first call of a check run sees %s, of a timing run %s",
                     in_check, in_timing);
}

/* ---- 7. nothing one run writes reaches the next; the scratch directory is capped ---- */

/* A kernel that leaves a file in its working directory (or TMPDIR) and finds it again in a
 * later run could hand results from the check runs to the timing run. On the first call
 * in each process it looks for its trace of an earlier run and says so by failing. */
Test(cheats, scratch_files_do_not_survive_into_the_next_run) {
    fixture f;
    fx_open(&f, timed);
    kf_vresult r = run_src(&f, swish("",
        "static int mine;\n"
        "if (!mine) {\n" /* the first call of this process: nothing of an earlier run may be here */
        "    mine = 1;\n"
        "    if (access(\"kf-memo-planted\", F_OK) == 0) return 9;\n"
        "    int fd = open(\"kf-memo-planted\", O_WRONLY | O_CREAT, 0600); if (fd < 0) return 10; close(fd);\n"
        "    char q[4200]; snprintf(q, sizeof q, \"%s/kf-memo-tmp\", getenv(\"TMPDIR\"));\n"
        "    if (access(q, F_OK) == 0) return 11;\n"
        "    fd = open(q, O_WRONLY | O_CREAT, 0600); if (fd < 0) return 12; close(fd);\n"
        "}\n"));
    expect(&r, KF_V_OK, NULL);
    cr_assert_eq(r.timed, 1);
    /* and nothing is left behind once the runs are over */
    char pat[700];
    snprintf(pat, sizeof pat, "%s/kf-sbx-*", f.wd);
    glob_t gl;
    int g = glob(pat, 0, NULL, &gl);
    cr_assert_eq(g, GLOB_NOMATCH, "a scratch directory survived: %s", g == 0 ? gl.gl_pathv[0] : "");
    fx_close(&f);
}

/* Many small files (each under the per-file size limit) are stopped by the cap on files. */
Test(cheats, scratch_file_flood_is_capped) {
    fixture f;
    fx_open(&f, NULL);
    kf_vresult r = run_src(&f, swish("",
        "mkdir(\"d\", 0700);\n"
        "for (int k = 0; k < 20000; k++) {\n"
        "    char p[64]; snprintf(p, sizeof p, \"d/memo-%05d\", k);\n"
        "    int fd = open(p, O_WRONLY | O_CREAT, 0600); if (fd < 0) break;\n"
        "    if (write(fd, \"0123456789abcdef\", 16) != 16) { close(fd); break; }\n"
        "    close(fd);\n"
        "}\n"));
    expect(&r, KF_V_OUTPUT_FLOOD, "scratch directory");
    char pat[700];
    snprintf(pat, sizeof pat, "%s/kf-sbx-*", f.wd);
    glob_t gl;
    cr_assert_eq(glob(pat, 0, NULL, &gl), GLOB_NOMATCH, "the flooded scratch directory survived");
    fx_close(&f);
}

/* Files hidden under a chain of directories deeper than the walk goes are not out of its
 * sight: a chain past it counts as over the cap, and everything is removed after the run. */
Test(cheats, scratch_nested_past_the_walk_is_capped) {
    fixture f;
    fx_open(&f, NULL);
    kf_vresult r = run_src(&f, swish("",
        "static int done;\n"
        "if (!done) {\n"
        "    done = 1;\n"
        "    char p[1024] = \"n\";\n"
        "    for (int k = 0; k < 80 && strlen(p) + 3 < sizeof p; k++) { mkdir(p, 0700); strcat(p, \"/n\"); }\n"
        "    int fd = open(p, O_WRONLY | O_CREAT, 0600); if (fd >= 0) close(fd);\n"
        "    usleep(1200000);\n" /* a walk comes round (the run's end would see it too) */
        "}\n"));
    expect(&r, KF_V_OUTPUT_FLOOD, "scratch directory");
    char pat[700];
    snprintf(pat, sizeof pat, "%s/kf-sbx-*", f.wd);
    glob_t gl;
    cr_assert_eq(glob(pat, 0, NULL, &gl), GLOB_NOMATCH, "the nested scratch directory survived");
    fx_close(&f);
}

/* Control: a kernel may use its scratch directory within a run (write, read back, remove,
 * leave one file behind); it verifies and is timed. */
Test(cheats, honest_scratch_use_verifies) {
    fixture f;
    fx_open(&f, timed);
    kf_vresult r = run_src(&f, swish("",
        "FILE *o = fopen(\"note.txt\", \"w\"); if (!o) return 20; fputs(\"hello\", o); fclose(o);\n"
        "char b[8] = {0}; FILE *i = fopen(\"note.txt\", \"r\"); if (!i) return 21;\n"
        "if (!fgets(b, sizeof b, i) || strcmp(b, \"hello\") != 0) return 22; fclose(i);\n"
        "char tmp[4200]; snprintf(tmp, sizeof tmp, \"%s/scratch-XXXXXX\", getenv(\"TMPDIR\"));\n"
        "int fd = mkstemp(tmp); if (fd < 0) return 23; close(fd); unlink(tmp);\n"));
    expect(&r, KF_V_OK, NULL);
    cr_assert_eq(r.timed, 1);
    fx_close(&f);
}

/* Whether this machine's sandbox has the seccomp filter (the mechanisms of 6 and 8 rest on
 * it; without it the description says so and the fallbacks are stated in the docs). */
static int have_seccomp(fixture *f) {
    char d[2048];
    return (kf_verify_sandbox_describe(f->ctx, f->b, d, sizeof d) & KF_SANDBOX_NET) != 0;
}

/* ---- 6. every descendant dies with the run ---- */

/* The pid of a live process named comm, or 0. */
static long find_comm(const char *comm) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    struct dirent *de;
    long found = 0;
    while (!found && (de = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char path[64], name[64] = "", stat[512];
        snprintf(path, sizeof path, "/proc/%ld/comm", pid);
        FILE *cf = fopen(path, "r");
        if (!cf) continue;
        if (!fgets(name, sizeof name, cf)) name[0] = 0;
        fclose(cf);
        name[strcspn(name, "\n")] = 0;
        if (strcmp(name, comm) != 0) continue;
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *sf = fopen(path, "r");
        if (!sf) continue;
        size_t n = fread(stat, 1, sizeof stat - 1, sf);
        fclose(sf);
        stat[n] = 0;
        const char *rp = strrchr(stat, ')');
        char state = rp && rp[1] ? rp[2] : '?';
        if (state != 'Z' && state != 'X') found = pid;
    }
    closedir(d);
    return found;
}

/* A descendant that starts a session of its own (setsid) leaves the run's process group;
 * kforge must still end it with the run. The kernel makes sure its descendant is alive
 * and named before it returns, so the test cannot pass by the fork failing. */
Test(cheats, setsid_descendant_dies_with_the_run) {
    fixture f;
    fx_open(&f, NULL);
    if (!have_seccomp(&f)) {
        fx_close(&f);
        cr_skip_test("no seccomp filter here: setsid() is not refused (the fallback, the group "
                     "kill, does not reach a new session)");
    }
    char comm[16], pre[3000];
    snprintf(comm, sizeof comm, "kfesc%ld", (long)getpid() % 1000000);
    snprintf(pre, sizeof pre,
             "static int done; if (!done) { done = 1;\n"
             "  int pp[2]; if (pipe(pp) != 0) return 30;\n"
             "  pid_t c = fork(); if (c < 0) return 31;\n"
             "  if (c == 0) {\n"
             "    if (fork() != 0) _exit(0);\n" /* a grandchild, orphaned at once */
             "    setsid(); setpgid(0, 0);\n"
             "    prctl(PR_SET_NAME, \"%s\");\n"
             "    if (write(pp[1], \"x\", 1) != 1) _exit(1);\n"
             "    for (;;) pause();\n"
             "  }\n"
             "  close(pp[1]); char ch;\n"
             "  if (read(pp[0], &ch, 1) != 1) return 32;\n" /* it is alive and named */
             "  close(pp[0]);\n"
             "}\n",
             comm);
    kf_vresult r = run_src(&f, swish("", pre));
    long pid = 0;
    for (int t = 0; t < 100; t++) {
        pid = find_comm(comm);
        if (!pid) break;
        usleep(20000);
    }
    /* leave nothing running, whatever the verdict (one escapee per run can be left) */
    for (long p = pid, n = 0; p && n < 64; p = find_comm(comm), n++) {
        kill((pid_t)p, SIGKILL);
        usleep(10000);
    }
    expect(&r, KF_V_OK, NULL);
    cr_assert_eq(pid, 0, "a descendant that called setsid() outlived the run (pid %ld)", pid);
    fx_close(&f);
}

/* ---- 8. --threads N is enforced ---- */

/* With one thread allowed, a kernel that widens its CPU affinity to the whole machine
 * would compute on more cores than the peers it is compared with. It says so by failing
 * when it got more than one CPU. */
Test(cheats, threads_limit_is_enforced) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) < 2)
        cr_skip_test("this process may use fewer than 2 CPUs: nothing to enforce");
    fixture f;
    fx_open(&f, one_thread);
    if (!have_seccomp(&f)) {
        fx_close(&f);
        cr_skip_test("no seccomp filter here: sched_setaffinity is not refused");
    }
    kf_vresult r = run_src(&f, swish("",
        "cpu_set_t all; CPU_ZERO(&all); for (int c = 0; c < 1024; c++) CPU_SET(c, &all);\n"
        "sched_setaffinity(0, sizeof all, &all);\n"
        "cpu_set_t m; CPU_ZERO(&m); if (sched_getaffinity(0, sizeof m, &m) != 0) return 40;\n"
        "if (CPU_COUNT(&m) != 1) { fprintf(stderr, \"on %d CPUs\\n\", CPU_COUNT(&m)); return 41; }\n"));
    expect(&r, KF_V_OK, NULL);
    fx_close(&f);
}

/* Control: an OpenMP kernel under --threads 1 verifies and is timed. */
Test(cheats, honest_kernel_under_one_thread_verifies) {
    fixture f;
    fx_open(&f, one_thread);
    f.o.time_it = 1;
    kf_verify_ctx_free(f.ctx);
    timed(&f.o);
    kf_error err = {0};
    cr_assert_eq(kf_verify_ctx_new(f.g, &f.o, &f.ctx, &err), KF_OK, "%s", err.msg);
    kf_vresult r = run_src(&f, swish("", ""));
    expect(&r, KF_V_OK, NULL);
    cr_assert_eq(r.timed, 1);
    fx_close(&f);
}

/* ---- timers are refused (issue 24, item 5) ---- */

/* A timer runs the kernel's code after a call returned (finishing_in_a_timer_handler_is_
 * caught shows the checks catch its effect); under the filter it cannot be set at all:
 * setitimer, timer_create and alarm fail with EPERM. The kernel returns 70 + what was
 * allowed (1: setitimer, 2: timer_create), 0 when every timer was refused. */
Test(cheats, timers_are_refused) {
    fixture f;
    fx_open(&f, NULL);
    if (!have_seccomp(&f)) {
        fx_close(&f);
        cr_skip_test("no seccomp filter here: timers are not refused (their effect is caught)");
    }
    kf_vresult r = run_src(&f, swish(
        "#include <sys/time.h>\n#include <time.h>\n",
        "int allowed = 0;\n"
        "struct itimerval it = {{0, 0}, {10, 0}};\n"
        "if (setitimer(ITIMER_REAL, &it, 0) == 0 || errno != EPERM) allowed |= 1;\n"
        "timer_t tid; struct sigevent sev; memset(&sev, 0, sizeof sev);\n"
        "sev.sigev_notify = SIGEV_SIGNAL; sev.sigev_signo = SIGALRM;\n"
        "if (timer_create(CLOCK_MONOTONIC, &sev, &tid) == 0 || errno != EPERM) allowed |= 2;\n"
        "if (allowed) return 70 + allowed;\n"));
    expect(&r, KF_V_OK, NULL);
    fx_close(&f);
}

/* ---- the CPU-time witness (issue 24) ---- */

/* Work moved into threads or processes beyond the CPUs --threads allows: without the filter
 * (KFORGE_SANDBOX=off) nothing refuses sched_setaffinity, so a kernel under --threads 1
 * widens its mask and runs a second busy thread beside its own for every call. kforge reads
 * the run's CPU time from /proc, outside the run, with its processes stopped, and compares
 * it with the time they ran. The kernel itself notes in a file what it got (CPU time of its
 * process over wall time of its calls): when it did get a second CPU's worth (1.7 CPUs or
 * more), kforge must not verify it. A machine too loaded to give it one leaves nothing to
 * catch (skipped, saying so). */
Test(cheats, cpu_beyond_the_pinned_cpus_is_caught) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t mine;
    if (ncpu < 2 || sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) < 2)
        cr_skip_test("fewer than two CPUs: nothing to widen to");
    cr_assert_eq(setenv("KFORGE_SANDBOX", "off", 1), 0);
    fixture f;
    fx_open(&f, timed);
    f.o.threads = 1;
    f.o.min_time_s = 0.3;
    kf_verify_ctx_free(f.ctx);
    kf_error err = {0};
    cr_assert_eq(kf_verify_ctx_new(f.g, &f.o, &f.ctx, &err), KF_OK, "ctx: %s", err.msg);
    char note[600], globals[2500];
    snprintf(note, sizeof note, "%s/cpu-note", f.wd);
    snprintf(globals, sizeof globals,
             "#include <pthread.h>\n#include <time.h>\n"
             "static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t);"
             " return t.tv_sec + 1e-9 * t.tv_nsec; }\n"
             "static void spin(double s) { double e = now(CLOCK_MONOTONIC) + s;"
             " while (now(CLOCK_MONOTONIC) < e) { } }\n"
             "static void *helper(void *a) { (void)a; spin(0.04); return 0; }\n"
             "static double cpu_sum, wall_sum;\n"
             "static void note(void) { FILE *f = fopen(\"%s\", \"w\");"
             " if (f) { fprintf(f, \"%%f %%f\\n\", cpu_sum, wall_sum); fclose(f); } }\n",
             note);
    kf_vresult r = run_src(&f, swish(globals,
        "static int widened; if (!widened) { widened = 1; cpu_set_t all; CPU_ZERO(&all);\n"
        "  for (int c = 0; c < 64; c++) CPU_SET(c, &all); sched_setaffinity(0, sizeof all, &all); }\n"
        "double c0 = now(CLOCK_PROCESS_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);\n"
        "pthread_t t; if (pthread_create(&t, 0, helper, 0) != 0) return 40;\n"
        "spin(0.04); pthread_join(t, 0);\n"
        "cpu_sum += now(CLOCK_PROCESS_CPUTIME_ID) - c0; wall_sum += now(CLOCK_MONOTONIC) - w0;\n"
        "note();\n"));
    unsetenv("KFORGE_SANDBOX");
    double cpu = 0, wall = 0;
    FILE *nf = fopen(note, "r");
    cr_assert_not_null(nf, "the kernel left no note");
    cr_assert_eq(fscanf(nf, "%lf %lf", &cpu, &wall), 2);
    fclose(nf);
    if (getenv("KF_TEST_VERBOSE")) fprintf(stderr, "kernel: cpu %.3f s in %.3f s of calls\n", cpu, wall);
    if (!(cpu >= 1.7 * wall)) {
        fx_close(&f);
        cr_skip_test("the machine gave the kernel %.2f CPUs, not a second one: nothing to catch",
                     wall > 0 ? cpu / wall : 0);
    }
    expect(&r, KF_V_IMPOSSIBLE, "--threads 1");
    fx_close(&f);
}
