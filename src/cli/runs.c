/*
 * `kforge runs`, `kforge show RUN` and `kforge show --best TASK.kf`: browsing the store
 * (docs/store.md), and the store flags the subcommands share (--store PATH, --no-store).
 * Loading is the library's (kf_store_runs_list, kf_run_load, kf_store_best_per_platform);
 * this file only lays the rows out.
 */
#include "cli/cli.h"
#include "kforge/agent.h"
#include "kforge/ir.h"
#include "kforge/report.h"
#include "kforge/store.h"

#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* See cli.h. */
int kf_cli_store_open(const char *flag_path, int create, kf_store **s) {
    char path[1024];
    kf_error err = {0};
    *s = NULL;
    if (flag_path) snprintf(path, sizeof path, "%s", flag_path);
    else if (kf_store_default_path(path, sizeof path, &err) != KF_OK) return kf_cli_error(&err);
    int created = 0;
    if (kf_store_open_mode(path, create ? KF_STORE_CREATE : KF_STORE_EXISTING, &created, s, &err) != KF_OK)
        return kf_cli_error(&err);
    if (created) fprintf(stderr, "kforge: created a new store at %s\n", path);
    return 0;
}

static void usage_runs(FILE *f) {
    fprintf(f,
            "usage: kforge runs [--task NAME] [--limit N] [--json] [--store PATH]\n"
            "\n"
            "Lists the runs in the store, newest first: id (give it, or a unique prefix, to\n"
            "`kforge show` and `kforge synth --resume`), start time, task, platform and device,\n"
            "iterations stored / planned, status (running, done, interrupted: its process is\n"
            "gone, failed), and the best verified time and %% of the roofline floor.\n"
            "\n"
            "options:\n"
            "  --task NAME        only this task's runs\n"
            "  --limit N          at most N runs (default 20; 0 = all)\n"
            "  --json             a JSON array instead of the table\n"
            "  --store PATH       the store (default: $KFORGE_STORE, else\n"
            "                     $XDG_DATA_HOME/kforge/kforge.db, else ~/.local/share/kforge/kforge.db)\n"
            "  -h, --help         this help\n"
            "\n"
            "exit codes: 0 ok, 2 usage or store error, 3 internal\n");
}

static void usage_show(FILE *f) {
    fprintf(f,
            "usage: kforge show RUN [--json] [--store PATH]\n"
            "       kforge show --best TASK.kf [--platform P] [--json] [--store PATH]\n"
            "\n"
            "Prints a stored run: its iteration table (the columns of kforge synth's live table;\n"
            "rows served from the cache say \"(cached)\") and the best kernel's source. RUN is a\n"
            "run id as `kforge runs` prints it, or a unique prefix.\n"
            "\n"
            "With --best: the best verified kernel of the task (the same .kf text, by its hash)\n"
            "on each platform, across all the store's runs: the highest %% of the roofline\n"
            "floor, then the shortest time. A table (platform, device, run, iter, ms, %% of\n"
            "floor, flags), then each kernel's source. `kforge synth --agent llm --target P`\n"
            "picks the model's reference the same way, from the platforms other than P.\n"
            "\n"
            "options:\n"
            "  --json             the run record (run.json's form, with run_id and cached rows);\n"
            "                     with --best, a JSON array, one object per platform\n"
            "  --best TASK.kf     the best verified kernel of this task per platform\n"
            "  --platform P       with --best: only platform P (cpu, opencl, cuda, metal)\n"
            "  --store PATH       the store (default as in `kforge runs --help`)\n"
            "  -h, --help         this help\n"
            "\n"
            "exit codes: 0 ok, 1 --best found no verified kernel, 2 usage, unknown run or store\n"
            "error, 3 internal\n");
}

static void when(double t, char *buf, size_t cap) {
    time_t tt = (time_t)t;
    struct tm tm;
    localtime_r(&tt, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M", &tm);
}

static json_t *run_row_json(const kf_store_run *r) {
    json_t *j = json_object();
    json_object_set_new(j, "id", json_string(r->id));
    json_object_set_new(j, "task", json_string(r->task_name));
    json_object_set_new(j, "task_hash", json_string(r->task));
    json_object_set_new(j, "platform", json_string(r->platform));
    json_object_set_new(j, "device", json_string(r->device));
    json_object_set_new(j, "agent", json_string(r->agent));
    json_object_set_new(j, "started", json_real(r->started));
    json_object_set_new(j, "ended", r->ended > 0 ? json_real(r->ended) : json_null());
    json_object_set_new(j, "status", json_string(r->status));
    json_object_set_new(j, "iters_done", json_integer(r->iters_done));
    json_object_set_new(j, "iters_planned", json_integer(r->iters_planned));
    json_object_set_new(j, "cache_hits", json_integer(r->cache_hits));
    json_object_set_new(j, "replayed", json_integer(r->replayed));
    json_object_set_new(j, "seed", json_integer((json_int_t)r->seed));
    json_object_set_new(j, "best_iter", r->best_iter ? json_integer(r->best_iter) : json_null());
    json_object_set_new(j, "best_ms", r->best_iter ? json_real(r->best_ms) : json_null());
    json_object_set_new(j, "best_pct_floor", r->best_iter ? json_real(r->best_pct) : json_null());
    if (r->stop_reason[0]) json_object_set_new(j, "stop_reason", json_string(r->stop_reason));
    if (r->reference[0]) json_object_set_new(j, "reference", json_string(r->reference));
    if (r->result_from[0]) {
        /* run.json's result record (issue 26) */
        json_t *res = json_object();
        json_object_set_new(res, "from", json_string(r->result_from));
        json_object_set_new(res, "detail", json_string(r->result_detail));
        json_object_set_new(j, "result", res);
    }
    return j;
}

int kf_cli_runs(int argc, char **argv) {
    static const struct option lo[] = {{"task", required_argument, 0, 't'}, {"limit", required_argument, 0, 'l'},
                                       {"json", no_argument, 0, 'J'}, {"store", required_argument, 0, 'S'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *task = NULL, *store = NULL;
    int json = 0, limit = 20, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 't': task = optarg; break;
        case 'l': {
            long long v;
            if (!kf_cli_int(optarg, 0, INT_MAX, &v)) {
                fprintf(stderr, "kforge runs: --limit needs a count from 0 to %d, got '%s'\n", INT_MAX, optarg);
                return KF_EXIT_USAGE;
            }
            limit = (int)v;
            break;
        }
        case 'J': json = 1; break;
        case 'S': store = optarg; break;
        case 'h': usage_runs(stdout); return 0;
        default: usage_runs(stderr); return KF_EXIT_USAGE;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "kforge runs: unexpected argument '%s'\n", argv[optind]);
        usage_runs(stderr);
        return KF_EXIT_USAGE;
    }
    kf_store *s = NULL;
    int rc = kf_cli_store_open(store, 0, &s);
    if (rc) return rc;
    kf_store_run *runs = NULL;
    int n = 0;
    kf_error err = {0};
    if (kf_store_runs_list(s, task, limit, &runs, &n, &err) != KF_OK) {
        rc = kf_cli_error(&err);
    } else if (json) {
        json_t *arr = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(arr, run_row_json(&runs[i]));
        char *text = json_dumps(arr, JSON_INDENT(2));
        puts(text ? text : "[]");
        free(text);
        json_decref(arr);
    } else if (n == 0) {
        printf("no runs in %s%s%s\n", kf_store_path(s), task ? " for task " : "", task ? task : "");
    } else {
        printf("%-10s  %-16s  %-16s  %-30s %7s  %-11s %10s %7s\n", "id", "started", "task", "platform/device",
               "iters", "status", "best ms", "% floor");
        for (int i = 0; i < n; i++) {
            const kf_store_run *r = &runs[i];
            char t[32], dev[31], it[16];
            when(r->started, t, sizeof t);
            snprintf(dev, sizeof dev, "%s %s", r->platform, r->device);
            snprintf(it, sizeof it, "%d/%d", r->iters_done, r->iters_planned);
            if (r->best_iter)
                printf("%-10.10s  %-16s  %-16.16s  %-30s %7s  %-11s %10.4f %6.1f%%\n", r->id, t, r->task_name, dev,
                       it, r->status, r->best_ms, r->best_pct);
            else
                printf("%-10.10s  %-16s  %-16.16s  %-30s %7s  %-11s %10s %7s\n", r->id, t, r->task_name, dev, it,
                       r->status, "-", "-");
        }
    }
    for (int i = 0; i < n; i++) kf_store_run_clear(&runs[i]);
    free(runs);
    kf_store_close(s);
    return rc;
}

static void print_table(const kf_run_result *r, const kf_store_run *info) {
    char t[32];
    when(info->started, t, sizeof t);
    printf("run %s  %s  task %s  status %s  %d/%d iterations  seed %llu\n", info->id, t, info->task_name,
           info->status, info->iters_done, info->iters_planned, (unsigned long long)info->seed);
    kf_report_table_header(stdout, info->task_name, r->plan, r->dev.name, r->roof.floor_s * 1e3,
                           r->roof.bound ? r->roof.bound : "?", r->ceil.measured);
    for (int i = 0; i < r->niters; i++) {
        const kf_iter_record *it = &r->iters[i];
        kf_report_row row;
        memset(&row, 0, sizeof row);
        row.iter = it->iter;
        row.label = it->label;
        row.status = kf_vstatus_name(it->res.status);
        row.has_time = it->res.status == KF_V_OK && it->res.timed;
        row.time_ms = it->res.time_ms;
        row.gbs = it->perf.gbs;
        row.gflops = it->perf.gflops;
        row.pct_floor = it->perf.pct_floor;
        row.best = it->best_so_far;
        row.note = it->res.status == KF_V_OK ? NULL : it->res.detail;
        row.occupancy = it->has_diag ? it->diag.occupancy : -1;
        row.bound = it->has_diag ? it->diag.bound : NULL;
        row.cached = it->cached;
        char line[700];
        if (it->has_diag) {
            kf_perf_diagnosis_line(&it->diag, line, sizeof line);
            row.analysis = line;
        }
        kf_report_table_row(stdout, &row);
    }
    if (info->stop_reason[0]) printf("stopped: %s\n", info->stop_reason);
    if (info->reference[0]) printf("reference: %s\n", info->reference);
    if (info->result_from[0])
        printf("result: from %s%s%s\n", info->result_from, info->result_detail[0] ? ": " : "", info->result_detail);
    if (r->memcheck[0]) printf("memcheck: %s%s%s\n", r->memcheck, r->memcheck_detail[0] ? ": " : "", r->memcheck_detail);
    if (r->best < 0) {
        printf("no verified kernel\n");
        return;
    }
    const kf_iter_record *b = &r->iters[r->best];
    printf("best: iter %d  %s  %.4f ms  %.2f GB/s  %.1f%% of floor%s\n", b->iter, b->label, b->res.time_ms,
           b->perf.gbs, b->perf.pct_floor, b->cached ? " (cached: measured earlier)" : "");
    printf("---- best kernel (%s%s%s) ----\n%s", kf_loop_kernel_file(r->dev.platform), r->best_flags[0] ? ", flags " : "",
           r->best_flags, r->best_source);
    size_t len = strlen(r->best_source);
    if (len && r->best_source[len - 1] != '\n') putchar('\n');
}

/* kforge show --best TASK.kf: the store's best verified kernel of the task per platform. */
static int show_best(const char *task_path, const char *platform, const char *store, int json) {
    kf_error err = {0};
    kf_graph *g = NULL;
    /* a file that is no task has no kernels to look for: say so, not "no verified kernel" */
    if (kf_parse_file(task_path, &g, &err) != KF_OK) {
        if (err.code == KF_ERR_PARSE || err.code == KF_ERR_TYPE || err.code == KF_ERR_ARG) {
            char why[sizeof err.msg];
            snprintf(why, sizeof why, "%s", err.msg);
            snprintf(err.msg, sizeof err.msg, "not a task: %s", why);
        }
        return kf_cli_error(&err);
    }
    char hash[17];
    kf_store_task_hash(g->source, hash);
    kf_graph_free(g);
    kf_store *s = NULL;
    int rc = kf_cli_store_open(store, 0, &s);
    if (rc) return rc;
    kf_store_best *b = NULL;
    int n = 0;
    if (kf_store_best_per_platform(s, hash, platform, NULL, &b, &n, &err) != KF_OK) {
        rc = kf_cli_error(&err);
    } else if (json) {
        json_t *arr = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s, s:i, s:f, s:f, s:s, s:f, s:s, s:s}",
                                                 "task_hash", hash, "platform", b[i].platform, "device", b[i].device,
                                                 "run", b[i].run, "iter", b[i].iter, "time_ms", b[i].time_ms,
                                                 "pct_floor", b[i].pct_floor, "flags", b[i].flags, "measured_at",
                                                 b[i].measured_at, "kernel_file", kf_loop_kernel_file(b[i].platform),
                                                 "source", b[i].source ? b[i].source : ""));
        char *out = json_dumps(arr, JSON_INDENT(2));
        puts(out ? out : "[]");
        free(out);
        json_decref(arr);
        rc = n ? 0 : KF_EXIT_VERIFY;
    } else if (n == 0) {
        printf("no verified kernel of %s (task %s)%s%s in %s\n", task_path, hash, platform ? " on " : "",
               platform ? platform : "", kf_store_path(s));
        rc = KF_EXIT_VERIFY;
    } else {
        printf("best verified kernels of %s (task %s), by %% of floor:\n", task_path, hash);
        printf("%-8s  %-30s  %-10s  %4s  %10s  %7s  %s\n", "platform", "device", "run", "iter", "ms", "% floor",
               "flags");
        for (int i = 0; i < n; i++)
            printf("%-8s  %-30.30s  %-10.10s  %4d  %10.4f  %6.1f%%  %s\n", b[i].platform, b[i].device, b[i].run,
                   b[i].iter, b[i].time_ms, b[i].pct_floor, b[i].flags[0] ? b[i].flags : "-");
        for (int i = 0; i < n; i++) {
            const char *src = b[i].source ? b[i].source : "";
            printf("---- best %s kernel (run %.10s iter %d, %s%s%s) ----\n%s", b[i].platform, b[i].run, b[i].iter,
                   kf_loop_kernel_file(b[i].platform), b[i].flags[0] ? ", flags " : "", b[i].flags, src);
            size_t len = strlen(src);
            if (len && src[len - 1] != '\n') putchar('\n');
        }
    }
    kf_store_best_free(b, n);
    kf_store_close(s);
    return rc;
}

int kf_cli_show(int argc, char **argv) {
    static const struct option lo[] = {{"json", no_argument, 0, 'J'}, {"store", required_argument, 0, 'S'},
                                       {"best", required_argument, 0, 'B'}, {"platform", required_argument, 0, 'P'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *store = NULL, *best = NULL, *platform = NULL;
    int json = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'J': json = 1; break;
        case 'S': store = optarg; break;
        case 'B': best = optarg; break;
        case 'P': platform = optarg; break;
        case 'h': usage_show(stdout); return 0;
        default: usage_show(stderr); return KF_EXIT_USAGE;
        }
    }
    if (best || platform) {
        if (!best || optind != argc) {
            fprintf(stderr, "kforge show: %s\n", !best ? "--platform goes with --best TASK.kf"
                                                        : "--best TASK.kf takes no run id");
            usage_show(stderr);
            return KF_EXIT_USAGE;
        }
        return show_best(best, platform, store, json);
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "kforge show: expected one run id, got %d arguments\n", argc - optind);
        usage_show(stderr);
        return KF_EXIT_USAGE;
    }
    kf_store *s = NULL;
    int rc = kf_cli_store_open(store, 0, &s);
    if (rc) return rc;
    kf_run_result r;
    kf_store_run info;
    kf_error err = {0};
    if (kf_run_load(s, argv[optind], &r, &info, &err) != KF_OK) {
        rc = kf_cli_error(&err);
        kf_store_close(s);
        return rc;
    }
    if (json) {
        char *text = kf_run_json_text(&r, &info);
        puts(text);
        free(text);
    } else {
        print_table(&r, &info);
    }
    kf_run_result_free(&r);
    kf_store_run_clear(&info);
    kf_store_close(s);
    return rc;
}
