/*
 * What a user with a local model server meets (issue 31), against the scripted chat server
 * on loopback (tests/llm_server.py): a request longer than the model's context window is a
 * configuration error, said plainly and not asked again; the per-reply limit and the
 * context window are settings, and a known window makes kforge fit the prompt (leaving out
 * the reference kernel and older rounds first, and saying so); a request that timed out is
 * not sent again behind itself; a spent budget announces no further round; a reply that
 * repeats an earlier one is fed back as a repeat and the next request is sent warmer.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/agent.h"
#include "kforge/core.h"
#include "kforge/ir.h"
#include "kforge/llm.h"
#include "kforge/verify.h"

#include "llm_server.h"

static const char task_text[] = "task triple\ninput x: f32[1000]\noutput y = x * 3.0\n";

static const char good_kernel[] =
    "#include <stdint.h>\n"
    "int kforge_kernel(void *const *args) {\n"
    "    const float *x = args[0];\n"
    "    float *y = args[1];\n"
    "    for (int i = 0; i < 1000; i++) y[i] = x[i] * 3.0f;\n"
    "    return 0;\n"
    "}\n";

/* what llama-cpp-python's server answers for a prompt over its n_ctx */
#define CTX_MESSAGE                                                                                \
    "This model's maximum context length is 2048 tokens. However, you requested 10313 tokens "    \
    "(2121 in the messages, 8192 in the completion). Please reduce the length of the messages or " \
    "completion."

static char outdir[256];

static void setup(void) {
    llm_srv_setup();
    snprintf(outdir, sizeof outdir, "%s/out", srv.dir);
}

static void teardown(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s/ref.c'", outdir, srv.dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", outdir);
    llm_srv_teardown();
}

TestSuite(llm_local, .init = setup, .fini = teardown, .timeout = 120);

static json_t *reply(const char *content) {
    return json_pack("{s:{s:[{s:{s:s,s:s},s:s}],s:{s:i,s:i}}}", "body", "choices", "message", "role",
                     "assistant", "content", content, "finish_reason", "stop", "usage", "prompt_tokens", 100,
                     "completion_tokens", 50);
}

static json_t *kernel_reply(const char *kernel) {
    char *c = NULL;
    cr_assert(asprintf(&c, "Here is the kernel.\n\n```c\n%s```\n", kernel) > 0);
    json_t *j = reply(c);
    free(c);
    return j;
}

static json_t *context_400(void) {
    return json_pack("{s:i,s:{s:{s:s,s:s,s:s,s:s}}}", "status", 400, "body", "error", "message", CTX_MESSAGE,
                     "type", "invalid_request_error", "param", "messages", "code", "context_length_exceeded");
}

/* responses in order; get (may be NULL) answers GET /models and /props */
static void play(json_t *responses, json_t *get) {
    json_t *s = json_pack("{s:o}", "responses", responses);
    if (get) json_object_set_new(s, "get", get);
    char *text = json_dumps(s, JSON_COMPACT);
    start_server(text);
    free(text);
    json_decref(s);
}

typedef struct run {
    kf_graph *g;
    kf_llm_config llm;
    kf_loop_opts o;
    kf_run_result r;
    FILE *table;
    char *table_text;
} run;

static void prepare(run *x, int iters) {
    memset(x, 0, sizeof *x);
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task_text, "<test>", &x->g, &err), KF_OK, "%s", err.msg);
    kf_llm_config_default(&x->llm);
    x->llm.protocol = KF_LLM_OPENAI;
    snprintf(x->llm.url, sizeof x->llm.url, "http://127.0.0.1:%d/v1", srv.port);
    snprintf(x->llm.model, sizeof x->llm.model, "scripted");
    x->llm.max_retries = 2;
    x->llm.backoff_s = 0.05;
    x->llm.timeout_s = 20;
    kf_loop_opts_default(&x->o);
    x->o.target = "cpu";
    x->o.iters = iters;
    x->o.out_dir = outdir;
    x->o.threads = 1;
    x->o.seed = 5;
    x->o.memcheck = KF_MEMCHECK_OFF;
    x->o.agent = KF_AGENT_LLM;
    x->o.llm = &x->llm;
    x->o.task_text = task_text;
    x->table = tmpfile();
    cr_assert_not_null(x->table);
    x->o.table = x->table;
}

static void go(run *x) {
    kf_error err = {0};
    cr_assert_eq(kf_loop_run(x->g, &x->o, &x->r, &err), KF_OK, "loop: %s", err.msg);
    long n = ftell(x->table);
    rewind(x->table);
    x->table_text = kf_calloc(1, (size_t)n + 1);
    cr_assert_eq(fread(x->table_text, 1, (size_t)n, x->table), (size_t)n);
}

static void finish(run *x) {
    fclose(x->table);
    free(x->table_text);
    kf_run_result_free(&x->r);
    kf_graph_free(x->g);
}

static int transcript_lines(void) {
    char path[400], *tr = NULL;
    snprintf(path, sizeof path, "%s/transcript.jsonl", outdir);
    kf_error err = {0};
    if (kf_read_file(path, &tr, NULL, &err) != KF_OK) return 0;
    int lines = 0;
    for (const char *p = tr; (p = strchr(p, '\n')); p++) lines++;
    free(tr);
    return lines;
}

#define STATUS(x, i, st)                                                                          \
    cr_assert_eq((x)->r.iters[i].res.status, (st), "iter %d: %s, want %s: %s", (i) + 1,           \
                 kf_vstatus_name((x)->r.iters[i].res.status), kf_vstatus_name(st),                 \
                 (x)->r.iters[i].res.detail)

/* ---- the context window ---- */

Test(llm_local, context_length_400_is_a_configuration_error) {
    play(json_pack("[o,o,o]", context_400(), context_400(), context_400()), NULL);
    run x;
    prepare(&x, 4);
    go(&x);
    /* one request, no retry within the call and no second round */
    cr_assert_eq(log_count(), 1, "the refusal was sent again");
    cr_assert_eq(x.r.niters, 1);
    STATUS(&x, 0, KF_V_AGENT_ERROR);
    const char *d = x.r.iters[0].res.detail;
    /* it leads with the numbers that explain it, and names the flags that change them */
    cr_assert(!strncmp(d, "the prompt does not fit the model's context window (window 2048 tokens; prompt 2121 "
                          "tokens + reply limit 8192 tokens)", 107), "%s", d);
    cr_assert(strstr(d, "--context 2048") && strstr(d, "--reply-tokens"), "%s", d);
    cr_assert(strstr(x.r.stop_reason, "configuration error"), "%s", x.r.stop_reason);
    /* the table's line under the row is that text, not the server's first words */
    cr_assert(strstr(x.table_text, "      the prompt does not fit the model's context window (window 2048 tokens"),
              "%s", x.table_text);
    cr_assert_eq(transcript_lines(), 1);
    finish(&x);
}

/* A client of the scripted server: OpenAI protocol, three retries without backoff. */
static void client_config(kf_llm_config *c) {
    kf_llm_config_default(c);
    c->protocol = KF_LLM_OPENAI;
    snprintf(c->url, sizeof c->url, "http://127.0.0.1:%d/v1", srv.port);
    snprintf(c->model, sizeof c->model, "scripted");
    c->max_retries = 3;
    c->backoff_s = 0;
}

Test(llm_local, context_error_from_the_client) {
    play(json_pack("[o,o]", context_400(), context_400()), NULL);
    kf_llm_config c;
    client_config(&c);
    kf_llm *l = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_llm_new(&c, &l, &err), KF_OK, "%s", err.msg);
    kf_llm_msg m[] = {{"user", "hello"}};
    kf_llm_reply r;
    cr_assert_eq(kf_llm_chat(l, m, 1, &r, &err), KF_ERR_RUNTIME);
    cr_assert(r.context_exceeded);
    cr_assert_eq(r.attempts, 1);
    cr_assert(r.ctx_window == 2048 && r.ctx_prompt == 2121 && r.ctx_reply == 8192, "%ld %ld %ld", r.ctx_window,
              r.ctx_prompt, r.ctx_reply);
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

/* A reference kernel of about n characters, marked so the test can find it in a prompt. */
static const char *write_reference(size_t n) {
    static char path[160];
    snprintf(path, sizeof path, "%s/ref.c", srv.dir);
    kf_buf b = {0};
    kf_buf_puts(&b, "// REFERENCE-MARK\n");
    while (b.len < n) kf_buf_puts(&b, "    y[i] = x[i] * 3.0f; /* a long reference kernel line */\n");
    kf_error err = {0};
    cr_assert_eq(kf_write_file(path, b.data, b.len, &err), KF_OK, "%s", err.msg);
    kf_buf_free(&b);
    return path;
}

static void check_fitted(run *x, long window) {
    json_t *log = server_log();
    cr_assert_geq(json_array_size(log), 1);
    json_t *req = json_array_get(log, 0);
    const char *task = str_at(req, "body.messages.1.content");
    cr_assert_null(strstr(task, "REFERENCE-MARK"), "the reference kernel was sent into a %ld-token window", window);
    cr_assert(strstr(task, "triple"), "the task itself was left out");
    long max_tokens = (long)json_integer_value(at(req, "body.max_tokens"));
    size_t chars = 0;
    json_t *msgs = at(req, "body.messages");
    for (size_t i = 0; i < json_array_size(msgs); i++)
        chars += strlen(json_string_value(json_object_get(json_array_get(msgs, i), "content")));
    /* the reply limit shrank below the default so prompt + reply fit the window */
    cr_assert(max_tokens > 0 && max_tokens < 8192 && max_tokens + (long)chars / 4 <= window,
              "max_tokens %ld for %zu prompt characters in a %ld-token window", max_tokens, chars, window);
    cr_assert(strstr(x->table_text, "left out the reference kernel"), "%s", x->table_text);
    json_decref(log);
    char path[400], *tr = NULL;
    snprintf(path, sizeof path, "%s/transcript.jsonl", outdir);
    kf_error err = {0};
    cr_assert_eq(kf_read_file(path, &tr, NULL, &err), KF_OK, "%s", err.msg);
    cr_assert(strstr(tr, "\"fit\":\"fitted to the"), "%s", tr);
    free(tr);
}

Test(llm_local, given_context_window_fits_the_prompt) {
    play(json_pack("[o]", kernel_reply(good_kernel)), NULL);
    run x;
    prepare(&x, 1);
    x.o.reference_path = write_reference(12000);
    x.llm.context_tokens = 6000;
    go(&x);
    STATUS(&x, 0, KF_V_OK);
    cr_assert(strstr(x.table_text, "context window 6000 tokens (--context)"), "%s", x.table_text);
    check_fitted(&x, 6000);
    finish(&x);
}

Test(llm_local, server_reported_window_fits_the_prompt) {
    json_t *get = json_pack("{s:{s:s,s:[{s:s,s:s,s:i}]}}", "models", "object", "list", "data", "id", "scripted",
                            "object", "model", "max_model_len", 6000);
    play(json_pack("[o]", kernel_reply(good_kernel)), get);
    run x;
    prepare(&x, 1);
    x.o.reference_path = write_reference(12000);
    go(&x);
    STATUS(&x, 0, KF_V_OK);
    cr_assert(strstr(x.table_text, "context window 6000 tokens (GET /models)"), "%s", x.table_text);
    check_fitted(&x, 6000);
    cr_assert_eq(x.r.llm_calls, 1, "asking for the window is not a model call");
    finish(&x);
}

Test(llm_local, window_too_small_for_any_prompt_is_said_before_a_call) {
    play(json_pack("[o]", kernel_reply(good_kernel)), NULL);
    run x;
    prepare(&x, 3);
    x.llm.context_tokens = 300;
    go(&x);
    cr_assert_eq(log_count(), 0, "a prompt that cannot fit was sent");
    cr_assert_eq(x.r.niters, 1);
    STATUS(&x, 0, KF_V_AGENT_ERROR);
    cr_assert(strstr(x.r.iters[0].res.detail, "does not fit the model's context window (300 tokens)"), "%s",
              x.r.iters[0].res.detail);
    finish(&x);
}

Test(llm_local, reply_tokens_setting_is_sent) {
    play(json_pack("[o]", kernel_reply(good_kernel)), NULL);
    run x;
    prepare(&x, 1);
    x.llm.max_tokens = 777;
    go(&x);
    json_t *log = server_log();
    cr_assert_eq(json_integer_value(at(json_array_get(log, 0), "body.max_tokens")), 777);
    json_decref(log);
    finish(&x);
    /* the config file's key by either name */
    char path[200];
    snprintf(path, sizeof path, "%s/config.json", srv.dir);
    kf_error err = {0};
    const char *cfg = "{\"reply_tokens\": 1234, \"context\": 4096, \"retry_timeouts\": true}";
    cr_assert_eq(kf_write_file(path, cfg, strlen(cfg), &err), KF_OK, "%s", err.msg);
    kf_llm_config c;
    kf_llm_config_default(&c);
    cr_assert_eq(kf_llm_config_file(&c, path, &err), KF_OK, "%s", err.msg);
    cr_assert(c.max_tokens == 1234 && c.context_tokens == 4096 && c.retry_timeouts == 1);
}

/* ---- timeouts ---- */

Test(llm_local, timed_out_request_is_not_sent_again) {
    json_t *slow = kernel_reply(good_kernel);
    json_object_set_new(slow, "delay_s", json_real(3.0));
    play(json_pack("[o,o,o]", slow, kernel_reply(good_kernel), kernel_reply(good_kernel)), NULL);
    kf_llm_config c;
    client_config(&c);
    c.timeout_s = 0.4;
    kf_llm *l = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_llm_new(&c, &l, &err), KF_OK, "%s", err.msg);
    kf_llm_msg m[] = {{"user", "hello"}};
    kf_llm_reply r;
    cr_assert_eq(kf_llm_chat(l, m, 1, &r, &err), KF_ERR_RUNTIME);
    cr_assert_eq(r.attempts, 1, "a timed-out request was retried");
    cr_assert_eq(log_count(), 1);
    cr_assert(strstr(err.msg, "not retried") && strstr(err.msg, "--llm-retry-timeouts"), "%s", err.msg);
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

/* ---- the budget's end ---- */

Test(llm_local, no_round_announced_after_the_call_budget) {
    char bad1[sizeof good_kernel], bad2[sizeof good_kernel];
    snprintf(bad1, sizeof bad1, "%s", good_kernel);
    strstr(bad1, "3.0f;")[4] = ' ';
    snprintf(bad2, sizeof bad2, "%s", good_kernel);
    strstr(bad2, "return 0;")[8] = ' ';
    play(json_pack("[o,o,o]", kernel_reply(bad1), kernel_reply(bad2), kernel_reply(good_kernel)), NULL);
    run x;
    prepare(&x, 5);
    x.llm.max_calls = 2;
    go(&x);
    cr_assert_eq(x.r.niters, 2);
    cr_assert_eq(log_count(), 2);
    cr_assert(strstr(x.table_text, "asking the model (round 2)"), "%s", x.table_text);
    cr_assert_null(strstr(x.table_text, "round 3"), "a round announced after the budget:\n%s", x.table_text);
    cr_assert_eq(transcript_lines(), 2, "a transcript line for a call never made");
    cr_assert(strstr(x.r.stop_reason, "call budget spent"), "%s", x.r.stop_reason);
    finish(&x);
}

/* ---- a repeated reply ---- */

Test(llm_local, repeated_reply_is_fed_back_and_the_request_varies) {
    char bad[sizeof good_kernel];
    snprintf(bad, sizeof bad, "%s", good_kernel);
    strstr(bad, "3.0f;")[4] = ' ';
    play(json_pack("[o,o,o]", kernel_reply(bad), kernel_reply(bad), kernel_reply(good_kernel)), NULL);
    run x;
    prepare(&x, 3);
    go(&x);
    STATUS(&x, 0, KF_V_COMPILE_ERROR);
    STATUS(&x, 1, KF_V_COMPILE_ERROR);
    STATUS(&x, 2, KF_V_OK);
    json_t *log = server_log();
    cr_assert_eq(json_array_size(log), 3);
    /* the second request: the plain feedback, the usual temperature */
    const char *fb1 = json_string_value(json_object_get(json_array_get(at(json_array_get(log, 1), "body.messages"),
                                                                       3), "content"));
    cr_assert(fb1 && !strstr(fb1, "same as the one you sent"), "%s", fb1);
    double t0 = json_number_value(at(json_array_get(log, 0), "body.temperature"));
    double t1 = json_number_value(at(json_array_get(log, 1), "body.temperature"));
    double t2 = json_number_value(at(json_array_get(log, 2), "body.temperature"));
    cr_assert(t0 == t1, "%g %g", t0, t1);
    /* the third: told it repeated round 1, and sent warmer */
    json_t *msgs = at(json_array_get(log, 2), "body.messages");
    const char *fb2 = json_string_value(json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "content"));
    cr_assert(fb2 && strstr(fb2, "same as the one you sent in round 1"), "%s", fb2);
    cr_assert(strstr(fb2, "did not compile"), "the verdict itself is still fed back: %s", fb2);
    cr_assert(t2 > t1 + 0.2, "the temperature did not change: %g then %g", t1, t2);
    json_decref(log);
    finish(&x);
}

/* ---- the flags ---- */

Test(llm_local, cli_flags_reach_the_server_and_the_help) {
    FILE *h = popen(KF_BUILD_DIR "/kforge synth --help", "r");
    cr_assert_not_null(h);
    char help[16384];
    size_t n = fread(help, 1, sizeof help - 1, h);
    help[n] = 0;
    pclose(h);
    cr_assert(strstr(help, "--reply-tokens N") && strstr(help, "--context N") && strstr(help, "--llm-retry-timeouts"),
              "%s", help);
    play(json_pack("[o]", kernel_reply(good_kernel)), NULL);
    char task[200], cmd[1200];
    snprintf(task, sizeof task, "%s/ref.c", srv.dir); /* removed by teardown */
    kf_error err = {0};
    cr_assert_eq(kf_write_file(task, task_text, strlen(task_text), &err), KF_OK, "%s", err.msg);
    snprintf(cmd, sizeof cmd,
             "XDG_CONFIG_HOME=%s KFORGE_CONFIG= %s/kforge synth %s --agent llm --llm-url http://127.0.0.1:%d/v1 "
             "--model scripted --iters 1 --memcheck off --no-store --reply-tokens 300 --context 100000 "
             "--llm-retry-timeouts --out %s -q 2>&1",
             srv.dir, KF_BUILD_DIR, task, srv.port, outdir);
    int rc = system(cmd);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s: %d", cmd, rc);
    json_t *log = server_log();
    cr_assert_eq(json_array_size(log), 1);
    cr_assert_eq(json_integer_value(at(json_array_get(log, 0), "body.max_tokens")), 300);
    json_decref(log);
}
