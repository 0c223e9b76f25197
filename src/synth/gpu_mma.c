/*
 * CUDA tensor-core matmul template for f16 and bf16 operands (sm_80 and newer):
 * C[b] = op(A[a(b)]) op(B[b(b)]) with the transposes and broadcast batch dims of
 * kf_matmul_desc, f32 accumulation, the result rounded to nearest-even into the operands'
 * dtype (what torch.matmul returns for two bf16 or two f16 tensors).
 *
 * Each block computes a BM x BN tile of C with (BM/WM) x (BN/WN) warps, each warp a WM x WN
 * sub-tile as (WM/16) x (WN/8) tiles of `mma.sync.m16n8k16` (f32 accumulators in
 * registers). K is walked BK deep. The operands' BK-deep tiles go through a ring of ST
 * shared-memory stages filled by `cp.async` 16-byte copies (zero-filled past the matrix
 * edges), so ST-1 tiles are in flight while one is multiplied; one barrier per step. Within
 * a step, the fragments of the next 16-deep sub-step are loaded before the current
 * sub-step's mmas. Fragments come out of shared memory with `ldmatrix` (`.trans` where the
 * operand is stored across the fragment's order: A stored [K, M], B stored [K, N]).
 *
 * Shared-memory layout: each tile keeps its operand's memory order (rows of its contiguous
 * dim, 16-byte chunks of 8 elements) and swizzles the chunks with an XOR of the row, so
 * that the 8 row addresses of one ldmatrix phase fall in 8 different 16-byte bank groups
 * (rows of 4 chunks: chunk ^ ((row >> 1) & 3); rows of 8 or more: chunk ^ (row & 7)); no
 * padding. The whole ring lives in dynamic shared memory (the launch's smem=), so it may
 * pass the 48 KiB of static arrays up to the device's opt-in limit.
 *
 * An operand whose contiguous dim is not a multiple of 8 cannot be copied in aligned
 * 16-byte pieces: its tiles are then filled element by element with ordinary loads (the
 * same layout, slower). After the K loop the accumulators are rounded into a padded BM x BN
 * tile in the same shared memory and written out in rows of 16-byte pieces (element by
 * element when N is not a multiple of 8). Blocks are visited in groups of GM tile rows
 * (column-major inside a group) so that the blocks resident at one time share their A and
 * B panels in L2.
 *
 * Parameters: bm, bn (block tile: 64, 128, 256), bk (32, 64), wm, wn (warp tile: 32, 64),
 * st (stages: 2-4), gm (row group: 1 = plain order, 8). A point is made valid at render
 * time: tiles shrink to the matrix; stages, depth and tiles shrink until the shared memory
 * holds the ring and the output tile; warp tiles grow, then block tiles shrink, until the
 * block has at most 8 warps (more would cap the registers at 128 a thread: on the H200 a
 * 256 x 256 block of 16 warps spilled and ran 4x slower).
 */
#include "gpu_tpl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The 16-bit dtype of a matmul stage's operands, or KF_F32 when it has none. */
static kf_dtype stage_dtype(const kf_synth *s, const kf_stage *st) {
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    kf_dtype t = s->g->values[n->in[0]].dtype;
    return t == KF_F16 || t == KF_BF16 ? t : KF_F32;
}

int kf_gpu_mma_stage(const kf_synth *s, const kf_stage *st) {
    return st->kind == KF_STAGE_MATMUL && stage_dtype(s, st) != KF_F32;
}

int kf_gpu_mma_arch_ok(const char *platform, const kf_device_info *dev) {
    int sm = 0;
    const kf_lang *L = kf_lang_by_name(platform);
    if (!L || !kf_lang_has_mma(L)) return 0;
    return sscanf(dev->arch, "sm_%d", &sm) == 1 && sm >= 80;
}

void kf_gpu_mma_params(kf_synth *s, kf_stage *st) {
    const kf_matmul_desc *d = &st->mm;
    static const long tiles[] = {64, 128, 256};
    static const long depths[] = {32, 64};
    static const long warps[] = {32, 64};
    static const long stages[] = {2, 3, 4};
    static const long groups[] = {1, 8};
    /* large products: 64 x 256 x 32 tiles of four 64 x 64 warps, four stages (80 KiB of
     * dynamic shared memory; the fastest point of every H200 search at 4096^3 bf16: 323-368
     * us against 390 us for 128 x 256), when the matrix still gives every SM a block;
     * 128 x 128 when N is smaller, smaller tiles for small or few matrices */
    kf_gdev dv;
    kf_gpu_dev(s, &dv);
    int64_t tiles_big = d->batch * ((d->M + 63) / 64) * ((d->N + 255) / 256);
    int64_t tiles128 = d->batch * ((d->M + 127) / 128) * ((d->N + 127) / 128);
    int big = tiles_big >= dv.cu && d->M >= 64 && d->N >= 256;
    int mid = !big && tiles128 >= dv.cu && d->M >= 128 && d->N >= 128;
    kf_gpu_param(s, st, "bm", KF_ROLE_TILE_M, tiles, 3, mid ? 1 : 0);
    kf_gpu_param(s, st, "bn", KF_ROLE_TILE_N, tiles, 3, big ? 2 : mid ? 1 : 0);
    kf_gpu_param(s, st, "bk", KF_ROLE_TILE_K, depths, 2, 0);
    kf_gpu_param(s, st, "wm", KF_ROLE_NONE, warps, 2, 1);
    kf_gpu_param(s, st, "wn", KF_ROLE_NONE, warps, 2, big || mid ? 1 : 0);
    kf_gpu_param(s, st, "st", KF_ROLE_NONE, stages, 3, big && dv.local_mem_optin >= 4 * 20480 ? 2 : 1);
    kf_gpu_param(s, st, "gm", KF_ROLE_NONE, groups, 2, 1);
}

void kf_gpu_mma_fit_tiles(int64_t M, int64_t N, int64_t *bm, int64_t *bn, int64_t *wm, int64_t *wn) {
    int64_t mcap = kf_gpu_pow2_ceil(M) < 64 ? 64 : kf_gpu_pow2_ceil(M);
    int64_t ncap = kf_gpu_pow2_ceil(N) < 64 ? 64 : kf_gpu_pow2_ceil(N);
    if (*bm > mcap) *bm = mcap;
    if (*bn > ncap) *bn = ncap;
    if (*wm > *bm) *wm = *bm;
    if (*wn > *bn) *wn = *bn;
    while ((*bm / *wm) * (*bn / *wn) > 8) {
        if (*wn < 64 && *wn < *bn) *wn *= 2;
        else if (*wm < 64 && *wm < *bm) *wm *= 2;
        else if (*bn >= *bm) *bn /= 2;
        else *bm /= 2;
    }
}

void kf_gpu_mma_chunk_ok(kf_buf *b, int64_t ext, int64_t tile, int64_t K, int64_t bk) {
    const int cx = ext % tile != 0, ck = K % bk != 0;
    if (cx && ck) kf_buf_printf(b, "            const int ok = x < %lld && k < %lld;\n", (long long)ext, (long long)K);
    else if (cx) kf_buf_printf(b, "            const int ok = x < %lld;\n", (long long)ext);
    else if (ck) kf_buf_printf(b, "            const int ok = k < %lld;\n", (long long)K);
    else kf_buf_puts(b, "            const int ok = 1; (void)x; (void)k;\n");
}

/* One operand's view for the tile copies and the fragment loads. */
typedef struct mma_opnd {
    const char *buf, *off; /* buffer b<v>, batch offset variable */
    int mn_major;          /* contiguous dim is M (A) or N (B) rather than K */
    int64_t ext;           /* extent of its M (A) or N (B) dim */
    int64_t tile;          /* BM or BN */
    int64_t bk;            /* depth of a K step */
    int vec;               /* contiguous dim % 8 == 0: aligned 16-byte copies */
} mma_opnd;

/* elements per row of an operand's tile in shared memory (its contiguous dim), and the
 * XOR swizzle of a row's 16-byte chunks */
static int64_t op_rowlen(const mma_opnd *o) { return o->mn_major ? o->tile : o->bk; }
void kf_gpu_mma_swizzle(int64_t chunks, const char *row, char *out, size_t cap) {
    if (chunks >= 8) snprintf(out, cap, "((%s) & 7)", row);
    else snprintf(out, cap, "(((%s) >> 1) & 3)", row);
}
static void op_swz(const mma_opnd *o, const char *row, char *out, size_t cap) {
    kf_gpu_mma_swizzle(op_rowlen(o) / 8, row, out, cap);
}

/* Copy the bk-deep tile at K offset k0 of operand o into stage `stg` (variables of the
 * enclosing block), as cp.async 16-byte pieces or element by element. */
static void emit_copy(kf_buf *b, const kf_gplan *gp, const mma_opnd *o, const char *sbase, int64_t stage_bytes,
                      const char *g0, int64_t K, int64_t nthreads) {
    const int64_t rowlen = op_rowlen(o), cpr = rowlen / 8, rows = o->mn_major ? o->bk : o->tile;
    const int64_t total = rows * cpr, per = (total + nthreads - 1) / nthreads;
    const char *ix = gp->ix;
    char swz[48];
    op_swz(o, "r", swz, sizeof swz);
    kf_buf_printf(b, "        #pragma unroll\n        for (int q = 0; q < %lld; q++) {\n", (long long)per);
    kf_buf_printf(b, "            const int e = tid + q * %lld;\n", (long long)nthreads);
    if (total % nthreads) kf_buf_printf(b, "            if (e < %lld) {\n", (long long)total);
    else kf_buf_puts(b, "            {\n");
    kf_buf_printf(b, "            const int r = e / %lld, c = e %% %lld;\n", (long long)cpr, (long long)cpr);
    /* (x, k): the element's M-or-N index and K index; the chunk runs along the contiguous dim */
    if (o->mn_major) kf_buf_printf(b, "            const int x = %s + c * 8, k = k0 + r;\n", g0);
    else kf_buf_printf(b, "            const int x = %s + r, k = k0 + c * 8;\n", g0);
    kf_buf_printf(b, "            const unsigned dst = %s + (unsigned)stg * %lldu + (unsigned)(r * %lld + ((c ^ %s) << 3)) * 2u;\n",
                  sbase, (long long)stage_bytes, (long long)rowlen, swz);
    char at[160];
    if (o->mn_major) snprintf(at, sizeof at, "%s + (%s)k * %lld + x", o->off, ix, (long long)o->ext);
    else snprintf(at, sizeof at, "%s + (%s)x * %lld + k", o->off, ix, (long long)K);
    if (o->vec) {
        /* checks only for the dims the tiles do not divide */
        kf_gpu_mma_chunk_ok(b, o->ext, o->tile, K, o->bk);
        kf_buf_printf(b, "            kf_cp16(dst, %s + (ok ? %s : 0), ok);\n", o->buf, at);
    } else {
        /* element by element: the chunk's 8 elements along the contiguous dim */
        kf_buf_puts(b, "            unsigned short v[8];\n            #pragma unroll\n");
        kf_buf_puts(b, "            for (int j = 0; j < 8; j++) {\n");
        if (o->mn_major)
            kf_buf_printf(b, "                const int ok = x + j < %lld && k < %lld;\n", (long long)o->ext, (long long)K);
        else
            kf_buf_printf(b, "                const int ok = x < %lld && k + j < %lld;\n", (long long)o->ext, (long long)K);
        kf_buf_printf(b, "                v[j] = ok ? %s[%s + j] : (unsigned short)0;\n", o->buf, at);
        kf_buf_puts(b, "            }\n");
        kf_buf_puts(b, "            kf_st_shared16(dst, v);\n");
    }
    kf_buf_puts(b, "            }\n        }\n");
}

/* Fragments of K sub-step `ks` (an expression) from stage base sa/sb into af[buf] and
 * bf[buf]. */
static void emit_frags(kf_buf *o, const mma_opnd *oa, const mma_opnd *ob, int64_t MI, int64_t NI, const char *ks,
                       int buf) {
    char swz[48];
    kf_buf_printf(o, "            #pragma unroll\n            for (int mi = 0; mi < %lld; mi++) {\n", (long long)MI);
    op_swz(oa, "r", swz, sizeof swz);
    if (!oa->mn_major) {
        /* A as [BM][BK]: matrices (rows +0/+8) x (k chunk +0/+1) */
        kf_buf_printf(o, "                const int r = wm0 + mi * 16 + (mat & 1) * 8 + rr, c = (%s) * 2 + (mat >> 1);\n", ks);
        kf_buf_printf(o, "                kf_ldsm4(af[%d][mi], sa + (unsigned)(r * %lld + ((c ^ %s) << 3)) * 2u);\n", buf,
                      (long long)oa->bk, swz);
    } else {
        /* A as [BK][BM]: rows are k, transposed on the way out */
        kf_buf_printf(o, "                const int r = (%s) * 16 + (mat >> 1) * 8 + rr, c = (wm0 + mi * 16 + (mat & 1) * 8) >> 3;\n", ks);
        kf_buf_printf(o, "                kf_ldsm4t(af[%d][mi], sa + (unsigned)(r * %lld + ((c ^ %s) << 3)) * 2u);\n", buf,
                      (long long)oa->tile, swz);
    }
    kf_buf_puts(o, "            }\n");
    kf_buf_printf(o, "            #pragma unroll\n            for (int nj = 0; nj < %lld; nj++) {\n", (long long)(NI / 2));
    kf_buf_puts(o, "                unsigned t4[4];\n");
    op_swz(ob, "r", swz, sizeof swz);
    if (ob->mn_major) {
        /* B as [BK][BN]: rows are k, transposed on the way out */
        kf_buf_printf(o, "                const int r = (%s) * 16 + (mat & 1) * 8 + rr, c = (wn0 + nj * 16 + (mat >> 1) * 8) >> 3;\n", ks);
        kf_buf_printf(o, "                kf_ldsm4t(t4, sb + (unsigned)(r * %lld + ((c ^ %s) << 3)) * 2u);\n",
                      (long long)ob->tile, swz);
    } else {
        /* B as [BN][BK] (stored transposed): rows are n */
        kf_buf_printf(o, "                const int r = wn0 + nj * 16 + (mat >> 1) * 8 + rr, c = (%s) * 2 + (mat & 1);\n", ks);
        kf_buf_printf(o, "                kf_ldsm4(t4, sb + (unsigned)(r * %lld + ((c ^ %s) << 3)) * 2u);\n",
                      (long long)ob->bk, swz);
    }
    kf_buf_printf(o, "                bf[%d][2 * nj][0] = t4[0]; bf[%d][2 * nj][1] = t4[1];\n", buf, buf);
    kf_buf_printf(o, "                bf[%d][2 * nj + 1][0] = t4[2]; bf[%d][2 * nj + 1][1] = t4[3];\n", buf, buf);
    kf_buf_puts(o, "            }\n");
}

/* Helpers, defined once per translation unit (a candidate may hold several matmuls). */
const char kf_gpu_mma_helpers[] =
    "#ifndef KF_MMA_HELPERS\n"
    "#define KF_MMA_HELPERS\n"
    "/* tensor-core helpers (PTX, sm_80+): shared-memory addresses, cp.async, ldmatrix, mma */\n"
    "__device__ __forceinline__ unsigned kf_smem_u32(const void *p) {\n"
    "    unsigned a;\n"
    "    asm(\"{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\" : \"=r\"(a) : \"l\"(p));\n"
    "    return a;\n"
    "}\n"
    "/* 16 bytes global -> shared, asynchronously; zero-filled when !ok (nothing is read) */\n"
    "__device__ __forceinline__ void kf_cp16(unsigned dst, const void *src, int ok) {\n"
    "    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\" :: \"r\"(dst), \"l\"(src), \"r\"(ok ? 16 : 0));\n"
    "}\n"
    "__device__ __forceinline__ void kf_cp_commit(void) { asm volatile(\"cp.async.commit_group;\"); }\n"
    "__device__ __forceinline__ void kf_st_shared16(unsigned dst, const unsigned short *v) {\n"
    "    const unsigned w0 = v[0] | ((unsigned)v[1] << 16), w1 = v[2] | ((unsigned)v[3] << 16);\n"
    "    const unsigned w2 = v[4] | ((unsigned)v[5] << 16), w3 = v[6] | ((unsigned)v[7] << 16);\n"
    "    asm volatile(\"st.shared.v4.u32 [%0], {%1, %2, %3, %4};\" :: \"r\"(dst), \"r\"(w0), \"r\"(w1), \"r\"(w2), \"r\"(w3));\n"
    "}\n"
    "__device__ __forceinline__ void kf_ldsm4(unsigned *r, unsigned a) {\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\"\n"
    "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(a));\n"
    "}\n"
    "__device__ __forceinline__ void kf_ldsm4t(unsigned *r, unsigned a) {\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\"\n"
    "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(a));\n"
    "}\n"
    "#define KF_MMA_DEF(NAME, T)                                                              \\\n"
    "    __device__ __forceinline__ void NAME(float *c, const unsigned *a, const unsigned *b) { \\\n"
    "        asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.\" T \".\" T \".f32 \"             \\\n"
    "                     \"{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\"      \\\n"
    "                     : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])                    \\\n"
    "                     : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1])); \\\n"
    "    }\n"
    "KF_MMA_DEF(kf_mma_bf16, \"bf16\")\n"
    "KF_MMA_DEF(kf_mma_f16, \"f16\")\n"
    "/* f32 -> 16-bit, round to nearest even; pairs packed low element first */\n"
    "__device__ __forceinline__ unsigned kf_pack_bf16(float lo, float hi) {\n"
    "    unsigned d; asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(d) : \"f\"(hi), \"f\"(lo)); return d;\n"
    "}\n"
    "__device__ __forceinline__ unsigned kf_pack_f16(float lo, float hi) {\n"
    "    unsigned d; asm(\"cvt.rn.f16x2.f32 %0, %1, %2;\" : \"=r\"(d) : \"f\"(hi), \"f\"(lo)); return d;\n"
    "}\n"
    "#endif\n";

void kf_gpu_mma_tile_order(kf_buf *o, int64_t gx, int64_t gy, int64_t gm, int64_t bm, int64_t bn) {
    /* tile coordinates: groups of gm tile rows, walked down each column of the group */
    kf_buf_printf(o, "    int tm_, tn_;\n    { const int pid = $grp(1) * %lld + $grp(0), width = %lld;\n",
                  (long long)gx, (long long)(gm * gx));
    kf_buf_printf(o, "      const int first = (pid / width) * %lld, rest = %lld - first;\n", (long long)gm, (long long)gy);
    kf_buf_printf(o, "      const int gsz = rest < %lld ? rest : %lld;\n", (long long)gm, (long long)gm);
    kf_buf_puts(o, "      tm_ = first + (pid % width) % gsz; tn_ = (pid % width) / gsz; }\n");
    kf_buf_printf(o, "    const int row0 = tm_ * %lld, col0 = tn_ * %lld;\n", (long long)bm, (long long)bn);
}

void kf_gpu_mma_emit(kf_gplan *gp, const kf_stage *st, const kf_point *p) {
    const kf_synth *s = gp->s;
    const kf_matmul_desc *d = &st->mm;
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    const char *T = stage_dtype(s, st) == KF_BF16 ? "bf16" : "f16";
    kf_gdev dv;
    kf_gpu_dev(s, &dv);
    int64_t bm = kf_gpu_get(s, st, p, "bm", 128), bn = kf_gpu_get(s, st, p, "bn", 128);
    int64_t bk = kf_gpu_get(s, st, p, "bk", 32);
    int64_t wm = kf_gpu_get(s, st, p, "wm", 64), wn = kf_gpu_get(s, st, p, "wn", 64);
    int64_t ns = kf_gpu_get(s, st, p, "st", 3), gm = kf_gpu_get(s, st, p, "gm", 8);
    const int64_t M = d->M, N = d->N, K = d->K;

    /* make the point valid for this matrix and device: tiles no larger than the matrix
     * needs, at most 8 warps a block (see the top), then stages, depth and tiles cut until
     * the shared memory holds both the stage ring and the output tile of the epilogue */
    kf_gpu_mma_fit_tiles(M, N, &bm, &bn, &wm, &wn);
    int64_t stage_bytes = 0, epi_bytes = 0, smem = 0;
    for (;;) {
        stage_bytes = (bm + bn) * bk * 2;
        epi_bytes = bm * (bn + 8) * 2;
        smem = ns * stage_bytes > epi_bytes ? ns * stage_bytes : epi_bytes;
        if (smem <= dv.local_mem_optin) break;
        if (ns > 2) ns--;
        else if (bk > 32) bk /= 2;
        else if (bm >= bn && bm > 64) bm /= 2;
        else if (bn > 64) bn /= 2;
        else break; /* 64 x 64: 17 KiB, within every CUDA device's 48 KiB */
    }
    if (wm > bm) wm = bm; /* tiles cut for the shared memory: fewer warps, never more */
    if (wn > bn) wn = bn;
    const int64_t warps_n = bn / wn, nwarps = (bm / wm) * warps_n, NT = nwarps * 32;
    const int64_t MI = wm / 16, NI = wn / 8, NKS = bk / 16;
    const int64_t gx = (N + bn - 1) / bn, gy = (M + bm - 1) / bm;
    if (gm > gy) gm = gy;
    const int64_t KT = (K + bk - 1) / bk;
    const char *ix = gp->ix;

    int A = d->a_val, B = d->b_val, C = n->out; /* a folded transpose view: its source */
    char abuf[16], bbuf[16];
    snprintf(abuf, sizeof abuf, "b%d", A);
    snprintf(bbuf, sizeof bbuf, "b%d", B);
    mma_opnd oa = {abuf, "aoff", d->ta, M, bm, bk, (d->ta ? M : K) % 8 == 0};
    mma_opnd ob = {bbuf, "boff", !d->tb, N, bn, bk, (d->tb ? K : N) % 8 == 0};
    const int64_t a_bytes = bm * bk * 2, b_bytes = bn * bk * 2;

    kf_gplan_text(gp, kf_gpu_mma_helpers);
    kf_gk k;
    char name[32];
    snprintf(name, sizeof name, "kf_s%d", st->index);
    kf_gk_begin(&k, name);
    kf_gk_value(gp, &k, A, KF_GP_IN);
    if (B != A) kf_gk_value(gp, &k, B, KF_GP_IN);
    kf_gk_value(gp, &k, C, KF_GP_OUT);
    k.smem = smem;
    kf_buf *o = &k.body;
    kf_buf_printf(o, "    /* %s matmul on tensor cores: %lld x [%lld x %lld] x [%lld x %lld]%s%s, f32 accumulation; "
                     "block tile %lld x %lld x %lld of %lld warps (warp tile %lld x %lld), %lld stages in %lld bytes "
                     "of dynamic shared memory, row groups of %lld%s%s */\n",
                  T, (long long)d->batch, (long long)M, (long long)K, (long long)K, (long long)N, d->ta ? " ta" : "",
                  d->tb ? " tb" : "", (long long)bm, (long long)bn, (long long)bk, (long long)nwarps, (long long)wm,
                  (long long)wn, (long long)ns, (long long)smem, (long long)gm, oa.vec ? "" : ", A copied element-wise",
                  ob.vec ? "" : ", B copied element-wise");
    kf_buf_puts(o, "    extern $shared __align__(128) unsigned short kf_sm[];\n");
    kf_buf_puts(o, "    const int tid = $lid(0), lane = tid & 31, warp = tid >> 5;\n");
    kf_gpu_mma_tile_order(o, gx, gy, gm, bm, bn);
    kf_gpu_matmul_offsets(o, gp, d);
    kf_buf_printf(o, "    const int wm0 = (warp / %lld) * %lld, wn0 = (warp %% %lld) * %lld;\n", (long long)warps_n,
                  (long long)wm, (long long)warps_n, (long long)wn);
    kf_buf_printf(o, "    const unsigned sA = kf_smem_u32(kf_sm), sB = sA + %lldu;\n", (long long)(ns * a_bytes));
    kf_buf_printf(o, "    float acc[%lld][%lld][4];\n", (long long)MI, (long long)NI);
    kf_buf_printf(o, "    #pragma unroll\n    for (int i = 0; i < %lld; i++)\n        #pragma unroll\n"
                     "        for (int j = 0; j < %lld; j++) { acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f; }\n",
                  (long long)MI, (long long)NI);

    /* the copy of K step kt into stage stg, as a block used before and inside the loop */
    kf_buf copy = {0};
    kf_buf_printf(&copy, "        const int k0 = kt * %lld;\n", (long long)bk);
    emit_copy(&copy, gp, &oa, "sA", a_bytes, "row0", K, NT);
    emit_copy(&copy, gp, &ob, "sB", b_bytes, "col0", K, NT);
    kf_buf_printf(o, "    #pragma unroll\n    for (int s0 = 0; s0 < %lld; s0++) {\n", (long long)(ns - 1));
    kf_buf_printf(o, "      if (s0 < %lld) { const int kt = s0, stg = s0;\n", (long long)KT);
    kf_buf_puts(o, copy.data);
    kf_buf_puts(o, "      }\n      kf_cp_commit();\n    }\n");

    /* main loop: wait for step kt0's tiles, refill the stage step kt0 - 1 used, then the
     * K sub-steps with the fragments of the next one loaded before the current one's mmas */
    kf_buf_printf(o, "    const int mat = lane >> 3, rr = lane & 7;\n");
    kf_buf_printf(o, "    for (int kt0 = 0; kt0 < %lld; kt0++) {\n", (long long)KT);
    kf_buf_printf(o, "        asm volatile(\"cp.async.wait_group %lld;\");\n", (long long)(ns - 2));
    kf_buf_puts(o, "        $barrier;\n");
    kf_buf_printf(o, "        if (kt0 + %lld < %lld) { const int kt = kt0 + %lld, stg = kt %% %lld;\n", (long long)(ns - 1),
                  (long long)KT, (long long)(ns - 1), (long long)ns);
    kf_buf_puts(o, copy.data);
    kf_buf_puts(o, "        }\n        kf_cp_commit();\n");
    kf_buf_free(&copy);
    kf_buf_printf(o, "        const unsigned sa = sA + (unsigned)(kt0 %% %lld) * %lldu, sb = sB + (unsigned)(kt0 %% %lld) * %lldu;\n",
                  (long long)ns, (long long)a_bytes, (long long)ns, (long long)b_bytes);
    kf_buf_printf(o, "        unsigned af[2][%lld][4], bf[2][%lld][2];\n", (long long)MI, (long long)NI);
    kf_buf_puts(o, "        {\n");
    emit_frags(o, &oa, &ob, MI, NI, "0", 0);
    kf_buf_puts(o, "        }\n");
    for (int64_t ks = 0; ks < NKS; ks++) {
        const int cur = (int)(ks & 1);
        if (ks + 1 < NKS) {
            char kn[24];
            snprintf(kn, sizeof kn, "%lld", (long long)(ks + 1));
            kf_buf_puts(o, "        {\n");
            emit_frags(o, &oa, &ob, MI, NI, kn, cur ^ 1);
            kf_buf_puts(o, "        }\n");
        }
        kf_buf_printf(o, "        #pragma unroll\n        for (int mi = 0; mi < %lld; mi++)\n"
                         "            #pragma unroll\n            for (int ni = 0; ni < %lld; ni++) kf_mma_%s(acc[mi][ni], af[%d][mi], bf[%d][ni]);\n",
                      (long long)MI, (long long)NI, T, cur, cur);
    }
    kf_buf_puts(o, "    }\n");

    /* epilogue: the accumulators (lane: rows lane/4 and +8, columns 2*(lane%4) and +1 of
     * each 16 x 8 tile) rounded into a padded output tile in shared memory, then written
     * out in rows of 16-byte pieces */
    const int64_t cstride = bn + 8;
    kf_buf_puts(o, "    asm volatile(\"cp.async.wait_group 0;\");\n    $barrier;\n");
    kf_buf_puts(o, "    { const int gr = lane >> 2, gc = (lane & 3) * 2;\n");
    kf_buf_printf(o, "      #pragma unroll\n      for (int mi = 0; mi < %lld; mi++)\n        #pragma unroll\n"
                     "        for (int ni = 0; ni < %lld; ni++)\n          #pragma unroll\n"
                     "          for (int h = 0; h < 2; h++) {\n",
                  (long long)MI, (long long)NI);
    kf_buf_printf(o, "            const int r = wm0 + mi * 16 + gr + h * 8, c = wn0 + ni * 8 + gc;\n");
    kf_buf_printf(o, "            *(unsigned *)(kf_sm + r * %lld + c) = kf_pack_%s(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);\n",
                  (long long)cstride, T);
    kf_buf_puts(o, "          }\n    }\n    $barrier;\n");
    const int64_t cpr = bn / 8, total = bm * cpr;
    const int cm = M % bm != 0, cn = N % bn != 0;
    kf_buf_printf(o, "    #pragma unroll\n    for (int q = 0; q < %lld; q++) {\n", (long long)((total + NT - 1) / NT));
    kf_buf_printf(o, "        const int e = tid + q * %lld;\n", (long long)NT);
    if (total % NT) kf_buf_printf(o, "        if (e >= %lld) break;\n", (long long)total);
    kf_buf_printf(o, "        const int r = e / %lld, c = (e %% %lld) * 8, gr_ = row0 + r, gc_ = col0 + c;\n", (long long)cpr,
                  (long long)cpr);
    kf_buf_printf(o, "        const %s at = coff + (%s)gr_ * %lld + gc_;\n", ix, ix, (long long)N);
    char rowc[48] = "";
    if (cm) snprintf(rowc, sizeof rowc, "gr_ < %lld && ", (long long)M);
    if (N % 8 == 0) {
        /* c % 8 == 0 and N % 8 == 0: the piece is wholly in or out of the row, and aligned */
        char cond[96] = "";
        if (cm && cn) snprintf(cond, sizeof cond, "if (gr_ < %lld && gc_ < %lld) ", (long long)M, (long long)N);
        else if (cm) snprintf(cond, sizeof cond, "if (gr_ < %lld) ", (long long)M);
        else if (cn) snprintf(cond, sizeof cond, "if (gc_ < %lld) ", (long long)N);
        kf_buf_printf(o, "        %s*(uint4 *)(b%d + at) = *(const uint4 *)(kf_sm + r * %lld + c);\n", cond, C,
                      (long long)cstride);
    } else {
        kf_buf_puts(o, "        #pragma unroll\n        for (int j = 0; j < 8; j++)\n");
        kf_buf_printf(o, "            if (%sgc_ + j < %lld) b%d[at + j] = kf_sm[r * %lld + c + j];\n", rowc,
                      (long long)N, C, (long long)cstride);
    }
    kf_buf_puts(o, "    }\n");

    if (d->batch > 1) {
        int64_t G[3] = {gx * NT, gy, d->batch}, L[3] = {NT, 1, 1};
        kf_gk_launch(gp, &k, 3, G, L);
    } else {
        int64_t G[2] = {gx * NT, gy}, L[2] = {NT, 1};
        kf_gk_launch(gp, &k, 2, G, L);
    }
}
