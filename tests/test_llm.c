/*
 * Tests of the LLM client (src/llm) against a real HTTP server process on loopback:
 * tests/llm_server.py plays a scripted list of replies and logs every request it got, so
 * each test checks both what the client made of the reply and what reached the server
 * (the protocol's shape, the key in its header and nowhere else, how many requests).
 * Also: the config layers, protocol detection and code extraction from replies.
 *
 * Each test runs in its own process (Criterion); the server is started by the test and
 * killed in the suite's fini, which also runs after a failed assertion. Should the test
 * process die outright, the server goes too: it has PR_SET_PDEATHSIG and it exits when its
 * stdin (a pipe from the test) closes.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kforge/core.h"
#include "kforge/llm.h"

#define KEY "sk-test-SECRET-0123456789abcdef"

#include "llm_server.h"

static void setup(void) { llm_srv_setup(); }
static void teardown(void) { llm_srv_teardown(); }

TestSuite(llm, .init = setup, .fini = teardown, .timeout = 30);

static void config(kf_llm_config *c, kf_llm_protocol p) {
    kf_llm_config_default(c);
    c->protocol = p;
    snprintf(c->url, sizeof c->url, "http://127.0.0.1:%d/v1", srv.port);
    snprintf(c->model, sizeof c->model, "test-model");
    snprintf(c->key, sizeof c->key, "%s", KEY);
    c->timeout_s = 5;
    c->connect_timeout_s = 2;
    c->max_retries = 2;
    c->backoff_s = 0.05;
}

static kf_llm *client(const kf_llm_config *c) {
    kf_llm *l = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_llm_new(c, &l, &err), KF_OK, "%s", err.msg);
    return l;
}

static const kf_llm_msg two_msgs[] = {
    {"system", "You write kernels."},
    {"user", "Write a kernel that adds two vectors."},
};

/* One call that must fail with code and phrase in the message. */
static kf_llm_reply chat_fails(kf_llm *l, kf_status code, const char *phrase, kf_error *err) {
    kf_llm_reply r;
    kf_status s = kf_llm_chat(l, two_msgs, 2, &r, err);
    cr_assert_eq(s, code, "status %s, want %s: %s", kf_status_name(s), kf_status_name(code),
                 err->msg);
    cr_assert_eq(err->code, code);
    if (phrase) cr_assert(strstr(err->msg, phrase), "message '%s' lacks '%s'", err->msg, phrase);
    cr_assert(!strstr(err->msg, KEY), "the key leaked: %s", err->msg);
    cr_assert_null(r.text);
    return r;
}

/* An OpenAI chat completion body, and a script entry answering it with 200. */
#define OPENAI_BODY(text, finish)                                                          \
    "{\"id\":\"c1\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","            \
    "\"content\":\"" text "\"},\"finish_reason\":\"" finish "\"}],"                              \
    "\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":5,\"total_tokens\":17}}"
#define OPENAI_OK(text, finish) "{\"status\":200,\"body\":" OPENAI_BODY(text, finish) "}"

/* ---- OpenAI ---- */

Test(llm, openai_ok_reply_counted_and_shaped) {
    start_server("{\"key\":\"" KEY "\",\"responses\":["
                 "{\"status\":200,\"expect\":{\"method\":\"POST\",\"path\":\"/v1/chat/completions\","
                 "\"headers\":{\"authorization\":true,\"x-api-key\":false,"
                 "\"content-type\":\"application/json\"}},"
                 "\"body\":{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                 "\"content\":\"hello\\nworld\"},\"finish_reason\":\"stop\"}],"
                 "\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":5}}}]}");
    kf_llm_config c;
    config(&c, KF_LLM_AUTO);
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    cr_assert_eq(kf_llm_chat(l, two_msgs, 2, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(r.text, "hello\nworld");
    cr_assert_str_eq(r.finish, "stop");
    cr_assert_eq(r.truncated, 0);
    cr_assert_eq(r.prompt_tokens, 12);
    cr_assert_eq(r.completion_tokens, 5);
    cr_assert_eq(r.http_status, 200);
    cr_assert_eq(r.attempts, 1);
    cr_assert(r.seconds > 0); /* measured; how long it took depends on the machine's load */
    int calls;
    long pt, ct;
    kf_llm_usage(l, &calls, &pt, &ct);
    cr_assert(calls == 1 && pt == 12 && ct == 5, "usage %d %ld %ld", calls, pt, ct);

    json_t *log = server_log();
    cr_assert_eq(json_array_size(log), 1);
    json_t *q = json_array_get(log, 0);
    cr_assert_str_eq(str_at(q, "check"), "ok");
    cr_assert_str_eq(str_at(q, "path"), "/v1/chat/completions");
    cr_assert(json_is_true(at(q, "key_match")), "the key did not arrive as Bearer");
    cr_assert(json_is_false(at(q, "key_elsewhere")), "the key went outside its header");
    cr_assert(json_is_true(at(q, "headers.authorization.has_key")));
    cr_assert_str_eq(str_at(q, "body.model"), "test-model");
    cr_assert_eq(json_array_size(at(q, "body.messages")), 2);
    cr_assert_str_eq(str_at(q, "body.messages.0.role"), "system");
    cr_assert_str_eq(str_at(q, "body.messages.0.content"), "You write kernels.");
    cr_assert_str_eq(str_at(q, "body.messages.1.role"), "user");
    cr_assert_str_eq(str_at(q, "body.messages.1.content"), "Write a kernel that adds two vectors.");
    cr_assert_eq(json_integer_value(at(q, "body.max_tokens")), 8192);
    cr_assert_float_eq(json_number_value(at(q, "body.temperature")), 0.2, 1e-9);
    cr_assert_null(at(q, "body.system"), "openai keeps the system prompt in messages");
    json_decref(log);

    /* The log itself holds no key (the server hashes it). */
    char *text;
    cr_assert_eq(kf_read_file(srv.log, &text, NULL, &err), KF_OK);
    cr_assert(!strstr(text, KEY));
    free(text);
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

Test(llm, openai_null_content_and_no_usage_and_no_temperature) {
    start_server("[{\"status\":200,\"expect\":{\"headers\":{\"authorization\":false}},"
                 "\"body\":{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":null},"
                 "\"finish_reason\":\"stop\"}]}}]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    c.key[0] = 0; /* a local server without a key: no auth header at all */
    c.temperature = -1;
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    cr_assert_eq(kf_llm_chat(l, two_msgs, 2, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(r.text, "");
    cr_assert_eq(r.prompt_tokens + r.completion_tokens, 0);
    json_t *log = server_log();
    json_t *q = json_array_get(log, 0);
    cr_assert_str_eq(str_at(q, "check"), "ok");
    cr_assert_null(at(q, "body.temperature"), "temperature < 0 must not be sent");
    json_decref(log);
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

/* ---- Anthropic ---- */

Test(llm, anthropic_ok_reply_system_top_level) {
    start_server("{\"key\":\"" KEY "\",\"responses\":["
                 "{\"status\":200,\"expect\":{\"path\":\"/v1/messages\",\"headers\":{"
                 "\"x-api-key\":true,\"authorization\":false,\"anthropic-version\":\"2023-06-01\"},"
                 "\"json\":{\"system\":\"You write kernels.\",\"messages.0.role\":\"user\"}},"
                 "\"body\":{\"id\":\"m1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":["
                 "{\"type\":\"text\",\"text\":\"part one, \"},"
                 "{\"type\":\"thinking\",\"thinking\":\"hidden\"},"
                 "{\"type\":\"text\",\"text\":\"part two\"}],"
                 "\"stop_reason\":\"end_turn\",\"usage\":{\"input_tokens\":20,"
                 "\"cache_read_input_tokens\":3,\"output_tokens\":7}}}]}");
    kf_llm_config c;
    config(&c, KF_LLM_ANTHROPIC);
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    cr_assert_eq(kf_llm_chat(l, two_msgs, 2, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(r.text, "part one, part two");
    cr_assert_str_eq(r.finish, "end_turn");
    cr_assert_eq(r.truncated, 0);
    cr_assert_eq(r.prompt_tokens, 23);
    cr_assert_eq(r.completion_tokens, 7);

    json_t *log = server_log();
    cr_assert_eq(json_array_size(log), 1);
    json_t *q = json_array_get(log, 0);
    cr_assert_str_eq(str_at(q, "check"), "ok");
    cr_assert(json_is_true(at(q, "key_match")), "the key did not arrive in x-api-key");
    cr_assert(json_is_false(at(q, "key_elsewhere")));
    cr_assert_str_eq(str_at(q, "body.system"), "You write kernels.");
    cr_assert_eq(json_array_size(at(q, "body.messages")), 1, "system is not a message here");
    cr_assert_str_eq(str_at(q, "body.messages.0.content"), "Write a kernel that adds two vectors.");
    cr_assert_eq(json_integer_value(at(q, "body.max_tokens")), 8192);
    cr_assert_str_eq(str_at(q, "body.model"), "test-model");
    json_decref(log);
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

Test(llm, anthropic_max_tokens_is_truncated) {
    start_server("[{\"status\":200,\"body\":{\"content\":[{\"type\":\"text\",\"text\":\"```c\\nint\"}],"
                 "\"stop_reason\":\"max_tokens\",\"usage\":{\"input_tokens\":5,\"output_tokens\":9}}}]");
    kf_llm_config c;
    config(&c, KF_LLM_ANTHROPIC);
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    cr_assert_eq(kf_llm_chat(l, two_msgs, 2, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(r.truncated, 1);
    cr_assert_str_eq(r.finish, "max_tokens");
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

Test(llm, openai_finish_length_is_truncated) {
    start_server("[" OPENAI_OK("```c\\nint main(", "length") "]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    cr_assert_eq(kf_llm_chat(l, two_msgs, 2, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(r.truncated, 1);
    cr_assert_str_eq(r.finish, "length");
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

/* ---- retries ---- */

Test(llm, retry_after_429_then_success) {
    start_server("[{\"status\":429,\"headers\":{\"Retry-After\":\"1\"},"
                 "\"body\":{\"error\":{\"message\":\"rate limited\"}}}," OPENAI_OK("ok", "stop") "]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    double t0 = kf_now();
    cr_assert_eq(kf_llm_chat(l, two_msgs, 2, &r, &err), KF_OK, "%s", err.msg);
    double dt = kf_now() - t0;
    cr_assert_eq(r.attempts, 2);
    cr_assert_eq(r.http_status, 200);
    cr_assert_str_eq(r.text, "ok");
    /* at least what the server asked for; no upper bound (a loaded machine is slow) */
    cr_assert(dt >= 0.95 && r.seconds >= 0.95, "waited %.3f s, Retry-After said 1 s", dt);
    cr_assert_eq(log_count(), 2);
    int calls;
    kf_llm_usage(l, &calls, NULL, NULL);
    cr_assert_eq(calls, 1, "retries are one call");
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

Test(llm, status_500_until_the_retry_limit) {
    start_server("[{\"status\":500,\"body\":{\"error\":{\"message\":\"upstream broke\"}}},"
                 "{\"status\":502,\"body\":\"bad gateway\"},"
                 "{\"status\":500,\"body\":{\"error\":{\"message\":\"upstream broke again\"}}},"
                 OPENAI_OK("never", "stop") "]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    c.max_retries = 2;
    kf_llm *l = client(&c);
    kf_error err = {0};
    double t0 = kf_now();
    kf_llm_reply r = chat_fails(l, KF_ERR_RUNTIME, "HTTP 500", &err);
    double dt = kf_now() - t0;
    cr_assert(strstr(err.msg, "3 attempts"), "%s", err.msg);
    cr_assert(strstr(err.msg, "upstream broke again"), "the server's message: %s", err.msg);
    cr_assert_eq(r.attempts, 3);
    cr_assert_eq(r.http_status, 500);
    cr_assert_eq(log_count(), 3, "1 + max_retries requests");
    /* backoff 0.05 then 0.1 s, at least; no upper bound (a loaded machine is slow) */
    cr_assert(dt >= 0.14, "took %.3f s", dt);
    kf_llm_free(l);
}

Test(llm, status_400_is_not_retried) {
    start_server("[{\"status\":400,\"body\":{\"error\":{\"message\":\"max_tokens too large\"}}},"
                 OPENAI_OK("never", "stop") "]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    kf_llm *l = client(&c);
    kf_error err = {0};
    kf_llm_reply r = chat_fails(l, KF_ERR_RUNTIME, "HTTP 400 after 1 attempt", &err);
    cr_assert(strstr(err.msg, "\"max_tokens too large\""), "%s", err.msg);
    cr_assert_eq(r.attempts, 1);
    cr_assert_eq(log_count(), 1);
    kf_llm_free(l);
}

/* A refused call is retried, and counts as a call (issue 28, item 17): an endpoint that is
 * down cannot keep a run asking past max_calls (refused calls were free). */
Test(llm, connection_refused_is_retried_and_counted) {
    /* A port that nothing listens on: bind one, note it, close it. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t n = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &n);
    close(fd);
    srv.port = ntohs(a.sin_port);
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    c.max_retries = 1;
    kf_llm *l = client(&c);
    kf_error err = {0};
    kf_llm_reply r = chat_fails(l, KF_ERR_RUNTIME, "cannot connect", &err);
    cr_assert(strstr(err.msg, "2 attempts"), "%s", err.msg);
    cr_assert_eq(r.attempts, 2);
    cr_assert_eq(r.http_status, 0);
    int calls;
    kf_llm_usage(l, &calls, NULL, NULL);
    cr_assert_eq(calls, 1, "a failed call is a call");
    kf_llm_free(l);
    c.max_calls = 2;
    l = client(&c);
    chat_fails(l, KF_ERR_RUNTIME, "cannot connect", &err);
    chat_fails(l, KF_ERR_RUNTIME, "cannot connect", &err);
    r = chat_fails(l, KF_ERR_UNSUPPORTED, "2 calls made, max_calls is 2", &err);
    cr_assert_eq(r.attempts, 0, "the budget stops the call before it is tried");
    kf_llm_free(l);
}

/* ---- timeouts and the size cap ---- */

Test(llm, reply_slower_than_the_timeout) {
    start_server("[{\"status\":200,\"delay_s\":5,\"body\":" OPENAI_BODY("late", "stop") "}]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    c.timeout_s = 0.4;
    c.max_retries = 0;
    kf_llm *l = client(&c);
    kf_error err = {0};
    double t0 = kf_now();
    kf_llm_reply r = chat_fails(l, KF_ERR_RUNTIME, "timed out", &err);
    double dt = kf_now() - t0;
    cr_assert(strstr(err.msg, "timeout_s = 0.4"), "%s", err.msg);
    /* "timed out" above says the client's timeout cut it, not the 5 s reply's end; how soon
     * after 0.4 s depends on the machine's load, so only the lower bound is asserted */
    cr_assert(dt >= 0.35, "took %.3f s for a 0.4 s timeout", dt);
    cr_assert_eq(r.attempts, 1);
    int calls;
    kf_llm_usage(l, &calls, NULL, NULL);
    cr_assert_eq(calls, 1, "the request reached the server");
    kf_llm_free(l);
}

Test(llm, timeout_then_success_on_retry) {
    /* the slow reply is a good one: only the timeout cutting it gives "in time" */
    start_server("[{\"status\":200,\"delay_s\":5,\"body\":" OPENAI_BODY("late", "stop") "}," OPENAI_OK("in time", "stop") "]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    c.timeout_s = 0.4;
    c.max_retries = 1;
    c.retry_timeouts = 1; /* asked for: by default a timed-out request is not retried */
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    cr_assert_eq(kf_llm_chat(l, two_msgs, 2, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(r.text, "in time");
    cr_assert_eq(r.attempts, 2); /* the slow first attempt was cut, the second answered */
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

static void size_cap_case(const char *script) {
    start_server(script);
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    c.max_reply_bytes = 4096;
    kf_llm *l = client(&c);
    kf_error err = {0};
    kf_llm_reply r = chat_fails(l, KF_ERR_RUNTIME, "size cap", &err);
    cr_assert(strstr(err.msg, "max_reply_bytes = 4096"), "%s", err.msg);
    cr_assert_eq(r.attempts, 1, "an oversized reply is not retried");
    cr_assert_eq(log_count(), 1);
    kf_llm_free(l);
}

Test(llm, reply_over_the_size_cap_with_length) {
    size_cap_case("[{\"status\":200,\"pad_bytes\":100000,\"body\":" OPENAI_BODY("big", "stop") "}]");
}

Test(llm, reply_over_the_size_cap_streamed_without_length) {
    size_cap_case("[{\"status\":200,\"no_length\":true,\"pad_bytes\":100000,\"body\":"
                  OPENAI_BODY("big", "stop") "}]");
}

Test(llm, reply_just_under_the_size_cap_is_fine) {
    start_server("[{\"status\":200,\"pad_bytes\":3000,\"body\":" OPENAI_BODY("fits", "stop") "}]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    c.max_reply_bytes = 4096;
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    cr_assert_eq(kf_llm_chat(l, two_msgs, 2, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(r.text, "fits");
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

/* ---- bodies that are not the protocol's ---- */

Test(llm, garbage_body_is_quoted) {
    start_server("[{\"status\":200,\"headers\":{\"Content-Type\":\"text/html\"},"
                 "\"body\":\"<html><body>Bad gateway\\n(nginx)</body></html>\"}]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    kf_llm *l = client(&c);
    kf_error err = {0};
    chat_fails(l, KF_ERR_RUNTIME, "not JSON", &err);
    cr_assert(strstr(err.msg, "'<html><body>Bad gateway (nginx)</body></html>'"), "%s", err.msg);
    cr_assert(strstr(err.msg, "/v1/chat/completions"), "names the endpoint: %s", err.msg);
    kf_llm_free(l);
}

/* 20: an HTML page with status 200 is named as such, with its content type and its start
 * (it said only "not JSON ('[' or '{' expected near '<')"); a body that is neither names
 * its content type too. */
Test(llm, html_page_names_its_content_type) {
    start_server("[{\"status\":200,\"headers\":{\"Content-Type\":\"text/html; charset=utf-8\"},"
                 "\"body\":\"<!DOCTYPE html><html><title>Sign in</title></html>\"},"
                 "{\"status\":200,\"headers\":{\"Content-Type\":\"text/plain\"},\"body\":\"upstream busy\"}]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    kf_llm *l = client(&c);
    kf_error err = {0};
    chat_fails(l, KF_ERR_RUNTIME, "HTML page", &err);
    cr_assert(strstr(err.msg, "Content-Type text/html; charset=utf-8"), "%s", err.msg);
    cr_assert(strstr(err.msg, "'<!DOCTYPE html><html><title>Sign in</title></html>'"), "%s", err.msg);
    chat_fails(l, KF_ERR_RUNTIME, "not JSON (Content-Type text/plain", &err);
    cr_assert(strstr(err.msg, "'upstream busy'"), "%s", err.msg);
    kf_llm_free(l);
}

/* 20: \u0000 is valid JSON: the reply is taken, and the text after it is kept. */
Test(llm, nul_escape_in_a_reply_is_accepted) {
    start_server("[{\"status\":200,\"body\":{\"id\":\"c\\u00001\",\"choices\":[{\"message\":"
                 "{\"role\":\"assistant\",\"content\":\"before\\u0000after\"},\"finish_reason\":\"stop\"}],"
                 "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}}]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    cr_assert_eq(kf_llm_chat(l, two_msgs, 2, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(r.text, "before\xEF\xBF\xBD" "after");
    cr_assert_eq(r.completion_tokens, 2);
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

Test(llm, json_of_the_wrong_shape_is_quoted) {
    start_server("[{\"status\":200,\"body\":{\"object\":\"list\",\"data\":[1,2,3]}},"
                 "{\"status\":200,\"body\":{\"choices\":[{\"message\":{\"content\":42}}]}}]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    kf_llm *l = client(&c);
    kf_error err = {0};
    chat_fails(l, KF_ERR_RUNTIME, "no choices[0].message", &err);
    cr_assert(strstr(err.msg, "'{\"object\": \"list\", \"data\": [1, 2, 3]}'"), "%s", err.msg);
    chat_fails(l, KF_ERR_RUNTIME, "content is not text", &err);
    kf_llm_free(l);
}

Test(llm, anthropic_wrong_shape_and_error_with_status_200) {
    start_server("[" OPENAI_OK("an openai reply", "stop") ","
                 "{\"status\":200,\"body\":{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
                 "\"message\":\"Overloaded\"}}}]");
    kf_llm_config c;
    config(&c, KF_LLM_ANTHROPIC);
    kf_llm *l = client(&c);
    kf_error err = {0};
    chat_fails(l, KF_ERR_RUNTIME, "not an Anthropic message", &err);
    chat_fails(l, KF_ERR_RUNTIME, "\"Overloaded\"", &err);
    kf_llm_free(l);
}

/* ---- budgets ---- */

Test(llm, call_budget_stops_before_the_server) {
    start_server("[" OPENAI_OK("one", "stop") "," OPENAI_OK("two", "stop") "]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    c.max_calls = 1;
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    cr_assert_eq(kf_llm_chat(l, two_msgs, 2, &r, &err), KF_OK, "%s", err.msg);
    kf_llm_reply_free(&r);
    chat_fails(l, KF_ERR_UNSUPPORTED, "max_calls is 1", &err);
    cr_assert_eq(log_count(), 1, "the second call must not reach the server");
    kf_llm_free(l);
}

Test(llm, token_budget_stops_before_the_server) {
    start_server("[" OPENAI_OK("one", "stop") "," OPENAI_OK("two", "stop") "]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    c.max_total_tokens = 17; /* the first reply spends 12 + 5 */
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    cr_assert_eq(kf_llm_chat(l, two_msgs, 2, &r, &err), KF_OK, "%s", err.msg);
    kf_llm_reply_free(&r);
    chat_fails(l, KF_ERR_UNSUPPORTED, "17 tokens used (12 prompt + 5 completion)", &err);
    cr_assert_eq(log_count(), 1);
    kf_llm_free(l);
}

/* ---- keys ---- */

Test(llm, key_echoed_by_the_server_is_redacted) {
    start_server("[{\"status\":401,\"body\":{\"error\":{\"message\":\"Incorrect API key provided: "
                 "$AUTH. You can find your API key at https://example.com\"}}},"
                 "{\"status\":200,\"body\":\"not json, but your key is $AUTH, see?\"}]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    kf_llm *l = client(&c);
    kf_error err = {0};
    chat_fails(l, KF_ERR_RUNTIME, "HTTP 401", &err);
    cr_assert(strstr(err.msg, "Incorrect API key provided: [key]."), "%s", err.msg);
    cr_assert(strstr(err.msg, "check the API key"), "%s", err.msg);
    chat_fails(l, KF_ERR_RUNTIME, "your key is [key], see?", &err);

    char text[256] = "before " KEY " middle " KEY " after";
    kf_llm_redact(l, text);
    cr_assert_str_eq(text, "before [key] middle [key] after");
    kf_llm_free(l);
}

Test(llm, short_key_is_masked_in_place) {
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    snprintf(c.key, sizeof c.key, "ab1");
    kf_llm *l = client(&c);
    char text[64] = "xab1yab1";
    kf_llm_redact(l, text);
    cr_assert_str_eq(text, "x***y***");
    kf_llm_free(l);
}

Test(llm, key_with_a_newline_is_refused_without_quoting_it) {
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    snprintf(c.key, sizeof c.key, "sk-abc\r\nX-Evil: 1");
    kf_llm *l = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_llm_new(&c, &l, &err), KF_ERR_ARG);
    cr_assert_null(l);
    cr_assert(!strstr(err.msg, "sk-abc"), "%s", err.msg);
}

/* ---- messages ---- */

Test(llm, bad_messages_send_nothing) {
    start_server("[" OPENAI_OK("x", "stop") "]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    kf_llm_msg bad[] = {{"tool", "x"}};
    cr_assert_eq(kf_llm_chat(l, bad, 1, &r, &err), KF_ERR_ARG);
    cr_assert(strstr(err.msg, "'tool'"), "%s", err.msg);
    kf_llm_msg sys_only[] = {{"system", "x"}};
    cr_assert_eq(kf_llm_chat(l, sys_only, 1, &r, &err), KF_ERR_ARG);
    cr_assert_eq(kf_llm_chat(l, two_msgs, 0, &r, &err), KF_ERR_ARG);
    cr_assert_eq(log_count(), 0);
    kf_llm_free(l);
}

Test(llm, invalid_utf8_and_a_conversation_reach_the_server_in_order) {
    start_server("[" OPENAI_OK("ok", "stop") "]");
    kf_llm_config c;
    config(&c, KF_LLM_OPENAI);
    kf_llm *l = client(&c);
    kf_llm_msg m[] = {
        {"system", "sys"},
        {"user", "first"},
        {"assistant", "```c\nbad\n```"},
        {"user", "error: stray \xff in program"},
    };
    kf_llm_reply r;
    kf_error err = {0};
    cr_assert_eq(kf_llm_chat(l, m, 4, &r, &err), KF_OK, "%s", err.msg);
    json_t *log = server_log();
    json_t *q = json_array_get(log, 0);
    cr_assert_eq(json_array_size(at(q, "body.messages")), 4);
    cr_assert_str_eq(str_at(q, "body.messages.2.role"), "assistant");
    cr_assert_str_eq(str_at(q, "body.messages.3.content"), "error: stray \xEF\xBF\xBD in program");
    json_decref(log);
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

/* ---- config ---- */

static void write_config(const char *name, const char *text, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", srv.dir, name);
    kf_error err = {0};
    cr_assert_eq(kf_write_file(path, text, strlen(text), &err), KF_OK);
}

Test(llm, config_file_under_env_under_flags) {
    char path[160];
    write_config("config.json",
                 "{\"url\": \"http://file.example/v1\", \"model\": \"file-model\",\n"
                 " \"api_key\": \"file-key\", \"max_calls\": 3, \"timeout_s\": 7.5,\n"
                 " \"max_retries\": 1, \"max_tokens\": 1000, \"temperature\": 0,\n"
                 " \"max_total_tokens\": 50000}\n",
                 path, sizeof path);
    kf_llm_config c;
    kf_llm_config_default(&c);
    cr_assert_eq(c.timeout_s, 300);
    cr_assert_eq(c.max_retries, 4);
    cr_assert_eq(c.max_reply_bytes, (size_t)8 << 20);
    kf_error err = {0};
    cr_assert_eq(kf_llm_config_file(&c, path, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(c.url, "http://file.example/v1");
    cr_assert_str_eq(c.key, "file-key");
    cr_assert(strstr(c.origin, "config"), "%s", c.origin);
    cr_assert(c.max_calls == 3 && c.timeout_s == 7.5 && c.max_retries == 1 &&
              c.max_tokens == 1000 && c.temperature == 0 && c.max_total_tokens == 50000);

    setenv("KFORGE_LLM_MODEL", "env-model", 1);
    setenv("OPENAI_API_KEY", "env-key", 1);
    setenv("ANTHROPIC_API_KEY", "wrong-protocol-key", 1);
    kf_llm_config_env(&c);
    cr_assert_str_eq(c.url, "http://file.example/v1", "the env has no URL: the file's stays");
    cr_assert_str_eq(c.model, "env-model");
    cr_assert_str_eq(c.key, "env-key", "the key for the protocol in use");
    cr_assert_str_eq(c.origin, "environment");

    snprintf(c.model, sizeof c.model, "flag-model"); /* flags: plain assignment, last */
    cr_assert_str_eq(c.model, "flag-model");

    /* The environment's URL and protocol pick the key variable. */
    setenv("KFORGE_LLM_URL", "https://api.anthropic.com/v1", 1);
    kf_llm_config_env(&c);
    cr_assert_eq(kf_llm_config_protocol(&c), KF_LLM_ANTHROPIC);
    cr_assert_str_eq(c.key, "wrong-protocol-key");
}

Test(llm, config_default_path_and_errors) {
    char path[160];
    kf_llm_config c;
    kf_llm_config_default(&c);
    kf_error err = {0};
    /* A missing default file is fine; a missing named one is not. */
    setenv("XDG_CONFIG_HOME", srv.dir, 1);
    cr_assert_eq(kf_llm_config_file(&c, NULL, &err), KF_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/none.json", srv.dir);
    cr_assert_eq(kf_llm_config_file(&c, path, &err), KF_ERR_IO);
    cr_assert_str_eq(err.file, path);

    write_config("config.json", "{\"model\": \"m-from-kforge-config\"}", path, sizeof path);
    setenv("KFORGE_CONFIG", path, 1);
    cr_assert_eq(kf_llm_config_file(&c, NULL, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(c.model, "m-from-kforge-config");

    write_config("bad.json", "{\"model\": \"m\",\n \"url\": }", path, sizeof path);
    cr_assert_eq(kf_llm_config_file(&c, path, &err), KF_ERR_PARSE);
    cr_assert_str_eq(err.file, path);
    cr_assert_eq(err.line, 2, "line %d: %s", err.line, err.msg);

    write_config("bad.json", "{\"model\": \"changed\", \"max_retries\": \"four\"}", path,
                 sizeof path);
    cr_assert_eq(kf_llm_config_file(&c, path, &err), KF_ERR_PARSE);
    cr_assert(strstr(err.msg, "\"max_retries\"") && strstr(err.msg, "integer"), "%s", err.msg);
    cr_assert_str_eq(c.model, "m-from-kforge-config", "a bad file changes nothing");

    write_config("bad.json", "{\"modle\": \"x\"}", path, sizeof path);
    cr_assert_eq(kf_llm_config_file(&c, path, &err), KF_ERR_PARSE);
    cr_assert(strstr(err.msg, "\"modle\"") && strstr(err.msg, "unknown"), "%s", err.msg);

    write_config("bad.json", "{\"protocol\": \"grpc\"}", path, sizeof path);
    cr_assert_eq(kf_llm_config_file(&c, path, &err), KF_ERR_PARSE);
    cr_assert(strstr(err.msg, "\"protocol\""), "%s", err.msg);

    write_config("bad.json", "[1, 2]", path, sizeof path);
    cr_assert_eq(kf_llm_config_file(&c, path, &err), KF_ERR_PARSE);

    /* A named $KFORGE_CONFIG that is missing is an error too. */
    snprintf(path, sizeof path, "%s/gone.json", srv.dir);
    setenv("KFORGE_CONFIG", path, 1);
    cr_assert_eq(kf_llm_config_file(&c, NULL, &err), KF_ERR_IO);
}

Test(llm, protocol_auto_detection_and_endpoints) {
    struct {
        const char *url;
        kf_llm_protocol set, want;
    } cases[] = {
        {"https://api.openai.com/v1", KF_LLM_AUTO, KF_LLM_OPENAI},
        {"http://127.0.0.1:8080/v1", KF_LLM_AUTO, KF_LLM_OPENAI},
        {"https://api.anthropic.com/v1", KF_LLM_AUTO, KF_LLM_ANTHROPIC},
        {"https://API.Anthropic.com", KF_LLM_AUTO, KF_LLM_ANTHROPIC},
        {"http://proxy.local/v1/messages", KF_LLM_AUTO, KF_LLM_ANTHROPIC},
        {"http://proxy.local/v1/messages/", KF_LLM_AUTO, KF_LLM_ANTHROPIC},
        {"http://proxy.local/anthropic/v1", KF_LLM_AUTO, KF_LLM_OPENAI}, /* host decides */
        {"https://api.anthropic.com/v1", KF_LLM_OPENAI, KF_LLM_OPENAI},  /* explicit wins */
        {"http://127.0.0.1:8080/v1", KF_LLM_ANTHROPIC, KF_LLM_ANTHROPIC},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kf_llm_config c;
        kf_llm_config_default(&c);
        snprintf(c.url, sizeof c.url, "%s", cases[i].url);
        c.protocol = cases[i].set;
        cr_assert_eq(kf_llm_config_protocol(&c), cases[i].want, "%s", cases[i].url);
    }
    /* A URL given as the full endpoint is used as is (the request goes to one path). */
    start_server("[{\"status\":200,\"expect\":{\"path\":\"/v1/messages\"},\"body\":{\"content\":[],"
                 "\"stop_reason\":\"end_turn\"}}]");
    kf_llm_config c;
    config(&c, KF_LLM_AUTO);
    snprintf(c.url, sizeof c.url, "http://127.0.0.1:%d/v1/messages", srv.port);
    kf_llm *l = client(&c);
    kf_llm_reply r;
    kf_error err = {0};
    cr_assert_eq(kf_llm_chat(l, two_msgs, 2, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(r.text, "");
    kf_llm_reply_free(&r);
    kf_llm_free(l);
}

Test(llm, new_names_where_url_and_model_come_from) {
    kf_llm_config c;
    kf_llm_config_default(&c);
    kf_llm *l = (kf_llm *)1;
    kf_error err = {0};
    cr_assert_eq(kf_llm_new(&c, &l, &err), KF_ERR_ARG);
    cr_assert_null(l);
    cr_assert(strstr(err.msg, "KFORGE_LLM_URL") && strstr(err.msg, "\"url\"") &&
              strstr(err.msg, "--llm-url"), "%s", err.msg);
    snprintf(c.url, sizeof c.url, "http://127.0.0.1:1/v1");
    cr_assert_eq(kf_llm_new(&c, &l, &err), KF_ERR_ARG);
    cr_assert(strstr(err.msg, "KFORGE_LLM_MODEL") && strstr(err.msg, "\"model\"") &&
              strstr(err.msg, "--model"), "%s", err.msg);
    snprintf(c.model, sizeof c.model, "m");
    snprintf(c.url, sizeof c.url, "ftp://127.0.0.1/v1");
    cr_assert_eq(kf_llm_new(&c, &l, &err), KF_ERR_ARG);
    cr_assert(strstr(err.msg, "http://"), "%s", err.msg);
}

/* ---- code extraction ---- */

static char *extract_ok(const char *reply, const char *langs) {
    char *code = NULL;
    kf_error err = {0};
    kf_status s = kf_llm_extract_code(reply, langs, &code, &err);
    cr_assert_eq(s, KF_OK, "%s\n--- reply:\n%s", err.msg, reply);
    cr_assert_not_null(code);
    return code;
}

static void extract_is(const char *reply, const char *langs, const char *want) {
    char *code = extract_ok(reply, langs);
    cr_assert_str_eq(code, want, "--- reply:\n%s", reply);
    free(code);
}

static void extract_fails(const char *reply, const char *langs, const char *phrase) {
    char *code = (char *)1;
    kf_error err = {0};
    cr_assert_eq(kf_llm_extract_code(reply, langs, &code, &err), KF_ERR_PARSE, "--- reply:\n%s",
                 reply);
    cr_assert_null(code);
    cr_assert(strstr(err.msg, phrase), "message '%s' lacks '%s'", err.msg, phrase);
}

Test(llm, extract_fenced_with_and_without_a_tag) {
    extract_is("```c\nint f(void) { return 1; }\n```\n", "c,cpp", "int f(void) { return 1; }\n");
    extract_is("```\nint f(void) { return 1; }\n```", "c", "int f(void) { return 1; }\n");
    extract_is("```C++\nint x;\n```", "cuda,cu,cpp,c++", "int x;\n");
    extract_is("```{.c}\nint y;\n```", "c", "int y;\n");
    extract_is("```c\r\nint z;\r\n```\r\n", "c", "int z;\n");
}

Test(llm, extract_with_prose_around) {
    extract_is("Here is the kernel you asked for:\n\n```cuda\n__global__ void k(float *x) {\n"
               "    x[threadIdx.x] = 0;\n}\n```\n\nIt launches one thread per element. Let me "
               "know if you need more.",
               "cuda,cu", "__global__ void k(float *x) {\n    x[threadIdx.x] = 0;\n}\n");
}

Test(llm, extract_picks_among_several_blocks) {
    /* The tagged one over a longer untagged one. */
    extract_is("```\nsome long untagged text that is longer than the kernel itself\nmore\n```\n"
               "```c\nint k;\n```\n",
               "c", "int k;\n");
    /* The last tagged one: a first draft, then the fix. */
    extract_is("First try:\n```c\nint draft;\n```\nBetter:\n```c\nint final_version;\n```\n"
               "Build it with:\n```bash\ncc -O2 k.c\n```\n",
               "c,cpp", "int final_version;\n");
    /* No tag wanted: the longest. */
    extract_is("```bash\nmake\n```\n```cpp\nint a;\nint b;\nint c;\n```\n```\nx\n```\n", NULL,
               "int a;\nint b;\nint c;\n");
    /* Tags that are not wanted: the longest. */
    extract_is("```python\nprint(1)\n```\n```cpp\nint a; int b; int c; int d;\n```\n", "cuda",
               "int a; int b; int c; int d;\n");
}

Test(llm, extract_tilde_fences_and_nesting) {
    extract_is("~~~c\nint t;\n~~~\n", "c", "int t;\n");
    /* A ``` line inside a ~~~ block is content, and a longer run closes a shorter one. */
    extract_is("~~~~c\n/* ``` */\nint u;\n```\n~~~~~\n", "c", "/* ``` */\nint u;\n```\n");
    /* An indented fence (in a list item) has its indentation taken off the lines. */
    extract_is("1. The kernel:\n   ```c\n   int v;\n     int w;\n   ```\n", "c",
               "int v;\n  int w;\n");
}

Test(llm, extract_errors) {
    extract_fails("Sure! Here it is:\n```c\nint f(void) {\n    return", "c", "cut off");
    extract_fails("```c\nint a;\n```\nAnd the improved one:\n```c\nint b(", "c", "cut off");
    extract_fails("I cannot write that kernel because the shapes do not match.", "c",
                  "no code block");
    extract_fails("", "c", "empty");
    extract_fails("   \n\n", "c", "empty");
    extract_fails("```c\n\n```", "c", "the code block is empty");
    /* An unclosed trailing block that is not the chosen one does not matter. */
    extract_is("```c\nint done;\n```\nRun it:\n```bash\nmake", "c", "int done;\n");
}

Test(llm, extract_unfenced_reply_that_is_all_code) {
    extract_is("\n#include <math.h>\n\n// add two vectors\nvoid add(const float *a, const float *b,"
               " float *c, int n) {\n    for (int i = 0; i < n; i++)\n        c[i] = a[i] + b[i];"
               "\n}\n\n",
               "c",
               "#include <math.h>\n\n// add two vectors\nvoid add(const float *a, const float *b,"
               " float *c, int n) {\n    for (int i = 0; i < n; i++)\n        c[i] = a[i] + b[i];"
               "\n}\n");
    /* Prose mixed in: not code throughout. */
    extract_fails("Here is the kernel:\nvoid add(float *a) {\n  a[0] = 1;\n}\n", "c",
                  "no code block");
}
