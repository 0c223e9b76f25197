/*
 * The cached input sets and reference (issue 30, src/verify/refcache.c and the store's
 * refsets): a context made from a cached list must judge candidates exactly as the one that
 * drew the sets (a wrong kernel still fails, on the same set), a list made for other sets is
 * refused, and the loop serves a seeded run's sets from the store the second time (and
 * records where the run's time went in the store's run row).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/agent.h"
#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/store.h"
#include "kforge/verify.h"

static const char *task = "task rc_swish\n"
                          "input x: f32[4099]\n"
                          "input b: f32[4099]\n"
                          "output y = x * sigmoid(x) + b\n";

static const char *good = "#include <math.h>\n"
                          "int kforge_kernel(void *const *a) {\n"
                          "    const float *x = a[0], *b = a[1]; float *y = a[2];\n"
                          "    for (long i = 0; i < 4099; i++) y[i] = x[i] / (1.0f + expf(-x[i])) + b[i];\n"
                          "    return 0;\n}\n";
/* wrong only where x is large: the sets that reach large magnitudes catch it */
static const char *bad = "#include <math.h>\n"
                         "int kforge_kernel(void *const *a) {\n"
                         "    const float *x = a[0], *b = a[1]; float *y = a[2];\n"
                         "    for (long i = 0; i < 4099; i++) y[i] = (x[i] > 30 ? 0 : x[i] / (1.0f + expf(-x[i]))) + b[i];\n"
                         "    return 0;\n}\n";

static char wd[512];

static kf_vresult check(kf_verify_ctx *c, kf_backend *be, const char *src) {
    kf_candidate cand;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&cand, "cpu", src, NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    cr_assert_eq(kf_verify_candidate(c, be, &cand, &r, &err), KF_OK, "%s", err.msg);
    kf_candidate_clear(&cand);
    return r;
}

/* the parts, copied into malloc'd blobs as the store hands them back */
static int copy_parts(const kf_verify_ctx *c, void ***data, size_t **len) {
    const void **d;
    size_t *l;
    void *head;
    int n = kf_verify_ctx_parts(c, &d, &l, &head);
    *data = calloc((size_t)n, sizeof **data);
    *len = calloc((size_t)n, sizeof **len);
    for (int k = 0; k < n; k++) {
        (*data)[k] = malloc(l[k] ? l[k] : 1);
        memcpy((*data)[k], d[k], l[k]);
        (*len)[k] = l[k];
    }
    free(d);
    free(l);
    free(head);
    return n;
}

static void free_parts(int n, void **data, size_t *len) {
    for (int k = 0; k < n; k++) free(data[k]);
    free(data);
    free(len);
}

Test(refcache, same_verdicts_from_cached_sets) {
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "%s", err.msg);
    kf_backend *be = NULL;
    cr_assert_eq(kf_backend_open("cpu", &be, &err), KF_OK, "%s", err.msg);
    snprintf(wd, sizeof wd, "%s/test-work/refcache-%ld", KF_BUILD_DIR, (long)getpid());
    cr_assert_eq(kf_mkdirs(wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.workdir = wd;
    o.seed = 99;
    o.threads = 1;
    kf_verify_ctx *drawn = NULL, *cached = NULL;
    cr_assert_eq(kf_verify_ctx_new(g, &o, &drawn, &err), KF_OK, "%s", err.msg);
    void **data;
    size_t *len;
    int n = copy_parts(drawn, &data, &len);
    cr_assert_gt(n, 1);
    cr_assert_eq(kf_verify_ctx_from_parts(g, &o, n, data, len, &cached, &err), KF_OK, "%s", err.msg);
    free_parts(n, data, len);
    double dr, rf;
    kf_verify_ctx_times(cached, &dr, &rf);
    cr_expect_eq(dr, 0);

    kf_vresult a = check(drawn, be, good), b = check(cached, be, good);
    cr_expect_eq(a.status, KF_V_OK, "%s", a.detail);
    cr_expect_eq(b.status, KF_V_OK, "%s", b.detail);
    cr_expect_eq(a.max_abs_err, b.max_abs_err);
    a = check(drawn, be, bad);
    b = check(cached, be, bad);
    cr_expect_eq(a.status, KF_V_MISMATCH, "%s", a.detail);
    cr_expect_eq(b.status, a.status, "%s", b.detail);
    cr_expect_eq(b.bad_set, a.bad_set);
    cr_expect_eq(b.first_bad, a.first_bad);

    /* made for another seed, set count or task: refused, nothing used */
    kf_verify_opts o2 = o;
    o2.seed = 100;
    kf_verify_ctx *x = NULL;
    n = copy_parts(drawn, &data, &len);
    cr_expect_eq(kf_verify_ctx_from_parts(g, &o2, n, data, len, &x, &err), KF_ERR_PARSE);
    cr_expect_null(x);
    o2 = o;
    o2.nsets = 4;
    cr_expect_eq(kf_verify_ctx_from_parts(g, &o2, n, data, len, &x, &err), KF_ERR_PARSE);
    len[1]--; /* a truncated input */
    cr_expect_eq(kf_verify_ctx_from_parts(g, &o, n, data, len, &x, &err), KF_ERR_PARSE);
    free_parts(n, data, len);

    kf_verify_ctx_free(drawn);
    kf_verify_ctx_free(cached);
    kf_backend_close(be);
    kf_graph_free(g);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", wd);
    cr_expect_eq(system(cmd), 0);
}

/* Through the loop: the first seeded run draws and stores the sets, the second (same task,
 * seed) gets them from the store and finds the same best time verdicts; a run without a
 * given seed neither reads nor writes them. */
Test(refcache, loop_reads_the_store) {
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "%s", err.msg);
    char dir[600], db[700];
    snprintf(dir, sizeof dir, "%s/test-work/refcache-loop-%ld", KF_BUILD_DIR, (long)getpid());
    cr_assert_eq(kf_mkdirs(dir, &err), KF_OK, "%s", err.msg);
    snprintf(db, sizeof db, "%s/s.db", dir);
    kf_store *s = NULL;
    cr_assert_eq(kf_store_open(db, &s, &err), KF_OK, "%s", err.msg);
    kf_loop_opts o;
    kf_loop_opts_default(&o);
    o.iters = 1;
    o.threads = 1;
    o.memcheck = KF_MEMCHECK_OFF;
    o.analysis = KF_ANALYSIS_OFF;
    o.out_dir = dir;
    o.task_text = task;
    o.store = s;
    o.no_cache = 1; /* the candidate is checked again: only the sets come from the store */
    o.seed = 5;
    kf_run_result r1, r2, r3;
    cr_assert_eq(kf_loop_run(g, &o, &r1, &err), KF_OK, "%s", err.msg);
    cr_expect_eq(r1.phases.ref_cached, 0);
    cr_expect_gt(r1.phases.total, 0);
    /* the store's run record keeps the phases too (runs.phases) */
    kf_run_result back;
    cr_assert_eq(kf_run_load(s, r1.run_id, &back, NULL, &err), KF_OK, "%s", err.msg);
    cr_expect_eq(back.phases.total, r1.phases.total);
    cr_expect_eq(back.phases.check, r1.phases.check);
    kf_run_result_free(&back);
    cr_assert_eq(kf_loop_run(g, &o, &r2, &err), KF_OK, "%s", err.msg);
    cr_expect_eq(r2.phases.ref_cached, 1);
    cr_expect_eq(r2.phases.draw, 0);
    cr_assert_eq(r1.niters, 1);
    cr_assert_eq(r2.niters, 1);
    cr_expect_eq(r2.iters[0].res.status, r1.iters[0].res.status, "%s", r2.iters[0].res.detail);
    cr_expect_eq(r2.iters[0].res.max_abs_err, r1.iters[0].res.max_abs_err);
    o.seed = 0;
    cr_assert_eq(kf_loop_run(g, &o, &r3, &err), KF_OK, "%s", err.msg);
    cr_expect_eq(r3.phases.ref_cached, 0);
    kf_run_result_free(&r1);
    kf_run_result_free(&r2);
    kf_run_result_free(&r3);
    kf_store_close(s);
    kf_graph_free(g);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}
