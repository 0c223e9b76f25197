/*
 * The CUDA driver API, loaded at run time, and device probing (cuda.c uses both).
 *
 * libcuda.so.1 is dlopen'ed once per process and every entry point is looked up under the
 * name cuda.h maps it to (cuMemAlloc -> cuMemAlloc_v2): the unversioned names are older
 * ABIs kept for old binaries (32-bit device pointers, for instance), so a name is never
 * guessed. The one exception is cuEventElapsedTime, whose _v2 (driver 12.8+) has the same
 * signature as the original, so an older driver still times. The toolkit's stub library
 * (lib64/stubs) answers every call with CUDA_ERROR_STUB_LIBRARY: it is refused like a
 * missing driver, with that name.
 *
 * Probing asks the driver only (cuDeviceGetAttribute and friends, no context), so that
 * `kforge devices` lists every GPU without creating contexts on them.
 */
#include <cuda.h>

#include "backend/cuda/cuda_int.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KF_STR_(x) #x
#define KF_STR(x) KF_STR_(x)

static kf_cu_api g_api;
static kf_status g_status = KF_ERR_UNSUPPORTED;
static char g_why[768];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Names of the results a kforge user meets, for drivers (the stub) that cannot name them. */
#define E(x) {x, #x}
static const struct {
    CUresult rc;
    const char *name;
} cu_names[] = {
    E(CUDA_SUCCESS), E(CUDA_ERROR_INVALID_VALUE), E(CUDA_ERROR_OUT_OF_MEMORY),
    E(CUDA_ERROR_NOT_INITIALIZED), E(CUDA_ERROR_DEINITIALIZED), E(CUDA_ERROR_STUB_LIBRARY),
    E(CUDA_ERROR_NO_DEVICE), E(CUDA_ERROR_INVALID_DEVICE), E(CUDA_ERROR_DEVICE_NOT_LICENSED),
    E(CUDA_ERROR_INVALID_IMAGE), E(CUDA_ERROR_INVALID_CONTEXT), E(CUDA_ERROR_NO_BINARY_FOR_GPU),
    E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION), E(CUDA_ERROR_INVALID_SOURCE), E(CUDA_ERROR_NOT_FOUND),
    E(CUDA_ERROR_INVALID_HANDLE), E(CUDA_ERROR_ILLEGAL_ADDRESS),
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), E(CUDA_ERROR_LAUNCH_TIMEOUT),
    E(CUDA_ERROR_ASSERT), E(CUDA_ERROR_HARDWARE_STACK_ERROR), E(CUDA_ERROR_ILLEGAL_INSTRUCTION),
    E(CUDA_ERROR_MISALIGNED_ADDRESS), E(CUDA_ERROR_INVALID_ADDRESS_SPACE), E(CUDA_ERROR_INVALID_PC),
    E(CUDA_ERROR_LAUNCH_FAILED), E(CUDA_ERROR_NOT_SUPPORTED), E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH),
    E(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE),
    E(CUDA_ERROR_UNKNOWN),
};
#undef E

const char *kf_cu_error_name(CUresult rc) {
    const char *s = NULL;
    if (g_api.GetErrorName && g_api.GetErrorName(rc, &s) == CUDA_SUCCESS && s) return s;
    for (size_t i = 0; i < sizeof cu_names / sizeof cu_names[0]; i++)
        if (cu_names[i].rc == rc) return cu_names[i].name;
    static _Thread_local char buf[32];
    snprintf(buf, sizeof buf, "CUresult %d", (int)rc);
    return buf;
}

void kf_cu_error_text(CUresult rc, char *buf, size_t cap) {
    const char *s = NULL;
    if (!g_api.GetErrorString || g_api.GetErrorString(rc, &s) != CUDA_SUCCESS) s = NULL;
    snprintf(buf, cap, "%s%s%s", kf_cu_error_name(rc), s ? ": " : "", s ? s : "");
}

/* The results that the driver documents as leaving the context unusable ("the process
 * must terminate and relaunch"): every later call in the process fails the same way. */
int kf_cu_error_is_sticky(CUresult rc) {
    switch (rc) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
        return 1;
    default:
        return 0;
    }
}

static const struct {
    const char *name; /* the versioned symbol, as cuda.h maps it */
    const char *base; /* the name as written, for the one fallback */
    size_t offset;
} cu_syms[] = {
#define KF_CU_SYM(field, fn) {KF_STR(fn), #fn, offsetof(kf_cu_api, field)},
    KF_CU_FUNCS(KF_CU_SYM)
#undef KF_CU_SYM
};

static void load_driver(void) {
    const char *lib = getenv("KFORGE_CUDA_DRIVER");
    if (!lib || !lib[0]) lib = "libcuda.so.1";
    dlerror();
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(g_why, sizeof g_why, "no CUDA driver (%s not found: %s)", lib,
                 e ? e : "dlopen failed");
        return;
    }
    for (size_t i = 0; i < sizeof cu_syms / sizeof cu_syms[0]; i++) {
        void *p = dlsym(h, cu_syms[i].name);
        if (!p && strcmp(cu_syms[i].base, "cuEventElapsedTime") == 0)
            p = dlsym(h, cu_syms[i].base);
        if (!p) {
            snprintf(g_why, sizeof g_why,
                     "the CUDA driver %s lacks %s (driver too old for this kforge build)", lib,
                     cu_syms[i].name);
            memset(&g_api, 0, sizeof g_api);
            return; /* the library stays loaded: harmless, and others may hold it */
        }
        memcpy((char *)&g_api + cu_syms[i].offset, &p, sizeof p);
    }
    void *p = dlsym(h, "cuFuncGetParamInfo");
    memcpy(&g_api.FuncGetParamInfo, &p, sizeof p);
    p = dlsym(h, "cuMemHostRegister_v2");
    memcpy(&g_api.MemHostRegister, &p, sizeof p);
    CUresult rc = g_api.Init(0);
    if (rc != CUDA_SUCCESS) {
        char text[300];
        kf_cu_error_text(rc, text, sizeof text);
        if (rc == CUDA_ERROR_STUB_LIBRARY)
            snprintf(g_why, sizeof g_why,
                     "no CUDA driver (%s is the toolkit's stub library, not a driver: cuInit "
                     "gave %s)",
                     lib, text);
        else
            snprintf(g_why, sizeof g_why, "cuInit failed: %s", text);
        return;
    }
    int v = 0;
    if (g_api.DriverGetVersion(&v) == CUDA_SUCCESS) g_api.driver_version = v;
    g_status = KF_OK;
}

const kf_cu_api *kf_cu_api_get(kf_error *err) {
    pthread_once(&g_once, load_driver);
    if (g_status != KF_OK) {
        kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", g_why);
        return NULL;
    }
    return &g_api;
}

kf_status kf_cu_device_count(const kf_cu_api **api, int *n, kf_error *err) {
    *n = 0;
    *api = kf_cu_api_get(err);
    if (!*api) return KF_ERR_UNSUPPORTED;
    int count = 0;
    CUresult rc = (*api)->DeviceGetCount(&count);
    if (rc != CUDA_SUCCESS) {
        char text[300];
        kf_cu_error_text(rc, text, sizeof text);
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "cuDeviceGetCount: %s", text);
    }
    if (count <= 0)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "the CUDA driver reports no device (%s)",
                            kf_cu_error_name(CUDA_ERROR_NO_DEVICE));
    *n = count;
    return KF_OK;
}

static int attr(const kf_cu_api *api, CUdevice dev, CUdevice_attribute a) {
    int v = 0;
    if (api->DeviceGetAttribute(&v, a, dev) != CUDA_SUCCESS) return 0;
    return v;
}

/* Probe device dev into info (zeroed first): names, compute capability as arch "sm_XY",
 * limits and sizes from device attributes, the NVRTC default options in flags and
 * "NVRTC <version>" in compiler ("NVRTC not found" when it is absent: the device is still
 * usable by the nvcc form). KF_ERR_UNSUPPORTED when the driver cannot name the device. */
kf_status kf_cu_probe_device(const kf_cu_api *api, CUdevice dev, kf_device_info *info,
                             kf_error *err) {
    memset(info, 0, sizeof *info);
    snprintf(info->platform, sizeof info->platform, "cuda");
    CUresult rc = api->DeviceGetName(info->name, (int)sizeof info->name, dev);
    if (rc != CUDA_SUCCESS) {
        char text[300];
        kf_cu_error_text(rc, text, sizeof text);
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "cuDeviceGetName: %s", text);
    }
    int major = attr(api, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    int minor = attr(api, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    snprintf(info->arch, sizeof info->arch, "sm_%d%d", major, minor);
    snprintf(info->device_type, sizeof info->device_type, "gpu");
    snprintf(info->vendor, sizeof info->vendor, "NVIDIA");
    snprintf(info->platform_name, sizeof info->platform_name, "NVIDIA CUDA");
    int dv = api->driver_version;
    snprintf(info->driver, sizeof info->driver, "%d.%d", dv / 1000, (dv % 1000) / 10);
    snprintf(info->version, sizeof info->version, "CUDA %s %s", info->driver, info->arch);
    snprintf(info->lang_version, sizeof info->lang_version, "CUDA C++17");
    int sms = attr(api, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    info->compute_units = sms;
    info->cores = sms;
    info->threads = sms * attr(api, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    info->max_wg = attr(api, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    info->max_wi[0] = attr(api, dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
    info->max_wi[1] = attr(api, dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
    info->max_wi[2] = attr(api, dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
    /* what a candidate's static __shared__ arrays may hold (48 KiB); more only as dynamic
     * shared memory (a launch's smem=), which the launcher opts the kernel into up to the
     * opt-in maximum (227 KiB on Hopper; static arrays sized for it are rejected by ptxas) */
    info->local_mem_bytes = attr(api, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    info->local_mem_optin_bytes = attr(api, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    size_t total = 0;
    if (api->DeviceTotalMem(&total, dev) == CUDA_SUCCESS) {
        info->global_mem_bytes = (int64_t)total;
        info->mem_bytes = (int64_t)total;
        info->max_alloc_bytes = (int64_t)total;
    }
    info->l2_bytes = attr(api, dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    info->subgroup_size = attr(api, dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    if (info->subgroup_size == 0) info->subgroup_size = 32;
    info->base_align_bytes = 256;
    info->clock_mhz = attr(api, dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE) / 1000;
    info->fp64 = 1;
    info->simd_bits = info->subgroup_size * 32;
    char nv[64];
    kf_error e = {0};
    if (kf_cuda_nvrtc_version(nv, sizeof nv, &e) == KF_OK)
        snprintf(info->compiler, sizeof info->compiler, "%s", nv);
    else
        snprintf(info->compiler, sizeof info->compiler, "NVRTC not found");
    /* IEEE semantics kept: no --use_fast_math (the verifier compares NaN/Inf exactly);
     * -fmad=true is NVRTC's default and stays */
    snprintf(info->flags, sizeof info->flags, "--gpu-architecture=%s -default-device --std=c++17",
             info->arch);
    return KF_OK;
}
