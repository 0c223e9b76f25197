/*
 * The builtin generator's template registry (src/synth/templates.c): every row is
 * complete for its platform family, every stage kind has a template in every family, a
 * stage gets the first row that supports it (fast paths by class, shape rule and operand
 * types, never by op name), a stage later rows support too gets a selector between them
 * in its space (and a stage one row supports gets none), and a stage no row supports is
 * refused with each row's reason.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "kforge/ir.h"
#include "kforge/synth.h"
#include "synth/synth_int.h"

Test(tpl_registry, rows_are_complete_and_cover_every_stage_kind) {
    int have[2][KF_STAGE_KIND_COUNT] = {{0}};
    for (int i = 0; i < kf_tpl_count(); i++) {
        const kf_tpl_def *t = kf_tpl_at(i);
        cr_assert(t->name && t->supports && t->doc, "row %d", i);
        for (int j = 0; j < i; j++) cr_assert_str_neq(kf_tpl_at(j)->name, t->name);
        if (t->gpu) {
            cr_assert(t->gpu_params && t->gpu_emit && !t->cpu_params, "%s", t->name);
        } else {
            cr_assert(t->cpu_params && !t->gpu_params, "%s", t->name);
            cr_assert((t->cpu_emit_body != NULL) != (t->cpu_emit_fn != NULL), "%s: one emitter", t->name);
        }
        have[t->gpu][t->kind] = 1;
    }
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < KF_STAGE_KIND_COUNT; k++) cr_assert(have[f][k], "family %d has no template for kind %d", f, k);
    cr_assert_null(kf_tpl_at(kf_tpl_count()));
}

/* one node of op over inputs of the given shapes and dtype, its result the output */
static kf_graph *one_node(kf_op op, int nin, const kf_shape *shapes, kf_dtype dt) {
    kf_error err = {0};
    kf_graph *g = kf_graph_new("t");
    int ins[KF_MAX_NODE_IN];
    for (int k = 0; k < nin; k++) {
        char nm[8];
        snprintf(nm, sizeof nm, "x%d", k);
        ins[k] = kf_graph_add_input(g, nm, dt, &shapes[k], &err);
        cr_assert_geq(ins[k], 0, "%s", err.msg);
    }
    int y = kf_graph_add_node(g, op, ins, nin, NULL, "y", 1, 1, &err);
    cr_assert_geq(y, 0, "%s", err.msg);
    cr_assert_eq(kf_graph_mark_output(g, y, &err), KF_OK);
    return g;
}

static void device(const char *platform, const char *arch, kf_device_info *d) {
    memset(d, 0, sizeof *d);
    snprintf(d->platform, sizeof d->platform, "%s", platform);
    snprintf(d->arch, sizeof d->arch, "%s", arch);
    d->cores = d->threads = 2;
    d->simd_bits = 256;
    d->l1d_bytes = 32 << 10, d->l2_bytes = 1 << 20, d->l3_bytes = 16 << 20;
    if (strcmp(platform, "cpu") != 0) {
        snprintf(d->device_type, sizeof d->device_type, "gpu");
        d->compute_units = 16, d->max_wg = 1024;
        d->max_wi[0] = d->max_wi[1] = d->max_wi[2] = 1024;
        d->local_mem_bytes = 48 << 10;
        d->global_mem_bytes = d->max_alloc_bytes = (int64_t)8 << 30;
        d->subgroup_size = 32;
    }
}

/* the template the planner gave the task's only stage */
static void expect_template(kf_op op, int nin, const kf_shape *shapes, kf_dtype dt, const char *platform,
                            const char *arch, const char *want) {
    kf_graph *g = one_node(op, nin, shapes, dt);
    kf_device_info dev;
    device(platform, arch, &dev);
    kf_synth *s = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_synth_plan(g, platform, &dev, &s, &err), KF_OK, "%s on %s: %s",
                 kf_op_get(op)->name, platform, err.msg);
    cr_assert_eq(s->nst, 1);
    cr_assert_str_eq(s->st[0].tpl->name, want, "%s on %s", kf_op_get(op)->name, platform);
    kf_synth_free(s);
    kf_graph_free(g);
}

Test(tpl_registry, stages_get_the_first_template_that_supports_them) {
    kf_shape v = {.rank = 2, .d = {4, 33}};
    kf_shape two[2] = {v, {.rank = 2, .d = {33, 5}}};
    expect_template(KF_OP_RELU, 1, &v, KF_F32, "cpu", "", "cpu.pointwise");
    expect_template(KF_OP_SOFTMAX, 1, &v, KF_F32, "cpu", "", "cpu.softmax_rows");
    expect_template(KF_OP_LAYER_NORM, 1, &v, KF_F32, "cpu", "", "cpu.norm_rows");
    expect_template(KF_OP_SUM, 1, &v, KF_F32, "cpu", "", "cpu.reduce");
    expect_template(KF_OP_MATMUL, 2, two, KF_F32, "cpu", "", "cpu.gemm");
    expect_template(KF_OP_ARGMAX, 1, &v, KF_F32, "opencl", "", "gpu.reduce");
    expect_template(KF_OP_LOG_SOFTMAX, 1, &v, KF_F32, "opencl", "", "gpu.softmax_rows");
    expect_template(KF_OP_MATMUL, 2, two, KF_F32, "cuda", "sm_90", "gpu.simt_matmul");
    /* the tensor-core fast path of the same class, chosen by the operands' dtype */
    expect_template(KF_OP_MATMUL, 2, two, KF_F16, "cuda", "sm_90", "gpu.mma");
    expect_template(KF_OP_MATMUL, 2, two, KF_BF16, "cuda", "sm_80", "gpu.mma");
}

/* A stage no row supports: logsumexp has the REDUCE shape rule but is a COMPOSITE (its
 * kernels are its lowering), so the reduction templates, which compute the REDUCE class's
 * combiners, refuse it by its class and say so; the log-sum-exp row templates (GPU, and
 * the CPU's, kept for a product's rows) refuse it over an outer axis (rows only). */
Test(tpl_registry, a_stage_no_template_supports_is_refused_with_every_reason) {
    kf_shape v = {.rank = 2, .d = {4, 33}};
    kf_graph *g = one_node(KF_OP_LOGSUMEXP, 1, &v, KF_F32);
    const uint32_t all = g->nodes[0].attr.axes;
    g->nodes[0].attr.axes = 1u; /* axis 0 (the output shape, not read by selection, stays) */
    const char *plats[2] = {"cpu", "opencl"};
    const char *names[2] = {"cpu.reduce", "gpu.reduce"};
    for (int f = 0; f < 2; f++) {
        kf_synth s;
        memset(&s, 0, sizeof s);
        s.g = g;
        device(plats[f], "", &s.dev);
        snprintf(s.platform, sizeof s.platform, "%s", plats[f]);
        int node = 0;
        kf_stage st;
        memset(&st, 0, sizeof st);
        st.kind = KF_STAGE_REDUCE;
        st.nodes = &node;
        st.nnodes = 1;
        kf_error err = {0};
        cr_assert_eq(kf_tpl_select(&s, &st, &err), KF_ERR_UNSUPPORTED);
        cr_assert_null(st.tpl);
        cr_assert(strstr(err.msg, names[f]) && strstr(err.msg, "logsumexp is a composite op"), "%s", err.msg);
        if (f == 1) cr_assert(strstr(err.msg, "gpu.logsumexp_rows") && strstr(err.msg, "rows only"), "%s", err.msg);
        if (f == 0) cr_assert(strstr(err.msg, "cpu.logsumexp_rows") && strstr(err.msg, "rows only"), "%s", err.msg);
        cr_assert_eq(err.line, 1, "the error points at the node");
    }
    g->nodes[0].attr.axes = all;
    /* and the planner computes it through its lowering, with the general templates */
    kf_device_info dev;
    device("cpu", "", &dev);
    kf_synth *s = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_synth_plan(g, "cpu", &dev, &s, &err), KF_OK, "%s", err.msg);
    for (int k = 0; k < s->nst; k++)
        cr_assert(strcmp(s->st[k].tpl->name, "cpu.reduce") == 0 || strcmp(s->st[k].tpl->name, "cpu.pointwise") == 0,
                  "%s", s->st[k].tpl->name);
    kf_synth_free(s);
    kf_graph_free(g);
}

/* `kforge ops`'s matrix: every op of the registry plans on the CPU and for OpenCL (an op
 * whose record no template or lowering serves would read "no" there). */
Test(tpl_registry, every_op_is_supported_on_cpu_and_opencl) {
    for (int k = 0; k < KF_OP_COUNT; k++) {
        const char *plats[] = {"cpu", "opencl"};
        for (int p = 0; p < 2; p++) {
            kf_error err = {0};
            cr_expect_eq(kf_synth_op_support((kf_op)k, plats[p], &err), KF_OK, "%s on %s: %s",
                         kf_op_get((kf_op)k)->name, plats[p], err.msg);
        }
    }
}

/* A convolution's column matrix (reshape(permute(unfold(pad(x))))) feeding its matmul:
 * gathered by the CPU matmul's packing (an implicit GEMM: the padded input is the only
 * copy, the columns are never a stage), copied by an elementwise stage on GPUs. The
 * output, a relabelling of the matmul's result, is the matmul's buffer everywhere. */
Test(tpl_registry, conv_columns_are_gathered_on_the_cpu_only) {
    const char *task = "task conv\ninput x: f32[2, 6, 9, 8]\ninput w: f32[4, 3, 3, 2]\n"
                       "output y = conv(x, w, stride=[2, 1], padding=[1, 0], dilation=[1, 2], groups=2)\n";
    const char *plats[] = {"cpu", "opencl"};
    for (int p = 0; p < 2; p++) {
        kf_error err = {0};
        kf_graph *t = NULL, *g = NULL;
        cr_assert_eq(kf_parse_string(task, "conv.kf", &t, &err), KF_OK, "%s", err.msg);
        cr_assert_eq(kf_graph_lower(t, &g, &err), KF_OK, "%s", err.msg);
        kf_graph_free(t);
        kf_device_info dev;
        device(plats[p], "x86_64 avx2 fma", &dev);
        kf_synth *s = NULL;
        cr_assert_eq(kf_synth_plan(g, plats[p], &dev, &s, &err), KF_OK, "%s: %s", plats[p], err.msg);
        int mm = -1, ewise = 0;
        for (int k = 0; k < s->nst; k++) {
            if (s->st[k].kind == KF_STAGE_MATMUL) mm = k;
            else if (s->st[k].kind == KF_STAGE_EWISE && !s->st[k].fused) ewise++;
        }
        cr_assert_geq(mm, 0, "%s: no matmul stage", plats[p]);
        const kf_matmul_desc *d = &s->st[mm].mm;
        if (p == 0) {
            cr_assert(d->gb.on, "cpu: the columns are copied, not gathered");
            /* k = (c, kh, kw), j = (oh, ow) over the padded input [2*2, 3, 11, 8] */
            cr_assert_eq(d->gb.nrow, 3);
            cr_assert_eq(d->gb.ncol, 2);
            cr_assert_eq(d->gb.rstr[2], 2, "kw dilated by 2");
            cr_assert_eq(d->gb.cstr[0], 16, "oh strided by 2 rows of 8");
            cr_assert(kf_synth_is_view(g, d->b_val), "the padded input is the value gathered");
        } else {
            cr_assert(!d->gb.on, "%s gathers", plats[p]);
        }
        /* one copy before the matmul (the padded input on the CPU, [4, 3, 11, 8]; the
         * columns on GPUs, [2, 2, 18, 30]); the matmul writes the output, its result's
         * relabelling, into the output's buffer itself on every platform */
        cr_assert_eq(ewise, 1, "%s: %d copy stages", plats[p], ewise);
        cr_assert_eq(s->out_alias[g->nodes[s->st[mm].nodes[0]].out], g->outputs[0], "%s", plats[p]);
        int64_t n = 1;
        for (int i = 0; i < g->values[d->b_val].shape.rank; i++) n *= g->values[d->b_val].shape.d[i];
        cr_assert_eq(n, p == 0 ? 1056 : 2160, "%s: B read from %lld elements", plats[p], (long long)n);
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

/* The parameter of s's space named name, or -1. */
static int param_index(const kf_synth *s, const char *name) {
    const kf_space *sp = kf_synth_space(s);
    for (int i = 0; i < sp->nparams; i++)
        if (strcmp(sp->p[i].name, name) == 0) return i;
    return -1;
}

static kf_synth *plan_text(const char *text, const char *platform, kf_graph **g) {
    kf_error err = {0};
    kf_graph *t = NULL;
    cr_assert_eq(kf_parse_string(text, "<test>", &t, &err), KF_OK, "%s", err.msg);
    *g = t;
    if (kf_graph_has_lowering(t)) {
        cr_assert_eq(kf_graph_lower(t, g, &err), KF_OK, "%s", err.msg);
        kf_graph_free(t);
    }
    kf_device_info dev;
    device(platform, "x86_64 avx2 fma", &dev);
    kf_synth *s = NULL;
    cr_assert_eq(kf_synth_plan(*g, platform, &dev, &s, &err), KF_OK, "%s: %s", platform, err.msg);
    return s;
}

/* A matrix times a vector: the GEMM and the matrix-vector rows both support it, so the
 * space has the selector (values in table order, default the GEMM, today's choice) and
 * each row's parameters under its own prefix, in use only where the selector picks it. */
Test(tpl_registry, a_stage_two_rows_support_gets_a_selector) {
    kf_graph *g;
    kf_synth *s = plan_text("input a: f32[64, 33]\ninput x: f32[33, 1]\noutput y = matmul(a, x)\n", "cpu", &g);
    cr_assert_eq(s->nst, 1);
    const kf_stage *st = &s->st[0];
    cr_assert_str_eq(st->tpl->name, "cpu.gemm", "the first row stays the stage's template");
    cr_assert_eq(st->nalts, 2);
    cr_assert_str_eq(st->alts[0]->name, "cpu.gemm");
    cr_assert_str_eq(st->alts[1]->name, "cpu.matvec");
    const kf_space *sp = kf_synth_space(s);
    int sel = param_index(s, "s0.tpl");
    cr_assert_geq(sel, 0, "no selector");
    cr_assert_eq(sp->p[sel].role, KF_ROLE_TEMPLATE);
    cr_assert_eq(sp->p[sel].nvalues, 2);
    cr_assert_str_eq(kf_tpl_at((int)sp->p[sel].values[0])->name, "cpu.gemm");
    cr_assert_str_eq(kf_tpl_at((int)sp->p[sel].values[1])->name, "cpu.matvec");
    cr_assert_eq(sp->p[sel].dflt, 0);
    /* per-row prefixes: no name collides, every row parameter is gated by the selector */
    int g0 = param_index(s, "s0.gemm.threads"), m0 = param_index(s, "s0.matvec.threads");
    cr_assert(g0 >= 0 && m0 >= 0 && param_index(s, "s0.threads") < 0);
    cr_assert_eq(sp->p[g0].role, KF_ROLE_THREADS);
    cr_assert_eq(sp->p[m0].role, KF_ROLE_THREADS);
    for (int i = 0; i < sp->nparams; i++) {
        for (int j = 0; j < i; j++) cr_assert_str_neq(sp->p[i].name, sp->p[j].name);
        int row = strncmp(sp->p[i].name, "s0.gemm.", 8) == 0 ? 0 : strncmp(sp->p[i].name, "s0.matvec.", 10) == 0 ? 1 : -1;
        if (row < 0) {
            cr_assert_eq(sp->p[i].gate, 0, "%s", sp->p[i].name);
            continue;
        }
        cr_assert_eq(sp->p[i].gate, sel + 1, "%s", sp->p[i].name);
        cr_assert_eq(sp->p[i].gate_value, sp->p[sel].values[row], "%s", sp->p[i].name);
    }
    /* the default point is the GEMM's: its label names it and only its parameters */
    kf_point p;
    kf_synth_default_point(s, &p);
    char label[512];
    kf_point_format(sp, &p, label, sizeof label);
    cr_assert(strstr(label, "tpl=gemm") && strstr(label, "gemm.mk=") && !strstr(label, "matvec."), "%s", label);
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
    cr_assert(strstr(c.source, "_ukr(") && !strstr(c.source, "matrix-vector"), "the GEMM is emitted");
    kf_candidate_clear(&c);
    /* the other row: its label, its code; moving the GEMM's parameters then changes nothing */
    p.idx[sel] = 1;
    kf_point_format(sp, &p, label, sizeof label);
    cr_assert(strstr(label, "tpl=matvec") && strstr(label, "matvec.block=") && !strstr(label, "gemm."), "%s", label);
    cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
    cr_assert(strstr(c.source, "matrix-vector product") && !strstr(c.source, "_ukr("), "the matvec is emitted");
    cr_assert(kf_param_active(sp, &p, m0) && !kf_param_active(sp, &p, g0));
    kf_point q = p, cp, cq;
    q.idx[g0] = (q.idx[g0] + 1) % sp->p[g0].nvalues;
    kf_point_canonical(sp, &p, &cp);
    kf_point_canonical(sp, &q, &cq);
    cr_assert(memcmp(cp.idx, cq.idx, sizeof cp.idx) == 0, "an unused parameter moves the canonical point");
    kf_candidate c2;
    cr_assert_eq(kf_synth_render(s, &q, &c2, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(c.source, c2.source);
    kf_candidate_clear(&c);
    kf_candidate_clear(&c2);
    /* --pin names the row as the label does */
    cr_assert_eq(kf_synth_pin_assign(s, "tpl=nosuch", &err), KF_ERR_ARG);
    cr_assert(strstr(err.msg, "gemm, matvec"), "%s", err.msg);
    cr_assert_eq(kf_synth_pin_assign(s, "tpl=matvec", &err), KF_OK, "%s", err.msg);
    kf_synth_default_point(s, &p);
    cr_assert(kf_param_active(sp, &p, m0) && !kf_param_active(sp, &p, g0), "pinned to the matvec");
    kf_synth_free(s);
    kf_graph_free(g);

    /* a vector times a matrix (M == 1) too, batched */
    s = plan_text("input x: f32[3, 1, 40]\ninput b: f32[3, 40, 17]\noutput y = matmul(x, b)\n", "cpu", &g);
    cr_assert_eq(s->st[0].nalts, 2);
    cr_assert_geq(param_index(s, "s0.tpl"), 0);
    kf_synth_free(s);
    kf_graph_free(g);
}

/* A square matmul: only the GEMM supports it, so there is no selector and its parameters
 * keep their names; and on GPUs the family has one f32 matmul row. */
Test(tpl_registry, a_stage_one_row_supports_gets_no_selector) {
    kf_graph *g;
    kf_synth *s = plan_text("input a: f32[64, 33]\ninput b: f32[33, 64]\noutput y = matmul(a, b)\n", "cpu", &g);
    cr_assert_eq(s->st[0].nalts, 1);
    cr_assert_lt(param_index(s, "s0.tpl"), 0);
    cr_assert_geq(param_index(s, "s0.threads"), 0);
    for (int i = 0; i < kf_synth_space(s)->nparams; i++) cr_assert_eq(kf_synth_space(s)->p[i].gate, 0);
    kf_synth_free(s);
    kf_graph_free(g);
    s = plan_text("input a: f32[64, 33]\ninput x: f32[33, 1]\noutput y = matmul(a, x)\n", "opencl", &g);
    cr_assert_eq(s->st[0].nalts, 1);
    cr_assert_lt(param_index(s, "s0.tpl"), 0);
    kf_synth_free(s);
    kf_graph_free(g);
}

/* Planted: a product with one output row whose B is gathered (a convolution with one
 * output channel: its columns are read through the padded input's map). The matrix-vector
 * row refuses a gathered B, so the GEMM is the only row and no selector appears. */
Test(tpl_registry, a_stage_whose_only_supporting_row_is_one_gets_no_selector) {
    kf_graph *g;
    kf_synth *s = plan_text("input x: f32[1, 3, 9, 8]\ninput w: f32[1, 3, 3, 3]\n"
                            "output y = conv(x, w, padding=[1, 1])\n", "cpu", &g);
    int mm = -1;
    for (int k = 0; k < s->nst; k++)
        if (s->st[k].kind == KF_STAGE_MATMUL) mm = k;
    cr_assert_geq(mm, 0);
    const kf_stage *st = &s->st[mm];
    cr_assert(st->mm.gb.on, "the columns are gathered");
    cr_assert(st->mm.M == 1 || st->mm.N == 1, "one output row or column (M %lld N %lld)", (long long)st->mm.M,
              (long long)st->mm.N);
    cr_assert_eq(st->nalts, 1);
    cr_assert_str_eq(st->tpl->name, "cpu.gemm");
    char sel[32];
    snprintf(sel, sizeof sel, "%stpl", st->prefix);
    cr_assert_lt(param_index(s, sel), 0);
    const kf_tpl_def *mv = NULL;
    for (int i = 0; i < kf_tpl_count(); i++)
        if (strcmp(kf_tpl_at(i)->name, "cpu.matvec") == 0) mv = kf_tpl_at(i);
    cr_assert_not_null(mv);
    kf_buf why = {0};
    cr_assert_eq(mv->supports(s, st, &why), 0);
    cr_assert(strstr(why.data, "gathered"), "%s", why.data);
    kf_buf_free(&why);
    kf_synth_free(s);
    kf_graph_free(g);
}

/* Attention on the CPU: the last matmul gets the chain row alone (no selector), the first
 * matmul and the softmax (with its prologue) are computed inside it, and neither
 * intermediate is kept; on OpenCL the three stay stages of their own. */
Test(tpl_registry, a_matmul_softmax_matmul_chain_is_one_cpu_stage) {
    const char *task = "input q: f32[2, 40, 8]\ninput k: f32[2, 30, 8]\ninput v: f32[2, 30, 4]\n"
                       "s = matmul(q, k, transpose_b=true) * 0.5\noutput y = matmul(softmax(s), v)\n";
    kf_graph *g;
    kf_synth *s = plan_text(task, "cpu", &g);
    int last = -1, unfused = 0;
    for (int k = 0; k < s->nst; k++) {
        if (s->st[k].fused) continue;
        unfused++;
        last = k;
    }
    cr_assert_eq(unfused, 1, "one stage left: %s", kf_synth_describe(s));
    cr_assert_str_eq(s->st[last].tpl->name, "cpu.chain");
    cr_assert_eq(s->st[last].nalts, 1);
    cr_assert_gt(s->st[last].chain_mm, 0);
    cr_assert_gt(s->st[last].chain_sm, 0);
    cr_assert_lt(param_index(s, "s3.tpl"), 0);
    cr_assert_geq(param_index(s, "s3.rb"), 0);
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].output_index < 0) cr_expect_eq(s->materialize[v], 0, "%s kept", g->values[v].name);
    kf_synth_free(s);
    kf_graph_free(g);
    s = plan_text(task, "opencl", &g);
    for (int k = 0; k < s->nst; k++) cr_expect_eq(s->st[k].chain_mm, 0);
    cr_expect(strstr(kf_synth_describe(s), "chain") == NULL, "%s", kf_synth_describe(s));
    kf_synth_free(s);
    kf_graph_free(g);
}

/* A reshape of a dense buffer (same element order, new shape) read by a reduction, a norm,
 * softmax, a scan and a matmul is no stage of its own on any platform: each reader takes
 * the input's buffer (alias), and a reduction's result that the output relabels is
 * computed into the output's buffer (out_alias). */
Test(tpl_registry, relabelled_inputs_are_read_in_place) {
    const char *task = "task relin\ninput x: f32[4, 6, 5, 7]\ninput w: f32[35, 3]\n"
                       "output s = sum(reshape(x, shape=[4, 2, -1]), axes=[2])\n"
                       "output n = layer_norm(reshape(x, shape=[8, -1]), axes=[-1])\n"
                       "output m = softmax(reshape(x, shape=[24, 35]))\n"
                       "output c = cumsum(reshape(x, shape=[4, 210]), axis=1)\n"
                       "output p = matmul(reshape(x, shape=[24, 35]), w)\n"
                       "output r = reshape(max(x, axes=[3]), shape=[24, 5])\n";
    const char *plats[] = {"cpu", "opencl", "cuda"};
    for (int p = 0; p < 3; p++) {
        kf_graph *g;
        kf_synth *s = plan_text(task, plats[p], &g);
        int x = g->inputs[0], ewise = 0;
        for (int k = 0; k < s->nst; k++) ewise += s->st[k].kind == KF_STAGE_EWISE && !s->st[k].fused;
        cr_assert_eq(ewise, 0, "%s: %d copy stages (%s)", plats[p], ewise, s->desc);
        cr_assert_eq(s->nst, 6, "%s: %s", plats[p], s->desc);
        /* each reshape of x: read as x's buffer, or read through by its reader (a matmul
         * takes a relabelled operand's source itself, kf_synth_mm_operand) */
        for (int ni = 0; ni < g->nnodes; ni++) {
            int v = g->nodes[ni].out;
            if (g->nodes[ni].op != KF_OP_RESHAPE || g->values[v].output_index >= 0) continue;
            cr_assert(s->alias[v] == x || s->skip[ni], "%s: %s is copied", plats[p], g->values[v].name);
        }
        int mx = g->nodes[g->values[g->outputs[5]].producer].in[0];
        cr_assert_eq(s->out_alias[mx], g->outputs[5], "%s: the max is not written into r", plats[p]);
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

/* A channel reduction (64 outputs over [N, C, H, W], the batch norm's statistics) at the
 * default point: blocks of outputs (oblock=64) must still leave a task per thread, so
 * the loop is shared by the threads rather than one task on one thread. */
Test(tpl_registry, row_blocks_leave_every_thread_a_task) {
    kf_graph *g;
    kf_synth *s = plan_text("input x: f32[16, 64, 8, 512]\noutput m = mean(x, axes=[0, 2, 3], keepdim=true)\n",
                            "cpu", &g);
    kf_point p;
    kf_synth_default_point(s, &p);
    char label[512];
    kf_point_format(kf_synth_space(s), &p, label, sizeof label);
    cr_assert(strstr(label, "oblock=64") && strstr(label, "threads=2"), "%s", label);
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
    cr_assert(strstr(c.source, "blocks of 32 outputs") && strstr(c.source, "#pragma omp parallel for"),
              "64 outputs in one block of 64 run on one thread:\n%s", c.source);
    kf_candidate_clear(&c);
    kf_synth_free(s);
    kf_graph_free(g);
}

/* A batch norm in training mode as the importer writes it: the deviation d = x - mean is
 * read by the variance's reduction and, after it, by the result. d is computed again where
 * the result is (from x and the mean, no more bytes than d), so no full-size tensor goes
 * through scratch and d's first stage is the variance's prologue. */
Test(tpl_registry, a_value_read_after_its_reduction_is_computed_again) {
    const char *task = "input w: f32[8]\ninput b: f32[8]\ninput x: f32[4, 8, 6, 5]\n"
                       "m = mean(x, axes=[0, 2, 3], keepdim=true)\nd = x - m\n"
                       "v = mean(square(d), axes=[0, 2, 3], keepdim=true)\n"
                       "output y = d * rsqrt(v + 1e-05) * reshape(w, shape=[-1, 1, 1]) + reshape(b, shape=[-1, 1, 1])\n";
    const char *plats[] = {"cpu", "opencl", "cuda"};
    for (int p = 0; p < 3; p++) {
        kf_graph *g;
        kf_synth *s = plan_text(task, plats[p], &g);
        const kf_graph *h = s->lowered; /* the graph planned, with the copy of d */
        cr_assert_not_null(h, "%s: nothing computed again (%s)", plats[p], s->desc);
        int copies = 0, prologues = 0;
        for (int ni = 0; ni < h->nnodes; ni++) copies += s->copy[ni];
        cr_assert_eq(copies, 1, "%s", plats[p]);
        for (int v = 0; v < h->nvalues; v++)
            if (s->materialize[v] && h->values[v].output_index < 0)
                cr_assert_lt(kf_shape_numel(&h->values[v].shape), 960, "%s: %s goes through scratch (%s)", plats[p],
                             h->values[v].name, s->desc);
        for (int k = 0; k < s->nst; k++) prologues += s->st[k].prologue > 0;
        cr_assert_eq(prologues, 1, "%s: %s", plats[p], s->desc);
        kf_synth_free(s);
        kf_graph_free(g);
    }
}

/* A group norm as the importer writes it: rows of the relabelled input normalised, then
 * relabelled back for a per-channel affine. On the CPU the affine is computed inside the
 * norm's stage from each row's elements (an epilogue), so the one stage reads x and
 * writes the output: no scratch. A norm whose result another stage reads too keeps it. */
Test(tpl_registry, a_norm_computes_its_elementwise_reader_on_the_cpu) {
    const char *gn = "input w: f32[8]\ninput b: f32[8]\ninput x: f32[4, 8, 6, 5]\n"
                     "n = reshape(layer_norm(reshape(x, shape=[4, 2, -1]), axes=[-1]), shape=[4, 8, 6, 5])\n"
                     "output y = n * reshape(w, shape=[-1, 1, 1]) + reshape(b, shape=[-1, 1, 1])\n";
    kf_graph *g;
    kf_synth *s = plan_text(gn, "cpu", &g);
    int live = 0, scratch = 0;
    for (int k = 0; k < s->nst; k++) live += !s->st[k].fused;
    for (int v = 0; v < g->nvalues; v++) scratch += s->materialize[v] && g->values[v].output_index < 0;
    cr_assert_eq(live, 1, "%s", s->desc);
    cr_assert_eq(scratch, 0, "%s", s->desc);
    cr_assert_str_eq(s->desc, "layer_norm+ewise[5 ops]");
    kf_point p;
    kf_synth_default_point(s, &p);
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
    cr_assert(strstr(c.source, "kf_epi0(") && !strstr(c.source, "= kf_scratch("), "%s", c.source);
    kf_candidate_clear(&c);
    kf_synth_free(s);
    kf_graph_free(g);
    /* the norm's result also summed: it stays in memory, the affine its own stage */
    const char *two = "input w: f32[8]\ninput x: f32[4, 8, 6, 5]\n"
                      "n = reshape(layer_norm(reshape(x, shape=[4, 2, -1]), axes=[-1]), shape=[4, 8, 6, 5])\n"
                      "output y = n * reshape(w, shape=[-1, 1, 1])\noutput t = sum(n, axes=[3])\n";
    s = plan_text(two, "cpu", &g);
    for (int k = 0; k < s->nst; k++) cr_assert_eq(s->st[k].epilogue, 0, "%s", s->desc);
    kf_synth_free(s);
    kf_graph_free(g);
    /* on GPUs the norm writes its result (no epilogue there) */
    s = plan_text(gn, "opencl", &g);
    for (int k = 0; k < s->nst; k++) cr_assert_eq(s->st[k].epilogue, 0, "%s", s->desc);
    kf_synth_free(s);
    kf_graph_free(g);
}
