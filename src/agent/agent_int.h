/*
 * Internals of the agents shared by the loop (loop.c) and the LLM generation agent
 * (llm_agent.c). Not installed.
 */
#ifndef KF_AGENT_INT_H
#define KF_AGENT_INT_H

#include "kforge/agent.h"
#include "kforge/llm.h"
#include "kforge/platform.h"
#include "kforge/store.h"
#include "kforge/synth.h"

#include <jansson.h>

/* The LLM generation agent: one conversation with a model for one task on one platform.
 * Prompts come from files (the .md files of prompts/ and prompts/examples/); the whole exchange is
 * appended to a JSON-lines transcript, and each call is handed to on_call (the store). */
typedef struct kf_llm_agent kf_llm_agent;

typedef struct kf_llm_agent_setup {
    const kf_graph *g;
    const kf_loop_opts *o;
    const kf_run_result *r;      /* device, roofline (read at each call) */
    const char *transcript_path; /* appended; NULL = none */
    const char *reference;       /* a correct kernel to start from (NULL = none) */
    const char *reference_origin;/* where it came from, for the prompt */
    const char *reference_platform; /* the platform it is written for (NULL: the run's) */
    int reference_parts;         /* the reference is kernels of parts of the task (a mixed
                                    task), not of the whole: prompts/reference_parts.md */
    /* called after every model call with what the transcript records (redacted): the last
     * message sent, the reply or the error, and the call's tokens (NULL: none) */
    void (*on_call)(void *ctx, const char *ask, const char *reply, const char *error, long prompt_tokens,
                    long completion_tokens);
    void *on_call_ctx;
} kf_llm_agent_setup;

/* Read the prompts and open the client. KF_ERR_IO naming a missing prompt file;
 * KF_ERR_ARG when the endpoint is not configured (the message says how to set it). */
kf_status kf_llm_agent_new(const kf_llm_agent_setup *su, kf_llm_agent **out, kf_error *err);

/* Ask the model for the next kernel (the conversation so far, with the feedback on the
 * last round). Returns:
 *   KF_OK with *code (malloc'd) set: a candidate to evaluate;
 *   KF_OK with *code NULL: no candidate this round; *vs is KF_V_NO_CODE or
 *     KF_V_AGENT_ERROR and detail says why (it is fed back, or recorded);
 *   KF_ERR_UNSUPPORTED: a budget (--max-calls, --max-tokens) is spent; stop asking (no
 *     request made, nothing written to the transcript);
 *   KF_ERR_ARG with *vs KF_V_AGENT_ERROR and detail set: a configuration error that asking
 *     again cannot mend (the prompt does not fit the model's context window, as the server
 *     said or as the known window shows after trimming); record the round, then stop.
 * With a known context window (--context, or the server's) the prompt is fitted into it:
 * older rounds, then the reference kernel, then the one-shot example, then the last
 * kernel are left out until it fits beside the reply limit, which shrinks to what is left
 * when needed; the table and the transcript ("fit") say what was left out. A reply whose
 * code repeats an earlier round's is fed back as a repeat, and the next request is sent
 * warmer (temperature raised by 0.3 per repeat in a row, at most 1). */
kf_status kf_llm_agent_ask(kf_llm_agent *a, char **code, kf_vstatus *vs, char *detail, size_t cap,
                           kf_error *err);

/* Tell the agent how the last round went: the record of the model's own kernel and the
 * best record among its tunable variants (may be the same). Builds the next feedback
 * message (compile log, runtime failure, mismatch summary without reference values, or
 * speed and roofline position). */
void kf_llm_agent_feedback(kf_llm_agent *a, const kf_iter_record *first, const kf_iter_record *best);

/* KF_ERR_UNSUPPORTED when a budget is spent (no further call will be made), else KF_OK. */
kf_status kf_llm_agent_budget(const kf_llm_agent *a, kf_error *err);

/* Calls made and tokens used. */
void kf_llm_agent_usage(const kf_llm_agent *a, int *calls, long *prompt_tokens, long *completion_tokens);

void kf_llm_agent_free(kf_llm_agent *a);

/* The code-block languages a platform's kernels are written in, best first. */
const char *kf_llm_agent_langs(const char *platform);

/* ---- the store's side of the loop (persist.c) ---- */

typedef struct kf_persist {
    kf_store *s;             /* NULL: no store, every call does nothing */
    FILE *table;
    char run[17], task[17];
    char device[600], compiler[600], settings[160]; /* cache-key parts, see store.h */
    int no_cache;
    int64_t cached_eval;     /* the evaluation the last cache hit served */
} kf_persist;

/* kf_phase_times as the run record's phases_s object, and back from its JSON text (all
 * zero when text is empty or not such an object). */
json_t *kf_agent_phases_json(const kf_phase_times *p);
void kf_agent_phases_read(const char *text, kf_phase_times *p);

/* The input sets and reference for g drawn with vo's seed, from o->store's cache
 * (kf_store_parts_get, kf_verify_ctx_from_parts) into *out: 1 on a hit, 0 on a miss, with
 * no store, or when the seed was drawn from the clock (o->seed 0: such a key never
 * recurs). Keyed by the task's content hash, the seed, the set count, the sets' format
 * (KF_VERIFY_SETS_VERSION) and the harness (KF_STORE_HARNESS). A cache that cannot be
 * read is a miss, said on o->table. */
int kf_persist_sets_load(const kf_loop_opts *o, const kf_graph *g, const kf_verify_opts *vo,
                         kf_verify_ctx **out);
/* Keep c's sets in o->store under the key kf_persist_sets_load reads (nothing without a
 * store, with o->seed 0, or above KF_SETS_CACHE_MAX bytes); the task's 2 newest entries
 * stay. A failure is said on o->table and otherwise ignored: the run needs no cache. */
void kf_persist_sets_save(const kf_loop_opts *o, const kf_graph *g, const kf_verify_opts *vo,
                          const kf_verify_ctx *c);
#define KF_SETS_CACHE_MAX (4ll << 30)

/* Record the task and the run (or reopen o->resume_run) once the device, roofline and
 * verification settings are known; r->run_id gets the run's id. Fails as the store does
 * (the loop does not start without the record it was asked to keep). */
kf_status kf_persist_begin(kf_persist *p, const kf_graph *g, const kf_loop_opts *o, kf_run_result *r,
                           int iters, const kf_verify_opts *vo, kf_error *err);
/* The stored result for candidate c into rec (res, memcheck, cached, measured_at): 1 on a
 * hit, 0 on a miss, with no store, or with no_cache. */
int kf_persist_lookup(kf_persist *p, kf_run_result *r, const kf_candidate *c, kf_iter_record *rec);
/* Store an evaluated iteration (source/flags: the candidate's; NULL for a row without
 * one) in its own transaction. A failure is kept in r->store_error and printed once. */
void kf_persist_iter(kf_persist *p, kf_run_result *r, kf_iter_record *rec, const char *source,
                     const char *flags);
/* One model call, stored as it returns (kf_store_transcript_call, its own transaction):
 * ask the message sent, then reply (or error when the call failed), redacted; iter: the
 * iteration the reply becomes. */
void kf_persist_call(kf_persist *p, kf_run_result *r, int iter, const char *ask, const char *reply,
                     const char *error, long prompt_tokens, long completion_tokens);
/* Transfer: the best verified kernel of this task on another platform than the run's
 * (kf_store_best_elsewhere) for the model's reference: 1 with *source (malloc'd), origin
 * ("the best verified cpu kernel of run ID (x ms, y% of floor)") and its platform; 0 when
 * the store has none (or there is no store). */
int kf_persist_reference(kf_persist *p, kf_run_result *r, char **source, char *origin, size_t cap,
                         char *platform, size_t pcap);
/* Record in the run where the model's reference kernel came from (text as printed). */
void kf_persist_note_reference(kf_persist *p, kf_run_result *r, const char *reference);
/* The run's end: later verdicts (final memcheck), status done (or failed). */
void kf_persist_finish(kf_persist *p, kf_run_result *r, int failed);

/* JSON forms shared by run.json (loop.c), the store's records and their loader (runs.c). */
json_t *kf_agent_device_json(const kf_device_info *d, const kf_ceilings *c);
json_t *kf_agent_diag_json(const kf_diagnosis *d);
json_t *kf_agent_run_json(const char *task, const char *task_path, const kf_run_result *r);
kf_vstatus kf_agent_vstatus_of(const char *name); /* kf_vstatus_name's inverse (internal if unknown) */

/* ---- the builtin agent's walk through a schedule space (walk.c) ---- */

/* Points already evaluated. */
typedef struct kf_seen {
    uint64_t *h;
    int n, cap;
} kf_seen;
void kf_walk_mark(kf_seen *s, const kf_space *sp, const kf_point *p);

/* Single-parameter moves of the walk that were measured no faster than the point they
 * left (verified and timed; a failed candidate is not recorded): parameter index, value
 * positions from and to, the iteration that measured it, and whether the table was told
 * that the walk passed it over. */
#define KF_MAX_FAILED_MOVES 512
typedef struct kf_move_log {
    int n;
    struct { short p, from, to, iter, said; } m[KF_MAX_FAILED_MOVES];
} kf_move_log;

/* Record q's move from base when it is one parameter's (the caller knows q did not
 * improve on base); several parameters moved, or a move already held: nothing. */
void kf_walk_log_failed(kf_move_log *ml, const kf_space *sp, const kf_point *base, const kf_point *q, int iter);
/* The best point moved by d's highest-ranked recommendation that leads to a point not in
 * seen and is not a move ml holds: 1 with *out and why ("s0.vw 4 -> 8: <reason>");
 * skipped gets the first held move passed over that was not reported before ("" none). */
int kf_walk_follow(const kf_space *sp, const kf_point *best, const kf_diagnosis *d, kf_move_log *ml,
                   const kf_seen *seen, kf_point *out, char *why, size_t cap, char *skipped, size_t scap);
/* The next point when no recommendation is left (d: the best point's diagnosis or NULL),
 * in the order of walk.c's note. 0 = the space is exhausted. */
int kf_walk_propose(const kf_space *sp, const kf_point *best, const kf_diagnosis *d, const kf_move_log *ml,
                    const kf_seen *seen, uint64_t *rng, kf_point *out);
/* The best point with another value of a template selector (role KF_ROLE_TEMPLATE, or a
 * template's kernel selector, KF_ROLE_KERNEL) that
 * leads to a point not in seen: 1 with *out and what moved in why ("s0.tpl gemm ->
 * matvec"). The builtin agent asks this before the diagnosis, so that every template that
 * supports a stage is measured (at its default parameters) early in a run; since the seen
 * points are canonical (kf_point_canonical), a template already measured from the same
 * parameters is not proposed again. 0 = none. */
int kf_walk_template(const kf_space *sp, const kf_point *best, const kf_seen *seen, kf_point *out, char *why,
                     size_t cap);
/* A random point not in seen (rng: the search's state). 0 = none found. */
int kf_walk_random(const kf_space *sp, const kf_seen *seen, uint64_t *rng, kf_point *out);

/* ---- profiler counters per candidate (counters.c) ---- */

/* The profiler o->counters asks for on platform into tool ("" with --counters off).
 * KF_ERR_ARG when the platform has no profiled run (only cuda has one), KF_ERR_UNSUPPORTED
 * when the tool is not installed (kf_verify_profiler_tool's message). */
kf_status kf_agent_counters_tool(const kf_loop_opts *o, const char *platform, char *tool, size_t cap,
                                 kf_error *err);
/* Run verified candidate cand once more under the profiler tool; rec->counters gets its
 * launches' rows (1). 0 with why when there are none (the build, the run or the CSV failed). */
int kf_agent_profile(kf_verify_ctx *vctx, kf_backend *be, const char *tool,
                     const kf_candidate *cand, kf_iter_record *rec, char *why, size_t cap);
/* The rows as the run record keeps them (metrics not measured are left out), and back. */
json_t *kf_agent_counters_json(const kf_counters *c, int n);
int kf_agent_counters_parse(json_t *arr, kf_counters **out); /* rows in *out (malloc'd) */
/* The rows as lines of text for a model (--analysis llm's raw profile). */
void kf_agent_counters_text(const kf_counters *c, int n, kf_buf *out);

/* ---- the loop and its generation agents (loop.c, propose_builtin.c, propose_llm.c) ---- */

/* What evaluating a candidate needs: the loop's state that the agents share. */
typedef struct kf_evalctx {
    const kf_loop_opts *o;
    kf_run_result *r;
    kf_verify_ctx *vctx;
    kf_backend *be;
    const char *work, *mc_tool;
    double best_time;
    const kf_arch_entry *arch; /* the device's database entry, NULL when none matched */
    const kf_space *sp;        /* the builtin candidate's space and point (NULL: a model's) */
    const kf_point *pt;
    int g_nbufs;               /* the task's inputs + outputs */
    kf_persist *ps;            /* the store (ps->s NULL: none) */
    char counters_note[300];   /* why no profiler counters are read (said in the evidence) */
    const char *prof_tool;     /* --counters: the profiler ("" or NULL: none) */
    int prof_fails;            /* profiled runs failed in a row */
    const char *parts_ref;     /* a mixed task (--agent both on a module task): the builtin's
                                  kernels of the parts kforge lowers (NULL: none) */
    const char *parts_origin;  /* and where they came from, for the prompt */
} kf_evalctx;

/* A mixed task (src/agent/mixed.c): runs the builtin on each part of module task g that
 * kforge lowers (NAME.partK.kf beside it; OUT_BASE/partK for its output), each with
 * o->builtin_iters candidates (0: half of o->iters). *ref gets the verified kernels as one
 * text (owned; NULL when none verified or there are no parts), origin what they are. A part
 * that fails is said in o->table and left out; KF_OK whatever the parts gave. */
typedef struct kf_mixed_cover {
    int nparts, nok;        /* parts found beside the task, and those with a verified kernel */
    char verified[1024];    /* "DIR/kernel.c (NAME_part0), ..." of the verified parts */
    char failed[1024];      /* "part 1 (NAME_part1: why), ..." of those without one */
} kf_mixed_cover;

kf_status kf_mixed_parts(const kf_graph *g, const kf_loop_opts *o, const char *out_base, char **ref, char *origin,
                         size_t cap, kf_mixed_cover *cov, kf_error *err);

/* Why a module task's run (r, best < 0) has no result, into out: the model's verdicts, and
 * why no chain of the builtin's part kernels stands in for the forward: the nodes of the
 * forward that lower nowhere (read from task_text, the task's .kf source: kforge import's
 * "# not lowered:" line or its header's "node 'NAME' (TARGET)"), the parts without a
 * verified kernel, and where the verified part kernels are. both: --agent both (cov the
 * parts' runs); else the llm agent alone. */
void kf_mixed_no_result(const kf_graph *g, const char *task_text, int both, const kf_mixed_cover *cov,
                        const kf_run_result *r, char *out, size_t cap);

/* The next iteration record of r (iteration it, by agent, labelled). */
kf_iter_record *kf_loop_new_iter(kf_run_result *r, int it, const char *agent, const char *label);
/* Compile, verify, time, place, diagnose and store one candidate into rec; print its row.
 * Returns 1 when it became the run's best. */
int kf_loop_evaluate(kf_evalctx *ec, const kf_candidate *cand, kf_iter_record *rec);
/* Print rec's row in the live table (a record that was never evaluated, e.g. a model reply
 * without code). */
void kf_loop_table_row(const kf_evalctx *ec, const kf_iter_record *rec);

/* A generation agent behind the loop (../shared/DESIGN.md §1): each step makes one
 * iteration (proposes a candidate and evaluates it with kf_loop_evaluate). KF_OK: it made
 * one; KF_ERR_UNSUPPORTED: it has nothing more to propose (r->stop_reason may say why) and
 * the loop ends; any other status is an error of the run. close (may be NULL) is called
 * when its iterations end; free releases it. */
typedef struct kf_proposer {
    const char *name;
    void *self;
    kf_status (*step)(void *self, kf_evalctx *ec, int it, kf_error *err);
    void (*close)(void *self, kf_evalctx *ec);
    void (*free)(void *self);
} kf_proposer;

/* The builtin agent over syn's space (the walk of walk.c, seeded by seed). */
void kf_proposer_builtin(kf_synth *syn, const kf_loop_opts *o, uint64_t seed, kf_proposer *out);
/* The model agent for task g (opened at its first step: the reference, the endpoint). */
void kf_proposer_llm(const kf_graph *g, kf_proposer *out);

#endif
