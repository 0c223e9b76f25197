/*
 * The input sets and their reference as parts a cache can keep (issue 30): drawing the sets
 * and computing the float64 reference is independent of the candidate, and for a large task
 * it is most of a short run (swish, 16M elements, 6 sets: about half of a one-candidate
 * run on the 2-vCPU VM). kf_verify_ctx_parts lists a context's sets as byte blobs;
 * kf_verify_ctx_from_parts makes a context from them again, for the same graph, seed and
 * set count, without drawing or interpreting anything. The agent keeps the parts in the
 * store (src/agent/persist.c), keyed by the task's content, the seed, the set count and
 * KF_VERIFY_SETS_VERSION.
 *
 * Design note. These functions sit beside kf_verify_ctx_new rather than inside it, so that
 * how the sets are drawn and the reference computed can change there without touching the
 * cache; a change that alters the values drawn or the reference for the same seed must bump
 * KF_VERIFY_SETS_VERSION (the key then misses). Part 0 is a header that says what the other
 * parts are (counts, byte sizes, distributions, RMS values, which bounds are present); a
 * list whose header or sizes do not match the graph is refused (KF_ERR_PARSE), never
 * partly used. The checks are the same with a cached reference: only where the values come
 * from differs.
 */
#include "verify/verify_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PARTS_MAGIC 0x6b6672656673ull /* "kfrefs" */

typedef struct parts_head {
    uint64_t magic;
    uint32_t version, nsets, nin, nout;
    uint64_t seed;
    double bound_k;
    double t_draw, t_ref;   /* what computing them cost, for the record */
    /* then per set: int32 dist, nout doubles ref_rms, nout uint8 has_bound (padded to 8) */
} parts_head;

static size_t head_bytes(int nsets, int nout) {
    size_t per = 4 + 8 * (size_t)nout + (size_t)nout;
    per = (per + 7) & ~(size_t)7;
    return sizeof(parts_head) + per * (size_t)nsets;
}

/* See verify.h. */
int kf_verify_ctx_parts(const kf_verify_ctx *c, const void ***data, size_t **len, void **head) {
    *data = NULL;
    *len = NULL;
    *head = NULL;
    /* a context that does not keep every set (sets.c's memory plan) has nothing to give */
    if (!c->keep_in || !c->keep_ref) return 0;
    int n = 1;
    for (int s = 0; s < c->nsets; s++) {
        n += c->nin + c->nout;
        for (int j = 0; j < c->nout; j++) n += c->sets[s].bound[j] != NULL;
    }
    const void **d = kf_calloc((size_t)n, sizeof *d);
    size_t *l = kf_calloc((size_t)n, sizeof *l);
    size_t hb = head_bytes(c->nsets, c->nout);
    uint8_t *h = kf_calloc(1, hb);
    parts_head ph = {PARTS_MAGIC, KF_VERIFY_SETS_VERSION, (uint32_t)c->nsets, (uint32_t)c->nin,
                     (uint32_t)c->nout, c->seed, c->bound_k, c->t_draw, c->t_ref};
    memcpy(h, &ph, sizeof ph);
    size_t at = sizeof ph, per = (head_bytes(1, c->nout) - sizeof ph);
    int k = 1;
    for (int s = 0; s < c->nsets; s++) {
        const kf_vset *v = &c->sets[s];
        uint8_t *p = h + at;
        int32_t dist = v->dist;
        memcpy(p, &dist, 4);
        memcpy(p + 4, v->ref_rms, 8 * (size_t)c->nout);
        for (int j = 0; j < c->nout; j++) p[4 + 8 * c->nout + j] = v->bound[j] != NULL;
        at += per;
        for (int i = 0; i < c->nin; i++) d[k] = v->in[i], l[k++] = c->in_bytes[i];
        for (int j = 0; j < c->nout; j++) d[k] = v->ref[j], l[k++] = c->out_bytes[j];
        for (int j = 0; j < c->nout; j++)
            if (v->bound[j]) d[k] = v->bound[j], l[k++] = sizeof(float) * (size_t)c->out_numel[j];
    }
    d[0] = h;
    l[0] = hb;
    *data = d;
    *len = l;
    *head = h;
    return n;
}

static kf_status refuse(kf_verify_ctx *c, kf_error *err, const char *why) {
    kf_verify_ctx_free(c);
    return kf_error_set(err, KF_ERR_PARSE, NULL, 0, 0, "cached input sets: %s", why);
}

/* See verify.h. */
kf_status kf_verify_ctx_from_parts(const kf_graph *g, const kf_verify_opts *o, int n, void **data,
                                   const size_t *len, kf_verify_ctx **out, kf_error *err) {
    *out = NULL;
    if (!g || !o || o->seed == 0 || n < 1)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_verify_ctx_from_parts: no graph, seed or parts");
    kf_verify_ctx *c = kf_verify_ctx_shell(g, o);
    parts_head ph;
    if (len[0] < sizeof ph) return refuse(c, err, "short header");
    memcpy(&ph, data[0], sizeof ph);
    if (ph.magic != PARTS_MAGIC || ph.version != KF_VERIFY_SETS_VERSION) return refuse(c, err, "another format");
    if ((int)ph.nsets != c->opts.nsets || (int)ph.nin != c->nin || (int)ph.nout != c->nout || ph.seed != c->seed)
        return refuse(c, err, "made for other sets");
    if (len[0] != head_bytes(c->opts.nsets, c->nout)) return refuse(c, err, "header size");
    c->bound_k = ph.bound_k;
    c->nsets = c->opts.nsets;
    c->sets = kf_calloc((size_t)c->nsets, sizeof *c->sets);
    size_t per = head_bytes(1, c->nout) - sizeof ph;
    const uint8_t *h = (const uint8_t *)data[0] + sizeof ph;
    int k = 1;
    for (int s = 0; s < c->nsets; s++, h += per) {
        kf_vset *v = &c->sets[s];
        v->in = kf_calloc((size_t)c->nin + 1, sizeof *v->in);
        v->ref = kf_calloc((size_t)c->nout, sizeof *v->ref);
        v->ref_rms = kf_calloc((size_t)c->nout, sizeof *v->ref_rms);
        v->bound = kf_calloc((size_t)c->nout, sizeof *v->bound);
        int32_t dist;
        memcpy(&dist, h, 4);
        if (dist != s % KF_DIST_COUNT) return refuse(c, err, "distributions");
        v->dist = dist;
        memcpy(v->ref_rms, h + 4, 8 * (size_t)c->nout);
        /* each part is taken over (data[k] = NULL), after its size is checked */
        for (int i = 0; i < c->nin; i++, k++) {
            if (k >= n || len[k] != c->in_bytes[i]) return refuse(c, err, "input sizes");
            v->in[i] = data[k];
            data[k] = NULL;
        }
        for (int j = 0; j < c->nout; j++, k++) {
            if (k >= n || len[k] != c->out_bytes[j]) return refuse(c, err, "reference sizes");
            v->ref[j] = data[k];
            data[k] = NULL;
        }
        for (int j = 0; j < c->nout; j++) {
            if (!h[4 + 8 * c->nout + j]) continue;
            if (k >= n || len[k] != sizeof(float) * (size_t)c->out_numel[j]) return refuse(c, err, "bound sizes");
            v->bound[j] = data[k];
            data[k++] = NULL;
        }
    }
    if (k != n) return refuse(c, err, "extra parts");
    *out = c;
    return KF_OK;
}
