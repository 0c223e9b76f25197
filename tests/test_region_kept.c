/*
 * A CPU candidate's buffer region is the one the task's previous candidate ran in
 * (src/verify/verify.c region_take / region_give_back, sandbox.c kf_sbx_reuse; issue 30).
 * Candidates are hostile: nothing one of them writes anywhere it can reach in the region
 * (the control and live pages, the guard zones, its inputs, its outputs) may reach the
 * next one's runs or verdict. The "reader" kernel below looks for every such trace at the
 * start of each of its calls and returns a kernel error when it finds one; it runs after
 * two "writers" that leave traces everywhere, in the region they handed back. And a
 * region is not taken again when it was resized or a process of its last run is left.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"
#include "verify/verify_int.h"

#define N 65536
static const char *task = "task kept\n"
                          "input x: f32[65536]\n"
                          "output y = x * sigmoid(x)\n";

#define MARK "kforge-kept-region-marker-0123456789"

/* The region's layout for the task, as the verifier makes it (offsets of the input's and
 * the output's data, the end of the control and live pages, the whole size), as #defines
 * for the kernels. */
static char layout[512];
static void make_layout(void) {
    size_t sizes[2] = {4 * N, 4 * N};
    int is_out[2] = {0, 1};
    kf_sbx sb;
    kf_error err = {0};
    cr_assert_eq(kf_sbx_new(sizes, is_out, 2, &sb, &err), KF_OK, "%s", err.msg);
    snprintf(layout, sizeof layout,
             "#define N %d\n#define OFF0 %lluull\n#define OFF1 %lluull\n#define HEAD %lluull\n"
             "#define TOTAL %lluull\n#define GUARD %dull\n#define CTLEND %lluull\n#define MARK \"%s\"\n",
             N, (unsigned long long)sb.off[0], (unsigned long long)sb.off[1],
             (unsigned long long)(sb.ctl_size + KF_RUN_PAGE), (unsigned long long)sb.total, KF_RUN_GUARD,
             (unsigned long long)sizeof(kf_run_ctl), MARK);
    cr_assert_gt(sb.ctl_size, sizeof(kf_run_ctl) + sizeof MARK, "no tail in the control pages to write");
    kf_sbx_free(&sb);
}

/* passes, and leaves the marker in the tails of the control and live pages in every call */
static const char *writer_ok =
    "#include <math.h>\n#include <string.h>\n"
    "int kforge_kernel(void *const *args) {\n"
    "    const float *x = args[0];\n"
    "    float *y = args[1];\n"
    "    for (long i = 0; i < N; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
    "    unsigned char *base = (unsigned char *)args[0] - OFF0;\n"
    "    memcpy(base + CTLEND, MARK, sizeof MARK);\n"
    "    memcpy(base + HEAD - sizeof MARK, MARK, sizeof MARK);\n"
    "    return 0;\n"
    "}\n";

/* fails: writes its input (a NaN that no set holds), both guard zones of each buffer, and
 * the pages' tails */
static const char *writer_bad =
    "#include <math.h>\n#include <string.h>\n#include <stdint.h>\n"
    "int kforge_kernel(void *const *args) {\n"
    "    float *x = args[0];\n"
    "    float *y = args[1];\n"
    "    for (long i = 0; i < N; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
    "    uint32_t nan = 0x7fc0beefu;\n"
    "    for (long i = 0; i < N; i++) memcpy(&x[i], &nan, 4);\n"
    "    unsigned char *base = (unsigned char *)args[0] - OFF0;\n"
    "    memcpy(base + CTLEND, MARK, sizeof MARK);\n"
    "    memcpy(base + HEAD - sizeof MARK, MARK, sizeof MARK);\n"
    "    memset(base + OFF0 - GUARD, 0x5a, GUARD);\n"
    "    memset(base + OFF0 + 4 * N, 0x5a, OFF1 - GUARD - (OFF0 + 4 * N));\n"
    "    memset(base + OFF1 - GUARD, 0x5a, GUARD);\n"
    "    memset(base + OFF1 + 4 * N, 0x5a, TOTAL - (OFF1 + 4 * N));\n"
    "    return 0;\n"
    "}\n";

/* returns 7-10 when a trace of an earlier kernel is in its region, else computes the task */
static const char *reader =
    "#define _GNU_SOURCE\n#include <math.h>\n#include <string.h>\n#include <stdint.h>\n#include <stdio.h>\n"
    "static int guards_ok(const unsigned char *b, uint64_t from, uint64_t to) {\n"
    "    for (uint64_t p = from; p < to; p++)\n"
    "        if (b[p] != (unsigned char)(0xA5u ^ (p * 29u))) return 0;\n"
    "    return 1;\n"
    "}\n"
    "int kforge_kernel(void *const *args) {\n"
    "    const float *x = args[0];\n"
    "    float *y = args[1];\n"
    "    const unsigned char *base = (const unsigned char *)args[0] - OFF0;\n"
    "    if (memmem(base, HEAD, MARK, sizeof MARK - 1)) { fprintf(stderr, \"marker in the control or live page\\n\"); return 7; }\n"
    "    if (!guards_ok(base, OFF0 - GUARD, OFF0) || !guards_ok(base, OFF0 + 4 * N, OFF1 - GUARD) ||\n"
    "        !guards_ok(base, OFF1 - GUARD, OFF1) || !guards_ok(base, OFF1 + 4 * N, TOTAL)) {\n"
    "        fprintf(stderr, \"a guard zone not as the parent writes it\\n\"); return 8; }\n"
    "    for (long i = 0; i < N; i++) if (!isnan(y[i])) { fprintf(stderr, \"output %ld not poisoned\\n\", i); return 9; }\n"
    "    for (long i = 0; i < N; i++) if (!isfinite(x[i])) { fprintf(stderr, \"input %ld not drawn\\n\", i); return 10; }\n"
    "    for (long i = 0; i < N; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
    "    return 0;\n"
    "}\n";

static char srcbuf[3][4096];
static const char *with_layout(int k, const char *body) {
    snprintf(srcbuf[k], sizeof srcbuf[k], "%s%s", layout, body);
    return srcbuf[k];
}

typedef struct fixture {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *c;
    char wd[512];
} fixture;

static void fx_open(fixture *f) {
    memset(f, 0, sizeof *f);
    /* the kernels here find the region from args[0] by the layout of a region without
     * resident input sets (the inputs copied in before each call); the resident layout's
     * counterpart is tests/test_sets_resident.c */
    setenv("KFORGE_SETS_COPIED", "1", 1);
    make_layout();
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<test>", &f->g, &err), KF_OK, "parse: %s", err.msg);
    cr_assert_eq(kf_backend_open("cpu", &f->b, &err), KF_OK, "backend: %s", err.msg);
    snprintf(f->wd, sizeof f->wd, "%s/test-work/kept-%ld", KF_BUILD_DIR, (long)getpid());
    cr_assert_eq(kf_mkdirs(f->wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.workdir = f->wd;
    o.seed = 30;
    o.threads = 1;
    o.time_it = 1; /* the timing run's calls too: many calls, the region written between them */
    o.min_reps = 3;
    o.max_reps = 8;
    o.min_time_s = 0.005;
    cr_assert_eq(kf_verify_ctx_new(f->g, &o, &f->c, &err), KF_OK, "ctx: %s", err.msg);
}

static void fx_close(fixture *f) {
    kf_verify_ctx_free(f->c);
    kf_backend_close(f->b);
    kf_graph_free(f->g);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->wd);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", f->wd);
}

/* no child of this process is left, not even a zombie */
static void assert_no_child(void) {
    errno = 0;
    pid_t p = waitpid(-1, NULL, WNOHANG);
    cr_assert(p == -1 && errno == ECHILD, "a child is left unreaped (waitpid: %d, %s)", (int)p, strerror(errno));
}

static kf_vstatus verify(fixture *f, const char *source, kf_vresult *r) {
    kf_candidate cand;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&cand, "cpu", source, NULL, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_verify_candidate(f->c, f->b, &cand, r, &err), KF_OK, "%s (%s)", err.msg, r->detail);
    kf_candidate_clear(&cand);
    assert_no_child();
    return r->status;
}

Test(region_kept, nothing_a_hostile_candidate_writes_reaches_the_next_one) {
    fixture f;
    fx_open(&f);
    kf_vresult r;
    /* the reader passes in a new region: it finds no trace where there is none */
    kf_vstatus vs = verify(&f, with_layout(2, reader), &r);
    cr_assert_eq(vs, KF_V_OK, "the reader in a new region: %s: %s", kf_vstatus_name(vs), r.detail);
    vs = verify(&f, with_layout(0, writer_ok), &r);
    cr_assert_eq(vs, KF_V_OK, "%s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert_eq(r.timed, 1);
    vs = verify(&f, with_layout(1, writer_bad), &r);
    cr_assert(vs == KF_V_OOB_WRITE || vs == KF_V_INPUT_MODIFIED, "%s: %s", kf_vstatus_name(vs), r.detail);
    vs = verify(&f, with_layout(2, reader), &r);
    cr_assert_eq(vs, KF_V_OK, "the reader after the writers: %s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert_eq(r.timed, 1);
    /* and the four ran in one region (else this proved nothing about a kept one) */
    cr_assert_eq(f.c->regions_made, 1, "regions made: %d", f.c->regions_made);
    cr_assert_eq(f.c->regions_reused, 3, "regions reused: %d", f.c->regions_reused);
    fx_close(&f);
}

Test(region_kept, KFORGE_REGION_FRESH_makes_one_per_candidate) {
    fixture f;
    fx_open(&f);
    setenv("KFORGE_REGION_FRESH", "1", 1);
    kf_vresult r;
    for (int k = 0; k < 2; k++) {
        kf_vstatus vs = verify(&f, with_layout(0, writer_ok), &r);
        cr_assert_eq(vs, KF_V_OK, "%s: %s", kf_vstatus_name(vs), r.detail);
    }
    unsetenv("KFORGE_REGION_FRESH");
    cr_assert_eq(f.c->regions_reused, 0);
    cr_assert_null(f.c->kept_region);
    fx_close(&f);
}

static void new_region(kf_sbx *sb) {
    size_t sizes[2] = {4 * N, 4 * N};
    int is_out[2] = {0, 1};
    kf_error err = {0};
    cr_assert_eq(kf_sbx_new(sizes, is_out, 2, sb, &err), KF_OK, "%s", err.msg);
}

/* a process of the last run's group could still write into the region */
Test(region_kept, not_taken_again_while_a_process_of_its_last_run_is_left) {
    kf_sbx sb;
    new_region(&sb);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        setpgid(0, 0);
        for (;;) pause();
    }
    setpgid(child, child); /* (either side may win the race; both ask for the same) */
    sb.last_pgid = child;
    int alive = kf_sbx_reuse(&sb);
    kill(child, SIGKILL);
    int zombie = kf_sbx_reuse(&sb);
    while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {}
    /* (asserted after the child is gone: a failed assertion must not leave it behind) */
    cr_assert_eq(alive, 0, "taken again with a process of its last run's group alive");
    cr_assert_eq(zombie, 0, "taken again with its last run's group a zombie");
    cr_assert_eq(kf_sbx_reuse(&sb), 1, "refused with its last run's group gone");
    kf_sbx_free(&sb);
}

/* a shorter memfd would fault the parent's next write into it */
Test(region_kept, not_taken_again_when_resized) {
    kf_sbx sb;
    new_region(&sb);
    cr_assert_eq(kf_sbx_reuse(&sb), 1);
    cr_assert_eq(ftruncate(sb.fd, (off_t)(sb.total - KF_RUN_PAGE)), 0);
    cr_assert_eq(kf_sbx_reuse(&sb), 0, "taken again after a resize");
    kf_sbx_free(&sb);
}

/* the control and live pages as a new region's, the last run's record gone, the layout kept */
Test(region_kept, taken_again_with_the_pages_a_new_region_has) {
    kf_sbx sb, fresh;
    new_region(&sb);
    new_region(&fresh);
    memset(sb.base, 0x77, sb.ctl_size + KF_RUN_PAGE);
    sb.hs_reps = 9;
    sb.start_s = 1.5;
    sb.hs_times[3] = 2.0;
    uint64_t off1 = sb.off[1];
    cr_assert_eq(kf_sbx_reuse(&sb), 1);
    cr_assert_eq(memcmp(sb.base, fresh.base, sb.ctl_size + KF_RUN_PAGE), 0, "the control or live page not cleared");
    cr_assert_eq(sb.hs_reps, 0);
    cr_assert_eq(sb.start_s, 0);
    cr_assert_eq(sb.hs_times[3], 0);
    cr_assert_eq(sb.off[1], off1);
    cr_assert_eq(sb.nbufs, 2);
    cr_assert_eq((void *)sb.ctl, (void *)sb.base);
    kf_sbx_free(&fresh);
    kf_sbx_free(&sb);
}
