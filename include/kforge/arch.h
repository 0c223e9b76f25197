/*
 * kforge architecture data: the device's measured ceilings (streaming bandwidth, peak
 * FLOP/s) that the roofline floor is computed from. Measurements are cached per device
 * in a small JSON file so that every run does not re-measure.
 */
#ifndef KFORGE_ARCH_H
#define KFORGE_ARCH_H

#include "kforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kf_ceilings {
    char device_key[160];   /* identifies the device the numbers belong to */
    int measured;           /* 1 = measured on this machine, 0 = nominal guesses */
    int threads;            /* threads used for the measurement */
    double copy_gbs;        /* streaming copy, read+write bytes counted (GB/s, 1e9) */
    double read_gbs;        /* streaming read (sum) */
    double write_gbs;       /* streaming write (fill) */
    double peak_gflops_f32; /* FMA-bound peak, f32 */
    double peak_gflops_f64;
    char when[32];          /* ISO date of the measurement */
} kf_ceilings;

/* Measure the CPU's ceilings with `threads` threads (0 = all usable). Takes ~1-3 s. */
kf_status kf_arch_calibrate_cpu(int threads, kf_ceilings *out, kf_error *err);

/* Load the cached ceilings for device_key from the cache file (path: $KFORGE_CACHE_DIR or
 * $XDG_CACHE_HOME/kforge or ~/.cache/kforge, file calibration.json). KF_ERR_IO if absent. */
kf_status kf_arch_load(const char *device_key, kf_ceilings *out, kf_error *err);
/* Store (replace) the entry for out->device_key in the cache file. */
kf_status kf_arch_save(const kf_ceilings *c, kf_error *err);
/* Cached value if present, else calibrate and save. */
kf_status kf_arch_get_cpu(const char *device_key, int threads, int force, kf_ceilings *out,
                          kf_error *err);

#ifdef __cplusplus
}
#endif
#endif
