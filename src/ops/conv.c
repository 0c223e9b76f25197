/*
 * The convolutions: COMPOSITE records of the OWN shape rule (kforge/ops.h). x is
 * [N, C, S1..Sd] (d = 1, 2 or 3 spatial dims), the weight [O, C/groups, K1..Kd] for conv and
 * [C, O/groups, K1..Kd] for conv_transpose (PyTorch's layouts), an optional bias [O].
 * stride, padding, dilation (and output_padding) are per spatial dim; one value stands for
 * every dim and an empty list for the default (1, 0, 1, 0).
 *
 * The float64 references are the definitions as loops (conv: a gather over the window;
 * conv_transpose: a scatter of every input element through the kernel), independent of the
 * lowerings. The lowerings are window maps into a CONTRACT, as one .kf expression:
 *
 *   conv:  x (its channels split into groups) padded, an unfold per spatial dim, the window
 *          dims moved beside the channels and merged into a [N, g, C/g*K, P] column matrix
 *          (the planner copies it: im2col), and the weight as [g, O/g, C/g*K] times it;
 *   conv_transpose, stride 1: the same conv over x padded by dilation*(K-1) - padding
 *          (negative crops), with the weight's channel dims swapped per group and its taps
 *          flipped;
 *   conv_transpose, strided: its phases (the outputs o with o + padding = q*stride + r, one
 *          stride-1 correlation of x each) as the output channels of one such conv, then
 *          interleaved (a permute, zero pads, a merge) and cropped (convt_phases).
 *
 * A depthwise conv with a small kernel is instead the sum of its taps' windows times their
 * weights, one elementwise stage (depthwise_terms).
 *
 * Both are correct on every platform through the existing templates; the copies they make
 * (im2col on GPUs, the phases' interleave) are where dedicated templates would win.
 */
#include "ops_int.h"

#include <cblas.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

enum { MAXSP = 3 };

/* One convolution's geometry, from the operands and the attributes. */
typedef struct conv_geom {
    int d, transposed;
    int64_t N, C, O, g, Cg, Og;
    int64_t S[MAXSP], K[MAXSP], st[MAXSP], pd[MAXSP], dl[MAXSP], op[MAXSP], L[MAXSP];
} conv_geom;

/* The attribute tuple's value for spatial dim i (one value for all, empty for dflt). */
static int per_dim(const kf_ints *v, int d, int i, int64_t dflt, int64_t *out) {
    if (v->n == 0) *out = dflt;
    else if (v->n == 1) *out = v->v[0];
    else if (v->n == d) *out = v->v[i];
    else return -1;
    return 0;
}

static int geom(const kf_op_dims *s, const kf_attrs *A, int transposed, conv_geom *G, char *why, size_t cap) {
    const char *nm = transposed ? "conv_transpose" : "conv";
    memset(G, 0, sizeof *G);
    G->transposed = transposed;
    int r = s->rank[0];
    if (r < 3 || r > 2 + MAXSP) {
        snprintf(why, cap, "%s: the input has rank %d; expected [N, C, spatial...] with 1 to 3 spatial dims",
                 nm, r);
        return -1;
    }
    if (s->rank[1] != r) {
        snprintf(why, cap, "%s: the weight has rank %d, the input %d (they must agree)", nm, s->rank[1], r);
        return -1;
    }
    G->d = r - 2;
    G->N = s->d[0][0];
    G->C = s->d[0][1];
    G->g = A->groups;
    if (G->g < 1 || G->C % G->g) {
        snprintf(why, cap, "%s: groups %lld does not divide the %lld input channels", nm, (long long)G->g,
                 (long long)G->C);
        return -1;
    }
    G->Cg = G->C / G->g;
    if (!transposed) {
        G->O = s->d[1][0];
        if (s->d[1][1] != G->Cg || G->O % G->g) {
            snprintf(why, cap, "conv: a weight [%lld, %lld, ...] for %lld input channels in %lld groups "
                     "(expected [O, %lld, ...] with O divisible by the groups)", (long long)s->d[1][0],
                     (long long)s->d[1][1], (long long)G->C, (long long)G->g, (long long)G->Cg);
            return -1;
        }
        G->Og = G->O / G->g;
    } else {
        if (s->d[1][0] != G->C) {
            snprintf(why, cap, "conv_transpose: a weight [%lld, ...] for %lld input channels (expected [C, "
                     "O/groups, ...])", (long long)s->d[1][0], (long long)G->C);
            return -1;
        }
        G->Og = s->d[1][1];
        G->O = G->Og * G->g;
    }
    const kf_ints *tup[4] = {&A->ints, &A->ints2, &A->ints3, &A->ints4};
    static const char *const tname[4] = {"stride", "padding", "dilation", "output_padding"};
    for (int i = 0; i < G->d; i++) {
        int64_t *dst[4] = {&G->st[i], &G->pd[i], &G->dl[i], &G->op[i]};
        static const int64_t dflt[4] = {1, 0, 1, 0};
        for (int t = 0; t < 4; t++)
            if (per_dim(tup[t], G->d, i, dflt[t], dst[t]) < 0) {
                snprintf(why, cap, "%s: %s has %d values for %d spatial dims (give 1 or %d)", nm, tname[t],
                         tup[t]->n, G->d, G->d);
                return -1;
            }
        G->S[i] = s->d[0][2 + i];
        G->K[i] = s->d[1][2 + i];
        if (G->st[i] < 1 || G->dl[i] < 1 || G->pd[i] < 0 || G->op[i] < 0 || G->K[i] < 1) {
            snprintf(why, cap, "%s: stride and dilation must be positive, padding and output_padding not "
                     "negative (spatial dim %d)", nm, i);
            return -1;
        }
        if (!transposed && G->op[i]) {
            snprintf(why, cap, "conv: output_padding belongs to conv_transpose");
            return -1;
        }
        if (transposed && G->op[i] >= G->st[i] && G->op[i] >= G->dl[i]) {
            snprintf(why, cap, "conv_transpose: output_padding %lld must be smaller than the stride or the "
                     "dilation (spatial dim %d)", (long long)G->op[i], i);
            return -1;
        }
        int64_t span = G->dl[i] * (G->K[i] - 1);
        G->L[i] = transposed ? (G->S[i] - 1) * G->st[i] - 2 * G->pd[i] + span + G->op[i] + 1
                             : (G->S[i] + 2 * G->pd[i] - span - 1) / G->st[i] + 1;
        if ((!transposed && G->S[i] + 2 * G->pd[i] < span + 1) || G->L[i] < 1) {
            snprintf(why, cap, "%s: spatial dim %d of size %lld gives no output (kernel %lld, dilation %lld, "
                     "padding %lld)", nm, i, (long long)G->S[i], (long long)G->K[i], (long long)G->dl[i],
                     (long long)G->pd[i]);
            return -1;
        }
    }
    if (s->nin > 2 && (s->rank[2] != 1 || s->d[2][0] != G->O)) {
        snprintf(why, cap, "%s: the bias must be a vector of the %lld output channels", nm, (long long)G->O);
        return -1;
    }
    return 0;
}

static int shape_of(const kf_op_dims *s, const kf_attrs *A, int transposed, int *out_rank, int64_t *out,
                    char *why, size_t cap) {
    conv_geom G;
    if (geom(s, A, transposed, &G, why, cap) < 0) return -1;
    *out_rank = G.d + 2;
    out[0] = G.N;
    out[1] = G.O;
    for (int i = 0; i < G.d; i++) out[2 + i] = G.L[i];
    return 0;
}

static int conv_shape(const kf_op_dims *s, const kf_attrs *A, int *r, int64_t *out, char *why, size_t cap) {
    return shape_of(s, A, 0, r, out, why, cap);
}

static int convt_shape(const kf_op_dims *s, const kf_attrs *A, int *r, int64_t *out, char *why, size_t cap) {
    return shape_of(s, A, 1, r, out, why, cap);
}

/* the geometry of a node that type-checked */
static conv_geom geom_ok(const kf_op_dims *s, const kf_attrs *A, int transposed) {
    conv_geom G;
    char why[200];
    int rc = geom(s, A, transposed, &G, why, sizeof why);
    (void)rc;
    return G;
}

static int64_t prod(const int64_t *v, int n) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= v[i];
    return p;
}

/* the multi-index of flat index f over dims[n] (row-major) */
static void unravel(int64_t f, const int64_t *dims, int n, int64_t *idx) {
    for (int i = n - 1; i >= 0; i--) {
        idx[i] = f % dims[i];
        f /= dims[i];
    }
}

/* The input position along spatial dim i of output position o and tap k (conv), in [0,
 * lim); -1 outside. */
static int64_t conv_at(const conv_geom *G, int i, int64_t o, int64_t k) {
    int64_t at = o * G->st[i] - G->pd[i] + k * G->dl[i];
    return at >= 0 && at < G->S[i] ? at : -1;
}

/* The leading spatial dims' part of a window (all but the last, row-major): the input row
 * (as a flat index over the leading dims of S) that output row r reads at leading tap tr
 * (conv), or that input row r writes at tap tr (conv_transpose: the output row over L);
 * -1 where it falls outside or, transposed, between strides. */
static int64_t lead_row(const conv_geom *G, int64_t r, int64_t tr, int transposed) {
    int64_t f = 0, rp[MAXSP], kp[MAXSP];
    unravel(r, transposed ? G->S : G->L, G->d - 1, rp);
    unravel(tr, G->K, G->d - 1, kp);
    for (int i = 0; i < G->d - 1; i++) {
        int64_t at;
        if (!transposed) {
            at = conv_at(G, i, rp[i], kp[i]);
            if (at < 0) return -1;
            f = f * G->S[i] + at;
        } else {
            at = rp[i] * G->st[i] - G->pd[i] + kp[i] * G->dl[i];
            if (at < 0 || at >= G->L[i]) return -1;
            f = f * G->L[i] + at;
        }
    }
    return f;
}

/* conv by its definition: each output element the bias plus, over its group's channels c
 * and the kernel's taps t, x at stride*o - padding + dilation*t (nothing outside x). As a
 * product, per image and group: the window's values gathered into a column block [Cg*K,
 * positions] (0 outside x), a block of output positions at a time (at most 64 MiB of
 * doubles), times the group's weights [Og, Cg*K] by OpenBLAS's dgemm, then the bias. At
 * KernelBench's official shapes (a 2-D conv of 2.9e11 products) walking each window term
 * by term took minutes per input set; the product runs at the BLAS's speed on every core. */
static void conv_f64(const kf_op_dims *s, const kf_attrs *A, const double *const *in, double *out) {
    conv_geom G = geom_ok(s, A, 0);
    int d = G.d;
    int64_t P = prod(G.L, d), KK = prod(G.K, d), SS = prod(G.S, d), R = G.Cg * KK;
    int64_t Lw = G.L[d - 1], Sw = G.S[d - 1], Kw = G.K[d - 1], stw = G.st[d - 1], pdw = G.pd[d - 1], dlw = G.dl[d - 1];
    int64_t pb = ((int64_t)1 << 23) / R;
    if (pb < 64) pb = 64;
    if (pb > P) pb = P;
    double *col = kf_malloc((size_t)(R * pb) * sizeof *col);
    for (int64_t n = 0; n < G.N; n++)
        for (int64_t grp = 0; grp < G.g; grp++) {
            const double *xg = in[0] + (n * G.C + grp * G.Cg) * SS;
            const double *wg = in[1] + grp * G.Og * R;
            double *yg = out + (n * G.O + grp * G.Og) * P;
            for (int64_t p0 = 0; p0 < P; p0 += pb) {
                int64_t nb = P - p0 < pb ? P - p0 : pb;
#pragma omp parallel for schedule(static) if (R * nb >= 65536)
                for (int64_t row = 0; row < R; row++) {
                    int64_t c = row / KK, t = row % KK, kw = t % Kw, off = kw * dlw - pdw;
                    const double *xc = xg + c * SS;
                    double *cr = col + row * nb;
                    for (int64_t j = 0; j < nb;) {
                        int64_t p = p0 + j, ow0 = p % Lw, run = Lw - ow0 < nb - j ? Lw - ow0 : nb - j;
                        int64_t xr = d > 1 ? lead_row(&G, p / Lw, t / Kw, 0) : 0;
                        if (xr < 0) {
                            for (int64_t k = 0; k < run; k++) cr[j + k] = 0;
                        } else {
                            const double *xrow = xc + xr * Sw;
                            for (int64_t k = 0; k < run; k++) {
                                int64_t iw = (ow0 + k) * stw + off;
                                cr[j + k] = iw >= 0 && iw < Sw ? xrow[iw] : 0;
                            }
                        }
                        j += run;
                    }
                }
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)G.Og, (blasint)nb,
                            (blasint)R, 1.0, wg, (blasint)R, col, (blasint)nb, 0.0, yg + p0, (blasint)P);
            }
            for (int64_t o = 0; o < G.Og && s->nin > 2; o++) {
                double b = in[2][grp * G.Og + o], *y = yg + o * P;
                for (int64_t p = 0; p < P; p++) y[p] += b;
            }
        }
    free(col);
}

/* conv_transpose by its definition: every input element, times each tap of its group's
 * weights, added at stride*i - padding + dilation*t of the output, plus the bias. As a
 * product, per image and group: the group's weights [Cg, Og*K] transposed times a block of
 * its input positions [Cg, positions] (OpenBLAS's dgemm) gives each (output channel, tap)
 * row's contributions, which are then added at their output positions (col2im), one output
 * channel per thread. */
static void convt_f64(const kf_op_dims *s, const kf_attrs *A, const double *const *in, double *out) {
    conv_geom G = geom_ok(s, A, 1);
    int d = G.d;
    int64_t P = prod(G.L, d), KK = prod(G.K, d), SS = prod(G.S, d), R = G.Og * KK;
    int64_t Lw = G.L[d - 1], Sw = G.S[d - 1], Kw = G.K[d - 1], stw = G.st[d - 1], pdw = G.pd[d - 1], dlw = G.dl[d - 1];
    int64_t qb = ((int64_t)1 << 23) / R;
    if (qb < 64) qb = 64;
    if (qb > SS) qb = SS;
    double *col = kf_malloc((size_t)(R * qb) * sizeof *col);
    for (int64_t n = 0; n < G.N; n++)
        for (int64_t o = 0; o < G.O; o++) {
            double b = s->nin > 2 ? in[2][o] : 0, *y = out + (n * G.O + o) * P;
            for (int64_t p = 0; p < P; p++) y[p] = b;
        }
    for (int64_t n = 0; n < G.N; n++)
        for (int64_t grp = 0; grp < G.g; grp++) {
            const double *xg = in[0] + (n * G.C + grp * G.Cg) * SS;
            const double *wg = in[1] + grp * G.Cg * R;
            double *yg = out + (n * G.O + grp * G.Og) * P;
            for (int64_t q0 = 0; q0 < SS; q0 += qb) {
                int64_t nb = SS - q0 < qb ? SS - q0 : qb;
                cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)R, (blasint)nb,
                            (blasint)G.Cg, 1.0, wg, (blasint)R, xg + q0, (blasint)SS, 0.0, col, (blasint)nb);
#pragma omp parallel for schedule(static) if (R * nb >= 65536)
                for (int64_t og = 0; og < G.Og; og++) {
                    double *y = yg + og * P;
                    for (int64_t t = 0; t < KK; t++) {
                        const double *cr = col + (og * KK + t) * nb;
                        int64_t off = (t % Kw) * dlw - pdw;
                        for (int64_t j = 0; j < nb;) {
                            int64_t q = q0 + j, iw0 = q % Sw, run = Sw - iw0 < nb - j ? Sw - iw0 : nb - j;
                            int64_t yr = d > 1 ? lead_row(&G, q / Sw, t / Kw, 1) : 0;
                            if (yr >= 0) {
                                double *yrow = y + yr * Lw;
                                for (int64_t k = 0; k < run; k++) {
                                    int64_t ow = (iw0 + k) * stw + off;
                                    if (ow >= 0 && ow < Lw) yrow[ow] += cr[j + k];
                                }
                            }
                            j += run;
                        }
                    }
                }
            }
        }
    free(col);
}

static double conv_flops(const kf_op_dims *s, const kf_attrs *A) {
    conv_geom G = geom_ok(s, A, 0);
    return 2.0 * (double)G.N * (double)G.O * (double)prod(G.L, G.d) * (double)G.Cg * (double)prod(G.K, G.d);
}

static double convt_flops(const kf_op_dims *s, const kf_attrs *A) {
    conv_geom G = geom_ok(s, A, 1);
    return 2.0 * (double)G.N * (double)G.C * (double)prod(G.S, G.d) * (double)G.Og * (double)prod(G.K, G.d);
}

/* The products an output element sums (kf_op_def.own_terms): the channels of its group
 * times the taps; a transposed conv's output gathers at most as many. */
static int64_t conv_terms(const kf_op_dims *s, const kf_attrs *A) {
    conv_geom G = geom_ok(s, A, 0);
    return G.Cg * prod(G.K, G.d);
}

static int64_t convt_terms(const kf_op_dims *s, const kf_attrs *A) {
    conv_geom G = geom_ok(s, A, 1);
    return G.Cg * prod(G.K, G.d);
}

/* "[a, b, c]" */
static void list(kf_buf *o, const int64_t *v, int n) {
    kf_buf_puts(o, "[");
    for (int i = 0; i < n; i++) kf_buf_printf(o, "%s%lld", i ? ", " : "", (long long)v[i]);
    kf_buf_puts(o, "]");
}

/* " + the bias as [O, 1...]" */
static void bias_text(kf_buf *o, const conv_geom *G) {
    int64_t bs[1 + MAXSP];
    bs[0] = G->O;
    for (int i = 0; i < G->d; i++) bs[1 + i] = 1;
    kf_buf_puts(o, " + reshape(_2, shape=");
    list(o, bs, G->d + 1);
    kf_buf_puts(o, ")");
}

/* The column matrix of the stride-1-or-not conv of `src` (.kf text of a [N, C, S'...] tensor,
 * S' in G.S) with the pads lo/hi per spatial dim (negative crops): x's windows as
 * [N, g, C/g*K, L] (the CPU matmul gathers it from src as it packs; GPUs copy it: im2col). */
static void cols_text(kf_buf *o, const conv_geom *G, const char *src, const int64_t *lo, const int64_t *hi,
                      const int64_t *stride) {
    int d = G->d;
    int64_t sh[2 + MAXSP];
    kf_buf x = {0};
    kf_buf_puts(&x, src);
    if (G->g > 1) { /* the groups beside the batch: [N*g, C/g, S...] */
        kf_buf t = {0};
        sh[0] = G->N * G->g, sh[1] = G->Cg;
        for (int i = 0; i < d; i++) sh[2 + i] = G->S[i];
        kf_buf_printf(&t, "reshape(%s, shape=", x.data);
        list(&t, sh, d + 2);
        kf_buf_puts(&t, ")");
        kf_buf_free(&x);
        x = t;
    }
    int any = 0;
    for (int i = 0; i < d; i++) any |= lo[i] || hi[i];
    if (any) { /* F.pad's order: the last dim first */
        kf_buf t = {0};
        int64_t pads[2 * MAXSP];
        for (int i = 0; i < d; i++) pads[2 * i] = lo[d - 1 - i], pads[2 * i + 1] = hi[d - 1 - i];
        kf_buf_printf(&t, "pad(%s, pads=", x.data);
        list(&t, pads, 2 * d);
        kf_buf_puts(&t, ")");
        kf_buf_free(&x);
        x = t;
    }
    for (int i = 0; i < d; i++) { /* windows: [N*g, C/g, L..., K...] */
        kf_buf t = {0};
        kf_buf_printf(&t, "unfold(%s, dim=%d, size=%lld, step=%lld, dilation=%lld)", x.data, 2 + i,
                      (long long)G->K[i], (long long)stride[i], (long long)G->dl[i]);
        kf_buf_free(&x);
        x = t;
    }
    /* [N*g, C/g, K..., L...] merged into columns [N, g, C/g*K, P] */
    int64_t perm[2 + 2 * MAXSP];
    int np = 0;
    perm[np++] = 0, perm[np++] = 1;
    for (int i = 0; i < d; i++) perm[np++] = 2 + d + i;
    for (int i = 0; i < d; i++) perm[np++] = 2 + i;
    int64_t cols[4] = {G->N, G->g, G->Cg * prod(G->K, d), prod(G->L, d)};
    kf_buf_printf(o, "reshape(permute(%s, dims=", x.data);
    list(o, perm, np);
    kf_buf_puts(o, "), shape=");
    list(o, cols, 4);
    kf_buf_puts(o, ")");
    kf_buf_free(&x);
}

/* The conv as the column-matrix product, with the weight matrix `wm` ([g, O/g, C/g*K]); the
 * result [N, O, L...] plus the bias operand if any. */
static void conv_text(kf_buf *o, const conv_geom *G, const char *src, const char *wm, const int64_t *lo,
                      const int64_t *hi, const int64_t *stride, int bias) {
    kf_buf_printf(o, "reshape(matmul(%s, ", wm);
    cols_text(o, G, src, lo, hi, stride);
    kf_buf_puts(o, "), shape=");
    int64_t sh[2 + MAXSP];
    sh[0] = G->N, sh[1] = G->O;
    for (int i = 0; i < G->d; i++) sh[2 + i] = G->L[i];
    list(o, sh, G->d + 2);
    kf_buf_puts(o, ")");
    if (bias) bias_text(o, G);
}

/* A depthwise conv (one input channel per output channel) with a small kernel: the sum
 * over the taps of the tap's window (a select of the windows view) times the tap's weight
 * per channel, one fused elementwise stage that reads x in place. */
#define KF_DEPTHWISE_UNROLL 16
static void depthwise_terms(kf_buf *o, const conv_geom *G, const char *win, int64_t lo, int64_t hi) {
    int d = G->d;
    if (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        kf_buf_puts(o, "(");
        depthwise_terms(o, G, win, lo, mid);
        kf_buf_puts(o, " + ");
        depthwise_terms(o, G, win, mid, hi);
        kf_buf_puts(o, ")");
        return;
    }
    int64_t k[MAXSP];
    unravel(lo, G->K, d, k);
    for (int i = 0; i < d; i++) kf_buf_puts(o, "select(");
    kf_buf_puts(o, win);
    for (int i = d - 1; i >= 0; i--) kf_buf_printf(o, ", dim=%d, index=%lld)", 2 + d + i, (long long)k[i]);
    kf_buf_printf(o, " * reshape(select(reshape(_1, shape=[%lld, %lld]), dim=1, index=%lld), shape=[%lld",
                  (long long)G->O, (long long)prod(G->K, d), (long long)lo, (long long)G->O);
    for (int i = 0; i < d; i++) kf_buf_puts(o, ", 1");
    kf_buf_puts(o, "])");
}

static int conv_lower(const kf_op_dims *s, const kf_attrs *A, kf_buf *o, char *why, size_t cap) {
    (void)why, (void)cap;
    conv_geom G = geom_ok(s, A, 0);
    if (G.Cg == 1 && G.Og == 1 && prod(G.K, G.d) <= KF_DEPTHWISE_UNROLL) {
        kf_buf win = {0};
        kf_buf_puts(&win, "_0");
        int any = 0;
        for (int i = 0; i < G.d; i++) any |= G.pd[i] != 0;
        if (any) {
            int64_t pads[2 * MAXSP];
            for (int i = 0; i < G.d; i++) pads[2 * i] = pads[2 * i + 1] = G.pd[G.d - 1 - i];
            kf_buf t = {0};
            kf_buf_printf(&t, "pad(%s, pads=", win.data);
            list(&t, pads, 2 * G.d);
            kf_buf_puts(&t, ")");
            kf_buf_free(&win);
            win = t;
        }
        for (int i = 0; i < G.d; i++) {
            kf_buf t = {0};
            kf_buf_printf(&t, "unfold(%s, dim=%d, size=%lld, step=%lld, dilation=%lld)", win.data, 2 + i,
                          (long long)G.K[i], (long long)G.st[i], (long long)G.dl[i]);
            kf_buf_free(&win);
            win = t;
        }
        depthwise_terms(o, &G, win.data, 0, prod(G.K, G.d));
        if (s->nin > 2) {
            kf_buf_printf(o, " + reshape(_2, shape=[%lld", (long long)G.O);
            for (int i = 0; i < G.d; i++) kf_buf_puts(o, ", 1");
            kf_buf_puts(o, "])");
        }
        kf_buf_free(&win);
        return 0;
    }
    kf_buf wm = {0};
    int64_t w3[3] = {G.g, G.Og, G.Cg * prod(G.K, G.d)};
    kf_buf_puts(&wm, "reshape(_1, shape=");
    list(&wm, w3, 3);
    kf_buf_puts(&wm, ")");
    conv_text(o, &G, "_0", wm.data, G.pd, G.pd, G.st, s->nin > 2);
    kf_buf_free(&wm);
    return 0;
}

/* One spatial dim of a strided conv_transpose as phases (docs/design-notes.md). With
 * c = gcd(stride, dilation), s = stride/c and e = dilation/c, tap k of input i lands on
 * t = o + padding = c*(i*s + k*e): only every c-th t is reached, and t/c = q*s + r with
 * phase r and q = i + m where k*e = m*s + r. Each phase is a stride-1 correlation of x over
 * m, and the P phases are output channels of one conv of x with W taps of dilation `dil` on
 * the grid q in [qlo, qlo + Q). s == 1 (the stride divides the dilation): one phase, the K
 * taps at dilation e; else the weight with e-1 zeros after each tap, cut into W rows of s
 * (m by r), of which the first P columns are phases (those past the last tap are zero). */
typedef struct convt_dim {
    int64_t c, s, e, P, W, dil, qlo, Q;
} convt_dim;

static int64_t gcd(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

static convt_dim convt_dim_of(const conv_geom *G, int i) {
    convt_dim D = {.c = gcd(G->st[i], G->dl[i])};
    D.s = G->st[i] / D.c, D.e = G->dl[i] / D.c;
    int64_t span = D.e * (G->K[i] - 1) + 1; /* the taps with the zeros between them */
    if (D.s == 1) D.P = 1, D.W = G->K[i], D.dil = D.e;
    else D.P = span < D.s ? span : D.s, D.W = (span + D.s - 1) / D.s, D.dil = 1;
    D.qlo = G->pd[i] / G->st[i];
    D.Q = (G->pd[i] + G->L[i] + G->st[i] - 1) / G->st[i] - D.qlo;
    return D;
}

/* `in` reshaped to sh[n] (if n), padded by pads[np] (if any is not 0), reshaped to mg[nm]:
 * zeros put after elements (a unit dim padded, merged), or a crop */
static void stuff_text(kf_buf *o, const char *in, const int64_t *sh, int n, const int64_t *pads, int np,
                       const int64_t *mg, int nm) {
    int any = 0;
    for (int i = 0; i < np; i++) any |= pads[i] != 0;
    kf_buf_puts(o, nm ? "reshape(" : "");
    kf_buf_puts(o, any ? "pad(" : "");
    kf_buf_puts(o, n ? "reshape(" : "");
    kf_buf_puts(o, in);
    if (n) {
        kf_buf_puts(o, ", shape=");
        list(o, sh, n);
        kf_buf_puts(o, ")");
    }
    if (any) {
        kf_buf_puts(o, ", pads=");
        list(o, pads, np);
        kf_buf_puts(o, ")");
    }
    if (nm) {
        kf_buf_puts(o, ", shape=");
        list(o, mg, nm);
        kf_buf_puts(o, ")");
    }
}

/* F.pad's pads for dims [.., A_1, B_1, ..., A_d, B_d]: after[i] zeros after each B_i */
static void pair_pads(int64_t *pads, int d, const int64_t *after) {
    for (int i = 0; i < d; i++) {
        int64_t *p = pads + 4 * (d - 1 - i);
        p[0] = 0, p[1] = after[i], p[2] = p[3] = 0;
    }
}

/* The strided conv_transpose: one conv of x with the phases as output channels. The weight
 * [C, O/g, K...] with e-1 zeros after each tap (where s > 1), padded to W*P taps, split into
 * [W, P], permuted to [C, W..., O/g, P...] with the taps flipped, is [g, C/g*W, O/g*P], the
 * matmul's transposed left operand. The result [N*O, P..., Q...] is permuted to
 * [N*O, Q1, P1, ...], padded to [N*O, Q1, s1, ...] (zeros for the phases past P) and merged;
 * where c > 1, c-1 zeros follow each element; then cropped to the output from
 * padding % stride. */
static void convt_phases(kf_buf *o, const conv_geom *G, int bias) {
    int d = G->d;
    convt_dim D[MAXSP];
    conv_geom X = *G; /* the conv over x */
    int64_t lo[MAXSP], hi[MAXSP], one[MAXSP], after[MAXSP], nph = 1;
    int stuff = 0, unit = 0;
    for (int i = 0; i < d; i++) {
        D[i] = convt_dim_of(G, i);
        X.K[i] = D[i].W, X.dl[i] = D[i].dil, X.L[i] = D[i].Q;
        lo[i] = D[i].dil * (D[i].W - 1) - D[i].qlo; /* x at q - m for the flipped tap m */
        hi[i] = D[i].Q - G->S[i] + D[i].qlo;
        one[i] = 1;
        nph *= D[i].P;
        stuff |= D[i].s > 1 && D[i].e > 1;
        unit |= D[i].c > 1;
    }
    int64_t sh[2 + 2 * MAXSP], mg[2 + MAXSP], pads[4 * MAXSP], perm[2 + 2 * MAXSP], flip[MAXSP];
    kf_buf w = {0}, t = {0}, y = {0};
    sh[0] = mg[0] = G->C, sh[1] = mg[1] = G->Og;
    for (int i = 0; i < d; i++) {
        after[i] = D[i].s > 1 ? D[i].e - 1 : 0;
        sh[2 + 2 * i] = G->K[i], sh[3 + 2 * i] = 1, mg[2 + i] = G->K[i] * (after[i] + 1);
    }
    pair_pads(pads, d, after);
    if (stuff) stuff_text(&w, "_1", sh, 2 + 2 * d, pads, 4 * d, mg, 2 + d);
    else kf_buf_puts(&w, "_1");
    perm[0] = 0, perm[1 + d] = 1;
    for (int i = 0; i < d; i++) {
        pads[2 * (d - 1 - i)] = 0, pads[2 * (d - 1 - i) + 1] = D[i].W * D[i].P - mg[2 + i];
        sh[2 + 2 * i] = D[i].W, sh[3 + 2 * i] = D[i].P;
        perm[1 + i] = 2 + 2 * i, perm[2 + d + i] = 3 + 2 * i, flip[i] = 1 + i;
    }
    stuff_text(&t, w.data, NULL, 0, pads, 2 * d, sh, 2 + 2 * d);
    kf_buf_printf(&y, "permute(reshape(matmul(reshape(flip(permute(%s, dims=", t.data);
    list(&y, perm, 2 + 2 * d);
    kf_buf_puts(&y, "), dims=");
    list(&y, flip, d);
    kf_buf_printf(&y, "), shape=[%lld, %lld, %lld]), ", (long long)G->g, (long long)(G->Cg * prod(X.K, d)),
                  (long long)(G->Og * nph));
    cols_text(&y, &X, "_0", lo, hi, one);
    kf_buf_puts(&y, ", transpose_a=true), shape=");
    /* [N*g, O/g, P..., Q...] permuted to [N*g, O/g, Q1, P1, ...], padded, merged */
    sh[0] = G->N * G->g, sh[1] = G->Og, perm[0] = 0, perm[1] = 1, mg[0] = G->N * G->O;
    for (int i = 0; i < d; i++) {
        sh[2 + i] = D[i].P, sh[2 + d + i] = D[i].Q;
        perm[2 + 2 * i] = 2 + d + i, perm[3 + 2 * i] = 2 + i;
        after[i] = D[i].s - D[i].P, mg[1 + i] = D[i].Q * D[i].s;
    }
    list(&y, sh, 2 + 2 * d);
    kf_buf_puts(&y, "), dims=");
    list(&y, perm, 2 + 2 * d);
    kf_buf_puts(&y, ")");
    pair_pads(pads, d, after);
    kf_buf_free(&t);
    stuff_text(&t, y.data, NULL, 0, pads, 4 * d, mg, 1 + d);
    if (unit) { /* c-1 zeros after each element */
        sh[0] = G->N * G->O;
        for (int i = 0; i < d; i++) {
            sh[1 + 2 * i] = mg[1 + i], sh[2 + 2 * i] = 1;
            after[i] = D[i].c - 1, mg[1 + i] *= D[i].c;
        }
        pair_pads(pads, d, after);
        kf_buf_free(&y);
        stuff_text(&y, t.data, sh, 1 + 2 * d, pads, 4 * d, mg, 1 + d);
        kf_buf_free(&t);
        t = y, y = (kf_buf){0};
    }
    /* [N, O, Q1*stride1, ...] cropped to the output: from padding % stride, L of them */
    sh[0] = G->N, sh[1] = G->O;
    for (int i = 0; i < d; i++) {
        int64_t at = G->pd[i] % G->st[i];
        sh[2 + i] = mg[1 + i];
        pads[2 * (d - 1 - i)] = -at, pads[2 * (d - 1 - i) + 1] = at + G->L[i] - mg[1 + i];
    }
    stuff_text(o, t.data, sh, 2 + d, pads, 2 * d, NULL, 0);
    if (bias) bias_text(o, G);
    kf_buf_free(&w);
    kf_buf_free(&t);
    kf_buf_free(&y);
}

static int convt_lower(const kf_op_dims *s, const kf_attrs *A, kf_buf *o, char *why, size_t cap) {
    (void)why, (void)cap;
    conv_geom G = geom_ok(s, A, 1);
    int d = G.d, strided = 0;
    for (int i = 0; i < d; i++) strided |= G.st[i] > 1;
    if (strided) {
        convt_phases(o, &G, s->nin > 2);
        return 0;
    }
    /* stride 1: the conv of x padded by dilation*(K-1) - padding before and that plus
     * output_padding after (negative crops), with the weight's channel dims swapped per group
     * and its taps flipped */
    int64_t lo[MAXSP], hi[MAXSP], one[MAXSP];
    for (int i = 0; i < d; i++) {
        int64_t span = G.dl[i] * (G.K[i] - 1);
        lo[i] = span - G.pd[i];
        hi[i] = span - G.pd[i] + G.op[i];
        one[i] = 1;
    }
    kf_buf wm = {0};
    int64_t w4[3 + MAXSP], perm[3 + MAXSP], flip[MAXSP], w3[3] = {G.g, G.Og, G.Cg * prod(G.K, d)};
    w4[0] = G.g, w4[1] = G.Cg, w4[2] = G.Og;
    perm[0] = 0, perm[1] = 2, perm[2] = 1;
    for (int i = 0; i < d; i++) w4[3 + i] = G.K[i], perm[3 + i] = 3 + i, flip[i] = 3 + i;
    kf_buf_puts(&wm, "reshape(flip(permute(reshape(_1, shape=");
    list(&wm, w4, d + 3);
    kf_buf_puts(&wm, "), dims=");
    list(&wm, perm, d + 3);
    kf_buf_puts(&wm, "), dims=");
    list(&wm, flip, d);
    kf_buf_puts(&wm, "), shape=");
    list(&wm, w3, 3);
    kf_buf_puts(&wm, ")");
    conv_text(o, &G, "_0", wm.data, lo, hi, one, s->nin > 2);
    kf_buf_free(&wm);
    return 0;
}

#define TUPLE(nm, field, aten) {nm, KF_ATTR_INTS, offsetof(kf_attrs, field), "[]", aten, NULL}
#define GROUPS(aten) {"groups", KF_ATTR_INT, offsetof(kf_attrs, groups), "1", aten, NULL}
#define CONV .cls = KF_CLASS_COMPOSITE, .kind = KF_KIND_OWN, .min_in = 2, .max_in = 3, .flops = 2

const kf_op_def kf_ops_conv[] = {
    {.op = KF_OP_CONV, .name = "conv", CONV, .own_shape = conv_shape, .own_f64 = conv_f64,
     .own_flops = conv_flops, .own_lower = conv_lower, .own_terms = conv_terms,
     .doc = "convolution (1-3 spatial dims) of x [N, C, S...] with w [O, C/groups, K...], optional bias [O]",
     .attrs = {TUPLE("stride", ints, "3"), TUPLE("padding", ints2, "4"), TUPLE("dilation", ints3, "5"),
               GROUPS("6")},
     .aten = {"aten.conv1d", "aten.conv2d", "aten.conv3d"},
     .torch = "lambda x, w, b=None, stride=(), padding=(), dilation=(), groups=1: "
              "(F.conv1d, F.conv2d, F.conv3d)[x.dim() - 3](x, w, b, list(stride) or 1, list(padding) or 0, "
              "list(dilation) or 1, groups)",
     .example = "input x: f32[2, 6, 9, 8]\ninput w: f32[4, 3, 3, 2]\ninput b: f32[4]\n"
                "output y = conv(x, w, b, stride=[2, 1], padding=[1, 0], dilation=[1, 2], groups=2)\n"},
    {.op = KF_OP_CONV_TRANSPOSE, .name = "conv_transpose", CONV, .own_shape = convt_shape, .own_f64 = convt_f64,
     .own_flops = convt_flops, .own_lower = convt_lower, .own_terms = convt_terms,
     .doc = "transposed convolution (1-3 spatial dims) of x [N, C, S...] with w [C, O/groups, K...], "
            "optional bias [O]",
     .attrs = {TUPLE("stride", ints, "3"), TUPLE("padding", ints2, "4"), TUPLE("output_padding", ints4, "5"),
               GROUPS("6"), TUPLE("dilation", ints3, "7")},
     .aten = {"aten.conv_transpose1d", "aten.conv_transpose2d", "aten.conv_transpose3d"},
     .torch = "lambda x, w, b=None, stride=(), padding=(), output_padding=(), groups=1, dilation=(): "
              "(F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[x.dim() - 3](x, w, b, "
              "list(stride) or 1, list(padding) or 0, list(output_padding) or 0, groups, list(dilation) or 1)",
     .example = "input x: f32[2, 4, 5, 6]\ninput w: f32[4, 3, 3, 2]\ninput b: f32[6]\n"
                "output y = conv_transpose(x, w, b, stride=[2, 3], padding=[1, 0], output_padding=[1, 1], "
                "dilation=[1, 2], groups=2)\n"},
};
const int kf_ops_conv_count = sizeof kf_ops_conv / sizeof kf_ops_conv[0];
