/*
 * The planner's internal state, shared by synth.c and the elementwise and reduction
 * templates (tpl_ewise.c, tpl_reduce.c). Not part of the public API.
 */
#ifndef KF_SYNTH_INT_H
#define KF_SYNTH_INT_H

#include "tpl.h"

typedef enum kf_stage_kind {
    KF_STAGE_EWISE, KF_STAGE_REDUCE, KF_STAGE_SOFTMAX, KF_STAGE_NORM, KF_STAGE_MATMUL, KF_STAGE_SCAN,
    KF_STAGE_KIND_COUNT
} kf_stage_kind;

struct kf_synth;
struct kf_stage;
struct kf_gplan;

/* A template (src/synth/templates.c): the loop nest of one stage kind on one platform
 * family. supports() answers 1, or 0 with the reason appended to why; the planner gives a
 * stage the first row of the table that supports it (kf_stage.tpl) and, when later rows
 * of the family support it too, the choice between them to the search (kf_stage.alts, a
 * selector parameter; kf_tpl_stage_params). CPU rows declare parameters with
 * cpu_params and write either the body of the stage's function (cpu_emit_body, the
 * function `static void kf_stage<k>(<reads>, <writes>)` is the planner's) or the whole
 * function NAME(A, B, C) (cpu_emit_fn, the GEMM); GPU rows declare parameters with
 * gpu_params (allow_split: the plan's launch and scratch budget admits a two-pass variant)
 * and append kernels and launch lines with gpu_emit. */
typedef struct kf_tpl_def {
    const char *name;  /* "cpu.gemm", "gpu.softmax_rows", ... */
    int gpu;           /* platform family: 0 CPU (C + OpenMP), 1 GPU (the kernel form) */
    kf_stage_kind kind;
    const char *doc;
    int (*supports)(const struct kf_synth *s, const struct kf_stage *st, kf_buf *why);
    void (*cpu_params)(struct kf_synth *s, struct kf_stage *st);
    void (*cpu_emit_body)(const struct kf_synth *s, const struct kf_stage *st, const kf_point *p,
                          kf_buf *o);
    void (*cpu_emit_fn)(const struct kf_synth *s, const struct kf_stage *st, const kf_point *p,
                        const char *fname, kf_buf *o);
    void (*gpu_params)(struct kf_synth *s, struct kf_stage *st, int allow_split);
    void (*gpu_emit)(struct kf_gplan *gp, int k, const struct kf_stage *st, const kf_point *p);
    /* 1 when the stage can take an elementwise prologue for its input (NULL: never) */
    int (*prologue_ok)(const struct kf_synth *s, const struct kf_stage *st);
    int can_split;     /* GPU: may add a second pass (a launch and partials in scratch) */
    int row_reduce;    /* GPU: may fold a reduction of its result's rows into its store stage
                          (per-block partials and a combine launch, gpu_redepi.c); the CPU
                          GEMM's is its cpu_emit_fn hook */
    int epilogue;      /* may compute an elementwise reader of its result (kf_stage.epilogue):
                          CPU norms a chunk of a row at a time, the CPU GEMM in its store
                          stage (kf_matmul_desc.epi); the GPU matmul and axis reductions at
                          each store of the result (gpu_epi.c) */
} kf_tpl_def;

/* Templates one stage may choose between (the first and the later rows that support it). */
#define KF_TPL_MAX_ALTS 4

typedef struct kf_stage {
    kf_stage_kind kind;
    int index;         /* its position in kf_synth.st */
    /* the first template of the table that supports it (kf_tpl_select): the planner's
     * decisions that depend on the template (prologue fusion, the GPU's split budget) ask
     * this row, and an alternative is kept only where it agrees with it */
    const kf_tpl_def *tpl;
    /* every template of its family that supports it, in table order (alts[0] == tpl):
     * with nalts > 1 the space has a selector "<prefix>tpl" and each row's parameters
     * under "<prefix><row>." (kf_tpl_stage_params), and a point's row emits
     * (kf_tpl_chosen) */
    const kf_tpl_def *alts[KF_TPL_MAX_ALTS];
    int nalts;
    int *nodes;        /* node indices in topological order (one for non-elementwise) */
    int nnodes;
    kf_shape dom;      /* iteration domain: shape of the nodes' results */
    char prefix[24];   /* parameter prefix "s<k>." (a row's view: "s<k>.<row>.") */
    kf_matmul_desc mm; /* matmul stages */
    /* prologue fusion (synth.c fuse_prologues): an elementwise stage whose one result is
     * only this reduction/softmax/norm stage's input is computed inside it (CPU: a row at
     * a time into a stack buffer; GPU: at each load) instead of through a scratch tensor */
    int prologue;      /* 1 + index of the fused elementwise stage (0 = none) */
    /* epilogue fusion (synth.c fuse_epilogues, CPU norms): the elementwise stage that
     * reads this stage's result, and nothing computed after this stage, is computed inside
     * it, a chunk of each row at a time (kf_synth_epilogue_emit), so the result never goes
     * through memory; that stage is fused (fused_into = this one) */
    int epilogue;      /* 1 + index of the fused elementwise stage (0 = none) */
    /* 1 + the index of the parameter "<prefix>epi" (values 1, 0) that keeps the epilogue
     * fused (1) or computes it as its own stage after this one (0: kf_synth_render unfuses
     * it, y is stored); the fused stage's own parameters are gated on epi=0 (0 = none) */
    int epi_sel;
    /* reduction epilogue (CPU GEMM, redepi.c): the reduction stage over this product's last
     * axis (with its elementwise prologue, if any) computed in the GEMM's store stage; that
     * stage is fused (fused_into = this one) (0 = none) */
    int redepi;
    /* 1 + the index of the parameter "<prefix>red" (1 fused, 0 apart), as epi_sel (0 = none) */
    int red_sel;
    int nguards;       /* elementwise: the guards of the padded views it reads (at most
                          KF_EW_MAX_GUARDS; cluster() starts a new stage beyond) */
    int nviews;        /* elementwise: the view reads it holds (at most KF_EW_MAX_VIEWS) */
    /* chain fusion (CPU, synth.c fuse_chains): this matmul stage reads as its A the
     * result of softmax stage chain_sm - 1, whose input is matmul stage chain_mm - 1's
     * result (through its prologue, if any); the three run as one row-blocked loop
     * (tpl_chain.c) and neither intermediate is stored (0 = no chain) */
    int chain_mm, chain_sm;
    int fused;         /* this stage (elementwise, or a chain's first two) is computed inside stage fused_into */
    int fused_into;
    /* GPU path (gpu.c): parameters this stage may still add to the space, and those
     * fixed at their default (single-valued, or beyond the budget) */
    int gpu_budget;
    int nfixed;
    char fixed_name[16][40]; /* full names, prefix included */
    long fixed_val[16];
} kf_stage;

struct kf_synth {
    const kf_graph *g;
    kf_graph *lowered; /* g when the task had composite ops to lower (owned), else NULL */
    kf_device_info dev;
    char platform[16];
    kf_stage *st;
    int nst;
    int *val_stage;    /* stage producing each value, -1 for inputs and constants */
    int *materialize;  /* value is kept in a buffer */
    int *skip;         /* per node: a view node no reader needs (kf_synth_view_skips) */
    int *alias;        /* per value: a view that is a relabelling of a buffer (a reshape),
                          read by reductions, norms or scans as that buffer (its id); -1 */
    int *out_alias;    /* per value: the graph output (a relabelling of it) whose buffer
                          it is written into; -1 */
    int *copy;         /* per node: a copy of an elementwise node made for one reader
                          (kf_synth_remat), placed in that reader's stage; NULL when none */
    kf_space space;
    char desc[512];
};

/* A copy of g in which a cheap elementwise node (operands all in memory anyway, at most
 * one as large as its result) that a later elementwise node reads after a reduction of
 * it is computed again just before that reader, which reads the copy (remat.c). Returns
 * NULL when no node qualifies; else the new graph (caller frees) and in *copy_nodes, per
 * node of it, 1 for the copies (caller frees). */
kf_graph *kf_synth_remat(const kf_graph *g, int **copy_nodes);
/* The start of a rewritten copy of g (remat.c, gemv.c): a graph of g's name, path and
 * tolerances holding g's inputs, and *map (g's value ids to the copy's, -1 for values not
 * yet copied; the caller frees it). NULL when an input could not be added. */
kf_graph *kf_synth_graph_with_inputs(const kf_graph *g, int **map);
/* GPU platforms: the task's f32 matrix-vector products (M or N of 1) rewritten as a
 * reduction of an elementwise product (gemv.c); NULL when the graph has none. */
kf_graph *kf_synth_gemv_rewrite(const kf_graph *g);

/* The template table, in order (kforge templates, tests). */
int kf_tpl_count(void);
const kf_tpl_def *kf_tpl_at(int i);
/* Give st the first template of s's platform family that supports it, and in st->alts
 * every row of the family that supports it and agrees with the first on can_split;
 * KF_ERR_UNSUPPORTED naming the stage and every template's reason when none does. */
kf_status kf_tpl_select(const struct kf_synth *s, kf_stage *st, kf_error *err);
/* The short name of a row ("gemm" for "cpu.gemm"). */
const char *kf_tpl_short_name(const kf_tpl_def *t);
/* Declare stage st's parameters: its template's (cpu_params, or gpu_params with
 * allow_split); with alternatives, the selector "<prefix>tpl" (role KF_ROLE_TEMPLATE,
 * values the rows' registry indices in table order, default the first) and each row's
 * parameters under "<prefix><row>.", gated by the selector (kf_param.gate). */
void kf_tpl_stage_params(struct kf_synth *s, kf_stage *st, int allow_split);
/* The row that computes st at point p, and in *view the stage as that row's emitter
 * sees it (its parameters' prefix). */
const kf_tpl_def *kf_tpl_chosen(const struct kf_synth *s, const kf_stage *st, const kf_point *p, kf_stage *view);

/* 1 for the platforms of the GPU path (opencl, cuda, metal; src/synth/gpu.c). */
int kf_synth_is_gpu(const char *platform);

/* C element type of value v ("float" or "int64_t"). */
const char *kf_synth_ctype(const kf_graph *g, int v);
/* Fill a matmul description from a matmul node (batch dims merged, broadcast strides). */
void kf_synth_matmul_desc(const kf_graph *g, const kf_node *n, int gather, kf_matmul_desc *d);

void kf_synth_ewise_params(kf_synth *s, kf_stage *st);
void kf_synth_ewise_emit(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *out);
void kf_synth_reduce_params(kf_synth *s, kf_stage *st);
/* SCAN stages (tpl_scan.c; the planner adds the threads parameter) */
void kf_synth_scan_params(kf_synth *s, kf_stage *st);
void kf_synth_scan_emit(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *out);
void kf_synth_reduce_emit(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *out);

/* Expression for a float literal (handles inf and NaN), valid in C, OpenCL C, CUDA and MSL. */
void kf_synth_float_lit(double v, char *buf, size_t cap);
/* The scalar float expression of elementwise node n (no declaration, no ';'), reading
 * its operands as r<value id> or as literals. Uses only names every platform's prelude
 * defines (kf_expf, kf_sqrtf, KF_NAN, ...), so the CPU and GPU templates share it. */
void kf_synth_node_expr(const kf_synth *s, const kf_node *n, kf_buf *o);

/* An elementwise stage's operands and its coalesced iteration domain: the operands read
 * from memory (v[0..nreads-1]) and the materialised results (v[nreads..nops-1]), each
 * with its element stride per coalesced dim (0 = broadcast). Adjacent domain dims merge
 * when every operand walks them alike; size-1 dims are dropped. */
#define KF_EW_MAX_OPS 128
#define KF_EW_MAX_GUARDS 96 /* a 3x3x3 window of a padded 3D view reads 27 x 3 */
/* View reads one elementwise stage takes (each is an operand of its own; a GPU kernel takes
 * at most KF_GK_MAX_PARAMS buffers): cluster() starts a new stage beyond */
#define KF_EW_MAX_VIEWS 28
typedef struct kf_ew_layout {
    int nops, nreads;
    int v[KF_EW_MAX_OPS];
    int q;                          /* coalesced dims (0 when the domain has one element) */
    int64_t dim[KF_MAX_DIMS];
    int64_t str[KF_EW_MAX_OPS][KF_MAX_DIMS];
    /* reads through index maps (src/synth/view.c): read r loads register r<v[r]> from
     * buffer b<buf[r]> (v[r] itself unless v[r] is a view) at base[r] + the strides; where
     * a guard of the read (gop[k] == r) falls outside [0, gn[k]) it is pad[r] instead */
    int buf[KF_EW_MAX_OPS];
    int64_t base[KF_EW_MAX_OPS];
    double pad[KF_EW_MAX_OPS];
    int ng;
    int gop[KF_EW_MAX_GUARDS];
    int64_t goff[KF_EW_MAX_GUARDS], gn[KF_EW_MAX_GUARDS];
    int64_t gstr[KF_EW_MAX_GUARDS][KF_MAX_DIMS]; /* per coalesced dim */
    int64_t graw[KF_EW_MAX_GUARDS][KF_MAX_DIMS]; /* per domain dim (before coalescing) */
    /* gathers (GATHER nodes, src/synth/view.c): read r with take[r] >= 0 loads at its
     * offset plus i<take[r]> * take_str[r], i<take[r]> the integer value of the index read
     * take[r] (emitted before it), where that lies in [0, take_n[r]); else pad[r] (the
     * gather's fill). -1 for every other read */
    int take[KF_EW_MAX_OPS];
    int64_t take_str[KF_EW_MAX_OPS], take_n[KF_EW_MAX_OPS];
    /* the distinct buffers the reads load from, in order (the stage's inputs) */
    int nbufs;
    int bufs[KF_EW_MAX_OPS];
} kf_ew_layout;
void kf_synth_ewise_layout(const kf_synth *s, const kf_stage *st, kf_ew_layout *L);

/* ---- index maps (src/synth/view.c) ---- */
/* 1 when value v is a view node's result. */
int kf_synth_is_view(const kf_graph *g, int v);
/* The value matmul node n reads as operand k (0: A, 1: B): the source of a view whose map
 * reads whole matrices of it, with its last two dims swapped (*transposed = 1) or as they
 * are, else the operand itself (*transposed = 0). bstr (may be NULL) gets the operand's
 * batch strides in the read value's matrices, one per batch dim of the operand. With
 * gather (the CPU), a B operand that would be read from its materialised view is read
 * through a strided map of the value returned instead, described in *gd (may be NULL;
 * gd->on = 0 otherwise; kf_synth_mm_gather). */
int kf_synth_mm_operand(const kf_graph *g, const kf_node *n, int k, int gather, int *transposed, int64_t *bstr,
                        kf_mm_gather *gd);
/* For operand k of matmul node n, a view that the map can gather (every index of the
 * operand a mixed-radix sum of strides into one value, after a reshape on top that merges
 * or splits dims): that value (the first below the operand whose map pads, or that is no
 * view), and *gd filled (batch strides aligned with the node's output batch dims); -1
 * when there is none. */
int kf_synth_mm_gather(const kf_graph *g, const kf_node *n, int k, kf_mm_gather *gd);
/* Per node of g (caller frees): 1 for a view node whose result no reader needs itself
 * (each reads through it), and for a node no output depends on, so that it is not
 * planned; gather as in kf_synth_mm_operand. */
int *kf_synth_view_skips(const kf_graph *g, int gather);
/* Fill read L->nops (not yet counted) of stage st for view value w: its buffer, base, pad
 * and guards, and its element stride per domain dim into stride. */
void kf_synth_view_read(const kf_synth *s, const kf_stage *st, int w, kf_ew_layout *L, int64_t *stride);
/* Fill read L->nops (not yet counted) of stage st for gather node n: its data buffer, the
 * gather's fill as pad, take (the index read, which must be among the reads already),
 * the stride and size of the gathered axis, and its element stride per domain dim (the
 * gathered axis 0) into stride. */
void kf_synth_gather_read(const kf_synth *s, const kf_stage *st, const kf_node *n, kf_ew_layout *L, int64_t *stride);
/* 1 for an op an elementwise stage computes as a read: a VIEW (through its index map) or a
 * GATHER (at positions its index operand holds); kf_synth_node_expr has no expression for it. */
int kf_synth_is_read_op(kf_op op);
/* 1 when read r of L has guards (a padded map). */
int kf_synth_ewise_guarded(const kf_ew_layout *L, int r);
/* 1 when stage st holds a view or gather node (it reads through a map). */
int kf_synth_stage_has_views(const kf_synth *s, const kf_stage *st);
/* 1 when elementwise stage st may be computed inside a GPU matmul's operand loads (its
 * prologue, views included): every read and result f32, no gather. */
int kf_synth_prologue_reads_ok(const kf_synth *s, const kf_stage *st);

/* Prologue fusion (CPU). Elements a fused stage's function computes per call at most:
 * rows up to this long are staged whole; longer runs are reduced in chunks of it. */
#define KF_PRO_MAX 8192
/* The buffers chain stage st reads, in the order of its function's parameters (the first
 * matmul's A and B, the prologue's other operands, the last matmul's B); returns how many
 * (at most KF_EW_MAX_OPS + 3). The function writes the last matmul's result after them. */
int kf_synth_chain_reads(const kf_synth *s, const kf_stage *st, int *vals);
void kf_synth_chain_params(kf_synth *s, kf_stage *st);
void kf_synth_chain_emit(const kf_synth *s, const kf_stage *st, const kf_point *p, const char *fname, kf_buf *o);
/* 1 when the chain row computes st (a stage fuse_chains made a chain). */
int kf_synth_chain_supports(const kf_synth *s, const kf_stage *st, kf_buf *why);

/* 1 when reduction-family stage st can take an elementwise prologue for its input. */
int kf_synth_reduce_prologue_ok(const kf_synth *s, const kf_stage *st);
/* Emit `static inline void NAME(long f0, long len, float *restrict out, <reads>)`: the
 * elements f0 .. f0+len-1 (flat, row-major) of value x, the one result of elementwise
 * stage st, computed from st's operands, which it takes as `const float *restrict b<v>`
 * in the order of kf_synth_ewise_layout's reads. local (-1: none) is an operand of the
 * domain's shape, read densely, that the caller holds only in part: its b<local> points at
 * the element f0 itself (a row block of a chain's local buffer, tpl_chain.c). */
void kf_synth_prologue_emit(const kf_synth *s, const kf_stage *st, int x, int local, const char *fname,
                            kf_buf *o);

/* Epilogue fusion (CPU norms, kf_stage.epilogue). 1 when elementwise stage e can be
 * computed from value y's elements a run at a time: e reads y only element for element
 * (directly or through a relabelling: at e's flat index) and through no padded map. */
int kf_synth_epilogue_ok(const kf_synth *s, const kf_stage *e, int y);
/* Emit `static inline void NAME(long f0, long len, const float *restrict in, <reads>,
 * <writes>)`: elementwise stage e on its elements f0 .. f0+len-1 (flat, row-major), with
 * y's elements there in in[0 .. len-1]; reads are e's buffers other than y (the layout's
 * bufs, in order), writes its materialised results (the layout's, in order). */
void kf_synth_epilogue_emit(const kf_synth *s, const kf_stage *e, int y, const char *fname, kf_buf *o);
/* 1 when stage j reads value y (directly or through a view of it). */
int kf_synth_stage_reads(const kf_synth *s, int j, int y);
/* Reduction epilogues (redepi.c): mark each CPU GEMM, and each f32 GPU matmul (the SIMT
 * and 3xTF32 kernels, gpu_redepi.c), whose product only a reduction over its last axis
 * reads (sum, mean, max, min, logsumexp; with that reduction's elementwise prologue, if any:
 * a pointwise chain between the two) to compute it in its store stage (kf_stage.redepi).
 * Runs after fuse_epilogues. */
void kf_synth_fuse_reductions(kf_synth *s);
/* For GEMM stage k with a reduction epilogue: the glue before the GEMM function fname
 * (the prologue, fname_ex and fname_epi); the second pass after it (fname_red: partials,
 * the GEMM, the combine, 0 or ENOMEM; p gives the GEMM's thread count); the entry's call. */
void kf_synth_redepi_glue(const kf_synth *s, int k, const char *fname, kf_buf *o);
void kf_synth_redepi_pass(const kf_synth *s, int k, const kf_point *p, const char *fname, kf_buf *o);
void kf_synth_redepi_call(const kf_synth *s, int k, kf_buf *o);
/* The CPU keeps a float32 log-sum-exp over innermost dims unlowered (kf_graph_lower_keeping)
 * where its input is a product's result, directly or through pointwise nodes, so that the
 * product's store stage can compute it (redepi.c); the template cpu.logsumexp_rows
 * computes it otherwise (and at red=0): its support, prologue rule and stage body. */
int kf_synth_cpu_keeps(const kf_graph *g, const kf_node *n, void *ctx);
int kf_synth_lse_rows_supports(const kf_synth *s, const kf_stage *st, kf_buf *why);
int kf_synth_lse_rows_prologue_ok(const kf_synth *s, const kf_stage *st);
void kf_synth_lse_rows_emit(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_buf *o);
/* Elements of a norm's row computed per epilogue call. */
#define KF_EPI_CHUNK 2048

/* A reduction's input dims as alternating kept/reduced groups: size-1 dims dropped,
 * neighbours of the same kind merged (size = product, stride = the innermost's). Shared by
 * the CPU (tpl_reduce.c) and GPU (gpu_reduce.c) reduction templates; returns the count. */
typedef struct rgroup {
    int64_t size, stride;
    int reduced;
} rgroup;
int kf_synth_canon(const kf_shape *sh, uint32_t mask, rgroup *gr);
/* A tensor of shape sh seen as [O, N, I] around its first axis in mask (N along it): the
 * softmax family's and the scans' layout. */
void kf_synth_axis_split(const kf_shape *sh, uint32_t mask, int64_t *O, int64_t *N, int64_t *I);

#endif
