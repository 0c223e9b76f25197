/*
 * The runner maps the buffer region with its pages in place (MAP_POPULATE, issue 30): a
 * check run's one call used to pay a page fault per 4 KiB page of the task's buffers (for
 * a 16M-element task, 40-55 ms of faults around a 6 ms kernel, six runs a candidate). The
 * kernel below touches every page of its input and output and counts the page faults that
 * cost its own thread (getrusage), then computes the task; it returns 2 (a kernel error)
 * when the touches faulted, so a runner that maps the region lazily fails the check.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"

/* 4 MiB in, 4 MiB out: 2048 pages of 4 KiB */
static const char *task = "task touch\n"
                          "input x: f32[1048576]\n"
                          "output y = x * sigmoid(x)\n";

static const char *kernel =
    "#define _GNU_SOURCE\n"
    "#include <math.h>\n"
    "#include <sys/resource.h>\n"
    "#define N 1048576\n"
    "int kforge_kernel(void *const *args) {\n"
    "    const float *x = args[0];\n"
    "    float *y = args[1];\n"
    "    struct rusage a, b;\n"
    "    getrusage(RUSAGE_THREAD, &a);\n"
    "    volatile float s = 0;\n"
    "    for (long i = 0; i < N; i += 1024) s += x[i];\n"
    "    for (long i = 0; i < N; i += 1024) y[i] = 0.0f;\n"
    "    getrusage(RUSAGE_THREAD, &b);\n"
    "    long faults = (b.ru_minflt - a.ru_minflt) + (b.ru_majflt - a.ru_majflt);\n"
    "    for (long i = 0; i < N; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
    "    return faults > 64 ? 2 : 0;\n"
    "}\n";

Test(region_populated, a_kernel_touching_every_page_of_its_buffers_takes_no_page_fault) {
    kf_graph *g = NULL;
    kf_backend *b = NULL;
    kf_verify_ctx *ctx = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "parse: %s", err.msg);
    cr_assert_eq(kf_backend_open("cpu", &b, &err), KF_OK, "backend: %s", err.msg);
    char wd[512];
    snprintf(wd, sizeof wd, "%s/test-work/populated-%ld", KF_BUILD_DIR, (long)getpid());
    cr_assert_eq(kf_mkdirs(wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.workdir = wd;
    o.seed = 31;
    o.threads = 1;
    o.wall_limit_s = 20;
    cr_assert_eq(kf_verify_ctx_new(g, &o, &ctx, &err), KF_OK, "ctx: %s", err.msg);
    kf_candidate c;
    cr_assert_eq(kf_candidate_init(&c, "cpu", kernel, NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    kf_status st = kf_verify_candidate(ctx, b, &c, &r, &err);
    kf_candidate_clear(&c);
    cr_assert_eq(st, KF_OK, "verify could not run: %s (%s)", err.msg, r.detail);
    cr_assert_eq(r.status, KF_V_OK, "%s: %s (the kernel returns 2 when touching its buffers faulted)",
                 kf_vstatus_name(r.status), r.detail);
    cr_assert_eq(r.sets_run, o.nsets);
    kf_verify_ctx_free(ctx);
    kf_backend_close(b);
    kf_graph_free(g);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", wd);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", wd);
}
