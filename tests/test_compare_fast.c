/*
 * The comparison's float32 fast pass (src/verify/compare.c, issue 30): chunks whose every
 * element is finite and within tolerance are summed four to a vector; any other chunk goes
 * through the element-by-element rule, which reports it. Nothing may be checked less: an
 * element out of tolerance anywhere (vector part, a chunk's scalar tail, the last chunk), a
 * NaN, an infinity, the poison pattern, an NMSE failure, and an error bound's allowance
 * must come out as they did, and the measured errors of a passing output must be the
 * element-by-element rule's (written out again below, from the file comment of compare.c).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/ir.h"
#include "kforge/verify.h"
#include "verify/verify_int.h"

/* 3 x 70001 = 210003 elements: three whole chunks of 65536 and a last one of 13395, whose
 * last 3 elements are past its last whole vector of four */
static const char *pw_task = "task cf\n"
                             "input x: f32[3, 70001]\n"
                             "output y = x * sigmoid(x)\n";
/* a contraction: its reference carries an error bound per element */
static const char *mm_task = "task cm\n"
                             "input a: f32[40, 300]\n"
                             "input b: f32[300, 1700]\n"
                             "output y = matmul(a, b)\n";

typedef struct fixture {
    kf_graph *g;
    kf_verify_ctx *c;
    int64_t n;
    float *ref, *out;
    const float *bnd;
    double atol, rtol, nmse, scale;
} fixture;

static void fx_open(fixture *f, const char *task, int set) {
    memset(f, 0, sizeof *f);
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<test>", &f->g, &err), KF_OK, "parse: %s", err.msg);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.seed = 4242;
    cr_assert_eq(kf_verify_ctx_new(f->g, &o, &f->c, &err), KF_OK, "ctx: %s", err.msg);
    f->n = f->c->out_numel[0];
    f->ref = f->c->sets[set].ref[0];
    f->bnd = f->c->sets[set].bound ? f->c->sets[set].bound[0] : NULL;
    f->out = malloc(sizeof(float) * (size_t)f->n);
    memcpy(f->out, f->ref, sizeof(float) * (size_t)f->n);
    kf_tolerance_default(KF_F32, &f->atol, &f->rtol, &f->nmse);
    f->scale = f->c->sets[set].ref_rms[0] > 1.0 ? f->c->sets[set].ref_rms[0] : 1.0;
}

static void fx_close(fixture *f) {
    free(f->out);
    kf_verify_ctx_free(f->c);
    kf_graph_free(f->g);
}

static kf_cmp cmp(fixture *f, int set) {
    kf_cmp r;
    const void *ins[KF_RUN_MAX_BUFS] = {0};
    kf_verify_compare(f->c, set, 0, f->out, ins, &r);
    return r;
}

/* element i's tolerance by the rule */
static double tol_at(const fixture *f, int64_t i) {
    return f->atol * f->scale + f->rtol * fabs((double)f->ref[i]) + (f->bnd ? (double)f->bnd[i] : 0.0);
}

/* the element-by-element rule's errors over finite elements (compare.c's file comment) */
static void scalar_errors(const fixture *f, double *max_abs, double *max_rel, double *nmse) {
    double e2 = 0, r2 = 0;
    *max_abs = *max_rel = 0;
    for (int64_t i = 0; i < f->n; i++) {
        double g = f->out[i], w = f->ref[i], d = fabs(g - w);
        e2 += d * d;
        r2 += w * w;
        if (d > *max_abs) *max_abs = d;
        if (w != 0 && d / fabs(w) > *max_rel) *max_rel = d / fabs(w);
    }
    *nmse = e2 / r2;
}

Test(compare_fast, the_reference_itself_passes_with_no_error) {
    fixture f;
    fx_open(&f, pw_task, 0);
    kf_cmp r = cmp(&f, 0);
    cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
    cr_assert_eq(r.nbad, 0);
    cr_assert_eq(r.first_bad, -1);
    cr_assert(r.max_abs == 0 && r.max_rel == 0 && r.nmse == 0, "%g %g %g", r.max_abs, r.max_rel, r.nmse);
    fx_close(&f);
}

/* One element past its tolerance, wherever it lies: the first and last of a chunk, inside
 * a vector, the last whole vector of the last chunk, its scalar tail. */
Test(compare_fast, one_element_out_of_tolerance_is_found_wherever_it_lies) {
    fixture f;
    fx_open(&f, pw_task, 1);
    const int64_t at[] = {0, 3, 65535, 65536, 131074, 196608, 210000 - 1, 210000, 210002};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        int64_t i = at[k];
        memcpy(f.out, f.ref, sizeof(float) * (size_t)f.n);
        /* just past: three tolerances away from the reference */
        f.out[i] = (float)((double)f.ref[i] + 3 * tol_at(&f, i));
        kf_cmp r = cmp(&f, 1);
        cr_assert_eq(r.status, KF_V_MISMATCH, "element %lld: %s", (long long)i, r.detail);
        cr_assert_eq(r.first_bad, i, "element %lld: first bad %lld", (long long)i, (long long)r.first_bad);
        cr_assert_eq(r.nbad, 1);
        cr_assert_eq(r.got, (double)f.out[i]);
        cr_assert_eq(r.want, (double)f.ref[i]);
    }
    fx_close(&f);
}

/* Every element moved by up to half its tolerance: it passes, and the largest absolute and
 * relative errors are the rule's exactly, its NMSE to the last bits of a sum. */
Test(compare_fast, errors_within_tolerance_are_measured_as_the_rule_measures_them) {
    fixture f;
    fx_open(&f, pw_task, 2);
    uint64_t st = 12345;
    for (int64_t i = 0; i < f.n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(st >> 11) / 9007199254740992.0; /* [0, 1) */
        f.out[i] = (float)((double)f.ref[i] + (u - 0.5) * tol_at(&f, i));
    }
    double ma, mr, nm;
    scalar_errors(&f, &ma, &mr, &nm);
    kf_cmp r = cmp(&f, 2);
    cr_assert_eq(r.status, KF_V_OK, "%s", r.detail);
    cr_assert(ma > 0 && r.max_abs == ma, "max abs %.17g, the rule's %.17g", r.max_abs, ma);
    cr_assert(mr > 0 && r.max_rel == mr, "max rel %.17g, the rule's %.17g", r.max_rel, mr);
    cr_assert(fabs(r.nmse - nm) <= 1e-12 * nm, "nmse %.17g, the rule's %.17g", r.nmse, nm);
    /* and the same bits on one thread as on two */
    omp_set_num_threads(1);
    kf_cmp r1 = cmp(&f, 2);
    omp_set_num_threads(2);
    kf_cmp r2 = cmp(&f, 2);
    cr_assert(r1.nmse == r2.nmse && r1.max_abs == r2.max_abs && r1.max_rel == r2.max_rel);
    fx_close(&f);
}

/* An unwritten element is the verdict even where a mismatch comes first in the output. */
Test(compare_fast, the_poison_is_reported_unwritten_before_any_mismatch) {
    fixture f;
    fx_open(&f, pw_task, 0);
    f.out[5] = f.ref[5] + 1000.0f;
    kf_verify_poison(KF_F32, &f.out[150001], 1, 0);
    kf_verify_poison(KF_F32, &f.out[210002], 1, 0);
    kf_cmp r = cmp(&f, 0);
    cr_assert_eq(r.status, KF_V_UNWRITTEN, "%s", r.detail);
    cr_assert_eq(r.first_bad, 150001);
    cr_assert_eq(r.nbad, 2);
    /* alone, in the scalar tail */
    memcpy(f.out, f.ref, sizeof(float) * (size_t)f.n);
    kf_verify_poison(KF_F32, &f.out[210001], 1, 0);
    r = cmp(&f, 0);
    cr_assert_eq(r.status, KF_V_UNWRITTEN, "%s", r.detail);
    cr_assert_eq(r.first_bad, 210001);
    fx_close(&f);
}

/* A NaN that is not the poison, or an infinity, on either side: a mismatch unless both
 * sides hold the same infinity (an expected overflow). */
Test(compare_fast, nan_and_infinity_are_judged_element_by_element) {
    fixture f;
    fx_open(&f, pw_task, 3);
    const int64_t at[] = {7, 100000, 210002};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        int64_t i = at[k];
        memcpy(f.out, f.ref, sizeof(float) * (size_t)f.n);
        f.out[i] = NAN;
        kf_cmp r = cmp(&f, 3);
        cr_assert_eq(r.status, KF_V_MISMATCH, "NaN at %lld: %s", (long long)i, r.detail);
        cr_assert_eq(r.first_bad, i);
        f.out[i] = INFINITY;
        r = cmp(&f, 3);
        cr_assert_eq(r.status, KF_V_MISMATCH, "inf at %lld: %s", (long long)i, r.detail);
        cr_assert_eq(r.first_bad, i);
        /* the reference overflows there, and the kernel too: equal, passes */
        float keep = f.ref[i];
        f.ref[i] = INFINITY;
        r = cmp(&f, 3);
        cr_assert_eq(r.status, KF_V_OK, "inf = inf at %lld: %s", (long long)i, r.detail);
        /* the reference overflows, the kernel does not */
        f.out[i] = 3.0e38f;
        r = cmp(&f, 3);
        cr_assert_eq(r.status, KF_V_MISMATCH, "inf vs finite at %lld: %s", (long long)i, r.detail);
        cr_assert_eq(r.first_bad, i);
        f.ref[i] = keep;
    }
    fx_close(&f);
}

/* Every element within tolerance but the whole too far off: an NMSE failure, which names
 * the element with the largest excess over its tolerance. */
Test(compare_fast, an_nmse_failure_names_the_worst_element) {
    fixture f;
    fx_open(&f, pw_task, 0);
    /* 0.9 of each element's tolerance: NMSE about (0.9 * 1e-4)^2 * 2, far over 1e-8 */
    for (int64_t i = 0; i < f.n; i++) f.out[i] = (float)((double)f.ref[i] + 0.9 * tol_at(&f, i));
    /* and one nearer its tolerance than any other, in the last chunk: the one whose
     * tolerance is least (a reference nearest zero), so that 0.99 of it leaves the smallest
     * excess of all */
    int64_t w = 196608;
    for (int64_t i = w; i < f.n - 3; i++)
        if (fabs(f.ref[i]) < fabs(f.ref[w])) w = i;
    f.out[w] = (float)((double)f.ref[w] + 0.99 * tol_at(&f, w));
    kf_cmp r = cmp(&f, 0);
    cr_assert_eq(r.status, KF_V_MISMATCH, "%s", r.detail);
    cr_assert_eq(r.nbad, 0);
    cr_assert(strstr(r.detail, "NMSE") != NULL, "%s", r.detail);
    cr_assert_eq(r.first_bad, w, "worst %lld: %s", (long long)r.first_bad, r.detail);
    cr_assert_eq(r.got, (double)f.out[w]);
    fx_close(&f);
}

/* A contraction's reference carries a bound per element, added to its tolerance: an
 * element within tolerance + bound passes, one beyond it fails, in the fast pass as in the
 * rule. */
Test(compare_fast, the_error_bound_widens_each_elements_tolerance) {
    fixture f;
    fx_open(&f, mm_task, 2);
    cr_assert_not_null(f.bnd, "the matmul's reference has no bound");
    /* the element whose bound is largest against its plain tolerance */
    int64_t i = 0;
    double ratio = 0;
    for (int64_t k = 0; k < f.n; k++) {
        double pk = f.atol * f.scale + f.rtol * fabs((double)f.ref[k]);
        if (f.bnd[k] / pk > ratio) ratio = f.bnd[k] / pk, i = k;
    }
    double plain = f.atol * f.scale + f.rtol * fabs((double)f.ref[i]);
    cr_assert(f.bnd[i] > 0.05 * plain, "bound %g against the plain tolerance %g", f.bnd[i], plain);
    f.out[i] = (float)((double)f.ref[i] + plain + 0.5 * f.bnd[i]);
    kf_cmp r = cmp(&f, 2);
    cr_assert_eq(r.status, KF_V_OK, "within the bound: %s", r.detail);
    double ma, mr, nm;
    scalar_errors(&f, &ma, &mr, &nm);
    cr_assert(r.max_abs == ma && r.max_rel == mr, "%.17g %.17g / %.17g %.17g", r.max_abs, r.max_rel, ma, mr);
    f.out[i] = (float)((double)f.ref[i] + plain + 1.5 * f.bnd[i]);
    r = cmp(&f, 2);
    cr_assert_eq(r.status, KF_V_MISMATCH, "beyond the bound: %s", r.detail);
    cr_assert_eq(r.first_bad, i);
    fx_close(&f);
}
