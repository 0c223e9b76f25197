/*
 * Bad input and faults (issue 28): what a fuzzer or a careless user feeds kforge must end
 * in a located message and the documented exit code, never a crash, a hang, a silently
 * changed number or a lost file. The parser's limits are tested through the library; the
 * flags, paths and writes through the real binary (tests/store_cli.h runs it).
 *
 * No test here asserts a time: the parser tests that once took minutes (quadratic work)
 * only need to finish, and the suite's timeout is a hang guard a hundred times their cost.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "kforge/ir.h"
#include "kforge/verify.h"
#include "store_cli.h"

/* ------------------------------------------------------------ helpers */

/* text repeated n times, then tail (malloc'd). */
static char *repeat(const char *head, const char *unit, int n, const char *tail) {
    kf_buf b = {0};
    kf_buf_puts(&b, head);
    for (int i = 0; i < n; i++) kf_buf_puts(&b, unit);
    kf_buf_puts(&b, tail);
    return kf_buf_take(&b);
}

/* Parse text expecting failure with code; returns the error. */
static kf_error parse_fails(const char *text, kf_status code) {
    kf_error err = {0};
    kf_graph *g = NULL;
    kf_status st = kf_parse_string(text, "t.kf", &g, &err);
    cr_assert_eq(st, code, "expected status %d, got %d (%s)", code, st, err.msg);
    cr_assert_null(g);
    return err;
}

static kf_graph *parse_ok(const char *text) {
    kf_error err = {0};
    kf_graph *g = NULL;
    kf_status st = kf_parse_string(text, "t.kf", &g, &err);
    cr_assert_eq(st, KF_OK, "parse failed: %d:%d: %s", err.line, err.col, err.msg);
    return g;
}

/* ------------------------------------------------------------ 1: nesting depth */

TestSuite(parse_limits, .timeout = 120);

Test(parse_limits, deep_calls_are_a_located_error) {
    char *t = repeat("input x: f32[4]\noutput y = ", "relu(", 5000, "x");
    char *t2 = repeat(t, ")", 5000, "\n");
    kf_error e = parse_fails(t2, KF_ERR_PARSE);
    cr_assert_eq(e.line, 2);
    cr_assert_gt(e.col, 1);
    cr_assert_not_null(strstr(e.msg, "nested too deeply"), "%s", e.msg);
    free(t);
    free(t2);
}

Test(parse_limits, deep_parentheses_are_a_located_error) {
    char *t = repeat("input x: f32[4]\noutput y = x * ", "(", 20000, "x");
    char *t2 = repeat(t, ")", 20000, "\n");
    kf_error e = parse_fails(t2, KF_ERR_PARSE);
    cr_assert_eq(e.line, 2);
    cr_assert_not_null(strstr(e.msg, "nested too deeply"), "%s", e.msg);
    free(t);
    free(t2);
}

/* A real nesting well inside the limit still parses. */
Test(parse_limits, moderate_nesting_parses) {
    char *t = repeat("input x: f32[4]\noutput y = ", "relu(", 100, "x");
    char *t2 = repeat(t, ")", 100, "\n");
    kf_graph *g = parse_ok(t2);
    cr_assert_eq(g->nnodes, 100);
    kf_graph_free(g);
    free(t);
    free(t2);
}

/* ------------------------------------------------------------ 5: linear parse */

/* A run of minus signs is a loop, not a nesting: 200,000 of them parse. */
Test(parse_limits, many_unary_minus_signs) {
    char *t = repeat("input x: f32[4]\noutput y = ", "-", 200000, "x\n");
    kf_graph *g = parse_ok(t);
    cr_assert_eq(g->nnodes, 200000);
    kf_graph_free(g);
    free(t);
}

Test(parse_limits, long_flat_expression) {
    char *t = repeat("input x: f32[4]\noutput y = x", " + x", 200000, "\n");
    kf_graph *g = parse_ok(t);
    cr_assert_eq(g->nnodes, 200000);
    kf_graph_free(g);
    free(t);
}

Test(parse_limits, many_chained_statements) {
    kf_buf b = {0};
    kf_buf_puts(&b, "input v0: f32[4]\n");
    int n = 100000;
    for (int i = 1; i < n; i++) kf_buf_printf(&b, "v%d = relu(v%d) * 2\n", i, i - 1);
    kf_buf_printf(&b, "output y = v%d + 1\n", n - 1);
    kf_graph *g = parse_ok(b.data);
    cr_assert_eq(g->nnodes, 2 * (n - 1) + 1);
    /* the names are found, and temporaries keep their "%N" names */
    cr_assert_eq(kf_graph_find(g, "v99999"), g->nodes[g->nnodes - 2].out);
    cr_assert_eq(kf_graph_find(g, "v1"), g->nodes[1].out);
    cr_assert_eq(kf_graph_find(g, "nosuch"), -1);
    cr_assert_str_eq(g->values[g->nodes[0].out].name, "%1");
    kf_graph_free(g);
    kf_buf_free(&b);
}

/* ------------------------------------------------------------ 2: sizes that overflow */

Test(parse_limits, input_bytes_overflow_is_refused_at_the_shape) {
    kf_error e = parse_fails("task t\ninput x: f32[2147483648, 2147483648]\noutput y = relu(x)\n",
                             KF_ERR_PARSE);
    cr_assert_eq(e.line, 2);
    cr_assert_eq(e.col, 13, "col %d: %s", e.col, e.msg); /* the '[' */
    cr_assert_not_null(strstr(e.msg, "f32[2147483648, 2147483648]"), "%s", e.msg);
    cr_assert_not_null(strstr(e.msg, "TiB"), "%s", e.msg);
    /* numel fits in 64 bits, bytes do not: i64 (8 bytes) at 2^61 elements */
    parse_fails("input x: i64[2305843009213693952]\noutput y = x + 1\n", KF_ERR_PARSE);
}

/* Broadcasting two small inputs into one that is too big is refused where the op is. */
Test(parse_limits, broadcast_result_overflow_is_refused_at_the_op) {
    kf_error e = parse_fails("input a: f32[4294967296, 1]\ninput b: f32[1, 4294967296]\n"
                             "output y = a * b\n", KF_ERR_TYPE);
    cr_assert_eq(e.line, 3);
    cr_assert_eq(e.col, 14, "col %d: %s", e.col, e.msg);
    cr_assert_not_null(strstr(e.msg, "TiB"), "%s", e.msg);
}

/* ------------------------------------------------------------ 7: literals */

Test(parse_limits, huge_integer_axis_shows_the_number_written) {
    kf_error e = parse_fails("input x: f32[4, 4]\noutput y = sum(x, axes=[9223372036854775807])\n",
                             KF_ERR_PARSE);
    cr_assert_eq(e.line, 2);
    cr_assert_eq(e.col, 25);
    cr_assert_not_null(strstr(e.msg, "9223372036854775807"), "%s", e.msg);
    e = parse_fails("input x: f32[4, 4]\noutput y = sum(x, axes=[-99999999999999999999])\n",
                    KF_ERR_PARSE);
    cr_assert_not_null(strstr(e.msg, "99999999999999999999"), "%s", e.msg);
    e = parse_fails("input x: f32[4, 4]\noutput y = x * 1e400\n", KF_ERR_PARSE);
    cr_assert_not_null(strstr(e.msg, "1e400"), "%s", e.msg);
    cr_assert_eq(e.col, 16);
    /* the largest exact integer is still an integer, and reported exactly when out of range */
    e = parse_fails("input x: f32[4, 4]\noutput y = sum(x, axes=[9007199254740992])\n", KF_ERR_TYPE);
    cr_assert_not_null(strstr(e.msg, "9007199254740992"), "%s", e.msg);
    /* 1e20 as an axis is no integer */
    parse_fails("input x: f32[4, 4]\noutput y = sum(x, axes=1e20)\n", KF_ERR_PARSE);
}

/* ------------------------------------------------------------ 3: file size, memory */

static void limit_memory(void) {
#ifndef __SANITIZE_ADDRESS__ /* ASan's shadow memory cannot live under an address-space limit */
    struct rlimit r = {(rlim_t)2 << 30, (rlim_t)2 << 30};
    setrlimit(RLIMIT_AS, &r); /* a reader without a cap fails here, not on the machine */
#endif
}

Test(parse_limits, endless_file_is_refused, .init = limit_memory) {
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_file("/dev/zero", &g, &err), KF_ERR_IO, "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "larger than"), "%s", err.msg);
}

Test(parse_limits, nul_byte_is_located) {
    char path[] = "/tmp/kf_badinput_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    static const char text[] = "input x: f32[4]\noutput y = relu(x)\n\0# more";
    cr_assert_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    kf_error err = {0};
    kf_graph *g = NULL;
    kf_status st = kf_parse_file(path, &g, &err);
    unlink(path);
    cr_assert_eq(st, KF_ERR_PARSE, "%s", err.msg);
    cr_assert_eq(err.line, 3);
    cr_assert_eq(err.col, 1);
}

/* A task whose inputs fit the parser's limit but no machine's memory is refused before
 * anything is allocated (it used to abort in malloc or meet the OOM killer). */
Test(parse_limits, inputs_larger_than_memory_are_refused) {
    kf_graph *g = parse_ok("input x: f32[1099511627776]\noutput y = relu(x)\n"); /* 4 TiB */
    kf_verify_ctx *c = NULL;
    kf_error err = {0};
    kf_status st = kf_verify_ctx_new(g, NULL, &c, &err);
    cr_assert_eq(st, KF_ERR_UNSUPPORTED, "%d: %s", st, err.msg);
    cr_assert_null(c);
    cr_assert_not_null(strstr(err.msg, "memory"), "%s", err.msg);
    kf_graph_free(g);
}

/* ------------------------------------------------------------ the binary */

static void cli_init(void) {
    cli_setup(NULL);
    /* a private calibration cache: a test can tell whether kforge calibrated */
    char cache[300];
    snprintf(cache, sizeof cache, "%s/cache", cli.dir);
    setenv("KFORGE_CACHE_DIR", cache, 1);
}

TestSuite(cli_faults, .init = cli_init, .fini = cli_teardown, .timeout = 600);

/* Like cli_run, with stdout into out_path (NULL: <dir>/<name>.out) and, when as_bytes > 0,
 * an address-space limit on the child. */
static int run_limited(const char *name, const char *const *args, const char *out_path,
                       long long as_bytes) {
    char out[300], errp[300];
    if (out_path) snprintf(out, sizeof out, "%s", out_path);
    else snprintf(out, sizeof out, "%s/%s.out", cli.dir, name);
    snprintf(errp, sizeof errp, "%s/%s.err", cli.dir, name);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0) _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        if (as_bytes > 0) {
            struct rlimit r = {(rlim_t)as_bytes, (rlim_t)as_bytes};
            setrlimit(RLIMIT_AS, &r);
            setenv("OMP_NUM_THREADS", "1", 1);
            setenv("OPENBLAS_NUM_THREADS", "1", 1);
        }
        execv(KF_BUILD_DIR "/kforge", (char *const *)args);
        _exit(127);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cli_no_sanitizer_report(errp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* stderr of run `name` contains each of the phrases (NULL-terminated). */
static void err_has(const char *name, const char *const *phrases) {
    char *e = cli_err(name);
    for (int i = 0; phrases[i]; i++)
        cr_assert_not_null(strstr(e, phrases[i]), "%s: stderr lacks '%s':\n%s", name, phrases[i], e);
    free(e);
}

/* 6: every number a flag takes is checked whole, in range: an overflow is a usage error,
 * not a value cut to 32 bits (4294967297 ran 1 iteration) or NaN taken for a budget. */
Test(cli_faults, numeric_flags_are_range_checked) {
    static const char *const bad[][2] = {
        {"--iters", "4294967297"},  {"--iters", "999999999999"},      {"--threads", "999999999999"},
        {"--seed", "99999999999999999999999"}, {"--time-budget", "nan"}, {"--time-budget", "inf"},
        {"--time-budget", "1e999"}, {"--max-calls", "4294967297"},     {"--builtin-iters", "4294967296"},
        {"--llm-timeout", "nan"},   {"--iters", " 5"},                 {"--iters", "5x"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *args[] = {"kforge", "synth", cli.task, "--no-store", "--memcheck", "off", bad[i][0], bad[i][1], NULL};
        char name[32];
        snprintf(name, sizeof name, "flag%zu", i);
        cr_assert_eq(cli_run(name, args), 2, "%s %s was accepted", bad[i][0], bad[i][1]);
        const char *want[] = {bad[i][0], bad[i][1], NULL};
        err_has(name, want);
    }
    const char *v[] = {"kforge", "verify", cli.task, cli.task, "--seed", "99999999999999999999", NULL};
    cr_assert_eq(cli_run("vseed", v), 2);
    const char *r[] = {"kforge", "runs", "--limit", "4294967296", NULL};
    cr_assert_eq(cli_run("rlimit", r), 2);
    const char *c[] = {"kforge", "calibrate", "--threads", "4294967297", NULL};
    cr_assert_eq(cli_run("cthreads", c), 2);
    const char *want[] = {"--threads", "4294967297", NULL};
    err_has("cthreads", want);
}

/* 8: an --out too long for the run record is refused, not cut (the files went elsewhere). */
Test(cli_faults, long_out_path_is_refused) {
    char out[700];
    int n = snprintf(out, sizeof out, "%s/", cli.dir);
    memset(out + n, 'd', sizeof out - (size_t)n - 1);
    out[sizeof out - 1] = 0;
    const char *args[] = {"kforge", "synth", cli.task, "--no-store", "--iters", "1", "--memcheck", "off",
                          "--out", out, NULL};
    cr_assert_eq(cli_run("longout", args), 2);
    const char *want[] = {"at most 511", NULL};
    err_has("longout", want);
}

/* 19: an --out that cannot be made fails before the calibration (which took minutes). */
Test(cli_faults, unwritable_out_fails_before_calibrating) {
    const char *args[] = {"kforge", "synth", cli.task, "--no-store", "--iters", "1", "--memcheck", "off",
                          "--out", "/proc/kforge-no-such-dir/out", NULL};
    cr_assert_eq(cli_run("noout", args), 2);
    const char *want[] = {"/proc/kforge-no-such-dir", "cannot create directory", NULL};
    err_has("noout", want);
    char cache[300];
    snprintf(cache, sizeof cache, "%s/cache", cli.dir);
    struct stat st;
    cr_assert_neq(stat(cache, &st), 0, "kforge calibrated (it made %s) before checking --out", cache);
}

/* 4: out of memory is exit 3 with a message, not SIGABRT (134). */
Test(cli_faults, out_of_memory_exits_3) {
#ifdef __SANITIZE_ADDRESS__
    cr_skip_test("ASan's shadow memory cannot live under an address-space limit");
#else
    char path[300];
    snprintf(path, sizeof path, "%s/big.kf", cli.dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    /* 12 MB of blank lines (under the file cap): a token each, 48 bytes apiece */
    fputs("input x: f32[4]\noutput y = relu(x)\n", f);
    for (int i = 0; i < 12000000 / 64; i++) fputs("\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
                                                   "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", f);
    cr_assert_eq(fclose(f), 0);
    const char *args[] = {"kforge", "synth", path, "--no-store", NULL};
    int rc = run_limited("oom", args, NULL, 512ll << 20);
    cr_assert_eq(rc, 3, "exit %d", rc);
    const char *want[] = {"out of memory", NULL};
    err_has("oom", want);
#endif
}

/* 19: show --best of a file that is no task says so (exit 2), not "no verified kernel". */
Test(cli_faults, show_best_of_a_non_task) {
    char path[300];
    snprintf(path, sizeof path, "%s/notes.txt", cli.dir);
    kf_error err = {0};
    cr_assert_eq(kf_write_file(path, "hello world\n", 12, &err), KF_OK);
    const char *args[] = {"kforge", "show", "--best", path, NULL};
    cr_assert_eq(cli_run("best", args), 2);
    const char *want[] = {"not a task", "notes.txt:1:", NULL};
    err_has("best", want);
}

/* 18: no leak (LeakSanitizer fails the sanitizer build's run). */
Test(cli_faults, devices_json_is_clean) {
    const char *args[] = {"kforge", "devices", "--json", NULL};
    cr_assert_eq(cli_run("devices", args), 0);
    char *o = cli_out("devices");
    cr_assert_eq(o[0], '[', "%s", o);
    free(o);
}

/* A char device like /dev/full in the test's folder (so that a kforge that replaced its
 * target by a file, as one run as root did, spoils nothing); NULL when it cannot be made. */
static const char *full_device(char *buf, size_t cap) {
    snprintf(buf, cap, "%s/full", cli.dir);
    if (mknod(buf, S_IFCHR | 0666, makedev(1, 7)) == 0) return buf;
    if (geteuid() != 0) return "/dev/full"; /* /dev is not ours to replace */
    return NULL;
}

/* 9: write errors are reported with their reason: the HTML page, stdout, the run record. */
Test(cli_faults, write_errors_are_reported) {
    char out[300];
    snprintf(out, sizeof out, "%s/run", cli.dir);
    const char *s[] = {"kforge", "synth", cli.task, "--iters", "1", "--memcheck", "off", "--threads", "1",
                       "--analysis", "off", "--out", out, "-q", NULL};
    cr_assert_eq(cli_run("synth", s), 0);
    sqlite3 *h = cli_db();
    char *id = cli_text(h, "SELECT id FROM runs ORDER BY started DESC LIMIT 1", NULL);
    sqlite3_close(h);
    cr_assert_not_null(id);

    char dev[300];
    const char *full = full_device(dev, sizeof dev);
    if (full) {
        const char *r[] = {"kforge", "report", id, "--html", full, NULL};
        cr_assert_eq(cli_run("report", r), 2);
        const char *want[] = {"No space left on device", NULL};
        err_has("report", want);
        char *o = cli_out("report");
        cr_assert_null(strstr(o, "written"), "%s", o);
        free(o);
        struct stat st;
        cr_assert_eq(stat(full, &st), 0);
        cr_assert(S_ISCHR(st.st_mode), "%s was replaced by a file", full);
        /* stdout on a full disk */
        const char *l[] = {"kforge", "runs", "--json", NULL};
        cr_assert_eq(run_limited("runsfull", l, full, 0), 2);
        const char *want2[] = {"No space left on device", NULL};
        err_has("runsfull", want2);
    }
    free(id);

    /* the run record: run.json cannot be written (a directory took its name) */
    char rj[400];
    snprintf(rj, sizeof rj, "%s/rr/run.json", cli.dir);
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(rj, &err), KF_OK);
    snprintf(out, sizeof out, "%s/rr", cli.dir);
    const char *s2[] = {"kforge", "synth", cli.task, "--no-store", "--iters", "1", "--memcheck", "off",
                        "--threads", "1", "--analysis", "off", "--out", out, "-q", NULL};
    cr_assert_eq(cli_run("rr", s2), 2);
    const char *want3[] = {"cannot write the run record: Is a directory", NULL};
    err_has("rr", want3);
}

/* 19: export --out to an impossible path: one line naming it, exit 2, no traceback. */
Test(cli_faults, export_to_an_impossible_path) {
    char out[300], bad[400];
    snprintf(out, sizeof out, "%s/run", cli.dir);
    const char *s[] = {"kforge", "synth", cli.task, "--no-store", "--iters", "1", "--memcheck", "off",
                       "--threads", "1", "--analysis", "off", "--out", out, "-q", NULL};
    cr_assert_eq(cli_run("synth", s), 0);
    snprintf(bad, sizeof bad, "%s/run.json/sub/x.py", out); /* under a file */
    const char *e[] = {"kforge", "export", out, "--as", "torch", "--out", bad, NULL};
    cr_assert_eq(cli_run("export", e), 2);
    const char *want[] = {"cannot write the module", "run.json", NULL};
    err_has("export", want);
    char *t = cli_err("export");
    cr_assert_null(strstr(t, "Traceback"), "%s", t);
    free(t);
}
