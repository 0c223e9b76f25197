/*
 * kforge platform interface: a table of function pointers plus a context, one per
 * platform (cpu now; opencl, cuda, metal later). A backend probes its device, compiles a
 * candidate's source into an artifact, and (inside the sandboxed runner process) loads the
 * artifact and launches its entry on buffers. Optional slots are NULL; kf_backend_*
 * wrappers supply the defaults (host memory: alloc = malloc, copies = memcpy, sync = no-op).
 *
 * A backend decides nothing about what to run: the agent loop and the verifier call it.
 */
#ifndef KFORGE_BACKEND_H
#define KFORGE_BACKEND_H

#include "kforge/core.h"
#include "kforge/arch.h" /* kf_device_info: what a device is */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kf_backend_iface {
    const char *name; /* "cpu" */
    /* Fill info. Required. */
    kf_status (*probe)(void *ctx, kf_device_info *info, kf_error *err);
    /* Compile source (with extra compiler flags such as -DTILE=64, may be NULL) into an
     * artifact file inside workdir; its path goes to artifact. The compiler's output goes
     * to log (if non-NULL) whether or not it succeeded. KF_ERR_COMPILE on a compile error.
     * Required. */
    kf_status (*compile)(void *ctx, const char *source, const char *flags, const char *workdir,
                         char *artifact, size_t cap, kf_buf *log, kf_error *err);
    /* Load an artifact and resolve entry; *module is the backend's handle. Required. */
    kf_status (*load)(void *ctx, const char *artifact, const char *entry, void **module,
                      kf_error *err);
    /* Run entry once on args (device pointers from alloc, or host pointers on the CPU).
     * Returns the kernel's own non-zero result as KF_ERR_RUNTIME. Required. */
    kf_status (*launch)(void *ctx, void *module, void *const *args, int nargs, kf_error *err);
    void (*unload)(void *ctx, void *module);
    /* Optional device-memory slots (NULL on the CPU). */
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *dev);
    kf_status (*copy_in)(void *ctx, void *dev, const void *host, size_t bytes);
    kf_status (*copy_out)(void *ctx, void *host, const void *dev, size_t bytes);
    kf_status (*sync)(void *ctx);
    void (*destroy)(void *ctx);
    /* Optional: a device pointer for bytes [offset, offset + bytes) of dev (an OpenCL
     * sub-buffer; pointer arithmetic on CUDA); release it with view_free. The verifier
     * surrounds each buffer by guard zones inside one allocation and passes the view. */
    void *(*view)(void *ctx, void *dev, size_t offset, size_t bytes);
    void (*view_free)(void *ctx, void *view);
    /* Optional: launch and measure the device time of the whole launch plan (seconds, from
     * device events); NULL = the runner times launch + sync with the monotonic clock. */
    kf_status (*launch_timed)(void *ctx, void *module, void *const *args, int nargs,
                              double *seconds, kf_error *err);
    /* Optional: evict the device's caches (e.g. write a buffer larger than them);
     * NULL = the runner flushes host caches. */
    kf_status (*flush)(void *ctx, size_t bytes);
    /* Optional: page-lock the host range [host, host + bytes) that copy_in/copy_out move
     * (the runner's region of a device candidate's buffers), so that the copies run at
     * the bus's speed; not mapped into the device's address space. NULL = pageable. */
    kf_status (*host_pin)(void *ctx, void *host, size_t bytes, kf_error *err);
    /* Optional: bytes [offset, offset + bytes) of dev (from alloc) filled with the psize-byte
     * pattern repeated (bytes a multiple of psize; psize 1, 2, 4 or 8), or copied from
     * host. The runner poisons a device candidate's outputs on the device with these
     * instead of copying the poison in; NULL = it writes the poison into the host region
     * and copies the whole buffer with copy_in. */
    kf_status (*fill)(void *ctx, void *dev, size_t offset, const void *pattern, size_t psize,
                      size_t bytes);
    kf_status (*copy_in_at)(void *ctx, void *dev, size_t offset, const void *host, size_t bytes);
    /* Optional: bytes bytes of src (from alloc) copied to dst (from alloc) on the device,
     * both from their start. The runner keeps a device copy of each input set with it and
     * restores a call's inputs from there; NULL = every set is copied in from the host. */
    kf_status (*copy_dd)(void *ctx, void *dst, const void *src, size_t bytes);
} kf_backend_iface;

typedef struct kf_backend {
    const kf_backend_iface *iface;
    void *ctx;
    kf_device_info info; /* filled by kf_backend_open */
} kf_backend;

/* Open a platform by target name: "cpu", "opencl" (device 0), "opencl:N" (device N of
 * the platform's flattened device list, as `kforge devices` numbers them). Returns
 * KF_ERR_UNSUPPORTED naming the known platforms when the name is unknown, the platform is
 * absent on this machine or the device index is out of range. */
kf_status kf_backend_open(const char *name, kf_backend **out, kf_error *err);
/* Whether d is a GPU-style device: not the cpu platform, and not a driver's CPU device
 * (PoCL). Its architecture entry, occupancy and grid rules are a GPU's. */
int kf_device_is_gpu(const kf_device_info *d);
/* Whether d's driver reports a CPU device (PoCL runs OpenCL kernels on the host's cores). */
int kf_device_type_is_cpu(const kf_device_info *d);
/* Every device of platform `name` ("opencl"): *infos (malloc'd, caller frees) gets *n
 * probed entries, index 0..n-1. KF_ERR_UNSUPPORTED when the platform is unknown or absent
 * (with why: no ICD loader, no platform, ...). */
kf_status kf_backend_list(const char *name, kf_device_info **infos, int *n, kf_error *err);
void kf_backend_close(kf_backend *b);
/* Names of the platforms compiled into this build, NULL-terminated. */
const char *const *kf_backend_names(void);

/* Wrappers that supply defaults for NULL slots. */
kf_status kf_backend_compile(kf_backend *b, const char *source, const char *flags,
                             const char *workdir, char *artifact, size_t cap, kf_buf *log,
                             kf_error *err);
void *kf_backend_alloc(kf_backend *b, size_t bytes);
void kf_backend_free(kf_backend *b, void *dev);
kf_status kf_backend_copy_in(kf_backend *b, void *dev, const void *host, size_t bytes);
kf_status kf_backend_copy_out(kf_backend *b, void *host, const void *dev, size_t bytes);
kf_status kf_backend_sync(kf_backend *b);

#ifdef __cplusplus
}
#endif
#endif
