/*
 * The LLM generation agent in the real loop (kf_loop_run with --agent llm / both) against
 * a scripted chat server on loopback (tests/llm_server.py): every candidate the "model"
 * sends is compiled, run in the sandbox and verified on the CPU like any other. Each test
 * checks how the run ended (iteration statuses, best kernel, stop reason) and what reached
 * the server (the feedback in the next request), and that nothing already stored is lost.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/agent.h"
#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/core.h"
#include "kforge/ir.h"
#include "kforge/llm.h"
#include "kforge/verify.h"

#include "llm_server.h"

#define KEY "sk-loop-SECRET-42424242"

static const char task_text[] = "task triple\ninput x: f32[1000]\noutput y = x * 3.0\n";

static const char good_kernel[] =
    "#include <stdint.h>\n"
    "int kforge_kernel(void *const *args) {\n"
    "    const float *x = args[0];\n"
    "    float *y = args[1];\n"
    "    for (int i = 0; i < 1000; i++) y[i] = x[i] * 3.0f;\n"
    "    return 0;\n"
    "}\n";

static char outdir[256];

static void setup(void) {
    llm_srv_setup();
    snprintf(outdir, sizeof outdir, "%s/out", srv.dir);
}

static void teardown(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", outdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", outdir);
    llm_srv_teardown();
}

TestSuite(llm_loop, .init = setup, .fini = teardown, .timeout = 120);

/* ---- the script ---- */

/* An OpenAI chat-completion response whose message is content. */
static json_t *reply(const char *content, const char *finish) {
    return json_pack("{s:{s:[{s:{s:s,s:s},s:s}],s:{s:i,s:i}}}", "body", "choices", "message", "role",
                     "assistant", "content", content, "finish_reason", finish ? finish : "stop", "usage",
                     "prompt_tokens", 100, "completion_tokens", 50);
}

/* content with the kernel in a fenced block, prose around it */
static json_t *kernel_reply(const char *kernel) {
    char *c = NULL;
    cr_assert(asprintf(&c, "Here is the kernel.\n\n```c\n%s```\n", kernel) > 0);
    json_t *j = reply(c, "stop");
    free(c);
    return j;
}

static void play(json_t *responses) {
    json_t *s = json_pack("{s:s,s:o}", "key", KEY, "responses", responses);
    char *text = json_dumps(s, JSON_COMPACT);
    start_server(text);
    free(text);
    json_decref(s);
}

/* ---- the run ---- */

typedef struct run {
    kf_graph *g;
    kf_llm_config llm;
    kf_loop_opts o;
    kf_run_result r;
} run;

static void prepare(run *x, int agent, int iters) {
    memset(x, 0, sizeof *x);
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task_text, "<test>", &x->g, &err), KF_OK, "%s", err.msg);
    kf_llm_config_default(&x->llm);
    x->llm.protocol = KF_LLM_OPENAI;
    snprintf(x->llm.url, sizeof x->llm.url, "http://127.0.0.1:%d/v1", srv.port);
    snprintf(x->llm.model, sizeof x->llm.model, "scripted");
    snprintf(x->llm.key, sizeof x->llm.key, "%s", KEY);
    x->llm.max_retries = 1;
    x->llm.backoff_s = 0.05;
    x->llm.timeout_s = 20;
    kf_loop_opts_default(&x->o);
    x->o.target = "cpu";
    x->o.iters = iters;
    x->o.out_dir = outdir;
    x->o.threads = 1;
    x->o.seed = 5;
    x->o.memcheck = KF_MEMCHECK_OFF;
    x->o.agent = agent;
    x->o.llm = &x->llm;
    x->o.task_text = task_text;
}

static void go(run *x) {
    kf_error err = {0};
    cr_assert_eq(kf_loop_run(x->g, &x->o, &x->r, &err), KF_OK, "loop: %s", err.msg);
}

static void finish(run *x) {
    kf_run_result_free(&x->r);
    kf_graph_free(x->g);
}

#define STATUS(x, i, st)                                                                          \
    cr_assert_eq((x)->r.iters[i].res.status, (st), "iter %d: %s, want %s: %s", (i) + 1,           \
                 kf_vstatus_name((x)->r.iters[i].res.status), kf_vstatus_name(st),                 \
                 (x)->r.iters[i].res.detail)

/* The content of the last message of request n (0-based) the server got. */
static char *last_message(int n) {
    json_t *log = server_log();
    cr_assert_gt(json_array_size(log), (size_t)n, "only %zu requests", json_array_size(log));
    json_t *msgs = at(json_array_get(log, (size_t)n), "body.messages");
    cr_assert(json_is_array(msgs));
    char *s = kf_strdup(json_string_value(json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "content")));
    json_decref(log);
    return s;
}

/* ---- tests ---- */

Test(llm_loop, compile_error_fed_back_then_fixed) {
    /* the statement loses its ';' */
    char bad[sizeof good_kernel];
    snprintf(bad, sizeof bad, "%s", good_kernel);
    strstr(bad, "3.0f;")[4] = ' ';
    play(json_pack("[o,o]", kernel_reply(bad), kernel_reply(good_kernel)));
    run x;
    prepare(&x, KF_AGENT_LLM, 2);
    go(&x);
    cr_assert_eq(x.r.niters, 2);
    STATUS(&x, 0, KF_V_COMPILE_ERROR);
    STATUS(&x, 1, KF_V_OK);
    cr_assert_eq(x.r.best, 1);
    cr_assert_str_eq(x.r.iters[1].agent, "llm");
    /* the second request carries the compiler's complaint */
    char *fb = last_message(1);
    cr_assert(strstr(fb, "did not compile"), "%s", fb);
    cr_assert(strstr(fb, "expected"), "the compiler's message did not reach the model:\n%s", fb);
    free(fb);
    cr_assert_eq(x.r.llm_calls, 2);
    /* the record says what confined the model's kernels */
    cr_assert(strstr(x.r.sandbox, "seccomp") || strstr(x.r.sandbox, "NO network"), "sandbox: '%s'", x.r.sandbox);
    /* the transcript holds both calls, and the key appears nowhere in it */
    char path[400], *tr = NULL;
    snprintf(path, sizeof path, "%s/transcript.jsonl", outdir);
    kf_error err = {0};
    cr_assert_eq(kf_read_file(path, &tr, NULL, &err), KF_OK, "%s", err.msg);
    int lines = 0;
    for (const char *p = tr; (p = strchr(p, '\n')); p++) lines++;
    cr_assert_eq(lines, 2, "%s", tr);
    cr_assert_null(strstr(tr, KEY));
    cr_assert(strstr(tr, "did not compile"));
    free(tr);
    finish(&x);
}

Test(llm_loop, mismatch_summary_without_reference_values_then_fixed) {
    char wrong[sizeof good_kernel];
    snprintf(wrong, sizeof wrong, "%s", good_kernel);
    strstr(wrong, "3.0f")[0] = '2';
    play(json_pack("[o,o]", kernel_reply(wrong), kernel_reply(good_kernel)));
    run x;
    prepare(&x, KF_AGENT_LLM, 2);
    go(&x);
    STATUS(&x, 0, KF_V_MISMATCH);
    STATUS(&x, 1, KF_V_OK);
    char *fb = last_message(1);
    cr_assert(strstr(fb, "computed wrong values"), "%s", fb);
    cr_assert(strstr(fb, "output 'y'") && strstr(fb, "your kernel wrote"), "%s", fb);
    /* the harness's own detail names the expected value ("want ..."); the model never sees it */
    cr_assert(strstr(x.r.iters[0].res.detail, "want"), "%s", x.r.iters[0].res.detail);
    cr_assert_null(strstr(fb, "want"), "a reference value reached the model:\n%s", fb);
    free(fb);
    finish(&x);
}

Test(llm_loop, rate_limited_then_answered) {
    json_t *r429 = json_pack("{s:i,s:{s:s},s:{s:{s:s}}}", "status", 429, "headers", "Retry-After", "1", "body",
                             "error", "message", "slow down");
    play(json_pack("[o,o]", r429, kernel_reply(good_kernel)));
    run x;
    prepare(&x, KF_AGENT_LLM, 1);
    go(&x);
    STATUS(&x, 0, KF_V_OK);
    cr_assert_eq(log_count(), 2);
    finish(&x);
}

Test(llm_loop, server_errors_end_the_run_and_keep_what_was_stored) {
    /* a kernel from an earlier run is in the output folder */
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(outdir, &err), KF_OK, "%s", err.msg);
    char kpath[400];
    snprintf(kpath, sizeof kpath, "%s/kernel.c", outdir);
    cr_assert_eq(kf_write_file(kpath, good_kernel, strlen(good_kernel), &err), KF_OK, "%s", err.msg);
    json_t *r500 = json_pack("{s:i,s:s}", "status", 500, "body", "internal error");
    play(json_pack("[O,O,O,O,O,O,O,O]", r500, r500, r500, r500, r500, r500, r500, r500));
    json_decref(r500);
    run x;
    prepare(&x, KF_AGENT_LLM, 6);
    go(&x);
    cr_assert_eq(x.r.niters, 3, "three endpoint failures in a row end the run, got %d", x.r.niters);
    for (int i = 0; i < 3; i++) {
        STATUS(&x, i, KF_V_AGENT_ERROR);
        cr_assert(strstr(x.r.iters[i].res.detail, "500"), "%s", x.r.iters[i].res.detail);
    }
    cr_assert(strstr(x.r.stop_reason, "failed 3 times"), "%s", x.r.stop_reason);
    cr_assert_eq(x.r.best, -1);
    char *k = NULL;
    cr_assert_eq(kf_read_file(kpath, &k, NULL, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(k, good_kernel, "the stored kernel was overwritten");
    free(k);
    finish(&x);
}

Test(llm_loop, reply_without_code_then_code) {
    play(json_pack("[o,o]", reply("I would use a loop over the elements and multiply by three.", "stop"),
                   kernel_reply(good_kernel)));
    run x;
    prepare(&x, KF_AGENT_LLM, 2);
    go(&x);
    STATUS(&x, 0, KF_V_NO_CODE);
    STATUS(&x, 1, KF_V_OK);
    char *fb = last_message(1);
    cr_assert(strstr(fb, "code block"), "%s", fb);
    free(fb);
    finish(&x);
}

Test(llm_loop, cut_off_reply_is_no_code) {
    play(json_pack("[o]", reply("```c\n#include <stdint.h>\nint kforge_kernel(void *const *args) {\n    const float", "length")));
    run x;
    prepare(&x, KF_AGENT_LLM, 1);
    go(&x);
    STATUS(&x, 0, KF_V_NO_CODE);
    cr_assert(strstr(x.r.iters[0].res.detail, "cut off") || strstr(x.r.iters[0].res.detail, "token limit"), "%s",
              x.r.iters[0].res.detail);
    finish(&x);
}

Test(llm_loop, slow_reply_times_out_then_next_round_works) {
    json_t *slow = kernel_reply(good_kernel);
    json_object_set_new(slow, "delay_s", json_real(4.0));
    play(json_pack("[o,o]", slow, kernel_reply(good_kernel)));
    run x;
    prepare(&x, KF_AGENT_LLM, 2);
    x.llm.timeout_s = 0.5;
    x.llm.max_retries = 0;
    go(&x);
    STATUS(&x, 0, KF_V_AGENT_ERROR);
    cr_assert(strstr(x.r.iters[0].res.detail, "tim"), "%s", x.r.iters[0].res.detail);
    STATUS(&x, 1, KF_V_OK);
    finish(&x);
}

Test(llm_loop, reply_over_the_size_cap) {
    json_t *big = kernel_reply(good_kernel);
    json_object_set_new(big, "pad_bytes", json_integer(20000));
    play(json_pack("[o]", big));
    run x;
    prepare(&x, KF_AGENT_LLM, 1);
    x.llm.max_reply_bytes = 4096;
    go(&x);
    STATUS(&x, 0, KF_V_AGENT_ERROR);
    finish(&x);
}

Test(llm_loop, model_tunables_are_swept) {
    static const char tuned[] =
        "#include <stdint.h>\n"
        "// kforge:tunable U 1 2 4\n"
        "#ifndef U\n#define U 1\n#endif\n"
        "int kforge_kernel(void *const *args) {\n"
        "    const float *x = args[0];\n"
        "    float *y = args[1];\n"
        "    for (int i = 0; i < 1000; i += U)\n"
        "        for (int u = 0; u < U && i + u < 1000; u++) y[i + u] = x[i + u] * 3.0f;\n"
        "    return 0;\n"
        "}\n";
    play(json_pack("[o]", kernel_reply(tuned)));
    run x;
    prepare(&x, KF_AGENT_LLM, 3);
    go(&x);
    cr_assert_eq(x.r.niters, 3);
    for (int i = 0; i < 3; i++) STATUS(&x, i, KF_V_OK);
    cr_assert_str_eq(x.r.iters[0].label, "llm 1");
    cr_assert_str_eq(x.r.iters[1].label, "llm 1 U=2");
    cr_assert_str_eq(x.r.iters[2].label, "llm 1 U=4");
    cr_assert_eq(log_count(), 1, "the sweep asks the model nothing");
    finish(&x);
}

Test(llm_loop, call_budget_stops_the_run) {
    play(json_pack("[o,o]", kernel_reply(good_kernel), kernel_reply(good_kernel)));
    run x;
    prepare(&x, KF_AGENT_LLM, 4);
    x.llm.max_calls = 1;
    go(&x);
    cr_assert_eq(x.r.niters, 1);
    STATUS(&x, 0, KF_V_OK);
    cr_assert(x.r.stop_reason[0], "no stop reason");
    cr_assert_eq(log_count(), 1);
    finish(&x);
}

Test(llm_loop, both_starts_the_model_from_the_builtin_best) {
    play(json_pack("[o]", kernel_reply(good_kernel)));
    run x;
    prepare(&x, KF_AGENT_BOTH, 2);
    x.o.builtin_iters = 1;
    go(&x);
    cr_assert_eq(x.r.niters, 2);
    cr_assert_str_eq(x.r.iters[0].agent, "builtin");
    cr_assert_str_eq(x.r.iters[1].agent, "llm");
    STATUS(&x, 0, KF_V_OK);
    STATUS(&x, 1, KF_V_OK);
    char *first = last_message(0);
    cr_assert(strstr(first, "kforge's builtin generator"), "%s", first);
    /* the builtin's best kernel itself is in it (its schedule line is unique to it) */
    cr_assert_not_null(x.r.iters[0].source);
    char line[200];
    const char *l2 = strchr(x.r.iters[0].source, '\n');
    cr_assert_not_null(l2);
    snprintf(line, sizeof line, "%.*s", (int)strcspn(l2 + 1, "\n"), l2 + 1);
    cr_assert(line[0] && strstr(first, line), "the builtin kernel's line '%s' is not in:\n%s", line, first);
    cr_assert(strstr(first, "output y = x * 3.0"), "the task text is missing:\n%s", first);
    /* the task's operators as the registry describes them */
    char gloss[160];
    snprintf(gloss, sizeof gloss, "- mul(x, y): %s", kf_op_get(KF_OP_MUL)->doc);
    cr_assert(strstr(first, gloss), "the operators' glossary ('%s') is missing:\n%s", gloss, first);
    free(first);
    finish(&x);
}

Test(llm_loop, anthropic_protocol_end_to_end) {
    char *c = NULL;
    cr_assert(asprintf(&c, "```c\n%s```", good_kernel) > 0);
    json_t *r = json_pack("{s:{s:[{s:s,s:s}],s:s,s:{s:i,s:i}},s:{s:{s:b}}}", "body", "content", "type", "text", "text",
                          c, "stop_reason", "end_turn", "usage", "input_tokens", 10, "output_tokens", 20, "expect",
                          "headers", "x-api-key", 1);
    free(c);
    play(json_pack("[o]", r));
    run x;
    prepare(&x, KF_AGENT_LLM, 1);
    x.llm.protocol = KF_LLM_ANTHROPIC;
    go(&x);
    STATUS(&x, 0, KF_V_OK);
    cr_assert_eq(x.r.llm_prompt_tokens, 10);
    cr_assert_eq(x.r.llm_completion_tokens, 20);
    finish(&x);
}

/* The one-shot examples the prompts show (prompts/examples/) are correct kernels: verified
 * on the CPU and on OpenCL (PoCL) by the harness; the CUDA one compiled with nvcc. */
static void verify_example(const char *target, const char *file) {
    kf_error err = {0};
    char *task = NULL, *src = NULL;
    char path[600];
    snprintf(path, sizeof path, "%s/prompts/examples/example.kf", KF_SOURCE_DIR);
    cr_assert_eq(kf_read_file(path, &task, NULL, &err), KF_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/prompts/examples/%s", KF_SOURCE_DIR, file);
    cr_assert_eq(kf_read_file(path, &src, NULL, &err), KF_OK, "%s", err.msg);
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(task, "example.kf", &g, &err), KF_OK, "%s", err.msg);
    kf_backend *b = NULL;
    if (kf_backend_open(target, &b, &err) != KF_OK) {
        cr_skip_test("no %s device: %s", target, err.msg);
        return;
    }
    kf_verify_opts vo;
    kf_verify_opts_default(&vo);
    vo.workdir = srv.dir;
    vo.seed = 11;
    kf_verify_ctx *ctx = NULL;
    cr_assert_eq(kf_verify_ctx_new(g, &vo, &ctx, &err), KF_OK, "%s", err.msg);
    kf_candidate c;
    cr_assert_eq(kf_candidate_init(&c, b->info.platform, src, NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    cr_assert_eq(kf_verify_candidate(ctx, b, &c, &r, &err), KF_OK, "%s", err.msg);
    cr_expect_eq(r.status, KF_V_OK, "%s on %s: %s: %s", file, target, kf_vstatus_name(r.status), r.detail);
    kf_candidate_clear(&c);
    kf_verify_ctx_free(ctx);
    kf_backend_close(b);
    kf_graph_free(g);
    free(task);
    free(src);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/*", srv.dir);
    if (system(cmd) != 0) fprintf(stderr, "could not clean %s\n", srv.dir);
}

Test(llm_loop, prompt_example_cpu_verifies) { verify_example("cpu", "cpu.c"); }

Test(llm_loop, prompt_example_opencl_verifies) { verify_example("opencl", "opencl.cl"); }

Test(llm_loop, prompt_example_cuda_compiles) {
    if (system("command -v nvcc >/dev/null 2>&1") != 0) {
        cr_skip_test("nvcc is not on PATH");
        return;
    }
    char cmd[800];
    snprintf(cmd, sizeof cmd, "nvcc -arch=sm_90 -c -x cu -o '%s/ex.o' '%s/prompts/examples/cuda.cu' > '%s/nvcc.log' 2>&1",
             srv.dir, KF_SOURCE_DIR, srv.dir);
    cr_assert_eq(system(cmd), 0, "nvcc failed on prompts/examples/cuda.cu");
    snprintf(cmd, sizeof cmd, "rm -f '%s/ex.o' '%s/nvcc.log'", srv.dir, srv.dir);
    if (system(cmd) != 0) fprintf(stderr, "could not clean %s\n", srv.dir);
}

/* A model's kernel that tries to phone home and to write outside its folder runs confined:
 * the listener hears nothing, the file never appears, and (since the kernel returns
 * non-zero only when an escape worked) the candidate verifies. */
Test(llm_loop, escaping_kernel_is_confined) {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(ls, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(ls, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(ls, 4), 0);
    socklen_t al = sizeof a;
    cr_assert_eq(getsockname(ls, (struct sockaddr *)&a, &al), 0);
    char escaped[300];
    snprintf(escaped, sizeof escaped, "%s/escaped.txt", srv.dir);
    char *kernel = NULL;
    cr_assert(asprintf(&kernel,
                       "#include <arpa/inet.h>\n#include <fcntl.h>\n#include <netinet/in.h>\n"
                       "#include <stdint.h>\n#include <sys/socket.h>\n#include <unistd.h>\n"
                       "int kforge_kernel(void *const *args) {\n"
                       "    int escaped = 0;\n"
                       "    int s = socket(AF_INET, SOCK_STREAM, 0);\n"
                       "    if (s >= 0) {\n"
                       "        struct sockaddr_in a = {0};\n"
                       "        a.sin_family = AF_INET; a.sin_port = htons(%d);\n"
                       "        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);\n"
                       "        if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) escaped = 1;\n"
                       "        close(s);\n"
                       "    }\n"
                       "    int f = open(\"%s\", O_WRONLY | O_CREAT, 0644);\n"
                       "    if (f >= 0) { escaped = 1; close(f); }\n"
                       "    const float *x = args[0];\n"
                       "    float *y = args[1];\n"
                       "    for (int i = 0; i < 1000; i++) y[i] = x[i] * 3.0f;\n"
                       "    return escaped;\n"
                       "}\n",
                       ntohs(a.sin_port), escaped) > 0);
    play(json_pack("[o]", kernel_reply(kernel)));
    free(kernel);
    run x;
    prepare(&x, KF_AGENT_LLM, 1);
    go(&x);
    if (!(x.r.sandbox_flags & KF_SANDBOX_WRITES) || !(x.r.sandbox_flags & KF_SANDBOX_NET)) {
        close(ls);
        finish(&x);
        cr_skip_test("confinement is not complete on this machine: %s", x.r.sandbox);
        return;
    }
    STATUS(&x, 0, KF_V_OK);
    cr_assert_neq(access(escaped, F_OK), 0, "the kernel wrote %s", escaped);
    int fl = fcntl(ls, F_GETFL);
    fcntl(ls, F_SETFL, fl | O_NONBLOCK);
    int c = accept(ls, NULL, NULL);
    cr_assert_lt(c, 0, "the kernel connected to the listener");
    close(ls);
    finish(&x);
}

/* The analysis reaches the model as the issue asks: the diagnosis as text (--analysis
 * builtin), the raw profile instead (--analysis llm), nothing with --analysis off. */
static char *second_feedback(int analysis) {
    play(json_pack("[o,o]", kernel_reply(good_kernel), kernel_reply(good_kernel)));
    run x;
    prepare(&x, KF_AGENT_LLM, 2);
    x.o.analysis = analysis;
    go(&x);
    STATUS(&x, 0, KF_V_OK);
    cr_assert_eq(x.r.iters[0].has_diag, analysis != KF_ANALYSIS_OFF);
    /* the server's log spans the whole test: this run's second request is the last one */
    char *fb = last_message(log_count() - 1);
    finish(&x);
    return fb;
}

Test(llm_loop, analysis_reaches_the_model_as_diagnosis_or_raw_profile) {
    char *fb = second_feedback(KF_ANALYSIS_BUILTIN);
    cr_assert(strstr(fb, "Performance analysis: "), "%s", fb);
    cr_assert(strstr(fb, "-bound at "), "%s", fb);
    /* the evidence follows, one line each (this 1000-element task is launch-bound: the
     * measured launch overhead is the evidence) */
    cr_assert(strstr(strstr(fb, "Performance analysis: "), ".\n- "), "the evidence is missing:\n%s", fb);
    cr_assert_null(strstr(fb, "Raw profile"));
    free(fb);
    fb = second_feedback(KF_ANALYSIS_LLM);
    cr_assert(strstr(fb, "Raw profile of that kernel"), "%s", fb);
    cr_assert(strstr(fb, "task minimum bytes 8000"), "%s", fb);
    cr_assert_null(strstr(fb, "Performance analysis: "));
    free(fb);
    fb = second_feedback(KF_ANALYSIS_OFF);
    cr_assert_null(strstr(fb, "Performance analysis: "), "%s", fb);
    cr_assert_null(strstr(fb, "Raw profile"), "%s", fb);
    cr_assert(strstr(fb, "Your kernel verified"), "%s", fb);
    free(fb);
}
