/*
 * Internal to src/render: the token list and the language table that render.c (token
 * substitution, kernel signatures) and lang.c (the tables, the prelude) share.
 *
 * A token's expansion is a small template per language, expanded by render.c:
 *   @0 .. @9   argument i as rendered (whitespace trimmed)
 *   @(0)       argument i, parenthesised unless it is a plain name/number or already
 *              wrapped in one pair of parentheses
 *   @a @d      the axis of argument 0 as a letter (x y z) or a digit (0 1 2)
 *   @*2        arguments 2 .. end joined by ", "
 *   @L         the linear index of the thread within its group (CUDA): threadIdx.x when
 *              the kernel's group is known to be 1-D, the full x/y/z formula otherwise
 * Everything else is copied.
 */
#ifndef KF_RENDER_LANG_H
#define KF_RENDER_LANG_H

#include "render/render.h"

typedef enum kf_tok {
    KF_TOK_GID = 0, KF_TOK_LID, KF_TOK_GRP, KF_TOK_LSZ, KF_TOK_NGRP,
    KF_TOK_BARRIER,
    KF_TOK_SHARED, KF_TOK_SHARED_PTR, KF_TOK_GLOBAL, KF_TOK_RESTRICT, KF_TOK_FN,
    KF_TOK_SG_SIZE, KF_TOK_SG_LID, KF_TOK_SG_ID,
    KF_TOK_SG_SUM, KF_TOK_SG_MAX, KF_TOK_SG_MIN, KF_TOK_SG_SHFL_XOR,
    KF_TOK_VEC, KF_TOK_VLOAD, KF_TOK_VSTORE, KF_TOK_VMAKE,
    KF_TOK_COUNT
} kf_tok;

/* token flags */
enum {
    KF_TF_KERNEL = 1u << 0,   /* only inside a kernel body (Metal reads kernel parameters) */
    KF_TF_SG = 1u << 1,       /* sub-group token: the kernel must set uses_subgroups */
    KF_TF_TOP = 1u << 2,      /* only at brace depth 0 of a kernel body */
    KF_TF_AXIS = 1u << 3,     /* argument 0 is an axis: 0, 1 or 2 */
    KF_TF_VTYPE = 1u << 4,    /* argument 0 is float or int, argument 1 the width 2 or 4 */
    KF_TF_VWIDTH = 1u << 5,   /* argument 0 is the width 2 or 4 */
    KF_TF_VMAKE = 1u << 6     /* 2 + width arguments */
};

typedef struct kf_tokdef {
    const char *name;  /* without the '$' */
    int nargs;         /* exact count; for KF_TF_VMAKE the minimum */
    unsigned flags;
} kf_tokdef;

extern const kf_tokdef kf_tokdefs[KF_TOK_COUNT];

/* builtin functions a language maps the kf_* math helpers to; NULL = the language has
 * none and the prelude uses the shared kernel-form fallback */
typedef struct kf_lang_math {
    const char *exp, *log, *tanh, *erf, *expm1, *log1p, *pow, *sqrt, *fabs, *fmax, *fmin,
        *floor;
} kf_lang_math;

struct kf_lang {
    kf_lang_id id;
    const char *name;
    const char *tok[KF_TOK_COUNT];      /* expansion templates */
    const char *id_param[KF_TOK_COUNT]; /* Metal: the kernel parameter a token reads */
    kf_lang_math math;
    int c_names;                        /* the language lacks expf/sqrtf/...: map them */
    int min_groups;                     /* kf_gkernel.min_groups is rendered (CUDA's
                                           __launch_bounds__ minimum) */
    int shfl_ext;                       /* $sg_shfl_xor needs a device extension beyond
                                           sub-groups (OpenCL: cl_khr_subgroup_shuffle) */
    int mma;                            /* warp matrix instructions (CUDA's mma.sync on
                                           sm_80 and newer) */
};

#endif
