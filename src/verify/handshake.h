/*
 * The handshake's parent side (runproto.h), shared by sandbox.c (which forks the runner and
 * watches it) and handshake.c (which drives the calls: starts and times them, prepares and
 * checks them through verify.c's callbacks, stops and continues the run between them).
 * Private to src/verify.
 */
#ifndef KF_VERIFY_HANDSHAKE_H
#define KF_VERIFY_HANDSHAKE_H

#include "verify/verify_int.h"

#include <sys/types.h>

typedef struct hs_run {
    int go_fd, done_fd;     /* write end of the go pipe, read end of the done pipe; -1 = none */
    uint32_t mode;
    int min_reps, max_reps;
    double min_time, warmup, budget;
    int flush;              /* time mode: each timed call is preceded by an 'f' */
    int fresh;              /* ... which also frees the outputs' pages (fresh_outputs) */
    int evict;              /* timed calls start on buffers the parent evicted (lim->evict) */
    int device;             /* a device target: 'i' before and 'o' after a checked call */
    int in_copy;            /* device: waiting for the 'r' that ends an 'i' or a 'j' */
    int dev_set;            /* device: the set whose inputs are on the device; -1 = none */
    int keeping;            /* device: the set the runner was told to keep (0x80 | s); -1 */
    int keep_failed;        /* device: the runner could not keep a set ('R'): no more asked */
    int out_for;            /* device: waiting for the 'r' that ends an 'o': OUT_CHECK/OUT_LAST */
    int in_ping, ping_check; /* device: waiting for the 'r' that ends a 'p' (and whether the
                               call before it is checked next); t_ping: when the 'p' went */
    double t_ping;
    double t_copy, t_out;   /* device: when the 'i'/'j' and the 'o' went */
    /* where the parent's time between calls went (kf_log level 2 at the end of the run) */
    double acc_stop, acc_prep, acc_copy, acc_out, acc_check, acc_call;
    double delay_go;        /* device: hs_run_delay when the call started */
    int stopped;            /* the run's processes are stopped (hs_stop) */
    double t_cont;          /* when they were last continued */
    double sb_cpu_first, sb_cpu_last, run_wall; /* the CPU-time witness (hs_stop) */
    int stuck;              /* one of them did not stop */
    int in_call, in_flush, finished, violation, rc, started;
    double t_go, t_first_go, t_timing, spent;
    double t_fork;          /* when the runner was forked (kf_sbx_run's t0) */
    double parent_s;        /* a check run of several calls: the parent's time between them */
    /* checking the calls (lim->prepare/check): the set the current call got, the random
     * checks made, and the first failure */
    pid_t pid;
    const kf_sbx_limits *lim;
    kf_rng rng;
    int set, checks, final;
    kf_vstatus check_vs;
    char check_detail[1200];
    char buf[64];
    size_t have;
} hs_run;

/* Read what the runner sent (the done pipe is readable) and handle whole messages; sets
 * h->finished when the run is over for the parent. */
void kf_hs_read(hs_run *h, kf_sbx *sb);

#endif
