/*
 * The CPU candidates' math prelude (src/synth/cpu_prelude.txt), checked as candidates
 * use it: the shipped text is pasted in front of one-line loops `y[i] = kf_xxx(x[i])`,
 * compiled by the system compiler with the CPU backend's candidate flags into a shared
 * object and called through dlsym. Each function is swept densely (a linear sweep of its
 * useful range plus a sweep over the float bit patterns of that range, about 1e6 points
 * each, KF_PRELUDE_POINTS to change; 4e9 makes the bit sweeps exhaustive) against the
 * double-precision libm function, near its special regions, and on its IEEE special
 * values, through both the vectorised loop and a loop the compiler must not vectorise.
 * The build is also checked to vectorise every loop and to call no libm function, and the
 * vector helpers the reduction templates use are checked for exact results.
 *
 * KF_PRELUDE_FILE=path tests another prelude text (a draft) instead of the shipped one.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/ops.h"

#define CAND_FLAGS "-O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math -fPIC -shared"

typedef void (*loop_fn)(const float *restrict x, float *restrict y, long n);

/* The functions under test, one wrapper line each (the vectorisation check finds the
 * loops by line). kf_t_* loops must vectorise; kf_s_* are the same loops kept scalar. */
static const char *const fn_names[] = {"expf", "logf", "expm1f", "log1pf", "tanhf",
                                       "sigmoidf", "erff", "tanh_softplusf"};
#define NFN ((int)(sizeof fn_names / sizeof fn_names[0]))

/* binary pointwise ops whose rendered expression is checked over this prelude */
static const char *const mm_names[] = {"maximum", "minimum"};
#define NMM ((int)(sizeof mm_names / sizeof mm_names[0]))

static char workdir[] = "/tmp/kf-prelude-XXXXXX";
static void *lib;
static int first_wrapper_line; /* line of the first kf_t_ wrapper in the generated file */

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) { free(s); s = NULL; }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static const char *prelude_path(void) {
    const char *p = getenv("KF_PRELUDE_FILE");
    return p && p[0] ? p : KF_SOURCE_DIR "/src/synth/cpu_prelude.txt";
}

/* Write prelude + wrappers, compile with the candidate flags (keeping the vectoriser's
 * report), load the result. */
static void setup(void) {
    cr_assert(mkdtemp(workdir) != NULL);
    char *text = read_text(prelude_path());
    cr_assert(text != NULL, "cannot read %s", prelude_path());
    char src[256], so[256], cmd[1024];
    snprintf(src, sizeof src, "%s/k.c", workdir);
    snprintf(so, sizeof so, "%s/k.so", workdir);
    FILE *f = fopen(src, "w");
    cr_assert(f != NULL);
    fputs("#define KF_VW 8\n", f);
    fputs(text, f);
    int line = 2;
    for (const char *c = text; *c; c++) line += *c == '\n';
    if (text[0] && text[strlen(text) - 1] != '\n') { fputc('\n', f); line++; }
    free(text);
    first_wrapper_line = line;
    for (int i = 0; i < NFN; i++)
        fprintf(f, "void kf_t_%s(const float *restrict xs, float *restrict y, long n) "
                   "{ for (long i = 0; i < n; i++) y[i] = kf_%s(xs[i]); }\n", fn_names[i], fn_names[i]);
    for (int i = 0; i < NFN; i++)
        fprintf(f, "__attribute__((optimize(\"no-tree-vectorize\"))) void kf_s_%s(const float *restrict xs, "
                   "float *restrict y, long n) { for (long i = 0; i < n; i++) y[i] = kf_%s(xs[i]); }\n",
                fn_names[i], fn_names[i]);
    /* the reduction templates' helpers and the softmax / x*sigmoid(x) loops */
    fputs("double kf_t_vsum(const float *x, long n) { return kf_vsum(x, n); }\n"
          "double kf_t_vsumsqdev(const float *x, long n, float c) { return kf_vsumsqdev(x, n, c); }\n"
          "float kf_t_vextreme(const float *x, long n, int mx) { return kf_vextreme(x, n, mx); }\n"
          "void kf_t_stream_copy(float *d, const float *s, long n) { kf_stream_copy(d, s, n); kf_sfence(); }\n"
          "void kf_t_silu(const float *restrict xs, float *restrict y, long n) "
          "{ for (long i = 0; i < n; i++) y[i] = xs[i] * kf_sigmoidf(xs[i]); }\n"
          "void kf_t_softmax_exp(const float *restrict xs, float *restrict y, long n, float m) "
          "{ for (long i = 0; i < n; i++) y[i] = kf_expf(xs[i] - m); }\n"
          "void kf_t_powf(const float *restrict a, const float *restrict b, float *restrict y, long n) "
          "{ for (long i = 0; i < n; i++) y[i] = kf_powf(a[i], b[i]); }\n", f);
    /* the NaN-propagating maximum/minimum as their records render them over this prelude */
    for (int i = 0; i < NMM; i++) {
        kf_pw_emit e = {.in = {"r1", "r2"}, .producer = KF_OP_COUNT};
        kf_buf ex = {0};
        kf_op_render_f32(kf_op_get(kf_op_lookup(mm_names[i])), &e, &ex);
        for (int v = 0; v < 2; v++)
            fprintf(f, "%svoid kf_%s_%s(const float *restrict a, const float *restrict b, float *restrict y, long n) "
                       "{ for (long i = 0; i < n; i++) { const float r1 = a[i], r2 = b[i]; y[i] = %s; } }\n",
                    v ? "__attribute__((optimize(\"no-tree-vectorize\"))) " : "", v ? "s" : "t", mm_names[i], ex.data);
        kf_buf_free(&ex);
    }
    fclose(f);
    const char *cc = getenv("KFORGE_CC");
    snprintf(cmd, sizeof cmd, "%s %s -fopt-info-vec-optimized=%s/vec.txt %s -o %s -lm > %s/cc.log 2>&1",
             cc && cc[0] ? cc : "cc", CAND_FLAGS, workdir, src, so, workdir);
    int rc = system(cmd);
    if (rc != 0) {
        char log[300];
        snprintf(log, sizeof log, "%s/cc.log", workdir);
        char *msg = read_text(log);
        cr_assert_fail("compile failed: %s\n%s", cmd, msg ? msg : "");
    }
    lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    cr_assert(lib != NULL, "dlopen: %s", dlerror());
}

static void teardown(void) {
    if (lib) dlclose(lib);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", workdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", workdir);
}

static void *sym(const char *name) {
    void *p = dlsym(lib, name);
    cr_assert(p != NULL, "no symbol %s", name);
    return p;
}

static loop_fn loop_of(const char *prefix, const char *fname) {
    char name[64];
    snprintf(name, sizeof name, "%s%s", prefix, fname);
    return (loop_fn)(uintptr_t)sym(name);
}

static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static long points(void) {
    const char *p = getenv("KF_PRELUDE_POINTS");
    long n = p ? atol(p) : 0;
    return n > 1000 ? n : 1000000;
}

/* ---- accuracy sweeps ---- */

typedef struct acc {
    const char *name;
    double (*ref)(double);
    int absolute;      /* bound on |got - want| instead of the relative error */
    double bound;      /* relative (normal-range results) or absolute error bound */
    double tiny_abs;   /* allowed |got - want| where |want| < FLT_MIN (relative mode) */
    /* results */
    double worst, worst_x, worst_ulp, worst_ulp_x;
    long checked, failures;
    char first_failure[200];
} acc;

static void fail_note(acc *a, float x, float got, double want) {
    if (a->failures++ == 0)
        snprintf(a->first_failure, sizeof a->first_failure, "%s(%a = %.9g) = %a (%.9g), want %.17g", a->name,
                 (double)x, (double)x, (double)got, (double)got, want);
}

static void check_values(acc *a, const float *x, const float *y, long n) {
    for (long i = 0; i < n; i++) {
        double w = a->ref((double)x[i]);
        float g = y[i];
        a->checked++;
        if (isnan(w)) {
            if (!isnan(g)) fail_note(a, x[i], g, w);
            continue;
        }
        if (isnan(g)) { fail_note(a, x[i], g, w); continue; }
        double wf = (double)(float)w; /* the float the result should round to */
        if (isinf(wf) || isinf(g)) {
            if ((double)g != wf) fail_note(a, x[i], g, w);
            continue;
        }
        double ae = fabs((double)g - w);
        double e;
        if (a->absolute) e = ae;
        else if (fabs(w) >= FLT_MIN) e = ae / fabs(w);
        else {
            if (ae > a->tiny_abs) fail_note(a, x[i], g, w);
            continue;
        }
        if (e > a->worst) { a->worst = e; a->worst_x = x[i]; }
        if (e > a->bound) fail_note(a, x[i], g, w);
        if (!a->absolute && fabs(w) >= FLT_MIN) {
            int ex;
            frexp(w, &ex);
            double ulps = ae / ldexp(1.0, ex - 24);
            if (ulps > a->worst_ulp) { a->worst_ulp = ulps; a->worst_ulp_x = x[i]; }
        }
    }
}

#define CHUNK 65531 /* odd, so that the loops' scalar tails run too */
static float xbuf[CHUNK], ybuf[CHUNK];

static void run_chunk(acc *a, loop_fn f, long k) {
    f(xbuf, ybuf, k);
    check_values(a, xbuf, ybuf, k);
}

/* npts points evenly spaced over [lo, hi] */
static void sweep_linear(acc *a, loop_fn f, double lo, double hi, long npts) {
    long k = 0;
    for (long i = 0; i < npts; i++) {
        xbuf[k++] = (float)(lo + (hi - lo) * ((double)i / (double)(npts - 1)));
        if (k == CHUNK) { run_chunk(a, f, k); k = 0; }
    }
    if (k) run_chunk(a, f, k);
}

/* about npts floats of [lo, hi] (0 < lo < hi), evenly spaced in their bit patterns,
 * with sign s (+1 or -1); every float when npts >= the count in the range */
static void sweep_bits(acc *a, loop_fn f, float lo, float hi, int s, long npts) {
    uint32_t ua = f2u(lo), ub = f2u(hi);
    uint64_t step = (uint64_t)(ub - ua) / (uint64_t)npts + 1;
    long k = 0;
    for (uint64_t u = ua; u <= ub; u += step) {
        float v = u2f((uint32_t)u);
        xbuf[k++] = s < 0 ? -v : v;
        if (k == CHUNK) { run_chunk(a, f, k); k = 0; }
    }
    if (k) run_chunk(a, f, k);
}

static void report(const acc *a, const char *how) {
    if (a->absolute)
        cr_log_info("%-9s %-6s %ld points: max abs error %.3g at x=%.9g\n", a->name, how, a->checked, a->worst,
                    a->worst_x);
    else
        cr_log_info("%-9s %-6s %ld points: max rel error %.3g at x=%.9g, max %.2f ulp at x=%.9g\n", a->name, how,
                    a->checked, a->worst, a->worst_x, a->worst_ulp, a->worst_ulp_x);
    cr_expect_eq(a->failures, 0, "%s (%s): %ld of %ld points out of bound %.3g, first: %s", a->name, how,
                 a->failures, a->checked, a->bound, a->first_failure);
}

/* special inputs and the results they must give, exact (NaN: any NaN) */
typedef struct special { float x, want; } special;

static void check_specials(const char *fname, const special *sp, int n) {
    const char *prefixes[2] = {"kf_t_", "kf_s_"};
    for (int pi = 0; pi < 2; pi++) {
        loop_fn f = loop_of(prefixes[pi], fname);
        /* each special inside a full vector of ordinary values, and alone (scalar tail) */
        for (int i = 0; i < n; i++) {
            float x[17], y[17];
            for (int j = 0; j < 17; j++) x[j] = 0.5f;
            x[i % 8] = sp[i].x;
            x[16] = sp[i].x;
            f(x, y, 17);
            for (int j = 0; j < 17; j += 16) {
                float g = y[j == 0 ? i % 8 : 16];
                int ok = isnan(sp[i].want) ? isnan(g) : (g == sp[i].want && signbit(g) == signbit(sp[i].want));
                cr_expect(ok, "%s%s(%a) = %a, want %a", prefixes[pi], fname, (double)sp[i].x, (double)g,
                          (double)sp[i].want);
            }
        }
    }
}

/* NaNs of every kind: quiet and signalling, both signs, with payloads */
static const uint32_t nan_bits[] = {0x7fc00000u, 0xffc00000u, 0x7fc00001u, 0x7f800001u, 0xffffffffu,
                                    0x7fc12345u, 0xff812345u, 0x7fbfffffu, 0xffc0ffffu};
#define NNAN ((int)(sizeof nan_bits / sizeof nan_bits[0]))

static void check_nans(const char *fname) {
    special sp[NNAN];
    for (int i = 0; i < NNAN; i++) { sp[i].x = u2f(nan_bits[i]); sp[i].want = NAN; }
    check_specials(fname, sp, NNAN);
}

static double sigmoid_ref(double x) { return 1.0 / (1.0 + exp(-x)); }

TestSuite(prelude, .init = setup, .fini = teardown, .timeout = 600);

Test(prelude, shipped_text_is_embedded) {
    extern const char kf_cpu_prelude_text[];
    if (getenv("KF_PRELUDE_FILE")) return;
    char *text = read_text(prelude_path());
    cr_assert(text != NULL);
    cr_expect(strcmp(text, kf_cpu_prelude_text) == 0,
              "the library embeds a different prelude than %s: rebuild", prelude_path());
    free(text);
}

Test(prelude, loops_vectorise_without_libm_calls) {
    char path[300], cmd[400];
    snprintf(path, sizeof path, "%s/vec.txt", workdir);
    char *rep = read_text(path);
    cr_assert(rep != NULL, "no vectoriser report");
    for (int i = 0; i < NFN; i++) {
        char key[64];
        snprintf(key, sizeof key, "k.c:%d:", first_wrapper_line + i);
        const char *p = rep;
        int found = 0;
        while ((p = strstr(p, key)) != NULL) {
            const char *eol = strchr(p, '\n');
            size_t len = eol ? (size_t)(eol - p) : strlen(p);
            char line[512];
            snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
            if (strstr(line, "loop vectorized")) found = 1;
            p += len;
        }
        cr_expect(found, "the loop y[i] = kf_%s(x[i]) (line %d) was not vectorised", fn_names[i],
                  first_wrapper_line + i);
    }
    free(rep);
    /* no call into libm (or anything else) from the math: the only undefined symbols are
     * the C library's memory and OpenMP helpers */
    snprintf(cmd, sizeof cmd, "nm -D --undefined-only %s/k.so > %s/nm.txt", workdir, workdir);
    cr_assert_eq(system(cmd), 0, "nm failed");
    snprintf(path, sizeof path, "%s/nm.txt", workdir);
    char *nm = read_text(path);
    cr_assert(nm != NULL);
    static const char *const libm[] = {"exp", "log", "pow", "tanh", "erf", "fma", "sqrt", "cbrt", "sin", "cos"};
    for (size_t i = 0; i < sizeof libm / sizeof libm[0]; i++)
        cr_expect(strstr(nm, libm[i]) == NULL, "the prelude calls a math library function:\n%s", nm);
    free(nm);
}

Test(prelude, expf) {
    long np = points();
    loop_fn f = loop_of("kf_t_", "expf");
    acc a = {.name = "expf", .ref = exp, .bound = 2e-7, .tiny_abs = 1.2e-38};
    sweep_linear(&a, f, -87.3365, 88.7228, np);
    sweep_linear(&a, f, 88.0, 88.72283172607421875, np / 4);  /* n = 128 */
    sweep_linear(&a, f, -87.34, -86.5, np / 4);                /* bottom of the normal range */
    sweep_linear(&a, f, -120.0, 120.0, np / 4);                /* overflow, underflow */
    sweep_bits(&a, f, FLT_TRUE_MIN, 89.0f, 1, np);
    sweep_bits(&a, f, FLT_TRUE_MIN, 110.0f, -1, np);
    report(&a, "vector");
    acc s = a;
    s.worst = s.worst_ulp = 0;
    s.checked = s.failures = 0;
    sweep_linear(&s, loop_of("kf_s_", "expf"), -100.0, 100.0, np / 8);
    report(&s, "scalar");
    special sp[] = {{INFINITY, INFINITY}, {-INFINITY, 0.0f}, {0.0f, 1.0f}, {-0.0f, 1.0f},
                    {88.72283935546875f, INFINITY}, {89.0f, INFINITY}, {1e30f, INFINITY},
                    {FLT_MAX, INFINITY}, {-FLT_MAX, 0.0f}, {-1e30f, 0.0f}};
    check_specials("expf", sp, (int)(sizeof sp / sizeof sp[0]));
    check_nans("expf");
    /* exp(x) just below overflow is finite */
    float x[2] = {88.72283172607421875f, 88.7228f}, y[2];
    f(x, y, 2);
    cr_expect(isfinite(y[0]) && y[0] > 3.4e38f, "expf(%a) = %a", (double)x[0], (double)y[0]);
    cr_expect(isfinite(y[1]), "expf(%a) = %a", (double)x[1], (double)y[1]);
}

Test(prelude, softmax_exp_and_silu_loops) {
    long np = points() / 4;
    float *x = malloc((size_t)np * sizeof *x), *y = malloc((size_t)np * sizeof *y);
    cr_assert(x && y);
    for (long i = 0; i < np; i++) x[i] = (float)(-40.0 + 80.0 * (double)i / (double)np);
    void (*sm)(const float *, float *, long, float) = (void (*)(const float *, float *, long, float))(uintptr_t)sym("kf_t_softmax_exp");
    sm(x, y, np, 40.0f);
    double worst = 0;
    for (long i = 0; i < np; i++) {
        double w = exp((double)(x[i] - 40.0f));
        double e = fabs(y[i] - w) / w;
        worst = e > worst ? e : worst;
    }
    cr_expect(worst <= 2e-7, "softmax exp: max rel error %g", worst);
    loop_fn silu = (loop_fn)(uintptr_t)sym("kf_t_silu");
    silu(x, y, np);
    worst = 0;
    for (long i = 0; i < np; i++) {
        double w = (double)x[i] * sigmoid_ref(x[i]);
        if (fabs(w) < FLT_MIN) continue;
        double e = fabs(y[i] - w) / fabs(w);
        worst = e > worst ? e : worst;
    }
    cr_expect(worst <= 3e-7, "x * sigmoid(x): max rel error %g", worst);
    free(x);
    free(y);
}

Test(prelude, logf) {
    long np = points();
    loop_fn f = loop_of("kf_t_", "logf");
    acc a = {.name = "logf", .ref = log, .bound = 2e-7};
    sweep_bits(&a, f, FLT_TRUE_MIN, FLT_MAX, 1, np);
    sweep_bits(&a, f, FLT_TRUE_MIN, FLT_MIN, 1, np / 4);   /* subnormals */
    sweep_linear(&a, f, 0.5, 2.0, np);                     /* around 1, where log is small */
    sweep_linear(&a, f, 0.999, 1.001, np / 4);
    sweep_linear(&a, f, 1e-3, 1e3, np / 4);
    report(&a, "vector");
    acc s = a;
    s.worst = s.worst_ulp = 0;
    s.checked = s.failures = 0;
    sweep_bits(&s, loop_of("kf_s_", "logf"), FLT_TRUE_MIN, FLT_MAX, 1, np / 8);
    report(&s, "scalar");
    special sp[] = {{0.0f, -INFINITY}, {-0.0f, -INFINITY}, {INFINITY, INFINITY}, {-INFINITY, NAN},
                    {-1.0f, NAN}, {-FLT_MIN, NAN}, {-FLT_TRUE_MIN, NAN}, {-FLT_MAX, NAN}, {1.0f, 0.0f}};
    check_specials("logf", sp, (int)(sizeof sp / sizeof sp[0]));
    check_nans("logf");
}

Test(prelude, expm1f) {
    long np = points();
    loop_fn f = loop_of("kf_t_", "expm1f");
    /* a subnormal x may lose its last bit (1.4e-45) */
    acc a = {.name = "expm1f", .ref = expm1, .bound = 2e-7, .tiny_abs = 1.5e-45};
    sweep_linear(&a, f, -30.0, 88.7228, np);
    sweep_linear(&a, f, -1.0, 1.0, np / 2);
    sweep_linear(&a, f, 88.0, 88.72283172607421875, np / 8);
    sweep_bits(&a, f, FLT_TRUE_MIN, 100.0f, 1, np);       /* relative accuracy near 0 */
    sweep_bits(&a, f, FLT_TRUE_MIN, 200.0f, -1, np);
    report(&a, "vector");
    acc s = a;
    s.worst = s.worst_ulp = 0;
    s.checked = s.failures = 0;
    sweep_linear(&s, loop_of("kf_s_", "expm1f"), -30.0, 89.0, np / 8);
    report(&s, "scalar");
    special sp[] = {{INFINITY, INFINITY}, {-INFINITY, -1.0f}, {0.0f, 0.0f}, {-1e30f, -1.0f},
                    {1e30f, INFINITY}, {88.72283935546875f, INFINITY}, {-FLT_MAX, -1.0f}, {FLT_MAX, INFINITY}};
    check_specials("expm1f", sp, (int)(sizeof sp / sizeof sp[0]));
    check_nans("expm1f");
}

Test(prelude, log1pf) {
    long np = points();
    loop_fn f = loop_of("kf_t_", "log1pf");
    acc a = {.name = "log1pf", .ref = log1p, .bound = 2e-7};
    sweep_bits(&a, f, FLT_TRUE_MIN, FLT_MAX, 1, np);
    sweep_bits(&a, f, FLT_TRUE_MIN, 1.0f, -1, np);
    sweep_linear(&a, f, -0.999999, 10.0, np);
    sweep_linear(&a, f, -1e-3, 1e-3, np / 4);
    report(&a, "vector");
    acc s = a;
    s.worst = s.worst_ulp = 0;
    s.checked = s.failures = 0;
    sweep_linear(&s, loop_of("kf_s_", "log1pf"), -0.999999, 10.0, np / 8);
    report(&s, "scalar");
    special sp[] = {{-1.0f, -INFINITY}, {-1.5f, NAN}, {-INFINITY, NAN}, {INFINITY, INFINITY},
                    {0.0f, 0.0f}, {-FLT_MAX, NAN}};
    check_specials("log1pf", sp, (int)(sizeof sp / sizeof sp[0]));
    check_nans("log1pf");
}

Test(prelude, tanhf_sigmoidf) {
    long np = points();
    loop_fn f = loop_of("kf_t_", "tanhf");
    acc a = {.name = "tanhf", .ref = tanh, .bound = 2e-7};
    sweep_linear(&a, f, -10.0, 10.0, np);
    sweep_bits(&a, f, FLT_TRUE_MIN, 20.0f, 1, np);
    sweep_bits(&a, f, FLT_TRUE_MIN, 20.0f, -1, np / 4);
    report(&a, "vector");
    acc s = a;
    s.worst = s.worst_ulp = 0;
    s.checked = s.failures = 0;
    sweep_linear(&s, loop_of("kf_s_", "tanhf"), -10.0, 10.0, np / 8);
    report(&s, "scalar");
    special tsp[] = {{INFINITY, 1.0f}, {-INFINITY, -1.0f}, {0.0f, 0.0f}, {1e30f, 1.0f}, {-1e30f, -1.0f},
                     {FLT_MAX, 1.0f}, {-FLT_MAX, -1.0f}, {20.0f, 1.0f}, {-20.0f, -1.0f}};
    check_specials("tanhf", tsp, (int)(sizeof tsp / sizeof tsp[0]));
    check_nans("tanhf");

    f = loop_of("kf_t_", "sigmoidf");
    acc b = {.name = "sigmoidf", .ref = sigmoid_ref, .bound = 2e-7, .tiny_abs = 1.2e-38};
    sweep_linear(&b, f, -100.0, 100.0, np);
    sweep_linear(&b, f, -10.0, 10.0, np);
    sweep_bits(&b, f, FLT_TRUE_MIN, 120.0f, 1, np);
    sweep_bits(&b, f, FLT_TRUE_MIN, 120.0f, -1, np);
    report(&b, "vector");
    acc t = b;
    t.worst = t.worst_ulp = 0;
    t.checked = t.failures = 0;
    sweep_linear(&t, loop_of("kf_s_", "sigmoidf"), -100.0, 100.0, np / 8);
    report(&t, "scalar");
    special ssp[] = {{INFINITY, 1.0f}, {-INFINITY, 0.0f}, {0.0f, 0.5f}, {1e30f, 1.0f}, {-1e30f, 0.0f},
                     {FLT_MAX, 1.0f}, {-FLT_MAX, 0.0f}, {-200.0f, 0.0f}};
    check_specials("sigmoidf", ssp, (int)(sizeof ssp / sizeof ssp[0]));
    check_nans("sigmoidf");
}

static double tanh_softplus_ref(double x) { return tanh(log1p(exp(x))); }

/* tanh(softplus(x)) from one exp, over its domain x <= 20 (the caller takes tanh(x) past
 * softplus's threshold): relative error a few ulp, down to where e^x underflows */
Test(prelude, tanh_softplusf) {
    long np = points();
    acc a = {.name = "tanh_softplusf", .ref = tanh_softplus_ref, .bound = 1e-6, .tiny_abs = 1.2e-38};
    sweep_linear(&a, loop_of("kf_t_", "tanh_softplusf"), -100.0, 20.0, np);
    sweep_linear(&a, loop_of("kf_t_", "tanh_softplusf"), -5.0, 5.0, np);
    sweep_bits(&a, loop_of("kf_t_", "tanh_softplusf"), FLT_TRUE_MIN, 20.0f, 1, np);
    sweep_bits(&a, loop_of("kf_t_", "tanh_softplusf"), FLT_TRUE_MIN, 87.0f, -1, np);
    report(&a, "vector");
    special sp[] = {{-INFINITY, 0.0f}, {0.0f, 0.6f}, {20.0f, 1.0f}, {-200.0f, 0.0f}};
    check_specials("tanh_softplusf", sp, (int)(sizeof sp / sizeof sp[0]));
    check_nans("tanh_softplusf");
}

Test(prelude, erff) {
    long np = points();
    loop_fn f = loop_of("kf_t_", "erff");
    acc a = {.name = "erff", .ref = erf, .absolute = 1, .bound = 2e-7};
    sweep_linear(&a, f, -6.0, 6.0, np);
    sweep_bits(&a, f, FLT_TRUE_MIN, 10.0f, 1, np);
    sweep_bits(&a, f, FLT_TRUE_MIN, 10.0f, -1, np / 4);
    report(&a, "vector");
    acc s = a;
    s.worst = s.worst_ulp = 0;
    s.checked = s.failures = 0;
    sweep_linear(&s, loop_of("kf_s_", "erff"), -6.0, 6.0, np / 8);
    report(&s, "scalar");
    special sp[] = {{INFINITY, 1.0f}, {-INFINITY, -1.0f}, {0.0f, 0.0f}, {1e30f, 1.0f}, {-1e30f, -1.0f},
                    {FLT_MAX, 1.0f}, {-FLT_MAX, -1.0f}, {10.0f, 1.0f}, {-10.0f, -1.0f}};
    check_specials("erff", sp, (int)(sizeof sp / sizeof sp[0]));
    check_nans("erff");
}

Test(prelude, powf) {
    /* exp(b * log(a)): the error grows with |b log a|, so the bound is relative to it */
    void (*pw)(const float *, const float *, float *, long) =
        (void (*)(const float *, const float *, float *, long))(uintptr_t)sym("kf_t_powf");
    enum { N = 4099 };
    static float a[N], b[N], y[N];
    uint64_t seed = 7;
    for (int i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (float)exp(-20.0 + 40.0 * (double)(seed >> 11) / 9007199254740992.0);
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (float)(-4.0 + 8.0 * (double)(seed >> 11) / 9007199254740992.0);
    }
    pw(a, b, y, N);
    for (int i = 0; i < N; i++) {
        double w = pow(a[i], b[i]);
        double tol = 4e-7 * (1.0 + fabs(b[i] * log(a[i])));
        cr_expect(fabs(y[i] - w) <= tol * w, "powf(%g, %g) = %g, want %g", (double)a[i], (double)b[i],
                  (double)y[i], w);
    }
}

Test(prelude, vector_helpers) {
    double (*vsum)(const float *, long) = (double (*)(const float *, long))(uintptr_t)sym("kf_t_vsum");
    double (*vsq)(const float *, long, float) = (double (*)(const float *, long, float))(uintptr_t)sym("kf_t_vsumsqdev");
    float (*vext)(const float *, long, int) = (float (*)(const float *, long, int))(uintptr_t)sym("kf_t_vextreme");
    void (*copy)(float *, const float *, long) = (void (*)(float *, const float *, long))(uintptr_t)sym("kf_t_stream_copy");
    enum { N = 10007 };
    static float x[N + 8], d[N + 8];
    for (long n = 0; n <= N; n = n < 40 ? n + 1 : n * 3 + 1) {
        /* small integers: every partial sum is exact in float, so the results are exact */
        double sum = 0, sq = 0;
        float mx = -INFINITY, mn = INFINITY;
        for (long i = 0; i < n; i++) {
            x[i] = (float)((i * 37) % 101 - 50);
            sum += x[i];
            sq += ((double)x[i] - 3.0) * ((double)x[i] - 3.0);
            mx = x[i] > mx ? x[i] : mx;
            mn = x[i] < mn ? x[i] : mn;
        }
        cr_expect_eq(vsum(x, n), sum, "vsum n=%ld", n);
        cr_expect_eq(vsq(x, n, 3.0f), sq, "vsumsqdev n=%ld", n);
        cr_expect_eq(vext(x, n, 1), mx, "vextreme max n=%ld", n);
        cr_expect_eq(vext(x, n, 0), mn, "vextreme min n=%ld", n);
        if (n > 0) {
            x[n / 2] = NAN;
            cr_expect(isnan(vext(x, n, 1)) && isnan(vext(x, n, 0)), "vextreme NaN n=%ld", n);
        }
        for (int off = 0; off < 3; off++) {
            for (long i = 0; i < n + 8; i++) d[i] = -1.0f;
            copy(d + off, x, n);
            cr_expect(memcmp(d + off, x, (size_t)n * sizeof *x) == 0, "stream_copy n=%ld off=%d", n, off);
            cr_expect(d[off + n] == -1.0f && (off == 0 || d[off - 1] == -1.0f), "stream_copy wrote outside n=%ld", n);
        }
    }
}

/* maximum/minimum as the elementwise templates render them: NaN in either operand (any
 * kind) gives NaN, infinities and signed zeros give what the float64 reference gives, in
 * the vectorised loop (each pair inside a full vector) and the scalar one; and the loop
 * vectorises. */
typedef void (*loop2_fn)(const float *restrict a, const float *restrict b, float *restrict y, long n);
Test(prelude, nan_propagating_maximum_minimum) {
    float vals[NNAN + 8];
    int nv = 0;
    for (int i = 0; i < NNAN; i++) vals[nv++] = u2f(nan_bits[i]);
    const float plain[] = {INFINITY, -INFINITY, 0.0f, -0.0f, 1.5f, -2.25f, FLT_MAX, FLT_TRUE_MIN};
    for (int i = 0; i < 8; i++) vals[nv++] = plain[i];
    for (int m = 0; m < NMM; m++) {
        kf_op op = kf_op_lookup(mm_names[m]);
        for (int pi = 0; pi < 2; pi++) {
            char name[64];
            snprintf(name, sizeof name, "kf_%s_%s", pi ? "s" : "t", mm_names[m]);
            loop2_fn f = (loop2_fn)(uintptr_t)sym(name);
            for (int i = 0; i < nv; i++)
                for (int j = 0; j < nv; j++) {
                    float a[16], b[16], y[16];
                    for (int k = 0; k < 16; k++) a[k] = 0.5f, b[k] = 0.25f;
                    a[i % 16] = vals[i];
                    b[i % 16] = vals[j];
                    f(a, b, y, 16);
                    double want = kf_op_eval(op, NULL, vals[i], vals[j]);
                    float g = y[i % 16];
                    int ok = isnan(want) ? isnan(g) : (g == (float)want && (want != 0 || !signbit(g) == !signbit(want) ||
                                                                              vals[i] == vals[j]));
                    cr_expect(ok, "%s(%a, %a) = %a, want %a", name, (double)vals[i], (double)vals[j], (double)g, want);
                }
        }
    }
    char path[300];
    snprintf(path, sizeof path, "%s/vec.txt", workdir);
    char *rep = read_text(path);
    cr_assert(rep != NULL, "no vectoriser report");
    snprintf(path, sizeof path, "%s/k.c", workdir);
    char *src = read_text(path);
    cr_assert(src != NULL);
    for (int m = 0; m < NMM; m++) { /* the kf_t_ wrapper's line has a vectorised loop */
        char fn[64], key[64];
        snprintf(fn, sizeof fn, "void kf_t_%s(", mm_names[m]);
        const char *at = strstr(src, fn);
        cr_assert(at != NULL, "no %s", fn);
        int line = 1;
        for (const char *c = src; c < at; c++) line += *c == '\n';
        snprintf(key, sizeof key, "k.c:%d:", line);
        int found = 0;
        for (const char *p = strstr(rep, key); p; p = strstr(p + 1, key)) {
            const char *eol = strchr(p, '\n');
            if (memmem(p, eol ? (size_t)(eol - p) : strlen(p), "loop vectorized", 15)) found = 1;
        }
        cr_expect(found, "the loop y[i] = %s(a[i], b[i]) (k.c line %d) was not vectorised", mm_names[m], line);
    }
    free(src);
    free(rep);
}
