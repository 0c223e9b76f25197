/*
 * The store under bad conditions (issue 28, items 10-12), through the real binary: another
 * program's SQLite file is refused and left byte for byte as it was; reading commands
 * create no store (a mistyped --store is an error naming the path, not "no runs"); a store
 * write that fails mid-run is said, even under -q, and the exit is 2; a store in a
 * read-only folder can still be listed and shown.
 *
 * Read-only is made with permissions. root ignores them, so as root the reading commands
 * run as the user nobody (setuid in the child), which they do not bypass.
 */
#include <criterion/criterion.h>
#include <grp.h>
#include <sqlite3.h>

#include "kforge/store.h"
#include "store_cli.h"

static void setup(void) { cli_setup(NULL); }

static void teardown(void) {
    /* the read-only test leaves folders without write permission */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "chmod -R u+w '%s' 2>/dev/null", cli.dir);
    if (system(cmd) != 0) fprintf(stderr, "could not chmod %s\n", cli.dir);
    cli_teardown();
}

TestSuite(store_faults, .init = setup, .fini = teardown, .timeout = 300);

/* kforge synth on the triple task, one or two quick iterations, into store db. */
static int synth(const char *name, const char *db, const char *iters) {
    char out[300];
    snprintf(out, sizeof out, "%s/%s", cli.dir, name);
    const char *args[] = {"kforge", "synth", cli.task, "--store", db, "--iters", iters, "--seed", "3",
                          "--memcheck", "off", "--threads", "1", "--analysis", "off", "--out", out, "-q", NULL};
    return cli_run(name, args);
}

static void err_has(const char *name, const char *phrase) {
    char *e = cli_err(name);
    cr_assert_not_null(strstr(e, phrase), "%s: stderr lacks '%s':\n%s", name, phrase, e);
    free(e);
}

static void out_lacks(const char *name, const char *phrase) {
    char *o = cli_out(name);
    cr_assert_null(strstr(o, phrase), "%s: stdout has '%s':\n%s", name, phrase, o);
    free(o);
}

static void exec_sql(const char *db, const char *sql) {
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
    sqlite3_close(h);
}

static char *slurp_bytes(const char *path, size_t *len) {
    char *t = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_read_file(path, &t, len, &err), KF_OK, "%s", err.msg);
    return t;
}

/* 10: another program's SQLite file is refused by readers and by synth, and not touched
 * (kforge added its tables to it, and switched it to WAL). */
Test(store_faults, foreign_database_is_refused) {
    char db[300];
    snprintf(db, sizeof db, "%s/notes.db", cli.dir);
    exec_sql(db, "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes (text) VALUES ('hi');");
    size_t n0 = 0, n1 = 0;
    char *before = slurp_bytes(db, &n0);
    const char *r[] = {"kforge", "runs", "--store", db, NULL};
    cr_assert_eq(cli_run("runs", r), 2);
    err_has("runs", "not a kforge store");
    err_has("runs", "notes");
    out_lacks("runs", "no runs");
    cr_assert_eq(synth("synth", db, "1"), 2);
    err_has("synth", "not a kforge store");
    err_has("synth", "notes.db");
    char *after = slurp_bytes(db, &n1);
    cr_assert(n0 == n1 && memcmp(before, after, n0) == 0, "kforge changed another program's database");
    free(before);
    free(after);
    char wal[320];
    snprintf(wal, sizeof wal, "%s-wal", db);
    cr_assert_neq(access(wal, F_OK), 0, "kforge put %s in WAL mode", db);
}

/* 10: a reading command given a store that is not there (a typo) says so and creates
 * nothing (it made the directories and an empty store, and said "no runs"); synth, which
 * records, creates it and says so. */
Test(store_faults, reading_commands_create_no_store) {
    char db[300], dir[300];
    snprintf(dir, sizeof dir, "%s/typo", cli.dir);
    snprintf(db, sizeof db, "%s/sub/kforge.db", dir);
    const char *r[] = {"kforge", "runs", "--store", db, NULL};
    const char *s[] = {"kforge", "show", "0123456789", "--store", db, NULL};
    const char *b[] = {"kforge", "show", "--best", cli.task, "--store", db, NULL};
    char html[300];
    snprintf(html, sizeof html, "%s/r.html", cli.dir);
    const char *h[] = {"kforge", "report", "0123456789", "--store", db, "--html", html, NULL};
    const char *const *cmds[] = {r, s, b, h};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char name[16];
        snprintf(name, sizeof name, "read%zu", i);
        cr_assert_eq(cli_run(name, cmds[i]), 2, "%s %s", cmds[i][1], cmds[i][2]);
        err_has(name, db);
        err_has(name, "no store here");
        out_lacks(name, "no runs");
        struct stat st;
        cr_assert_neq(stat(dir, &st), 0, "kforge %s created %s", cmds[i][1], dir);
    }
    /* the default store, absent, is no different: KFORGE_STORE names it */
    const char *d[] = {"kforge", "runs", NULL};
    cr_assert_eq(cli_run("default", d), 2);
    err_has("default", cli.db);
    cr_assert_neq(access(cli.db, F_OK), 0);

    cr_assert_eq(synth("synth", db, "1"), 0);
    err_has("synth", "created a new store at");
    cr_assert_eq(access(db, F_OK), 0);
    cr_assert_eq(synth("again", db, "1"), 0);
    char *e = cli_err("again");
    cr_assert_null(strstr(e, "created"), "an existing store was reported as created:\n%s", e);
    free(e);
    cr_assert_eq(cli_run("runs_after", r), 0);
}

/* 11: a store write that fails mid-run (planted: the iterations table refuses inserts, as
 * a full disk would) is said on stderr even with -q, with the run's id, and exits 2; the
 * run is not left "running" or called "done". It ended with "run ... stored" and 0. */
Test(store_faults, failed_store_write_is_reported) {
    kf_store *s = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_store_open(cli.db, &s, &err), KF_OK, "%s", err.msg);
    kf_store_close(s);
    exec_sql(cli.db, "CREATE TRIGGER planted BEFORE INSERT ON iterations "
                     "BEGIN SELECT RAISE(ABORT, 'database or disk is full (planted)'); END;");
    cr_assert_eq(synth("synth", cli.db, "2"), 2);
    err_has("synth", "did not record all of the run");
    err_has("synth", "cannot record the iteration: database or disk is full (planted)");
    out_lacks("synth", "stored");
    sqlite3 *h = cli_db();
    char *id = cli_text(h, "SELECT id FROM runs", NULL);
    char *status = cli_text(h, "SELECT status FROM runs", NULL);
    char *why = cli_text(h, "SELECT stop_reason FROM runs", NULL);
    sqlite3_close(h);
    cr_assert_not_null(id);
    char id10[11];
    snprintf(id10, sizeof id10, "%.10s", id);
    err_has("synth", id10);
    cr_assert_str_eq(status, "failed");
    cr_assert_not_null(strstr(why, "not all recorded"), "%s", why);
    free(id), free(status), free(why);
}

/* Run kforge as a user who cannot write the store's folder (nobody when we are root). */
static int run_unprivileged(const char *name, const char *const *args) {
    char out[300], errp[300];
    snprintf(out, sizeof out, "%s/out/%s.out", cli.dir, name);
    snprintf(errp, sizeof errp, "%s/out/%s.err", cli.dir, name);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0666), e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (o < 0 || e < 0) _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) _exit(125);
        if (access(KF_BUILD_DIR "/kforge", X_OK) != 0) _exit(124); /* a build under a private home */
        execv(KF_BUILD_DIR "/kforge", (char *const *)args);
        _exit(127);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 124)
        cr_skip_test("the user nobody cannot run " KF_BUILD_DIR "/kforge: no unprivileged reader to test with");
    cli_no_sanitizer_report(errp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *unpriv_text(const char *name, const char *ext) {
    char path[300];
    snprintf(path, sizeof path, "%s/out/%s.%s", cli.dir, name, ext);
    return cli_slurp(path);
}

/* 12: a store in a read-only folder (no room for WAL's side files) lists, shows and
 * reports; it could not even be listed ("unable to open database file"). */
Test(store_faults, read_only_store_is_readable) {
    char dir[300], db[320], outdir[300];
    snprintf(dir, sizeof dir, "%s/ro", cli.dir);
    snprintf(db, sizeof db, "%s/kforge.db", dir);
    snprintf(outdir, sizeof outdir, "%s/out", cli.dir);
    cr_assert_eq(synth("synth", db, "1"), 0);
    sqlite3 *h = NULL;
    /* read-write: its close removes the WAL's side files, as a finished kforge leaves it */
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    char *id = cli_text(h, "SELECT id FROM runs", NULL);
    sqlite3_close(h);
    cr_assert_not_null(id);
    char side[340];
    snprintf(side, sizeof side, "%s-wal", db);
    cr_assert_neq(access(side, F_OK), 0);
    cr_assert_eq(mkdir(outdir, 0777), 0);
    cr_assert_eq(chmod(outdir, 0777), 0);
    cr_assert_eq(chmod(cli.dir, 0755), 0);
    cr_assert_eq(chmod(db, 0444), 0);
    cr_assert_eq(chmod(dir, 0555), 0);

    const char *r[] = {"kforge", "runs", "--store", db, NULL};
    int rc = run_unprivileged("runs", r);
    char *o = unpriv_text("runs", "out"), *e = unpriv_text("runs", "err");
    cr_assert_eq(rc, 0, "kforge runs on a read-only store: exit %d\n%s", rc, e);
    char id10[11];
    snprintf(id10, sizeof id10, "%.10s", id);
    cr_assert_not_null(strstr(o, id10), "%s", o);
    cr_assert_not_null(strstr(o, "done"), "%s", o);
    free(o), free(e);

    const char *s[] = {"kforge", "show", id10, "--store", db, NULL};
    rc = run_unprivileged("show", s);
    o = unpriv_text("show", "out"), e = unpriv_text("show", "err");
    cr_assert_eq(rc, 0, "kforge show on a read-only store: exit %d\n%s", rc, e);
    cr_assert_not_null(strstr(o, "best kernel"), "%s", o);
    free(o), free(e);

    char html[300];
    snprintf(html, sizeof html, "%s/r.html", outdir);
    const char *p[] = {"kforge", "report", id10, "--store", db, "--html", html, NULL};
    rc = run_unprivileged("report", p);
    e = unpriv_text("report", "err");
    cr_assert_eq(rc, 0, "kforge report on a read-only store: exit %d\n%s", rc, e);
    cr_assert_eq(access(html, F_OK), 0);
    free(e);
    /* a resume must record: refused before it runs anything */
    const char *q[] = {"kforge", "synth", "--resume", id10, "--store", db, NULL};
    rc = run_unprivileged("resume", q);
    e = unpriv_text("resume", "err");
    cr_assert_eq(rc, 2, "kforge synth --resume on a read-only store: exit %d\n%s", rc, e);
    cr_assert_not_null(strstr(e, "can only be read here"), "%s", e);
    free(e);
    /* nothing appeared beside the store */
    cr_assert_neq(access(side, F_OK), 0);
    free(id);
}
