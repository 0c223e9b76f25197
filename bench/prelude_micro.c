/*
 * Microbenchmark of the CPU candidates' math prelude (src/synth/cpu_prelude.txt).
 *
 * Design: each prelude under test (the shipped text, read from a file, and the previous
 * version, kept below as a string) is pasted in front of a set of one-line loops
 * `y[i] = EXPR(x[i])` written exactly as the elementwise template writes its bodies
 * (kf_expf, x * kf_sigmoidf, the silu template's x / (1 + kf_expf(-x)), gelu, ...). The
 * file is compiled with the candidates' flags by the system compiler into a shared object
 * and loaded with dlopen, so the code timed is the code a candidate runs. Arrays are
 * L1-resident (default 2048 floats in, 2048 out, both page-aligned as large buffers are:
 * an output a few cache lines ahead of the input modulo 4 KiB makes loads wait on older
 * stores to "the same" address and costs up to 2x on cheap loops). Each loop is timed
 * single-threaded as the minimum over many short samples (10 calls), the samples of all
 * loops, old and new, interleaved round-robin over the run, so that a busy neighbour on
 * the host inflates no loop more than another. The core clock is estimated with a chain
 * of dependent integer adds (one per cycle on every x86 core since the P6), so
 * cycles/element does not trust the TSC.
 *
 * Build: cc -O2 -o prelude_micro bench/prelude_micro.c -ldl
 * Usage: prelude_micro [-n N] [-s SAMPLES] [-r CALLS] [-g GHZ] [-f FLAGS] [-k]
 *                      [NEW_PRELUDE [OLD_PRELUDE]]
 *   NEW_PRELUDE defaults to src/synth/cpu_prelude.txt (run from the source root);
 *   OLD_PRELUDE defaults to the copy embedded below (the prelude before the fast math
 *   rewrite). -g overrides the measured clock, -f the compiler flags, -k keeps the
 *   generated sources and objects in /tmp (their names are printed).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_FLAGS "-O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math -fPIC -shared"

/* The math part of the prelude as it was before the rewrite (its vector helpers are not
 * timed here), kept verbatim so that every run compares against the same baseline. */
static const char old_prelude[] =
    "/* kforge CPU prelude: branch-free float math the compiler can vectorise. */\n"
    "#include <stdint.h>\n"
    "#include <string.h>\n"
    "#include <stdlib.h>\n"
    "#include <math.h>\n"
    "#include <omp.h>\n"
    "#ifndef KF_VW\n"
    "#define KF_VW 8\n"
    "#endif\n"
    "typedef float kf_vf __attribute__((vector_size(KF_VW * 4)));\n"
    "typedef int32_t kf_vi __attribute__((vector_size(KF_VW * 4)));\n"
    "static inline uint32_t kf_f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }\n"
    "static inline float kf_u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }\n"
    "static inline float kf_expf(float x) {\n"
    "    /* clamps written as (c > x ? c : x) so they map to maxps/minps and keep a NaN */\n"
    "    float xc = -87.33654475f > x ? -87.33654475f : x;\n"
    "    xc = 88.72283905f < xc ? 88.72283905f : xc;\n"
    "    float t = xc * 1.44269504088896341f + 12582912.0f;\n"
    "    float n = t - 12582912.0f;\n"
    "    float r = xc - n * 0.693145751953125f;\n"
    "    r = r - n * 1.42860682030941723212e-6f;\n"
    "    float p = 1.9875691500e-4f;\n"
    "    p = p * r + 1.3981999507e-3f;\n"
    "    p = p * r + 8.3334519073e-3f;\n"
    "    p = p * r + 4.1665795894e-2f;\n"
    "    p = p * r + 1.6666665459e-1f;\n"
    "    p = p * r + 5.0000001201e-1f;\n"
    "    p = p * r * r + r + 1.0f;\n"
    "    /* 2^n from the integer in t's low mantissa bits; n = 128 is split as 2 * 2^127 */\n"
    "    int32_t ni = (int32_t)(kf_f2u(t) - kf_f2u(12582912.0f));\n"
    "    int32_t big = ni > 127;\n"
    "    p = big ? p + p : p;\n"
    "    ni = big ? 127 : ni;\n"
    "    float y = p * kf_u2f((uint32_t)(ni + 127) << 23);\n"
    "    return x > 88.72283905f ? INFINITY : y;\n"
    "}\n"
    "static inline float kf_logf(float x) {\n"
    "    float xs = x < 1.17549435e-38f ? x * 8388608.0f : x;\n"
    "    float eadj = x < 1.17549435e-38f ? -23.0f : 0.0f;\n"
    "    uint32_t u = kf_f2u(xs);\n"
    "    int32_t e = (int32_t)((u >> 23) & 0xffu) - 127;\n"
    "    float m = kf_u2f((u & 0x007fffffu) | 0x3f800000u);\n"
    "    float big = m > 1.41421356f ? 1.0f : 0.0f;\n"
    "    m = big > 0.0f ? m * 0.5f : m;\n"
    "    float ef = (float)e + big + eadj;\n"
    "    float f = m - 1.0f;\n"
    "    float s = f / (2.0f + f);\n"
    "    float s2 = s * s;\n"
    "    float hf = 0.5f * f * f;\n"
    "    float R = s2 * (0.6666666666666735130f + s2 * (0.3999999999940941908f + s2 * (0.2857142874366239149f + s2 * 0.2222219843214978396f)));\n"
    "    float logm = f - (hf - s * (hf + R));\n"
    "    float y = ef * 0.693145751953125f + (logm + ef * 1.42860682030941723212e-6f);\n"
    "    y = x == 0.0f ? -INFINITY : y;\n"
    "    y = x < 0.0f ? NAN : y;\n"
    "    y = x == INFINITY ? INFINITY : y;\n"
    "    y = x != x ? x : y;\n"
    "    return y;\n"
    "}\n"
    "static inline float kf_expm1f(float x) {\n"
    "    float x2 = x * x;\n"
    "    float p = x + x2 * (0.5f + x * (1.6666667163e-1f + x * (4.1666667908e-2f + x * (8.3333337680e-3f + x * (1.3888889225e-3f + x * 1.9841270114e-4f)))));\n"
    "    float y = kf_expf(x) - 1.0f;\n"
    "    float ax = x < 0.0f ? -x : x;\n"
    "    return ax < 0.3f ? p : y;\n"
    "}\n"
    "static inline float kf_log1pf(float x) {\n"
    "    float u = 1.0f + x;\n"
    "    float d = u - 1.0f;\n"
    "    float r = kf_logf(u) * (x / (d == 0.0f ? 1.0f : d));\n"
    "    r = d == 0.0f ? x : r;\n"
    "    r = u == INFINITY ? INFINITY : r;\n"
    "    return r;\n"
    "}\n"
    "static inline float kf_tanhf(float x) {\n"
    "    float ax = x < 0.0f ? -x : x;\n"
    "    float e = kf_expm1f(-2.0f * ax);\n"
    "    float t = -e / (e + 2.0f);\n"
    "    t = ax > 9.0f ? 1.0f : t;\n"
    "    t = x < 0.0f ? -t : t;\n"
    "    return x != x ? x : t;\n"
    "}\n"
    "static inline float kf_sigmoidf(float x) { return 1.0f / (1.0f + kf_expf(-x)); }\n"
    "static inline float kf_erff(float x) {\n"
    "    float ax = x < 0.0f ? -x : x;\n"
    "    float t = 1.0f / (1.0f + 0.5f * ax);\n"
    "    float z = -ax * ax - 1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f +\n"
    "              t * (-0.18628806f + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f +\n"
    "              t * (-0.82215223f + t * 0.17087277f))))))));\n"
    "    float r = 1.0f - t * kf_expf(z);\n"
    "    float x2 = x * x;\n"
    "    float small = ax * (1.1283791671f + x2 * (-0.3761263890f + x2 * (0.1128379167f + x2 * (-0.0268661706f + x2 * 0.0052239776f))));\n"
    "    r = ax < 0.5f ? small : r;\n"
    "    r = x < 0.0f ? -r : r;\n"
    "    return x != x ? x : r;\n"
    "}\n"
    "static inline float kf_powf(float a, float b) { return kf_expf(b * kf_logf(a)); }\n"
    "\n"
    ;

typedef void (*loop_fn)(const float *restrict x, float *restrict y, long n);

/* One timed loop: its body as the templates write it, and the input range. */
typedef struct bench_case {
    const char *name;
    const char *expr;  /* in terms of x */
    float lo, hi;      /* x uniform in [lo, hi] */
    int logscale;      /* x = exp(uniform in [log lo, log hi]) */
} bench_case;

static const bench_case cases[] = {
    {"copy", "x", -1, 1, 0},
    {"div 1/(1+x)", "1.0f / (1.0f + x)", 0, 10, 0},
    {"expf", "kf_expf(x)", -20, 20, 0},
    {"expf(x-m) softmax", "kf_expf(x - 3.0f)", -20, 3, 0},
    {"sigmoidf", "kf_sigmoidf(x)", -12, 12, 0},
    {"x*sigmoidf(x)", "x * kf_sigmoidf(x)", -12, 12, 0},
    {"silu tpl x/(1+exp(-x))", "x / (1.0f + kf_expf(-x))", -12, 12, 0},
    {"tanhf", "kf_tanhf(x)", -6, 6, 0},
    {"gelu_tanh tpl", "0.5f * x * (1.0f + kf_tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)))", -6, 6, 0},
    {"erff", "kf_erff(x)", -4, 4, 0},
    {"gelu tpl", "0.5f * x * (1.0f + kf_erff(x * 0.70710678118654752f))", -6, 6, 0},
    {"logf", "kf_logf(x)", 1e-6f, 1e6f, 1},
    {"log1pf", "kf_log1pf(x)", -0.9f, 10, 0},
    {"softplus tpl", "(x * ((float)1) > ((float)20) ? x : kf_log1pf(kf_expf(x * ((float)1))) / ((float)1))", -20, 20, 0},
    {"expm1f", "kf_expm1f(x)", -10, 10, 0},
    {"elu tpl", "(x > 0.0f ? x : ((float)1) * kf_expm1f(x))", -10, 10, 0},
    {"selu tpl", "1.0507009873554804934f * (x > 0.0f ? x : 1.6732632423543772848f * kf_expm1f(x))", -10, 10, 0},
    {"powf", "kf_powf(x, 1.7f)", 1e-3f, 1e3f, 1},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Core clock in GHz from a chain of dependent adds (latency 1 cycle), best of 20. */
static double measure_ghz(void) {
    double best = 1e30;
    for (int s = 0; s < 20; s++) {
        uint64_t v = 0;
        double t0 = now_s();
        for (int k = 0; k < 2000; k++)
            __asm__ volatile(".rept 1000\n\tadd $1, %0\n\t.endr" : "+r"(v));
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return 2e6 / best / 1e9;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) { fclose(f); free(s); return NULL; }
    s[n] = 0;
    fclose(f);
    return s;
}

/* Write prelude + one loop per case to a temporary file, compile it, dlopen it and fill
 * fns. Returns the dlopen handle or NULL (message printed). */
static void *build(const char *prelude, const char *tag, const char *flags, int keep, loop_fn *fns) {
    char src[256], so[256], cmd[1024];
    snprintf(src, sizeof src, "/tmp/prelude_micro_%s_%d.c", tag, (int)getpid());
    snprintf(so, sizeof so, "/tmp/prelude_micro_%s_%d.so", tag, (int)getpid());
    FILE *f = fopen(src, "w");
    if (!f) { perror(src); return NULL; }
    fputs("#define KF_VW 8\n", f);
    fputs(prelude, f);
    for (int c = 0; c < NCASES; c++)
        fprintf(f, "\nvoid kf_bench_%d(const float *restrict xs, float *restrict y, long n) {\n"
                   "    for (long i = 0; i < n; i++) { const float x = xs[i]; y[i] = %s; }\n}\n",
                c, cases[c].expr);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc %s %s -o %s -lm", flags, src, so);
    if (system(cmd) != 0) { fprintf(stderr, "compile failed: %s\n", cmd); return NULL; }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen %s: %s\n", so, dlerror()); return NULL; }
    for (int c = 0; c < NCASES; c++) {
        char sym[32];
        snprintf(sym, sizeof sym, "kf_bench_%d", c);
        fns[c] = (loop_fn)(uintptr_t)dlsym(h, sym);
        if (!fns[c]) { fprintf(stderr, "no %s in %s\n", sym, so); return NULL; }
    }
    if (keep) printf("# %s: %s -> %s\n", tag, src, so);
    else { unlink(src); unlink(so); }
    return h;
}

/* one sample: seconds per call over `calls` calls in a row (after one warm-up call) */
static double time_sample(loop_fn fn, const float *x, float *y, long n, int calls) {
    fn(x, y, n);
    double t0 = now_s();
    for (int k = 0; k < calls; k++) fn(x, y, n);
    return (now_s() - t0) / calls;
}

/* the input of case c: n values in its range, from a fixed seed */
static void fill_input(const bench_case *bc, float *x, long n) {
    uint64_t seed = 12345;
    for (long i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(seed >> 11) / 9007199254740992.0;
        x[i] = bc->logscale ? (float)exp(log(bc->lo) + u * (log(bc->hi) - log(bc->lo)))
                            : (float)(bc->lo + u * (bc->hi - bc->lo));
    }
}

int main(int argc, char **argv) {
    long n = 2048;
    int samples = 200, calls = 10, keep = 0;
    double ghz = 0;
    const char *flags = DEFAULT_FLAGS;
    const char *paths[2] = {"src/synth/cpu_prelude.txt", NULL};
    int npaths = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atol(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) samples = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) calls = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-g") && i + 1 < argc) ghz = atof(argv[++i]);
        else if (!strcmp(argv[i], "-f") && i + 1 < argc) flags = argv[++i];
        else if (!strcmp(argv[i], "-k")) keep = 1;
        else if (argv[i][0] != '-' && npaths < 2) paths[npaths++] = argv[i];
        else {
            fprintf(stderr, "usage: %s [-n N] [-s SAMPLES] [-r CALLS] [-g GHZ] [-f FLAGS] [-k] [NEW [OLD]]\n", argv[0]);
            return 2;
        }
    }
    if (n < 1 || samples < 1 || calls < 1) { fprintf(stderr, "bad -n/-s/-r\n"); return 2; }
    char *newtext = read_file(paths[0]);
    if (!newtext) { fprintf(stderr, "cannot read %s\n", paths[0]); return 1; }
    char *oldtext = paths[1] ? read_file(paths[1]) : NULL;
    if (paths[1] && !oldtext) { fprintf(stderr, "cannot read %s\n", paths[1]); return 1; }
    static loop_fn fold[NCASES], fnew[NCASES];
    void *hold = build(oldtext ? oldtext : old_prelude, "old", flags, keep, fold);
    void *hnew = build(newtext, "new", flags, keep, fnew);
    if (!hold || !hnew) return 1;

    /* one input array per case, all outputs into one array; every array page-aligned */
    size_t stride = ((size_t)n * sizeof(float) + 4095) / 4096 * 4096;
    char *mem = aligned_alloc(4096, stride * (NCASES + 1));
    if (!mem) return 1;
    float *y = (float *)mem;
    for (int c = 0; c < NCASES; c++) fill_input(&cases[c], (float *)(mem + stride * (size_t)(c + 1)), n);
    int ghz_given = ghz > 0;
    if (!ghz_given) ghz = measure_ghz();
    printf("# prelude_micro: n=%ld floats (L1), min of %d interleaved samples x %d calls, 1 thread, clock %.2f GHz%s\n",
           n, samples, calls, ghz, ghz_given ? " (given)" : " (dependent-add chain)");
    printf("# old=%s new=%s\n", paths[1] ? paths[1] : "(embedded pre-rewrite prelude)", paths[0]);
    printf("%-24s %10s %10s %10s %10s %8s\n", "loop", "old c/el", "new c/el", "old ns/el", "new ns/el", "speedup");
    static double best[2][NCASES];
    for (int c = 0; c < NCASES; c++) best[0][c] = best[1][c] = 1e30;
    for (int sample = 0; sample < samples; sample++)
        for (int c = 0; c < NCASES; c++)
            for (int v = 0; v < 2; v++) {
                const float *x = (const float *)(mem + stride * (size_t)(c + 1));
                double t = time_sample(v ? fnew[c] : fold[c], x, y, n, calls);
                if (t < best[v][c]) best[v][c] = t;
            }
    for (int c = 0; c < NCASES; c++) {
        double ono = best[0][c] / (double)n * 1e9, nno = best[1][c] / (double)n * 1e9;
        printf("%-24s %10.3f %10.3f %10.3f %10.3f %7.2fx\n", cases[c].name, ono * ghz, nno * ghz, ono, nno,
               best[0][c] / best[1][c]);
    }
    dlclose(hold);
    dlclose(hnew);
    free(mem);
    free(newtext);
    free(oldtext);
    return 0;
}
