/*
 * Tests of the PyTorch graph import (src/ir/import.c) on hand-written graph.json files in
 * the importer's format (docs/pytorch.md): no Python or torch needed, so these run in the
 * sanitizer build too. The end-to-end path (torch.export -> bundle -> kforge synth -> the
 * kernel against the module) is python/tests/test_import.py.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/ir.h"

static char path[64];

static const char *write_graph(const char *text) {
    snprintf(path, sizeof path, "/tmp/kf_import_XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

#define HEAD "{\"format\": \"kforge-graph\", \"version\": 1, \"name\": \"t\", \"model\": \"/m.py\", "
#define X_IN "{\"name\": \"x\", \"kind\": \"input\", \"index\": 0, \"dtype\": \"f32\", \"shape\": [8, 16]}"
#define W_IN "{\"name\": \"p_weight\", \"kind\": \"param\", \"target\": \"lin.weight\", \"dtype\": \"f32\", \"shape\": [4, 16]}"
#define B_IN "{\"name\": \"p_bias\", \"kind\": \"param\", \"target\": \"lin.bias\", \"dtype\": \"f32\", \"shape\": [4]}"

static kf_status import(const char *json, char **text, kf_graph **g, kf_error *err) {
    kf_status s = kf_import_torch_graph(write_graph(json), text, g, err);
    unlink(path);
    return s;
}

/* Linear + relu + a max.dim pair + softmax: the lowered text, and the graph it parses to. */
Test(import, lowers_linear_reductions_and_softmax) {
    const char *json = HEAD
        "\"inputs\": [" W_IN ", " B_IN ", " X_IN "],"
        "\"nodes\": ["
        " {\"name\": \"linear\", \"target\": \"aten.linear.default\", \"args\": [{\"ref\": \"x\"}, {\"ref\": \"p_weight\"}, {\"ref\": \"p_bias\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 4]},"
        " {\"name\": \"relu\", \"target\": \"aten.relu.default\", \"args\": [{\"ref\": \"linear\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 4]},"
        " {\"name\": \"max_1\", \"target\": \"aten.max.dim\", \"args\": [{\"ref\": \"x\"}, 1, true], \"kwargs\": {}, \"dtype\": null, \"shape\": [{\"dtype\": \"f32\", \"shape\": [8, 1]}, {\"dtype\": \"i64\", \"shape\": [8, 1]}]},"
        " {\"name\": \"getitem\", \"target\": \"getitem\", \"args\": [{\"ref\": \"max_1\"}, 0], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 1]},"
        " {\"name\": \"getitem_1\", \"target\": \"getitem\", \"args\": [{\"ref\": \"max_1\"}, 1], \"kwargs\": {}, \"dtype\": \"i64\", \"shape\": [8, 1]},"
        " {\"name\": \"sub\", \"target\": \"aten.sub.Tensor\", \"args\": [{\"ref\": \"x\"}, {\"ref\": \"getitem\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]},"
        " {\"name\": \"softmax\", \"target\": \"aten.softmax.int\", \"args\": [{\"ref\": \"sub\"}, -1], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]},"
        " {\"name\": \"mul\", \"target\": \"aten.mul.Tensor\", \"args\": [{\"ref\": \"softmax\"}, 0.5], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]}"
        "],"
        "\"outputs\": [{\"ref\": \"relu\"}, {\"ref\": \"mul\"}]}";
    char *text = NULL;
    kf_graph *g = NULL;
    kf_error err = {0};
    kf_status s = import(json, &text, &g, &err);
    cr_assert_eq(s, KF_OK, "%s", err.msg);
    cr_assert(strstr(text, "linear = matmul(x, p_weight, transpose_b=true) + p_bias\n"), "%s", text);
    cr_assert(strstr(text, "output relu_v = relu(linear)\n"), "%s", text);
    cr_assert(strstr(text, "getitem = max(x, axes=[1], keepdim=true)\n"), "%s", text);
    cr_assert(strstr(text, "softmax_v = softmax(sub_v, axis=-1)\n"), "%s", text);
    cr_assert(strstr(text, "output mul_v = softmax_v * 0.5\n"), "%s", text);
    cr_assert_null(strstr(text, "argmax"), "the unused index half of max.dim is not computed:\n%s", text);
    /* inputs in graph order (parameters first, as torch.export lists them), outputs in
     * PyTorch's order */
    cr_assert_eq(g->ninputs, 3);
    cr_assert_str_eq(g->values[g->inputs[0]].name, "p_weight");
    cr_assert_str_eq(g->values[g->inputs[2]].name, "x");
    cr_assert_eq(g->noutputs, 2);
    cr_assert_str_eq(g->values[g->outputs[0]].name, "relu_v");
    cr_assert_eq(g->values[g->outputs[1]].shape.d[1], 16);
    free(text);
    kf_graph_free(g);
}

/* A scan by its record: dim -> axis; a dtype change is refused, not dropped. */
Test(import, scans_by_their_records) {
    const char *json = HEAD "\"inputs\": [" X_IN "],"
        "\"nodes\": ["
        " {\"name\": \"cs\", \"target\": \"aten.cumsum.default\", \"args\": [{\"ref\": \"x\"}, 1], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]},"
        " {\"name\": \"cp\", \"target\": \"aten.cumprod.default\", \"args\": [{\"ref\": \"cs\"}, -2], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]}"
        "], \"outputs\": [{\"ref\": \"cp\"}]}";
    char *text = NULL;
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(import(json, &text, &g, &err), KF_OK, "%s", err.msg);
    cr_assert(strstr(text, "cumsum(x, axis=1)") && strstr(text, "cumprod(cs, axis=-2)"), "%s", text);
    free(text);
    kf_graph_free(g);
    const char *typed = HEAD "\"inputs\": [" X_IN "],"
        "\"nodes\": ["
        " {\"name\": \"cs\", \"target\": \"aten.cumsum.default\", \"args\": [{\"ref\": \"x\"}, 1], \"kwargs\": {\"dtype\": \"f64\"}, \"dtype\": \"f32\", \"shape\": [8, 16]}"
        "], \"outputs\": [{\"ref\": \"cs\"}]}";
    cr_assert_eq(import(typed, NULL, NULL, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "dtype change"), "%s", err.msg);
}

/* Every node without a rule is named, with its op; nothing is half-lowered. */
Test(import, unsupported_nodes_are_all_named) {
    const char *json = HEAD "\"inputs\": [" X_IN "],"
        "\"nodes\": ["
        " {\"name\": \"sort\", \"target\": \"aten.sort.default\", \"args\": [{\"ref\": \"x\"}, 1], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]},"
        " {\"name\": \"roll\", \"target\": \"aten.roll.default\", \"args\": [{\"ref\": \"x\"}, [1]], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]},"
        " {\"name\": \"relu\", \"target\": \"aten.relu.default\", \"args\": [{\"ref\": \"roll\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]}"
        "], \"outputs\": [{\"ref\": \"sort\"}, {\"ref\": \"relu\"}]}";
    char *text = NULL;
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(import(json, &text, &g, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "2 nodes cannot be lowered"), "%s", err.msg);
    cr_assert(strstr(err.msg, "node 'sort' (aten.sort.default)"), "%s", err.msg);
    cr_assert(strstr(err.msg, "node 'roll' (aten.roll.default)"), "%s", err.msg);
    cr_assert_null(text);
    cr_assert_null(g);
}

/* A node that fails is named once however many read it; a cycle is refused, not followed. */
Test(import, failures_named_once_and_cycles_refused) {
    const char *json = HEAD "\"inputs\": [" X_IN "],"
        "\"nodes\": ["
        " {\"name\": \"sort\", \"target\": \"aten.sort.default\", \"args\": [{\"ref\": \"x\"}, 1], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]},"
        " {\"name\": \"relu\", \"target\": \"aten.relu.default\", \"args\": [{\"ref\": \"sort\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]},"
        " {\"name\": \"neg\", \"target\": \"aten.neg.default\", \"args\": [{\"ref\": \"sort\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]}"
        "], \"outputs\": [{\"ref\": \"relu\"}, {\"ref\": \"neg\"}]}";
    kf_error err = {0};
    cr_assert_eq(import(json, NULL, NULL, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "1 node cannot be lowered"), "%s", err.msg);
    const char *loop = HEAD "\"inputs\": [" X_IN "],"
        "\"nodes\": ["
        " {\"name\": \"a\", \"target\": \"aten.relu.default\", \"args\": [{\"ref\": \"b\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]},"
        " {\"name\": \"b\", \"target\": \"aten.neg.default\", \"args\": [{\"ref\": \"a\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]}"
        "], \"outputs\": [{\"ref\": \"a\"}]}";
    cr_assert_eq(import(loop, NULL, NULL, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "depends on itself"), "%s", err.msg);
}

/* A transpose folds into the matmul that reads it; anywhere else it is refused. */
/* ATen's view ops become the view ops of their records (a transpose feeding a matmul is a
 * transpose view the planner folds into the matmul's layout; one feeding relu is read
 * through its map). */
Test(import, aten_views_become_view_ops) {
    const char *json = HEAD "\"inputs\": [" X_IN ", " W_IN "],"
        "\"nodes\": ["
        " {\"name\": \"t\", \"target\": \"aten.t.default\", \"args\": [{\"ref\": \"p_weight\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [16, 4]},"
        " {\"name\": \"mm\", \"target\": \"aten.mm.default\", \"args\": [{\"ref\": \"x\"}, {\"ref\": \"t\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 4]},"
        " {\"name\": \"relu\", \"target\": \"aten.relu.default\", \"args\": [{\"ref\": \"t\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [16, 4]},"
        " {\"name\": \"tr\", \"target\": \"aten.transpose.int\", \"args\": [{\"ref\": \"x\"}, 0, 1], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [16, 8]},"
        " {\"name\": \"perm\", \"target\": \"aten.permute.default\", \"args\": [{\"ref\": \"x\"}, [1, 0]], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [16, 8]},"
        " {\"name\": \"sl\", \"target\": \"aten.slice.Tensor\", \"args\": [{\"ref\": \"perm\"}, 1, 1, 9223372036854775807, 2], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [16, 4]},"
        " {\"name\": \"fl\", \"target\": \"aten.flip.default\", \"args\": [{\"ref\": \"sl\"}, [0]], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [16, 4]},"
        " {\"name\": \"pd\", \"target\": \"aten.constant_pad_nd.default\", \"args\": [{\"ref\": \"fl\"}, [1, 2], 0.5], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [16, 7]},"
        " {\"name\": \"uf\", \"target\": \"aten.unfold.default\", \"args\": [{\"ref\": \"pd\"}, 1, 3, 2], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [16, 3, 3]},"
        " {\"name\": \"ex\", \"target\": \"aten.expand.default\", \"args\": [{\"ref\": \"x\"}, [2, -1, 16]], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [2, 8, 16]},"
        " {\"name\": \"sum_1\", \"target\": \"aten.sum.dim_IntList\", \"args\": [{\"ref\": \"uf\"}, [2]], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [16, 3]}"
        "], \"outputs\": [{\"ref\": \"mm\"}, {\"ref\": \"relu\"}, {\"ref\": \"tr\"}, {\"ref\": \"sum_1\"}, {\"ref\": \"ex\"}]}";
    char *text = NULL;
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(import(json, &text, &g, &err), KF_OK, "%s", err.msg);
    static const char *const want[] = {
        "t = transpose(p_weight)\n", "output mm = matmul(x, t)\n", "output relu_v = relu(t)\n",
        "output tr = transpose(x, dim0=0, dim1=1)\n", "perm = permute(x, dims=[1, 0])\n",
        "sl = slice(perm, dim=1, start=1, step=2)\n", "fl = flip(sl, dims=[0])\n",
        "pd = pad(fl, pads=[1, 2], value=0.5)\n", "uf = unfold(pd, dim=1, size=3, step=2)\n",
        "output ex = expand(x, shape=[2, -1, 16])\n"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) cr_expect(strstr(text, want[i]), "no '%s' in\n%s", want[i], text);
    cr_assert_eq(g->noutputs, 5, "every output's shape matched what PyTorch recorded");
    free(text);
    kf_graph_free(g);
    /* an attribute that is not an integer is named */
    const char *bad = HEAD "\"inputs\": [" X_IN "],"
        "\"nodes\": ["
        " {\"name\": \"sl\", \"target\": \"aten.slice.Tensor\", \"args\": [{\"ref\": \"x\"}, 1, 1.5], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 15]}"
        "], \"outputs\": [{\"ref\": \"sl\"}]}";
    cr_assert_eq(import(bad, NULL, NULL, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "node 'sl' (aten.slice.Tensor): start is not an integer"), "%s", err.msg);
    /* F.pad: its constant mode is the pad view, the others are named */
    const char *pad = HEAD "\"inputs\": [" X_IN "],"
        "\"nodes\": ["
        " {\"name\": \"p\", \"target\": \"aten.pad.default\", \"args\": [{\"ref\": \"x\"}, [1, 1]], \"kwargs\": {\"value\": 2.0}, \"dtype\": \"f32\", \"shape\": [8, 18]},"
        " {\"name\": \"q\", \"target\": \"aten.pad.default\", \"args\": [{\"ref\": \"x\"}, [1, 1], \"reflect\"], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 18]}"
        "], \"outputs\": [{\"ref\": \"p\"}, {\"ref\": \"q\"}]}";
    cr_assert_eq(import(pad, &text, NULL, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "1 node cannot") && strstr(err.msg, "node 'q' (aten.pad.default): a pad mode other than 'constant'"),
              "%s", err.msg);
}

/* Pooling as torch.export writes it: pad + one unfold per spatial dim + a reduction over the
 * window dims, every attribute honoured (stride default, padding -inf/0, dilation,
 * ceil_mode's extra windows, count_include_pad's divisor as a window sum of ones,
 * divisor_override); the output shapes are checked against the recorded ones. */
Test(import, pooling_lowers_to_windows) {
#define P_IN "{\"name\": \"x\", \"kind\": \"input\", \"index\": 0, \"dtype\": \"f32\", \"shape\": [2, 3, 13, 12]}," \
             "{\"name\": \"y\", \"kind\": \"input\", \"index\": 1, \"dtype\": \"f32\", \"shape\": [2, 3, 17]}"
#define NODE(nm, tg, args, shape) " {\"name\": \"" nm "\", \"target\": \"" tg "\", \"args\": " args ", \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": " shape "}"
    const char *json = HEAD "\"inputs\": [" P_IN "], \"nodes\": ["
        NODE("m1", "aten.max_pool1d.default", "[{\"ref\": \"y\"}, [3], [2], [1], [2], true]", "[2, 3, 8]") ","
        NODE("m2", "aten.max_pool2d.default", "[{\"ref\": \"x\"}, [3, 3]]", "[2, 3, 4, 4]") ","
        NODE("m3", "aten.max_pool2d.default", "[{\"ref\": \"x\"}, [3, 2], [2, 1], [1, 0], [1, 2], true]", "[2, 3, 7, 10]") ","
        NODE("a1", "aten.avg_pool1d.default", "[{\"ref\": \"y\"}, [3], [2], [1], true, false]", "[2, 3, 9]") ","
        NODE("a2", "aten.avg_pool2d.default", "[{\"ref\": \"x\"}, [3, 3], [2, 2], [1, 1], false, true, 5]", "[2, 3, 7, 6]") ","
        NODE("a3", "aten.avg_pool2d.default", "[{\"ref\": \"x\"}, [2, 2], [], [1, 1]]", "[2, 3, 7, 7]") ","
        NODE("a4", "aten.avg_pool2d.default", "[{\"ref\": \"x\"}, [2, 3], [2, 2], [0, 1], true]", "[2, 3, 7, 7]") ","
        NODE("g1", "aten.adaptive_avg_pool2d.default", "[{\"ref\": \"x\"}, [1, 1]]", "[2, 3, 1, 1]") ","
        NODE("g2", "aten.adaptive_avg_pool2d.default", "[{\"ref\": \"x\"}, [13, 4]]", "[2, 3, 13, 4]") ","
        " {\"name\": \"mi\", \"target\": \"aten.max_pool2d_with_indices.default\", \"args\": [{\"ref\": \"x\"}, [2, 2]], \"kwargs\": {}, \"dtype\": null,"
        "  \"shape\": [{\"dtype\": \"f32\", \"shape\": [2, 3, 6, 6]}, {\"dtype\": \"i64\", \"shape\": [2, 3, 6, 6]}]},"
        NODE("v0", "getitem", "[{\"ref\": \"mi\"}, 0]", "[2, 3, 6, 6]")
        "], \"outputs\": [{\"ref\": \"m1\"}, {\"ref\": \"m2\"}, {\"ref\": \"m3\"}, {\"ref\": \"a1\"}, {\"ref\": \"a2\"}, {\"ref\": \"a3\"},"
        " {\"ref\": \"a4\"}, {\"ref\": \"g1\"}, {\"ref\": \"g2\"}, {\"ref\": \"v0\"}]}";
    char *text = NULL;
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(import(json, &text, &g, &err), KF_OK, "%s", err.msg);
    static const char *const want[] = {
        "output m1 = max(unfold(pad(y, pads=[1, 1], value=-inf), dim=2, size=3, step=2, dilation=2), axes=[-1])\n",
        "output m2 = max(unfold(unfold(x, dim=2, size=3, step=3), dim=3, size=3, step=3), axes=[-2, -1])\n",
        /* ceil_mode: W 12 -> 10 windows of 2 dilated by 2, the last one past the input */
        "output m3 = max(unfold(unfold(pad(x, pads=[0, 0, 1, 1], value=-inf), dim=2, size=3, step=2), dim=3, size=2, step=1, dilation=2), axes=[-2, -1])\n",
        /* count_include_pad=False: divided by the number of input elements in each window */
        "a1__0 = sum(unfold(pad(full_like(select(select(y, dim=0, index=0), dim=0, index=0), value=1), pads=[1, 1], value=0), dim=0, size=3, step=2), axes=[-1])\n",
        "output a1 = sum(unfold(pad(y, pads=[1, 1], value=0), dim=2, size=3, step=2), axes=[-1]) / a1__0\n",
        "output a2 = sum(unfold(unfold(pad(x, pads=[1, 1, 1, 1], value=0), dim=2, size=3, step=2), dim=3, size=3, step=2), axes=[-2, -1]) / 5\n",
        "output a3 = mean(unfold(unfold(pad(x, pads=[1, 1, 1, 1], value=0), dim=2, size=2, step=2), dim=3, size=2, step=2), axes=[-2, -1])\n",
        /* ceil_mode with count_include_pad: the window's part inside the padded input (both
         * dims have a last window past it) */
        "a4__1 = sum(unfold(unfold(pad(full_like(pad(select(select(x, dim=0, index=0), dim=0, index=0), pads=[1, 1, 0, 0]), value=1), pads=[0, 1, 0, 1], value=0), dim=0, size=2, step=2), dim=1, size=3, step=2), axes=[-2, -1])\n",
        "output g1 = mean(x, axes=[2, 3], keepdim=true)\n",
        "output g2 = mean(unfold(x, dim=3, size=3, step=3), axes=[-1])\n",
        "output v0 = max(unfold(unfold(x, dim=2, size=2, step=2), dim=3, size=2, step=2), axes=[-2, -1])\n"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) cr_expect(strstr(text, want[i]), "no '%s' in\n%s", want[i], text);
    cr_assert_eq(g->noutputs, 10, "every output's shape matched what PyTorch recorded");
    free(text);
    kf_graph_free(g);
    /* what is not lowered is named */
    const char *bad = HEAD "\"inputs\": [" P_IN "], \"nodes\": ["
        NODE("g3", "aten.adaptive_avg_pool1d.default", "[{\"ref\": \"y\"}, [3]]", "[2, 3, 3]") ","
        " {\"name\": \"mi\", \"target\": \"aten.max_pool2d_with_indices.default\", \"args\": [{\"ref\": \"x\"}, [2, 2]], \"kwargs\": {}, \"dtype\": null,"
        "  \"shape\": [{\"dtype\": \"f32\", \"shape\": [2, 3, 6, 6]}, {\"dtype\": \"i64\", \"shape\": [2, 3, 6, 6]}]},"
        " {\"name\": \"ix\", \"target\": \"getitem\", \"args\": [{\"ref\": \"mi\"}, 1], \"kwargs\": {}, \"dtype\": \"i64\", \"shape\": [2, 3, 6, 6]}"
        "], \"outputs\": [{\"ref\": \"g3\"}, {\"ref\": \"ix\"}]}";
    cr_assert_eq(import(bad, NULL, NULL, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "node 'g3' (aten.adaptive_avg_pool1d.default): adaptive pooling of 17 to 3 elements"), "%s", err.msg);
    cr_assert(strstr(err.msg, "node 'ix' (getitem): the indices of a max pool"), "%s", err.msg);
#undef NODE
#undef P_IN
}

/* What PyTorch recorded is checked against the lowered graph: a wrong shape is caught. */
Test(import, recorded_shape_is_checked) {
    const char *json = HEAD "\"inputs\": [" X_IN "],"
        "\"nodes\": ["
        " {\"name\": \"sum_1\", \"target\": \"aten.sum.dim_IntList\", \"args\": [{\"ref\": \"x\"}, [1]], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [16]}"
        "], \"outputs\": [{\"ref\": \"sum_1\"}]}";
    kf_error err = {0};
    cr_assert_eq(import(json, NULL, NULL, &err), KF_ERR_INTERNAL);
    cr_assert(strstr(err.msg, "PyTorch recorded f32[16]") && strstr(err.msg, "f32[8]"), "%s", err.msg);
}

Test(import, bad_files) {
    kf_error err = {0};
    cr_assert_eq(import("{\"format\": \"kforge-graph\", \n \"version\": 1,,}", NULL, NULL, &err), KF_ERR_PARSE);
    cr_assert_eq(err.line, 2, "line %d: %s", err.line, err.msg);
    cr_assert_eq(import("{\"format\": \"other\", \"version\": 1}", NULL, NULL, &err), KF_ERR_PARSE);
    cr_assert(strstr(err.msg, "not a kforge graph"), "%s", err.msg);
    cr_assert_eq(kf_import_torch_graph("/nonexistent/graph.json", NULL, NULL, &err), KF_ERR_PARSE);
}

/* Issue 28, item 14: a module that returns an input (as it is, twice, or beside a computed
 * output) imports: each such output is an exact copy of the input under its own name (it
 * said "nothing to compute"). */
Test(import, an_input_returned_is_copied) {
    const char *json = HEAD "\"inputs\": [" X_IN "],"
        "\"nodes\": ["
        " {\"name\": \"relu\", \"target\": \"aten.relu.default\", \"args\": [{\"ref\": \"x\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]},"
        " {\"name\": \"clone\", \"target\": \"aten.clone.default\", \"args\": [{\"ref\": \"x\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]}"
        "], \"outputs\": [{\"ref\": \"x\"}, {\"ref\": \"relu\"}, {\"ref\": \"x\"}, {\"ref\": \"clone\"}]}";
    char *text = NULL;
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(import(json, &text, &g, &err), KF_OK, "%s", err.msg);
    cr_assert(strstr(text, "output x_out0 = x * 1.0\n"), "%s", text);
    cr_assert(strstr(text, "output relu_v = relu(x)\n"), "%s", text);
    cr_assert(strstr(text, "output x_out2 = x * 1.0\n"), "%s", text);
    cr_assert(strstr(text, "output x_out3 = x * 1.0\n"), "%s", text);
    cr_assert_eq(g->noutputs, 4);
    free(text);
    kf_graph_free(g);
}

/* Issue 28, item 16: a name from a file name that starts with a digit, then letters
 * ('10_3D_tensor'), still gives a task that parses (it failed: "malformed number"). */
Test(import, task_name_always_parses) {
    static const char *const names[] = {"10_3D_tensor", "3d", "a-b.c", "", "x y"};
    static const char *const want[] = {"task t10_3D_tensor\n", "task t3d\n", "task a_b_c\n", "task model\n",
                                       "task x_y\n"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"format\": \"kforge-graph\", \"version\": 1, \"name\": \"%s\", \"model\": \"/m.py\", "
                 "\"inputs\": [" X_IN "], \"nodes\": [{\"name\": \"relu\", \"target\": \"aten.relu.default\", "
                 "\"args\": [{\"ref\": \"x\"}], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [8, 16]}], "
                 "\"outputs\": [{\"ref\": \"relu\"}]}", names[i]);
        char *text = NULL;
        kf_graph *g = NULL;
        kf_error err = {0};
        cr_assert_eq(import(json, &text, &g, &err), KF_OK, "name '%s': %s", names[i], err.msg);
        cr_assert(strstr(text, want[i]), "name '%s':\n%s", names[i], text);
        free(text);
        kf_graph_free(g);
    }
}

/* nll_loss_forward, the decomposed form (output, total_weight): its output 0 through
 * getitem is the gathered loss with the row weights of ignore_index (a class here, 3);
 * total_weight is refused by name. */
Test(import, nll_loss_forward_through_getitem) {
#define T_IN "{\"name\": \"t\", \"kind\": \"input\", \"index\": 1, \"dtype\": \"i64\", \"shape\": [8], \"range\": [0, 15]}"
#define NLL_NODE " {\"name\": \"nll\", \"target\": \"aten.nll_loss_forward.default\", \"args\": [{\"ref\": \"x\"}, {\"ref\": \"t\"}, null, 1, 3], \"kwargs\": {}, \"dtype\": null, \"shape\": [{\"dtype\": \"f32\", \"shape\": []}, {\"dtype\": \"f32\", \"shape\": []}]},"
    const char *json = HEAD "\"inputs\": [" X_IN ", " T_IN "],"
        "\"nodes\": [" NLL_NODE
        " {\"name\": \"getitem\", \"target\": \"getitem\", \"args\": [{\"ref\": \"nll\"}, 0], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": []}"
        "], \"outputs\": [{\"ref\": \"getitem\"}]}";
    char *text = NULL;
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(import(json, &text, &g, &err), KF_OK, "%s", err.msg);
    cr_assert(strstr(text, "reshape(t, shape=[8, 1])") && strstr(text, "1 - eq(") && strstr(text, ", 3)\n") &&
              strstr(text, "-gather(x, ") && strstr(text, "axis=1, fill=0)") && strstr(text, "sum(getitem__2) / sum(getitem__1)"),
              "%s", text);
    free(text);
    kf_graph_free(g);
    const char *total = HEAD "\"inputs\": [" X_IN ", " T_IN "],"
        "\"nodes\": [" NLL_NODE
        " {\"name\": \"getitem_1\", \"target\": \"getitem\", \"args\": [{\"ref\": \"nll\"}, 1], \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": []}"
        "], \"outputs\": [{\"ref\": \"getitem_1\"}]}";
    cr_assert_eq(import(total, NULL, NULL, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "total_weight of nll_loss_forward"), "%s", err.msg);
#undef T_IN
#undef NLL_NODE
}
