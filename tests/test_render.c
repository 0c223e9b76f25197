/*
 * The kernel-form renderer (src/render): token substitution in each language, the errors a
 * template author meets, and the rendered text proven by real compilers where there are:
 *  - OpenCL: built and run on the OpenCL platform here (PoCL): a vectorised add, a 256-wide
 *    shared-memory tree reduction through $fn helpers (with a long output), the prelude's
 *    math helpers against libm, and a dense sweep of the kernel-form fallbacks (erf, expm1,
 *    log1p) that Metal uses, against libm;
 *  - CUDA: the same kernels plus warp reductions compiled by nvcc (sm_90) and by NVRTC
 *    (dlopen), and run through the driver API (dlopen) when a GPU is present;
 *  - Metal (no compiler here): golden texts compared byte for byte, and a stand-in syntax
 *    check by clang's C++ for OpenCL against a stub metal_stdlib (device/threadgroup mapped
 *    to __global/__local, no generic address space), which catches a pointer without an
 *    address space, undeclared names and overload misses, not Metal-only rules.
 * KFORGE_UPDATE_GOLDEN=1 rewrites the tests/golden/ .metal files from the current output.
 * KFORGE_RENDER_DUMP=<dir> also writes the rendered translation units there.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "render/render.h"

#ifdef KF_HAVE_OPENCL
#include <CL/cl.h>
#endif

static const kf_lang *LG(kf_lang_id id) { return kf_lang_get(id); }

/* render form text; the test fails on an error */
static char *text(kf_lang_id id, const char *form) {
    kf_buf o = {0};
    kf_error err = {0};
    kf_status st = kf_render_text(LG(id), form, &o, &err);
    cr_assert_eq(st, KF_OK, "%s: `%s`: %s", kf_lang_name(LG(id)), form, err.msg);
    return kf_buf_take(&o);
}

static char *kernel(kf_lang_id id, const kf_gkernel *k) {
    kf_buf o = {0};
    kf_error err = {0};
    kf_status st = kf_render_kernel(LG(id), k, &o, &err);
    cr_assert_eq(st, KF_OK, "%s: kernel %s: %s", kf_lang_name(LG(id)), k->name, err.msg);
    return kf_buf_take(&o);
}

static void expect_contains(const char *hay, const char *needle, const char *what) {
    cr_expect(strstr(hay, needle) != NULL, "%s: `%s` not found in:\n%s", what, needle, hay);
}

/* ---- tables ------------------------------------------------------------------------- */

Test(render, lang_tables) {
    static const char *const names[] = {"opencl", "cuda", "metal"};
    for (int i = 0; i < KF_LANG_COUNT; i++) {
        const kf_lang *L = kf_lang_get((kf_lang_id)i);
        cr_assert_str_eq(kf_lang_name(L), names[i]);
        cr_assert_eq(kf_lang_by_name(names[i]), L);
        cr_assert(kf_lang_has_subgroups(L));
    }
    cr_assert_null(kf_lang_by_name("glsl"));
    cr_assert_null(kf_lang_by_name(NULL));
    cr_assert_null(kf_render_fallback_form("kf_tanhf"));
    cr_assert_not_null(kf_render_fallback_form("kf_erff"));
}

/* ---- token substitution --------------------------------------------------------------- */

typedef struct tcase {
    const char *form;
    const char *want[KF_LANG_COUNT]; /* OpenCL, CUDA, Metal */
} tcase;

static const tcase text_cases[] = {
    {"$barrier;", {"barrier(CLK_LOCAL_MEM_FENCE);", "__syncthreads();",
                   "threadgroup_barrier(mem_flags::mem_threadgroup);"}},
    {"$global float *p", {"__global float *p", "float *p", "device float *p"}},
    {"$shared_ptr float *s", {"__local float *s", "float *s", "threadgroup float *s"}},
    {"float *$restrict q", {"float *restrict q", "float *__restrict__ q", "float *q"}},
    {"$fn float f(float x)", {"static inline float f(float x)", "__device__ __forceinline__ float f(float x)",
                              "static inline float f(float x)"}},
    {"$vec(float, 4) a; $vec(int,2) b;", {"float4 a; int2 b;", "float4 a; int2 b;", "float4 a; int2 b;"}},
    {"v = $vload(4, p, i);", {"v = vload4(0, p + i);", "v = kf_vload4(p + i);", "v = kf_vload4(p + i);"}},
    {"$vload(2, p + 8, i * 2)", {"vload2(0, (p + 8) + (i * 2))", "kf_vload2((p + 8) + (i * 2))",
                                 "kf_vload2((p + 8) + (i * 2))"}},
    {"$vstore(4, v, q, 4 * k);", {"vstore4(v, 0, q + (4 * k));", "kf_vstore4(q + (4 * k), v);",
                                  "kf_vstore4(q + (4 * k), v);"}},
    {"$vmake(float, 2, a, b + 1.0f)", {"((float2)(a, b + 1.0f))", "make_float2(a, b + 1.0f)",
                                       "float2(a, b + 1.0f)"}},
    {"$sg_sum(x) + $sg_max(y) - $sg_min(z)",
     {"sub_group_reduce_add(x) + sub_group_reduce_max(y) - sub_group_reduce_min(z)",
      "kf_warp_sum(x) + kf_warp_max(y) - kf_warp_min(z)", "simd_sum(x) + simd_max(y) - simd_min(z)"}},
    {"$sg_shfl_xor(v, m + 1)", {"sub_group_shuffle_xor(v, (uint)(m + 1))",
                                "__shfl_xor_sync(0xffffffffu, v, m + 1)",
                                "simd_shuffle_xor(v, (ushort)(m + 1))"}},
    /* arguments are rendered recursively */
    {"$vstore(4, $vload(4, p, i), q, i)", {"vstore4(vload4(0, p + i), 0, q + i)",
                                            "kf_vstore4(q + i, kf_vload4(p + i))",
                                            "kf_vstore4(q + i, kf_vload4(p + i))"}},
    {"$vload(2, (p), (i ? 2 : 4))", {"vload2(0, (p) + (i ? 2 : 4))", "kf_vload2((p) + (i ? 2 : 4))",
                                     "kf_vload2((p) + (i ? 2 : 4))"}},
    {"cost = 5 $$ a$$b", {"cost = 5 $ a$b", "cost = 5 $ a$b", "cost = 5 $ a$b"}},
    /* comments and literals are copied, tokens in them untouched */
    {"a /* $nope( */ b // $bad\n\"$x\" '$'", {"a /* $nope( */ b // $bad\n\"$x\" '$'",
                                             "a /* $nope( */ b // $bad\n\"$x\" '$'",
                                             "a /* $nope( */ b // $bad\n\"$x\" '$'"}},
};

Test(render, tokens_per_language) {
    for (size_t c = 0; c < sizeof text_cases / sizeof text_cases[0]; c++)
        for (int l = 0; l < KF_LANG_COUNT; l++) {
            char *got = text((kf_lang_id)l, text_cases[c].form);
            cr_expect_str_eq(got, text_cases[c].want[l], "%s: `%s`", kf_lang_name(LG(l)), text_cases[c].form);
            free(got);
        }
}

Test(render, ids_in_kernels) {
    kf_gkernel k = {.name = "ids", .wg = {64, 1, 1}};
    kf_gkernel_param(&k, "y", "int", KF_GP_OUT);
    k.body = "    y[0] = $gid(0) + $lid(1) + $grp(2) + $lsz(0) + $ngrp(1);\n";
    static const char *const want[] = {
        "y[0] = (int)get_global_id(0) + (int)get_local_id(1) + (int)get_group_id(2) + "
        "(int)get_local_size(0) + (int)get_num_groups(1);",
        "y[0] = (int)(blockIdx.x * blockDim.x + threadIdx.x) + (int)threadIdx.y + (int)blockIdx.z + "
        "(int)blockDim.x + (int)gridDim.y;",
        "y[0] = (int)kf_gid.x + (int)kf_lid.y + (int)kf_grp.z + (int)kf_lsz.x + (int)kf_ngrp.y;",
    };
    for (int l = 0; l < KF_LANG_COUNT; l++) {
        char *s = kernel((kf_lang_id)l, &k);
        expect_contains(s, want[l], kf_lang_name(LG(l)));
        if (l == KF_LANG_METAL) {
            expect_contains(s, "uint3 kf_gid [[thread_position_in_grid]]", "metal");
            expect_contains(s, "uint3 kf_lid [[thread_position_in_threadgroup]]", "metal");
            expect_contains(s, "uint3 kf_grp [[threadgroup_position_in_grid]]", "metal");
            expect_contains(s, "uint3 kf_lsz [[threads_per_threadgroup]]", "metal");
            expect_contains(s, "uint3 kf_ngrp [[threadgroups_per_grid]]", "metal");
            cr_expect_null(strstr(s, "kf_sg_"), "no sub-group parameters without sub-group tokens:\n%s", s);
            expect_contains(s, "[[max_total_threads_per_threadgroup(64)]] kernel void ids(", "metal");
        }
        free(s);
    }
    /* Metal lists only the ids the body reads */
    k.body = "    y[0] = $lid(0);\n";
    char *s = kernel(KF_LANG_METAL, &k);
    cr_expect_null(strstr(s, "kf_gid"), "%s", s);
    expect_contains(s, "kf_lid [[thread_position_in_threadgroup]]) {", "metal");
    free(s);
}

Test(render, subgroup_ids) {
    kf_gkernel k = {.name = "sg", .wg = {64, 1, 1}, .uses_subgroups = 1};
    kf_gkernel_param(&k, "y", "int", KF_GP_OUT);
    k.body = "y[0] = $sg_size + $sg_lid * $sg_id;";
    static const char *const want[] = {
        "y[0] = (int)get_sub_group_size() + (int)get_sub_group_local_id() * (int)get_sub_group_id();",
        "y[0] = 32 + ((int)threadIdx.x & 31) * ((int)threadIdx.x >> 5);",
        "y[0] = (int)kf_sg_size + (int)kf_sg_lid * (int)kf_sg_id;",
    };
    for (int l = 0; l < KF_LANG_COUNT; l++) {
        char *s = kernel((kf_lang_id)l, &k);
        expect_contains(s, want[l], kf_lang_name(LG(l)));
        free(s);
    }
    char *s = kernel(KF_LANG_METAL, &k);
    expect_contains(s, "uint kf_sg_size [[threads_per_simdgroup]]", "metal");
    expect_contains(s, "uint kf_sg_lid [[thread_index_in_simdgroup]]", "metal");
    expect_contains(s, "uint kf_sg_id [[simdgroup_index_in_threadgroup]]", "metal");
    free(s);
    /* CUDA lanes come from the linear thread index unless the group is known to be 1-D */
    int shapes[2][3] = {{16, 8, 1}, {0, 0, 0}};
    for (int i = 0; i < 2; i++) {
        memcpy(k.wg, shapes[i], sizeof k.wg);
        k.body = "y[0] = $sg_lid;";
        s = kernel(KF_LANG_CUDA, &k);
        expect_contains(s, "y[0] = ((int)((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x) & 31);",
                        "cuda");
        free(s);
    }
}

Test(render, signatures) {
    kf_gkernel k = {.name = "sig", .wg = {128, 2, 0}};
    kf_gkernel_param(&k, "a", "float", KF_GP_IN);
    kf_gkernel_param(&k, "b", "long", KF_GP_OUT);
    kf_gkernel_param(&k, "t", "int", KF_GP_SCRATCH);
    k.body = "    b[0] = (long)a[0] + t[0];";
    static const char *const want[] = {
        "__kernel __attribute__((reqd_work_group_size(128, 2, 1))) void sig(\n"
        "    __global const float *restrict a,\n"
        "    __global long *restrict b,\n"
        "    __global int *t) {\n"
        "    b[0] = (long)a[0] + t[0];\n"
        "}\n",
        "extern \"C\" __global__ void __launch_bounds__(256) sig(\n"
        "    const float *__restrict__ a,\n"
        "    long *__restrict__ b,\n"
        "    int *t) {\n"
        "    b[0] = (long)a[0] + t[0];\n"
        "}\n",
        "[[max_total_threads_per_threadgroup(256)]] kernel void sig(\n"
        "    device const float *a [[buffer(0)]],\n"
        "    device long *b [[buffer(1)]],\n"
        "    device int *t [[buffer(2)]]) {\n"
        "    b[0] = (long)a[0] + t[0];\n"
        "}\n",
    };
    for (int l = 0; l < KF_LANG_COUNT; l++) {
        char *s = kernel((kf_lang_id)l, &k);
        cr_expect_str_eq(s, want[l], "%s", kf_lang_name(LG(l)));
        free(s);
    }
    /* unconstrained group, no parameters */
    kf_gkernel e = {.name = "empty"};
    static const char *const want_e[] = {"__kernel void empty(void) {\n}\n",
                                         "extern \"C\" __global__ void empty() {\n}\n",
                                         "kernel void empty() {\n}\n"};
    for (int l = 0; l < KF_LANG_COUNT; l++) {
        char *s = kernel((kf_lang_id)l, &e);
        cr_expect_str_eq(s, want_e[l], "%s", kf_lang_name(LG(l)));
        free(s);
    }
}

Test(render, bad_kernels) {
    kf_error err = {0};
    kf_buf o = {0};
    kf_gkernel k = {.name = "k"};
    kf_gkernel_param(&k, "x", "double", KF_GP_IN);
    cr_expect_eq(kf_render_kernel(LG(KF_LANG_CUDA), &k, &o, &err), KF_ERR_ARG);
    expect_contains(err.msg, "double", "bad ctype");
    kf_gkernel d = {.name = "k"};
    kf_gkernel_param(&d, "x", "float", KF_GP_IN);
    kf_gkernel_param(&d, "x", "float", KF_GP_OUT);
    cr_expect_eq(kf_render_kernel(LG(KF_LANG_OPENCL), &d, &o, &err), KF_ERR_ARG);
    expect_contains(err.msg, "twice", "duplicate");
    kf_gkernel n = {.name = "2k"};
    cr_expect_eq(kf_render_kernel(LG(KF_LANG_METAL), &n, &o, &err), KF_ERR_ARG);
    kf_gkernel w = {.name = "k", .wg = {-1, 0, 0}};
    cr_expect_eq(kf_render_kernel(LG(KF_LANG_METAL), &w, &o, &err), KF_ERR_ARG);
    cr_expect_eq(o.len, 0, "nothing is written on failure");
    kf_buf_free(&o);
}

typedef struct ecase {
    const char *form;
    int in_kernel, uses_sg;
    const char *msg; /* substring of the message */
    size_t offset;   /* of the offending `$` */
} ecase;

static const ecase error_cases[] = {
    {"x = $foo;", 0, 0, "`$foo` at offset 4", 4},
    {"x = $gid();", 1, 0, "takes 1 argument, got 0", 4},
    {"x = $gid(0, 1);", 1, 0, "takes 1 argument, got 2", 4},
    {"v = $vload(4, p);", 0, 0, "takes 3 arguments, got 2", 4},
    {"v = $vstore(4, v, p, i, j);", 0, 0, "takes 4 arguments, got 5", 4},
    {"x = $gid(3);", 1, 0, "axis must be 0, 1 or 2", 4},
    {"x = $gid(i);", 1, 0, "axis must be 0, 1 or 2", 4},
    {"$vec(double, 4) v;", 0, 0, "vector type", 0},
    {"$vec(float, 8) v;", 0, 0, "vector type", 0},
    {"v = $vload(3, p, i);", 0, 0, "width must be 2 or 4", 4},
    {"v = $vmake(float, 4, a, b);", 0, 0, "takes (T, n", 4},
    {"v = $vmake(float, 2, a, , b);", 0, 0, "empty argument", 4},
    {"$barrier();", 0, 0, "takes no arguments", 0},
    {"x = $gid;", 1, 0, "expects a parenthesised argument list", 4},
    {"x = $gid (0);", 1, 0, "expects a parenthesised argument list", 4},
    {"x = $gid(0;", 1, 0, "unterminated argument list", 4},
    {"x = $ + 1;", 0, 0, "write `$$` for a literal", 4},
    {"x = $Gid(0);", 1, 0, "unknown token", 4},
    /* context rules */
    {"int $fn f() { return $gid(0); }", 0, 0, "valid only in a kernel body", 21},
    {"y = $sg_lid;", 0, 0, "valid only in a kernel body", 4},
    {"$shared float t[4];", 0, 0, "top level of a kernel body", 0},
    {"if (c) { $shared float t[4]; }", 1, 0, "top level of a kernel body", 9},
    {"v = $vload(4, $shared, 0);", 1, 0, "top level of a kernel body", 14},
    {"y = $sg_sum(x);", 1, 0, "uses_subgroups is 0", 4},
    {"y = $sg_size;", 1, 0, "uses_subgroups is 0", 4},
    /* errors inside arguments point at the inner token */
    {"y = $vload(4, x, $bogus(1));", 0, 0, "`$bogus` at offset 17", 17},
};

Test(render, errors) {
    for (size_t c = 0; c < sizeof error_cases / sizeof error_cases[0]; c++) {
        const ecase *e = &error_cases[c];
        for (int l = 0; l < KF_LANG_COUNT; l++) {
            kf_error err = {0};
            kf_buf o = {0};
            kf_status st;
            if (e->in_kernel) {
                kf_gkernel k = {.name = "k", .uses_subgroups = e->uses_sg, .body = e->form};
                st = kf_render_kernel(LG(l), &k, &o, &err);
            } else {
                st = kf_render_text(LG(l), e->form, &o, &err);
            }
            cr_expect_eq(st, KF_ERR_PARSE, "%s: `%s` rendered as `%s`", kf_lang_name(LG(l)), e->form,
                         o.data ? o.data : "");
            expect_contains(err.msg, e->msg, e->form);
            char at[48];
            snprintf(at, sizeof at, "at offset %zu ", e->offset);
            expect_contains(err.msg, at, e->form);
            cr_expect_eq(err.line, 1);
            cr_expect_eq(err.col, (int)e->offset + 1, "`%s`: col %d", e->form, err.col);
            cr_expect_eq(o.len, 0, "`%s`: nothing is written on failure", e->form);
            kf_buf_free(&o);
        }
    }
    /* line and column on a later line */
    kf_error err = {0};
    kf_buf o = {0};
    cr_assert_eq(kf_render_text(LG(KF_LANG_CUDA), "a;\n  b = $nope;\n", &o, &err), KF_ERR_PARSE);
    cr_expect_eq(err.line, 2);
    cr_expect_eq(err.col, 7);
    kf_buf_free(&o);
    /* sub-group reductions are fine in helpers (no kernel context to check) */
    char *s = text(KF_LANG_METAL, "$fn float f(float x) { return $sg_sum(x); }");
    cr_expect_str_eq(s, "static inline float f(float x) { return simd_sum(x); }");
    free(s);
}

/* ---- the test kernels ------------------------------------------------------------------ */

/* c = a + 2 b - (0, 1, 2, 3) per float4 */
static void k_vadd4(kf_gkernel *k) {
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "vadd4");
    k->wg[0] = 64;
    kf_gkernel_param(k, "a", "float", KF_GP_IN);
    kf_gkernel_param(k, "b", "float", KF_GP_IN);
    kf_gkernel_param(k, "c", "float", KF_GP_OUT);
    k->body = "    int i = $gid(0) * 4;\n"
              "    $vec(float, 4) va = $vload(4, a, i);\n"
              "    $vec(float, 4) vb = $vload(4, b, i);\n"
              "    $vec(float, 4) s = va + vb * 2.0f - $vmake(float, 4, 0.0f, 1.0f, 2.0f, 3.0f);\n"
              "    $vstore(4, s, c, i);\n";
}

static const char reduce_helpers[] =
    "/* the sum of buf[0..256) into buf[0]; every thread of the group calls it */\n"
    "$fn void tree_sum($shared_ptr float *buf, int lid) {\n"
    "    for (int s = 128; s > 0; s >>= 1) {\n"
    "        if (lid < s) buf[lid] = add2(buf[lid], buf[lid + s]);\n"
    "        $barrier;\n"
    "    }\n"
    "}\n";

/* y[g] = sum of x[1024 g .. 1024 g + 1024); cnt[g] = ngroups * 2^32 + g (64-bit) */
static void k_reduce(kf_gkernel *k) {
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "reduce256");
    k->wg[0] = 256;
    kf_gkernel_param(k, "x", "float", KF_GP_IN);
    kf_gkernel_param(k, "y", "float", KF_GP_OUT);
    kf_gkernel_param(k, "cnt", "long", KF_GP_SCRATCH);
    k->body = "    $shared float buf[256];\n"
              "    int lid = $lid(0);\n"
              "    $global const float *row = x + $grp(0) * 1024;\n"
              "    float acc = 0.0f;\n"
              "    for (int k = lid; k < 1024; k += $lsz(0)) acc += row[k];\n"
              "    buf[lid] = acc;\n"
              "    $barrier;\n"
              "    tree_sum(buf, lid);\n"
              "    if (lid == 0) {\n"
              "        y[$grp(0)] = buf[0];\n"
              "        cnt[$grp(0)] = (long)$ngrp(0) * 4294967296L + $grp(0);\n"
              "    }\n";
}

/* per 32-lane sub-group: y[3w..3w+3) = sum, max, min; z[g] = x of lane ^ 5; lane[g] */
static void k_warp(kf_gkernel *k) {
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "warp");
    k->wg[0] = 128;
    k->uses_subgroups = 1;
    kf_gkernel_param(k, "x", "float", KF_GP_IN);
    kf_gkernel_param(k, "y", "float", KF_GP_OUT);
    kf_gkernel_param(k, "z", "float", KF_GP_OUT);
    kf_gkernel_param(k, "lane", "int", KF_GP_OUT);
    k->body = "    int g = $gid(0);\n"
              "    float v = x[g];\n"
              "    float s = $sg_sum(v);\n"
              "    float mx = $sg_max(v);\n"
              "    float mn = $sg_min(v);\n"
              "    float o = $sg_shfl_xor(v, 5);\n"
              "    int w = $grp(0) * ($lsz(0) / $sg_size) + $sg_id;\n"
              "    if ($sg_lid == 0) {\n"
              "        y[3 * w] = s;\n"
              "        y[3 * w + 1] = mx;\n"
              "        y[3 * w + 2] = mn;\n"
              "    }\n"
              "    z[g] = o;\n"
              "    lane[g] = $sg_lid;\n";
}

/* a 16 x 8 group: sub-groups are cut from the linear thread index */
static void k_warp2d(kf_gkernel *k) {
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "warp2d");
    k->wg[0] = 16;
    k->wg[1] = 8;
    k->uses_subgroups = 1;
    kf_gkernel_param(k, "x", "float", KF_GP_IN);
    kf_gkernel_param(k, "y", "float", KF_GP_OUT);
    kf_gkernel_param(k, "lane", "int", KF_GP_OUT);
    k->body = "    int t = $lid(1) * $lsz(0) + $lid(0);\n"
              "    int g = $grp(0) * 128 + t;\n"
              "    float s = $sg_sum(x[g]);\n"
              "    if ($sg_lid == 0) y[$grp(0) * 4 + $sg_id] = s;\n"
              "    lane[g] = $sg_lid;\n";
}

#define NMATH 20

/* every prelude helper and the C names of the CPU expression code, NMATH per input */
static void k_math(kf_gkernel *k) {
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "math");
    kf_gkernel_param(k, "x", "float", KF_GP_IN);
    kf_gkernel_param(k, "y", "float", KF_GP_OUT);
    k->body = "    int i = $gid(0);\n"
              "    float v = x[i];\n"
              "    float a = fabsf(v);\n"
              "    $global float *o = y + i * 20;\n"
              "    o[0] = kf_expf(v);\n"
              "    o[1] = kf_logf(a);\n"
              "    o[2] = kf_tanhf(v);\n"
              "    o[3] = kf_erff(v);\n"
              "    o[4] = kf_sigmoidf(v);\n"
              "    o[5] = kf_expm1f(v);\n"
              "    o[6] = kf_log1pf(a);\n"
              "    o[7] = kf_powf(a, 1.7f);\n"
              "    o[8] = kf_sqrtf(a);\n"
              "    o[9] = kf_rsqrtf(a);\n"
              "    o[10] = kf_fabsf(v);\n"
              "    o[11] = kf_fmaxf(v, 0.5f);\n"
              "    o[12] = kf_fminf(v, 0.5f);\n"
              "    o[13] = kf_clampf(v, -1.0f, 2.0f);\n"
              "    o[14] = kf_floorf(v);\n"
              "    o[15] = expf(v) + logf(a + 1.0f);\n"
              "    o[16] = sqrtf(a) + tanhf(a) + powf(a, 0.5f);\n"
              "    o[17] = fmaxf(v, 0.0f) + fminf(v, -1.0f) + floorf(v);\n"
              "    o[18] = v > 0.0f ? KF_INF : (-INFINITY);\n"
              "    o[19] = v > 0.0f ? KF_NAN : NAN;\n";
}

static double clampd(double x, double lo, double hi) {
    x = x < lo ? lo : x;
    return x > hi ? hi : x;
}

static double math_ref(int j, float vf) {
    double v = vf, a = fabs(v);
    switch (j) {
    case 0: return exp(v);
    case 1: return log(a);
    case 2: return tanh(v);
    case 3: return erf(v);
    case 4: return 1.0 / (1.0 + exp(-v));
    case 5: return expm1(v);
    case 6: return log1p(a);
    case 7: return pow(a, 1.7);
    case 8: return sqrt(a);
    case 9: return 1.0 / sqrt(a);
    case 10: return a;
    case 11: return fmax(v, 0.5);
    case 12: return fmin(v, 0.5);
    case 13: return clampd(v, -1.0, 2.0);
    case 14: return floor(v);
    case 15: return exp(v) + log((double)(fabsf(vf) + 1.0f));
    case 16: return sqrt(a) + tanh(a) + pow(a, 0.5);
    case 17: return fmax(v, 0.0) + fmin(v, -1.0) + floor(v);
    case 18: return v > 0 ? INFINITY : -INFINITY;
    default: return NAN;
    }
}

/* got vs the float64 reference: NaN for NaN, the same infinity, else relative tol (with
 * an absolute floor at the bottom of the normal range, where devices may flush); a zero
 * reference also needs the same sign */
static int close_to(float got, double ref, double tol) {
    float rf = (float)ref;
    if (isnan(rf)) return isnan(got);
    if (isinf(rf)) return got == rf;
    if (ref == 0.0 && got == 0.0f) return !signbit(ref) == !signbit(got);
    return fabs((double)got - ref) <= tol * fabs(ref) + 2e-38;
}

/* inputs: specials, a linear sweep and a log sweep of both signs */
static float *math_inputs(int n) {
    static const float sp[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, 100.0f, -100.0f, 1e-30f,
                               -1e-30f, 1e-8f, -1e-8f, 88.8f, -88.8f, 3.5f};
    float *x = malloc((size_t)n * sizeof *x);
    int ns = (int)(sizeof sp / sizeof sp[0]);
    for (int i = 0; i < n; i++) {
        if (i < ns) x[i] = sp[i];
        else if (i < n / 2) x[i] = -20.0f + 40.0f * (float)(i - ns) / (float)(n / 2 - ns);
        else {
            int k = i - n / 2;
            float m = powf(10.0f, -10.0f + 11.0f * (float)(k / 2) / (float)(n / 4));
            x[i] = k % 2 ? -m : m;
        }
    }
    return x;
}

/* the fallback forms under their own names, so they sit beside the language's builtins */
static void fallback_forms(kf_buf *o) {
    static const char *const names[] = {"kf_erff", "kf_expm1f", "kf_log1pf"};
    for (int i = 0; i < 3; i++) {
        const char *f = kf_render_fallback_form(names[i]);
        const char *at = strstr(f, names[i]);
        cr_assert_not_null(at);
        kf_buf_putn(o, f, (size_t)(at - f));
        kf_buf_printf(o, "fb_%s", names[i] + 3);
        kf_buf_puts(o, at + strlen(names[i]));
    }
}

static void k_fallbacks(kf_gkernel *k) {
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "fallbacks");
    kf_gkernel_param(k, "x", "float", KF_GP_IN);
    kf_gkernel_param(k, "y", "float", KF_GP_OUT);
    k->body = "    int i = $gid(0);\n"
              "    y[3 * i] = fb_erff(x[i]);\n"
              "    y[3 * i + 1] = fb_expm1f(x[i]);\n"
              "    y[3 * i + 2] = fb_log1pf(x[i]);\n";
}

enum { TK_VADD, TK_REDUCE, TK_WARP, TK_WARP2D, TK_MATH, TK_FALLBACKS, TK_COUNT };

static void test_kernel(int which, kf_gkernel *k) {
    switch (which) {
    case TK_VADD: k_vadd4(k); break;
    case TK_REDUCE: k_reduce(k); break;
    case TK_WARP: k_warp(k); break;
    case TK_WARP2D: k_warp2d(k); break;
    case TK_MATH: k_math(k); break;
    default: k_fallbacks(k); break;
    }
}

/* helpers the kernel needs, then the kernel */
static void render_one(kf_lang_id id, int which, kf_buf *o) {
    kf_error err = {0};
    if (which == TK_REDUCE) {
        kf_buf h = {0};
        kf_buf_puts(&h, "$fn float add2(float a, float b) { return a + b; }\n");
        kf_buf_puts(&h, reduce_helpers);
        cr_assert_eq(kf_render_text(LG(id), h.data, o, &err), KF_OK, "%s", err.msg);
        kf_buf_free(&h);
    }
    if (which == TK_FALLBACKS) {
        kf_buf h = {0};
        fallback_forms(&h);
        cr_assert_eq(kf_render_text(LG(id), h.data, o, &err), KF_OK, "%s", err.msg);
        kf_buf_free(&h);
    }
    kf_gkernel k;
    test_kernel(which, &k);
    cr_assert_eq(kf_render_kernel(LG(id), &k, o, &err), KF_OK, "%s: %s", k.name, err.msg);
}

/* prelude + the listed kernels (mask of 1 << TK_*) */
static char *render_unit(kf_lang_id id, unsigned mask) {
    kf_buf o = {0};
    kf_render_prelude(LG(id), &o);
    for (int w = 0; w < TK_COUNT; w++)
        if (mask & (1u << w)) render_one(id, w, &o);
    return kf_buf_take(&o);
}

static void dump(const char *file, const char *textv) {
    const char *dir = getenv("KFORGE_RENDER_DUMP");
    if (!dir || !*dir) return;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    kf_error err = {0};
    cr_expect_eq(kf_write_file(path, textv, strlen(textv), &err), KF_OK, "%s", err.msg);
}

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static float urand(uint32_t *s) { return (float)lcg(s) / 16777216.0f * 2.0f - 1.0f; }

/* ---- scenarios: launch the test kernels through a runner and check the numbers -------- */

/* a kernel argument: host data copied in, and back when read_back */
typedef struct obuf {
    void *host;
    size_t bytes;
    int read_back;
} obuf;

/* launch kernel `name` over global[0] x global[1] work-items in groups of local[] */
typedef void (*run_fn)(void *ctx, const char *name, obuf *b, int nb, const size_t global[2],
                       const size_t local[2]);

static void scenario_vadd_reduce(run_fn run, void *ctx) {
    enum { N = 4096, G = 8 };
    uint32_t seed = 7;
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
    for (int i = 0; i < N; i++) { a[i] = urand(&seed); b[i] = urand(&seed); c[i] = NAN; }
    obuf vb[] = {{a, N * 4, 0}, {b, N * 4, 0}, {c, N * 4, 1}};
    run(ctx, "vadd4", vb, 3, (size_t[2]){N / 4, 1}, (size_t[2]){64, 1});
    for (int i = 0; i < N; i++) {
        float want = a[i] + 2.0f * b[i] - (float)(i % 4);
        cr_expect(fabsf(c[i] - want) <= 1e-6f, "vadd4: c[%d] = %g, want %g", i, c[i], want);
    }

    float *x = malloc(G * 1024 * sizeof *x), y[G];
    int64_t cnt[G];
    for (int i = 0; i < G * 1024; i++) x[i] = urand(&seed) + (float)(i / 1024);
    for (int g = 0; g < G; g++) { y[g] = NAN; cnt[g] = -1; }
    obuf rb[] = {{x, G * 1024 * 4, 0}, {y, sizeof y, 1}, {cnt, sizeof cnt, 1}};
    run(ctx, "reduce256", rb, 3, (size_t[2]){G * 256, 1}, (size_t[2]){256, 1});
    for (int g = 0; g < G; g++) {
        double want = 0;
        for (int i = 0; i < 1024; i++) want += x[g * 1024 + i];
        cr_expect(fabs(y[g] - want) <= 1e-5 * (fabs(want) + 32), "reduce256: y[%d] = %.9g, want %.9g", g, y[g],
                  want);
        cr_expect_eq(cnt[g], ((int64_t)G << 32) + g, "cnt[%d] = %lld", g, (long long)cnt[g]);
    }
    free(a); free(b); free(c); free(x);
}

static void scenario_math(run_fn run, void *ctx, double tol) {
    enum { N = 4096 };
    float *x = math_inputs(N);
    float *y = malloc((size_t)N * NMATH * sizeof *y);
    for (int i = 0; i < N * NMATH; i++) y[i] = -12345.0f;
    obuf mb[] = {{x, N * 4, 0}, {y, (size_t)N * NMATH * 4, 1}};
    run(ctx, "math", mb, 2, (size_t[2]){N, 1}, (size_t[2]){64, 1});
    int bad = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < NMATH; j++) {
            double ref = math_ref(j, x[i]);
            float got = y[i * NMATH + j];
            if (!close_to(got, ref, tol) && bad++ < 20)
                cr_expect_fail("math[%d](%.9g) = %.9g, want %.9g", j, x[i], got, ref);
        }
    cr_expect_eq(bad, 0, "%d mismatches", bad);
    free(x); free(y);
}

/* |x| from 1e-30 to 20, log-spaced, both signs; a linear sweep; specials */
static void scenario_fallbacks(run_fn run, void *ctx) {
    enum { N = 1 << 17 };
    static const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 100.0f, -100.0f, -1.0f, -2.0f,
                               88.72f, 88.73f, 3.95f, -3.95f, 0.5f, -0.5f, 0x1.fffffep-2f};
    int ns = (int)(sizeof sp / sizeof sp[0]);
    float *x = malloc(N * sizeof *x), *y = malloc(3 * (size_t)N * sizeof *y);
    for (int i = 0; i < N; i++) {
        if (i < ns) x[i] = sp[i];
        else if (i < 3 * N / 4) {
            int k = i - ns;
            float m = (float)pow(10.0, -30.0 + 31.3 * (double)(k / 2) / (double)((3 * N / 4 - ns) / 2));
            x[i] = k % 2 ? -m : m;
        } else {
            x[i] = -6.0f + 12.0f * (float)(i - 3 * N / 4) / (float)(N / 4);
        }
    }
    obuf fb[] = {{x, N * 4, 0}, {y, 3 * (size_t)N * 4, 1}};
    run(ctx, "fallbacks", fb, 2, (size_t[2]){N, 1}, (size_t[2]){64, 1});
    int bad = 0;
    double worst[3] = {0, 0, 0};
    for (int i = 0; i < N; i++) {
        double v = x[i];
        double ref[3] = {erf(v), expm1(v), log1p(v)};
        for (int j = 0; j < 3; j++) {
            float got = y[3 * i + j];
            if (isfinite((float)ref[j]) && ref[j] != 0) {
                double r = fabs(got - ref[j]) / fabs(ref[j]);
                if (r > worst[j]) worst[j] = r;
            }
            if (!close_to(got, ref[j], 1e-6) && bad++ < 20)
                cr_expect_fail("fallback %s(%a) = %.9g, want %.9g", j == 0 ? "erf" : j == 1 ? "expm1" : "log1p",
                               x[i], got, ref[j]);
        }
    }
    cr_expect_eq(bad, 0, "%d mismatches (worst relative errors: erf %.3g, expm1 %.3g, log1p %.3g)", bad,
                 worst[0], worst[1], worst[2]);
    cr_log_info("fallback worst relative errors: erf %.3g, expm1 %.3g, log1p %.3g", worst[0], worst[1],
                worst[2]);
    free(x); free(y);
}

/* 32-lane sub-groups (CUDA warps) */
static void scenario_warp(run_fn run, void *ctx) {
    enum { G = 4, N = G * 128, W = N / 32 };
    uint32_t seed = 11;
    float x[N], y[3 * W], z[N], y2[G * 4];
    int lane[N], lane2[N];
    for (int i = 0; i < N; i++) { x[i] = urand(&seed); z[i] = NAN; lane[i] = lane2[i] = -1; }
    for (int i = 0; i < 3 * W; i++) y[i] = NAN;
    obuf wb[] = {{x, sizeof x, 0}, {y, sizeof y, 1}, {z, sizeof z, 1}, {lane, sizeof lane, 1}};
    run(ctx, "warp", wb, 4, (size_t[2]){N, 1}, (size_t[2]){128, 1});
    for (int w = 0; w < W; w++) {
        double s = 0;
        float mx = -INFINITY, mn = INFINITY;
        for (int l = 0; l < 32; l++) {
            float v = x[32 * w + l];
            s += v;
            mx = v > mx ? v : mx;
            mn = v < mn ? v : mn;
        }
        cr_expect(fabs(y[3 * w] - s) <= 1e-5, "warp %d: sum %.9g, want %.9g", w, y[3 * w], s);
        cr_expect_eq(y[3 * w + 1], mx, "warp %d: max", w);
        cr_expect_eq(y[3 * w + 2], mn, "warp %d: min", w);
    }
    for (int g = 0; g < N; g++) {
        cr_expect_eq(z[g], x[(g & ~31) | ((g & 31) ^ 5)], "shfl_xor at %d", g);
        cr_expect_eq(lane[g], g & 31, "lane at %d", g);
    }
    for (int i = 0; i < G * 4; i++) y2[i] = NAN;
    obuf w2[] = {{x, sizeof x, 0}, {y2, sizeof y2, 1}, {lane2, sizeof lane2, 1}};
    run(ctx, "warp2d", w2, 3, (size_t[2]){16 * G, 8}, (size_t[2]){16, 8});
    for (int i = 0; i < G * 4; i++) {
        double s = 0;
        for (int l = 0; l < 32; l++) s += x[32 * i + l];
        cr_expect(fabs(y2[i] - s) <= 1e-5, "warp2d %d: sum %.9g, want %.9g", i, y2[i], s);
    }
    for (int g = 0; g < N; g++) cr_expect_eq(lane2[g], g & 31, "warp2d lane at %d", g);
}

/* ---- OpenCL: build and run ------------------------------------------------------------- */

#ifdef KF_HAVE_OPENCL
typedef struct ocl {
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    cl_program prog;
} ocl;

static int ocl_open(ocl *o, char *why, size_t cap) {
    cl_uint np = 0;
    cl_platform_id plats[8];
    memset(o, 0, sizeof *o);
    if (clGetPlatformIDs(8, plats, &np) != CL_SUCCESS || np == 0) {
        snprintf(why, cap, "no OpenCL platform");
        return 0;
    }
    for (cl_uint i = 0; i < np && i < 8; i++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 1, &o->dev, &nd) != CL_SUCCESS || nd == 0) continue;
        cl_int e;
        o->ctx = clCreateContext(NULL, 1, &o->dev, NULL, NULL, &e);
        if (e != CL_SUCCESS) continue;
        o->q = clCreateCommandQueueWithProperties(o->ctx, o->dev, NULL, &e);
        if (e == CL_SUCCESS) return 1;
        clReleaseContext(o->ctx);
    }
    snprintf(why, cap, "no usable OpenCL device");
    return 0;
}

static void ocl_close(ocl *o) {
    if (o->prog) clReleaseProgram(o->prog);
    clReleaseCommandQueue(o->q);
    clReleaseContext(o->ctx);
}

/* build src; the test fails with the build log on an error or a warning */
static cl_program ocl_build(ocl *o, const char *src) {
    cl_int e;
    cl_program p = clCreateProgramWithSource(o->ctx, 1, &src, NULL, &e);
    cr_assert_eq(e, CL_SUCCESS);
    cl_int be = clBuildProgram(p, 1, &o->dev, "", NULL, NULL);
    size_t n = 0;
    clGetProgramBuildInfo(p, o->dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
    char *log = calloc(n + 1, 1);
    clGetProgramBuildInfo(p, o->dev, CL_PROGRAM_BUILD_LOG, n, log, NULL);
    cr_assert_eq(be, CL_SUCCESS, "clBuildProgram: %d\n%s\n---- source:\n%s", be, log, src);
    cr_expect_null(strstr(log, "warning"), "build warnings:\n%s", log);
    free(log);
    return p;
}

static void ocl_run(void *ctx, const char *name, obuf *b, int nb, const size_t global[2], const size_t local[2]) {
    ocl *o = ctx;
    cl_int e;
    cl_kernel k = clCreateKernel(o->prog, name, &e);
    cr_assert_eq(e, CL_SUCCESS, "clCreateKernel %s: %d", name, e);
    cl_mem m[8];
    for (int i = 0; i < nb; i++) {
        m[i] = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, b[i].bytes, b[i].host, &e);
        cr_assert_eq(e, CL_SUCCESS);
        cr_assert_eq(clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), &m[i]), CL_SUCCESS);
    }
    cl_uint dims = global[1] > 1 ? 2 : 1;
    e = clEnqueueNDRangeKernel(o->q, k, dims, NULL, global, local, 0, NULL, NULL);
    cr_assert_eq(e, CL_SUCCESS, "launch %s: %d", name, e);
    for (int i = 0; i < nb; i++)
        if (b[i].read_back)
            cr_assert_eq(clEnqueueReadBuffer(o->q, m[i], CL_TRUE, 0, b[i].bytes, b[i].host, 0, NULL, NULL),
                         CL_SUCCESS);
    for (int i = 0; i < nb; i++) clReleaseMemObject(m[i]);
    clReleaseKernel(k);
}

#define OCL_SETUP(o)                                                                          \
    char why_[128];                                                                           \
    if (!ocl_open(&(o), why_, sizeof why_)) cr_skip_test("%s", why_)
#endif

Test(render_opencl, vadd4_and_reduction) {
#ifndef KF_HAVE_OPENCL
    cr_skip_test("built without OpenCL");
#else
    ocl o;
    OCL_SETUP(o);
    char *src = render_unit(KF_LANG_OPENCL, 1u << TK_VADD | 1u << TK_REDUCE);
    dump("unit.cl", src);
    o.prog = ocl_build(&o, src);
    scenario_vadd_reduce(ocl_run, &o);
    ocl_close(&o);
    free(src);
#endif
}

Test(render_opencl, prelude_math) {
#ifndef KF_HAVE_OPENCL
    cr_skip_test("built without OpenCL");
#else
    ocl o;
    OCL_SETUP(o);
    /* the prelude alone builds, without warnings */
    char *pre = render_unit(KF_LANG_OPENCL, 0);
    kf_buf pk = {0};
    kf_buf_printf(&pk, "%s__kernel void nothing(void) {}\n", pre);
    clReleaseProgram(ocl_build(&o, pk.data));
    kf_buf_free(&pk);
    free(pre);
    char *src = render_unit(KF_LANG_OPENCL, 1u << TK_MATH);
    o.prog = ocl_build(&o, src);
    scenario_math(ocl_run, &o, 4e-6);
    ocl_close(&o);
    free(src);
#endif
}

Test(render_opencl, fallback_forms_accuracy) {
#ifndef KF_HAVE_OPENCL
    cr_skip_test("built without OpenCL");
#else
    ocl o;
    OCL_SETUP(o);
    char *src = render_unit(KF_LANG_OPENCL, 1u << TK_FALLBACKS);
    o.prog = ocl_build(&o, src);
    scenario_fallbacks(ocl_run, &o);
    ocl_close(&o);
    free(src);
#endif
}

/* sub-groups need cl_khr_subgroups + cl_khr_subgroup_shuffle (PoCL on the CPU has
 * neither); where the device has them the warp kernels must build, and with 32-lane
 * sub-groups (NVIDIA-like) they must also give the warp numbers */
Test(render_opencl, subgroup_kernels) {
#ifndef KF_HAVE_OPENCL
    cr_skip_test("built without OpenCL");
#else
    ocl o;
    OCL_SETUP(o);
    char ext[8192] = "";
    clGetDeviceInfo(o.dev, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL);
    if (!strstr(ext, "cl_khr_subgroups") || !strstr(ext, "cl_khr_subgroup_shuffle")) {
        ocl_close(&o);
        cr_skip_test("the OpenCL device has no cl_khr_subgroups + cl_khr_subgroup_shuffle");
    }
    char *src = render_unit(KF_LANG_OPENCL, 1u << TK_WARP | 1u << TK_WARP2D);
    o.prog = ocl_build(&o, src);
    cl_kernel k = clCreateKernel(o.prog, "warp", NULL);
    size_t lsz = 128, sg = 0;
    cl_int e = clGetKernelSubGroupInfo(k, o.dev, CL_KERNEL_MAX_SUB_GROUP_SIZE_FOR_NDRANGE, sizeof lsz, &lsz,
                                       sizeof sg, &sg, NULL);
    clReleaseKernel(k);
    if (e == CL_SUCCESS && sg == 32) scenario_warp(ocl_run, &o);
    else cr_log_info("sub-group size %zu: warp kernels built, not run", sg);
    ocl_close(&o);
    free(src);
#endif
}

/* ---- CUDA: nvcc, NVRTC, and a run where there is a GPU -------------------------------- */

static int find_tool(const char *name, char *path, size_t cap) {
    const char *env = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s:/usr/local/cuda/bin", env ? env : "");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(path, cap, "%s/%s", d, name);
        if (access(path, X_OK) == 0) return 1;
    }
    return 0;
}

static const unsigned cuda_mask = 1u << TK_VADD | 1u << TK_REDUCE | 1u << TK_WARP | 1u << TK_WARP2D |
                                  1u << TK_MATH | 1u << TK_FALLBACKS;

Test(render_cuda, nvcc_compiles) {
    char nvcc[512];
    if (!find_tool("nvcc", nvcc, sizeof nvcc)) cr_skip_test("nvcc is not on PATH (nor in /usr/local/cuda/bin)");
    char dir[] = "/tmp/kf-render-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char *src = render_unit(KF_LANG_CUDA, cuda_mask);
    dump("unit.cu", src);
    char cu[600], log[600], cmd[2048];
    snprintf(cu, sizeof cu, "%s/unit.cu", dir);
    snprintf(log, sizeof log, "%s/nvcc.log", dir);
    kf_error err = {0};
    cr_assert_eq(kf_write_file(cu, src, strlen(src), &err), KF_OK, "%s", err.msg);
    snprintf(cmd, sizeof cmd, "'%s' -arch=sm_90 -Werror all-warnings -c -o /dev/null '%s' > '%s' 2>&1", nvcc, cu,
             log);
    int rc = system(cmd);
    char *out = NULL;
    size_t n = 0;
    kf_read_file(log, &out, &n, &err);
    cr_expect_eq(rc, 0, "nvcc failed:\n%s", out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    free(src);
}

typedef int (*nvrtc_create_fn)(void **, const char *, const char *, int, const char *const *,
                               const char *const *);
typedef int (*nvrtc_compile_fn)(void *, int, const char *const *);
typedef int (*nvrtc_size_fn)(void *, size_t *);
typedef int (*nvrtc_get_fn)(void *, char *);
typedef int (*nvrtc_destroy_fn)(void **);

typedef struct nvrtc {
    void *lib;
    nvrtc_create_fn create;
    nvrtc_compile_fn compile;
    nvrtc_size_fn log_size, cubin_size;
    nvrtc_get_fn log, cubin;
    nvrtc_destroy_fn destroy;
} nvrtc;

static int nvrtc_open(nvrtc *r) {
    static const char *const libs[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                                       "/usr/local/cuda/lib64/libnvrtc.so"};
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < sizeof libs / sizeof libs[0] && !r->lib; i++) r->lib = dlopen(libs[i], RTLD_NOW);
    if (!r->lib) return 0;
    *(void **)&r->create = dlsym(r->lib, "nvrtcCreateProgram");
    *(void **)&r->compile = dlsym(r->lib, "nvrtcCompileProgram");
    *(void **)&r->log_size = dlsym(r->lib, "nvrtcGetProgramLogSize");
    *(void **)&r->log = dlsym(r->lib, "nvrtcGetProgramLog");
    *(void **)&r->cubin_size = dlsym(r->lib, "nvrtcGetCUBINSize");
    *(void **)&r->cubin = dlsym(r->lib, "nvrtcGetCUBIN");
    *(void **)&r->destroy = dlsym(r->lib, "nvrtcDestroyProgram");
    return r->create && r->compile && r->log_size && r->log && r->cubin_size && r->cubin && r->destroy;
}

/* compile src for sm_<arch>: the cubin (malloc'd), or the test fails with the log */
static char *nvrtc_build(nvrtc *r, const char *src, int arch, size_t *len) {
    void *prog = NULL;
    cr_assert_eq(r->create(&prog, src, "unit.cu", 0, NULL, NULL), 0);
    char opt[64];
    snprintf(opt, sizeof opt, "--gpu-architecture=sm_%d", arch);
    const char *opts[] = {opt};
    int rc = r->compile(prog, 1, opts);
    size_t n = 0;
    r->log_size(prog, &n);
    char *log = calloc(n + 1, 1);
    r->log(prog, log);
    cr_assert_eq(rc, 0, "NVRTC failed (%d):\n%s", rc, log);
    cr_expect_null(strstr(log, "warning"), "NVRTC warnings:\n%s", log);
    free(log);
    r->cubin_size(prog, len);
    char *bin = malloc(*len);
    r->cubin(prog, bin);
    r->destroy(&prog);
    return bin;
}

Test(render_cuda, nvrtc_compiles) {
    nvrtc r;
    if (!nvrtc_open(&r)) cr_skip_test("libnvrtc could not be loaded");
    char *src = render_unit(KF_LANG_CUDA, cuda_mask);
    size_t n = 0;
    char *bin = nvrtc_build(&r, src, 90, &n);
    cr_expect_gt(n, 0);
    free(bin);
    free(src);
}

/* the driver API, by dlopen, so the test builds without the CUDA toolkit */
typedef unsigned long long cu_ptr;
typedef struct cuda {
    void *lib;
    int (*init)(unsigned);
    int (*dev_get)(int *, int);
    int (*dev_attr)(int *, int, int);
    int (*ctx_retain)(void **, int);
    int (*ctx_set)(void *);
    int (*mod_load)(void **, const void *);
    int (*mod_fn)(void **, void *, const char *);
    int (*mod_unload)(void *);
    int (*alloc)(cu_ptr *, size_t);
    int (*mfree)(cu_ptr);
    int (*htod)(cu_ptr, const void *, size_t);
    int (*dtoh)(void *, cu_ptr, size_t);
    int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                  void **);
    int (*sync)(void);
    void *ctx, *mod;
    int dev;
} cuda;

static int cuda_open(cuda *c, char *why, size_t cap) {
    memset(c, 0, sizeof *c);
    c->lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!c->lib) {
        snprintf(why, cap, "no CUDA driver (libcuda.so.1)");
        return 0;
    }
    *(void **)&c->init = dlsym(c->lib, "cuInit");
    *(void **)&c->dev_get = dlsym(c->lib, "cuDeviceGet");
    *(void **)&c->dev_attr = dlsym(c->lib, "cuDeviceGetAttribute");
    *(void **)&c->ctx_retain = dlsym(c->lib, "cuDevicePrimaryCtxRetain");
    *(void **)&c->ctx_set = dlsym(c->lib, "cuCtxSetCurrent");
    *(void **)&c->mod_load = dlsym(c->lib, "cuModuleLoadData");
    *(void **)&c->mod_fn = dlsym(c->lib, "cuModuleGetFunction");
    *(void **)&c->mod_unload = dlsym(c->lib, "cuModuleUnload");
    *(void **)&c->alloc = dlsym(c->lib, "cuMemAlloc_v2");
    *(void **)&c->mfree = dlsym(c->lib, "cuMemFree_v2");
    *(void **)&c->htod = dlsym(c->lib, "cuMemcpyHtoD_v2");
    *(void **)&c->dtoh = dlsym(c->lib, "cuMemcpyDtoH_v2");
    *(void **)&c->launch = dlsym(c->lib, "cuLaunchKernel");
    *(void **)&c->sync = dlsym(c->lib, "cuCtxSynchronize");
    if (!c->init || !c->dev_get || !c->dev_attr || !c->ctx_retain || !c->ctx_set || !c->mod_load ||
        !c->mod_fn || !c->mod_unload || !c->alloc || !c->mfree || !c->htod || !c->dtoh || !c->launch ||
        !c->sync) {
        snprintf(why, cap, "libcuda.so.1 lacks driver API symbols");
        return 0;
    }
    if (c->init(0) != 0 || c->dev_get(&c->dev, 0) != 0) {
        snprintf(why, cap, "no CUDA device");
        return 0;
    }
    if (c->ctx_retain(&c->ctx, c->dev) != 0 || c->ctx_set(c->ctx) != 0) {
        snprintf(why, cap, "no CUDA context");
        return 0;
    }
    return 1;
}

static void cuda_run(void *ctx, const char *name, obuf *b, int nb, const size_t global[2], const size_t local[2]) {
    cuda *c = ctx;
    void *f = NULL;
    cr_assert_eq(c->mod_fn(&f, c->mod, name), 0, "cuModuleGetFunction %s", name);
    cu_ptr d[8];
    void *args[8];
    for (int i = 0; i < nb; i++) {
        cr_assert_eq(c->alloc(&d[i], b[i].bytes), 0);
        cr_assert_eq(c->htod(d[i], b[i].host, b[i].bytes), 0);
        args[i] = &d[i];
    }
    int rc = c->launch(f, (unsigned)(global[0] / local[0]), (unsigned)(global[1] / local[1]), 1,
                       (unsigned)local[0], (unsigned)local[1], 1, 0, NULL, args, NULL);
    cr_assert_eq(rc, 0, "cuLaunchKernel %s: %d", name, rc);
    cr_assert_eq(c->sync(), 0, "%s failed on the device", name);
    for (int i = 0; i < nb; i++) {
        if (b[i].read_back) cr_assert_eq(c->dtoh(b[i].host, d[i], b[i].bytes), 0);
        c->mfree(d[i]);
    }
}

Test(render_cuda, runs_on_gpu) {
    nvrtc r;
    cuda c;
    char why[128];
    if (!nvrtc_open(&r)) cr_skip_test("libnvrtc could not be loaded");
    if (!cuda_open(&c, why, sizeof why)) cr_skip_test("%s", why);
    int major = 0, minor = 0;
    c.dev_attr(&major, 75, c.dev); /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
    c.dev_attr(&minor, 76, c.dev);
    char *src = render_unit(KF_LANG_CUDA, cuda_mask);
    size_t n = 0;
    char *bin = nvrtc_build(&r, src, major * 10 + minor, &n);
    cr_assert_eq(c.mod_load(&c.mod, bin), 0, "cuModuleLoadData");
    scenario_vadd_reduce(cuda_run, &c);
    scenario_warp(cuda_run, &c);
    scenario_math(cuda_run, &c, 4e-6);
    scenario_fallbacks(cuda_run, &c);
    c.mod_unload(c.mod);
    free(bin);
    free(src);
}

/* ---- Metal: goldens and a stand-in syntax check ----------------------------------------- */

static void check_golden(const char *name, const char *got) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/golden/%s.metal", KF_SOURCE_DIR, name);
    kf_error err = {0};
    const char *upd = getenv("KFORGE_UPDATE_GOLDEN");
    if (upd && strcmp(upd, "1") == 0) {
        cr_assert_eq(kf_write_file(path, got, strlen(got), &err), KF_OK, "%s", err.msg);
        cr_log_warn("rewrote %s", path);
        return;
    }
    char *want = NULL;
    size_t n = 0;
    cr_assert_eq(kf_read_file(path, &want, &n, &err), KF_OK,
                 "%s (run with KFORGE_UPDATE_GOLDEN=1 to write the goldens)", err.msg);
    if (strcmp(want, got) != 0) {
        /* name the first differing line */
        int line = 1;
        size_t i = 0;
        while (want[i] && want[i] == got[i]) line += want[i++] == '\n';
        size_t ls = i;
        while (ls > 0 && want[ls - 1] != '\n') ls--;
        cr_expect_fail("%s differs from the golden at line %d:\n  golden: %.120s\n  output: %.120s\n(rerun "
                       "with KFORGE_UPDATE_GOLDEN=1 after reviewing the change)",
                       path, line, want + ls, got + ls);
    }
    free(want);
}

Test(render_metal, goldens) {
    static const struct { int which; const char *name; } g[] = {
        {TK_VADD, "vadd4"}, {TK_REDUCE, "reduce256"}, {TK_WARP, "warp"}, {TK_WARP2D, "warp2d"}, {TK_MATH, "math"},
    };
    char *pre = render_unit(KF_LANG_METAL, 0);
    check_golden("prelude", pre);
    free(pre);
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        kf_buf o = {0};
        render_one(KF_LANG_METAL, g[i].which, &o);
        check_golden(g[i].name, o.data);
        kf_buf_free(&o);
    }
}

/* The stand-in: C++ for OpenCL has address-space-qualified pointers, overloading on them,
 * namespaces and [[attributes]] (ignored), which is most of what MSL adds to C. The stub
 * declares the Metal names the prelude and the kernels use. Vector constructors float4(..)
 * are rewritten as casts, the one spelling C++ for OpenCL lacks. */
static const char metal_stub[] =
    "#define device __global\n"
    "#define threadgroup __local\n"
    "#define kernel __kernel\n"
    "namespace metal {\n"
    "namespace precise {\n"
    "inline float exp(float x) { return ::exp(x); }\n"
    "inline float log(float x) { return ::log(x); }\n"
    "inline float tanh(float x) { return ::tanh(x); }\n"
    "inline float pow(float x, float y) { return ::pow(x, y); }\n"
    "inline float sqrt(float x) { return ::sqrt(x); }\n"
    "}\n"
    "enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2 };\n"
    "void threadgroup_barrier(mem_flags f);\n"
    "float simd_sum(float x); int simd_sum(int x);\n"
    "float simd_max(float x); int simd_max(int x);\n"
    "float simd_min(float x); int simd_min(int x);\n"
    "float simd_shuffle_xor(float x, ushort m); int simd_shuffle_xor(int x, ushort m);\n"
    "}\n";

static char *vector_ctors_as_casts(const char *s) {
    static const char *const types[] = {"float2(", "float4(", "int2(", "int4("};
    kf_buf o = {0};
    for (size_t i = 0; s[i];) {
        int hit = -1;
        if (i == 0 || !(isalnum((unsigned char)s[i - 1]) || s[i - 1] == '_'))
            for (int t = 0; t < 4; t++)
                if (strncmp(s + i, types[t], strlen(types[t])) == 0) hit = t;
        if (hit >= 0) {
            size_t n = strlen(types[hit]) - 1;
            kf_buf_puts(&o, "(");
            kf_buf_putn(&o, s + i, n);
            kf_buf_puts(&o, ")(");
            i += n + 1;
        } else {
            kf_buf_putn(&o, s + i, 1);
            i++;
        }
    }
    return kf_buf_take(&o);
}

Test(render_metal, stand_in_syntax_check) {
    char clang[512];
    const char *cands[] = {"clang-15", "clang-16", "clang-17", "clang-18", "clang-14", "clang"};
    int found = 0;
    for (size_t i = 0; i < sizeof cands / sizeof cands[0] && !found; i++) found = find_tool(cands[i], clang, sizeof clang);
    if (!found) cr_skip_test("no clang for the C++ for OpenCL stand-in check");
    char dir[] = "/tmp/kf-render-metal-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[600], src[600], log[600], cmd[3072];
    kf_error err = {0};
    snprintf(path, sizeof path, "%s/metal_stdlib", dir);
    cr_assert_eq(kf_write_file(path, metal_stub, strlen(metal_stub), &err), KF_OK);
    /* is this clang able to do it at all? */
    snprintf(cmd, sizeof cmd, "echo 'kernel void k(void) {}' | '%s' -x clcpp -cl-std=clc++2021 -fsyntax-only - >/dev/null 2>&1",
             clang);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
        cr_skip_test("%s has no C++ for OpenCL", clang);
    }
    char *unit = render_unit(KF_LANG_METAL, cuda_mask);
    dump("unit.metal", unit);
    char *cast = vector_ctors_as_casts(unit);
    snprintf(src, sizeof src, "%s/unit.metal", dir);
    snprintf(log, sizeof log, "%s/clang.log", dir);
    cr_assert_eq(kf_write_file(src, cast, strlen(cast), &err), KF_OK);
    snprintf(cmd, sizeof cmd,
             "'%s' -x clcpp -cl-std=clc++2021 -Xclang "
             "-cl-ext=-__opencl_c_generic_address_space,-__opencl_c_pipes,-__opencl_c_device_enqueue "
             "-Xclang -finclude-default-header -Wno-unknown-attributes -Werror -I'%s' -fsyntax-only '%s' > '%s' 2>&1",
             clang, dir, src, log);
    int rc = system(cmd);
    char *out = NULL;
    size_t n = 0;
    kf_read_file(log, &out, &n, &err);
    cr_expect_eq(rc, 0, "stand-in check failed:\n%s", out ? out : "");
    free(out);
    /* and it does catch a pointer without an address space */
    char *broken = strdup(cast);
    char *at = strstr(broken, "device const float *x [[buffer(0)]]");
    cr_assert_not_null(at);
    memcpy(at, "      ", 6);
    cr_assert_eq(kf_write_file(src, broken, strlen(broken), &err), KF_OK);
    cr_expect_neq(system(cmd), 0, "the stand-in accepted a kernel pointer without an address space");
    free(broken);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    free(cast);
    free(unit);
}
