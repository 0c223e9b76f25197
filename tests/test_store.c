/*
 * The store (src/store/store.c) and its loader (src/agent/runs.c): schema creation, WAL,
 * the version guard, errors that name the path, the cache key, and a run written through
 * the store API loaded back as the loop's kf_run_result.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/agent.h"
#include "kforge/ir.h"
#include "kforge/store.h"

static char dir[256];

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/kf_test_store_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static kf_store *open_at(const char *name) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    kf_store *s = NULL;
    kf_error err = {0};
    kf_status st = kf_store_open(path, &s, &err);
    cr_assert_eq(st, KF_OK, "open %s: %s", path, err.msg);
    return s;
}

static long long scalar(kf_store *s, const char *sql) {
    sqlite3_stmt *q = NULL;
    cr_assert_eq(sqlite3_prepare_v2(kf_store_db(s), sql, -1, &q, NULL), SQLITE_OK, "%s", sql);
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW, "%s", sql);
    long long v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

TestSuite(store, .init = setup, .fini = teardown);

Test(store, creates_schema_in_wal_with_version) {
    kf_store *s = open_at("sub/dir/k.db"); /* the directory is created */
    cr_assert_eq(scalar(s, "PRAGMA user_version"), KF_STORE_SCHEMA_VERSION);
    cr_assert_eq(scalar(s, "PRAGMA foreign_keys"), 1);
    sqlite3_stmt *q = NULL;
    sqlite3_prepare_v2(kf_store_db(s), "PRAGMA journal_mode", -1, &q, NULL);
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(q, 0), "wal");
    sqlite3_finalize(q);
    const char *tables[] = {"tasks", "runs", "candidates", "evaluations", "iterations", "diagnoses", "transcripts"};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        char sql[200];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = '%s'", tables[i]);
        cr_assert_eq(scalar(s, sql), 1, "table %s", tables[i]);
    }
    kf_store_close(s);
    /* opening again migrates nothing and keeps the version */
    s = open_at("sub/dir/k.db");
    cr_assert_eq(scalar(s, "PRAGMA user_version"), KF_STORE_SCHEMA_VERSION);
    kf_store_close(s);
}

/* A version-1 file (made here from a new store: the reference column dropped, the version
 * set back) with a run in it opens migrated: version 2, the column there, the run intact. */
Test(store, migrates_a_version_1_file) {
    kf_store *s = open_at("v1.db");
    kf_error err = {0};
    char hash[17];
    cr_assert_eq(kf_store_task_put(s, "t1", "input x: f32[4]\noutput y = relu(x)\n", hash, &err), KF_OK, "%s", err.msg);
    kf_store_run r;
    memset(&r, 0, sizeof r);
    snprintf(r.task, sizeof r.task, "%s", hash);
    snprintf(r.task_name, sizeof r.task_name, "t1");
    snprintf(r.agent, sizeof r.agent, "builtin");
    r.iters_planned = 3;
    cr_assert_eq(kf_store_run_begin(s, &r, &err), KF_OK, "%s", err.msg);
    char id[17];
    snprintf(id, sizeof id, "%s", r.id);
    kf_store_run_clear(&r);
    cr_assert_eq(sqlite3_exec(kf_store_db(s), "ALTER TABLE runs DROP COLUMN reference; ALTER TABLE runs DROP COLUMN phases; "
                              "ALTER TABLE runs DROP COLUMN result_from; ALTER TABLE runs DROP COLUMN result_detail; "
                              "DROP TABLE refsets; PRAGMA user_version = 1",
                              NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(kf_store_db(s)));
    cr_assert_eq(scalar(s, "SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'reference'"), 0);
    kf_store_close(s);

    s = open_at("v1.db");
    cr_assert_eq(scalar(s, "PRAGMA user_version"), KF_STORE_SCHEMA_VERSION);
    cr_assert_eq(scalar(s, "SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'reference'"), 1);
    kf_store_run got;
    cr_assert_eq(kf_store_run_get(s, id, &got, &err), KF_OK, "%s", err.msg);
    cr_expect_str_eq(got.task_name, "t1");
    cr_expect_eq(got.iters_planned, 3);
    cr_expect_str_eq(got.reference, "");
    kf_store_run_clear(&got);
    cr_assert_eq(kf_store_run_reference(s, id, "reference.c", &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_store_run_get(s, id, &got, &err), KF_OK, "%s", err.msg);
    cr_expect_str_eq(got.reference, "reference.c");
    kf_store_run_clear(&got);
    kf_store_close(s);
}

Test(store, refuses_newer_schema_and_non_database) {
    char path[400];
    snprintf(path, sizeof path, "%s/new.db", dir);
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", KF_STORE_SCHEMA_VERSION + 1);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    kf_store *s = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_store_open(path, &s, &err), KF_ERR_UNSUPPORTED);
    cr_assert_null(s);
    cr_assert_str_eq(err.file, path);
    cr_assert(strstr(err.msg, "newer"), "%s", err.msg);

    snprintf(path, sizeof path, "%s/text.db", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 200; i++) fputs("this is not a database at all\n", f);
    fclose(f);
    memset(&err, 0, sizeof err);
    cr_assert_eq(kf_store_open(path, &s, &err), KF_ERR_PARSE);
    cr_assert_str_eq(err.file, path);
    cr_assert(strstr(err.msg, "not an SQLite database"), "%s", err.msg);
}

Test(store, default_path_order) {
    char buf[512];
    kf_error err = {0};
    setenv("KFORGE_STORE", "/x/a.db", 1);
    setenv("XDG_DATA_HOME", "/xdg", 1);
    cr_assert_eq(kf_store_default_path(buf, sizeof buf, &err), KF_OK);
    cr_assert_str_eq(buf, "/x/a.db");
    unsetenv("KFORGE_STORE");
    kf_store_default_path(buf, sizeof buf, &err);
    cr_assert_str_eq(buf, "/xdg/kforge/kforge.db");
    unsetenv("XDG_DATA_HOME");
    setenv("HOME", "/home/u", 1);
    kf_store_default_path(buf, sizeof buf, &err);
    cr_assert_str_eq(buf, "/home/u/.local/share/kforge/kforge.db");
}

static const kf_store_key base_key = {"t1", "void k(){}", "-DVW=4", "cpu", "cpu:0|Xeon|avx2|", "cc: gcc 12|-O3",
                                      "sets=3 threads=2 fresh=0 mc-every=0"};

Test(store, cache_key_parts) {
    char a[17], b[17];
    kf_store_cache_key(&base_key, a);
    kf_store_cache_key(&base_key, b);
    cr_assert_str_eq(a, b);
    cr_assert_eq(strlen(a), 16);
    kf_store_key k = base_key;
    k.flags = "-DVW=8";
    kf_store_cache_key(&k, b);
    cr_assert_str_neq(a, b, "flags");
    k = base_key;
    k.device = "cpu:0|EPYC|avx2|";
    kf_store_cache_key(&k, b);
    cr_assert_str_neq(a, b, "device");
    k = base_key;
    k.compiler = "cc: gcc 13|-O3";
    kf_store_cache_key(&k, b);
    cr_assert_str_neq(a, b, "compiler");
    k = base_key;
    k.settings = "sets=3 threads=1 fresh=0 mc-every=0";
    kf_store_cache_key(&k, b);
    cr_assert_str_neq(a, b, "settings");
    /* part boundaries count: moving a character between parts is another key */
    k = base_key;
    k.source = "void k(){} ";
    k.flags = "DVW=4";
    kf_store_cache_key(&k, b);
    cr_assert_str_neq(a, b, "boundaries");
}

/* A run with three iterations: ok (best), mismatch, ok slower with a diagnosis. */
static void write_run(kf_store *s, char id[17], char task[17]) {
    kf_error err = {0};
    cr_assert_eq(kf_store_task_put(s, "t", "task t\ninput x: f32[8]\noutput y = x * 2\n", task, &err), KF_OK, "%s", err.msg);
    kf_store_run r;
    memset(&r, 0, sizeof r);
    snprintf(r.task, sizeof r.task, "%s", task);
    snprintf(r.task_name, sizeof r.task_name, "t");
    snprintf(r.platform, sizeof r.platform, "cpu");
    snprintf(r.device, sizeof r.device, "Xeon");
    snprintf(r.agent, sizeof r.agent, "builtin");
    r.seed = 42;
    r.iters_planned = 5;
    r.device_json = kf_strdup("{\"device\":{\"platform\":\"cpu\",\"name\":\"Xeon\",\"threads\":2,\"ceilings\":"
                              "{\"measured\":true,\"copy_gbs\":20}},\"roofline\":{\"bytes\":64,\"flops\":8,"
                              "\"floor_ms\":0.5,\"bound\":\"memory\"},\"plan\":\"ewise[1 ops]\"}");
    cr_assert_eq(kf_store_run_begin(s, &r, &err), KF_OK, "%s", err.msg);
    snprintf(id, 17, "%s", r.id);
    kf_store_run_clear(&r);
    const char *srcs[] = {"src one", "src two", "src three"};
    const char *stat[] = {"ok", "mismatch", "ok"};
    double ms[] = {1.5, 0, 2.5};
    for (int i = 0; i < 3; i++) {
        kf_store_key k = base_key;
        k.task = task;
        k.source = srcs[i];
        kf_store_iter it;
        memset(&it, 0, sizeof it);
        kf_store_cache_key(&k, it.key);
        it.iter = i + 1;
        snprintf(it.label, sizeof it.label, "cand %d", i + 1);
        snprintf(it.agent, sizeof it.agent, "builtin");
        it.source = srcs[i];
        snprintf(it.flags, sizeof it.flags, "%s", k.flags);
        snprintf(it.ev.status, sizeof it.ev.status, "%s", stat[i]);
        snprintf(it.ev.detail, sizeof it.ev.detail, i == 1 ? "y[3]: got 1 want 2" : "");
        it.ev.timed = ms[i] > 0;
        it.ev.time_ms = ms[i];
        it.ev.sets_run = 3;
        it.best_so_far = i == 0;
        it.pct_floor = ms[i] > 0 ? 50 / ms[i] : 0;
        it.gbs = 1.25 * (i + 1);
        it.occupancy = -1;
        if (i == 2) {
            it.diag_json = "{\"bound\":\"memory\",\"achieved\":0.4,\"occupancy\":null,\"evidence\":[\"e1\"],"
                           "\"recommendations\":[{\"param\":\"vw\",\"dir\":1,\"score\":0.5,\"why\":\"wider\"}]}";
            snprintf(it.bound, sizeof it.bound, "memory");
        }
        cr_assert_eq(kf_store_iter_put(s, id, &k, &it, &err), KF_OK, "%s", err.msg);
    }
}

Test(store, cache_hit_and_miss) {
    kf_store *s = open_at("c.db");
    char id[17], task[17];
    write_run(s, id, task);
    kf_store_key k = base_key;
    k.task = task;
    k.source = "src one";
    char key[17];
    kf_store_cache_key(&k, key);
    kf_store_eval ev;
    int found = 0;
    kf_error err = {0};
    cr_assert_eq(kf_store_cache_get(s, key, &ev, &found, &err), KF_OK);
    cr_assert_eq(found, 1);
    cr_assert_str_eq(ev.status, "ok");
    cr_assert_float_eq(ev.time_ms, 1.5, 1e-12);
    cr_assert_str_eq(ev.measured_by, id);
    cr_assert_gt(ev.measured_at, 1e9);
    /* another compiler: a miss */
    k.compiler = "cc: clang 16|-O3";
    kf_store_cache_key(&k, key);
    cr_assert_eq(kf_store_cache_get(s, key, &ev, &found, &err), KF_OK);
    cr_assert_eq(found, 0);
    kf_store_close(s);
}

Test(store, run_loads_back_as_written) {
    kf_store *s = open_at("r.db");
    char id[17], task[17];
    write_run(s, id, task);
    kf_store_run fin;
    memset(&fin, 0, sizeof fin);
    snprintf(fin.id, sizeof fin.id, "%s", id);
    snprintf(fin.status, sizeof fin.status, "done");
    fin.best_iter = 1;
    fin.best_ms = 1.5;
    fin.best_pct = 33.3;
    fin.wall_s = 9.5;
    snprintf(fin.memcheck, sizeof fin.memcheck, "off");
    kf_error err = {0};
    cr_assert_eq(kf_store_run_finish(s, &fin, &err), KF_OK, "%s", err.msg);

    kf_run_result r;
    kf_store_run info;
    char prefix[7];
    snprintf(prefix, sizeof prefix, "%.6s", id);
    cr_assert_eq(kf_run_load(s, prefix, &r, &info, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(info.id, id);
    cr_assert_str_eq(info.status, "done");
    cr_assert_eq(info.iters_done, 3);
    cr_assert_eq(info.iters_planned, 5);
    cr_assert_eq(info.seed, 42);
    cr_assert_str_eq(r.run_id, id);
    cr_assert_str_eq(r.dev.platform, "cpu");
    cr_assert_str_eq(r.dev.name, "Xeon");
    cr_assert_eq(r.dev.threads, 2);
    cr_assert(r.ceil.measured);
    cr_assert_float_eq(r.roof.floor_s, 0.5e-3, 1e-12);
    cr_assert_str_eq(r.roof.bound, "memory");
    cr_assert_str_eq(r.plan, "ewise[1 ops]");
    cr_assert_eq(r.niters, 3);
    cr_assert_eq(r.best, 0);
    cr_assert_str_eq(r.best_source, "src one");
    cr_assert_str_eq(r.best_flags, "-DVW=4");
    cr_assert_float_eq(r.wall_s, 9.5, 1e-12);
    cr_assert_eq(r.iters[1].res.status, KF_V_MISMATCH);
    cr_assert_str_eq(r.iters[1].res.detail, "y[3]: got 1 want 2");
    cr_assert_null(r.iters[1].source, "a failed candidate keeps no source, as in the loop");
    cr_assert_str_eq(r.iters[2].label, "cand 3");
    cr_assert_float_eq(r.iters[2].res.time_ms, 2.5, 1e-12);
    cr_assert_float_eq(r.iters[2].perf.gbs, 3.75, 1e-12);
    cr_assert(r.iters[2].has_diag);
    cr_assert_str_eq(r.iters[2].diag.bound, "memory");
    cr_assert_eq(r.iters[2].diag.occupancy, -1);
    cr_assert_eq(r.iters[2].diag.nrecs, 1);
    cr_assert_str_eq(r.iters[2].diag.rec[0].param, "vw");
    cr_assert_str_eq(r.iters[2].diag.rec[0].why, "wider");
    cr_assert_eq(r.iters[0].cached, 0);
    kf_run_result_free(&r);
    kf_store_run_clear(&info);

    /* errors name the store */
    cr_assert_eq(kf_run_load(s, "ffffffffffff", &r, NULL, &err), KF_ERR_ARG);
    cr_assert_str_eq(err.file, kf_store_path(s));
    kf_store_close(s);
}

/* End run id as done with a result record (issue 26), as the loop does at a run's end. */
static void finish_with_result(kf_store *s, const char *id, int best_iter, const char *from, const char *detail) {
    kf_error err = {0};
    kf_store_run fin;
    memset(&fin, 0, sizeof fin);
    snprintf(fin.id, sizeof fin.id, "%s", id);
    snprintf(fin.status, sizeof fin.status, "done");
    fin.best_iter = best_iter;
    snprintf(fin.result_from, sizeof fin.result_from, "%s", from);
    snprintf(fin.result_detail, sizeof fin.result_detail, "%s", detail);
    cr_assert_eq(kf_store_run_finish(s, &fin, &err), KF_OK, "%s", err.msg);
}

/* The run's result record (run.json's result, issue 26): each kind written at the run's end
 * comes back from the store, as kf_store_run_get and as the loop's kf_run_result. */
Test(store, result_record_round_trips_each_kind) {
    kf_store *s = open_at("res.db");
    const char *from[3] = {"builtin", "llm", "none"};
    const char *detail[3] = {"the builtin generator's kernel of iteration 1, verified against the float64 interpreter",
                             "the model's kernel of iteration 1, verified against the module (its float64 reference)",
                             "no verified kernel: the builtin covers 2 of 3 nodes; not covered: conv2d (node 1)"};
    kf_error err = {0};
    for (int k = 0; k < 3; k++) {
        char id[17], task[17];
        write_run(s, id, task);
        finish_with_result(s, id, k == 2 ? 0 : 1, from[k], detail[k]);
        kf_store_run got;
        cr_assert_eq(kf_store_run_get(s, id, &got, &err), KF_OK, "%s", err.msg);
        cr_expect_str_eq(got.result_from, from[k]);
        cr_expect_str_eq(got.result_detail, detail[k]);
        kf_store_run_clear(&got);
        kf_run_result r;
        cr_assert_eq(kf_run_load(s, id, &r, NULL, &err), KF_OK, "%s", err.msg);
        cr_expect_str_eq(r.result_from, from[k]);
        cr_expect_str_eq(r.outcome, detail[k]);
        /* and in the run's JSON as run.json has it */
        kf_store_run info;
        cr_assert_eq(kf_store_run_get(s, id, &info, &err), KF_OK, "%s", err.msg);
        char *js = kf_run_json_text(&r, &info);
        char want[200];
        snprintf(want, sizeof want, "\"from\": \"%s\"", from[k]);
        cr_expect(strstr(js, "\"result\"") && strstr(js, want), "%s", js);
        free(js);
        kf_store_run_clear(&info);
        kf_run_result_free(&r);
    }
    kf_store_close(s);
}

/* A version 3 store (before the result record) opens, migrates, reads its runs with an
 * empty result, and records one from then on. */
Test(store, migrates_a_version_3_file) {
    kf_store *s = open_at("v3.db");
    char id[17], task[17];
    write_run(s, id, task);
    kf_error err = {0};
    cr_assert_eq(sqlite3_exec(kf_store_db(s), "ALTER TABLE runs DROP COLUMN result_from; "
                              "ALTER TABLE runs DROP COLUMN result_detail; PRAGMA user_version = 3",
                              NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(kf_store_db(s)));
    kf_store_close(s);
    s = open_at("v3.db");
    cr_assert_eq(scalar(s, "PRAGMA user_version"), KF_STORE_SCHEMA_VERSION);
    cr_assert_eq(scalar(s, "SELECT count(*) FROM pragma_table_info('runs') WHERE name LIKE 'result_%'"), 2);
    kf_store_run got;
    cr_assert_eq(kf_store_run_get(s, id, &got, &err), KF_OK, "%s", err.msg);
    cr_expect_eq(got.iters_done, 3);
    cr_expect_str_eq(got.result_from, "");
    cr_expect_str_eq(got.result_detail, "");
    kf_store_run_clear(&got);
    finish_with_result(s, id, 0, "none", "no verified kernel");
    cr_assert_eq(kf_store_run_get(s, id, &got, &err), KF_OK, "%s", err.msg);
    cr_expect_str_eq(got.result_from, "none");
    kf_store_run_clear(&got);
    kf_store_close(s);
}

Test(store, replayed_row_is_kept_and_counted) {
    kf_store *s = open_at("p.db");
    char id[17], task[17];
    write_run(s, id, task);
    kf_store_key k = base_key;
    k.task = task;
    k.source = "src one";
    kf_store_iter it;
    memset(&it, 0, sizeof it);
    kf_store_cache_key(&k, it.key);
    it.iter = 1;
    it.source = k.source;
    it.cached = 1;
    kf_store_eval ev;
    int found = 0;
    kf_error err = {0};
    kf_store_cache_get(s, it.key, &ev, &found, &err);
    cr_assert_eq(found, 1);
    it.ev = ev;
    snprintf(it.label, sizeof it.label, "replayed");
    cr_assert_eq(kf_store_iter_put(s, id, &k, &it, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(scalar(s, "SELECT replayed FROM runs"), 1);
    cr_assert_eq(scalar(s, "SELECT cached FROM iterations WHERE iter = 1"), 0, "the original row stays");
    cr_assert_eq(scalar(s, "SELECT count(*) FROM evaluations"), 3, "a cached row adds no evaluation");
    kf_store_close(s);
}

Test(store, stale_running_run_is_interrupted) {
    kf_store *s = open_at("i.db");
    char id[17], task[17];
    write_run(s, id, task);
    /* a pid that cannot be alive on this host */
    char sql[200];
    snprintf(sql, sizeof sql, "UPDATE runs SET pid = 2147483646 WHERE id = '%s'", id);
    cr_assert_eq(sqlite3_exec(kf_store_db(s), sql, NULL, NULL, NULL), SQLITE_OK);
    kf_store_run r;
    kf_error err = {0};
    cr_assert_eq(kf_store_run_get(s, id, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(r.status, "interrupted");
    kf_store_run_clear(&r);
    kf_store_close(s);
}

/* A run of task on platform with one iteration: source src, status st, ms, % floor. */
static void put_one(kf_store *s, const char *task, const char *platform, const char *src, const char *st, double ms,
                    double pct, char run[17]) {
    kf_error err = {0};
    kf_store_run r;
    memset(&r, 0, sizeof r);
    snprintf(r.task, sizeof r.task, "%s", task);
    snprintf(r.task_name, sizeof r.task_name, "t");
    snprintf(r.platform, sizeof r.platform, "%s", platform);
    snprintf(r.device, sizeof r.device, "dev-%s", platform);
    r.iters_planned = 1;
    cr_assert_eq(kf_store_run_begin(s, &r, &err), KF_OK, "%s", err.msg);
    snprintf(run, 17, "%s", r.id);
    kf_store_run_clear(&r);
    kf_store_key k = base_key;
    k.task = task;
    k.source = src;
    k.platform = platform;
    kf_store_iter it;
    memset(&it, 0, sizeof it);
    kf_store_cache_key(&k, it.key);
    it.iter = 1;
    it.source = src;
    snprintf(it.flags, sizeof it.flags, "-DVW=%d", (int)ms);
    snprintf(it.ev.status, sizeof it.ev.status, "%s", st);
    it.ev.timed = 1;
    it.ev.time_ms = ms;
    it.pct_floor = pct;
    it.best_so_far = 1;
    it.occupancy = -1;
    cr_assert_eq(kf_store_iter_put(s, run, &k, &it, &err), KF_OK, "%s", err.msg);
}

Test(store, best_per_platform_ranks_by_pct_floor_and_excludes) {
    kf_store *s = open_at("b.db");
    char task[17], other[17], run[17], cpu_b[17], ocl_c[17], ocl_d[17];
    kf_error err = {0};
    cr_assert_eq(kf_store_task_put(s, "t", "task t\n", task, &err), KF_OK);
    cr_assert_eq(kf_store_task_put(s, "u", "task u\n", other, &err), KF_OK);
    char h[17];
    kf_store_task_hash("task t\n", h);
    cr_assert_str_eq(h, task);
    put_one(s, task, "cpu", "cpu a", "ok", 1.0, 10, run);
    put_one(s, task, "cpu", "cpu b", "ok", 2.0, 40, cpu_b);   /* slower, nearer its floor: the best */
    put_one(s, task, "opencl", "ocl c", "ok", 0.5, 20, ocl_c);
    put_one(s, task, "opencl", "ocl d", "ok", 0.4, 30, ocl_d);
    put_one(s, task, "metal", "mtl e", "mismatch", 0.1, 0, run);
    put_one(s, other, "cuda", "cuda f", "ok", 0.1, 90, run); /* another task */
    /* the final memory check failed d after it was stored: it no longer counts */
    cr_assert_eq(kf_store_iter_verdict(s, ocl_d, 1, "memcheck", "invalid read", "error", &err), KF_OK);

    kf_store_best *b = NULL;
    int n = 0;
    cr_assert_eq(kf_store_best_per_platform(s, task, NULL, NULL, &b, &n, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(b[0].platform, "cpu");
    cr_assert_str_eq(b[0].source, "cpu b");
    cr_assert_str_eq(b[0].run, cpu_b);
    cr_assert_str_eq(b[0].device, "dev-cpu");
    cr_assert_str_eq(b[0].flags, "-DVW=2");
    cr_assert_float_eq(b[0].pct_floor, 40, 1e-12);
    cr_assert_float_eq(b[0].time_ms, 2.0, 1e-12);
    cr_assert_eq(b[0].iter, 1);
    cr_assert_str_eq(b[1].platform, "opencl");
    cr_assert_str_eq(b[1].source, "ocl c");
    cr_assert_str_eq(b[1].run, ocl_c);
    kf_store_best_free(b, n);

    cr_assert_eq(kf_store_best_per_platform(s, task, "opencl", NULL, &b, &n, &err), KF_OK);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(b[0].source, "ocl c");
    kf_store_best_free(b, n);
    cr_assert_eq(kf_store_best_per_platform(s, task, NULL, "cpu", &b, &n, &err), KF_OK);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(b[0].platform, "opencl");
    kf_store_best_free(b, n);
    cr_assert_eq(kf_store_best_per_platform(s, task, "metal", NULL, &b, &n, &err), KF_OK);
    cr_assert_eq(n, 0);
    cr_assert_null(b);

    /* transfer: the best on any other platform, by % of floor */
    kf_store_best one;
    int found = 0;
    cr_assert_eq(kf_store_best_elsewhere(s, task, "opencl", &one, &found, &err), KF_OK);
    cr_assert_eq(found, 1);
    cr_assert_str_eq(one.source, "cpu b");
    kf_store_best_clear(&one);
    cr_assert_eq(kf_store_best_elsewhere(s, task, "cpu", &one, &found, &err), KF_OK);
    cr_assert_eq(found, 1);
    cr_assert_str_eq(one.source, "ocl c");
    kf_store_best_clear(&one);
    cr_assert_eq(kf_store_best_elsewhere(s, task, "cuda", &one, &found, &err), KF_OK);
    cr_assert_str_eq(one.source, "cpu b", "the other task's 90%% cuda kernel is not this task's");
    kf_store_best_clear(&one);
    cr_assert_eq(kf_store_best_elsewhere(s, other, "cuda", &one, &found, &err), KF_OK);
    cr_assert_eq(found, 0);
    cr_assert_null(one.source);
    kf_store_close(s);
}

Test(store, transcript_call_is_one_transaction) {
    kf_store *s = open_at("t.db");
    char id[17], task[17];
    write_run(s, id, task);
    kf_error err = {0};
    cr_assert_eq(kf_store_transcript_call(s, id, 1, "the ask", "assistant", "the reply", 100, 50, &err), KF_OK);
    cr_assert_eq(kf_store_transcript_call(s, id, 2, NULL, "error", "HTTP 500", 0, 0, &err), KF_OK);
    cr_assert_eq(scalar(s, "SELECT count(*) FROM transcripts"), 3);
    cr_assert_eq(scalar(s, "SELECT count(*) FROM transcripts WHERE iter = 1 AND role = 'user' AND text = 'the ask' "
                           "AND prompt_tokens = 0"), 1);
    cr_assert_eq(scalar(s, "SELECT count(*) FROM transcripts WHERE iter = 1 AND role = 'assistant' AND "
                           "prompt_tokens = 100 AND completion_tokens = 50"), 1);
    cr_assert_eq(scalar(s, "SELECT count(*) FROM transcripts WHERE iter = 2 AND role = 'error'"), 1);
    /* when the answer's row is refused, the ask's goes too */
    sqlite3_exec(kf_store_db(s), "CREATE TEMP TRIGGER no_errors BEFORE INSERT ON transcripts WHEN "
                                 "NEW.role = 'assistant' BEGIN SELECT RAISE(ABORT, 'refused'); END", NULL, NULL, NULL);
    cr_assert_neq(kf_store_transcript_call(s, id, 3, "half", "assistant", "never", 1, 1, &err), KF_OK);
    cr_assert_eq(scalar(s, "SELECT count(*) FROM transcripts WHERE iter = 3"), 0, "half a call was stored");
    kf_store_close(s);
}

/* A task parsed from a string has no file for the store to keep: the loop says what to set
 * (kf_loop_opts.task_text) instead of "cannot open", and with it the run is recorded. */
Test(store, a_task_without_a_file_needs_its_text) {
    static const char task[] = "task twice\ninput x: f32[1000]\noutput y = x * 2\n";
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(task, "<string>", &g, &err), KF_OK, "%s", err.msg);
    kf_store *s = open_at("text.db");
    char cache[400], out[400];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    setenv("KFORGE_CACHE_DIR", cache, 1);
    kf_loop_opts o;
    kf_loop_opts_default(&o);
    o.iters = 1;
    o.out_dir = out;
    o.memcheck = KF_MEMCHECK_OFF;
    o.store = s;
    kf_run_result r;
    cr_assert_eq(kf_loop_run(g, &o, &r, &err), KF_ERR_IO);
    cr_assert(strstr(err.msg, "kf_loop_opts.task_text"), "%s", err.msg);
    kf_run_result_free(&r);
    o.task_text = task;
    cr_assert_eq(kf_loop_run(g, &o, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(scalar(s, "SELECT count(*) FROM tasks WHERE text LIKE 'task twice%'"), 1);
    kf_run_result_free(&r);
    kf_store_close(s);
    kf_graph_free(g);
}
