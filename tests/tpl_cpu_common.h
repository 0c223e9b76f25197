/*
 * Helpers of the tests that emit a CPU template's stage functions and run them in-process
 * (test_tpl_matmul.c, test_gather_pack.c): a CPU device like this VM's, a point of a space
 * from "name=value" overrides, random data, buffers fenced by inaccessible pages, and the
 * generated text compiled with the CPU backend's flags into a .so in a temp dir. Static: each
 * test file has its own copy.
 */
#ifndef KF_TESTS_TPL_CPU_COMMON_H
#define KF_TESTS_TPL_CPU_COMMON_H

#include <criterion/criterion.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "synth/tpl.h"

#define CFLAGS "-O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math -fPIC -shared"
#define GUARD 64
#define SENTINEL 1234.5f

/* An AVX2 CPU of two cores (simd_bits 0: 256). */
static inline void make_dev(kf_device_info *dev, int simd_bits) {
    memset(dev, 0, sizeof *dev);
    snprintf(dev->platform, sizeof dev->platform, "cpu");
    snprintf(dev->arch, sizeof dev->arch, "x86_64 avx2 fma");
    dev->cores = dev->threads = 2;
    dev->simd_bits = simd_bits ? simd_bits : 256;
    dev->l1d_bytes = 32 * 1024;
    dev->l2_bytes = 512 * 1024;
    dev->l3_bytes = 32 * 1024 * 1024;
}

/* Default point, then "name=value" overrides; a value outside the parameter's list
 * replaces its default value, so odd block sizes can be tried. */
static inline void make_point(kf_space *sp, kf_point *pt, const char *params) {
    for (int i = 0; i < sp->nparams; i++) pt->idx[i] = sp->p[i].dflt;
    if (!params) return;
    char *dup = strdup(params), *save = NULL;
    for (char *tok = strtok_r(dup, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char name[32];
        long v;
        cr_assert(sscanf(tok, "%31[^=]=%ld", name, &v) == 2, "bad override %s", tok);
        int found = 0;
        for (int i = 0; i < sp->nparams && !found; i++) {
            const char *nm = strchr(sp->p[i].name, '.');
            nm = nm ? nm + 1 : sp->p[i].name;
            if (strcmp(nm, name) != 0) continue;
            found = 1;
            int j;
            for (j = 0; j < sp->p[i].nvalues && sp->p[i].values[j] != v; j++) {}
            if (j == sp->p[i].nvalues) {
                j = sp->p[i].dflt;
                sp->p[i].values[j] = v;
            }
            pt->idx[i] = j;
        }
        cr_assert(found, "no parameter %s in the space", name);
    }
    free(dup);
}

static unsigned rng_state = 1u;
static inline float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

/* n floats flush against an inaccessible page: at their end, or (at_start) at their start
 * (a page on each side either way); fenced_seal makes them read-only. */
typedef struct fenced {
    void *base;
    size_t len, data_len;
    float *p;
} fenced;

static inline fenced fenced_alloc(int64_t n, int at_start) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    fenced f;
    f.data_len = (bytes + pg - 1) / pg * pg;
    f.len = f.data_len + 2 * pg;
    f.base = mmap(NULL, f.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(f.base != MAP_FAILED);
    cr_assert(mprotect(f.base, pg, PROT_NONE) == 0);
    cr_assert(mprotect((char *)f.base + pg + f.data_len, pg, PROT_NONE) == 0);
    f.p = (float *)((char *)f.base + pg + (at_start ? 0 : f.data_len - bytes));
    return f;
}

static inline void fenced_seal(fenced *f) {
    cr_assert(mprotect((char *)f->base + (f->len - f->data_len) / 2, f->data_len, PROT_READ) == 0);
}
static inline void fenced_free(fenced *f) { munmap(f->base, f->len); }

/* Compile src into a .so in a fresh temp dir named after prefix (/tmp/PREFIX_XXXXXX);
 * returns the dlopen handle. */
static inline void *compile_and_load(const char *src, const char *prefix, char *dir, size_t cap) {
    snprintf(dir, cap, "/tmp/%s_XXXXXX", prefix);
    cr_assert(mkdtemp(dir) != NULL);
    char path[512], so[512], log[512], cmd[2048];
    snprintf(path, sizeof path, "%s/k.c", dir);
    snprintf(so, sizeof so, "%s/k.so", dir);
    snprintf(log, sizeof log, "%s/cc.log", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f != NULL);
    fputs(src, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc " CFLAGS " -Wall -Wextra -Werror %s -o %s > %s 2>&1", path, so, log);
    if (system(cmd) != 0) {
        char buf[4096] = {0};
        FILE *lf = fopen(log, "r");
        if (lf) {
            size_t n = fread(buf, 1, sizeof buf - 1, lf);
            buf[n] = 0;
            fclose(lf);
        }
        cr_assert_fail("generated code did not compile (source in %s):\n%s", path, buf);
    }
    /* NODELETE: the .so pulls in libgomp, whose idle worker threads must outlive dlclose */
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    cr_assert(h != NULL, "dlopen: %s", dlerror());
    return h;
}

/* The flat source offset of a gathered operand's element (k, j), no batch dims. */
static inline int64_t gather_at(const kf_mm_gather *g, int64_t k, int64_t j) {
    int64_t o = g->base;
    for (int i = g->nrow - 1; i >= 0; i--) {
        o += (k % g->rdim[i]) * g->rstr[i];
        k /= g->rdim[i];
    }
    for (int i = g->ncol - 1; i >= 0; i--) {
        o += (j % g->cdim[i]) * g->cstr[i];
        j /= g->cdim[i];
    }
    return o;
}

/* The GEMM template's kernel for d at the point `params` ("name=value ...", NULL: the
 * defaults) on a CPU of simd_bits, as `int kforge_kernel(args)` calling kf_mm(A, B, C),
 * compiled and loaded (dir: its temp folder, for remove_dir); *src, when given, gets the
 * emitted source (the caller frees it), *handle the dlopen handle. */
static inline int (*mm_kernel_load(const kf_matmul_desc *d, int simd_bits, const char *params, const char *prefix,
                                   char *dir, size_t cap, char **src_out, void **handle))(void *const *) {
    kf_device_info dev;
    make_dev(&dev, simd_bits);
    kf_space sp;
    memset(&sp, 0, sizeof sp);
    kf_tpl_matmul_params(d, &dev, &sp, "s0.");
    kf_point pt;
    make_point(&sp, &pt, params);
    kf_buf src = {0};
    kf_tpl_matmul_emit(&src, "kf_mm", d, &sp, &pt, "s0.");
    kf_buf_printf(&src, "int kforge_kernel(void *const *args) {\n    kf_mm(args[0], args[1], args[2]);\n"
                        "    return 0;\n}\n");
    void *h = compile_and_load(src.data, prefix, dir, cap);
    int (*fn)(void *const *) = (int (*)(void *const *))(uintptr_t)dlsym(h, "kforge_kernel");
    cr_assert(fn != NULL);
    if (src_out) *src_out = src.data;
    else free(src.data);
    *handle = h;
    return fn;
}

/* The temp dir of compile_and_load and its three files. */
static inline void remove_dir(const char *dir) {
    const char *files[] = {"k.c", "k.so", "cc.log"};
    char p[512];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

#endif
