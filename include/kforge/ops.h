/*
 * kforge operators as data: one record (kf_op_def) per operator, the only place in kforge
 * that knows what an operator computes. Everything else (the .kf parser, the float64
 * interpreter, the builtin generator's templates, the PyTorch importer, `kforge ops`, the
 * Python front end, the LLM prompts) reads the records and never switches on an op's name.
 *
 * A record holds: the .kf spelling; the class (the loop nest it is: POINTWISE, REDUCE,
 * CONTRACT, SCAN, COMPOSITE); the shape rule; the arity; a typed attribute schema with
 * defaults; the cost (FLOPs per element, see kf_op_def.flops); the input domain the
 * reference needs and the magnitude a careful float32 form survives; the verify rule; the ATen names it is imported from; the PyTorch peer;
 * and the class's part:
 *   POINTWISE  the float64 reference (f64) and the float32 expression (f32) side by side,
 *              written independently; the f32 text uses only the names every platform's
 *              prelude defines (kf_expf, kf_sqrtf, KF_NAN, ...), with $0 and $1 for the
 *              operands and ${name} for an attribute's value.
 *   REDUCE     the combiner (sum, product, max, min, arg max, arg min) and a finaliser
 *              (mean divides by the count).
 *   COMPOSITE  its own float64 reference (f64_rows for reduce-shaped ones, f64_row for
 *              row-wise ones: the softmax family, the norms), never its lowering; for the
 *              kernels a lowering onto the other classes (.kf text, kf_graph_lower) or a
 *              fast-path template of its shape rule (row softmax, norms). A composite
 *              of the OWN shape rule (convolutions) has functions of its operands'
 *              shapes for the shape, the whole-tensor reference, the FLOPs and the
 *              lowering (own_*).
 *   CONTRACT   matmul; its float64 reference is the interpreter's sum of products
 *              (src/ir/interp.c, OpenBLAS dgemm on doubles).
 *   SCAN       a prefix combiner (sum, product) along one axis, in either direction,
 *              inclusive or exclusive; its float64 reference is a row function (f64_row).
 *   VIEW       an index map (kforge/imap.h): `view` builds it from the input's shape and
 *              the node's attributes and so gives the shape rule too; no arithmetic, zero
 *              FLOPs. The interpreter gathers through the map; the planner folds it into
 *              the addressing of the stage that reads it (docs/design-notes.md, "Index
 *              maps").
 *   GATHER     take-along-axis (torch.gather): the result has the index operand's shape and
 *              reads the data operand where the index says along one axis, every other axis
 *              as it is; its float64 reference is own_f64 over whole tensors; the planner
 *              makes it a load in an elementwise stage whose offset along the axis comes
 *              from the index's value (docs/design-notes.md, "Gather"). An index outside
 *              [0, size of the axis) reads the fill attribute (NaN by default), never memory.
 *
 * The records live in src/ops/ (one file per class). include/kforge/ops.def is the list
 * of their identifiers (the kf_op enum); the registry checks at start-up, and test_ops at
 * build time, that every identifier has exactly one complete record.
 */
#ifndef KFORGE_OPS_H
#define KFORGE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kforge/core.h"
#include "kforge/imap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kf_op {
#define KF_OP(id) KF_OP_##id,
#include "kforge/ops.def"
#undef KF_OP
    KF_OP_COUNT
} kf_op;

/* The loop nest an op is (../shared/DESIGN.md §8). */
typedef enum kf_op_class {
    KF_CLASS_POINTWISE, KF_CLASS_REDUCE, KF_CLASS_CONTRACT, KF_CLASS_SCAN, KF_CLASS_COMPOSITE,
    KF_CLASS_VIEW, KF_CLASS_GATHER, KF_CLASS_COUNT
} kf_op_class;

/* The shape rule: UNARY (same shape), BINARY (numpy broadcast), REDUCE (axes removed or
 * kept as 1), SOFTMAX (same shape, one axis), NORM (same shape, trailing axes, optional
 * affine inputs shaped like them), MATMUL (batched, broadcast batch dims), SCAN (same
 * shape, one axis), VIEW (the shape the record's index map gives), OWN (the record's own
 * functions of its operands' shapes give the shape, the reference, the FLOPs and the
 * lowering: convolutions), GATHER (the index operand's shape; the data operand as large or
 * larger on every axis but the gathered one, torch.gather's rule). */
typedef enum kf_op_kind {
    KF_KIND_UNARY, KF_KIND_BINARY, KF_KIND_REDUCE, KF_KIND_SOFTMAX, KF_KIND_NORM, KF_KIND_MATMUL,
    KF_KIND_SCAN, KF_KIND_VIEW, KF_KIND_OWN, KF_KIND_GATHER
} kf_op_kind;

/* The inputs the reference needs: ANY, or POS (strictly positive, e.g. log). */
typedef enum kf_domain { KF_DOMAIN_ANY, KF_DOMAIN_POS } kf_domain;

/* The input magnitude the verifier's large-magnitude and offset sets reach when no op
 * limits it (kf_op_def.mag): big enough that a kernel which squares or exponentiates
 * without care overflows, small enough that a careful float32 form of every op with no
 * limit of its own (x^2 summed over a long row, a product of two such values) stays finite. */
#define KF_MAG_DEFAULT 1e4
/* An int tuple attribute (dims, pads, a shape): n values, as written (negative dims are
 * resolved by the op that reads them). */
#define KF_MAX_INTS 16
typedef struct kf_ints {
    int n;
    int64_t v[KF_MAX_INTS];
} kf_ints;

/* Attribute values of one node. Each op's schema (kf_op_def.attrs) says which of these it
 * uses, under which .kf name, with which type and default. axes is a bitmask of
 * non-negative axes of the op's first input after resolution. The int fields are the
 * view ops' (dim, start, end, step, size, dilation, dim1 as written; ints a tuple) and the
 * convolutions' (groups; stride, padding, dilation, output_padding in ints..ints4). */
typedef struct kf_attrs {
    double alpha, beta, eps;
    uint32_t axes;
    int keepdim;
    int reverse, exclusive; /* SCAN: from the end of the axis; without the element itself */
    int64_t dim, dim1, start, end, step, size, dilation, groups;
    kf_ints ints, ints2, ints3, ints4;
} kf_attrs;

typedef enum kf_attr_type {
    KF_ATTR_FLOAT, /* a number (double) */
    KF_ATTR_BOOL,  /* true/false (int 0/1) */
    KF_ATTR_AXES,  /* one axis or a list of axes (uint32_t mask); default "all" or an axis */
    KF_ATTR_AXIS,  /* exactly one axis (uint32_t mask with one bit) */
    KF_ATTR_INT,   /* an integer (int64_t); default a number or "max" (INT64_MAX) */
    KF_ATTR_INTS,  /* a list of integers (kf_ints); default "[]" or "[a, b, ...]" */
    /* a bool that is sugar for a view of one operand: true reads operand `offset` through
     * the view op named by `view` (with that op's defaults); the parser inserts the view
     * node, so the graph never holds the flag (matmul's transpose_a/transpose_b) */
    KF_ATTR_OPERAND_VIEW
} kf_attr_type;

typedef struct kf_attr_def {
    const char *name;   /* .kf spelling, e.g. "negative_slope"; NULL ends the schema */
    kf_attr_type type;
    size_t offset;      /* where the value lives in kf_attrs (OPERAND_VIEW: the operand) */
    const char *dflt;   /* default as .kf text: "0.01", "false", "all", "-1", "[]", "max" */
    const char *aten;   /* the ATen argument it comes from: "2" (position) or "name" */
    const char *view;   /* OPERAND_VIEW: the view op's .kf name */
} kf_attr_def;

#define KF_MAX_OP_ATTRS 6
#define KF_MAX_OP_ATEN 6

/* An OWN-shaped op's operands (and result) as ranks and dims, for its record's functions. */
typedef struct kf_op_dims {
    int nin;
    int rank[4];
    const int64_t *d[4];
    int out_rank;        /* the result (0 and NULL while the shape function computes it) */
    const int64_t *out;
} kf_op_dims;

/* Reduction combiners (REDUCE class; SCAN uses SUM and PROD). LOGSUMEXP marks a
 * reduce-shaped composite that is the log of the sum of exp (computed around the max): a
 * GPU template computes it from one read of its rows instead of its lowering. */
typedef enum kf_combiner {
    KF_COMB_SUM, KF_COMB_PROD, KF_COMB_MAX, KF_COMB_MIN, KF_COMB_ARGMAX, KF_COMB_ARGMIN, KF_COMB_LOGSUMEXP
} kf_combiner;

/* What a POINTWISE op's f32 expression is rendered from: the operands as expressions
 * (in[k]) and whether each is a literal (is_const, value), the node's attributes, and
 * the producer of operand 0 where it is computed in the same scope (its op, attributes
 * and its own first operand's expression; producer = KF_OP_COUNT otherwise). */
typedef struct kf_pw_emit {
    const char *in[2];
    int is_const[2];
    double value[2];
    const kf_attrs *attr;
    kf_op producer;
    const kf_attrs *producer_attr;
    const char *producer_in0;
} kf_pw_emit;

/* A float64 elementwise run: po[j] = op(pa[j * sa], pb[j * sb]) for j < n (pb is ignored
 * by unary ops and may then be NULL). */
typedef void (*kf_f64_run)(const double *pa, int64_t sa, const double *pb, int64_t sb,
                           double *po, int64_t n, const kf_attrs *A);

typedef struct kf_op_def {
    kf_op op;
    const char *name;           /* .kf spelling */
    kf_op_class cls;
    kf_op_kind kind;            /* shape rule */
    int min_in, max_in;         /* arity (NORM's extra inputs: optional weight, bias) */
    kf_attr_def attrs[KF_MAX_OP_ATTRS + 1];
    /* FLOPs per output element (UNARY/BINARY), per input element (REDUCE, SOFTMAX, NORM, SCAN),
     * or per multiply-add pair counted as 2 (MATMUL) */
    double flops;
    kf_domain domain;
    /* the largest input magnitude for which a careful float32 form of the op still gives a
     * finite float32 result that later ops can use (exp: 80, e^88.7 overflows); 0 = no
     * limit of its own (KF_MAG_DEFAULT). The verifier draws its large-magnitude and offset
     * sets within the smallest limit of the ops that read an input (verify.c). */
    double mag;
    const char *doc;            /* one line for `kforge ops` and the LLM prompts */
    /* verify rule: the output is an index whose ties are resolved by the first extreme
     * (argmax/argmin): the comparison accepts any index of an equal value */
    int index_ties;
    const char *aten[KF_MAX_OP_ATEN]; /* ATen targets it is imported from ("aten.relu") */
    const char *torch;          /* the PyTorch peer: a Python callable expression */
    /* POINTWISE */
    /* the operands may be i64 (class indices), read as floats (exact below 2^24); the
     * result is the float operand's dtype, f32 when both are i64 */
    int int_operands;
    kf_f64_run f64;
    const char *f32;            /* "($0 < 0.0f ? 0.0f : $0)" */
    /* optional: a cheaper f32 form for some operands (returns 1 when it wrote one) */
    int (*f32_special)(const kf_pw_emit *e, kf_buf *o);
    /* REDUCE */
    kf_combiner combiner;
    int mean;                   /* divide by the reduced count */
    /* COMPOSITE */
    /* its lowering onto the other classes, for the kernels: a .kf expression in which _0,
     * _1, ... are the operands and ${name} an attribute's value (kf_graph_lower); the
     * reference never reads it */
    const char *lower;
    /* its own float64 reference where its shape rule is REDUCE: the result of one output
     * element from the n elements it reduces (gathered in row-major order) */
    double (*f64_rows)(const double *row, int64_t n, const kf_attrs *A);
    /* ... where its shape rule is SOFTMAX, NORM or SCAN (same shape out): one row of n elements
     * along its axes into y, with the row's weight and bias (NORM's optional inputs,
     * NULL when absent) */
    void (*f64_row)(const double *x, double *y, int64_t n, const double *w, const double *b,
                    const kf_attrs *A);
    /* optional, for the reference's error bounds (kf_interp_run_bounds): how far each
     * result may move when each element of its row may be off by up to e[] (first order,
     * worst case); without them a bound on the operand is not carried past the op */
    double (*f64_rows_bound)(const double *row, const double *e, int64_t n, const kf_attrs *A);
    void (*f64_row_bound)(const double *x, const double *e, double *yb, int64_t n,
                          const double *w, const double *b, const kf_attrs *A);
    /* the forms the softmax and norm fast paths serve */
    int log_out;                /* softmax family: the result in log space (log_softmax) */
    int centered;               /* norms: subtract the mean and scale by the deviation
                                   (layer_norm), else by the root mean square (rms_norm) */
    /* VIEW: the index map of this view of an input of rank in_rank and dims in_dims with
     * attributes A, into *m (m->out_rank and out_dims are the result's shape). 0, or -1
     * with the reason in why ("slice: start 9 is out of range for dimension 1 of size 4") */
    int (*view)(int in_rank, const int64_t *in_dims, const kf_attrs *A, kf_imap *m, char *why,
                size_t cap);
    /* OWN shape rule (a COMPOSITE such as a convolution, whose every part depends on the
     * operands' shapes): the result's shape into out_rank/out (0, or -1 with the reason);
     * its own float64 reference over whole tensors (in[k] dense row-major, s->out set); its
     * FLOPs; its lowering onto the other classes as .kf text over _0, _1, ... (0, or -1
     * with the reason); and a task that exercises it (inputs and one output `y`), which
     * the generated op test runs on every platform */
    int (*own_shape)(const kf_op_dims *s, const kf_attrs *A, int *out_rank, int64_t *out, char *why,
                     size_t cap);
    void (*own_f64)(const kf_op_dims *s, const kf_attrs *A, const double *const *in, double *out);
    double (*own_flops)(const kf_op_dims *s, const kf_attrs *A);
    int (*own_lower)(const kf_op_dims *s, const kf_attrs *A, kf_buf *o, char *why, size_t cap);
    /* an OWN record whose result sums products of its operands (a convolution: x times the
     * weight, plus a bias): the most products an output element sums. The interpreter's
     * error bound is then a matmul's, (terms + 1) u own_f64(|x|, |w|, |b|), plus the
     * operands' own bounds carried through (kf_interp_run_bounds). NULL: no bound. */
    int64_t (*own_terms)(const kf_op_dims *s, const kf_attrs *A);
    /* (a GATHER record has own_f64, its reference, and example, and no other own_*) */
    const char *example;
} kf_op_def;

/* The record of op; asserts op is a real op. */
const kf_op_def *kf_op_get(kf_op op);
/* Op by its .kf spelling; KF_OP_COUNT when unknown. */
kf_op kf_op_lookup(const char *name);
/* Op imported from ATen target t ("aten.relu.default" matches "aten.relu"); KF_OP_COUNT
 * when none of the records names it. */
kf_op kf_op_lookup_aten(const char *target);
/* "unary", ..., "matmul" */
const char *kf_op_kind_name(kf_op_kind k);
/* "pointwise", "reduce", "contract", "scan", "composite" */
const char *kf_op_class_name(kf_op_class c);
/* "float", "bool", "axes", "axis", "int", "ints", "operand_view" */
const char *kf_attr_type_name(kf_attr_type t);
/* 1 for a REDUCE op whose result is an index (i64): arg max, arg min. */
static inline int kf_op_is_arg(const kf_op_def *d) {
    return d->cls == KF_CLASS_REDUCE && (d->combiner == KF_COMB_ARGMAX || d->combiner == KF_COMB_ARGMIN);
}
/* 1 for POINTWISE ops. */
int kf_op_is_elementwise(kf_op op);
/* The schema entry of op's attribute `name`; NULL when op has none of that name. */
const kf_attr_def *kf_op_attr(const kf_op_def *d, const char *name);

/* Defaults for op when its input has the given rank (resolves "all" and negative axes; an
 * axis that does not exist at this rank leaves axes empty, which the shape rule rejects). */
kf_attrs kf_attrs_default(kf_op op, int input_rank);
/* Attribute values in kf_attrs by schema entry. */
double kf_attr_get_float(const kf_attrs *a, const kf_attr_def *d);
void kf_attr_set_float(kf_attrs *a, const kf_attr_def *d, double v);
int kf_attr_get_bool(const kf_attrs *a, const kf_attr_def *d);
void kf_attr_set_bool(kf_attrs *a, const kf_attr_def *d, int v);
uint32_t kf_attr_get_axes(const kf_attrs *a, const kf_attr_def *d);
void kf_attr_set_axes(kf_attrs *a, const kf_attr_def *d, uint32_t mask);
int64_t kf_attr_get_int(const kf_attrs *a, const kf_attr_def *d);
void kf_attr_set_int(kf_attrs *a, const kf_attr_def *d, int64_t v);
const kf_ints *kf_attr_get_ints(const kf_attrs *a, const kf_attr_def *d);
void kf_attr_set_ints(kf_attrs *a, const kf_attr_def *d, const kf_ints *v);
/* Reads a default or .kf text "[a, b, ...]" (or "[]") into *v; 0 when it does not read. */
int kf_ints_parse(const char *text, kf_ints *v);

/* Evaluate a POINTWISE op on doubles (binary ops use both; unary ops ignore b). attr may
 * be NULL for the op's defaults. */
double kf_op_eval(kf_op op, const kf_attrs *attr, double a, double b);

/* The f32 expression of a POINTWISE op for operands e (see kf_pw_emit), appended to o
 * (no declaration, no ';'). Uses only names every platform's prelude defines. */
void kf_op_render_f32(const kf_op_def *d, const kf_pw_emit *e, kf_buf *o);
/* A float literal valid in C, OpenCL C, CUDA and MSL (KF_NAN, KF_INF, "(1.5e+00f)"). */
void kf_op_float_lit(double v, char *buf, size_t cap);

/* Checks every record (each identifier has one, names unique, schema complete, the
 * class's part present). KF_OK, or KF_ERR_INTERNAL naming the first defect. */
kf_status kf_ops_check(kf_error *err);

#ifdef __cplusplus
}
#endif
#endif
