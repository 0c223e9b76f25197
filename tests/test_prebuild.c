/*
 * The first candidate built beside the drawing of the sets (src/agent/loop.c prebuild,
 * issue 30): the builtin agent's first point, default or random, is the one built, so step
 * 0's compile finds its artifact in the work folder (one artifact, a compile of a cache
 * lookup's length); KFORGE_NO_PREBUILD=1 is the control (step 0 runs the compiler); a run
 * whose sets fail waits for the build before it returns.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/agent.h"
#include "kforge/ir.h"

static const char task_text[] = "task swish_p\ninput x: f32[262144]\noutput y = x * sigmoid(x)\n";
static char outdir[256], cachedir[256];

static void setup(void) {
    snprintf(outdir, sizeof outdir, "/tmp/kf-prebuild-%d", (int)getpid());
    snprintf(cachedir, sizeof cachedir, "%s-cache", outdir);
    setenv("KFORGE_CACHE_DIR", cachedir, 1);
}

static void teardown(void) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", outdir, cachedir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", outdir);
}

TestSuite(prebuild, .init = setup, .fini = teardown, .timeout = 300);

static int artifacts(const char *dir) {
    DIR *d = opendir(dir);
    cr_assert(d, "no work folder %s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        n += l > 3 && strcmp(e->d_name + l - 3, ".so") == 0;
    }
    closedir(d);
    return n;
}

/* One run of one candidate into a fresh folder: step 0's compile seconds. */
static double first_compile(int start_random, int prebuild, const char *sub) {
    char out[400], work[420], cmd[500];
    snprintf(out, sizeof out, "%s/%s", outdir, sub);
    snprintf(work, sizeof work, "%s/work", out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    cr_assert_eq(system(cmd), 0);
    if (prebuild) unsetenv("KFORGE_NO_PREBUILD");
    else setenv("KFORGE_NO_PREBUILD", "1", 1);
    kf_graph *g;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task_text, "<test>", &g, &err), KF_OK, "%s", err.msg);
    kf_loop_opts o;
    kf_loop_opts_default(&o);
    o.iters = 1;
    o.out_dir = out;
    o.seed = 11;
    o.memcheck = KF_MEMCHECK_OFF;
    o.start_random = start_random;
    kf_run_result r;
    cr_assert_eq(kf_loop_run(g, &o, &r, &err), KF_OK, "loop: %s", err.msg);
    unsetenv("KFORGE_NO_PREBUILD");
    cr_assert_eq(r.niters, 1);
    cr_assert_eq(r.iters[0].res.status, KF_V_OK, "%s", r.iters[0].res.detail);
    /* the artifact built beside the sets is step 0's: one in the folder */
    cr_assert_eq(artifacts(work), 1, "%s: step 0 built another candidate than the one built beside the sets", sub);
    double c = r.iters[0].res.compile_s;
    kf_run_result_free(&r);
    kf_graph_free(g);
    return c;
}

Test(prebuild, step_0_finds_its_candidate_built) {
    /* a compiler run takes a tenth of a second and more; finding the artifact, a lookup */
    double control = first_compile(0, 0, "control");
    cr_assert_gt(control, 0.05, "the control ran the compiler at step 0 (%.3f s)", control);
    double got = first_compile(0, 1, "default");
    cr_assert_lt(got, 0.05, "step 0 compiled for %.3f s: the candidate was not built beside the sets", got);
    got = first_compile(1, 1, "random");
    cr_assert_lt(got, 0.05, "--start random: step 0 compiled for %.3f s", got);
}

Test(prebuild, a_run_whose_sets_fail_waits_for_the_build) {
    setenv("KFORGE_HOST_MEM", "0.0001", 1); /* the sets cannot be held: refused */
    kf_graph *g;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task_text, "<test>", &g, &err), KF_OK, "%s", err.msg);
    kf_loop_opts o;
    kf_loop_opts_default(&o);
    o.iters = 1;
    o.out_dir = outdir;
    o.memcheck = KF_MEMCHECK_OFF;
    kf_run_result r;
    cr_assert_eq(kf_loop_run(g, &o, &r, &err), KF_ERR_UNSUPPORTED, "%s", err.msg);
    unsetenv("KFORGE_HOST_MEM");
    kf_run_result_free(&r);
    kf_graph_free(g);
}
