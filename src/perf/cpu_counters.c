/*
 * CPU hardware counters of a command (instructions, cycles, cache references and misses,
 * branches and branch misses), as `perf stat` reads them, through perf_event_open.
 *
 * Design note. The command runs in a forked child that waits on a pipe until the counters
 * are attached to it (pid = child, inherit = 1 so its threads count, enable_on_exec so
 * only the command itself counts, user space only so an unprivileged user may count under
 * perf_event_paranoid <= 2). Many machines do not allow it: a virtual machine without a
 * virtual PMU has no hardware events (ENOENT / EOPNOTSUPP), perf_event_paranoid = 3 or more
 * forbids any (EACCES), a seccomp profile may refuse the call (EPERM / ENOSYS). Each is
 * KF_ERR_UNSUPPORTED with the reason: the diagnosis then says what was not measured.
 */
#include "kforge/perf.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum { EV_INSTR, EV_CYCLES, EV_CREF, EV_CMISS, EV_BR, EV_BMISS, NEV };

static const unsigned long long EVENTS[NEV] = {
    PERF_COUNT_HW_INSTRUCTIONS, PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_HW_CACHE_REFERENCES,
    PERF_COUNT_HW_CACHE_MISSES, PERF_COUNT_HW_BRANCH_INSTRUCTIONS, PERF_COUNT_HW_BRANCH_MISSES};

static int paranoid_level(void) {
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    int v = -99;
    if (f) {
        if (fscanf(f, "%d", &v) != 1) v = -99;
        fclose(f);
    }
    return v;
}

static kf_status why_not(int e, kf_error *err) {
    int p = paranoid_level();
    if (e == ENOENT || e == EOPNOTSUPP || e == ENODEV)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "CPU hardware counters not available: perf_event_open: %s (no PMU "
                            "exposed to this machine, e.g. a VM without a virtual PMU)", strerror(e));
    if (e == EACCES || e == EPERM)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "CPU hardware counters not allowed: perf_event_open: %s "
                            "(kernel.perf_event_paranoid = %d; <= 2 lets a user count its own "
                            "processes)", strerror(e), p);
    return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                        "CPU hardware counters not available: perf_event_open: %s", strerror(e));
}

/* See perf.h. */
kf_status kf_perf_cpu_counters(char *const argv[], kf_counters *out, kf_error *err) {
    memset(out, 0, sizeof *out);
    if (!argv || !argv[0]) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "cpu counters: no command");
    snprintf(out->source, sizeof out->source, "perf");
    snprintf(out->kernel, sizeof out->kernel, "%s", argv[0]);
    int go[2];
    if (pipe(go) != 0) return kf_error_set(err, KF_ERR_IO, NULL, 0, 0, "cpu counters: pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(go[0]);
        close(go[1]);
        return kf_error_set(err, KF_ERR_IO, NULL, 0, 0, "cpu counters: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(go[1]);
        char c;
        if (read(go[0], &c, 1) != 1) _exit(126); /* the parent gave up */
        close(go[0]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(go[0]);
    int fd[NEV];
    kf_status st = KF_OK;
    for (int i = 0; i < NEV; i++) fd[i] = -1;
    for (int i = 0; i < NEV && st == KF_OK; i++) {
        struct perf_event_attr a;
        memset(&a, 0, sizeof a);
        a.size = sizeof a;
        a.type = PERF_TYPE_HARDWARE;
        a.config = EVENTS[i];
        a.disabled = 1;
        a.enable_on_exec = 1;
        a.inherit = 1;
        a.exclude_kernel = 1;
        a.exclude_hv = 1;
        fd[i] = (int)syscall(SYS_perf_event_open, &a, pid, -1, -1, 0);
        if (fd[i] < 0) st = why_not(errno, err);
    }
    if (st != KF_OK) {
        kill(pid, SIGKILL);
        close(go[1]);
        waitpid(pid, NULL, 0);
        for (int i = 0; i < NEV; i++)
            if (fd[i] >= 0) close(fd[i]);
        return st;
    }
    double t0 = kf_now();
    if (write(go[1], "g", 1) != 1) st = kf_error_set(err, KF_ERR_IO, NULL, 0, 0, "cpu counters: cannot start the command");
    close(go[1]);
    int ws = 0;
    waitpid(pid, &ws, 0);
    out->duration_s = kf_now() - t0;
    unsigned long long v[NEV] = {0};
    for (int i = 0; i < NEV; i++) {
        if (st == KF_OK && read(fd[i], &v[i], sizeof v[i]) != (ssize_t)sizeof v[i])
            st = kf_error_set(err, KF_ERR_IO, NULL, 0, 0, "cpu counters: cannot read event %d", i);
        close(fd[i]);
    }
    if (st != KF_OK) return st;
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "cpu counters: '%s' did not exit 0 (status %d)",
                            argv[0], ws);
    /* every field a GPU counter would fill stays "not measured" */
    out->dram_pct = out->sm_pct = out->mem_pct = out->achieved_occ_pct = out->theoretical_occ_pct = -1;
    out->l1_hit_pct = out->l2_hit_pct = out->bank_conflicts = out->dram_bytes = -1;
    out->regs = out->smem_bytes = out->grid = out->block = -1;
    out->ipc = v[EV_CYCLES] ? (double)v[EV_INSTR] / (double)v[EV_CYCLES] : -1;
    out->cache_miss_pct = v[EV_CREF] ? 100.0 * (double)v[EV_CMISS] / (double)v[EV_CREF] : -1;
    out->branch_miss_pct = v[EV_BR] ? 100.0 * (double)v[EV_BMISS] / (double)v[EV_BR] : -1;
    return KF_OK;
}

/* See perf.h. */
int kf_perf_cpu_counters_usable(char *why, size_t cap) {
    char *argv[] = {"true", NULL};
    kf_counters c;
    kf_error e = {0};
    if (kf_perf_cpu_counters(argv, &c, &e) == KF_OK) return 1;
    if (why && cap) snprintf(why, cap, "%s", e.msg);
    return 0;
}
