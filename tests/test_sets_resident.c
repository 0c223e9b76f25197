/*
 * A CPU candidate's input sets resident in the kept buffer region (issue 30;
 * src/verify/verify.c resident_plan, resident_sweep, timed_prepare; runproto.h 'G'): every
 * set lives in a slot of its own, written once a region, and each call's input pointers are
 * its set's slot's. Kernels are hostile: one that writes into a resident set (its own call's
 * or another slot it found) must be caught, and the next candidate in the same region must
 * get every set as drawn; one that replays its first result, or memoises on its input
 * pointers, must fail the final call as it does with the inputs copied into one buffer.
 * Where the region cannot hold every set (here: more buffers than the runner's table
 * holds), or KFORGE_SETS_COPIED=1, the sets are copied in before every call as before.
 */
#include <criterion/criterion.h>
#include <errno.h>
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
static const char *task = "task resident\n"
                          "input x: f32[65536]\n"
                          "output y = x * sigmoid(x)\n";

/* a correct swish with `globals` at file scope, `pre` before the loop and `post` after it */
static char srcbuf[8192];
static const char *swish(const char *globals, const char *pre, const char *post) {
    snprintf(srcbuf, sizeof srcbuf,
             "#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n"
             "#define N %d\n%s\n"
             "int kforge_kernel(void *const *args) {\n"
             "    float *x = args[0];\n"
             "    float *y = args[1];\n"
             "    (void)x;\n"
             "    { %s }\n"
             "    for (long i = 0; i < N; i++) y[i] = x[i] / (1.0f + expf(-x[i]));\n"
             "    { %s }\n"
             "    return 0;\n"
             "}\n",
             N, globals, pre, post);
    return srcbuf;
}

typedef struct fixture {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *c;
    char wd[512];
} fixture;

static void fx_open_task(fixture *f, const char *text, int nsets) {
    memset(f, 0, sizeof *f);
    unsetenv("KFORGE_SETS_COPIED");
    unsetenv("KFORGE_REGION_FRESH");
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(text, "<test>", &f->g, &err), KF_OK, "parse: %s", err.msg);
    cr_assert_eq(kf_backend_open("cpu", &f->b, &err), KF_OK, "backend: %s", err.msg);
    snprintf(f->wd, sizeof f->wd, "%s/test-work/resident-%ld", KF_BUILD_DIR, (long)getpid());
    cr_assert_eq(kf_mkdirs(f->wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.workdir = f->wd;
    o.seed = 3030;
    o.threads = 1;
    o.time_it = 1;
    o.min_reps = 8;
    o.max_reps = 24;
    o.min_time_s = 0.005;
    o.stable_rel = 0.01; /* as kforge synth times */
    if (nsets > 0) o.nsets = nsets;
    cr_assert_eq(kf_verify_ctx_new(f->g, &o, &f->c, &err), KF_OK, "ctx: %s", err.msg);
}

static void fx_open(fixture *f) { fx_open_task(f, task, 0); }

static void fx_close(fixture *f) {
    unsetenv("KFORGE_SETS_COPIED");
    kf_verify_ctx_free(f->c);
    kf_backend_close(f->b);
    kf_graph_free(f->g);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->wd);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", f->wd);
}

static kf_vstatus verify(fixture *f, const char *source, kf_vresult *r) {
    kf_candidate cand;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&cand, "cpu", source, NULL, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_verify_candidate(f->c, f->b, &cand, r, &err), KF_OK, "%s (%s)", err.msg, r->detail);
    kf_candidate_clear(&cand);
    errno = 0;
    pid_t p = waitpid(-1, NULL, WNOHANG);
    cr_assert(p == -1 && errno == ECHILD, "a child is left unreaped");
    return r->status;
}

/* the region kept in the context: its resident slots (0 = the sets are copied) */
static int kept_slots(const fixture *f) {
    cr_assert_not_null(f->c->kept_region, "no region kept");
    return f->c->kept_region->nslots;
}

static const char *reader_src(void);

/* The task's first candidate (an honest one): it runs in a new region with its sets copied
 * in (a new region has no slots: verify.c open_region), and leaves the region for the next
 * candidates, which find every set resident in it. */
static void prime(fixture *f) {
    kf_vresult r;
    kf_vstatus vs = verify(f, reader_src(), &r);
    cr_assert_eq(vs, KF_V_OK, "the first candidate: %s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert_eq(kept_slots(f), 0, "the task's first candidate ran with resident sets");
    cr_assert_eq(f->c->slot_sets_written, 0);
}

/* An honest kernel verifies and is timed with resident sets: after the task's first
 * candidate the kept region holds a slot per set, the sets were written into it once for
 * two candidates, and nothing was found
 * changed. The kernel also returns an error where it gets the same input pointer on every
 * call of a timing run (the pointers must move from set to set). */
Test(sets_resident, honest_kernel_verified_and_timed) {
    fixture f;
    fx_open(&f);
    kf_vresult r;
    const char *src = swish("static const void *seen[8]; static int nseen, calls;\n",
                            "int k = 0; while (k < nseen && seen[k] != args[0]) k++;\n"
                            "if (k == nseen && nseen < 8) seen[nseen++] = args[0];\n"
                            "if (++calls > 12 && nseen < 2) return 5;\n",
                            "");
    prime(&f);
    for (int k = 0; k < 2; k++) {
        kf_vstatus vs = verify(&f, src, &r);
        cr_assert_eq(vs, KF_V_OK, "candidate %d: %s: %s", k, kf_vstatus_name(vs), r.detail);
        cr_assert_eq(r.timed, 1);
        cr_assert_gt(r.reps, 0);
    }
    int nsets = f.c->nsets;
    cr_assert_geq(nsets, 2);
    cr_assert_eq(kept_slots(&f), nsets, "the kept region has %d slots for %d sets", kept_slots(&f), nsets);
    cr_assert_eq(f.c->regions_made, 1);
    cr_assert_eq(f.c->regions_reused, 2);
    cr_assert_eq(f.c->slot_sets_written, nsets, "sets written into slots: %d (once a region: %d)",
                 f.c->slot_sets_written, nsets);
    cr_assert_eq(f.c->slot_sets_restored, 0, "an honest kernel's sets were written again");
    fx_close(&f);
}

/* Checks its input on every call: every element finite (no set holds a NaN) and not the
 * writers' marker value; a kernel error otherwise. */
static const char *reader_src(void) {
    return swish("", "for (long i = 0; i < N; i++) if (!(x[i] == x[i]) || x[i] == 12345.0f) return 9;\n", "");
}

/* Writes into its own input after computing its outputs, from its second call in a
 * process on (a check run calls once: only the timing run's calls write): caught, and the
 * next candidate in the same region reads every set as drawn. */
Test(sets_resident, writer_of_its_input_is_caught_and_the_next_candidate_reads_pristine_sets) {
    fixture f;
    fx_open(&f);
    prime(&f);
    kf_vresult r;
    kf_vstatus vs = verify(&f, swish("static int calls;\n", "", "if (++calls >= 2) for (long i = 0; i < N; i += 97) x[i] = 12345.0f;\n"), &r);
    cr_assert_eq(vs, KF_V_INPUT_MODIFIED, "%s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert_gt(kept_slots(&f), 0);
    vs = verify(&f, reader_src(), &r);
    cr_assert_eq(vs, KF_V_OK, "the reader after the writer: %s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert_eq(r.timed, 1);
    cr_assert_eq(f.c->regions_made, 1, "regions made: %d", f.c->regions_made);
    cr_assert_eq(f.c->regions_reused, 2);
    fx_close(&f);
}

/* Writes a NaN into the input of every slot it has seen but the one of the current call
 * (the resident sets it can find), from its second call in a process on: the checks of
 * the later calls compare only their own set, the final call's pointers are the previous
 * call's; what is left is found after the run (resident_sweep), and the sets are written
 * again for the next candidate. */
Test(sets_resident, writer_of_other_sets_is_caught_and_they_are_written_again) {
    fixture f;
    fx_open(&f);
    prime(&f);
    kf_vresult r;
    kf_vstatus vs = verify(&f, swish("static float *seen[16]; static int nseen, calls;\n",
                                     "int k = 0; while (k < nseen && seen[k] != x) k++;\n"
                                     "if (k == nseen && nseen < 16) seen[nseen++] = x;\n",
                                     "if (++calls >= 2) for (int k = 0; k < nseen; k++)\n"
                                     "    if (seen[k] != x) { uint32_t nan = 0x7fc0beefu; memcpy(&seen[k][5], &nan, 4); }\n"),
                           &r);
    cr_assert_eq(vs, KF_V_INPUT_MODIFIED, "%s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert_gt(f.c->slot_sets_restored, 0, "no resident set was found changed after the run");
    vs = verify(&f, reader_src(), &r);
    cr_assert_eq(vs, KF_V_OK, "the reader after the writer: %s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert_eq(f.c->regions_made, 1);
    fx_close(&f);
}

/* Replays the outputs of its last check call (the sixth call of its process: one per set)
 * on every later one: the final call is on a set other than the previous one's and is
 * checked in full. */
Test(sets_resident, replay_of_the_first_result_is_caught) {
    fixture f;
    fx_open(&f);
    prime(&f);
    kf_vresult r;
    kf_vstatus vs = verify(&f, swish("static float memo[N]; static int calls;\n",
                                     "if (++calls > 6) { memcpy(y, memo, sizeof memo); return 0; }\n",
                                     "memcpy(memo, y, sizeof memo);\n"),
                           &r);
    cr_assert_eq(vs, KF_V_MISMATCH, "%s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert(strstr(r.detail, "timing run"), "%s", r.detail);
    cr_assert_gt(kept_slots(&f), 0);
    fx_close(&f);
}

/* Memoises on its input pointer, a result per pointer it has seen: with resident sets a
 * pointer names a set for every call but the final one, which gets its set written into
 * the previous call's slot (timed_prepare): the kernel replays the previous set's result
 * there and fails. (A kernel that also compares a few input elements is not caught by the
 * checks: the open item of docs/kernel-contract.md.) */
Test(sets_resident, memo_on_input_pointer_fails_the_final_call) {
    fixture f;
    fx_open(&f);
    prime(&f);
    kf_vresult r;
    kf_vstatus vs = verify(&f, swish("static const void *key[8]; static float memo[8][N]; static int nkey;\n",
                                     "for (int k = 0; k < nkey; k++)\n"
                                     "    if (key[k] == args[0]) { memcpy(y, memo[k], sizeof memo[k]); return 0; }\n",
                                     "if (nkey < 8) { key[nkey] = args[0]; memcpy(memo[nkey], y, sizeof memo[0]); nkey++; }\n"),
                           &r);
    cr_assert_eq(vs, KF_V_MISMATCH, "%s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert(strstr(r.detail, "timing run"), "%s", r.detail);
    cr_assert_gt(kept_slots(&f), 0);
    fx_close(&f);
}

/* Nine inputs and eight sets need 9 + 1 + 7 * 9 = 73 buffers, more than the runner's 64:
 * the sets are copied in before every call, the region has no slots (not even from the
 * second candidate on), and the honest kernel verifies; KFORGE_SETS_COPIED=1 does the same
 * for a task that would fit: switched on between two candidates, a new region without
 * slots, switched off again, the slots added to the kept region. */
Test(sets_resident, fallback_to_copied_sets) {
    char text[1024] = "task many\n";
    for (int i = 0; i < 9; i++) snprintf(text + strlen(text), sizeof text - strlen(text), "input a%d: f32[4096]\n", i);
    snprintf(text + strlen(text), sizeof text - strlen(text), "output y = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8\n");
    fixture f;
    fx_open_task(&f, text, 8);
    cr_assert_eq(f.c->nsets, 8);
    const char *sum = "int kforge_kernel(void *const *args) {\n"
                      "    float *y = args[9];\n"
                      "    for (long i = 0; i < 4096; i++) {\n"
                      "        float s = 0;\n"
                      "        for (int k = 0; k < 9; k++) s += ((const float *)args[k])[i];\n"
                      "        y[i] = s;\n"
                      "    }\n"
                      "    return 0;\n"
                      "}\n";
    kf_vresult r;
    for (int k = 0; k < 2; k++) {
        kf_vstatus vs = verify(&f, sum, &r);
        cr_assert_eq(vs, KF_V_OK, "%s: %s", kf_vstatus_name(vs), r.detail);
        cr_assert_eq(r.timed, 1);
        cr_assert_eq(kept_slots(&f), 0, "a region with slots for 73 buffers");
    }
    kf_vstatus vs;
    cr_assert_eq(f.c->slot_sets_written, 0);
    fx_close(&f);

    /* the switch, on a task that fits */
    fx_open(&f);
    prime(&f);
    vs = verify(&f, reader_src(), &r);
    cr_assert_eq(vs, KF_V_OK, "%s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert_gt(kept_slots(&f), 0);
    setenv("KFORGE_SETS_COPIED", "1", 1);
    vs = verify(&f, reader_src(), &r);
    cr_assert_eq(vs, KF_V_OK, "copied: %s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert_eq(kept_slots(&f), 0, "KFORGE_SETS_COPIED=1 ran with resident sets");
    unsetenv("KFORGE_SETS_COPIED");
    vs = verify(&f, reader_src(), &r);
    cr_assert_eq(vs, KF_V_OK, "resident again: %s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert_gt(kept_slots(&f), 0);
    /* (the region without slots was made new, the slots were added to the kept one twice) */
    cr_assert_eq(f.c->regions_made, 2, "regions made: %d", f.c->regions_made);
    cr_assert_eq(f.c->slot_sets_written, 2 * f.c->nsets);
    fx_close(&f);
}

/* Writes into another set's slot only in the call it can tell is the final one (its input
 * pointer is the previous call's but the inputs differ: docs/kernel-contract.md, the open
 * items), after which no call checks that set: only the comparison after the run finds it
 * (resident_sweep), and the next candidate reads every set as drawn. */
Test(sets_resident, write_in_the_final_call_is_found_after_the_run) {
    fixture f;
    fx_open(&f);
    prime(&f);
    kf_vresult r;
    kf_vstatus vs = verify(&f, swish("static float *seen[16]; static int nseen; static const float *last; static float last0[4];\n",
                                     "int k = 0; while (k < nseen && seen[k] != x) k++;\n"
                                     "if (k == nseen && nseen < 16) seen[nseen++] = x;\n"
                                     "int final = x == last && memcmp(x, last0, sizeof last0) != 0;\n"
                                     "last = x; memcpy(last0, x, sizeof last0);\n"
                                     "if (final) for (k = 0; k < nseen; k++)\n"
                                     "    if (seen[k] != x) { uint32_t nan = 0x7fc0beefu; memcpy(&seen[k][11], &nan, 4); }\n",
                                     ""),
                           &r);
    cr_assert_eq(vs, KF_V_INPUT_MODIFIED, "%s: %s", kf_vstatus_name(vs), r.detail);
    cr_assert(strstr(r.detail, "found after the candidate's runs"), "caught elsewhere: %s", r.detail);
    cr_assert_gt(f.c->slot_sets_restored, 0);
    vs = verify(&f, reader_src(), &r);
    cr_assert_eq(vs, KF_V_OK, "the reader after the writer: %s: %s", kf_vstatus_name(vs), r.detail);
    fx_close(&f);
}
