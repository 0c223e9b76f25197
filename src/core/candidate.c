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

kf_status kf_candidate_init(kf_candidate *c, const char *platform, const char *source,
                            const char *entry, kf_error *err) {
    memset(c, 0, sizeof *c);
    snprintf(c->platform, sizeof c->platform, "%s", platform ? platform : "cpu");
    snprintf(c->entry, sizeof c->entry, "%s", entry ? entry : "kforge_kernel");
    c->source = kf_strdup(source ? source : "");
    kf_status st = parse_tunables(c, err);
    if (st != KF_OK) kf_candidate_clear(c);
    return st;
}

void kf_candidate_clear(kf_candidate *c) {
    free(c->source);
    memset(c, 0, sizeof *c);
}

void kf_candidate_copy(kf_candidate *dst, const kf_candidate *src) {
    *dst = *src;
    dst->source = kf_strdup(src->source ? src->source : "");
}
