/*
 * kforge LLM client: chat completions over HTTP (libcurl) for the two protocols that cover
 * nearly every model server, OpenAI-compatible chat completions (hosted APIs, vLLM,
 * llama.cpp's server, Ollama) and the Anthropic messages API; retries with backoff,
 * timeouts, a size cap on replies, token accounting with budgets, and code extraction from
 * replies. It knows nothing about kernels: the agent builds the messages and reads the code.
 *
 * Keys: a config's key is sent only in the request's auth header and never appears in an
 * error message, a log line or a transcript that this module writes (kf_llm_redact scrubs
 * it from any other text).
 *
 * Threads: a client holds one curl handle and its counters, so use a client from one thread
 * at a time (make one per thread). libcurl's global init runs once per process on the first
 * kf_llm_new (pthread_once); curl_global_cleanup is never called (its state stays reachable,
 * so LeakSanitizer is clean, and other code in the process may use curl too).
 */
#ifndef KFORGE_LLM_H
#define KFORGE_LLM_H

#include <stddef.h>

#include "kforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kf_llm_protocol {
    KF_LLM_AUTO = 0,      /* from the URL: "anthropic" in the host or a path ending in
                             /messages -> anthropic, else openai */
    KF_LLM_OPENAI = 1,    /* POST {url}/chat/completions, Authorization: Bearer KEY */
    KF_LLM_ANTHROPIC = 2  /* POST {url}/messages, x-api-key: KEY, anthropic-version */
} kf_llm_protocol;

typedef struct kf_llm_config {
    kf_llm_protocol protocol;
    char url[512];            /* base URL, e.g. https://api.openai.com/v1,
                                 http://127.0.0.1:8080/v1, https://api.anthropic.com/v1;
                                 a URL already ending in /chat/completions or /messages
                                 is used as is */
    char model[128];
    char key[512];            /* may be empty (local servers) */
    double timeout_s;         /* whole request, per attempt (default 300) */
    double connect_timeout_s; /* default 10 */
    int max_retries;          /* extra attempts on 429, 5xx and transport errors (default 4) */
    double backoff_s;         /* first wait (default 1 s), doubled per retry, capped at
                                 60 s; a Retry-After header (seconds) overrides it, capped
                                 at 120 s */
    size_t max_reply_bytes;   /* a response body over this is an error (default 8 MiB) */
    int max_tokens;           /* requested per reply (default 8192; --reply-tokens, config
                                 key max_tokens or reply_tokens) */
    long context_tokens;      /* the model's context window in tokens (0 = unknown: asked of
                                 the server, kf_llm_server_context); the agent fits each
                                 prompt and reply limit into it (--context, key context) */
    int retry_timeouts;       /* retry a request that timed out (default 0: the server may
                                 still be computing it, and a retry queues behind it) */
    double temperature;       /* default 0.2; < 0 = not sent */
    int max_calls;            /* budget: kf_llm_chat calls made, failed ones included (a
                                 refused connection, an HTTP error), the retries within one
                                 call counting once (0 = none) */
    long max_total_tokens;    /* budget: prompt + completion tokens over all calls (0 = none);
                                 checked before each call, so the call that crosses it
                                 completes */
    char origin[64];          /* where url/model/key came from, for messages: "flag",
                                 "environment", "config FILE" (no secrets) */
} kf_llm_config;

/* Defaults (no URL, no model, no key). */
void kf_llm_config_default(kf_llm_config *c);

/* Layer a config file over c: a JSON object with any of "url", "model", "protocol"
 * ("openai" | "anthropic" | "auto"), "api_key", "timeout_s", "connect_timeout_s",
 * "max_retries", "backoff_s", "max_reply_bytes", "max_tokens", "temperature", "max_calls",
 * "max_total_tokens". path NULL = the default ($KFORGE_CONFIG, else
 * $XDG_CONFIG_HOME/kforge/config.json, else ~/.config/kforge/config.json); a missing
 * default file is not an error, a missing named one (path, or $KFORGE_CONFIG) is
 * (KF_ERR_IO). Errors (KF_ERR_PARSE) name the file, the line for bad JSON, and the key at
 * fault, an unknown key included (a typo would otherwise be silently ignored); the file is
 * applied all or nothing. Sets c->origin to "config FILE" when it sets url, model or key. */
kf_status kf_llm_config_file(kf_llm_config *c, const char *path, kf_error *err);

/* Layer the environment over c: KFORGE_LLM_URL, KFORGE_LLM_MODEL, KFORGE_LLM_PROTOCOL, and
 * the key from OPENAI_API_KEY or ANTHROPIC_API_KEY (the one matching the protocol, which is
 * resolved first). Empty variables count as unset; a bad KFORGE_LLM_PROTOCOL is logged and
 * ignored. Sets c->origin to "environment" when it sets url, model or key. Flags are
 * layered last by the caller, by plain assignment. */
void kf_llm_config_env(kf_llm_config *c);

/* The protocol c will use (resolves KF_LLM_AUTO). */
kf_llm_protocol kf_llm_config_protocol(const kf_llm_config *c);

typedef struct kf_llm_msg {
    const char *role;         /* "system", "user" or "assistant" */
    const char *content;
} kf_llm_msg;

typedef struct kf_llm_reply {
    char *text;               /* the assistant's text (owned), "" when the model said nothing */
    char finish[32];          /* the server's stop reason as sent ("stop", "length",
                                 "end_turn", "max_tokens", ...) */
    int truncated;            /* the reply was cut off by the token limit */
    long prompt_tokens;       /* as the server counted them (0 when it did not say) */
    long completion_tokens;
    int http_status;          /* of the last attempt */
    int attempts;             /* 1 + retries */
    double seconds;           /* wall time, waits included */
    int context_exceeded;     /* the server refused the request as longer than its context
                                 window (a configuration error: retrying cannot help) */
    long ctx_window, ctx_prompt, ctx_reply; /* what the refusal said (0 when it did not say):
                                 the window, the prompt's tokens, the reply limit asked */
    int max_tokens;           /* the reply limit sent */
    double temperature;       /* the temperature sent (< 0: none sent) */
} kf_llm_reply;

/* Per-call overrides of the config (kf_llm_chat_with). */
typedef struct kf_llm_params {
    int max_tokens;           /* > 0: the reply limit for this call, else the config's */
    int set_temperature;      /* 1: send temperature instead of the config's */
    double temperature;
} kf_llm_params;

typedef struct kf_llm kf_llm;

/* A client for c (copied). KF_ERR_ARG when the URL or model is missing, naming the flag
 * (--llm-url, --model), variable and config key that set them; also for a URL that is not
 * http(s), a key holding a space or control character (never quoted), or a timeout <= 0.
 * KF_ERR_RUNTIME when libcurl cannot be initialised. */
kf_status kf_llm_new(const kf_llm_config *c, kf_llm **out, kf_error *err);

/* One chat call: msgs in order (a "system" message goes where the protocol wants it).
 * Returns KF_OK with r filled (free with kf_llm_reply_free), or:
 *   KF_ERR_UNSUPPORTED  a budget is spent (max_calls / max_total_tokens): no request sent;
 *   KF_ERR_RUNTIME      the server failed: HTTP status (after the retries, for 429/5xx),
 *                       timeout, connection error, reply over the size cap, or a body
 *                       that is not the protocol's JSON (the message names its
 *                       Content-Type and quotes its start; JSON's \u0000 is accepted);
 *   KF_ERR_ARG          bad messages.
 * r->attempts, r->http_status (0 when no response came) and r->seconds are set on failure
 * too; r->text is NULL then (kf_llm_reply_free is still safe). Retried: 429, 5xx and
 * transport errors (timeouts and refused connections included); not retried: other 4xx,
 * the size cap, a bad URL or an unresolvable host. */
kf_status kf_llm_chat(kf_llm *l, const kf_llm_msg *msgs, int nmsgs, kf_llm_reply *r, kf_error *err);

/* kf_llm_chat with per-call overrides (p may be NULL). A request the server refuses as
 * longer than its context window (HTTP 400/413 saying so: "maximum context length",
 * context_length_exceeded, "prompt is too long", llama.cpp's exceed_context_size_error) is
 * KF_ERR_RUNTIME with r->context_exceeded set and a message that leads with the window,
 * the prompt's size and the reply limit, and names --context and --reply-tokens. A request
 * that timed out is not retried unless c->retry_timeouts (the server may still be
 * computing it); a connect timeout is. */
kf_status kf_llm_chat_with(kf_llm *l, const kf_llm_msg *msgs, int nmsgs, const kf_llm_params *p,
                           kf_llm_reply *r, kf_error *err);

/* KF_ERR_UNSUPPORTED (with the message kf_llm_chat would give) when a budget is spent, so
 * a caller can stop before announcing a call it will not make; else KF_OK. */
kf_status kf_llm_budget_left(const kf_llm *l, kf_error *err);

/* The context window the server reports for the model, in tokens, or 0 when it does not
 * say (or is not asked: the Anthropic protocol). OpenAI-compatible servers are asked
 * GET {url}/models (max_model_len, context_length, context_window, n_ctx of the model's
 * entry: vLLM, LM Studio, gateways) and then GET {root}/props (llama.cpp's llama-server:
 * n_ctx); how names where it came from. Never counts as a call; never an error. */
long kf_llm_server_context(kf_llm *l, char *how, size_t cap);

/* Calls made (failed ones included: max_calls counts them) and the tokens counted so far. */
void kf_llm_usage(const kf_llm *l, int *calls, long *prompt_tokens, long *completion_tokens);

void kf_llm_reply_free(kf_llm_reply *r);
void kf_llm_free(kf_llm *l);

/* Replace every occurrence of the client's key in s (in place) with "[key]"; a key shorter
 * than that mark is overwritten with '*' instead, so s never grows. */
void kf_llm_redact(const kf_llm *l, char *s);

/* Code extraction from a reply. Picks the fenced block (``` or ~~~, with or without a
 * language tag) that holds the kernel: the last block tagged with one of `langs` (a
 * comma-separated list such as "c,cpp" or "cuda,cu,cpp,c++"), else the longest block,
 * else, when the reply has no fence but looks like code throughout, the whole reply.
 * Returns KF_OK and a malloc'd copy in *code; KF_ERR_PARSE with a one-line reason the
 * model can act on ("the reply has no code block", "the code block is not closed: the
 * reply was cut off") when there is none. */
kf_status kf_llm_extract_code(const char *reply, const char *langs, char **code, kf_error *err);

#ifdef __cplusplus
}
#endif
#endif
