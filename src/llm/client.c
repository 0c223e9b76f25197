/*
 * The LLM client's public calls: a client holds a copy of its config, the resolved
 * protocol and endpoint, one reusable curl handle (so a client is not for concurrent use
 * from several threads; make one per thread) and the usage counters that the budgets are
 * checked against before each call. Every error message leaves through kf_llm_redact_key.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/core.h"
#include "kforge/llm.h"
#include "llm_int.h"

struct kf_llm {
    kf_llm_config c;
    kf_llm_protocol proto;
    char endpoint[1024];
    void *curl;
    int calls;
    long prompt_tokens, completion_tokens;
};

static const char *origin_of(const kf_llm_config *c) { return c->origin[0] ? c->origin : "defaults"; }

kf_status kf_llm_new(const kf_llm_config *c, kf_llm **out, kf_error *err) {
    *out = NULL;
    if (!c->url[0])
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "no LLM endpoint: give --llm-url URL, set $KFORGE_LLM_URL, or put "
                            "\"url\" in the config file ($KFORGE_CONFIG or "
                            "~/.config/kforge/config.json)");
    if (!c->model[0])
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "no LLM model: give --model M, set $KFORGE_LLM_MODEL, or put "
                            "\"model\" in the config file ($KFORGE_CONFIG or "
                            "~/.config/kforge/config.json)");
    if (strncmp(c->url, "http://", 7) && strncmp(c->url, "https://", 8)) {
        char q[600];
        kf_llm_quote(c->url, strlen(c->url), c->key, q, sizeof q);
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "LLM url '%s' (from %s) does not start with http:// or https://", q,
                            origin_of(c));
    }
    for (const char *k = c->key; *k; k++)
        if ((unsigned char)*k <= 0x20 || *k == 0x7f)
            return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                                "the LLM API key (from %s) holds a space or control character",
                                origin_of(c));
    if (!(c->timeout_s > 0) || !(c->connect_timeout_s > 0) || c->max_retries < 0 ||
        c->max_tokens <= 0 || !(c->backoff_s >= 0))
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "LLM config: timeout_s (%g) and connect_timeout_s (%g) must be > 0, "
                            "max_retries (%d) and backoff_s (%g) >= 0, max_tokens (%d) > 0",
                            c->timeout_s, c->connect_timeout_s, c->max_retries, c->backoff_s,
                            c->max_tokens);
    void *h = kf_llm_http_handle_new();
    if (!h) return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "libcurl could not be initialised");
    kf_llm *l = kf_calloc(1, sizeof *l);
    l->c = *c;
    if (!l->c.max_reply_bytes) l->c.max_reply_bytes = (size_t)8 << 20;
    l->proto = kf_llm_config_protocol(c);
    kf_llm_endpoint(c, l->proto, l->endpoint, sizeof l->endpoint);
    l->curl = h;
    *out = l;
    return KF_OK;
}

void kf_llm_free(kf_llm *l) {
    if (!l) return;
    kf_llm_http_handle_free(l->curl);
    memset(l->c.key, 0, sizeof l->c.key);
    free(l);
}

void kf_llm_reply_free(kf_llm_reply *r) {
    if (!r) return;
    free(r->text);
    r->text = NULL;
}

void kf_llm_usage(const kf_llm *l, int *calls, long *prompt_tokens, long *completion_tokens) {
    if (calls) *calls = l->calls;
    if (prompt_tokens) *prompt_tokens = l->prompt_tokens;
    if (completion_tokens) *completion_tokens = l->completion_tokens;
}

void kf_llm_redact(const kf_llm *l, char *s) { kf_llm_redact_key(l->c.key, s); }

/* The hint for a status that usually means a setting is wrong. */
static const char *status_hint(long status) {
    switch (status) {
    case 401:
    case 403: return " (check the API key";
    case 404: return " (check the url and the model";
    default: return NULL;
    }
}

static kf_status http_error(const kf_llm *l, const kf_http_result *res, kf_error *err) {
    char q[600], where[600];
    kf_llm_quote_error_body(res->body, res->len, l->c.key, q, sizeof q);
    kf_llm_quote(l->endpoint, strlen(l->endpoint), l->c.key, where, sizeof where);
    const char *hint = status_hint(res->status);
    char tail[128] = "";
    if (hint) snprintf(tail, sizeof tail, "%s, from %s)", hint, origin_of(&l->c));
    return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0,
                        "LLM server at %s answered HTTP %ld after %d attempt%s%s: %s", where,
                        res->status, res->attempts, res->attempts == 1 ? "" : "s", tail, q);
}

/* ---- a request longer than the model's context window ---- */

/* The integer after the first occurrence of pat in s (skipping spaces), or 0. */
static long number_after(const char *s, const char *pat) {
    const char *p = s ? strcasestr(s, pat) : NULL;
    if (!p) return 0;
    p += strlen(pat);
    while (*p == ' ') p++;
    char *end;
    long v = strtol(p, &end, 10);
    return end != p && v > 0 ? v : 0;
}

/* The integer just before pat in s ("2121 in the messages"), or 0. */
static long number_before(const char *s, const char *pat) {
    const char *p = s ? strcasestr(s, pat) : NULL;
    if (!p || p == s) return 0;
    const char *q = p;
    while (q > s && q[-1] == ' ') q--;
    const char *e = q;
    while (q > s && q[-1] >= '0' && q[-1] <= '9') q--;
    return q < e ? strtol(q, NULL, 10) : 0;
}

static long json_long(json_t *o, const char *name) {
    json_t *v = json_object_get(o, name);
    return json_is_integer(v) && json_integer_value(v) > 0 ? (long)json_integer_value(v) : 0;
}

/* Whether an HTTP error says the request is longer than the context window; fills r's
 * ctx_* from what it says (OpenAI, vLLM, llama-cpp-python: "maximum context length is N
 * tokens ... (P in the messages, C in the completion)"; llama.cpp: n_ctx, n_prompt_tokens;
 * Anthropic: "prompt is too long: P tokens > N maximum"). */
static int context_exceeded(const kf_http_result *res, kf_llm_reply *r) {
    if (res->status < 400 || res->status > 499 || !res->len) return 0;
    static const char *marks[] = {"context length", "context_length", "context window", "context size",
                                  "exceed_context", "prompt is too long", "maximum context"};
    int hit = 0;
    for (size_t i = 0; i < sizeof marks / sizeof *marks && !hit; i++) hit = strcasestr(res->body, marks[i]) != NULL;
    if (!hit) return 0;
    const char *t = res->body;
    r->ctx_window = number_after(t, "maximum context length is");
    if (!r->ctx_window) r->ctx_window = number_before(t, "maximum");
    r->ctx_prompt = number_before(t, "in the messages");
    if (!r->ctx_prompt) r->ctx_prompt = number_before(t, "input tokens");
    if (!r->ctx_prompt) r->ctx_prompt = number_after(t, "prompt is too long:");
    r->ctx_reply = number_before(t, "in the completion");
    json_t *root = json_loadb(res->body, res->len, 0, NULL);
    json_t *e = json_object_get(root, "error");
    if (!json_is_object(e)) e = root;
    if (!r->ctx_window) r->ctx_window = json_long(e, "n_ctx");
    if (!r->ctx_prompt) r->ctx_prompt = json_long(e, "n_prompt_tokens");
    json_decref(root);
    return 1;
}

static kf_status context_error(const kf_llm *l, const kf_http_result *res, const kf_llm_config *c,
                               size_t prompt_chars, kf_llm_reply *r, kf_error *err) {
    char q[400], where[600], win[64], prompt[96];
    kf_llm_quote_error_body(res->body, res->len, l->c.key, q, sizeof q);
    kf_llm_quote(l->endpoint, strlen(l->endpoint), l->c.key, where, sizeof where);
    if (!r->ctx_reply) r->ctx_reply = c->max_tokens;
    if (r->ctx_window) snprintf(win, sizeof win, "%ld tokens", r->ctx_window);
    else snprintf(win, sizeof win, "not said");
    if (r->ctx_prompt) snprintf(prompt, sizeof prompt, "%ld tokens", r->ctx_prompt);
    else snprintf(prompt, sizeof prompt, "%zu characters", prompt_chars);
    char fix[200];
    if (r->ctx_window) snprintf(fix, sizeof fix, "--context %ld", r->ctx_window);
    else snprintf(fix, sizeof fix, "--context N (the server's window)");
    return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0,
                        "the prompt does not fit the model's context window (window %s; prompt %s + reply "
                        "limit %ld tokens): give %s so kforge fits the prompt and reply into it, or a "
                        "smaller --reply-tokens (now %d), or serve the model with a larger window; not "
                        "retried (HTTP %ld from %s: %s)",
                        win, prompt, r->ctx_reply, fix, c->max_tokens, res->status, where, q);
}

static kf_status budget_check(const kf_llm *l, kf_error *err) {
    if (l->c.max_calls > 0 && l->calls >= l->c.max_calls)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "LLM call budget spent: %d call%s made, max_calls is %d", l->calls,
                            l->calls == 1 ? "" : "s", l->c.max_calls);
    long used = l->prompt_tokens + l->completion_tokens;
    if (l->c.max_total_tokens > 0 && used >= l->c.max_total_tokens)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "LLM token budget spent: %ld tokens used (%ld prompt + %ld "
                            "completion), max_total_tokens is %ld",
                            used, l->prompt_tokens, l->completion_tokens, l->c.max_total_tokens);
    return KF_OK;
}

kf_status kf_llm_budget_left(const kf_llm *l, kf_error *err) { return budget_check(l, err); }

kf_status kf_llm_chat(kf_llm *l, const kf_llm_msg *msgs, int nmsgs, kf_llm_reply *r,
                      kf_error *err) {
    return kf_llm_chat_with(l, msgs, nmsgs, NULL, r, err);
}

kf_status kf_llm_chat_with(kf_llm *l, const kf_llm_msg *msgs, int nmsgs, const kf_llm_params *p,
                           kf_llm_reply *r, kf_error *err) {
    memset(r, 0, sizeof *r);
    double t0 = kf_now();
    kf_status s = budget_check(l, err);
    if (s) return s;
    kf_llm_config c = l->c; /* this call's settings */
    if (p && p->max_tokens > 0) c.max_tokens = p->max_tokens;
    if (p && p->set_temperature) c.temperature = p->temperature;
    r->max_tokens = c.max_tokens;
    r->temperature = c.temperature;
    char *body = NULL;
    if ((s = kf_llm_request_json(&c, l->proto, msgs, nmsgs, &body, err))) return s;
    size_t prompt_chars = 0;
    for (int i = 0; i < nmsgs; i++) prompt_chars += strlen(msgs[i].content);

    char *hdr[4];
    int nh = kf_llm_request_headers(&c, l->proto, hdr);
    kf_http_result res;
    s = kf_llm_http_post(l->curl, &c, l->endpoint, (const char *const *)hdr, nh, body, &res,
                         err);
    memset(c.key, 0, sizeof c.key);
    for (int i = 0; i < nh; i++) {
        memset(hdr[i], 0, strlen(hdr[i])); /* the auth line holds the key */
        free(hdr[i]);
    }
    free(body);
    r->attempts = res.attempts;
    r->http_status = (int)res.status;
    /* every call counts, answered or not: a budget bounds the calls tried, so an endpoint
     * that keeps failing cannot keep a run asking (it did: refused calls were free) */
    l->calls++;
    if (s == KF_OK && (res.status < 200 || res.status > 299)) {
        if (context_exceeded(&res, r)) {
            r->context_exceeded = 1;
            s = context_error(l, &res, &c, prompt_chars, r, err);
        } else {
            s = http_error(l, &res, err);
        }
    }
    if (s == KF_OK) {
        s = kf_llm_parse_reply(l->proto, l->endpoint, res.content_type, res.body, res.len, l->c.key, r, err);
        if (s == KF_OK) {
            l->prompt_tokens += r->prompt_tokens;
            l->completion_tokens += r->completion_tokens;
        }
    }
    kf_http_result_free(&res);
    r->seconds = kf_now() - t0;
    if (s != KF_OK) {
        kf_llm_reply_free(r);
        if (err) kf_llm_redact_key(l->c.key, err->msg);
    }
    kf_log(2, "kforge: llm: %s %s: %s after %d attempt%s, %.2f s, %ld+%ld tokens\n",
           l->proto == KF_LLM_ANTHROPIC ? "anthropic" : "openai", l->c.model,
           s == KF_OK ? "ok" : kf_status_name(s), r->attempts, r->attempts == 1 ? "" : "s",
           r->seconds, r->prompt_tokens, r->completion_tokens);
    return s;
}

/* ---- the server's context window ---- */

/* The window in a GET reply's JSON: the model's entry of a /models list, or /props. */
static long window_in(json_t *root, const char *model) {
    static const char *names[] = {"max_model_len", "context_length", "context_window", "n_ctx", "max_context_length"};
    json_t *data = json_object_get(root, "data"), *entry = NULL, *e;
    size_t i;
    if (json_is_array(data)) {
        json_array_foreach(data, i, e) {
            const char *id = json_string_value(json_object_get(e, "id"));
            if ((id && !strcmp(id, model)) || json_array_size(data) == 1) entry = e;
        }
    } else {
        entry = root;
    }
    json_t *dgs = json_object_get(root, "default_generation_settings"); /* llama.cpp /props */
    json_t *where[] = {entry, dgs};
    for (size_t w = 0; w < 2; w++)
        for (size_t k = 0; where[w] && k < sizeof names / sizeof *names; k++) {
            long v = json_long(where[w], names[k]);
            if (v > 0) return v;
        }
    return 0;
}

long kf_llm_server_context(kf_llm *l, char *how, size_t cap) {
    if (how && cap) how[0] = 0;
    if (l->proto != KF_LLM_OPENAI) return 0;
    kf_llm_config c = l->c;
    c.max_retries = 0;
    c.retry_timeouts = 0;
    c.timeout_s = c.timeout_s < 10 ? c.timeout_s : 10;
    c.max_reply_bytes = (size_t)1 << 20;
    size_t n = strlen(c.url);
    while (n > 0 && c.url[n - 1] == '/') n--;
    char urls[2][700];
    snprintf(urls[0], sizeof urls[0], "%.*s/models", (int)n, c.url);
    /* llama.cpp serves /props at its root, beside /v1 */
    size_t root = n;
    if (root >= 3 && !strncmp(c.url + root - 3, "/v1", 3)) root -= 3;
    snprintf(urls[1], sizeof urls[1], "%.*s/props", (int)root, c.url);
    long window = 0;
    char *hdr[4];
    int nh = kf_llm_request_headers(&c, l->proto, hdr);
    for (int u = 0; u < 2 && !window; u++) {
        kf_http_result res;
        kf_error e = {0};
        if (kf_llm_http_post(l->curl, &c, urls[u], (const char *const *)hdr, nh, NULL, &res, &e) == KF_OK &&
            res.status == 200) {
            json_t *j = json_loadb(res.body, res.len, 0, NULL);
            window = window_in(j, c.model);
            json_decref(j);
            if (window && how) snprintf(how, cap, "GET %s", u == 0 ? "/models" : "/props");
        }
        kf_http_result_free(&res);
    }
    for (int i = 0; i < nh; i++) {
        memset(hdr[i], 0, strlen(hdr[i]));
        free(hdr[i]);
    }
    memset(c.key, 0, sizeof c.key);
    return window;
}
