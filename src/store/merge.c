/*
 * Merging stores (`kforge store merge OUT IN...`, include/kforge/store.h): the runs,
 * candidates, evaluations, iterations, diagnoses, transcripts and cached input sets of IN
 * copied into OUT, none lost and none twice, however often IN is merged.
 *
 * Design note. Rows that have a key of their own keep it: a task is its content hash, a
 * candidate its cache key, a cached input set its key, a run its id (16 hex digits of a
 * hash of the start time in microseconds, the pid and the task: unique across machines
 * for all practical purposes, so it is the run's stable identity; a run id that names two
 * different runs, other start or host or task, is a conflict: that run is left out and
 * counted). Rows numbered by SQLite (evaluations, transcripts) are renumbered in OUT:
 * an evaluation is the same when its (run, candidate, iteration, measured_at) are, and an
 * iteration's evaluation is rewritten to OUT's number through a map built while copying
 * (temp.kf_evmap); a transcript row is the same when its run, iteration, role, time and
 * text are. A run found in both keeps OUT's row unless IN's is further along (more stored
 * iterations, or as many and ended later): then OUT's row is updated in place (never
 * deleted, which would cascade to its iterations). One input is one transaction. An input
 * of an older schema is copied to a temporary file and migrated there (the input is
 * never written); one of a newer schema is refused before anything is merged.
 */
#include "kforge/store.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static kf_status sql_fail(sqlite3 *db, kf_error *err, const char *path, const char *what) {
    return kf_error_set(err, KF_ERR_IO, path, 0, 0, "store merge: %s: %s", what, sqlite3_errmsg(db));
}

static kf_status run_sql(sqlite3 *db, const char *sql, kf_error *err, const char *path) {
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK) return KF_OK;
    kf_status st = kf_error_set(err, KF_ERR_IO, path, 0, 0, "store merge: %s (%.120s)", msg ? msg : "?", sql);
    sqlite3_free(msg);
    return st;
}

static long long one_int(sqlite3 *db, const char *sql) {
    sqlite3_stmt *q = NULL;
    long long v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

/* See store.h. */
kf_status kf_store_merge_check(const char *in_path, int *version, kf_error *err) {
    struct stat sb;
    if (stat(in_path, &sb) != 0)
        return kf_error_set(err, KF_ERR_ARG, in_path, 0, 0, "no store here: %s", strerror(errno));
    if (!S_ISREG(sb.st_mode)) return kf_error_set(err, KF_ERR_ARG, in_path, 0, 0, "not a file");
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(in_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        kf_status st = kf_error_set(err, KF_ERR_IO, in_path, 0, 0, "cannot open: %s",
                                    db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return st;
    }
    long long tables = one_int(db, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN "
                                   "('tasks','runs','candidates','evaluations','iterations')");
    long long v = one_int(db, "PRAGMA user_version");
    sqlite3_close(db);
    if (tables < 0)
        return kf_error_set(err, KF_ERR_PARSE, in_path, 0, 0, "not an SQLite database (not a kforge store)");
    if (v > KF_STORE_SCHEMA_VERSION)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, in_path, 0, 0,
                            "store schema version %lld is newer than this kforge's (%d): merge it with the "
                            "kforge that wrote it, or a newer one; nothing was merged", v, KF_STORE_SCHEMA_VERSION);
    if (tables != 5)
        return kf_error_set(err, KF_ERR_PARSE, in_path, 0, 0, "not a kforge store (no runs, candidates, "
                            "evaluations ... tables)");
    if (version) *version = (int)v;
    return KF_OK;
}

/* "a, b, c" of table's columns in OUT (prefix before each, `skip` left out), into b. */
static void columns(sqlite3 *db, const char *table, const char *prefix, const char *skip, kf_buf *b) {
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT name FROM pragma_table_info('%s') ORDER BY cid", table);
    sqlite3_stmt *q = NULL;
    int n = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK)
        while (sqlite3_step(q) == SQLITE_ROW) {
            const char *c = (const char *)sqlite3_column_text(q, 0);
            if (skip && !strcmp(c, skip)) continue;
            kf_buf_printf(b, "%s%s%s", n++ ? ", " : "", prefix, c);
        }
    sqlite3_finalize(q);
}

/* INSERT OR IGNORE of every row of src.table (keyed tables); the rows added into *added. */
static kf_status copy_keyed(sqlite3 *db, const char *table, const char *where, int *added, kf_error *err,
                            const char *path) {
    kf_buf c = {0}, sql = {0};
    columns(db, table, "", NULL, &c);
    kf_buf_printf(&sql, "INSERT OR IGNORE INTO main.%s (%s) SELECT %s FROM src.%s %s", table, c.data, c.data, table,
                  where ? where : "");
    kf_status st = run_sql(db, sql.data, err, path);
    if (st == KF_OK) *added += sqlite3_changes(db);
    kf_buf_free(&c);
    kf_buf_free(&sql);
    return st;
}

/* The runs: new ones inserted, ones further along in IN updated, conflicts listed in
 * temp.kf_skip. */
static kf_status merge_runs(sqlite3 *db, kf_store_merge_counts *c, kf_error *err, const char *path) {
    kf_buf cols = {0}, ins = {0}, upd = {0};
    columns(db, "runs", "", NULL, &cols);
    kf_buf_printf(&ins, "INSERT INTO main.runs (%s) SELECT %s FROM src.runs WHERE id = ?1", cols.data, cols.data);
    kf_buf_printf(&upd, "UPDATE main.runs SET (%s) = (SELECT %s FROM src.runs WHERE id = ?1) WHERE id = ?1", cols.data,
                  cols.data);
    sqlite3_stmt *q = NULL, *find = NULL, *qi = NULL, *qu = NULL, *skip = NULL;
    kf_status st = KF_OK;
    if (sqlite3_prepare_v2(db, "SELECT r.id, r.started, r.host, r.task, (SELECT count(*) FROM src.iterations i WHERE i.run = r.id), "
                           "r.ended FROM src.runs r ORDER BY r.started, r.id",
                           -1, &q, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT r.started, r.host, r.task, (SELECT count(*) FROM main.iterations i WHERE i.run = r.id), "
                           "r.ended FROM main.runs r WHERE r.id = ?1", -1, &find,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, ins.data, -1, &qi, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, upd.data, -1, &qu, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO temp.kf_skip (id) VALUES (?1)", -1, &skip, NULL) != SQLITE_OK) {
        st = sql_fail(db, err, path, "cannot read the runs");
        goto done;
    }
    while (st == KF_OK && sqlite3_step(q) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(q, 0);
        sqlite3_reset(find);
        sqlite3_bind_text(find, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_stmt *todo = NULL;
        if (sqlite3_step(find) != SQLITE_ROW) {
            todo = qi;
            c->runs_added++;
        } else {
            const char *h1 = (const char *)sqlite3_column_text(find, 1), *h2 = (const char *)sqlite3_column_text(q, 2);
            const char *t1 = (const char *)sqlite3_column_text(find, 2), *t2 = (const char *)sqlite3_column_text(q, 3);
            if (sqlite3_column_double(find, 0) != sqlite3_column_double(q, 1) || strcmp(h1 ? h1 : "", h2 ? h2 : "") ||
                strcmp(t1 ? t1 : "", t2 ? t2 : "")) {
                c->runs_conflict++;
                if (!c->conflict[0]) snprintf(c->conflict, sizeof c->conflict, "%s", id);
                sqlite3_reset(skip);
                sqlite3_bind_text(skip, 1, id, -1, SQLITE_TRANSIENT);
                if (sqlite3_step(skip) != SQLITE_DONE) st = sql_fail(db, err, path, "cannot note a conflict");
                continue;
            }
            int d_out = sqlite3_column_int(find, 3), d_in = sqlite3_column_int(q, 4);
            if (d_in > d_out || (d_in == d_out && sqlite3_column_double(q, 5) > sqlite3_column_double(find, 4))) {
                todo = qu;
                c->runs_updated++;
            } else {
                c->runs_same++;
            }
        }
        if (todo) {
            sqlite3_reset(todo);
            sqlite3_bind_text(todo, 1, id, -1, SQLITE_TRANSIENT);
            if (sqlite3_step(todo) != SQLITE_DONE) st = sql_fail(db, err, path, "cannot copy a run");
        }
    }
done:
    sqlite3_finalize(q);
    sqlite3_finalize(find);
    sqlite3_finalize(qi);
    sqlite3_finalize(qu);
    sqlite3_finalize(skip);
    kf_buf_free(&cols);
    kf_buf_free(&ins);
    kf_buf_free(&upd);
    return st;
}

/* The evaluations: each found in OUT by (run, candidate, iter, measured_at) or inserted
 * under a new number; temp.kf_evmap maps IN's numbers to OUT's. */
static kf_status merge_evaluations(sqlite3 *db, kf_store_merge_counts *c, kf_error *err, const char *path) {
    kf_buf cols = {0}, ins = {0};
    columns(db, "evaluations", "", "id", &cols);
    kf_buf_printf(&ins, "INSERT INTO main.evaluations (%s) SELECT %s FROM src.evaluations WHERE id = ?1", cols.data,
                  cols.data);
    sqlite3_stmt *q = NULL, *find = NULL, *qi = NULL, *map = NULL;
    kf_status st = KF_OK;
    if (sqlite3_prepare_v2(db,
                           "SELECT e.id, e.run, e.candidate, e.iter, e.measured_at FROM src.evaluations e WHERE "
                           "e.run IN (SELECT id FROM main.runs) AND e.run NOT IN (SELECT id FROM temp.kf_skip) "
                           "ORDER BY e.id", -1, &q, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT id FROM main.evaluations WHERE run = ?1 AND candidate = ?2 AND iter = ?3 AND "
                           "measured_at = ?4 ORDER BY id LIMIT 1", -1, &find, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, ins.data, -1, &qi, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO temp.kf_evmap (old, new) VALUES (?1, ?2)", -1, &map, NULL) != SQLITE_OK) {
        st = sql_fail(db, err, path, "cannot read the evaluations");
        goto done;
    }
    while (st == KF_OK && sqlite3_step(q) == SQLITE_ROW) {
        sqlite3_int64 old = sqlite3_column_int64(q, 0), now = 0;
        sqlite3_reset(find);
        for (int k = 1; k <= 4; k++) sqlite3_bind_value(find, k, sqlite3_column_value(q, k));
        if (sqlite3_step(find) == SQLITE_ROW) {
            now = sqlite3_column_int64(find, 0);
        } else {
            sqlite3_reset(qi);
            sqlite3_bind_int64(qi, 1, old);
            if (sqlite3_step(qi) != SQLITE_DONE) {
                st = sql_fail(db, err, path, "cannot copy an evaluation");
                break;
            }
            now = sqlite3_last_insert_rowid(db);
            c->evaluations++;
        }
        sqlite3_reset(map);
        sqlite3_bind_int64(map, 1, old);
        sqlite3_bind_int64(map, 2, now);
        if (sqlite3_step(map) != SQLITE_DONE) st = sql_fail(db, err, path, "cannot map an evaluation");
    }
done:
    sqlite3_finalize(q);
    sqlite3_finalize(find);
    sqlite3_finalize(qi);
    sqlite3_finalize(map);
    kf_buf_free(&cols);
    kf_buf_free(&ins);
    return st;
}

static kf_status merge_rest(sqlite3 *db, kf_store_merge_counts *c, kf_error *err, const char *path) {
    /* iterations: the evaluation renumbered; one of a skipped run or of an evaluation not
     * copied (its run a conflict) is left out */
    kf_buf cols = {0}, sel = {0}, sql = {0};
    columns(db, "iterations", "", NULL, &cols);
    columns(db, "iterations", "i.", NULL, &sel);
    char *ev = strstr(sel.data, "i.evaluation");
    kf_buf_printf(&sql, "INSERT OR IGNORE INTO main.iterations (%s) SELECT %.*sm.new%s FROM src.iterations i JOIN "
                  "temp.kf_evmap m ON m.old = i.evaluation WHERE i.run IN (SELECT id FROM main.runs) AND i.run NOT "
                  "IN (SELECT id FROM temp.kf_skip)", cols.data, ev ? (int)(ev - sel.data) : 0, sel.data,
                  ev ? ev + strlen("i.evaluation") : "");
    kf_status st = ev ? run_sql(db, sql.data, err, path) : kf_error_set(err, KF_ERR_INTERNAL, path, 0, 0,
                                                                        "store merge: iterations have no evaluation");
    if (st == KF_OK) c->iterations += sqlite3_changes(db);
    kf_buf_free(&cols);
    kf_buf_free(&sel);
    kf_buf_free(&sql);
    if (st == KF_OK)
        st = copy_keyed(db, "diagnoses",
                        "d WHERE EXISTS (SELECT 1 FROM main.iterations i WHERE i.run = d.run AND i.iter = d.iter) "
                        "AND d.run NOT IN (SELECT id FROM temp.kf_skip)", &c->diagnoses, err, path);
    if (st == KF_OK) {
        kf_buf tc = {0}, ts = {0}, q = {0};
        columns(db, "transcripts", "", "id", &tc);
        columns(db, "transcripts", "t.", "id", &ts);
        kf_buf_printf(&q, "INSERT INTO main.transcripts (%s) SELECT %s FROM src.transcripts t WHERE t.run IN (SELECT id "
                      "FROM main.runs) AND t.run NOT IN (SELECT id FROM temp.kf_skip) AND NOT EXISTS (SELECT 1 FROM "
                      "main.transcripts o WHERE o.run = t.run AND o.iter = t.iter AND o.role = t.role AND o.at = t.at "
                      "AND o.text = t.text) ORDER BY t.id", tc.data, ts.data);
        st = run_sql(db, q.data, err, path);
        if (st == KF_OK) c->transcripts += sqlite3_changes(db);
        kf_buf_free(&tc);
        kf_buf_free(&ts);
        kf_buf_free(&q);
    }
    if (st == KF_OK) st = copy_keyed(db, "refsets", NULL, &c->refsets, err, path);
    return st;
}

/* A copy of an older-schema input, migrated, in a temporary file (the input untouched). */
static kf_status migrated_copy(const char *in_path, char *tmp, size_t cap, kf_error *err) {
    const char *td = getenv("TMPDIR");
    snprintf(tmp, cap, "%s/kforge-merge-XXXXXX", td && *td ? td : "/tmp");
    int fd = mkstemp(tmp);
    if (fd < 0) return kf_error_set(err, KF_ERR_IO, tmp, 0, 0, "cannot make a temporary file: %s", strerror(errno));
    close(fd);
    sqlite3 *from = NULL, *to = NULL;
    kf_status st = KF_OK;
    if (sqlite3_open_v2(in_path, &from, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_open(tmp, &to) != SQLITE_OK) {
        st = kf_error_set(err, KF_ERR_IO, in_path, 0, 0, "cannot copy the store to migrate it");
    } else {
        sqlite3_backup *b = sqlite3_backup_init(to, "main", from, "main");
        if (!b || sqlite3_backup_step(b, -1) != SQLITE_DONE)
            st = kf_error_set(err, KF_ERR_IO, in_path, 0, 0, "cannot copy the store to migrate it: %s",
                              sqlite3_errmsg(to));
        if (b) sqlite3_backup_finish(b);
    }
    sqlite3_close(from);
    sqlite3_close(to);
    if (st == KF_OK) {
        kf_store *s = NULL;
        st = kf_store_open(tmp, &s, err);
        kf_store_close(s);
    }
    if (st != KF_OK) unlink(tmp);
    return st;
}

/* See store.h. */
kf_status kf_store_merge(kf_store *out, const char *in_path, kf_store_merge_counts *c, kf_error *err) {
    memset(c, 0, sizeof *c);
    kf_status st = kf_store_merge_check(in_path, &c->in_version, err);
    if (st != KF_OK) return st;
    char rin[4096], rout[4096];
    if (realpath(in_path, rin) && realpath(kf_store_path(out), rout) && !strcmp(rin, rout))
        return kf_error_set(err, KF_ERR_ARG, in_path, 0, 0, "is the output store itself");
    char tmp[1024] = "";
    const char *src = in_path;
    if (c->in_version < KF_STORE_SCHEMA_VERSION) {
        st = migrated_copy(in_path, tmp, sizeof tmp, err);
        if (st != KF_OK) return st;
        src = tmp;
    }
    sqlite3 *db = kf_store_db(out);
    sqlite3_stmt *at = NULL;
    if (sqlite3_prepare_v2(db, "ATTACH DATABASE ?1 AS src", -1, &at, NULL) != SQLITE_OK) {
        st = sql_fail(db, err, in_path, "cannot attach");
    } else {
        sqlite3_bind_text(at, 1, src, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(at) != SQLITE_DONE) st = sql_fail(db, err, in_path, "cannot attach");
    }
    sqlite3_finalize(at);
    if (st == KF_OK) {
        st = run_sql(db,
                     "CREATE TEMP TABLE IF NOT EXISTS kf_evmap (old INTEGER PRIMARY KEY, new INTEGER NOT NULL);"
                     "CREATE TEMP TABLE IF NOT EXISTS kf_skip (id TEXT PRIMARY KEY);"
                     "DELETE FROM temp.kf_evmap; DELETE FROM temp.kf_skip; BEGIN IMMEDIATE",
                     err, in_path);
        if (st == KF_OK) st = copy_keyed(db, "tasks", NULL, &c->tasks, err, in_path);
        if (st == KF_OK) st = copy_keyed(db, "candidates", NULL, &c->candidates, err, in_path);
        if (st == KF_OK) st = merge_runs(db, c, err, in_path);
        if (st == KF_OK) st = merge_evaluations(db, c, err, in_path);
        if (st == KF_OK) st = merge_rest(db, c, err, in_path);
        if (st == KF_OK) st = run_sql(db, "COMMIT", err, in_path);
        if (st != KF_OK) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_exec(db, "DETACH DATABASE src", NULL, NULL, NULL);
    }
    if (tmp[0]) {
        unlink(tmp);
        char side[1100];
        snprintf(side, sizeof side, "%s-wal", tmp);
        unlink(side);
        snprintf(side, sizeof side, "%s-shm", tmp);
        unlink(side);
    }
    return st;
}
