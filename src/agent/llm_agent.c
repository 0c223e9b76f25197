/*
 * The LLM generation agent. It keeps one conversation per run: the system prompt
 * (prompts/system.md), a first user message built from prompts/task.md (the platform's
 * contract, a one-shot example task and kernel from prompts/examples/, the task's .kf
 * source, the PyTorch source when there is one, an optional reference kernel and the
 * roofline floor), then for each round the model's reply and kforge's feedback on it
 * (prompts/feedback_*.md). To bound the context only the last KEEP rounds are sent; the
 * best verified kernel so far is restated in the latest feedback, so nothing the model
 * needs is dropped.
 *
 * The feedback never contains reference outputs: a mismatch is summarised from the
 * verification record (output, element, the kernel's value, error size, input set), not
 * from the harness's detail line, which quotes the expected value.
 *
 * Every call is appended to the transcript (JSON lines): the messages sent, the reply,
 * the stop reason, tokens, attempts and time, or the error; and handed, as it returns, to
 * the setup's on_call (the loop stores it: docs/store.md). The key is never in either.
 */
#include "agent/agent_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP 3            /* rounds of history sent with each call */
#define MAXROUNDS 256
#define FEEDBACK_CAP 6000 /* characters of compiler log or detail fed back */

typedef struct round {
    char *reply;          /* the model's text */
    char *feedback;       /* kforge's answer to it (NULL until given) */
    uint64_t hash;        /* of its code (else of its text): repeats are found by it */
    int repeat_of;        /* the earlier round (1-based) it repeats; 0 = none */
} round;

struct kf_llm_agent {
    kf_llm *llm;
    const kf_graph *g;
    const kf_run_result *r;
    char platform[16];
    char *system;
    char *first;               /* the task message: whole; */
    char *first_noref;         /* without the reference kernel; */
    char *first_bare;          /* without it and the one-shot example (context fitting) */
    int has_ref;
    char *tpl_compile, *tpl_runtime, *tpl_mismatch, *tpl_ok, *tpl_nocode, *tpl_repeat, *tpl_forbidden;
    const kf_llm_config *cfg;  /* the endpoint's settings (the caller's, for the run) */
    FILE *table;               /* the run's table (NULL: quiet) */
    long window;               /* the model's context window in tokens (0: unknown) */
    int window_asked;          /* the server was asked for it */
    double tok_per_char;       /* prompt tokens per character, for the fitting estimate */
    char last_fit[300];        /* the last fitting said in the table */
    int repeats;               /* replies in a row that repeated an earlier round */
    round rounds[MAXROUNDS];
    int nrounds;
    FILE *transcript;
    double best_ms;
    char *best_source;
    int analysis;              /* KF_ANALYSIS_* */
    void (*on_call)(void *, const char *, const char *, const char *, long, long);
    void *on_call_ctx;
};

/* What the analysis agent says about kernel b, for the model: the diagnosis (bound,
 * occupancy, evidence) with --analysis builtin, or the raw profile with --analysis llm (the
 * model reads the numbers itself); "" with --analysis off. The diagnosis' schedule moves
 * name the builtin templates' parameters, so they are left out. */
static char *analysis_text(const struct kf_llm_agent *a, const kf_iter_record *b) {
    kf_buf t = {0};
    kf_buf_puts(&t, "");
    const kf_roofline *rf = &a->r->roof;
    if (a->analysis == KF_ANALYSIS_LLM) {
        kf_buf_printf(&t, "Raw profile of that kernel (interpret it yourself):\n"
                      "- time: median %.6g ms, fastest %.6g ms, over %d timed runs\n"
                      "- task minimum bytes %.0f, FLOPs %.0f\n"
                      "- device ceilings (measured): copy %.0f GB/s, f32 peak %.0f GFLOP/s, one launch %.3g us\n",
                      b->res.time_ms, b->res.time_min_ms, b->res.reps, rf->bytes, rf->flops, rf->bw_gbs,
                      rf->peak_gflops, a->r->ceil.launch_us);
        if (b->res.resources[0]) kf_buf_printf(&t, "- compiler resource report: %s\n", b->res.resources);
        else kf_buf_puts(&t, "- no compiler resource report on this platform\n");
        if (b->ncounters > 0) kf_agent_counters_text(b->counters, b->ncounters, &t);
    } else if (a->analysis == KF_ANALYSIS_BUILTIN && b->has_diag) {
        const kf_diagnosis *d = &b->diag;
        kf_buf_printf(&t, "Performance analysis: %s-bound at %.0f%%", d->bound, 100 * d->achieved);
        if (d->occupancy >= 0)
            kf_buf_printf(&t, "; theoretical occupancy %.0f%% (limited by %s)", 100 * d->occupancy, d->occ_limit);
        kf_buf_puts(&t, ".\n");
        for (int i = 0; i < d->nevidence; i++) kf_buf_printf(&t, "- %s\n", d->evidence[i]);
    }
    return kf_buf_take(&t);
}

/* ---- prompt files ---- */

static void prompts_dir(const kf_loop_opts *o, char *out, size_t cap) {
    const char *d = o->prompts_dir;
    if (!d || !d[0]) d = getenv("KFORGE_PROMPTS");
    if (!d || !d[0]) d = KF_SOURCE_DIR "/prompts";
    snprintf(out, cap, "%s", d);
}

static kf_status read_prompt(const char *dir, const char *name, char **out, kf_error *err) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t n = 0;
    kf_status st = kf_read_file(path, out, &n, err);
    if (st != KF_OK)
        return kf_error_set(err, KF_ERR_IO, path, 0, 0,
                            "cannot read the prompt file (set --prompts DIR or KFORGE_PROMPTS to "
                            "the folder holding kforge's prompts/)");
    /* one trailing newline at most: templates are joined */
    while (n > 0 && (*out)[n - 1] == '\n') (*out)[--n] = 0;
    return KF_OK;
}

/* One line per operator the task uses, from the op registry: its spelling with its
 * attributes' defaults, what it computes, and the input domain it needs (owned text). */
static char *ops_glossary(const kf_graph *g) {
    kf_buf b = {0};
    int seen[KF_OP_COUNT] = {0};
    for (int i = 0; g && i < g->nnodes; i++) {
        const kf_op_def *d = kf_op_get(g->nodes[i].op);
        if (seen[d->op]++) continue;
        kf_buf_printf(&b, "- %s(", d->name);
        for (int k = 0; k < d->min_in; k++) kf_buf_printf(&b, "%s%c", k ? ", " : "", "xyzw"[k % 4]);
        for (int k = 0; d->attrs[k].name; k++) kf_buf_printf(&b, ", %s=%s", d->attrs[k].name, d->attrs[k].dflt);
        kf_buf_printf(&b, "): %s%s\n", d->doc, d->domain == KF_DOMAIN_POS ? " (inputs > 0)" : "");
    }
    return b.data ? kf_buf_take(&b) : kf_strdup("(none)\n");
}

/* tpl with every {{name}} replaced by its value (pairs in kv, NULL-terminated); an
 * unknown name is left as it is. */
static char *fill(const char *tpl, const char *const *kv) {
    kf_buf b = {0};
    for (const char *p = tpl; *p;) {
        const char *o = strstr(p, "{{");
        if (!o) {
            kf_buf_puts(&b, p);
            break;
        }
        kf_buf_putn(&b, p, (size_t)(o - p));
        const char *c = strstr(o, "}}");
        if (!c) {
            kf_buf_puts(&b, o);
            break;
        }
        int hit = 0;
        for (int i = 0; kv[i]; i += 2) {
            size_t n = strlen(kv[i]);
            if ((size_t)(c - o - 2) == n && strncmp(o + 2, kv[i], n) == 0) {
                kf_buf_puts(&b, kv[i + 1] ? kv[i + 1] : "");
                hit = 1;
                break;
            }
        }
        if (!hit) kf_buf_putn(&b, o, (size_t)(c + 2 - o));
        p = c + 2;
    }
    if (!b.data) kf_buf_puts(&b, "");
    return b.data;
}

/* The platform's row; the host's (C) for a name the table lacks. */
static const kf_platform *row_of(const char *platform) {
    const kf_platform *p = kf_platform_find(platform);
    return p ? p : kf_platform_host();
}

const char *kf_llm_agent_langs(const char *platform) { return row_of(platform)->fence_tags; }

static const char *fence_lang(const char *platform) { return row_of(platform)->fence; }

static const char *example_file(const char *platform) { return row_of(platform)->example_prompt; }

static char *floor_text(const kf_run_result *r) {
    char *s = NULL;
    if (asprintf(&s, "%.4g ms (%s-bound: %.4g MB moved at %.0f GB/s, %.4g GFLOP at %.0f GFLOP/s%s)",
                 r->roof.floor_s * 1e3, r->roof.bound ? r->roof.bound : "?", r->roof.bytes / 1e6,
                 r->roof.bw_gbs, r->roof.flops / 1e9, r->roof.peak_gflops,
                 r->roof.measured ? ", measured ceilings" : ", nominal ceilings") < 0)
        return NULL;
    return s;
}

kf_status kf_llm_agent_new(const kf_llm_agent_setup *su, kf_llm_agent **out, kf_error *err) {
    *out = NULL;
    const kf_loop_opts *o = su->o;
    if (!o->llm)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "--agent llm needs a model endpoint: --llm-url URL --model M (or "
                            "KFORGE_LLM_URL / KFORGE_LLM_MODEL, or a config file)");
    kf_llm_agent *a = kf_calloc(1, sizeof *a);
    a->g = su->g;
    a->r = su->r;
    a->analysis = o->analysis;
    a->table = o->table;
    a->cfg = o->llm;
    a->tok_per_char = 0.5; /* small models' tokenizers split C into ~2 characters a token */
    a->on_call = su->on_call;
    a->on_call_ctx = su->on_call_ctx;
    snprintf(a->platform, sizeof a->platform, "%s", su->r->dev.platform);
    char dir[1024];
    prompts_dir(o, dir, sizeof dir);
    char contract[64];
    const kf_platform *pf = kf_platform_find(a->platform);
    if (pf) snprintf(contract, sizeof contract, "%s", pf->contract_prompt);
    else snprintf(contract, sizeof contract, "contract_%s.md", a->platform); /* fails, naming it */
    char *task_tpl = NULL, *contract_txt = NULL, *ex_task = NULL, *ex_kernel = NULL, *torch_tpl = NULL,
         *ref_tpl = NULL, *torch_txt = NULL, *ref_txt = NULL, *flr = NULL, *ops_txt = NULL;
    kf_status st;
    if ((st = read_prompt(dir, "system.md", &a->system, err)) != KF_OK ||
        (st = read_prompt(dir, "task.md", &task_tpl, err)) != KF_OK ||
        (st = read_prompt(dir, contract, &contract_txt, err)) != KF_OK ||
        (st = read_prompt(dir, "examples/example.kf", &ex_task, err)) != KF_OK ||
        (st = read_prompt(dir, example_file(a->platform), &ex_kernel, err)) != KF_OK ||
        (st = read_prompt(dir, "torch.md", &torch_tpl, err)) != KF_OK ||
        (st = read_prompt(dir, "reference.md", &ref_tpl, err)) != KF_OK ||
        (st = read_prompt(dir, "feedback_compile.md", &a->tpl_compile, err)) != KF_OK ||
        (st = read_prompt(dir, "feedback_runtime.md", &a->tpl_runtime, err)) != KF_OK ||
        (st = read_prompt(dir, "feedback_mismatch.md", &a->tpl_mismatch, err)) != KF_OK ||
        (st = read_prompt(dir, "feedback_ok.md", &a->tpl_ok, err)) != KF_OK ||
        (st = read_prompt(dir, "feedback_no_code.md", &a->tpl_nocode, err)) != KF_OK ||
        (st = read_prompt(dir, "feedback_repeat.md", &a->tpl_repeat, err)) != KF_OK ||
        (st = read_prompt(dir, "feedback_forbidden.md", &a->tpl_forbidden, err)) != KF_OK)
        goto fail;
    if (su->g->module) {
        /* a module task: the module's source is the task; its own prompt says so */
        char mpath[1024], *msrc = NULL, *mod_tpl = NULL;
        if (!kf_module_file(su->g, "py", mpath, sizeof mpath)) {
            st = kf_error_set(err, KF_ERR_ARG, su->g->path, 0, 0, "the module's path is too long");
            goto fail;
        }
        if ((st = read_prompt(dir, "module.md", &mod_tpl, err)) != KF_OK ||
            (st = kf_read_file_max(mpath, 1 << 20, &msrc, NULL, err)) != KF_OK) {
            free(mod_tpl);
            goto fail;
        }
        const char *kv[] = {"torch_source", msrc, "platform", a->platform, "module_reference",
                            o->module_ref == KF_MODULE_REF_CUDA_F32   ? "by PyTorch in float32 on a GPU (TF32 off; the "
                                                                        "tolerance is doubled for its own rounding)"
                            : o->module_ref == KF_MODULE_REF_CUDA_F64 ? "by PyTorch in float64 on a GPU"
                                                                      : "by PyTorch in float64 on the CPU",
                            NULL};
        torch_txt = fill(mod_tpl, kv);
        free(mod_tpl);
        free(msrc);
    } else if (o->torch_text) {
        const char *kv[] = {"torch_source", o->torch_text, NULL};
        torch_txt = fill(torch_tpl, kv);
    }
    if (su->reference) {
        /* a kernel from another platform (transfer) is written to that platform's contract */
        const char *rp = su->reference_platform && su->reference_platform[0] ? su->reference_platform : a->platform;
        char note[200] = "";
        if (strcmp(rp, a->platform) != 0)
            snprintf(note, sizeof note, "\nIt is a %s kernel, not %s: keep its algorithm and write yours to the %s "
                     "contract above.", rp, a->platform, a->platform);
        const char *kv[] = {"reference_origin", su->reference_origin ? su->reference_origin : "given",
                            "reference_lang", fence_lang(rp), "reference_source", su->reference,
                            "reference_note", note, NULL};
        if (su->reference_parts) {
            /* a mixed task's part kernels: not the whole task's */
            free(ref_tpl);
            ref_tpl = NULL;
            if ((st = read_prompt(dir, "reference_parts.md", &ref_tpl, err)) != KF_OK) goto fail;
        }
        ref_txt = fill(ref_tpl, kv);
    }
    flr = floor_text(su->r);
    ops_txt = su->g->module ? kf_strdup("(none listed: a module task; the module's source below defines it)\n")
                            : ops_glossary(su->g);
    {
        char dev[300];
        snprintf(dev, sizeof dev, "%s", su->r->dev.name);
        const char *kv[] = {"platform", a->platform, "device", dev, "contract", contract_txt,
                            "example_task", ex_task, "example_kernel", ex_kernel,
                            "lang", fence_lang(a->platform),
                            "task", o->task_text ? o->task_text : "(task text not given)",
                            "torch", torch_txt ? torch_txt : "", "reference", ref_txt ? ref_txt : "",
                            "floor", flr ? flr : "?", "ops", ops_txt, NULL};
        a->first = fill(task_tpl, kv);
        /* the lighter forms, for a small context window: kv[17] is the reference, kv[7] and
         * kv[9] the example */
        kv[17] = "";
        a->first_noref = fill(task_tpl, kv);
        kv[7] = "(left out to fit the model's context window)";
        kv[9] = "(left out)";
        a->first_bare = fill(task_tpl, kv);
        a->has_ref = ref_txt != NULL;
    }
    if ((st = kf_llm_new(o->llm, &a->llm, err)) != KF_OK) goto fail;
    if (su->transcript_path) {
        a->transcript = fopen(su->transcript_path, "a");
        if (!a->transcript) {
            st = kf_error_set(err, KF_ERR_IO, su->transcript_path, 0, 0, "cannot open the transcript");
            goto fail;
        }
    }
    free(task_tpl), free(contract_txt), free(ex_task), free(ex_kernel), free(torch_tpl), free(ref_tpl);
    free(torch_txt), free(ref_txt), free(flr), free(ops_txt);
    *out = a;
    return KF_OK;
fail:
    free(task_tpl), free(contract_txt), free(ex_task), free(ex_kernel), free(torch_tpl), free(ref_tpl);
    free(torch_txt), free(ref_txt), free(flr), free(ops_txt);
    kf_llm_agent_free(a);
    return st;
}

void kf_llm_agent_free(kf_llm_agent *a) {
    if (!a) return;
    kf_llm_free(a->llm);
    free(a->system), free(a->first), free(a->first_noref), free(a->first_bare);
    free(a->tpl_compile), free(a->tpl_runtime), free(a->tpl_mismatch), free(a->tpl_ok), free(a->tpl_nocode);
    free(a->tpl_repeat), free(a->tpl_forbidden);
    for (int i = 0; i < a->nrounds; i++) free(a->rounds[i].reply), free(a->rounds[i].feedback);
    if (a->transcript) fclose(a->transcript);
    free(a->best_source);
    free(a);
}

void kf_llm_agent_usage(const kf_llm_agent *a, int *calls, long *pt, long *ct) {
    kf_llm_usage(a->llm, calls, pt, ct);
}

/* The round's feedback: fb, said to be about a repeat when the reply was one (owns fb). */
static void set_feedback(kf_llm_agent *a, round *rd, char *fb) {
    if (fb && rd->repeat_of) {
        char k[16];
        snprintf(k, sizeof k, "%d", rd->repeat_of);
        const char *kv[] = {"round", k, "feedback", fb, NULL};
        char *w = fill(a->tpl_repeat, kv);
        free(fb);
        fb = w;
    }
    rd->feedback = fb;
}

/* ---- one call ---- */

static void log_call(kf_llm_agent *a, const kf_llm_msg *m, int n, const kf_llm_reply *rep, kf_status st,
                     const char *error, const char *fit) {
    if (!a->transcript && !a->on_call) return;
    json_t *j = json_object();
    int calls = 0;
    long pt = 0, ct = 0;
    kf_llm_usage(a->llm, &calls, &pt, &ct);
    json_object_set_new(j, "call", json_integer(calls));
    json_object_set_new(j, "time", json_real(kf_now()));
    json_t *msgs = json_array();
    for (int i = 0; i < n; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "role", json_string(m[i].role));
        char *c = kf_strdup(m[i].content);
        kf_llm_redact(a->llm, c);
        json_object_set_new(e, "content", json_string(c));
        free(c);
        json_array_append_new(msgs, e);
    }
    json_object_set_new(j, "messages", msgs);
    char *reply = NULL, *fail = NULL;
    if (st == KF_OK) {
        reply = kf_strdup(rep->text ? rep->text : "");
        kf_llm_redact(a->llm, reply);
        json_object_set_new(j, "reply", json_string(reply));
        json_object_set_new(j, "finish", json_string(rep->finish));
        json_object_set_new(j, "prompt_tokens", json_integer(rep->prompt_tokens));
        json_object_set_new(j, "completion_tokens", json_integer(rep->completion_tokens));
    } else {
        fail = kf_strdup(error ? error : "");
        kf_llm_redact(a->llm, fail);
        json_object_set_new(j, "error", json_string(fail));
    }
    json_object_set_new(j, "http_status", json_integer(rep->http_status));
    json_object_set_new(j, "attempts", json_integer(rep->attempts));
    json_object_set_new(j, "seconds", json_real(rep->seconds));
    json_object_set_new(j, "max_tokens", json_integer(rep->max_tokens));
    if (rep->temperature >= 0) json_object_set_new(j, "temperature", json_real(rep->temperature));
    if (fit && fit[0]) json_object_set_new(j, "fit", json_string(fit));
    if (a->transcript) {
        char *line = json_dumps(j, JSON_COMPACT);
        if (line) {
            fprintf(a->transcript, "%s\n", line);
            fflush(a->transcript);
            free(line);
        }
    }
    /* the store's copy: the new message of this call (the first user message, or the
     * feedback on the last round) and its answer */
    if (a->on_call) {
        const char *ask = n > 0 ? json_string_value(json_object_get(json_array_get(msgs, (size_t)n - 1), "content"))
                                : NULL;
        a->on_call(a->on_call_ctx, ask, reply, fail, st == KF_OK ? rep->prompt_tokens : 0,
                   st == KF_OK ? rep->completion_tokens : 0);
    }
    free(reply);
    free(fail);
    json_decref(j);
}

kf_status kf_llm_agent_budget(const kf_llm_agent *a, kf_error *err) { return kf_llm_budget_left(a->llm, err); }

/* The prompt's size in tokens, estimated: characters at the calibrated rate, and a chat
 * template's few tokens per message. */
static long estimate(const kf_llm_agent *a, const kf_llm_msg *m, int n) {
    size_t chars = 0;
    for (int i = 0; i < n; i++) chars += strlen(m[i].content);
    return (long)(a->tok_per_char * (double)chars) + 8L * n + 16;
}

/* The messages at trimming level lvl (0: all; 1: older rounds left out; 2: the reference
 * too; 3: the one-shot example too; 4: the last kernel too, its feedback kept). */
static int build(const kf_llm_agent *a, int lvl, kf_llm_msg *m) {
    int n = 0;
    m[n++] = (kf_llm_msg){"system", a->system};
    m[n++] = (kf_llm_msg){"user", lvl >= 3 ? a->first_bare : lvl >= 2 ? a->first_noref : a->first};
    int from = a->nrounds - (lvl >= 1 ? 1 : KEEP);
    if (from < 0) from = 0;
    for (int i = from; i < a->nrounds; i++) {
        m[n++] = (kf_llm_msg){"assistant", lvl >= 4 ? "(my previous kernel, left out to fit the context window)"
                                                    : a->rounds[i].reply};
        m[n++] = (kf_llm_msg){"user", a->rounds[i].feedback ? a->rounds[i].feedback : "Continue."};
    }
    return n;
}

/* Fit the messages into the known window: the level and the reply limit, and what was
 * left out (fit, "" when nothing). 0 when even the lightest prompt leaves no room for a
 * reply (detail says so). */
static int fit_window(kf_llm_agent *a, kf_llm_msg *m, int *n, int *max_tokens, char *fit, size_t fcap,
                      char *detail, size_t dcap) {
    fit[0] = 0;
    *max_tokens = 0;
    *n = build(a, 0, m);
    if (a->window <= 0) return 1;
    long want = 0;
    int R = a->cfg->max_tokens > 0 ? a->cfg->max_tokens : 8192;
    long reserve = R < a->window / 2 ? R : a->window / 2;
    int lvl = 0;
    long est = estimate(a, m, *n);
    int older = a->nrounds - KEEP < 0 ? 0 : a->nrounds - KEEP; /* rounds never sent */
    while (est > a->window - reserve && lvl < 4) {
        lvl++;
        *n = build(a, lvl, m);
        est = estimate(a, m, *n);
    }
    long room = a->window - est;
    long min_reply = R < 128 ? R : 128;
    if (room < min_reply) {
        snprintf(detail, dcap,
                 "the prompt does not fit the model's context window (%ld tokens): it needs ~%ld tokens even "
                 "with the reference kernel, the example and older rounds left out, leaving %ld for the reply; "
                 "give a larger --context if the server allows, or serve the model with a larger window",
                 a->window, est, room > 0 ? room : 0);
        return 0;
    }
    want = room < R ? room : R;
    *max_tokens = (int)want;
    kf_buf b = {0};
    int dropped = a->nrounds - 1 - older;
    if (lvl >= 1 && dropped > 0) kf_buf_printf(&b, "%d older round%s", dropped, dropped == 1 ? "" : "s");
    if (lvl >= 2 && a->has_ref) kf_buf_printf(&b, "%sthe reference kernel", b.len ? ", " : "");
    if (lvl >= 3) kf_buf_printf(&b, "%sthe one-shot example", b.len ? ", " : "");
    if (lvl >= 4 && a->nrounds > 0) kf_buf_printf(&b, "%syour last kernel (its feedback kept)", b.len ? ", " : "");
    if (b.len || want < R)
        snprintf(fit, fcap, "fitted to the %ld-token context window: %s%s; ~%ld prompt tokens, reply limit %ld%s",
                 a->window, b.len ? "left out " : "nothing left out", b.len ? b.data : "", est, want,
                 want < R ? " (lowered to fit)" : "");
    kf_buf_free(&b);
    return 1;
}

kf_status kf_llm_agent_ask(kf_llm_agent *a, char **code, kf_vstatus *vs, char *detail, size_t cap,
                           kf_error *err) {
    *code = NULL;
    *vs = KF_V_OK;
    detail[0] = 0;
    if (a->nrounds >= MAXROUNDS)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%d rounds with the model", MAXROUNDS);
    /* a spent budget: no call, no transcript line */
    kf_status st = kf_llm_budget_left(a->llm, err);
    if (st != KF_OK) return st;
    if (!a->window_asked) {
        a->window_asked = 1;
        char how[64] = "--context";
        a->window = a->cfg->context_tokens;
        if (a->window <= 0) a->window = kf_llm_server_context(a->llm, how, sizeof how);
        if (a->window > 0 && a->table)
            fprintf(a->table, "model: context window %ld tokens (%s)\n", a->window, how);
    }
    /* system, first user message, then the last KEEP rounds (reply, feedback), fitted to the
     * context window when it is known */
    kf_llm_msg m[3 + 2 * KEEP];
    int n = 0, max_tokens = 0;
    char fit[300];
    if (!fit_window(a, m, &n, &max_tokens, fit, sizeof fit, detail, cap)) {
        *vs = KF_V_AGENT_ERROR;
        return KF_ERR_ARG;
    }
    if (fit[0] && strcmp(fit, a->last_fit) && a->table) fprintf(a->table, "prompt %s\n", fit);
    snprintf(a->last_fit, sizeof a->last_fit, "%s", fit);
    kf_llm_params p = {.max_tokens = max_tokens};
    if (a->repeats > 0) {
        /* the same reply again: vary the request */
        double base = a->cfg->temperature;
        p.set_temperature = 1;
        p.temperature = (base >= 0 ? base : 0.5) + 0.3 * a->repeats;
        if (p.temperature > 1) p.temperature = 1;
    }
    size_t chars = 0;
    for (int i = 0; i < n; i++) chars += strlen(m[i].content);
    kf_llm_reply rep;
    memset(&rep, 0, sizeof rep);
    kf_error e = {0};
    st = kf_llm_chat_with(a->llm, m, n, &p, &rep, &e);
    if (st == KF_ERR_UNSUPPORTED) {
        kf_llm_reply_free(&rep);
        if (err) *err = e;
        return st;
    }
    log_call(a, m, n, &rep, st, e.msg, fit);
    if (st != KF_OK) {
        *vs = KF_V_AGENT_ERROR;
        snprintf(detail, cap, "%s", e.msg);
        int fatal = rep.context_exceeded;
        kf_llm_reply_free(&rep);
        return fatal ? KF_ERR_ARG : KF_OK;
    }
    /* calibrate the estimate on what the server counted */
    if (rep.prompt_tokens > 8L * n + 16 && chars > 0)
        a->tok_per_char = 1.1 * (double)(rep.prompt_tokens - 8L * n - 16) / (double)chars;
    round *rd = &a->rounds[a->nrounds++];
    rd->reply = kf_strdup(rep.text && rep.text[0] ? rep.text : "(empty reply)");
    char *c = NULL;
    kf_error xe = {0};
    if (!rep.text || !rep.text[0]) {
        *vs = KF_V_NO_CODE;
        snprintf(detail, cap, "the reply was empty");
    } else if (kf_llm_extract_code(rep.text, kf_llm_agent_langs(a->platform), &c, &xe) != KF_OK) {
        *vs = KF_V_NO_CODE;
        snprintf(detail, cap, "%s%s", xe.msg,
                 rep.truncated ? " (the reply hit the token limit: write a shorter kernel, without "
                                 "commentary)" : "");
    } else if (rep.truncated) {
        /* a closed block in a cut-off reply may still be a whole kernel: try it, but say so */
        *code = c;
        snprintf(detail, cap, "the reply hit the token limit (stop reason '%s')", rep.finish);
    } else {
        *code = c;
    }
    /* the same code (or, without code, the same text) as an earlier round */
    const char *key = c ? c : rd->reply;
    rd->hash = kf_hash64(key, strlen(key), 0x5eed);
    for (int i = 0; i < a->nrounds - 1 && !rd->repeat_of; i++)
        if (a->rounds[i].hash == rd->hash) rd->repeat_of = i + 1;
    a->repeats = rd->repeat_of ? a->repeats + 1 : 0;
    if (*vs == KF_V_NO_CODE) {
        const char *kv[] = {"detail", detail, NULL};
        set_feedback(a, rd, fill(a->tpl_nocode, kv));
    }
    kf_llm_reply_free(&rep);
    return KF_OK;
}

/* ---- feedback ---- */

/* The last cap characters of s, from a line start, with a note when cut. */
static char *tail_lines(const char *s, size_t cap) {
    size_t n = strlen(s);
    if (n <= cap) return kf_strdup(s);
    const char *t = s + n - cap;
    const char *nl = strchr(t, '\n');
    if (nl && nl[1]) t = nl + 1;
    char *out = NULL;
    if (asprintf(&out, "[... %zu characters cut ...]\n%s", (size_t)(t - s), t) < 0) return kf_strdup(t);
    return out;
}

static void index_text(const kf_graph *g, int out_idx, int64_t flat, char *buf, size_t cap) {
    if (out_idx < 0 || out_idx >= g->noutputs || flat < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    const kf_shape *sh = &g->values[g->outputs[out_idx]].shape;
    int64_t idx[KF_MAX_DIMS];
    for (int d = sh->rank - 1; d >= 0; d--) {
        idx[d] = sh->d[d] ? flat % sh->d[d] : 0;
        flat = sh->d[d] ? flat / sh->d[d] : 0;
    }
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "[");
    for (int d = 0; d < sh->rank && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)idx[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

void kf_llm_agent_feedback(kf_llm_agent *a, const kf_iter_record *first, const kf_iter_record *best) {
    if (a->nrounds == 0 || !first) return;
    round *rd = &a->rounds[a->nrounds - 1];
    if (rd->feedback) return; /* already answered (no code) */
    const kf_vresult *v = &first->res;
    const char *status = kf_vstatus_name(v->status);
    char *fb = NULL;
    if (v->status == KF_V_COMPILE_ERROR || v->status == KF_V_LOAD_ERROR) {
        char *d = tail_lines(v->detail, FEEDBACK_CAP);
        const char *kv[] = {"status", status, "detail", d, NULL};
        fb = fill(a->tpl_compile, kv);
        free(d);
    } else if (v->status == KF_V_FORBIDDEN) {
        const char *kv[] = {"status", status, "detail", v->detail, NULL};
        fb = fill(a->tpl_forbidden, kv);
    } else if (v->status == KF_V_MISMATCH) {
        char where[128], sum[1024];
        const char *oname = v->bad_output >= 0 && v->bad_output < a->g->noutputs
                                ? a->g->values[a->g->outputs[v->bad_output]].name : "?";
        index_text(a->g, v->bad_output, v->first_bad, where, sizeof where);
        snprintf(sum, sizeof sum,
                 "- output '%s' is wrong; the first wrong element is %s%s, where your kernel wrote %.9g\n"
                 "- largest absolute error %.3g, relative error %.3g, normalised mean square error %.3g "
                 "(the tolerance is about 1e-4 relative)\n"
                 "- on input set %d (%s distribution)",
                 oname, oname, where, v->got, v->max_abs_err, v->max_rel_err, v->nmse, v->bad_set,
                 v->bad_dist[0] ? v->bad_dist : "?");
        const char *kv[] = {"status", status, "summary", sum, NULL};
        fb = fill(a->tpl_mismatch, kv);
    } else if (v->status != KF_V_OK) {
        char *d = tail_lines(v->detail, FEEDBACK_CAP);
        const char *kv[] = {"status", status, "detail", d, NULL};
        fb = fill(a->tpl_runtime, kv);
        free(d);
    } else {
        const kf_iter_record *b = best && best->res.status == KF_V_OK ? best : first;
        char t[32], gbs[32], gfl[32], pct[32], flr[32], sets[16], bestline[600], advice[600];
        snprintf(t, sizeof t, "%.4g", b->res.time_ms);
        snprintf(gbs, sizeof gbs, "%.1f", b->perf.gbs);
        snprintf(gfl, sizeof gfl, "%.1f", b->perf.gflops);
        snprintf(pct, sizeof pct, "%.0f%%", b->perf.pct_floor);
        snprintf(flr, sizeof flr, "%.4g", a->r->roof.floor_s * 1e3);
        snprintf(sets, sizeof sets, "%d", b->res.sets_run);
        bestline[0] = 0;
        if (b != first && b->flags[0])
            snprintf(bestline, sizeof bestline, "That is with %s, the fastest of its tunable values.",
                     b->flags);
        if (a->best_ms > 0 && a->best_ms < b->res.time_ms)
            snprintf(bestline + strlen(bestline), sizeof bestline - strlen(bestline),
                     "%sYour fastest kernel so far took %.4g ms.", bestline[0] ? " " : "", a->best_ms);
        if (a->best_ms <= 0 || b->res.time_ms < a->best_ms) a->best_ms = b->res.time_ms;
        const char *bound = a->r->roof.bound ? a->r->roof.bound : "?";
        if (b->perf.pct_floor >= 90)
            snprintf(advice, sizeof advice, "It is within 10%% of the floor: only small gains are left.");
        else if (a->r->roof.floor_s < 20e-6 && b->res.time_ms * 1e-3 > 10 * a->r->roof.floor_s)
            snprintf(advice, sizeof advice,
                     "The work is tiny (floor %.3g us): the time is fixed overhead (thread start-up, "
                     "launches, synchronisation), not bandwidth. Do it in one pass with as little "
                     "parallel machinery as the size needs (on a CPU: serially, or one parallel loop).",
                     a->r->roof.floor_s * 1e6);
        else if (strcmp(bound, "memory") == 0)
            snprintf(advice, sizeof advice,
                     "The task is memory-bound: the floor reads and writes each byte once at the "
                     "device's streaming bandwidth (%.0f GB/s). Read each input once, in contiguous "
                     "(coalesced, vectorised) order, fuse everything into one pass, and keep enough "
                     "work in flight.", a->r->roof.bw_gbs);
        else
            snprintf(advice, sizeof advice,
                     "The task is compute-bound (%.0f GFLOP/s peak): reuse operands from registers "
                     "and local/shared memory (tiling, register blocking) and keep the FMA units busy.",
                     a->r->roof.peak_gflops);
        char *an = analysis_text(a, b);
        const char *kv[] = {"sets", sets, "time_ms", t, "gbs", gbs, "gflops", gfl, "pct_floor", pct,
                            "bound", bound, "floor_ms", flr, "best", bestline, "advice", advice,
                            "analysis", an, NULL};
        fb = fill(a->tpl_ok, kv);
        free(an);
    }
    /* the candidate's own output can quote anything it could read (the key in a config
     * file, say): never send the key back over the network */
    if (fb) kf_llm_redact(a->llm, fb);
    set_feedback(a, rd, fb);
}
