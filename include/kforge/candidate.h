/*
 * The candidate contract: what the builtin generator and an LLM hand to kforge.
 *
 * A candidate is source text for one platform plus a small manifest:
 *   - entry:    the function kforge calls (default "kforge_kernel");
 *   - tunables: named parameters and the values to try, compiled in as -DNAME=VALUE.
 *
 * CPU form (docs/kernel-contract.md has a worked example):
 *
 *     int kforge_kernel(void *const *args);
 *
 * args[0..ninputs-1] are the task's inputs in declaration order (read-only), followed by
 * its outputs in declaration order; every tensor is dense row-major in its declared dtype
 * (f32 = float, i64 = int64_t). The kernel must write every output element, must not
 * write inputs or outside the buffers, returns 0 on success and non-zero to report its own
 * failure. It may use OpenMP (kforge sets the thread count) and allocate scratch memory.
 *
 * Tunables are declared in the source, one per line, in a comment:
 *
 *     // kforge:tunable TILE 32 64 128
 *
 * and read as macros with a default (#ifndef TILE / #define TILE 64 / #endif).
 *
 * GPU form (opencl, cuda, metal; docs/kernel-contract.md): the source defines one or more
 * kernels whose buffer parameters are taken from the task's buffers (inputs then outputs,
 * numbered 0..n-1 as above) and from scratch buffers. The launch plan is declared in the
 * source, one launch per line, run in order on one queue:
 *
 *     // kforge:scratch NAME BYTES
 *     // kforge:launch KERNEL global=G0[,G1[,G2]] local=L0[,L1[,L2]] [smem=BYTES] args=A0,A1,...
 *
 * smem= (CUDA only) is the dynamic shared memory of each block, the size of the kernel's
 * `extern __shared__` array; past 48 KiB the launcher opts the kernel into it (up to the
 * device's opt-in limit, 227 KiB on Hopper). OpenCL and Metal refuse it.
 *
 * G/L/BYTES are integer expressions over literals and tunable names with + - * / %,
 * parentheses and cdiv(a, b) (= ceil(a / b)); global is the total number of work-items
 * per dimension (a multiple of local). Each A is a task buffer index or a scratch NAME.
 * Scratch buffers are device memory owned by the launcher, uninitialised, alive for
 * the whole plan. Without launch lines an OpenCL or Metal candidate is rejected
 * (KF_ERR_PARSE); a CUDA one is then the nvcc form (a whole .cu whose extern "C" int
 * kforge_kernel(void *const *args) launches its own kernels; docs/kernel-contract.md).
 */
#ifndef KFORGE_CANDIDATE_H
#define KFORGE_CANDIDATE_H

#include "kforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KF_MAX_TUNABLES 16
#define KF_MAX_TUNABLE_VALUES 16
#define KF_MAX_LAUNCHES 16
#define KF_MAX_SCRATCH 16
#define KF_MAX_LAUNCH_ARGS 32

/* What a schedule parameter does, whatever a template calls it: the planner declares a
 * role with each parameter and the performance analysis agent's rules ask for roles
 * ("a wider vector", "a smaller block tile"), never for names. */
typedef enum kf_role {
    KF_ROLE_NONE = 0,      /* no rule of the analysis moves it (it is still searched) */
    KF_ROLE_THREADS,       /* CPU threads of a stage */
    KF_ROLE_VECTOR,        /* SIMD / vector width of the arithmetic and accesses */
    KF_ROLE_VECTOR_LOADS,  /* vector width of a matmul's tile loads */
    KF_ROLE_UNROLL,        /* independent iterations in flight */
    KF_ROLE_BLOCK,         /* contiguous elements per parallel task */
    KF_ROLE_STREAM,        /* non-temporal (streaming) stores */
    KF_ROLE_GROUP,         /* work-group (block) size */
    KF_ROLE_PER_ITEM,      /* elements per work-item */
    KF_ROLE_SPLIT,         /* a reduction split into parallel partial passes */
    KF_ROLE_SUBGROUP,      /* sub-group (warp) shuffles instead of local memory */
    KF_ROLE_TILE_M,        /* a matmul's block tile along M */
    KF_ROLE_TILE_N,        /* ... along N */
    KF_ROLE_TILE_K,        /* the K step per barrier */
    KF_ROLE_REG_M,         /* a work-item's register tile along M */
    KF_ROLE_REG_N,         /* ... along N */
    KF_ROLE_DOUBLE_BUFFER, /* loads of the next tile overlapped with the current one */
    KF_ROLE_MICRO_KERNEL,  /* the CPU GEMM's register micro-kernel */
    KF_ROLE_CACHE_K,       /* the CPU GEMM's K block for the cache */
    KF_ROLE_NAIVE,         /* the plain loop instead of the tiled one */
    KF_ROLE_TEMPLATE,      /* which template computes a stage that several support (its
                              values are rows of the generator's registry; the search
                              times each, no rule of the analysis moves it) */
    KF_ROLE_KERNEL,        /* which of a template's kernels computes a stage (the f32
                              matmul's tc: SIMT or 3xTF32 tensor cores): like a template,
                              the search times each value before it tunes one; plain
                              numbers as values */
    KF_ROLE_COUNT
} kf_role;

/* "threads", "vector", ... ("none"); kf_role_lookup is its inverse (KF_ROLE_COUNT when
 * unknown). */
const char *kf_role_name(kf_role r);
kf_role kf_role_lookup(const char *name);

typedef struct kf_tunable {
    char name[32];
    int nvalues;
    long values[KF_MAX_TUNABLE_VALUES];
} kf_tunable;

/* One resolved launch: every expression evaluated for one set of tunable values. */
typedef struct kf_launch {
    char kernel[64];
    int ndims;                       /* 1..3 */
    int64_t global[3], local[3];     /* work-items per dim (global % local == 0) */
    int nargs;
    int args[KF_MAX_LAUNCH_ARGS];    /* >= 0: task buffer index; < 0: scratch -1 - k */
    int64_t smem;                    /* dynamic shared memory bytes per block (CUDA); 0 = none */
} kf_launch;

typedef struct kf_launch_plan {
    int nlaunches;
    kf_launch l[KF_MAX_LAUNCHES];
    int nscratch;
    char scratch_name[KF_MAX_SCRATCH][32];
    int64_t scratch_bytes[KF_MAX_SCRATCH];
} kf_launch_plan;

/* The launch plan a candidate carries once parsed (kf_candidate_plan); opaque. */
typedef struct kf_plan_slot kf_plan_slot;

typedef struct kf_candidate {
    char platform[16];     /* "cpu" */
    char entry[64];        /* entry symbol */
    char *source;          /* owned */
    char label[512];       /* description of the schedule (every parameter), for tables */
    char flags[512];       /* extra compile flags for this instance (e.g. -DTILE=64) */
    int ntunables;
    kf_tunable tunables[KF_MAX_TUNABLES];
    kf_plan_slot *plan;    /* owned: the parsed launch plan, or its parse error, for the
                              flags and buffer count it was parsed for (kf_candidate_plan) */
} kf_candidate;

/* Make a candidate from source text: copies it, sets entry (NULL = "kforge_kernel") and
 * parses its "kforge:tunable" lines. Returns KF_ERR_PARSE on a malformed tunable line.
 * Every candidate is made here (clear releases it; copy duplicates it). */
kf_status kf_candidate_init(kf_candidate *c, const char *platform, const char *source,
                            const char *entry, kf_error *err);
void kf_candidate_clear(kf_candidate *c);
/* Deep copy (the carried plan included). */
void kf_candidate_copy(kf_candidate *dst, const kf_candidate *src);

/* Contract: the launch plan candidate c declares, resolved for its current flags, with
 * nbufs task buffers (as kf_launch_plan_parse). Parsed once and carried in c: later calls
 * with the same flags and nbufs return the carried plan, or the carried parse error again
 * (KF_ERR_PARSE with the line and reason in err; err->file is left to the caller, who knows
 * the file), without parsing; a change of flags or nbufs parses again. *plan points into c
 * and lives until c is cleared or parsed again. Whether c's platform has a launch plan at
 * all is kf_platform_declares_plan's question (kforge/platform.h). KF_ERR_ARG for a
 * candidate not made by kf_candidate_init. */
kf_status kf_candidate_plan(const kf_candidate *c, int nbufs, const kf_launch_plan **plan,
                            kf_error *err);

/* Resolve the launch plan declared in source ("kforge:launch" / "kforge:scratch" lines)
 * for the tunable values in flags ("-DNAME=VALUE" words; a tunable not set there takes
 * its first declared value). nbufs is the number of task buffers (args must be below it; < 0: not checked).
 * KF_ERR_PARSE with the line and reason on a malformed line, an unknown name, a
 * non-positive size, global not a multiple of local, or no launch line at all. */
kf_status kf_launch_plan_parse(const char *source, const char *flags, int nbufs,
                               kf_launch_plan *plan, kf_error *err);

#ifdef __cplusplus
}
#endif
#endif
