/*
 * kforge calibration: the one way into a device's measured ceilings (src/arch/calib.c).
 *
 * Calibration lives in src/arch/ (DESIGN.md section 3: arch holds detection and
 * calibration, measured ceilings, cached): the cache file (cache.c, kf_arch_load/save), the
 * CPU measurement (calib_cpu.c), the device probes (calib_device.c) and this front, which
 * decides whose ceilings a device has and under which key they are cached. The CLI
 * (`kforge calibrate`, `kforge verify --time`) and the synthesis loop call it; nothing else
 * measures.
 */
#ifndef KFORGE_CALIB_H
#define KFORGE_CALIB_H

#include "kforge/arch.h"
#include "kforge/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kf_calib_mode {
    KF_CALIB_CACHED_OR_MEASURE = 0, /* the cached entry; measured (and cached) when absent */
    KF_CALIB_MEASURE,               /* measured again, replacing the cached entry */
    KF_CALIB_CACHED_ONLY            /* the cached entry or KF_ERR_IO: never measures */
} kf_calib_mode;

/* Contract: the cache key of backend be's device with `threads` threads (0 = all usable)
 * into key (cap bytes). A CPU, and a driver's CPU device (PoCL), have the host's ceilings
 * (same cores, same memory): "cpu|HOST CPU NAME|THREADS"; other devices
 * "PLATFORM|NAME|DRIVER". For a driver's CPU device the host backend is opened to read
 * the host's name (its failure is returned). KF_ERR_ARG without be or key. */
kf_status kf_calib_key(kf_backend *be, int threads, char *key, size_t cap, kf_error *err);

/* Contract: the measured ceilings of be's device into *out, as every roofline floor uses
 * them. CPU-like devices (see kf_calib_key): kf_arch_get_cpu with `threads` threads
 * (a busy entry is measured again, see arch.h); GPU-style devices: kforge's own probe
 * kernels (copy, fill, FMA chain, empty launch) compiled, loaded and timed in this process
 * through be (calib_device.c; ~1-5 s). mode: see kf_calib_mode. Measurements are cached
 * (kf_arch_save; a failure to cache is a warning). Fails with the measurement's error,
 * or KF_ERR_IO (message: "no calibration cached ...") for KF_CALIB_CACHED_ONLY without an
 * entry. */
kf_status kf_calib_ceilings(kf_backend *be, int threads, kf_calib_mode mode, kf_ceilings *out,
                            kf_error *err);

/* Contract: the 16-bit matmul compute ceiling of device dev into out->peak_gflops_mm16:
 * the datasheet's dense f16/bf16 matrix rate of dev's architecture-database entry (no kforge
 * kernel measures tensor cores), 0 when no entry matches or it gives none (the floor of a
 * 16-bit matmul is then the memory floor alone). said (cap bytes, may be NULL) gets one line
 * for the user: the rate and its source, or why there is none. Returns 1 when a rate was
 * set. */
int kf_calib_mm16(const kf_device_info *dev, kf_ceilings *out, char *said, size_t cap);

/* Contract: the TF32 matrix rate of device dev into out->peak_gflops_tf32: the datasheet's
 * dense TF32 rate of dev's architecture-database entry, 0 when none matches or it gives
 * none. An f32 contraction's compute ceiling is then max(f32 peak, this / 3) (3xTF32,
 * kf_roofline_of). said (cap bytes, may be NULL) gets one line for the user, read against
 * out->peak_gflops_f32 (set it first): which ceiling f32 matmul FLOPs meet, and why.
 * Returns 1 when a rate was set. */
int kf_calib_tf32(const kf_device_info *dev, kf_ceilings *out, char *said, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
