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

/* Platform constructors (defined in their folders; see their contract comments). */
kf_status kf_backend_cpu_create(const kf_backend_iface **iface, void **ctx, kf_error *err);

typedef kf_status (*platform_create_fn)(const kf_backend_iface **iface, void **ctx,
                                        kf_error *err);

static const struct {
    const char *name;
    platform_create_fn create;
} platforms[] = {
    {"cpu", kf_backend_cpu_create},
};

static const char *const platform_names[] = {"cpu", NULL};

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
kf_status kf_backend_open(const char *name, kf_backend **out, kf_error *err) {
    char known[128];
    known_list(known, sizeof known);
    *out = NULL;
    if (!name) name = "cpu";
    for (size_t i = 0; i < sizeof platforms / sizeof platforms[0]; i++) {
        if (strcmp(platforms[i].name, name) != 0) continue;
        const kf_backend_iface *iface = NULL;
        void *ctx = NULL;
        kf_error e = {0};
        kf_status st = platforms[i].create(&iface, &ctx, &e);
        if (st != KF_OK)
            return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                                "platform '%s' is not usable on this machine: %s (known: %s)",
                                name, e.msg, known);
        kf_backend *b = kf_calloc(1, sizeof *b);
        b->iface = iface;
        b->ctx = ctx;
        st = iface->probe(ctx, &b->info, &e);
        if (st != KF_OK) {
            kf_backend_close(b);
            return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                                "platform '%s' is not usable on this machine: %s (known: %s)",
                                name, e.msg, known);
        }
        *out = b;
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
