/*
 * The HTML report (`kforge report RUN --html FILE`, src/report/html.c, src/agent/run_report.c).
 *
 * unit: a page from a hand-built struct holds one roofline point per verified candidate and
 *   none for the failed one, a bar per verified candidate and a cross per failed one, the
 *   source and a hostile label (`</script><b>&"`) only in escaped form, only its own two
 *   scripts, and nothing fetched from elsewhere; a page with no iterations, no ceilings and
 *   NULL strings is still a whole page.
 * real: the built `kforge synth` runs swish (4 iterations) into a temporary store, the run
 *   is loaded back (kf_run_load), and `kforge report` (the binary, as a user runs it) writes
 *   the page: one point per verified iteration, the best kernel's source escaped; unknown
 *   runs and a missing --html are usage errors naming the store and the run.
 * browser: headless Chromium (Debian's chromium package; scripts/setup.sh installs it; the
 *   test fails, not skips, without it) loads the pages from file:// URLs: the page's script
 *   ran (data-kf-ready="1" in the dumped DOM) and no script error was recorded
 *   (data-kf-error, set by the page's window.onerror) or logged; the hostile label is text
 *   in the DOM, not markup; a screenshot of the real page is saved in the build directory
 *   (report-test.png) and is a PNG of plausible size. A planted script error is detected,
 *   so the check can fail.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kforge/agent.h"
#include "kforge/report.h"
#include "kforge/store.h"

#define HOSTILE "</script><b>&\""
#define HOSTILE_ESC "&lt;/script&gt;&lt;b&gt;&amp;&quot;"

static char dir[256];

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/kf_test_report_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

TestSuite(report_html, .init = setup, .fini = teardown, .timeout = 300);

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static char *page_text(const kf_report_page *pg) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    cr_assert_eq(kf_report_html(f, pg), 0);
    fclose(f);
    return buf;
}

static char *escaped(const char *s) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    kf_report_html_escape(f, s);
    fclose(f);
    return buf;
}

static char *slurp(const char *path) {
    char *t = NULL;
    size_t len = 0;
    kf_error err = {0};
    cr_assert_eq(kf_read_file(path, &t, &len, &err), KF_OK, "%s: %s", path, err.msg);
    return t;
}

static void write_text(const char *path, const char *text) {
    kf_error err = {0};
    cr_assert_eq(kf_write_file(path, text, strlen(text), &err), KF_OK, "%s", err.msg);
}

static const char *kSource = "/* a < b && c > d */\nint f(void) { return 1; } </code></pre><script>alert(1)</script>\n";

/* Four candidates: iter 1 verified, 2 failed, 3 the best with the hostile label, 4 verified
 * from the cache. */
static void hand_page(kf_report_page *pg, kf_report_iter it[4]) {
    static const char *ev[] = {"bandwidth 20 GB/s of 30 <measured>"};
    static const char *recs[] = {"vw+: wider vectors", "block+: longer runs"};
    memset(it, 0, 4 * sizeof *it);
    memset(pg, 0, sizeof *pg);
    for (int i = 0; i < 4; i++) {
        it[i].iter = i + 1;
        it[i].agent = "builtin";
        it[i].status = "ok";
        it[i].verified = 1;
        it[i].time_ms = 8.0 - i;
        it[i].gbs = 16 + i;
        it[i].gflops = 10 + i;
        it[i].intensity = 0.625;
        it[i].pct_floor = 50 + 10 * i;
        it[i].bound = "memory";
        it[i].diagnosis = "memory-bound at 56%";
        it[i].evidence = ev;
        it[i].nevidence = 1;
        it[i].recs = recs;
        it[i].nrecs = 2;
        it[i].followed = i ? "s0.vw 8 -> 16" : "";
    }
    it[0].label = "vw=8 block=4096";
    it[1].label = "vw=16 block=<bad>";
    it[1].status = "compile-error";
    it[1].verified = 0;
    it[1].detail = "kernel.c:3: error: expected ';' before '}' token\nline 2\n";
    it[1].diagnosis = NULL;
    it[2].label = HOSTILE;
    it[3].label = "vw=16 block=8192";
    it[3].cached = 1;
    pg->task = "swish & <friends>";
    pg->run_id = "0123456789abcdef";
    pg->platform = "cpu";
    pg->device = "Test CPU";
    pg->plan = "ewise[2 ops]";
    pg->bw_gbs = 30;
    pg->peak_gflops = 460;
    pg->peak_what = "f32 FMA peak";
    pg->measured = 1;
    pg->ridge = 460.0 / 30;
    pg->bytes = 134e6;
    pg->flops = 84e6;
    pg->floor_ms = 4.48;
    pg->floor_bound = "memory";
    pg->iters = it;
    pg->niters = 4;
    pg->best = 2;
    pg->speedup_first = 8.0 / 6.0;
    pg->best_source = kSource;
    pg->best_file = "kernel.c";
    pg->best_flags = "-DX=\"1\"";
}

Test(report_html, unit_page_marks_and_escapes) {
    kf_report_page pg;
    kf_report_iter it[4];
    hand_page(&pg, it);
    char *page = page_text(&pg);
    cr_assert(!strncmp(page, "<!DOCTYPE html>", 15));
    /* one roofline point per verified candidate, the best marked, none for the failed one */
    cr_expect_eq(count(page, "<circle class=\"pt"), 3);
    cr_expect_eq(count(page, "<circle class=\"pt best\" data-iter=\"3\""), 1);
    for (int i = 1; i <= 4; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "class=\"pt\" data-iter=\"%d\"", i);
        cr_expect_eq(count(page, needle), i == 1 || i == 4, "point for iter %d", i);
    }
    /* a bar per verified candidate (the cached one says so), a cross per failed one */
    cr_expect_eq(count(page, "<rect class=\"bar"), 3 + 3); /* + the legend's three swatches */
    cr_expect_eq(count(page, "<rect class=\"bar best\" data-iter=\"3\""), 1);
    cr_expect_eq(count(page, "<rect class=\"bar cached\" data-iter=\"4\""), 1);
    cr_expect_eq(count(page, "<g class=\"fail\" data-iter=\"2\""), 1);
    /* both roofs, the ridge, the floor, axis titles */
    cr_expect_eq(count(page, "<polyline class=\"roof\""), 1);
    cr_expect(strstr(page, "memory roof 30 GB/s"));
    cr_expect(strstr(page, "compute roof 460 GFLOP/s"));
    cr_expect(strstr(page, "ridge 15.3 FLOP/B"));
    cr_expect(strstr(page, "roofline floor 4.48 ms"));
    cr_expect(strstr(page, "time per call (ms"));
    cr_expect(strstr(page, "arithmetic intensity (FLOP per byte"));
    /* every string of the run escaped: the hostile label, the source, the task, the detail */
    cr_expect(!strstr(page, HOSTILE), "the raw hostile label is in the page");
    cr_expect_geq(count(page, HOSTILE_ESC), 4, "the label escaped (chart titles, diagnoses, table)");
    cr_expect(strstr(page, "<pre><code id=\"best-source\">/* a &lt; b &amp;&amp; c &gt; d */\n"));
    cr_expect(strstr(page, "&lt;/code&gt;&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;"));
    cr_expect(!strstr(page, "alert(1)</script>"));
    cr_expect(strstr(page, "<title>kforge report: swish &amp; &lt;friends&gt;</title>"));
    cr_expect(strstr(page, "expected &#39;;&#39; before &#39;}&#39; token"));
    cr_expect(strstr(page, "-DX=&quot;1&quot;"));
    cr_expect(strstr(page, "bandwidth 20 GB/s of 30 &lt;measured&gt;"));
    cr_expect(strstr(page, "<li>block+: longer runs</li>"));
    cr_expect(strstr(page, "chosen by: s0.vw 8 -&gt; 16"));
    /* only the page's own two scripts; nothing loaded from elsewhere */
    cr_expect_eq(count(page, "<script"), 2);
    cr_expect_eq(count(page, "</script>"), 2);
    cr_expect(!strstr(page, "http:") && !strstr(page, "https:") && !strstr(page, " src=") &&
              !strstr(page, "<link") && !strstr(page, "@import") && !strstr(page, "url("));
    free(page);
}

/* The run's result record (issue 26): which agent wrote the result, or why there is none,
 * escaped; a page without one (an older run) says nothing of it. */
Test(report_html, unit_result_record_shown_escaped) {
    kf_report_page pg;
    kf_report_iter it[4];
    hand_page(&pg, it);
    char *page = page_text(&pg);
    cr_expect(!strstr(page, "id=\"result\""), "no result record, no line");
    free(page);
    const char *from[3] = {"builtin", "llm", "none"};
    for (int k = 0; k < 3; k++) {
        pg.result_from = from[k];
        pg.result_detail = "not covered: " HOSTILE " (node 1)";
        page = page_text(&pg);
        char want[80];
        snprintf(want, sizeof want, "<p class=\"sub\" id=\"result\">result from <code>%s</code>: ", from[k]);
        cr_expect(strstr(page, want), "%s missing", want);
        cr_expect(strstr(page, "not covered: " HOSTILE_ESC " (node 1)"));
        cr_expect(!strstr(page, "not covered: " HOSTILE));
        free(page);
    }
}

Test(report_html, unit_empty_run_is_a_whole_page) {
    kf_report_page pg;
    memset(&pg, 0, sizeof pg);
    pg.best = -1;
    char *page = page_text(&pg);
    cr_expect(strstr(page, "no iterations were stored"));
    cr_expect(strstr(page, "no device ceilings"));
    cr_expect(strstr(page, "No candidate verified"));
    cr_expect(strstr(page, "data-kf-ready"));
    cr_expect(strstr(page, "</html>\n"));
    free(page);
    /* a task without FLOPs: ceilings but nothing to place */
    kf_report_iter it[4];
    hand_page(&pg, it);
    for (int i = 0; i < 4; i++) it[i].intensity = 0, it[i].gflops = 0;
    pg.flops = 0;
    page = page_text(&pg);
    cr_expect_eq(count(page, "<circle class=\"pt"), 0);
    cr_expect(strstr(page, "this task counts no FLOPs"));
    free(page);
}

/* ---- running programs ---- */

/* Run cmd with sh; its stdout into *out (malloc'd) when out; returns the exit status. */
static int run(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "popen %s", cmd);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, p)) > 0) fwrite(chunk, 1, n, m);
    fclose(m);
    int st = pclose(p);
    if (out) *out = buf;
    else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static const char *chromium(void) {
    static char path[512];
    const char *cands[] = {"chromium", "chromium-browser", "google-chrome"};
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        char cmd[600], *out = NULL;
        snprintf(cmd, sizeof cmd, "command -v %s 2>/dev/null", cands[i]);
        if (run(cmd, &out) == 0 && out[0]) {
            snprintf(path, sizeof path, "%.*s", (int)strcspn(out, "\n"), out);
            free(out);
            return path;
        }
        free(out);
    }
    cr_assert_fail("chromium not found: the browser test needs headless Chromium; run scripts/setup.sh "
                   "(it installs Debian's chromium package)");
    return NULL;
}

/* Chromium's command line: headless, a fresh profile in the test's directory, nothing
 * fetched, console messages logged to stderr (into log). */
static void browser_cmd(char *cmd, size_t cap, const char *what, const char *page, const char *log) {
    static int profiles;
    snprintf(cmd, cap,
             "timeout 90 '%s' --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions "
             "--disable-background-networking --disable-sync --user-data-dir='%s/profile%d' "
             "--enable-logging=stderr --v=0 %s 'file://%s' 2>'%s'",
             chromium(), dir, profiles++, what, page, log);
}

/* Load page in the browser; returns the DOM after its scripts ran (malloc'd); the console
 * log into *log (malloc'd). */
static char *browser_dom(const char *page, char **log) {
    char cmd[2400], logpath[300];
    snprintf(logpath, sizeof logpath, "%s/chromium.log", dir);
    browser_cmd(cmd, sizeof cmd, "--dump-dom", page, logpath);
    char *dom = NULL;
    int rc = run(cmd, &dom);
    *log = slurp(logpath);
    cr_assert_eq(rc, 0, "chromium --dump-dom exited %d:\n%s", rc, *log);
    return dom;
}

/* The page loaded without script errors: its script ran to the end and nothing was recorded. */
static void expect_clean_load(const char *dom, const char *log) {
    cr_expect(strstr(dom, "data-kf-ready=\"1\""), "the page's script did not run to the end");
    cr_expect(!strstr(dom, "data-kf-error=\""), "script error: %.300s", strstr(dom, "data-kf-error=\""));
    cr_expect(!strstr(log, "Uncaught"), "console error in chromium's log:\n%s", log);
}

Test(report_html, browser_hostile_page_loads_clean) {
    kf_report_page pg;
    kf_report_iter it[4];
    hand_page(&pg, it);
    char *page = page_text(&pg);
    char path[300];
    snprintf(path, sizeof path, "%s/hostile.html", dir);
    write_text(path, page);
    char *log = NULL, *dom = browser_dom(path, &log);
    expect_clean_load(dom, log);
    /* the label is text in the DOM (serialized with its < > & escaped), not an element */
    cr_expect(strstr(dom, "&lt;/script&gt;&lt;b&gt;&amp;\""), "hostile label not text in the DOM");
    cr_expect(strstr(dom, "&lt;script&gt;alert(1)&lt;/script&gt;"));
    free(dom);
    free(log);

    /* planted fault: the same page with a script that throws must be reported */
    const char *tail = "</body>";
    char *at = strstr(page, tail);
    cr_assert_not_null(at);
    char *bad = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&bad, &blen);
    fprintf(f, "%.*s<script>kf_no_such_function();</script>%s", (int)(at - page), page, at);
    fclose(f);
    write_text(path, bad);
    dom = browser_dom(path, &log);
    cr_expect(strstr(dom, "data-kf-error=\""), "a planted script error was not recorded");
    cr_expect(strstr(dom, "kf_no_such_function"));
    cr_expect(strstr(log, "Uncaught"), "chromium's console log did not show the planted error:\n%s", log);
    free(dom);
    free(log);
    free(bad);
    free(page);
}

Test(report_html, real_run_report_in_browser, .timeout = 600) {
    char db[300], out[300], html[300], cmd[2400], kforge[300];
    snprintf(db, sizeof db, "%s/kforge.db", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(html, sizeof html, "%s/report.html", dir);
    snprintf(kforge, sizeof kforge, "%s/kforge", KF_BUILD_DIR);
    snprintf(cmd, sizeof cmd,
             "'%s' synth '%s/tasks/swish.kf' --iters 4 --seed 7 --memcheck off --store '%s' --out '%s' "
             ">'%s/synth.log' 2>&1",
             kforge, KF_SOURCE_DIR, db, out, dir);
    cr_assert_eq(run(cmd, NULL), 0, "kforge synth failed (see %s/synth.log)", dir);

    /* the run as the store holds it */
    kf_store *s = NULL;
    kf_error err = {0};
    cr_assert_eq(kf_store_open(db, &s, &err), KF_OK, "%s", err.msg);
    kf_store_run *runs = NULL;
    int n = 0;
    cr_assert_eq(kf_store_runs_list(s, NULL, 0, &runs, &n, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(n, 1);
    char id[17];
    snprintf(id, sizeof id, "%s", runs[0].id);
    for (int i = 0; i < n; i++) kf_store_run_clear(&runs[i]);
    free(runs);
    kf_run_result r;
    cr_assert_eq(kf_run_load(s, id, &r, NULL, &err), KF_OK, "%s", err.msg);
    kf_store_close(s);
    cr_assert_eq(r.niters, 4);
    cr_assert_geq(r.best, 0, "no candidate of swish verified");
    int verified = 0;
    for (int i = 0; i < r.niters; i++) verified += r.iters[i].res.status == KF_V_OK && r.iters[i].res.timed;

    /* the page, written by the binary from an id prefix */
    snprintf(cmd, sizeof cmd, "'%s' report %.8s --html '%s' --store '%s' 2>&1", kforge, id, html, db);
    char *said = NULL;
    cr_assert_eq(run(cmd, &said), 0, "kforge report failed: %s", said);
    free(said);
    char *page = slurp(html);
    cr_expect_eq(count(page, "<circle class=\"pt"), verified);
    for (int i = 0; i < r.niters; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "<tr data-iter=\"%d\"", r.iters[i].iter);
        cr_expect_eq(count(page, needle), 1, "table row of iter %d", r.iters[i].iter);
    }
    char *src = escaped(r.best_source);
    cr_expect(strstr(page, src), "the best kernel's source (escaped) is not in the page");
    cr_expect(strstr(page, id), "the run id is not in the page");
    free(src);
    kf_run_result_free(&r);

    /* usage errors name what went wrong */
    snprintf(cmd, sizeof cmd, "'%s' report nosuchrun --html '%s/x.html' --store '%s' 2>&1", kforge, dir, db);
    cr_expect_eq(run(cmd, &said), 2);
    cr_expect(strstr(said, db) && strstr(said, "nosuchrun"), "error does not name the store and run: %s", said);
    free(said);
    snprintf(cmd, sizeof cmd, "'%s' report %s --store '%s' 2>&1", kforge, id, db);
    cr_expect_eq(run(cmd, &said), 2);
    cr_expect(strstr(said, "--html"), "%s", said);
    free(said);
    snprintf(cmd, sizeof cmd, "'%s' report %s --html '%s/no/such/dir/x.html' --store '%s' 2>&1", kforge, id, dir, db);
    cr_expect_eq(run(cmd, &said), 2);
    cr_expect(strstr(said, "no/such/dir/x.html"), "%s", said);
    free(said);

    /* in the browser: loads clean; the screenshot lands in the build directory */
    char *log = NULL, *dom = browser_dom(html, &log);
    expect_clean_load(dom, log);
    free(dom);
    free(log);
    char png[400], logpath[300];
    snprintf(png, sizeof png, "%s/report-test.png", KF_BUILD_DIR);
    snprintf(logpath, sizeof logpath, "%s/shot.log", dir);
    unlink(png);
    char what[600];
    snprintf(what, sizeof what, "--window-size=1280,2400 --hide-scrollbars --screenshot='%s'", png);
    browser_cmd(cmd, sizeof cmd, what, html, logpath);
    int rc = run(cmd, NULL);
    char *slog = slurp(logpath);
    cr_assert_eq(rc, 0, "chromium --screenshot exited %d:\n%s", rc, slog);
    free(slog);
    struct stat st;
    cr_assert_eq(stat(png, &st), 0, "no screenshot at %s", png);
    cr_expect_gt(st.st_size, 20000, "screenshot %s is only %ld bytes", png, (long)st.st_size);
    FILE *f = fopen(png, "rb");
    unsigned char sig[8] = {0};
    cr_assert_not_null(f);
    cr_expect_eq(fread(sig, 1, 8, f), 8);
    fclose(f);
    cr_expect(!memcmp(sig, "\x89PNG\r\n\x1a\n", 8), "%s is not a PNG", png);
    free(page);
}
