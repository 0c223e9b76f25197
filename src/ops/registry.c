/*
 * The op registry: indexes the per-class record arrays by kf_op, checks them once, and
 * answers the questions every other part asks of an op (by name, by ATen target, its
 * attribute schema and defaults, its float64 value, its float32 expression).
 *
 * Design note. The records are const arrays in one file per class; the index is built on
 * first use (pthread_once) and checked then: an identifier of ops.def without a record, a
 * record twice, a duplicate name, a POINTWISE record without its f64 or f32 part, a
 * schema entry with an unreadable default are all bugs, reported by kf_ops_check (which
 * test_ops runs) and asserted on first use.
 */
#include "ops_int.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kf_op_def *table[KF_OP_COUNT];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static char table_defect[256];

static kf_op kf_op_lookup_unchecked(const char *name);

static void index_class(const kf_op_def *defs, int n) {
    for (int i = 0; i < n; i++) {
        const kf_op_def *d = &defs[i];
        if ((unsigned)d->op >= KF_OP_COUNT) {
            if (!table_defect[0])
                snprintf(table_defect, sizeof table_defect, "record '%s' has no identifier in ops.def",
                         d->name ? d->name : "?");
            continue;
        }
        if (table[d->op] && !table_defect[0])
            snprintf(table_defect, sizeof table_defect, "two records for op %d ('%s' and '%s')",
                     (int)d->op, table[d->op]->name, d->name);
        table[d->op] = d;
    }
}

int kf_ints_parse(const char *text, kf_ints *v) {
    const char *p = text;
    v->n = 0;
    while (*p == ' ') p++;
    if (*p++ != '[') return 0;
    while (*p == ' ') p++;
    if (*p == ']') return !p[1];
    for (;;) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p || v->n == KF_MAX_INTS) return 0;
        v->v[v->n++] = x;
        p = end;
        while (*p == ' ') p++;
        if (*p == ']') return !p[1];
        if (*p++ != ',') return 0;
        while (*p == ' ') p++;
    }
}

static int default_ok(const kf_attr_def *a) {
    char *end;
    kf_ints iv;
    switch (a->type) {
    case KF_ATTR_INT:
        if (!strcmp(a->dflt, "max")) return 1;
        strtoll(a->dflt, &end, 10);
        return end != a->dflt && !*end;
    case KF_ATTR_INTS: return kf_ints_parse(a->dflt, &iv);
    case KF_ATTR_OPERAND_VIEW: {
        kf_op v = a->view ? kf_op_lookup_unchecked(a->view) : KF_OP_COUNT;
        return !strcmp(a->dflt, "false") && v != KF_OP_COUNT && table[v]->cls == KF_CLASS_VIEW;
    }
    case KF_ATTR_FLOAT: strtod(a->dflt, &end); return end != a->dflt && !*end;
    case KF_ATTR_BOOL: return !strcmp(a->dflt, "true") || !strcmp(a->dflt, "false");
    case KF_ATTR_AXES:
    case KF_ATTR_AXIS:
        if (a->type == KF_ATTR_AXES && !strcmp(a->dflt, "all")) return 1;
        strtol(a->dflt, &end, 10);
        return end != a->dflt && !*end;
    }
    return 0;
}

/* The first defect of record d, or NULL. */
static const char *record_defect(const kf_op_def *d, char *buf, size_t cap) {
    if (!d->name || !d->name[0]) return "a record without a name";
    if (d->min_in < 1 || d->max_in < d->min_in) {
        snprintf(buf, cap, "%s: arity %d to %d", d->name, d->min_in, d->max_in);
        return buf;
    }
    int reads_only = d->cls == KF_CLASS_VIEW || d->cls == KF_CLASS_GATHER;
    if (!d->doc || !d->torch || !(d->flops > 0 || (reads_only && d->flops == 0))) {
        snprintf(buf, cap, "%s: doc, torch peer and flops are required (zero for a VIEW or GATHER)", d->name);
        return buf;
    }
    if ((d->cls == KF_CLASS_VIEW) != (d->kind == KF_KIND_VIEW) || (d->cls == KF_CLASS_VIEW) != !!d->view) {
        snprintf(buf, cap, "%s: a VIEW record has the view shape rule and its index map builder, "
                 "and only a VIEW record does", d->name);
        return buf;
    }
    if (d->cls == KF_CLASS_POINTWISE && (!d->f64 || !d->f32)) {
        snprintf(buf, cap, "%s: a POINTWISE record needs its f64 reference and f32 expression", d->name);
        return buf;
    }
    if (d->cls == KF_CLASS_POINTWISE && d->kind != KF_KIND_UNARY && d->kind != KF_KIND_BINARY) {
        snprintf(buf, cap, "%s: a POINTWISE record has the unary or binary shape rule", d->name);
        return buf;
    }
    if (d->cls == KF_CLASS_REDUCE && d->kind != KF_KIND_REDUCE) {
        snprintf(buf, cap, "%s: the REDUCE class goes with the reduce shape rule", d->name);
        return buf;
    }
    if (d->kind == KF_KIND_REDUCE && d->cls != KF_CLASS_REDUCE && (!d->f64_rows || !d->lower)) {
        snprintf(buf, cap, "%s: a reduce-shaped composite needs its f64_rows reference and its lowering",
                 d->name);
        return buf;
    }
    if (d->combiner == KF_COMB_LOGSUMEXP && (d->cls != KF_CLASS_COMPOSITE || d->kind != KF_KIND_REDUCE)) {
        snprintf(buf, cap, "%s: the log-sum-exp combiner goes with a reduce-shaped composite", d->name);
        return buf;
    }
    if ((d->cls == KF_CLASS_SCAN) != (d->kind == KF_KIND_SCAN) ||
        (d->cls == KF_CLASS_SCAN && d->combiner != KF_COMB_SUM && d->combiner != KF_COMB_PROD)) {
        snprintf(buf, cap, "%s: the SCAN class goes with the scan shape rule and a sum or product", d->name);
        return buf;
    }
    if ((d->kind == KF_KIND_SOFTMAX || d->kind == KF_KIND_NORM || d->kind == KF_KIND_SCAN) && !d->f64_row) {
        snprintf(buf, cap, "%s: a row-wise composite needs its f64_row reference", d->name);
        return buf;
    }
    if ((d->kind == KF_KIND_OWN) != (d->own_shape != NULL) ||
        (d->kind == KF_KIND_OWN && (d->cls != KF_CLASS_COMPOSITE || !d->own_f64 || !d->own_flops ||
                                    !d->own_lower || !d->example))) {
        snprintf(buf, cap, "%s: the OWN shape rule goes with a COMPOSITE record's own shape, reference, "
                 "FLOPs, lowering and example, and only with them", d->name);
        return buf;
    }
    if ((d->cls == KF_CLASS_GATHER) != (d->kind == KF_KIND_GATHER) ||
        (d->cls == KF_CLASS_GATHER && (!d->own_f64 || !d->example || d->min_in != 2 || d->max_in != 2 ||
                                       !kf_op_attr(d, "axis") || !kf_op_attr(d, "fill")))) {
        snprintf(buf, cap, "%s: the GATHER class goes with the gather shape rule, two operands, its own_f64 "
                 "reference, an example task and the attributes axis and fill", d->name);
        return buf;
    }
    if ((d->lower || d->own_lower) && d->cls != KF_CLASS_COMPOSITE) {
        snprintf(buf, cap, "%s: only a COMPOSITE record has a lowering", d->name);
        return buf;
    }
    for (int k = 0; d->attrs[k].name; k++) {
        const kf_attr_def *a = &d->attrs[k];
        if (!a->dflt || !default_ok(a)) {
            snprintf(buf, cap, "%s: attribute '%s' has no readable default", d->name, a->name);
            return buf;
        }
        for (int j = 0; j < k; j++)
            if (!strcmp(d->attrs[j].name, a->name)) {
                snprintf(buf, cap, "%s: attribute '%s' twice", d->name, a->name);
                return buf;
            }
    }
    const char *texts[2] = {d->f32, d->lower};
    for (int t = 0; t < 2; t++) /* every ${name} names an attribute */
        for (const char *p = texts[t] ? strstr(texts[t], "${") : NULL; p; p = strstr(p + 2, "${")) {
            const char *e = strchr(p, '}');
            char nm[64];
            if (!e || (size_t)(e - p - 2) >= sizeof nm) {
                snprintf(buf, cap, "%s: unterminated ${ in its %s text", d->name, t ? "lowering" : "f32");
                return buf;
            }
            snprintf(nm, sizeof nm, "%.*s", (int)(e - p - 2), p + 2);
            if (!kf_op_attr(d, nm)) {
                snprintf(buf, cap, "%s: its %s text names '%s', not an attribute", d->name,
                         t ? "lowering" : "f32", nm);
                return buf;
            }
        }
    return NULL;
}

static void build_table(void) {
    index_class(kf_ops_pointwise, kf_ops_pointwise_count);
    index_class(kf_ops_reduce, kf_ops_reduce_count);
    index_class(kf_ops_composite, kf_ops_composite_count);
    index_class(kf_ops_scan, kf_ops_scan_count);
    index_class(kf_ops_view, kf_ops_view_count);
    index_class(kf_ops_conv, kf_ops_conv_count);
    index_class(kf_ops_gather, kf_ops_gather_count);
    char buf[200];
    for (int i = 0; i < KF_OP_COUNT && !table_defect[0]; i++) {
        if (!table[i]) {
            snprintf(table_defect, sizeof table_defect, "op %d of ops.def has no record", i);
            break;
        }
        const char *why = record_defect(table[i], buf, sizeof buf);
        if (why) snprintf(table_defect, sizeof table_defect, "%s", why);
        for (int j = 0; j < i && !table_defect[0]; j++)
            if (!strcmp(table[j]->name, table[i]->name))
                snprintf(table_defect, sizeof table_defect, "two records named '%s'", table[i]->name);
    }
}

static void ensure_table(void) {
    pthread_once(&table_once, build_table);
    assert(!table_defect[0] && "op registry defect: run kforge ops or test_ops");
}

kf_status kf_ops_check(kf_error *err) {
    pthread_once(&table_once, build_table);
    if (table_defect[0])
        return kf_error_set(err, KF_ERR_INTERNAL, NULL, 0, 0, "op registry: %s", table_defect);
    return KF_OK;
}

const kf_op_def *kf_op_get(kf_op op) {
    assert((unsigned)op < KF_OP_COUNT);
    ensure_table();
    return table[op];
}

/* By name before the table is checked (its records may be missing). */
static kf_op kf_op_lookup_unchecked(const char *name) {
    for (int i = 0; i < KF_OP_COUNT; i++)
        if (table[i] && strcmp(table[i]->name, name) == 0) return (kf_op)i;
    return KF_OP_COUNT;
}

kf_op kf_op_lookup(const char *name) {
    ensure_table();
    return kf_op_lookup_unchecked(name);
}

/* "aten.relu" matches "aten.relu" and every overload "aten.relu.<x>". */
static int target_is(const char *t, const char *op) {
    size_t n = strlen(op);
    return strncmp(t, op, n) == 0 && (t[n] == '.' || t[n] == 0);
}

kf_op kf_op_lookup_aten(const char *target) {
    ensure_table();
    for (int i = 0; i < KF_OP_COUNT; i++)
        for (int k = 0; k < KF_MAX_OP_ATEN && table[i]->aten[k]; k++)
            if (target_is(target, table[i]->aten[k])) return (kf_op)i;
    return KF_OP_COUNT;
}

const char *kf_op_kind_name(kf_op_kind k) {
    switch (k) {
    case KF_KIND_UNARY: return "unary";
    case KF_KIND_BINARY: return "binary";
    case KF_KIND_REDUCE: return "reduce";
    case KF_KIND_SOFTMAX: return "softmax";
    case KF_KIND_NORM: return "norm";
    case KF_KIND_MATMUL: return "matmul";
    case KF_KIND_SCAN: return "scan";
    case KF_KIND_VIEW: return "view";
    case KF_KIND_OWN: return "own";
    case KF_KIND_GATHER: return "gather";
    }
    return "?";
}

const char *kf_op_class_name(kf_op_class c) {
    switch (c) {
    case KF_CLASS_POINTWISE: return "pointwise";
    case KF_CLASS_REDUCE: return "reduce";
    case KF_CLASS_CONTRACT: return "contract";
    case KF_CLASS_SCAN: return "scan";
    case KF_CLASS_COMPOSITE: return "composite";
    case KF_CLASS_VIEW: return "view";
    case KF_CLASS_GATHER: return "gather";
    case KF_CLASS_COUNT: break;
    }
    return "?";
}

const char *kf_attr_type_name(kf_attr_type t) {
    switch (t) {
    case KF_ATTR_FLOAT: return "float";
    case KF_ATTR_BOOL: return "bool";
    case KF_ATTR_AXES: return "axes";
    case KF_ATTR_AXIS: return "axis";
    case KF_ATTR_INT: return "int";
    case KF_ATTR_INTS: return "ints";
    case KF_ATTR_OPERAND_VIEW: return "operand_view";
    }
    return "?";
}

int kf_op_is_elementwise(kf_op op) { return kf_op_get(op)->cls == KF_CLASS_POINTWISE; }

const kf_attr_def *kf_op_attr(const kf_op_def *d, const char *name) {
    for (int k = 0; d->attrs[k].name; k++)
        if (!strcmp(d->attrs[k].name, name)) return &d->attrs[k];
    return NULL;
}

/* ------------------------------------------------------------ attributes */

double kf_attr_get_float(const kf_attrs *a, const kf_attr_def *d) {
    assert(d->type == KF_ATTR_FLOAT);
    return *(const double *)((const char *)a + d->offset);
}
void kf_attr_set_float(kf_attrs *a, const kf_attr_def *d, double v) {
    assert(d->type == KF_ATTR_FLOAT);
    *(double *)((char *)a + d->offset) = v;
}
int kf_attr_get_bool(const kf_attrs *a, const kf_attr_def *d) {
    assert(d->type == KF_ATTR_BOOL);
    return *(const int *)((const char *)a + d->offset);
}
void kf_attr_set_bool(kf_attrs *a, const kf_attr_def *d, int v) {
    assert(d->type == KF_ATTR_BOOL);
    *(int *)((char *)a + d->offset) = v != 0;
}
uint32_t kf_attr_get_axes(const kf_attrs *a, const kf_attr_def *d) {
    assert(d->type == KF_ATTR_AXES || d->type == KF_ATTR_AXIS);
    return *(const uint32_t *)((const char *)a + d->offset);
}
void kf_attr_set_axes(kf_attrs *a, const kf_attr_def *d, uint32_t mask) {
    assert(d->type == KF_ATTR_AXES || d->type == KF_ATTR_AXIS);
    *(uint32_t *)((char *)a + d->offset) = mask;
}

int64_t kf_attr_get_int(const kf_attrs *a, const kf_attr_def *d) {
    assert(d->type == KF_ATTR_INT);
    return *(const int64_t *)((const char *)a + d->offset);
}
void kf_attr_set_int(kf_attrs *a, const kf_attr_def *d, int64_t v) {
    assert(d->type == KF_ATTR_INT);
    *(int64_t *)((char *)a + d->offset) = v;
}
const kf_ints *kf_attr_get_ints(const kf_attrs *a, const kf_attr_def *d) {
    assert(d->type == KF_ATTR_INTS);
    return (const kf_ints *)((const char *)a + d->offset);
}
void kf_attr_set_ints(kf_attrs *a, const kf_attr_def *d, const kf_ints *v) {
    assert(d->type == KF_ATTR_INTS);
    *(kf_ints *)((char *)a + d->offset) = *v;
}

kf_attrs kf_attrs_default(kf_op op, int input_rank) {
    assert(input_rank >= 0 && input_rank <= 31);
    const kf_op_def *d = kf_op_get(op);
    kf_attrs a;
    memset(&a, 0, sizeof a);
    for (int k = 0; d->attrs[k].name; k++) {
        const kf_attr_def *s = &d->attrs[k];
        switch (s->type) {
        case KF_ATTR_FLOAT: kf_attr_set_float(&a, s, strtod(s->dflt, NULL)); break;
        case KF_ATTR_BOOL: kf_attr_set_bool(&a, s, !strcmp(s->dflt, "true")); break;
        case KF_ATTR_AXES:
        case KF_ATTR_AXIS:
            if (!strcmp(s->dflt, "all")) {
                kf_attr_set_axes(&a, s, (uint32_t)((1u << input_rank) - 1u));
            } else {
                long ax = strtol(s->dflt, NULL, 10);
                if (ax < 0) ax += input_rank;
                kf_attr_set_axes(&a, s, ax >= 0 && ax < input_rank ? 1u << ax : 0u);
            }
            break;
        case KF_ATTR_INT:
            kf_attr_set_int(&a, s, !strcmp(s->dflt, "max") ? INT64_MAX : strtoll(s->dflt, NULL, 10));
            break;
        case KF_ATTR_INTS: {
            kf_ints v;
            kf_ints_parse(s->dflt, &v);
            kf_attr_set_ints(&a, s, &v);
            break;
        }
        case KF_ATTR_OPERAND_VIEW: break; /* never stored: the parser inserts the view */
        }
    }
    return a;
}

/* ------------------------------------------------------------ evaluation */

double kf_op_eval(kf_op op, const kf_attrs *attr, double a, double b) {
    const kf_op_def *d = kf_op_get(op);
    assert(d->cls == KF_CLASS_POINTWISE);
    kf_attrs dflt;
    if (!attr) {
        dflt = kf_attrs_default(op, 0);
        attr = &dflt;
    }
    double r;
    d->f64(&a, 0, &b, 0, &r, 1, attr);
    return r;
}

void kf_op_float_lit(double v, char *buf, size_t cap) {
    /* KF_NAN / KF_INF and a float-suffixed literal are spelled alike in C, OpenCL C, CUDA
     * and MSL (MSL has no double, so "(float)0.1" would not do); nine digits round-trip a
     * float. */
    if (isnan(v)) snprintf(buf, cap, "KF_NAN");
    else if (isinf(v)) snprintf(buf, cap, v > 0 ? "KF_INF" : "(-KF_INF)");
    else snprintf(buf, cap, "(%.9ef)", (double)(float)v);
}

void kf_op_render_f32(const kf_op_def *d, const kf_pw_emit *e, kf_buf *o) {
    assert(d->cls == KF_CLASS_POINTWISE);
    if (d->f32_special && d->f32_special(e, o)) return;
    for (const char *p = d->f32; *p;) {
        if (p[0] == '$' && (p[1] == '0' || p[1] == '1')) {
            int k = p[1] - '0';
            assert(k < d->max_in);
            kf_buf_puts(o, e->in[k]);
            p += 2;
        } else if (p[0] == '$' && p[1] == '{') {
            const char *end = strchr(p, '}');
            char nm[64], lit[64];
            snprintf(nm, sizeof nm, "%.*s", (int)(end - p - 2), p + 2);
            const kf_attr_def *a = kf_op_attr(d, nm);
            assert(a && a->type == KF_ATTR_FLOAT);
            kf_op_float_lit(kf_attr_get_float(e->attr, a), lit, sizeof lit);
            kf_buf_puts(o, lit);
            p = end + 1;
        } else {
            size_t n = strcspn(p, "$");
            if (n == 0) n = 1;
            kf_buf_putn(o, p, n);
            p += n;
        }
    }
}
