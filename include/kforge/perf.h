/*
 * kforge performance method: the roofline floor of a task on a device (minimum bytes over
 * the measured bandwidth, FLOPs over the measured peak; the larger wins), and where a
 * measured time sits against it.
 */
#ifndef KFORGE_PERF_H
#define KFORGE_PERF_H

#include "kforge/arch.h"
#include "kforge/backend.h"
#include "kforge/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kf_roofline {
    double bytes, flops;      /* task minimum bytes and FLOPs */
    double mem_floor_s;       /* bytes / bandwidth */
    double compute_floor_s;   /* flops / peak */
    double floor_s;           /* max of the two */
    const char *bound;        /* "memory" or "compute" (which floor is larger) */
    double bw_gbs, peak_gflops; /* ceilings used */
    int measured;             /* ceilings were measured on this device */
} kf_roofline;

/* Roofline floor of g on a device with ceilings c. The bandwidth used is the streaming
 * copy bandwidth (read+write), the peak is the f32 FMA peak. */
void kf_roofline_of(const kf_graph *g, const kf_ceilings *c, kf_roofline *out);

typedef struct kf_perf_point {
    double time_s;
    double gbs;             /* bytes / time */
    double gflops;          /* flops / time */
    double pct_floor;       /* 100 * floor / time */
} kf_perf_point;

void kf_perf_place(const kf_roofline *r, double time_s, kf_perf_point *out);

/* Ceilings of a device behind backend b (opencl, cuda): the cached entry for key, or
 * (when absent or force) a measurement through b itself: a vectorised copy kernel over
 * buffers well beyond the device's caches (copy_gbs, read+write bytes), a fill kernel
 * (write_gbs), and an FMA chain kernel (peak_gflops_f32), each the best of several
 * event-timed runs, rendered from the GPU kernel form for b's language. Takes ~1-5 s.
 * The kernels are kforge's own, so they run in-process. Saved with kf_arch_save. */
kf_status kf_perf_device_ceilings(kf_backend *b, const char *key, int force, kf_ceilings *out,
                                  kf_error *err);

#ifdef __cplusplus
}
#endif
#endif
