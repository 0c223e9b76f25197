/*
 * The performance analysis agent's reading of one candidate: what bounds it, the
 * evidence, and ranked schedule moves.
 *
 * Design note.
 *  - Classification. With t the measured time, the roofline gives two fractions: the
 *    task's minimum bytes over t against the copy ceiling (bw_frac) and its FLOPs over t
 *    against the f32 peak (peak_frac). When the measured per-launch overhead times the
 *    number of launches is a quarter of t or more, the kernel is launch-bound. Else the
 *    larger fraction names the bound when it is at least 0.5 (memory or compute), and
 *    below that the kernel is latency-bound: neither pipe is busy, so it waits (too few
 *    bytes in flight, too few warps, dependency chains, barriers).
 *  - Evidence comes from what was measured and nothing else: the compiler's resource
 *    report (registers, shared memory, spills), the theoretical occupancy of the dominant
 *    launch (occupancy.c, with the architecture database's limits), the grid against the
 *    units, and profiler counters where they were taken (ncu: DRAM and SM throughput,
 *    achieved occupancy, stall reasons, hit rates, bank conflicts; perf: IPC and cache
 *    misses). What was not measured is said, not guessed.
 *  - Recommendations are moves on the kernel's own schedule parameters, asked for by role
 *    (kf_role: a wider vector, a smaller block tile, more threads, ...) and shown with the
 *    parameter's own name without its stage prefix ("vw", "bm", ...), with a direction
 *    and a score; a move the parameter's value list does not allow (already at its end) is
 *    left out. The rules know what each role does, not which template or task it is.
 *  - Moves against the diagnosis: the reverse of every direction a rule asks for, also
 *    when the value list stops that direction (vw+ wanted at the widest vector: vw- goes
 *    against it), unless another rule asks for it. The builtin agent leaves them for last:
 *    on a small machine most of a random search's budget goes to such points (one thread
 *    of two, half-width vectors, the plain matmul loop).
 */
#include "kforge/perf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void evidence(kf_diagnosis *d, const char *fmt, ...) {
    if (d->nevidence >= KF_DIAG_MAX_EVIDENCE) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->evidence[d->nevidence++], sizeof d->evidence[0], fmt, ap);
    va_end(ap);
}

/* The kernel's first parameter with that role, or NULL. */
static const kf_diag_param *param(const kf_diag_input *in, kf_role role) {
    for (int i = 0; i < in->nparams; i++)
        if (in->params[i].role == role) return &in->params[i];
    return NULL;
}

/* A parameter's name without its stage prefix ("s1.vw" -> "vw"). */
static const char *short_name(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot ? dot + 1 : name;
}

/* Mark the move (role, dir) as against the diagnosis (kept once). */
static void avoid(kf_diagnosis *d, const kf_diag_input *in, kf_role role, int dir) {
    const kf_diag_param *p = param(in, role);
    if (!p) return;
    for (int i = 0; i < d->navoid; i++)
        if (d->avoid[i].role == role && d->avoid[i].dir == dir) return;
    if (d->navoid >= KF_DIAG_MAX_AVOID) return;
    snprintf(d->avoid[d->navoid].param, sizeof d->avoid[0].param, "%s", short_name(p->name));
    d->avoid[d->navoid].role = role;
    d->avoid[d->navoid++].dir = dir;
}

/* Add a move when the kernel has the parameter and its list allows the direction; a move
 * already recommended keeps the higher score. Either way the reverse direction goes
 * against the diagnosis (also when this one is out of range: wanting a wider vector at the
 * widest means a narrower one is the wrong way). */
static void recommend(kf_diagnosis *d, const kf_diag_input *in, kf_role role, int dir,
                      double score, const char *fmt, ...) {
    const kf_diag_param *p = param(in, role);
    if (!p) return;
    avoid(d, in, role, -dir);
    /* nvalues 0: the position in the value list is unknown (a recorded run), any direction */
    if (p->nvalues > 0 && ((dir > 0 && p->idx + 1 >= p->nvalues) || (dir < 0 && p->idx <= 0))) return;
    for (int i = 0; i < d->nrecs; i++)
        if (d->rec[i].role == role && d->rec[i].dir == dir) {
            if (score > d->rec[i].score) d->rec[i].score = score;
            return;
        }
    if (d->nrecs >= KF_DIAG_MAX_RECS) {
        /* full: replace the weakest when this one is stronger */
        int w = 0;
        for (int i = 1; i < d->nrecs; i++)
            if (d->rec[i].score < d->rec[w].score) w = i;
        if (d->rec[w].score >= score) return;
        d->rec[w] = d->rec[--d->nrecs];
    }
    kf_diag_rec *r = &d->rec[d->nrecs++];
    snprintf(r->param, sizeof r->param, "%s", short_name(p->name));
    r->role = role;
    r->dir = dir;
    r->score = score;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
}

static int rec_cmp(const void *a, const void *b) {
    double sa = ((const kf_diag_rec *)a)->score, sb = ((const kf_diag_rec *)b)->score;
    return sa < sb ? 1 : sa > sb ? -1 : 0;
}

/* The resource report's entry for kernel (or the first one when kernel is NULL). */
static int resources_of(const char *res, const char *kernel, int *regs, long *smem, long *local) {
    if (!res || !res[0]) return 0;
    const char *p = res;
    while (p && *p) {
        while (*p == ' ' || *p == ';') p++;
        char name[64] = "";
        int r = 0, n = 0;
        long s = 0, l = 0;
        if (sscanf(p, "%63s regs=%d smem=%ld local=%ld%n", name, &r, &s, &l, &n) == 4 &&
            (!kernel || strcmp(name, kernel) == 0)) {
            *regs = r;
            *smem = s;
            *local = l;
            return 1;
        }
        p = strchr(p, ';');
    }
    return 0;
}

/* The launch with the most threads: the one that carries the work. */
static const kf_launch *dominant(const kf_launch_plan *pl) {
    const kf_launch *best = NULL;
    double most = -1;
    for (int i = 0; pl && i < pl->nlaunches; i++) {
        double n = 1;
        for (int dd = 0; dd < pl->l[i].ndims; dd++) n *= (double)pl->l[i].global[dd];
        if (n > most) most = n, best = &pl->l[i];
    }
    return best;
}

static void classify(const kf_diag_input *in, kf_diagnosis *d) {
    const kf_roofline *r = in->roof;
    const kf_perf_point *p = in->perf;
    double t = p->time_s;
    d->bw_frac = r->bw_gbs > 0 ? p->gbs / r->bw_gbs : 0;
    d->peak_frac = r->peak_gflops > 0 ? p->gflops / r->peak_gflops : 0;
    int nl = in->plan && in->plan->nlaunches > 0 ? in->plan->nlaunches : 1;
    if (in->launch_s > 0 && t > 0 && nl * in->launch_s >= 0.25 * t) {
        snprintf(d->bound, sizeof d->bound, "launch");
        d->achieved = nl * in->launch_s / t;
        if (d->achieved > 1) d->achieved = 1;
        evidence(d, "%d launch%s x %.1f us measured overhead = %.0f%% of the %.1f us run", nl,
                 nl == 1 ? "" : "es", in->launch_s * 1e6, 100 * nl * in->launch_s / t, t * 1e6);
        return;
    }
    double best = d->bw_frac > d->peak_frac ? d->bw_frac : d->peak_frac;
    if (best >= 0.5) {
        snprintf(d->bound, sizeof d->bound, "%s", d->bw_frac >= d->peak_frac ? "memory" : "compute");
        d->achieved = best;
    } else {
        snprintf(d->bound, sizeof d->bound, "latency");
        d->achieved = best;
    }
    evidence(d, "%.0f%% of the copy bandwidth (%.0f of %.0f GB/s, task minimum bytes), %.0f%% of "
             "the f32 peak (%.0f of %.0f GFLOP/s)", 100 * d->bw_frac, p->gbs, r->bw_gbs,
             100 * d->peak_frac, p->gflops, r->peak_gflops);
    if (in->launch_s <= 0) evidence(d, "launch overhead not measured (kforge calibrate measures it)");
}

/* GPU rules: occupancy, grid, spills, then what the bound asks for. */
static void gpu_rules(const kf_diag_input *in, kf_diagnosis *d) {
    const kf_launch *l = dominant(in->plan);
    int units = in->arch && in->arch->units > 0 ? in->arch->units : in->units;
    int regs = 0;
    long smem = 0, local = 0;
    int have_res = l && resources_of(in->resources, l->kernel, &regs, &smem, &local);
    double threads = 1, groups = 1;
    if (l)
        for (int i = 0; i < l->ndims; i++) {
            threads *= (double)l->local[i];
            groups *= (double)l->global[i] / (double)(l->local[i] > 0 ? l->local[i] : 1);
        }
    kf_occupancy occ;
    memset(&occ, 0, sizeof occ);
    int have_occ = 0;
    if (have_res) {
        kf_error e = {0};
        have_occ = kf_perf_occupancy(in->arch, (int)threads, regs, smem, &occ, &e) == KF_OK;
        if (have_occ) {
            d->occupancy = occ.theoretical;
            snprintf(d->occ_limit, sizeof d->occ_limit, "%s", occ.limiter);
            evidence(d, "%s: %d threads/group, %d regs, %ld B shared: %d groups/SM, occupancy %.0f%% "
                     "(limit: %s)", l->kernel, (int)threads, regs, smem, occ.groups_per_unit,
                     100 * occ.theoretical, occ.limiter);
        } else {
            evidence(d, "occupancy not computed: %s", e.msg);
        }
        if (local > 0) {
            evidence(d, "%s uses %ld B of local memory per thread (register spills or local arrays)",
                     l->kernel, local);
            recommend(d, in, KF_ROLE_REG_M, -1, 0.7, "%ld B/thread of local memory: smaller register tile", local);
            recommend(d, in, KF_ROLE_REG_N, -1, 0.7, "%ld B/thread of local memory: smaller register tile", local);
            recommend(d, in, KF_ROLE_PER_ITEM, -1, 0.5, "%ld B/thread of local memory", local);
        }
    } else if (in->gpu && !l) {
        evidence(d, "launch plan unknown: occupancy not computed");
    } else if (in->gpu) {
        evidence(d, "no compiler resource report for %s: occupancy not computed", l->kernel);
    }
    /* the grid against the units */
    if (l && units > 0) {
        double resident = have_occ ? (double)units * occ.groups_per_unit : units;
        double waves = groups / resident;
        if (groups < units) {
            evidence(d, "grid of %.0f groups for %d SMs: %.0f%% of the SMs have work", groups, units,
                     100 * groups / units);
            /* idle SMs are lost outright: this outranks what the busy ones could gain */
            double s = 0.5 + 0.5 * (1 - groups / units);
            recommend(d, in, KF_ROLE_SPLIT, +1, s + 0.05, "only %.0f groups for %d SMs: split the reduction",
                      groups, units);
            recommend(d, in, KF_ROLE_GROUP, -1, s, "only %.0f groups for %d SMs: smaller groups, more of them",
                      groups, units);
            recommend(d, in, KF_ROLE_PER_ITEM, -1, s, "only %.0f groups for %d SMs: fewer elements per thread",
                      groups, units);
            recommend(d, in, KF_ROLE_TILE_M, -1, s, "only %.0f groups for %d SMs: smaller block tile", groups, units);
            recommend(d, in, KF_ROLE_TILE_N, -1, s, "only %.0f groups for %d SMs: smaller block tile", groups, units);
        } else if (waves < 4 && waves - floor(waves) > 0.01 && waves - floor(waves) < 0.5) {
            evidence(d, "%.2f waves of groups: the last wave leaves %.0f%% of the slots idle", waves,
                     100 * (1 - (waves - floor(waves))));
        }
    }
    if (have_occ && occ.theoretical < 0.5 && strcmp(d->bound, "compute") != 0) {
        double s = 0.8 * (1 - occ.theoretical);
        if (strcmp(occ.limiter, "registers") == 0) {
            recommend(d, in, KF_ROLE_REG_M, -1, s, "occupancy %.0f%%, limited by registers (%d/thread)",
                      100 * occ.theoretical, regs);
            recommend(d, in, KF_ROLE_REG_N, -1, s, "occupancy %.0f%%, limited by registers (%d/thread)",
                      100 * occ.theoretical, regs);
            recommend(d, in, KF_ROLE_PER_ITEM, -1, s * 0.8, "occupancy %.0f%%, limited by registers",
                      100 * occ.theoretical);
        } else if (strcmp(occ.limiter, "shared memory") == 0) {
            recommend(d, in, KF_ROLE_TILE_K, -1, s, "occupancy %.0f%%, limited by shared memory (%ld B/group)",
                      100 * occ.theoretical, smem);
            recommend(d, in, KF_ROLE_DOUBLE_BUFFER, -1, s * 0.8, "occupancy %.0f%%: one shared buffer, not two",
                      100 * occ.theoretical);
        } else if (strcmp(occ.limiter, "groups") == 0) {
            recommend(d, in, KF_ROLE_GROUP, +1, s, "occupancy %.0f%%: groups of %d threads hit the %d groups/SM "
                      "limit", 100 * occ.theoretical, (int)threads, occ.by_groups);
        }
    }
}

/* What the profiler's counters add. */
static void counter_rules(const kf_diag_input *in, kf_diagnosis *d) {
    if (!in->counters || in->ncounters <= 0) {
        if (in->counters_note) evidence(d, "no profiler counters: %s", in->counters_note);
        else evidence(d, "no profiler counters for this candidate");
        return;
    }
    /* the launch that took longest */
    const kf_counters *c = &in->counters[0];
    for (int i = 1; i < in->ncounters; i++)
        if (in->counters[i].duration_s > c->duration_s) c = &in->counters[i];
    if (c->achieved_occ_pct >= 0) d->achieved_occupancy = c->achieved_occ_pct / 100;
    char line[160];
    int n = snprintf(line, sizeof line, "%s %s:", c->source, c->kernel);
    if (c->dram_pct >= 0) n += snprintf(line + n, sizeof line - (size_t)n, " DRAM %.0f%%", c->dram_pct);
    if (c->sm_pct >= 0) n += snprintf(line + n, sizeof line - (size_t)n, ", SM %.0f%%", c->sm_pct);
    if (c->achieved_occ_pct >= 0)
        n += snprintf(line + n, sizeof line - (size_t)n, ", achieved occupancy %.0f%%", c->achieved_occ_pct);
    if (c->l2_hit_pct >= 0) n += snprintf(line + n, sizeof line - (size_t)n, ", L2 hit %.0f%%", c->l2_hit_pct);
    if (c->ipc >= 0) n += snprintf(line + n, sizeof line - (size_t)n, " IPC %.2f", c->ipc);
    if (c->cache_miss_pct >= 0)
        n += snprintf(line + n, sizeof line - (size_t)n, ", cache misses %.1f%%", c->cache_miss_pct);
    evidence(d, "%s", line);
    if (c->nstalls > 0) {
        char st[160];
        int k = snprintf(st, sizeof st, "stalls:");
        for (int i = 0; i < c->nstalls && i < 3; i++)
            k += snprintf(st + k, sizeof st - (size_t)k, " %s %.0f%%", c->stall[i].name, c->stall[i].pct);
        evidence(d, "%s", st);
        const char *top = c->stall[0].name;
        double share = c->stall[0].pct / 100;
        if (strstr(top, "long_scoreboard")) {
            /* waiting on global memory: more independent loads in flight per thread */
            recommend(d, in, KF_ROLE_VECTOR, +1, 0.5 + 0.4 * share, "warps wait on global memory (%s %.0f%%): "
                      "wider loads", top, c->stall[0].pct);
            recommend(d, in, KF_ROLE_PER_ITEM, +1, 0.45 + 0.4 * share, "warps wait on global memory: more "
                      "loads in flight per thread");
            recommend(d, in, KF_ROLE_DOUBLE_BUFFER, +1, 0.45 + 0.4 * share, "warps wait on global memory: overlap "
                      "the next tile's load");
        } else if (strstr(top, "barrier")) {
            recommend(d, in, KF_ROLE_GROUP, -1, 0.4 + 0.4 * share, "warps wait at barriers (%.0f%%): smaller "
                      "groups", c->stall[0].pct);
        } else if (strstr(top, "mio_throttle") || strstr(top, "short_scoreboard")) {
            recommend(d, in, KF_ROLE_REG_M, +1, 0.4 + 0.4 * share, "shared-memory pipe saturated (%s): more "
                      "reuse per thread", top);
            recommend(d, in, KF_ROLE_VECTOR_LOADS, +1, 0.4 + 0.4 * share, "shared-memory pipe saturated (%s): wider "
                      "shared loads", top);
        } else if (strstr(top, "math_pipe") || strstr(top, "wait")) {
            recommend(d, in, KF_ROLE_REG_N, +1, 0.3 + 0.3 * share, "dependent math (%s): more independent "
                      "accumulators", top);
        }
    }
    if (c->bank_conflicts > 0) evidence(d, "%.0f shared-memory bank conflicts", c->bank_conflicts);
    if (c->dram_pct >= 0 && d->bw_frac > 0 && c->dram_pct / 100 > 1.5 * d->bw_frac) {
        evidence(d, "DRAM is %.0f%% busy for %.0f%% of the copy bandwidth in useful bytes: %.1fx the "
                 "minimum traffic", c->dram_pct, 100 * d->bw_frac, c->dram_pct / 100 / d->bw_frac);
        recommend(d, in, KF_ROLE_TILE_M, +1, 0.5, "DRAM traffic above the minimum: larger tiles re-read less");
        recommend(d, in, KF_ROLE_TILE_N, +1, 0.5, "DRAM traffic above the minimum: larger tiles re-read less");
    }
}

/* CPU rules: threads, vectors, blocking. */
static void cpu_rules(const kf_diag_input *in, kf_diagnosis *d) {
    const kf_diag_param *th = param(in, KF_ROLE_THREADS);
    if (th && in->cpu_threads > 0 && th->value < in->cpu_threads && strcmp(d->bound, "launch") != 0)
        recommend(d, in, KF_ROLE_THREADS, +1, 0.85, "%ld of %d hardware threads in use", th->value,
                  in->cpu_threads);
    else if (th && in->cpu_threads > 0 && strcmp(d->bound, "launch") != 0)
        avoid(d, in, KF_ROLE_THREADS, -1); /* every hardware thread busy: fewer leaves cores idle */
    if (th && strcmp(d->bound, "launch") == 0)
        recommend(d, in, KF_ROLE_THREADS, -1, 0.8, "the run is short: fork/join costs more than it saves");
    if (!in->counters || in->ncounters <= 0) return;
    const kf_counters *c = &in->counters[0];
    if (c->ipc >= 0 && c->ipc < 1.0 && c->cache_miss_pct > 10) {
        recommend(d, in, KF_ROLE_BLOCK, -1, 0.5, "IPC %.2f with %.0f%% cache misses: smaller blocks", c->ipc,
                  c->cache_miss_pct);
        recommend(d, in, KF_ROLE_CACHE_K, -1, 0.5, "IPC %.2f with %.0f%% cache misses: smaller K panel", c->ipc,
                  c->cache_miss_pct);
    }
}

/* What each bound asks of the schedule, scored by how far from the ceiling it is. */
static void bound_rules(const kf_diag_input *in, kf_diagnosis *d) {
    double gap = 1 - d->achieved;
    if (gap < 0) gap = 0;
    if (strcmp(d->bound, "launch") == 0) {
        recommend(d, in, KF_ROLE_SPLIT, -1, 0.8, "launch-bound: fewer passes");
        recommend(d, in, KF_ROLE_PER_ITEM, +1, 0.4, "launch-bound: fewer, fuller groups");
        return;
    }
    if (strcmp(d->bound, "memory") == 0 || strcmp(d->bound, "latency") == 0) {
        double s = (strcmp(d->bound, "latency") == 0 ? 0.6 : 0.45) * gap + 0.1;
        recommend(d, in, KF_ROLE_VECTOR, +1, s + 0.05, "%s-bound at %.0f%%: wider vector accesses", d->bound,
                  100 * d->achieved);
        recommend(d, in, KF_ROLE_PER_ITEM, +1, s, "%s-bound at %.0f%%: more bytes in flight per thread", d->bound,
                  100 * d->achieved);
        recommend(d, in, KF_ROLE_UNROLL, +1, s, "%s-bound at %.0f%%: more loads in flight", d->bound,
                  100 * d->achieved);
        if (in->gpu && d->occupancy >= 0 && d->occupancy < 0.75)
            recommend(d, in, KF_ROLE_GROUP, +1, s * 0.8, "%s-bound with occupancy %.0f%%", d->bound,
                      100 * d->occupancy);
        if (!in->gpu) {
            recommend(d, in, KF_ROLE_STREAM, +1, s * 0.7, "%s-bound: streaming stores skip the read-for-ownership",
                      d->bound);
            recommend(d, in, KF_ROLE_BLOCK, +1, s * 0.6, "%s-bound: longer contiguous runs per thread", d->bound);
        }
        if (strcmp(d->bound, "latency") == 0) {
            recommend(d, in, KF_ROLE_SPLIT, +1, s * 0.9, "latency-bound: more parallel partial reductions");
            recommend(d, in, KF_ROLE_SUBGROUP, +1, s * 0.7, "latency-bound: warp shuffles instead of shared memory");
            recommend(d, in, KF_ROLE_REG_M, +1, s * 0.6, "latency-bound: more independent accumulators");
        }
        return;
    }
    /* compute */
    double s = 0.7 * gap + 0.1;
    recommend(d, in, KF_ROLE_REG_M, +1, s, "compute-bound at %.0f%%: larger register tile, more FMAs per load",
              100 * d->achieved);
    recommend(d, in, KF_ROLE_REG_N, +1, s, "compute-bound at %.0f%%: larger register tile, more FMAs per load",
              100 * d->achieved);
    recommend(d, in, KF_ROLE_TILE_K, +1, s * 0.7, "compute-bound: longer K step per barrier");
    recommend(d, in, KF_ROLE_DOUBLE_BUFFER, +1, s * 0.8, "compute-bound: overlap loads with FMAs");
    recommend(d, in, KF_ROLE_VECTOR, +1, s * 0.8, "compute-bound: wider SIMD");
    recommend(d, in, KF_ROLE_MICRO_KERNEL, +1, s * 0.7, "compute-bound: larger micro-kernel");
    recommend(d, in, KF_ROLE_UNROLL, +1, s * 0.5, "compute-bound: more independent chains");
    recommend(d, in, KF_ROLE_NAIVE, -1, s, "compute-bound: the register-blocked micro-kernel, not the "
              "plain loop");
}

/* See perf.h. */
void kf_perf_diagnose(const kf_diag_input *in, kf_diagnosis *out) {
    memset(out, 0, sizeof *out);
    out->occupancy = -1;
    out->achieved_occupancy = -1;
    if (!in->roof || !in->perf || !(in->perf->time_s > 0)) {
        snprintf(out->bound, sizeof out->bound, "unknown");
        evidence(out, "no timing to analyse");
        return;
    }
    classify(in, out);
    if (in->gpu) gpu_rules(in, out);
    else cpu_rules(in, out);
    counter_rules(in, out);
    bound_rules(in, out);
    if (strcmp(out->bound, "memory") == 0 && out->achieved >= 0.9)
        evidence(out, "at %.0f%% of the copy bandwidth: little left to gain", 100 * out->achieved);
    qsort(out->rec, (size_t)out->nrecs, sizeof out->rec[0], rec_cmp);
    /* two rules asking for opposite directions: neither is against the diagnosis */
    int n = 0;
    for (int i = 0; i < out->navoid; i++) {
        int asked = 0;
        for (int k = 0; k < out->nrecs && !asked; k++)
            asked = strcmp(out->rec[k].param, out->avoid[i].param) == 0 && out->rec[k].dir == out->avoid[i].dir;
        if (!asked) out->avoid[n++] = out->avoid[i];
    }
    out->navoid = n;
}

/* See perf.h. */
void kf_perf_diagnosis_line(const kf_diagnosis *d, char *buf, size_t cap) {
    if (!cap) return;
    int n = snprintf(buf, cap, "%s-bound at %.0f%%", d->bound, 100 * d->achieved);
    if (d->occupancy >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, "; occupancy %.0f%% (%s)", 100 * d->occupancy, d->occ_limit);
    if (d->achieved_occupancy >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", achieved %.0f%%", 100 * d->achieved_occupancy);
    if ((size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "; next: ");
    if (d->nrecs == 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "no move suggested");
    for (int i = 0; i < d->nrecs && i < 3 && (size_t)n < cap; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%s%s (%s)", i ? ", " : "", d->rec[i].param,
                      d->rec[i].dir > 0 ? "+" : "-", d->rec[i].why);
}
