/*
 * A run as an HTML page: the glue between a kf_run_result (the loop's, or one loaded back
 * from the store) and the report layer's plain page struct (kf_report_page). The report
 * layer knows no agent types and computes no metric, so what the page shows that is not
 * stored as such is derived here: each candidate's arithmetic intensity (the task's
 * FLOPs over its minimum bytes, the x of the roofline), the ridge point (peak over
 * bandwidth), the one-line diagnosis and the ranked recommendations as text, and the
 * best's speedup over the first verified candidate.
 *
 * Everything the page struct points at lives in one allocation per call (the rows and
 * their text), freed before returning; the run itself is only read.
 */
#include "kforge/agent.h"
#include "kforge/report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The text of one row that is not in the run record as a string. */
typedef struct row_text {
    char diag[700];
    char recs[KF_DIAG_MAX_RECS][240];
    const char *rec_ptr[KF_DIAG_MAX_RECS];
    const char *ev_ptr[KF_DIAG_MAX_EVIDENCE];
} row_text;

/* See agent.h. */
kf_status kf_run_report_html(const kf_run_result *r, const char *task_name, FILE *out, kf_error *err) {
    if (!r || !out)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_run_report_html: no run or no output");
    int n = r->niters > 0 ? r->niters : 0;
    kf_report_iter *rows = kf_calloc(n ? (size_t)n : 1, sizeof *rows);
    row_text *txt = kf_calloc(n ? (size_t)n : 1, sizeof *txt);
    double ai = r->roof.bytes > 0 && r->roof.flops > 0 ? r->roof.flops / r->roof.bytes : 0;
    double first_ms = 0;
    for (int i = 0; i < n; i++) {
        const kf_iter_record *it = &r->iters[i];
        kf_report_iter *row = &rows[i];
        row_text *t = &txt[i];
        row->iter = it->iter;
        row->label = it->label;
        row->agent = it->agent;
        row->status = kf_vstatus_name(it->res.status);
        row->verified = it->res.status == KF_V_OK && it->res.timed;
        if (row->verified) {
            row->time_ms = it->res.time_ms;
            row->gbs = it->perf.gbs;
            row->gflops = it->perf.gflops;
            row->intensity = ai;
            row->pct_floor = it->perf.pct_floor;
            if (first_ms == 0) first_ms = it->res.time_ms;
        } else {
            row->detail = it->res.detail;
        }
        row->cached = it->cached;
        row->best_so_far = it->best_so_far;
        row->memcheck = it->memcheck;
        row->followed = it->followed;
        if (it->has_diag) {
            const kf_diagnosis *d = &it->diag;
            row->bound = d->bound;
            kf_perf_diagnosis_line(d, t->diag, sizeof t->diag);
            row->diagnosis = t->diag;
            int ne = d->nevidence < KF_DIAG_MAX_EVIDENCE ? d->nevidence : KF_DIAG_MAX_EVIDENCE;
            for (int k = 0; k < ne; k++) t->ev_ptr[k] = d->evidence[k];
            row->evidence = t->ev_ptr;
            row->nevidence = ne;
            int nr = d->nrecs < KF_DIAG_MAX_RECS ? d->nrecs : KF_DIAG_MAX_RECS;
            for (int k = 0; k < nr; k++) {
                const kf_diag_rec *rc = &d->rec[k];
                snprintf(t->recs[k], sizeof t->recs[k], "%s%s: %s (expected effect %.2f)", rc->param,
                         rc->dir > 0 ? "+" : "-", rc->why, rc->score);
                t->rec_ptr[k] = t->recs[k];
            }
            row->recs = t->rec_ptr;
            row->nrecs = nr;
        }
    }
    kf_report_page pg;
    memset(&pg, 0, sizeof pg);
    pg.task = task_name && task_name[0] ? task_name : "(unnamed task)";
    pg.run_id = r->run_id;
    pg.platform = r->dev.platform;
    pg.device = r->dev.name;
    pg.plan = r->plan;
    /* the roofline's ceilings as kf_roofline_of picks them (streaming copy bandwidth, f32 FMA
     * peak or a matrix rate); a run loaded from the store carries them in ceil only */
    pg.bw_gbs = r->roof.bw_gbs > 0 ? r->roof.bw_gbs : r->ceil.copy_gbs;
    pg.peak_gflops = r->roof.peak_gflops > 0 ? r->roof.peak_gflops : r->ceil.peak_gflops_f32;
    pg.peak_what = "f32 FMA peak";
    /* raised for matmuls on tensor cores (kf_roofline_of): say which rate */
    if (r->ceil.peak_gflops_mm16 > 0 && pg.peak_gflops == r->ceil.peak_gflops_mm16)
        pg.peak_what = "f16/bf16 matrix peak (datasheet)";
    else if (r->ceil.peak_gflops_tf32 > 0 && pg.peak_gflops == r->ceil.peak_gflops_tf32 / 3)
        pg.peak_what = "f32 matmul against tf32/3 (3xTF32, datasheet)";
    pg.measured = r->roof.measured || r->ceil.measured;
    pg.ceil_when = r->ceil.when;
    pg.ridge = pg.bw_gbs > 0 ? pg.peak_gflops / pg.bw_gbs : 0;
    pg.bytes = r->roof.bytes;
    pg.flops = r->roof.flops;
    pg.floor_ms = r->roof.floor_s * 1e3;
    pg.floor_bound = r->roof.bound;
    pg.iters = rows;
    pg.niters = n;
    pg.best = r->best >= 0 && r->best < n ? r->best : -1;
    if (pg.best >= 0 && first_ms > 0 && r->iters[pg.best].res.time_ms > 0)
        pg.speedup_first = first_ms / r->iters[pg.best].res.time_ms;
    pg.best_source = pg.best >= 0 ? r->best_source : NULL;
    pg.best_file = kf_loop_kernel_file(r->dev.platform);
    pg.best_flags = r->best_flags;
    char mc[2200];
    if (r->memcheck[0]) {
        snprintf(mc, sizeof mc, "%s%s%s", r->memcheck, r->memcheck_detail[0] ? ": " : "", r->memcheck_detail);
        pg.memcheck = mc;
    }
    pg.stop_reason = r->stop_reason;
    pg.result_from = r->result_from;
    pg.result_detail = r->outcome;
    pg.wall_s = r->wall_s;
    char when[64];
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm) && strftime(when, sizeof when, "%Y-%m-%d %H:%M %Z", &tm)) pg.generated = when;
    errno = 0;
    int rc = kf_report_html(out, &pg);
    int werr = errno ? errno : EIO; /* the failed write's reason (ENOSPC on a full disk) */
    free(rows);
    free(txt);
    if (rc != 0)
        return kf_error_set(err, KF_ERR_IO, NULL, 0, 0, "could not write the HTML report: %s",
                            strerror(werr));
    return KF_OK;
}
