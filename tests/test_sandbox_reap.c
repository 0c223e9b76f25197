/*
 * A handshake run whose processes were stopped whole when its last call returned is
 * killed and judged at once; the teardown of its address space (a page table entry per
 * 4 KiB page of the region) goes on while the parent compares and writes the next set, and
 * the next run or kf_sbx_free reaps it (src/verify/sandbox.c, issue 30). The verdicts must
 * be the ones a reaped run gets, and no runner may be left unreaped.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"
#include "verify/verify_int.h"

static const char *task = "task reap\n"
                          "input x: f32[65536]\n"
                          "output y = x * sigmoid(x)\n";

/* the task, then `ret` */
static char src[1024];
static const char *kernel(const char *ret) {
    snprintf(src, sizeof src,
             "#include <math.h>\n"
             "int kforge_kernel(void *const *args) {\n"
             "    const float *x = args[0];\n"
             "    float *y = args[1];\n"
             "    for (long i = 0; i < 65536; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
             "    return %s;\n"
             "}\n", ret);
    return src;
}

typedef struct fixture {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *c;
    char wd[512], art[4096], runner[PATH_MAX], abs_art[PATH_MAX];
} fixture;

static void fx_open(fixture *f, const char *source) {
    memset(f, 0, sizeof *f);
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<test>", &f->g, &err), KF_OK, "parse: %s", err.msg);
    cr_assert_eq(kf_backend_open("cpu", &f->b, &err), KF_OK, "backend: %s", err.msg);
    snprintf(f->wd, sizeof f->wd, "%s/test-work/reap-%ld", KF_BUILD_DIR, (long)getpid());
    cr_assert_eq(kf_mkdirs(f->wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.workdir = f->wd;
    o.seed = 5;
    o.threads = 1;
    cr_assert_eq(kf_verify_ctx_new(f->g, &o, &f->c, &err), KF_OK, "ctx: %s", err.msg);
    kf_buf log = {0};
    cr_assert_eq(kf_backend_compile(f->b, source, NULL, f->wd, f->art, sizeof f->art, &log, &err), KF_OK,
                 "compile: %s %s", err.msg, log.data ? log.data : "");
    kf_buf_free(&log);
}

static void fx_close(fixture *f) {
    kf_verify_ctx_free(f->c);
    kf_backend_close(f->b);
    kf_graph_free(f->g);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->wd);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", f->wd);
}

/* One check run of set s on sb, as verify.c makes it; *pending: the runner left to reap. */
static kf_vstatus check_run(fixture *f, kf_sbx *sb, int s, double *cpu_used, int *pending, char *detail,
                            size_t cap) {
    kf_verify_load_set(f->c, sb, s);
    snprintf(sb->ctl->entry, sizeof sb->ctl->entry, "kforge_kernel");
    snprintf(sb->ctl->artifact, sizeof sb->ctl->artifact, "%s", f->abs_art);
    sb->ctl->target[0] = 0;
    sb->ctl->mode = KF_RUN_CHECK;
    kf_sbx_limits lim = {.wall_s = 20, .cpu_s = 20, .mem_bytes = 512ll << 20, .output_cap = 65536,
                         .threads = 1, .runner = f->runner, .workdir = f->wd, .tag = (unsigned long)(700 + s),
                         .handshake = 1, .cpu_used = cpu_used};
    kf_vstatus vs;
    kf_error err = {0};
    cr_assert_eq(kf_sbx_run(sb, &lim, &vs, detail, cap, NULL, &err), KF_OK, "run: %s", err.msg);
    *pending = sb->reap_pid;
    return vs;
}

static void open_region(fixture *f, kf_sbx *sb) {
    kf_vresult r;
    memset(&r, 0, sizeof r);
    kf_error err = {0};
    int threads;
    const char *art = f->art;
    cr_assert_eq(kf_verify_open_region(f->c, f->b, &art, f->runner, f->abs_art, &threads, sb, &r, &err), KF_OK,
                 "region: %s", err.msg);
    snprintf(f->abs_art, sizeof f->abs_art, "%s", art);
}

/* no child of this process is left, not even a zombie */
static void assert_no_child(void) {
    errno = 0;
    pid_t p = waitpid(-1, NULL, WNOHANG);
    cr_assert(p == -1 && errno == ECHILD, "a child is left unreaped (waitpid: %d, %s)", (int)p, strerror(errno));
}

Test(sandbox_reap, a_run_stopped_whole_is_judged_before_its_runner_is_reaped) {
    fixture f;
    fx_open(&f, kernel("0"));
    kf_sbx sb;
    open_region(&f, &sb);
    char detail[1500];
    int pending = 0;
    kf_vstatus vs = check_run(&f, &sb, 0, NULL, &pending, detail, sizeof detail);
    cr_assert_eq(vs, KF_V_OK, "%s: %s", kf_vstatus_name(vs), detail);
    cr_assert_gt(pending, 0, "the runner was waited for (its teardown inside the run)");
    /* killed: it is dead or dying, and it is still this process's child to reap */
    cr_assert(kill(pending, 0) == 0, "the runner's pid is gone before it was reaped");
    /* the next run reaps it before it starts its own */
    int pending2 = 0;
    vs = check_run(&f, &sb, 1, NULL, &pending2, detail, sizeof detail);
    cr_assert_eq(vs, KF_V_OK, "%s: %s", kf_vstatus_name(vs), detail);
    cr_assert_gt(pending2, 0);
    cr_assert_neq(pending2, pending);
    errno = 0;
    cr_assert(waitpid(pending, NULL, WNOHANG) == -1 && errno == ECHILD, "the first runner was not reaped by the second run");
    kf_sbx_free(&sb);
    assert_no_child();
    fx_close(&f);
}

/* the kernel's return value is the verdict, as for a reaped run */
Test(sandbox_reap, a_kernel_error_is_judged_the_same) {
    fixture f;
    fx_open(&f, kernel("3"));
    kf_sbx sb;
    open_region(&f, &sb);
    char detail[1500];
    int pending = 0;
    kf_vstatus vs = check_run(&f, &sb, 0, NULL, &pending, detail, sizeof detail);
    cr_assert_eq(vs, KF_V_KERNEL_ERROR, "%s: %s", kf_vstatus_name(vs), detail);
    cr_assert(strstr(detail, "returned 3") != NULL, "%s", detail);
    kf_sbx_free(&sb);
    assert_no_child();
    fx_close(&f);
}

/* a caller that reads the run's CPU time gets it from the reaped runner, as before */
Test(sandbox_reap, a_caller_reading_the_cpu_time_waits_for_the_reap) {
    fixture f;
    fx_open(&f, kernel("0"));
    kf_sbx sb;
    open_region(&f, &sb);
    char detail[1500];
    int pending = -1;
    double cpu = -1;
    kf_vstatus vs = check_run(&f, &sb, 0, &cpu, &pending, detail, sizeof detail);
    cr_assert_eq(vs, KF_V_OK, "%s: %s", kf_vstatus_name(vs), detail);
    cr_assert_eq(pending, 0, "left to reap although the caller reads its CPU time");
    cr_assert(cpu >= 0, "cpu %g", cpu);
    kf_sbx_free(&sb);
    assert_no_child();
    fx_close(&f);
}

/* through the whole verification, check runs and timing run: nothing left unreaped */
Test(sandbox_reap, a_whole_verification_leaves_no_runner_unreaped) {
    fixture f;
    fx_open(&f, kernel("0"));
    f.c->opts.time_it = 1;
    kf_candidate cand;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&cand, "cpu", kernel("0"), NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    cr_assert_eq(kf_verify_candidate(f.c, f.b, &cand, &r, &err), KF_OK, "%s (%s)", err.msg, r.detail);
    kf_candidate_clear(&cand);
    cr_assert_eq(r.status, KF_V_OK, "%s: %s", kf_vstatus_name(r.status), r.detail);
    cr_assert_eq(r.timed, 1);
    assert_no_child();
    fx_close(&f);
}
