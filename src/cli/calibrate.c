/*
 * `kforge calibrate`: measure the device's real ceilings (streaming copy/read/write
 * bandwidth, f32/f64 FMA peak, launch overhead), cache them per device, and set them
 * beside the architecture database's datasheet numbers for the device. `kforge analyze`:
 * the analysis agent on a recorded run, with profiler counters.
 */
#include "cli/cli.h"

#include "kforge/agent.h"
#include "kforge/arch.h"
#include "kforge/backend.h"
#include "kforge/calib.h"
#include "kforge/perf.h"
#include "kforge/platform.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: kforge calibrate [--target T] [--threads N] [--cached] [--json]\n"
            "\n"
            "Measures the device's ceilings: streaming copy (read+write bytes), read and write\n"
            "bandwidth, the f32 (and on the cpu f64) FMA peak, and the overhead of one launch (an\n"
            "empty kernel on devices, an empty OpenMP parallel region on the cpu). The result is\n"
            "cached per device (~/.cache/kforge/calibration.json; KFORGE_CACHE_DIR overrides) and\n"
            "every later roofline floor uses it. Prints the architecture database's entry for the\n"
            "device (data/arch.json) beside the measurement.\n"
            "\n"
            "options:\n"
            "  --target T    cpu (default), opencl[:N], cuda[:N]\n"
            "  --threads N   cpu: threads to measure with (default: all usable)\n"
            "  --cached      print the cached ceilings without measuring (exit 1 if none)\n"
            "  --json        print the result as JSON\n"
            "  -h, --help    this help\n");
}

int kf_cli_calibrate(int argc, char **argv) {
    static const struct option lo[] = {{"target", required_argument, 0, 't'},
                                       {"threads", required_argument, 0, 'j'},
                                       {"cached", no_argument, 0, 'c'},
                                       {"json", no_argument, 0, 'J'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *target = "cpu";
    int threads = 0, cached = 0, json = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 't': target = optarg; break;
        case 'j': {
            long long v;
            if (!kf_cli_int(optarg, 1, 65536, &v)) {
                fprintf(stderr, "kforge calibrate: --threads needs an integer from 1 to 65536, got '%s'\n", optarg);
                return KF_EXIT_USAGE;
            }
            threads = (int)v;
            break;
        }
        case 'c': cached = 1; break;
        case 'J': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return KF_EXIT_USAGE;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "kforge calibrate: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return KF_EXIT_USAGE;
    }
    kf_error err = {0};
    kf_backend *be = NULL;
    if (kf_backend_open(target, &be, &err) != KF_OK) return kf_cli_error(&err);
    const kf_device_info *d = &be->info;
    kf_ceilings ce;
    kf_status st;
    if (!json) fprintf(stderr, "%s %s on %s...\n", cached ? "reading the cached ceilings of" : "measuring",
                       target, d->name);
    if (cached) {
        /* the entry the loop reads, without measuring */
        st = kf_calib_ceilings(be, threads, KF_CALIB_CACHED_ONLY, &ce, &err);
        if (st == KF_ERR_IO) {
            fprintf(stderr, "kforge calibrate: %s (run kforge calibrate --target %s)\n", err.msg, target);
            kf_backend_close(be);
            return KF_EXIT_VERIFY;
        }
    } else {
        double t0 = kf_now();
        st = kf_calib_ceilings(be, threads, KF_CALIB_MEASURE, &ce, &err);
        if (st == KF_OK && !json) fprintf(stderr, "measured in %.1f s\n", kf_now() - t0);
    }
    if (st != KF_OK) {
        kf_backend_close(be);
        return kf_cli_error(&err);
    }
    kf_arch_db *db = NULL;
    kf_error dberr = {0};
    const kf_arch_entry *a = NULL;
    int gpu = kf_device_is_gpu(d);
    if (kf_arch_db_load(NULL, &db, &dberr) == KF_OK) a = kf_arch_db_match(db, d->name, gpu ? KF_ARCH_GPU : KF_ARCH_CPU);
    if (json) {
        json_t *j = json_pack("{s:s, s:s, s:b, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:s}", "device",
                              ce.device_key, "platform", d->platform, "measured", ce.measured, "threads",
                              ce.threads, "copy_gbs", ce.copy_gbs, "read_gbs", ce.read_gbs, "write_gbs",
                              ce.write_gbs, "peak_gflops_f32", ce.peak_gflops_f32, "peak_gflops_f64",
                              ce.peak_gflops_f64, "launch_us", ce.launch_us, "when", ce.when);
        if (kf_platform_is_host(d->platform)) json_object_set_new(j, "busy", json_real(ce.busy));
        if (a)
            json_object_set_new(j, "arch", json_pack("{s:s, s:s, s:f, s:f, s:s}", "id", a->id, "name", a->name,
                                                     "dram_gbs", a->dram_gbs, "peak_tflops_f32",
                                                     a->peak_tflops_f32, "source", a->source));
        else json_object_set_new(j, "arch", json_null());
        char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        puts(text);
        free(text);
        json_decref(j);
    } else {
        printf("device        %s\n", ce.device_key);
        printf("copy          %9.1f GB/s (read+write bytes)\n", ce.copy_gbs);
        printf("read          %9.1f GB/s\n", ce.read_gbs);
        printf("write         %9.1f GB/s\n", ce.write_gbs);
        printf("peak f32      %9.1f GFLOP/s\n", ce.peak_gflops_f32);
        if (ce.peak_gflops_f64 > 0) printf("peak f64      %9.1f GFLOP/s\n", ce.peak_gflops_f64);
        if (ce.launch_us > 0) printf("launch        %9.2f us (%s)\n", ce.launch_us, gpu ? "empty kernel" : "empty parallel region");
        else printf("launch        not measured (cached before kforge measured it: --target %s without --cached)\n", target);
        printf("when          %s (%s)\n", ce.when, ce.measured ? "measured" : "nominal");
        if (kf_platform_is_host(d->platform))
            printf("load          others used %.0f%% of the machine while it measured%s\n", 100 * ce.busy,
                   ce.busy > KF_CALIB_BUSY_MAX ? ": busy, the ceilings may be low (measure again when idle)"
                   : ce.busy > 0 ? "" : " (or an entry cached before kforge measured the load)");
        const kf_platform *pf = kf_platform_find(d->platform);
        if (pf && pf->profiler == KF_PROFILER_PERF_EVENT) {
            char why[300];
            if (kf_perf_cpu_counters_usable(why, sizeof why)) printf("cpu counters  available (perf_event_open)\n");
            else printf("cpu counters  %s\n", why);
        }
        if (a) {
            printf("architecture  %s (%s)\n", a->name, a->id);
            if (a->dram_gbs > 0)
                printf("  datasheet memory %.0f GB/s: measured copy is %.0f%% of it\n", a->dram_gbs,
                       100 * ce.copy_gbs / a->dram_gbs);
            if (a->peak_tflops_f32 > 0)
                printf("  datasheet f32 %.1f TFLOP/s: measured peak is %.0f%% of it\n", a->peak_tflops_f32,
                       100 * ce.peak_gflops_f32 / (a->peak_tflops_f32 * 1e3));
        } else if (db) {
            printf("architecture  no database entry matches \"%s\"\n", d->name);
        } else {
            printf("architecture  database not loaded: %s\n", dberr.msg);
        }
    }
    kf_arch_db_free(db);
    kf_backend_close(be);
    return 0;
}

static void usage_analyze(FILE *f) {
    fprintf(f,
            "usage: kforge analyze RUN.json [--ncu FILE.csv] [--json]\n"
            "\n"
            "Diagnoses every verified candidate of a recorded run (the run.json kforge synth wrote)\n"
            "with the performance analysis agent: bound, achieved fraction, occupancy, evidence and\n"
            "ranked moves. With --ncu, the Nsight Compute counters of the same candidates (ncu --csv\n"
            "--page raw, e.g. from bench/ncu_capture.sh) join the evidence: stall reasons, DRAM and\n"
            "SM throughput, achieved occupancy, hit rates, bank conflicts.\n"
            "\n"
            "options:\n"
            "  --ncu FILE    ncu raw CSV of the run's candidates, in order\n"
            "  --json        print the diagnoses as JSON\n"
            "  -h, --help    this help\n");
}

int kf_cli_analyze(int argc, char **argv) {
    static const struct option lo[] = {{"ncu", required_argument, 0, 'n'},
                                       {"json", no_argument, 0, 'J'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *ncu = NULL;
    int json = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'n': ncu = optarg; break;
        case 'J': json = 1; break;
        case 'h': usage_analyze(stdout); return 0;
        default: usage_analyze(stderr); return KF_EXIT_USAGE;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "kforge analyze: expected one run record (run.json), got %d arguments\n", argc - optind);
        usage_analyze(stderr);
        return KF_EXIT_USAGE;
    }
    kf_error err = {0};
    if (kf_analyze_run(argv[optind], ncu, stdout, json, &err) != KF_OK) return kf_cli_error(&err);
    return 0;
}
