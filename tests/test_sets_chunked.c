/*
 * The sets of a pointwise graph drawn and referenced chunk by chunk (src/verify/sets.c
 * set_pipe, issue 30): the same inputs, references, RMS and magnitude factors, bit for bit,
 * as drawing each whole set, running the graph over the whole tensors and rounding
 * (KFORGE_SETS_WHOLE=1 forces that path), on one thread and on several; with a tail chunk,
 * a broadcast input, two outputs, an f64 output, and a set drawn again at a smaller
 * magnitude. And kf_interp_run_span against kf_interp_run on any span.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/ir.h"
#include "kforge/verify.h"
#include "verify/verify_int.h"

static kf_verify_ctx *ctx_of(const char *task, int whole, int threads, kf_graph **g) {
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<test>", g, &err), KF_OK, "%s", err.msg);
    if (whole) setenv("KFORGE_SETS_WHOLE", "1", 1);
    else unsetenv("KFORGE_SETS_WHOLE");
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.seed = 777;
    o.nsets = 6;
    omp_set_num_threads(threads);
    kf_verify_ctx *c = NULL;
    cr_assert_eq(kf_verify_ctx_new(*g, &o, &c, &err), KF_OK, "%s", err.msg);
    unsetenv("KFORGE_SETS_WHOLE");
    return c;
}

/* the chunked context a against the whole one b: every byte of every set */
static void same(const kf_verify_ctx *a, const kf_verify_ctx *b) {
    cr_assert_eq(a->nsets, b->nsets);
    for (int s = 0; s < a->nsets; s++) {
        const kf_vset *x = &a->sets[s], *y = &b->sets[s];
        cr_assert_eq(x->shrink, y->shrink, "set %d magnitude factor %g against %g", s, x->shrink, y->shrink);
        for (int i = 0; i < a->nin; i++)
            cr_assert_eq(memcmp(x->in[i], y->in[i], a->in_bytes[i]), 0, "set %d input %d", s, i);
        for (int j = 0; j < a->nout; j++) {
            cr_assert_eq(memcmp(x->ref[j], y->ref[j], a->out_bytes[j]), 0, "set %d reference %d", s, j);
            cr_assert_eq(memcmp(&x->ref_rms[j], &y->ref_rms[j], sizeof(double)), 0, "set %d RMS %d: %.17g against %.17g",
                         s, j, x->ref_rms[j], y->ref_rms[j]);
            cr_assert(!x->bound[j] && !y->bound[j], "a pointwise graph has no bounds");
        }
    }
}

static void check(const char *task) {
    kf_graph *g1, *g2, *g3;
    kf_verify_ctx *w = ctx_of(task, 1, 2, &g1);
    kf_verify_ctx *p2 = ctx_of(task, 0, 2, &g2);
    kf_verify_ctx *p1 = ctx_of(task, 0, 1, &g3);
    cr_assert_eq(w->pipe, 0, "KFORGE_SETS_WHOLE: the whole-set path");
    cr_assert_eq(p2->pipe, 1, "a pointwise graph takes the chunked path");
    same(p2, w);
    same(p1, w);
    kf_verify_ctx_free(w);
    kf_verify_ctx_free(p2);
    kf_verify_ctx_free(p1);
    kf_graph_free(g1);
    kf_graph_free(g2);
    kf_graph_free(g3);
}

Test(sets_chunked, same_sets_as_the_whole_set_path) {
    /* 3 chunks and a tail */
    check("task pw\ninput x: f32[3, 65811]\noutput y = x * sigmoid(x)\n");
    /* a broadcast input (drawn whole), two outputs, an f64 output */
    check("task two\ninput x: f32[700, 333]\ninput b: f32[333]\ninput z: f64[700, 333]\n"
          "output y = gelu_tanh(x + b)\noutput u = z * tanh(z)\n");
}

Test(sets_chunked, a_set_drawn_again_at_a_smaller_magnitude) {
    /* x^16 of the large-magnitude set is far beyond float32: drawn again at half the
     * magnitude until it is not, in both paths alike */
    const char *task = "task far\ninput x: f32[200001]\na = x * x\nb = a * a\nd = b * b\noutput y = d * d\n";
    kf_graph *g1, *g2;
    kf_verify_ctx *w = ctx_of(task, 1, 2, &g1), *p = ctx_of(task, 0, 2, &g2);
    int shrunk = 0;
    for (int s = 0; s < p->nsets; s++) shrunk |= p->sets[s].shrink < 1;
    cr_assert(shrunk, "some set was drawn again (the test's premise)");
    same(p, w);
    kf_verify_ctx_free(w);
    kf_verify_ctx_free(p);
    kf_graph_free(g1);
    kf_graph_free(g2);
}

Test(sets_chunked, a_span_is_the_whole_run_s_elements) {
    kf_graph *g;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string("task s\ninput x: f32[50, 1000]\ninput b: f32[1000]\ninput c: f32[50, 1]\n"
                                 "output t = x * b\noutput y = exp(t - c)\n", "<test>", &g, &err), KF_OK, "%s", err.msg);
    cr_assert(kf_interp_fusable(g));
    int64_t n = 50000;
    double *x = malloc(n * sizeof *x), *b = malloc(1000 * sizeof *b), *c = malloc(50 * sizeof *c);
    double *y = malloc(n * sizeof *y), *y2 = malloc(n * sizeof *y2);
    for (int64_t e = 0; e < n; e++) x[e] = sin((double)e * 0.37) * 3;
    for (int e = 0; e < 1000; e++) b[e] = cos(e * 0.11);
    for (int e = 0; e < 50; e++) c[e] = e * 0.01 - 0.2;
    const double *in[3] = {x, b, c};
    double *out[2] = {y2, y};
    cr_assert_eq(kf_interp_run(g, in, out, &err), KF_OK, "%s", err.msg);
    const int64_t spans[][2] = {{0, n}, {0, 1}, {1, 16383}, {16383, 16386}, {12345, 30001}, {n - 7, 7}, {999, 0}};
    for (size_t k = 0; k < sizeof spans / sizeof spans[0]; k++) {
        int64_t lo = spans[k][0], len = spans[k][1];
        double *sy = malloc((len + 1) * sizeof *sy), *sy2 = malloc((len + 1) * sizeof *sy2);
        const double *sin_[3] = {x + lo, b, c};
        double *sout[2] = {sy2, sy};
        int far = -1;
        cr_assert_eq(kf_interp_run_span(g, lo, len, sin_, sout, &far, &err), KF_OK, "%s", err.msg);
        cr_assert_eq(far, 0);
        cr_assert_eq(memcmp(sy, y + lo, len * sizeof *sy), 0, "span [%lld, +%lld) output 0", (long long)lo, (long long)len);
        cr_assert_eq(memcmp(sy2, y2 + lo, len * sizeof *sy2), 0, "span [%lld, +%lld) output 1", (long long)lo, (long long)len);
        free(sy);
        free(sy2);
    }
    /* outside the shape, and a graph that is not pointwise: refused */
    double one;
    const double *in1[3] = {x, b, c};
    double *out1[2] = {&one, &one};
    cr_assert_eq(kf_interp_run_span(g, n - 1, 2, in1, out1, NULL, &err), KF_ERR_ARG);
    kf_graph *h;
    cr_assert_eq(kf_parse_string("task r\ninput x: f32[4, 5]\noutput y = sum(x, axes=1)\n", "<test>", &h, &err), KF_OK);
    cr_assert_eq(kf_interp_run_span(h, 0, 1, in1, out1, NULL, &err), KF_ERR_ARG);
    kf_graph_free(h);
    kf_graph_free(g);
    free(x), free(b), free(c), free(y), free(y2);
}
