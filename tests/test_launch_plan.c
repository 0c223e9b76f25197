/*
 * The GPU candidate's launch plan (kf_launch_plan_parse, include/kforge/candidate.h):
 * expressions over tunables, scratch buffers, and every malformed line rejected with its
 * line number and reason.
 */
#include "kforge/candidate.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static kf_status parse(const char *src, const char *flags, int nbufs, kf_launch_plan *p,
                       kf_error *e) {
    memset(e, 0, sizeof *e);
    return kf_launch_plan_parse(src, flags, nbufs, p, e);
}

Test(launch_plan, literal_sizes_and_args) {
    kf_launch_plan p;
    kf_error e;
    const char *src = "// kforge:launch vadd global=1024 local=64 args=0,1,2\n"
                      "__kernel void vadd() {}\n";
    cr_assert_eq(parse(src, NULL, 3, &p, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(p.nlaunches, 1);
    cr_assert_str_eq(p.l[0].kernel, "vadd");
    cr_assert_eq(p.l[0].ndims, 1);
    cr_assert_eq(p.l[0].global[0], 1024);
    cr_assert_eq(p.l[0].local[0], 64);
    cr_assert_eq(p.l[0].nargs, 3);
    cr_assert_eq(p.l[0].args[2], 2);
}

Test(launch_plan, tunables_expressions_and_flags) {
    kf_launch_plan p;
    kf_error e;
    const char *src = "// kforge:tunable VW 4 2 1\n"
                      "// kforge:tunable WG 128 256\n"
                      "// kforge:launch k global=cdiv(1000003, VW * WG) * WG, 3 local=WG,1 "
                      "args=1,0\n";
    cr_assert_eq(parse(src, NULL, 2, &p, &e), KF_OK, "%s", e.msg);
    /* defaults: first values VW=4, WG=128: cdiv(1000003, 512) = 1954 groups */
    cr_assert_eq(p.l[0].global[0], 1954 * 128);
    cr_assert_eq(p.l[0].global[1], 3);
    cr_assert_eq(p.l[0].local[0], 128);
    cr_assert_eq(parse(src, "-DVW=1 -DWG=256", 2, &p, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(p.l[0].global[0], 3907 * 256);
    cr_assert_eq(p.l[0].local[0], 256);
    cr_assert_eq(parse("// kforge:launch k global=(2+3)*4-8/2%3 local=1 args=0\n", NULL, 1,
                       &p, &e),
                 KF_OK, "%s", e.msg);
    cr_assert_eq(p.l[0].global[0], 19); /* 20 - (4 % 3) */
}

Test(launch_plan, scratch_between_launches) {
    kf_launch_plan p;
    kf_error e;
    const char *src = "/* kforge:scratch part 256*4 */\n"
                      "// kforge:launch k1 global=256 local=64 args=0,part\n"
                      "// kforge:launch k2 global=64 local=64 args=part,1\n";
    cr_assert_eq(parse(src, NULL, 2, &p, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(p.nscratch, 1);
    cr_assert_str_eq(p.scratch_name[0], "part");
    cr_assert_eq(p.scratch_bytes[0], 1024);
    cr_assert_eq(p.nlaunches, 2);
    cr_assert_eq(p.l[0].args[1], -1);
    cr_assert_eq(p.l[1].args[0], -1);
    cr_assert_eq(p.l[1].args[1], 1);
}

static void expect_error(const char *src, int nbufs, int line, const char *needle) {
    kf_launch_plan p;
    kf_error e;
    cr_assert_eq(parse(src, NULL, nbufs, &p, &e), KF_ERR_PARSE, "accepted: %s", src);
    cr_assert_eq(e.line, line, "line %d for %s (%s)", e.line, src, e.msg);
    cr_assert(strstr(e.msg, needle), "message '%s' lacks '%s'", e.msg, needle);
}

Test(launch_plan, malformed_lines) {
    expect_error("int x;\n", 2, 1, "at least one");
    expect_error("\n// kforge:launch k global=100 local=64 args=0\n", 2, 2, "multiple");
    expect_error("// kforge:launch k global=64 local=64 args=0,5\n", 2, 1, "task buffer");
    expect_error("// kforge:launch k global=64 local=64 args=0,tmp\n", 2, 1, "scratch");
    expect_error("// kforge:launch k global=64 local=64\n", 2, 1, "needs global");
    expect_error("// kforge:launch k global=NOPE local=64 args=0\n", 2, 1, "unknown name");
    expect_error("// kforge:launch k global=64/0 local=64 args=0\n", 2, 1, "division by zero");
    expect_error("// kforge:launch k global=64,2 local=64 args=0\n", 2, 1, "dimension");
    expect_error("// kforge:launch k global=0 local=64 args=0\n", 2, 1, "positive");
    expect_error("// kforge:launch k global=64 local=64 args=0 speed=9\n", 2, 1, "unknown key");
    expect_error("\n\n// kforge:scratch t 0\n// kforge:launch k global=1 local=1 args=0\n", 2, 3,
                 "positive size");
    expect_error("// kforge:scratch t 4\n// kforge:scratch t 8\n", 2, 2, "twice");
    expect_error("// kforge:launch k global=(64 local=64 args=0\n", 2, 1, "')'");
    expect_error("// kforge:launch k global=64 local=64 smem=-8 args=0\n", 2, 1, "smem must be >= 0");
}

Test(launch_plan, dynamic_shared_memory) {
    kf_launch_plan p;
    kf_error e;
    const char *src = "// kforge:tunable ST 4 2\n"
                      "// kforge:launch k global=256 local=128 smem=ST*(128+256)*32*2 args=0\n"
                      "// kforge:launch j global=64 local=64 args=0\n";
    cr_assert_eq(parse(src, NULL, 1, &p, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(p.l[0].smem, 98304);
    cr_assert_eq(p.l[1].smem, 0, "no smem= means none");
    cr_assert_eq(parse(src, "-DST=2", 1, &p, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(p.l[0].smem, 49152);
}

/* The plan a candidate carries (kf_candidate_plan): parsed once per flags and buffer count,
 * its error carried too, copied with the candidate. The carried state is proved by
 * overwriting the source text in place after the parse: a second parse would see it. */
Test(launch_plan, carried_by_the_candidate) {
    const char *src = "// kforge:tunable WG 64 128\n"
                      "// kforge:launch k global=1024 local=WG args=0,1\n";
    kf_candidate c;
    kf_error e = {0};
    cr_assert_eq(kf_candidate_init(&c, "opencl", src, NULL, &e), KF_OK, "%s", e.msg);
    const kf_launch_plan *p = NULL, *q = NULL;
    cr_assert_eq(kf_candidate_plan(&c, 2, &p, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(p->l[0].local[0], 64);
    char *wg = strstr(c.source, "local=WG");
    memcpy(wg, "local=99", 8); /* what a second parse would reject (1024 % 99) */
    cr_assert_eq(kf_candidate_plan(&c, 2, &q, &e), KF_OK, "carried, not parsed again: %s", e.msg);
    cr_assert_eq(q, p);
    cr_assert_eq(q->l[0].local[0], 64);
    /* a copy carries it too */
    kf_candidate d;
    kf_candidate_copy(&d, &c);
    cr_assert_eq(kf_candidate_plan(&d, 2, &q, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(q->l[0].local[0], 64);
    cr_assert_neq(q, p, "the copy owns its own");
    kf_candidate_clear(&d);
    /* new flags: parsed again, and now the text says local=99 */
    snprintf(c.flags, sizeof c.flags, "-DWG=128");
    cr_assert_eq(kf_candidate_plan(&c, 2, &p, &e), KF_ERR_PARSE);
    cr_assert_eq(e.line, 2, "line %d: %s", e.line, e.msg);
    kf_candidate_clear(&c);
}

Test(launch_plan, carried_error_has_the_line) {
    kf_candidate c;
    kf_error e = {0};
    cr_assert_eq(kf_candidate_init(&c, "opencl", "\n// kforge:launch k global=64 local=64 args=0,5\n", NULL, &e),
                 KF_OK, "%s", e.msg);
    const kf_launch_plan *p = (const kf_launch_plan *)&e;
    cr_assert_eq(kf_candidate_plan(&c, 2, &p, &e), KF_ERR_PARSE);
    cr_assert_null(p);
    cr_assert_eq(e.line, 2);
    cr_assert(strstr(e.msg, "task buffer"), "%s", e.msg);
    kf_error again = {0};
    cr_assert_eq(kf_candidate_plan(&c, 2, &p, &again), KF_ERR_PARSE);
    cr_assert_str_eq(again.msg, e.msg);
    cr_assert_eq(again.line, 2);
    /* the task's buffer count is part of the question: with 6 buffers it parses */
    cr_assert_eq(kf_candidate_plan(&c, 6, &p, &e), KF_OK, "%s", e.msg);
    kf_candidate_clear(&c);
    /* a candidate not made by kf_candidate_init */
    kf_candidate z;
    memset(&z, 0, sizeof z);
    cr_assert_eq(kf_candidate_plan(&z, 2, &p, &e), KF_ERR_ARG);
}
