/*
 * kforge core: status codes, the error record every fallible call fills, checked
 * allocation and a growable text buffer. Everything else in kforge builds on these.
 *
 * Convention: a fallible function returns a kf_status (KF_OK == 0) and, on failure,
 * fills the caller's kf_error (which may be NULL) with a message that names the file,
 * line and column where that makes sense. Bugs assert; expected failures return.
 */
#ifndef KFORGE_CORE_H
#define KFORGE_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kf_status {
    KF_OK = 0,
    KF_ERR_ARG,         /* bad argument from the caller */
    KF_ERR_IO,          /* file could not be read or written */
    KF_ERR_PARSE,       /* task text is malformed */
    KF_ERR_TYPE,        /* task is well formed but shapes/dtypes do not fit */
    KF_ERR_UNSUPPORTED, /* valid request that this build cannot do (yet) */
    KF_ERR_COMPILE,     /* candidate did not compile */
    KF_ERR_RUNTIME,     /* a run failed (see the verification record) */
    KF_ERR_NOMEM,       /* allocation failed */
    KF_ERR_INTERNAL     /* kforge itself misbehaved */
} kf_status;

typedef struct kf_error {
    kf_status code;
    char file[256]; /* source file the error refers to, "" if none */
    int line, col;  /* 1-based; 0 when unknown */
    char msg[1024];
} kf_error;

/* Name of a status code, e.g. "parse error". Never NULL. */
const char *kf_status_name(kf_status s);

/* Fill err (if non-NULL) and return code. file may be NULL. */
kf_status kf_error_set(kf_error *err, kf_status code, const char *file, int line, int col,
                       const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Format an error as "file:line:col: error: msg" into buf. */
void kf_error_format(const kf_error *err, char *buf, size_t cap);

/* Checked allocation: abort with a message on out-of-memory (library users who need to
 * recover from OOM can install a hook with kf_set_oom_hook). */
void *kf_malloc(size_t n);
void *kf_calloc(size_t n, size_t size);
void *kf_realloc(void *p, size_t n);
char *kf_strdup(const char *s);
void kf_set_oom_hook(void (*hook)(size_t requested));

/* Growable text buffer. Zero-initialise (kf_buf b = {0};) and kf_buf_free when done. */
typedef struct kf_buf {
    char *data;
    size_t len, cap;
} kf_buf;

void kf_buf_puts(kf_buf *b, const char *s);
void kf_buf_putn(kf_buf *b, const char *s, size_t n);
void kf_buf_printf(kf_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kf_buf_vprintf(kf_buf *b, const char *fmt, va_list ap);
void kf_buf_free(kf_buf *b);
/* Take ownership of the text (never NULL; "" for an empty buffer). */
char *kf_buf_take(kf_buf *b);

/* Read a whole file. Returns KF_OK and a NUL-terminated malloc'd text in *out. */
kf_status kf_read_file(const char *path, char **out, size_t *len, kf_error *err);
/* The same, refusing (KF_ERR_IO, naming the limit) a file of more than max bytes, after
 * reading at most max + 64 KiB of it: /dev/zero or a huge file ends in a message. */
kf_status kf_read_file_max(const char *path, size_t max, char **out, size_t *len,
                           kf_error *err);
/* The /proc/cpuinfo value of the first line whose key is exactly key, into buf ("" when
 * there is none or no /proc/cpuinfo), surrounding blanks removed. */
void kf_cpuinfo_value(const char *key, char *buf, size_t cap);
kf_status kf_write_file(const char *path, const char *data, size_t len, kf_error *err);
/* mkdir -p */
kf_status kf_mkdirs(const char *path, kf_error *err);

/* 64-bit FNV-1a hash, and its 16-hex-digit text form (out must hold 17 bytes). */
uint64_t kf_hash64(const void *data, size_t n, uint64_t seed);
void kf_hash_hex(uint64_t h, char out[17]);

/* Monotonic clock in seconds. */
double kf_now(void);

/* The CPUs this process may run on (its affinity mask; the online CPUs where the mask
 * cannot be read), at least 1. */
int kf_usable_cpus(void);

/* Logging to stderr; level 0 = quiet, 1 = info (default), 2 = debug. */
void kf_log_set_level(int level);
int kf_log_level(void);
void kf_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Runs argv (argv[0] looked up in PATH unless it holds a '/') in a process group of its own
 * with stdin from /dev/null and stdout+stderr captured into out (at most about out_cap
 * bytes kept; out may be NULL), under a wall-clock limit. Returns 0 with the wait status in
 * *wstatus when the program ran to an end; -1 with the reason in why when it could not be
 * started or ran past timeout_s (then its whole group is killed). (src/core/proc.c) */
int kf_run_capture(char *const *argv, double timeout_s, kf_buf *out, size_t out_cap, int *wstatus,
                   char *why, size_t whycap);

#ifdef __cplusplus
}
#endif
#endif
