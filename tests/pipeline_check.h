/*
 * Shared by the template tests: a task through the real pipeline (parse -> plan -> render
 * -> compile -> sandboxed run -> compare with the float64 reference) at the default point,
 * at the point with every parameter moved to its next value, and, where the plan fuses an
 * epilogue (a parameter "<stage>epi", or "<stage>red" for a row reduction in a CPU GEMM's
 * store), at the default point with every fusion undone (epi=0, red=0): fused and unfused
 * must both verify.
 */
#ifndef KF_TEST_PIPELINE_CHECK_H
#define KF_TEST_PIPELINE_CHECK_H

#include <criterion/criterion.h>
#include <string.h>

#include "kforge/backend.h"
#include "kforge/ir.h"
#include "kforge/synth.h"
#include "kforge/verify.h"

static inline void pipeline_check(kf_backend *be, const char *text, const char *workdir, uint64_t seed) {
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(text, "<test>", &g, &err), KF_OK, "parse: %s\n%s", err.msg, text);
    kf_synth *s = NULL;
    cr_assert_eq(kf_synth_plan(g, be->info.platform, &be->info, &s, &err), KF_OK, "%s: plan: %s\n%s",
                 be->info.platform, err.msg, text);
    kf_verify_opts vo;
    kf_verify_opts_default(&vo);
    vo.workdir = workdir;
    vo.seed = seed;
    vo.nsets = 2;
    kf_verify_ctx *ctx = NULL;
    cr_assert_eq(kf_verify_ctx_new(g, &vo, &ctx, &err), KF_OK, "ctx: %s", err.msg);
    const kf_space *sp = kf_synth_space(s);
    for (int variant = 0; variant < 3; variant++) {
        kf_point p;
        kf_synth_default_point(s, &p);
        if (variant == 2) {
            int undone = 0;
            for (int i = 0; i < sp->nparams; i++) {
                size_t ln = strlen(sp->p[i].name);
                if (ln >= 4 && (strcmp(sp->p[i].name + ln - 4, ".epi") == 0 || strcmp(sp->p[i].name + ln - 4, ".red") == 0) &&
                    sp->p[i].nvalues == 2) {
                    p.idx[i] = sp->p[i].values[0] == 0 ? 0 : 1;
                    undone = 1;
                }
            }
            if (!undone) break;
        }
        if (variant == 1) {
            int moved = 0;
            for (int i = 0; i < sp->nparams; i++)
                if (sp->p[i].nvalues > 1) {
                    p.idx[i] = (p.idx[i] + 1) % sp->p[i].nvalues;
                    moved = 1;
                }
            if (!moved) break;
        }
        kf_candidate c;
        cr_assert_eq(kf_synth_render(s, &p, &c, &err), KF_OK, "render: %s", err.msg);
        kf_vresult r;
        cr_assert_eq(kf_verify_candidate(ctx, be, &c, &r, &err), KF_OK, "verify: %s", err.msg);
        cr_expect_eq(r.status, KF_V_OK, "%s, task:\n%s\nplan %s, point [%s]: %s: %s", be->info.platform, text,
                     kf_synth_describe(s), c.label, kf_vstatus_name(r.status), r.detail);
        cr_expect_geq(r.sets_run, 2);
        kf_candidate_clear(&c);
    }
    kf_verify_ctx_free(ctx);
    kf_synth_free(s);
    kf_graph_free(g);
}

#endif
