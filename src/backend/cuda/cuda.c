/*
 * The CUDA platform: NVIDIA GPUs through the driver API, with candidates compiled by NVRTC
 * (in-process) or nvcc (a child process). libcuda.so.1 and libnvrtc are loaded with dlopen
 * (cuda_probe.c, cuda_nvrtc.c), so a kforge built with the CUDA headers runs everywhere and
 * reports the platform absent where there is no driver.
 *
 * A context is device N's PRIMARY context (cuDevicePrimaryCtxRetain), made current on
 * every entry into this file because compile may come from a worker thread: CUDA-runtime
 * code inside an nvcc-built candidate then finds and shares the same context, memory and
 * legacy default stream. All work goes to stream 0, the legacy default stream.
 *
 * Two candidate forms, told apart by the source (kf_cuda_is_nvrtc_form):
 *
 *   NVRTC form: `kforge:launch` lines declare the plan (candidate.h) over one or more
 *     extern "C" __global__ kernels whose parameters are all buffer pointers. Global sizes
 *     are total threads per dimension, local sizes the block: grid = global / local.
 *     compile resolves the plan, builds a CUBIN for the device's sm_XY, loads it to check
 *     every planned kernel (it exists, takes exactly the planned pointer arguments, its
 *     block fits CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) and appends the resource report
 *     ("kforge: resources KERNEL regs=R smem=S local=L max_threads=T") to the log.
 *     Artifact: workdir/<hash>.cuk (the NVRTC options on the first line, then the source;
 *     the stored -DNAME=V words re-resolve the same plan at load) and, next to it,
 *     workdir/<hash>.cubin. Both are written under temporary names and renamed, the .cubin
 *     first, so a .cuk always has its .cubin.
 *
 *   nvcc form: no launch lines; the source defines `extern "C" int kforge_kernel(void
 *     *const *args)` (args = device pointers), which launches its own kernels with <<<>>>
 *     on the default stream and may use the CUDA runtime. Artifact: workdir/<hash>.so (its
 *     source kept as <hash>.cu). launch calls the function, then cuCtxSynchronize; a timed
 *     launch synchronises the whole context before its stop event, so work the function
 *     left on another stream, or running, is timed.
 *
 * load tells the forms apart by the artifact's suffix (.cuk or .so). It and launch run in
 * the sandboxed runner for untrusted candidates.
 *
 * Errors carry the CUresult's name and text and the launch that failed. A device fault
 * (CUDA_ERROR_ILLEGAL_ADDRESS and friends) is sticky: the context and the process can no
 * longer use the GPU, which the message says and which later calls repeat.
 */
#include <cuda.h>

#include "backend/cuda/cuda_int.h"
#include "kforge/candidate.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { FORM_NVRTC = 1, FORM_NVCC = 2 };

typedef struct cu_ctx {
    const kf_cu_api *api;
    CUdevice dev;
    CUcontext pctx;       /* the retained primary context */
    int index;
    kf_device_info info;  /* probed at create */
    int max_grid[3];
    CUevent ev[2];        /* made on the first timed launch */
    CUdeviceptr flush_buf;/* kept between flushes, regrown when a larger one is asked */
    size_t flush_bytes;
    unsigned char flush_seq;
    char fault[600];      /* the sticky device fault, once one happened */
} cu_ctx;

typedef struct cu_module {
    int form;
    /* NVRTC form */
    CUmodule mod;
    kf_launch_plan plan;
    CUfunction fn[KF_MAX_LAUNCHES];
    CUdeviceptr scratch[KF_MAX_SCRATCH];
    int scratch_ready;
    /* nvcc form */
    void *dl;
    int (*host)(void *const *args);
} cu_module;

/* ---- errors and the current context ---- */

/* Fill err with "<what>: NAME: text" for a failed driver call; a sticky fault is recorded
 * in ctx and said so. Returns KF_ERR_RUNTIME (KF_ERR_NOMEM for out of memory). */
static kf_status cu_fail(cu_ctx *ctx, CUresult rc, kf_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static kf_status cu_fail(cu_ctx *ctx, CUresult rc, kf_error *err, const char *fmt, ...) {
    char what[400], text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    kf_cu_error_text(rc, text, sizeof text);
    int sticky = kf_cu_error_is_sticky(rc);
    if (sticky && !ctx->fault[0]) snprintf(ctx->fault, sizeof ctx->fault, "%s: %s", what, text);
    return kf_error_set(err, rc == CUDA_ERROR_OUT_OF_MEMORY ? KF_ERR_NOMEM : KF_ERR_RUNTIME,
                        NULL, 0, 0, "%s: %s%s", what, text,
                        sticky ? " (a device fault: the CUDA context is now unusable, and the "
                                 "process must exit before it can use the GPU again)"
                               : "");
}

/* Make ctx's primary context current on this thread; refuse once a fault spoilt it. */
static kf_status bind(cu_ctx *ctx, kf_error *err) {
    if (ctx->fault[0])
        return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0,
                            "the CUDA context is unusable after an earlier device fault (%s)",
                            ctx->fault);
    CUresult rc = ctx->api->CtxSetCurrent(ctx->pctx);
    if (rc != CUDA_SUCCESS) return cu_fail(ctx, rc, err, "cuCtxSetCurrent");
    return KF_OK;
}

static kf_status sync_ctx(cu_ctx *ctx, kf_error *err, const char *what) {
    CUresult rc = ctx->api->CtxSynchronize();
    if (rc != CUDA_SUCCESS) return cu_fail(ctx, rc, err, "%s: cuCtxSynchronize", what);
    return KF_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ---- checking a loaded module against its plan ---- */

/* Resolve one CUfunction per launch of plan from mod into fn and check each: it exists,
 * takes exactly the launch's arguments as pointers (when the driver can say), and its
 * block and grid fit the kernel and the device. When log is non-NULL, the resource report
 * of each distinct kernel is appended to it. KF_ERR_COMPILE naming the launch otherwise. */
static kf_status check_plan(cu_ctx *ctx, CUmodule mod, const kf_launch_plan *plan,
                            CUfunction *fn, kf_buf *log, kf_error *err) {
    const kf_cu_api *cu = ctx->api;
    const kf_device_info *d = &ctx->info;
    for (int i = 0; i < plan->nlaunches; i++) {
        const kf_launch *l = &plan->l[i];
        CUresult rc = cu->ModuleGetFunction(&fn[i], mod, l->kernel);
        if (rc == CUDA_ERROR_NOT_FOUND)
            return kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                                "launch %d: kernel '%s' is not defined in the source (no "
                                "extern \"C\" __global__ function of that name; without "
                                "extern \"C\" the name is mangled)",
                                i + 1, l->kernel);
        if (rc != CUDA_SUCCESS)
            return cu_fail(ctx, rc, err, "launch %d: cuModuleGetFunction('%s')", i + 1,
                           l->kernel);
        int regs = 0, smem = 0, lmem = 0, maxt = 0;
        if (l->smem > 0) {
            int64_t limit = d->local_mem_optin_bytes > d->local_mem_bytes ? d->local_mem_optin_bytes
                                                                        : d->local_mem_bytes;
            if (l->smem > limit)
                return kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                                    "launch %d: kernel '%s' asks for %lld bytes of dynamic shared "
                                    "memory (smem=); %s allows at most %lld a block",
                                    i + 1, l->kernel, (long long)l->smem, d->name, (long long)limit);
            rc = cu->FuncSetAttribute(fn[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)l->smem);
            if (rc != CUDA_SUCCESS)
                return cu_fail(ctx, rc, err, "launch %d: cuFuncSetAttribute('%s', dynamic shared memory %lld)",
                               i + 1, l->kernel, (long long)l->smem);
        }
        cu->FuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn[i]);
        cu->FuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn[i]);
        cu->FuncGetAttribute(&lmem, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn[i]);
        cu->FuncGetAttribute(&maxt, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn[i]);
        int seen = 0;
        for (int k = 0; k < i; k++) seen |= strcmp(plan->l[k].kernel, l->kernel) == 0;
        /* smem: static and dynamic together, a block's whole share (what occupancy needs) */
        if (log && !seen)
            kf_buf_printf(log, "kforge: resources %s regs=%d smem=%lld local=%d max_threads=%d\n",
                          l->kernel, regs, (long long)smem + l->smem, lmem, maxt);
        if (cu->FuncGetParamInfo) {
            /* parameters are counted by asking for each index until the driver says
             * CUDA_ERROR_INVALID_VALUE (past the last); any other answer: it cannot say */
            int np = 0;
            size_t off = 0, size = 0;
            CUresult prc = CUDA_SUCCESS;
            while (np < 256 &&
                   (prc = cu->FuncGetParamInfo(fn[i], (size_t)np, &off, &size)) == CUDA_SUCCESS) {
                if (size != sizeof(CUdeviceptr))
                    return kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                                        "launch %d: kernel '%s': parameter %d is %zu bytes, "
                                        "but every kernel parameter must be a buffer pointer",
                                        i + 1, l->kernel, np, size);
                np++;
            }
            if (prc == CUDA_ERROR_INVALID_VALUE && np != l->nargs)
                return kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                                    "launch %d: kernel '%s' takes %d parameters but the launch "
                                    "passes %d (args=...)",
                                    i + 1, l->kernel, np, l->nargs);
        }
        int64_t threads = 1;
        for (int dim = 0; dim < l->ndims; dim++) {
            threads *= l->local[dim];
            if (d->max_wi[dim] > 0 && l->local[dim] > d->max_wi[dim])
                return kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                                    "launch %d: kernel '%s': block size %lld in dimension %d "
                                    "exceeds the device's limit of %d threads",
                                    i + 1, l->kernel, (long long)l->local[dim], dim,
                                    d->max_wi[dim]);
            int64_t grid = l->global[dim] / l->local[dim];
            if (ctx->max_grid[dim] > 0 && grid > ctx->max_grid[dim])
                return kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                                    "launch %d: kernel '%s': grid of %lld blocks in dimension "
                                    "%d exceeds the device's limit of %d",
                                    i + 1, l->kernel, (long long)grid, dim, ctx->max_grid[dim]);
        }
        if (maxt > 0 && threads > maxt)
            return kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                                "launch %d: kernel '%s': block of %lld threads exceeds its limit "
                                "of %d on %s (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, with %d "
                                "registers per thread)",
                                i + 1, l->kernel, (long long)threads, maxt, d->name, regs);
    }
    for (int s = 0; s < plan->nscratch; s++)
        if (d->max_alloc_bytes > 0 && plan->scratch_bytes[s] > d->max_alloc_bytes)
            return kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                                "scratch '%s' of %lld bytes exceeds the device's memory "
                                "(%lld bytes)",
                                plan->scratch_name[s], (long long)plan->scratch_bytes[s],
                                (long long)d->max_alloc_bytes);
    return KF_OK;
}

/* Load a CUBIN image into *mod (caller unloads). KF_ERR_COMPILE when the driver refuses
 * the image (wrong architecture, for one). */
static kf_status load_image(cu_ctx *ctx, const kf_buf *bin, CUmodule *mod, kf_error *err) {
    CUresult rc = ctx->api->ModuleLoadData(mod, bin->data);
    if (rc == CUDA_SUCCESS) return KF_OK;
    *mod = NULL;
    kf_status st = cu_fail(ctx, rc, err, "cuModuleLoadData (the CUBIN for %s)", ctx->info.arch);
    if (st == KF_ERR_RUNTIME && !kf_cu_error_is_sticky(rc)) {
        if (err) err->code = KF_ERR_COMPILE;
        st = KF_ERR_COMPILE;
    }
    return st;
}

/* ---- compile ---- */

/* Write data to path through a temporary name and a rename. */
static kf_status write_atomic(const char *path, const char *data, size_t len, kf_error *err) {
    static unsigned long counter;
    unsigned long seq = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld-%lu", path, (long)getpid(), seq);
    kf_status st = kf_write_file(tmp, data, len, err);
    if (st == KF_OK && rename(tmp, path) != 0)
        st = kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot rename artifact: %s",
                          strerror(errno));
    if (st != KF_OK) unlink(tmp);
    return st;
}

static kf_status compile_nvrtc(cu_ctx *ctx, const char *source, const char *flags,
                               const char *workdir, char *artifact, size_t cap, kf_buf *log,
                               kf_error *err) {
    kf_launch_plan plan;
    kf_status st = kf_launch_plan_parse(source, flags, -1, &plan, err);
    if (st != KF_OK) {
        if (log && err) kf_buf_printf(log, "kforge: bad launch plan: %s\n", err->msg);
        return st;
    }
    kf_buf ob = {0};
    kf_buf_puts(&ob, ctx->info.flags);
    if (flags && flags[0]) kf_buf_printf(&ob, " %s", flags);
    char *options = kf_buf_take(&ob);
    for (char *p = options; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    uint64_t h = kf_hash64(source, strlen(source), 0);
    h = kf_hash64(options, strlen(options), h);
    h = kf_hash64(ctx->info.arch, strlen(ctx->info.arch), h);
    h = kf_hash64(ctx->info.compiler, strlen(ctx->info.compiler), h);
    char hex[17];
    kf_hash_hex(h, hex);
    char cuk[4096], cubin[4096];
    int n1 = snprintf(cuk, sizeof cuk, "%s/%s.cuk", workdir, hex);
    int n2 = snprintf(cubin, sizeof cubin, "%s/%s.cubin", workdir, hex);
    if (n1 < 0 || n2 < 0 || (size_t)n2 >= sizeof cubin || (size_t)n1 >= cap) {
        free(options);
        return kf_error_set(err, KF_ERR_ARG, workdir, 0, 0, "workdir path is too long");
    }
    kf_buf bin = {0};
    CUmodule mod = NULL;
    int reuse = access(cuk, R_OK) == 0 && access(cubin, R_OK) == 0;
    if (reuse) {
        char *data = NULL;
        size_t len = 0;
        reuse = kf_read_file(cubin, &data, &len, NULL) == KF_OK && len > 0;
        if (reuse) kf_buf_putn(&bin, data, len);
        free(data);
        if (reuse && log)
            kf_buf_printf(log, "kforge: artifact %s exists (same source, options, arch)\n", cuk);
    }
    if (!reuse) {
        if (log)
            kf_buf_printf(log, "kforge: NVRTC for %s (%s) with options: %s\n", ctx->info.name,
                          ctx->info.arch, options);
        st = kf_cuda_nvrtc_compile(source, ctx->info.arch, options, &bin, log, err);
    }
    if (st == KF_OK) st = bind(ctx, err);
    if (st == KF_OK) st = load_image(ctx, &bin, &mod, err);
    if (st == KF_OK) {
        CUfunction fn[KF_MAX_LAUNCHES];
        st = check_plan(ctx, mod, &plan, fn, log, err);
    }
    if (mod) ctx->api->ModuleUnload(mod);
    if (st == KF_OK && !reuse) {
        st = write_atomic(cubin, bin.data, bin.len, err);
        if (st == KF_OK) {
            kf_buf text = {0};
            kf_buf_printf(&text, "%s\n%s", options, source);
            st = write_atomic(cuk, text.data, text.len, err);
            kf_buf_free(&text);
        }
    }
    if (st != KF_OK && log && err) kf_buf_printf(log, "kforge: %s\n", err->msg);
    if (st == KF_OK) snprintf(artifact, cap, "%s", cuk);
    kf_buf_free(&bin);
    free(options);
    return st;
}

static kf_status cu_compile(void *vctx, const char *source, const char *flags,
                            const char *workdir, char *artifact, size_t cap, kf_buf *log,
                            kf_error *err) {
    cu_ctx *ctx = vctx;
    if (kf_cuda_is_nvrtc_form(source))
        return compile_nvrtc(ctx, source, flags, workdir, artifact, cap, log, err);
    return kf_cuda_nvcc_compile(source, ctx->info.arch, flags, workdir, artifact, cap, log, err);
}

/* ---- load / launch ---- */

static void cu_unload(void *vctx, void *module) {
    cu_ctx *ctx = vctx;
    cu_module *m = module;
    if (!m) return;
    /* after a fault every call fails; the process is about to end anyway */
    int live = bind(ctx, NULL) == KF_OK;
    for (int s = 0; s < KF_MAX_SCRATCH; s++)
        if (m->scratch[s] && live) ctx->api->MemFree(m->scratch[s]);
    if (m->mod && live) ctx->api->ModuleUnload(m->mod);
    /* loaded RTLD_NODELETE: a candidate's static CUDA runtime registers exit-time
     * handlers that must still find its code */
    if (m->dl) dlclose(m->dl);
    free(m);
}

static kf_status load_nvcc(cu_module *m, const char *artifact, const char *entry,
                           kf_error *err) {
    dlerror();
    m->dl = dlopen(artifact, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!m->dl) {
        const char *e = dlerror();
        return kf_error_set(err, KF_ERR_RUNTIME, artifact, 0, 0, "cannot load: %s",
                            e ? e : "dlopen failed");
    }
    const char *name = entry && entry[0] ? entry : "kforge_kernel";
    dlerror();
    void *sym = dlsym(m->dl, name);
    if (!sym) {
        const char *e = dlerror();
        return kf_error_set(err, KF_ERR_RUNTIME, artifact, 0, 0,
                            "entry '%s' not found (%s): an nvcc-form CUDA candidate must "
                            "define extern \"C\" int %s(void *const *args)",
                            name, e ? e : "symbol is NULL", name);
    }
    memcpy(&m->host, &sym, sizeof m->host);
    return KF_OK;
}

static kf_status load_nvrtc(cu_ctx *ctx, cu_module *m, const char *artifact, kf_error *err) {
    char *text = NULL, *data = NULL;
    size_t len = 0, blen = 0;
    kf_status st = kf_read_file(artifact, &text, &len, err);
    if (st != KF_OK) return st;
    char *nl = strchr(text, '\n');
    if (!nl) {
        free(text);
        return kf_error_set(err, KF_ERR_RUNTIME, artifact, 0, 0,
                            "not a kforge CUDA artifact (no options line)");
    }
    *nl = 0;
    /* the stored options hold the -DNAME=V words the plan was resolved with */
    st = kf_launch_plan_parse(nl + 1, text, -1, &m->plan, err);
    free(text);
    if (st != KF_OK) return st;
    char cubin[4200];
    snprintf(cubin, sizeof cubin, "%.*s.cubin", (int)(strlen(artifact) - 4), artifact);
    st = kf_read_file(cubin, &data, &blen, err);
    if (st != KF_OK) return st;
    kf_buf bin = {.data = data, .len = blen, .cap = blen + 1};
    st = load_image(ctx, &bin, &m->mod, err);
    kf_buf_free(&bin);
    if (st == KF_OK) st = check_plan(ctx, m->mod, &m->plan, m->fn, NULL, err);
    return st;
}

static kf_status cu_load(void *vctx, const char *artifact, const char *entry, void **module,
                         kf_error *err) {
    cu_ctx *ctx = vctx;
    *module = NULL;
    kf_status st = bind(ctx, err);
    if (st != KF_OK) return st;
    cu_module *m = kf_calloc(1, sizeof *m);
    if (ends_with(artifact, ".so")) {
        m->form = FORM_NVCC;
        st = load_nvcc(m, artifact, entry, err);
    } else if (ends_with(artifact, ".cuk")) {
        m->form = FORM_NVRTC;
        st = load_nvrtc(ctx, m, artifact, err);
    } else {
        st = kf_error_set(err, KF_ERR_RUNTIME, artifact, 0, 0,
                          "not a kforge CUDA artifact (expected a .cuk or a .so)");
    }
    if (st != KF_OK) {
        cu_unload(ctx, m);
        return st;
    }
    *module = m;
    return KF_OK;
}

static kf_status make_scratch(cu_ctx *ctx, cu_module *m, kf_error *err) {
    if (m->scratch_ready) return KF_OK;
    for (int s = 0; s < m->plan.nscratch; s++) {
        if (m->scratch[s]) continue;
        CUresult rc = ctx->api->MemAlloc(&m->scratch[s], (size_t)m->plan.scratch_bytes[s]);
        if (rc != CUDA_SUCCESS) {
            m->scratch[s] = 0;
            return cu_fail(ctx, rc, err, "scratch '%s' (%lld bytes): cuMemAlloc",
                           m->plan.scratch_name[s], (long long)m->plan.scratch_bytes[s]);
        }
    }
    m->scratch_ready = 1;
    return KF_OK;
}

/* Queue launch i of m's plan on stream 0. */
static kf_status enqueue(cu_ctx *ctx, cu_module *m, int i, void *const *args, int nargs,
                         kf_error *err) {
    const kf_launch *l = &m->plan.l[i];
    CUdeviceptr val[KF_MAX_LAUNCH_ARGS];
    void *params[KF_MAX_LAUNCH_ARGS];
    for (int j = 0; j < l->nargs; j++) {
        int a = l->args[j];
        if (a >= 0) {
            if (a >= nargs || !args[a])
                return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0,
                                    "launch %d (kernel '%s'): argument %d names task buffer "
                                    "%d, but %s",
                                    i + 1, l->kernel, j, a,
                                    a >= nargs ? "fewer buffers were passed" : "it is NULL");
            val[j] = (CUdeviceptr)(uintptr_t)args[a];
        } else {
            if (-1 - a >= m->plan.nscratch)
                return kf_error_set(err, KF_ERR_INTERNAL, NULL, 0, 0,
                                    "launch %d: bad scratch index %d", i + 1, -1 - a);
            val[j] = m->scratch[-1 - a];
        }
        params[j] = &val[j];
    }
    unsigned g[3] = {1, 1, 1}, b[3] = {1, 1, 1};
    for (int d = 0; d < l->ndims; d++) {
        b[d] = (unsigned)l->local[d];
        g[d] = (unsigned)(l->global[d] / l->local[d]);
    }
    CUresult rc = ctx->api->LaunchKernel(m->fn[i], g[0], g[1], g[2], b[0], b[1], b[2], (unsigned)l->smem, NULL,
                                         l->nargs ? params : NULL, NULL);
    if (rc != CUDA_SUCCESS)
        return cu_fail(ctx, rc, err, "launch %d (kernel '%s', grid %u,%u,%u block %u,%u,%u): "
                       "cuLaunchKernel", i + 1, l->kernel, g[0], g[1], g[2], b[0], b[1], b[2]);
    return KF_OK;
}

/* An nvcc-form candidate's own result: non-zero is KF_ERR_RUNTIME. */
static kf_status host_result(int krc, kf_error *err) {
    if (krc == 0) return KF_OK;
    return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "the kernel returned %d", krc);
}

static kf_status cu_launch(void *vctx, void *module, void *const *args, int nargs,
                           kf_error *err) {
    cu_ctx *ctx = vctx;
    cu_module *m = module;
    if (!m) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "launch: no module");
    kf_status st = bind(ctx, err);
    if (st != KF_OK) return st;
    if (m->form == FORM_NVCC) {
        int krc = m->host(args);
        /* a fault says more than the candidate's own result */
        st = sync_ctx(ctx, err, "kforge_kernel");
        return st != KF_OK ? st : host_result(krc, err);
    }
    st = make_scratch(ctx, m, err);
    for (int i = 0; i < m->plan.nlaunches && st == KF_OK; i++) {
        st = enqueue(ctx, m, i, args, nargs, err);
        /* wait for each launch so that a fault is charged to the launch that made it */
        if (st == KF_OK) {
            char what[120];
            snprintf(what, sizeof what, "launch %d (kernel '%s')", i + 1, m->plan.l[i].kernel);
            st = sync_ctx(ctx, err, what);
        }
    }
    if (st != KF_OK && !ctx->fault[0]) ctx->api->CtxSynchronize();
    return st;
}

static kf_status cu_launch_timed(void *vctx, void *module, void *const *args, int nargs,
                                 double *seconds, kf_error *err) {
    cu_ctx *ctx = vctx;
    cu_module *m = module;
    const kf_cu_api *cu = ctx->api;
    *seconds = 0;
    if (!m) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "launch: no module");
    kf_status st = bind(ctx, err);
    if (st != KF_OK) return st;
    for (int k = 0; k < 2; k++)
        if (!ctx->ev[k]) {
            CUresult rc = cu->EventCreate(&ctx->ev[k], CU_EVENT_DEFAULT);
            if (rc != CUDA_SUCCESS) {
                ctx->ev[k] = NULL;
                return cu_fail(ctx, rc, err, "cuEventCreate");
            }
        }
    if (m->form == FORM_NVRTC) st = make_scratch(ctx, m, err);
    if (st != KF_OK) return st;
    CUresult rc = cu->EventRecord(ctx->ev[0], NULL);
    if (rc != CUDA_SUCCESS) return cu_fail(ctx, rc, err, "cuEventRecord");
    int krc = 0;
    if (m->form == FORM_NVCC) {
        krc = m->host(args);
        /* The candidate's host code may launch on a stream of its own (non-blocking, or the
         * per-thread default stream), which the stop event on the legacy stream would not
         * wait for, or leave work running on purpose: the whole context must be idle
         * before the stop event is recorded, so all of its work lies inside the interval.
         * Costs the host round trip of one synchronisation per timed call, nvcc form only
         * (the NVRTC form's launches are kforge's own, on the legacy stream). */
        st = sync_ctx(ctx, err, "kforge_kernel (before the stop event)");
    } else {
        /* back to back, one wait for the whole plan, as the launches run in use */
        for (int i = 0; i < m->plan.nlaunches && st == KF_OK; i++)
            st = enqueue(ctx, m, i, args, nargs, err);
    }
    if (st == KF_OK) {
        rc = cu->EventRecord(ctx->ev[1], NULL);
        if (rc != CUDA_SUCCESS) st = cu_fail(ctx, rc, err, "cuEventRecord");
    }
    if (st == KF_OK) {
        rc = cu->EventSynchronize(ctx->ev[1]);
        if (rc != CUDA_SUCCESS) st = cu_fail(ctx, rc, err, "launch plan: cuEventSynchronize");
    }
    kf_status sst = ctx->fault[0] ? KF_OK : sync_ctx(ctx, st == KF_OK ? err : NULL, "launch plan");
    if (st == KF_OK) st = sst;
    if (st == KF_OK && m->form == FORM_NVCC) st = host_result(krc, err);
    if (st == KF_OK) {
        float ms = 0;
        rc = cu->EventElapsedTime(&ms, ctx->ev[0], ctx->ev[1]);
        if (rc != CUDA_SUCCESS) return cu_fail(ctx, rc, err, "cuEventElapsedTime");
        *seconds = (double)ms * 1e-3;
    }
    return st;
}

/* ---- memory ---- */

static void *cu_alloc(void *vctx, size_t bytes) {
    cu_ctx *ctx = vctx;
    kf_error e = {0};
    if (bind(ctx, &e) != KF_OK) {
        kf_log(1, "cuda: alloc: %s\n", e.msg);
        return NULL;
    }
    CUdeviceptr p = 0;
    CUresult rc = ctx->api->MemAlloc(&p, bytes ? bytes : 1);
    if (rc != CUDA_SUCCESS) {
        kf_log(2, "cuda: cuMemAlloc(%zu): %s\n", bytes, kf_cu_error_name(rc));
        return NULL;
    }
    return (void *)(uintptr_t)p;
}

static void cu_free(void *vctx, void *dev) {
    cu_ctx *ctx = vctx;
    if (dev && bind(ctx, NULL) == KF_OK) ctx->api->MemFree((CUdeviceptr)(uintptr_t)dev);
}

static kf_status cu_copy_in(void *vctx, void *dev, const void *host, size_t bytes) {
    cu_ctx *ctx = vctx;
    kf_error e = {0};
    if (!bytes) return KF_OK;
    kf_status st = bind(ctx, &e);
    if (st == KF_OK) {
        CUresult rc = ctx->api->MemcpyHtoD((CUdeviceptr)(uintptr_t)dev, host, bytes);
        if (rc != CUDA_SUCCESS) st = cu_fail(ctx, rc, &e, "cuMemcpyHtoD(%zu bytes)", bytes);
    }
    if (st != KF_OK) kf_log(1, "cuda: %s\n", e.msg);
    return st;
}

/* Page-lock the runner's host range of the buffers (flags 0: not mapped for the device,
 * whose kernels see only the device copies). The region is the verifier's memfd mapping,
 * so the pages are the parent's too; the lock ends with the process. */
static kf_status cu_host_pin(void *vctx, void *host, size_t bytes, kf_error *err) {
    cu_ctx *ctx = vctx;
    if (!ctx->api->MemHostRegister)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "the driver lacks cuMemHostRegister");
    kf_status st = bind(ctx, err);
    if (st != KF_OK) return st;
    CUresult rc = ctx->api->MemHostRegister(host, bytes, 0);
    return rc == CUDA_SUCCESS ? KF_OK : cu_fail(ctx, rc, err, "cuMemHostRegister(%zu bytes)", bytes);
}

static kf_status cu_copy_in_at(void *vctx, void *dev, size_t offset, const void *host, size_t bytes) {
    return cu_copy_in(vctx, (char *)dev + offset, host, bytes);
}

static kf_status cu_copy_dd(void *vctx, void *dst, const void *src, size_t bytes) {
    cu_ctx *ctx = vctx;
    kf_error e = {0};
    if (!bytes) return KF_OK;
    kf_status st = bind(ctx, &e);
    if (st != KF_OK) return st;
    CUresult rc = ctx->api->MemcpyDtoD((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes);
    if (rc == CUDA_SUCCESS) rc = ctx->api->CtxSynchronize();
    if (rc != CUDA_SUCCESS) st = cu_fail(ctx, rc, &e, "cuMemcpyDtoD(%zu bytes)", bytes);
    if (st != KF_OK) kf_log(1, "cuda: %s\n", e.msg);
    return st;
}

/* bytes of dev + offset filled with the psize-byte pattern: one memset for a pattern of 1,
 * 2 or 4 bytes; an 8-byte one as two strided 32-bit memsets (its low and its high half,
 * every 8 bytes: cuMemsetD2D32 with a pitch of 8 and a width of one word). */
static kf_status cu_fill(void *vctx, void *dev, size_t offset, const void *pattern, size_t psize,
                         size_t bytes) {
    cu_ctx *ctx = vctx;
    kf_error e = {0};
    if (!bytes) return KF_OK;
    if (!psize || bytes % psize || (psize != 1 && psize != 2 && psize != 4 && psize != 8) ||
        offset % psize)
        return KF_ERR_ARG;
    kf_status st = bind(ctx, &e);
    if (st != KF_OK) return st;
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dev + offset;
    CUresult rc;
    if (psize == 1) {
        rc = ctx->api->MemsetD8(d, *(const uint8_t *)pattern, bytes);
    } else if (psize == 2) {
        uint16_t v;
        memcpy(&v, pattern, 2);
        rc = ctx->api->MemsetD16(d, v, bytes / 2);
    } else if (psize == 4) {
        uint32_t v;
        memcpy(&v, pattern, 4);
        rc = ctx->api->MemsetD32(d, v, bytes / 4);
    } else {
        uint32_t v[2];
        memcpy(v, pattern, 8);
        rc = ctx->api->MemsetD2D32(d, 8, v[0], 1, bytes / 8);
        if (rc == CUDA_SUCCESS) rc = ctx->api->MemsetD2D32(d + 4, 8, v[1], 1, bytes / 8);
    }
    if (rc == CUDA_SUCCESS) rc = ctx->api->CtxSynchronize();
    if (rc != CUDA_SUCCESS) st = cu_fail(ctx, rc, &e, "fill: cuMemset (%zu bytes, pattern of %zu)", bytes, psize);
    if (st != KF_OK) kf_log(1, "cuda: %s\n", e.msg);
    return st;
}

static kf_status cu_copy_out(void *vctx, void *host, const void *dev, size_t bytes) {
    cu_ctx *ctx = vctx;
    kf_error e = {0};
    if (!bytes) return KF_OK;
    kf_status st = bind(ctx, &e);
    if (st == KF_OK) {
        CUresult rc = ctx->api->MemcpyDtoH(host, (CUdeviceptr)(uintptr_t)dev, bytes);
        if (rc != CUDA_SUCCESS) st = cu_fail(ctx, rc, &e, "cuMemcpyDtoH(%zu bytes)", bytes);
    }
    if (st != KF_OK) kf_log(1, "cuda: %s\n", e.msg);
    return st;
}

static kf_status cu_sync(void *vctx) {
    cu_ctx *ctx = vctx;
    kf_error e = {0};
    kf_status st = bind(ctx, &e);
    if (st == KF_OK) st = sync_ctx(ctx, &e, "sync");
    if (st != KF_OK) kf_log(1, "cuda: %s\n", e.msg);
    return st;
}

/* Device pointers are plain addresses: a view is one, offset; nothing to release. */
static void *cu_view(void *vctx, void *dev, size_t offset, size_t bytes) {
    return (void *)((uintptr_t)dev + offset);
}

static void cu_view_free(void *vctx, void *view) {}

/* Write `bytes` of device memory (clamped to a quarter of the device's) and wait: larger
 * than the L2, this evicts it. */
static kf_status cu_flush(void *vctx, size_t bytes) {
    cu_ctx *ctx = vctx;
    kf_error e = {0};
    if (ctx->info.global_mem_bytes > 0 && bytes > (size_t)ctx->info.global_mem_bytes / 4)
        bytes = (size_t)ctx->info.global_mem_bytes / 4;
    if (bytes == 0) return KF_OK;
    kf_status st = bind(ctx, &e);
    if (st == KF_OK && bytes > ctx->flush_bytes) {
        if (ctx->flush_buf) ctx->api->MemFree(ctx->flush_buf);
        ctx->flush_buf = 0;
        ctx->flush_bytes = 0;
        CUresult rc = ctx->api->MemAlloc(&ctx->flush_buf, bytes);
        if (rc != CUDA_SUCCESS) {
            ctx->flush_buf = 0;
            st = cu_fail(ctx, rc, &e, "flush buffer of %zu bytes: cuMemAlloc", bytes);
        } else {
            ctx->flush_bytes = bytes;
        }
    }
    if (st == KF_OK) {
        /* a new value each time: no write can be skipped */
        CUresult rc = ctx->api->MemsetD8(ctx->flush_buf, ++ctx->flush_seq, bytes);
        if (rc != CUDA_SUCCESS) st = cu_fail(ctx, rc, &e, "flush: cuMemsetD8");
    }
    if (st == KF_OK) st = sync_ctx(ctx, &e, "flush");
    if (st != KF_OK) kf_log(1, "cuda: %s\n", e.msg);
    return st;
}

/* ---- context ---- */

static kf_status cu_probe(void *vctx, kf_device_info *info, kf_error *err) {
    cu_ctx *ctx = vctx;
    *info = ctx->info;
    return KF_OK;
}

static void cu_destroy(void *vctx) {
    cu_ctx *ctx = vctx;
    if (!ctx) return;
    if (ctx->pctx) {
        if (bind(ctx, NULL) == KF_OK) {
            ctx->api->CtxSynchronize();
            for (int k = 0; k < 2; k++)
                if (ctx->ev[k]) ctx->api->EventDestroy(ctx->ev[k]);
            if (ctx->flush_buf) ctx->api->MemFree(ctx->flush_buf);
        }
        ctx->api->DevicePrimaryCtxRelease(ctx->dev);
    }
    free(ctx);
}

static const kf_backend_iface cu_iface = {
    .name = "cuda",
    .probe = cu_probe,
    .compile = cu_compile,
    .load = cu_load,
    .launch = cu_launch,
    .unload = cu_unload,
    .alloc = cu_alloc,
    .free = cu_free,
    .copy_in = cu_copy_in,
    .copy_out = cu_copy_out,
    .host_pin = cu_host_pin,
    .fill = cu_fill,
    .copy_in_at = cu_copy_in_at,
    .copy_dd = cu_copy_dd,
    .sync = cu_sync,
    .destroy = cu_destroy,
    .view = cu_view,
    .view_free = cu_view_free,
    .launch_timed = cu_launch_timed,
    .flush = cu_flush,
};

/* Constructor used by the registry in backend.c: opens CUDA device `index` (driver
 * order) through its primary context, made current on the calling thread, and probes it.
 * KF_ERR_UNSUPPORTED when there is no driver, cuInit fails, there is no device (each with
 * why) or index is out of range (saying how many devices exist); KF_ERR_RUNTIME when the
 * driver refuses the context. On success the caller owns *ctx (iface->destroy). */
kf_status kf_backend_cuda_create(int index, const kf_backend_iface **iface, void **vctx,
                                 kf_error *err) {
    *iface = NULL;
    *vctx = NULL;
    const kf_cu_api *api = NULL;
    int n = 0;
    kf_status st = kf_cu_device_count(&api, &n, err);
    if (st != KF_OK) return st;
    if (index < 0 || index >= n) {
        if (n == 1)
            return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                                "no CUDA device cuda:%d: this machine has 1 CUDA device "
                                "(cuda:0)",
                                index);
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "no CUDA device cuda:%d: this machine has %d CUDA devices "
                            "(cuda:0 .. cuda:%d)",
                            index, n, n - 1);
    }
    cu_ctx *ctx = kf_calloc(1, sizeof *ctx);
    ctx->api = api;
    ctx->index = index;
    CUresult rc = api->DeviceGet(&ctx->dev, index);
    if (rc != CUDA_SUCCESS) {
        st = cu_fail(ctx, rc, err, "cuDeviceGet(%d)", index);
        free(ctx);
        return st;
    }
    st = kf_cu_probe_device(api, ctx->dev, &ctx->info, err);
    if (st == KF_OK) {
        rc = api->DevicePrimaryCtxRetain(&ctx->pctx, ctx->dev);
        if (rc != CUDA_SUCCESS) {
            ctx->pctx = NULL;
            st = cu_fail(ctx, rc, err, "cuda:%d (%s): cuDevicePrimaryCtxRetain", index,
                         ctx->info.name);
        }
    }
    if (st == KF_OK) st = bind(ctx, err);
    if (st != KF_OK) {
        cu_destroy(ctx);
        return st;
    }
    static const CUdevice_attribute grid_attr[3] = {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
                                                    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                                    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
    for (int d = 0; d < 3; d++)
        if (api->DeviceGetAttribute(&ctx->max_grid[d], grid_attr[d], ctx->dev) != CUDA_SUCCESS)
            ctx->max_grid[d] = 0;
    ctx->info.index = index;
    *iface = &cu_iface;
    *vctx = ctx;
    return KF_OK;
}

/* Every CUDA device, probed (no context is created); see kf_backend_list. The caller
 * frees *infos. KF_ERR_UNSUPPORTED with why when there is no driver or no device. */
kf_status kf_backend_cuda_list(kf_device_info **infos, int *n, kf_error *err) {
    *infos = NULL;
    *n = 0;
    const kf_cu_api *api = NULL;
    int nd = 0;
    kf_status st = kf_cu_device_count(&api, &nd, err);
    if (st != KF_OK) return st;
    kf_device_info *d = kf_calloc((size_t)nd, sizeof *d);
    for (int i = 0; i < nd; i++) {
        CUdevice dev = 0;
        kf_error e = {0};
        CUresult rc = api->DeviceGet(&dev, i);
        if (rc != CUDA_SUCCESS) {
            kf_log(2, "cuda:%d: cuDeviceGet: %s\n", i, kf_cu_error_name(rc));
            snprintf(d[i].platform, sizeof d[i].platform, "cuda");
        } else if (kf_cu_probe_device(api, dev, &d[i], &e) != KF_OK) {
            kf_log(2, "cuda:%d: %s\n", i, e.msg);
        }
        d[i].index = i;
    }
    *infos = d;
    *n = nd;
    return KF_OK;
}
