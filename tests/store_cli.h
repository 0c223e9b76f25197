/*
 * Running the real `kforge` binary from a store test: a temporary folder with a store and
 * a small task, one helper that runs kforge with its stdout and stderr in files (and fails
 * the test on a sanitizer report in either, since the test's own output never shows
 * them), and a few readers of the store's tables. Include once, after criterion.h.
 */
#ifndef KF_TEST_STORE_CLI_H
#define KF_TEST_STORE_CLI_H

#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kforge/core.h"

static const char kTripleTask[] = "task triple\ninput x: f32[1000]\noutput y = x * 3.0\n";

static struct {
    char dir[128];     /* the folder everything below lives in */
    char db[200];      /* the store */
    char task[200];    /* kTripleTask as a file */
} cli;

/* Make the folder (under base, an existing directory, or /tmp when NULL). */
static inline void cli_setup(const char *base) {
    if (base) snprintf(cli.dir, sizeof cli.dir, "%s/cli", base);
    else snprintf(cli.dir, sizeof cli.dir, "/tmp/kf_test_store_cli_XXXXXX");
    if (base) cr_assert_eq(mkdir(cli.dir, 0700), 0);
    else cr_assert_not_null(mkdtemp(cli.dir));
    snprintf(cli.db, sizeof cli.db, "%s/kforge.db", cli.dir);
    snprintf(cli.task, sizeof cli.task, "%s/triple.kf", cli.dir);
    kf_error err = {0};
    cr_assert_eq(kf_write_file(cli.task, kTripleTask, strlen(kTripleTask), &err), KF_OK, "%s", err.msg);
    setenv("KFORGE_STORE", cli.db, 1);
}

static inline void cli_teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cli.dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", cli.dir);
}

/* The file's text (malloc'd; "" when absent). */
static inline char *cli_slurp(const char *path) {
    char *t = NULL;
    kf_error err = {0};
    if (kf_read_file(path, &t, NULL, &err) != KF_OK) return kf_strdup("");
    return t;
}

static inline void cli_no_sanitizer_report(const char *path) {
    char *t = cli_slurp(path);
    const char *bad[] = {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert_null(strstr(t, bad[i]), "sanitizer report in %s:\n%s", path, t);
    free(t);
}

/* Start kforge with args (NULL-terminated, args[0] = "kforge"); stdout into
 * <dir>/<name>.out, stderr into <dir>/<name>.err. Returns the pid. */
static inline pid_t cli_spawn(const char *name, const char *const *args) {
    char out[300], errp[300];
    snprintf(out, sizeof out, "%s/%s.out", cli.dir, name);
    snprintf(errp, sizeof errp, "%s/%s.err", cli.dir, name);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0) _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        execv(KF_BUILD_DIR "/kforge", (char *const *)args);
        _exit(127);
    }
    return pid;
}

/* Wait for a spawned kforge: its exit code (128 + signal when killed). */
static inline int cli_wait(const char *name, pid_t pid) {
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    char path[300];
    snprintf(path, sizeof path, "%s/%s.out", cli.dir, name);
    cli_no_sanitizer_report(path);
    snprintf(path, sizeof path, "%s/%s.err", cli.dir, name);
    cli_no_sanitizer_report(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static inline int cli_run(const char *name, const char *const *args) { return cli_wait(name, cli_spawn(name, args)); }

/* What run `name` printed on stdout (malloc'd). */
static inline char *cli_out(const char *name) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s.out", cli.dir, name);
    return cli_slurp(path);
}

static inline char *cli_err(const char *name) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s.err", cli.dir, name);
    return cli_slurp(path);
}

/* The store, read directly (read-only). */
static inline sqlite3 *cli_db(void) {
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open_v2(cli.db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "cannot open %s", cli.db);
    sqlite3_busy_timeout(h, 10000);
    return h;
}

/* The first column of the first row of sql with text parameter p (NULL: none), as an
 * integer (-1: no row). */
static inline long long cli_int(sqlite3 *h, const char *sql, const char *p) {
    sqlite3_stmt *q = NULL;
    cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &q, NULL), SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(h));
    if (p) sqlite3_bind_text(q, 1, p, -1, SQLITE_TRANSIENT);
    long long v = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int64(q, 0) : -1;
    sqlite3_finalize(q);
    return v;
}

/* The same as text (malloc'd; NULL: no row). */
static inline char *cli_text(sqlite3 *h, const char *sql, const char *p) {
    sqlite3_stmt *q = NULL;
    cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &q, NULL), SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(h));
    if (p) sqlite3_bind_text(q, 1, p, -1, SQLITE_TRANSIENT);
    char *v = NULL;
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0)) v = kf_strdup((const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    return v;
}

static inline void cli_integrity_ok(void) {
    sqlite3 *h = cli_db();
    char *v = cli_text(h, "PRAGMA integrity_check", NULL);
    cr_assert_not_null(v);
    cr_assert_str_eq(v, "ok");
    free(v);
    sqlite3_close(h);
}
#endif
