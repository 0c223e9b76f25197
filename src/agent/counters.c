/*
 * Profiler counters per candidate in kforge synth (--counters ncu).
 *
 * Design note. A verified, timed candidate runs once more, on input set 0, under Nsight
 * Compute (kf_verify_run's profile mode, which builds it and calls kf_verify_profile:
 * inside the sandbox like the memory checker's run, with the
 * confinement ncu needs); its raw CSV page is parsed (kf_perf_ncu_parse) into one row per
 * kernel launch, and the rows go to the diagnosis (achieved occupancy, DRAM and SM
 * throughput, stall reasons, cache hit rates, bank conflicts), to the run record
 * ("counters" of the iteration, also inside the stored diagnosis so that `kforge runs
 * show` and --resume read them back) and, with --analysis llm, to the model as numbers.
 * The profiled run is not the timed one: ncu replays each kernel once per counter pass
 * and locks nothing (--clock-control none), so its durations are only the profiler's.
 *
 * A profiled run that fails (no permission for the counters, a timeout, ...) leaves the
 * candidate's verdict and time as they were: the diagnosis says why it has no counters,
 * the table says it once, and after KF_PROFILE_MAX_FAILS failures in a row the run stops
 * profiling (the same cause would only cost time again) and says so.
 */
#include "agent/agent_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* See agent_int.h. */
kf_status kf_agent_counters_tool(const kf_loop_opts *o, const char *platform, char *tool, size_t cap,
                                 kf_error *err) {
    tool[0] = 0;
    if (o->counters == KF_COUNTERS_OFF) return KF_OK;
    const kf_platform *p = kf_platform_find(platform);
    if (!p || p->profiler != KF_PROFILER_NCU)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "--counters ncu profiles CUDA kernels; this run's platform is %s",
                            platform);
    kf_status st = kf_verify_profiler_tool(platform, tool, cap, err);
    if (st != KF_OK) tool[0] = 0;
    return st;
}

/* See agent_int.h. */
int kf_agent_profile(kf_verify_ctx *vctx, kf_backend *be, const char *tool,
                     const kf_candidate *cand, kf_iter_record *rec, char *why, size_t cap) {
    why[0] = 0;
    kf_error err = {0};
    kf_buf csv = {0};
    kf_counters *rows = NULL;
    int n = 0;
    char detail[600] = "";
    kf_vresult vr;
    kf_verify_run_args a = {.mode = KF_VERIFY_PROFILE, .tool = tool, .csv = &csv, .detail = detail,
                            .dcap = sizeof detail};
    kf_status st = kf_verify_run(vctx, be, cand, &a, &vr, &err);
    if (st != KF_OK && vr.status == KF_V_COMPILE_ERROR) {
        snprintf(why, cap, "the profiled build failed: %s", err.msg);
        kf_buf_free(&csv);
        return 0;
    }
    if (st != KF_OK) {
        snprintf(why, cap, "the profiled run under ncu failed: %s", detail[0] ? detail : err.msg);
        kf_buf_free(&csv);
        return 0;
    }
    st = kf_perf_ncu_parse(csv.data ? csv.data : "", csv.len, &rows, &n, &err);
    kf_buf_free(&csv);
    if (st != KF_OK || n == 0) {
        snprintf(why, cap, "ncu's counters could not be read: %s",
                 st != KF_OK ? err.msg : "no kernel launch was profiled");
        free(rows);
        return 0;
    }
    free(rec->counters);
    rec->counters = rows;
    rec->ncounters = n;
    return 1;
}

static void put_num(json_t *o, const char *key, double v) {
    if (v >= 0) json_object_set_new(o, key, json_real(v));
}

/* See agent_int.h. */
json_t *kf_agent_counters_json(const kf_counters *c, int n) {
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        const kf_counters *k = &c[i];
        json_t *o = json_object();
        json_object_set_new(o, "kernel", json_string(k->kernel));
        json_object_set_new(o, "source", json_string(k->source));
        put_num(o, "duration_s", k->duration_s);
        put_num(o, "dram_pct", k->dram_pct);
        put_num(o, "sm_pct", k->sm_pct);
        put_num(o, "mem_pct", k->mem_pct);
        put_num(o, "achieved_occupancy_pct", k->achieved_occ_pct);
        put_num(o, "theoretical_occupancy_pct", k->theoretical_occ_pct);
        put_num(o, "l1_hit_pct", k->l1_hit_pct);
        put_num(o, "l2_hit_pct", k->l2_hit_pct);
        put_num(o, "bank_conflicts", k->bank_conflicts);
        put_num(o, "dram_bytes", k->dram_bytes);
        put_num(o, "regs", k->regs);
        put_num(o, "smem_bytes", k->smem_bytes);
        put_num(o, "grid", k->grid);
        put_num(o, "block", k->block);
        json_t *st = json_array();
        for (int s = 0; s < k->nstalls; s++)
            json_array_append_new(st, json_pack("{s:s, s:f}", "reason", k->stall[s].name, "pct", k->stall[s].pct));
        json_object_set_new(o, "stalls", st);
        json_array_append_new(arr, o);
    }
    return arr;
}

static double get_num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : -1;
}

/* See agent_int.h. */
int kf_agent_counters_parse(json_t *arr, kf_counters **out) {
    *out = NULL;
    size_t n = json_array_size(arr);
    if (n == 0) return 0;
    kf_counters *c = kf_calloc(n, sizeof *c);
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        kf_counters *k = &c[i];
        const char *s = json_string_value(json_object_get(o, "kernel"));
        snprintf(k->kernel, sizeof k->kernel, "%s", s ? s : "");
        s = json_string_value(json_object_get(o, "source"));
        snprintf(k->source, sizeof k->source, "%s", s ? s : "");
        k->duration_s = get_num(o, "duration_s");
        k->dram_pct = get_num(o, "dram_pct");
        k->sm_pct = get_num(o, "sm_pct");
        k->mem_pct = get_num(o, "mem_pct");
        k->achieved_occ_pct = get_num(o, "achieved_occupancy_pct");
        k->theoretical_occ_pct = get_num(o, "theoretical_occupancy_pct");
        k->l1_hit_pct = get_num(o, "l1_hit_pct");
        k->l2_hit_pct = get_num(o, "l2_hit_pct");
        k->bank_conflicts = get_num(o, "bank_conflicts");
        k->dram_bytes = get_num(o, "dram_bytes");
        k->regs = get_num(o, "regs");
        k->smem_bytes = get_num(o, "smem_bytes");
        k->grid = get_num(o, "grid");
        k->block = get_num(o, "block");
        k->ipc = k->cache_miss_pct = k->branch_miss_pct = -1;
        size_t j;
        json_t *v;
        json_array_foreach(json_object_get(o, "stalls"), j, v) {
            if (k->nstalls >= KF_MAX_STALLS) break;
            s = json_string_value(json_object_get(v, "reason"));
            snprintf(k->stall[k->nstalls].name, sizeof k->stall[0].name, "%s", s ? s : "");
            k->stall[k->nstalls++].pct = get_num(v, "pct");
        }
    }
    *out = c;
    return (int)n;
}

/* See agent_int.h. */
void kf_agent_counters_text(const kf_counters *c, int n, kf_buf *out) {
    for (int i = 0; i < n; i++) {
        const kf_counters *k = &c[i];
        kf_buf_printf(out, "- %s counters of launch %d (%s, grid %.0f x block %.0f, %.0f registers/thread):", k->source,
                      i + 1, k->kernel, k->grid, k->block, k->regs);
        if (k->duration_s >= 0) kf_buf_printf(out, " duration %.4g ms under the profiler;", k->duration_s * 1e3);
        if (k->dram_pct >= 0) kf_buf_printf(out, " DRAM throughput %.1f%% of peak;", k->dram_pct);
        if (k->sm_pct >= 0) kf_buf_printf(out, " SM throughput %.1f%%;", k->sm_pct);
        if (k->mem_pct >= 0) kf_buf_printf(out, " memory pipes %.1f%%;", k->mem_pct);
        if (k->achieved_occ_pct >= 0) kf_buf_printf(out, " achieved occupancy %.1f%%", k->achieved_occ_pct);
        if (k->theoretical_occ_pct >= 0) kf_buf_printf(out, " (theoretical %.1f%%);", k->theoretical_occ_pct);
        if (k->l1_hit_pct >= 0) kf_buf_printf(out, " L1 hit %.1f%%;", k->l1_hit_pct);
        if (k->l2_hit_pct >= 0) kf_buf_printf(out, " L2 hit %.1f%%;", k->l2_hit_pct);
        if (k->bank_conflicts >= 0) kf_buf_printf(out, " shared-memory bank conflicts %.0f;", k->bank_conflicts);
        if (k->nstalls > 0) {
            kf_buf_puts(out, " stalls:");
            for (int s = 0; s < k->nstalls; s++)
                kf_buf_printf(out, "%s %s %.0f%%", s ? "," : "", k->stall[s].name, k->stall[s].pct);
        }
        kf_buf_puts(out, "\n");
    }
}
