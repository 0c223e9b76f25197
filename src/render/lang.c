/*
 * The three language tables (OpenCL C, CUDA C, Metal Shading Language) and the math
 * prelude each language's kernels start with.
 *
 * A table is data only: one expansion template per token (see lang.h for the template
 * syntax), the kernel parameters Metal's id tokens read, and the builtins the kf_* math
 * helpers map to. Where a language lacks a builtin (Metal has no erf, expm1 or log1p) the
 * prelude defines the helper from a kernel-form fallback kept here, rendered for that
 * language, so the fallback is one text that any language can run: the tests check its
 * accuracy on OpenCL (PoCL), the only language that runs on every build machine.
 *
 * The prelude keeps the CPU prelude's names and meanings, plus the C names (expf, sqrtf,
 * fabsf, logf, ..., INFINITY, NAN) that the CPU templates' expression code uses, so that
 * code works unchanged in a GPU body. It never uses fast-math builtins: OpenCL and CUDA
 * builtins are the accurate ones unless the compiler is told otherwise; Metal's are fast
 * by default, so the prelude names metal::precise:: explicitly (the body's own divisions
 * still need fast math off in the Metal compile options).
 */
#include "render/lang.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

const kf_tokdef kf_tokdefs[KF_TOK_COUNT] = {
    [KF_TOK_GID] = {"gid", 1, KF_TF_KERNEL | KF_TF_AXIS},
    [KF_TOK_LID] = {"lid", 1, KF_TF_KERNEL | KF_TF_AXIS},
    [KF_TOK_GRP] = {"grp", 1, KF_TF_KERNEL | KF_TF_AXIS},
    [KF_TOK_LSZ] = {"lsz", 1, KF_TF_KERNEL | KF_TF_AXIS},
    [KF_TOK_NGRP] = {"ngrp", 1, KF_TF_KERNEL | KF_TF_AXIS},
    [KF_TOK_BARRIER] = {"barrier", 0, 0},
    [KF_TOK_SHARED] = {"shared", 0, KF_TF_KERNEL | KF_TF_TOP},
    [KF_TOK_SHARED_PTR] = {"shared_ptr", 0, 0},
    [KF_TOK_GLOBAL] = {"global", 0, 0},
    [KF_TOK_RESTRICT] = {"restrict", 0, 0},
    [KF_TOK_FN] = {"fn", 0, 0},
    [KF_TOK_SG_SIZE] = {"sg_size", 0, KF_TF_KERNEL | KF_TF_SG},
    [KF_TOK_SG_LID] = {"sg_lid", 0, KF_TF_KERNEL | KF_TF_SG},
    [KF_TOK_SG_ID] = {"sg_id", 0, KF_TF_KERNEL | KF_TF_SG},
    [KF_TOK_SG_SUM] = {"sg_sum", 1, KF_TF_SG},
    [KF_TOK_SG_MAX] = {"sg_max", 1, KF_TF_SG},
    [KF_TOK_SG_MIN] = {"sg_min", 1, KF_TF_SG},
    [KF_TOK_SG_SHFL_XOR] = {"sg_shfl_xor", 2, KF_TF_SG},
    [KF_TOK_VEC] = {"vec", 2, KF_TF_VTYPE},
    [KF_TOK_VLOAD] = {"vload", 3, KF_TF_VWIDTH},
    [KF_TOK_VSTORE] = {"vstore", 4, KF_TF_VWIDTH},
    [KF_TOK_VMAKE] = {"vmake", 2, KF_TF_VTYPE | KF_TF_VMAKE},
};

static const kf_lang lang_opencl = {
    .id = KF_LANG_OPENCL,
    .name = "opencl",
    .tok = {
        [KF_TOK_GID] = "(int)get_global_id(@d)",
        [KF_TOK_LID] = "(int)get_local_id(@d)",
        [KF_TOK_GRP] = "(int)get_group_id(@d)",
        [KF_TOK_LSZ] = "(int)get_local_size(@d)",
        [KF_TOK_NGRP] = "(int)get_num_groups(@d)",
        [KF_TOK_BARRIER] = "barrier(CLK_LOCAL_MEM_FENCE)",
        [KF_TOK_SHARED] = "__local",
        [KF_TOK_SHARED_PTR] = "__local",
        [KF_TOK_GLOBAL] = "__global",
        [KF_TOK_RESTRICT] = "restrict",
        [KF_TOK_FN] = "static inline",
        [KF_TOK_SG_SIZE] = "(int)get_sub_group_size()",
        [KF_TOK_SG_LID] = "(int)get_sub_group_local_id()",
        [KF_TOK_SG_ID] = "(int)get_sub_group_id()",
        [KF_TOK_SG_SUM] = "sub_group_reduce_add(@0)",
        [KF_TOK_SG_MAX] = "sub_group_reduce_max(@0)",
        [KF_TOK_SG_MIN] = "sub_group_reduce_min(@0)",
        [KF_TOK_SG_SHFL_XOR] = "sub_group_shuffle_xor(@0, (uint)@(1))",
        [KF_TOK_VEC] = "@0@1",
        [KF_TOK_VLOAD] = "vload@0(0, @(1) + @(2))",
        [KF_TOK_VSTORE] = "vstore@0(@1, 0, @(2) + @(3))",
        [KF_TOK_VMAKE] = "((@0@1)(@*2))",
    },
    .math = {"exp", "log", "tanh", "erf", "expm1", "log1p", "pow", "sqrt", "fabs", "fmax",
             "fmin", "floor"},
    .c_names = 1,
    .shfl_ext = 1,
};

static const kf_lang lang_cuda = {
    .id = KF_LANG_CUDA,
    .name = "cuda",
    .tok = {
        [KF_TOK_GID] = "(int)(blockIdx.@a * blockDim.@a + threadIdx.@a)",
        [KF_TOK_LID] = "(int)threadIdx.@a",
        [KF_TOK_GRP] = "(int)blockIdx.@a",
        [KF_TOK_LSZ] = "(int)blockDim.@a",
        [KF_TOK_NGRP] = "(int)gridDim.@a",
        [KF_TOK_BARRIER] = "__syncthreads()",
        [KF_TOK_SHARED] = "__shared__",
        [KF_TOK_SHARED_PTR] = "",
        [KF_TOK_GLOBAL] = "",
        [KF_TOK_RESTRICT] = "__restrict__",
        [KF_TOK_FN] = "__device__ __forceinline__",
        /* warps are 32 lanes cut from the linear thread index on every NVIDIA GPU */
        [KF_TOK_SG_SIZE] = "32",
        [KF_TOK_SG_LID] = "(@L & 31)",
        [KF_TOK_SG_ID] = "(@L >> 5)",
        [KF_TOK_SG_SUM] = "kf_warp_sum(@0)",
        [KF_TOK_SG_MAX] = "kf_warp_max(@0)",
        [KF_TOK_SG_MIN] = "kf_warp_min(@0)",
        [KF_TOK_SG_SHFL_XOR] = "__shfl_xor_sync(0xffffffffu, @0, @1)",
        [KF_TOK_VEC] = "@0@1",
        [KF_TOK_VLOAD] = "kf_vload@0(@(1) + @(2))",
        [KF_TOK_VSTORE] = "kf_vstore@0(@(2) + @(3), @1)",
        [KF_TOK_VMAKE] = "make_@0@1(@*2)",
    },
    .math = {"expf", "logf", "tanhf", "erff", "expm1f", "log1pf", "powf", "sqrtf", "fabsf",
             "fmaxf", "fminf", "floorf"},
    .c_names = 0,
    .min_groups = 1,
    .mma = 1,
};

static const kf_lang lang_metal = {
    .id = KF_LANG_METAL,
    .name = "metal",
    .tok = {
        [KF_TOK_GID] = "(int)kf_gid.@a",
        [KF_TOK_LID] = "(int)kf_lid.@a",
        [KF_TOK_GRP] = "(int)kf_grp.@a",
        [KF_TOK_LSZ] = "(int)kf_lsz.@a",
        [KF_TOK_NGRP] = "(int)kf_ngrp.@a",
        [KF_TOK_BARRIER] = "threadgroup_barrier(mem_flags::mem_threadgroup)",
        [KF_TOK_SHARED] = "threadgroup",
        [KF_TOK_SHARED_PTR] = "threadgroup",
        [KF_TOK_GLOBAL] = "device",
        [KF_TOK_RESTRICT] = "",
        [KF_TOK_FN] = "static inline",
        [KF_TOK_SG_SIZE] = "(int)kf_sg_size",
        [KF_TOK_SG_LID] = "(int)kf_sg_lid",
        [KF_TOK_SG_ID] = "(int)kf_sg_id",
        [KF_TOK_SG_SUM] = "simd_sum(@0)",
        [KF_TOK_SG_MAX] = "simd_max(@0)",
        [KF_TOK_SG_MIN] = "simd_min(@0)",
        [KF_TOK_SG_SHFL_XOR] = "simd_shuffle_xor(@0, (ushort)@(1))",
        [KF_TOK_VEC] = "@0@1",
        [KF_TOK_VLOAD] = "kf_vload@0(@(1) + @(2))",
        [KF_TOK_VSTORE] = "kf_vstore@0(@(2) + @(3), @1)",
        [KF_TOK_VMAKE] = "@0@1(@*2)",
    },
    /* The five uint3 positions share one vector type, as Metal requires of them. */
    .id_param = {
        [KF_TOK_GID] = "uint3 kf_gid [[thread_position_in_grid]]",
        [KF_TOK_LID] = "uint3 kf_lid [[thread_position_in_threadgroup]]",
        [KF_TOK_GRP] = "uint3 kf_grp [[threadgroup_position_in_grid]]",
        [KF_TOK_LSZ] = "uint3 kf_lsz [[threads_per_threadgroup]]",
        [KF_TOK_NGRP] = "uint3 kf_ngrp [[threadgroups_per_grid]]",
        [KF_TOK_SG_SIZE] = "uint kf_sg_size [[threads_per_simdgroup]]",
        [KF_TOK_SG_LID] = "uint kf_sg_lid [[thread_index_in_simdgroup]]",
        [KF_TOK_SG_ID] = "uint kf_sg_id [[simdgroup_index_in_threadgroup]]",
    },
    .math = {"precise::exp", "precise::log", "precise::tanh", NULL, NULL, NULL, "precise::pow",
             "precise::sqrt", "fabs", "fmax", "fmin", "floor"},
    .c_names = 1,
};

static const kf_lang *const langs[KF_LANG_COUNT] = {&lang_opencl, &lang_cuda, &lang_metal};

const kf_lang *kf_lang_get(kf_lang_id id) {
    assert(id >= 0 && id < KF_LANG_COUNT);
    return langs[id];
}

const kf_lang *kf_lang_by_name(const char *name) {
    for (int i = 0; name && i < KF_LANG_COUNT; i++)
        if (strcmp(langs[i]->name, name) == 0) return langs[i];
    return NULL;
}

const char *kf_lang_name(const kf_lang *L) { return L->name; }

int kf_lang_has_subgroups(const kf_lang *L) { return L->tok[KF_TOK_SG_SUM] != NULL; }

int kf_lang_has_min_groups(const kf_lang *L) { return L->min_groups; }

int kf_lang_shuffle_needs_ext(const kf_lang *L) { return L->shfl_ext; }

int kf_lang_has_mma(const kf_lang *L) { return L->mma; }

/* ---- kernel-form fallbacks for builtins a language lacks ----------------------------- */

/* erf. |x| < 0.5: the odd Taylor series 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)),
 * n <= 6 (the first dropped term is < 1e-9 of the result), so small arguments keep their
 * relative accuracy (and -0 its sign). Otherwise 1 - erfc|x| with erfc t = 2^-(t H(t)), the
 * degree-7 H of the CPU prelude's kf_erff (fitted on [0, 3.95]; erf rounds to 1 beyond).
 * Relative error <= 2e-7 everywhere (tests/test_render.c sweeps it against libm erf);
 * NaN propagates through the second branch. */
static const char erf_form[] =
    "$fn float kf_erff(float x) {\n"
    "    float t = kf_fabsf(x);\n"
    "    if (t < 0.5f) {\n"
    "        float s = x * x;\n"
    "        float p = 0.00012055333f;\n"
    "        p = p * s - 0.000854832702f;\n"
    "        p = p * s + 0.00522397763f;\n"
    "        p = p * s - 0.0268661706f;\n"
    "        p = p * s + 0.112837917f;\n"
    "        p = p * s - 0.376126389f;\n"
    "        p = p * s + 1.12837917f;\n"
    "        return x * p;\n"
    "    }\n"
    "    float h = 4.53585926e-05f;\n"
    "    h = h * t - 0.000445507641f;\n"
    "    h = h * t + 0.00148944173f;\n"
    "    h = h * t + 0.000774629472f;\n"
    "    h = h * t - 0.0282536801f;\n"
    "    h = h * t + 0.148481622f;\n"
    "    h = h * t + 0.918416381f;\n"
    "    h = h * t + 1.62790859f;\n"
    "    float y = 1.0f - kf_expf(-(t * h) * 0.693147181f);\n"
    "    y = t >= 3.95f ? 1.0f : y;\n"
    "    return x < 0.0f ? -y : y;\n"
    "}\n";

/* e^x - 1 by Kahan's identity (u - 1) x / log u with u = e^x rounded: u - 1 is exact and
 * log u is the exact logarithm of the u actually used, so the quotient is accurate even
 * where u - 1 cancels. x / log u goes first so that u near FLT_MAX cannot overflow the
 * product. u == 1 (tiny x), u == 0 (x -> -inf) and u == inf are the limits. */
static const char expm1_form[] =
    "$fn float kf_expm1f(float x) {\n"
    "    float u = kf_expf(x);\n"
    "    if (u == 1.0f) return x;\n"
    "    float um1 = u - 1.0f;\n"
    "    if (um1 == -1.0f) return -1.0f;\n"
    "    if (u == KF_INF) return u;\n"
    "    return um1 * (x / kf_logf(u));\n"
    "}\n";

/* log(1 + x) by the same idea: log u x / (u - 1) with u = 1 + x rounded corrects for the
 * rounding of u. u == 1 (tiny x) and u == inf are the limits; x = -1 gives -inf and
 * x < -1 NaN through log. */
static const char log1p_form[] =
    "$fn float kf_log1pf(float x) {\n"
    "    float u = 1.0f + x;\n"
    "    if (u == 1.0f) return x;\n"
    "    if (u == KF_INF) return u;\n"
    "    return kf_logf(u) * (x / (u - 1.0f));\n"
    "}\n";

const char *kf_render_fallback_form(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "kf_erff") == 0) return erf_form;
    if (strcmp(name, "kf_expm1f") == 0) return expm1_form;
    if (strcmp(name, "kf_log1pf") == 0) return log1p_form;
    return NULL;
}

/* ---- prelude ------------------------------------------------------------------------ */

static const char opencl_head[] =
    "/* kforge OpenCL C prelude */\n"
    /* sub-group builtins are declared only where the device has them; the guards keep the
     * pragmas away from devices (PoCL on the CPU) that would warn about them */
    "#if defined(cl_khr_subgroups)\n"
    "#pragma OPENCL EXTENSION cl_khr_subgroups : enable\n"
    "#endif\n"
    "#if defined(cl_khr_subgroup_shuffle)\n"
    "#pragma OPENCL EXTENSION cl_khr_subgroup_shuffle : enable\n"
    "#endif\n"
    "#define KF_INF INFINITY\n"
    "#define KF_NAN NAN\n"
    "#define KF_UNORD(a, b) isunordered((a), (b))\n";

/* NVRTC has no math.h: the constants come from their bit patterns. Under nvcc math.h
 * already defines INFINITY and NAN. */
static const char cuda_head[] =
    "/* kforge CUDA C prelude (nvcc or NVRTC; no headers needed) */\n"
    "#define KF_INF __int_as_float(0x7f800000)\n"
    "#define KF_NAN __int_as_float(0x7fc00000)\n"
    "#define KF_UNORD(a, b) ((a) != (a) || (b) != (b))\n"
    /* OpenCL's and Metal's names of the element types the generator writes in kernels' and
     * helpers' parameters (a bool mask's bytes, f16/bf16 bits); a repeated typedef of the
     * same type is legal C++ where the host's headers have one (glibc's ushort) */
    "typedef unsigned char uchar;\n"
    "typedef unsigned short ushort;\n"
    "#ifndef INFINITY\n"
    "#define INFINITY KF_INF\n"
    "#endif\n"
    "#ifndef NAN\n"
    "#define NAN KF_NAN\n"
    "#endif\n";

static const char metal_head[] =
    "/* kforge Metal Shading Language prelude */\n"
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "#define KF_INF INFINITY\n"
    "#define KF_NAN NAN\n"
    "#define KF_UNORD(a, b) (isnan(a) || isnan(b))\n";

/* CUDA's vector types come without arithmetic: the operators the form promises */
static void cuda_vector_ops(kf_buf *o) {
    static const char *const types[] = {"float", "int"};
    static const int widths[] = {2, 4};
    static const char comp[] = "xyzw";
    static const char ops[] = "+-*/";
    const char *q = "__device__ __forceinline__";
    for (int ti = 0; ti < 2; ti++)
        for (int wi = 0; wi < 2; wi++) {
            const char *T = types[ti];
            int n = widths[wi];
            char V[16];
            snprintf(V, sizeof V, "%s%d", T, n);
            for (int oi = 0; oi < 4; oi++) {
                char op = ops[oi];
                /* vector op vector, vector op scalar, scalar op vector */
                for (int form = 0; form < 3; form++) {
                    kf_buf_printf(o, "%s %s operator%c(%s a, %s b) { return make_%s(", q, V, op,
                                  form == 2 ? T : V, form == 1 ? T : V, V);
                    for (int c = 0; c < n; c++) {
                        char a[4] = "a", b[4] = "b";
                        if (form != 2) snprintf(a, sizeof a, "a.%c", comp[c]);
                        if (form != 1) snprintf(b, sizeof b, "b.%c", comp[c]);
                        kf_buf_printf(o, "%s%s %c %s", c ? ", " : "", a, op, b);
                    }
                    kf_buf_puts(o, "); }\n");
                }
                kf_buf_printf(o, "%s %s &operator%c=(%s &a, %s b) { a = a %c b; return a; }\n", q, V,
                              op, V, V, op);
                kf_buf_printf(o, "%s %s &operator%c=(%s &a, %s b) { a = a %c b; return a; }\n", q, V,
                              op, V, T, op);
            }
            kf_buf_printf(o, "%s %s operator-(%s a) { return make_%s(", q, V, V, V);
            for (int c = 0; c < n; c++) kf_buf_printf(o, "%s-a.%c", c ? ", " : "", comp[c]);
            kf_buf_puts(o, "); }\n");
        }
}

/* vload/vstore helpers for the languages that spell them as pointer casts: C++
 * overloading picks the element type (and, in Metal, the address space) from the pointer,
 * which a token renderer without types cannot. */
static void vector_loads(const kf_lang *L, kf_buf *o) {
    static const char *const types[] = {"float", "int"};
    static const int widths[] = {2, 4};
    static const char *const metal_spaces[] = {"device", "threadgroup"};
    int nspaces = L->id == KF_LANG_METAL ? 2 : 1;
    const char *q = L->tok[KF_TOK_FN];
    for (int ti = 0; ti < 2; ti++)
        for (int wi = 0; wi < 2; wi++)
            for (int si = 0; si < nspaces; si++) {
                const char *T = types[ti];
                int n = widths[wi];
                char sp[16] = "";
                if (L->id == KF_LANG_METAL) snprintf(sp, sizeof sp, "%s ", metal_spaces[si]);
                kf_buf_printf(o, "%s %s%d kf_vload%d(%sconst %s *p) { return *(%sconst %s%d *)p; }\n",
                              q, T, n, n, sp, T, sp, T, n);
                kf_buf_printf(o, "%s void kf_vstore%d(%s%s *p, %s%d v) { *(%s%s%d *)p = v; }\n", q,
                              n, sp, T, T, n, sp, T, n);
            }
}

/* warp reductions as butterflies: every lane ends with the result, as in OpenCL's
 * sub_group_reduce_* and Metal's simd_*; all 32 lanes must take part */
static void cuda_warp_helpers(kf_buf *o) {
    static const struct { const char *name, *T, *combine; } h[] = {
        {"kf_warp_sum", "float", "x + y"}, {"kf_warp_max", "float", "fmaxf(x, y)"},
        {"kf_warp_min", "float", "fminf(x, y)"}, {"kf_warp_sum", "int", "x + y"},
        {"kf_warp_max", "int", "max(x, y)"}, {"kf_warp_min", "int", "min(x, y)"},
    };
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        kf_buf_printf(o,
                      "__device__ __forceinline__ %s %s(%s x) {\n"
                      "    for (int m = 16; m > 0; m >>= 1) {\n"
                      "        %s y = __shfl_xor_sync(0xffffffffu, x, m);\n"
                      "        x = %s;\n"
                      "    }\n"
                      "    return x;\n"
                      "}\n",
                      h[i].T, h[i].name, h[i].T, h[i].T, h[i].combine);
}

static void fallback(const kf_lang *L, const char *name, kf_buf *out) {
    kf_error err = {0};
    kf_status st = kf_render_text(L, kf_render_fallback_form(name), out, &err);
    assert(st == KF_OK && "a prelude fallback form must render");
    (void)st;
}

void kf_render_prelude(const kf_lang *L, kf_buf *out) {
    const kf_lang_math *m = &L->math;
    const char *fn = L->tok[KF_TOK_FN];
    kf_buf_puts(out, L->id == KF_LANG_OPENCL ? opencl_head
                     : L->id == KF_LANG_CUDA ? cuda_head
                                             : metal_head);
    if (L->c_names) {
        /* the C names of the CPU templates' expressions */
        const struct { const char *cname; int nargs; const char *builtin; } cn[] = {
            {"expf", 1, m->exp},   {"logf", 1, m->log},   {"tanhf", 1, m->tanh},
            {"powf", 2, m->pow},   {"sqrtf", 1, m->sqrt}, {"fabsf", 1, m->fabs},
            {"fmaxf", 2, m->fmax}, {"fminf", 2, m->fmin}, {"floorf", 1, m->floor},
        };
        for (size_t i = 0; i < sizeof cn / sizeof cn[0]; i++) {
            if (cn[i].nargs == 1)
                kf_buf_printf(out, "#define %s(x) %s(x)\n", cn[i].cname, cn[i].builtin);
            else
                kf_buf_printf(out, "#define %s(x, y) %s(x, y)\n", cn[i].cname, cn[i].builtin);
        }
    }
    /* one-line wrappers: name, builtin */
    const struct { const char *name, *builtin; } un[] = {
        {"kf_expf", m->exp},     {"kf_logf", m->log},     {"kf_tanhf", m->tanh},
        {"kf_erff", m->erf},     {"kf_expm1f", m->expm1}, {"kf_log1pf", m->log1p},
        {"kf_sqrtf", m->sqrt},   {"kf_fabsf", m->fabs},   {"kf_floorf", m->floor},
    };
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++)
        if (un[i].builtin)
            kf_buf_printf(out, "%s float %s(float x) { return %s(x); }\n", fn, un[i].name,
                          un[i].builtin);
    kf_buf_printf(out, "%s float kf_powf(float a, float b) { return %s(a, b); }\n", fn, m->pow);
    kf_buf_printf(out, "%s float kf_fmaxf(float a, float b) { return %s(a, b); }\n", fn, m->fmax);
    kf_buf_printf(out, "%s float kf_fminf(float a, float b) { return %s(a, b); }\n", fn, m->fmin);
    /* 1/sqrt, not the native rsqrt approximations */
    kf_buf_printf(out, "%s float kf_rsqrtf(float x) { return 1.0f / %s(x); }\n", fn, m->sqrt);
    /* e^-x overflows to inf for x < -88.7 and 1/(1+inf) = 0: no NaN at either end */
    kf_buf_printf(out, "%s float kf_sigmoidf(float x) { return 1.0f / (1.0f + %s(-x)); }\n", fn,
                  m->exp);
    /* tanh(log(1 + e^x)) for x <= 20 (the caller keeps larger x away: n(n + 2) would
     * overflow past x = 44); see kf_synth_node_expr's TANH case */
    kf_buf_printf(out,
                  "%s float kf_tanh_softplusf(float x) { const float n = %s(x), t = n * (n + 2.0f); "
                  "return t / (t + 2.0f); }\n",
                  fn, m->exp);
    /* compares, not fmin/fmax: NaN stays NaN, as in the CPU prelude */
    kf_buf_printf(out,
                  "%s float kf_clampf(float x, float lo, float hi) { x = x < lo ? lo : x; "
                  "return x > hi ? hi : x; }\n",
                  fn);
    if (!m->erf) fallback(L, "kf_erff", out);
    if (!m->expm1) fallback(L, "kf_expm1f", out);
    if (!m->log1p) fallback(L, "kf_log1pf", out);
    if (L->id == KF_LANG_CUDA) {
        cuda_vector_ops(out);
        cuda_warp_helpers(out);
    }
    if (L->id != KF_LANG_OPENCL) vector_loads(L, out);
}
