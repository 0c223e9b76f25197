/*
 * GPU matmul template in the kernel form: C[b] = op(A[a(b)]) op(B[b(b)]) with optional
 * transposes and broadcast batch dims (kf_matmul_desc), one kernel.
 *
 * Each group computes a TM x TN tile of C. The K dimension is walked in TK-deep steps:
 * the group copies the A tile (TM x TK) and the B tile (TK x TN) into local memory
 * (zero-filled past the matrix edges), then every work-item accumulates its RM x RN
 * register block from them. A work-item (tx, ty) of the (TN/RN) x (TM/RM) group owns
 * rows ty + i*(TM/RM) and columns tx + j*(TN/RN), so that neighbouring items store
 * neighbouring columns of C and read neighbouring words of the B tile. The tile copies
 * walk each operand in its memory order (coalesced) and, with vl=1, move 4-wide vectors
 * where that dim and the tile extent are multiples of 4 (so that a vector is wholly in or
 * out of the matrix and aligned). A tile stored across its copy order gets one word of
 * padding per row against local-memory bank conflicts. The register block is written out
 * as straight-line code (no private arrays). Bounds checks are emitted only for the dims
 * that the tiles do not divide.
 *
 * With rl=1 (GPUs; rm and rn multiples of 4) the register block is laid out in fours
 * instead: item (tx, ty) owns rows 4ty + (i % 4) + (i / 4) * 4TY and likewise columns, so
 * that it reads each four of its A and B values from the tiles as one 16-byte vector
 * (conflict-free: neighbouring items read neighbouring vectors) and stores C in vectors
 * when N % 4 == 0.
 *
 * With db=1 (GPUs) the tiles are double-buffered: while a group multiplies tile t from one
 * pair of local buffers, each item holds its share of tile t+1 in registers (loaded before
 * the multiply, stored into the other pair after it), so the global loads overlap the
 * FMAs and each step needs one barrier instead of two.
 *
 * Parameters: tm, tn (tile), tk (depth), rm, rn (register block), vl (vector tile loads;
 * only when some operand allows them), rl (vector register layout, GPUs), db (double
 * buffering, GPUs), rp (register prefetch: the next K step's A and B values are read from
 * local memory into a second set of registers during the current step's FMAs), mg (CUDA:
 * groups per SM the register budget must allow), and on cuda sm_80+ tc (0 this kernel, 1 the 3xTF32
 * tensor-core kernel of gpu_mma32.c). A point is made valid at render time: tiles shrink
 * to the matrix, the register block grows until the group fits max_wg, the depth shrinks
 * until the tiles fit local memory; the kernel's comment states the tile it uses.
 *
 * A fused elementwise epilogue (a bias, an activation, a residual: kf_stage.epilogue) takes
 * each element of C where it is stored: the store becomes a call of the epilogue's helper
 * when the kernel is launched (gpu_epi.c) and C itself is never written. The register
 * block is then stored by one scalar store statement in a loop over a private copy of it,
 * so that the chain's code is in the kernel once, not once per register.
 *
 * A row reduction fused into the store stage (kf_stage.redepi, s<k>.red=1; gpu_redepi.c)
 * replaces the stores of C: the block's partial of each row goes to scratch and a second
 * launch combines the partials; C is then not a parameter at all. The 3xTF32 kernel
 * (tc=1) takes it the same way, from its accumulator fragments.
 */
#include "gpu_tpl.h"

#include <stdio.h>
#include <string.h>

static int a_vec_ok(const kf_matmul_desc *d, int64_t tm, int64_t tk) {
    return d->ta ? (d->M % 4 == 0 && tm % 4 == 0) : (d->K % 4 == 0 && tk % 4 == 0);
}
static int b_vec_ok(const kf_matmul_desc *d, int64_t tn, int64_t tk) {
    return d->tb ? (d->K % 4 == 0 && tk % 4 == 0) : (d->N % 4 == 0 && tn % 4 == 0);
}

static void simt_params(kf_synth *s, kf_stage *st);

int kf_gpu_matmul_prologue_ok(const kf_synth *s, const kf_stage *st) {
    if (st->kind != KF_STAGE_MATMUL) return 0;
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    for (int a = 0; a < 2; a++)
        if (s->g->values[n->in[a]].dtype != KF_F32) return 0;
    if (s->g->values[n->out].dtype != KF_F32) return 0;
    return kf_gpu_mma_arch_ok(s->platform, &s->dev);
}

/* Where the 3xTF32 tensor-core path runs (cuda, sm_80+; a fused epilogue is taken at its
 * stores as here, a fused prologue at its element-wise operand loads),
 * the parameter tc picks it (1) or the SIMT kernel (0), each path's parameters gated on
 * tc's value; its role KF_ROLE_KERNEL has the builtin search time both before it tunes
 * either, so a slow path only costs candidates; tc=1 is the default for matrices that fill
 * the device with 128 x 128 tiles. */
void kf_gpu_matmul_params(kf_synth *s, kf_stage *st) {
    if (!kf_gpu_tf32_ok(s, st)) {
        simt_params(s, st);
        return;
    }
    static const long tc[] = {0, 1};
    const int dflt = kf_gpu_tf32_default(s, st);
    const int sel = s->space.nparams;
    kf_gpu_param(s, st, "tc", KF_ROLE_KERNEL, tc, 2, dflt);
    if (s->space.nparams == sel) { /* no room to choose: the default path alone */
        if (dflt) kf_gpu_tf32_params(s, st);
        else simt_params(s, st);
        return;
    }
    for (int path = 0; path < 2; path++) {
        const int first = s->space.nparams;
        if (path) kf_gpu_tf32_params(s, st);
        else simt_params(s, st);
        for (int i = first; i < s->space.nparams; i++) {
            s->space.p[i].gate = sel + 1;
            s->space.p[i].gate_value = path;
        }
    }
}

static void simt_params(kf_synth *s, kf_stage *st) {
    kf_gdev dv;
    kf_gpu_dev(s, &dv);
    const kf_matmul_desc *d = &st->mm;
    static const long tiles[] = {16, 32, 64, 128};
    static const long depths[] = {8, 16, 32};
    static const long regs[] = {1, 2, 4, 8};
    /* GPU: 64 x 64 x 16 tiles of 16 x 16 items with 4 x 4 blocks (the usual starting
     * point); PoCL: 32 x 32 x 32 tiles of 4 x 4 items with 8 x 8 blocks, since its items
     * are loop iterations and a group's tiles should stay in L1 (on the 2-core VM, 512^3:
     * 21 ms against 57-95 ms for the GPU shapes) */
    /* large matrices on a GPU: 128 x 128 x 16 tiles of 16 x 16 items with 8 x 8 blocks in
     * the vector register layout, so each item does 64 FMAs per 4 vector reads of local
     * memory (the usual shape of a fast SIMT sgemm), whenever those tiles still give
     * every compute unit a group (batched products of 512 x 512 included) */
    int64_t tiles128 = d->batch * ((d->M + 127) / 128) * ((d->N + 127) / 128);
    int large = !dv.is_cpu && d->M >= 128 && d->N >= 128 && tiles128 >= dv.cu;
    int big = dv.is_cpu ? 1 : large ? 3 : 2;
    int dtm = d->M <= 16 ? 0 : d->M <= 32 ? 1 : big;
    int dtn = d->N <= 16 ? 0 : d->N <= 32 ? 1 : big;
    kf_gpu_param(s, st, "tm", KF_ROLE_TILE_M, tiles, 4, dtm);
    kf_gpu_param(s, st, "tn", KF_ROLE_TILE_N, tiles, 4, dtn);
    kf_gpu_param(s, st, "rm", KF_ROLE_REG_M, regs, 4, dv.is_cpu || large ? 3 : 2);
    kf_gpu_param(s, st, "rn", KF_ROLE_REG_N, regs, 4, dv.is_cpu || large ? 3 : 2);
    /* 32 deep with the register prefetch below for the large GPU products (on the H200,
     * 4096^3: 3.38 ms against 3.55 ms for 16 deep without it, same run) */
    kf_gpu_param(s, st, "tk", KF_ROLE_TILE_K, depths, 3, dv.is_cpu || large ? 2 : 1);
    static const long vl[] = {0, 1};
    int vec = d->M % 4 == 0 || d->N % 4 == 0 || d->K % 4 == 0;
    kf_gpu_param(s, st, "vl", KF_ROLE_VECTOR_LOADS, vec ? vl : vl, vec ? 2 : 1, 0 + vec);
    kf_gpu_param(s, st, "rl", KF_ROLE_NONE, vl, 2, dv.is_cpu ? 0 : 1); /* declared on PoCL too, so CI runs it */
    /* double-buffered tiles: on by default on GPUs, declared on PoCL (its items are loop
     * iterations, nothing overlaps there) so that the moved point runs it in CI */
    kf_gpu_param(s, st, "db", KF_ROLE_DOUBLE_BUFFER, vl, 2, dv.is_cpu ? 0 : 1);
    /* register prefetch of the next K step's values (rp, declared everywhere so that CI
     * runs it on PoCL) and, on CUDA, the groups per SM the register budget must allow
     * (mg: __launch_bounds__'s minimum; 1 lets the compiler use up to 255 registers) */
    kf_gpu_param(s, st, "rp", KF_ROLE_NONE, vl, 2, large ? 1 : 0);
    const kf_lang *L = kf_lang_by_name(s->platform);
    if (L && kf_lang_has_min_groups(L)) {
        static const long mg[] = {1, 2};
        kf_gpu_param(s, st, "mg", KF_ROLE_NONE, mg, 2, 1);
    }
}

static const char comp[4] = {'x', 'y', 'z', 'w'};

/* One operand's tile: local array `dst` ([depth][extent], one per buffer with db) filled
 * from global `src` at offset `off`; `inner_k`: the operand's contiguous dim is K (A not
 * transposed, B transposed), else its M/N dim. `tag` names its prefetch registers. */
typedef struct tile_copy {
    const char *tag, *dst, *src, *off, *g0;
    int inner_k, vec, check_ext, check_k;
    int64_t ext, tk, extent_total, K, nthreads;
    /* a fused prologue's operand with its addressing split (gpu_prosplit.c): its M/N index
     * the same in every element a thread copies (M/N contiguous, NT a multiple of the
     * tile's extent), that index's part computed once into pm<tag>[], and each element
     * kf_prx<x>(pm<tag>, gk, pmt<tag>, ...) instead of src[addr] */
    const kf_gpu_prosplit *sp;
} tile_copy;

/* The bounds condition ("" when the tiles divide the matrix) and the global address of
 * element (gx, gk) of the tile, shared by both copy forms. */
static void tc_cond_addr(const kf_gplan *gp, const tile_copy *t, char *cond, size_t ccap, char *addr,
                         size_t acap) {
    cond[0] = 0;
    if (t->check_ext && t->check_k)
        snprintf(cond, ccap, "gx < %lld && gk < %lld", (long long)t->extent_total, (long long)t->K);
    else if (t->check_ext) snprintf(cond, ccap, "gx < %lld", (long long)t->extent_total);
    else if (t->check_k) snprintf(cond, ccap, "gk < %lld", (long long)t->K);
    if (t->inner_k) snprintf(addr, acap, "%s + (%s)gx * %lld + gk", t->off, gp->ix, (long long)t->K);
    else snprintf(addr, acap, "%s + (%s)gk * %lld + gx", t->off, gp->ix, (long long)t->extent_total);
}

/* The element at addr (element (gx, gk) of the operand) as an expression. */
static void tc_elem(const tile_copy *t, const char *addr, char *out, size_t cap) {
    if (t->sp) snprintf(out, cap, "kf_prx%d(pm%s, gk, pmt%s%s)", t->sp->x, t->tag, t->tag, t->sp->args);
    else snprintf(out, cap, "%s[%s]", t->src, addr);
}

/* The single-buffered tile copy: a loop over the tile in the operand's memory order. */
static void emit_tile_copy(kf_buf *o, const kf_gplan *gp, const tile_copy *t) {
    const char *dst = t->dst, *src = t->src, *g0 = t->g0;
    const int inner_k = t->inner_k, vec = t->vec;
    const int64_t ext = t->ext, tk = t->tk, nthreads = t->nthreads;
    const int64_t VL = vec ? 4 : 1;
    const int64_t nelem = ext * tk / VL;
    /* contiguous dim first: (outer index, inner index) of element e */
    kf_buf_printf(o, "        for (int e = tid; e < %lld; e += %lld) {\n", (long long)nelem, (long long)nthreads);
    if (inner_k) {
        kf_buf_printf(o, "            const int xx = e / %lld, kk = (e %% %lld) * %lld;\n", (long long)(tk / VL),
                      (long long)(tk / VL), (long long)VL);
    } else {
        kf_buf_printf(o, "            const int kk = e / %lld, xx = (e %% %lld) * %lld;\n", (long long)(ext / VL),
                      (long long)(ext / VL), (long long)VL);
    }
    kf_buf_printf(o, "            const int gx = %s + xx, gk = k0 + kk;\n", g0);
    char cond[96], addr[128];
    tc_cond_addr(gp, t, cond, sizeof cond, addr, sizeof addr);
    if (!vec) {
        char el[256];
        tc_elem(t, addr, el, sizeof el);
        if (t->sp) kf_buf_puts(o, "            (void)gx;\n");
        if (cond[0]) kf_buf_printf(o, "            %s[kk][xx] = (%s) ? %s : 0.0f;\n", dst, cond, el);
        else kf_buf_printf(o, "            %s[kk][xx] = %s;\n", dst, el);
    } else {
        if (cond[0]) kf_buf_printf(o, "            if (%s) {\n", cond);
        else kf_buf_puts(o, "            {\n");
        kf_buf_printf(o, "                const $vec(float, 4) t = $vload(4, %s, %s);\n", src, addr);
        for (int c = 0; c < 4; c++) {
            if (inner_k) kf_buf_printf(o, "                %s[kk + %d][xx] = t.%c;\n", dst, c, comp[c]);
            else kf_buf_printf(o, "                %s[kk][xx + %d] = t.%c;\n", dst, c, comp[c]);
        }
        kf_buf_puts(o, "            }");
        if (cond[0]) {
            kf_buf_puts(o, " else {\n");
            for (int c = 0; c < 4; c++) {
                if (inner_k) kf_buf_printf(o, "                %s[kk + %d][xx] = 0.0f;\n", dst, c);
                else kf_buf_printf(o, "                %s[kk][xx + %d] = 0.0f;\n", dst, c);
            }
            kf_buf_puts(o, "            }");
        }
        kf_buf_puts(o, "\n");
    }
    kf_buf_puts(o, "        }\n");
}

/* The double-buffered form of a tile copy, in two phases so that the global loads of the
 * next tile are in flight while the current one is multiplied. The phases share one shape:
 * work-item tid moves elements tid + q*NT (q < cnt) through registers p<tag><q> (a float,
 * or a 4-vector with vec). */
static int64_t tc_nelem(const tile_copy *t) { return t->ext * t->tk / (t->vec ? 4 : 1); }
static int64_t tc_count(const tile_copy *t) { return (tc_nelem(t) + t->nthreads - 1) / t->nthreads; }

/* the element's (xx, kk) in the tile, under an `if (e < nelem)` when NT does not divide it */
static void tc_index(kf_buf *o, const tile_copy *t, int64_t q, const char *ind) {
    const int64_t VL = t->vec ? 4 : 1, nelem = tc_nelem(t);
    kf_buf_printf(o, "%s{ const int e = tid + %lld;", ind, (long long)(q * t->nthreads));
    if (nelem % t->nthreads != 0) kf_buf_printf(o, " if (e < %lld) {", (long long)nelem);
    kf_buf_puts(o, "\n");
    if (t->inner_k)
        kf_buf_printf(o, "%s  const int xx = e / %lld, kk = (e %% %lld) * %lld;\n", ind, (long long)(t->tk / VL),
                      (long long)(t->tk / VL), (long long)VL);
    else
        kf_buf_printf(o, "%s  const int kk = e / %lld, xx = (e %% %lld) * %lld;\n", ind, (long long)(t->ext / VL),
                      (long long)(t->ext / VL), (long long)VL);
}

static void tc_close(kf_buf *o, const tile_copy *t, const char *ind) {
    kf_buf_printf(o, "%s}%s\n", ind, tc_nelem(t) % t->nthreads != 0 ? " }" : "");
}

static void tc_decl(kf_buf *o, const tile_copy *t) {
    for (int64_t q = 0; q < tc_count(t); q++) {
        if (t->vec) kf_buf_printf(o, "        $vec(float, 4) p%s%lld = $vmake(float, 4, 0.0f, 0.0f, 0.0f, 0.0f);\n", t->tag, (long long)q);
        else kf_buf_printf(o, "        float p%s%lld = 0.0f;\n", t->tag, (long long)q);
    }
}

/* registers <- global, for the tile at depth kbase (an expression) */
static void tc_load(kf_buf *o, const kf_gplan *gp, const tile_copy *t, const char *kbase, const char *ind) {
    for (int64_t q = 0; q < tc_count(t); q++) {
        tc_index(o, t, q, ind);
        kf_buf_printf(o, "%s  const int gx = %s + xx, gk = %s + kk;\n", ind, t->g0, kbase);
        char cond[96], addr[128];
        tc_cond_addr(gp, t, cond, sizeof cond, addr, sizeof addr);
        const char *zero = t->vec ? "$vmake(float, 4, 0.0f, 0.0f, 0.0f, 0.0f)" : "0.0f";
        char val[256];
        if (t->vec) snprintf(val, sizeof val, "$vload(4, %s, %s)", t->src, addr);
        else tc_elem(t, addr, val, sizeof val);
        if (cond[0]) kf_buf_printf(o, "%s  p%s%lld = (%s) ? %s : %s;\n", ind, t->tag, (long long)q, cond, val, zero);
        else kf_buf_printf(o, "%s  p%s%lld = %s;\n", ind, t->tag, (long long)q, val);
        kf_buf_printf(o, "%s  (void)xx; (void)kk;%s\n", ind, t->sp ? " (void)gx;" : "");
        tc_close(o, t, ind);
    }
}

/* local buffer `buf` (an expression) <- registers */
static void tc_store(kf_buf *o, const tile_copy *t, const char *buf, const char *ind) {
    for (int64_t q = 0; q < tc_count(t); q++) {
        tc_index(o, t, q, ind);
        if (!t->vec) {
            kf_buf_printf(o, "%s  %s[%s][kk][xx] = p%s%lld;\n", ind, t->dst, buf, t->tag, (long long)q);
        } else {
            for (int c = 0; c < 4; c++) {
                if (t->inner_k) kf_buf_printf(o, "%s  %s[%s][kk + %d][xx] = p%s%lld.%c;\n", ind, t->dst, buf, c, t->tag, (long long)q, comp[c]);
                else kf_buf_printf(o, "%s  %s[%s][kk][xx + %d] = p%s%lld.%c;\n", ind, t->dst, buf, c, t->tag, (long long)q, comp[c]);
            }
        }
        tc_close(o, t, ind);
    }
}

/* Declare the registers a<i><sfx>, w<j><sfx> of one K step's A and B values. */
static void emit_operand_decls(kf_buf *o, int64_t rm, int64_t rn, const char *sfx, const char *ind) {
    kf_buf_printf(o, "%sfloat", ind);
    for (int i = 0; i < rm; i++) kf_buf_printf(o, "%s a%d%s", i ? "," : "", i, sfx);
    for (int j = 0; j < rn; j++) kf_buf_printf(o, ", w%d%s", j, sfx);
    kf_buf_puts(o, ";\n");
}

/* Read one K step's A and B values of the item's register block from the local tiles
 * `asub`/`bsub` (rows of the tiles, as expressions) into a<i><sfx> and w<j><sfx>. */
static void emit_operand_reads(kf_buf *o, int64_t rm, int64_t rn, int64_t TY, int64_t TX, int rl, const char *asub,
                               const char *bsub, const char *sfx, const char *ind) {
    if (rl) {
        for (int g = 0; g < rm / 4; g++) {
            kf_buf_printf(o, "%s{ const $vec(float, 4) v = $vload(4, %s, ty * 4 + %lld);", ind, asub,
                          (long long)(g * 4 * TY));
            for (int c = 0; c < 4; c++) kf_buf_printf(o, " a%d%s = v.%c;", g * 4 + c, sfx, comp[c]);
            kf_buf_puts(o, " }\n");
        }
        for (int g = 0; g < rn / 4; g++) {
            kf_buf_printf(o, "%s{ const $vec(float, 4) v = $vload(4, %s, tx * 4 + %lld);", ind, bsub,
                          (long long)(g * 4 * TX));
            for (int c = 0; c < 4; c++) kf_buf_printf(o, " w%d%s = v.%c;", g * 4 + c, sfx, comp[c]);
            kf_buf_puts(o, " }\n");
        }
    } else {
        for (int i = 0; i < rm; i++)
            kf_buf_printf(o, "%sa%d%s = %s[ty + %lld];\n", ind, i, sfx, asub, (long long)(i * TY));
        for (int j = 0; j < rn; j++)
            kf_buf_printf(o, "%sw%d%s = %s[tx + %lld];\n", ind, j, sfx, bsub, (long long)(j * TX));
    }
}

static void emit_fmas(kf_buf *o, int64_t rm, int64_t rn, const char *sfx) {
    for (int i = 0; i < rm; i++) {
        kf_buf_puts(o, "           ");
        for (int j = 0; j < rn; j++) kf_buf_printf(o, " c%d_%d += a%d%s * w%d%s;", i, j, i, sfx, j, sfx);
        kf_buf_puts(o, "\n");
    }
}

void kf_gpu_matmul_offsets(kf_buf *o, const kf_gplan *gp, const kf_matmul_desc *d) {
    const char *ix = gp->ix;
    if (d->batch <= 1) {
        kf_buf_printf(o, "    const %s aoff = 0, boff = 0, coff = 0;\n", ix);
        return;
    }
    kf_buf_printf(o, "    const %s bz = (%s)$grp(2);\n", ix, ix);
    kf_buf_printf(o, "    %s am = 0, bm = 0;\n    { %s rem = bz;\n", ix, ix);
    for (int j = d->nbdims - 1; j >= 0; j--) {
        if (d->bdim[j] == 1) continue;
        kf_buf_printf(o, "      { const %s i = rem %% %lld; rem = rem / %lld;", ix, (long long)d->bdim[j],
                      (long long)d->bdim[j]);
        if (d->a_bstride[j]) kf_buf_printf(o, " am += i * %lld;", (long long)d->a_bstride[j]);
        if (d->b_bstride[j]) kf_buf_printf(o, " bm += i * %lld;", (long long)d->b_bstride[j]);
        kf_buf_puts(o, " (void)i; }\n");
    }
    kf_buf_puts(o, "      (void)rem; }\n");
    kf_buf_printf(o, "    const %s aoff = am * %lld, boff = bm * %lld, coff = bz * %lld;\n", ix,
                  (long long)(d->M * d->K), (long long)(d->K * d->N), (long long)(d->M * d->N));
}

void kf_gpu_matmul_emit(kf_gplan *gp, const kf_stage *st, const kf_point *p) {
    const kf_synth *s = gp->s;
    if (kf_gpu_tf32_ok(s, st) && kf_gpu_get(s, st, p, "tc", 0) == 1) {
        kf_gpu_tf32_emit(gp, st, p); /* a fused row reduction included (gpu_redepi.c) */
        return;
    }
    const kf_matmul_desc *d = &st->mm;
    const kf_node *n = &s->g->nodes[st->nodes[0]];
    kf_gdev dv;
    kf_gpu_dev(s, &dv);
    int64_t tm = kf_gpu_get(s, st, p, "tm", 64), tn = kf_gpu_get(s, st, p, "tn", 64);
    int64_t tk = kf_gpu_get(s, st, p, "tk", 16);
    int64_t rm = kf_gpu_get(s, st, p, "rm", 4), rn = kf_gpu_get(s, st, p, "rn", 4);
    int vl = (int)kf_gpu_get(s, st, p, "vl", 0);
    int rl = (int)kf_gpu_get(s, st, p, "rl", 0);
    const int db = (int)kf_gpu_get(s, st, p, "db", 0);
    int rp = (int)kf_gpu_get(s, st, p, "rp", 0);
    const int mg = (int)kf_gpu_get(s, st, p, "mg", 2);
    const int64_t M = d->M, N = d->N, K = d->K;
    /* stores handed to a fused epilogue (gpu_epi.c) are scalar `b<C>[i] = v;` statements */
    const int epi = kf_gpu_stage_has_epilogue(s, st);
    /* a row reduction fused into the store stage (gpu_redepi.c): C is never written */
    const int red = st->redepi != 0;

    /* make the point valid for this matrix and device */
    int64_t mcap = kf_gpu_pow2_ceil(M) < 8 ? 8 : kf_gpu_pow2_ceil(M);
    int64_t ncap = kf_gpu_pow2_ceil(N) < 8 ? 8 : kf_gpu_pow2_ceil(N);
    if (tm > mcap) tm = mcap;
    if (tn > ncap) tn = ncap;
    if (rm > tm) rm = tm;
    if (rn > tn) rn = tn;
    while ((tm / rm) * (tn / rn) > dv.max_wg) {
        if (rn < tn && (rn <= rm || rm >= tm)) rn *= 2;
        else if (rm < tm) rm *= 2;
        else break;
    }
    /* vector register layout: blocks of 4 rows / columns, read as one vector each */
    if (rm % 4 != 0 || rn % 4 != 0) rl = 0;
    /* an operand a fused prologue computes is read element by element (kf_pro<x>) */
    const int pro_a = kf_gpu_prologue_reads(s, st, d->a_val), pro_b = kf_gpu_prologue_reads(s, st, d->b_val);
    int vec_a = vl && !pro_a && a_vec_ok(d, tm, tk), vec_b = vl && !pro_b && b_vec_ok(d, tn, tk);
    /* a tile stored across its copy order is padded against bank conflicts: one word, or
     * four with rl=1 so that its rows stay 16-byte aligned for the vector reads */
    const int pad_a = d->ta ? 0 : rl ? 4 : 1, pad_b = d->tb ? (rl ? 4 : 1) : 0;
    const int nbuf = db ? 2 : 1;
    const int64_t red_bytes = kf_gpu_redepi_local_bytes(s, st, (tm / rm) * (tn / rn));
    while (tk > 1 && nbuf * (tk * (tm + pad_a) + tk * (tn + pad_b)) * 4 + red_bytes > dv.local_mem) tk /= 2;
    vec_a = vec_a && a_vec_ok(d, tm, tk);
    vec_b = vec_b && b_vec_ok(d, tn, tk);
    if (tk % 2 != 0) rp = 0; /* the prefetch walks the tile in pairs of steps */
    const int64_t TX = tn / rn, TY = tm / rm, NT = TX * TY;
    const int64_t gx = (N + tn - 1) / tn, gy = (M + tm - 1) / tm;
    const char *ix = gp->ix;

    kf_gk k;
    char name[32];
    snprintf(name, sizeof name, "kf_s%d", st->index);
    kf_gk_begin(&k, name);
    int A = d->a_val, B = d->b_val, C = n->out; /* a folded transpose view: its source */
    kf_gk_value(gp, &k, A, KF_GP_IN);
    if (B != A) kf_gk_value(gp, &k, B, KF_GP_IN);
    if (!red) kf_gk_value(gp, &k, C, KF_GP_OUT);
    kf_buf *o = &k.body;
    const kf_gpu_redtile rt = {M, N, d->batch * M, tm, tn, rm, rn, TX, TY, gx, rl};
    kf_buf_printf(o, "    /* matmul %lld x [%lld x %lld] x [%lld x %lld]%s%s: tile %lld x %lld x %lld, "
                     "register block %lld x %lld, %lld x %lld items%s%s%s */\n",
                  (long long)d->batch, (long long)M, (long long)K, (long long)K, (long long)N, d->ta ? " ta" : "",
                  d->tb ? " tb" : "", (long long)tm, (long long)tn, (long long)tk, (long long)rm, (long long)rn,
                  (long long)TX, (long long)TY, vec_a ? ", vector A loads" : "", vec_b ? ", vector B loads" : "",
                  db ? ", double-buffered" : "");
    if (rp) kf_buf_puts(o, "    /* next K step's values read into registers during this step's FMAs */\n");
    const char *dims = db ? "[2]" : "";
    kf_buf_printf(o, "    $shared float As%s[%lld][%lld];\n", dims, (long long)tk, (long long)(tm + pad_a));
    kf_buf_printf(o, "    $shared float Bs%s[%lld][%lld];\n", dims, (long long)tk, (long long)(tn + pad_b));
    if (red) kf_gpu_redepi_decl(gp, &k, st, &rt);
    kf_buf_printf(o, "    const int tx = $lid(0), ty = $lid(1), tid = ty * %lld + tx;\n", (long long)TX);
    kf_buf_printf(o, "    const int col0 = $grp(0) * %lld, row0 = $grp(1) * %lld;\n", (long long)tn, (long long)tm);
    kf_gpu_matmul_offsets(o, gp, d);
    for (int i = 0; i < rm; i++)
        for (int j = 0; j < rn; j++) kf_buf_printf(o, "    float c%d_%d = 0.0f;\n", i, j);
    char abuf[16], bbuf[16];
    snprintf(abuf, sizeof abuf, "b%d", A);
    snprintf(bbuf, sizeof bbuf, "b%d", B);
    int ck = K % tk != 0;
    const int64_t nk = (K + tk - 1) / tk;
    tile_copy tca = {"a", "As", abuf, "aoff", "row0", !d->ta, vec_a, M % tm != 0, ck, tm, tk, M, K, NT, NULL};
    tile_copy tcb = {"b", "Bs", bbuf, "boff", "col0", d->tb, vec_b, N % tn != 0, ck, tn, tk, N, K, NT, NULL};
    /* a fused prologue's operand: its addresses split into M/N and K parts where its layout
     * factors so (gpu_prosplit.c), its matrix in the batch pmt<tag> */
    kf_gpu_prosplit gs;
    kf_gpu_prologue_split(s, st, pro_a ? A : pro_b ? B : -1, &gs);
    tile_copy *tg = pro_a ? &tca : &tcb;
    if (gs.on && !tg->inner_k && NT % tg->ext == 0) {
        tg->sp = &gs;
        kf_buf_printf(o, "    const %s pmt%s = %s / %lld;\n", ix, tg->tag, tg->off, (long long)(gs.R * gs.C));
        kf_buf_printf(o, "    %s pm%s[%d];\n    kf_prm%d(%s + tid %% %lld, pmt%s, pm%s);\n", ix, tg->tag, gs.nt, gs.x,
                      tg->g0, (long long)tg->ext, tg->tag, tg->tag);
    }
    if (db) {
        /* tile 0 into buffer 0; then each step prefetches tile t+1 into registers, multiplies
         * tile t, stores the prefetch into the other buffer: one barrier per step */
        kf_buf_puts(o, "    {\n");
        tc_decl(o, &tca);
        tc_decl(o, &tcb);
        tc_load(o, gp, &tca, "0", "        ");
        tc_load(o, gp, &tcb, "0", "        ");
        tc_store(o, &tca, "0", "        ");
        tc_store(o, &tcb, "0", "        ");
        kf_buf_puts(o, "    }\n    $barrier;\n");
        kf_buf_printf(o, "    for (int t = 0; t < %lld; t++) {\n", (long long)nk);
        kf_buf_printf(o, "        const int cur = t & 1, k1 = (t + 1) * %lld;\n", (long long)tk);
        tc_decl(o, &tca);
        tc_decl(o, &tcb);
        kf_buf_printf(o, "        if (t + 1 < %lld) {\n", (long long)nk);
        tc_load(o, gp, &tca, "k1", "            ");
        tc_load(o, gp, &tcb, "k1", "            ");
        kf_buf_puts(o, "        }\n");
    } else {
        kf_buf_printf(o, "    for (int k0 = 0; k0 < %lld; k0 += %lld) {\n", (long long)K, (long long)tk);
        emit_tile_copy(o, gp, &tca);
        emit_tile_copy(o, gp, &tcb);
        kf_buf_puts(o, "        $barrier;\n");
    }
    const char *asub = db ? "As[cur][kk]" : "As[kk]", *bsub = db ? "Bs[cur][kk]" : "Bs[kk]";
    if (rp) {
        /* register prefetch: the A and B values of step kk + 1 are read from local memory
         * into a second set while step kk's FMAs run (tk is even) */
        char an[24], bn_[24];
        snprintf(an, sizeof an, "%s", db ? "As[cur][0]" : "As[0]");
        snprintf(bn_, sizeof bn_, "%s", db ? "Bs[cur][0]" : "Bs[0]");
        emit_operand_decls(o, rm, rn, "_0", "        ");
        emit_operand_decls(o, rm, rn, "_1", "        ");
        emit_operand_reads(o, rm, rn, TY, TX, rl, an, bn_, "_0", "        ");
        kf_buf_printf(o, "        for (int kk = 0; kk < %lld; kk += 2) {\n", (long long)tk);
        for (int half = 0; half < 2; half++) {
            const char *cur_s = half ? "_1" : "_0", *nxt_s = half ? "_0" : "_1";
            char ra[40], rb[40];
            snprintf(ra, sizeof ra, "%s[kk + %d]", db ? "As[cur]" : "As", half + 1);
            snprintf(rb, sizeof rb, "%s[kk + %d]", db ? "Bs[cur]" : "Bs", half + 1);
            if (half) kf_buf_printf(o, "            if (kk + 2 < %lld) {\n", (long long)tk);
            emit_operand_reads(o, rm, rn, TY, TX, rl, ra, rb, nxt_s, half ? "                " : "            ");
            if (half) kf_buf_puts(o, "            }\n");
            emit_fmas(o, rm, rn, cur_s);
        }
        kf_buf_puts(o, "        }\n");
    } else {
        kf_buf_printf(o, "        for (int kk = 0; kk < %lld; kk++) {\n", (long long)tk);
        emit_operand_decls(o, rm, rn, "", "            ");
        emit_operand_reads(o, rm, rn, TY, TX, rl, asub, bsub, "", "            ");
        emit_fmas(o, rm, rn, "");
        kf_buf_puts(o, "        }\n");
    }
    if (db) {
        kf_buf_printf(o, "        if (t + 1 < %lld) {\n", (long long)nk);
        tc_store(o, &tca, "cur ^ 1", "            ");
        tc_store(o, &tcb, "cur ^ 1", "            ");
        kf_buf_puts(o, "        }\n");
    }
    kf_buf_puts(o, "        $barrier;\n    }\n");
    if (red) kf_gpu_redepi_store(gp, &k, st, &rt);
    if (epi && !red) {
        /* one store statement in a loop over the register block, so that the epilogue's
         * code is there once (64 inlined copies of a sigmoid took PoCL 25 s to compile, on
         * the loaded VM, against 4 s for the product alone); a compiler still unrolls the
         * loop where the chain is short */
        kf_buf_printf(o, "    float cv[%lld];\n", (long long)(rm * rn));
        for (int i = 0; i < rm; i++) {
            kf_buf_puts(o, "   ");
            for (int j = 0; j < rn; j++) kf_buf_printf(o, " cv[%lld] = c%d_%d;", (long long)(i * rn + j), i, j);
            kf_buf_puts(o, "\n");
        }
        kf_buf_printf(o, "    for (int e = 0; e < %lld; e++) {\n", (long long)(rm * rn));
        kf_buf_printf(o, "        const int i = e / %lld, j = e %% %lld;\n", (long long)rn, (long long)rn);
        if (rl)
            kf_buf_printf(o, "        const int r = row0 + ty * 4 + (i / 4) * %lld + i %% 4, c = col0 + tx * 4 + (j / 4) * %lld + j %% 4;\n",
                          (long long)(4 * TY), (long long)(4 * TX));
        else
            kf_buf_printf(o, "        const int r = row0 + ty + i * %lld, c = col0 + tx + j * %lld;\n", (long long)TY,
                          (long long)TX);
        char cond[96] = "";
        const int cm = M % tm != 0, cn = N % tn != 0;
        if (cm && cn) snprintf(cond, sizeof cond, "if (r < %lld && c < %lld) ", (long long)M, (long long)N);
        else if (cm) snprintf(cond, sizeof cond, "if (r < %lld) ", (long long)M);
        else if (cn) snprintf(cond, sizeof cond, "if (c < %lld) ", (long long)N);
        kf_buf_printf(o, "        %sb%d[coff + (%s)r * %lld + c] = cv[e];\n", cond, C, ix, (long long)N);
        kf_buf_puts(o, "        (void)i; (void)j; (void)r; (void)c;\n    }\n");
    }
    if (red) rl = 0, rm = 0; /* no stores of C (the loops below store nothing) */
    if (rl && !epi) kf_buf_printf(o, "    const int M_ = %lld, N_ = %lld;\n    (void)M_; (void)N_;\n", (long long)M, (long long)N);
    for (int i = 0; i < rm && rl && !epi; i++) {
        /* row (i / 4) * 4TY + 4ty + i % 4; columns in fours at g * 4TX + 4tx */
        const int cm = M % tm != 0, cn = N % tn != 0;
        kf_buf_printf(o, "    { const int r = row0 + ty * 4 + %lld;\n", (long long)((i / 4) * 4 * TY + i % 4));
        for (int g = 0; g < rn / 4; g++) {
            kf_buf_printf(o, "      { const int c = col0 + tx * 4 + %lld;", (long long)(g * 4 * TX));
            if (N % 4 == 0) {
                /* c % 4 == 0 and N % 4 == 0: the vector is wholly in or out of the row */
                if (cm || cn)
                    kf_buf_printf(o, " if (%s%s%s)", cm ? "r < M_" : "", cm && cn ? " && " : "", cn ? "c < N_" : "");
                kf_buf_printf(o, " $vstore(4, $vmake(float, 4, c%d_%d, c%d_%d, c%d_%d, c%d_%d), b%d, coff + (%s)r * %lld + c);",
                              i, g * 4, i, g * 4 + 1, i, g * 4 + 2, i, g * 4 + 3, C, ix, (long long)N);
            } else {
                for (int c = 0; c < 4; c++)
                    kf_buf_printf(o, "\n        if (%sc + %d < N_) b%d[coff + (%s)r * %lld + c + %d] = c%d_%d;",
                                  cm ? "r < M_ && " : "", c, C, ix, (long long)N, c, i, g * 4 + c);
            }
            kf_buf_puts(o, " (void)c; }\n");
        }
        kf_buf_puts(o, "      (void)r; }\n");
    }
    for (int i = 0; i < rm && !rl && !epi; i++) {
        kf_buf_printf(o, "    { const int r = row0 + ty + %lld;\n", (long long)(i * TY));
        for (int j = 0; j < rn; j++) {
            char cond[96] = "";
            int cm = M % tm != 0, cn = N % tn != 0;
            if (cm && cn) snprintf(cond, sizeof cond, "r < %lld && c < %lld", (long long)M, (long long)N);
            else if (cm) snprintf(cond, sizeof cond, "r < %lld", (long long)M);
            else if (cn) snprintf(cond, sizeof cond, "c < %lld", (long long)N);
            kf_buf_printf(o, "      { const int c = col0 + tx + %lld; ", (long long)(j * TX));
            if (cond[0]) kf_buf_printf(o, "if (%s) ", cond);
            kf_buf_printf(o, "b%d[coff + (%s)r * %lld + c] = c%d_%d; (void)c; }\n", C, ix, (long long)N, i, j);
        }
        kf_buf_puts(o, "      (void)r; }\n");
    }
    /* the prefetch registers on top of the register block: by default ask CUDA for a
     * budget that keeps two groups per SM (on sm_90, 16-deep 128 x 128 tiles: 122 registers
     * with it, 173 without, which leaves one group per SM); mg=1 trades that for registers */
    if (db && NT <= 512) k.k.min_groups = mg;
    if (d->batch > 1) {
        int64_t G[3] = {gx * TX, gy * TY, d->batch}, L[3] = {TX, TY, 1};
        kf_gk_launch(gp, &k, 3, G, L);
    } else {
        int64_t G[2] = {gx * TX, gy * TY}, L[2] = {TX, TY};
        kf_gk_launch(gp, &k, 2, G, L);
    }
    if (red) kf_gpu_redepi_combine(gp, st, &rt);
}
