/*
 * kforge performance method: the roofline floor of a task on a device (minimum bytes over
 * the measured bandwidth, FLOPs over the measured peak; the larger wins), and where a
 * measured time sits against it.
 */
#ifndef KFORGE_PERF_H
#define KFORGE_PERF_H

#include "kforge/arch.h"
#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kf_roofline {
    double bytes, flops;      /* task minimum bytes and FLOPs */
    double mem_floor_s;       /* bytes / bandwidth */
    double compute_floor_s;   /* flops / peak */
    double floor_s;           /* max of the two */
    const char *bound;        /* "memory" or "compute" (which floor is larger) */
    double bw_gbs, peak_gflops; /* ceilings used */
    int measured;             /* ceilings were measured on this device */
} kf_roofline;

/* Roofline floor of g on a device with ceilings c. The bandwidth used is the streaming
 * copy bandwidth (read+write), the peak is the f32 FMA peak, raised to a third of the
 * TF32 matrix rate c->peak_gflops_tf32 where that is higher and g has an f32 contraction
 * (kf_graph_has_mm32: 3xTF32 on tensor cores), or for a graph with an f16/bf16 matmul
 * (kf_graph_has_mm16) c->peak_gflops_mm16, the 16-bit matrix peak (no compute floor when
 * that is unknown). */
void kf_roofline_of(const kf_graph *g, const kf_ceilings *c, kf_roofline *out);
/* 1 when g has a matmul of f16 or bf16 operands. */
int kf_graph_has_mm16(const kf_graph *g);
/* 1 when g has an f32 contraction (a CONTRACT-class op, or a COMPOSITE one, which may lower
 * to one, with f32 operands): work that tensor cores can do at f32 accuracy (3xTF32). */
int kf_graph_has_mm32(const kf_graph *g);

typedef struct kf_perf_point {
    double time_s;
    double gbs;             /* bytes / time */
    double gflops;          /* flops / time */
    double pct_floor;       /* 100 * floor / time */
} kf_perf_point;

void kf_perf_place(const kf_roofline *r, double time_s, kf_perf_point *out);

/* ---- analysis: occupancy, profiler counters, diagnosis (src/perf/occupancy.c, ncu.c,
 * cpu_counters.c, diagnose.c) ---- */

/* Theoretical occupancy of a CUDA-style kernel on one unit (SM): how many of its groups
 * fit at once by registers, shared memory, threads and the group limit. */
typedef struct kf_occupancy {
    int threads, regs;        /* per group / per thread, as given */
    long smem;                /* static + dynamic shared memory per group (bytes) */
    int by_regs, by_smem, by_threads, by_groups; /* groups per unit each limit allows */
    int groups_per_unit;      /* the smallest of the four */
    double theoretical;       /* resident warps / the unit's maximum warps, 0..1 */
    const char *limiter;      /* "registers", "shared memory", "threads", "groups" */
} kf_occupancy;

/* Contract: compute the occupancy of groups of `threads` threads using `regs` registers
 * per thread and `smem` bytes of shared memory on a unit of arch entry a (its limits:
 * regs_per_unit, reg_alloc_unit per warp, max_threads_per_unit, max_groups_per_unit,
 * smem_per_unit, smem_per_group, smem_alloc_unit; simd_width = warp size). KF_ERR_ARG
 * when a lacks those limits or the group cannot run at all (too many threads, registers
 * or shared memory), with the reason. */
kf_status kf_perf_occupancy(const kf_arch_entry *a, int threads, int regs, long smem,
                            kf_occupancy *out, kf_error *err);

#define KF_MAX_STALLS 6
/* Counters of one kernel launch from a profiler; a value < 0 was not measured. */
typedef struct kf_counters {
    char kernel[64];
    char source[16];          /* "ncu", "perf" */
    double duration_s;
    double dram_pct, sm_pct, mem_pct;     /* % of peak: DRAM throughput, SM, memory pipes */
    double achieved_occ_pct, theoretical_occ_pct;
    double l1_hit_pct, l2_hit_pct;
    double bank_conflicts;                /* shared-memory bank conflicts (ld + st), count */
    double dram_bytes;                    /* bytes read + written in DRAM */
    double regs, smem_bytes, grid, block; /* the launch as the profiler saw it */
    double ipc, cache_miss_pct, branch_miss_pct; /* CPU (perf) */
    int nstalls;
    struct { char name[32]; double pct; } stall[KF_MAX_STALLS]; /* largest first, % of cycles */
} kf_counters;

/* Contract: parse Nsight Compute's raw CSV page (`ncu --csv --page raw`; the first row
 * names the metrics, the second gives units, one row per profiled launch) into *out (an
 * array of *n rows, owned by the caller: free()). Metrics it does not find stay < 0.
 * KF_ERR_PARSE with the line when the text is not such a table. */
kf_status kf_perf_ncu_parse(const char *csv, size_t len, kf_counters **out, int *n, kf_error *err);

/* Contract: CPU counters of running argv[] (perf_event_open, the events perf stat counts:
 * instructions, cycles, cache references and misses, branches and branch misses) into *out. KF_ERR_UNSUPPORTED, with the reason
 * (no perf tool, perf_event_paranoid, events not supported in this VM), when the machine
 * does not allow it. */
kf_status kf_perf_cpu_counters(char *const argv[], kf_counters *out, kf_error *err);
/* Whether kf_perf_cpu_counters works on this machine (tried on `true`); when it does not,
 * why (its error message) into why. */
int kf_perf_cpu_counters_usable(char *why, size_t cap);

/* A schedule parameter of the kernel diagnosed, as the search sees it. */
typedef struct kf_diag_param {
    char name[32];            /* stage-prefixed, e.g. "s0.vw" */
    long value;
    int idx, nvalues;         /* position in its value list (nvalues 0: unknown) */
    kf_role role;             /* what it does (the template's declaration) */
} kf_diag_param;

typedef struct kf_diag_input {
    const char *platform;     /* "cpu", "opencl", "cuda", "metal" */
    int gpu;                  /* a GPU-style device (occupancy and grid rules apply) */
    const kf_roofline *roof;
    const kf_perf_point *perf;
    const kf_arch_entry *arch;/* the matched database entry, NULL when none */
    const char *resources;    /* compiler report ("KERNEL regs=R smem=S local=L ...; ..."), or "" */
    const kf_launch_plan *plan; /* device kernels' launches, NULL on the cpu */
    const kf_diag_param *params; int nparams;
    const kf_counters *counters; int ncounters; /* profiler rows of this candidate, or NULL */
    const char *counters_note;/* why there are none (e.g. kf_perf_cpu_counters' reason), or NULL */
    double launch_s;          /* measured overhead of one launch (0 = not measured) */
    int cpu_threads;          /* usable hardware threads (cpu) */
    int units;                /* compute units, from the device when arch is NULL */
} kf_diag_input;

#define KF_DIAG_MAX_EVIDENCE 8
#define KF_DIAG_MAX_RECS 8
#define KF_DIAG_MAX_AVOID 8
typedef struct kf_diag_rec {
    char param[32];           /* the parameter's name without its stage ("vw", "wg", ...) */
    kf_role role;             /* the role the rule asked for */
    int dir;                  /* +1: a larger value, -1: a smaller one */
    double score;             /* expected effect, 0..1, for ranking */
    char why[160];
} kf_diag_rec;

/* A move against the diagnosis: the reverse of a direction some rule asks for, including
 * one the value list no longer allows (vw- when vw+ is wanted and vw is at its largest).
 * The builtin agent tries such moves only when nothing else near the best is left. */
typedef struct kf_diag_avoid {
    char param[32];
    kf_role role;
    int dir;
} kf_diag_avoid;

typedef struct kf_diagnosis {
    char bound[12];           /* "memory", "compute", "latency", "launch" */
    double achieved;          /* fraction of that ceiling reached (latency: the larger of
                                 the two roofline fractions), 0..1 */
    double bw_frac, peak_frac;/* achieved min-bytes bandwidth and FLOP rate over the ceilings */
    double occupancy;         /* theoretical occupancy 0..1, < 0 where it does not apply */
    double achieved_occupancy;/* from counters, < 0 when not measured */
    char occ_limit[16];
    int nevidence;
    char evidence[KF_DIAG_MAX_EVIDENCE][160];
    int nrecs;
    kf_diag_rec rec[KF_DIAG_MAX_RECS]; /* best first; only parameters the kernel has, in the
                                          direction its value list allows */
    int navoid;
    kf_diag_avoid avoid[KF_DIAG_MAX_AVOID]; /* never a (param, dir) that rec[] holds */
} kf_diagnosis;

/* Contract: diagnose one verified, timed candidate from what was measured (in). Never
 * fails: missing inputs give less evidence, and the evidence says what was not measured. */
void kf_perf_diagnose(const kf_diag_input *in, kf_diagnosis *out);
/* One line: "memory-bound, 62% of 4170 GB/s; occupancy 100%; next: vw+ (why), ..." */
void kf_perf_diagnosis_line(const kf_diagnosis *d, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
