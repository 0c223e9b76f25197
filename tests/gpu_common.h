/*
 * Helpers shared by the GPU template tests (test_gpu_templates.c, test_gpu_tf32.c): parsing,
 * a GPU-like device, points by assignment, the device under test (gpu_verify's setup and
 * verification of one point), and the nvcc compile checks. Static: each test file has its
 * own copy of the device state.
 */
#ifndef KF_TEST_GPU_COMMON_H
#define KF_TEST_GPU_COMMON_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/synth.h"
#include "kforge/verify.h"

static inline kf_graph *parse(const char *text) {
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(text, "<test>", &g, &err), KF_OK, "parse: %s\n%s", err.msg, text);
    return g;
}

/* A GPU-like device description for the platforms that cannot run here. */
static inline void gpu_like(kf_device_info *d, const char *platform) {
    memset(d, 0, sizeof *d);
    snprintf(d->platform, sizeof d->platform, "%s", platform);
    snprintf(d->device_type, sizeof d->device_type, "gpu");
    d->max_wg = 1024;
    d->max_wi[0] = d->max_wi[1] = d->max_wi[2] = 1024;
    d->local_mem_bytes = 48 * 1024;
    d->subgroup_size = 32;
    d->compute_units = 132;
    if (strcmp(platform, "cuda") == 0) {
        snprintf(d->arch, sizeof d->arch, "sm_90");
        d->local_mem_optin_bytes = 227 * 1024; /* Hopper's opt-in (dynamic) shared memory */
    }
}

/* The default point with "name=value ..." applied over the stage parameters' suffixes;
 * 0 when an assignment names no parameter of s (a template that fixed it). */
static inline int point_assign(const kf_synth *s, const char *assign, kf_point *p) {
    const kf_space *sp = kf_synth_space(s);
    kf_synth_default_point(s, p);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", assign);
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char name[32];
        long v;
        cr_assert_eq(sscanf(tok, "%31[^=]=%ld", name, &v), 2, "bad assignment '%s'", tok);
        int hit = 0;
        for (int i = 0; i < sp->nparams; i++) {
            const char *dot = strrchr(sp->p[i].name, '.');
            if (!dot || strcmp(dot + 1, name) != 0) continue;
            for (int j = 0; j < sp->p[i].nvalues; j++)
                if (sp->p[i].values[j] == v) p->idx[i] = j, hit = 1;
        }
        if (!hit) return 0;
    }
    return 1;
}

/* The plan of text on a GPU-like device of the platform (arch: NULL = gpu_like's). */
static inline kf_synth *plan_gpu(const char *text, const char *platform, const char *arch, kf_graph **g) {
    kf_device_info dev;
    gpu_like(&dev, platform);
    if (arch) snprintf(dev.arch, sizeof dev.arch, "%s", arch);
    kf_error err = {0};
    *g = parse(text);
    kf_synth *s = NULL;
    cr_assert_eq(kf_synth_plan(*g, platform, &dev, &s, &err), KF_OK, "plan: %s\n%s", err.msg, text);
    return s;
}

/* Launch lines of a candidate. */
static inline int count_launches(const char *src) {
    int n = 0;
    for (const char *q = strstr(src, "// kforge:launch "); q; q = strstr(q + 1, "// kforge:launch ")) n++;
    return n;
}

/* The source a point renders (free it). */
static inline char *render_point(const kf_synth *s, const kf_point *p) {
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_synth_render(s, p, &c, &err), KF_OK, "render: %s", err.msg);
    char *src = strdup(c.source);
    kf_candidate_clear(&c);
    return src;
}

/* The source the point `assign` ("name=value ...") renders (free it). */
static inline char *render_at(const kf_synth *s, const char *assign) {
    kf_point p;
    cr_assert(point_assign(s, assign, &p), "no parameter for '%s' in %s", assign, kf_synth_describe(s));
    return render_point(s, &p);
}

static kf_backend *ocl;
static char ocl_why[512];
static char workdir[512];

/* The device under test: KFORGE_TEST_GPU (e.g. "cuda" on a machine with an NVIDIA GPU),
 * else KFORGE_TEST_OPENCL, else "opencl" (OpenCL device 0). */
static inline const char *gpu_target(void) {
    const char *t = getenv("KFORGE_TEST_GPU");
    if (!t || !t[0]) t = getenv("KFORGE_TEST_OPENCL");
    return t && t[0] ? t : "opencl";
}

static inline void ocl_setup(void) {
    kf_error err = {0};
    ocl = NULL;
    const char *skip = getenv("KFORGE_TEST_SKIP_GPU_VERIFY");
    if (skip && skip[0]) {
        snprintf(ocl_why, sizeof ocl_why, "KFORGE_TEST_SKIP_GPU_VERIFY=%s (the device kernels are checked by "
                 "the release build's run; the sanitizers instrument the host only)", skip);
        return;
    }
    if (kf_backend_open(gpu_target(), &ocl, &err) != KF_OK) {
        snprintf(ocl_why, sizeof ocl_why, "no %s device: %s", gpu_target(), err.msg);
        ocl = NULL;
        return;
    }
    snprintf(workdir, sizeof workdir, "%s/test-work/gpu-templates-%ld", KF_BUILD_DIR, (long)getpid());
    cr_assert_eq(kf_mkdirs(workdir, &err), KF_OK, "%s", err.msg);
}

/* Remove a test's scratch folder (a warning, not a failure, when it cannot). */
static inline void remove_dir(const char *dir) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static inline void ocl_teardown(void) {
    if (ocl) {
        kf_backend_close(ocl);
        remove_dir(workdir);
    }
    ocl = NULL;
}

#define NEED_OCL()                                                                                 \
    do {                                                                                           \
        if (!ocl) {                                                                                \
            cr_skip_test("%s", ocl_why);                                                           \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* Render s at p and expect it to verify on the device (with `want`, when non-NULL, in its
 * source: what the point is meant to exercise). */
static inline void expect_verifies(const kf_synth *s, kf_verify_ctx *ctx, const kf_point *p, const char *text,
                            const char *want) {
    kf_error err = {0};
    kf_candidate c;
    cr_assert_eq(kf_synth_render(s, p, &c, &err), KF_OK, "render: %s", err.msg);
    if (want) cr_expect(strstr(c.source, want) != NULL, "point [%s] of\n%s has no '%s'", c.label, text, want);
    kf_vresult r;
    cr_assert_eq(kf_verify_candidate(ctx, ocl, &c, &r, &err), KF_OK, "verify: %s", err.msg);
    cr_expect_eq(r.status, KF_V_OK, "task:\n%s\nplan %s, point [%s]: %s: %s", text, kf_synth_describe(s), c.label,
                 kf_vstatus_name(r.status), r.detail);
    cr_expect_geq(r.sets_run, 2);
    kf_candidate_clear(&c);
}

/* Check the task at one point: "name=value ..." over the stage parameters' suffixes (every
 * stage's), the rest at their defaults; `want` must appear in the source (what the point is
 * meant to exercise). */
/* A verifier context for g in the suite's work directory: the given seed, nsets sets. */
static inline kf_verify_ctx *test_ctx(const kf_graph *g, uint64_t seed, int nsets) {
    kf_error err = {0};
    kf_verify_opts vo;
    kf_verify_opts_default(&vo);
    vo.workdir = workdir;
    vo.seed = seed;
    vo.nsets = nsets;
    kf_verify_ctx *ctx = NULL;
    cr_assert_eq(kf_verify_ctx_new(g, &vo, &ctx, &err), KF_OK, "ctx: %s", err.msg);
    return ctx;
}

/* A planted fault in the candidate at point `assign` of text's plan (the first `from`
 * replaced by `to`, of the same length: checked to have applied) must be caught as a
 * mismatch on the device under test (the check of the results, not a build failure). */
static inline void expect_fault_caught(const char *text, const char *assign, const char *from, const char *to) {
    kf_error err = {0};
    kf_graph *g = parse(text);
    kf_synth *s = NULL;
    cr_assert_eq(kf_synth_plan(g, ocl->info.platform, &ocl->info, &s, &err), KF_OK, "plan: %s", err.msg);
    kf_point p;
    cr_assert(point_assign(s, assign, &p), "no parameter for '%s'", assign);
    kf_candidate c;
    cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "render: %s", err.msg);
    char *at = strstr(c.source, from);
    cr_assert(at != NULL, "no '%s' in\n%s", from, c.source);
    cr_assert_eq(strlen(from), strlen(to));
    memcpy(at, to, strlen(to));
    kf_verify_ctx *ctx = test_ctx(g, 7, 2);
    kf_vresult r;
    cr_assert_eq(kf_verify_candidate(ctx, ocl, &c, &r, &err), KF_OK, "verify: %s", err.msg);
    cr_expect_eq(r.status, KF_V_MISMATCH, "the fault '%s' -> '%s' at [%s] in\n%s\nwas not caught as a mismatch: %s: %s",
                 from, to, assign, text, kf_vstatus_name(r.status), r.detail);
    kf_verify_ctx_free(ctx);
    kf_candidate_clear(&c);
    kf_synth_free(s);
    kf_graph_free(g);
}

static inline void check_point_sets(const char *text, const char *assign, const char *want, int nsets);
static inline void check_point(const char *text, const char *assign, const char *want) {
    check_point_sets(text, assign, want, 2);
}

/* As check_point, with the first nsets distributions (6: every one, the offset and
 * large-magnitude sets included). */
static inline void check_point_sets(const char *text, const char *assign, const char *want, int nsets) {
    kf_error err = {0};
    kf_graph *g = parse(text);
    kf_synth *s = NULL;
    cr_assert_eq(kf_synth_plan(g, ocl->info.platform, &ocl->info, &s, &err), KF_OK, "plan: %s\n%s", err.msg, text);
    kf_point p;
    cr_assert(point_assign(s, assign, &p), "no parameter for '%s' in %s", assign, kf_synth_describe(s));
    kf_verify_ctx *ctx = test_ctx(g, 7, nsets);
    expect_verifies(s, ctx, &p, text, want);
    kf_verify_ctx_free(ctx);
    kf_synth_free(s);
    kf_graph_free(g);
}

/* 1 when the nvcc compile checks run here; else the test is skipped with the reason (no nvcc
 * on PATH, or KFORGE_TEST_SKIP_NVCC: the sanitizer pass, whose instrumentation none of
 * nvcc's work touches, while the release pass compiles the same points) and 0. */
static inline int nvcc_or_skip(void) {
    const char *why = getenv("KFORGE_TEST_SKIP_NVCC");
    if (why && *why) {
        cr_skip_test("the nvcc compile checks are skipped: %s (the release pass runs them)", why);
        return 0;
    }
    if (system("command -v nvcc >/dev/null 2>&1") != 0) {
        cr_skip_test("nvcc is not on PATH");
        return 0;
    }
    return 1;
}

/* 1 when the device under test runs the tensor-core templates (cuda, sm_80 or newer); else
 * the test is skipped with what needs them and the device named, and 0. */
static inline int tc_device_or_skip(const char *what) {
    int sm = 0;
    if (strcmp(ocl->info.platform, "cuda") == 0 && sscanf(ocl->info.arch, "sm_%d", &sm) == 1 && sm >= 80) return 1;
    cr_skip_test("%s needs cuda on sm_80 or newer; the device under test is %s %s", what, ocl->info.platform,
                 ocl->info.arch);
    return 0;
}


/* Write src to path and expect `nvcc -arch=sm_90 OPTS -c` to build it (its log in the
 * failure message, with the task and what was rendered). */
static inline void expect_nvcc_builds(const char *path, const char *src, size_t len, const char *opts, const char *task,
                               const char *what) {
    kf_error err = {0};
    cr_assert_eq(kf_write_file(path, src, len, &err), KF_OK, "%s", err.msg);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "nvcc -arch=sm_90 %s -c -o '%s.o' '%s' > '%s.log' 2>&1", opts, path, path, path);
    int rc = system(cmd);
    char *log = NULL;
    size_t n = 0;
    snprintf(cmd, sizeof cmd, "%s.log", path);
    if (kf_read_file(cmd, &log, &n, &err) != KF_OK) log = NULL;
    cr_expect_eq(rc, 0, "nvcc failed for task:\n%s[%s]\n%s", task, what, log ? log : "");
    free(log);
}

/* Every task of a tensor-core template at every point that names its parameters (all
 * points must when `strict`), one nvcc run per task (nvcc's start-up dominates): the first
 * point whole, the others from their (guarded) helpers on, each kernel renamed; each
 * source must hold every string of want[]. Returns the points compiled. */
static inline int nvcc_every_point(const char *tag, const char *const *tasks, int ntasks, const char *const *points,
                            int npoints, int strict, const char *const *want, int nwant) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/test-work/gpu-%s-%ld", KF_BUILD_DIR, tag, (long)getpid());
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(dir, &err), KF_OK, "%s", err.msg);
    kf_device_info dev;
    gpu_like(&dev, "cuda");
    int compiled = 0;
    for (int t = 0; t < ntasks; t++) {
        kf_graph *g = parse(tasks[t]);
        kf_synth *s = NULL;
        cr_assert_eq(kf_synth_plan(g, "cuda", &dev, &s, &err), KF_OK, "plan: %s", err.msg);
        kf_buf all = {0}; /* one translation unit: the helpers are defined once */
        for (int v = 0; v < npoints; v++) {
            kf_point p;
            int ok = point_assign(s, points[v], &p);
            cr_assert(ok || !strict, "[%s] names a parameter the task lacks", points[v]);
            if (!ok) continue;
            kf_candidate c;
            cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "render: %s", err.msg);
            for (int w = 0; w < nwant; w++) cr_expect(strstr(c.source, want[w]) != NULL, "no %s in\n%s", want[w], c.source);
            const char *from = v == 0 ? c.source : strstr(c.source, "#ifndef KF_MMA_HELPERS");
            cr_assert(from != NULL);
            /* every kernel defined from there on renamed kf_s<k>_v<v> (a stage before the
             * matmul, such as a convolution's columns, is the first point's) */
            int kernels = 0;
            for (const char *q = from; *q;) {
                size_t dl = strncmp(q, "kf_s", 4) == 0 && (q == c.source || q[-1] == ' ') ? strspn(q + 4, "0123456789") : 0;
                if (dl && q[4 + dl] == '(') {
                    kf_buf_putn(&all, q, 4 + dl);
                    kf_buf_printf(&all, "_v%d", v);
                    q += 4 + dl;
                    kernels++;
                } else {
                    kf_buf_putn(&all, q, 1);
                    q++;
                }
            }
            cr_assert_geq(kernels, 1, "no kernel after the helpers in\n%s", c.source);
            compiled++;
            kf_candidate_clear(&c);
        }
        char path[600];
        snprintf(path, sizeof path, "%s/%s%d.cu", dir, tag, t);
        expect_nvcc_builds(path, all.data, all.len, "-Werror all-warnings", tasks[t], "every point");
        kf_buf_free(&all);
        kf_synth_free(s);
        kf_graph_free(g);
    }
    remove_dir(dir);
    return compiled;
}

#endif
