/*
 * Nsight Compute's raw CSV page (ncu --csv --page raw) into kf_counters rows.
 *
 * Design note. The page is one table: row 1 names the columns ("ID", "Kernel Name", ...
 * then one metric per column, e.g. dram__throughput.avg.pct_of_peak_sustained_elapsed),
 * row 2 gives their units ("%", "nsecond", "Kbyte", ...), then one row per profiled
 * launch. Every field is quoted; numbers may carry thousands separators ("1,024"); a
 * metric the section did not collect is "n/a" or absent. ncu's own messages (==PROF==,
 * ==WARNING==) may be interleaved with the table when it wrote to stdout: lines that do
 * not start with a quote are skipped. Units are converted to base units (seconds,
 * bytes) so that a change of ncu's auto-scaling does not change a result.
 *
 * The metrics read, per Nsight Compute's metric reference (sections SpeedOfLight,
 * Occupancy, LaunchStats, MemoryWorkloadAnalysis, WarpStateStats):
 *   gpu__time_duration.sum, gpu__dram_throughput (dram__throughput before 2025) / sm__throughput /
 *   gpu__compute_memory_throughput .avg.pct_of_peak_sustained_elapsed,
 *   sm__warps_active.avg.pct_of_peak_sustained_active (achieved occupancy),
 *   sm__maximum_warps_per_active_cycle_pct (theoretical), l1tex__t_sector_hit_rate.pct,
 *   lts__t_sector_hit_rate.pct, l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum,
 *   dram__bytes_{read,write}.sum, launch__{registers_per_thread,grid_size,block_size,
 *   shared_mem_per_block_static}, and every
 *   smsp__average_warps_issue_stalled_REASON_per_issue_active.ratio (the stall reasons:
 *   each is warps stalled for REASON per issued instruction; the largest are kept, as a
 *   share of their sum).
 */
#include "kforge/perf.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COLS 4096

typedef struct row {
    int n;
    char **f;
} row;

static void row_free(row *r) {
    for (int i = 0; i < r->n; i++) free(r->f[i]);
    free(r->f);
    r->n = 0;
    r->f = NULL;
}

/* Split one CSV line (quoted fields, "" inside a quote) at p; *end gets the next line. */
static int split(const char *p, const char *lim, row *r, const char **end) {
    r->n = 0;
    r->f = NULL;
    int cap = 0;
    while (p < lim && *p != '\n') {
        kf_buf b = {0};
        kf_buf_puts(&b, "");
        if (*p == '"') {
            p++;
            while (p < lim) {
                if (*p == '"' && p + 1 < lim && p[1] == '"') { kf_buf_putn(&b, "\"", 1); p += 2; continue; }
                if (*p == '"') { p++; break; }
                kf_buf_putn(&b, p, 1);
                p++;
            }
        } else {
            while (p < lim && *p != ',' && *p != '\n' && *p != '\r') kf_buf_putn(&b, p++, 1);
        }
        if (r->n == cap) {
            cap = cap ? cap * 2 : 64;
            if (cap > MAX_COLS) { kf_buf_free(&b); return -1; }
            r->f = kf_realloc(r->f, (size_t)cap * sizeof *r->f);
        }
        r->f[r->n++] = b.data;
        if (p < lim && *p == '\r') p++;
        if (p < lim && *p == ',') p++;
        else if (p < lim && *p != '\n') { row_free(r); return -1; }
    }
    *end = p < lim ? p + 1 : lim;
    return 0;
}

/* A field's number in base units, or -1 (n/a, empty, not a number). */
static double number(const char *s, const char *unit) {
    char clean[128];
    size_t k = 0;
    for (const char *p = s; *p && k + 1 < sizeof clean; p++)
        if (*p != ',') clean[k++] = *p;
    clean[k] = 0;
    char *e;
    double v = strtod(clean, &e);
    if (e == clean) return -1;
    while (*e == ' ') e++;
    if (*e) return -1;
    static const struct { const char *u; double f; } units[] = {
        {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1},
        {"nsecond", 1e-9}, {"usecond", 1e-6}, {"msecond", 1e-3}, {"second", 1},
        {"byte", 1}, {"Kbyte", 1e3}, {"Mbyte", 1e6}, {"Gbyte", 1e9}, {"Tbyte", 1e12},
        {"KB", 1024}, {"MB", 1048576}, {"Kbyte/block", 1e3}, {"byte/block", 1}};
    for (size_t i = 0; unit && i < sizeof units / sizeof units[0]; i++)
        if (strcmp(unit, units[i].u) == 0) return v * units[i].f;
    return v;
}

static int col(const row *h, const char *name) {
    for (int i = 0; i < h->n; i++)
        if (strcmp(h->f[i], name) == 0) return i;
    return -1;
}

static double get(const row *h, const row *u, const row *r, const char *name) {
    int c = col(h, name);
    if (c < 0 || c >= r->n) return -1;
    return number(r->f[c], c < u->n ? u->f[c] : NULL);
}

static const char STALL_PRE[] = "smsp__average_warps_issue_stalled_";
static const char STALL_POST[] = "_per_issue_active.ratio";

static void stalls(const row *h, const row *u, const row *r, kf_counters *c) {
    double total = 0;
    struct { char name[32]; double v; } all[64];
    int n = 0;
    size_t pl = strlen(STALL_PRE), sl = strlen(STALL_POST);
    for (int i = 0; i < h->n && i < r->n; i++) {
        const char *m = h->f[i];
        size_t ml = strlen(m);
        if (ml <= pl + sl || strncmp(m, STALL_PRE, pl) != 0 || strcmp(m + ml - sl, STALL_POST) != 0) continue;
        double v = number(r->f[i], i < u->n ? u->f[i] : NULL);
        if (v <= 0) continue;
        /* "not_issued" is a sum over reasons, not a reason */
        if (strstr(m, "not_issued")) continue;
        total += v;
        if (n < 64) {
            int len = (int)(ml - pl - sl);
            snprintf(all[n].name, sizeof all[n].name, "%.*s", len, m + pl);
            all[n++].v = v;
        }
    }
    c->nstalls = 0;
    for (int k = 0; k < KF_MAX_STALLS && total > 0; k++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (all[i].v > 0 && (best < 0 || all[i].v > all[best].v)) best = i;
        if (best < 0) break;
        snprintf(c->stall[c->nstalls].name, sizeof c->stall[0].name, "%s", all[best].name);
        c->stall[c->nstalls++].pct = 100 * all[best].v / total;
        all[best].v = 0;
    }
}

/* See perf.h. */
kf_status kf_perf_ncu_parse(const char *csv, size_t len, kf_counters **out, int *n, kf_error *err) {
    *out = NULL;
    *n = 0;
    const char *p = csv, *lim = csv + len;
    row hdr = {0}, unit = {0}, r = {0};
    int line = 0, got = 0, cap = 0;
    kf_counters *rows = NULL;
    kf_status st = KF_OK;
    while (p < lim) {
        line++;
        if (*p != '"') { /* ncu's own messages */
            const char *nl = memchr(p, '\n', (size_t)(lim - p));
            p = nl ? nl + 1 : lim;
            continue;
        }
        const char *next;
        if (split(p, lim, got == 0 ? &hdr : got == 1 ? &unit : &r, &next) != 0) {
            st = kf_error_set(err, KF_ERR_PARSE, NULL, line, 0, "ncu CSV: malformed row");
            goto done;
        }
        p = next;
        got++;
        if (got == 1) {
            if (col(&hdr, "Kernel Name") < 0 || col(&hdr, "ID") < 0) {
                st = kf_error_set(err, KF_ERR_PARSE, NULL, line, 0,
                                  "ncu CSV: no \"ID\" and \"Kernel Name\" columns (is this ncu --csv --page raw?)");
                goto done;
            }
            continue;
        }
        if (got == 2) continue;
        if (r.n != hdr.n) {
            st = kf_error_set(err, KF_ERR_PARSE, NULL, line, 0, "ncu CSV: %d fields, the header has %d",
                              r.n, hdr.n);
            goto done;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            rows = kf_realloc(rows, (size_t)cap * sizeof *rows);
        }
        kf_counters *c = &rows[(*n)++];
        memset(c, 0, sizeof *c);
        snprintf(c->source, sizeof c->source, "ncu");
        /* "kf_s0(float const*, float*)" or a mangled name: keep the identifier */
        const char *kn = r.f[col(&hdr, "Kernel Name")];
        int kl = 0;
        while (kn[kl] && (isalnum((unsigned char)kn[kl]) || kn[kl] == '_') && kl < 63) kl++;
        snprintf(c->kernel, sizeof c->kernel, "%.*s", kl, kn);
        c->duration_s = get(&hdr, &unit, &r, "gpu__time_duration.sum");
        /* ncu 2025 names it gpu__dram_throughput; older releases dram__throughput */
        c->dram_pct = get(&hdr, &unit, &r, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed");
        if (c->dram_pct < 0) c->dram_pct = get(&hdr, &unit, &r, "dram__throughput.avg.pct_of_peak_sustained_elapsed");
        c->sm_pct = get(&hdr, &unit, &r, "sm__throughput.avg.pct_of_peak_sustained_elapsed");
        c->mem_pct = get(&hdr, &unit, &r, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed");
        c->achieved_occ_pct = get(&hdr, &unit, &r, "sm__warps_active.avg.pct_of_peak_sustained_active");
        c->theoretical_occ_pct = get(&hdr, &unit, &r, "sm__maximum_warps_per_active_cycle_pct");
        c->l1_hit_pct = get(&hdr, &unit, &r, "l1tex__t_sector_hit_rate.pct");
        c->l2_hit_pct = get(&hdr, &unit, &r, "lts__t_sector_hit_rate.pct");
        double bl = get(&hdr, &unit, &r, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum");
        double bs = get(&hdr, &unit, &r, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum");
        c->bank_conflicts = bl < 0 && bs < 0 ? -1 : (bl > 0 ? bl : 0) + (bs > 0 ? bs : 0);
        double rd = get(&hdr, &unit, &r, "dram__bytes_read.sum");
        double wr = get(&hdr, &unit, &r, "dram__bytes_write.sum");
        c->dram_bytes = rd < 0 && wr < 0 ? -1 : (rd > 0 ? rd : 0) + (wr > 0 ? wr : 0);
        c->regs = get(&hdr, &unit, &r, "launch__registers_per_thread");
        c->smem_bytes = get(&hdr, &unit, &r, "launch__shared_mem_per_block_static");
        c->grid = get(&hdr, &unit, &r, "launch__grid_size");
        c->block = get(&hdr, &unit, &r, "launch__block_size");
        c->ipc = c->cache_miss_pct = c->branch_miss_pct = -1;
        stalls(&hdr, &unit, &r, c);
        row_free(&r);
    }
    if (got < 2)
        st = kf_error_set(err, KF_ERR_PARSE, NULL, line, 0,
                          got ? "ncu CSV: a header and no units row" : "ncu CSV: no table (no quoted rows)");
done:
    row_free(&hdr);
    row_free(&unit);
    row_free(&r);
    if (st != KF_OK) {
        free(rows);
        *n = 0;
        return st;
    }
    *out = rows;
    return KF_OK;
}
