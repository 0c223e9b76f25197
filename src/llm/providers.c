/*
 * The two chat protocols' wire formats: the request body and headers, the reply's text,
 * stop reason and token counts, and the server's error message for quoting. Both speak
 * JSON over one POST:
 *
 *   OpenAI chat completions  {model, messages[{role, content}], max_tokens, temperature}
 *                            -> choices[0].message.content, choices[0].finish_reason,
 *                               usage.prompt_tokens / completion_tokens
 *   Anthropic messages       {model, system, messages[{role, content}], max_tokens, ...}
 *                            -> content[] text blocks (joined), stop_reason,
 *                               usage.input_tokens (+ cache tokens) / output_tokens
 *
 * Text quoted from a server into a message is flattened to one line, cut short and scrubbed
 * of the key (servers do echo keys back in their errors).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/core.h"
#include "kforge/llm.h"
#include "llm_int.h"

/* ---- redaction and quoting ---- */

void kf_llm_redact_key(const char *key, char *s) {
    size_t k = key ? strlen(key) : 0;
    if (!k || !s) return;
    static const char mark[] = "[key]";
    size_t m = sizeof mark - 1;
    for (char *p = strstr(s, key); p; p = strstr(p, key)) {
        if (k >= m) {
            /* Shrinks (or keeps) the text, so in place is safe. */
            memcpy(p, mark, m);
            memmove(p + m, p + k, strlen(p + k) + 1);
            p += m;
        } else {
            /* A key shorter than the mark: mask it in place, length kept. */
            memset(p, '*', k);
            p += k;
        }
    }
}

/* n, or less so that s[0..n) does not end inside a UTF-8 character. */
static size_t utf8_whole(const char *s, size_t n) {
    size_t i = n;
    int cont = 0;
    while (i > 0 && cont < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, cont++;
    if (i == 0) return n;
    unsigned char lead = (unsigned char)s[i - 1];
    int need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return need == 1 || cont + 1 >= need ? n : i - 1;
}

void kf_llm_quote(const char *text, size_t len, const char *key, char *out, size_t cap) {
    if (!cap) return;
    size_t k = key ? strlen(key) : 0;
    /* Every key occurrence starting inside what can be shown lies wholly in this prefix. */
    size_t take = len < cap + k ? len : cap + k;
    char *tmp = kf_malloc(take + 1);
    memcpy(tmp, text, take);
    tmp[take] = 0;
    for (size_t i = 0; i < take; i++)
        if (!tmp[i]) tmp[i] = ' '; /* an embedded NUL would hide the rest from redaction */
    kf_llm_redact_key(key, tmp);
    size_t n = 0, i = 0;
    int space = 0, cut = 0;
    for (; tmp[i]; i++) {
        unsigned char ch = (unsigned char)tmp[i];
        if (ch < 0x20 || ch == 0x7f) ch = ' ';
        if (ch == ' ' && (space || n == 0)) continue;
        space = ch == ' ';
        if (n + 1 >= cap) {
            cut = 1;
            break;
        }
        out[n++] = (char)ch;
    }
    if (len > take) cut = 1;
    if (cut && cap > 4) {
        n = utf8_whole(out, n < cap - 4 ? n : cap - 4);
        memcpy(out + n, "...", 3);
        n += 3;
    }
    while (n > 0 && out[n - 1] == ' ' && !cut) n--;
    out[n] = 0;
    free(tmp);
}

void kf_llm_quote_error_body(const char *body, size_t len, const char *key, char *out,
                             size_t cap) {
    if (!len) {
        snprintf(out, cap, "(empty body)");
        return;
    }
    json_t *root = json_loadb(body, len, JSON_ALLOW_NUL, NULL);
    const char *msg = NULL;
    if (json_is_object(root)) {
        json_t *e = json_object_get(root, "error");
        if (json_is_object(e)) msg = json_string_value(json_object_get(e, "message"));
        else if (json_is_string(e)) msg = json_string_value(e);
        if (!msg) msg = json_string_value(json_object_get(root, "message"));
        if (!msg) msg = json_string_value(json_object_get(root, "detail"));
    }
    if (msg) {
        size_t n = strlen(msg);
        char *tmp = kf_malloc(cap + 3);
        tmp[0] = '"';
        kf_llm_quote(msg, n, key, tmp + 1, cap > 2 ? cap - 2 : 1);
        strcat(tmp, "\"");
        snprintf(out, cap, "%s", tmp);
        free(tmp);
    } else {
        char *tmp = kf_malloc(cap + 3);
        kf_llm_quote(body, len, key, tmp, cap > 2 ? cap - 2 : 1);
        snprintf(out, cap, "'%s'", tmp);
        free(tmp);
    }
    json_decref(root);
}

/* ---- request ---- */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when it is not one (overlong forms,
 * surrogates and code points past U+10FFFF included, as jansson rejects them). */
static int utf8_len(const unsigned char *s) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (!n || c > 0xF4) return 0;
    unsigned cp = c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    return n;
}

/* A JSON string for text, with any invalid UTF-8 byte (compiler output can hold them)
 * replaced by U+FFFD rather than failing the whole request. */
static json_t *json_text(const char *text) {
    json_t *j = json_string(text);
    if (j) return j;
    kf_buf b = {0};
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        int n = utf8_len(p);
        if (n) kf_buf_putn(&b, (const char *)p, (size_t)n), p += n;
        else kf_buf_puts(&b, "\xEF\xBF\xBD"), p++;
    }
    j = json_string(b.data ? b.data : "");
    kf_buf_free(&b);
    return j;
}

static json_t *message(const char *role, const char *content) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", json_text(content));
    return m;
}

kf_status kf_llm_request_json(const kf_llm_config *c, kf_llm_protocol p, const kf_llm_msg *msgs,
                              int nmsgs, char **out, kf_error *err) {
    *out = NULL;
    if (!msgs || nmsgs <= 0)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "LLM chat: no messages");
    int nonsystem = 0;
    for (int i = 0; i < nmsgs; i++) {
        const char *r = msgs[i].role;
        if (!r || !msgs[i].content)
            return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                                "LLM chat: message %d has no %s", i, r ? "content" : "role");
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
            return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                                "LLM chat: message %d has role '%.32s', not system, user or "
                                "assistant", i, r);
        nonsystem += strcmp(r, "system") != 0;
    }
    if (!nonsystem)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "LLM chat: only system messages (a user message is needed)");

    json_t *root = json_object();
    json_object_set_new(root, "model", json_string(c->model));
    json_object_set_new(root, "max_tokens", json_integer(c->max_tokens > 0 ? c->max_tokens : 8192));
    if (c->temperature >= 0) json_object_set_new(root, "temperature", json_real(c->temperature));
    json_t *arr = json_array();
    if (p == KF_LLM_ANTHROPIC) {
        /* The messages API takes the system prompt as a top-level field; several system
         * messages are joined in order. */
        kf_buf sys = {0};
        for (int i = 0; i < nmsgs; i++) {
            if (strcmp(msgs[i].role, "system")) {
                json_array_append_new(arr, message(msgs[i].role, msgs[i].content));
                continue;
            }
            if (sys.len) kf_buf_puts(&sys, "\n\n");
            kf_buf_puts(&sys, msgs[i].content);
        }
        if (sys.len) json_object_set_new(root, "system", json_text(sys.data));
        kf_buf_free(&sys);
    } else {
        for (int i = 0; i < nmsgs; i++)
            json_array_append_new(arr, message(msgs[i].role, msgs[i].content));
    }
    json_object_set_new(root, "messages", arr);
    *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!*out) return kf_error_set(err, KF_ERR_INTERNAL, NULL, 0, 0, "LLM chat: cannot encode");
    return KF_OK;
}

static char *line(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 1;
    char *s = kf_malloc(n);
    snprintf(s, n, "%s%s", a, b);
    return s;
}

int kf_llm_request_headers(const kf_llm_config *c, kf_llm_protocol p, char *lines[4]) {
    int n = 0;
    lines[n++] = line("Content-Type: application/json", "");
    if (p == KF_LLM_ANTHROPIC) {
        if (c->key[0]) lines[n++] = line("x-api-key: ", c->key);
        lines[n++] = line("anthropic-version: ", "2023-06-01");
    } else if (c->key[0]) {
        lines[n++] = line("Authorization: Bearer ", c->key);
    }
    return n;
}

/* ---- reply ---- */

static long count(json_t *usage, const char *name) {
    json_t *v = json_object_get(usage, name);
    return json_is_integer(v) && json_integer_value(v) > 0 ? (long)json_integer_value(v) : 0;
}

/* A JSON string's whole text (\u0000 included, which JSON allows), each NUL as U+FFFD so
 * that what follows it is not lost to a C string's end. */
static void put_string(kf_buf *b, json_t *s) {
    const char *t = json_string_value(s);
    size_t n = json_string_length(s);
    for (size_t i = 0; i < n; i++) {
        size_t j = i;
        while (j < n && t[j]) j++;
        kf_buf_putn(b, t + i, j - i);
        if (j < n) kf_buf_puts(b, "\xEF\xBF\xBD");
        i = j;
    }
}

/* Concatenate the text of an array of blocks ({"type": "text", "text": ...}); other block
 * kinds (thinking, tool use, images) are not the reply's text. */
static void join_text_blocks(json_t *arr, kf_buf *b) {
    size_t i;
    json_t *blk;
    json_array_foreach(arr, i, blk) {
        const char *type = json_string_value(json_object_get(blk, "type"));
        json_t *t = json_object_get(blk, "text");
        if (json_is_string(t) && (!type || !strcmp(type, "text"))) put_string(b, t);
    }
}

static kf_status wrong_shape(const char *url, const char *what, const char *body, size_t len,
                             const char *key, kf_error *err) {
    char q[300], where[600];
    kf_llm_quote(body, len, key, q, sizeof q);
    kf_llm_quote(url, strlen(url), key, where, sizeof where);
    return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "the reply from %s is %s; it starts '%s'",
                        where, what, q);
}

kf_status kf_llm_parse_reply(kf_llm_protocol p, const char *url, const char *content_type,
                             const char *body, size_t len, const char *key, kf_llm_reply *r,
                             kf_error *err) {
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_ALLOW_NUL, &je);
    if (!root) {
        /* what came instead, by its content type: an HTML page is a proxy's or a web UI's,
         * not the API (a url without its /v1, a login page, a gateway error) */
        char what[400], ct[140];
        const char *c = content_type && content_type[0] ? content_type : NULL;
        kf_llm_quote(c ? c : "", c ? strlen(c) : 0, key, ct, sizeof ct);
        size_t i = 0;
        while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n')) i++;
        int html = (c && strstr(c, "html")) || (i < len && body[i] == '<');
        if (!len)
            snprintf(what, sizeof what, "empty (no JSON; Content-Type %s)", c ? ct : "none");
        else if (html)
            snprintf(what, sizeof what, "not JSON but an HTML page (Content-Type %s; check the url: an API's "
                     "base usually ends in /v1)", c ? ct : "none");
        else
            snprintf(what, sizeof what, "not JSON (Content-Type %s; %s at byte %d)", c ? ct : "none", je.text,
                     je.position);
        return wrong_shape(url, what, body, len, key, err);
    }
    kf_status s = KF_OK;
    kf_buf text = {0};
    const char *finish = NULL;
    json_t *usage = json_object_get(root, "usage");
    if (json_is_object(root) && json_object_get(root, "error") &&
        !json_object_get(root, p == KF_LLM_ANTHROPIC ? "content" : "choices")) {
        /* Some gateways send an error with status 200. */
        char q[400], where[600];
        kf_llm_quote_error_body(body, len, key, q, sizeof q);
        kf_llm_quote(url, strlen(url), key, where, sizeof where);
        s = kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "the server at %s answered an error: %s",
                         where, q);
    } else if (p == KF_LLM_ANTHROPIC) {
        json_t *content = json_object_get(root, "content");
        if (!json_is_array(content))
            s = wrong_shape(url, "not an Anthropic message (no content[] array)", body, len, key,
                            err);
        else {
            join_text_blocks(content, &text);
            finish = json_string_value(json_object_get(root, "stop_reason"));
            r->prompt_tokens = count(usage, "input_tokens") +
                               count(usage, "cache_creation_input_tokens") +
                               count(usage, "cache_read_input_tokens");
            r->completion_tokens = count(usage, "output_tokens");
            r->truncated = finish && !strcmp(finish, "max_tokens");
        }
    } else {
        json_t *ch = json_array_get(json_object_get(root, "choices"), 0);
        json_t *msg = json_object_get(ch, "message");
        json_t *content = json_object_get(msg, "content");
        if (!json_is_object(msg))
            s = wrong_shape(url, "not an OpenAI chat completion (no choices[0].message)", body,
                            len, key, err);
        else if (content && !json_is_string(content) && !json_is_array(content) &&
                 !json_is_null(content))
            s = wrong_shape(url, "not an OpenAI chat completion (choices[0].message.content "
                            "is not text)", body, len, key, err);
        else {
            if (json_is_string(content)) put_string(&text, content);
            else if (json_is_array(content)) join_text_blocks(content, &text);
            finish = json_string_value(json_object_get(ch, "finish_reason"));
            r->prompt_tokens = count(usage, "prompt_tokens");
            r->completion_tokens = count(usage, "completion_tokens");
            r->truncated = finish && !strcmp(finish, "length");
        }
    }
    if (s == KF_OK) {
        snprintf(r->finish, sizeof r->finish, "%s", finish ? finish : "");
        r->text = kf_buf_take(&text);
    } else {
        kf_buf_free(&text);
        r->prompt_tokens = r->completion_tokens = 0;
    }
    json_decref(root);
    return s;
}
