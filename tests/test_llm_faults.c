/*
 * A model run whose endpoint fails, through the real binary (issue 28, item 17): under -q
 * the run still says why it found nothing (it ended after the endpoint's failures with
 * exit 1 and no output at all), and calls that fail count against --max-calls (a refused
 * connection was free, so only the three-failures rule ended such a run).
 */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "llm_server.h"
#include "store_cli.h"

static char config_path[200];

static void setup(void) {
    llm_srv_setup();
    cli_setup(srv.dir);
    /* no retries, no backoff: each failing call is one quick request */
    snprintf(config_path, sizeof config_path, "%s/config.json", srv.dir);
    const char *cfg = "{\"max_retries\": 0, \"backoff_s\": 0, \"timeout_s\": 20}";
    kf_error err = {0};
    cr_assert_eq(kf_write_file(config_path, cfg, strlen(cfg), &err), KF_OK, "%s", err.msg);
    setenv("KFORGE_CONFIG", config_path, 1);
    setenv("OPENAI_API_KEY", "sk-faults-0000", 1);
}

static void teardown(void) {
    llm_srv_teardown();
    cli_teardown();
    rmdir(srv.dir);
}

TestSuite(llm_faults, .init = setup, .fini = teardown, .timeout = 300);

/* kforge synth --agent llm against port, 5 iterations, no store, with extra flags. */
static int model_run(const char *name, int port, const char *extra1, const char *extra2) {
    char out[300], url[64];
    snprintf(out, sizeof out, "%s/%s", cli.dir, name);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", port);
    const char *args[] = {"kforge", "synth", cli.task, "--agent", "llm", "--iters", "5", "--memcheck", "off",
                          "--threads", "1", "--no-store", "--llm-url", url, "--model", "scripted",
                          "--llm-protocol", "openai", "--out", out, extra1, extra2, NULL};
    return cli_run(name, args);
}

static void has(const char *what, const char *text, const char *phrase) {
    cr_assert_not_null(strstr(text, phrase), "%s lacks '%s':\n%s", what, phrase, text);
}

Test(llm_faults, quiet_run_says_why_it_failed) {
    start_server("[{\"status\":500,\"body\":{\"error\":{\"message\":\"model overloaded\"}}},"
                 "{\"status\":500,\"body\":{\"error\":{\"message\":\"model overloaded\"}}},"
                 "{\"status\":500,\"body\":{\"error\":{\"message\":\"model overloaded\"}}}]");
    cr_assert_eq(model_run("q", srv.port, "-q", NULL), 1);
    char *e = cli_err("q");
    has("stderr", e, "no verified kernel");
    has("stderr", e, "the model's endpoint failed 3 times in a row");
    has("stderr", e, "HTTP 500");
    has("stderr", e, "model overloaded");
    free(e);
    cr_assert_eq(log_count(), 3);
}

Test(llm_faults, failed_calls_count_against_max_calls) {
    /* a port nothing listens on: every call is refused */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t n = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &n);
    close(fd);
    cr_assert_eq(model_run("budget", ntohs(a.sin_port), "--max-calls", "2"), 1);
    char *o = cli_out("budget");
    has("stdout", o, "model: 2 calls");
    has("stdout", o, "LLM call budget spent: 2 calls made, max_calls is 2");
    free(o);
}
