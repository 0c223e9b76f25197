/*
 * The input draw (src/verify/draw.c) and the reference a chunk of rows at a time
 * (src/ir/interp_rows.c), issue 30's fast verifier: the draw is checked against a scalar
 * reimplementation of its generator written here from the design note (SplitMix64 of key
 * plus counter, 52-bit uniforms, libm's log, cos, sin and exp2 for the distributions), its
 * distributions against their moments, and both the sets and the reference against
 * themselves on another thread count, bit for bit.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/ir.h"
#include "kforge/verify.h"
#include "verify/verify_int.h"

/* ---- the generator, again, from its description ---- */

static uint64_t t_bits(uint64_t key, uint64_t ctr) {
    uint64_t z = key + (ctr + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t t_block_key(uint64_t base, int64_t k) { return t_bits(base, (uint64_t)k * 0xD1B54A32D192ED03ull); }
/* word w of element e, as a uniform in [0, 1) (its top 52 bits over 2^52) */
static double t_u(uint64_t key, int64_t e, int w) {
    return (double)(t_bits(key, 2 * (uint64_t)e + (uint64_t)w) >> 12) * 0x1p-52;
}
static int t_neg(uint64_t key, int64_t e) { return (int)(t_bits(key, 2 * (uint64_t)e + 1) >> 63); }
/* the set's input key (sets.c) */
static uint64_t t_input_base(uint64_t seed, int set, int input) {
    uint64_t x = seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(set + 1));
    x ^= 0xD1B54A32D192ED03ull * (uint64_t)(input + 1);
    x ^= x >> 29;
    return x * 0xBF58476D1CE4E5B9ull;
}
/* Box-Muller on the pair of e with libm */
static double t_normal(uint64_t key, int64_t e) {
    int64_t p = e & ~(int64_t)1;
    double r = sqrt(-2.0 * log(1.0 - t_u(key, p, 0))), a = 6.283185307179586 * t_u(key, p + 1, 0);
    return e & 1 ? r * sin(a) : r * cos(a);
}

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#define N1 65536

Test(draw, exact_distributions_match_an_independent_generator) {
    static float got[N1], want[N1];
    const double mag = 1e4;
    for (int blk = 0; blk < 3; blk++) {
        uint64_t key = t_block_key(0x1234567ull + (uint64_t)blk, blk * 7);
        int64_t n = blk == 2 ? 1001 : N1; /* a partial, odd-length block too */
        for (int dist = 0; dist < KF_DIST_COUNT; dist++) {
            if (dist != KF_DIST_UNIFORM && dist != KF_DIST_OFFSET && dist != KF_DIST_LARGE) continue;
            kf_verify_draw_block(key, dist, KF_F32, 0, mag, 0, 0, 0, got, NULL, n);
            for (int64_t e = 0; e < n; e++) {
                double u = t_u(key, e, 0), x;
                if (dist == KF_DIST_UNIFORM) x = 2.0 * u - 1.0;
                else if (dist == KF_DIST_OFFSET) x = 256.0 + 2.0 * u - 1.0;
                else x = (t_neg(key, e) ? -1.0 : 1.0) * mag * (0.5 + 0.5 * u);
                want[e] = (float)x;
            }
            cr_assert_eq(fnv(got, (size_t)n * 4), fnv(want, (size_t)n * 4), "%s block %d: checksum differs",
                         kf_verify_dist_name(dist), blk);
            cr_assert_eq(memcmp(got, want, (size_t)n * 4), 0);
        }
    }
    /* and a fixed value, so that a change made here and there alike is still seen */
    kf_verify_draw_block(t_block_key(1, 0), KF_DIST_UNIFORM, KF_F32, 0, 0, 0, 0, 0, got, NULL, 4);
    float fixed[4];
    for (int e = 0; e < 4; e++) fixed[e] = (float)(2.0 * t_u(t_block_key(1, 0), e, 0) - 1.0);
    cr_assert_eq(memcmp(got, fixed, sizeof fixed), 0);
    cr_assert_eq(fnv(fixed, sizeof fixed), 0xd56749491d4abe81ull, "the generator changed: bump KF_VERIFY_SETS_VERSION "
                 "and this checksum (it is %#llx)", (unsigned long long)fnv(fixed, sizeof fixed));
}

Test(draw, transcendental_distributions_match_libm) {
    static float got[N1];
    const double mag = 1e4;
    for (int blk = 0; blk < 2; blk++) {
        uint64_t key = t_block_key(99, blk);
        int64_t n = blk ? 777 : N1;
        for (int dist = KF_DIST_NORMAL; dist <= KF_DIST_HEAVY; dist++) {
            kf_verify_draw_block(key, dist, KF_F32, 0, mag, 0, 0, 0, got, NULL, n);
            for (int64_t e = 0; e < n; e++) {
                double x;
                if (dist == KF_DIST_NORMAL) {
                    x = t_normal(key, e);
                } else if (dist == KF_DIST_WIDE) {
                    x = (t_neg(key, e) ? -1.0 : 1.0) * exp2(-6.0 + 12.0 * t_u(key, e, 0));
                } else {
                    x = t_normal(key, e) / (0.05 + 0.95 * t_u(key, e, 1));
                    x = x > mag ? mag : x < -mag ? -mag : x;
                }
                /* within float32's rounding of values that agree to about 1e-15 */
                cr_assert_leq(fabs((double)got[e] - x), 0x1p-23 * fabs(x) + 1e-300, "%s element %lld: %.9g, libm %.17g",
                              kf_verify_dist_name(dist), (long long)e, got[e], x);
            }
        }
    }
}

/* mean, variance and fourth standardised moment of n doubles */
static void moments(const double *x, int64_t n, double *mean, double *var, double *kurt) {
    double s = 0, s2 = 0, s4 = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] - *mean;
        s2 += d * d;
        s4 += d * d * d * d;
    }
    *var = s2 / (double)n;
    *kurt = s4 / (double)n / (*var * *var);
}

#define NM (64 * N1)

Test(draw, distributions_have_their_moments) {
    float *f = malloc(NM * sizeof *f);
    double *v = malloc(NM * sizeof *v);
    const double mag = 1e4;
    for (int dist = 0; dist < KF_DIST_COUNT; dist++) {
        for (int64_t k = 0; k < NM / N1; k++)
            kf_verify_draw_block(t_block_key(5, k), dist, KF_F32, 0, mag, 0, 0, 0, f + k * N1, v + k * N1, N1);
        double mean, var, kurt, lo = INFINITY, hi = -INFINITY;
        int64_t neg = 0, zero = 0;
        for (int64_t i = 0; i < NM; i++) {
            cr_assert_eq(v[i], (double)f[i], "vals holds the stored value");
            lo = fmin(lo, v[i]);
            hi = fmax(hi, v[i]);
            neg += v[i] < 0;
            zero += v[i] == 0;
        }
        cr_assert_eq(zero, 0, "%s: exact zeros", kf_verify_dist_name(dist));
        moments(v, NM, &mean, &var, &kurt);
        double fneg = (double)neg / NM;
        switch (dist) {
        case KF_DIST_UNIFORM:
            cr_assert(fabs(mean) < 2e-3 && fabs(var - 1.0 / 3) < 2e-3 && lo >= -1 && hi < 1, "uniform %g %g", mean, var);
            cr_assert(fabs(kurt - 1.8) < 0.01, "uniform kurtosis %g", kurt);
            break;
        case KF_DIST_NORMAL: {
            int64_t tail = 0;
            for (int64_t i = 0; i < NM; i++) tail += fabs(v[i]) > 3;
            cr_assert(fabs(mean) < 2e-3 && fabs(var - 1) < 5e-3 && fabs(kurt - 3) < 0.03, "normal %g %g %g", mean, var, kurt);
            cr_assert(fabs((double)tail / NM - 0.0026998) < 3e-4, "normal tail beyond 3: %g", (double)tail / NM);
            break;
        }
        case KF_DIST_WIDE: {
            double *l = malloc(NM * sizeof *l), lm, lv, lk;
            for (int64_t i = 0; i < NM; i++) l[i] = log2(fabs(v[i]));
            moments(l, NM, &lm, &lv, &lk);
            free(l);
            cr_assert(fabs(lm) < 0.02 && fabs(lv - 12) < 0.1 && fabs(lk - 1.8) < 0.02, "wide log2 %g %g %g", lm, lv, lk);
            cr_assert(fabs(fneg - 0.5) < 2e-3 && lo > -64.01 && hi < 64.01, "wide sign %g range %g %g", fneg, lo, hi);
            break;
        }
        case KF_DIST_HEAVY: {
            int64_t big = 0;
            for (int64_t i = 0; i < NM; i++) big += fabs(v[i]) > 5;
            /* P(|z| / d > 5), d uniform in [0.05, 1]: 0.1206 (against 6e-7 for a normal) */
            cr_assert(fabs((double)big / NM - 0.1206) < 2e-3, "heavy tail beyond 5: %g", (double)big / NM);
            cr_assert(lo >= -mag && hi <= mag && fabs(fneg - 0.5) < 2e-3, "heavy range %g %g sign %g", lo, hi, fneg);
            break;
        }
        case KF_DIST_OFFSET:
            cr_assert(fabs(mean - 256) < 2e-3 && fabs(var - 1.0 / 3) < 2e-3 && lo >= 255 && hi <= 257, "offset %g %g",
                      mean, var);
            break;
        case KF_DIST_LARGE: {
            double am = 0;
            for (int64_t i = 0; i < NM; i++) am += fabs(v[i]);
            cr_assert(fabs(am / NM / mag - 0.75) < 1e-3 && fabs(fneg - 0.5) < 2e-3, "large %g %g", am / NM / mag, fneg);
            cr_assert(lo >= -mag && hi <= mag, "large range");
            for (int64_t i = 0; i < NM; i++) cr_assert_geq(fabs(v[i]), mag / 2);
            break;
        }
        }
        /* strictly positive inputs */
        kf_verify_draw_block(t_block_key(6, dist), dist, KF_F32, 1, mag, 0, 0, 0, f, v, N1);
        for (int64_t i = 0; i < N1; i++) cr_assert_geq(v[i], 1e-3, "%s pos", kf_verify_dist_name(dist));
    }
    free(f);
    free(v);
}

Test(draw, narrow_and_integer_types_never_zero) {
    uint16_t *h = malloc(NM * sizeof *h);
    int64_t *q = malloc(N1 * sizeof *q);
    unsigned char *m = malloc(N1);
    kf_dtype narrow[2] = {KF_F16, KF_BF16};
    for (int t = 0; t < 2; t++)
        for (int dist = 0; dist < KF_DIST_COUNT; dist++) {
            for (int64_t k = 0; k < NM / N1; k++)
                kf_verify_draw_block(t_block_key(8, k), dist, narrow[t], 0, 1e4, 0, 0, 0, h + k * N1, NULL, N1);
            for (int64_t i = 0; i < NM; i++)
                cr_assert_neq(kf_verify_load(narrow[t], h, i), 0.0, "%s %s element %lld is zero",
                              kf_dtype_name(narrow[t]), kf_verify_dist_name(dist), (long long)i);
        }
    kf_verify_draw_block(t_block_key(9, 0), KF_DIST_UNIFORM, KF_I64, 0, 1e4, 0, 0, 0, q, NULL, N1);
    for (int64_t i = 0; i < N1; i++) cr_assert(q[i] != 0 && q[i] >= -100 && q[i] <= 100, "i64 %lld", (long long)q[i]);
    kf_verify_draw_block(t_block_key(9, 1), KF_DIST_NORMAL, KF_I64, 0, 1e4, 1, 3, 7, q, NULL, N1);
    int seen[5] = {0};
    for (int64_t i = 0; i < N1; i++) {
        cr_assert(q[i] >= 3 && q[i] <= 7, "range %lld", (long long)q[i]);
        seen[q[i] - 3]++;
    }
    for (int k = 0; k < 5; k++) cr_assert(abs(seen[k] - N1 / 5) < 600, "range value %d drawn %d times", k + 3, seen[k]);
    kf_verify_draw_block(t_block_key(9, 2), KF_DIST_HEAVY, KF_BOOL, 0, 1e4, 0, 0, 0, m, NULL, N1);
    int ones = 0;
    for (int64_t i = 0; i < N1; i++) ones += m[i];
    cr_assert(abs(ones - N1 / 2) < 600, "mask ones %d", ones);
    free(h);
    free(q);
    free(m);
}

/* ---- the sets and the reference on any thread count ---- */

typedef struct snap {
    int nsets, nin, nout;
    void *in[8][4], *ref[8][4];
    float *bound[8][4];
    size_t in_b[4], out_b[4];
} snap;

static void take(kf_verify_ctx *c, snap *s) {
    memset(s, 0, sizeof *s);
    s->nsets = c->nsets;
    s->nin = c->nin;
    s->nout = c->nout;
    for (int k = 0; k < c->nsets; k++) {
        for (int i = 0; i < c->nin; i++) {
            s->in_b[i] = c->in_bytes[i];
            s->in[k][i] = malloc(c->in_bytes[i]);
            memcpy(s->in[k][i], c->sets[k].in[i], c->in_bytes[i]);
        }
        for (int j = 0; j < c->nout; j++) {
            s->out_b[j] = c->out_bytes[j];
            s->ref[k][j] = malloc(c->out_bytes[j]);
            memcpy(s->ref[k][j], c->sets[k].ref[j], c->out_bytes[j]);
            if (c->sets[k].bound[j]) {
                s->bound[k][j] = malloc(c->out_numel[j] * sizeof(float));
                memcpy(s->bound[k][j], c->sets[k].bound[j], c->out_numel[j] * sizeof(float));
            }
        }
    }
}

static void drop(snap *s) {
    for (int k = 0; k < 8; k++)
        for (int i = 0; i < 4; i++) free(s->in[k][i]), free(s->ref[k][i]), free(s->bound[k][i]);
}

static void sets_at(const char *task, int threads, snap *s, kf_graph **gout) {
    kf_graph *g;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "%s", err.msg);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.seed = 4242;
    o.nsets = 6;
    omp_set_num_threads(threads);
    kf_verify_ctx *c;
    cr_assert_eq(kf_verify_ctx_new(g, &o, &c, &err), KF_OK, "%s", err.msg);
    take(c, s);
    kf_verify_ctx_free(c);
    if (gout) *gout = g;
    else kf_graph_free(g);
}

static void same_sets(const char *task) {
    snap a, b;
    kf_graph *g;
    sets_at(task, 1, &a, &g);
    sets_at(task, 3, &b, NULL);
    for (int k = 0; k < a.nsets; k++) {
        for (int i = 0; i < a.nin; i++) cr_assert_eq(memcmp(a.in[k][i], b.in[k][i], a.in_b[i]), 0, "set %d input %d", k, i);
        for (int j = 0; j < a.nout; j++) {
            cr_assert_eq(memcmp(a.ref[k][j], b.ref[k][j], a.out_b[j]), 0, "set %d reference %d", k, j);
            cr_assert_eq(!a.bound[k][j], !b.bound[k][j]);
            if (a.bound[k][j])
                cr_assert_eq(memcmp(a.bound[k][j], b.bound[k][j], a.out_b[j] / 4 * sizeof(float)), 0, "set %d bound %d", k, j);
        }
    }
    /* set 0 (uniform) of input 0 is the independent generator's, block by block */
    const kf_value *x0 = &g->values[g->inputs[0]];
    if (x0->dtype == KF_F32 && !x0->has_range) {
        int64_t n = (int64_t)(a.in_b[0] / 4);
        const float *f = a.in[0][0];
        uint64_t base = t_input_base(4242, 0, 0);
        for (int64_t e = 0; e < n; e++) {
            float w = (float)(2.0 * t_u(t_block_key(base, e / N1), e % N1, 0) - 1.0);
            cr_assert_eq(f[e], w, "set 0 element %lld: %.9g, expected %.9g", (long long)e, f[e], w);
        }
    }
    kf_graph_free(g);
    drop(&a);
    drop(&b);
}

Test(draw, sets_and_references_are_the_same_on_any_thread_count) {
    same_sets("task sm\ninput x: f32[300, 1000]\noutput y = softmax(x, axis=1)\n");
    same_sets("task ln\ninput x: f32[6, 40, 1000]\ninput w: f32[40, 1000]\ninput b: f32[40, 1000]\n"
              "output y = layer_norm(x, w, b, axes=[1, 2], eps=1e-5)\n");
    same_sets("task chain\ninput x: f32[500, 700]\ninput c: f32[700]\n"
              "a = log_softmax(x * c, axis=1)\nb = sum(a, axes=1, keepdim=true)\noutput y = a - b\noutput z = max(a, axes=1)\n");
    same_sets("task red\ninput x: f32[3, 200000]\noutput y = sum(x, axes=1)\n");
    same_sets("task pw\ninput x: f32[300000]\noutput y = x * sigmoid(x)\n");
}

/* ---- the rows path against single rows ---- */

static void run_graph(const char *task, int threads, double **in, double **out, double **bnd, kf_graph **gout) {
    kf_graph *g;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "%s", err.msg);
    omp_set_num_threads(threads);
    cr_assert_eq(kf_interp_run_bounds(g, (const double *const *)in, out, bnd, &err), KF_OK, "%s", err.msg);
    *gout = g;
}

Test(draw, rows_in_chunks_are_the_rows_alone) {
    /* a norm, a softmax and a row sum over 1000-element rows: 400 rows make four chunks */
    const int R = 400, C = 1000;
    char big[512], one[512];
    const char *body = "output y = layer_norm(x, w, b, axes=1, eps=1e-5)\na = softmax(y, axis=1)\n"
                       "output z = a * sum(a * x, axes=1, keepdim=true)\n";
    snprintf(big, sizeof big, "task rows\ninput x: f32[%d, %d]\ninput w: f32[%d]\ninput b: f32[%d]\n%s", R, C, C, C, body);
    snprintf(one, sizeof one, "task row\ninput x: f32[1, %d]\ninput w: f32[%d]\ninput b: f32[%d]\n%s", C, C, C, body);
    double *x = malloc(sizeof(double) * R * C), w[1000], b[1000];
    for (int i = 0; i < R * C; i++) x[i] = 256.0 + 2.0 * t_u(17, i, 0) - 1.0; /* an offset: bounds matter */
    for (int i = 0; i < C; i++) w[i] = 0.5 + t_u(18, i, 0), b[i] = t_u(19, i, 0) - 0.5;
    double *out[2][2], *bnd[2][2];
    kf_graph *g = NULL;
    for (int t = 0; t < 2; t++) {
        for (int j = 0; j < 2; j++) out[t][j] = malloc(sizeof(double) * R * C), bnd[t][j] = malloc(sizeof(double) * R * C);
        double *in[3] = {x, w, b};
        if (g) kf_graph_free(g);
        run_graph(big, t ? 3 : 1, in, out[t], bnd[t], &g);
    }
    kf_graph_free(g);
    for (int j = 0; j < 2; j++) {
        cr_assert_eq(memcmp(out[0][j], out[1][j], sizeof(double) * R * C), 0, "output %d: 1 thread vs 3", j);
        cr_assert_eq(memcmp(bnd[0][j], bnd[1][j], sizeof(double) * R * C), 0, "bound %d: 1 thread vs 3", j);
    }
    double yo[2][1000], bo[2][1000];
    for (int r = 0; r < R; r += 133) {
        double *in[3] = {x + r * C, w, b}, *o[2] = {yo[0], yo[1]}, *e[2] = {bo[0], bo[1]};
        run_graph(one, 2, in, o, e, &g);
        kf_graph_free(g);
        for (int j = 0; j < 2; j++) {
            cr_assert_eq(memcmp(yo[j], out[0][j] + r * C, sizeof(double) * C), 0, "row %d output %d", r, j);
            cr_assert_eq(memcmp(bo[j], bnd[0][j] + r * C, sizeof(double) * C), 0, "row %d bound %d", r, j);
        }
        int nz = 0;
        for (int k = 0; k < C; k++) nz += bo[0][k] > 0;
        cr_assert_gt(nz, 0, "the norm's bound is there");
    }
    for (int t = 0; t < 2; t++)
        for (int j = 0; j < 2; j++) free(out[t][j]), free(bnd[t][j]);
    free(x);
}
