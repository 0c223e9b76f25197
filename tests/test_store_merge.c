/*
 * `kforge store merge` (src/store/merge.c) on real SQLite files: no row lost, none twice
 * when an input is merged again (or a merge of it is), evaluation numbers renumbered with
 * the iterations that point at them (a cached iteration of one run pointing at another
 * run's evaluation included), the cache served from the merged store, a run further along
 * replacing its older copy, an older schema migrated in a copy (the input untouched), a
 * newer one refused; and the command itself (--json, --help, exit codes, and a store that
 * `kforge synth` filled, merged, then serving a second synth from its cache).
 */
#include <criterion/criterion.h>
#include <sqlite3.h>

#include "kforge/store.h"
#include "store_cli.h"

static void setup(void) { cli_setup(NULL); }
static void teardown(void) { cli_teardown(); }
TestSuite(store_merge, .init = setup, .fini = teardown, .timeout = 300);

static const kf_store_key base_key = {"t", "", "-DVW=4", "cpu", "cpu:0|Xeon|avx2|", "cc: gcc 12|-O3",
                                      "sets=3 threads=2 fresh=0 mc-every=0"};

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", cli.dir, name); }

static kf_store *open_store(const char *name) {
    char p[300];
    path_of(p, sizeof p, name);
    kf_store *s = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_store_open(p, &s, &err), KF_OK, "%s: %s", p, err.msg);
    return s;
}

static long long q1(kf_store *s, const char *sql) {
    sqlite3_stmt *q = NULL;
    cr_assert_eq(sqlite3_prepare_v2(kf_store_db(s), sql, -1, &q, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(kf_store_db(s)));
    long long v = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int64(q, 0) : -1;
    sqlite3_finalize(q);
    return v;
}

/* A run of task `text` with n iterations (sources "<tag> k"), a transcript call on each and
 * a diagnosis on the last; the iteration `cached_from` (1-based, 0: none) reuses the first
 * iteration's evaluation of run `prev` as a cache hit. */
static void write_run(kf_store *s, const char *text, const char *tag, int n, char id[17], const char *prev_key) {
    kf_error err = {0};
    char task[17];
    cr_assert_eq(kf_store_task_put(s, "t", text, task, &err), KF_OK, "%s", err.msg);
    kf_store_run r;
    memset(&r, 0, sizeof r);
    snprintf(r.task, sizeof r.task, "%s", task);
    snprintf(r.task_name, sizeof r.task_name, "t");
    snprintf(r.platform, sizeof r.platform, "cpu");
    snprintf(r.agent, sizeof r.agent, "builtin");
    r.iters_planned = n;
    cr_assert_eq(kf_store_run_begin(s, &r, &err), KF_OK, "%s", err.msg);
    snprintf(id, 17, "%s", r.id);
    kf_store_run_clear(&r);
    for (int i = 0; i < n; i++) {
        char src[64];
        snprintf(src, sizeof src, "%s %d", tag, i + 1);
        kf_store_key k = base_key;
        k.task = task;
        k.source = src;
        kf_store_iter it;
        memset(&it, 0, sizeof it);
        kf_store_cache_key(&k, it.key);
        if (prev_key && i == 0) { /* the cache hit: the candidate and evaluation of an earlier run */
            snprintf(it.key, sizeof it.key, "%s", prev_key);
            kf_store_eval ev;
            int found = 0;
            cr_assert_eq(kf_store_cache_get(s, prev_key, &ev, &found, &err), KF_OK);
            cr_assert(found);
            it.ev = ev;
            it.cached = 1;
        } else {
            snprintf(it.ev.status, sizeof it.ev.status, "ok");
            it.ev.timed = 1;
            it.ev.time_ms = 1.0 + i;
            it.ev.sets_run = 3;
        }
        it.iter = i + 1;
        snprintf(it.label, sizeof it.label, "cand %d", i + 1);
        snprintf(it.agent, sizeof it.agent, "builtin");
        it.source = src;
        snprintf(it.flags, sizeof it.flags, "%s", k.flags);
        it.best_so_far = i == 0;
        it.occupancy = -1;
        if (i == n - 1) {
            it.diag_json = "{\"bound\":\"memory\"}";
            snprintf(it.bound, sizeof it.bound, "memory");
        }
        cr_assert_eq(kf_store_iter_put(s, id, &k, &it, &err), KF_OK, "%s", err.msg);
        cr_assert_eq(kf_store_transcript_call(s, id, i + 1, "ask", "assistant", "reply", 10, 5, &err), KF_OK, "%s",
                     err.msg);
    }
}

static void key_of(const char *text, const char *src, char key[17]) {
    char task[17];
    kf_store_task_hash(text, task);
    kf_store_key k = base_key;
    k.task = task;
    k.source = src;
    kf_store_cache_key(&k, key);
}

static const char *const T1 = "task a\ninput x: f32[8]\noutput y = x * 2\n";
static const char *const T2 = "task b\ninput x: f32[8]\noutput y = x + 1\n";

/* a.db: two runs of T1 (the second's first iteration a cache hit on the first's);
 * b.db: one run of T2. Both number their evaluations from 1. */
static void make_inputs(char a1[17], char a2[17], char b1[17]) {
    kf_store *a = open_store("a.db");
    write_run(a, T1, "a", 3, a1, NULL);
    char key[17];
    key_of(T1, "a 1", key);
    write_run(a, T1, "a2", 2, a2, key);
    kf_store_close(a);
    kf_store *b = open_store("b.db");
    write_run(b, T2, "b", 4, b1, NULL);
    kf_store_close(b);
}

static void merge(kf_store *out, const char *name, kf_store_merge_counts *c) {
    char p[300];
    path_of(p, sizeof p, name);
    kf_error err = {0};
    cr_assert_eq(kf_store_merge(out, p, c, &err), KF_OK, "merge %s: %s", p, err.msg);
}

static void expect_totals(kf_store *o) {
    cr_expect_eq(q1(o, "SELECT count(*) FROM runs"), 3);
    cr_expect_eq(q1(o, "SELECT count(*) FROM tasks"), 2);
    cr_expect_eq(q1(o, "SELECT count(*) FROM evaluations"), 3 + 1 + 4); /* the cache hit measured nothing */
    cr_expect_eq(q1(o, "SELECT count(*) FROM iterations"), 3 + 2 + 4);
    cr_expect_eq(q1(o, "SELECT count(*) FROM diagnoses"), 3);
    cr_expect_eq(q1(o, "SELECT count(*) FROM transcripts"), 2 * (3 + 2 + 4));
    cr_expect_eq(q1(o, "SELECT count(*) FROM candidates"), 3 + 1 + 4);
    /* every iteration points at an evaluation of its own candidate */
    cr_expect_eq(q1(o, "SELECT count(*) FROM iterations i JOIN evaluations e ON e.id = i.evaluation AND "
                       "e.candidate = i.candidate"), 9);
    cr_expect_eq(q1(o, "PRAGMA foreign_key_check"), -1);
    cr_expect_eq(q1(o, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check = 'ok'"), 1);
}

Test(store_merge, keeps_every_row_and_renumbers) {
    char a1[17], a2[17], b1[17];
    make_inputs(a1, a2, b1);
    kf_store *o = open_store("out.db");
    kf_store_merge_counts c;
    merge(o, "b.db", &c);
    cr_expect_eq(c.runs_added, 1);
    cr_expect_eq(c.evaluations, 4);
    merge(o, "a.db", &c); /* a's evaluation 1..4 collide with b's numbers: renumbered */
    cr_expect_eq(c.runs_added, 2);
    cr_expect_eq(c.evaluations, 4);
    cr_expect_eq(c.iterations, 5);
    cr_expect_eq(c.transcripts, 10);
    expect_totals(o);
    /* the cache hit of a2 still points at a1's evaluation of "a 1" */
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM iterations i JOIN evaluations e ON e.id = i.evaluation WHERE "
             "i.run = '%s' AND i.iter = 1 AND i.cached = 1 AND e.run = '%s' AND e.iter = 1", a2, a1);
    cr_expect_eq(q1(o, sql), 1);
    /* the cache serves a's kernel from the merged store, measured by a1 */
    char key[17];
    key_of(T1, "a 2", key);
    kf_store_eval ev;
    int found = 0;
    kf_error err = {0};
    cr_assert_eq(kf_store_cache_get(o, key, &ev, &found, &err), KF_OK);
    cr_expect_eq(found, 1);
    cr_expect_str_eq(ev.measured_by, a1);
    cr_expect_float_eq(ev.time_ms, 2.0, 1e-12);
    kf_store_run got;
    cr_assert_eq(kf_store_run_get(o, b1, &got, &err), KF_OK, "%s", err.msg);
    cr_expect_eq(got.iters_done, 4);
    kf_store_run_clear(&got);
    kf_store_close(o);
}

Test(store_merge, merging_again_adds_nothing) {
    char a1[17], a2[17], b1[17];
    make_inputs(a1, a2, b1);
    kf_store *o = open_store("out.db");
    kf_store_merge_counts c;
    merge(o, "a.db", &c);
    merge(o, "b.db", &c);
    merge(o, "a.db", &c);
    cr_expect_eq(c.runs_added + c.runs_updated + c.evaluations + c.iterations + c.transcripts + c.diagnoses +
                     c.candidates + c.tasks, 0);
    cr_expect_eq(c.runs_same, 2);
    expect_totals(o);
    kf_store_close(o);
    /* a merge of a merge, into a store that has one of the inputs already */
    kf_store *o2 = open_store("out2.db");
    merge(o2, "b.db", &c);
    merge(o2, "out.db", &c);
    cr_expect_eq(c.runs_added, 2);
    cr_expect_eq(c.runs_same, 1);
    expect_totals(o2);
    /* the output itself is refused */
    char p[300];
    path_of(p, sizeof p, "out2.db");
    kf_error err = {0};
    cr_expect_eq(kf_store_merge(o2, p, &c, &err), KF_ERR_ARG);
    kf_store_close(o2);
}

/* A copy of a store taken while its run had one iteration, merged first, then the store
 * with the run's three: the run and its rows are brought up to date, nothing doubled. */
Test(store_merge, a_run_further_along_replaces_its_copy) {
    kf_store *a = open_store("a.db");
    char id[17];
    write_run(a, T1, "a", 1, id, NULL);
    kf_store_close(a);
    char pa[300], pe[300];
    path_of(pa, sizeof pa, "a.db");
    path_of(pe, sizeof pe, "early.db");
    kf_store *early = open_store("early.db");
    kf_store_merge_counts c;
    merge(early, "a.db", &c);
    kf_store_close(early);
    /* two more iterations of the same run in a.db */
    a = open_store("a.db");
    kf_error err = {0};
    for (int i = 1; i < 3; i++) {
        char src[16];
        snprintf(src, sizeof src, "late %d", i);
        kf_store_key k = base_key;
        char task[17];
        kf_store_task_hash(T1, task);
        k.task = task;
        k.source = src;
        kf_store_iter it;
        memset(&it, 0, sizeof it);
        kf_store_cache_key(&k, it.key);
        it.iter = i + 1;
        snprintf(it.ev.status, sizeof it.ev.status, "ok");
        it.source = src;
        it.occupancy = -1;
        cr_assert_eq(kf_store_iter_put(a, id, &k, &it, &err), KF_OK, "%s", err.msg);
    }
    kf_store_close(a);
    kf_store *o = open_store("out.db");
    merge(o, "early.db", &c);
    cr_expect_eq(c.runs_added, 1);
    merge(o, "a.db", &c);
    cr_expect_eq(c.runs_updated, 1);
    cr_expect_eq(c.iterations, 2);
    cr_expect_eq(q1(o, "SELECT iters_planned FROM runs"), 1);
    cr_expect_eq(q1(o, "SELECT count(*) FROM iterations"), 3);
    cr_expect_eq(q1(o, "SELECT count(*) FROM evaluations"), 3);
    kf_store_close(o);
}

/* The run's result record (issue 26) travels with its run: merged in, and updated when a
 * copy further along (finished, with its result) replaces an earlier one. */
Test(store_merge, the_result_record_is_merged) {
    kf_store *a = open_store("a.db");
    char id[17];
    write_run(a, T1, "a", 2, id, NULL);
    kf_store_close(a);
    kf_store *o = open_store("out.db");
    kf_store_merge_counts c;
    merge(o, "a.db", &c);
    cr_expect_eq(c.runs_added, 1);
    kf_error err = {0};
    kf_store_run got;
    cr_assert_eq(kf_store_run_get(o, id, &got, &err), KF_OK, "%s", err.msg);
    cr_expect_str_eq(got.result_from, "", "still running: no result yet");
    kf_store_run_clear(&got);
    a = open_store("a.db");
    kf_store_run fin;
    memset(&fin, 0, sizeof fin);
    snprintf(fin.id, sizeof fin.id, "%s", id);
    snprintf(fin.status, sizeof fin.status, "done");
    snprintf(fin.result_from, sizeof fin.result_from, "none");
    snprintf(fin.result_detail, sizeof fin.result_detail, "no verified kernel; not covered: lstm_cell (node 2)");
    cr_assert_eq(kf_store_run_finish(a, &fin, &err), KF_OK, "%s", err.msg);
    kf_store_close(a);
    merge(o, "a.db", &c);
    cr_expect_eq(c.runs_updated, 1);
    cr_assert_eq(kf_store_run_get(o, id, &got, &err), KF_OK, "%s", err.msg);
    cr_expect_str_eq(got.result_from, "none");
    cr_expect_str_eq(got.result_detail, "no verified kernel; not covered: lstm_cell (node 2)");
    kf_store_run_clear(&got);
    kf_store_close(o);
}

/* A run id that names another run (another start time): left out and said. */
Test(store_merge, a_conflicting_run_id_is_left_out) {
    char a1[17], a2[17], b1[17];
    make_inputs(a1, a2, b1);
    kf_store *b = open_store("b.db");
    char sql[600];
    snprintf(sql, sizeof sql, "PRAGMA foreign_keys = OFF; UPDATE runs SET id = '%s', started = 1 WHERE id = '%s'; "
             "UPDATE iterations SET run = '%s'; UPDATE evaluations SET run = '%s'; UPDATE transcripts SET run = '%s';"
             "UPDATE diagnoses SET run = '%s'", a1, b1, a1, a1, a1, a1);
    cr_assert_eq(sqlite3_exec(kf_store_db(b), sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(kf_store_db(b)));
    kf_store_close(b);
    kf_store *o = open_store("out.db");
    kf_store_merge_counts c;
    merge(o, "a.db", &c);
    merge(o, "b.db", &c);
    cr_expect_eq(c.runs_conflict, 1);
    cr_expect_str_eq(c.conflict, a1);
    cr_expect_eq(c.evaluations + c.iterations + c.transcripts, 0);
    cr_expect_eq(q1(o, "SELECT count(*) FROM runs"), 2);
    cr_expect_eq(q1(o, "SELECT count(*) FROM iterations"), 5);
    kf_store_close(o);
}

Test(store_merge, older_schema_migrated_in_a_copy_newer_refused) {
    char a1[17], a2[17], b1[17];
    make_inputs(a1, a2, b1);
    kf_store *b = open_store("b.db");
    cr_assert_eq(sqlite3_exec(kf_store_db(b), "ALTER TABLE runs DROP COLUMN phases; DROP TABLE refsets; "
                              "ALTER TABLE runs DROP COLUMN result_from; ALTER TABLE runs DROP COLUMN result_detail; "
                              "PRAGMA user_version = 2", NULL, NULL, NULL), SQLITE_OK);
    kf_store_close(b);
    kf_store *o = open_store("out.db");
    kf_store_merge_counts c;
    merge(o, "a.db", &c);
    merge(o, "b.db", &c);
    cr_expect_eq(c.in_version, 2);
    cr_expect_eq(c.runs_added, 1);
    expect_totals(o);
    kf_store_close(o);
    /* b.db was only read: still version 2, no refsets table */
    char pb[300];
    path_of(pb, sizeof pb, "b.db");
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open_v2(pb, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_expect_eq(cli_int(h, "PRAGMA user_version", NULL), 2);
    cr_expect_eq(cli_int(h, "SELECT count(*) FROM sqlite_schema WHERE name = 'refsets'", NULL), 0);
    sqlite3_close(h);

    /* a newer schema: refused, naming both versions, nothing merged */
    kf_store *n = open_store("new.db");
    char id[17];
    write_run(n, T2, "n", 1, id, NULL);
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", KF_STORE_SCHEMA_VERSION + 1);
    cr_assert_eq(sqlite3_exec(kf_store_db(n), sql, NULL, NULL, NULL), SQLITE_OK);
    kf_store_close(n);
    char pn[300];
    path_of(pn, sizeof pn, "new.db");
    o = open_store("out.db");
    kf_error err = {0};
    cr_expect_eq(kf_store_merge(o, pn, &c, &err), KF_ERR_UNSUPPORTED);
    cr_expect_str_eq(err.file, pn);
    char want[120];
    snprintf(want, sizeof want, "store schema version %d is newer than this kforge's (%d)",
             KF_STORE_SCHEMA_VERSION + 1, KF_STORE_SCHEMA_VERSION);
    cr_expect(strstr(err.msg, want) != NULL, "%s", err.msg);
    cr_expect_eq(q1(o, "SELECT count(*) FROM runs"), 3);
    kf_store_close(o);
    /* and through the binary: exit 2, the message, no output store created */
    char pout[300], pa[300];
    path_of(pout, sizeof pout, "never.db");
    path_of(pa, sizeof pa, "a.db");
    const char *args[] = {"kforge", "store", "merge", pout, pa, pn, NULL};
    cr_expect_eq(cli_run("newer", args), 2);
    char *e = cli_err("newer");
    cr_expect(strstr(e, want) != NULL, "%s", e);
    free(e);
    struct stat sb;
    cr_expect_neq(stat(pout, &sb), 0, "a refused merge created %s", pout);
    /* not a store at all */
    const char *args2[] = {"kforge", "store", "merge", pout, cli.task, NULL};
    cr_expect_eq(cli_run("foreign", args2), 2);
}

/* Two `kforge synth` runs into two stores, merged with the command (--json), then a third
 * synth of the same task and seed on the merged store: served from its cache. */
Test(store_merge, command_and_cache_after_merge) {
    char s1[300], s2[300], out[300], o1[300], o2[300], o3[300];
    path_of(s1, sizeof s1, "s1.db");
    path_of(s2, sizeof s2, "s2.db");
    path_of(out, sizeof out, "merged.db");
    path_of(o1, sizeof o1, "r1");
    path_of(o2, sizeof o2, "r2");
    path_of(o3, sizeof o3, "r3");
    const char *syn1[] = {"kforge", "synth", cli.task, "--store", s1, "--iters", "2", "--seed", "3", "--memcheck",
                          "off", "--threads", "1", "--analysis", "off", "--out", o1, "-q", NULL};
    cr_assert_eq(cli_run("syn1", syn1), 0);
    const char *syn2[] = {"kforge", "synth", cli.task, "--store", s2, "--iters", "1", "--seed", "5", "--memcheck",
                          "off", "--threads", "1", "--analysis", "off", "--out", o2, "-q", NULL};
    cr_assert_eq(cli_run("syn2", syn2), 0);
    const char *m[] = {"kforge", "store", "merge", out, s1, s2, "--json", NULL};
    cr_assert_eq(cli_run("merge", m), 0);
    char *j = cli_out("merge");
    cr_expect(strstr(j, "\"runs_added\": 1") != NULL, "%s", j);
    cr_expect(strstr(j, "\"created\": true") != NULL, "%s", j);
    free(j);
    const char *again[] = {"kforge", "store", "merge", out, s1, s2, NULL};
    cr_assert_eq(cli_run("again", again), 0);
    char *t = cli_out("again");
    cr_expect(strstr(t, "0 runs added, 0 updated, 2 already there") != NULL, "%s", t);
    free(t);
    const char *runs[] = {"kforge", "runs", "--store", out, "--json", NULL};
    cr_assert_eq(cli_run("runs", runs), 0);
    t = cli_out("runs");
    int n = 0;
    for (const char *p = t; (p = strstr(p, "\"id\":")); p++) n++;
    cr_expect_eq(n, 2, "%s", t);
    free(t);
    const char *syn3[] = {"kforge", "synth", cli.task, "--store", out, "--iters", "2", "--seed", "3", "--memcheck",
                          "off", "--threads", "1", "--analysis", "off", "--out", o3, NULL};
    cr_assert_eq(cli_run("syn3", syn3), 0);
    t = cli_out("syn3");
    cr_expect(strstr(t, "(cached)") != NULL, "a synth on the merged store measured again:\n%s", t);
    free(t);
    const char *help[] = {"kforge", "store", "merge", "--help", NULL};
    cr_assert_eq(cli_run("help", help), 0);
    t = cli_out("help");
    cr_expect(strstr(t, "usage: kforge store merge OUT.db IN.db...") != NULL, "%s", t);
    free(t);
}
