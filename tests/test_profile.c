/*
 * The profiled run (kf_verify_profile, src/verify/profile.c) and its tool lookup
 * (kf_verify_profiler_tool). CI has no GPU and no ncu, so these run a stand-in: a shell
 * script written into the test's work directory that takes ncu's options (recording its
 * argv), does what the case needs with the --log-file path (a recorded table from
 * tests/data/ncu/, nothing, or ncu's messages only) and then runs the rest of its argv,
 * the runner, as ncu runs its application, exiting with its status or with its own. The
 * candidates are CPU ones: the run itself works on any backend.
 *
 * Task: y = x * 2 over f32[1003], as in test_memcheck.c.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/perf.h"
#include "kforge/verify.h"

static const char *task = "task scale_odd\n"
                          "input x: f32[1003]\n"
                          "output y = x * 2\n";

#define RECORDED KF_SOURCE_DIR "/tests/data/ncu/swish.csv"
#define PERM_LINE "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access " \
                  "NVIDIA GPU Performance Counters on the target device 0."

typedef struct fixture {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *ctx;
    kf_verify_opts o;
    char wd[512];
    char tool[1024];
} fixture;

/* Criterion runs every test in a process of its own: the environment is the test's, and
 * so is the work directory, named after it. */
static void fx_open(fixture *f, const char *name, double wall_s) {
    memset(f, 0, sizeof *f);
    kf_error err = {0};
    kf_status st = kf_parse_string(task, "<test>", &f->g, &err);
    cr_assert_eq(st, KF_OK, "parse: %s", err.msg);
    st = kf_backend_open("cpu", &f->b, &err);
    cr_assert_eq(st, KF_OK, "backend: %s", err.msg);
    snprintf(f->wd, sizeof f->wd, "%s/test-work/profile-%s", KF_BUILD_DIR, name);
    cr_assert_eq(kf_mkdirs(f->wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts_default(&f->o);
    f->o.workdir = f->wd;
    f->o.seed = 777;
    f->o.nsets = 1;
    f->o.threads = 1;
    f->o.wall_limit_s = wall_s;
    f->o.cpu_limit_s = 30;
    f->o.mem_limit = 512ll << 20;
    st = kf_verify_ctx_new(f->g, &f->o, &f->ctx, &err);
    cr_assert_eq(st, KF_OK, "ctx: %s", err.msg);
}

static void fx_close(fixture *f) {
    kf_verify_ctx_free(f->ctx);
    kf_backend_close(f->b);
    kf_graph_free(f->g);
}

static void write_exe(const char *path, const char *text, int mode) {
    FILE *fp = fopen(path, "w");
    cr_assert_not_null(fp, "cannot write %s", path);
    fputs(text, fp);
    fclose(fp);
    cr_assert_eq(chmod(path, (mode_t)mode), 0);
}

/* The stand-in ncu at WD/ncu with `action` run once the options are consumed (LOG is the
 * --log-file path, "$@" the runner's argv); its argv goes to WD/argv. Found through
 * KFORGE_NCU, as a user would point kforge at it. */
static void fake_ncu(fixture *f, const char *action) {
    char path[700], text[4096];
    snprintf(path, sizeof path, "%s/ncu", f->wd);
    snprintf(text, sizeof text,
             "#!/bin/sh\n"
             "printf '%%s\\n' \"$@\" > '%s/argv'\n"
             "LOG=\n"
             "while [ $# -gt 0 ]; do\n"
             "  case \"$1\" in\n"
             "    --log-file) LOG=$2; shift 2 ;;\n"
             "    --section) if [ \"$2\" = SchedulerStats ]; then shift 2; break; fi; shift 2 ;;\n"
             "    *) shift ;;\n"
             "  esac\n"
             "done\n"
             "%s\n",
             f->wd, action);
    write_exe(path, text, 0755);
    cr_assert_eq(setenv("KFORGE_NCU", path, 1), 0);
    kf_error err = {0};
    kf_status st = kf_verify_profiler_tool("cuda", f->tool, sizeof f->tool, &err);
    cr_assert_eq(st, KF_OK, "lookup: %s", err.msg);
    cr_assert_str_eq(f->tool, path);
}

/* ncu's part when all goes well: the table into the log, then the application. */
static const char *table_then_run = "cat '" RECORDED "' > \"$LOG\"\n\"$@\"\nexit $?";

static char srcbuf[4096];

static const char *kernel(const char *body) {
    snprintf(srcbuf, sizeof srcbuf,
             "#include <stdio.h>\n"
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

static const char *clean_body = "    for (long i = 0; i < N; i++) y[i] = x[i] * 2.0f;\n";

/* Compile src and profile it; *csv gets the table, detail the reason. */
static kf_status profile_src(fixture *f, const char *src, kf_buf *csv, char *detail, size_t cap,
                             kf_error *err) {
    kf_candidate c;
    char art[1024];
    kf_error e = {0};
    cr_assert_eq(kf_candidate_init(&c, "cpu", src, NULL, &e), KF_OK, "%s", e.msg);
    kf_buf log = {0};
    kf_status st = kf_backend_compile(f->b, c.source, c.flags, f->wd, art, sizeof art, &log, &e);
    cr_assert_eq(st, KF_OK, "compile: %s\n%s", e.msg, log.data ? log.data : "");
    kf_buf_free(&log);
    st = kf_verify_profile(f->ctx, f->b, &c, art, f->tool, csv, detail, cap, err);
    kf_candidate_clear(&c);
    if (getenv("KF_TEST_VERBOSE"))
        fprintf(stderr, "[%s] %s\n", kf_status_name(st), detail);
    return st;
}

/* The argv the stand-in got, one word per line. */
static char *read_argv(fixture *f, size_t *len) {
    char path[700];
    snprintf(path, sizeof path, "%s/argv", f->wd);
    char *text = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_read_file(path, &text, len, &err), KF_OK, "%s", err.msg);
    return text;
}

Test(profile, tool_lookup) {
    fixture f;
    fx_open(&f, "tool_lookup", 15);
    char got[1024], path[700], dir[700];
    kf_error err = {0};
    /* KFORGE_NCU alone, whatever PATH holds */
    fake_ncu(&f, "exit 0");
    snprintf(path, sizeof path, "%s/ncu", f.wd);
    cr_assert_eq(kf_verify_profiler_tool("cuda", got, sizeof got, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(got, path);
    /* not executable: named in the reason, nothing else tried */
    snprintf(path, sizeof path, "%s/not-exe", f.wd);
    write_exe(path, "#!/bin/sh\nexit 0\n", 0644);
    setenv("KFORGE_NCU", path, 1);
    cr_assert_eq(kf_verify_profiler_tool("cuda", got, sizeof got, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "KFORGE_NCU"), "%s", err.msg);
    cr_assert(strstr(err.msg, path), "%s", err.msg);
    cr_assert_str_eq(got, "");
    /* unset: PATH, then $CUDA_HOME/bin */
    unsetenv("KFORGE_NCU");
    snprintf(dir, sizeof dir, "%s/bin", f.wd);
    cr_assert_eq(kf_mkdirs(dir, &err), KF_OK);
    snprintf(path, sizeof path, "%s/ncu", dir);
    write_exe(path, "#!/bin/sh\nexit 0\n", 0755);
    setenv("PATH", dir, 1);
    cr_assert_eq(kf_verify_profiler_tool("cuda", got, sizeof got, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(got, path);
    setenv("PATH", "/nonexistent-kforge-test", 1);
    setenv("CUDA_HOME", f.wd, 1);
    cr_assert_eq(kf_verify_profiler_tool("cuda", got, sizeof got, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(got, path);
    /* nowhere: the reason says where it looked (unless this machine has the toolkit) */
    setenv("CUDA_HOME", "/nonexistent-kforge-cuda", 1);
    kf_status st = kf_verify_profiler_tool("cuda", got, sizeof got, &err);
    if (access("/usr/local/cuda/bin/ncu", X_OK) != 0) {
        cr_assert_eq(st, KF_ERR_UNSUPPORTED);
        cr_assert(strstr(err.msg, "PATH"), "%s", err.msg);
        cr_assert(strstr(err.msg, "/nonexistent-kforge-cuda/bin"), "%s", err.msg);
        cr_assert(strstr(err.msg, "/usr/local/cuda/bin"), "%s", err.msg);
        cr_assert(strstr(err.msg, "KFORGE_NCU"), "%s", err.msg);
    }
    /* other platforms have no profiler run, whatever is installed */
    fake_ncu(&f, "exit 0");
    cr_assert_eq(kf_verify_profiler_tool("cpu", got, sizeof got, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "no profiler run for platform 'cpu'"), "%s", err.msg);
    cr_assert_str_eq(got, "");
    cr_assert_eq(kf_verify_profiler_tool("opencl", got, sizeof got, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "'opencl'"), "%s", err.msg);
    cr_assert_eq(kf_verify_profiler_tool(NULL, got, sizeof got, &err), KF_ERR_UNSUPPORTED);
    cr_assert_eq(kf_verify_profiler_tool("cuda", NULL, 0, &err), KF_ERR_ARG);
    cr_assert(strstr(kf_verify_profile_confinement(), "Landlock"));
    fx_close(&f);
}

Test(profile, clean_run_gives_the_table) {
    fixture f;
    fx_open(&f, "clean_run_gives_the_table", 15);
    fake_ncu(&f, table_then_run);
    kf_buf csv = {0};
    char detail[2048];
    kf_error err = {0};
    kf_status st = profile_src(&f, kernel(clean_body), &csv, detail, sizeof detail, &err);
    cr_assert_eq(st, KF_OK, "%s: %s", kf_status_name(st), detail);
    cr_assert_str_eq(detail, "");
    /* the log file's bytes, as ncu wrote them */
    char *want = NULL;
    size_t wlen = 0;
    cr_assert_eq(kf_read_file(RECORDED, &want, &wlen, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(csv.len, wlen);
    cr_assert(memcmp(csv.data, want, wlen) == 0);
    kf_counters *rows = NULL;
    int n = 0;
    cr_assert_eq(kf_perf_ncu_parse(csv.data, csv.len, &rows, &n, &err), KF_OK, "%s", err.msg);
    cr_assert_gt(n, 0);
    free(rows);
    free(want);
    kf_buf_free(&csv);

    /* ncu got the documented options, then the runner and its descriptor */
    static const char *const opts[] = {
        "--csv", "--page", "raw", "--log-file", NULL /* the log */, "--target-processes",
        "application-only", "--clock-control", "none", "--launch-count", "16",
        "--section", "SpeedOfLight", "--section", "Occupancy", "--section", "LaunchStats",
        "--section", "MemoryWorkloadAnalysis", "--section", "WarpStateStats",
        "--section", "SchedulerStats"};
    size_t alen = 0;
    char *argv = read_argv(&f, &alen);
    char *save = NULL, *w = strtok_r(argv, "\n", &save);
    char logpath[1024] = "";
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++, w = strtok_r(NULL, "\n", &save)) {
        cr_assert_not_null(w, "argv ends before option %zu", i);
        if (opts[i]) {
            cr_assert_str_eq(w, opts[i], "option %zu", i);
            continue;
        }
        snprintf(logpath, sizeof logpath, "%s", w);
    }
    cr_assert_not_null(w);
    cr_assert(strstr(w, "kforge-runner"), "runner: %s", w);
    cr_assert_eq(w[0], '/', "runner: %s", w);
    w = strtok_r(NULL, "\n", &save);
    cr_assert_not_null(w);
    cr_assert_str_eq(w, "3");
    cr_assert_null(strtok_r(NULL, "\n", &save));
    free(argv);
    /* the log: absolute, in the workdir, gone after the run */
    cr_assert_eq(logpath[0], '/', "%s", logpath);
    cr_assert(strstr(logpath, "/kf-ncu-"), "%s", logpath);
    cr_assert(access(logpath, F_OK) != 0, "%s was left behind", logpath);
    fx_close(&f);
}

/* The stand-in runs the runner: a kernel that faults comes back as a failed run. */
Test(profile, crashing_candidate_is_a_failed_run) {
    fixture f;
    fx_open(&f, "crashing_candidate_is_a_failed_run", 15);
    fake_ncu(&f, table_then_run);
    kf_buf csv = {0};
    char detail[2048];
    kf_error err = {0};
    kf_status st = profile_src(&f, kernel("    *(volatile int *)0 = 1;\n" "    (void)x; (void)y;\n"),
                               &csv, detail, sizeof detail, &err);
    cr_assert_eq(st, KF_ERR_RUNTIME, "%s: %s", kf_status_name(st), detail);
    cr_assert(strstr(detail, "crash"), "%s", detail);
    cr_assert(strstr(detail, "in the kernel"), "%s", detail);
    cr_assert(strstr(err.msg, "crash"), "%s", err.msg);
    cr_assert_eq(csv.len, 0);
    fx_close(&f);
}

/* ERR_NVGPUCTRPERM: ncu runs the application but collects nothing. */
Test(profile, no_permission_is_no_counters) {
    fixture f;
    fx_open(&f, "no_permission_is_no_counters", 15);
    fake_ncu(&f, "echo '" PERM_LINE "'\n\"$@\"\nexit $?");
    kf_buf csv = {0};
    char detail[2048];
    kf_error err = {0};
    kf_status st = profile_src(&f, kernel(clean_body), &csv, detail, sizeof detail, &err);
    cr_assert_eq(st, KF_ERR_UNSUPPORTED, "%s: %s", kf_status_name(st), detail);
    cr_assert(strstr(detail, "ncu wrote no counters"), "%s", detail);
    cr_assert(strstr(detail, "ERR_NVGPUCTRPERM"), "%s", detail);
    cr_assert_eq(csv.len, 0);
    fx_close(&f);
}

/* The same with the message in the log (where --log-file sends it) and ncu exiting 1
 * after a complete run: not the candidate's failure. */
Test(profile, ncu_failing_after_the_run_is_no_counters) {
    fixture f;
    fx_open(&f, "ncu_failing_after_the_run_is_no_counters", 15);
    fake_ncu(&f, "printf '==PROF== Connected to process 1\\n" PERM_LINE "\\n' > \"$LOG\"\n"
                 "\"$@\" || exit $?\nexit 1");
    kf_buf csv = {0};
    char detail[2048];
    kf_error err = {0};
    kf_status st = profile_src(&f, kernel(clean_body), &csv, detail, sizeof detail, &err);
    cr_assert_eq(st, KF_ERR_UNSUPPORTED, "%s: %s", kf_status_name(st), detail);
    cr_assert(strstr(detail, "ncu exited with status 1 after the candidate's run completed"), "%s",
              detail);
    cr_assert(strstr(detail, "ERR_NVGPUCTRPERM"), "%s", detail);
    cr_assert_eq(csv.len, 0);
    fx_close(&f);
}

/* A candidate that prints a table itself: its stdout is not ncu's log. */
Test(profile, candidate_output_is_not_a_table) {
    fixture f;
    fx_open(&f, "candidate_output_is_not_a_table", 15);
    fake_ncu(&f, "\"$@\"\nexit $?");
    kf_buf csv = {0};
    char detail[2048];
    kf_error err = {0};
    kf_status st = profile_src(&f, kernel("    printf(\"\\\"ID\\\",\\\"Kernel Name\\\",\\\"gpu__time_duration.sum\\\"\\n"
                                          "\\\"\\\",\\\"\\\",\\\"nsecond\\\"\\n"
                                          "\\\"0\\\",\\\"k\\\",\\\"1\\\"\\n\");\n"
                                          "    fflush(stdout);\n" "    for (long i = 0; i < N; i++) y[i] = x[i] * 2.0f;\n"),
                               &csv, detail, sizeof detail, &err);
    cr_assert_eq(st, KF_ERR_UNSUPPORTED, "%s: %s", kf_status_name(st), detail);
    cr_assert(strstr(detail, "ncu wrote no counters (no log file)"), "%s", detail);
    cr_assert_eq(csv.len, 0);
    fx_close(&f);
}

/* A hang on the CPU is bounded by the context's wall limit (the 180 s floor is a
 * device's). */
Test(profile, hanging_candidate_hits_the_wall_limit, .timeout = 60) {
    fixture f;
    fx_open(&f, "hanging_candidate_hits_the_wall_limit", 2);
    fake_ncu(&f, table_then_run);
    kf_buf csv = {0};
    char detail[2048];
    kf_error err = {0};
    kf_status st = profile_src(&f, kernel("    for (volatile int spin = 1; spin;) {}\n"
                                          "    (void)x; (void)y;\n"),
                               &csv, detail, sizeof detail, &err);
    cr_assert_eq(st, KF_ERR_RUNTIME, "%s: %s", kf_status_name(st), detail);
    cr_assert(strstr(detail, "timeout"), "%s", detail);
    cr_assert(strstr(detail, "wall-clock limit of 2 s"), "%s", detail);
    cr_assert_eq(csv.len, 0);
    fx_close(&f);
}

Test(profile, missing_arguments) {
    fixture f;
    fx_open(&f, "missing_arguments", 15);
    kf_buf csv = {0};
    char detail[256];
    kf_error err = {0};
    kf_candidate c;
    cr_assert_eq(kf_candidate_init(&c, "cpu", kernel(clean_body), NULL, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_verify_profile(f.ctx, f.b, &c, "/x.so", NULL, &csv, detail, sizeof detail, &err),
                 KF_ERR_ARG);
    cr_assert_eq(kf_verify_profile(f.ctx, f.b, &c, "/x.so", "ncu", &csv, detail, sizeof detail, &err),
                 KF_ERR_ARG);
    cr_assert(strstr(detail, "absolute"), "%s", detail);
    kf_candidate_clear(&c);
    fx_close(&f);
}

/* The verifier's mode entry (kf_verify_run, KF_VERIFY_PROFILE) builds the candidate itself
 * and returns the profiler's table, or its failed run, as kf_verify_profile does. */
Test(profile, verify_run_profile_mode) {
    fixture f;
    fx_open(&f, "verify_run_profile_mode", 15);
    fake_ncu(&f, table_then_run);
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "cpu", kernel(clean_body), NULL, &err), KF_OK, "%s", err.msg);
    kf_buf csv = {0};
    char detail[2048];
    kf_verify_run_args a = {.mode = KF_VERIFY_PROFILE, .tool = f.tool, .csv = &csv, .detail = detail,
                            .dcap = sizeof detail};
    kf_vresult r;
    cr_assert_eq(kf_verify_run(f.ctx, f.b, &c, &a, &r, &err), KF_OK, "%s: %s", err.msg, detail);
    cr_assert_eq(r.status, KF_V_OK);
    cr_assert_str_eq(detail, "");
    kf_counters *rows = NULL;
    int n = 0;
    cr_assert_eq(kf_perf_ncu_parse(csv.data, csv.len, &rows, &n, &err), KF_OK, "%s", err.msg);
    cr_assert_gt(n, 0);
    free(rows);
    kf_buf_free(&csv);
    kf_candidate_clear(&c);
    /* a crashing candidate: the run failed, no table */
    cr_assert_eq(kf_candidate_init(&c, "cpu", kernel("    *(volatile int *)0 = 1;\n" "    (void)x; (void)y;\n"),
                                   NULL, &err), KF_OK);
    cr_assert_eq(kf_verify_run(f.ctx, f.b, &c, &a, &r, &err), KF_ERR_RUNTIME, "%s", detail);
    cr_assert(strstr(detail, "crash"), "%s", detail);
    cr_assert_eq(csv.len, 0);
    kf_buf_free(&csv);
    kf_candidate_clear(&c);
    fx_close(&f);
}
