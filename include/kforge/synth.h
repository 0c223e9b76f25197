/*
 * kforge builtin generator: turns a graph into candidate source for a platform, over a
 * schedule space. The graph is split into stages (a fused elementwise cluster, a
 * reduction, a softmax, a norm, a matmul); each stage's template declares named integer
 * parameters (threads, vector width, unroll, tiles, ...) with the values worth trying.
 * A point in the space picks one value per parameter; rendering a point gives a candidate.
 *
 * The generator renders; it never compiles or runs anything.
 */
#ifndef KFORGE_SYNTH_H
#define KFORGE_SYNTH_H

#include "kforge/core.h"
#include "kforge/ir.h"
#include "kforge/backend.h"
#include "kforge/candidate.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KF_MAX_PARAMS 96
#define KF_MAX_PARAM_VALUES 12

typedef struct kf_param {
    char name[32];          /* "s0.threads" (stage-prefixed) */
    int nvalues;
    long values[KF_MAX_PARAM_VALUES];
    int dflt;               /* index of the default value (the first candidate's) */
    kf_role role;           /* what it does (the analysis agent's rules ask for roles) */
    /* A stage that several templates support has a selector (role KF_ROLE_TEMPLATE,
     * "s0.tpl") and each template's parameters under its own prefix ("s0.gemm.threads",
     * "s0.matvec.threads"): such a parameter is in use only where the selector picks its
     * template. gate: 1 + the selector's index (0: always in use); gate_value: the
     * selector's value (a template) under which it is used. */
    int gate;
    long gate_value;
} kf_param;

typedef struct kf_space {
    int nparams;
    int overflow;           /* a parameter did not fit: kf_synth_plan refuses the task */
    kf_param p[KF_MAX_PARAMS];
} kf_space;

typedef struct kf_point {
    int idx[KF_MAX_PARAMS]; /* value index per parameter */
} kf_point;

typedef struct kf_synth kf_synth;

/* Plan g for a platform/device: split into stages and build the schedule space.
 * KF_ERR_UNSUPPORTED names the op or dtype this generator cannot handle. */
kf_status kf_synth_plan(const kf_graph *g, const char *platform, const kf_device_info *dev,
                        kf_synth **out, kf_error *err);
void kf_synth_free(kf_synth *s);
const kf_space *kf_synth_space(const kf_synth *s);
/* Text summary of the stages, e.g. "ewise[3 ops] -> reduce(sum)". */
const char *kf_synth_describe(const kf_synth *s);
/* Fix every parameter named `name` or ending in ".name" to value, where value is one of
 * its values (the search then never moves it). Returns how many were fixed. */
int kf_synth_pin(kf_synth *s, const char *name, long value);
/* Fix the parameter a candidate label calls NAME ("block", "s1.threads") to VALUE, from
 * "NAME=VALUE" (kforge synth --pin). KF_ERR_ARG saying what is wrong: not NAME=VALUE, no
 * such parameter (the error lists them), or a value not in its list (the error lists
 * them). */
kf_status kf_synth_pin_assign(kf_synth *s, const char *assign, kf_error *err);
/* The default point of the space: the search's first candidate (each template picks its
 * defaults from the device). */
void kf_synth_default_point(const kf_synth *s, kf_point *p);
/* Render point p into candidate c (c is initialised here; clear it afterwards). */
kf_status kf_synth_render(const kf_synth *s, const kf_point *p, kf_candidate *c, kf_error *err);
/* Whether the builtin generator can plan op (f32 operands of shape [8, 8], default
 * attributes) for platform on a nominal device of its kind: KF_OK, or the status and the
 * reason in err (KF_ERR_UNSUPPORTED: no template of its class for that platform). */
kf_status kf_synth_op_support(kf_op op, const char *platform, kf_error *err);
/* "threads=2 vw=8 ...": the parameters in use at p (kf_param_active), a template
 * selector's value as the template's short name ("tpl=matvec"). */
void kf_point_format(const kf_space *sp, const kf_point *p, char *buf, size_t cap);
/* 1 when parameter i is in use at p: not gated, or its selector picks its template. */
int kf_param_active(const kf_space *sp, const kf_point *p, int i);
/* p with every parameter not in use at its default: two points that render the same
 * candidate have the same canonical point (the search's record of points tried). */
void kf_point_canonical(const kf_space *sp, const kf_point *p, kf_point *out);
/* The short name of template selector value v ("gemm", "matvec"), NULL when v is no
 * template. */
const char *kf_synth_template_name(long v);
/* Value of parameter name at p; def if the space has no such parameter. */
long kf_point_get(const kf_space *sp, const kf_point *p, const char *name, long def);

#ifdef __cplusplus
}
#endif
#endif
