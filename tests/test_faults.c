/*
 * The planted-fault suite for the verifier (src/verify/): hand-written CPU kernels, each
 * with one known defect, must come back with the right kf_vstatus and a detail that
 * names the problem, and the test process must survive all of them.
 *
 * Tasks: swish y = x * sigmoid(x) on f32[1000003] (an odd size), and "pair": two f32
 * inputs with an f32 product output and an i64 argmax output. Kernels are generated from a
 * template with a fault statement spliced in before or after the correct loop.
 *
 * Allocation far beyond the memory limit is expected as mem-limit (not crash): the
 * runner's malloc wrapper records the failure before the kernel dereferences the NULL it
 * got, and "your kernel ran out of its memory allowance" is the actionable report.
 */
#include <criterion/criterion.h>
#include <glob.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"

#define SWISH_N 1000003

static const char *swish_task = "task swish_odd\n"
                                "input x: f32[1000003]\n"
                                "output y = x * sigmoid(x)\n";

static const char *pair_task = "task pair\n"
                               "input a: f32[129, 257]\n"
                               "input b: f32[129, 257]\n"
                               "output p = a * b\n"
                               "output i = argmax(a, axis=1)\n";

static const char *ties_task = "task ties\n"
                               "input a: f16[64, 50] range(1, 1.01)\n"
                               "output i = argmax(a, axis=1)\n";

typedef struct fixture {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *ctx;
    kf_verify_opts o;
    char wd[512];
} fixture;

static void fx_open(fixture *f, const char *task, void (*tweak)(kf_verify_opts *)) {
    memset(f, 0, sizeof *f);
    kf_error err = {0};
    kf_status st = kf_parse_string(task, "<test>", &f->g, &err);
    cr_assert_eq(st, KF_OK, "parse: %s", err.msg);
    st = kf_backend_open("cpu", &f->b, &err);
    cr_assert_eq(st, KF_OK, "backend: %s", err.msg);
    snprintf(f->wd, sizeof f->wd, "%s/test-work/faults", KF_BUILD_DIR);
    cr_assert_eq(kf_mkdirs(f->wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts_default(&f->o);
    f->o.workdir = f->wd;
    f->o.seed = 12345;
    f->o.time_it = 0;
    f->o.threads = 2;
    f->o.wall_limit_s = 15;
    f->o.cpu_limit_s = 30;
    f->o.mem_limit = 512ll << 20;
    if (tweak) tweak(&f->o);
    st = kf_verify_ctx_new(f->g, &f->o, &f->ctx, &err);
    cr_assert_eq(st, KF_OK, "ctx: %s", err.msg);
}

static void fx_close(fixture *f) {
    kf_verify_ctx_free(f->ctx);
    kf_backend_close(f->b);
    kf_graph_free(f->g);
}

/* Verify source and return the result; the check itself must always be carried out. */
static kf_vresult run_src(fixture *f, const char *src) {
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "cpu", src, NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    kf_status st = kf_verify_candidate(f->ctx, f->b, &c, &r, &err);
    kf_candidate_clear(&c);
    cr_assert_eq(st, KF_OK, "verify could not run: %s (%s)", err.msg, r.detail);
    return r;
}

static void expect(const kf_vresult *r, kf_vstatus want, const char *phrase) {
    if (getenv("KF_TEST_VERBOSE"))
        fprintf(stderr, "[%s] %s (%.2f s)%s%.2f ms\n", kf_vstatus_name(r->status), r->detail,
                r->run_wall_s, r->timed ? "; median " : "", r->timed ? r->time_ms : 0.0);
    cr_assert_eq(r->status, want, "status %s, want %s; detail: %s", kf_vstatus_name(r->status),
                 kf_vstatus_name(want), r->detail);
    if (phrase)
        cr_assert(strstr(r->detail, phrase), "detail lacks '%s': %s", phrase, r->detail);
}

/* ---- kernels ---- */

static char srcbuf[8192];

/* The swish kernel with `pre` spliced before the loop, `post` after it, returning ret. */
static const char *swish(const char *pre, const char *post, const char *ret) {
    snprintf(srcbuf, sizeof srcbuf,
             "#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
             "#include <string.h>\n"
             "#define N %dL\n"
             "// kforge:tunable CHUNK 1024 4096\n"
             "#ifndef CHUNK\n#define CHUNK 4096\n#endif\n"
             "int kforge_kernel(void *const *args) {\n"
             "    const float *x = args[0];\n"
             "    float *y = args[1];\n"
             "    %s\n"
             "    #pragma omp parallel for schedule(static)\n"
             "    for (long c = 0; c < N; c += CHUNK) {\n"
             "        long e = c + CHUNK < N ? c + CHUNK : N;\n"
             "        for (long i = c; i < e; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
             "    }\n"
             "    %s\n"
             "    return %s;\n"
             "}\n",
             SWISH_N, pre, post, ret);
    return srcbuf;
}

static const char *pair(const char *post) {
    snprintf(srcbuf, sizeof srcbuf,
             "#include <stdint.h>\n"
             "#define R 129\n#define C 257\n"
             "int kforge_kernel(void *const *args) {\n"
             "    const float *a = args[0], *b = args[1];\n"
             "    float *p = args[2];\n"
             "    int64_t *idx = args[3];\n"
             "    for (long k = 0; k < R * C; k++) p[k] = a[k] * b[k];\n"
             "    for (long r = 0; r < R; r++) {\n"
             "        long best = 0;\n"
             "        for (long c = 1; c < C; c++) if (a[r * C + c] > a[r * C + best]) best = c;\n"
             "        idx[r] = best;\n"
             "    }\n"
             "    %s\n"
             "    return 0;\n"
             "}\n",
             post);
    return srcbuf;
}

/* ---- swish ---- */

static void short_limits(kf_verify_opts *o) {
    o->wall_limit_s = 2;
    o->cpu_limit_s = 30;
}

static void cpu_limits(kf_verify_opts *o) {
    o->wall_limit_s = 20;
    o->cpu_limit_s = 1;
}

static void timed(kf_verify_opts *o) {
    o->time_it = 1;
    o->min_reps = 7;
    o->min_time_s = 0.05;
    o->max_reps = 50;
}

Test(faults, correct_is_ok_and_timed) {
    fixture f;
    fx_open(&f, swish_task, timed);
    kf_vresult r = run_src(&f, swish("", "", "0"));
    expect(&r, KF_V_OK, NULL);
    cr_assert_eq(r.sets_run, KF_VERIFY_DEFAULT_SETS);
    cr_assert_eq(r.timed, 1);
    cr_assert_geq(r.reps, 7);
    cr_assert_gt(r.time_ms, 0);
    cr_assert_leq(r.time_min_ms, r.time_ms);
    cr_assert_leq(r.max_abs_err, 1e-4);
    cr_assert_eq(r.bad_set, -1);
    cr_assert_eq(r.first_bad, -1);
    fx_close(&f);
}

static void floor_high(kf_verify_opts *o) {
    timed(o);
    o->floor_s = 10.0; /* claims the task needs 10 s: every real kernel beats it */
}

Test(faults, faster_than_floor_is_impossible) {
    fixture f;
    fx_open(&f, swish_task, floor_high);
    kf_vresult r = run_src(&f, swish("", "", "0"));
    expect(&r, KF_V_IMPOSSIBLE, "roofline floor");
    cr_assert_eq(r.timed, 1);
    fx_close(&f);
}

Test(faults, writes_nothing) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, "int kforge_kernel(void *const *args) { return 0; }\n");
    expect(&r, KF_V_UNWRITTEN, "never written");
    cr_assert_eq(r.first_bad, 0);
    cr_assert_eq(r.bad_set, 0);
    cr_assert_eq(r.bad_output, 0);
    fx_close(&f);
}

Test(faults, misses_last_element) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    /* restore the poison in the last element by re-poisoning it... simply never write it */
    kf_vresult r = run_src(&f, swish("float keep; memcpy(&keep, &y[N - 1], 4);",
                                     "memcpy(&y[N - 1], &keep, 4);", "0"));
    expect(&r, KF_V_UNWRITTEN, "element 1000002");
    cr_assert_eq(r.first_bad, SWISH_N - 1);
    fx_close(&f);
}

Test(faults, writes_one_past_the_end) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, swish("", "y[N] = 1.0f;", "0"));
    expect(&r, KF_V_OOB_WRITE, "output 'y'");
    cr_assert(strstr(r.detail, "right after its end") && strstr(r.detail, "element index 1000003"),
              "%s", r.detail);
    fx_close(&f);
}

Test(faults, writes_before_the_start) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, swish("", "y[-1] = 1.0f;", "0"));
    expect(&r, KF_V_OOB_WRITE, "before its start (element index -1)");
    fx_close(&f);
}

Test(faults, one_wrong_element) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, swish("", "y[123457] += 0.01f * (fabsf(y[123457]) + 1.0f);", "0"));
    expect(&r, KF_V_MISMATCH, "element 123457");
    cr_assert_eq(r.first_bad, 123457);
    cr_assert_eq(r.bad_set, 0);
    cr_assert_str_eq(r.bad_dist, "uniform");
    cr_assert(strstr(r.detail, "1 of 1000003"), "%s", r.detail);
    cr_assert_gt(fabs(r.got - r.want), 0.005);
    fx_close(&f);
}

Test(faults, returns_nan) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, swish("", "for (long i = 0; i < N; i++) y[i] = nanf(\"\");", "0"));
    expect(&r, KF_V_MISMATCH, "got nan");
    cr_assert_eq(r.first_bad, 0);
    fx_close(&f);
}

Test(faults, segfault) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, swish("*(volatile int *)(uintptr_t)16 = 1;", "", "0"));
    expect(&r, KF_V_CRASH, "SIGSEGV");
    cr_assert(strstr(r.detail, "in the kernel"), "%s", r.detail);
    fx_close(&f);
}

Test(faults, abort) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, swish("fprintf(stderr, \"giving up\\n\"); abort();", "", "0"));
    expect(&r, KF_V_CRASH, "SIGABRT");
    cr_assert(strstr(r.detail, "giving up"), "output tail missing: %s", r.detail);
    fx_close(&f);
}

Test(faults, exits_the_process) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, swish("", "exit(0);", "0"));
    expect(&r, KF_V_CRASH, "exit");
    fx_close(&f);
}

Test(faults, hangs_past_wall_limit) {
    fixture f;
    fx_open(&f, swish_task, short_limits);
    /* the verdict names the wall-clock limit, so the limit cut it; a hang that was not
     * cut ends in the suite's timeout (no bound on time here: a loaded machine is slow) */
    kf_vresult r = run_src(&f, swish("for (volatile unsigned long k = 0;; k++) {}", "", "0"));
    expect(&r, KF_V_TIMEOUT, "wall-clock limit");
    fx_close(&f);
}

Test(faults, spins_past_cpu_limit) {
    fixture f;
    fx_open(&f, swish_task, cpu_limits);
    kf_vresult r = run_src(&f, swish("for (volatile unsigned long k = 0;; k++) {}", "", "0"));
    expect(&r, KF_V_CPU_LIMIT, "CPU-time limit");
    fx_close(&f);
}

Test(faults, overwrites_input) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, swish("", "((float *)args[0])[77] = 42.0f;", "0"));
    expect(&r, KF_V_INPUT_MODIFIED, "input 'x'");
    cr_assert(strstr(r.detail, "element 77"), "%s", r.detail);
    fx_close(&f);
}

Test(faults, floods_stdout) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, swish("for (int k = 0;; k++) printf(\"flooding stdout, line %d\\n\", k);",
                                     "", "0"));
    expect(&r, KF_V_OUTPUT_FLOOD, "flooding stdout");
    fx_close(&f);
}

Test(faults, returns_nonzero) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, swish("", "", "3"));
    expect(&r, KF_V_KERNEL_ERROR, "returned 3");
    fx_close(&f);
}

Test(faults, fails_to_compile) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, swish("this is not C;", "", "0"));
    expect(&r, KF_V_COMPILE_ERROR, "error");
    cr_assert(strstr(r.detail, "this"), "%s", r.detail);
    fx_close(&f);
}

Test(faults, lacks_entry_symbol) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    kf_vresult r = run_src(&f, "int kforge_kernal(void *const *args) { return 0; }\n");
    expect(&r, KF_V_LOAD_ERROR, "'kforge_kernel' not found");
    fx_close(&f);
}

Test(faults, allocates_past_memory_limit) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    /* the kernel does not check malloc and writes through NULL */
    kf_vresult r = run_src(&f, swish("static char *volatile keep; size_t big = (size_t)64 << 30;"
                                     " keep = malloc(big); memset(keep, 1, big); free(keep);",
                                     "", "0"));
    expect(&r, KF_V_MEM_LIMIT, "memory limit");
    cr_assert(strstr(r.detail, "68719476736"), "%s", r.detail);
    /* the kernel checks malloc and reports its failure */
    r = run_src(&f, swish("static char *volatile keep; keep = malloc((size_t)64 << 30);"
                          " if (!keep) return 12; keep[0] = 1; free(keep);", "", "0"));
    expect(&r, KF_V_MEM_LIMIT, "returned 12");
    fx_close(&f);
}

/* All faults in one process, then a correct kernel again: nothing leaks into kforge. */
Test(faults, survives_every_fault_in_sequence) {
    fixture f;
    fx_open(&f, swish_task, short_limits);
    static const struct {
        const char *pre, *post, *ret;
        kf_vstatus want;
    } cases[] = {
        {"*(volatile int *)(uintptr_t)16 = 1;", "", "0", KF_V_CRASH},
        {"abort();", "", "0", KF_V_CRASH},
        {"for (volatile unsigned long k = 0;; k++) {}", "", "0", KF_V_TIMEOUT},
        {"", "y[N] = 0;", "0", KF_V_OOB_WRITE},
        {"", "((float *)args[0])[0] = 0;", "0", KF_V_INPUT_MODIFIED},
        {"for (;;) puts(\"x\");", "", "0", KF_V_OUTPUT_FLOOD},
        {"", "", "-1", KF_V_KERNEL_ERROR},
        {"static char *volatile keep; keep = malloc((size_t)1 << 40); keep[4096] = 1;", "", "0",
         KF_V_MEM_LIMIT},
        {"", "y[5] = -y[5] + 1.0f;", "0", KF_V_MISMATCH},
    };
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            kf_vresult r = run_src(&f, swish(cases[i].pre, cases[i].post, cases[i].ret));
            expect(&r, cases[i].want, NULL);
        }
    kf_vresult r = run_src(&f, swish("", "", "0"));
    expect(&r, KF_V_OK, NULL);
    /* no runner output files are left behind */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q 'kf-run-%ld-'", f.wd, (long)getpid());
    cr_assert_neq(system(cmd), 0, "runner output files left in %s", f.wd);
    fx_close(&f);
}

/* ---- two inputs, an f32 and an i64 output ---- */

Test(faults, pair_correct) {
    fixture f;
    fx_open(&f, pair_task, timed);
    kf_vresult r = run_src(&f, pair(""));
    expect(&r, KF_V_OK, NULL);
    cr_assert_eq(r.timed, 1);
    cr_assert_geq(r.reps, 7);
    fx_close(&f);
}

Test(faults, pair_wrong_index) {
    fixture f;
    fx_open(&f, pair_task, NULL);
    kf_vresult r = run_src(&f, pair("idx[100] = (idx[100] + 1) % C;"));
    expect(&r, KF_V_MISMATCH, "output 'i'");
    cr_assert_eq(r.bad_output, 1);
    cr_assert_eq(r.first_bad, 100);
    fx_close(&f);
}

Test(faults, pair_index_past_end) {
    fixture f;
    fx_open(&f, pair_task, NULL);
    kf_vresult r = run_src(&f, pair("idx[R] = 0;"));
    expect(&r, KF_V_OOB_WRITE, "output 'i'");
    cr_assert(strstr(r.detail, "element index 129"), "%s", r.detail);
    cr_assert_eq(r.bad_output, 1);
    fx_close(&f);
}

Test(faults, pair_index_unwritten_and_second_input_written) {
    fixture f;
    fx_open(&f, pair_task, NULL);
    kf_vresult r = run_src(&f, pair("idx[3] = (int64_t)0x8BADF00DDEADBEEFull;"));
    expect(&r, KF_V_UNWRITTEN, "output 'i'");
    r = run_src(&f, pair("((float *)args[1])[R * C - 1] = 0.5f;"));
    expect(&r, KF_V_INPUT_MODIFIED, "input 'b'");
    fx_close(&f);
}

Test(faults, argmax_ties_accepted) {
    fixture f;
    fx_open(&f, ties_task, NULL);
    /* f16 values in [1, 1.01] take about ten distinct values, so rows have tied maxima;
     * positive halves order like their bit patterns. The last maximal index, where the
     * reference takes the first, is a legal tie. */
    const char *last =
        "#include <stdint.h>\n"
        "int kforge_kernel(void *const *args) {\n"
        "    const uint16_t *a = args[0]; int64_t *idx = args[1];\n"
        "    for (long r = 0; r < 64; r++) {\n"
        "        long best = 0;\n"
        "        for (long c = 1; c < 50; c++) if (a[r * 50 + c] >= a[r * 50 + best]) best = c;\n"
        "        idx[r] = best;\n"
        "    }\n"
        "    return 0;\n"
        "}\n";
    kf_vresult r = run_src(&f, last);
    expect(&r, KF_V_OK, NULL);
    /* the first minimal index is not a tie of the maximum */
    const char *wrong =
        "#include <stdint.h>\n"
        "int kforge_kernel(void *const *args) {\n"
        "    const uint16_t *a = args[0]; int64_t *idx = args[1];\n"
        "    for (long r = 0; r < 64; r++) {\n"
        "        long best = 0;\n"
        "        for (long c = 1; c < 50; c++) if (a[r * 50 + c] < a[r * 50 + best]) best = c;\n"
        "        idx[r] = best;\n"
        "    }\n"
        "    return 0;\n"
        "}\n";
    r = run_src(&f, wrong);
    expect(&r, KF_V_MISMATCH, "output 'i'");
    fx_close(&f);
}

/* ---- inputs ---- */

Test(faults, inputs_follow_the_rules) {
    /* log needs positive inputs; z has a range; nothing is ever an exact zero */
    const char *task = "task dom\n"
                       "input x: f32[4096]\n"
                       "input w: f32[4096]\n"
                       "input z: f32[4096] range(2, 3)\n"
                       "output y = log(x * 2.0) + w + z\n";
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "%s", err.msg);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.nsets = 4;
    o.seed = 99;
    /* The context is opaque: the kernel itself checks the inputs it is given. */
    kf_backend *b = NULL;
    cr_assert_eq(kf_backend_open("cpu", &b, &err), KF_OK);
    char wd[512];
    snprintf(wd, sizeof wd, "%s/test-work/faults", KF_BUILD_DIR);
    cr_assert_eq(kf_mkdirs(wd, &err), KF_OK);
    o.workdir = wd;
    o.time_it = 0;
    kf_verify_ctx *c = NULL;
    cr_assert_eq(kf_verify_ctx_new(g, &o, &c, &err), KF_OK, "%s", err.msg);
    const char *src =
        "#include <math.h>\n"
        "int kforge_kernel(void *const *args) {\n"
        "    const float *x = args[0], *w = args[1], *z = args[2]; float *y = args[3];\n"
        "    int neg_w = 0;\n"
        "    for (int i = 0; i < 4096; i++) {\n"
        "        if (!(x[i] > 0)) return 10;\n"
        "        if (w[i] == 0 || x[i] == 0 || z[i] == 0) return 11;\n"
        "        if (z[i] < 2 || z[i] > 3) return 12;\n"
        "        neg_w += w[i] < 0;\n"
        "        y[i] = logf(x[i] * 2.0f) + w[i] + z[i];\n"
        "    }\n"
        "    return neg_w > 0 ? 0 : 13;\n"
        "}\n";
    kf_candidate cand;
    cr_assert_eq(kf_candidate_init(&cand, "cpu", src, NULL, &err), KF_OK);
    kf_vresult r;
    cr_assert_eq(kf_verify_candidate(c, b, &cand, &r, &err), KF_OK, "%s", err.msg);
    expect(&r, KF_V_OK, NULL);
    cr_assert_eq(r.sets_run, 4);
    kf_candidate_clear(&cand);
    kf_verify_ctx_free(c);
    kf_backend_close(b);
    kf_graph_free(g);
}

Test(faults, names_of_statuses) {
    for (int s = 0; s < KF_V_COUNT; s++) {
        const char *n = kf_vstatus_name((kf_vstatus)s);
        cr_assert(n && n[0] && strcmp(n, "unknown") != 0, "status %d has no name", s);
    }
    cr_assert_str_eq(kf_vstatus_name(KF_V_OOB_WRITE), "oob-write");
    cr_assert_str_eq(kf_vstatus_name(KF_V_OK), "ok");
}

/* The pid of a live (not zombie) process named comm, or 0. */
static long live_comm(const char *comm) {
    glob_t gl;
    long found = 0;
    if (glob("/proc/[0-9]*/comm", 0, NULL, &gl) != 0) return 0;
    for (size_t i = 0; i < gl.gl_pathc && !found; i++) {
        char name[64] = "", path[96], buf[512];
        FILE *cf = fopen(gl.gl_pathv[i], "r");
        if (!cf) continue;
        if (!fgets(name, sizeof name, cf)) name[0] = 0;
        fclose(cf);
        name[strcspn(name, "\n")] = 0;
        if (strcmp(name, comm) != 0) continue;
        long pid = strtol(gl.gl_pathv[i] + 6, NULL, 10);
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *sf = fopen(path, "r");
        if (!sf) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, sf);
        fclose(sf);
        buf[n] = 0;
        const char *rp = strrchr(buf, ')');
        char state = rp && rp[1] ? rp[2] : '?';
        if (state != 'Z' && state != 'X') found = pid;
    }
    globfree(&gl);
    return found;
}

/* A kernel that leaves a sleeping grandchild behind: the process group is killed. The
 * grandchild names itself and tells the kernel through a pipe before the kernel returns,
 * so it was alive at the end of the call (its scratch directory is gone after the run,
 * so nothing is passed through files). */
Test(faults, no_process_outlives_a_run) {
    fixture f;
    fx_open(&f, swish_task, NULL);
    char name[16], pre[1200];
    snprintf(name, sizeof name, "kfgc%ld", (long)getpid() % 1000000);
    snprintf(pre, sizeof pre,
             "extern int fork(void); extern int pause(void); extern int pipe(int *);"
             " extern long write(int, const void *, unsigned long); extern long read(int, void *, unsigned long);"
             " extern int prctl(int, ...); extern int close(int);"
             " static int started; if (!started) { started = 1; int pp[2]; if (pipe(pp) != 0) return 20;"
             " if (fork() == 0) { prctl(15 /* PR_SET_NAME */, \"%s\"); write(pp[1], \"x\", 1);"
             " for (;;) pause(); }"
             " char ch; close(pp[1]); if (read(pp[0], &ch, 1) != 1) return 21; close(pp[0]); }",
             name);
    kf_vresult r = run_src(&f, swish(pre, "", "0"));
    expect(&r, KF_V_OK, NULL);
    long pid = 0;
    for (int tries = 0; tries < 100; tries++) {
        pid = live_comm(name);
        if (!pid) break;
        usleep(20000);
    }
    if (pid) kill((pid_t)pid, 9);
    cr_assert_eq(pid, 0, "grandchild %ld still alive", pid);
    fx_close(&f);
}

static void bad_runner(kf_verify_opts *o) { o->runner = "/nonexistent/kforge-runner"; }

Test(faults, missing_runner_is_an_error_not_a_verdict) {
    fixture f;
    fx_open(&f, swish_task, bad_runner);
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "cpu", swish("", "", "0"), NULL, &err), KF_OK);
    kf_vresult r;
    kf_status st = kf_verify_candidate(f.ctx, f.b, &c, &r, &err);
    kf_candidate_clear(&c);
    cr_assert_neq(st, KF_OK);
    cr_assert_eq(r.status, KF_V_INTERNAL);
    cr_assert(strstr(err.msg, "kforge-runner"), "%s", err.msg);
    fx_close(&f);
}
