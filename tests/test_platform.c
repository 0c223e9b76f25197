/*
 * Tests of the platform descriptor table (include/kforge/platform.h, src/backend/platform.c):
 * every row complete and consistent (its prompt files exist, its kernel file has its
 * extension, its first fence tag is its fence), lookup of every name and target, unknown
 * names answered NULL, the compiled flags agreeing with kf_backend_names, the GPU
 * template family agreeing with the renderer's languages, and the language features the
 * GPU templates ask the renderer (min_groups, shuffle extension, mma).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/platform.h"
#include "render/render.h"

static void expect_prompt(const char *file, const char *platform) {
    char path[1024];
    snprintf(path, sizeof path, "%s/prompts/%s", KF_SOURCE_DIR, file);
    cr_expect(access(path, R_OK) == 0, "%s: prompt file %s is missing", platform, path);
}

Test(platform, every_row_complete) {
    int n = kf_platform_count();
    cr_assert_geq(n, 4);
    cr_assert_null(kf_platform_at(-1));
    cr_assert_null(kf_platform_at(n));
    for (int i = 0; i < n; i++) {
        const kf_platform *p = kf_platform_at(i);
        cr_assert_not_null(p);
        cr_assert(p->name && p->name[0], "row %d has no name", i);
        const char *nm = p->name;
        cr_expect(p->language && p->language[0], "%s: language", nm);
        cr_expect(p->ext && p->ext[0] == '.' && p->ext[1], "%s: extension", nm);
        char kfile[64];
        snprintf(kfile, sizeof kfile, "kernel%s", p->ext);
        cr_expect(p->kernel_file && strcmp(p->kernel_file, kfile) == 0, "%s: kernel file %s, want %s", nm,
                  p->kernel_file ? p->kernel_file : "(null)", kfile);
        cr_expect(p->fence && p->fence[0], "%s: fence", nm);
        cr_assert(p->fence_tags && p->fence_tags[0], "%s: fence tags", nm);
        size_t fl = strlen(p->fence);
        cr_expect(strncmp(p->fence_tags, p->fence, fl) == 0 &&
                      (p->fence_tags[fl] == 0 || p->fence_tags[fl] == ','),
                  "%s: the fence '%s' is not the first of the accepted tags '%s'", nm, p->fence, p->fence_tags);
        cr_assert(p->contract_prompt && p->example_prompt, "%s: prompt files", nm);
        expect_prompt(p->contract_prompt, nm);
        expect_prompt(p->example_prompt, nm);
        cr_expect(p->memchecker >= KF_MEMCHECKER_NONE && p->memchecker <= KF_MEMCHECKER_COMPUTE_SANITIZER,
                  "%s: memchecker", nm);
        cr_expect(p->profiler >= KF_PROFILER_NONE && p->profiler <= KF_PROFILER_NCU, "%s: profiler", nm);
        cr_expect(p->timing == KF_TIMING_HOST_CLOCK || p->timing == KF_TIMING_DEVICE_EVENTS, "%s: timing", nm);
        cr_expect(p->templates == KF_TPL_CPU || p->templates == KF_TPL_GPU, "%s: templates", nm);
        cr_expect(p->is_gpu == 0 || p->is_gpu == 1, "%s: is_gpu", nm);
        cr_expect(p->host_form == 0 || p->host_form == 1, "%s: host_form", nm);
        cr_expect(p->compiled == 0 || p->compiled == 1, "%s: compiled", nm);
        /* a host platform is timed by the host's clock and written by the CPU templates;
         * a GPU-style one by device events and the rendered kernel form */
        cr_expect_eq(p->timing == KF_TIMING_HOST_CLOCK, !p->is_gpu, "%s: timing vs is_gpu", nm);
        cr_expect_eq(p->templates == KF_TPL_CPU, !p->is_gpu, "%s: templates vs is_gpu", nm);
        cr_expect(!p->host_form || p->is_gpu, "%s: a host form only where sources declare launches", nm);
        /* the GPU templates render to a language the renderer has */
        cr_expect_eq(p->templates == KF_TPL_GPU, kf_lang_by_name(p->name) != NULL,
                     "%s: GPU templates and a renderer language go together", nm);
        for (int j = 0; j < i; j++)
            cr_expect(strcmp(kf_platform_at(j)->name, nm) != 0, "%s: two rows", nm);
    }
}

Test(platform, lookup_by_name_and_target) {
    static const char *const known[] = {"cpu", "opencl", "cuda", "metal"};
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        cr_expect_not_null(kf_platform_find(known[k]), "%s has no row", known[k]);
    for (int i = 0; i < kf_platform_count(); i++) {
        const kf_platform *p = kf_platform_at(i);
        cr_expect_eq(kf_platform_find(p->name), p, "%s", p->name);
        cr_expect_eq(kf_platform_of_target(p->name), p, "%s", p->name);
        char target[64];
        snprintf(target, sizeof target, "%s:3", p->name);
        cr_expect_eq(kf_platform_of_target(target), p, "%s", target);
        cr_expect_eq(kf_platform_is_host(p->name), !p->is_gpu, "%s", p->name);
    }
    const kf_platform *h = kf_platform_host();
    cr_assert_not_null(h);
    cr_expect_eq(h->is_gpu, 0);
    cr_expect(h->compiled);
    cr_expect_eq(kf_platform_find(h->name), h);
}

Test(platform, unknown_names) {
    static const char *const unknown[] = {"", "CUDA", "cpux", "cu", "opencl:1", "vulkan", " cpu"};
    for (size_t k = 0; k < sizeof unknown / sizeof unknown[0]; k++)
        cr_expect_null(kf_platform_find(unknown[k]), "'%s' found", unknown[k]);
    cr_expect_null(kf_platform_find(NULL));
    cr_expect_null(kf_platform_of_target(NULL));
    cr_expect_null(kf_platform_of_target(""));
    cr_expect_null(kf_platform_of_target(":1"));
    cr_expect_null(kf_platform_of_target("cpux:1"));
    cr_expect_null(kf_platform_of_target("vulkan"));
    cr_expect_eq(kf_platform_is_host(NULL), 0);
    cr_expect_eq(kf_platform_is_host("vulkan"), 0);
}

/* kf_backend_names lists exactly the rows this build compiled. */
Test(platform, compiled_rows_are_the_backends) {
    const char *const *names = kf_backend_names();
    int nb = 0;
    for (; names[nb]; nb++) {
        const kf_platform *p = kf_platform_find(names[nb]);
        cr_assert_not_null(p, "backend %s has no row", names[nb]);
        cr_expect(p->compiled, "backend %s is compiled but its row says not", names[nb]);
    }
    int nc = 0;
    for (int i = 0; i < kf_platform_count(); i++) nc += kf_platform_at(i)->compiled;
    cr_expect_eq(nc, nb, "%d rows compiled, %d backends", nc, nb);
}

Test(platform, device_is_gpu) {
    cr_expect_eq(kf_platform_device_is_gpu("cpu", NULL), 0);
    cr_expect_eq(kf_platform_device_is_gpu("cpu", "gpu"), 0);
    cr_expect_eq(kf_platform_device_is_gpu("opencl", "cpu"), 0); /* PoCL */
    cr_expect_eq(kf_platform_device_is_gpu("opencl", "gpu"), 1);
    cr_expect_eq(kf_platform_device_is_gpu("cuda", NULL), 1);    /* an older record */
    cr_expect_eq(kf_platform_device_is_gpu("vulkan", NULL), 1);
    kf_device_info d;
    memset(&d, 0, sizeof d);
    snprintf(d.platform, sizeof d.platform, "opencl");
    snprintf(d.device_type, sizeof d.device_type, "cpu");
    cr_expect_eq(kf_device_is_gpu(&d), 0);
    cr_expect(kf_device_type_is_cpu(&d));
    snprintf(d.device_type, sizeof d.device_type, "gpu");
    cr_expect_eq(kf_device_is_gpu(&d), 1);
    cr_expect_eq(kf_device_type_is_cpu(&d), 0);
}

/* The language features the GPU templates ask the renderer instead of a platform name. */
Test(platform, render_language_features) {
    const kf_lang *cl = kf_lang_get(KF_LANG_OPENCL), *cu = kf_lang_get(KF_LANG_CUDA),
                  *mtl = kf_lang_get(KF_LANG_METAL);
    cr_expect(kf_lang_shuffle_needs_ext(cl));
    cr_expect(!kf_lang_shuffle_needs_ext(cu) && !kf_lang_shuffle_needs_ext(mtl));
    cr_expect(kf_lang_has_min_groups(cu));
    cr_expect(!kf_lang_has_min_groups(cl) && !kf_lang_has_min_groups(mtl));
    cr_expect(kf_lang_has_mma(cu));
    cr_expect(!kf_lang_has_mma(cl) && !kf_lang_has_mma(mtl));
}

/* Which sources declare a launch plan that must parse (kf_candidate_plan's callers ask). */
Test(platform, declares_plan) {
    const char *planned = "// kforge:launch k global=64 local=64 args=0\n";
    const char *bare = "int kforge_kernel(void *const *args) { return 0; }\n";
    for (int i = 0; i < kf_platform_count(); i++) {
        const kf_platform *p = kf_platform_at(i);
        cr_assert_eq(kf_platform_declares_plan(p->name, planned), p->is_gpu, "%s", p->name);
        /* without launch lines: a GPU-style source must still declare one, unless the
         * platform has a host form (CUDA's nvcc form) */
        cr_assert_eq(kf_platform_declares_plan(p->name, bare), p->is_gpu && !p->host_form, "%s", p->name);
        cr_assert_eq(kf_platform_declares_plan(p->name, NULL), 0);
    }
    cr_assert_eq(kf_platform_declares_plan(NULL, planned), 0);
    cr_assert_eq(kf_platform_declares_plan("nope", planned), 0);
}
