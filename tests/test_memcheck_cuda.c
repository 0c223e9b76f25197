/*
 * The memory-checker run on CUDA (kf_verify_memcheck with compute-sanitizer,
 * src/verify/memcheck.c) and the platforms without a checker.
 *
 * Without a GPU (these run everywhere): the checker's lookup order ($KFORGE_COMPUTE_SANITIZER
 * alone, then PATH, $CUDA_HOME/bin, /usr/local/cuda/bin) on fake executables; an absent
 * checker and a platform without one (opencl) are KF_ERR_UNSUPPORTED with a reason naming
 * what was looked for, and nothing is run; the parser of compute-sanitizer's report on
 * transcripts; the synthesis loop on OpenCL (PoCL, when present) records the final check as
 * "skipped: no memory checker".
 *
 * With a GPU (kf_backend_open("cuda") succeeds and compute-sanitizer is found; else each
 * skips with the reason): NVRTC-form candidates for y = x * 2 over f32[1003]. The runner
 * places each buffer as [guard][data][guard] in one device allocation, so a write just past
 * the end lands in the guard (an oob-write natively). The faulty kernels write (or read)
 * 4096 elements past the end of their buffer: 12 KiB past the allocation, beyond the
 * guard, in memory that is mapped (the same 2 MiB page) but allocated to nobody, so the
 * native run passes and only the checker sees it (its --padding makes that address
 * padding of the allocation). A correct kernel must pass, and the loop's final check on
 * cuda must run and be clean.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kforge/agent.h"
#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"
#include "verify/verify_int.h"

static const char *task = "task scale_odd\n"
                          "input x: f32[1003]\n"
                          "output y = x * 2\n";

/* ---- the environment, saved and restored around each lookup test ---- */

static const char *const env_names[] = {"KFORGE_COMPUTE_SANITIZER", "PATH", "CUDA_HOME"};
#define NENV 3
static char *env_saved[NENV];
static int env_had[NENV];

static void env_save(void) {
    for (int i = 0; i < NENV; i++) {
        const char *v = getenv(env_names[i]);
        env_had[i] = v != NULL;
        env_saved[i] = v ? strdup(v) : NULL;
    }
}

static void env_restore(void) {
    for (int i = 0; i < NENV; i++) {
        if (env_had[i]) setenv(env_names[i], env_saved[i], 1);
        else unsetenv(env_names[i]);
        free(env_saved[i]);
        env_saved[i] = NULL;
    }
}

static void scratch_dir(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/test-work/memcheck-cuda-%s-%ld", KF_BUILD_DIR, name, (long)getpid());
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(buf, &err), KF_OK, "%s", err.msg);
}

/* An executable shell script at path (its directory must exist). */
static void fake_exe(const char *path) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs("#!/bin/sh\nexit 0\n", f);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
}

static int lookup(const char *platform, char *path, size_t cap, kf_error *err) {
    memset(err, 0, sizeof *err);
    return kf_verify_memcheck_tool(platform, path, cap, err);
}

Test(memcheck_cuda, lookup_order) {
    char base[512], on_path[600], home[600], home_bin[700], exe[800], env_exe[800];
    scratch_dir(base, sizeof base, "order");
    snprintf(on_path, sizeof on_path, "%s/onpath", base);
    snprintf(home, sizeof home, "%s/home", base);
    snprintf(home_bin, sizeof home_bin, "%s/bin", home);
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(on_path, &err), KF_OK);
    cr_assert_eq(kf_mkdirs(home_bin, &err), KF_OK);
    snprintf(exe, sizeof exe, "%s/compute-sanitizer", on_path);
    fake_exe(exe);
    snprintf(exe, sizeof exe, "%s/compute-sanitizer", home_bin);
    fake_exe(exe);
    snprintf(env_exe, sizeof env_exe, "%s/my-sanitizer", base);
    fake_exe(env_exe);
    char want[800], got[4096];

    env_save();
    /* the variable alone, whatever PATH and CUDA_HOME hold */
    setenv("KFORGE_COMPUTE_SANITIZER", env_exe, 1);
    setenv("PATH", on_path, 1);
    setenv("CUDA_HOME", home, 1);
    int st_env = lookup("cuda", got, sizeof got, &err);
    char got_env[4096];
    snprintf(got_env, sizeof got_env, "%s", got);
    /* then PATH, before CUDA_HOME */
    unsetenv("KFORGE_COMPUTE_SANITIZER");
    int st_path = lookup("cuda", got, sizeof got, &err);
    char got_path[4096];
    snprintf(got_path, sizeof got_path, "%s", got);
    /* then $CUDA_HOME/bin */
    setenv("PATH", "/nonexistent-kforge-test", 1);
    int st_home = lookup("cuda", got, sizeof got, &err);
    char got_home[4096];
    snprintf(got_home, sizeof got_home, "%s", got);
    /* a directory of that name on PATH is no executable */
    char dir_path[700];
    snprintf(dir_path, sizeof dir_path, "%s/dirs", base);
    snprintf(exe, sizeof exe, "%s/compute-sanitizer", dir_path);
    cr_assert_eq(kf_mkdirs(exe, &err), KF_OK);
    setenv("PATH", dir_path, 1);
    int st_dir = lookup("cuda", got, sizeof got, &err);
    char got_dir[4096];
    snprintf(got_dir, sizeof got_dir, "%s", got);
    env_restore();

    cr_assert_eq(st_env, KF_OK, "%s", err.msg);
    cr_assert_str_eq(got_env, env_exe);
    cr_assert_eq(st_path, KF_OK);
    snprintf(want, sizeof want, "%s/compute-sanitizer", on_path);
    cr_assert_str_eq(got_path, want);
    cr_assert_eq(st_home, KF_OK);
    snprintf(want, sizeof want, "%s/compute-sanitizer", home_bin);
    cr_assert_str_eq(got_home, want);
    cr_assert_eq(st_dir, KF_OK);
    cr_assert_str_eq(got_dir, want, "the directory on PATH was taken: %s", got_dir);
}

/* Nothing on PATH or in CUDA_HOME: the toolkit's default place is the last resort; where it
 * has no compute-sanitizer (this CI machine), the reason names every place looked in. */
Test(memcheck_cuda, absent_checker_names_where_it_looked) {
    char got[4096];
    kf_error err = {0};
    env_save();
    unsetenv("KFORGE_COMPUTE_SANITIZER");
    setenv("PATH", "/nonexistent-kforge-test", 1);
    setenv("CUDA_HOME", "/nonexistent-kforge-cuda", 1);
    int st = lookup("cuda", got, sizeof got, &err);
    env_restore();
    const char *dflt = "/usr/local/cuda/bin/compute-sanitizer";
    if (access(dflt, X_OK) == 0) {
        cr_assert_eq(st, KF_OK, "%s", err.msg);
        cr_assert_str_eq(got, dflt);
        return;
    }
    cr_assert_eq(st, KF_ERR_UNSUPPORTED, "status %s", kf_status_name(st));
    cr_assert_str_eq(got, "");
    cr_assert(strstr(err.msg, "compute-sanitizer not found"), "%s", err.msg);
    cr_assert(strstr(err.msg, "PATH"), "%s", err.msg);
    cr_assert(strstr(err.msg, "/nonexistent-kforge-cuda/bin"), "%s", err.msg);
    cr_assert(strstr(err.msg, "/usr/local/cuda/bin"), "%s", err.msg);
}

Test(memcheck_cuda, bad_override_is_unsupported) {
    char got[4096];
    kf_error err = {0};
    env_save();
    setenv("KFORGE_COMPUTE_SANITIZER", "/nonexistent-kforge-test/compute-sanitizer", 1);
    int st = lookup("cuda", got, sizeof got, &err);
    env_restore();
    cr_assert_eq(st, KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "KFORGE_COMPUTE_SANITIZER"), "%s", err.msg);
    cr_assert(strstr(err.msg, "/nonexistent-kforge-test/compute-sanitizer"), "%s", err.msg);
}

Test(memcheck_cuda, platforms_without_a_checker) {
    char got[64] = "junk";
    kf_error err = {0};
    cr_assert_eq(lookup("opencl", got, sizeof got, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "no memory checker for platform 'opencl'"), "%s", err.msg);
    cr_assert_str_eq(got, "");
    cr_assert_eq(lookup("metal", got, sizeof got, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "'metal'"), "%s", err.msg);
    cr_assert_eq(kf_verify_memcheck_tool("cuda", NULL, 0, &err), KF_ERR_ARG);
    /* cpu: valgrind, or the reason it is missing */
    char vg[4096];
    int st = lookup("cpu", vg, sizeof vg, &err);
    if (st == KF_OK) cr_assert(strstr(vg, "/valgrind"), "%s", vg);
    else cr_assert(strstr(err.msg, "valgrind"), "%s", err.msg);
}

/* ---- kf_verify_memcheck without a device: refused before anything runs ---- */

typedef struct fixture {
    kf_graph *g;
    kf_verify_ctx *ctx;
    kf_verify_opts o;
    char wd[512];
} fixture;

static void fx_open(fixture *f) {
    memset(f, 0, sizeof *f);
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<test>", &f->g, &err), KF_OK, "parse: %s", err.msg);
    snprintf(f->wd, sizeof f->wd, "%s/test-work/memcheck-cuda", KF_BUILD_DIR);
    cr_assert_eq(kf_mkdirs(f->wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts_default(&f->o);
    f->o.workdir = f->wd;
    f->o.seed = 4242;
    f->o.nsets = 2;
    f->o.wall_limit_s = 60;
    f->o.cpu_limit_s = 120;
    cr_assert_eq(kf_verify_ctx_new(f->g, &f->o, &f->ctx, &err), KF_OK, "ctx: %s", err.msg);
}

static void fx_close(fixture *f) {
    kf_verify_ctx_free(f->ctx);
    kf_graph_free(f->g);
}

/* A backend record as kf_backend_open would fill it; nothing behind it (no device). */
static kf_backend fake_backend(const char *platform) {
    kf_backend b;
    memset(&b, 0, sizeof b);
    snprintf(b.info.platform, sizeof b.info.platform, "%s", platform);
    return b;
}

static const char *clean_src =
    "// kforge:launch scale global=cdiv(1003,128)*128 local=128 args=0,1\n"
    "extern \"C\" __global__ void scale(const float *x, float *y) {\n"
    "    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < 1003) y[i] = x[i] * 2.0f;\n"
    "}\n";

static kf_vresult refused(fixture *f, kf_backend *b, kf_status *st, kf_error *err) {
    kf_candidate c;
    cr_assert_eq(kf_candidate_init(&c, b->info.platform, clean_src, NULL, err), KF_OK);
    kf_vresult r;
    /* the artifact need not exist: nothing may run */
    *st = kf_verify_memcheck(f->ctx, b, &c, "/nonexistent-kforge-test/a.cuk", &r, err);
    kf_candidate_clear(&c);
    return r;
}

Test(memcheck_cuda, no_checker_on_cuda_is_unsupported_and_runs_nothing) {
    fixture f;
    fx_open(&f);
    kf_backend b = fake_backend("cuda");
    env_save();
    setenv("KFORGE_COMPUTE_SANITIZER", "/nonexistent-kforge-test/compute-sanitizer", 1);
    kf_status st;
    kf_error err = {0};
    kf_vresult r = refused(&f, &b, &st, &err);
    env_restore();
    cr_assert_eq(st, KF_ERR_UNSUPPORTED, "status %s: %s", kf_status_name(st), err.msg);
    cr_assert(strstr(err.msg, "compute-sanitizer not found"), "%s", err.msg);
    cr_assert(strstr(r.detail, "compute-sanitizer not found"), "%s", r.detail);
    cr_assert_eq(r.sets_run, 0, "nothing ran");
    cr_assert_neq(r.status, KF_V_OK);
    fx_close(&f);
}

Test(memcheck_cuda, opencl_has_no_checker) {
    fixture f;
    fx_open(&f);
    kf_backend b = fake_backend("opencl");
    kf_status st;
    kf_error err = {0};
    kf_vresult r = refused(&f, &b, &st, &err);
    cr_assert_eq(st, KF_ERR_UNSUPPORTED, "status %s: %s", kf_status_name(st), err.msg);
    cr_assert(strstr(r.detail, "no memory checker for platform 'opencl'"), "%s", r.detail);
    cr_assert_eq(r.sets_run, 0);
    fx_close(&f);
}

Test(memcheck_cuda, cuda_checked_build_has_line_info) {
    kf_backend b = fake_backend("cuda");
    cr_assert_str_eq(kf_verify_memcheck_flags(&b), "-lineinfo");
    b = fake_backend("opencl");
    cr_assert_str_eq(kf_verify_memcheck_flags(&b), "");
}

/* ---- the report parser ---- */

static const char *oob_transcript =
    "========= COMPUTE-SANITIZER\n"
    "kernel says hello\n"
    "========= Invalid __global__ write of size 4 bytes\n"
    "=========     at scale+0xb0 in candidate.cu:6\n"
    "=========     by thread (0,0,0) in block (0,0,0)\n"
    "=========     Access at 0x7f0a3e205fcc is out of bounds\n"
    "=========     and is 12,269 bytes after the nearest allocation at 0x7f0a3e200000 of size 12,224 bytes\n"
    "========= \n"
    "========= Invalid __global__ write of size 4 bytes\n"
    "=========     at scale+0xb0 in candidate.cu:6\n"
    "=========     by thread (1,0,0) in block (0,0,0)\n"
    "========= \n"
    "========= ERROR SUMMARY: 1,024 errors\n"
    "========= ERROR SUMMARY: 1014 errors were not printed. Use --print-limit option to adjust the number of printed errors\n";

Test(memcheck_cuda, report_first_block_and_summary) {
    kf_buf b = {0};
    int nerr = -2;
    int lines = kf_verify_cs_report(oob_transcript, strlen(oob_transcript), &b, &nerr);
    cr_assert_eq(lines, 5, "lines %d: %s", lines, b.data);
    cr_assert(strncmp(b.data, "Invalid __global__ write of size 4 bytes\n    at scale+0xb0 in "
                              "candidate.cu:6\n", 63) == 0, "%s", b.data);
    cr_assert(strstr(b.data, "12,269 bytes after the nearest allocation"), "%s", b.data);
    cr_assert_null(strstr(b.data, "hello"), "the kernel's own output: %s", b.data);
    cr_assert_null(strstr(b.data, "thread (1,0,0)"), "only the first report: %s", b.data);
    cr_assert_null(strstr(b.data, "COMPUTE-SANITIZER"), "%s", b.data);
    /* the count line, not the "not printed" line after it */
    cr_assert(strstr(b.data, "\nERROR SUMMARY: 1,024 errors"), "%s", b.data);
    cr_assert_null(strstr(b.data, "not printed"), "%s", b.data);
    cr_assert_eq(nerr, 1024);
    kf_buf_free(&b);
}

Test(memcheck_cuda, report_clean_run) {
    const char *t = "========= COMPUTE-SANITIZER\n"
                    "========= ERROR SUMMARY: 0 errors\n";
    kf_buf b = {0};
    int nerr = -2;
    cr_assert_eq(kf_verify_cs_report(t, strlen(t), &b, &nerr), 0);
    cr_assert_eq(nerr, 0);
    cr_assert_str_eq(b.data, "ERROR SUMMARY: 0 errors");
    kf_buf_free(&b);
    /* no summary at all, and a longer run of '=' that is not the prefix */
    t = "========== not the checker\nplain output\n";
    b = (kf_buf){0};
    cr_assert_eq(kf_verify_cs_report(t, strlen(t), &b, &nerr), 0);
    cr_assert_eq(nerr, -1);
    cr_assert(b.len == 0, "%s", b.data);
    kf_buf_free(&b);
}

Test(memcheck_cuda, report_is_bounded_and_printable) {
    kf_buf t = {0};
    kf_buf_puts(&t, "========= Warning: something about the driver\n");
    kf_buf_puts(&t, "========= Leaked 4,096 bytes at 0x7f0a3e400000\n");
    for (int i = 0; i < 200; i++) kf_buf_printf(&t, "=========     frame %d \x01\t\n", i);
    kf_buf_puts(&t, "========= \n========= LEAK SUMMARY: 4096 bytes leaked in 1 allocations\n"
                    "========= ERROR SUMMARY: 1 error\n");
    kf_buf b = {0};
    int nerr = -2;
    int lines = kf_verify_cs_report(t.data, t.len, &b, &nerr);
    cr_assert_eq(lines, 40);
    cr_assert_eq(nerr, 1);
    cr_assert(strncmp(b.data, "Leaked 4,096 bytes", 18) == 0, "leading warning skipped: %s", b.data);
    cr_assert(strstr(b.data, "frame 38 . \n"), "control bytes shown as '.', tabs as blanks: %s",
              b.data);
    cr_assert_null(strstr(b.data, "frame 39 "), "%s", b.data);
    cr_assert(strstr(b.data, "\nERROR SUMMARY: 1 error"), "%s", b.data);
    for (size_t i = 0; i < b.len; i++)
        cr_assert(b.data[i] == '\n' || (b.data[i] >= 32 && b.data[i] < 127), "byte %zu", i);
    kf_buf_free(&b);
    kf_buf_free(&t);
}

/* ---- the loop on a platform without a checker (PoCL where installed) ---- */

Test(memcheck_cuda, loop_on_opencl_records_skipped) {
    kf_backend *probe = NULL;
    kf_error err = {0};
    if (kf_backend_open("opencl", &probe, &err) != KF_OK) {
        cr_skip_test("no OpenCL device: %s", err.msg);
        return;
    }
    kf_backend_close(probe);
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "%s", err.msg);
    char out[512];
    scratch_dir(out, sizeof out, "loop-ocl");
    kf_loop_opts o;
    kf_loop_opts_default(&o);
    o.target = "opencl";
    o.iters = 1;
    o.seed = 7;
    o.out_dir = out;
    o.memcheck = KF_MEMCHECK_EVERY;
    kf_run_result r;
    kf_status st = kf_loop_run(g, &o, &r, &err);
    cr_assert_eq(st, KF_OK, "%s", err.msg);
    cr_assert_geq(r.best, 0, "nothing verified: %s", r.niters ? r.iters[0].res.detail : "");
    cr_assert_str_eq(r.memcheck, "skipped");
    cr_assert(strstr(r.memcheck_detail, "memcheck skipped: no memory checker for platform 'opencl'"),
              "%s", r.memcheck_detail);
    cr_assert_str_eq(r.iters[r.best].memcheck, "", "nothing was run per candidate");
    kf_run_result_free(&r);
    kf_graph_free(g);
}

/* ---- with a GPU and compute-sanitizer ---- */

typedef struct gpu_fixture {
    fixture f;
    kf_backend *b;
} gpu_fixture;

static int gpu_open(gpu_fixture *gf) {
    memset(gf, 0, sizeof *gf);
    kf_error err = {0};
    if (kf_backend_open("cuda", &gf->b, &err) != KF_OK) {
        cr_skip_test("no usable CUDA device: %s", err.msg);
        return 0;
    }
    char tool[4096];
    if (kf_verify_memcheck_tool("cuda", tool, sizeof tool, &err) != KF_OK) {
        kf_backend_close(gf->b);
        cr_skip_test("%s", err.msg);
        return 0;
    }
    fx_open(&gf->f);
    return 1;
}

static void gpu_close(gpu_fixture *gf) {
    fx_close(&gf->f);
    kf_backend_close(gf->b);
}

static kf_vresult gpu_memcheck(gpu_fixture *gf, const char *src) {
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "cuda", src, NULL, &err), KF_OK, "%s", err.msg);
    snprintf(c.flags, sizeof c.flags, "%s", kf_verify_memcheck_flags(gf->b));
    char art[1024];
    kf_buf log = {0};
    kf_status st = kf_backend_compile(gf->b, c.source, c.flags, gf->f.wd, art, sizeof art, &log, &err);
    cr_assert_eq(st, KF_OK, "compile: %s\n%s", err.msg, log.data ? log.data : "");
    kf_buf_free(&log);
    kf_vresult r;
    st = kf_verify_memcheck(gf->f.ctx, gf->b, &c, art, &r, &err);
    kf_candidate_clear(&c);
    cr_assert_eq(st, KF_OK, "memcheck could not run: %s (%s)", err.msg, r.detail);
    if (getenv("KF_TEST_VERBOSE"))
        fprintf(stderr, "[%s] (%.2f s) %s\n", kf_vstatus_name(r.status), r.run_wall_s, r.detail);
    return r;
}

Test(memcheck_cuda, gpu_clean_kernel_is_ok, .timeout = 300) {
    gpu_fixture gf;
    if (!gpu_open(&gf)) return;
    kf_vresult r = gpu_memcheck(&gf, clean_src);
    cr_assert_eq(r.status, KF_V_OK, "status %s: %s", kf_vstatus_name(r.status), r.detail);
    cr_assert_eq(r.sets_run, 1);
    cr_assert_eq(r.bad_set, -1);
    gpu_close(&gf);
}

/* One thread writes 4096 elements past the end of y: past its guard zone, so the native
 * run sees nothing (the status is not "oob-write" from the native run). */
Test(memcheck_cuda, gpu_far_write_is_caught, .timeout = 300) {
    gpu_fixture gf;
    if (!gpu_open(&gf)) return;
    kf_vresult r = gpu_memcheck(&gf,
        "// kforge:launch scale global=cdiv(1003,128)*128 local=128 args=0,1\n"
        "extern \"C\" __global__ void scale(const float *x, float *y) {\n"
        "    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < 1003) y[i] = x[i] * 2.0f;\n"
        "    if (i == 0) ((volatile float *)y)[1003 + 4096] = 1.0f;\n"
        "}\n");
    cr_assert_eq(r.status, KF_V_MEMCHECK, "status %s: %s", kf_vstatus_name(r.status), r.detail);
    cr_assert(strstr(r.detail, "compute-sanitizer memcheck on set 0"), "%s", r.detail);
    cr_assert(strstr(r.detail, "Invalid __global__ write of size 4 bytes"), "%s", r.detail);
    cr_assert(strstr(r.detail, "scale"), "the report names the kernel: %s", r.detail);
    cr_assert(strstr(r.detail, "ERROR SUMMARY: 1 error"), "%s", r.detail);
    cr_assert_eq(r.bad_set, 0);
    gpu_close(&gf);
}

Test(memcheck_cuda, gpu_far_read_is_caught, .timeout = 300) {
    gpu_fixture gf;
    if (!gpu_open(&gf)) return;
    kf_vresult r = gpu_memcheck(&gf,
        "// kforge:launch scale global=cdiv(1003,128)*128 local=128 args=0,1\n"
        "extern \"C\" __global__ void scale(const float *x, float *y) {\n"
        "    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    float k = 2.0f;\n"
        "    if (i == 5) k = ((volatile const float *)x)[1003 + 4096] == 12345.0f ? 3.0f : 2.0f;\n"
        "    if (i < 1003) y[i] = x[i] * k;\n"
        "}\n");
    cr_assert_eq(r.status, KF_V_MEMCHECK, "status %s: %s", kf_vstatus_name(r.status), r.detail);
    cr_assert(strstr(r.detail, "Invalid __global__ read of size 4 bytes"), "%s", r.detail);
    cr_assert(strstr(r.detail, "by thread (5,0,0)"), "%s", r.detail);
    gpu_close(&gf);
}

/* After the faulty ones, in the same process: clean again; and a plain overrun into the
 * guard is still the native run's oob-write (the checker run never starts). */
Test(memcheck_cuda, gpu_clean_again_and_guard_overrun, .timeout = 300) {
    gpu_fixture gf;
    if (!gpu_open(&gf)) return;
    kf_vresult r = gpu_memcheck(&gf,
        "// kforge:launch scale global=cdiv(1003,128)*128 local=128 args=0,1\n"
        "extern \"C\" __global__ void scale(const float *x, float *y) {\n"
        "    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i <= 1003) y[i] = i < 1003 ? x[i] * 2.0f : 0.0f;\n"
        "}\n");
    cr_assert_eq(r.status, KF_V_OOB_WRITE, "status %s: %s", kf_vstatus_name(r.status), r.detail);
    cr_assert(strstr(r.detail, "native run before the memory check"), "%s", r.detail);
    r = gpu_memcheck(&gf, clean_src);
    cr_assert_eq(r.status, KF_V_OK, "status %s: %s", kf_vstatus_name(r.status), r.detail);
    gpu_close(&gf);
}

/* The loop: auto mode checks the final candidate on cuda, and the record says it ran. */
Test(memcheck_cuda, gpu_loop_final_check_runs, .timeout = 600) {
    gpu_fixture gf;
    if (!gpu_open(&gf)) return;
    char out[512];
    scratch_dir(out, sizeof out, "loop-cuda");
    kf_loop_opts o;
    kf_loop_opts_default(&o);
    o.target = "cuda";
    o.iters = 2;
    o.seed = 7;
    o.out_dir = out;
    kf_run_result r;
    kf_error err = {0};
    kf_status st = kf_loop_run(gf.f.g, &o, &r, &err);
    cr_assert_eq(st, KF_OK, "%s", err.msg);
    cr_assert_geq(r.best, 0, "nothing verified: %s", r.niters ? r.iters[0].res.detail : "");
    cr_assert_str_eq(r.memcheck, "ok", "%s", r.memcheck_detail);
    cr_assert(strstr(r.memcheck_detail, "compute-sanitizer"), "%s", r.memcheck_detail);
    cr_assert_str_eq(r.iters[r.best].memcheck, "ok");
    kf_run_result_free(&r);
    gpu_close(&gf);
}
