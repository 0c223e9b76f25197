/*
 * The model generation agent behind the loop's proposer interface (agent_int.h): each
 * round asks the chat model (llm_agent.c) for a kernel with the feedback on the last one,
 * evaluates it, then tries each other value of its tunables one at a time before the next
 * round. Its first step opens the agent: the reference kernel (--reference FILE, the
 * builtin's best with --agent both, else the store's best of the task on another
 * platform) and the endpoint. It has nothing more to propose when the call budget is spent
 * or the endpoint failed three times in a row (r->stop_reason says which).
 */
#include "agent/agent_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model's side of the loop: its rounds, and the tunable variants of its last kernel
 * still to try. */
typedef struct llmstate {
    const kf_graph *g;
    kf_llm_agent *agent;
    char *ref;                 /* reference kernel text (owned) */
    int nround;                /* model kernels asked for */
    int round_first, round_best; /* iteration indices of this round's kernel and best variant */
    char *src;                 /* the round's source (owned) */
    char queue[64][160];       /* -D flags of variants to try */
    int nq, qi;
    int agent_errors;          /* consecutive endpoint failures */
} llmstate;

/* Each model call, stored as it returns (the reply becomes the next iteration). */
static void llm_called(void *ctx, const char *ask, const char *reply, const char *error, long pt, long ct) {
    kf_evalctx *ec = ctx;
    kf_persist_call(ec->ps, ec->r, ec->r->niters + 1, ask, reply, error, pt, ct);
}

/* The model's reference kernel: none with --no-reference, else --reference FILE, else
 * (--agent both on a module task) the builtin's kernels of its parts, else (--agent both)
 * the builtin's best, else (transfer) the store's best verified kernel of
 * this task on another platform. */
static kf_status llm_open(kf_evalctx *ec, llmstate *ls, kf_error *err) {
    const kf_graph *g = ls->g;
    const kf_loop_opts *o = ec->o;
    char origin[800] = "", ref_platform[16] = "";
    if (o->no_reference) {
        /* the model starts from the task alone */
    } else if (o->reference_path) {
        size_t n = 0;
        kf_status st = kf_read_file(o->reference_path, &ls->ref, &n, err);
        if (st != KF_OK) return st;
        snprintf(origin, sizeof origin, "%s", o->reference_path);
    } else if (ec->parts_ref) {
        /* a mixed task: the builtin's kernels of the parts kforge lowers */
        ls->ref = kf_strdup(ec->parts_ref);
        snprintf(origin, sizeof origin, "%s", ec->parts_origin ? ec->parts_origin : "kforge's builtin generator");
    } else if (o->agent == KF_AGENT_BOTH && ec->r->best >= 0) {
        const kf_iter_record *b = &ec->r->iters[ec->r->best];
        ls->ref = kf_strdup(b->source);
        snprintf(origin, sizeof origin, "kforge's builtin generator, %.4g ms, %.0f%% of the floor", b->res.time_ms,
                 b->perf.pct_floor);
    } else {
        kf_persist_reference(ec->ps, ec->r, &ls->ref, origin, sizeof origin, ref_platform, sizeof ref_platform);
    }
    char said[900];
    if (ls->ref) snprintf(said, sizeof said, "%s", origin);
    else if (o->no_reference) snprintf(said, sizeof said, "none (--no-reference)");
    else snprintf(said, sizeof said, "none (%s)", ec->ps->s ? "the store has no verified kernel of this task "
                                                              "on another platform" : "no store");
    if (o->table) fprintf(o->table, "reference: %s\n", said);
    kf_persist_note_reference(ec->ps, ec->r, said);
    char tpath[700];
    snprintf(tpath, sizeof tpath, "%s/transcript.jsonl", ec->r->out_dir);
    kf_llm_agent_setup su = {.g = g, .o = o, .r = ec->r, .transcript_path = tpath, .reference = ls->ref,
                             .reference_origin = origin[0] ? origin : NULL,
                             .reference_platform = ref_platform[0] ? ref_platform : NULL,
                             .reference_parts = ls->ref && ec->parts_ref,
                             .on_call = llm_called, .on_call_ctx = ec};
    kf_status st = kf_llm_agent_new(&su, &ls->agent, err);
    if (st == KF_OK && o->table)
        fprintf(o->table, "model: %s at %s (%s); transcript %s\n", o->llm->model, o->llm->url,
                o->llm->origin[0] ? o->llm->origin : "flags", tpath);
    return st;
}

/* The variants of a verified model kernel: every other value of one tunable at a time. */
static void queue_variants(llmstate *ls, const kf_candidate *c) {
    ls->nq = ls->qi = 0;
    for (int i = 0; i < c->ntunables; i++)
        for (int j = 1; j < c->tunables[i].nvalues && ls->nq < 64; j++)
            snprintf(ls->queue[ls->nq++], sizeof ls->queue[0], "-D%s=%ld", c->tunables[i].name,
                     c->tunables[i].values[j]);
}

/* One iteration for the model: the next tunable variant of its last kernel, or a new
 * kernel asked for with the feedback on the last round. KF_ERR_UNSUPPORTED ends the loop
 * (r->stop_reason says why). */
static kf_status llm_step(void *self, kf_evalctx *ec, int it, kf_error *err) {
    llmstate *ls = self;
    kf_run_result *r = ec->r;
    kf_status st;
    if (!ls->agent && (st = llm_open(ec, ls, err)) != KF_OK) return st;
    char label[160];
    if (ls->qi < ls->nq) {
        kf_candidate c;
        st = kf_candidate_init(&c, r->dev.platform, ls->src, NULL, err);
        if (st != KF_OK) return st;
        snprintf(c.flags, sizeof c.flags, "%s", ls->queue[ls->qi]);
        snprintf(label, sizeof label, "llm %d %s", ls->nround, ls->queue[ls->qi] + 2);
        ls->qi++;
        kf_iter_record *rec = kf_loop_new_iter(r, it, "llm", label);
        kf_loop_evaluate(ec, &c, rec);
        if (rec->res.status == KF_V_OK &&
            (ls->round_best < 0 || r->iters[ls->round_best].res.status != KF_V_OK ||
             rec->res.time_ms < r->iters[ls->round_best].res.time_ms))
            ls->round_best = r->niters - 1;
        kf_candidate_clear(&c);
        return KF_OK;
    }
    if (ls->round_first >= 0)
        kf_llm_agent_feedback(ls->agent, &r->iters[ls->round_first],
                              ls->round_best >= 0 ? &r->iters[ls->round_best] : NULL);
    ls->round_first = ls->round_best = -1;
    char *code = NULL;
    kf_vstatus vs = KF_V_OK;
    char detail[1024];
    kf_error ae = {0};
    /* a spent budget ends the run here, before a round is announced that never happens */
    if (kf_llm_agent_budget(ls->agent, &ae) != KF_OK) {
        snprintf(r->stop_reason, sizeof r->stop_reason, "%s", ae.msg);
        return KF_ERR_UNSUPPORTED;
    }
    if (ec->o->table) fprintf(ec->o->table, "asking the model (round %d)...\n", ls->nround + 1);
    st = kf_llm_agent_ask(ls->agent, &code, &vs, detail, sizeof detail, &ae);
    if (st == KF_ERR_UNSUPPORTED) {
        snprintf(r->stop_reason, sizeof r->stop_reason, "%s", ae.msg);
        return st;
    }
    int config_error = st == KF_ERR_ARG && vs == KF_V_AGENT_ERROR;
    if (st != KF_OK && !config_error) {
        if (err) *err = ae;
        return st;
    }
    ls->nround++;
    snprintf(label, sizeof label, "llm %d", ls->nround);
    kf_iter_record *rec = kf_loop_new_iter(r, it, "llm", label);
    if (!code) {
        rec->res.status = vs;
        snprintf(rec->res.detail, sizeof rec->res.detail, "%s", detail);
        kf_loop_table_row(ec, rec);
        kf_persist_iter(ec->ps, r, rec, NULL, NULL);
        if (config_error) {
            /* asking again cannot mend it: the same prompt would not fit either */
            snprintf(r->stop_reason, sizeof r->stop_reason, "configuration error: %.130s", detail);
            return KF_ERR_UNSUPPORTED;
        }
        if (vs == KF_V_AGENT_ERROR && ++ls->agent_errors >= 3) {
            snprintf(r->stop_reason, sizeof r->stop_reason, "the model's endpoint failed 3 times in a row");
            return KF_ERR_UNSUPPORTED;
        }
        return KF_OK;
    }
    ls->agent_errors = 0;
    free(ls->src);
    ls->src = code;
    ls->nq = ls->qi = 0;
    ls->round_first = r->niters - 1;
    kf_candidate c;
    kf_error pe = {0};
    if (kf_candidate_init(&c, r->dev.platform, code, NULL, &pe) != KF_OK) {
        /* a malformed tunable line is the kernel's fault, like a build error */
        rec->res.status = KF_V_COMPILE_ERROR;
        snprintf(rec->res.detail, sizeof rec->res.detail, "%s", pe.msg);
        kf_loop_table_row(ec, rec);
        kf_persist_iter(ec->ps, r, rec, code, NULL);
        return KF_OK;
    }
    kf_loop_evaluate(ec, &c, rec);
    if (rec->res.status == KF_V_OK) {
        ls->round_best = ls->round_first;
        queue_variants(ls, &c);
    }
    kf_candidate_clear(&c);
    return KF_OK;
}

/* The model's iterations are over: its usage into the run, said in the table. */
static void llm_close(void *self, kf_evalctx *ec) {
    llmstate *ls = self;
    kf_run_result *r = ec->r;
    if (!ls->agent) return;
    kf_llm_agent_usage(ls->agent, &r->llm_calls, &r->llm_prompt_tokens, &r->llm_completion_tokens);
    kf_llm_agent_free(ls->agent);
    ls->agent = NULL;
    if (ec->o->table)
        fprintf(ec->o->table, "model: %d call%s, %ld prompt + %ld completion tokens%s%s\n", r->llm_calls,
                r->llm_calls == 1 ? "" : "s", r->llm_prompt_tokens, r->llm_completion_tokens,
                r->stop_reason[0] ? "; stopped: " : "", r->stop_reason);
}

static void llm_free(void *self) {
    llmstate *ls = self;
    if (!ls) return;
    kf_llm_agent_free(ls->agent);
    free(ls->ref);
    free(ls->src);
    free(ls);
}

void kf_proposer_llm(const kf_graph *g, kf_proposer *out) {
    llmstate *ls = kf_calloc(1, sizeof *ls);
    ls->g = g;
    ls->round_first = ls->round_best = -1;
    *out = (kf_proposer){.name = "llm", .self = ls, .step = llm_step, .close = llm_close, .free = llm_free};
}

