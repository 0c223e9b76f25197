/*
 * Internals of the CUDA platform (src/backend/cuda/), shared by its files and its tests.
 *
 * The first half needs no CUDA header and no device: NVRTC compilation and the nvcc form's
 * compile, which tests and CI use on machines without a GPU. The second half (driver API
 * table, probing) is visible only to files that include <cuda.h> first.
 *
 * Both libraries are loaded at run time with dlopen, never linked: one kforge binary runs
 * everywhere and reports CUDA absent where there is no driver.
 */
#ifndef KFORGE_CUDA_INT_H
#define KFORGE_CUDA_INT_H

#include "kforge/backend.h"

/* ---- device-less: NVRTC and nvcc (cuda_nvrtc.c) ---- */

/* Whether source is the NVRTC form (it declares its launch plan with `kforge:launch`
 * lines); otherwise it is the nvcc form (a host function kforge_kernel). */
int kf_cuda_is_nvrtc_form(const char *source);

/* Load NVRTC once per process (libnvrtc.so.13, libnvrtc.so, libnvrtc.so.12, then under
 * $CUDA_HOME/lib64 and /usr/local/cuda/lib64). On success version gets "NVRTC 13.0".
 * KF_ERR_UNSUPPORTED with the places tried when it cannot be loaded. */
kf_status kf_cuda_nvrtc_version(char *version, size_t cap, kf_error *err);

/* Compile CUDA C++ source with NVRTC into a CUBIN (SASS) for arch ("sm_90"). options is a
 * line of extra words (split on blanks, quotes honoured), e.g. "-default-device -DN=4";
 * --gpu-architecture=<arch> is added unless options already name an architecture, and
 * -I<toolkit>/include when the toolkit's headers are found (so that cuda_fp16.h works).
 * The program is named "candidate.cu" in messages. The whole program log goes to log
 * (if non-NULL), success or not; the CUBIN bytes are appended to cubin.
 * KF_ERR_COMPILE with the first lines of the log (and the line of the first error in
 * err->line) when the source or the options are rejected; KF_ERR_UNSUPPORTED when NVRTC
 * is absent. */
kf_status kf_cuda_nvrtc_compile(const char *source, const char *arch, const char *options,
                                kf_buf *cubin, kf_buf *log, kf_error *err);

/* Path of nvcc: PATH, then $CUDA_HOME/bin, then /usr/local/cuda/bin. KF_ERR_UNSUPPORTED
 * naming the places looked in when there is none. */
kf_status kf_cuda_nvcc_find(char *path, size_t cap, kf_error *err);

/* The nvcc form's compile: writes workdir/<hash>.cu and builds workdir/<hash>.so with
 * `nvcc -O3 -arch=<arch> -Xcompiler -fPIC -shared <flags> -o <tmp> <hash>.cu` in a child
 * process (own process group, output captured into log, killed after a time limit), then
 * renames it into place; an existing <hash>.so of the same (source, arch, flags, nvcc
 * version) is reused. The path of the .so goes to artifact. KF_ERR_COMPILE with the first
 * error line on a failed build or a timeout; KF_ERR_UNSUPPORTED when there is no nvcc;
 * KF_ERR_IO when workdir cannot be written. */
kf_status kf_cuda_nvcc_compile(const char *source, const char *arch, const char *flags,
                               const char *workdir, char *artifact, size_t cap, kf_buf *log,
                               kf_error *err);

/* ---- driver API (cuda_probe.c); include <cuda.h> before this header ---- */
#ifdef __cuda_cuda_h__

/* Every driver entry point kforge uses, as (field, function). The function names go
 * through cuda.h's macros, so both the pointer type and the symbol looked up are the
 * versioned ones (cuMemAlloc -> cuMemAlloc_v2). */
#define KF_CU_FUNCS(X)                                                                         \
    X(Init, cuInit)                                                                            \
    X(DriverGetVersion, cuDriverGetVersion)                                                    \
    X(DeviceGetCount, cuDeviceGetCount)                                                        \
    X(DeviceGet, cuDeviceGet)                                                                  \
    X(DeviceGetName, cuDeviceGetName)                                                          \
    X(DeviceGetAttribute, cuDeviceGetAttribute)                                                \
    X(DeviceTotalMem, cuDeviceTotalMem)                                                        \
    X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)                                        \
    X(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease)                                      \
    X(CtxSetCurrent, cuCtxSetCurrent)                                                          \
    X(CtxSynchronize, cuCtxSynchronize)                                                        \
    X(GetErrorName, cuGetErrorName)                                                            \
    X(GetErrorString, cuGetErrorString)                                                        \
    X(ModuleLoadData, cuModuleLoadData)                                                        \
    X(ModuleUnload, cuModuleUnload)                                                            \
    X(ModuleGetFunction, cuModuleGetFunction)                                                  \
    X(FuncGetAttribute, cuFuncGetAttribute)                                                    \
    X(FuncSetAttribute, cuFuncSetAttribute)                                                    \
    X(LaunchKernel, cuLaunchKernel)                                                            \
    X(MemAlloc, cuMemAlloc)                                                                    \
    X(MemFree, cuMemFree)                                                                      \
    X(MemcpyHtoD, cuMemcpyHtoD)                                                                \
    X(MemcpyDtoH, cuMemcpyDtoH)                                                                \
    X(MemcpyDtoD, cuMemcpyDtoD)                                                                \
    X(MemsetD8, cuMemsetD8)                                                                    \
    X(MemsetD16, cuMemsetD16)                                                                  \
    X(MemsetD32, cuMemsetD32)                                                                  \
    X(MemsetD2D32, cuMemsetD2D32)                                                              \
    X(EventCreate, cuEventCreate)                                                              \
    X(EventDestroy, cuEventDestroy)                                                            \
    X(EventRecord, cuEventRecord)                                                              \
    X(EventSynchronize, cuEventSynchronize)                                                    \
    X(EventElapsedTime, cuEventElapsedTime)

typedef struct kf_cu_api {
#define KF_CU_FIELD(field, fn) __typeof__(fn) *field;
    KF_CU_FUNCS(KF_CU_FIELD)
#undef KF_CU_FIELD
    /* optional (driver 12.4+): kernel parameter sizes, to check a launch's argument count;
     * NULL when the driver lacks it */
    __typeof__(cuFuncGetParamInfo) *FuncGetParamInfo;
    /* optional: page-locks a host range (cuMemHostRegister_v2); NULL when missing */
    __typeof__(cuMemHostRegister) *MemHostRegister;
    int driver_version; /* cuDriverGetVersion, e.g. 13000 */
} kf_cu_api;

/* The driver table, loaded and cuInit'ed once per process ($KFORGE_CUDA_DRIVER names
 * another library than libcuda.so.1). NULL with KF_ERR_UNSUPPORTED in err when there is no
 * driver ("no CUDA driver (libcuda.so.1 not found: ...)"), a symbol is missing, or cuInit
 * fails (with the CUresult's name). The table is static: never freed. */
const kf_cu_api *kf_cu_api_get(kf_error *err);

/* "CUDA_ERROR_ILLEGAL_ADDRESS" for rc (from the driver, else a built-in table, else
 * "CUresult <n>"); static or thread-local storage, never NULL. */
const char *kf_cu_error_name(CUresult rc);
/* "CUDA_ERROR_X: <the driver's description>" into buf. */
void kf_cu_error_text(CUresult rc, char *buf, size_t cap);
/* Whether rc is a device fault that leaves the context unusable for the process. */
int kf_cu_error_is_sticky(CUresult rc);

/* Number of devices; KF_ERR_UNSUPPORTED with why when the driver is absent or there is
 * none. */
kf_status kf_cu_device_count(const kf_cu_api **api, int *n, kf_error *err);
/* Fill info for device dev (no context needed); see the contract in cuda_probe.c. */
kf_status kf_cu_probe_device(const kf_cu_api *api, CUdevice dev, kf_device_info *info,
                             kf_error *err);
#endif /* __cuda_cuda_h__ */

#endif
