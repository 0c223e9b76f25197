/*
 * PyTorch graph import, the rules for ATen ops that are several of kforge's ops: losses
 * (smooth L1 / Huber, MSE, L1, KL divergence, triplet margin, cross entropy, NLL), gather, vector norms,
 * instance norm, scaled dot-product attention, concatenation, narrow, torch.diag and
 * broadcast_tensors. Each writes the .kf text with PyTorch's meaning, with temporaries
 * (kf_imp_tmp) where a part is used twice; import.c is the driver and holds the one-op
 * rules (import_int.h).
 *
 * Every argument value a rule does not lower (a reduction mode it does not know, dropout,
 * label smoothing, class weights) is named in the error, never ignored; values that do not
 * change the result (running statistics when the input's own are used) are.
 */
#include "import_int.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define NEED(x) do { if (!(x)) { if (why) kf_imp_unsupported(L, n, why); return 0; } } while (0)
#define BAD(msg) do { kf_imp_unsupported(L, n, msg); return 0; } while (0)

/* A number argument, with the importer's spellings of the floats JSON lacks ("inf",
 * "-inf", "nan"). */
static int num_or_inf(json_t *a, double *d) {
    const char *s = json_is_string(a) ? json_string_value(a) : NULL;
    if (!s) return kf_imp_num(a, d);
    if (strcmp(s, "inf") == 0) *d = INFINITY;
    else if (strcmp(s, "-inf") == 0) *d = -INFINITY;
    else if (strcmp(s, "nan") == 0) *d = NAN;
    else return 0;
    return 1;
}

/* ATen's reduction enum (at::Reduction): 0 none, 1 mean, 2 sum. The loss's elementwise
 * value elem reduced as asked, as v's statement; 0 with the reason noted otherwise. */
static int reduce_loss(lower *L, lval *v, json_t *n, json_t *rj, const char *elem) {
    double r = 1;
    char e[700];
    if (!kf_imp_is_null(rj) && !kf_imp_num(rj, &r)) BAD("reduction is not an integer");
    if (r == 0) snprintf(e, sizeof e, "%s", elem);
    else if (r == 1) snprintf(e, sizeof e, "mean(%s)", elem);
    else if (r == 2) snprintf(e, sizeof e, "sum(%s)", elem);
    else {
        char msg[80];
        snprintf(msg, sizeof msg, "reduction %g (expected 0 none, 1 mean or 2 sum)", r);
        BAD(msg);
    }
    kf_imp_emit(L, v, e);
    return 1;
}

/* smooth_l1_loss(self, target, reduction, beta), huber_loss(self, target, reduction,
 * delta), mse_loss, l1_loss. The piecewise losses without a select: with z = |x - y| and
 * m = min(z, b), smooth L1 is m^2 / (2b) + (z - m) and Huber 0.5 m^2 + delta (z - m), equal
 * to PyTorch's two branches on each side of b. */
static int lower_pointwise_loss(lower *L, lval *v, const char *t) {
    json_t *n = v->node;
    const char *why = NULL;
    char a[160], b[160], z[96], m[96], e[700], n1[40];
    NEED(kf_imp_term(L, kf_imp_arg(n, 0, "self"), a, sizeof a, &why));
    NEED(kf_imp_term(L, kf_imp_arg(n, 1, "target"), b, sizeof b, &why));
    json_t *rj = kf_imp_arg(n, 2, "reduction");
    if (kf_imp_target_is(t, "aten.mse_loss")) {
        snprintf(e, sizeof e, "square(%s - %s)", a, b);
        return reduce_loss(L, v, n, rj, e);
    }
    snprintf(e, sizeof e, "abs(%s - %s)", a, b);
    if (kf_imp_target_is(t, "aten.l1_loss")) return reduce_loss(L, v, n, rj, e);
    int huber = kf_imp_target_is(t, "aten.huber_loss");
    double w = 1;
    json_t *wj = kf_imp_arg(n, 3, huber ? "delta" : "beta");
    if (!kf_imp_is_null(wj) && (!kf_imp_num(wj, &w) || !isfinite(w))) BAD(huber ? "delta is not a finite number" : "beta is not a finite number");
    if (w < 0 || (huber && w == 0)) BAD(huber ? "delta is not positive" : "beta is negative");
    if (!huber && w == 0) return reduce_loss(L, v, n, rj, e); /* beta 0: the L1 loss */
    kf_imp_tmp(L, v, e, z, sizeof z);
    snprintf(e, sizeof e, "minimum(%s, %s)", z, kf_imp_numtxt(w, n1, sizeof n1));
    kf_imp_tmp(L, v, e, m, sizeof m);
    char el[300];
    if (huber) snprintf(el, sizeof el, "0.5 * square(%s) + %s * (%s - %s)", m, n1, z, m);
    else snprintf(el, sizeof el, "square(%s) * %s + (%s - %s)", m, kf_imp_numtxt(0.5 / w, n1, sizeof n1), z, m);
    return reduce_loss(L, v, n, rj, el);
}

/* kl_div(self, target, reduction, log_target): target * (log target - self), with PyTorch's
 * 0 where target is 0 (its xlogy): log reads max(target, FLT_MIN), which changes nothing
 * for a positive normal float target and leaves 0 * finite = 0 at 0; exp(target) *
 * (target - self) with log_target. batchmean arrives as the sum and a division. */
static int lower_kl_div(lower *L, lval *v) {
    json_t *n = v->node;
    const char *why = NULL;
    char a[160], b[160], e[700], n1[40];
    NEED(kf_imp_term(L, kf_imp_arg(n, 0, "self"), a, sizeof a, &why));
    NEED(kf_imp_term(L, kf_imp_arg(n, 1, "target"), b, sizeof b, &why));
    json_t *lt = kf_imp_arg(n, 3, "log_target");
    if (!kf_imp_is_null(lt) && !json_is_boolean(lt)) BAD("log_target is not a boolean");
    if (json_is_true(lt)) snprintf(e, sizeof e, "exp(%s) * (%s - %s)", b, b, a);
    else snprintf(e, sizeof e, "%s * (log(maximum(%s, %s)) - %s)", b, b, kf_imp_numtxt(FLT_MIN, n1, sizeof n1), a);
    return reduce_loss(L, v, n, kf_imp_arg(n, 2, "reduction"), e);
}

/* The p-norm of x over axes ("" all, else ", axes=[..]"), keepdim as given, as text:
 * sqrt(sum(square)) for 2, sum(abs) for 1, max/min(abs) for +-inf, otherwise
 * pow(sum(pow(abs, p)), 1/p). 0 with *why for p = 0 (a count, not a norm kforge has). */
static int pnorm_text(double p, const char *x, const char *axes, int keep, char *out, size_t cap,
                      const char **why) {
    char tail[160], n1[40], n2[40];
    snprintf(tail, sizeof tail, "%s%s", axes, keep ? ", keepdim=true" : "");
    if (p == 2) snprintf(out, cap, "sqrt(sum(square(%s)%s))", x, tail);
    else if (p == 1) snprintf(out, cap, "sum(abs(%s)%s)", x, tail);
    else if (isinf(p)) snprintf(out, cap, "%s(abs(%s)%s)", p > 0 ? "max" : "min", x, tail);
    else if (p == 0 || isnan(p)) {
        *why = "ord 0 (the count of non-zero elements) or NaN";
        return 0;
    } else {
        snprintf(out, cap, "pow(sum(pow(abs(%s), %s)%s), %s)", x, kf_imp_numtxt(p, n1, sizeof n1), tail,
                 kf_imp_numtxt(1 / p, n2, sizeof n2));
    }
    return 1;
}

/* linalg_vector_norm(self, ord=2, dim=None, keepdim=False, *, dtype=None) */
static int lower_vector_norm(lower *L, lval *v) {
    json_t *n = v->node;
    const char *why = NULL;
    char a[160], ax[128], axes[140], e[700];
    NEED(kf_imp_term(L, kf_imp_arg(n, 0, "self"), a, sizeof a, &why));
    double p = 2;
    json_t *oj = kf_imp_arg(n, 1, "ord");
    if (!kf_imp_is_null(oj) && !num_or_inf(oj, &p)) BAD("ord is not a number");
    if (!kf_imp_is_null(kf_imp_arg(n, 4, "dtype"))) BAD("a norm with a dtype change");
    if (!kf_imp_axes_text(kf_imp_arg(n, 2, "dim"), ax, sizeof ax)) BAD("dim is not an integer or a list of integers");
    snprintf(axes, sizeof axes, "%s%s", ax[0] ? ", axes=" : "", ax);
    NEED(pnorm_text(p, a, axes, json_is_true(kf_imp_arg(n, 3, "keepdim")), e, sizeof e, &why));
    kf_imp_emit(L, v, e);
    return 1;
}

/* triplet_margin_loss(anchor, positive, negative, margin=1, p=2, eps=1e-6, swap=False,
 * reduction=mean): max(margin + d(a, p) - d(a, n), 0) with d(x, y) = ||x - y + eps||_p over
 * the last dim (pairwise_distance); swap takes min(d(a, n), d(p, n)). */
static int lower_triplet(lower *L, lval *v) {
    json_t *n = v->node;
    const char *why = NULL;
    char x[3][160], dpos[96], dneg[96], dsw[96], e[700], diff[400], n1[40], n2[40];
    static const char *const names[] = {"anchor", "positive", "negative"};
    for (int i = 0; i < 3; i++) NEED(kf_imp_term(L, kf_imp_arg(n, (size_t)i, names[i]), x[i], sizeof x[i], &why));
    double margin = 1, p = 2, eps = 1e-6;
    json_t *mj = kf_imp_arg(n, 3, "margin"), *pj = kf_imp_arg(n, 4, "p"), *ej = kf_imp_arg(n, 5, "eps");
    json_t *sj = kf_imp_arg(n, 6, "swap");
    if (!kf_imp_is_null(mj) && (!kf_imp_num(mj, &margin) || !isfinite(margin))) BAD("margin is not a finite number");
    if (!kf_imp_is_null(pj) && !num_or_inf(pj, &p)) BAD("p is not a number");
    if (!kf_imp_is_null(ej) && (!kf_imp_num(ej, &eps) || !isfinite(eps))) BAD("eps is not a finite number");
    if (!kf_imp_is_null(sj) && !json_is_boolean(sj)) BAD("swap is not a boolean");
    const int pairs[3][2] = {{0, 1}, {0, 2}, {1, 2}};
    char *dist[3] = {dpos, dneg, dsw};
    for (int k = 0; k < (json_is_true(sj) ? 3 : 2); k++) {
        snprintf(diff, sizeof diff, "%s - %s + %s", x[pairs[k][0]], x[pairs[k][1]], kf_imp_numtxt(eps, n1, sizeof n1));
        NEED(pnorm_text(p, diff, ", axes=[-1]", 0, e, sizeof e, &why));
        kf_imp_tmp(L, v, e, dist[k], 96);
    }
    if (json_is_true(sj)) {
        char m[96];
        snprintf(e, sizeof e, "minimum(%s, %s)", dneg, dsw);
        kf_imp_tmp(L, v, e, m, sizeof m);
        snprintf(dneg, sizeof dneg, "%s", m);
    }
    char el[300];
    snprintf(el, sizeof el, "maximum(%s + %s - %s, 0)", kf_imp_numtxt(margin, n2, sizeof n2), dpos, dneg);
    return reduce_loss(L, v, n, kf_imp_arg(n, 7, "reduction"), el);
}

/* A per-channel vector w [C] read as [C, 1, ..., 1] against [N, C, S1, ..., Sk]: expanded
 * to [S1, ..., Sk, C] and permuted to [C, S1, ..., Sk] (two views, no copy). */
static void channel_view(const lval *x, int r, const char *w, char *out, size_t cap) {
    size_t m = (size_t)snprintf(out, cap, "permute(expand(%s, shape=[", w);
    for (int d = 2; d < r; d++) m += (size_t)snprintf(out + m, cap - m, "%lld, ", (long long)kf_imp_dim(x, d));
    m += (size_t)snprintf(out + m, cap - m, "-1]), dims=[%d", r - 2);
    for (int d = 0; d < r - 2; d++) m += (size_t)snprintf(out + m, cap - m, ", %d", d);
    snprintf(out + m, cap - m, "])");
}

/* instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum,
 * eps, cudnn_enabled): each (n, c) over the spatial dims. With the input's statistics that
 * is layer_norm over the trailing dims (running statistics, momentum: only updated, the
 * result does not read them); with the running ones, (x - mean) / sqrt(var + eps). Then
 * the per-channel affine weight and bias. */
static int lower_instance_norm(lower *L, lval *v) {
    json_t *n = v->node;
    const char *why = NULL;
    char a[160], w[160] = "", bi[160] = "", e[700], ax[128], n1[40];
    lval *x = kf_imp_operand(L, kf_imp_arg(n, 0, "input"), &why);
    NEED(x);
    snprintf(a, sizeof a, "%s", x->kf);
    int r = kf_imp_rank(x);
    if (r < 3) BAD("an input of rank < 3 (instance norm normalizes the dims after batch and channel)");
    json_t *wj = kf_imp_arg(n, 1, "weight"), *bj = kf_imp_arg(n, 2, "bias");
    json_t *uj = kf_imp_arg(n, 5, "use_input_stats"), *ej = kf_imp_arg(n, 7, "eps");
    double eps = 1e-5;
    if (!kf_imp_is_null(ej) && (!kf_imp_num(ej, &eps) || !isfinite(eps))) BAD("eps is not a finite number");
    if (!kf_imp_is_null(wj)) NEED(kf_imp_term(L, wj, w, sizeof w, &why));
    if (!kf_imp_is_null(bj)) NEED(kf_imp_term(L, bj, bi, sizeof bi, &why));
    char y[96];
    if (!json_is_boolean(uj)) BAD("use_input_stats is not a boolean");
    if (json_is_true(uj)) {
        size_t m = (size_t)snprintf(ax, sizeof ax, "[");
        for (int d = 2; d < r; d++) m += (size_t)snprintf(ax + m, sizeof ax - m, "%s%d", d > 2 ? ", " : "", d - r);
        snprintf(ax + m, sizeof ax - m, "]");
        snprintf(e, sizeof e, "layer_norm(%s, axes=%s, eps=%s)", a, ax, kf_imp_numtxt(eps, n1, sizeof n1));
    } else {
        char rm[160], rv[160], vm[300], vv[300];
        json_t *mj = kf_imp_arg(n, 3, "running_mean"), *vj = kf_imp_arg(n, 4, "running_var");
        if (kf_imp_is_null(mj) || kf_imp_is_null(vj)) BAD("use_input_stats false without running statistics");
        NEED(kf_imp_term(L, mj, rm, sizeof rm, &why));
        NEED(kf_imp_term(L, vj, rv, sizeof rv, &why));
        channel_view(x, r, rm, vm, sizeof vm);
        channel_view(x, r, rv, vv, sizeof vv);
        snprintf(e, sizeof e, "(%s - %s) * rsqrt(%s + %s)", a, vm, vv, kf_imp_numtxt(eps, n1, sizeof n1));
    }
    if (!w[0] && !bi[0]) {
        kf_imp_emit(L, v, e);
        return 1;
    }
    kf_imp_tmp(L, v, e, y, sizeof y);
    char cw[300] = "", cb[300] = "", el[700];
    if (w[0]) channel_view(x, r, w, cw, sizeof cw);
    if (bi[0]) channel_view(x, r, bi, cb, sizeof cb);
    snprintf(el, sizeof el, "%s%s%s%s%s", y, cw[0] ? " * " : "", cw, cb[0] ? " + " : "", cb);
    kf_imp_emit(L, v, el);
    return 1;
}

/* scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal=False, *,
 * scale=None, enable_gqa=False): softmax(q k^T * scale + mask) v, scale 1/sqrt(E) by
 * default; the causal mask keeps col <= row (top left aligned, as PyTorch's) through a tril
 * view whose other elements read -inf; a float mask is added. */
static int lower_sdpa(lower *L, lval *v) {
    json_t *n = v->node;
    const char *why = NULL;
    char q[160], k[160], val[160], mask[160] = "", s[96], e[700], n1[40];
    lval *ql = kf_imp_operand(L, kf_imp_arg(n, 0, "query"), &why);
    NEED(ql);
    snprintf(q, sizeof q, "%s", ql->kf);
    lval *kl = kf_imp_operand(L, kf_imp_arg(n, 1, "key"), &why);
    NEED(kl);
    snprintf(k, sizeof k, "%s", kl->kf);
    NEED(kf_imp_term(L, kf_imp_arg(n, 2, "value"), val, sizeof val, &why));
    json_t *mj = kf_imp_arg(n, 3, "attn_mask"), *dj = kf_imp_arg(n, 4, "dropout_p");
    json_t *cj = kf_imp_arg(n, 5, "is_causal"), *sj = kf_imp_arg(n, 6, "scale"), *gj = kf_imp_arg(n, 7, "enable_gqa");
    double drop = 0, scale;
    if (!kf_imp_is_null(dj) && (!kf_imp_num(dj, &drop) || drop != 0)) BAD("dropout_p other than 0 (attention dropout)");
    if (!kf_imp_is_null(gj) && !json_is_false(gj)) {
        if (kf_imp_rank(ql) < 3 || kf_imp_dim(ql, -3) != kf_imp_dim(kl, -3)) BAD("enable_gqa with fewer key/value heads than query heads");
    }
    if (!kf_imp_is_null(cj) && !json_is_boolean(cj)) BAD("is_causal is not a boolean");
    if (!kf_imp_is_null(mj)) {
        if (json_is_true(cj)) BAD("both attn_mask and is_causal (PyTorch refuses them together)");
        lval *ml = kf_imp_operand(L, mj, &why);
        NEED(ml);
        json_t *dt = json_object_get(ml->node ? ml->node : ml->meta, "dtype");
        if (!json_is_string(dt) || strcmp(json_string_value(dt), "f32") != 0)
            BAD("an attn_mask that is not f32 (a boolean mask is not lowered; an additive float mask is)");
        snprintf(mask, sizeof mask, " + %s", ml->kf);
    }
    if (kf_imp_is_null(sj)) {
        int64_t E = kf_imp_dim(ql, -1);
        if (E < 1) BAD("the query's last dim is unknown");
        scale = 1 / sqrt((double)E);
    } else if (!kf_imp_num(sj, &scale) || !isfinite(scale)) {
        BAD("scale is not a finite number");
    }
    snprintf(e, sizeof e, "matmul(%s, %s, transpose_b=true) * %s%s", q, k, kf_imp_numtxt(scale, n1, sizeof n1), mask);
    kf_imp_tmp(L, v, e, s, sizeof s);
    if (json_is_true(cj)) {
        char c[96];
        snprintf(e, sizeof e, "tril(%s, value=-inf)", s);
        kf_imp_tmp(L, v, e, c, sizeof c);
        snprintf(s, sizeof s, "%s", c);
    }
    snprintf(e, sizeof e, "matmul(softmax(%s, axis=-1), %s)", s, val);
    kf_imp_emit(L, v, e);
    return 1;
}

/* The loss of class indices y [N] (i64) against per-class scores x [N, C], PyTorch's
 * nll_loss and cross_entropy_loss: the score of each row's class is a gather (x[n, y_n],
 * reading fill 0 where y_n is outside the classes), the row dropped where y_n is
 * ignore_index (weight m = 1 - eq(y, ignore_index)) and weighted by weight[y_n] when class
 * weights are given (a second gather, along the weights); per row -picked * w (NLL) or
 * (logsumexp(x_n) - picked) * w (cross entropy: one pass over the logits for the
 * logsumexp, nothing of [N, C] stored); reduced as asked, mean being the sum over the sum
 * of the row weights (PyTorch's, NaN when every row is dropped). n is the node that holds
 * the arguments (self, target, weight, reduction, ignore_index at 0..4). */
static int picked_loss(lower *L, lval *v, json_t *n, int ce) {
    const char *why = NULL;
    char e[900], lse[96] = "", T[96], m[96], w[96], g[300], row[96], n1[40], msg[200];
    lval *x = kf_imp_operand(L, kf_imp_arg(n, 0, "self"), &why);
    NEED(x);
    lval *y = kf_imp_operand(L, kf_imp_arg(n, 1, "target"), &why);
    NEED(y);
    json_t *wj = kf_imp_arg(n, 2, "weight"), *rj = kf_imp_arg(n, 3, "reduction"), *ij = kf_imp_arg(n, 4, "ignore_index");
    double r = 1, ignore = -100;
    if (!kf_imp_is_null(rj) && (!kf_imp_num(rj, &r) || (r != 0 && r != 1 && r != 2)))
        BAD("reduction other than 0 none, 1 mean or 2 sum");
    if (!kf_imp_is_null(ij) && (!kf_imp_num(ij, &ignore) || ignore != floor(ignore))) BAD("ignore_index is not an integer");
    if (kf_imp_rank(x) != 2)
        BAD("scores that are not [batch, classes] (no batch, or K-dimensional inputs [N, C, d1, ...])");
    int64_t N = kf_imp_dim(x, 0), C = kf_imp_dim(x, 1);
    if (kf_imp_rank(y) != 1 || kf_imp_dim(y, 0) != N) {
        snprintf(msg, sizeof msg, "class indices that are not [N] = [%lld] for scores [N, C]", (long long)N);
        BAD(msg);
    }
    /* the logsumexp first: the row weights and the gather then join the elementwise stage
     * that finishes it, instead of a stage of their own before it */
    if (ce) {
        snprintf(e, sizeof e, "logsumexp(%s, axes=[1], keepdim=true)", x->kf);
        kf_imp_tmp(L, v, e, lse, sizeof lse);
    }
    snprintf(e, sizeof e, "reshape(%s, shape=[%lld, 1])", y->kf, (long long)N);
    kf_imp_tmp(L, v, e, T, sizeof T);
    snprintf(e, sizeof e, "1 - eq(%s, %s)", T, kf_imp_numtxt(ignore, n1, sizeof n1));
    kf_imp_tmp(L, v, e, m, sizeof m);
    if (!kf_imp_is_null(wj)) {
        lval *wv = kf_imp_operand(L, wj, &why);
        NEED(wv);
        if (kf_imp_rank(wv) != 1 || kf_imp_dim(wv, 0) != C) BAD("class weights that are not [C]");
        snprintf(e, sizeof e, "gather(reshape(%s, shape=[%lld, 1]), %s, axis=0, fill=0) * %s", wv->kf, (long long)C, T, m);
        kf_imp_tmp(L, v, e, w, sizeof w);
    } else {
        snprintf(w, sizeof w, "%s", m);
    }
    snprintf(g, sizeof g, "gather(%s, %s, axis=1, fill=0)", x->kf, T);
    if (ce) snprintf(e, sizeof e, "(%s - %s) * %s", lse, g, w);
    else snprintf(e, sizeof e, "-%s * %s", g, w);
    kf_imp_tmp(L, v, e, row, sizeof row);
    if (r == 0) snprintf(e, sizeof e, "reshape(%s, shape=[%lld])", row, (long long)N);
    else if (r == 2) snprintf(e, sizeof e, "sum(%s)", row);
    else snprintf(e, sizeof e, "sum(%s) / sum(%s)", row, w);
    kf_imp_emit(L, v, e);
    return 1;
}

/* cross_entropy_loss(self, target, weight=None, reduction=mean, ignore_index=-100,
 * label_smoothing=0) of logits [N, C]. Class indices (an i64 target [N]): picked_loss's
 * logsumexp - gather. Class probabilities (a float target shaped like the logits):
 * -sum(target * log_softmax) per row, with weight and ignore_index refused there. */
static int lower_cross_entropy(lower *L, lval *v) {
    json_t *n = v->node;
    const char *why = NULL;
    char e[900], ls[200], row[96], msg[200];
    lval *x = kf_imp_operand(L, kf_imp_arg(n, 0, "self"), &why);
    NEED(x);
    lval *y = kf_imp_operand(L, kf_imp_arg(n, 1, "target"), &why);
    NEED(y);
    json_t *wj = kf_imp_arg(n, 2, "weight"), *rj = kf_imp_arg(n, 3, "reduction");
    json_t *sj = kf_imp_arg(n, 5, "label_smoothing");
    double smooth = 0, r = 1;
    if (!kf_imp_is_null(sj) && (!kf_imp_num(sj, &smooth) || smooth != 0)) BAD("label_smoothing other than 0");
    json_t *yt = json_object_get(y->node ? y->node : y->meta, "dtype");
    const char *ydt = json_is_string(yt) ? json_string_value(yt) : "?";
    if (strcmp(ydt, "i64") == 0) return picked_loss(L, v, n, 1);
    if (!kf_imp_is_null(rj) && (!kf_imp_num(rj, &r) || (r != 0 && r != 1 && r != 2)))
        BAD("reduction other than 0 none, 1 mean or 2 sum");
    if (kf_imp_rank(x) != 2)
        BAD("logits that are not [batch, classes] (no batch, or K-dimensional inputs [N, C, d1, ...])");
    int64_t N = kf_imp_dim(x, 0), C = kf_imp_dim(x, 1);
    /* class probabilities */
    if (strcmp(ydt, "f32") != 0 || kf_imp_rank(y) != 2 || kf_imp_dim(y, 0) != N || kf_imp_dim(y, 1) != C) {
        snprintf(msg, sizeof msg, "a target of dtype %s that is neither i64 class indices [N] nor f32 class "
                 "probabilities shaped like the logits", ydt);
        BAD(msg);
    }
    if (!kf_imp_is_null(wj)) BAD("class weights (weight is not None) with class probabilities");
    snprintf(ls, sizeof ls, "log_softmax(%s, axis=1)", x->kf);
    snprintf(e, sizeof e, "sum(%s * -%s, axes=[1])", y->kf, ls);
    if (r == 0) {
        kf_imp_emit(L, v, e);
        return 1;
    }
    kf_imp_tmp(L, v, e, row, sizeof row);
    snprintf(e, sizeof e, "%s(%s)", r == 1 ? "mean" : "sum", row);
    kf_imp_emit(L, v, e);
    return 1;
}

/* gather(self, dim, index, sparse_grad=False): kforge's gather (sparse_grad only changes
 * the gradient's layout). */
static int lower_gather(lower *L, lval *v) {
    json_t *n = v->node;
    const char *why = NULL;
    char a[160], b[160], e[400];
    NEED(kf_imp_term(L, kf_imp_arg(n, 0, "self"), a, sizeof a, &why));
    json_t *dim = kf_imp_arg(n, 1, "dim");
    if (!json_is_integer(dim)) BAD("dim is not an integer");
    NEED(kf_imp_term(L, kf_imp_arg(n, 2, "index"), b, sizeof b, &why));
    snprintf(e, sizeof e, "gather(%s, %s, axis=%lld)", a, b, (long long)json_integer_value(dim));
    kf_imp_emit(L, v, e);
    return 1;
}

/* Whether node n makes a tensor of zeros (zeros_like, zeros, new_zeros, full/full_like
 * of 0): concatenation leaves it out, since the padding it would fill is zero already. */
static int is_zeros(json_t *n) {
    const char *t = kf_imp_node_target(n);
    if (!t) return 0;
    if (kf_imp_target_is(t, "aten.zeros_like") || kf_imp_target_is(t, "aten.zeros") ||
        kf_imp_target_is(t, "aten.new_zeros"))
        return 1;
    /* full(size, fill_value), full_like(self, fill_value), new_full(self, size, fill_value) */
    size_t at;
    if (kf_imp_target_is(t, "aten.full") || kf_imp_target_is(t, "aten.full_like")) at = 1;
    else if (kf_imp_target_is(t, "aten.new_full")) at = 2;
    else return 0;
    double d;
    return kf_imp_num(kf_imp_arg(n, at, "fill_value"), &d) && d == 0 && !signbit(d);
}

/* cat(tensors, dim=0): each part padded with zeros to the result's extent along dim, at
 * its offset, and the padded parts summed (exact: x + 0 is x for every float but -0,
 * which becomes +0). A part of zeros (zeros_like, ...) is the padding itself. */
static int lower_cat(lower *L, lval *v) {
    json_t *n = v->node;
    const char *why = NULL;
    json_t *list = kf_imp_arg(n, 0, "tensors"), *dj = kf_imp_arg(n, 1, "dim");
    if (!json_is_array(list) || json_array_size(list) == 0) BAD("tensors is not a list of tensors");
    int r = (int)json_array_size(json_object_get(n, "shape"));
    long long dim = 0;
    if (!kf_imp_is_null(dj)) {
        if (!json_is_integer(dj)) BAD("dim is not an integer");
        dim = json_integer_value(dj);
    }
    if (dim < -r || dim >= r) BAD("dim is out of range");
    int k = (int)(dim < 0 ? dim + r : dim);
    int64_t total = json_integer_value(json_array_get(json_object_get(n, "shape"), (size_t)k)), at = 0;
    char e[1500] = "", part[300];
    size_t used = 0;
    int parts = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *a = json_array_get(list, i), *ref = json_is_object(a) ? json_object_get(a, "ref") : NULL;
        lval *src = NULL;
        for (int j = 0; json_is_string(ref) && j < L->nv; j++)
            if (strcmp(L->v[j].name, json_string_value(ref)) == 0) src = &L->v[j];
        if (!src) BAD("a part that is not a tensor of the graph");
        int64_t len = kf_imp_dim(src, k);
        if (kf_imp_rank(src) != r || len < 1) BAD("a part whose rank differs from the result's or whose size is unknown");
        if (src->node && is_zeros(src->node)) {
            at += len;
            continue;
        }
        lval *x = kf_imp_operand(L, a, &why);
        NEED(x);
        size_t m = (size_t)snprintf(part, sizeof part, "pad(%s, pads=[", x->kf);
        for (int d = r - 1; d >= k; d--)
            m += (size_t)snprintf(part + m, sizeof part - m, "%s%lld, %lld", d < r - 1 ? ", " : "",
                                  (long long)(d == k ? at : 0), (long long)(d == k ? total - at - len : 0));
        snprintf(part + m, sizeof part - m, "])");
        if (len == total) snprintf(part, sizeof part, "%s", x->kf);
        used += (size_t)snprintf(e + used, used < sizeof e ? sizeof e - used : 0, "%s%s", parts ? " + " : "", part);
        if (used >= sizeof e) BAD("too many parts");
        parts++;
        at += len;
    }
    if (at != total) BAD("the parts' sizes along dim do not add up to the result's");
    if (!parts) BAD("a concatenation of zeros only (a tensor of constants is not a kforge task)");
    kf_imp_emit(L, v, e);
    return 1;
}

/* narrow(self, dim, start, length): slice [start, start + length). */
static int lower_narrow(lower *L, lval *v) {
    json_t *n = v->node;
    const char *why = NULL;
    char e[300];
    lval *x = kf_imp_operand(L, kf_imp_arg(n, 0, "self"), &why);
    NEED(x);
    json_t *dj = kf_imp_arg(n, 1, "dim"), *sj = kf_imp_arg(n, 2, "start"), *lj = kf_imp_arg(n, 3, "length");
    if (!json_is_integer(dj) || !json_is_integer(sj) || !json_is_integer(lj)) BAD("dim, start or length is not an integer");
    long long dim = json_integer_value(dj), start = json_integer_value(sj), len = json_integer_value(lj);
    int64_t size = kf_imp_dim(x, (int)dim);
    if (size < 1) BAD("dim is out of range");
    if (start < 0) start += size;
    if (start < 0 || len < 1 || start + len > size) BAD("start and length are out of range or empty");
    snprintf(e, sizeof e, "slice(%s, dim=%lld, start=%lld, end=%lld)", x->kf, dim, start, start + len);
    kf_imp_emit(L, v, e);
    return 1;
}

/* torch.diag(x, diagonal): a vector on the diagonal of a square matrix (diag_embed), or
 * a matrix's diagonal (diagonal). */
static int lower_diag(lower *L, lval *v) {
    json_t *n = v->node;
    const char *why = NULL;
    char e[300];
    lval *x = kf_imp_operand(L, kf_imp_arg(n, 0, "self"), &why);
    NEED(x);
    json_t *kj = kf_imp_arg(n, 1, "diagonal");
    long long k = 0;
    if (!kf_imp_is_null(kj)) {
        if (!json_is_integer(kj)) BAD("diagonal is not an integer");
        k = json_integer_value(kj);
    }
    int r = kf_imp_rank(x);
    if (r != 1 && r != 2) BAD("diag of a tensor that is not a vector or a matrix");
    snprintf(e, sizeof e, "%s(%s, offset=%lld)", r == 1 ? "diag_embed" : "diagonal", x->kf, k);
    kf_imp_emit(L, v, e);
    return 1;
}


/* "[a, b, c]" of n integers into out */
static void ints_text(const int64_t *v, int n, char *out, size_t cap) {
    size_t u = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < n && u < cap; i++) u += (size_t)snprintf(out + u, cap - u, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (u < cap) snprintf(out + u, cap - u, "]");
}

/* x's letters (of the equation) reordered to `want` (a permutation of them): x itself or a
 * permute of it, into out. */
static void permuted(const char *x, const char *have, const char *want, char *out, size_t cap) {
    int64_t p[16];
    int n = (int)strlen(want), ident = 1;
    for (int i = 0; i < n; i++) {
        p[i] = strchr(have, want[i]) - have;
        ident &= p[i] == i;
    }
    if (ident) { snprintf(out, cap, "%s", x); return; }
    char dims[128];
    ints_text(p, n, dims, sizeof dims);
    snprintf(out, cap, "permute(%s, dims=%s)", x, dims);
}

/* torch.einsum of one or two operands without ellipses or repeated letters: letters only one
 * operand has and the result lacks are summed first; then the batch letters (both operands
 * and the result), the free letters of each and the contracted ones (both, not the result)
 * make a batched matrix product [B, M, K] x [B, K, N], reshaped and permuted to the result. */
static int lower_einsum(lower *L, lval *v) {
    json_t *n = v->node;
    const char *why = NULL;
    json_t *eq = kf_imp_arg(n, 0, "equation"), *ops = kf_imp_arg(n, 1, "tensors");
    if (!json_is_string(eq) || !json_is_array(ops)) BAD("the equation is not a string with a list of tensors");
    size_t nops = json_array_size(ops);
    if (nops < 1 || nops > 2) BAD("einsum of more than two operands");
    char lhs[2][16] = {"", ""}, out[16] = "";
    const char *q = json_string_value(eq);
    int k = 0, m = 0, has_arrow = 0;
    for (; *q; q++) {
        if (*q == ' ') continue;
        if (*q == ',') { k++; m = 0; if (k > 1) BAD("einsum of more than two operands"); continue; }
        if (q[0] == '-' && q[1] == '>') { has_arrow = 1; q++; break; }
        if (*q == '.') BAD("an einsum with an ellipsis ('...')");
        if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z')) || m >= 15) BAD("an einsum equation kforge cannot read");
        lhs[k][m++] = *q, lhs[k][m] = 0;
    }
    if (has_arrow)
        for (q++, m = 0; *q; q++) {
            if (*q == ' ') continue;
            if (*q == '.') BAD("an einsum with an ellipsis ('...')");
            if (m >= 15) BAD("an einsum equation kforge cannot read");
            out[m++] = *q, out[m] = 0;
        }
    else /* implicit: the letters that appear once, in alphabetical order */
        for (char c = (m = 0, 'A'); c <= 'z'; c++) {
            int cnt = (strchr(lhs[0], c) && c) + (nops > 1 && strchr(lhs[1], c) && c);
            if (cnt == 1 && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) out[m++] = c, out[m] = 0;
        }
    if ((size_t)k + 1 != nops) BAD("the equation's operands and the tensors differ in number");
    lval *x[2] = {NULL, NULL};
    int64_t size[128] = {0};
    for (size_t i = 0; i < nops; i++) {
        x[i] = kf_imp_operand(L, json_array_get(ops, i), &why);
        NEED(x[i]);
        if (kf_imp_rank(x[i]) != (int)strlen(lhs[i])) BAD("an operand's rank differs from its letters");
        for (int j = 0; lhs[i][j]; j++) {
            unsigned char c = (unsigned char)lhs[i][j];
            if (strchr(lhs[i] + j + 1, c)) BAD("a letter repeated in one operand (a diagonal)");
            int64_t d = kf_imp_dim(x[i], j);
            if (size[c] && size[c] != d) BAD("a letter with two sizes (broadcasting in einsum)");
            size[c] = d;
        }
    }
    for (int j = 0; out[j]; j++)
        if (!size[(unsigned char)out[j]] || strchr(out + j + 1, out[j])) BAD("a result letter that no operand has, or twice");
    /* sum the letters only one operand has and the result lacks */
    char term[2][600], have[2][16];
    for (size_t i = 0; i < nops; i++) {
        int64_t ax[16];
        int na = 0, h = 0;
        for (int j = 0; lhs[i][j]; j++) {
            char c = lhs[i][j];
            if (!strchr(out, c) && !(nops > 1 && strchr(lhs[1 - i], c))) ax[na++] = j;
            else have[i][h++] = c;
        }
        have[i][h] = 0;
        if (na) {
            char axs[128];
            ints_text(ax, na, axs, sizeof axs);
            snprintf(term[i], sizeof term[i], "sum(%s, axes=%s)", x[i]->kf, axs);
        } else {
            snprintf(term[i], sizeof term[i], "%s", x[i]->kf);
        }
    }
    char e[1800];
    if (nops == 1) {
        permuted(term[0], have[0], out, e, sizeof e);
        kf_imp_emit(L, v, e);
        return 1;
    }
    char batch[16] = "", fa[16] = "", fb[16] = "", ct[16] = "";
    int nb = 0, nfa = 0, nfb = 0, nct = 0;
    for (int j = 0; out[j]; j++)
        if (strchr(have[0], out[j]) && strchr(have[1], out[j])) batch[nb++] = out[j];
    for (int j = 0; have[0][j]; j++) {
        char c = have[0][j];
        if (!strchr(have[1], c)) fa[nfa++] = c;
        else if (!strchr(out, c)) ct[nct++] = c;
    }
    for (int j = 0; have[1][j]; j++)
        if (!strchr(have[0], have[1][j])) fb[nfb++] = have[1][j];
    batch[nb] = fa[nfa] = fb[nfb] = ct[nct] = 0;
    int64_t B = 1, M = 1, K = 1, N = 1;
    for (int j = 0; batch[j]; j++) B *= size[(unsigned char)batch[j]];
    for (int j = 0; fa[j]; j++) M *= size[(unsigned char)fa[j]];
    for (int j = 0; fb[j]; j++) N *= size[(unsigned char)fb[j]];
    for (int j = 0; ct[j]; j++) K *= size[(unsigned char)ct[j]];
    char wa[48], wb[48], pa[700], pb[700], res[64];
    snprintf(wa, sizeof wa, "%s%s%s", batch, fa, ct);
    snprintf(wb, sizeof wb, "%s%s%s", batch, ct, fb);
    permuted(term[0], have[0], wa, pa, sizeof pa);
    permuted(term[1], have[1], wb, pb, sizeof pb);
    snprintf(res, sizeof res, "%s%s%s", batch, fa, fb);
    int64_t rs[16];
    int nr = 0;
    for (int j = 0; res[j]; j++) rs[nr++] = size[(unsigned char)res[j]];
    char rsh[128], prod_name[96];
    ints_text(rs, nr, rsh, sizeof rsh);
    snprintf(e, sizeof e, "reshape(matmul(reshape(%s, shape=[%lld, %lld, %lld]), reshape(%s, shape=[%lld, %lld, %lld])), shape=%s)",
             pa, (long long)B, (long long)M, (long long)K, pb, (long long)B, (long long)K, (long long)N, nr ? rsh : "[1]");
    if (!nr) BAD("an einsum to a scalar (use sum of a product)");
    if (strcmp(res, out) != 0) { /* the product, then its permute to the result's order */
        kf_imp_tmp(L, v, e, prod_name, sizeof prod_name);
        permuted(prod_name, res, out, e, sizeof e);
    }
    kf_imp_emit(L, v, e);
    return 1;
}

int kf_imp_lower_nn(lower *L, lval *v, const char *t) {
    json_t *n = v->node;
    if (kf_imp_target_is(t, "aten.smooth_l1_loss") || kf_imp_target_is(t, "aten.huber_loss") ||
        kf_imp_target_is(t, "aten.mse_loss") || kf_imp_target_is(t, "aten.l1_loss"))
        return lower_pointwise_loss(L, v, t);
    if (kf_imp_target_is(t, "aten.kl_div")) return lower_kl_div(L, v);
    if (kf_imp_target_is(t, "aten.cross_entropy_loss")) return lower_cross_entropy(L, v);
    if (kf_imp_target_is(t, "aten.nll_loss") || kf_imp_target_is(t, "aten.nll_loss_nd")) return picked_loss(L, v, n, 0);
    if (kf_imp_target_is(t, "aten.nll_loss_forward")) { /* (output, total_weight): its getitems lower it */
        v->is_tuple = 1;
        return 1;
    }
    if (kf_imp_target_is(t, "aten.gather")) return lower_gather(L, v);
    if (kf_imp_target_is(t, "aten.linalg_vector_norm")) return lower_vector_norm(L, v);
    if (kf_imp_target_is(t, "aten.triplet_margin_loss")) return lower_triplet(L, v);
    if (kf_imp_target_is(t, "aten.instance_norm")) return lower_instance_norm(L, v);
    if (kf_imp_target_is(t, "aten.scaled_dot_product_attention")) return lower_sdpa(L, v);
    if (kf_imp_target_is(t, "aten.cat") || kf_imp_target_is(t, "aten.concat") || kf_imp_target_is(t, "aten.concatenate"))
        return lower_cat(L, v);
    if (kf_imp_target_is(t, "aten.narrow")) return lower_narrow(L, v);
    if (kf_imp_target_is(t, "aten.diag")) return lower_diag(L, v);
    if (kf_imp_target_is(t, "aten.einsum")) return lower_einsum(L, v);
    if (kf_imp_target_is(t, "aten.broadcast_tensors")) {
        if (!json_is_array(kf_imp_arg(n, 0, "tensors"))) BAD("tensors is not a list");
        v->is_tuple = 1; /* its getitems lower it */
        return 1;
    }
    return -1;
}

int kf_imp_getitem_nn(lower *L, lval *v, const lval *tuple, long long k) {
    json_t *n = v->node;
    const char *why = NULL;
    const char *t = tuple->node ? kf_imp_node_target(tuple->node) : NULL;
    if (t && kf_imp_target_is(t, "aten.nll_loss_forward")) {
        if (k != 0) BAD("total_weight of nll_loss_forward (only the loss is lowered)");
        return picked_loss(L, v, tuple->node, 0);
    }
    if (!t || !kf_imp_target_is(t, "aten.broadcast_tensors")) return -1;
    json_t *list = kf_imp_arg(tuple->node, 0, "tensors");
    if (k < 0 || (size_t)k >= json_array_size(list)) BAD("getitem out of range");
    lval *x = kf_imp_operand(L, json_array_get(list, (size_t)k), &why);
    NEED(x);
    /* the part with the result's shape: itself, else an expand of it */
    json_t *shape = json_object_get(n, "shape");
    int same = kf_imp_rank(x) == (int)json_array_size(shape);
    for (int d = 0; same && d < kf_imp_rank(x); d++)
        same = kf_imp_dim(x, d) == json_integer_value(json_array_get(shape, (size_t)d));
    if (same) {
        snprintf(v->kf, sizeof v->kf, "%s", x->kf);
        return 1;
    }
    char e[300], ax[200];
    if (!kf_imp_axes_text(shape, ax, sizeof ax) || !ax[0]) BAD("a broadcast to a shape kforge cannot read");
    snprintf(e, sizeof e, "expand(%s, shape=%s)", x->kf, ax);
    kf_imp_emit(L, v, e);
    return 1;
}
