/*
 * The memory-checker run (DESIGN.md section 5, last rule): the final candidate runs once
 * more, on input set 0, inside the sandbox with a memory checker wrapped around
 * kforge-runner: valgrind memcheck on the CPU, compute-sanitizer memcheck on CUDA. Guard
 * zones only see writes to the shared buffers; valgrind sees what the kernel does with its
 * own heap (scratch overruns, uses after free, bad frees, leaks), its branches on
 * uninitialised memory, and reads or writes into the shared buffers' guard zones (the
 * runner marks them unaddressable for valgrind while the kernel runs, runner_main.c); compute-sanitizer sees every device access outside a live allocation (a write
 * far past a buffer that skips its guard zone, shared and local memory overruns,
 * misaligned accesses) and device allocations left unfreed.
 *
 * Sequence (both checkers): a native run on set 0 (checked as usual; its time scales the
 * checker's limits), then the checker run, then the usual guard/input/output checks on
 * what the checker run left, so that a kernel that behaves differently under the checker
 * is caught. The first report of the checker, bounded, is the rejection's detail.
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
 * The build checked here is the candidate's source with kf_verify_memcheck_flags: on
 * x86-64 -mno-fma, because valgrind 3.19 emulates every FMA lane through a helper call
 * (--tool=none was as slow as memcheck on a matmul; without FMA the valgrind run of a
 * 2048^3 matmul went from ~370 s to 14 s, of a 16M swish from 24 s to 2 s).
 *
 * The address-space limit is lifted for the checker run (valgrind reserves a lot); wall
 * and CPU limits are kept, scaled up, and the output cap is raised for the report. The
 * limit is 60 s + 1000x the native run's CPU time, capped at 10 minutes: with FMA code
 * valgrind ran ~600-2700x the native CPU time (a source that needs FMA intrinsics is still
 * built with them), without it 21-29x; valgrind runs one thread at a time, so its CPU
 * time is about its wall time on an idle machine.
 * A checker run that hits those limits without a report is no verdict on the kernel (it
 * finished natively): it comes back as KF_ERR_UNSUPPORTED, "too slow under valgrind".
 *
 * compute-sanitizer (found by kf_verify_memcheck_tool: $KFORGE_COMPUTE_SANITIZER, PATH,
 * $CUDA_HOME/bin, /usr/local/cuda/bin) flags, and why (option names as in 2025.3, CUDA 13.0):
 *   --tool memcheck  out-of-bounds and misaligned global/shared/local accesses, device-heap
 *       misuse, hardware exceptions;
 *   --error-exitcode MC_EXIT  the verdict does not depend on parsing: "errors found" is
 *       the exit status, which the sandbox turns into KF_V_MEMCHECK;
 *   --print-limit 10  a faulty access is reported once per thread, so a bad index in a
 *       whole grid would print thousands of reports; ten bound the output (the summary
 *       still counts them all) and the detail keeps only the first;
 *   --show-backtrace device  the device frames name the kernel, its offset and (with
 *       -lineinfo, see kf_verify_memcheck_flags) its source line; the host frames would
 *       only show kforge-runner and the driver;
 *   --leak-check full  device allocations still live when the context goes: an nvcc-form
 *       kernel's own cudaMalloc scratch that it never frees (the runner frees its buffers
 *       and the backend its scratch and releases the primary context before exit);
 *   --padding 65536  64 KiB of padding after every allocation, so that an overrun past a
 *       buffer's trailing guard lands in padding (reported) rather than in a neighbouring
 *       allocation, where the checker would see a valid address;
 *   --report-api-errors no  the runner checks every driver call and turns a failure into
 *       a verdict itself (a device error is a crash); reported API errors would add the
 *       runner's expected failures and the calls that fail after a device fault to the
 *       error count, which must count the kernel's memory errors only;
 *   --check-exit-code no --require-cuda-init no  the runner's exit status carries its own
 *       meaning (load error, device error, ...) for the sandbox: the checker must not turn
 *       it into "errors found", nor report a runner that stopped before its first CUDA call;
 *   --target-processes application-only  only kforge-runner, the root process, is
 *       checked (no multi-process tracking);
 *   --launch-timeout 60  attaching to the runner must not fail on a loaded host (the
 *       default is 10 s);
 *   --nvtx no  the runner uses no NVTX ranges;
 *   --destroy-on-device-error kernel  a precise error ends the kernel, not the context (the
 *       default): the runner then still frees its buffers, where with a dead context every
 *       free would fail and --leak-check would add each buffer as a leak to the error count
 *       (seen on an H200, 2025.3.1: one bad write came back as "3 errors"). Reports go
 * to stdout, each line prefixed "========= "; the last "ERROR SUMMARY: N errors" line is
 * the count (the kernel's own printf cannot change the exit status that decides).
 *
 * Limits under compute-sanitizer: the same no-address-space-limit and output-file polling
 * as any device run, and wall = 60 s + 100x the native run's wall time (which includes the
 * CUDA context's creation), capped at 10 minutes; CPU = 2x wall + 10 s. ASSUMED, not
 * measured yet: the checker's own start (tool load, attach, module instrumentation) is
 * below 30 s, and instrumented kernels run 10-100x slower than natively; the native wall
 * time is dominated by the context's creation, so 100x of it is generous for the kernel.
 * A run that hits the limits without a report is no verdict: KF_ERR_UNSUPPORTED,
 * "too slow under compute-sanitizer".
 */
#include "verify/verify_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MC_EXIT 97                 /* the checker's exit status when it found an error */
#define MC_DETAIL_LINES 40         /* lines of the first report kept in the detail */
#define MC_BASE_S 60.0             /* valgrind's limits: base + factor x native CPU, */
#define MC_SLOWDOWN 1000.0         /* at most MC_MAX_S (see the note at the top) */
#define MC_MAX_S 600.0
#define CS_BASE_S 60.0             /* compute-sanitizer's: base + factor x native wall, */
#define CS_SLOWDOWN 100.0          /* at most MC_MAX_S (assumed, see the note at the top) */
#define CS_PRINT_LIMIT "10"
#define CS_PADDING "65536"
#define MC_OUTPUT_CAP (8ll << 20)  /* stdout+stderr allowed under the checker */
#define MC_OUTPUT_KEEP (1u << 20)  /* bytes of it read back for the report */
#define MC_TAG_BASE 0x4d43000000000000ul /* output-file tags apart from verify.c's */

static unsigned long mc_counter;

/* Whether path names an executable regular file. */
static int is_exe(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* See verify_int.h. */
int kf_verify_find_exe(const char *name, char *out, size_t cap) {
    if (!name || !name[0] || !out || cap == 0) return 0;
    int n;
    if (strchr(name, '/')) {
        /* a path: absolute, because the sandboxed child starts in its scratch directory */
        char cwd[PATH_MAX];
        if (name[0] == '/') n = snprintf(out, cap, "%s", name);
        else if (getcwd(cwd, sizeof cwd)) n = snprintf(out, cap, "%s/%s", cwd, name);
        else n = -1;
        if (n > 0 && (size_t)n < cap && is_exe(out)) return 1;
        out[0] = 0;
        return 0;
    }
    const char *path = getenv("PATH");
    const char *p = path ? path : "";
    while (*p) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        if (len > 0 && p[0] == '/') {
            n = snprintf(out, cap, "%.*s/%s", (int)len, p, name);
            if (n > 0 && (size_t)n < cap && is_exe(out)) return 1;
        }
        if (!colon) break;
        p = colon + 1;
    }
    out[0] = 0;
    return 0;
}

/* See verify_int.h. */
kf_status kf_verify_find_cuda_tool(const char *name, const char *env_var, const char *what, char *out,
                                   size_t cap, kf_error *err) {
    const char *env = getenv(env_var);
    if (env && env[0]) {
        if (kf_verify_find_exe(env, out, cap)) return KF_OK;
        out[0] = 0;
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "%s not found: %s names '%s', which is not an executable file", what, env_var, env);
    }
    if (kf_verify_find_exe(name, out, cap)) return KF_OK;
    const char *home = getenv("CUDA_HOME");
    char cand[PATH_MAX];
    if (home && home[0]) {
        snprintf(cand, sizeof cand, "%s/bin/%s", home, name);
        if (kf_verify_find_exe(cand, out, cap)) return KF_OK;
    }
    snprintf(cand, sizeof cand, "/usr/local/cuda/bin/%s", name);
    if (kf_verify_find_exe(cand, out, cap)) return KF_OK;
    out[0] = 0;
    return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                        "%s not found (looked on PATH, in $CUDA_HOME/bin%s%s%s and in /usr/local/cuda/bin; "
                        "%s may name it)",
                        what, home && home[0] ? " = " : " (CUDA_HOME unset)", home && home[0] ? home : "",
                        home && home[0] ? "/bin" : "", env_var);
}

/* The checker of b's platform; none for a platform the table lacks. */
static kf_memchecker memchecker_of(const kf_backend *b) {
    const kf_platform *p = kf_platform_find(b->info.platform);
    return p ? p->memchecker : KF_MEMCHECKER_NONE;
}

/* The checker for a platform; see verify.h. */
kf_status kf_verify_memcheck_tool(const char *platform, char *path, size_t cap, kf_error *err) {
    if (!path || cap == 0)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_verify_memcheck_tool: no buffer");
    path[0] = 0;
    const kf_platform *p = !platform || !platform[0] ? kf_platform_host() : kf_platform_find(platform);
    switch (p ? p->memchecker : KF_MEMCHECKER_NONE) {
    case KF_MEMCHECKER_VALGRIND:
        if (kf_verify_find_exe("valgrind", path, cap)) return KF_OK;
        path[0] = 0;
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "valgrind is not installed (not found on PATH)");
    case KF_MEMCHECKER_COMPUTE_SANITIZER:
        return kf_verify_find_cuda_tool("compute-sanitizer", "KFORGE_COMPUTE_SANITIZER", "compute-sanitizer", path,
                                        cap, err);
    case KF_MEMCHECKER_NONE:
        break;
    }
    return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                        "no memory checker for platform '%s' (guard zones around every buffer "
                        "still catch out-of-bounds writes)", platform);
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
    int i;
    int64_t e, nchanged;
    double was, now;
    if (kf_verify_input_changed(c, sb, 0, &i, &e, &nchanged, &was, &now)) {
        snprintf(detail, sizeof detail, "input '%s' was written (inputs are read-only)",
                 g->values[g->inputs[i]].name);
        fail(c, r, KF_V_INPUT_MODIFIED, what, detail);
        return 0;
    }
    const void *ins[KF_RUN_MAX_BUFS];
    for (int k = 0; k < c->nin; k++) ins[k] = kf_sbx_data(sb, k);
    for (int j = 0; j < c->nout; j++) {
        kf_cmp cmp;
        kf_verify_compare(c, 0, j, kf_sbx_data(sb, c->nin + j), ins, &cmp);
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

/* The text of a compute-sanitizer line "========= text" in [s, e) (e when the line has
 * only blanks), or NULL when the line is not the checker's. One separator blank is
 * dropped; the indentation of a report's detail lines is kept. */
static const char *cs_text(const char *s, const char *e) {
    static const char pre[] = "=========";
    size_t k = sizeof pre - 1;
    if ((size_t)(e - s) < k || memcmp(s, pre, k) != 0) return NULL;
    const char *q = s + k;
    if (q < e && *q != ' ' && *q != '\r') return NULL; /* "==========..." is not the prefix */
    if (q < e && *q == ' ') q++;
    const char *t = q;
    while (t < e && (*t == ' ' || *t == '\r')) t++;
    return t == e ? e : q;
}

/* The count in "ERROR SUMMARY: 1,234 errors" (t: the text after the colon), or -1 when the
 * line says more than that (such as "N errors were not printed" after the print limit). */
static int cs_count(const char *t, const char *e) {
    while (t < e && *t == ' ') t++;
    if (t == e || *t < '0' || *t > '9') return -1;
    long n = 0;
    for (; t < e && ((*t >= '0' && *t <= '9') || *t == ','); t++) {
        if (*t == ',') continue;
        n = n * 10 + (*t - '0');
        if (n > 1000000000L) n = 1000000000L;
    }
    while (e > t && (e[-1] == ' ' || e[-1] == '\r')) e--;
    size_t k = (size_t)(e - t);
    if (!((k == 6 && memcmp(t, " error", 6) == 0) || (k == 7 && memcmp(t, " errors", 7) == 0)))
        return -1;
    return (int)n;
}

/* See verify_int.h. */
int kf_verify_cs_report(const char *out, size_t n, kf_buf *b, int *nerrors) {
    const char *p = out, *end = out + n;
    const char *sum = NULL, *sum_end = NULL;
    int lines = 0, closed = 0;
    *nerrors = -1;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        const char *t = cs_text(p, e);
        p = nl ? nl + 1 : end;
        if (!t) continue; /* the kernel's or the runner's own output */
        if (t == e) {
            if (lines > 0) closed = 1;
            continue;
        }
        if (e - t >= 14 && memcmp(t, "ERROR SUMMARY:", 14) == 0) {
            /* the last count counts: the checker prints it after the runner is gone */
            int k = cs_count(t + 14, e);
            if (k >= 0) {
                *nerrors = k;
                sum = t;
                sum_end = e;
            }
            if (lines > 0) closed = 1;
            continue;
        }
        if (closed || lines >= MC_DETAIL_LINES) continue;
        if (lines == 0 && (strncmp(t, "COMPUTE-SANITIZER", 17) == 0 ||
                           strncmp(t, "Warning:", 8) == 0 || strncmp(t, "WARNING", 7) == 0))
            continue;
        if (lines > 0) kf_buf_puts(b, "\n");
        put_line(b, t, e);
        lines++;
    }
    if (sum) {
        if (lines > 0) kf_buf_puts(b, "\n");
        put_line(b, sum, sum_end);
    }
    return lines;
}

/* First line of text (n bytes) into b, for a message about the checker itself. */
static void first_line(const char *text, size_t n, kf_buf *b) {
    const char *nl = memchr(text, '\n', n);
    put_line(b, text, nl ? nl : text + n);
}

/* The verdict of a valgrind run (vs, detail from the sandbox; out the captured output);
 * fills r, returns KF_OK or KF_ERR_UNSUPPORTED (no verdict). */
static kf_status vg_verdict(const kf_verify_ctx *c, const kf_sbx *sb, kf_vstatus vs,
                            const char *detail, const kf_buf *out, double limit_s,
                            double native_cpu, kf_vresult *r, kf_error *err) {
    const char *text = out->data ? out->data : "";
    int started = sb->live->stage >= KF_STAGE_START;
    kf_status st = KF_OK;
    if (vs == KF_V_CRASH && (contains(text, out->len, "Illegal opcode") ||
                             contains(text, out->len, "unhandled instruction bytes") ||
                             contains(text, out->len, "Unrecognised instruction"))) {
        /* ran natively, SIGILL under valgrind: an instruction it cannot translate */
        snprintf(r->detail, sizeof r->detail, "valgrind cannot decode an instruction of the kernel "
                 "or its libraries (AVX-512 or newer?); compile without it to memcheck");
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", r->detail);
    }
    kf_buf rep = {0};
    int nlines = first_report(text, out->len, &rep);
    /* valgrind's note on a fatal signal is not an error report: the signal is the verdict */
    int fatal_note = nlines > 0 && strncmp(rep.data, "Process terminating", 19) == 0;
    if (vs == KF_V_OK) {
        if (check_region(c, sb, r, "run under valgrind")) r->status = KF_V_OK;
    } else if (!started && vs != KF_V_TIMEOUT) {
        /* valgrind itself failed before the runner started (no tool, bad option, ...) */
        kf_buf msg = {0};
        first_line(text, out->len, &msg);
        snprintf(r->detail, sizeof r->detail, "valgrind could not start the runner: %s",
                 msg.data && msg.data[0] ? msg.data : detail);
        kf_buf_free(&msg);
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", r->detail);
    } else if ((vs == KF_V_TIMEOUT || vs == KF_V_CPU_LIMIT) && (nlines == 0 || fatal_note)) {
        r->status = vs;
        snprintf(r->detail, sizeof r->detail, "valgrind did not finish within %.0f s (the kernel "
                 "took %.3f s CPU natively): %s", limit_s, native_cpu, detail);
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "too slow under valgrind: %s",
                          r->detail);
    } else if (nlines > 0 && !fatal_note) {
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
    return st;
}

/* The verdict of a compute-sanitizer run; as vg_verdict. The exit status decides (MC_EXIT
 * = errors found); the report only explains. */
static kf_status cs_verdict(const kf_verify_ctx *c, const kf_sbx *sb, kf_vstatus vs,
                            const char *detail, const kf_buf *out, double limit_s,
                            double native_wall, kf_vresult *r, kf_error *err) {
    const char *text = out->data ? out->data : "";
    int started = sb->live->stage >= KF_STAGE_START;
    kf_status st = KF_OK;
    kf_buf rep = {0};
    int nerr = -1;
    int nlines = kf_verify_cs_report(text, out->len, &rep, &nerr);
    const char *said = rep.data ? rep.data : "";
    if (vs == KF_V_OK && nerr <= 0) {
        if (check_region(c, sb, r, "run under compute-sanitizer")) r->status = KF_V_OK;
    } else if (vs == KF_V_MEMCHECK || nerr > 0) {
        /* a report: the memory error is the finding, whatever the runner did next (after a
         * device error the context is gone, so the runner's next call fails) */
        kf_buf msg = {0};
        kf_buf_puts(&msg, nlines > 0 || said[0] ? said : detail);
        if (vs != KF_V_MEMCHECK && vs != KF_V_OK) kf_buf_printf(&msg, "\n(then %s)", detail);
        fail(c, r, KF_V_MEMCHECK, "compute-sanitizer memcheck", msg.data);
        kf_buf_free(&msg);
    } else if (!started && vs != KF_V_TIMEOUT) {
        /* the checker failed before the runner started (bad option, no device support) */
        kf_buf msg = {0};
        if (said[0]) kf_buf_puts(&msg, said);
        else first_line(text, out->len, &msg);
        snprintf(r->detail, sizeof r->detail, "compute-sanitizer could not start the runner: %s",
                 msg.data && msg.data[0] ? msg.data : detail);
        kf_buf_free(&msg);
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", r->detail);
    } else if (vs == KF_V_TIMEOUT || vs == KF_V_CPU_LIMIT) {
        r->status = vs;
        snprintf(r->detail, sizeof r->detail, "compute-sanitizer did not finish within %.0f s "
                 "(the native run took %.3f s): %s", limit_s, native_wall, detail);
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                          "too slow under compute-sanitizer: %s", r->detail);
    } else if (vs == KF_V_LOAD_ERROR) {
        /* it loaded natively: the checker's environment cannot run it (driver too old for
         * this checker, ...), no verdict on the kernel */
        snprintf(r->detail, sizeof r->detail, "compute-sanitizer could not run the candidate "
                 "(it loaded natively): %s%s%s", detail, said[0] ? "; compute-sanitizer: " : "",
                 said);
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", r->detail);
    } else {
        kf_buf msg = {0};
        kf_buf_puts(&msg, detail);
        if (said[0]) kf_buf_printf(&msg, "\ncompute-sanitizer: %s", said);
        fail(c, r, vs, "run under compute-sanitizer", msg.data);
        kf_buf_free(&msg);
    }
    kf_buf_free(&rep);
    return st;
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
    int dev = kf_verify_is_device(b);
    int sanitizer = dev && memchecker_of(b) == KF_MEMCHECKER_COMPUTE_SANITIZER;
    char tool[PATH_MAX];
    kf_error te = {0};
    kf_status st = kf_verify_memcheck_tool(dev ? b->info.platform : "cpu", tool, sizeof tool, &te);
    if (st != KF_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", te.msg);
        if (err) *err = te;
        return st;
    }
    char runner[PATH_MAX], abs_art[PATH_MAX];
    int threads;
    kf_sbx sb;
    st = kf_verify_open_region(c, b, &artifact, runner, abs_art, &threads, &sb, r, err);
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
    const char *checker = sanitizer ? "compute-sanitizer" : "valgrind";

    /* 1. natively: the usual checks, and the time that scales the checker's limits */
    double native_cpu = 0, native_wall = 0;
    kf_sbx_limits lim = {
        .wall_s = o->wall_limit_s, .cpu_s = o->cpu_limit_s, .mem_bytes = o->mem_limit,
        .output_cap = o->output_cap, .threads = threads, .runner = runner,
        .workdir = c->workdir, .cpu_used = &native_cpu,
        /* as in any device run: drivers reserve address space, runtimes write files */
        .no_mem_limit = dev, .poll_output = dev,
    };
    /* every check here is on set 0: its reference readable (sets.c's memory plan) */
    if ((st = kf_verify_set_ready(c, 0, err)) != KF_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", err ? err->msg : "set 0's reference");
        goto done;
    }
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

    /* 2. under the checker */
    char exitarg[32];
    snprintf(exitarg, sizeof exitarg, "--error-exitcode=%d", MC_EXIT);
    const char *vg_wrap[] = {tool, "--tool=memcheck", exitarg, "--exit-on-first-error=yes",
                             "--leak-check=full", "--show-leak-kinds=definite",
                             "--errors-for-leak-kinds=definite", "--track-origins=no",
                             "--soname-synonyms=somalloc=NONE", "--num-callers=16", "-q",
                             "--log-fd=2", NULL};
    const char *cs_wrap[] = {tool, "--tool", "memcheck", exitarg,
                             "--print-limit", CS_PRINT_LIMIT, "--show-backtrace", "device",
                             "--leak-check", "full", "--padding", CS_PADDING,
                             "--report-api-errors", "no", "--check-exit-code", "no",
                             "--require-cuda-init", "no", "--target-processes",
                             "application-only", "--launch-timeout", "60", "--nvtx", "no",
                             "--destroy-on-device-error", "kernel", NULL};
    kf_sbx_limits vlim = lim;
    double limit;
    if (sanitizer) {
        limit = fmin(CS_BASE_S + CS_SLOWDOWN * native_wall, MC_MAX_S);
        vlim.wall_s = fmax(limit, o->wall_limit_s);
        vlim.cpu_s = fmax(2 * vlim.wall_s + 10, o->cpu_limit_s);
        vlim.wrapper = cs_wrap;
        vlim.no_landlock = 1; /* kf_verify_memcheck_confinement says so */
    } else {
        limit = fmin(MC_BASE_S + MC_SLOWDOWN * native_cpu, MC_MAX_S);
        vlim.wall_s = fmax(limit, o->wall_limit_s);
        vlim.cpu_s = fmax(vlim.wall_s + 10, o->cpu_limit_s);
        vlim.wrapper = vg_wrap;
        vlim.extra_env = "OMP_WAIT_POLICY=passive";
    }
    vlim.output_cap = o->output_cap > MC_OUTPUT_CAP ? o->output_cap : MC_OUTPUT_CAP;
    vlim.no_mem_limit = 1;
    vlim.checker_exit = MC_EXIT;
    vlim.output = &out;
    vlim.output_keep = MC_OUTPUT_KEEP;
    double vcpu = 0;
    vlim.cpu_used = &vcpu;
    kf_verify_load_set(c, &sb, 0);
    vlim.tag = MC_TAG_BASE + __atomic_add_fetch(&mc_counter, 1, __ATOMIC_RELAXED);
    double vwall = 0;
    st = kf_sbx_run(&sb, &vlim, &vs, detail, sizeof detail, &vwall, err);
    if (st != KF_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", err ? err->msg : "the checker could not be started");
        goto done;
    }
    kf_log(2, "memcheck: native run %.3f s (%.3f s CPU), %s run %.2f s (%.2f s CPU, limit %.0f s): %s",
           native_wall, native_cpu, checker, vwall, vcpu, vlim.wall_s, kf_vstatus_name(vs));
    if (sanitizer)
        st = cs_verdict(c, &sb, vs, detail, &out, vlim.wall_s, native_wall, r, err);
    else
        st = vg_verdict(c, &sb, vs, detail, &out, vlim.wall_s, native_cpu, r, err);
done:
    kf_buf_free(&out);
    kf_sbx_free(&sb);
    r->run_wall_s = kf_now() - t0;
    return st;
}

/* See verify.h. */
const char *kf_verify_memcheck_confinement(const kf_backend *b) {
    if (b && kf_verify_is_device(b) && memchecker_of(b) == KF_MEMCHECKER_COMPUTE_SANITIZER)
        return "run without Landlock and with local connect() allowed, which compute-sanitizer needs";
    return "";
}

/* See verify.h. */
const char *kf_verify_memcheck_flags(const kf_backend *b) {
#if defined(__x86_64__)
    /* valgrind 3.19 runs each FMA lane through a helper call: a 2048^3 f32 matmul spent
     * ~90% of its valgrind time there, and --tool=none was as slow as memcheck (measured,
     * docs/benchmarks/loop.md); mul + add instead, the accesses unchanged */
    /* valgrind 3.19 has no AVX-512; GCC keeps a loop-carried 64-byte vector in memory
     * without it, so the GEMM template gives its 64-byte tile a 32-byte text for this
     * build (src/synth/tpl_matmul.c, emit_ukr_strided) */
    if (b && memchecker_of(b) == KF_MEMCHECKER_VALGRIND && strstr(b->info.arch, "avx512f"))
        return "-mno-avx512f -mno-fma";
    if (b && memchecker_of(b) == KF_MEMCHECKER_VALGRIND) return "-mno-fma";
#endif
    return kf_verify_memcheck_flags_plain(b);
}

/* See verify.h. */
const char *kf_verify_memcheck_flags_plain(const kf_backend *b) {
    if (b && memchecker_of(b) == KF_MEMCHECKER_VALGRIND && strstr(b->info.arch, "avx512f"))
        return "-mno-avx512f";
    /* NVRTC and nvcc alike: line numbers in compute-sanitizer's device frames */
    if (b && memchecker_of(b) == KF_MEMCHECKER_COMPUTE_SANITIZER) return "-lineinfo";
    return "";
}
