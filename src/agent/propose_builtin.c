/*
 * The builtin generation agent behind the loop's proposer interface (agent_int.h): the
 * walk over the generator's schedule space (walk.c). Its first candidate is the default
 * point (or a random one with --start random); after that it measures the other templates
 * of a stage that several compute (kf_walk_template), then follows the performance
 * analysis agent's diagnosis of its best point (the highest-ranked move not yet tried),
 * then coordinate moves with the moves against the diagnosis and those measured no faster
 * last, then random points; with --analysis off every later point is random. It has
 * nothing more to propose when the space is exhausted.
 */
#include "agent/agent_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct builtin {
    kf_synth *syn;             /* borrowed: the loop owns it */
    const kf_loop_opts *o;
    kf_seen seen;              /* points evaluated */
    kf_move_log *failed;       /* single-parameter moves measured no faster */
    uint64_t rng;
    kf_point best_pt, pt;
    int best;                  /* iteration index of best_pt, -1 before one */
    int steps;
} builtin;

static kf_status builtin_step(void *self, kf_evalctx *ec, int it, kf_error *err) {
    builtin *b = self;
    const kf_loop_opts *o = b->o;
    kf_run_result *r = ec->r;
    const kf_space *sp = kf_synth_space(b->syn);
    char why[200] = "", skipped[200] = "", tpl[120] = "";
    kf_point base = b->best_pt; /* the point this candidate moves from */
    if (b->steps > 0) {
        const kf_iter_record *bi = b->best >= 0 ? &r->iters[b->best] : NULL;
        int found;
        if (o->analysis == KF_ANALYSIS_OFF) found = kf_walk_random(sp, &b->seen, &b->rng, &b->pt);
        else if (kf_walk_template(sp, &b->best_pt, &b->seen, &b->pt, tpl, sizeof tpl))
            found = 1;
        else if (bi && bi->has_diag &&
                 kf_walk_follow(sp, &b->best_pt, &bi->diag, b->failed, &b->seen, &b->pt, why, sizeof why, skipped,
                                sizeof skipped))
            found = 1;
        else
            found = kf_walk_propose(sp, &b->best_pt, bi && bi->has_diag ? &bi->diag : NULL, b->failed, &b->seen,
                                    &b->rng, &b->pt);
        if (!found) return KF_ERR_UNSUPPORTED; /* the space is exhausted */
    }
    b->steps++;
    kf_walk_mark(&b->seen, sp, &b->pt);
    kf_candidate cand;
    kf_status st = kf_synth_render(b->syn, &b->pt, &cand, err);
    if (st != KF_OK) return st;
    kf_iter_record *rec = kf_loop_new_iter(r, it, "builtin", cand.label);
    snprintf(rec->followed, sizeof rec->followed, "%s", why);
    if (skipped[0] && o->table)
        fprintf(o->table, "      not following the analysis into %s (moves measured no faster come last)\n", skipped);
    if (tpl[0] && o->table)
        fprintf(o->table, "      another template for the stage: %s (each template is measured before the analysis "
                          "tunes one)\n", tpl);
    if (why[0] && o->table)
        fprintf(o->table, "      following the analysis of iter %d: %s\n", r->iters[b->best].iter, why);
    ec->sp = sp;
    ec->pt = &b->pt;
    if (kf_loop_evaluate(ec, &cand, rec)) {
        b->best_pt = b->pt;
        b->best = (int)(rec - r->iters);
    } else if (b->steps > 1 && o->analysis != KF_ANALYSIS_OFF && rec->res.status == KF_V_OK && rec->res.timed) {
        /* only a measured time tells about the move: a candidate that failed (the plain
         * matmul loop's timeout) says nothing about the parameter it moved */
        kf_walk_log_failed(b->failed, sp, &base, &b->pt, rec->iter);
    }
    ec->sp = NULL;
    ec->pt = NULL;
    kf_candidate_clear(&cand);
    return KF_OK;
}

static void builtin_free(void *self) {
    builtin *b = self;
    if (!b) return;
    free(b->seen.h);
    free(b->failed);
    free(b);
}

void kf_proposer_builtin(kf_synth *syn, const kf_loop_opts *o, uint64_t seed, kf_proposer *out) {
    builtin *b = kf_calloc(1, sizeof *b);
    b->syn = syn;
    b->o = o;
    b->failed = kf_calloc(1, sizeof *b->failed);
    b->rng = seed;
    b->best = -1;
    kf_synth_default_point(syn, &b->pt);
    if (o->start_random) kf_walk_random(kf_synth_space(syn), &b->seen, &b->rng, &b->pt); /* never empty */
    b->best_pt = b->pt;
    *out = (kf_proposer){.name = "builtin", .self = b, .step = builtin_step, .close = NULL, .free = builtin_free};
}
