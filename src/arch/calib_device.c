/*
 * Ceilings of a GPU-style device, measured through its own backend (the calibration
 * room's device probes; the front is calib.c).
 *
 * Four kernels: a float4 copy and a float4 fill over buffers of 4x the device's last-level
 * cache (at least 256 MiB, at most a quarter of max_alloc), a register-resident FMA chain
 * (8 independent chains per work-item, so the FMA pipes and not latency bound it) and an
 * empty launch. Each runs several times with device-event timing; the best run counts, as
 * for the CPU calibration: a ceiling is what the device can do, not its mean.
 *
 * Design note. The probes are kforge's own code, not candidates, so they run in this
 * process (compile/load/launch through the backend's interface) rather than through the
 * verifier's sandbox, and they are written once in a small portable spelling: a
 * preprocessor header maps KF_KERNEL, KF_IN, KF_OUT, KF_GID, KF_LOAD4 and KF_STORE4 onto
 * OpenCL C or CUDA by the macros their compilers predefine (__OPENCL_VERSION__,
 * __CUDACC__), so this file names no platform and needs no renderer (arch sits below
 * render in the map). The bodies are what the renderer made of the GPU kernel form before
 * (the same loads, stores and arithmetic). A language without a spelling here (Metal has
 * no backend yet) fails to compile with the #error's reason.
 */
#include "arch/calib_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FMA_ITERS 2048
#define FMA_CHAINS 8

static const char *PROBE_HEADER =
    "#if defined(__OPENCL_VERSION__)\n"
    "#define KF_KERNEL __kernel void\n"
    "#define KF_IN __global const float *restrict\n"
    "#define KF_OUT __global float *restrict\n"
    "#define KF_GID ((int)get_global_id(0))\n"
    "#define KF_LOAD4(p) vload4(0, (p))\n"
    "#define KF_STORE4(p, v) vstore4((v), 0, (p))\n"
    "#elif defined(__CUDACC__)\n"
    "#define KF_KERNEL extern \"C\" __global__ void\n"
    "#define KF_IN const float *__restrict__\n"
    "#define KF_OUT float *__restrict__\n"
    "#define KF_GID ((int)(blockIdx.x * blockDim.x + threadIdx.x))\n"
    "#define KF_LOAD4(p) (*(const float4 *)(p))\n"
    "#define KF_STORE4(p, v) (*(float4 *)(p) = (v))\n"
    "#else\n"
    "#error \"kforge's calibration probes have no spelling for this kernel language\"\n"
    "#endif\n";

static const char *COPY_BODY =
    "int i = KF_GID;\n"
    "KF_STORE4(dst + (i * 4), KF_LOAD4(src + (i * 4)));\n";

/* an empty launch: one group whose only store never happens */
static const char *EMPTY_BODY =
    "int i = KF_GID;\n"
    "if (i < 0) dst[0] = 0.0f;\n";

static const char *FILL_BODY =
    "int i = KF_GID;\n"
    "float4 v;\n"
    "v.x = 1.0f; v.y = 2.0f; v.z = 3.0f; v.w = (float)i;\n"
    "KF_STORE4(dst + (i * 4), v);\n";

/* 8 chains of x = x * a + b; the result depends on every step so nothing is dropped */
static const char *FMA_BODY =
    "int i = KF_GID;\n"
    "float a = src[0], b = src[1];\n"
    "float x0 = (float)i, x1 = x0 + 1.0f, x2 = x0 + 2.0f, x3 = x0 + 3.0f;\n"
    "float x4 = x0 + 4.0f, x5 = x0 + 5.0f, x6 = x0 + 6.0f, x7 = x0 + 7.0f;\n"
    "for (int k = 0; k < %d; k++) {\n"
    "    x0 = x0 * a + b; x1 = x1 * a + b; x2 = x2 * a + b; x3 = x3 * a + b;\n"
    "    x4 = x4 * a + b; x5 = x5 * a + b; x6 = x6 * a + b; x7 = x7 * a + b;\n"
    "}\n"
    "dst[i] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;\n";

typedef struct calib_kernel {
    const char *name;
    const char *body;
    int has_src;
} calib_kernel;

/* Write probe k with a launch line of `items` work-items in groups of wg, compile, load
 * and time it (best of reps; run 0 warms up). */
static kf_status time_kernel(kf_backend *b, const calib_kernel *k, int64_t items, int wg,
                             void *src, void *dst, int reps, const char *workdir, double *best,
                             kf_error *err) {
    kf_buf text = {0};
    kf_buf_printf(&text, "// kforge:launch %s global=%lld local=%d args=%s\n", k->name,
                  (long long)items, wg, k->has_src ? "0,1" : "0");
    kf_buf_puts(&text, PROBE_HEADER);
    kf_buf_printf(&text, "KF_KERNEL %s(%sKF_OUT dst) {\n", k->name, k->has_src ? "KF_IN src, " : "");
    kf_buf_printf(&text, k->body, FMA_ITERS);
    kf_buf_puts(&text, "}\n");
    char art[1024];
    void *mod = NULL;
    kf_status st = kf_backend_compile(b, text.data, NULL, workdir, art, sizeof art, NULL, err);
    if (st == KF_OK) st = b->iface->load(b->ctx, art, k->name, &mod, err);
    void *args[2] = {k->has_src ? src : dst, dst};
    *best = 0;
    for (int r = 0; st == KF_OK && r < reps; r++) {
        double t = 0;
        if (b->iface->launch_timed) {
            st = b->iface->launch_timed(b->ctx, mod, args, k->has_src ? 2 : 1, &t, err);
        } else {
            double a = kf_now();
            st = b->iface->launch(b->ctx, mod, args, k->has_src ? 2 : 1, err);
            if (st == KF_OK) st = kf_backend_sync(b);
            t = kf_now() - a;
        }
        if (st == KF_OK && r > 0 && (*best == 0 || t < *best)) *best = t; /* run 0 warms up */
    }
    if (mod && b->iface->unload) b->iface->unload(b->ctx, mod);
    kf_buf_free(&text);
    return st;
}

/* See calib_int.h. */
kf_status kf_calib_measure_device(kf_backend *b, kf_ceilings *c, kf_error *err) {
    const kf_device_info *d = &b->info;
    int64_t llc = d->l3_bytes > d->l2_bytes ? d->l3_bytes : d->l2_bytes;
    int64_t bytes = 4 * llc;
    if (bytes < (256ll << 20)) bytes = 256ll << 20;
    if (d->max_alloc_bytes > 0 && bytes > d->max_alloc_bytes / 4) bytes = d->max_alloc_bytes / 4;
    int wg = d->max_wg >= 256 ? 256 : (d->max_wg > 0 ? d->max_wg : 64);
    int64_t quads = bytes / 16 / wg * wg;
    bytes = quads * 16;
    char workdir[] = "/tmp/kforge-calib-XXXXXX";
    if (!mkdtemp(workdir))
        return kf_error_set(err, KF_ERR_IO, NULL, 0, 0, "cannot create a calibration directory");
    void *src = kf_backend_alloc(b, (size_t)bytes), *dst = kf_backend_alloc(b, (size_t)bytes);
    kf_status st = KF_OK;
    if (!src || !dst) {
        st = kf_error_set(err, KF_ERR_NOMEM, NULL, 0, 0,
                          "cannot allocate 2 x %lld MiB on the device for calibration",
                          (long long)(bytes >> 20));
        goto out;
    }
    {
        /* defined inputs: the FMA kernel reads a and b from src[0..1] */
        float *host = kf_malloc((size_t)bytes);
        for (int64_t i = 0; i < bytes / 4; i++) host[i] = i == 0 ? 0.999f : (i == 1 ? 0.001f : 1.0f);
        st = kf_backend_copy_in(b, src, host, (size_t)bytes);
        free(host);
        if (st != KF_OK) {
            kf_error_set(err, st, NULL, 0, 0, "calibration: copy to the device failed");
            goto out;
        }
    }
    static const calib_kernel copy = {"kf_calib_copy", NULL, 1};
    static const calib_kernel fill = {"kf_calib_fill", NULL, 0};
    static const calib_kernel fma = {"kf_calib_fma", NULL, 1};
    calib_kernel kc = copy, kw = fill, kq = fma;
    kc.body = COPY_BODY;
    kw.body = FILL_BODY;
    kq.body = FMA_BODY;
    double tc, tw, tf;
    st = time_kernel(b, &kc, quads, wg, src, dst, 8, workdir, &tc, err);
    if (st == KF_OK) st = time_kernel(b, &kw, quads, wg, src, dst, 8, workdir, &tw, err);
    /* enough FMA work-items to fill every unit many times over */
    int64_t fitems = (int64_t)(d->compute_units > 0 ? d->compute_units : 16) * 2048;
    fitems = fitems / wg * wg;
    if (fitems > bytes / 4) fitems = bytes / 4 / wg * wg;
    if (st == KF_OK) st = time_kernel(b, &kq, fitems, wg, src, dst, 6, workdir, &tf, err);
    static const calib_kernel empty = {"kf_calib_empty", NULL, 0};
    calib_kernel ke = empty;
    ke.body = EMPTY_BODY;
    double te = 0;
    if (st == KF_OK) st = time_kernel(b, &ke, wg, wg, src, dst, 21, workdir, &te, err);
    if (st == KF_OK && (tc <= 0 || tw <= 0 || tf <= 0))
        st = kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "calibration: a timing came back zero");
    if (st == KF_OK) {
        c->measured = 1;
        c->copy_gbs = 2.0 * (double)bytes / tc * 1e-9;
        c->read_gbs = c->copy_gbs; /* not measured separately on devices */
        c->write_gbs = (double)bytes / tw * 1e-9;
        c->peak_gflops_f32 = 2.0 * FMA_CHAINS * FMA_ITERS * (double)fitems / tf * 1e-9;
        c->peak_gflops_f64 = 0;
        c->launch_us = te * 1e6;
        c->threads = 1; /* a device measurement has no host threads; the cache wants >= 1 */
        time_t now = time(NULL);
        struct tm tmv;
        gmtime_r(&now, &tmv);
        strftime(c->when, sizeof c->when, "%Y-%m-%d", &tmv);
    }
out:
    kf_backend_free(b, src);
    kf_backend_free(b, dst);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
    if (system(cmd) != 0) { /* a leftover temp directory is harmless */
    }
    return st;
}
