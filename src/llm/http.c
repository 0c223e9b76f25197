/*
 * One JSON POST over libcurl with the failure handling a network service needs: a timeout
 * per attempt and for the connect, a cap on the body (checked on Content-Length and again
 * while the body streams in, so a server that sends no length cannot make us buffer more),
 * and retries with exponential backoff on 429, 5xx and transport errors, honouring a
 * Retry-After header (seconds or an HTTP date). Redirects are not followed, so the key is
 * never sent to a host other than the configured one.
 *
 * libcurl's global state is set up once per process (pthread_once) on the first client;
 * curl_global_cleanup is deliberately never called: other code in the process may still use
 * curl, and what curl_global_init allocates stays reachable from globals, so LeakSanitizer
 * does not count it.
 */
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "kforge/core.h"
#include "kforge/llm.h"
#include "llm_int.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init_once(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

void *kf_llm_http_handle_new(void) {
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK) return NULL;
    return curl_easy_init();
}

void kf_llm_http_handle_free(void *handle) {
    if (handle) curl_easy_cleanup((CURL *)handle);
}

void kf_http_result_free(kf_http_result *res) {
    free(res->body);
    res->body = NULL;
    res->len = 0;
}

/* ---- callbacks ---- */

typedef struct sink {
    kf_buf body;
    size_t cap;
    int over;              /* the body went past cap: the transfer was aborted */
    double retry_after_s;  /* from the last response's Retry-After; < 0 when none */
} sink;

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
    sink *s = ud;
    size_t k = size * n;
    if (k > s->cap || s->body.len > s->cap - k) {
        s->over = 1;
        return 0; /* anything but k aborts the transfer with CURLE_WRITE_ERROR */
    }
    kf_buf_putn(&s->body, p, k);
    return k;
}

/* Retry-After: delta seconds (a fraction is tolerated) or an HTTP date. */
static double parse_retry_after(const char *v) {
    char *end;
    double x = strtod(v, &end);
    while (*end == ' ' || *end == '\t') end++;
    if (end != v && !*end && x >= 0 && isfinite(x)) return x;
    time_t t = curl_getdate(v, NULL);
    if (t == (time_t)-1) return -1;
    double d = difftime(t, time(NULL));
    return d > 0 ? d : 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
    sink *s = ud;
    size_t k = size * n;
    if (k >= 5 && !strncasecmp(p, "HTTP/", 5)) {
        s->retry_after_s = -1; /* a new response (after a 100 Continue, say) */
    } else if (k > 12 && !strncasecmp(p, "retry-after:", 12)) {
        char v[128];
        size_t i = 12, m = 0;
        while (i < k && (p[i] == ' ' || p[i] == '\t')) i++;
        while (i < k && p[i] != '\r' && p[i] != '\n' && m + 1 < sizeof v) v[m++] = p[i++];
        v[m] = 0;
        s->retry_after_s = parse_retry_after(v);
    }
    return k;
}

/* ---- retry policy ---- */

static int transport_retryable(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0; /* a bad URL, an unresolvable host, a bad certificate, the size cap */
    }
}

static int status_retryable(long status) { return status == 429 || (status >= 500 && status <= 599); }

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static double backoff_wait(const kf_llm_config *c, int retry, double retry_after_s) {
    if (retry_after_s >= 0) return retry_after_s < 120 ? retry_after_s : 120;
    double w = c->backoff_s > 0 ? c->backoff_s : 0;
    for (int i = 1; i < retry && w < 60; i++) w *= 2;
    return w < 60 ? w : 60;
}

/* ---- the request ---- */

static CURLcode setup(CURL *h, const kf_llm_config *c, const char *url, struct curl_slist *hdrs,
                      const char *body, sink *s, char *errbuf) {
    CURLcode rc = CURLE_OK;
#define SET(opt, val) \
    if (rc == CURLE_OK) rc = curl_easy_setopt(h, opt, val)
    SET(CURLOPT_URL, url);
    if (body) {
        SET(CURLOPT_POST, 1L);
        SET(CURLOPT_POSTFIELDS, body);
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    } else {
        SET(CURLOPT_HTTPGET, 1L);
    }
    SET(CURLOPT_HTTPHEADER, hdrs);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, s);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, s);
    SET(CURLOPT_ERRORBUFFER, errbuf);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_TIMEOUT_MS, (long)fmax(1, ceil(c->timeout_s * 1000)));
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)fmax(1, ceil(c->connect_timeout_s * 1000)));
    SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)c->max_reply_bytes);
    SET(CURLOPT_ACCEPT_ENCODING, "");
    SET(CURLOPT_USERAGENT, "kforge-llm/1");
    SET(CURLOPT_TCP_KEEPALIVE, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
#else
    SET(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
#undef SET
    return rc;
}

/* The words for a transport failure, for the message. */
static void describe(CURLcode rc, const kf_llm_config *c, const sink *s, const char *errbuf,
                     char *out, size_t cap) {
    if (s->over || rc == CURLE_FILESIZE_EXCEEDED) {
        snprintf(out, cap, "the reply is over the size cap (max_reply_bytes = %zu)",
                 c->max_reply_bytes);
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        if (strstr(errbuf, "Connection timed out") || strstr(errbuf, "Resolving timed out"))
            snprintf(out, cap, "connection timed out (connect_timeout_s = %g)",
                     c->connect_timeout_s);
        else if (c->retry_timeouts)
            snprintf(out, cap, "request timed out (timeout_s = %g)", c->timeout_s);
        else
            snprintf(out, cap, "request timed out (timeout_s = %g; not retried: the server may "
                     "still be computing it; --llm-timeout S waits longer, --llm-retry-timeouts "
                     "retries)", c->timeout_s);
    } else if (rc == CURLE_COULDNT_CONNECT) {
        snprintf(out, cap, "cannot connect");
    } else if (rc == CURLE_COULDNT_RESOLVE_HOST) {
        snprintf(out, cap, "cannot resolve the host");
    } else {
        snprintf(out, cap, "transfer failed");
    }
}

kf_status kf_llm_http_post(void *handle, const kf_llm_config *c, const char *url,
                           const char *const *headers, int nheaders, const char *body,
                           kf_http_result *res, kf_error *err) {
    memset(res, 0, sizeof *res);
    CURL *h = handle;
    if (!h) {
        res->body = kf_strdup("");
        return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "libcurl could not be initialised");
    }
    struct curl_slist *hdrs = NULL;
    for (int i = 0; i < nheaders; i++) hdrs = curl_slist_append(hdrs, headers[i]);
    /* No "Expect: 100-continue" round trip: servers that ignore it cost a second each. */
    hdrs = curl_slist_append(hdrs, "Expect:");

    sink s = {.cap = c->max_reply_bytes ? c->max_reply_bytes : ((size_t)8 << 20)};
    char errbuf[CURL_ERROR_SIZE];
    CURLcode rc = CURLE_OK;
    kf_status st = KF_OK;
    for (int attempt = 1;; attempt++) {
        kf_buf_free(&s.body);
        s.over = 0;
        s.retry_after_s = -1;
        errbuf[0] = 0;
        curl_easy_reset(h);
        rc = setup(h, c, url, hdrs, body, &s, errbuf);
        if (rc == CURLE_OK) rc = curl_easy_perform(h);
        long status = 0, reqsize = 0;
        char *ctype = NULL;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        if (curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ctype) != CURLE_OK) ctype = NULL;
        snprintf(res->content_type, sizeof res->content_type, "%s", ctype ? ctype : "");
        curl_easy_getinfo(h, CURLINFO_REQUEST_SIZE, &reqsize);
        res->attempts = attempt;
        res->status = rc == CURLE_OK ? status : 0;
        if (status > 0 || reqsize > 0) res->reached = 1;
        int retry = rc == CURLE_OK ? status_retryable(status) : (!s.over && transport_retryable(rc));
        /* a request that timed out after it was sent may still be computing on the server
         * (a local model keeps going): a retry queues behind it, so only when asked */
        int sent_timeout = rc == CURLE_OPERATION_TIMEDOUT && !strstr(errbuf, "Connection timed out") &&
                           !strstr(errbuf, "Resolving timed out");
        if (sent_timeout && !c->retry_timeouts) retry = 0;
        if (!retry || attempt > c->max_retries) break;
        double w = backoff_wait(c, attempt, rc == CURLE_OK ? s.retry_after_s : -1);
        kf_log(2, "kforge: llm: %s (attempt %d): retrying in %.2f s\n",
               rc == CURLE_OK ? "HTTP error" : "transport error", attempt, w);
        sleep_s(w);
        res->waited_s += w;
    }
    if (rc != CURLE_OK) {
        char what[160], detail[CURL_ERROR_SIZE + 8];
        describe(rc, c, &s, errbuf, what, sizeof what);
        kf_llm_quote(errbuf[0] ? errbuf : curl_easy_strerror(rc),
                     strlen(errbuf[0] ? errbuf : curl_easy_strerror(rc)), c->key, detail,
                     sizeof detail);
        char where[600];
        kf_llm_quote(url, strlen(url), c->key, where, sizeof where);
        st = kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0,
                          "LLM request to %s failed: %s, after %d attempt%s (curl: %s)", where,
                          what, res->attempts, res->attempts == 1 ? "" : "s", detail);
    }
    curl_slist_free_all(hdrs);
    res->len = s.body.len;
    res->body = kf_buf_take(&s.body);
    return st;
}
