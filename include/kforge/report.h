/*
 * kforge reports: the live iteration table. Rows carry already-computed numbers; the
 * report only lays them out.
 */
#ifndef KFORGE_REPORT_H
#define KFORGE_REPORT_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kf_report_row {
    int iter;
    const char *label;       /* candidate schedule */
    const char *status;      /* "ok", "mismatch", ... */
    int has_time;
    double time_ms, gbs, gflops, pct_floor;
    double occupancy;        /* 0..1, < 0 where there is none (cpu) or it is unknown */
    const char *bound;       /* the diagnosis' bound, NULL when not analysed */
    const char *analysis;    /* the diagnosis line printed under the row, may be NULL */
    int best;                /* mark as the best so far */
    const char *note;        /* short detail for failures, may be NULL */
    int cached;              /* the result came from the store (measured earlier) */
} kf_report_row;

void kf_report_table_header(FILE *f, const char *task, const char *plan, const char *device,
                            double floor_ms, const char *bound, int measured);
void kf_report_table_row(FILE *f, const kf_report_row *r);
void kf_report_table_footer(FILE *f, const kf_report_row *best, double first_ms, double wall_s);

#ifdef __cplusplus
}
#endif
#endif
