/*
 * Planted numerical faults (issue 24, items 9-11): CPU kernels that are right on small
 * zero-mean data and wrong elsewhere, which the default input sets must catch, and correct
 * kernels that a tolerance blind to the error model used to reject, which must verify.
 * Each fault is written from what any kernel could get wrong (no max subtraction before
 * exp, a one-pass variance, a term of a sum of products left out, a short accumulator, an
 * op that only matters on negative values), never from a particular verifier's sets.
 *
 * Every test runs the default number of sets (one per distribution), so "every
 * verification" is what is tested. The shapes are small: these are about the values.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"

typedef struct fixture {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *ctx;
    kf_verify_opts o;
    char wd[512];
} fixture;

static void fx_open_graph(fixture *f, kf_graph *g) {
    kf_error err = {0};
    f->g = g;
    cr_assert_eq(kf_backend_open("cpu", &f->b, &err), KF_OK, "backend: %s", err.msg);
    snprintf(f->wd, sizeof f->wd, "%s/test-work/numerics-%ld", KF_BUILD_DIR, (long)getpid());
    cr_assert_eq(kf_mkdirs(f->wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts_default(&f->o);
    f->o.workdir = f->wd;
    f->o.seed = 777;
    f->o.threads = 2;
    cr_assert_eq(kf_verify_ctx_new(f->g, &f->o, &f->ctx, &err), KF_OK, "ctx: %s", err.msg);
}

static void fx_open(fixture *f, const char *task) {
    memset(f, 0, sizeof *f);
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "parse: %s", err.msg);
    fx_open_graph(f, g);
}

static void fx_close(fixture *f) {
    kf_verify_ctx_free(f->ctx);
    kf_backend_close(f->b);
    kf_graph_free(f->g);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->wd);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", f->wd);
}

static kf_vresult run_src(fixture *f, const char *src) {
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "cpu", src, NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    kf_status st = kf_verify_candidate(f->ctx, f->b, &c, &r, &err);
    kf_candidate_clear(&c);
    cr_assert_eq(st, KF_OK, "verify could not run: %s (%s)", err.msg, r.detail);
    if (getenv("KF_TEST_VERBOSE"))
        fprintf(stderr, "[%s] sets %d %s\n", kf_vstatus_name(r.status), r.sets_run, r.detail);
    return r;
}

static void expect_ok(const kf_vresult *r) {
    cr_assert_eq(r->status, KF_V_OK, "status %s, want ok; detail: %s", kf_vstatus_name(r->status),
                 r->detail);
    cr_assert_eq(r->sets_run, KF_VERIFY_DEFAULT_SETS, "ran %d sets", r->sets_run);
}

static void expect_mismatch(const kf_vresult *r) {
    cr_assert_eq(r->status, KF_V_MISMATCH, "status %s, want mismatch; detail: %s",
                 kf_vstatus_name(r->status), r->detail);
}

/* ---- item 9: offset and large-magnitude sets ---- */

#define ROWS 64
#define COLS 1024
static const char *softmax_task = "task sm\ninput x: f32[64, 1024]\noutput y = softmax(x, axis=-1)\n";

static char buf[8192];

/* A row-wise kernel over x[64][1024]: `body` runs per row with r (row pointer) and o. */
static const char *rowwise(const char *body) {
    snprintf(buf, sizeof buf,
             "#include <math.h>\n"
             "int kforge_kernel(void *const *args) {\n"
             "    const float *x = args[0];\n"
             "    float *y = args[1];\n"
             "    for (int i = 0; i < %d; i++) {\n"
             "        const float *r = x + (long)i * %d;\n"
             "        float *o = y + (long)i * %d;\n"
             "        const int n = %d;\n"
             "        %s\n"
             "    }\n"
             "    return 0;\n"
             "}\n",
             ROWS, COLS, COLS, COLS, body);
    return buf;
}

Test(numerics, softmax_without_max_subtraction_is_caught) {
    fixture f;
    fx_open(&f, softmax_task);
    kf_vresult r = run_src(&f, rowwise("float s = 0.0f;\n"
                                       "for (int j = 0; j < n; j++) { o[j] = expf(r[j]); s += o[j]; }\n"
                                       "for (int j = 0; j < n; j++) o[j] /= s;"));
    expect_mismatch(&r);
    fx_close(&f);
}

/* softmax from the row's max: what a careful float32 kernel does */
static const char *careful_softmax(void) {
    return rowwise("float m = r[0]; for (int j = 1; j < n; j++) m = fmaxf(m, r[j]);\n"
                   "float s = 0.0f;\n"
                   "for (int j = 0; j < n; j++) { o[j] = expf(r[j] - m); s += o[j]; }\n"
                   "for (int j = 0; j < n; j++) o[j] /= s;");
}

Test(numerics, careful_softmax_verifies) {
    fixture f;
    fx_open(&f, softmax_task);
    kf_vresult r = run_src(&f, careful_softmax());
    expect_ok(&r);
    fx_close(&f);
}

/* the per-distribution figures: one for each distribution checked, the worst of them the
 * overall worst */
Test(numerics, errors_are_reported_per_input_distribution) {
    fixture f;
    fx_open(&f, softmax_task);
    kf_vresult r = run_src(&f, careful_softmax());
    expect_ok(&r);
    cr_assert_eq(r.dist_seen, (1u << KF_VERIFY_NDIST) - 1, "distributions seen: %#x", r.dist_seen);
    double worst = 0, worst_rel = 0;
    for (int d = 0; d < KF_VERIFY_NDIST; d++) {
        cr_assert(r.dist_nmse[d] >= 0 && r.dist_nmse[d] <= r.nmse, "%s: nmse %g of %g", kf_verify_dist_name(d),
                  r.dist_nmse[d], r.nmse);
        worst = fmax(worst, r.dist_nmse[d]);
        worst_rel = fmax(worst_rel, r.dist_max_rel[d]);
    }
    cr_assert(r.nmse > 0 && worst == r.nmse, "worst per distribution %g, overall %g", worst, r.nmse);
    cr_assert(worst_rel == r.max_rel_err, "worst rel per distribution %g, overall %g", worst_rel, r.max_rel_err);
    cr_assert_str_eq(kf_verify_dist_name(4), "offset");
    fx_close(&f);
}

static const char *norm_task = "task ln\ninput x: f32[64, 1024]\noutput y = layer_norm(x, axes=-1)\n";

Test(numerics, one_pass_variance_is_caught) {
    fixture f;
    fx_open(&f, norm_task);
    kf_vresult r = run_src(&f, rowwise("float s = 0.0f, q = 0.0f;\n"
                                       "for (int j = 0; j < n; j++) { s += r[j]; q += r[j] * r[j]; }\n"
                                       "float m = s / n, v = q / n - m * m;\n"
                                       "float k = 1.0f / sqrtf(v + 1e-5f);\n"
                                       "for (int j = 0; j < n; j++) o[j] = (r[j] - m) * k;"));
    expect_mismatch(&r);
    fx_close(&f);
}

Test(numerics, two_pass_variance_verifies) {
    fixture f;
    fx_open(&f, norm_task);
    /* float throughout, the mean in pairs of partial sums: careful, not extravagant */
    kf_vresult r = run_src(&f, rowwise("float p[8] = {0};\n"
                                       "for (int j = 0; j < n; j++) p[j & 7] += r[j];\n"
                                       "float m = (((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]))) / n;\n"
                                       "float q = 0.0f;\n"
                                       "for (int j = 0; j < n; j++) { float d = r[j] - m; q += d * d; }\n"
                                       "float k = 1.0f / sqrtf(q / n + 1e-5f);\n"
                                       "for (int j = 0; j < n; j++) o[j] = (r[j] - m) * k;"));
    expect_ok(&r);
    fx_close(&f);
}

/* ---- item 10: a contraction's tolerance follows its error model ---- */

#define GM 32
#define GK 8192
#define GN 32
static const char *gemm_clamp_task = "task gemm_clamp\n"
                                     "input a: f32[32, 8192]\n"
                                     "input b: f32[8192, 32]\n"
                                     "output y = hardtanh(matmul(a, b), min_val=-50, max_val=50)\n";
static const char *gemm_tanh_task = "task gemm_tanh\n"
                                    "input a: f32[32, 8192]\n"
                                    "input b: f32[8192, 32]\n"
                                    "input c: f32[32]\n"
                                    "output y = tanh((matmul(a, b) + c) * 0.05)\n";

/* A plain GEMM; `acc` is the accumulation statement (s, a row, b column). The epilogue
 * `epi` maps s to the output. */
static const char *gemm(const char *acc, const char *epi, int bias) {
    snprintf(buf, sizeof buf,
             "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n"
             "static float keep11(float v) { uint32_t u; memcpy(&u, &v, 4); u = (u + 0x1000u) & ~0x1fffu; memcpy(&v, &u, 4); return v; }\n"
             "int kforge_kernel(void *const *args) {\n"
             "    const float *a = args[0], *b = args[1];\n"
             "    const float *c = %s;\n"
             "    float *y = args[%d];\n"
             "    (void)c;\n"
             "    for (int i = 0; i < %d; i++)\n"
             "        for (int j = 0; j < %d; j++) {\n"
             "            float s = 0.0f;\n"
             "            for (int k = 0; k < %d; k++) { %s }\n"
             "            y[i * %d + j] = %s;\n"
             "        }\n"
             "    return 0;\n"
             "}\n",
             bias ? "args[2]" : "0", bias ? 3 : 2, GM, GN, GK, acc, GN, epi);
    return buf;
}

#define PLAIN "s += a[i * 8192 + k] * b[k * 32 + j];"
#define CLAMP "fminf(fmaxf(s, -50.0f), 50.0f)"
#define TANH "tanhf((s + c[j]) * 0.05f)"

Test(numerics, gemm_clamp_at_large_k_verifies) {
    fixture f;
    fx_open(&f, gemm_clamp_task);
    kf_vresult r = run_src(&f, gemm(PLAIN, CLAMP, 0));
    expect_ok(&r);
    fx_close(&f);
}

Test(numerics, gemm_tanh_at_large_k_verifies) {
    fixture f;
    fx_open(&f, gemm_tanh_task);
    kf_vresult r = run_src(&f, gemm(PLAIN, TANH, 1));
    expect_ok(&r);
    fx_close(&f);
}

Test(numerics, gemm_skipping_one_term_is_caught) {
    fixture f;
    fx_open(&f, gemm_clamp_task);
    kf_vresult r = run_src(&f, gemm("if (k != 4097) " PLAIN, CLAMP, 0));
    expect_mismatch(&r);
    fx_close(&f);
}

Test(numerics, gemm_with_a_half_precision_accumulator_is_caught) {
    fixture f;
    fx_open(&f, gemm_tanh_task);
    /* the accumulator rounded to 11 significant bits (f16's) after every term */
    kf_vresult r = run_src(&f, gemm("s = keep11(s + a[i * 8192 + k] * b[k * 32 + j]);", TANH, 1));
    expect_mismatch(&r);
    fx_close(&f);
}

/* ---- item 11: an imported module's own input range is not the domain ---- */

/* A graph.json as python/kforge_torch/importer.py writes it for y = relu(x), the module's
 * get_inputs drawing x with torch.rand ([0, 1)). */
static const char *relu_bundle =
    "{\"format\": \"kforge-graph\", \"version\": 1, \"name\": \"relu_mod\",\n"
    " \"inputs\": [{\"name\": \"x\", \"kind\": \"input\", \"index\": 0, \"dtype\": \"f32\",\n"
    "              \"shape\": [4096], \"range\": [1.2e-05, 0.99997]}],\n"
    " \"nodes\": [{\"name\": \"relu\", \"target\": \"aten.relu.default\", \"args\": [{\"ref\": \"x\"}],\n"
    "            \"kwargs\": {}, \"dtype\": \"f32\", \"shape\": [4096]}],\n"
    " \"outputs\": [{\"ref\": \"relu\"}]}\n";

static kf_graph *import_bundle(const char *json, const char *dir) {
    char path[700];
    snprintf(path, sizeof path, "%s/graph.json", dir);
    FILE *fp = fopen(path, "w");
    cr_assert(fp, "cannot write %s", path);
    fputs(json, fp);
    fclose(fp);
    kf_graph *g = NULL;
    kf_error err = {0};
    char *text = NULL;
    cr_assert_eq(kf_import_torch_graph(path, &text, &g, &err), KF_OK, "import: %s", err.msg);
    free(text);
    return g;
}

Test(numerics, identity_is_not_relu_on_a_module_drawn_with_rand) {
    char dir[512];
    kf_error err = {0};
    snprintf(dir, sizeof dir, "%s/test-work/numerics-import-%ld", KF_BUILD_DIR, (long)getpid());
    cr_assert_eq(kf_mkdirs(dir, &err), KF_OK, "%s", err.msg);
    /* where an op on the path needs the range (log: positive), it is kept */
    char logb[2048];
    snprintf(logb, sizeof logb, "%s", relu_bundle);
    char *t = strstr(logb, "aten.relu.default");
    cr_assert(t);
    memcpy(t, "aten.log.default ", 17);
    kf_graph *lg = import_bundle(logb, dir);
    cr_assert(lg->values[lg->inputs[0]].has_range, "log's input lost the module's range");
    kf_graph_free(lg);
    fixture f;
    memset(&f, 0, sizeof f);
    fx_open_graph(&f, import_bundle(relu_bundle, dir));
    cr_assert(!f.g->values[f.g->inputs[0]].has_range, "relu's input kept torch.rand's range");
    kf_vresult r = run_src(&f, "#include <string.h>\n"
                               "int kforge_kernel(void *const *args) {\n"
                               "    memcpy(args[1], args[0], 4096 * sizeof(float));\n"
                               "    return 0;\n"
                               "}\n");
    expect_mismatch(&r);
    kf_vresult ok = run_src(&f, "int kforge_kernel(void *const *args) {\n"
                                "    const float *x = args[0]; float *y = args[1];\n"
                                "    for (int i = 0; i < 4096; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;\n"
                                "    return 0;\n"
                                "}\n");
    expect_ok(&ok);
    fx_close(&f);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* A convolution is a sum of products too (kf_op_def.own_terms): its tolerance follows the
 * same error model. 2304 terms an output on the wide-magnitude set (|x| up to 64): a plain
 * float loop in another order than the reference's must verify (it failed set 2 before the
 * rule, as KernelBench level 2's conv_transpose + add + minimum + gelu did), and one that
 * drops a term must not. */
static const char *conv_clamp_task = "task conv_clamp\n"
                                     "input x: f32[2, 256, 10, 10]\n"
                                     "input w: f32[8, 256, 3, 3]\n"
                                     "output y = hardtanh(conv(x, w), min_val=-50, max_val=50)\n";

static const char *conv_src(const char *skip) {
    snprintf(buf, sizeof buf,
             "#include <math.h>\n"
             "int kforge_kernel(void *const *args) {\n"
             "    const float *x = args[0], *w = args[1]; float *y = args[2];\n"
             "    for (int n = 0; n < 2; n++) for (int o = 0; o < 8; o++)\n"
             "        for (int i = 0; i < 8; i++) for (int j = 0; j < 8; j++) {\n"
             "            float s = 0.0f;\n"
             "            for (int kh = 0; kh < 3; kh++) for (int kw = 0; kw < 3; kw++)\n"
             "                for (int c = 0; c < 256; c++) {\n"
             "                    %s\n"
             "                    s += x[((n * 256 + c) * 10 + i + kh) * 10 + j + kw] * w[((o * 256 + c) * 3 + kh) * 3 + kw];\n"
             "                }\n"
             "            y[((n * 8 + o) * 8 + i) * 8 + j] = fminf(fmaxf(s, -50.0f), 50.0f);\n"
             "        }\n"
             "    return 0;\n"
             "}\n",
             skip);
    return buf;
}

Test(numerics, conv_in_another_order_verifies) {
    fixture f;
    fx_open(&f, conv_clamp_task);
    kf_vresult r = run_src(&f, conv_src(""));
    expect_ok(&r);
    fx_close(&f);
}

Test(numerics, conv_skipping_one_term_is_caught) {
    fixture f;
    fx_open(&f, conv_clamp_task);
    kf_vresult r = run_src(&f, conv_src("if (c == 33 && kh == 1 && kw == 2) continue;"));
    expect_mismatch(&r);
    fx_close(&f);
}

/* A sum's own rounding (issue 24, item 10): two sums of the same rows, one added forwards
 * and one backwards, subtracted. Exactly they cancel; in float32 their difference is the
 * two orders' rounding, up to about R u sum |x|, which the reference carries as the sums'
 * bound. Before it did (commit bd5a3d7) the honest kernel failed at seed 777 (|err|
 * 0.000164 > tol 0.000101 on the uniform set), and a sum dropping one term must still
 * fail (by NMSE, whose share of the bound is divided by the sum's length). */
static const char *sum_cancel_task = "task sum_cancel\ninput x: f32[64, 4096]\n"
                                     "output y = sum(x, axes=1) - sum(x, axes=1) + mean(x, axes=1)\n";

static const char *sum_cancel_src(const char *drop) {
    snprintf(buf, sizeof buf,
             "int kforge_kernel(void *const *args) {\n"
             "    const float *x = args[0];\n"
             "    float *y = args[1];\n"
             "    for (int i = 0; i < 64; i++) {\n"
             "        const float *r = x + (long)i * 4096;\n"
             "        float s1 = 0.0f, s2 = 0.0f, m = 0.0f;\n"
             "        for (int j = 0; j < 4096; j++) s1 += r[j];\n"
             "        for (int j = 4095; j >= 0; j--) s2 += r[j]%s;\n"
             "        for (int j = 0; j < 4096; j++) m += r[j];\n"
             "        y[i] = s1 - s2 + m / 4096.0f;\n"
             "    }\n"
             "    return 0;\n"
             "}\n",
             drop);
    return buf;
}

Test(numerics, sum_in_another_order_at_a_cancelling_row_verifies) {
    fixture f;
    fx_open(&f, sum_cancel_task);
    kf_vresult r = run_src(&f, sum_cancel_src(""));
    expect_ok(&r);
    fx_close(&f);
}

Test(numerics, sum_dropping_one_term_is_caught) {
    fixture f;
    fx_open(&f, sum_cancel_task);
    kf_vresult r = run_src(&f, sum_cancel_src(" * (j != 1234)"));
    expect_mismatch(&r);
    fx_close(&f);
}

/* The same for a running sum: one scan sequential, the other in blocks of 512 offset by the
 * blocks before (a parallel scan's order). Before the scan's own bound the honest kernel
 * failed at seed 777 (|err| 0.000107 > tol 0.0001); a block that drops a term still fails. */
static const char *scan_cancel_task = "task scan_cancel\ninput x: f32[64, 4096]\n"
                                      "output y = cumsum(x, axis=-1) - cumsum(x, axis=-1) + x\n";

static const char *scan_cancel_src(const char *drop) {
    snprintf(buf, sizeof buf,
             "int kforge_kernel(void *const *args) {\n"
             "    const float *x = args[0];\n"
             "    float *y = args[1];\n"
             "    static float a[4096], b[4096];\n"
             "    for (int i = 0; i < 64; i++) {\n"
             "        const float *r = x + (long)i * 4096;\n"
             "        float s = 0.0f, off = 0.0f;\n"
             "        for (int j = 0; j < 4096; j++) { s += r[j]; a[j] = s; }\n"
             "        for (int k = 0; k < 8; k++) {\n"
             "            float t = 0.0f;\n"
             "            for (int j = 512 * k; j < 512 * (k + 1); j++) { t += r[j]%s; b[j] = t; }\n"
             "            for (int j = 512 * k; j < 512 * (k + 1); j++) b[j] += off;\n"
             "            off = b[512 * (k + 1) - 1];\n"
             "        }\n"
             "        for (int j = 0; j < 4096; j++) y[(long)i * 4096 + j] = a[j] - b[j] + r[j];\n"
             "    }\n"
             "    return 0;\n"
             "}\n",
             drop);
    return buf;
}

Test(numerics, scan_in_blocks_at_a_cancelling_row_verifies) {
    fixture f;
    fx_open(&f, scan_cancel_task);
    kf_vresult r = run_src(&f, scan_cancel_src(""));
    expect_ok(&r);
    fx_close(&f);
}

Test(numerics, scan_dropping_one_term_is_caught) {
    fixture f;
    fx_open(&f, scan_cancel_task);
    kf_vresult r = run_src(&f, scan_cancel_src(" * (j != 1234)"));
    expect_mismatch(&r);
    fx_close(&f);
}

/* A contraction feeding a norm: on the offset set the GEMM's results are large with a small
 * spread, so its float32 error is amplified by the norm; the bound must be carried through
 * the norm (the record's f64_row_bound), or every kernel fails there. */
Test(numerics, gemm_then_layer_norm_verifies) {
    fixture f;
    fx_open(&f, "task gemm_ln\ninput a: f32[16, 256]\ninput b: f32[256, 64]\n"
                "output y = layer_norm(matmul(a, b), axes=-1)\n");
    kf_vresult r = run_src(&f, "#include <math.h>\n"
                               "int kforge_kernel(void *const *args) {\n"
                               "    const float *a = args[0], *b = args[1]; float *y = args[2];\n"
                               "    for (int i = 0; i < 16; i++) {\n"
                               "        float h[64], m = 0.0f, q = 0.0f;\n"
                               "        for (int j = 0; j < 64; j++) {\n"
                               "            float s = 0.0f;\n"
                               "            for (int k = 0; k < 256; k++) s += a[i * 256 + k] * b[k * 64 + j];\n"
                               "            h[j] = s; m += s;\n"
                               "        }\n"
                               "        m /= 64;\n"
                               "        for (int j = 0; j < 64; j++) q += (h[j] - m) * (h[j] - m);\n"
                               "        float k = 1.0f / sqrtf(q / 64 + 1e-5f);\n"
                               "        for (int j = 0; j < 64; j++) y[i * 64 + j] = (h[j] - m) * k;\n"
                               "    }\n"
                               "    return 0;\n"
                               "}\n");
    expect_ok(&r);
    fx_close(&f);
}

/* A reference beyond float32's range: exp(t) * p with t up to 80 and |p| up to 1e4 is
 * finite in float64 (5.5e38) and no float32 kernel can give it. The large-magnitude set
 * is drawn again at a smaller magnitude until the reference fits float32, so a plain, correct
 * kernel verifies on every set (before, it failed set 5 with inf against a finite value). */
Test(numerics, a_reference_beyond_float32_is_drawn_smaller) {
    fixture f;
    fx_open(&f, "task ovf\ninput t: f32[64, 64]\ninput p: f32[64, 64]\noutput y = exp(t) * p\n");
    kf_vresult r = run_src(&f,
                           "#include <math.h>\n"
                           "int kforge_kernel(void *const *args) {\n"
                           "    const float *t = args[0], *p = args[1];\n"
                           "    float *y = args[2];\n"
                           "    for (int i = 0; i < 64 * 64; i++) y[i] = expf(t[i]) * p[i];\n"
                           "    return 0;\n"
                           "}\n");
    expect_ok(&r);
    /* and a kernel that is wrong on the shrunk set is still caught there */
    r = run_src(&f,
                "#include <math.h>\n"
                "int kforge_kernel(void *const *args) {\n"
                "    const float *t = args[0], *p = args[1];\n"
                "    float *y = args[2];\n"
                "    for (int i = 0; i < 64 * 64; i++) y[i] = fabsf(t[i]) > 20 ? 0.0f : expf(t[i]) * p[i];\n"
                "    return 0;\n"
                "}\n");
    expect_mismatch(&r);
    fx_close(&f);
}

/* The verifier's passes over an output run in parallel chunks (official GPU shapes have
 * outputs of a billion elements): a verdict, its first bad element, its counts and its NMSE
 * must not depend on the thread count, and a fault in a later chunk must not hide an
 * earlier one. Five chunks of 2^16 elements; faults planted in chunks 1 and 3. */
static const char *chunk_task = "task chunks\ninput x: f32[5, 65536]\noutput y = x * 2\n";

static const char *chunk_kernel(const char *fault) {
    snprintf(buf, sizeof buf,
             "int kforge_kernel(void *const *args) {\n"
             "    const float *x = args[0];\n"
             "    float *y = args[1];\n"
             "    for (long i = 0; i < 5l * 65536; i++) {\n"
             "        if (i == 3l * 65536 + 77 || i == 65536l + 5) { %s; continue; }\n"
             "        y[i] = 2 * x[i];\n"
             "    }\n"
             "    return 0;\n"
             "}\n",
             fault);
    return buf;
}

static void same_on_any_thread_count(fixture *f, const char *fault, kf_vstatus want,
                                     const char *first) {
    char detail[2][1100];
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k ? 4 : 1);
        kf_vresult r = run_src(f, chunk_kernel(fault));
        cr_assert_eq(r.status, want, "threads %d: status %s; %s", k ? 4 : 1,
                     kf_vstatus_name(r.status), r.detail);
        cr_assert_eq(r.first_bad, 65536 + 5, "threads %d: first bad %lld; %s", k ? 4 : 1,
                     (long long)r.first_bad, r.detail);
        cr_assert(strstr(r.detail, first), "threads %d: '%s' not in: %s", k ? 4 : 1, first, r.detail);
        snprintf(detail[k], sizeof detail[k], "%s", r.detail);
    }
    cr_assert_str_eq(detail[0], detail[1], "one thread and four judged differently");
}

Test(numerics, a_large_output_is_judged_alike_on_any_thread_count) {
    fixture f;
    fx_open(&f, chunk_task);
    same_on_any_thread_count(&f, "", KF_V_UNWRITTEN, "2 of 327680 elements unwritten");
    same_on_any_thread_count(&f, "y[i] = 2 * x[i] + 0.5f", KF_V_MISMATCH,
                             "2 of 327680 elements out of tolerance");
    fx_close(&f);
}
