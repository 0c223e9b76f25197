/*
 * The writes between a CPU candidate's calls (issue 30, src/verify/stream.c), alone: 64 MiB
 * copied and 64 MiB filled with a 4-byte pattern, as the verifier did before (memcpy in
 * 256 KiB chunks; the pattern by doubling memcpy) against streaming stores on one thread and
 * split over two joined threads. Prints each round's times and the ratios against the
 * memcpy forms measured in the same round.
 *
 *   cc -O2 -pthread -o /tmp/prep_micro bench/prep_micro.c && /tmp/prep_micro [ROUNDS]
 *
 * x86-64 only (SSE2's streaming store).
 */
#include <emmintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N ((size_t)64 << 20)
#define CH ((size_t)256 << 10)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void nt_copy(char *d, const char *s, size_t n) {
    for (size_t i = 0; i < n; i += 16) _mm_stream_si128((__m128i *)(d + i), _mm_loadu_si128((const __m128i *)(s + i)));
    _mm_sfence();
}

static void nt_fill(char *d, uint32_t u, size_t n) {
    __m128i v = _mm_set1_epi32((int)u);
    for (size_t i = 0; i < n; i += 16) _mm_stream_si128((__m128i *)(d + i), v);
    _mm_sfence();
}

typedef struct job {
    char *d;
    const char *s;
    size_t n;
} job;

static void *worker(void *p) {
    job *j = p;
    if (j->s) nt_copy(j->d, j->s, j->n);
    else nt_fill(j->d, 0x7fc00001u, j->n);
    return NULL;
}

/* half on a second thread, joined at the end, as stream.c splits a write */
static void two(char *d, const char *s, size_t n) {
    pthread_t t;
    job a = {d, s, n / 2}, b = {d + n / 2, s ? s + n / 2 : NULL, n - n / 2};
    if (pthread_create(&t, NULL, worker, &a) != 0) {
        worker(&a);
        worker(&b);
        return;
    }
    worker(&b);
    pthread_join(t, NULL);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    char *a = aligned_alloc(64, N), *b = aligned_alloc(64, N), *o = aligned_alloc(64, N);
    if (!a || !b || !o) return 1;
    memset(a, 1, N), memset(b, 2, N), memset(o, 3, N);
    printf("64 MiB, ms: copy memcpy / nt 1 thread / nt 2 threads | fill doubling / nt 1 / nt 2\n");
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        for (size_t k = 0; k < N; k += CH) memcpy(b + k, a + k, CH);
        double t1 = now();
        uint32_t u = 0x7fc00001u;
        memcpy(o, &u, 4);
        for (size_t done = 4; done < N;) {
            size_t k = done < N - done ? done : N - done;
            memcpy(o + done, o, k);
            done += k;
        }
        double t2 = now();
        nt_copy(b, a, N);
        double t3 = now();
        two(b, a, N);
        double t4 = now();
        nt_fill(o, u, N);
        double t5 = now();
        two(o, NULL, N);
        double t6 = now();
        double cm = t1 - t0, fm = t2 - t1;
        printf("copy %.2f / %.2f (%.2fx) / %.2f (%.2fx) | fill %.2f / %.2f (%.2fx) / %.2f (%.2fx)\n", 1e3 * cm,
               1e3 * (t3 - t2), (t3 - t2) / cm, 1e3 * (t4 - t3), (t4 - t3) / cm, 1e3 * fm, 1e3 * (t5 - t4),
               (t5 - t4) / fm, 1e3 * (t6 - t5), (t6 - t5) / fm);
    }
    free(a), free(b), free(o);
    return 0;
}
