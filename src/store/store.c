/*
 * The kforge store (include/kforge/store.h): SQLite schema, migrations, cache keys.
 *
 * Design note. Each public function prepares its statements, runs them, and finalizes
 * them on one cleanup path; writers take the write lock up front (BEGIN IMMEDIATE) so a
 * busy store makes them wait in sqlite3_busy_timeout instead of failing halfway through a
 * transaction. The migrations are an ordered array of SQL scripts: migrations[v] takes a
 * file from version v to v + 1; all that a file lacks run in one transaction, with the
 * version read again inside it, so two processes opening a new file at once migrate it
 * once. Timestamps are Unix seconds (REAL). A run is "running" while its process lives:
 * the pid and host are stored, and a reader that finds the process gone (same host)
 * marks the run interrupted.
 */
#include "kforge/store.h"

#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct kf_store {
    sqlite3 *db;
    char path[1024];
    char host[128];
    int readonly; /* opened read-only: nothing is written, interrupted runs are shown so */
};

/* migrations[v]: version v -> v + 1 */
static const char *const migrations[KF_STORE_SCHEMA_VERSION] = {
    /* 0 -> 1 */
    "CREATE TABLE tasks ("
    "  hash TEXT PRIMARY KEY, name TEXT NOT NULL, text TEXT NOT NULL, created REAL NOT NULL);"
    "CREATE TABLE candidates ("
    "  key TEXT PRIMARY KEY, task TEXT NOT NULL REFERENCES tasks(hash),"
    "  source_hash TEXT NOT NULL, source TEXT NOT NULL, flags TEXT NOT NULL,"
    "  platform TEXT NOT NULL, device TEXT NOT NULL, compiler TEXT NOT NULL,"
    "  settings TEXT NOT NULL, created REAL NOT NULL,"
    "  UNIQUE (task, source_hash, flags, platform, device, compiler, settings));"
    "CREATE TABLE runs ("
    "  id TEXT PRIMARY KEY, task TEXT NOT NULL REFERENCES tasks(hash), task_name TEXT NOT NULL,"
    "  task_path TEXT NOT NULL DEFAULT '', target TEXT NOT NULL DEFAULT '',"
    "  platform TEXT NOT NULL DEFAULT '', device TEXT NOT NULL DEFAULT '',"
    "  compiler TEXT NOT NULL DEFAULT '', agent TEXT NOT NULL DEFAULT 'builtin',"
    "  seed INTEGER NOT NULL DEFAULT 0, iters_planned INTEGER NOT NULL DEFAULT 0,"
    "  options TEXT NOT NULL DEFAULT '{}', device_json TEXT, out_dir TEXT NOT NULL DEFAULT '',"
    "  started REAL NOT NULL, ended REAL NOT NULL DEFAULT 0,"
    "  status TEXT NOT NULL CHECK (status IN ('running','done','interrupted','failed')),"
    "  pid INTEGER NOT NULL DEFAULT 0, host TEXT NOT NULL DEFAULT '',"
    "  iters_done INTEGER NOT NULL DEFAULT 0, best_iter INTEGER NOT NULL DEFAULT 0,"
    "  best_candidate TEXT REFERENCES candidates(key), best_ms REAL NOT NULL DEFAULT 0,"
    "  best_pct REAL NOT NULL DEFAULT 0, cache_hits INTEGER NOT NULL DEFAULT 0,"
    "  replayed INTEGER NOT NULL DEFAULT 0, stop_reason TEXT NOT NULL DEFAULT '',"
    "  wall_s REAL NOT NULL DEFAULT 0, llm_calls INTEGER NOT NULL DEFAULT 0,"
    "  prompt_tokens INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0,"
    "  memcheck TEXT NOT NULL DEFAULT '', memcheck_detail TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX runs_by_task ON runs (task_name, started);"
    "CREATE TABLE evaluations ("
    "  id INTEGER PRIMARY KEY, candidate TEXT NOT NULL REFERENCES candidates(key),"
    "  run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, iter INTEGER NOT NULL,"
    "  measured_at REAL NOT NULL, status TEXT NOT NULL, detail TEXT NOT NULL,"
    "  sets_run INTEGER, bad_set INTEGER, bad_output INTEGER, first_bad INTEGER,"
    "  got REAL, want REAL, max_abs_err REAL, max_rel_err REAL, nmse REAL,"
    "  timed INTEGER, reps INTEGER, time_ms REAL, time_min_ms REAL, time_mean_ms REAL,"
    "  run_wall_s REAL, resources TEXT NOT NULL DEFAULT '', memcheck TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX evaluations_by_candidate ON evaluations (candidate, measured_at);"
    "CREATE TABLE iterations ("
    "  run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, iter INTEGER NOT NULL,"
    "  candidate TEXT NOT NULL REFERENCES candidates(key),"
    "  evaluation INTEGER NOT NULL REFERENCES evaluations(id),"
    "  cached INTEGER NOT NULL, label TEXT NOT NULL, agent TEXT NOT NULL,"
    "  followed TEXT NOT NULL DEFAULT '', hash TEXT NOT NULL, best_so_far INTEGER NOT NULL,"
    "  gbs REAL, gflops REAL, pct_floor REAL, at REAL NOT NULL,"
    "  PRIMARY KEY (run, iter));"
    "CREATE TABLE diagnoses ("
    "  run TEXT NOT NULL, iter INTEGER NOT NULL, bound TEXT NOT NULL, occupancy REAL,"
    "  json TEXT NOT NULL, PRIMARY KEY (run, iter),"
    "  FOREIGN KEY (run, iter) REFERENCES iterations(run, iter) ON DELETE CASCADE);"
    "CREATE TABLE transcripts ("
    "  id INTEGER PRIMARY KEY, run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  iter INTEGER NOT NULL, role TEXT NOT NULL, text TEXT NOT NULL,"
    "  prompt_tokens INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0,"
    "  at REAL NOT NULL);",
    /* 1 -> 2: which reference kernel a model run was given */
    "ALTER TABLE runs ADD COLUMN reference TEXT NOT NULL DEFAULT '';",
    /* 2 -> 3: the input sets and their reference, cached (kf_store_parts_put) */
    "CREATE TABLE IF NOT EXISTS refsets ("
    "  key TEXT NOT NULL, part INTEGER NOT NULL, nparts INTEGER NOT NULL, task TEXT NOT NULL,"
    "  created REAL NOT NULL, bytes BLOB NOT NULL, PRIMARY KEY (key, part));"
    "CREATE INDEX IF NOT EXISTS refsets_by_task ON refsets (task, created);"
    /* ... and where a run's time went (kf_phase_times as JSON) */
    "ALTER TABLE runs ADD COLUMN phases TEXT NOT NULL DEFAULT '';",
    /* 3 -> 4: the run's result record (run.json's result: which agent, and why) */
    "ALTER TABLE runs ADD COLUMN result_from TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE runs ADD COLUMN result_detail TEXT NOT NULL DEFAULT '';",
};

static double wall_now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

static kf_status db_fail(kf_store *s, kf_error *err, const char *what) {
    return kf_error_set(err, KF_ERR_IO, s->path, 0, 0, "store: %s: %s", what, sqlite3_errmsg(s->db));
}

static void scopy(char *dst, size_t cap, const unsigned char *src) {
    snprintf(dst, cap, "%s", src ? (const char *)src : "");
}

static char *sdup(const unsigned char *src) { return src ? kf_strdup((const char *)src) : NULL; }

/* Prepare sql; on failure err says what. */
static kf_status prep(kf_store *s, const char *sql, sqlite3_stmt **st, kf_error *err) {
    if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK) return db_fail(s, err, "prepare");
    return KF_OK;
}

static kf_status exec(kf_store *s, const char *sql, kf_error *err) {
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) == SQLITE_OK) return KF_OK;
    kf_status st = kf_error_set(err, KF_ERR_IO, s->path, 0, 0, "store: %s", msg ? msg : sqlite3_errmsg(s->db));
    sqlite3_free(msg);
    return st;
}

static void rollback(kf_store *s) { sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL); }

static void bind_text(sqlite3_stmt *st, int i, const char *v) {
    sqlite3_bind_text(st, i, v ? v : "", -1, SQLITE_TRANSIENT);
}

static kf_status migrate(kf_store *s, kf_error *err) {
    kf_status st = exec(s, "BEGIN IMMEDIATE", err);
    if (st != KF_OK) return st;
    sqlite3_stmt *q = NULL;
    int ver = -1;
    if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        ver = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    if (ver < 0) {
        st = db_fail(s, err, "cannot read the schema version");
    } else if (ver > KF_STORE_SCHEMA_VERSION) {
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, s->path, 0, 0,
                          "store schema version %d is newer than this kforge's (%d): use a newer "
                          "kforge or another store (--store PATH)", ver, KF_STORE_SCHEMA_VERSION);
    } else {
        for (int v = ver; v < KF_STORE_SCHEMA_VERSION && st == KF_OK; v++) st = exec(s, migrations[v], err);
        if (st == KF_OK && ver < KF_STORE_SCHEMA_VERSION) {
            char sql[64];
            snprintf(sql, sizeof sql, "PRAGMA user_version = %d", KF_STORE_SCHEMA_VERSION);
            st = exec(s, sql, err);
        }
        if (st != KF_OK) err->code = KF_ERR_INTERNAL;
    }
    if (st == KF_OK) st = exec(s, "COMMIT", err);
    if (st != KF_OK) rollback(s);
    return st;
}

/* See store.h. */
kf_status kf_store_default_path(char *buf, size_t cap, kf_error *err) {
    const char *env = getenv("KFORGE_STORE"), *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    int n;
    if (env && env[0]) n = snprintf(buf, cap, "%s", env);
    else if (xdg && xdg[0]) n = snprintf(buf, cap, "%s/kforge/kforge.db", xdg);
    else if (home && home[0]) n = snprintf(buf, cap, "%s/.local/share/kforge/kforge.db", home);
    else return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                             "no store path: set KFORGE_STORE, XDG_DATA_HOME or HOME, or pass --store PATH");
    if (n < 0 || (size_t)n >= cap) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "store path too long");
    return KF_OK;
}

/* The file as a read-only "file:" URI (immutable: SQLite reads it without the WAL's
 * shared memory, which a read-only directory or mount cannot hold), into buf. */
static void ro_uri(const char *path, int immutable, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "file:%s", path[0] == '/' ? "//" : "");
    for (const unsigned char *p = (const unsigned char *)path; *p && n + 4 < cap; p++) {
        if (*p == '%' || *p == '?' || *p == '#' || *p <= ' ' || *p >= 0x7f) n += (size_t)snprintf(buf + n, cap - n, "%%%02X", *p);
        else buf[n++] = (char)*p;
    }
    buf[n] = 0;
    snprintf(buf + n, cap - n, "?mode=ro%s", immutable ? "&immutable=1" : "");
}

/* Whether the file is kforge's: SQLite's own first read tells a database from another
 * file, and a database with objects but without kforge's tables belongs to another program
 * (kforge adding its tables to it, as it once did, changes that program's file). *objects
 * gets the number of schema objects (0: a new, empty file). Runs before anything writes. */
static kf_status check_ours(kf_store *s, int *objects, kf_error *err) {
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT count(*), coalesce(sum(type = 'table' AND name IN ('tasks', 'runs')), 0), "
                                "coalesce((SELECT group_concat(name, ', ') FROM (SELECT name FROM sqlite_master "
                                "WHERE type = 'table' ORDER BY name LIMIT 4)), '') FROM sqlite_master", -1, &q, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(q);
    kf_status st = KF_OK;
    if (rc == SQLITE_NOTADB) {
        st = kf_error_set(err, KF_ERR_PARSE, s->path, 0, 0,
                          "not a kforge store: the file is not an SQLite database (move it away, or "
                          "use --store PATH / KFORGE_STORE)");
    } else if (rc != SQLITE_ROW) {
        st = db_fail(s, err, "cannot read the schema");
    } else {
        *objects = sqlite3_column_int(q, 0);
        if (*objects > 0 && sqlite3_column_int(q, 1) < 2)
            st = kf_error_set(err, KF_ERR_PARSE, s->path, 0, 0,
                              "not a kforge store: an SQLite database of another program (tables: %s), left "
                              "as it is (use --store PATH / KFORGE_STORE for kforge's own file)",
                              sqlite3_column_text(q, 2) && sqlite3_column_text(q, 2)[0]
                                  ? (const char *)sqlite3_column_text(q, 2) : "none");
    }
    sqlite3_finalize(q);
    return st;
}

static int schema_version(kf_store *s) {
    sqlite3_stmt *q = NULL;
    int ver = -1;
    if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        ver = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    return ver;
}

/* An existing store where it cannot be written (a read-only directory, file or mount):
 * read-only, and immutable when SQLite cannot set up the WAL's side files there. */
static kf_status open_readonly(kf_store *s, int *objects, kf_error *err) {
    char uri[3200];
    kf_status st = KF_OK;
    for (int immutable = 0; immutable < 2; immutable++) {
        if (s->db) sqlite3_close_v2(s->db);
        s->db = NULL;
        ro_uri(s->path, immutable, uri, sizeof uri);
        if (sqlite3_open_v2(uri, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) != SQLITE_OK) {
            st = kf_error_set(err, KF_ERR_IO, s->path, 0, 0, "cannot open the store (read-only): %s",
                              s->db ? sqlite3_errmsg(s->db) : "out of memory");
            continue;
        }
        sqlite3_busy_timeout(s->db, KF_STORE_BUSY_MS);
        st = check_ours(s, objects, err);
        if (st == KF_OK || st == KF_ERR_PARSE) break;
    }
    if (st != KF_OK) return st;
    int ver = schema_version(s);
    if (*objects == 0)
        return kf_error_set(err, KF_ERR_ARG, s->path, 0, 0, "no kforge store here yet: the file is empty");
    if (ver > KF_STORE_SCHEMA_VERSION)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, s->path, 0, 0,
                            "store schema version %d is newer than this kforge's (%d): use a newer kforge or "
                            "another store (--store PATH)", ver, KF_STORE_SCHEMA_VERSION);
    if (ver < KF_STORE_SCHEMA_VERSION)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, s->path, 0, 0,
                            "store schema version %d is older than this kforge's (%d) and the store cannot be "
                            "written here: open it once where it can (any kforge command) to migrate it",
                            ver, KF_STORE_SCHEMA_VERSION);
    s->readonly = 1;
    return KF_OK;
}

/* See store.h. */
kf_status kf_store_open_mode(const char *path, kf_store_mode mode, int *created, kf_store **out, kf_error *err) {
    *out = NULL;
    if (created) *created = 0;
    kf_store *s = kf_calloc(1, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    if (gethostname(s->host, sizeof s->host - 1) != 0) snprintf(s->host, sizeof s->host, "?");
    kf_status st = KF_OK;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    struct stat sb;
    int exists = stat(path, &sb) == 0;
    int objects = 0;
    if (mode == KF_STORE_EXISTING) {
        if (!exists) {
            st = kf_error_set(err, errno == ENOENT ? KF_ERR_ARG : KF_ERR_IO, path, 0, 0,
                              "no store here: %s (a reading command creates none; kforge synth creates the "
                              "store it records into: check --store or KFORGE_STORE)", strerror(errno));
            goto fail;
        }
        if (access(path, W_OK) != 0 || access(dir, W_OK) != 0) {
            st = open_readonly(s, &objects, err);
            if (st != KF_OK) goto fail;
            *out = s;
            return KF_OK;
        }
    } else if (!exists && strcmp(dir, ".") != 0 && strcmp(dir, "/") != 0) {
        st = kf_mkdirs(dir, err);
        if (st != KF_OK) goto fail;
    }
    int flags = SQLITE_OPEN_READWRITE | (mode == KF_STORE_CREATE ? SQLITE_OPEN_CREATE : 0);
    if (sqlite3_open_v2(path, &s->db, flags, NULL) != SQLITE_OK) {
        st = kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot open the store: %s",
                          s->db ? sqlite3_errmsg(s->db) : "out of memory");
        goto fail;
    }
    if (created) *created = !exists;
    sqlite3_busy_timeout(s->db, KF_STORE_BUSY_MS);
    st = check_ours(s, &objects, err);
    if (st != KF_OK) goto fail;
    if (mode == KF_STORE_EXISTING && objects == 0) {
        st = kf_error_set(err, KF_ERR_ARG, path, 0, 0, "no kforge store here yet: the file is empty");
        goto fail;
    }
    /* Switching a new file to WAL takes an exclusive lock that SQLite does not wait for
     * (no busy handler): two processes opening a new store at once see SQLITE_BUSY here,
     * so it is retried for as long as a writer would wait (tests/test_store_cli.c,
     * two_processes_one_store) */
    sqlite3_stmt *q = NULL;
    char mode_s[16] = "";
    int rc = SQLITE_BUSY;
    for (int waited_ms = 0; (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && waited_ms <= KF_STORE_BUSY_MS; waited_ms += 10) {
        if (waited_ms) sqlite3_sleep(10);
        rc = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &q, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) scopy(mode_s, sizeof mode_s, sqlite3_column_text(q, 0));
        sqlite3_finalize(q);
        q = NULL;
    }
    if (rc != SQLITE_ROW) {
        st = db_fail(s, err, "cannot set the journal mode");
        goto fail;
    }
    if (strcmp(mode_s, "wal") != 0) {
        st = kf_error_set(err, KF_ERR_IO, path, 0, 0,
                          "store: the file system refused WAL mode (journal mode %s): put the store "
                          "on a local disk", mode_s);
        goto fail;
    }
    st = exec(s, "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL", err);
    if (st == KF_OK) st = migrate(s, err);
    if (st != KF_OK) goto fail;
    *out = s;
    return KF_OK;
fail:
    kf_store_close(s);
    return st;
}

/* See store.h. */
kf_status kf_store_open(const char *path, kf_store **out, kf_error *err) {
    return kf_store_open_mode(path, KF_STORE_CREATE, NULL, out, err);
}

int kf_store_readonly(const kf_store *s) { return s->readonly; }

void kf_store_close(kf_store *s) {
    if (!s) return;
    if (s->db) sqlite3_close_v2(s->db);
    free(s);
}

const char *kf_store_path(const kf_store *s) { return s->path; }
void *kf_store_db(kf_store *s) { return s->db; }

/* ---- tasks ---- */

/* See store.h. */
void kf_store_task_hash(const char *text, char hash[17]) { kf_hash_hex(kf_hash64(text, strlen(text), 0x6b66), hash); }

/* See store.h. */
kf_status kf_store_task_put(kf_store *s, const char *name, const char *text, char hash[17],
                            kf_error *err) {
    kf_store_task_hash(text, hash);
    sqlite3_stmt *q = NULL;
    kf_status st = prep(s, "INSERT OR IGNORE INTO tasks (hash, name, text, created) VALUES (?,?,?,?)", &q, err);
    if (st == KF_OK) {
        bind_text(q, 1, hash);
        bind_text(q, 2, name);
        bind_text(q, 3, text);
        sqlite3_bind_double(q, 4, wall_now());
        if (sqlite3_step(q) != SQLITE_DONE) st = db_fail(s, err, "cannot record the task");
    }
    sqlite3_finalize(q);
    return st;
}

/* See store.h. */
kf_status kf_store_task_text(kf_store *s, const char *hash, char **text, kf_error *err) {
    *text = NULL;
    sqlite3_stmt *q = NULL;
    kf_status st = prep(s, "SELECT text FROM tasks WHERE hash = ?", &q, err);
    if (st == KF_OK) {
        bind_text(q, 1, hash);
        int rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) *text = sdup(sqlite3_column_text(q, 0));
        else if (rc == SQLITE_DONE) st = kf_error_set(err, KF_ERR_ARG, s->path, 0, 0, "store has no task %s", hash);
        else st = db_fail(s, err, "cannot read the task");
    }
    sqlite3_finalize(q);
    return st;
}

/* ---- runs ---- */

void kf_store_run_clear(kf_store_run *r) {
    free(r->options);
    free(r->device_json);
    memset(r, 0, sizeof *r);
}

static int process_gone(const kf_store *s, const char *host, long pid) {
    if (strcmp(host, s->host) != 0 || pid <= 0) return 0; /* cannot tell from here */
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* See store.h. */
kf_status kf_store_mark_interrupted(kf_store *s, int *marked, kf_error *err) {
    if (marked) *marked = 0;
    if (s->readonly) return KF_OK; /* run_row shows them interrupted */
    sqlite3_stmt *q = NULL, *u = NULL;
    kf_status st = prep(s, "SELECT id, pid, host FROM runs WHERE status = 'running'", &q, err);
    if (st == KF_OK) st = prep(s, "UPDATE runs SET status = 'interrupted' WHERE id = ? AND status = 'running'", &u, err);
    /* collected first: the update would otherwise run under the open read */
    char (*ids)[17] = NULL;
    int n = 0, cap = 0, rc;
    while (st == KF_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        char host[128];
        scopy(host, sizeof host, sqlite3_column_text(q, 2));
        if (!process_gone(s, host, (long)sqlite3_column_int64(q, 1))) continue;
        if (n == cap) ids = kf_realloc(ids, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *ids);
        scopy(ids[n++], sizeof ids[0], sqlite3_column_text(q, 0));
    }
    if (st == KF_OK && rc != SQLITE_DONE) st = db_fail(s, err, "cannot list running runs");
    sqlite3_reset(q);
    for (int i = 0; st == KF_OK && i < n; i++) {
        sqlite3_reset(u);
        bind_text(u, 1, ids[i]);
        if (sqlite3_step(u) != SQLITE_DONE) st = db_fail(s, err, "cannot mark a run interrupted");
        else if (marked) *marked += sqlite3_changes(s->db);
    }
    free(ids);
    sqlite3_finalize(q);
    sqlite3_finalize(u);
    return st;
}

/* See store.h. */
kf_status kf_store_run_begin(kf_store *s, kf_store_run *r, kf_error *err) {
    if (!r->id[0]) {
        struct { double t; long pid; char task[17]; } seed = {wall_now(), (long)getpid(), ""};
        memcpy(seed.task, r->task, sizeof seed.task);
        kf_hash_hex(kf_hash64(&seed, sizeof seed, (uint64_t)clock()), r->id);
    }
    sqlite3_stmt *q = NULL;
    kf_status st = prep(s,
                        "INSERT INTO runs (id, task, task_name, task_path, target, platform, device, "
                        "compiler, agent, seed, iters_planned, options, device_json, out_dir, started, "
                        "status, pid, host) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,'running',?,?)",
                        &q, err);
    if (st == KF_OK) {
        r->started = wall_now();
        r->pid = (long)getpid();
        snprintf(r->host, sizeof r->host, "%s", s->host);
        snprintf(r->status, sizeof r->status, "running");
        bind_text(q, 1, r->id);
        bind_text(q, 2, r->task);
        bind_text(q, 3, r->task_name);
        bind_text(q, 4, r->task_path);
        bind_text(q, 5, r->target);
        bind_text(q, 6, r->platform);
        bind_text(q, 7, r->device);
        bind_text(q, 8, r->compiler);
        bind_text(q, 9, r->agent);
        sqlite3_bind_int64(q, 10, (sqlite3_int64)r->seed);
        sqlite3_bind_int(q, 11, r->iters_planned);
        bind_text(q, 12, r->options ? r->options : "{}");
        if (r->device_json) bind_text(q, 13, r->device_json);
        else sqlite3_bind_null(q, 13);
        bind_text(q, 14, r->out_dir);
        sqlite3_bind_double(q, 15, r->started);
        sqlite3_bind_int64(q, 16, r->pid);
        bind_text(q, 17, r->host);
        if (sqlite3_step(q) != SQLITE_DONE) st = db_fail(s, err, "cannot record the run");
    }
    sqlite3_finalize(q);
    return st;
}

/* See store.h. */
kf_status kf_store_run_reopen(kf_store *s, const char *id, const char *device_json, kf_error *err) {
    sqlite3_stmt *q = NULL;
    kf_status st = prep(s, "UPDATE runs SET status = 'running', pid = ?, host = ?, ended = 0, "
                           "device_json = coalesce(?, device_json) WHERE id = ?", &q, err);
    if (st == KF_OK) {
        sqlite3_bind_int64(q, 1, (sqlite3_int64)getpid());
        bind_text(q, 2, s->host);
        if (device_json) bind_text(q, 3, device_json);
        else sqlite3_bind_null(q, 3);
        bind_text(q, 4, id);
        if (sqlite3_step(q) != SQLITE_DONE) st = db_fail(s, err, "cannot reopen the run");
        else if (sqlite3_changes(s->db) != 1)
            st = kf_error_set(err, KF_ERR_ARG, s->path, 0, 0, "store has no run %s", id);
    }
    sqlite3_finalize(q);
    return st;
}

/* See store.h. */
kf_status kf_store_run_device(kf_store *s, const char *id, const char *platform, const char *device,
                              const char *compiler, const char *device_json, kf_error *err) {
    sqlite3_stmt *q = NULL;
    kf_status st = prep(s, "UPDATE runs SET platform = ?, device = ?, compiler = ?, device_json = ? "
                           "WHERE id = ?", &q, err);
    if (st == KF_OK) {
        bind_text(q, 1, platform);
        bind_text(q, 2, device);
        bind_text(q, 3, compiler);
        bind_text(q, 4, device_json);
        bind_text(q, 5, id);
        if (sqlite3_step(q) != SQLITE_DONE) st = db_fail(s, err, "cannot record the run's device");
    }
    sqlite3_finalize(q);
    return st;
}

/* See store.h. */
kf_status kf_store_run_finish(kf_store *s, const kf_store_run *r, kf_error *err) {
    sqlite3_stmt *q = NULL;
    /* the best candidate follows best_iter: one statement so the two never disagree */
    kf_status st = prep(s, "UPDATE runs SET status = ?1, ended = ?2, stop_reason = ?3, wall_s = ?4, "
                 "llm_calls = ?5, prompt_tokens = ?6, completion_tokens = ?7, memcheck = ?8, "
                 "memcheck_detail = ?9, best_iter = ?10, best_ms = ?11, best_pct = ?12, "
                 "best_candidate = (SELECT candidate FROM iterations WHERE run = ?13 AND iter = ?10), "
                 "phases = ?14, result_from = ?15, result_detail = ?16 WHERE id = ?13", &q, err);
    if (st == KF_OK) {
        bind_text(q, 1, r->status);
        sqlite3_bind_double(q, 2, wall_now());
        bind_text(q, 3, r->stop_reason);
        sqlite3_bind_double(q, 4, r->wall_s);
        sqlite3_bind_int(q, 5, r->llm_calls);
        sqlite3_bind_int64(q, 6, r->prompt_tokens);
        sqlite3_bind_int64(q, 7, r->completion_tokens);
        bind_text(q, 8, r->memcheck);
        bind_text(q, 9, r->memcheck_detail);
        sqlite3_bind_int(q, 10, r->best_iter);
        sqlite3_bind_double(q, 11, r->best_ms);
        sqlite3_bind_double(q, 12, r->best_pct);
        bind_text(q, 13, r->id);
        bind_text(q, 14, r->phases);
        bind_text(q, 15, r->result_from);
        bind_text(q, 16, r->result_detail);
        if (sqlite3_step(q) != SQLITE_DONE) st = db_fail(s, err, "cannot record the run's end");
    }
    sqlite3_finalize(q);
    return st;
}

#define RUN_COLS                                                                                   \
    "id, task, task_name, task_path, target, platform, device, compiler, agent, seed, "            \
    "iters_planned, options, device_json, out_dir, started, ended, status, pid, host, "            \
    "(SELECT count(*) FROM iterations i WHERE i.run = runs.id), best_iter, best_ms, best_pct, "   \
    "(SELECT count(*) FROM iterations i WHERE i.run = runs.id AND i.cached), replayed, "           \
    "stop_reason, wall_s, llm_calls, prompt_tokens, completion_tokens, memcheck, memcheck_detail, "   \
    "reference, phases, result_from, result_detail"

static void run_row(const kf_store *s, sqlite3_stmt *q, kf_store_run *r) {
    memset(r, 0, sizeof *r);
    int c = 0;
    scopy(r->id, sizeof r->id, sqlite3_column_text(q, c++));
    scopy(r->task, sizeof r->task, sqlite3_column_text(q, c++));
    scopy(r->task_name, sizeof r->task_name, sqlite3_column_text(q, c++));
    scopy(r->task_path, sizeof r->task_path, sqlite3_column_text(q, c++));
    scopy(r->target, sizeof r->target, sqlite3_column_text(q, c++));
    scopy(r->platform, sizeof r->platform, sqlite3_column_text(q, c++));
    scopy(r->device, sizeof r->device, sqlite3_column_text(q, c++));
    scopy(r->compiler, sizeof r->compiler, sqlite3_column_text(q, c++));
    scopy(r->agent, sizeof r->agent, sqlite3_column_text(q, c++));
    r->seed = (uint64_t)sqlite3_column_int64(q, c++);
    r->iters_planned = sqlite3_column_int(q, c++);
    r->options = sdup(sqlite3_column_text(q, c++));
    r->device_json = sdup(sqlite3_column_text(q, c++));
    scopy(r->out_dir, sizeof r->out_dir, sqlite3_column_text(q, c++));
    r->started = sqlite3_column_double(q, c++);
    r->ended = sqlite3_column_double(q, c++);
    scopy(r->status, sizeof r->status, sqlite3_column_text(q, c++));
    r->pid = (long)sqlite3_column_int64(q, c++);
    scopy(r->host, sizeof r->host, sqlite3_column_text(q, c++));
    r->iters_done = sqlite3_column_int(q, c++);
    r->best_iter = sqlite3_column_int(q, c++);
    r->best_ms = sqlite3_column_double(q, c++);
    r->best_pct = sqlite3_column_double(q, c++);
    r->cache_hits = sqlite3_column_int(q, c++);
    r->replayed = sqlite3_column_int(q, c++);
    scopy(r->stop_reason, sizeof r->stop_reason, sqlite3_column_text(q, c++));
    r->wall_s = sqlite3_column_double(q, c++);
    r->llm_calls = sqlite3_column_int(q, c++);
    r->prompt_tokens = (long)sqlite3_column_int64(q, c++);
    r->completion_tokens = (long)sqlite3_column_int64(q, c++);
    scopy(r->memcheck, sizeof r->memcheck, sqlite3_column_text(q, c++));
    scopy(r->memcheck_detail, sizeof r->memcheck_detail, sqlite3_column_text(q, c++));
    scopy(r->reference, sizeof r->reference, sqlite3_column_text(q, c++));
    scopy(r->phases, sizeof r->phases, sqlite3_column_text(q, c++));
    scopy(r->result_from, sizeof r->result_from, sqlite3_column_text(q, c++));
    scopy(r->result_detail, sizeof r->result_detail, sqlite3_column_text(q, c++));
    /* what kf_store_mark_interrupted would have written, where it cannot write */
    if (s->readonly && !strcmp(r->status, "running") && process_gone(s, r->host, r->pid))
        snprintf(r->status, sizeof r->status, "interrupted");
}

/* See store.h. */
kf_status kf_store_run_reference(kf_store *s, const char *id, const char *reference, kf_error *err) {
    sqlite3_stmt *q = NULL;
    kf_status st = prep(s, "UPDATE runs SET reference = ?1 WHERE id = ?2", &q, err);
    if (st == KF_OK) {
        bind_text(q, 1, reference ? reference : "");
        bind_text(q, 2, id);
        if (sqlite3_step(q) != SQLITE_DONE) st = db_fail(s, err, "cannot record the run's reference");
    }
    sqlite3_finalize(q);
    return st;
}

/* See store.h. */
kf_status kf_store_run_get(kf_store *s, const char *ref, kf_store_run *out, kf_error *err) {
    memset(out, 0, sizeof *out);
    if (!ref || !ref[0] || strspn(ref, "0123456789abcdef") != strlen(ref))
        return kf_error_set(err, KF_ERR_ARG, s->path, 0, 0, "'%s' is not a run id (hex digits, as `kforge runs` prints)",
                            ref ? ref : "");
    kf_status st = kf_store_mark_interrupted(s, NULL, err);
    sqlite3_stmt *q = NULL;
    if (st == KF_OK) st = prep(s, "SELECT " RUN_COLS " FROM runs WHERE substr(id, 1, length(?1)) = ?1 LIMIT 2", &q, err);
    if (st == KF_OK) {
        bind_text(q, 1, ref);
        int rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            run_row(s, q, out);
            rc = sqlite3_step(q);
            if (rc == SQLITE_ROW) {
                kf_store_run_clear(out);
                st = kf_error_set(err, KF_ERR_ARG, s->path, 0, 0, "run '%s' is ambiguous: give more of its id", ref);
            } else if (rc != SQLITE_DONE) {
                kf_store_run_clear(out);
                st = db_fail(s, err, "cannot read the run");
            }
        } else if (rc == SQLITE_DONE) {
            st = kf_error_set(err, KF_ERR_ARG, s->path, 0, 0, "no run '%s' in this store (`kforge runs` lists them)", ref);
        } else {
            st = db_fail(s, err, "cannot read the run");
        }
    }
    sqlite3_finalize(q);
    return st;
}

/* See store.h. */
kf_status kf_store_runs_list(kf_store *s, const char *task_name, int limit, kf_store_run **out, int *n,
                             kf_error *err) {
    *out = NULL;
    *n = 0;
    kf_status st = kf_store_mark_interrupted(s, NULL, err);
    sqlite3_stmt *q = NULL;
    if (st == KF_OK)
        st = prep(s, "SELECT " RUN_COLS " FROM runs WHERE (?1 IS NULL OR task_name = ?1) "
                     "ORDER BY started DESC, id LIMIT ?2", &q, err);
    int cap = 0, rc = SQLITE_DONE;
    if (st == KF_OK) {
        if (task_name) bind_text(q, 1, task_name);
        sqlite3_bind_int(q, 2, limit > 0 ? limit : -1);
        while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
            if (*n == cap) *out = kf_realloc(*out, (size_t)(cap = cap ? 2 * cap : 16) * sizeof **out);
            run_row(s, q, &(*out)[(*n)++]);
        }
        if (rc != SQLITE_DONE) st = db_fail(s, err, "cannot list the runs");
    }
    sqlite3_finalize(q);
    if (st != KF_OK) {
        for (int i = 0; i < *n; i++) kf_store_run_clear(&(*out)[i]);
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return st;
}

/* ---- candidates, evaluations, iterations ---- */

/* See store.h. */
void kf_store_cache_key(const kf_store_key *k, char key[17]) {
    const char *parts[] = {KF_STORE_HARNESS, k->task, k->source, k->flags, k->platform,
                           k->device, k->compiler, k->settings};
    uint64_t h = 0x6b666f726765ULL;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const char *p = parts[i] ? parts[i] : "";
        /* the length first, so "ab"+"c" and "a"+"bc" differ */
        uint64_t len = strlen(p);
        h = kf_hash64(&len, sizeof len, h);
        h = kf_hash64(p, len, h);
    }
    kf_hash_hex(h, key);
}

#define EVAL_COLS(e)                                                                               \
    e "id, " e "status, " e "detail, " e "sets_run, " e "bad_set, " e "bad_output, " e "first_bad, "  \
    e "got, " e "want, " e "max_abs_err, " e "max_rel_err, " e "nmse, " e "timed, " e "reps, "        \
    e "time_ms, " e "time_min_ms, " e "time_mean_ms, " e "run_wall_s, " e "resources, "              \
    e "memcheck, " e "measured_at, " e "run"

static void eval_row(sqlite3_stmt *q, int c, kf_store_eval *e) {
    memset(e, 0, sizeof *e);
    e->id = sqlite3_column_int64(q, c++);
    scopy(e->status, sizeof e->status, sqlite3_column_text(q, c++));
    scopy(e->detail, sizeof e->detail, sqlite3_column_text(q, c++));
    e->sets_run = sqlite3_column_int(q, c++);
    e->bad_set = sqlite3_column_int(q, c++);
    e->bad_output = sqlite3_column_int(q, c++);
    e->first_bad = sqlite3_column_int64(q, c++);
    e->got = sqlite3_column_double(q, c++);
    e->want = sqlite3_column_double(q, c++);
    e->max_abs_err = sqlite3_column_double(q, c++);
    e->max_rel_err = sqlite3_column_double(q, c++);
    e->nmse = sqlite3_column_double(q, c++);
    e->timed = sqlite3_column_int(q, c++);
    e->reps = sqlite3_column_int(q, c++);
    e->time_ms = sqlite3_column_double(q, c++);
    e->time_min_ms = sqlite3_column_double(q, c++);
    e->time_mean_ms = sqlite3_column_double(q, c++);
    e->run_wall_s = sqlite3_column_double(q, c++);
    scopy(e->resources, sizeof e->resources, sqlite3_column_text(q, c++));
    scopy(e->memcheck, sizeof e->memcheck, sqlite3_column_text(q, c++));
    e->measured_at = sqlite3_column_double(q, c++);
    scopy(e->measured_by, sizeof e->measured_by, sqlite3_column_text(q, c++));
}

/* See store.h. */
kf_status kf_store_cache_get(kf_store *s, const char *key, kf_store_eval *ev, int *found, kf_error *err) {
    *found = 0;
    sqlite3_stmt *q = NULL;
    kf_status st = prep(s, "SELECT " EVAL_COLS("") " FROM evaluations WHERE candidate = ? AND status NOT IN "
                           "('internal', 'timeout', 'impossible') ORDER BY measured_at DESC, id DESC LIMIT 1",
                        &q, err);
    if (st == KF_OK) {
        bind_text(q, 1, key);
        int rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            eval_row(q, 0, ev);
            *found = 1;
        } else if (rc != SQLITE_DONE) {
            st = db_fail(s, err, "cannot look up the cache");
        }
    }
    sqlite3_finalize(q);
    return st;
}

static kf_status step_done(kf_store *s, sqlite3_stmt *q, const char *what, kf_error *err) {
    return sqlite3_step(q) == SQLITE_DONE ? KF_OK : db_fail(s, err, what);
}

/* See store.h. */
kf_status kf_store_iter_put(kf_store *s, const char *run, const kf_store_key *k, const kf_store_iter *it,
                            kf_error *err) {
    sqlite3_stmt *cq = NULL, *eq = NULL, *iq = NULL, *dq = NULL, *rq = NULL;
    double now = wall_now();
    kf_status st = exec(s, "BEGIN IMMEDIATE", err);
    if (st != KF_OK) return st;
    if (st == KF_OK)
        st = prep(s, "INSERT OR IGNORE INTO candidates (key, task, source_hash, source, flags, platform, "
                     "device, compiler, settings, created) VALUES (?,?,?,?,?,?,?,?,?,?)", &cq, err);
    if (st == KF_OK) {
        char sh[17];
        const char *src = it->source ? it->source : "";
        kf_hash_hex(kf_hash64(src, strlen(src), 0), sh);
        bind_text(cq, 1, it->key);
        bind_text(cq, 2, k->task);
        bind_text(cq, 3, sh);
        bind_text(cq, 4, src);
        bind_text(cq, 5, it->flags);
        bind_text(cq, 6, k->platform);
        bind_text(cq, 7, k->device);
        bind_text(cq, 8, k->compiler);
        bind_text(cq, 9, k->settings);
        sqlite3_bind_double(cq, 10, now);
        st = step_done(s, cq, "cannot record the candidate", err);
    }
    sqlite3_int64 evid = it->ev.id;
    if (st == KF_OK && !it->cached) {
        st = prep(s, "INSERT INTO evaluations (candidate, run, iter, measured_at, status, detail, sets_run, "
                     "bad_set, bad_output, first_bad, got, want, max_abs_err, max_rel_err, nmse, timed, reps, "
                     "time_ms, time_min_ms, time_mean_ms, run_wall_s, resources, memcheck) "
                     "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", &eq, err);
        if (st == KF_OK) {
            const kf_store_eval *e = &it->ev;
            int c = 1;
            bind_text(eq, c++, it->key);
            bind_text(eq, c++, run);
            sqlite3_bind_int(eq, c++, it->iter);
            sqlite3_bind_double(eq, c++, now);
            bind_text(eq, c++, e->status);
            bind_text(eq, c++, e->detail);
            sqlite3_bind_int(eq, c++, e->sets_run);
            sqlite3_bind_int(eq, c++, e->bad_set);
            sqlite3_bind_int(eq, c++, e->bad_output);
            sqlite3_bind_int64(eq, c++, e->first_bad);
            sqlite3_bind_double(eq, c++, e->got);
            sqlite3_bind_double(eq, c++, e->want);
            sqlite3_bind_double(eq, c++, e->max_abs_err);
            sqlite3_bind_double(eq, c++, e->max_rel_err);
            sqlite3_bind_double(eq, c++, e->nmse);
            sqlite3_bind_int(eq, c++, e->timed);
            sqlite3_bind_int(eq, c++, e->reps);
            sqlite3_bind_double(eq, c++, e->time_ms);
            sqlite3_bind_double(eq, c++, e->time_min_ms);
            sqlite3_bind_double(eq, c++, e->time_mean_ms);
            sqlite3_bind_double(eq, c++, e->run_wall_s);
            bind_text(eq, c++, e->resources);
            bind_text(eq, c++, e->memcheck);
            st = step_done(s, eq, "cannot record the evaluation", err);
            evid = sqlite3_last_insert_rowid(s->db);
        }
    }
    int kept = 0;
    if (st == KF_OK)
        st = prep(s, "INSERT INTO iterations (run, iter, candidate, evaluation, cached, label, agent, followed, "
                     "hash, best_so_far, gbs, gflops, pct_floor, at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
                     "ON CONFLICT (run, iter) DO UPDATE SET candidate = excluded.candidate, "
                     "evaluation = excluded.evaluation, cached = excluded.cached, label = excluded.label, "
                     "agent = excluded.agent, followed = excluded.followed, hash = excluded.hash, "
                     "best_so_far = excluded.best_so_far, gbs = excluded.gbs, gflops = excluded.gflops, "
                     "pct_floor = excluded.pct_floor, at = excluded.at "
                     "WHERE iterations.candidate <> excluded.candidate", &iq, err);
    if (st == KF_OK) {
        int c = 1;
        bind_text(iq, c++, run);
        sqlite3_bind_int(iq, c++, it->iter);
        bind_text(iq, c++, it->key);
        sqlite3_bind_int64(iq, c++, evid);
        sqlite3_bind_int(iq, c++, it->cached);
        bind_text(iq, c++, it->label);
        bind_text(iq, c++, it->agent);
        bind_text(iq, c++, it->followed);
        bind_text(iq, c++, it->hash);
        sqlite3_bind_int(iq, c++, it->best_so_far);
        sqlite3_bind_double(iq, c++, it->gbs);
        sqlite3_bind_double(iq, c++, it->gflops);
        sqlite3_bind_double(iq, c++, it->pct_floor);
        sqlite3_bind_double(iq, c++, now);
        st = step_done(s, iq, "cannot record the iteration", err);
        kept = st == KF_OK && sqlite3_changes(s->db) == 0;
    }
    if (st == KF_OK && it->diag_json && !kept) {
        st = prep(s, "INSERT OR REPLACE INTO diagnoses (run, iter, bound, occupancy, json) VALUES (?,?,?,?,?)",
                  &dq, err);
        if (st == KF_OK) {
            bind_text(dq, 1, run);
            sqlite3_bind_int(dq, 2, it->iter);
            bind_text(dq, 3, it->bound);
            if (it->occupancy >= 0) sqlite3_bind_double(dq, 4, it->occupancy);
            else sqlite3_bind_null(dq, 4);
            bind_text(dq, 5, it->diag_json);
            st = step_done(s, dq, "cannot record the diagnosis", err);
        }
    }
    if (st == KF_OK) {
        st = prep(s, "UPDATE runs SET replayed = replayed + ?2, "
                     "best_iter = CASE WHEN ?3 THEN ?4 ELSE best_iter END, "
                     "best_candidate = CASE WHEN ?3 THEN ?5 ELSE best_candidate END, "
                     "best_ms = CASE WHEN ?3 THEN ?6 ELSE best_ms END, "
                     "best_pct = CASE WHEN ?3 THEN ?7 ELSE best_pct END WHERE id = ?1", &rq, err);
        if (st == KF_OK) {
            bind_text(rq, 1, run);
            sqlite3_bind_int(rq, 2, kept);
            sqlite3_bind_int(rq, 3, it->best_so_far);
            sqlite3_bind_int(rq, 4, it->iter);
            bind_text(rq, 5, it->key);
            sqlite3_bind_double(rq, 6, it->ev.time_ms);
            sqlite3_bind_double(rq, 7, it->pct_floor);
            st = step_done(s, rq, "cannot record the run's progress", err);
        }
    }
    if (st == KF_OK) st = exec(s, "COMMIT", err);
    if (st != KF_OK) rollback(s);
    sqlite3_finalize(cq);
    sqlite3_finalize(eq);
    sqlite3_finalize(iq);
    sqlite3_finalize(dq);
    sqlite3_finalize(rq);
    return st;
}

/* See store.h. */
kf_status kf_store_iter_verdict(kf_store *s, const char *run, int iter, const char *status, const char *detail,
                                const char *memcheck, kf_error *err) {
    sqlite3_stmt *q = NULL;
    kf_status st = prep(s, "UPDATE evaluations SET status = ?, detail = ?, memcheck = ? WHERE id = "
                           "(SELECT evaluation FROM iterations WHERE run = ? AND iter = ?)", &q, err);
    if (st == KF_OK) {
        bind_text(q, 1, status);
        bind_text(q, 2, detail);
        bind_text(q, 3, memcheck);
        bind_text(q, 4, run);
        sqlite3_bind_int(q, 5, iter);
        st = step_done(s, q, "cannot record the memory check", err);
    }
    sqlite3_finalize(q);
    return st;
}

/* See store.h. */
kf_status kf_store_iters_get(kf_store *s, const char *run, kf_store_iter **out, int *n, kf_error *err) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *q = NULL;
    kf_status st = prep(s,
                        "SELECT i.iter, i.label, i.agent, i.followed, i.hash, i.candidate, c.source, c.flags, "
                        "i.cached, i.best_so_far, i.gbs, i.gflops, i.pct_floor, d.json, d.bound, "
                        "coalesce(d.occupancy, -1), " EVAL_COLS("e.") " FROM iterations i "
                        "JOIN candidates c ON c.key = i.candidate JOIN evaluations e ON e.id = i.evaluation "
                        "LEFT JOIN diagnoses d ON d.run = i.run AND d.iter = i.iter "
                        "WHERE i.run = ? ORDER BY i.iter", &q, err);
    int cap = 0, rc = SQLITE_DONE;
    if (st == KF_OK) {
        bind_text(q, 1, run);
        while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
            if (*n == cap) *out = kf_realloc(*out, (size_t)(cap = cap ? 2 * cap : 16) * sizeof **out);
            kf_store_iter *it = &(*out)[(*n)++];
            memset(it, 0, sizeof *it);
            int c = 0;
            it->iter = sqlite3_column_int(q, c++);
            scopy(it->label, sizeof it->label, sqlite3_column_text(q, c++));
            scopy(it->agent, sizeof it->agent, sqlite3_column_text(q, c++));
            scopy(it->followed, sizeof it->followed, sqlite3_column_text(q, c++));
            scopy(it->hash, sizeof it->hash, sqlite3_column_text(q, c++));
            scopy(it->key, sizeof it->key, sqlite3_column_text(q, c++));
            it->source = sdup(sqlite3_column_text(q, c++));
            scopy(it->flags, sizeof it->flags, sqlite3_column_text(q, c++));
            it->cached = sqlite3_column_int(q, c++);
            it->best_so_far = sqlite3_column_int(q, c++);
            it->gbs = sqlite3_column_double(q, c++);
            it->gflops = sqlite3_column_double(q, c++);
            it->pct_floor = sqlite3_column_double(q, c++);
            it->diag_json = sdup(sqlite3_column_text(q, c++));
            scopy(it->bound, sizeof it->bound, sqlite3_column_text(q, c++));
            it->occupancy = sqlite3_column_double(q, c++);
            eval_row(q, c, &it->ev);
        }
        if (rc != SQLITE_DONE) st = db_fail(s, err, "cannot read the iterations");
    }
    sqlite3_finalize(q);
    if (st != KF_OK) {
        kf_store_iters_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return st;
}

void kf_store_iters_free(kf_store_iter *its, int n) {
    for (int i = 0; i < n; i++) {
        free((char *)its[i].source);
        free((char *)its[i].diag_json);
    }
    free(its);
}

/* See store.h. */
kf_status kf_store_transcript_add(kf_store *s, const char *run, int iter, const char *role, const char *text,
                                  long prompt_tokens, long completion_tokens, kf_error *err) {
    sqlite3_stmt *q = NULL;
    kf_status st = prep(s, "INSERT INTO transcripts (run, iter, role, text, prompt_tokens, completion_tokens, at) "
                           "VALUES (?,?,?,?,?,?,?)", &q, err);
    if (st == KF_OK) {
        bind_text(q, 1, run);
        sqlite3_bind_int(q, 2, iter);
        bind_text(q, 3, role);
        bind_text(q, 4, text);
        sqlite3_bind_int64(q, 5, prompt_tokens);
        sqlite3_bind_int64(q, 6, completion_tokens);
        sqlite3_bind_double(q, 7, wall_now());
        st = step_done(s, q, "cannot record the transcript", err);
    }
    sqlite3_finalize(q);
    return st;
}

/* See store.h. */
kf_status kf_store_transcript_call(kf_store *s, const char *run, int iter, const char *ask, const char *role,
                                   const char *text, long prompt_tokens, long completion_tokens, kf_error *err) {
    kf_status st = exec(s, "BEGIN IMMEDIATE", err);
    if (st != KF_OK) return st;
    if (ask) st = kf_store_transcript_add(s, run, iter, "user", ask, 0, 0, err);
    if (st == KF_OK) st = kf_store_transcript_add(s, run, iter, role, text, prompt_tokens, completion_tokens, err);
    if (st == KF_OK) st = exec(s, "COMMIT", err);
    if (st != KF_OK) rollback(s);
    return st;
}

/* ---- transfer ---- */

void kf_store_best_clear(kf_store_best *b) {
    free(b->source);
    memset(b, 0, sizeof *b);
}

void kf_store_best_free(kf_store_best *b, int n) {
    for (int i = 0; b && i < n; i++) free(b[i].source);
    free(b);
}

/* See store.h. */
kf_status kf_store_best_per_platform(kf_store *s, const char *task, const char *platform, const char *exclude,
                                     kf_store_best **out, int *n, kf_error *err) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *q = NULL;
    /* the ranking is the contract's: % of floor, then time, then the newest row */
    kf_status st = prep(s,
                        "SELECT platform, device, run, iter, key, flags, time_ms, pct_floor, measured_at, source "
                        "FROM (SELECT c.platform, r.device, i.run, i.iter, c.key, c.flags, e.time_ms, i.pct_floor, "
                        "e.measured_at, c.source, row_number() OVER (PARTITION BY c.platform "
                        "ORDER BY i.pct_floor DESC, e.time_ms, i.at DESC) AS rank "
                        "FROM iterations i JOIN candidates c ON c.key = i.candidate "
                        "JOIN evaluations e ON e.id = i.evaluation JOIN runs r ON r.id = i.run "
                        "WHERE c.task = ?1 AND e.status = 'ok' AND e.timed AND e.time_ms > 0 "
                        "AND (?2 IS NULL OR c.platform = ?2) AND (?3 IS NULL OR c.platform <> ?3)) "
                        "WHERE rank = 1 ORDER BY platform", &q, err);
    int cap = 0, rc = SQLITE_DONE;
    if (st == KF_OK) {
        bind_text(q, 1, task);
        if (platform) bind_text(q, 2, platform);
        if (exclude) bind_text(q, 3, exclude);
        while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
            if (*n == cap) *out = kf_realloc(*out, (size_t)(cap = cap ? 2 * cap : 4) * sizeof **out);
            kf_store_best *b = &(*out)[(*n)++];
            memset(b, 0, sizeof *b);
            int c = 0;
            scopy(b->platform, sizeof b->platform, sqlite3_column_text(q, c++));
            scopy(b->device, sizeof b->device, sqlite3_column_text(q, c++));
            scopy(b->run, sizeof b->run, sqlite3_column_text(q, c++));
            b->iter = sqlite3_column_int(q, c++);
            scopy(b->key, sizeof b->key, sqlite3_column_text(q, c++));
            scopy(b->flags, sizeof b->flags, sqlite3_column_text(q, c++));
            b->time_ms = sqlite3_column_double(q, c++);
            b->pct_floor = sqlite3_column_double(q, c++);
            b->measured_at = sqlite3_column_double(q, c++);
            b->source = sdup(sqlite3_column_text(q, c++));
        }
        if (rc != SQLITE_DONE) st = db_fail(s, err, "cannot look up the best kernels");
    }
    sqlite3_finalize(q);
    if (st != KF_OK) {
        kf_store_best_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return st;
}

/* See store.h. */
kf_status kf_store_best_elsewhere(kf_store *s, const char *task, const char *platform, kf_store_best *out,
                                  int *found, kf_error *err) {
    memset(out, 0, sizeof *out);
    *found = 0;
    kf_store_best *b = NULL;
    int n = 0;
    kf_status st = kf_store_best_per_platform(s, task, NULL, platform, &b, &n, err);
    if (st != KF_OK) return st;
    int pick = -1;
    for (int i = 0; i < n; i++)
        if (pick < 0 || b[i].pct_floor > b[pick].pct_floor ||
            (b[i].pct_floor == b[pick].pct_floor && b[i].time_ms < b[pick].time_ms))
            pick = i;
    if (pick >= 0) {
        *out = b[pick];
        b[pick].source = NULL;
        *found = 1;
    }
    kf_store_best_free(b, n);
    return KF_OK;
}

/* ---- cached input sets (refsets) ---- */

/* See store.h. */
kf_status kf_store_parts_put(kf_store *s, const char *key, const char *task, int n, const void *const *data,
                             const size_t *len, int keep, kf_error *err) {
    if (s->readonly) return kf_error_set(err, KF_ERR_IO, s->path, 0, 0, "store: opened read-only");
    kf_status st = exec(s, "BEGIN IMMEDIATE", err);
    if (st != KF_OK) return st;
    sqlite3_stmt *q = NULL;
    st = prep(s, "DELETE FROM refsets WHERE key = ?", &q, err);
    if (st == KF_OK) {
        bind_text(q, 1, key);
        if (sqlite3_step(q) != SQLITE_DONE) st = db_fail(s, err, "cannot replace cached input sets");
    }
    sqlite3_finalize(q);
    q = NULL;
    if (st == KF_OK) st = prep(s, "INSERT INTO refsets (key, part, nparts, task, created, bytes) VALUES (?,?,?,?,?,?)", &q, err);
    double now = wall_now();
    for (int k = 0; k < n && st == KF_OK; k++) {
        sqlite3_reset(q);
        bind_text(q, 1, key);
        sqlite3_bind_int(q, 2, k);
        sqlite3_bind_int(q, 3, n);
        bind_text(q, 4, task);
        sqlite3_bind_double(q, 5, now);
        sqlite3_bind_blob64(q, 6, data[k], (sqlite3_uint64)len[k], SQLITE_STATIC);
        if (sqlite3_step(q) != SQLITE_DONE) st = db_fail(s, err, "cannot cache the input sets");
    }
    sqlite3_finalize(q);
    q = NULL;
    /* the task's newest `keep` entries stay */
    if (st == KF_OK && keep > 0) st = prep(s, "DELETE FROM refsets WHERE task = ?1 AND key NOT IN (SELECT key FROM refsets "
                                              "WHERE task = ?1 AND part = 0 ORDER BY created DESC LIMIT ?2)", &q, err);
    if (st == KF_OK && keep > 0) {
        bind_text(q, 1, task);
        sqlite3_bind_int(q, 2, keep);
        if (sqlite3_step(q) != SQLITE_DONE) st = db_fail(s, err, "cannot drop old cached input sets");
    }
    sqlite3_finalize(q);
    if (st == KF_OK) st = exec(s, "COMMIT", err);
    if (st != KF_OK) rollback(s);
    return st;
}

/* See store.h. */
kf_status kf_store_parts_get(kf_store *s, const char *key, int *n, void ***data, size_t **len, kf_error *err) {
    *n = 0;
    *data = NULL;
    *len = NULL;
    sqlite3_stmt *q = NULL;
    kf_status st = prep(s, "SELECT part, nparts, bytes FROM refsets WHERE key = ? ORDER BY part", &q, err);
    if (st != KF_OK) return st;
    bind_text(q, 1, key);
    int rc, want = -1, k = 0;
    void **d = NULL;
    size_t *l = NULL;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int part = sqlite3_column_int(q, 0), np = sqlite3_column_int(q, 1);
        if (want < 0) {
            if (np < 1 || np > (1 << 20)) break;
            want = np;
            d = kf_calloc((size_t)np, sizeof *d);
            l = kf_calloc((size_t)np, sizeof *l);
        }
        if (np != want || part != k) break; /* a gap or a mixed entry: not served */
        size_t b = (size_t)sqlite3_column_bytes(q, 2);
        const void *p = sqlite3_column_blob(q, 2);
        d[k] = kf_malloc(b ? b : 1);
        if (b) memcpy(d[k], p, b);
        l[k++] = b;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) st = db_fail(s, err, "cannot read cached input sets");
    sqlite3_finalize(q);
    if (st != KF_OK || want < 0 || k != want) {
        for (int i = 0; i < k; i++) free(d[i]);
        free(d);
        free(l);
        return st;
    }
    *n = k;
    *data = d;
    *len = l;
    return KF_OK;
}
