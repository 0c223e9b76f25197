/*
 * kforge-runner: the process that hosts one untrusted candidate.
 *
 *   kforge-runner FD
 *
 * FD is a memfd laid out as in verify/runproto.h. The runner maps it, dlopens the
 * artifact and resolves the entry. With the handshake (every run of kf_verify_artifact)
 * it then only calls the kernel when the parent says so on a pipe and reports each return,
 * until the parent kills it: the parent times the calls and reads the results, nothing this
 * process writes counts (a device's own time of a call is sent, and checked against the
 * parent's clock). Without it (memory-checker and profiler runs) it calls the
 * kernel once (check mode) or warms it up and times repetitions with CLOCK_MONOTONIC (time
 * mode), writes the results into the control page and exits. Limits, stdout/stderr
 * redirection and the process group were set up by the parent before exec; without the
 * handshake everything the parent learns comes from the exit status, the stage in the
 * live page and the control page.
 *
 * While the kernel runs the control page is read-only, so a stray write into it faults
 * (a crash) instead of forging results; progress goes to the live page, which stays
 * writable. malloc & co. are wrapped (glibc's __libc_* entry points) so that an
 * allocation failure inside the candidate is recorded in the live page before the
 * candidate gets to dereference the NULL: the parent reports mem-limit, not a mystery
 * crash. The wrapper needs this executable to export malloc, which the linker does
 * because libc references it.
 *
 * Device targets (ctl.target "opencl:N"): the runner opens that backend through the
 * platform interface (its own unsanitized copy of src/backend and src/core), builds the
 * artifact, mirrors each guarded buffer in one device allocation, launches on views of
 * the data parts (timed with device events when the backend can), and copies everything
 * back, so that the parent's checks see exactly what the device wrote, guards included;
 * with the handshake the copies are made when the parent says 'i' and 'o' (runproto.h).
 *
 * Does not link libkforge and is never sanitized (it runs under RLIMIT_AS).
 */
#include "verify/runproto.h"
#include "kforge/backend.h"
#include "kforge/platform.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Under valgrind (the memory-checker run) the guard zones are marked unaddressable while
 * the kernel runs, so that memcheck reports a read (or a write) into a guard as an invalid
 * access: the parent's guard check sees only writes. The client requests are a few no-op
 * instructions natively. Without the header the marking is compiled out (and a read into a
 * guard goes unseen: test_memcheck's over-read tests fail). */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define KF_RUN_VG_GUARDS 1
#endif
#endif
#ifndef KF_RUN_VG_GUARDS
#define KF_RUN_VG_GUARDS 0
#endif

static kf_run_live *g_live;

#ifdef __GLIBC__
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

static void note_nomem(size_t n) {
    kf_run_live *l = g_live;
    if (!l) return;
    if (__atomic_fetch_add(&l->nomem, 1, __ATOMIC_RELAXED) == 0) l->nomem_bytes = n;
}

/* The allocator interposition: each function below is glibc's own (via __libc_*), plus a
 * note in the live page when it fails. They replace the C library's for the whole process,
 * the candidate and libgomp included. */
void *malloc(size_t n) {
    void *p = __libc_malloc(n);
    if (!p) note_nomem(n);
    return p;
}

void free(void *p) { __libc_free(p); }

void *calloc(size_t n, size_t size) {
    void *p = __libc_calloc(n, size);
    if (!p) note_nomem(n * size);
    return p;
}

void *realloc(void *p, size_t n) {
    void *q = __libc_realloc(p, n);
    if (!q && n) note_nomem(n);
    return q;
}

void *memalign(size_t align, size_t n) {
    void *p = __libc_memalign(align, n);
    if (!p) note_nomem(n);
    return p;
}

void *aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

int posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || (align & (align - 1)) != 0) return EINVAL;
    void *p = memalign(align, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

void *valloc(size_t n) { return memalign((size_t)sysconf(_SC_PAGESIZE), n); }

void *pvalloc(size_t n) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return memalign(pg, (n + pg - 1) / pg * pg);
}
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Frees the whole pages inside each output buffer (MADV_REMOVE on the memfd), so that the
 * next run faults in zeroed pages, as a freshly allocated output would. 0, or -1 with errno
 * set (the control page is read-only while reps run: the caller reports it afterwards). */
static int free_output_pages(const kf_run_ctl *ctl, uint8_t *base, int nbufs) {
    long pg = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < nbufs; i++) {
        const kf_run_buf *b = &ctl->bufs[i];
        if (!b->is_output) continue;
        uintptr_t lo = ((uintptr_t)(base + b->offset) + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
        uintptr_t hi = ((uintptr_t)(base + b->offset + b->size)) & ~((uintptr_t)pg - 1);
        if (hi > lo && madvise((void *)lo, hi - lo, MADV_REMOVE) != 0) return -1;
    }
    return 0;
}

/* One handshake message to the parent (runproto.h): a byte, and with_rc ('d') the int32
 * rc and the device's own time of the call, dev seconds (0 on the CPU). */
static int send_msg(char what, int rc, double dev, int with_rc) {
    char m[KF_RUN_MSG_D];
    m[0] = what;
    int32_t v = rc;
    memcpy(m + 1, &v, 4);
    memcpy(m + 5, &dev, 8);
    size_t len = with_rc ? KF_RUN_MSG_D : 1;
    ssize_t n;
    while ((n = write(KF_RUN_DONE_FD, m, len)) < 0 && errno == EINTR) {}
    return n == (ssize_t)len ? 0 : -1;
}

/* The parent's next command. The parent's clock runs from just before it writes 'g', so
 * the wait for it spins for a while first (a blocked process takes a scheduler wake-up to
 * run again: tens of microseconds inside every timed call, seen on a busy 2-vCPU VM), then
 * blocks. 0, or -1 when the pipe is closed or broken. */
static int read_cmd(char *cmd) {
    double until = now_s() + 300e-6;
    for (;;) {
        ssize_t n = read(KF_RUN_GO_FD, cmd, 1);
        if (n == 1) return 0;
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) return -1;
        if (errno == EAGAIN && now_s() >= until) {
            struct pollfd pf = {KF_RUN_GO_FD, POLLIN, 0};
            if (poll(&pf, 1, -1) < 0 && errno != EINTR) return -1;
        }
    }
}

/* Map n bytes of the region at p now (write: for writing), rather than a fault per 4 KiB
 * page inside the kernel's calls; before Linux 5.14 (no MADV_POPULATE_*) touched page by
 * page. */
static void populate(uint8_t *p, uint64_t n, int write) {
    if (madvise(p, n, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0) return;
    volatile uint8_t *v = p;
    uint8_t sink = 0;
    for (uint64_t o = 0; o < n; o += KF_RUN_PAGE) {
        if (write) v[o] = v[o];
        else sink ^= v[o];
    }
    (void)sink;
}

static volatile uint64_t flush_sink;

/* Evict the caches: write then read a buffer larger than the last-level cache, spread
 * over the threads so that every core's private caches are touched too. */
static void flush_caches(uint8_t *buf, uint64_t n) {
    uint64_t lines = n / 64, acc = 0;
#pragma omp parallel for schedule(static) reduction(+ : acc)
    for (uint64_t i = 0; i < lines; i++) {
        buf[i * 64] = (uint8_t)(buf[i * 64] + 1);
        acc += buf[i * 64];
    }
    flush_sink += acc;
}

static double times_buf[KF_RUN_MAX_REPS];

/* Configuration copied out of the shared control page before anything untrusted runs. */
typedef struct run_cfg {
    uint32_t mode;
    int nbufs, min_reps, max_reps;
    double min_time, warmup, budget;
    uint64_t flush_bytes;
    int handshake;
    uint64_t size[KF_RUN_MAX_BUFS];    /* bytes of each buffer's data */
    int is_output[KF_RUN_MAX_BUFS];
    int poison_size[KF_RUN_MAX_BUFS];  /* an output's poison pattern ('i', 'j'); 0 = none */
    char entry[64], target[32], artifact[4096];
} run_cfg;

/* A host-form device candidate (nvcc .so) reports its own failure as KF_ERR_RUNTIME
 * "the kernel returned N": that is the kernel's verdict, not a device fault. */
static int kernel_returned(kf_status st, const kf_error *e, int *rc) {
    const char *p = st == KF_ERR_RUNTIME ? strstr(e->msg, "the kernel returned ") : NULL;
    if (!p) return 0;
    *rc = atoi(p + 20);
    return *rc != 0;
}

static int device_fail(kf_run_ctl *ctl, size_t ctl_size, uint8_t *base, const char *what,
                       const kf_error *e) {
    mprotect(base, ctl_size, PROT_READ | PROT_WRITE);
    snprintf(ctl->message, sizeof ctl->message, "%s: %s", what, e->msg[0] ? e->msg : "failed");
    return KF_RUN_EXIT_DEVICE;
}

#ifdef KF_RUNNER_FORGE
/* A planted runner path for tests only (the kforge-runner-forge executable, never
 * installed): it reports the device time a hostile process sharing the runner could
 * write (a host-form candidate's code, or a device kernel corrupting the runner's memory
 * under PoCL), as KF_TEST_FORGE_DEVICE_TIME says: "nan", "zero", "tiny" (a thousandth of
 * the measured time), "half" (half of it), "over" (the measured time plus a second). */
static double forge_device_time(double dt) {
    const char *how = getenv("KF_TEST_FORGE_DEVICE_TIME");
    if (!how) return dt;
    if (!strcmp(how, "nan")) return dt * NAN;
    if (!strcmp(how, "zero")) return 0.0;
    if (!strcmp(how, "tiny")) return dt * 1e-3;
    if (!strcmp(how, "half")) return dt * 0.5;
    if (!strcmp(how, "over")) return dt + 1.0;
    return dt;
}
#endif

/* A call's buffers onto the device ('i': inputs too; 'j': outputs only): an input's whole
 * span (guards, data) copied in; an output's guards copied in and its data filled with its
 * poison pattern, which the parent wrote at the start of the output's data in the region
 * (on the device where the backend can fill; else written across the region's data here
 * and the whole span copied). An output without a pattern (poison_size 0) is copied
 * whole, as the parent wrote it. */
/* The inputs' device copies of each input set the parent asked to keep (0x80 | s): slot s
 * holds one allocation per input buffer, whole spans; made at the slot's first use. */
static void *stash[KF_RUN_STASH_SLOTS][KF_RUN_MAX_BUFS];

/* Keep the inputs now on the device in slot s (stash_in) or put slot s's back (!stash_in).
 * Keeping: 1 when kept, 0 when the slot could not be made (nothing kept, nothing lost). */
static int device_stash(const kf_backend_iface *io, kf_backend *b, const run_cfg *cfg,
                        void **whole, const size_t *span, int s, int stash_in, kf_status *st) {
    *st = KF_OK;
    for (int i = 0; i < cfg->nbufs && stash_in; i++) {
        if (cfg->is_output[i] || stash[s][i]) continue;
        stash[s][i] = io->alloc(b->ctx, span[i]);
        if (!stash[s][i]) {
            for (int k = 0; k < cfg->nbufs; k++) {
                if (stash[s][k]) io->free(b->ctx, stash[s][k]);
                stash[s][k] = NULL;
            }
            return 0;
        }
    }
    for (int i = 0; i < cfg->nbufs && *st == KF_OK; i++) {
        if (cfg->is_output[i]) continue;
        if (!stash[s][i]) {
            *st = KF_ERR_ARG; /* a slot never kept: the parent's mistake, or a forged one */
            break;
        }
        *st = stash_in ? io->copy_dd(b->ctx, stash[s][i], whole[i], span[i])
                       : io->copy_dd(b->ctx, whole[i], stash[s][i], span[i]);
    }
    return 1;
}

static kf_status device_copy_in(const kf_backend_iface *io, kf_backend *b, const run_cfg *cfg,
                                void **whole, uint8_t **host, const size_t *span, int inputs,
                                int *which) {
    for (int i = 0; i < cfg->nbufs; i++) {
        *which = i;
        kf_status st = KF_OK;
        size_t ps = (size_t)cfg->poison_size[i], size = (size_t)cfg->size[i];
        if (!cfg->is_output[i]) {
            if (inputs) st = io->copy_in(b->ctx, whole[i], host[i], span[i]);
        } else if (!ps) {
            st = io->copy_in(b->ctx, whole[i], host[i], span[i]);
        } else if (io->fill && io->copy_in_at) {
            uint8_t *data = host[i] + KF_RUN_GUARD;
            st = io->copy_in_at(b->ctx, whole[i], 0, host[i], KF_RUN_GUARD);
            if (st == KF_OK) st = io->fill(b->ctx, whole[i], KF_RUN_GUARD, data, ps, size);
            if (st == KF_OK)
                st = io->copy_in_at(b->ctx, whole[i], KF_RUN_GUARD + size, data + size,
                                    span[i] - KF_RUN_GUARD - size);
        } else {
            uint8_t *data = host[i] + KF_RUN_GUARD;
            for (size_t k = ps; k < size; k += ps) memcpy(data + k, data, ps);
            st = io->copy_in(b->ctx, whole[i], host[i], span[i]);
        }
        if (st != KF_OK) return st;
    }
    return KF_OK;
}

/* The device side of the handshake (runproto.h): the buffers are on the device; 'i'
 * copies the region's buffers (the parent's inputs, poison and guards) in, 'o' copies
 * them back, 'f' flushes the device's caches, 'p' only answers 'r' (the parent times that
 * round trip), 'g' launches the plan once and answers 'd' with the kernel's return value
 * and the device's time of the call. A device call that
 * fails ends the runner (its message in the control page, the stage says where); the
 * parent kills it after the last call. */
static int device_calls(kf_run_ctl *ctl, size_t ctl_size, uint8_t *base, kf_run_live *live,
                        const run_cfg *cfg, kf_backend *b, void *mod, void **whole, void **view,
                        uint8_t **host, const size_t *span) {
    const kf_backend_iface *io = b->iface;
    kf_error e = {0};
    int fl = fcntl(KF_RUN_GO_FD, F_GETFL);
    if (fl >= 0) fcntl(KF_RUN_GO_FD, F_SETFL, fl | O_NONBLOCK);
    live->stage = KF_STAGE_LOADED;
    if (send_msg('r', 0, 0.0, 0) != 0) return -1;
    for (;;) {
        char cmd = 0;
        if (read_cmd(&cmd) != 0) return -1;
        if (cmd == 'g') {
            live->stage = KF_STAGE_KERNEL;
            double dt = 0;
            int krc = 0;
            kf_status st;
            if (io->launch_timed) {
                st = io->launch_timed(b->ctx, mod, view, cfg->nbufs, &dt, &e);
            } else {
                double a = now_s();
                st = io->launch(b->ctx, mod, view, cfg->nbufs, &e);
                if (st == KF_OK) st = kf_backend_sync(b);
                dt = now_s() - a;
            }
            if (kernel_returned(st, &e, &krc)) st = KF_OK;
            if (st != KF_OK) _exit(device_fail(ctl, ctl_size, base, "launch", &e));
#ifdef KF_RUNNER_FORGE
            dt = forge_device_time(dt);
#endif
            if (send_msg('d', krc, dt, 1) != 0) return -1;
        } else if (cmd == 'p') {
            live->stage = KF_STAGE_BETWEEN;
            if (send_msg('r', 0, 0.0, 0) != 0) return -1;
        } else if (cmd == 'i' || cmd == 'j' || cmd == 'o' || cmd == 'f' ||
                   ((unsigned char)cmd & 0x80 && io->copy_dd)) {
            live->stage = KF_STAGE_BETWEEN;
            int i = 0, kept = 1;
            kf_status st = KF_OK;
            unsigned char u = (unsigned char)cmd;
            int slot = u & (KF_RUN_STASH_SLOTS - 1);
            if (cmd == 'i' || cmd == 'j' || (u & 0xC0) == KF_RUN_CMD_STASH_IN)
                st = device_copy_in(io, b, cfg, whole, host, span, cmd != 'j', &i);
            if (st == KF_OK && (u & 0xC0) == KF_RUN_CMD_STASH_IN)
                kept = device_stash(io, b, cfg, whole, span, slot, 1, &st);
            if ((u & 0xC0) == KF_RUN_CMD_FROM_STASH) {
                st = device_copy_in(io, b, cfg, whole, host, span, 0, &i);
                if (st == KF_OK) device_stash(io, b, cfg, whole, span, slot, 0, &st);
            }
            for (; cmd == 'o' && i < cfg->nbufs && st == KF_OK; i++)
                st = io->copy_out(b->ctx, host[i], whole[i], span[i]);
            if (st != KF_OK) {
                mprotect(base, ctl_size, PROT_READ | PROT_WRITE);
                snprintf(ctl->message, sizeof ctl->message, "copy %s the device failed (buffer %d)",
                         cmd == 'o' ? "from" : "to", cmd == 'o' ? i - 1 : i);
                _exit(KF_RUN_EXIT_DEVICE);
            }
            if (cmd == 'f' && cfg->flush_bytes && io->flush &&
                io->flush(b->ctx, (size_t)cfg->flush_bytes) != KF_OK) {
                mprotect(base, ctl_size, PROT_READ | PROT_WRITE);
                snprintf(ctl->message, sizeof ctl->message, "the device's cache flush failed");
                _exit(KF_RUN_EXIT_DEVICE);
            }
            if (send_msg(kept ? 'r' : 'R', 0, 0.0, 0) != 0) return -1;
        } else {
            return -1;
        }
    }
}

/* Run a device candidate (see the file comment). Each buffer i of the region is
 * [guard][data i][guard]; its device copy has the same layout, so one copy each way
 * carries the guards too. Returns the runner's exit code. */
static int run_device(kf_run_ctl *ctl, size_t ctl_size, uint8_t *base, kf_run_live *live,
                      const run_cfg *cfg, void **host_args) {
    kf_error e = {0};
    kf_backend *b = NULL;
    live->stage = KF_STAGE_LOADING;
    if (kf_backend_open(cfg->target, &b, &e) != KF_OK) {
        snprintf(ctl->message, sizeof ctl->message, "%s", e.msg);
        return KF_RUN_EXIT_LOAD;
    }
    const kf_backend_iface *io = b->iface;
    if (!io->alloc || !io->view || !io->copy_in || !io->copy_out) {
        snprintf(ctl->message, sizeof ctl->message,
                 "backend '%s' lacks device memory slots", cfg->target);
        kf_backend_close(b);
        return KF_RUN_EXIT_USAGE;
    }
    void *mod = NULL;
    if (io->load(b->ctx, cfg->artifact, cfg->entry, &mod, &e) != KF_OK) {
        snprintf(ctl->message, sizeof ctl->message, "%s", e.msg);
        kf_backend_close(b);
        return KF_RUN_EXIT_LOAD;
    }
    void *whole[KF_RUN_MAX_BUFS] = {0}, *view[KF_RUN_MAX_BUFS + 1] = {0};
    uint8_t *host[KF_RUN_MAX_BUFS];
    size_t span[KF_RUN_MAX_BUFS];
    int rc = KF_RUN_EXIT_OK, krc = 0, reps = 0, warm = 0;
    for (int i = 0; i < cfg->nbufs; i++) {
        /* the guard before the data and the guard after it, up to the next buffer's */
        uint64_t size = ctl->bufs[i].size;
        uint64_t tail = kf_run_round_up(size + KF_RUN_GUARD, KF_RUN_ALIGN) - size;
        host[i] = (uint8_t *)host_args[i] - KF_RUN_GUARD;
        span[i] = (size_t)(KF_RUN_GUARD + size + tail);
        whole[i] = io->alloc(b->ctx, span[i]);
        if (!whole[i]) {
            snprintf(ctl->message, sizeof ctl->message,
                     "cannot allocate %zu bytes of device memory for buffer %d", span[i], i);
            rc = KF_RUN_EXIT_NOMEM;
            goto out;
        }
        view[i] = io->view(b->ctx, whole[i], KF_RUN_GUARD, size ? (size_t)size : 1);
        if (!view[i]) {
            snprintf(ctl->message, sizeof ctl->message, "cannot make a view of buffer %d", i);
            rc = KF_RUN_EXIT_DEVICE;
            goto out;
        }
        if (io->copy_in(b->ctx, whole[i], host[i], span[i]) != KF_OK) {
            snprintf(ctl->message, sizeof ctl->message, "copy to the device failed (buffer %d)", i);
            rc = KF_RUN_EXIT_DEVICE;
            goto out;
        }
    }
    /* the buffers' host side page-locked where the backend can (CUDA): the handshake
     * copies every call's set in and the checked calls' outputs back, gigabytes a call at
     * official GPU shapes; pageable copies run at a fraction of the bus's speed. A refusal
     * leaves them pageable (slower, the same results) and says so in the run's output.
     * Handshake runs only: they end by SIGKILL, which releases the lock; a run under a
     * memory checker (no handshake) exits by itself, and compute-sanitizer would report
     * the registration as a leak of the candidate's. */
    if (io->host_pin && cfg->handshake && cfg->nbufs > 0) {
        uint8_t *lo = host[0], *hi = host[cfg->nbufs - 1] + span[cfg->nbufs - 1];
        kf_error pe = {0};
        if (io->host_pin(b->ctx, lo, (size_t)(hi - lo), &pe) != KF_OK)
            fprintf(stderr, "kforge-runner: the buffers stay pageable (%s)\n", pe.msg);
    }
    live->stage = KF_STAGE_LOADED;
    live->rep = -1;
    if (cfg->handshake) {
        /* until the parent kills this process; a broken pipe: wait for that kill */
        device_calls(ctl, ctl_size, base, live, cfg, b, mod, whole, view, host, span);
        for (;;) pause();
    }
    live->stage = KF_STAGE_KERNEL;
    mprotect(base, ctl_size, PROT_READ);
    kf_status st = KF_OK;
    if (cfg->mode == KF_RUN_CHECK) {
        st = io->launch(b->ctx, mod, view, cfg->nbufs, &e);
        if (st == KF_OK) st = kf_backend_sync(b);
        if (kernel_returned(st, &e, &krc)) st = KF_OK;
        if (st != KF_OK) {
            rc = device_fail(ctl, ctl_size, base, "launch", &e);
            goto out;
        }
    } else {
        double t0 = now_s();
        do {
            st = io->launch(b->ctx, mod, view, cfg->nbufs, &e);
            if (st == KF_OK) st = kf_backend_sync(b);
            warm++;
        } while (st == KF_OK && now_s() - t0 < cfg->warmup && warm < 1000);
        double start = now_s(), spent = 0;
        while (st == KF_OK && reps < cfg->max_reps) {
            if (cfg->flush_bytes) {
                live->stage = KF_STAGE_BETWEEN;
                if (io->flush) st = io->flush(b->ctx, (size_t)cfg->flush_bytes);
                if (st != KF_OK) break;
            }
            live->rep = reps;
            live->stage = KF_STAGE_KERNEL;
            double dt = 0;
            if (io->launch_timed) {
                st = io->launch_timed(b->ctx, mod, view, cfg->nbufs, &dt, &e);
            } else {
                double a = now_s();
                st = io->launch(b->ctx, mod, view, cfg->nbufs, &e);
                if (st == KF_OK) st = kf_backend_sync(b);
                dt = now_s() - a;
            }
            if (st != KF_OK) break;
            times_buf[reps++] = dt;
            spent += dt;
            if (reps >= cfg->min_reps && spent >= cfg->min_time) break;
            if (now_s() - start > cfg->budget && cfg->budget > 0) break;
        }
        if (kernel_returned(st, &e, &krc)) st = KF_OK;
        if (st != KF_OK) {
            rc = device_fail(ctl, ctl_size, base, "launch", &e);
            goto out;
        }
    }
    /* everything back, guards included: the region is writable again for this */
    mprotect(base, ctl_size, PROT_READ | PROT_WRITE);
    for (int i = 0; i < cfg->nbufs; i++) {
        if (io->copy_out(b->ctx, host[i], whole[i], span[i]) != KF_OK) {
            snprintf(ctl->message, sizeof ctl->message, "copy from the device failed (buffer %d)", i);
            rc = KF_RUN_EXIT_DEVICE;
            goto out;
        }
    }
    ctl->kernel_rc = krc;
    ctl->reps = reps;
    ctl->warmups = warm;
    memcpy(ctl->times, times_buf, sizeof(double) * (size_t)reps);
    ctl->done = 1;
out:
    mprotect(base, ctl_size, PROT_READ | PROT_WRITE);
    for (int i = 0; i < cfg->nbufs; i++) {
        if (view[i] && io->view_free) io->view_free(b->ctx, view[i]);
        if (whole[i]) kf_backend_free(b, whole[i]);
    }
    if (io->unload) io->unload(b->ctx, mod);
    kf_backend_close(b);
    if (rc == KF_RUN_EXIT_OK) live->stage = KF_STAGE_DONE;
    return rc;
}

/* Mark every buffer's guard zones (the KF_RUN_GUARD bytes before its data and after it,
 * clipped to the buffer area) unaddressable for valgrind's memcheck (restore = 0), or
 * addressable and defined again (restore = 1: they hold the guard pattern). Nothing
 * happens natively or under another tool. ctl is read-only here; its fields were checked. */
static void mark_guards(const kf_run_ctl *ctl, size_t ctl_size, uint64_t total, int nbufs,
                        int restore) {
#if KF_RUN_VG_GUARDS
    if (!RUNNING_ON_VALGRIND) return;
    uint8_t *base = (uint8_t *)(uintptr_t)ctl;
    uint64_t area = (uint64_t)ctl_size + KF_RUN_PAGE; /* the buffers start after the live page */
    for (int i = 0; i < nbufs; i++) {
        const kf_run_buf *b = &ctl->bufs[i];
        uint64_t lo = b->offset >= area + KF_RUN_GUARD ? b->offset - KF_RUN_GUARD : area;
        uint64_t end = b->offset + b->size;
        uint64_t hi = end + KF_RUN_GUARD <= total ? end + KF_RUN_GUARD : total;
        if (restore) {
            VALGRIND_MAKE_MEM_DEFINED(base + lo, b->offset - lo);
            VALGRIND_MAKE_MEM_DEFINED(base + end, hi - end);
        } else {
            VALGRIND_MAKE_MEM_NOACCESS(base + lo, b->offset - lo);
            VALGRIND_MAKE_MEM_NOACCESS(base + end, hi - end);
        }
    }
#else
    (void)ctl, (void)ctl_size, (void)total, (void)nbufs, (void)restore;
#endif
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: kforge-runner FD   (started by kforge, not by hand)\n");
        return KF_RUN_EXIT_USAGE;
    }
    int fd = atoi(argv[1]);
    size_t head = kf_run_round_up(sizeof(kf_run_ctl), KF_RUN_PAGE);
    void *h = mmap(NULL, head, PROT_READ, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) return KF_RUN_EXIT_USAGE;
    const kf_run_ctl *hc = h;
    if (hc->magic != KF_RUN_MAGIC || hc->version != KF_RUN_VERSION || hc->total_size < head) {
        munmap(h, head);
        return KF_RUN_EXIT_USAGE;
    }
    uint64_t total = hc->total_size;
    munmap(h, head);
    /* the region's pages mapped now, in one pass, rather than a fault per 4 KiB page inside
     * the kernel's first call (the parent wrote them all: nothing is allocated here); a check
     * run's one call paid 40-55 ms of faults for a 128 MiB region around a 6 ms kernel
     * (issue 30, tests/test_region_populated.c) */
    uint8_t *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) return KF_RUN_EXIT_NOMEM;
    close(fd);
    kf_run_ctl *ctl = (kf_run_ctl *)base;
    /* With resident input sets (ctl.nslots > 0) the outputs and the pages before the buffers
     * are populated here, each set's slot when a call first reads it ('G'): a check run
     * reads one set, and a page table of every slot costs about what a copy of the set
     * does (issue 30). Without, the whole region, as MAP_POPULATE did. */
    if (ctl->nslots > 0 && ctl->nargs > ctl->slot_nin && ctl->slot_nin > 0 && ctl->nargs <= KF_RUN_MAX_BUFS) {
        uint64_t lo = ctl->bufs[ctl->slot_nin].offset - KF_RUN_GUARD, hi = ctl->bufs[ctl->nargs - 1].offset +
                      ctl->bufs[ctl->nargs - 1].size + KF_RUN_GUARD;
        lo = lo / KF_RUN_PAGE * KF_RUN_PAGE;
        hi = kf_run_round_up(hi, KF_RUN_PAGE);
        if (hi > total || lo >= hi) return KF_RUN_EXIT_USAGE;
        populate(base, ctl->live_offset + KF_RUN_PAGE, 1);
        populate(base + lo, hi - lo, 1);
    } else {
        populate(base, total, 1);
    }
    if (ctl->live_offset < head || ctl->live_offset + KF_RUN_PAGE > total) return KF_RUN_EXIT_USAGE;
    size_t ctl_size = (size_t)ctl->live_offset;
    kf_run_live *live = (kf_run_live *)(base + ctl->live_offset);
    g_live = live;
    live->stage = KF_STAGE_START;

    /* copy the configuration out of shared memory before anything untrusted runs */
    uint32_t mode = ctl->mode;
    int nbufs = ctl->nbufs;
    int min_reps = ctl->min_reps, max_reps = ctl->max_reps;
    double min_time = ctl->min_time_s, warmup = ctl->warmup_s, budget = ctl->budget_s;
    uint64_t flush_bytes = ctl->flush_bytes;
    int fresh = ctl->fresh_outputs;
    int hs = ctl->handshake == 1;
    char entry[sizeof ctl->entry], artifact[sizeof ctl->artifact];
    memcpy(entry, ctl->entry, sizeof entry);
    entry[sizeof entry - 1] = 0;
    memcpy(artifact, ctl->artifact, sizeof artifact);
    artifact[sizeof artifact - 1] = 0;
    if (nbufs < 0 || nbufs > KF_RUN_MAX_BUFS || (mode != KF_RUN_CHECK && mode != KF_RUN_TIME)) {
        snprintf(ctl->message, sizeof ctl->message, "bad control page (mode %u, %d buffers)",
                 mode, nbufs);
        return KF_RUN_EXIT_USAGE;
    }
    /* the kernel's arguments (nargs) and the resident sets' slots after them ('G') */
    int nargs = ctl->nargs > 0 ? ctl->nargs : nbufs, nslots = ctl->nslots, slot_nin = ctl->slot_nin;
    if (nslots <= 0) nslots = 0, slot_nin = 0;
    if (nargs > nbufs || nslots > KF_RUN_STASH_SLOTS || (nslots > 0 && (slot_nin < 1 || slot_nin > nargs ||
                                                       nargs + (int64_t)(nslots - 1) * slot_nin != nbufs))) {
        snprintf(ctl->message, sizeof ctl->message, "bad control page (%d arguments, %d slots of %d, %d buffers)",
                 nargs, nslots, slot_nin, nbufs);
        return KF_RUN_EXIT_USAGE;
    }
    if (nslots == 0) nargs = nbufs;
    void *args[KF_RUN_MAX_BUFS + 1];
    static void *slot_in[KF_RUN_STASH_SLOTS][KF_RUN_MAX_BUFS];
    for (int i = 0; i < nbufs; i++) {
        const kf_run_buf *b = &ctl->bufs[i];
        if (b->offset < ctl_size + KF_RUN_PAGE || b->offset + b->size > total) {
            snprintf(ctl->message, sizeof ctl->message, "buffer %d lies outside the region", i);
            return KF_RUN_EXIT_USAGE;
        }
        if (i < nargs) args[i] = base + b->offset;
        if (i < slot_nin) slot_in[0][i] = base + b->offset;
        else if (i >= nargs) slot_in[1 + (i - nargs) / slot_nin][(i - nargs) % slot_nin] = base + b->offset;
    }
    args[nargs] = NULL;
    /* each slot's pages, guards included (populated at its first call) */
    static uint64_t slot_lo[KF_RUN_STASH_SLOTS], slot_hi[KF_RUN_STASH_SLOTS];
    uint64_t slot_mapped = 0;
    for (int k = 0; k < nslots; k++) {
        int b0 = k == 0 ? 0 : nargs + (k - 1) * slot_nin, b1 = b0 + slot_nin - 1;
        slot_lo[k] = (ctl->bufs[b0].offset - KF_RUN_GUARD) / KF_RUN_PAGE * KF_RUN_PAGE;
        slot_hi[k] = kf_run_round_up(ctl->bufs[b1].offset + ctl->bufs[b1].size + KF_RUN_GUARD, KF_RUN_PAGE);
        if (slot_hi[k] > total) slot_hi[k] = total;
    }
    nbufs = nargs; /* the rest of the runner sees the kernel's arguments only */
    if (max_reps > KF_RUN_MAX_REPS) max_reps = KF_RUN_MAX_REPS;
    if (max_reps < 1) max_reps = 1;
    if (min_reps < 1) min_reps = 1;
    if (min_reps > max_reps) min_reps = max_reps;

    char target[sizeof ctl->target];
    memcpy(target, ctl->target, sizeof target);
    target[sizeof target - 1] = 0;
    const kf_platform *tp = kf_platform_of_target(target); /* "" runs on the host too */
    if (target[0] && !(tp && !tp->is_gpu)) {
        run_cfg cfg = {.mode = mode, .nbufs = nbufs, .min_reps = min_reps, .max_reps = max_reps,
                       .min_time = min_time, .warmup = warmup, .budget = budget,
                       .flush_bytes = flush_bytes, .handshake = hs};
        for (int i = 0; i < nbufs; i++) {
            cfg.size[i] = ctl->bufs[i].size;
            cfg.is_output[i] = ctl->bufs[i].is_output != 0;
            int ps = ctl->bufs[i].poison_size;
            cfg.poison_size[i] = cfg.is_output[i] && ps > 0 && ps <= 8 && cfg.size[i] % (uint64_t)ps == 0 ? ps : 0;
        }
        memcpy(cfg.entry, entry, sizeof cfg.entry);
        memcpy(cfg.target, target, sizeof cfg.target);
        memcpy(cfg.artifact, artifact, sizeof cfg.artifact);
        int drc = run_device(ctl, ctl_size, base, live, &cfg, args);
        fflush(NULL);
        return drc;
    }

    uint8_t *flush = NULL;
    /* with the handshake the buffer is made at the first 'f': a check run and a timing run
     * look the same until the second call */
    if (!hs && mode == KF_RUN_TIME && flush_bytes > 0) {
        flush = malloc(flush_bytes);
        if (!flush) {
            snprintf(ctl->message, sizeof ctl->message,
                     "cannot allocate the %llu-byte cache-flush buffer",
                     (unsigned long long)flush_bytes);
            return KF_RUN_EXIT_NOMEM;
        }
        memset(flush, 1, flush_bytes);
    }

    live->stage = KF_STAGE_LOADING;
    dlerror();
    void *dl = dlopen(artifact, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *e = dlerror();
        snprintf(ctl->message, sizeof ctl->message, "cannot load %s: %s", artifact,
                 e ? e : "unknown dlopen error");
        return KF_RUN_EXIT_LOAD;
    }
    dlerror();
    void *sym = dlsym(dl, entry);
    if (!sym) {
        const char *e = dlerror();
        snprintf(ctl->message, sizeof ctl->message,
                 "entry point '%s' not found in %s: %s (the kernel must define "
                 "`int %s(void *const *args)` with external linkage)",
                 entry, artifact, e ? e : "symbol is NULL", entry);
        return KF_RUN_EXIT_SYM;
    }
    int (*fn)(void *const *);
    memcpy(&fn, &sym, sizeof fn);
    live->stage = KF_STAGE_LOADED;

    int rc = 0, reps = 0, warm = 0, fresh_errno = 0, flushed_once = 0;
    live->rep = -1;
    if (hs) {
        /* 'r', then the parent's commands until it kills this process: 'g' calls the
         * kernel once and answers 'd' with its return value; 'f' frees the outputs' pages
         * (fresh_outputs) and flushes the caches, then answers 'r'. The parent decides how
         * many calls there are and which are flushed, and times them. */
        live->stage = KF_STAGE_LOADED;
        int fl = fcntl(KF_RUN_GO_FD, F_GETFL);
        if (fl >= 0) fcntl(KF_RUN_GO_FD, F_SETFL, fl | O_NONBLOCK);
        if (send_msg('r', 0, 0.0, 0) == 0) {
            for (;;) {
                char cmd = 0;
                if (read_cmd(&cmd) != 0) break;
                if (cmd == 'G') {
                    /* the next byte: the slot whose inputs this call reads (runproto.h) */
                    unsigned char slot = 0xFF;
                    if (read_cmd((char *)&slot) != 0 || slot >= (unsigned)nslots) break;
                    for (int i = 0; i < slot_nin; i++) args[i] = slot_in[slot][i];
                    if (!(slot_mapped >> slot & 1)) {
                        /* the set's first call in this process: its pages mapped before the
                         * kernel runs (inside the parent's clock: the parent's warm-up calls
                         * go through every set first, verify.c timed_prepare) */
                        populate(base + slot_lo[slot], slot_hi[slot] - slot_lo[slot], 0);
                        slot_mapped |= 1ull << slot;
                    }
                    cmd = 'g';
                } else if (cmd == 'g') {
                    for (int i = 0; i < slot_nin; i++) args[i] = slot_in[0][i];
                }
                if (cmd == 'g') {
                    live->stage = KF_STAGE_KERNEL;
                    rc = fn(args);
                    if (send_msg('d', rc, 0.0, 1) != 0) break;
                } else if (cmd == 'f') {
                    live->stage = KF_STAGE_BETWEEN;
                    const char *why = NULL;
                    if (fresh && free_output_pages(ctl, base, nbufs) != 0)
                        why = "timing on fresh output pages: madvise(MADV_REMOVE) failed";
                    else if (!flush && flush_bytes > 0 && (flush = malloc(flush_bytes)) == NULL)
                        why = "cannot allocate the cache-flush buffer";
                    if (why) {
                        /* said, and out at once: _exit runs nothing of the kernel's */
                        snprintf(ctl->message, sizeof ctl->message, "%s: %s", why, strerror(errno));
                        _exit(KF_RUN_EXIT_USAGE);
                    }
                    if (flush && !flushed_once++) memset(flush, 1, flush_bytes);
                    if (flush) flush_caches(flush, flush_bytes);
                    if (send_msg('r', 0, 0.0, 0) != 0) break;
                } else {
                    break;
                }
            }
        }
        /* the pipe broke: wait for the parent's kill (its wall-clock limit at the latest)
         * rather than report anything */
        for (;;) pause();
    }
    live->stage = KF_STAGE_KERNEL;
    mprotect(base, ctl_size, PROT_READ);
    if (mode == KF_RUN_CHECK) {
        mark_guards(ctl, ctl_size, total, nbufs, 0);
        rc = fn(args);
        mark_guards(ctl, ctl_size, total, nbufs, 1);
    } else {
        double t0 = now_s();
        do {
            rc = fn(args);
            warm++;
        } while (rc == 0 && now_s() - t0 < warmup && warm < 1000);
        double start = now_s(), spent = 0;
        while (rc == 0 && reps < max_reps) {
            if (fresh && free_output_pages(ctl, base, nbufs) != 0) {
                fresh_errno = errno;
                break;
            }
            if (flush) {
                live->stage = KF_STAGE_BETWEEN;
                flush_caches(flush, flush_bytes);
            }
            live->rep = reps;
            live->stage = KF_STAGE_KERNEL;
            double a = now_s();
            rc = fn(args);
            double dt = now_s() - a;
            times_buf[reps++] = dt;
            spent += dt;
            /* enough kernel time, or (when every rep flushes a cache of hundreds of MiB
             * first: 60 ms a rep seen on a VM reporting a 480 MiB L3) four times that in
             * wall time, as long as min_reps ran */
            if (reps >= min_reps && (spent >= min_time || now_s() - start >= 4 * min_time)) break;
            if (now_s() - start > budget && budget > 0) break;
        }
    }
    mprotect(base, ctl_size, PROT_READ | PROT_WRITE);
    if (fresh_errno) {
        snprintf(ctl->message, sizeof ctl->message,
                 "timing on fresh output pages: madvise(MADV_REMOVE) failed: %s", strerror(fresh_errno));
        return KF_RUN_EXIT_USAGE;
    }
    ctl->kernel_rc = rc;
    ctl->reps = reps;
    ctl->warmups = warm;
    memcpy(ctl->times, times_buf, sizeof(double) * (size_t)reps);
    ctl->done = 1;
    live->stage = KF_STAGE_DONE;
    free(flush); /* so that a memory checker sees no leak of the runner's own */
    fflush(NULL);
    return KF_RUN_EXIT_OK;
}
