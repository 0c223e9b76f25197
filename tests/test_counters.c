/*
 * Profiler counters per candidate in the loop (kforge synth --counters ncu, counters.c):
 * refused where there is no profiled run (the CPU) with the reason; the rows' JSON form
 * round-trips; and, on a machine with a CUDA device and Nsight Compute (else skipped with
 * the reason), every verified candidate of a real run is profiled: its rows name its
 * kernel, the diagnosis reads them (achieved occupancy, the counters' evidence line), the
 * run record and the store keep them, and the store gives them back.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent_int.h"
#include "kforge/agent.h"
#include "kforge/ir.h"
#include "kforge/store.h"

static char outdir[256];

static void setup(void) {
    snprintf(outdir, sizeof outdir, "/tmp/kf-counters-%d", (int)getpid());
    char cache[300];
    snprintf(cache, sizeof cache, "%s/cache", outdir);
    setenv("KFORGE_CACHE_DIR", cache, 1);
}

static void teardown(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", outdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", outdir);
}

TestSuite(counters, .init = setup, .fini = teardown, .timeout = 600);

Test(counters, ncu_is_refused_where_there_is_no_profiled_run) {
    kf_error err = {0};
    kf_graph *g;
    cr_assert_eq(kf_parse_string("task t\ninput x: f32[1000]\noutput y = x * 2\n", "<test>", &g, &err), KF_OK);
    kf_loop_opts o;
    kf_loop_opts_default(&o);
    o.iters = 1;
    o.out_dir = outdir;
    o.memcheck = KF_MEMCHECK_OFF;
    o.counters = KF_COUNTERS_NCU;
    kf_run_result r;
    cr_assert_eq(kf_loop_run(g, &o, &r, &err), KF_ERR_ARG);
    cr_assert(strstr(err.msg, "--counters ncu profiles CUDA kernels") && strstr(err.msg, "cpu"), "%s", err.msg);
    cr_assert_eq(r.niters, 0, "nothing may run when the option cannot be honoured");
    kf_run_result_free(&r);
    kf_graph_free(g);
}

Test(counters, rows_round_trip_through_json) {
    kf_counters c[2];
    memset(c, 0, sizeof c);
    for (int i = 0; i < 2; i++) {
        kf_counters *k = &c[i];
        snprintf(k->kernel, sizeof k->kernel, "kf_s%d_reduce", i);
        snprintf(k->source, sizeof k->source, "ncu");
        k->duration_s = 1e-5 * (i + 1);
        k->dram_pct = 61.5 + i;
        k->sm_pct = 20;
        k->mem_pct = -1; /* not measured: left out, read back as not measured */
        k->achieved_occ_pct = 47.25;
        k->theoretical_occ_pct = 50;
        k->l1_hit_pct = 3;
        k->l2_hit_pct = 40;
        k->bank_conflicts = 12;
        k->dram_bytes = 1 << 20;
        k->regs = 32;
        k->smem_bytes = 256;
        k->grid = 132;
        k->block = 256;
        k->ipc = k->cache_miss_pct = k->branch_miss_pct = -1;
        k->nstalls = 2;
        snprintf(k->stall[0].name, sizeof k->stall[0].name, "long_scoreboard");
        k->stall[0].pct = 70;
        snprintf(k->stall[1].name, sizeof k->stall[1].name, "barrier");
        k->stall[1].pct = 10;
    }
    json_t *j = kf_agent_counters_json(c, 2);
    cr_assert_null(json_object_get(json_array_get(j, 0), "mem_pct"));
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    json_t *back = json_loads(text, 0, NULL);
    kf_counters *r = NULL;
    cr_assert_eq(kf_agent_counters_parse(back, &r), 2);
    json_decref(back);
    for (int i = 0; i < 2; i++) {
        cr_assert_str_eq(r[i].kernel, c[i].kernel);
        cr_assert_str_eq(r[i].source, "ncu");
        cr_assert_float_eq(r[i].duration_s, c[i].duration_s, 1e-12);
        cr_assert_float_eq(r[i].dram_pct, c[i].dram_pct, 1e-9);
        cr_assert_lt(r[i].mem_pct, 0);
        cr_assert_float_eq(r[i].achieved_occ_pct, 47.25, 1e-9);
        cr_assert_float_eq(r[i].bank_conflicts, 12, 1e-9);
        cr_assert_float_eq(r[i].grid, 132, 1e-9);
        cr_assert_eq(r[i].nstalls, 2);
        cr_assert_str_eq(r[i].stall[1].name, "barrier");
        cr_assert_float_eq(r[i].stall[0].pct, 70, 1e-9);
    }
    kf_buf t = {0};
    kf_agent_counters_text(r, 2, &t);
    cr_assert(strstr(t.data, "kf_s1_reduce") && strstr(t.data, "achieved occupancy 47.2") &&
              strstr(t.data, "long_scoreboard 70%"), "%s", t.data);
    kf_buf_free(&t);
    free(r);
    free(text);
    kf_counters *none = NULL;
    cr_assert_eq(kf_agent_counters_parse(NULL, &none), 0);
    cr_assert_null(none);
}

/* A real run on the GPU: every verified candidate profiled, read, recorded, stored. */
Test(counters, every_verified_cuda_candidate_is_profiled) {
    char tool[1024];
    kf_error err = {0};
    kf_backend *b = NULL;
    if (kf_backend_open("cuda", &b, &err) != KF_OK) cr_skip_test("no usable CUDA device: %s", err.msg);
    kf_backend_close(b);
    if (kf_verify_profiler_tool("cuda", tool, sizeof tool, &err) != KF_OK) cr_skip_test("%s", err.msg);
    kf_graph *g;
    static const char task[] = "task rowsoftmax\ninput x: f32[512, 2048]\noutput y = softmax(x, axis=1)\n";
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "%s", err.msg);
    char dbpath[400];
    snprintf(dbpath, sizeof dbpath, "%s/store.db", outdir);
    cr_assert_eq(kf_mkdirs(outdir, &err), KF_OK);
    kf_store *s;
    cr_assert_eq(kf_store_open(dbpath, &s, &err), KF_OK, "%s", err.msg);
    kf_loop_opts o;
    kf_loop_opts_default(&o);
    o.target = "cuda";
    o.iters = 3;
    o.seed = 7;
    o.out_dir = outdir;
    o.memcheck = KF_MEMCHECK_OFF;
    o.counters = KF_COUNTERS_NCU;
    o.store = s;
    o.task_text = task; /* the store keeps the task's text (there is no file) */
    char *table = NULL;
    size_t len = 0;
    o.table = open_memstream(&table, &len);
    kf_run_result r;
    kf_status st = kf_loop_run(g, &o, &r, &err);
    fclose(o.table);
    cr_assert_eq(st, KF_OK, "loop: %s\n%s", err.msg, table);
    cr_assert(strstr(table, "counters: each verified candidate runs once more under"), "%s", table);
    int profiled = 0;
    for (int i = 0; i < r.niters; i++) {
        const kf_iter_record *it = &r.iters[i];
        if (it->res.status != KF_V_OK) continue;
        cr_assert_gt(it->ncounters, 0, "iter %d (%s) has no counters:\n%s", it->iter, it->label, table);
        profiled++;
        /* the rows are this candidate's launches: its kernels, as its resource report names them */
        for (int k = 0; k < it->ncounters; k++)
            cr_assert(strstr(it->res.resources, it->counters[k].kernel), "row kernel %s not in '%s'",
                      it->counters[k].kernel, it->res.resources);
        cr_assert_geq(it->counters[0].achieved_occ_pct, 0);
        cr_assert_gt(it->counters[0].duration_s, 0);
        cr_assert(it->has_diag);
        cr_assert_geq(it->diag.achieved_occupancy, 0, "the diagnosis did not read the counters");
        int said = 0;
        for (int e = 0; e < it->diag.nevidence; e++) said |= strncmp(it->diag.evidence[e], "ncu ", 4) == 0;
        cr_assert(said, "no counters evidence in iter %d:\n%s", it->iter, table);
    }
    cr_assert_gt(profiled, 0, "nothing verified:\n%s", table);
    /* run.json keeps them */
    char path[600];
    snprintf(path, sizeof path, "%s/run.json", outdir);
    json_t *run = json_load_file(path, 0, NULL);
    cr_assert_not_null(run);
    json_t *it0 = json_array_get(json_object_get(run, "iterations"), 0);
    cr_assert_gt(json_array_size(json_object_get(it0, "counters")), 0, "run.json iteration 1 has no counters");
    json_decref(run);
    /* the store gives them back */
    kf_run_result back;
    kf_store_run info;
    cr_assert_eq(kf_run_load(s, r.run_id, &back, &info, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(back.niters, r.niters);
    for (int i = 0; i < r.niters; i++) {
        cr_assert_eq(back.iters[i].ncounters, r.iters[i].ncounters);
        if (r.iters[i].ncounters)
            cr_assert_float_eq(back.iters[i].counters[0].achieved_occ_pct, r.iters[i].counters[0].achieved_occ_pct,
                               1e-6);
    }
    kf_run_result_free(&back);
    kf_store_run_clear(&info);
    kf_store_close(s);
    free(table);
    kf_run_result_free(&r);
    kf_graph_free(g);
}
