/*
 * kforge graph IR: a hardware-agnostic operator graph (values and the nodes that produce
 * them), the .kf parser and the float64 reference interpreter. The operators themselves
 * are records in the op registry (kforge/ops.h).
 *
 * A graph is a list of values in definition order. A value is a graph input, a scalar
 * constant, or the single result of a node. Nodes are stored in topological order (the
 * parser and kf_graph_add_node only accept already-defined operands). Values that are
 * marked as outputs are what a kernel must write.
 *
 * Memory layout of every tensor is dense row-major (C order). Rank 0 is a scalar.
 */
#ifndef KFORGE_IR_H
#define KFORGE_IR_H

#include "kforge/core.h"
#include "kforge/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* bool: one byte, 0 or 1 (a mask input; binary pointwise ops read it as 0.0 / 1.0) */
typedef enum kf_dtype { KF_F32 = 0, KF_F16, KF_BF16, KF_I64, KF_F64, KF_BOOL, KF_DTYPE_COUNT } kf_dtype;

const char *kf_dtype_name(kf_dtype t);          /* "f32", ... */
int kf_dtype_size(kf_dtype t);                  /* bytes per element */
int kf_dtype_parse(const char *s, kf_dtype *out); /* 1 if s names a dtype */

typedef struct kf_shape {
    int rank;
    int64_t d[KF_MAX_DIMS];
} kf_shape;

int64_t kf_shape_numel(const kf_shape *s);
/* The most bytes one tensor may take (256 TiB): every size computed from a graph's values
 * (bytes, float64 copies, sums over a few hundred buffers) then fits in 64 bits. */
#define KF_MAX_TENSOR_BYTES ((uint64_t)1 << 48)
/* Bytes of a tensor of shape s and dtype t into *bytes; 0 when the element count or the
 * byte count overflows or exceeds KF_MAX_TENSOR_BYTES (then *bytes is UINT64_MAX). */
int kf_shape_bytes(const kf_shape *s, kf_dtype t, uint64_t *bytes);
int kf_shape_equal(const kf_shape *a, const kf_shape *b);
/* "[4, 1024]" into buf */
void kf_shape_format(const kf_shape *s, char *buf, size_t cap);
/* numpy broadcasting of a and b into out; returns 0 when they do not broadcast. */
int kf_shape_broadcast(const kf_shape *a, const kf_shape *b, kf_shape *out);

typedef struct kf_value {
    char name[64];
    kf_dtype dtype;
    kf_shape shape;
    int producer;     /* node index, or -1 for graph inputs and constants */
    int input_index;  /* position among graph inputs, or -1 */
    int output_index; /* position among graph outputs, or -1 */
    int is_const;     /* rank-0 literal */
    double cval;
    int has_range;    /* task asked for inputs drawn from [lo, hi] */
    double lo, hi;
    int is_param;     /* module task: a `param` input, never drawn by the verifier: the
                         module's weights file (kf_module_task) in input set 0, the
                         reference process's draw in the others */
    int64_t param_offset; /* its byte offset in that file (and in each set's draw) */
    int line, col;    /* where it was defined in the task text (0 if built by hand) */
} kf_value;

#define KF_MAX_NODE_IN 4

typedef struct kf_node {
    kf_op op;
    int nin;
    int in[KF_MAX_NODE_IN]; /* value ids */
    kf_attrs attr;
    int out;                /* value id of the result */
    int line, col;
} kf_node;

/* A module task (docs/task-format.md, "Module tasks"): a PyTorch module whose ops kforge
 * does not all lower. Its graph has inputs (forward arguments, then `param`s) and declared
 * outputs but no nodes; the reference is the module itself, run by a separate process
 * (src/verify/refproc.c). Its files lie beside the task: NAME.json (the spec the
 * reference process reads), NAME.py (the module's source) and NAME.weights (the params'
 * values, raw little-endian, in `param` order). */
typedef struct kf_module_task {
    char name[64];          /* NAME of the `module` statement */
    char dir[256];          /* the task file's folder ("." when it has none) */
    double flops;           /* the `cost` statement: FLOPs of one forward */
    double bytes;           /* and its bytes (inputs + outputs + parameters) */
    int has_cost;
    int64_t weight_bytes;   /* the size NAME.weights must have (the params' bytes) */
} kf_module_task;


typedef struct kf_graph {
    char name[64];
    char path[256];         /* source file, "" when built by hand */
    kf_value *values;
    int nvalues, cap_values;
    kf_node *nodes;
    int nnodes, cap_nodes;
    int *inputs;            /* value ids, in declaration order */
    int ninputs;
    int *outputs;           /* value ids, in declaration order */
    int noutputs;
    int has_tol;            /* task gave tolerances (override the dtype defaults) */
    double atol, rtol, nmse;
    char *source;           /* task text, when parsed (owned) */
    struct kf_name_index *names; /* value name -> id (graph.c); names change only there */
    int ntemps;             /* values named as temporaries ("%N") */
    kf_module_task *module; /* a module task (owned), NULL for a graph task */
} kf_graph;

/* The path of module task file `ext` ("json", "py", "weights") of g into buf; 0 when g is
 * no module task or the path does not fit. */
int kf_module_file(const kf_graph *g, const char *ext, char *buf, size_t cap);

kf_graph *kf_graph_new(const char *name);
void kf_graph_free(kf_graph *g);

/* Add a graph input. Returns the value id, or -1 with err set (duplicate name, bad shape). */
int kf_graph_add_input(kf_graph *g, const char *name, kf_dtype dt, const kf_shape *shape,
                       kf_error *err);
/* Add an output that no node computes, of the given type (a module task's output: the
 * module computes it). Returns the value id, or -1 with err set (as kf_graph_add_input). */
int kf_graph_add_declared_output(kf_graph *g, const char *name, kf_dtype dt, const kf_shape *shape,
                                 kf_error *err);
/* Add a rank-0 f32 constant; returns its value id. */
int kf_graph_add_const(kf_graph *g, double v);
/* Apply op to operands, inferring the result's dtype and shape. name may be NULL (a
 * temporary "%N" is made up). attrs may be NULL for the op's defaults. Returns the result's
 * value id, or -1 with err set to a type error (err->line/col are taken from line, col). */
int kf_graph_add_node(kf_graph *g, kf_op op, const int *ins, int nin, const kf_attrs *attrs,
                      const char *name, int line, int col, kf_error *err);
/* Mark a value as an output; returns KF_OK or an error (constant, already marked). */
kf_status kf_graph_mark_output(kf_graph *g, int value, kf_error *err);
/* Rename value id (the only way to change a value's name, which kf_graph_find indexes).
 * name must fit kf_value.name and not be taken; the caller checks (kf_graph_find). */
void kf_graph_set_name(kf_graph *g, int id, const char *name);
/* Find a value by name; -1 if absent. */
int kf_graph_find(const kf_graph *g, const char *name);

/* Total FLOPs, and the minimum bytes any kernel must move (graph inputs read once plus
 * graph outputs written once; constants are free). A module task: its `cost` statement's
 * numbers (0 without one). */
double kf_graph_flops(const kf_graph *g);
double kf_graph_min_bytes(const kf_graph *g);
/* Per-node FLOPs. */
double kf_node_flops(const kf_graph *g, const kf_node *n);

/* Default tolerances for an output dtype, used when the task gives none. */
void kf_tolerance_default(kf_dtype dt, double *atol, double *rtol, double *nmse);

/* Parse a .kf task. On failure returns NULL status and fills err with file:line:col,
 * what was found and what was expected. The graph owns a copy of the text. */
kf_status kf_parse_file(const char *path, kf_graph **out, kf_error *err);
/* The largest task file kf_parse_file reads (a task of 200,000 ops is a few MB). */
#define KF_TASK_MAX_BYTES ((size_t)16 << 20)
kf_status kf_parse_string(const char *text, const char *filename, kf_graph **out,
                          kf_error *err);

/* Parse one .kf expression into g, with the identifiers _0 .. _{nbind-1} naming the values
 * bind[...]; every node it adds is placed at (line, col). *result is its value id.
 * (Composite lowerings: kf_graph_lower.) */
kf_status kf_parse_expr_into(kf_graph *g, const char *text, const int *bind, int nbind, int line,
                             int col, int *result, kf_error *err);

/* 1 when a node of g has an op whose record carries a lowering (kf_op_def.lower). */
int kf_graph_has_lowering(const kf_graph *g);
/* g with every such node replaced by its lowering's nodes and every other node copied;
 * same inputs and outputs, in the same order (*out is owned by the caller). The kernels'
 * graph only: the reference evaluates g itself. KF_ERR_INTERNAL for a lowering that does
 * not apply (a defect of its record). */
kf_status kf_graph_lower(const kf_graph *g, kf_graph **out, kf_error *err);
/* As kf_graph_lower, but a node for which keep(g, node, ctx) returns 1 is copied as it is
 * (a platform with a kernel of its own for that op; keep NULL keeps none). */
typedef int (*kf_lower_keep_fn)(const kf_graph *g, const kf_node *n, void *ctx);
kf_status kf_graph_lower_keeping(const kf_graph *g, kf_lower_keep_fn keep, void *ctx, kf_graph **out,
                                 kf_error *err);

/* Lower a PyTorch task bundle's graph.json (python/kforge_torch/importer.py; the format is
 * in docs/pytorch.md) to a .kf task. On success *kf_text (caller frees, may be NULL to
 * skip) holds the task text and *out (may be NULL) its graph; graph inputs keep their
 * order (forward arguments, parameters, buffers as torch.export lists them) and outputs
 * PyTorch's order. KF_ERR_UNSUPPORTED names every node kforge cannot lower, with its ATen
 * op; KF_ERR_PARSE a file that is not such a graph. */
kf_status kf_import_torch_graph(const char *json_path, char **kf_text, kf_graph **out, kf_error *err);

/* Per graph input, what the values drawn for it must satisfy, from the op records of every
 * node on a path from it (the rule is in docs/design-notes.md, "Input domains come from the
 * ops"): pos[i] = 1 when an op of KF_DOMAIN_POS is on such a path (strictly positive
 * values), mag[i] the smallest kf_op_def.mag of those ops (KF_MAG_DEFAULT when none has
 * one). pos and mag have g->ninputs entries (mag may be NULL). A range the task gives an
 * input is not consulted: this is what the ops need. */
void kf_graph_input_domains(const kf_graph *g, int *pos, double *mag);
/* The operands and result of node n as an OWN-shaped record's functions take them (the
 * dims point into g's values: valid while g is not changed). */
kf_op_dims kf_node_dims(const kf_graph *g, const kf_node *n);
/* How many terms node n adds into an element of its result, the length that its float32
 * rounding grows with: a contraction's K (its first operand's last extent), a sum's or a
 * mean's reduced extent, a running sum's axis length; 0 for any other node. */
int64_t kf_node_sum_terms(const kf_graph *g, const kf_node *n);
/* The longest sum of the graph: the largest kf_node_sum_terms over its nodes, at least 1. */
int64_t kf_graph_longest_sum(const kf_graph *g);
/* ---- index maps (kforge/imap.h; src/ir/imap.c) ---- */

/* The identity map of a tensor of shape s. */
void kf_imap_identity(kf_imap *m, const kf_shape *s);
/* r = inner after outer: the map of a view (outer) of a view (inner) as one map from
 * outer's output to inner's input (outer->in_dims must be inner->out_dims). 1, or 0 when
 * they have no single map (both pad, with different values; too many guards). r may
 * alias either. */
int kf_imap_compose(const kf_imap *outer, const kf_imap *inner, kf_imap *r);
/* The input index of output index out_idx into in_idx; 1, or 0 where a guard fails (the
 * element is m->pad and in_idx is not written). */
int kf_imap_apply(const kf_imap *m, const int64_t *out_idx, int64_t *in_idx);
/* The map on a dense row-major input: element stride per output dim (str[out_rank]) and
 * the element offset of output index 0 (negative where a pad comes first; read only where
 * the guards hold). */
void kf_imap_strides(const kf_imap *m, int64_t *str, int64_t *base);
/* Output elements [e0, e1) of m (counted row-major) gathered from x, m's input dense in
 * row-major order: out[k] = x[the flat index of kf_imap_apply(element e0 + k)], or pad
 * where a guard fails. The same reads as kf_imap_apply element by element, done a row of
 * the output's last dim at a time: the flat offset and the guards' values carried from row
 * to row, each guard's passing stretch of the row solved once (the map is affine). */
void kf_imap_gather(const kf_imap *m, const double *x, double pad, int64_t e0, int64_t e1, double *out);
/* 1 when m reads its input in its row-major order: output element e (counted row-major)
 * is input element e, and the counts agree (identity, reshape, unsqueeze: a relabelling). */
int kf_imap_is_linear(const kf_imap *m);
/* 1 when m reads its input as it is (no guards, same shape, identity). */
int kf_imap_is_identity(const kf_imap *m);
/* The map of view node n (its record's builder on its input's shape). */
kf_status kf_node_imap(const kf_graph *g, const kf_node *n, kf_imap *m, kf_error *err);
/* Follows the view nodes that produce value v back to the first value that is not a view
 * (or whose map does not compose), composing their maps into *m (from v's index to that
 * value's). Returns that value's id (v itself, with the identity, when v is no view). */
int kf_value_imap(const kf_graph *g, int v, kf_imap *m);

/* Reference interpreter in float64. inputs[i] holds numel(graph input i) doubles (i64
 * inputs as their integer values); outputs[j] must hold numel(graph output j) doubles and
 * receives the results (argmax/argmin indices as exact integers). Intermediates are
 * allocated internally. Returns KF_OK, or an error for unsupported dtypes/ops. */
kf_status kf_interp_run(const kf_graph *g, const double *const *inputs, double *const *outputs,
                        kf_error *err);

/* kf_interp_run, and with each output's error bound: bounds[j] (numel doubles; a NULL
 * entry skips that output) receives per element how far a correct float kernel may
 * legitimately stray from the exact result beyond rounding that result once, from the ops
 * whose error grows with their size or is amplified downstream (docs/design-notes.md, "Tolerance that follows the
 * error model"). Rules, per node, in graph order, inputs being exact:
 *   CONTRACT   K * u * sum_k |a_ik| |b_kj|  (u: the unit roundoff of the result's dtype, f32
 *              2^-24; the bound of any summation order), plus the operands' own bounds
 *              carried: sum_k (ea_ik |b_kj| + |a_ik| eb_kj);
 *   POINTWISE  u * |result| (its rounding to the dtype, which a later norm or difference
 *              may amplify), plus, with a bound on an operand, the largest change of the
 *              f64 result over the corners of [x - e, x + e] (exact for monotone ops:
 *              clamp, tanh, relu, add; non-finite corners are skipped);
 *   REDUCE     sum and mean of R terms: R * u * sum |x| (a mean's over R), the sum's own
 *              rounding in any order, plus the sum (mean) of the terms' bounds; max and
 *              min: the largest of the terms' bounds;
 *   SCAN       a running sum: R * u times the running sum of |x| (R the axis length), plus
 *              the running sum of the terms' bounds;
 *   COMPOSITE  the record's f64_row_bound / f64_rows_bound of each row (softmax, log_softmax,
 *              layer_norm, rms_norm, logsumexp: first-order worst cases; weight and bias
 *              taken as exact); a softmax's never above max(p, 1 - p) (p stays in [0, 1])
 *              and never NaN, and no less than sqrt(K) times its bound for the operand's
 *              bound over sqrt(K) (K: the graph's longest sum; the verifier's NMSE allowance
 *              reads bound / sqrt(K) as the typical error, which a saturating bound would
 *              understate);
 *   other      (prod, arg ops, composites without a bound function): no bound carried (0),
 *              the default tolerance alone applies.
 * Costs one more dgemm per matmul (on |a|, |b|) plus one per bounded operand, and keeps
 * the bounds of live values. */
kf_status kf_interp_run_bounds(const kf_graph *g, const double *const *inputs,
                               double *const *outputs, double *const *bounds, kf_error *err);
/* kf_interp_run (bounds NULL) or kf_interp_run_bounds, and *beyond_f32 = 1 when some f32
 * value of the graph (an intermediate or an output) is finite in float64 but beyond
 * 2^124, within 16x of float32's range or past it: no float32 kernel can be held to the
 * reference's result there (whether a float32 sum overflows depends on its order). */
/* kf_interp_hold(1): the interpreter keeps its large freed arrays from one run to the next
 * (runs on the same shapes, e.g. one per input set, fault their pages in once instead of on
 * every run); kf_interp_hold(0) ends that hold and frees them. Holds nest. */
void kf_interp_hold(int on);

kf_status kf_interp_run_checked(const kf_graph *g, const double *const *inputs, double *const *outputs,
                                double *const *bounds, int *beyond_f32, kf_error *err);

/* 1 when kf_interp_run evaluates g chunk by chunk (all its live nodes elementwise over one
 * shape, operands of that shape or of one element, outputs computed by nodes): the same
 * results bit for bit as the node-by-node walk, without whole-tensor intermediates. The
 * bounds runs always walk node by node. */
int kf_interp_fusable(const kf_graph *g);

/* kf_interp_run_checked (no bounds) of a graph kf_interp_fusable accepts, on elements
 * [lo, lo + n) of its output shape only, on the calling thread: inputs of the output's
 * shape and every outputs[j] hold just those n elements (element lo at index 0); other
 * inputs (broadcast to the shape, single elements) are whole. The same f64 calls on the
 * same elements as kf_interp_run, so the same results bit for bit. *beyond_f32 (may be
 * NULL) as kf_interp_run_checked's over these elements. KF_ERR_ARG: not fusable, or a span
 * outside the shape. */
kf_status kf_interp_run_span(const kf_graph *g, int64_t lo, int64_t n, const double *const *inputs,
                             double *const *outputs, int *beyond_f32, kf_error *err);


#ifdef __cplusplus
}
#endif
#endif
