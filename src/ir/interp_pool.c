/*
 * The walk's large arrays kept for reuse (interp_int.h).
 *
 * Design note. A node-by-node walk with error bounds allocates and frees a handful of
 * whole-tensor arrays per node (the result, the bound, the bound's corners and their
 * shifted operands). Above glibc's mmap threshold each is a fresh mapping: every page is
 * faulted in and cleared, and every free is an munmap. Profiled (perf, cpu-clock) on
 * KernelBench level 2's 37 at a shrunk shape (a GEMM into a pointwise chain and a group
 * norm, 8.4M outputs) on 2 cores, page faults were 37 % of the samples with the bounds'
 * loops serial, 49 % once they ran on both threads (a quarter of that the TLB flushes the
 * faults send to the other core), munmap 5 %. At its official shape on a 16-core GPU host
 * the six sets' reference took 424 s (not profiled there).
 *
 * Freed blocks of at least KF_IP_POOL_MIN bytes are kept (at most KF_IP_POOL_SLOTS of them,
 * KF_IP_POOL_BYTES in all) and handed to the next request they fit closely; the outermost
 * walk drains the pool when it returns, unless a caller holds it across walks
 * (kf_interp_hold: the verifier's references of its input sets, one walk each, the same
 * sizes every time). Contents are never relied on: a block is the same as a fresh malloc's
 * except that it is not zeroed (kf_ip_zalloc zeroes).
 */
#include "ir/interp_int.h"

#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KF_IP_POOL_MIN ((size_t)1 << 20)
#define KF_IP_POOL_SLOTS 8
#define KF_IP_POOL_BYTES ((size_t)8 << 30)

static struct {
    void *p;
    size_t n;
} pool[KF_IP_POOL_SLOTS];
static size_t pool_bytes;
static int pool_holds;
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;

void *kf_ip_alloc(size_t bytes) {
    if (bytes < 1) bytes = 1;
    if (bytes >= KF_IP_POOL_MIN) {
        void *p = NULL;
        pthread_mutex_lock(&pool_mu);
        int best = -1;
        for (int i = 0; i < KF_IP_POOL_SLOTS; i++) /* the smallest that fits within 1/8 */
            if (pool[i].p && pool[i].n >= bytes && pool[i].n - bytes <= bytes / 8 && (best < 0 || pool[i].n < pool[best].n))
                best = i;
        if (best >= 0) {
            p = pool[best].p;
            pool_bytes -= pool[best].n;
            pool[best].p = NULL;
        }
        pthread_mutex_unlock(&pool_mu);
        if (p) return p;
    }
    return kf_malloc(bytes);
}

void *kf_ip_zalloc(size_t count, size_t size) {
    size_t bytes = count * size;
    if (bytes < KF_IP_POOL_MIN) return kf_calloc(count ? count : 1, size);
    char *p = kf_ip_alloc(bytes);
    int64_t chunks = (int64_t)((bytes + KF_IP_POOL_MIN - 1) / KF_IP_POOL_MIN);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        size_t lo = (size_t)c * KF_IP_POOL_MIN, n = bytes - lo < KF_IP_POOL_MIN ? bytes - lo : KF_IP_POOL_MIN;
        memset(p + lo, 0, n);
    }
    return p;
}

void kf_ip_free(void *p) {
    if (!p) return;
    size_t n = malloc_usable_size(p);
    if (n >= KF_IP_POOL_MIN) {
        pthread_mutex_lock(&pool_mu);
        for (int i = 0; i < KF_IP_POOL_SLOTS && p; i++)
            if (!pool[i].p && pool_bytes + n <= KF_IP_POOL_BYTES) {
                pool[i].p = p, pool[i].n = n;
                pool_bytes += n;
                p = NULL;
            }
        pthread_mutex_unlock(&pool_mu);
    }
    free(p); /* small, or no room in the pool */
}

void kf_ip_pool_drain(void) {
    pthread_mutex_lock(&pool_mu);
    for (int i = 0; i < KF_IP_POOL_SLOTS; i++) {
        free(pool[i].p);
        pool[i].p = NULL;
    }
    pool_bytes = 0;
    pthread_mutex_unlock(&pool_mu);
}

void kf_ip_pool_end_walk(void) {
    pthread_mutex_lock(&pool_mu);
    int held = pool_holds > 0;
    pthread_mutex_unlock(&pool_mu);
    if (!held) kf_ip_pool_drain();
}

void kf_interp_hold(int on) {
    pthread_mutex_lock(&pool_mu);
    pool_holds += on ? 1 : (pool_holds > 0 ? -1 : 0);
    int held = pool_holds > 0;
    pthread_mutex_unlock(&pool_mu);
    if (!held) kf_ip_pool_drain();
}

size_t kf_ip_pool_held(void) {
    pthread_mutex_lock(&pool_mu);
    size_t n = pool_bytes;
    pthread_mutex_unlock(&pool_mu);
    return n;
}
