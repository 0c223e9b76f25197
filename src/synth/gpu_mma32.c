/*
 * CUDA tensor-core matmul for f32 operands (sm_80 and newer), "3xTF32": C[b] =
 * op(A[a(b)]) op(B[b(b)]) with the transposes and broadcast batch dims of kf_matmul_desc,
 * f32 results to f32 accuracy. It is the SIMT matmul's alternative (gpu_matmul.c), chosen
 * by that template's parameter tc (0 SIMT, 1 this), so the search compares the two.
 *
 * Each operand element x is split into big = tf32(x) and small = tf32(x - big) (cvt.rna:
 * round to nearest, ties away; x - big is exact in f32), so x = big + small to about 2^-22
 * relative, and every 8-deep product is accumulated in f32 by three
 * `mma.sync.m16n8k8.f32.tf32.tf32.f32`: small_a big_b, big_a small_b, then big_a big_b
 * (the small products first, for the register file's ILP: all tiles' small products are
 * issued before their big ones). The dropped small_a small_b term is ~2^-22 of the product.
 * The tensor cores add an mma's products into its C operand rounding toward zero, so the
 * products of each BK step go to a zeroed fragment (tq) and are added to the f32
 * accumulators with an ordinary (round-to-nearest) add once a step (acc=0), or each 8-deep
 * tile's three to a zeroed t4 added at once (acc=1, fewer registers): chained through the
 * accumulators over all of K, that rounding biased the result (on an H200, 2048^3 NMSE
 * 3.8e-10 against the SIMT kernel's 6.6e-13; with tq 8.1e-14, for about 3% more time and
 * 226 registers instead of 163: docs/benchmarks/gpu.md).
 *
 * Block, warps and pipeline as the f16/bf16 template (gpu_mma.c): a BM x BN block tile of
 * (BM/WM) x (BN/WN) warps, a ring of ST shared-memory stages filled by cp.async 16-byte
 * copies (4 f32, zero-filled past the matrix edges; element by element when the operand's
 * contiguous dim is not a multiple of 4), one barrier per BK step, blocks in row groups
 * of GM. Fragments (m16n8k8 tf32, g = lane / 4, t = lane % 4): A a0 (g, t), a1 (g+8, t),
 * a2 (g, t+4), a3 (g+8, t+4); B b0 (k t, n g), b1 (k t+4, n g); C c0 c1 (g, 2t, 2t+1), c2 c3
 * (g+8, 2t, 2t+1).
 *
 * Shared-memory layouts. An operand stored with K contiguous (A plain, B transposed) keeps
 * rows of BK f32, their 16-byte chunks XOR-swizzled as in gpu_mma.c, and is read with
 * ldmatrix (b16, no .trans): an 8 x 8 b16 matrix is 8 rows of 4 f32, and lane i gets the
 * 32-bit word (row i/4, word i%4), i.e. exactly an A fragment (row g, k t) or a B one (n g,
 * k t); four matrices give a0..a3, or b0 b1 of two n-tiles. An operand stored with M (N)
 * contiguous (A transposed, B plain) is read with scalar shared loads of word
 * (k t)(BM + 8) + (m g): BM is a multiple of 32, so the bank is 8t + g + const, 32 lanes
 * on 32 banks; the pad of 8 words keeps each row 16-byte aligned for cp.async.
 *
 * The accumulators are written straight to C (each lane two adjacent f32, as one 8-byte
 * store when N is even): a quad of lanes covers 32 contiguous bytes of a row, whole
 * sectors, so no trip through shared memory. With a fused elementwise epilogue (a bias, an
 * activation, a residual: kf_stage.epilogue) each of the pair is one scalar store statement
 * `b<C>[i] = v;` in an unrolled loop, which the launch turns into a call of the chain's
 * helper kf_epi<C> (gpu_epi.c, as for the SIMT template), so C is never written.
 *
 * A row reduction fused into the store stage (kf_stage.redepi, s<k>.red=1) replaces the
 * stores of C: the lanes fold their accumulators row by row, and the block's partial of
 * each row goes to scratch for the combine launch (gpu_redepi.c kf_gpu_redepi_mma_store; a
 * pointwise chain before the reduction is applied to each element as it is folded).
 *
 * A fused elementwise prologue (kf_stage.prologue: an implicit GEMM's columns, a padded or
 * strided view of an operand, a pointwise op of one) computes A or B: that operand takes
 * the element-wise copy (each element `b<x>[i]` read under the edge checks, zero past
 * them, and stored to shared memory by the threads), so that the launch turns each read
 * into a call of the prologue's helper kf_pro<x> (gpu.c); the other operand keeps cp.async.
 * The ring and the one barrier a step stay as they are: a stage is refilled only after
 * the barrier that follows every warp's last read of it. In the main loop the gathered
 * tile of step kt0 + ST - 1 is read into registers (pg<a|b>[]) during step kt0 - 1's
 * products and stored to its stage after step kt0's barrier (the ring's first ST - 1
 * steps are copied directly), so that those loads overlap the MMAs.
 *
 * Parameters: bm, bn (64, 128, 256), bk (16, 32), wm, wn (32, 64), st (2-4), gm (1, 8), mb
 * (1, 2: blocks per SM the register budget must allow, __launch_bounds__'s minimum), acc (0, 1:
 * where the products meet the accumulators, above). A
 * point is made valid at render time as in gpu_mma.c: tiles shrink to the matrix, at most 8
 * warps a block, stages, depth and tiles cut until the ring fits the shared memory.
 */
#include "gpu_tpl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kf_gpu_tf32_ok(const kf_synth *s, const kf_stage *st) {
    /* a fused epilogue is taken at the stores, a fused prologue at the element-wise tile
     * loads of its operand (below) */
    if (st->kind != KF_STAGE_MATMUL) return 0;
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    if (s->g->values[n->in[0]].dtype != KF_F32 || s->g->values[n->out].dtype != KF_F32) return 0;
    return kf_gpu_mma_arch_ok(s->platform, &s->dev);
}

int kf_gpu_tf32_default(const kf_synth *s, const kf_stage *st) {
    const kf_matmul_desc *d = &st->mm;
    kf_gdev dv;
    kf_gpu_dev(s, &dv);
    int64_t tiles128 = d->batch * ((d->M + 127) / 128) * ((d->N + 127) / 128);
    return d->M >= 128 && d->N >= 128 && d->K >= 64 && tiles128 >= dv.cu;
}

void kf_gpu_tf32_params(kf_synth *s, kf_stage *st) {
    static const long tiles[] = {64, 128, 256};
    static const long depths[] = {16, 32};
    static const long warps[] = {32, 64};
    static const long stages[] = {2, 3, 4};
    static const long groups[] = {1, 8};
    /* 128 x 128 x 32 tiles of eight 64 x 32 warps, three stages (96 KiB): a starting point
     * by analogy with the 16-bit template (f32 tiles take twice the bytes, so one step
     * less deep in elements), not yet measured on a GPU */
    kf_gpu_param(s, st, "bm", KF_ROLE_TILE_M, tiles, 3, 1);
    kf_gpu_param(s, st, "bn", KF_ROLE_TILE_N, tiles, 3, 1);
    kf_gpu_param(s, st, "bk", KF_ROLE_TILE_K, depths, 2, 1);
    kf_gpu_param(s, st, "wm", KF_ROLE_NONE, warps, 2, 1);
    kf_gpu_param(s, st, "wn", KF_ROLE_NONE, warps, 2, 0);
    kf_gpu_param(s, st, "st", KF_ROLE_NONE, stages, 3, 1);
    kf_gpu_param(s, st, "gm", KF_ROLE_NONE, groups, 2, 1);
    /* mb=2 asks the compiler for two blocks per SM (__launch_bounds__'s minimum: 128
     * registers for 8 warps) where the default kernel takes 159 registers (198 with a GELU
     * epilogue) and so runs one block of 8 warps per SM; ptxas (CUDA 13.0, sm_90) then spills
     * 4 to 52 bytes a thread at the 128 x 128 points measured (docs/design-notes.md) */
    static const long blocks[] = {1, 2};
    kf_gpu_param(s, st, "mb", KF_ROLE_NONE, blocks, 2, 0);
    /* where the products are added to the accumulators (below): per BK step (the default,
     * measured on the H200) or per tile (fewer registers: ptxas 167 against 226 at the
     * default point; not yet timed on a GPU, docs/design-notes.md) */
    static const long accs[] = {0, 1};
    kf_gpu_param(s, st, "acc", KF_ROLE_NONE, accs, 2, 0);
}

/* One operand as the copies and fragment loads see it. */
typedef struct op32 {
    const char *buf, *off; /* buffer b<v>, batch offset variable */
    int mn_major;          /* contiguous dim is M (A) or N (B) rather than K */
    int64_t ext;           /* extent of its M (A) or N (B) dim */
    int64_t tile;          /* BM or BN */
    int64_t bk;
    int vec;               /* contiguous dim % 4 == 0: aligned 16-byte copies */
} op32;

/* f32 words per row of the operand's tile in shared memory (padded when M/N-major) and
 * rows per tile */
static int64_t op_stride(const op32 *o) { return o->mn_major ? o->tile + 8 : o->bk; }
static int64_t op_rows(const op32 *o) { return o->mn_major ? o->bk : o->tile; }
static int64_t op_words(const op32 *o) { return op_rows(o) * op_stride(o); }

/* the word offset in a stage of chunk c (4 words) of row r, as an expression */
static void op_chunk_at(const op32 *o, const char *r, const char *c, char *out, size_t cap) {
    if (o->mn_major) {
        snprintf(out, cap, "(%s) * %lld + (%s) * 4", r, (long long)op_stride(o), c);
    } else {
        char swz[48];
        kf_gpu_mma_swizzle(o->bk / 4, r, swz, sizeof swz);
        snprintf(out, cap, "(%s) * %lld + (((%s) ^ %s) << 2)", r, (long long)o->bk, c, swz);
    }
}

/* The head of a walk over an operand tile's 16-byte chunks by the block's threads: per
 * chunks a thread, chunk e = tid + q * nthreads (guarded where total is not a multiple),
 * at row r and chunk column c; the caller closes both braces. */
static void emit_chunk_loop(kf_buf *b, int64_t per, int64_t nthreads, int64_t total, int64_t cpr) {
    kf_buf_printf(b, "        #pragma unroll\n        for (int q = 0; q < %lld; q++) {\n", (long long)per);
    kf_buf_printf(b, "            const int e = tid + q * %lld;\n", (long long)nthreads);
    if (total % nthreads) kf_buf_printf(b, "            if (e < %lld) {\n", (long long)total);
    else kf_buf_puts(b, "            {\n");
    kf_buf_printf(b, "            const int r = e / %lld, c = e %% %lld;\n", (long long)cpr, (long long)cpr);
}

/* Copy the bk-deep tile at K offset k0 of operand o into stage `stg` at word `wbase` of
 * the shared array (stage size stage_words). */
static void emit_copy(kf_buf *b, const kf_gplan *gp, const op32 *o, const char *wbase, int64_t stage_words,
                      const char *g0, int64_t K, int64_t nthreads) {
    const int64_t cpr = (o->mn_major ? o->tile : o->bk) / 4, rows = op_rows(o);
    const int64_t total = rows * cpr, per = (total + nthreads - 1) / nthreads;
    const char *ix = gp->ix;
    char at_s[128];
    op_chunk_at(o, "r", "c", at_s, sizeof at_s);
    emit_chunk_loop(b, per, nthreads, total, cpr);
    if (o->mn_major) kf_buf_printf(b, "            const int x = %s + c * 4, k = k0 + r;\n", g0);
    else kf_buf_printf(b, "            const int x = %s + r, k = k0 + c * 4;\n", g0);
    kf_buf_printf(b, "            const int w = %s + stg * %lld + %s;\n", wbase, (long long)stage_words, at_s);
    char at[160];
    if (o->mn_major) snprintf(at, sizeof at, "%s + (%s)k * %lld + x", o->off, ix, (long long)o->ext);
    else snprintf(at, sizeof at, "%s + (%s)x * %lld + k", o->off, ix, (long long)K);
    if (o->vec) {
        /* the contiguous dim is a multiple of 4 and so is every chunk's start: a chunk is
         * wholly in or out; checks only for the dims the tiles do not divide */
        kf_gpu_mma_chunk_ok(b, o->ext, o->tile, K, o->bk);
        kf_buf_printf(b, "            kf_cp16(sbase + (unsigned)w * 4u, %s + (ok ? %s : 0), ok);\n", o->buf, at);
    } else {
        kf_buf_puts(b, "            #pragma unroll\n            for (int j = 0; j < 4; j++) {\n");
        if (o->mn_major)
            kf_buf_printf(b, "                const int ok = x + j < %lld && k < %lld;\n", (long long)o->ext, (long long)K);
        else
            kf_buf_printf(b, "                const int ok = x < %lld && k + j < %lld;\n", (long long)o->ext, (long long)K);
        kf_buf_printf(b, "                kf_smf[w + j] = ok ? %s[%s + j] : 0.0f;\n", o->buf, at);
        kf_buf_puts(b, "            }\n");
    }
    kf_buf_puts(b, "            }\n        }\n");
}

/* The gathered operand's register prefetch (a fused prologue's operand, element-wise):
 * with `load`, thread tid reads its elements of the bk-deep tile at K offset `kexpr` into
 * registers pg<tag>[] (zero past the edges), the copy's walk of emit_copy; without, it stores
 * them into stage `stg` at word `wbase` of the shared array. */
static void emit_gather(kf_buf *b, const kf_gplan *gp, const op32 *o, const char *tag, int load, const char *kexpr,
                        const char *wbase, int64_t stage_words, const char *g0, int64_t K, int64_t nthreads) {
    const int64_t cpr = (o->mn_major ? o->tile : o->bk) / 4, rows = op_rows(o);
    const int64_t total = rows * cpr, per = (total + nthreads - 1) / nthreads;
    const char *ix = gp->ix;
    emit_chunk_loop(b, per, nthreads, total, cpr);
    kf_buf_puts(b, "            #pragma unroll\n            for (int j = 0; j < 4; j++) {\n");
    if (load) {
        if (o->mn_major) kf_buf_printf(b, "                const int x = %s + c * 4, k = %s + r;\n", g0, kexpr);
        else kf_buf_printf(b, "                const int x = %s + r, k = %s + c * 4;\n", g0, kexpr);
        char at[160];
        if (o->mn_major) snprintf(at, sizeof at, "%s + (%s)k * %lld + x", o->off, ix, (long long)o->ext);
        else snprintf(at, sizeof at, "%s + (%s)x * %lld + k", o->off, ix, (long long)K);
        if (o->mn_major)
            kf_buf_printf(b, "                const int ok = x + j < %lld && k < %lld;\n", (long long)o->ext, (long long)K);
        else
            kf_buf_printf(b, "                const int ok = x < %lld && k + j < %lld;\n", (long long)o->ext, (long long)K);
        kf_buf_printf(b, "                pg%s[q * 4 + j] = ok ? %s[%s + j] : 0.0f;\n", tag, o->buf, at);
    } else {
        char at_s[128];
        op_chunk_at(o, "r", "c", at_s, sizeof at_s);
        kf_buf_printf(b, "                kf_smf[%s + stg * %lld + %s + j] = pg%s[q * 4 + j];\n", wbase,
                      (long long)stage_words, at_s, tag);
    }
    kf_buf_puts(b, "            }\n            }\n        }\n");
}

/* The split form of the gathered operand's loads (gpu_prosplit.c): its M/N indices' parts,
 * fixed for a thread across the K loop, computed once into pm<tag>[][] (with the matrix's
 * part and the constants); per step, the K parts of the distinct K indices the thread
 * loads into pk[][], and each element the sum of one of each (kf_prs<x>). The walk is
 * emit_gather's (NT a multiple of the chunks a row, so a thread's chunk column is tid %
 * cpr in every q). fixed: the once-per-thread declarations; else the step at kexpr into
 * pg<tag>[]. */
static void emit_gather_split(kf_buf *b, const kf_gplan *gp, const op32 *o, const kf_gpu_prosplit *sp,
                              const char *tag, int fixed, const char *kexpr, const char *g0, int64_t K,
                              int64_t nthreads) {
    const int64_t cpr = (o->mn_major ? o->tile : o->bk) / 4, rows = op_rows(o);
    const int64_t total = rows * cpr, per = (total + nthreads - 1) / nthreads;
    const char *ix = gp->ix;
    const int x = sp->x, nt = sp->nt;
    /* the thread's distinct M/N indices: the 4 columns of its chunk (M/N-major), or the row
     * of each q (K-contiguous); its K indices per step: the other */
    const int64_t npm = o->mn_major ? 4 : per, npk = o->mn_major ? per : 4;
    if (fixed) {
        kf_buf_printf(b, "    const %s pmt%s = %s / %lld;\n", ix, tag, o->off, (long long)(sp->R * sp->C));
        kf_buf_printf(b, "    %s pm%s[%lld][%d];\n", ix, tag, (long long)npm, nt);
        kf_buf_printf(b, "    #pragma unroll\n    for (int q = 0; q < %lld; q++)\n", (long long)npm);
        if (o->mn_major)
            kf_buf_printf(b, "        kf_prm%d(%s + (tid %% %lld) * 4 + q, pmt%s, pm%s[q]);\n", x, g0, (long long)cpr,
                          tag, tag);
        else
            kf_buf_printf(b, "        kf_prm%d(%s + (tid + q * %lld) / %lld, pmt%s, pm%s[q]);\n", x, g0,
                          (long long)nthreads, (long long)cpr, tag, tag);
        return;
    }
    kf_buf_printf(b, "        %s pk[%lld][%d];\n", ix, (long long)npk, nt);
    kf_buf_printf(b, "        #pragma unroll\n        for (int q = 0; q < %lld; q++)\n", (long long)npk);
    if (o->mn_major)
        kf_buf_printf(b, "            kf_prk%d((%s) + (tid + q * %lld) / %lld, pmt%s, pk[q]);\n", x, kexpr,
                      (long long)nthreads, (long long)cpr, tag);
    else
        kf_buf_printf(b, "            kf_prk%d((%s) + (tid %% %lld) * 4 + q, pmt%s, pk[q]);\n", x, kexpr, (long long)cpr,
                      tag);
    emit_chunk_loop(b, per, nthreads, total, cpr);
    kf_buf_puts(b, "            #pragma unroll\n            for (int j = 0; j < 4; j++) {\n");
    if (o->mn_major) {
        kf_buf_printf(b, "                const int x = %s + c * 4, k = (%s) + r;\n", g0, kexpr);
        kf_buf_printf(b, "                const int ok = x + j < %lld && k < %lld;\n", (long long)o->ext, (long long)K);
        kf_buf_printf(b, "                pg%s[q * 4 + j] = ok ? kf_prs%d(pk[q], pm%s[j]%s) : 0.0f;\n", tag, x, tag,
                      sp->args);
    } else {
        kf_buf_printf(b, "                const int x = %s + r, k = (%s) + c * 4;\n", g0, kexpr);
        kf_buf_printf(b, "                const int ok = x < %lld && k + j < %lld;\n", (long long)o->ext, (long long)K);
        kf_buf_printf(b, "                pg%s[q * 4 + j] = ok ? kf_prs%d(pk[j], pm%s[q]%s) : 0.0f;\n", tag, x, tag,
                      sp->args);
    }
    kf_buf_puts(b, "            }\n            }\n        }\n");
}

/* elements of the gathered operand's tile a thread holds */
static int64_t gather_regs(const op32 *o, int64_t nthreads) {
    const int64_t total = op_rows(o) * ((o->mn_major ? o->tile : o->bk) / 4);
    return 4 * ((total + nthreads - 1) / nthreads);
}

/* The raw (f32 bit) fragments of 8-deep sub-step ks from the stage at words wa / wb into
 * ra[MI][4], rb[NI][2]. */
static void emit_frags(kf_buf *o, const op32 *oa, const op32 *ob, int64_t MI, int64_t NI, int64_t ks) {
    char at[160];
    kf_buf_printf(o, "            #pragma unroll\n            for (int mi = 0; mi < %lld; mi++) {\n", (long long)MI);
    if (!oa->mn_major) {
        /* A as [BM][BK]: matrices (rows +0 / +8) x (k words +0 / +4) = a0, a1, a2, a3 */
        kf_buf_printf(o, "                const int r = wm0 + mi * 16 + (mat & 1) * 8 + rr, c = %lld + (mat >> 1);\n",
                      (long long)(ks * 2));
        op_chunk_at(oa, "r", "c", at, sizeof at);
        kf_buf_printf(o, "                kf_ldsm4(ra[mi], sbase + (unsigned)(wa + %s) * 4u);\n", at);
    } else {
        /* A as [BK][BM + 8]: the (m, k) word at k * (BM + 8) + m; a0 (g, t), a1 (g + 8, t),
         * a2 (g, t + 4), a3 (g + 8, t + 4) */
        const int64_t S = op_stride(oa), k0 = ks * 8;
        kf_buf_printf(o, "                const int m = t * %lld + wm0 + mi * 16 + g;\n", (long long)S);
        kf_buf_printf(o, "                ra[mi][0] = __float_as_uint(kf_smf[wa + %lld + m]);\n", (long long)((k0)*S));
        kf_buf_printf(o, "                ra[mi][1] = __float_as_uint(kf_smf[wa + %lld + m + 8]);\n", (long long)((k0)*S));
        kf_buf_printf(o, "                ra[mi][2] = __float_as_uint(kf_smf[wa + %lld + m]);\n", (long long)((k0 + 4) * S));
        kf_buf_printf(o, "                ra[mi][3] = __float_as_uint(kf_smf[wa + %lld + m + 8]);\n", (long long)((k0 + 4) * S));
    }
    kf_buf_puts(o, "            }\n");
    if (!ob->mn_major) {
        /* B as [BN][BK] (stored transposed): matrices (n +0, k +0), (n +0, k +4), (n +8,
         * k +0), (n +8, k +4) = b0 b1 of two n-tiles */
        kf_buf_printf(o, "            #pragma unroll\n            for (int nj = 0; nj < %lld; nj++) {\n", (long long)(NI / 2));
        kf_buf_puts(o, "                unsigned t4[4];\n");
        kf_buf_printf(o, "                const int r = wn0 + nj * 16 + (mat >> 1) * 8 + rr, c = %lld + (mat & 1);\n",
                      (long long)(ks * 2));
        op_chunk_at(ob, "r", "c", at, sizeof at);
        kf_buf_printf(o, "                kf_ldsm4(t4, sbase + (unsigned)(wb + %s) * 4u);\n", at);
        kf_buf_puts(o, "                rb[2 * nj][0] = t4[0]; rb[2 * nj][1] = t4[1];\n");
        kf_buf_puts(o, "                rb[2 * nj + 1][0] = t4[2]; rb[2 * nj + 1][1] = t4[3];\n");
        kf_buf_puts(o, "            }\n");
    } else {
        /* B as [BK][BN + 8]: the (k, n) word at k * (BN + 8) + n; b0 (k t, n g), b1 (k t + 4) */
        const int64_t S = op_stride(ob), k0 = ks * 8;
        kf_buf_printf(o, "            #pragma unroll\n            for (int ni = 0; ni < %lld; ni++) {\n", (long long)NI);
        kf_buf_printf(o, "                const int n = t * %lld + wn0 + ni * 8 + g;\n", (long long)S);
        kf_buf_printf(o, "                rb[ni][0] = __float_as_uint(kf_smf[wb + %lld + n]);\n", (long long)(k0 * S));
        kf_buf_printf(o, "                rb[ni][1] = __float_as_uint(kf_smf[wb + %lld + n]);\n", (long long)((k0 + 4) * S));
        kf_buf_puts(o, "            }\n");
    }
}

/* Helpers of this template, once per translation unit (after kf_gpu_mma_helpers). */
static const char tf32_helpers[] =
    "#ifndef KF_TF32_HELPERS\n"
    "#define KF_TF32_HELPERS\n"
    "/* x = big + small, each rounded to tf32 (cvt.rna, sm_80+); x - big is exact in f32 */\n"
    "__device__ __forceinline__ void kf_tf32_split(unsigned x, unsigned *big, unsigned *small) {\n"
    "    unsigned b, s;\n"
    "    asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(b) : \"f\"(__uint_as_float(x)));\n"
    "    const float r = __uint_as_float(x) - __uint_as_float(b);\n"
    "    asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(s) : \"f\"(r));\n"
    "    *big = b; *small = s;\n"
    "}\n"
    "__device__ __forceinline__ void kf_mma_tf32(float *c, const unsigned *a, const unsigned *b) {\n"
    "    asm(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 \"\n"
    "        \"{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\"\n"
    "        : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "        : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
    "}\n"
    "#endif\n";

void kf_gpu_tf32_emit(kf_gplan *gp, const kf_stage *st, const kf_point *p) {
    const kf_synth *s = gp->s;
    const kf_matmul_desc *d = &st->mm;
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    kf_gdev dv;
    kf_gpu_dev(s, &dv);
    int64_t bm = kf_gpu_get(s, st, p, "bm", 128), bn = kf_gpu_get(s, st, p, "bn", 128);
    int64_t bk = kf_gpu_get(s, st, p, "bk", 32);
    int64_t wm = kf_gpu_get(s, st, p, "wm", 64), wn = kf_gpu_get(s, st, p, "wn", 32);
    int64_t ns = kf_gpu_get(s, st, p, "st", 3), gm = kf_gpu_get(s, st, p, "gm", 8);
    const int mb = (int)kf_gpu_get(s, st, p, "mb", 1);
    /* acc: where the products meet the f32 accumulators (both round to nearest there):
     * 1 per 8-deep tile (a zeroed 4-register t4 a tile), 0 per BK step (a zeroed fragment
     * of the warp tile, twice its accumulator registers) */
    const int per_tile = (int)kf_gpu_get(s, st, p, "acc", 0) != 0;
    const int64_t M = d->M, N = d->N, K = d->K;

    /* make the point valid: tiles no larger than the matrix needs, at most 8 warps, then
     * stages, depth and tiles cut until the ring fits the shared memory */
    kf_gpu_mma_fit_tiles(M, N, &bm, &bn, &wm, &wn);
    char abuf[16], bbuf[16];
    int A = d->a_val, B = d->b_val, C = n->out; /* a folded transpose view: its source */
    /* an operand a fused prologue computes is loaded element by element: each load
     * `b<x>[i]` becomes kf_pro<x>(i, ...) at the launch (gpu.c) */
    const int pro_a = kf_gpu_prologue_reads(s, st, A), pro_b = kf_gpu_prologue_reads(s, st, B);
    snprintf(abuf, sizeof abuf, "b%d", A);
    snprintf(bbuf, sizeof bbuf, "b%d", B);
    op32 oa = {abuf, "aoff", d->ta, M, bm, bk, (d->ta ? M : K) % 4 == 0 && !pro_a};
    op32 ob = {bbuf, "boff", !d->tb, N, bn, bk, (d->tb ? K : N) % 4 == 0 && !pro_b};
    int64_t smem = 0;
    for (;;) {
        oa.tile = bm, ob.tile = bn, oa.bk = ob.bk = bk;
        smem = ns * (op_words(&oa) + op_words(&ob)) * 4;
        if (smem <= dv.local_mem_optin) break;
        if (ns > 2) ns--;
        else if (bk > 16) bk /= 2;
        else if (bm >= bn && bm > 64) bm /= 2;
        else if (bn > 64) bn /= 2;
        else break; /* 64 x 64 x 16, 2 stages: 17 KiB, within every CUDA device's 48 KiB */
    }
    if (wm > bm) wm = bm; /* tiles cut for the shared memory: fewer warps, never more */
    if (wn > bn) wn = bn;
    const int64_t warps_n = bn / wn, nwarps = (bm / wm) * warps_n, NT = nwarps * 32;
    const int64_t MI = wm / 16, NI = wn / 8, NKS = bk / 8;
    const int64_t gx = (N + bn - 1) / bn, gy = (M + bm - 1) / bm;
    if (gm > gy) gm = gy;
    const int64_t KT = (K + bk - 1) / bk;
    const int64_t a_words = op_words(&oa), b_words = op_words(&ob);
    const char *ix = gp->ix;

    /* the gathered operand's addresses split into a part per M/N index (once a thread) and
     * one per K index (a step) where its layout factors so (gpu_prosplit.c); else the flat
     * helper kf_pro<x> */
    const op32 *og = pro_a ? &oa : pro_b ? &ob : NULL;
    kf_gpu_prosplit gs = {0};
    if (og) {
        kf_gpu_prologue_split(s, st, pro_a ? A : B, &gs);
        const int64_t gcpr = (og->mn_major ? og->tile : og->bk) / 4;
        if (NT % gcpr != 0) gs.on = 0;
    }
    kf_gplan_text(gp, kf_gpu_mma_helpers);
    kf_gplan_text(gp, tf32_helpers);
    kf_gk k;
    char name[32];
    snprintf(name, sizeof name, "kf_s%d", st->index);
    kf_gk_begin(&k, name);
    kf_gk_value(gp, &k, A, KF_GP_IN);
    if (B != A) kf_gk_value(gp, &k, B, KF_GP_IN);
    /* a row reduction fused into the store stage (gpu_redepi.c): C is never written */
    const int red = st->redepi != 0;
    if (red) kf_gpu_redepi_scratch(gp, &k, st, d->batch * M, gx);
    else kf_gk_value(gp, &k, C, KF_GP_OUT);
    const int64_t red_smem = kf_gpu_redepi_mma_smem(s, st, bm, warps_n);
    k.smem = smem > red_smem ? smem : red_smem;
    kf_buf *o = &k.body;
    kf_buf_printf(o, "    /* f32 matmul on tensor cores, 3xTF32 (big/small split, three m16n8k8 mma a product): "
                     "%lld x [%lld x %lld] x [%lld x %lld]%s%s; block tile %lld x %lld x %lld of %lld warps (warp "
                     "tile %lld x %lld), %lld stages in %lld bytes of dynamic shared memory, row groups of %lld%s%s%s */\n",
                  (long long)d->batch, (long long)M, (long long)K, (long long)K, (long long)N, d->ta ? " ta" : "",
                  d->tb ? " tb" : "", (long long)bm, (long long)bn, (long long)bk, (long long)nwarps, (long long)wm,
                  (long long)wn, (long long)ns, (long long)smem, (long long)gm, oa.vec ? "" : ", A copied element-wise",
                  ob.vec ? "" : ", B copied element-wise",
                  gs.on ? ", its addresses split into M/N and K parts" : "");
    kf_buf_puts(o, "    extern $shared __align__(128) float kf_smf[];\n");
    kf_buf_puts(o, "    const int tid = $lid(0), lane = tid & 31, warp = tid >> 5;\n");
    kf_gpu_mma_tile_order(o, gx, gy, gm, bm, bn);
    kf_gpu_matmul_offsets(o, gp, d);
    kf_buf_printf(o, "    const int wm0 = (warp / %lld) * %lld, wn0 = (warp %% %lld) * %lld;\n", (long long)warps_n,
                  (long long)wm, (long long)warps_n, (long long)wn);
    kf_buf_puts(o, "    const unsigned sbase = kf_smem_u32(kf_smf);\n");
    kf_buf_printf(o, "    float acc[%lld][%lld][4];\n", (long long)MI, (long long)NI);
    kf_buf_printf(o, "    #pragma unroll\n    for (int i = 0; i < %lld; i++)\n        #pragma unroll\n"
                     "        for (int j = 0; j < %lld; j++) { acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f; }\n",
                  (long long)MI, (long long)NI);

    /* a gathered operand (a fused prologue's): in the main loop its step kt0 + ST - 1 is
     * read into registers during step kt0 - 1's products and stored to the stage after step
     * kt0's barrier, so that its loads overlap the MMAs; the other operand keeps cp.async */
    const char *gtag = pro_a ? "a" : "b", *gg0 = pro_a ? "row0" : "col0";
    char gwb[32];
    snprintf(gwb, sizeof gwb, "%lld", (long long)(pro_a ? 0 : ns * a_words));
    const int64_t gwords = pro_a ? a_words : b_words;

    /* the copy of K step kt into stage stg */
    char bwb[32];
    snprintf(bwb, sizeof bwb, "%lld", (long long)(ns * a_words));
    kf_buf copy = {0};
    kf_buf_printf(&copy, "        const int k0 = kt * %lld;\n", (long long)bk);
    if (gs.on) {
        /* the ring's first steps through the registers too: one form of the gathered loads */
        kf_buf_printf(o, "    float pg%s[%lld];\n", gtag, (long long)gather_regs(og, NT));
        emit_gather_split(o, gp, og, &gs, gtag, 1, NULL, gg0, K, NT);
        if (!pro_a) emit_copy(&copy, gp, &oa, "0", a_words, "row0", K, NT);
        if (!pro_b) emit_copy(&copy, gp, &ob, bwb, b_words, "col0", K, NT);
        emit_gather_split(&copy, gp, og, &gs, gtag, 0, "k0", gg0, K, NT);
        emit_gather(&copy, gp, og, gtag, 0, NULL, gwb, gwords, gg0, K, NT);
    } else {
        emit_copy(&copy, gp, &oa, "0", a_words, "row0", K, NT);
        emit_copy(&copy, gp, &ob, bwb, b_words, "col0", K, NT);
    }
    kf_buf_printf(o, "    #pragma unroll\n    for (int s0 = 0; s0 < %lld; s0++) {\n", (long long)(ns - 1));
    kf_buf_printf(o, "      if (s0 < %lld) { const int kt = s0, stg = s0;\n", (long long)KT);
    kf_buf_puts(o, copy.data);
    kf_buf_puts(o, "      }\n      kf_cp_commit();\n    }\n");
    if (og) {
        kf_buf_free(&copy);
        kf_buf_printf(&copy, "        const int k0 = kt * %lld;\n", (long long)bk);
        if (!pro_a) emit_copy(&copy, gp, &oa, "0", a_words, "row0", K, NT);
        if (!pro_b) emit_copy(&copy, gp, &ob, bwb, b_words, "col0", K, NT);
        emit_gather(&copy, gp, og, gtag, 0, NULL, gwb, gwords, gg0, K, NT);
        if (!gs.on) kf_buf_printf(o, "    float pg%s[%lld];\n", gtag, (long long)gather_regs(og, NT));
        char k1[32];
        snprintf(k1, sizeof k1, "%lld", (long long)((ns - 1) * bk));
        kf_buf_printf(o, "    if (%lld < %lld) {\n", (long long)(ns - 1), (long long)KT);
        if (gs.on) emit_gather_split(o, gp, og, &gs, gtag, 0, k1, gg0, K, NT);
        else emit_gather(o, gp, og, gtag, 1, k1, gwb, gwords, gg0, K, NT);
        kf_buf_puts(o, "    }\n");
    }

    /* main loop: wait for step kt0's tiles, refill the stage step kt0 - 1 used, then the
     * 8-deep sub-steps: raw fragments, their split, the three products */
    kf_buf_puts(o, "    const int mat = lane >> 3, rr = lane & 7, g = lane >> 2, t = lane & 3;\n");
    kf_buf_puts(o, "    (void)mat; (void)rr; (void)g; (void)t;\n");
    kf_buf_printf(o, "    for (int kt0 = 0; kt0 < %lld; kt0++) {\n", (long long)KT);
    kf_buf_printf(o, "        asm volatile(\"cp.async.wait_group %lld;\");\n", (long long)(ns - 2));
    kf_buf_puts(o, "        $barrier;\n");
    kf_buf_printf(o, "        if (kt0 + %lld < %lld) { const int kt = kt0 + %lld, stg = kt %% %lld;\n", (long long)(ns - 1),
                  (long long)KT, (long long)(ns - 1), (long long)ns);
    kf_buf_puts(o, copy.data);
    kf_buf_puts(o, "        }\n        kf_cp_commit();\n");
    if (og) {
        char kn[64];
        snprintf(kn, sizeof kn, "(kt0 + %lld) * %lld", (long long)ns, (long long)bk);
        kf_buf_printf(o, "        if (kt0 + %lld < %lld) {\n", (long long)ns, (long long)KT);
        if (gs.on) emit_gather_split(o, gp, og, &gs, gtag, 0, kn, gg0, K, NT);
        else emit_gather(o, gp, og, gtag, 1, kn, gwb, gwords, gg0, K, NT);
        kf_buf_puts(o, "        }\n");
    }
    kf_buf_free(&copy);
    kf_buf_printf(o, "        const int wa = (kt0 %% %lld) * %lld, wb = %lld + (kt0 %% %lld) * %lld;\n", (long long)ns,
                  (long long)a_words, (long long)(ns * a_words), (long long)ns, (long long)b_words);
    kf_buf_puts(o, "        (void)t;\n");
    /* the step's products go to a zeroed fragment, added to the accumulators once a step
     * (below): the tensor cores add an mma's products into C rounding toward zero, so a
     * chain through the accumulators over all of K biases them by up to an ulp an mma */
    if (!per_tile) {
        kf_buf_printf(o, "        float tq[%lld][%lld][4];\n", (long long)MI, (long long)NI);
        kf_buf_printf(o, "        #pragma unroll\n        for (int i = 0; i < %lld; i++)\n            #pragma unroll\n"
                         "            for (int j = 0; j < %lld; j++) { tq[i][j][0] = tq[i][j][1] = tq[i][j][2] = tq[i][j][3] = 0.0f; }\n",
                      (long long)MI, (long long)NI);
    }
    for (int64_t ks = 0; ks < NKS; ks++) {
        kf_buf_puts(o, "        {\n");
        kf_buf_printf(o, "            unsigned ra[%lld][4], rb[%lld][2];\n", (long long)MI, (long long)NI);
        emit_frags(o, &oa, &ob, MI, NI, ks);
        kf_buf_printf(o, "            unsigned ah[%lld][4], al[%lld][4], bh[%lld][2], bl[%lld][2];\n", (long long)MI,
                      (long long)MI, (long long)NI, (long long)NI);
        kf_buf_printf(o, "            #pragma unroll\n            for (int mi = 0; mi < %lld; mi++)\n"
                         "                #pragma unroll\n                for (int q = 0; q < 4; q++) kf_tf32_split(ra[mi][q], &ah[mi][q], &al[mi][q]);\n",
                      (long long)MI);
        kf_buf_printf(o, "            #pragma unroll\n            for (int ni = 0; ni < %lld; ni++)\n"
                         "                #pragma unroll\n                for (int q = 0; q < 2; q++) kf_tf32_split(rb[ni][q], &bh[ni][q], &bl[ni][q]);\n",
                      (long long)NI);
        static const char *const prods[3][2] = {{"al", "bh"}, {"ah", "bl"}, {"ah", "bh"}};
        if (per_tile) /* each tile's three products into a zeroed t4, added to its accumulators */
            kf_buf_printf(o, "            #pragma unroll\n            for (int mi = 0; mi < %lld; mi++)\n"
                             "                #pragma unroll\n                for (int ni = 0; ni < %lld; ni++) {\n"
                             "                    float t4[4] = {0.0f, 0.0f, 0.0f, 0.0f};\n"
                             "                    kf_mma_tf32(t4, al[mi], bh[ni]);\n"
                             "                    kf_mma_tf32(t4, ah[mi], bl[ni]);\n"
                             "                    kf_mma_tf32(t4, ah[mi], bh[ni]);\n"
                             "                    #pragma unroll\n"
                             "                    for (int q = 0; q < 4; q++) acc[mi][ni][q] += t4[q];\n"
                             "                }\n",
                          (long long)MI, (long long)NI);
        else
            for (int pr = 0; pr < 3; pr++)
                kf_buf_printf(o, "            #pragma unroll\n            for (int mi = 0; mi < %lld; mi++)\n"
                                 "                #pragma unroll\n                for (int ni = 0; ni < %lld; ni++) "
                                 "kf_mma_tf32(tq[mi][ni], %s[mi], %s[ni]);\n",
                              (long long)MI, (long long)NI, prods[pr][0], prods[pr][1]);
        kf_buf_puts(o, "        }\n");
    }
    if (!per_tile)
        kf_buf_printf(o, "        #pragma unroll\n        for (int i = 0; i < %lld; i++)\n            #pragma unroll\n"
                         "            for (int j = 0; j < %lld; j++)\n                #pragma unroll\n"
                         "                for (int q = 0; q < 4; q++) acc[i][j][q] += tq[i][j][q];\n",
                      (long long)MI, (long long)NI);
    kf_buf_puts(o, "    }\n    asm volatile(\"cp.async.wait_group 0;\");\n");

    if (red) {
        const kf_gpu_redmma rt = {M, N, bm, bn, MI, NI, warps_n, NT, gx};
        kf_gpu_redepi_mma_store(gp, &k, st, &rt);
    } else {
        /* epilogue: each lane's two adjacent columns of rows g and g + 8 of each 16 x 8 tile */
        const int cm = M % bm != 0, cn = N % bn != 0;
        const int epi = kf_gpu_stage_has_epilogue(s, st); /* stores handed to kf_epi<C> */
        kf_buf_printf(o, "    #pragma unroll\n    for (int mi = 0; mi < %lld; mi++)\n      #pragma unroll\n"
                         "      for (int ni = 0; ni < %lld; ni++)\n        #pragma unroll\n"
                         "        for (int h = 0; h < 2; h++) {\n",
                      (long long)MI, (long long)NI);
        kf_buf_puts(o, "          const int r = row0 + wm0 + mi * 16 + g + h * 8, c = col0 + wn0 + ni * 8 + t * 2;\n");
        kf_buf_printf(o, "          const %s at = coff + (%s)r * %lld + c;\n", ix, ix, (long long)N);
        if (epi) {
            /* one scalar store statement (gpu_epi.c substitutes it): the pair's columns c, c + 1;
             * where N % BN == 0 every column of the tile is in the matrix */
            char cond[96] = "";
            if (cm && cn) snprintf(cond, sizeof cond, "if (r < %lld && c + x < %lld) ", (long long)M, (long long)N);
            else if (cm) snprintf(cond, sizeof cond, "if (r < %lld) ", (long long)M);
            else if (cn) snprintf(cond, sizeof cond, "if (c + x < %lld) ", (long long)N);
            kf_buf_puts(o, "          #pragma unroll\n          for (int x = 0; x < 2; x++) {\n");
            kf_buf_printf(o, "            %sb%d[at + x] = acc[mi][ni][2 * h + x];\n", cond, C);
            kf_buf_puts(o, "          }\n");
        } else if (N % 2 == 0) {
            /* c and N even: the pair is wholly in or out of the row, and 8-byte aligned */
            char cond[96] = "";
            if (cm && cn) snprintf(cond, sizeof cond, "if (r < %lld && c < %lld) ", (long long)M, (long long)N);
            else if (cm) snprintf(cond, sizeof cond, "if (r < %lld) ", (long long)M);
            else if (cn) snprintf(cond, sizeof cond, "if (c < %lld) ", (long long)N);
            kf_buf_printf(o, "          %s*(float2 *)(b%d + at) = make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);\n",
                          cond, C);
        } else {
            char rowc[48] = "";
            if (cm) snprintf(rowc, sizeof rowc, "r < %lld && ", (long long)M);
            kf_buf_printf(o, "          if (%sc < %lld) b%d[at] = acc[mi][ni][2 * h];\n", rowc, (long long)N, C);
            kf_buf_printf(o, "          if (%sc + 1 < %lld) b%d[at + 1] = acc[mi][ni][2 * h + 1];\n", rowc, (long long)N, C);
        }
        kf_buf_puts(o, "        }\n");
    }

    if (mb > 1) k.k.min_groups = mb; /* __launch_bounds__(NT, mb) */
    if (d->batch > 1) {
        int64_t G[3] = {gx * NT, gy, d->batch}, L[3] = {NT, 1, 1};
        kf_gk_launch(gp, &k, 3, G, L);
    } else {
        int64_t G[2] = {gx * NT, gy}, L[2] = {NT, 1};
        kf_gk_launch(gp, &k, 2, G, L);
    }
    if (red) {
        const kf_gpu_redtile ct = {M, N, d->batch * M, bm, bn, 0, 0, 0, 0, gx, 0};
        kf_gpu_redepi_combine(gp, st, &ct);
    }
}
