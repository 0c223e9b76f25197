/*
 * kforge core: status names, error records, checked allocation, text buffers, files,
 * hashing, clock and logging. Nothing here knows about tensors.
 */
#include "kforge/core.h"

#include <errno.h>
#include <ctype.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *kf_status_name(kf_status s) {
    switch (s) {
    case KF_OK: return "ok";
    case KF_ERR_ARG: return "bad argument";
    case KF_ERR_IO: return "i/o error";
    case KF_ERR_PARSE: return "parse error";
    case KF_ERR_TYPE: return "type error";
    case KF_ERR_UNSUPPORTED: return "unsupported";
    case KF_ERR_COMPILE: return "compile error";
    case KF_ERR_RUNTIME: return "runtime error";
    case KF_ERR_NOMEM: return "out of memory";
    case KF_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

kf_status kf_error_set(kf_error *err, kf_status code, const char *file, int line, int col,
                       const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    snprintf(err->file, sizeof err->file, "%s", file ? file : "");
    err->line = line;
    err->col = col;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

void kf_error_format(const kf_error *err, char *buf, size_t cap) {
    if (err->file[0] && err->line > 0)
        snprintf(buf, cap, "%s:%d:%d: error: %s", err->file, err->line, err->col, err->msg);
    else if (err->file[0])
        snprintf(buf, cap, "%s: error: %s", err->file, err->msg);
    else
        snprintf(buf, cap, "error: %s", err->msg);
}

static void (*oom_hook)(size_t);

void kf_set_oom_hook(void (*hook)(size_t requested)) { oom_hook = hook; }

static void out_of_memory(size_t n) {
    if (oom_hook) oom_hook(n);
    fprintf(stderr, "kforge: out of memory (asked for %zu bytes)\n", n);
    abort();
}

void *kf_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) out_of_memory(n);
    return p;
}

void *kf_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) out_of_memory(n * size);
    return p;
}

void *kf_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) out_of_memory(n);
    return q;
}

char *kf_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = kf_malloc(n);
    memcpy(d, s, n);
    return d;
}

static void buf_reserve(kf_buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    b->data = kf_realloc(b->data, cap);
    b->cap = cap;
}

void kf_buf_putn(kf_buf *b, const char *s, size_t n) {
    buf_reserve(b, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void kf_buf_puts(kf_buf *b, const char *s) { kf_buf_putn(b, s, strlen(s)); }

void kf_buf_vprintf(kf_buf *b, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return;
    buf_reserve(b, (size_t)n);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void kf_buf_printf(kf_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kf_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void kf_buf_free(kf_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *kf_buf_take(kf_buf *b) {
    char *s = b->data ? b->data : kf_strdup("");
    b->data = NULL;
    b->len = b->cap = 0;
    return s;
}

kf_status kf_read_file_max(const char *path, size_t max, char **out, size_t *len,
                           kf_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot open: %s", strerror(errno));
    kf_buf b = {0};
    char chunk[65536];
    size_t n;
    int big = 0;
    while (!big && (n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (n > max - b.len) big = 1;
        else kf_buf_putn(&b, chunk, n);
    }
    int bad = !big && ferror(f), e = errno;
    fclose(f);
    if (bad || big) {
        kf_buf_free(&b);
        if (big)
            return kf_error_set(err, KF_ERR_IO, path, 0, 0,
                                "larger than %zu bytes, the most kforge reads from this file",
                                max);
        return kf_error_set(err, KF_ERR_IO, path, 0, 0, "read failed: %s", strerror(e));
    }
    if (len) *len = b.len;
    *out = kf_buf_take(&b);
    return KF_OK;
}

kf_status kf_read_file(const char *path, char **out, size_t *len, kf_error *err) {
    return kf_read_file_max(path, SIZE_MAX - 1, out, len, err);
}

kf_status kf_write_file(const char *path, const char *data, size_t len, kf_error *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot create: %s", strerror(errno));
    size_t w = fwrite(data, 1, len, f);
    int bad = (w != len) | (fclose(f) != 0);
    if (bad) return kf_error_set(err, KF_ERR_IO, path, 0, 0, "write failed: %s", strerror(errno));
    return KF_OK;
}

kf_status kf_mkdirs(const char *path, kf_error *err) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return kf_error_set(err, KF_ERR_IO, tmp, 0, 0, "cannot create directory: %s",
                                strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return kf_error_set(err, KF_ERR_IO, tmp, 0, 0, "cannot create directory: %s",
                            strerror(errno));
    return KF_OK;
}

uint64_t kf_hash64(const void *data, size_t n, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ULL ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

void kf_hash_hex(uint64_t h, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)h); }

double kf_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int kf_usable_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static int log_level = 1;

void kf_log_set_level(int level) { log_level = level; }
int kf_log_level(void) { return log_level; }

void kf_log(int level, const char *fmt, ...) {
    if (level > log_level) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("kforge: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* See core.h. */
void kf_cpuinfo_value(const char *key, char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char *line = NULL;
    size_t n = 0, klen = strlen(key);
    while (getline(&line, &n, f) > 0) {
        if (strncmp(line, key, klen) != 0) continue;
        const char *p = line + klen;
        while (*p == ' ' || *p == '\t') p++;
        if (*p != ':') continue;
        p++;
        while (*p == ' ' || *p == '\t') p++;
        snprintf(buf, cap, "%s", p);
        size_t l = strlen(buf);
        while (l > 0 && isspace((unsigned char)buf[l - 1])) buf[--l] = 0;
        break;
    }
    free(line);
    fclose(f);
}

#if defined(__SANITIZE_ADDRESS__) && !defined(__clang__)
/* The sanitized build's own defaults (ASAN_OPTIONS still adds to and overrides them; the
 * runtime calls this weak hook, so the executable's copy must be exported: default
 * visibility in a library built with hidden ones). intercept_tls_get_addr=0: GCC 12's
 * sanitizer runtime (LLVM's before 17; google/sanitizers#1322) takes a dynamic TLS block
 * that malloc placed 16 bytes past a page boundary for a glibc 2.19 block with a header,
 * reads the two words before it as the block's start and size, and its leak check's tracer
 * faults scanning that range at exit ("Tracer caught signal 11"). In test_faults_opencl
 * it is the main thread's block of a library loaded with PoCL, placed by whatever the
 * thread allocated before touching it. Without the interception the leak check still reaches
 * every block through glibc's DTV (a heap block pointed to from the thread's TCB, which it
 * scans with the thread's TLS); fewer roots can only add reports, never hide a leak
 * (tests/test_lsan_dtls.c; docs/design-notes.md, "The leak check's tracer crash"). */
__attribute__((weak, visibility("default"))) const char *__asan_default_options(void);
__attribute__((weak, visibility("default"))) const char *__asan_default_options(void) {
    return "intercept_tls_get_addr=0";
}
#endif
