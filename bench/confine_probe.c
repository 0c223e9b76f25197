/*
 * Which part of the sandbox's confinement keeps the CUDA driver from starting: forks one
 * child per variant (everything; without seccomp; without Landlock; without dropping
 * capabilities; Landlock plus /dev/shm; Landlock plus /tmp; seccomp that allows sockets),
 * applies it with the sandbox's own code (src/verify/confine.c), then calls cuInit.
 * A diagnostic for the GPU machine, not part of kforge.
 *
 * build: cc -std=gnu11 -Iinclude -Isrc bench/confine_probe.c build/libkforge.a $(pkg-config
 *        --libs jansson libcurl openblas) -fopenmp -ldl -lm -o build/confine_probe
 */
#define _GNU_SOURCE
#include "verify/verify_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*cuinit_fn)(unsigned);
typedef int (*cuerr_fn)(int, const char **);

static void try_cuda(const char *what) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { printf("%-28s dlopen libcuda: %s\n", what, dlerror()); return; }
    cuinit_fn init = (cuinit_fn)dlsym(h, "cuInit");
    cuerr_fn name = (cuerr_fn)dlsym(h, "cuGetErrorName");
    int rc = init(0);
    const char *n = "?";
    if (name) name(rc, &n);
    printf("%-28s cuInit -> %d %s\n", what, rc, n);
}

#define OWN_RIGHTS (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_REMOVE_FILE | \
                    LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | \
                    LANDLOCK_ACCESS_FS_REMOVE_DIR)
/* what add_rule grants: the sandbox's whole handled set (ABI 3+: truncate, refer, the
 * other node types too) for the sandbox-ruleset variants, OWN_RIGHTS for own_ruleset */
static unsigned long long add_rule_access = OWN_RIGHTS | LANDLOCK_ACCESS_FS_MAKE_CHAR |
    LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM | (1ULL << 13) | (1ULL << 14);

static void add_rule(int rfd, const char *path) {
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return;
    struct landlock_path_beneath_attr pb = {.allowed_access = add_rule_access, .parent_fd = fd};
    if (syscall(SYS_landlock_add_rule, rfd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) != 0) perror(path);
    close(fd);
}

static int proc_self; /* 1: the child adds its own /proc/PID (write, truncate) to the ruleset */
static int keep_home; /* 1: the child keeps the caller's HOME (the sandbox before 2026-12-04) */

static void variant(const char *what, int seccomp, int landlock, int caps, const char *extra,
                    int sockets_ok, int on) {
    char scratch[] = "/tmp/kf-probe-XXXXXX";
    if (!mkdtemp(scratch)) { perror("mkdtemp"); return; }
    kf_confine cf;
    kf_error err = {0};
    if (kf_confine_prepare(&cf, scratch, 0, 0, &err) != KF_OK) { printf("%s: %s\n", what, err.msg); return; }
    if (!seccomp) cf.seccomp = 0;
    if (sockets_ok) {
        /* drop the socket and socketpair rules: the first two DENY pairs after the header */
        int skip = 0;
        for (int i = 0; i + 1 < cf.filter_len; i++)
            if (cf.filter[i].code == (BPF_JMP | BPF_JEQ | BPF_K) &&
                (cf.filter[i].k == __NR_socket || cf.filter[i].k == __NR_socketpair)) {
                cf.filter[i].k = 0xfffffu; /* no such syscall */
                skip++;
            }
        if (skip != 2) printf("%s: socket rules not found\n", what);
    }
    if (!caps) cf.drop_caps = 0;
    if (!on) cf.on = 0;
    if (extra && cf.ruleset_fd >= 0) add_rule(cf.ruleset_fd, extra);
    int rfd = landlock ? cf.ruleset_fd : -1;
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        /* as the sandbox sets them: caches and temporary files in the scratch directory */
        setenv("TMPDIR", scratch, 1);
        setenv("CUDA_CACHE_PATH", scratch, 1);
        setenv("XDG_CACHE_HOME", scratch, 1);
        if (!keep_home) setenv("HOME", scratch, 1);
        if (proc_self && rfd >= 0) { /* the child's own /proc/PID, writable */
            int pfd = open("/proc/self", O_PATH | O_CLOEXEC);
            struct landlock_path_beneath_attr pb = {.allowed_access = LANDLOCK_ACCESS_FS_WRITE_FILE |
                (1ULL << 14), .parent_fd = pfd};
            if (pfd < 0 || syscall(SYS_landlock_add_rule, rfd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) != 0)
                printf("%s: /proc/self rule: %s\n", what, strerror(errno));
        }
        char msg[256] = "";
        if (kf_confine_apply(&cf, rfd, msg, sizeof msg) != 0) { printf("%s: %s\n", what, msg); _exit(1); }
        try_cuda(what);
        fflush(stdout);
        _exit(0);
    }
    int ws;
    waitpid(p, &ws, 0);
    if (!WIFEXITED(ws)) printf("%-28s child died (status %d)\n", what, ws);
    kf_confine_release(&cf);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", scratch);
    if (system(cmd)) {}
}

/* A Landlock domain of our own: the sandbox's write rights handled, writes allowed
 * everywhere (so only the scopes differ from no Landlock at all). */
static int own_ruleset(unsigned long long scoped) {
    struct { unsigned long long fs, net, scoped; } attr = {OWN_RIGHTS, 0, scoped};
    int rfd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (rfd < 0) { perror("landlock_create_ruleset"); return -1; }
    unsigned long long saved = add_rule_access;
    add_rule_access = OWN_RIGHTS;
    add_rule(rfd, "/");
    add_rule_access = saved;
    return rfd;
}

static void own_variant(const char *what, unsigned long long scoped) {
    int rfd = own_ruleset(scoped);
    if (rfd < 0) return;
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(SYS_landlock_restrict_self, rfd, 0) != 0) {
            perror(what);
            _exit(1);
        }
        try_cuda(what);
        fflush(stdout);
        _exit(0);
    }
    int ws;
    waitpid(p, &ws, 0);
    close(rfd);
}

/* A Landlock domain that handles one write right alone, allowed only where the sandbox
 * allows it (the scratch directory; for writes and truncation also the device allow-list):
 * the variant that fails names the right the driver needs elsewhere. */
static void single_right(const char *what, unsigned long long right) {
    struct { unsigned long long fs, net, scoped; } attr = {right, 0, 0};
    int rfd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (rfd < 0) { printf("%-28s create_ruleset: %s\n", what, strerror(errno)); return; }
    char scratch[] = "/tmp/kf-probe-XXXXXX";
    if (!mkdtemp(scratch)) { perror("mkdtemp"); close(rfd); return; }
    const char *paths[] = {scratch, "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
                           "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0",
                           "/dev/nvidia-caps"};
    int devs = right == LANDLOCK_ACCESS_FS_WRITE_FILE || right == (1ULL << 14);
    for (size_t i = 0; i < (devs ? sizeof paths / sizeof paths[0] : 1); i++) {
        int fd = open(paths[i], O_PATH | O_CLOEXEC);
        if (fd < 0) continue;
        unsigned long long acc = right;
        if (i > 0 && right != LANDLOCK_ACCESS_FS_WRITE_FILE && right != (1ULL << 14)) acc = 0;
        struct landlock_path_beneath_attr pb = {.allowed_access = acc, .parent_fd = fd};
        if (syscall(SYS_landlock_add_rule, rfd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) != 0 && i == 0)
            printf("%-28s add_rule: %s\n", what, strerror(errno));
        close(fd);
    }
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        setenv("TMPDIR", scratch, 1);
        setenv("CUDA_CACHE_PATH", scratch, 1);
        setenv("XDG_CACHE_HOME", scratch, 1);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(SYS_landlock_restrict_self, rfd, 0) != 0) {
            perror(what);
            _exit(1);
        }
        try_cuda(what);
        fflush(stdout);
        _exit(0);
    }
    int ws;
    waitpid(p, &ws, 0);
    close(rfd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", scratch);
    if (system(cmd)) {}
}

int main(void) {
    /* every variant in a fresh child: the driver must not be started before fork */
    variant("unconfined", 1, 1, 1, NULL, 0, 0);
    variant("all (as the sandbox)", 1, 1, 1, NULL, 0, 1);
    keep_home = 1;
    variant("as the sandbox, own HOME", 1, 1, 1, NULL, 0, 1);
    keep_home = 0;
    proc_self = 1;
    variant("as the sandbox + /proc/self", 1, 1, 1, NULL, 0, 1);
    proc_self = 0;
    variant("no seccomp", 0, 1, 1, NULL, 0, 1);
    variant("seccomp, sockets allowed", 1, 1, 1, NULL, 1, 1);
    variant("no landlock", 1, 0, 1, NULL, 0, 1);
    variant("capabilities kept", 1, 1, 0, NULL, 0, 1);
    /* Landlock alone (no seccomp: the first probes mixed the two) plus one more place, the
     * caller's HOME kept: which place the driver writes */
    keep_home = 1;
    variant("landlock only + /dev/shm", 0, 1, 1, "/dev/shm", 0, 1);
    variant("landlock only + /tmp", 0, 1, 1, "/tmp", 0, 1);
    variant("landlock only + /root", 0, 1, 1, "/root", 0, 1);
    variant("landlock only + /proc", 0, 1, 1, "/proc", 0, 1);
    variant("landlock only + /dev", 0, 1, 1, "/dev", 0, 1);
    variant("landlock only + /run", 0, 1, 1, "/run", 0, 1);
    variant("landlock only + /var", 0, 1, 1, "/var", 0, 1);
    keep_home = 0;
    variant("only caps dropped", 0, 0, 1, NULL, 0, 1);
    variant("seccomp only", 1, 0, 1, NULL, 0, 1);
    variant("seccomp only, sockets ok", 1, 0, 1, NULL, 1, 1);
    own_variant("landlock: no scopes", 0);
    own_variant("landlock: abstract-unix scope", 1);
    own_variant("landlock: signal scope", 2);
    static const struct { const char *name; unsigned long long bit; } rights[] = {
        {"only WRITE_FILE", 1ULL << 1}, {"only REMOVE_DIR", 1ULL << 4}, {"only REMOVE_FILE", 1ULL << 5},
        {"only MAKE_CHAR", 1ULL << 6}, {"only MAKE_DIR", 1ULL << 7}, {"only MAKE_REG", 1ULL << 8},
        {"only MAKE_SOCK", 1ULL << 9}, {"only MAKE_FIFO", 1ULL << 10}, {"only MAKE_BLOCK", 1ULL << 11},
        {"only MAKE_SYM", 1ULL << 12}, {"only REFER", 1ULL << 13}, {"only TRUNCATE", 1ULL << 14},
        {"only IOCTL_DEV", 1ULL << 15}};
    for (size_t i = 0; i < sizeof rights / sizeof rights[0]; i++) single_right(rights[i].name, rights[i].bit);
    return 0;
}
