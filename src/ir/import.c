/*
 * PyTorch graph import: a task bundle's graph.json (written by python/kforge_torch/importer.py
 * from torch.export; format in docs/pytorch.md) lowered to a .kf task, which the parser then
 * type-checks into the graph IR like any task.
 *
 * Lowering goes by ATen op, never by model: each supported target has one rule that writes
 * the .kf expression with the same meaning (attribute defaults as PyTorch's schema gives
 * them). Ops that only relabel data (detach, clone, alias, eval-mode dropout) pass their
 * operand through; views (permute, transpose, t, slice, flip, expand, constant_pad_nd,
 * unfold) become the view ops of their records, which the planner folds into the reads of
 * the stage that uses them (a transpose feeding a matmul is its transposed layout). Only
 * nodes the outputs depend on are lowered, so a tuple's
 * unused half (max.dim's indices) costs nothing. Every node that has no rule is named in
 * the error, with its op, so that a user sees all of them at once.
 *
 * After parsing, each output's dtype and shape are compared with what PyTorch recorded: a
 * rule that got an attribute wrong shows up here rather than as a wrong kernel.
 */
#include "import_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kf_words[] = {"task", "input", "output", "tolerance", "range", "true", "false"};

static int name_taken_by_language(const char *s) {
    for (size_t i = 0; i < sizeof kf_words / sizeof *kf_words; i++)
        if (strcmp(s, kf_words[i]) == 0) return 1;
    return kf_op_lookup(s) != KF_OP_COUNT;
}

/* FX names are identifiers already; keep them unless the .kf language owns the word. */
static void kf_name(const char *fx, char *out, size_t cap) {
    snprintf(out, cap, "%s%s", fx, name_taken_by_language(fx) ? "_v" : "");
}

/* The task name as the .kf parser takes it (an identifier, under 64 bytes), whatever the
 * bundle says: a name from a file name such as '10_3D_...' began with a digit and did not
 * parse ("malformed number"). Other characters become '_', a leading digit gets a 't'. */
static void task_ident(const char *name, char *out, size_t cap) {
    size_t n = 0;
    if (name[0] >= '0' && name[0] <= '9') out[n++] = 't';
    for (const char *p = name; *p && n + 1 < cap; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        out[n++] = ok ? c : '_';
    }
    out[n] = 0;
    if (!n) snprintf(out, cap, "model");
}

static lval *find(lower *L, const char *name) {
    for (int i = 0; i < L->nv; i++)
        if (strcmp(L->v[i].name, name) == 0) return &L->v[i];
    return NULL;
}

static const char *node_name(json_t *n) { return json_string_value(json_object_get(n, "name")); }
static const char *node_target(json_t *n) { return json_string_value(json_object_get(n, "target")); }

static void note_unsupported(lower *L, json_t *n, const char *why) {
    kf_buf_printf(&L->unsupported, "%s  node '%s' (%s): %s", L->nunsupported ? "\n" : "",
                  node_name(n), node_target(n), why);
    L->nunsupported++;
}

/* The i-th positional argument, or the keyword argument kw, or NULL. */
static json_t *arg(json_t *n, size_t i, const char *kw) {
    json_t *a = json_object_get(n, "args");
    if (i < json_array_size(a)) return json_array_get(a, i);
    return kw ? json_object_get(json_object_get(n, "kwargs"), kw) : NULL;
}

static int is_null(json_t *a) { return !a || json_is_null(a); }

/* A numeric literal argument (ints, floats, booleans) into *d; 0 if it is not one. */
static int num(json_t *a, double *d) {
    if (json_is_number(a)) { *d = json_number_value(a); return 1; }
    if (json_is_boolean(a)) { *d = json_is_true(a); return 1; }
    return 0;
}

static int lower_value(lower *L, lval *v);

/* A number as the shortest text that reads back to the same double (1e-05, not
 * 1.0000000000000001e-05). */
static const char *numtxt(double d, char *buf, size_t cap) {
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) break;
    }
    return buf;
}

/* The operand an argument names: a tensor (lowered on demand) or NULL with the reason in
 * *why when it is not one. */
static lval *operand(lower *L, json_t *a, const char **why) {
    json_t *ref = json_is_object(a) ? json_object_get(a, "ref") : NULL;
    if (!json_is_string(ref)) { *why = "expected a tensor operand"; return NULL; }
    lval *v = find(L, json_string_value(ref));
    if (!v) { *why = "refers to an unknown value"; return NULL; }
    if (!lower_value(L, v)) { *why = NULL; return NULL; } /* reported at its own node */
    if (v->is_tuple) { *why = "uses a tuple where a tensor is needed"; return NULL; }
    return v;
}

/* An operand as .kf text: a tensor's name, or a number literal. */
static int term(lower *L, json_t *a, char *out, size_t cap, const char **why) {
    double d;
    if (num(a, &d)) {
        numtxt(d, out, cap);
        if (!isfinite(d)) { *why = "a non-finite constant"; return 0; }
        return 1;
    }
    lval *v = operand(L, a, why);
    if (!v) return 0;
    snprintf(out, cap, "%s", v->kf);
    return 1;
}

/* An axis list attribute: "[a, b]" from an int or a list of ints; "" for all axes. */
static int axes_text(json_t *a, char *out, size_t cap) {
    out[0] = 0;
    if (is_null(a)) return 1;
    if (json_is_integer(a)) { snprintf(out, cap, "[%lld]", (long long)json_integer_value(a)); return 1; }
    if (!json_is_array(a)) return 0;
    if (json_array_size(a) == 0) return 1; /* amax(x, []) reduces everything */
    size_t n = 0;
    n += (size_t)snprintf(out + n, cap - n, "[");
    for (size_t i = 0; i < json_array_size(a) && n < cap; i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_integer(e)) return 0;
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", i ? ", " : "", (long long)json_integer_value(e));
    }
    if (n < cap) snprintf(out + n, cap - n, "]");
    return 1;
}

static void shape_text(json_t *shape, char *out, size_t cap) {
    size_t n = (size_t)snprintf(out, cap, "[");
    for (size_t i = 0; i < json_array_size(shape) && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", i ? ", " : "", (long long)json_integer_value(json_array_get(shape, i)));
    if (n < cap) snprintf(out + n, cap - n, "]");
}

static int rank_of(json_t *n) { return (int)json_array_size(json_object_get(n, "shape")); }

/* Writes "NAME = EXPR" for v; the output prefix is added later by the caller. */
static void emit(lower *L, lval *v, const char *expr) {
    kf_name(v->name, v->kf, sizeof v->kf);
    v->expr = kf_strdup(expr);
    v->order = L->nstmt++;
}

/* Whether the ATen target is one of names (a NULL-terminated list of "op" prefixes such as
 * "aten.relu." matching every overload). */
static int target_is(const char *t, const char *op) {
    size_t n = strlen(op);
    return strncmp(t, op, n) == 0 && (t[n] == '.' || t[n] == 0);
}

/* The helpers import_nn.c's rules share (import_int.h). */
void kf_imp_unsupported(lower *L, json_t *n, const char *why) { note_unsupported(L, n, why); }
json_t *kf_imp_arg(json_t *n, size_t i, const char *kw) { return arg(n, i, kw); }
int kf_imp_is_null(json_t *a) { return is_null(a); }
int kf_imp_num(json_t *a, double *d) { return num(a, d); }
const char *kf_imp_numtxt(double d, char *buf, size_t cap) { return numtxt(d, buf, cap); }
lval *kf_imp_operand(lower *L, json_t *a, const char **why) { return operand(L, a, why); }
int kf_imp_term(lower *L, json_t *a, char *out, size_t cap, const char **why) { return term(L, a, out, cap, why); }
int kf_imp_axes_text(json_t *a, char *out, size_t cap) { return axes_text(a, out, cap); }
void kf_imp_emit(lower *L, lval *v, const char *expr) { emit(L, v, expr); }
int kf_imp_target_is(const char *t, const char *op) { return target_is(t, op); }
const char *kf_imp_node_target(json_t *n) { return node_target(n); }

void kf_imp_tmp(lower *L, const lval *v, const char *expr, char *name, size_t cap) {
    if (L->nt == L->tcap) {
        L->tcap = L->tcap ? 2 * L->tcap : 16;
        L->t = kf_realloc(L->t, (size_t)L->tcap * sizeof *L->t);
    }
    ltmp *t = &L->t[L->nt];
    char base[64];
    kf_name(v->name, base, sizeof base);
    snprintf(t->kf, sizeof t->kf, "%s__%d", base, L->nt); /* FX names have no double '_' before a number */
    t->expr = kf_strdup(expr);
    t->order = L->nstmt++;
    L->nt++;
    snprintf(name, cap, "%s", t->kf);
}

int kf_imp_rank(const lval *v) {
    json_t *m = v->node ? v->node : v->meta;
    json_t *s = json_object_get(m, "shape");
    return json_is_array(s) ? (int)json_array_size(s) : -1;
}

int64_t kf_imp_dim(const lval *v, int k) {
    json_t *s = json_object_get(v->node ? v->node : v->meta, "shape");
    int r = json_is_array(s) ? (int)json_array_size(s) : -1;
    if (k < 0) k += r;
    if (r < 0 || k < 0 || k >= r || !json_is_integer(json_array_get(s, (size_t)k))) return -1;
    return json_integer_value(json_array_get(s, (size_t)k));
}

static const char *const passthrough[] = {"aten.detach", "aten.clone", "aten.contiguous", "aten.alias",
                                          "aten.lift_fresh_copy"};

/* A record's attributes from the ATen arguments its schema names (ints, int lists, finite
 * numbers; PyTorch's defaults where absent), appended to e as ", name=value". 0, or -1 with
 * the reason in msg. */
static int record_attrs(json_t *n, const kf_op_def *d, char *e, size_t cap, size_t *used, char *msg, size_t mcap) {
    double d1;
    for (int k = 0; d->attrs[k].name; k++) {
        const kf_attr_def *ad = &d->attrs[k];
        json_t *val = ad->aten ? arg(n, (size_t)atoi(ad->aten), ad->name) : NULL;
        if (is_null(val)) continue;
        char txt[200];
        if (ad->type == KF_ATTR_INT) {
            if (!json_is_integer(val)) {
                snprintf(msg, mcap, "%s is not an integer", ad->name);
                return -1;
            }
            long long x = json_integer_value(val);
            if (x > (1ll << 53) || x < -(1ll << 53)) { /* slice's end=INT64_MAX: "to the end" */
                if (!strcmp(ad->dflt, "max") && x > 0) continue;
                snprintf(msg, mcap, "%s %lld is out of range", ad->name, x);
                return -1;
            }
            snprintf(txt, sizeof txt, "%lld", x);
        } else if (ad->type == KF_ATTR_INTS) {
            if (json_is_integer(val)) {
                snprintf(txt, sizeof txt, "[%lld]", (long long)json_integer_value(val));
            } else {
                if (!json_is_array(val) || json_array_size(val) > KF_MAX_INTS) {
                    snprintf(msg, mcap, "%s is not a list of integers", ad->name);
                    return -1;
                }
                size_t m = (size_t)snprintf(txt, sizeof txt, "[");
                for (size_t i = 0; i < json_array_size(val) && m < sizeof txt; i++) {
                    json_t *x = json_array_get(val, i);
                    if (!json_is_integer(x)) {
                        snprintf(msg, mcap, "%s is not a list of integers", ad->name);
                        return -1;
                    }
                    m += (size_t)snprintf(txt + m, sizeof txt - m, "%s%lld", i ? ", " : "",
                                          (long long)json_integer_value(x));
                }
                if (m < sizeof txt) snprintf(txt + m, sizeof txt - m, "]");
            }
        } else if (ad->type == KF_ATTR_FLOAT && num(val, &d1) && isfinite(d1)) {
            numtxt(d1, txt, sizeof txt);
        } else if (ad->type == KF_ATTR_BOOL && json_is_boolean(val)) {
            snprintf(txt, sizeof txt, "%s", json_is_true(val) ? "true" : "false");
        } else if (ad->type == KF_ATTR_INTS && json_is_string(val)) {
            snprintf(msg, mcap, "%s '%s' (kforge takes it as integers)", ad->name, json_string_value(val));
            return -1;
        } else {
            snprintf(msg, mcap, "%s is not a finite number", ad->name);
            return -1;
        }
        *used += (size_t)snprintf(e + *used, *used < cap ? cap - *used : 0, ", %s=%s", ad->name, txt);
    }
    return 0;
}

/* ------------------------------------------------------------------ pooling */

/* A pooling argument (kernel_size, stride, padding, dilation, output_size) as nd integers:
 * an int, or a list of 1 (for every dim) or nd; absent, null or [] gives dflt. 0 when it
 * is none of these. */
static int pool_ints(json_t *a, int nd, long long dflt, long long *out) {
    size_t k = json_is_array(a) ? json_array_size(a) : 0;
    if (is_null(a) || (json_is_array(a) && k == 0)) {
        for (int i = 0; i < nd; i++) out[i] = dflt;
        return 1;
    }
    if (json_is_integer(a)) {
        for (int i = 0; i < nd; i++) out[i] = json_integer_value(a);
        return 1;
    }
    if (k != 1 && k != (size_t)nd) return 0;
    for (int i = 0; i < nd; i++) {
        json_t *e = json_array_get(a, k == 1 ? 0 : (size_t)i);
        if (!json_is_integer(e)) return 0;
        out[i] = json_integer_value(e);
    }
    return 1;
}

/* "[a0, b0, a1, b1, ...]" for F.pad (last dim first) from per-dim (before, after) pairs;
 * returns whether any is nonzero. */
static int pad_list(int nd, const long long *lo, const long long *hi, char *out, size_t cap) {
    size_t m = (size_t)snprintf(out, cap, "[");
    int any = 0;
    for (int i = nd - 1; i >= 0 && m < cap; i--) {
        m += (size_t)snprintf(out + m, cap - m, "%s%lld, %lld", i == nd - 1 ? "" : ", ", lo[i], hi[i]);
        any |= lo[i] != 0 || hi[i] != 0;
    }
    if (m < cap) snprintf(out + m, cap - m, "]");
    return any;
}

/* Whether spatial dim i has windows of more than one element, or strides over some. */
static int pool_windowed(long long k, long long s) { return k != 1 || s != 1; }

/* src's windows, then ", axes=[...]" (the window dims) into o: pad(src, pads, value) (when
 * a pad is nonzero), then one unfold per windowed spatial dim (dims r-nd .. r-1), each
 * adding a trailing window dim; the caller writes the reduction's name and '(' first. */
static void pool_windows(kf_buf *o, const char *src, int r, int nd, const long long *lo, const long long *hi,
                         const char *value, const long long *k, const long long *s, const long long *d) {
    char pads[200];
    int w = 0;
    for (int i = 0; i < nd; i++) w += pool_windowed(k[i], s[i]);
    for (int i = 0; i < w; i++) kf_buf_puts(o, "unfold(");
    if (pad_list(nd, lo, hi, pads, sizeof pads)) kf_buf_printf(o, "pad(%s, pads=%s, value=%s)", src, pads, value);
    else kf_buf_puts(o, src);
    for (int i = 0; i < nd; i++) {
        if (!pool_windowed(k[i], s[i])) continue;
        kf_buf_printf(o, ", dim=%d, size=%lld, step=%lld", r - nd + i, k[i], s[i]);
        if (d[i] != 1) kf_buf_printf(o, ", dilation=%lld", d[i]);
        kf_buf_puts(o, ")");
    }
    kf_buf_puts(o, ", axes=[");
    for (int i = w; i >= 1; i--) kf_buf_printf(o, "%s%d", i == w ? "" : ", ", -i);
    kf_buf_puts(o, "])");
}

static int pool_dims(const char *t) {
    const char *p = strstr(t, "pool");
    return p && p[4] >= '1' && p[4] <= '3' && p[5] == 'd' ? p[4] - '0' : 0;
}

static int is_pool_target(const char *t) {
    static const char *const ops[] = {"aten.max_pool", "aten.avg_pool", "aten.adaptive_avg_pool",
                                      "aten._adaptive_avg_pool"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (strncmp(t, ops[i], strlen(ops[i])) == 0 && pool_dims(t)) return 1;
    return 0;
}

/* max_pool{1,2,3}d (and the values of *_with_indices), avg_pool{1,2,3}d and
 * adaptive_avg_pool{1,2,3}d of node n, written as v's statement: a pad (max pools pad with
 * -inf, average pools with 0; ceil_mode's extra windows read further padding on the right),
 * one unfold per spatial dim and a reduction over the window dims. PyTorch's output size
 * per dim is floor-or-ceil((L + 2p - d(k-1) - 1) / s) + 1, one less when ceil_mode's last
 * window would start in the right padding; an average's divisor is the window's size, or
 * (ceil_mode's windows past the padding, count_include_pad=False) a count per output
 * position: the window sum of ones, from full_like. Returns 1, or 0 with the reason noted. */
static int lower_pool(lower *L, lval *v, json_t *n, const char *t) {
    const char *why = NULL;
    char msg[200];
    int nd = pool_dims(t), mx = strncmp(t, "aten.max_pool", 13) == 0;
    int adaptive = strstr(t, "adaptive") != NULL;
#define PNOTE(m) do { note_unsupported(L, v->node, m); return 0; } while (0)
    lval *x = operand(L, arg(n, 0, "self"), &why);
    if (!x) {
        if (why) note_unsupported(L, v->node, why);
        return 0;
    }
    json_t *xs = json_object_get(x->node ? x->node : x->meta, "shape");
    int r = (int)json_array_size(xs);
    if (r < nd + 1 || r + nd > KF_MAX_DIMS) PNOTE("an input of a rank the pooling does not take");
    long long len[3], k[3], s[3], p[3], d[3] = {1, 1, 1}, O[3], R[3];
    for (int i = 0; i < nd; i++) len[i] = json_integer_value(json_array_get(xs, (size_t)(r - nd + i)));
    kf_buf o = {0};
    char ax[64], e[64];
    if (adaptive) {
        if (!pool_ints(arg(n, 1, "output_size"), nd, -1, O)) PNOTE("output_size is not a list of integers");
        int all1 = 1, nwin = 0;
        for (int i = 0; i < nd; i++) {
            if (O[i] < 0) O[i] = len[i]; /* None keeps the size */
            if (O[i] < 1 || len[i] % O[i]) {
                snprintf(msg, sizeof msg, "adaptive pooling of %lld to %lld elements: the windows differ in size "
                         "(only an output size that divides the input is lowered)", len[i], O[i]);
                PNOTE(msg);
            }
            all1 &= O[i] == 1;
            k[i] = s[i] = len[i] / O[i];
            p[i] = R[i] = 0;
            nwin += pool_windowed(k[i], s[i]);
        }
        if (all1) { /* global average pooling */
            size_t m = (size_t)snprintf(ax, sizeof ax, "[");
            for (int i = 0; i < nd; i++) m += (size_t)snprintf(ax + m, sizeof ax - m, "%s%d", i ? ", " : "", r - nd + i);
            snprintf(ax + m, sizeof ax - m, "]");
            kf_buf_printf(&o, "mean(%s, axes=%s, keepdim=true)", x->kf, ax);
        } else if (!nwin) { /* every output size is the input's: the input itself */
            snprintf(v->kf, sizeof v->kf, "%s", x->kf);
            return 1;
        } else {
            kf_buf_puts(&o, "mean(");
            pool_windows(&o, x->kf, r, nd, p, R, "0", k, s, d);
        }
        emit(L, v, o.data);
        kf_buf_free(&o);
        return 1;
    }
    int ceil_mode = 0, cip = 1;
    double divisor = 0;
    json_t *dv = NULL;
    if (!pool_ints(arg(n, 1, "kernel_size"), nd, -1, k)) PNOTE("kernel_size is not a list of integers");
    if (!pool_ints(arg(n, 2, "stride"), nd, -1, s)) PNOTE("stride is not a list of integers");
    if (!pool_ints(arg(n, 3, "padding"), nd, 0, p)) PNOTE("padding is not a list of integers");
    if (mx && !pool_ints(arg(n, 4, "dilation"), nd, 1, d)) PNOTE("dilation is not a list of integers");
    ceil_mode = json_is_true(arg(n, mx ? 5 : 4, "ceil_mode"));
    if (!mx) {
        cip = !json_is_false(arg(n, 5, "count_include_pad"));
        dv = nd > 1 ? arg(n, 6, "divisor_override") : NULL;
        if (!is_null(dv) && (!num(dv, &divisor) || divisor == 0)) PNOTE("divisor_override is not a nonzero number");
    }
    int varies = 0; /* an average whose divisor is not the window's size everywhere */
    for (int i = 0; i < nd; i++) {
        if (s[i] < 0) s[i] = k[i]; /* stride's default is the kernel size */
        if (k[i] < 1 || s[i] < 1 || d[i] < 1 || p[i] < 0) PNOTE("a kernel, stride or dilation below 1, or a negative padding");
        long long span = d[i] * (k[i] - 1) + 1, num_ = len[i] + 2 * p[i] - span + (ceil_mode ? s[i] - 1 : 0);
        if (num_ < 0) PNOTE("a window larger than the padded input");
        O[i] = num_ / s[i] + 1;
        if (ceil_mode && (O[i] - 1) * s[i] >= len[i] + p[i]) O[i]--;
        R[i] = (O[i] - 1) * s[i] + span - len[i] - p[i]; /* the right padding the last window reads */
        if (R[i] < p[i]) R[i] = p[i];
        for (long long w = 0; w < O[i] && !mx && !varies; w++) {
            long long lo = w * s[i] - p[i], hi = lo + k[i] < len[i] + p[i] ? lo + k[i] : len[i] + p[i];
            if (!cip) lo = lo < 0 ? 0 : lo, hi = hi > len[i] ? len[i] : hi;
            varies = hi - lo != k[i];
        }
    }
    int nwin = 0;
    for (int i = 0; i < nd; i++) nwin += pool_windowed(k[i], s[i]);
    if (!nwin && !varies && is_null(dv)) { /* 1-element windows at every position: the input */
        snprintf(v->kf, sizeof v->kf, "%s", x->kf);
        return 1;
    }
    if (mx) {
        kf_buf_puts(&o, "max(");
        pool_windows(&o, x->kf, r, nd, p, R, "-inf", k, s, d);
    } else if (!is_null(dv)) {
        kf_buf_puts(&o, nwin ? "sum(" : "(");
        if (nwin) pool_windows(&o, x->kf, r, nd, p, R, "0", k, s, d);
        else kf_buf_printf(&o, "%s)", x->kf);
        kf_buf_printf(&o, " / %s", numtxt(divisor, e, sizeof e));
    } else if (!varies) {
        kf_buf_puts(&o, "mean(");
        pool_windows(&o, x->kf, r, nd, p, R, "0", k, s, d);
    } else {
        /* the divisor per output position, over the spatial dims alone: the window sum of
         * ones over the input (count_include_pad=False) or over the input and its padding
         * (True), zero beyond */
        kf_buf c = {0}, base = {0};
        for (int i = 0; i < r - nd; i++) kf_buf_puts(&base, "select(");
        kf_buf_puts(&base, x->kf);
        for (int i = 0; i < r - nd; i++) kf_buf_puts(&base, ", dim=0, index=0)");
        long long z[3] = {0, 0, 0}, rest[3], one[3] = {1, 1, 1};
        char pads[200], ones[600], cnt[96];
        if (cip) {
            for (int i = 0; i < nd; i++) rest[i] = R[i] - p[i];
            if (pad_list(nd, p, p, pads, sizeof pads))
                snprintf(ones, sizeof ones, "full_like(pad(%s, pads=%s), value=1)", base.data, pads);
            else
                snprintf(ones, sizeof ones, "full_like(%s, value=1)", base.data);
        } else {
            for (int i = 0; i < nd; i++) rest[i] = R[i], z[i] = p[i];
            snprintf(ones, sizeof ones, "full_like(%s, value=1)", base.data);
        }
        kf_buf_puts(&c, "sum(");
        pool_windows(&c, ones, nd, nd, z, rest, "0", k, s, one);
        kf_imp_tmp(L, v, c.data, cnt, sizeof cnt);
        kf_buf_free(&c);
        kf_buf_free(&base);
        kf_buf_puts(&o, "sum(");
        pool_windows(&o, x->kf, r, nd, p, R, "0", k, s, d);
        kf_buf_printf(&o, " / %s", cnt);
    }
    emit(L, v, o.data);
    kf_buf_free(&o);
    return 1;
#undef PNOTE
}

#define DROPOUT_NO_MASK                                                                           \
    "dropout in training mode with no mask input (a bundle from before live dropouts lowered: "  \
    "import the module again; --eval imports inference semantics)"

/* A live dropout (training mode, 0 < p < 1): its mask of kept elements is the task input the
 * importer added for it (graph.json's node "draw", an input of kind "draw", bool: 1 kept, 0
 * dropped), and its output x * mask / (1 - p), torch's formula, into e. 0 with *why. */
static int live_dropout(lower *L, json_t *n, char *e, size_t cap, const char **why) {
    json_t *dj = json_object_get(n, "draw");
    double p;
    char a[160], sc[40];
    if (!json_is_string(dj)) { *why = DROPOUT_NO_MASK; return 0; }
    if (!num(arg(n, 1, "p"), &p) || !(p > 0 && p < 1)) { *why = "dropout with p not in (0, 1)"; return 0; }
    const lval *m = find(L, json_string_value(dj));
    if (!m || m->node || !m->meta || !json_is_string(json_object_get(m->meta, "kind")) ||
        strcmp(json_string_value(json_object_get(m->meta, "kind")), "draw") != 0) {
        *why = "dropout whose mask is not an input of kind \"draw\"";
        return 0;
    }
    if (!term(L, arg(n, 0, "input"), a, sizeof a, why)) return 0;
    snprintf(e, cap, "%s * %s * %s", a, m->kf, numtxt(1.0 / (1.0 - p), sc, sizeof sc));
    return 1;
}

/* One node's rule. Returns 1 lowered (v->kf set, or a view/tuple), 0 not lowerable (noted). */
static int lower_node(lower *L, lval *v) {
    json_t *n = v->node;
    const char *t = node_target(n);
    const char *why = NULL;
    char a[160], b[160], ax[128], e[1200], n1[40], n2[40], msg[120];
    double d1, d2;
    if (!t) { note_unsupported(L, n, "no target"); return 0; }
#define NEED(x) do { if (!(x)) { if (why) note_unsupported(L, n, why); return 0; } } while (0)
#define BAD(msg) do { note_unsupported(L, n, msg); return 0; } while (0)
    for (size_t i = 0; i < sizeof passthrough / sizeof *passthrough; i++)
        if (target_is(t, passthrough[i]) || (target_is(t, "aten.dropout") && json_is_false(arg(n, 2, "train")))) {
            lval *s = operand(L, arg(n, 0, "input"), &why);
            NEED(s);
            snprintf(v->kf, sizeof v->kf, "%s", s->kf);
            return 1;
        }
    if (strcmp(t, "aten.dropout.default") == 0) {
        if (num(arg(n, 1, "p"), &d1) && d1 == 0) { /* p = 0 keeps every element, unscaled */
            lval *s = operand(L, arg(n, 0, "input"), &why);
            NEED(s);
            snprintf(v->kf, sizeof v->kf, "%s", s->kf);
            return 1;
        }
        if (live_dropout(L, n, e, sizeof e, &why)) {
            emit(L, v, e);
            return 1;
        }
        NEED(0);
    }
    /* native_dropout(input, p, train) -> (output, mask), as a functionalized graph spells
     * dropout: the output is the input where nothing is dropped (train false, or p = 0),
     * else the input times its mask (an input of the task) over 1 - p */
    if (strcmp(t, "aten.native_dropout.default") == 0) {
        if (json_is_false(arg(n, 2, "train")) || (num(arg(n, 1, "p"), &d1) && d1 == 0) ||
            json_is_string(json_object_get(n, "draw"))) {
            v->is_tuple = 1; /* its getitems lower it */
            return 1;
        }
        why = DROPOUT_NO_MASK;
        NEED(0);
    }
    if (target_is(t, "aten.gelu")) {
        NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
        json_t *ap = arg(n, 1, "approximate");
        const char *mode = json_is_string(ap) ? json_string_value(ap) : "none";
        if (strcmp(mode, "none") != 0 && strcmp(mode, "tanh") != 0) BAD("gelu approximation not 'none' or 'tanh'");
        snprintf(e, sizeof e, "%s(%s)", strcmp(mode, "tanh") == 0 ? "gelu_tanh" : "gelu", a);
        emit(L, v, e);
        return 1;
    }
    if (target_is(t, "aten.elu")) {
        NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
        double alpha = 1, scale = 1, iscale = 1;
        if (!is_null(arg(n, 1, "alpha")) && !num(arg(n, 1, "alpha"), &alpha)) BAD("alpha is not a number");
        if (!is_null(arg(n, 2, "scale")) && !num(arg(n, 2, "scale"), &scale)) BAD("scale is not a number");
        if (!is_null(arg(n, 3, "input_scale")) && !num(arg(n, 3, "input_scale"), &iscale)) BAD("input_scale is not a number");
        if (scale != 1 || iscale != 1) BAD("elu with scale or input_scale other than 1");
        snprintf(e, sizeof e, "elu(%s, alpha=%s)", a, numtxt(alpha, n1, sizeof n1));
        emit(L, v, e);
        return 1;
    }
    if (target_is(t, "aten.hardtanh") || target_is(t, "aten.clamp")) {
        int ht = target_is(t, "aten.hardtanh");
        NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
        json_t *lo = arg(n, 1, ht ? "min_val" : "min"), *hi = arg(n, 2, ht ? "max_val" : "max");
        int has_lo = ht || !is_null(lo), has_hi = ht || !is_null(hi);
        d1 = -1, d2 = 1;
        if (!is_null(lo) && !num(lo, &d1)) BAD("a tensor bound (only number bounds are lowered)");
        if (!is_null(hi) && !num(hi, &d2)) BAD("a tensor bound (only number bounds are lowered)");
        if (!isfinite(d1) || !isfinite(d2)) BAD("an infinite bound");
        if (has_lo && has_hi) snprintf(e, sizeof e, "hardtanh(%s, min_val=%s, max_val=%s)", a, numtxt(d1, n1, sizeof n1), numtxt(d2, n2, sizeof n2));
        else if (has_lo) snprintf(e, sizeof e, "maximum(%s, %s)", a, numtxt(d1, n1, sizeof n1));
        else if (has_hi) snprintf(e, sizeof e, "minimum(%s, %s)", a, numtxt(d2, n2, sizeof n2));
        else BAD("clamp without bounds");
        emit(L, v, e);
        return 1;
    }
    /* binary arithmetic; Scalar overloads and Python numbers become literals */
    static const char *const arith[][2] = {{"aten.add", "+"}, {"aten.sub", "-"}, {"aten.mul", "*"},
                                           {"aten.div", "/"}, {"aten.rsub", "-"},
                                           /* torch.multiply and the like, as export keeps them */
                                           {"aten.multiply", "*"}, {"aten.subtract", "-"},
                                           {"aten.divide", "/"}};
    for (size_t i = 0; i < sizeof arith / sizeof *arith; i++)
        if (target_is(t, arith[i][0])) {
            NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
            NEED(term(L, arg(n, 1, "other"), b, sizeof b, &why));
            double alpha = 1;
            json_t *al = json_object_get(json_object_get(n, "kwargs"), "alpha");
            if (!is_null(al) && !num(al, &alpha)) BAD("alpha is not a number");
            json_t *rm = json_object_get(json_object_get(n, "kwargs"), "rounding_mode");
            if (!is_null(rm)) BAD("division with a rounding mode");
            int rsub = i == 4;
            const char *x = rsub ? b : a, *y = rsub ? a : b;
            if (alpha != 1) snprintf(e, sizeof e, "%s %s %s * %s", x, arith[i][1], numtxt(alpha, n1, sizeof n1), y);
            else snprintf(e, sizeof e, "%s %s %s", x, arith[i][1], y);
            emit(L, v, e);
            return 1;
        }
    if (target_is(t, "aten.pow")) {
        NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
        json_t *ex = arg(n, 1, "exponent");
        if (num(ex, &d1)) {
            if (d1 == 2) snprintf(e, sizeof e, "square(%s)", a);
            else if (d1 == 1) snprintf(e, sizeof e, "%s", a);
            else if (d1 == 0.5) snprintf(e, sizeof e, "sqrt(%s)", a);
            else if (d1 == -0.5) snprintf(e, sizeof e, "rsqrt(%s)", a);
            else if (d1 == -1) snprintf(e, sizeof e, "1 / %s", a);
            else if (d1 == 3) snprintf(e, sizeof e, "square(%s) * %s", a, a);
            else snprintf(e, sizeof e, "pow(%s, %s)", a, numtxt(d1, n1, sizeof n1));
        } else {
            NEED(term(L, ex, b, sizeof b, &why));
            snprintf(e, sizeof e, "pow(%s, %s)", a, b);
        }
        emit(L, v, e);
        return 1;
    }
    if (target_is(t, "aten.mish")) { /* x * tanh(softplus(x)), which the planner fuses */
        NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
        snprintf(e, sizeof e, "%s * tanh(softplus(%s))", a, a);
        emit(L, v, e);
        return 1;
    }
    if (target_is(t, "aten.reciprocal")) {
        NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
        snprintf(e, sizeof e, "1 / %s", a);
        emit(L, v, e);
        return 1;
    }
    if (is_pool_target(t)) {
        if (strstr(t, "_with_indices")) { /* (values, indices): its getitems lower it */
            v->is_tuple = 1;
            return 1;
        }
        return lower_pool(L, v, n, t);
    }
    /* every other POINTWISE op by its record: tensor operands (self, other), then its
     * float attributes from the ATen arguments the schema names, PyTorch's defaults where
     * they are absent */
    kf_op pw = kf_op_lookup_aten(t);
    if (pw != KF_OP_COUNT && kf_op_get(pw)->cls == KF_CLASS_POINTWISE) {
        const kf_op_def *d = kf_op_get(pw);
        static const char *const names[] = {"self", "other"};
        size_t used = (size_t)snprintf(e, sizeof e, "%s(", d->name);
        for (int k = 0; k < d->min_in && k < 2; k++) {
            NEED(term(L, arg(n, (size_t)k, names[k]), a, sizeof a, &why));
            used += (size_t)snprintf(e + used, sizeof e - used, "%s%s", k ? ", " : "", a);
        }
        for (int k = 0; d->attrs[k].name; k++) {
            const kf_attr_def *ad = &d->attrs[k];
            json_t *val = ad->aten ? arg(n, (size_t)atoi(ad->aten), ad->name) : NULL;
            if (is_null(val)) continue;
            if (ad->type != KF_ATTR_FLOAT || !num(val, &d1)) {
                snprintf(msg, sizeof msg, "%s is not a number", ad->name);
                BAD(msg);
            }
            used += (size_t)snprintf(e + used, sizeof e - used, ", %s=%s", ad->name,
                                     numtxt(d1, n1, sizeof n1));
        }
        snprintf(e + used, sizeof e - used, ")");
        emit(L, v, e);
        return 1;
    }
    /* reductions over dims (every reduce-shaped record with an axes attribute): dim, keepdim */
    kf_op rd = kf_op_lookup_aten(t);
    if (rd != KF_OP_COUNT && kf_op_get(rd)->kind == KF_KIND_REDUCE && !kf_op_is_arg(kf_op_get(rd)) &&
        kf_op_attr(kf_op_get(rd), "axes")) {
        NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
        json_t *dims = arg(n, 1, "dim");
        int keep = json_is_true(arg(n, 2, "keepdim"));
        if (json_is_object(dims)) BAD("a dtype argument where dims were expected");
        if (!is_null(json_object_get(json_object_get(n, "kwargs"), "dtype"))) BAD("a reduction with a dtype change");
        if (!axes_text(dims, ax, sizeof ax)) BAD("dims are not integers");
        snprintf(e, sizeof e, "%s(%s%s%s%s)", kf_op_get(rd)->name, a, ax[0] ? ", axes=" : "", ax,
                 keep ? ", keepdim=true" : "");
        emit(L, v, e);
        return 1;
    }
    /* scans along one dim (every SCAN record): dim; a dtype change is not lowered */
    if (rd != KF_OP_COUNT && kf_op_get(rd)->cls == KF_CLASS_SCAN) {
        NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
        json_t *dim = arg(n, 1, "dim");
        if (!json_is_integer(dim)) BAD("dim is not an integer");
        if (!is_null(arg(n, 2, "dtype"))) BAD("a scan with a dtype change");
        snprintf(e, sizeof e, "%s(%s, axis=%lld)", kf_op_get(rd)->name, a, (long long)json_integer_value(dim));
        emit(L, v, e);
        return 1;
    }
    if (target_is(t, "aten.max") || target_is(t, "aten.min")) {
        int mx = target_is(t, "aten.max");
        if (strcmp(t, mx ? "aten.max.default" : "aten.min.default") == 0) {
            NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
            snprintf(e, sizeof e, "%s(%s)", mx ? "max" : "min", a);
            emit(L, v, e);
            return 1;
        }
        if (strcmp(t, mx ? "aten.max.dim" : "aten.min.dim") == 0) {
            v->is_tuple = 1; /* its getitems lower it */
            return 1;
        }
        if (strcmp(t, mx ? "aten.max.other" : "aten.min.other") == 0) {
            /* torch.max(x, other): elementwise, NaN propagating, as torch.maximum */
            NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
            NEED(term(L, arg(n, 1, "other"), b, sizeof b, &why));
            snprintf(e, sizeof e, "%s(%s, %s)", mx ? "maximum" : "minimum", a, b);
            emit(L, v, e);
            return 1;
        }
        BAD("only max/min over all elements, over one dim (max.dim) or of two tensors (max.other) "
            "are lowered");
    }
    if (target_is(t, "aten.argmax") || target_is(t, "aten.argmin")) {
        NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
        json_t *dim = arg(n, 1, "dim");
        if (is_null(dim)) BAD("argmax/argmin over the flattened tensor (give a dim)");
        if (!json_is_integer(dim)) BAD("dim is not an integer");
        snprintf(e, sizeof e, "%s(%s, axis=%lld%s)", target_is(t, "aten.argmax") ? "argmax" : "argmin", a,
                 (long long)json_integer_value(dim), json_is_true(arg(n, 2, "keepdim")) ? ", keepdim=true" : "");
        emit(L, v, e);
        return 1;
    }
    if (strcmp(t, "getitem") == 0) {
        json_t *src = arg(n, 0, NULL);
        json_t *ref = json_is_object(src) ? json_object_get(src, "ref") : NULL;
        lval *s = json_is_string(ref) ? find(L, json_string_value(ref)) : NULL;
        json_t *idx = arg(n, 1, NULL);
        if (!s || !json_is_integer(idx)) BAD("getitem of something other than a tuple node");
        if (!lower_value(L, s)) return 0;
        const char *st = node_target(s->node);
        long long k = json_integer_value(idx);
        if (st && (strcmp(st, "aten.max.dim") == 0 || strcmp(st, "aten.min.dim") == 0)) {
            int mx = strcmp(st, "aten.max.dim") == 0;
            NEED(term(L, arg(s->node, 0, "self"), a, sizeof a, &why));
            json_t *dim = arg(s->node, 1, "dim");
            int keep = json_is_true(arg(s->node, 2, "keepdim"));
            if (!json_is_integer(dim)) BAD("dim is not an integer");
            if (k == 0)
                snprintf(e, sizeof e, "%s(%s, axes=[%lld]%s)", mx ? "max" : "min", a,
                         (long long)json_integer_value(dim), keep ? ", keepdim=true" : "");
            else
                snprintf(e, sizeof e, "%s(%s, axis=%lld%s)", mx ? "argmax" : "argmin", a,
                         (long long)json_integer_value(dim), keep ? ", keepdim=true" : "");
            emit(L, v, e);
            return 1;
        }
        if (st && (strcmp(st, "aten.native_layer_norm.default") == 0 || strstr(st, "aten._native_batch_norm_legit") == st ||
                   strcmp(st, "aten.native_group_norm.default") == 0) && k == 0) {
            snprintf(v->kf, sizeof v->kf, "%s", s->kf); /* the tuple node wrote the result */
            return 1;
        }
        if (st && strcmp(st, "aten.native_dropout.default") == 0) {
            if (k != 0) BAD("the mask of a dropout (only its output is lowered)");
            if (json_is_string(json_object_get(s->node, "draw"))) {
                NEED(live_dropout(L, s->node, e, sizeof e, &why));
                emit(L, v, e);
                return 1;
            }
            lval *x = operand(L, arg(s->node, 0, "input"), &why);
            NEED(x);
            snprintf(v->kf, sizeof v->kf, "%s", x->kf);
            return 1;
        }
        int nn = kf_imp_getitem_nn(L, v, s, k);
        if (nn >= 0) return nn;
        if (st && strncmp(st, "aten.max_pool", 13) == 0 && strstr(st, "_with_indices")) {
            if (k == 0) return lower_pool(L, v, s->node, st);
            BAD("the indices of a max pool (return_indices=True; the argmax positions are not lowered)");
        }
        BAD("getitem of a tuple whose other parts kforge does not compute");
    }
    /* softmax family */
    if (target_is(t, "aten.softmax") || target_is(t, "aten._softmax") || target_is(t, "aten.log_softmax") ||
        target_is(t, "aten._log_softmax")) {
        int lg = strstr(t, "log_softmax") != NULL;
        NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
        json_t *dim = arg(n, 1, "dim");
        if (!json_is_integer(dim)) BAD("dim is not an integer");
        json_t *dt = arg(n, 2, "dtype");
        if (!target_is(t, "aten._softmax") && !target_is(t, "aten._log_softmax") && !is_null(dt)) BAD("softmax with a dtype change");
        if ((target_is(t, "aten._softmax") || target_is(t, "aten._log_softmax")) && json_is_true(dt)) BAD("half_to_float softmax");
        snprintf(e, sizeof e, "%s(%s, axis=%lld)", lg ? "log_softmax" : "softmax", a, (long long)json_integer_value(dim));
        emit(L, v, e);
        return 1;
    }
    /* norms: normalized_shape -> the trailing axes */
    if (target_is(t, "aten.layer_norm") || target_is(t, "aten.native_layer_norm") || target_is(t, "aten.rms_norm")) {
        int rms = target_is(t, "aten.rms_norm");
        NEED(term(L, arg(n, 0, "input"), a, sizeof a, &why));
        json_t *ns = arg(n, 1, "normalized_shape");
        if (!json_is_array(ns) || json_array_size(ns) == 0) BAD("normalized_shape is not a list");
        size_t k = json_array_size(ns), m = 0;
        m += (size_t)snprintf(ax + m, sizeof ax - m, "[");
        for (size_t i = 0; i < k && m < sizeof ax; i++)
            m += (size_t)snprintf(ax + m, sizeof ax - m, "%s%d", i ? ", " : "", (int)i - (int)k);
        if (m < sizeof ax) snprintf(ax + m, sizeof ax - m, "]");
        json_t *w = arg(n, 2, "weight"), *bi = rms ? NULL : arg(n, 3, "bias");
        json_t *ep = arg(n, rms ? 3 : 4, "eps");
        double eps = rms ? 1.1920928955078125e-07 : 1e-5; /* rms_norm's None: finfo(float32).eps */
        if (!is_null(ep) && !num(ep, &eps)) BAD("eps is not a number");
        char ops[360] = "";
        if (!is_null(w)) {
            NEED(term(L, w, b, sizeof b, &why));
            snprintf(ops, sizeof ops, ", %s", b);
        }
        if (!is_null(bi)) {
            if (is_null(w)) BAD("a bias without a weight");
            NEED(term(L, bi, b, sizeof b, &why));
            size_t o = strlen(ops);
            snprintf(ops + o, sizeof ops - o, ", %s", b);
        }
        snprintf(e, sizeof e, "%s(%s%s, axes=%s, eps=%s)", rms ? "rms_norm" : "layer_norm", a, ops, ax, numtxt(eps, n1, sizeof n1));
        emit(L, v, e);
        if (target_is(t, "aten.native_layer_norm")) v->is_tuple = 1;
        return 1;
    }
    /* batch norm: per channel (dim 1), over every other dim; training mode normalizes by
     * the batch's mean and biased variance, inference mode by the running statistics */
    if (target_is(t, "aten._native_batch_norm_legit_functional") || target_is(t, "aten._native_batch_norm_legit") ||
        target_is(t, "aten._native_batch_norm_legit_no_training") || target_is(t, "aten.batch_norm")) {
        lval *x = operand(L, arg(n, 0, "input"), &why);
        NEED(x);
        int r = x->node ? rank_of(x->node) : (int)json_array_size(json_object_get(x->meta, "shape"));
        int no_stats = strcmp(t, "aten._native_batch_norm_legit.no_stats") == 0;
        int notrain = target_is(t, "aten._native_batch_norm_legit_no_training");
        int train_at = target_is(t, "aten.batch_norm") ? 5 : no_stats ? 3 : 5;
        int eps_at = notrain ? 6 : target_is(t, "aten.batch_norm") ? 7 : no_stats ? 5 : 7;
        int training = !notrain && json_is_true(arg(n, (size_t)train_at, "training"));
        double eps = 1e-5;
        if (!num(arg(n, (size_t)eps_at, "eps"), &eps)) BAD("eps is not a number");
        if (r < 2) BAD("batch norm of an input of rank < 2 (no channel dim)");
        /* the per-channel vectors as [C, 1, ...] against dims 1.. of x */
        char ones[40] = "";
        for (int k = 2; k < r && k < 10; k++) strcat(ones, ", 1");
        char wv[200] = "", bv[200] = "", red[64] = "[0";
        for (int k = 2; k < r; k++) snprintf(red + strlen(red), sizeof red - strlen(red), ", %d", k);
        strcat(red, "]");
        json_t *w = arg(n, 1, "weight"), *bj = arg(n, 2, "bias");
        if (!is_null(w)) {
            NEED(term(L, w, b, sizeof b, &why));
            snprintf(wv, sizeof wv, " * reshape(%s, shape=[-1%s])", b, ones);
        }
        if (!is_null(bj)) {
            NEED(term(L, bj, b, sizeof b, &why));
            snprintf(bv, sizeof bv, " + reshape(%s, shape=[-1%s])", b, ones);
        }
        char mu[96], var[240], d[96];
        if (training || no_stats) {
            snprintf(e, sizeof e, "mean(%s, axes=%s, keepdim=true)", x->kf, red);
            kf_imp_tmp(L, v, e, mu, sizeof mu);
            snprintf(e, sizeof e, "%s - %s", x->kf, mu);
            kf_imp_tmp(L, v, e, d, sizeof d);
            snprintf(e, sizeof e, "mean(square(%s), axes=%s, keepdim=true)", d, red);
            kf_imp_tmp(L, v, e, var, sizeof var);
        } else {
            char rm[160], rv[160];
            NEED(term(L, arg(n, 3, "running_mean"), rm, sizeof rm, &why));
            NEED(term(L, arg(n, 4, "running_var"), rv, sizeof rv, &why));
            snprintf(e, sizeof e, "%s - reshape(%s, shape=[-1%s])", x->kf, rm, ones);
            kf_imp_tmp(L, v, e, d, sizeof d);
            snprintf(var, sizeof var, "reshape(%s, shape=[-1%s])", rv, ones);
        }
        snprintf(e, sizeof e, "%s * rsqrt(%s + %s)%s%s", d, var, numtxt(eps, n1, sizeof n1), wv, bv);
        emit(L, v, e);
        if (!target_is(t, "aten.batch_norm")) v->is_tuple = 1;
        return 1;
    }
    /* group norm: x [N, C, ...] as [N, G, rest] normalized over its last dim, then the
     * per-channel affine */
    if (target_is(t, "aten.group_norm") || target_is(t, "aten.native_group_norm")) {
        lval *x = operand(L, arg(n, 0, "input"), &why);
        NEED(x);
        json_t *xs = json_object_get(x->node ? x->node : x->meta, "shape");
        int r = (int)json_array_size(xs), native = target_is(t, "aten.native_group_norm");
        json_t *gj = arg(n, native ? 6 : 1, "group");
        if (!json_is_integer(gj)) BAD("num_groups is not an integer");
        long long G = json_integer_value(gj);
        double eps = 1e-5;
        if (!num(arg(n, native ? 7 : 4, "eps"), &eps)) BAD("eps is not a number");
        if (r < 2 || G < 1 || json_integer_value(json_array_get(xs, 1)) % G) BAD("channels not divisible into the groups");
        char ones[40] = "", sh[200];
        for (int k = 2; k < r && k < 10; k++) strcat(ones, ", 1");
        shape_text(xs, sh, sizeof sh);
        char g3[96], nrm[96];
        snprintf(e, sizeof e, "reshape(%s, shape=[%lld, %lld, -1])", x->kf,
                 (long long)json_integer_value(json_array_get(xs, 0)), G);
        kf_imp_tmp(L, v, e, g3, sizeof g3);
        snprintf(e, sizeof e, "reshape(layer_norm(%s, axes=[-1], eps=%s), shape=%s)", g3, numtxt(eps, n1, sizeof n1), sh);
        kf_imp_tmp(L, v, e, nrm, sizeof nrm);
        size_t used = (size_t)snprintf(e, sizeof e, "%s", nrm);
        json_t *w = arg(n, native ? 1 : 2, "weight"), *bj = arg(n, native ? 2 : 3, "bias");
        if (!is_null(w)) {
            NEED(term(L, w, b, sizeof b, &why));
            used += (size_t)snprintf(e + used, sizeof e - used, " * reshape(%s, shape=[-1%s])", b, ones);
        }
        if (!is_null(bj)) {
            NEED(term(L, bj, b, sizeof b, &why));
            snprintf(e + used, sizeof e - used, " + reshape(%s, shape=[-1%s])", b, ones);
        }
        emit(L, v, e);
        if (native) v->is_tuple = 1;
        return 1;
    }
    /* F.pad: aten.pad(self, pad, mode, value); only the constant mode is an index map */
    if (strcmp(t, "aten.pad.default") == 0) {
        NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
        json_t *mode = arg(n, 2, "mode"), *pj = arg(n, 1, "pad"), *vj = arg(n, 3, "value");
        if (!is_null(mode) && (!json_is_string(mode) || strcmp(json_string_value(mode), "constant") != 0))
            BAD("a pad mode other than 'constant' (reflect, replicate and circular are not index maps kforge has)");
        d1 = 0;
        if (!is_null(vj) && (!num(vj, &d1) || !isfinite(d1))) BAD("value is not a finite number");
        if (!axes_text(pj, ax, sizeof ax) || !ax[0]) BAD("pad is not a list of integers");
        snprintf(e, sizeof e, "pad(%s, pads=%s, value=%s)", a, ax, numtxt(d1, n1, sizeof n1));
        emit(L, v, e);
        return 1;
    }
    /* reshapes, however PyTorch spells them (view, reshape, flatten, squeeze, unsqueeze,
     * unflatten): the shape PyTorch recorded for the result */
    static const char *const reshapes[] = {"aten.view", "aten.reshape", "aten._unsafe_view", "aten.flatten",
                                           "aten.squeeze", "aten.unsqueeze", "aten.unflatten"};
    for (size_t i = 0; i < sizeof reshapes / sizeof *reshapes; i++)
        if (target_is(t, reshapes[i])) {
            NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
            json_t *shape = json_object_get(n, "shape");
            if (!json_is_array(shape)) BAD("no recorded shape for the result");
            shape_text(shape, ax, sizeof ax);
            snprintf(e, sizeof e, "reshape(%s, shape=%s)", a, ax);
            emit(L, v, e);
            return 1;
        }
    /* views (every VIEW record): the tensor operand, then its int, int-list and float
     * attributes from the ATen arguments its schema names; PyTorch's defaults where absent */
    kf_op vw = kf_op_lookup_aten(t);
    if (vw != KF_OP_COUNT && kf_op_get(vw)->cls == KF_CLASS_VIEW) {
        const kf_op_def *d = kf_op_get(vw);
        NEED(term(L, arg(n, 0, "self"), a, sizeof a, &why));
        if (target_is(t, "aten.t") && rank_of(n) < 2) { /* t() of a vector is the vector */
            snprintf(v->kf, sizeof v->kf, "%s", a);
            return 1;
        }
        size_t used = (size_t)snprintf(e, sizeof e, "%s(%s", d->name, a);
        if (record_attrs(n, d, e, sizeof e, &used, msg, sizeof msg) < 0) BAD(msg);
        if (used < sizeof e) snprintf(e + used, sizeof e - used, ")");
        emit(L, v, e);
        return 1;
    }
    /* the composites of their own shape rule (convolutions): the tensor operands in order
     * (an optional one given as None ends them), then the attributes */
    kf_op ow = kf_op_lookup_aten(t);
    if (ow != KF_OP_COUNT && kf_op_get(ow)->kind == KF_KIND_OWN) {
        const kf_op_def *d = kf_op_get(ow);
        size_t used = (size_t)snprintf(e, sizeof e, "%s(", d->name);
        int k = 0;
        for (; k < d->max_in && !is_null(arg(n, (size_t)k, NULL)); k++) {
            NEED(term(L, arg(n, (size_t)k, NULL), a, sizeof a, &why));
            used += (size_t)snprintf(e + used, sizeof e - used, "%s%s", k ? ", " : "", a);
        }
        if (k < d->min_in) BAD("an operand is missing");
        if (record_attrs(n, d, e, sizeof e, &used, msg, sizeof msg) < 0) BAD(msg);
        if (used < sizeof e) snprintf(e + used, sizeof e - used, ")");
        emit(L, v, e);
        return 1;
    }
    /* matmul family */
    if (target_is(t, "aten.mm") || target_is(t, "aten.bmm") || target_is(t, "aten.matmul") ||
        target_is(t, "aten.linear") || target_is(t, "aten.addmm")) {
        int addmm = target_is(t, "aten.addmm"), lin = target_is(t, "aten.linear");
        NEED(term(L, arg(n, addmm ? 1 : 0, addmm ? "mat1" : "input"), a, sizeof a, &why));
        NEED(term(L, arg(n, addmm ? 2 : 1, addmm ? "mat2" : "weight"), b, sizeof b, &why));
        char bias[160] = "";
        json_t *bj = addmm ? arg(n, 0, "self") : (lin ? arg(n, 2, "bias") : NULL);
        if (!is_null(bj)) NEED(term(L, bj, bias, sizeof bias, &why));
        if (addmm) {
            double beta = 1, alpha = 1;
            json_t *kw = json_object_get(n, "kwargs");
            if (!is_null(json_object_get(kw, "beta")) && !num(json_object_get(kw, "beta"), &beta)) BAD("beta is not a number");
            if (!is_null(json_object_get(kw, "alpha")) && !num(json_object_get(kw, "alpha"), &alpha)) BAD("alpha is not a number");
            if (beta != 1 || alpha != 1) BAD("addmm with alpha or beta other than 1");
        }
        /* linear is x @ weight^T: its weight read through a transpose view */
        snprintf(e, sizeof e, "matmul(%s, %s%s)%s%s", a, b, lin ? ", transpose_b=true" : "",
                 bias[0] ? " + " : "", bias);
        emit(L, v, e);
        return 1;
    }
    int nn = kf_imp_lower_nn(L, v, t);
    if (nn >= 0) return nn;
    BAD("no lowering to kforge's ops (see `kforge ops`)");
#undef NEED
#undef BAD
}

/* An output that is an input, unchanged (a module that returns an input, or writes it in
 * place and returns it): a statement copying it, exactly (x * 1.0 is x for every float,
 * -0 and NaN included), under a name of its own, since a kernel writes its outputs and
 * never its inputs. L->v has room for one per output. */
static lval *input_copy(lower *L, const lval *in, size_t i) {
    lval *c = &L->v[L->nv++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%.40s_out%zu", in->kf, i);
    c->meta = in->meta ? in->meta : in->node;
    c->rank = in->rank;
    char expr[100];
    snprintf(expr, sizeof expr, "%s * 1.0", in->kf);
    emit(L, c, expr);
    return c;
}

/* Lower v and what it depends on; 1 when it has a .kf name (or is a view/tuple). */
/* Every tensor an argument refers to (inside lists too), lowered for what it reports: a
 * node that failed still has its operands visited, so that every op on the way that
 * cannot be lowered is named, not only the first on each path. */
static void visit_operands(lower *L, json_t *a) {
    if (json_is_array(a)) {
        size_t i;
        json_t *e;
        json_array_foreach(a, i, e) visit_operands(L, e);
    } else if (json_is_object(a)) {
        json_t *ref = json_object_get(a, "ref");
        if (json_is_string(ref)) {
            lval *w = find(L, json_string_value(ref));
            if (w) lower_value(L, w);
            return;
        }
        const char *k;
        json_t *e;
        json_object_foreach(a, k, e) visit_operands(L, e);
    }
}

static int lower_value(lower *L, lval *v) {
    if (v->kf[0] || v->is_tuple) return 1;
    if (!v->node) return 1; /* inputs are named up front */
    if (v->failed) return 0;
    if (v->visiting) {
        note_unsupported(L, v->node, "depends on itself (graph.json is not in graph order)");
        return 0;
    }
    v->visiting = 1;
    int ok = lower_node(L, v); /* on failure v stays unnamed: its dependants give up too */
    v->failed = !ok;
    if (!ok) visit_operands(L, json_object_get(v->node, "args")), visit_operands(L, json_object_get(v->node, "kwargs"));
    v->visiting = 0;
    return ok;
}


/* The range a module's get_inputs drew an input from (torch.rand: [0, 1)) is one sample's,
 * not the input's domain: kept only where an op on a path from the input needs it (an op
 * of KF_DOMAIN_POS: log, sqrt, pow, ...; kf_graph_input_domains), dropped from the task
 * text otherwise, so that relu, elu, argmin are verified on negative values too. Returns 1
 * when head was rewritten (the caller parses it again). */
static int drop_unneeded_ranges(const kf_graph *g, kf_buf *head) {
    int *pos = kf_calloc((size_t)g->ninputs + 1, sizeof *pos);
    kf_graph_input_domains(g, pos, NULL);
    int changed = 0;
    for (int i = 0; i < g->ninputs; i++) {
        const kf_value *v = &g->values[g->inputs[i]];
        if (!v->has_range || pos[i] || v->dtype == KF_I64) continue; /* class indices keep theirs */
        char key[160];
        snprintf(key, sizeof key, "\ninput %s: ", v->name);
        char *line = strstr(head->data, key);
        char *eol = line ? strchr(line + 1, '\n') : NULL;
        char *r = line ? strstr(line, " range(") : NULL;
        char *close = r ? strchr(r, ')') : NULL;
        if (!close || (eol && r > eol)) continue;
        size_t cut = (size_t)(close + 1 - r);
        memmove(r, close + 1, strlen(close + 1) + 1);
        head->len -= cut;
        changed = 1;
    }
    free(pos);
    return changed;
}

/* Compare each output of the parsed graph with what PyTorch recorded. */
static kf_status check_outputs(lower *L, const kf_graph *g, json_t *outs) {
    for (size_t i = 0; i < json_array_size(outs) && (int)i < g->noutputs; i++) {
        const char *ref = json_string_value(json_object_get(json_array_get(outs, i), "ref"));
        lval *v = find(L, ref);
        const kf_value *gv = &g->values[g->outputs[i]];
        json_t *m = v->node ? v->node : v->meta;
        json_t *shape = json_object_get(m, "shape");
        const char *dt = json_string_value(json_object_get(m, "dtype"));
        int ok = dt && strcmp(dt, kf_dtype_name(gv->dtype)) == 0 && (int)json_array_size(shape) == gv->shape.rank;
        for (int d = 0; ok && d < gv->shape.rank; d++)
            ok = json_integer_value(json_array_get(shape, (size_t)d)) == gv->shape.d[d];
        if (!ok) {
            char want[160], got[160];
            shape_text(shape, want, sizeof want);
            kf_shape_format(&gv->shape, got, sizeof got);
            return kf_error_set(L->err, KF_ERR_INTERNAL, L->path, 0, 0,
                                "output %zu ('%s'): PyTorch recorded %s%s, the lowered task gives %s%s "
                                "(a lowering rule is wrong: please report it)",
                                i, ref, dt ? dt : "?", want, kf_dtype_name(gv->dtype), got);
        }
    }
    return KF_OK;
}

kf_status kf_import_torch_graph(const char *path, char **kf_text, kf_graph **out, kf_error *err) {
    if (kf_text) *kf_text = NULL;
    if (out) *out = NULL;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return kf_error_set(err, KF_ERR_PARSE, path, je.line, je.column, "not JSON: %s", je.text);
    lower L = {.path = path, .root = root, .err = err};
    kf_status st = KF_OK;
    kf_buf head = {0};
    int last_order = -1;
    const char *fmt = json_string_value(json_object_get(root, "format"));
    json_t *ins = json_object_get(root, "inputs"), *nodes = json_object_get(root, "nodes"),
           *outs = json_object_get(root, "outputs");
    const char *name = json_string_value(json_object_get(root, "name"));
    if (!fmt || strcmp(fmt, "kforge-graph") != 0 || json_integer_value(json_object_get(root, "version")) != 1) {
        st = kf_error_set(err, KF_ERR_PARSE, path, 0, 0, "not a kforge graph of version 1 (\"format\": "
                          "\"kforge-graph\", \"version\": 1; written by python -m kforge_torch.importer)");
        goto done;
    }
    if (!json_is_array(ins) || !json_is_array(nodes) || !json_is_array(outs) || !name) {
        st = kf_error_set(err, KF_ERR_PARSE, path, 0, 0, "graph.json lacks name, inputs, nodes or outputs");
        goto done;
    }
    char tname[64];
    task_ident(name, tname, sizeof tname);
    L.v = calloc(json_array_size(ins) + json_array_size(nodes) + json_array_size(outs) + 1, sizeof *L.v);
    if (!L.v) { st = kf_error_set(err, KF_ERR_NOMEM, path, 0, 0, "out of memory"); goto done; }
    kf_buf_printf(&head, "# imported from %s by kforge import (torch %s)\ntask %s\n",
                  json_string_value(json_object_get(root, "model")) ? json_string_value(json_object_get(root, "model")) : "?",
                  json_string_value(json_object_get(root, "torch")) ? json_string_value(json_object_get(root, "torch")) : "?", tname);
    size_t i;
    json_t *e;
    json_array_foreach(ins, i, e) {
        const char *n = json_string_value(json_object_get(e, "name"));
        const char *dt = json_string_value(json_object_get(e, "dtype"));
        json_t *shape = json_object_get(e, "shape");
        if (!n || !dt || !json_is_array(shape)) {
            st = kf_error_set(err, KF_ERR_PARSE, path, 0, 0, "input %zu lacks name, dtype or shape", i);
            goto done;
        }
        lval *v = &L.v[L.nv++];
        snprintf(v->name, sizeof v->name, "%s", n);
        kf_name(n, v->kf, sizeof v->kf);
        v->meta = e;
        /* a 0-d tensor (a scalar parameter or constant) is read as [1]: one element in
         * memory either way, and [1] broadcasts against any shape as a 0-d tensor does;
         * its meta shape says so too, for every rule that reads it */
        int was_0d = json_array_size(shape) == 0;
        if (was_0d) json_array_append_new(shape, json_integer(1));
        v->rank = (int)json_array_size(shape);
        char sh[200];
        shape_text(shape, sh, sizeof sh);
        char rng[100] = "", lo[40], hi[40];
        json_t *r = json_object_get(e, "range");
        if (json_is_array(r) && json_array_size(r) == 2 && json_is_number(json_array_get(r, 0)) &&
            json_is_number(json_array_get(r, 1)))
            snprintf(rng, sizeof rng, " range(%s, %s)", numtxt(json_number_value(json_array_get(r, 0)), lo, sizeof lo),
                     numtxt(json_number_value(json_array_get(r, 1)), hi, sizeof hi));
        kf_buf_printf(&head, "input %s: %s%s%s   # %s%s%s%s\n", v->kf, dt, sh, rng,
                      json_string_value(json_object_get(e, "kind")) ? json_string_value(json_object_get(e, "kind")) : "input",
                      json_is_string(json_object_get(e, "target")) ? " " : "",
                      json_is_string(json_object_get(e, "target")) ? json_string_value(json_object_get(e, "target")) : "",
                      was_0d ? " (0-d in PyTorch, read as [1])" : "");
    }
    json_array_foreach(nodes, i, e) {
        lval *v = &L.v[L.nv++];
        const char *n = node_name(e);
        if (!n) { st = kf_error_set(err, KF_ERR_PARSE, path, 0, 0, "node %zu has no name", i); goto done; }
        snprintf(v->name, sizeof v->name, "%s", n);
        v->node = e;
    }
    /* the outputs and what they need */
    kf_buf tail = {0};
    json_array_foreach(outs, i, e) {
        const char *ref = json_string_value(json_object_get(e, "ref"));
        lval *v = ref ? find(&L, ref) : NULL;
        if (!v) {
            kf_buf_free(&tail);
            st = kf_error_set(err, KF_ERR_UNSUPPORTED, path, 0, 0, "output %zu is not a tensor of the graph", i);
            goto done;
        }
        if (!lower_value(&L, v)) continue;
        /* an output is the statement that computes it, declared with "output"; a
         * passthrough (clone, detach) resolves to the value it relabels */
        lval *w = NULL;
        for (int k = 0; k < L.nv; k++)
            if (L.v[k].expr && strcmp(L.v[k].kf, v->kf) == 0) w = &L.v[k];
        if (!w) w = input_copy(&L, v, i); /* an input returned as it is (x.relu_(); return x) */
        if (w->is_output) {
            kf_buf_free(&tail);
            st = kf_error_set(err, KF_ERR_UNSUPPORTED, path, 0, 0, "output %zu ('%s') is the same tensor as an "
                              "earlier output: a kernel writes each output once", i, ref);
            goto done;
        }
        /* statements are in demand order (each output after what it needs, outputs in
         * turn), so outputs are declared in PyTorch's order unless one needs a later one */
        if (w->order < last_order) {
            kf_buf_free(&tail);
            st = kf_error_set(err, KF_ERR_UNSUPPORTED, path, 0, 0, "output %zu ('%s') is computed from a later "
                              "output: kforge declares outputs in the order they are computed", i, ref);
            goto done;
        }
        last_order = w->order;
        w->is_output = 1;
    }
    if (L.nunsupported) {
        kf_buf_free(&tail);
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, path, 0, 0, "%d node%s cannot be lowered to kforge's ops:\n%s",
                          L.nunsupported, L.nunsupported == 1 ? "" : "s", L.unsupported.data);
        goto done;
    }
    kf_buf_free(&tail);
    for (int k = 0; k < L.nstmt; k++) {
        for (int j = 0; j < L.nv; j++)
            if (L.v[j].expr && L.v[j].order == k)
                kf_buf_printf(&head, "%s%s = %s\n", L.v[j].is_output ? "output " : "", L.v[j].kf, L.v[j].expr);
        for (int j = 0; j < L.nt; j++)
            if (L.t[j].order == k) kf_buf_printf(&head, "%s = %s\n", L.t[j].kf, L.t[j].expr);
    }
    kf_graph *g = NULL;
    st = kf_parse_string(head.data, path, &g, err);
    if (st == KF_OK && drop_unneeded_ranges(g, &head)) {
        kf_graph_free(g);
        g = NULL;
        st = kf_parse_string(head.data, path, &g, err);
    }
    if (st != KF_OK) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        kf_error_set(err, st, path, 0, 0, "the lowered task does not type-check (%s); lowered text:\n%s", msg, head.data);
        goto done;
    }
    st = check_outputs(&L, g, outs);
    if (st != KF_OK) { kf_graph_free(g); goto done; }
    if (out) *out = g;
    else kf_graph_free(g);
    if (kf_text) *kf_text = kf_buf_take(&head);
done:
    kf_buf_free(&head);
    kf_buf_free(&L.unsupported);
    for (int k = 0; L.v && k < L.nv; k++) free(L.v[k].expr);
    free(L.v);
    for (int k = 0; k < L.nt; k++) free(L.t[k].expr);
    free(L.t);
    json_decref(root);
    return st;
}
