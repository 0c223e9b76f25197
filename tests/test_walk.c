/*
 * The builtin agent's walk (src/agent/walk.c) on a made-up space, where nothing depends on
 * timing: a move measured no faster is not followed again from a later best point with the
 * same value of that parameter (the table is told once), is followed from a point with
 * another value, and the coordinate walk takes it, and every point containing it, last; a
 * stage's other template is proposed before anything else, and a parameter of the template
 * a point does not use is never moved. test_analysis_loop checks the same rules on real
 * runs.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_int.h"

/* s0.a in {1, 2, 4}, s0.b in {10, 20, 30} */
static void space(kf_space *sp) {
    memset(sp, 0, sizeof *sp);
    sp->nparams = 2;
    snprintf(sp->p[0].name, sizeof sp->p[0].name, "s0.a");
    snprintf(sp->p[1].name, sizeof sp->p[1].name, "s0.b");
    long a[] = {1, 2, 4}, b[] = {10, 20, 30};
    for (int i = 0; i < 3; i++) {
        sp->p[0].values[i] = a[i];
        sp->p[1].values[i] = b[i];
    }
    sp->p[0].nvalues = sp->p[1].nvalues = 3;
}

static kf_point pt(int a, int b) {
    kf_point p;
    memset(&p, 0, sizeof p);
    p.idx[0] = a;
    p.idx[1] = b;
    return p;
}

/* A diagnosis that asks for a+ first, then b+. */
static void wants_a_then_b(kf_diagnosis *d) {
    memset(d, 0, sizeof *d);
    d->nrecs = 2;
    snprintf(d->rec[0].param, sizeof d->rec[0].param, "a");
    d->rec[0].dir = +1;
    d->rec[0].score = 0.9;
    snprintf(d->rec[0].why, sizeof d->rec[0].why, "more a");
    snprintf(d->rec[1].param, sizeof d->rec[1].param, "b");
    d->rec[1].dir = +1;
    d->rec[1].score = 0.5;
    snprintf(d->rec[1].why, sizeof d->rec[1].why, "more b");
}

Test(walk, a_move_measured_no_faster_is_not_followed_again) {
    kf_space sp;
    space(&sp);
    kf_diagnosis d;
    wants_a_then_b(&d);
    kf_move_log *ml = calloc(1, sizeof *ml);
    kf_seen seen = {0};
    kf_point best = pt(0, 0), out, a_up = pt(1, 0);
    kf_walk_mark(&seen, &sp, &best);
    char why[200], skipped[200];
    /* nothing measured yet: the top recommendation */
    cr_assert(kf_walk_follow(&sp, &best, &d, ml, &seen, &out, why, sizeof why, skipped, sizeof skipped));
    cr_assert_eq(out.idx[0], 1);
    cr_assert_eq(out.idx[1], 0);
    cr_assert(strstr(why, "s0.a 1 -> 2: more a"), "%s", why);
    cr_assert_str_empty(skipped);
    /* a 1 -> 2 was no faster (iter 2); b 10 -> 20 then improved: from (a=1, b=20) the
     * diagnosis asks for a+ again, the same move: passed over, said once */
    kf_walk_mark(&seen, &sp, &a_up);
    kf_walk_log_failed(ml, &sp, &best, &a_up, 2);
    cr_assert_eq(ml->n, 1);
    kf_point b_up = pt(0, 1);
    kf_walk_mark(&seen, &sp, &b_up);
    best = b_up;
    cr_assert(kf_walk_follow(&sp, &best, &d, ml, &seen, &out, why, sizeof why, skipped, sizeof skipped));
    cr_assert_eq(out.idx[0], 0, "followed the move measured no faster: %s", why);
    cr_assert_eq(out.idx[1], 2);
    cr_assert(strstr(skipped, "s0.a 1 -> 2 (a+): no faster at iter 2"), "%s", skipped);
    cr_assert(kf_walk_follow(&sp, &best, &d, ml, &seen, &out, why, sizeof why, skipped, sizeof skipped));
    cr_assert_str_empty(skipped, "said twice: %s", skipped);
    /* from a point where a has another value, a+ is another move */
    kf_point other = pt(1, 1);
    cr_assert(kf_walk_follow(&sp, &other, &d, ml, &seen, &out, why, sizeof why, skipped, sizeof skipped));
    cr_assert_eq(out.idx[0], 2);
    cr_assert(strstr(why, "s0.a 2 -> 4"), "%s", why);
    free(seen.h);
    free(ml);
}

Test(walk, only_single_parameter_moves_are_logged_once) {
    kf_space sp;
    space(&sp);
    kf_move_log *ml = calloc(1, sizeof *ml);
    kf_point base = pt(0, 0), two = pt(1, 1), one = pt(0, 2);
    kf_walk_log_failed(ml, &sp, &base, &two, 2);
    cr_assert_eq(ml->n, 0, "a move of two parameters has no single move to blame");
    kf_walk_log_failed(ml, &sp, &base, &base, 3);
    cr_assert_eq(ml->n, 0, "no move at all");
    kf_walk_log_failed(ml, &sp, &base, &one, 4);
    kf_walk_log_failed(ml, &sp, &base, &one, 5);
    cr_assert_eq(ml->n, 1);
    cr_assert_eq(ml->m[0].p, 1);
    cr_assert_eq(ml->m[0].from, 0);
    cr_assert_eq(ml->m[0].to, 2);
    cr_assert_eq(ml->m[0].iter, 4);
    free(ml);
}

/* With no recommendation left, the walk proposes every point without the move measured
 * no faster (a 1 -> 2 from the best, a=1) before that move's neighbour, and the points
 * that contain it after it. */
Test(walk, moves_measured_no_faster_come_last) {
    kf_space sp;
    space(&sp);
    kf_diagnosis none;
    memset(&none, 0, sizeof none);
    kf_move_log *ml = calloc(1, sizeof *ml);
    kf_seen seen = {0};
    kf_point best = pt(0, 0), a_up = pt(1, 0);
    kf_walk_mark(&seen, &sp, &best);
    kf_walk_mark(&seen, &sp, &a_up);
    kf_walk_log_failed(ml, &sp, &best, &a_up, 2);
    uint64_t rng = 12345;
    int order[9][2], n = 0;
    kf_point q;
    while (kf_walk_propose(&sp, &best, &none, ml, &seen, &rng, &q)) {
        cr_assert_lt(n, 7, "proposed more points than the space has left");
        order[n][0] = q.idx[0];
        order[n][1] = q.idx[1];
        n++;
        kf_walk_mark(&seen, &sp, &q);
    }
    cr_assert_eq(n, 7, "the walk stopped with %d of 7 points proposed", n);
    /* the first five: every point with a != 2 (index 1) except the best */
    for (int k = 0; k < 5; k++) cr_assert_neq(order[k][0], 1, "proposal %d is (%d,%d)", k + 1, order[k][0], order[k][1]);
    /* then the rest, which all move a 1 -> 2 */
    for (int k = 5; k < 7; k++) cr_assert_eq(order[k][0], 1, "proposal %d is (%d,%d)", k + 1, order[k][0], order[k][1]);
    /* the first is the nearest neighbour that is not the logged move: b 10 -> 20 */
    cr_assert(order[0][0] == 0 && order[0][1] == 1, "first proposal (%d,%d)", order[0][0], order[0][1]);
    free(seen.h);
    free(ml);
}

/* Moves are matched by role: a template's tile parameter called bm is what a TILE_M rule
 * moves, and a parameter that happens to be called tm but declares no role is not. */
Test(walk, moves_follow_roles_not_names) {
    kf_space sp;
    space(&sp);
    snprintf(sp.p[0].name, sizeof sp.p[0].name, "s0.tm");
    sp.p[0].role = KF_ROLE_NONE;
    snprintf(sp.p[1].name, sizeof sp.p[1].name, "s0.bm");
    sp.p[1].role = KF_ROLE_TILE_M;
    kf_diagnosis d;
    memset(&d, 0, sizeof d);
    d.nrecs = 1;
    snprintf(d.rec[0].param, sizeof d.rec[0].param, "bm");
    d.rec[0].role = KF_ROLE_TILE_M;
    d.rec[0].dir = +1;
    d.rec[0].score = 0.9;
    snprintf(d.rec[0].why, sizeof d.rec[0].why, "larger tiles re-read less");
    kf_seen seen = {0};
    kf_point best = pt(0, 0), out;
    kf_walk_mark(&seen, &sp, &best);
    char why[200], skipped[200];
    cr_assert(kf_walk_follow(&sp, &best, &d, NULL, &seen, &out, why, sizeof why, skipped, sizeof skipped));
    cr_assert_eq(out.idx[0], 0, "moved the parameter named tm: %s", why);
    cr_assert_eq(out.idx[1], 1, "%s", why);
    cr_assert(strstr(why, "s0.bm 10 -> 20"), "%s", why);
    free(seen.h);
}

/* A stage two templates compute: s0.tpl (role template, values 0 and 1) and each
 * template's threads under its own prefix, in use only where the selector picks it. */
static void space_two_templates(kf_space *sp) {
    memset(sp, 0, sizeof *sp);
    sp->nparams = 3;
    snprintf(sp->p[0].name, sizeof sp->p[0].name, "s0.tpl");
    sp->p[0].role = KF_ROLE_TEMPLATE;
    sp->p[0].nvalues = 2;
    sp->p[0].values[0] = 0;
    sp->p[0].values[1] = 1;
    for (int r = 0; r < 2; r++) {
        kf_param *q = &sp->p[1 + r];
        snprintf(q->name, sizeof q->name, r ? "s0.second.threads" : "s0.first.threads");
        q->role = KF_ROLE_THREADS;
        q->nvalues = 3;
        for (int i = 0; i < 3; i++) q->values[i] = 1 + i;
        q->gate = 1;
        q->gate_value = r;
    }
}

/* The other template is proposed first, once; a diagnosis moves the parameter of the
 * template in use; and the walk proposes each distinct candidate once (moving the other
 * template's parameters makes none), then says the space is exhausted. */
Test(walk, templates_first_and_unused_parameters_never_moved) {
    kf_space sp;
    space_two_templates(&sp);
    kf_seen seen = {0};
    kf_point best = {{0}}, out;
    kf_walk_mark(&seen, &sp, &best);
    char why[200];
    cr_assert(kf_walk_template(&sp, &best, &seen, &out, why, sizeof why));
    cr_assert_eq(out.idx[0], 1, "%s", why);
    cr_assert(strstr(why, "s0.tpl"), "%s", why);
    kf_walk_mark(&seen, &sp, &out);
    cr_assert(!kf_walk_template(&sp, &best, &seen, &out, why, sizeof why), "proposed again: %s", why);
    /* from the second template with its own threads moved, the first (at the parameters
     * it was measured with) is seen */
    kf_point b2 = {{1, 0, 2}};
    cr_assert(!kf_walk_template(&sp, &b2, &seen, &out, why, sizeof why), "%s", why);

    kf_diagnosis d;
    memset(&d, 0, sizeof d);
    d.nrecs = 1;
    snprintf(d.rec[0].param, sizeof d.rec[0].param, "threads");
    d.rec[0].role = KF_ROLE_THREADS;
    d.rec[0].dir = +1;
    d.rec[0].score = 0.9;
    snprintf(d.rec[0].why, sizeof d.rec[0].why, "more threads");
    kf_point on2 = {{1, 0, 0}};
    char skipped[200];
    cr_assert(kf_walk_follow(&sp, &on2, &d, NULL, &seen, &out, why, sizeof why, skipped, sizeof skipped));
    cr_assert(strstr(why, "s0.second.threads 1 -> 2"), "%s", why);

    kf_move_log *ml = calloc(1, sizeof *ml);
    uint64_t rng = 5;
    int n = 0;
    kf_point got[16];
    while (n < 16 && kf_walk_propose(&sp, &best, NULL, ml, &seen, &rng, &out)) {
        kf_point c;
        kf_point_canonical(&sp, &out, &c);
        for (int k = 0; k < n; k++) cr_assert(memcmp(got[k].idx, c.idx, sizeof c.idx) != 0, "proposed twice");
        got[n++] = c;
        kf_walk_mark(&seen, &sp, &out);
    }
    cr_assert_eq(n, 4, "6 distinct candidates, 2 measured before: %d proposed", n);
    free(ml);
    free(seen.h);
}

/* A template's kernel selector (role kernel: the f32 matmul's tc, SIMT or 3xTF32) is
 * measured before the analysis tunes either kernel, like a template selector, and said
 * with its numbers (not the registry's template names). */
Test(walk, kernel_selector_measured_first) {
    kf_space sp;
    space_two_templates(&sp);
    snprintf(sp.p[0].name, sizeof sp.p[0].name, "s0.tc");
    sp.p[0].role = KF_ROLE_KERNEL;
    kf_seen seen = {0};
    kf_point best = {{0}}, out;
    kf_walk_mark(&seen, &sp, &best);
    char why[200];
    cr_assert(kf_walk_template(&sp, &best, &seen, &out, why, sizeof why));
    cr_assert_eq(out.idx[0], 1, "%s", why);
    cr_assert_str_eq(why, "s0.tc 0 -> 1");
    kf_walk_mark(&seen, &sp, &out);
    cr_assert(!kf_walk_template(&sp, &best, &seen, &out, why, sizeof why), "proposed again: %s", why);
    /* a selector of no such role is left to the analysis and the coordinate walk */
    sp.p[0].role = KF_ROLE_NONE;
    kf_seen fresh = {0};
    kf_walk_mark(&fresh, &sp, &best);
    cr_assert(!kf_walk_template(&sp, &best, &fresh, &out, why, sizeof why), "%s", why);
    cr_assert_str_eq(kf_role_name(KF_ROLE_KERNEL), "kernel");
    cr_assert_eq(kf_role_lookup("kernel"), KF_ROLE_KERNEL);
    free(seen.h);
    free(fresh.h);
}
