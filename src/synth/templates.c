/*
 * The builtin generator's templates as a registry: one row per (loop nest, platform
 * family), each with supports(stage) -> yes, or no and the reason, its schedule parameters
 * (which carry roles) and its emitter. The planner (synth.c) gives every stage the first
 * row of its platform family that supports it, in the table's order: the fast paths of a
 * class that always win (the row softmax, the norms, the tensor-core matmul) come before
 * the class's general template, and a row never asks for an op by name, only for the op's
 * class, shape rule and operand types. A stage no row supports is refused with every
 * row's reason.
 *
 * A stage that later rows support too is computed by whichever the search measures
 * fastest: its space gets a selector "<prefix>tpl" (role KF_ROLE_TEMPLATE, values the
 * supporting rows in table order, default the first) and each row's parameters under the
 * row's own prefix ("s0.gemm.threads", "s0.matvec.threads"), in use only where the
 * selector picks that row (kf_param.gate). A fast path that does not always win (the
 * matrix-vector product against the GEMM) goes after the general row: the first row stays
 * the default and the one the planner's other decisions ask (kf_stage.tpl), and a later
 * row is offered only where it agrees with it (can_split here; the prologue the first row
 * takes: synth.c fuse_prologues).
 */
#include "tpl.h"
#include "synth_int.h"
#include "gpu_tpl.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

static const kf_node *stage_node(const kf_synth *s, const kf_stage *st) {
    return &s->g->nodes[st->nodes[0]];
}

static const kf_op_def *stage_op(const kf_synth *s, const kf_stage *st) {
    return kf_op_get(stage_node(s, st)->op);
}

/* ---- supports: the class, shape rule and operands a template computes ---- */

static int sup_pointwise(const kf_synth *s, const kf_stage *st, kf_buf *why) {
    (void)s, (void)why;
    return st->kind == KF_STAGE_EWISE; /* clusters hold POINTWISE nodes and VIEW reads (cluster()) */
}

static int sup_reduce(const kf_synth *s, const kf_stage *st, kf_buf *why) {
    const kf_op_def *d = stage_op(s, st);
    if (d->cls == KF_CLASS_REDUCE) return 1;
    kf_buf_printf(why, "%s is a %s op; this template computes the REDUCE class's combiners", d->name,
                  kf_op_class_name(d->cls));
    return 0;
}

/* a reduce-shaped composite with the log-sum-exp combiner, rows innermost (the only form
 * the planner keeps unlowered) */
static int sup_lse_rows(const kf_synth *s, const kf_stage *st, kf_buf *why) {
    const kf_node *n = stage_node(s, st);
    const kf_op_def *d = kf_op_get(n->op);
    if (d->combiner != KF_COMB_LOGSUMEXP || d->cls != KF_CLASS_COMPOSITE) {
        kf_buf_printf(why, "%s is not a log-sum-exp reduction", d->name);
        return 0;
    }
    rgroup gr[KF_MAX_DIMS];
    int m = kf_synth_canon(&s->g->values[n->in[0]].shape, n->attr.axes, gr);
    if (m > 0 && gr[m - 1].reduced) return 1;
    kf_buf_puts(why, "its innermost dims are not reduced (rows only)");
    return 0;
}

/* the softmax family: one axis, same shape out (the SOFTMAX shape rule) */
static int sup_softmax_rows(const kf_synth *s, const kf_stage *st, kf_buf *why) {
    const kf_node *n = stage_node(s, st);
    const kf_op_def *d = kf_op_get(n->op);
    if (d->kind != KF_KIND_SOFTMAX || !d->f64_row) {
        kf_buf_printf(why, "%s has not the softmax shape rule", d->name);
        return 0;
    }
    int naxes = 0;
    for (int j = 0; j < 32; j++) naxes += (n->attr.axes >> j) & 1u;
    if (naxes != 1) {
        kf_buf_printf(why, "%s over %d axes (the row softmax takes one)", d->name, naxes);
        return 0;
    }
    return 1;
}

/* the norms: trailing axes, optional affine weight and bias (the NORM shape rule) */
static int sup_norm_rows(const kf_synth *s, const kf_stage *st, kf_buf *why) {
    const kf_node *n = stage_node(s, st);
    const kf_op_def *d = kf_op_get(n->op);
    if (d->kind != KF_KIND_NORM || !d->f64_row) {
        kf_buf_printf(why, "%s has not the norm shape rule", d->name);
        return 0;
    }
    const kf_shape *xs = &s->g->values[n->in[0]].shape;
    int seen = 0, ok = 1;
    for (int j = 0; j < xs->rank; j++) {
        int red = (n->attr.axes >> j) & 1u;
        if (red) seen = 1;
        else if (seen && xs->d[j] != 1) ok = 0;
    }
    if (!ok || !seen) {
        kf_buf_printf(why, "%s over axes that are not trailing", d->name);
        return 0;
    }
    return 1;
}

static int sup_scan(const kf_synth *s, const kf_stage *st, kf_buf *why) {
    const kf_op_def *d = stage_op(s, st);
    if (d->cls == KF_CLASS_SCAN) return 1;
    kf_buf_printf(why, "%s is a %s op; this template computes the SCAN class's prefix sums and products",
                  d->name, kf_op_class_name(d->cls));
    return 0;
}

static kf_dtype operand_dtype(const kf_synth *s, const kf_stage *st) {
    return s->g->values[stage_node(s, st)->in[0]].dtype;
}

static int sup_contract_f32(const kf_synth *s, const kf_stage *st, kf_buf *why) {
    const kf_op_def *d = stage_op(s, st);
    if (d->cls != KF_CLASS_CONTRACT || d->kind != KF_KIND_MATMUL) {
        kf_buf_printf(why, "%s is not a (batched) matrix product", d->name);
        return 0;
    }
    if (operand_dtype(s, st) != KF_F32) {
        kf_buf_printf(why, "its operands are %s (this template computes f32)",
                      kf_dtype_name(operand_dtype(s, st)));
        return 0;
    }
    return 1;
}

/* the matrix-vector product: one output row or column, dense operands */
static int sup_matvec(const kf_synth *s, const kf_stage *st, kf_buf *why) {
    if (!sup_contract_f32(s, st, why)) return 0;
    return kf_tpl_matvec_supports(&st->mm, why);
}

static int sup_contract_mma(const kf_synth *s, const kf_stage *st, kf_buf *why) {
    const kf_op_def *d = stage_op(s, st);
    if (d->cls != KF_CLASS_CONTRACT || d->kind != KF_KIND_MATMUL) {
        kf_buf_printf(why, "%s is not a (batched) matrix product", d->name);
        return 0;
    }
    if (!kf_gpu_mma_stage(s, st)) {
        kf_buf_printf(why, "its operands are %s (tensor cores take f16 or bf16)",
                      kf_dtype_name(operand_dtype(s, st)));
        return 0;
    }
    if (!kf_gpu_mma_arch_ok(s->platform, &s->dev)) {
        kf_buf_printf(why, "%s%s%s has no mma instructions this template emits (cuda, sm_80 or newer)",
                      s->platform, s->dev.arch[0] ? " " : "", s->dev.arch);
        return 0;
    }
    return 1;
}

/* the GPU pointwise kernel's buffers fit one kernel's parameters */
static int sup_gpu_pointwise(const kf_synth *s, const kf_stage *st, kf_buf *why) {
    if (!sup_pointwise(s, st, why)) return 0;
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, st, &lay);
    if (lay.nops > KF_GK_MAX_PARAMS) {
        kf_buf_printf(why, "an elementwise cluster with %d buffers (a GPU kernel takes at most %d)",
                      lay.nops, KF_GK_MAX_PARAMS);
        return 0;
    }
    return 1;
}

/* ---- CPU parameters and emitters ---- */

static void add_threads_param(kf_space *sp, const char *prefix, const kf_device_info *dev,
                              int64_t work) {
    long vals[KF_MAX_PARAM_VALUES];
    int n = 0;
    int maxt = dev->threads > 0 ? dev->threads : 1;
    for (long t = 1; t < maxt && n < KF_MAX_PARAM_VALUES - 1; t *= 2) vals[n++] = t;
    vals[n++] = maxt;
    /* tiny problems are not worth waking threads for */
    int dflt = work < 32768 ? 0 : n - 1;
    kf_tpl_add_param(sp, prefix, "threads", KF_ROLE_THREADS, vals, n, dflt);
}

static void cpu_pointwise_params(kf_synth *s, kf_stage *st) {
    add_threads_param(&s->space, st->prefix, &s->dev,
                      kf_shape_numel(&s->g->values[stage_node(s, st)->out].shape));
    kf_synth_ewise_params(s, st);
}

static void cpu_rows_params(kf_synth *s, kf_stage *st) {
    add_threads_param(&s->space, st->prefix, &s->dev,
                      kf_shape_numel(&s->g->values[stage_node(s, st)->in[0]].shape));
    kf_synth_reduce_params(s, st);
}

static void cpu_lse_params(kf_synth *s, kf_stage *st) {
    add_threads_param(&s->space, st->prefix, &s->dev,
                      kf_shape_numel(&s->g->values[stage_node(s, st)->in[0]].shape));
}

static void cpu_scan_params(kf_synth *s, kf_stage *st) {
    add_threads_param(&s->space, st->prefix, &s->dev,
                      kf_shape_numel(&s->g->values[stage_node(s, st)->in[0]].shape));
    kf_synth_scan_params(s, st);
}

static void cpu_gemm_params(kf_synth *s, kf_stage *st) {
    kf_tpl_matmul_params(&st->mm, &s->dev, &s->space, st->prefix);
}

static void cpu_gemm_emit(const kf_synth *s, const kf_stage *st, const kf_point *p,
                          const char *fname, kf_buf *o) {
    kf_tpl_matmul_emit(o, fname, &st->mm, &s->space, p, st->prefix);
}

static void cpu_matvec_params(kf_synth *s, kf_stage *st) {
    kf_tpl_matvec_params(&st->mm, &s->dev, &s->space, st->prefix);
}

static void cpu_matvec_emit(const kf_synth *s, const kf_stage *st, const kf_point *p,
                            const char *fname, kf_buf *o) {
    kf_tpl_matvec_emit(o, fname, &st->mm, &s->space, p, st->prefix);
}

/* ---- GPU parameters and emitters (the budget of launches and scratch: gpu.c) ---- */

static void gpu_pointwise_params(kf_synth *s, kf_stage *st, int allow_split) {
    (void)allow_split;
    kf_gpu_ewise_params(s, st);
}

static void gpu_pointwise_emit(kf_gplan *gp, int k, const kf_stage *st, const kf_point *p) {
    (void)k;
    kf_gpu_ewise_emit(gp, st, p);
}

static void gpu_simt_params(kf_synth *s, kf_stage *st, int allow_split) {
    (void)allow_split;
    kf_gpu_matmul_params(s, st);
}

static void gpu_simt_emit(kf_gplan *gp, int k, const kf_stage *st, const kf_point *p) {
    (void)k;
    kf_gpu_matmul_emit(gp, st, p);
}

static void gpu_mma_params(kf_synth *s, kf_stage *st, int allow_split) {
    (void)allow_split;
    kf_gpu_mma_params(s, st);
}

static void gpu_mma_emit(kf_gplan *gp, int k, const kf_stage *st, const kf_point *p) {
    (void)k;
    kf_gpu_mma_emit(gp, st, p);
}

/* ---- the table: per platform family, fast paths before the general template ---- */

static const kf_tpl_def templates[] = {
    /* CPU: C11 + OpenMP functions */
    {.name = "cpu.gemm", .kind = KF_STAGE_MATMUL, .doc = "blocked, packed GEMM with a register micro-kernel",
     .supports = sup_contract_f32, .cpu_params = cpu_gemm_params, .cpu_emit_fn = cpu_gemm_emit, .epilogue = 1},
    /* after the GEMM: both support a matrix times a vector, the search times the two */
    {.name = "cpu.matvec", .kind = KF_STAGE_MATMUL, .doc = "matrix-vector product (M or N is 1), dot products along K",
     .supports = sup_matvec, .cpu_params = cpu_matvec_params, .cpu_emit_fn = cpu_matvec_emit},
    {.name = "cpu.softmax_rows", .kind = KF_STAGE_SOFTMAX, .doc = "softmax family, rows or columns",
     .supports = sup_softmax_rows, .cpu_params = cpu_rows_params, .cpu_emit_body = kf_synth_reduce_emit,
     .prologue_ok = kf_synth_reduce_prologue_ok},
    {.name = "cpu.norm_rows", .kind = KF_STAGE_NORM, .doc = "norms over trailing axes",
     .supports = sup_norm_rows, .cpu_params = cpu_rows_params, .cpu_emit_body = kf_synth_reduce_emit,
     .prologue_ok = kf_synth_reduce_prologue_ok, .epilogue = 1},
    {.name = "cpu.reduce", .kind = KF_STAGE_REDUCE, .doc = "axis reductions, row and column layouts",
     .supports = sup_reduce, .cpu_params = cpu_rows_params, .cpu_emit_body = kf_synth_reduce_emit,
     .prologue_ok = kf_synth_reduce_prologue_ok},
    {.name = "cpu.scan", .kind = KF_STAGE_SCAN, .doc = "prefix sums and products, lines or columns",
     .supports = sup_scan, .cpu_params = cpu_scan_params, .cpu_emit_body = kf_synth_scan_emit},
    {.name = "cpu.pointwise", .kind = KF_STAGE_EWISE, .doc = "fused pointwise clusters, vectorised",
     .supports = sup_pointwise, .cpu_params = cpu_pointwise_params, .cpu_emit_body = kf_synth_ewise_emit},
    /* GPU: the kernel form, rendered for OpenCL C, CUDA and MSL */
    {.name = "gpu.mma", .gpu = 1, .kind = KF_STAGE_MATMUL, .doc = "tensor-core matmul (f16/bf16)",
     .supports = sup_contract_mma, .gpu_params = gpu_mma_params, .gpu_emit = gpu_mma_emit},
    {.name = "gpu.simt_matmul", .gpu = 1, .kind = KF_STAGE_MATMUL, .doc = "tiled SIMT matmul (f32)",
     .supports = sup_contract_f32, .gpu_params = gpu_simt_params, .gpu_emit = gpu_simt_emit, .epilogue = 1,
     .prologue_ok = kf_gpu_matmul_prologue_ok, .row_reduce = 1},
    {.name = "gpu.softmax_rows", .gpu = 1, .kind = KF_STAGE_SOFTMAX, .doc = "softmax family, one team a row",
     .supports = sup_softmax_rows, .gpu_params = kf_gpu_reduce_params, .gpu_emit = kf_gpu_reduce_emit,
     .prologue_ok = kf_gpu_reduce_prologue_ok, .can_split = 1},
    {.name = "gpu.norm_rows", .gpu = 1, .kind = KF_STAGE_NORM, .doc = "norms, one team a row",
     .supports = sup_norm_rows, .gpu_params = kf_gpu_reduce_params, .gpu_emit = kf_gpu_reduce_emit,
     .prologue_ok = kf_gpu_reduce_prologue_ok, .can_split = 1},
    {.name = "gpu.reduce", .gpu = 1, .kind = KF_STAGE_REDUCE, .doc = "axis reductions, row and column layouts",
     .supports = sup_reduce, .gpu_params = kf_gpu_reduce_params, .gpu_emit = kf_gpu_reduce_emit,
     .prologue_ok = kf_gpu_reduce_prologue_ok, .can_split = 1, .epilogue = 1},
    {.name = "gpu.scan", .gpu = 1, .kind = KF_STAGE_SCAN, .doc = "prefix sums and products, a group a line",
     .supports = sup_scan, .gpu_params = kf_gpu_scan_params, .gpu_emit = kf_gpu_scan_emit},
    {.name = "gpu.pointwise", .gpu = 1, .kind = KF_STAGE_EWISE, .doc = "fused pointwise clusters",
     .supports = sup_gpu_pointwise, .gpu_params = gpu_pointwise_params, .gpu_emit = gpu_pointwise_emit},
    /* CPU, last so that the rows above keep their registry indices (stored selector
     * values): the planner's chain (synth.c fuse_chains) gives it the chain's last matmul,
     * which no other row computes then */
    {.name = "cpu.chain", .kind = KF_STAGE_MATMUL,
     .doc = "matmul -> row softmax -> matmul, row-blocked, intermediates kept in cache",
     .supports = kf_synth_chain_supports, .cpu_params = kf_synth_chain_params, .cpu_emit_fn = kf_synth_chain_emit},
    /* GPU, after the rows above for the same reason: a reduce-shaped composite that GPUs
     * keep unlowered (synth.c gpu_keeps) */
    {.name = "gpu.logsumexp_rows", .gpu = 1, .kind = KF_STAGE_REDUCE, .doc = "log-sum-exp, one read of a row",
     .supports = sup_lse_rows, .gpu_params = kf_gpu_reduce_params, .gpu_emit = kf_gpu_reduce_emit,
     .prologue_ok = kf_gpu_reduce_prologue_ok, .can_split = 1},
    /* CPU, last: the same composite, which the CPU keeps unlowered after a product
     * (redepi.c kf_synth_cpu_keeps) so that the GEMM's store stage can compute it; this row
     * computes it as a stage of its own (where it is not fused, and at s<k>.red=0) */
    {.name = "cpu.logsumexp_rows", .kind = KF_STAGE_REDUCE, .doc = "log-sum-exp, one read of a row",
     .supports = kf_synth_lse_rows_supports, .cpu_params = cpu_lse_params, .cpu_emit_body = kf_synth_lse_rows_emit,
     .prologue_ok = kf_synth_lse_rows_prologue_ok},
};

int kf_tpl_count(void) { return (int)(sizeof templates / sizeof templates[0]); }

const kf_tpl_def *kf_tpl_at(int i) {
    return i >= 0 && i < kf_tpl_count() ? &templates[i] : NULL;
}

static const char *stage_kind_name(kf_stage_kind k) {
    switch (k) {
    case KF_STAGE_EWISE: return "pointwise";
    case KF_STAGE_REDUCE: return "reduce";
    case KF_STAGE_SOFTMAX: return "softmax";
    case KF_STAGE_NORM: return "norm";
    case KF_STAGE_MATMUL: return "contract";
    case KF_STAGE_SCAN: return "scan";
    case KF_STAGE_KIND_COUNT: break;
    }
    return "?";
}

const char *kf_tpl_short_name(const kf_tpl_def *t) {
    const char *dot = strchr(t->name, '.');
    return dot ? dot + 1 : t->name;
}

const char *kf_synth_template_name(long v) {
    const kf_tpl_def *t = v >= 0 && v < kf_tpl_count() ? &templates[v] : NULL;
    return t ? kf_tpl_short_name(t) : NULL;
}

kf_status kf_tpl_select(const kf_synth *s, kf_stage *st, kf_error *err) {
    int gpu = kf_synth_is_gpu(s->platform);
    kf_buf why = {0};
    st->tpl = NULL;
    st->nalts = 0;
    for (int i = 0; i < kf_tpl_count(); i++) {
        const kf_tpl_def *t = &templates[i];
        if (t->gpu != gpu || t->kind != st->kind) continue;
        if (st->tpl && (st->nalts >= KF_TPL_MAX_ALTS || t->can_split != st->tpl->can_split)) continue;
        kf_buf r = {0};
        if (t->supports(s, st, &r)) {
            if (!st->tpl) st->tpl = t;
            st->alts[st->nalts++] = t;
        } else if (!st->tpl) {
            kf_buf_printf(&why, "%s%s: %s", why.len ? "; " : "", t->name, r.data ? r.data : "no");
        }
        kf_buf_free(&r);
    }
    kf_status rc = KF_OK;
    if (!st->tpl) {
        const kf_node *n = stage_node(s, st);
        rc = kf_error_set(err, KF_ERR_UNSUPPORTED, s->g->path, n->line, n->col,
                          "no %s template of the builtin generator computes this %s stage (%s): %s",
                          s->platform, stage_kind_name(st->kind), kf_op_get(n->op)->name,
                          why.data ? why.data : "the family has none");
    }
    kf_buf_free(&why);
    return rc;
}

/* The stage as row t sees it: its parameters under "<prefix><row>.". */
static void row_view(const kf_stage *st, const kf_tpl_def *t, kf_stage *v) {
    *v = *st;
    snprintf(v->prefix, sizeof v->prefix, "%s%s.", st->prefix, kf_tpl_short_name(t));
}

static void row_params(kf_synth *s, const kf_tpl_def *t, kf_stage *st, int allow_split) {
    if (t->gpu) t->gpu_params(s, st, allow_split);
    else t->cpu_params(s, st);
}

void kf_tpl_stage_params(kf_synth *s, kf_stage *st, int allow_split) {
    if (st->nalts <= 1) {
        row_params(s, st->tpl, st, allow_split);
        return;
    }
    long vals[KF_TPL_MAX_ALTS];
    for (int j = 0; j < st->nalts; j++) vals[j] = (long)(st->alts[j] - templates);
    int sel = s->space.nparams;
    kf_tpl_add_param(&s->space, st->prefix, "tpl", KF_ROLE_TEMPLATE, vals, st->nalts, 0);
    if (s->space.nparams == sel) return; /* the space is full: kf_synth_plan refuses the task */
    if (st->gpu_budget > 0) st->gpu_budget--;
    for (int j = 0; j < st->nalts; j++) {
        kf_stage v;
        row_view(st, st->alts[j], &v);
        /* GPU rows share the stage's parameter slots out (kf_gpu_param) */
        int share = st->gpu_budget / (st->nalts - j);
        v.gpu_budget = share;
        int first = s->space.nparams;
        row_params(s, st->alts[j], &v, allow_split);
        st->gpu_budget -= share - v.gpu_budget;
        st->nfixed = v.nfixed; /* the fixed ones carry their full names */
        memcpy(st->fixed_name, v.fixed_name, sizeof st->fixed_name);
        memcpy(st->fixed_val, v.fixed_val, sizeof st->fixed_val);
        for (int i = first; i < s->space.nparams; i++) {
            s->space.p[i].gate = sel + 1;
            s->space.p[i].gate_value = vals[j];
        }
    }
}

const kf_tpl_def *kf_tpl_chosen(const kf_synth *s, const kf_stage *st, const kf_point *p, kf_stage *view) {
    *view = *st;
    if (st->nalts <= 1) return st->tpl;
    char full[48];
    snprintf(full, sizeof full, "%stpl", st->prefix);
    long v = kf_point_get(&s->space, p, full, -1);
    for (int j = 0; j < st->nalts; j++)
        if (st->alts[j] - templates == v) {
            row_view(st, st->alts[j], view);
            return st->alts[j];
        }
    assert(!"the point's template is not one of the stage's");
    return st->tpl;
}
