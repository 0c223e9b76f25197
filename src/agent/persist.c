/*
 * The loop's side of the store (kf_loop_opts.store): the run's row at the start, each
 * iteration as soon as it is evaluated, the cache lookup before a candidate is compiled,
 * and the run's end.
 *
 * Design note. The loop calls these at four points and never reads the store otherwise,
 * so a loop without a store behaves exactly as before. A failed write does not stop the
 * search: the first failure is kept in kf_run_result.store_error and printed once, and
 * later iterations still try (a busy store may recover). What makes a stored result
 * reusable is written down in include/kforge/store.h; here the loop's values are turned
 * into the key's parts (device identity, compiler with the device's default flags, the
 * verification settings).
 */
#include "agent/agent_int.h"
#include "kforge/store.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

kf_vstatus kf_agent_vstatus_of(const char *name) {
    for (int s = 0; s < KF_V_COUNT; s++)
        if (strcmp(kf_vstatus_name((kf_vstatus)s), name) == 0) return (kf_vstatus)s;
    return KF_V_INTERNAL;
}

static void store_failed(kf_persist *p, kf_run_result *r, const kf_error *e) {
    r->store_failures++;
    if (r->store_error[0]) return;
    snprintf(r->store_error, sizeof r->store_error, "%s: %s", kf_store_path(p->s), e->msg);
    if (p->table) fprintf(p->table, "store: %s (the run goes on unrecorded)\n", r->store_error);
}

static json_t *options_json(const kf_loop_opts *o, const kf_run_result *r, int iters) {
    json_t *j = json_object();
    json_object_set_new(j, "target", json_string(o->target_spec ? o->target_spec : o->target ? o->target : "cpu"));
    json_object_set_new(j, "iters", json_integer(iters));
    json_object_set_new(j, "seed", json_integer((json_int_t)r->seed));
    json_object_set_new(j, "time_budget_s", json_real(o->time_budget_s));
    json_object_set_new(j, "threads", json_integer(o->threads));
    json_object_set_new(j, "fresh_outputs", json_integer(o->fresh_outputs));
    if (o->no_race) json_object_set_new(j, "no_race", json_true());
    json_object_set_new(j, "memcheck", json_integer(o->memcheck));
    json_object_set_new(j, "agent", json_integer(o->agent));
    json_object_set_new(j, "analysis", json_integer(o->analysis));
    if (o->pins && o->pins[0]) json_object_set_new(j, "pins", json_string(o->pins));
    if (o->start_random) json_object_set_new(j, "start", json_string("random"));
    if (o->counters == KF_COUNTERS_NCU) json_object_set_new(j, "counters", json_string("ncu"));
    json_object_set_new(j, "builtin_iters", json_integer(o->builtin_iters));
    json_object_set_new(j, "recalibrate", json_integer(o->recalibrate));
    json_object_set_new(j, "out_dir", json_string(r->out_dir));
    if (o->reference_path) json_object_set_new(j, "reference", json_string(o->reference_path));
    if (o->no_reference) json_object_set_new(j, "no_reference", json_true());
    if (o->llm) json_object_set_new(j, "model", json_string(o->llm->model));
    return j;
}

/* Everything about the run that kf_run_load needs besides the iterations. */
static char *device_record(const kf_run_result *r) {
    json_t *j = json_object();
    json_object_set_new(j, "device", kf_agent_device_json(&r->dev, &r->ceil));
    json_object_set_new(j, "roofline", json_pack("{s:f, s:f, s:f, s:s}", "bytes", r->roof.bytes, "flops",
                                                 r->roof.flops, "floor_ms", r->roof.floor_s * 1e3, "bound",
                                                 r->roof.bound ? r->roof.bound : ""));
    json_object_set_new(j, "plan", json_string(r->plan));
    json_object_set_new(j, "sandbox", json_string(r->sandbox));
    json_object_set_new(j, "sandbox_flags", json_integer(r->sandbox_flags));
    json_object_set_new(j, "arch", json_string(r->arch));
    char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    return text;
}

/* See agent_int.h. */
kf_status kf_persist_begin(kf_persist *p, const kf_graph *g, const kf_loop_opts *o, kf_run_result *r,
                           int iters, const kf_verify_opts *vo, kf_error *err) {
    memset(p, 0, sizeof p[0]);
    p->s = o->store;
    p->table = o->table;
    p->no_cache = o->no_cache;
    if (!p->s) return KF_OK;
    const kf_device_info *d = &r->dev;
    snprintf(p->device, sizeof p->device, "%s:%d|%s|%s|%s", d->platform, d->index, d->name, d->arch, d->driver);
    snprintf(p->compiler, sizeof p->compiler, "%s|%s", d->compiler, d->flags);
    snprintf(p->settings, sizeof p->settings, "sets=%d threads=%d fresh=%d mc-every=%d", vo->nsets,
             o->threads > 0 ? o->threads : d->threads, o->fresh_outputs, o->memcheck == KF_MEMCHECK_EVERY);
    char *text = NULL;
    kf_status st = KF_OK;
    if (!o->task_text && g->path[0]) st = kf_read_file(g->path, &text, NULL, err);
    if (st != KF_OK) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err ? err->msg : "?");
        return kf_error_set(err, st, g->path, 0, 0,
                            "the store keeps the task's text, and the task's file cannot be read (%s); a task "
                            "parsed from a string needs kf_loop_opts.task_text", why);
    }
    st = kf_store_task_put(p->s, g->name, o->task_text ? o->task_text : text ? text : g->name, p->task, err);
    free(text);
    char *dev = device_record(r);
    if (st == KF_OK && o->resume_run) {
        snprintf(r->run_id, sizeof r->run_id, "%s", o->resume_run);
        st = kf_store_run_reopen(p->s, o->resume_run, dev, err);
    } else if (st == KF_OK) {
        kf_store_run sr;
        memset(&sr, 0, sizeof sr);
        snprintf(sr.task, sizeof sr.task, "%s", p->task);
        snprintf(sr.task_name, sizeof sr.task_name, "%s", g->name);
        snprintf(sr.task_path, sizeof sr.task_path, "%s", g->path);
        snprintf(sr.target, sizeof sr.target, "%s", o->target_spec ? o->target_spec : o->target ? o->target : "cpu");
        snprintf(sr.platform, sizeof sr.platform, "%s", d->platform);
        snprintf(sr.device, sizeof sr.device, "%s", d->name);
        snprintf(sr.compiler, sizeof sr.compiler, "%s", d->compiler);
        snprintf(sr.agent, sizeof sr.agent, "%s", o->agent == KF_AGENT_LLM ? "llm" : o->agent == KF_AGENT_BOTH ? "both" : "builtin");
        snprintf(sr.out_dir, sizeof sr.out_dir, "%s", r->out_dir);
        sr.seed = r->seed;
        sr.iters_planned = iters;
        json_t *oj = options_json(o, r, iters);
        sr.options = json_dumps(oj, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(oj);
        sr.device_json = dev;
        dev = NULL;
        st = kf_store_run_begin(p->s, &sr, err);
        snprintf(r->run_id, sizeof r->run_id, "%s", sr.id);
        kf_store_run_clear(&sr);
    }
    free(dev);
    if (st != KF_OK) {
        r->run_id[0] = 0;
        return st;
    }
    snprintf(p->run, sizeof p->run, "%s", r->run_id);
    if (p->table) fprintf(p->table, "store: run %.10s in %s%s\n", p->run, kf_store_path(p->s),
                          o->resume_run ? " (resumed)" : "");
    return KF_OK;
}

static void key_parts(const kf_persist *p, const kf_run_result *r, const char *source, const char *flags,
                      kf_store_key *k) {
    k->task = p->task;
    k->source = source;
    k->flags = flags;
    k->platform = r->dev.platform;
    k->device = p->device;
    k->compiler = p->compiler;
    k->settings = p->settings;
}

/* See agent_int.h. */
int kf_persist_lookup(kf_persist *p, kf_run_result *r, const kf_candidate *c, kf_iter_record *rec) {
    if (!p->s || !p->run[0] || p->no_cache) return 0;
    kf_store_key k;
    key_parts(p, r, c->source, c->flags, &k);
    char key[17];
    kf_store_cache_key(&k, key);
    kf_store_eval ev;
    int found = 0;
    kf_error e = {0};
    if (kf_store_cache_get(p->s, key, &ev, &found, &e) != KF_OK) {
        store_failed(p, r, &e);
        return 0;
    }
    if (!found) return 0;
    kf_vresult *v = &rec->res;
    memset(v, 0, sizeof *v);
    v->status = kf_agent_vstatus_of(ev.status);
    snprintf(v->detail, sizeof v->detail, "%s", ev.detail);
    v->sets_run = ev.sets_run;
    v->bad_set = ev.bad_set;
    v->bad_output = ev.bad_output;
    v->first_bad = ev.first_bad;
    v->got = ev.got;
    v->want = ev.want;
    v->max_abs_err = ev.max_abs_err;
    v->max_rel_err = ev.max_rel_err;
    v->nmse = ev.nmse;
    v->timed = ev.timed;
    v->reps = ev.reps;
    v->time_ms = ev.time_ms;
    v->time_min_ms = ev.time_min_ms;
    v->time_mean_ms = ev.time_mean_ms;
    v->run_wall_s = ev.run_wall_s;
    snprintf(v->resources, sizeof v->resources, "%s", ev.resources);
    snprintf(rec->memcheck, sizeof rec->memcheck, "%s", ev.memcheck);
    rec->cached = 1;
    rec->measured_at = ev.measured_at;
    snprintf(rec->measured_by, sizeof rec->measured_by, "%s", ev.measured_by);
    p->cached_eval = ev.id;
    r->cache_hits++;
    return 1;
}

/* See agent_int.h. */
void kf_persist_iter(kf_persist *p, kf_run_result *r, kf_iter_record *rec, const char *source,
                     const char *flags) {
    if (!p->s || !p->run[0]) return;
    kf_store_key k;
    key_parts(p, r, source ? source : "", flags ? flags : "", &k);
    kf_store_iter it;
    memset(&it, 0, sizeof it);
    kf_store_cache_key(&k, it.key);
    it.iter = rec->iter;
    snprintf(it.label, sizeof it.label, "%s", rec->label);
    snprintf(it.agent, sizeof it.agent, "%s", rec->agent);
    snprintf(it.followed, sizeof it.followed, "%s", rec->followed);
    snprintf(it.hash, sizeof it.hash, "%s", rec->hash);
    it.source = k.source;
    snprintf(it.flags, sizeof it.flags, "%s", k.flags);
    const kf_vresult *v = &rec->res;
    kf_store_eval *e = &it.ev;
    snprintf(e->status, sizeof e->status, "%s", kf_vstatus_name(v->status));
    snprintf(e->detail, sizeof e->detail, "%s", v->detail);
    e->sets_run = v->sets_run;
    e->bad_set = v->bad_set;
    e->bad_output = v->bad_output;
    e->first_bad = v->first_bad;
    e->got = v->got;
    e->want = v->want;
    e->max_abs_err = v->max_abs_err;
    e->max_rel_err = v->max_rel_err;
    e->nmse = v->nmse;
    e->timed = v->timed;
    e->reps = v->reps;
    e->time_ms = v->time_ms;
    e->time_min_ms = v->time_min_ms;
    e->time_mean_ms = v->time_mean_ms;
    e->run_wall_s = v->run_wall_s;
    snprintf(e->resources, sizeof e->resources, "%s", v->resources);
    snprintf(e->memcheck, sizeof e->memcheck, "%s", rec->memcheck);
    it.cached = rec->cached;
    if (rec->cached) e->id = p->cached_eval;
    it.best_so_far = rec->best_so_far;
    int timed = v->status == KF_V_OK && v->timed;
    it.gbs = timed ? rec->perf.gbs : 0;
    it.gflops = timed ? rec->perf.gflops : 0;
    it.pct_floor = timed ? rec->perf.pct_floor : 0;
    it.occupancy = -1;
    char *dj = NULL;
    if (rec->has_diag) {
        json_t *j = kf_agent_diag_json(&rec->diag);
        /* the counters it read, kept with it (runs.c reads them back) */
        if (rec->ncounters > 0) json_object_set_new(j, "counters", kf_agent_counters_json(rec->counters, rec->ncounters));
        dj = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        it.diag_json = dj;
        snprintf(it.bound, sizeof it.bound, "%s", rec->diag.bound);
        it.occupancy = rec->diag.occupancy;
    }
    kf_error err = {0};
    if (kf_store_iter_put(p->s, p->run, &k, &it, &err) != KF_OK) store_failed(p, r, &err);
    else if (!rec->cached) rec->measured_at = (double)time(NULL);
    free(dj);
}

/* See agent_int.h. */
void kf_persist_call(kf_persist *p, kf_run_result *r, int iter, const char *ask, const char *reply,
                     const char *error, long prompt_tokens, long completion_tokens) {
    if (!p->s || !p->run[0]) return;
    kf_error e = {0};
    if (kf_store_transcript_call(p->s, p->run, iter, ask, reply ? "assistant" : "error",
                                 reply ? reply : error ? error : "", prompt_tokens, completion_tokens,
                                 &e) != KF_OK)
        store_failed(p, r, &e);
}

/* See agent_int.h. */
int kf_persist_reference(kf_persist *p, kf_run_result *r, char **source, char *origin, size_t cap,
                         char *platform, size_t pcap) {
    *source = NULL;
    if (!p->s || !p->task[0]) return 0;
    kf_store_best b;
    int found = 0;
    kf_error e = {0};
    if (kf_store_best_elsewhere(p->s, p->task, r->dev.platform, &b, &found, &e) != KF_OK) {
        store_failed(p, r, &e);
        return 0;
    }
    if (!found) return 0;
    snprintf(origin, cap, "the best verified %s kernel of run %.10s (%.4g ms, %.1f%% of floor)%s%s", b.platform,
             b.run, b.time_ms, b.pct_floor, b.flags[0] ? ", compiled with " : "", b.flags);
    snprintf(platform, pcap, "%s", b.platform);
    *source = b.source;
    b.source = NULL;
    kf_store_best_clear(&b);
    return 1;
}

/* See agent_int.h. */
void kf_persist_note_reference(kf_persist *p, kf_run_result *r, const char *reference) {
    if (!p->s || !p->run[0]) return;
    kf_error e = {0};
    if (kf_store_run_reference(p->s, p->run, reference, &e) != KF_OK) store_failed(p, r, &e);
}

/* See agent_int.h. */
void kf_persist_finish(kf_persist *p, kf_run_result *r, int failed) {
    if (!p->s || !p->run[0]) return;
    /* the final memory check may have changed iterations' verdicts after they were stored */
    for (int i = 0; i < r->niters; i++) {
        const kf_iter_record *it = &r->iters[i];
        kf_error e = {0};
        if (it->memcheck[0] &&
            kf_store_iter_verdict(p->s, p->run, it->iter, kf_vstatus_name(it->res.status), it->res.detail,
                                  it->memcheck, &e) != KF_OK)
            store_failed(p, r, &e);
    }
    kf_store_run sr;
    memset(&sr, 0, sizeof sr);
    snprintf(sr.id, sizeof sr.id, "%s", p->run);
    snprintf(sr.status, sizeof sr.status, "%s", failed ? "failed" : "done");
    snprintf(sr.stop_reason, sizeof sr.stop_reason, "%s", r->stop_reason);
    if (r->store_error[0]) {
        /* a run whose rows are missing is not a done run: it says what it lacks */
        snprintf(sr.status, sizeof sr.status, "failed");
        snprintf(sr.stop_reason, sizeof sr.stop_reason, "%s%snot all recorded (%d store write%s failed: %.80s)",
                 r->stop_reason, r->stop_reason[0] ? "; " : "", r->store_failures, r->store_failures == 1 ? "" : "s",
                 r->store_error);
    }
    sr.wall_s = r->wall_s;
    snprintf(sr.result_from, sizeof sr.result_from, "%s", r->result_from);
    snprintf(sr.result_detail, sizeof sr.result_detail, "%s", r->outcome);
    if (r->phases.total > 0) {
        json_t *ph = kf_agent_phases_json(&r->phases);
        char *t = json_dumps(ph, JSON_COMPACT | JSON_SORT_KEYS);
        if (t && strlen(t) < sizeof sr.phases) snprintf(sr.phases, sizeof sr.phases, "%s", t);
        free(t);
        json_decref(ph);
    }
    sr.llm_calls = r->llm_calls;
    sr.prompt_tokens = r->llm_prompt_tokens;
    sr.completion_tokens = r->llm_completion_tokens;
    snprintf(sr.memcheck, sizeof sr.memcheck, "%s", r->memcheck);
    snprintf(sr.memcheck_detail, sizeof sr.memcheck_detail, "%s", r->memcheck_detail);
    if (r->best >= 0) {
        sr.best_iter = r->iters[r->best].iter;
        sr.best_ms = r->iters[r->best].res.time_ms;
        sr.best_pct = r->iters[r->best].perf.pct_floor;
    }
    kf_error e = {0};
    if (kf_store_run_finish(p->s, &sr, &e) != KF_OK) store_failed(p, r, &e);
}

/* ---- the input sets and reference, cached (issue 30) ---- */

/* The cache key of g's sets under vo, and the task's hash; 0 when there is none to use. */
static int sets_key(const kf_loop_opts *o, const kf_graph *g, const kf_verify_opts *vo, char *key, size_t cap,
                    char task[17]) {
    if (!o->store || !o->seed || !vo->seed) return 0;
    /* a module task's reference depends on its module's files too, which the task's hash
     * does not cover: drawn afresh every run (docs/design-notes.md) */
    if (g->module) return 0;
    char *text = NULL;
    if (!o->task_text && (!g->path[0] || kf_read_file(g->path, &text, NULL, NULL) != KF_OK)) return 0;
    kf_store_task_hash(o->task_text ? o->task_text : text, task);
    free(text);
    snprintf(key, cap, "sets|task=%s|seed=%llu|nsets=%d|format=%d|harness=%s", task, (unsigned long long)vo->seed,
             vo->nsets, KF_VERIFY_SETS_VERSION, KF_STORE_HARNESS);
    return 1;
}

/* See agent_int.h. */
int kf_persist_sets_load(const kf_loop_opts *o, const kf_graph *g, const kf_verify_opts *vo, kf_verify_ctx **out) {
    *out = NULL;
    char key[256], task[17];
    if (!sets_key(o, g, vo, key, sizeof key, task)) return 0;
    int n = 0;
    void **data = NULL;
    size_t *len = NULL;
    kf_error e = {0};
    kf_status st = kf_store_parts_get(o->store, key, &n, &data, &len, &e);
    if (st == KF_OK && n > 0) st = kf_verify_ctx_from_parts(g, vo, n, data, len, out, &e);
    for (int k = 0; k < n; k++) free(data[k]);
    free(data);
    free(len);
    if (st != KF_OK && o->table) fprintf(o->table, "store: cached input sets not used: %s\n", e.msg);
    return *out != NULL;
}

/* See agent_int.h. */
void kf_persist_sets_save(const kf_loop_opts *o, const kf_graph *g, const kf_verify_opts *vo, const kf_verify_ctx *c) {
    char key[256], task[17];
    if (!sets_key(o, g, vo, key, sizeof key, task)) return;
    const void **data = NULL;
    size_t *len = NULL;
    void *head = NULL;
    int n = kf_verify_ctx_parts(c, &data, &len, &head);
    if (n <= 0) return; /* not kept whole (the verifier's memory plan): nothing to cache */
    uint64_t total = 0;
    for (int k = 0; k < n; k++) total += len[k];
    kf_error e = {0};
    if (total <= (uint64_t)KF_SETS_CACHE_MAX &&
        kf_store_parts_put(o->store, key, task, n, data, len, 2, &e) != KF_OK && o->table)
        fprintf(o->table, "store: input sets not cached: %s\n", e.msg);
    free(data);
    free(len);
    free(head);
}
