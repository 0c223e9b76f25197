/*
 * `kforge report RUN --html FILE`: a stored run as one self-contained HTML page
 * (docs/report.md). The run comes from the store (kf_run_load: an id or a unique prefix,
 * as `kforge runs` prints it); the page is the library's (kf_run_report_html). This file
 * parses flags, opens the store through the helper the store commands share
 * (kf_cli_store_open), and writes the file: to a temporary name beside it, renamed into
 * place once complete, so a failed write never leaves half a page under FILE.
 */
#include "cli/cli.h"
#include "kforge/agent.h"
#include "kforge/store.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage_report(FILE *f) {
    fprintf(f,
            "usage: kforge report RUN --html FILE [--store PATH]\n"
            "\n"
            "Writes a stored run as one self-contained HTML page (no file, font or script is\n"
            "loaded from elsewhere): the time per iteration as a chart, a roofline plot placing\n"
            "every verified candidate against the device's ceilings, the best kernel's source,\n"
            "the analysis agent's diagnoses per iteration, and the iteration table. RUN is a run\n"
            "id as `kforge runs` prints it, or a unique prefix.\n"
            "\n"
            "options:\n"
            "  --html FILE        write the page to FILE (replaced if it exists)\n"
            "  --store PATH       the store (default as in `kforge runs --help`)\n"
            "  -h, --help         this help\n"
            "\n"
            "exit codes: 0 ok, 2 usage, unknown run, store or output file error, 3 internal\n");
}

int kf_cli_report(int argc, char **argv) {
    static const struct option lo[] = {{"html", required_argument, 0, 'H'}, {"store", required_argument, 0, 'S'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *store = NULL, *html = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'H': html = optarg; break;
        case 'S': store = optarg; break;
        case 'h': usage_report(stdout); return 0;
        default: usage_report(stderr); return KF_EXIT_USAGE;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "kforge report: expected one run id, got %d arguments\n", argc - optind);
        usage_report(stderr);
        return KF_EXIT_USAGE;
    }
    if (!html || !html[0]) {
        fprintf(stderr, "kforge report: --html FILE is required (the page's path)\n");
        usage_report(stderr);
        return KF_EXIT_USAGE;
    }
    const char *ref = argv[optind];
    kf_store *s = NULL;
    int rc = kf_cli_store_open(store, 0, &s);
    if (rc) return rc;
    kf_run_result r;
    kf_store_run info;
    kf_error err = {0};
    if (kf_run_load(s, ref, &r, &info, &err) != KF_OK) {
        rc = kf_cli_error(&err);
        kf_store_close(s);
        return rc;
    }
    /* a new page is written beside its path and renamed into place, so a failed write
     * leaves no half page; a device or pipe (/dev/stdout) is written in place, never
     * replaced by a file */
    struct stat stt;
    int in_place = stat(html, &stt) == 0 && !S_ISREG(stt.st_mode);
    char tmp[1100];
    if (in_place) snprintf(tmp, sizeof tmp, "%s", html);
    else snprintf(tmp, sizeof tmp, "%s.tmp%ld", html, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "kforge: %s: cannot write the report: %s\n", html, strerror(errno));
        rc = KF_EXIT_USAGE;
    } else {
        kf_status st = kf_run_report_html(&r, info.task_name, f, &err);
        int werr = fflush(f) != 0 || ferror(f) ? errno : 0;
        if (fclose(f) != 0 && !werr) werr = errno;
        if (werr && st == KF_OK)
            st = kf_error_set(&err, KF_ERR_IO, html, 0, 0, "cannot write the report: %s", strerror(werr));
        if (st == KF_OK && !in_place && rename(tmp, html) != 0)
            st = kf_error_set(&err, KF_ERR_IO, html, 0, 0, "cannot write the report: %s", strerror(errno));
        if (st != KF_OK) {
            if (!err.file[0]) snprintf(err.file, sizeof err.file, "%s", html);
            rc = kf_cli_error(&err);
            if (!in_place) unlink(tmp);
        } else {
            printf("report of run %.10s (%s, %d iterations) written to %s\n", info.id, info.task_name, r.niters,
                   html);
        }
    }
    kf_run_result_free(&r);
    kf_store_run_clear(&info);
    kf_store_close(s);
    return rc;
}
