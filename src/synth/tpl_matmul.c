/*
 * CPU matmul / batched matmul template of the builtin generator.
 *
 * Design (BLIS/Goto): for every output matrix, loop over NC-wide column panels of B and
 * KC-deep slices of K; pack B's KCxNC panel into NR-wide contiguous strips, then for each
 * MC-tall block of A pack it into MR-tall strips and run an MRxNR register micro-kernel
 * over (B strip x A strip) pairs, B strip outer (it stays in L1, the A block in L2). Packing absorbs the transposes (ta/tb) and zero-pads partial strips, so the
 * micro-kernel always runs full tiles; partial tiles are written back through a small
 * temporary. The first KC slice stores C (never reads it: outputs arrive NaN-poisoned),
 * later slices accumulate. The micro-kernel is written with GCC vector extensions; with
 * -march=native (GNU C's default -ffp-contract=fast) its inner loop is broadcast + FMA.
 *
 * Threads: the work is cut into independent tasks, each a rectangle of one output matrix
 * (rows balanced to whole MR strips, columns to whole NR strips) run start to finish by
 * one thread with its own packing buffers. Threads never meet at a barrier: on a small,
 * shared (virtual) machine a spinning barrier costs far more than packing a B panel once
 * per thread. The grid has the fewest tasks per matrix that give every thread the same
 * work (batch x tasks a multiple of threads; 1 for a large batch), times "split".
 *
 * Parameters (all "<prefix>NAME"): threads, naive (0/1: a plain triple loop, the
 * baseline), vl (vector length in floats: one value, the device's, so that emit, which
 * sees no device, knows it), mk (micro-kernel shape encoded MR*100+NR, e.g. 616 = 6x16),
 * mc/kc/nc (block sizes; capped and balanced against the real sizes at emit time), and
 * split (tasks per thread: 1, 2, 4; only on a device with several threads). All sizes
 * are baked into the generated code as constants.
 *
 * Every generated name starts with the stage function's name, so several matmul stages
 * coexist in one file.
 */
#include "tpl.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- schedule space ---------------------------------------------------------------- */

typedef struct mk_shape {
    int mr, nv; /* rows, and NR in vectors */
} mk_shape;

/* Shapes for 16 vector registers (AVX2, SSE): accumulators + B vectors + 1 broadcast must
 * fit. Ordered by accumulators (mr x nv), so that a larger value index is a larger
 * micro-kernel (what the analysis' "mk+" means); MK16_DEF is the default. */
static const mk_shape mk16[] = {{4, 1}, {4, 2}, {8, 1}, {6, 2}, {4, 3}};
enum { MK16_DEF = 3 };
/* Shapes for 32 vector registers (AVX-512, NEON). */
static const mk_shape mk32[] = {{4, 2}, {8, 2}, {12, 2}, {8, 3}, {6, 4}, {14, 2}};
enum { MK32_DEF = 2 };

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

/* Keep the values below limit plus the first one at or above it (which then stands for
 * "all of it"); returns the new count. */
static int filter_values(long *v, int n, int64_t limit) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        v[m++] = v[i];
        if (v[i] >= limit) break;
    }
    return m;
}

/* Index of the largest value whose footprint (value * unit bytes) fits budget bytes; 0
 * when none does. */
static int pick_fit(const long *v, int n, int64_t unit, int64_t budget) {
    int best = 0;
    for (int i = 0; i < n; i++)
        if (v[i] * unit <= budget) best = i;
    return best;
}

/* The default micro-kernel for M rows: the table's default unless its last strip pads M by
 * an eighth or more (a convolution's 16 output channels on 12-row strips compute 24 rows,
 * on 6-row strips 18); then the one with the most accumulators among those under an
 * eighth, the least padding on a tie. */
static int pick_mk(const mk_shape *tab, int n, int def, int64_t M) {
    if (M <= 0 || (round_up(M, tab[def].mr) - M) * 8 < M) return def;
    int best = -1;
    for (int i = 0; i < n; i++) {
        int64_t pad = round_up(M, tab[i].mr) - M;
        if (pad * 8 >= M) continue;
        if (best < 0 || tab[i].mr * tab[i].nv > tab[best].mr * tab[best].nv ||
            (tab[i].mr * tab[i].nv == tab[best].mr * tab[best].nv && pad < round_up(M, tab[best].mr) - M))
            best = i;
    }
    return best < 0 ? def : best;
}

static int dev_nregs(const kf_device_info *dev, int vl) {
    if (vl == 16) return 32;
    if (dev && (strstr(dev->arch, "aarch64") || strstr(dev->arch, "arm64"))) return 32;
    return 16;
}

/* Append the matmul stage's parameters for desc d on dev under prefix (see the design
 * note for their meaning). Defaults come from the device's cache sizes: KC so that one
 * B strip fills half of L1, MC so that the A block fills about half of L2, NC so that
 * the B panel stays well inside L3. Never fails; asserts on a malformed desc. */
void kf_tpl_matmul_params(const kf_matmul_desc *d, const kf_device_info *dev, kf_space *sp,
                          const char *prefix) {
    assert(d && sp);
    assert(d->batch >= 1 && d->M >= 0 && d->N >= 0 && d->K >= 0);
    int64_t l1 = dev && dev->l1d_bytes > 0 ? dev->l1d_bytes : 32 * 1024;
    int64_t l2 = dev && dev->l2_bytes > 0 ? dev->l2_bytes : 512 * 1024;
    int64_t l3 = dev && dev->l3_bytes > 0 ? dev->l3_bytes : 8 * 1024 * 1024;
    int nthreads = dev && dev->threads > 0 ? dev->threads : 1;
    int vl = kf_tpl_cpu_vl(dev);
    int nregs = dev_nregs(dev, vl);
    double work = (double)d->batch * (double)d->M * (double)d->N * (double)d->K;

    long tv[KF_MAX_PARAM_VALUES];
    int nt = kf_tpl_thread_values(dev, tv);
    kf_tpl_add_param(sp, prefix, "threads", KF_ROLE_THREADS, tv, nt, work < KF_TPL_THREADS_MIN_WORK ? 0 : nt - 1);

    long naive[] = {0, 1};
    kf_tpl_add_param(sp, prefix, "naive", KF_ROLE_NAIVE, naive, 2, 0);

    long vlv[] = {vl};
    kf_tpl_add_param(sp, prefix, "vl", KF_ROLE_VECTOR_LOADS, vlv, 1, 0);

    const mk_shape *tab = nregs >= 32 ? mk32 : mk16;
    int ntab = nregs >= 32 ? (int)(sizeof mk32 / sizeof mk32[0])
                           : (int)(sizeof mk16 / sizeof mk16[0]);
    long mkv[KF_MAX_PARAM_VALUES];
    for (int i = 0; i < ntab; i++) mkv[i] = tab[i].mr * 100L + tab[i].nv * vl;
    int mkdef = pick_mk(tab, ntab, nregs >= 32 ? MK32_DEF : MK16_DEF, d->M);
    kf_tpl_add_param(sp, prefix, "mk", KF_ROLE_MICRO_KERNEL, mkv, ntab, mkdef);
    int mr0 = tab[mkdef].mr, nr0 = tab[mkdef].nv * vl;

    long kcv[] = {64, 128, 192, 256, 384, 512, 768};
    int nkc = filter_values(kcv, 7, d->K);
    int kdef = pick_fit(kcv, nkc, 4L * nr0, l1 / 2);
    kf_tpl_add_param(sp, prefix, "kc", KF_ROLE_CACHE_K, kcv, nkc, kdef);
    int64_t kc0 = kcv[kdef] < d->K ? kcv[kdef] : (d->K > 0 ? d->K : 1);

    long mcv[] = {24, 48, 72, 96, 144, 192, 240, 288, 384, 576};
    int nmc = filter_values(mcv, 10, round_up(d->M > 0 ? d->M : 1, mr0));
    kf_tpl_add_param(sp, prefix, "mc", KF_ROLE_NONE, mcv, nmc, pick_fit(mcv, nmc, 4L * kc0, l2 / 2));

    long ncv[] = {256, 512, 1024, 2048, 4096, 8192, 16384};
    int nnc = filter_values(ncv, 7, round_up(d->N > 0 ? d->N : 1, nr0));
    /* each thread packs its own B panel; together they should use under half of L3, where
     * the panel serves several M blocks. With one M block (a convolution's few output
     * channels) it serves one pass of the micro-kernel: then it should stay in L2, so that
     * packing it and reading it back never reach memory (KernelBench 58's conv_transpose,
     * M 16: 2.3x faster with the panel at a quarter of L2 than at 7936 columns). */
    int64_t mc0 = mcv[pick_fit(mcv, nmc, 4L * kc0, l2 / 2)];
    int64_t nbudget = d->M <= mc0 ? l2 / 4 : l3 / (4 * nthreads);
    kf_tpl_add_param(sp, prefix, "nc", KF_ROLE_NONE, ncv, nnc, pick_fit(ncv, nnc, 4L * kc0, nbudget));

    if (d->gb.on) {
        /* zs: the micro-kernel skips the k rows of a packed B strip that are all zero (a
         * padded source: a stride-1 conv_transpose's taps over its padding), where A's block
         * is finite, so that 0 * A adds exactly nothing. On by default where the source is a
         * padding's result; elsewhere the test costs 2-5% (design note "zero rows of a
         * gathered B skipped") */
        long zsv[] = {0, 1};
        kf_tpl_add_param(sp, prefix, "zs", KF_ROLE_NONE, zsv, 2, d->gb.padded ? 1 : 0);
    }

    if (nthreads > 1) {
        /* tasks per thread: more tasks balance a busy machine, at the price of packing
         * B (or A) once more per extra task */
        long split[] = {1, 2, 4};
        kf_tpl_add_param(sp, prefix, "split", KF_ROLE_SPLIT, split, 3, 0);
    }
}

/* ---- emitter ----------------------------------------------------------------------- */

/* Everything the generated code needs, decided at emit time. */
typedef struct mm_plan {
    const kf_matmul_desc *d;
    const char *name;
    int threads, vl;
    int mr, nr, nv;
    int64_t kc, nc;      /* balanced K slice and N panel sizes */
    int64_t per;         /* MR strips per M block, at most */
    int64_t strips, nstrips; /* MR strips of M, NR strips of N */
    int64_t rpm, tm, tn; /* tasks per matrix = tm (over M) x tn (over N) */
    int64_t apf, bpf;    /* floats of one thread's A block and B panel buffers */
    int epi;             /* the store stage hands complete sums to @_epi (kf_matmul_desc.epi) */
    int64_t colmin, colmax; /* a gathered B's least and greatest column offsets */
    int zs;              /* skip a B strip's all-zero k rows (gathered B only) */
    int64_t nzf;         /* floats of one thread's zero-row flags (a byte per strip and k) */
} mm_plan;

/* printf into out, with every '@' replaced by the stage's function name. */
static void put(kf_buf *out, const mm_plan *pl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put(kf_buf *out, const mm_plan *pl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kf_tpl_vput_named(out, pl->name, fmt, ap);
    va_end(ap);
}

static long long LL(int64_t v) { return (long long)v; }

/* A batch operand's element offset for output matrix bt: decompose bt over the merged
 * batch dims and dot with the operand's strides (in matrices). */
static void emit_batch_offset(kf_buf *out, const mm_plan *pl, const char *which,
                              const int64_t *bstride, int64_t msize) {
    const kf_matmul_desc *d = pl->d;
    put(out, pl, "static inline int64_t @_%soff(int64_t bt)\n{\n", which);
    int all_zero = 1, dense = 1;
    int64_t want = 1;
    for (int i = d->nbdims - 1; i >= 0; i--) {
        if (d->bdim[i] != 1 && bstride[i] != 0) all_zero = 0;
        if (d->bdim[i] != 1 && bstride[i] != want) dense = 0;
        want *= d->bdim[i];
    }
    if (d->batch == 1 || all_zero) {
        put(out, pl, "    (void)bt;\n    return 0;\n}\n\n");
    } else if (dense) {
        put(out, pl, "    return bt * %lldLL;\n}\n\n", LL(msize));
    } else {
        put(out, pl, "    int64_t q = bt, m = 0;\n");
        for (int i = d->nbdims - 1; i >= 0; i--) {
            if (d->bdim[i] == 1) continue;
            if (bstride[i] != 0)
                put(out, pl, "    m += (q %% %lldLL) * %lldLL;\n", LL(d->bdim[i]),
                    LL(bstride[i]));
            put(out, pl, "    q /= %lldLL;\n", LL(d->bdim[i]));
        }
        put(out, pl, "    (void)q;\n    return m * %lldLL;\n}\n\n", LL(msize));
    }
}

void kf_tpl_mm_batch_offset(kf_buf *out, const char *fname, const kf_matmul_desc *d, const char *which,
                            const int64_t *bstride, int64_t msize) {
    mm_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.d = d;
    pl.name = fname;
    emit_batch_offset(out, &pl, which, bstride, msize);
}

/* A gathered B's element offsets (kf_mm_gather): of batch matrix bt (with the base), of
 * row k and of column j, each a mixed-radix decode over its atoms, inner atom last. */
static void emit_radix(kf_buf *out, const mm_plan *pl, const char *fn, const char *var, int n,
                       const int64_t *dim, const int64_t *str, int64_t base) {
    put(out, pl, "static inline int64_t @_%s(int64_t %s)\n{\n    int64_t o = %lldLL;\n", fn, var, LL(base));
    for (int i = n - 1; i >= 0; i--) {
        if (dim[i] == 1) continue;
        if (i == 0)
            put(out, pl, "    o += %s * %lldLL;\n", var, LL(str[i]));
        else
            put(out, pl, "    o += (%s %% %lldLL) * %lldLL;\n    %s /= %lldLL;\n", var, LL(dim[i]), LL(str[i]), var,
                LL(dim[i]));
    }
    put(out, pl, "    (void)%s;\n    return o;\n}\n\n", var);
}

static void emit_gather_offsets(kf_buf *out, const mm_plan *pl) {
    const kf_matmul_desc *d = pl->d;
    const kf_mm_gather *gb = &d->gb;
    emit_radix(out, pl, "boff", "bt", d->nbdims, d->bdim, gb->bstr, gb->base);
    emit_radix(out, pl, "brow", "k", gb->nrow, gb->rdim, gb->rstr, 0);
    emit_radix(out, pl, "bcol", "j", gb->ncol, gb->cdim, gb->cstr, 0);
}

/* The plain triple loop: the baseline variant, and the fallback when scratch memory
 * cannot be allocated. */
static void emit_naive(kf_buf *out, const mm_plan *pl, const char *fname) {
    const kf_matmul_desc *d = pl->d;
    char aix[64], bix[64];
    if (d->ta)
        snprintf(aix, sizeof aix, "k * %lldLL + i", LL(d->M));
    else
        snprintf(aix, sizeof aix, "i * %lldLL + k", LL(d->K));
    if (d->gb.on)
        snprintf(bix, sizeof bix, "@_brow(k) + @_bcol(j)");
    else if (d->tb)
        snprintf(bix, sizeof bix, "j * %lldLL + k", LL(d->K));
    else
        snprintf(bix, sizeof bix, "k * %lldLL + j", LL(d->N));
    if (pl->epi)
        put(out, pl, "static void %s(const float *restrict A, const float *restrict B, float *C, const @_ex *ex)\n{\n",
            fname);
    else
        put(out, pl,
            "static void %s(const float *restrict A, const float *restrict B, float *restrict C)\n"
            "{\n",
            fname);
    if (pl->threads > 1)
        put(out, pl, "#pragma omp parallel for collapse(2) num_threads(%d)\n", pl->threads);
    if (pl->epi) { /* rows in runs of 64 sums, each run through the epilogue */
        put(out, pl,
            "    for (int64_t bt = 0; bt < %lldLL; bt++)\n"
            "        for (int64_t i = 0; i < %lldLL; i++) {\n"
            "            const float *restrict a = A + @_aoff(bt);\n"
            "            const float *restrict b = B + @_boff(bt);\n"
            "            const int64_t f = bt * %lldLL + i * %lldLL;\n"
            "            float t[64];\n"
            "            (void)C;\n"
            "            for (int64_t j0 = 0; j0 < %lldLL; j0 += 64) {\n"
            "                const int64_t n = %lldLL - j0 < 64 ? %lldLL - j0 : 64;\n"
            "                for (int64_t jj = 0; jj < n; jj++) {\n"
            "                    const int64_t j = j0 + jj;\n"
            "                    float s = 0.0f;\n"
            "                    for (int64_t k = 0; k < %lldLL; k++)\n"
            "                        s += a[%s] * b[%s];\n"
            "                    t[jj] = s;\n"
            "                }\n"
            "                @_epi(ex, f + j0, n, t);\n"
            "            }\n"
            "        }\n"
            "}\n\n",
            LL(d->batch), LL(d->M), LL(d->M * d->N), LL(d->N), LL(d->N), LL(d->N), LL(d->N), LL(d->K), aix, bix);
        return;
    }
    put(out, pl,
        "    for (int64_t bt = 0; bt < %lldLL; bt++)\n"
        "        for (int64_t i = 0; i < %lldLL; i++) {\n"
        "            const float *restrict a = A + @_aoff(bt);\n"
        "            const float *restrict b = B + @_boff(bt);\n"
        "            float *restrict c = C + bt * %lldLL + i * %lldLL;\n"
        "            for (int64_t j = 0; j < %lldLL; j++) {\n"
        "                float s = 0.0f;\n"
        "                for (int64_t k = 0; k < %lldLL; k++)\n"
        "                    s += a[%s] * b[%s];\n"
        "                c[j] = s;\n"
        "            }\n"
        "        }\n"
        "}\n\n",
        LL(d->batch), LL(d->M), LL(d->M * d->N), LL(d->N), LL(d->N), LL(d->K), aix, bix);
}

/* Packing walks the source in its storage order, so every read stream is sequential:
 * a row-major operand is read one row at a time and scattered into the strips (a strided
 * walk down a column of rows would miss the cache on every row, and hardware prefetchers
 * do not follow strides across pages). */
static void emit_pack_a(kf_buf *out, const mm_plan *pl) {
    const kf_matmul_desc *d = pl->d;
    int mr = pl->mr;
    put(out, pl,
        "/* A block rows [ic, ic+mc) x depth [pc, pc+kc) into MR-tall strips, zero-padded */\n"
        "static void @_pack_a(const float *restrict a, float *restrict ap, int64_t ic,\n"
        "                     int64_t mc, int64_t pc, int64_t kc)\n"
        "{\n");
    if (d->ta) {
        /* A is [K, M]: row k of the source holds the block's column k, contiguous in i */
        put(out, pl,
            "    const int64_t full = mc / %d * %d;\n"
            "    for (int64_t k = 0; k < kc; k++) {\n"
            "        const float *restrict s = a + (pc + k) * %lldLL + ic;\n"
            "        for (int64_t ir = 0; ir < full; ir += %d)\n"
            "            for (int64_t r = 0; r < %d; r++) ap[ir * kc + k * %d + r] = s[ir + r];\n"
            /* the tail as two loops, not "full + r < mc ? s[full + r] : 0": GCC 12 if-converts
             * that select into an unconditional vector load, which reads past the end of A
             * (a fault at a page edge, seen on an AVX-512 machine) */
            "        if (full < mc) {\n"
            "            int64_t r = 0;\n"
            "            for (; r < mc - full; r++) ap[full * kc + k * %d + r] = s[full + r];\n"
            "            for (; r < %d; r++) ap[full * kc + k * %d + r] = 0.0f;\n"
            "        }\n"
            "    }\n"
            "}\n\n",
            mr, mr, LL(d->M), mr, mr, mr, mr, mr, mr);
    } else {
        /* A is [M, K]: MR row streams per strip, each sequential in k */
        put(out, pl,
            "    for (int64_t ir = 0; ir < mc; ir += %d) {\n"
            "        const int64_t mr = mc - ir < %d ? mc - ir : %d;\n"
            "        float *restrict d = ap + ir * kc;\n"
            "        const float *restrict s = a + (ic + ir) * %lldLL + pc;\n"
            "        if (mr == %d) {\n"
            "            for (int64_t k = 0; k < kc; k++)\n"
            "                for (int64_t r = 0; r < %d; r++) d[k * %d + r] = s[r * %lldLL + k];\n"
            "        } else {\n"
            "            for (int64_t k = 0; k < kc; k++)\n"
            "                for (int64_t r = 0; r < %d; r++)\n"
            "                    d[k * %d + r] = r < mr ? s[r * %lldLL + k] : 0.0f;\n"
            "        }\n"
            "    }\n"
            "}\n\n",
            mr, mr, mr, LL(d->K), mr, mr, mr, LL(d->K), mr, mr, LL(d->K));
    }
}

static void emit_pack_b(kf_buf *out, const mm_plan *pl) {
    const kf_matmul_desc *d = pl->d;
    int nr = pl->nr;
    if (pl->zs) put(out, pl, "#if defined(__AVX__) || defined(__SSE4_1__)\n#include <immintrin.h>\n#endif\n");
    put(out, pl,
        "/* B panel columns [jc, jc+nc) x depth [pc, pc+kc) into NR-wide strips, zero-padded */\n"
        "static void @_pack_b(const float *restrict b, float *restrict bp, int64_t jc,\n"
        "                     int64_t nc, int64_t pc, int64_t kc%s)\n"
        "{\n"
        "    const int64_t full = nc / %d * %d;\n",
        pl->zs ? ", uint16_t *restrict zi" : "", nr, nr);
    if (d->gb.on) {
        /* B gathered: the panel's column offsets once, then row k of the panel is the
         * source at row k's offset plus those. The panel is copied a vector (VL columns)
         * at a time, each vector of one of three kinds, decided once per call from the
         * offsets: 0, its columns consecutive in the source (one load); 1, two runs of
         * consecutive columns (a convolution's output row ends inside it): two loads, each
         * as if its run went on through the whole vector, and a select; 2, anything else
         * (a strided convolution's runs of one), element by element. A kind-1 load reads
         * up to VL-1 elements beyond its run, but only where those lie between the
         * matrix's least and greatest column offsets (COLMIN, COLMAX: both are columns of
         * every row k, so a read in between stays inside the source); else kind 2.
         * Before, strips of two or more runs were copied element by element (the compiler
         * made gathers) or run by run: with small output channel counts (M 16, one M
         * block) the packing of every B element once outweighed the micro-kernel, e.g.
         * KernelBench 77's conv_transpose3d, runs of 20 on 24-wide strips
         * (docs/design-notes.md, "gathered B packed by vectors"). */
        put(out, pl,
            "    typedef int32_t @_vi __attribute__((vector_size(%d)));\n"
            "    int64_t off[%lldLL];\n"
            "    int64_t oa[%lldLL], ob[%lldLL];\n"
            "    unsigned char kind[%lldLL], cut[%lldLL];\n"
            "    const @_vi iota = {",
            pl->vl * 4, LL(pl->nc), LL(pl->nc / pl->vl + 1), LL(pl->nc / pl->vl + 1), LL(pl->nc / pl->vl + 1),
            LL(pl->nc / pl->vl + 1));
        for (int l = 0; l < pl->vl; l++) put(out, pl, "%s%d", l ? ", " : "", l);
        put(out, pl,
            "};\n"
            "    for (int64_t j = 0; j < nc; j++) off[j] = @_bcol(jc + j);\n"
            "    for (int64_t q = 0; q < full / %d; q++) {\n"
            "        const int64_t *o = off + q * %d;\n"
            "        int c = 1;\n"
            "        while (c < %d && o[c] == o[0] + c) c++;\n"
            "        const int64_t o2 = c < %d ? o[c] - c : o[0];\n"
            "        int two = o[0] + %d <= %lldLL && o2 >= %lldLL;\n"
            "        for (int l = c; l < %d; l++) two &= o[l] == o2 + l;\n"
            "        kind[q] = (unsigned char)(c == %d ? 0 : two ? 1 : 2);\n"
            "        oa[q] = o[0];\n"
            "        ob[q] = o2;\n"
            "        cut[q] = (unsigned char)c;\n"
            "    }\n",
            pl->vl, pl->vl, pl->vl, pl->vl, pl->vl - 1, LL(pl->colmax), LL(pl->colmin), pl->vl, pl->vl);
        /* zs: each strip's rows with any value not +-0 (NaN included), in order: their count
         * at zi[q * (kc + 1)], their indices after it. The vectors of one strip's row are
         * consecutive in q: their OR is tested when the strip's last one is written (a
         * second pass over the panel cost 40 ms of 127 in KernelBench 77's GEMM, one core),
         * with one vector test where the ISA has it, and the index stored without a branch. */
        const char *test = pl->vl == 16  ? "__AVX512F__"
                           : pl->vl == 8 ? "__AVX__"
                                         : "__SSE4_1__";
        const char *testf = pl->vl == 16  ? "_mm512_test_epi32_mask((__m512i)zo, (__m512i)zo) != 0"
                            : pl->vl == 8 ? "!_mm256_testz_si256((__m256i)zo, (__m256i)zo)"
                                          : "!_mm_testz_si128((__m128i)zo, (__m128i)zo)";
        char note[512];
        snprintf(note, sizeof note,
                 "zo &= 0x7fffffff;\n"
                 "#if defined(%s)\n"
                 "                const int any = %s;\n"
                 "#else\n"
                 "                int any = 0;\n"
                 "                for (int l = 0; l < %d; l++) any |= zo[l] != 0;\n"
                 "#endif\n",
                 test, testf, pl->vl);
        if (pl->zs)
            put(out, pl, "    for (int64_t q = 0; q < (nc + %d) / %d; q++) zi[q * (kc + 1)] = 0;\n", nr - 1, nr);
        put(out, pl,
            "    for (int64_t k = 0; k < kc; k++) {\n"
            "        const float *restrict s = b + @_brow(pc + k);\n");
        if (pl->zs) put(out, pl, "        @_vi zo = {0};\n");
        put(out, pl,
            "        for (int64_t q = 0; q < full / %d; q++) {\n"
            "            float *restrict d = bp + (q / %d) * %dLL * kc + k * %d + (q %% %d) * %d;\n"
            "            if (kind[q] == 0) {\n"
            "                *(@_vfu *)d = *(const @_vfu *)(s + oa[q]);\n"
            "            } else if (kind[q] == 1) {\n"
            "                const @_vi m = iota < ((@_vi){0} + cut[q]);\n"
            "                const @_vi x = (@_vi)*(const @_vfu *)(s + oa[q]);\n"
            "                const @_vi y = (@_vi)*(const @_vfu *)(s + ob[q]);\n"
            "                *(@_vfu *)d = (@_vf)((m & x) | (~m & y));\n"
            "            } else {\n"
            "                const int64_t *o = off + q * %d;\n"
            "                for (int l = 0; l < %d; l++) d[l] = s[o[l]];\n"
            "            }\n",
            pl->vl, nr / pl->vl, nr, nr, nr / pl->vl, pl->vl, pl->vl, pl->vl);
        if (pl->zs)
            put(out, pl,
                "            zo |= (@_vi)*(const @_vfu *)d;\n"
                "            if (q %% %d == %d) {\n"
                "                %s"
                "                uint16_t *restrict zq = zi + (q / %d) * (kc + 1);\n"
                "                zq[1 + zq[0]] = (uint16_t)k;\n"
                "                zq[0] = (uint16_t)(zq[0] + any);\n"
                "                zo = (@_vi){0};\n"
                "            }\n",
                nr / pl->vl, nr / pl->vl - 1, note, nr / pl->vl);
        put(out, pl,
            "        }\n"
            "        if (full < nc) {\n"
            "            float *restrict d = bp + full * kc + k * %d;\n"
            "            int64_t j = 0;\n"
            "            for (; j < nc - full; j++) d[j] = s[off[full + j]];\n"
            "            for (; j < %d; j++) d[j] = 0.0f;\n",
            nr, nr);
        if (pl->zs) {
            for (int v = 0; v < pl->nv; v++)
                put(out, pl, "            zo |= (@_vi)*(const @_vfu *)(d + %d);\n", v * pl->vl);
            put(out, pl,
                "            {\n"
                "                %s"
                "                uint16_t *restrict zq = zi + (full / %d) * (kc + 1);\n"
                "                zq[1 + zq[0]] = (uint16_t)k;\n"
                "                zq[0] = (uint16_t)(zq[0] + any);\n"
                "            }\n",
                note, nr);
        }
        put(out, pl, "        }\n");
        put(out, pl, "    }\n}\n\n");
    } else if (!d->tb) {
        /* B is [K, N]: row k of the source is the panel's row k, contiguous in j */
        put(out, pl,
            "    for (int64_t k = 0; k < kc; k++) {\n"
            "        const float *restrict s = b + (pc + k) * %lldLL + jc;\n"
            "        for (int64_t jr = 0; jr < full; jr += %d)\n"
            "            for (int64_t j = 0; j < %d; j++) bp[jr * kc + k * %d + j] = s[jr + j];\n"
            "        if (full < nc) {\n" /* two loops: see the tail of pack_a */
            "            int64_t j = 0;\n"
            "            for (; j < nc - full; j++) bp[full * kc + k * %d + j] = s[full + j];\n"
            "            for (; j < %d; j++) bp[full * kc + k * %d + j] = 0.0f;\n"
            "        }\n"
            "    }\n"
            "}\n\n",
            LL(d->N), nr, nr, nr, nr, nr, nr);
    } else {
        /* B is [N, K]: row j of the source is the panel's column j, contiguous in k */
        put(out, pl,
            "    for (int64_t jr = 0; jr < nc; jr += %d) {\n"
            "        float *restrict d = bp + jr * kc;\n"
            "        for (int64_t j = 0; j < %d; j++) {\n"
            "            if (jr + j < nc) {\n"
            "                const float *restrict s = b + (jc + jr + j) * %lldLL + pc;\n"
            "                for (int64_t k = 0; k < kc; k++) d[k * %d + j] = s[k];\n"
            "            } else {\n"
            "                for (int64_t k = 0; k < kc; k++) d[k * %d + j] = 0.0f;\n"
            "            }\n"
            "        }\n"
            "    }\n"
            "    (void)full;\n"
            "}\n\n",
            nr, nr, LL(d->K), nr, nr);
    }
}

/* The tile's vector types: @_vf of vl floats (@_vfu unaligned), and for vl 16 also @_vh of
 * 8 (the micro-kernel's text for a build without AVX-512, emit_ukr_strided). */
static void emit_vec_types(kf_buf *out, const mm_plan *pl) {
    put(out, pl,
        "typedef float @_vf __attribute__((vector_size(%d)));\n"
        "typedef float @_vfu __attribute__((vector_size(%d), aligned(4)));\n",
        pl->vl * 4, pl->vl * 4);
    if (pl->vl == 16)
        put(out, pl,
            "typedef float @_vh __attribute__((vector_size(32)));\n"
            "typedef float @_vhu __attribute__((vector_size(32), aligned(4)));\n");
    put(out, pl, "\n");
}

/* The MRxNR register micro-kernel: acc = sum_k a[k][0..MR) x b[k][0..NR); then C = acc
 * (first) or C += acc, straight into C for a full tile, through a temporary otherwise. */
static void emit_ukr_strided(kf_buf *out, const mm_plan *pl, const char *suffix, int64_t asi, int64_t ask, int zskip);
static void emit_ukr(kf_buf *out, const mm_plan *pl) { emit_ukr_strided(out, pl, "", 1, pl->mr, 0); }

/* The micro-kernel's text with its tile held in vectors of vl floats of type @_<vt> (and
 * @_<vt>u, unaligned): pl->vl, or a part of it (emit_ukr_strided). */
static void emit_ukr_regs(kf_buf *out, const mm_plan *pl, const char *suffix, int64_t asi, int64_t ask, int zskip,
                          int vl, const char *vt) {
    const kf_matmul_desc *d = pl->d;
    int mr = pl->mr, nr = pl->nr, nv = nr / vl;
    put(out, pl,
        "static inline __attribute__((always_inline)) void\n"
        "@_ukr%s(int64_t kc, const float *restrict a, const float *restrict b,%s\n"
        "      float *%sc, int64_t mr, int64_t nr, int first%s)\n"
        "{\n", suffix, zskip ? " const uint16_t *restrict zi," : "", pl->epi ? "" : "restrict ",
        pl->epi ? ", const @_ex *ex, int64_t cf, int last" : "");
    for (int i = 0; i < mr; i++) {
        put(out, pl, "    @_%s", vt);
        for (int v = 0; v < nv; v++) put(out, pl, "%s c%d_%d = {0}", v ? "," : "", i, v);
        put(out, pl, ";\n");
    }
    /* C's rows are a large stride apart: fetch the tile while the k loop runs */
    put(out, pl,
        "    for (int64_t i = 0; i < mr; i++) {\n"
        "        __builtin_prefetch(c + i * %lldLL, 1, 3);\n"
        "        __builtin_prefetch(c + i * %lldLL + (nr - 1), 1, 3);\n"
        "    }\n",
        LL(d->N), LL(d->N));
    if (zskip) { /* the listed rows only: no branch per k */
        put(out, pl,
            "    (void)kc;\n"
            "    for (int64_t t = 0; t < zi[0]; t++) {\n"
            "        const int64_t k = zi[1 + t];\n"
            "        const float *restrict ak = a + k * %lldLL;\n"
            "        const float *restrict bk = b + k * %d;\n",
            LL(ask), nr);
    } else {
        put(out, pl, "    for (int64_t k = 0; k < kc; k++) {\n"
                     "        const float *restrict ak = a;\n"
                     "        const float *restrict bk = b;\n");
    }
    for (int v = 0; v < nv; v++)
        put(out, pl, "        const @_%s b%d = *(const @_%s *)(bk + %d);\n", vt, v, vt, v * vl);
    for (int i = 0; i < mr; i++) {
        put(out, pl, "        {\n            const float ai = ak[%lldLL];\n", LL(i * asi));
        for (int v = 0; v < nv; v++) put(out, pl, "            c%d_%d += b%d * ai;\n", i, v, v);
        put(out, pl, "        }\n");
    }
    if (zskip) put(out, pl, "    }\n");
    else put(out, pl, "        a += %lldLL;\n        b += %d;\n    }\n", LL(ask), nr);
    if (pl->epi) { /* the last K slice: the complete sums go through the epilogue, a row at a time */
        put(out, pl, "    if (last) {\n        float t[%d] __attribute__((aligned(64)));\n", mr * nr);
        for (int i = 0; i < mr; i++)
            for (int v = 0; v < nv; v++)
                put(out, pl, "        *(@_%s *)(t + %d) = c%d_%d;\n", vt, i * nr + v * vl, i, v);
        put(out, pl,
            "        for (int64_t i = 0; i < mr; i++) {\n"
            "            if (!first)\n"
            "                for (int64_t j = 0; j < nr; j++) t[i * %d + j] += c[i * %lldLL + j];\n"
            "            @_epi(ex, cf + i * %lldLL, nr, t + i * %d);\n"
            "        }\n"
            "        return;\n"
            "    }\n",
            nr, LL(d->N), LL(d->N), nr);
    }
    put(out, pl, "    if (mr == %d && nr == %d) {\n        if (first) {\n", mr, nr);
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            put(out, pl, "            *(@_%su *)(c + %lldLL) = c%d_%d;\n", vt,
                LL((int64_t)i * d->N + v * vl), i, v);
    put(out, pl, "        } else {\n");
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            put(out, pl, "            *(@_%su *)(c + %lldLL) += c%d_%d;\n", vt,
                LL((int64_t)i * d->N + v * vl), i, v);
    put(out, pl, "        }\n    } else {\n        float t[%d] __attribute__((aligned(64)));\n",
        mr * nr);
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            put(out, pl, "        *(@_%s *)(t + %d) = c%d_%d;\n", vt, i * nr + v * vl, i, v);
    put(out, pl,
        "        for (int64_t i = 0; i < mr; i++)\n"
        "            for (int64_t j = 0; j < nr; j++)\n"
        "                c[i * %lldLL + j] = first ? t[i * %d + j] : c[i * %lldLL + j] + t[i * %d + j];\n"
        "    }\n"
        "}\n\n",
        LL(d->N), nr, LL(d->N), nr);
}

/* ... A's element (i, k) at a[i * asi + k * ask]: a packed strip (1, MR), or A itself;
 * zskip: the k steps whose flag z[k] is 0 (the strip's row k all zero) are skipped.
 * A 64-byte tile vector (vl 16, chosen for AVX-512) gets a second text for a build without
 * AVX-512 (the memory check's, kf_verify_memcheck_flags): the same tile, loads and stores
 * in 32-byte halves. GCC 12 keeps a loop-carried vector wider than the target's registers
 * in the stack frame and copies it through general registers 16 bytes at a time, and
 * builds the broadcast lane by lane in memory: the 64-byte text ran 30-50x slower than
 * the halves (docs/benchmarks/loop.md, "The memory check of a 64-byte register tile"). */
static void emit_ukr_strided(kf_buf *out, const mm_plan *pl, const char *suffix, int64_t asi, int64_t ask, int zskip) {
    if (pl->vl != 16) {
        emit_ukr_regs(out, pl, suffix, asi, ask, zskip, pl->vl, "vf");
        return;
    }
    put(out, pl, "#ifdef __AVX512F__\n");
    emit_ukr_regs(out, pl, suffix, asi, ask, zskip, pl->vl, "vf");
    put(out, pl, "#else /* the same tile in 32-byte halves (no 64-byte registers in this build) */\n");
    emit_ukr_regs(out, pl, suffix, asi, ask, zskip, pl->vl / 2, "vh");
    put(out, pl, "#endif\n");
}

/* One task: C rows [i0, i1) x columns [j0, j1) of one matrix, start to finish, with the
 * calling thread's own packing buffers (so threads never wait for each other). */
static void emit_gemm(kf_buf *out, const mm_plan *pl) {
    const kf_matmul_desc *d = pl->d;
    char ex_args[128] = ""; /* the epilogue's context, the tile's flat index, "the K-sum is complete" */
    if (pl->epi)
        snprintf(ex_args, sizeof ex_args, ", ex, cf0 + (ic + ir) * %lldLL + jc + jr, pc + kc >= %lldLL", LL(d->N),
                 LL(d->K));
    put(out, pl,
        "static void @_gemm(const float *restrict a, const float *restrict b, float *%sc,\n"
        "                   float *restrict ap, float *restrict bp, int64_t i0, int64_t i1,\n"
        "                   int64_t j0, int64_t j1%s)\n"
        "{\n",
        pl->epi ? "" : "restrict ", pl->epi ? ", const @_ex *ex, int64_t cf0" : "");
    if (pl->zs) /* the panel's zero-row flags after the panel, in the thread's buffer */
        put(out, pl, "    uint16_t *restrict zi = (uint16_t *)(bp + %lldLL);\n", LL(pl->bpf));
    put(out, pl,
        "    /* M blocks of at most %lld strips, balanced to whole strips */\n"
        "    const int64_t rs = (i1 - i0 + %d) / %d;\n"
        "    const int64_t nmb = (rs + %lld) / %lld;\n"
        "    for (int64_t jc = j0; jc < j1; jc += %lldLL) {\n"
        "        const int64_t nc = j1 - jc < %lldLL ? j1 - jc : %lldLL;\n"
        "        const int64_t ns = (nc + %d) / %d;\n"
        "        for (int64_t pc = 0; pc < %lldLL; pc += %lldLL) {\n"
        "            const int64_t kc = %lldLL - pc < %lldLL ? %lldLL - pc : %lldLL;\n"
        "            @_pack_b(b, bp, jc, nc, pc, kc%s);\n"
        "            for (int64_t ib = 0; ib < nmb; ib++) {\n"
        "                const int64_t ic = i0 + (ib * rs / nmb) * %d;\n"
        "                int64_t ie = i0 + ((ib + 1) * rs / nmb) * %d;\n"
        "                if (ie > i1) ie = i1;\n"
        "                const int64_t mc = ie - ic;\n"
        "                @_pack_a(a, ap, ic, mc, pc, kc);\n",
        LL(pl->per), pl->mr - 1, pl->mr, LL(pl->per - 1), LL(pl->per), LL(pl->nc), LL(pl->nc),
        LL(pl->nc), pl->nr - 1, pl->nr, LL(d->K), LL(pl->kc), LL(d->K), LL(pl->kc), LL(d->K),
        LL(pl->kc), pl->zs ? ", zi" : "", pl->mr, pl->mr);
    if (pl->zs) /* skipping a zero row of B leaves out 0 * A exactly only where A is finite */
        put(out, pl, "                const int zk = @_finite(ap, (mc + %d) / %d * %d * kc);\n", pl->mr - 1, pl->mr,
            pl->mr);
    put(out, pl,
        "                for (int64_t s = 0; s < ns; s++) {\n"
        "                    const int64_t jr = s * %d;\n"
        "                    const int64_t nr = nc - jr < %d ? nc - jr : %d;\n"
        "                    const float *restrict bs = bp + s * %dLL * kc;\n"
        "                    float *%scs = c + ic * %lldLL + jc + jr;\n"
        "                    for (int64_t ir = 0; ir < mc; ir += %d)\n",
        pl->nr, pl->nr, pl->nr, pl->nr, pl->epi ? "" : "restrict ", LL(d->N), pl->mr);
    if (pl->zs)
        put(out, pl,
            "                        if (zk)\n"
            "                            @_ukr_z(kc, ap + ir * kc, bs, zi + s * (kc + 1), cs + ir * %lldLL,\n"
            "                                    mc - ir < %d ? mc - ir : %d, nr, pc == 0%s);\n"
            "                        else\n",
            LL(d->N), pl->mr, pl->mr, ex_args);
    put(out, pl,
        "                        @_ukr(kc, ap + ir * kc, bs, cs + ir * %lldLL,\n"
        "                              mc - ir < %d ? mc - ir : %d, nr, pc == 0%s);\n"
        "                }\n"
        "            }\n"
        "        }\n"
        "    }\n"
        "}\n\n",
        LL(d->N), pl->mr, pl->mr, ex_args);
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Decide blocks and the task grid from the parameter values and the real sizes. */
static void make_plan(mm_plan *pl, const kf_matmul_desc *d, const kf_space *sp,
                      const kf_point *p, const char *prefix) {
    long mk = kf_tpl_get(sp, p, prefix, "mk");
    pl->vl = (int)kf_tpl_get(sp, p, prefix, "vl");
    assert(pl->vl == 4 || pl->vl == 8 || pl->vl == 16);
    pl->mr = (int)(mk / 100);
    pl->nr = (int)(mk % 100);
    assert(pl->mr >= 1 && pl->nr >= pl->vl && pl->nr % pl->vl == 0);
    pl->nv = pl->nr / pl->vl;
    char full[64]; /* split exists only when the device has several threads */
    snprintf(full, sizeof full, "%ssplit", prefix ? prefix : "");
    int64_t split = kf_point_get(sp, p, full, 1);
    if (split < 1) split = 1;
    int64_t T = pl->threads;
    int64_t K = d->K > 0 ? d->K : 1, M = d->M > 0 ? d->M : 1, N = d->N > 0 ? d->N : 1;
    pl->strips = ceil_div(M, pl->mr);
    pl->nstrips = ceil_div(N, pl->nr);
    for (int i = 0; d->gb.on && i < d->gb.ncol; i++) {
        int64_t span = (d->gb.cdim[i] - 1) * d->gb.cstr[i];
        if (span > 0) pl->colmax += span;
        else pl->colmin += span;
    }

    int64_t KC = kf_tpl_get(sp, p, prefix, "kc"), MC = kf_tpl_get(sp, p, prefix, "mc"),
            NC = kf_tpl_get(sp, p, prefix, "nc");

    /* tasks per matrix: the fewest that make batch*rpm a multiple of the thread count,
     * times split; laid out tm x tn to pack the least: a task packs its rows of A once
     * per NC panel and its columns of B once */
    pl->rpm = 1;
    if (T > 1) pl->rpm = split * (d->batch >= 8 * T ? 1 : T / gcd64(d->batch, T));
    pl->tm = 1;
    double best = -1;
    for (int64_t q = pl->rpm; q >= 1; q--) {
        if (pl->rpm % q) continue;
        int64_t tn = pl->rpm / q;
        if (q > pl->strips || (tn > pl->nstrips && q < pl->strips)) continue;
        int64_t rows = ceil_div(pl->strips, q) * pl->mr;
        int64_t cols = ceil_div(pl->nstrips, tn) * pl->nr;
        double cost = ((double)rows * (double)ceil_div(cols, NC) + (double)cols) * (double)K;
        if (best < 0 || cost < best) {
            best = cost;
            pl->tm = q;
        }
    }
    pl->tn = pl->rpm / pl->tm;

    pl->kc = ceil_div(K, ceil_div(K, KC));
    int64_t cols = ceil_div(pl->nstrips, pl->tn) * pl->nr; /* widest task */
    pl->nc = round_up(ceil_div(cols, ceil_div(cols, NC)), pl->nr);
    pl->per = MC / pl->mr > 0 ? MC / pl->mr : 1;
    int64_t rows_strips = ceil_div(pl->strips, pl->tm); /* tallest task */
    int64_t blk = rows_strips < pl->per ? rows_strips : pl->per;
    pl->apf = round_up(blk * pl->mr * pl->kc, 16);
    pl->bpf = round_up(pl->kc * pl->nc, 16);
    if (d->gb.on) {
        snprintf(full, sizeof full, "%szs", prefix ? prefix : "");
        pl->zs = kf_point_get(sp, p, full, 0) != 0;
    }
    if (pl->zs) pl->nzf = round_up(ceil_div(pl->nc / pl->nr * (pl->kc + 1), 2), 16);
}

/* Append the stage function fname for desc d at point p (see tpl.h for the signature).
 * The text is self-contained: it includes the headers it uses and prefixes every helper
 * with fname. Never fails; asserts when the space lacks this template's parameters. */
void kf_tpl_matmul_emit(kf_buf *out, const char *fname, const kf_matmul_desc *d,
                        const kf_space *sp, const kf_point *p, const char *prefix) {
    assert(out && fname && d && sp && p);
    assert(d->batch >= 1 && d->M >= 0 && d->N >= 0 && d->K >= 0);
    assert(d->nbdims >= 0 && d->nbdims <= KF_MAX_DIMS);
    mm_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.d = d;
    pl.name = fname;
    pl.epi = d->epi;
    pl.threads = (int)kf_tpl_get(sp, p, prefix, "threads");
    if (pl.threads < 1) pl.threads = 1;
    int naive = (int)kf_tpl_get(sp, p, prefix, "naive");
    make_plan(&pl, d, sp, p, prefix);

    put(out, &pl,
        "/* ---- @: matmul batch=%lld M=%lld N=%lld K=%lld ta=%d tb=%d%s ---- */\n"
        "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n"
        "#ifdef _OPENMP\n#include <omp.h>\n#endif\n\n",
        LL(d->batch), LL(d->M), LL(d->N), LL(d->K), d->ta, d->tb, d->gb.on ? " B gathered" : "");
    const char *csig = d->epi ? "float *C, const @_ex *ex" : "float *restrict C";
    if (d->epi && (d->M == 0 || d->N == 0 || d->K == 0)) { /* every sum is 0: the epilogue of zeros */
        put(out, &pl,
            "static void @(const float *restrict A, const float *restrict B, %s)\n"
            "{\n    (void)A;\n    (void)B;\n    (void)C;\n"
            "    static const float z[64];\n"
            "    for (int64_t f = 0; f < %lldLL; f += 64)\n"
            "        @_epi(ex, f, %lldLL - f < 64 ? %lldLL - f : 64, z);\n}\n\n",
            csig, LL(d->batch * d->M * d->N), LL(d->batch * d->M * d->N), LL(d->batch * d->M * d->N));
        return;
    }
    if (d->M == 0 || d->N == 0 || d->K == 0) {
        put(out, &pl,
            "static void @(const float *restrict A, const float *restrict B, float *restrict C)\n"
            "{\n    (void)A;\n    (void)B;\n    memset(C, 0, %lluULL);\n}\n\n",
            (unsigned long long)(d->batch * d->M * d->N * (int64_t)sizeof(float)));
        return;
    }
    emit_batch_offset(out, &pl, "a", d->a_bstride, d->M * d->K);
    if (d->gb.on)
        emit_gather_offsets(out, &pl);
    else
        emit_batch_offset(out, &pl, "b", d->b_bstride, d->K * d->N);
    if (naive) {
        put(out, &pl, "/* naive triple loop (threads=%d) */\n", pl.threads);
        emit_naive(out, &pl, fname);
        return;
    }
    char nv_name[160];
    snprintf(nv_name, sizeof nv_name, "%s_naive", fname);
    emit_naive(out, &pl, nv_name);

    int64_t ntasks = d->batch * pl.rpm;
    put(out, &pl,
        "/* packed GEMM: mk=%dx%d kc=%lld mc<=%lld nc=%lld threads=%d, %lld tasks of %lldx%lld "
        "per matrix */\n",
        pl.mr, pl.nr, LL(pl.kc), LL(pl.per * pl.mr), LL(pl.nc), pl.threads, LL(ntasks),
        LL(pl.tm), LL(pl.tn));
    emit_vec_types(out, &pl);
    emit_pack_a(out, &pl);
    emit_pack_b(out, &pl);
    emit_ukr(out, &pl);
    if (pl.zs) {
        emit_ukr_strided(out, &pl, "_z", 1, pl.mr, 1);
        /* 1 when no element of the n floats at p is infinite or NaN */
        put(out, &pl,
            "static int @_finite(const float *restrict p, int64_t n)\n"
            "{\n"
            "    int bad = 0;\n"
            "    for (int64_t i = 0; i < n; i++) {\n"
            "        uint32_t u;\n"
            "        memcpy(&u, p + i, 4);\n"
            "        bad |= (u & 0x7f800000u) == 0x7f800000u;\n"
            "    }\n"
            "    return !bad;\n"
            "}\n\n");
    }
    emit_gemm(out, &pl);

    int64_t per_thread = pl.apf + pl.bpf + pl.nzf;
    char ex_args[64] = "";
    if (d->epi) snprintf(ex_args, sizeof ex_args, ", ex, bt * %lldLL", LL(d->M * d->N));
    put(out, &pl,
        "static void @(const float *restrict A, const float *restrict B, %s)\n"
        "{\n"
        "    float *buf = aligned_alloc(64, %lldULL);\n"
        "    if (!buf) {\n        @_naive(A, B, C%s);\n        return;\n    }\n",
        csig, LL(per_thread * 4 * pl.threads), d->epi ? ", ex" : "");
    if (pl.threads > 1) put(out, &pl, "#pragma omp parallel num_threads(%d)\n", pl.threads);
    put(out, &pl,
        "    {\n"
        "#ifdef _OPENMP\n"
        "        const int64_t tid = omp_get_thread_num();\n"
        "#else\n"
        "        const int64_t tid = 0;\n"
        "#endif\n"
        "        float *restrict ap = buf + tid * %lldLL;\n"
        "        float *restrict bp = ap + %lldLL;\n",
        LL(per_thread), LL(pl.apf));
    if (pl.threads > 1)
        put(out, &pl, "#pragma omp for schedule(%s) nowait\n",
            ntasks > pl.threads ? "dynamic, 1" : "static");
    put(out, &pl,
        "        for (int64_t t = 0; t < %lldLL; t++) {\n"
        "            const int64_t bt = t / %lldLL, r = t %% %lldLL;\n"
        "            const int64_t rm = r / %lldLL, rn = r %% %lldLL;\n"
        "            const int64_t i0 = (rm * %lldLL / %lldLL) * %d;\n"
        "            int64_t i1 = ((rm + 1) * %lldLL / %lldLL) * %d;\n"
        "            const int64_t j0 = (rn * %lldLL / %lldLL) * %d;\n"
        "            int64_t j1 = ((rn + 1) * %lldLL / %lldLL) * %d;\n"
        "            if (i1 > %lldLL) i1 = %lldLL;\n"
        "            if (j1 > %lldLL) j1 = %lldLL;\n"
        "            if (i0 >= i1 || j0 >= j1) continue;\n"
        "            @_gemm(A + @_aoff(bt), B + @_boff(bt), C + bt * %lldLL, ap, bp, i0, i1, j0, j1%s);\n"
        "        }\n"
        "    }\n"
        "    free(buf);\n"
        "}\n\n",
        LL(ntasks), LL(pl.rpm), LL(pl.rpm), LL(pl.tn), LL(pl.tn), LL(pl.strips), LL(pl.tm),
        pl.mr, LL(pl.strips), LL(pl.tm), pl.mr, LL(pl.nstrips), LL(pl.tn), pl.nr,
        LL(pl.nstrips), LL(pl.tn), pl.nr, LL(d->M), LL(d->M), LL(d->N), LL(d->N),
        LL(d->M * d->N), ex_args);
}

/* ---- the GEMM as a part of a row-blocked chain (src/synth/tpl_chain.c) --------------- */

/* The parameters a chain's GEMM keeps (the chain decides threads and blocks): vl, mk and
 * kc, defaults as kf_tpl_matmul_params' except that mk pads N the least. */
void kf_tpl_matmul_params_inner(const kf_matmul_desc *d, const kf_device_info *dev, kf_space *sp,
                                const char *prefix) {
    assert(d && sp);
    int64_t l1 = dev && dev->l1d_bytes > 0 ? dev->l1d_bytes : 32 * 1024;
    int vl = kf_tpl_cpu_vl(dev);
    int nregs = dev_nregs(dev, vl);
    long vlv[] = {vl};
    kf_tpl_add_param(sp, prefix, "vl", KF_ROLE_VECTOR_LOADS, vlv, 1, 0);
    const mk_shape *tab = nregs >= 32 ? mk32 : mk16;
    int ntab = nregs >= 32 ? (int)(sizeof mk32 / sizeof mk32[0]) : (int)(sizeof mk16 / sizeof mk16[0]);
    long mkv[KF_MAX_PARAM_VALUES];
    int n = 0, tdef = nregs >= 32 ? MK32_DEF : MK16_DEF;
    /* a product no wider than one vector (a head dimension of 16 on AVX-512) gets one-vector
     * shapes too, first: the table's would compute half their columns into a temporary */
    if (d->N <= vl) {
        mkv[n++] = 8L * 100 + vl;
        mkv[n++] = (nregs >= 32 ? 16L : 12L) * 100 + vl;
    }
    int first = n;
    for (int i = 0; i < ntab; i++) mkv[n++] = tab[i].mr * 100L + tab[i].nv * vl;
    /* default: the least zero padding of N, then the table's default, then the largest */
    int mkdef = first + tdef;
    for (int i = 0; i < n; i++) {
        int64_t pad = round_up(d->N, mkv[i] % 100), best = round_up(d->N, mkv[mkdef] % 100);
        if (pad < best || (pad == best && mkdef != first + tdef &&
                           (mkv[i] / 100) * (mkv[i] % 100) > (mkv[mkdef] / 100) * (mkv[mkdef] % 100)))
            mkdef = i;
    }
    kf_tpl_add_param(sp, prefix, "mk", KF_ROLE_MICRO_KERNEL, mkv, n, mkdef);
    long kcv[] = {64, 128, 192, 256, 384, 512, 768};
    int nkc = filter_values(kcv, 7, d->K);
    kf_tpl_add_param(sp, prefix, "kc", KF_ROLE_CACHE_K, kcv, nkc,
                     pick_fit(kcv, nkc, 4L * (mkv[mkdef] % 100), l1 / 2));
    /* pa 0: the micro-kernel reads A's full strips where they are (a chain's block is
     * L2-resident, and its strides are constants), packing only a partial last strip */
    long pav[] = {0, 1};
    kf_tpl_add_param(sp, prefix, "pa", KF_ROLE_NONE, pav, 2, 0);
}

void kf_tpl_matmul_emit_panel(kf_buf *out, const char *fname, const kf_matmul_desc *d, const kf_space *sp,
                              const kf_point *p, const char *prefix, int64_t rows_max, kf_tpl_panel *info) {
    assert(out && fname && d && sp && p && info && rows_max >= 1);
    assert(!d->gb.on && d->M > 0 && d->N > 0 && d->K > 0);
    mm_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.d = d;
    pl.name = fname;
    pl.threads = 1;
    long mk = kf_tpl_get(sp, p, prefix, "mk");
    pl.vl = (int)kf_tpl_get(sp, p, prefix, "vl");
    pl.mr = (int)(mk / 100);
    pl.nr = (int)(mk % 100);
    assert(pl.vl == 4 || pl.vl == 8 || pl.vl == 16);
    assert(pl.mr >= 1 && pl.nr >= pl.vl && pl.nr % pl.vl == 0);
    pl.nv = pl.nr / pl.vl;
    int64_t KC = kf_tpl_get(sp, p, prefix, "kc");
    pl.kc = ceil_div(d->K, ceil_div(d->K, KC));
    pl.nc = round_up(d->N, pl.nr);
    pl.per = ceil_div(rows_max, pl.mr);
    info->mr = pl.mr;
    info->nr = pl.nr;
    info->kc = pl.kc;
    info->bp_floats = round_up(pl.nc * d->K, 16);
    info->ap_floats = round_up(pl.per * pl.mr * pl.kc, 16);

    put(out, &pl,
        "/* ---- @: a GEMM part, batch=%lld M=%lld N=%lld K=%lld ta=%d tb=%d: B packed whole once, "
        "then blocks of at most %lld rows; mk=%dx%d kc=%lld ---- */\n",
        LL(d->batch), LL(d->M), LL(d->N), LL(d->K), d->ta, d->tb, LL(rows_max), pl.mr, pl.nr, LL(pl.kc));
    emit_vec_types(out, &pl);
    emit_batch_offset(out, &pl, "a", d->a_bstride, d->M * d->K);
    emit_batch_offset(out, &pl, "b", d->b_bstride, d->K * d->N);
    int direct = kf_tpl_get(sp, p, prefix, "pa") == 0;
    emit_pack_a(out, &pl);
    emit_pack_b(out, &pl);
    emit_ukr(out, &pl);
    /* A's element (i, k): a[i * K + k], or a[k * M + i] when ta */
    int64_t asi = d->ta ? 1 : d->K, ask = d->ta ? d->M : 1;
    if (direct) emit_ukr_strided(out, &pl, "_d", asi, ask, 0);
    /* K slice pc of the whole B at bp + pc * NC, NR-wide strips of kc rows each */
    put(out, &pl,
        "static void @_pack_all(const float *restrict b, float *restrict bp)\n"
        "{\n"
        "    for (int64_t pc = 0; pc < %lldLL; pc += %lldLL) {\n"
        "        const int64_t kc = %lldLL - pc < %lldLL ? %lldLL - pc : %lldLL;\n"
        "        @_pack_b(b, bp + pc * %lldLL, 0, %lldLL, pc, kc);\n"
        "    }\n"
        "}\n\n",
        LL(d->K), LL(pl.kc), LL(d->K), LL(pl.kc), LL(d->K), LL(pl.kc), LL(pl.nc), LL(d->N));
    /* rows [0, rows) of C (row stride N) from A's rows [0, rows) (A points at the block's
     * first row, or first column when ta) and the packed B; direct: full strips straight
     * from A, the partial last one packed (reading past the block could leave A) */
    char mrexpr[48];
    snprintf(mrexpr, sizeof mrexpr, "rows / %d * %d", pl.mr, pl.mr);
    put(out, &pl,
        "static void @_rows(const float *restrict a, const float *restrict bp, float *restrict c,\n"
        "                   float *restrict ap, int64_t rows)\n"
        "{\n"
        "    const int64_t full = %s;\n"
        "    for (int64_t pc = 0; pc < %lldLL; pc += %lldLL) {\n"
        "        const int64_t kc = %lldLL - pc < %lldLL ? %lldLL - pc : %lldLL;\n"
        "        if (full < rows) @_pack_a(a, ap, full, rows - full, pc, kc);\n"
        "        for (int64_t jr = 0; jr < %lldLL; jr += %d) {\n"
        "            const int64_t nr = %lldLL - jr < %d ? %lldLL - jr : %d;\n"
        "            const float *restrict bs = bp + pc * %lldLL + jr * kc;\n"
        "            for (int64_t ir = 0; ir < rows; ir += %d) {\n"
        "                float *restrict cs = c + ir * %lldLL + jr;\n",
        direct ? mrexpr : "0", LL(d->K), LL(pl.kc), LL(d->K), LL(pl.kc), LL(d->K), LL(pl.kc),
        LL(d->N), pl.nr, LL(d->N), pl.nr, LL(d->N), pl.nr, LL(pl.nc), pl.mr, LL(d->N));
    if (direct)
        put(out, &pl,
            "                if (ir < full)\n"
            "                    @_ukr_d(kc, a + ir * %lldLL + pc * %lldLL, bs, cs, %d, nr, pc == 0);\n"
            "                else\n"
            "                    @_ukr(kc, ap + (ir - full) * kc, bs, cs, rows - ir, nr, pc == 0);\n",
            LL(asi), LL(ask), pl.mr);
    else
        put(out, &pl,
            "                @_ukr(kc, ap + ir * kc, bs, cs, rows - ir < %d ? rows - ir : %d, nr, pc == 0);\n",
            pl.mr, pl.mr);
    put(out, &pl, "            }\n        }\n    }\n}\n\n");
}
