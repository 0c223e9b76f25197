/*
 * Internal interface of the verifier (src/verify/): the context's layout, typed element
 * access, the output comparison and the sandbox that runs kforge-runner.
 *
 *   verify.c   public API: options, input sets, reference, the check/time sequence
 *   values.c   PRNG, dtype rounding/storage, poison patterns
 *   draw.c     the input distributions (a counter-based generator per block)
 *   compare.c  output comparison against the reference (tolerances, NaN/Inf, ties)
 *   sandbox.c  the memfd region (guards), fork/exec of the runner under limits, outcome
 *   memcheck.c the memory-checker run (valgrind on the CPU, compute-sanitizer on CUDA)
 *   profile.c  the profiled run (Nsight Compute) of a candidate that passed verification
 *   refproc.c  a module task's sets and its reference process (the module in float64)
 */
#ifndef KF_VERIFY_INT_H
#define KF_VERIFY_INT_H

#include "kforge/verify.h"
#include "kforge/platform.h"

#include <limits.h>
#include "verify/runproto.h"

#include <stddef.h>

/* ---- values.c ---- */

typedef struct kf_rng {
    uint64_t s[4];
} kf_rng;

void kf_verify_rng_seed(kf_rng *r, uint64_t seed);
uint64_t kf_verify_rng_next(kf_rng *r);

/* The input distributions, drawn in this order by the sets (set s gets s % KF_DIST_COUNT):
 * uniform (-1, 1), normal, wide magnitude (2^-6..2^6, either sign), heavy tailed (a normal
 * over a small uniform, clipped to +-mag), offset (min(KF_OFFSET_CENTRE, mag/2) +- 1: a mean far from zero,
 * which breaks one-pass variances and softmax without the max subtraction), large
 * magnitude (|x| in [mag/2, mag]: exp of an unshifted input overflows). mag is the input's
 * magnitude limit (verify.c: the smallest kf_op_def.mag of the ops that read it, else
 * KF_MAG_DEFAULT).
 * The offset's centre c against its spread s = 1/sqrt(3) sets how hard the set is: a
 * one-pass variance loses u c^2 / s^2 of its value (u = 2^-24: 1.2e-2 at c = 256, a
 * hundred times the f32 tolerance), a careful two-pass or shifted one u c / s times a small
 * growth factor (2.6e-5 at c = 256); at c = 1000 even a correctly rounded f32 mean leaves
 * 5e-5 in a layer norm's result, half the tolerance, so a careful kernel would fail by
 * chance (docs/design-notes.md). */
#define KF_OFFSET_CENTRE 256.0
enum { KF_DIST_UNIFORM, KF_DIST_NORMAL, KF_DIST_WIDE, KF_DIST_HEAVY, KF_DIST_OFFSET,
       KF_DIST_LARGE, KF_DIST_COUNT };
_Static_assert(KF_DIST_COUNT == KF_VERIFY_NDIST, "verify.h's KF_VERIFY_NDIST");

/* ---- draw.c ---- */

/* Draw the n elements of one block of an input, keyed key (kf_verify_block_key), into data
 * (stored in dt) and, when vals is not NULL, their stored values as doubles. pos: strictly
 * positive values are needed; mag: the magnitude limit of the offset, large and heavy
 * sets (<= 0: KF_MAG_DEFAULT); both ignored when has_range. Never stores an exact zero
 * unless the range is [0, 0]. The values depend on (key, element) alone. */
void kf_verify_draw_block(uint64_t key, int dist, kf_dtype dt, int pos, double mag, int has_range, double lo,
                          double hi, void *data, double *vals, int64_t n);
/* The counter-based generator: 64 random bits for counter ctr of key (word w of a block's
 * element e is counter 2e + w), and the key of block `block` of an input keyed base. */
uint64_t kf_verify_draw_bits(uint64_t key, uint64_t ctr);
uint64_t kf_verify_block_key(uint64_t base, int64_t block);

/* ---- values.c ---- */

/* Element i of a typed array as a double (exact for every supported dtype but i64 beyond
 * 2^53). */
double kf_verify_load(kf_dtype dt, const void *data, int64_t i);
/* Store v rounded to nearest-even into element i (i64: rounded to nearest, saturated). */
void kf_verify_store(kf_dtype dt, void *data, int64_t i, double v);
/* Whether element i holds exactly the poison pattern; fill n elements with poison (par:
 * with this process's threads, never while a CPU candidate is being timed). */
int kf_verify_is_poison(kf_dtype dt, const void *data, int64_t i);
void kf_verify_poison(kf_dtype dt, void *data, int64_t n, int par);
/* ---- stream.c ---- */

/* n bytes copied from src to dst, or dst filled with the es-byte element elem (es divides
 * 16), for the large writes between a CPU candidate's calls: streaming stores on x86-64,
 * split over threads created for the write and joined before it returns (no worker left
 * spinning beside the next call). */
void kf_verify_stream_copy(void *dst, const void *src, size_t n);
void kf_verify_stream_fill(void *dst, const void *elem, size_t es, size_t n);

/* Whether the verifier can store this dtype. */
int kf_verify_dtype_ok(kf_dtype dt);
/* Elements per chunk of the verifier's parallel passes over outputs (poison, reference
 * conversion, comparison): partial sums are kept per chunk and added in chunk order, so a
 * verdict and its numbers do not depend on the thread count. */
#define KF_VERIFY_CHUNK ((int64_t)1 << 16)

/* ---- the context ---- */

typedef struct kf_vset {
    int dist;       /* KF_DIST_* */
    double shrink;  /* the magnitude limit's factor the set was drawn with: 1, or halved until
                       its reference fitted the output's dtype (sets.c) */
    void **in;      /* per graph input: typed data (the exact bytes the kernel gets); NULL
                       entries when the context keeps no inputs (keep_in 0) */
    uint64_t **in_hash; /* per graph input, per block of KF_DRAW_BLOCK elements: the keyed
                       hash of the drawn bytes (keep_in 0 only), for the unchanged-input check */
    void **ref;     /* per graph output: reference rounded to the output dtype, typed; with
                       keep_ref 0 only the ready set's, pointing into the shared buffers */
    double *ref_rms;/* per graph output: RMS of the rounded reference (finite elements) */
    float **bound;  /* per graph output: the reference's error bound per element
                       (kf_interp_run_bounds), added to the tolerance; NULL when zero */
} kf_vset;

struct kf_verify_ctx {
    const kf_graph *g;      /* borrowed: must outlive the context */
    kf_verify_opts opts;
    uint64_t seed;          /* the seed actually used */
    char workdir[1024];
    char runner[1024];      /* "" until resolved */
    int nin, nout;
    int64_t *in_numel, *out_numel;
    size_t *in_bytes, *out_bytes;
    int nsets;
    kf_vset *sets;
    double bound_k;         /* the longest contraction's length K (1 without one): the
                               NMSE allowance of the bounds is sum bound^2 / K (compare.c) */
    int host_timing;        /* a CPU candidate's timed calls are under way: the checks between
                               them run on this thread alone (values.c kf_verify_poison); a
                               device candidate's checks use every thread */
    double t_draw, t_ref;   /* seconds spent drawing the sets and computing the reference */
    double race_s;          /* kf_verify_race's best time so far (0: off); atomic access */
    /* The memory plan (sets.c): what the context keeps of each set. keep_in 0: inputs are
     * drawn again from the seed into each run's buffers and checked unchanged by keyed block
     * hashes; keep_ref 0: one set's reference at a time, computed again when a check needs
     * another set (the float64 scratch then stays allocated). */
    int keep_in, keep_ref;
    int ready;              /* keep_ref 0: the set whose reference the shared buffers hold */
    uint64_t hkey;          /* the block hashes' key: from the clock and address space, not
                               the seed, so a kernel cannot know it */
    int bounded;            /* the graph has error bounds (an op beyond pointwise) */
    int pipe;               /* the sets drawn and referenced chunk by chunk (sets.c set_pipe) */
    int *pos;               /* per input: drawn strictly positive (kf_graph_input_domains) */
    double *mag;            /* per input: its magnitude limit */
    double **din, **dout, **dbnd; /* keep_ref 0: the interpreter's float64 scratch */
    /* A CPU candidate's buffer region, kept for the next candidate of the task (issue 30:
     * its 4 KiB shared pages made and freed per candidate cost more than their one write);
     * taken and given back atomically, so two threads on one context never share one, and
     * made new when kf_sbx_reuse refuses it. regions_made / regions_reused: counts, for the
     * tests and the log. KFORGE_REGION_FRESH=1 makes one per candidate, as before. */
    struct kf_sbx *kept_region;
    int regions_made, regions_reused;
    /* Resident input sets (issue 30; verify.c resident_plan): sets written into a region's
     * slots (every set of a new region, once), sets found changed after a candidate's runs
     * and written again, and whether the fallback to copying was said at level 1 yet. */
    int slot_sets_written, slot_sets_restored, copied_said;
    void **lz_ref;          /* keep_ref 0: per output, the ready set's typed reference */
    float **lz_bound;       /* keep_ref 0: per output, its bound (NULL: not bounded) */
};

/* ---- sets.c ---- */

typedef struct kf_sbx kf_sbx; /* below (sandbox.c) */

/* Elements per independently seeded block of a drawn input (and per hash block): the
 * blocks are drawn in parallel, the values depend only on (seed, set, input, block). */
#define KF_DRAW_BLOCK 65536
/* Free the sets, the plan's buffers and scratch. */
void kf_verify_sets_free(kf_verify_ctx *c);
/* Make set s's reference (ref, bound, ref_rms) readable: a no-op when the context keeps
 * every reference, else computed again into the shared buffers when another set is there. */
kf_status kf_verify_set_ready(kf_verify_ctx *c, int s, kf_error *err);
/* Set s's inputs into the region's input buffers: copied, or drawn again from the seed
 * (par: with this process's threads; 0 while a CPU candidate is being timed). */
void kf_verify_put_inputs(const kf_verify_ctx *c, kf_sbx *sb, int s, int par);
/* 1 when an input in the region differs from set s's: *which input, its first changed
 * element, how many changed, the value drawn and the value found there. */
int kf_verify_input_changed(const kf_verify_ctx *c, const kf_sbx *sb, int s, int *which,
                            int64_t *first, int64_t *nchanged, double *was, double *now);

/* ---- verify.c, shared with memcheck.c ---- */

/* A context's fixed part from the graph and options (opts copied, the workdir and runner
 * resolved, the buffer sizes): what kf_verify_ctx_new draws the sets into and
 * kf_verify_ctx_from_parts (refcache.c) reads them into. seed = opts.seed (0 stays 0). */
kf_verify_ctx *kf_verify_ctx_shell(const kf_graph *g, const kf_verify_opts *o);

/* Output j of set v from its float64 reference dout_j (bounds dbnd_j, may be NULL): the
 * reference rounded to the output's dtype, its RMS, the bounds as floats. */
void kf_verify_set_ref(kf_verify_ctx *c, kf_vset *v, int j, const double *dout_j, const double *dbnd_j);
/* Draw input i of set s (its dtype, the set's distribution, magnitude limit mag, the task's
 * range) into data, as every set is drawn. */
void kf_verify_draw_input(const kf_verify_ctx *c, int s, int i, double mag, void *data);

/* ---- refproc.c ---- */

/* A module task's sets (c->g->module): inputs drawn as for any task, params from the
 * module's weights file, the reference from a separate PyTorch process in float64. Fills
 * c->sets, c->nsets, c->t_draw, c->t_ref. An error names the task (the reference process
 * failing, hanging, writing the wrong sizes; the module's files missing or wrong). */
kf_status kf_verify_module_sets(kf_verify_ctx *c, kf_error *err);

kf_status kf_verify_find_runner(const kf_verify_ctx *c, char *out, size_t cap, kf_error *err);

/* ---- compare.c ---- */

typedef struct kf_cmp {
    kf_vstatus status;      /* OK, UNWRITTEN or MISMATCH */
    int64_t first_bad;      /* -1 if none */
    double got, want;
    int64_t nbad;
    double max_abs, max_rel, nmse;
    char detail[1024];
} kf_cmp;

/* Compare output j of set s (data as the kernel left it) with the reference (set s ready:
 * kf_verify_set_ready); ins: the run's input buffers, checked unchanged (an argmax's ties
 * are judged on them). */
void kf_verify_compare(const kf_verify_ctx *ctx, int s, int j, const void *data,
                       const void *const *ins, kf_cmp *res);

/* "[3, 17]" for flat index i of shape sh. */
void kf_verify_format_index(const kf_shape *sh, int64_t i, char *buf, size_t cap);

/* ---- sandbox.c ---- */

typedef struct kf_sbx {
    int fd;
    uint8_t *base;
    size_t total;
    size_t ctl_size;    /* bytes of the control pages */
    kf_run_ctl *ctl;
    kf_run_live *live;
    int nbufs;
    size_t data_bytes;  /* sum of buffer sizes (the working set) */
    int reap_pid;       /* the last run's runner, killed while stopped, not yet reaped (the
                           next run and kf_sbx_free reap it); 0 = none */
    /* The parent's own copy of the layout: the shared control page is writable by the
     * candidate's process, so it is rewritten from here before each run and never read
     * back for the layout. */
    uint64_t off[KF_RUN_MAX_BUFS], size[KF_RUN_MAX_BUFS];
    int is_output[KF_RUN_MAX_BUFS];
    /* A device target's handshake runs: an output's poison pattern (bytes of one element),
     * written by the parent at the start of its data and spread on the device by the
     * runner ('i', 'j' in runproto.h); 0 = the parent poisons the whole output */
    int poison_size[KF_RUN_MAX_BUFS];
    /* What the parent saw of the last handshake run (lim->handshake), by its own clock:
     * the timed calls' durations (time mode), the warm-up calls before them, all calls,
     * and the cache flushes between timed calls. */
    int hs_reps, hs_warm, hs_calls;
    int hs_last_set;        /* the input set of the last call (prepare's return value) */
    int hs_fail_set, hs_fail_call; /* where a random check failed */
    int hs_evicted;         /* calls that started on buffers the parent evicted (lim->evict) */
    double hs_times[KF_RUN_MAX_REPS];
    /* The CPU-time witness of the last handshake run: the CPU seconds every process of the
     * run used (from /proc, read with all of them stopped) between the first stop and the
     * last, and the seconds they were running in that span (continued to stopped); 0 without
     * /proc. hs_pinned: the CPUs the run was pinned to (--threads), 0 when not pinned. */
    double hs_cpu_s, hs_run_s;
    int hs_pinned;
    double hs_dev[KF_RUN_MAX_REPS]; /* device targets: the device's own time of each timed
                               call, as the runner reported it (checked against hs_times) */
    double hs_ping[KF_RUN_MAX_REPS]; /* device targets: the parent's clock around an empty
                               round trip ('p') after each timed call but the last */
    int hs_pings;
    double hs_delay[KF_RUN_MAX_REPS]; /* device targets: the seconds the runner's threads and
                               the parent's waited for a CPU during each timed call
                               (schedstat), -1 where unknown */
    double start_s;         /* the last run: fork to the runner's first message (the
                               artifact loaded), by the parent's clock; 0 without one */
    double hs_checks_end_s; /* a run with check calls (kf_sbx_limits.calls): fork to the end
                               of the last one's check; 0 when they did not all pass */
    int hs_call_timeout;    /* the last run ended because one call passed call_wall_s */
    const char *hs_stop;    /* why the timed calls ended (kf_vresult.time_stop), or "" */
    uint64_t dev_kept;      /* a device run with kf_sbx_limits.keep_sets: bit s set once the
                               runner keeps set s's inputs on the device (the parent then
                               writes no inputs for a call on set s: kf_sbx_set_kept) */
    /* Resident input sets (CPU, issue 30; runproto.h 'G'): the kernel's arguments are
     * buffers 0..nargs-1 (nargs = nbufs without slots); with nslots > 0 set s lives in slot
     * s (slot 0: buffers 0..slot_nin-1, slot s > 0: nargs + (s - 1) * slot_nin + i) and a
     * call's input pointers are its slot's (call_slot, set by the caller before each call;
     * -1: the buffers 0..nargs-1, 'g'). slots_ok: every slot holds its set as drawn (the
     * caller's record, verify.c: written once, checked after every candidate). */
    int nargs, nslots, slot_nin, call_slot, slots_ok;
    /* The slot that holds set s now (s, but for the timing run's final call: its set is
     * written into the slot of the previous call's set, so that the final call's input
     * pointers are the ones the kernel saw last, with other inputs; verify.c timed_prepare),
     * and the slots so
     * lent (bit per slot: written back by resident_sweep, no fault of the kernel's). */
    signed char slot_of[KF_RUN_STASH_SLOTS];
    uint64_t slots_lent;
    int last_pgid;          /* the process group of the last run (its runner's pid); 0 = none */
    int reused;             /* times a context took the region again for another candidate */
} kf_sbx;

typedef struct kf_sbx_limits {
    double wall_s, cpu_s;
    int64_t mem_bytes;      /* address space beyond the region */
    int64_t output_cap;
    int threads;
    const char *runner;
    const char *workdir;
    unsigned long tag;      /* makes the output file name unique */
    /* Optional, for the memory-checker run (memcheck.c); zero/NULL = off. */
    const char *const *wrapper; /* NULL-terminated argv run in front of "runner FD" (e.g.
                                   valgrind and its flags); wrapper[0] is an absolute path */
    int no_mem_limit;       /* lift the address-space limit (a checker reserves a lot) */
    int poll_output;        /* enforce output_cap by watching the output file instead of
                               RLIMIT_FSIZE (device runtimes write cache files) */
    int checker_exit;       /* > 0: the wrapper's exit status for "errors found", which
                               becomes KF_V_MEMCHECK */
    int no_landlock;        /* the wrapper fails under Landlock (compute-sanitizer): no
                               write confinement for this run, and the description says so */
    const char *extra_env;  /* one more "NAME=VALUE" for the child's environment */
    kf_buf *output;         /* receives the head of the run's stdout+stderr ... */
    size_t output_keep;     /* ... up to this many bytes */
    double *cpu_used;       /* receives the CPU seconds the run took */
    int handshake;          /* calls started and ended through pipes, timed by the parent,
                               the runner killed after the last (runproto.h); results in
                               sb->hs_*; ignored with a wrapper. Device targets: the runner
                               copies the region in and out on the parent's word */
    /* Handshake runs only, optional: prepare is called before each call (with the run's
     * processes stopped) to put an input set in the region and, when poison is set, poison
     * the outputs (not after a flush that freed their pages), and returns the set (final: the
     * extra last call, on a set other than the first call's and the last's); check is called
     * after a random few calls, with the run's processes stopped, and returns KF_V_OK or the
     * failure with a detail. The last call is the caller's. */
    int (*prepare)(void *arg, int final, int poison);
    kf_vstatus (*check)(void *arg, int set, char *detail, size_t cap);
    void *cb_arg;
    /* > 0: the timing run may end before min_time once the median is stable (issue 30):
     * at least min_reps + 2 reps, the median of all reps within this fraction of the
     * median without the last two, the middle half of the reps within 4 times this
     * fraction of the median, and at least two calls checked at random (besides the
     * final one); 0: min_time as before */
    double stable_rel;
    /* > 0: the timing run may end once it has min_reps timed reps and the fastest of them
     * is more than KF_VERIFY_RACE_MARGIN times this many seconds (kf_verify_race): hs_stop
     * "slower". The final call follows as after any other stop. 0: off */
    double race_s;
    /* Handshake time runs: before each timed call (and the final one) the parent evicts
     * every task buffer, inputs and outputs, from every cache level of every core with
     * clflushopt/clflush (arm64: dc civac) over its own mapping of the region, with the
     * run stopped, instead of the runner writing a buffer of twice the last-level cache
     * (docs/design-notes.md, issue 30). Only where kf_sbx_can_evict(). */
    int evict;
    /* Device handshake runs, optional: > 0 makes the run's first `calls` calls check calls,
     * each on the set prepare returns (called before every call, the first included) and
     * checked in full through check, with the run stopped, before the next is prepared. A
     * check run (KF_RUN_CHECK) ends after them; a time run goes on in the same process with
     * its timing plan (warm-up, timed calls, the final call), prepare and check serving
     * both (device targets: one context per candidate, issue 30). wall_s covers the whole
     * run; the time the parent spends preparing and checking between calls, with the run
     * stopped, is added to it. */
    int calls;
    /* Device handshake runs, optional: the runner keeps each input set's inputs on the
     * device after the set's first call (sets 0-63; runproto.h 0x80 | s) and restores
     * them from there for the set's later calls instead of the parent writing them and the
     * runner copying them in (issue 30). The caller checks the device has room. */
    int keep_sets;
    /* Handshake runs, optional: > 0 ends the run as a timeout when one call runs longer
     * (a hang costs one call's limit, not the run's) */
    double call_wall_s;
} kf_sbx_limits;

/* 1 when the runner of the current run keeps set s's inputs on the device
 * (kf_sbx_limits.keep_sets): a call on set s needs no inputs written into the region. */
static inline int kf_sbx_set_kept(const kf_sbx *sb, int s) {
    return s >= 0 && s < 64 && (sb->dev_kept >> s & 1);
}

/* The buffer that holds input i of set s: its resident slot's (sb->nslots > 0), else the
 * kernel's input buffer i. */
static inline int kf_sbx_in_buf(const kf_sbx *sb, int s, int i) {
    int slot = sb->nslots > 0 && s >= 0 && s < sb->nslots ? sb->slot_of[s] : 0;
    return slot > 0 && slot < sb->nslots ? sb->nargs + (slot - 1) * sb->slot_nin + i : i;
}
/* 1 where the parent can evict the region's lines from the caches (x86-64, arm64). */
int kf_sbx_can_evict(void);

/* Caps on what one run may leave in its scratch directory (entries of any kind, and
 * allocated bytes); more is an output-flood. Each file is also capped by RLIMIT_FSIZE on
 * the CPU. */
#define KF_SCRATCH_MAX_FILES 4096
#define KF_SCRATCH_MAX_BYTES (256ll << 20)
/* Remove a directory tree whose writers are all dead (never follows links). */
void kf_sbx_remove_tree(const char *path);

/* Create a region with nbufs buffers of the given sizes (is_output per buffer). */
kf_status kf_sbx_new(const size_t *sizes, const int *is_output, int nbufs, kf_sbx *sb,
                     kf_error *err);
void kf_sbx_free(kf_sbx *sb);
/* The last run's runner reaped now (killed and stopped: kf_sbx.reap_pid); a no-op without. */
void kf_sbx_reap(kf_sbx *sb);
/* Grow a region without slots (a kept one, after kf_sbx_reuse) by the slots of resident
 * input sets: nslots - 1 slots of its first slot_nin buffers' sizes after its last buffer
 * (slot 0 is those buffers), the memfd and the parent's mapping made larger. Every new byte
 * is the caller's to write (the sets, kf_sbx_fill_guards); slots_ok is 0. On failure the
 * region is as it was. */
kf_status kf_sbx_add_slots(kf_sbx *sb, int nslots, int slot_nin, kf_error *err);
/* Make a region kept from an earlier candidate's runs ready for another candidate's: 1 when
 * it can be used, the parent's record of the last run cleared and the control and live
 * pages zeroed as a new region's are; 0 when it must not be (the memfd resized or sealed,
 * or a process of the last run's group still there: it could still write into the
 * region), and the caller frees it and makes a new one. Every byte of the buffers and
 * guards is the caller's to write before the first run, as in a new region (the caller
 * writes them all: kf_verify_load_set). */
int kf_sbx_reuse(kf_sbx *sb);
void *kf_sbx_data(const kf_sbx *sb, int i);
/* Fill every guard zone with its pattern. */
void kf_sbx_fill_guards(kf_sbx *sb);
/* First touched guard byte: returns 1 and sets *buf and *off (bytes relative to the data
 * start: negative before it, >= size after it); 0 when every guard is intact. */
int kf_sbx_check_guards(const kf_sbx *sb, int *buf, int64_t *off);
/* Run the runner once on the region as configured in sb->ctl (mode etc. set by the
 * caller; this resets the result fields). *vs is the verdict of the run itself: OK when
 * the runner finished and the kernel returned 0, else the failure with a detail.
 * Returns an error only when the runner could not be started at all. */
kf_status kf_sbx_run(kf_sbx *sb, const kf_sbx_limits *lim, kf_vstatus *vs, char *detail,
                     size_t cap, double *wall_s, kf_error *err);

/* ---- confine.c: seccomp + Landlock for the sandboxed child ---- */

#include <linux/filter.h>

#define KF_CONFINE_FILTER_MAX 96

typedef struct kf_confine {
    int on;                 /* 0 under KFORGE_SANDBOX=off: nothing below is applied */
    int seccomp;            /* the syscall filter will be installed */
    int landlock_abi;       /* Landlock ABI version; 0 = none (landlock_note says why) */
    int drop_caps;          /* kforge holds capabilities: the child drops them all (when on) */
    int root;               /* real uid 0 (RLIMIT_NPROC does not apply) */
    int ruleset_fd;         /* the Landlock ruleset (prepare), -1 without one */
    int dev_rules;          /* device nodes and directories allowed for writing */
    char seccomp_note[96];  /* why there is no filter, when seccomp == 0 */
    unsigned short filter_len;           /* the seccomp program (prepare) */
    struct sock_filter filter[KF_CONFINE_FILTER_MAX];
    char landlock_note[96]; /* why there is no Landlock, when landlock_abi == 0 */
} kf_confine;

/* Exit status of the child when the confinement could not be applied (the reason, from
 * kf_confine_apply, is in the control page's message). */
#define KF_CONFINE_EXIT 125

/* What the next run would get (KFORGE_SANDBOX, kernel support, capabilities); builds
 * nothing, holds nothing. */
void kf_confine_probe(kf_confine *cf);
/* In the parent, before fork: probe, then build the seccomp program and the Landlock
 * ruleset allowing writes beneath scratch (absolute, existing), beneath cache when not
 * NULL (a runtime's cache directory kept across runs: PoCL's), and on the device
 * allow-list. checker: the run has a memory checker in front of the runner, which may
 * then also write in /dev/shm and, under Landlock, ptrace and process_vm_* within the
 * sandbox (Landlock refuses them on processes outside it). An error only when
 * the kernel has Landlock but building the ruleset failed (the run must not go ahead
 * unconfined); release with kf_confine_release. */
kf_status kf_confine_prepare(kf_confine *cf, const char *scratch, const char *cache, int checker,
                             int no_landlock, kf_error *err);
void kf_confine_release(kf_confine *cf);
/* In the forked child, before execve: no_new_privs, drop capabilities, restrict itself
 * with ruleset_fd (the child's copy of cf->ruleset_fd; closed here), install the seccomp
 * filter. Async-signal-safe. Returns 0, or -1 with "sandbox: STEP failed, errno N" in msg. */
int kf_confine_apply(const kf_confine *cf, int ruleset_fd, char *msg, size_t cap);
/* The confinement part of kf_verify_sandbox_describe's text (scratch names the writable
 * directory); returns its KF_SANDBOX_* flags. */
unsigned kf_confine_describe(const kf_confine *cf, const char *scratch, char *buf, size_t cap);

/* ---- memcheck.c ---- */

/* The absolute path of an executable regular file into out (cap bytes): a name with a '/'
 * is that path (a relative one taken from the current directory), a bare name is looked
 * up in PATH's absolute directories. Returns 1 when found, else 0 with out "". Shared by
 * the tool lookups of memcheck.c and profile.c; reads the environment only. */
int kf_verify_find_exe(const char *name, char *out, size_t cap);
/* A CUDA toolkit program (name: "ncu", "compute-sanitizer") into out: from $env_var alone
 * when that is set, else PATH, $CUDA_HOME/bin, /usr/local/cuda/bin. KF_OK, or
 * KF_ERR_UNSUPPORTED naming what (for messages) and where it looked (out is then ""). */
kf_status kf_verify_find_cuda_tool(const char *name, const char *env_var, const char *what, char *out,
                                   size_t cap, kf_error *err);

/* compute-sanitizer's first report in the captured output out (n bytes): the first block
 * of "========= text" lines (a block ends at a prefixed line without text), the banner
 * and leading warnings skipped, at most 40 lines, prefixes stripped, then the last
 * "ERROR SUMMARY: N errors" line, appended to b. *nerrors gets that N, or -1 when there
 * is no summary. Returns the number of report lines (the summary not counted). */
int kf_verify_cs_report(const char *out, size_t n, kf_buf *b, int *nerrors);

/* 1 with why (a sentence naming the symbol and its library) set when the candidate's
 * artifact or source calls PyTorch, Python, a vendor library or the dynamic loader, which
 * the contract forbids; 0 otherwise (forbid.c). device: b is a device backend. */
int kf_verify_forbidden(const char *source, const char *artifact, int device, char *why, size_t cap);
/* kf_verify_forbidden on cand and artifact: r->status KF_V_FORBIDDEN and its detail set
 * when it refuses (verify.c). */
int kf_verify_refuse_forbidden(kf_backend *b, const kf_candidate *cand, const char *artifact, kf_vresult *r);

/* 1 when b runs candidates on a device (opencl, ...) rather than by dlopen on the CPU. */
int kf_verify_is_device(const kf_backend *b);
/* Inputs, poisoned outputs and fresh guards of set s into the region; with resident sets
 * (sb->nslots) the inputs are in the set's slot already: the next call's slot is set. */
void kf_verify_load_set(const kf_verify_ctx *c, kf_sbx *sb, int s);
/* Resolve the runner and the artifact's absolute path (*artifact may be redirected into
 * abs_art), the thread count, and a fresh buffer region for the task (verify.c). */
kf_status kf_verify_open_region(const kf_verify_ctx *c, kf_backend *b, const char **artifact,
                                char runner[PATH_MAX], char abs_art[PATH_MAX], int *threads,
                                kf_sbx *sb, kf_vresult *r, kf_error *err);

#endif
