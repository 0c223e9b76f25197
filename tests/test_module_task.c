/*
 * Module tasks (issue 26): a PyTorch module with an op kforge cannot lower becomes a task
 * whose reference is the module itself, run in float64 by a separate process
 * (src/verify/refproc.c, python/kforge_torch/reference.py). The fixture is
 * tests/modules/conv_gn_shrink.py (conv2d, group norm, softshrink: softshrink has no op record), made a
 * module task by kforge_torch.module_task in each test's own folder.
 *
 * Checked here: the format's statements and their errors; the verifier on a module task
 * (a correct kernel passes every set; a wrong one, one correct on the first distribution
 * only, one that writes a param, one that hard-codes the weights, one that calls a BLAS are
 * rejected); the reference process crashing, hanging or
 * writing the wrong sizes is an error naming the task; the builtin refuses the task with
 * "use --agent llm"; the llm agent, against the scripted local endpoint, gets the module's
 * source in its prompt and its kernels are judged against the module.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kforge/agent.h"
#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/core.h"
#include "kforge/ir.h"
#include "kforge/llm.h"
#include "kforge/verify.h"

#include "llm_server.h"

static char taskdir[256], taskpath[300], outdir[256];

static void setup(void) {
    llm_srv_setup();
    snprintf(outdir, sizeof outdir, "%s/out", srv.dir);
    snprintf(taskdir, sizeof taskdir, "%s/task", srv.dir);
    snprintf(taskpath, sizeof taskpath, "%s/task.kf", taskdir);
    unsetenv("KFORGE_REF_TIMEOUT");
    unsetenv("KFORGE_PYTHON");
}

static void teardown(void) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s/work'", outdir, taskdir, srv.dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", taskdir);
    llm_srv_teardown();
}

TestSuite(module_task, .init = setup, .fini = teardown, .timeout = 240);

/* The module task of tests/modules/NAME.py in taskdir. */
static void make_task_of(const char *name) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "PYTHONPATH=%s/python python3 -m kforge_torch.module_task %s/tests/modules/%s.py %s "
             "--name %s > %s/import.log 2>&1",
             KF_SOURCE_DIR, KF_SOURCE_DIR, name, taskdir, name, srv.dir);
    int rc = system(cmd);
    char *log = NULL;
    char lp[300];
    snprintf(lp, sizeof lp, "%s/import.log", srv.dir);
    kf_read_file(lp, &log, NULL, NULL);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "module_task failed: %s", log ? log : "");
    free(log);
    unlink(lp);
}

static void make_task(void) { make_task_of("conv_gn_shrink"); }

static kf_graph *parse_task(void) {
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_parse_file(taskpath, &g, &err), KF_OK, "parse: %s", err.msg);
    return g;
}

/* Appends text to the task's copy of the module (a forward that crashes or hangs). */
static void patch_module(const char *text) {
    char p[300];
    snprintf(p, sizeof p, "%s/conv_gn_shrink.py", taskdir);
    FILE *f = fopen(p, "a");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static char *kernel_text(void) {
    char *src = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_read_file(KF_SOURCE_DIR "/tests/modules/conv_gn_shrink_kernel.c", &src, NULL, &err), KF_OK, "%s",
                 err.msg);
    return src;
}

/* src with the first `from` replaced by `to` (caller frees). */
static char *replaced(const char *src, const char *from, const char *to) {
    const char *p = strstr(src, from);
    cr_assert_not_null(p, "'%s' not in the kernel", from);
    char *out = NULL;
    cr_assert(asprintf(&out, "%.*s%s%s", (int)(p - src), src, to, p + strlen(from)) > 0);
    return out;
}

/* Wrong on every set: group norm without the softshrink. */
static char *wrong_kernel(void) {
    char *k = kernel_text(), *w = replaced(k, "p[e] = (float)(v > 0.5 ? v - 0.5 : v < -0.5 ? v + 0.5 : 0.0);", "p[e] = (float)v;");
    free(k);
    return w;
}

/* Right where |x| <= 1 (the first set, uniform on [-1, 1]) and wrong elsewhere. */
static char *first_set_kernel(void) {
    char *k = kernel_text(), *w = replaced(k, "s += (double)x[", "s += (double)fminf(1.0f, x[");
    char *w2 = replaced(w, "] * w[((co", "]) * w[((co");
    free(k), free(w);
    return w2;
}

/* Correct, but with the module's weights (the task's weights file) compiled in, the
 * param arguments unread: right on set 0 (the module's own weights) only. */
static char *hard_coded_kernel(void) {
    char wp[300], *wb = NULL;
    size_t wn = 0;
    kf_error err = {0};
    snprintf(wp, sizeof wp, "%s/conv_gn_shrink.weights", taskdir);
    cr_assert_eq(kf_read_file(wp, &wb, &wn, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(wn, 240 * sizeof(float));
    kf_buf t = {0};
    kf_buf_printf(&t, "    static const float P[240] = {");
    for (int i = 0; i < 240; i++) {
        float v;
        memcpy(&v, wb + 4 * i, 4);
        kf_buf_printf(&t, "%s%a", i ? ", " : "", (double)v);
    }
    kf_buf_printf(&t, "};\n    const float *x = args[0], *w = P, *b = P + 216, *gw = P + 224, *gb = P + 232;");
    char *k = kernel_text(),
         *out = replaced(k, "    const float *x = args[0], *w = args[1], *b = args[2], *gw = args[3], *gb = args[4];",
                         t.data);
    free(k), free(wb);
    kf_buf_free(&t);
    return out;
}

/* Correct while the group norm's affine is its init (weight 1, bias 0): the affine left out. */
static char *identity_affine_kernel(void) {
    char *k = kernel_text(), *out = replaced(k, "* rs * gw[c] + gb[c];", "* rs + 0 * c;");
    free(k);
    return out;
}

/* ---- the format ---- */

Test(module_task, statements_parse_into_inputs_params_and_declared_outputs) {
    const char *text = "task m\nmodule m\ninput x: f32[2, 3] range(0, 1)\ninput k: i64[2] range(0, 4)\n"
                       "param p_w: f32[3, 4]\nparam p_b: f32[4]\noutput out: f32[2, 4]\n"
                       "cost flops=48 bytes=136\n";
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(text, "/some/dir/m.kf", &g, &err), KF_OK, "%s", err.msg);
    cr_assert_not_null(g->module);
    cr_assert_str_eq(g->module->name, "m");
    cr_assert_str_eq(g->module->dir, "/some/dir");
    cr_assert_eq(g->ninputs, 4);
    cr_assert_eq(g->noutputs, 1);
    cr_assert_eq(g->nnodes, 0);
    const kf_value *w = &g->values[g->inputs[2]], *b = &g->values[g->inputs[3]];
    cr_assert(!g->values[g->inputs[0]].is_param && w->is_param && b->is_param);
    cr_assert_eq(w->param_offset, 0);
    cr_assert_eq(b->param_offset, 48);
    cr_assert_eq(g->module->weight_bytes, 64);
    cr_assert(g->values[g->inputs[0]].has_range);
    cr_assert_eq(g->values[g->outputs[0]].producer, -1);
    cr_assert_eq(g->values[g->outputs[0]].shape.d[1], 4);
    cr_assert_float_eq(kf_graph_flops(g), 48, 0);
    cr_assert_float_eq(kf_graph_min_bytes(g), 136, 0);
    char path[300];
    cr_assert(kf_module_file(g, "weights", path, sizeof path));
    cr_assert_str_eq(path, "/some/dir/m.weights");
    kf_graph_free(g);
    /* module, param and cost stay ordinary names in a graph task */
    cr_assert_eq(kf_parse_string("input module: f32[4]\nparam = module * 2\noutput cost = param + 1\n", "<t>", &g,
                                 &err), KF_OK, "%s", err.msg);
    cr_assert_null(g->module);
    kf_graph_free(g);
}

static void parse_fails(const char *text, const char *want) {
    kf_graph *g = NULL;
    kf_error err = {0};
    cr_assert_neq(kf_parse_string(text, "<t>", &g, &err), KF_OK, "parsed: %s", text);
    cr_assert(strstr(err.msg, want), "'%s' gave '%s', expected '%s'", text, err.msg, want);
}

Test(module_task, misplaced_statements_are_errors) {
    parse_fails("input x: f32[4]\nparam p: f32[4]\noutput y = x * 2\n", "belongs to a module task");
    parse_fails("input x: f32[4]\noutput y: f32[4]\n", "belongs to a module task");
    parse_fails("input x: f32[4]\ncost flops=1 bytes=2\noutput y = x * 2\n", "'cost' belongs to a module task");
    parse_fails("module m\ninput x: f32[4]\ny = x * 2\noutput y: f32[4]\n", "computes nothing itself");
    parse_fails("module m\ninput x: f32[4]\noutput y\n", "declared with its type");
    parse_fails("module m\nparam p: f32[4]\ninput x: f32[4]\noutput y: f32[4]\n", "come before its params");
    parse_fails("input x: f32[4]\nmodule m\noutput y: f32[4]\n", "must come before");
    parse_fails("module m\ninput x: f32[4]\n", "no outputs");
}

/* ---- the verifier ---- */

typedef struct vfx {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *ctx;
} vfx;

static kf_status open_ctx(vfx *f, kf_error *err) {
    memset(f, 0, sizeof *f);
    f->g = parse_task();
    cr_assert_eq(kf_backend_open("cpu", &f->b, err), KF_OK, "backend: %s", err->msg);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    char wd[300];
    snprintf(wd, sizeof wd, "%s/work", srv.dir);
    cr_assert_eq(kf_mkdirs(wd, err), KF_OK);
    o.workdir = wd;
    o.seed = 4242;
    o.threads = 1;
    return kf_verify_ctx_new(f->g, &o, &f->ctx, err);
}

static void close_ctx(vfx *f) {
    kf_verify_ctx_free(f->ctx);
    kf_backend_close(f->b);
    kf_graph_free(f->g);
}

static kf_vresult check(vfx *f, const char *src) {
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "cpu", src, NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    cr_assert_eq(kf_verify_candidate(f->ctx, f->b, &c, &r, &err), KF_OK, "%s", err.msg);
    kf_candidate_clear(&c);
    return r;
}

/* the folder of the reference's files is gone once the context exists */
static int ref_dirs_left(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls -d %s/work/kf-ref-* 2>/dev/null | grep -c .", srv.dir);
    FILE *p = popen(cmd, "r");
    int n = 0;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = -1;
        pclose(p);
    }
    return n;
}

Test(module_task, verifier_judges_kernels_against_the_module) {
    make_task();
    vfx f;
    kf_error err = {0};
    cr_assert_eq(open_ctx(&f, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(ref_dirs_left(), 0, "the reference's inputs and outputs were left for the candidate to see");
    char *good = kernel_text(), *wrong = wrong_kernel(), *first = first_set_kernel();
    kf_vresult r = check(&f, good);
    cr_assert_eq(r.status, KF_V_OK, "%s: %s", kf_vstatus_name(r.status), r.detail);
    cr_assert_eq(r.sets_run, KF_VERIFY_DEFAULT_SETS);
    r = check(&f, wrong);
    cr_assert_eq(r.status, KF_V_MISMATCH, "%s: %s", kf_vstatus_name(r.status), r.detail);
    r = check(&f, first);
    cr_assert_eq(r.status, KF_V_MISMATCH, "%s: %s", kf_vstatus_name(r.status), r.detail);
    cr_assert_geq(r.bad_set, 1, "the clamp passed set %d too", r.bad_set);
    /* the params are inputs like any other: written, they are caught */
    char *writes = replaced(good, "    return 0;", "    ((float *)args[1])[0] = 0.5f;\n    return 0;");
    r = check(&f, writes);
    cr_assert_eq(r.status, KF_V_INPUT_MODIFIED, "%s: %s", kf_vstatus_name(r.status), r.detail);
    /* and the guard zones are there: a write past the output */
    char *oob = replaced(good, "    return 0;", "    y[2 * 8 * 8 * 8 + 3] = 1.0f;\n    return 0;");
    r = check(&f, oob);
    cr_assert_eq(r.status, KF_V_OOB_WRITE, "%s: %s", kf_vstatus_name(r.status), r.detail);
    free(good), free(wrong), free(first), free(writes), free(oob);
    close_ctx(&f);
}

/* A level-3-like module (an LSTM cell stepped over a sequence, a linear head): its
 * torch.rand input is verified on [0, 1) as get_inputs draws it, its six params in
 * state_dict order. */
Test(module_task, recurrent_module_verifies_on_the_domain_get_inputs_implies) {
    make_task_of("lstm_cell");
    vfx f;
    kf_error err = {0};
    cr_assert_eq(open_ctx(&f, &err), KF_OK, "%s", err.msg);
    const kf_value *x = &f.g->values[f.g->inputs[0]];
    cr_assert(x->has_range && x->lo == 0 && x->hi == 1, "x: range %d [%g, %g]", x->has_range, x->lo, x->hi);
    cr_assert_eq(f.g->ninputs, 7);
    char *good = NULL;
    cr_assert_eq(kf_read_file(KF_SOURCE_DIR "/tests/modules/lstm_cell_kernel.c", &good, NULL, &err), KF_OK);
    kf_vresult r = check(&f, good);
    cr_assert_eq(r.status, KF_V_OK, "%s: %s", kf_vstatus_name(r.status), r.detail);
    /* the cell state not through tanh: a small error, still caught */
    char *wrong = replaced(good, "h[j] = og * tanh(c[j]);", "h[j] = og * c[j];");
    r = check(&f, wrong);
    cr_assert_eq(r.status, KF_V_MISMATCH, "%s: %s", kf_vstatus_name(r.status), r.detail);
    /* the head's weight read as if transposed */
    char *swapped = replaced(good, "hw[o * H + k]", "hw[k * O + o]");
    r = check(&f, swapped);
    cr_assert_eq(r.status, KF_V_MISMATCH, "%s: %s", kf_vstatus_name(r.status), r.detail);
    free(good), free(wrong), free(swapped);
    close_ctx(&f);
}

static void ref_fails(const char *want) {
    vfx f;
    kf_error err = {0};
    kf_status st = open_ctx(&f, &err);
    cr_assert_neq(st, KF_OK, "the context was made");
    cr_assert(strstr(err.msg, "task 'conv_gn_shrink'"), "the task is not named: %s", err.msg);
    cr_assert(strstr(err.msg, want), "'%s' not in: %s", want, err.msg);
    cr_assert_eq(ref_dirs_left(), 0, "the reference's folder was left behind");
    close_ctx(&f);
}

Test(module_task, reference_process_crashing_is_an_error_naming_the_task) {
    make_task();
    patch_module("\nimport os\ndef _crash(self, x):\n    os.abort()\nModel.forward = _crash\n");
    ref_fails("killed by signal 6");
}

Test(module_task, reference_process_raising_is_an_error_with_its_message) {
    make_task();
    patch_module("\ndef _bad(self, x):\n    raise ValueError('no such thing')\nModel.forward = _bad\n");
    ref_fails("no such thing");
}

Test(module_task, reference_process_hanging_is_stopped) {
    make_task();
    patch_module("\nimport time\ndef _hang(self, x):\n    time.sleep(600)\nModel.forward = _hang\n");
    setenv("KFORGE_REF_TIMEOUT", "3", 1);
    double t0 = kf_now();
    ref_fails("reference process");
    cr_assert_lt(kf_now() - t0, 60, "the hang was not cut at the limit");
}

Test(module_task, reference_outputs_of_the_wrong_size_are_an_error) {
    make_task();
    /* a stand-in reference that writes 3 bytes per set: argv is -m MODULE SPEC DIR SETS */
    char fake[300];
    snprintf(fake, sizeof fake, "%s/fake.sh", srv.dir);
    const char *sh = "#!/bin/sh\nfor s in $(echo $5 | tr , ' '); do printf abc > $4/out.$s; done\n";
    kf_error err = {0};
    cr_assert_eq(kf_write_file(fake, sh, strlen(sh), &err), KF_OK);
    chmod(fake, 0755);
    setenv("KFORGE_PYTHON", fake, 1);
    ref_fails("wrote 3 bytes of outputs for input set 0, expected 8192");
    unlink(fake);
}

Test(module_task, reference_process_writing_no_params_is_an_error) {
    make_task();
    /* a stand-in that writes outputs of the right size but no params for sets 1.. */
    char fake[300];
    snprintf(fake, sizeof fake, "%s/fake.sh", srv.dir);
    const char *sh = "#!/bin/sh\nfor s in $(echo $5 | tr , ' '); do head -c 8192 /dev/zero > $4/out.$s; done\n";
    kf_error err = {0};
    cr_assert_eq(kf_write_file(fake, sh, strlen(sh), &err), KF_OK);
    chmod(fake, 0755);
    setenv("KFORGE_PYTHON", fake, 1);
    ref_fails("wrote no params for input set 1");
    unlink(fake);
}

Test(module_task, weights_of_the_wrong_size_are_an_error) {
    make_task();
    char w[300];
    snprintf(w, sizeof w, "%s/conv_gn_shrink.weights", taskdir);
    cr_assert_eq(truncate(w, 100), 0);
    vfx f;
    kf_error err = {0};
    cr_assert_neq(open_ctx(&f, &err), KF_OK);
    cr_assert(strstr(err.msg, "holds 100 bytes; its params take 960"), "%s", err.msg);
    close_ctx(&f);
}

/* ---- the agents ---- */

static json_t *kernel_reply(const char *kernel) {
    char *c = NULL;
    cr_assert(asprintf(&c, "One kernel for the whole forward.\n\n```c\n%s```\n", kernel) > 0);
    json_t *j = json_pack("{s:{s:[{s:{s:s,s:s},s:s}],s:{s:i,s:i}}}", "body", "choices", "message", "role",
                          "assistant", "content", c, "finish_reason", "stop", "usage", "prompt_tokens", 100,
                          "completion_tokens", 50);
    free(c);
    return j;
}

typedef struct run {
    kf_graph *g;
    char *text;
    kf_llm_config llm;
    kf_loop_opts o;
    kf_run_result r;
    FILE *table;
} run;

static void prepare(run *x, int iters, int agent) {
    memset(x, 0, sizeof *x);
    x->g = parse_task();
    kf_error err = {0};
    cr_assert_eq(kf_read_file(taskpath, &x->text, NULL, &err), KF_OK);
    kf_llm_config_default(&x->llm);
    x->llm.protocol = KF_LLM_OPENAI;
    snprintf(x->llm.url, sizeof x->llm.url, "http://127.0.0.1:%d/v1", srv.port);
    snprintf(x->llm.model, sizeof x->llm.model, "scripted");
    x->llm.max_retries = 2;
    x->llm.backoff_s = 0.05;
    kf_loop_opts_default(&x->o);
    x->o.target = "cpu";
    x->o.iters = iters;
    x->o.out_dir = outdir;
    x->o.threads = 1;
    x->o.seed = 11;
    x->o.memcheck = KF_MEMCHECK_OFF;
    x->o.agent = agent;
    x->o.llm = &x->llm;
    x->o.task_text = x->text;
    x->table = tmpfile();
    x->o.table = x->table;
}

static void finish(run *x) {
    fclose(x->table);
    kf_run_result_free(&x->r);
    kf_graph_free(x->g);
    free(x->text);
}

#define STATUS(x, i, st)                                                                          \
    cr_assert_eq((x)->r.iters[i].res.status, (st), "iter %d: %s, want %s: %s", (i) + 1,           \
                 kf_vstatus_name((x)->r.iters[i].res.status), kf_vstatus_name(st),                 \
                 (x)->r.iters[i].res.detail)

Test(module_task, builtin_says_use_the_llm_agent) {
    make_task();
    run x;
    prepare(&x, 2, KF_AGENT_BUILTIN);
    kf_error err = {0};
    cr_assert_eq(kf_loop_run(x.g, &x.o, &x.r, &err), KF_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "module task: use --agent llm"), "%s", err.msg);
    finish(&x);
}

Test(module_task, llm_agent_writes_the_whole_forward_and_is_judged_against_the_module) {
    make_task();
    char *good = kernel_text(), *wrong = wrong_kernel(), *first = first_set_kernel();
    json_t *script = json_pack("{s:[o,o,o]}", "responses", kernel_reply(wrong), kernel_reply(first),
                               kernel_reply(good));
    char *s = json_dumps(script, JSON_COMPACT);
    start_server(s);
    free(s);
    json_decref(script);
    run x;
    prepare(&x, 3, KF_AGENT_LLM);
    kf_error err = {0};
    cr_assert_eq(kf_loop_run(x.g, &x.o, &x.r, &err), KF_OK, "loop: %s", err.msg);
    cr_assert_eq(x.r.niters, 3);
    STATUS(&x, 0, KF_V_MISMATCH);
    STATUS(&x, 1, KF_V_MISMATCH);
    cr_assert_geq(x.r.iters[1].res.bad_set, 1, "the first-set kernel failed set %d", x.r.iters[1].res.bad_set);
    STATUS(&x, 2, KF_V_OK);
    cr_assert_eq(x.r.best, 2);
    /* the first request carries the module's source, its params and the contract */
    json_t *log = server_log();
    cr_assert_eq(json_array_size(log), 3);
    json_t *msgs = at(json_array_get(log, 0), "body.messages");
    const char *ask = json_string_value(json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "content"));
    cr_assert(ask && strstr(ask, "F.softshrink(self.gn(self.conv(x)), 0.5)"), "no module source: %s", ask ? ask : "");
    cr_assert(strstr(ask, "param p_conv_weight: f32[8, 3, 3, 3]"), "no params: %s", ask);
    cr_assert(strstr(ask, "whole PyTorch module"), "no module instructions: %s", ask);
    cr_assert(strstr(ask, "kforge_kernel"), "no contract: %s", ask);
    /* the mismatch fed back names no reference value */
    const char *fb = json_string_value(json_object_get(
        json_array_get(at(json_array_get(log, 1), "body.messages"), 3), "content"));
    cr_assert(fb && strstr(fb, "mismatch"), "%s", fb ? fb : "");
    json_decref(log);
    free(good), free(wrong), free(first);
    finish(&x);
}

/* The params differ from set to set (set 0: the module's weights; the others drawn like
 * the module's own init), so a kernel that compiles the weights in, or one that takes the
 * group norm's affine for its init (ones and zeros), fails from set 1 on; a kernel that
 * hands the convolution to a BLAS is refused before it runs, the symbol named in the
 * feedback; the honest one, reading its params, passes every set. */
Test(module_task, llm_kernels_that_hard_code_the_weights_or_call_a_library_are_rejected) {
    make_task();
    char *good = kernel_text(), *hard = hard_coded_kernel(), *ident = identity_affine_kernel();
    char *blas = replaced(good, "int kforge_kernel(void *const *args) {",
                          "extern float cblas_sdot(int, const float *, int, const float *, int);\n"
                          "int kforge_kernel(void *const *args) {\n"
                          "    if (cblas_sdot(1, args[0], 1, args[1], 1) == 12345.f) return 1;");
    json_t *script = json_pack("{s:[o,o,o,o]}", "responses", kernel_reply(blas), kernel_reply(hard),
                               kernel_reply(ident), kernel_reply(good));
    char *s = json_dumps(script, JSON_COMPACT);
    start_server(s);
    free(s);
    json_decref(script);
    run x;
    prepare(&x, 4, KF_AGENT_LLM);
    kf_error err = {0};
    cr_assert_eq(kf_loop_run(x.g, &x.o, &x.r, &err), KF_OK, "loop: %s", err.msg);
    cr_assert_eq(x.r.niters, 4);
    STATUS(&x, 0, KF_V_FORBIDDEN);
    cr_assert(strstr(x.r.iters[0].res.detail, "'cblas_sdot'"), "%s", x.r.iters[0].res.detail);
    STATUS(&x, 1, KF_V_MISMATCH);
    cr_assert_geq(x.r.iters[1].res.bad_set, 1, "the hard-coded weights failed set %d", x.r.iters[1].res.bad_set);
    STATUS(&x, 2, KF_V_MISMATCH);
    cr_assert_geq(x.r.iters[2].res.bad_set, 1, "the identity affine failed set %d", x.r.iters[2].res.bad_set);
    STATUS(&x, 3, KF_V_OK);
    cr_assert_eq(x.r.best, 3);
    /* the model is told what was refused and why */
    json_t *log = server_log();
    cr_assert_eq(json_array_size(log), 4);
    const char *fb = json_string_value(json_object_get(
        json_array_get(at(json_array_get(log, 1), "body.messages"), 3), "content"));
    cr_assert(fb && strstr(fb, "refused before it ran") && strstr(fb, "cblas_sdot") && strstr(fb, "BLAS"), "%s",
              fb ? fb : "");
    json_decref(log);
    free(good), free(hard), free(ident), free(blas);
    finish(&x);
}

/* A mixed task: kforge import writes the part it lowers (conv2d + group norm, without the
 * softshrink) beside the module task; --agent both has the builtin synthesize and verify
 * that part in a run of its own, and the model, which writes the whole forward, gets the
 * part's kernel as a reference implementation. */
/* `kforge import tests/modules/conv_gn_shrink.py --out taskdir`: a mixed task (one part). */
static void import_mixed(void) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s/kforge import %s/tests/modules/conv_gn_shrink.py --out %s > %s/import.log 2>&1",
             KF_BUILD_DIR, KF_SOURCE_DIR, taskdir, srv.dir);
    int rc = system(cmd);
    char lp[300], *ilog = NULL;
    snprintf(lp, sizeof lp, "%s/import.log", srv.dir);
    kf_read_file(lp, &ilog, NULL, NULL);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s\n%s", cmd, ilog ? ilog : "");
    cr_assert(ilog && strstr(ilog, "conv_gn_shrink.part0.kf"), "%s", ilog ? ilog : "");
    free(ilog);
    char part[400], *ptext = NULL;
    snprintf(part, sizeof part, "%s/conv_gn_shrink.part0.kf", taskdir);
    kf_error err = {0};
    cr_assert_eq(kf_read_file(part, &ptext, NULL, &err), KF_OK, "%s", err.msg);
    cr_assert(strstr(ptext, "output group_norm") && !strstr(ptext, "softshrink ="), "%s", ptext);
    snprintf(part, sizeof part, "%s/conv_gn_shrink.part1.kf", taskdir);
    cr_assert_neq(access(part, F_OK), 0, "a second part: the softshrink lowers nowhere");
    free(ptext);
}

Test(module_task, mixed_task_builtin_writes_the_lowered_part_for_the_model) {
    import_mixed();
    kf_error err = {0};

    char *good = kernel_text();
    json_t *script = json_pack("{s:[o]}", "responses", kernel_reply(good));
    char *s = json_dumps(script, JSON_COMPACT);
    start_server(s);
    free(s);
    json_decref(script);
    run x;
    prepare(&x, 1, KF_AGENT_BOTH);
    x.o.builtin_iters = 2;
    cr_assert_eq(kf_loop_run(x.g, &x.o, &x.r, &err), KF_OK, "loop: %s", err.msg);
    /* the model's iterations (--iters) are the module's; the part's run (--builtin-iters) its own */
    cr_assert_eq(x.r.niters, 1, "%d iterations", x.r.niters);
    STATUS(&x, 0, KF_V_OK);
    cr_assert_eq(x.r.best, 0);
    char pk[400];
    snprintf(pk, sizeof pk, "%s/part0/kernel.c", outdir);
    cr_assert_eq(access(pk, R_OK), 0, "the part's verified kernel is not in %s", pk);
    char *pkernel = NULL;
    cr_assert_eq(kf_read_file(pk, &pkernel, NULL, &err), KF_OK);
    /* the model was handed the part's kernel, as a part, with its task */
    json_t *log = server_log();
    cr_assert_eq(json_array_size(log), 1);
    json_t *msgs = at(json_array_get(log, 0), "body.messages");
    const char *ask = json_string_value(json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "content"));
    cr_assert(ask && strstr(ask, "Kernels for parts of this module's forward"), "no parts: %s", ask ? ask : "");
    cr_assert(strstr(ask, "part 0 of the module: conv_gn_shrink_part0"), "%s", ask);
    cr_assert(strstr(ask, "// output group_norm ="), "the part's task is not shown: %s", ask);
    /* its source, as the part's run verified it (the first lines of its body) */
    char probe[120];
    const char *body = strstr(pkernel, "kforge_kernel");
    cr_assert_not_null(body);
    snprintf(probe, sizeof probe, "%.100s", body);
    cr_assert(strstr(ask, probe), "the part's kernel is not in the prompt");
    cr_assert(strstr(ask, "F.softshrink(self.gn(self.conv(x)), 0.5)"), "no module source");
    /* the record says which path gave the result */
    cr_assert_str_eq(x.r.result_from, "llm");
    cr_assert(strstr(x.r.outcome, "the model's kernel of iteration 1") && strstr(x.r.outcome, "part0/kernel.c"),
              "%s", x.r.outcome);
    json_decref(log);
    free(pkernel), free(good);
    finish(&x);
}

/* The model's kernels all fail on a mixed task: the run ends with no kernel and says why no
 * chain of the builtin's part kernels stands in (the softshrink, named with its ATen op,
 * lowers nowhere), where the verified part kernel is, and the record says "none"; a module
 * task run with the llm agent alone says why the builtin cannot stand in. */
Test(module_task, mixed_task_without_a_model_kernel_says_what_no_part_covers) {
    import_mixed();
    kf_error err = {0};
    char *wrong = wrong_kernel(), *first = first_set_kernel();
    json_t *script = json_pack("{s:[o,o,o,o]}", "responses", kernel_reply(wrong), kernel_reply(first),
                               kernel_reply(wrong), kernel_reply(first));
    char *s = json_dumps(script, JSON_COMPACT);
    start_server(s);
    free(s);
    json_decref(script);
    run x;
    prepare(&x, 2, KF_AGENT_BOTH);
    x.o.builtin_iters = 2;
    cr_assert_eq(kf_loop_run(x.g, &x.o, &x.r, &err), KF_OK, "loop: %s", err.msg);
    cr_assert_eq(x.r.best, -1);
    cr_assert_str_eq(x.r.result_from, "none");
    const char *o = x.r.outcome;
    cr_assert(strstr(o, "no verified kernel for module task 'conv_gn_shrink'"), "%s", o);
    cr_assert(strstr(o, "the model's 2 kernels all failed verification (the last: mismatch"), "%s", o);
    cr_assert(strstr(o, "No chain of the builtin's part kernels") &&
                  strstr(o, "no part covers softshrink (aten.softshrink.default), which lowers nowhere"),
              "%s", o);
    cr_assert(strstr(o, "part0/kernel.c (conv_gn_shrink_part0)"), "%s", o);
    /* in the run record, and said in the table */
    char rp[400], *rj = NULL;
    snprintf(rp, sizeof rp, "%s/run.json", outdir);
    cr_assert_eq(kf_read_file(rp, &rj, NULL, &err), KF_OK, "%s", err.msg);
    json_t *run = json_loads(rj, 0, NULL);
    cr_assert_not_null(run);
    cr_assert_str_eq(json_string_value(at(run, "result.from")), "none");
    cr_assert_str_eq(json_string_value(at(run, "result.detail")), o);
    json_decref(run);
    free(rj);
    char tbl[8192] = "";
    rewind(x.table);
    size_t n = fread(tbl, 1, sizeof tbl - 1, x.table);
    tbl[n] = 0;
    cr_assert(strstr(tbl, "result: no verified kernel for module task"), "%s", tbl);
    finish(&x);

    /* the llm agent alone: the builtin does not lower the module */
    prepare(&x, 2, KF_AGENT_LLM);
    cr_assert_eq(kf_loop_run(x.g, &x.o, &x.r, &err), KF_OK, "loop: %s", err.msg);
    cr_assert_eq(x.r.best, -1);
    cr_assert(strstr(x.r.outcome, "The builtin cannot stand in: softshrink (aten.softshrink.default) lowers "
                                  "nowhere in kforge"), "%s", x.r.outcome);
    finish(&x);
    free(wrong), free(first);
}

Test(module_task, synth_cli_runs_a_module_task_with_the_scripted_model) {
    make_task();
    char *good = kernel_text();
    json_t *script = json_pack("{s:[o]}", "responses", kernel_reply(good));
    char *s = json_dumps(script, JSON_COMPACT);
    start_server(s);
    free(s);
    json_decref(script);
    char cmd[1500];
    snprintf(cmd, sizeof cmd,
             "XDG_CONFIG_HOME=%s KFORGE_CONFIG= %s/kforge synth %s --agent llm --llm-url http://127.0.0.1:%d/v1 "
             "--model scripted --iters 1 --memcheck off --no-store --out %s > %s/synth.log 2>&1",
             srv.dir, KF_BUILD_DIR, taskpath, srv.port, outdir, srv.dir);
    int rc = system(cmd);
    char lp[300], *log = NULL;
    snprintf(lp, sizeof lp, "%s/synth.log", srv.dir);
    kf_read_file(lp, &log, NULL, NULL);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s: %d\n%s", cmd, rc, log ? log : "");
    cr_assert(log && strstr(log, "module task"), "%s", log ? log : "");
    free(log);
    unlink(lp);
    free(good);
}
