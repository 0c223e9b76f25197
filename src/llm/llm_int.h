/*
 * Internals of the LLM client, shared by its files: config.c (defaults, file, environment),
 * http.c (one POST with retries over libcurl), providers.c (the two protocols' JSON) and
 * client.c (the public calls, budgets, redaction). Nothing here is exported.
 */
#ifndef KF_LLM_INT_H
#define KF_LLM_INT_H

#include <stddef.h>

#include "kforge/core.h"
#include "kforge/llm.h"

/* What one kf_llm_http_post came back with, after its retries. */
typedef struct kf_http_result {
    long status;         /* HTTP status of the last attempt; 0 when none came back */
    char *body;          /* the last attempt's body (owned, NUL-terminated, never NULL) */
    size_t len;
    int attempts;        /* requests tried, 1 + retries */
    int reached;         /* some attempt sent its request to the server */
    double waited_s;     /* time spent in backoff waits */
    char content_type[128]; /* the last response's Content-Type ("" when none) */
} kf_http_result;

/* POST body (JSON) to url with the given extra header lines ("Name: value"), retrying on
 * 429, 5xx and transport errors per c (max_retries, backoff_s, Retry-After). Returns KF_OK
 * when an HTTP response came back (any status: the caller judges it), or KF_ERR_RUNTIME
 * for a transport failure (timeout, connection error, reply over c->max_reply_bytes),
 * with the message redacted of c->key. res is filled either way; free with
 * kf_http_result_free. handle is the client's reusable curl handle (void * to keep curl
 * out of this header). */
/* body NULL: a GET instead (the same handling). */
kf_status kf_llm_http_post(void *handle, const kf_llm_config *c, const char *url,
                           const char *const *headers, int nheaders, const char *body,
                           kf_http_result *res, kf_error *err);
void kf_http_result_free(kf_http_result *res);
void *kf_llm_http_handle_new(void);
void kf_llm_http_handle_free(void *handle);

/* The endpoint URL for c's protocol: the base URL with "/chat/completions" or "/messages"
 * appended unless it already ends with it. out holds at least 600 bytes. */
void kf_llm_endpoint(const kf_llm_config *c, kf_llm_protocol p, char *out, size_t cap);

/* The request body for msgs (malloc'd JSON text), or KF_ERR_ARG for bad messages. */
kf_status kf_llm_request_json(const kf_llm_config *c, kf_llm_protocol p, const kf_llm_msg *msgs,
                              int nmsgs, char **out, kf_error *err);

/* The protocol's header lines (auth, version, content type) into lines[] (each owned by
 * the caller; free with free). Returns how many were written (at most 4). */
int kf_llm_request_headers(const kf_llm_config *c, kf_llm_protocol p, char *lines[4]);

/* Parse a 2xx reply body into r (text, finish, truncated, tokens). KF_ERR_RUNTIME when it
 * is not the protocol's JSON, naming content_type (the response's Content-Type, "" or NULL
 * when it had none) and quoting the body's start (redacted with key). JSON's \u0000 is
 * accepted; in the reply's text it becomes U+FFFD (the text is a C string). */
kf_status kf_llm_parse_reply(kf_llm_protocol p, const char *url, const char *content_type,
                             const char *body, size_t len, const char *key, kf_llm_reply *r,
                             kf_error *err);

/* A one-line summary of an error body for messages: the server's own message when the
 * body is {"error":{"message":..}} or a near form, else the body's start; control
 * characters flattened, redacted of key, at most cap-1 bytes. */
void kf_llm_quote_error_body(const char *body, size_t len, const char *key, char *out,
                             size_t cap);

/* Copy at most cap-1 bytes of text[0..len) into out, flattened to one line for quoting in
 * a message: key redacted first (so a key cut at the edge cannot leak a prefix), control
 * characters as spaces, "..." when cut. */
void kf_llm_quote(const char *text, size_t len, const char *key, char *out, size_t cap);

/* Replace key in s in place (see kf_llm_redact); a no-op for an empty key. */
void kf_llm_redact_key(const char *key, char *s);

#endif
