/*
 * Tests of the platform registry and the CPU backend (src/backend/): probe answers that
 * make sense on any Linux machine, compile + load + launch of a trivial kernel in this
 * process, compile errors carrying the compiler's message, artifact reuse by hash, and the
 * default-supplying wrappers.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kforge/backend.h"

static kf_backend *open_cpu(void) {
    kf_backend *b = NULL;
    kf_error err = {0};
    kf_status st = kf_backend_open("cpu", &b, &err);
    cr_assert_eq(st, KF_OK, "open cpu: %s", err.msg);
    cr_assert_not_null(b);
    return b;
}

/* A fresh scratch directory under the build tree. */
static void scratch(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/test-work/backend-%s-%ld", KF_BUILD_DIR, name, (long)getpid());
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(buf, &err), KF_OK, "%s", err.msg);
}

Test(backend, names_and_unknown_platform) {
    const char *const *names = kf_backend_names();
    cr_assert_str_eq(names[0], "cpu");
    kf_backend *b = (kf_backend *)1;
    kf_error err = {0};
    kf_status st = kf_backend_open("quantum", &b, &err);
    cr_assert_eq(st, KF_ERR_UNSUPPORTED);
    cr_assert_null(b);
    cr_assert(strstr(err.msg, "quantum") && strstr(err.msg, "cpu"), "message: %s", err.msg);
}

Test(backend, probe_is_sane) {
    kf_backend *b = open_cpu();
    const kf_device_info *d = &b->info;
    cr_assert_str_eq(d->platform, "cpu");
    cr_assert(d->name[0], "no cpu name");
    cr_assert(d->arch[0], "no arch");
    cr_assert_geq(d->threads, 1);
    cr_assert_geq(d->cores, 1);
    cr_assert_leq(d->cores, d->threads);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cr_assert_leq(d->threads, online);
    cr_assert(d->simd_bits == 128 || d->simd_bits == 256 || d->simd_bits == 512, "simd %d",
              d->simd_bits);
    cr_assert_gt(d->l1d_bytes, 0);
    cr_assert_leq(d->l1d_bytes, 4 << 20);
    cr_assert_geq(d->l2_bytes, d->l1d_bytes);
    cr_assert(d->l3_bytes == 0 || d->l3_bytes >= d->l2_bytes);
    cr_assert_gt(d->mem_bytes, 64ll << 20);
    cr_assert(strchr(d->compiler, ':'), "compiler '%s' lacks its version", d->compiler);
    cr_assert(strstr(d->flags, "-O3") && strstr(d->flags, "-fopenmp") && strstr(d->flags, "-shared"),
              "flags '%s'", d->flags);
    kf_backend_close(b);
}

static const char *trivial_src =
    "#include <stdint.h>\n"
    "int kforge_kernel(void *const *args) {\n"
    "    const int64_t *a = args[0];\n"
    "    int64_t *out = args[1];\n"
    "#ifdef BIAS\n"
    "    out[0] = a[0] * 2 + BIAS;\n"
    "#else\n"
    "    out[0] = a[0] * 2;\n"
    "#endif\n"
    "    return a[0] < 0 ? 7 : 0;\n"
    "}\n";

Test(backend, compile_load_launch) {
    kf_backend *b = open_cpu();
    char wd[512], art[1024];
    scratch(wd, sizeof wd, "cll");
    kf_buf log = {0};
    kf_error err = {0};
    kf_status st = kf_backend_compile(b, trivial_src, NULL, wd, art, sizeof art, &log, &err);
    cr_assert_eq(st, KF_OK, "compile: %s\n%s", err.msg, log.data ? log.data : "");
    cr_assert(strstr(art, wd) == art && strstr(art, ".so"), "artifact %s", art);
    cr_assert_eq(access(art, R_OK), 0);
    void *mod = NULL;
    st = b->iface->load(b->ctx, art, "kforge_kernel", &mod, &err);
    cr_assert_eq(st, KF_OK, "load: %s", err.msg);
    int64_t a = 21, out = 0;
    void *args[2] = {&a, &out};
    st = b->iface->launch(b->ctx, mod, args, 2, &err);
    cr_assert_eq(st, KF_OK, "launch: %s", err.msg);
    cr_assert_eq(out, 42);
    a = -1;
    st = b->iface->launch(b->ctx, mod, args, 2, &err);
    cr_assert_eq(st, KF_ERR_RUNTIME);
    cr_assert(strstr(err.msg, "7"), "message: %s", err.msg);
    b->iface->unload(b->ctx, mod);

    /* a missing entry is a load error */
    st = b->iface->load(b->ctx, art, "no_such_entry", &mod, &err);
    cr_assert_eq(st, KF_ERR_RUNTIME);
    cr_assert(strstr(err.msg, "no_such_entry"), "message: %s", err.msg);
    kf_buf_free(&log);
    kf_backend_close(b);
}

Test(backend, compile_error_has_compiler_message) {
    kf_backend *b = open_cpu();
    char wd[512], art[1024];
    scratch(wd, sizeof wd, "err");
    const char *bad = "int kforge_kernel(void *const *args) { return undeclared_thing_42; }\n";
    kf_buf log = {0};
    kf_error err = {0};
    kf_status st = kf_backend_compile(b, bad, NULL, wd, art, sizeof art, &log, &err);
    cr_assert_eq(st, KF_ERR_COMPILE, "status %d", st);
    cr_assert_not_null(log.data);
    cr_assert(strstr(log.data, "undeclared_thing_42"), "log: %s", log.data);
    cr_assert(strstr(log.data, "error"), "log: %s", log.data);
    cr_assert(strstr(err.msg, "error") || strstr(err.msg, "status"), "msg: %s", err.msg);
    cr_assert_neq(access(art, F_OK), 0, "no artifact should exist after a failed compile");
    kf_buf_free(&log);
    kf_backend_close(b);
}

Test(backend, artifact_reused_by_hash) {
    kf_backend *b = open_cpu();
    char wd[512], a1[1024], a2[1024], a3[1024];
    scratch(wd, sizeof wd, "reuse");
    kf_buf log = {0};
    kf_error err = {0};
    cr_assert_eq(kf_backend_compile(b, trivial_src, NULL, wd, a1, sizeof a1, &log, &err), KF_OK,
                 "%s", err.msg);
    struct stat s1, s2;
    cr_assert_eq(stat(a1, &s1), 0);
    kf_buf_free(&log);
    cr_assert_eq(kf_backend_compile(b, trivial_src, NULL, wd, a2, sizeof a2, &log, &err), KF_OK);
    cr_assert_str_eq(a1, a2);
    cr_assert(log.data && strstr(log.data, "reusing"), "log: %s", log.data ? log.data : "");
    cr_assert_eq(stat(a2, &s2), 0);
    cr_assert_eq(s1.st_ino, s2.st_ino, "the artifact was rebuilt");
    cr_assert_eq(s1.st_mtim.tv_nsec, s2.st_mtim.tv_nsec);
    kf_buf_free(&log);
    /* other flags, other artifact, and the flag takes effect */
    cr_assert_eq(kf_backend_compile(b, trivial_src, "-DBIAS=5", wd, a3, sizeof a3, &log, &err),
                 KF_OK, "%s", err.msg);
    cr_assert_str_neq(a1, a3);
    void *mod = NULL;
    cr_assert_eq(b->iface->load(b->ctx, a3, "kforge_kernel", &mod, &err), KF_OK, "%s", err.msg);
    int64_t a = 1, out = 0;
    void *args[2] = {&a, &out};
    cr_assert_eq(b->iface->launch(b->ctx, mod, args, 2, &err), KF_OK);
    cr_assert_eq(out, 7);
    b->iface->unload(b->ctx, mod);
    kf_buf_free(&log);
    kf_backend_close(b);
}

Test(backend, default_memory_wrappers) {
    kf_backend *b = open_cpu();
    float host[4] = {1, 2, 3, 4}, back[4] = {0};
    float *dev = kf_backend_alloc(b, sizeof host);
    cr_assert_not_null(dev);
    cr_assert_eq(kf_backend_copy_in(b, dev, host, sizeof host), KF_OK);
    cr_assert_eq(kf_backend_sync(b), KF_OK);
    cr_assert_eq(kf_backend_copy_out(b, back, dev, sizeof back), KF_OK);
    cr_assert_eq(memcmp(host, back, sizeof host), 0);
    kf_backend_free(b, dev);
    kf_backend_free(b, NULL);
    kf_backend_close(b);
    kf_backend_close(NULL);
}

Test(backend, compiler_from_environment) {
    setenv("KFORGE_CC", "/nonexistent/kforge-no-such-cc", 1);
    kf_backend *b = NULL;
    kf_error err = {0};
    kf_status st = kf_backend_open("cpu", &b, &err);
    unsetenv("KFORGE_CC");
    cr_assert_eq(st, KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "kforge-no-such-cc"), "message: %s", err.msg);
}
