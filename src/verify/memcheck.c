/*
 * The memory-checker run (DESIGN.md section 5, last rule): the final candidate runs once
 * more, on input set 0, inside the sandbox with valgrind memcheck wrapped around
 * kforge-runner. Guard zones only see the shared buffers; memcheck sees what the kernel
 * does with its own heap (scratch overruns, uses after free, bad frees, leaks) and its
 * branches on uninitialised memory.
 *
 * Sequence: a native run on set 0 (checked as usual, and its CPU time scales the checker's
 * limits), then the checker run, then the usual guard/input/output checks on what the
 * checker run left, so that a kernel that behaves differently under valgrind is caught.
 *
 * Valgrind flags, and why:
 *   --exit-on-first-error=yes --error-exitcode=MC_EXIT  only the first report is shown,
 *       so stop there (bounded output and time); MC_EXIT tells the sandbox "errors found";
 *   --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite
 *       a kernel that drops its scratch is an error; memory still reachable at exit
 *       (dlopen, stdio, the OpenMP thread pool) or only possibly lost (threads' DTVs) is
 *       not, and the runner frees what it allocates itself, so no suppression file is
 *       needed (checked with valgrind 3.19, glibc 2.36, libgomp 12). The two kinds lists
 *       must stay equal: with --exit-on-first-error any loss record shown ends the run
 *       with the error status;
 *   --soname-synonyms=somalloc=NONE  the runner exports its own malloc family (a wrapper
 *       that records allocation failures); this makes memcheck replace those functions,
 *       so the kernel's blocks are tracked whichever symbol it binds to;
 *   -q --log-fd=2  reports only, on the captured stderr, each line prefixed "==PID==".
 * OMP_WAIT_POLICY=passive is set for the checker run: valgrind runs one thread at a time,
 * so a worker spinning at a barrier would only burn the time slice the others need.
 *
 * The address-space limit is lifted for the checker run (valgrind reserves a lot); wall
 * and CPU limits are kept, scaled up, and the output cap is raised for the report. The
 * scale is measured, not guessed: memcheck runs memory-bound kernels ~40x slower, but
 * compute-bound AVX2/FMA loops ~600x (a 768^3 f32 matmul: 0.04 s natively, 25 s under
 * valgrind 3.19), so the limit is 60 s + 1000x the native run's CPU time, capped at
 * 10 minutes; valgrind runs one thread at a time, so its CPU time is about its wall time.
 * A checker run that hits those limits without a report is no verdict on the kernel (it
 * finished natively): it comes back as KF_ERR_UNSUPPORTED, "too slow under valgrind".
 */
#include "verify/verify_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MC_EXIT 97                 /* valgrind's exit status when it found an error */
#define MC_DETAIL_LINES 40         /* lines of the first report kept in the detail */
#define MC_BASE_S 60.0             /* limits of the checker run: base + factor x native CPU, */
#define MC_SLOWDOWN 1000.0         /* at most MC_MAX_S (see the note at the top) */
#define MC_MAX_S 600.0
#define MC_OUTPUT_CAP (8ll << 20)  /* stdout+stderr allowed under the checker */
#define MC_OUTPUT_KEEP (1u << 20)  /* bytes of it read back for the report */
#define MC_TAG_BASE 0x4d43000000000000ul /* output-file tags apart from verify.c's */

static unsigned long mc_counter;

/* Absolute path of an executable found on PATH; 0 when there is none. */
static int find_on_path(const char *name, char *out, size_t cap) {
    const char *path = getenv("PATH");
    if (!path || !path[0]) return 0;
    const char *p = path;
    while (*p) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        if (len > 0 && p[0] == '/') {
            snprintf(out, cap, "%.*s/%s", (int)len, p, name);
            if (access(out, X_OK) == 0) return 1;
        }
        if (!colon) break;
        p = colon + 1;
    }
    return 0;
}

static void fail(const kf_verify_ctx *c, kf_vresult *r, kf_vstatus vs, const char *what,
                 const char *detail) {
    r->status = vs;
    r->bad_set = 0;
    snprintf(r->bad_dist, sizeof r->bad_dist, "%s", kf_verify_dist_name(c->sets[0].dist));
    snprintf(r->detail, sizeof r->detail, "%s on set 0 (%s inputs, seed %llu): %s", what,
             r->bad_dist, (unsigned long long)c->seed, detail);
}

/* The usual checks of what a run on set 0 left in the region: guards, inputs, outputs.
 * Returns 0 and fills r on the first failure; 1 when all hold. */
static int check_region(const kf_verify_ctx *c, const kf_sbx *sb, kf_vresult *r,
                        const char *what) {
    const kf_graph *g = c->g;
    char detail[1024];
    int b;
    int64_t off;
    if (kf_sbx_check_guards(sb, &b, &off)) {
        int id = b < c->nin ? g->inputs[b] : g->outputs[b - c->nin];
        snprintf(detail, sizeof detail, "%s '%s': wrote into a guard zone %lld bytes %s its data",
                 b < c->nin ? "input" : "output", g->values[id].name,
                 (long long)(off < 0 ? -off : off - (int64_t)sb->size[b]),
                 off < 0 ? "before the start of" : "after the end of");
        fail(c, r, KF_V_OOB_WRITE, what, detail);
        if (b >= c->nin) r->bad_output = b - c->nin;
        return 0;
    }
    for (int i = 0; i < c->nin; i++) {
        if (memcmp(kf_sbx_data(sb, i), c->sets[0].in[i], c->in_bytes[i]) == 0) continue;
        snprintf(detail, sizeof detail, "input '%s' was written (inputs are read-only)",
                 g->values[g->inputs[i]].name);
        fail(c, r, KF_V_INPUT_MODIFIED, what, detail);
        return 0;
    }
    for (int j = 0; j < c->nout; j++) {
        kf_cmp cmp;
        kf_verify_compare(c, 0, j, kf_sbx_data(sb, c->nin + j), &cmp);
        r->max_abs_err = fmax(r->max_abs_err, cmp.max_abs);
        r->max_rel_err = fmax(r->max_rel_err, cmp.max_rel);
        r->nmse = fmax(r->nmse, cmp.nmse);
        if (cmp.status != KF_V_OK) {
            fail(c, r, cmp.status, what, cmp.detail);
            r->bad_output = j;
            r->first_bad = cmp.first_bad;
            r->got = cmp.got;
            r->want = cmp.want;
            return 0;
        }
    }
    return 1;
}

/* Copy line [s, e) into b with non-printable bytes as '.', and "(in /dir/lib.so)" shortened
 * to "(in lib.so)" so that more of the stack fits the detail. */
static void put_line(kf_buf *b, const char *s, const char *e) {
    const char *in = NULL;
    for (const char *p = s; p + 5 <= e; p++)
        if (memcmp(p, "(in /", 5) == 0) in = p;
    for (const char *p = s; p < e; p++) {
        if (in && p == in + 4) {
            const char *close = memchr(p, ')', (size_t)(e - p));
            const char *q = close ? close : e;
            const char *base = p;
            for (const char *t = p; t < q; t++)
                if (*t == '/') base = t + 1;
            p = base;
            if (p >= e) break;
        }
        unsigned char ch = (unsigned char)*p;
        char o = ch == '\t' ? ' ' : (ch < 32 || ch > 126) ? '.' : (char)ch;
        kf_buf_putn(b, &o, 1);
    }
}

/* The text of a valgrind line "==PID== text" in [s, e) (e when the line has only blanks),
 * or NULL when the line is not valgrind's. */
static const char *vg_text(const char *s, const char *e) {
    if (e - s < 4 || s[0] != '=' || s[1] != '=') return NULL;
    const char *q = s + 2;
    while (q < e && *q >= '0' && *q <= '9') q++;
    if (q == s + 2 || e - q < 2 || q[0] != '=' || q[1] != '=') return NULL;
    q += 2;
    if (q < e && *q == ' ') q++; /* the separator; stack lines keep their indentation */
    const char *t = q;
    while (t < e && (*t == ' ' || *t == '\r')) t++;
    return t == e ? e : q;
}

/* valgrind's first report in the captured output: the first block of "==PID== text" lines
 * (a block ends at a "==PID==" line without text), leading warnings skipped, at most
 * MC_DETAIL_LINES lines, prefixes stripped. Returns the number of lines put into b. */
static int first_report(const char *out, size_t n, kf_buf *b) {
    const char *p = out, *end = out + n;
    int lines = 0;
    while (p < end && lines < MC_DETAIL_LINES) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        const char *t = vg_text(p, e);
        p = nl ? nl + 1 : end;
        if (!t) continue; /* the kernel's own output */
        if (t == e) {
            if (lines > 0) break;
            continue;
        }
        if (lines == 0 && (strncmp(t, "Warning:", 8) == 0 || strncmp(t, "WARNING", 7) == 0))
            continue;
        if (lines > 0) kf_buf_puts(b, "\n");
        put_line(b, t, e);
        lines++;
    }
    return lines;
}

/* Whether text (n bytes) contains s. */
static int contains(const char *text, size_t n, const char *s) {
    size_t k = strlen(s);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(text + i, s, k) == 0) return 1;
    return 0;
}

/* Check an artifact under the memory checker; see verify.h. */
kf_status kf_verify_memcheck(kf_verify_ctx *c, kf_backend *b, const kf_candidate *cand,
                             const char *artifact, kf_vresult *r, kf_error *err) {
    memset(r, 0, sizeof *r);
    r->status = KF_V_INTERNAL;
    r->bad_set = -1;
    r->bad_output = -1;
    r->first_bad = -1;
    double t0 = kf_now();
    if (!c || !cand || !artifact) {
        snprintf(r->detail, sizeof r->detail, "kf_verify_memcheck: missing argument");
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_verify_memcheck: missing argument");
    }
    if (kf_verify_is_device(b)) {
        snprintf(r->detail, sizeof r->detail,
                 "no memory checker for platform '%s' (guard zones around every buffer still "
                 "catch out-of-bounds writes)",
                 b->info.platform);
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", r->detail);
    }
    char valgrind[PATH_MAX];
    if (!find_on_path("valgrind", valgrind, sizeof valgrind)) {
        snprintf(r->detail, sizeof r->detail, "valgrind is not installed (not found on PATH)");
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", r->detail);
    }
    char runner[PATH_MAX], abs_art[PATH_MAX];
    int threads;
    kf_sbx sb;
    kf_status st = kf_verify_open_region(c, b, &artifact, runner, abs_art, &threads, &sb, r, err);
    if (st != KF_OK) return st;
    const kf_verify_opts *o = &c->opts;
    kf_buf out = {0};
    kf_run_ctl *ctl = sb.ctl;
    snprintf(ctl->entry, sizeof ctl->entry, "%s", cand->entry[0] ? cand->entry : "kforge_kernel");
    snprintf(ctl->artifact, sizeof ctl->artifact, "%s", artifact);
    ctl->mode = KF_RUN_CHECK;
    char detail[1500];
    kf_vstatus vs = KF_V_OK;
    r->sets_run = 1;

    /* 1. natively: the usual checks, and the CPU time that scales the checker's limits */
    double native_cpu = 0, native_wall = 0;
    kf_sbx_limits lim = {
        .wall_s = o->wall_limit_s, .cpu_s = o->cpu_limit_s, .mem_bytes = o->mem_limit,
        .output_cap = o->output_cap, .threads = threads, .runner = runner,
        .workdir = c->workdir, .cpu_used = &native_cpu,
    };
    kf_verify_load_set(c, &sb, 0);
    lim.tag = MC_TAG_BASE + __atomic_add_fetch(&mc_counter, 1, __ATOMIC_RELAXED);
    st = kf_sbx_run(&sb, &lim, &vs, detail, sizeof detail, &native_wall, err);
    if (st != KF_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", err ? err->msg : "the runner could not be started");
        goto done;
    }
    if (vs != KF_V_OK) {
        fail(c, r, vs, "native run before the memory check", detail);
        goto done;
    }
    if (!check_region(c, &sb, r, "native run before the memory check")) goto done;

    /* 2. under valgrind */
    char exitarg[32];
    snprintf(exitarg, sizeof exitarg, "--error-exitcode=%d", MC_EXIT);
    const char *wrap[] = {valgrind, "--tool=memcheck", exitarg, "--exit-on-first-error=yes",
                          "--leak-check=full", "--show-leak-kinds=definite",
                          "--errors-for-leak-kinds=definite", "--track-origins=no",
                          "--soname-synonyms=somalloc=NONE", "--num-callers=16", "-q",
                          "--log-fd=2", NULL};
    double limit = fmin(MC_BASE_S + MC_SLOWDOWN * native_cpu, MC_MAX_S);
    kf_sbx_limits vlim = lim;
    vlim.wall_s = fmax(limit, o->wall_limit_s);
    vlim.cpu_s = fmax(vlim.wall_s + 10, o->cpu_limit_s);
    vlim.output_cap = o->output_cap > MC_OUTPUT_CAP ? o->output_cap : MC_OUTPUT_CAP;
    vlim.wrapper = wrap;
    vlim.no_mem_limit = 1;
    vlim.checker_exit = MC_EXIT;
    vlim.extra_env = "OMP_WAIT_POLICY=passive";
    vlim.output = &out;
    vlim.output_keep = MC_OUTPUT_KEEP;
    vlim.cpu_used = NULL;
    kf_verify_load_set(c, &sb, 0);
    vlim.tag = MC_TAG_BASE + __atomic_add_fetch(&mc_counter, 1, __ATOMIC_RELAXED);
    double vwall = 0;
    st = kf_sbx_run(&sb, &vlim, &vs, detail, sizeof detail, &vwall, err);
    if (st != KF_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", err ? err->msg : "valgrind could not be started");
        goto done;
    }
    kf_log(2, "memcheck: native run %.3f s (%.3f s CPU), valgrind run %.2f s (limit %.0f s): %s",
           native_wall, native_cpu, vwall, vlim.wall_s, kf_vstatus_name(vs));
    const char *text = out.data ? out.data : "";
    int started = sb.live->stage >= KF_STAGE_START;
    if (vs == KF_V_CRASH && (contains(text, out.len, "Illegal opcode") ||
                             contains(text, out.len, "unhandled instruction bytes") ||
                             contains(text, out.len, "Unrecognised instruction"))) {
        /* ran natively, SIGILL under valgrind: an instruction it cannot translate */
        snprintf(r->detail, sizeof r->detail, "valgrind cannot decode an instruction of the kernel "
                 "or its libraries (AVX-512 or newer?); compile without it to memcheck");
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", r->detail);
        goto done;
    }
    kf_buf rep = {0};
    int nlines = first_report(text, out.len, &rep);
    /* valgrind's note on a fatal signal is not an error report: the signal is the verdict */
    int fatal_note = nlines > 0 && strncmp(rep.data, "Process terminating", 19) == 0;
    if (vs == KF_V_OK) {
        kf_buf_free(&rep);
        if (check_region(c, &sb, r, "run under valgrind")) r->status = KF_V_OK;
        goto done;
    }
    if (!started && vs != KF_V_TIMEOUT) {
        /* valgrind itself failed before the runner started (no tool, bad option, ...) */
        kf_buf msg = {0};
        const char *nl = memchr(text, '\n', out.len);
        put_line(&msg, text, nl ? nl : text + out.len);
        snprintf(r->detail, sizeof r->detail, "valgrind could not start the runner: %s",
                 msg.data && msg.data[0] ? msg.data : detail);
        kf_buf_free(&msg);
        kf_buf_free(&rep);
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", r->detail);
        goto done;
    }
    if ((vs == KF_V_TIMEOUT || vs == KF_V_CPU_LIMIT) && (nlines == 0 || fatal_note)) {
        r->status = vs;
        snprintf(r->detail, sizeof r->detail, "valgrind did not finish within %.0f s (the kernel "
                 "took %.3f s CPU natively): %s", vlim.wall_s, native_cpu, detail);
        kf_buf_free(&rep);
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "too slow under valgrind: %s",
                          r->detail);
        goto done;
    }
    if (nlines > 0 && !fatal_note) {
        /* a report: the memory error is the finding, whatever the process did next */
        if (vs != KF_V_MEMCHECK) kf_buf_printf(&rep, "\n(then %s)", detail);
        fail(c, r, KF_V_MEMCHECK, "valgrind memcheck", rep.data);
    } else if (vs == KF_V_MEMCHECK) {
        fail(c, r, KF_V_MEMCHECK, "valgrind memcheck", detail);
    } else if (fatal_note && vs == KF_V_CRASH) {
        fail(c, r, vs, "run under valgrind", rep.data);
    } else {
        fail(c, r, vs, "run under valgrind", detail);
    }
    kf_buf_free(&rep);
done:
    kf_buf_free(&out);
    kf_sbx_free(&sb);
    r->run_wall_s = kf_now() - t0;
    return st;
}

/* See verify.h. */
const char *kf_verify_memcheck_flags(const kf_backend *b) {
    if (b && strcmp(b->info.platform, "cpu") == 0 && strstr(b->info.arch, "avx512f"))
        return "-mno-avx512f";
    return "";
}
