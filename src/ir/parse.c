/*
 * kforge .kf task parser: a hand-written lexer and recursive-descent parser that builds a
 * kf_graph directly (docs/task-format.md is the user-facing description and grammar).
 *
 * Design notes:
 *   - The lexer turns the whole text into a token array first; the parser then has
 *     unlimited lookahead (it needs two tokens to tell `axes=` from an operand) and every
 *     error can point at a token's line and column.
 *   - Statements are one per line; a newline is a token, and there is no line continuation,
 *     so an unclosed parenthesis is reported on its own line rather than lines later.
 *   - Expressions are emitted straight into the graph as they are parsed; the result of a
 *     statement's top-level op is then renamed from its temporary "%N" to the statement's
 *     name. All shape/type rules live in kf_graph_add_node (graph.c); the parser adds the
 *     position of the op application and resolves attribute names and negative axes.
 *   - The first error wins: every parse function returns -1 after filling err once, and
 *     callers only propagate.
 */
#include "kforge/ir.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest integer literal: every integer up to 2^53 is exact as a double. */
#define KF_PARSE_MAX_INT 9007199254740992ull
/* How deeply expressions may nest (calls, parentheses): far beyond any real task, well
 * within the stack of a sanitizer build (each level is a few recursive frames). */
#define KF_PARSE_MAX_DEPTH 256

typedef enum tok_kind {
    T_EOF, T_NL, T_IDENT, T_NUM, T_LPAREN, T_RPAREN, T_LBRACK, T_RBRACK, T_COMMA, T_COLON,
    T_EQ, T_PLUS, T_MINUS, T_STAR, T_SLASH
} tok_kind;

typedef struct token {
    tok_kind k;
    int line, col;
    const char *s; /* into the source text */
    int len;
    double num;    /* T_NUM */
    int is_int;    /* T_NUM written without '.' or exponent */
} token;

typedef struct parser {
    kf_graph *g;
    const char *file; /* for messages: g->path */
    kf_error *err;
    token *t;
    int nt, pos;
    int depth;        /* expressions being parsed inside one another */
    int task_line;    /* line of the `task` statement, 0 if none */
    int tol_line[3];  /* line where atol/rtol/nmse was given, 0 if not */
    double tol[3];
    int module_line;  /* line of the `module` statement, 0 if none (a graph task) */
    int cost_line;    /* line of the `cost` statement, 0 if none */
    const int *bind;  /* kf_parse_expr_into: the values that _0, _1, ... name */
    int nbind;
} parser;

static const char *const keywords[] = {"task", "input", "output", "tolerance"};
static const char *const tol_names[] = {"atol", "rtol", "nmse"};

/* ---------------------------------------------------------------- errors */

static int fail_at(parser *p, kf_status code, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail_at(parser *p, kf_status code, int line, int col, const char *fmt, ...) {
    char msg[1000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kf_error_set(p->err, code, p->file, line, col, "%s", msg);
    return -1;
}

/* How a token reads in a message: "'relu'", "'('", "end of line". */
static const char *tok_desc(const token *t, char *buf, size_t cap) {
    if (t->k == T_EOF) snprintf(buf, cap, "end of file");
    else if (t->k == T_NL) snprintf(buf, cap, "end of line");
    else snprintf(buf, cap, "'%.*s'", t->len > 60 ? 60 : t->len, t->s);
    return buf;
}

/* "expected WHAT, found TOKEN" at the current token. */
static int expected(parser *p, const char *what) {
    char d[80];
    const token *t = &p->t[p->pos];
    return fail_at(p, KF_ERR_PARSE, t->line, t->col, "expected %s, found %s", what,
                   tok_desc(t, d, sizeof d));
}

/* ---------------------------------------------------------------- lexer */

static int is_ident_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

static void push_tok(parser *p, int *cap, token t) {
    if (p->nt == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        p->t = kf_realloc(p->t, (size_t)*cap * sizeof *p->t);
    }
    p->t[p->nt++] = t;
}

static int lex(parser *p, const char *src) {
    int cap = 0, line = 1;
    const char *line_start = src, *s = src;
    for (;;) {
        token t = {T_EOF, line, (int)(s - line_start) + 1, s, 0, 0, 0};
        char c = *s;
        if (c == 0) {
            push_tok(p, &cap, t);
            return 0;
        }
        if (c == ' ' || c == '\t' || c == '\r') {
            s++;
            continue;
        }
        if (c == '#') {
            while (*s && *s != '\n') s++;
            continue;
        }
        if (c == '\n') {
            t.k = T_NL;
            t.len = 1;
            push_tok(p, &cap, t);
            s++;
            line++;
            line_start = s;
            continue;
        }
        if (is_ident_start(c)) {
            while (is_ident_char(*s)) s++;
            t.k = T_IDENT;
            t.len = (int)(s - t.s);
            push_tok(p, &cap, t);
            continue;
        }
        if (is_digit(c) || (c == '.' && is_digit(s[1]))) {
            int is_int = 1;
            while (is_digit(*s)) s++;
            if (*s == '.') {
                is_int = 0;
                s++;
                while (is_digit(*s)) s++;
            }
            int bad = 0;
            if (*s == 'e' || *s == 'E') {
                is_int = 0;
                s++;
                if (*s == '+' || *s == '-') s++;
                if (!is_digit(*s)) bad = 1;
                while (is_digit(*s)) s++;
            }
            if (is_ident_char(*s) || *s == '.') bad = 1;
            while (is_ident_char(*s) || *s == '.') s++;
            t.k = T_NUM;
            t.len = (int)(s - t.s);
            if (bad)
                return fail_at(p, KF_ERR_PARSE, t.line, t.col, "malformed number '%.*s'",
                               t.len > 60 ? 60 : t.len, t.s);
            char buf[128];
            if (t.len >= (int)sizeof buf)
                return fail_at(p, KF_ERR_PARSE, t.line, t.col, "number is too long");
            memcpy(buf, t.s, (size_t)t.len);
            buf[t.len] = 0;
            /* Every number reaches the graph as a double and integers (axes, dims) are cast
             * back from it, so an integer must be exact as a double: beyond 2^53 the cast
             * would show, or use, another number than the one written. */
            errno = 0;
            if (is_int) {
                unsigned long long u = strtoull(buf, NULL, 10);
                if (errno == ERANGE || u > KF_PARSE_MAX_INT)
                    return fail_at(p, KF_ERR_PARSE, t.line, t.col,
                                   "integer %s is too large (at most %llu, 2^53)", buf,
                                   (unsigned long long)KF_PARSE_MAX_INT);
                t.num = (double)u;
            } else {
                t.num = strtod(buf, NULL);
                if (errno == ERANGE && (t.num > 1 || t.num < -1))
                    return fail_at(p, KF_ERR_PARSE, t.line, t.col,
                                   "number %s is out of range (a double holds at most about "
                                   "1.8e308)", buf);
            }
            t.is_int = is_int;
            push_tok(p, &cap, t);
            continue;
        }
        static const char punct[] = "()[],:=+-*/";
        static const tok_kind pkind[] = {T_LPAREN, T_RPAREN, T_LBRACK, T_RBRACK, T_COMMA, T_COLON,
                                         T_EQ,     T_PLUS,   T_MINUS,  T_STAR,   T_SLASH};
        const char *q = strchr(punct, c);
        if (q) {
            t.k = pkind[q - punct];
            t.len = 1;
            push_tok(p, &cap, t);
            s++;
            continue;
        }
        if (c >= 0x20 && c < 0x7f)
            return fail_at(p, KF_ERR_PARSE, t.line, t.col, "unexpected character '%c'", c);
        return fail_at(p, KF_ERR_PARSE, t.line, t.col, "unexpected byte 0x%02x",
                       (unsigned)(unsigned char)c);
    }
}

/* ---------------------------------------------------------------- helpers */

static token *cur(parser *p) { return &p->t[p->pos]; }
static token *peek(parser *p, int k) {
    int i = p->pos + k;
    return &p->t[i < p->nt ? i : p->nt - 1];
}
static int tok_is(const token *t, const char *word) {
    return t->k == T_IDENT && (int)strlen(word) == t->len && strncmp(t->s, word, (size_t)t->len) == 0;
}
static void tok_text(const token *t, char *buf, size_t cap) {
    snprintf(buf, cap, "%.*s", t->len, t->s);
}

static int accept(parser *p, tok_kind k) {
    if (cur(p)->k != k) return 0;
    p->pos++;
    return 1;
}

static int expect(parser *p, tok_kind k, const char *what) {
    if (accept(p, k)) return 0;
    return expected(p, what);
}

/* Optimal-string-alignment edit distance (a swap of neighbours counts 1), capped at 9. */
static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 62 || lb > 62 || abs(la - lb) > 8) return 9;
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

/* " (did you mean 'sigmoid'?)" for the closest op within distance 2, else "". */
static void suggest_op(const char *name, char *buf, size_t cap) {
    int best = 3, which = -1;
    for (int i = 0; i < KF_OP_COUNT; i++) {
        int d = edit_distance(name, kf_op_get((kf_op)i)->name);
        if (d < best) best = d, which = i;
    }
    if (which >= 0) snprintf(buf, cap, " (did you mean '%s'?)", kf_op_get((kf_op)which)->name);
    else buf[0] = 0;
}

/* Same, over the names defined so far (temporaries excluded). */
static void suggest_value(const kf_graph *g, const char *name, char *buf, size_t cap) {
    int best = 3, which = -1;
    for (int i = 0; i < g->nvalues; i++) {
        if (g->values[i].name[0] == '%') continue;
        int d = edit_distance(name, g->values[i].name);
        if (d < best) best = d, which = i;
    }
    if (which >= 0) snprintf(buf, cap, " (did you mean '%s'?)", g->values[which].name);
    else buf[0] = 0;
}

/* The name token of a definition: an identifier that is no keyword and is not yet defined. */
static int check_new_name(parser *p, const token *t, char *name, size_t cap) {
    if (t->k != T_IDENT) return expected(p, "a value name");
    for (size_t i = 0; i < sizeof keywords / sizeof *keywords; i++)
        if (tok_is(t, keywords[i]))
            return fail_at(p, KF_ERR_PARSE, t->line, t->col,
                           "expected a value name, found keyword '%s'", keywords[i]);
    if (t->len >= (int)sizeof p->g->values[0].name)
        return fail_at(p, KF_ERR_PARSE, t->line, t->col,
                       "name '%.20s...' is too long (at most %d characters)", t->s,
                       (int)sizeof p->g->values[0].name - 1);
    tok_text(t, name, cap);
    int old = kf_graph_find(p->g, name);
    if (old >= 0)
        return fail_at(p, KF_ERR_PARSE, t->line, t->col, "'%s' is already defined (line %d)",
                       name, p->g->values[old].line);
    return 0;
}

/* [-]NUMBER into *v; the token of the number (or of the sign) goes to *at. */
static int signed_number(parser *p, const char *what, double *v, const token **at) {
    const token *start = cur(p);
    *v = 0; /* written on every path: callers read them only on success, gcc -O2 cannot tell */
    if (at) *at = start;
    int neg = accept(p, T_MINUS);
    if (cur(p)->k != T_NUM) return expected(p, what);
    *v = neg ? -cur(p)->num : cur(p)->num;
    p->pos++;
    return 0;
}

/* ------------------------------------------------------------ expressions */

static int parse_expr(parser *p);

/* kf_graph_add_node at token t; its type errors already carry t's position. */
static int emit(parser *p, kf_op op, const int *ins, int nin, const kf_attrs *at, const token *t) {
    return kf_graph_add_node(p->g, op, ins, nin, at, NULL, t->line, t->col, p->err);
}

/* One parsed keyword attribute: name=value. */
typedef struct kwarg {
    const token *name;
    const token *val;          /* first token of the value */
    enum { KW_NUM, KW_BOOL, KW_LIST } kind;
    double num;
    int is_int;
    int nitems;                /* KW_LIST */
    int64_t items[KF_MAX_INTS];
    const token *item_tok[KF_MAX_INTS];
} kwarg;

static int parse_kwarg_value(parser *p, kwarg *kw) {
    kw->val = cur(p);
    if (tok_is(cur(p), "true") || tok_is(cur(p), "false")) {
        kw->kind = KW_BOOL;
        kw->num = tok_is(cur(p), "true");
        p->pos++;
        return 0;
    }
    if (accept(p, T_LBRACK)) {
        kw->kind = KW_LIST;
        kw->nitems = 0;
        if (accept(p, T_RBRACK)) return 0;
        for (;;) {
            const token *at;
            double v;
            if (signed_number(p, "an integer", &v, &at) < 0) return -1;
            if (!p->t[p->pos - 1].is_int)
                return fail_at(p, KF_ERR_PARSE, at->line, at->col,
                               "expected an integer, found '%.*s'", p->t[p->pos - 1].len,
                               p->t[p->pos - 1].s);
            if (kw->nitems == KF_MAX_INTS)
                return fail_at(p, KF_ERR_PARSE, at->line, at->col,
                               "too many list items (at most %d)", KF_MAX_INTS);
            kw->item_tok[kw->nitems] = at;
            kw->items[kw->nitems++] = (int64_t)v;
            if (accept(p, T_RBRACK)) return 0;
            if (expect(p, T_COMMA, "',' or ']'") < 0) return -1;
        }
    }
    /* inf and -inf: a pad value that no element may win against (an attention mask) */
    int neg_inf = cur(p)->k == T_MINUS && tok_is(&p->t[p->pos + 1], "inf");
    if (tok_is(cur(p), "inf") || neg_inf) {
        kw->kind = KW_NUM;
        kw->num = neg_inf ? -INFINITY : INFINITY;
        kw->is_int = 0;
        p->pos += neg_inf ? 2 : 1;
        return 0;
    }
    if (cur(p)->k == T_NUM || cur(p)->k == T_MINUS) {
        kw->kind = KW_NUM;
        if (signed_number(p, "a number", &kw->num, NULL) < 0) return -1;
        kw->is_int = p->t[p->pos - 1].is_int;
        return 0;
    }
    return expected(p, "a number, inf, true, false or a [list]");
}

/* "negative_slope, ..." : the .kf names of op's attributes. */
static void attr_names(const kf_op_def *info, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; info->attrs[k].name && n < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", info->attrs[k].name);
}

/* Turns the keyword attributes of one call into values, by the op's schema; rank < 0
 * means there is no first operand (an arity error follows from kf_graph_add_node), so
 * axes are left alone. */
static int apply_kwargs(parser *p, const kf_op_def *info, const kwarg *kws, int nkw, int rank,
                        kf_attrs *at) {
    for (int i = 0; i < nkw; i++) {
        const kwarg *kw = &kws[i];
        char name[64], list[256];
        tok_text(kw->name, name, sizeof name);
        for (int j = 0; j < i; j++)
            if (kws[j].name->len == kw->name->len &&
                strncmp(kws[j].name->s, kw->name->s, (size_t)kw->name->len) == 0)
                return fail_at(p, KF_ERR_PARSE, kw->name->line, kw->name->col,
                               "attribute '%s' given twice", name);
        const kf_attr_def *ad = kf_op_attr(info, name);
        if (!ad) {
            if (!info->attrs[0].name)
                return fail_at(p, KF_ERR_PARSE, kw->name->line, kw->name->col,
                               "%s has no attribute '%s' (it takes none)", info->name, name);
            attr_names(info, list, sizeof list);
            return fail_at(p, KF_ERR_PARSE, kw->name->line, kw->name->col,
                           "%s has no attribute '%s'; its attributes are: %s", info->name, name,
                           list);
        }
        const token *v = kw->val;
        if (ad->type == KF_ATTR_OPERAND_VIEW) continue; /* parse_call inserted the view */
        if (ad->type == KF_ATTR_INT) {
            if (kw->kind != KW_NUM || !kw->is_int)
                return fail_at(p, KF_ERR_PARSE, v->line, v->col,
                               "expected an integer for '%s', found '%.*s'", name, v->len, v->s);
            kf_attr_set_int(at, ad, (int64_t)kw->num);
        } else if (ad->type == KF_ATTR_INTS) {
            kf_ints iv = {0};
            if (kw->kind == KW_LIST) {
                iv.n = kw->nitems;
                memcpy(iv.v, kw->items, (size_t)kw->nitems * sizeof iv.v[0]);
            } else if (kw->kind == KW_NUM && kw->is_int) {
                iv.n = 1;
                iv.v[0] = (int64_t)kw->num;
            } else {
                return fail_at(p, KF_ERR_PARSE, v->line, v->col,
                               "expected an [integer list] for '%s', found '%.*s'", name, v->len, v->s);
            }
            kf_attr_set_ints(at, ad, &iv);
        } else if (ad->type == KF_ATTR_FLOAT) {
            if (kw->kind != KW_NUM)
                return fail_at(p, KF_ERR_PARSE, v->line, v->col,
                               "expected a number for '%s', found '%.*s'", name, v->len, v->s);
            kf_attr_set_float(at, ad, kw->num);
        } else if (ad->type == KF_ATTR_BOOL) {
            int ok = kw->kind == KW_BOOL ||
                     (kw->kind == KW_NUM && kw->is_int && (kw->num == 0 || kw->num == 1));
            if (!ok)
                return fail_at(p, KF_ERR_PARSE, v->line, v->col,
                               "expected true or false for '%s', found '%.*s'", name, v->len,
                               v->s);
            kf_attr_set_bool(at, ad, kw->num != 0);
        } else {
            int n = kw->kind == KW_LIST ? kw->nitems : 1;
            if (kw->kind == KW_BOOL || (kw->kind == KW_NUM && !kw->is_int))
                return fail_at(p, KF_ERR_PARSE, v->line, v->col,
                               "expected an integer axis or an [axis list] for '%s', found '%.*s'",
                               name, v->len, v->s);
            if (rank < 0) continue;
            uint32_t mask = 0;
            for (int k = 0; k < n; k++) {
                int64_t a = kw->kind == KW_LIST ? kw->items[k] : (int64_t)kw->num;
                const token *t = kw->kind == KW_LIST ? kw->item_tok[k] : v;
                if (a < -rank || a >= rank) {
                    if (rank == 0)
                        return fail_at(p, KF_ERR_TYPE, t->line, t->col,
                                       "%s: axis %lld is out of range: the input is a scalar "
                                       "(rank 0) and has no axes", info->name, (long long)a);
                    return fail_at(p, KF_ERR_TYPE, t->line, t->col,
                                   "%s: axis %lld is out of range for a rank-%d input "
                                   "(expected -%d to %d)", info->name, (long long)a, rank, rank,
                                   rank - 1);
                }
                int r = (int)(a < 0 ? a + rank : a);
                if (mask & (1u << r))
                    return fail_at(p, KF_ERR_TYPE, t->line, t->col, "%s: axis %d given twice",
                                   info->name, r);
                mask |= 1u << r;
            }
            kf_attr_set_axes(at, ad, mask);
        }
    }
    return 0;
}

/* op(args...) with the op's name token current. */
static int parse_call(parser *p) {
    const token *opt = cur(p);
    char name[64];
    tok_text(opt, name, sizeof name);
    kf_op op = opt->len < 64 ? kf_op_lookup(name) : KF_OP_COUNT;
    if (op == KF_OP_COUNT) {
        char hint[96];
        suggest_op(name, hint, sizeof hint);
        return fail_at(p, KF_ERR_PARSE, opt->line, opt->col, "unknown op '%s'%s", name, hint);
    }
    const kf_op_def *info = kf_op_get(op);
    p->pos += 2; /* name ( */
    enum { MAX_ARGS = 16 };
    int ins[MAX_ARGS], nin = 0, nkw = 0;
    kwarg kws[MAX_ARGS];
    if (!accept(p, T_RPAREN)) {
        for (;;) {
            if (nin + nkw == MAX_ARGS)
                return fail_at(p, KF_ERR_PARSE, cur(p)->line, cur(p)->col,
                               "too many arguments to %s", info->name);
            if (cur(p)->k == T_IDENT && peek(p, 1)->k == T_EQ) {
                kwarg *kw = &kws[nkw++];
                memset(kw, 0, sizeof *kw);
                kw->name = cur(p);
                p->pos += 2;
                if (parse_kwarg_value(p, kw) < 0) return -1;
            } else {
                if (nkw > 0)
                    return fail_at(p, KF_ERR_PARSE, cur(p)->line, cur(p)->col,
                                   "operands must come before keyword attributes");
                int v = parse_expr(p);
                if (v < 0) return -1;
                ins[nin++] = v;
            }
            if (accept(p, T_RPAREN)) break;
            if (expect(p, T_COMMA, "',' or ')'") < 0) return -1;
        }
    }
    /* sugar for a view of an operand (matmul's transpose_b=true): the view node, placed at
     * the attribute, replaces the operand */
    for (int i = 0; i < nkw; i++) {
        char name[64];
        tok_text(kws[i].name, name, sizeof name);
        const kf_attr_def *ad = kf_op_attr(info, name);
        if (!ad || ad->type != KF_ATTR_OPERAND_VIEW) continue;
        const token *v = kws[i].val;
        int ok = kws[i].kind == KW_BOOL || (kws[i].kind == KW_NUM && kws[i].is_int &&
                                            (kws[i].num == 0 || kws[i].num == 1));
        if (!ok)
            return fail_at(p, KF_ERR_PARSE, v->line, v->col, "expected true or false for '%s', found '%.*s'",
                           name, v->len, v->s);
        if (kws[i].num == 0 || (int)ad->offset >= nin) continue; /* a missing operand: arity error */
        int k = (int)ad->offset;
        kf_op vop = kf_op_lookup(ad->view);
        ins[k] = emit(p, vop, &ins[k], 1, NULL, kws[i].name);
        if (ins[k] < 0) return -1;
    }
    int rank = nin > 0 ? p->g->values[ins[0]].shape.rank : -1;
    kf_attrs at = kf_attrs_default(op, rank > 0 ? rank : 0);
    if (apply_kwargs(p, info, kws, nkw, rank, &at) < 0) return -1;
    return emit(p, op, ins, nin, &at, opt);
}

static int parse_primary(parser *p) {
    token *t = cur(p);
    if (t->k == T_NUM) {
        p->pos++;
        int id = kf_graph_add_const(p->g, t->num);
        p->g->values[id].line = t->line;
        p->g->values[id].col = t->col;
        return id;
    }
    if (accept(p, T_LPAREN)) {
        int v = parse_expr(p);
        if (v < 0) return -1;
        if (expect(p, T_RPAREN, "')'") < 0) return -1;
        return v;
    }
    if (t->k == T_IDENT) {
        if (peek(p, 1)->k == T_LPAREN) return parse_call(p);
        char name[64];
        if (t->len >= (int)sizeof name)
            return fail_at(p, KF_ERR_PARSE, t->line, t->col, "undefined name '%.20s...'", t->s);
        tok_text(t, name, sizeof name);
        int id = kf_graph_find(p->g, name);
        if (p->bind && name[0] == '_' && name[1] >= '0' && name[1] <= '9' && !name[2])
            id = name[1] - '0' < p->nbind ? p->bind[name[1] - '0'] : -1;
        if (id >= 0) {
            p->pos++;
            return id;
        }
        if (kf_op_lookup(name) != KF_OP_COUNT)
            return fail_at(p, KF_ERR_PARSE, t->line, t->col,
                           "'%s' is an op, not a value; call it as %s(...)", name, name);
        char hint[96];
        suggest_value(p->g, name, hint, sizeof hint);
        return fail_at(p, KF_ERR_PARSE, t->line, t->col, "undefined name '%s'%s", name, hint);
    }
    return expected(p, "an operand (a name, a number, a call or '(')");
}

/* [-]... primary. Every recursion of the expression grammar passes here, so the nesting
 * depth is counted here; a run of minus signs is a loop, not a recursion, so it nests
 * nothing. */
static int parse_unary(parser *p) {
    int first = p->pos;
    while (accept(p, T_MINUS)) {}
    int nminus = p->pos - first;
    if (++p->depth > KF_PARSE_MAX_DEPTH) {
        const token *t = cur(p);
        return fail_at(p, KF_ERR_PARSE, t->line, t->col,
                       "expression nested too deeply (more than %d calls or parentheses "
                       "inside one another)", KF_PARSE_MAX_DEPTH);
    }
    int v = parse_primary(p);
    p->depth--;
    /* innermost sign first: -(-(x)); each folds when v is a literal */
    for (int i = nminus - 1; i >= 0 && v >= 0; i--)
        v = emit(p, KF_OP_NEG, &v, 1, NULL, &p->t[first + i]);
    return v;
}

static int parse_term(parser *p) {
    int l = parse_unary(p);
    while (l >= 0 && (cur(p)->k == T_STAR || cur(p)->k == T_SLASH)) {
        token *t = cur(p);
        p->pos++;
        int r = parse_unary(p);
        if (r < 0) return -1;
        int ins[2] = {l, r};
        l = emit(p, t->k == T_STAR ? KF_OP_MUL : KF_OP_DIV, ins, 2, NULL, t);
    }
    return l;
}

static int parse_expr(parser *p) {
    int l = parse_term(p);
    while (l >= 0 && (cur(p)->k == T_PLUS || cur(p)->k == T_MINUS)) {
        token *t = cur(p);
        p->pos++;
        int r = parse_term(p);
        if (r < 0) return -1;
        int ins[2] = {l, r};
        l = emit(p, t->k == T_PLUS ? KF_OP_ADD : KF_OP_SUB, ins, 2, NULL, t);
    }
    return l;
}

/* ------------------------------------------------------------ statements */

/* NAME = expr (the name token and '=' already checked); returns the value id. */
static int parse_definition(parser *p, const token *name_tok) {
    char name[64];
    if (check_new_name(p, name_tok, name, sizeof name) < 0) return -1;
    p->pos += 2; /* NAME = */
    int before = p->g->nvalues;
    const token *rhs = cur(p);
    int v = parse_expr(p);
    if (v < 0) return -1;
    if (v < before)
        return fail_at(p, KF_ERR_PARSE, rhs->line, rhs->col,
                       "'%s = %s' only gives another name to an existing value; the right-hand "
                       "side must compute something", name, p->g->values[v].name);
    kf_graph_set_name(p->g, v, name);
    kf_value *val = &p->g->values[v];
    val->line = name_tok->line;
    val->col = name_tok->col;
    return v;
}

static int parse_task(parser *p) {
    const token *kw = cur(p);
    p->pos++;
    if (p->task_line)
        return fail_at(p, KF_ERR_PARSE, kw->line, kw->col,
                       "task name given twice (first on line %d)", p->task_line);
    if (cur(p)->k != T_IDENT) return expected(p, "a task name");
    if (cur(p)->len >= (int)sizeof p->g->name)
        return fail_at(p, KF_ERR_PARSE, cur(p)->line, cur(p)->col,
                       "task name is too long (at most %d characters)", (int)sizeof p->g->name - 1);
    tok_text(cur(p), p->g->name, sizeof p->g->name);
    p->task_line = kw->line;
    p->pos++;
    return 0;
}

/* What a typed declaration declares: a graph input, a module task's param, or a module
 * task's output. */
enum { DECL_INPUT, DECL_PARAM, DECL_OUTPUT };

static int parse_decl(parser *p, int kind);

static int parse_input(parser *p) { return parse_decl(p, DECL_INPUT); }

static int parse_decl(parser *p, int kind) {
    const token *kw_tok = cur(p);
    p->pos++; /* input, param or output */
    if (kind != DECL_INPUT && !p->module_line)
        return fail_at(p, KF_ERR_PARSE, kw_tok->line, kw_tok->col,
                       "'%s NAME: DTYPE[...]' belongs to a module task; a 'module' statement must come first",
                       kind == DECL_PARAM ? "param" : "output");
    const token *name_tok = cur(p);
    char name[64];
    if (check_new_name(p, name_tok, name, sizeof name) < 0) return -1;
    p->pos++;
    if (expect(p, T_COLON, "':' after the input's name") < 0) return -1;
    const token *dt_tok = cur(p);
    if (dt_tok->k != T_IDENT) return expected(p, "a dtype (f32, f16, bf16, i64, f64 or bool)");
    char dts[64];
    tok_text(dt_tok, dts, sizeof dts);
    kf_dtype dt;
    if (dt_tok->len >= (int)sizeof dts || !kf_dtype_parse(dts, &dt))
        return fail_at(p, KF_ERR_PARSE, dt_tok->line, dt_tok->col,
                       "unknown dtype '%.20s'; expected f32, f16, bf16, i64, f64 or bool", dts);
    p->pos++;
    const token *shape_tok = cur(p);
    if (expect(p, T_LBRACK, "'[' and the input's dimensions") < 0) return -1;
    kf_shape shape = {0};
    if (!accept(p, T_RBRACK)) {
        for (;;) {
            const token *d = cur(p);
            if (d->k != T_NUM || !d->is_int)
                return expected(p, "a positive integer dimension");
            errno = 0;
            long long v = strtoll(d->s, NULL, 10);
            if (v < 1 || errno == ERANGE)
                return fail_at(p, KF_ERR_PARSE, d->line, d->col,
                               "expected a positive integer dimension, found '%.*s'", d->len, d->s);
            if (shape.rank == KF_MAX_DIMS)
                return fail_at(p, KF_ERR_PARSE, d->line, d->col,
                               "too many dimensions (at most %d)", KF_MAX_DIMS);
            shape.d[shape.rank++] = v;
            p->pos++;
            if (accept(p, T_RBRACK)) break;
            if (expect(p, T_COMMA, "',' or ']'") < 0) return -1;
        }
    }
    int id = kind == DECL_OUTPUT ? kf_graph_add_declared_output(p->g, name, dt, &shape, p->err)
                                 : kf_graph_add_input(p->g, name, dt, &shape, p->err);
    if (id < 0) { /* too many elements or bytes: point at the shape */
        p->err->code = KF_ERR_PARSE;
        p->err->line = shape_tok->line;
        p->err->col = shape_tok->col;
        return -1;
    }
    kf_value *v = &p->g->values[id];
    v->line = name_tok->line;
    v->col = name_tok->col;
    if (kind == DECL_PARAM) {
        kf_module_task *m = p->g->module;
        uint64_t bytes = 0;
        kf_shape_bytes(&shape, dt, &bytes);
        v->is_param = 1;
        v->param_offset = m->weight_bytes;
        m->weight_bytes += (int64_t)bytes;
    }
    if (kind == DECL_INPUT && p->module_line) {
        for (int i = 0; i < p->g->ninputs - 1; i++)
            if (p->g->values[p->g->inputs[i]].is_param)
                return fail_at(p, KF_ERR_PARSE, kw_tok->line, kw_tok->col,
                               "a module task's inputs (the forward's arguments) come before its params");
    }
    if (kind == DECL_INPUT && tok_is(cur(p), "range")) {
        const token *r = cur(p);
        p->pos++;
        double lo, hi;
        if (expect(p, T_LPAREN, "'(' after range") < 0 ||
            signed_number(p, "a number (the range's low end)", &lo, NULL) < 0 ||
            expect(p, T_COMMA, "','") < 0 ||
            signed_number(p, "a number (the range's high end)", &hi, NULL) < 0 ||
            expect(p, T_RPAREN, "')'") < 0)
            return -1;
        if (!(lo < hi))
            return fail_at(p, KF_ERR_PARSE, r->line, r->col,
                           "range needs low < high, found range(%g, %g)", lo, hi);
        v = &p->g->values[id];
        v->has_range = 1;
        v->lo = lo;
        v->hi = hi;
    }
    return 0;
}

static int parse_output(parser *p) {
    if (peek(p, 2)->k == T_COLON && peek(p, 1)->k == T_IDENT) return parse_decl(p, DECL_OUTPUT);
    if (p->module_line)
        return fail_at(p, KF_ERR_PARSE, cur(p)->line, cur(p)->col,
                       "a module task's output is declared with its type, 'output NAME: DTYPE[...]': the module computes it");
    p->pos++; /* output */
    const token *name_tok = cur(p);
    int id;
    if (name_tok->k == T_IDENT && peek(p, 1)->k == T_EQ) {
        id = parse_definition(p, name_tok);
    } else {
        if (name_tok->k != T_IDENT || peek(p, 1)->k == T_LPAREN)
            return expected(p, "a value name or NAME = expression after 'output'");
        id = parse_primary(p); /* a defined name, or an error with a hint */
    }
    if (id < 0) return -1;
    if (kf_graph_mark_output(p->g, id, p->err) != KF_OK) {
        p->err->code = KF_ERR_PARSE;
        p->err->line = name_tok->line;
        p->err->col = name_tok->col;
        return -1;
    }
    return 0;
}

static int parse_tolerance(parser *p) {
    p->pos++; /* tolerance */
    if (cur(p)->k == T_NL || cur(p)->k == T_EOF) return expected(p, "atol=, rtol= or nmse=");
    while (cur(p)->k != T_NL && cur(p)->k != T_EOF) {
        const token *k = cur(p);
        int which = -1;
        for (int i = 0; i < 3; i++)
            if (tok_is(k, tol_names[i])) which = i;
        if (which < 0) return expected(p, "atol, rtol or nmse");
        if (p->tol_line[which])
            return fail_at(p, KF_ERR_PARSE, k->line, k->col, "%s given twice (first on line %d)",
                           tol_names[which], p->tol_line[which]);
        p->pos++;
        if (expect(p, T_EQ, "'='") < 0) return -1;
        const token *at;
        double v;
        if (signed_number(p, "a number", &v, &at) < 0) return -1;
        if (v < 0)
            return fail_at(p, KF_ERR_PARSE, at->line, at->col,
                           "%s must not be negative, found %g", tol_names[which], v);
        p->tol[which] = v;
        p->tol_line[which] = k->line;
    }
    return 0;
}

/* `module NAME`: the task is the PyTorch module whose files NAME.json, NAME.py and
 * NAME.weights lie beside the task file (docs/task-format.md, "Module tasks"). */
static int parse_module(parser *p) {
    const token *kw = cur(p);
    p->pos++;
    if (p->module_line)
        return fail_at(p, KF_ERR_PARSE, kw->line, kw->col, "module given twice (first on line %d)",
                       p->module_line);
    if (p->g->nvalues > 0)
        return fail_at(p, KF_ERR_PARSE, kw->line, kw->col,
                       "the 'module' statement must come before every input, param and output");
    if (cur(p)->k != T_IDENT) return expected(p, "the module's name (its files are NAME.json, NAME.py, NAME.weights)");
    kf_module_task *m = kf_calloc(1, sizeof *m);
    if (cur(p)->len >= (int)sizeof m->name) {
        free(m);
        return fail_at(p, KF_ERR_PARSE, cur(p)->line, cur(p)->col, "module name is too long (at most %d characters)",
                       (int)sizeof m->name - 1);
    }
    tok_text(cur(p), m->name, sizeof m->name);
    const char *slash = strrchr(p->g->path, '/');
    if (slash) snprintf(m->dir, sizeof m->dir, "%.*s", (int)(slash - p->g->path), p->g->path);
    else snprintf(m->dir, sizeof m->dir, ".");
    if (slash == p->g->path) snprintf(m->dir, sizeof m->dir, "/");
    p->g->module = m;
    p->module_line = kw->line;
    p->pos++;
    return 0;
}

/* `cost flops=F bytes=B`: a module task's roofline numbers. */
static int parse_cost(parser *p) {
    const token *kw = cur(p);
    p->pos++;
    if (!p->module_line)
        return fail_at(p, KF_ERR_PARSE, kw->line, kw->col,
                       "'cost' belongs to a module task (a graph task's cost comes from its ops)");
    if (p->cost_line)
        return fail_at(p, KF_ERR_PARSE, kw->line, kw->col, "cost given twice (first on line %d)", p->cost_line);
    int seen[2] = {0, 0};
    while (cur(p)->k != T_NL && cur(p)->k != T_EOF) {
        const token *k = cur(p);
        int which = tok_is(k, "flops") ? 0 : tok_is(k, "bytes") ? 1 : -1;
        if (which < 0) return expected(p, "flops= or bytes=");
        if (seen[which]) return fail_at(p, KF_ERR_PARSE, k->line, k->col, "%s given twice", which ? "bytes" : "flops");
        p->pos++;
        if (expect(p, T_EQ, "'='") < 0) return -1;
        const token *at;
        double v;
        if (signed_number(p, "a number", &v, &at) < 0) return -1;
        if (v < 0) return fail_at(p, KF_ERR_PARSE, at->line, at->col, "a cost must not be negative, found %g", v);
        if (which) p->g->module->bytes = v;
        else p->g->module->flops = v;
        seen[which] = 1;
    }
    if (!seen[0] || !seen[1]) return expected(p, seen[0] ? "bytes=" : "flops=");
    p->g->module->has_cost = 1;
    p->cost_line = kw->line;
    return 0;
}

static int parse_statement(parser *p) {
    token *t = cur(p);
    /* module, param and cost are words only here (no keywords: a graph task may name a value so) */
    if (tok_is(t, "module") && peek(p, 1)->k == T_IDENT && peek(p, 2)->k != T_EQ) return parse_module(p);
    if (tok_is(t, "param") && peek(p, 1)->k == T_IDENT && peek(p, 2)->k == T_COLON) return parse_decl(p, DECL_PARAM);
    if (tok_is(t, "cost") && peek(p, 1)->k == T_IDENT && peek(p, 2)->k == T_EQ) return parse_cost(p);
    if (p->module_line && t->k == T_IDENT && peek(p, 1)->k == T_EQ)
        return fail_at(p, KF_ERR_PARSE, t->line, t->col,
                       "a module task computes nothing itself: no 'NAME = ...' (its module does)");
    if (tok_is(t, "task")) return parse_task(p);
    if (tok_is(t, "input")) return parse_input(p);
    if (tok_is(t, "output")) return parse_output(p);
    if (tok_is(t, "tolerance")) return parse_tolerance(p);
    if (t->k == T_IDENT && peek(p, 1)->k == T_EQ) return parse_definition(p, t) < 0 ? -1 : 0;
    if (t->k == T_IDENT) {
        p->pos++;
        return expected(p, "'=' (a statement is task, input, output, tolerance or NAME = ...)");
    }
    return expected(p, "a statement (task, input, output, tolerance or NAME = ...)");
}

static int parse_program(parser *p) {
    while (cur(p)->k != T_EOF) {
        if (accept(p, T_NL)) continue;
        if (parse_statement(p) < 0) return -1;
        if (cur(p)->k != T_NL && cur(p)->k != T_EOF) return expected(p, "end of line");
    }
    kf_graph *g = p->g;
    if (g->noutputs == 0)
        return fail_at(p, KF_ERR_PARSE, cur(p)->line, cur(p)->col,
                       "the task has no outputs; add an 'output NAME' statement");
    if (p->tol_line[0] || p->tol_line[1] || p->tol_line[2]) {
        double d[3];
        kf_tolerance_default(g->values[g->outputs[0]].dtype, &d[0], &d[1], &d[2]);
        g->has_tol = 1;
        g->atol = p->tol_line[0] ? p->tol[0] : d[0];
        g->rtol = p->tol_line[1] ? p->tol[1] : d[1];
        g->nmse = p->tol_line[2] ? p->tol[2] : d[2];
    }
    return 0;
}

/* ---------------------------------------------------------------- entry */

/* Parses text; see ir.h. filename (may be NULL) is used in messages, as g->path and, without
 * directories and a ".kf" ending, as the default task name ("task" when NULL). On failure
 * *out is NULL and err holds the first error. */
kf_status kf_parse_string(const char *text, const char *filename, kf_graph **out,
                          kf_error *err) {
    kf_error local;
    if (!err) err = &local;
    *out = NULL;
    char base[64] = "task";
    if (filename && filename[0]) {
        const char *b = strrchr(filename, '/');
        b = b ? b + 1 : filename;
        size_t n = strlen(b);
        if (n > 3 && strcmp(b + n - 3, ".kf") == 0) n -= 3;
        if (n > 0) snprintf(base, sizeof base, "%.*s", (int)(n < 63 ? n : 63), b);
    }
    kf_graph *g = kf_graph_new(base);
    snprintf(g->path, sizeof g->path, "%s", filename ? filename : "");
    g->source = kf_strdup(text);
    parser p;
    memset(&p, 0, sizeof p);
    p.g = g;
    p.file = g->path;
    p.err = err;
    int rc = lex(&p, g->source);
    if (rc == 0) rc = parse_program(&p);
    free(p.t);
    if (rc < 0) {
        kf_graph_free(g);
        return err->code;
    }
    *out = g;
    return KF_OK;
}

/* Reads path and parses it with kf_parse_string; KF_ERR_IO when it cannot be read or holds
 * more than KF_TASK_MAX_BYTES, KF_ERR_PARSE for a NUL byte. */
kf_status kf_parse_file(const char *path, kf_graph **out, kf_error *err) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    kf_status s = kf_read_file_max(path, KF_TASK_MAX_BYTES, &text, &len, err);
    if (s != KF_OK) return s;
    const char *nul = memchr(text, 0, len);
    if (nul) { /* the lexer would take it for the end of the text */
        int line = 1;
        const char *ls = text;
        for (const char *q = text; q < nul; q++)
            if (*q == '\n') line++, ls = q + 1;
        int col = (int)(nul - ls) + 1;
        free(text);
        return kf_error_set(err, KF_ERR_PARSE, path, line, col,
                            "unexpected byte 0x00 (a task is text)");
    }
    s = kf_parse_string(text, path, out, err);
    free(text);
    return s;
}

/* Parses one expression into g with the identifiers _0 .. _{nbind-1} naming the values
 * bind[0..] (a composite op's lowering, kf_graph_lower); every node it adds gets position
 * (line, col). *result is the expression's value id. Errors as kf_parse_string's, placed
 * in the expression's text. */
kf_status kf_parse_expr_into(kf_graph *g, const char *text, const int *bind, int nbind, int line,
                             int col, int *result, kf_error *err) {
    kf_error local;
    if (!err) err = &local;
    parser p;
    memset(&p, 0, sizeof p);
    p.g = g;
    p.file = "<lowering>";
    p.err = err;
    p.bind = bind;
    p.nbind = nbind;
    int first = g->nnodes;
    int rc = lex(&p, text);
    if (rc == 0) rc = parse_expr(&p);
    if (rc >= 0 && cur(&p)->k != T_NL && cur(&p)->k != T_EOF) rc = expected(&p, "end of the expression");
    free(p.t);
    if (rc < 0) return err->code;
    for (int i = first; i < g->nnodes; i++) {
        g->nodes[i].line = line;
        g->nodes[i].col = col;
    }
    *result = rc;
    return KF_OK;
}
