/*
 * The synthesis loop: it opens the device and the plan, measures the ceilings, draws the
 * input sets and the float64 reference, then hands each iteration to a generation agent
 * behind one interface (kf_proposer, agent_int.h): the builtin agent (propose_builtin.c,
 * the walk over the generator's schedule space that follows the performance analysis
 * agent) for its iterations, then the model (propose_llm.c) for the rest (--agent
 * builtin, llm or both). Each candidate an agent proposes comes back here
 * (kf_loop_evaluate): compiled, verified in the sandbox against the reference on several
 * input sets, timed, placed on the roofline, diagnosed, stored and printed. The loop stops
 * after opts.iters candidates, at the time budget, or when the agent has nothing more to
 * propose; then the final memory check, the run record and the best kernel.
 */
#include "agent/agent_int.h"
#include "kforge/agent.h"
#include "kforge/calib.h"
#include "kforge/perf.h"
#include "kforge/report.h"
#include "kforge/synth.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void kf_loop_opts_default(kf_loop_opts *o) {
    memset(o, 0, sizeof *o);
    o->target = "cpu";
    o->iters = 12;
}

void kf_run_result_free(kf_run_result *r) {
    for (int i = 0; i < r->niters; i++) {
        free(r->iters[i].source);
        free(r->iters[i].counters);
    }
    free(r->iters);
    free(r->best_source);
    memset(r, 0, sizeof *r);
}

/* Hold the parameters o->pins names ("block=8192 unroll=4", commas also separate). */
static kf_status apply_pins(kf_synth *syn, const kf_loop_opts *o, kf_error *err) {
    if (!o->pins) return KF_OK;
    const char *p = o->pins;
    while (*p) {
        size_t n = strcspn(p, " ,\t");
        if (n > 0) {
            char tok[96];
            if (n >= sizeof tok)
                return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "--pin: '%.*s...' is too long", 40, p);
            memcpy(tok, p, n);
            tok[n] = 0;
            char *eq = strchr(tok, '=');
            if (strncmp(tok, "*.", 2) == 0 && eq) { /* every stage's NAME, where there is one (--no-fuse) */
                char *end;
                long v = strtol(eq + 1, &end, 10);
                if (end == eq + 1 || *end)
                    return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "--pin '%s': the value must be an integer", tok);
                *eq = 0;
                kf_synth_pin(syn, tok + 2, v);
            } else {
                kf_status st = kf_synth_pin_assign(syn, tok, err);
                if (st != KF_OK) return st;
            }
        }
        p += n;
        if (*p) p++;
    }
    return KF_OK;
}

static void fill_row(const kf_iter_record *it, kf_report_row *row) {
    memset(row, 0, sizeof *row);
    row->iter = it->iter;
    row->label = it->label;
    row->status = kf_vstatus_name(it->res.status);
    row->has_time = it->res.status == KF_V_OK && it->res.timed;
    row->time_ms = it->perf.time_s * 1e3;
    row->gbs = it->perf.gbs;
    row->gflops = it->perf.gflops;
    row->pct_floor = it->perf.pct_floor;
    row->best = it->best_so_far;
    row->note = it->res.status == KF_V_OK ? NULL : it->res.detail;
    row->occupancy = it->has_diag ? it->diag.occupancy : -1;
    row->bound = it->has_diag ? it->diag.bound : NULL;
    row->cached = it->cached;
    row->raced = !strcmp(it->res.time_stop, "slower");
}

json_t *kf_agent_diag_json(const kf_diagnosis *d) {
    json_t *j = json_object();
    json_object_set_new(j, "bound", json_string(d->bound));
    json_object_set_new(j, "achieved", json_real(d->achieved));
    json_object_set_new(j, "bw_frac", json_real(d->bw_frac));
    json_object_set_new(j, "peak_frac", json_real(d->peak_frac));
    json_object_set_new(j, "occupancy", d->occupancy >= 0 ? json_real(d->occupancy) : json_null());
    if (d->occupancy >= 0) json_object_set_new(j, "occupancy_limit", json_string(d->occ_limit));
    json_object_set_new(j, "achieved_occupancy",
                        d->achieved_occupancy >= 0 ? json_real(d->achieved_occupancy) : json_null());
    json_t *ev = json_array(), *rs = json_array();
    for (int i = 0; i < d->nevidence; i++) json_array_append_new(ev, json_string(d->evidence[i]));
    for (int i = 0; i < d->nrecs; i++)
        json_array_append_new(rs, json_pack("{s:s, s:s, s:i, s:f, s:s}", "param", d->rec[i].param, "role",
                                            kf_role_name(d->rec[i].role), "dir", d->rec[i].dir, "score",
                                            d->rec[i].score, "why", d->rec[i].why));
    json_object_set_new(j, "evidence", ev);
    json_object_set_new(j, "recommendations", rs);
    json_t *av = json_array();
    for (int i = 0; i < d->navoid; i++)
        json_array_append_new(av, json_pack("{s:s, s:s, s:i}", "param", d->avoid[i].param, "role",
                                            kf_role_name(d->avoid[i].role), "dir", d->avoid[i].dir));
    json_object_set_new(j, "against", av);
    return j;
}

static json_t *iter_json(const kf_iter_record *it) {
    json_t *j = json_object();
    json_object_set_new(j, "iter", json_integer(it->iter));
    json_object_set_new(j, "candidate", json_string(it->label));
    json_object_set_new(j, "hash", json_string(it->hash));
    json_object_set_new(j, "status", json_string(kf_vstatus_name(it->res.status)));
    json_object_set_new(j, "detail", json_string(it->res.detail));
    json_object_set_new(j, "sets_run", json_integer(it->res.sets_run));
    json_object_set_new(j, "max_abs_err", json_real(it->res.max_abs_err));
    json_object_set_new(j, "max_rel_err", json_real(it->res.max_rel_err));
    json_object_set_new(j, "nmse", json_real(it->res.nmse));
    if (it->res.first_bad >= 0) {
        json_object_set_new(j, "bad_output", json_integer(it->res.bad_output));
        json_object_set_new(j, "first_bad", json_integer(it->res.first_bad));
        json_object_set_new(j, "got", json_real(it->res.got));
        json_object_set_new(j, "want", json_real(it->res.want));
    }
    if (it->res.status == KF_V_OK && it->res.timed) {
        json_object_set_new(j, "time_ms", json_real(it->res.time_ms));
        json_object_set_new(j, "time_min_ms", json_real(it->res.time_min_ms));
        json_object_set_new(j, "time_mean_ms", json_real(it->res.time_mean_ms));
        json_object_set_new(j, "reps", json_integer(it->res.reps));
        if (it->res.time_stop[0]) json_object_set_new(j, "time_stop", json_string(it->res.time_stop));
        json_object_set_new(j, "gbs", json_real(it->perf.gbs));
        json_object_set_new(j, "gflops", json_real(it->perf.gflops));
        json_object_set_new(j, "pct_floor", json_real(it->perf.pct_floor));
    }
    json_object_set_new(j, "best_so_far", json_boolean(it->best_so_far));
    if (it->memcheck[0]) json_object_set_new(j, "memcheck", json_string(it->memcheck));
    if (it->res.resources[0]) json_object_set_new(j, "resources", json_string(it->res.resources));
    if (it->agent[0]) json_object_set_new(j, "agent", json_string(it->agent));
    if (it->has_diag) json_object_set_new(j, "diagnosis", kf_agent_diag_json(&it->diag));
    if (it->followed[0]) json_object_set_new(j, "followed", json_string(it->followed));
    if (it->ncounters > 0) json_object_set_new(j, "counters", kf_agent_counters_json(it->counters, it->ncounters));
    if (it->cached) {
        /* measured earlier: say when and by which run */
        json_object_set_new(j, "cached", json_true());
        json_object_set_new(j, "measured_at", json_real(it->measured_at));
        json_object_set_new(j, "measured_by", json_string(it->measured_by));
    }
    return j;
}

json_t *kf_agent_device_json(const kf_device_info *d, const kf_ceilings *c) {
    json_t *j = json_object();
    json_object_set_new(j, "platform", json_string(d->platform));
    json_object_set_new(j, "name", json_string(d->name));
    json_object_set_new(j, "arch", json_string(d->arch));
    json_object_set_new(j, "device_type", json_string(d->device_type));
    json_object_set_new(j, "cores", json_integer(d->cores));
    json_object_set_new(j, "threads", json_integer(d->threads));
    json_object_set_new(j, "simd_bits", json_integer(d->simd_bits));
    json_object_set_new(j, "l1d_bytes", json_integer(d->l1d_bytes));
    json_object_set_new(j, "l2_bytes", json_integer(d->l2_bytes));
    json_object_set_new(j, "l3_bytes", json_integer(d->l3_bytes));
    json_object_set_new(j, "compiler", json_string(d->compiler));
    json_t *cj = json_object();
    json_object_set_new(cj, "measured", json_boolean(c->measured));
    json_object_set_new(cj, "copy_gbs", json_real(c->copy_gbs));
    json_object_set_new(cj, "read_gbs", json_real(c->read_gbs));
    json_object_set_new(cj, "write_gbs", json_real(c->write_gbs));
    json_object_set_new(cj, "peak_gflops_f32", json_real(c->peak_gflops_f32));
    json_object_set_new(cj, "peak_gflops_f64", json_real(c->peak_gflops_f64));
    json_object_set_new(cj, "launch_us", c->launch_us > 0 ? json_real(c->launch_us) : json_null());
    if (c->peak_gflops_mm16 > 0) json_object_set_new(cj, "peak_gflops_mm16", json_real(c->peak_gflops_mm16));
    if (c->peak_gflops_tf32 > 0) json_object_set_new(cj, "peak_gflops_tf32", json_real(c->peak_gflops_tf32));
    json_object_set_new(cj, "when", json_string(c->when));
    if (c->busy > 0) json_object_set_new(cj, "busy", json_real(c->busy));
    json_object_set_new(j, "ceilings", cj);
    return j;
}

/* The kernel's file name in the output directory, by platform; see agent.h. */
const char *kf_loop_kernel_file(const char *platform) {
    const kf_platform *p = kf_platform_find(platform);
    return p ? p->kernel_file : kf_platform_host()->kernel_file;
}

static json_t *plan_json(const kf_launch_plan *p) {
    json_t *arr = json_array();
    for (int i = 0; i < p->nlaunches; i++) {
        const kf_launch *l = &p->l[i];
        json_t *gl = json_array(), *lo = json_array(), *args = json_array();
        for (int d = 0; d < l->ndims; d++) {
            json_array_append_new(gl, json_integer(l->global[d]));
            json_array_append_new(lo, json_integer(l->local[d]));
        }
        for (int a = 0; a < l->nargs; a++) {
            if (l->args[a] >= 0) json_array_append_new(args, json_integer(l->args[a]));
            else json_array_append_new(args, json_string(p->scratch_name[-1 - l->args[a]]));
        }
        json_t *lj = json_pack("{s:s, s:o, s:o, s:o}", "kernel", l->kernel, "global", gl, "local", lo,
                               "args", args);
        if (l->smem > 0) json_object_set_new(lj, "smem", json_integer(l->smem));
        json_array_append_new(arr, lj);
    }
    return arr;
}

/* See agent_int.h. */
json_t *kf_agent_phases_json(const kf_phase_times *p) {
    json_t *ph = json_object();
    json_object_set_new(ph, "parse", json_real(p->parse));
    json_object_set_new(ph, "setup", json_real(p->setup));
    json_object_set_new(ph, "draw", json_real(p->draw));
    json_object_set_new(ph, "reference", json_real(p->reference));
    json_object_set_new(ph, "reference_cached", json_boolean(p->ref_cached));
    json_object_set_new(ph, "compile", json_real(p->compile));
    json_object_set_new(ph, "sandbox_start", json_real(p->start));
    json_object_set_new(ph, "check", json_real(p->check));
    json_object_set_new(ph, "timing", json_real(p->timing));
    json_object_set_new(ph, "analysis", json_real(p->analysis));
    json_object_set_new(ph, "store", json_real(p->store));
    json_object_set_new(ph, "memcheck", json_real(p->memcheck));
    json_object_set_new(ph, "other", json_real(p->other));
    json_object_set_new(ph, "total", json_real(p->total));
    return ph;
}

/* See agent_int.h. */
void kf_agent_phases_read(const char *text, kf_phase_times *p) {
    memset(p, 0, sizeof *p);
    json_t *j = text && text[0] ? json_loads(text, 0, NULL) : NULL;
    if (!json_is_object(j)) {
        json_decref(j);
        return;
    }
    p->parse = json_number_value(json_object_get(j, "parse"));
    p->setup = json_number_value(json_object_get(j, "setup"));
    p->draw = json_number_value(json_object_get(j, "draw"));
    p->reference = json_number_value(json_object_get(j, "reference"));
    p->ref_cached = json_is_true(json_object_get(j, "reference_cached"));
    p->compile = json_number_value(json_object_get(j, "compile"));
    p->start = json_number_value(json_object_get(j, "sandbox_start"));
    p->check = json_number_value(json_object_get(j, "check"));
    p->timing = json_number_value(json_object_get(j, "timing"));
    p->analysis = json_number_value(json_object_get(j, "analysis"));
    p->store = json_number_value(json_object_get(j, "store"));
    p->memcheck = json_number_value(json_object_get(j, "memcheck"));
    p->other = json_number_value(json_object_get(j, "other"));
    p->total = json_number_value(json_object_get(j, "total"));
    json_decref(j);
}

/* See agent_int.h: the run record of run.json. */
json_t *kf_agent_run_json(const char *task, const char *task_path, const kf_run_result *r) {
    json_t *run = json_object();
    json_object_set_new(run, "task", json_string(task));
    json_object_set_new(run, "task_path", json_string(task_path));
    json_object_set_new(run, "plan", json_string(r->plan));
    if (r->roles[0]) json_object_set_new(run, "roles", json_string(r->roles));
    json_object_set_new(run, "device", kf_agent_device_json(&r->dev, &r->ceil));
    json_t *roof = json_object();
    json_object_set_new(roof, "bytes", json_real(r->roof.bytes));
    json_object_set_new(roof, "flops", json_real(r->roof.flops));
    json_object_set_new(roof, "floor_ms", json_real(r->roof.floor_s * 1e3));
    json_object_set_new(roof, "bound", json_string(r->roof.bound ? r->roof.bound : ""));
    json_object_set_new(run, "roofline", roof);
    json_t *its = json_array();
    for (int i = 0; i < r->niters; i++) json_array_append_new(its, iter_json(&r->iters[i]));
    json_object_set_new(run, "iterations", its);
    json_object_set_new(run, "best_iter", r->best >= 0 ? json_integer(r->iters[r->best].iter) : json_null());
    json_object_set_new(run, "wall_s", json_real(r->wall_s));
    if (r->phases.total > 0) json_object_set_new(run, "phases_s", kf_agent_phases_json(&r->phases));
    json_t *mc = json_object();
    json_object_set_new(mc, "status", json_string(r->memcheck));
    json_object_set_new(mc, "detail", json_string(r->memcheck_detail));
    json_object_set_new(run, "memcheck", mc);
    if (r->llm_calls > 0 || r->stop_reason[0]) {
        json_t *l = json_object();
        json_object_set_new(l, "calls", json_integer(r->llm_calls));
        json_object_set_new(l, "prompt_tokens", json_integer(r->llm_prompt_tokens));
        json_object_set_new(l, "completion_tokens", json_integer(r->llm_completion_tokens));
        json_object_set_new(l, "transcript", json_string("transcript.jsonl"));
        json_object_set_new(run, "llm", l);
    }
    if (r->reference[0]) json_object_set_new(run, "reference", json_string(r->reference));
    if (r->stop_reason[0]) json_object_set_new(run, "stop_reason", json_string(r->stop_reason));
    if (r->result_from[0]) {
        json_t *res = json_object();
        json_object_set_new(res, "from", json_string(r->result_from));
        json_object_set_new(res, "detail", json_string(r->outcome));
        json_object_set_new(run, "result", res);
    }
    json_object_set_new(run, "sandbox", json_string(r->sandbox));
    json_object_set_new(run, "arch", json_string(r->arch));
    if (r->run_id[0]) {
        json_object_set_new(run, "run_id", json_string(r->run_id));
        json_object_set_new(run, "cache_hits", json_integer(r->cache_hits));
    }
    if (r->store_error[0]) json_object_set_new(run, "store_error", json_string(r->store_error));
    return run;
}

static kf_status write_outputs(const kf_graph *g, const kf_run_result *r, kf_error *err) {
    kf_status st = kf_mkdirs(r->out_dir, err);
    if (st != KF_OK) return st;
    char path[1024];
    json_t *run = kf_agent_run_json(g->name, g->path, r);
    snprintf(path, sizeof path, "%s/run.json", r->out_dir);
    errno = 0;
    int bad = json_dump_file(run, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(run);
    if (bad) return kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot write the run record: %s",
                                 strerror(errno ? errno : EIO));
    if (r->best < 0) return KF_OK;

    const kf_iter_record *b = &r->iters[r->best];
    const char *kname = kf_loop_kernel_file(r->dev.platform);
    snprintf(path, sizeof path, "%s/%s", r->out_dir, kname);
    st = kf_write_file(path, r->best_source, strlen(r->best_source), err);
    if (st != KF_OK) return st;
    json_t *man = json_object();
    json_object_set_new(man, "task", json_string(g->name));
    json_object_set_new(man, "platform", json_string(r->dev.platform));
    json_object_set_new(man, "device", json_string(r->dev.name));
    json_object_set_new(man, "source", json_string(kname));
    char flags[1024];
    snprintf(flags, sizeof flags, "%s %s", r->dev.flags, r->best_flags);
    if (kf_platform_is_host(r->dev.platform)) {
        json_object_set_new(man, "entry", json_string("kforge_kernel"));
        /* the device reports "COMMAND: VERSION" */
        char cc[256];
        snprintf(cc, sizeof cc, "%s", r->dev.compiler);
        char *colon = strstr(cc, ": ");
        const char *version = colon ? colon + 2 : "";
        if (colon) *colon = 0;
        json_object_set_new(man, "compile", json_sprintf("%s %s -o kernel.so kernel.c -lm", cc, flags));
        json_object_set_new(man, "compiler", json_string(cc));
        json_object_set_new(man, "compiler_version", json_string(version));
    } else {
        /* device kernels: the launch plan the source declares, resolved (the best is kept as
         * source and flags, in the run and the store: made a candidate again to read it) */
        kf_candidate bc;
        const kf_launch_plan *plan = NULL;
        kf_error perr = {0};
        if (kf_candidate_init(&bc, r->dev.platform, r->best_source, NULL, &perr) == KF_OK) {
            snprintf(bc.flags, sizeof bc.flags, "%s", r->best_flags);
            if (kf_candidate_plan(&bc, g->ninputs + g->noutputs, &plan, &perr) == KF_OK) {
                json_object_set_new(man, "launches", plan_json(plan));
                json_t *scr = json_object();
                for (int k = 0; k < plan->nscratch; k++)
                    json_object_set_new(scr, plan->scratch_name[k], json_integer(plan->scratch_bytes[k]));
                json_object_set_new(man, "scratch_bytes", scr);
            }
            kf_candidate_clear(&bc);
        }
        json_object_set_new(man, "compiler", json_string(r->dev.compiler));
        json_object_set_new(man, "build_options", json_string(flags));
        if (b->res.resources[0]) json_object_set_new(man, "resources", json_string(b->res.resources));
    }
    json_object_set_new(man, "schedule", json_string(b->label));
    json_object_set_new(man, "flags", json_string(flags));
    json_t *args = json_array();
    for (int i = 0; i < g->ninputs; i++) {
        const kf_value *v = &g->values[g->inputs[i]];
        char sh[128];
        kf_shape_format(&v->shape, sh, sizeof sh);
        json_array_append_new(args, json_sprintf("in %s: %s%s", v->name, kf_dtype_name(v->dtype), sh));
    }
    for (int j = 0; j < g->noutputs; j++) {
        const kf_value *v = &g->values[g->outputs[j]];
        char sh[128];
        kf_shape_format(&v->shape, sh, sizeof sh);
        json_array_append_new(args, json_sprintf("out %s: %s%s", v->name, kf_dtype_name(v->dtype), sh));
    }
    json_object_set_new(man, "args", args);
    json_object_set_new(man, "time_ms", json_real(b->res.time_ms));
    json_object_set_new(man, "pct_floor", json_real(b->perf.pct_floor));
    json_object_set_new(man, "verified_sets", json_integer(b->res.sets_run));
    snprintf(path, sizeof path, "%s/manifest.json", r->out_dir);
    errno = 0;
    bad = json_dump_file(man, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(man);
    if (bad) return kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot write the manifest: %s",
                                 strerror(errno ? errno : EIO));
    return KF_OK;
}

/* Fastest verified iteration not yet rejected, or -1. */
static int fastest(const kf_run_result *r) {
    int best = -1;
    for (int i = 0; i < r->niters; i++) {
        const kf_iter_record *it = &r->iters[i];
        if (it->res.status != KF_V_OK || !it->res.timed || !it->source) continue;
        if (best < 0 || it->res.time_ms < r->iters[best].res.time_ms) best = i;
    }
    return best;
}

/* The checker's short name for messages: the file name of the executable found. */
static const char *checker_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The iteration's source under the memory checker, through the verifier's entry (which
 * builds it with the checker's flags; see kf_verify_run); *mr gets the verdict. */
static kf_status memcheck_iter(const kf_run_result *r, kf_verify_ctx *vctx, kf_backend *be,
                               const kf_iter_record *it, kf_vresult *mr, kf_error *err) {
    kf_candidate c;
    memset(mr, 0, sizeof *mr);
    mr->status = KF_V_INTERNAL;
    kf_status st = kf_candidate_init(&c, r->dev.platform, it->source, NULL, err);
    if (st != KF_OK) return st;
    snprintf(c.flags, sizeof c.flags, "%s", it->flags);
    kf_verify_run_args a = {.mode = KF_VERIFY_MEMCHECK};
    st = kf_verify_run(vctx, be, &c, &a, mr, err);
    kf_candidate_clear(&c);
    return st;
}

/* Record the outcome of an iteration's memory check in it->memcheck; a flagged candidate
 * no longer counts as verified. Returns 1 when it was rejected. */
static int note_memcheck(kf_iter_record *it, kf_status st, const kf_vresult *mr) {
    if (st == KF_ERR_UNSUPPORTED) snprintf(it->memcheck, sizeof it->memcheck, "skipped");
    else if (st != KF_OK) snprintf(it->memcheck, sizeof it->memcheck, "error");
    else snprintf(it->memcheck, sizeof it->memcheck, "%s", kf_vstatus_name(mr->status));
    if (st != KF_OK || mr->status == KF_V_OK) return 0;
    it->res.status = mr->status;
    it->best_so_far = 0;
    snprintf(it->res.detail, sizeof it->res.detail, "%s", mr->detail);
    return 1;
}

/* --memcheck every: the candidate that just verified runs under the checker (tool: its
 * path, "" when the platform has none, then nothing runs). */
static void memcheck_every(const kf_loop_opts *o, const kf_run_result *r, kf_verify_ctx *vctx,
                           kf_backend *be, const char *work, const char *tool,
                           kf_iter_record *it) {
    if (o->memcheck != KF_MEMCHECK_EVERY || !tool[0] || it->res.status != KF_V_OK || !it->source)
        return;
    kf_vresult mr;
    kf_error err = {0};
    kf_status st = memcheck_iter(r, vctx, be, it, &mr, &err);
    if (note_memcheck(it, st, &mr)) return;
    if (st != KF_OK && o->table)
        fprintf(o->table, "memcheck %s for iter %d: %s\n", it->memcheck, it->iter, err.msg);
}

/* Seconds the memory checker should take on a candidate with result res. compute-sanitizer:
 * an assumed 100x the kernel's time (memcheck.c). valgrind runs one thread at a time, so
 * its time follows the kernel's CPU time per call (its time times the CPUs it kept busy
 * in the timing run: CPU seconds over running seconds, else --threads), measured at
 * 21-29x for the build without FMA plus about a second to start (docs/benchmarks/loop.md,
 * 2026-12-06); MC_EST_FACTOR and MC_EST_BASE leave room for a loaded machine. The
 * estimate used to be the kernel's wall time times 50 (600 when compute-bound): a 2-thread
 * kernel's CPU time was left out, and FMA code ran ~10x slower than that under valgrind,
 * so matmul ran 371 s where it was estimated under 60. */
#define MC_EST_FACTOR 40.0
#define MC_EST_BASE 2.0
static double memcheck_estimate(const kf_vresult *res, int sanitizer, int threads) {
    double t = res->time_ms * 1e-3;
    if (sanitizer) return 100.0 * t;
    double par = res->timing_cpu_s > 0 && res->timing_run_s > 0 ? res->timing_cpu_s / res->timing_run_s
                                                                 : (double)threads;
    if (!(par >= 1.0)) par = 1.0;
    return MC_EST_BASE + MC_EST_FACTOR * t * par;
}

/* The last rule of the harness: the candidate handed back has run under the platform's
 * memory checker (valgrind on cpu, compute-sanitizer on cuda). A candidate it rejects
 * loses its place to the next fastest (at most three tries). In auto mode a kernel whose
 * estimated time under the checker (memcheck_estimate) exceeds a minute is not checked,
 * and the record says so (GPU kernels take milliseconds, so on cuda auto checks nearly
 * always). With --memcheck every the best was checked when it verified
 * and is not run again. A platform without a checker, or a checker not installed, is
 * "skipped" with the reason (what was looked for), never a silent pass. */
static void final_memcheck(const kf_loop_opts *o, kf_run_result *r, kf_verify_ctx *vctx,
                           kf_backend *be, const char *work, const char *tool,
                           const char *why_none) {
    snprintf(r->memcheck, sizeof r->memcheck, "off");
    if (o->memcheck == KF_MEMCHECK_OFF || r->best < 0) return;
    if (!tool[0]) {
        snprintf(r->memcheck, sizeof r->memcheck, "skipped");
        snprintf(r->memcheck_detail, sizeof r->memcheck_detail, "memcheck skipped: %s", why_none);
        if (o->table) fprintf(o->table, "%s\n", r->memcheck_detail);
        return;
    }
    const char *name = checker_name(tool);
    const kf_platform *pf = kf_platform_find(r->dev.platform);
    int sanitizer = pf && pf->memchecker == KF_MEMCHECKER_COMPUTE_SANITIZER;
    char built[64]; /* the flags the checked build added (said in the clean verdict) */
    snprintf(built, sizeof built, "%s", kf_verify_memcheck_flags(be));
    for (int attempt = 0; attempt < 3 && r->best >= 0; attempt++) {
        kf_iter_record *it = &r->iters[r->best];
        if (strcmp(it->memcheck, "ok") == 0) {
            /* --memcheck every: checked when it verified */
            snprintf(r->memcheck, sizeof r->memcheck, "ok");
            break;
        }
        double est = memcheck_estimate(&it->res, sanitizer, o->threads);
        if (o->memcheck == KF_MEMCHECK_AUTO && est > 60.0) {
            snprintf(r->memcheck, sizeof r->memcheck, "skipped");
            snprintf(r->memcheck_detail, sizeof r->memcheck_detail,
                     "memcheck skipped: about %.0f s under %s; use --memcheck on to run it", est,
                     name);
            break;
        }
        if (it->memcheck[0]) {
            /* checked with every candidate, without a verdict: say so, do not repeat it */
            snprintf(r->memcheck, sizeof r->memcheck, "%s", it->memcheck);
            snprintf(r->memcheck_detail, sizeof r->memcheck_detail,
                     "memcheck %s for iter %d (see its record)", it->memcheck, it->iter);
            break;
        }
        if (o->table) fprintf(o->table, "memcheck: iter %d under %s...\n", it->iter, name);
        kf_vresult mr;
        kf_error err = {0};
        kf_status st = memcheck_iter(r, vctx, be, it, &mr, &err);
        int rejected = note_memcheck(it, st, &mr);
        if (mr.checked_flags[0] || st == KF_OK) snprintf(built, sizeof built, "%s", mr.checked_flags);
        if (st == KF_ERR_UNSUPPORTED) {
            snprintf(r->memcheck, sizeof r->memcheck, "skipped");
            snprintf(r->memcheck_detail, sizeof r->memcheck_detail, "memcheck skipped: %s", err.msg);
            break;
        }
        if (st != KF_OK) {
            snprintf(r->memcheck, sizeof r->memcheck, "error");
            snprintf(r->memcheck_detail, sizeof r->memcheck_detail, "%s", err.msg);
            break;
        }
        snprintf(r->memcheck, sizeof r->memcheck, "%s", kf_vstatus_name(mr.status));
        snprintf(r->memcheck_detail, sizeof r->memcheck_detail, "%s", mr.detail);
        if (!rejected) break;
        if (o->table) fprintf(o->table, "memcheck rejected iter %d: %s\n", it->iter, mr.detail);
        r->best = fastest(r);
    }
    if (strcmp(r->memcheck, "ok") == 0) {
        const char *lost = kf_verify_memcheck_confinement(be);
        snprintf(r->memcheck_detail, sizeof r->memcheck_detail, "clean (%s memcheck, input set 0%s%s%s%s%s)",
                 name, o->memcheck == KF_MEMCHECK_EVERY ? ", every verified candidate" : "",
                 built[0] ? ", built with " : "", built, lost[0] ? "; " : "", lost);
    }
    if (o->table && r->memcheck_detail[0] && strcmp(r->memcheck, "ok") != 0)
        fprintf(o->table, "%s\n", r->memcheck_detail);
    else if (o->table && strcmp(r->memcheck, "ok") == 0)
        fprintf(o->table, "memcheck: %s\n", r->memcheck_detail);
}

/* The measured ceilings for the roofline: the calibration room's (kforge/calib.h). */
static kf_status device_ceilings(kf_backend *be, const kf_loop_opts *o, kf_ceilings *c,
                                 kf_error *err) {
    return kf_calib_ceilings(be, o->threads, o->recalibrate ? KF_CALIB_MEASURE : KF_CALIB_CACHED_OR_MEASURE,
                             c, err);
}

/* A 16-bit matmul's compute floor (the calibration room's datasheet rate), said in the
 * table. */
static void mm16_peak(kf_run_result *r, const kf_loop_opts *o) {
    char said[512];
    kf_calib_mm16(&r->dev, &r->ceil, said, sizeof said);
    if (o->table) fprintf(o->table, "floor: %s\n", said);
}

/* An f32 contraction's compute ceiling (max of the f32 peak and the datasheet's TF32 rate
 * / 3), said in the table. */
static void tf32_peak(kf_run_result *r, const kf_loop_opts *o) {
    char said[512];
    kf_calib_tf32(&r->dev, &r->ceil, said, sizeof said);
    if (o->table) fprintf(o->table, "floor: %s\n", said);
}

/* The architecture database's entry for the run's device, loaded into *db (freed by the
 * caller); r->arch says which entry, or why there is none (printed: never silent). */
static const kf_arch_entry *arch_entry(kf_arch_db **db, kf_run_result *r, const kf_loop_opts *o) {
    kf_error e = {0};
    if (o->analysis == KF_ANALYSIS_OFF) return NULL;
    if (kf_arch_db_load(NULL, db, &e) != KF_OK) {
        snprintf(r->arch, sizeof r->arch, "no architecture database: %s", e.msg);
        if (o->table) fprintf(o->table, "analysis: %s (occupancy not computed)\n", r->arch);
        return NULL;
    }
    int gpu = kf_device_is_gpu(&r->dev);
    const kf_arch_entry *a = kf_arch_db_match(*db, r->dev.name, gpu ? KF_ARCH_GPU : KF_ARCH_CPU);
    if (a) snprintf(r->arch, sizeof r->arch, "%s", a->id);
    else snprintf(r->arch, sizeof r->arch, "no entry matches \"%s\"", r->dev.name);
    if (o->table) fprintf(o->table, "analysis: architecture %s%s\n", a ? a->name : r->arch,
                          a ? "" : " (occupancy not computed)");
    return a;
}

/* Why the diagnosis has no profiler counters on this platform, said once per run. */
static void counters_note(char *note, size_t cap, const kf_run_result *r, const kf_loop_opts *o) {
    note[0] = 0;
    if (o->analysis == KF_ANALYSIS_OFF) return;
    const char *pl = r->dev.platform;
    const kf_platform *pf = kf_platform_find(pl);
    kf_profiler prof = pf ? pf->profiler : KF_PROFILER_NONE;
    if (prof == KF_PROFILER_PERF_EVENT) {
        if (kf_perf_cpu_counters_usable(note, cap))
            snprintf(note, cap, "CPU counters work here, but kforge synth does not collect them per candidate yet");
    } else if (prof == KF_PROFILER_NCU) {
        if (o->counters == KF_COUNTERS_OFF)
            snprintf(note, cap, "no profiler counters (kforge synth --counters ncu runs each candidate under Nsight Compute)");
    } else {
        snprintf(note, cap, "no profiler reader for %s", pl);
    }
    if (o->table && note[0]) fprintf(o->table, "analysis: %s\n", note);
}

/* The analysis agent's reading of a verified, timed candidate into rec->diag. */
static void analyse(const kf_evalctx *ec, const kf_candidate *cand, kf_iter_record *rec) {
    const kf_run_result *r = ec->r;
    kf_diag_param params[KF_MAX_PARAMS];
    int np = 0;
    for (int i = 0; ec->sp && ec->pt && i < ec->sp->nparams; i++) {
        if (!kf_param_active(ec->sp, ec->pt, i)) continue; /* another template's parameter */
        kf_diag_param *q = &params[np++];
        snprintf(q->name, sizeof q->name, "%s", ec->sp->p[i].name);
        q->idx = ec->pt->idx[i];
        q->nvalues = ec->sp->p[i].nvalues;
        q->value = ec->sp->p[i].values[q->idx];
        q->role = ec->sp->p[i].role;
    }
    int gpu = kf_device_is_gpu(&r->dev);
    /* the plan the candidate carries (verification parsed it) */
    const kf_launch_plan *plan = NULL;
    if (kf_platform_declares_plan(r->dev.platform, cand->source)) {
        kf_error pe = {0};
        if (kf_candidate_plan(cand, ec->g_nbufs, &plan, &pe) != KF_OK) plan = NULL;
    }
    kf_diag_input in = {
        .platform = r->dev.platform,
        .gpu = gpu,
        .roof = &r->roof,
        .perf = &rec->perf,
        .arch = ec->arch,
        .resources = rec->res.resources,
        .plan = plan,
        .params = params,
        .nparams = np,
        .counters = rec->counters,
        .ncounters = rec->ncounters,
        .counters_note = rec->ncounters == 0 && ec->counters_note[0] ? ec->counters_note : NULL,
        .launch_s = r->ceil.launch_us * 1e-6,
        .cpu_threads = r->dev.threads,
        .units = r->dev.compute_units,
    };
    kf_perf_diagnose(&in, &rec->diag);
    rec->has_diag = 1;
}

kf_iter_record *kf_loop_new_iter(kf_run_result *r, int it, const char *agent, const char *label) {
    kf_iter_record *rec = &r->iters[r->niters++];
    rec->iter = it + 1;
    snprintf(rec->agent, sizeof rec->agent, "%s", agent);
    snprintf(rec->label, sizeof rec->label, "%s", label);
    return rec;
}

void kf_loop_table_row(const kf_evalctx *ec, const kf_iter_record *rec) {
    if (!ec->o->table) return;
    kf_report_row row;
    fill_row(rec, &row);
    char line[700];
    if (rec->has_diag) {
        kf_perf_diagnosis_line(&rec->diag, line, sizeof line);
        row.analysis = line;
    }
    kf_report_table_row(ec->o->table, &row);
}

/* --counters: the verified candidate's profiled run; its rows go to rec->counters. A
 * failure is said in the table and the diagnosis' evidence; after KF_PROFILE_MAX_FAILS in
 * a row the run stops profiling (the same cause would only cost the time again). */
#define KF_PROFILE_MAX_FAILS 2
static void profile(kf_evalctx *ec, const kf_candidate *cand, kf_iter_record *rec) {
    if (!ec->prof_tool || !ec->prof_tool[0]) return;
    char why[sizeof ec->counters_note - 60];
    if (kf_agent_profile(ec->vctx, ec->be, ec->prof_tool, cand, rec, why, sizeof why)) {
        ec->prof_fails = 0;
        ec->counters_note[0] = 0;
        return;
    }
    ec->prof_fails++;
    if (ec->prof_fails >= KF_PROFILE_MAX_FAILS) {
        snprintf(ec->counters_note, sizeof ec->counters_note, "%s (profiling stopped after %d failures in a row)",
                 why, ec->prof_fails);
        ec->prof_tool = NULL;
    } else {
        snprintf(ec->counters_note, sizeof ec->counters_note, "%s", why);
    }
    if (ec->o->table) fprintf(ec->o->table, "counters: %s\n", ec->counters_note);
}

/* See agent_int.h. */
int kf_loop_evaluate(kf_evalctx *ec, const kf_candidate *cand, kf_iter_record *rec) {
    kf_run_result *r = ec->r;
    kf_hash_hex(kf_hash64(cand->flags, strlen(cand->flags), kf_hash64(cand->source, strlen(cand->source), 0)),
                rec->hash);
    kf_error verr = {0};
    kf_phase_times *ph = &r->phases;
    /* a result the store holds for this exact build on this device is not measured again */
    double t = kf_now();
    int found = kf_persist_lookup(ec->ps, r, cand, rec);
    ph->store += kf_now() - t;
    if (!found) {
        /* racing: a candidate that cannot be the best ends its timing early (verify.h) */
        kf_verify_race(ec->vctx, !ec->o->no_race && r->best >= 0 ? ec->best_time * 1e-3 : 0);
        kf_status st = kf_verify_candidate(ec->vctx, ec->be, cand, &rec->res, &verr);
        if (st != KF_OK) {
            rec->res.status = KF_V_INTERNAL;
            snprintf(rec->res.detail, sizeof rec->res.detail, "%s", verr.msg);
        }
        ph->compile += rec->res.compile_s;
        ph->start += rec->res.start_s;
        ph->check += rec->res.check_s;
        ph->timing += rec->res.timing_s;
    }
    int best = 0;
    if (rec->res.status == KF_V_OK && rec->res.timed) {
        kf_perf_place(&r->roof, rec->res.time_ms * 1e-3, &rec->perf);
        t = kf_now();
        profile(ec, cand, rec);
        if (ec->o->analysis != KF_ANALYSIS_OFF) analyse(ec, cand, rec);
        ph->analysis += kf_now() - t;
        rec->source = kf_strdup(cand->source);
        snprintf(rec->flags, sizeof rec->flags, "%s", cand->flags);
        /* --memcheck every: a candidate the checker flags never becomes the best (a cached
         * result carries its stored verdict) */
        t = kf_now();
        if (!rec->cached) memcheck_every(ec->o, r, ec->vctx, ec->be, ec->work, ec->mc_tool, rec);
        ph->memcheck += kf_now() - t;
        if (rec->res.status == KF_V_OK && (r->best < 0 || rec->res.time_ms < ec->best_time)) {
            ec->best_time = rec->res.time_ms;
            r->best = (int)(rec - r->iters);
            rec->best_so_far = 1;
            best = 1;
        }
    }
    kf_loop_table_row(ec, rec);
    t = kf_now();
    kf_persist_iter(ec->ps, r, rec, cand->source, cand->flags);
    ph->store += kf_now() - t;
    return best;
}

/* The total (the caller's parse included) and what the named phases leave of it. */
static void phases_close(kf_phase_times *p, double parse_s, double loop_s) {
    p->parse = parse_s;
    p->total = parse_s + loop_s;
    p->other = p->total - (p->parse + p->setup + p->draw + p->reference + p->compile + p->start +
                           p->check + p->timing + p->analysis + p->store + p->memcheck);
    if (p->other < 0) p->other = 0;
}

void kf_phase_times_print(FILE *f, const kf_phase_times *p) {
    const struct { const char *name; double s; } rows[] = {
        {"parse", p->parse}, {"setup", p->setup}, {"input draw", p->draw},
        {"reference", p->reference}, {"compile", p->compile}, {"sandbox start", p->start},
        {"check runs", p->check}, {"timing runs", p->timing}, {"analysis", p->analysis},
        {"store", p->store}, {"memcheck", p->memcheck}, {"other", p->other},
    };
    fprintf(f, "phases (s):\n");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        fprintf(f, "  %-14s %8.3f  %5.1f%%%s\n", rows[i].name, rows[i].s,
                p->total > 0 ? 100 * rows[i].s / p->total : 0,
                i == 3 && p->ref_cached ? "  (from the store's cache)" : "");
    fprintf(f, "  %-14s %8.3f\n", "total", p->total);
}

/* Which path produced r's result (r->result_from, r->outcome), said in the table too; for a
 * module task without one, why nothing stands in for the model (kf_mixed_no_result): a run
 * never ends with nothing and no reason. */
static void result_path(const kf_graph *g, const kf_loop_opts *o, const kf_mixed_cover *cov, kf_run_result *r) {
    if (r->best >= 0) {
        const kf_iter_record *b = &r->iters[r->best];
        int model = !strcmp(b->agent, "llm");
        snprintf(r->result_from, sizeof r->result_from, "%s", model ? "llm" : "builtin");
        snprintf(r->outcome, sizeof r->outcome, "%s kernel of iteration %d, verified against %s%s%s%s%s",
                 model ? "the model's" : "the builtin generator's", b->iter,
                 g->module ? "the module (its " : "the float64 interpreter",
                 g->module ? kf_module_ref_phrase(o->module_ref) : "", g->module ? ")" : "",
                 g->module && cov->nok ? "; the model had the builtin's verified kernels of the parts as references: "
                                       : "",
                 g->module && cov->nok ? cov->verified : "");
    } else {
        snprintf(r->result_from, sizeof r->result_from, "none");
        if (g->module)
            kf_mixed_no_result(g, o->task_text, o->agent == KF_AGENT_BOTH, cov, r, r->outcome, sizeof r->outcome);
        else
            snprintf(r->outcome, sizeof r->outcome, "no verified kernel: none of the %d candidates verified%s%s",
                     r->niters, r->stop_reason[0] ? "; stopped: " : "", r->stop_reason);
    }
    if (o->table) fprintf(o->table, "result: %s\n", r->outcome);
}

kf_status kf_loop_run(const kf_graph *g, const kf_loop_opts *o, kf_run_result *r, kf_error *err) {
    memset(r, 0, sizeof *r);
    r->best = -1;
    double t0 = kf_now();
    kf_status st;
    kf_backend *be = NULL;
    kf_synth *syn = NULL;
    kf_verify_ctx *vctx = NULL;
    kf_arch_db *adb = NULL;
    kf_proposer agents[2];
    memset(agents, 0, sizeof agents);
    char *parts_ref = NULL, parts_origin[300] = ""; /* a mixed task's part kernels */
    kf_mixed_cover cover;
    memset(&cover, 0, sizeof cover);
    kf_persist ps;
    memset(&ps, 0, sizeof ps);
    const char *target = o->target ? o->target : "cpu";
    /* one seed for the input sets and the search, kept so a resumed run replays it */
    r->seed = o->seed;
    if (!r->seed) {
        double t = kf_now();
        r->seed = kf_hash64(&t, sizeof t, (uint64_t)time(NULL)) | 1;
    }

    /* a module reference other than float64 on the CPU is the user's explicit choice, for a
     * module task only: said before anything else runs */
    st = kf_module_ref_check(g, o->module_ref, err); /* also sets.c's, which a cached set skips */
    if (st != KF_OK) goto done;
    snprintf(r->reference, sizeof r->reference, "%s",
             g->module ? kf_module_ref_describe(o->module_ref) : "the float64 interpreter (kforge's own, on the CPU)");
    st = kf_backend_open(target, &be, err);
    if (st != KF_OK) goto done;
    r->dev = be->info;
    /* --counters: the profiler, or the reason there is none, before anything is measured */
    char prof_tool[1024];
    st = kf_agent_counters_tool(o, r->dev.platform, prof_tool, sizeof prof_tool, err);
    if (st != KF_OK) goto done;
    if (g->module) {
        /* a module task (ops kforge cannot lower): only a model writes its kernel */
        if (o->agent == KF_AGENT_BUILTIN) {
            st = kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, 0, 0,
                              "task '%s' is a module task (its module has ops kforge cannot lower): the builtin "
                              "generator cannot synthesize it; module task: use --agent llm (or --agent both: the "
                              "builtin writes the parts kforge lowers, for the model to reuse)", g->name);
            goto done;
        }
        snprintf(r->plan, sizeof r->plan, "module task: one kernel for the whole forward, written by the model%s",
                 o->agent == KF_AGENT_BOTH ? " (a mixed task: the builtin's kernels of the parts it lowers as "
                                             "references)" : "");
    } else {
    st = kf_synth_plan(g, be->info.platform, &be->info, &syn, err);
    if (st != KF_OK) goto done;
    {
        const kf_space *sp = kf_synth_space(syn);
        size_t used = 0;
        r->roles[0] = 0;
        for (int i = 0; i < sp->nparams && used < sizeof r->roles; i++) {
            const char *nm = strncmp(sp->p[i].name, "s0.", 3) == 0 ? sp->p[i].name + 3 : sp->p[i].name;
            used += (size_t)snprintf(r->roles + used, sizeof r->roles - used, "%s%s:%s", used ? " " : "", nm,
                                     kf_role_name(sp->p[i].role));
        }
    }
    st = apply_pins(syn, o, err);
    if (st != KF_OK) goto done;
    snprintf(r->plan, sizeof r->plan, "%s", kf_synth_describe(syn)); /* as pinned (--no-fuse) */
    }
    /* Outputs on fresh pages (the caller allocates them per call, as PyTorch's CPU calls
     * do): streaming stores lost there in every kforge bench run (softplus 35.5 ms with
     * them against 23.0 eager; clamp 18.2 against 11.0), though the runner's emulation of
     * fresh pages timed them even, so they are not searched. */
    const kf_platform *pf = kf_platform_find(be->info.platform);
    if (syn && o->fresh_outputs && pf && pf->templates == KF_TPL_CPU && kf_synth_pin(syn, "nt", 0) > 0 &&
        o->table)
        fprintf(o->table, "fresh outputs: streaming stores (nt) left out of the search\n");

    /* the output folder before the calibration (seconds to minutes): a path that cannot
     * be written fails at once, and a path too long for the record is refused, not cut */
    if (o->out_dir && strlen(o->out_dir) >= sizeof r->out_dir) {
        st = kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                          "the output folder's path (--out) is %zu bytes long; at most %zu are kept",
                          strlen(o->out_dir), sizeof r->out_dir - 1);
        goto done;
    }
    if (o->out_dir) snprintf(r->out_dir, sizeof r->out_dir, "%s", o->out_dir);
    else snprintf(r->out_dir, sizeof r->out_dir, "kforge-out/%s", g->name);
    char work[sizeof r->out_dir + 8];
    snprintf(work, sizeof work, "%s/work", r->out_dir);
    st = kf_mkdirs(work, err);
    if (st != KF_OK) goto done;
    if (access(work, W_OK) != 0) {
        st = kf_error_set(err, KF_ERR_IO, work, 0, 0, "cannot write here: %s", strerror(errno));
        goto done;
    }

    /* a mixed task: the builtin's kernels for the parts kforge lowers, before the model */
    if (g->module && o->agent == KF_AGENT_BOTH) {
        st = kf_mixed_parts(g, o, r->out_dir, &parts_ref, parts_origin, sizeof parts_origin, &cover, err);
        if (st != KF_OK) goto done;
    }
    st = device_ceilings(be, o, &r->ceil, err);
    if (st != KF_OK) goto done;
    if (kf_graph_has_mm16(g)) mm16_peak(r, o);
    if (kf_graph_has_mm32(g) && kf_device_is_gpu(&r->dev)) tf32_peak(r, o);
    kf_roofline_of(g, &r->ceil, &r->roof);

    kf_verify_opts vo;
    kf_verify_opts_default(&vo);
    vo.seed = r->seed;
    vo.threads = o->threads;
    vo.time_it = 1;
    /* the timing ends once the median is stable (issue 30: a 6 ms kernel took 33 reps, each
     * with its 2 x 64 MiB of inputs and poisoned outputs written first) */
    vo.stable_rel = 0.01;
    vo.fresh_outputs = o->fresh_outputs;
    vo.floor_s = r->roof.floor_s;
    vo.workdir = work;
    vo.module_ref = o->module_ref;
    if (o->table)
        fprintf(o->table, "drawing %d input sets and computing the %s%s...\n", vo.nsets, g->module ? "module's " : "",
                kf_module_ref_phrase(o->module_ref));
    r->phases.setup = kf_now() - t0;
    double t_ctx = kf_now();
    /* the sets and reference depend on the task, the seed and the set count only: a run
     * with a given seed (--seed, --resume) finds them in the store when one drew them */
    r->phases.ref_cached = kf_persist_sets_load(o, g, &vo, &vctx);
    if (r->phases.ref_cached) {
        r->phases.reference = kf_now() - t_ctx;
        if (o->table) fprintf(o->table, "(input sets and reference from the store's cache)\n");
    } else {
        st = kf_verify_ctx_new(g, &vo, &vctx, err);
        if (st != KF_OK) goto done;
        t_ctx = kf_now() - t_ctx;
        /* the reference: the interpreter and everything else of the context but the
         * drawing (rounding the reference to the outputs' dtype, its RMS, the bounds) */
        kf_verify_ctx_times(vctx, &r->phases.draw, &r->phases.reference);
        if (t_ctx > r->phases.draw) r->phases.reference = t_ctx - r->phases.draw;
        double ts = kf_now();
        kf_persist_sets_save(o, g, &vo, vctx);
        r->phases.store += kf_now() - ts;
    }
    double t_setup2 = kf_now();

    r->sandbox_flags = kf_verify_sandbox_describe(vctx, be, r->sandbox, sizeof r->sandbox);
    /* a model's kernels are untrusted: say what holds them, and loudly what does not */
    if (o->table && o->agent != KF_AGENT_BUILTIN)
        fprintf(o->table, "sandbox: %s\n", r->sandbox);
    const kf_arch_entry *arch = arch_entry(&adb, r, o);
    char cnote[300];
    counters_note(cnote, sizeof cnote, r, o);
    if (prof_tool[0] && o->table)
        fprintf(o->table, "counters: each verified candidate runs once more under %s (%s)\n", prof_tool,
                kf_verify_profile_confinement());
    if (o->table && r->ceil.busy > KF_CALIB_BUSY_MAX)
        fprintf(o->table, "ceilings: measured while other processes used %.0f%% of the machine (%s): the "
                          "floor may be low and %% of floor high; a run 5 minutes on measures again\n",
                100 * r->ceil.busy, r->ceil.when);
    if (o->table)
        kf_report_table_header(o->table, g->name, r->plan, r->dev.name, r->roof.floor_s * 1e3,
                               r->roof.bound ? r->roof.bound : "?", r->ceil.measured);

    /* the platform's memory checker, looked up once: "" and the reason when none */
    char mc_tool[1024];
    kf_error mc_none = {0};
    if (kf_verify_memcheck_tool(r->dev.platform, mc_tool, sizeof mc_tool, &mc_none) != KF_OK)
        mc_tool[0] = 0;
    if (o->memcheck == KF_MEMCHECK_EVERY && !mc_tool[0] && o->table)
        fprintf(o->table, "memcheck every: not run: %s\n", mc_none.msg);

    int iters = o->iters > 0 ? o->iters : 12;
    r->phases.setup += kf_now() - t_setup2;
    double tp = kf_now();
    st = kf_persist_begin(&ps, g, o, r, iters, &vo, err);
    r->phases.store += kf_now() - tp;
    if (st != KF_OK) goto done;
    r->iters = kf_calloc((size_t)iters, sizeof *r->iters);
    /* iterations for the builtin agent; the rest go to the model */
    int nbuiltin = o->agent == KF_AGENT_LLM || g->module ? 0 /* a mixed task's builtin ran on its parts */
                   : o->agent == KF_AGENT_BOTH ? (o->builtin_iters > 0 ? o->builtin_iters : (iters + 1) / 2)
                                               : iters;
    if (nbuiltin > iters) nbuiltin = iters;
    kf_evalctx ec = {o, r, vctx, be, work, mc_tool, 0, NULL, NULL, NULL, g->ninputs + g->noutputs, &ps, "", NULL, 0,
                     NULL, NULL};
    ec.arch = arch;
    snprintf(ec.counters_note, sizeof ec.counters_note, "%s", cnote);
    ec.prof_tool = prof_tool;
    ec.parts_ref = parts_ref;
    ec.parts_origin = parts_origin;
    /* the two generation agents behind one interface: the builtin's iterations first */
    if (syn) kf_proposer_builtin(syn, o, r->seed, &agents[0]);
    kf_proposer_llm(g, &agents[1]);
    int in_use = -1;
    for (int it = 0; it < iters; it++) {
        if (it > 0 && o->time_budget_s > 0 && kf_now() - t0 > o->time_budget_s) {
            snprintf(r->stop_reason, sizeof r->stop_reason, "time budget of %.0f s spent", o->time_budget_s);
            break;
        }
        int k = it < nbuiltin ? 0 : 1;
        if (in_use >= 0 && in_use != k && agents[in_use].close) agents[in_use].close(agents[in_use].self, &ec);
        in_use = k;
        st = agents[k].step(agents[k].self, &ec, it, err);
        if (st == KF_ERR_UNSUPPORTED) { /* nothing more to propose: r->stop_reason may say why */
            st = KF_OK;
            break;
        }
        if (st != KF_OK) goto done;
    }
    if (in_use >= 0 && agents[in_use].close) agents[in_use].close(agents[in_use].self, &ec);
    double tm = kf_now();
    final_memcheck(o, r, vctx, be, work, mc_tool, mc_none.msg);
    r->phases.memcheck += kf_now() - tm;
    if (r->best >= 0) {
        r->best_source = kf_strdup(r->iters[r->best].source);
        snprintf(r->best_flags, sizeof r->best_flags, "%s", r->iters[r->best].flags);
    }
    result_path(g, o, &cover, r);
    r->wall_s = kf_now() - t0;
    if (o->table) {
        kf_report_row brow;
        if (r->best >= 0) fill_row(&r->iters[r->best], &brow);
        double first = r->niters && r->iters[0].res.status == KF_V_OK ? r->iters[0].res.time_ms : 0;
        kf_report_table_footer(o->table, r->best >= 0 ? &brow : NULL, first, r->wall_s);
    }
    /* closed before the run's end is stored, which then records them (its own write is
     * the one store write they miss) */
    phases_close(&r->phases, o->parse_s, kf_now() - t0);
    kf_persist_finish(&ps, r, 0);
    st = write_outputs(g, r, err);

done:
    free(parts_ref);
    if (st != KF_OK && r->run_id[0]) kf_persist_finish(&ps, r, 1);
    kf_arch_db_free(adb);
    for (int k = 0; k < 2; k++)
        if (agents[k].free) agents[k].free(agents[k].self);
    kf_verify_ctx_free(vctx);
    kf_synth_free(syn);
    kf_backend_close(be);
    return st;
}
