/*
 * The generated op test (after ggml's test-backend-ops): every operator of the registry,
 * on every platform compiled into this build and present here, at odd and edge shapes, at
 * two schedule points, against the float64 reference, through the real pipeline (plan ->
 * render -> compile -> sandboxed run -> compare). The tasks are built from the records
 * alone (arity, shape rule, input domain), so a new operator is tested by adding its
 * record: nothing here names an op.
 *
 * Ops of one class go into one task as separate outputs (at most a handful per task, so
 * that a GPU candidate's launch and argument limits hold): each output is compared on its
 * own, so a failure names the op (outputs are called o_<op>). Inputs an op with a positive
 * domain reads are separate from the others, so that every other op sees negative values.
 *
 * Platforms: cpu always; opencl where a device opens (PoCL here and in CI), unless
 * KFORGE_TEST_SKIP_GPU_VERIFY is set (the sanitizer build: the device code is not
 * instrumented, and the release build runs the same work); cuda where a device opens.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/ir.h"
#include "kforge/ops.h"
#include "kforge/synth.h"
#include "kforge/verify.h"
#include "pipeline_check.h"

/* ------------------------------------------------------------ the registry itself */

Test(ops_registry, every_identifier_has_one_complete_record) {
    kf_error err = {0};
    cr_assert_eq(kf_ops_check(&err), KF_OK, "%s", err.msg);
    for (int k = 0; k < KF_OP_COUNT; k++) {
        const kf_op_def *d = kf_op_get((kf_op)k);
        cr_assert_eq(d->op, (kf_op)k, "record of op %d says it is op %d", k, (int)d->op);
        cr_expect_eq(kf_op_lookup(d->name), (kf_op)k, "'%s' does not look up to itself", d->name);
        for (int a = 0; a < KF_MAX_OP_ATEN && d->aten[a]; a++) {
            kf_op back = kf_op_lookup_aten(d->aten[a]);
            cr_expect_neq(back, KF_OP_COUNT, "%s: ATen name %s does not resolve", d->name, d->aten[a]);
        }
    }
    cr_expect_eq(kf_op_lookup("no_such_op"), KF_OP_COUNT);
    cr_expect_eq(kf_op_lookup_aten("aten.no_such_op.default"), KF_OP_COUNT);
}

/* Each attribute's default lands where its schema says, with its type. */
Test(ops_registry, attribute_defaults_follow_the_schema) {
    for (int k = 0; k < KF_OP_COUNT; k++) {
        const kf_op_def *d = kf_op_get((kf_op)k);
        kf_attrs a = kf_attrs_default((kf_op)k, 3);
        for (int i = 0; d->attrs[i].name; i++) {
            const kf_attr_def *s = &d->attrs[i];
            switch (s->type) {
            case KF_ATTR_FLOAT:
            {   /* gather's fill defaults to NaN, equal to itself here */
                double got = kf_attr_get_float(&a, s), want = strtod(s->dflt, NULL);
                cr_expect(got == want || (isnan(got) && isnan(want)), "%s.%s: %g, want %g", d->name, s->name, got, want);
                break;
            }
            case KF_ATTR_BOOL:
                cr_expect_eq(kf_attr_get_bool(&a, s), !strcmp(s->dflt, "true"), "%s.%s", d->name, s->name);
                break;
            case KF_ATTR_AXES:
            case KF_ATTR_AXIS: {
                uint32_t m = kf_attr_get_axes(&a, s);
                if (!strcmp(s->dflt, "all")) cr_expect_eq(m, 7u, "%s.%s", d->name, s->name);
                else cr_expect_eq(__builtin_popcount(m), 1, "%s.%s: one axis", d->name, s->name);
                break;
            }
            case KF_ATTR_INT:
                cr_expect_eq(kf_attr_get_int(&a, s), strcmp(s->dflt, "max") ? strtoll(s->dflt, NULL, 10) : INT64_MAX,
                             "%s.%s", d->name, s->name);
                break;
            case KF_ATTR_INTS: {
                kf_ints want;
                cr_assert(kf_ints_parse(s->dflt, &want), "%s.%s", d->name, s->name);
                const kf_ints *got = kf_attr_get_ints(&a, s);
                cr_expect(got->n == want.n && !memcmp(got->v, want.v, (size_t)want.n * sizeof want.v[0]), "%s.%s",
                          d->name, s->name);
                break;
            }
            case KF_ATTR_OPERAND_VIEW:
                cr_expect_eq(kf_op_get(kf_op_lookup(s->view))->cls, KF_CLASS_VIEW, "%s.%s", d->name, s->name);
                break;
            }
        }
    }
}

/* A POINTWISE op's f32 text renders with every placeholder filled, and its f64 reference
 * answers at a point of its domain. */
Test(ops_registry, pointwise_parts_render_and_evaluate) {
    for (int k = 0; k < KF_OP_COUNT; k++) {
        const kf_op_def *d = kf_op_get((kf_op)k);
        if (d->cls != KF_CLASS_POINTWISE) continue;
        kf_attrs a = kf_attrs_default((kf_op)k, 1);
        kf_pw_emit e = {.in = {"r1", "r2"}, .attr = &a, .producer = KF_OP_COUNT};
        kf_buf o = {0};
        kf_op_render_f32(d, &e, &o);
        cr_expect(o.data && !strchr(o.data, '$'), "%s renders as '%s'", d->name, o.data ? o.data : "");
        kf_buf_free(&o);
        double v = kf_op_eval((kf_op)k, NULL, 1.5, 0.75);
        cr_expect(v == v, "%s(1.5, 0.75) is NaN", d->name);
    }
}

/* ------------------------------------------------------------ through the pipeline */

static char workdir[512];

/* text at the default point and at the "every parameter moved" point */
static void check_task(kf_backend *be, const char *text) { pipeline_check(be, text, workdir, 11); }

/* Shapes of the tasks: a single element, a prime length, and a rank-2 tensor of odd sizes
 * whose second operand broadcasts along the first axis. */
static const char *const shapes[] = {"[1]", "[17]", "[3, 37]"};
static const char *const bshapes[] = {"[1]", "[17]", "[1, 37]"};
static const char *const trailing[] = {"[1]", "[17]", "[37]"};
/* matmul operand shapes (a, b): 1x1x1, odd sizes, and a batch broadcast over b */
static const char *const mm_shapes[][2] = {{"[1, 1]", "[1, 1]"}, {"[3, 17]", "[17, 5]"}, {"[2, 5, 33]", "[33, 7]"}};

/* Ops per task: few enough that a GPU candidate's launches and arguments fit. */
enum { POINTWISE_BATCH = 10, OTHER_BATCH = 4 };

/* The task computing ops[0..n-1] at shape si, each as its own output. */
static char *batch_task(const kf_op *ops, int n, int si) {
    int any = 0, pos = 0, affine = 0;
    for (int i = 0; i < n; i++) {
        const kf_op_def *d = kf_op_get(ops[i]);
        if (d->domain == KF_DOMAIN_POS) pos = 1;
        else any = 1;
        if (d->kind == KF_KIND_NORM && d->max_in > 1) affine = 1;
    }
    kf_buf t = {0};
    kf_buf_printf(&t, "task ops_%s_%d\n", kf_op_get(ops[0])->name, si);
    if (any) kf_buf_printf(&t, "input x: f32%s\ninput y: f32%s\n", shapes[si], bshapes[si]);
    if (pos)
        kf_buf_printf(&t, "input p: f32%s range(0.25, 4)\ninput q: f32%s range(0.25, 4)\n", shapes[si],
                      bshapes[si]);
    if (affine) kf_buf_printf(&t, "input w: f32%s\ninput c: f32%s\n", trailing[si], trailing[si]);
    for (int i = 0; i < n; i++) {
        const kf_op_def *d = kf_op_get(ops[i]);
        const char *a0 = d->domain == KF_DOMAIN_POS ? "p" : "x", *a1 = d->domain == KF_DOMAIN_POS ? "q" : "y";
        kf_buf_printf(&t, "output o_%s = %s(%s", d->name, d->name, a0);
        if (d->kind == KF_KIND_BINARY) kf_buf_printf(&t, ", %s", a1);
        if (d->kind == KF_KIND_NORM) /* the optional affine inputs, shaped like the normalised axis */
            for (int k = 1; k < d->max_in; k++) kf_buf_printf(&t, ", %s", k == 1 ? "w" : "c");
        kf_buf_puts(&t, ")\n");
    }
    return kf_buf_take(&t);
}

/* Check ops[0..n-1] in one task; where the platform's plan cannot hold them all (a GPU
 * candidate's launches, scratch buffers and arguments are bounded), in halves, down to one
 * op a task, where a plan that fails is a failure. */
static void check_batch(kf_backend *be, const kf_op *ops, int n, int si) {
    char *text = batch_task(ops, n, si);
    if (n > 1) {
        kf_error err = {0};
        kf_graph *g = NULL;
        kf_synth *s = NULL;
        int fits = kf_parse_string(text, "<test_ops>", &g, &err) == KF_OK &&
                   kf_synth_plan(g, be->info.platform, &be->info, &s, &err) == KF_OK;
        kf_synth_free(s);
        kf_graph_free(g);
        if (!fits) {
            free(text);
            check_batch(be, ops, n / 2, si);
            check_batch(be, ops + n / 2, n - n / 2, si);
            return;
        }
    }
    check_task(be, text);
    free(text);
}

/* Check every op of the given shape rules at shape si, at most `batch` per task; returns
 * how many ops that was. */
static int check_kinds(kf_backend *be, const kf_op_kind *kinds, int nkinds, int batch, int si) {
    kf_op ops[KF_OP_COUNT];
    int nops = 0;
    for (int k = 0; k < KF_OP_COUNT; k++)
        for (int j = 0; j < nkinds; j++)
            if (kf_op_get((kf_op)k)->kind == kinds[j]) ops[nops++] = (kf_op)k;
    for (int b0 = 0; b0 < nops; b0 += batch)
        check_batch(be, ops + b0, b0 + batch < nops ? batch : nops - b0, si);
    return nops;
}

static int check_contractions(kf_backend *be, int si) {
    int n = 0;
    for (int k = 0; k < KF_OP_COUNT; k++) {
        const kf_op_def *d = kf_op_get((kf_op)k);
        if (d->kind != KF_KIND_MATMUL) continue;
        char text[512];
        snprintf(text, sizeof text, "task ops_%s_%d\ninput a: f32%s\ninput b: f32%s\noutput o_%s = %s(a, b)\n",
                 d->name, si, mm_shapes[si][0], mm_shapes[si][1], d->name, d->name);
        check_task(be, text);
        n++;
    }
    return n;
}

/* ---- views: attribute values from the schema's types ---- */

/* Shapes a view's input takes: small, odd, one with a size-1 dim. */
static const char *const view_shapes[] = {"[2, 3, 5]", "[3, 5, 7]", "[5, 1, 17]"};
/* Values tried per attribute type, in order; the first combination the op's shape rule
 * accepts whose map is not the identity is the one tested (so every view op gets a
 * non-trivial map without naming it). */
static const char *const int_values[] = {"2", "1", "-1", "3", "0"};
static const char *const ints_values[] = {"[2, 0, 1]", "[1, 2, 0, 1]", "[2, -1, -1, -1]", "[0, 2]", "[-1, 5]"};

static int view_values(const kf_attr_def *a, const char *const **vals) {
    switch (a->type) {
    case KF_ATTR_INT: *vals = int_values; return 5;
    case KF_ATTR_INTS: *vals = ints_values; return 5;
    case KF_ATTR_FLOAT: {
        static const char *const f[] = {"-2.5"}; /* e.g. a pad value that is not the default */
        *vals = f;
        return 1;
    }
    default: *vals = NULL; return 0; /* the default */
    }
}

/* "op(x, a=.., b=..)" for view op d on an input of shape sh: the first combination of
 * attribute values that type-checks and is not the identity map, into call. */
static void view_call(const kf_op_def *d, const char *sh, char *call, size_t cap) {
    int na = 0, nv[KF_MAX_OP_ATTRS], idx[KF_MAX_OP_ATTRS] = {0};
    const char *const *vals[KF_MAX_OP_ATTRS];
    for (; d->attrs[na].name; na++) nv[na] = view_values(&d->attrs[na], &vals[na]);
    for (;;) {
        size_t n = (size_t)snprintf(call, cap, "%s(x", d->name);
        for (int a = 0; a < na; a++)
            if (nv[a]) n += (size_t)snprintf(call + n, cap - n, ", %s=%s", d->attrs[a].name, vals[a][idx[a]]);
        snprintf(call + n, cap - n, ")");
        char text[512];
        snprintf(text, sizeof text, "input x: f32%s\noutput y = %s\n", sh, call);
        kf_graph *g = NULL;
        kf_error err = {0};
        int good = 0;
        if (kf_parse_string(text, "<view>", &g, &err) == KF_OK) {
            kf_imap m;
            good = kf_node_imap(g, &g->nodes[g->nnodes - 1], &m, &err) == KF_OK && !kf_imap_is_identity(&m);
        }
        kf_graph_free(g);
        if (good) return;
        int a = 0; /* the next combination */
        while (a < na && (!nv[a] || ++idx[a] == nv[a])) idx[a++] = 0;
        cr_assert(a < na, "%s: no attribute values from the lists give a map other than the identity on %s",
                  d->name, sh);
    }
}

/* Every VIEW op, at most OTHER_BATCH a task, each as its own output. */
static int check_views(kf_backend *be, int si) {
    kf_op ops[KF_OP_COUNT];
    int nops = 0;
    for (int k = 0; k < KF_OP_COUNT; k++)
        if (kf_op_get((kf_op)k)->kind == KF_KIND_VIEW) ops[nops++] = (kf_op)k;
    for (int b0 = 0; b0 < nops; b0 += OTHER_BATCH) {
        kf_buf t = {0};
        kf_buf_printf(&t, "task ops_views_%d_%d\ninput x: f32%s\n", b0, si, view_shapes[si]);
        for (int i = b0; i < nops && i < b0 + OTHER_BATCH; i++) {
            char call[256];
            const kf_op_def *d = kf_op_get(ops[i]);
            view_call(d, view_shapes[si], call, sizeof call);
            kf_buf_printf(&t, "output o_%s = %s\n", d->name, call);
        }
        check_task(be, t.data);
        kf_buf_free(&t);
    }
    return nops;
}

/* Every OWN-shaped op (convolutions) by the task its record gives. */
static int check_own(kf_backend *be, int si) {
    int n = 0;
    for (int k = 0; k < KF_OP_COUNT; k++) {
        const kf_op_def *d = kf_op_get((kf_op)k);
        if (d->kind != KF_KIND_OWN) continue;
        n++;
        if (si) continue; /* its task has its own shapes: once per platform */
        kf_buf t = {0};
        kf_buf_printf(&t, "task ops_own_%s\n%s", d->name, d->example);
        check_task(be, t.data);
        kf_buf_free(&t);
    }
    return n;
}

/* Every GATHER op by the task its record gives (indices past both ends of the axis among
 * them: the fill value, never a read). */
static int check_gathers(kf_backend *be, int si) {
    int n = 0;
    for (int k = 0; k < KF_OP_COUNT; k++) {
        const kf_op_def *d = kf_op_get((kf_op)k);
        if (d->kind != KF_KIND_GATHER) continue;
        n++;
        if (si) continue; /* its task has its own shapes: once per platform */
        kf_buf t = {0};
        kf_buf_printf(&t, "task ops_gather_%s\n%s", d->name, d->example);
        check_task(be, t.data);
        kf_buf_free(&t);
    }
    return n;
}

/* Existing ops reading non-contiguous index maps: a unary, a binary, reductions, softmax
 * a scan and matmul whose inputs are views (transpose, slice with a step, flip, pad, windows,
 * broadcasts, and chains of them), through the real pipeline. */
static const char *const strided_tasks[] = {
    "task nc_unary\ninput x: f32[37, 19]\noutput y = relu(transpose(x))\n",
    "task nc_binary\ninput x: f32[37, 19]\ninput y: f32[19, 37]\n"
    "output z = transpose(x) - flip(y, dims=[0, 1])\noutput w = x * expand(transpose(slice(y, dim=1, start=3, end=4)), shape=[37, -1])\n",
    "task nc_pad\ninput x: f32[6, 29]\noutput y = pad(slice(x, dim=1, start=1, step=3), pads=[2, 1, 1, 0], value=0.5) * 2\n",
    "task nc_chain\ninput x: f32[5, 8]\noutput y = sigmoid(flip(transpose(pad(x, pads=[1, 1, 2, 0], value=-1)), dims=[1]))\n"
    "output t = transpose(x)\n",
    "task nc_pool\ninput x: f32[4, 33]\noutput m = max(unfold(x, dim=1, size=3, step=2, dilation=2), axes=[2])\n"
    "output s = sum(transpose(x), axes=[1])\n",
    /* padded views of 8 and 16 guards, 104 in all: more guards than one elementwise stage
     * holds (KF_EW_MAX_GUARDS) */
    "task nc_guards\ninput x: f32[3, 4, 5, 6]\n"
    "p = pad(pad(x, pads=[1, 1, 1, 1, 1, 1, 1, 1]), pads=[1, 1, 1, 1, 1, 1, 1, 1])\n"
    "q = pad(pad(x, pads=[2, 0, 0, 2, 1, 1, 2, 0]), pads=[0, 2, 1, 1, 2, 0, 1, 1])\n"
    "output y = p + q * 2 + flip(p, dims=[0, 3]) + pad(x, pads=[2, 2, 2, 2, 2, 2, 2, 2], value=0.5) "
    "+ pad(x, pads=[0, 4, 0, 4, 0, 4, 4, 0], value=0.5) - pad(x, pads=[1, 3, 3, 1, 1, 3, 3, 1], value=-1) "
    "+ flip(q, dims=[1, 2]) - flip(p, dims=[2])\n",
    "task nc_rows\ninput x: f32[7, 45]\noutput y = softmax(flip(x, dims=[1]))\noutput c = cumsum(transpose(x), axis=0)\n",
    "task nc_matmul\ninput a: f32[19, 13]\ninput b: f32[19, 9]\ninput c: f32[2, 9, 13]\ninput d: f32[9, 13]\n"
    "output p = matmul(transpose(a), b)\noutput q = matmul(c, permute(c, dims=[0, 2, 1]))\n"
    "output r = matmul(slice(a, dim=0, step=2), flip(transpose(d), dims=[0]))\n",
    /* batch dims through maps that move whole matrices: folded into the batch strides */
    "task nc_batch\ninput e: f32[1, 5, 6]\ninput f: f32[4, 3, 6, 7]\ninput h: f32[4, 9, 13]\ninput d: f32[9, 13]\n"
    "output s = matmul(expand(e, shape=[4, -1, -1]), permute(f, dims=[1, 0, 2, 3]))\n"
    "output u = matmul(slice(h, dim=0, step=2), transpose(d))\noutput v = matmul(slice(h, dim=0, start=1), transpose(d))\n",
    /* reshapes: merged dims (a flat map) over a transposed view (read from its copy) and
     * under one, split dims (affine) into a reduction, a relabelling as a matmul operand,
     * selects, and a chain of them */
    "task nc_reshape\ninput x: f32[6, 10]\ninput w: f32[5, 7]\n"
    "output a = reshape(transpose(x), shape=[-1]) + 1\noutput b = transpose(reshape(x, shape=[3, 20])) * 3\n"
    "output c = sum(reshape(x, shape=[2, 3, 10]), axes=[1])\noutput d = matmul(reshape(x, shape=[12, 5]), w)\n",
    /* reductions over a few elements of a view (unrolled into one elementwise stage) and a
     * depthwise conv with a small kernel (its taps summed in one elementwise stage) */
    "task nc_window\ninput x: f32[2, 5, 11, 9]\ninput w: f32[5, 1, 3, 2]\n"
    "output y = conv(x, w, stride=[2, 1], padding=[1, 1], dilation=[1, 2], groups=5)\n"
    "output m = max(unfold(unfold(pad(x, pads=[1, 1, 1, 1], value=-inf), dim=2, size=3, step=2), dim=3, size=3, step=2), axes=[-2, -1])\n"
    "output a = mean(unfold(x, dim=3, size=4, step=3), axes=[-1], keepdim=true)\n",
    /* a bool mask input, read as 0/1 by binary ops, directly and through a view */
    "task nc_mask\ninput x: f32[6, 37]\ninput mask: bool[6, 37]\n"
    "output y = cumsum(x * mask, axis=1)\noutput z = transpose(mask) - 2 * transpose(x)\n",
    /* convolutions without bias: a matmul whose output is the task's output relabelled
     * (written in place on the CPU), its columns gathered (CPU) or copied (GPUs), grouped
     * and 3-D, and a conv_transpose */
    "task nc_conv\ninput x: f32[2, 4, 11, 9]\ninput w: f32[6, 2, 3, 2]\ninput v: f32[2, 4, 5, 7, 6]\n"
    "input u: f32[3, 4, 2, 3, 2]\n"
    "output y = conv(x, w, stride=[2, 1], padding=[1, 0], dilation=[1, 2], groups=2)\n"
    "output z = conv(v, u, stride=[1, 2, 1], padding=[1, 1, 1])\n",
    "task nc_convt\ninput x: f32[2, 4, 11, 9]\ninput t: f32[4, 3, 3, 2]\n"
    "output q = conv_transpose(x, t, stride=[2, 1], padding=[1, 0], groups=2)\n",
    /* intermediates no output reads (a reduction, a matmul, a view) are not planned */
    "task nc_dead\ninput x: f32[8, 4]\nu = sum(x, axes=[1])\nv = matmul(x, transpose(x))\nw = reshape(x, shape=[-1])\n"
    "output y = relu(x) + 1\n",
    /* gathers: recomputed inside a broadcast domain, an index from argmax (materialised i64),
     * data read through a view (materialised first), a fill of its own */
    "task nc_gather\ninput x: f32[33, 17]\ninput t: i64[33] range(-1, 17)\n"
    "output y = x - gather(x, reshape(t, shape=[33, 1]), axis=1)\n"
    "output z = gather(x, argmax(x, axis=1, keepdim=true), axis=1) - max(x, axes=[1], keepdim=true)\n"
    "output w = gather(transpose(x), reshape(t, shape=[1, 33]), axis=0, fill=-1)\n",
    /* relabellings (reshapes) of an input and of computed values read in place by a
     * reduction, a norm (a group norm, its result relabelled back into an affine), softmax,
     * a scan, and a reduction written into the output that relabels it */
    "task nc_relabel\ninput x: f32[3, 4, 5, 6]\ninput w: f32[4]\ninput b: f32[4]\n"
    "output s = sum(reshape(x, shape=[3, 2, -1]), axes=[2])\n"
    "output n = reshape(layer_norm(reshape(x, shape=[3, 2, -1]), axes=[-1]), shape=[3, 4, 5, 6]) "
    "* reshape(w, shape=[-1, 1, 1]) + reshape(b, shape=[-1, 1, 1])\n"
    "output c = cumsum(reshape(reshape(x, shape=[12, 30]), shape=[3, 120]), axis=1)\n",
    "task nc_relabel2\ninput x: f32[3, 4, 5, 6]\ninput a: f32[20, 6]\n"
    "output m = softmax(reshape(exp(x), shape=[12, 30]))\n"
    "output r = reshape(max(reshape(x * 2, shape=[6, 60]), axes=[1]), shape=[2, 3])\n"
    "output q = rms_norm(reshape(matmul(a, transpose(a)), shape=[8, 50]), axes=[-1])\n",
    /* values computed again after a reduction of them (kf_synth_remat): a channel's
     * deviation (as in a batch norm, from the max: a mean of offset inputs is a test of
     * the GPUs' float sums), read by its spread and by the result; a scaled row divided
     * by its sum */
    "task nc_remat\ninput x: f32[3, 5, 4, 7]\ninput w: f32[5]\n"
    "d = x - max(x, axes=[0, 2, 3], keepdim=true)\nv = mean(abs(d), axes=[0, 2, 3], keepdim=true)\n"
    "output y = d / (v + 1) * reshape(w, shape=[-1, 1, 1])\n"
    "e = x * 2\noutput r = e / sum(e, axes=[3], keepdim=true)\n",
    /* norms whose elementwise reader is computed inside them (CPU epilogues): rows of 40
     * across the reader's rows of 6, an affine norm, a flipped read of the input beside
     * the norm's elements; an rms norm under a sigmoid */
    "task nc_epilogue\ninput x: f32[3, 4, 5, 6]\ninput g: f32[40]\ninput h: f32[40]\n"
    "output y = reshape(layer_norm(reshape(x, shape=[9, 40]), g, h), shape=[3, 4, 5, 6]) * 2 + flip(x, dims=[3])\n"
    "output z = sigmoid(reshape(rms_norm(reshape(x, shape=[12, 30])), shape=[3, 4, 5, 6]))\n",
    /* contractions whose elementwise reader is computed in their store stage (CPU GEMM
     * epilogues; pipeline_check verifies them fused and apart): a bias over columns and a
     * gelu, a per-row bias broadcast over a batch and a residual, a convolution's bias and
     * a clamp */
    "task nc_gemm_epilogue\ninput a: f32[13, 70]\ninput b: f32[70, 21]\ninput c: f32[21]\n"
    "input p: f32[2, 9, 11]\ninput q: f32[2, 11, 6]\ninput r: f32[9, 1]\ninput s: f32[2, 9, 6]\n"
    "input x: f32[2, 3, 7, 8]\ninput w: f32[5, 3, 3, 3]\ninput v: f32[5]\n"
    "output y = gelu(matmul(a, b) + c)\noutput z = sigmoid(matmul(p, q) * 0.5 + r) + s\n"
    "output u = hardtanh(conv(x, w, v, padding=[1, 0]), min_val=-1.0, max_val=1.0)\n",
    /* reductions whose elementwise reader is computed at their stores (GPU epilogues; on
     * the CPU the reader stays a stage of its own): a matrix-vector product (planned on GPUs
     * as a reduction, gemv.c) under a bias and a relu, a row mean scaled and shifted */
    "task nc_reduce_epilogue\ninput a: f32[7, 301]\ninput b: f32[301, 1]\ninput c: f32[1]\n"
    "input x: f32[5, 37]\ninput d: f32[5]\n"
    "output y = relu(matmul(a, b) + c)\noutput m = mean(x, axes=[1]) * 2.0 - d\n",
    /* row reductions of a contraction computed in its store stage (CPU GEMM reduction
     * epilogues, s<k>.red; pipeline_check verifies them fused and apart): a row sum of a
     * biased relu, a batched product's row max, a row mean over N spanning several tiles,
     * a row log-sum-exp (kept unlowered on the CPU; a task of its own: GPU plans hold 8 kernels) */
    "task nc_gemm_reduce\ninput a: f32[13, 70]\ninput b: f32[70, 21]\ninput c: f32[21]\n"
    "input p: f32[2, 9, 11]\ninput q: f32[2, 11, 38]\ninput x: f32[5, 33]\ninput w: f32[33, 150]\n"
    "output y = sum(relu(matmul(a, b) + c), axes=[1], keepdim=true)\noutput z = max(matmul(p, q), axes=[2])\n"
    "output m = mean(matmul(x, w), axes=[-1]) * 3.0\n",
    "task nc_gemm_lse\ninput x: f32[5, 33]\ninput v: f32[33, 45]\n"
    "output l = logsumexp(matmul(x, v) - 1.0, axes=[1])\n",
    "task nc_select\ninput x: f32[6, 10]\n"
    "output e = select(x, dim=1, index=-2) * 2\n"
    "output f = reshape(select(reshape(x, shape=[3, 2, 10]), dim=1, index=1), shape=[5, 6]) - 1\n"
    "output g = softmax(reshape(flip(x, dims=[1]), shape=[4, 15]))\n",
};

/* The plan of the task named `name` among strided_tasks computes `want` elementwise
 * readers (marker "+ewise[") or row reductions ("matmul+" then an op) in their producers'
 * stores: the fused path is the one check_task verifies first (then apart, epi=0, red=0). */
static void expect_fused(kf_backend *be, const char *name, const char *marker, int want) {
    const char *text = NULL;
    for (size_t i = 0; i < sizeof strided_tasks / sizeof *strided_tasks; i++)
        if (strncmp(strided_tasks[i] + 5, name, strlen(name)) == 0) text = strided_tasks[i];
    cr_assert_not_null(text, "no task %s", name);
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(text, "<test>", &g, &err), KF_OK, "%s", err.msg);
    kf_synth *s = NULL;
    cr_assert_eq(kf_synth_plan(g, be->info.platform, &be->info, &s, &err), KF_OK, "%s", err.msg);
    int n = 0;
    for (const char *d = strstr(kf_synth_describe(s), marker); d; d = strstr(d + 1, marker)) n++;
    cr_expect_eq(n, want, "%s: %s plans %s", be->info.platform, name, kf_synth_describe(s));
    kf_synth_free(s);
    kf_graph_free(g);
}

static void check_strided(kf_backend *be) {
    const int gpu = strcmp(be->info.platform, "cpu") != 0;
    expect_fused(be, "nc_gemm_epilogue", "+ewise[", 3);
    expect_fused(be, "nc_reduce_epilogue", "+ewise[", gpu ? 2 : 0);
    /* GPUs (gpu_redepi.c): a chain between the product and the reduction (y's relu(.. +
     * c), l's - 1.0) is fused in the store stage as on the CPU; m's * 3.0 after the mean
     * is, in the combine */
    expect_fused(be, "nc_gemm_reduce", "matmul+", 3);
    expect_fused(be, "nc_gemm_lse", "matmul+", 1);
    for (size_t i = 0; i < sizeof strided_tasks / sizeof *strided_tasks; i++) check_task(be, strided_tasks[i]);
}

static void run_platform(const char *platform) {
    kf_error err = {0};
    kf_backend *be = NULL;
    if (kf_backend_open(platform, &be, &err) != KF_OK) {
        cr_skip_test("no %s device here: %s", platform, err.msg);
        return;
    }
    snprintf(workdir, sizeof workdir, "%s/test-work/ops-%s-%ld", KF_BUILD_DIR, platform, (long)getpid());
    cr_assert_eq(kf_mkdirs(workdir, &err), KF_OK, "%s", err.msg);
    static const kf_op_kind pointwise[] = {KF_KIND_UNARY, KF_KIND_BINARY};
    static const kf_op_kind reduce[] = {KF_KIND_REDUCE};
    static const kf_op_kind rows[] = {KF_KIND_SOFTMAX, KF_KIND_NORM, KF_KIND_SCAN};
    for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
        int covered = check_kinds(be, pointwise, 2, POINTWISE_BATCH, si) + check_kinds(be, reduce, 1, OTHER_BATCH, si) +
                      check_kinds(be, rows, 3, OTHER_BATCH, si) + check_contractions(be, si) + check_views(be, si) +
                      check_own(be, si) + check_gathers(be, si);
        /* an op whose shape rule no builder above knows would be skipped silently */
        cr_assert_eq(covered, KF_OP_COUNT, "%s: %d of %d ops have a task builder (a new shape rule needs one)",
                     be->info.platform, covered, KF_OP_COUNT);
    }
    check_strided(be);
    kf_backend_close(be);
    char cmd[640];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", workdir);
}

Test(ops_pipeline, cpu, .timeout = 900) { run_platform("cpu"); }

Test(ops_pipeline, opencl, .timeout = 900) {
    const char *skip = getenv("KFORGE_TEST_SKIP_GPU_VERIFY");
    if (skip && skip[0]) {
        cr_skip_test("KFORGE_TEST_SKIP_GPU_VERIFY=%s: the device kernels are checked by the release build's run",
                     skip);
        return;
    }
    run_platform("opencl");
}

Test(ops_pipeline, cuda, .timeout = 900) { run_platform("cuda"); }
