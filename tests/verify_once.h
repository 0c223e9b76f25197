/*
 * One CPU candidate verified (and timed, as the options say) on a fresh context: the task
 * parsed from text, the CPU backend, a work directory of the test process's own
 * (KF_BUILD_DIR/test-work/TAG-PID, removed after). The fixture of the timing-rule tests
 * (tests/test_race.c, tests/test_check_calls.c, tests/test_loop_speed.c).
 */
#ifndef KF_TESTS_VERIFY_ONCE_H
#define KF_TESTS_VERIFY_ONCE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"

/* o: the options (kf_verify_opts_default and the test's own; workdir is set here); race_s:
 * kf_verify_race's best time (0: off). */
static inline kf_vresult verify_once(const char *task, const char *src, const char *tag, kf_verify_opts o,
                                     double race_s) {
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "%s", err.msg);
    kf_backend *be = NULL;
    cr_assert_eq(kf_backend_open("cpu", &be, &err), KF_OK, "%s", err.msg);
    char wd[512];
    snprintf(wd, sizeof wd, "%s/test-work/%s-%ld", KF_BUILD_DIR, tag, (long)getpid());
    cr_assert_eq(kf_mkdirs(wd, &err), KF_OK, "%s", err.msg);
    o.workdir = wd;
    kf_verify_ctx *c = NULL;
    cr_assert_eq(kf_verify_ctx_new(g, &o, &c, &err), KF_OK, "%s", err.msg);
    kf_verify_race(c, race_s);
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

#endif
