/*
 * kforge store: one SQLite file holding every run, task, candidate, verification result,
 * diagnosis and model transcript, so that a candidate is never evaluated twice on the
 * same device with the same compiler, an interrupted run can be resumed, and past runs
 * can be listed and shown.
 *
 * Design note.
 *   - One file, WAL journal, foreign keys on, a busy timeout: several kforge processes
 *     may share a store; a writer waits (at most KF_STORE_BUSY_MS) rather than fails.
 *   - The schema version is PRAGMA user_version. Opening applies, in one transaction, the
 *     ordered migrations from the file's version to KF_STORE_SCHEMA_VERSION; a file of a
 *     newer version is refused (KF_ERR_UNSUPPORTED naming the path and both versions).
 *   - Every write is a small transaction of its own (one iteration = one transaction),
 *     so a process killed at any point loses at most the candidate it was evaluating.
 *   - The store knows rows, not the loop: its records are plain fields (statuses as their
 *     names, diagnoses as JSON text). src/agent converts them to and from the loop's
 *     kf_iter_record / kf_run_result (src/agent/store_glue.c, src/agent/runs.c).
 *
 * The cache key (kf_store_cache_key). A stored result is reusable when the same program
 * would be built the same way and checked against the same problem on the same machine:
 *     task hash        the task's canonical text: shapes, dtypes and ops fix the inputs'
 *                      sizes, the reference and the roofline's byte/FLOP counts;
 *     source hash + compile flags (the tunables' -D values are flags);
 *     platform + device identity (name, index, driver) + compiler identity and version
 *                      (the compiler string the backend reports, e.g. "cc: gcc 12.2.0");
 *     the settings that change a verdict or a timing: input sets, candidate threads,
 *                      fresh-output timing, memcheck-every, and the harness version
 *                      (KF_STORE_HARNESS: bumped when verification rules change).
 * Not in the key: the seed (a stored verdict was reached on other draws of the same
 * distributions; documented in docs/store.md), the roofline ceilings (% of floor is
 * recomputed from the run's own ceilings on a hit). Results that say more about the
 * machine than about the candidate (internal errors, timeouts, "impossible" verdicts
 * that depend on the ceilings) are never served from the cache.
 */
#ifndef KFORGE_STORE_H
#define KFORGE_STORE_H

#include <stdint.h>

#include "kforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KF_STORE_SCHEMA_VERSION 4
#define KF_STORE_BUSY_MS 10000
#define KF_STORE_HARNESS "v2" /* v2: offset and large-magnitude sets, contraction error bounds */

typedef struct kf_store kf_store;

/* Contract: the store path kforge uses when no --store is given, into buf: $KFORGE_STORE
 * if set and not empty, else $XDG_DATA_HOME/kforge/kforge.db, else
 * $HOME/.local/share/kforge/kforge.db. KF_ERR_ARG when none of the three is set or the
 * path does not fit. Creates nothing. */
kf_status kf_store_default_path(char *buf, size_t cap, kf_error *err);

/* Contract: open (creating it and its directory when absent) the store at path, migrate
 * it to KF_STORE_SCHEMA_VERSION, and return it in *out (close with kf_store_close).
 * Errors name the path: KF_ERR_IO when it cannot be created or opened, KF_ERR_PARSE when
 * the file is not an SQLite database or is another program's SQLite database (nothing is
 * written to it), KF_ERR_UNSUPPORTED when its schema is newer than
 * this kforge, KF_ERR_INTERNAL when a migration fails (the file is left as it was). */
kf_status kf_store_open(const char *path, kf_store **out, kf_error *err);

typedef enum kf_store_mode {
    KF_STORE_CREATE,   /* kf_store_open's: create the file (and its directory) when absent */
    KF_STORE_EXISTING  /* a reading command's: the file must be there; nothing is created */
} kf_store_mode;

/* Contract: kf_store_open with a mode. KF_STORE_CREATE sets *created (may be NULL) to 1
 * when this call created the file. KF_STORE_EXISTING creates nothing: KF_ERR_ARG naming
 * the path when there is no file (or an empty one); where the file or its directory
 * cannot be written (a read-only folder or mount) the store is opened read-only (SQLite's
 * immutable mode when the WAL's side files cannot be set up there): reads work, runs whose
 * process is gone read as interrupted without being marked, writes fail, and a file
 * whose schema is older than this kforge's is KF_ERR_UNSUPPORTED (it cannot be migrated
 * there). In both modes an SQLite database of another program (objects, but not kforge's
 * tables) is KF_ERR_PARSE naming a few of its tables, and is left unchanged. */
kf_status kf_store_open_mode(const char *path, kf_store_mode mode, int *created, kf_store **out,
                             kf_error *err);
/* 1 when the store was opened read-only (kf_store_open_mode). */
int kf_store_readonly(const kf_store *s);
void kf_store_close(kf_store *s);
const char *kf_store_path(const kf_store *s);
/* The handle, for tests and tools that read the tables directly (a sqlite3 *). */
void *kf_store_db(kf_store *s);

/* ---- cached input sets (issue 30) ---- */

/* Contract: keep the n byte blobs data[k] (len[k] bytes each) under key for task, in one
 * transaction, replacing what key held; then only the task's `keep` newest keys stay (0:
 * all). The verifier's input sets and reference are kept so (kf_verify_ctx_parts). */
kf_status kf_store_parts_put(kf_store *s, const char *key, const char *task, int n, const void *const *data,
                             const size_t *len, int keep, kf_error *err);
/* Contract: the blobs under key, in order: *n of them (0 when none, or when the entry is
 * incomplete), (*data)[k] malloc'd with (*len)[k] bytes; the caller frees each, and both
 * arrays. */
kf_status kf_store_parts_get(kf_store *s, const char *key, int *n, void ***data, size_t **len, kf_error *err);

/* ---- merging stores (src/store/merge.c, docs/store.md) ---- */

typedef struct kf_store_merge_counts {
    int in_version;          /* the input's schema version */
    int runs_added, runs_updated, runs_same, runs_conflict;
    int tasks, candidates, evaluations, iterations, diagnoses, transcripts, refsets; /* rows added */
    char conflict[17];       /* the first run id that names another run in OUT, "" none */
} kf_store_merge_counts;

/* Contract: 0 when in_path is a kforge store this kforge can merge (its version into
 * *version, may be NULL); KF_ERR_ARG when there is no such file, KF_ERR_PARSE when it is
 * not a kforge store, KF_ERR_UNSUPPORTED (saying both versions) when its schema is newer.
 * Nothing is written. */
kf_status kf_store_merge_check(const char *in_path, int *version, kf_error *err);
/* Contract: copy every row of the store at in_path into out, in one transaction, counts
 * into *c: rows with keys (tasks, candidates, runs, cached input sets) by key, evaluations
 * and transcripts renumbered; merging the same input again adds nothing; a run in both
 * keeps the copy further along; a run id naming different runs (start, host or task) is
 * left out and counted. in_path is never written (an older schema is migrated in a
 * temporary copy). Errors: kf_store_merge_check's, KF_ERR_ARG when in_path is out's
 * file, KF_ERR_IO when a copy fails (out left as it was). */
kf_status kf_store_merge(kf_store *out, const char *in_path, kf_store_merge_counts *c, kf_error *err);

/* ---- tasks ---- */

/* Contract: record a task (idempotent) and put its content hash (16 hex digits of the
 * text) into hash. The text is the task's canonical source (.kf). */
kf_status kf_store_task_put(kf_store *s, const char *name, const char *text, char hash[17],
                            kf_error *err);
/* Contract: the content hash kf_store_task_put gives text, into hash (nothing stored). */
void kf_store_task_hash(const char *text, char hash[17]);
/* Contract: the text of task hash (malloc'd, caller frees) or KF_ERR_ARG when absent. */
kf_status kf_store_task_text(kf_store *s, const char *hash, char **text, kf_error *err);

/* ---- runs ---- */

typedef struct kf_store_run {
    char id[17];             /* 16 hex digits; `kforge runs` prints the first 10 */
    char task[17];           /* task hash */
    char task_name[128];
    char task_path[512];
    char target[64];         /* --target as given */
    char platform[16], device[128], compiler[256];
    char agent[16];          /* builtin, llm, both */
    uint64_t seed;           /* the seed actually used (never 0 once the loop started) */
    int iters_planned;
    char *options;           /* JSON object of the loop's options (owned) */
    char *device_json;       /* device, ceilings, roofline, plan (owned; NULL until known) */
    char out_dir[512];
    double started, ended;   /* Unix seconds; ended 0 while running */
    char status[16];         /* running, done, interrupted, failed */
    long pid;
    char host[128];
    int iters_done;          /* iterations stored */
    int best_iter;           /* 0 = none */
    double best_ms, best_pct;
    int cache_hits;          /* iterations served from the cache (in this run's rows) */
    int replayed;            /* stored iterations a resume re-proposed and kept as they were */
    char stop_reason[160];
    double wall_s;
    int llm_calls;
    long prompt_tokens, completion_tokens;
    char memcheck[64];
    char memcheck_detail[2048];
    char reference[800];     /* where the model's reference kernel came from ("" = none or
                                not a model run; schema version 2) */
    char phases[1024];       /* where the run's time went: kf_phase_times as JSON, as run.json's
                                phases_s ("" = not recorded; schema version 3) */
    char result_from[8];     /* which agent wrote the run's result: "builtin", "llm", "none", as
                                run.json's result.from ("" = not recorded; schema version 4) */
    char result_detail[2048]; /* ... and its detail: the path that produced it, or why there is
                                none (a module task's uncovered nodes) */
} kf_store_run;

void kf_store_run_clear(kf_store_run *r);

/* Contract: insert run r (r->id is filled with a fresh id when empty) with status
 * "running", this process's pid and host. r->task must have been put. */
kf_status kf_store_run_begin(kf_store *s, kf_store_run *r, kf_error *err);
/* Contract: mark run id running again under this process (resume), with device_json. */
kf_status kf_store_run_reopen(kf_store *s, const char *id, const char *device_json, kf_error *err);
/* Contract: record the device (platform, device, compiler, device_json) of a begun run. */
kf_status kf_store_run_device(kf_store *s, const char *id, const char *platform,
                              const char *device, const char *compiler, const char *device_json,
                              kf_error *err);
/* Contract: the run's final state: status, ended (now), best, stop reason, wall time,
 * model usage, memcheck (r's fields of those names; the rest is not written). */
kf_status kf_store_run_finish(kf_store *s, const kf_store_run *r, kf_error *err);
/* Contract: record where run id's model reference kernel came from (a file, the builtin's
 * best, another platform's stored kernel, or "none (why)"). */
kf_status kf_store_run_reference(kf_store *s, const char *id, const char *reference, kf_error *err);

/* Contract: find a run by its id or a unique prefix of it (ref). A run still marked
 * running whose process is gone (same host, pid not alive) is marked interrupted first.
 * KF_ERR_ARG naming the store when no run matches or the prefix is ambiguous. *out is
 * owned by the caller (kf_store_run_clear). */
kf_status kf_store_run_get(kf_store *s, const char *ref, kf_store_run *out, kf_error *err);

/* Contract: the newest runs first (at most limit, 0 = all; task_name NULL = any), into a
 * malloc'd array *out of *n (clear each, then free). Stale running runs are marked
 * interrupted first, as in kf_store_run_get. */
kf_status kf_store_runs_list(kf_store *s, const char *task_name, int limit, kf_store_run **out,
                             int *n, kf_error *err);

/* Contract: mark every "running" run of this host whose process is gone as interrupted;
 * *marked (may be NULL) gets how many. */
kf_status kf_store_mark_interrupted(kf_store *s, int *marked, kf_error *err);

/* ---- candidates, evaluations, iterations ---- */

typedef struct kf_store_key {
    const char *task;        /* task hash */
    const char *source, *flags;
    const char *platform, *device, *compiler;
    const char *settings;    /* verification settings, e.g. "sets=3 threads=2 fresh=0 mc=0" */
} kf_store_key;

/* Contract: the cache key of k (16 hex digits) into key; see the design note. */
void kf_store_cache_key(const kf_store_key *k, char key[17]);

/* What a verification found: the loop's kf_vresult as plain fields. */
typedef struct kf_store_eval {
    int64_t id;              /* its row (get: set; put: ignored) */
    char status[24];         /* kf_vstatus_name */
    char detail[2048];
    int sets_run, bad_set, bad_output;
    int64_t first_bad;
    double got, want, max_abs_err, max_rel_err, nmse;
    int timed, reps;
    double time_ms, time_min_ms, time_mean_ms, run_wall_s;
    char resources[512];
    char memcheck[16];
    double measured_at;      /* Unix seconds when it was measured */
    char measured_by[17];    /* the run that measured it */
} kf_store_eval;

/* Contract: the newest reusable evaluation of cache key into *ev: *found = 1 when there is
 * one (see the design note for what is never reused), else 0. */
kf_status kf_store_cache_get(kf_store *s, const char *key, kf_store_eval *ev, int *found,
                             kf_error *err);

typedef struct kf_store_iter {
    int iter;                /* 1-based */
    char label[512], agent[8], followed[200];
    char hash[17];           /* source+flags hash as the loop prints it */
    char key[17];            /* cache key */
    const char *source;      /* candidate source (put: borrowed; get: owned) */
    char flags[512];
    kf_store_eval ev;
    int cached;              /* ev came from an earlier evaluation (put: not inserted) */
    int best_so_far;
    double gbs, gflops, pct_floor;
    const char *diag_json;   /* the diagnosis as JSON (put: borrowed; get: owned), NULL none */
    char bound[12];
    double occupancy;        /* < 0 none */
} kf_store_iter;

/* Contract: store iteration it of run (one transaction): its candidate (once per key),
 * its evaluation (unless it->cached), its row and diagnosis, and the run's progress
 * (iterations stored, best, cache hits). A row already stored for (run, iter) with the
 * same candidate is kept as it was (a resumed run replaying it); one with another
 * candidate is replaced. k gives the key's parts (stored with the candidate). */
kf_status kf_store_iter_put(kf_store *s, const char *run, const kf_store_key *k,
                            const kf_store_iter *it, kf_error *err);

/* Contract: a later verdict on iteration iter of run (the final memory check): its
 * evaluation's memcheck, status and detail are set to these. */
kf_status kf_store_iter_verdict(kf_store *s, const char *run, int iter, const char *status,
                                const char *detail, const char *memcheck, kf_error *err);

/* Contract: the stored iterations of run in order, into a malloc'd array *out of *n;
 * free with kf_store_iters_free. */
kf_status kf_store_iters_get(kf_store *s, const char *run, kf_store_iter **out, int *n,
                             kf_error *err);
void kf_store_iters_free(kf_store_iter *its, int n);

/* Contract: append one model message to run's transcript (iter 0 = not tied to one). */
kf_status kf_store_transcript_add(kf_store *s, const char *run, int iter, const char *role,
                                  const char *text, long prompt_tokens, long completion_tokens,
                                  kf_error *err);

/* Contract: one model call of run, in one transaction, as soon as its answer is in: the
 * message sent (ask, role "user"; NULL: none) and the answer (role "assistant" with the
 * reply, or "error" with the failure), tied to iteration iter (the one the reply becomes).
 * Token counts go on the answer's row. A process killed mid-call loses that call only. */
kf_status kf_store_transcript_call(kf_store *s, const char *run, int iter, const char *ask,
                                   const char *role, const char *text, long prompt_tokens,
                                   long completion_tokens, kf_error *err);

/* ---- transfer: the best verified kernel of a task per platform ---- */

typedef struct kf_store_best {
    char platform[16], device[128];
    char run[17];            /* the run and iteration that hold it (the newest of equals) */
    int iter;
    char key[17];            /* the candidate's cache key */
    char flags[512];         /* its compile flags (tunable values are -D flags) */
    double time_ms, pct_floor; /* median time; % of the roofline floor on that run's ceilings */
    double measured_at;
    char *source;            /* owned */
} kf_store_best;

/* Contract: the best verified, timed candidate stored for task (its hash) on each platform,
 * into a malloc'd array *out of *n (kf_store_best_free), ordered by platform name. "Best"
 * is the highest % of floor, then the shortest time: % of floor compares kernels across
 * devices (a time on a laptop CPU and one on a GPU do not), and within one device it orders
 * as time does. Only evaluations whose status is still ok count (a later memory-check
 * verdict that failed one removes it). platform: only that platform (NULL: all);
 * exclude: not that platform (NULL: none). *n = 0 when there is none. */
kf_status kf_store_best_per_platform(kf_store *s, const char *task, const char *platform,
                                     const char *exclude, kf_store_best **out, int *n,
                                     kf_error *err);
void kf_store_best_free(kf_store_best *b, int n);
void kf_store_best_clear(kf_store_best *b); /* frees b->source */

/* Contract: transfer, the model's reference: the best (as kf_store_best_per_platform ranks
 * them, across platforms) verified candidate stored for task on a platform other than
 * platform, into *out (kf_store_best_clear it); *found = 0 when none. */
kf_status kf_store_best_elsewhere(kf_store *s, const char *task, const char *platform,
                                  kf_store_best *out, int *found, kf_error *err);

#ifdef __cplusplus
}
#endif
#endif
