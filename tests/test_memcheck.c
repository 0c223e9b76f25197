/*
 * The memory-checker run (kf_verify_memcheck, src/verify/memcheck.c): planted heap faults
 * that guard zones cannot see must come back as memcheck with valgrind's report in the
 * detail, and clean kernels (OpenMP included: libgomp's thread pool must not look like a
 * leak) as ok. Skipped when valgrind is not installed.
 *
 * Task: y = x * 2 over f32[1003] (odd, so no kernel gets a round size by luck). The faulty
 * kernels touch their scratch through volatile pointers, so that the compiler cannot drop
 * the faulty access as dead or out-of-bounds.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kforge/agent.h"
#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"
#include "memcheck_common.h"

static const char *task = "task scale_odd\n"
                          "input x: f32[1003]\n"
                          "output y = x * 2\n";


typedef struct fixture {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *ctx;
    kf_verify_opts o;
    char wd[512];
} fixture;

static void fx_open_any(fixture *f) {
    memset(f, 0, sizeof *f);
    kf_error err = {0};
    kf_status st = kf_parse_string(task, "<test>", &f->g, &err);
    cr_assert_eq(st, KF_OK, "parse: %s", err.msg);
    st = kf_backend_open("cpu", &f->b, &err);
    cr_assert_eq(st, KF_OK, "backend: %s", err.msg);
    snprintf(f->wd, sizeof f->wd, "%s/test-work/memcheck", KF_BUILD_DIR);
    cr_assert_eq(kf_mkdirs(f->wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts_default(&f->o);
    f->o.workdir = f->wd;
    f->o.seed = 4242;
    f->o.nsets = 2;
    f->o.threads = 2;
    f->o.wall_limit_s = 15;
    f->o.cpu_limit_s = 30;
    f->o.mem_limit = 512ll << 20;
    st = kf_verify_ctx_new(f->g, &f->o, &f->ctx, &err);
    cr_assert_eq(st, KF_OK, "ctx: %s", err.msg);
}

static void fx_open(fixture *f) {
    if (!have_valgrind()) cr_skip_test("valgrind is not installed");
    fx_open_any(f);
}

static void fx_close(fixture *f) {
    kf_verify_ctx_free(f->ctx);
    kf_backend_close(f->b);
    kf_graph_free(f->g);
}

/* Compile src into the workdir; the artifact path goes to art. */
static void compile(fixture *f, const char *src, kf_candidate *c, char *art, size_t cap) {
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(c, "cpu", src, NULL, &err), KF_OK, "%s", err.msg);
    snprintf(c->flags, sizeof c->flags, "%s", kf_verify_memcheck_flags(f->b));
    kf_buf log = {0};
    kf_status st = kf_backend_compile(f->b, c->source, c->flags, f->wd, art, cap, &log, &err);
    cr_assert_eq(st, KF_OK, "compile: %s\n%s", err.msg, log.data ? log.data : "");
    kf_buf_free(&log);
}

/* Memcheck src; the check itself must be carried out. */
static kf_vresult memcheck_src(fixture *f, const char *src) {
    kf_candidate c;
    char art[1024];
    compile(f, src, &c, art, sizeof art);
    kf_vresult r;
    kf_error err = {0};
    kf_status st = kf_verify_memcheck(f->ctx, f->b, &c, art, &r, &err);
    kf_candidate_clear(&c);
    cr_assert_eq(st, KF_OK, "memcheck could not run: %s (%s)", err.msg, r.detail);
    if (getenv("KF_TEST_VERBOSE"))
        fprintf(stderr, "[%s] (%.2f s) %s\n", kf_vstatus_name(r.status), r.run_wall_s, r.detail);
    return r;
}

static void expect(const kf_vresult *r, kf_vstatus want, const char *phrase) {
    cr_assert_eq(r->status, want, "status %s, want %s; detail: %s", kf_vstatus_name(r->status),
                 kf_vstatus_name(want), r->detail);
    if (phrase)
        cr_assert(strstr(r->detail, phrase), "detail lacks '%s': %s", phrase, r->detail);
}

static char srcbuf[4096];

/* A kernel for the task with body spliced in; x, y and N are defined for it. */
static const char *kernel(const char *body) {
    snprintf(srcbuf, sizeof srcbuf,
             "#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
             "#define N 1003L\n"
             "int kforge_kernel(void *const *args) {\n"
             "    const float *x = args[0];\n"
             "    float *y = args[1];\n"
             "%s\n"
             "    return 0;\n"
             "}\n",
             body);
    return srcbuf;
}

/* OpenMP on two threads, so that the thread pool is exercised. */
static const char *clean_body = "    #pragma omp parallel for schedule(static)\n"
                                "    for (long i = 0; i < N; i++) y[i] = x[i] * 2.0f;\n";

Test(memcheck, clean_kernel_is_ok) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel(clean_body));
    expect(&r, KF_V_OK, NULL);
    cr_assert_eq(r.sets_run, 1);
    cr_assert_eq(r.bad_set, -1);
    fx_close(&f);
}

/* Scratch that is allocated, used and freed, per thread: clean. */
Test(memcheck, freed_scratch_per_thread_is_ok) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel(
        "    #pragma omp parallel\n"
        "    {\n"
        "        float *s = malloc(N * sizeof *s);\n"
        "        if (s) {\n"
        "            #pragma omp for schedule(static)\n"
        "            for (long i = 0; i < N; i++) { s[i] = x[i] * 2.0f; y[i] = s[i]; }\n"
        "        }\n"
        "        free(s);\n"
        "    }\n"));
    expect(&r, KF_V_OK, NULL);
    fx_close(&f);
}

Test(memcheck, scratch_overrun_is_an_invalid_write) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel(
        "    float *s = malloc(N * sizeof *s);\n"
        "    if (!s) return 1;\n"
        "    for (long i = 0; i < N; i++) s[i] = x[i] * 2.0f;\n"
        "    ((volatile float *)s)[N] = 1.0f;\n"
        "    for (long i = 0; i < N; i++) y[i] = s[i];\n"
        "    free(s);\n"));
    expect(&r, KF_V_MEMCHECK, "Invalid write");
    cr_assert(strstr(r.detail, "kforge_kernel"), "the report names the kernel: %s", r.detail);
    cr_assert(strstr(r.detail, "0 bytes after a block of size 4,012"), "%s", r.detail);
    cr_assert_eq(r.bad_set, 0);
    fx_close(&f);
}

Test(memcheck, branch_on_uninitialised_scratch) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel(
        "    uint32_t *s = malloc(N * sizeof *s);\n"
        "    if (!s) return 1;\n"
        "    uint32_t acc = 0;\n"
        "    for (long i = 0; i < N; i++) acc ^= ((volatile uint32_t *)s)[i];\n"
        "    if (acc == 0x9e3779b9u) printf(\"lucky\\n\");\n"
        "    for (long i = 0; i < N; i++) y[i] = x[i] * 2.0f;\n"
        "    free(s);\n"));
    expect(&r, KF_V_MEMCHECK, "uninitialised");
    fx_close(&f);
}

Test(memcheck, leaked_scratch_is_a_definite_leak) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel(
        "    float *volatile keep = malloc(N * sizeof(float));\n"
        "    float *s = keep;\n"
        "    if (!s) return 1;\n"
        "    for (long i = 0; i < N; i++) s[i] = x[i];\n"
        "    for (long i = 0; i < N; i++) y[i] = s[i] * 2.0f;\n"));
    expect(&r, KF_V_MEMCHECK, "definitely lost");
    cr_assert(strstr(r.detail, "4,012 bytes"), "%s", r.detail);
    fx_close(&f);
}

/* Reads one element past its scratch block: valgrind's invalid read. */
Test(memcheck, scratch_overread_is_an_invalid_read) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel(
        "    float *s = malloc(N * sizeof *s);\n"
        "    if (!s) return 1;\n"
        "    for (long i = 0; i < N; i++) s[i] = x[i];\n"
        "    volatile float past = ((volatile float *)s)[N];\n"
        "    (void)past;\n"
        "    for (long i = 0; i < N; i++) y[i] = s[i] * 2.0f;\n"
        "    free(s);\n"));
    expect(&r, KF_V_MEMCHECK, "Invalid read");
    cr_assert(strstr(r.detail, "0 bytes after a block of size 4,012"), "%s", r.detail);
    fx_close(&f);
}

/* Reads one element past the input buffer, into its trailing guard zone: the guard check
 * sees only writes, the runner marks the guards unaddressable under valgrind. */
Test(memcheck, input_overread_into_the_guard_is_an_invalid_read) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel(
        "    volatile float past = ((const volatile float *)x)[N];\n"
        "    (void)past;\n"
        "    for (long i = 0; i < N; i++) y[i] = x[i] * 2.0f;\n"));
    expect(&r, KF_V_MEMCHECK, "Invalid read");
    cr_assert(strstr(r.detail, "kforge_kernel"), "the report names the kernel: %s", r.detail);
    fx_close(&f);
}

/* The same one element before the output (its leading guard), read by a parallel loop. */
Test(memcheck, output_underread_into_the_guard_is_an_invalid_read) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel(
        "    #pragma omp parallel for schedule(static)\n"
        "    for (long i = 0; i < N; i++) {\n"
        "        float prev = i == 0 ? ((volatile float *)y)[-1] : 0.0f;\n"
        "        y[i] = x[i] * 2.0f + prev * 0.0f;\n"
        "    }\n"));
    expect(&r, KF_V_MEMCHECK, "Invalid read");
    fx_close(&f);
}

/* A contraction (a * b + c) on uninitialised scratch feeding a branch: the checker's build
 * (kf_verify_memcheck_flags) computes it another way, and the branch is still reported. */
Test(memcheck, uninitialised_through_a_contraction_is_reported) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel(
        "    float *s = malloc(N * sizeof *s);\n"
        "    if (!s) return 1;\n"
        "    float acc = 0.0f;\n"
        "    for (long i = 0; i < N; i++) acc = s[i] * x[i] + acc;\n"
        "    if (acc > 1e30f) printf(\"huge\\n\");\n"
        "    for (long i = 0; i < N; i++) y[i] = x[i] * 2.0f;\n"
        "    free(s);\n"));
    expect(&r, KF_V_MEMCHECK, "uninitialised");
    fx_close(&f);
}

/* Reads scratch after freeing it (glibc does not notice; a double free it would abort on,
 * which the native run reports as a crash). */
Test(memcheck, use_after_free_is_an_invalid_read) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel(
        "    float *volatile s = malloc(N * sizeof(float));\n"
        "    if (!s) return 1;\n"
        "    for (long i = 0; i < N; i++) s[i] = x[i] * 2.0f;\n"
        "    free(s);\n"
        "    for (long i = 0; i < N; i++) y[i] = x[i] + x[i];\n"
        "    volatile float late = s[7];\n"
        "    (void)late;\n"));
    expect(&r, KF_V_MEMCHECK, "Invalid read");
    cr_assert(strstr(r.detail, "free'd"), "%s", r.detail);
    fx_close(&f);
}

/* Correct natively, wrong only under valgrind (it preloads its own libraries): the usual
 * checks after the checker run catch it. */
Test(memcheck, different_under_valgrind_is_caught) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel(
        "    const char *pre = getenv(\"LD_PRELOAD\");\n"
        "    float k = pre && strstr(pre, \"vgpreload\") ? 3.0f : 2.0f;\n"
        "    for (long i = 0; i < N; i++) y[i] = x[i] * k;\n"));
    expect(&r, KF_V_MISMATCH, "under valgrind");
    fx_close(&f);
}

/* The native run comes first and is checked as usual. */
Test(memcheck, native_failure_is_reported) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel("    for (long i = 0; i < N; i++) y[i] = x[i] * 2.0f;\n"
                                           "    y[N] = 0.0f;\n"));
    expect(&r, KF_V_OOB_WRITE, "native run");
    fx_close(&f);
}

/* After the faulty ones, in the same process: still clean. */
Test(memcheck, clean_kernel_again_is_ok) {
    fixture f;
    fx_open(&f);
    kf_vresult r = memcheck_src(&f, kernel("    float *s = malloc(N * sizeof *s);\n"
                                           "    if (!s) return 1;\n"
                                           "    for (long i = 0; i < N; i++) s[i] = x[i];\n"
                                           "    for (long i = 0; i < N; i++) y[i] = s[i] + s[i];\n"
                                           "    free(s);\n"));
    expect(&r, KF_V_OK, NULL);
    r = memcheck_src(&f, kernel(clean_body));
    expect(&r, KF_V_OK, NULL);
    fx_close(&f);
}

/* No checker on PATH: KF_ERR_UNSUPPORTED with a reason, nothing run (runs with or
 * without valgrind installed). */
Test(memcheck, no_valgrind_is_unsupported) {
    fixture f;
    fx_open_any(&f);
    kf_candidate c;
    char art[1024];
    compile(&f, kernel(clean_body), &c, art, sizeof art);
    char *old = strdup(getenv("PATH"));
    setenv("PATH", "/nonexistent-kforge-test", 1);
    kf_vresult r;
    kf_error err = {0};
    kf_status st = kf_verify_memcheck(f.ctx, f.b, &c, art, &r, &err);
    setenv("PATH", old, 1);
    free(old);
    kf_candidate_clear(&c);
    cr_assert_eq(st, KF_ERR_UNSUPPORTED, "status %s: %s", kf_status_name(st), err.msg);
    cr_assert(strstr(err.msg, "valgrind"), "%s", err.msg);
    cr_assert(strstr(r.detail, "valgrind"), "%s", r.detail);
    fx_close(&f);
}

Test(memcheck, status_name) {
    cr_assert_str_eq(kf_vstatus_name(KF_V_MEMCHECK), "memcheck");
}

/* The verifier's mode entry (kf_verify_run, KF_VERIFY_MEMCHECK) builds the candidate itself,
 * with the checker's flags, and finds the same planted out-of-bounds write. */
Test(memcheck, verify_run_memcheck_mode_finds_an_overrun) {
    fixture f;
    fx_open(&f);
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "cpu",
                                   kernel("    float *s = malloc(N * sizeof *s);\n"
                                          "    if (!s) return 1;\n"
                                          "    for (long i = 0; i < N; i++) s[i] = x[i] * 2.0f;\n"
                                          "    ((volatile float *)s)[N] = 1.0f;\n"
                                          "    for (long i = 0; i < N; i++) y[i] = s[i];\n"
                                          "    free(s);\n"),
                                   NULL, &err),
                 KF_OK, "%s", err.msg);
    kf_verify_run_args a = {.mode = KF_VERIFY_MEMCHECK};
    kf_vresult r;
    cr_assert_eq(kf_verify_run(f.ctx, f.b, &c, &a, &r, &err), KF_OK, "%s (%s)", err.msg, r.detail);
    expect(&r, KF_V_MEMCHECK, "Invalid write");
    cr_assert(strstr(r.detail, "0 bytes after a block of size 4,012"), "%s", r.detail);
    cr_assert_str_eq(c.flags, "", "the caller's candidate keeps its flags");
    /* the clean kernel through the same entry is ok */
    kf_candidate_clear(&c);
    cr_assert_eq(kf_candidate_init(&c, "cpu", kernel(clean_body), NULL, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_verify_run(f.ctx, f.b, &c, &a, &r, &err), KF_OK, "%s (%s)", err.msg, r.detail);
    expect(&r, KF_V_OK, NULL);
    kf_candidate_clear(&c);
    fx_close(&f);
}

/* A build failure in a mode run is the candidate's compile error, returned with the
 * compiler's status; the check mode keeps kf_verify_candidate's KF_OK with the verdict. */
Test(memcheck, verify_run_build_failure_is_a_compile_error) {
    fixture f;
    fx_open_any(&f);
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "cpu", kernel("    this is not C;\n"), NULL, &err), KF_OK);
    kf_vresult r;
    kf_verify_run_args a = {.mode = KF_VERIFY_MEMCHECK};
    cr_assert_eq(kf_verify_run(f.ctx, f.b, &c, &a, &r, &err), KF_ERR_COMPILE, "%s", err.msg);
    cr_assert_eq(r.status, KF_V_COMPILE_ERROR);
    kf_buf csv = {0};
    a = (kf_verify_run_args){.mode = KF_VERIFY_PROFILE, .tool = "/bin/true", .csv = &csv};
    cr_assert_eq(kf_verify_run(f.ctx, f.b, &c, &a, &r, &err), KF_ERR_COMPILE, "%s", err.msg);
    cr_assert_eq(r.status, KF_V_COMPILE_ERROR);
    a = (kf_verify_run_args){.mode = KF_VERIFY_CHECK};
    cr_assert_eq(kf_verify_run(f.ctx, f.b, &c, &a, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(r.status, KF_V_COMPILE_ERROR);
    a = (kf_verify_run_args){.mode = KF_VERIFY_PROFILE};
    cr_assert_eq(kf_verify_run(f.ctx, f.b, &c, &a, &r, &err), KF_ERR_ARG, "no csv buffer");
    a = (kf_verify_run_args){.mode = (kf_verify_mode)42};
    cr_assert_eq(kf_verify_run(f.ctx, f.b, &c, &a, &r, &err), KF_ERR_ARG, "unknown mode");
    kf_buf_free(&csv);
    kf_candidate_clear(&c);
    fx_close(&f);
}

/* The checker's build: on x86-64 without FMA (valgrind emulates it lane by lane), and a
 * source that needs FMA (intrinsics) is built with the needed flags alone and still
 * checked, its faults found. */
Test(memcheck, fma_intrinsics_fall_back_to_the_needed_flags) {
    fixture f;
    fx_open(&f);
#if !defined(__x86_64__)
    cr_skip_test("x86-64 only");
#else
    if (!strstr(f.b->info.arch, "fma")) cr_skip_test("this CPU has no FMA");
    kf_candidate c;
    kf_error err = {0};
    kf_verify_run_args a = {.mode = KF_VERIFY_MEMCHECK};
    kf_vresult r;
    cr_assert_eq(kf_candidate_init(&c, "cpu", kernel(clean_body), NULL, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_verify_run(f.ctx, f.b, &c, &a, &r, &err), KF_OK, "%s (%s)", err.msg, r.detail);
    expect(&r, KF_V_OK, NULL);
    cr_assert(strstr(r.checked_flags, "-mno-fma"), "plain C is checked without FMA: '%s'", r.checked_flags);
    kf_candidate_clear(&c);
    static char src[4096];
    snprintf(src, sizeof src,
             "#include <immintrin.h>\n%s",
             kernel("    float *s = malloc(N * sizeof *s);\n"
                    "    if (!s) return 1;\n"
                    "    for (long i = 0; i + 4 <= N; i += 4)\n"
                    "        _mm_storeu_ps(s + i, _mm_fmadd_ps(_mm_loadu_ps(x + i), _mm_set1_ps(2.0f),\n"
                    "                                          _mm_setzero_ps()));\n"
                    "    for (long i = N / 4 * 4; i < N; i++) s[i] = x[i] * 2.0f;\n"
                    "    ((volatile float *)s)[N] = 1.0f;\n"
                    "    for (long i = 0; i < N; i++) y[i] = s[i];\n"
                    "    free(s);\n"));
    cr_assert_eq(kf_candidate_init(&c, "cpu", src, NULL, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_verify_run(f.ctx, f.b, &c, &a, &r, &err), KF_OK, "%s (%s)", err.msg, r.detail);
    expect(&r, KF_V_MEMCHECK, "Invalid write");
    cr_assert_str_eq(r.checked_flags, kf_verify_memcheck_flags_plain(f.b));
    kf_candidate_clear(&c);
#endif
    fx_close(&f);
}

/* The loop's final check in auto mode: a kernel of milliseconds is estimated well under a
 * minute, checked, and the verdict says which build was checked. */
Test(memcheck, loop_auto_checks_the_final_kernel) {
    if (!have_valgrind()) cr_skip_test("valgrind is not installed");
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "%s", err.msg);
    char out[512];
    snprintf(out, sizeof out, "%s/test-work/memcheck-loop", KF_BUILD_DIR);
    kf_loop_opts o;
    kf_loop_opts_default(&o);
    o.iters = 1;
    o.seed = 5;
    o.threads = 2;
    o.out_dir = out;
    cr_assert_eq(o.memcheck, KF_MEMCHECK_AUTO, "auto is the default");
    kf_run_result r;
    cr_assert_eq(kf_loop_run(g, &o, &r, &err), KF_OK, "%s", err.msg);
    cr_assert_geq(r.best, 0, "nothing verified: %s", r.niters ? r.iters[0].res.detail : "");
    cr_assert_str_eq(r.memcheck, "ok", "%s", r.memcheck_detail);
    cr_assert(strstr(r.memcheck_detail, "clean (valgrind memcheck, input set 0"), "%s", r.memcheck_detail);
    kf_backend *b = NULL;
    cr_assert_eq(kf_backend_open("cpu", &b, &err), KF_OK, "%s", err.msg);
    const char *fl = kf_verify_memcheck_flags(b);
    if (fl[0]) cr_assert(strstr(r.memcheck_detail, fl), "names the build '%s': %s", fl, r.memcheck_detail);
    kf_backend_close(b);
    kf_run_result_free(&r);
    kf_graph_free(g);
}
