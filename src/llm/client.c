/*
 * The LLM client's public calls: a client holds a copy of its config, the resolved
 * protocol and endpoint, one reusable curl handle (so a client is not for concurrent use
 * from several threads; make one per thread) and the usage counters that the budgets are
 * checked against before each call. Every error message leaves through kf_llm_redact_key.
 */
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

kf_status kf_llm_chat(kf_llm *l, const kf_llm_msg *msgs, int nmsgs, kf_llm_reply *r,
                      kf_error *err) {
    memset(r, 0, sizeof *r);
    double t0 = kf_now();
    kf_status s = budget_check(l, err);
    if (s) return s;
    char *body = NULL;
    if ((s = kf_llm_request_json(&l->c, l->proto, msgs, nmsgs, &body, err))) return s;

    char *hdr[4];
    int nh = kf_llm_request_headers(&l->c, l->proto, hdr);
    kf_http_result res;
    s = kf_llm_http_post(l->curl, &l->c, l->endpoint, (const char *const *)hdr, nh, body, &res,
                         err);
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
    if (s == KF_OK && (res.status < 200 || res.status > 299)) s = http_error(l, &res, err);
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
