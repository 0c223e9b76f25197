/*
 * The verifier's one entry for running a candidate, whatever the run is for
 * (kf_verify_run, include/kforge/verify.h).
 *
 * Design note. Compiling a candidate is the verifier's job: the loop's final memory check,
 * --memcheck every and --counters ncu used to call the backend's compiler themselves and
 * hand the artifact to kf_verify_memcheck / kf_verify_profile. They now name a mode, and
 * the build (with the memory checker's flags where the mode needs them) happens here, in
 * the context's workdir, as kf_verify_candidate's does. A failed build is
 * KF_V_COMPILE_ERROR in r with the backend's status and message returned, so each caller
 * keeps its own words for it ("the profiled build failed: ...").
 */
#include "verify/verify_int.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Build cand with b into ctx's workdir with extra flags appended; art gets the artifact. */
static kf_status build(kf_verify_ctx *ctx, kf_backend *b, const kf_candidate *cand,
                       char *art, size_t cap, kf_vresult *r, kf_error *err) {
    kf_status st = kf_backend_compile(b, cand->source, cand->flags, ctx->workdir, art, cap, NULL, err);
    if (st != KF_OK) {
        r->status = KF_V_COMPILE_ERROR;
        snprintf(r->detail, sizeof r->detail, "%s", err ? err->msg : "the build failed");
    } else if (kf_verify_refuse_forbidden(b, cand, art, r)) {
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", r->detail);
    }
    return st;
}

/* See verify.h. */
kf_status kf_verify_run(kf_verify_ctx *ctx, kf_backend *b, const kf_candidate *cand,
                        const kf_verify_run_args *a, kf_vresult *r, kf_error *err) {
    if (!r) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_verify_run: missing result");
    memset(r, 0, sizeof *r);
    r->status = KF_V_INTERNAL;
    if (!ctx || !b || !cand || !cand->source || !a) {
        snprintf(r->detail, sizeof r->detail, "kf_verify_run: missing argument");
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_verify_run: missing argument");
    }
    char art[PATH_MAX];
    switch (a->mode) {
    case KF_VERIFY_CHECK:
        return kf_verify_candidate(ctx, b, cand, r, err);
    case KF_VERIFY_MEMCHECK: {
        /* the same source, built with what the checker needs (see kf_verify_memcheck_flags);
         * a source that needs what the faster build leaves out (FMA intrinsics under
         * -mno-fma) is built with the needed flags alone */
        kf_candidate c;
        kf_candidate_copy(&c, cand);
        const char *extra = kf_verify_memcheck_flags(b), *plain = kf_verify_memcheck_flags_plain(b);
        snprintf(c.flags, sizeof c.flags, "%s %s", cand->flags, extra);
        kf_status st = build(ctx, b, &c, art, sizeof art, r, err);
        if (st == KF_ERR_COMPILE && strcmp(extra, plain) != 0) {
            kf_log(2, "memcheck: the build with '%s' failed, building with '%s'", extra, plain);
            extra = plain;
            snprintf(c.flags, sizeof c.flags, "%s %s", cand->flags, extra);
            memset(r, 0, sizeof *r);
            r->status = KF_V_INTERNAL;
            if (err) memset(err, 0, sizeof *err);
            st = build(ctx, b, &c, art, sizeof art, r, err);
        }
        if (st == KF_OK) st = kf_verify_memcheck(ctx, b, &c, art, r, err);
        snprintf(r->checked_flags, sizeof r->checked_flags, "%s", extra);
        kf_candidate_clear(&c);
        return st;
    }
    case KF_VERIFY_PROFILE: {
        if (!a->csv) {
            snprintf(r->detail, sizeof r->detail, "kf_verify_run: the profile mode needs a csv buffer");
            return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "%s", r->detail);
        }
        if (a->detail && a->dcap) a->detail[0] = 0;
        kf_status st = build(ctx, b, cand, art, sizeof art, r, err);
        if (st != KF_OK) return st;
        st = kf_verify_profile(ctx, b, cand, art, a->tool, a->csv, a->detail, a->dcap, err);
        r->status = st == KF_OK ? KF_V_OK : KF_V_INTERNAL;
        return st;
    }
    }
    snprintf(r->detail, sizeof r->detail, "kf_verify_run: unknown mode %d", (int)a->mode);
    return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "%s", r->detail);
}
