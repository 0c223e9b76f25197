/*
 * kforge synthesis loop: propose -> compile -> run in isolation -> compare with the
 * reference -> time -> place on the roofline -> propose again. The builtin agent searches
 * the generator's schedule space; the best verified candidate wins and is written out.
 */
#ifndef KFORGE_AGENT_H
#define KFORGE_AGENT_H

#include <stdio.h>

#include "kforge/core.h"
#include "kforge/ir.h"
#include "kforge/backend.h"
#include "kforge/verify.h"
#include "kforge/perf.h"
#include "kforge/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kf_loop_opts {
    const char *target;      /* platform, default "cpu" */
    int iters;               /* candidates to evaluate at most (default 12) */
    double time_budget_s;    /* stop starting new candidates after this long (0 = none) */
    const char *out_dir;     /* where the best kernel goes (default kforge-out/<task>) */
    int threads;             /* 0 = all the device's threads */
    uint64_t seed;           /* input sets and search (0 = from the clock) */
    FILE *table;             /* live iteration table (NULL = none) */
    int recalibrate;         /* re-measure the device's ceilings */
    int fresh_outputs;       /* time CPU candidates on fresh output pages (kf_verify_opts) */
    int no_race;             /* time every candidate in full (default: kf_verify_race with
                                the best time so far) */
    int memcheck;            /* memory checker (valgrind on cpu, compute-sanitizer on cuda;
                                none elsewhere), one of KF_MEMCHECK_*: */
    /* the generation agent */
    int agent;               /* KF_AGENT_BUILTIN (default), KF_AGENT_LLM, KF_AGENT_BOTH */
    const struct kf_llm_config *llm; /* endpoint, model, key, budgets (llm and both) */
    const char *task_text;   /* the task's .kf source, shown to the model (NULL: none) */
    const char *torch_text;  /* the PyTorch module it came from (NULL: none) */
    const char *reference_path; /* a correct kernel for the model to start from (NULL: with a
                                store, its best verified kernel of the task on another
                                platform, docs/store.md "Transfer") */
    int no_reference;        /* no reference kernel at all, not even from the store */
    const char *prompts_dir; /* NULL: $KFORGE_PROMPTS, else the source tree's prompts/ */
    int builtin_iters;       /* KF_AGENT_BOTH: builtin candidates first (0: half of iters) */
    /* the performance analysis agent */
    int analysis;            /* KF_ANALYSIS_BUILTIN (default), KF_ANALYSIS_OFF, KF_ANALYSIS_LLM */
    int start_random;        /* the first candidate is a random point of the space (from the
                                seed), not the template's default: to compare searches
                                without the defaults' head start (kforge synth --start) */
    const char *pins;        /* "block=8192 unroll=4": parameters held at one value, as the
                                candidate labels name them (kforge synth --pin; NULL: none) */
    int counters;            /* profiler counters per verified candidate: KF_COUNTERS_OFF
                                (default) or KF_COUNTERS_NCU (cuda: a second, profiled run
                                under Nsight Compute; kforge synth --counters ncu) */
    /* the store (docs/store.md) */
    kf_store *store;         /* NULL: nothing recorded, no cache */
    int no_cache;            /* evaluate every candidate even when the store holds its result */
    const char *resume_run;  /* continue this stored run (full id; the options must be the
                                stored ones: kf_run_resume_load) */
    const char *target_spec; /* --target as given, recorded with the run (NULL: target) */
    int module_ref;          /* a module task's reference (kf_verify_opts.module_ref: the
                                default KF_MODULE_REF_CPU_F64, or KF_MODULE_REF_CUDA_F32, the
                                user's choice; another than the default on a graph task is
                                KF_ERR_ARG); recorded in run.json ("reference") and the outcome */
    double parse_s;          /* seconds the caller spent parsing the task (kf_phase_times) */
} kf_loop_opts;


enum {
    KF_ANALYSIS_BUILTIN = 0, /* every verified candidate is diagnosed (kf_perf_diagnose); the
                                builtin agent tries the best candidate's recommended moves
                                first, the model reads the diagnosis as text */
    KF_ANALYSIS_OFF = 1,     /* no diagnosis: the builtin agent searches at random */
    KF_ANALYSIS_LLM = 2      /* diagnosed as builtin, but the model gets the raw profile
                                (timing, resource report, launches, counters) instead */
};

enum {
    KF_COUNTERS_OFF = 0,     /* the diagnosis rests on timing, roofline, resource report and
                                occupancy calculator */
    KF_COUNTERS_NCU = 1      /* and on Nsight Compute's counters of each verified candidate */
};

enum {
    KF_AGENT_BUILTIN = 0,    /* the schedule-space search of the builtin generator */
    KF_AGENT_LLM = 1,        /* a chat model writes every candidate */
    KF_AGENT_BOTH = 2        /* the builtin first; then the model, from the builtin's best */
};

enum {
    KF_MEMCHECK_OFF = -1,    /* never */
    KF_MEMCHECK_AUTO = 0,    /* the final candidate, when its estimated time under the
                                checker is under a minute (native time x 50, or x 600 when
                                compute-bound, under valgrind; x 100 under compute-sanitizer,
                                so on cuda nearly always) */
    KF_MEMCHECK_ON = 1,      /* the final candidate, whatever the estimate */
    KF_MEMCHECK_EVERY = 2    /* every verified candidate as it verifies: one the checker
                                flags is rejected (status memcheck) and cannot become best */
};

void kf_loop_opts_default(kf_loop_opts *o);


#define KF_MAX_DIAG_LABEL_PARAMS 24
/* Contract: diagnose every verified iteration of a recorded run (run_path: a run.json of
 * kforge synth) with the analysis agent, using Nsight Compute counters of the same
 * candidates when ncu_path names a raw CSV page (its rows are shared out in order, the
 * same number per verified iteration; otherwise they are not used and the output says
 * why). Writes a readable report, or a JSON array (as_json), to out. KF_ERR_PARSE naming
 * the file for a file that is not a run record or not an ncu table; KF_ERR_IO when a file
 * cannot be read. */
kf_status kf_analyze_run(const char *run_path, const char *ncu_path, FILE *out, int as_json,
                         kf_error *err);

typedef struct kf_iter_record {
    int iter;                /* 1-based */
    char label[512];         /* schedule, or "llm N" (+ its tunables) for a model's kernel */
    char agent[8];           /* "builtin" or "llm" */
    char hash[17];           /* source+flags hash */
    kf_vresult res;
    kf_perf_point perf;      /* valid when res.status == KF_V_OK */
    int best_so_far;         /* this iteration improved the best time */
    char *source;            /* candidate source (owned; kept for verified candidates) */
    char flags[512];         /* its extra compile flags */
    char memcheck[16];       /* this candidate's memory check: "" not run, "ok", "skipped"
                                (no verdict: too slow, ...), "error", or the rejecting
                                status's name */
    int has_diag;            /* diag holds the analysis agent's reading of this candidate */
    kf_diagnosis diag;
    char followed[200];      /* the recommendation this candidate was chosen by ("" = none) */
    kf_counters *counters;   /* profiler rows of its launches (owned; --counters), or NULL */
    int ncounters;
    int cached;              /* res came from the store: measured earlier (at measured_at, by
                                run measured_by), not compiled or run again here */
    double measured_at;      /* Unix seconds the result was measured (0: not stored) */
    char measured_by[17];    /* the run that measured it */
} kf_iter_record;

/* Where a run's wall time went (issue 30), seconds, summed over its candidates: parse (the
 * caller's, kf_loop_opts.parse_s), setup (the backend, the generator's plan, the device's
 * ceilings), draw and reference (the input sets and their float64 reference; both 0 when
 * the store's cache had them: ref_cached), compile, start (runner processes up to the
 * kernel loaded), check (the check runs' calls and comparisons), timing (the timing runs),
 * analysis (diagnosis and profiling), store (every store read and write), memcheck, and
 * other (the rest of total: proposing, the table, the output files). */
typedef struct kf_phase_times {
    double parse, setup, draw, reference, compile, start, check, timing, analysis, store,
        memcheck, other, total;
    int ref_cached;          /* the input sets and reference came from the store */
} kf_phase_times;

/* The phases of r as one line per phase with its share of the total ("phase  seconds  %"),
 * into f (kforge synth --verbose). */
void kf_phase_times_print(FILE *f, const kf_phase_times *p);

typedef struct kf_run_result {
    kf_device_info dev;
    kf_ceilings ceil;
    kf_roofline roof;
    char plan[512];          /* the generator's stages */
    char roles[2048];        /* the schedule parameters' roles, "vw:vector s1.wg:group ..." (label
                                names; builtin agent), for kforge analyze of the record */
    kf_iter_record *iters;
    int niters;
    int best;                /* index into iters, -1 when nothing verified */
    char *best_source;       /* owned */
    char best_flags[512];
    char out_dir[512];
    char memcheck[64];       /* "ok", "skipped", "memcheck", "off", ... for the final
                                candidate; memcheck_detail says why (skipped: the reason,
                                naming the checker looked for, or "no memory checker") */
    char memcheck_detail[2048];
    double wall_s;
    int llm_calls;           /* model calls made (llm and both) */
    long llm_prompt_tokens, llm_completion_tokens;
    char stop_reason[160];   /* why the loop ended early ("" = it ran its iterations) */
    char result_from[8];     /* which agent wrote the result: "builtin", "llm", or "none" */
    char outcome[2048];      /* which path produced the result, or why there is none (a module
                                task: why no chain of the builtin's parts stands in) */
    char reference[256];     /* how the reference was computed (the float64 interpreter, or a
                                module task's kf_module_ref_describe); "" in a stored run */
    char sandbox[1024];      /* the confinement candidates ran under (kf_verify_sandbox_describe) */
    char arch[160];          /* the architecture database entry matched ("" = none) and why */
    unsigned sandbox_flags;  /* its KF_SANDBOX_* bits */
    uint64_t seed;           /* the seed used (the given one, else drawn from the clock) */
    char run_id[17];         /* the run's id in the store ("" when not stored) */
    int cache_hits;          /* iterations served from the store */
    char store_error[512];   /* the first store failure ("" none): the loop goes on without */
    int store_failures;      /* store writes and reads that failed (kforge synth exits 2) */
    kf_phase_times phases;   /* where the wall time went */
} kf_run_result;

/* Run the loop on g. Returns KF_OK when the loop ran (r->best may still be -1 when no
 * candidate verified), or an error when it could not start (unsupported task, no
 * backend, ...). Writes kernel.c, manifest.json and run.json into the output directory
 * when a candidate verified. */
kf_status kf_loop_run(const kf_graph *g, const kf_loop_opts *o, kf_run_result *r, kf_error *err);
void kf_run_result_free(kf_run_result *r);

/* ---- stored runs (src/agent/runs.c) ---- */

/* Contract: load stored run run_ref (an id or a unique prefix, as `kforge runs` prints)
 * from store s into *r, as kf_loop_run left it: device, ceilings, roofline, plan, every
 * stored iteration (sources, results, diagnoses; cached rows say so), the best, wall time,
 * model usage, stop reason, memcheck, run_id. info (may be NULL) gets the run's row
 * (status, task, options, ...; the caller clears it with kf_store_run_clear). A run that
 * was interrupted loads with the iterations it stored. Errors: KF_ERR_ARG naming the store
 * when no run matches or the prefix is ambiguous; KF_ERR_PARSE when a stored record does
 * not parse; KF_ERR_IO for a store failure. On failure *r is empty (kf_run_result_free is
 * safe). */
kf_status kf_run_load(kf_store *s, const char *run_ref, kf_run_result *r, kf_store_run *info,
                      kf_error *err);

/* Contract: the run record of r as run.json writes it (task and task path from info, plus
 * info's status, planned iterations and seed), indented JSON text (malloc'd; never NULL). */
char *kf_run_json_text(const kf_run_result *r, const kf_store_run *info);

/* What `kforge synth --resume` needs to continue a run: its options, task and graph. */
typedef struct kf_run_resume {
    kf_loop_opts o;          /* the stored options; o.resume_run and o.store set */
    kf_store_run info;       /* the run's row */
    kf_graph *g;             /* the task, parsed from the stored text (owned) */
    char *task_text;         /* owned */
    char target[64], out_dir[512], pins[512];
} kf_run_resume;

/* Contract: prepare to resume run run_ref of store s into *rs (free with
 * kf_run_resume_free). Only a run whose process is gone can be resumed: KF_ERR_ARG for one
 * still running (naming its pid and host), for one that is done, and for one written by
 * the model agent (its conversation is not stored in a form that can be replayed; see
 * docs/store.md); KF_ERR_PARSE when its stored options or task do not parse. */
kf_status kf_run_resume_load(kf_store *s, const char *run_ref, kf_run_resume *rs, kf_error *err);
void kf_run_resume_free(kf_run_resume *rs);

/* ---- a run as an HTML page (src/agent/run_report.c; docs/report.md) ---- */

/* Contract: write run r (as kf_loop_run left it or kf_run_load loaded it) as one
 * self-contained HTML page to out (kf_report_html: time per iteration, roofline with every
 * verified candidate, best source, diagnoses, iteration table), titled task_name (NULL:
 * "(unnamed task)"). r is only read. KF_ERR_ARG when r or out is NULL; KF_ERR_IO when
 * writing to out fails (the page is then incomplete; the caller removes the file). */
kf_status kf_run_report_html(const kf_run_result *r, const char *task_name, FILE *out, kf_error *err);

/* File name of the best kernel in the output directory for a platform: kernel.c (cpu),
 * kernel.cl (opencl), kernel.cu (cuda), kernel.metal (metal). Static storage. */
const char *kf_loop_kernel_file(const char *platform);

#ifdef __cplusplus
}
#endif
#endif
