/*
 * The kernel-form renderer: `$` token substitution and kernel signatures.
 *
 * One left-to-right scan. Plain text, comments and string/character literals are copied
 * (tokens inside comments are left alone, so a comment may say anything). At a `$` the
 * token name is read, its arguments are cut at the top-level commas of the parenthesised
 * list and rendered recursively, checked, and the language's expansion template (lang.h)
 * is written. Errors carry the token, the byte offset of its `$` in the form and the
 * line/column, so a template author finds the spot at once.
 *
 * Context matters for three kinds of token, and the rules hold in every language (the form
 * is one text: an error in one language is an error in all, found on whichever language
 * the author happens to test):
 *  - ids ($gid ... $ngrp, $sg_size, $sg_lid, $sg_id) only in a kernel body: Metal reads
 *    them from kernel parameters, which helpers cannot see; helpers take them as arguments;
 *  - sub-group tokens in a kernel body need kf_gkernel.uses_subgroups (Metal adds the
 *    sub-group parameters only then, and callers use the flag to pick devices);
 *  - $shared only at brace depth 0 of a kernel body (OpenCL and Metal allow work-group
 *    arrays only at kernel scope).
 * Metal's signature lists the id parameters the body actually read, so the body is rendered
 * before the signature is written.
 */
#include "render/lang.h"

#include <assert.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 8
#define MAX_DEPTH 16 /* token nesting inside arguments */

typedef struct rctx {
    const kf_lang *L;
    const char *form; /* offsets in errors count from here */
    int in_kernel;
    int uses_sg;
    int one_d;        /* the kernel's group is known to be 1-D */
    int used[KF_TOK_COUNT];
    kf_error *err;
} rctx;

static void line_col(const char *form, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < off && form[i]; i++) {
        if (form[i] == '\n') { l++; c = 1; }
        else c++;
    }
    *line = l;
    *col = c;
}

static kf_status tok_error(rctx *c, size_t off, const char *name, size_t namelen, const char *what) {
    int line, col;
    line_col(c->form, off, &line, &col);
    return kf_error_set(c->err, KF_ERR_PARSE, NULL, line, col,
                        "%s kernel form: `$%.*s` at offset %zu (line %d, col %d): %s", c->L->name,
                        (int)namelen, name, off, line, col, what);
}

static int is_ident(int ch) { return isalnum((unsigned char)ch) || ch == '_'; }

/* text that needs no parentheses as an operand: a name, a number, a member/element chain,
 * or one pair of parentheses around everything */
static int is_simple(const char *s) {
    size_t n = strlen(s);
    int plain = n > 0;
    for (size_t i = 0; i < n && plain; i++)
        if (!is_ident(s[i]) && s[i] != '.') plain = 0;
    if (plain) return 1;
    if (n < 2 || s[0] != '(' || s[n - 1] != ')') return 0;
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '(') depth++;
        else if (s[i] == ')' && --depth == 0 && i != n - 1) return 0;
    }
    return 1;
}

/* copy a comment or literal starting at p[i] (returns the index after it), or return i */
static size_t skip_verbatim(const char *p, size_t i, size_t end, kf_buf *out) {
    size_t j = i;
    if (p[i] == '/' && i + 1 < end && p[i + 1] == '/') {
        while (j < end && p[j] != '\n') j++;
    } else if (p[i] == '/' && i + 1 < end && p[i + 1] == '*') {
        j = i + 2;
        while (j + 1 < end && !(p[j] == '*' && p[j + 1] == '/')) j++;
        j = j + 1 < end ? j + 2 : end;
    } else if (p[i] == '"' || p[i] == '\'') {
        char q = p[i];
        j = i + 1;
        while (j < end && p[j] != q && p[j] != '\n') j += p[j] == '\\' ? 2 : 1;
        j = j < end ? j + 1 : end;
    } else {
        return i;
    }
    kf_buf_putn(out, p + i, j - i);
    return j;
}

static kf_status render_range(rctx *c, size_t b, size_t e, int top, int nest, kf_buf *out);

static void trim(kf_buf *a) {
    size_t s = 0, n = a->len;
    while (s < n && isspace((unsigned char)a->data[s])) s++;
    while (n > s && isspace((unsigned char)a->data[n - 1])) n--;
    memmove(a->data, a->data + s, n - s);
    a->len = n - s;
    a->data[a->len] = '\0';
}

static int is_width(const char *s) { return strcmp(s, "2") == 0 || strcmp(s, "4") == 0; }

/* write the expansion template tpl with the rendered args */
static void expand(const rctx *c, const char *tpl, kf_buf *args, int nargs, kf_buf *out) {
    for (const char *t = tpl; *t; t++) {
        if (*t != '@') {
            kf_buf_putn(out, t, 1);
            continue;
        }
        t++;
        if (*t >= '0' && *t <= '9') {
            int i = *t - '0';
            assert(i < nargs);
            kf_buf_puts(out, args[i].data);
        } else if (*t == '(') {
            int i = t[1] - '0';
            assert(i >= 0 && i < nargs && t[2] == ')');
            int simple = is_simple(args[i].data);
            if (!simple) kf_buf_puts(out, "(");
            kf_buf_puts(out, args[i].data);
            if (!simple) kf_buf_puts(out, ")");
            t += 2;
        } else if (*t == 'a' || *t == 'd') {
            int axis = args[0].data[0] - '0';
            kf_buf_printf(out, "%c", *t == 'a' ? "xyz"[axis] : "012"[axis]);
        } else if (*t == '*') {
            int from = t[1] - '0';
            for (int i = from; i < nargs; i++) kf_buf_printf(out, "%s%s", i > from ? ", " : "", args[i].data);
            t++;
        } else if (*t == 'L') {
            kf_buf_puts(out, c->one_d ? "(int)threadIdx.x"
                                      : "(int)((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + "
                                        "threadIdx.x)");
        } else {
            assert(0 && "bad expansion template");
        }
    }
}

/* the token whose `$` is at form offset at; *pos is just past the name, and is moved past
 * the argument list */
static kf_status render_token(rctx *c, size_t at, size_t *pos, size_t end, int top, int depth,
                              int nest, kf_buf *out) {
    const char *p = c->form;
    const char *name = p + at + 1;
    size_t namelen = *pos - at - 1;
    int t = -1;
    for (int i = 0; i < KF_TOK_COUNT; i++)
        if (strlen(kf_tokdefs[i].name) == namelen && memcmp(kf_tokdefs[i].name, name, namelen) == 0)
            t = i;
    if (namelen == 0)
        return tok_error(c, at, "", 0, "`$` must start a token name (write `$$` for a literal `$`)");
    if (t < 0) return tok_error(c, at, name, namelen, "unknown token");
    const kf_tokdef *d = &kf_tokdefs[t];
    if ((d->flags & KF_TF_TOP) && (!c->in_kernel || !top || depth != 0))
        return tok_error(c, at, name, namelen,
                         "work-group arrays are declared at the top level of a kernel body");
    if ((d->flags & KF_TF_KERNEL) && !c->in_kernel)
        return tok_error(c, at, name, namelen,
                         "valid only in a kernel body (pass ids to helpers as arguments)");
    if ((d->flags & KF_TF_SG) && c->in_kernel && !c->uses_sg)
        return tok_error(c, at, name, namelen,
                         "sub-group token in a kernel whose uses_subgroups is 0");
    if (nest >= MAX_DEPTH) return tok_error(c, at, name, namelen, "tokens nested too deeply");

    kf_buf args[MAX_ARGS];
    memset(args, 0, sizeof args);
    int nargs = 0;
    kf_status st = KF_OK;
    size_t i = *pos;
    if (d->nargs == 0) {
        if (i < end && p[i] == '(') return tok_error(c, at, name, namelen, "takes no arguments");
    } else {
        if (i >= end || p[i] != '(')
            return tok_error(c, at, name, namelen, "expects a parenthesised argument list");
        size_t argb = ++i;
        int level = 0;
        for (;; i++) {
            if (i >= end) {
                st = tok_error(c, at, name, namelen, "unterminated argument list");
                goto done;
            }
            char ch = p[i];
            if (ch == '(' || ch == '[' || ch == '{') level++;
            else if ((ch == ')' || ch == ']' || ch == '}') && level > 0) level--;
            else if (ch == ',' || ch == ')') {
                if (level == 0) {
                    size_t w = argb;
                    while (w < i && isspace((unsigned char)p[w])) w++;
                    if (ch == ')' && nargs == 0 && w == i) break; /* "()": no arguments */
                    if (nargs == MAX_ARGS) {
                        st = tok_error(c, at, name, namelen, "too many arguments");
                        goto done;
                    }
                    st = render_range(c, argb, i, 0, nest + 1, &args[nargs]);
                    if (st != KF_OK) goto done;
                    kf_buf_puts(&args[nargs], ""); /* data is never NULL */
                    trim(&args[nargs]);
                    if (args[nargs].len == 0) {
                        st = tok_error(c, at, name, namelen, "empty argument");
                        goto done;
                    }
                    nargs++;
                    argb = i + 1;
                    if (ch == ')') break;
                }
            }
        }
        i++;
    }
    *pos = i;

    char msg[160];
    if (d->flags & KF_TF_VMAKE) {
        if (nargs < 2 || !is_width(args[1].data) || nargs != 2 + atoi(args[1].data)) {
            st = tok_error(c, at, name, namelen,
                           "takes (T, n, e0, ..., e(n-1)): a type, a width 2 or 4, n values");
            goto done;
        }
    } else if (nargs != d->nargs) {
        snprintf(msg, sizeof msg, "takes %d argument%s, got %d", d->nargs, d->nargs == 1 ? "" : "s",
                 nargs);
        st = tok_error(c, at, name, namelen, msg);
        goto done;
    }
    if ((d->flags & KF_TF_AXIS) && !(args[0].len == 1 && args[0].data[0] >= '0' && args[0].data[0] <= '2')) {
        snprintf(msg, sizeof msg, "axis must be 0, 1 or 2, got `%s`", args[0].data);
        st = tok_error(c, at, name, namelen, msg);
        goto done;
    }
    if ((d->flags & KF_TF_VTYPE) &&
        (!(strcmp(args[0].data, "float") == 0 || strcmp(args[0].data, "int") == 0) ||
         !is_width(args[1].data))) {
        snprintf(msg, sizeof msg, "vector type must be float or int and width 2 or 4, got `%s, %s`",
                 args[0].data, args[1].data);
        st = tok_error(c, at, name, namelen, msg);
        goto done;
    }
    if ((d->flags & KF_TF_VWIDTH) && !is_width(args[0].data)) {
        snprintf(msg, sizeof msg, "width must be 2 or 4, got `%s`", args[0].data);
        st = tok_error(c, at, name, namelen, msg);
        goto done;
    }
    const char *tpl = c->L->tok[t];
    assert(tpl);
    c->used[t] = 1;
    expand(c, tpl, args, nargs, out);
    /* "$global float *p" renders as "float *p" where the qualifier is empty */
    if (tpl[0] == '\0' && *pos < end && p[*pos] == ' ') (*pos)++;
done:
    for (int k = 0; k < MAX_ARGS; k++) kf_buf_free(&args[k]);
    return st;
}

/* render form[b, e) into out; top: this is a kernel body's own text (not an argument) */
static kf_status render_range(rctx *c, size_t b, size_t e, int top, int nest, kf_buf *out) {
    const char *p = c->form;
    int depth = 0;
    size_t i = b;
    while (i < e) {
        size_t j = skip_verbatim(p, i, e, out);
        if (j != i) {
            i = j;
            continue;
        }
        char ch = p[i];
        if (ch != '$') {
            if (ch == '{') depth++;
            else if (ch == '}') depth--;
            size_t k = i + 1;
            /* copy a run of ordinary characters at once */
            while (k < e && p[k] != '$' && p[k] != '{' && p[k] != '}' && p[k] != '/' &&
                   p[k] != '"' && p[k] != '\'')
                k++;
            kf_buf_putn(out, p + i, k - i);
            i = k;
            continue;
        }
        if (i + 1 < e && p[i + 1] == '$') {
            kf_buf_putn(out, "$", 1);
            i += 2;
            continue;
        }
        size_t k = i + 1;
        while (k < e && is_ident(p[k])) k++;
        kf_status st = render_token(c, i, &k, e, top, depth, nest, out);
        if (st != KF_OK) return st;
        i = k;
    }
    return KF_OK;
}

kf_status kf_render_text(const kf_lang *L, const char *form, kf_buf *out, kf_error *err) {
    assert(L && form && out);
    rctx c = {.L = L, .form = form, .err = err};
    kf_buf tmp = {0};
    kf_status st = render_range(&c, 0, strlen(form), 0, 0, &tmp);
    if (st == KF_OK && tmp.len) kf_buf_putn(out, tmp.data, tmp.len);
    kf_buf_free(&tmp);
    return st;
}

void kf_gkernel_param(kf_gkernel *k, const char *name, const char *ctype, kf_gparam_kind kind) {
    assert(k->nparams >= 0 && k->nparams < KF_GK_MAX_PARAMS);
    assert(strlen(name) < sizeof k->p[0].name && strlen(ctype) < sizeof k->p[0].ctype);
    kf_gparam *p = &k->p[k->nparams++];
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->ctype, sizeof p->ctype, "%s", ctype);
    p->kind = kind;
}

static int valid_ident(const char *s) {
    if (!s[0] || isdigit((unsigned char)s[0])) return 0;
    for (; *s; s++)
        if (!is_ident(*s)) return 0;
    return 1;
}

static kf_status check_kernel(const kf_gkernel *k, kf_error *err) {
    if (!valid_ident(k->name))
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kernel name `%s` is not an identifier", k->name);
    if (k->nparams < 0 || k->nparams > KF_GK_MAX_PARAMS)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kernel %s: %d parameters", k->name, k->nparams);
    for (int i = 0; i < k->nparams; i++) {
        const kf_gparam *p = &k->p[i];
        if (!valid_ident(p->name))
            return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kernel %s: parameter %d name `%s` is not an identifier",
                                k->name, i, p->name);
        if (strcmp(p->ctype, "float") && strcmp(p->ctype, "int") && strcmp(p->ctype, "long") &&
            strcmp(p->ctype, "ushort") && strcmp(p->ctype, "uchar"))
            return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                                "kernel %s: parameter %s has element type `%s` (float, int, long, ushort or uchar)",
                                k->name, p->name, p->ctype);
        if (p->kind != KF_GP_IN && p->kind != KF_GP_OUT && p->kind != KF_GP_SCRATCH)
            return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kernel %s: parameter %s has kind %d",
                                k->name, p->name, (int)p->kind);
        for (int j = 0; j < i; j++)
            if (strcmp(k->p[j].name, p->name) == 0)
                return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kernel %s: parameter %s appears twice",
                                    k->name, p->name);
    }
    for (int d = 0; d < 3; d++)
        if (k->wg[d] < 0 || k->wg[d] > 1024)
            return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kernel %s: work-group size %d x %d x %d",
                                k->name, k->wg[0], k->wg[1], k->wg[2]);
    return KF_OK;
}

kf_status kf_render_kernel(const kf_lang *L, const kf_gkernel *k, kf_buf *out, kf_error *err) {
    assert(L && k && out);
    kf_status st = check_kernel(k, err);
    if (st != KF_OK) return st;
    int wg[3] = {k->wg[0], k->wg[1] > 0 ? k->wg[1] : 1, k->wg[2] > 0 ? k->wg[2] : 1};
    const char *body = k->body ? k->body : "";
    rctx c = {.L = L, .form = body, .in_kernel = 1, .uses_sg = k->uses_subgroups,
              .one_d = wg[0] > 0 && wg[1] == 1 && wg[2] == 1, .err = err};
    kf_buf b = {0};
    st = render_range(&c, 0, strlen(body), 1, 0, &b);
    if (st != KF_OK) {
        kf_buf_free(&b);
        return st;
    }

    switch (L->id) {
    case KF_LANG_OPENCL:
        kf_buf_puts(out, "__kernel ");
        if (wg[0] > 0)
            kf_buf_printf(out, "__attribute__((reqd_work_group_size(%d, %d, %d))) ", wg[0], wg[1], wg[2]);
        break;
    case KF_LANG_CUDA:
        kf_buf_puts(out, "extern \"C\" __global__ void ");
        if (wg[0] > 0 && k->min_groups > 0)
            kf_buf_printf(out, "__launch_bounds__(%d, %d) ", wg[0] * wg[1] * wg[2], k->min_groups);
        else if (wg[0] > 0) kf_buf_printf(out, "__launch_bounds__(%d) ", wg[0] * wg[1] * wg[2]);
        break;
    case KF_LANG_METAL:
        if (wg[0] > 0) kf_buf_printf(out, "[[max_total_threads_per_threadgroup(%d)]] ", wg[0] * wg[1] * wg[2]);
        kf_buf_puts(out, "kernel ");
        break;
    default: assert(0);
    }
    if (L->id != KF_LANG_CUDA) kf_buf_puts(out, "void ");
    kf_buf_printf(out, "%s(", k->name);

    const char *global = L->tok[KF_TOK_GLOBAL], *restr = L->tok[KF_TOK_RESTRICT];
    int nout = 0;
    for (int i = 0; i < k->nparams; i++) {
        const kf_gparam *p = &k->p[i];
        kf_buf_printf(out, "%s\n    ", nout++ ? "," : "");
        if (global[0]) kf_buf_printf(out, "%s ", global);
        /* ushort (f16/bf16 bits), uchar (bool bytes): OpenCL's and Metal's names, which CUDA's
         * prelude typedefs (kf_render_prelude), as helpers' parameters spell them too */
        kf_buf_printf(out, "%s%s *", p->kind == KF_GP_IN ? "const " : "", p->ctype);
        if (p->kind != KF_GP_SCRATCH && restr[0]) kf_buf_printf(out, "%s ", restr);
        kf_buf_puts(out, p->name);
        if (L->id == KF_LANG_METAL) kf_buf_printf(out, " [[buffer(%d)]]", i);
    }
    for (int t = 0; t < KF_TOK_COUNT; t++)
        if (c.used[t] && L->id_param[t]) kf_buf_printf(out, "%s\n    %s", nout++ ? "," : "", L->id_param[t]);
    if (nout == 0 && L->id == KF_LANG_OPENCL) kf_buf_puts(out, "void");
    kf_buf_puts(out, ") {\n");
    if (b.len) {
        kf_buf_putn(out, b.data, b.len);
        if (b.data[b.len - 1] != '\n') kf_buf_puts(out, "\n");
    }
    kf_buf_puts(out, "}\n");
    kf_buf_free(&b);
    return KF_OK;
}
