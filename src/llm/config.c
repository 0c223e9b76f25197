/*
 * LLM client configuration: defaults, the config file (JSON), the environment, and the
 * protocol resolution. Layers are applied in the order file < environment < flags (the
 * caller assigns flags last), each layer overriding only what it sets. A config file is
 * applied all or nothing: a bad key leaves c as it was.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kforge/core.h"
#include "kforge/llm.h"
#include "llm_int.h"

void kf_llm_config_default(kf_llm_config *c) {
    memset(c, 0, sizeof *c);
    c->protocol = KF_LLM_AUTO;
    c->timeout_s = 300;
    c->connect_timeout_s = 10;
    c->max_retries = 4;
    c->backoff_s = 1;
    c->max_reply_bytes = (size_t)8 << 20;
    c->max_tokens = 8192;
    c->temperature = 0.2;
}

static int parse_protocol(const char *s, kf_llm_protocol *p) {
    if (!strcasecmp(s, "openai")) *p = KF_LLM_OPENAI;
    else if (!strcasecmp(s, "anthropic")) *p = KF_LLM_ANTHROPIC;
    else if (!strcasecmp(s, "auto") || !*s) *p = KF_LLM_AUTO;
    else return 0;
    return 1;
}

/* The host part of url (after "scheme://", up to the next '/'), into out. */
static void url_host(const char *url, char *out, size_t cap) {
    const char *h = strstr(url, "://");
    h = h ? h + 3 : url;
    size_t n = strcspn(h, "/?#");
    if (n >= cap) n = cap - 1;
    memcpy(out, h, n);
    out[n] = 0;
}

static int ends_with(const char *s, size_t n, const char *tail) {
    size_t t = strlen(tail);
    return n >= t && !memcmp(s + n - t, tail, t);
}

kf_llm_protocol kf_llm_config_protocol(const kf_llm_config *c) {
    if (c->protocol == KF_LLM_OPENAI || c->protocol == KF_LLM_ANTHROPIC) return c->protocol;
    char host[512];
    url_host(c->url, host, sizeof host);
    if (strcasestr(host, "anthropic")) return KF_LLM_ANTHROPIC;
    size_t n = strcspn(c->url, "?#");
    while (n > 0 && c->url[n - 1] == '/') n--;
    if (ends_with(c->url, n, "/messages")) return KF_LLM_ANTHROPIC;
    return KF_LLM_OPENAI;
}

void kf_llm_endpoint(const kf_llm_config *c, kf_llm_protocol p, char *out, size_t cap) {
    size_t n = strlen(c->url);
    while (n > 0 && c->url[n - 1] == '/') n--;
    const char *tail = p == KF_LLM_ANTHROPIC ? "/messages" : "/chat/completions";
    if (ends_with(c->url, n, tail)) tail = "";
    snprintf(out, cap, "%.*s%s", (int)n, c->url, tail);
}

/* ---- config file ---- */

/* Where the default config file is: $KFORGE_CONFIG, else $XDG_CONFIG_HOME/kforge/config.json,
 * else ~/.config/kforge/config.json. 0 when no home is known. */
static int default_path(char *out, size_t cap) {
    const char *e = getenv("KFORGE_CONFIG");
    if (e && *e) return snprintf(out, cap, "%s", e), 1;
    e = getenv("XDG_CONFIG_HOME");
    if (e && *e) return snprintf(out, cap, "%s/kforge/config.json", e), 1;
    e = getenv("HOME");
    if (e && *e) return snprintf(out, cap, "%s/.config/kforge/config.json", e), 1;
    return 0;
}

static kf_status bad_key(kf_error *err, const char *path, const char *key, const char *want) {
    return kf_error_set(err, KF_ERR_PARSE, path, 0, 0, "config key \"%s\": %s", key, want);
}

static kf_status get_string(json_t *v, const char *path, const char *key, char *dst, size_t cap,
                            kf_error *err) {
    if (!json_is_string(v)) return bad_key(err, path, key, "want a string");
    const char *s = json_string_value(v);
    if (strlen(s) >= cap) {
        char want[64];
        snprintf(want, sizeof want, "too long (at most %zu bytes)", cap - 1);
        return bad_key(err, path, key, want);
    }
    memcpy(dst, s, strlen(s) + 1);
    return KF_OK;
}

static kf_status get_number(json_t *v, const char *path, const char *key, double lo, double *dst,
                            kf_error *err) {
    if (!json_is_number(v)) return bad_key(err, path, key, "want a number");
    double x = json_number_value(v);
    if (!(x >= lo)) {
        char want[64];
        snprintf(want, sizeof want, "want a number >= %g, not %g", lo, x);
        return bad_key(err, path, key, want);
    }
    *dst = x;
    return KF_OK;
}

static kf_status get_int(json_t *v, const char *path, const char *key, long lo, long *dst,
                         kf_error *err) {
    if (!json_is_integer(v)) return bad_key(err, path, key, "want an integer");
    json_int_t x = json_integer_value(v);
    if (x < lo || x > 1000000000000LL) {
        char want[96];
        snprintf(want, sizeof want, "want an integer >= %ld, not %lld", lo, (long long)x);
        return bad_key(err, path, key, want);
    }
    *dst = (long)x;
    return KF_OK;
}

/* Apply one key of the file's object to c. */
static kf_status apply_key(kf_llm_config *c, const char *path, const char *key, json_t *v,
                           kf_error *err) {
    double d = 0;
    long i = 0;
    kf_status s;
    if (!strcmp(key, "url")) return get_string(v, path, key, c->url, sizeof c->url, err);
    if (!strcmp(key, "model")) return get_string(v, path, key, c->model, sizeof c->model, err);
    if (!strcmp(key, "api_key")) return get_string(v, path, key, c->key, sizeof c->key, err);
    if (!strcmp(key, "protocol")) {
        if (!json_is_string(v) || !parse_protocol(json_string_value(v), &c->protocol))
            return bad_key(err, path, key, "want \"openai\", \"anthropic\" or \"auto\"");
        return KF_OK;
    }
    if (!strcmp(key, "timeout_s") || !strcmp(key, "connect_timeout_s") ||
        !strcmp(key, "backoff_s")) {
        if ((s = get_number(v, path, key, 0, &d, err))) return s;
        if (d <= 0 && strcmp(key, "backoff_s"))
            return bad_key(err, path, key, "want a number > 0");
        if (!strcmp(key, "timeout_s")) c->timeout_s = d;
        else if (!strcmp(key, "connect_timeout_s")) c->connect_timeout_s = d;
        else c->backoff_s = d;
        return KF_OK;
    }
    if (!strcmp(key, "temperature")) {
        if (!json_is_number(v)) return bad_key(err, path, key, "want a number (< 0: not sent)");
        c->temperature = json_number_value(v);
        return KF_OK;
    }
    if (!strcmp(key, "max_retries")) {
        if ((s = get_int(v, path, key, 0, &i, err))) return s;
        if (i > 100) return bad_key(err, path, key, "want an integer <= 100");
        c->max_retries = (int)i;
        return KF_OK;
    }
    if (!strcmp(key, "retry_timeouts")) {
        if (!json_is_boolean(v)) return bad_key(err, path, key, "want true or false");
        c->retry_timeouts = json_is_true(v);
        return KF_OK;
    }
    if (!strcmp(key, "context")) {
        if ((s = get_int(v, path, key, 0, &i, err))) return s;
        if (i > 100000000) return bad_key(err, path, key, "want an integer <= 100000000");
        c->context_tokens = i;
        return KF_OK;
    }
    if (!strcmp(key, "max_tokens") || !strcmp(key, "reply_tokens")) {
        if ((s = get_int(v, path, key, 1, &i, err))) return s;
        if (i > 100000000) return bad_key(err, path, key, "want an integer <= 100000000");
        c->max_tokens = (int)i;
        return KF_OK;
    }
    if (!strcmp(key, "max_calls")) {
        if ((s = get_int(v, path, key, 0, &i, err))) return s;
        if (i > 1000000000) return bad_key(err, path, key, "want an integer <= 1000000000");
        c->max_calls = (int)i;
        return KF_OK;
    }
    if (!strcmp(key, "max_total_tokens")) {
        if ((s = get_int(v, path, key, 0, &i, err))) return s;
        c->max_total_tokens = i;
        return KF_OK;
    }
    if (!strcmp(key, "max_reply_bytes")) {
        if ((s = get_int(v, path, key, 1, &i, err))) return s;
        c->max_reply_bytes = (size_t)i;
        return KF_OK;
    }
    return bad_key(err, path, key,
                   "unknown (known: url, model, protocol, api_key, timeout_s, "
                   "connect_timeout_s, max_retries, retry_timeouts, backoff_s, max_reply_bytes, "
                   "max_tokens (or reply_tokens), context, temperature, max_calls, "
                   "max_total_tokens)");
}

kf_status kf_llm_config_file(kf_llm_config *c, const char *path, kf_error *err) {
    char def[1024];
    int named = path != NULL;
    if (!path) {
        if (!default_path(def, sizeof def)) return KF_OK;
        path = def;
        /* $KFORGE_CONFIG names a file on purpose: missing is an error there too. */
        const char *e = getenv("KFORGE_CONFIG");
        named = e && *e;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (!named) return KF_OK;
        return kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot open the LLM config file");
    }
    fclose(f);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return kf_error_set(err, KF_ERR_PARSE, path, je.line > 0 ? je.line : 0,
                            je.column > 0 ? je.column : 0, "LLM config is not valid JSON: %s",
                            je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return kf_error_set(err, KF_ERR_PARSE, path, 0, 0,
                            "LLM config must be a JSON object ({\"url\": ..., \"model\": ...})");
    }
    kf_llm_config next = *c;
    const char *key;
    json_t *v;
    kf_status s = KF_OK;
    int touched = 0;
    json_object_foreach(root, key, v) {
        if ((s = apply_key(&next, path, key, v, err))) break;
        if (!strcmp(key, "url") || !strcmp(key, "model") || !strcmp(key, "api_key")) touched = 1;
    }
    json_decref(root);
    if (s) return s;
    if (touched) {
        /* Keep the file's name short enough for origin; the tail is the useful part. */
        size_t n = strlen(path), room = sizeof next.origin - sizeof "config " - 3;
        if (n <= room) snprintf(next.origin, sizeof next.origin, "config %s", path);
        else snprintf(next.origin, sizeof next.origin, "config ...%s", path + n - room);
    }
    *c = next;
    return KF_OK;
}

/* ---- environment ---- */

static int env_copy(const char *name, char *dst, size_t cap) {
    const char *e = getenv(name);
    if (!e || !*e) return 0;
    if (strlen(e) >= cap) {
        kf_log(1, "kforge: $%s is longer than %zu bytes: ignored\n", name, cap - 1);
        return 0;
    }
    memcpy(dst, e, strlen(e) + 1);
    return 1;
}

void kf_llm_config_env(kf_llm_config *c) {
    int touched = 0;
    touched |= env_copy("KFORGE_LLM_URL", c->url, sizeof c->url);
    touched |= env_copy("KFORGE_LLM_MODEL", c->model, sizeof c->model);
    const char *p = getenv("KFORGE_LLM_PROTOCOL");
    if (p && *p && !parse_protocol(p, &c->protocol))
        kf_log(1, "kforge: $KFORGE_LLM_PROTOCOL='%s' is not openai, anthropic or auto: ignored\n",
               p);
    const char *keyvar =
        kf_llm_config_protocol(c) == KF_LLM_ANTHROPIC ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY";
    touched |= env_copy(keyvar, c->key, sizeof c->key);
    if (touched) snprintf(c->origin, sizeof c->origin, "environment");
}
