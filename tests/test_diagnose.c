/*
 * The performance analysis agent's parts: Nsight Compute CSV ingestion on real captures
 * (tests/data/ncu: `bench/ncu_capture.sh` on the H200, 2026-12-03, kforge's own softmax,
 * matmul, swish, layer_norm and sum_rows kernels at GPU sizes), the occupancy calculator
 * checked against the theoretical occupancy ncu reported for the same launches, and the
 * diagnosis rules on recorded and synthetic inputs.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/agent.h"
#include "kforge/arch.h"
#include "agent/agent_int.h"
#include "kforge/perf.h"

static const char *TASKS[] = {"softmax", "matmul", "swish", "layer_norm", "sum_rows"};
#define NTASKS (int)(sizeof TASKS / sizeof TASKS[0])

static char *slurp(const char *name, const char *ext, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/ncu/%s.%s", KF_SOURCE_DIR, name, ext);
    char *text = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_read_file(path, &text, len, &err), KF_OK, "%s", err.msg);
    return text;
}

static kf_counters *parse(const char *name, int *n) {
    size_t len;
    char *csv = slurp(name, "csv", &len);
    kf_counters *rows = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_perf_ncu_parse(csv, len, &rows, n, &err), KF_OK, "%s: %s", name, err.msg);
    free(csv);
    return rows;
}

static kf_arch_db *db;
static const kf_arch_entry *h200;
static void load_db(void) {
    kf_error err = {0};
    cr_assert_eq(kf_arch_db_load(NULL, &db, &err), KF_OK, "%s", err.msg);
    h200 = kf_arch_db_match(db, "NVIDIA H200", KF_ARCH_GPU);
    cr_assert_not_null(h200);
}
static void free_db(void) { kf_arch_db_free(db); }

TestSuite(ncu, .init = load_db, .fini = free_db);

Test(ncu, recorded_captures_parse) {
    for (int t = 0; t < NTASKS; t++) {
        int n = 0;
        kf_counters *rows = parse(TASKS[t], &n);
        /* ncu_capture's --launch-count 6: the first six launches, all of the first
         * candidate (one per input set, then its timing runs) */
        cr_assert_eq(n, 6, "%s: %d rows", TASKS[t], n);
        for (int i = 0; i < n; i++) {
            const kf_counters *c = &rows[i];
            cr_assert_str_eq(c->kernel, "kf_s0", "%s row %d", TASKS[t], i);
            cr_assert_str_eq(c->source, "ncu");
            cr_assert(c->duration_s > 1e-6 && c->duration_s < 0.1, "%s: duration %g s", TASKS[t], c->duration_s);
            cr_assert(c->dram_pct > 0 && c->dram_pct <= 100, "%s: dram %g%%", TASKS[t], c->dram_pct);
            cr_assert(c->sm_pct > 0 && c->sm_pct <= 100);
            cr_assert(c->achieved_occ_pct > 0 && c->achieved_occ_pct <= c->theoretical_occ_pct + 1e-9,
                      "%s: achieved %g%% > theoretical %g%%", TASKS[t], c->achieved_occ_pct,
                      c->theoretical_occ_pct);
            cr_assert(c->regs >= 8 && c->block >= 32 && c->grid >= 1);
            cr_assert(c->dram_bytes > 1e6, "%s: DRAM bytes %g", TASKS[t], c->dram_bytes);
            cr_assert_gt(c->nstalls, 0, "%s: no stall reasons", TASKS[t]);
            double sum = 0;
            for (int k = 0; k < c->nstalls; k++) {
                sum += c->stall[k].pct;
                if (k) cr_assert_geq(c->stall[k - 1].pct, c->stall[k].pct, "stalls not sorted");
                cr_assert(!strstr(c->stall[k].name, "not_issued"));
            }
            cr_assert_leq(sum, 100.0 + 1e-6);
        }
        free(rows);
    }
}

Test(ncu, values_and_units_of_one_row) {
    /* softmax row 1 as ncu wrote it: "129,760" ns, 48 registers, grid 8,192 x 256, 1,024 B
     * static shared memory, gpu__dram_throughput 81.81 %, achieved occupancy 59.48 % */
    int n = 0;
    kf_counters *rows = parse("softmax", &n);
    const kf_counters *c = &rows[0];
    cr_assert_float_eq(c->duration_s, 129760e-9, 1e-12);
    cr_assert_float_eq(c->dram_pct, 81.81, 1e-9);
    cr_assert_float_eq(c->achieved_occ_pct, 59.48, 1e-9);
    cr_assert_float_eq(c->theoretical_occ_pct, 62.50, 1e-9);
    cr_assert_float_eq(c->regs, 48, 0);
    cr_assert_float_eq(c->grid, 8192, 0);
    cr_assert_float_eq(c->block, 256, 0);
    cr_assert_float_eq(c->smem_bytes, 1024, 0);
    cr_assert_float_eq(c->dram_bytes, 268460032.0 + 242269440.0, 0.5);
    /* ld 11,811 plus st conflicts */
    cr_assert_geq(c->bank_conflicts, 11811, "bank conflicts %g", c->bank_conflicts);
    free(rows);
}

/* The occupancy calculator against what ncu computed for the same launches. */
Test(ncu, occupancy_matches_ncu_theoretical) {
    for (int t = 0; t < NTASKS; t++) {
        int n = 0;
        kf_counters *rows = parse(TASKS[t], &n);
        for (int i = 0; i < n; i++) {
            const kf_counters *c = &rows[i];
            kf_occupancy occ;
            kf_error err = {0};
            cr_assert_eq(kf_perf_occupancy(h200, (int)c->block, (int)c->regs, (long)c->smem_bytes, &occ, &err),
                         KF_OK, "%s", err.msg);
            cr_assert_float_eq(100 * occ.theoretical, c->theoretical_occ_pct, 0.01,
                               "%s row %d: %d threads x %d regs, %g B: kforge %.2f%%, ncu %.2f%% (limit %s)",
                               TASKS[t], i, (int)c->block, (int)c->regs, c->smem_bytes,
                               100 * occ.theoretical, c->theoretical_occ_pct, occ.limiter);
        }
        free(rows);
    }
}

Test(ncu, occupancy_limits) {
    kf_occupancy o;
    kf_error err = {0};
    /* 256 threads x 48 regs: 1536 regs per warp, 42 warps fit, 5 groups of 8 warps */
    cr_assert_eq(kf_perf_occupancy(h200, 256, 48, 1024, &o, &err), KF_OK);
    cr_assert_eq(o.groups_per_unit, 5);
    cr_assert_str_eq(o.limiter, "registers");
    /* 64 threads x 16 regs: 32 groups per SM, the group limit */
    cr_assert_eq(kf_perf_occupancy(h200, 64, 16, 0, &o, &err), KF_OK);
    cr_assert_eq(o.groups_per_unit, 32);
    cr_assert_str_eq(o.limiter, "groups");
    cr_assert_float_eq(o.theoretical, 1.0, 1e-12);
    /* shared memory: 100 KiB per group leaves 2 */
    cr_assert_eq(kf_perf_occupancy(h200, 128, 32, 100 * 1024, &o, &err), KF_OK);
    cr_assert_eq(o.groups_per_unit, 2);
    cr_assert_str_eq(o.limiter, "shared memory");
    /* impossible groups are errors that say why */
    cr_assert_eq(kf_perf_occupancy(h200, 2048, 32, 0, &o, &err), KF_ERR_ARG);
    cr_assert(strstr(err.msg, "2048 threads"), "%s", err.msg);
    cr_assert_eq(kf_perf_occupancy(h200, 128, 300, 0, &o, &err), KF_ERR_ARG);
    cr_assert_eq(kf_perf_occupancy(h200, 128, 32, 300000, &o, &err), KF_ERR_ARG);
    const kf_arch_entry *cpu = kf_arch_db_find(db, "generic-x86-64");
    cr_assert_not_null(cpu);
    cr_assert_eq(kf_perf_occupancy(cpu, 128, 32, 0, &o, &err), KF_ERR_ARG);
    cr_assert(strstr(err.msg, "lacks the unit limits"), "%s", err.msg);
}

Test(ncu, malformed_tables_are_errors) {
    kf_counters *rows = NULL;
    int n = 0;
    kf_error err = {0};
    const char *none = "==PROF== nothing profiled\n";
    cr_assert_eq(kf_perf_ncu_parse(none, strlen(none), &rows, &n, &err), KF_ERR_PARSE);
    cr_assert(strstr(err.msg, "no table"), "%s", err.msg);
    const char *nohdr = "\"a\",\"b\"\n\"\",\"\"\n\"1\",\"2\"\n";
    cr_assert_eq(kf_perf_ncu_parse(nohdr, strlen(nohdr), &rows, &n, &err), KF_ERR_PARSE);
    cr_assert(strstr(err.msg, "Kernel Name"), "%s", err.msg);
    const char *ragged = "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n\"\",\"\",\"ns\"\n"
                         "\"0\",\"kf_s0\",\"1,000\"\n\"1\",\"kf_s0\"\n";
    cr_assert_eq(kf_perf_ncu_parse(ragged, strlen(ragged), &rows, &n, &err), KF_ERR_PARSE);
    cr_assert_eq(err.line, 4, "line %d: %s", err.line, err.msg);
    cr_assert_null(rows);
    /* a minimal good table: units convert, missing metrics stay < 0 */
    const char *ok = "==PROF== Connected\n\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n"
                     "\"\",\"\",\"us\"\n\"0\",\"kf_s1(float*)\",\"2.5\"\n";
    cr_assert_eq(kf_perf_ncu_parse(ok, strlen(ok), &rows, &n, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(rows[0].kernel, "kf_s1");
    cr_assert_float_eq(rows[0].duration_s, 2.5e-6, 1e-15);
    cr_assert_lt(rows[0].dram_pct, 0);
    cr_assert_eq(rows[0].nstalls, 0);
    free(rows);
}

/* ---- diagnosis ---- */

static int has_rec(const kf_diagnosis *d, const char *param, int dir) {
    for (int i = 0; i < d->nrecs; i++)
        if (!strcmp(d->rec[i].param, param) && d->rec[i].dir == dir) return 1;
    return 0;
}

static int has_avoid(const kf_diagnosis *d, const char *param, int dir) {
    for (int i = 0; i < d->navoid; i++)
        if (!strcmp(d->avoid[i].param, param) && d->avoid[i].dir == dir) return 1;
    return 0;
}

static int has_evidence(const kf_diagnosis *d, const char *phrase) {
    for (int i = 0; i < d->nevidence; i++)
        if (strstr(d->evidence[i], phrase)) return 1;
    return 0;
}

/* A recorded H200 softmax candidate: its run record (roofline, resources, time) and its ncu rows. */
Test(diagnose, recorded_softmax_on_the_h200, .init = load_db, .fini = free_db) {
    size_t len;
    char *text = slurp("softmax", "run.json", &len);
    json_error_t je;
    json_t *run = json_loads(text, 0, &je);
    cr_assert_not_null(run, "%s", je.text);
    free(text);
    json_t *it = json_array_get(json_object_get(run, "iterations"), 0);
    json_t *roof = json_object_get(run, "roofline");
    json_t *ceil = json_object_get(json_object_get(run, "device"), "ceilings");
    kf_roofline r;
    memset(&r, 0, sizeof r);
    r.bytes = json_number_value(json_object_get(roof, "bytes"));
    r.flops = json_number_value(json_object_get(roof, "flops"));
    r.bw_gbs = json_number_value(json_object_get(ceil, "copy_gbs"));
    r.peak_gflops = json_number_value(json_object_get(ceil, "peak_gflops_f32"));
    r.floor_s = json_number_value(json_object_get(roof, "floor_ms")) * 1e-3;
    kf_perf_point p;
    kf_perf_place(&r, json_number_value(json_object_get(it, "time_ms")) * 1e-3, &p);
    /* the launch the kernel declares: 8192 groups of 256 */
    kf_launch_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.nlaunches = 1;
    snprintf(plan.l[0].kernel, sizeof plan.l[0].kernel, "kf_s0");
    plan.l[0].ndims = 1;
    plan.l[0].global[0] = 8192 * 256;
    plan.l[0].local[0] = 256;
    kf_diag_param params[] = {{"s0.ts", 256, 0, 3, KF_ROLE_NONE}, {"s0.wg", 256, 2, 4, KF_ROLE_GROUP}, {"s0.sg", 1, 1, 2, KF_ROLE_SUBGROUP},
                              {"s0.rc", 1, 0, 2, KF_ROLE_NONE}, {"s0.split", 1, 0, 3, KF_ROLE_SPLIT}};
    int n = 0;
    kf_counters *rows = parse("softmax", &n);
    kf_diag_input in = {.platform = "cuda", .gpu = 1, .roof = &r, .perf = &p, .arch = h200,
                        .resources = json_string_value(json_object_get(it, "resources")),
                        .plan = &plan, .params = params, .nparams = 5, .counters = rows,
                        .ncounters = 2, .launch_s = 0, .units = 132};
    kf_diagnosis d;
    kf_perf_diagnose(&in, &d);
    cr_assert_float_eq(d.occupancy, 0.625, 1e-9, "occupancy %g", d.occupancy);
    cr_assert_str_eq(d.occ_limit, "registers");
    cr_assert_float_eq(d.achieved_occupancy, 0.5949, 0.001, "achieved %g", d.achieved_occupancy);
    cr_assert(has_evidence(&d, "stalls:"), "no stall evidence");
    cr_assert(has_evidence(&d, "DRAM 82%"), "no DRAM evidence");
    cr_assert(has_evidence(&d, "launch overhead not measured"));
    cr_assert_gt(d.nrecs, 0);
    for (int i = 0; i < d.nrecs; i++) {
        /* only the kernel's own parameters, in a direction their lists allow */
        int found = 0;
        for (int k = 0; k < 5; k++) {
            const char *dot = strrchr(params[k].name, '.');
            if (!strcmp(dot + 1, d.rec[i].param)) {
                found = 1;
                int v = params[k].idx + d.rec[i].dir;
                cr_assert(v >= 0 && v < params[k].nvalues, "%s%+d out of range", d.rec[i].param, d.rec[i].dir);
            }
        }
        cr_assert(found, "recommendation for a parameter the kernel lacks: %s", d.rec[i].param);
        if (i) cr_assert_geq(d.rec[i - 1].score, d.rec[i].score, "not ranked");
    }
    char line[600];
    kf_perf_diagnosis_line(&d, line, sizeof line);
    cr_assert(strstr(line, "occupancy 62%"), "%s", line);
    free(rows);
    json_decref(run);
}

static kf_roofline roof_mem(double bytes, double bw) {
    kf_roofline r;
    memset(&r, 0, sizeof r);
    r.bytes = bytes;
    r.bw_gbs = bw;
    r.peak_gflops = 1000;
    r.floor_s = bytes / (bw * 1e9);
    r.bound = "memory";
    return r;
}

Test(diagnose, classification) {
    kf_roofline r = roof_mem(1e9, 1000); /* floor 1 ms */
    kf_perf_point p;
    kf_diag_param params[] = {{"s0.vw", 4, 1, 4, KF_ROLE_VECTOR}, {"s0.threads", 1, 0, 2, KF_ROLE_THREADS}};
    kf_diag_input in = {.platform = "cpu", .roof = &r, .perf = &p, .params = params, .nparams = 2,
                        .cpu_threads = 2};
    kf_diagnosis d;
    kf_perf_place(&r, 1.1e-3, &p);
    kf_perf_diagnose(&in, &d);
    cr_assert_str_eq(d.bound, "memory");
    cr_assert_float_eq(d.achieved, 1 / 1.1, 1e-9);
    cr_assert(has_rec(&d, "threads", +1), "one of two threads in use: threads+ expected");
    kf_perf_place(&r, 5e-3, &p); /* 20% of the bandwidth, nothing else busy */
    kf_perf_diagnose(&in, &d);
    cr_assert_str_eq(d.bound, "latency");
    cr_assert(has_rec(&d, "vw", +1));
    /* the same kernel, 3 launches of 40 us overhead in a 0.2 ms run: launch-bound */
    kf_roofline small = roof_mem(1e5, 1000);
    kf_launch_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.nlaunches = 3;
    in.plan = &plan;
    in.launch_s = 40e-6;
    kf_diag_param two[] = {{"s0.vw", 4, 1, 4, KF_ROLE_VECTOR}, {"s0.threads", 2, 1, 2, KF_ROLE_THREADS}};
    in.params = two;
    in.roof = &small;
    kf_perf_place(&small, 0.2e-3, &p);
    kf_perf_diagnose(&in, &d);
    cr_assert_str_eq(d.bound, "launch");
    cr_assert(has_evidence(&d, "3 launches"), "%s", d.evidence[0]);
    cr_assert(has_rec(&d, "threads", -1));
    /* compute */
    kf_roofline rc = roof_mem(1e6, 1000);
    rc.flops = 1e9;
    kf_perf_place(&rc, 1.5e-3, &p); /* 667 of 1000 GFLOP/s */
    in.roof = &rc;
    in.plan = NULL;
    in.launch_s = 0;
    kf_perf_diagnose(&in, &d);
    cr_assert_str_eq(d.bound, "compute");
    /* no timing: says so */
    p.time_s = 0;
    kf_perf_diagnose(&in, &d);
    cr_assert_str_eq(d.bound, "unknown");
}

Test(diagnose, gpu_grid_registers_and_ends_of_lists, .init = load_db, .fini = free_db) {
    kf_roofline r = roof_mem(1e8, 4000);
    kf_perf_point p;
    kf_perf_place(&r, 0.1e-3, &p); /* 25%: latency */
    kf_launch_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.nlaunches = 1;
    snprintf(plan.l[0].kernel, sizeof plan.l[0].kernel, "kf_s0");
    plan.l[0].ndims = 1;
    plan.l[0].global[0] = 64 * 256; /* 64 groups for 132 SMs */
    plan.l[0].local[0] = 256;
    kf_diag_param params[] = {{"s0.split", 1, 0, 3, KF_ROLE_SPLIT}, {"s0.wg", 256, 2, 4, KF_ROLE_GROUP}, {"s0.vw", 4, 2, 3, KF_ROLE_VECTOR},
                              {"s0.rm", 8, 2, 3, KF_ROLE_REG_M}};
    kf_diag_input in = {.platform = "cuda", .gpu = 1, .roof = &r, .perf = &p, .arch = h200,
                        .resources = "kf_s0 regs=200 smem=0 local=64 max_threads=256", .plan = &plan,
                        .params = params, .nparams = 4, .units = 132};
    kf_diagnosis d;
    kf_perf_diagnose(&in, &d);
    cr_assert_str_eq(d.bound, "latency");
    cr_assert(has_evidence(&d, "grid of 64 groups for 132 SMs"));
    cr_assert(has_evidence(&d, "64 B of local memory"));
    cr_assert(has_rec(&d, "split", +1));
    cr_assert(has_rec(&d, "wg", -1));
    cr_assert(has_rec(&d, "rm", -1), "spills and register-limited occupancy: rm- expected");
    /* latency-bound wants rm+ (blocked: rm is at its last value), the spills want rm-: asked
     * for by one rule, so not against the diagnosis */
    cr_assert(!has_avoid(&d, "rm", -1));
    cr_assert_str_eq(d.occ_limit, "registers");
    /* vw is at the end of its list: never recommended upwards */
    cr_assert(!has_rec(&d, "vw", +1));
    cr_assert_str_eq(d.rec[0].param, "split", "top move %s", d.rec[0].param);
}

/* Moves against the diagnosis: the reverse of what a rule asks for, also where the list
 * stops the asked direction; never a move some rule asks for. */
Test(diagnose, moves_against_the_diagnosis) {
    kf_roofline r = roof_mem(1e9, 1000);
    kf_perf_point p;
    kf_perf_place(&r, 5e-3, &p); /* 20 %: latency-bound, wants wider vectors and unrolling */
    /* vw at the widest (idx 1 of 2), all 2 threads in use, unroll at its first value */
    kf_diag_param params[] = {{"vw", 8, 1, 2, KF_ROLE_VECTOR}, {"s0.threads", 2, 1, 2, KF_ROLE_THREADS}, {"s0.unroll", 1, 0, 3, KF_ROLE_UNROLL},
                              {"s0.block", 32768, 2, 4, KF_ROLE_BLOCK}};
    kf_diag_input in = {.platform = "cpu", .roof = &r, .perf = &p, .params = params, .nparams = 4,
                        .cpu_threads = 2};
    kf_diagnosis d;
    kf_perf_diagnose(&in, &d);
    cr_assert_str_eq(d.bound, "latency");
    cr_assert(!has_rec(&d, "vw", +1), "vw is at the end of its list");
    cr_assert(has_avoid(&d, "vw", -1), "wider vectors wanted at the widest: narrower is against it");
    cr_assert(has_avoid(&d, "threads", -1), "every hardware thread busy: fewer is against it");
    cr_assert(has_rec(&d, "unroll", +1));
    cr_assert(has_avoid(&d, "unroll", -1));
    cr_assert(!has_avoid(&d, "threads", +1) && !has_avoid(&d, "vw", +1));
    /* one thread of two: threads+ is asked for, so threads- is against it, threads+ is not */
    params[1].value = 1;
    params[1].idx = 0;
    kf_perf_diagnose(&in, &d);
    cr_assert(has_rec(&d, "threads", +1));
    cr_assert(has_avoid(&d, "threads", -1));
    /* launch-bound: fewer threads is asked for, so it is not against the diagnosis */
    kf_roofline small = roof_mem(1e5, 1000);
    kf_launch_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.nlaunches = 1;
    in.plan = &plan;
    in.launch_s = 100e-6;
    in.roof = &small;
    params[1].value = 2;
    params[1].idx = 1;
    kf_perf_place(&small, 0.2e-3, &p);
    kf_perf_diagnose(&in, &d);
    cr_assert_str_eq(d.bound, "launch");
    cr_assert(has_rec(&d, "threads", -1));
    cr_assert(!has_avoid(&d, "threads", -1));
    /* compute-bound matmul: the plain loop (naive=1) is against it */
    kf_roofline rc = roof_mem(1e6, 1000);
    rc.flops = 1e9;
    kf_perf_place(&rc, 1.5e-3, &p);
    kf_diag_param mm[] = {{"s0.naive", 0, 0, 2, KF_ROLE_NAIVE}, {"s0.mk", 616, 3, 5, KF_ROLE_MICRO_KERNEL}, {"vw", 8, 1, 2, KF_ROLE_VECTOR}};
    kf_diag_input im = {.platform = "cpu", .roof = &rc, .perf = &p, .params = mm, .nparams = 3,
                        .cpu_threads = 2};
    kf_perf_diagnose(&im, &d);
    cr_assert_str_eq(d.bound, "compute");
    cr_assert(has_avoid(&d, "naive", +1));
    cr_assert(has_rec(&d, "mk", +1), "larger micro-kernel");
    cr_assert(has_avoid(&d, "mk", -1));
    /* the invariant: nothing is both asked for and against */
    for (int i = 0; i < d.navoid; i++)
        cr_assert(!has_rec(&d, d.avoid[i].param, d.avoid[i].dir), "%s %+d both", d.avoid[i].param,
                  d.avoid[i].dir);
}

/* perf_event_open counters of a command: numbers where the machine allows it, else the
 * reason (this development VM exposes no PMU; the H200 machine has no perf either). */
Test(cpu_counters, counts_or_says_why) {
    char *argv[] = {"/bin/true", NULL};
    kf_counters c;
    kf_error err = {0};
    kf_status st = kf_perf_cpu_counters(argv, &c, &err);
    if (st == KF_OK) {
        cr_assert_gt(c.ipc, 0);
        cr_assert_str_eq(c.source, "perf");
        char *fail[] = {"/bin/false", NULL};
        cr_assert_eq(kf_perf_cpu_counters(fail, &c, &err), KF_ERR_RUNTIME);
    } else {
        cr_assert_eq(st, KF_ERR_UNSUPPORTED, "%s", err.msg);
        cr_assert(strstr(err.msg, "perf_event_open"), "%s", err.msg);
        fprintf(stderr, "cpu counters here: %s\n", err.msg);
    }
    char *none[] = {NULL};
    cr_assert_eq(kf_perf_cpu_counters(none, &c, &err), KF_ERR_ARG);
}

/* kforge analyze: the recorded runs with their ncu rows. Every row carries the first
 * candidate's registers, so all six go to iteration 1, and the others say they have none. */
Test(analyze, recorded_run_with_ncu_rows) {
    char run[512], csv[512];
    snprintf(run, sizeof run, "%s/tests/data/ncu/swish.run.json", KF_SOURCE_DIR);
    snprintf(csv, sizeof csv, "%s/tests/data/ncu/swish.csv", KF_SOURCE_DIR);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    kf_error err = {0};
    cr_assert_eq(kf_analyze_run(run, csv, f, 1, &err), KF_OK, "%s", err.msg);
    fclose(f);
    json_error_t je;
    json_t *a = json_loads(buf, 0, &je);
    cr_assert_not_null(a, "%s: %s", je.text, buf);
    cr_assert_eq(json_array_size(a), 3);
    json_t *d0 = json_array_get(a, 0), *d1 = json_array_get(a, 1);
    cr_assert_float_eq(json_real_value(json_object_get(d0, "occupancy")), 1.0, 1e-9);
    cr_assert(json_is_real(json_object_get(d0, "achieved_occupancy")), "iteration 1 has its ncu rows");
    char *t0 = json_dumps(json_object_get(d0, "evidence"), 0), *t1 = json_dumps(json_object_get(d1, "evidence"), 0);
    cr_assert(strstr(t0, "stalls: long_scoreboard"), "%s", t0);
    cr_assert(strstr(t1, "no ncu row matches"), "%s", t1);
    cr_assert(json_is_null(json_object_get(d1, "achieved_occupancy")));
    free(t0);
    free(t1);
    json_decref(a);
    free(buf);
    /* the readable form, and bad files named */
    f = open_memstream(&buf, &len);
    cr_assert_eq(kf_analyze_run(run, NULL, f, 0, &err), KF_OK, "%s", err.msg);
    fclose(f);
    cr_assert(strstr(buf, "counters: no counters given"), "%s", buf);
    cr_assert(strstr(buf, "iter 3"), "%s", buf);
    free(buf);
    f = open_memstream(&buf, &len);
    cr_assert_eq(kf_analyze_run(csv, NULL, f, 0, &err), KF_ERR_PARSE);
    cr_assert_str_eq(err.file, csv);
    cr_assert_eq(kf_analyze_run(run, run, f, 0, &err), KF_ERR_PARSE);
    cr_assert(strstr(err.msg, "ncu CSV"), "%s", err.msg);
    fclose(f);
    free(buf);
}

/* kforge analyze without --ncu reads the counters the run recorded itself (kforge synth
 * --counters ncu writes them into each iteration): here the real H200 rows of swish.csv,
 * put into iteration 1 of its run record as the loop writes them. */
Test(analyze, counters_recorded_by_the_run) {
    char run[512], csv[512], mod[512];
    snprintf(run, sizeof run, "%s/tests/data/ncu/swish.run.json", KF_SOURCE_DIR);
    snprintf(csv, sizeof csv, "%s/tests/data/ncu/swish.csv", KF_SOURCE_DIR);
    snprintf(mod, sizeof mod, "%s/test-work/analyze-recorded.run.json", KF_BUILD_DIR);
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(KF_BUILD_DIR "/test-work", &err), KF_OK, "%s", err.msg);
    char *text = NULL;
    size_t n = 0;
    cr_assert_eq(kf_read_file(csv, &text, &n, &err), KF_OK, "%s", err.msg);
    kf_counters *rows = NULL;
    int nrows = 0;
    cr_assert_eq(kf_perf_ncu_parse(text, n, &rows, &nrows, &err), KF_OK, "%s", err.msg);
    free(text);
    json_t *rec = json_load_file(run, 0, NULL);
    cr_assert_not_null(rec);
    json_t *it0 = json_array_get(json_object_get(rec, "iterations"), 0);
    json_object_set_new(it0, "counters", kf_agent_counters_json(rows, 1));
    cr_assert_eq(json_dump_file(rec, mod, 0), 0);
    json_decref(rec);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(kf_analyze_run(mod, NULL, f, 1, &err), KF_OK, "%s", err.msg);
    fclose(f);
    json_t *a = json_loads(buf, 0, NULL);
    cr_assert_not_null(a, "%s", buf);
    json_t *d0 = json_array_get(a, 0), *d1 = json_array_get(a, 1);
    cr_assert_float_eq(json_real_value(json_object_get(d0, "achieved_occupancy")), rows[0].achieved_occ_pct / 100,
                       1e-9);
    char *t0 = json_dumps(json_object_get(d0, "evidence"), 0);
    cr_assert(strstr(t0, "stalls: long_scoreboard"), "%s", t0);
    free(t0);
    cr_assert(json_is_null(json_object_get(d1, "achieved_occupancy")), "iteration 2 recorded no counters");
    json_decref(a);
    free(buf);
    f = open_memstream(&buf, &len);
    cr_assert_eq(kf_analyze_run(mod, NULL, f, 0, &err), KF_OK, "%s", err.msg);
    fclose(f);
    cr_assert(strstr(buf, "counters: recorded by the run for 1 of 3 verified iterations"), "%s", buf);
    free(buf);
    free(rows);
}

/* The rules ask for roles: a kernel whose threads parameter is called "workers" and whose
 * vector width is "lanes" gets threads+ and vector moves under its own names, and a
 * parameter called "vw" without the vector role gets none. */
Test(diagnose, rules_ask_for_roles_not_names) {
    kf_roofline r = roof_mem(1e9, 1000);
    kf_perf_point p;
    kf_diag_param params[] = {{"s0.workers", 1, 0, 2, KF_ROLE_THREADS}, {"s0.lanes", 4, 1, 4, KF_ROLE_VECTOR},
                              {"s0.vw", 4, 1, 4, KF_ROLE_NONE}};
    kf_diag_input in = {.platform = "cpu", .roof = &r, .perf = &p, .params = params, .nparams = 3,
                        .cpu_threads = 2};
    kf_diagnosis d;
    kf_perf_place(&r, 5e-3, &p); /* latency-bound, one of two threads */
    kf_perf_diagnose(&in, &d);
    cr_assert(has_rec(&d, "workers", +1), "threads+ under the kernel's own name expected");
    cr_assert(has_rec(&d, "lanes", +1), "vector+ under the kernel's own name expected");
    for (int i = 0; i < d.nrecs; i++) {
        cr_assert_str_neq(d.rec[i].param, "vw", "a parameter without a role was moved: %s", d.rec[i].why);
        cr_assert_neq(d.rec[i].role, KF_ROLE_NONE);
    }
}

/* kforge analyze reads each parameter's role from the record ("roles", written since
 * roles exist); a record without them falls back to the names the templates used before.
 * The same swish run with its parameters recorded as having no role gets no move. */
Test(analyze, roles_come_from_the_record) {
    char run[512];
    snprintf(run, sizeof run, "%s/tests/data/ncu/swish.run.json", KF_SOURCE_DIR);
    json_error_t je;
    json_t *r = json_load_file(run, 0, &je);
    cr_assert_not_null(r, "%s", je.text);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) json_object_set_new(r, "roles", json_string("vw:none wg:none ept:none gs:none"));
        char path[] = "/tmp/kf-roles-XXXXXX";
        int fd = mkstemp(path);
        cr_assert(fd >= 0);
        close(fd);
        cr_assert_eq(json_dump_file(r, path, 0), 0);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        kf_error err = {0};
        cr_assert_eq(kf_analyze_run(path, NULL, f, 1, &err), KF_OK, "%s", err.msg);
        fclose(f);
        unlink(path);
        json_t *a = json_loads(buf, 0, &je);
        cr_assert_not_null(a, "%s", je.text);
        json_t *recs = json_object_get(json_array_get(a, 0), "recommendations");
        if (pass == 0) {
            cr_assert_gt(json_array_size(recs), 0, "the old names' roles: %s", buf);
            cr_assert_str_eq(json_string_value(json_object_get(json_array_get(recs, 0), "role")), "vector", "%s", buf);
        } else {
            cr_assert_eq(json_array_size(recs), 0, "moves on parameters recorded without a role: %s", buf);
        }
        json_decref(a);
        free(buf);
    }
    json_decref(r);
}
