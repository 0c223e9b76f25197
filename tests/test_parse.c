/*
 * Tests of the .kf parser (src/ir/parse.c): every shipped task in tasks/ parses, good
 * inputs give the right graph (values, shapes, dtypes, attributes, outputs, tolerances),
 * and each kind of bad input is reported at the exact line and column with a message that
 * says what is wrong.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/ir.h"

static kf_graph *parse_ok(const char *text) {
    kf_graph *g = NULL;
    kf_error err = {0};
    kf_status s = kf_parse_string(text, "t.kf", &g, &err);
    char buf[1400];
    kf_error_format(&err, buf, sizeof buf);
    cr_assert_eq(s, KF_OK, "unexpected error: %s\n--- text:\n%s", buf, text);
    cr_assert_not_null(g);
    return g;
}

/* text must fail with code at line:col, with phrase in the message. */
static void parse_bad(const char *text, kf_status code, int line, int col, const char *phrase) {
    kf_graph *g = (kf_graph *)1;
    kf_error err = {0};
    kf_status s = kf_parse_string(text, "bad.kf", &g, &err);
    cr_assert_neq(s, KF_OK, "should fail:\n%s", text);
    cr_assert_null(g, "no graph on failure");
    cr_assert_eq(s, err.code);
    cr_assert_eq(err.code, code, "code %s, want %s (%s)", kf_status_name(err.code),
                 kf_status_name(code), err.msg);
    cr_assert_str_eq(err.file, "bad.kf");
    cr_assert(err.line == line && err.col == col, "at %d:%d, want %d:%d (%s)", err.line, err.col,
              line, col, err.msg);
    cr_assert(strstr(err.msg, phrase), "message '%s' lacks '%s'", err.msg, phrase);
}

static int val(const kf_graph *g, const char *name) {
    int id = kf_graph_find(g, name);
    cr_assert_geq(id, 0, "no value '%s'", name);
    return id;
}

/* The node that produces value name. */
static const kf_node *producer(const kf_graph *g, const char *name) {
    int id = val(g, name);
    cr_assert_geq(g->values[id].producer, 0, "'%s' has no producer", name);
    return &g->nodes[g->values[id].producer];
}

static void shape_is(const kf_graph *g, int id, const char *want) {
    char buf[128];
    kf_shape_format(&g->values[id].shape, buf, sizeof buf);
    cr_assert_str_eq(buf, want, "'%s'", g->values[id].name);
}

/* ------------------------------------------------------------ shipped tasks */

Test(tasks, every_file_parses) {
    const char *dir = KF_SOURCE_DIR "/tasks";
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot open %s", dir);
    int n = 0, have_swish = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".kf") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        kf_graph *g = NULL;
        kf_error err = {0};
        kf_status s = kf_parse_file(path, &g, &err);
        char buf[1400];
        kf_error_format(&err, buf, sizeof buf);
        cr_assert_eq(s, KF_OK, "%s", buf);
        cr_assert_gt(g->noutputs, 0);
        cr_assert_gt(g->nnodes, 0);
        cr_assert_str_eq(g->path, path);
        cr_assert_not_null(g->source);
        cr_assert_eq(strncmp(g->source, "# ", 2), 0, "%s starts with a comment", e->d_name);
        char base[256];
        snprintf(base, sizeof base, "%.*s", (int)(len - 3), e->d_name);
        cr_assert_str_eq(g->name, base, "task name matches the file name");
        if (!strcmp(e->d_name, "swish.kf")) have_swish = 1;
        kf_graph_free(g);
        n++;
    }
    closedir(d);
    cr_assert_geq(n, 14, "only %d tasks", n);
    cr_assert(have_swish);
}

Test(tasks, every_op_family_is_covered) {
    const char *names[] = {"swish", "gelu", "gelu_tanh_bias", "mish", "activations",
                           "binary_mix", "sum_rows", "mean_cols", "reduce_multi", "argmax",
                           "softmax", "log_softmax", "layer_norm", "rms_norm", "matmul",
                           "bmm_tb", "unary_misc", "pool_window", "cumsum_rows"};
    int seen[KF_OP_COUNT] = {0};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tasks/%s.kf", KF_SOURCE_DIR, names[i]);
        kf_graph *g = NULL;
        kf_error err = {0};
        cr_assert_eq(kf_parse_file(path, &g, &err), KF_OK, "%s: %s", names[i], err.msg);
        for (int k = 0; k < g->nnodes; k++) seen[g->nodes[k].op] = 1;
        kf_graph_free(g);
    }
    /* every op kind, and every op the brief's task list names, appears somewhere */
    int kinds[KF_KIND_VIEW + 1] = {0};
    for (int op = 0; op < KF_OP_COUNT; op++)
        if (seen[op]) kinds[kf_op_get((kf_op)op)->kind] = 1;
    for (int k = 0; k <= KF_KIND_VIEW; k++) cr_assert(kinds[k], "no task uses a %s op", kf_op_kind_name(k));
    const kf_op want[] = {KF_OP_SELU, KF_OP_ELU, KF_OP_HARDTANH, KF_OP_HARDSIGMOID,
                          KF_OP_SOFTSIGN, KF_OP_LEAKY_RELU, KF_OP_MAXIMUM, KF_OP_MINIMUM,
                          KF_OP_DIV, KF_OP_POW, KF_OP_SUB, KF_OP_PROD, KF_OP_MAX, KF_OP_MEAN,
                          KF_OP_ARGMAX, KF_OP_LOG_SOFTMAX, KF_OP_RMS_NORM, KF_OP_LAYER_NORM,
                          KF_OP_EXP, KF_OP_LOG, KF_OP_SQRT, KF_OP_RSQRT, KF_OP_ABS,
                          KF_OP_SQUARE, KF_OP_NEG, KF_OP_GELU, KF_OP_GELU_TANH, KF_OP_SOFTPLUS,
                          KF_OP_UNFOLD, KF_OP_PAD, KF_OP_FLIP, KF_OP_SLICE};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_assert(seen[want[i]], "no task uses %s", kf_op_get(want[i])->name);
}

Test(tasks, swish_graph) {
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_parse_file(KF_SOURCE_DIR "/tasks/swish.kf", &g, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(g->name, "swish");
    cr_assert_eq(g->ninputs, 1);
    int x = val(g, "x");
    cr_assert_eq(g->values[x].dtype, KF_F32);
    shape_is(g, x, "[4096, 4096]");
    cr_assert_eq(g->nnodes, 2);
    cr_assert_eq(g->nodes[0].op, KF_OP_SIGMOID);
    cr_assert_eq(g->nodes[1].op, KF_OP_MUL);
    cr_assert_eq(g->nodes[1].in[0], x);
    cr_assert_eq(g->nodes[1].in[1], g->nodes[0].out);
    cr_assert_eq(g->noutputs, 1);
    cr_assert_eq(g->outputs[0], val(g, "y"));
    cr_assert_eq(g->has_tol, 0);
    cr_assert_float_eq(kf_graph_min_bytes(g), 2.0 * 4096 * 4096 * 4, 0);
    kf_graph_free(g);
}

/* ------------------------------------------------------------ good inputs */

Test(parse, names_and_source) {
    const char *text = "input x: f32[4]\noutput y = relu(x)\n";
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(text, "some/dir/my_task.kf", &g, NULL), KF_OK);
    cr_assert_str_eq(g->name, "my_task", "default name is the file's basename");
    cr_assert_str_eq(g->path, "some/dir/my_task.kf");
    cr_assert_str_eq(g->source, text);
    cr_assert_neq(g->source, text, "the graph owns a copy");
    kf_graph_free(g);
    cr_assert_eq(kf_parse_string(text, NULL, &g, NULL), KF_OK);
    cr_assert_str_eq(g->name, "task");
    cr_assert_str_eq(g->path, "");
    kf_graph_free(g);
    g = parse_ok("task named # comment\ninput x: f32[4]\noutput y = relu(x)");
    cr_assert_str_eq(g->name, "named");
    kf_graph_free(g);
}

Test(parse, inputs_dtypes_ranges) {
    kf_graph *g = parse_ok("# header\n\n"
                           "input a: f32[2, 3, 4]   # comment\n"
                           "input h: f16[8]\n"
                           "input b: bf16[1, 8] range(-2, 2.5)\n"
                           "input d: f64[3]\r\n"
                           "input i: i64[5] range(0, 10)\n"
                           "input s: f32[]\n"
                           "output y = h * 0.5\n");
    cr_assert_eq(g->ninputs, 6);
    const char *names[] = {"a", "h", "b", "d", "i", "s"};
    kf_dtype dts[] = {KF_F32, KF_F16, KF_BF16, KF_F64, KF_I64, KF_F32};
    const char *shapes[] = {"[2, 3, 4]", "[8]", "[1, 8]", "[3]", "[5]", "[]"};
    for (int k = 0; k < 6; k++) {
        int id = val(g, names[k]);
        cr_assert_eq(g->inputs[k], id);
        cr_assert_eq(g->values[id].input_index, k);
        cr_assert_eq(g->values[id].dtype, dts[k], "%s", names[k]);
        shape_is(g, id, shapes[k]);
    }
    int b = val(g, "b");
    cr_assert(g->values[b].has_range);
    cr_assert_float_eq(g->values[b].lo, -2.0, 0);
    cr_assert_float_eq(g->values[b].hi, 2.5, 0);
    cr_assert_not(g->values[val(g, "a")].has_range);
    cr_assert_eq(g->values[b].line, 5);
    cr_assert_eq(g->values[b].col, 7);
    int y = val(g, "y");
    cr_assert_eq(g->values[y].dtype, KF_F16, "a literal adopts f16");
    kf_graph_free(g);
}

Test(parse, precedence_and_literals) {
    kf_graph *g = parse_ok("input a: f32[4]\ninput b: f32[4]\ninput c: f32[4]\n"
                           "p = a + b * c\n"
                           "q = (a + b) * c\n"
                           "r = -a * b\n"
                           "s = a - b - c\n"
                           "t = a / 2 * 3\n"
                           "u = a * (2 * 3) - -1.5e0\n"
                           "output v = exp(-(a))\n");
    const kf_node *n = producer(g, "p");
    cr_assert_eq(n->op, KF_OP_ADD);
    cr_assert_eq(n->in[0], val(g, "a"));
    cr_assert_eq(g->nodes[g->values[n->in[1]].producer].op, KF_OP_MUL);
    n = producer(g, "q");
    cr_assert_eq(n->op, KF_OP_MUL);
    cr_assert_eq(g->nodes[g->values[n->in[0]].producer].op, KF_OP_ADD);
    cr_assert_eq(n->in[1], val(g, "c"));
    n = producer(g, "r");
    cr_assert_eq(n->op, KF_OP_MUL, "unary minus binds tighter than *");
    cr_assert_eq(g->nodes[g->values[n->in[0]].producer].op, KF_OP_NEG);
    n = producer(g, "s");
    cr_assert_eq(n->op, KF_OP_SUB, "left associative");
    cr_assert_eq(n->in[1], val(g, "c"));
    n = producer(g, "t");
    cr_assert_eq(n->op, KF_OP_MUL);
    cr_assert(g->values[n->in[1]].is_const);
    cr_assert_float_eq(g->values[n->in[1]].cval, 3.0, 0);
    n = producer(g, "u");
    cr_assert_eq(n->op, KF_OP_SUB);
    cr_assert(g->values[n->in[1]].is_const, "-1.5e0 is a literal");
    cr_assert_float_eq(g->values[n->in[1]].cval, -1.5, 0);
    const kf_node *m = &g->nodes[g->values[n->in[0]].producer];
    cr_assert_eq(m->op, KF_OP_MUL);
    cr_assert(g->values[m->in[1]].is_const, "2 * 3 folds");
    cr_assert_float_eq(g->values[m->in[1]].cval, 6.0, 0);
    n = producer(g, "v");
    cr_assert_eq(n->op, KF_OP_EXP);
    cr_assert_eq(g->nodes[g->values[n->in[0]].producer].op, KF_OP_NEG);
    /* a statement's result takes its name; the operands it needed stay temporaries */
    const kf_node *pm = &g->nodes[g->values[producer(g, "p")->in[1]].producer];
    cr_assert_eq(g->values[pm->out].name[0], '%', "%s", g->values[pm->out].name);
    cr_assert_eq(g->values[val(g, "v")].line, 10);
    cr_assert_eq(g->values[val(g, "v")].col, 8);
    kf_graph_free(g);
}

Test(parse, named_constant) {
    kf_graph *g = parse_ok("input x: f32[4]\nk = 2 * 1.5\noutput y = x * k\n");
    int k = val(g, "k");
    cr_assert(g->values[k].is_const);
    cr_assert_float_eq(g->values[k].cval, 3.0, 0);
    cr_assert_eq(producer(g, "y")->in[1], k);
    kf_graph_free(g);
}

Test(parse, attributes) {
    kf_graph *g = parse_ok("input x: f32[2, 3, 4]\n"
                           "input w: f32[3, 4]\n"
                           "a = leaky_relu(x, negative_slope=0.2)\n"
                           "b = hardtanh(x, max_val=2, min_val=-0.5)\n"
                           "c = sum(x, axes=[0, -1], keepdim=true)\n"
                           "d = mean(x, axes=1)\n"
                           "e = max(x)\n"
                           "f = argmax(x, axis=-2)\n"
                           "g2 = softmax(x, axis=0)\n"
                           "h = log_softmax(x)\n"
                           "i = rms_norm(x, w, axes=[-2, -1], eps=1e-3)\n"
                           "j = layer_norm(x)\n"
                           "k = softplus(x, beta=2, threshold=10)\n"
                           "l = prod(x, axes=[2], keepdim=0)\n"
                           "output y = elu(x, alpha=0.5)\n");
    const kf_node *n = producer(g, "a");
    cr_assert_float_eq(n->attr.alpha, 0.2, 1e-15);
    n = producer(g, "b");
    cr_assert_float_eq(n->attr.alpha, -0.5, 0);
    cr_assert_float_eq(n->attr.beta, 2.0, 0);
    n = producer(g, "c");
    cr_assert_eq(n->attr.axes, 5u);
    cr_assert_eq(n->attr.keepdim, 1);
    shape_is(g, val(g, "c"), "[1, 3, 1]");
    n = producer(g, "d");
    cr_assert_eq(n->attr.axes, 2u);
    shape_is(g, val(g, "d"), "[2, 4]");
    n = producer(g, "e");
    cr_assert_eq(n->attr.axes, 7u, "default: all axes");
    shape_is(g, val(g, "e"), "[]");
    n = producer(g, "f");
    cr_assert_eq(n->attr.axes, 2u);
    cr_assert_eq(g->values[val(g, "f")].dtype, KF_I64);
    shape_is(g, val(g, "f"), "[2, 4]");
    cr_assert_eq(producer(g, "g2")->attr.axes, 1u);
    cr_assert_eq(producer(g, "h")->attr.axes, 4u, "default axis -1");
    n = producer(g, "i");
    cr_assert_eq(n->attr.axes, 6u);
    cr_assert_float_eq(n->attr.eps, 1e-3, 1e-18);
    cr_assert_eq(n->nin, 2);
    n = producer(g, "j");
    cr_assert_eq(n->attr.axes, 4u);
    cr_assert_float_eq(n->attr.eps, 1e-5, 1e-18, "default eps");
    n = producer(g, "k");
    cr_assert_float_eq(n->attr.alpha, 2.0, 0);
    cr_assert_float_eq(n->attr.beta, 10.0, 0);
    n = producer(g, "l");
    cr_assert_eq(n->attr.axes, 4u);
    cr_assert_eq(n->attr.keepdim, 0);
    cr_assert_float_eq(producer(g, "y")->attr.alpha, 0.5, 0);
    kf_graph_free(g);
}

Test(parse, matmul_and_outputs) {
    kf_graph *g = parse_ok("input p: f32[8, 16]\ninput q: f32[32, 16]\ninput r: f32[4, 16, 8]\n"
                           "mid = matmul(p, q, transpose_b=true)\n"
                           "output m = matmul(r, p, transpose_a=true, transpose_b=true)\n"
                           "output mid\n"
                           "output z = relu(mid)\n");
    /* transpose_a/b are sugar: the operand is read through a transpose view node */
    const kf_node *n = producer(g, "mid");
    cr_assert_eq(n->in[0], val(g, "p"));
    const kf_node *tv = &g->nodes[g->values[n->in[1]].producer];
    cr_assert_eq(tv->op, KF_OP_TRANSPOSE);
    cr_assert_eq(tv->in[0], val(g, "q"));
    cr_assert_eq(tv->line, 4);
    cr_assert_eq(tv->col, 20, "the view is placed at its attribute");
    shape_is(g, val(g, "mid"), "[8, 32]");
    n = producer(g, "m");
    cr_assert_eq(g->nodes[g->values[n->in[0]].producer].op, KF_OP_TRANSPOSE);
    cr_assert_eq(g->nodes[g->values[n->in[1]].producer].op, KF_OP_TRANSPOSE);
    shape_is(g, val(g, "m"), "[4, 8, 8]");
    cr_assert_eq(g->noutputs, 3);
    cr_assert_eq(g->outputs[0], val(g, "m"));
    cr_assert_eq(g->outputs[1], val(g, "mid"));
    cr_assert_eq(g->outputs[2], val(g, "z"));
    cr_assert_eq(g->values[val(g, "mid")].output_index, 1);
    kf_graph_free(g);
}

Test(parse, tolerance) {
    kf_graph *g = parse_ok("input x: f32[4]\noutput y = exp(x)\n");
    cr_assert_eq(g->has_tol, 0);
    kf_graph_free(g);
    g = parse_ok("input x: f32[4]\ntolerance atol=1e-5 nmse=1e-9\noutput y = exp(x)\n");
    cr_assert_eq(g->has_tol, 1);
    cr_assert_float_eq(g->atol, 1e-5, 1e-20);
    cr_assert_float_eq(g->rtol, 1e-4, 1e-20, "unset fields take the output dtype's default");
    cr_assert_float_eq(g->nmse, 1e-9, 1e-24);
    kf_graph_free(g);
    g = parse_ok("input x: f16[4]\noutput y = exp(x)\ntolerance rtol=0.05\ntolerance atol=0\n");
    cr_assert_float_eq(g->atol, 0, 0);
    cr_assert_float_eq(g->rtol, 0.05, 1e-15);
    cr_assert_float_eq(g->nmse, 1e-4, 1e-18);
    kf_graph_free(g);
}

/* ------------------------------------------------------------ bad inputs */

Test(errors, syntax) {
    parse_bad("input x: f32[4]\ny = relu(x\noutput y\n", KF_ERR_PARSE, 2, 11,
              "expected ',' or ')', found end of line");
    parse_bad("input x: f32[4]\ny = relu(x) z\n", KF_ERR_PARSE, 2, 13,
              "expected end of line, found 'z'");
    parse_bad("input x: f32[4]\ny = x +\n", KF_ERR_PARSE, 2, 8,
              "expected an operand (a name, a number, a call or '('), found end of line");
    parse_bad("input x f32[4]\n", KF_ERR_PARSE, 1, 9, "expected ':' after the input's name, found 'f32'");
    parse_bad("input x: f32[4]\nrelu(x)\n", KF_ERR_PARSE, 2, 5, "expected '=' (a statement is");
    parse_bad("(x)\n", KF_ERR_PARSE, 1, 1, "expected a statement");
    parse_bad("input x: f32[4]\ny = x $ 2\n", KF_ERR_PARSE, 2, 7, "unexpected character '$'");
    parse_bad("input x: f32[4]\ny = x * 1e+\n", KF_ERR_PARSE, 2, 9, "malformed number '1e+'");
    parse_bad("input x: f32[4]\ny = x * 2q\n", KF_ERR_PARSE, 2, 9, "malformed number '2q'");
    parse_bad("input x: f32[4]\ny = relu(axis=1, x)\noutput y\n", KF_ERR_PARSE, 2, 18,
              "operands must come before keyword attributes");
}

Test(errors, undefined_name) {
    parse_bad("input xs: f32[4]\noutput y = relu(x) + xs\n", KF_ERR_PARSE, 2, 17,
              "undefined name 'x' (did you mean 'xs'?)");
    parse_bad("input x: f32[4]\noutput y = x + zzzz\n", KF_ERR_PARSE, 2, 16, "undefined name 'zzzz'");
    parse_bad("input x: f32[4]\noutput q\n", KF_ERR_PARSE, 2, 8, "undefined name 'q'");
    parse_bad("input x: f32[4]\noutput y = x * relu\n", KF_ERR_PARSE, 2, 16,
              "'relu' is an op, not a value; call it as relu(...)");
}

Test(errors, duplicate_name) {
    parse_bad("input x: f32[4]\ny = relu(x)\n  y = exp(x)\noutput y\n", KF_ERR_PARSE, 3, 3,
              "'y' is already defined (line 2)");
    parse_bad("input x: f32[4]\ninput x: f32[8]\n", KF_ERR_PARSE, 2, 7,
              "'x' is already defined (line 1)");
    parse_bad("input x: f32[4]\noutput x = relu(x)\n", KF_ERR_PARSE, 2, 8, "'x' is already defined");
    parse_bad("input input: f32[4]\n", KF_ERR_PARSE, 1, 7, "expected a value name, found keyword 'input'");
    parse_bad("task a\ntask b\n", KF_ERR_PARSE, 2, 1, "task name given twice (first on line 1)");
}

Test(errors, unknown_op) {
    parse_bad("input x: f32[4]\noutput y = sigmod(x)\n", KF_ERR_PARSE, 2, 12,
              "unknown op 'sigmod' (did you mean 'sigmoid'?)");
    parse_bad("input x: f32[4]\noutput y = x * lyaer_norm(x)\n", KF_ERR_PARSE, 2, 16,
              "did you mean 'layer_norm'?");
    /* two swapped pairs: 2 edits when a swap counts as one (4 without) */
    parse_bad("input x: f32[4]\noutput y = lyaer_nrom(x)\n", KF_ERR_PARSE, 2, 12,
              "unknown op 'lyaer_nrom' (did you mean 'layer_norm'?)");
    parse_bad("input x: f32[4]\noutput y = frobnicate(x)\n", KF_ERR_PARSE, 2, 12, "unknown op 'frobnicate'");
    kf_graph *g = NULL;
    kf_error err = {0};
    kf_parse_string("input x: f32[4]\noutput y = frobnicate(x)\n", "t.kf", &g, &err);
    cr_assert_null(strstr(err.msg, "did you mean"), "nothing is close: %s", err.msg);
}

Test(errors, unknown_attribute) {
    parse_bad("input x: f32[4]\noutput y = leaky_relu(x, slope=0.1)\n", KF_ERR_PARSE, 2, 26,
              "leaky_relu has no attribute 'slope'; its attributes are: negative_slope");
    parse_bad("input x: f32[4]\noutput y = hardtanh(x, min=0)\n", KF_ERR_PARSE, 2, 24,
              "its attributes are: min_val, max_val");
    parse_bad("input x: f32[4]\noutput y = relu(x, alpha=1)\n", KF_ERR_PARSE, 2, 20,
              "relu has no attribute 'alpha' (it takes none)");
    parse_bad("input x: f32[4]\noutput y = sum(x, axis=0)\n", KF_ERR_PARSE, 2, 19,
              "its attributes are: axes, keepdim");
    parse_bad("input x: f32[4]\noutput y = elu(x, alpha=1, alpha=2)\n", KF_ERR_PARSE, 2, 28,
              "attribute 'alpha' given twice");
    parse_bad("input x: f32[4]\noutput y = elu(x, alpha=true)\n", KF_ERR_PARSE, 2, 25,
              "expected a number for 'alpha', found 'true'");
    parse_bad("input x: f32[4, 4]\noutput y = sum(x, keepdim=2)\n", KF_ERR_PARSE, 2, 27,
              "expected true or false for 'keepdim', found '2'");
    parse_bad("input x: f32[4, 4]\noutput y = sum(x, axes=[0.5])\n", KF_ERR_PARSE, 2, 25,
              "expected an integer, found '0.5'");
}

Test(errors, arity) {
    parse_bad("input x: f32[4]\noutput y = relu(x, x)\n", KF_ERR_TYPE, 2, 12,
              "relu: takes 1 operand, found 2");
    parse_bad("input x: f32[4]\noutput y = layer_norm(x, x, x, x)\n", KF_ERR_TYPE, 2, 12,
              "layer_norm: takes 1 to 3 operands, found 4");
    parse_bad("input x: f32[4]\noutput y = sum(axes=0)\n", KF_ERR_TYPE, 2, 12,
              "sum: takes 1 operand, found 0");
}

Test(errors, bad_dtype_and_dims) {
    parse_bad("input x: f33[4]\n", KF_ERR_PARSE, 1, 10,
              "unknown dtype 'f33'; expected f32, f16, bf16, i64, f64 or bool");
    parse_bad("input x: f32[4, 0]\n", KF_ERR_PARSE, 1, 17, "expected a positive integer dimension, found '0'");
    parse_bad("input x: f32[4, -3]\n", KF_ERR_PARSE, 1, 17, "expected a positive integer dimension, found '-'");
    parse_bad("input x: f32[4.5]\n", KF_ERR_PARSE, 1, 14, "expected a positive integer dimension, found '4.5'");
    parse_bad("input x: f32[1,1,1,1,1,1,1,1,1]\n", KF_ERR_PARSE, 1, 30, "too many dimensions (at most 8)");
    parse_bad("input x: f32[4\n", KF_ERR_PARSE, 1, 15, "expected ',' or ']', found end of line");
    parse_bad("input x: f32[99999999999999999999]\n", KF_ERR_PARSE, 1, 14,
              "integer 99999999999999999999 is too large");
    parse_bad("\ninput x: f32[1048576, 1048576, 1048576, 1048576]\n", KF_ERR_PARSE, 2, 13, "overflows");
    parse_bad("input x: f32[4] range(2, -2)\n", KF_ERR_PARSE, 1, 17,
              "range needs low < high, found range(2, -2)");
}

Test(errors, outputs) {
    parse_bad("input x: f32[4]\ny = relu(x)\n", KF_ERR_PARSE, 3, 1,
              "the task has no outputs; add an 'output NAME' statement");
    parse_bad("", KF_ERR_PARSE, 1, 1, "no outputs");
    parse_bad("input x: f32[4]\noutput y = relu(x)\noutput y\n", KF_ERR_PARSE, 3, 8,
              "'y' is already an output");
    parse_bad("input x: f32[4]\noutput x\n", KF_ERR_PARSE, 2, 8, "'x' is a graph input");
    parse_bad("input x: f32[4]\noutput c = 2 * 3\n", KF_ERR_PARSE, 2, 8, "'c' is a constant");
    parse_bad("input x: f32[4]\noutput c = exp(-1)\n", KF_ERR_PARSE, 2, 8, "'c' is a constant");
    parse_bad("input x: f32[4]\noutput relu(x)\n", KF_ERR_PARSE, 2, 8,
              "expected a value name or NAME = expression after 'output', found 'relu'");
    parse_bad("input x: f32[4]\ny = x\n", KF_ERR_PARSE, 2, 5, "only gives another name");
}

Test(errors, tolerance) {
    parse_bad("input x: f32[4]\noutput y = exp(x)\ntolerance atol=-1\n", KF_ERR_PARSE, 3, 16,
              "atol must not be negative");
    parse_bad("input x: f32[4]\noutput y = exp(x)\ntolerance tol=1\n", KF_ERR_PARSE, 3, 11,
              "expected atol, rtol or nmse, found 'tol'");
    parse_bad("input x: f32[4]\noutput y = exp(x)\ntolerance\n", KF_ERR_PARSE, 3, 10,
              "expected atol=, rtol= or nmse=, found end of line");
    parse_bad("tolerance rtol=1\ntolerance rtol=2\n", KF_ERR_PARSE, 2, 11,
              "rtol given twice (first on line 1)");
}

Test(errors, shapes_and_types) {
    parse_bad("input x: f32[4, 8]\ninput b: f32[3]\noutput y = x + b\n", KF_ERR_TYPE, 3, 14,
              "add: shapes do not broadcast: 'x' is [4, 8] and 'b' is [3]");
    parse_bad("input x: f32[4, 8]\ninput h: f16[8]\noutput y = relu(x) * h\n", KF_ERR_TYPE, 3, 20,
              "mul: operand dtypes differ");
    parse_bad("input a: f32[4, 8]\ninput b: f32[7, 2]\noutput c = matmul(a, b)\n", KF_ERR_TYPE, 3,
              12, "matmul: inner dimensions differ: a is [4, 8] (K=8), b is [7, 2] (K=7)");
    parse_bad("input a: f32[4, 8]\ninput b: f32[4, 2]\noutput c = matmul(a, b, transpose_b=true)\n",
              KF_ERR_TYPE, 3, 12, "b is [2, 4] (K=2)");
    parse_bad("input a: f32[4, 8]\ninput b: f32[4, 2]\noutput c = matmul(a, b, transpose_b=2)\n",
              KF_ERR_PARSE, 3, 37, "expected true or false for 'transpose_b'");
    parse_bad("input x: f32[4, 8]\noutput y = sum(x, axes=[0, 2])\n", KF_ERR_TYPE, 2, 28,
              "sum: axis 2 is out of range for a rank-2 input (expected -2 to 1)");
    parse_bad("input x: f32[4, 8]\noutput y = softmax(x, axis=-3)\n", KF_ERR_TYPE, 2, 28,
              "softmax: axis -3 is out of range");
    parse_bad("input x: f32[4, 8]\noutput y = sum(x, axes=[1, -1])\n", KF_ERR_TYPE, 2, 28,
              "sum: axis 1 given twice");
    parse_bad("input x: f32[]\noutput y = softmax(x)\n", KF_ERR_TYPE, 2, 12,
              "softmax: needs at least one axis");
    parse_bad("input x: f32[4, 8]\ninput w: f32[4]\noutput y = layer_norm(x, w)\n", KF_ERR_TYPE,
              3, 12, "layer_norm: weight 'w' is [4], expected [8]");
    parse_bad("input x: f32[4, 8]\ninput w: f32[8]\noutput y = rms_norm(x, w, w)\n", KF_ERR_TYPE,
              3, 12, "rms_norm: takes 1 to 2 operands, found 3");
    parse_bad("input x: f32[4, 8, 2]\noutput y = layer_norm(x, axes=1)\n", KF_ERR_TYPE, 2, 12,
              "axes must be the trailing dimensions");
    parse_bad("input x: f32[4, 8]\noutput i = argmax(x, axis=[0, 1])\n", KF_ERR_TYPE, 2, 12,
              "argmax: takes exactly one axis, found 2 (axes [0, 1])");
    parse_bad("input i: i64[4]\noutput y = exp(i)\n", KF_ERR_TYPE, 2, 12,
              "exp: input 'i' is i64, expected a float dtype");
    parse_bad("input x: f32[4, 8]\na = argmax(x)\noutput y = a + 1\n", KF_ERR_TYPE, 3, 14,
              "add: operand 'a' is i64");
}

/* gather's rule (torch.gather's): an i64 index of the input's rank, no larger than the
 * input on any dim but the axis; the result has the index's shape and any index values */
Test(parse, gather_types) {
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string("input x: f32[4, 8]\ninput i: i64[3, 11]\noutput y = gather(x, i, axis=1, fill=0)\n"
                                 "output z = gather(x, i, axis=-1)\n", "ok.kf", &g, &err), KF_OK, "%s", err.msg);
    const kf_value *y = &g->values[g->outputs[0]];
    cr_assert(y->dtype == KF_F32 && y->shape.rank == 2 && y->shape.d[0] == 3 && y->shape.d[1] == 11);
    cr_assert_eq(g->nodes[g->values[g->outputs[1]].producer].attr.axes, 1u << 1, "axis -1 is dim 1");
    kf_graph_free(g);
    parse_bad("input x: f32[4, 8]\ninput i: f32[4, 1]\noutput y = gather(x, i, axis=1)\n", KF_ERR_TYPE, 3, 12,
              "gather: index 'i' is f32, expected i64");
    parse_bad("input x: f32[4, 8]\ninput i: i64[4]\noutput y = gather(x, i, axis=1)\n", KF_ERR_TYPE, 3, 12,
              "has rank 1 and input 'x' [4, 8] rank 2");
    parse_bad("input x: f32[4, 8]\ninput i: i64[5, 2]\noutput y = gather(x, i, axis=1)\n", KF_ERR_TYPE, 3, 12,
              "larger than input 'x' [4, 8] in dim 0 (5 > 4)");
    parse_bad("input x: f32[4, 8]\ninput i: i64[4, 2]\noutput y = gather(x, i, axis=2)\n", KF_ERR_TYPE, 3, 30,
              "out of range");
    parse_bad("input x: i64[4, 8]\ninput i: i64[4, 2]\noutput y = gather(x, i)\n", KF_ERR_TYPE, 3, 12,
              "input 'x' is i64, expected a float dtype");
}

Test(errors, file_not_found) {
    kf_graph *g = (kf_graph *)1;
    kf_error err = {0};
    kf_status s = kf_parse_file("/nonexistent/dir/task.kf", &g, &err);
    cr_assert_eq(s, KF_ERR_IO);
    cr_assert_null(g);
    cr_assert_str_eq(err.file, "/nonexistent/dir/task.kf");
    cr_assert_eq(err.line, 0);
    cr_assert(strstr(err.msg, "No such file"), "%s", err.msg);
}

Test(errors, formatted) {
    kf_graph *g = NULL;
    kf_error err = {0};
    kf_parse_string("input x: f32[4]\noutput y = sigmod(x)\n", "tasks/t.kf", &g, &err);
    char buf[1400];
    kf_error_format(&err, buf, sizeof buf);
    cr_assert_str_eq(buf, "tasks/t.kf:2:12: error: unknown op 'sigmod' (did you mean 'sigmoid'?)");
}

/* ---- index maps: the view ops and their attribute types ---- */

Test(parse, view_ops) {
    kf_graph *g = parse_ok("input x: f32[4, 6, 8]\ninput v: f32[1, 8]\n"
                           "t = transpose(x, dim0=0, dim1=2)\n"
                           "p = permute(x, dims=[2, 0, 1])\n"
                           "r = permute(x)\n"
                           "s = slice(x, dim=-1, start=1, end=-1, step=2)\n"
                           "e = slice(x, dim=1, start=-2)\n"
                           "q = pad(x, pads=[1, 2, 0, 3], value=-1.5)\n"
                           "f = flip(x, dims=[0, -1])\n"
                           "b = expand(v, shape=[3, -1, 8])\n"
                           "u = unfold(x, dim=2, size=3, step=2, dilation=2)\n"
                           "output y = t + 0\noutput z = relu(u)\n");
    shape_is(g, val(g, "t"), "[8, 6, 4]");
    shape_is(g, val(g, "p"), "[8, 4, 6]");
    shape_is(g, val(g, "r"), "[8, 6, 4]");
    shape_is(g, val(g, "s"), "[4, 6, 3]");
    shape_is(g, val(g, "e"), "[4, 2, 8]");
    shape_is(g, val(g, "q"), "[4, 9, 11]");
    shape_is(g, val(g, "f"), "[4, 6, 8]");
    shape_is(g, val(g, "b"), "[3, 1, 8]");
    shape_is(g, val(g, "u"), "[4, 6, 2, 3]");
    const kf_node *n = producer(g, "p");
    cr_assert_eq(n->attr.ints.n, 3);
    cr_assert_eq(n->attr.ints.v[0], 2);
    n = producer(g, "s");
    cr_assert_eq(n->attr.dim, -1, "dims are kept as written; the view resolves them");
    cr_assert_eq(n->attr.end, -1);
    cr_assert_float_eq(producer(g, "q")->attr.alpha, -1.5, 0);
    /* t + 0 and relu(u); the views cost nothing */
    cr_assert_float_eq(kf_graph_flops(g), 1.0 * 8 * 6 * 4 + 1.0 * 4 * 6 * 2 * 3, 0, "views cost nothing");
    kf_graph_free(g);
}

/* the triangles, diagonals and an inf attribute value (an attention mask's pad) */
Test(parse, triangle_and_diagonal_views) {
    kf_graph *g = parse_ok("input x: f32[2, 4, 6]\ninput v: f32[3, 5]\n"
                           "a = triu(x, diagonal=-1)\n"
                           "b = tril(x, value=-inf)\n"
                           "c = diag_embed(v, offset=2)\n"
                           "d = diagonal(x, offset=-1, dim1=1, dim2=2)\n"
                           "e = diag_embed(v, dim1=0, dim2=2)\n"
                           "output y = a + b\noutput z = c * 2\noutput w = d + 1\noutput u = e + 1\n");
    shape_is(g, val(g, "a"), "[2, 4, 6]");
    shape_is(g, val(g, "c"), "[3, 7, 7]");
    shape_is(g, val(g, "d"), "[2, 3]");
    shape_is(g, val(g, "e"), "[5, 3, 5]");
    cr_assert(isinf(producer(g, "b")->attr.alpha) && producer(g, "b")->attr.alpha < 0);
    cr_assert_eq(producer(g, "a")->attr.start, -1);
    kf_graph_free(g);
    parse_bad("input x: f32[4]\noutput y = triu(x)\n", KF_ERR_TYPE, 2, 12, "triu: needs rank >= 2");
    parse_bad("input x: f32[4, 3]\noutput y = diagonal(x, offset=3)\n", KF_ERR_TYPE, 2, 12,
              "diagonal: offset 3 leaves no element of the 4 x 3 matrices");
    parse_bad("input x: f32[4, 3]\noutput y = diag_embed(x, dim1=1, dim2=-2)\n", KF_ERR_TYPE, 2, 12,
              "diag_embed: dim1 and dim2 are both dimension 1 of the result");
    parse_bad("input x: f32[4, 3]\noutput y = triu(x, diagonal=inf)\n", KF_ERR_PARSE, 2, 29,
              "expected an integer for 'diagonal', found 'inf'");
}

/* inf and -inf are a float attribute's values (max pooling pads with -inf), nothing else */
Test(parse, infinite_attribute) {
    kf_graph *g = parse_ok("input x: f32[4, 8]\n"
                           "q = pad(x, pads=[1, 2], value=-inf)\nr = pad(x, pads=[1, 0], value=inf)\n"
                           "output y = max(unfold(q, dim=1, size=3), axes=[-1]) + 0\noutput z = r * 1\n");
    cr_assert(isinf(producer(g, "q")->attr.alpha) && producer(g, "q")->attr.alpha < 0);
    cr_assert(isinf(producer(g, "r")->attr.alpha) && producer(g, "r")->attr.alpha > 0);
    kf_graph_free(g);
    parse_bad("input x: f32[4, 8]\noutput y = slice(x, dim=1, start=inf)\n", KF_ERR_PARSE, 2, 34,
              "expected an integer for 'start'");
    parse_bad("input x: f32[4, 8]\noutput y = x + inf\n", KF_ERR_PARSE, 2, 16, "inf");
}

Test(errors, view_ops) {
    parse_bad("input x: f32[4, 8]\noutput y = slice(x, dim=1, start=9) + 0\n", KF_ERR_TYPE, 2, 12,
              "slice: [9:8] of dimension 1 (size 8) is out of range or empty");
    parse_bad("input x: f32[4, 8]\noutput y = slice(x, dim=2)\n", KF_ERR_TYPE, 2, 12,
              "slice: dim 2 is out of range for a rank-2 input (expected -2 to 1)");
    parse_bad("input x: f32[4, 8]\noutput y = slice(x, step=0)\n", KF_ERR_TYPE, 2, 12,
              "slice: step 0, expected a positive step");
    parse_bad("input x: f32[4, 8, 2]\noutput y = permute(x, dims=[0, 0, 1])\n", KF_ERR_TYPE, 2, 12,
              "permute: dims is not a permutation of 0..2 (dim 0 appears twice)");
    parse_bad("input x: f32[4, 8, 2]\noutput y = permute(x, dims=[1, 0])\n", KF_ERR_TYPE, 2, 12,
              "permute: dims has 2 entries, the input has rank 3");
    parse_bad("input x: f32[4, 8]\noutput y = pad(x, pads=[1])\n", KF_ERR_TYPE, 2, 12,
              "pad: pads has 1 entries, expected (before, after) pairs");
    parse_bad("input x: f32[4, 8]\noutput y = pad(x, pads=[-4, -4])\n", KF_ERR_TYPE, 2, 12,
              "leave dimension 1 of size 8 empty");
    parse_bad("input x: f32[4, 8]\noutput y = expand(x, shape=[4, 9])\n", KF_ERR_TYPE, 2, 12,
              "expand: dimension 1 of size 8 cannot expand to 9");
    parse_bad("input x: f32[4, 8]\noutput y = unfold(x, dim=1, size=5, dilation=2)\n", KF_ERR_TYPE, 2, 12,
              "unfold: a window spans 9 elements (size 5, dilation 2), dimension 1 has 8");
    parse_bad("input x: f32[4, 8]\noutput y = flip(x, dims=[1, -1])\n", KF_ERR_TYPE, 2, 12,
              "flip: dim 1 given twice");
    parse_bad("input x: f32[4]\noutput y = transpose(x)\n", KF_ERR_TYPE, 2, 12,
              "transpose: needs rank >= 2");
    parse_bad("input x: f32[4, 8]\noutput y = slice(x, start=1.5)\n", KF_ERR_PARSE, 2, 27,
              "expected an integer for 'start', found '1.5'");
    parse_bad("input x: f32[4, 8]\noutput y = permute(x, dims=true)\n", KF_ERR_PARSE, 2, 28,
              "expected an [integer list] for 'dims'");
    parse_bad("input x: f32[4, 8]\noutput y = pad(x, pads=[1, 2.5])\n", KF_ERR_PARSE, 2, 28,
              "expected an integer, found '2.5'");
}
