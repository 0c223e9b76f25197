/*
 * The sandbox: runs a candidate only inside kforge-runner, a separate process, and turns
 * whatever happens to that process into a verdict.
 *
 * Buffers travel through one memfd mapped MAP_SHARED by both sides (layout in
 * runproto.h): no copies, and the parent inspects guards, inputs and outputs after the
 * child is gone. A region may serve several candidates of one task in turn (kf_sbx_reuse:
 * taken again only with its last run's processes all gone, its control and live pages
 * zeroed; the caller writes every other byte before the next run). The child is forked and, before exec, given its own process group,
 * stdout/stderr redirected to a file in the workdir, and rlimits: CPU time (SIGXCPU, then
 * SIGKILL at the hard limit), address space (region + mem_limit + a per-thread allowance
 * for stacks and malloc arenas), file size = the output cap (a flood dies of SIGXFSZ), a
 * process count bound, and no core dumps. Everything the child needs is prepared before
 * fork(): between fork and exec it only calls async-signal-safe functions, because the
 * parent may be multi-threaded.
 *
 * For the memory-checker run (memcheck.c) the caller may put a wrapper in front of the
 * runner (valgrind and its flags), lift the address-space limit, name the wrapper's
 * "errors found" exit status, and take a copy of the captured output before the file goes.
 *
 * Confinement (confine.c): the child starts a session of its own (no controlling
 * terminal), works in a scratch directory made fresh for this run and removed after it
 * (WORKDIR/kf-sbx-<pid>-<n>, capped in entries and bytes), with TMPDIR, HOME and the
 * runtime caches (POCL_CACHE_DIR, CUDA_CACHE_PATH, XDG_CACHE_HOME) pointed there and
 * secrets (*_KEY, *_TOKEN, ...) left out of its environment; it is pinned to --threads
 * CPUs; and before exec it gets no_new_privs, no capabilities, a Landlock domain (writes
 * only in the scratch directory and to the GPU/null device nodes) and a seccomp filter (no
 * sockets, io_uring, ptrace, setsid/setpgid, sched_setaffinity, ...).
 * kf_verify_sandbox_describe says which of these this machine provides.
 *
 * The handshake (lim->handshake; runproto.h; the calls are driven in handshake.c): the parent starts every call
 * through a pipe, times it with its own clock, prepares and checks calls through verify.c's
 * callbacks, and kills the process group the moment the last call has returned.
 *
 * The child also gets PR_SET_PDEATHSIG = SIGKILL, so it dies with kforge; note that the
 * "parent" there is the forking thread, so verification must run on a thread that
 * outlives the check (any ordinary caller does).
 *
 * The parent polls with waitid(WNOWAIT) and short sleeps (or waits on the handshake pipe)
 * under a wall-clock deadline. The process group is killed with SIGKILL while the leader is
 * still an unreaped zombie (its id cannot be reused yet), on timeout and after every normal
 * exit too; the filter keeps every descendant in that group, so none outlives a run.
 */
#include "verify/handshake.h"

#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)
/* Address space the runner needs besides the region and the kernel's own allowance:
 * executable, libc, libgomp, the candidate, and per thread a stack and a malloc arena. */
#define AS_BASE_BYTES (256ll << 20)
#define AS_PER_THREAD_BYTES (80ll << 20)

/* ---- the region ---- */

/* Lay out and map a region for nbufs buffers; the caller owns sb (kf_sbx_free). */
kf_status kf_sbx_new(const size_t *sizes, const int *is_output, int nbufs, kf_sbx *sb,
                     kf_error *err) {
    memset(sb, 0, sizeof *sb);
    sb->fd = -1;
    if (nbufs > KF_RUN_MAX_BUFS)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "the verifier supports at most %d inputs+outputs, the task has %d",
                            KF_RUN_MAX_BUFS, nbufs);
    size_t ctl = kf_run_round_up(sizeof(kf_run_ctl), KF_RUN_PAGE);
    uint64_t off = ctl + KF_RUN_PAGE;
    sb->data_bytes = 0;
    for (int i = 0; i < nbufs; i++) {
        off += KF_RUN_GUARD;
        sb->off[i] = off;
        sb->size[i] = sizes[i];
        sb->is_output[i] = is_output[i];
        sb->data_bytes += sizes[i];
        off = kf_run_round_up(off + sizes[i] + KF_RUN_GUARD, KF_RUN_ALIGN);
    }
    sb->nbufs = nbufs;
    sb->nargs = nbufs;
    sb->call_slot = -1;
    sb->ctl_size = ctl;
    sb->total = kf_run_round_up(off, KF_RUN_PAGE);
    sb->fd = memfd_create("kforge-run", MFD_CLOEXEC);
    if (sb->fd < 0)
        return kf_error_set(err, KF_ERR_INTERNAL, NULL, 0, 0, "memfd_create: %s", strerror(errno));
    if (ftruncate(sb->fd, (off_t)sb->total) != 0) {
        int e = errno;
        close(sb->fd);
        sb->fd = -1;
        return kf_error_set(err, e == ENOMEM || e == ENOSPC ? KF_ERR_NOMEM : KF_ERR_INTERNAL,
                            NULL, 0, 0, "cannot size the %.1f MiB buffer region: %s",
                            (double)sb->total / MIB, strerror(e));
    }
    void *p = mmap(NULL, sb->total, PROT_READ | PROT_WRITE, MAP_SHARED, sb->fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(sb->fd);
        sb->fd = -1;
        return kf_error_set(err, KF_ERR_NOMEM, NULL, 0, 0, "cannot map the %.1f MiB region: %s",
                            (double)sb->total / MIB, strerror(e));
    }
    sb->base = p;
    sb->ctl = p;
    sb->live = (kf_run_live *)(sb->base + ctl);
    return KF_OK;
}

/* The runner of the last run, killed while stopped and not yet reaped (kf_sbx.reap_pid):
 * reaped now, waiting for the end of its teardown. */
static void reap_pending(kf_sbx *sb) {
    if (sb->reap_pid <= 0) return;
    while (waitpid(sb->reap_pid, NULL, 0) < 0 && errno == EINTR) {}
    sb->reap_pid = 0;
}

void kf_sbx_reap(kf_sbx *sb) { reap_pending(sb); }

/* Grow a region (no run of it going: after kf_sbx_reuse) by nslots - 1 slots of the first
 * slot_nin buffers' sizes after its last buffer, laid out as kf_sbx_new lays out buffers;
 * see verify_int.h. */
kf_status kf_sbx_add_slots(kf_sbx *sb, int nslots, int slot_nin, kf_error *err) {
    int na = sb->nbufs, nb = na + (nslots - 1) * slot_nin;
    if (sb->nslots > 0 || nslots < 2 || nslots > KF_RUN_STASH_SLOTS || slot_nin < 1 || slot_nin > na ||
        nb > KF_RUN_MAX_BUFS)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_sbx_add_slots: %d slots of %d buffers do not fit", nslots,
                            slot_nin);
    uint64_t off = sb->off[na - 1] + sb->size[na - 1] + KF_RUN_GUARD;
    off = kf_run_round_up(off, KF_RUN_ALIGN);
    uint64_t noff[KF_RUN_MAX_BUFS], nsize[KF_RUN_MAX_BUFS];
    for (int k = na; k < nb; k++) {
        off += KF_RUN_GUARD;
        noff[k] = off;
        nsize[k] = sb->size[(k - na) % slot_nin];
        off = kf_run_round_up(off + nsize[k] + KF_RUN_GUARD, KF_RUN_ALIGN);
    }
    size_t total = kf_run_round_up(off, KF_RUN_PAGE);
    if (ftruncate(sb->fd, (off_t)total) != 0) {
        int e = errno;
        if (ftruncate(sb->fd, (off_t)sb->total) != 0) { /* (the old size back: kf_sbx_reuse checks it) */ }
        return kf_error_set(err, e == ENOMEM || e == ENOSPC ? KF_ERR_NOMEM : KF_ERR_INTERNAL, NULL, 0, 0,
                            "cannot grow the buffer region to %.1f MiB: %s", (double)total / MIB, strerror(e));
    }
    void *p = mremap(sb->base, sb->total, total, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) {
        int e = errno;
        if (ftruncate(sb->fd, (off_t)sb->total) != 0) { /* as above */ }
        return kf_error_set(err, KF_ERR_NOMEM, NULL, 0, 0, "cannot map the %.1f MiB region: %s", (double)total / MIB,
                            strerror(e));
    }
    sb->base = p;
    sb->ctl = p;
    sb->live = (kf_run_live *)(sb->base + sb->ctl_size);
    /* the last argument's trailing guard now ends where the first slot's leading one starts */
    for (int k = na; k < nb; k++) {
        sb->off[k] = noff[k];
        sb->size[k] = nsize[k];
        sb->is_output[k] = 0;
        sb->poison_size[k] = 0;
    }
    sb->total = total;
    sb->nbufs = nb;
    sb->nargs = na;
    sb->nslots = nslots;
    sb->slot_nin = slot_nin;
    for (int k = 0; k < nslots; k++) sb->slot_of[k] = (signed char)k;
    sb->slots_lent = 0;
    sb->slots_ok = 0;
    return KF_OK;
}

/* Unmap and close; safe on a zeroed or failed sb. The last run's runner is reaped first. */
void kf_sbx_free(kf_sbx *sb) {
    reap_pending(sb);
    if (sb->base) munmap(sb->base, sb->total);
    if (sb->fd >= 0) close(sb->fd);
    memset(sb, 0, sizeof *sb);
    sb->fd = -1;
}

/* A region kept from one candidate's verification to the next (issue 30; see
 * verify_int.h): the memfd must be the one made (its size unchanged: a shorter file would
 * fault the parent's next write; no seal added), no process of its last run's group may be
 * left (one could still write into the region: only a region the group never saw is safe
 * otherwise), and the control and live pages are zeroed as a new region's are. The parent's
 * record of the last run (hs_*, start_s, ...) is cleared; the layout stays. The data pages,
 * guards included, are left as they are: the caller writes every byte of them before the
 * first run (kf_verify_load_set). */
int kf_sbx_reuse(kf_sbx *sb) {
    if (!sb || !sb->base || sb->fd < 0) return 0;
    reap_pending(sb);
    struct stat st;
    if (fstat(sb->fd, &st) != 0 || st.st_size != (off_t)sb->total) return 0;
    int seals = fcntl(sb->fd, F_GET_SEALS);
    if (seals < 0 ? errno != EINVAL : (seals & ~F_SEAL_SEAL) != 0) return 0;
    /* kill(-pgid, 0) finds any process of the group, a zombie included; a pgid taken since
     * by an unrelated group only costs a new region */
    if (sb->last_pgid > 0 && !(kill(-sb->last_pgid, 0) != 0 && errno == ESRCH)) return 0;
    int fd = sb->fd, nbufs = sb->nbufs, reused = sb->reused;
    int nargs = sb->nargs, nslots = sb->nslots, slot_nin = sb->slot_nin, slots_ok = sb->slots_ok;
    signed char slot_of[KF_RUN_STASH_SLOTS];
    uint64_t slots_lent = sb->slots_lent;
    memcpy(slot_of, sb->slot_of, sizeof slot_of);
    uint8_t *base = sb->base;
    size_t total = sb->total, ctl_size = sb->ctl_size, data_bytes = sb->data_bytes;
    uint64_t off[KF_RUN_MAX_BUFS], size[KF_RUN_MAX_BUFS];
    int is_output[KF_RUN_MAX_BUFS];
    memcpy(off, sb->off, sizeof off);
    memcpy(size, sb->size, sizeof size);
    memcpy(is_output, sb->is_output, sizeof is_output);
    memset(sb, 0, sizeof *sb);
    sb->fd = fd;
    sb->base = base;
    sb->total = total;
    sb->ctl_size = ctl_size;
    sb->ctl = (kf_run_ctl *)base;
    sb->live = (kf_run_live *)(base + ctl_size);
    sb->nbufs = nbufs;
    sb->data_bytes = data_bytes;
    memcpy(sb->off, off, sizeof off);
    memcpy(sb->size, size, sizeof size);
    memcpy(sb->is_output, is_output, sizeof is_output);
    sb->reused = reused;
    sb->nargs = nargs;
    sb->nslots = nslots;
    sb->slot_nin = slot_nin;
    sb->slots_ok = slots_ok; /* the caller's record (verify.c: every slot as drawn) */
    memcpy(sb->slot_of, slot_of, sizeof slot_of);
    sb->slots_lent = slots_lent;
    sb->call_slot = -1;
    memset(base, 0, ctl_size + KF_RUN_PAGE);
    return 1;
}

/* Data pointer of buffer i (64-byte aligned). */
void *kf_sbx_data(const kf_sbx *sb, int i) { return sb->base + sb->off[i]; }

static uint64_t guard_end(const kf_sbx *sb, int i) {
    return i + 1 < sb->nbufs ? sb->off[i + 1] - KF_RUN_GUARD : sb->total;
}

/* Fill every guard zone with its position-dependent pattern. */
void kf_sbx_fill_guards(kf_sbx *sb) {
    for (int i = 0; i < sb->nbufs; i++) {
        for (uint64_t p = sb->off[i] - KF_RUN_GUARD; p < sb->off[i]; p++)
            sb->base[p] = kf_run_guard_byte(p);
        for (uint64_t p = sb->off[i] + sb->size[i], e = guard_end(sb, i); p < e; p++)
            sb->base[p] = kf_run_guard_byte(p);
    }
}

/* Find the touched guard byte nearest to some buffer's data; see verify_int.h. */
int kf_sbx_check_guards(const kf_sbx *sb, int *buf, int64_t *off) {
    for (int i = 0; i < sb->nbufs; i++) {
        uint64_t d = sb->off[i], end = d + sb->size[i];
        for (uint64_t p = end, e = guard_end(sb, i); p < e; p++)
            if (sb->base[p] != kf_run_guard_byte(p)) {
                *buf = i;
                *off = (int64_t)(p - d);
                return 1;
            }
        for (uint64_t p = d; p-- > d - KF_RUN_GUARD;)
            if (sb->base[p] != kf_run_guard_byte(p)) {
                *buf = i;
                *off = -(int64_t)(d - p);
                return 1;
            }
    }
    return 0;
}

/* ---- running ---- */

static const char *signal_abbrev(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGTRAP: return "SIGTRAP";
    case SIGSYS: return "SIGSYS";
    case SIGPIPE: return "SIGPIPE";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGALRM: return "SIGALRM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    }
    return "signal";
}

static void stage_text(const kf_run_live *live, int rep, uint32_t mode, char *buf, size_t cap) {
    int st = live->stage;
    switch (st) {
    case KF_STAGE_START: snprintf(buf, cap, "while the runner was starting"); break;
    case KF_STAGE_LOADING: snprintf(buf, cap, "while loading the artifact"); break;
    case KF_STAGE_LOADED: snprintf(buf, cap, "after loading, before the kernel ran"); break;
    case KF_STAGE_KERNEL:
        if (mode == KF_RUN_TIME && rep < 0) snprintf(buf, cap, "in a warm-up run of the kernel");
        else if (mode == KF_RUN_TIME) snprintf(buf, cap, "in timed rep %d of the kernel", rep + 1);
        else snprintf(buf, cap, "in the kernel");
        break;
    case KF_STAGE_BETWEEN: snprintf(buf, cap, "between timed reps"); break;
    case KF_STAGE_DONE: snprintf(buf, cap, "after the kernel finished (at exit)"); break;
    default: snprintf(buf, cap, "before the runner started"); break;
    }
}

/* Up to cap-1 printable bytes of the output file: its head or its tail. */
static void output_excerpt(int fd, int tail, char *buf, size_t cap) {
    buf[0] = 0;
    struct stat stt;
    if (fd < 0 || fstat(fd, &stt) != 0 || stt.st_size <= 0 || cap < 2) return;
    size_t want = cap - 1;
    off_t from = 0;
    if (tail && stt.st_size > (off_t)want) from = stt.st_size - (off_t)want;
    ssize_t n = pread(fd, buf, want, from);
    if (n <= 0) {
        buf[0] = 0;
        return;
    }
    for (ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\n' || c == '\t') buf[i] = ' ';
        else if (c < 32 || c > 126) buf[i] = '.';
    }
    while (n > 0 && buf[n - 1] == ' ') n--;
    buf[n] = 0;
}

static void clamp_limit(int res, rlim_t want_soft, rlim_t want_hard, struct rlimit *out) {
    struct rlimit cur;
    if (getrlimit(res, &cur) != 0) cur.rlim_max = RLIM_INFINITY;
    if (cur.rlim_max != RLIM_INFINITY) {
        if (want_hard > cur.rlim_max) want_hard = cur.rlim_max;
        if (want_soft > want_hard) want_soft = want_hard;
    }
    out->rlim_cur = want_soft;
    out->rlim_max = want_hard;
}

/* Threads on the whole system (from /proc/loadavg), a bound for RLIMIT_NPROC that leaves
 * the user's other processes alone while still stopping a fork bomb. */
static long system_threads(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return 4096;
    double a, b, c;
    long running = 0, total = 0;
    int n = fscanf(f, "%lf %lf %lf %ld/%ld", &a, &b, &c, &running, &total);
    fclose(f);
    return n == 5 && total > 0 ? total : 4096;
}

extern char **environ;

/* ---- the candidate's scratch directory and environment ---- */

/* WORKDIR/kf-sbx-<pid>-<n>: the one directory the candidate may write (confine.c), made
 * fresh and empty for every run and removed after it, so nothing one run writes reaches
 * the next (a kernel that memoises results in files between its check runs and its timing
 * run, issue 24). The device runtimes' caches live there too, so they start cold in every
 * run (their cost is in docs/benchmarks.md). Artifacts live in WORKDIR itself, out of
 * every candidate's reach. */
static unsigned long scratch_counter;

static kf_status scratch_dir(const char *workdir, char *out, size_t cap, kf_error *err) {
    char wd[PATH_MAX];
    if (!realpath(workdir, wd))
        return kf_error_set(err, KF_ERR_IO, workdir, 0, 0, "workdir: %s", strerror(errno));
    unsigned long n = __atomic_add_fetch(&scratch_counter, 1, __ATOMIC_RELAXED);
    if ((size_t)snprintf(out, cap, "%s/kf-sbx-%ld-%lu", wd, (long)getpid(), n) >= cap)
        return kf_error_set(err, KF_ERR_ARG, workdir, 0, 0, "workdir path is too long");
    if (mkdir(out, 0700) != 0) {
        /* a leftover of a kforge that died with this pid: not ours to trust, gone */
        int e = errno;
        if (e == EEXIST) {
            kf_sbx_remove_tree(out);
            e = mkdir(out, 0700) == 0 ? 0 : errno;
        }
        if (e)
            return kf_error_set(err, KF_ERR_IO, out, 0, 0, "cannot create the candidate's scratch "
                                "directory: %s", strerror(e));
    }
    struct stat st;
    if (lstat(out, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return kf_error_set(err, KF_ERR_IO, out, 0, 0, "the candidate's scratch directory is "
                            "not a directory of ours");
    return KF_OK;
}

/* Files (entries of any kind, directories included) and bytes (allocated blocks, so a
 * sparse file counts what it holds) under the directory dfd, at most max_files entries
 * counted; symbolic links are counted, never followed. dfd is consumed. */
static void tree_usage(int dfd, int depth, int64_t *files, int64_t *bytes, int64_t max_files) {
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return;
    }
    struct dirent *de;
    while (*files <= max_files && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        struct stat st;
        (*files)++;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        *bytes += (int64_t)st.st_blocks * 512;
        if (S_ISDIR(st.st_mode) && depth >= 64) {
            *files = max_files + 1; /* nested past what is walked: counted as over the cap */
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) tree_usage(sub, depth + 1, files, bytes, max_files);
        }
    }
    closedir(d);
}

/* Usage of the scratch directory path (see tree_usage). */
static void scratch_usage(const char *path, int64_t *files, int64_t *bytes) {
    *files = *bytes = 0;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) tree_usage(fd, 0, files, bytes, KF_SCRATCH_MAX_FILES);
}

/* Remove everything beneath dfd (consumed): directories the candidate made unreadable are
 * opened up first (we own them), links are removed, never followed. */
static void tree_clear(int dfd, int depth) {
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            fchmodat(dirfd(d), de->d_name, 0700, 0);
            int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0 && depth < 256) tree_clear(sub, depth + 1);
            else if (sub >= 0) close(sub);
            unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
        } else {
            unlinkat(dirfd(d), de->d_name, 0);
        }
    }
    closedir(d);
}

/* See verify_int.h. */
void kf_sbx_remove_tree(const char *path) {
    chmod(path, 0700);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) tree_clear(fd, 0);
    rmdir(path);
}

/* Variables the child does not inherit: what the sandbox sets itself, and secrets (the
 * LLM keys): a candidate's output reaches the run record and the model's feedback. */
static int env_dropped(const char *kv) {
    static const char *const set[] = {"OMP_NUM_THREADS=", "TMPDIR=", "POCL_CACHE_DIR=",
                                      "CUDA_CACHE_PATH=", "XDG_CACHE_HOME=", "HOME="};
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++)
        if (strncmp(kv, set[i], strlen(set[i])) == 0) return 1;
    const char *eq = strchr(kv, '=');
    size_t n = eq ? (size_t)(eq - kv) : strlen(kv);
    static const char *const tails[] = {"_KEY", "_TOKEN", "_SECRET", "_PASSWORD"};
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        size_t t = strlen(tails[i]);
        if (n >= t && strncmp(kv + n - t, tails[i], t) == 0) return 1;
    }
    return 0;
}

/* "1.5 GiB", "640 MiB", "64 KiB" */
static void size_text(int64_t v, char *buf, size_t cap) {
    if (v >= (1ll << 30)) snprintf(buf, cap, "%.1f GiB", (double)v / (1ll << 30));
    else if (v >= (1ll << 20)) snprintf(buf, cap, "%.0f MiB", (double)v / (1ll << 20));
    else snprintf(buf, cap, "%lld KiB", (long long)(v >> 10));
}

/* The rlimit part of the description. as < 0: no address-space limit; fsize < 0: output
 * cap watched by polling (device runs). */
static void limits_text(kf_buf *b, double cpu_s, double wall_s, int64_t as, int64_t output_cap,
                        int polled, long nproc, int nproc_applies) {
    char as_txt[32], out_txt[32];
    if (as >= 0) size_text(as, as_txt, sizeof as_txt);
    else snprintf(as_txt, sizeof as_txt, "unlimited (device driver)");
    size_text(output_cap, out_txt, sizeof out_txt);
    kf_buf_printf(b, "; rlimits: cpu %.0f s, wall %.3g s, address space %s, nproc %ld%s, "
                  "output %s%s, no core dumps", ceil(cpu_s > 0 ? cpu_s : 1), wall_s, as_txt, nproc,
                  nproc_applies ? "" : " (not enforced: running as root)", out_txt,
                  polled ? " (watched)" : " (file size)");
}

/* See verify.h. */
unsigned kf_verify_sandbox_describe(const kf_verify_ctx *c, const kf_backend *b, char *buf,
                                    size_t cap) {
    if (!buf || !cap) return 0;
    kf_verify_opts dflt;
    kf_verify_opts_default(&dflt);
    const kf_verify_opts *o = c ? &c->opts : &dflt;
    const char *wd = c ? c->workdir : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    char abs_wd[PATH_MAX], scratch[PATH_MAX + 32];
    if (realpath(wd, abs_wd)) wd = abs_wd; /* as the runs name it */
    snprintf(scratch, sizeof scratch, "%s/kf-sbx-<candidate>/", wd);
    kf_confine cf;
    kf_confine_probe(&cf);
    char head[900];
    unsigned flags = kf_confine_describe(&cf, scratch, head, sizeof head);
    int dev = b && kf_verify_is_device(b);
    int threads = o->threads > 0 ? o->threads : (b && b->info.threads > 0 ? b->info.threads : 0);
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    int64_t data = 0;
    for (int i = 0; c && i < c->nin; i++) data += (int64_t)c->in_bytes[i];
    for (int j = 0; c && j < c->nout; j++) data += (int64_t)c->out_bytes[j];
    int64_t as = dev ? -1 : data + o->mem_limit + AS_BASE_BYTES + (int64_t)threads * AS_PER_THREAD_BYTES;
    /* RLIMIT_NPROC binds neither uid 0 nor a holder of CAP_SYS_RESOURCE/CAP_SYS_ADMIN; the
     * confined child holds no capabilities */
    int nproc_applies = !cf.root && (cf.on || !cf.drop_caps);
    if (nproc_applies) flags |= KF_SANDBOX_NPROC;
    kf_buf t = {0};
    kf_buf_puts(&t, head);
    limits_text(&t, o->cpu_limit_s, o->wall_limit_s, as, o->output_cap, dev,
                system_threads() + threads + 64, nproc_applies);
    snprintf(buf, cap, "%s", t.data);
    kf_buf_free(&t);
    return flags;
}

/* What kf_sbx_run has set up before the child exists, released when it cannot be started
 * (the handshake pipes, the argument and environment arrays, the output file, /dev/null,
 * the confinement and the scratch directory). */
static void start_failed(const int *gp, const int *dp, char **envp, char **argv, int outfd,
                         const char *outpath, int devnull, kf_confine *cf, const char *scratch) {
    for (int i = 0; i < 2; i++) {
        if (gp[i] >= 0) close(gp[i]);
        if (dp[i] >= 0) close(dp[i]);
    }
    free(envp);
    free(argv);
    close(outfd);
    unlink(outpath);
    if (devnull >= 0) close(devnull);
    kf_confine_release(cf);
    kf_sbx_remove_tree(scratch);
}

/* Run the runner once; see verify_int.h for the contract. */
kf_status kf_sbx_run(kf_sbx *sb, const kf_sbx_limits *lim, kf_vstatus *vs, char *detail,
                     size_t cap, double *wall_s, kf_error *err) {
    kf_run_ctl *ctl = sb->ctl;
    kf_run_live *live = sb->live;
    *vs = KF_V_INTERNAL;
    detail[0] = 0;
    if (wall_s) *wall_s = 0;
    reap_pending(sb); /* one runner of this region at a time, alive or dying */
    /* the layout, from the parent's own copy */
    ctl->magic = KF_RUN_MAGIC;
    ctl->version = KF_RUN_VERSION;
    ctl->total_size = sb->total;
    ctl->live_offset = sb->ctl_size;
    ctl->nbufs = sb->nbufs;
    ctl->nargs = sb->nargs;
    ctl->nslots = sb->nslots;
    ctl->slot_nin = sb->slot_nin;
    for (int i = 0; i < sb->nbufs; i++) {
        ctl->bufs[i].offset = sb->off[i];
        ctl->bufs[i].size = sb->size[i];
        ctl->bufs[i].is_output = sb->is_output[i];
        ctl->bufs[i].poison_size = sb->is_output[i] ? sb->poison_size[i] : 0;
    }
    ctl->done = 0;
    ctl->kernel_rc = 0;
    ctl->reps = 0;
    ctl->warmups = 0;
    ctl->message[0] = 0;
    live->stage = -1;
    live->rep = -1;
    live->nomem = 0;
    live->nomem_bytes = 0;
    uint32_t mode = ctl->mode;

    /* the candidate's scratch directory and its confinement, before anything to undo */
    char scratch[PATH_MAX + 32], pocl_dir[PATH_MAX + 64] = "";
    kf_status sst = scratch_dir(lim->workdir, scratch, sizeof scratch, err);
    if (sst != KF_OK) return sst;
    /* A candidate of a platform without host code (OpenCL: the platform table's GPU rows
     * that have no host form) runs no code of its own on the host: only the driver (PoCL),
     * kforge's own runner code, writes files in its runs. Its kernel cache stays warm across one candidate's runs in
     * WORKDIR/kf-pocl-<hash of the artifact> (never shared between candidates), as before
     * the scratch directory became per run: every run rebuilding the program cost 1.4-1.9 s
     * a verification on the 2-vCPU VM. Its files are PoCL's, not the candidate's. */
    const kf_platform *tpf = kf_platform_of_target(ctl->target);
    if (tpf && tpf->is_gpu && !tpf->host_form) {
        char wd[PATH_MAX];
        if (realpath(lim->workdir, wd)) {
            uint64_t h = kf_hash64(ctl->artifact, strnlen(ctl->artifact, sizeof ctl->artifact),
                                   0x6b662d706f636cull);
            snprintf(pocl_dir, sizeof pocl_dir, "%s/kf-pocl-%016llx", wd, (unsigned long long)h);
            struct stat pst;
            if ((mkdir(pocl_dir, 0700) != 0 && errno != EEXIST) || lstat(pocl_dir, &pst) != 0 ||
                !S_ISDIR(pst.st_mode) || pst.st_uid != geteuid())
                pocl_dir[0] = 0; /* then the cache is the run's own, in its scratch */
        }
    }
    kf_confine cf;
    sst = kf_confine_prepare(&cf, scratch, pocl_dir[0] ? pocl_dir : NULL, lim->wrapper != NULL,
                             lim->no_landlock, err);
    if (sst != KF_OK) {
        kf_sbx_remove_tree(scratch);
        return sst;
    }

    char outpath[1200];
    snprintf(outpath, sizeof outpath, "%s/kf-run-%ld-%lu.out", lim->workdir, (long)getpid(),
             lim->tag);
    int outfd = open(outpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (outfd < 0) {
        int e = errno;
        kf_confine_release(&cf);
        kf_sbx_remove_tree(scratch);
        return kf_error_set(err, KF_ERR_IO, outpath, 0, 0, "cannot create the runner's output file: %s",
                            strerror(e));
    }
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

    /* environment: ours, less secrets, with OMP_NUM_THREADS set and the temporary files and
     * runtime caches (PoCL, the CUDA JIT, anything under XDG_CACHE_HOME) pointed into the
     * scratch directory, the one place the candidate's process may write */
    size_t nenv = 0;
    while (environ && environ[nenv]) nenv++;
    char **envp = kf_calloc(nenv + 8, sizeof *envp);
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
        if (!env_dropped(environ[i])) envp[k++] = environ[i];
    char omp[64], tmpdir[PATH_MAX + 64], pocl[PATH_MAX + 64], nvcache[PATH_MAX + 64],
        xdg[PATH_MAX + 64], home[PATH_MAX + 64];
    snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%d", lim->threads > 0 ? lim->threads : 1);
    snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", scratch);
    if (pocl_dir[0]) snprintf(pocl, sizeof pocl, "POCL_CACHE_DIR=%s", pocl_dir);
    else snprintf(pocl, sizeof pocl, "POCL_CACHE_DIR=%s/pocl", scratch);
    snprintf(nvcache, sizeof nvcache, "CUDA_CACHE_PATH=%s/nv", scratch);
    snprintf(xdg, sizeof xdg, "XDG_CACHE_HOME=%s/cache", scratch);
    /* the CUDA driver creates $HOME/.nv/ComputeCache whatever CUDA_CACHE_PATH says (seen
     * on the H200): in the scratch directory it is the run's, not the user's */
    snprintf(home, sizeof home, "HOME=%s", scratch);
    envp[k++] = omp;
    envp[k++] = tmpdir;
    envp[k++] = pocl;
    envp[k++] = nvcache;
    envp[k++] = xdg;
    envp[k++] = home;
    if (lim->extra_env) envp[k++] = (char *)lim->extra_env;
    envp[k] = NULL;
    /* absolute: the child starts in the scratch directory */
    char runner[PATH_MAX];
    if (lim->runner[0] == '/' || !realpath(lim->runner, runner))
        snprintf(runner, sizeof runner, "%s", lim->runner);
    char fdarg[] = "3";
    /* argv: the wrapper's words (a memory checker), if any, then "runner FD" */
    size_t nwrap = 0;
    while (lim->wrapper && lim->wrapper[nwrap]) nwrap++;
    char **argv = kf_calloc(nwrap + 3, sizeof *argv);
    for (size_t i = 0; i < nwrap; i++) argv[i] = (char *)lim->wrapper[i];
    argv[nwrap] = runner;
    argv[nwrap + 1] = fdarg;
    const char *exe = argv[0];

    struct rlimit rl_cpu, rl_as, rl_fsize, rl_nproc, rl_core;
    rlim_t cpu = (rlim_t)ceil(lim->cpu_s > 0 ? lim->cpu_s : 1);
    if (cpu < 1) cpu = 1;
    clamp_limit(RLIMIT_CPU, cpu, cpu + 1, &rl_cpu);
    int threads = lim->threads > 0 ? lim->threads : 1;
    int64_t as = (int64_t)sb->total + lim->mem_bytes + AS_BASE_BYTES +
                 (int64_t)threads * AS_PER_THREAD_BYTES + (int64_t)ctl->flush_bytes;
    if (lim->no_mem_limit) clamp_limit(RLIMIT_AS, RLIM_INFINITY, RLIM_INFINITY, &rl_as);
    else clamp_limit(RLIMIT_AS, (rlim_t)as, (rlim_t)as, &rl_as);
    rlim_t fsz = (rlim_t)(lim->output_cap > 0 ? lim->output_cap : 0);
    /* device runtimes write files of their own (PoCL's kernel cache, the driver's), so
     * there the cap is enforced by watching the output file instead */
    if (lim->poll_output) fsz = RLIM_INFINITY;
    clamp_limit(RLIMIT_FSIZE, fsz, fsz, &rl_fsize);
    rlim_t np = (rlim_t)(system_threads() + threads + 64);
    clamp_limit(RLIMIT_NPROC, np, np, &rl_nproc);
    rl_core.rlim_cur = rl_core.rlim_max = 0;

    /* --threads N is enforced, not advice: the child runs on N CPUs of the ones kforge may
     * use (the first N of its affinity mask; give concurrent kforge processes disjoint core
     * sets with taskset), and the filter refuses sched_setaffinity to widen it */
    cpu_set_t pin;
    int pinned = 0;
    CPU_ZERO(&pin);
    {
        cpu_set_t mine;
        CPU_ZERO(&mine);
        if (lim->threads > 0 && sched_getaffinity(0, sizeof mine, &mine) == 0 &&
            CPU_COUNT(&mine) > lim->threads) {
            for (int c = 0, k = 0; c < CPU_SETSIZE && k < lim->threads; c++)
                if (CPU_ISSET(c, &mine)) {
                    CPU_SET(c, &pin);
                    k++;
                }
            pinned = 1;
        }
    }

    hs_run hs;
    memset(&hs, 0, sizeof hs);
    hs.go_fd = hs.done_fd = -1;
    hs.dev_set = hs.keeping = -1;
    hs.sb_cpu_first = -1;
    sb->hs_cpu_s = sb->hs_run_s = 0;
    sb->hs_pinned = pinned ? lim->threads : 0;
    int gp[2] = {-1, -1}, dp[2] = {-1, -1};
    int use_hs = lim->handshake && !lim->wrapper;
    sb->hs_reps = sb->hs_warm = sb->hs_calls = sb->hs_evicted = sb->hs_pings = 0;
    sb->hs_last_set = sb->hs_fail_set = sb->hs_fail_call = sb->hs_call_timeout = 0;
    sb->hs_checks_end_s = 0;
    sb->hs_stop = "";
    sb->dev_kept = 0;
    if (use_hs) {
        /* the parent's copy of the timing plan: the control page is the runner's to write */
        hs.mode = mode;
        hs.min_reps = ctl->min_reps > 0 ? ctl->min_reps : 1;
        hs.max_reps = ctl->max_reps > 0 ? ctl->max_reps : 1;
        if (hs.min_reps > hs.max_reps) hs.min_reps = hs.max_reps;
        hs.min_time = ctl->min_time_s;
        hs.warmup = ctl->warmup_s;
        hs.budget = ctl->budget_s;
        hs.device = tpf && tpf->is_gpu;
        hs.flush = ctl->flush_bytes > 0 || (ctl->fresh_outputs && !hs.device);
        hs.fresh = ctl->fresh_outputs && !hs.device;
        hs.evict = lim->evict && mode == KF_RUN_TIME && kf_sbx_can_evict();
        /* what the runner may read is the same in a check run and a timing run: the plan is
         * the parent's alone (the flush size and fresh_outputs are set for both runs by the
         * caller; the runner acts on them only when told to flush) */
        ctl->mode = KF_RUN_TIME;
        ctl->min_reps = ctl->max_reps = 0;
        ctl->min_time_s = ctl->warmup_s = ctl->budget_s = 0;
        hs.lim = lim;
        double now = kf_now(); /* which calls are checked: only this process knows */
        kf_verify_rng_seed(&hs.rng, kf_hash64(&now, sizeof now, (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&hs));
        if (pipe2(gp, O_CLOEXEC) != 0 || pipe2(dp, O_CLOEXEC) != 0) use_hs = 0;
        if (!use_hs) {
            int e = errno;
            start_failed(gp, dp, envp, argv, outfd, outpath, devnull, &cf, scratch);
            return kf_error_set(err, KF_ERR_INTERNAL, NULL, 0, 0, "pipe: %s", strerror(e));
        }
    }
    ctl->handshake = use_hs;

    double t0 = kf_now();
    hs.t_fork = t0;
    sb->start_s = 0;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        start_failed(gp, dp, envp, argv, outfd, outpath, devnull, &cf, scratch);
        return kf_error_set(err, KF_ERR_INTERNAL, NULL, 0, 0, "fork: %s", strerror(e));
    }
    if (pid > 0) sb->last_pgid = pid;
    if (pid == 0) {
        /* child: async-signal-safe calls only, until execve. A session of its own: its own
         * process group (killed whole below) and no controlling terminal, so nothing in it
         * can read the terminal or push input into it. */
        if (setsid() < 0) setpgid(0, 0);
        /* die with kforge (a sleeping kernel would otherwise outlive a killed kforge:
         * it left the terminal's process group, so Ctrl-C does not reach it) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(126);
        int mfd = fcntl(sb->fd, F_DUPFD, 10); /* the copy is not close-on-exec */
        if (mfd < 0) _exit(126);
        int rfd = cf.ruleset_fd >= 0 ? fcntl(cf.ruleset_fd, F_DUPFD_CLOEXEC, 10) : -1;
        if (cf.ruleset_fd >= 0 && rfd < 0) _exit(126);
        int gfd = use_hs ? fcntl(gp[0], F_DUPFD, 10) : -1, dfd = use_hs ? fcntl(dp[1], F_DUPFD, 10) : -1;
        if (use_hs && (gfd < 0 || dfd < 0)) _exit(126);
        if (devnull >= 0) dup2(devnull, 0);
        dup2(outfd, 1);
        dup2(outfd, 2);
        dup2(mfd, 3);
        if (use_hs && (dup2(gfd, KF_RUN_GO_FD) < 0 || dup2(dfd, KF_RUN_DONE_FD) < 0)) _exit(126);
        if (chdir(scratch) != 0) _exit(126);
        if (pinned && sched_setaffinity(0, sizeof pin, &pin) != 0) _exit(126);
        if (kf_confine_apply(&cf, rfd, ctl->message, sizeof ctl->message) != 0) _exit(KF_CONFINE_EXIT);
#ifdef SYS_close_range
        syscall(SYS_close_range, use_hs ? (unsigned)KF_RUN_DONE_FD + 1 : 4u, ~0u, 0u);
#endif
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        for (int s = 1; s < NSIG; s++)
            if (s != SIGKILL && s != SIGSTOP) sigaction(s, &sa, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setrlimit(RLIMIT_CORE, &rl_core);
        setrlimit(RLIMIT_NPROC, &rl_nproc);
        setrlimit(RLIMIT_CPU, &rl_cpu);
        setrlimit(RLIMIT_FSIZE, &rl_fsize);
        setrlimit(RLIMIT_AS, &rl_as);
        execve(exe, argv, envp);
        _exit(127);
    }
    /* No setpgid(pid, pid) here: it would make the child a group leader before its
     * setsid(), which then fails. Until the child has run setsid() (its first call) the
     * group kill below misses, and the kill of the pid itself does it. */
    free(envp);
    free(argv);
    if (devnull >= 0) close(devnull);
    kf_confine_release(&cf);
    if (use_hs) {
        close(gp[0]);
        close(dp[1]);
        hs.go_fd = gp[1];
        hs.done_fd = dp[0];
        hs.pid = pid;
    }

    double deadline = t0 + (lim->wall_s > 0 ? lim->wall_s : 1e9);
    int timed_out = 0, polled_flood = 0, scratch_flood = 0, killed_stopped = 0;
    long nap = 50000;
    double last_watch = 0, last_walk = 0;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (hs.finished) {
            /* the results are in (the outputs in the region, the times here): the runner
             * dies now, before anything of the kernel's runs after its last call */
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            /* A run stopped whole (hs_stop: the leader's stop reported, every other process
             * of its group seen stopped) cannot run anything of its own again, nor end
             * otherwise than by this SIGKILL: its verdict is known now, and the teardown of
             * its address space (a page table entry per 4 KiB of the region: 16-38 ms for
             * 128 MiB on the 2-vCPU VM, a fifth of a check run) goes on while the parent
             * compares and writes the next set; the next run or kf_sbx_free reaps it (issue
             * 30). Device runners (a driver's teardown) and callers that read the run's CPU
             * time are waited for, as every run was before. */
            if (hs.stopped && !hs.stuck && !hs.device && !lim->cpu_used) {
                killed_stopped = 1;
                break;
            }
            while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR) {}
            break;
        }
        int w = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if (w == 0 && si.si_pid == pid) break;
        if (w < 0 && errno != EINTR) break;
        /* inside a timed call the parent stays out of the way: it watches the output every
         * 50 ms there and walks the scratch directory once a second (a walk delays reading
         * the call's end, so it is kept rare inside calls; between calls and at the end of
         * the run it is done every time) */
        if (hs.in_call && kf_now() - last_watch < 0.05 && kf_now() < deadline + hs.parent_s) {
            struct pollfd pf = {hs.done_fd, POLLIN, 0};
            double left = deadline + hs.parent_s - kf_now();
            int ms = left < 0.05 ? (int)(left * 1e3) + 1 : 50;
            if (poll(&pf, 1, ms) > 0) kf_hs_read(&hs, sb);
            continue;
        }
        int walk = !hs.in_call || kf_now() - last_walk >= 1.0;
        last_watch = kf_now();
        struct stat fst;
        if (lim->poll_output && lim->output_cap > 0 && fstat(outfd, &fst) == 0 &&
            fst.st_size > lim->output_cap) {
            polled_flood = 1;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            memset(&si, 0, sizeof si);
            while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR) {}
            break;
        }
        int64_t sf = 0, sbytes = 0;
        if (walk) {
            scratch_usage(scratch, &sf, &sbytes);
            last_walk = kf_now();
        }
        if (sf > KF_SCRATCH_MAX_FILES || sbytes > KF_SCRATCH_MAX_BYTES) {
            scratch_flood = 1;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            memset(&si, 0, sizeof si);
            while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR) {}
            break;
        }
        if (kf_now() >= deadline + hs.parent_s ||
            (hs.in_call && lim->call_wall_s > 0 && kf_now() - hs.t_go > lim->call_wall_s)) {
            timed_out = 1;
            sb->hs_call_timeout = kf_now() < deadline + hs.parent_s;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            memset(&si, 0, sizeof si);
            while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR) {}
            break;
        }
        if (hs.done_fd >= 0) {
            struct pollfd pf = {hs.done_fd, POLLIN, 0};
            struct timespec ts = {0, nap};
            if (ppoll(&pf, 1, &ts, NULL) > 0) {
                kf_hs_read(&hs, sb);
                nap = 50000;
                continue;
            }
        } else {
            struct timespec ts = {0, nap};
            nanosleep(&ts, NULL);
        }
        if (nap < 5000000) nap *= 2;
    }
    if (hs.go_fd >= 0) close(hs.go_fd);
    if (hs.done_fd >= 0) close(hs.done_fd);
    if (use_hs && sb->hs_calls > 0)
        kf_log(2, "sandbox: %d calls (%d timed, stop: %s) in %.3f s: calls %.3f s, stopping the run "
               "%.3f s, preparing %.3f s, copies in %.3f s, out %.3f s, checks %.3f s",
               sb->hs_calls, sb->hs_reps, sb->hs_stop[0] ? sb->hs_stop : "-", kf_now() - t0,
               hs.acc_call, hs.acc_stop, hs.acc_prep, hs.acc_copy, hs.acc_out, hs.acc_check);
    if (hs.sb_cpu_first >= 0 && hs.sb_cpu_last >= hs.sb_cpu_first) {
        sb->hs_cpu_s = hs.sb_cpu_last - hs.sb_cpu_first;
        sb->hs_run_s = hs.run_wall;
    }
    kill(-pid, SIGKILL); /* anything the candidate left behind in its group */
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    pid_t reaped = pid;
    if (killed_stopped) sb->reap_pid = pid; /* dies of the SIGKILL above; reaped later */
    else
        while ((reaped = wait4(pid, &st, 0, &ru)) < 0 && errno == EINTR) {}
    double wall = kf_now() - t0;
    /* what the run left in its scratch directory (a burst between two polls counts too),
     * then nothing of it stays: every process that could write there is dead */
    int64_t scratch_files = 0, scratch_bytes = 0;
    scratch_usage(scratch, &scratch_files, &scratch_bytes);
    if (scratch_files > KF_SCRATCH_MAX_FILES || scratch_bytes > KF_SCRATCH_MAX_BYTES) scratch_flood = 1;
    kf_sbx_remove_tree(scratch);
    if (reaped != pid) {
        /* someone else reaped it (SIGCHLD ignored?): the verdict is unknown */
        *vs = KF_V_INTERNAL;
        snprintf(detail, cap, "lost track of the runner process (wait4: %s); is SIGCHLD ignored?",
                 strerror(errno));
        close(outfd);
        unlink(outpath);
        return KF_OK;
    }
    if (wall_s) *wall_s = wall;
    double cpu_used = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
                      (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    if (lim->cpu_used) *lim->cpu_used = cpu_used;

    char where[96], out[400];
    /* with the handshake the rep is the parent's own count (nothing the runner can read
     * says which call is timed) */
    stage_text(live, use_hs ? (hs.t_timing > 0 ? sb->hs_reps : -1) : live->rep, mode,
               where, sizeof where);
    struct stat ost;
    int64_t out_size = fstat(outfd, &ost) == 0 ? (int64_t)ost.st_size : 0;
    int nomem = live->nomem;
    unsigned long long nomem_bytes = (unsigned long long)live->nomem_bytes;
    char memtxt[320];
    snprintf(memtxt, sizeof memtxt,
             "an allocation of %llu bytes failed under the memory limit (%.0f MiB of address "
             "space beyond the %.1f MiB of buffers)",
             nomem_bytes, (double)lim->mem_bytes / MIB, (double)sb->data_bytes / MIB);

    int signaled = !timed_out && WIFSIGNALED(st);
    /* A flood normally dies of SIGXFSZ; one that ignores SIGXFSZ spins on EFBIG until a
     * limit hits, with the file full: that is a flood too. */
    int flooded = polled_flood || (signaled && WTERMSIG(st) == SIGXFSZ) || out_size > lim->output_cap ||
                  (lim->output_cap > 0 && out_size >= lim->output_cap && (timed_out || signaled));
    if (scratch_flood) {
        *vs = KF_V_OUTPUT_FLOOD;
        snprintf(detail, cap, "wrote more than the scratch directory's cap of %d files and %lld "
                 "MiB %s (%lld files, %.1f MiB were left at the end)", KF_SCRATCH_MAX_FILES,
                 (long long)(KF_SCRATCH_MAX_BYTES >> 20), where, (long long)scratch_files,
                 (double)scratch_bytes / MIB);
    } else if (flooded) {
        *vs = KF_V_OUTPUT_FLOOD;
        output_excerpt(outfd, 0, out, 120);
        snprintf(detail, cap, "wrote more than the %lld-byte stdout/stderr cap (%s) %s; output "
                 "starts: \"%s\"", (long long)lim->output_cap,
                 polled_flood ? "killed" : signaled && WTERMSIG(st) == SIGXFSZ ? "killed by SIGXFSZ" : "file full",
                 where, out);
    } else if (timed_out) {
        *vs = KF_V_TIMEOUT;
        output_excerpt(outfd, 1, out, 200);
        if (sb->hs_call_timeout)
            snprintf(detail, cap, "call %d ran past the per-call wall-clock limit of %.3g s %s and "
                     "was killed%s%s", sb->hs_calls + 1, lim->call_wall_s, where, out[0] ? "; output tail: " : "", out);
        else
            snprintf(detail, cap, "ran past the wall-clock limit of %.3g s %s and was killed%s%s",
                     lim->wall_s, where, out[0] ? "; output tail: " : "", out);
    } else if (hs.finished && hs.check_vs != KF_V_OK) {
        *vs = hs.check_vs;
        if (hs.mode == KF_RUN_TIME && sb->hs_fail_call > lim->calls)
            snprintf(detail, cap, "call %d of the timing run (checked at random): %s",
                     sb->hs_fail_call - lim->calls, hs.check_detail);
        else
            snprintf(detail, cap, "%s", hs.check_detail);
    } else if (hs.finished && hs.stuck) {
        *vs = KF_V_CRASH;
        snprintf(detail, cap, "a process of the run did not stop within a second of SIGSTOP %s "
                 "(the run's processes are stopped between calls)", where);
    } else if (hs.finished && hs.violation) {
        *vs = KF_V_CRASH;
        snprintf(detail, cap, "the runner's handshake was broken: message '%c' came out of turn "
                 "%s (the kernel wrote to the runner's pipe?)", isprint(hs.violation) ? hs.violation : '?',
                 where);
    } else if (hs.finished && (killed_stopped || (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))) {
        /* killed by us after the last call: the verdict is the kernel's return value */
        if (hs.rc != 0 && nomem) {
            *vs = KF_V_MEM_LIMIT;
            snprintf(detail, cap, "%s, then the kernel returned %d", memtxt, hs.rc);
        } else if (hs.rc != 0) {
            *vs = KF_V_KERNEL_ERROR;
            output_excerpt(outfd, 1, out, 300);
            snprintf(detail, cap, "the kernel returned %d (non-zero means it reports its own "
                     "failure)%s%s", hs.rc, out[0] ? "; output tail: " : "", out);
        } else {
            *vs = KF_V_OK;
        }
    } else if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        if (sig == SIGXCPU || (sig == SIGKILL && cpu_used >= (double)cpu - 0.05)) {
            *vs = KF_V_CPU_LIMIT;
            snprintf(detail, cap, "used its CPU-time limit of %llu s (%.2f s CPU in %.2f s wall) %s",
                     (unsigned long long)cpu, cpu_used, wall, where);
        } else if (nomem) {
            *vs = KF_V_MEM_LIMIT;
            snprintf(detail, cap, "%s, then the process was killed by %s (%s) %s", memtxt,
                     signal_abbrev(sig), strsignal(sig), where);
        } else {
            *vs = KF_V_CRASH;
            output_excerpt(outfd, 1, out, 300);
            snprintf(detail, cap, "killed by %s (%s) %s%s%s", signal_abbrev(sig), strsignal(sig),
                     where, out[0] ? "; output tail: " : "", out);
        }
    } else {
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        int stage = live->stage;
        char msg[sizeof ctl->message];
        memcpy(msg, ctl->message, sizeof msg);
        msg[sizeof msg - 1] = 0;
        if (lim->checker_exit > 0 && code == lim->checker_exit && stage >= KF_STAGE_START) {
            /* the wrapper's "errors found" status; its report is in the output */
            *vs = KF_V_MEMCHECK;
            snprintf(detail, cap, "the memory checker reported errors %s", where);
        } else if (!use_hs && code == 0 && ctl->done == 1 && stage == KF_STAGE_DONE &&
                   ctl->magic == KF_RUN_MAGIC) {
            /* (with the handshake only the parent's own record of the calls counts: a
             * forged "done" and exit(0) is a crash below) */
            if (ctl->kernel_rc != 0 && nomem) {
                *vs = KF_V_MEM_LIMIT;
                snprintf(detail, cap, "%s, then the kernel returned %d", memtxt, ctl->kernel_rc);
            } else if (ctl->kernel_rc != 0) {
                *vs = KF_V_KERNEL_ERROR;
                output_excerpt(outfd, 1, out, 300);
                snprintf(detail, cap, "the kernel returned %d (non-zero means it reports its own "
                         "failure)%s%s", ctl->kernel_rc, out[0] ? "; output tail: " : "", out);
            } else {
                *vs = KF_V_OK;
            }
        } else if ((code == KF_RUN_EXIT_LOAD || code == KF_RUN_EXIT_SYM) &&
                   stage == KF_STAGE_LOADING) {
            *vs = KF_V_LOAD_ERROR;
            snprintf(detail, cap, "%s", msg[0] ? msg : "the artifact could not be loaded");
        } else if (code == KF_RUN_EXIT_DEVICE) {
            /* a device call failed: in the kernel it is the kernel's fault (a fault on the
             * device, a launch the device refused); before it, the artifact's */
            int in_kernel = stage == KF_STAGE_KERNEL || stage == KF_STAGE_BETWEEN;
            *vs = in_kernel ? KF_V_CRASH : KF_V_LOAD_ERROR;
            snprintf(detail, cap, "device error %s: %s", where, msg[0] ? msg : "(no message)");
        } else if (code == KF_RUN_EXIT_NOMEM && stage != KF_STAGE_KERNEL) {
            *vs = KF_V_MEM_LIMIT;
            snprintf(detail, cap, "the runner could not allocate its buffers under the memory "
                     "limit %s%s%s", where, msg[0] ? ": " : "", msg);
        } else if (nomem) {
            *vs = KF_V_MEM_LIMIT;
            output_excerpt(outfd, 1, out, 200);
            snprintf(detail, cap, "%s, then the process exited with status %d %s%s%s", memtxt,
                     code, where, out[0] ? "; output tail: " : "", out);
        } else if (stage < KF_STAGE_START && code == KF_CONFINE_EXIT &&
                   strncmp(msg, "sandbox: ", 9) == 0) {
            *vs = KF_V_INTERNAL;
            snprintf(detail, cap, "could not confine the runner (%s); KFORGE_SANDBOX=off runs "
                     "candidates unconfined", msg);
        } else if (stage < KF_STAGE_START && (code == 127 || code == 126)) {
            *vs = KF_V_INTERNAL;
            snprintf(detail, cap, "could not start the runner '%s' (exit status %d)", exe, code);
        } else if (stage <= KF_STAGE_START && code == KF_RUN_EXIT_USAGE) {
            *vs = KF_V_INTERNAL;
            snprintf(detail, cap, "the runner rejected its control page: %s", msg);
        } else if (stage == KF_STAGE_BETWEEN && code == KF_RUN_EXIT_USAGE && msg[0]) {
            /* the runner's own exit between calls (fresh pages or the flush buffer failed);
             * not a verdict on the kernel either way */
            *vs = KF_V_INTERNAL;
            snprintf(detail, cap, "the runner could not prepare a timed call: %s", msg);
        } else {
            *vs = KF_V_CRASH;
            output_excerpt(outfd, 1, out, 300);
            snprintf(detail, cap, "the process exited with status %d %s before the run was "
                     "complete (did the kernel call exit()?)%s%s", code, where,
                     out[0] ? "; output tail: " : "", out);
        }
    }
    if (lim->output && lim->output_keep > 0 && out_size > 0) {
        size_t want = (size_t)out_size < lim->output_keep ? (size_t)out_size : lim->output_keep;
        char *text = kf_malloc(want);
        ssize_t n = pread(outfd, text, want, 0);
        if (n > 0) kf_buf_putn(lim->output, text, (size_t)n);
        free(text);
    }
    close(outfd);
    unlink(outpath);
    return KF_OK;
}
