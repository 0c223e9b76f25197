/*
 * kforge platform descriptors: one row per platform kforge knows (cpu, opencl, cuda,
 * metal), whether or not this build compiled its backend in. Everything outside
 * src/backend/ that depends on the platform asks a row's attributes (is it GPU-style,
 * which memory checker, which profiler, which file names and code fences) instead of
 * comparing the platform's name; the name is looked up once, here.
 *
 * Rows are static storage and never change while the program runs.
 */
#ifndef KFORGE_PLATFORM_H
#define KFORGE_PLATFORM_H

#ifdef __cplusplus
extern "C" {
#endif

/* The memory checker kf_verify_memcheck runs a platform's final candidate under. */
typedef enum kf_memchecker {
    KF_MEMCHECKER_NONE = 0,          /* none: the guard zones alone catch stray writes */
    KF_MEMCHECKER_VALGRIND,          /* valgrind memcheck on the host process */
    KF_MEMCHECKER_COMPUTE_SANITIZER  /* NVIDIA compute-sanitizer on the device kernels */
} kf_memchecker;

/* Where a platform's hardware counters come from. */
typedef enum kf_profiler {
    KF_PROFILER_NONE = 0,      /* no counter reader */
    KF_PROFILER_PERF_EVENT,    /* the host's perf_event_open counters (kforge does not yet
                                  collect them per candidate) */
    KF_PROFILER_NCU            /* Nsight Compute runs each candidate (--counters ncu) */
} kf_profiler;

/* How the runner times a launch (DESIGN.md section 5). */
typedef enum kf_timing {
    KF_TIMING_HOST_CLOCK = 1,  /* the monotonic clock around a synchronous call */
    KF_TIMING_DEVICE_EVENTS    /* device events around the whole launch plan */
} kf_timing;

/* Which of the builtin generator's template families writes the platform's kernels. */
typedef enum kf_tpl_family {
    KF_TPL_CPU = 1,            /* C + OpenMP + SIMD templates */
    KF_TPL_GPU                 /* the kernel form rendered per language (src/render/) */
} kf_tpl_family;

typedef struct kf_platform {
    const char *name;          /* "cuda": a target is NAME or NAME:DEVICE_INDEX */
    const char *language;      /* the candidates' language, in words ("CUDA C++") */
    const char *ext;           /* a candidate source's file extension (".cu") */
    const char *kernel_file;   /* the best kernel's file in an output directory ("kernel.cu") */
    const char *fence;         /* the code-fence tag the prompts write sources under */
    const char *fence_tags;    /* the fence tags the LLM code extractor accepts, comma-separated */
    const char *contract_prompt; /* the candidate contract, a file under prompts/ */
    const char *example_prompt;  /* the one-shot example kernel, a file under prompts/ */
    kf_memchecker memchecker;
    kf_profiler profiler;
    kf_timing timing;
    kf_tpl_family templates;
    /* GPU-style: candidates are device kernels that declare a launch plan and run through
     * the platform interface on device memory, and the device report has the GPU fields.
     * A driver may still run them on a CPU (PoCL): kf_device_is_gpu tells for a device. 0:
     * candidates are host C loaded into the runner (dlopen) and time with the host clock. */
    int is_gpu;
    /* A source with no "kforge:launch" lines is a host program whose kforge_kernel launches
     * its own kernels (CUDA's nvcc form), so it has no launch plan to check. */
    int host_form;
    int compiled;              /* this build has the platform's backend (kf_backend_names) */
    /* The device-time bound's absolute allowance in ms (src/verify/verify.c,
     * dev_times_believable): what a timed call's clock may hold beyond the device's time,
     * the waits for a CPU and KF_DEV_GAP_PINGS empty round trips with the runner, for the
     * launch and the completion's wake-up. Set from honest gaps measured per platform
     * (docs/benchmarks/verification.md); 0 where the device's time is not reported. */
    double dev_gap_abs_ms;
} kf_platform;

/* The row of platform `name` ("cuda", not "cuda:1"); NULL for NULL or an unknown name. */
const kf_platform *kf_platform_find(const char *name);
/* The row of a target "NAME" or "NAME:DEVICE_INDEX" ("opencl:1" -> opencl); NULL for NULL,
 * "" or an unknown name. */
const kf_platform *kf_platform_of_target(const char *target);
/* The host platform (cpu): the default target, where NULL or "" points. Never NULL. */
const kf_platform *kf_platform_host(void);
/* Row i of the table, 0 <= i < kf_platform_count(); NULL outside. */
const kf_platform *kf_platform_at(int i);
int kf_platform_count(void);
/* Whether `name` is a platform whose candidates are host C run in the runner process (a
 * row with is_gpu 0: cpu); 0 for a GPU-style platform, NULL or an unknown name. */
int kf_platform_is_host(const char *name);
/* Whether a candidate source of `platform` declares a launch plan that must parse: a
 * GPU-style platform's, except the host form (a source without "kforge:launch" lines on a
 * platform with host_form: CUDA's nvcc form launches its own kernels). 0 for a non-GPU
 * platform, NULL or unknown names, or a NULL source. */
int kf_platform_declares_plan(const char *platform, const char *source);
/* Whether a device of `platform` whose driver reports `device_type` (NULL: not reported,
 * as in older run records) is GPU-style: not a non-GPU platform, and not a driver's CPU
 * device (PoCL). An unknown platform name counts as GPU-style. kf_device_is_gpu asks this. */
int kf_platform_device_is_gpu(const char *platform, const char *device_type);

#ifdef __cplusplus
}
#endif
#endif
