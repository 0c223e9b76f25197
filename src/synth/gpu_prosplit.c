/*
 * A GPU matmul's gathered operand with its addressing split into a part per row and a part
 * per column (issue 25: an implicit GEMM's columns, the standard way).
 *
 * A matmul stage with a fused elementwise prologue reads that operand, a matrix of R rows
 * of C contiguous elements (R*C a matrix, m the matrix of a batch), through
 * kf_pro<x>(f, ...): its flat index f = m*R*C + row*C + col taken apart by a `%` and a `/`
 * for every coalesced dim of the stage's domain, then each read's offset and each guard's
 * coordinate summed from the parts (gpu.c emit_prologue). Every read and guard of the
 * layout is linear in each coalesced dim (kf_ew_layout: strides per dim; no gathers in a
 * matmul's prologue, kf_synth_prologue_reads_ok), so where the dims factor at C (the
 * product of the innermost dims reaches C exactly, a dim crossing it split at a divisor:
 * a coalesced dim is linear, so hi*(n/d) + lo splits its stride) each offset and guard is
 * a column part plus a row part, and where they factor at R*C too, a matrix part as well
 * (else the matrix goes with the row part, as m*R + row). Of the two matmul indices, the
 * one along M or N (the tile's rows or columns a thread loads, fixed for a thread across
 * the K loop) and the one along K (per step), the template computes the first's part once
 * per thread outside the K loop, with the constants (a view's base, a guard's offset) and
 * the matrix's part, the second's per K step, once per distinct K index a thread loads,
 * and each element is then its offsets' and guards' sums of the two (kf_prs<x>). For a
 * conv2d's B (rows c, kh, kw; columns oh, ow) the K part is two divisions by constants per
 * row and the element two adds per read and guard, against the six-dim decomposition a
 * gathered element took.
 *
 * Helpers (emitted by emit_prologue in gpu.c after kf_pro<x>, which stays the fallback):
 *   void kf_prm<x>(ix i, ix m, ix *t)  the parts at M/N index i of matrix m, constants included
 *   void kf_prk<x>(ix i, ix m, ix *t)  the parts at K index i
 *   float kf_prs<x>(const ix *u, const ix *w, buffers...)  the element whose parts are u + w
 *   float kf_prx<x>(const ix *u, ix k, ix m, buffers...)  the element at K index k whose M/N
 *                                                  part is u (the SIMT kernel)
 * t holds the reads' offsets, then the guards' coordinates (nt values).
 */
#include "gpu_tpl.h"

#include <stdio.h>
#include <string.h>

/* more index values than this a part, and the flat helper is kept (registers) */
#define KF_SPLIT_MAX_NT 8

/* The domain's coalesced dims cut at the boundaries: entry e has size[e], lies in band
 * band[e] (0 columns, 1 rows or, with nb == 1, rows and matrices together as m*R + row,
 * 2 matrices) and reads coalesced dim src[e] with its strides times mul[e]. Innermost
 * first. */
typedef struct split_dims {
    int n, nb;
    int64_t size[2 * KF_MAX_DIMS + 2], mul[2 * KF_MAX_DIMS + 2];
    int src[2 * KF_MAX_DIMS + 2], band[2 * KF_MAX_DIMS + 2];
} split_dims;

/* Cut lay's dims at the first nb of bnd[] (C, then R*C); 0 when a boundary falls inside
 * a dim at no divisor of it. */
static int cut_dims(const kf_ew_layout *lay, const int64_t *bnd, int nb, split_dims *sd) {
    memset(sd, 0, sizeof *sd);
    sd->nb = nb;
    int64_t P = 1;
    int b = 0;
    for (int d = lay->q - 1; d >= 0; d--) {
        int64_t rem = lay->dim[d], mul = 1;
        while (b < nb && P >= bnd[b]) {
            if (P != bnd[b]) return 0;
            b++;
        }
        while (b < nb && P * rem > bnd[b]) {
            if (bnd[b] % P != 0 || rem % (bnd[b] / P) != 0) return 0;
            const int64_t in = bnd[b] / P;
            if (in > 1) {
                sd->size[sd->n] = in, sd->mul[sd->n] = mul, sd->src[sd->n] = d, sd->band[sd->n] = b;
                sd->n++;
            }
            mul *= in, rem /= in, P = bnd[b], b++;
        }
        if (rem > 1) {
            sd->size[sd->n] = rem, sd->mul[sd->n] = mul, sd->src[sd->n] = d, sd->band[sd->n] = b;
            sd->n++;
        }
        P *= rem;
    }
    /* every boundary reached (the last may be the whole domain) */
    while (b < nb && P == bnd[b]) b++;
    return b == nb;
}

void kf_gpu_prologue_split(const kf_synth *s, const kf_stage *st, int x, kf_gpu_prosplit *sp) {
    memset(sp, 0, sizeof *sp);
    sp->x = x;
    if (st->kind != KF_STAGE_MATMUL || !st->prologue || x < 0 || x != kf_gpu_prologue_value(s, st)) return;
    const kf_matmul_desc *d = &st->mm;
    const int is_a = x == d->a_val, is_b = x == d->b_val;
    if (is_a == is_b) return; /* neither, or both operands: the flat helper */
    if (is_a) {
        sp->R = d->ta ? d->K : d->M, sp->C = d->ta ? d->M : d->K, sp->kcol = !d->ta;
    } else {
        sp->R = d->tb ? d->N : d->K, sp->C = d->tb ? d->K : d->N, sp->kcol = d->tb;
    }
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, &s->st[st->prologue - 1], &lay);
    sp->nt = lay.nreads + lay.ng;
    if (lay.q == 0 || sp->nt > KF_SPLIT_MAX_NT) return;
    for (int r = 0; r < lay.nreads; r++)
        if (lay.take[r] >= 0) return; /* a gather's offset is no sum of parts */
    split_dims sd;
    const int64_t bnd[2] = {sp->C, sp->R * sp->C};
    if (cut_dims(&lay, bnd, 2, &sd)) sp->top = 1;
    else if (!cut_dims(&lay, bnd, 1, &sd)) return;
    sp->on = 1;
    for (int b = 0; b < lay.nbufs; b++) {
        size_t l = strlen(sp->args);
        snprintf(sp->args + l, sizeof sp->args - l, ", b%d", lay.bufs[b]);
    }
}

/* t[...] += the parts of band `band` of sd at index expression i (a variable the code may
 * overwrite) */
static void emit_band(kf_buf *f, const kf_gplan *gp, const kf_ew_layout *lay, const split_dims *sd, int band,
                      const char *i) {
    const int nr = lay->nreads, nt = nr + lay->ng;
    int last = -1;
    for (int e = 0; e < sd->n; e++)
        if (sd->band[e] == band) last = e;
    char lit[32], dl[32];
    for (int e = 0; e < sd->n; e++) {
        if (sd->band[e] != band) continue;
        if (e == last) kf_buf_printf(f, "    idx = %s;\n", i); /* the band's outermost: no remainder */
        else {
            kf_gpu_lit(gp, sd->size[e], dl, sizeof dl);
            kf_buf_printf(f, "    idx = %s %% %s; %s = %s / %s;\n", i, dl, i, i, dl);
        }
        for (int r = 0; r < nt; r++) {
            const int64_t sv = (r < nr ? lay->str[r][sd->src[e]] : lay->gstr[r - nr][sd->src[e]]) * sd->mul[e];
            if (sv) kf_buf_printf(f, "    t[%d] += idx * %s;\n", r, kf_gpu_lit(gp, sv, lit, sizeof lit));
        }
    }
}

void kf_gpu_emit_prologue_split(kf_gplan *gp, const kf_stage *st, const kf_gpu_prosplit *sp) {
    const kf_synth *s = gp->s;
    const kf_stage *e = &s->st[st->prologue - 1];
    kf_ew_layout lay;
    kf_synth_ewise_layout(s, e, &lay);
    split_dims sd;
    const int64_t bnd[2] = {sp->C, sp->R * sp->C};
    if (!cut_dims(&lay, bnd, sp->top ? 2 : 1, &sd)) return; /* kf_gpu_prologue_split said it does */
    const int x = sp->x, nr = lay.nreads, nt = sp->nt;
    const char *ix = gp->ix;
    char lit[32], rl[32];
    kf_gpu_lit(gp, sp->R, rl, sizeof rl);
    kf_buf f = {0};
    /* the M/N index is the row (K-contiguous) or the column; the K index the other */
    const int mn_band = sp->kcol ? 1 : 0, k_band = sp->kcol ? 0 : 1;
    kf_buf_printf(&f, "/* %s read as [%lld][%lld] matrices, its reads' offsets and guards split into an M/N part "
                      "(kf_prm%d) and a K part (kf_prk%d) */\n",
                  s->g->values[x].name, (long long)sp->R, (long long)sp->C, x, x);
    for (int part = 0; part < 2; part++) {
        const int band = part ? k_band : mn_band;
        kf_buf_printf(&f, "$fn void kf_pr%c%d(%s i, %s m, %s *t) {\n    %s idx;\n", part ? 'k' : 'm', x, ix, ix, ix, ix);
        for (int r = 0; r < nt; r++) {
            int64_t c0 = 0;
            if (!part) c0 = r < nr ? (lay.buf[r] != lay.v[r] ? lay.base[r] : 0) : lay.goff[r - nr];
            kf_buf_printf(&f, "    t[%d] = %s;\n", r, kf_gpu_lit(gp, c0, lit, sizeof lit));
        }
        /* the row band with the matrices (m*R + row) where R*C falls inside a dim */
        if (band == 1 && !sp->top) kf_buf_printf(&f, "    i = m * %s + i;\n", rl);
        emit_band(&f, gp, &lay, &sd, band, "i");
        if (!part && sp->top) emit_band(&f, gp, &lay, &sd, 2, "m");
        kf_buf_puts(&f, "    (void)m; (void)idx;\n}\n");
    }
    kf_buf_printf(&f, "$fn float kf_prs%d(const %s *u, const %s *w", x, ix, ix);
    for (int b = 0; b < lay.nbufs; b++)
        kf_buf_printf(&f, ", $global const %s *$restrict b%d", kf_gpu_ctype(s->g, lay.bufs[b]), lay.bufs[b]);
    kf_buf_puts(&f, ") {\n");
    for (int r = 0; r < nt; r++)
        kf_buf_printf(&f, "    const %s %s%d = u[%d] + w[%d];\n", ix, r < nr ? "off" : "gd", r < nr ? r : r - nr, r, r);
    kf_gpu_prologue_body(gp, e, &lay, x, &f);
    kf_buf_printf(&f, "$fn float kf_prx%d(const %s *u, %s k, %s m", x, ix, ix, ix);
    for (int b = 0; b < lay.nbufs; b++)
        kf_buf_printf(&f, ", $global const %s *$restrict b%d", kf_gpu_ctype(s->g, lay.bufs[b]), lay.bufs[b]);
    kf_buf_printf(&f, ") {\n    %s w[%d];\n    kf_prk%d(k, m, w);\n", ix, nt, x);
    kf_buf_printf(&f, "    return kf_prs%d(u, w%s);\n}\n\n", x, sp->args);
    kf_gplan_text(gp, f.data);
    kf_buf_free(&f);
}
