/*
 * Tests of the graph IR's construction half (src/ir/graph.c): dtypes, shapes and
 * broadcasting, the op table and attribute defaults, graphs built by hand with every
 * shape rule and its error, constant folding, and the FLOP/byte counts.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "kforge/ir.h"

static kf_shape shp(int rank, ...) {
    kf_shape s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++) s.d[i] = va_arg(ap, int);
    va_end(ap);
    return s;
}

static int input(kf_graph *g, const char *name, kf_dtype dt, kf_shape s) {
    kf_error err = {0};
    int id = kf_graph_add_input(g, name, dt, &s, &err);
    cr_assert_geq(id, 0, "add_input %s: %s", name, err.msg);
    return id;
}

static int node(kf_graph *g, kf_op op, int a, int b, const kf_attrs *at) {
    kf_error err = {0};
    int ins[2] = {a, b};
    int id = kf_graph_add_node(g, op, ins, b < 0 ? 1 : 2, at, NULL, 0, 0, &err);
    cr_assert_geq(id, 0, "add_node %s: %s", kf_op_get(op)->name, err.msg);
    return id;
}

/* Adds a node that must fail with KF_ERR_TYPE and a message containing phrase. */
static void node_fails(kf_graph *g, kf_op op, const int *ins, int nin, const kf_attrs *at,
                       const char *phrase) {
    kf_error err = {0};
    int before = g->nvalues, nodes = g->nnodes;
    int id = kf_graph_add_node(g, op, ins, nin, at, NULL, 7, 3, &err);
    cr_assert_eq(id, -1, "%s should fail", kf_op_get(op)->name);
    cr_assert_eq(err.code, KF_ERR_TYPE, "code %d: %s", err.code, err.msg);
    cr_assert_eq(err.line, 7);
    cr_assert_eq(err.col, 3);
    cr_assert(strstr(err.msg, phrase), "message '%s' lacks '%s'", err.msg, phrase);
    cr_assert_eq(g->nvalues, before, "a failed node must not add values");
    cr_assert_eq(g->nnodes, nodes);
}

static void assert_shape(const kf_graph *g, int id, kf_shape want) {
    char a[128], b[128];
    kf_shape_format(&g->values[id].shape, a, sizeof a);
    kf_shape_format(&want, b, sizeof b);
    cr_assert(kf_shape_equal(&g->values[id].shape, &want), "shape %s, want %s", a, b);
}

Test(dtype, names_sizes_parse) {
    const char *names[] = {"f32", "f16", "bf16", "i64", "f64", "bool"};
    int sizes[] = {4, 2, 2, 8, 8, 1};
    for (int t = 0; t < KF_DTYPE_COUNT; t++) {
        cr_assert_str_eq(kf_dtype_name((kf_dtype)t), names[t]);
        cr_assert_eq(kf_dtype_size((kf_dtype)t), sizes[t]);
        kf_dtype out = KF_DTYPE_COUNT;
        cr_assert(kf_dtype_parse(names[t], &out));
        cr_assert_eq(out, (kf_dtype)t);
    }
    kf_dtype out = KF_F16;
    cr_assert_not(kf_dtype_parse("f33", &out));
    cr_assert_not(kf_dtype_parse("F32", &out));
    cr_assert_not(kf_dtype_parse("", &out));
    cr_assert_eq(out, KF_F16, "a failed parse leaves out alone");
}

Test(shape, numel_equal_format) {
    kf_shape s0 = shp(0), s = shp(3, 2, 3, 4);
    cr_assert_eq(kf_shape_numel(&s0), 1);
    cr_assert_eq(kf_shape_numel(&s), 24);
    char buf[64];
    kf_shape_format(&s, buf, sizeof buf);
    cr_assert_str_eq(buf, "[2, 3, 4]");
    kf_shape_format(&s0, buf, sizeof buf);
    cr_assert_str_eq(buf, "[]");
    kf_shape_format(&s, buf, 5);
    cr_assert_str_eq(buf, "[2, ", "truncated to the buffer");
    kf_shape t = shp(3, 2, 3, 4), u = shp(3, 2, 3, 5), v = shp(2, 2, 3);
    cr_assert(kf_shape_equal(&s, &t));
    cr_assert_not(kf_shape_equal(&s, &u));
    cr_assert_not(kf_shape_equal(&s, &v));
}

Test(shape, broadcast_numpy_rules) {
    struct { kf_shape a, b, want; int ok; } cases[] = {
        {shp(2, 4, 8), shp(1, 8), shp(2, 4, 8), 1},
        {shp(2, 4, 1), shp(2, 1, 8), shp(2, 4, 8), 1},
        {shp(0), shp(3, 2, 3, 4), shp(3, 2, 3, 4), 1},
        {shp(3, 5, 1, 7), shp(2, 6, 1), shp(3, 5, 6, 7), 1},
        {shp(1, 1), shp(1, 9), shp(1, 9), 1},
        {shp(2, 4, 8), shp(1, 3), shp(0), 0},
        {shp(2, 2, 3), shp(2, 3, 3), shp(0), 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kf_shape out = shp(1, 99);
        int ok = kf_shape_broadcast(&cases[i].a, &cases[i].b, &out);
        cr_assert_eq(ok, cases[i].ok, "case %zu", i);
        if (ok) cr_assert(kf_shape_equal(&out, &cases[i].want), "case %zu", i);
        ok = kf_shape_broadcast(&cases[i].b, &cases[i].a, &out);
        cr_assert_eq(ok, cases[i].ok, "case %zu swapped", i);
        if (ok) cr_assert(kf_shape_equal(&out, &cases[i].want), "case %zu swapped", i);
    }
}

Test(ops, table_lookup_kinds) {
    for (int i = 0; i < KF_OP_COUNT; i++) {
        const kf_op_def *info = kf_op_get((kf_op)i);
        cr_assert_eq(info->op, (kf_op)i);
        cr_assert_eq(kf_op_lookup(info->name), (kf_op)i, "%s", info->name);
        cr_assert(info->min_in >= 1 && info->min_in <= info->max_in &&
                  info->max_in <= KF_MAX_NODE_IN);
        kf_attrs a = kf_attrs_default((kf_op)i, 2); /* every spec parses (asserts otherwise) */
        (void)a;
    }
    cr_assert_eq(kf_op_lookup("sigmod"), KF_OP_COUNT);
    cr_assert_eq(kf_op_get(KF_OP_SIGMOID)->kind, KF_KIND_UNARY);
    cr_assert_eq(kf_op_get(KF_OP_POW)->domain, KF_DOMAIN_POS);
    cr_assert_eq(kf_op_get(KF_OP_LAYER_NORM)->max_in, 3);
    cr_assert_str_eq(kf_op_kind_name(KF_KIND_REDUCE), "reduce");
    cr_assert_str_eq(kf_op_kind_name(KF_KIND_MATMUL), "matmul");
    cr_assert(kf_op_is_elementwise(KF_OP_RELU));
    cr_assert(kf_op_is_elementwise(KF_OP_MAXIMUM));
    cr_assert_not(kf_op_is_elementwise(KF_OP_SUM));
    cr_assert_not(kf_op_is_elementwise(KF_OP_SOFTMAX));
    cr_assert_not(kf_op_is_elementwise(KF_OP_MATMUL));
}

Test(ops, attribute_defaults) {
    kf_attrs a = kf_attrs_default(KF_OP_LEAKY_RELU, 2);
    cr_assert_float_eq(a.alpha, 0.01, 1e-15);
    a = kf_attrs_default(KF_OP_HARDTANH, 1);
    cr_assert_float_eq(a.alpha, -1.0, 0);
    cr_assert_float_eq(a.beta, 1.0, 0);
    a = kf_attrs_default(KF_OP_SOFTPLUS, 1);
    cr_assert_float_eq(a.alpha, 1.0, 0);
    cr_assert_float_eq(a.beta, 20.0, 0);
    a = kf_attrs_default(KF_OP_SUM, 3);
    cr_assert_eq(a.axes, 7u, "all axes of a rank-3 input");
    cr_assert_eq(a.keepdim, 0);
    a = kf_attrs_default(KF_OP_ARGMAX, 2);
    cr_assert_eq(a.axes, 2u, "-1 resolves to axis 1");
    a = kf_attrs_default(KF_OP_SOFTMAX, 4);
    cr_assert_eq(a.axes, 8u);
    a = kf_attrs_default(KF_OP_LAYER_NORM, 3);
    cr_assert_eq(a.axes, 4u);
    cr_assert_float_eq(a.eps, 1e-5, 1e-20);
    a = kf_attrs_default(KF_OP_RMS_NORM, 2);
    cr_assert_float_eq(a.eps, 1e-6, 1e-20);
    a = kf_attrs_default(KF_OP_TRANSPOSE, 2);
    cr_assert_eq(a.dim, -2);
    cr_assert_eq(a.dim1, -1);
    a = kf_attrs_default(KF_OP_SLICE, 2);
    cr_assert_eq(a.end, INT64_MAX, "end's default 'max'");
    cr_assert_eq(a.step, 1);
    a = kf_attrs_default(KF_OP_ARGMAX, 0);
    cr_assert_eq(a.axes, 0u, "a scalar has no axis -1");
    a = kf_attrs_default(KF_OP_RELU, 2);
    cr_assert_eq(a.axes, 0u);
    cr_assert_float_eq(a.alpha, 0, 0);
}

Test(graph, inputs_and_names) {
    kf_graph *g = kf_graph_new("t");
    cr_assert_str_eq(g->name, "t");
    int x = input(g, "x", KF_F32, shp(2, 4, 8));
    int w = input(g, "w", KF_BF16, shp(1, 8));
    cr_assert_eq(g->ninputs, 2);
    cr_assert_eq(g->inputs[1], w);
    cr_assert_eq(g->values[w].input_index, 1);
    cr_assert_eq(g->values[x].producer, -1);
    cr_assert_eq(g->values[x].output_index, -1);
    cr_assert_eq(kf_graph_find(g, "w"), w);
    cr_assert_eq(kf_graph_find(g, "nope"), -1);

    kf_error err = {0};
    kf_shape s = shp(1, 4);
    cr_assert_eq(kf_graph_add_input(g, "x", KF_F32, &s, &err), -1);
    cr_assert(strstr(err.msg, "already defined"), "%s", err.msg);
    s = shp(2, 4, 0);
    cr_assert_eq(kf_graph_add_input(g, "z", KF_F32, &s, &err), -1);
    cr_assert(strstr(err.msg, "dimension 1 is 0"), "%s", err.msg);
    s.rank = KF_MAX_DIMS + 1;
    cr_assert_eq(kf_graph_add_input(g, "z", KF_F32, &s, &err), -1);
    cr_assert(strstr(err.msg, "rank 9"), "%s", err.msg);
    s = shp(3, 1 << 30, 1 << 30, 1 << 30);
    cr_assert_eq(kf_graph_add_input(g, "z", KF_F32, &s, &err), -1);
    cr_assert(strstr(err.msg, "overflows"), "%s", err.msg);
    cr_assert_eq(g->ninputs, 2, "failed inputs add nothing");

    /* temporaries are numbered in creation order; constants count as temporaries */
    int t1 = node(g, KF_OP_RELU, x, -1, NULL);
    int c = kf_graph_add_const(g, 2.0);
    int t3 = node(g, KF_OP_MUL, t1, c, NULL);
    cr_assert_str_eq(g->values[t1].name, "%1");
    cr_assert_str_eq(g->values[c].name, "%2");
    cr_assert_str_eq(g->values[t3].name, "%3");
    cr_assert(g->values[c].is_const);
    cr_assert_eq(g->values[c].dtype, KF_F32);
    cr_assert_eq(g->values[c].shape.rank, 0);
    int ins[1] = {t3};
    int named = kf_graph_add_node(g, KF_OP_TANH, ins, 1, NULL, "y", 3, 1, &err);
    cr_assert_str_eq(g->values[named].name, "y");
    cr_assert_eq(kf_graph_add_node(g, KF_OP_TANH, ins, 1, NULL, "y", 4, 1, &err), -1);
    cr_assert(strstr(err.msg, "'y' is already defined"), "%s", err.msg);
    cr_assert_eq(g->nnodes, 3);
    cr_assert_eq(g->nodes[2].out, named);
    cr_assert_eq(g->values[named].producer, 2);
    cr_assert_eq(g->nodes[2].line, 3);
    kf_graph_free(g);
    kf_graph_free(NULL);
}

Test(graph, outputs) {
    kf_graph *g = kf_graph_new(NULL);
    cr_assert_str_eq(g->name, "");
    int x = input(g, "x", KF_F32, shp(1, 16));
    int y = node(g, KF_OP_EXP, x, -1, NULL);
    int z = node(g, KF_OP_LOG, x, -1, NULL);
    kf_error err = {0};
    cr_assert_eq(kf_graph_mark_output(g, z, &err), KF_OK);
    cr_assert_eq(kf_graph_mark_output(g, y, &err), KF_OK);
    cr_assert_eq(g->noutputs, 2);
    cr_assert_eq(g->outputs[0], z);
    cr_assert_eq(g->values[y].output_index, 1);
    cr_assert_neq(kf_graph_mark_output(g, y, &err), KF_OK);
    cr_assert(strstr(err.msg, "already an output"), "%s", err.msg);
    cr_assert_neq(kf_graph_mark_output(g, kf_graph_add_const(g, 1), &err), KF_OK);
    cr_assert(strstr(err.msg, "constant"), "%s", err.msg);
    cr_assert_neq(kf_graph_mark_output(g, x, &err), KF_OK);
    cr_assert(strstr(err.msg, "graph input"), "%s", err.msg);
    cr_assert_eq(g->noutputs, 2);
    kf_graph_free(g);
}

Test(rules, unary_and_arity) {
    kf_graph *g = kf_graph_new("t");
    int x = input(g, "x", KF_F16, shp(2, 3, 5));
    int i = input(g, "i", KF_I64, shp(1, 5));
    int y = node(g, KF_OP_GELU, x, -1, NULL);
    assert_shape(g, y, shp(2, 3, 5));
    cr_assert_eq(g->values[y].dtype, KF_F16);
    int ins[3] = {x, x, x};
    node_fails(g, KF_OP_RELU, &i, 1, NULL, "relu: input 'i' is i64, expected a float dtype");
    node_fails(g, KF_OP_RELU, ins, 2, NULL, "relu: takes 1 operand, found 2");
    node_fails(g, KF_OP_ADD, ins, 1, NULL, "add: takes 2 operands, found 1");
    node_fails(g, KF_OP_RMS_NORM, ins, 3, NULL, "rms_norm: takes 1 to 2 operands, found 3");
    node_fails(g, KF_OP_SUM, ins, 0, NULL, "takes 1 operand, found 0");
    kf_graph_free(g);
}

Test(rules, binary_broadcast_and_dtypes) {
    kf_graph *g = kf_graph_new("t");
    int x = input(g, "x", KF_F32, shp(2, 4, 8));
    int b = input(g, "b", KF_F32, shp(1, 8));
    int col = input(g, "col", KF_F32, shp(2, 4, 1));
    int h = input(g, "h", KF_F16, shp(1, 8));
    int bad = input(g, "bad", KF_F32, shp(1, 3));
    int s = node(g, KF_OP_ADD, x, b, NULL);
    assert_shape(g, s, shp(2, 4, 8));
    s = node(g, KF_OP_MAXIMUM, b, col, NULL); /* [8] with [4, 1] */
    assert_shape(g, s, shp(2, 4, 8));
    /* a literal adopts the tensor's dtype, on either side */
    int c = kf_graph_add_const(g, 0.5);
    s = node(g, KF_OP_MUL, h, c, NULL);
    cr_assert_eq(g->values[s].dtype, KF_F16);
    assert_shape(g, s, shp(1, 8));
    s = node(g, KF_OP_SUB, c, h, NULL);
    cr_assert_eq(g->values[s].dtype, KF_F16);
    int ins[2] = {x, bad};
    node_fails(g, KF_OP_ADD, ins, 2, NULL,
               "add: shapes do not broadcast: 'x' is [4, 8] and 'bad' is [3]");
    node_fails(g, KF_OP_ADD, ins, 2, NULL, "dimension 1 of 'x' is 8, dimension 0 of 'bad' is 3");
    int mixed[2] = {x, h};
    node_fails(g, KF_OP_MUL, mixed, 2, NULL,
               "mul: operand dtypes differ: 'x' [4, 8] f32 and 'h' [8] f16");
    int i = input(g, "i", KF_I64, shp(1, 8));
    int ints[2] = {i, c};
    node_fails(g, KF_OP_DIV, ints, 2, NULL, "operand 'i' is i64, expected a float dtype");
    kf_graph_free(g);
}

Test(rules, constant_folding) {
    struct { kf_op op; double a, b, want; } cases[] = {
        {KF_OP_ADD, 2, 3, 5},       {KF_OP_SUB, 2, 3, -1},     {KF_OP_MUL, 2, 3, 6},
        {KF_OP_DIV, 3, 2, 1.5},     {KF_OP_MAXIMUM, 2, 3, 3},  {KF_OP_MINIMUM, 2, 3, 2},
        {KF_OP_POW, 2, 10, 1024},
    };
    kf_graph *g = kf_graph_new("t");
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int a = kf_graph_add_const(g, cases[k].a), b = kf_graph_add_const(g, cases[k].b);
        int v = node(g, cases[k].op, a, b, NULL);
        cr_assert(g->values[v].is_const, "%s folds", kf_op_get(cases[k].op)->name);
        cr_assert_float_eq(g->values[v].cval, cases[k].want, 1e-12);
        cr_assert_eq(g->values[v].shape.rank, 0);
        cr_assert_eq(g->values[v].producer, -1);
    }
    cr_assert_eq(g->nnodes, 0, "folding adds no nodes");
    kf_error err = {0};
    int ab[2] = {kf_graph_add_const(g, 4), kf_graph_add_const(g, 0.5)};
    int v = kf_graph_add_node(g, KF_OP_POW, ab, 2, NULL, "half", 1, 1, &err);
    cr_assert_str_eq(g->values[v].name, "half");
    cr_assert_float_eq(g->values[v].cval, 2.0, 1e-15);
    /* unary ops on literals fold too, with their attributes */
    int e = node(g, KF_OP_EXP, ab[0], -1, NULL);
    cr_assert(g->values[e].is_const);
    cr_assert_float_eq(g->values[e].cval, exp(4.0), 1e-9);
    kf_attrs lr = kf_attrs_default(KF_OP_LEAKY_RELU, 0);
    lr.alpha = 0.25;
    int m2 = kf_graph_add_const(g, -2);
    e = node(g, KF_OP_LEAKY_RELU, m2, -1, &lr);
    cr_assert_float_eq(g->values[e].cval, -0.5, 0);
    /* folding follows the reference's NaN rule: maximum propagates NaN */
    int zero = kf_graph_add_const(g, 0);
    int nan = node(g, KF_OP_DIV, zero, zero, NULL);
    cr_assert(isnan(g->values[nan].cval));
    e = node(g, KF_OP_MAXIMUM, nan, ab[0], NULL);
    cr_assert(isnan(g->values[e].cval), "maximum(NaN, 4) is NaN, as in the interpreter");
    cr_assert_eq(g->nnodes, 0, "folding adds no nodes");
    /* a literal under a non-elementwise op is no fold: softmax of a scalar is an axis error */
    node_fails(g, KF_OP_SOFTMAX, &zero, 1, NULL, "needs at least one axis");
    kf_graph_free(g);
}

Test(rules, reductions) {
    kf_graph *g = kf_graph_new("t");
    int x = input(g, "x", KF_F32, shp(3, 4, 5, 6));
    kf_attrs at = kf_attrs_default(KF_OP_SUM, 3);
    int s = node(g, KF_OP_SUM, x, -1, &at);
    cr_assert_eq(g->values[s].shape.rank, 0, "all axes, no keepdim: a scalar");
    at.keepdim = 1;
    s = node(g, KF_OP_MEAN, x, -1, &at);
    assert_shape(g, s, shp(3, 1, 1, 1));
    at.axes = 5; /* axes 0 and 2 */
    at.keepdim = 0;
    s = node(g, KF_OP_MAX, x, -1, &at);
    assert_shape(g, s, shp(1, 5));
    cr_assert_eq(g->nodes[g->nnodes - 1].attr.axes, 5u);
    at.keepdim = 1;
    s = node(g, KF_OP_PROD, x, -1, &at);
    assert_shape(g, s, shp(3, 1, 5, 1));
    s = node(g, KF_OP_ARGMAX, x, -1, NULL);
    assert_shape(g, s, shp(2, 4, 5));
    cr_assert_eq(g->values[s].dtype, KF_I64);
    kf_attrs am = kf_attrs_default(KF_OP_ARGMIN, 3);
    am.axes = 1;
    am.keepdim = 1;
    s = node(g, KF_OP_ARGMIN, x, -1, &am);
    assert_shape(g, s, shp(3, 1, 5, 6));
    cr_assert_eq(g->values[s].dtype, KF_I64);

    am.axes = 3;
    node_fails(g, KF_OP_ARGMAX, &x, 1, &am, "argmax: takes exactly one axis, found 2 (axes [0, 1])");
    at.axes = 0;
    node_fails(g, KF_OP_SUM, &x, 1, &at, "sum: needs at least one axis");
    at.axes = 1u << 3;
    node_fails(g, KF_OP_SUM, &x, 1, &at, "axis 3 is out of range for input 'x' of shape [4, 5, 6]");
    int i = input(g, "i", KF_I64, shp(1, 5));
    node_fails(g, KF_OP_SUM, &i, 1, NULL, "input 'i' is i64");
    kf_graph_free(g);
}

Test(rules, softmax) {
    kf_graph *g = kf_graph_new("t");
    int x = input(g, "x", KF_BF16, shp(2, 7, 9));
    int y = node(g, KF_OP_LOG_SOFTMAX, x, -1, NULL);
    assert_shape(g, y, shp(2, 7, 9));
    cr_assert_eq(g->values[y].dtype, KF_BF16);
    cr_assert_eq(g->nodes[0].attr.axes, 2u);
    kf_attrs at = kf_attrs_default(KF_OP_SOFTMAX, 2);
    at.axes = 3;
    node_fails(g, KF_OP_SOFTMAX, &x, 1, &at, "softmax: takes exactly one axis, found 2");
    kf_graph_free(g);
}

Test(rules, norms) {
    kf_graph *g = kf_graph_new("t");
    int x = input(g, "x", KF_F32, shp(3, 2, 4, 8));
    int w = input(g, "w", KF_F32, shp(1, 8));
    int b = input(g, "b", KF_F32, shp(1, 8));
    int w2 = input(g, "w2", KF_F32, shp(2, 4, 8));
    int wh = input(g, "wh", KF_F16, shp(1, 8));
    int ins[3] = {x, w, b};
    kf_error err = {0};
    int y = kf_graph_add_node(g, KF_OP_LAYER_NORM, ins, 3, NULL, NULL, 0, 0, &err);
    cr_assert_geq(y, 0, "%s", err.msg);
    assert_shape(g, y, shp(3, 2, 4, 8));
    cr_assert_eq(g->nodes[0].nin, 3);
    kf_attrs at = kf_attrs_default(KF_OP_RMS_NORM, 3);
    at.axes = 6; /* [1, 2] */
    int two[2] = {x, w2};
    y = kf_graph_add_node(g, KF_OP_RMS_NORM, two, 2, &at, NULL, 0, 0, &err);
    cr_assert_geq(y, 0, "%s", err.msg);
    y = node(g, KF_OP_RMS_NORM, x, -1, NULL);
    assert_shape(g, y, shp(3, 2, 4, 8));

    node_fails(g, KF_OP_RMS_NORM, two, 2, NULL,
               "rms_norm: weight 'w2' is [4, 8], expected [8] (the normalised trailing dims of "
               "input 'x' [2, 4, 8])");
    int bad_bias[3] = {x, w, w2};
    node_fails(g, KF_OP_LAYER_NORM, bad_bias, 3, NULL, "bias 'w2' is [4, 8], expected [8]");
    int half[2] = {x, wh};
    node_fails(g, KF_OP_LAYER_NORM, half, 2, NULL, "weight 'wh' is f16, expected f32");
    at.axes = 1; /* [0] is not trailing */
    node_fails(g, KF_OP_LAYER_NORM, &x, 1, &at, "axes must be the trailing dimensions");
    at.axes = 5; /* [0, 2] */
    node_fails(g, KF_OP_LAYER_NORM, &x, 1, &at, "found [0, 2] for a rank-3 input");
    kf_graph_free(g);
}

Test(rules, matmul) {
    kf_graph *g = kf_graph_new("t");
    int a = input(g, "a", KF_F32, shp(2, 4, 8));
    int b = input(g, "b", KF_F32, shp(2, 8, 2));
    int bt = input(g, "bt", KF_F32, shp(2, 2, 8));
    int at_ = input(g, "at", KF_F32, shp(2, 8, 4));
    int ba = input(g, "ba", KF_F32, shp(4, 2, 1, 4, 8));
    int bb = input(g, "bb", KF_F32, shp(3, 3, 8, 5));
    int c = node(g, KF_OP_MATMUL, a, b, NULL);
    assert_shape(g, c, shp(2, 4, 2));
    int btt = node(g, KF_OP_TRANSPOSE, bt, -1, NULL); /* matmul's transpose_b: a view */
    c = node(g, KF_OP_MATMUL, a, btt, NULL);
    assert_shape(g, c, shp(2, 4, 2));
    int att = node(g, KF_OP_TRANSPOSE, at_, -1, NULL);
    c = node(g, KF_OP_MATMUL, att, btt, NULL);
    assert_shape(g, c, shp(2, 4, 2));
    c = node(g, KF_OP_MATMUL, ba, bb, NULL);
    assert_shape(g, c, shp(4, 2, 3, 4, 5));

    int w = input(g, "w", KF_F32, shp(2, 7, 2));
    int v = input(g, "v", KF_F32, shp(1, 8));
    int h = input(g, "h", KF_F16, shp(2, 8, 2));
    int bad[2] = {a, w};
    node_fails(g, KF_OP_MATMUL, bad, 2, NULL,
               "matmul: inner dimensions differ: a is [4, 8] (K=8), b is [7, 2] (K=7)");
    int badt[2] = {node(g, KF_OP_TRANSPOSE, a, -1, NULL), b};
    node_fails(g, KF_OP_MATMUL, badt, 2, NULL, "a is [8, 4] (K=4), b is [8, 2] (K=8)");
    int vec[2] = {a, v};
    node_fails(g, KF_OP_MATMUL, vec, 2, NULL, "both operands need rank >= 2");
    int mixed[2] = {a, h};
    node_fails(g, KF_OP_MATMUL, mixed, 2, NULL, "operand dtypes differ: 'a' is f32 and 'h' is f16");
    int bx = input(g, "bx", KF_F32, shp(3, 2, 8, 5));
    int ba3 = input(g, "ba3", KF_F32, shp(3, 3, 4, 8));
    int bb2[2] = {ba3, bx};
    node_fails(g, KF_OP_MATMUL, bb2, 2, NULL, "batch dimensions do not broadcast: a has [3], b has [2]");
    kf_graph_free(g);
}

Test(count, flops_and_bytes) {
    kf_graph *g = kf_graph_new("t");
    int x = input(g, "x", KF_F32, shp(2, 64, 32));
    int w = input(g, "w", KF_F16, shp(1, 32));
    int s = node(g, KF_OP_SIGMOID, x, -1, NULL);               /* 4 * 2048 */
    int y = node(g, KF_OP_MUL, x, s, NULL);                    /* 1 * 2048 */
    int r = node(g, KF_OP_SUM, y, -1, NULL);                   /* 1 * 2048 (input elements) */
    int sm = node(g, KF_OP_SOFTMAX, x, -1, NULL);              /* 5 * 2048 */
    int am = node(g, KF_OP_ARGMAX, sm, -1, NULL);              /* 1 * 2048, i64[64] out */
    cr_assert_float_eq(kf_node_flops(g, &g->nodes[0]), 4.0 * 2048, 0);
    cr_assert_float_eq(kf_node_flops(g, &g->nodes[1]), 2048.0, 0);
    cr_assert_float_eq(kf_node_flops(g, &g->nodes[2]), 2048.0, 0);
    cr_assert_float_eq(kf_node_flops(g, &g->nodes[3]), 5.0 * 2048, 0);
    cr_assert_float_eq(kf_graph_flops(g), 2048.0 * (4 + 1 + 1 + 5 + 1), 0);
    kf_error err = {0};
    cr_assert_eq(kf_graph_mark_output(g, r, &err), KF_OK);
    cr_assert_eq(kf_graph_mark_output(g, am, &err), KF_OK);
    /* inputs x (2048 f32) + outputs r (1 f32) + am (64 i64); w is read by nothing, and
     * intermediates and constants are free */
    cr_assert_float_eq(kf_graph_min_bytes(g), 2048 * 4 + 4 + 64 * 8, 0);
    /* w read whole by a computing op: its 32 f16, and the f16 output e */
    int e = node(g, KF_OP_EXP, w, -1, NULL);
    cr_assert_eq(kf_graph_mark_output(g, e, &err), KF_OK);
    cr_assert_float_eq(kf_graph_min_bytes(g), 2048 * 4 + 32 * 2 + 4 + 64 * 8 + 32 * 2, 0);
    kf_graph_free(g);

    /* an input read only through a view counts what the view can reach: one row of a
     * [64, 32] matrix (a task reading part of an input is not held to all of it) */
    g = kf_graph_new("part");
    x = input(g, "x", KF_F32, shp(2, 64, 32));
    kf_attrs at = kf_attrs_default(KF_OP_SLICE, 2);
    at.dim = 0, at.start = 0, at.end = 1;
    int row = node(g, KF_OP_SLICE, x, -1, &at);
    int sq = node(g, KF_OP_EXP, row, -1, NULL);
    cr_assert_eq(kf_graph_mark_output(g, sq, &err), KF_OK);
    cr_assert_float_eq(kf_graph_min_bytes(g), 32 * 4 + 32 * 4, 0);
    kf_graph_free(g);

    g = kf_graph_new("mm");
    int a = input(g, "a", KF_F32, shp(3, 4, 16, 32));
    int b = input(g, "b", KF_F32, shp(2, 24, 32));
    int c = node(g, KF_OP_MATMUL, a, node(g, KF_OP_TRANSPOSE, b, -1, NULL), NULL);
    assert_shape(g, c, shp(3, 4, 16, 24));
    cr_assert_float_eq(kf_node_flops(g, &g->nodes[0]), 0, 0, "a view moves, it computes nothing");
    cr_assert_float_eq(kf_node_flops(g, &g->nodes[1]), 2.0 * 16 * 24 * 32 * 4, 0);
    int n = node(g, KF_OP_LAYER_NORM, c, -1, NULL);
    cr_assert_float_eq(kf_node_flops(g, &g->nodes[2]), 8.0 * 4 * 16 * 24, 0);
    cr_assert_eq(kf_graph_mark_output(g, n, &err), KF_OK);
    cr_assert_float_eq(kf_graph_min_bytes(g), 4.0 * (4 * 16 * 32 + 24 * 32 + 4 * 16 * 24), 0);
    kf_graph_free(g);

    g = kf_graph_new("big");
    x = input(g, "x", KF_F32, shp(3, 2048, 2048, 2048));
    y = node(g, KF_OP_EXP, x, -1, NULL);
    cr_assert_float_eq(kf_graph_flops(g), 8589934592.0, 0, "no int overflow");
    kf_graph_free(g);
}

Test(count, tolerance_defaults) {
    struct { kf_dtype t; double a, r, n; } want[] = {
        {KF_F32, 1e-4, 1e-4, 1e-8},   {KF_F16, 1e-2, 1e-2, 1e-4}, {KF_BF16, 2e-2, 2e-2, 1e-3},
        {KF_F64, 1e-10, 1e-10, 1e-18}, {KF_I64, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        double a = -1, r = -1, n = -1;
        kf_tolerance_default(want[i].t, &a, &r, &n);
        cr_assert_eq(a, want[i].a, "%s atol", kf_dtype_name(want[i].t));
        cr_assert_eq(r, want[i].r);
        cr_assert_eq(n, want[i].n);
    }
    double a = -1;
    kf_tolerance_default(KF_F16, &a, NULL, NULL);
    cr_assert_eq(a, 1e-2);
}
