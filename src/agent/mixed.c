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

#include <stdarg.h>
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

/* appends printf-formatted text to the cap-byte string s (cut, never overrun) */
static void addf(char *s, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void addf(char *s, size_t cap, const char *fmt, ...) {
    size_t n = strlen(s);
    if (n + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s + n, cap - n, fmt, ap);
    va_end(ap);
}

kf_status kf_mixed_parts(const kf_graph *g, const kf_loop_opts *o, const char *out_base, char **ref, char *origin,
                         size_t cap, kf_mixed_cover *cov, kf_error *err) {
    *ref = NULL;
    origin[0] = 0;
    memset(cov, 0, sizeof *cov);
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
            addf(cov->failed, sizeof cov->failed, "%spart %d (%s: %s)", cov->failed[0] ? "; " : "", k, path, e.msg);
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
        po.module_ref = KF_MODULE_REF_CPU_F64; /* a part is a graph task: the interpreter is its reference */
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
            addf(cov->failed, sizeof cov->failed, "%spart %d (%s: %s)", cov->failed[0] ? "; " : "", k, pg->name,
                 st != KF_OK ? e.msg : "none of its candidates verified");
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
            addf(cov->verified, sizeof cov->verified, "%s%s/%s (%s)", cov->verified[0] ? ", " : "", dir,
                 kf_loop_kernel_file(pr.dev.platform), pg->name);
        }
        kf_run_result_free(&pr);
        kf_graph_free(pg);
        free(text);
    }
    cov->nparts = nparts;
    cov->nok = nok;
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

/* What of the forward no part covers, as the task says it: the "# not lowered:" line
 * kforge import writes (python/kforge_torch/module_task.py), else every "node 'NAME'
 * (TARGET)" its header names; else the header's "# not a graph task:" reason, prefixed by
 * "!" (no graph: nothing could be split). "" when the task says nothing. */
static void remainder_of(const char *text, char *out, size_t cap) {
    out[0] = 0;
    if (!text) return;
    const char *nl = strstr(text, "# not lowered: ");
    if (nl) {
        nl += strlen("# not lowered: ");
        snprintf(out, cap, "%.*s", (int)strcspn(nl, "\n"), nl);
        return;
    }
    for (const char *p = strstr(text, "node '"); p; p = strstr(p, "node '")) {
        p += 6;
        size_t n = strcspn(p, "'\n");
        if (p[n] != '\'') continue;
        char one[200];
        snprintf(one, sizeof one, "%.*s", (int)n, p);
        const char *t = p + n + 1;
        if (!strncmp(t, " (", 2)) {
            size_t m = strcspn(t + 2, ")\n");
            snprintf(one + strlen(one), sizeof one - strlen(one), " (%.*s)", (int)m, t + 2);
        }
        if (!strstr(out, one)) addf(out, cap, "%s%s", out[0] ? ", " : "", one);
    }
    if (out[0]) return;
    const char *ng = strstr(text, "# not a graph task: ");
    if (ng) {
        ng += strlen("# not a graph task: ");
        snprintf(out, cap, "!%.*s", (int)strcspn(ng, "\n"), ng);
    }
}

void kf_mixed_no_result(const kf_graph *g, const char *task_text, int both, const kf_mixed_cover *cov,
                        const kf_run_result *r, char *out, size_t cap) {
    out[0] = 0;
    char rest[600];
    remainder_of(task_text, rest, sizeof rest);
    addf(out, cap, "no verified kernel for module task '%s': ", g->name);
    int nmodel = 0;
    for (int i = 0; i < r->niters; i++) nmodel += !strcmp(r->iters[i].agent, "llm");
    if (!nmodel) {
        addf(out, cap, "the model gave no kernel%s%s", r->stop_reason[0] ? " (" : "", r->stop_reason);
        if (r->stop_reason[0]) addf(out, cap, ")");
    } else {
        const kf_iter_record *last = &r->iters[r->niters - 1];
        char d[160];
        snprintf(d, sizeof d, "%s", last->res.detail);
        for (char *p = d; *p; p++)
            if (*p == '\n' || *p == '\t') *p = ' ';
        addf(out, cap, "the model's %d kernel%s failed verification (the last: %s%s%s)", nmodel,
             nmodel == 1 ? "" : "s all", kf_vstatus_name(last->res.status), d[0] ? ": " : "", d);
        if (r->stop_reason[0]) addf(out, cap, "; stopped: %s", r->stop_reason);
    }
    const char *uncovered = rest[0] == '!' ? NULL : rest[0] ? rest : NULL;
    if (!both) {
        addf(out, cap, ". The builtin cannot stand in: ");
        if (uncovered) addf(out, cap, "%s lower%s nowhere in kforge", uncovered, strchr(uncovered, ',') ? "" : "s");
        else addf(out, cap, "the module does not lower to kforge's ops%s%s", rest[0] == '!' ? " (" : "",
                  rest[0] == '!' ? rest + 1 : "");
        if (rest[0] == '!') addf(out, cap, ")");
        addf(out, cap, " (--agent both runs the builtin on the parts kforge lowers, for the model to reuse)");
        return;
    }
    addf(out, cap, ". No chain of the builtin's part kernels stands in for the forward: ");
    if (!cov->nparts) {
        addf(out, cap, "no part of it lowers");
        if (rest[0] == '!') addf(out, cap, " (not a graph kforge can split: %s)", rest + 1);
        else if (uncovered) addf(out, cap, " (%s lower%s nowhere in kforge)", uncovered,
                                 strchr(uncovered, ',') ? "" : "s");
        return;
    }
    if (uncovered)
        addf(out, cap, "no part covers %s, which lower%s nowhere in kforge", uncovered,
             strchr(uncovered, ',') ? "" : "s");
    else
        addf(out, cap, "kforge does not assemble a chain of parts (the task names no remainder of the forward "
                       "outside them to check that they cover it)");
    if (cov->failed[0]) addf(out, cap, "; and %s gave no verified kernel", cov->failed);
    if (cov->verified[0])
        addf(out, cap, ". The verified part kernels (each checked against its part, not against the module) are "
                       "in %s", cov->verified);
}
