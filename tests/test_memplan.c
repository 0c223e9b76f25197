/*
 * The verifier's memory plan (src/verify/sets.c): a context that cannot keep every input
 * set draws the inputs again for each run and checks them unchanged by keyed block hashes,
 * and one that cannot keep every reference computes a set's again when a check needs it.
 * Nothing may be checked less: the same kernels get the same verdicts, with the same
 * details, under each plan. The plans are forced with kf_verify_opts.host_mem, sized from
 * the tasks below (the sizes each plan needs are written out where they are used).
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

/* softmax over rows of f32[257, 129]: 33153 elements, bounded (not pointwise alone).
 * Bytes: float64 scratch 3 x 8 x 33153 plus a run's buffers 2 x 4 x 33153 = 1.06 MB;
 * per set inputs 132.6 KB, reference and bound 265.2 KB. So every set kept: 3.45 MB;
 * references only: 2.65 MB; one reference: 1.33 MB. */
static const char *softmax_task = "task sm\n"
                                  "input x: f32[257, 129]\n"
                                  "output y = softmax(x, axis=1)\n";
static const int64_t plan_mem[3] = {0, 3000000, 2000000}; /* all, refs only, one at a time */

typedef struct fixture {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *ctx;
    kf_verify_opts o;
    char wd[512];
} fixture;

static void fx_open(fixture *f, const char *task, int64_t host_mem, int time_it) {
    memset(f, 0, sizeof *f);
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<test>", &f->g, &err), KF_OK, "parse: %s", err.msg);
    cr_assert_eq(kf_backend_open("cpu", &f->b, &err), KF_OK, "backend: %s", err.msg);
    snprintf(f->wd, sizeof f->wd, "%s/test-work/memplan-%ld", KF_BUILD_DIR, (long)getpid());
    cr_assert_eq(kf_mkdirs(f->wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts_default(&f->o);
    f->o.workdir = f->wd;
    f->o.seed = 777;
    f->o.threads = 2;
    f->o.wall_limit_s = 15;
    f->o.cpu_limit_s = 30;
    f->o.mem_limit = 512ll << 20;
    f->o.host_mem = host_mem;
    f->o.time_it = time_it;
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
    return r;
}

/* A row softmax; shift: subtract the row's maximum (without it exp overflows on the
 * large-magnitude set); `pre` and `post` spliced in before and after the loop. */
static char srcbuf[4096];
static const char *softmax_src(int shift, const char *pre, const char *post) {
    snprintf(srcbuf, sizeof srcbuf,
             "#include <math.h>\n"
             "int kforge_kernel(void *const *args) {\n"
             "    const float *x = args[0];\n"
             "    float *y = args[1];\n"
             "    %s\n"
             "    for (long r = 0; r < 257; r++) {\n"
             "        const float *xr = x + r * 129;\n"
             "        float *yr = y + r * 129;\n"
             "        float m = xr[0];\n"
             "        for (int c = 1; c < 129; c++) if (xr[c] > m) m = xr[c];\n"
             "        if (!%d) m = 0;\n"
             "        float s = 0;\n"
             "        for (int c = 0; c < 129; c++) { yr[c] = expf(xr[c] - m); s += yr[c]; }\n"
             "        for (int c = 0; c < 129; c++) yr[c] /= s;\n"
             "    }\n"
             "    %s\n"
             "    return 0;\n"
             "}\n",
             pre, shift, post);
    return srcbuf;
}

Test(memplan, the_plans_follow_the_memory_there_is) {
    for (int p = 0; p < 3; p++) {
        fixture f;
        fx_open(&f, softmax_task, plan_mem[p], 0);
        int ki, kr;
        kf_verify_ctx_plan(f.ctx, &ki, &kr);
        cr_assert_eq(ki, p == 0, "plan %d: keeps inputs %d", p, ki);
        cr_assert_eq(kr, p < 2, "plan %d: keeps references %d", p, kr);
        /* a context that is not whole has nothing for the store's cache */
        const void **data;
        size_t *len;
        void *head;
        int n = kf_verify_ctx_parts(f.ctx, &data, &len, &head);
        cr_assert_eq(n > 0, p == 0, "plan %d: %d parts", p, n);
        free(data);
        free(len);
        free(head);
        fx_close(&f);
    }
    /* not even one set's reference fits: refused, naming the way to give more */
    kf_graph *g;
    kf_verify_ctx *c = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(softmax_task, "<test>", &g, &err), KF_OK);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.host_mem = 1000000;
    cr_assert_eq(kf_verify_ctx_new(g, &o, &c, &err), KF_ERR_UNSUPPORTED);
    cr_assert_null(c);
    cr_assert(strstr(err.msg, "KFORGE_HOST_MEM"), "%s", err.msg);
    kf_graph_free(g);
}

Test(memplan, every_plan_gives_the_same_verdicts) {
    kf_vresult want[3];
    for (int p = 0; p < 3; p++) {
        fixture f;
        fx_open(&f, softmax_task, plan_mem[p], 0);
        /* the careful kernel passes with the same errors */
        kf_vresult ok = run_src(&f, softmax_src(1, "", ""));
        cr_assert_eq(ok.status, KF_V_OK, "plan %d: %s", p, ok.detail);
        cr_assert_eq(ok.sets_run, f.o.nsets);
        /* without the max subtraction: fails on the large-magnitude set, the same way */
        kf_vresult bad = run_src(&f, softmax_src(0, "", ""));
        cr_assert_eq(bad.status, KF_V_MISMATCH, "plan %d: %s %s", p, kf_vstatus_name(bad.status), bad.detail);
        /* an input written: found and located, with the value it had */
        kf_vresult mod = run_src(&f, softmax_src(1, "", "((float *)args[0])[300] = 42.0f;"));
        cr_assert_eq(mod.status, KF_V_INPUT_MODIFIED, "plan %d: %s", p, mod.detail);
        cr_assert(strstr(mod.detail, "element 300"), "plan %d: %s", p, mod.detail);
        cr_assert(strstr(mod.detail, "1 of 33153 elements changed"), "plan %d: %s", p, mod.detail);
        if (p == 0) {
            want[0] = ok;
            want[1] = bad;
            want[2] = mod;
        } else {
            cr_assert_eq(ok.max_abs_err, want[0].max_abs_err, "plan %d", p);
            cr_assert_eq(ok.nmse, want[0].nmse, "plan %d", p);
            cr_assert_eq(bad.bad_set, want[1].bad_set, "plan %d", p);
            cr_assert_str_eq(bad.detail, want[1].detail, "plan %d", p);
            cr_assert_str_eq(mod.detail, want[2].detail, "plan %d", p);
        }
        fx_close(&f);
    }
}

Test(memplan, timed_calls_are_checked_with_one_reference_at_a_time) {
    fixture f;
    fx_open(&f, softmax_task, plan_mem[2], 1);
    kf_vresult ok = run_src(&f, softmax_src(1, "", ""));
    cr_assert_eq(ok.status, KF_V_OK, "%s", ok.detail);
    cr_assert(ok.timed);
    /* right on the check runs' single call, then the work skipped: the timed calls' outputs
     * (poisoned before each) are compared against the set each call got */
    const char *lazy = softmax_src(1, "static int calls; if (calls++ > 0) return 0;", "");
    kf_vresult cheat = run_src(&f, lazy);
    cr_assert_neq(cheat.status, KF_V_OK, "skipping work on timed calls passed");
    fx_close(&f);
}

/* argmax ties are judged on the run's inputs, which a plan without kept inputs does not
 * hold itself: f16[64, 50] in [1, 1.01] has tied maxima in most rows. Bytes: scratch
 * 8 x 3200 + 2 x 8 x 64, buffers 6400 + 512: 33.5 KB; per set 6400 + 768: all 76.5 KB, one
 * reference 34.3 KB. */
Test(memplan, argmax_ties_without_kept_inputs) {
    const char *task = "task ties\n"
                       "input a: f16[64, 50] range(1, 1.01)\n"
                       "output i = argmax(a, axis=1)\n";
    fixture f;
    fx_open(&f, task, 36000, 0);
    int ki, kr;
    kf_verify_ctx_plan(f.ctx, &ki, &kr);
    cr_assert(!ki && !kr, "plan %d %d", ki, kr);
    const char *last =
        "#include <stdint.h>\n"
        "int kforge_kernel(void *const *args) {\n"
        "    const uint16_t *a = args[0]; int64_t *idx = args[1];\n"
        "    for (long r = 0; r < 64; r++) {\n"
        "        long best = 0;\n"
        "        for (long c = 1; c < 50; c++) if (a[r * 50 + c] >= a[r * 50 + best]) best = c;\n"
        "        idx[r] = best;\n"
        "    }\n"
        "    return 0;\n"
        "}\n";
    kf_vresult r = run_src(&f, last);
    cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
    fx_close(&f);
}
