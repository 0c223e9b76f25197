/*
 * The candidate contract (include/kforge/candidate.h): source text plus manifest. The
 * tunables are read from "kforge:tunable NAME v1 v2 ..." comment lines in the source, so
 * that a hand-written or model-written kernel declares them where a reader sees them.
 */
#include "kforge/candidate.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kf_status parse_tunables(kf_candidate *c, kf_error *err) {
    const char *key = "kforge:tunable";
    int line = 1;
    for (const char *s = c->source; *s; s++) {
        if (*s == '\n') line++;
        if (strncmp(s, key, strlen(key)) != 0) continue;
        const char *p = s + strlen(key);
        const char *eol = strchr(p, '\n');
        if (!eol) eol = p + strlen(p);
        if (c->ntunables == KF_MAX_TUNABLES)
            return kf_error_set(err, KF_ERR_PARSE, "<candidate>", line, 1,
                                "more than %d tunables", KF_MAX_TUNABLES);
        kf_tunable *t = &c->tunables[c->ntunables];
        memset(t, 0, sizeof *t);
        while (p < eol && isspace((unsigned char)*p)) p++;
        int n = 0;
        while (p < eol && (isalnum((unsigned char)*p) || *p == '_') && n < 31) t->name[n++] = *p++;
        if (n == 0 || isdigit((unsigned char)t->name[0]))
            return kf_error_set(err, KF_ERR_PARSE, "<candidate>", line, (int)(p - s) + 1,
                                "kforge:tunable needs a macro name, then its values");
        while (p < eol) {
            while (p < eol && isspace((unsigned char)*p)) p++;
            if (p >= eol || *p == '*') break; /* end of a block comment */
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p)
                return kf_error_set(err, KF_ERR_PARSE, "<candidate>", line, (int)(p - s) + 1,
                                    "tunable %s: expected an integer value, found '%c'",
                                    t->name, *p);
            if (t->nvalues == KF_MAX_TUNABLE_VALUES)
                return kf_error_set(err, KF_ERR_PARSE, "<candidate>", line, 1,
                                    "tunable %s has more than %d values", t->name,
                                    KF_MAX_TUNABLE_VALUES);
            t->values[t->nvalues++] = v;
            p = end;
        }
        if (t->nvalues == 0)
            return kf_error_set(err, KF_ERR_PARSE, "<candidate>", line, 1,
                                "tunable %s lists no values", t->name);
        c->ntunables++;
        s = eol - 1;
    }
    return KF_OK;
}

/* The carried launch plan: what was parsed, for which flags and buffer count. Reached
 * through a pointer so that a reader holding a const candidate can fill it once. */
struct kf_plan_slot {
    int parsed;              /* 0: nothing parsed yet */
    int nbufs;
    char flags[sizeof ((kf_candidate *)0)->flags];
    kf_status st;
    kf_launch_plan plan;
    kf_error err;            /* st != KF_OK: why */
};

kf_status kf_candidate_init(kf_candidate *c, const char *platform, const char *source,
                            const char *entry, kf_error *err) {
    memset(c, 0, sizeof *c);
    c->plan = kf_calloc(1, sizeof *c->plan);
    snprintf(c->platform, sizeof c->platform, "%s", platform ? platform : "cpu");
    snprintf(c->entry, sizeof c->entry, "%s", entry ? entry : "kforge_kernel");
    c->source = kf_strdup(source ? source : "");
    kf_status st = parse_tunables(c, err);
    if (st != KF_OK) kf_candidate_clear(c);
    return st;
}

void kf_candidate_clear(kf_candidate *c) {
    free(c->source);
    free(c->plan);
    memset(c, 0, sizeof *c);
}

void kf_candidate_copy(kf_candidate *dst, const kf_candidate *src) {
    *dst = *src;
    dst->source = kf_strdup(src->source ? src->source : "");
    dst->plan = kf_calloc(1, sizeof *dst->plan);
    if (src->plan) *dst->plan = *src->plan;
}

/* See candidate.h. */
kf_status kf_candidate_plan(const kf_candidate *c, int nbufs, const kf_launch_plan **plan,
                            kf_error *err) {
    if (plan) *plan = NULL;
    if (!c || !plan || !c->source || !c->plan)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "kf_candidate_plan: no candidate made by kf_candidate_init");
    kf_plan_slot *s = c->plan;
    if (!s->parsed || s->nbufs != nbufs || strcmp(s->flags, c->flags) != 0) {
        memset(s, 0, sizeof *s);
        s->parsed = 1;
        s->nbufs = nbufs;
        snprintf(s->flags, sizeof s->flags, "%s", c->flags);
        s->st = kf_launch_plan_parse(c->source, c->flags, nbufs, &s->plan, &s->err);
    }
    if (s->st != KF_OK) {
        if (err) *err = s->err;
        return s->st;
    }
    *plan = &s->plan;
    return KF_OK;
}

/* ---- the GPU launch plan ----
 *
 * "kforge:scratch NAME BYTES" and "kforge:launch KERNEL global=.. local=.. args=.." lines.
 * Expressions are evaluated at once with the tunable values of this instance: a small
 * recursive-descent evaluator over int64 (+ - * / %, parentheses, cdiv(a, b), tunable
 * names). Division by zero and unknown names are parse errors, not crashes. */

typedef struct plan_env {
    const kf_candidate *c; /* tunables (first value = default) */
    const char *flags;     /* "-DNAME=VALUE" words override defaults */
    const char *s;         /* cursor */
    int line;
    kf_error *err;
    int failed;
} plan_env;

static int plan_fail(plan_env *e, const char *fmt, const char *what) {
    if (!e->failed)
        kf_error_set(e->err, KF_ERR_PARSE, "<candidate>", e->line, 1, fmt, what);
    e->failed = 1;
    return 0;
}

static void plan_ws(plan_env *e) {
    while (*e->s == ' ' || *e->s == '\t') e->s++;
}

/* Value of tunable name: -Dname=V in flags, else its first declared value. */
static int plan_name(plan_env *e, const char *name, int64_t *v) {
    size_t n = strlen(name);
    for (const char *f = e->flags ? e->flags : ""; (f = strstr(f, "-D")) != NULL; f += 2) {
        if (strncmp(f + 2, name, n) == 0 && f[2 + n] == '=') {
            char *end;
            long long x = strtoll(f + 3 + n, &end, 10);
            if (end != f + 3 + n) {
                *v = x;
                return 1;
            }
        }
    }
    for (int i = 0; i < e->c->ntunables; i++)
        if (strcmp(e->c->tunables[i].name, name) == 0) {
            *v = e->c->tunables[i].values[0];
            return 1;
        }
    return plan_fail(e, "unknown name '%s' in a launch expression (not a tunable)", name);
}

static int64_t plan_expr(plan_env *e);

static int64_t plan_atom(plan_env *e) {
    plan_ws(e);
    const char *s = e->s;
    if (*s == '(') {
        e->s++;
        int64_t v = plan_expr(e);
        plan_ws(e);
        if (*e->s != ')') return plan_fail(e, "expected ')' in a launch expression%s", "");
        e->s++;
        return v;
    }
    if (*s == '-') {
        e->s++;
        return -plan_atom(e);
    }
    if (isdigit((unsigned char)*s)) {
        char *end;
        long long v = strtoll(s, &end, 10);
        e->s = end;
        return v;
    }
    if (isalpha((unsigned char)*s) || *s == '_') {
        char name[64];
        int n = 0;
        while ((isalnum((unsigned char)*e->s) || *e->s == '_') && n < 63) name[n++] = *e->s++;
        name[n] = 0;
        plan_ws(e);
        if (strcmp(name, "cdiv") == 0 && *e->s == '(') {
            e->s++;
            int64_t a = plan_expr(e);
            plan_ws(e);
            if (*e->s != ',') return plan_fail(e, "cdiv needs two arguments%s", "");
            e->s++;
            int64_t b = plan_expr(e);
            plan_ws(e);
            if (*e->s != ')') return plan_fail(e, "expected ')' after cdiv's arguments%s", "");
            e->s++;
            if (b == 0) return plan_fail(e, "division by zero in cdiv%s", "");
            return (a + b - 1) / b;
        }
        int64_t v = 0;
        plan_name(e, name, &v);
        return v;
    }
    char what[2] = {*s ? *s : '?', 0};
    return plan_fail(e, "unexpected '%s' in a launch expression", what);
}

static int64_t plan_term(plan_env *e) {
    int64_t v = plan_atom(e);
    for (;;) {
        plan_ws(e);
        char op = *e->s;
        if (op != '*' && op != '/' && op != '%') return v;
        if (op == '*' && e->s[1] == '/') return v; /* the end of a block comment */
        e->s++;
        int64_t r = plan_atom(e);
        if (op == '*') v *= r;
        else if (r == 0) return plan_fail(e, "division by zero in a launch expression%s", "");
        else v = op == '/' ? v / r : v % r;
    }
}

static int64_t plan_expr(plan_env *e) {
    int64_t v = plan_term(e);
    for (;;) {
        plan_ws(e);
        char op = *e->s;
        if (op != '+' && op != '-') return v;
        e->s++;
        int64_t r = plan_term(e);
        v = op == '+' ? v + r : v - r;
    }
}

/* Parse a comma-separated list of up to max expressions ending at a blank or end of
 * line; returns the count. */
static int plan_list(plan_env *e, int64_t *out, int max, const char *what) {
    int n = 0;
    for (;;) {
        if (n == max) return plan_fail(e, "too many values for %s", what);
        out[n++] = plan_expr(e);
        if (e->failed) return 0;
        if (*e->s != ',') break;
        e->s++;
    }
    return n;
}

static void plan_word(plan_env *e, char *buf, size_t cap) {
    plan_ws(e);
    size_t n = 0;
    while ((isalnum((unsigned char)*e->s) || *e->s == '_') && n + 1 < cap) buf[n++] = *e->s++;
    buf[n] = 0;
}

static void plan_scratch_line(plan_env *e, kf_launch_plan *p) {
    if (p->nscratch == KF_MAX_SCRATCH) {
        plan_fail(e, "more than %s scratch buffers", "8");
        return;
    }
    char *name = p->scratch_name[p->nscratch];
    plan_word(e, name, 32);
    if (!name[0] || isdigit((unsigned char)name[0])) {
        plan_fail(e, "kforge:scratch needs a NAME then a byte count%s", "");
        return;
    }
    for (int k = 0; k < p->nscratch; k++)
        if (strcmp(p->scratch_name[k], name) == 0) {
            plan_fail(e, "scratch buffer '%s' declared twice", name);
            return;
        }
    int64_t bytes = plan_expr(e);
    if (e->failed) return;
    if (bytes <= 0) {
        plan_fail(e, "scratch buffer '%s' needs a positive size", name);
        return;
    }
    p->scratch_bytes[p->nscratch++] = bytes;
}

static void plan_launch_line(plan_env *e, kf_launch_plan *p, int nbufs) {
    if (p->nlaunches == KF_MAX_LAUNCHES) {
        plan_fail(e, "more than %s launches", "8");
        return;
    }
    kf_launch *l = &p->l[p->nlaunches];
    memset(l, 0, sizeof *l);
    plan_word(e, l->kernel, sizeof l->kernel);
    if (!l->kernel[0]) {
        plan_fail(e, "kforge:launch needs a kernel name first%s", "");
        return;
    }
    int have_g = 0, have_l = 0, have_a = 0, nl = 0;
    for (;;) {
        char key[16];
        plan_word(e, key, sizeof key);
        if (!key[0]) break;
        if (*e->s != '=') {
            plan_fail(e, "expected KEY=VALUE after '%s' (keys: global, local, smem, args)", key);
            return;
        }
        e->s++;
        if (strcmp(key, "global") == 0) {
            l->ndims = plan_list(e, l->global, 3, "global");
            have_g = 1;
        } else if (strcmp(key, "local") == 0) {
            nl = plan_list(e, l->local, 3, "local");
            have_l = 1;
        } else if (strcmp(key, "smem") == 0) {
            l->smem = plan_expr(e);
            if (!e->failed && l->smem < 0) {
                plan_fail(e, "kernel '%s': smem must be >= 0 bytes", l->kernel);
                return;
            }
        } else if (strcmp(key, "args") == 0) {
            have_a = 1;
            for (;;) {
                char a[32];
                plan_word(e, a, sizeof a);
                if (!a[0]) {
                    plan_fail(e, "empty entry in args of kernel '%s'", l->kernel);
                    return;
                }
                if (l->nargs == KF_MAX_LAUNCH_ARGS) {
                    plan_fail(e, "too many args for kernel '%s'", l->kernel);
                    return;
                }
                int idx;
                if (isdigit((unsigned char)a[0])) {
                    char *end;
                    long v = strtol(a, &end, 10);
                    if (*end || (nbufs >= 0 && v >= nbufs)) {
                        plan_fail(e, "arg '%s' is not a task buffer index", a);
                        return;
                    }
                    idx = (int)v;
                } else {
                    idx = 0;
                    for (int k = 0; k < p->nscratch && !idx; k++)
                        if (strcmp(p->scratch_name[k], a) == 0) idx = -1 - k;
                    if (!idx) {
                        plan_fail(e, "arg '%s' is neither a buffer index nor a scratch name "
                                     "declared above",
                                  a);
                        return;
                    }
                }
                l->args[l->nargs++] = idx;
                if (*e->s != ',') break;
                e->s++;
            }
        } else {
            plan_fail(e, "unknown key '%s' (keys: global, local, smem, args)", key);
            return;
        }
        if (e->failed) return;
    }
    if (!have_g || !have_l || !have_a) {
        plan_fail(e, "kforge:launch %s needs global=, local= and args=", l->kernel);
        return;
    }
    if (nl != l->ndims) {
        plan_fail(e, "global and local of kernel '%s' have different dimension counts",
                  l->kernel);
        return;
    }
    for (int d = 0; d < l->ndims; d++) {
        if (l->global[d] <= 0 || l->local[d] <= 0) {
            plan_fail(e, "kernel '%s': sizes must be positive", l->kernel);
            return;
        }
        if (l->global[d] % l->local[d] != 0) {
            plan_fail(e, "kernel '%s': global size is not a multiple of local size",
                      l->kernel);
            return;
        }
    }
    p->nlaunches++;
}

kf_status kf_launch_plan_parse(const char *source, const char *flags, int nbufs,
                               kf_launch_plan *plan, kf_error *err) {
    memset(plan, 0, sizeof *plan);
    kf_candidate c;
    kf_status st = kf_candidate_init(&c, "gpu", source, NULL, err);
    if (st != KF_OK) return st;
    plan_env e = {.c = &c, .flags = flags, .err = err};
    int line = 1;
    for (const char *s = c.source; *s && !e.failed; s++) {
        if (*s == '\n') {
            line++;
            continue;
        }
        int is_l = strncmp(s, "kforge:launch", 13) == 0;
        int is_s = strncmp(s, "kforge:scratch", 14) == 0;
        if (!is_l && !is_s) continue;
        e.line = line;
        e.s = s + (is_l ? 13 : 14);
        if (is_l) plan_launch_line(&e, plan, nbufs);
        else plan_scratch_line(&e, plan);
        if (e.failed) break;
        plan_ws(&e);
        if (*e.s && *e.s != '\n' && strncmp(e.s, "*/", 2) != 0) {
            char what[2] = {*e.s, 0};
            plan_fail(&e, "unexpected '%s' at the end of a kforge: line", what);
            break;
        }
        while (*s && *s != '\n') s++;
        if (!*s) break;
        line++;
    }
    kf_candidate_clear(&c);
    if (e.failed) return err ? err->code : KF_ERR_PARSE;
    if (plan->nlaunches == 0)
        return kf_error_set(err, KF_ERR_PARSE, "<candidate>", 1, 1,
                            "a GPU candidate needs at least one '// kforge:launch KERNEL "
                            "global=.. local=.. args=..' line");
    return KF_OK;
}

static const char *const role_names[KF_ROLE_COUNT] = {
    [KF_ROLE_NONE] = "none", [KF_ROLE_THREADS] = "threads", [KF_ROLE_VECTOR] = "vector",
    [KF_ROLE_VECTOR_LOADS] = "vector_loads", [KF_ROLE_UNROLL] = "unroll", [KF_ROLE_BLOCK] = "block",
    [KF_ROLE_STREAM] = "stream", [KF_ROLE_GROUP] = "group", [KF_ROLE_PER_ITEM] = "per_item",
    [KF_ROLE_SPLIT] = "split", [KF_ROLE_SUBGROUP] = "subgroup", [KF_ROLE_TILE_M] = "tile_m",
    [KF_ROLE_TILE_N] = "tile_n", [KF_ROLE_TILE_K] = "tile_k", [KF_ROLE_REG_M] = "reg_m",
    [KF_ROLE_REG_N] = "reg_n", [KF_ROLE_DOUBLE_BUFFER] = "double_buffer",
    [KF_ROLE_MICRO_KERNEL] = "micro_kernel", [KF_ROLE_CACHE_K] = "cache_k", [KF_ROLE_NAIVE] = "naive",
    [KF_ROLE_TEMPLATE] = "template", [KF_ROLE_KERNEL] = "kernel",
};

const char *kf_role_name(kf_role r) {
    return (unsigned)r < KF_ROLE_COUNT && role_names[r] ? role_names[r] : "?";
}

kf_role kf_role_lookup(const char *name) {
    for (int i = 0; i < KF_ROLE_COUNT; i++)
        if (role_names[i] && strcmp(role_names[i], name) == 0) return (kf_role)i;
    return KF_ROLE_COUNT;
}
