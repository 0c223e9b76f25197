/*
 * Diagnosis of a recorded run: the run record (run.json) of `kforge synth`, optionally with
 * Nsight Compute counters of the same candidates (ncu --csv --page raw, as
 * bench/ncu_capture.sh records them), through the same analysis agent the loop uses.
 *
 * Design note. run.json holds what the diagnosis needs but the launch plan: the roofline
 * (bytes, FLOPs), the device's ceilings and name (matched in the architecture database),
 * and per iteration its time, schedule label and resource report. The ncu rows give the
 * launch as the profiler saw it (block and grid size), which stands in for the plan.
 * Rows are assigned to the verified iterations in order, the same number to each
 * (ncu_capture profiles every timed launch of every candidate); when the count does not
 * divide evenly, the counters are not used and the output says why. The schedule's
 * parameters come from the label ("ts=256 wg=256 ..."), without their positions in the
 * space, so every direction is allowed.
 */
#include "agent/agent_int.h"
#include "kforge/agent.h"
#include "kforge/arch.h"
#include "kforge/perf.h"
#include "kforge/platform.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double num(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : 0;
}

/* The role of label parameter name: from the run record's "roles" ("vw:vector s1.wg:group
 * ..."), or, for records written before roles, from the names the templates used then
 * (the name without its stage prefix). */
static kf_role role_of(const char *roles, const char *name) {
    if (roles && roles[0]) {
        size_t n = strlen(name);
        for (const char *p = roles; (p = strstr(p, name)) != NULL; p += n)
            if ((p == roles || p[-1] == ' ') && p[n] == ':') {
                char r[32];
                if (sscanf(p + n + 1, "%31[^ ]", r) != 1) break;
                kf_role k = kf_role_lookup(r);
                return k == KF_ROLE_COUNT ? KF_ROLE_NONE : k;
            }
        return KF_ROLE_NONE;
    }
    static const struct { const char *name; kf_role role; } legacy[] = {
        {"threads", KF_ROLE_THREADS}, {"vw", KF_ROLE_VECTOR}, {"vl", KF_ROLE_VECTOR_LOADS},
        {"unroll", KF_ROLE_UNROLL}, {"block", KF_ROLE_BLOCK}, {"nt", KF_ROLE_STREAM}, {"wg", KF_ROLE_GROUP},
        {"ept", KF_ROLE_PER_ITEM}, {"split", KF_ROLE_SPLIT}, {"sg", KF_ROLE_SUBGROUP}, {"tm", KF_ROLE_TILE_M},
        {"tn", KF_ROLE_TILE_N}, {"tk", KF_ROLE_TILE_K}, {"rm", KF_ROLE_REG_M}, {"rn", KF_ROLE_REG_N},
        {"db", KF_ROLE_DOUBLE_BUFFER}, {"mk", KF_ROLE_MICRO_KERNEL}, {"kc", KF_ROLE_CACHE_K},
        {"naive", KF_ROLE_NAIVE},
    };
    const char *dot = strrchr(name, '.');
    const char *s = dot ? dot + 1 : name;
    for (size_t i = 0; i < sizeof legacy / sizeof legacy[0]; i++)
        if (strcmp(legacy[i].name, s) == 0) return legacy[i].role;
    return KF_ROLE_NONE;
}

/* "ts=256 wg=256 s1.wg=128" into params (positions unknown: nvalues 0), with the roles
 * the run recorded (role_of). */
static int label_params(const char *label, const char *roles, kf_diag_param *p, int cap) {
    int n = 0;
    const char *s = label;
    while (s && *s && n < cap) {
        while (*s == ' ') s++;
        char name[32];
        long v;
        int used = 0;
        if (sscanf(s, "%31[^= ]=%ld%n", name, &v, &used) == 2) {
            memset(&p[n], 0, sizeof p[n]);
            snprintf(p[n].name, sizeof p[n].name, "%s", name);
            p[n].value = v;
            p[n].role = role_of(roles, name);
            n++;
            s += used;
        } else {
            s = strchr(s, ' ');
        }
    }
    return n;
}

/* Whether ncu row c is a launch of the kernel whose resource report is res ("KERNEL
 * regs=R smem=S ..."; "; "-separated): same kernel name, registers and shared memory. */
static int row_matches(const kf_counters *c, const char *res) {
    for (const char *p = res; p && *p;) {
        while (*p == ' ' || *p == ';') p++;
        char kname[64];
        int regs;
        long smem;
        if (sscanf(p, "%63s regs=%d smem=%ld", kname, &regs, &smem) == 3 && strcmp(kname, c->kernel) == 0 &&
            regs == (int)c->regs && (c->smem_bytes < 0 || smem == (long)c->smem_bytes))
            return 1;
        p = strchr(p, ';');
    }
    return 0;
}

/* See agent.h. */
kf_status kf_analyze_run(const char *run_path, const char *ncu_path, FILE *out, int as_json,
                         kf_error *err) {
    json_error_t je;
    json_t *run = json_load_file(run_path, 0, &je);
    if (!run)
        return kf_error_set(err, KF_ERR_PARSE, run_path, je.line, je.column, "not a run record: %s", je.text);
    kf_status st = KF_OK;
    kf_counters *rows = NULL;
    int nrows = 0;
    kf_arch_db *db = NULL;
    json_t *outj = json_array();
    json_t *its = json_object_get(run, "iterations"), *roof = json_object_get(run, "roofline");
    json_t *dev = json_object_get(run, "device"), *ceil = json_object_get(dev, "ceilings");
    if (!json_is_array(its) || !json_is_object(roof) || !json_is_object(dev) || !json_is_object(ceil)) {
        st = kf_error_set(err, KF_ERR_PARSE, run_path, 0, 0,
                          "not a kforge run record (needs iterations, roofline, device.ceilings)");
        goto done;
    }
    if (ncu_path) {
        char *csv = NULL;
        size_t len = 0;
        if ((st = kf_read_file(ncu_path, &csv, &len, err)) != KF_OK) goto done;
        st = kf_perf_ncu_parse(csv, len, &rows, &nrows, err);
        free(csv);
        if (st != KF_OK) {
            if (err) snprintf(err->file, sizeof err->file, "%s", ncu_path);
            goto done;
        }
    }
    kf_roofline r;
    memset(&r, 0, sizeof r);
    r.bytes = num(roof, "bytes");
    r.flops = num(roof, "flops");
    r.floor_s = num(roof, "floor_ms") * 1e-3;
    r.bw_gbs = num(ceil, "copy_gbs");
    r.peak_gflops = num(ceil, "peak_gflops_f32");
    const char *platform = json_string_value(json_object_get(dev, "platform"));
    const char *name = json_string_value(json_object_get(dev, "name"));
    if (!platform) platform = "cpu";
    /* older records lack device_type: then only the platform tells */
    const char *dtype = json_string_value(json_object_get(dev, "device_type"));
    int gpu = kf_platform_device_is_gpu(platform, dtype);
    kf_error dbe = {0};
    const kf_arch_entry *arch = NULL;
    if (kf_arch_db_load(NULL, &db, &dbe) == KF_OK && name) arch = kf_arch_db_match(db, name, gpu ? KF_ARCH_GPU : KF_ARCH_CPU);
    int nok = 0;
    for (size_t i = 0; i < json_array_size(its); i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(its, i), "status")) ?: "", "ok")) nok++;
    /* owner[row] = index into its of the iteration the row belongs to, -1 none */
    int *owner = kf_calloc((size_t)(nrows > 0 ? nrows : 1), sizeof *owner);
    int unmatched = 0;
    size_t cur = 0;
    for (int q = 0; q < nrows; q++) {
        owner[q] = -1;
        for (size_t i = cur; i < json_array_size(its); i++) {
            json_t *it = json_array_get(its, i);
            if (strcmp(json_string_value(json_object_get(it, "status")) ?: "", "ok") != 0) continue;
            if (row_matches(&rows[q], json_string_value(json_object_get(it, "resources")))) {
                owner[q] = (int)i;
                cur = i;
                break;
            }
        }
        if (owner[q] < 0) unmatched++;
    }
    int recorded = 0; /* iterations with the run's own counters (--counters ncu) */
    for (size_t i = 0; i < json_array_size(its); i++)
        recorded += json_array_size(json_object_get(json_array_get(its, i), "counters")) > 0;
    char note[200] = "";
    if (!ncu_path && !recorded) snprintf(note, sizeof note, "no counters given (--ncu FILE.csv) nor recorded by the run (--counters ncu)");
    if (!as_json) {
        fprintf(out, "run %s: %s on %s (%s)\n", run_path, json_string_value(json_object_get(run, "task")) ?: "?",
                name ? name : "?", arch ? arch->name : "no architecture entry");
        if (note[0]) fprintf(out, "counters: %s\n", note);
        else if (!ncu_path) fprintf(out, "counters: recorded by the run for %d of %d verified iterations\n", recorded, nok);
        else fprintf(out, "counters: %d ncu rows, %d matched to no iteration's resource report\n", nrows, unmatched);
    }
    const char *in_note = NULL;
    for (size_t i = 0; i < json_array_size(its); i++) {
        json_t *it = json_array_get(its, i);
        const char *status = json_string_value(json_object_get(it, "status"));
        if (!status || strcmp(status, "ok") != 0) continue;
        const char *label = json_string_value(json_object_get(it, "candidate")) ?: "";
        kf_perf_point p;
        kf_perf_place(&r, num(it, "time_ms") * 1e-3, &p);
        kf_diag_param params[KF_MAX_DIAG_LABEL_PARAMS];
        int np = label_params(label, json_string_value(json_object_get(run, "roles")), params,
                              KF_MAX_DIAG_LABEL_PARAMS);
        /* this iteration's rows: consecutive, as assigned above */
        int first = -1, cnt = 0;
        for (int q = 0; q < nrows; q++)
            if (owner[q] == (int)i) {
                if (first < 0) first = q;
                cnt++;
            }
        const kf_counters *c = first >= 0 ? &rows[first] : NULL;
        /* without --ncu, the counters the run collected itself (kforge synth --counters ncu) */
        kf_counters *own = NULL;
        if (!ncu_path && (cnt = kf_agent_counters_parse(json_object_get(it, "counters"), &own)) > 0) c = own;
        char inote[240];
        if (!c && ncu_path) {
            snprintf(inote, sizeof inote, "no ncu row matches this candidate's resource report");
            in_note = inote;
        } else {
            in_note = note[0] ? note : NULL;
        }
        kf_launch_plan plan;
        memset(&plan, 0, sizeof plan);
        if (c && c->block > 0 && c->grid > 0) {
            plan.nlaunches = 1;
            snprintf(plan.l[0].kernel, sizeof plan.l[0].kernel, "%s", c->kernel);
            plan.l[0].ndims = 1;
            plan.l[0].local[0] = (int64_t)c->block;
            plan.l[0].global[0] = (int64_t)(c->block * c->grid);
        }
        kf_diag_input in = {.platform = platform, .gpu = gpu, .roof = &r, .perf = &p, .arch = arch,
                            .resources = json_string_value(json_object_get(it, "resources")) ?: "",
                            .plan = plan.nlaunches ? &plan : NULL, .params = params, .nparams = np,
                            .counters = c, .ncounters = cnt, .counters_note = in_note,
                            .launch_s = num(ceil, "launch_us") * 1e-6, .units = arch ? arch->units : 0,
                            .cpu_threads = (int)num(dev, "threads")};
        kf_diagnosis d;
        kf_perf_diagnose(&in, &d);
        if (as_json) {
            json_t *ev = json_array(), *rs = json_array();
            for (int e = 0; e < d.nevidence; e++) json_array_append_new(ev, json_string(d.evidence[e]));
            for (int e = 0; e < d.nrecs; e++)
                json_array_append_new(rs, json_pack("{s:s, s:s, s:i, s:f, s:s}", "param", d.rec[e].param, "role",
                                                    kf_role_name(d.rec[e].role), "dir", d.rec[e].dir, "score",
                                                    d.rec[e].score, "why", d.rec[e].why));
            json_array_append_new(outj, json_pack("{s:I, s:s, s:f, s:s, s:f, s:o, s:o, s:o, s:o}", "iter",
                                                  (json_int_t)num(it, "iter"), "candidate", label, "time_ms",
                                                  num(it, "time_ms"), "bound", d.bound, "achieved", d.achieved,
                                                  "occupancy", d.occupancy >= 0 ? json_real(d.occupancy) : json_null(),
                                                  "achieved_occupancy",
                                                  d.achieved_occupancy >= 0 ? json_real(d.achieved_occupancy) : json_null(),
                                                  "evidence", ev, "recommendations", rs));
        } else {
            char line[700];
            kf_perf_diagnosis_line(&d, line, sizeof line);
            fprintf(out, "\niter %d  %s  %.4f ms\n  %s\n", (int)num(it, "iter"), label, num(it, "time_ms"), line);
            for (int e = 0; e < d.nevidence; e++) fprintf(out, "  - %s\n", d.evidence[e]);
        }
        free(own);
    }
    if (as_json) {
        char *text = json_dumps(outj, JSON_INDENT(2));
        fprintf(out, "%s\n", text);
        free(text);
    }
    free(owner);
done:
    json_decref(outj);
    json_decref(run);
    free(rows);
    kf_arch_db_free(db);
    return st;
}
