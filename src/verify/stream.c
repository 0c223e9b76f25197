/*
 * Large writes into the buffer region between a CPU candidate's calls (issue 30): a set's
 * inputs copied in and the outputs' poison, before every timed call, with the run stopped.
 * On x86-64 with streaming stores (SSE2, which every x86-64 has): the lines go to memory
 * without being read first, where an ordinary store reads each line before it writes it
 * (64 MiB on the 2-vCPU VM: a copy 8 -> 6 ms, a fill 5.7 -> 3 ms, bench/prep_micro.c); and
 * split over a few threads of this process that are created for the write and joined at
 * its end, where the process may use more than one CPU: OpenMP's workers would go on
 * spinning after their loop, on the cores the next timed call runs on
 * (docs/design-notes.md, "Writing a call's inputs and poison"). Elsewhere memcpy.
 *
 * What the candidate's call then finds in the caches: none of the written lines (a
 * streaming store leaves none), the same for every candidate; a task small enough for the
 * cache is evicted line by line after these writes anyway (handshake.c evict_buffers).
 */
#include "verify_int.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* below this many bytes a write stays on the calling thread and uses ordinary stores */
#define STREAM_MIN ((size_t)1 << 20)
/* each thread's share at least this many bytes */
#define STREAM_SHARE ((size_t)8 << 20)
#define STREAM_MAX_THREADS 4

/* dst[0..n) = src[0..n) (src != NULL), or the 16-byte pattern pat repeated (src == NULL);
 * dst 16-byte aligned where streaming, n a multiple of 16 */
static void stream_part(char *dst, const char *src, const unsigned char pat[16], size_t n) {
#if defined(__x86_64__)
    if (src) {
        size_t i = 0;
        for (; i + 64 <= n; i += 64) {
            __m128i v0 = _mm_loadu_si128((const __m128i *)(src + i));
            __m128i v1 = _mm_loadu_si128((const __m128i *)(src + i + 16));
            __m128i v2 = _mm_loadu_si128((const __m128i *)(src + i + 32));
            __m128i v3 = _mm_loadu_si128((const __m128i *)(src + i + 48));
            _mm_stream_si128((__m128i *)(dst + i), v0);
            _mm_stream_si128((__m128i *)(dst + i + 16), v1);
            _mm_stream_si128((__m128i *)(dst + i + 32), v2);
            _mm_stream_si128((__m128i *)(dst + i + 48), v3);
        }
        for (; i < n; i += 16) _mm_stream_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
    } else {
        __m128i v = _mm_loadu_si128((const __m128i *)pat);
        for (size_t i = 0; i < n; i += 16) _mm_stream_si128((__m128i *)(dst + i), v);
    }
    _mm_sfence();
#else
    if (src) memcpy(dst, src, n);
    else
        for (size_t i = 0; i < n; i += 16) memcpy(dst + i, pat, 16);
#endif
}

typedef struct stream_job {
    char *dst;
    const char *src;
    const unsigned char *pat;
    size_t n;
} stream_job;

static void *stream_worker(void *arg) {
    stream_job *j = arg;
    stream_part(j->dst, j->src, j->pat, j->n);
    return NULL;
}

/* How many threads a write of n bytes gets: the CPUs this process may run on, at most
 * STREAM_MAX_THREADS, each with at least STREAM_SHARE bytes. */
static int stream_threads(size_t n) {
    int cpus = kf_usable_cpus();
    size_t by_size = n / STREAM_SHARE;
    int t = cpus < STREAM_MAX_THREADS ? cpus : STREAM_MAX_THREADS;
    if ((size_t)t > by_size) t = (int)by_size;
    return t < 1 ? 1 : t;
}

/* The aligned middle of [dst, dst + n) split over the threads; the unaligned head and tail
 * written by memcpy (or the pattern) on this thread. */
static void stream_write(char *dst, const char *src, const unsigned char pat[16], size_t n) {
    if (n < STREAM_MIN || n < 64) {
        if (src) {
            memcpy(dst, src, n);
            return;
        }
        /* the pattern, then doubling copies of what is written (its period, 16, divides it) */
        size_t done = n < 16 ? n : 16;
        memcpy(dst, pat, done);
        while (done < n) {
            size_t k = done < n - done ? done : n - done;
            memcpy(dst + done, dst, k);
            done += k;
        }
        return;
    }
    /* byte o of a fill is pat[o % 16] (pat is the element repeated from dst on) */
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (src) memcpy(dst, src, head);
    else
        for (size_t i = 0; i < head; i++) dst[i] = (char)pat[i];
    size_t mid = (n - head) & ~(size_t)15, tail = n - head - mid;
    /* the pattern as seen from the aligned start */
    unsigned char p16[16];
    if (!src)
        for (size_t b = 0; b < 16; b++) p16[b] = pat[(head + b) % 16];
    int nt = stream_threads(mid);
    stream_job jobs[STREAM_MAX_THREADS];
    pthread_t tid[STREAM_MAX_THREADS];
    int started[STREAM_MAX_THREADS] = {0};
    size_t share = (mid / (size_t)nt) & ~(size_t)63, at = head;
    for (int k = 0; k < nt; k++) {
        size_t len = k == nt - 1 ? head + mid - at : share;
        jobs[k] = (stream_job){dst + at, src ? src + at : NULL, p16, len};
        at += len;
        /* the last share on this thread; a thread that cannot start: its share here too */
        if (k < nt - 1) started[k] = pthread_create(&tid[k], NULL, stream_worker, &jobs[k]) == 0;
    }
    for (int k = 0; k < nt; k++)
        if (!started[k]) stream_part(jobs[k].dst, jobs[k].src, jobs[k].pat, jobs[k].n);
    for (int k = 0; k < nt - 1; k++)
        if (started[k]) pthread_join(tid[k], NULL);
    char *t = dst + head + mid;
    if (src) memcpy(t, src + head + mid, tail);
    else
        for (size_t i = 0; i < tail; i++) t[i] = (char)pat[(head + mid + i) % 16];
}

void kf_verify_stream_copy(void *dst, const void *src, size_t n) {
    static const unsigned char none[16]; /* (no pattern: src is read) */
    if (n == 0) return;
    stream_write(dst, src, none, n);
}

void kf_verify_stream_fill(void *dst, const void *elem, size_t es, size_t n) {
    unsigned char pat[16];
    if (es == 0 || 16 % es != 0) return;
    for (size_t b = 0; b < 16; b++) pat[b] = ((const unsigned char *)elem)[b % es];
    stream_write(dst, NULL, pat, n);
}
