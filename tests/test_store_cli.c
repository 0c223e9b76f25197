/*
 * The store through the real binary: `kforge synth --no-cache` measures every candidate
 * again (and, as the control, the same run without it is served from the cache), the
 * `kforge runs` and `kforge show` outputs (table and --json, the fields docs/store.md
 * lists), and two `kforge synth` processes writing one store at the same time.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_cli.h"

static void setup(void) { cli_setup(NULL); }

TestSuite(store_cli, .init = setup, .fini = cli_teardown, .timeout = 600);

/* kforge synth triple.kf --iters 3 --seed S --out <dir>/<name> [extra]; with --analysis off
 * the candidates are a function of the seed alone, so runs with one seed propose the same */
static int synth(const char *name, const char *seed, const char *extra) {
    char out[300];
    snprintf(out, sizeof out, "%s/%s", cli.dir, name);
    const char *args[] = {"kforge", "synth", cli.task, "--target", "cpu", "--iters", "3", "--seed", seed,
                          "--memcheck", "off", "--threads", "1", "--analysis", "off", "--out", out, extra, NULL};
    return cli_run(name, args);
}

static json_t *parse_out(const char *name) {
    char *t = cli_out(name);
    json_error_t je;
    json_t *j = json_loads(t, 0, &je);
    cr_assert_not_null(j, "%s: not JSON (%s):\n%s", name, je.text, t);
    free(t);
    return j;
}

/* The id of the newest run (the one just made). */
static char *newest_run(void) {
    sqlite3 *h = cli_db();
    char *id = cli_text(h, "SELECT id FROM runs ORDER BY started DESC LIMIT 1", NULL);
    sqlite3_close(h);
    cr_assert_not_null(id);
    return id;
}

Test(store_cli, no_cache_measures_again) {
    cr_assert_eq(synth("a", "3", NULL), 0);
    char *a = newest_run();
    /* control: the same run again is served from the cache, so the check below can fail */
    cr_assert_eq(synth("b", "3", NULL), 0);
    char *b = newest_run();
    char *out_b = cli_out("b");
    cr_assert_not_null(strstr(out_b, "(cached)"), "the repeated run was not served from the cache:\n%s", out_b);
    sqlite3 *h = cli_db();
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM evaluations WHERE run = ?", b), 0);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM iterations WHERE run = ? AND cached", b), 3);
    sqlite3_close(h);

    cr_assert_eq(synth("c", "3", "--no-cache"), 0);
    char *c = newest_run();
    char *out_c = cli_out("c");
    cr_assert_null(strstr(out_c, "(cached)"), "--no-cache served a row from the cache:\n%s", out_c);
    cr_assert_not_null(strstr(out_c, "(0 of 3 iterations from the cache)"), "%s", out_c);
    h = cli_db();
    /* every candidate measured again: a new evaluation per iteration, none cached, and the
     * same candidates as the first run (so they were in the cache to be skipped) */
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM evaluations WHERE run = ?", c), 3);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM iterations WHERE run = ? AND cached", c), 0);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM iterations i JOIN iterations j ON j.iter = i.iter AND "
                            "j.candidate = i.candidate AND j.run = ?1 WHERE i.run = (SELECT id FROM runs "
                            "ORDER BY started LIMIT 1)", c), 3);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM evaluations", NULL), 6);
    /* the cache then serves the newest evaluation: a fourth run's rows point at run c's */
    sqlite3_close(h);
    cr_assert_eq(synth("d", "3", NULL), 0);
    char *d = newest_run();
    h = cli_db();
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM iterations i JOIN evaluations e ON e.id = i.evaluation "
                            "WHERE i.run = ?1 AND e.run = (SELECT id FROM runs ORDER BY started LIMIT 1 OFFSET 2)", d),
                 3);
    sqlite3_close(h);
    cli_integrity_ok();
    free(a), free(b), free(c), free(d), free(out_b), free(out_c);
}

Test(store_cli, runs_and_show_outputs) {
    cr_assert_eq(synth("a", "3", NULL), 0);
    char *id = newest_run();
    char id10[11];
    snprintf(id10, sizeof id10, "%.10s", id);

    const char *runs[] = {"kforge", "runs", NULL};
    cr_assert_eq(cli_run("runs", runs), 0);
    char *t = cli_out("runs");
    const char *head[] = {"id", "started", "task", "platform/device", "iters", "status", "best ms", "% floor"};
    char *nl = strchr(t, '\n');
    cr_assert_not_null(nl, "%s", t);
    *nl = 0;
    for (size_t i = 0; i < sizeof head / sizeof *head; i++)
        cr_assert_not_null(strstr(t, head[i]), "header '%s' lacks '%s'", t, head[i]);
    char *row = nl + 1;
    cr_assert_eq(strncmp(row, id10, 10), 0, "the row does not start with the run id %s:\n%s", id10, row);
    const char *cells[] = {"triple", "cpu ", "3/3", "done", "%"};
    for (size_t i = 0; i < sizeof cells / sizeof *cells; i++)
        cr_assert_not_null(strstr(row, cells[i]), "the row lacks '%s':\n%s", cells[i], row);
    free(t);

    const char *runs_json[] = {"kforge", "runs", "--json", NULL};
    cr_assert_eq(cli_run("runs_json", runs_json), 0);
    json_t *arr = parse_out("runs_json");
    cr_assert(json_is_array(arr) && json_array_size(arr) == 1);
    json_t *r = json_array_get(arr, 0);
    const char *fields[] = {"id", "task", "task_hash", "platform", "device", "agent", "started", "ended", "status",
                            "iters_done", "iters_planned", "cache_hits", "replayed", "seed", "best_iter", "best_ms",
                            "best_pct_floor"};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        cr_assert_not_null(json_object_get(r, fields[i]), "kforge runs --json lacks '%s'", fields[i]);
    cr_assert_str_eq(json_string_value(json_object_get(r, "id")), id);
    cr_assert_str_eq(json_string_value(json_object_get(r, "task")), "triple");
    cr_assert_str_eq(json_string_value(json_object_get(r, "platform")), "cpu");
    cr_assert_str_eq(json_string_value(json_object_get(r, "agent")), "builtin");
    cr_assert_str_eq(json_string_value(json_object_get(r, "status")), "done");
    cr_assert_eq(json_integer_value(json_object_get(r, "iters_done")), 3);
    cr_assert_eq(json_integer_value(json_object_get(r, "iters_planned")), 3);
    cr_assert_eq(json_integer_value(json_object_get(r, "seed")), 3);
    cr_assert(json_is_integer(json_object_get(r, "best_iter")));
    cr_assert_gt(json_real_value(json_object_get(r, "best_ms")), 0);
    cr_assert(json_is_real(json_object_get(r, "ended")));
    /* the run's result record, stored (issue 26) */
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(r, "result"), "from")), "builtin");
    cr_assert_not_null(strstr(json_string_value(json_object_get(json_object_get(r, "result"), "detail")),
                              "the builtin generator's kernel of iteration"));
    json_decref(arr);

    const char *show[] = {"kforge", "show", id10, NULL};
    cr_assert_eq(cli_run("show", show), 0);
    t = cli_out("show");
    char want[64];
    snprintf(want, sizeof want, "run %s ", id);
    cr_assert_not_null(strstr(t, want), "%s", t);
    const char *parts[] = {"task triple", "status done", "3/3 iterations", "seed 3", "iter  candidate", "status",
                           "time ms", "% floor", "\n   1  ", "\n   2  ", "\n   3  ", "best: iter ",
                           "---- best kernel (kernel.c", "int kforge_kernel(",
                           "\nresult: from builtin: the builtin generator's kernel of iteration"};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        cr_assert_not_null(strstr(t, parts[i]), "kforge show lacks '%s':\n%s", parts[i], t);
    free(t);

    const char *show_json[] = {"kforge", "show", id10, "--json", NULL};
    cr_assert_eq(cli_run("show_json", show_json), 0);
    json_t *j = parse_out("show_json");
    const char *rf[] = {"run_id", "task", "status", "iters_planned", "seed", "iterations", "best_iter", "device",
                        "roofline", "plan", "wall_s", "memcheck", "cache_hits"};
    for (size_t i = 0; i < sizeof rf / sizeof *rf; i++)
        cr_assert_not_null(json_object_get(j, rf[i]), "kforge show --json lacks '%s'", rf[i]);
    cr_assert_str_eq(json_string_value(json_object_get(j, "run_id")), id);
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "done");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "result"), "from")), "builtin");
    json_t *its = json_object_get(j, "iterations");
    cr_assert_eq(json_array_size(its), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *it = json_array_get(its, i);
        cr_assert_eq(json_integer_value(json_object_get(it, "iter")), (json_int_t)i + 1);
        cr_assert_str_eq(json_string_value(json_object_get(it, "status")), "ok");
        cr_assert_gt(json_real_value(json_object_get(it, "time_ms")), 0);
    }
    json_decref(j);

    /* an unknown run is a usage error naming it */
    const char *bad[] = {"kforge", "show", "ffffffffff", NULL};
    cr_assert_eq(cli_run("show_bad", bad), 2);
    t = cli_err("show_bad");
    cr_assert_not_null(strstr(t, "no run 'ffffffffff'"), "%s", t);
    free(t);
    free(id);
}

Test(store_cli, two_processes_one_store) {
    char oa[300], ob[300];
    snprintf(oa, sizeof oa, "%s/pa", cli.dir);
    snprintf(ob, sizeof ob, "%s/pb", cli.dir);
    /* a fresh store: both processes create and migrate it at once */
    const char *a[] = {"kforge", "synth", cli.task, "--iters", "4", "--seed", "11", "--memcheck", "off",
                       "--threads", "1", "--out", oa, NULL};
    const char *b[] = {"kforge", "synth", cli.task, "--iters", "4", "--seed", "12", "--memcheck", "off",
                       "--threads", "1", "--out", ob, NULL};
    pid_t pa = cli_spawn("pa", a), pb = cli_spawn("pb", b);
    int ra = cli_wait("pa", pa), rb = cli_wait("pb", pb);
    char *ea = cli_err("pa"), *eb = cli_err("pb");
    cr_assert_eq(ra, 0, "first process: %d\n%s", ra, ea);
    cr_assert_eq(rb, 0, "second process: %d\n%s", rb, eb);
    char *oua = cli_out("pa"), *oub = cli_out("pb");
    cr_assert_null(strstr(oua, "the run goes on unrecorded"), "%s", oua);
    cr_assert_null(strstr(oub, "the run goes on unrecorded"), "%s", oub);
    cli_integrity_ok();
    sqlite3 *h = cli_db();
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM runs WHERE status = 'done' AND iters_planned = 4", NULL), 2);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM iterations", NULL), 8);
    cr_assert_eq(cli_int(h, "SELECT count(DISTINCT run) FROM iterations", NULL), 2);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM tasks", NULL), 1);
    /* every iteration's evaluation exists (measured here or by the other process) */
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM iterations i JOIN evaluations e ON e.id = i.evaluation", NULL), 8);
    sqlite3_close(h);
    free(ea), free(eb), free(oua), free(oub);
}

/* --pin holds a parameter: every candidate has it, the run's stored options keep it (so
 * --resume plans the same space), and a value outside its list is a usage error that
 * names the values and stores nothing. */
Test(store_cli, pin_holds_a_parameter) {
    cr_assert_eq(synth("p", "3", "--pin=unroll=2"), 0, "%s", cli_err("p"));
    char *id = newest_run();
    sqlite3 *h = cli_db();
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM iterations WHERE run = ?", id), 3);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM iterations WHERE run = ? AND label NOT LIKE '%unroll=2%'", id),
                 0);
    char *pins = cli_text(h, "SELECT json_extract(options, '$.pins') FROM runs WHERE id = ?", id);
    cr_assert_not_null(pins);
    cr_assert_str_eq(pins, "unroll=2");
    long long nruns = cli_int(h, "SELECT count(*) FROM runs", NULL);
    sqlite3_close(h);
    cr_assert_eq(synth("q", "3", "--pin=unroll=3"), 2);
    char *e = cli_err("q");
    cr_assert(strstr(e, "unroll takes one of 1, 2, 4"), "%s", e);
    h = cli_db();
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM runs", NULL), nruns, "a refused --pin left a run behind");
    sqlite3_close(h);
    cli_integrity_ok();
    free(id), free(pins), free(e);
}
