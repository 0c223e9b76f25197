/*
 * Stored runs as the loop's own types: kf_run_load (for kforge show, reports, exports) and
 * kf_run_resume_load (for kforge synth --resume). See agent.h for the contracts.
 *
 * Design note. The store keeps an iteration's verification result as plain columns and
 * its diagnosis, the device, ceilings and roofline as the same JSON that run.json holds
 * (kf_agent_device_json, kf_agent_diag_json); this file is the one reader of those JSON
 * forms, so a field added to them is added here too. Resuming reloads the options the run
 * was started with; what the search does with them is the loop's business: the builtin
 * search is a function of its seed and of the results it sees, so replaying the run with
 * the stored seed re-proposes the stored candidates, which the cache then serves.
 */
#include "agent/agent_int.h"
#include "kforge/agent.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *jstr(json_t *o, const char *k) {
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "";
}

static double jnum(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

static void parse_device(json_t *j, kf_device_info *d, kf_ceilings *c) {
    snprintf(d->platform, sizeof d->platform, "%s", jstr(j, "platform"));
    snprintf(d->name, sizeof d->name, "%s", jstr(j, "name"));
    snprintf(d->arch, sizeof d->arch, "%s", jstr(j, "arch"));
    snprintf(d->device_type, sizeof d->device_type, "%s", jstr(j, "device_type"));
    snprintf(d->compiler, sizeof d->compiler, "%s", jstr(j, "compiler"));
    d->cores = (int)jnum(j, "cores");
    d->threads = (int)jnum(j, "threads");
    d->simd_bits = (int)jnum(j, "simd_bits");
    d->l1d_bytes = (int64_t)jnum(j, "l1d_bytes");
    d->l2_bytes = (int64_t)jnum(j, "l2_bytes");
    d->l3_bytes = (int64_t)jnum(j, "l3_bytes");
    json_t *cj = json_object_get(j, "ceilings");
    c->measured = json_is_true(json_object_get(cj, "measured"));
    c->copy_gbs = jnum(cj, "copy_gbs");
    c->read_gbs = jnum(cj, "read_gbs");
    c->write_gbs = jnum(cj, "write_gbs");
    c->peak_gflops_f32 = jnum(cj, "peak_gflops_f32");
    c->peak_gflops_f64 = jnum(cj, "peak_gflops_f64");
    c->launch_us = jnum(cj, "launch_us");
    c->peak_gflops_mm16 = jnum(cj, "peak_gflops_mm16");
    c->peak_gflops_tf32 = jnum(cj, "peak_gflops_tf32");
    snprintf(c->when, sizeof c->when, "%s", jstr(cj, "when"));
    c->busy = jnum(cj, "busy");
}

/* The roofline's bound as the static string kf_roofline_of gives. */
static const char *bound_name(const char *b) {
    static const char *const names[] = {"memory", "compute", "latency", "launch"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(b, names[i]) == 0) return names[i];
    return NULL;
}

/* A stored move's role; KF_ROLE_NONE in records written before roles (the walk then
 * matches the move by the parameter's name). */
static kf_role role_of(json_t *v) {
    kf_role r = kf_role_lookup(jstr(v, "role"));
    return r == KF_ROLE_COUNT ? KF_ROLE_NONE : r;
}

static void parse_diag(json_t *j, kf_diagnosis *d) {
    memset(d, 0, sizeof *d);
    snprintf(d->bound, sizeof d->bound, "%s", jstr(j, "bound"));
    d->achieved = jnum(j, "achieved");
    d->bw_frac = jnum(j, "bw_frac");
    d->peak_frac = jnum(j, "peak_frac");
    json_t *occ = json_object_get(j, "occupancy"), *aocc = json_object_get(j, "achieved_occupancy");
    d->occupancy = json_is_number(occ) ? json_number_value(occ) : -1;
    d->achieved_occupancy = json_is_number(aocc) ? json_number_value(aocc) : -1;
    snprintf(d->occ_limit, sizeof d->occ_limit, "%s", jstr(j, "occupancy_limit"));
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(j, "evidence"), i, v) {
        if (d->nevidence >= KF_DIAG_MAX_EVIDENCE) break;
        snprintf(d->evidence[d->nevidence++], sizeof d->evidence[0], "%s", json_string_value(v) ? json_string_value(v) : "");
    }
    json_array_foreach(json_object_get(j, "recommendations"), i, v) {
        if (d->nrecs >= KF_DIAG_MAX_RECS) break;
        kf_diag_rec *rc = &d->rec[d->nrecs++];
        snprintf(rc->param, sizeof rc->param, "%s", jstr(v, "param"));
        rc->role = role_of(v);
        rc->dir = (int)jnum(v, "dir");
        rc->score = jnum(v, "score");
        snprintf(rc->why, sizeof rc->why, "%s", jstr(v, "why"));
    }
    json_array_foreach(json_object_get(j, "against"), i, v) { /* absent in older records */
        if (d->navoid >= KF_DIAG_MAX_AVOID) break;
        kf_diag_avoid *a = &d->avoid[d->navoid++];
        snprintf(a->param, sizeof a->param, "%s", jstr(v, "param"));
        a->role = role_of(v);
        a->dir = (int)jnum(v, "dir");
    }
}

static void load_iter(const kf_store_iter *si, kf_iter_record *it) {
    memset(it, 0, sizeof *it);
    it->iter = si->iter;
    snprintf(it->label, sizeof it->label, "%s", si->label);
    snprintf(it->agent, sizeof it->agent, "%s", si->agent);
    snprintf(it->hash, sizeof it->hash, "%s", si->hash);
    snprintf(it->followed, sizeof it->followed, "%s", si->followed);
    const kf_store_eval *e = &si->ev;
    kf_vresult *v = &it->res;
    v->status = kf_agent_vstatus_of(e->status);
    snprintf(v->detail, sizeof v->detail, "%s", e->detail);
    v->sets_run = e->sets_run;
    v->bad_set = e->bad_set;
    v->bad_output = e->bad_output;
    v->first_bad = e->first_bad;
    v->got = e->got;
    v->want = e->want;
    v->max_abs_err = e->max_abs_err;
    v->max_rel_err = e->max_rel_err;
    v->nmse = e->nmse;
    v->timed = e->timed;
    v->reps = e->reps;
    v->time_ms = e->time_ms;
    v->time_min_ms = e->time_min_ms;
    v->time_mean_ms = e->time_mean_ms;
    v->run_wall_s = e->run_wall_s;
    snprintf(v->resources, sizeof v->resources, "%s", e->resources);
    snprintf(it->memcheck, sizeof it->memcheck, "%s", e->memcheck);
    it->perf.time_s = e->time_ms * 1e-3;
    it->perf.gbs = si->gbs;
    it->perf.gflops = si->gflops;
    it->perf.pct_floor = si->pct_floor;
    it->best_so_far = si->best_so_far;
    if (v->status == KF_V_OK && si->source && si->source[0]) it->source = kf_strdup(si->source);
    snprintf(it->flags, sizeof it->flags, "%s", si->flags);
    it->cached = si->cached;
    it->measured_at = e->measured_at;
    snprintf(it->measured_by, sizeof it->measured_by, "%s", e->measured_by);
    json_t *dj = si->diag_json ? json_loads(si->diag_json, 0, NULL) : NULL;
    if (dj) {
        parse_diag(dj, &it->diag);
        it->has_diag = 1;
        it->ncounters = kf_agent_counters_parse(json_object_get(dj, "counters"), &it->counters);
        json_decref(dj);
    }
}

/* See agent.h. */
kf_status kf_run_load(kf_store *s, const char *run_ref, kf_run_result *r, kf_store_run *info, kf_error *err) {
    memset(r, 0, sizeof *r);
    r->best = -1;
    kf_store_run sr;
    kf_store_iter *its = NULL;
    int n = 0;
    json_t *dev = NULL;
    kf_status st = kf_store_run_get(s, run_ref, &sr, err);
    if (st != KF_OK) return st;
    if (sr.device_json && !(dev = json_loads(sr.device_json, 0, NULL)))
        st = kf_error_set(err, KF_ERR_PARSE, kf_store_path(s), 0, 0, "run %s: its device record does not parse", sr.id);
    if (st == KF_OK) st = kf_store_iters_get(s, sr.id, &its, &n, err);
    if (st != KF_OK) goto done;
    snprintf(r->run_id, sizeof r->run_id, "%s", sr.id);
    snprintf(r->out_dir, sizeof r->out_dir, "%s", sr.out_dir);
    snprintf(r->dev.platform, sizeof r->dev.platform, "%s", sr.platform);
    snprintf(r->dev.name, sizeof r->dev.name, "%s", sr.device);
    snprintf(r->dev.compiler, sizeof r->dev.compiler, "%s", sr.compiler);
    if (dev) {
        parse_device(json_object_get(dev, "device"), &r->dev, &r->ceil);
        json_t *rf = json_object_get(dev, "roofline");
        r->roof.bytes = jnum(rf, "bytes");
        r->roof.flops = jnum(rf, "flops");
        r->roof.floor_s = jnum(rf, "floor_ms") * 1e-3;
        r->roof.bound = bound_name(jstr(rf, "bound"));
        snprintf(r->plan, sizeof r->plan, "%s", jstr(dev, "plan"));
        snprintf(r->sandbox, sizeof r->sandbox, "%s", jstr(dev, "sandbox"));
        snprintf(r->arch, sizeof r->arch, "%s", jstr(dev, "arch"));
        r->sandbox_flags = (unsigned)jnum(dev, "sandbox_flags");
    }
    r->iters = kf_calloc((size_t)(n > 0 ? n : 1), sizeof *r->iters);
    for (int i = 0; i < n; i++) {
        load_iter(&its[i], &r->iters[i]);
        if (r->iters[i].cached) r->cache_hits++;
        if (r->iters[i].iter == sr.best_iter && r->iters[i].source) r->best = i;
    }
    r->niters = n;
    if (r->best >= 0) {
        r->best_source = kf_strdup(r->iters[r->best].source);
        snprintf(r->best_flags, sizeof r->best_flags, "%s", r->iters[r->best].flags);
    }
    r->seed = sr.seed;
    r->wall_s = sr.wall_s;
    kf_agent_phases_read(sr.phases, &r->phases);
    r->llm_calls = sr.llm_calls;
    r->llm_prompt_tokens = sr.prompt_tokens;
    r->llm_completion_tokens = sr.completion_tokens;
    snprintf(r->stop_reason, sizeof r->stop_reason, "%s", sr.stop_reason);
    snprintf(r->result_from, sizeof r->result_from, "%s", sr.result_from);
    snprintf(r->outcome, sizeof r->outcome, "%s", sr.result_detail);
    snprintf(r->memcheck, sizeof r->memcheck, "%s", sr.memcheck);
    snprintf(r->memcheck_detail, sizeof r->memcheck_detail, "%s", sr.memcheck_detail);
done:
    json_decref(dev);
    kf_store_iters_free(its, n);
    if (st == KF_OK && info) *info = sr;
    else kf_store_run_clear(&sr);
    if (st != KF_OK) kf_run_result_free(r);
    return st;
}

/* See agent.h. */
char *kf_run_json_text(const kf_run_result *r, const kf_store_run *info) {
    json_t *j = kf_agent_run_json(info->task_name, info->task_path, r);
    json_object_set_new(j, "status", json_string(info->status));
    json_object_set_new(j, "iters_planned", json_integer(info->iters_planned));
    json_object_set_new(j, "seed", json_integer((json_int_t)info->seed));
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(j);
    return text ? text : kf_strdup("{}");
}

/* See agent.h. */
kf_status kf_run_resume_load(kf_store *s, const char *run_ref, kf_run_resume *rs, kf_error *err) {
    memset(rs, 0, sizeof *rs);
    const char *path = kf_store_path(s);
    json_t *oj = NULL;
    kf_status st = kf_store_run_get(s, run_ref, &rs->info, err);
    if (st != KF_OK) return st;
    kf_store_run *ri = &rs->info;
    if (strcmp(ri->status, "running") == 0)
        st = kf_error_set(err, KF_ERR_ARG, path, 0, 0, "run %.10s is still running (pid %ld on %s)", ri->id, ri->pid,
                          ri->host);
    else if (strcmp(ri->status, "done") == 0)
        st = kf_error_set(err, KF_ERR_ARG, path, 0, 0, "run %.10s is done (%d iterations): nothing to resume "
                          "(`kforge show %.10s`)", ri->id, ri->iters_done, ri->id);
    else if (strcmp(ri->agent, "builtin") != 0)
        st = kf_error_set(err, KF_ERR_ARG, path, 0, 0, "run %.10s used the %s agent: resuming a model's "
                          "conversation is not supported yet (start a new run; the cache serves the "
                          "builtin candidates it evaluated)", ri->id, ri->agent);
    if (st == KF_OK && !(oj = json_loads(ri->options ? ri->options : "", 0, NULL)))
        st = kf_error_set(err, KF_ERR_PARSE, path, 0, 0, "run %.10s: its stored options do not parse", ri->id);
    if (st == KF_OK) st = kf_store_task_text(s, ri->task, &rs->task_text, err);
    if (st == KF_OK) st = kf_parse_string(rs->task_text, ri->task_path[0] ? ri->task_path : ri->task_name, &rs->g, err);
    if (st != KF_OK) goto done;
    kf_loop_opts *o = &rs->o;
    kf_loop_opts_default(o);
    snprintf(rs->target, sizeof rs->target, "%s", jstr(oj, "target"));
    snprintf(rs->out_dir, sizeof rs->out_dir, "%s", jstr(oj, "out_dir"));
    o->target = rs->target[0] ? rs->target : "cpu";
    o->target_spec = o->target;
    o->out_dir = rs->out_dir[0] ? rs->out_dir : NULL;
    o->iters = ri->iters_planned;
    o->seed = ri->seed;
    o->time_budget_s = jnum(oj, "time_budget_s");
    o->threads = (int)jnum(oj, "threads");
    o->fresh_outputs = (int)jnum(oj, "fresh_outputs");
    o->no_race = json_is_true(json_object_get(oj, "no_race"));
    o->memcheck = (int)jnum(oj, "memcheck");
    o->agent = KF_AGENT_BUILTIN;
    o->analysis = (int)jnum(oj, "analysis");
    snprintf(rs->pins, sizeof rs->pins, "%s", jstr(oj, "pins"));
    o->pins = rs->pins[0] ? rs->pins : NULL;
    o->start_random = strcmp(jstr(oj, "start"), "random") == 0;
    o->counters = strcmp(jstr(oj, "counters"), "ncu") == 0 ? KF_COUNTERS_NCU : KF_COUNTERS_OFF;
    o->task_text = rs->task_text;
    o->store = s;
    o->resume_run = ri->id;
done:
    json_decref(oj);
    if (st != KF_OK) kf_run_resume_free(rs);
    return st;
}

void kf_run_resume_free(kf_run_resume *rs) {
    kf_store_run_clear(&rs->info);
    kf_graph_free(rs->g);
    free(rs->task_text);
    memset(rs, 0, sizeof *rs);
}
