/*
 * The wire format between the verifier (libkforge) and kforge-runner: one memfd, mapped
 * MAP_SHARED by both processes, laid out as
 *
 *   [control page(s): kf_run_ctl]   config written by the parent, results by the runner;
 *                                   read-only in the runner while the kernel runs, so a
 *                                   stray write cannot forge a result without faulting
 *   [live page: kf_run_live]        progress and allocation failures, always writable
 *                                   (the runner's malloc wrapper writes here mid-kernel)
 *   then per buffer: [guard KF_RUN_GUARD][data size][guard >= KF_RUN_GUARD, padded so the
 *                    next data is 64-byte aligned]
 *
 * The trailing guard starts exactly at data + size, so a write one element past the end
 * lands in it. Guards hold kf_run_guard_byte(offset within the guard zone).
 *
 * This header is compiled into the runner (which does not link libkforge), so it holds
 * only types, constants and static inline helpers.
 *
 * Device targets (opencl): the runner opens the backend named by ctl.target, gives each
 * buffer one device allocation laid out like the region ([guard][data][guard]), copies the
 * whole of it in, launches on views of the data parts, and copies the whole of it back, so
 * the parent checks guards, poison and inputs exactly as for the CPU.
 */
#ifndef KF_VERIFY_RUNPROTO_H
#define KF_VERIFY_RUNPROTO_H

#include <stdint.h>

#define KF_RUN_MAGIC 0x4b46524e52554e31ULL /* "KFRNRUN1" */
#define KF_RUN_VERSION 7

/* The handshake (ctl.handshake = 1; every run of kf_verify_artifact): every call of
 * the kernel is started and ended through two pipes, so that the parent times it with its
 * own clock and kills the runner the moment the last call has returned (no destructor,
 * atexit or signal handler of the kernel runs after a measured call). The runner reads
 * one byte from KF_RUN_GO_FD and writes to KF_RUN_DONE_FD:
 *   runner -> parent  'r'             ready (after loading, and after each 'f', 'i', 'o')
 *                     'd' int32 rc    the call returned rc; then a double: the device's
 *                         double dev  own time of the call in seconds (device targets:
 *                                     events), 0 on the CPU
 *   parent -> runner  'g'             call the kernel once (the parent's clock runs from
 *                                     just before this byte to just after the 'd')
 *                     'f'             free the outputs' pages (fresh_outputs) and flush
 *                                     the caches, then 'r'
 *                     'i'             (device targets) copy every input buffer of the
 *                                     region, guards included, to the device, and make
 *                                     every output's device copy: its guards copied,
 *                                     its data filled with its poison (the pattern of
 *                                     bufs[i].poison_size bytes at the start of the
 *                                     output's data in the region), then 'r'
 *                     0x80 | s        (device targets, s < 64) as 'i', and the inputs'
 *                                     device copies (guards, data) also kept in the
 *                                     runner's slot s on the device; 'R' instead of 'r'
 *                                     when the slot could not be made (nothing kept)
 *                     0xC0 | s        (device targets) as 'i', but the inputs restored
 *                                     on the device from slot s, not copied in (the
 *                                     parent writes no inputs for such a call)
 *                     'j'             (device targets) as 'i' for the outputs only: the
 *                                     inputs on the device are the same set's (the parent
 *                                     did not change it since the last 'i' or 'o')
 *                     'o'             (device targets) copy every buffer back, then 'r'
 *                     'p'             (device targets) nothing, then 'r': an empty round
 *                                     trip after each timed call, timed by the parent
 *                                     (the overhead a call's host time holds)
 * Device targets take the same handshake: the parent writes a call's inputs and its
 * outputs' poison pattern into the region and says 'i' (or 'j' where the set is the last
 * one's) before the call, and 'o' after a call it checks, so the copies lie outside the
 * call; the device's time of the call comes with 'd' and is
 * checked against the parent's clock (verify.c), never believed on its own.
 * The parent kills the runner after the 'd' of the last call; the runner never exits by
 * itself in this mode (but for its own failure between calls: a message and
 * KF_RUN_EXIT_USAGE; a device target's failed device call: KF_RUN_EXIT_DEVICE). Nothing
 * the runner writes into the control page counts in this mode: the times are the
 * parent's (and, on a device, checked against them), the kernel's return value comes with 'd' (a kernel that forges messages only
 * ends its own run early; see docs/kernel-contract.md). */
#define KF_RUN_MSG_D 13 /* bytes of a 'd' message */
#define KF_RUN_STASH_SLOTS 64
#define KF_RUN_CMD_STASH_IN 0x80   /* | slot */
#define KF_RUN_CMD_FROM_STASH 0xC0 /* | slot */
#define KF_RUN_GO_FD 4
#define KF_RUN_DONE_FD 5
#define KF_RUN_PAGE 4096
#define KF_RUN_GUARD 4096
#define KF_RUN_ALIGN 64
#define KF_RUN_MAX_BUFS 64
#define KF_RUN_MAX_REPS 4096

enum kf_run_mode { KF_RUN_CHECK = 1, KF_RUN_TIME = 2 };

/* Stages the runner reports in kf_run_live.stage. */
enum kf_run_stage {
    KF_STAGE_START = 0, /* mapped the memfd */
    KF_STAGE_LOADING,   /* inside dlopen/dlsym (constructors of the candidate run here) */
    KF_STAGE_LOADED,
    KF_STAGE_KERNEL,    /* inside the kernel (check run, or a timed/warm-up rep) */
    KF_STAGE_BETWEEN,   /* between reps (cache flush) */
    KF_STAGE_DONE       /* results written; about to exit(0) */
};

/* Exit codes of the runner; the parent trusts them only together with the stage. */
enum kf_run_exit {
    KF_RUN_EXIT_OK = 0,
    KF_RUN_EXIT_USAGE = 2,  /* bad arguments or a corrupt control page */
    KF_RUN_EXIT_LOAD = 3,   /* dlopen failed (message in ctl.message) */
    KF_RUN_EXIT_SYM = 4,    /* dlsym failed (message in ctl.message) */
    KF_RUN_EXIT_NOMEM = 5,  /* the runner's own allocation failed */
    KF_RUN_EXIT_DEVICE = 6  /* a device call failed (message in ctl.message) */
};

typedef struct kf_run_buf {
    uint64_t offset;  /* of the data, from the start of the memfd */
    uint64_t size;    /* bytes of data */
    int32_t is_output;
    int32_t poison_size;  /* outputs of a device target: bytes of the poison pattern ('i') */
} kf_run_buf;

typedef struct kf_run_ctl {
    /* written by the parent */
    uint64_t magic;
    uint32_t version;
    uint32_t mode;          /* kf_run_mode */
    uint64_t total_size;    /* bytes of the whole memfd */
    uint64_t live_offset;   /* offset of kf_run_live */
    int32_t nbufs;
    int32_t min_reps, max_reps;
    int32_t fresh_outputs;  /* timing on the CPU: free the outputs' pages before every rep */
    int32_t handshake;      /* 1: calls go through the pipes above */
    int32_t nargs;          /* the kernel's arguments: bufs[0..nargs) (0: all nbufs) */
    int32_t nslots, slot_nin; /* resident input sets ('G'): 0 = none; else bufs[nargs..nbufs)
                               are slots 1..nslots-1 of slot_nin inputs each */
    int32_t pad0;
    double min_time_s;      /* timing: keep repeating until this much measured time */
    double warmup_s;        /* timing: warm up for about this long (at least one run) */
    double budget_s;        /* timing: stop repeating after this much wall time */
    uint64_t flush_bytes;   /* timing: > 0 = touch this many bytes between reps */
    char entry[64];
    char target[32];        /* backend target ("cpu", "opencl:0"); "" = cpu (dlopen) */
    char artifact[4096];
    kf_run_buf bufs[KF_RUN_MAX_BUFS];
    /* written by the runner */
    int32_t done;           /* 1 when the results below are complete */
    int32_t kernel_rc;      /* the last kernel return value (first non-zero one) */
    int32_t reps;           /* timed reps in times[] */
    int32_t warmups;
    char message[1024];     /* load/symbol error text */
    double times[KF_RUN_MAX_REPS]; /* seconds per timed rep */
} kf_run_ctl;

typedef struct kf_run_live {
    volatile int32_t stage;       /* kf_run_stage */
    volatile int32_t rep;         /* current rep (-1 during warm-up / check run) */
    volatile int32_t nomem;       /* allocation failures seen by the runner's malloc */
    volatile int32_t pad;
    volatile uint64_t nomem_bytes;/* size of the first failed allocation */
} kf_run_live;

static inline uint64_t kf_run_round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Guard pattern byte at position i of a guard zone: position-dependent so a kernel that
 * happens to write one constant byte value still changes it. */
static inline uint8_t kf_run_guard_byte(uint64_t i) { return (uint8_t)(0xA5u ^ (i * 29u)); }

#endif
