/*
 * Tests of the CUDA backend (src/backend/cuda/).
 *
 * Without a GPU: NVRTC compiles for sm_90 into a real CUBIN (an ELF image), reports a
 * syntax error with its line, takes -DNAME=V options; nvcc (when on PATH) builds the nvcc
 * form into a .so that exports kforge_kernel; the platform says why it cannot open (no
 * driver, or the toolkit's stub library). Each skips with the reason when NVRTC or nvcc is
 * absent.
 *
 * With a GPU (kf_backend_open of KFORGE_TEST_CUDA, default "cuda", succeeds; else each
 * skips with the reason): device listing, a vector add through alloc/view/copy_in/launch/
 * copy_out with guard zones, timed launches, scratch buffers between launches, the
 * compile-time checks (missing kernel, argument count, oversized blocks), a device fault
 * (illegal address) reported with its CUresult name, and the nvcc form end to end; then
 * the same through the verifier and the sandboxed runner (kforge-runner, found through
 * KFORGE_RUNNER as ctest sets it): a correct kernel passes and is timed, an overrun is an
 * out-of-bounds write, a device fault is a crash of the candidate and not of the test.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"
#include "fill_check.h"

#ifdef KF_HAVE_CUDA
#include "backend/cuda/cuda_int.h"

#define GUARD 4096
#define GUARD_BYTE 0xA5

static const char *target(void) {
    const char *t = getenv("KFORGE_TEST_CUDA");
    return t && t[0] ? t : "cuda";
}

static kf_backend *open_cuda(void) {
    kf_backend *b = NULL;
    kf_error err = {0};
    if (kf_backend_open(target(), &b, &err) != KF_OK) {
        cr_skip_test("no usable CUDA device: %s", err.msg);
        return NULL;
    }
    cr_assert_not_null(b);
    return b;
}

static void need_nvrtc(void) {
    char v[64];
    kf_error err = {0};
    if (kf_cuda_nvrtc_version(v, sizeof v, &err) != KF_OK) cr_skip_test("%s", err.msg);
}

static void need_nvcc(void) {
    char path[4096];
    kf_error err = {0};
    if (kf_cuda_nvcc_find(path, sizeof path, &err) != KF_OK) cr_skip_test("%s", err.msg);
}

static void workdir(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/test-work/cuda-%s-%ld", KF_BUILD_DIR, name, (long)getpid());
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(buf, &err), KF_OK, "%s", err.msg);
}

static const char *vadd_src =
    "// kforge:launch vadd global=cdiv(N,256)*256 local=256 args=0,1,2\n"
    "extern \"C\" __global__ void vadd(const float *a, const float *b, float *c) {\n"
    "    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < N) c[i] = a[i] + b[i];\n"
    "}\n";

/* ---- without a device ---- */

Test(cuda_nvrtc, form_is_told_by_launch_lines) {
    cr_assert(kf_cuda_is_nvrtc_form(vadd_src));
    cr_assert_not(kf_cuda_is_nvrtc_form("extern \"C\" int kforge_kernel(void *const *a) "
                                        "{ return 0; }\n"));
    cr_assert_not(kf_cuda_is_nvrtc_form(NULL));
}

Test(cuda_nvrtc, compiles_a_cubin_for_sm90) {
    need_nvrtc();
    kf_buf bin = {0}, log = {0};
    kf_error err = {0};
    kf_status st = kf_cuda_nvrtc_compile(vadd_src, "sm_90", "-default-device --std=c++17 -DN=1000",
                                         &bin, &log, &err);
    cr_assert_eq(st, KF_OK, "%s\nlog:\n%s", err.msg, log.data ? log.data : "");
    /* real SASS comes as an ELF image (PTX would be text starting with "//") */
    cr_assert_gt(bin.len, 64);
    cr_assert(memcmp(bin.data, "\x7f" "ELF", 4) == 0, "not an ELF cubin");
    kf_buf_free(&bin);
    kf_buf_free(&log);
}

Test(cuda_nvrtc, syntax_error_names_the_line) {
    need_nvrtc();
    const char *src =
        "extern \"C\" __global__ void k(float *a) {\n"
        "    a[threadIdx.x] = 1.0f\n"
        "    a[0] += 2.0f;\n"
        "}\n";
    kf_buf bin = {0}, log = {0};
    kf_error err = {0};
    kf_status st = kf_cuda_nvrtc_compile(src, "sm_90", NULL, &bin, &log, &err);
    cr_assert_eq(st, KF_ERR_COMPILE, "status %d: %s", st, err.msg);
    cr_assert_eq(bin.len, 0);
    cr_assert_eq(err.line, 3, "line %d, message: %s", err.line, err.msg);
    cr_assert(strstr(err.msg, "error"), "message: %s", err.msg);
    cr_assert(log.data && strstr(log.data, "candidate.cu(3)"), "log: %s", log.data);
    kf_buf_free(&log);
}

Test(cuda_nvrtc, defines_reach_the_source) {
    need_nvrtc();
    const char *src =
        "#if N != 4\n"
        "#error N must be 4 here\n"
        "#endif\n"
        "extern \"C\" __global__ void k(float *a) { a[threadIdx.x] = N; }\n";
    kf_buf bin = {0}, log = {0};
    kf_error err = {0};
    cr_assert_eq(kf_cuda_nvrtc_compile(src, "sm_90", "-DN=4", &bin, &log, &err), KF_OK, "%s",
                 err.msg);
    cr_assert_gt(bin.len, 0);
    kf_buf_free(&bin);
    err = (kf_error){0};
    cr_assert_eq(kf_cuda_nvrtc_compile(src, "sm_90", "-DN=5", &bin, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "N must be 4"), "message: %s", err.msg);
    kf_buf_free(&bin);
    kf_buf_free(&log);
}

Test(cuda_nvrtc, virtual_arch_and_bad_option_are_refused) {
    need_nvrtc();
    kf_buf bin = {0};
    kf_error err = {0};
    cr_assert_eq(kf_cuda_nvrtc_compile(vadd_src, "sm_90", "--gpu-architecture=compute_90 -DN=8",
                                       &bin, NULL, &err),
                 KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "CUBIN"), "message: %s", err.msg);
    err = (kf_error){0};
    cr_assert_eq(kf_cuda_nvrtc_compile(vadd_src, "sm_90", "-DN=8 --no-such-option", &bin, NULL,
                                       &err),
                 KF_ERR_COMPILE);
    kf_buf_free(&bin);
}

static const char *nvcc_src =
    "__global__ void axpy(const float *x, float *y, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = SCALE * x[i] + y[i];\n"
    "}\n"
    "extern \"C\" int kforge_kernel(void *const *args) {\n"
    "    int n = 1000;\n"
    "    axpy<<<(n + 127) / 128, 128>>>((const float *)args[0], (float *)args[1], n);\n"
    "    return cudaGetLastError() == cudaSuccess ? RC : 1;\n"
    "}\n";

Test(cuda_nvcc, builds_the_nvcc_form) {
    need_nvcc();
    char dir[512], artifact[4096];
    workdir(dir, sizeof dir, "nvcc");
    kf_buf log = {0};
    kf_error err = {0};
    kf_status st = kf_cuda_nvcc_compile(nvcc_src, "sm_90", "-DSCALE=2.0f -DRC=0", dir, artifact,
                                        sizeof artifact, &log, &err);
    cr_assert_eq(st, KF_OK, "%s\nlog:\n%s", err.msg, log.data ? log.data : "");
    size_t n = strlen(artifact);
    cr_assert(n > 3 && strcmp(artifact + n - 3, ".so") == 0, "artifact %s", artifact);
    cr_assert(strstr(log.data, "-arch=sm_90") && strstr(log.data, "-DSCALE=2.0f"), "log: %s",
              log.data);
    /* the entry is exported (loading runs no CUDA call: the runtime starts lazily) */
    void *h = dlopen(artifact, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(h, "%s", dlerror());
    cr_assert_not_null(dlsym(h, "kforge_kernel"));
    /* same source and flags: reused, not rebuilt */
    kf_buf log2 = {0};
    char again[4096];
    cr_assert_eq(kf_cuda_nvcc_compile(nvcc_src, "sm_90", "-DSCALE=2.0f -DRC=0", dir, again,
                                      sizeof again, &log2, &err),
                 KF_OK);
    cr_assert_str_eq(again, artifact);
    cr_assert(strstr(log2.data, "reusing"), "log: %s", log2.data);
    kf_buf_free(&log);
    kf_buf_free(&log2);
}

Test(cuda_nvcc, nvcc_error_is_a_compile_error) {
    need_nvcc();
    char dir[512], artifact[4096];
    workdir(dir, sizeof dir, "nvccerr");
    kf_buf log = {0};
    kf_error err = {0};
    /* SCALE undefined */
    kf_status st = kf_cuda_nvcc_compile(nvcc_src, "sm_90", "-DRC=0", dir, artifact,
                                        sizeof artifact, &log, &err);
    cr_assert_eq(st, KF_ERR_COMPILE, "status %d: %s", st, err.msg);
    cr_assert(strstr(err.msg, "SCALE"), "message: %s", err.msg);
    cr_assert_eq(err.line, 3, "line %d: %s", err.line, err.msg);
    kf_buf_free(&log);
}

/* Without a GPU the platform says why; with one, opening works and says what it is. */
Test(cuda_platform, open_says_why_or_works) {
    kf_backend *b = NULL;
    kf_error err = {0};
    kf_status st = kf_backend_open(target(), &b, &err);
    if (st != KF_OK) {
        cr_assert_eq(st, KF_ERR_UNSUPPORTED);
        cr_assert(strstr(err.msg, "no CUDA driver") || strstr(err.msg, "cuInit") ||
                      strstr(err.msg, "no device") || strstr(err.msg, "CUDA device"),
                  "message: %s", err.msg);
        kf_device_info *d = NULL;
        int n = -1;
        cr_assert_eq(kf_backend_list("cuda", &d, &n, &err), KF_ERR_UNSUPPORTED);
        cr_assert_eq(n, 0);
        cr_assert_null(d);
        return;
    }
    cr_assert_str_eq(b->info.platform, "cuda");
    cr_assert(strncmp(b->info.arch, "sm_", 3) == 0, "arch %s", b->info.arch);
    kf_backend_close(b);
}

/* The toolkit's stub libcuda answers CUDA_ERROR_STUB_LIBRARY; it must not pass for a
 * driver. Also checks that every entry point kforge resolves exists under its versioned
 * name (the stub exports them all). */
Test(cuda_platform, stub_library_is_refused) {
    const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
    if (access(stub, R_OK) != 0) cr_skip_test("no stub library at %s", stub);
    setenv("KFORGE_CUDA_DRIVER", stub, 1);
    kf_backend *b = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_backend_open("cuda", &b, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "CUDA_ERROR_STUB_LIBRARY"), "message: %s", err.msg);
    cr_assert_null(b);
}

/* ---- with a GPU ---- */

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
    cr_assert_not_null(g->view);
    cr_assert_eq((uintptr_t)g->view, (uintptr_t)g->whole + GUARD);
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
    if (b->iface->view_free) b->iface->view_free(b->ctx, g->view);
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

Test(cuda, list_is_sane) {
    kf_backend *b = open_cuda();
    kf_device_info *d = NULL;
    int n = 0;
    kf_error err = {0};
    cr_assert_eq(kf_backend_list("cuda", &d, &n, &err), KF_OK, "%s", err.msg);
    cr_assert_geq(n, 1);
    for (int i = 0; i < n; i++) {
        cr_assert_str_eq(d[i].platform, "cuda");
        cr_assert_eq(d[i].index, i);
        cr_assert(d[i].name[0], "device %d has no name", i);
        cr_assert(strncmp(d[i].arch, "sm_", 3) == 0, "arch %s", d[i].arch);
        cr_assert_str_eq(d[i].device_type, "gpu");
        cr_assert_str_eq(d[i].vendor, "NVIDIA");
        cr_assert_gt(d[i].compute_units, 0);
        cr_assert_eq(d[i].cores, d[i].compute_units);
        cr_assert_geq(d[i].threads, d[i].compute_units * 1024);
        cr_assert_geq(d[i].max_wg, 1024);
        cr_assert_geq(d[i].max_wi[0], 1024);
        cr_assert_geq(d[i].max_wi[2], 64);
        cr_assert_eq(d[i].subgroup_size, 32);
        cr_assert_eq(d[i].simd_bits, 1024);
        cr_assert_geq(d[i].local_mem_bytes, 48 * 1024);
        cr_assert_gt(d[i].global_mem_bytes, (int64_t)1 << 30);
        cr_assert_eq(d[i].max_alloc_bytes, d[i].global_mem_bytes);
        cr_assert_gt(d[i].l2_bytes, 1 << 20);
        cr_assert_gt(d[i].clock_mhz, 100);
        cr_assert_eq(d[i].fp64, 1);
        cr_assert(strchr(d[i].driver, '.'), "driver %s", d[i].driver);
        cr_assert(strstr(d[i].version, d[i].arch), "version %s", d[i].version);
        cr_assert(strstr(d[i].flags, "--gpu-architecture=sm_"), "flags %s", d[i].flags);
        cr_assert_null(strstr(d[i].flags, "fast_math"), "flags %s", d[i].flags);
    }
    /* the opened device is device 0 of the list (or the one KFORGE_TEST_CUDA names) */
    int idx = b->info.index;
    cr_assert_lt(idx, n);
    cr_assert_str_eq(b->info.name, d[idx].name);
    cr_assert_str_eq(b->info.arch, d[idx].arch);
    cr_assert_eq(b->info.global_mem_bytes, d[idx].global_mem_bytes);
    free(d);
    kf_backend_close(b);
}

Test(cuda, open_out_of_range_names_the_count) {
    kf_backend *b = open_cuda();
    kf_backend_close(b);
    kf_error err = {0};
    kf_backend *x = NULL;
    cr_assert_eq(kf_backend_open("cuda:99", &x, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "cuda:99") && strstr(err.msg, "CUDA device"), "message: %s",
              err.msg);
}

/* The runner poisons a device candidate's outputs on the device (fill_check.h). */
Test(cuda, fill_and_copy_in_at_touch_only_their_bytes) {
    kf_backend *b = open_cuda();
    check_fill_and_copy_in_at(b);
    kf_backend_close(b);
}

Test(cuda, vadd_with_guards) {
    kf_backend *b = open_cuda();
    enum { N = 1000 };
    float a[N], bb[N], c[N], nan[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i * 0.5f - 100.0f;
        bb[i] = (float)(i % 7) + 0.25f;
        nan[i] = NAN;
    }
    char artifact[4096];
    kf_buf log = {0};
    kf_error err = {0};
    cr_assert_eq(compile(b, vadd_src, "-DN=1000", "vadd", artifact, &log, &err), KF_OK, "%s",
                 err.msg);
    size_t alen = strlen(artifact);
    cr_assert(alen > 4 && strcmp(artifact + alen - 4, ".cuk") == 0, "artifact '%s'", artifact);
    cr_assert(strstr(log.data, "kforge: resources vadd regs="), "log: %s", log.data);
    /* the artifact holds the options line, then the source; the cubin lies next to it */
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(kf_read_file(artifact, &text, &len, &err), KF_OK);
    cr_assert(strncmp(text, b->info.flags, strlen(b->info.flags)) == 0, "first line: %.80s", text);
    cr_assert_str_eq(strchr(text, '\n') + 1, vadd_src);
    free(text);
    char cubin[4200];
    snprintf(cubin, sizeof cubin, "%.*s.cubin", (int)(alen - 4), artifact);
    cr_assert_eq(access(cubin, R_OK), 0, "no %s", cubin);
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

    /* timed: same results, a positive device time; flushes in between */
    cr_assert_eq(kf_backend_copy_in(b, gc.view, nan, sizeof nan), KF_OK);
    cr_assert_eq(b->iface->flush(b->ctx, 64u << 20), KF_OK);
    double secs = -1;
    cr_assert_eq(b->iface->launch_timed(b->ctx, mod, args, 3, &secs, &err), KF_OK, "%s", err.msg);
    cr_assert_gt(secs, 0.0);
    cr_assert_lt(secs, 1.0);
    cr_assert(gbuf_read(b, &gc, c), "output guard touched (timed)");
    for (int i = 0; i < N; i++) cr_assert_eq(c[i], a[i] + bb[i], "timed c[%d] = %g", i, c[i]);
    cr_assert_eq(b->iface->flush(b->ctx, 1u << 20), KF_OK);

    /* fewer buffers than the plan names */
    err = (kf_error){0};
    cr_assert_eq(b->iface->launch(b->ctx, mod, args, 2, &err), KF_ERR_RUNTIME);
    cr_assert(strstr(err.msg, "vadd") && strstr(err.msg, "buffer 2"), "message: %s", err.msg);

    gbuf_free(b, &ga);
    gbuf_free(b, &gb);
    gbuf_free(b, &gc);
    b->iface->unload(b->ctx, mod);

    /* a second compile of the same candidate reuses the artifact */
    char again[4096];
    kf_buf log2 = {0};
    cr_assert_eq(compile(b, vadd_src, "-DN=1000", "vadd", again, &log2, &err), KF_OK, "%s",
                 err.msg);
    cr_assert_str_eq(again, artifact);
    cr_assert(strstr(log2.data, "exists") && strstr(log2.data, "kforge: resources vadd"),
              "log: %s", log2.data);
    kf_buf_free(&log2);
    kf_backend_close(b);
}

/* The guard check itself can fail: a kernel that writes one element past its output. */
Test(cuda, guard_detects_overrun) {
    kf_backend *b = open_cuda();
    const char *src =
        "// kforge:launch over global=256 local=64 args=0\n"
        "extern \"C\" __global__ void over(float *o) {\n"
        "    o[blockIdx.x * blockDim.x + threadIdx.x + 1] = 1.0f;\n"
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

Test(cuda, scratch_between_launches) {
    kf_backend *b = open_cuda();
    const char *src =
        "// kforge:scratch tmp 1024*4\n"
        "// kforge:launch produce global=1024 local=128 args=0,tmp\n"
        "// kforge:launch consume global=1024 local=128 args=tmp,1\n"
        "extern \"C\" __global__ void produce(const float *a, float *t) {\n"
        "    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    t[1023 - i] = 2.0f * a[i] + 1.0f;\n"
        "}\n"
        "extern \"C\" __global__ void consume(const float *t, float *o) {\n"
        "    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
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
    for (int rep = 0; rep < 3; rep++) {
        double secs = 0;
        kf_status st = rep == 0 ? b->iface->launch(b->ctx, mod, args, 2, &err)
                                : b->iface->launch_timed(b->ctx, mod, args, 2, &secs, &err);
        cr_assert_eq(st, KF_OK, "rep %d: %s", rep, err.msg);
        cr_assert(gbuf_read(b, &go, o), "guard touched");
        for (int i = 0; i < N; i++) cr_assert_eq(o[i], 2.0f * a[i] + 1.0f, "o[%d] = %g", i, o[i]);
        if (rep > 0) cr_assert_gt(secs, 0.0);
        cr_assert_eq(kf_backend_copy_in(b, go.view, nan, sizeof nan), KF_OK);
    }
    gbuf_free(b, &ga);
    gbuf_free(b, &go);
    b->iface->unload(b->ctx, mod);
    kf_backend_close(b);
}

Test(cuda, syntax_error_and_bad_plan) {
    kf_backend *b = open_cuda();
    const char *src =
        "// kforge:launch k global=64 local=64 args=0\n"
        "extern \"C\" __global__ void k(float *a) {\n"
        "    a[threadIdx.x] = 1.0f\n"
        "}\n";
    char artifact[4096];
    kf_buf log = {0};
    kf_error err = {0};
    cr_assert_eq(compile(b, src, NULL, "syntax", artifact, &log, &err), KF_ERR_COMPILE);
    cr_assert_eq(err.line, 4, "line %d: %s", err.line, err.msg);
    cr_assert(strstr(log.data, "candidate.cu(4)"), "log: %s", log.data);
    kf_buf_free(&log);
    const char *noplan_bad = "// kforge:launch k global=100 local=64 args=0\n"
                             "extern \"C\" __global__ void k(float *a) { a[0] = 1.0f; }\n";
    cr_assert_eq(compile(b, noplan_bad, NULL, "badplan", artifact, NULL, &err), KF_ERR_PARSE);
    kf_backend_close(b);
}

Test(cuda, missing_kernel_and_wrong_arity) {
    kf_backend *b = open_cuda();
    const char *body = "extern \"C\" __global__ void k(float *a) { a[threadIdx.x] = 1.0f; }\n"
                       "__global__ void mangled(float *a) { a[threadIdx.x] = 2.0f; }\n";
    char src[1024], artifact[4096];
    kf_error err = {0};
    snprintf(src, sizeof src, "// kforge:launch nope global=64 local=64 args=0\n%s", body);
    cr_assert_eq(compile(b, src, NULL, "missing", artifact, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "'nope'") && strstr(err.msg, "not defined"), "message: %s", err.msg);
    snprintf(src, sizeof src, "// kforge:launch mangled global=64 local=64 args=0\n%s", body);
    cr_assert_eq(compile(b, src, NULL, "mangled", artifact, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "extern \"C\""), "message: %s", err.msg);
    snprintf(src, sizeof src, "// kforge:launch k global=64 local=64 args=0,1\n%s", body);
    cr_assert_eq(compile(b, src, NULL, "arity", artifact, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "takes 1 parameters") && strstr(err.msg, "passes 2"), "message: %s",
              err.msg);
    const char *scalar = "// kforge:launch s global=64 local=64 args=0,1\n"
                         "extern \"C\" __global__ void s(float *a, int n) { a[n] = 0; }\n";
    cr_assert_eq(compile(b, scalar, NULL, "scalar", artifact, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "parameter 1 is 4 bytes"), "message: %s", err.msg);
    kf_backend_close(b);
}

Test(cuda, oversized_blocks_are_compile_errors) {
    kf_backend *b = open_cuda();
    const char *k = "extern \"C\" __global__ void k(float *a) { a[threadIdx.x] = 1.0f; }\n";
    char src[1024], artifact[4096];
    kf_error err = {0};
    /* 2048 in x: past the device's per-dimension limit */
    snprintf(src, sizeof src, "// kforge:launch k global=4096 local=2048 args=0\n%s", k);
    cr_assert_eq(compile(b, src, NULL, "big1", artifact, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "2048"), "message: %s", err.msg);
    /* 64 x 32 = 2048 threads: each dimension fits, the block does not */
    snprintf(src, sizeof src, "// kforge:launch k global=64,32 local=64,32 args=0\n%s", k);
    cr_assert_eq(compile(b, src, NULL, "big2", artifact, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "2048 threads") && strstr(err.msg, "MAX_THREADS_PER_BLOCK"),
              "message: %s", err.msg);
    /* a kernel's own bound: __launch_bounds__(128) with blocks of 256 */
    const char *lb = "// kforge:launch k global=256 local=256 args=0\n"
                     "extern \"C\" __global__ void __launch_bounds__(128) k(float *a) "
                     "{ a[threadIdx.x] = 1.0f; }\n";
    cr_assert_eq(compile(b, lb, NULL, "bound", artifact, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "limit of 128"), "message: %s", err.msg);
    kf_backend_close(b);
}

/* smem=: dynamic shared memory past the static 48 KiB (opted into by the launcher) really
 * holds what the kernel writes there; more than the device allows is a compile error. */
Test(cuda, dynamic_shared_memory) {
    kf_backend *b = open_cuda();
    if (b->info.local_mem_optin_bytes < 96 * 1024)
        cr_skip_test("%s opts into %lld bytes of shared memory", b->info.name, (long long)b->info.local_mem_optin_bytes);
    /* 128 threads fill 96 KiB of floats with their pattern, then each sums a stripe that
     * other threads wrote: wrong sizes or a missing opt-in give a launch error or garbage */
    const char *src =
        "// kforge:launch k global=128 local=128 smem=98304 args=0\n"
        "extern \"C\" __global__ void k(float *out) {\n"
        "    extern __shared__ float s[];\n"
        "    const int t = threadIdx.x;\n"
        "    for (int i = t; i < 24576; i += 128) s[i] = (float)(i % 1000);\n"
        "    __syncthreads();\n"
        "    float a = 0.0f;\n"
        "    for (int i = (t * 192 + 77) % 24576, n = 0; n < 192; n++, i = (i + 1) % 24576) a += s[i];\n"
        "    out[t] = a;\n"
        "}\n";
    char artifact[4096];
    kf_buf log = {0};
    kf_error err = {0};
    cr_assert_eq(compile(b, src, NULL, "smem", artifact, &log, &err), KF_OK, "%s", err.msg);
    cr_assert(strstr(log.data, "smem=98304"), "the resource report counts the dynamic part: %s", log.data);
    kf_buf_free(&log);
    void *mod = NULL;
    cr_assert_eq(b->iface->load(b->ctx, artifact, NULL, &mod, &err), KF_OK, "%s", err.msg);
    float nan[128], got[128];
    for (int i = 0; i < 128; i++) nan[i] = NAN;
    gbuf go;
    gbuf_make(b, &go, nan, sizeof nan);
    void *args[1] = {go.view};
    cr_assert_eq(b->iface->launch(b->ctx, mod, args, 1, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_backend_sync(b), KF_OK);
    cr_assert(gbuf_read(b, &go, got), "output guard touched");
    for (int t = 0; t < 128; t++) {
        double want = 0;
        for (int i = (t * 192 + 77) % 24576, n = 0; n < 192; n++, i = (i + 1) % 24576) want += i % 1000;
        cr_assert_eq(got[t], (float)want, "out[%d] = %g, want %g", t, got[t], want);
    }
    gbuf_free(b, &go);
    b->iface->unload(b->ctx, mod);
    /* past the opt-in limit */
    char big[1024];
    snprintf(big, sizeof big, "// kforge:launch k global=128 local=128 smem=%lld args=0\n%s",
             (long long)b->info.local_mem_optin_bytes + 1024, strchr(src, '\n') + 1);
    cr_assert_eq(compile(b, big, NULL, "smem2", artifact, NULL, &err), KF_ERR_COMPILE);
    cr_assert(strstr(err.msg, "dynamic shared memory") && strstr(err.msg, "at most"), "message: %s", err.msg);
    kf_backend_close(b);
}

/* A write far outside every allocation is a device fault: named, and sticky. */
Test(cuda, illegal_address_is_a_runtime_error) {
    kf_backend *b = open_cuda();
    const char *src = "// kforge:launch far global=64 local=64 args=0\n"
                      "extern \"C\" __global__ void far(float *o) {\n"
                      "    o[threadIdx.x + (1ull << 40)] = 1.0f;\n"
                      "}\n";
    void *mod = load(b, src, NULL, "far");
    float init[64] = {0};
    gbuf g;
    gbuf_make(b, &g, init, sizeof init);
    void *args[1] = {g.view};
    kf_error err = {0};
    cr_assert_eq(b->iface->launch(b->ctx, mod, args, 1, &err), KF_ERR_RUNTIME);
    cr_assert(strstr(err.msg, "CUDA_ERROR_ILLEGAL_ADDRESS"), "message: %s", err.msg);
    cr_assert(strstr(err.msg, "far") && strstr(err.msg, "unusable"), "message: %s", err.msg);
    err = (kf_error){0};
    cr_assert_eq(b->iface->launch(b->ctx, mod, args, 1, &err), KF_ERR_RUNTIME);
    cr_assert(strstr(err.msg, "earlier device fault"), "message: %s", err.msg);
    /* the process is spoilt for CUDA now: release without checking anything further */
    b->iface->unload(b->ctx, mod);
    kf_backend_close(b);
}

Test(cuda, nvcc_form_end_to_end) {
    kf_backend *b = open_cuda();
    need_nvcc();
    enum { N = 1000 };
    float x[N], y[N], out[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)i * 0.25f - 30.0f;
        y[i] = (float)(i % 11) - 5.0f;
    }
    char artifact[4096];
    kf_buf log = {0};
    kf_error err = {0};
    cr_assert_eq(compile(b, nvcc_src, "-DSCALE=3.0f -DRC=0", "nvcc", artifact, &log, &err), KF_OK,
                 "%s\nlog:\n%s", err.msg, log.data ? log.data : "");
    char arch_opt[80];
    snprintf(arch_opt, sizeof arch_opt, "-arch=%s", b->info.arch);
    cr_assert(strstr(log.data, arch_opt), "log: %s", log.data);
    kf_buf_free(&log);
    void *mod = NULL;
    cr_assert_eq(b->iface->load(b->ctx, artifact, "kforge_kernel", &mod, &err), KF_OK, "%s",
                 err.msg);
    gbuf gx, gy;
    gbuf_make(b, &gx, x, sizeof x);
    gbuf_make(b, &gy, y, sizeof y);
    void *args[2] = {gx.view, gy.view};
    cr_assert_eq(b->iface->launch(b->ctx, mod, args, 2, &err), KF_OK, "%s", err.msg);
    cr_assert(gbuf_read(b, &gy, out), "guard touched");
    for (int i = 0; i < N; i++)
        cr_assert_eq(out[i], 3.0f * x[i] + y[i], "y[%d] = %g", i, out[i]);
    double secs = 0;
    cr_assert_eq(b->iface->launch_timed(b->ctx, mod, args, 2, &secs, &err), KF_OK, "%s", err.msg);
    cr_assert_gt(secs, 0.0);
    cr_assert(gbuf_read(b, &gy, out), "guard touched (timed)");
    for (int i = 0; i < N; i++)
        cr_assert_eq(out[i], 3.0f * x[i] + (3.0f * x[i] + y[i]), "timed y[%d] = %g", i, out[i]);
    b->iface->unload(b->ctx, mod);

    /* the candidate's own failure code */
    cr_assert_eq(compile(b, nvcc_src, "-DSCALE=3.0f -DRC=3", "nvcc", artifact, NULL, &err), KF_OK,
                 "%s", err.msg);
    cr_assert_eq(b->iface->load(b->ctx, artifact, NULL, &mod, &err), KF_OK, "%s", err.msg);
    err = (kf_error){0};
    cr_assert_eq(b->iface->launch(b->ctx, mod, args, 2, &err), KF_ERR_RUNTIME);
    cr_assert(strstr(err.msg, "returned 3"), "message: %s", err.msg);
    b->iface->unload(b->ctx, mod);

    /* an entry that is not there */
    cr_assert_eq(b->iface->load(b->ctx, artifact, "no_such_entry", &mod, &err), KF_ERR_RUNTIME);
    cr_assert(strstr(err.msg, "no_such_entry"), "message: %s", err.msg);
    gbuf_free(b, &gx);
    gbuf_free(b, &gy);
    kf_backend_close(b);
}

Test(cuda, load_rejects_bad_artifacts) {
    kf_backend *b = open_cuda();
    char dir[512], path[600];
    workdir(dir, sizeof dir, "badart");
    kf_error err = {0};
    snprintf(path, sizeof path, "%s/bad.cuk", dir);
    cr_assert_eq(kf_write_file(path, "no newline", 10, &err), KF_OK);
    void *mod = (void *)1;
    cr_assert_eq(b->iface->load(b->ctx, path, NULL, &mod, &err), KF_ERR_RUNTIME);
    cr_assert_null(mod);
    snprintf(path, sizeof path, "%s/x.cuk", dir);
    const char *nocubin = "-DN=1\n// kforge:launch k global=1 local=1 args=0\n";
    cr_assert_eq(kf_write_file(path, nocubin, strlen(nocubin), &err), KF_OK);
    cr_assert_neq(b->iface->load(b->ctx, path, NULL, &mod, &err), KF_OK); /* no x.cubin */
    snprintf(path, sizeof path, "%s/bad.bin", dir);
    cr_assert_eq(kf_write_file(path, "x", 1, &err), KF_OK);
    cr_assert_eq(b->iface->load(b->ctx, path, NULL, &mod, &err), KF_ERR_RUNTIME);
    cr_assert(strstr(err.msg, ".cuk"), "message: %s", err.msg);
    kf_backend_close(b);
}

/* ---- through the verifier and the sandboxed runner ---- */

#define VN 1000003

typedef struct vfix {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *ctx;
    kf_verify_opts o;
    char wd[512];
} vfix;

static void vfix_open(vfix *f, int time_it) {
    memset(f, 0, sizeof *f);
    f->b = open_cuda();
    kf_error err = {0};
    const char *task = "task swish_odd\n"
                       "input x: f32[1000003]\n"
                       "output y = x * sigmoid(x)\n";
    cr_assert_eq(kf_parse_string(task, "<test>", &f->g, &err), KF_OK, "parse: %s", err.msg);
    workdir(f->wd, sizeof f->wd, "verify");
    kf_verify_opts_default(&f->o);
    f->o.workdir = f->wd;
    f->o.seed = 4242;
    f->o.nsets = 2;
    f->o.wall_limit_s = 60;
    f->o.cpu_limit_s = 240;
    f->o.time_it = time_it;
    cr_assert_eq(kf_verify_ctx_new(f->g, &f->o, &f->ctx, &err), KF_OK, "ctx: %s", err.msg);
}

static void vfix_close(vfix *f) {
    kf_verify_ctx_free(f->ctx);
    kf_backend_close(f->b);
    kf_graph_free(f->g);
}

static kf_vresult verify_src(vfix *f, const char *src) {
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "cuda", src, NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    kf_status st = kf_verify_candidate(f->ctx, f->b, &c, &r, &err);
    cr_assert_eq(st, KF_OK, "the check could not be carried out: %s", err.msg);
    kf_candidate_clear(&c);
    return r;
}

static kf_vresult verify_swish(vfix *f, const char *fault) {
    char *s = NULL;
    int n = asprintf(&s,
                     "// kforge:launch swish global=1000064 local=64 args=0,1\n"
                     "extern \"C\" __global__ void swish(const float *__restrict__ x,\n"
                     "                                   float *__restrict__ y) {\n"
                     "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                     "    if (i < %d) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
                     "    %s\n"
                     "}\n",
                     VN, fault ? fault : "");
    cr_assert(n > 0);
    kf_vresult r = verify_src(f, s);
    free(s);
    return r;
}

#define VEXPECT(r, st, needle)                                                                    \
    do {                                                                                          \
        cr_assert_eq((r).status, (st), "status %s, want %s: %s", kf_vstatus_name((r).status),    \
                     kf_vstatus_name(st), (r).detail);                                            \
        const char *nd_ = (needle);                                                               \
        if (nd_) cr_assert(strstr((r).detail, nd_), "detail lacks '%s': %s", nd_, (r).detail);    \
    } while (0)

Test(cuda_verify, correct_is_ok_and_timed) {
    vfix f;
    vfix_open(&f, 1);
    kf_vresult r = verify_swish(&f, NULL);
    VEXPECT(r, KF_V_OK, NULL);
    cr_assert_eq(r.sets_run, 2);
    cr_assert(r.timed && r.time_ms > 0 && r.reps >= 1, "timed %d, %.4f ms", r.timed, r.time_ms);
    /* the device's time lies inside kforge's own clock around the calls (no absolute time is
     * asserted: the machine may be busy) */
    cr_assert_leq(r.time_ms, r.time_host_ms * 1.01 + 0.05, "device %.4f ms, host %.4f ms", r.time_ms,
                  r.time_host_ms);
    /* the compiler's resource report reaches the record: some registers, no spills */
    int regs = -1, smem = -1, local = -1;
    cr_assert_eq(sscanf(r.resources, "swish regs=%d smem=%d local=%d", &regs, &smem, &local), 3,
                 "resources: '%s'", r.resources);
    cr_assert(regs > 0 && regs < 64 && smem == 0 && local == 0, "resources: '%s'", r.resources);
    vfix_close(&f);
}

Test(cuda_verify, unmasked_tail_writes_past_the_end) {
    vfix f;
    vfix_open(&f, 0);
    kf_vresult r = verify_swish(&f, "if (i >= 1000003) y[i] = 0.0f;");
    VEXPECT(r, KF_V_OOB_WRITE, "guard");
    vfix_close(&f);
}

Test(cuda_verify, device_fault_is_a_crash_of_the_candidate) {
    vfix f;
    vfix_open(&f, 0);
    kf_vresult r = verify_swish(&f, "if (i == 0) y[1ull << 40] = 1.0f;");
    VEXPECT(r, KF_V_CRASH, "CUDA_ERROR_ILLEGAL_ADDRESS");
    /* this process's own context is untouched: the fault happened in the runner */
    kf_vresult ok = verify_swish(&f, NULL);
    VEXPECT(ok, KF_V_OK, NULL);
    vfix_close(&f);
}

Test(cuda_verify, nvcc_form_is_ok) {
    vfix f;
    vfix_open(&f, 1);
    need_nvcc();
    const char *src =
        "__global__ void swish(const float *x, float *y, int n) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
        "}\n"
        "extern \"C\" int kforge_kernel(void *const *args) {\n"
        "    int n = 1000003;\n"
        "    swish<<<(n + 255) / 256, 256>>>((const float *)args[0], (float *)args[1], n);\n"
        "    return cudaGetLastError() == cudaSuccess ? 0 : 1;\n"
        "}\n";
    kf_vresult r = verify_src(&f, src);
    VEXPECT(r, KF_V_OK, NULL);
    cr_assert(r.timed && r.time_ms > 0, "timed %d, %.4f ms", r.timed, r.time_ms);
    vfix_close(&f);
}

/* A kernel whose host code launches its work on a non-blocking stream of its own and
 * returns at once: the stop event on the legacy stream would not wait for it, and the time
 * would be the launch's. The context-wide synchronisation before the stop event puts the
 * work inside the interval: the escaped form must not come out faster than half the same
 * work launched on the default stream (both busy-wait a fixed number of cycles per block,
 * so their times are about equal when the timing is honest; no absolute time is assumed). */
static const char *spin_src(const char *stream_setup, const char *stream) {
    static char buf[2048];
    snprintf(buf, sizeof buf,
             "__global__ void swish(const float *x, float *y, int n) {\n"
             "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "    if (i < n) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
             "    long long t0 = clock64();\n"
             "    while (clock64() - t0 < 1000000) {}\n"
             "}\n"
             "extern \"C\" int kforge_kernel(void *const *args) {\n"
             "    int n = 1000003;\n"
             "    %s\n"
             "    swish<<<(n + 255) / 256, 256, 0, %s>>>((const float *)args[0], (float *)args[1], n);\n"
             "    return cudaGetLastError() == cudaSuccess ? 0 : 1;\n"
             "}\n",
             stream_setup, stream);
    return buf;
}

Test(cuda_verify, work_left_on_another_stream_is_timed) {
    vfix f;
    vfix_open(&f, 1);
    need_nvcc();
    kf_vresult honest = verify_src(&f, spin_src("", "0"));
    VEXPECT(honest, KF_V_OK, NULL);
    kf_vresult escaped = verify_src(&f, spin_src("static cudaStream_t s;\n"
                                                 "    if (!s && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return 2;",
                                                 "s"));
    VEXPECT(escaped, KF_V_OK, NULL);
    cr_assert(honest.timed && escaped.timed, "timed %d %d", honest.timed, escaped.timed);
    cr_assert_geq(escaped.time_ms, 0.5 * honest.time_ms,
                  "work left on a non-blocking stream was not timed: %.4f ms against %.4f ms on "
                  "the default stream", escaped.time_ms, honest.time_ms);
    vfix_close(&f);
}

#else

Test(cuda_platform, not_built) {
    cr_skip_test("this build has no CUDA platform (cuda.h/nvrtc.h not found at configure time)");
}

#endif
