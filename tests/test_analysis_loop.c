/*
 * The performance analysis agent in the real loop (kf_loop_run on the CPU): every verified
 * candidate is diagnosed, the table prints the diagnosis and the bound column, the next
 * builtin candidate follows the best one's top recommendation (the moved parameter is the
 * one the diagnosis named, in its direction), the run record keeps it all; with
 * --analysis off nothing is diagnosed and the search is random.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/agent.h"
#include "kforge/ir.h"
#include "kforge/synth.h"

/* big enough to be memory- or latency-bound rather than launch-bound on a small machine */
static const char task_text[] = "task swish_t\ninput x: f32[1048576]\noutput y = x * sigmoid(x)\n";
static char outdir[256], cachedir[256];

static void setup(void) {
    snprintf(outdir, sizeof outdir, "/tmp/kf-analysis-%d", (int)getpid());
    snprintf(cachedir, sizeof cachedir, "%s/cache", outdir);
    setenv("KFORGE_CACHE_DIR", cachedir, 1);
}

static void teardown(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", outdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", outdir);
}

TestSuite(analysis_loop, .init = setup, .fini = teardown, .timeout = 300);

static void run_loop(int analysis, int iters, kf_graph **g, kf_run_result *r, char **table) {
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task_text, "<test>", g, &err), KF_OK, "%s", err.msg);
    kf_loop_opts o;
    kf_loop_opts_default(&o);
    o.iters = iters;
    o.out_dir = outdir;
    o.threads = 0;
    o.seed = 3;
    o.memcheck = KF_MEMCHECK_OFF;
    o.analysis = analysis;
    char *buf = NULL;
    size_t len = 0;
    o.table = open_memstream(&buf, &len);
    cr_assert_eq(kf_loop_run(*g, &o, r, &err), KF_OK, "loop: %s", err.msg);
    fclose(o.table);
    *table = buf;
}

/* The parameter the followed text names ("s0.vw 4 -> 8: ...") and the values. */
static void parse_followed(const char *f, char *param, long *from, long *to) {
    cr_assert_eq(sscanf(f, "%31s %ld -> %ld:", param, from, to), 3, "followed '%s'", f);
}

Test(analysis_loop, candidates_follow_the_diagnosis) {
    kf_graph *g;
    kf_run_result r;
    char *table;
    run_loop(KF_ANALYSIS_BUILTIN, 5, &g, &r, &table);
    cr_assert_geq(r.niters, 3);
    cr_assert(strstr(table, "analysis: architecture"), "%s", table);
    cr_assert(strstr(table, "bound"), "no bound column: %s", table);
    int followed = 0;
    for (int i = 0; i < r.niters; i++) {
        const kf_iter_record *it = &r.iters[i];
        if (it->res.status != KF_V_OK) continue;
        cr_assert(it->has_diag, "iter %d not diagnosed", it->iter);
        cr_assert(strstr(table, "      analysis: "), "no diagnosis line");
        if (!it->followed[0]) continue;
        followed++;
        /* the move is the top-ranked feasible recommendation of the best point's diagnosis:
         * its parameter and direction are among the best-so-far's recommendations */
        char param[32];
        long from, to;
        parse_followed(it->followed, param, &from, &to);
        const char *suffix = strrchr(param, '.') ? strrchr(param, '.') + 1 : param;
        int dir = to > from ? +1 : -1;
        int found = 0;
        for (int k = 0; k < i && !found; k++) {
            const kf_iter_record *b = &r.iters[k];
            if (!b->has_diag) continue;
            for (int j = 0; j < b->diag.nrecs; j++)
                if (!strcmp(b->diag.rec[j].param, suffix) && b->diag.rec[j].dir == dir) found = 1;
        }
        cr_assert(found, "iter %d moved %s %ld -> %ld, which no earlier diagnosis recommended", it->iter,
                  param, from, to);
        /* and the label shows the new value */
        char want[64];
        snprintf(want, sizeof want, "%s=%ld", suffix, to);
        cr_assert(strstr(it->label, want), "label '%s' lacks %s", it->label, want);
        cr_assert(strstr(table, "following the analysis of iter"), "%s", table);
    }
    cr_assert_gt(followed, 0, "no candidate followed a recommendation:\n%s", table);
    /* the run record keeps the diagnosis and the move */
    char path[600];
    snprintf(path, sizeof path, "%s/run.json", outdir);
    json_error_t je;
    json_t *run = json_load_file(path, 0, &je);
    cr_assert_not_null(run, "%s", je.text);
    json_t *it0 = json_array_get(json_object_get(run, "iterations"), 0);
    json_t *d = json_object_get(it0, "diagnosis");
    cr_assert(json_is_object(d), "iteration 1 has no diagnosis");
    cr_assert(json_is_string(json_object_get(d, "bound")));
    cr_assert(json_is_array(json_object_get(d, "evidence")));
    cr_assert(json_is_array(json_object_get(d, "recommendations")));
    cr_assert(json_is_string(json_object_get(run, "arch")));
    json_decref(run);
    free(table);
    kf_run_result_free(&r);
    kf_graph_free(g);
}

Test(analysis_loop, off_means_no_diagnosis_and_random_search) {
    kf_graph *g;
    kf_run_result r;
    char *table;
    run_loop(KF_ANALYSIS_OFF, 4, &g, &r, &table);
    cr_assert_geq(r.niters, 2);
    for (int i = 0; i < r.niters; i++) {
        cr_assert_eq(r.iters[i].has_diag, 0);
        cr_assert_str_eq(r.iters[i].followed, "");
    }
    cr_assert_null(strstr(table, "      analysis: "), "%s", table);
    cr_assert_null(strstr(table, "following the analysis"));
    free(table);
    kf_run_result_free(&r);
    kf_graph_free(g);
}
