/*
 * No PyTorch, Python, vendor library or dynamic loader in a kernel (src/verify/forbid.c,
 * docs/kernel-contract.md): planted CPU kernels on a graph task, each refused before it
 * runs as forbidden-call with the symbol named, however the call is spelled (a
 * declaration, a weak reference, an asm label, a mangled C++ name); honest kernels with
 * names that look alike pass. The source check (what a GPU artifact gets) on CUDA and
 * OpenCL text: a library named in code is refused, in a comment it is not.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/core.h"
#include "kforge/ir.h"
#include "kforge/verify.h"
#include "verify/verify_int.h"

typedef struct {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *ctx;
} fx;

static fx f;

static void setup(void) {
    memset(&f, 0, sizeof f);
    kf_error err = {0};
    cr_assert_eq(kf_parse_string("task scale\ninput x: f32[64]\noutput y = x * 2\n", "<test>", &f.g, &err), KF_OK,
                 "%s", err.msg);
    cr_assert_eq(kf_backend_open("cpu", &f.b, &err), KF_OK, "%s", err.msg);
    char wd[512];
    snprintf(wd, sizeof wd, "%s/test-work/forbid", KF_BUILD_DIR);
    cr_assert_eq(kf_mkdirs(wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.workdir = wd;
    o.seed = 99;
    o.threads = 1;
    cr_assert_eq(kf_verify_ctx_new(f.g, &o, &f.ctx, &err), KF_OK, "%s", err.msg);
}

static void teardown(void) {
    kf_verify_ctx_free(f.ctx);
    kf_backend_close(f.b);
    kf_graph_free(f.g);
}

TestSuite(forbid, .init = setup, .fini = teardown, .timeout = 120);

static char buf[4096];

/* A correct kernel for y = 2x with decl before it and call inside it. */
static const char *kernel(const char *decl, const char *call) {
    snprintf(buf, sizeof buf,
             "#include <stddef.h>\n%s\n"
             "int kforge_kernel(void *const *args) {\n"
             "    const float *x = args[0];\n    float *y = args[1];\n"
             "    %s\n"
             "    for (int i = 0; i < 64; i++) y[i] = 2 * x[i];\n    return 0;\n}\n",
             decl, call);
    return buf;
}

static kf_vresult check(const char *src) {
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "cpu", src, NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    cr_assert_eq(kf_verify_candidate(f.ctx, f.b, &c, &r, &err), KF_OK, "%s", err.msg);
    kf_candidate_clear(&c);
    return r;
}

static void refused(const char *src, const char *symbol, const char *library) {
    kf_vresult r = check(src);
    cr_assert_eq(r.status, KF_V_FORBIDDEN, "%s, want forbidden-call: %s\n%s", kf_vstatus_name(r.status), r.detail,
                 src);
    cr_assert_str_eq(kf_vstatus_name(r.status), "forbidden-call");
    char q[200];
    snprintf(q, sizeof q, "'%s'", symbol);
    cr_assert(strstr(r.detail, q), "the symbol %s is not named: %s", symbol, r.detail);
    cr_assert(strstr(r.detail, library), "'%s' not in: %s", library, r.detail);
    cr_assert_eq(r.sets_run, 0, "it ran");
}

Test(forbid, honest_kernels_pass_whatever_their_names) {
    kf_vresult r = check(kernel("", ""));
    cr_assert_eq(r.status, KF_V_OK, "%s: %s", kf_vstatus_name(r.status), r.detail);
    /* look-alike names of its own: a variable `system`, a static helper `acc_`, a comment
     * naming cblas_sgemm and dlopen */
    r = check(kernel("static float acc_(float v) { return v; } /* not cblas_sgemm, not dlopen */",
                     "int system = 0; (void)system; (void)acc_(1.0f);"));
    cr_assert_eq(r.status, KF_V_OK, "%s: %s", kf_vstatus_name(r.status), r.detail);
}

Test(forbid, blas_calls_are_refused) {
    refused(kernel("extern void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *,"
                   " int, float, float *, int);",
                   "if (x == NULL) cblas_sgemm(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);"),
            "cblas_sgemm", "BLAS");
    /* the Fortran routine, declared weak so that it loads without the library */
    refused(kernel("extern void sgemm_(void) __attribute__((weak));", "if (sgemm_) sgemm_();"), "sgemm_",
            "Fortran routine");
    refused(kernel("extern int mkl_get_max_threads(void);", "if (x == NULL) return mkl_get_max_threads();"),
            "mkl_get_max_threads", "MKL");
    refused(kernel("extern int dnnl_set_verbose(int);", "if (x == NULL) return dnnl_set_verbose(0);"),
            "dnnl_set_verbose", "oneDNN");
}

Test(forbid, torch_and_python_are_refused) {
    /* ATen through its mangled name, spelled as an asm label */
    refused(kernel("extern void aten_relu(void) __asm__(\"_ZN2at4_ops4relu4callERKNS_6TensorE\");",
                   "if (x == NULL) aten_relu();"),
            "_ZN2at4_ops4relu4callERKNS_6TensorE", "ATen");
    refused(kernel("extern void c10_thing(void) __asm__(\"_ZNK3c1010TensorImpl5numelEv\");",
                   "if (x == NULL) c10_thing();"),
            "_ZNK3c1010TensorImpl5numelEv", "c10");
    refused(kernel("extern int Py_IsInitialized(void);", "if (x == NULL) return Py_IsInitialized();"),
            "Py_IsInitialized", "Python");
    refused(kernel("extern int runit(const char *) __asm__(\"system\");",
                   "if (x == NULL) return runit(\"python3 -c 'import torch'\");"),
            "system", "starting a program");
}

Test(forbid, the_dynamic_loader_is_refused) {
    refused(kernel("#include <dlfcn.h>", "if (x == NULL) return dlopen(\"libtorch.so\", RTLD_NOW) != NULL;"),
            "dlopen", "dynamic loader");
    /* hidden behind another name: the symbol is still dlsym */
    refused(kernel("extern void *lookup(void *, const char *) __asm__(\"dlsym\");",
                   "if (x == NULL) return lookup(NULL, \"cblas_sgemm\") != NULL;"),
            "dlsym", "dynamic loader");
}

Test(forbid, the_source_check_names_what_a_device_artifact_cannot_show) {
    char why[600];
    const char *cublas = "#include <cublas_v2.h>\n"
                         "extern \"C\" int kforge_kernel(void *const *args) {\n"
                         "    cublasHandle_t h; cublasCreate(&h);\n    return 0;\n}\n";
    cr_assert_eq(kf_verify_forbidden(cublas, NULL, 1, why, sizeof why), 1);
    cr_assert(strstr(why, "'cublas_v2'") && strstr(why, "cuBLAS"), "%s", why);
    const char *aten = "// launch: k grid=1 block=32\n__global__ void k(float *y) {\n"
                       "    auto t = at::empty({1}); y[0] = 1;\n}\n";
    cr_assert_eq(kf_verify_forbidden(aten, NULL, 1, why, sizeof why), 1);
    cr_assert(strstr(why, "'at'") && strstr(why, "ATen"), "%s", why);
    const char *cudnn = "__global__ void k(float *y) { y[0] = 1; }\n"
                        "void f(void) { cudnnConvolutionForward(0); }\n";
    cr_assert_eq(kf_verify_forbidden(cudnn, NULL, 1, why, sizeof why), 1);
    cr_assert(strstr(why, "'cudnnConvolutionForward'") && strstr(why, "cuDNN"), "%s", why);
    /* an OpenCL kernel that only says it in a comment, and one whose variable is `system` */
    const char *clean = "/* no cublasSgemm, no at::conv2d, no dlopen here */\n"
                        "__kernel void k(__global float *y) { int system = 1; y[get_global_id(0)] = system; }\n";
    cr_assert_eq(kf_verify_forbidden(clean, NULL, 1, why, sizeof why), 0, "%s", why);
}

/* An nvcc-form CUDA candidate's .so holds nvcc's static CUDA runtime, which calls dlopen
 * itself: on a device backend that is no reason to refuse (its source is checked instead);
 * the same .so as a CPU artifact would be refused. Needs nvcc, not a GPU. */
Test(forbid, an_nvcc_runtime_may_call_the_loader_the_kernel_may_not) {
    const char *nvcc = getenv("KFORGE_NVCC");
    if (!nvcc || !*nvcc) nvcc = access("/usr/local/cuda/bin/nvcc", X_OK) == 0 ? "/usr/local/cuda/bin/nvcc" : NULL;
    if (!nvcc) cr_skip_test("no nvcc");
    const char *src = "__global__ void k(float *y) { y[threadIdx.x] = 1; }\n"
                      "extern \"C\" int kforge_kernel(void *const *args) {\n"
                      "    k<<<1, 64>>>((float *)args[1]);\n    return cudaDeviceSynchronize();\n}\n";
    char dir[512], cu[600], so[600], cmd[2000];
    snprintf(dir, sizeof dir, "%s/test-work/forbid", KF_BUILD_DIR);
    snprintf(cu, sizeof cu, "%s/nvcc_form.cu", dir);
    snprintf(so, sizeof so, "%s/nvcc_form.so", dir);
    kf_error err = {0};
    cr_assert_eq(kf_write_file(cu, src, strlen(src), &err), KF_OK, "%s", err.msg);
    snprintf(cmd, sizeof cmd, "%s -O3 -Xcompiler -fPIC -shared -o %s %s > /dev/null 2>&1", nvcc, so, cu);
    if (system(cmd) != 0) cr_skip_test("nvcc could not build %s", cu);
    char why[600];
    cr_assert_eq(kf_verify_forbidden(src, so, 1, why, sizeof why), 0, "%s", why);
    cr_assert_eq(kf_verify_forbidden(src, so, 0, why, sizeof why), 1);
    cr_assert(strstr(why, "dynamic loader"), "%s", why);
    /* the candidate's own dlopen is in its source */
    const char *own = "#include <dlfcn.h>\nextern \"C\" int kforge_kernel(void *const *args) {\n"
                      "    return dlopen(\"libcublas.so\", RTLD_NOW) == 0;\n}\n";
    cr_assert_eq(kf_verify_forbidden(own, so, 1, why, sizeof why), 1);
    cr_assert(strstr(why, "'dlfcn'") || strstr(why, "'dlopen'"), "%s", why);
    unlink(cu), unlink(so);
}
