/*
 * The calibration room's front (include/kforge/calib.h): whose ceilings a device has,
 * under which key they are cached, and whether they are read or measured.
 *
 * Design note. A CPU, and a driver's CPU device (PoCL), share the host's calibration: same
 * cores, same memory, so PoCL's entry is the host's for the same thread count. A GPU-style
 * device is measured through its own backend by kforge's probe kernels (calib_device.c).
 * The key is made here alone, so `kforge calibrate --cached` reads the entry the loop
 * wrote. arch calls the backend's public interface (kforge/backend.h) to open the host and
 * to compile and launch the probes; it never names a platform: the platform table
 * (kforge/platform.h) says which one is the host.
 */
#include "arch/calib_int.h"
#include "kforge/platform.h"

#include <stdio.h>
#include <string.h>

/* Whether d is the host or a driver's CPU device: ceilings of the host's CPU. */
static int cpu_like(const kf_device_info *d) { return !kf_device_is_gpu(d); }

/* See calib.h. */
kf_status kf_calib_key(kf_backend *be, int threads, char *key, size_t cap, kf_error *err) {
    if (!be || !key || cap == 0)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_calib_key: missing argument");
    key[0] = 0;
    const kf_device_info *d = &be->info;
    if (!cpu_like(d)) {
        snprintf(key, cap, "%s|%s|%s", d->platform, d->name, d->driver);
        return KF_OK;
    }
    /* a driver's CPU device (PoCL) has the host's ceilings: the host's name and threads */
    kf_backend *cpu = NULL;
    kf_status st = kf_platform_is_host(d->platform) ? KF_OK
                                                    : kf_backend_open(kf_platform_host()->name, &cpu, err);
    if (st != KF_OK) return st;
    const kf_device_info *cd = cpu ? &cpu->info : d;
    snprintf(key, cap, "cpu|%s|%d", cd->name, threads ? threads : cd->threads);
    kf_backend_close(cpu);
    return KF_OK;
}

/* See calib.h. */
kf_status kf_calib_ceilings(kf_backend *be, int threads, kf_calib_mode mode, kf_ceilings *out,
                            kf_error *err) {
    if (!be || !out)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_calib_ceilings: missing argument");
    memset(out, 0, sizeof *out);
    char key[sizeof out->device_key];
    kf_status st = kf_calib_key(be, threads, key, sizeof key, err);
    if (st != KF_OK) return st;
    if (mode == KF_CALIB_CACHED_ONLY) return kf_arch_load(key, out, err);
    int force = mode == KF_CALIB_MEASURE;
    if (cpu_like(&be->info)) return kf_arch_get_cpu(key, threads, force, out, err);
    if (!force && kf_arch_load(key, out, NULL) == KF_OK) return KF_OK;
    kf_ceilings c;
    memset(&c, 0, sizeof c);
    snprintf(c.device_key, sizeof c.device_key, "%s", key);
    st = kf_calib_measure_device(be, &c, err);
    if (st != KF_OK) return st;
    *out = c;
    kf_error e2 = {0};
    if (kf_arch_save(&c, &e2) != KF_OK) kf_log(1, "warning: cannot cache the ceilings: %s", e2.msg);
    return KF_OK;
}

/* The architecture-database entry of dev (NULL when none matches; *db to free, *why
 * says why not when neither loads nor matches). */
static const kf_arch_entry *dev_entry(const kf_device_info *dev, kf_arch_db **db, kf_error *e) {
    *db = NULL;
    if (kf_arch_db_load(NULL, db, e) != KF_OK) return NULL;
    return kf_arch_db_match(*db, dev->name, kf_device_is_gpu(dev) ? KF_ARCH_GPU : KF_ARCH_CPU);
}

int kf_calib_mm16(const kf_device_info *dev, kf_ceilings *out, char *said, size_t cap) {
    kf_arch_db *db = NULL;
    kf_error e = {0};
    const kf_arch_entry *a = dev_entry(dev, &db, &e);
    double t = a ? (a->peak_tflops_bf16 > a->peak_tflops_f16 ? a->peak_tflops_bf16 : a->peak_tflops_f16) : 0;
    out->peak_gflops_mm16 = t * 1e3;
    if (said && cap) {
        if (t > 0)
            snprintf(said, cap, "f16/bf16 matmul FLOPs against %s's datasheet dense matrix rate, "
                                "%.1f TFLOP/s (not measured)", a->name, t);
        else
            snprintf(said, cap, "no 16-bit matrix rate for \"%s\" (%s): the floor is the memory floor alone",
                     dev->name, a ? "its entry gives none" : db ? "no architecture entry matches" : e.msg);
    }
    kf_arch_db_free(db);
    return t > 0;
}

int kf_calib_tf32(const kf_device_info *dev, kf_ceilings *out, char *said, size_t cap) {
    kf_arch_db *db = NULL;
    kf_error e = {0};
    const kf_arch_entry *a = dev_entry(dev, &db, &e);
    double t = a && a->peak_tflops_tf32 > 0 ? a->peak_tflops_tf32 : 0;
    out->peak_gflops_tf32 = t * 1e3;
    if (said && cap) {
        const double f32 = out->peak_gflops_f32 / 1e3;
        if (t > 0 && t / 3 > f32 && f32 > 0)
            snprintf(said, cap, "f32 matmul FLOPs against tf32/3 (3xTF32 on tensor cores): %s's datasheet dense "
                                "TF32 rate %.1f / 3 = %.1f TFLOP/s (not measured), above the f32 peak %.1f TFLOP/s",
                     a->name, t, t / 3, f32);
        else if (t > 0)
            snprintf(said, cap, "f32 matmul FLOPs against the f32 peak %.1f TFLOP/s (%s's TF32 rate / 3 = %.1f "
                                "TFLOP/s is not above it)", f32, a->name, t / 3);
        else
            snprintf(said, cap, "f32 matmul FLOPs against the f32 peak: no TF32 rate for \"%s\" (%s)", dev->name,
                     a ? "its entry gives none" : db ? "no architecture entry matches" : e.msg);
    }
    kf_arch_db_free(db);
    return t > 0;
}
