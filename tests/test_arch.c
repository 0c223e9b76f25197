/*
 * Tests of the architecture ceilings (src/arch): calibration on this machine gives
 * positive, plausible numbers; the cache round-trips entries per device key, resolves its
 * directory from the environment, writes atomically and treats a corrupt file as an error
 * naming the file, which kf_arch_get_cpu then re-measures and overwrites.
 *
 * Each Criterion test runs in its own process, so setenv() in one does not leak into another.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kforge/arch.h"

/* A fresh temporary directory; the cache lives in a not-yet-existing subdirectory so that
 * saving must create it. */
static char tmpdir[256];
static char cachedir[320];
static char cachefile[400];

static void make_cache_dir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kf_test_arch_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(cachedir, sizeof cachedir, "%s/sub/cache", tmpdir);
    snprintf(cachefile, sizeof cachefile, "%s/calibration.json", cachedir);
    cr_assert_eq(setenv("KFORGE_CACHE_DIR", cachedir, 1), 0);
}

static void rm_rf(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_rf(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void remove_cache_dir(void) { rm_rf(tmpdir); }

static kf_ceilings fake(const char *key, double copy) {
    kf_ceilings c;
    memset(&c, 0, sizeof c);
    snprintf(c.device_key, sizeof c.device_key, "%s", key);
    c.measured = 1;
    c.threads = 2;
    c.copy_gbs = copy;
    c.read_gbs = 21.5;
    c.write_gbs = 19.25;
    c.peak_gflops_f32 = 187.125;
    c.peak_gflops_f64 = 93.5;
    snprintf(c.when, sizeof c.when, "2025-01-02T03:04:05Z");
    return c;
}

static void write_text(const char *path, const char *text) {
    kf_error err = {0};
    cr_assert_eq(kf_mkdirs(cachedir, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_write_file(path, text, strlen(text), &err), KF_OK, "%s", err.msg);
}

/* Measured, positive and finite, and under ceilings no machine reaches (a unit error
 * would break those). No lower bound and no f32/f64 order: a loaded machine (tests beside
 * a build on two cores) measures anything down to a trickle, and speed is the benchmarks'
 * business, not a unit test's. */
static void assert_plausible(const kf_ceilings *c) {
    cr_assert_eq(c->measured, 1);
    cr_assert(c->copy_gbs > 0 && c->copy_gbs < 1000.0, "copy %.2f GB/s", c->copy_gbs);
    cr_assert(c->read_gbs > 0 && c->read_gbs < 1000.0, "read %.2f GB/s", c->read_gbs);
    cr_assert(c->write_gbs > 0 && c->write_gbs < 1000.0, "write %.2f GB/s", c->write_gbs);
    cr_assert(c->peak_gflops_f32 > 0 && c->peak_gflops_f32 < 100000.0, "f32 %.2f GFLOP/s",
              c->peak_gflops_f32);
    cr_assert(c->peak_gflops_f64 > 0 && c->peak_gflops_f64 < 100000.0, "f64 %.2f GFLOP/s",
              c->peak_gflops_f64);
    /* "YYYY-MM-DDTHH:MM:SSZ" */
    cr_assert_eq(strlen(c->when), 20, "when '%s'", c->when);
    cr_assert_eq(c->when[4], '-');
    cr_assert_eq(c->when[10], 'T');
    cr_assert_eq(c->when[19], 'Z');
}

Test(calibrate, all_threads_plausible) {
    kf_ceilings c;
    memset(&c, 0x5a, sizeof c);
    kf_error err = {0};
    cr_assert_eq(kf_arch_calibrate_cpu(0, &c, &err), KF_OK, "%s", err.msg);
    assert_plausible(&c);
    cr_assert_geq(c.threads, 1);
    cr_assert_leq(c.threads, sysconf(_SC_NPROCESSORS_ONLN));
    cr_assert_str_eq(c.device_key, "");
    /* an empty OpenMP parallel region: measured (its size depends on the machine's load:
     * 2.9 ms was seen beside a build, so no bound is asserted) */
    cr_assert(c.launch_us > 0 && isfinite(c.launch_us), "fork/join %g us", c.launch_us);
    fprintf(stderr,
            "calibration (%d threads): copy %.1f GB/s, read %.1f GB/s, write %.1f GB/s, "
            "peak f32 %.1f GFLOP/s, f64 %.1f GFLOP/s, at %s\n",
            c.threads, c.copy_gbs, c.read_gbs, c.write_gbs, c.peak_gflops_f32,
            c.peak_gflops_f64, c.when);
}

Test(calibrate, one_thread) {
    kf_ceilings c;
    kf_error err = {0};
    cr_assert_eq(kf_arch_calibrate_cpu(1, &c, &err), KF_OK, "%s", err.msg);
    assert_plausible(&c);
    cr_assert_eq(c.threads, 1);
    fprintf(stderr, "calibration (1 thread): copy %.1f GB/s, peak f32 %.1f GFLOP/s\n",
            c.copy_gbs, c.peak_gflops_f32);
}

Test(calibrate, bad_arguments) {
    kf_ceilings c;
    kf_error err = {0};
    cr_assert_eq(kf_arch_calibrate_cpu(-1, &c, &err), KF_ERR_ARG);
    cr_assert_eq(err.code, KF_ERR_ARG);
    cr_assert_eq(kf_arch_calibrate_cpu(1, NULL, NULL), KF_ERR_ARG);
}

Test(cache, round_trip, .init = make_cache_dir, .fini = remove_cache_dir) {
    kf_error err = {0};
    kf_ceilings got;
    cr_assert_eq(kf_arch_load("cpu:a", &got, &err), KF_ERR_IO, "absent file: %s", err.msg);

    kf_ceilings a = fake("cpu:a", 31.5), b = fake("cpu:b \"quoted\" \\ key", 12.0);
    b.measured = 0;
    b.threads = 1;
    cr_assert_eq(kf_arch_save(&a, &err), KF_OK, "%s", err.msg);
    struct stat st;
    cr_assert_eq(stat(cachefile, &st), 0, "save must create %s", cachefile);
    cr_assert_eq(kf_arch_load("cpu:b \"quoted\" \\ key", &got, &err), KF_ERR_IO,
                 "absent entry");
    cr_assert(strstr(err.msg, "no calibration cached"), "%s", err.msg);
    cr_assert_eq(kf_arch_save(&b, &err), KF_OK, "%s", err.msg);

    memset(&got, 0, sizeof got);
    cr_assert_eq(kf_arch_load("cpu:a", &got, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(memcmp(&got, &a, sizeof a), 0, "entry a round trip");
    cr_assert_eq(kf_arch_load("cpu:b \"quoted\" \\ key", &got, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(memcmp(&got, &b, sizeof b), 0, "entry b round trip");

    /* replacing a keeps b */
    a.copy_gbs = 99.75;
    cr_assert_eq(kf_arch_save(&a, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_arch_load("cpu:a", &got, &err), KF_OK);
    cr_assert_eq(got.copy_gbs, 99.75);
    cr_assert_eq(kf_arch_load("cpu:b \"quoted\" \\ key", &got, &err), KF_OK);
    cr_assert_eq(got.copy_gbs, 12.0);

    /* no temporary files left behind: only the cache and its lock */
    DIR *d = opendir(cachedir);
    cr_assert_not_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || !strcmp(e->d_name, ".."))) continue;
        cr_assert(!strcmp(e->d_name, "calibration.json") ||
                      !strcmp(e->d_name, "calibration.json.lock"),
                  "stray file %s", e->d_name);
        n++;
    }
    closedir(d);
    cr_assert_leq(n, 2);
}

/* launch_us is optional in the file: entries written before it was measured load as 0. */
Test(cache, launch_overhead_round_trip_and_old_entries, .init = make_cache_dir,
     .fini = remove_cache_dir) {
    kf_error err = {0};
    kf_ceilings a = fake("cuda|X|1", 3000), got;
    a.launch_us = 2.75;
    cr_assert_eq(kf_arch_save(&a, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_arch_load("cuda|X|1", &got, &err), KF_OK, "%s", err.msg);
    cr_assert_float_eq(got.launch_us, 2.75, 0);
    FILE *f = fopen(cachefile, "w");
    cr_assert_not_null(f);
    fputs("{\"format\": \"kforge-calibration\", \"version\": 1, \"devices\": {\"old\": {\"measured\": 1,"
          " \"threads\": 2, \"copy_gbs\": 30, \"read_gbs\": 20, \"write_gbs\": 20, \"peak_gflops_f32\": 100,"
          " \"peak_gflops_f64\": 50, \"when\": \"2025-01-01\"}, \"bad\": {\"measured\": 1, \"threads\": 2,"
          " \"copy_gbs\": 30, \"read_gbs\": 20, \"write_gbs\": 20, \"peak_gflops_f32\": 100,"
          " \"peak_gflops_f64\": 50, \"launch_us\": -1, \"when\": \"2025-01-01\"}}}", f);
    fclose(f);
    cr_assert_eq(kf_arch_load("old", &got, &err), KF_OK, "%s", err.msg);
    cr_assert_float_eq(got.launch_us, 0, 0);
    cr_assert_eq(kf_arch_load("bad", &got, &err), KF_ERR_PARSE);
    cr_assert(strstr(err.msg, "launch_us"), "%s", err.msg);
}

Test(cache, bad_keys_and_values, .init = make_cache_dir, .fini = remove_cache_dir) {
    kf_error err = {0};
    kf_ceilings got;
    cr_assert_eq(kf_arch_load("", &got, &err), KF_ERR_ARG);
    char longkey[300];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    cr_assert_eq(kf_arch_load(longkey, &got, &err), KF_ERR_ARG);
    kf_ceilings c = fake("", 1.0);
    cr_assert_eq(kf_arch_save(&c, &err), KF_ERR_ARG);
    c = fake("cpu:x", NAN);
    cr_assert_eq(kf_arch_save(&c, &err), KF_ERR_ARG);
    c = fake("cpu:x", -3.0);
    cr_assert_eq(kf_arch_save(&c, &err), KF_ERR_ARG);
    cr_assert_eq(kf_arch_save(NULL, &err), KF_ERR_ARG);
    c = fake("cpu:\xff\xfe", 1.0); /* not UTF-8: JSON cannot hold it */
    cr_assert_eq(kf_arch_save(&c, &err), KF_ERR_ARG, "%s", err.msg);
}

Test(cache, directory_from_xdg_and_home) {
    char base[] = "/tmp/kf_test_arch_env_XXXXXX";
    cr_assert_not_null(mkdtemp(base));
    unsetenv("KFORGE_CACHE_DIR");
    char xdg[128], home[128], path[256];
    snprintf(xdg, sizeof xdg, "%s/xdg", base);
    snprintf(home, sizeof home, "%s/home", base);
    setenv("XDG_CACHE_HOME", xdg, 1);
    setenv("HOME", home, 1);
    kf_error err = {0};
    kf_ceilings c = fake("cpu:env", 5.0), got;
    cr_assert_eq(kf_arch_save(&c, &err), KF_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/kforge/calibration.json", xdg);
    cr_assert_eq(access(path, R_OK), 0, "expected %s", path);

    unsetenv("XDG_CACHE_HOME");
    cr_assert_eq(kf_arch_load("cpu:env", &got, &err), KF_ERR_IO, "HOME cache is empty");
    cr_assert_eq(kf_arch_save(&c, &err), KF_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/.cache/kforge/calibration.json", home);
    cr_assert_eq(access(path, R_OK), 0, "expected %s", path);
    cr_assert_eq(kf_arch_load("cpu:env", &got, &err), KF_OK, "%s", err.msg);
    rm_rf(base);
}

Test(cache, corrupt_file_is_an_error_naming_it, .init = make_cache_dir,
     .fini = remove_cache_dir) {
    kf_error err = {0};
    kf_ceilings got;
    write_text(cachefile, "{\n  \"format\": \"kforge-calibration\",\n  oops\n");
    cr_assert_eq(kf_arch_load("cpu:a", &got, &err), KF_ERR_PARSE, "%s", err.msg);
    cr_assert_str_eq(err.file, cachefile);
    cr_assert_eq(err.line, 3, "line %d", err.line);
    char msg[2048];
    kf_error_format(&err, msg, sizeof msg);
    cr_assert(strstr(msg, cachefile) && strstr(msg, "corrupt"), "%s", msg);

    /* valid JSON of the wrong shape */
    write_text(cachefile, "[1, 2, 3]\n");
    cr_assert_eq(kf_arch_load("cpu:a", &got, &err), KF_ERR_PARSE);
    cr_assert_str_eq(err.file, cachefile);
    write_text(cachefile,
               "{\"format\": \"kforge-calibration\", \"version\": 1, \"devices\": 7}");
    cr_assert_eq(kf_arch_load("cpu:a", &got, &err), KF_ERR_PARSE);

    /* an entry with a bad field */
    write_text(cachefile,
               "{\"format\": \"kforge-calibration\", \"version\": 1, \"devices\": {\"cpu:a\": "
               "{\"measured\": 1, \"threads\": 2, \"copy_gbs\": \"fast\", \"read_gbs\": 1, "
               "\"write_gbs\": 1, \"peak_gflops_f32\": 1, \"peak_gflops_f64\": 1, "
               "\"when\": \"x\"}}}");
    cr_assert_eq(kf_arch_load("cpu:a", &got, &err), KF_ERR_PARSE);
    cr_assert_str_eq(err.file, cachefile);
    cr_assert(strstr(err.msg, "copy_gbs"), "%s", err.msg);

    /* save replaces a corrupt file whole */
    write_text(cachefile, "garbage");
    kf_ceilings c = fake("cpu:a", 7.0);
    cr_assert_eq(kf_arch_save(&c, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_arch_load("cpu:a", &got, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(got.copy_gbs, 7.0);
}

Test(cache, get_cpu_uses_the_cache, .init = make_cache_dir, .fini = remove_cache_dir) {
    kf_error err = {0};
    kf_ceilings c = fake("cpu:cached", 123.0), got;
    cr_assert_eq(kf_arch_save(&c, &err), KF_OK, "%s", err.msg);
    /* the fake values coming back show that nothing was measured */
    cr_assert_eq(kf_arch_get_cpu("cpu:cached", 0, 0, &got, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(memcmp(&got, &c, sizeof c), 0, "the cached entry, not a measurement");
    cr_assert_eq(kf_arch_get_cpu("cpu:cached", 2, 0, &got, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(got.copy_gbs, 123.0, "same thread count: cached");
    cr_assert_eq(kf_arch_get_cpu("", 0, 0, &got, &err), KF_ERR_ARG);
}

Test(cache, get_cpu_measures_and_saves, .init = make_cache_dir, .fini = remove_cache_dir) {
    kf_error err = {0};
    kf_ceilings got, again;
    cr_assert_eq(kf_arch_get_cpu("cpu:new", 1, 0, &got, &err), KF_OK, "%s", err.msg);
    assert_plausible(&got);
    cr_assert_str_eq(got.device_key, "cpu:new");
    cr_assert_eq(got.threads, 1);
    cr_assert_eq(kf_arch_load("cpu:new", &again, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(memcmp(&got, &again, sizeof got), 0, "saved what it measured");

    /* force re-measures even with an entry present */
    kf_ceilings c = fake("cpu:new", 555.0);
    c.threads = 1;
    cr_assert_eq(kf_arch_save(&c, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_arch_get_cpu("cpu:new", 1, 1, &got, &err), KF_OK, "%s", err.msg);
    cr_assert_neq(got.copy_gbs, 555.0);
    assert_plausible(&got);
}

Test(cache, get_cpu_overwrites_a_corrupt_file, .init = make_cache_dir,
     .fini = remove_cache_dir) {
    write_text(cachefile, "{ this is not json");
    kf_error err = {0};
    kf_ceilings got, again;
    cr_assert_eq(kf_arch_get_cpu("cpu:c", 1, 0, &got, &err), KF_OK, "%s", err.msg);
    assert_plausible(&got);
    cr_assert_eq(kf_arch_load("cpu:c", &again, &err), KF_OK, "rewritten: %s", err.msg);
    cr_assert_eq(again.copy_gbs, got.copy_gbs);
}

/* The load during a calibration is measured: with twice as many spinning processes as
 * CPUs, others hold most of the machine. */
Test(calibrate, load_of_other_processes_is_measured) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    pid_t kids[64];
    int nk = 0;
    for (long i = 0; i < 2 * ncpu && nk < 64; i++) {
        pid_t p = fork();
        cr_assert_geq(p, 0);
        if (p == 0) {
            volatile unsigned long x = 0;
            for (;;) x++; /* killed below */
        }
        kids[nk++] = p;
    }
    kf_ceilings c;
    kf_error err = {0};
    kf_status st = kf_arch_calibrate_cpu(0, &c, &err);
    for (int i = 0; i < nk; i++) kill(kids[i], SIGKILL);
    for (int i = 0; i < nk; i++) waitpid(kids[i], NULL, 0);
    cr_assert_eq(st, KF_OK, "%s", err.msg);
    cr_assert_gt(c.busy, 0.3, "%d spinners on %ld CPUs, busy measured %.2f", nk, ncpu, c.busy);
    cr_assert_leq(c.busy, 1.0);
    fprintf(stderr, "calibration beside %d spinning processes: others used %.0f%% of the machine\n", nk,
            100 * c.busy);
}

/* An entry measured on a busy machine is measured again, and no ceiling goes down; an
 * idle entry is used as it is; busy survives the round trip and is validated. */
Test(cache, busy_entries_are_measured_again, .init = make_cache_dir, .fini = remove_cache_dir) {
    kf_error err = {0};
    kf_ceilings low = fake("cpu:busy", 0.001), got, again;
    low.threads = 1;
    low.read_gbs = low.write_gbs = 0.001;
    low.peak_gflops_f32 = low.peak_gflops_f64 = 0.001;
    low.busy = 0.05; /* below KF_CALIB_BUSY_MAX: trusted, served from the cache */
    cr_assert_eq(kf_arch_save(&low, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_arch_get_cpu("cpu:busy", 1, 0, &got, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(got.copy_gbs, 0.001);
    cr_assert_float_eq(got.busy, 0.05, 1e-12);
    low.busy = 0.8;
    cr_assert_eq(kf_arch_save(&low, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_arch_get_cpu("cpu:busy", 1, 0, &got, &err), KF_OK, "%s", err.msg);
    assert_plausible(&got);
    cr_assert_neq(got.copy_gbs, 0.001, "measured again"); /* the fake value is gone */
    cr_assert_leq(got.busy, 0.8);
    cr_assert_eq(kf_arch_load("cpu:busy", &again, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(again.copy_gbs, got.copy_gbs, "and saved");
    /* a busy re-measurement never lowers a ceiling: a high busy entry keeps its numbers
     * unless the new measurement is idle (then it replaces them) */
    kf_ceilings high = fake("cpu:high", 1e6);
    high.threads = 1;
    high.busy = 0.9;
    cr_assert_eq(kf_arch_save(&high, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_arch_get_cpu("cpu:high", 1, 0, &got, &err), KF_OK, "%s", err.msg);
    if (got.busy > KF_CALIB_BUSY_MAX) cr_assert_eq(got.copy_gbs, 1e6, "busy again: the max is kept");
    else cr_assert_lt(got.copy_gbs, 1e6, "idle now: replaced");
    /* round trip and validation */
    high.busy = 0.5;
    cr_assert_eq(kf_arch_save(&high, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_arch_load("cpu:high", &got, &err), KF_OK, "%s", err.msg);
    cr_assert_float_eq(got.busy, 0.5, 1e-12);
    high.busy = 1.5;
    cr_assert_eq(kf_arch_save(&high, &err), KF_ERR_ARG);
    /* a busy measurement younger than KF_CALIB_BUSY_RETRY_S is served (a machine that
     * stays busy is not measured again by every run) */
    kf_ceilings young = fake("cpu:young", 0.001);
    young.threads = 1;
    young.busy = 0.9;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(young.when, sizeof young.when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cr_assert_eq(kf_arch_save(&young, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_arch_get_cpu("cpu:young", 1, 0, &got, &err), KF_OK, "%s", err.msg);
    /* the fake value coming back shows that nothing was measured */
    cr_assert_eq(got.copy_gbs, 0.001, "served, not measured again, within the retry window");
}
