/*
 * The input distributions (verify_int.h, "draw.c"): a block of an input set drawn from its
 * key by a counter-based generator, in loops without a call or a branch per element.
 *
 * Design note. Element e of a block takes its random bits from a counter, not from a
 * sequence: word w of element e is the SplitMix64 finaliser of key + (2e + w + 1) * gamma,
 * so any element can be drawn alone (a redraw of an exact zero, a test's reimplementation)
 * and a batch of elements is the same arithmetic on independent lanes. The transcendental
 * functions of the distributions (the logarithm and sine/cosine of Box-Muller, the power of
 * two of the wide set) are polynomials here, written as straight-line arithmetic that the
 * compiler vectorises; they are accurate to a few units in the last place of a double, far
 * below the float32 (or narrower) rounding every drawn value then gets. Box-Muller uses
 * both of its outputs: elements 2p and 2p + 1 are the cosine and sine of one pair. The
 * values depend only on (key, element), never on the thread that draws the block. The
 * distributions themselves are those of verify_int.h, unchanged; which values a seed gives
 * is KF_VERIFY_SETS_VERSION 2's (the xoshiro sequence with one Box-Muller output per call
 * was version 1).
 */
#include "verify/verify_int.h"

#include <math.h>
#include <string.h>

#define GAMMA 0x9E3779B97F4A7C15ull
/* Elements per batch of a block's loops (the batch's values live on the stack). */
#define BATCH 256

uint64_t kf_verify_draw_bits(uint64_t key, uint64_t ctr) {
    uint64_t z = key + (ctr + 1) * GAMMA;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t kf_verify_block_key(uint64_t base, int64_t block) {
    return kf_verify_draw_bits(base, (uint64_t)block * 0xD1B54A32D192ED03ull);
}

/* Uniform in [0, 1) from the top 52 bits of b: the bits as the mantissa of a double in
 * [1, 2), less one (no integer-to-double conversion, which the vector units lack). */
static inline double unit52(uint64_t b) {
    uint64_t u = 0x3FF0000000000000ull | (b >> 12);
    double d;
    memcpy(&d, &u, 8);
    return d - 1.0;
}

/* ln(u) for u in (0, 1]: u = m 2^k with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s) with
 * s = (m - 1) / (m + 1), |s| <= 0.172, by its series to s^23 (the next term is under
 * 1e-19 of the result). m and k come from the bits alone (the bits less those of
 * sqrt(1/2) carry k in the exponent field), k as a double by the 2^52 trick: integer
 * arithmetic that vectorises, without a branch. */
static inline double ln01(double u) {
    const uint64_t half_sqrt2 = 0x3FE6A09E667F3BCDull;
    uint64_t b;
    memcpy(&b, &u, 8);
    uint64_t t = b - half_sqrt2;
    uint64_t mb = (t & 0x000FFFFFFFFFFFFFull) + half_sqrt2;
    /* k = t's exponent field, signed (t wraps below zero for u < sqrt(1/2)) */
    uint64_t kb = 0x4330000000000000ull + (((t >> 52) + 2048) & 4095); /* 2^52 + k + 2048 */
    double m, kd;
    memcpy(&m, &mb, 8);
    memcpy(&kd, &kb, 8);
    kd -= 4503599627372544.0; /* 2^52 + 2048 */
    double s = (m - 1.0) / (m + 1.0), s2 = s * s;
    double p = 1.0 / 23;
    p = p * s2 + 1.0 / 21;
    p = p * s2 + 1.0 / 19;
    p = p * s2 + 1.0 / 17;
    p = p * s2 + 1.0 / 15;
    p = p * s2 + 1.0 / 13;
    p = p * s2 + 1.0 / 11;
    p = p * s2 + 1.0 / 9;
    p = p * s2 + 1.0 / 7;
    p = p * s2 + 1.0 / 5;
    p = p * s2 + 1.0 / 3;
    p = p * s2 + 1.0;
    return kd * 0.6931471805599453 + 2.0 * s * p;
}

/* cos(2 pi t) and sin(2 pi t) for t in [0, 1): the quadrant q = round(4t), x = (4t - q)
 * pi/2 in [-pi/4, pi/4], then Taylor polynomials to x^16 and x^17 (error under 1e-17). */
static inline void sincos2pi(double t, double *c, double *s) {
    double t4 = 4.0 * t;
    int32_t q = (int32_t)(t4 + 0.5); /* t4 >= 0: truncation is floor */
    double x = (t4 - (double)q) * 1.5707963267948966, x2 = x * x;
    double cp = 1.0 / 20922789888000.0; /* 1/16! */
    cp = cp * x2 - 1.0 / 87178291200.0;
    cp = cp * x2 + 1.0 / 479001600.0;
    cp = cp * x2 - 1.0 / 3628800.0;
    cp = cp * x2 + 1.0 / 40320.0;
    cp = cp * x2 - 1.0 / 720.0;
    cp = cp * x2 + 1.0 / 24.0;
    cp = cp * x2 - 0.5;
    cp = cp * x2 + 1.0;
    double sp = 1.0 / 355687428096000.0; /* 1/17! */
    sp = sp * x2 - 1.0 / 1307674368000.0;
    sp = sp * x2 + 1.0 / 6227020800.0;
    sp = sp * x2 - 1.0 / 39916800.0;
    sp = sp * x2 + 1.0 / 362880.0;
    sp = sp * x2 - 1.0 / 5040.0;
    sp = sp * x2 + 1.0 / 120.0;
    sp = sp * x2 - 1.0 / 6.0;
    sp = sp * x2 + 1.0;
    sp *= x;
    /* the angle is q pi/2 + x: rotate (cos x, sin x) by q quarter turns */
    /* (as bit masks, so that the loop stays free of branches) */
    uint64_t odd = 0 - (uint64_t)(q & 1), neg_c = (uint64_t)((q + 1) & 2) << 62, neg_s = (uint64_t)(q & 2) << 62;
    uint64_t cb, sb;
    memcpy(&cb, &cp, 8);
    memcpy(&sb, &sp, 8);
    uint64_t rc = ((cb & ~odd) | (sb & odd)) ^ neg_c, rs = ((sb & ~odd) | (cb & odd)) ^ neg_s;
    memcpy(c, &rc, 8);
    memcpy(s, &rs, 8);
}

/* 2^t for t in [-6, 6]: 2^floor(t) exactly, times e^(f ln 2) for f in [0, 1) by its
 * Taylor series to f^17 (error under 1e-17). */
static inline double exp2_pm6(double t) {
    int32_t i = (int32_t)(t + 6.0) - 6;
    double f = (t - (double)i) * 0.6931471805599453;
    double p = 1.0 / 355687428096000.0;
    p = p * f + 1.0 / 20922789888000.0;
    p = p * f + 1.0 / 1307674368000.0;
    p = p * f + 1.0 / 87178291200.0;
    p = p * f + 1.0 / 6227020800.0;
    p = p * f + 1.0 / 479001600.0;
    p = p * f + 1.0 / 39916800.0;
    p = p * f + 1.0 / 3628800.0;
    p = p * f + 1.0 / 362880.0;
    p = p * f + 1.0 / 40320.0;
    p = p * f + 1.0 / 5040.0;
    p = p * f + 1.0 / 720.0;
    p = p * f + 1.0 / 120.0;
    p = p * f + 1.0 / 24.0;
    p = p * f + 1.0 / 6.0;
    p = p * f + 0.5;
    p = p * f + 1.0;
    p = p * f + 1.0;
    uint64_t sb = (uint64_t)(int64_t)(i + 1023) << 52;
    double sc;
    memcpy(&sc, &sb, 8);
    return p * sc;
}

/* The values of elements e0 .. e0 + n - 1 (n <= BATCH, e0 even) of the block keyed key,
 * as doubles before rounding to the dtype: the distributions of verify_int.h. */
/* Cloned for AVX2 where the machine has it: four 64-bit lanes for the generator's integer
 * arithmetic (baseline x86-64 has no vector 64-bit multiply). The clones compute the same
 * bits: AVX2 brings no fused multiply-add, and this file is compiled without contraction
 * and without errno from sqrt (CMakeLists.txt), so both are the same IEEE operations. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static void batch_values(uint64_t key, int dist, int pos, double mag, int64_t e0, int n, double *x) {
    double u[BATCH], v[BATCH];
    /* an even count: the last pair's odd element too, when n is odd (its uniform gives the
     * angle of the even element's normal) */
    int m = n + (n & 1);
    for (int i = 0; i < m; i++) u[i] = unit52(kf_verify_draw_bits(key, 2 * (uint64_t)(e0 + i)));
    switch (dist) {
    case KF_DIST_OFFSET: { /* a mean far from zero, spread of one */
        double centre = fmin(KF_OFFSET_CENTRE, 0.5 * mag);
        for (int i = 0; i < n; i++) x[i] = centre + 2.0 * u[i] - 1.0;
        break;
    }
    case KF_DIST_LARGE: /* magnitudes in [mag/2, mag], either sign (word 1's top bit) */
        for (int i = 0; i < n; i++) {
            double m = mag * (0.5 + 0.5 * u[i]);
            x[i] = kf_verify_draw_bits(key, 2 * (uint64_t)(e0 + i) + 1) >> 63 ? -m : m;
        }
        break;
    case KF_DIST_UNIFORM:
        for (int i = 0; i < n; i++) x[i] = 2.0 * u[i] - 1.0;
        break;
    case KF_DIST_WIDE: /* |x| = 2^t, t uniform in [-6, 6), either sign */
        for (int i = 0; i < n; i++) {
            double m = exp2_pm6(-6.0 + 12.0 * u[i]);
            x[i] = kf_verify_draw_bits(key, 2 * (uint64_t)(e0 + i) + 1) >> 63 ? -m : m;
        }
        break;
    default: /* normal, and heavy tailed: a normal over a small uniform, clipped */
        /* Box-Muller on the pair (2p, 2p + 1): radius from the even element's uniform,
         * angle from the odd one's; the even element takes the cosine, the odd the sine */
        for (int p = 0; p < m / 2; p++) {
            double r = sqrt(-2.0 * ln01(1.0 - u[2 * p])), c, s; /* 1 - u in (0, 1] */
            sincos2pi(u[2 * p + 1], &c, &s);
            v[2 * p] = r * c;
            v[2 * p + 1] = r * s;
        }
        if (dist == KF_DIST_NORMAL) {
            memcpy(x, v, (size_t)n * sizeof *x);
            break;
        }
        for (int i = 0; i < n; i++) {
            double d = 0.05 + 0.95 * unit52(kf_verify_draw_bits(key, 2 * (uint64_t)(e0 + i) + 1));
            double h = v[i] / d;
            h = h > mag ? mag : h; /* mag: 1e4 unless an op on the input's paths limits it */
            x[i] = h < -mag ? -mag : h;
        }
        break;
    }
    if (pos)
        for (int i = 0; i < n; i++) x[i] = fabs(x[i]) + 1e-3;
}

/* The value of a range input's element from its uniform (integers: the range's integers,
 * equally likely). */
static inline double range_value(double u, int integer, double lo, double hi) {
    if (!integer) return lo + (hi - lo) * u;
    double a = ceil(lo), b = floor(hi);
    if (b < a) b = a;
    double x = a + floor(u * (b - a + 1.0));
    return x > b ? b : x;
}

/* Element e's value at redraw attempt a (a >= 1) of the block keyed key: the same
 * distribution, drawn from another key, for an element that rounded to an exact zero. */
static double redraw(uint64_t key, int attempt, int dist, kf_dtype dt, int pos, double mag, int has_range,
                     double lo, double hi, int64_t e) {
    uint64_t k2 = kf_verify_draw_bits(key ^ 0xA0761D6478BD642Full, (uint64_t)attempt);
    int64_t e0 = e & ~(int64_t)1;
    double x[2];
    if (has_range) return range_value(unit52(kf_verify_draw_bits(k2, 2 * (uint64_t)e)), dt == KF_I64, lo, hi);
    batch_values(k2, dist, pos, mag, e0, 2, x);
    double v = x[e - e0];
    if (dt == KF_I64) v = v < 0 ? floor(v * 100.0) : ceil(v * 100.0); /* never 0 */
    return v;
}

void kf_verify_draw_block(uint64_t key, int dist, kf_dtype dt, int pos, double mag, int has_range, double lo,
                          double hi, void *data, double *vals, int64_t n) {
    if (!(mag > 0)) mag = KF_MAG_DEFAULT;
    int integer = dt == KF_I64;
    double x[BATCH];
    for (int64_t e0 = 0; e0 < n; e0 += BATCH) {
        int len = n - e0 < BATCH ? (int)(n - e0) : BATCH;
        if (dt == KF_BOOL) { /* a mask: 0 and 1 alike, whatever the distribution */
            unsigned char *b = (unsigned char *)data + e0;
            for (int i = 0; i < len; i++) b[i] = unit52(kf_verify_draw_bits(key, 2 * (uint64_t)(e0 + i))) < 0.5;
            if (vals)
                for (int i = 0; i < len; i++) vals[e0 + i] = b[i];
            continue;
        }
        if (has_range) {
            for (int i = 0; i < len; i++)
                x[i] = range_value(unit52(kf_verify_draw_bits(key, 2 * (uint64_t)(e0 + i))), integer, lo, hi);
        } else {
            batch_values(key, dist, pos, mag, e0, len, x);
            if (integer)
                for (int i = 0; i < len; i++) x[i] = x[i] < 0 ? floor(x[i] * 100.0) : ceil(x[i] * 100.0);
        }
        if (dt == KF_F32) { /* the common case without a call per element */
            float *f = (float *)data + e0;
            int zero = 0;
            for (int i = 0; i < len; i++) {
                f[i] = (float)x[i];
                zero |= f[i] == 0.0f;
            }
            for (int i = 0; zero && i < len; i++)
                for (int a = 1; f[i] == 0.0f && a <= 64; a++)
                    f[i] = (float)redraw(key, a, dist, dt, pos, mag, has_range, lo, hi, e0 + i);
            if (vals)
                for (int i = 0; i < len; i++) vals[e0 + i] = (double)f[i];
            continue;
        }
        for (int i = 0; i < len; i++) {
            kf_verify_store(dt, data, e0 + i, x[i]);
            for (int a = 1; kf_verify_load(dt, data, e0 + i) == 0.0 && a <= 64; a++)
                kf_verify_store(dt, data, e0 + i, redraw(key, a, dist, dt, pos, mag, has_range, lo, hi, e0 + i));
            if (vals) vals[e0 + i] = kf_verify_load(dt, data, e0 + i);
        }
    }
}
