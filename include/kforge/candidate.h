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
 */
#ifndef KFORGE_CANDIDATE_H
#define KFORGE_CANDIDATE_H

#include "kforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KF_MAX_TUNABLES 16
#define KF_MAX_TUNABLE_VALUES 16

typedef struct kf_tunable {
    char name[32];
    int nvalues;
    long values[KF_MAX_TUNABLE_VALUES];
} kf_tunable;

typedef struct kf_candidate {
    char platform[16];     /* "cpu" */
    char entry[64];        /* entry symbol */
    char *source;          /* owned */
    char label[128];       /* short description of the schedule, for tables */
    char flags[512];       /* extra compile flags for this instance (e.g. -DTILE=64) */
    int ntunables;
    kf_tunable tunables[KF_MAX_TUNABLES];
} kf_candidate;

/* Make a candidate from source text: copies it, sets entry (NULL = "kforge_kernel") and
 * parses its "kforge:tunable" lines. Returns KF_ERR_PARSE on a malformed tunable line. */
kf_status kf_candidate_init(kf_candidate *c, const char *platform, const char *source,
                            const char *entry, kf_error *err);
void kf_candidate_clear(kf_candidate *c);
/* Deep copy. */
void kf_candidate_copy(kf_candidate *dst, const kf_candidate *src);

#ifdef __cplusplus
}
#endif
#endif
