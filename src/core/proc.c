/*
 * Running a tool (a compiler, nvcc, nvidia-smi) as a child process with its output
 * captured and a wall-clock limit: the one implementation the CPU and CUDA backends share.
 *
 * Design note. The child is started with posix_spawnp in a process group of its own, with
 * stdin from /dev/null, stdout and stderr into one pipe, an empty signal mask and default
 * dispositions for the signals kforge handles. The parent reads the pipe until EOF or the
 * deadline, then waits without reaping (WNOWAIT) so that the group's id cannot be reused
 * while the group is killed; anything left in the group dies with it. Candidates never run
 * here: they run in the sandbox (src/verify).
 */
#include "kforge/core.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int kf_run_capture(char *const *argv, double timeout_s, kf_buf *out, size_t out_cap, int *wstatus,
                   char *why, size_t whycap) {
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        snprintf(why, whycap, "pipe: %s", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
    posix_spawnattr_init(&at);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    int sigs[] = {SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGCHLD};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(&dfl, sigs[i]);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid = 0;
    int src = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(pfd[1]);
    if (src != 0) {
        close(pfd[0]);
        snprintf(why, whycap, "cannot run '%s': %s", argv[0], strerror(src));
        return -1;
    }
    double deadline = kf_now() + timeout_s;
    int timed_out = 0;
    char chunk[8192];
    for (;;) {
        double left = deadline - kf_now();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd pf = {.fd = pfd[0], .events = POLLIN};
        int pr = poll(&pf, 1, left > 1.0 ? 1000 : (int)(left * 1000) + 1);
        if (pr < 0 && errno != EINTR) break;
        if (pr <= 0) continue;
        ssize_t k = read(pfd[0], chunk, sizeof chunk);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) break; /* EOF: every writer in the group is gone or closed it */
        if (out && out->len < out_cap) kf_buf_putn(out, chunk, (size_t)k);
    }
    close(pfd[0]);
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        int wr = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if (wr == 0 && si.si_pid == pid) break;
        if (wr < 0 && errno != EINTR) break;
        if (timed_out || kf_now() > deadline) {
            timed_out = 1;
            kill(-pid, SIGKILL);
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    kill(-pid, SIGKILL); /* stragglers left in the group */
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
    if (timed_out) {
        snprintf(why, whycap, "'%s' ran past its %.0f s limit and was killed", argv[0], timeout_s);
        return -1;
    }
    *wstatus = ws;
    return 0;
}
