/*
 * The GEMM template's 64-byte register tile in the memory check's build (src/synth/
 * tpl_matmul.c, emit_ukr_strided; kf_verify_memcheck_flags): on an AVX-512 device the
 * micro-kernel holds its tile in 16-float vectors, and the memory check builds the same
 * source without AVX-512, where GCC 12 keeps such vectors in the stack frame (30-50x slower
 * natively). The micro-kernel's text therefore has a second form for builds without
 * AVX-512: the same tile in 32-byte halves. These tests hold that
 *  - the halves compute the same tile, bit for bit, as the 64-byte text built the same way
 *    (so the memory check runs the kernel that is timed, access for access), with every
 *    operand flush against an inaccessible page;
 *  - the memory check's flags select the halves, and the timed build (-march=native on an
 *    AVX-512 CPU) the 64-byte text;
 *  - a planted out-of-bounds read in such a GEMM, in the code both forms share and in the
 *    micro-kernel's own text, is still reported by valgrind (skipped without valgrind).
 */
#include "tpl_cpu_common.h"

#include <math.h>

#include "kforge/backend.h"
#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/verify.h"
#include "memcheck_common.h"

/* The checker-like build: no AVX-512, no FMA (kf_verify_memcheck_flags on AVX-512). */
#define MC_CFLAGS CFLAGS " -mno-avx512f -mno-fma -Wno-psabi"
#define AVX512_IF "#ifdef __AVX512F__\n"

/* The template's kernel for an M x K times K x N product at params on an AVX-512 device,
 * as `int kforge_kernel(args)` (a, b, c); the caller frees it. */
static char *tile_kernel(int64_t M, int64_t N, int64_t K, const char *params) {
    kf_matmul_desc d;
    memset(&d, 0, sizeof d);
    d.M = M;
    d.N = N;
    d.K = K;
    d.batch = 1;
    kf_device_info dev;
    make_dev(&dev, 512);
    kf_space sp;
    memset(&sp, 0, sizeof sp);
    kf_tpl_matmul_params(&d, &dev, &sp, "s0.");
    kf_point pt;
    make_point(&sp, &pt, params);
    cr_assert_eq(kf_tpl_get(&sp, &pt, "s0.", "vl"), 16, "an AVX-512 device's tile is 16 floats wide");
    kf_buf src = {0};
    kf_tpl_matmul_emit(&src, "kf_mm", &d, &sp, &pt, "s0.");
    kf_buf_printf(&src, "int kforge_kernel(void *const *args) {\n    kf_mm(args[0], args[1], args[2]);\n"
                        "    return 0;\n}\n");
    return src.data;
}

/* src with every AVX512_IF replaced by "#if 1": the 64-byte text whatever the flags. */
static char *force_wide(const char *src) {
    size_t n = strlen(src);
    char *w = malloc(n + 1);
    cr_assert(w != NULL);
    const char *p = src;
    char *o = w;
    for (const char *q; (q = strstr(p, AVX512_IF)); p = q + strlen(AVX512_IF)) {
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        o += sprintf(o, "#if 1\n");
    }
    strcpy(o, p);
    return w;
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* Run cmd (stdout and stderr to log); fail with the log when it fails. */
static void run_cmd(const char *cmd, const char *log) {
    if (system(cmd) == 0) return;
    char buf[4096] = {0};
    FILE *lf = fopen(log, "r");
    if (lf) {
        size_t n = fread(buf, 1, sizeof buf - 1, lf);
        buf[n] = 0;
        fclose(lf);
    }
    cr_assert_fail("%s failed:\n%s", cmd, buf);
}

/* src compiled with flags into dir/name.so, loaded. */
static int (*build(const char *src, const char *flags, const char *dir, const char *name,
                   void **h))(void *const *) {
    char c[512], so[512], log[512], cmd[2048];
    snprintf(c, sizeof c, "%s/%s.c", dir, name);
    snprintf(so, sizeof so, "%s/%s.so", dir, name);
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    FILE *f = fopen(c, "w");
    cr_assert(f != NULL);
    fputs(src, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc %s -Wall -Wextra -Werror %s -o %s > %s 2>&1", flags, c, so, log);
    run_cmd(cmd, log);
    *h = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    cr_assert(*h != NULL, "dlopen: %s", dlerror());
    int (*fn)(void *const *) = (int (*)(void *const *))(uintptr_t)dlsym(*h, "kforge_kernel");
    cr_assert(fn != NULL);
    return fn;
}

static void unlink_in(const char *dir, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    unlink(p);
}

/* The halves and the 64-byte text, both built without AVX-512 and FMA, write the same C,
 * bit for bit, and close to a float64 product, at shapes with partial strips and tiles. */
Test(memcheck_tile, halves_compute_the_same_tile) {
    static const struct {
        int64_t M, N, K;
        const char *params;
    } cs[] = {
        {39, 100, 50, "threads=2 mk=848"},   /* 8x48 (3 vectors a row), partial strip and tile */
        {29, 70, 33, "threads=1 mk=1232"},   /* 12x32 */
        {16, 96, 300, "threads=2 mk=848 kc=128"}, /* several K slices: C += acc */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        char *src = tile_kernel(cs[i].M, cs[i].N, cs[i].K, cs[i].params);
        cr_assert_geq(count(src, AVX512_IF), 1, "the micro-kernel has its halves form");
        cr_assert_eq(count(src, AVX512_IF), count(src, "#else /* the same tile in 32-byte halves"));
        char *wide = force_wide(src);
        char dir[256];
        snprintf(dir, sizeof dir, "/tmp/kf_mctile_XXXXXX");
        cr_assert(mkdtemp(dir) != NULL);
        void *hh, *hw;
        int (*halves)(void *const *) = build(src, MC_CFLAGS, dir, "halves", &hh);
        int (*wide_fn)(void *const *) = build(wide, MC_CFLAGS, dir, "wide", &hw);
        int64_t M = cs[i].M, N = cs[i].N, K = cs[i].K;
        fenced a = fenced_alloc(M * K, 0), b = fenced_alloc(K * N, 0);
        fenced c1 = fenced_alloc(M * N, 0), c2 = fenced_alloc(M * N, 1);
        for (int64_t j = 0; j < M * K; j++) a.p[j] = frand();
        for (int64_t j = 0; j < K * N; j++) b.p[j] = frand();
        fenced_seal(&a);
        fenced_seal(&b);
        for (int64_t j = 0; j < M * N; j++) c1.p[j] = c2.p[j] = NAN;
        cr_assert_eq(halves((void *const[]){a.p, b.p, c1.p}), 0);
        cr_assert_eq(wide_fn((void *const[]){a.p, b.p, c2.p}), 0);
        for (int64_t r = 0; r < M; r++)
            for (int64_t col = 0; col < N; col++) {
                double ref = 0;
                for (int64_t k = 0; k < K; k++) ref += (double)a.p[r * K + k] * b.p[k * N + col];
                float h = c1.p[r * N + col], w = c2.p[r * N + col];
                cr_assert(memcmp(&h, &w, sizeof h) == 0, "case %zu, c[%lld][%lld]: halves %a, 64-byte %a", i,
                          (long long)r, (long long)col, h, w);
                cr_assert(fabs(h - ref) <= 1e-4 * (1 + fabs(ref)), "case %zu, c[%lld][%lld] = %g, want %g", i,
                          (long long)r, (long long)col, h, ref);
            }
        fenced_free(&a);
        fenced_free(&b);
        fenced_free(&c1);
        fenced_free(&c2);
        const char *files[] = {"halves.c", "halves.so", "halves.log", "wide.c", "wide.so", "wide.log"};
        for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) unlink_in(dir, files[f]);
        rmdir(dir);
        free(wide);
        free(src);
    }
}

/* The micro-kernel's text after the preprocessor with flags: whether it holds its tile in
 * kf_mm_vf (64 bytes) and in kf_mm_vh (32), through *uses_vf and *uses_vh. */
static void ukr_types(const char *src, const char *flags, int *uses_vf, int *uses_vh) {
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/kf_mctile_XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    char c[512], i[512], log[512], cmd[2048];
    snprintf(c, sizeof c, "%s/k.c", dir);
    snprintf(i, sizeof i, "%s/k.i", dir);
    snprintf(log, sizeof log, "%s/k.log", dir);
    FILE *f = fopen(c, "w");
    cr_assert(f != NULL);
    fputs(src, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc %s -E -P %s -o %s > %s 2>&1", flags, c, i, log);
    run_cmd(cmd, log);
    f = fopen(i, "r");
    cr_assert(f != NULL);
    kf_buf pre = {0};
    char line[4096];
    while (fgets(line, sizeof line, f)) kf_buf_printf(&pre, "%s", line);
    fclose(f);
    const char *from = strstr(pre.data, "kf_mm_ukr(");
    cr_assert(from != NULL, "no micro-kernel in the preprocessed text");
    const char *to = strstr(from, "kf_mm_gemm(");
    cr_assert(to != NULL);
    kf_buf ukr = {0};
    kf_buf_printf(&ukr, "%.*s", (int)(to - from), from);
    *uses_vf = strstr(ukr.data, "kf_mm_vf") != NULL;
    *uses_vh = strstr(ukr.data, "kf_mm_vh") != NULL;
    kf_buf_free(&ukr);
    kf_buf_free(&pre);
    const char *files[] = {"k.c", "k.i", "k.log"};
    for (size_t n = 0; n < sizeof files / sizeof files[0]; n++) unlink_in(dir, files[n]);
    rmdir(dir);
}

/* The memory check's flags (this machine's CPU backend) compile the halves; the timed
 * build on an AVX-512 CPU, and any build with -mavx512f, the 64-byte text. */
Test(memcheck_tile, the_checker_build_compiles_the_halves) {
    kf_error err = {0};
    kf_backend *be = NULL;
    cr_assert_eq(kf_backend_open("cpu", &be, &err), KF_OK, "%s", err.msg);
    char *src = tile_kernel(39, 100, 50, "threads=2 mk=848");
    char flags[512];
    snprintf(flags, sizeof flags, CFLAGS " %s", kf_verify_memcheck_flags(be));
    int vf = -1, vh = -1;
    ukr_types(src, flags, &vf, &vh);
    cr_assert(!vf && vh, "memcheck build (%s): 64-byte vectors %d, halves %d", flags, vf, vh);
    ukr_types(src, CFLAGS " -mavx512f", &vf, &vh);
    cr_assert(vf && !vh, "an AVX-512 build: 64-byte vectors %d, halves %d", vf, vh);
    if (strstr(be->info.arch, "avx512f")) {
        ukr_types(src, CFLAGS, &vf, &vh);
        cr_assert(vf && !vh, "the timed build here: 64-byte vectors %d, halves %d", vf, vh);
    }
    free(src);
    kf_backend_close(be);
}


/* src with every occurrence of what replaced by with (at least one). */
static char *replace_all(const char *src, const char *what, const char *with) {
    int n = count(src, what);
    cr_assert_geq(n, 1, "no '%s' in the kernel", what);
    char *o = malloc(strlen(src) + (size_t)n * strlen(with) + 1), *w = o;
    cr_assert(o != NULL);
    const char *p = src;
    for (const char *q; (q = strstr(p, what)); p = q + strlen(what)) {
        memcpy(w, p, (size_t)(q - p));
        w += q - p;
        w += sprintf(w, "%s", with);
    }
    strcpy(w, p);
    return o;
}

/* kf_verify_run's memory check (it builds with the checker's flags) of src on the task. */
static kf_vresult memcheck_run(const char *src, char *flags, size_t cap) {
    static const char *task = "task mm_odd\n"
                              "input a: f32[39, 50]\n"
                              "input b: f32[50, 100]\n"
                              "output c = matmul(a, b)\n";
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_string(task, "<test>", &g, &err), KF_OK, "%s", err.msg);
    kf_backend *be = NULL;
    cr_assert_eq(kf_backend_open("cpu", &be, &err), KF_OK, "%s", err.msg);
    char wd[512];
    snprintf(wd, sizeof wd, "%s/test-work/memcheck-tile", KF_BUILD_DIR);
    cr_assert_eq(kf_mkdirs(wd, &err), KF_OK, "%s", err.msg);
    kf_verify_opts o;
    kf_verify_opts_default(&o);
    o.workdir = wd;
    o.seed = 4243;
    o.nsets = 2;
    o.threads = 2;
    o.wall_limit_s = 15;
    o.cpu_limit_s = 30;
    o.mem_limit = 512ll << 20;
    kf_verify_ctx *ctx = NULL;
    cr_assert_eq(kf_verify_ctx_new(g, &o, &ctx, &err), KF_OK, "%s", err.msg);
    kf_candidate c;
    cr_assert_eq(kf_candidate_init(&c, "cpu", src, NULL, &err), KF_OK, "%s", err.msg);
    kf_verify_run_args a = {.mode = KF_VERIFY_MEMCHECK};
    kf_vresult r;
    cr_assert_eq(kf_verify_run(ctx, be, &c, &a, &r, &err), KF_OK, "%s (%s)", err.msg, r.detail);
    if (getenv("KF_TEST_VERBOSE"))
        fprintf(stderr, "[%s] (%.2f s, flags '%s') %s\n", kf_vstatus_name(r.status), r.run_wall_s, r.checked_flags,
                r.detail);
    snprintf(flags, cap, "%s", kf_verify_memcheck_flags(be));
    kf_candidate_clear(&c);
    kf_verify_ctx_free(ctx);
    kf_backend_close(be);
    kf_graph_free(g);
    return r;
}

/* The 8x48 GEMM of a 39 x 50 x 100 product (its last strip has 7 rows of 8): clean, then
 * with a read one row past an operand, discarded (the results stay right, so only the
 * checker can tell): in the A packing both forms share, and in the micro-kernel's own
 * write-back of a partial tile (each form's text). */
Test(memcheck_tile, planted_overreads_in_the_tile_are_reported) {
    if (!have_valgrind()) cr_skip_test("valgrind is not installed");
    char *src = tile_kernel(39, 100, 50, "threads=2 mk=848");
    /* the planted reads store what they read here: valgrind drops a load whose value is
     * never used (VEX removes it as dead code), so a discarded read would go unseen */
    char *sunk = malloc(strlen(src) + 64);
    cr_assert(sunk != NULL);
    sprintf(sunk, "static volatile float kf_sink;\n%s", src);
    free(src);
    src = sunk;
    char flags[256];
    kf_vresult r = memcheck_run(src, flags, sizeof flags);
    cr_assert_eq(r.status, KF_V_OK, "clean: %s: %s", kf_vstatus_name(r.status), r.detail);
    cr_assert_str_eq(r.checked_flags, flags, "the checker's build was checked");
    /* A's row 39 (past its end, in the trailing guard) for the padded eighth row */
    char *pack = replace_all(src, "r < mr ? s[r * 50LL + k] : 0.0f;",
                             "r < mr ? s[r * 50LL + k]\n"
                             "                        : ((void)((const volatile float *)s)[r * 50LL + k], 0.0f);");
    r = memcheck_run(pack, flags, sizeof flags);
    cr_assert_eq(r.status, KF_V_MEMCHECK, "A overread: %s: %s", kf_vstatus_name(r.status), r.detail);
    cr_assert(strstr(r.detail, "Invalid read"), "%s", r.detail);
    /* C's row 39 (past its end) from the micro-kernel's partial-tile write-back */
    char *ukr = replace_all(src, "                c[i * 100LL + j] = first ?",
                            "                c[i * 100LL + j] = (i == mr - 1 ? (void)(kf_sink = c[mr * 100LL + j]) : (void)0,\n"
                            "                                    first) ?");
    cr_assert_eq(count(ukr, "kf_sink = c["), 2 * count(src, AVX512_IF), "in both forms");
    r = memcheck_run(ukr, flags, sizeof flags);
    cr_assert_eq(r.status, KF_V_MEMCHECK, "C overread: %s: %s", kf_vstatus_name(r.status), r.detail);
    cr_assert(strstr(r.detail, "Invalid read"), "%s", r.detail);
    cr_assert(strstr(r.detail, "kf_mm"), "the report names the kernel: %s", r.detail);
    free(ukr);
    free(pack);
    free(src);
}
