/*
 * Mixed tasks (`kforge synth MODULE_TASK --agent both`): the builtin writes a kernel for each
 * part of the module that kforge lowers (NAME.partK.kf beside the task, written by kforge
 * import: python/kforge_torch/parts.py), and the model, which still writes the whole
 * forward, gets those verified kernels as reference implementations of those parts.
 *
 * Design note (docs/design-notes.md, "Mixed tasks"). Each part is a graph task of its own,
 * run through the same loop (kf_loop_run, the builtin agent, its own output folder
 * OUT/partK, the same seed, threads, store and table), so its kernel is verified against the
 * float64 interpreter like any task's before the model sees it; a part that fails to
 * synthesize is said and left out, never an error of the run. The kernels go to the model
 * in one text, each after a comment with the part's task (its inputs, ops and outputs, whose
 * names are the module's values): the argument order of a part's kernel is its task's.
 */
#include "agent/agent_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The most parts looked for (NAME.part0.kf ... ). */
#define KF_MIXED_MAX_PARTS 64

/* text as `// ` comment lines into b */
static void comment_lines(kf_buf *b, const char *text) {
    const char *s = text;
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t n = nl ? (size_t)(nl - s) : strlen(s);
        kf_buf_printf(b, "// %.*s\n", (int)n, s);
        s += n + (nl ? 1 : 0);
    }
}

kf_status kf_mixed_parts(const kf_graph *g, const kf_loop_opts *o, const char *out_base, char **ref, char *origin,
                         size_t cap, kf_error *err) {
    *ref = NULL;
    origin[0] = 0;
    int iters = o->iters > 0 ? o->iters : 12;
    int each = o->builtin_iters > 0 ? o->builtin_iters : (iters + 1) / 2;
    kf_buf b = {0};
    int nparts = 0, nok = 0;
    char names[400] = "";
    size_t nn = 0;
    for (int k = 0; k < KF_MIXED_MAX_PARTS; k++) {
        char ext[32], path[1024], dir[1100];
        snprintf(ext, sizeof ext, "part%d.kf", k);
        if (!kf_module_file(g, ext, path, sizeof path) || access(path, R_OK) != 0) break;
        nparts++;
        char *text = NULL;
        kf_graph *pg = NULL;
        kf_error e = {0};
        if (kf_read_file(path, &text, NULL, &e) != KF_OK || kf_parse_file(path, &pg, &e) != KF_OK) {
            if (o->table) fprintf(o->table, "part %d (%s): not used: %s\n", k, path, e.msg);
            free(text);
            continue;
        }
        snprintf(dir, sizeof dir, "%s/part%d", out_base, k);
        kf_loop_opts po = *o;
        po.agent = KF_AGENT_BUILTIN;
        po.iters = each;
        po.out_dir = dir;
        po.task_text = text;
        po.torch_text = NULL;
        po.reference_path = NULL;
        po.resume_run = NULL;
        po.pins = NULL;
        po.time_budget_s = o->time_budget_s > 0 ? o->time_budget_s / 2 : 0;
        if (o->table)
            fprintf(o->table, "part %d (%s): a part kforge lowers; the builtin writes its kernel (%d candidates)\n", k,
                    path, each);
        kf_run_result pr;
        memset(&pr, 0, sizeof pr);
        kf_status st = kf_loop_run(pg, &po, &pr, &e);
        if (st != KF_OK || pr.best < 0 || !pr.best_source) {
            if (o->table)
                fprintf(o->table, "part %d: no verified kernel (%s)\n", k, st != KF_OK ? e.msg : "none verified");
        } else {
            const kf_iter_record *best = &pr.iters[pr.best];
            kf_buf_printf(&b, "%s// ---- part %d of the module: %s, kforge's builtin generator, verified, %.4g ms\n",
                          nok ? "\n" : "", k, pg->name, best->res.time_ms);
            kf_buf_printf(&b, "// Its task (a kforge graph: its inputs, then its outputs, are its kernel's args in "
                              "this order; the names are the module's values):\n");
            comment_lines(&b, text);
            if (best->flags[0]) kf_buf_printf(&b, "// built with %s\n", best->flags);
            kf_buf_puts(&b, pr.best_source);
            if (b.len && b.data[b.len - 1] != '\n') kf_buf_puts(&b, "\n");
            if (nn < sizeof names) nn += (size_t)snprintf(names + nn, sizeof names - nn, "%s%d", nok ? ", " : "", k);
            nok++;
            if (o->table) fprintf(o->table, "part %d: verified, %.4g ms (%s)\n", k, best->res.time_ms, dir);
        }
        kf_run_result_free(&pr);
        kf_graph_free(pg);
        free(text);
    }
    if (nok) {
        *ref = b.data;
        snprintf(origin, cap, "kforge's builtin generator, for %d of the module's %d part%s it lowers (part%s %s)",
                 nok, nparts, nparts == 1 ? "" : "s", nok == 1 ? "" : "s", names);
        return KF_OK;
    }
    kf_buf_free(&b);
    if (o->table)
        fprintf(o->table, "mixed task: %s: the model writes the forward without reference kernels\n",
                nparts ? "no part gave a verified kernel" : "no part of the module lowers");
    (void)err;
    return KF_OK;
}
