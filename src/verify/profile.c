/*
 * The profiled run: a candidate that has already passed verification runs once more, on
 * input set 0, inside the sandbox with Nsight Compute (ncu) wrapped around kforge-runner,
 * and ncu's raw counter table comes back as text for kf_perf_ncu_parse (src/perf/ncu.c)
 * and the performance analysis agent. It is a measurement, not a check: it is never run
 * on a candidate that has not passed, and nothing in it changes a verdict.
 *
 * Sequence: open a region as for any run, load set 0 (inputs, poisoned outputs, fresh
 * guards), one run in check mode under ncu, then read the table from ncu's log file. No
 * native run first (the candidate was verified, and no limit is scaled from its time),
 * and no guard/input/output check after it: counters are not a verdict, and a candidate
 * that behaved differently under the profiler would only make its own counters wrong.
 *
 * ncu flags (found by kf_verify_profiler_tool: $KFORGE_NCU, PATH, $CUDA_HOME/bin,
 * /usr/local/cuda/bin), and why:
 *   --csv --page raw  the form kf_perf_ncu_parse reads: one row per profiled launch, every
 *       collected metric by its full name, a unit row, values in fixed units;
 *   --log-file ABS  ncu's output (the table and its own ==PROF==/==WARNING==/==ERROR==
 *       messages) goes to a file of kforge's choosing in the context's workdir, named
 *       kf-ncu-PID-TAG.csv (unique per run, deleted after it); absolute, because the
 *       child starts in the candidate's scratch directory. The candidate's stdout and
 *       stderr go to the sandbox's captured output as in every run, so nothing the kernel
 *       prints can become a counter;
 *   --target-processes application-only  only kforge-runner, the root process, is
 *       profiled (as under compute-sanitizer);
 *   --clock-control none  ncu's default locks the GPU to its base clocks for the
 *       measurement; kforge times candidates at the clocks the device runs at, so the
 *       counters' durations and % of peak must come from the same clocks;
 *   --launch-count 16  a check run launches each of the candidate's kernels once; 16
 *       covers multi-kernel candidates and bounds the run, since every profiled launch is
 *       replayed once per counter pass;
 *   --section SpeedOfLight Occupancy LaunchStats MemoryWorkloadAnalysis WarpStateStats
 *       SchedulerStats  the sections whose metrics ncu.c reads (durations and throughputs,
 *       achieved and theoretical occupancy, the launch's registers/shared memory/grid/
 *       block, DRAM bytes, cache hit rates, bank conflicts, stall reasons) and the issue
 *       activity behind them; not the full set, which would multiply the passes.
 *
 * Confinement (kf_verify_profile_confinement): the run is a wrapper run, as under
 * compute-sanitizer: the seccomp filter lets connect() reach local sockets (ncu's front
 * end and the library it injects into the runner talk through one) and there is no
 * Landlock (ncu and its injection write lock and temporary files outside the scratch
 * directory, e.g. under /tmp); capabilities are still dropped and the rlimits hold.
 * The candidate has passed the fully confined runs first. Without Landlock its process
 * could write files the user can write, the log file included (its name is unique, not
 * secret): counters are advice to the analysis agent, never part of a verdict.
 *
 * Limits: on a device backend wall = max(the context's wall limit, 180 s) (ncu's start
 * plus one replay pass per counter group per profiled launch; ASSUMED generous, not
 * measured yet); on the CPU (tests, with a stand-in ncu) the context's wall limit as it
 * is, so that a hang is caught as fast as in any run. CPU = max(2x wall + 10 s, the
 * context's CPU limit), no address-space limit (the injection reserves a lot), and the
 * output cap watched rather than set as RLIMIT_FSIZE on every backend, because that rlimit
 * would also bound the log file ncu writes from inside the sandbox. A run is ended by
 * killing its process group, the runner included; if kforge itself dies mid-run, ncu gets
 * the sandbox's SIGKILL on its parent's death but the runner, ncu's child, does not: it
 * ends at its CPU limit (the same holds for compute-sanitizer's run).
 *
 * Results: KF_OK with the log file's bytes (the table, possibly with ncu's ==PROF== lines,
 * which the parser skips); KF_ERR_RUNTIME when the candidate's run under ncu failed
 * (crash, timeout, ..., with ncu's first ==ERROR== line where it wrote one);
 * KF_ERR_UNSUPPORTED when the candidate's run completed but ncu produced no counters (no
 * permission to the GPU's performance counters, ERR_NVGPUCTRPERM; an unsupported GPU;
 * ncu failing after the run; also a log file over 64 MiB, which is not read), with ncu's
 * first ==ERROR== (else ==WARNING==) line.
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

#define PROF_DEVICE_MIN_WALL_S 180.0   /* the wall-limit floor on a device (see the top) */
#define PROF_OUTPUT_CAP (1ll << 20)    /* the candidate's stdout+stderr under ncu */
#define PROF_OUTPUT_KEEP (64u << 10)   /* bytes of it read back for ncu's messages */
#define PROF_LOG_MAX (64ll << 20)      /* a larger log file is not read */
#define PROF_LINE_MAX 300              /* bytes of ncu's message kept in the detail */
#define PROF_TAG_BASE 0x4e43000000000000ul /* file tags apart from verify.c's and memcheck.c's */

static unsigned long prof_counter;

/* See verify.h. */
kf_status kf_verify_profiler_tool(const char *platform, char *path, size_t cap, kf_error *err) {
    if (!path || cap == 0)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_verify_profiler_tool: no buffer");
    path[0] = 0;
    const kf_platform *p = kf_platform_find(platform);
    if (!p || p->profiler != KF_PROFILER_NCU)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "no profiler run for platform '%s' (Nsight Compute profiles CUDA "
                            "only)", platform && platform[0] ? platform : "cpu");
    return kf_verify_find_cuda_tool("ncu", "KFORGE_NCU", "ncu (Nsight Compute)", path, cap, err);
}

/* See verify.h. */
const char *kf_verify_profile_confinement(void) {
    return "run without Landlock and with local connect() allowed, which Nsight Compute needs "
           "(its front end talks to the library it injects through a local socket; both write "
           "outside the scratch directory)";
}

/* The first line of text (n bytes) that starts with prefix, printable and at most
 * PROF_LINE_MAX bytes, into b; 1 when there is one. */
static int find_line(const char *text, size_t n, const char *prefix, kf_buf *b) {
    size_t plen = strlen(prefix);
    const char *p = text, *end = text + n;
    while (text && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        if ((size_t)(e - p) >= plen && memcmp(p, prefix, plen) == 0) {
            if (e - p > PROF_LINE_MAX) e = p + PROF_LINE_MAX;
            while (e > p && (e[-1] == '\r' || e[-1] == ' ')) e--;
            for (const char *q = p; q < e; q++) {
                unsigned char ch = (unsigned char)*q;
                char o = ch == '\t' ? ' ' : (ch < 32 || ch > 126) ? '.' : (char)ch;
                kf_buf_putn(b, &o, 1);
            }
            return 1;
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}

/* What ncu said about its failure: its first ==ERROR== line, in its log file (where
 * --log-file sends it) or else in the captured output (where it writes before the log is
 * open), failing that its first ==WARNING== line; "" when it said nothing. */
static void ncu_said(const char *log, size_t loglen, const kf_buf *out, kf_buf *b) {
    const char *o = out->data;
    size_t on = out->data ? out->len : 0;
    if (find_line(log, loglen, "==ERROR==", b) || find_line(o, on, "==ERROR==", b) ||
        find_line(log, loglen, "==WARNING==", b) || find_line(o, on, "==WARNING==", b))
        return;
    kf_buf_puts(b, "");
}

/* Whether the log holds a table: a line that starts with a quote (ncu's own messages
 * start with "=="). */
static int has_table(const char *log, size_t n) {
    const char *p = log, *end = log + n;
    while (log && p < end) {
        if (*p == '"') return 1;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    return 0;
}

/* Profile an artifact under ncu; see verify.h. */
kf_status kf_verify_profile(kf_verify_ctx *c, kf_backend *b, const kf_candidate *cand,
                            const char *artifact, const char *tool, kf_buf *csv, char *detail,
                            size_t dcap, kf_error *err) {
    char scratch_detail[8];
    if (!detail || dcap == 0) {
        detail = scratch_detail;
        dcap = sizeof scratch_detail;
    }
    detail[0] = 0;
    if (!c || !cand || !artifact || !tool || !csv) {
        snprintf(detail, dcap, "kf_verify_profile: missing argument");
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_verify_profile: missing argument");
    }
    if (tool[0] != '/') {
        snprintf(detail, dcap, "kf_verify_profile: the profiler '%s' is not an absolute path", tool);
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "%s", detail);
    }
    char runner[PATH_MAX], abs_art[PATH_MAX];
    int threads;
    kf_sbx sb;
    kf_vresult r;
    memset(&r, 0, sizeof r);
    kf_status st = kf_verify_open_region(c, b, &artifact, runner, abs_art, &threads, &sb, &r, err);
    if (st != KF_OK) {
        snprintf(detail, dcap, "%s", r.detail);
        return st;
    }
    const kf_verify_opts *o = &c->opts;
    int dev = kf_verify_is_device(b);
    unsigned long tag = PROF_TAG_BASE + __atomic_add_fetch(&prof_counter, 1, __ATOMIC_RELAXED);
    char wd[PATH_MAX], logpath[PATH_MAX + 64];
    if (!realpath(c->workdir, wd)) snprintf(wd, sizeof wd, "%s", c->workdir);
    snprintf(logpath, sizeof logpath, "%s/kf-ncu-%ld-%lu.csv", wd, (long)getpid(), tag);
    unlink(logpath); /* a leftover must not pass for this run's table */

    kf_run_ctl *ctl = sb.ctl;
    snprintf(ctl->entry, sizeof ctl->entry, "%s", cand->entry[0] ? cand->entry : "kforge_kernel");
    snprintf(ctl->artifact, sizeof ctl->artifact, "%s", artifact);
    ctl->mode = KF_RUN_CHECK;
    const char *wrap[] = {tool, "--csv", "--page", "raw", "--log-file", logpath,
                          "--target-processes", "application-only", "--clock-control", "none",
                          "--launch-count", "16", "--section", "SpeedOfLight",
                          "--section", "Occupancy", "--section", "LaunchStats",
                          "--section", "MemoryWorkloadAnalysis", "--section", "WarpStateStats",
                          "--section", "SchedulerStats", NULL};
    kf_buf out = {0}, said = {0}, msg = {0};
    double wall = dev ? fmax(o->wall_limit_s, PROF_DEVICE_MIN_WALL_S) : o->wall_limit_s;
    kf_sbx_limits lim = {
        .wall_s = wall, .cpu_s = fmax(2 * wall + 10, o->cpu_limit_s), .mem_bytes = o->mem_limit,
        .output_cap = o->output_cap > PROF_OUTPUT_CAP ? o->output_cap : PROF_OUTPUT_CAP,
        .threads = threads, .runner = runner, .workdir = c->workdir, .tag = tag,
        .wrapper = wrap, .no_mem_limit = 1, .poll_output = 1,
        .no_landlock = 1, /* kf_verify_profile_confinement says so */
        .output = &out, .output_keep = PROF_OUTPUT_KEEP,
    };
    kf_verify_load_set(c, &sb, 0);
    kf_vstatus vs = KF_V_OK;
    char sdetail[1500];
    double took = 0;
    char *log = NULL;
    size_t loglen = 0;
    st = kf_sbx_run(&sb, &lim, &vs, sdetail, sizeof sdetail, &took, err);
    if (st != KF_OK) {
        snprintf(detail, dcap, "%s", err ? err->msg : "the runner could not be started under ncu");
        goto done;
    }
    kf_log(2, "profile: run under ncu %.2f s (limit %.0f s): %s", took, lim.wall_s,
           kf_vstatus_name(vs));
    struct stat lst;
    int have_log = stat(logpath, &lst) == 0 && S_ISREG(lst.st_mode);
    if (have_log && lst.st_size > PROF_LOG_MAX) {
        kf_buf_printf(&msg, "ncu's log file holds %lld bytes, more than the %lld read",
                      (long long)lst.st_size, (long long)PROF_LOG_MAX);
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, logpath, 0, 0, "%s", msg.data);
        goto done;
    }
    const char *no_table = have_log ? "its log file holds no table" : "no log file";
    if (have_log && kf_read_file(logpath, &log, &loglen, NULL) != KF_OK) {
        log = NULL;
        loglen = 0;
        have_log = 0;
        no_table = "its log file could not be read";
    }
    ncu_said(log, loglen, &out, &said);
    /* the runner's record of its own run: it finished the kernel, which returned 0 */
    int ran = ctl->magic == KF_RUN_MAGIC && ctl->done == 1 && ctl->kernel_rc == 0 &&
              sb.live->stage == KF_STAGE_DONE;
    if (vs != KF_V_OK && !ran) {
        kf_buf_printf(&msg, "the profiled run on set 0 failed (%s): %s", kf_vstatus_name(vs), sdetail);
        if (said.data[0]) kf_buf_printf(&msg, "; ncu: %s", said.data);
        st = kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "%s", msg.data);
    } else if (vs != KF_V_OK) {
        /* the candidate's run completed, ncu failed around it; the sandbox's words for a
         * non-zero exit are about the runner ("... before the run was complete"), so only
         * the status is kept */
        int code = -1;
        if (vs == KF_V_CRASH && sscanf(sdetail, "the process exited with status %d", &code) == 1)
            kf_buf_printf(&msg, "ncu exited with status %d after the candidate's run completed",
                          code);
        else
            kf_buf_printf(&msg, "ncu failed after the candidate's run completed (%s: %s)",
                          kf_vstatus_name(vs), sdetail);
        kf_buf_printf(&msg, "; ncu: %s", said.data[0] ? said.data : "(no ==ERROR== line)");
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", msg.data);
    } else if (!have_log || !has_table(log, loglen)) {
        kf_buf_printf(&msg, "ncu wrote no counters (%s): %s", no_table,
                      said.data[0] ? said.data : "it gave no ==ERROR== or ==WARNING== line");
        st = kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", msg.data);
    } else {
        kf_buf_putn(csv, log, loglen);
        st = KF_OK;
    }
done:
    if (msg.data) snprintf(detail, dcap, "%s", msg.data);
    unlink(logpath);
    free(log);
    kf_buf_free(&msg);
    kf_buf_free(&said);
    kf_buf_free(&out);
    kf_sbx_free(&sb);
    return st;
}
