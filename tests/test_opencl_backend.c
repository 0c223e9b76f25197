/*
 * Tests of the OpenCL backend (src/backend/opencl/) on whatever OpenCL device 0 is (PoCL
 * on a CPU here, the GPU driver elsewhere): device listing, out-of-range devices, compile +
 * load + launch in this process with guard zones around every buffer, launch plans with
 * tunables and scratch buffers, timed launches, and the compile errors a candidate can
 * make (syntax, missing kernel, wrong argument count, oversized work-group). Every test
 * skips with the reason when no OpenCL device is usable. KFORGE_TEST_OPENCL picks the
 * device under test (default "opencl", i.e. opencl:0), e.g. opencl:1 for the GPU on a
 * machine where PoCL comes first.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "fill_check.h"

#define GUARD 4096
#define GUARD_BYTE 0xA5

static const char *target(void) {
    const char *t = getenv("KFORGE_TEST_OPENCL");
    return t && t[0] ? t : "opencl";
}

static kf_backend *open_ocl(void) {
    kf_backend *b = NULL;
    kf_error err = {0};
    if (kf_backend_open(target(), &b, &err) != KF_OK) {
        cr_skip_test("no usable OpenCL device: %s", err.msg);
        return NULL;
    }
    cr_assert_not_null(b);
    return b;
}

static void workdir(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/test-work/opencl-%s-%ld", KF_BUILD_DIR, name, (long)getpid());
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(buf, &err), KF_OK, "%s", err.msg);
}

/* A device buffer with guard zones: one allocation of GUARD + bytes + GUARD, and a view
 * of the middle that the kernel gets. */
typedef struct gbuf {
    void *whole, *view;
    size_t bytes;
} gbuf;

static void gbuf_make(kf_backend *b, gbuf *g, const void *init, size_t bytes) {
    g->bytes = bytes;
    size_t total = 2 * GUARD + bytes;
    g->whole = kf_backend_alloc(b, total);
    cr_assert_not_null(g->whole, "alloc %zu bytes", total);
    unsigned char *host = malloc(total);
    memset(host, GUARD_BYTE, total);
    memcpy(host + GUARD, init, bytes);
    cr_assert_eq(kf_backend_copy_in(b, g->whole, host, total), KF_OK);
    free(host);
    g->view = b->iface->view(b->ctx, g->whole, GUARD, bytes);
    cr_assert_not_null(g->view, "view at %d of %zu bytes", GUARD, bytes);
}

/* Copy the middle out and return whether both guard zones are untouched. */
static int gbuf_read(kf_backend *b, gbuf *g, void *out) {
    size_t total = 2 * GUARD + g->bytes;
    unsigned char *host = malloc(total);
    cr_assert_eq(kf_backend_copy_out(b, host, g->whole, total), KF_OK);
    int intact = 1;
    for (size_t i = 0; i < GUARD; i++)
        if (host[i] != GUARD_BYTE || host[GUARD + g->bytes + i] != GUARD_BYTE) intact = 0;
    memcpy(out, host + GUARD, g->bytes);
    free(host);
    return intact;
}

static void gbuf_free(kf_backend *b, gbuf *g) {
    b->iface->view_free(b->ctx, g->view);
    kf_backend_free(b, g->whole);
}

static kf_status compile(kf_backend *b, const char *src, const char *flags, const char *name,
                         char *artifact, kf_buf *log, kf_error *err) {
    char dir[512];
    workdir(dir, sizeof dir, name);
    return kf_backend_compile(b, src, flags, dir, artifact, 4096, log, err);
}

static void *load(kf_backend *b, const char *src, const char *flags, const char *name) {
    char artifact[4096];
    kf_buf log = {0};
    kf_error err = {0};
    kf_status st = compile(b, src, flags, name, artifact, &log, &err);
    cr_assert_eq(st, KF_OK, "compile: %s\nlog:\n%s", err.msg, log.data ? log.data : "");
    kf_buf_free(&log);
    void *mod = NULL;
    st = b->iface->load(b->ctx, artifact, NULL, &mod, &err);
    cr_assert_eq(st, KF_OK, "load: %s", err.msg);
    cr_assert_not_null(mod);
    return mod;
}

static const char *vadd_src =
    "// kforge:launch vadd global=1024 local=64 args=0,1,2\n"
    "__kernel void vadd(__global const float *a, __global const float *b,\n"
    "                   __global float *c) {\n"
    "    size_t i = get_global_id(0);\n"
    "    c[i] = a[i] + b[i];\n"
    "}\n";

Test(opencl, list_is_sane) {
    kf_device_info *d = NULL;
    int n = 0;
    kf_error err = {0};
    if (kf_backend_list("opencl", &d, &n, &err) != KF_OK) cr_skip_test("%s", err.msg);
    cr_assert_geq(n, 1);
    for (int i = 0; i < n; i++) {
        cr_assert_str_eq(d[i].platform, "opencl");
        cr_assert_eq(d[i].index, i);
        cr_assert(d[i].name[0], "device %d has no name", i);
        cr_assert(d[i].platform_name[0], "device %d has no platform name", i);
        cr_assert(strncmp(d[i].version, "OpenCL ", 7) == 0, "version '%s'", d[i].version);
        cr_assert(strstr(d[i].lang_version, "OpenCL C"), "lang '%s'", d[i].lang_version);
        cr_assert(!strcmp(d[i].device_type, "cpu") || !strcmp(d[i].device_type, "gpu") ||
                      !strcmp(d[i].device_type, "accelerator"),
                  "type '%s'", d[i].device_type);
        cr_assert_geq(d[i].max_wg, 1);
        cr_assert_geq(d[i].max_wi[0], 1);
        cr_assert_leq(d[i].max_wi[0], d[i].max_wg > 0 ? (1 << 30) : 0);
        cr_assert_gt(d[i].local_mem_bytes, 0);
        cr_assert_gt(d[i].global_mem_bytes, 0);
        cr_assert_eq(d[i].mem_bytes, d[i].global_mem_bytes);
        cr_assert_gt(d[i].max_alloc_bytes, 0);
        cr_assert_leq(d[i].max_alloc_bytes, d[i].global_mem_bytes);
        cr_assert_geq(d[i].compute_units, 1);
        cr_assert_eq(d[i].cores, d[i].compute_units);
        cr_assert_geq(d[i].simd_bits, 128);
        cr_assert_gt(d[i].base_align_bytes, 0);
        cr_assert_leq(d[i].base_align_bytes, GUARD, "guard views need %d-byte alignment",
                      d[i].base_align_bytes);
        cr_assert(d[i].subgroup_size >= 0 && d[i].subgroup_size <= 128);
        cr_assert(strstr(d[i].compiler, " / "), "compiler '%s'", d[i].compiler);
        cr_assert(strstr(d[i].flags, "-cl-std=CL1.2"), "flags '%s'", d[i].flags);
        cr_assert_null(strstr(d[i].flags, "fast"), "flags '%s' relax IEEE", d[i].flags);
        cr_assert_null(strstr(d[i].flags, "-cl-mad-enable"), "flags '%s'", d[i].flags);
    }
    free(d);
}

Test(opencl, open_out_of_range_names_the_count) {
    kf_device_info *d = NULL;
    int n = 0;
    kf_error err = {0};
    if (kf_backend_list("opencl", &d, &n, &err) != KF_OK) cr_skip_test("%s", err.msg);
    free(d);
    kf_backend *b = (kf_backend *)1;
    kf_status st = kf_backend_open("opencl:999", &b, &err);
    cr_assert_eq(st, KF_ERR_UNSUPPORTED);
    cr_assert_null(b);
    char want[64];
    snprintf(want, sizeof want, "has %d OpenCL device", n);
    cr_assert(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
    /* the last device opens */
    char last[32];
    snprintf(last, sizeof last, "opencl:%d", n - 1);
    st = kf_backend_open(last, &b, &err);
    cr_assert_eq(st, KF_OK, "%s: %s", last, err.msg);
    cr_assert_eq(b->info.index, n - 1);
    kf_backend_close(b);
}

Test(opencl, probe_matches_list) {
    kf_backend *b = open_ocl();
    kf_device_info *d = NULL;
    int n = 0;
    kf_error err = {0};
    cr_assert_eq(kf_backend_list("opencl", &d, &n, &err), KF_OK, "%s", err.msg);
    int i = b->info.index;
    cr_assert(i >= 0 && i < n);
    cr_assert_str_eq(b->info.name, d[i].name);
    cr_assert_str_eq(b->info.driver, d[i].driver);
    cr_assert_eq(b->info.max_wg, d[i].max_wg);
    cr_assert_str_eq(b->info.flags, d[i].flags);
    free(d);
    kf_backend_close(b);
}

/* The runner poisons a device candidate's outputs on the device (fill_check.h). */
Test(opencl, fill_and_copy_in_at_touch_only_their_bytes) {
    kf_backend *b = open_ocl();
    check_fill_and_copy_in_at(b);
    kf_backend_close(b);
}

Test(opencl, vadd_with_guards) {
    kf_backend *b = open_ocl();
    enum { N = 1024 };
    float a[N], bb[N], c[N], nan[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i * 0.5f - 100.0f;
        bb[i] = (float)(i % 7) + 0.25f;
        nan[i] = NAN;
    }
    char artifact[4096];
    kf_buf log = {0};
    kf_error err = {0};
    cr_assert_eq(compile(b, vadd_src, NULL, "vadd", artifact, &log, &err), KF_OK, "%s", err.msg);
    cr_assert(strstr(artifact, ".clk"), "artifact '%s'", artifact);
    /* the artifact holds the options line, then the source */
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(kf_read_file(artifact, &text, &len, &err), KF_OK);
    cr_assert(strncmp(text, b->info.flags, strlen(b->info.flags)) == 0, "first line: %.80s", text);
    cr_assert_str_eq(strchr(text, '\n') + 1, vadd_src);
    free(text);
    kf_buf_free(&log);

    void *mod = NULL;
    cr_assert_eq(b->iface->load(b->ctx, artifact, NULL, &mod, &err), KF_OK, "%s", err.msg);
    gbuf ga, gb, gc;
    gbuf_make(b, &ga, a, sizeof a);
    gbuf_make(b, &gb, bb, sizeof bb);
    gbuf_make(b, &gc, nan, sizeof nan);
    void *args[3] = {ga.view, gb.view, gc.view};
    cr_assert_eq(b->iface->launch(b->ctx, mod, args, 3, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_backend_sync(b), KF_OK);
    cr_assert(gbuf_read(b, &gc, c), "output guard touched");
    for (int i = 0; i < N; i++) cr_assert_eq(c[i], a[i] + bb[i], "c[%d] = %g", i, c[i]);
    float back[N];
    cr_assert(gbuf_read(b, &ga, back), "input guard touched");
    cr_assert(memcmp(back, a, sizeof a) == 0, "input changed");

    /* timed: same results, a positive device time */
    double secs = -1;
    cr_assert_eq(b->iface->launch_timed(b->ctx, mod, args, 3, &secs, &err), KF_OK, "%s", err.msg);
    cr_assert_gt(secs, 0.0);
    cr_assert_lt(secs, 10.0);
    cr_assert_eq(b->iface->flush(b->ctx, 8u << 20), KF_OK);
    cr_assert_eq(b->iface->flush(b->ctx, 1u << 20), KF_OK);

    /* fewer buffers than the plan names */
    err = (kf_error){0};
    cr_assert_eq(b->iface->launch(b->ctx, mod, args, 2, &err), KF_ERR_RUNTIME);
    cr_assert(strstr(err.msg, "vadd") && strstr(err.msg, "buffer 2"), "message: %s", err.msg);

    gbuf_free(b, &ga);
    gbuf_free(b, &gb);
    gbuf_free(b, &gc);
    b->iface->unload(b->ctx, mod);
    kf_backend_close(b);
}

/* The guard check itself can fail: a kernel that writes one element past its output. */
Test(opencl, guard_detects_overrun) {
    kf_backend *b = open_ocl();
    const char *src =
        "// kforge:launch over global=256 local=64 args=0\n"
        "__kernel void over(__global float *o) {\n"
        "    size_t i = get_global_id(0);\n"
        "    o[i + 1] = 1.0f;\n"
        "}\n";
    void *mod = load(b, src, NULL, "over");
    float init[256] = {0}, out[256];
    gbuf g;
    gbuf_make(b, &g, init, sizeof init);
    void *args[1] = {g.view};
    kf_error err = {0};
    cr_assert_eq(b->iface->launch(b->ctx, mod, args, 1, &err), KF_OK, "%s", err.msg);
    cr_assert_not(gbuf_read(b, &g, out), "an overrun left the guard intact");
    cr_assert_eq(out[255], 1.0f);
    cr_assert_eq(out[0], 0.0f);
    gbuf_free(b, &g);
    b->iface->unload(b->ctx, mod);
    kf_backend_close(b);
}

Test(opencl, syntax_error_gives_log_with_line) {
    kf_backend *b = open_ocl();
    const char *src =
        "// kforge:launch vadd global=64 local=64 args=0\n"
        "__kernel void vadd(__global float *c) {\n"
        "    c[get_global_id(0)] = 1.0f +;\n"
        "}\n";
    char artifact[4096] = "";
    kf_buf log = {0};
    kf_error err = {0};
    kf_status st = compile(b, src, NULL, "syntax", artifact, &log, &err);
    cr_assert_eq(st, KF_ERR_COMPILE);
    cr_assert_not_null(log.data);
    cr_assert(strstr(log.data, "error"), "log: %s", log.data);
    cr_assert(strstr(log.data, ":3:"), "log does not name line 3: %s", log.data);
    cr_assert(strstr(err.msg, "error"), "message: %s", err.msg);
    cr_assert_eq(err.line, 3, "line %d, message: %s", err.line, err.msg);
    cr_assert_str_eq(artifact, "");
    kf_buf_free(&log);
    kf_backend_close(b);
}

Test(opencl, missing_kernel_and_wrong_arity) {
    kf_backend *b = open_ocl();
    char src[512];
    snprintf(src, sizeof src, "%s", vadd_src);
    memcpy(strstr(src, "launch vadd") + 7, "vmul", 4);
    char artifact[4096];
    kf_error err = {0};
    cr_assert_eq(compile(b, src, NULL, "missing", artifact, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "'vmul'") && strstr(err.msg, "not defined"), "message: %s", err.msg);

    snprintf(src, sizeof src, "%s", vadd_src);
    memcpy(strstr(src, "args=0,1,2"), "args=0,1  ", 10);
    err = (kf_error){0};
    cr_assert_eq(compile(b, src, NULL, "arity", artifact, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "3 arguments") && strstr(err.msg, "passes 2"), "message: %s", err.msg);
    kf_backend_close(b);
}

Test(opencl, oversized_work_group) {
    kf_backend *b = open_ocl();
    const char *src =
        "// kforge:launch one global=8192 local=8192 args=0\n"
        "__kernel void one(__global float *c) { c[get_global_id(0)] = 1.0f; }\n";
    if (b->info.max_wg >= 8192) cr_skip_test("device allows %d work-items per group", b->info.max_wg);
    char artifact[4096];
    kf_error err = {0};
    cr_assert_eq(compile(b, src, NULL, "bigwg", artifact, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "'one'") && strstr(err.msg, "8192"), "message: %s", err.msg);
    kf_backend_close(b);
}

/* dynamic shared memory is CUDA's launch option: an OpenCL plan with it is refused */
Test(opencl, smem_is_refused) {
    kf_backend *b = open_ocl();
    const char *src = "// kforge:launch one global=64 local=64 smem=1024 args=0\n"
                      "__kernel void one(__global float *c) { c[get_global_id(0)] = 1.0f; }\n";
    char artifact[4096];
    kf_error err = {0};
    cr_assert_eq(compile(b, src, NULL, "smem", artifact, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "launch 1") && strstr(err.msg, "CUDA launch option"), "message: %s", err.msg);
    kf_backend_close(b);
}

Test(opencl, bad_plan_is_parse_error) {
    kf_backend *b = open_ocl();
    const char *src = "__kernel void k(__global float *c) { c[0] = 1.0f; }\n";
    char artifact[4096];
    kf_error err = {0};
    cr_assert_eq(compile(b, src, NULL, "noplan", artifact, NULL, &err), KF_ERR_PARSE);
    const char *src2 =
        "// kforge:launch k global=100 local=64 args=0\n"
        "__kernel void k(__global float *c) { c[0] = 1.0f; }\n";
    cr_assert_eq(compile(b, src2, NULL, "noplan", artifact, NULL, &err), KF_ERR_PARSE);
    kf_backend_close(b);
}

static const char *vscale_src =
    "// kforge:tunable VW 1 4\n"
    "// kforge:launch vscale global=cdiv(cdiv(N,VW),64)*64 local=64 args=0,1\n"
    "__kernel void vscale(__global const float *x, __global float *y) {\n"
    "    size_t base = get_global_id(0) * VW;\n"
    "    for (int j = 0; j < VW; j++)\n"
    "        if (base + j < N) y[base + j] = 3.0f * x[base + j];\n"
    "}\n";

static void run_vscale(const char *flags) {
    kf_backend *b = open_ocl();
    enum { N = 1000 };
    float x[N], y[N], nan[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i - 500) * 0.125f;
        nan[i] = NAN;
    }
    void *mod = load(b, vscale_src, flags, "vscale");
    gbuf gx, gy;
    gbuf_make(b, &gx, x, sizeof x);
    gbuf_make(b, &gy, nan, sizeof nan);
    void *args[2] = {gx.view, gy.view};
    kf_error err = {0};
    cr_assert_eq(b->iface->launch(b->ctx, mod, args, 2, &err), KF_OK, "%s", err.msg);
    cr_assert(gbuf_read(b, &gy, y), "guard touched (%s)", flags);
    for (int i = 0; i < N; i++) cr_assert_eq(y[i], 3.0f * x[i], "y[%d] = %g (%s)", i, y[i], flags);
    gbuf_free(b, &gx);
    gbuf_free(b, &gy);
    b->iface->unload(b->ctx, mod);
    kf_backend_close(b);
}

Test(opencl, tunable_in_launch_expression_vw4) { run_vscale("-DN=1000 -DVW=4"); }
Test(opencl, tunable_in_launch_expression_vw1) { run_vscale("-DN=1000 -DVW=1"); }

Test(opencl, scratch_between_launches) {
    kf_backend *b = open_ocl();
    const char *src =
        "// kforge:scratch tmp 1024*4\n"
        "// kforge:launch produce global=1024 local=64 args=0,tmp\n"
        "// kforge:launch consume global=1024 local=64 args=tmp,1\n"
        "__kernel void produce(__global const float *a, __global float *t) {\n"
        "    size_t i = get_global_id(0);\n"
        "    t[1023 - i] = 2.0f * a[i] + 1.0f;\n"
        "}\n"
        "__kernel void consume(__global const float *t, __global float *o) {\n"
        "    size_t i = get_global_id(0);\n"
        "    o[i] = t[1023 - i];\n"
        "}\n";
    enum { N = 1024 };
    float a[N], o[N], nan[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i - 17.5f;
        nan[i] = NAN;
    }
    void *mod = load(b, src, NULL, "scratch");
    gbuf ga, go;
    gbuf_make(b, &ga, a, sizeof a);
    gbuf_make(b, &go, nan, sizeof nan);
    void *args[2] = {ga.view, go.view};
    kf_error err = {0};
    for (int rep = 0; rep < 2; rep++) {
        double secs = 0;
        kf_status st = rep == 0 ? b->iface->launch(b->ctx, mod, args, 2, &err)
                                : b->iface->launch_timed(b->ctx, mod, args, 2, &secs, &err);
        cr_assert_eq(st, KF_OK, "rep %d: %s", rep, err.msg);
        cr_assert(gbuf_read(b, &go, o), "guard touched");
        for (int i = 0; i < N; i++) cr_assert_eq(o[i], 2.0f * a[i] + 1.0f, "o[%d] = %g", i, o[i]);
        if (rep == 1) cr_assert_gt(secs, 0.0);
        cr_assert_eq(kf_backend_copy_in(b, go.view, nan, sizeof nan), KF_OK);
    }
    gbuf_free(b, &ga);
    gbuf_free(b, &go);
    b->iface->unload(b->ctx, mod);
    kf_backend_close(b);
}

Test(opencl, load_rejects_bad_artifact) {
    kf_backend *b = open_ocl();
    char dir[512], path[600];
    workdir(dir, sizeof dir, "badart");
    snprintf(path, sizeof path, "%s/bad.clk", dir);
    kf_error err = {0};
    cr_assert_eq(kf_write_file(path, "no newline", 10, &err), KF_OK);
    void *mod = (void *)1;
    cr_assert_eq(b->iface->load(b->ctx, path, NULL, &mod, &err), KF_ERR_RUNTIME);
    cr_assert_null(mod);
    snprintf(path, sizeof path, "%s/missing.clk", dir);
    cr_assert_neq(b->iface->load(b->ctx, path, NULL, &mod, &err), KF_OK);
    kf_backend_close(b);
}

/* Without any ICD the platform says why and how to get one. The ICD loader reads
 * OCL_ICD_VENDORS when this process first calls OpenCL (each test runs in its own child). */
Test(opencl, no_platform_says_why) {
    char dir[512];
    workdir(dir, sizeof dir, "no-icd");
    setenv("OCL_ICD_VENDORS", dir, 1);
    unsetenv("OCL_ICD_FILENAMES");
    kf_backend *b = NULL;
    kf_error err = {0};
    kf_status st = kf_backend_open("opencl", &b, &err);
    if (st == KF_OK) {
        kf_backend_close(b);
        cr_skip_test("this ICD loader ignores OCL_ICD_VENDORS");
    }
    cr_assert_eq(st, KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "no OpenCL platform") && strstr(err.msg, "ICD"), "message: %s",
              err.msg);
    kf_device_info *d = (kf_device_info *)1;
    int n = 5;
    cr_assert_eq(kf_backend_list("opencl", &d, &n, &err), KF_ERR_UNSUPPORTED);
    cr_assert_null(d);
    cr_assert_eq(n, 0);
}
