/*
 * The OpenCL platform, through the ICD loader: PoCL on any CPU, the vendor's driver on a GPU.
 *
 * Devices are numbered over the flattened list of every device of every platform, in
 * clGetPlatformIDs order then clGetDeviceIDs(CL_DEVICE_TYPE_ALL) order, so "opencl:N" is
 * stable on one machine. A context holds one OpenCL context and ONE in-order, profiling
 * command queue: launches of a plan run in order without explicit events, and device time
 * comes from event profiling.
 *
 * A candidate is OpenCL C source plus a launch plan in its comments (candidate.h). compile
 * always builds in-process, so the build log and the errors are real (drivers such as PoCL
 * keep their own binary cache, so a repeat build is cheap), checks the plan against the
 * built program (every kernel exists, takes as many arguments as the launch passes, and
 * fits the work-group limit) and writes the artifact `<hash>.clk`: the build options on
 * the first line and the source after it. A driver-neutral text artifact lets the
 * sandboxed runner (another process, maybe after the compiling process died) rebuild
 * exactly what was checked. The default options keep IEEE semantics: no fast-math, and
 * correctly rounded divide/sqrt where the device offers it, since the verifier compares
 * NaN/Inf exactly.
 *
 * Buffers are cl_mem handles passed around as void *; a view is a sub-buffer. Scratch
 * buffers of a plan belong to the loaded module (made on first launch, kept until unload).
 * A module is launched by one thread at a time: kernel arguments are set per launch.
 * Every CL failure becomes a kf_status with the CL error's name and the call that failed.
 * Device probing lives in opencl_probe.c.
 */
#include "kforge/backend.h"
#include "kforge/candidate.h"

#include <CL/cl.h>
#include <CL/cl_ext.h>
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* From opencl_probe.c (internal to the library: symbols are hidden). */
const char *kf_ocl_error_name(cl_int code);
kf_status kf_ocl_devices(cl_platform_id **plats, cl_device_id **devs, int *n, kf_error *err);
kf_status kf_ocl_probe_device(cl_platform_id plat, cl_device_id dev, kf_device_info *info,
                              kf_error *err);

#define OCL_LOG_LINES 8 /* lines of the build log quoted in an error message */

typedef struct ocl_ctx {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    kf_device_info info;  /* probed at create: options, names, limits */
    cl_mem flush_buf;     /* kept between flushes, regrown when a larger one is asked */
    size_t flush_bytes;
    cl_uint flush_seq;
} ocl_ctx;

typedef struct ocl_module {
    cl_program program;
    kf_launch_plan plan;
    cl_kernel kernel[KF_MAX_LAUNCHES]; /* one per launch: a kernel may be launched twice */
    cl_mem scratch[KF_MAX_SCRATCH];
    int scratch_ready;
} ocl_module;

/* ---- build ---- */

/* Append the build log of prog to log (if non-NULL) and, if first is non-NULL, copy into it
 * up to OCL_LOG_LINES lines starting at the first line that mentions "error". */
static void build_log(ocl_ctx *ctx, cl_program prog, kf_buf *log, char *first, size_t cap) {
    size_t n = 0;
    if (first) first[0] = 0;
    if (clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) != CL_SUCCESS
        || n == 0)
        return;
    char *text = kf_malloc(n + 1);
    if (clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, n, text, NULL) != CL_SUCCESS)
        text[0] = 0;
    text[n] = 0;
    if (log) kf_buf_puts(log, text);
    if (first && cap > 1) {
        const char *p = strstr(text, "error");
        if (!p) p = text;
        while (p > text && p[-1] != '\n') p--;
        while (*p == '\n') p++;
        const char *q = p;
        for (int i = 0; i < OCL_LOG_LINES && *q; i++) {
            q += strcspn(q, "\n");
            if (*q) q++;
        }
        size_t len = (size_t)(q - p);
        while (len && (p[len - 1] == '\n' || p[len - 1] == ' ')) len--;
        if (len >= cap) len = cap - 1;
        memcpy(first, p, len);
        first[len] = 0;
    }
    free(text);
}

/* Line and column of the first error in an excerpt of a build log: clang-style drivers
 * write "<file>:LINE:COL: error: ..." (NVIDIA) or "error: <file>:LINE:COL: ..." (PoCL). */
static void log_position(const char *s, int *line, int *col) {
    *line = *col = 0;
    const char *e = strstr(s, "error");
    if (!e) return;
    const char *b = e;
    while (b > s && b[-1] != '\n') b--;
    const char *end = b + strcspn(b, "\n");
    for (const char *p = b; p < end; p++) {
        int l = 0, c = 0;
        if (*p == ':' && sscanf(p, ":%d:%d:", &l, &c) == 2 && l > 0) {
            *line = l;
            *col = c;
            return;
        }
    }
}

/* Build source with options for ctx's device into *prog (caller releases). The build log
 * always goes to log (if non-NULL). KF_ERR_COMPILE with the first lines of the log on a
 * build failure or bad options; KF_ERR_RUNTIME when the driver refuses the program. */
static kf_status build_program(ocl_ctx *ctx, const char *source, const char *options,
                               cl_program *prog, kf_buf *log, kf_error *err) {
    cl_int rc = CL_SUCCESS;
    size_t len = strlen(source);
    *prog = clCreateProgramWithSource(ctx->context, 1, &source, &len, &rc);
    if (rc != CL_SUCCESS || !*prog) {
        *prog = NULL;
        return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "clCreateProgramWithSource: %s",
                            kf_ocl_error_name(rc));
    }
    if (log) kf_buf_printf(log, "kforge: building for %s with options: %s\n", ctx->info.name,
                           options);
    rc = clBuildProgram(*prog, 1, &ctx->device, options, NULL, NULL);
    char first[800];
    build_log(ctx, *prog, log, rc == CL_SUCCESS ? NULL : first, sizeof first);
    if (rc == CL_SUCCESS) return KF_OK;
    kf_status st;
    if (rc == CL_INVALID_BUILD_OPTIONS) {
        st = kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                          "OpenCL rejected the build options '%s' (%s)", options,
                          kf_ocl_error_name(rc));
    } else {
        int line, col;
        log_position(first, &line, &col);
        st = kf_error_set(err, KF_ERR_COMPILE, line ? "<candidate>" : NULL, line, col,
                          "OpenCL build failed (%s)%s%s", kf_ocl_error_name(rc),
                          first[0] ? ":\n" : "", first);
    }
    if (log) kf_buf_printf(log, "kforge: clBuildProgram: %s\n", kf_ocl_error_name(rc));
    clReleaseProgram(*prog);
    *prog = NULL;
    return st;
}

static void release_kernels(cl_kernel *k, int n) {
    for (int i = 0; i < n; i++)
        if (k[i]) {
            clReleaseKernel(k[i]);
            k[i] = NULL;
        }
}

/* Create one kernel per launch of plan from prog and check that each fits: the kernel
 * exists, takes as many arguments as the launch passes, its work-group fits this kernel on
 * this device, and each scratch buffer fits one allocation. KF_ERR_COMPILE naming the
 * launch otherwise; on failure no kernel is left in k. */
static kf_status make_kernels(ocl_ctx *ctx, cl_program prog, const kf_launch_plan *plan,
                              cl_kernel *k, kf_error *err) {
    kf_status st = KF_OK;
    const kf_device_info *d = &ctx->info;
    for (int i = 0; i < plan->nlaunches && st == KF_OK; i++) {
        const kf_launch *l = &plan->l[i];
        cl_int rc = CL_SUCCESS;
        k[i] = clCreateKernel(prog, l->kernel, &rc);
        if (rc != CL_SUCCESS || !k[i]) {
            k[i] = NULL;
            if (rc == CL_INVALID_KERNEL_NAME)
                st = kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                                  "launch %d: kernel '%s' is not defined in the source "
                                  "(no __kernel function of that name)",
                                  i + 1, l->kernel);
            else
                st = kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                                  "launch %d: clCreateKernel('%s'): %s", i + 1, l->kernel,
                                  kf_ocl_error_name(rc));
            break;
        }
        cl_uint kargs = 0;
        rc = clGetKernelInfo(k[i], CL_KERNEL_NUM_ARGS, sizeof kargs, &kargs, NULL);
        if (rc == CL_SUCCESS && (int)kargs != l->nargs) {
            st = kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                              "launch %d: kernel '%s' takes %u arguments but the launch "
                              "passes %d (args=...)",
                              i + 1, l->kernel, kargs, l->nargs);
            break;
        }
        size_t kwg = 0;
        rc = clGetKernelWorkGroupInfo(k[i], ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg,
                                      &kwg, NULL);
        if (rc != CL_SUCCESS) {
            st = kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                              "launch %d: clGetKernelWorkGroupInfo('%s'): %s", i + 1,
                              l->kernel, kf_ocl_error_name(rc));
            break;
        }
        int64_t wg = 1;
        for (int dim = 0; dim < l->ndims; dim++) {
            wg *= l->local[dim] > 0 ? l->local[dim] : 1;
            if (l->local[dim] > d->max_wi[dim] && d->max_wi[dim] > 0) {
                st = kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                                  "launch %d: kernel '%s': local size %lld in dimension %d "
                                  "exceeds the device's limit of %d work-items",
                                  i + 1, l->kernel, (long long)l->local[dim], dim, d->max_wi[dim]);
                break;
            }
        }
        if (st == KF_OK && wg > (int64_t)kwg)
            st = kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                              "launch %d: kernel '%s': work-group of %lld work-items exceeds "
                              "its limit of %zu on %s (CL_KERNEL_WORK_GROUP_SIZE)",
                              i + 1, l->kernel, (long long)wg, kwg, d->name);
    }
    for (int s = 0; s < plan->nscratch && st == KF_OK; s++)
        if (d->max_alloc_bytes > 0 && plan->scratch_bytes[s] > d->max_alloc_bytes)
            st = kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                              "scratch '%s' of %lld bytes exceeds the device's largest "
                              "allocation (%lld bytes)",
                              plan->scratch_name[s], (long long)plan->scratch_bytes[s],
                              (long long)d->max_alloc_bytes);
    if (st != KF_OK) release_kernels(k, plan->nlaunches);
    return st;
}

/* Default options + extra flags, on one line (the artifact's first line). Owned by caller. */
static char *build_options(const ocl_ctx *ctx, const char *flags) {
    kf_buf b = {0};
    kf_buf_puts(&b, ctx->info.flags);
    if (flags && flags[0]) kf_buf_printf(&b, " %s", flags);
    char *s = kf_buf_take(&b);
    for (char *p = s; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return s;
}

static kf_status ocl_compile(void *vctx, const char *source, const char *flags,
                             const char *workdir, char *artifact, size_t cap, kf_buf *log,
                             kf_error *err) {
    ocl_ctx *ctx = vctx;
    kf_launch_plan plan;
    kf_status st = kf_launch_plan_parse(source, flags, -1, &plan, err);
    for (int i = 0; st == KF_OK && i < plan.nlaunches; i++)
        if (plan.l[i].smem > 0)
            st = kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                              "launch %d: smem= (dynamic shared memory) is a CUDA launch option; an "
                              "OpenCL kernel declares its __local arrays itself", i + 1);
    if (st != KF_OK) {
        if (log && err) kf_buf_printf(log, "kforge: bad launch plan: %s\n", err->msg);
        return st;
    }
    char *options = build_options(ctx, flags);
    uint64_t h = kf_hash64(source, strlen(source), 0);
    h = kf_hash64(options, strlen(options), h);
    h = kf_hash64(ctx->info.name, strlen(ctx->info.name), h);
    h = kf_hash64(ctx->info.driver, strlen(ctx->info.driver), h);
    char hex[17];
    kf_hash_hex(h, hex);

    char path[4096], tmp[4200];
    int n = snprintf(path, sizeof path, "%s/%s.clk", workdir, hex);
    if (n < 0 || (size_t)n >= sizeof path || (size_t)n >= cap) {
        free(options);
        return kf_error_set(err, KF_ERR_ARG, workdir, 0, 0, "workdir path is too long");
    }
    cl_program prog = NULL;
    cl_kernel k[KF_MAX_LAUNCHES] = {0};
    st = build_program(ctx, source, options, &prog, log, err);
    if (st == KF_OK) st = make_kernels(ctx, prog, &plan, k, err);
    if (st == KF_OK) {
        release_kernels(k, plan.nlaunches);
        if (access(path, R_OK) == 0) {
            if (log) kf_buf_printf(log, "kforge: artifact %s exists (same source, options, device)\n", path);
        } else {
            /* unique per process and call: threads may compile the same candidate */
            static unsigned long counter;
            unsigned long seq = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
            snprintf(tmp, sizeof tmp, "%s.tmp%ld-%lu", path, (long)getpid(), seq);
            kf_buf text = {0};
            kf_buf_printf(&text, "%s\n%s", options, source);
            st = kf_write_file(tmp, text.data, text.len, err);
            kf_buf_free(&text);
            if (st == KF_OK && rename(tmp, path) != 0) {
                st = kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot rename artifact: %s",
                                  strerror(errno));
                unlink(tmp);
            }
        }
    } else if (log && err && st != KF_OK) {
        kf_buf_printf(log, "kforge: %s\n", err->msg);
    }
    if (prog) clReleaseProgram(prog);
    free(options);
    if (st == KF_OK) snprintf(artifact, cap, "%s", path);
    return st;
}

/* ---- load / launch ---- */

static void ocl_unload(void *vctx, void *module) {
    ocl_module *m = module;
    if (!m) return;
    release_kernels(m->kernel, KF_MAX_LAUNCHES);
    for (int s = 0; s < KF_MAX_SCRATCH; s++)
        if (m->scratch[s]) clReleaseMemObject(m->scratch[s]);
    if (m->program) clReleaseProgram(m->program);
    free(m);
}

static kf_status ocl_load(void *vctx, const char *artifact, const char *entry, void **module,
                          kf_error *err) {
    ocl_ctx *ctx = vctx;
    *module = NULL;
    char *text = NULL;
    size_t len = 0;
    kf_status st = kf_read_file(artifact, &text, &len, err);
    if (st != KF_OK) return st;
    char *nl = strchr(text, '\n');
    if (!nl) {
        free(text);
        return kf_error_set(err, KF_ERR_RUNTIME, artifact, 0, 0,
                            "not a kforge OpenCL artifact (no options line)");
    }
    *nl = 0;
    const char *options = text, *source = nl + 1;
    ocl_module *m = kf_calloc(1, sizeof *m);
    /* The stored options hold the -DNAME=V words the plan was resolved with. */
    st = kf_launch_plan_parse(source, options, -1, &m->plan, err);
    if (st == KF_OK) st = build_program(ctx, source, options, &m->program, NULL, err);
    if (st == KF_OK) st = make_kernels(ctx, m->program, &m->plan, m->kernel, err);
    free(text);
    if (st != KF_OK) {
        ocl_unload(ctx, m);
        return st;
    }
    *module = m;
    return KF_OK;
}

static kf_status make_scratch(ocl_ctx *ctx, ocl_module *m, kf_error *err) {
    if (m->scratch_ready) return KF_OK;
    for (int s = 0; s < m->plan.nscratch; s++) {
        if (m->scratch[s]) continue;
        cl_int rc = CL_SUCCESS;
        m->scratch[s] = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE,
                                       (size_t)m->plan.scratch_bytes[s], NULL, &rc);
        if (rc != CL_SUCCESS || !m->scratch[s]) {
            m->scratch[s] = NULL;
            return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0,
                                "scratch '%s' (%lld bytes): clCreateBuffer: %s",
                                m->plan.scratch_name[s], (long long)m->plan.scratch_bytes[s],
                                kf_ocl_error_name(rc));
        }
    }
    m->scratch_ready = 1;
    return KF_OK;
}

/* Bind launch i's arguments and enqueue it (with an event when ev is non-NULL). */
static kf_status enqueue_launch(ocl_ctx *ctx, ocl_module *m, int i, void *const *args,
                                int nargs, cl_event *ev, kf_error *err) {
    const kf_launch *l = &m->plan.l[i];
    for (int j = 0; j < l->nargs; j++) {
        int a = l->args[j];
        cl_mem mem;
        if (a >= 0) {
            if (a >= nargs || !args[a])
                return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0,
                                    "launch %d (kernel '%s'): argument %d names task buffer "
                                    "%d, but %s",
                                    i + 1, l->kernel, j, a,
                                    a >= nargs ? "fewer buffers were passed" : "it is NULL");
            mem = (cl_mem)args[a];
        } else {
            assert(-1 - a < m->plan.nscratch); /* the plan parser resolved the name */
            mem = m->scratch[-1 - a];
        }
        cl_int rc = clSetKernelArg(m->kernel[i], (cl_uint)j, sizeof mem, &mem);
        if (rc != CL_SUCCESS)
            return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0,
                                "launch %d (kernel '%s'): clSetKernelArg(%d): %s", i + 1,
                                l->kernel, j, kf_ocl_error_name(rc));
    }
    size_t g[3], lo[3];
    int has_local = 1;
    for (int d = 0; d < l->ndims; d++) {
        g[d] = (size_t)l->global[d];
        lo[d] = (size_t)l->local[d];
        if (l->local[d] <= 0) has_local = 0;
    }
    cl_int rc = clEnqueueNDRangeKernel(ctx->queue, m->kernel[i], (cl_uint)l->ndims, NULL, g,
                                       has_local ? lo : NULL, 0, NULL, ev);
    if (rc != CL_SUCCESS)
        return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0,
                            "launch %d (kernel '%s'): clEnqueueNDRangeKernel: %s", i + 1,
                            l->kernel, kf_ocl_error_name(rc));
    return KF_OK;
}

static kf_status ocl_launch(void *vctx, void *module, void *const *args, int nargs,
                            kf_error *err) {
    ocl_ctx *ctx = vctx;
    ocl_module *m = module;
    if (!m) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "launch: no module");
    kf_status st = make_scratch(ctx, m, err);
    for (int i = 0; i < m->plan.nlaunches && st == KF_OK; i++) {
        st = enqueue_launch(ctx, m, i, args, nargs, NULL, err);
        if (st != KF_OK) break;
        /* finish each launch so that a fault is charged to the launch that made it */
        cl_int rc = clFinish(ctx->queue);
        if (rc != CL_SUCCESS)
            st = kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0,
                              "launch %d (kernel '%s'): clFinish: %s", i + 1,
                              m->plan.l[i].kernel, kf_ocl_error_name(rc));
    }
    if (st != KF_OK) clFinish(ctx->queue);
    return st;
}

static kf_status ocl_launch_timed(void *vctx, void *module, void *const *args, int nargs,
                                  double *seconds, kf_error *err) {
    ocl_ctx *ctx = vctx;
    ocl_module *m = module;
    *seconds = 0;
    if (!m) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "launch: no module");
    cl_event ev[KF_MAX_LAUNCHES] = {0};
    int nev = 0;
    kf_status st = make_scratch(ctx, m, err);
    for (int i = 0; i < m->plan.nlaunches && st == KF_OK; i++) {
        st = enqueue_launch(ctx, m, i, args, nargs, &ev[i], err);
        if (st == KF_OK) nev = i + 1;
    }
    /* one finish for the whole plan: the launches run back to back, as they will in use */
    cl_int rc = clFinish(ctx->queue);
    if (st == KF_OK && rc != CL_SUCCESS)
        st = kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "launch plan: clFinish: %s",
                          kf_ocl_error_name(rc));
    for (int i = 0; i < nev && st == KF_OK; i++) {
        cl_int status = CL_COMPLETE;
        rc = clGetEventInfo(ev[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
        if (rc == CL_SUCCESS && status < 0)
            st = kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "launch %d (kernel '%s') failed: %s",
                              i + 1, m->plan.l[i].kernel, kf_ocl_error_name(status));
    }
    if (st == KF_OK && nev > 0) {
        cl_ulong t0 = 0, t1 = 0;
        rc = clGetEventProfilingInfo(ev[0], CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        if (rc == CL_SUCCESS)
            rc = clGetEventProfilingInfo(ev[nev - 1], CL_PROFILING_COMMAND_END, sizeof t1, &t1,
                                         NULL);
        if (rc != CL_SUCCESS)
            st = kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0,
                              "launch plan: clGetEventProfilingInfo: %s", kf_ocl_error_name(rc));
        else
            *seconds = t1 > t0 ? (double)(t1 - t0) * 1e-9 : 0.0;
    }
    for (int i = 0; i < nev; i++) clReleaseEvent(ev[i]);
    return st;
}

/* ---- memory ---- */

static void *ocl_alloc(void *vctx, size_t bytes) {
    ocl_ctx *ctx = vctx;
    cl_int rc = CL_SUCCESS;
    cl_mem mem = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &rc);
    if (rc != CL_SUCCESS) {
        kf_log(2, "opencl: clCreateBuffer(%zu): %s\n", bytes, kf_ocl_error_name(rc));
        return NULL;
    }
    return mem;
}

static void ocl_free(void *vctx, void *dev) {
    if (dev) clReleaseMemObject((cl_mem)dev);
}

static kf_status ocl_copy_in(void *vctx, void *dev, const void *host, size_t bytes) {
    ocl_ctx *ctx = vctx;
    if (!bytes) return KF_OK;
    cl_int rc = clEnqueueWriteBuffer(ctx->queue, (cl_mem)dev, CL_TRUE, 0, bytes, host, 0, NULL,
                                     NULL);
    if (rc == CL_SUCCESS) return KF_OK;
    kf_log(1, "opencl: clEnqueueWriteBuffer(%zu bytes): %s\n", bytes, kf_ocl_error_name(rc));
    return KF_ERR_RUNTIME;
}

static kf_status ocl_copy_in_at(void *vctx, void *dev, size_t offset, const void *host, size_t bytes) {
    ocl_ctx *ctx = vctx;
    if (!bytes) return KF_OK;
    cl_int rc = clEnqueueWriteBuffer(ctx->queue, (cl_mem)dev, CL_TRUE, offset, bytes, host, 0,
                                     NULL, NULL);
    if (rc == CL_SUCCESS) return KF_OK;
    kf_log(1, "opencl: clEnqueueWriteBuffer(%zu bytes at %zu): %s\n", bytes, offset,
           kf_ocl_error_name(rc));
    return KF_ERR_RUNTIME;
}

static kf_status ocl_fill(void *vctx, void *dev, size_t offset, const void *pattern, size_t psize,
                          size_t bytes) {
    ocl_ctx *ctx = vctx;
    if (!bytes) return KF_OK;
    if (!psize || bytes % psize || offset % psize) return KF_ERR_ARG;
    cl_int rc = clEnqueueFillBuffer(ctx->queue, (cl_mem)dev, pattern, psize, offset, bytes, 0,
                                    NULL, NULL);
    if (rc == CL_SUCCESS) rc = clFinish(ctx->queue);
    if (rc == CL_SUCCESS) return KF_OK;
    kf_log(1, "opencl: clEnqueueFillBuffer(%zu bytes, pattern of %zu): %s\n", bytes, psize,
           kf_ocl_error_name(rc));
    return KF_ERR_RUNTIME;
}

static kf_status ocl_copy_dd(void *vctx, void *dst, const void *src, size_t bytes) {
    ocl_ctx *ctx = vctx;
    if (!bytes) return KF_OK;
    cl_int rc = clEnqueueCopyBuffer(ctx->queue, (cl_mem)src, (cl_mem)dst, 0, 0, bytes, 0, NULL, NULL);
    if (rc == CL_SUCCESS) rc = clFinish(ctx->queue);
    if (rc == CL_SUCCESS) return KF_OK;
    kf_log(1, "opencl: clEnqueueCopyBuffer(%zu bytes): %s\n", bytes, kf_ocl_error_name(rc));
    return KF_ERR_RUNTIME;
}

static kf_status ocl_copy_out(void *vctx, void *host, const void *dev, size_t bytes) {
    ocl_ctx *ctx = vctx;
    if (!bytes) return KF_OK;
    cl_int rc = clEnqueueReadBuffer(ctx->queue, (cl_mem)dev, CL_TRUE, 0, bytes, host, 0, NULL,
                                    NULL);
    if (rc == CL_SUCCESS) return KF_OK;
    kf_log(1, "opencl: clEnqueueReadBuffer(%zu bytes): %s\n", bytes, kf_ocl_error_name(rc));
    return KF_ERR_RUNTIME;
}

static kf_status ocl_sync(void *vctx) {
    ocl_ctx *ctx = vctx;
    cl_int rc = clFinish(ctx->queue);
    if (rc == CL_SUCCESS) return KF_OK;
    kf_log(1, "opencl: clFinish: %s\n", kf_ocl_error_name(rc));
    return KF_ERR_RUNTIME;
}

static void *ocl_view(void *vctx, void *dev, size_t offset, size_t bytes) {
    cl_buffer_region r = {.origin = offset, .size = bytes ? bytes : 1};
    cl_int rc = CL_SUCCESS;
    cl_mem sub = clCreateSubBuffer((cl_mem)dev, 0, CL_BUFFER_CREATE_TYPE_REGION, &r, &rc);
    if (rc != CL_SUCCESS) {
        kf_log(1, "opencl: clCreateSubBuffer(offset %zu, %zu bytes): %s\n", offset, bytes,
               kf_ocl_error_name(rc));
        return NULL;
    }
    return sub;
}

static void ocl_view_free(void *vctx, void *view) {
    if (view) clReleaseMemObject((cl_mem)view);
}

/* Write a buffer of `bytes` on the device (clamped to the largest allocation) and wait. */
static kf_status ocl_flush(void *vctx, size_t bytes) {
    ocl_ctx *ctx = vctx;
    bytes = (bytes + 3) & ~(size_t)3;
    if (ctx->info.max_alloc_bytes > 0 && bytes > (size_t)ctx->info.max_alloc_bytes)
        bytes = (size_t)ctx->info.max_alloc_bytes & ~(size_t)3;
    if (bytes == 0) return KF_OK;
    if (bytes > ctx->flush_bytes) {
        if (ctx->flush_buf) clReleaseMemObject(ctx->flush_buf);
        ctx->flush_buf = NULL;
        ctx->flush_bytes = 0;
        cl_int rc = CL_SUCCESS;
        ctx->flush_buf = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &rc);
        if (rc != CL_SUCCESS) {
            ctx->flush_buf = NULL;
            kf_log(1, "opencl: flush buffer of %zu bytes: %s\n", bytes, kf_ocl_error_name(rc));
            return KF_ERR_RUNTIME;
        }
        ctx->flush_bytes = bytes;
    }
    cl_uint pattern = ++ctx->flush_seq; /* a new value each time: no write can be skipped */
    cl_int rc = clEnqueueFillBuffer(ctx->queue, ctx->flush_buf, &pattern, sizeof pattern, 0,
                                    bytes, 0, NULL, NULL);
    if (rc == CL_SUCCESS) rc = clFinish(ctx->queue);
    if (rc == CL_SUCCESS) return KF_OK;
    kf_log(1, "opencl: flush: %s\n", kf_ocl_error_name(rc));
    return KF_ERR_RUNTIME;
}

/* ---- context ---- */

static kf_status ocl_probe(void *vctx, kf_device_info *info, kf_error *err) {
    ocl_ctx *ctx = vctx;
    *info = ctx->info;
    return KF_OK;
}

static void ocl_destroy(void *vctx) {
    ocl_ctx *ctx = vctx;
    if (!ctx) return;
    if (ctx->queue) clFinish(ctx->queue);
    if (ctx->flush_buf) clReleaseMemObject(ctx->flush_buf);
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->context) clReleaseContext(ctx->context);
    free(ctx);
}

static const kf_backend_iface ocl_iface = {
    .name = "opencl",
    .probe = ocl_probe,
    .compile = ocl_compile,
    .load = ocl_load,
    .launch = ocl_launch,
    .unload = ocl_unload,
    .alloc = ocl_alloc,
    .free = ocl_free,
    .copy_in = ocl_copy_in,
    .copy_out = ocl_copy_out,
    .fill = ocl_fill,
    .copy_in_at = ocl_copy_in_at,
    .copy_dd = ocl_copy_dd,
    .sync = ocl_sync,
    .destroy = ocl_destroy,
    .view = ocl_view,
    .view_free = ocl_view_free,
    .launch_timed = ocl_launch_timed,
    .flush = ocl_flush,
};

/* Constructor used by the registry in backend.c: opens device `index` of the flattened
 * OpenCL device list (see the note at the top) with a context and one in-order profiling
 * queue, and probes it. KF_ERR_UNSUPPORTED when there is no platform or device (with why)
 * or index is out of range (saying how many devices exist); KF_ERR_RUNTIME when the driver
 * refuses a context or queue. On success the caller owns *ctx (iface->destroy). */
kf_status kf_backend_opencl_create(int index, const kf_backend_iface **iface, void **vctx,
                                   kf_error *err) {
    *iface = NULL;
    *vctx = NULL;
    cl_platform_id *plats = NULL;
    cl_device_id *devs = NULL;
    int n = 0;
    kf_status st = kf_ocl_devices(&plats, &devs, &n, err);
    if (st != KF_OK) return st;
    if (index < 0 || index >= n) {
        if (n == 1)
            st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                              "no OpenCL device opencl:%d: this machine has 1 OpenCL device "
                              "(opencl:0)",
                              index);
        else
            st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                              "no OpenCL device opencl:%d: this machine has %d OpenCL devices "
                              "(opencl:0 .. opencl:%d)",
                              index, n, n - 1);
        free(plats);
        free(devs);
        return st;
    }
    ocl_ctx *ctx = kf_calloc(1, sizeof *ctx);
    ctx->platform = plats[index];
    ctx->device = devs[index];
    free(plats);
    free(devs);
    st = kf_ocl_probe_device(ctx->platform, ctx->device, &ctx->info, err);
    if (st == KF_OK) {
        cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->platform, 0};
        cl_int rc = CL_SUCCESS;
        ctx->context = clCreateContext(props, 1, &ctx->device, NULL, NULL, &rc);
        if (rc != CL_SUCCESS || !ctx->context) {
            ctx->context = NULL;
            st = kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "opencl:%d (%s): clCreateContext: %s",
                              index, ctx->info.name, kf_ocl_error_name(rc));
        }
    }
    if (st == KF_OK) {
        cl_queue_properties qprops[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
        cl_int rc = CL_SUCCESS;
        /* clCreateCommandQueueWithProperties is 2.0+: older platforms take the 1.x call */
        if (strncmp(ctx->info.version, "OpenCL 1.", 9) == 0) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
            ctx->queue = clCreateCommandQueue(ctx->context, ctx->device, CL_QUEUE_PROFILING_ENABLE, &rc);
#pragma GCC diagnostic pop
        } else {
            ctx->queue = clCreateCommandQueueWithProperties(ctx->context, ctx->device, qprops, &rc);
        }
        if (rc != CL_SUCCESS || !ctx->queue) {
            ctx->queue = NULL;
            st = kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0,
                              "opencl:%d (%s): cannot create a command queue: %s", index,
                              ctx->info.name, kf_ocl_error_name(rc));
        }
    }
    if (st != KF_OK) {
        ocl_destroy(ctx);
        return st;
    }
    ctx->info.index = index;
    *iface = &ocl_iface;
    *vctx = ctx;
    return KF_OK;
}

/* Every OpenCL device, probed (no context is created); see kf_backend_list. The caller
 * frees *infos. KF_ERR_UNSUPPORTED with why when there is no platform or device. */
kf_status kf_backend_opencl_list(kf_device_info **infos, int *n, kf_error *err) {
    *infos = NULL;
    *n = 0;
    cl_platform_id *plats = NULL;
    cl_device_id *devs = NULL;
    int nd = 0;
    kf_status st = kf_ocl_devices(&plats, &devs, &nd, err);
    if (st != KF_OK) return st;
    kf_device_info *d = kf_calloc((size_t)nd, sizeof *d);
    for (int i = 0; i < nd; i++) {
        /* a device that cannot build (no compiler) is still listed, with what it said */
        kf_error e = {0};
        if (kf_ocl_probe_device(plats[i], devs[i], &d[i], &e) != KF_OK)
            kf_log(2, "opencl:%d: %s\n", i, e.msg);
        d[i].index = i;
    }
    free(plats);
    free(devs);
    *infos = d;
    *n = nd;
    return KF_OK;
}
