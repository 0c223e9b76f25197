/*
 * OpenCL device discovery and probing, and the names of CL error codes (opencl.c).
 *
 * Discovery flattens every device of every platform into one list (platform order, then
 * device order) so that "opencl:N" means the same device to `kforge devices`, to the
 * verifier and to the sandboxed runner. A platform that answers CL_DEVICE_NOT_FOUND is
 * skipped; no platform at all is an expected condition on a machine without an ICD and
 * says how to get one.
 *
 * Probing asks the driver only (clGetDeviceInfo), except for the sub-group lane count,
 * which OpenCL reports per kernel: it is read from a one-line probe kernel, and only on a
 * device that claims sub-groups (cl_khr_subgroups, or the OpenCL C 3.0 feature), so that
 * subgroup_size != 0 promises that a candidate may use sub-group operations.
 */
#include "kforge/backend.h"

#include <CL/cl.h>
#include <CL/cl_ext.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Vendor query tokens (values fixed by the Khronos registry) that some vendors' copies of
 * cl_ext.h leave out. */
#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif
#ifndef CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV
#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001
#endif
#ifndef CL_DEVICE_WARP_SIZE_NV
#define CL_DEVICE_WARP_SIZE_NV 0x4003
#endif
#ifndef CL_DEVICE_WAVEFRONT_WIDTH_AMD
#define CL_DEVICE_WAVEFRONT_WIDTH_AMD 0x4043
#endif
#ifndef CL_DEVICE_GFXIP_MAJOR_AMD
#define CL_DEVICE_GFXIP_MAJOR_AMD 0x404A
#define CL_DEVICE_GFXIP_MINOR_AMD 0x404B
#endif

const char *kf_ocl_error_name(cl_int code);
kf_status kf_ocl_devices(cl_platform_id **plats, cl_device_id **devs, int *n, kf_error *err);
kf_status kf_ocl_probe_device(cl_platform_id plat, cl_device_id dev, kf_device_info *info,
                              kf_error *err);

#define E(x) {x, #x}
static const struct {
    cl_int code;
    const char *name;
} cl_errors[] = {
    E(CL_SUCCESS), E(CL_DEVICE_NOT_FOUND), E(CL_DEVICE_NOT_AVAILABLE),
    E(CL_COMPILER_NOT_AVAILABLE), E(CL_MEM_OBJECT_ALLOCATION_FAILURE), E(CL_OUT_OF_RESOURCES),
    E(CL_OUT_OF_HOST_MEMORY), E(CL_PROFILING_INFO_NOT_AVAILABLE), E(CL_MEM_COPY_OVERLAP),
    E(CL_IMAGE_FORMAT_MISMATCH), E(CL_IMAGE_FORMAT_NOT_SUPPORTED), E(CL_BUILD_PROGRAM_FAILURE),
    E(CL_MAP_FAILURE), E(CL_MISALIGNED_SUB_BUFFER_OFFSET),
    E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST), E(CL_COMPILE_PROGRAM_FAILURE),
    E(CL_LINKER_NOT_AVAILABLE), E(CL_LINK_PROGRAM_FAILURE), E(CL_DEVICE_PARTITION_FAILED),
    E(CL_KERNEL_ARG_INFO_NOT_AVAILABLE), E(CL_INVALID_VALUE), E(CL_INVALID_DEVICE_TYPE),
    E(CL_INVALID_PLATFORM), E(CL_INVALID_DEVICE), E(CL_INVALID_CONTEXT),
    E(CL_INVALID_QUEUE_PROPERTIES), E(CL_INVALID_COMMAND_QUEUE), E(CL_INVALID_HOST_PTR),
    E(CL_INVALID_MEM_OBJECT), E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR), E(CL_INVALID_IMAGE_SIZE),
    E(CL_INVALID_SAMPLER), E(CL_INVALID_BINARY), E(CL_INVALID_BUILD_OPTIONS),
    E(CL_INVALID_PROGRAM), E(CL_INVALID_PROGRAM_EXECUTABLE), E(CL_INVALID_KERNEL_NAME),
    E(CL_INVALID_KERNEL_DEFINITION), E(CL_INVALID_KERNEL), E(CL_INVALID_ARG_INDEX),
    E(CL_INVALID_ARG_VALUE), E(CL_INVALID_ARG_SIZE), E(CL_INVALID_KERNEL_ARGS),
    E(CL_INVALID_WORK_DIMENSION), E(CL_INVALID_WORK_GROUP_SIZE), E(CL_INVALID_WORK_ITEM_SIZE),
    E(CL_INVALID_GLOBAL_OFFSET), E(CL_INVALID_EVENT_WAIT_LIST), E(CL_INVALID_EVENT),
    E(CL_INVALID_OPERATION), E(CL_INVALID_GL_OBJECT), E(CL_INVALID_BUFFER_SIZE),
    E(CL_INVALID_MIP_LEVEL), E(CL_INVALID_GLOBAL_WORK_SIZE), E(CL_INVALID_PROPERTY),
    E(CL_INVALID_IMAGE_DESCRIPTOR), E(CL_INVALID_COMPILER_OPTIONS),
    E(CL_INVALID_LINKER_OPTIONS), E(CL_INVALID_DEVICE_PARTITION_COUNT),
    E(CL_INVALID_PIPE_SIZE), E(CL_INVALID_DEVICE_QUEUE), E(CL_INVALID_SPEC_ID),
    E(CL_MAX_SIZE_RESTRICTION_EXCEEDED), E(CL_PLATFORM_NOT_FOUND_KHR),
    /* not in any header: NVIDIA's driver reports a faulting kernel (e.g. an out-of-bounds
     * access) this way */
    {-9999, "CL_NV_KERNEL_FAULT(-9999: illegal memory access in a kernel)"},
};
#undef E

/* Name of a CL error code ("CL_INVALID_WORK_GROUP_SIZE"); unknown codes give
 * "CL_ERROR(<code>)" in static storage reused by the next unknown code. Never NULL. */
const char *kf_ocl_error_name(cl_int code) {
    for (size_t i = 0; i < sizeof cl_errors / sizeof cl_errors[0]; i++)
        if (cl_errors[i].code == code) return cl_errors[i].name;
    static _Thread_local char buf[32];
    snprintf(buf, sizeof buf, "CL_ERROR(%d)", (int)code);
    return buf;
}

/* The flattened device list: (*plats)[i] is the platform of (*devs)[i]; both malloc'd,
 * caller frees; *n >= 1 on success. KF_ERR_UNSUPPORTED with why when there is no platform
 * or no device. */
kf_status kf_ocl_devices(cl_platform_id **plats, cl_device_id **devs, int *n, kf_error *err) {
    *plats = NULL;
    *devs = NULL;
    *n = 0;
    cl_uint np = 0;
    cl_int rc = clGetPlatformIDs(0, NULL, &np);
    if (rc != CL_SUCCESS || np == 0)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "no OpenCL platform found (clGetPlatformIDs: %s); install an ICD "
                            "such as pocl-opencl-icd",
                            rc != CL_SUCCESS ? kf_ocl_error_name(rc) : "0 platforms");
    cl_platform_id *pl = kf_calloc(np, sizeof *pl);
    rc = clGetPlatformIDs(np, pl, NULL);
    if (rc != CL_SUCCESS) {
        free(pl);
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "no OpenCL platform found (clGetPlatformIDs: %s)",
                            kf_ocl_error_name(rc));
    }
    int total = 0, cap = 0;
    cl_platform_id *op = NULL;
    cl_device_id *od = NULL;
    char why[256] = "";
    for (cl_uint p = 0; p < np; p++) {
        cl_uint nd = 0;
        rc = clGetDeviceIDs(pl[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
        if (rc != CL_SUCCESS || nd == 0) {
            if (!why[0])
                snprintf(why, sizeof why, "platform %u: clGetDeviceIDs: %s", p,
                         rc != CL_SUCCESS ? kf_ocl_error_name(rc) : "0 devices");
            continue;
        }
        cl_device_id *d = kf_calloc(nd, sizeof *d);
        rc = clGetDeviceIDs(pl[p], CL_DEVICE_TYPE_ALL, nd, d, NULL);
        if (rc == CL_SUCCESS) {
            if (total + (int)nd > cap) {
                cap = total + (int)nd;
                op = kf_realloc(op, (size_t)cap * sizeof *op);
                od = kf_realloc(od, (size_t)cap * sizeof *od);
            }
            for (cl_uint k = 0; k < nd; k++) {
                op[total] = pl[p];
                od[total++] = d[k];
            }
        }
        free(d);
    }
    free(pl);
    if (total == 0) {
        free(op);
        free(od);
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "no OpenCL device found on %u platform%s (%s)", np,
                            np == 1 ? "" : "s", why);
    }
    *plats = op;
    *devs = od;
    *n = total;
    return KF_OK;
}

static void dev_str(cl_device_id dev, cl_device_info what, char *buf, size_t cap) {
    buf[0] = 0;
    size_t n = 0;
    if (clGetDeviceInfo(dev, what, 0, NULL, &n) != CL_SUCCESS || n == 0) return;
    char *tmp = kf_malloc(n + 1);
    if (clGetDeviceInfo(dev, what, n, tmp, NULL) == CL_SUCCESS) {
        tmp[n] = 0;
        /* drivers pad some strings with blanks */
        size_t len = strlen(tmp);
        while (len && (tmp[len - 1] == ' ' || tmp[len - 1] == '\n')) tmp[--len] = 0;
        const char *s = tmp;
        while (*s == ' ') s++;
        snprintf(buf, cap, "%s", s);
    }
    free(tmp);
}

/* A whole string property (extension lists are long); malloc'd, "" on failure. */
static char *dev_str_alloc(cl_device_id dev, cl_device_info what) {
    size_t n = 0;
    if (clGetDeviceInfo(dev, what, 0, NULL, &n) != CL_SUCCESS || n == 0) return kf_strdup("");
    char *s = kf_calloc(n + 1, 1);
    if (clGetDeviceInfo(dev, what, n, s, NULL) != CL_SUCCESS) s[0] = 0;
    return s;
}

static cl_ulong dev_ulong(cl_device_id dev, cl_device_info what) {
    cl_ulong v = 0;
    return clGetDeviceInfo(dev, what, sizeof v, &v, NULL) == CL_SUCCESS ? v : 0;
}

static cl_uint dev_uint(cl_device_id dev, cl_device_info what) {
    cl_uint v = 0;
    return clGetDeviceInfo(dev, what, sizeof v, &v, NULL) == CL_SUCCESS ? v : 0;
}

static size_t dev_size(cl_device_id dev, cl_device_info what) {
    size_t v = 0;
    return clGetDeviceInfo(dev, what, sizeof v, &v, NULL) == CL_SUCCESS ? v : 0;
}

static int clamp_int(uint64_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

/* Word w in a blank-separated list (extensions). */
static int has_word(const char *list, const char *w) {
    size_t n = strlen(w);
    for (const char *p = list; (p = strstr(p, w)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return 1;
    return 0;
}

/* "OpenCL 3.0 ..." → 300; 0 if unparsable. */
static int cl_version_num(const char *v) {
    int major = 0, minor = 0;
    if (sscanf(v, "OpenCL %d.%d", &major, &minor) != 2) return 0;
    return major * 100 + minor * 10;
}

/* Does the device offer sub-group operations to OpenCL C? */
static int claims_subgroups(cl_device_id dev, int version, const char *ext) {
    if (has_word(ext, "cl_khr_subgroups")) return 1;
    if (version < 300) return 0;
    /* OpenCL 3.0: optional feature, listed by name with its version */
    size_t n = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_OPENCL_C_FEATURES, 0, NULL, &n) != CL_SUCCESS || n == 0)
        return 0;
    cl_name_version *f = kf_malloc(n);
    int found = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_OPENCL_C_FEATURES, n, f, NULL) == CL_SUCCESS)
        for (size_t i = 0; i < n / sizeof *f; i++)
            if (strcmp(f[i].name, "__opencl_c_subgroups") == 0) found = 1;
    free(f);
    return found && dev_uint(dev, CL_DEVICE_MAX_NUM_SUB_GROUPS) > 0;
}

typedef cl_int(CL_API_CALL *subgroup_info_fn)(cl_kernel, cl_device_id, cl_kernel_sub_group_info,
                                              size_t, const void *, size_t, void *, size_t *);

/* Lane count of a sub-group of a trivial kernel, asked for two work-group sizes (up to
 * max_wg): a hardware lane count answers the same for both; a driver whose sub-group is the
 * whole work-group (PoCL on a CPU) follows the work-group size and so has no lane count to
 * tune for. 0 in that case, or if the driver cannot say. */
static int subgroup_lanes(cl_platform_id plat, cl_device_id dev, int version, size_t max_wg) {
    subgroup_info_fn fn = NULL;
    if (version >= 210) {
        fn = clGetKernelSubGroupInfo;
    } else {
        void *p = clGetExtensionFunctionAddressForPlatform(plat, "clGetKernelSubGroupInfoKHR");
        memcpy(&fn, &p, sizeof fn);
    }
    if (!fn) return 0;
    cl_int rc = CL_SUCCESS;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
    cl_context c = clCreateContext(props, 1, &dev, NULL, NULL, &rc);
    if (rc != CL_SUCCESS || !c) return 0;
    const char *src = "__kernel void kf_probe(__global int *o) { o[get_global_id(0)] = 1; }\n";
    cl_program prog = clCreateProgramWithSource(c, 1, &src, NULL, &rc);
    cl_kernel k = NULL;
    if (rc == CL_SUCCESS && clBuildProgram(prog, 1, &dev, "", NULL, NULL) == CL_SUCCESS)
        k = clCreateKernel(prog, "kf_probe", &rc);
    size_t local[2] = {max_wg < 128 ? max_wg : 128, max_wg < 256 ? max_wg : 256};
    size_t lanes[2] = {0, 0};
    for (int i = 0; i < 2 && k; i++)
        if (fn(k, dev, CL_KERNEL_MAX_SUB_GROUP_SIZE_FOR_NDRANGE, sizeof local[i], &local[i],
               sizeof lanes[i], &lanes[i], NULL) != CL_SUCCESS)
            lanes[i] = 0;
    if (k) clReleaseKernel(k);
    if (prog) clReleaseProgram(prog);
    clReleaseContext(c);
    if (lanes[0] != lanes[1] || (local[0] != local[1] && lanes[0] == local[0])) return 0;
    return clamp_int(lanes[0]);
}

/* A short architecture label from vendor extensions ("sm_90 warp32", "gfx90a wave64");
 * "" when the driver offers none. */
static void arch_label(cl_device_id dev, const char *ext, char *buf, size_t cap) {
    buf[0] = 0;
    if (has_word(ext, "cl_nv_device_attribute_query")) {
        cl_uint major = dev_uint(dev, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV);
        cl_uint minor = dev_uint(dev, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV);
        cl_uint warp = dev_uint(dev, CL_DEVICE_WARP_SIZE_NV);
        snprintf(buf, cap, "sm_%u%u warp%u", major, minor, warp);
    } else if (has_word(ext, "cl_amd_device_attribute_query")) {
        cl_uint major = dev_uint(dev, CL_DEVICE_GFXIP_MAJOR_AMD);
        cl_uint minor = dev_uint(dev, CL_DEVICE_GFXIP_MINOR_AMD);
        cl_uint wave = dev_uint(dev, CL_DEVICE_WAVEFRONT_WIDTH_AMD);
        snprintf(buf, cap, "gfx%u%u wave%u", major, minor, wave);
    }
}

/* Fill info for one device from the driver's answers (see backend.h for the fields);
 * info->index is left 0 for the caller. KF_ERR_UNSUPPORTED when the device has no
 * compiler (a candidate could not be built). */
kf_status kf_ocl_probe_device(cl_platform_id plat, cl_device_id dev, kf_device_info *info,
                              kf_error *err) {
    memset(info, 0, sizeof *info);
    snprintf(info->platform, sizeof info->platform, "opencl");
    dev_str(dev, CL_DEVICE_NAME, info->name, sizeof info->name);
    dev_str(dev, CL_DEVICE_VENDOR, info->vendor, sizeof info->vendor);
    dev_str(dev, CL_DRIVER_VERSION, info->driver, sizeof info->driver);
    dev_str(dev, CL_DEVICE_VERSION, info->version, sizeof info->version);
    dev_str(dev, CL_DEVICE_OPENCL_C_VERSION, info->lang_version, sizeof info->lang_version);
    {
        size_t n = 0;
        info->platform_name[0] = 0;
        if (clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof info->platform_name,
                              info->platform_name, &n) != CL_SUCCESS)
            info->platform_name[0] = 0;
        info->platform_name[sizeof info->platform_name - 1] = 0;
    }
    char pver[128] = "";
    if (clGetPlatformInfo(plat, CL_PLATFORM_VERSION, sizeof pver, pver, NULL) != CL_SUCCESS)
        pver[0] = 0;
    pver[sizeof pver - 1] = 0;

    cl_device_type type = 0;
    clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    snprintf(info->device_type, sizeof info->device_type, "%s",
             (type & CL_DEVICE_TYPE_GPU) ? "gpu" : (type & CL_DEVICE_TYPE_CPU) ? "cpu" : "accelerator");

    info->compute_units = clamp_int(dev_uint(dev, CL_DEVICE_MAX_COMPUTE_UNITS));
    if (info->compute_units < 1) info->compute_units = 1;
    /* OpenCL reports no finer unit than the compute unit: on a CPU it is a hardware thread */
    info->cores = info->compute_units;
    info->threads = info->compute_units;
    info->max_wg = clamp_int(dev_size(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE));
    if (info->max_wg < 1) info->max_wg = 1;
    cl_uint dims = dev_uint(dev, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS);
    if (dims >= 1 && dims <= 16) {
        size_t wi[16] = {0};
        if (clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_ITEM_SIZES, dims * sizeof wi[0], wi, NULL)
            == CL_SUCCESS)
            for (cl_uint d = 0; d < 3 && d < dims; d++) info->max_wi[d] = clamp_int(wi[d]);
    }
    info->local_mem_bytes = (int64_t)dev_ulong(dev, CL_DEVICE_LOCAL_MEM_SIZE);
    info->global_mem_bytes = (int64_t)dev_ulong(dev, CL_DEVICE_GLOBAL_MEM_SIZE);
    info->mem_bytes = info->global_mem_bytes;
    info->max_alloc_bytes = (int64_t)dev_ulong(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    info->base_align_bytes = clamp_int(dev_uint(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN) / 8);
    info->clock_mhz = dev_uint(dev, CL_DEVICE_MAX_CLOCK_FREQUENCY);
    info->fp64 = dev_ulong(dev, CL_DEVICE_DOUBLE_FP_CONFIG) != 0;

    cl_device_mem_cache_type ct = CL_NONE;
    clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_CACHE_TYPE, sizeof ct, &ct, NULL);
    int64_t cache = ct != CL_NONE ? (int64_t)dev_ulong(dev, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE) : 0;
    /* the cache in front of global memory: the last level on a CPU, L2 on a GPU */
    if (strcmp(info->device_type, "cpu") == 0) info->l3_bytes = cache;
    else info->l2_bytes = cache;

    int vw = clamp_int(dev_uint(dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT));
    info->simd_bits = vw * 32 > 128 ? vw * 32 : 128;

    char *ext = dev_str_alloc(dev, CL_DEVICE_EXTENSIONS);
    int version = cl_version_num(info->version);
    arch_label(dev, ext, info->arch, sizeof info->arch);
    if (claims_subgroups(dev, version, ext)) {
        info->subgroup_size = subgroup_lanes(plat, dev, version, (size_t)info->max_wg);
    }
    free(ext);

    snprintf(info->compiler, sizeof info->compiler, "%s / %s", pver, info->driver);
    cl_device_fp_config sp = 0;
    clGetDeviceInfo(dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof sp, &sp, NULL);
    snprintf(info->flags, sizeof info->flags, "-cl-std=CL1.2%s",
             (sp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) ? " -cl-fp32-correctly-rounded-divide-sqrt" : "");

    cl_bool compiler = CL_FALSE;
    clGetDeviceInfo(dev, CL_DEVICE_COMPILER_AVAILABLE, sizeof compiler, &compiler, NULL);
    if (!compiler)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "OpenCL device '%s' has no compiler (CL_DEVICE_COMPILER_AVAILABLE "
                            "is false)",
                            info->name);
    return KF_OK;
}
