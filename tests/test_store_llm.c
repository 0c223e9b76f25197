/*
 * The store and the model agent, through the real binary and the scripted chat server
 * (tests/llm_server.py):
 *   - transfer: a CPU run of a task stores its kernels; a model run of the same task on
 *     OpenCL (PoCL here) is given the CPU run's best kernel as its reference, says so, and
 *     the request the server recorded holds that kernel's source; `kforge show --best`
 *     lists both platforms' best; --reference FILE overrides it, --no-reference drops it,
 *     and a model run on the CPU gets no CPU kernel (the same platform is excluded);
 *   - transcripts per call: a model run killed with SIGKILL while its second call is in
 *     flight has its first call (message sent and reply, with tokens) in the store; a run
 *     that ends stores each call once.
 * The OpenCL half is skipped where `kforge devices` has no OpenCL device.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llm_server.h"
#include "store_cli.h"

#define KEY "sk-store-SECRET-31313131"

static const char cpu_kernel[] =
    "#include <stdint.h>\n"
    "int kforge_kernel(void *const *args) {\n"
    "    const float *x = args[0];\n"
    "    float *y = args[1];\n"
    "    for (int i = 0; i < 1000; i++) y[i] = x[i] * 3.0f;\n"
    "    return 0;\n"
    "}\n";

static const char opencl_kernel[] =
    "// kforge:launch triple global=1024 local=64 args=0,1\n"
    "__kernel void triple(__global const float *restrict x, __global float *restrict y) {\n"
    "    const int i = get_global_id(0);\n"
    "    if (i < 1000) y[i] = x[i] * 3.0f;\n"
    "}\n";

static void setup(void) {
    llm_srv_setup();
    cli_setup(srv.dir);
    setenv("OPENAI_API_KEY", KEY, 1);
}

static void teardown(void) {
    llm_srv_teardown(); /* stops the server; the folder goes with cli_teardown */
    cli_teardown();
    rmdir(srv.dir);
}

TestSuite(store_llm, .init = setup, .fini = teardown, .timeout = 600);

static json_t *reply(const char *content) {
    return json_pack("{s:{s:[{s:{s:s,s:s},s:s}],s:{s:i,s:i}}}", "body", "choices", "message", "role", "assistant",
                     "content", content, "finish_reason", "stop", "usage", "prompt_tokens", 100,
                     "completion_tokens", 50);
}

static json_t *kernel_reply(const char *lang, const char *kernel) {
    char *c = NULL;
    cr_assert(asprintf(&c, "Here it is.\n\n```%s\n%s```\n", lang, kernel) > 0);
    json_t *j = reply(c);
    free(c);
    return j;
}

static void play(json_t *responses) {
    json_t *s = json_pack("{s:s,s:o}", "key", KEY, "responses", responses);
    char *text = json_dumps(s, JSON_COMPACT);
    start_server(text);
    free(text);
    json_decref(s);
}

static int have_opencl(void) {
    const char *args[] = {"kforge", "devices", NULL};
    cli_run("devices", args);
    char *t = cli_out("devices");
    int yes = strstr(t, "\nopencl:0 ") != NULL || strncmp(t, "opencl:0 ", 9) == 0;
    free(t);
    return yes;
}

/* A builtin run of the task on the CPU (2 candidates); returns its id (malloc'd). */
static char *cpu_run(void) {
    char out[300];
    snprintf(out, sizeof out, "%s/cpu", cli.dir);
    const char *args[] = {"kforge", "synth", cli.task, "--target", "cpu", "--iters", "2", "--seed", "3",
                          "--memcheck", "off", "--threads", "1", "--out", out, NULL};
    int rc = cli_run("cpu", args);
    char *e = cli_err("cpu");
    cr_assert_eq(rc, 0, "the CPU run failed (%d):\n%s", rc, e);
    free(e);
    sqlite3 *h = cli_db();
    char *id = cli_text(h, "SELECT id FROM runs WHERE platform = 'cpu' AND agent = 'builtin' AND status = 'done'", NULL);
    sqlite3_close(h);
    cr_assert_not_null(id);
    return id;
}

/* kforge synth --agent llm on target (1 iteration) against the server, with extra flags. */
static int model_run(const char *name, const char *target, const char *extra1, const char *extra2) {
    char out[300], url[64];
    snprintf(out, sizeof out, "%s/%s", cli.dir, name);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", srv.port);
    const char *args[] = {"kforge", "synth", cli.task, "--agent", "llm", "--target", target, "--iters", "1",
                          "--memcheck", "off", "--threads", "1", "--seed", "4", "--llm-url", url, "--model",
                          "scripted", "--llm-protocol", "openai", "--out", out, extra1, extra2, NULL};
    return cli_run(name, args);
}

/* The first user message of request n the server recorded (malloc'd). */
static char *first_user_message(int n) {
    json_t *log = server_log();
    cr_assert_gt(json_array_size(log), (size_t)n, "only %zu requests", json_array_size(log));
    char *s = kf_strdup(str_at(json_array_get(log, (size_t)n), "body.messages.1.content"));
    json_decref(log);
    return s;
}

Test(store_llm, transfer_cpu_kernel_to_opencl_model) {
    if (!have_opencl()) cr_skip_test("no OpenCL device here (kforge devices)");
    char *cpu = cpu_run();
    sqlite3 *h = cli_db();
    char *src = cli_text(h, "SELECT c.source FROM runs r JOIN candidates c ON c.key = r.best_candidate WHERE r.id = ?", cpu);
    char want[200];
    {
        sqlite3_stmt *q = NULL;
        cr_assert_eq(sqlite3_prepare_v2(h, "SELECT best_ms, best_pct FROM runs WHERE id = ?", -1, &q, NULL), SQLITE_OK);
        sqlite3_bind_text(q, 1, cpu, -1, SQLITE_TRANSIENT);
        cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
        snprintf(want, sizeof want, "reference: the best verified cpu kernel of run %.10s (%.4g ms, %.1f%% of floor)",
                 cpu, sqlite3_column_double(q, 0), sqlite3_column_double(q, 1));
        sqlite3_finalize(q);
    }
    sqlite3_close(h);
    cr_assert_not_null(src);
    cr_assert_not_null(strstr(src, "kforge_kernel"), "%s", src);

    play(json_pack("[o]", kernel_reply("opencl", opencl_kernel)));
    int rc = model_run("ocl", "opencl", NULL, NULL);
    char *out = cli_out("ocl"), *err = cli_err("ocl");
    cr_assert_eq(rc, 0, "the model run failed (%d):\n%s\n%s", rc, out, err);
    cr_assert_not_null(strstr(out, want), "no '%s' in:\n%s", want, out);
    char *msg = first_user_message(0);
    cr_assert_not_null(strstr(msg, src), "the model was not given the CPU run's best kernel:\n%.3000s", msg);
    cr_assert_not_null(strstr(msg, "```c\n"), "the reference is not fenced as C:\n%.3000s", msg);
    cr_assert_not_null(strstr(msg, "It is a cpu kernel, not opencl"), "%.3000s", msg);
    free(msg);

    /* the model run is stored, with each call once (message sent + reply) */
    h = cli_db();
    char *ocl = cli_text(h, "SELECT id FROM runs WHERE agent = 'llm'", NULL);
    cr_assert_not_null(ocl);
    cr_assert_eq(cli_int(h, "SELECT llm_calls FROM runs WHERE id = ?", ocl), 1);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM transcripts WHERE run = ?", ocl), 2);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM transcripts WHERE run = ? AND role = 'assistant' AND iter = 1 "
                            "AND prompt_tokens = 100 AND completion_tokens = 50", ocl), 1);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM transcripts WHERE run = ? AND role = 'user' AND iter = 1 "
                            "AND instr(text, 'It is a cpu kernel') > 0", ocl), 1);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM transcripts WHERE instr(text, ?) > 0", KEY), 0);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM iterations WHERE run = ?", ocl), 1);
    /* and the run records which reference it was given (schema version 2) */
    char *ref = cli_text(h, "SELECT reference FROM runs WHERE id = ?", ocl);
    cr_assert_not_null(ref);
    const char *said = want + strlen("reference: ");
    cr_assert_eq(strncmp(ref, said, strlen(said)), 0, "stored reference '%s' is not what the run printed ('%s')",
                 ref, said);
    free(ref);
    sqlite3_close(h);

    /* kforge show --best: both platforms, the CPU one being the kernel the model got */
    const char *best[] = {"kforge", "show", "--best", cli.task, NULL};
    cr_assert_eq(cli_run("best", best), 0);
    char *t = cli_out("best");
    cr_assert_not_null(strstr(t, "platform  device"), "%s", t);
    char row[32];
    snprintf(row, sizeof row, "%.10s", cpu);
    cr_assert_not_null(strstr(t, "\ncpu "), "%s", t);
    cr_assert_not_null(strstr(t, "\nopencl "), "%s", t);
    cr_assert_not_null(strstr(t, row), "%s", t);
    cr_assert_not_null(strstr(t, "---- best cpu kernel"), "%s", t);
    cr_assert_not_null(strstr(t, "---- best opencl kernel"), "%s", t);
    free(t);
    const char *bestj[] = {"kforge", "show", "--best", cli.task, "--platform", "cpu", "--json", NULL};
    cr_assert_eq(cli_run("bestj", bestj), 0);
    t = cli_out("bestj");
    json_t *arr = json_loads(t, 0, NULL);
    cr_assert(json_is_array(arr) && json_array_size(arr) == 1, "%s", t);
    json_t *b = json_array_get(arr, 0);
    cr_assert_str_eq(json_string_value(json_object_get(b, "platform")), "cpu");
    cr_assert_str_eq(json_string_value(json_object_get(b, "run")), cpu);
    cr_assert_str_eq(json_string_value(json_object_get(b, "source")), src);
    cr_assert_str_eq(json_string_value(json_object_get(b, "kernel_file")), "kernel.c");
    cr_assert_gt(json_real_value(json_object_get(b, "pct_floor")), 0);
    const char *fields[] = {"task_hash", "device", "iter", "time_ms", "flags", "measured_at"};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        cr_assert_not_null(json_object_get(b, fields[i]), "show --best --json lacks %s", fields[i]);
    json_decref(arr);
    free(t);
    /* none on a platform the store has no run of */
    const char *none[] = {"kforge", "show", "--best", cli.task, "--platform", "metal", NULL};
    cr_assert_eq(cli_run("none", none), 1);
    free(out), free(err), free(src), free(cpu), free(ocl);
}

Test(store_llm, reference_flags_and_same_platform_excluded) {
    int ocl = have_opencl();
    char *cpu = cpu_run();
    sqlite3 *h = cli_db();
    char *src = cli_text(h, "SELECT c.source FROM runs r JOIN candidates c ON c.key = r.best_candidate WHERE r.id = ?", cpu);
    sqlite3_close(h);
    cr_assert_not_null(src);
    const char *prose = "I would rather not write code today.";
    play(json_pack("[o,o,o]", reply(prose), reply(prose), reply(prose)));
    int n = 0;

    /* the model on the CPU: the store holds only CPU kernels, so no reference */
    model_run("m_cpu", "cpu", NULL, NULL);
    char *out = cli_out("m_cpu");
    cr_assert_not_null(strstr(out, "reference: none (the store has no verified kernel of this task on another "
                                   "platform)"), "%s", out);
    char *msg = first_user_message(n++);
    cr_assert_null(strstr(msg, "A correct kernel for the same task"), "%.3000s", msg);
    free(msg), free(out);

    /* --reference FILE and --no-reference contradict */
    char ref[300];
    snprintf(ref, sizeof ref, "%s/given.c", cli.dir);
    const char given[] = "/* GIVEN-REFERENCE-7 */\nint kforge_kernel(void *const *a) { (void)a; return 0; }\n";
    kf_error e = {0};
    cr_assert_eq(kf_write_file(ref, given, strlen(given), &e), KF_OK);
    const char *bad[] = {"kforge", "synth", cli.task, "--agent", "llm", "--reference", ref, "--no-reference", NULL};
    cr_assert_eq(cli_run("bad", bad), 2);
    cr_assert_eq(log_count(), n, "a refused run reached the model");

    if (!ocl) {
        free(src), free(cpu);
        cr_skip_test("no OpenCL device here (kforge devices): the cross-platform half is left out");
    }
    /* --reference FILE overrides the store's kernel */
    model_run("m_ref", "opencl", "--reference", ref);
    out = cli_out("m_ref");
    char want[400];
    snprintf(want, sizeof want, "reference: %s\n", ref);
    cr_assert_not_null(strstr(out, want), "%s", out);
    msg = first_user_message(n++);
    cr_assert_not_null(strstr(msg, "GIVEN-REFERENCE-7"), "%.3000s", msg);
    cr_assert_null(strstr(msg, src), "the store's kernel reached the model despite --reference");
    free(msg), free(out);

    /* --no-reference: nothing, though the store has a CPU kernel */
    model_run("m_none", "opencl", "--no-reference", NULL);
    out = cli_out("m_none");
    cr_assert_not_null(strstr(out, "reference: none (--no-reference)"), "%s", out);
    msg = first_user_message(n++);
    cr_assert_null(strstr(msg, "A correct kernel for the same task"), "%.3000s", msg);
    cr_assert_null(strstr(msg, src));
    free(msg), free(out), free(src), free(cpu);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

Test(store_llm, transcript_stored_per_call_survives_sigkill) {
    /* call 1 answers with a kernel; call 2 hangs until the process is killed */
    json_t *hang = kernel_reply("c", cpu_kernel);
    json_object_set_new(hang, "delay_s", json_real(90));
    play(json_pack("[o,o]", kernel_reply("c", cpu_kernel), hang));
    char out[300], url[64];
    snprintf(out, sizeof out, "%s/killed", cli.dir);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", srv.port);
    const char *args[] = {"kforge", "synth", cli.task, "--agent", "llm", "--target", "cpu", "--iters", "3",
                          "--memcheck", "off", "--threads", "1", "--llm-url", url, "--model", "scripted",
                          "--llm-protocol", "openai", "--llm-timeout", "120", "--out", out, NULL};
    pid_t pid = cli_spawn("killed", args);
    /* the second request reaching the server means the first call came back, was stored
     * and its kernel evaluated */
    for (int t = 0; t < 1200 && log_count() < 2; t++) {
        sleep_ms(100);
        int wst;
        cr_assert_eq(waitpid(pid, &wst, WNOHANG), 0, "kforge synth ended before it was killed");
    }
    cr_assert_eq(log_count(), 2, "the second call never reached the server");
    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert_eq(cli_wait("killed", pid), 128 + SIGKILL);

    cli_integrity_ok();
    sqlite3 *h = cli_db();
    char *id = cli_text(h, "SELECT id FROM runs WHERE agent = 'llm'", NULL);
    cr_assert_not_null(id);
    /* the run never finished: the end-of-run import never happened, the per-call rows did */
    cr_assert_eq(cli_int(h, "SELECT llm_calls FROM runs WHERE id = ?", id), 0);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM transcripts WHERE run = ?", id), 2);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM transcripts WHERE run = ? AND role = 'user' AND iter = 1 AND "
                            "instr(text, 'task triple') > 0 AND prompt_tokens = 0", id), 1);
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM transcripts WHERE run = ? AND role = 'assistant' AND iter = 1 AND "
                            "instr(text, 'kforge_kernel') > 0 AND prompt_tokens = 100 AND completion_tokens = 50", id),
                 1);
    cr_assert_lt(cli_int(h, "SELECT min(id) FROM transcripts WHERE run = ?1 AND role = 'user'", id),
                 cli_int(h, "SELECT min(id) FROM transcripts WHERE run = ?1 AND role = 'assistant'", id));
    cr_assert_eq(cli_int(h, "SELECT count(*) FROM iterations WHERE run = ? AND iter = 1", id), 1);
    sqlite3_close(h);
    /* and a reader reports the run interrupted */
    const char *runs[] = {"kforge", "runs", "--json", NULL};
    cr_assert_eq(cli_run("runs", runs), 0);
    char *t = cli_out("runs");
    json_t *arr = json_loads(t, 0, NULL);
    cr_assert(json_is_array(arr) && json_array_size(arr) == 1, "%s", t);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(arr, 0), "status")), "interrupted");
    json_decref(arr);
    free(t), free(id);
}
