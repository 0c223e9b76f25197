/*
 * The live iteration table printed during `kforge synth`: one row per candidate, flushed
 * as soon as it is known, so a long search shows progress. Columns: time, min-bytes
 * bandwidth, FLOP rate, theoretical occupancy (GPU-style devices), % of the roofline floor,
 * and the analysis agent's bound; its one-line diagnosis goes under the row.
 */
#include "kforge/report.h"

#include <string.h>

void kf_report_table_header(FILE *f, const char *task, const char *plan, const char *device,
                            double floor_ms, const char *bound, int measured) {
    fprintf(f, "task %s  plan %s\n", task, plan);
    fprintf(f, "device %s  roofline floor %.4f ms (%s-bound, %s ceilings)\n", device, floor_ms,
            bound, measured ? "measured" : "nominal");
    fprintf(f, "%4s  %-44s %-15s %10s %9s %9s %5s %8s  %s\n", "iter", "candidate", "status",
            "time ms", "GB/s", "GFLOP/s", "occ", "% floor", "bound");
    fflush(f);
}

void kf_report_table_row(FILE *f, const kf_report_row *r) {
    char label[45];
    snprintf(label, sizeof label, "%s", r->label ? r->label : "");
    char occ[8] = "-";
    char status[40];
    snprintf(status, sizeof status, "%s%s%s", r->status, r->raced ? " (raced)" : "", r->cached ? " (cached)" : "");
    if (r->occupancy >= 0) snprintf(occ, sizeof occ, "%.0f%%", 100 * r->occupancy);
    if (r->has_time)
        fprintf(f, "%4d  %-44s %-15s %10.4f %9.2f %9.2f %5s %7.1f%%  %-8s%s\n", r->iter, label,
                status, r->time_ms, r->gbs, r->gflops, occ, r->pct_floor,
                r->bound ? r->bound : "-", r->best ? " *" : "");
    else
        fprintf(f, "%4d  %-44s %-15s %10s %9s %9s %5s %8s  %s\n", r->iter, label, status, "-", "-",
                "-", "-", "-", "-");
    if (r->analysis && r->analysis[0]) fprintf(f, "      analysis: %s\n", r->analysis);
    if (r->note && r->note[0]) {
        /* first line of the detail, indented under the row */
        const char *nl = strchr(r->note, '\n');
        int len = nl ? (int)(nl - r->note) : (int)strlen(r->note);
        if (len > 110) len = 110;
        fprintf(f, "      %.*s\n", len, r->note);
    }
    fflush(f);
}

void kf_report_table_footer(FILE *f, const kf_report_row *best, double first_ms, double wall_s) {
    if (!best) {
        fprintf(f, "no candidate verified (%.1f s)\n", wall_s);
        fflush(f);
        return;
    }
    fprintf(f, "best: iter %d  %.4f ms  %.2f GB/s  %.2f GFLOP/s  %.1f%% of floor", best->iter,
            best->time_ms, best->gbs, best->gflops, best->pct_floor);
    if (first_ms > 0) fprintf(f, "  (%.2fx vs first candidate)", first_ms / best->time_ms);
    fprintf(f, "  [%.1f s]\n", wall_s);
    fflush(f);
}
