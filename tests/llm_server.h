/*
 * The scripted chat-model server (tests/llm_server.py) for the tests that need one: a
 * per-test temporary folder, the server started on loopback with a script, its request
 * log read back. Include once per test file, after criterion.h; call llm_srv_setup and
 * llm_srv_teardown from the suite's init and fini.
 */
#ifndef KF_TEST_LLM_SERVER_H
#define KF_TEST_LLM_SERVER_H

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kforge/core.h"

static struct {
    pid_t pid;
    int stdin_fd;
    int port;
    char dir[64];
    char script[128];
    char log[128];
} srv = {.pid = -1, .stdin_fd = -1};

static inline void llm_srv_setup(void) {
    snprintf(srv.dir, sizeof srv.dir, "/tmp/kf-llm-test-XXXXXX");
    cr_assert_not_null(mkdtemp(srv.dir));
    snprintf(srv.script, sizeof srv.script, "%s/script.json", srv.dir);
    snprintf(srv.log, sizeof srv.log, "%s/requests.jsonl", srv.dir);
    /* Loopback must not go through a proxy from the environment. */
    const char *proxies[] = {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                             "ALL_PROXY", "all_proxy"};
    for (size_t i = 0; i < sizeof proxies / sizeof *proxies; i++) unsetenv(proxies[i]);
    const char *vars[] = {"KFORGE_LLM_URL", "KFORGE_LLM_MODEL", "KFORGE_LLM_PROTOCOL",
                          "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "KFORGE_CONFIG"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

static inline void llm_srv_teardown(void) {
    if (srv.pid > 0) {
        kill(srv.pid, SIGKILL);
        waitpid(srv.pid, NULL, 0);
        srv.pid = -1;
    }
    if (srv.stdin_fd >= 0) close(srv.stdin_fd);
    srv.stdin_fd = -1;
    char path[160];
    const char *files[] = {"script.json", "requests.jsonl", "config.json", "bad.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", srv.dir, files[i]);
        unlink(path);
    }
    rmdir(srv.dir);
}


/* Start the server playing script (JSON text); sets srv.port. */
static inline void start_server(const char *script) {
    kf_error err = {0};
    cr_assert_eq(kf_write_file(srv.script, script, strlen(script), &err), KF_OK, "%s", err.msg);
    int in[2], out[2];
    cr_assert_eq(pipe(in), 0);
    cr_assert_eq(pipe(out), 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        execlp("python3", "python3", KF_SOURCE_DIR "/tests/llm_server.py", srv.script, srv.log,
               (char *)NULL);
        _exit(127);
    }
    srv.pid = pid;
    close(in[0]);
    close(out[1]);
    srv.stdin_fd = in[1];
    char line[32] = "";
    size_t n = 0;
    while (n + 1 < sizeof line) {
        struct pollfd p = {out[0], POLLIN, 0};
        cr_assert_gt(poll(&p, 1, 10000), 0, "the test server did not print its port in 10 s");
        ssize_t k = read(out[0], line + n, 1);
        cr_assert_gt(k, 0, "the test server exited before printing its port");
        if (line[n] == '\n') break;
        n++;
    }
    line[n] = 0;
    close(out[0]);
    srv.port = atoi(line);
    cr_assert_gt(srv.port, 0, "bad port line '%s'", line);
}

/* The requests the server logged, as a JSON array (caller decrefs). */
static inline json_t *server_log(void) {
    json_t *arr = json_array();
    FILE *f = fopen(srv.log, "r");
    if (!f) return arr;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *j = json_loads(line, 0, &je);
        cr_assert_not_null(j, "bad log line: %s", line);
        json_array_append_new(arr, j);
    }
    free(line);
    fclose(f);
    return arr;
}

static inline int log_count(void) {
    json_t *a = server_log();
    int n = (int)json_array_size(a);
    json_decref(a);
    return n;
}

/* The value at a dotted path ("body.messages.0.role") of a log entry. */
static inline json_t *at(json_t *j, const char *dotted) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", dotted);
    for (char *save = NULL, *part = strtok_r(buf, ".", &save); part && j;
         part = strtok_r(NULL, ".", &save)) {
        if (json_is_array(j)) j = json_array_get(j, (size_t)atoi(part));
        else j = json_object_get(j, part);
    }
    return j;
}

static inline const char *str_at(json_t *j, const char *dotted) {
    const char *s = json_string_value(at(j, dotted));
    cr_assert_not_null(s, "no string at %s", dotted);
    return s;
}
#endif
