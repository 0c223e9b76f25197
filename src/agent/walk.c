/*
 * The builtin agent's walk through a schedule space (loop.c drives it): which point to
 * evaluate next, given the best point so far, its diagnosis and what was measured.
 *
 * Order: the best point with another template for a stage that several templates compute,
 * or another kernel of its template (role KF_ROLE_KERNEL) (kf_walk_template: every
 * supporting template and kernel is measured before any is tuned); then the
 * best point moved by its diagnosis' highest-ranked recommendation not yet tried
 * (kf_walk_follow); when none is left, coordinate moves around the best point (every
 * other value of one parameter at a time: the nearest values of every parameter first, in
 * the template's parameter order, then the next nearest), leaving for later the moves the
 * diagnosis goes against (the reverse of what it asks for: fewer threads when all are
 * busy, narrower vectors when it wants wider ones) and single-parameter moves already
 * measured no faster from an earlier best (kf_move_log): first the other neighbours, then
 * unexplored points that move nothing of those, then those moves, then any unexplored
 * point at random (kf_walk_propose). Random search (--analysis off) is kf_walk_random alone.
 */
#include "agent/agent_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The hash of p's canonical point: moving a parameter of a template the point does not
 * use gives the same candidate, so the same hash. */
static uint64_t point_hash(const kf_space *sp, const kf_point *p) {
    kf_point c;
    kf_point_canonical(sp, p, &c);
    return kf_hash64(c.idx, (size_t)sp->nparams * sizeof c.idx[0], 7);
}

static int has_hash(const kf_seen *s, uint64_t h) {
    for (int i = 0; i < s->n; i++)
        if (s->h[i] == h) return 1;
    return 0;
}

static void add_hash(kf_seen *s, uint64_t h) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->h = kf_realloc(s->h, (size_t)s->cap * sizeof *s->h);
    }
    s->h[s->n++] = h;
}

static uint64_t rng_next(uint64_t *st) {
    uint64_t z = (*st += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double param_size(const kf_space *sp, int i);

/* Points of the parameters in use where selector g has value val. */
static double size_under(const kf_space *sp, int g, long val) {
    double n = 1;
    for (int j = 0; j < sp->nparams; j++)
        if (sp->p[j].gate == g + 1 && sp->p[j].gate_value == val) n *= param_size(sp, j);
    return n;
}

/* Distinct candidates parameter i and those it gates make: a template selector's values
 * each times the points of that template's parameters. */
static double param_size(const kf_space *sp, int i) {
    int gates = 0;
    for (int j = 0; j < sp->nparams && !gates; j++) gates = sp->p[j].gate == i + 1;
    if (!gates) return sp->p[i].nvalues;
    double n = 0;
    for (int v = 0; v < sp->p[i].nvalues; v++) n += size_under(sp, i, sp->p[i].values[v]);
    return n;
}

static double space_size(const kf_space *sp) {
    double n = 1;
    for (int i = 0; i < sp->nparams; i++)
        if (sp->p[i].gate == 0) n *= param_size(sp, i);
    return n;
}

/* Whether space parameter p is the one a move of the diagnosis is about: the same role,
 * or, for a move read back from a record written before roles (role none), the same name
 * without the stage prefix. */
static int param_is(const kf_param *p, kf_role role, const char *name) {
    if (role != KF_ROLE_NONE) return p->role == role;
    const char *dot = strrchr(p->name, '.');
    return strcmp(dot ? dot + 1 : p->name, name) == 0;
}

/* Moves measured no faster (kf_move_log): the walk does not follow the diagnosis into
 * such a move again from a later best point whose value of that parameter is the same (the
 * rule that asked for it usually still holds there: matmul's mk+ was tried three times a
 * run before), and takes it only with the moves against the diagnosis, last. */

/* The entry of move (p, from -> to) when it was measured no faster, else -1. */
static int find_failed(const kf_move_log *ml, int p, int from, int to) {
    for (int k = 0; ml && k < ml->n; k++)
        if (ml->m[k].p == p && ml->m[k].from == from && ml->m[k].to == to) return k;
    return -1;
}

/* Record q's move from base when it is one parameter's (q did not improve on base). */
void kf_walk_log_failed(kf_move_log *ml, const kf_space *sp, const kf_point *base_in, const kf_point *q_in,
                        int iter) {
    kf_point bc, qc; /* the parameters in use (another template's never moved anything) */
    kf_point_canonical(sp, base_in, &bc);
    kf_point_canonical(sp, q_in, &qc);
    const kf_point *base = &bc, *q = &qc;
    int p = -1;
    for (int i = 0; i < sp->nparams; i++)
        if (q->idx[i] != base->idx[i]) {
            if (p >= 0) return; /* several parameters moved: no single move to blame */
            p = i;
        }
    if (p < 0 || ml->n >= KF_MAX_FAILED_MOVES || find_failed(ml, p, base->idx[p], q->idx[p]) >= 0) return;
    ml->m[ml->n].p = (short)p;
    ml->m[ml->n].from = (short)base->idx[p];
    ml->m[ml->n].to = (short)q->idx[p];
    ml->m[ml->n].iter = (short)iter;
    ml->m[ml->n].said = 0;
    ml->n++;
}

/* The best point moved by d's highest-ranked recommendation that leads to a point not yet
 * tried and is not a move already measured no faster (ml); why gets "s0.vw 4 -> 8:
 * <reason>", skipped the first such move passed over that the table was not told of yet
 * ("" when none). 0 = none. */
int kf_walk_follow(const kf_space *sp, const kf_point *best, const kf_diagnosis *d, kf_move_log *ml,
                  const kf_seen *seen, kf_point *out, char *why, size_t cap, char *skipped, size_t scap) {
    skipped[0] = 0;
    for (int k = 0; k < d->nrecs; k++) {
        const kf_diag_rec *rc = &d->rec[k];
        for (int i = 0; i < sp->nparams; i++) {
            if (!param_is(&sp->p[i], rc->role, rc->param) || !kf_param_active(sp, best, i)) continue;
            int v = best->idx[i] + rc->dir;
            if (v < 0 || v >= sp->p[i].nvalues) continue;
            kf_point q = *best;
            q.idx[i] = v;
            if (has_hash(seen, point_hash(sp, &q))) continue;
            int f = find_failed(ml, i, best->idx[i], v);
            if (f >= 0) {
                if (!skipped[0] && !ml->m[f].said) { /* said once per move */
                    snprintf(skipped, scap, "%s %ld -> %ld (%s%c): no faster at iter %d", sp->p[i].name,
                             sp->p[i].values[best->idx[i]], sp->p[i].values[v], rc->param, rc->dir > 0 ? '+' : '-',
                             ml->m[f].iter);
                    ml->m[f].said = 1;
                }
                continue;
            }
            *out = q;
            snprintf(why, cap, "%s %ld -> %ld: %s", sp->p[i].name, sp->p[i].values[best->idx[i]],
                     sp->p[i].values[v], rc->why);
            return 1;
        }
    }
    return 0;
}

/* See agent_int.h. */
int kf_walk_template(const kf_space *sp, const kf_point *best, const kf_seen *seen, kf_point *out, char *why,
                     size_t cap) {
    for (int i = 0; i < sp->nparams; i++) {
        const int tpl = sp->p[i].role == KF_ROLE_TEMPLATE;
        if ((!tpl && sp->p[i].role != KF_ROLE_KERNEL) || !kf_param_active(sp, best, i)) continue;
        for (int v = 0; v < sp->p[i].nvalues; v++) {
            if (v == best->idx[i]) continue;
            kf_point q = *best;
            q.idx[i] = v;
            if (has_hash(seen, point_hash(sp, &q))) continue;
            *out = q;
            if (!tpl) {
                snprintf(why, cap, "%s %ld -> %ld", sp->p[i].name, sp->p[i].values[best->idx[i]], sp->p[i].values[v]);
                return 1;
            }
            const char *from = kf_synth_template_name(sp->p[i].values[best->idx[i]]);
            const char *to = kf_synth_template_name(sp->p[i].values[v]);
            snprintf(why, cap, "%s %s -> %s", sp->p[i].name, from ? from : "?", to ? to : "?");
            return 1;
        }
    }
    return 0;
}

/* A random unexplored point. 0 = none found. */
int kf_walk_random(const kf_space *sp, const kf_seen *seen, uint64_t *rng, kf_point *out) {
    if ((double)seen->n >= space_size(sp)) return 0;
    for (int tries = 0; tries < 1000; tries++) {
        kf_point q;
        memset(&q, 0, sizeof q);
        for (int i = 0; i < sp->nparams; i++) q.idx[i] = (int)(rng_next(rng) % (uint64_t)sp->p[i].nvalues);
        if (!has_hash(seen, point_hash(sp, &q))) {
            *out = q;
            return 1;
        }
    }
    return 0;
}

/* Whether q moves a parameter of best in a direction d calls against (NULL d: never), or
 * makes a move already measured no faster (ml): such points come last. */
static int against(const kf_space *sp, const kf_point *best, const kf_diagnosis *d, const kf_move_log *ml,
                   const kf_point *q) {
    /* only the parameters q uses move anything */
    for (int k = 0; d && k < d->navoid; k++)
        for (int i = 0; i < sp->nparams; i++)
            if (param_is(&sp->p[i], d->avoid[k].role, d->avoid[k].param) && kf_param_active(sp, q, i) &&
                q->idx[i] != best->idx[i] && (q->idx[i] > best->idx[i] ? +1 : -1) == d->avoid[k].dir)
                return 1;
    for (int i = 0; i < sp->nparams; i++)
        if (kf_param_active(sp, q, i) && q->idx[i] != best->idx[i] && find_failed(ml, i, best->idx[i], q->idx[i]) >= 0)
            return 1;
    return 0;
}

/* The nearest unexplored neighbour of best (best +1, -1, +2, -2, ... in one parameter,
 * every parameter's next value before any parameter's second: a parameter's values are
 * ordered, and the next value up or down is the likeliest to improve on the best) whose
 * move is against d (want_against) or not. */
static int neighbour(const kf_space *sp, const kf_point *best, const kf_diagnosis *d, const kf_move_log *ml,
                     int want_against, const kf_seen *seen, kf_point *out) {
    int maxv = 0;
    for (int i = 0; i < sp->nparams; i++) maxv = sp->p[i].nvalues > maxv ? sp->p[i].nvalues : maxv;
    for (int dist = 1; dist < maxv; dist++) {
        for (int i = 0; i < sp->nparams; i++) {
            for (int sgn = 1; sgn >= -1; sgn -= 2) {
                int v = best->idx[i] + sgn * dist;
                if (v < 0 || v >= sp->p[i].nvalues) continue;
                kf_point q = *best;
                q.idx[i] = v;
                if (against(sp, best, d, ml, &q) != want_against) continue;
                if (!has_hash(seen, point_hash(sp, &q))) {
                    *out = q;
                    return 1;
                }
            }
        }
    }
    return 0;
}

/* Next point to try when no recommendation of d (the best point's diagnosis, or NULL) is
 * left: a neighbour of best whose move is not against d (nor a move ml holds); then an
 * unexplored point that moves nothing against d (several parameters at once); then the
 * neighbours against d; then any unexplored point. 0 = none left. */
int kf_walk_propose(const kf_space *sp, const kf_point *best, const kf_diagnosis *d, const kf_move_log *ml,
                   const kf_seen *seen, uint64_t *rng, kf_point *out) {
    if (neighbour(sp, best, d, ml, 0, seen, out)) return 1;
    if ((d && d->navoid > 0) || ml->n > 0) {
        uint64_t r = *rng;
        for (int tries = 0; tries < 256; tries++) {
            kf_point q;
            if (!kf_walk_random(sp, seen, &r, &q)) break;
            if (!against(sp, best, d, ml, &q)) {
                *rng = r;
                *out = q;
                return 1;
            }
        }
        if (neighbour(sp, best, d, ml, 1, seen, out)) return 1;
    }
    return kf_walk_random(sp, seen, rng, out);
}

/* See agent_int.h. */
void kf_walk_mark(kf_seen *s, const kf_space *sp, const kf_point *p) {
    add_hash(s, point_hash(sp, p));
}
