/*
 * The builtin generator's planner. It splits a graph into stages, gives each stage its
 * template's schedule parameters, and renders a point of the space into one C source:
 *
 *     <math prelude> <one static function per stage> int kforge_kernel(void *const *args)
 *
 * Stages: a fused elementwise cluster (any DAG of unary/binary ops over one iteration
 * domain, with broadcasting inputs, computed in one pass), or one reduction, softmax,
 * norm or matmul node. Values that cross stages or are graph outputs are materialised
 * (graph outputs straight into the caller's buffers, other crossings into scratch); every
 * other intermediate lives in registers.
 *
 * Fusion rule: an elementwise node joins the latest elementwise cluster with the same
 * iteration domain as long as none of its operands is produced by a later stage. An
 * elementwise cluster whose one result feeds only a reduction, softmax or norm is then
 * fused into that stage as its prologue (fuse_prologues).
 */
#include "tpl.h"
#include "synth_int.h"
#include "gpu_tpl.h"
#include "kforge/platform.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const char kf_cpu_prelude_text[];

void kf_tpl_prelude_c(kf_buf *out) { kf_buf_puts(out, kf_cpu_prelude_text); }

/* A 16-bit float value the builtin generator handles: an operand or result of matmul
 * nodes only (a graph input read only by matmuls, or a matmul's result read only by
 * matmuls or the caller), on a device with the tensor-core template. */
static int value16_ok(const kf_graph *g, const int *skip, int v) {
    const kf_value *val = &g->values[v];
    if (val->producer >= 0 && kf_op_get(g->nodes[val->producer].op)->kind != KF_KIND_MATMUL) return 0;
    for (int ni = 0; ni < g->nnodes; ni++) {
        const kf_node *n = &g->nodes[ni];
        if (skip[ni]) continue; /* a transpose folded into the matmul that reads it */
        for (int a = 0; a < n->nin; a++)
            if (n->in[a] == v && kf_op_get(n->op)->kind != KF_KIND_MATMUL) return 0;
    }
    return 1;
}

/* An i64 or bool value the builtin generator handles as an operand: every reader (through
 * the views that read it) is a pointwise op that reads it as a float: for an i64 (class
 * indices) one that takes integer operands (eq), for a bool (a mask: 0.0 or 1.0) any binary
 * op; or, for an i64, a gather that reads it as its index (as an integer). */
static int value_read_as_float_ok(const kf_graph *g, int v, int is_bool) {
    for (int ni = 0; ni < g->nnodes; ni++) {
        const kf_node *n = &g->nodes[ni];
        const kf_op_def *d = kf_op_get(n->op);
        for (int a = 0; a < n->nin; a++) {
            if (n->in[a] != v) continue;
            int ok = d->cls == KF_CLASS_VIEW     ? value_read_as_float_ok(g, n->out, is_bool)
                     : d->cls == KF_CLASS_GATHER ? !is_bool && a == 1
                     : is_bool                   ? d->kind == KF_KIND_BINARY
                                                 : d->int_operands;
            if (!ok) return 0;
        }
    }
    return 1;
}

static int graph_dtype_ok(const kf_graph *g, const int *skip, const char *platform,
                          const kf_device_info *dev, kf_error *err) {
    for (int i = 0; i < g->nvalues; i++) {
        const kf_value *v = &g->values[i];
        if (v->is_const || (v->producer >= 0 && skip[v->producer])) continue;
        if (v->dtype == KF_F32) continue;
        if (v->dtype == KF_I64 && v->producer >= 0) {
            if (kf_op_is_arg(kf_op_get(g->nodes[v->producer].op))) continue;
        }
        if (v->dtype == KF_I64 && v->output_index < 0 && value_read_as_float_ok(g, i, 0)) continue;
        if (v->dtype == KF_BOOL && v->output_index < 0 && value_read_as_float_ok(g, i, 1)) continue;
        if (v->dtype == KF_F16 || v->dtype == KF_BF16) {
            if (!value16_ok(g, skip, i))
                return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, v->line, v->col,
                                    "the builtin generator handles %s tensors only as operands and "
                                    "results of matmul (tensor cores); '%s' is %s and is used by "
                                    "another op",
                                    kf_dtype_name(v->dtype), v->name, kf_dtype_name(v->dtype)) == KF_OK;
            if (!kf_gpu_mma_arch_ok(platform, dev))
                return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, v->line, v->col,
                                    "%s matmul: the builtin generator has a tensor-core template for "
                                    "cuda on sm_80 or newer only (this is %s%s%s); '%s' is %s",
                                    kf_dtype_name(v->dtype), platform,
                                    dev->arch[0] ? ", " : "", dev->arch, v->name,
                                    kf_dtype_name(v->dtype)) == KF_OK;
            continue;
        }
        return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, v->line, v->col,
                            "the builtin generator handles f32 tensors (f16/bf16 as matmul "
                            "operands on cuda, i64 argmax/argmin results); '%s' is %s",
                            v->name, kf_dtype_name(v->dtype)) == KF_OK;
    }
    return 1;
}

static void plan_params(kf_synth *s) {
    /* vector width of the prelude's helpers and of the auto-vectoriser, for the file */
    long vws[3];
    int nvw = 0, maxw = s->dev.simd_bits >= 256 ? s->dev.simd_bits / 32 : 4;
    for (long w = 4; w <= maxw && nvw < 3; w *= 2) vws[nvw++] = w;
    kf_tpl_add_param(&s->space, "", "vw", KF_ROLE_VECTOR, vws, nvw, nvw - 1);
    for (int k = 0; k < s->nst; k++) {
        kf_stage *st = &s->st[k];
        snprintf(st->prefix, sizeof st->prefix, "s%d.", k);
        const kf_stage *h = st->fused ? &s->st[st->fused_into] : NULL;
        int hsel = !h ? 0 : h->epilogue == k + 1 ? h->epi_sel : h->redepi == k + 1 ? h->red_sel : 0;
        if (hsel) {
            /* an epilogue: its own schedule, in use where the stage it is fused into
             * computes it apart (epi=0, red=0) */
            int first = s->space.nparams;
            kf_tpl_stage_params(s, st, 0);
            for (int i = first; i < s->space.nparams; i++)
                if (!s->space.p[i].gate) {
                    s->space.p[i].gate = hsel;
                    s->space.p[i].gate_value = 0;
                }
            continue;
        }
        if (st->fused) continue; /* computed inside another stage, no schedule of its own */
        kf_tpl_stage_params(s, st, 0);
        if (st->epilogue) { /* fused (1) or apart (0): the partition as a searched choice */
            long v[] = {1, 0};
            int sel = s->space.nparams;
            kf_tpl_add_param(&s->space, st->prefix, "epi", KF_ROLE_NONE, v, 2, 0);
            if (s->space.nparams > sel) st->epi_sel = sel + 1;
        }
        if (st->redepi) { /* the reduction in the store stage (1) or its own stage (0) */
            long v[] = {1, 0};
            int sel = s->space.nparams;
            kf_tpl_add_param(&s->space, st->prefix, "red", KF_ROLE_NONE, v, 2, 0);
            if (s->space.nparams > sel) st->red_sel = sel + 1;
        }
    }
}

static int stage_of_value(const kf_synth *s, int v) { return s->val_stage[v]; }

/* A view whose composed map only relabels a buffer's elements (a reshape of an input or of
 * a computed value, kf_imap_is_linear) and that only non-elementwise ops read (or views,
 * which compose through it) is not copied: its readers (reductions, norms, softmax, scans,
 * matmuls, which all read their input as a dense row-major buffer) take the source's
 * buffer under the view's shape (alias; the C entry declares the pointer, a GPU launch
 * binds the source's buffer to the view's parameter, kf_gk_value). Readers only read it,
 * so an input stays unchanged. Same planner on every platform. */
static void plan_aliases(kf_synth *s) {
    const kf_graph *g = s->g;
    s->alias = kf_malloc((size_t)g->nvalues * sizeof *s->alias);
    for (int v = 0; v < g->nvalues; v++) s->alias[v] = -1;
    for (int ni = 0; ni < g->nnodes; ni++) {
        const kf_node *n = &g->nodes[ni];
        int w = n->out;
        if (s->skip[ni] || kf_op_get(n->op)->cls != KF_CLASS_VIEW || g->values[w].output_index >= 0) continue;
        kf_imap m;
        int src = kf_value_imap(g, w, &m);
        if (src == w || kf_synth_is_view(g, src) || !kf_imap_is_linear(&m) || g->values[src].dtype != g->values[w].dtype)
            continue;
        int ok = 1;
        for (int ri = 0; ri < g->nnodes && ok; ri++) {
            const kf_node *r = &g->nodes[ri];
            for (int a = 0; a < r->nin; a++)
                if (r->in[a] == w && (kf_op_is_elementwise(r->op) || kf_op_get(r->op)->cls == KF_CLASS_GATHER)) ok = 0;
        }
        if (!ok) continue;
        s->alias[w] = src;
        s->skip[ni] = 1;
    }
    /* a graph output that relabels a computed value (a conv's [N, g, O/g, P] result as
     * [N, O, L...]): the value is computed straight into the output's buffer, no copy */
    s->out_alias = kf_malloc((size_t)g->nvalues * sizeof *s->out_alias);
    for (int v = 0; v < g->nvalues; v++) s->out_alias[v] = -1;
    for (int ni = 0; ni < g->nnodes; ni++) {
        const kf_node *n = &g->nodes[ni];
        int w = n->out;
        if (s->skip[ni] || kf_op_get(n->op)->cls != KF_CLASS_VIEW || g->values[w].output_index < 0) continue;
        kf_imap m;
        int src = kf_value_imap(g, w, &m);
        /* an elementwise producer computes the view in its own stage anyway: only a
         * matmul, reduction, norm or scan result is worth writing in place */
        if (src == w || g->values[src].producer < 0 || kf_synth_is_view(g, src) || !kf_imap_is_linear(&m) ||
            kf_op_is_elementwise(g->nodes[g->values[src].producer].op) ||
            g->values[src].dtype != g->values[w].dtype || g->values[src].output_index >= 0 || s->out_alias[src] >= 0)
            continue;
        s->out_alias[src] = w;
        s->skip[ni] = 1;
    }
}

/* The node computing value v when it is a copy made for its reader (kf_synth_remat), else -1. */
static int copy_of(const kf_synth *s, int v) {
    int p = s->g->values[v].producer;
    return s->copy && p >= 0 && s->copy[p] && !s->skip[p] ? p : -1;
}

/* Split g's nodes into stages. With allow_bcast, an elementwise node whose result only
 * broadcasts into a cluster's domain (e.g. a [N, 1] temporary inside an [N, M] cluster) is
 * recomputed inside that cluster. Marks what must be materialised. Returns 0 when a
 * broadcast-shaped member would have to be stored (the caller then re-plans without). */
static int cluster(kf_synth *s, int allow_bcast) {
    const kf_graph *g = s->g;
    for (int i = 0; i < g->nvalues; i++) { s->val_stage[i] = -1; s->materialize[i] = 0; }
    for (int ni = 0; ni < g->nnodes; ni++) {
        const kf_node *n = &g->nodes[ni];
        const kf_value *ov = &g->values[n->out];
        int target = -1;
        if (s->skip[ni]) continue; /* a view its readers read through */
        if (s->copy && s->copy[ni]) continue; /* placed with its reader, below */
        int is_view = kf_op_get(n->op)->cls == KF_CLASS_VIEW, src = -1, ng = 0;
        int is_gather = kf_op_get(n->op)->cls == KF_CLASS_GATHER;
        if (is_view) { /* read through its map from where the map starts */
            kf_imap m;
            src = kf_value_imap(g, n->out, &m);
            ng = m.nguards;
        }
        if (kf_op_is_elementwise(n->op) || is_view || is_gather) {
            for (int k = s->nst - 1; k >= 0; k--) {
                kf_stage *st = &s->st[k];
                if (st->kind != KF_STAGE_EWISE) continue;
                kf_shape bc;
                int fits = kf_shape_equal(&st->dom, &ov->shape) ||
                           (allow_bcast && ov->output_index < 0 &&
                            kf_shape_broadcast(&st->dom, &ov->shape, &bc) &&
                            kf_shape_equal(&bc, &st->dom));
                if (!fits) continue;
                int ok = 1;
                for (int a = 0; a < n->nin && !is_view; a++) {
                    if (stage_of_value(s, n->in[a]) > k) ok = 0;
                    int c = copy_of(s, n->in[a]); /* a copy's operands come from memory */
                    for (int b = 0; c >= 0 && b < g->nodes[c].nin; b++)
                        if (stage_of_value(s, g->nodes[c].in[b]) >= k) ok = 0;
                }
                if (is_view && stage_of_value(s, src) >= k) ok = 0; /* its source from memory */
                if (is_gather && stage_of_value(s, n->in[0]) >= k) ok = 0; /* its data too */
                if (st->nguards + ng > KF_EW_MAX_GUARDS) ok = 0;
                if ((is_view || is_gather) && st->nviews >= KF_EW_MAX_VIEWS) ok = 0;
                if (ok) target = k;
                break; /* only the latest elementwise cluster of that domain */
            }
        }
        if (target < 0) {
            kf_stage *st = &s->st[s->nst];
            memset(st, 0, sizeof *st);
            st->index = s->nst;
            st->nodes = kf_malloc((size_t)g->nnodes * sizeof *st->nodes);
            switch (kf_op_get(n->op)->kind) {
            case KF_KIND_UNARY:
            case KF_KIND_BINARY: st->kind = KF_STAGE_EWISE; break;
            case KF_KIND_REDUCE: st->kind = KF_STAGE_REDUCE; break;
            case KF_KIND_SOFTMAX: st->kind = KF_STAGE_SOFTMAX; break;
            case KF_KIND_NORM: st->kind = KF_STAGE_NORM; break;
            case KF_KIND_MATMUL: st->kind = KF_STAGE_MATMUL; break;
            case KF_KIND_SCAN: st->kind = KF_STAGE_SCAN; break;
            case KF_KIND_VIEW: st->kind = KF_STAGE_EWISE; break; /* a copy through the map */
            case KF_KIND_GATHER: st->kind = KF_STAGE_EWISE; break; /* a load at the index */
            case KF_KIND_OWN: assert(!"an OWN-shaped op reaches the planner lowered (kf_graph_lower)"); break;
            }
            st->dom = ov->shape;
            target = s->nst++;
        }
        kf_stage *st = &s->st[target];
        for (int a = 0; a < n->nin && !is_view; a++) { /* its copies first */
            int c = copy_of(s, n->in[a]);
            if (c < 0 || s->val_stage[n->in[a]] >= 0) continue;
            st->nodes[st->nnodes++] = c;
            s->val_stage[n->in[a]] = target;
        }
        st->nodes[st->nnodes++] = ni;
        st->nguards += ng;
        st->nviews += is_view || is_gather;
        s->val_stage[n->out] = target;
    }
    /* materialise graph outputs and values read by another stage */
    for (int j = 0; j < g->noutputs; j++) s->materialize[g->outputs[j]] = 1;
    for (int v = 0; s->out_alias && v < g->nvalues; v++)
        if (s->out_alias[v] >= 0) s->materialize[v] = 1; /* written into the output's buffer */
    for (int ni = 0; ni < g->nnodes; ni++) {
        const kf_node *n = &g->nodes[ni];
        int k = s->val_stage[n->out];
        if (s->skip[ni]) continue;
        int reads[KF_MAX_NODE_IN], nr = n->nin;
        for (int a = 0; a < n->nin; a++) reads[a] = n->in[a];
        if (kf_op_get(n->op)->cls == KF_CLASS_VIEW) {
            kf_imap m;
            reads[0] = kf_value_imap(g, n->out, &m);
        } else if (kf_op_get(n->op)->kind == KF_KIND_MATMUL) {
            int t;
            for (int a = 0; a < 2; a++) reads[a] = kf_synth_mm_operand(g, n, a, !kf_synth_is_gpu(s->platform), &t, NULL, NULL);
        }
        for (int a = 0; a < nr; a++) {
            int v = reads[a];
            if (s->alias && s->alias[v] >= 0) v = s->alias[v]; /* read as its source's buffer */
            if (s->val_stage[v] >= 0 && s->val_stage[v] != k) s->materialize[v] = 1;
            /* non-elementwise stages read whole tensors from memory */
            if (s->val_stage[v] >= 0 && s->st[k].kind != KF_STAGE_EWISE) s->materialize[v] = 1;
        }
    }
    for (int v = 0; v < g->nvalues; v++) {
        int k = s->val_stage[v];
        if (k >= 0 && s->materialize[v] && s->st[k].kind == KF_STAGE_EWISE &&
            !kf_shape_equal(&g->values[v].shape, &s->st[k].dom))
            return 0;
    }
    return 1;
}

/* Elementwise stage k's results that another stage or the caller reads: 1 when that is
 * exactly value x, read only as node rn's operand a0 (its first for a reduction). */
static int only_feeds(const kf_synth *s, int k, int x, int rn, int a0) {
    const kf_graph *g = s->g;
    if (g->values[x].output_index >= 0) return 0;
    for (int v = 0; v < g->nvalues; v++)
        if (s->val_stage[v] == k && s->materialize[v] && v != x) return 0;
    for (int ni = 0; ni < g->nnodes; ni++) {
        const kf_node *n = &g->nodes[ni];
        for (int a = 0; a < n->nin; a++) {
            if (n->in[a] != x) continue;
            if (ni != rn || a != a0) return 0;
        }
    }
    return 1;
}

/* Elementwise stage k's results that another stage or the caller reads: 1 when that is
 * exactly value x, read only by the view node whose result is w, which only node rn reads,
 * as its operand a0 (a matmul reading w as x, kf_synth_mm_operand). */
static int only_viewed(const kf_synth *s, int k, int x, int w, int rn, int a0) {
    const kf_graph *g = s->g;
    if (g->values[x].output_index >= 0 || g->values[w].output_index >= 0) return 0;
    for (int v = 0; v < g->nvalues; v++)
        if (s->val_stage[v] == k && s->materialize[v] && v != x) return 0;
    for (int ni = 0; ni < g->nnodes; ni++) {
        const kf_node *n = &g->nodes[ni];
        for (int a = 0; a < n->nin; a++)
            if ((n->in[a] == x && n->out != w) || (n->in[a] == w && (ni != rn || a != a0))) return 0;
    }
    return 1;
}

/* The node that alone reads value x, as its first operand, when that node is the only node
 * of a reduction, softmax or norm stage (a stage that may take x's producer as its
 * prologue), else -1. */
static int sole_row_reader(const kf_synth *s, int x) {
    const kf_graph *g = s->g;
    if (g->values[x].output_index >= 0) return -1;
    int rn = -1;
    for (int ni = 0; ni < g->nnodes; ni++) {
        const kf_node *n = &g->nodes[ni];
        if (s->skip[ni]) continue;
        for (int a = 0; a < n->nin; a++) {
            if (n->in[a] != x) continue;
            if (a != 0 || rn >= 0) return -1;
            rn = ni;
        }
    }
    if (rn < 0) return -1;
    int k = s->val_stage[g->nodes[rn].out];
    if (k < 0 || s->st[k].nnodes != 1) return -1;
    kf_stage_kind kd = s->st[k].kind;
    return kd == KF_STAGE_REDUCE || kd == KF_STAGE_SOFTMAX || kd == KF_STAGE_NORM ? rn : -1;
}

/* An elementwise stage that computes several independent chains, each the input of its own
 * reduction, softmax or norm (a triplet loss's two distances, a cosine similarity's three
 * sums, read from shared inputs), is split into one stage per chain, so that
 * fuse_prologues can compute each chain inside its reader instead of storing every chain's
 * full result: the shared inputs are then read once per chain, the results never. Only
 * where every node of the stage belongs to exactly one chain (nothing shared but the loads
 * of inputs) and the stage reads no views. Runs after cluster(), before templates are
 * chosen. */
static void split_sibling_chains(kf_synth *s) {
    const kf_graph *g = s->g;
    int *slice = kf_malloc((size_t)g->nnodes * sizeof *slice);
    for (int e = 0; e < s->nst; e++) {
        kf_stage *st = &s->st[e];
        if (st->kind != KF_STAGE_EWISE || st->nguards || st->nviews || st->nnodes < 2) continue;
        /* the stage's stored results: each must be a chain for its own row reader */
        int mv[32], nm = 0, ok = 1;
        for (int i = 0; i < st->nnodes && ok; i++) {
            int v = g->nodes[st->nodes[i]].out;
            if (!s->materialize[v]) continue;
            if (nm == 32 || sole_row_reader(s, v) < 0 || !kf_shape_equal(&g->values[v].shape, &st->dom)) ok = 0;
            else mv[nm++] = v;
        }
        if (!ok || nm < 2) continue;
        /* each node's chain: the stored result it feeds (walked backwards from each);
         * a node feeding two is shared and the stage is left whole */
        for (int ni = 0; ni < g->nnodes; ni++) slice[ni] = -1;
        for (int c = 0; c < nm && ok; c++) {
            int stack[KF_MAX_NODE_IN * 64], sp = 0;
            stack[sp++] = g->values[mv[c]].producer;
            while (sp > 0 && ok) {
                int ni = stack[--sp];
                if (ni < 0 || s->val_stage[g->nodes[ni].out] != e) continue;
                if (slice[ni] == c) continue;
                if (slice[ni] >= 0) {
                    ok = 0;
                    break;
                }
                slice[ni] = c;
                for (int a = 0; a < g->nodes[ni].nin; a++) {
                    if (sp == (int)(sizeof stack / sizeof stack[0])) {
                        ok = 0;
                        break;
                    }
                    stack[sp++] = g->values[g->nodes[ni].in[a]].producer;
                }
            }
        }
        for (int i = 0; i < st->nnodes && ok; i++)
            if (slice[st->nodes[i]] < 0) ok = 0;
        if (!ok) continue;
        /* stages e+1.. move up by nm-1; chain c becomes stage e+c */
        memmove(&s->st[e + nm], &s->st[e + 1], (size_t)(s->nst - e - 1) * sizeof *s->st);
        s->nst += nm - 1;
        for (int k = e + nm; k < s->nst; k++) s->st[k].index = k;
        for (int v = 0; v < g->nvalues; v++)
            if (s->val_stage[v] > e) s->val_stage[v] += nm - 1;
        int *all = st->nodes, nall = st->nnodes;
        for (int c = nm - 1; c >= 0; c--) {
            kf_stage *t = &s->st[e + c];
            if (c > 0) {
                memset(t, 0, sizeof *t);
                t->kind = KF_STAGE_EWISE;
                t->dom = s->st[e].dom;
                t->nodes = kf_malloc((size_t)g->nnodes * sizeof *t->nodes);
            }
            t->index = e + c;
            int n = 0;
            for (int i = 0; i < nall; i++)
                if (slice[all[i]] == c) {
                    if (c > 0) t->nodes[n] = all[i];
                    n++;
                    s->val_stage[g->nodes[all[i]].out] = e + c;
                }
            if (c == 0) { /* in place: the kept order is topological */
                int m = 0;
                for (int i = 0; i < nall; i++)
                    if (slice[all[i]] == 0) all[m++] = all[i];
            }
            t->nnodes = n;
        }
        e += nm - 1;
    }
    free(slice);
}

/* Compute an elementwise producer inside the reduction, softmax or norm stage that is its
 * only reader (see kf_stage.prologue), so that its result never goes through memory: on
 * the CPU a row at a time into a stack buffer, on GPUs at every load of the stage's input
 * (gpu.c). Runs after cluster(), before the parameters are added. The stage's first
 * template decides (as it did before stages had alternatives); an alternative template
 * that cannot take the prologue is no longer offered for the stage. */
static void fuse_prologues(kf_synth *s) {
    const kf_graph *g = s->g;
    for (int k = 0; k < s->nst; k++) {
        kf_stage *r = &s->st[k];
        if (!r->tpl || !r->tpl->prologue_ok) continue;
        /* a GPU matmul (kf_gpu_matmul_prologue_ok) takes one for A or for B, views
         * included: an implicit GEMM's columns, a padded or strided operand */
        const int mm = r->kind == KF_STAGE_MATMUL;
        int rn = r->nodes[0], x = -1, e = -1;
        for (int a = 0; a < (mm ? 2 : 1) && x < 0; a++) {
            /* a matmul operand read as a view's source (a conv's merged columns, a
             * transpose: kf_synth_mm_operand): that value, through the template's indexing */
            int xa = g->nodes[rn].in[a], t = 0;
            int src = mm ? kf_synth_mm_operand(g, &g->nodes[rn], a, 0, &t, NULL, NULL) : xa;
            int ea = s->val_stage[src];
            if (ea < 0 || s->st[ea].kind != KF_STAGE_EWISE || s->st[ea].fused) continue;
            if (!mm && kf_synth_stage_has_views(s, &s->st[ea])) continue; /* reads through maps: kept apart */
            if (mm && !kf_synth_prologue_reads_ok(s, &s->st[ea])) continue;
            /* a matmul takes a producer that reads through views (an implicit GEMM's
             * columns, K times its input; a padded or strided operand), where the copy is
             * the larger cost; a pointwise producer of a plain operand stays a stage of its
             * own, computed once with vector loads, not again in every block's loads (not
             * measured either way on a GPU yet) */
            if (mm && !kf_synth_stage_has_views(s, &s->st[ea])) continue;
            if (!kf_shape_equal(&g->values[src].shape, &s->st[ea].dom)) continue;
            if (src == xa ? !only_feeds(s, ea, xa, rn, a) : !only_viewed(s, ea, src, xa, rn, a)) continue;
            x = src, e = ea;
        }
        if (x < 0 || !r->tpl->prologue_ok(s, r)) continue;
        r->prologue = e + 1;
        s->st[e].fused = 1;
        s->st[e].fused_into = k;
        s->materialize[x] = 0;
        int n = 0;
        for (int j = 0; j < r->nalts; j++)
            if (r->alts[j]->prologue_ok && r->alts[j]->prologue_ok(s, r)) r->alts[n++] = r->alts[j];
        r->nalts = n;
    }
}

/* Nodes (not planned away) that read value v. */
static int readers(const kf_synth *s, int v, int *one) {
    const kf_graph *g = s->g;
    int n = 0;
    for (int ni = 0; ni < g->nnodes; ni++) {
        const kf_node *nd = &g->nodes[ni];
        for (int a = 0; a < nd->nin; a++)
            if (nd->in[a] == v) {
                n++;
                if (one) *one = ni;
            }
    }
    return n;
}

/* A matrix product's A batch strides read matrix bt as output matrix bt. */
static int a_batch_dense(const kf_matmul_desc *d) {
    int64_t want = 1;
    for (int i = d->nbdims - 1; i >= 0; i--) {
        if (d->bdim[i] != 1 && d->a_bstride[i] != want) return 0;
        want *= d->bdim[i];
    }
    return 1;
}

/* A value only the chain computes and reads: no graph output, no relabelling of it. */
static int chain_private(const kf_synth *s, int v) {
    if (s->g->values[v].output_index >= 0) return 0;
    if (s->out_alias && s->out_alias[v] >= 0) return 0;
    for (int w = 0; s->alias && w < s->g->nvalues; w++)
        if (s->alias[w] == v) return 0;
    return 1;
}

/* CPU: a matmul whose A is the result of a row softmax (the row: its input's last axis,
 * the matmul's K) over the result of another matmul, each intermediate read by nothing
 * else (the first only through the softmax's fused prologue, if it has one), batches
 * alike: the three become one row-blocked chain (kf_stage.chain_mm, tpl_chain.c), computed
 * where the last one is, so every other operand is ready by then. Runs after
 * fuse_prologues; the last stage's template is selected again (the chain row). */
static void fuse_chains(kf_synth *s) {
    const kf_graph *g = s->g;
    if (kf_synth_is_gpu(s->platform)) return;
    for (int k = 0; k < s->nst; k++) {
        kf_stage *m2 = &s->st[k];
        if (m2->kind != KF_STAGE_MATMUL || m2->fused) continue;
        const kf_node *n2 = &g->nodes[m2->nodes[0]];
        const kf_matmul_desc *d2 = &m2->mm;
        int P = n2->in[0];
        if (d2->a_val != P || d2->ta || d2->gb.on || !a_batch_dense(d2)) continue;
        if (g->values[n2->in[1]].dtype != KF_F32 || g->values[P].dtype != KF_F32) continue;
        int r = s->val_stage[P];
        if (r < 0 || s->st[r].kind != KF_STAGE_SOFTMAX || s->st[r].fused) continue;
        const kf_node *nr = &g->nodes[s->st[r].nodes[0]];
        if (nr->out != P || !chain_private(s, P) || readers(s, P, NULL) != 1) continue;
        int x = nr->in[0];
        int64_t O, N, I;
        kf_synth_axis_split(&g->values[x].shape, nr->attr.axes, &O, &N, &I);
        if (I != 1 || N != d2->K || N > KF_PRO_MAX) continue;
        int S = -1;
        if (s->st[r].prologue) { /* the matmul result the prologue reads */
            const kf_stage *e = &s->st[s->st[r].prologue - 1];
            kf_ew_layout lay;
            kf_synth_ewise_layout(s, e, &lay);
            for (int i = 0; i < lay.nreads && S < 0; i++) {
                int v = lay.v[i], ms = s->val_stage[v];
                if (ms < 0 || s->st[ms].kind != KF_STAGE_MATMUL || s->st[ms].fused) continue;
                if (!kf_shape_equal(&g->values[v].shape, &g->values[x].shape)) continue;
                int ok = 1;
                for (int ni = 0; ni < g->nnodes; ni++)
                    for (int a = 0; a < g->nodes[ni].nin; a++)
                        if (g->nodes[ni].in[a] == v && s->val_stage[g->nodes[ni].out] != e->index) ok = 0;
                if (ok) S = v;
            }
        } else if (s->val_stage[x] >= 0 && s->st[s->val_stage[x]].kind == KF_STAGE_MATMUL &&
                   !s->st[s->val_stage[x]].fused && readers(s, x, NULL) == 1) {
            S = x;
        }
        if (S < 0 || !chain_private(s, S)) continue;
        kf_stage *m1 = &s->st[s->val_stage[S]];
        const kf_matmul_desc *d1 = &m1->mm;
        if (g->nodes[m1->nodes[0]].out != S || d1->gb.on || d1->batch != d2->batch || d1->M != d2->M ||
            d1->N != d2->K || d1->M == 0 || d1->N == 0 || d1->K == 0 || d2->N == 0)
            continue;
        if (g->values[d1->a_val].dtype != KF_F32 || g->values[d1->b_val].dtype != KF_F32) continue;
        m2->chain_mm = m1->index + 1;
        m2->chain_sm = r + 1;
        m1->fused = s->st[r].fused = 1;
        m1->fused_into = s->st[r].fused_into = k;
        s->materialize[S] = s->materialize[P] = 0;
        m2->tpl = NULL;
        for (int i = 0; i < kf_tpl_count(); i++) {
            const kf_tpl_def *t = kf_tpl_at(i);
            if (t->supports == kf_synth_chain_supports) m2->tpl = t;
        }
        assert(m2->tpl);
        m2->alts[0] = m2->tpl; /* the chain row alone computes the three */
        m2->nalts = 1;
    }
}

/* Stage k reads value y (itself, or through a view whose map starts at y). */
int kf_synth_stage_reads(const kf_synth *s, int k, int y) {
    const kf_graph *g = s->g;
    const kf_stage *st = &s->st[k];
    for (int i = 0; i < st->nnodes; i++) {
        const kf_node *n = &g->nodes[st->nodes[i]];
        if (kf_op_get(n->op)->cls == KF_CLASS_VIEW) {
            kf_imap m;
            if (kf_value_imap(g, n->out, &m) == y) return 1;
            continue;
        }
        for (int a = 0; a < n->nin; a++) {
            int v = n->in[a];
            if (v == y) return 1;
            if (kf_synth_is_view(g, v)) {
                kf_imap m;
                if (kf_value_imap(g, v, &m) == y) return 1;
            }
        }
    }
    return 0;
}

/* The buffer a GEMM with an epilogue accumulates its partial sums in (kf_matmul_desc.epi):
 * the epilogue's first f32 result written densely at the domain's flat index, which is the
 * product's (kf_synth_epilogue_ok); -1 when it has none. */
static int epi_acc(const kf_synth *s, const kf_stage *e) {
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, e, &lay);
    for (int r = lay.nreads; r < lay.nops; r++) {
        /* written at the domain's flat index, which is the product's (kf_synth_epilogue_ok) */
        int64_t run = 1;
        int dense = kf_shape_numel(&s->g->values[lay.v[r]].shape) == kf_shape_numel(&e->dom);
        for (int j = lay.q - 1; j >= 0 && dense; j--) {
            dense = lay.str[r][j] == run;
            run *= lay.dim[j];
        }
        if (dense && s->g->values[lay.v[r]].dtype == KF_F32) return lay.v[r];
    }
    return -1;
}

/* Compute an elementwise stage inside the stage whose result it reads (kf_stage.
 * epilogue; templates with .epilogue): a group norm's affine after its relabelled rows,
 * a bias and an activation in a GEMM's (or a convolution's) store stage, so that the
 * result never goes through memory. The elementwise stage must be the only reader of that
 * result, read it element for element (kf_synth_epilogue_ok), and read nothing computed
 * after it; a CPU GEMM keeps its partial sums in the epilogue's first f32 result (epi_acc);
 * a GPU kernel hands each stored element to the epilogue (gpu_epi.c) and must keep within
 * the kernel form's parameter limit.
 * Runs after fuse_prologues and fuse_chains, before the parameters are added (each
 * fusion adds the parameter "<prefix>epi" that can undo it: plan_params). */
static void fuse_epilogues(kf_synth *s) {
    const kf_graph *g = s->g;
    const int gpu = kf_synth_is_gpu(s->platform);
    for (int k = 0; k < s->nst; k++) {
        kf_stage *r = &s->st[k];
        if (r->fused || r->chain_mm || !r->tpl || !r->tpl->epilogue || r->nalts != 1) continue;
        int y = g->nodes[r->nodes[0]].out;
        if (g->values[y].output_index >= 0 || (s->out_alias && s->out_alias[y] >= 0)) continue;
        int e = -1, ok = 1;
        for (int j = 0; j < s->nst && ok; j++) {
            if (j == k || !kf_synth_stage_reads(s, j, y)) continue;
            if (e >= 0 || j < k || s->st[j].kind != KF_STAGE_EWISE || s->st[j].fused) ok = 0;
            e = j;
        }
        if (!ok || e < 0 || !kf_synth_epilogue_ok(s, &s->st[e], y)) continue;
        kf_ew_layout lay;
        kf_synth_ewise_layout(s, &s->st[e], &lay);
        for (int b = 0; b < lay.nbufs; b++)
            if (lay.bufs[b] != y && s->val_stage[lay.bufs[b]] > k) ok = 0; /* not ready yet */
        for (int v = 0; v < g->nvalues; v++) /* y only through e (an alias read elsewhere) */
            if (s->alias && s->alias[v] == y) ok = 0;
        if (!ok) continue;
        if (gpu) { /* the kernel takes the chain's operands and results instead of y */
            if (!kf_gpu_epilogue_fits(s, r, &s->st[e])) continue;
        } else if (r->kind == KF_STAGE_MATMUL && epi_acc(s, &s->st[e]) < 0) {
            continue;
        }
        r->epilogue = e + 1;
        if (r->kind == KF_STAGE_MATMUL && !gpu) r->mm.epi = 1;
        s->st[e].fused = 1;
        s->st[e].fused_into = k;
        s->materialize[y] = 0;
    }
}

/* 1 when the fusion parameter sel (1 + index; "epi", "red") is pinned to 0. */
static int sel_pinned_off(const kf_synth *s, int sel) {
    const kf_param *q = sel ? &s->space.p[sel - 1] : NULL;
    return q && q->nvalues == 1 && q->values[0] == 0;
}
/* 1 when stage h's epilogue is held apart at every point (its "epi" pinned to 0). */
static int epi_pinned_off(const kf_synth *s, const kf_stage *h) { return sel_pinned_off(s, h->epi_sel); }

/* The plan's summary (kf_synth_describe): its stages in order, "op(ewise[..])" for a
 * prologue, "op+ewise[..]" for an epilogue (one held apart by a pin: a stage of its own). */
static void describe(kf_synth *s) {
    const kf_graph *g = s->g;
    kf_buf d = {0};
    for (int k = 0; k < s->nst; k++) {
        const kf_stage *st = &s->st[k];
        const kf_node *n0 = &g->nodes[st->nodes[0]];
        /* an epilogue held apart (its "epi" pinned to 0: kforge synth --no-fuse) is a stage */
        const kf_stage *h = st->fused ? &s->st[st->fused_into] : NULL;
        if (st->fused && !(h->epilogue == k + 1 && epi_pinned_off(s, h)) &&
            !(h->redepi == k + 1 && sel_pinned_off(s, h->red_sel)))
            continue;
        if (d.len) kf_buf_puts(&d, " -> ");
        if (st->chain_mm) {
            const kf_stage *sm = &s->st[st->chain_sm - 1];
            kf_buf_printf(&d, "chain[matmul -> %s", kf_op_get(g->nodes[sm->nodes[0]].op)->name);
            if (sm->prologue)
                kf_buf_printf(&d, "(ewise[%d op%s])", s->st[sm->prologue - 1].nnodes,
                              s->st[sm->prologue - 1].nnodes == 1 ? "" : "s");
            kf_buf_puts(&d, " -> matmul]");
        } else if (st->kind == KF_STAGE_EWISE)
            kf_buf_printf(&d, "ewise[%d op%s]", st->nnodes, st->nnodes == 1 ? "" : "s");
        else if (st->prologue)
            kf_buf_printf(&d, "%s(ewise[%d op%s])", kf_op_get(n0->op)->name,
                          s->st[st->prologue - 1].nnodes, s->st[st->prologue - 1].nnodes == 1 ? "" : "s");
        else
            kf_buf_printf(&d, "%s", kf_op_get(n0->op)->name);
        if (st->epilogue && !epi_pinned_off(s, st))
            kf_buf_printf(&d, "+ewise[%d op%s]", s->st[st->epilogue - 1].nnodes,
                          s->st[st->epilogue - 1].nnodes == 1 ? "" : "s");
        if (st->redepi && !sel_pinned_off(s, st->red_sel)) { /* "matmul+sum(ewise[2 ops])" */
            const kf_stage *rs = &s->st[st->redepi - 1];
            kf_buf_printf(&d, "+%s", kf_op_get(g->nodes[rs->nodes[0]].op)->name);
            if (rs->prologue)
                kf_buf_printf(&d, "(ewise[%d op%s])", s->st[rs->prologue - 1].nnodes,
                              s->st[rs->prologue - 1].nnodes == 1 ? "" : "s");
            if (rs->epilogue) /* GPUs: the reduction's own epilogue, in the combine launch */
                kf_buf_printf(&d, "+ewise[%d op%s]", s->st[rs->epilogue - 1].nnodes,
                              s->st[rs->epilogue - 1].nnodes == 1 ? "" : "s");
        }
    }
    snprintf(s->desc, sizeof s->desc, "%s", d.data ? d.data : "");
    kf_buf_free(&d);
}

static kf_status plan_graph(const kf_graph *g, int *copy, const char *platform, const kf_device_info *dev,
                            kf_synth **out, kf_error *err) {
    *out = NULL;
    if (!kf_platform_find(platform) || g->nnodes == 0) free(copy); /* owned from here */
    if (!kf_platform_find(platform)) /* every platform has a template family */
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "the builtin generator has no templates for platform '%s' "
                            "(available: cpu, opencl, cuda, metal)",
                            platform ? platform : "(null)");
    if (g->nnodes == 0)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, 0, 0,
                            "task has no operations (outputs must be computed)");
    int *skip = kf_synth_view_skips(g, !kf_synth_is_gpu(platform));
    if (!graph_dtype_ok(g, skip, platform, dev, err)) {
        free(skip);
        free(copy);
        return err ? err->code : KF_ERR_UNSUPPORTED;
    }
    for (int j = 0; j < g->noutputs; j++) {
        const kf_value *v = &g->values[g->outputs[j]];
        if (v->producer < 0) {
            free(skip);
            free(copy);
            return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path, v->line, v->col,
                                "output '%s' is a graph input; nothing to compute", v->name);
        }
    }

    kf_synth *s = kf_calloc(1, sizeof *s);
    s->g = g;
    s->copy = copy;
    copy = NULL;
    s->skip = skip;
    s->dev = *dev;
    snprintf(s->platform, sizeof s->platform, "%s", platform);
    s->st = kf_calloc((size_t)g->nnodes, sizeof *s->st);
    s->val_stage = kf_malloc((size_t)g->nvalues * sizeof *s->val_stage);
    s->materialize = kf_calloc((size_t)g->nvalues, sizeof *s->materialize);
    for (int i = 0; i < g->nvalues; i++) s->val_stage[i] = -1;

    plan_aliases(s);
    if (!cluster(s, 1)) {
        /* a broadcast-shaped temporary would have to be stored from a larger domain */
        for (int k = 0; k < s->nst; k++) free(s->st[k].nodes);
        s->nst = 0;
        cluster(s, 0);
    }
    split_sibling_chains(s);
    for (int k = 0; k < s->nst; k++) {
        kf_stage *st = &s->st[k];
        if (st->kind == KF_STAGE_MATMUL) kf_synth_matmul_desc(g, &g->nodes[st->nodes[0]], !kf_synth_is_gpu(platform), &st->mm);
        kf_status tst = kf_tpl_select(s, st, err);
        if (tst != KF_OK) {
            kf_synth_free(s);
            return tst;
        }
    }
    fuse_prologues(s);
    fuse_chains(s);
    fuse_epilogues(s);
    kf_synth_fuse_reductions(s);
    if (kf_synth_is_gpu(platform)) {
        kf_status gst = kf_synth_gpu_check(s, err);
        if (gst != KF_OK) {
            kf_synth_free(s);
            return gst;
        }
        kf_synth_gpu_params(s);
    } else {
        plan_params(s);
    }
    if (s->space.overflow) {
        int nst = s->nst;
        kf_synth_free(s);
        return kf_error_set(err, KF_ERR_UNSUPPORTED, g->path[0] ? g->path : NULL, 0, 0,
                            "the task's %d stages need more than %d tunable parameters, the most "
                            "the builtin generator holds: split the task", nst, KF_MAX_PARAMS);
    }

    describe(s);
    *out = s;
    return KF_OK;
}

/* Composite ops with a lowering are planned as their lowering (kf_graph_lower), on GPUs
 * matrix-vector products as reductions (kf_synth_gemv_rewrite), and cheap
 * elementwise values read again after a reduction of them are recomputed there
 * (kf_synth_remat): the kernels compute that graph, which has the task's buffers; the
 * reference still evaluates the task's own graph. */
/* On GPUs a float32 logsumexp whose innermost dims are reduced (the row layout) keeps its
 * own kernel (gpu_reduce.c: the row max and the sum of exp from one read), where its
 * lowering would read the rows twice (the max, then the sum of exp around it). */
static int gpu_keeps(const kf_graph *g, const kf_node *n, void *ctx) {
    (void)ctx;
    if (kf_op_get(n->op)->combiner != KF_COMB_LOGSUMEXP || g->values[n->in[0]].dtype != KF_F32) return 0;
    rgroup gr[KF_MAX_DIMS];
    int m = kf_synth_canon(&g->values[n->in[0]].shape, n->attr.axes, gr);
    return m > 0 && gr[m - 1].reduced && !(m == 1 && gr[0].size == 1);
}

kf_status kf_synth_plan(const kf_graph *g, const char *platform, const kf_device_info *dev,
                        kf_synth **out, kf_error *err) {
    *out = NULL;
    kf_graph *lowered = NULL;
    if (kf_graph_has_lowering(g)) {
        kf_status st = kf_graph_lower_keeping(g, kf_synth_is_gpu(platform) ? gpu_keeps : kf_synth_cpu_keeps, NULL, &lowered, err);
        if (st != KF_OK) return st;
    }
    if (kf_synth_is_gpu(platform)) { /* matrix-vector products as reductions (gemv.c) */
        kf_graph *mv = kf_synth_gemv_rewrite(lowered ? lowered : g);
        if (mv) {
            kf_graph_free(lowered);
            lowered = mv;
        }
    }
    int *copy = NULL;
    kf_graph *re = kf_synth_remat(lowered ? lowered : g, &copy);
    if (re) {
        kf_graph_free(lowered);
        lowered = re;
    }
    kf_status st = plan_graph(lowered ? lowered : g, copy, platform, dev, out, err);
    if (st != KF_OK) {
        kf_graph_free(lowered);
        return st;
    }
    (*out)->lowered = lowered;
    return KF_OK;
}

void kf_synth_free(kf_synth *s) {
    if (!s) return;
    kf_graph_free(s->lowered);
    for (int k = 0; k < s->nst; k++) free(s->st[k].nodes);
    free(s->st);
    free(s->val_stage);
    free(s->materialize);
    free(s->skip);
    free(s->alias);
    free(s->out_alias);
    free(s->copy);
    free(s);
}

const kf_space *kf_synth_space(const kf_synth *s) { return &s->space; }
const char *kf_synth_describe(const kf_synth *s) { return s->desc; }

/* The name a parameter has in candidate labels: stage 0's without its "s0." prefix. */
static const char *label_name(const char *full) {
    return strncmp(full, "s0.", 3) == 0 ? full + 3 : full;
}

kf_status kf_synth_pin_assign(kf_synth *s, const char *assign, kf_error *err) {
    const char *eq = strchr(assign, '=');
    char name[40];
    if (!eq || eq == assign || (size_t)(eq - assign) >= sizeof name)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "--pin '%s': expected NAME=VALUE, e.g. "
                            "block=8192 (the names and values of the candidate labels)", assign);
    memcpy(name, assign, (size_t)(eq - assign));
    name[eq - assign] = 0;
    char *end;
    long v = strtol(eq + 1, &end, 10);
    int numeric = end != eq + 1 && !*end;
    for (int i = 0; i < s->space.nparams; i++) {
        kf_param *q = &s->space.p[i];
        if (strcmp(label_name(q->name), name) != 0 && strcmp(q->name, name) != 0) continue;
        int tpl = q->role == KF_ROLE_TEMPLATE; /* its values are templates, named in labels */
        if (!numeric && !tpl)
            return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "--pin '%s': the value must be an integer", assign);
        for (int j = 0; j < q->nvalues; j++) {
            const char *tn = tpl ? kf_synth_template_name(q->values[j]) : NULL;
            int hit = tpl && !numeric ? tn && (strcmp(tn, eq + 1) == 0 ||
                                               strcmp(kf_tpl_at((int)q->values[j])->name, eq + 1) == 0)
                                      : q->values[j] == v;
            if (hit) {
                q->values[0] = q->values[j];
                q->nvalues = 1;
                q->dflt = 0;
                describe(s);
                return KF_OK;
            }
        }
        kf_buf b = {0};
        for (int j = 0; j < q->nvalues; j++) {
            const char *tn = tpl ? kf_synth_template_name(q->values[j]) : NULL;
            if (tn) kf_buf_printf(&b, "%s%s", j ? ", " : "", tn);
            else kf_buf_printf(&b, "%s%ld", j ? ", " : "", q->values[j]);
        }
        kf_status st = kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "--pin '%s': %s takes %s%s", assign, name,
                                    q->nvalues == 1 ? "only " : "one of ", b.data ? b.data : "");
        kf_buf_free(&b);
        return st;
    }
    if (!numeric)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "--pin '%s': the value must be an integer", assign);
    kf_buf b = {0};
    for (int i = 0; i < s->space.nparams; i++)
        kf_buf_printf(&b, "%s%s", i ? " " : "", label_name(s->space.p[i].name));
    kf_status st = kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "--pin '%s': this task's kernels have no "
                                "parameter '%s'; they have: %s", assign, name,
                                b.data ? b.data : "(none)");
    kf_buf_free(&b);
    return st;
}

int kf_synth_pin(kf_synth *s, const char *name, long value) {
    int n = 0;
    size_t ln = strlen(name);
    for (int i = 0; i < s->space.nparams; i++) {
        kf_param *q = &s->space.p[i];
        size_t lq = strlen(q->name);
        int match = strcmp(q->name, name) == 0 ||
                    (lq > ln && q->name[lq - ln - 1] == '.' && strcmp(q->name + lq - ln, name) == 0);
        if (!match) continue;
        for (int j = 0; j < q->nvalues; j++)
            if (q->values[j] == value) {
                q->values[0] = value;
                q->nvalues = 1;
                q->dflt = 0;
                n++;
                break;
            }
    }
    if (n) describe(s);
    return n;
}

void kf_synth_default_point(const kf_synth *s, kf_point *p) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < s->space.nparams; i++) p->idx[i] = s->space.p[i].dflt;
}

void kf_synth_axis_split(const kf_shape *sh, uint32_t mask, int64_t *O, int64_t *N, int64_t *I) {
    int ax = 0;
    while (ax < sh->rank && !((mask >> ax) & 1u)) ax++;
    *O = *N = *I = 1;
    for (int j = 0; j < sh->rank; j++) {
        if (j < ax) *O *= sh->d[j];
        else if (j == ax) *N = sh->d[j];
        else *I *= sh->d[j];
    }
}

const char *kf_synth_ctype(const kf_graph *g, int v) {
    kf_dtype t = g->values[v].dtype;
    return t == KF_I64 ? "int64_t" : t == KF_BOOL ? "unsigned char" : "float";
}

/* Buffers a stage reads (materialised values and graph inputs) and writes. */
static void stage_buffers(const kf_synth *s, int k, int *reads, int *nr, int *writes, int *nw) {
    const kf_graph *g = s->g;
    const kf_stage *st = &s->st[k];
    *nr = *nw = 0;
    if (st->prologue) { /* the fused producer's operands instead of its result */
        kf_ew_layout lay;
        kf_synth_ewise_layout(s, &s->st[st->prologue - 1], &lay);
        for (int r = 0; r < lay.nbufs; r++) reads[(*nr)++] = lay.bufs[r];
    }
    if (st->kind == KF_STAGE_EWISE) { /* the buffers its reads load (a view: its source) */
        kf_ew_layout lay;
        kf_synth_ewise_layout(s, st, &lay);
        for (int r = 0; r < lay.nbufs; r++) reads[(*nr)++] = lay.bufs[r];
        for (int r = lay.nreads; r < lay.nops; r++) writes[(*nw)++] = lay.v[r];
        return;
    }
    for (int i = 0; i < st->nnodes; i++) {
        const kf_node *n = &g->nodes[st->nodes[i]];
        for (int a = 0; a < n->nin; a++) {
            int v = n->in[a];
            if (g->values[v].is_const || s->val_stage[v] == k) continue;
            if (st->prologue && s->val_stage[v] == st->prologue - 1) continue;
            int dup = 0;
            for (int r = 0; r < *nr; r++) dup |= reads[r] == v;
            if (!dup) reads[(*nr)++] = v;
        }
        if (s->materialize[n->out]) writes[(*nw)++] = n->out;
    }
    if (st->epilogue) { /* the fused reader's other operands and its results */
        int y = g->nodes[st->nodes[0]].out;
        kf_ew_layout lay;
        kf_synth_ewise_layout(s, &s->st[st->epilogue - 1], &lay);
        for (int b = 0; b < lay.nbufs; b++) {
            int dup = lay.bufs[b] == y;
            for (int r = 0; r < *nr; r++) dup |= reads[r] == lay.bufs[b];
            if (!dup) reads[(*nr)++] = lay.bufs[b];
        }
        for (int r = lay.nreads; r < lay.nops; r++) writes[(*nw)++] = lay.v[r];
    }
}

/* s as point p partitions it: each epilogue whose "<prefix>epi" is 0 at p computed as its
 * own stage again, and the result it read stored. Returns s itself when p unfuses none;
 * else *tmp, with copies of the stages and of materialize (*st_copy, *mat_copy: the
 * caller frees them). */
static const kf_synth *partition_at(const kf_synth *s, const kf_point *p, kf_synth *tmp, kf_stage **st_copy,
                                    int **mat_copy) {
    *st_copy = NULL;
    *mat_copy = NULL;
    for (int k = 0; k < s->nst; k++) {
        const kf_stage *st = &s->st[k];
        int epi_off = st->epilogue && st->epi_sel && !s->space.p[st->epi_sel - 1].values[p->idx[st->epi_sel - 1]];
        int red_off = st->redepi && st->red_sel && !s->space.p[st->red_sel - 1].values[p->idx[st->red_sel - 1]];
        if (!epi_off && !red_off) continue;
        if (!*st_copy) {
            *tmp = *s;
            *st_copy = kf_malloc((size_t)s->nst * sizeof **st_copy);
            memcpy(*st_copy, s->st, (size_t)s->nst * sizeof **st_copy);
            *mat_copy = kf_malloc((size_t)s->g->nvalues * sizeof **mat_copy);
            memcpy(*mat_copy, s->materialize, (size_t)s->g->nvalues * sizeof **mat_copy);
            tmp->st = *st_copy;
            tmp->materialize = *mat_copy;
        }
        kf_stage *h = &(*st_copy)[k], *e = &(*st_copy)[(epi_off ? st->epilogue : st->redepi) - 1];
        h->epilogue = 0;
        h->redepi = 0;
        h->mm.epi = 0;
        e->fused = 0;
        e->fused_into = 0;
        (*mat_copy)[s->g->nodes[st->nodes[0]].out] = 1;
    }
    return *st_copy ? tmp : s;
}

/* A GEMM's epilogue glue (kf_matmul_desc.epi): the context NAME_ex, the epilogue's buffers
 * but the product's, and NAME_epi, which calls the epilogue function ename with them. */
static void emit_gemm_epi(const kf_synth *s, const kf_stage *st, const char *fname, const char *ename, kf_buf *o) {
    const kf_graph *g = s->g;
    int y = g->nodes[st->nodes[0]].out;
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, &s->st[st->epilogue - 1], &lay);
    kf_buf_printf(o, "typedef struct %s_ex {", fname);
    for (int b = 0; b < lay.nbufs; b++)
        if (lay.bufs[b] != y) kf_buf_printf(o, " const %s *b%d;", kf_synth_ctype(g, lay.bufs[b]), lay.bufs[b]);
    for (int r = lay.nreads; r < lay.nops; r++) kf_buf_printf(o, " %s *b%d;", kf_synth_ctype(g, lay.v[r]), lay.v[r]);
    kf_buf_printf(o, " } %s_ex;\n", fname);
    kf_buf_printf(o, "static inline void %s_epi(const %s_ex *x, long f, long len, const float *in) {\n    %s(f, len, in",
                  fname, fname, ename);
    for (int b = 0; b < lay.nbufs; b++)
        if (lay.bufs[b] != y) kf_buf_printf(o, ", x->b%d", lay.bufs[b]);
    for (int r = lay.nreads; r < lay.nops; r++) kf_buf_printf(o, ", x->b%d", lay.v[r]);
    kf_buf_puts(o, ");\n}\n");
}

/* The entry's call of a GEMM with an epilogue: NAME(A, B, <accumulator>, &(NAME_ex){...}). */
static void emit_gemm_epi_call(const kf_synth *s, int k, kf_buf *o) {
    const kf_graph *g = s->g;
    const kf_stage *st = &s->st[k];
    int y = g->nodes[st->nodes[0]].out;
    const kf_stage *e = &s->st[st->epilogue - 1];
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, e, &lay);
    kf_buf_printf(o, "    kf_stage%d(b%d, b%d, b%d, &(kf_stage%d_ex){", k, st->mm.a_val, st->mm.b_val, epi_acc(s, e), k);
    int n = 0;
    for (int b = 0; b < lay.nbufs; b++)
        if (lay.bufs[b] != y) kf_buf_printf(o, "%sb%d", n++ ? ", " : "", lay.bufs[b]);
    for (int r = lay.nreads; r < lay.nops; r++) kf_buf_printf(o, "%sb%d", n++ ? ", " : "", lay.v[r]);
    kf_buf_puts(o, "});\n");
}

kf_status kf_synth_render(const kf_synth *s0, const kf_point *p, kf_candidate *c, kf_error *err) {
    kf_synth tmp;
    kf_stage *st_copy;
    int *mat_copy;
    const kf_synth *s = partition_at(s0, p, &tmp, &st_copy, &mat_copy);
    if (kf_synth_is_gpu(s0->platform)) {
        kf_status gst = kf_synth_gpu_render(s, p, c, err);
        free(st_copy);
        free(mat_copy);
        return gst;
    }
    const kf_graph *g = s->g;
    kf_buf src = {0};
    char pt[512];
    kf_point_format(&s->space, p, pt, sizeof pt);
    kf_buf_printf(&src, "/* kforge builtin candidate for task '%s': %s\n * schedule: %s */\n",
                  g->name, s->desc, pt);
    long vw = kf_point_get(&s->space, p, "vw", 0);
    if (vw > 0) kf_buf_printf(&src, "#define KF_VW %ld\n", vw);
    kf_tpl_prelude_c(&src);
    int *reads = kf_malloc((size_t)(g->nvalues + 1) * sizeof *reads);
    int *writes = kf_malloc((size_t)(g->nvalues + 1) * sizeof *writes);
    for (int k = 0; k < s->nst; k++) {
        const kf_stage *st = &s->st[k];
        int nr, nw;
        stage_buffers(s, k, reads, &nr, writes, &nw);
        if (st->fused) continue;
        char fname[32];
        snprintf(fname, sizeof fname, "kf_stage%d", k);
        kf_buf_puts(&src, "\n");
        if (st->prologue) {
            char pname[32];
            snprintf(pname, sizeof pname, "kf_pro%d", k);
            const kf_node *rn = &g->nodes[st->nodes[0]];
            kf_synth_prologue_emit(s, &s->st[st->prologue - 1], rn->in[0], -1, pname, &src);
        }
        if (st->epilogue) {
            char ename[32];
            snprintf(ename, sizeof ename, "kf_epi%d", k);
            kf_synth_epilogue_emit(s, &s->st[st->epilogue - 1], g->nodes[st->nodes[0]].out, ename, &src);
        }
        kf_stage view; /* the stage as the template the point picks sees it */
        const kf_tpl_def *t = kf_tpl_chosen(s, st, p, &view);
        if (t->cpu_emit_fn) {
            if (st->epilogue) {
                char ename[32];
                snprintf(ename, sizeof ename, "kf_epi%d", k);
                emit_gemm_epi(s, st, fname, ename, &src);
            }
            if (st->redepi) kf_synth_redepi_glue(s, k, fname, &src);
            t->cpu_emit_fn(s, &view, p, fname, &src);
            if (st->redepi) kf_synth_redepi_pass(s, k, p, fname, &src);
            continue;
        }
        kf_buf_printf(&src, "static void %s(", fname);
        for (int r = 0; r < nr; r++)
            kf_buf_printf(&src, "%sconst %s *restrict b%d", r ? ", " : "",
                          kf_synth_ctype(g, reads[r]), reads[r]);
        for (int w = 0; w < nw; w++)
            kf_buf_printf(&src, "%s%s *restrict b%d", nr + w ? ", " : "",
                          kf_synth_ctype(g, writes[w]), writes[w]);
        kf_buf_puts(&src, ") {\n");
        t->cpu_emit_body(s, &view, p, &src);
        kf_buf_puts(&src, "}\n");
    }
    /* entry */
    kf_buf_puts(&src, "\nint kforge_kernel(void *const *args) {\n");
    for (int i = 0; i < g->ninputs; i++) {
        int v = g->inputs[i];
        kf_buf_printf(&src, "    const %s *b%d = (const %s *)args[%d]; /* input %s */\n",
                      kf_synth_ctype(g, v), v, kf_synth_ctype(g, v), i, g->values[v].name);
    }
    for (int j = 0; j < g->noutputs; j++) {
        int v = g->outputs[j];
        kf_buf_printf(&src, "    %s *b%d = (%s *)args[%d]; /* output %s */\n",
                      kf_synth_ctype(g, v), v, kf_synth_ctype(g, v), g->ninputs + j,
                      g->values[v].name);
    }
    int nscratch = 0;
    for (int v = 0; v < g->nvalues; v++) {
        if (s->out_alias && s->out_alias[v] >= 0) {
            kf_buf_printf(&src, "    %s *b%d = b%d; /* %s: written into output %s, its relabelling */\n",
                          kf_synth_ctype(g, v), v, s->out_alias[v], g->values[v].name,
                          g->values[s->out_alias[v]].name);
            continue;
        }
        if (!s->materialize[v] || g->values[v].output_index >= 0) continue;
        int64_t bytes = kf_shape_numel(&g->values[v].shape) * kf_dtype_size(g->values[v].dtype);
        kf_buf_printf(&src, "    %s *b%d = kf_scratch(%lld); /* %s */\n", kf_synth_ctype(g, v), v,
                      (long long)bytes, g->values[v].name);
        kf_buf_printf(&src, "    if (!b%d) return 12; /* ENOMEM */\n", v);
        nscratch++;
    }
    for (int v = 0; s->alias && v < g->nvalues; v++)
        if (s->alias[v] >= 0)
            kf_buf_printf(&src, "    const %s *b%d = b%d; /* %s: a relabelling of %s */\n", kf_synth_ctype(g, v), v,
                          s->alias[v], g->values[v].name, g->values[s->alias[v]].name);
    for (int k = 0; k < s->nst; k++) {
        int nr, nw;
        if (s->st[k].fused) continue;
        stage_buffers(s, k, reads, &nr, writes, &nw);
        kf_stage view;
        if (s->st[k].chain_mm) { /* NAME(<chain reads>, C), 0 or ENOMEM */
            int cr[KF_EW_MAX_OPS + 3], ncr = kf_synth_chain_reads(s, &s->st[k], cr);
            kf_buf_printf(&src, "    if (kf_stage%d(", k);
            for (int r = 0; r < ncr; r++) kf_buf_printf(&src, "b%d, ", cr[r]);
            kf_buf_printf(&src, "b%d)) return 12;\n", g->nodes[s->st[k].nodes[0]].out);
            continue;
        }
        if (kf_tpl_chosen(s, &s->st[k], p, &view)->cpu_emit_fn && s->st[k].redepi) {
            kf_synth_redepi_call(s, k, &src);
            continue;
        }
        if (kf_tpl_chosen(s, &s->st[k], p, &view)->cpu_emit_fn && s->st[k].epilogue) {
            emit_gemm_epi_call(s, k, &src);
            continue;
        }
        if (kf_tpl_chosen(s, &s->st[k], p, &view)->cpu_emit_fn) { /* NAME(A, B, C) */
            const kf_node *n = &g->nodes[s->st[k].nodes[0]];
            kf_buf_printf(&src, "    kf_stage%d(b%d, b%d, b%d);\n", k, s->st[k].mm.a_val, s->st[k].mm.b_val, n->out);
            continue;
        }
        kf_buf_printf(&src, "    kf_stage%d(", k);
        for (int r = 0; r < nr; r++) kf_buf_printf(&src, "%sb%d", r ? ", " : "", reads[r]);
        for (int w = 0; w < nw; w++) kf_buf_printf(&src, "%sb%d", nr + w ? ", " : "", writes[w]);
        kf_buf_puts(&src, ");\n");
    }
    for (int v = 0; v < g->nvalues && nscratch; v++)
        if (s->materialize[v] && g->values[v].output_index < 0 && !(s->out_alias && s->out_alias[v] >= 0))
            kf_buf_printf(&src, "    free(b%d);\n", v);
    kf_buf_puts(&src, "    return 0;\n}\n");
    free(reads);
    free(writes);
    free(st_copy);
    free(mat_copy);

    char *text = kf_buf_take(&src);
    kf_status st = kf_candidate_init(c, s0->platform, text, "kforge_kernel", err);
    free(text);
    if (st != KF_OK) return st;
    snprintf(c->label, sizeof c->label, "%s", pt);
    /* compile flags that are part of the schedule */
    if (vw > 0) {
        int bits = (int)vw * 32;
        snprintf(c->flags, sizeof c->flags, "-mprefer-vector-width=%d", bits < 128 ? 128 : bits);
    }
    return KF_OK;
}

void kf_synth_matmul_desc(const kf_graph *g, const kf_node *n, int gather, kf_matmul_desc *d) {
    memset(d, 0, sizeof *d);
    /* a view that reads whole matrices (a transpose of the last two dims, a permutation or
     * broadcast of batch dims) is the operand's layout and batch strides on its source */
    int64_t bstr[2][KF_MAX_DIMS];
    d->a_val = kf_synth_mm_operand(g, n, 0, gather, &d->ta, bstr[0], NULL);
    d->b_val = kf_synth_mm_operand(g, n, 1, gather, &d->tb, bstr[1], &d->gb);
    const kf_shape *as = &g->values[n->in[0]].shape; /* the operand as the product reads it */
    const kf_shape *os = &g->values[n->out].shape;
    d->M = os->d[os->rank - 2];
    d->N = os->d[os->rank - 1];
    d->K = as->d[as->rank - 1];
    d->nbdims = os->rank - 2;
    d->batch = 1;
    /* the operands' own shapes (the views'), aligned right with the output's batch dims */
    const kf_shape *ops[2] = {&g->values[n->in[0]].shape, &g->values[n->in[1]].shape};
    int64_t *strides[2] = {d->a_bstride, d->b_bstride};
    for (int j = 0; j < d->nbdims; j++) {
        d->bdim[j] = os->d[j];
        d->batch *= os->d[j];
    }
    for (int k = 0; k < 2; k++) {
        int nb = ops[k]->rank - 2;
        for (int j = d->nbdims - 1; j >= 0; j--) {
            int oj = j - (d->nbdims - nb);
            strides[k][j] = oj < 0 || ops[k]->d[oj] == 1 ? 0 : bstr[k][oj];
        }
    }
}

/* A device of the platform's kind with the numbers planning reads, for questions asked
 * without a device at hand (kf_synth_op_support): two CPU threads with AVX2, or a GPU
 * with 32-lane sub-groups and 48 KiB of local memory per group. */
static void nominal_device(const char *platform, kf_device_info *d) {
    memset(d, 0, sizeof *d);
    snprintf(d->platform, sizeof d->platform, "%s", platform);
    d->cores = d->threads = 2;
    d->simd_bits = 256;
    d->l1d_bytes = 32 << 10;
    d->l2_bytes = 512 << 10;
    d->l3_bytes = 16 << 20;
    d->mem_bytes = (int64_t)8 << 30;
    if (kf_synth_is_gpu(platform)) {
        snprintf(d->device_type, sizeof d->device_type, "gpu");
        d->compute_units = 16;
        d->max_wg = 1024;
        d->max_wi[0] = d->max_wi[1] = d->max_wi[2] = 1024;
        d->local_mem_bytes = 48 << 10;
        d->global_mem_bytes = d->max_alloc_bytes = (int64_t)8 << 30;
        d->subgroup_size = 32;
        d->base_align_bytes = 128;
    }
}

kf_status kf_synth_op_support(kf_op op, const char *platform, kf_error *err) {
    const kf_op_def *d = kf_op_get(op);
    kf_graph *g = NULL;
    kf_status st = KF_OK;
    if (d->kind == KF_KIND_OWN || d->kind == KF_KIND_GATHER) { /* the task its record gives */
        kf_buf t = {0};
        kf_buf_printf(&t, "task support\n%s", d->example);
        st = kf_parse_string(t.data, "<support>", &g, err);
        kf_buf_free(&t);
    } else { /* the op on [8, 8] operands with its default attributes */
        g = kf_graph_new("support");
        kf_shape sh = {.rank = 2, .d = {8, 8}};
        int ins[KF_MAX_NODE_IN];
        for (int k = 0; k < d->min_in; k++) {
            char nm[8];
            snprintf(nm, sizeof nm, "x%d", k);
            ins[k] = kf_graph_add_input(g, nm, KF_F32, &sh, err);
        }
        int out = kf_graph_add_node(g, op, ins, d->min_in, NULL, "y", 0, 0, err);
        st = out < 0 ? KF_ERR_INTERNAL : kf_graph_mark_output(g, out, err);
    }
    if (st == KF_OK) {
        kf_device_info dev;
        nominal_device(platform, &dev);
        kf_synth *s = NULL;
        st = kf_synth_plan(g, platform, &dev, &s, err);
        kf_synth_free(s);
    }
    kf_graph_free(g);
    return st;
}
