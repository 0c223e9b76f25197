/*
 * The GPU kernel form and its renderer.
 *
 * The builtin generator's GPU templates are written once, in a C-style form: plain C99
 * expressions and statements (float/int/long, if/for/while, arrays) plus `$` tokens for
 * everything the languages spell differently. A per-language table (OpenCL C, CUDA C,
 * Metal Shading Language) turns the form into source text. The renderer knows no op: it
 * substitutes tokens, writes kernel signatures and the math prelude, nothing else.
 *
 * Tokens (arguments are rendered recursively and split at top-level commas; an argument
 * token needs its '(' right after its name):
 *
 *   ids       $gid(d) $lid(d) $grp(d) $lsz(d) $ngrp(d)     d = 0, 1 or 2; int-valued
 *             (global id, id within the group, group id, group size, number of groups)
 *   sync      $barrier                                      work-group barrier with a
 *                                                           local-memory fence
 *   spaces    $shared   qualifier of a work-group array declared at the top level of a
 *                       kernel body ("$shared float tile[256];")
 *             $shared_ptr qualifier of a pointer into work-group memory, e.g. a helper's
 *                       parameter ("$fn void f($shared_ptr float *tile)"); empty in CUDA
 *             $global   qualifier of a pointer into device memory ("$global float *p")
 *             $restrict restrict qualifier for pointers (empty where unsupported)
 *   helpers   $fn       qualifier of a helper function ("$fn float sq(float x) {...}")
 *   sub-group (only on devices whose kf_device_info.subgroup_size > 0)
 *             $sg_size $sg_lid $sg_id       size, lane, sub-group index within the group
 *             $sg_sum(x) $sg_max(x) $sg_min(x)   reduction across the sub-group (float or
 *                                           int); every lane gets the result
 *             $sg_shfl_xor(x, m)            value of lane (lane ^ m)
 *             Every lane of the sub-group must take part (uniform control flow). CUDA's
 *             sub-groups are warps: 32 lanes cut from the linear thread index within the
 *             block (threadIdx.x alone when wg is known to be 1-D), so a group's size must
 *             be a multiple of 32 there. NaN lanes in $sg_max/$sg_min: unspecified
 *             (fmax-like in CUDA); a template that must propagate NaN tracks it itself.
 *   vectors   $vec(T, n)                    n-wide vector type (n = 2 or 4, T float/int)
 *             $vmake(T, n, e0, .., en-1)    a vector value from n scalars
 *             $vload(n, p, i)               n elements from p + i (i a multiple of n and
 *                                           p 16-byte aligned: the template ensures both)
 *             $vstore(n, v, p, i)           store vector v to p + i, same rule
 *             The element type comes from p (float or int; in Metal a device or
 *             threadgroup pointer). Components are .x .y .z .w, and + - * / work
 *             elementwise and with a scalar of the element type, in every language (the
 *             CUDA prelude defines the operators).
 *   math      kf_expf kf_logf kf_tanhf kf_erff kf_sigmoidf kf_expm1f kf_log1pf kf_powf
 *             kf_sqrtf kf_rsqrtf kf_fabsf kf_fmaxf kf_fminf kf_clampf kf_floorf
 *             are ordinary function names: the prelude (kf_render_prelude) defines them
 *             per language with the language's accurate builtins (no fast-math variants),
 *             as do the constants KF_INF and KF_NAN (float) and KF_UNORD(a, b) (1 when
 *             either is NaN), so the expression code that
 *             the CPU templates emit works unchanged. These are the same names the CPU
 *             prelude defines. The prelude also maps the C names that expression code
 *             uses (expf logf tanhf powf sqrtf fabsf fmaxf fminf floorf, INFINITY, NAN)
 *             where a language lacks them. Metal has no erf, expm1 or log1p: the prelude
 *             defines those from kernel-form fallbacks (kf_render_fallback_form). Metal's
 *             builtins are named precise::, but the body's own arithmetic (division)
 *             still needs fast math off in the Metal compile options.
 *   literal   $$ is a single '$'.
 *
 * An unknown token, a wrong number of arguments, or a sub-group token for a language or
 * device without sub-groups is an error naming the token and its offset in the form.
 * So is a token out of its place, in every language alike (the form is one text):
 *  - ids and $sg_size/$sg_lid/$sg_id only in a kernel body (Metal reads them from kernel
 *    parameters, which helpers cannot see: pass them to helpers as arguments);
 *  - $shared only at the top level (brace depth 0) of a kernel body;
 *  - sub-group tokens in a kernel body only when kf_gkernel.uses_subgroups is set.
 * Comments and string/character literals are copied without substitution.
 *
 * Kernel signatures come from kf_gkernel, not from the body: buffer parameters in order,
 * then (Metal only) the attribute-bound id parameters that the id tokens read.
 */
#ifndef KF_RENDER_RENDER_H
#define KF_RENDER_RENDER_H

#include "kforge/core.h"

typedef enum kf_lang_id { KF_LANG_OPENCL = 0, KF_LANG_CUDA, KF_LANG_METAL, KF_LANG_COUNT } kf_lang_id;

typedef struct kf_lang kf_lang; /* a language table (static storage) */

const kf_lang *kf_lang_get(kf_lang_id id);
/* "opencl", "cuda", "metal" → table; NULL when unknown. */
const kf_lang *kf_lang_by_name(const char *name);
const char *kf_lang_name(const kf_lang *L);
/* 1 when the language has sub-group operations at all (all three do; OpenCL needs
 * cl_khr_subgroups on the device, which the caller checks). */
int kf_lang_has_subgroups(const kf_lang *L);
/* 1 when kf_gkernel.min_groups reaches the compiler (CUDA's __launch_bounds__ minimum). */
int kf_lang_has_min_groups(const kf_lang *L);
/* 1 when $sg_shfl_xor needs a device extension beyond sub-groups (OpenCL's
 * cl_khr_subgroup_shuffle), so a template cannot count on it where sub-groups exist. */
int kf_lang_shuffle_needs_ext(const kf_lang *L);
/* 1 when the language has warp matrix instructions (CUDA's mma.sync; the device must be
 * sm_80 or newer, which the caller checks). */
int kf_lang_has_mma(const kf_lang *L);

typedef enum kf_gparam_kind {
    KF_GP_IN = 0,  /* read-only device buffer:  const T *restrict */
    KF_GP_OUT,     /* written device buffer:    T *restrict (may also be read) */
    KF_GP_SCRATCH  /* read-write temporary buffer (no restrict: it may be aliased
                      across launches only, never within one) */
} kf_gparam_kind;

#define KF_GK_MAX_PARAMS 32

typedef struct kf_gparam {
    char name[32];     /* identifier used in the body */
    char ctype[16];    /* element type: "float", "int", "long", "ushort" (raw 16-bit words) */
    kf_gparam_kind kind;
} kf_gparam;

typedef struct kf_gkernel {
    char name[64];               /* kernel (entry) name */
    int nparams;
    kf_gparam p[KF_GK_MAX_PARAMS];
    int wg[3];                   /* required work-group size; 0 in wg[0] = unconstrained */
    int uses_subgroups;          /* the body uses $sg_* tokens */
    int min_groups;              /* groups per compute unit the kernel must fit (CUDA's
                                  * __launch_bounds__ minimum: a register budget); 0 = none */
    const char *body;            /* statements in the kernel form, without braces */
} kf_gkernel;

/* Append param to k (asserts on overflow). */
void kf_gkernel_param(kf_gkernel *k, const char *name, const char *ctype, kf_gparam_kind kind);

/* Language header: extension pragmas, KF_INF/KF_NAN and the math prelude as helper
 * functions, plus the vector and sub-group helpers the tokens render to (CUDA's vector
 * operators, kf_vload/kf_vstore, kf_warp_*). Appended to out; render it once per
 * translation unit, before any helper or kernel. OpenCL's sub-group pragmas are guarded
 * by the extension macros, so the prelude builds (without warnings) on devices without
 * sub-groups; CUDA's needs no header (NVRTC or nvcc); Metal's includes metal_stdlib. */
void kf_render_prelude(const kf_lang *L, kf_buf *out);

/* Render form text outside any kernel (helper functions, declarations) with token
 * substitution, appending to out. KF_ERR_PARSE with the token, its offset and err->line /
 * err->col on a bad token; out is unchanged then. */
kf_status kf_render_text(const kf_lang *L, const char *form, kf_buf *out, kf_error *err);

/* The kernel-form text that defines the math helper `name` ("kf_erff", "kf_expm1f",
 * "kf_log1pf") where a language has no builtin for it (Metal): the prelude renders it
 * for that language. Exposed so that tests can check its accuracy on a language that
 * runs here. NULL for any other name; static storage. */
const char *kf_render_fallback_form(const char *name);

/* Render one kernel: signature from k, body from k->body (kernel-body rules, see the
 * token list). The OpenCL form is `__kernel void name(...)` (with
 * reqd_work_group_size when wg[0] > 0), CUDA `extern "C" __global__ void` (with
 * __launch_bounds__), Metal `kernel void` (with [[max_total_threads_per_threadgroup]])
 * with [[buffer(i)]] bindings in parameter order, then the attribute parameters of the
 * ids the body reads. wg[1], wg[2] of 0 count as 1. KF_ERR_ARG for a bad kf_gkernel
 * (name, element type other than float/int/long/ushort, duplicate parameter, negative or
 * > 1024 group size), KF_ERR_PARSE for a bad body; out is unchanged on failure. */
kf_status kf_render_kernel(const kf_lang *L, const kf_gkernel *k, kf_buf *out, kf_error *err);

#endif
