/*
 * Confinement of the sandboxed child (kforge-runner and whatever runs in front of it):
 * what a candidate may not do besides what the rlimits in sandbox.c bound.
 *
 * Two unprivileged kernel mechanisms, no namespaces (docs/design-notes.md says why):
 *   - seccomp-BPF: a socket of any family but AF_UNIX fails with EACCES (socket() and
 *     socketpair()), and no socket reaches anything: connect() fails with ECONNREFUSED
 *     (what a program sees when nothing listens: the CUDA driver's probe for an MPS
 *     daemon must take it as "no MPS"), sendmsg(), sendmmsg() and sendto() with a
 *     destination with EACCES, for every family. A local socket that
 *     could connect would reach the D-Bus session bus, systemd's user manager,
 *     docker.sock, ssh-agent, any local proxy, each a way out. Local sockets can still be
 *     created and bound because the CUDA driver needs one: cuInit binds an abstract
 *     socket ("@cuda-uvmfd-...", seen on the H200 with CUDA 13.0, driver 580) and fails
 *     with CUDA_ERROR_OPERATING_SYSTEM when socket(AF_UNIX) is refused; its connect to
 *     the MPS control socket may fail (it goes on without MPS, as NVIDIA documents).
 *     A bound socket only receives; with Landlock a pathname bind outside the scratch
 *     directory is refused too (MAKE_SOCK);
 *     io_uring (its requests bypass the syscall filter), ptrace, process_vm_readv/writev
 *     and pidfd_getfd (another process's memory or descriptors: kforge's own, unconfined),
 *     bpf, userfaultfd, and the terminal-injection ioctls TIOCSTI and TIOCLINUX fail with
 *     EPERM (a memory checker's run keeps ptrace and process_vm_* when Landlock, which
 *     confines them to the sandbox's own processes, is in force); outside a memory
 *     checker's run setsid, setpgid, sched_setaffinity and the timers (setitimer,
 *     timer_create, alarm) fail with EPERM too. A syscall of another ABI (i386's int 0x80, x32's numbers on x86-64, arm32 on
 *     arm64) kills the process: the numbers above would mean something else there.
 *   - Landlock (when the kernel has it): every write-type access (write, truncate,
 *     create, remove, rename/link across directories) is refused except beneath the
 *     candidate's scratch directory and on a short list of device nodes (/dev/null & co.,
 *     the GPU nodes /dev/nvidia*, /dev/dri, /dev/kfd, /dev/dxg) and the process's own
 *     /proc/PID (thread names: the CUDA driver needs it); from ABI 4 TCP bind and
 *     connect are refused too (a second lock on the network), from ABI 6 signals and
 *     abstract unix sockets do not reach processes outside the sandbox (kforge itself,
 *     the user's shell). Reads stay allowed.
 * Both need PR_SET_NO_NEW_PRIVS, set first; both are inherited across fork and execve, so
 * the candidate, its threads and any process it starts stay confined. When kforge runs
 * with capabilities (as root), the child drops all of them, bounding set included: with
 * CAP_SYS_MODULE or CAP_SYS_ADMIN no filter means much.
 *
 * Split: kf_confine_prepare runs in the parent before fork and does everything that can
 * fail in an explainable way (the probe, the Landlock ruleset and its rules, opened
 * paths); kf_confine_apply runs in the forked child and only makes raw system calls, so
 * it is async-signal-safe. A kernel without Landlock or seccomp is reported in the
 * description (never silently); a kernel that has them but refuses to apply them stops
 * the run (the child exits KF_CONFINE_EXIT with the reason in the control page).
 *
 * KFORGE_SANDBOX=off turns all of this off for debugging, and says so.
 */
#include "verify/verify_int.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>

/* ---- constants newer than some distributions' headers (kernel ABI, stable) ---- */

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#define KF_LL_NET_BIND_TCP (1ULL << 0)
#define KF_LL_NET_CONNECT_TCP (1ULL << 1)
#define KF_LL_SCOPE_ABSTRACT_UNIX (1ULL << 0)
#define KF_LL_SCOPE_SIGNAL (1ULL << 1)
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif
#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#define __NR_io_uring_enter 426
#define __NR_io_uring_register 427
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#ifndef SECCOMP_RET_KILL_PROCESS
#define SECCOMP_RET_KILL_PROCESS 0x80000000U
#endif
#ifndef SECCOMP_GET_ACTION_AVAIL
#define SECCOMP_GET_ACTION_AVAIL 2
#endif
#ifndef SECCOMP_SET_MODE_FILTER
#define SECCOMP_SET_MODE_FILTER 1
#endif
#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif

/* The ruleset attribute as of ABI 6; older kernels get a prefix of it (its size says
 * which fields they know). */
typedef struct kf_ll_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
} kf_ll_ruleset_attr;

/* ---- the seccomp filter ---- */

#if defined(__x86_64__)
#define KF_SECCOMP_ARCH AUDIT_ARCH_X86_64
#define KF_SECCOMP_ARCH_NAME "x86-64"
#elif defined(__aarch64__)
#define KF_SECCOMP_ARCH AUDIT_ARCH_AARCH64
#define KF_SECCOMP_ARCH_NAME "arm64"
#else
#define KF_SECCOMP_ARCH_NAME "none"
#endif

#ifdef KF_SECCOMP_ARCH
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i) + 4)
#define ARG_HI(i) (offsetof(struct seccomp_data, args) + 8 * (i))
#else
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))
#define ARG_HI(i) (offsetof(struct seccomp_data, args) + 8 * (i) + 4)
#endif
#define PUT(st)                                                                       \
    do {                                                                              \
        assert(n < KF_CONFINE_FILTER_MAX);                                            \
        p[n++] = (struct sock_filter)st; /* a braced initializer: make it a literal */ \
    } while (0)
#define RET(v) PUT(BPF_STMT(BPF_RET | BPF_K, (v)))
#define DENY(nr, e)                                                                   \
    do {                                                                              \
        PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1));                         \
        RET(SECCOMP_RET_ERRNO | (e));                                                 \
    } while (0)

/* The filter into p (room for KF_CONFINE_FILTER_MAX instructions); returns its length.
 * allow_trace: a memory checker's run under Landlock, where ptrace and process_vm_* stay
 * within the sandbox's own processes anyway (Landlock refuses them on any process outside
 * its domain), and a checker may need them to watch the runner.
 * allow_connect: a memory checker's run, where connect() on a local socket is allowed:
 * compute-sanitizer's target reaches the tool's process through one (on the H200, CUDA
 * 13.0, every memcheck run under the filter without it ended "No attachable process
 * found"). Sockets of other families still fail at socket(). */
static unsigned short build_filter(struct sock_filter *p, int allow_trace, int allow_connect) {
    unsigned short n = 0;
    PUT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
    PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, KF_SECCOMP_ARCH, 1, 0));
    RET(SECCOMP_RET_KILL_PROCESS);
    PUT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
#ifdef __x86_64__
    /* x32 numbers carry the same AUDIT_ARCH as x86-64: without this, syscall(0x40000029)
     * would be a socket() the filter does not see */
    PUT(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));
    RET(SECCOMP_RET_KILL_PROCESS);
#endif
    if (!allow_connect) DENY(__NR_connect, ECONNREFUSED);
    DENY(__NR_sendmsg, EACCES);
    DENY(__NR_sendmmsg, EACCES);
    DENY(__NR_io_uring_setup, EPERM);
    DENY(__NR_io_uring_enter, EPERM);
    DENY(__NR_io_uring_register, EPERM);
    if (!allow_trace) {
        DENY(__NR_ptrace, EPERM);
        DENY(__NR_process_vm_readv, EPERM);
        DENY(__NR_process_vm_writev, EPERM);
    }
    DENY(__NR_pidfd_getfd, EPERM);
    if (!allow_connect) {
        /* no way out of the run's process group, which is killed whole after the run
         * (sandbox.c): without these a descendant that calls setsid() outlives the run.
         * A memory checker's run keeps them (its tool may make groups of its own); the
         * candidate it checks has passed the confined runs first. */
        DENY(__NR_setsid, EPERM);
        DENY(__NR_setpgid, EPERM);
        /* the CPUs the sandbox pinned it to are the ones --threads allows */
        DENY(__NR_sched_setaffinity, EPERM);
        /* no timers: a handler that finishes the outputs after a call returned (issue 24;
         * their effect was caught before, by the checks with the run stopped, and still
         * is for a thread that does the same). timerfd stays: it runs nothing by itself. */
        DENY(__NR_setitimer, EPERM);
        DENY(__NR_timer_create, EPERM);
#ifdef __NR_alarm
        DENY(__NR_alarm, EPERM);
#endif
    }
    DENY(__NR_bpf, EPERM);
    DENY(__NR_userfaultfd, EPERM);
    /* the calls whose arguments decide; each branch below ends in a return. Offsets
     * count the instructions between a jump and its target. */
    PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 4, 0));     /* -> family */
    PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socketpair, 3, 0)); /* -> family */
    PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_sendto, 6, 0));     /* -> address */
    PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 11, 0));     /* -> request */
    RET(SECCOMP_RET_ALLOW);
    /* family: local (AF_UNIX) sockets only; the driver needs one, see above */
    PUT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0)));
    PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1));
    RET(SECCOMP_RET_ALLOW);
    RET(SECCOMP_RET_ERRNO | EACCES);
    /* address: sendto with a destination (both words of the pointer zero = none) */
    PUT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(4)));
    PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3));
    PUT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_HI(4)));
    PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1));
    RET(SECCOMP_RET_ALLOW);
    RET(SECCOMP_RET_ERRNO | EACCES);
    /* request: an unsigned int, so only the low word counts */
    PUT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(1)));
    PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 2, 0));
    PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 1, 0));
    RET(SECCOMP_RET_ALLOW);
    RET(SECCOMP_RET_ERRNO | EPERM);
    return n;
}
#endif

/* ---- probing ---- */

static int landlock_abi(int *err) {
    long v = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    *err = v < 0 ? errno : 0;
    return v < 0 ? 0 : (int)v;
}

/* Whether this process holds any capability (permitted, effective or inheritable; the
 * ambient set is part of the first and the last): then the child drops them all. */
static int holds_capabilities(void) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capget, &h, d) != 0) return 0;
    for (int i = 0; i < 2; i++)
        if (d[i].permitted || d[i].effective || d[i].inheritable) return 1;
    return 0;
}

static int seccomp_usable(char *why, size_t cap) {
#ifdef KF_SECCOMP_ARCH
    uint32_t act = SECCOMP_RET_KILL_PROCESS;
    if (syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &act) != 0) {
        snprintf(why, cap, "seccomp unavailable (%s)", strerror(errno));
        return 0;
    }
    return 1;
#else
    snprintf(why, cap, "no seccomp filter for this architecture");
    return 0;
#endif
}

/* What confinement the next run would get, without building anything. */
void kf_confine_probe(kf_confine *cf) {
    memset(cf, 0, sizeof *cf);
    cf->ruleset_fd = -1;
    cf->root = getuid() == 0;
    cf->drop_caps = holds_capabilities();
    const char *e = getenv("KFORGE_SANDBOX");
    if (e && strcmp(e, "off") == 0) return;
    cf->on = 1;
    cf->seccomp = seccomp_usable(cf->seccomp_note, sizeof cf->seccomp_note);
    int lerr = 0;
    cf->landlock_abi = landlock_abi(&lerr);
    if (!cf->landlock_abi)
        snprintf(cf->landlock_note, sizeof cf->landlock_note, "%s",
                 lerr == ENOSYS       ? "not built into this kernel (ENOSYS)"
                 : lerr == EOPNOTSUPP ? "disabled at boot (EOPNOTSUPP; add landlock to lsm=)"
                                      : strerror(lerr));
}

/* ---- the Landlock ruleset ---- */

static uint64_t fs_write_rights(int abi) {
    uint64_t r = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                 LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                 LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                 LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
    if (abi >= 2) r |= LANDLOCK_ACCESS_FS_REFER;
    if (abi >= 3) r |= LANDLOCK_ACCESS_FS_TRUNCATE;
    return r;
}

static int add_path_rule(int rfd, int dirfd, const char *path, uint64_t access, int nofollow) {
    int fd = openat(dirfd, path, O_PATH | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0) return -1;
    struct landlock_path_beneath_attr pb = {.allowed_access = access, .parent_fd = fd};
    int rc = (int)syscall(SYS_landlock_add_rule, rfd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Device nodes a candidate may open for writing: the bit buckets and the GPU drivers'
 * nodes. An allow-list, not "all of /dev": as root (even without capabilities) the owner
 * may write block devices, /dev/uinput (keystrokes), the terminals; and /dev/shm would be
 * a second scratch directory that outlives the run. */
static int dev_allowed(const char *name, int is_dir) {
    static const char *const files[] = {"null", "zero", "full", "random", "urandom", "kfd", "dxg"};
    if (strncmp(name, "nvidia", 6) == 0) return 1; /* nvidia0.., nvidiactl, -uvm, -caps/ */
    if (is_dir) return strcmp(name, "dri") == 0;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (strcmp(name, files[i]) == 0) return 1;
    return 0;
}

static int add_dev_rules(int rfd, int abi) {
    uint64_t file_rights = LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0);
    DIR *d = opendir("/dev");
    if (!d) return 0;
    int dfd = dirfd(d), n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (de->d_name[0] == '.' || fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        int is_dir = S_ISDIR(st.st_mode);
        if (!(S_ISCHR(st.st_mode) || is_dir) || !dev_allowed(de->d_name, is_dir)) continue;
        if (add_path_rule(rfd, dfd, de->d_name, file_rights, 1) == 0) n++;
    }
    closedir(d);
    return n;
}

/* Probe, then build the ruleset for a run whose writable directory is scratch (absolute,
 * existing). See verify_int.h. */
kf_status kf_confine_prepare(kf_confine *cf, const char *scratch, const char *cache, int checker,
                             int no_landlock, kf_error *err) {
    kf_confine_probe(cf);
    /* compute-sanitizer's target process ends "terminated before first instrumented API
     * call" under the ruleset (H200, CUDA 13.0, 2026-12-04; where it writes is not yet
     * found): its run keeps the seccomp filter and dropped capabilities only. The
     * candidate it checks has passed the fully confined runs first. */
    if (no_landlock && cf->on) cf->landlock_abi = 0; /* the run record says so: memcheck.c */
    if (!cf->on) return KF_OK;
#ifdef KF_SECCOMP_ARCH
    if (cf->seccomp) cf->filter_len = build_filter(cf->filter, checker && cf->landlock_abi, checker);
#else
    (void)checker;
#endif
    if (!cf->landlock_abi) return KF_OK;
    int abi = cf->landlock_abi;
    kf_ll_ruleset_attr attr = {.handled_access_fs = fs_write_rights(abi)};
    size_t size = sizeof attr.handled_access_fs;
    if (abi >= 4) {
        attr.handled_access_net = KF_LL_NET_BIND_TCP | KF_LL_NET_CONNECT_TCP;
        size = offsetof(kf_ll_ruleset_attr, scoped);
    }
    if (abi >= 6) {
        attr.scoped = KF_LL_SCOPE_ABSTRACT_UNIX | KF_LL_SCOPE_SIGNAL;
        size = sizeof attr;
    }
    int rfd = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
    if (rfd < 0)
        return kf_error_set(err, KF_ERR_INTERNAL, NULL, 0, 0,
                            "sandbox: landlock_create_ruleset (ABI %d): %s", abi, strerror(errno));
    /* no O_NOFOLLOW: scratch is kforge's own path (the parent made it, the candidate
     * cannot replace it: its parent directory is not writable to the candidate) */
    if (add_path_rule(rfd, AT_FDCWD, scratch, attr.handled_access_fs, 0) != 0) {
        int e = errno;
        close(rfd);
        return kf_error_set(err, KF_ERR_INTERNAL, scratch, 0, 0,
                            "sandbox: cannot allow writes in the scratch directory: %s", strerror(e));
    }
    if (cache && add_path_rule(rfd, AT_FDCWD, cache, attr.handled_access_fs, 0) != 0) {
        int e = errno;
        close(rfd);
        return kf_error_set(err, KF_ERR_INTERNAL, cache, 0, 0,
                            "sandbox: cannot allow writes in the runtime's cache directory: %s",
                            strerror(e));
    }
    cf->dev_rules = add_dev_rules(rfd, abi);
    /* a checker's run may also use /dev/shm, in case compute-sanitizer's injection keeps
     * shared memory there (not verified); an ordinary run has no business there */
    if (checker) {
        uint64_t shm = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_MAKE_REG |
                       LANDLOCK_ACCESS_FS_REMOVE_FILE | (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0);
        if (add_path_rule(rfd, AT_FDCWD, "/dev/shm", shm, 1) == 0) cf->dev_rules++;
    }
    /* F_DUPFD in the child moves it clear of the descriptors it sets up; close-on-exec
     * keeps it from the runner in any case */
    cf->ruleset_fd = rfd;
    return KF_OK;
}

void kf_confine_release(kf_confine *cf) {
    if (cf->ruleset_fd >= 0) close(cf->ruleset_fd);
    cf->ruleset_fd = -1;
}

/* ---- in the child ---- */

static void put_msg(char *msg, size_t cap, const char *what, int e) {
    /* async-signal-safe: no stdio */
    if (!msg || cap < 2) return;
    size_t k = 0;
    for (const char *p = "sandbox: "; *p && k + 1 < cap; p++) msg[k++] = *p;
    for (const char *p = what; *p && k + 1 < cap; p++) msg[k++] = *p;
    for (const char *p = " failed, errno "; *p && k + 1 < cap; p++) msg[k++] = *p;
    char num[12];
    int n = 0;
    unsigned u = (unsigned)(e < 0 ? -e : e);
    do num[n++] = (char)('0' + u % 10); while ((u /= 10) && n < 11);
    while (n > 0 && k + 1 < cap) msg[k++] = num[--n];
    msg[k] = 0;
}

/* Apply the confinement to the calling (forked, single-threaded) process; see
 * verify_int.h. */
int kf_confine_apply(const kf_confine *cf, int ruleset_fd, char *msg, size_t cap) {
    if (!cf->on) return 0;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        put_msg(msg, cap, "PR_SET_NO_NEW_PRIVS", errno);
        return -1;
    }
    if (cf->drop_caps) {
        for (int c = 0; c < 64; c++)
            if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL) {
                put_msg(msg, cap, "PR_CAPBSET_DROP", errno);
                return -1;
            }
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct d[2];
        memset(d, 0, sizeof d);
        if (syscall(SYS_capset, &h, d) != 0) {
            put_msg(msg, cap, "capset (dropping capabilities)", errno);
            return -1;
        }
    }
    if (ruleset_fd >= 0) {
        /* the process's own /proc/PID, which only this child can name (the parent's
         * /proc/self is the parent): the CUDA driver names its threads through
         * /proc/self/task/TID/comm and cuInit fails with CUDA_ERROR_OPERATING_SYSTEM when
         * that write is refused (found on the H200, CUDA 13.0, driver 580.159, with
         * bench/confine_probe.c and bench/confine_shim.c) */
        int pfd = open("/proc/self", O_PATH | O_CLOEXEC);
        if (pfd >= 0) {
            struct landlock_path_beneath_attr pb = {
                .allowed_access = LANDLOCK_ACCESS_FS_WRITE_FILE |
                                  (cf->landlock_abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0),
                .parent_fd = pfd};
            if (syscall(SYS_landlock_add_rule, ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) != 0) {
                put_msg(msg, cap, "landlock_add_rule (/proc/self)", errno);
                return -1;
            }
            close(pfd);
        }
        if (syscall(SYS_landlock_restrict_self, ruleset_fd, 0) != 0) {
            put_msg(msg, cap, "landlock_restrict_self", errno);
            return -1;
        }
        close(ruleset_fd);
    }
#ifdef KF_SECCOMP_ARCH
    if (cf->seccomp && cf->filter_len) {
        struct sock_fprog prog = {.len = cf->filter_len, .filter = (struct sock_filter *)cf->filter};
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
            put_msg(msg, cap, "seccomp(SECCOMP_SET_MODE_FILTER)", errno);
            return -1;
        }
    }
#endif
    return 0;
}

/* ---- description ---- */

/* One line on what cf confines (rlimits are sandbox.c's); returns KF_SANDBOX_* flags. */
unsigned kf_confine_describe(const kf_confine *cf, const char *scratch, char *buf, size_t cap) {
    if (!cap) return 0;
    if (!cf->on) {
        snprintf(buf, cap, "confinement off (KFORGE_SANDBOX=off): the candidate may use the "
                 "network and write anywhere the user can");
        return 0;
    }
    unsigned flags = 0;
    kf_buf b = {0};
    if (cf->seccomp) {
        flags |= KF_SANDBOX_NET;
        kf_buf_printf(&b, "seccomp (%s): no sockets but unconnected local ones, no connect or send to an address, no io_uring, ptrace, bpf, "
                      "userfaultfd, cross-process memory or descriptor access, no TIOCSTI, no setsid/setpgid "
                      "(every descendant dies with the run's process group), no sched_setaffinity; ",
                      KF_SECCOMP_ARCH_NAME);
    } else {
        kf_buf_printf(&b, "NO network confinement: %s; ", cf->seccomp_note);
    }
    if (cf->landlock_abi) {
        flags |= KF_SANDBOX_WRITES;
        kf_buf_printf(&b, "landlock ABI %d: writes only under %s and to /dev/{null,zero,full,"
                      "random,urandom,nvidia*,dri,kfd,dxg} and its own /proc/PID", cf->landlock_abi, scratch);
        if (cf->landlock_abi >= 4) kf_buf_puts(&b, ", no TCP bind/connect");
        if (cf->landlock_abi >= 6) {
            flags |= KF_SANDBOX_SIGNALS;
            kf_buf_puts(&b, ", no signals or abstract sockets to processes outside it");
        }
        kf_buf_puts(&b, "; ");
    } else {
        kf_buf_printf(&b, "NO write confinement: Landlock %s; ", cf->landlock_note);
    }
    if (cf->drop_caps) kf_buf_printf(&b, "capabilities dropped%s; ", cf->root ? " (running as root)" : "");
    /* trailing "; " goes: sandbox.c appends the rlimits */
    if (b.len >= 2) b.data[b.len - 2] = 0;
    snprintf(buf, cap, "%s", b.data ? b.data : "");
    kf_buf_free(&b);
    return flags;
}
