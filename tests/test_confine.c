/*
 * Confinement of sandboxed candidates (src/verify/confine.c): CPU kernels written to the
 * contract that try, each, one thing the sandbox must stop, verified through the real
 * pipeline (compile, kforge-runner, verdict). A candidate that gets through does
 * something the test can see (a connection on the test's listener, a file outside its
 * directory); the same candidate under KFORGE_SANDBOX=off shows that the test would see
 * it, so a pass means the block worked and not that the attempt was never made.
 *
 * Covered elsewhere, and confined the same way (every run is): memory beyond the limit
 * (tests/test_faults.c allocates_past_memory_limit), spinning past the wall and CPU limits
 * (hangs_past_wall_limit, spins_past_cpu_limit), a grandchild outliving the run
 * (no_process_outlives_a_run), stdout floods (floods_stdout).
 *
 * Work directories are made under $TMPDIR (or /tmp) so that the suite also runs as an
 * unprivileged user, where the process-count limit can be tested (it never binds root).
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"
#include "verify/verify_int.h"

static const char *task = "task confine_sq\n"
                          "input x: f32[4099]\n"
                          "output y = x * x\n";

typedef struct fixture {
    kf_graph *g;
    kf_backend *b;
    kf_verify_ctx *ctx;
    char wd[600], outside[600];
} fixture;

static void make_temp_dir(char *out, size_t cap, const char *stem) {
    const char *t = getenv("TMPDIR");
    snprintf(out, cap, "%s/%s-XXXXXX", t && t[0] ? t : "/tmp", stem);
    cr_assert(mkdtemp(out), "mkdtemp %s: %s", out, strerror(errno));
}

static void fx_open(fixture *f) {
    memset(f, 0, sizeof *f);
    kf_error err = {0};
    cr_assert_eq(kf_parse_string(task, "<test>", &f->g, &err), KF_OK, "parse: %s", err.msg);
    cr_assert_eq(kf_backend_open("cpu", &f->b, &err), KF_OK, "backend: %s", err.msg);
    make_temp_dir(f->wd, sizeof f->wd, "kf-confine-work");
    make_temp_dir(f->outside, sizeof f->outside, "kf-confine-outside");
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.workdir = f->wd;
    o.seed = 777;
    o.nsets = 1;
    o.threads = 2;
    o.wall_limit_s = 15;
    o.cpu_limit_s = 30;
    o.mem_limit = 512ll << 20;
    cr_assert_eq(kf_verify_ctx_new(f->g, &o, &f->ctx, &err), KF_OK, "ctx: %s", err.msg);
}

static void rm_tree(const char *dir) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static void fx_close(fixture *f) {
    kf_verify_ctx_free(f->ctx);
    kf_backend_close(f->b);
    kf_graph_free(f->g);
    rm_tree(f->wd);
    rm_tree(f->outside);
}

static kf_vresult run_src(fixture *f, const char *src) {
    kf_candidate c;
    kf_error err = {0};
    cr_assert_eq(kf_candidate_init(&c, "cpu", src, NULL, &err), KF_OK, "%s", err.msg);
    kf_vresult r;
    kf_status st = kf_verify_candidate(f->ctx, f->b, &c, &r, &err);
    kf_candidate_clear(&c);
    cr_assert_eq(st, KF_OK, "verify could not run: %s (%s)", err.msg, r.detail);
    if (getenv("KF_TEST_VERBOSE"))
        fprintf(stderr, "[%s%s] %s\n", getenv("KFORGE_SANDBOX") ? "off: " : "",
                kf_vstatus_name(r.status), r.detail);
    return r;
}

static void expect(const kf_vresult *r, kf_vstatus want, const char *phrase) {
    cr_assert_eq(r->status, want, "status %s, want %s; detail: %s", kf_vstatus_name(r->status),
                 kf_vstatus_name(want), r->detail);
    if (phrase) cr_assert(strstr(r->detail, phrase), "detail lacks '%s': %s", phrase, r->detail);
}

/* The task's kernel with `pre` run first; pre may return early. */
static char srcbuf[16384];
static const char *kernel(const char *pre) {
    snprintf(srcbuf, sizeof srcbuf,
             "#define _GNU_SOURCE\n"
             "#include <arpa/inet.h>\n#include <dlfcn.h>\n#include <errno.h>\n#include <fcntl.h>\n"
             "#include <netinet/in.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
             "#include <string.h>\n#include <signal.h>\n#include <sys/ioctl.h>\n"
             "#include <sys/ptrace.h>\n#include <sys/socket.h>\n#include <sys/stat.h>\n"
             "#include <sys/syscall.h>\n#include <sys/uio.h>\n#include <sys/un.h>\n"
             "#include <unistd.h>\n"
             "int kforge_kernel(void *const *args) {\n"
             "    const float *x = args[0];\n"
             "    float *y = args[1];\n"
             "    {\n%s\n    }\n"
             "    for (long i = 0; i < 4099; i++) y[i] = x[i] * x[i];\n"
             "    return 0;\n"
             "}\n",
             pre);
    return srcbuf;
}

static void sandbox_off(void) { cr_assert_eq(setenv("KFORGE_SANDBOX", "off", 1), 0); }
static void sandbox_on(void) { unsetenv("KFORGE_SANDBOX"); }

static unsigned describe(fixture *f, char *buf, size_t cap) {
    return kf_verify_sandbox_describe(f->ctx, f->b, buf, cap);
}

/* ---- the description ---- */

Test(confine, describes_what_is_in_force) {
    fixture f;
    fx_open(&f);
    char d[1024];
    unsigned fl = describe(&f, d, sizeof d);
    if (getenv("KF_TEST_VERBOSE")) fprintf(stderr, "sandbox: %s (flags %u)\n", d, fl);
#if defined(__x86_64__) || defined(__aarch64__)
    cr_assert(fl & KF_SANDBOX_NET, "no network confinement on a supported arch: %s", d);
    cr_assert(strstr(d, "no sockets"), "%s", d);
#endif
    if (fl & KF_SANDBOX_WRITES) cr_assert(strstr(d, "landlock ABI") && strstr(d, f.wd), "%s", d);
    else cr_assert(strstr(d, "NO write confinement"), "missing Landlock not said: %s", d);
    cr_assert(strstr(d, "rlimits: cpu 30 s, wall 15 s"), "%s", d);
    cr_assert(strstr(d, "nproc"), "%s", d);
    if (getuid() == 0) cr_assert(strstr(d, "not enforced: running as root"), "%s", d);
    sandbox_off();
    fl = describe(&f, d, sizeof d);
    cr_assert_eq(fl & ~(unsigned)KF_SANDBOX_NPROC, 0u, "flags %u with confinement off", fl);
    cr_assert(strncmp(d, "confinement off (KFORGE_SANDBOX=off)", 36) == 0, "%s", d);
    sandbox_on();
    fx_close(&f);
}

/* ---- the network ---- */

static int listener(int *port) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    cr_assert_geq(s, 0, "socket: %s", strerror(errno));
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0, "bind: %s", strerror(errno));
    cr_assert_eq(listen(s, 16), 0);
    socklen_t n = sizeof a;
    cr_assert_eq(getsockname(s, (struct sockaddr *)&a, &n), 0);
    *port = ntohs(a.sin_port);
    return s;
}

/* Connections waiting on the listener (each accepted and closed). */
static int connections(int s) {
    int n = 0, c;
    while ((c = accept(s, NULL, NULL)) >= 0) {
        close(c);
        n++;
    }
    cr_assert(errno == EAGAIN || errno == EWOULDBLOCK, "accept: %s", strerror(errno));
    return n;
}

static const char *connect_src(int port) {
    char pre[1200];
    snprintf(pre, sizeof pre,
             "int fd = socket(AF_INET, SOCK_STREAM, 0);\n"
             "if (fd < 0) { fprintf(stderr, \"socket refused: %%s\\n\", strerror(errno)); return 7; }\n"
             "struct sockaddr_in a; memset(&a, 0, sizeof a); a.sin_family = AF_INET;\n"
             "a.sin_port = htons(%d); a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);\n"
             "if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {\n"
             "    fprintf(stderr, \"connect refused: %%s\\n\", strerror(errno)); return 8; }\n"
             "if (write(fd, \"leak\", 4) != 4) return 9;\n"
             "close(fd);\n",
             port);
    return kernel(pre);
}

Test(confine, tcp_connect_is_refused) {
    fixture f;
    fx_open(&f);
    int port, s = listener(&port);
    kf_vresult r = run_src(&f, connect_src(port));
    expect(&r, KF_V_KERNEL_ERROR, "socket refused: Permission denied");
    cr_assert_eq(connections(s), 0, "the sandboxed candidate reached the listener");
    /* the same candidate, unconfined, is seen connecting: the test can fail */
    sandbox_off();
    r = run_src(&f, connect_src(port));
    sandbox_on();
    expect(&r, KF_V_OK, NULL);
    cr_assert_eq(connections(s), 1, "with KFORGE_SANDBOX=off the connection should arrive");
    close(s);
    fx_close(&f);
}

/* Every other way out through a socket: another family, the raw syscall (no libc
 * wrapper to interpose), a local socket connected, or sent to, a listener outside the
 * sandbox (pathname and abstract), sendmsg, io_uring (its operations skip the syscall
 * filter). A local socket itself may be created (the CUDA driver binds one). The kernel
 * returns 20+k for the first way that worked, 0 when all were refused. */
static char unix_path[108];
static const char *abstract_name = "kforge-test-confine-listener";

static const char *other_sockets_src(void) {
    static char pre[4096];
    snprintf(pre, sizeof pre,
        "int fd;\n"
        "struct sockaddr_un u; memset(&u, 0, sizeof u); u.sun_family = AF_UNIX;\n"
        "snprintf(u.sun_path, sizeof u.sun_path, \"%%s\", \"%s\");\n"
        "if ((fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0) {\n"
        "    fprintf(stderr, \"AF_UNIX socket refused: %%s\\n\", strerror(errno)); return 30; }\n"
        "if (connect(fd, (struct sockaddr *)&u, sizeof u) == 0 || errno != ECONNREFUSED) {\n"
        "    fprintf(stderr, \"unix connect: %%s\\n\", strerror(errno)); return 20; }\n"
        "struct sockaddr_un ab; memset(&ab, 0, sizeof ab); ab.sun_family = AF_UNIX;\n"
        "memcpy(ab.sun_path + 1, \"%s\", %zu);\n"
        "if (connect(fd, (struct sockaddr *)&ab, (socklen_t)(sizeof(sa_family_t) + 1 + %zu)) == 0) return 26;\n"
        "close(fd);\n"
        "int dg = socket(AF_UNIX, SOCK_DGRAM, 0);\n"
        "if (dg < 0) return 31;\n"
        "if (sendto(dg, \"leak\", 4, 0, (struct sockaddr *)&u, sizeof u) >= 0 || errno != EACCES) return 27;\n"
        "struct iovec io = {\"leak\", 4}; struct msghdr m; memset(&m, 0, sizeof m);\n"
        "m.msg_name = &u; m.msg_namelen = sizeof u; m.msg_iov = &io; m.msg_iovlen = 1;\n"
        "if (sendmsg(dg, &m, 0) >= 0 || errno != EACCES) return 28;\n"
        "close(dg);\n"
        "if ((fd = socket(AF_INET6, SOCK_DGRAM, 0)) >= 0) return 21;\n"
        "if ((fd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0)) >= 0) return 22;\n"
        "int sv[2];\n"
        "if (socketpair(AF_INET, SOCK_STREAM, 0, sv) == 0) return 23;\n"
        "char params[120]; memset(params, 0, sizeof params);\n"
        "if ((fd = (int)syscall(425 /* io_uring_setup */, 4, params)) >= 0) return 24;\n"
        "if (errno != EPERM) { fprintf(stderr, \"io_uring_setup: %%s\\n\", strerror(errno)); return 25; }\n"
        "fprintf(stderr, \"every way out refused\\n\");\n",
        unix_path, abstract_name, strlen(abstract_name), strlen(abstract_name));
    return kernel(pre);
}

/* A listening local socket at unix_path (abstract: in the abstract namespace). */
static int unix_listener(int abstract) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    cr_assert_geq(s, 0, "socket: %s", strerror(errno));
    struct sockaddr_un u;
    memset(&u, 0, sizeof u);
    u.sun_family = AF_UNIX;
    socklen_t len = sizeof u;
    if (abstract) {
        memcpy(u.sun_path + 1, abstract_name, strlen(abstract_name));
        len = (socklen_t)(sizeof(sa_family_t) + 1 + strlen(abstract_name));
    } else {
        snprintf(u.sun_path, sizeof u.sun_path, "%s", unix_path);
        unlink(unix_path);
    }
    cr_assert_eq(bind(s, (struct sockaddr *)&u, len), 0, "bind: %s", strerror(errno));
    cr_assert_eq(listen(s, 16), 0);
    return s;
}

Test(confine, every_way_to_a_socket_is_refused) {
    fixture f;
    fx_open(&f);
    snprintf(unix_path, sizeof unix_path, "/tmp/kf-confine-%d.sock", (int)getpid());
    int ls = unix_listener(0), la = unix_listener(1);
    kf_vresult r = run_src(&f, other_sockets_src());
    expect(&r, KF_V_OK, NULL);
    cr_assert_eq(connections(ls) + connections(la), 0, "the sandboxed candidate reached a listener");
    /* unconfined, the same kernel connects: the test can fail */
    sandbox_off();
    r = run_src(&f, other_sockets_src());
    sandbox_on();
    expect(&r, KF_V_KERNEL_ERROR, "returned 20");
    cr_assert_eq(connections(ls), 1, "with KFORGE_SANDBOX=off the connection should arrive");
    close(ls);
    close(la);
    unlink(unix_path);
    fx_close(&f);
}

#ifdef __x86_64__
/* x32 system-call numbers share x86-64's AUDIT_ARCH: a filter that only compares numbers
 * would let this socket() through. The filter kills the process instead. */
Test(confine, x32_socket_kills_the_process) {
    fixture f;
    fx_open(&f);
    kf_vresult r = run_src(&f, kernel("long fd = syscall(0x40000000L | 41, AF_INET, SOCK_STREAM, 0);\n"
                                      "fprintf(stderr, \"x32 socket returned %ld\\n\", fd);\n"
                                      "return 30;\n"));
    expect(&r, KF_V_CRASH, "SIGSYS");
    fx_close(&f);
}
#endif

/* Reaching into another process (kforge's own, unconfined) or the terminal. */
Test(confine, other_processes_and_the_terminal_are_out_of_reach) {
    fixture f;
    fx_open(&f);
    kf_vresult r = run_src(&f, kernel(
        "char b[8]; struct iovec l = {b, 8}, rm = {(void *)0x10000, 8};\n"
        "if (process_vm_readv(getppid(), &l, 1, &rm, 1, 0) >= 0 || errno != EPERM) return 40;\n"
        "if (process_vm_writev(getppid(), &l, 1, &rm, 1, 0) >= 0 || errno != EPERM) return 41;\n"
        "if (ptrace(PTRACE_TRACEME, 0, 0, 0) == 0 || errno != EPERM) return 42;\n"
        "if (syscall(438 /* pidfd_getfd */, 0, 0, 0) >= 0 || errno != EPERM) return 43;\n"
        "char c = 'x';\n"
        "if (ioctl(0, TIOCSTI, &c) == 0 || errno != EPERM) return 44;\n"
        "if (open(\"/dev/tty\", O_RDWR) >= 0) return 45; /* no controlling terminal */\n"));
    expect(&r, KF_V_OK, NULL);
    fx_close(&f);
}

/* ---- the file system ---- */

static int skip_without_landlock(fixture *f) {
    char d[1024];
    if (describe(f, d, sizeof d) & KF_SANDBOX_WRITES) return 0;
    cr_log_warn("write confinement unavailable here: %s", d);
    return 1;
}

static const char *write_outside_src(const char *path) {
    char pre[1400];
    snprintf(pre, sizeof pre,
             "FILE *o = fopen(\"%s\", \"w\");\n"
             "if (!o) { fprintf(stderr, \"write refused: %%s\\n\", strerror(errno)); return 9; }\n"
             "fputs(\"escaped\\n\", o); fclose(o);\n",
             path);
    return kernel(pre);
}

Test(confine, write_outside_the_scratch_directory_is_refused) {
    fixture f;
    fx_open(&f);
    if (skip_without_landlock(&f)) {
        fx_close(&f);
        cr_skip_test("Landlock is unavailable on this kernel: writes are not confined");
    }
    char target[700];
    snprintf(target, sizeof target, "%s/escaped.txt", f.outside);
    kf_vresult r = run_src(&f, write_outside_src(target));
    expect(&r, KF_V_KERNEL_ERROR, "write refused: Permission denied");
    cr_assert_neq(access(target, F_OK), 0, "%s was written from the sandbox", target);
    sandbox_off();
    r = run_src(&f, write_outside_src(target));
    sandbox_on();
    expect(&r, KF_V_OK, NULL);
    cr_assert_eq(access(target, F_OK), 0, "with KFORGE_SANDBOX=off %s should exist", target);
    fx_close(&f);
}

/* Ways around a path check: a symlink from inside to outside, a rename out of the scratch
 * directory, the workdir itself (the artifacts live there: a candidate must not rewrite
 * its own or another's .so), and /dev/shm. */
Test(confine, no_way_around_the_write_rule) {
    fixture f;
    fx_open(&f);
    if (skip_without_landlock(&f)) {
        fx_close(&f);
        cr_skip_test("Landlock is unavailable on this kernel: writes are not confined");
    }
    char pre[4000];
    snprintf(pre, sizeof pre,
             "if (symlink(\"%s/via-link.txt\", \"link\") != 0) return 50;\n"
             "int fd = open(\"link\", O_WRONLY | O_CREAT, 0600);\n"
             "if (fd >= 0 || errno != EACCES) return 51;\n"
             "fd = open(\"inner.txt\", O_WRONLY | O_CREAT, 0600); if (fd < 0) return 52; close(fd);\n"
             "if (rename(\"inner.txt\", \"%s/renamed.txt\") == 0) return 53;\n"
             "if (link(\"inner.txt\", \"%s/linked.txt\") == 0) return 54;\n"
             "Dl_info di; if (!dladdr((void *)kforge_kernel, &di) || !di.dli_fname) return 55;\n"
             "if ((fd = open(di.dli_fname, O_WRONLY | O_APPEND)) >= 0) return 56;\n"
             "if (truncate(di.dli_fname, 0) == 0) return 57;\n"
             "if (unlink(di.dli_fname) == 0) return 58;\n"
             "char dir[4096]; snprintf(dir, sizeof dir, \"%%s\", di.dli_fname);\n"
             "*strrchr(dir, '/') = 0; strcat(dir, \"/planted.so\");\n"
             "if ((fd = open(dir, O_WRONLY | O_CREAT, 0700)) >= 0) return 59;\n"
             "if ((fd = open(\"/dev/shm/kf-confine-planted\", O_WRONLY | O_CREAT, 0600)) >= 0) return 60;\n"
             "if ((fd = open(\"/dev/null\", O_WRONLY)) < 0) return 61; close(fd);\n"
             "if (mkdir(\"/tmp/kf-confine-planted-dir\", 0700) == 0) return 62;\n",
             f.outside, f.outside, f.outside);
    kf_vresult r = run_src(&f, kernel(pre));
    expect(&r, KF_V_OK, NULL);
    glob_t gl;
    char pat[700];
    snprintf(pat, sizeof pat, "%s/*", f.outside);
    cr_assert_eq(glob(pat, 0, NULL, &gl), GLOB_NOMATCH, "something was written to %s", f.outside);
    snprintf(pat, sizeof pat, "%s/planted.so", f.wd);
    cr_assert_neq(access(pat, F_OK), 0);
    cr_assert_neq(access("/dev/shm/kf-confine-planted", F_OK), 0);
    fx_close(&f);
}

/* Inside its scratch directory the candidate may write: its working directory is there,
 * and so are TMPDIR and the runtime caches. Secrets from kforge's environment are gone. */
Test(confine, writes_inside_the_scratch_directory_work) {
    fixture f;
    fx_open(&f);
    cr_assert_eq(setenv("OPENAI_API_KEY", "sk-confine-test", 1), 0);
    kf_vresult r = run_src(&f, kernel(
        "if (getenv(\"OPENAI_API_KEY\")) return 70;\n"
        "const char *t = getenv(\"TMPDIR\"), *p = getenv(\"POCL_CACHE_DIR\");\n"
        "if (!t || !strstr(t, \"/kf-sbx-\") || !p || strncmp(p, t, strlen(t)) != 0) return 71;\n"
        "FILE *o = fopen(\"inside.txt\", \"w\"); if (!o) { perror(\"inside\"); return 72; }\n"
        "fputs(\"kept\\n\", o); fclose(o);\n"
        "if (mkdir(\"sub\", 0700) != 0 || rename(\"inside.txt\", \"sub/inside.txt\") != 0) return 73;\n"
        "char tp[4200]; snprintf(tp, sizeof tp, \"%s/tmpXXXXXX\", t);\n"
        "int fd = mkstemp(tp); if (fd < 0) return 74;\n"
        "if (write(fd, \"x\", 1) != 1 || ftruncate(fd, 0) != 0) return 75;\n"
        "close(fd); unlink(tp);\n"
        "o = fopen(\"sub/inside.txt\", \"r\"); if (!o) return 76;\n"
        "char got[8] = {0}; if (!fgets(got, sizeof got, o) || strcmp(got, \"kept\\n\") != 0) return 77;\n"
        "fclose(o);\n"));
    unsetenv("OPENAI_API_KEY");
    expect(&r, KF_V_OK, NULL);
    /* the scratch directory is the run's own: gone once the run is over */
    char pat[700];
    snprintf(pat, sizeof pat, "%s/kf-sbx-*", f.wd);
    glob_t gl;
    cr_assert_eq(glob(pat, 0, NULL, &gl), GLOB_NOMATCH, "a scratch directory survived the run");
    fx_close(&f);
}

/* ---- processes ---- */

/* A fork bomb (bounded at 100000 so an unconfined run ends too): the process-count limit
 * stops it with EAGAIN. RLIMIT_NPROC never binds uid 0, so as root this says so and skips;
 * run the suite as an ordinary user to see it. */
Test(confine, fork_bomb_is_stopped_by_the_process_limit) {
    if (getuid() == 0)
        cr_skip_test("running as root: RLIMIT_NPROC does not apply to uid 0 (the description "
                     "says 'not enforced'); run as an ordinary user to test the limit");
    fixture f;
    fx_open(&f);
    char d[1024];
    cr_assert(describe(&f, d, sizeof d) & KF_SANDBOX_NPROC, "%s", d);
    kf_vresult r = run_src(&f, kernel(
        "long n = 0;\n"
        "for (; n < 100000; n++) {\n"
        "    pid_t p = fork();\n"
        "    if (p == 0) { for (;;) pause(); }\n"
        "    if (p < 0) break;\n"
        "}\n"
        "fprintf(stderr, \"fork stopped after %ld: %s\\n\", n, strerror(errno));\n"
        "if (n >= 100000) return 80;\n"
        "if (errno != EAGAIN) return 81;\n"));
    expect(&r, KF_V_OK, NULL);
    fx_close(&f);
}

/* A candidate may write its own /proc/PID (the CUDA driver names its threads through
 * /proc/self/task/TID/comm and fails without), and nothing else under /proc. */
Test(confine, own_proc_entry_is_writable_and_no_other) {
    fixture f;
    fx_open(&f);
    if (skip_without_landlock(&f)) {
        fx_close(&f);
        cr_skip_test("Landlock is unavailable on this kernel: writes are not confined");
    }
    kf_vresult r = run_src(&f, kernel(
        "char p[64]; snprintf(p, sizeof p, \"/proc/self/task/%ld/comm\", (long)syscall(SYS_gettid));\n"
        "FILE *o = fopen(p, \"wb\");\n"
        "if (!o) { fprintf(stderr, \"own comm refused: %s\\n\", strerror(errno)); return 9; }\n"
        "fputs(\"kf-worker\", o); fclose(o);\n"
        "o = fopen(\"/proc/sys/kernel/core_pattern\", \"w\");\n"
        "if (o) { fclose(o); fprintf(stderr, \"core_pattern opened for writing\\n\"); return 10; }\n"
        "if (errno != EACCES) { fprintf(stderr, \"core_pattern: %s\\n\", strerror(errno)); return 11; }\n"));
    expect(&r, KF_V_OK, NULL);
    fx_close(&f);
}

/* HOME is the scratch directory (the CUDA driver creates $HOME/.nv whatever
 * CUDA_CACHE_PATH says): a candidate can write under $HOME, and what it writes stays out
 * of the user's home. */
Test(confine, home_is_the_scratch_directory) {
    fixture f;
    fx_open(&f);
    const char *home = getenv("HOME");
    char before[600] = "";
    if (home) snprintf(before, sizeof before, "%s/.kf-home-probe", home);
    kf_vresult r = run_src(&f, kernel(
        "const char *h = getenv(\"HOME\"); char cwd[4096], rh[4096];\n"
        "if (!h || !getcwd(cwd, sizeof cwd) || !realpath(h, rh) || strcmp(rh, cwd) != 0) {\n"
        "    fprintf(stderr, \"HOME is %s, not %s\\n\", h ? h : \"unset\", cwd); return 7; }\n"
        "char p[4200]; snprintf(p, sizeof p, \"%s/.kf-home-probe\", h);\n"
        "FILE *o = fopen(p, \"w\");\n"
        "if (!o) { fprintf(stderr, \"write under HOME refused: %s\\n\", strerror(errno)); return 9; }\n"
        "fclose(o);\n"));
    expect(&r, KF_V_OK, NULL);
    if (before[0]) cr_assert_neq(access(before, F_OK), 0, "%s was written from the sandbox", before);
    fx_close(&f);
}

