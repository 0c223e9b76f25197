/*
 * `kforge store merge OUT.db IN.db...`: several stores into one (kf_store_merge,
 * src/store/merge.c; docs/store.md, docs/cluster.md).
 */
#include "cli.h"
#include "kforge/store.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage_store(FILE *f) {
    fprintf(f,
            "usage: kforge store merge OUT.db IN.db... [--json]\n\n"
            "Merges the runs, candidates, evaluations, iterations, diagnoses, model transcripts and\n"
            "cached input sets of each IN store into OUT (created when absent): nothing is lost,\n"
            "nothing is stored twice when an input is merged again, evaluation and transcript\n"
            "numbers are renumbered in OUT, and OUT's cache serves what the inputs measured. A run\n"
            "in both keeps the copy that is further along. The inputs are only read; one of an\n"
            "older schema is migrated in a temporary copy, one of a newer schema is refused, and\n"
            "every input is checked before anything is merged. Used by kforge slurm's merge job\n"
            "(docs/cluster.md).\n\n"
            "options:\n"
            "  --json      one JSON object: out, and per input its path, version and counts\n"
            "  -h, --help  this help\n\n"
            "exit codes: 0 merged, 2 usage or an input that cannot be merged (nothing merged),\n"
            "            3 a copy failed (OUT keeps the inputs merged before it)\n");
}

static json_t *counts_json(const char *path, const kf_store_merge_counts *c) {
    json_t *j = json_object();
    json_object_set_new(j, "path", json_string(path));
    json_object_set_new(j, "version", json_integer(c->in_version));
    json_object_set_new(j, "runs_added", json_integer(c->runs_added));
    json_object_set_new(j, "runs_updated", json_integer(c->runs_updated));
    json_object_set_new(j, "runs_already", json_integer(c->runs_same));
    json_object_set_new(j, "runs_conflicting", json_integer(c->runs_conflict));
    json_object_set_new(j, "tasks", json_integer(c->tasks));
    json_object_set_new(j, "candidates", json_integer(c->candidates));
    json_object_set_new(j, "evaluations", json_integer(c->evaluations));
    json_object_set_new(j, "iterations", json_integer(c->iterations));
    json_object_set_new(j, "diagnoses", json_integer(c->diagnoses));
    json_object_set_new(j, "transcripts", json_integer(c->transcripts));
    json_object_set_new(j, "refsets", json_integer(c->refsets));
    return j;
}

static int cmd_merge(int argc, char **argv) {
    int as_json = 0, n = 0;
    const char **paths = calloc((size_t)argc + 1, sizeof *paths);
    if (!paths) return KF_EXIT_INTERNAL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage_store(stdout);
            free(paths);
            return 0;
        }
        if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "kforge store merge: unknown option %s\n", argv[i]);
            free(paths);
            return KF_EXIT_USAGE;
        } else paths[n++] = argv[i];
    }
    if (n < 2) {
        usage_store(stderr);
        free(paths);
        return KF_EXIT_USAGE;
    }
    kf_error err = {0};
    /* every input checked first: a newer schema or a foreign file merges nothing */
    for (int i = 1; i < n; i++)
        if (kf_store_merge_check(paths[i], NULL, &err) != KF_OK) {
            free(paths);
            return kf_cli_error(&err);
        }
    kf_store *out = NULL;
    int created = 0;
    if (kf_store_open_mode(paths[0], KF_STORE_CREATE, &created, &out, &err) != KF_OK) {
        free(paths);
        return kf_cli_error(&err);
    }
    if (created) fprintf(stderr, "created a new store at %s\n", paths[0]);
    json_t *arr = json_array();
    int rc = 0;
    kf_store_merge_counts total = {0};
    for (int i = 1; i < n && !rc; i++) {
        kf_store_merge_counts c;
        if (kf_store_merge(out, paths[i], &c, &err) != KF_OK) {
            rc = kf_cli_error(&err);
            break;
        }
        total.runs_added += c.runs_added;
        total.runs_updated += c.runs_updated;
        total.runs_same += c.runs_same;
        total.runs_conflict += c.runs_conflict;
        total.evaluations += c.evaluations;
        total.transcripts += c.transcripts;
        json_array_append_new(arr, counts_json(paths[i], &c));
        if (!as_json)
            printf("%s (schema %d): %d runs added, %d updated, %d already there; %d evaluations, %d iterations, "
                   "%d transcript rows, %d candidates, %d input sets added\n",
                   paths[i], c.in_version, c.runs_added, c.runs_updated, c.runs_same, c.evaluations, c.iterations,
                   c.transcripts, c.candidates, c.refsets);
        if (c.runs_conflict)
            fprintf(stderr, "kforge store merge: %s: %d run(s) left out: their id names another run in %s "
                    "(first: %s)\n", paths[i], c.runs_conflict, paths[0], c.conflict);
    }
    if (!rc) {
        if (as_json) {
            json_t *j = json_object();
            json_object_set_new(j, "out", json_string(paths[0]));
            json_object_set_new(j, "created", json_boolean(created));
            json_object_set_new(j, "inputs", arr);
            arr = NULL;
            char *s = json_dumps(j, JSON_INDENT(1));
            if (s) puts(s);
            free(s);
            json_decref(j);
        } else {
            printf("%s: %d runs added, %d updated, %d already there, from %d store(s)\n", paths[0], total.runs_added,
                   total.runs_updated, total.runs_same, n - 1);
        }
    }
    json_decref(arr);
    kf_store_close(out);
    free(paths);
    return rc;
}

int kf_cli_store(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage_store(argc < 2 ? stderr : stdout);
        return argc < 2 ? KF_EXIT_USAGE : 0;
    }
    if (!strcmp(argv[1], "merge")) return cmd_merge(argc - 1, argv + 1);
    fprintf(stderr, "kforge store: unknown subcommand '%s' (merge)\n", argv[1]);
    return KF_EXIT_USAGE;
}
