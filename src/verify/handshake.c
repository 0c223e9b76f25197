/*
 * The handshake's parent side (runproto.h; handshake.h): every call of a handshake run
 * started, timed and ended here, the run stopped between calls while verify.c's callbacks
 * prepare and check them, device targets' copies and kept sets asked for, the timing
 * plan's end decided (min_time, its wall cap, a stable median, max_reps, the budget).
 */
#include "verify/handshake.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { OUT_CHECK = 1, OUT_LAST = 2 };

static int hs_send(hs_run *h, char c) {
    ssize_t n;
    while ((n = write(h->go_fd, &c, 1)) < 0 && errno == EINTR) {}
    return n == 1 ? 0 : -1;
}

/* Every other process of the run's group (descendants the kernel forked; the filter keeps
 * them in it) stopped or gone, by their /proc entries: kill(-pgid, SIGSTOP) reaches them
 * all, but only the leader's stop is reported to this process. 0, or -1 when one is still
 * running after a second. *cpu gets the CPU seconds of every process of the group, the
 * leader included (user + system of all its threads, dead ones too, and of the children
 * it reaped), as /proc says once all are stopped; -1 without /proc. */
static int group_wait_stopped(pid_t pgid, double *cpu) {
    static long tck;
    if (tck <= 0) tck = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
    *cpu = -1;
    for (int pass = 0; pass < 10000; pass++) {
        DIR *d = opendir("/proc");
        if (!d) return 0; /* no /proc: the leader's stop is all there is to see */
        int running = 0;
        unsigned long long ticks = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL && !running) {
            if (!isdigit((unsigned char)e->d_name[0])) continue;
            long p = strtol(e->d_name, NULL, 10);
            char path[64], st[512];
            snprintf(path, sizeof path, "/proc/%ld/stat", p);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            ssize_t n = read(fd, st, sizeof st - 1);
            close(fd);
            if (n <= 0) continue;
            st[n] = 0;
            /* pid (comm) state ppid pgrp ...: comm may hold anything, so from the last ')' */
            const char *rp = strrchr(st, ')');
            char state;
            long ppid, pgrp;
            unsigned long long ut = 0, stm = 0, cut = 0, cst = 0;
            int nf = rp ? sscanf(rp + 1, " %c %ld %ld %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu",
                                 &state, &ppid, &pgrp, &ut, &stm, &cut, &cst) : 0;
            if (nf < 3 || pgrp != (long)pgid) continue;
            if (nf == 7) ticks += ut + stm + cut + cst;
            if (p != (long)pgid && state != 'T' && state != 't' && state != 'Z' && state != 'X')
                running = 1;
        }
        closedir(d);
        if (!running) {
            *cpu = (double)ticks / (double)tck;
            return 0;
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* Stop every process of the run and wait until each is stopped, so that nothing of the
 * kernel's runs while the parent reads the outputs or writes the next call's inputs.
 * 0, or -1 when the run is over (the runner died: its exit is the verdict) or a process
 * of it would not stop (h->stuck). */
static int hs_stop_group(hs_run *h);

static int hs_stop(hs_run *h) {
    if (h->stopped) return 0;
    double t0 = kf_now();
    int rc = hs_stop_group(h);
    h->acc_stop += kf_now() - t0;
    return rc;
}

static int hs_stop_group(hs_run *h) {
    if (kill(-h->pid, SIGSTOP) != 0) kill(h->pid, SIGSTOP);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    while (waitid(P_PID, (id_t)h->pid, &si, WSTOPPED | WEXITED | WNOWAIT) < 0 && errno == EINTR) {}
    if (si.si_code != CLD_STOPPED) return -1;
    /* consume the stop report (the exit report stays for the end of the run) */
    memset(&si, 0, sizeof si);
    while (waitid(P_PID, (id_t)h->pid, &si, WSTOPPED) < 0 && errno == EINTR) {}
    h->stopped = 1;
    double cpu, t = kf_now();
    if (group_wait_stopped(h->pid, &cpu) != 0) {
        h->stuck = 1;
        return -1;
    }
    /* the CPU-time witness: what the run's processes used between the first stop and
     * this one, against the time they were running (kf_sbx.hs_cpu_s) */
    if (cpu >= 0 && h->sb_cpu_first < 0) {
        h->sb_cpu_first = cpu;
    } else if (cpu >= 0 && h->t_cont > 0) {
        h->run_wall += t - h->t_cont;
        h->sb_cpu_last = cpu;
    }
    return 0;
}

static void hs_cont(hs_run *h) {
    if (!h->stopped) return;
    h->t_cont = kf_now();
    kill(-h->pid, SIGCONT);
    kill(h->pid, SIGCONT);
    h->stopped = 0;
}

int kf_sbx_can_evict(void) {
#if defined(__x86_64__) || defined(__aarch64__)
    return 1;
#else
    return 0;
#endif
}

/* The inputs (inputs != 0) and outputs (outputs != 0) out of every cache level of every
 * core: clflushopt where the CPU has it (weakly ordered, 14x faster than clflush over 128
 * MiB on the 2-vCPU VM), else clflush; arm64 dc civac. The parent's mapping of the region
 * is the runner's memory, so the lines are the ones the kernel will read. x86-64 and arm64;
 * elsewhere the data stays where the writes left it. */
static void evict_buffers(const kf_sbx *sb, int inputs, int outputs) {
#if defined(__x86_64__) || defined(__aarch64__)
#if defined(__x86_64__)
    static int opt = -1;
    if (opt < 0) opt = __builtin_cpu_supports("clflushopt") != 0;
#endif
    for (int k = 0; k < sb->nargs; k++) {
        if (!(sb->is_output[k] ? outputs : inputs)) continue;
        /* an input: the buffer the call reads (its resident set's slot, where there are) */
        int i = sb->is_output[k] || sb->call_slot < 0 ? k : kf_sbx_in_buf(sb, sb->call_slot, k);
        const char *p = kf_sbx_data(sb, i);
        for (uint64_t o = 0; o < sb->size[i]; o += 64) {
#if defined(__x86_64__)
            if (opt) __asm__ volatile("clflushopt (%0)" ::"r"(p + o) : "memory");
            else __asm__ volatile("clflush (%0)" ::"r"(p + o) : "memory");
#else
            __asm__ volatile("dc civac, %0" ::"r"(p + o) : "memory");
#endif
        }
    }
#if defined(__x86_64__)
    __asm__ volatile("mfence" ::: "memory");
#else
    __asm__ volatile("dsb ish" ::: "memory");
#endif
#else
    (void)sb;
    (void)inputs;
    (void)outputs;
#endif
}

/* The next call's inputs and poisoned outputs (lim->prepare), written with the run
 * stopped: a thread or process the kernel left running between calls sees nothing of the
 * next call before it starts (issue 24: work between calls). After a flush that freed the
 * outputs' pages (fresh_outputs) they are not poisoned: writing them would hand the kernel
 * pages already in place. Then the cache state of a timed call (and of the final one, which
 * the kernel cannot tell from it): with h->evict every buffer evicted by the parent (the
 * freed output pages excepted: touching them would bring them back); after the runner's
 * flush, what the parent wrote since (the flush ran before the writes, with the run going). */
static void hs_prepare_calls(hs_run *h, kf_sbx *sb, int final, int after_flush, int before);

static void hs_prepare(hs_run *h, kf_sbx *sb, int final) {
    int after_flush = h->in_flush, before = h->set;
    double t0 = kf_now();
    hs_prepare_calls(h, sb, final, after_flush, before);
    h->acc_prep += kf_now() - t0;
    if (h->lim->calls > 0) h->parent_s += kf_now() - t0;
}

static void hs_prepare_calls(hs_run *h, kf_sbx *sb, int final, int after_flush, int before) {
    if (h->lim->prepare) h->set = h->lim->prepare(h->lim->cb_arg, final, !(after_flush && h->fresh));
    sb->hs_last_set = h->set;
    if (h->evict && h->t_timing > 0) {
        evict_buffers(sb, 1, !h->fresh);
        sb->hs_evicted++;
    } else if (after_flush) {
        evict_buffers(sb, h->set != before, !h->fresh);
    }
}

/* Check the call that just returned (the run is stopped: hs_stop at its 'd'). */
static void hs_check(hs_run *h, kf_sbx *sb) {
    h->checks++;
    double t0 = kf_now();
    kf_vstatus vs = h->lim->check(h->lim->cb_arg, h->set, h->check_detail, sizeof h->check_detail);
    h->acc_check += kf_now() - t0;
    if (h->lim->calls > 0) h->parent_s += kf_now() - t0;
    if (vs != KF_V_OK) {
        h->check_vs = vs;
        sb->hs_fail_set = h->set;
        sb->hs_fail_call = sb->hs_calls;
        h->finished = 1;
    }
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The timed reps' median has settled (kf_sbx_limits.stable_rel): see there. */
static int hs_stable(const hs_run *h, const kf_sbx *sb) {
    int n = sb->hs_reps;
    double rel = h->lim->stable_rel;
    if (rel <= 0 || n < h->min_reps + 2 || n < 5 || h->checks < 2) return 0;
    double a[KF_RUN_MAX_REPS], b[KF_RUN_MAX_REPS];
    const double *t = h->device ? sb->hs_dev : sb->hs_times; /* the times that count */
    memcpy(a, t, sizeof a[0] * (size_t)n);
    memcpy(b, t, sizeof b[0] * (size_t)(n - 2));
    qsort(a, (size_t)n, sizeof a[0], cmp_dbl);
    qsort(b, (size_t)(n - 2), sizeof b[0], cmp_dbl);
    double ma = n % 2 ? a[n / 2] : 0.5 * (a[n / 2 - 1] + a[n / 2]);
    int m = n - 2;
    double mb = m % 2 ? b[m / 2] : 0.5 * (b[m / 2 - 1] + b[m / 2]);
    double iqr = a[(3 * n) / 4] - a[n / 4];
    return ma > 0 && fabs(ma - mb) <= rel * ma && iqr <= 4 * rel * ma;
}

/* The 1-based rank j of the order statistic that bounds a median from below after n
 * draws: the largest j with P(B <= j - 1) <= alpha for B ~ Binomial(n, 1/2), the chance
 * that fewer than j draws fall below the true median, i.e. that the j-th smallest lies above
 * it; 0 when even the smallest is not bound enough (n too small). */
static int median_lower_rank(int n, double alpha) {
    double p = ldexp(1.0, -n), cdf = 0; /* P(B = 0) */
    int j = 0;
    for (int k = 0; k < n; k++) {
        cdf += p;
        if (cdf > alpha) break;
        j = k + 1;
        p *= (double)(n - k) / (double)(k + 1); /* P(B = k + 1) */
    }
    return j;
}

/* Racing (kf_sbx_limits.race_s): min_reps timed reps, and even the fastest of them slower
 * than KF_VERIFY_RACE_MARGIN times the best so far; or, from KF_VERIFY_RACE_MEDIAN_REPS reps
 * on, a lower confidence bound of their median slower than KF_VERIFY_RACE_MEDIAN_MARGIN
 * times it (a candidate a little slower than the best, whose fastest reps the noise brings
 * near it, shown slower by its median with a small chance of error instead of by its
 * fastest rep). */
static int hs_slower(const hs_run *h, const kf_sbx *sb) {
    int n = sb->hs_reps;
    if (h->lim->race_s <= 0 || n < h->min_reps || n < 1) return 0;
    const double *t = h->device ? sb->hs_dev : sb->hs_times; /* the times that count */
    double lo = t[0];
    for (int i = 1; i < n; i++) lo = fmin(lo, t[i]);
    if (lo > KF_VERIFY_RACE_MARGIN * h->lim->race_s) return 1;
    int j = n >= KF_VERIFY_RACE_MEDIAN_REPS ? median_lower_rank(n, KF_VERIFY_RACE_MEDIAN_ALPHA) : 0;
    if (j < 1) return 0;
    double a[KF_RUN_MAX_REPS];
    memcpy(a, t, sizeof a[0] * (size_t)n);
    qsort(a, (size_t)n, sizeof a[0], cmp_dbl);
    return a[j - 1] > KF_VERIFY_RACE_MEDIAN_MARGIN * h->lim->race_s;
}

/* The seconds one thread waited for a CPU while runnable (/proc/.../schedstat, second
 * field, ns); -1 without it. */
static double thread_run_delay(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char b[128];
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    if (n <= 0) return -1;
    b[n] = 0;
    unsigned long long run_ns, wait_ns;
    if (sscanf(b, "%llu %llu", &run_ns, &wait_ns) != 2) return -1;
    return (double)wait_ns * 1e-9;
}

/* How long the two threads a device call's overheads run on waited for a CPU, so far: the
 * runner's main thread (it launches and waits for the completion) and this one (its
 * wake-up at the 'd'). A loaded machine delays them by milliseconds that the call's host
 * time holds and the device's time does not (dev_times_believable allows for it; the
 * device's own worker threads are left out: their waits fall mostly inside the device's
 * time, and counting them allowed as much as the call itself). -1 without schedstat.
 * Read outside the call's clock. */
static double hs_run_delay(const hs_run *h) {
    char path[96];
    snprintf(path, sizeof path, "/proc/%ld/task/%ld/schedstat", (long)h->pid, (long)h->pid);
    double runner = thread_run_delay(path), self = thread_run_delay("/proc/thread-self/schedstat");
    return runner < 0 || self < 0 ? -1 : runner + self;
}

/* Start one call: the clock starts just before the run is continued and the byte goes out. */
static int hs_go(hs_run *h, kf_sbx *sb) {
    if (h->device) h->delay_go = hs_run_delay(h);
    double t = kf_now();
    /* the run stopped since its last call goes on after the clock started: whatever the
     * kernel left running does its share inside the call's time */
    hs_cont(h);
    /* with resident sets, the slot of the call's set follows the 'G' (runproto.h) */
    if (sb->nslots > 0 && sb->call_slot >= 0 && sb->call_slot < sb->nslots) {
        char m[2] = {'G', (char)sb->call_slot};
        ssize_t n;
        while ((n = write(h->go_fd, m, 2)) < 0 && errno == EINTR) {}
        if (n != 2) return -1;
    } else if (hs_send(h, 'g') != 0) {
        return -1;
    }
    h->t_go = t;
    /* the warm-up counts from the first call after the check calls (kf_sbx_limits.calls) */
    if (!h->started || sb->hs_calls == h->lim->calls) h->t_first_go = t;
    h->started = 1;
    h->in_call = 1;
    return 0;
}

/* A device target's next call: its inputs and poisoned outputs written into the region
 * with the run stopped, then 'i' (the runner copies the region to the device); the call
 * starts at the 'r' that ends the copy (after a flush of the device's caches, 'f', before
 * a timed call where the plan flushes), so the copies lie outside the call's clock. */
static int hs_dev_next(hs_run *h, kf_sbx *sb) {
    if (hs_stop(h) != 0) {
        h->finished = 1;
        return -1;
    }
    hs_prepare(h, sb, h->final);
    hs_cont(h);
    /* the inputs too where the set changed ('i'); else the outputs' guards and poison
     * only ('j'): the inputs on the device are the set's, as the parent wrote them, or
     * as the last call left them (a kernel that changed them fails the next checked call,
     * which compares them, as before) */
    char cmd = h->dev_set == h->set ? 'j' : 'i';
    h->keeping = -1;
    if (h->lim->keep_sets && h->set >= 0 && h->set < KF_RUN_STASH_SLOTS) {
        /* a set the runner keeps is restored on the device; a new one is kept there */
        if (kf_sbx_set_kept(sb, h->set)) {
            cmd = (char)(KF_RUN_CMD_FROM_STASH | h->set);
        } else if (!h->keep_failed) {
            cmd = (char)(KF_RUN_CMD_STASH_IN | h->set);
            h->keeping = h->set;
        }
    }
    if (hs_send(h, cmd) != 0) return -1;
    h->dev_set = h->set;
    h->t_copy = kf_now();
    h->in_copy = 1;
    return 0;
}

/* The device side of hs_message's 'r' (see hs_dev_next): 0 when handled, -1 when the 'r'
 * came out of turn. */
static int hs_dev_ready(hs_run *h, kf_sbx *sb) {
    if (h->in_call) return -1;
    if (h->in_ping) {
        /* an empty round trip, by the same clock as the calls: what a call's host time
         * holds beyond the device's work but the launch (dev_times_believable) */
        h->in_ping = 0;
        if (sb->hs_pings < KF_RUN_MAX_REPS) sb->hs_ping[sb->hs_pings++] = kf_now() - h->t_ping;
        if (h->ping_check && hs_send(h, 'o') == 0) h->out_for = OUT_CHECK, h->t_out = kf_now();
        else if (!h->ping_check) hs_dev_next(h, sb);
        return 0;
    }
    if (h->in_copy) {
        h->in_copy = 0;
        if (h->keeping >= 0) sb->dev_kept |= 1ull << h->keeping;
        h->keeping = -1;
        h->acc_copy += kf_now() - h->t_copy;
        if (h->t_timing > 0 && h->flush) {
            if (hs_send(h, 'f') == 0) h->in_flush = 1;
            return 0;
        }
        hs_go(h, sb);
        return 0;
    }
    if (h->in_flush) {
        h->in_flush = 0;
        hs_go(h, sb);
        return 0;
    }
    if (h->out_for) {
        /* the outputs are back in the region: read them with the run stopped */
        int what = h->out_for;
        h->acc_out += kf_now() - h->t_out;
        h->out_for = 0;
        if (hs_stop(h) != 0 || what == OUT_LAST) {
            h->finished = 1;
            return 0;
        }
        hs_check(h, sb);
        if (!h->finished && sb->hs_calls == h->lim->calls) {
            /* the check calls passed: a check run is over; a time run's timing plan starts,
             * its random checks counted afresh */
            sb->hs_checks_end_s = kf_now() - h->t_fork;
            h->checks = 0;
            if (h->mode != KF_RUN_TIME) h->finished = 1;
        }
        if (!h->finished) hs_dev_next(h, sb);
        return 0;
    }
    if (h->started) return -1;
    hs_dev_next(h, sb); /* loaded: the first call */
    return 0;
}

/* Handle one message from the runner; sets h->finished when the run is over for the
 * parent (the last call returned, or a message came out of turn: h->violation). */
static void hs_message(hs_run *h, kf_sbx *sb, const char *m) {
    switch (m[0]) {
    case 'R':
        /* (device) ready, but the set was not kept on the device: none asked again */
        if (!h->device || !h->in_copy || h->keeping < 0) break;
        h->keeping = -1;
        h->keep_failed = 1;
        /* fall through */
    case 'r':
        if (!h->started && sb->start_s == 0) sb->start_s = kf_now() - h->t_fork;
        if (h->device) {
            if (hs_dev_ready(h, sb) == 0) return;
            break;
        }
        /* after loading (the first call is a warm-up: no flush), or after an 'f' */
        if (h->in_call || (h->started && !h->in_flush)) break;
        /* the first call, or the next after a flush: prepared with the run stopped */
        if (hs_stop(h) != 0) {
            h->finished = 1;
            return;
        }
        hs_prepare(h, sb, h->final);
        h->in_flush = 0;
        if (hs_go(h, sb) != 0) break;
        return;
    case 'd': {
        double t = kf_now();
        if (!h->in_call) break;
        h->in_call = 0;
        int32_t rc;
        double dev;
        memcpy(&rc, m + 1, 4);
        memcpy(&dev, m + 5, 8);
        h->rc = rc;
        sb->hs_calls++;
        double dt = t - h->t_go;
        h->acc_call += dt;
        if (h->device && rc == 0 && sb->hs_calls <= h->lim->calls && h->lim->check) {
            /* a check call (kf_sbx_limits.calls): its outputs come back and are checked with
             * the run stopped (hs_dev_ready), then the next call is prepared on its own set
             * (hs_dev_next) */
            if (hs_send(h, 'o') != 0) break;
            h->out_for = OUT_CHECK, h->t_out = kf_now();
            return;
        }
        if (!h->device && rc == 0 && sb->hs_calls <= h->lim->calls && h->lim->check) {
            /* a CPU check call (kf_sbx_limits.calls): checked in full with the run stopped,
             * then the next call prepared on its own set, as on a device */
            if (hs_stop(h) != 0) {
                h->finished = 1;
                return;
            }
            hs_check(h, sb);
            if (!h->finished && sb->hs_calls == h->lim->calls) {
                sb->hs_checks_end_s = kf_now() - h->t_fork;
                h->checks = 0;
                if (h->mode != KF_RUN_TIME) h->finished = 1;
            }
            if (h->finished) return;
            hs_prepare(h, sb, h->final);
            if (hs_go(h, sb) != 0) break;
            return;
        }
        int last = h->mode != KF_RUN_TIME || rc != 0 || h->final, timed = 0;
        if (!last && h->t_timing <= 0) {
            /* warm-up, back to back: at least one call, then until warmup seconds passed */
            sb->hs_warm++;
            if (t - h->t_first_go >= h->warmup || sb->hs_warm >= 1000)
                h->t_timing = t;
        } else if (!last) {
            /* on a device the device's own time is what counts, checked against dt by the
             * caller; until then the plan counts it only where it is believable */
            sb->hs_dev[sb->hs_reps] = dev;
            double dl = h->device && h->delay_go >= 0 ? hs_run_delay(h) : -1;
            sb->hs_delay[sb->hs_reps] = dl >= h->delay_go ? dl - h->delay_go : -1;
            sb->hs_times[sb->hs_reps++] = dt;
            timed = 1;
            h->spent += h->device && dev > 0 && dev <= dt ? dev : dt;
            /* enough measured time (or, when every call flushes a cache of hundreds of MiB
             * first, four times that in wall time), at least min_reps; or the cap; or the
             * budget */
            if (sb->hs_reps >= h->min_reps && (h->spent >= h->min_time || t - h->t_timing >= 4 * h->min_time)) {
                last = 1;
                sb->hs_stop = h->spent >= h->min_time ? "time" : "wall";
            }
            /* or the median has settled (kf_sbx_limits.stable_rel) */
            if (!last && hs_stable(h, sb)) last = 1, sb->hs_stop = "stable";
            /* or it cannot be the best (kf_sbx_limits.race_s) */
            if (!last && hs_slower(h, sb)) last = 1, sb->hs_stop = "slower";
            if (!last && (sb->hs_reps >= h->max_reps || sb->hs_reps >= KF_RUN_MAX_REPS)) last = 1, sb->hs_stop = "reps";
            if (!last && h->budget > 0 && t - h->t_timing > h->budget) last = 1, sb->hs_stop = "budget";
        }
        if (last && h->lim->prepare && !h->final && rc == 0 && h->mode == KF_RUN_TIME) {
            /* one more call, untimed, which the kernel cannot tell from a timed one: on a set
             * other than the first call's and the previous one's, checked in full by the
             * caller (a kernel that replays an earlier result fails it whatever the random
             * order was) */
            h->final = 1;
            last = 0;
        } else if (last && h->device) {
            /* the outputs back from the device first */
            if (hs_send(h, 'o') != 0) break;
            h->out_for = OUT_LAST, h->t_out = kf_now();
            return;
        } else if (last) {
            /* the caller reads the outputs: nothing of the kernel's runs any more (the
             * group is killed next) */
            hs_stop(h);
            h->finished = 1;
            return;
        }
        /* a random quarter of the calls, up to four, is checked like a verification run
         * (the last is checked by the caller); which ones, only this process knows. The
         * run is stopped while the outputs are read and while the next call's inputs and
         * outputs are written, so nothing the kernel left running sees them before the
         * call's clock starts (hs_go) */
        int check = h->lim->check && h->checks < 4 && kf_verify_rng_next(&h->rng) % 4 == 0;
        if (h->device && timed) {
            /* after each timed call an empty round trip ('p'), then as below */
            h->ping_check = check;
            h->t_ping = kf_now();
            if (hs_send(h, 'p') != 0) break;
            h->in_ping = 1;
            return;
        }
        if (h->device) {
            /* checked: the outputs come back first (hs_dev_ready checks them), else the
             * next call */
            if (check && hs_send(h, 'o') == 0) h->out_for = OUT_CHECK, h->t_out = kf_now();
            else if (!check) hs_dev_next(h, sb);
            return;
        }
        if (check) {
            if (hs_stop(h) != 0) {
                h->finished = 1;
                return;
            }
            hs_check(h, sb);
            if (h->finished) return;
        }
        /* the next call: (a timed one) caches flushed by the runner first, then its inputs
         * and poisoned outputs with the run stopped (at the 'r' that ends the flush) */
        if (h->t_timing > 0 && h->flush) {
            hs_cont(h);
            if (hs_send(h, 'f') != 0) break;
            h->in_flush = 1;
        } else {
            if (hs_stop(h) != 0) {
                h->finished = 1;
                return;
            }
            hs_prepare(h, sb, h->final);
            if (hs_go(h, sb) != 0) break;
        }
        return;
    }
    default:
        break;
    }
    h->violation = m[0] ? m[0] : '?';
    h->finished = 1;
}

/* Read what the runner sent (the done pipe is readable) and handle whole messages. */
void kf_hs_read(hs_run *h, kf_sbx *sb) {
    ssize_t n = read(h->done_fd, h->buf + h->have, sizeof h->buf - h->have);
    if (n <= 0) {
        if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
            close(h->done_fd); /* the runner is gone or closed it: its exit tells the rest */
            h->done_fd = -1;
        }
        return;
    }
    h->have += (size_t)n;
    size_t at = 0;
    while (at < h->have && !h->finished) {
        size_t len = h->buf[at] == 'd' ? KF_RUN_MSG_D : 1;
        if (h->have - at < len) break;
        hs_message(h, sb, h->buf + at);
        at += len;
    }
    memmove(h->buf, h->buf + at, h->have - at);
    h->have -= at;
}
