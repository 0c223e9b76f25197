/*
 * kforge graph IR, construction half: dtypes, shapes and numpy broadcasting, and the graph
 * itself with the shape/type rules every node must satisfy (each op's record in the op
 * registry, kforge/ops.h, names the rule it follows).
 *
 * Design notes:
 *   - kf_graph_add_node is the single gate for shape and dtype rules, so graphs built by
 *     hand, by the .kf parser and by the JSON importer are held to the same rules and give
 *     the same messages. Messages name what was found and what was expected.
 *   - Operand ids are trusted (a bad id is a caller bug and asserts); everything that a
 *     task author can get wrong returns KF_ERR_TYPE with the node's position.
 *   - An elementwise op whose operands are all constants folds into a new constant, computed
 *     by kf_op_eval so that folding and the reference agree on every op (NaN rules
 *     included). No node therefore has only literal operands, and `-2` is a literal.
 *   - Temporaries are named "%1", "%2", ... in creation order; a name a caller chose is
 *     never reused for a temporary.
 *   - FLOPs and bytes are doubles: 2048^3 matmuls and 16M-element tensors overflow nothing.
 */
#include "kforge/ir.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- dtypes */

static const struct {
    const char *name;
    int size;
} dtype_table[KF_DTYPE_COUNT] = {
    [KF_F32] = {"f32", 4}, [KF_F16] = {"f16", 2}, [KF_BF16] = {"bf16", 2},
    [KF_I64] = {"i64", 8}, [KF_F64] = {"f64", 8}, [KF_BOOL] = {"bool", 1},
};

/* Name of dtype t ("f32", ...); "?" for an out-of-range value. */
const char *kf_dtype_name(kf_dtype t) {
    if ((unsigned)t >= KF_DTYPE_COUNT) return "?";
    return dtype_table[t].name;
}

/* Bytes per element of t; asserts t is a real dtype. */
int kf_dtype_size(kf_dtype t) {
    assert((unsigned)t < KF_DTYPE_COUNT);
    return dtype_table[t].size;
}

/* 1 and *out set when s names a dtype exactly, else 0 (out untouched). */
int kf_dtype_parse(const char *s, kf_dtype *out) {
    for (int i = 0; i < KF_DTYPE_COUNT; i++)
        if (strcmp(s, dtype_table[i].name) == 0) {
            if (out) *out = (kf_dtype)i;
            return 1;
        }
    return 0;
}

static int is_float(kf_dtype t) { return t == KF_F32 || t == KF_F16 || t == KF_BF16 || t == KF_F64; }

/* ---------------------------------------------------------------- shapes */

/* Number of elements (1 for rank 0). */
int64_t kf_shape_numel(const kf_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) n *= s->d[i];
    return n;
}

/* See ir.h. */
int kf_shape_bytes(const kf_shape *s, kf_dtype t, uint64_t *bytes) {
    uint64_t n = (uint64_t)kf_dtype_size(t);
    *bytes = UINT64_MAX;
    for (int i = 0; i < s->rank; i++)
        if (s->d[i] < 0 || __builtin_mul_overflow(n, (uint64_t)s->d[i], &n) ||
            n > KF_MAX_TENSOR_BYTES)
            return 0;
    *bytes = n;
    return 1;
}

/* type_error's words for a value that is too big: "f32[...] would take more than ..." */
static void too_big_text(const kf_shape *s, kf_dtype t, char *buf, size_t cap) {
    char sh[200];
    kf_shape_format(s, sh, sizeof sh);
    snprintf(buf, cap, "%s%s would take more than %llu TiB (the most a tensor may take)",
             kf_dtype_name(t), sh, (unsigned long long)(KF_MAX_TENSOR_BYTES >> 40));
}

/* 1 when a and b have the same rank and dims. */
int kf_shape_equal(const kf_shape *a, const kf_shape *b) {
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->d[i] != b->d[i]) return 0;
    return 1;
}

/* Writes "[d0, d1, ...]" ("[]" for rank 0) into buf, truncating to cap. */
void kf_shape_format(const kf_shape *s, char *buf, size_t cap) {
    if (!cap) return;
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < s->rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)s->d[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* numpy broadcasting: align from the right, each pair equal or one of them 1. */
int kf_shape_broadcast(const kf_shape *a, const kf_shape *b, kf_shape *out) {
    kf_shape r;
    r.rank = a->rank > b->rank ? a->rank : b->rank;
    memset(r.d, 0, sizeof r.d);
    for (int i = 0; i < r.rank; i++) {
        int ia = a->rank - 1 - i, ib = b->rank - 1 - i;
        int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
        if (da != db && da != 1 && db != 1) return 0;
        r.d[r.rank - 1 - i] = da == 1 ? db : da;
    }
    if (out) *out = r;
    return 1;
}

/* ---------------------------------------------------------------- graph */

/* New empty graph named name (NULL = ""). Never NULL (allocation aborts). */
kf_graph *kf_graph_new(const char *name) {
    kf_graph *g = kf_calloc(1, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", name ? name : "");
    return g;
}

/* Value names -> ids: chained buckets, so that a rename unlinks one entry. A task of n
 * statements looks names up O(n) times; a scan per lookup made parsing quadratic. */
struct kf_name_index {
    int nbuckets;  /* a power of two */
    int *head;     /* per bucket: first value id + 1, 0 when empty */
    int *next;     /* per value: next value id + 1 in its bucket */
    int cap_next;
    int n;         /* named values */
};

static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void index_link(struct kf_name_index *x, const kf_graph *g, int id) {
    uint32_t b = name_hash(g->values[id].name) & (uint32_t)(x->nbuckets - 1);
    x->next[id] = x->head[b];
    x->head[b] = id + 1;
}

/* Room for value id, and buckets for one more name (rehashing when they fill). */
static struct kf_name_index *index_reserve(kf_graph *g, int id) {
    struct kf_name_index *x = g->names;
    if (!x) x = g->names = kf_calloc(1, sizeof *x);
    if (id >= x->cap_next) {
        int cap = x->cap_next ? x->cap_next : 16;
        while (cap <= id) cap *= 2;
        x->next = kf_realloc(x->next, (size_t)cap * sizeof *x->next);
        memset(x->next + x->cap_next, 0, (size_t)(cap - x->cap_next) * sizeof *x->next);
        x->cap_next = cap;
    }
    if (x->n + 1 > x->nbuckets) {
        free(x->head);
        x->nbuckets = x->nbuckets ? 2 * x->nbuckets : 64;
        x->head = kf_calloc((size_t)x->nbuckets, sizeof *x->head);
        for (int i = 0; i < g->nvalues; i++)
            if (i != id && g->values[i].name[0]) index_link(x, g, i);
    }
    return x;
}

/* Frees g and everything it owns; NULL is a no-op. */
void kf_graph_free(kf_graph *g) {
    if (!g) return;
    if (g->names) {
        free(g->names->head);
        free(g->names->next);
        free(g->names);
    }
    free(g->values);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->source);
    free(g->module);
    free(g);
}

int kf_module_file(const kf_graph *g, const char *ext, char *buf, size_t cap) {
    if (!g || !g->module) return 0;
    int n = snprintf(buf, cap, "%s/%s.%s", g->module->dir, g->module->name, ext);
    return n > 0 && (size_t)n < cap;
}

/* Value id of name, or -1. */
int kf_graph_find(const kf_graph *g, const char *name) {
    const struct kf_name_index *x = g->names;
    if (!x || !x->nbuckets || !name[0]) return -1;
    for (int i = x->head[name_hash(name) & (uint32_t)(x->nbuckets - 1)]; i; i = x->next[i - 1])
        if (strcmp(g->values[i - 1].name, name) == 0) return i - 1;
    return -1;
}

/* See ir.h. */
void kf_graph_set_name(kf_graph *g, int id, const char *name) {
    assert(id >= 0 && id < g->nvalues);
    kf_value *v = &g->values[id];
    if (v->name[0]) { /* unlink it from its old name's bucket */
        struct kf_name_index *x = g->names;
        int *p = &x->head[name_hash(v->name) & (uint32_t)(x->nbuckets - 1)];
        while (*p && *p != id + 1) p = &x->next[*p - 1];
        assert(*p == id + 1);
        *p = x->next[id];
        x->n--;
        if (v->name[0] == '%') g->ntemps--;
        v->name[0] = 0;
    }
    if (!name[0]) return;
    struct kf_name_index *x = index_reserve(g, id);
    snprintf(v->name, sizeof v->name, "%s", name);
    index_link(x, g, id);
    x->n++;
    if (v->name[0] == '%') g->ntemps++;
}

/* Appends a zeroed value (not yet named) and returns its id. */
static int push_value(kf_graph *g) {
    if (g->nvalues == g->cap_values) {
        g->cap_values = g->cap_values ? 2 * g->cap_values : 16;
        g->values = kf_realloc(g->values, (size_t)g->cap_values * sizeof *g->values);
    }
    kf_value *v = &g->values[g->nvalues];
    memset(v, 0, sizeof *v);
    v->producer = -1;
    v->input_index = -1;
    v->output_index = -1;
    return g->nvalues++;
}

/* Gives value id (still unnamed) the first free temporary name "%N", N counting the
 * temporaries so far. */
static void name_temporary(kf_graph *g, int id) {
    int n = g->ntemps + 1;
    char name[64];
    do snprintf(name, sizeof name, "%%%d", n++);
    while (kf_graph_find(g, name) >= 0);
    kf_graph_set_name(g, id, name);
}

static int check_name(kf_graph *g, const char *name, int line, int col, kf_error *err) {
    if (!name[0]) {
        kf_error_set(err, KF_ERR_ARG, g->path, line, col, "a value name must not be empty");
        return -1;
    }
    if (strlen(name) >= sizeof g->values[0].name) {
        kf_error_set(err, KF_ERR_ARG, g->path, line, col,
                     "value name '%.40s...' is too long (at most %d characters)", name,
                     (int)sizeof g->values[0].name - 1);
        return -1;
    }
    int old = kf_graph_find(g, name);
    if (old >= 0) {
        kf_error_set(err, KF_ERR_ARG, g->path, line, col, "'%s' is already defined", name);
        return -1;
    }
    return 0;
}

/* Adds a graph input; see ir.h. Errors (KF_ERR_ARG): bad or duplicate name, bad dtype,
 * rank over KF_MAX_DIMS, a dim < 1, or more elements than fit in int64. */
int kf_graph_add_input(kf_graph *g, const char *name, kf_dtype dt, const kf_shape *shape,
                       kf_error *err) {
    if (check_name(g, name, 0, 0, err) < 0) return -1;
    if ((unsigned)dt >= KF_DTYPE_COUNT) {
        kf_error_set(err, KF_ERR_ARG, g->path, 0, 0, "input '%s': unknown dtype %d", name, (int)dt);
        return -1;
    }
    if (shape->rank < 0 || shape->rank > KF_MAX_DIMS) {
        kf_error_set(err, KF_ERR_ARG, g->path, 0, 0,
                     "input '%s': rank %d is out of range (0 to %d dimensions)", name,
                     shape->rank, KF_MAX_DIMS);
        return -1;
    }
    int64_t n = 1;
    for (int i = 0; i < shape->rank; i++) {
        if (shape->d[i] < 1) {
            kf_error_set(err, KF_ERR_ARG, g->path, 0, 0,
                         "input '%s': dimension %d is %lld, expected a positive size", name, i,
                         (long long)shape->d[i]);
            return -1;
        }
        if (__builtin_mul_overflow(n, shape->d[i], &n)) {
            kf_error_set(err, KF_ERR_ARG, g->path, 0, 0,
                         "input '%s': too many elements (the product of the dimensions "
                         "overflows 64 bits)", name);
            return -1;
        }
    }
    uint64_t bytes;
    if (!kf_shape_bytes(shape, dt, &bytes)) {
        char why[300];
        too_big_text(shape, dt, why, sizeof why);
        kf_error_set(err, KF_ERR_ARG, g->path, 0, 0, "input '%s': %s", name, why);
        return -1;
    }
    int id = push_value(g);
    kf_value *v = &g->values[id];
    kf_graph_set_name(g, id, name);
    v->dtype = dt;
    v->shape = *shape;
    for (int i = shape->rank; i < KF_MAX_DIMS; i++) v->shape.d[i] = 0;
    g->inputs = kf_realloc(g->inputs, (size_t)(g->ninputs + 1) * sizeof *g->inputs);
    v->input_index = g->ninputs;
    g->inputs[g->ninputs++] = id;
    return id;
}

/* A module task's output: a value of its own type that no node computes (the module does). */
int kf_graph_add_declared_output(kf_graph *g, const char *name, kf_dtype dt, const kf_shape *shape,
                                 kf_error *err) {
    int id = kf_graph_add_input(g, name, dt, shape, err);
    if (id < 0) return -1;
    g->ninputs--;
    g->values[id].input_index = -1;
    if (kf_graph_mark_output(g, id, err) != KF_OK) return -1;
    return id;
}

/* Adds a rank-0 f32 constant named as a temporary; returns its id. */
int kf_graph_add_const(kf_graph *g, double v) {
    int id = push_value(g);
    g->values[id].dtype = KF_F32;
    g->values[id].is_const = 1;
    g->values[id].cval = v;
    name_temporary(g, id);
    return id;
}

/* Marks value as the next output. KF_ERR_ARG for a constant, a graph input (a kernel's
 * outputs are buffers it computes, never aliases of its inputs) or a value already marked. */
kf_status kf_graph_mark_output(kf_graph *g, int value, kf_error *err) {
    assert(value >= 0 && value < g->nvalues);
    kf_value *v = &g->values[value];
    if (v->is_const)
        return kf_error_set(err, KF_ERR_ARG, g->path, v->line, v->col,
                            "'%s' is a constant; an output must be computed from the inputs",
                            v->name);
    if (v->input_index >= 0)
        return kf_error_set(err, KF_ERR_ARG, g->path, v->line, v->col,
                            "'%s' is a graph input; an output must be computed by an op",
                            v->name);
    if (v->output_index >= 0)
        return kf_error_set(err, KF_ERR_ARG, g->path, v->line, v->col,
                            "'%s' is already an output", v->name);
    g->outputs = kf_realloc(g->outputs, (size_t)(g->noutputs + 1) * sizeof *g->outputs);
    v->output_index = g->noutputs;
    g->outputs[g->noutputs++] = value;
    return KF_OK;
}

/* ------------------------------------------------------ shape/type rules */

/* Context of one kf_graph_add_node call, for messages. */
typedef struct node_ctx {
    kf_graph *g;
    const kf_op_def *info;
    int line, col;
    kf_error *err;
} node_ctx;

static int type_error(const node_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int type_error(const node_ctx *c, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kf_error_set(c->err, KF_ERR_TYPE, c->g->path, c->line, c->col, "%s: %s", c->info->name, msg);
    return -1;
}

/* "'x' [4, 8] f32" or "constant 2.5", for messages. */
static void describe(const kf_graph *g, int id, char *buf, size_t cap) {
    const kf_value *v = &g->values[id];
    if (v->is_const) {
        snprintf(buf, cap, "constant %g", v->cval);
        return;
    }
    char sh[160];
    kf_shape_format(&v->shape, sh, sizeof sh);
    snprintf(buf, cap, "'%s' %s %s", v->name, sh, kf_dtype_name(v->dtype));
}

static int require_float(const node_ctx *c, int id, const char *role) {
    const kf_value *v = &c->g->values[id];
    if (is_float(v->dtype)) return 0;
    return type_error(c, "%s '%s' is %s, expected a float dtype (f32, f16, bf16 or f64)", role,
                      v->name, kf_dtype_name(v->dtype));
}

/* "[0, 2]" for an axes mask. */
static void format_axes(uint32_t m, char *buf, size_t cap) {
    kf_shape s = {0};
    for (int i = 0; i < 32; i++)
        if (m & (1u << i)) s.d[s.rank++] = i;
    kf_shape_format(&s, buf, cap);
}

/* Checks axes is a non-empty set of axes < rank (and exactly one when one is set). */
static int check_axes(const node_ctx *c, const kf_value *x, uint32_t axes, int exactly_one) {
    char sh[160], ax[160];
    kf_shape_format(&x->shape, sh, sizeof sh);
    if (axes == 0)
        return type_error(c, "needs at least one axis, found none (input '%s' is %s)", x->name, sh);
    if ((axes >> x->shape.rank) != 0) {
        int hi = 31 - __builtin_clz(axes);
        return type_error(c, "axis %d is out of range for input '%s' of shape %s (rank %d)", hi,
                          x->name, sh, x->shape.rank);
    }
    if (exactly_one && __builtin_popcount(axes) != 1) {
        format_axes(axes, ax, sizeof ax);
        return type_error(c, "takes exactly one axis, found %d (axes %s)",
                          __builtin_popcount(axes), ax);
    }
    return 0;
}

static int rule_binary(const node_ctx *c, const int *in, kf_value *res) {
    const kf_value *a = &c->g->values[in[0]], *b = &c->g->values[in[1]];
    /* i64 operands read as floats by the ops that take them; a bool (a mask) by any */
    int ints = c->info->int_operands || (a->dtype == KF_BOOL) != (b->dtype == KF_BOOL);
    if ((!(ints && (a->dtype == KF_I64 || a->dtype == KF_BOOL)) && require_float(c, in[0], "operand") < 0) ||
        (!(ints && (b->dtype == KF_I64 || b->dtype == KF_BOOL)) && require_float(c, in[1], "operand") < 0))
        return -1;
    /* A literal takes the other side's dtype, so `h * 0.5` stays f16. */
    kf_dtype dt = a->is_const ? b->dtype : a->dtype;
    if (ints) dt = is_float(a->dtype) && !a->is_const ? a->dtype : is_float(b->dtype) && !b->is_const ? b->dtype : KF_F32;
    if (!a->is_const && !b->is_const && a->dtype != b->dtype &&
        !(ints && (a->dtype == KF_I64 || b->dtype == KF_I64 || a->dtype == KF_BOOL || b->dtype == KF_BOOL))) {
        char da[256], db[256];
        describe(c->g, in[0], da, sizeof da);
        describe(c->g, in[1], db, sizeof db);
        return type_error(c, "operand dtypes differ: %s and %s (both must have the same dtype)",
                          da, db);
    }
    if (!kf_shape_broadcast(&a->shape, &b->shape, &res->shape)) {
        char sa[160], sb[160];
        kf_shape_format(&a->shape, sa, sizeof sa);
        kf_shape_format(&b->shape, sb, sizeof sb);
        for (int i = 0;; i++) { /* the pair that fails, counted from the right */
            int ia = a->shape.rank - 1 - i, ib = b->shape.rank - 1 - i;
            assert(ia >= 0 && ib >= 0);
            if (a->shape.d[ia] != b->shape.d[ib] && a->shape.d[ia] != 1 && b->shape.d[ib] != 1)
                return type_error(c,
                                  "shapes do not broadcast: '%s' is %s and '%s' is %s (dimension "
                                  "%d of '%s' is %lld, dimension %d of '%s' is %lld; each pair "
                                  "aligned from the right must be equal or 1)",
                                  a->name, sa, b->name, sb, ia, a->name, (long long)a->shape.d[ia],
                                  ib, b->name, (long long)b->shape.d[ib]);
        }
    }
    res->dtype = dt;
    return 0;
}

static int rule_reduce(const node_ctx *c, const int *in, const kf_attrs *at, kf_value *res) {
    const kf_value *x = &c->g->values[in[0]];
    int arg = kf_op_is_arg(c->info); /* an index: exactly one axis, an i64 result */
    if (require_float(c, in[0], "input") < 0 || check_axes(c, x, at->axes, arg) < 0) return -1;
    res->shape.rank = 0;
    for (int i = 0; i < x->shape.rank; i++) {
        if (at->axes & (1u << i)) {
            if (at->keepdim) res->shape.d[res->shape.rank++] = 1;
        } else {
            res->shape.d[res->shape.rank++] = x->shape.d[i];
        }
    }
    res->dtype = arg ? KF_I64 : x->dtype;
    return 0;
}

static int rule_norm(const node_ctx *c, const int *in, int nin, const kf_attrs *at,
                     kf_value *res) {
    const kf_value *x = &c->g->values[in[0]];
    if (require_float(c, in[0], "input") < 0 || check_axes(c, x, at->axes, 0) < 0) return -1;
    int r = x->shape.rank, first = __builtin_ctz(at->axes);
    uint32_t trailing = (uint32_t)((1u << r) - 1u) & ~(uint32_t)((1u << first) - 1u);
    if (at->axes != trailing) {
        char ax[160];
        format_axes(at->axes, ax, sizeof ax);
        return type_error(c,
                          "axes must be the trailing dimensions of the input (e.g. [-1] or "
                          "[-2, -1]), found %s for a rank-%d input", ax, r);
    }
    kf_shape norm = {.rank = r - first};
    for (int i = first; i < r; i++) norm.d[i - first] = x->shape.d[i];
    static const char *const role[] = {"", "weight", "bias"};
    for (int k = 1; k < nin; k++) {
        const kf_value *w = &c->g->values[in[k]];
        char sw[160], sn[160], sx[160];
        kf_shape_format(&w->shape, sw, sizeof sw);
        kf_shape_format(&norm, sn, sizeof sn);
        kf_shape_format(&x->shape, sx, sizeof sx);
        if (!kf_shape_equal(&w->shape, &norm))
            return type_error(c,
                              "%s '%s' is %s, expected %s (the normalised trailing dims of "
                              "input '%s' %s)", role[k], w->name, sw, sn, x->name, sx);
        if (w->dtype != x->dtype)
            return type_error(c, "%s '%s' is %s, expected %s like input '%s'", role[k], w->name,
                              kf_dtype_name(w->dtype), kf_dtype_name(x->dtype), x->name);
    }
    res->shape = x->shape;
    res->dtype = x->dtype;
    return 0;
}

static int rule_matmul(const node_ctx *c, const int *in, kf_value *res) {
    const kf_value *a = &c->g->values[in[0]], *b = &c->g->values[in[1]];
    if (require_float(c, in[0], "operand") < 0 || require_float(c, in[1], "operand") < 0)
        return -1;
    char sa[160], sb[160];
    kf_shape_format(&a->shape, sa, sizeof sa);
    kf_shape_format(&b->shape, sb, sizeof sb);
    if (a->shape.rank < 2 || b->shape.rank < 2)
        return type_error(c, "both operands need rank >= 2, found '%s' %s and '%s' %s", a->name,
                          sa, b->name, sb);
    if (a->dtype != b->dtype)
        return type_error(c, "operand dtypes differ: '%s' is %s and '%s' is %s", a->name,
                          kf_dtype_name(a->dtype), b->name, kf_dtype_name(b->dtype));
    int ra = a->shape.rank, rb = b->shape.rank;
    int64_t M = a->shape.d[ra - 2], Ka = a->shape.d[ra - 1];
    int64_t Kb = b->shape.d[rb - 2], N = b->shape.d[rb - 1];
    if (Ka != Kb)
        return type_error(c, "inner dimensions differ: a is %s (K=%lld), b is %s (K=%lld)", sa,
                          (long long)Ka, sb, (long long)Kb);
    kf_shape ba = a->shape, bb = b->shape, bo;
    ba.rank -= 2;
    bb.rank -= 2;
    if (!kf_shape_broadcast(&ba, &bb, &bo)) {
        char sba[160], sbb[160];
        kf_shape_format(&ba, sba, sizeof sba);
        kf_shape_format(&bb, sbb, sizeof sbb);
        return type_error(c, "batch dimensions do not broadcast: a has %s, b has %s", sba, sbb);
    }
    res->shape = bo;
    res->shape.d[res->shape.rank++] = M;
    res->shape.d[res->shape.rank++] = N;
    res->dtype = a->dtype;
    return 0;
}

/* A view's shape is its index map's output; the record's builder says why a map does not
 * fit the input. Views move any dtype. */
static int rule_view(const node_ctx *c, const int *in, const kf_attrs *at, kf_value *res) {
    const kf_value *x = &c->g->values[in[0]];
    if (x->is_const) return type_error(c, "a view of a constant (views read tensors)");
    kf_imap m;
    char why[300];
    if (c->info->view(x->shape.rank, x->shape.d, at, &m, why, sizeof why) < 0) {
        kf_error_set(c->err, KF_ERR_TYPE, c->g->path, c->line, c->col, "%s", why);
        return -1;
    }
    res->shape.rank = m.out_rank;
    for (int j = 0; j < m.out_rank; j++) res->shape.d[j] = m.out_dims[j];
    res->dtype = x->dtype;
    return 0;
}

/* An OWN-shaped op: its record's shape function. */
static int rule_own(const node_ctx *c, const int *in, int nin, const kf_attrs *at, kf_value *res) {
    kf_op_dims s = {.nin = nin};
    for (int k = 0; k < nin; k++) {
        const kf_value *x = &c->g->values[in[k]];
        if (x->is_const) return type_error(c, "operand %d is a constant (this op reads tensors)", k + 1);
        if (require_float(c, in[k], k == 0 ? "input" : "operand") < 0) return -1;
        s.rank[k] = x->shape.rank;
        s.d[k] = x->shape.d;
    }
    char why[300];
    int r = 0;
    int64_t d[KF_MAX_DIMS];
    if (c->info->own_shape(&s, at, &r, d, why, sizeof why) < 0) {
        kf_error_set(c->err, KF_ERR_TYPE, c->g->path, c->line, c->col, "%s", why);
        return -1;
    }
    res->shape.rank = r;
    for (int j = 0; j < r; j++) res->shape.d[j] = d[j];
    res->dtype = c->g->values[in[0]].dtype;
    return 0;
}

/* gather(x, index, axis): x a float tensor, index i64 of x's rank, no larger than x on
 * every dim but axis (torch.gather's rule); the result has the index's shape, x's dtype. */
static int rule_gather(const node_ctx *c, const int *in, const kf_attrs *at, kf_value *res) {
    const kf_value *x = &c->g->values[in[0]], *ix = &c->g->values[in[1]];
    char xs[160], is[160];
    kf_shape_format(&x->shape, xs, sizeof xs);
    kf_shape_format(&ix->shape, is, sizeof is);
    if (require_float(c, in[0], "input") < 0) return -1;
    if (ix->dtype != KF_I64)
        return type_error(c, "index '%s' is %s, expected i64 (positions along the axis)", ix->name,
                          kf_dtype_name(ix->dtype));
    if (x->shape.rank == 0) return type_error(c, "input '%s' is a scalar: there is no axis to gather along", x->name);
    if (check_axes(c, x, at->axes, 1) < 0) return -1;
    if (ix->shape.rank != x->shape.rank)
        return type_error(c, "index '%s' %s has rank %d and input '%s' %s rank %d: gather takes an index of "
                          "the input's rank (torch.gather)", ix->name, is, ix->shape.rank, x->name, xs,
                          x->shape.rank);
    int ax = __builtin_ctz(at->axes);
    for (int d = 0; d < x->shape.rank; d++)
        if (d != ax && ix->shape.d[d] > x->shape.d[d])
            return type_error(c, "index '%s' %s is larger than input '%s' %s in dim %d (%lld > %lld): only "
                              "along the gathered axis %d may it be larger", ix->name, is, x->name, xs, d,
                              (long long)ix->shape.d[d], (long long)x->shape.d[d], ax);
    res->shape = ix->shape;
    res->dtype = x->dtype;
    return 0;
}

/* The operands and result of node n as an OWN record's functions take them. */
kf_op_dims kf_node_dims(const kf_graph *g, const kf_node *n) {
    kf_op_dims s = {.nin = n->nin};
    for (int k = 0; k < n->nin && k < 4; k++) {
        s.rank[k] = g->values[n->in[k]].shape.rank;
        s.d[k] = g->values[n->in[k]].shape.d;
    }
    s.out_rank = g->values[n->out].shape.rank;
    s.out = g->values[n->out].shape.d;
    return s;
}

/* See ir.h. */
int64_t kf_node_sum_terms(const kf_graph *g, const kf_node *n) {
    const kf_op_def *d = kf_op_get(n->op);
    const kf_shape *s = &g->values[n->in[0]].shape;
    if (d->cls == KF_CLASS_CONTRACT) /* a transposed operand is a transpose view before it */
        return s->rank == 1 ? s->d[0] : s->rank ? s->d[s->rank - 1] : 1;
    int summing = (d->cls == KF_CLASS_REDUCE || d->cls == KF_CLASS_SCAN) && d->combiner == KF_COMB_SUM;
    if (!summing) return 0;
    int64_t R = 1;
    for (int a = 0; a < s->rank; a++)
        if (n->attr.axes >> a & 1u) R *= s->d[a];
    return R;
}

/* See ir.h. */
int64_t kf_graph_longest_sum(const kf_graph *g) {
    int64_t K = 1;
    for (int k = 0; k < g->nnodes; k++) {
        int64_t t = kf_node_sum_terms(g, &g->nodes[k]);
        if (t > K) K = t;
    }
    return K;
}

/* Applies op; see ir.h. Operand ids must exist (asserted). Errors are KF_ERR_TYPE at
 * (line, col): wrong arity, non-float operands, shapes that do not fit the op's rule; and
 * KF_ERR_ARG for a name that is taken or too long. */
int kf_graph_add_node(kf_graph *g, kf_op op, const int *ins, int nin, const kf_attrs *attrs,
                      const char *name, int line, int col, kf_error *err) {
    node_ctx c = {g, kf_op_get(op), line, col, err};
    const kf_op_def *info = c.info;
    if (nin < info->min_in || nin > info->max_in) {
        if (info->min_in == info->max_in)
            return type_error(&c, "takes %d operand%s, found %d", info->min_in,
                              info->min_in == 1 ? "" : "s", nin);
        return type_error(&c, "takes %d to %d operands, found %d", info->min_in, info->max_in, nin);
    }
    for (int i = 0; i < nin; i++) assert(ins[i] >= 0 && ins[i] < g->nvalues);
    if (name && check_name(g, name, line, col, err) < 0) return -1;

    const kf_value *x = &g->values[ins[0]];
    kf_attrs at = attrs ? *attrs : kf_attrs_default(op, x->shape.rank);
    kf_value res;
    memset(&res, 0, sizeof res);
    int rc = 0;
    switch (info->kind) {
    case KF_KIND_UNARY:
        rc = require_float(&c, ins[0], "input");
        res.shape = x->shape;
        res.dtype = x->dtype;
        break;
    case KF_KIND_BINARY: rc = rule_binary(&c, ins, &res); break;
    case KF_KIND_REDUCE: rc = rule_reduce(&c, ins, &at, &res); break;
    case KF_KIND_SOFTMAX:
    case KF_KIND_SCAN:
        rc = require_float(&c, ins[0], "input");
        if (rc == 0) rc = check_axes(&c, x, at.axes, 1);
        res.shape = x->shape;
        res.dtype = x->dtype;
        break;
    case KF_KIND_NORM: rc = rule_norm(&c, ins, nin, &at, &res); break;
    case KF_KIND_MATMUL: rc = rule_matmul(&c, ins, &res); break;
    case KF_KIND_VIEW: rc = rule_view(&c, ins, &at, &res); break;
    case KF_KIND_OWN: rc = rule_own(&c, ins, nin, &at, &res); break;
    case KF_KIND_GATHER: rc = rule_gather(&c, ins, &at, &res); break;
    }
    if (rc < 0) return -1;
    uint64_t bytes;
    if (!kf_shape_bytes(&res.shape, res.dtype, &bytes)) { /* broadcasting can multiply */
        char why[300];
        too_big_text(&res.shape, res.dtype, why, sizeof why);
        return type_error(&c, "the result %s", why);
    }

    int all_const = 1;
    for (int i = 0; i < nin; i++) all_const &= g->values[ins[i]].is_const;
    if (all_const && kf_op_is_elementwise(op)) {
        double b = nin > 1 ? g->values[ins[1]].cval : 0;
        int id = kf_graph_add_const(g, kf_op_eval(op, &at, x->cval, b));
        if (name) kf_graph_set_name(g, id, name);
        g->values[id].line = line;
        g->values[id].col = col;
        return id;
    }

    if (g->nnodes == g->cap_nodes) {
        g->cap_nodes = g->cap_nodes ? 2 * g->cap_nodes : 16;
        g->nodes = kf_realloc(g->nodes, (size_t)g->cap_nodes * sizeof *g->nodes);
    }
    int id = push_value(g); /* may move g->values: x is not used below */
    kf_value *v = &g->values[id];
    v->dtype = res.dtype;
    v->shape = res.shape;
    for (int i = v->shape.rank; i < KF_MAX_DIMS; i++) v->shape.d[i] = 0;
    v->producer = g->nnodes;
    v->line = line;
    v->col = col;
    if (name) kf_graph_set_name(g, id, name);
    else name_temporary(g, id);

    kf_node *n = &g->nodes[g->nnodes++];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->nin = nin;
    for (int i = 0; i < nin; i++) n->in[i] = ins[i];
    n->attr = at;
    n->out = id;
    n->line = line;
    n->col = col;
    return id;
}

/* ------------------------------------------------------------- counting */

static double numel_of(const kf_graph *g, int id) {
    return (double)kf_shape_numel(&g->values[id].shape);
}

/* FLOPs of one node by the convention of kf_op_def.flops (kforge/ops.h). */
double kf_node_flops(const kf_graph *g, const kf_node *n) {
    const kf_op_def *info = kf_op_get(n->op);
    switch (info->kind) {
    case KF_KIND_UNARY:
    case KF_KIND_BINARY: return info->flops * numel_of(g, n->out);
    case KF_KIND_REDUCE:
    case KF_KIND_SOFTMAX:
    case KF_KIND_SCAN:
    case KF_KIND_NORM: return info->flops * numel_of(g, n->in[0]);
    case KF_KIND_MATMUL: {
        /* flops is 2 per multiply-add: 2*M*N*K per output matrix. */
        const kf_value *a = &g->values[n->in[0]];
        double K = (double)a->shape.d[a->shape.rank - 1];
        return info->flops * numel_of(g, n->out) * K;
    }
    case KF_KIND_VIEW:
    case KF_KIND_GATHER: return 0;
    case KF_KIND_OWN: {
        kf_op_dims s = kf_node_dims(g, n);
        return info->own_flops(&s, &n->attr);
    }
    }
    return 0;
}

/* Sum of kf_node_flops over every node. */
double kf_graph_flops(const kf_graph *g) {
    if (g->module) return g->module->flops;
    double f = 0;
    for (int i = 0; i < g->nnodes; i++) f += kf_node_flops(g, &g->nodes[i]);
    return f;
}

/* Bytes of the graph inputs plus the graph outputs; constants are free. Inputs and outputs
 * are distinct values (kf_graph_mark_output refuses inputs), so each counts once. An input
 * counts the elements its readers can reach at most: all of it for a computing reader,
 * at most the result's size for a view (a slice of a row reads the row) or a gather's data, so that a task
 * reading part of an input is not given a floor no kernel needs (and called impossible). */
double kf_graph_min_bytes(const kf_graph *g) {
    if (g->module) return g->module->bytes;
    double b = 0;
    for (int i = 0; i < g->ninputs; i++) {
        int x = g->inputs[i];
        double n = numel_of(g, x), reach = 0;
        for (int ni = 0; ni < g->nnodes && reach < n; ni++) {
            const kf_node *nd = &g->nodes[ni];
            for (int a = 0; a < nd->nin; a++) {
                if (nd->in[a] != x) continue;
                kf_op_class cl = kf_op_get(nd->op)->cls;
                /* a view reads its result's size at most; a gather as much of its data */
                reach += cl == KF_CLASS_VIEW || (cl == KF_CLASS_GATHER && a == 0) ? numel_of(g, nd->out) : n;
                break;
            }
        }
        b += (reach < n ? reach : n) * kf_dtype_size(g->values[x].dtype);
    }
    for (int i = 0; i < g->noutputs; i++) {
        const kf_value *v = &g->values[g->outputs[i]];
        b += numel_of(g, g->outputs[i]) * kf_dtype_size(v->dtype);
    }
    return b;
}

/* Default (atol, rtol, nmse) for outputs of dtype dt; integer outputs must match exactly. */
void kf_tolerance_default(kf_dtype dt, double *atol, double *rtol, double *nmse) {
    double a = 1e-4, r = 1e-4, e = 1e-8; /* f32 */
    switch (dt) {
    case KF_F32: break;
    case KF_F16: a = 1e-2, r = 1e-2, e = 1e-4; break;
    case KF_BF16: a = 2e-2, r = 2e-2, e = 1e-3; break;
    case KF_F64: a = 1e-10, r = 1e-10, e = 1e-18; break;
    case KF_I64: a = 0, r = 0, e = 0; break;
    default: assert(!"kf_tolerance_default: bad dtype");
    }
    if (atol) *atol = a;
    if (rtol) *rtol = r;
    if (nmse) *nmse = e;
}

/* See ir.h. Per graph input, what its values must satisfy, from the ops that read it (directly or
 * through any chain of nodes; g's nodes are in topological order, so one backward pass
 * carries every constraint to the inputs):
 *   pos[i]  strictly positive: an op with KF_DOMAIN_POS lies on a path from it;
 *   mag[i]  the magnitude limit of its offset and large sets: the smallest kf_op_def.mag
 *           of the ops on its paths (KF_MAG_DEFAULT when none has one).
 * Conservative by construction: relu -> log still makes the input positive (nothing
 * tracks that relu already made it non-negative), and a scale between an input and exp
 * is not divided out of the limit. */
void kf_graph_input_domains(const kf_graph *g, int *pos, double *mag) {
    char *need = kf_calloc((size_t)g->nvalues + 1, 1);
    double *lim = kf_malloc(((size_t)g->nvalues + 1) * sizeof *lim);
    for (int v = 0; v < g->nvalues; v++) lim[v] = KF_MAG_DEFAULT;
    for (int k = g->nnodes - 1; k >= 0; k--) {
        const kf_node *n = &g->nodes[k];
        const kf_op_def *d = kf_op_get(n->op);
        int mark = need[n->out] || d->domain == KF_DOMAIN_POS;
        double m = lim[n->out];
        if (d->mag > 0 && d->mag < m) m = d->mag;
        for (int i = 0; i < n->nin; i++) {
            if (n->in[i] < 0 || n->in[i] >= g->nvalues) continue;
            if (mark) need[n->in[i]] = 1;
            if (m < lim[n->in[i]]) lim[n->in[i]] = m;
        }
    }
    for (int i = 0; i < g->ninputs; i++) {
        pos[i] = need[g->inputs[i]];
        if (mag) mag[i] = lim[g->inputs[i]];
    }
    free(need);
    free(lim);
}
