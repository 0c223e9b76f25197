/*
 * Code extraction from a model's reply. Models wrap code in Markdown fences (``` or ~~~,
 * often tagged with a language), put prose before and after, sometimes give several blocks
 * (a sketch, then the kernel; or the kernel, then a build command), and get cut off by the
 * token limit mid-block. The rules, in order:
 *
 *   1. the last block tagged with one of the wanted languages;
 *   2. else the longest block (the last of equal ones);
 *   3. a chosen block that was never closed is an error: the reply was cut off;
 *   4. with no fence at all, the whole reply when every line of it looks like code.
 *
 * Fences follow CommonMark where it matters: a block closes on a line of the same fence
 * character at least as long as the opening run, with nothing after it but spaces; the
 * opening fence's indentation is taken off the lines inside. Fences are accepted at any
 * indentation, since models indent them inside list items.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kforge/core.h"
#include "kforge/llm.h"

typedef struct block {
    size_t start, end;   /* content bytes [start, end) of the reply: the lines inside */
    char tag[32];        /* language tag, lowercased, "" when none */
    int closed;
    size_t indent;       /* spaces before the opening fence */
} block;

typedef struct line {
    const char *s;
    size_t len;          /* without the newline */
    size_t next;         /* offset of the next line */
} line;

static line line_at(const char *text, size_t off) {
    line l = {text + off, 0, 0};
    const char *nl = strchr(text + off, '\n');
    l.len = nl ? (size_t)(nl - (text + off)) : strlen(text + off);
    l.next = off + l.len + (nl ? 1 : 0);
    if (l.len && l.s[l.len - 1] == '\r') l.len--;
    return l;
}

static size_t indent_of(const line *l) {
    size_t i = 0;
    while (i < l->len && (l->s[i] == ' ' || l->s[i] == '\t')) i++;
    return i;
}

/* A fence run at the start of l (after indentation): its character and length, or 0. */
static size_t fence_run(const line *l, char *ch) {
    size_t i = indent_of(l), n = 0;
    if (i >= l->len || (l->s[i] != '`' && l->s[i] != '~')) return 0;
    *ch = l->s[i];
    while (i + n < l->len && l->s[i + n] == *ch) n++;
    return n >= 3 ? n : 0;
}

/* l opens a fence: fills ch, run, indent and the tag. */
static int is_opening(const line *l, char *ch, size_t *run, size_t *indent, char *tag,
                      size_t tagcap) {
    size_t n = fence_run(l, ch);
    if (!n) return 0;
    size_t i = indent_of(l) + n;
    /* A backtick fence's info string may not hold a backtick (that is inline code). */
    if (*ch == '`' && memchr(l->s + i, '`', l->len - i)) return 0;
    while (i < l->len && (l->s[i] == ' ' || l->s[i] == '\t' || l->s[i] == '{' || l->s[i] == '.'))
        i++;
    size_t m = 0;
    while (i < l->len && !isspace((unsigned char)l->s[i]) && l->s[i] != '}' && l->s[i] != ',' &&
           m + 1 < tagcap)
        tag[m++] = (char)tolower((unsigned char)l->s[i++]);
    tag[m] = 0;
    *run = n;
    *indent = indent_of(l);
    return 1;
}

static int is_closing(const line *l, char ch, size_t run) {
    char c2;
    size_t n = fence_run(l, &c2);
    if (!n || c2 != ch || n < run) return 0;
    for (size_t i = indent_of(l) + n; i < l->len; i++)
        if (l->s[i] != ' ' && l->s[i] != '\t') return 0;
    return 1;
}

/* All fenced blocks of text; the last may be unclosed. Returns how many (*out malloc'd). */
static int find_blocks(const char *text, block **out) {
    int n = 0, cap = 8;
    block *b = kf_malloc((size_t)cap * sizeof *b);
    size_t off = 0, len = strlen(text);
    while (off < len) {
        line l = line_at(text, off);
        char ch;
        size_t run, indent;
        block blk = {0};
        if (!is_opening(&l, &ch, &run, &indent, blk.tag, sizeof blk.tag)) {
            off = l.next;
            continue;
        }
        blk.indent = indent;
        blk.start = blk.end = l.next;
        off = l.next;
        while (off < len) {
            line in = line_at(text, off);
            if (is_closing(&in, ch, run)) {
                blk.closed = 1;
                off = in.next;
                break;
            }
            off = in.next;
            blk.end = off;
        }
        if (n == cap) b = kf_realloc(b, (size_t)(cap *= 2) * sizeof *b);
        b[n++] = blk;
    }
    *out = b;
    return n;
}

/* tag is in the comma-separated list langs (case-insensitive, spaces around names ignored). */
static int lang_wanted(const char *tag, const char *langs) {
    if (!tag[0] || !langs) return 0;
    size_t t = strlen(tag);
    for (const char *p = langs; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *q = e;
        while (q > p && q[-1] == ' ') q--;
        if ((size_t)(q - p) == t && !strncasecmp(p, tag, t)) return 1;
        p = e;
    }
    return 0;
}

/* The block's content with the fence's indentation taken off each line. */
static char *block_text(const char *text, const block *b) {
    kf_buf out = {0};
    for (size_t off = b->start; off < b->end;) {
        line l = line_at(text, off);
        size_t drop = 0;
        while (drop < b->indent && drop < l.len && l.s[drop] == ' ') drop++;
        kf_buf_putn(&out, l.s + drop, l.len - drop);
        kf_buf_puts(&out, "\n");
        off = l.next;
    }
    return kf_buf_take(&out);
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return 0;
    return 1;
}

/* A line of prose rather than code: several words, and either a sentence's end or none of
 * the punctuation that C-like code is made of. Comments and preprocessor lines are code. */
static int prose_line(const line *l) {
    size_t i = indent_of(l), n = l->len;
    while (n > i && isspace((unsigned char)l->s[n - 1])) n--;
    if (n == i) return 0;
    const char *s = l->s + i;
    size_t m = n - i;
    if (s[0] == '#' || s[0] == '*' || (m >= 2 && s[0] == '/' && (s[1] == '/' || s[1] == '*')))
        return 0;
    char last = s[m - 1];
    if (strchr(";{},", last) || (m >= 2 && s[m - 2] == '*' && last == '/')) return 0;
    if (m >= 5 && !strncmp(s, "case ", 5)) return 0;
    int words = 0;
    for (size_t k = 0; k < m; k++)
        if (!isspace((unsigned char)s[k]) && (k == 0 || isspace((unsigned char)s[k - 1]))) words++;
    if (words >= 3 && strchr(".:!?", last)) return 1;
    if (words >= 4 && !memchr(s, ';', m) && !memchr(s, '(', m) && !memchr(s, '=', m) &&
        !memchr(s, '{', m) && !memchr(s, '}', m) && !memchr(s, '[', m) && !memchr(s, '<', m))
        return 1;
    return 0;
}

/* The reply, unfenced, is code throughout: some line ends a statement or opens a block,
 * and no line reads as prose. */
static int all_code(const char *text) {
    int signal = 0;
    size_t len = strlen(text);
    for (size_t off = 0; off < len;) {
        line l = line_at(text, off);
        if (prose_line(&l)) return 0;
        if (memchr(l.s, ';', l.len) || memchr(l.s, '{', l.len)) signal = 1;
        off = l.next;
    }
    return signal;
}

static char *trimmed_copy(const char *text) {
    const char *a = text, *z = text + strlen(text);
    /* Leading blank lines go; the first line's indentation stays. */
    for (const char *p = a; p < z && isspace((unsigned char)*p); p++)
        if (*p == '\n') a = p + 1;
    while (z > a && isspace((unsigned char)z[-1])) z--;
    kf_buf b = {0};
    kf_buf_putn(&b, a, (size_t)(z - a));
    kf_buf_puts(&b, "\n");
    return kf_buf_take(&b);
}

kf_status kf_llm_extract_code(const char *reply, const char *langs, char **code, kf_error *err) {
    *code = NULL;
    if (!reply || blank(reply, strlen(reply)))
        return kf_error_set(err, KF_ERR_PARSE, NULL, 0, 0, "the reply is empty");
    block *b;
    int n = find_blocks(reply, &b);
    int tagged = -1;
    for (int i = 0; i < n; i++)
        if (lang_wanted(b[i].tag, langs)) tagged = i;
    int pick = tagged;
    size_t best = 0;
    for (int i = 0; tagged < 0 && i < n; i++)
        if (b[i].end - b[i].start >= best) best = b[i].end - b[i].start, pick = i;

    kf_status s = KF_OK;
    if (pick >= 0) {
        if (!b[pick].closed)
            s = kf_error_set(err, KF_ERR_PARSE, NULL, 0, 0,
                             "the code block is not closed: the reply was cut off");
        else if (blank(reply + b[pick].start, b[pick].end - b[pick].start))
            s = kf_error_set(err, KF_ERR_PARSE, NULL, 0, 0, "the code block is empty");
        else
            *code = block_text(reply, &b[pick]);
    } else if (all_code(reply)) {
        *code = trimmed_copy(reply);
    } else {
        s = kf_error_set(err, KF_ERR_PARSE, NULL, 0, 0,
                         "the reply has no code block (put the whole kernel in one ``` block)");
    }
    free(b);
    return s;
}
