/*
 * The platform descriptor table (include/kforge/platform.h): one row per platform kforge
 * knows, and the only place outside the platform folders where a platform's name is
 * compared. Each row says what the rest of kforge used to decide by comparing names: the
 * candidates' language and file names, the LLM's code fences and prompt files, the memory
 * checker, the profiler, the timing method and the template family.
 *
 * Metal has no backend yet: its row serves the builtin generator (it renders Metal
 * kernels) and the prompts. It has no example kernel of its own: like any platform
 * without one before the table, it is shown the CPU example.
 */
#include "kforge/platform.h"
#include "kforge/backend.h"

#include <stddef.h>
#include <string.h>

#ifdef KF_HAVE_OPENCL
#define KF_OPENCL_COMPILED 1
#else
#define KF_OPENCL_COMPILED 0
#endif
#ifdef KF_HAVE_CUDA
#define KF_CUDA_COMPILED 1
#else
#define KF_CUDA_COMPILED 0
#endif

static const kf_platform rows[] = {
    {
        .name = "cpu",
        .language = "C11 with OpenMP",
        .ext = ".c",
        .kernel_file = "kernel.c",
        .fence = "c",
        .fence_tags = "c",
        .contract_prompt = "contract_cpu.md",
        .example_prompt = "examples/cpu.c",
        .memchecker = KF_MEMCHECKER_VALGRIND,
        .profiler = KF_PROFILER_PERF_EVENT,
        .timing = KF_TIMING_HOST_CLOCK,
        .templates = KF_TPL_CPU,
        .is_gpu = 0,
        .host_form = 0,
        .compiled = 1,
        .dev_gap_abs_ms = 0,
    },
    {
        .name = "opencl",
        .language = "OpenCL C",
        .ext = ".cl",
        .kernel_file = "kernel.cl",
        .fence = "opencl",
        .fence_tags = "opencl,cl,c",
        .contract_prompt = "contract_opencl.md",
        .example_prompt = "examples/opencl.cl",
        .memchecker = KF_MEMCHECKER_NONE,
        .profiler = KF_PROFILER_NONE,
        .timing = KF_TIMING_DEVICE_EVENTS,
        .templates = KF_TPL_GPU,
        .is_gpu = 1,
        .host_form = 0,
        .compiled = KF_OPENCL_COMPILED,
        .dev_gap_abs_ms = 1.0, /* PoCL: honest rests under 0.5 ms; 2.8 ms seen once, three ASan runs side by side */
    },
    {
        .name = "cuda",
        .language = "CUDA C++",
        .ext = ".cu",
        .kernel_file = "kernel.cu",
        .fence = "cuda",
        .fence_tags = "cuda,cu,cpp,c++,c",
        .contract_prompt = "contract_cuda.md",
        .example_prompt = "examples/cuda.cu",
        .memchecker = KF_MEMCHECKER_COMPUTE_SANITIZER,
        .profiler = KF_PROFILER_NCU,
        .timing = KF_TIMING_DEVICE_EVENTS,
        .templates = KF_TPL_GPU,
        .is_gpu = 1,
        .host_form = 1,
        .compiled = KF_CUDA_COMPILED,
        .dev_gap_abs_ms = 0.4, /* H100: honest median rests <= 0.16 ms, host loads 0-64 */
    },
    {
        .name = "metal",
        .language = "Metal Shading Language",
        .ext = ".metal",
        .kernel_file = "kernel.metal",
        .fence = "metal",
        .fence_tags = "metal,msl,cpp,c++",
        .contract_prompt = "contract_metal.md",
        .example_prompt = "examples/cpu.c",
        .memchecker = KF_MEMCHECKER_NONE,
        .profiler = KF_PROFILER_NONE,
        .timing = KF_TIMING_DEVICE_EVENTS,
        .templates = KF_TPL_GPU,
        .is_gpu = 1,
        .host_form = 0,
        .compiled = 0,
        .dev_gap_abs_ms = 1.0, /* not measured: no backend */
    },
};

#define NROWS ((int)(sizeof rows / sizeof rows[0]))

/* See platform.h. */
const kf_platform *kf_platform_find(const char *name) {
    for (int i = 0; name && i < NROWS; i++)
        if (strcmp(rows[i].name, name) == 0) return &rows[i];
    return NULL;
}

/* See platform.h. */
const kf_platform *kf_platform_of_target(const char *target) {
    if (!target) return NULL;
    const char *colon = strchr(target, ':');
    size_t n = colon ? (size_t)(colon - target) : strlen(target);
    for (int i = 0; i < NROWS; i++)
        if (strlen(rows[i].name) == n && strncmp(rows[i].name, target, n) == 0) return &rows[i];
    return NULL;
}

/* See platform.h. */
const kf_platform *kf_platform_host(void) { return &rows[0]; }

/* See platform.h. */
const kf_platform *kf_platform_at(int i) { return i >= 0 && i < NROWS ? &rows[i] : NULL; }

/* See platform.h. */
int kf_platform_count(void) { return NROWS; }

/* See platform.h. */
int kf_platform_is_host(const char *name) {
    const kf_platform *p = kf_platform_find(name);
    return p && !p->is_gpu;
}

/* See platform.h. */
int kf_platform_declares_plan(const char *platform, const char *source) {
    const kf_platform *p = kf_platform_find(platform);
    if (!p || !p->is_gpu || !source) return 0;
    return !(p->host_form && !strstr(source, "kforge:launch"));
}

/* See platform.h. */
int kf_platform_device_is_gpu(const char *platform, const char *device_type) {
    if (kf_platform_is_host(platform)) return 0;
    return !(device_type && strcmp(device_type, "cpu") == 0);
}

/* See backend.h. */
int kf_device_is_gpu(const kf_device_info *d) {
    return kf_platform_device_is_gpu(d->platform, d->device_type);
}

/* See backend.h. */
int kf_device_type_is_cpu(const kf_device_info *d) { return strcmp(d->device_type, "cpu") == 0; }
