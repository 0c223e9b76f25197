/*
 * Internal interface of the builtin generator's GPU path (opencl, cuda, metal), shared by
 * gpu.c (plan parameters, candidate assembly) and the GPU op templates (gpu_ewise.c,
 * gpu_reduce.c, gpu_matmul.c). Not part of the public API.
 *
 * A GPU candidate is written once in the kernel form of src/render/render.h and rendered
 * for the platform's language. The planner's stage split (cluster() in synth.c) is the
 * CPU one; each stage becomes one or two kernels (two for two-pass reductions), run in
 * order by `// kforge:launch` lines. Values that cross stages and are not graph outputs
 * live in scratch buffers named t<value id>; a stage's own temporaries (partials of a
 * two-pass reduction) are scratch buffers named p<stage> / q<stage>. An elementwise stage
 * fused into the reduction-family stage it feeds (kf_stage.prologue) has no kernel: the
 * templates write loads of its value x as b<x>[i] as usual, and kf_gk_launch replaces
 * them by calls of the helper kf_pro<x>(i, operands...) and the parameter b<x> by the
 * operands, so every template takes a prologue without knowing it. An elementwise stage
 * fused as the epilogue of the matmul or an axis reduction (kf_stage.epilogue) has no
 * kernel either: the template's stores `b<y>[i] = v;` of its result y become calls of
 * kf_epi<y>(i, v, operands..., results...) at launch (gpu_epi.c).
 *
 * Conventions inside kernels: a buffer parameter for value v is named b<v>; shapes, sizes
 * and the launch geometry are literals (the schedule point is baked into the text); index
 * arithmetic uses gp->ix ("int" while every tensor has fewer than 2^31 elements, else
 * "long").
 */
#ifndef KF_SYNTH_GPU_TPL_H
#define KF_SYNTH_GPU_TPL_H

#include "synth_int.h"
#include "render/render.h"

/* Device facts the templates plan with, with defaults where the probe gave none. */
typedef struct kf_gdev {
    int max_wg;        /* work-items per group */
    int64_t local_mem; /* bytes of local (shared) memory per group */
    int64_t local_mem_optin; /* with CUDA's opt-in (dynamic shared memory), else local_mem */
    int sg;            /* sub-group lanes, 0 = no sub-group operations */
    int cu;            /* compute units */
    int is_cpu;        /* a CPU-type OpenCL device (PoCL): big groups, few items each */
} kf_gdev;

void kf_gpu_dev(const kf_synth *s, kf_gdev *d);

/* One candidate being assembled. */
typedef struct kf_gplan {
    const kf_synth *s;
    const kf_lang *L;
    kf_buf kernels;   /* rendered kernels */
    kf_buf lines;     /* scratch and launch lines, in order */
    int nlaunch, nscratch;
    char ix[8];       /* index type: "int" or "long" */
    kf_status st;     /* first render failure */
    kf_error *err;
} kf_gplan;

/* A kernel being built: its signature (params), the launch argument of each param and
 * its body in the kernel form. */
typedef struct kf_gk {
    kf_gkernel k;
    char arg[KF_GK_MAX_PARAMS][40];
    kf_buf body;
    int64_t smem;     /* dynamic shared memory bytes (CUDA's smem= launch key); 0 = none */
} kf_gk;

/* Start kernel `name`; body is empty, no params. */
void kf_gk_begin(kf_gk *k, const char *name);
/* Param b<v> for value v, passed as the value's task buffer or its t<v> scratch. */
void kf_gk_value(const kf_gplan *gp, kf_gk *k, int v, kf_gparam_kind kind);
/* Param `name` passed as scratch buffer `name` (declared with kf_gplan_scratch). */
void kf_gk_scratch(kf_gk *k, const char *name, const char *ctype);
/* Declare scratch buffer `name` of `bytes` bytes. */
void kf_gplan_scratch(kf_gplan *gp, const char *name, int64_t bytes);
/* Render text (helpers, generated functions) into the plan's kernels, unless the plan has
 * failed already; a rendering error fails it. */
void kf_gplan_text(kf_gplan *gp, const char *text);
/* 1 for a character of a C identifier. */
int kf_gpu_ident_char(char c);
/* Render k (wg = local size) and append its launch line; frees the body. */
void kf_gk_launch(kf_gplan *gp, kf_gk *k, int ndims, const int64_t *global,
                  const int64_t *local);

/* Element type of value v in the kernel form ("float", "long", or "ushort" for the raw
 * bits of f16/bf16 values, which only the mma template reads and writes). */
const char *kf_gpu_ctype(const kf_graph *g, int v);
/* Smallest power of two >= n (n >= 1). */
int64_t kf_gpu_pow2_ceil(int64_t n);
/* Powers of two in [lo, hi] into vals (at most KF_MAX_PARAM_VALUES); returns the count. */
int kf_gpu_pow2_values(long lo, long hi, long *vals);
/* Index of the value nearest to want among vals[0..n-1]. */
int kf_gpu_nearest(const long *vals, int n, long want);
/* The global id of dim 0 in the index type ($gid is int-valued). */
const char *kf_gpu_gid0(const kf_gplan *gp);
/* Integer literal in the index type ("17" or "17L"). */
const char *kf_gpu_lit(const kf_gplan *gp, int64_t v, char *buf, size_t cap);

/* Declare parameter `name` of stage st with values[0..n-1], default values[dflt]: into
 * the space while the stage's budget lasts and the parameter has a choice, else fixed at
 * the default. */
void kf_gpu_param(kf_synth *s, kf_stage *st, const char *name, kf_role role, const long *values, int n,
                  int dflt);
/* Value of stage parameter `name` at p (from the space, else the fixed default, else def). */
long kf_gpu_get(const kf_synth *s, const kf_stage *st, const kf_point *p, const char *name, long def);

/* Templates: *_params declares the stage's parameters (kf_gpu_param, defaults from the
 * device); *_emit appends the stage's kernels and launch lines for point p, making any
 * point valid (clamping to the shape and the device) rather than failing. */
void kf_gpu_ewise_params(kf_synth *s, kf_stage *st);
void kf_gpu_ewise_emit(kf_gplan *gp, const kf_stage *st, const kf_point *p);

/* 1 when reduction-family stage st can take an elementwise prologue for its input: its
 * kernels then read the input through kf_pro<x>(index, operands...) (see kf_gk_launch). */
int kf_gpu_reduce_prologue_ok(const kf_synth *s, const kf_stage *st);
void kf_gpu_reduce_params(kf_synth *s, kf_stage *st, int allow_split);
void kf_gpu_reduce_emit(kf_gplan *gp, int k, const kf_stage *st, const kf_point *p);

void kf_gpu_matmul_params(kf_synth *s, kf_stage *st);
/* 1 when f32 matmul stage st may take an elementwise prologue (views included) for A or B:
 * where the 3xTF32 path exists (cuda sm_80+), so that elsewhere the plans stay as they were;
 * both paths then read that operand element by element through kf_pro<x>. */
int kf_gpu_matmul_prologue_ok(const kf_synth *s, const kf_stage *st);
/* The value st's fused prologue computes (the input of its first node that the fused
 * stage writes; for a matmul, the value an operand reads, kf_synth_mm_operand), -1
 * without one. */
int kf_gpu_prologue_value(const kf_synth *s, const kf_stage *st);
/* 1 when operand value v of st (a matmul's a_val or b_val) is that value: a template then
 * reads it element by element, each `b<v>[i]` becoming kf_pro<v>(i, ...). */
int kf_gpu_prologue_reads(const kf_synth *s, const kf_stage *st, int v);
/* A matmul's fused prologue with its operand's addressing split (gpu_prosplit.c): the
 * operand x is read as matrices of R rows of C contiguous elements; kcol: its columns are
 * the K index (A plain, B transposed), else its rows; top: the domain factors at R*C too
 * (the matrix's part is computed with the M/N part); nt: index values a part holds (the
 * reads' offsets, then the guards); args: ", b<v>..." the helpers' buffers. on = 0: the
 * flat helper kf_pro<x> alone (the dims do not factor at C, too many values, a gather). */
typedef struct kf_gpu_prosplit {
    int on, x, kcol, top, nt;
    int64_t R, C;
    char args[160];
} kf_gpu_prosplit;
/* Fill sp for matmul stage st's prologue value x (on = 0 for any other stage or value). */
void kf_gpu_prologue_split(const kf_synth *s, const kf_stage *st, int x, kf_gpu_prosplit *sp);
/* Emit sp's helpers kf_prm<x>, kf_prk<x>, kf_prs<x>, kf_prx<x> (sp->on). */
void kf_gpu_emit_prologue_split(kf_gplan *gp, const kf_stage *st, const kf_gpu_prosplit *sp);
/* The prologue helpers' tail (gpu.c): with off<r>, gd<k> declared, the reads, the fused
 * stage e's nodes up to x and the return of r<x>, into f. */
void kf_gpu_prologue_body(const kf_gplan *gp, const kf_stage *e, const kf_ew_layout *lay, int x, kf_buf *f);
/* The batch offsets aoff, boff, coff (elements) of the group's matrices, from the group's
 * z index (both matmul templates launch one z slice per output matrix). */
void kf_gpu_matmul_offsets(kf_buf *o, const kf_gplan *gp, const kf_matmul_desc *d);
void kf_gpu_matmul_emit(kf_gplan *gp, const kf_stage *st, const kf_point *p);

/* Scans along one axis (gpu_scan.c). */
void kf_gpu_scan_params(kf_synth *s, kf_stage *st, int allow_split);
void kf_gpu_scan_emit(kf_gplan *gp, int k, const kf_stage *st, const kf_point *p);

/* Epilogues (gpu_epi.c): an elementwise stage computed where its host stage (a matmul, an
 * axis reduction) stores its result (kf_stage.epilogue). */
/* 1 when host h's kernels can take elementwise stage e as their epilogue: h's result is
 * f32 and the kernel keeps within KF_GK_MAX_PARAMS with e's operands and results. */
int kf_gpu_epilogue_fits(const kf_synth *s, const kf_stage *h, const kf_stage *e);
/* 1 when st's result goes to a fused epilogue at this point (the template then stores it
 * only as scalar `b<y>[i] = v;` statements). */
int kf_gpu_stage_has_epilogue(const kf_synth *s, const kf_stage *st);
/* Append the helper kf_epi<y>(f, v, operands..., results...) of host h's epilogue. */
void kf_gpu_emit_epilogue(kf_gplan *gp, const kf_stage *h);
/* The same helper for elementwise stage e reading y (kf_synth_epilogue_ok); with x >= 0
 * (a value of e) it is `float kf_rp<x>(f, v, operands..., results...)` and returns x's
 * element at f (a chain between a product and the reduction fused into its store stage,
 * gpu_redepi.c). */
void kf_gpu_emit_pointwise_at(kf_gplan *gp, const kf_stage *e, int y, int x);
/* In kernel k, stores `b<y>[i] = v;` of a value whose epilogue is fused become calls of
 * kf_epi<y>, and the parameter b<y> gives way to the epilogue's operands and results
 * (kf_gk_launch); any other use of b<y> is an internal error. */
void kf_gpu_substitute_epilogue(kf_gplan *gp, kf_gk *k);
/* The epilogue's parameters: "<prefix>epi" (1 fused, 0 apart) on a host, and a fused
 * epilogue stage's own parameters gated on its host's epi=0. */
void kf_gpu_epilogue_params(kf_synth *s, kf_stage *st);

/* Row reductions in the f32 matmul's store stage (gpu_redepi.c; kf_stage.redepi): the SIMT
 * kernel's and the 3xTF32 kernel's. */
/* The host's "<prefix>red" (1 fused, 0 apart), on both paths (not gated on tc). */
void kf_gpu_redepi_param(kf_synth *s, kf_stage *st);
/* The SIMT matmul kernel's tile as the store stage sees it: rows = batch * M, gx blocks a row. */
typedef struct kf_gpu_redtile {
    int64_t M, N, rows, tm, tn, rm, rn, TX, TY, gx;
    int rl;
} kf_gpu_redtile;
/* Local-memory bytes the combine of nt items needs (0 without a fused reduction). */
int64_t kf_gpu_redepi_local_bytes(const kf_synth *s, const kf_stage *st, int64_t nt);
/* The partials' scratch pr<stage> (rows x gx partials, pairs for logsumexp) and kernel
 * k's parameter for it. */
void kf_gpu_redepi_scratch(kf_gplan *gp, kf_gk *k, const kf_stage *st, int64_t rows, int64_t gx);
/* SIMT: the partials' scratch parameter and the local arrays, then (after the K loop)
 * the block's partials of every row; both paths: the second launch that combines them
 * (only t's M, N, rows and gx are read). */
void kf_gpu_redepi_decl(kf_gplan *gp, kf_gk *k, const kf_stage *st, const kf_gpu_redtile *t);
void kf_gpu_redepi_store(kf_gplan *gp, kf_gk *k, const kf_stage *st, const kf_gpu_redtile *t);
void kf_gpu_redepi_combine(kf_gplan *gp, const kf_stage *st, const kf_gpu_redtile *t);
/* The 3xTF32 kernel's block as its store stage sees it: a bm x bn block tile of warps_n
 * warps along N (each MI x NI m16n8 tiles of acc[][][4]), NT threads, gx blocks a row;
 * the kernel names row0, col0, tn_ (the block's tile column), coff, wm0, wn0, warp, g, t,
 * tid and the dynamic shared array kf_smf. */
typedef struct kf_gpu_redmma {
    int64_t M, N, bm, bn, MI, NI, warps_n, NT, gx;
} kf_gpu_redmma;
/* Shared-memory bytes its store stage needs (0 without a fused reduction). */
int64_t kf_gpu_redepi_mma_smem(const kf_synth *s, const kf_stage *st, int64_t bm, int64_t warps_n);
/* After the K loop (and the ring's last wait): the block's partial of every row. */
void kf_gpu_redepi_mma_store(kf_gplan *gp, kf_gk *k, const kf_stage *st, const kf_gpu_redmma *t);

/* Tensor-core matmul for f16/bf16 operands (gpu_mma.c; CUDA, sm_80 and newer). */
/* 1 when st is a matmul stage of 16-bit operands (it then takes the mma template). */
int kf_gpu_mma_stage(const kf_synth *s, const kf_stage *st);
/* 1 when the platform and device run the mma template (cuda, arch sm_80 or newer). */
int kf_gpu_mma_arch_ok(const char *platform, const kf_device_info *dev);
void kf_gpu_mma_params(kf_synth *s, kf_stage *st);
void kf_gpu_mma_emit(kf_gplan *gp, const kf_stage *st, const kf_point *p);
/* Shared with the f32 template (gpu_mma32.c): the PTX helpers' kernel-form text (cp.async,
 * ldmatrix, mma; guarded, so rendered once per translation unit), the XOR swizzle of a
 * shared-memory row of `chunks` 16-byte chunks (expression of `row`, into out), and the
 * block's tile coordinates row0, col0 in groups of gm tile rows. */
extern const char kf_gpu_mma_helpers[];
/* "const int ok = ..." for a tile copy's 16-byte chunk at (x, k) of an operand of extent
 * ext tiled by tile, K tiled by bk: checks only for the dims the tiles do not divide. */
void kf_gpu_mma_chunk_ok(kf_buf *b, int64_t ext, int64_t tile, int64_t K, int64_t bk);
/* A tensor-core point made valid for an M x N product: block tiles no larger than the
 * matrix needs (at least 64), warp tiles within them, at most 8 warps a block. */
void kf_gpu_mma_fit_tiles(int64_t M, int64_t N, int64_t *bm, int64_t *bn, int64_t *wm, int64_t *wn);
void kf_gpu_mma_swizzle(int64_t chunks, const char *row, char *out, size_t cap);
void kf_gpu_mma_tile_order(kf_buf *o, int64_t gx, int64_t gy, int64_t gm, int64_t bm, int64_t bn);

/* 3xTF32 tensor-core matmul for f32 operands (gpu_mma32.c; CUDA, sm_80 and newer), the
 * SIMT matmul's alternative where its parameter tc is 1. */
/* 1 when stage st (an f32 matmul) may take it: the platform and device run mma
 * (kf_gpu_mma_arch_ok); a fused epilogue is taken at the stores (gpu_epi.c), a fused
 * prologue at the operand's element-wise tile loads. */
int kf_gpu_tf32_ok(const kf_synth *s, const kf_stage *st);
/* 1 when the 3xTF32 path should be the default (a matrix large enough to fill the device
 * with 128 x 128 tiles). */
int kf_gpu_tf32_default(const kf_synth *s, const kf_stage *st);
void kf_gpu_tf32_params(kf_synth *s, kf_stage *st);
void kf_gpu_tf32_emit(kf_gplan *gp, const kf_stage *st, const kf_point *p);

/* Whole-candidate entry points used by synth.c. */
kf_status kf_synth_gpu_check(const kf_synth *s, kf_error *err);
void kf_synth_gpu_params(kf_synth *s);
kf_status kf_synth_gpu_render(const kf_synth *s, const kf_point *p, kf_candidate *c,
                              kf_error *err);

#endif
