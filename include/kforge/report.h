/*
 * kforge reports: the live iteration table and the HTML page of a run. Rows carry
 * already-computed numbers; the report only lays them out (it computes no metric: the
 * agent layer fills these structs from a run, see kf_run_report_html in agent.h).
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
    int raced;               /* its timing stopped early: slower than the best so far */
} kf_report_row;

void kf_report_table_header(FILE *f, const char *task, const char *plan, const char *device,
                            double floor_ms, const char *bound, int measured);
void kf_report_table_row(FILE *f, const kf_report_row *r);
void kf_report_table_footer(FILE *f, const kf_report_row *best, double first_ms, double wall_s);

/* ---- the HTML page of one run (src/report/html.c; docs/report.md) ---- */

/* One candidate as the page shows it. Strings may be NULL (shown as absent); every string
 * is escaped on output, so any bytes are safe. */
typedef struct kf_report_iter {
    int iter;                /* 1-based */
    const char *label;       /* candidate schedule */
    const char *agent;       /* "builtin", "llm" */
    const char *status;      /* "ok", "mismatch", "compile-error", ... */
    int verified;            /* verified and timed: the numbers below are valid */
    double time_ms, gbs, gflops;
    double intensity;        /* FLOP per byte of the task's minimum bytes (0: no FLOPs) */
    double pct_floor;        /* 100 * floor / time */
    const char *bound;       /* the diagnosis' bound, NULL when not analysed */
    int cached;              /* served from the store: measured earlier */
    int best_so_far;         /* improved the best time when it ran */
    const char *detail;      /* why it failed (first lines shown), NULL when verified */
    const char *memcheck;    /* its memory check ("" or NULL: not run) */
    const char *diagnosis;   /* the one-line diagnosis, NULL when not analysed */
    const char *const *evidence; int nevidence;   /* what the diagnosis rests on */
    const char *const *recs; int nrecs;           /* ranked recommendations, best first */
    const char *followed;    /* the recommendation this candidate was chosen by ("" none) */
} kf_report_iter;

typedef struct kf_report_page {
    const char *task;        /* task name */
    const char *run_id;      /* "" or NULL when not stored */
    const char *platform, *device, *plan;
    double bw_gbs;           /* the memory ceiling (streaming copy, GB/s) */
    double peak_gflops;      /* the compute ceiling (GFLOP/s) */
    const char *peak_what;   /* which peak, e.g. "f32 FMA" */
    int measured;            /* ceilings measured on this device (else nominal) */
    const char *ceil_when;   /* when they were measured, may be NULL */
    double ridge;            /* FLOP/byte where the two roofs meet (peak / bandwidth) */
    double bytes, flops;     /* the task's minimum bytes and FLOPs */
    double floor_ms;         /* the roofline floor */
    const char *floor_bound; /* "memory" or "compute" */
    const kf_report_iter *iters; int niters;
    int best;                /* index into iters, -1 when nothing verified */
    double speedup_first;    /* best over the first verified candidate (0: not known) */
    const char *best_source; /* the best kernel's source, NULL when none */
    const char *best_file;   /* its file name, e.g. "kernel.c" */
    const char *best_flags;  /* its extra compile flags, may be NULL */
    const char *memcheck;    /* the final candidate's memory check, may be NULL */
    const char *stop_reason; /* why the loop ended early ("" or NULL: it did not) */
    const char *result_from; /* which agent wrote the result: "builtin", "llm", "none" ("" or
                                NULL: not recorded) */
    const char *result_detail; /* ... the path that produced it, or why there is none */
    double wall_s;           /* the run's wall time (0: unknown) */
    const char *generated;   /* when the page was written (text), may be NULL */
} kf_report_page;

/* Contract: write pg as one self-contained HTML5 page to out: inline CSS, inline SVG
 * charts (time per iteration; a log-log roofline with the memory and compute roofs, the
 * ridge and every verified candidate), the best kernel's source, the diagnosis history
 * and the iteration table, and a small inline script (sortable table, click to highlight)
 * that marks the root element data-kf-ready="1" once it ran and records any script error
 * as data-kf-error. Nothing is fetched from elsewhere. Every string of pg is escaped.
 * Returns 0, or -1 when writing to out failed (ferror). */
int kf_report_html(FILE *out, const kf_report_page *pg);

/* Contract: s with the HTML special characters (& < > " ') replaced by entities, safe in
 * text and in quoted attributes, written to out. NULL writes nothing. */
void kf_report_html_escape(FILE *out, const char *s);

#ifdef __cplusplus
}
#endif
#endif
