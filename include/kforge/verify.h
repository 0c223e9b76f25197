/*
 * kforge verification harness. A candidate counts only when every rule of DESIGN.md
 * section 5 holds:
 *   - the reference is the float64 interpreter, computed here (a module task's: the module
 *     itself in float64, in a separate process); the candidate never sees it;
 *   - several input sets from several distributions (uniform, normal, wide magnitude,
 *     heavy tailed, offset, large magnitude), never zeros, positive where an op's domain
 *     needs it, within the magnitude a careful float32 form of the ops survives;
 *   - outputs are NaN-poisoned before every run and every element must be written;
 *   - guard zones around every buffer; inputs checked unchanged after the run;
 *   - per-dtype tolerances (abs + rel) plus NMSE; NaN/Inf mismatches fail;
 *   - the candidate runs in a child process (kforge-runner) with CPU-time, memory,
 *     wall-clock and output-size limits; a crash, hang or flood is a result;
 *   - timing: warm-up, many repetitions, median, cache flush between repetitions when the
 *     working set fits in cache;
 *   - results faster than the roofline floor are rejected as impossible.
 */
#ifndef KFORGE_VERIFY_H
#define KFORGE_VERIFY_H

#include "kforge/core.h"
#include "kforge/ir.h"
#include "kforge/backend.h"
#include "kforge/candidate.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kf_vstatus {
    KF_V_OK = 0,
    KF_V_COMPILE_ERROR,  /* did not compile (set by the caller that compiled) */
    KF_V_LOAD_ERROR,     /* artifact would not load or entry missing */
    KF_V_CRASH,          /* killed by a signal (SIGSEGV, SIGABRT, ...) */
    KF_V_TIMEOUT,        /* wall-clock limit */
    KF_V_CPU_LIMIT,      /* CPU-time limit */
    KF_V_MEM_LIMIT,      /* memory limit (allocation failure in the runner) */
    KF_V_OUTPUT_FLOOD,   /* wrote more than the stdout/stderr cap */
    KF_V_KERNEL_ERROR,   /* kernel returned non-zero */
    KF_V_UNWRITTEN,      /* an output element still holds the poison */
    KF_V_OOB_WRITE,      /* a guard zone was touched */
    KF_V_INPUT_MODIFIED, /* an input changed */
    KF_V_MISMATCH,       /* numbers out of tolerance (incl. NaN/Inf mismatch) */
    KF_V_IMPOSSIBLE,     /* faster than the roofline floor */
    KF_V_INTERNAL,       /* kforge failed to run the check */
    KF_V_MEMCHECK,       /* the memory checker (valgrind, compute-sanitizer) reported an error */
    KF_V_NO_CODE,        /* the generation agent gave no usable candidate: a reply without a
                            code block, an empty or cut-off reply (set by the loop) */
    KF_V_AGENT_ERROR,    /* the generation agent could not be asked: the model's endpoint
                            failed after its retries, timed out or sent garbage (set by the loop) */
    KF_V_FORBIDDEN,      /* the kernel calls PyTorch, Python, a vendor library or the dynamic
                            loader (found in its artifact's symbols or its source, before it ran) */
    KF_V_COUNT
} kf_vstatus;

const char *kf_vstatus_name(kf_vstatus s); /* "ok", "compile-error", "crash", ... */
/* the name of input distribution d (0 .. KF_VERIFY_NDIST - 1): "uniform", "normal",
 * "wide-magnitude", "heavy-tailed", "offset", "large-magnitude" */
const char *kf_verify_dist_name(int dist);

/* the input distributions (kf_verify_opts.nsets) */
#define KF_VERIFY_NDIST 6

typedef struct kf_vresult {
    kf_vstatus status;
    char detail[2048];      /* human-readable reason: signal, first bad element, log tail */
    int sets_run;           /* input sets checked */
    int bad_set;            /* input set that failed, -1 if none */
    char bad_dist[32];      /* its distribution name */
    int bad_output;         /* output index of the first failure, -1 if none */
    int64_t first_bad;      /* flat index of the first bad element, -1 if none */
    double got, want;       /* values at first_bad */
    double max_abs_err, max_rel_err, nmse; /* worst over all sets and outputs */
    double dist_nmse[KF_VERIFY_NDIST], dist_max_rel[KF_VERIFY_NDIST]; /* the same, worst over
                               the sets of each distribution (kf_verify_dist_name(d)) */
    unsigned dist_seen;     /* bit d: a set of distribution d was compared */
    /* timing (only when timed and correct) */
    int timed;
    int reps;
    char time_stop[12];     /* why the timed calls ended: "time" (min_time measured),
                               "wall" (4 x min_time of wall time), "stable" (the median
                               settled), "reps" (max_reps), "budget" (the run's budget),
                               "slower" (raced: kf_verify_race) */
    double time_ms;         /* median */
    double time_min_ms, time_mean_ms;
    double time_host_ms;    /* the median of kforge's own clock around each timed call: the
                               time itself on the CPU; on a device it also holds the launch,
                               the wait for completion and the runner's wake-up, and bounds
                               the device's own time_ms (docs/kernel-contract.md) */
    double time_gap_ms, time_wait_ms, time_ping_ms, time_allow_ms; /* device targets: the
                               median of each timed call's host time less its device time
                               (the gap), the median time the runner's threads and kforge's
                               waited for a CPU during a call (-1: unknown), the median of
                               the parent's clock around an empty round trip with the runner
                               after each call, and what the gap less the wait may be
                               (0 elsewhere; docs/kernel-contract.md) */
    double timing_cpu_s, timing_run_s; /* the CPU-time witness: CPU seconds the timing
                               run's processes used, and the seconds they were running
                               (between its first and last stop; 0 without /proc) */
    int evicted;            /* timed calls (and the final one) that started on buffers the
                               parent had evicted from the caches (CPU, x86-64/arm64, data
                               within the last-level cache); 0 elsewhere */
    double run_wall_s;      /* wall time the whole check took */
    /* where run_wall_s went (the loop's per-phase breakdown, issue 30): building the
     * artifact, starting the runner processes (fork to the runner's first 'ready', the
     * kernel loaded), the check runs' calls and the timing run's calls (each after its
     * start); seconds, 0 where the phase did not happen */
    double compile_s, start_s, check_s, timing_s;
    char checked_flags[64]; /* KF_VERIFY_MEMCHECK: the flags the checked build added to the
                               candidate's (kf_verify_memcheck_flags or _plain); "" elsewhere */
    char resources[512];    /* the compiler's resource report where the platform gives one
                               (CUDA: "KERNEL regs=R smem=S local=L max_threads=T", one per
                               kernel, "; "-separated; local = spills + local arrays, bytes
                               per thread); "" elsewhere */
} kf_vresult;

typedef struct kf_verify_opts {
    int nsets;              /* input sets (default KF_VERIFY_DEFAULT_SETS: one per
                               distribution); set s is drawn from distribution s % 6 of
                               uniform, normal, wide magnitude, heavy tailed, offset, large
                               magnitude, so fewer sets leave the last ones out */
    uint64_t seed;          /* 0 = draw from the clock */
    double wall_limit_s;    /* per runner process (default 20) */
    double cpu_limit_s;     /* per runner process (default 60) */
    int64_t mem_limit;      /* bytes of address space beyond the buffers (default 2 GiB) */
    int64_t output_cap;     /* bytes of stdout+stderr allowed (default 64 KiB) */
    int threads;            /* OMP_NUM_THREADS for the candidate (0 = device threads) */
    int time_it;            /* measure after a correct check */
    int min_reps;           /* default 5 */
    double min_time_s;      /* keep repeating until this much time is spent (default 0.2) */
    int max_reps;           /* default 200 */
    double stable_rel;      /* > 0: the timing may stop before min_time_s once the median
                               is stable within this fraction (and at least min_reps + 2
                               reps, two calls checked at random; the CPU's parent-timed
                               runs only). Default 0: min_time_s, as before; kforge synth
                               sets 0.01 */
    double floor_s;         /* roofline floor in seconds; 0 = unknown (no impossibility test) */
    int64_t cache_bytes;    /* flush between reps when the working set is below this */
    int fresh_outputs;      /* CPU timing: the outputs' pages are freed before every rep, so
                               the kernel faults in fresh ones, as when a framework allocates
                               its outputs on every call (PyTorch on the CPU: glibc maps
                               allocations of 32 MiB and more afresh each time) */
    int64_t host_mem;       /* bytes of memory the context may hold for its input sets and
                               references (0: KFORGE_HOST_MEM in GiB, else the machine's
                               physical memory); beyond it inputs are drawn again per run and
                               references computed again per check (src/verify/sets.c) */
    const char *workdir;    /* scratch directory (must exist) */
    const char *runner;     /* path of kforge-runner; NULL = find it (KFORGE_RUNNER, next to
                               the executable, or the build directory) */
    int module_ref;         /* a module task's reference: KF_MODULE_REF_CPU_F64 (default),
                               KF_MODULE_REF_CUDA_F32 or KF_MODULE_REF_CUDA_F64; any other than
                               the default on a graph task is KF_ERR_ARG (its reference is the
                               interpreter) */
} kf_verify_opts;

/* Where a module task's reference process runs the module (src/verify/refproc.c,
 * python/kforge_torch/reference.py; docs/design-notes.md, "A float32 GPU reference" and
 * "A float64 GPU reference"):
 *   CPU_F64   in float64 on the CPU: its own error far below a float32 kernel's tolerance;
 *   CUDA_F32  in float32 on torch's CUDA device, TF32 off, for modules too slow in float64
 *             on the CPU: its own rounding error is as large as a correct kernel's, so the
 *             comparison allows twice the tolerance (atol, rtol x2, NMSE x4: compare.c).
 *   CUDA_F64  in float64 on torch's CUDA device (fast where the GPU has FP64 units: H100,
 *             H200): the task's tolerance unchanged, and the same overflow marking as
 *             CPU_F64 (a float32 forward beside it, on the same device).
 * CUDA_F32 and CUDA_F64 share one device path in the process (a dtype apart); both are
 * chosen by the user only (kforge synth/verify --module-ref), never as a fallback; without
 * a CUDA device in torch the reference process refuses. */
enum { KF_MODULE_REF_CPU_F64 = 0, KF_MODULE_REF_CUDA_F32 = 1, KF_MODULE_REF_CUDA_F64 = 2 };
/* Contract: the kind's name as the CLI spells it ("cpu-f64", "cuda-f32", "cuda-f64"; NULL
 * for another value). */
const char *kf_module_ref_name(int kind);
/* Contract: the kind named name (kf_module_ref_name's spelling), or -1 for none. */
int kf_module_ref_parse(const char *name);
/* Contract: one line on how a module task's reference is computed under kind, and its
 * tolerance (static storage), for run records and reports. */
const char *kf_module_ref_describe(int kind);
/* Contract: the reference of a task under kind in a few words, for progress lines and
 * outcomes: "float64 reference" (cpu-f64), "float32 reference on the GPU (--module-ref
 * cuda-f32, TF32 off; tolerance doubled)", "float64 reference on the GPU (--module-ref
 * cuda-f64)" (static storage). */
const char *kf_module_ref_phrase(int kind);
/* Contract: KF_OK where kind may verify task g (the default on every task; another kind
 * on a module task only), else KF_ERR_ARG naming why. */
kf_status kf_module_ref_check(const kf_graph *g, int kind, kf_error *err);

void kf_verify_opts_default(kf_verify_opts *o);
/* The default number of input sets: one per distribution. */
#define KF_VERIFY_DEFAULT_SETS 6

typedef struct kf_verify_ctx kf_verify_ctx;

/* Draw the input sets for g and compute their reference outputs with the interpreter.
 * The context keeps them for every candidate checked against it. For a module task
 * (g->module) set 0's params come from the module's weights file, every other set's from
 * the reference process, which draws them like the module's own init, and the reference
 * from that separate PyTorch process in float64 (src/verify/refproc.c); that process failing
 * (exit, signal, KFORGE_REF_TIMEOUT, outputs or params of the wrong size) is KF_ERR_RUNTIME with a
 * message naming the task, a weights file of the wrong size KF_ERR_PARSE. */
kf_status kf_verify_ctx_new(const kf_graph *g, const kf_verify_opts *o, kf_verify_ctx **out,
                            kf_error *err);
void kf_verify_ctx_free(kf_verify_ctx *ctx);
/* Seconds kf_verify_ctx_new spent drawing the input sets and computing their reference
 * (0 and 0 when they came from a cache: kf_verify_ctx_load). */
void kf_verify_ctx_times(const kf_verify_ctx *ctx, double *draw_s, double *ref_s);

/* What the context keeps between checks (src/verify/sets.c's memory plan): every set's
 * inputs (else drawn again for each run) and every set's reference (else one at a time,
 * computed again when a check needs another set). */
void kf_verify_ctx_plan(const kf_verify_ctx *ctx, int *keeps_inputs, int *keeps_refs);

/* The input sets and their reference as parts a cache can keep (src/verify/refcache.c).
 * Bump KF_VERIFY_SETS_VERSION whenever the same seed would draw other values or give
 * another reference (a cached list then no longer matches). */
#define KF_VERIFY_SETS_VERSION 5 /* 2: draw.c's counter-based generator; 3: a sum's own rounding in its bound; 4: a softmax's bound capped, NaN-free, with its typical-error form; 5: every pointwise op's bound with its typical-error form */
/* Contract: ctx's sets as n byte blobs (returned): (*data)[k] of (*len)[k] bytes, part 0 a
 * header. The blobs are ctx's own (valid while it lives) but part 0, which is *head; the
 * caller frees *data, *len and *head. */
int kf_verify_ctx_parts(const kf_verify_ctx *ctx, const void ***data, size_t **len, void **head);
/* Contract: a context for g and o (o->seed must be the seed the parts were drawn with, not
 * 0) from the n parts kf_verify_ctx_parts gave (malloc'd blobs: those it uses it takes over,
 * setting data[k] to NULL; the caller frees the rest). KF_ERR_PARSE when the parts were made
 * for other sets (seed, set count, graph sizes, format version); nothing is used then. */
kf_status kf_verify_ctx_from_parts(const kf_graph *g, const kf_verify_opts *o, int n, void **data,
                                   const size_t *len, kf_verify_ctx **out, kf_error *err);

/* Check (and, when opts.time_it, time) an already-compiled artifact of candidate c on
 * backend b. Always fills r; returns KF_OK when the check itself could be carried out
 * (whatever the verdict), or an error when kforge could not run it at all. */
kf_status kf_verify_artifact(kf_verify_ctx *ctx, kf_backend *b, const kf_candidate *c,
                             const char *artifact, kf_vresult *r, kf_error *err);

/* Racing (issue 30). The fastest of a timing's reps must exceed the best time so far by
 * this factor for the timing to end early. */
#define KF_VERIFY_RACE_MARGIN 1.25
/* Or, from KF_VERIFY_RACE_MEDIAN_REPS reps on, a lower confidence bound of the reps' median
 * (an order statistic: distribution-free, at KF_VERIFY_RACE_MEDIAN_ALPHA, the chance that
 * the true median lies below it) above the best time by this factor. */
#define KF_VERIFY_RACE_MEDIAN_MARGIN 1.05
#define KF_VERIFY_RACE_MEDIAN_REPS 10
#define KF_VERIFY_RACE_MEDIAN_ALPHA 0.001
/* Contract: from now on, a candidate timed on ctx may end its timed calls once it has
 * min_reps of them and the fastest of those took more than KF_VERIFY_RACE_MARGIN x best_s
 * (seconds; the best time so far among the task's candidates): it cannot become the best,
 * so more reps would only refine the time of a loser. Its time is then the median of the
 * reps it took, r->time_stop "slower"; every check is as without racing (the check runs,
 * the random timed calls checked, the final call checked in full). best_s <= 0 turns it
 * off (the default). Parent-timed (handshake) runs only; safe to call between candidates
 * while another thread verifies on ctx (the value is read once at a timing's start). */
void kf_verify_race(kf_verify_ctx *ctx, double best_s);

/* Compile c with b into opts.workdir and check it; a compile error becomes
 * KF_V_COMPILE_ERROR with the compiler log's tail in r->detail. */
kf_status kf_verify_candidate(kf_verify_ctx *ctx, kf_backend *b, const kf_candidate *c,
                              kf_vresult *r, kf_error *err);

/* Run the artifact once, on input set 0, under the platform's memory checker in the
 * sandbox: valgrind memcheck on cpu (invalid reads/writes, uses of uninitialised values,
 * invalid frees and definite leaks of the kernel's own heap allocations, and reads or
 * writes into the shared buffers' guard zones, which the runner marks unaddressable for
 * it; an access past a guard zone, into the next buffer, is not seen), compute-sanitizer memcheck on
 * cuda (device accesses outside every live allocation, e.g. a write far enough past a
 * buffer to skip its guard zone; shared/local overruns, misaligned accesses, device-heap
 * misuse, device allocations never freed). Meant for the final candidate: it is slow.
 * Sequence: one native run on set 0, checked as usual (guards, inputs, outputs), which also
 * measures the run's CPU and wall time; then the checker run, with limits of 60 s + 1000x
 * that CPU time under valgrind, 60 s + 100x that wall time under compute-sanitizer (at
 * most 600 s, at least the context's limits), no address-space limit and an 8 MiB output
 * cap; then the usual checks on what the checker run left, so that a kernel that behaves
 * differently under the checker is caught.
 * Returns KF_OK whenever a verdict was reached, with r->status:
 *   KF_V_OK        clean;
 *   KF_V_MEMCHECK  the first report's lines (up to ~40, newline-separated; for
 *                  compute-sanitizer followed by its "ERROR SUMMARY: N errors" line) in
 *                  r->detail;
 *   other          the native run failed ("native run before the memory check on set 0
 *                  ...": crash, mismatch, oob-write, ...) or the checker run did without a
 *                  report ("run under valgrind on set 0 ...", "run under compute-sanitizer
 *                  ...": e.g. mismatch);
 * r->sets_run is 1 and bad_set 0 on a failure. Returns KF_ERR_UNSUPPORTED, with the reason
 * in err and r->detail, when the platform has no checker (opencl, metal) or it is not
 * installed (kf_verify_memcheck_tool), when it cannot run this artifact (instructions
 * valgrind cannot decode, e.g. AVX-512; compute-sanitizer failing to start or load what
 * loaded natively) or when it did not finish within its limits; these are no verdict on
 * the kernel (the caller reports "memcheck skipped: ..."). Other errors: kforge could not
 * run the check at all (no runner, no region). */
kf_status kf_verify_memcheck(kf_verify_ctx *ctx, kf_backend *b, const kf_candidate *c,
                             const char *artifact, kf_vresult *r, kf_error *err);

/* The memory checker kf_verify_memcheck runs for platform ("cpu", "cuda", ...; NULL or ""
 * is cpu): its executable's absolute path into path (cap bytes). cpu: valgrind on PATH.
 * cuda: compute-sanitizer, from $KFORGE_COMPUTE_SANITIZER alone when that is set, else
 * PATH, then $CUDA_HOME/bin, then /usr/local/cuda/bin. Returns KF_OK, or
 * KF_ERR_UNSUPPORTED with a reason naming what was looked for (path is then ""), also for a
 * platform without a checker; KF_ERR_ARG without a buffer. Reads the environment only. */
kf_status kf_verify_memcheck_tool(const char *platform, char *path, size_t cap, kf_error *err);

/* Extra compile flags for an artifact meant for kf_verify_memcheck on backend b: valgrind
 * cannot decode AVX-512 (and mis-reports some of it), so on a CPU with avx512f the checked
 * build uses -mno-avx512f; on x86-64 it also uses -mno-fma, because valgrind emulates FMA
 * instructions lane by lane through helper calls (a compute-bound kernel ran ~12x longer
 * under valgrind with them; docs/design-notes.md, "The memory check without FMA"); on cuda,
 * -lineinfo puts source lines into compute-sanitizer's reports. The same source is checked;
 * only the instruction set (and with it __FMA__, __AVX512F__ for the preprocessor) or the
 * debug information differs. Static storage; "" when nothing is needed. */
const char *kf_verify_memcheck_flags(const kf_backend *b);

/* The flags of kf_verify_memcheck_flags that the checker needs (without the ones that only
 * make it faster: -mno-fma): KF_VERIFY_MEMCHECK builds with these when the source does not
 * build with the full set (FMA intrinsics). Static storage; "" when nothing is needed. */
const char *kf_verify_memcheck_flags_plain(const kf_backend *b);
/* What the memory checker's run on b loses of the sandbox, as a phrase ("" when nothing):
 * compute-sanitizer's run has no Landlock and may connect() local sockets, because its
 * target fails otherwise (docs/design-notes.md). */
const char *kf_verify_memcheck_confinement(const kf_backend *b);

/* Run an artifact that has already passed verification once, on input set 0, under Nsight
 * Compute in the sandbox, and put ncu's raw counter table (`--csv --page raw`, read from
 * the --log-file ncu wrote in ctx's workdir, never from the candidate's output) into csv,
 * for kf_perf_ncu_parse. tool: the profiler's absolute path (kf_verify_profiler_tool);
 * whether b's platform can be profiled is the caller's question: the run itself works on
 * any backend (the tests use a stand-in ncu on cpu). Flags, limits and confinement in
 * src/verify/profile.c's note: sections SpeedOfLight, Occupancy, LaunchStats,
 * MemoryWorkloadAnalysis, WarpStateStats, SchedulerStats; at most 16 launches profiled;
 * GPU clocks not locked; wall limit the context's, at least 180 s on a device; no Landlock
 * and local connect() allowed (kf_verify_profile_confinement). No output/guard check is
 * made: counters are no verdict. detail (dcap bytes, may be NULL) gets the reason on
 * failure, "" on success.
 * Returns KF_OK with the table appended to csv (the caller's buffer; kf_buf_free);
 * KF_ERR_RUNTIME when the candidate's run under ncu failed (its verdict's name and the
 * sandbox's detail: "crash", "timeout" with the wall-clock limit, ..., then ncu's first
 * ==ERROR== line if any); KF_ERR_UNSUPPORTED when the run completed but ncu gave no
 * counters ("ncu wrote no counters", or ncu failing after the run, with its first
 * ==ERROR== or ==WARNING== line, e.g. ERR_NVGPUCTRPERM: no permission to the performance
 * counters), which is no finding on the kernel; KF_ERR_ARG for a missing argument or a
 * relative tool path; other errors: kforge could not run it at all (no runner, no region).
 * The log file is removed in every case. */
kf_status kf_verify_profile(kf_verify_ctx *ctx, kf_backend *b, const kf_candidate *c,
                            const char *artifact, const char *tool, kf_buf *csv, char *detail,
                            size_t dcap, kf_error *err);

/* The profiler kf_verify_profile runs for platform: on "cuda", ncu's absolute path into
 * path (cap bytes), from $KFORGE_NCU alone when that is set, else PATH, then
 * $CUDA_HOME/bin, then /usr/local/cuda/bin. Returns KF_OK, or KF_ERR_UNSUPPORTED with a
 * reason (path is then ""): KFORGE_NCU naming no executable (the message names the
 * variable), ncu not found (the message says where it looked), or "no profiler run for
 * platform 'P'" for any other platform (NULL or "" is cpu); KF_ERR_ARG without a buffer.
 * Reads the environment only. */
kf_status kf_verify_profiler_tool(const char *platform, char *path, size_t cap, kf_error *err);

/* What the profiled run loses of the sandbox, as a phrase for the run record: no Landlock,
 * and connect() to local sockets allowed, because ncu needs both. Static storage. */
const char *kf_verify_profile_confinement(void);

/* What a run of kf_verify_run is for. */
typedef enum kf_verify_mode {
    KF_VERIFY_CHECK = 0, /* the check (and timing when opts.time_it): kf_verify_candidate */
    KF_VERIFY_MEMCHECK,  /* one run under the platform's memory checker: built with
                            kf_verify_memcheck_flags appended to the candidate's flags (when
                            that build fails to compile, with kf_verify_memcheck_flags_plain;
                            r->checked_flags says which), then kf_verify_memcheck (its
                            verdicts and errors) */
    KF_VERIFY_PROFILE    /* one run under the profiler for its counters (--counters ncu):
                            built as is, then kf_verify_profile (its table and errors) */
} kf_verify_mode;

typedef struct kf_verify_run_args {
    kf_verify_mode mode;
    /* KF_VERIFY_PROFILE only: the profiler's absolute path (kf_verify_profiler_tool), the
     * buffer its raw table is appended to (required), and where the reason of a failed run
     * goes (may be NULL) */
    const char *tool;
    kf_buf *csv;
    char *detail;
    size_t dcap;
} kf_verify_run_args;

/* Contract: compile candidate c with b into ctx's workdir and run it as a->mode says; the
 * one place a candidate is compiled (the calibration room's probes are kforge's own
 * kernels and keep their own compile). Always fills r. A failed build (a compile error, a
 * malformed launch plan) is r->status KF_V_COMPILE_ERROR with the backend's message in
 * r->detail, returned as the backend's status (KF_ERR_COMPILE, KF_ERR_PARSE, ...) with err
 * set, except in KF_VERIFY_CHECK, which returns KF_OK with the verdict as
 * kf_verify_candidate does. Otherwise returns what the mode's function returns, r holding
 * its verdict (KF_VERIFY_PROFILE: KF_V_OK when counters came back, KF_V_INTERNAL when
 * not). KF_ERR_ARG for a missing argument, an unknown mode, or PROFILE without csv. */
kf_status kf_verify_run(kf_verify_ctx *ctx, kf_backend *b, const kf_candidate *c,
                        const kf_verify_run_args *a, kf_vresult *r, kf_error *err);

/* What kf_verify_sandbox_describe reports as in force (a bit mask). */
enum {
    KF_SANDBOX_NET = 1,     /* sockets refused (seccomp filter) */
    KF_SANDBOX_WRITES = 2,  /* writes only in the candidate's scratch directory (Landlock) */
    KF_SANDBOX_SIGNALS = 4, /* no signals to processes outside the sandbox (Landlock ABI 6) */
    KF_SANDBOX_NPROC = 8    /* the process-count rlimit applies (it never binds root) */
};

/* The confinement of every sandboxed run of ctx (CPU and device candidates alike) on this
 * machine, as one line for the run record, e.g.
 *   "seccomp (x86-64): no sockets of any family, ...; landlock ABI 7: writes only under
 *    WORKDIR/kf-sbx-<candidate>/ and to /dev/{null,...}, no TCP bind/connect, no signals
 *    ...; capabilities dropped (running as root); rlimits: cpu 60 s, wall 20 s, address
 *    space 2.6 GiB, nproc 196 (not enforced: running as root), output 64 KiB (file
 *    size), no core dumps"
 * A missing mechanism is named, never left out: "NO write confinement: Landlock disabled
 * at boot (...)", "NO network confinement: no seccomp filter for this architecture";
 * under KFORGE_SANDBOX=off the text starts "confinement off (KFORGE_SANDBOX=off)".
 * b (may be NULL: cpu) selects the device form of the limits (no address-space limit, the
 * output cap watched). ctx NULL: the default options. Writes at most cap bytes (1024
 * holds it with a workdir path of 300) and returns the KF_SANDBOX_* flags in force (with
 * confinement off at most KF_SANDBOX_NPROC, an rlimit that stays). Reads the environment and asks the kernel;
 * creates nothing. */
unsigned kf_verify_sandbox_describe(const kf_verify_ctx *ctx, const kf_backend *b, char *buf,
                                    size_t cap);

#ifdef __cplusplus
}
#endif
#endif
