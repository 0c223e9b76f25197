/*
 * The platform registry and the default-supplying wrappers around kf_backend_iface.
 *
 * Each platform folder (src/backend/cpu/, later opencl/, cuda/, metal/) exports one
 * constructor that hands back its iface table and a fresh context; this file is the only
 * place that knows the list. Optional iface slots may be NULL: the wrappers below then act
 * as host memory (malloc/free/memcpy) and a no-op sync, which is exactly right for the CPU.
 * kf_backend_open probes the device once and keeps the answer in b->info.
 */
#include "kforge/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Platform constructors (defined in their folders; see their contract comments). A
 * constructor opens device `index` of its platform; a lister probes every device. */
kf_status kf_backend_cpu_create(int index, const kf_backend_iface **iface, void **ctx,
                                kf_error *err);
kf_status kf_backend_cpu_list(kf_device_info **infos, int *n, kf_error *err);
#ifdef KF_HAVE_OPENCL
kf_status kf_backend_opencl_create(int index, const kf_backend_iface **iface, void **ctx,
                                   kf_error *err);
kf_status kf_backend_opencl_list(kf_device_info **infos, int *n, kf_error *err);
#endif
#ifdef KF_HAVE_CUDA
kf_status kf_backend_cuda_create(int index, const kf_backend_iface **iface, void **ctx,
                                 kf_error *err);
kf_status kf_backend_cuda_list(kf_device_info **infos, int *n, kf_error *err);
#endif

typedef kf_status (*platform_create_fn)(int index, const kf_backend_iface **iface, void **ctx,
                                        kf_error *err);
typedef kf_status (*platform_list_fn)(kf_device_info **infos, int *n, kf_error *err);

static const struct {
    const char *name;
    platform_create_fn create;
    platform_list_fn list;
} platforms[] = {
    {"cpu", kf_backend_cpu_create, kf_backend_cpu_list},
#ifdef KF_HAVE_OPENCL
    {"opencl", kf_backend_opencl_create, kf_backend_opencl_list},
#endif
#ifdef KF_HAVE_CUDA
    {"cuda", kf_backend_cuda_create, kf_backend_cuda_list},
#endif
};

static const char *const platform_names[] = {"cpu",
#ifdef KF_HAVE_OPENCL
                                             "opencl",
#endif
#ifdef KF_HAVE_CUDA
                                             "cuda",
#endif
                                             NULL};

/* Names of the platforms compiled into this build, NULL-terminated; static storage. */
const char *const *kf_backend_names(void) { return platform_names; }

static void known_list(char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; platform_names[i]; i++) {
        int w = snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", platform_names[i]);
        if (w < 0 || (size_t)w >= cap - n) break;
        n += (size_t)w;
    }
}

/* Open platform `name`: create its context and probe its device into (*out)->info.
 * Unknown name, or a platform that cannot work here → KF_ERR_UNSUPPORTED naming the known
 * platforms. On success the caller owns *out (kf_backend_close). */
/* Split "name[:N]" into the platform name and the device index; 0 on a malformed index. */
static int split_target(const char *target, char *name, size_t cap, int *index) {
    const char *colon = strchr(target, ':');
    size_t n = colon ? (size_t)(colon - target) : strlen(target);
    if (n >= cap) n = cap - 1;
    memcpy(name, target, n);
    name[n] = 0;
    *index = 0;
    if (!colon) return 1;
    char *end;
    long v = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || v < 0 || v > 1000) return 0;
    *index = (int)v;
    return 1;
}

kf_status kf_backend_open(const char *target, kf_backend **out, kf_error *err) {
    char known[128], name[32];
    known_list(known, sizeof known);
    *out = NULL;
    if (!target) target = "cpu";
    int index = 0;
    if (!split_target(target, name, sizeof name, &index))
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "bad target '%s': expected PLATFORM or PLATFORM:DEVICE_INDEX "
                            "(known platforms: %s)",
                            target, known);
    for (size_t i = 0; i < sizeof platforms / sizeof platforms[0]; i++) {
        if (strcmp(platforms[i].name, name) != 0) continue;
        const kf_backend_iface *iface = NULL;
        void *ctx = NULL;
        kf_error e = {0};
        kf_status st = platforms[i].create(index, &iface, &ctx, &e);
        if (st != KF_OK)
            return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                                "target '%s' is not usable on this machine: %s (known: %s)",
                                target, e.msg, known);
        kf_backend *b = kf_calloc(1, sizeof *b);
        b->iface = iface;
        b->ctx = ctx;
        st = iface->probe(ctx, &b->info, &e);
        if (st != KF_OK) {
            kf_backend_close(b);
            return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                                "target '%s' is not usable on this machine: %s (known: %s)",
                                target, e.msg, known);
        }
        b->info.index = index;
        *out = b;
        return KF_OK;
    }
    return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                        "unknown platform '%s' (known: %s)", name, known);
}

/* Probe every device of platform name; see backend.h. */
kf_status kf_backend_list(const char *name, kf_device_info **infos, int *n, kf_error *err) {
    char known[128];
    known_list(known, sizeof known);
    *infos = NULL;
    *n = 0;
    for (size_t i = 0; i < sizeof platforms / sizeof platforms[0]; i++) {
        if (strcmp(platforms[i].name, name) != 0) continue;
        kf_error e = {0};
        kf_status st = platforms[i].list(infos, n, &e);
        if (st != KF_OK)
            return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                                "platform '%s' is not usable on this machine: %s", name, e.msg);
        for (int k = 0; k < *n; k++) (*infos)[k].index = k;
        return KF_OK;
    }
    return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                        "unknown platform '%s' (known: %s)", name, known);
}

/* Release b and its context; NULL is a no-op. */
void kf_backend_close(kf_backend *b) {
    if (!b) return;
    if (b->iface && b->iface->destroy) b->iface->destroy(b->ctx);
    free(b);
}

/* Compile through the iface (required slot); see backend.h for the contract. */
kf_status kf_backend_compile(kf_backend *b, const char *source, const char *flags,
                             const char *workdir, char *artifact, size_t cap, kf_buf *log,
                             kf_error *err) {
    if (!b || !source || !workdir || !artifact || cap == 0)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_backend_compile: missing argument");
    return b->iface->compile(b->ctx, source, flags, workdir, artifact, cap, log, err);
}

/* Device allocation, defaulting to host malloc; NULL on failure. */
void *kf_backend_alloc(kf_backend *b, size_t bytes) {
    if (b->iface->alloc) return b->iface->alloc(b->ctx, bytes);
    return malloc(bytes ? bytes : 1);
}

/* Free what kf_backend_alloc returned; NULL is a no-op. */
void kf_backend_free(kf_backend *b, void *dev) {
    if (!dev) return;
    if (b->iface->free) b->iface->free(b->ctx, dev);
    else free(dev);
}

/* Host → device copy, defaulting to memcpy. */
kf_status kf_backend_copy_in(kf_backend *b, void *dev, const void *host, size_t bytes) {
    if (b->iface->copy_in) return b->iface->copy_in(b->ctx, dev, host, bytes);
    if (bytes) memcpy(dev, host, bytes);
    return KF_OK;
}

/* Device → host copy, defaulting to memcpy. */
kf_status kf_backend_copy_out(kf_backend *b, void *host, const void *dev, size_t bytes) {
    if (b->iface->copy_out) return b->iface->copy_out(b->ctx, host, dev, bytes);
    if (bytes) memcpy(host, dev, bytes);
    return KF_OK;
}

/* Wait for the device, defaulting to nothing (host execution is synchronous). */
kf_status kf_backend_sync(kf_backend *b) {
    if (b->iface->sync) return b->iface->sync(b->ctx);
    return KF_OK;
}
