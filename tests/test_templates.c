/*
 * Every builtin CPU template against the float64 interpreter, through the real pipeline:
 * plan -> render -> compile -> sandboxed run -> compare, at odd sizes (1, 3, 17, 1000003
 * elements, tiles that do not divide the sizes) and at two schedule points per task (the
 * default, and one that moves every parameter to its next value).
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/ir.h"
#include "kforge/synth.h"
#include "kforge/verify.h"
#include "pipeline_check.h"
#include "synth/synth_int.h"

static kf_backend *be;
static char workdir[] = "/tmp/kf-tpl-XXXXXX";

static void setup(void) {
    kf_error err = {0};
    cr_assert(mkdtemp(workdir) != NULL);
    cr_assert_eq(kf_backend_open("cpu", &be, &err), KF_OK, "%s", err.msg);
}

static void teardown(void) {
    kf_backend_close(be);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", workdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", workdir);
}

/* Check the task at the default point and at the "every parameter moved" point. */
static void check_task(const char *text) { pipeline_check(be, text, workdir, 42); }

static void check_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void check_fmt(const char *fmt, ...) {
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    check_task(text);
}

TestSuite(templates, .init = setup, .fini = teardown, .timeout = 600);

static const long kSizes[] = {1, 3, 17, 1000003};

/* Parse text and plan it for the CPU (both must succeed); *gp gets the graph. */
static kf_synth *plan_cpu(const char *text, kf_graph **gp) {
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(text, "<test>", gp, &err), KF_OK, "parse: %s\n%s", err.msg, text);
    kf_synth *s = NULL;
    cr_assert_eq(kf_synth_plan(*gp, "cpu", &be->info, &s, &err), KF_OK, "plan: %s", err.msg);
    return s;
}

Test(templates, elementwise_odd_sizes) {
    for (int i = 0; i < 4; i++)
        check_fmt("input x: f32[%ld]\noutput y = x * sigmoid(x)\n", kSizes[i]);
}

Test(templates, elementwise_all_unary_ops) {
    check_task("input x: f32[17, 3]\n"
               "a = relu(x) + leaky_relu(x, negative_slope=0.2) + tanh(x) + gelu(x) + gelu_tanh(x)\n"
               "b = silu(x) + swish(x) + selu(x) + elu(x, alpha=0.7) + hardsigmoid(x)\n"
               "c = hardtanh(x, min_val=-0.5, max_val=0.8) + softplus(x) + softsign(x) + exp(x)\n"
               "d = abs(x) + neg(x) + square(x) + sigmoid(x)\n"
               "output y = a + b + c + d\n");
    check_task("input x: f32[1000003] range(0.01, 8)\n"
               "output y = log(x) + sqrt(x) + rsqrt(x) + pow(x, 1.7) + pow(x, 2.0) + pow(x, -1.0)\n");
}

/* tanh(softplus(x)) (mish's core) is computed from one exp: the rewrite is taken where it
 * applies, and every variant verifies over the input distributions (wide magnitudes reach
 * both sides of softplus's threshold) */
Test(templates, tanh_of_softplus) {
    static const struct { const char *text; int rewritten; } cases[] = {
        {"input x: f32[1000003]\noutput y = x * tanh(softplus(x))\n", 1},
        {"input x: f32[17, 3]\ns = softplus(x)\noutput y = tanh(s)\noutput z = s * 2.0\n", 1},
        {"input x: f32[1000003]\noutput y = tanh(softplus(x, threshold=5.0))\n", 1},
        {"input x: f32[1000003]\noutput y = tanh(softplus(x, beta=2.0))\n", 0},
        {"input x: f32[1000003]\noutput y = tanh(softplus(x, threshold=30.0))\n", 0},
        /* tanh lands in a later stage than softplus (after the sum): x is not loaded there */
        {"input x: f32[64]\ns = softplus(x)\nm = sum(s, axes=[0], keepdim=true)\nu = s * m\n"
         "output y = u + tanh(s)\n", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kf_error err = {0};
        kf_graph *g = NULL;
        kf_synth *s = plan_cpu(cases[i].text, &g);
        kf_point p;
        kf_synth_default_point(s, &p);
        kf_candidate c;
        cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
        /* the prelude defines the helper; a call has its argument right after the paren */
        cr_expect_eq(strstr(c.source, "kf_tanh_softplusf(r") != NULL, cases[i].rewritten, "case %zu:\n%s", i,
                     cases[i].text);
        kf_candidate_clear(&c);
        kf_synth_free(s);
        kf_graph_free(g);
        check_task(cases[i].text);
    }
}

Test(templates, elementwise_broadcast_and_scalars) {
    check_task("input x: f32[3, 17]\ninput b: f32[17]\noutput y = gelu_tanh(x + b)\n");
    check_task("input a: f32[3, 1]\ninput b: f32[1, 4]\noutput y = maximum(a, b) - minimum(a, 0.25) / (2.0 - b)\n");
    check_task("input x: f32[17, 5, 3]\ninput s: f32[17, 1, 3]\ninput t: f32[5, 1]\n"
               "output y = (x * s - t) * 0.5\noutput z = exp(-x)\n");
    check_task("input x: f32[1, 1000003]\ninput c: f32[1, 1]\noutput y = x * c + 1.0\n");
}

Test(templates, reductions_all_layouts) {
    static const char *ops[] = {"sum", "mean", "max", "min"};
    for (int k = 0; k < 4; k++) {
        check_fmt("input x: f32[17]\noutput y = %s(x)\n", ops[k]);
        check_fmt("input x: f32[3, 17]\noutput y = %s(x, axes=[1], keepdim=true)\n", ops[k]);
        check_fmt("input x: f32[17, 3]\noutput y = %s(x, axes=[0])\n", ops[k]);
        check_fmt("input x: f32[17, 3, 5]\noutput y = %s(x, axes=[0, 2])\n", ops[k]);
        check_fmt("input x: f32[3, 17, 5]\noutput y = %s(x, axes=[1], keepdim=true)\n", ops[k]);
    }
    check_task("input x: f32[1000003]\noutput y = sum(x)\n");
    check_task("input x: f32[1000003]\noutput y = max(x)\n");
    check_task("input x: f32[3, 1000003]\noutput y = mean(x, axes=[1])\n");
    check_task("input x: f32[3, 17] range(0.5, 1.5)\noutput y = prod(x, axes=[1])\noutput z = prod(x, axes=[0], keepdim=true)\n");
}

Test(templates, argmax_argmin) {
    check_task("input x: f32[3, 17]\noutput i = argmax(x, axis=1)\noutput j = argmin(x, axis=0)\n");
    check_task("input x: f32[17, 3, 5]\noutput i = argmax(x, axis=1, keepdim=true)\n");
    check_task("input x: f32[1000003]\noutput i = argmin(x, axis=0)\n");
}

Test(templates, softmax_family) {
    check_task("input x: f32[3, 17]\noutput y = softmax(x)\n");
    check_task("input x: f32[17, 3]\noutput y = softmax(x, axis=0)\noutput z = log_softmax(x, axis=0)\n");
    check_task("input x: f32[3, 17, 5]\noutput y = log_softmax(x, axis=1)\n");
    check_task("input x: f32[1, 1000003]\noutput y = softmax(x, axis=-1)\n");
}

Test(templates, norms) {
    check_task("input x: f32[3, 17]\ninput w: f32[17]\ninput b: f32[17]\noutput y = layer_norm(x, w, b)\n");
    check_task("input x: f32[17, 3, 5]\noutput y = layer_norm(x, axes=[1, 2])\n");
    check_task("input x: f32[3, 17]\ninput w: f32[17]\noutput y = rms_norm(x, w, eps=1e-5)\n");
    check_task("input x: f32[3, 1000003]\noutput y = rms_norm(x)\n");
}

Test(templates, scans) {
    check_task("input x: f32[3, 17]\noutput y = cumsum(x)\noutput z = cumprod(x, reverse=true)\n");
    check_task("input x: f32[17, 3, 5]\noutput y = cumsum(x, axis=0, exclusive=true)\n"
               "output z = cumsum(x, axis=1, reverse=true, exclusive=true)\n");
    check_task("input x: f32[2, 100003]\noutput y = cumsum(x, reverse=true)\n");
    check_task("input x: f32[3, 7001] range(0.999, 1.001)\noutput y = cumprod(x, exclusive=true)\n");
    check_task("input x: f32[1]\noutput y = cumsum(x, exclusive=true)\n");
}

Test(templates, matmul_family) {
    check_task("input a: f32[1, 1]\ninput b: f32[1, 1]\noutput c = matmul(a, b)\n");
    check_task("input a: f32[3, 17]\ninput b: f32[17, 5]\noutput c = matmul(a, b)\n");
    check_task("input a: f32[33, 67]\ninput b: f32[129, 33]\noutput c = matmul(a, b, transpose_a=true, transpose_b=true)\n");
    check_task("input a: f32[2, 3, 17, 5]\ninput b: f32[17, 4]\noutput c = matmul(a, b, transpose_a=true)\n");
    /* one output column or row: the GEMM (default point) and the matrix-vector template
     * (the moved point moves the template selector too) */
    check_task("input a: f32[67, 101]\ninput x: f32[101, 1]\noutput y = matmul(a, x)\n");
    check_task("input a: f32[101, 67]\ninput x: f32[1, 101]\noutput y = matmul(a, x, transpose_a=true, transpose_b=true)\n");
    check_task("input x: f32[3, 1, 40]\ninput b: f32[40, 17]\noutput y = matmul(x, b)\n");
    check_task("input x: f32[2, 1, 1, 40]\ninput b: f32[3, 17, 40]\noutput y = matmul(x, b, transpose_b=true)\n");
}

Test(templates, multi_stage_graphs) {
    /* elementwise -> reduction -> elementwise; a temporary crosses stages via scratch */
    check_task("input x: f32[17, 33]\ninput w: f32[33]\n"
               "t = exp(x) * w\ns = sum(t, axes=[1], keepdim=true)\noutput y = t / (s + 100.0)\n");
    check_task("input a: f32[17, 8]\ninput b: f32[8, 9]\ninput bias: f32[9]\n"
               "output y = relu(matmul(a, b) + bias)\n");
}

/* Plan text for the CPU and expect its description to hold marker exactly when want says so
 * (what: the thing the marker stands for, for the message). */
static kf_synth *plan_expect(const char *text, const char *marker, int want, const char *what, kf_graph **gp) {
    kf_graph *g = NULL;
    kf_synth *s = plan_cpu(text, &g);
    const char *d = kf_synth_describe(s);
    cr_expect_eq(strstr(d, marker) != NULL, want, "task:\n%s\nplan %s: expected %s%s", text, d,
                 want ? "" : "no ", what);
    *gp = g;
    return s;
}

/* The plan of text fuses an elementwise producer into a reduction-family stage ("op(ewise[..])")
 * exactly when fused says so, and the candidates verify either way. */
static void check_fusion(const char *text, int fused) {
    kf_graph *g;
    kf_synth *s = plan_expect(text, "(ewise", fused, "fused prologue", &g);
    kf_synth_free(s);
    kf_graph_free(g);
    check_task(text);
}

Test(templates, prologue_fusion) {
    /* row layout, short rows staged whole */
    check_fusion("input x: f32[5, 33]\noutput y = sum(x * x, axes=[1])\n", 1);
    check_fusion("input x: f32[5, 33]\ninput m: f32[5, 1]\noutput y = sum(exp(x - m), axes=[1], keepdim=true)\n", 1);
    check_fusion("input x: f32[4, 33]\noutput i = argmax(abs(x) - 1.0, axis=1)\n", 1);
    /* row layout, rows longer than a stack buffer: reduced in chunks, broadcast operand */
    check_fusion("input x: f32[3, 20001]\ninput b: f32[20001]\noutput y = max(exp(x) - b, axes=[1])\n", 1);
    check_fusion("input x: f32[3, 20001] range(0.9, 1.1)\noutput y = prod(abs(x), axes=[1])\n", 1);
    /* reduced groups outside the row (the outputs are walked in blocks at moved points) */
    check_fusion("input x: f32[17, 3, 33]\noutput y = sum(x * x, axes=[0, 2])\n", 1);
    check_fusion("input x: f32[3, 19, 9001]\noutput y = max(x - 0.5, axes=[0, 2], keepdim=true)\n", 1);
    /* one output over one long run, split across threads */
    check_fusion("input x: f32[100003]\ninput y: f32[100003]\noutput l = mean((x - y) * (x - y))\n", 1);
    check_fusion("input x: f32[100003]\noutput l = min(x * 3.0 + 1.0)\n", 1);
    /* col layout; the runs cross the producer's coalesced rows (s broadcasts over dims 0, 2) */
    check_fusion("input x: f32[17, 3, 5]\ninput s: f32[3, 1]\noutput y = sum(x * s, axes=[0])\n", 1);
    check_fusion("input x: f32[17, 3] range(0.5, 1.5)\noutput y = prod(x * 0.5 + 0.75, axes=[0])\n", 1);
    /* softmax (row layout) and norms */
    check_fusion("input x: f32[3, 17]\noutput y = softmax(x * 0.125)\n", 1);
    check_fusion("input x: f32[3, 17]\ninput b: f32[17]\noutput y = log_softmax(x - b)\n", 1);
    check_fusion("input x: f32[3, 17]\ninput r: f32[3, 17]\ninput w: f32[17]\ninput b: f32[17]\n"
                 "output y = layer_norm(x + r, w, b)\n", 1);
    check_fusion("input x: f32[3, 17]\ninput w: f32[17]\noutput y = rms_norm(x * 2.0, w)\n", 1);
    /* a producer read again after the reduction: one op on inputs is computed again there
     * (kf_synth_remat), so its first stage feeds only the sum */
    check_fusion("input x: f32[17, 33]\ninput w: f32[33]\n"
                 "t = x * w\ns = sum(t, axes=[1], keepdim=true)\noutput y = t / (s + 100.0)\n", 1);
    /* not fused: a softmax over a non-innermost axis, an argmax over a long row, a producer
     * whose result is also an output or is read again later (a chain, not computed again),
     * nothing reduced */
    check_fusion("input x: f32[17, 3]\noutput y = softmax(x * 2.0, axis=0)\n", 0);
    check_fusion("input x: f32[2, 9000]\noutput i = argmin(x * x, axis=1)\n", 0);
    check_fusion("input x: f32[5, 33]\nt = x * x\noutput u = t + 1.0\noutput s = sum(t, axes=[1])\n", 0);
    check_fusion("input x: f32[17, 33]\ninput w: f32[33]\n"
                 "t = exp(x) * w\ns = sum(t, axes=[1], keepdim=true)\noutput y = t / (s + 100.0)\n", 0);
}

/* Independent chains computed from shared inputs, each feeding its own reduction (a triplet
 * loss's two distances, a cosine similarity's three sums): one elementwise stage per chain,
 * each fused into its reduction, so no chain's full result is stored; a node shared by two
 * chains keeps them in one stored stage. want: the number of fused "(ewise" prologues. */
static void check_siblings(const char *text, int want) {
    kf_graph *g;
    kf_synth *s = plan_expect(text, "(ewise", want > 0, "fused prologue", &g);
    const char *d = kf_synth_describe(s);
    int n = 0;
    for (const char *q = d; (q = strstr(q, "(ewise")) != NULL; q++) n++;
    cr_expect_eq(n, want, "task:\n%s\nplan %s: %d fused prologues, want %d", text, d, n, want);
    kf_synth_free(s);
    kf_graph_free(g);
    check_task(text);
}

Test(templates, sibling_chains_fuse_into_their_reductions) {
    check_siblings("input a: f32[6, 40]\ninput p: f32[6, 40]\ninput n: f32[6, 40]\n"
                   "dp = sqrt(sum(square(a - p + 1e-6), axes=[1]))\n"
                   "dn = sqrt(sum(square(a - n + 1e-6), axes=[1]))\n"
                   "output l = mean(maximum(dp - dn + 1.0, 0.0))\n", 3);
    check_siblings("input x: f32[7, 33]\ninput y: f32[7, 33]\n"
                   "xy = sum(x * y, axes=[1])\nxx = sum(x * x, axes=[1])\nyy = sum(y * y, axes=[1])\n"
                   "output c = xy / sqrt(xx * yy + 1e-8)\n", 3);
    /* a node of both chains: one stage, stored */
    check_siblings("input a: f32[6, 40]\ninput p: f32[6, 40]\ninput n: f32[6, 40]\n"
                   "t = exp(a)\ndp = sum(t * p, axes=[1])\ndn = sum(t * n, axes=[1])\n"
                   "output l = dp - dn\n", 0);
}

Test(templates, pin_fixes_a_parameter_everywhere) {
    kf_graph *g = NULL;
    kf_synth *s = plan_cpu("input x: f32[64, 256]\nt = exp(x)\ns = sum(t, axes=[1], keepdim=true)\n"
                                 "output y = t / s\noutput z = softmax(x)\n", &g);
    const kf_space *sp = kf_synth_space(s);
    int had = 0;
    for (int i = 0; i < sp->nparams; i++) had += strstr(sp->p[i].name, "nt") != NULL && sp->p[i].nvalues == 2;
    cr_assert_geq(had, 2, "the plan has streaming-store choices in two stages");
    cr_expect_eq(kf_synth_pin(s, "nt", 7), 0, "7 is not a value of nt: nothing fixed");
    cr_expect_eq(kf_synth_pin(s, "nt", 0), had);
    for (int i = 0; i < sp->nparams; i++) {
        const char *n = sp->p[i].name;
        size_t l = strlen(n);
        if (l >= 2 && strcmp(n + l - 2, "nt") == 0 && (l == 2 || n[l - 3] == '.')) {
            cr_expect_eq(sp->p[i].nvalues, 1, "%s", n);
            cr_expect_eq(sp->p[i].values[0], 0, "%s", n);
        }
    }
    kf_synth_free(s);
    kf_graph_free(g);
}

/* Cross entropy with class indices as the importer writes it (logsumexp - gather, a row
 * weight for ignore_index): nothing of the logits' [N, C] shape is stored but the logits
 * themselves (the one-hot lowering stored -log_softmax and built an iota), the gather is a
 * load in the elementwise stage that finishes the logsumexp, and the candidates verify,
 * an ignored target included. */
Test(templates, cross_entropy_gathers_without_a_mask) {
    const char *text = "input x: f32[64, 37]\ninput t: i64[64] range(-100, 36)\n"
                       "l = logsumexp(x, axes=[1], keepdim=true)\nT = reshape(t, shape=[64, 1])\n"
                       "m = 1 - eq(T, -100)\nr = (l - gather(x, T, axis=1, fill=0)) * m\n"
                       "output y = sum(r) / sum(m)\noutput z = reshape(r, shape=[64])\n";
    kf_graph *g = NULL;
    kf_synth *s = plan_cpu(text, &g);
    const kf_graph *pg = s->g;
    for (int v = 0; v < pg->nvalues; v++)
        cr_expect(!(s->materialize[v] && pg->values[v].producer >= 0 && kf_shape_numel(&pg->values[v].shape) >= 64 * 37),
                  "plan %s stores %s, of the logits' size", kf_synth_describe(s), pg->values[v].name);
    int gathers = 0, row_passes = 0;
    for (int k = 0; k < s->nst; k++) {
        const kf_stage *st = &s->st[k];
        for (int i = 0; i < st->nnodes; i++) gathers += kf_op_get(pg->nodes[st->nodes[i]].op)->cls == KF_CLASS_GATHER;
        row_passes += st->kind == KF_STAGE_REDUCE && kf_shape_numel(&pg->values[pg->nodes[st->nodes[0]].in[0]].shape) == 64 * 37;
        cr_expect(st->kind != KF_STAGE_SCAN, "plan %s has a scan (an iota)", kf_synth_describe(s));
    }
    cr_expect_eq(gathers, 1, "plan %s: the gather once, in an elementwise stage", kf_synth_describe(s));
    cr_expect_eq(row_passes, 2, "plan %s: the row maximum and the sum of exponentials, once each", kf_synth_describe(s));
    kf_synth_free(s);
    kf_graph_free(g);
    check_task(text);
}

/* ---- windows over padded inputs: each row's run where every guard holds is read
 * without guards, its borders with them (tpl_ewise.c) ---- */

/* Output length of a window of size k, step s, dilation d over n elements padded by
 * pl + pr, or 0 when no window fits. */
static long window_len(long n, long pl, long pr, long k, long s, long d) {
    long span = d * (k - 1) + 1, len = n + pl + pr;
    return len < span ? 0 : (len - span) / s + 1;
}

/* One window of each case over every spatial dim of x's last nd dims, as outputs o<i>
 * of one task (those that fit): pooling windows (max, sum, mean over unfolds of a pad, some
 * through a flip: guards falling with j) and a depthwise conv, at sizes where the borders
 * are most of each row (an interior of zero or one element), paddings larger than half the
 * window, steps and dilations above 1. */
static void check_padded_windows(int nd, const long *dims) {
    static const struct { const char *red; long k, s, d, pl, pr; const char *val; int flip; } cases[] = {
        {"max", 3, 2, 1, 1, 1, "-inf", 0}, {"max", 3, 1, 2, 3, 3, "-inf", 0}, {"sum", 2, 3, 2, 3, 0, "0.5", 0},
        {"mean", 4, 2, 3, 4, 4, "0", 0},   {"max", 3, 1, 2, 0, 5, "-inf", 1}, {"sum", 3, 3, 1, 2, 2, "-1", 1},
    };
    kf_buf t = {0};
    kf_buf_printf(&t, "input x: f32[2, 3");
    for (int i = 0; i < nd; i++) kf_buf_printf(&t, ", %ld", dims[i]);
    kf_buf_puts(&t, "]\n");
    int nout = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int fits = 1;
        for (int i = 0; i < nd; i++)
            fits &= window_len(dims[i], cases[c].pl, cases[c].pr, cases[c].k, cases[c].s, cases[c].d) > 0;
        if (!fits || (nd == 3 && cases[c].k > 3)) continue; /* a 3-D window unrolls up to 27 taps */
        kf_buf w = {0};
        kf_buf_puts(&w, "pad(x, pads=[");
        for (int i = 0; i < nd; i++) kf_buf_printf(&w, "%s%ld, %ld", i ? ", " : "", cases[c].pl, cases[c].pr);
        kf_buf_printf(&w, "], value=%s)", cases[c].val);
        if (cases[c].flip) {
            char *in = kf_buf_take(&w);
            kf_buf_printf(&w, "flip(%s, dims=[%d])", in, 2 + nd - 1);
            free(in);
        }
        for (int i = 0; i < nd; i++) {
            char *in = kf_buf_take(&w);
            kf_buf_printf(&w, "unfold(%s, dim=%d, size=%ld, step=%ld, dilation=%ld)", in, 2 + i, cases[c].k, cases[c].s,
                          cases[c].d);
            free(in);
        }
        kf_buf_printf(&t, "output o%d = %s(%s, axes=[", nout++, cases[c].red, w.data);
        for (int i = 0; i < nd; i++) kf_buf_printf(&t, "%s%d", i ? ", " : "", -1 - i);
        kf_buf_puts(&t, "])\n");
        kf_buf_free(&w);
    }
    /* a depthwise conv padded by more than half its kernel: its taps summed with guards */
    long k[3] = {3, 2, 3}, s[3] = {2, 1, 1}, d[3] = {1, 2, 1}, p[3] = {2, 3, 2};
    int fits = 1;
    for (int i = 0; i < nd; i++) fits &= window_len(dims[i], p[i], p[i], k[i], s[i], d[i]) > 0;
    if (fits) {
        kf_buf_puts(&t, "input w: f32[3, 1");
        for (int i = 0; i < nd; i++) kf_buf_printf(&t, ", %ld", k[i]);
        kf_buf_printf(&t, "]\noutput c = conv(x, w, stride=[");
        for (int i = 0; i < nd; i++) kf_buf_printf(&t, "%s%ld", i ? ", " : "", s[i]);
        kf_buf_puts(&t, "], padding=[");
        for (int i = 0; i < nd; i++) kf_buf_printf(&t, "%s%ld", i ? ", " : "", p[i]);
        kf_buf_puts(&t, "], dilation=[");
        for (int i = 0; i < nd; i++) kf_buf_printf(&t, "%s%ld", i ? ", " : "", d[i]);
        kf_buf_puts(&t, "], groups=3)\n");
    }
    check_task(t.data);
    kf_buf_free(&t);
}

Test(templates, padded_windows_border_heavy) {
    static const long d1[][1] = {{1}, {2}, {3}, {6}, {11}, {70001}}; /* the last: rows split into chunks */
    static const long d2[][2] = {{1, 1}, {2, 3}, {4, 4}, {5, 9}};
    static const long d3[][3] = {{1, 2, 3}, {3, 4, 5}};
    for (size_t i = 0; i < sizeof d1 / sizeof d1[0]; i++) check_padded_windows(1, d1[i]);
    for (size_t i = 0; i < sizeof d2 / sizeof d2[0]; i++) check_padded_windows(2, d2[i]);
    for (size_t i = 0; i < sizeof d3 / sizeof d3[0]; i++) check_padded_windows(3, d3[i]);
}

/* A window over more elements than are unrolled (an 11x11 average pool) whose innermost axis
 * is short: that axis is unrolled (one elementwise stage reading the view in place) and the
 * op reduces the rest, instead of a copy of every window ("ewise[1 op] -> mean"). Odd sizes,
 * padding, steps, keepdim, 3-D windows; a window whose innermost axis is long is copied as
 * before; all verified. */
Test(templates, large_windows_reduce_unrolled_rows) {
    kf_graph *g;
    kf_synth *s = plan_expect("input x: f32[2, 3, 25, 23]\noutput y = mean(unfold(unfold(x, dim=2, size=11, "
                              "step=11), dim=3, size=11, step=11), axes=[-2, -1])\n",
                              "ewise[1 op] -> mean", 0, "a copy of the windows", &g);
    kf_synth_free(s);
    kf_graph_free(g);
    check_task("input x: f32[2, 3, 25, 23]\n"
               "output a = mean(unfold(unfold(x, dim=2, size=11, step=11), dim=3, size=11, step=11), axes=[-2, -1])\n"
               "output b = max(unfold(unfold(pad(x, pads=[2, 3, 1, 2], value=-inf), dim=2, size=6, step=2), dim=3, "
               "size=7, step=3, dilation=2), axes=[4, 5], keepdim=true)\n"
               "output c = sum(unfold(unfold(x, dim=2, size=2, step=3), dim=3, size=20, step=1), axes=[-2, -1])\n"
               "output d = min(unfold(unfold(x, dim=2, size=9, step=5), dim=3, size=4, step=3), axes=[-1, -2])\n");
    check_task("input x: f32[2, 2, 9, 7, 8]\noutput y = mean(unfold(unfold(unfold(pad(x, pads=[1, 1, 0, 0, 2, 1]), "
               "dim=2, size=4, step=3), dim=3, size=4, step=1), dim=4, size=4, step=2), axes=[-3, -2, -1])\n"
               "output p = prod(unfold(unfold(x * 0.1 + 1.0, dim=3, size=6, step=1), dim=4, size=5, step=3), "
               "axes=[5, 6])\n");
    check_task("input z: f32[3, 6, 40]\n"
               "output c = sum(unfold(unfold(z, dim=1, size=2, step=3), dim=2, size=31, step=2), axes=[-2, -1])\n");
}

/* An elementwise stage whose rows are a few elements long (a strided conv_transpose's
 * interleave of its phases) walks the next dim's rows in the same task, stepping the
 * offsets: rendered so, and verified with a broadcast operand read once per row, odd dims,
 * and the conv_transpose itself. */
Test(templates, short_rows_walk_two_dims) {
    static const char *task = "input x: f32[5, 7, 3]\ninput b: f32[7, 1, 1]\n"
                              "output y = permute(x, dims=[1, 0, 2]) * 2.0 + b\n";
    kf_error err = {0};
    kf_graph *g = NULL;
    kf_synth *s = plan_cpu(task, &g);
    kf_point p;
    kf_synth_default_point(s, &p);
    kf_candidate c;
    cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
    cr_expect(strstr(c.source, "a task's rows together") && strstr(c.source, "for (long i2 = 0; i2 < 5L; i2++)"),
              "rows of 3 walked with the next dim:\n%s", c.source);
    kf_candidate_clear(&c);
    kf_synth_free(s);
    kf_graph_free(g);
    check_task(task);
    check_task("input x: f32[3, 4, 5, 2]\noutput y = permute(x, dims=[2, 0, 1, 3]) - 1.0\n");
    check_task("input x: f32[2, 6, 5, 7]\ninput w: f32[6, 3, 4, 3]\ninput b: f32[3]\n"
               "output y = conv_transpose(x, w, b, stride=[2, 3], padding=[1, 1], output_padding=[1, 0])\n");
}

/* A padded window's rendered stage computes each row's guard-free run and reads it with
 * plain loads: the stride-2 taps of a 3x3 max pool appear unguarded. */
Test(templates, padded_window_interior_is_unguarded) {
    kf_error err = {0};
    kf_graph *g = NULL;
    kf_synth *s = plan_cpu("input x: f32[2, 3, 20, 20]\noutput m = max(unfold(unfold(pad(x, pads=[1, 1, 1, 1], "
                                 "value=-inf), dim=2, size=3, step=2), dim=3, size=3, step=2), axes=[-2, -1])\n", &g);
    kf_point p;
    kf_synth_default_point(s, &p);
    kf_candidate c;
    cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
    const char *run = strstr(c.source, "for (long j = jl; j < jh; j++) {");
    cr_assert(run != NULL, "no guard-free run:\n%s", c.source);
    const char *end = strstr(run, "\n        }\n");
    cr_assert(end != NULL);
    int plain = 0;
    for (const char *l = strstr(run, "= b"); l && l < end; l = strstr(l + 1, "= b")) plain++;
    cr_expect_eq(plain, 9, "the run reads the 9 taps with plain loads:\n%.*s", (int)(end - run), run);
    cr_expect(memmem(run, (size_t)(end - run), "unsigned long", 13) == NULL, "no guard in the run:\n%.*s",
              (int)(end - run), run);
    cr_expect(strstr(c.source, "kf_floordiv(") != NULL);
    kf_candidate_clear(&c);
    kf_synth_free(s);
    kf_graph_free(g);
}

/* The plan of text makes a matmul -> softmax -> matmul chain ("chain[...]", one row-blocked
 * stage that stores neither intermediate) exactly when chained says so, and the candidates
 * verify either way (the moved point takes the other row block and one thread). */
static void check_chain(const char *text, int chained) {
    kf_error err = {0};
    kf_graph *g;
    kf_synth *s = plan_expect(text, "chain[", chained, "chain", &g);
    if (chained) {
        kf_point p;
        kf_synth_default_point(s, &p);
        kf_candidate c;
        cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
        cr_expect(strstr(c.source, "= kf_scratch(") == NULL,
                  "a chain stores no intermediate:\n%s", text);
        kf_candidate_clear(&c);
    }
    kf_synth_free(s);
    kf_graph_free(g);
    check_task(text);
}

Test(templates, chain_fusion) {
    /* attention: Q K^T scaled (the prologue), softmax over keys, times V; M not a whole
     * number of micro-kernel rows, more than one row block at the moved point */
    check_chain("input q: f32[2, 3, 37, 8]\ninput k: f32[2, 3, 29, 8]\ninput v: f32[2, 3, 29, 5]\n"
                "s = matmul(q, k, transpose_b=true) * 0.35\noutput y = matmul(softmax(s, axis=-1), v)\n", 1);
    /* no prologue (the softmax in place), log_softmax, one matrix with several groups */
    check_chain("input a: f32[300, 7]\ninput b: f32[7, 33]\ninput c: f32[33, 9]\n"
                "output y = matmul(softmax(matmul(a, b)), c)\n", 1);
    check_chain("input a: f32[50, 7]\ninput b: f32[7, 33]\ninput c: f32[33, 9]\n"
                "output y = matmul(log_softmax(matmul(a, b)), c)\n", 1);
    /* a prologue with an operand of its own (an additive mask broadcast over the batch), the
     * first A stored transposed and shared by the batch */
    check_chain("input q: f32[3, 41, 6]\ninput k: f32[3, 23, 6]\ninput v: f32[3, 23, 10]\ninput m: f32[41, 23]\n"
                "output y = matmul(softmax(matmul(q, k, transpose_b=true) * 0.5 + m), v)\n", 1);
    check_chain("input a: f32[6, 41]\ninput b: f32[3, 6, 23]\ninput v: f32[3, 23, 10]\n"
                "output y = matmul(softmax(matmul(a, b, transpose_a=true)), v)\n", 1);
    /* no chain: an intermediate is also an output, the softmax runs over another axis, its
     * result is the second product's B, or is read twice */
    check_chain("input a: f32[20, 7]\ninput b: f32[7, 33]\ninput c: f32[33, 9]\n"
                "output s = matmul(a, b)\noutput y = matmul(softmax(s), c)\n", 0);
    check_chain("input a: f32[20, 7]\ninput b: f32[7, 20]\ninput c: f32[20, 9]\n"
                "output y = matmul(softmax(matmul(a, b), axis=0), c)\n", 0);
    check_chain("input a: f32[20, 7]\ninput b: f32[7, 33]\ninput c: f32[9, 20]\n"
                "output y = matmul(c, softmax(matmul(a, b)))\n", 0);
    check_chain("input a: f32[20, 7]\ninput b: f32[7, 33]\ninput c: f32[33, 9]\n"
                "p = softmax(matmul(a, b))\noutput y = matmul(p, c)\noutput z = p * 2.0\n", 0);
}

/* A contraction's elementwise reader computed in the GEMM's store stage (an epilogue):
 * planned exactly when fused says so ("matmul+ewise[..]"), one stage function fewer and
 * no scratch for the product then; the parameter "epi" undoes it (the product stored, the
 * reader its own stage again: one more function and a kf_scratch); and every form
 * verifies (check_task: fused, every parameter moved, and epi=0). */
static void check_epilogue(const char *text, int fused) {
    kf_graph *g;
    kf_synth *s = plan_expect(text, "matmul+ewise[", fused, "GEMM epilogue", &g);
    if (fused) {
        const kf_space *sp = kf_synth_space(s);
        int sel = -1, k = -1;
        for (int i = 0; i < sp->nparams && sel < 0; i++) {
            size_t ln = strlen(sp->p[i].name);
            if (ln > 4 && strcmp(sp->p[i].name + ln - 4, ".epi") == 0 && sscanf(sp->p[i].name, "s%d.", &k) == 1)
                sel = i;
        }
        cr_assert_geq(sel, 0, "no s<k>.epi in plan %s", kf_synth_describe(s));
        char hook[32];
        snprintf(hook, sizeof hook, "kf_stage%d_epi(ex,", k);
        int nfn[2], nscratch[2];
        for (int on = 0; on < 2; on++) {
            kf_point p;
            kf_synth_default_point(s, &p);
            p.idx[sel] = sp->p[sel].values[0] == on ? 0 : 1;
            kf_candidate c;
            kf_error err = {0};
            cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
            nfn[on] = nscratch[on] = 0;
            for (const char *q = c.source; (q = strstr(q, "\n    kf_stage")) != NULL; q++) nfn[on]++;
            for (const char *q = c.source; (q = strstr(q, "= kf_scratch(")) != NULL; q++) nscratch[on]++;
            cr_expect_eq(strstr(c.source, hook) != NULL, on, "epi=%d:\n%s", on, c.source);
            kf_candidate_clear(&c);
        }
        cr_expect_eq(nfn[1] + 1, nfn[0], "%s: %d stage calls fused, %d apart", text, nfn[1], nfn[0]);
        cr_expect_eq(nscratch[1] + 1, nscratch[0], "%s: %d scratch buffers fused, %d apart", text, nscratch[1],
                     nscratch[0]);
        /* held apart everywhere (kforge synth --no-fuse): the summary shows the stage */
        cr_expect_eq(kf_synth_pin(s, "epi", 0), 1);
        cr_expect(strstr(kf_synth_describe(s), "matmul -> ewise[") && !strstr(kf_synth_describe(s), "+ewise["), "%s",
                  kf_synth_describe(s));
    }
    kf_synth_free(s);
    kf_graph_free(g);
    check_task(text);
}

Test(templates, gemm_epilogue_fusion) {
    /* bias over columns, scale, activation; K in several slices at the moved point, M and
     * N not whole micro-kernel tiles */
    check_epilogue("input a: f32[37, 300]\ninput b: f32[45, 300]\ninput bias: f32[45]\n"
                   "output y = gelu(matmul(a, b, transpose_b=true) + bias) * 0.5\n", 1);
    /* a bias over rows, a clamp, and a residual add broadcast over the batch of a bmm */
    check_epilogue("input a: f32[3, 19, 40]\ninput b: f32[3, 40, 23]\ninput r: f32[19, 23]\ninput c: f32[3, 19, 1]\n"
                   "output y = hardtanh(matmul(a, b) - c, min_val=-2.0, max_val=2.0) + r\n", 1);
    /* the reader writes two results (the accumulator is the first), one a sigmoid gate */
    check_epilogue("input x: f32[17, 33]\ninput w: f32[33, 29]\n"
                   "t = matmul(x, w)\noutput u = t * sigmoid(t)\noutput v = tanh(t)\n", 1);
    /* a convolution with its bias, then relu: the GEMM over the gathered columns */
    check_epilogue("input x: f32[2, 3, 9, 11]\ninput w: f32[8, 3, 3, 3]\ninput b: f32[8]\n"
                   "output y = relu(conv(x, w, b, padding=[1, 1]))\n", 1);
    /* not fused: the product is also an output, is reduced too, or is read transposed */
    check_epilogue("input a: f32[20, 7]\ninput b: f32[7, 33]\n"
                   "output s = matmul(a, b)\noutput y = relu(s)\n", 0);
    check_epilogue("input a: f32[20, 7]\ninput b: f32[7, 33]\n"
                   "s = matmul(a, b)\noutput y = relu(s)\noutput z = sum(s, axes=[1])\n", 0);
    check_epilogue("input a: f32[20, 7]\ninput b: f32[7, 33]\n"
                   "output y = relu(transpose(matmul(a, b)))\n", 0);
}

/* Verify candidate c of graph g on the CPU (two input sets); returns the status. */
static kf_vstatus verify_source(const kf_graph *g, const kf_candidate *c) {
    kf_error err = {0};
    kf_verify_opts vo;
    kf_verify_opts_default(&vo);
    vo.workdir = workdir;
    vo.seed = 7;
    vo.nsets = 2;
    kf_verify_ctx *ctx = NULL;
    cr_assert_eq(kf_verify_ctx_new(g, &vo, &ctx, &err), KF_OK, "ctx: %s", err.msg);
    kf_vresult r;
    cr_assert_eq(kf_verify_candidate(ctx, be, c, &r, &err), KF_OK, "verify: %s", err.msg);
    kf_verify_ctx_free(ctx);
    return r.status;
}

/* A reduction over a GEMM's last axis (with its elementwise prologue) computed in the
 * GEMM's store stage: planned exactly when fused says so ("matmul+<op>"), the partials'
 * pass (kf_stage<k>_red) in the source and one stage call fewer than apart (red=0, the
 * reduction its own stage again); every form verifies (check_task: fused, every parameter
 * moved, red=0). Mutation: the fused candidate with the first N-tile's run of every row
 * dropped from its partial (the hook returns at column < 16) must fail the check. */
static void check_reduction(const char *text, const char *marker, int fused) {
    kf_graph *g;
    kf_synth *s = plan_expect(text, marker, fused, "GEMM reduction epilogue", &g);
    if (fused) {
        const kf_space *sp = kf_synth_space(s);
        int sel = -1, k = -1;
        for (int i = 0; i < sp->nparams && sel < 0; i++) {
            size_t ln = strlen(sp->p[i].name);
            if (ln > 4 && strcmp(sp->p[i].name + ln - 4, ".red") == 0 && sscanf(sp->p[i].name, "s%d.", &k) == 1)
                sel = i;
        }
        cr_assert_geq(sel, 0, "no s<k>.red in plan %s", kf_synth_describe(s));
        const kf_stage *h = &s->st[k];
        char pass[32], hook[48];
        snprintf(pass, sizeof pass, "kf_stage%d_red(", k);
        snprintf(hook, sizeof hook, "void kf_stage%d_epi(", k);
        int nfn[2];
        for (int on = 0; on < 2; on++) {
            kf_point p;
            kf_synth_default_point(s, &p);
            p.idx[sel] = sp->p[sel].values[0] == on ? 0 : 1;
            kf_candidate c;
            kf_error err = {0};
            cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "%s", err.msg);
            nfn[on] = 0; /* the entry's calls of stage functions */
            const char *entry = strstr(c.source, "int kforge_kernel(");
            cr_assert_not_null(entry);
            for (const char *q = entry; (q = strstr(q, "\n    kf_stage")) != NULL; q++) nfn[on]++;
            for (const char *q = entry; (q = strstr(q, "\n    if (kf_stage")) != NULL; q++) nfn[on]++;
            cr_expect_eq(strstr(c.source, pass) != NULL, on, "red=%d:\n%s", on, c.source);
            if (on) { /* the mutation: drop each row's first tile from its partial */
                const char *at = strstr(c.source, hook);
                cr_assert_not_null(at);
                at = strstr(at, "{\n") + 2;
                kf_buf m = {0};
                kf_buf_printf(&m, "%.*s    if (f %% %lldL < 16) return;\n%s", (int)(at - c.source), c.source,
                              (long long)h->mm.N, at);
                free(c.source);
                c.source = kf_buf_take(&m);
                cr_expect_neq(verify_source(g, &c), KF_V_OK, "a dropped tile's partial verified:\n%s", c.source);
            }
            kf_candidate_clear(&c);
        }
        cr_expect_eq(nfn[1] + 1, nfn[0], "%s: %d stage calls fused, %d apart", text, nfn[1], nfn[0]);
        /* held apart everywhere (kforge synth --no-fuse pins *.red=0): the summary shows it */
        cr_expect_eq(kf_synth_pin(s, "red", 0), 1);
        cr_expect(!strstr(kf_synth_describe(s), marker), "%s", kf_synth_describe(s));
    }
    kf_synth_free(s);
    kf_graph_free(g);
    check_task(text);
}

Test(templates, gemm_reduction_fusion) {
    /* Linear -> GELU -> row sum (keepdim): the bias and the activation are the prologue;
     * M and N not whole tiles, N over several NR strips */
    check_reduction("input x: f32[67, 45]\ninput w: f32[45, 83]\ninput b: f32[83]\n"
                    "output y = sum(gelu(matmul(x, w) + b), axes=[1], keepdim=true)\n", "matmul+sum(ewise[", 1);
    /* max straight from the product, K in several slices at the moved point */
    check_reduction("input x: f32[37, 300]\ninput w: f32[300, 130]\n"
                    "output y = max(matmul(x, w), axes=[-1])\n", "matmul+max", 1);
    /* a mean and a min over a batched product's rows (batch x M rows), B transposed */
    check_reduction("input a: f32[3, 19, 40]\ninput b: f32[3, 57, 40]\n"
                    "output y = mean(matmul(a, b, transpose_b=true) * 0.5, axes=[2]) - 1.0\n", "matmul+mean", 1);
    check_reduction("input a: f32[29, 40]\ninput b: f32[40, 70]\ninput c: f32[29, 1]\n"
                    "output y = min(tanh(matmul(a, b)) - c, axes=[1], keepdim=true)\n", "matmul+min(ewise[", 1);
    /* log-sum-exp (kept unlowered after a product: cpu.logsumexp_rows at red=0): Linear
     * then logsumexp over the features, and over a batched product's rows with a scale */
    check_reduction("input x: f32[67, 45]\ninput w: f32[83, 45]\ninput b: f32[83]\n"
                    "output y = logsumexp(matmul(x, w, transpose_b=true) + b, axes=[1], keepdim=true)\n",
                    "matmul+logsumexp(ewise[", 1);
    check_reduction("input a: f32[2, 21, 300]\ninput b: f32[2, 300, 70]\n"
                    "output y = logsumexp(matmul(a, b) * 0.25, axes=[2])\n", "matmul+logsumexp(ewise[", 1);
    /* not fused: the product is also an output; the reduction is over rows (axis 0); an
     * arg reduction */
    check_reduction("input a: f32[20, 7]\ninput b: f32[7, 33]\n"
                    "output s = matmul(a, b)\noutput z = sum(s, axes=[1])\n", "matmul+", 0);
    check_reduction("input a: f32[20, 7]\ninput b: f32[7, 33]\n"
                    "output z = sum(matmul(a, b), axes=[0])\n", "matmul+", 0);
    check_reduction("input a: f32[20, 7]\ninput b: f32[7, 33]\n"
                    "output z = argmax(matmul(a, b), axis=1)\n", "matmul+", 0);
}
