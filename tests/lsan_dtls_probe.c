/*
 * tests/test_lsan_dtls.c's probe: a process whose exit LeakSanitizer checks while one of its
 * threads holds a dynamic TLS block (tests/lsan_dtls_tls.c's) that malloc placed 16 bytes
 * past a page boundary, the place where GCC 12's sanitizer runtime expects a glibc 2.19
 * block's header: it reads the allocator's chunk header there as the block's start and
 * size, and the leak check's tracer faults scanning that range ("Tracer caught signal 11").
 * kforge's sanitized build turns the interception off (src/core/core.c); this process links
 * kforge's core for that default, as every test and the CLI do.
 *
 * usage: kf_dtls_probe MODULE [leak]. Threads are started one at a time, each allocating a
 * few blocks of the TLS block's size class first (to move the next one) and then touching
 * the module's variable; the first whose block lands at the page offset stores a heap
 * pointer in it (reachable only through the block: no leak) and stays parked until exit.
 * Prints "hit after N threads" or "no hit". With "leak", a thread that exits leaks 4242
 * bytes first, which the leak check must report.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/core.h"

#define MAX_THREADS 8192
#define MAX_PAD 128

static void **(*slot_of)(void);
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static sem_t decided;

typedef struct {
    int pad, hit;
} job;

static void *worker(void *arg) {
    job *j = arg;
    void *pads[MAX_PAD];
    for (int k = 0; k < j->pad; k++) pads[k] = malloc(sizeof(void *));
    void **slot = slot_of(); /* the first touch: glibc mallocs this thread's block */
    j->hit = (uintptr_t)slot % 4096 == 16;
    for (int k = 0; k < j->pad; k++) free(pads[k]);
    int hit = j->hit;
    sem_post(&decided);
    if (!hit) return NULL;
    *slot = malloc(100);
    pthread_mutex_lock(&mu); /* parked: main never signals, exit finds it alive */
    for (;;) pthread_cond_wait(&cv, &mu);
    return NULL;
}

static void *leaker(void *arg) {
    char *p = malloc(4242);
    if (p) memset(p, 1, 4242);
    return NULL; /* the only pointer dies with this thread's stack */
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODULE [leak]\n", argv[0]);
        return 2;
    }
    if (kf_now() < 0) return 2; /* (kforge's core linked in: its sanitizer defaults) */
    void *m = dlopen(argv[1], RTLD_NOW), *sym = m ? dlsym(m, "kf_dtls_slot") : NULL;
    if (!sym) {
        fprintf(stderr, "probe: %s\n", dlerror());
        return 2;
    }
    memcpy(&slot_of, &sym, sizeof sym);
    sem_init(&decided, 0, 0);
    if (argc > 2 && strcmp(argv[2], "leak") == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, leaker, NULL) != 0) return 2;
        pthread_join(t, NULL);
    }
    for (int n = 0; n < MAX_THREADS; n++) {
        job j = {n % MAX_PAD, 0};
        pthread_t t;
        if (pthread_create(&t, NULL, worker, &j) != 0) return 2;
        sem_wait(&decided);
        if (j.hit) {
            printf("hit after %d threads\n", n + 1);
            fflush(stdout);
            return 0; /* exit with the parked thread alive: the leak check runs now */
        }
        pthread_join(t, NULL);
    }
    printf("no hit in %d threads\n", MAX_THREADS);
    return 0;
}
