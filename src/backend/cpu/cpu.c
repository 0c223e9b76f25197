/*
 * The CPU platform: candidates are C11 + OpenMP source compiled by the system C compiler
 * into a shared object, loaded with dlopen and called as `int entry(void *const *args)`.
 *
 * probe reads what the machine tells any process (/proc/cpuinfo, sched_getaffinity,
 * /sys/devices/system/cpu/.../cache, sysconf) and asks the compiler for its version once.
 * compile names its artifact by a hash of (source, flags, compiler + version), so an
 * identical candidate is compiled once per workdir; the .so is produced under a temporary
 * name and renamed, so concurrent compiles of the same candidate never see half a file.
 * The compiler runs as a child in its own process group with its output captured through
 * a pipe and a wall-clock limit; a hung compiler is killed with its whole group.
 *
 * load/launch run the kernel in the calling process: the verifier never uses them for
 * untrusted code (it runs kforge-runner in a sandbox), tests and trusted callers do.
 */
#include "kforge/backend.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CPU_DEFAULT_FLAGS "-O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math -fPIC -shared"
#define CPU_COMPILE_TIMEOUT_S 120.0
#define CPU_LOG_CAP (1 << 20) /* keep at most this much compiler output */

typedef struct cpu_ctx {
    char cc[256];        /* compiler command (may hold several words, e.g. "ccache gcc") */
    char cc_version[256];/* first line of `cc --version` */
    char flags[256];     /* default candidate flags */
} cpu_ctx;

typedef struct cpu_module {
    void *dl;
    int (*fn)(void *const *args);
} cpu_module;

/* ---- small helpers ---- */

/* Split s into words on blanks, honouring '...' and "..." quoting and backslashes.
 * Appends malloc'd words to *v (count *n, capacity *cap). */
static void split_words(const char *s, char ***v, int *n, int *cap) {
    if (!s) return;
    const char *p = s;
    for (;;) {
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p) break;
        kf_buf w = {0};
        char q = 0;
        while (*p && (q || !isspace((unsigned char)*p))) {
            if (q) {
                if (*p == q) q = 0;
                else if (*p == '\\' && q == '"' && p[1]) kf_buf_putn(&w, ++p, 1);
                else kf_buf_putn(&w, p, 1);
            } else if (*p == '\'' || *p == '"') {
                q = *p;
            } else if (*p == '\\' && p[1]) {
                kf_buf_putn(&w, ++p, 1);
            } else {
                kf_buf_putn(&w, p, 1);
            }
            p++;
        }
        if (*n + 2 > *cap) {
            *cap = *cap ? *cap * 2 : 16;
            *v = kf_realloc(*v, (size_t)*cap * sizeof **v);
        }
        (*v)[(*n)++] = kf_buf_take(&w);
        (*v)[*n] = NULL;
    }
}

static void push_word(char ***v, int *n, int *cap, const char *w) {
    if (*n + 2 > *cap) {
        *cap = *cap ? *cap * 2 : 16;
        *v = kf_realloc(*v, (size_t)*cap * sizeof **v);
    }
    (*v)[(*n)++] = kf_strdup(w);
    (*v)[*n] = NULL;
}

static void free_words(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}


static void read_line_file(const char *path, char *buf, size_t cap) {
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fgets(buf, (int)cap, f)) buf[strcspn(buf, "\n")] = 0;
    fclose(f);
}

/* "32K" / "512K" / "32768K" / "1M" → bytes; 0 if unparsable. */
static int64_t parse_size(const char *s) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0) return 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': return (int64_t)v << 10;
    case 'M': return (int64_t)v << 20;
    case 'G': return (int64_t)v << 30;
    default: return (int64_t)v;
    }
}


static int has_word(const char *list, const char *w) {
    size_t n = strlen(w);
    for (const char *p = list; (p = strstr(p, w)) != NULL; p += n) {
        int start = p == list || isspace((unsigned char)p[-1]);
        int end = p[n] == 0 || isspace((unsigned char)p[n]);
        if (start && end) return 1;
    }
    return 0;
}

/* ---- probe ---- */

static void probe_caches(const cpu_set_t *set, kf_device_info *info) {
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, set)) {
            first = c;
            break;
        }
    if (first < 0) first = 0;
    char path[256], level[32], type[32], size[32];
    for (int i = 0; i < 16; i++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/level", first, i);
        read_line_file(path, level, sizeof level);
        if (!level[0]) break;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/type", first, i);
        read_line_file(path, type, sizeof type);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/size", first, i);
        read_line_file(path, size, sizeof size);
        int lv = atoi(level);
        int64_t bytes = parse_size(size);
        if (lv == 1 && strcmp(type, "Data") == 0) info->l1d_bytes = bytes;
        if (lv == 1 && strcmp(type, "Unified") == 0 && !info->l1d_bytes) info->l1d_bytes = bytes;
        if (lv == 2 && strcmp(type, "Instruction") != 0) info->l2_bytes = bytes;
    }
    /* L3: the sum over the distinct L3 instances shared by the usable CPUs. */
    char seen[64][128];
    int nseen = 0;
    int64_t l3 = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, set)) continue;
        for (int i = 0; i < 16; i++) {
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/level", c, i);
            read_line_file(path, level, sizeof level);
            if (!level[0]) break;
            if (atoi(level) != 3) continue;
            char shared[128];
            snprintf(path, sizeof path,
                     "/sys/devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list", c, i);
            read_line_file(path, shared, sizeof shared);
            int dup = 0;
            for (int k = 0; k < nseen; k++)
                if (strcmp(seen[k], shared) == 0) dup = 1;
            if (dup) continue;
            if (nseen < 64) snprintf(seen[nseen++], sizeof seen[0], "%s", shared);
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/size", c, i);
            read_line_file(path, size, sizeof size);
            l3 += parse_size(size);
        }
    }
    info->l3_bytes = l3;
}

static int count_cores(const cpu_set_t *set, int threads) {
    int64_t *keys = kf_malloc(sizeof *keys * (size_t)(threads > 0 ? threads : 1));
    int n = 0;
    char path[256], a[32], b[32];
    for (int c = 0; c < CPU_SETSIZE && n < threads; c++) {
        if (!CPU_ISSET(c, set)) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
        read_line_file(path, a, sizeof a);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
        read_line_file(path, b, sizeof b);
        if (!a[0] || !b[0]) {
            free(keys);
            return threads;
        }
        int64_t key = ((int64_t)atoi(a) << 32) | (uint32_t)atoi(b);
        int dup = 0;
        for (int k = 0; k < n; k++)
            if (keys[k] == key) dup = 1;
        if (!dup) keys[n++] = key;
    }
    free(keys);
    return n > 0 ? n : threads;
}

static kf_status cpu_probe(void *vctx, kf_device_info *info, kf_error *err) {
    cpu_ctx *ctx = vctx;
    memset(info, 0, sizeof *info);
    snprintf(info->platform, sizeof info->platform, "cpu");

    char buf[1024];
    kf_cpuinfo_value("model name", buf, sizeof buf);
    if (!buf[0]) kf_cpuinfo_value("Model", buf, sizeof buf);
    if (!buf[0]) kf_cpuinfo_value("Hardware", buf, sizeof buf);
    struct utsname un;
    if (uname(&un) != 0) snprintf(un.machine, sizeof un.machine, "unknown");
    if (!buf[0]) snprintf(buf, sizeof buf, "%s cpu", un.machine);
    snprintf(info->name, sizeof info->name, "%s", buf);

    char *flags = NULL;
    {
        FILE *f = fopen("/proc/cpuinfo", "r");
        char *line = NULL;
        size_t n = 0;
        while (f && getline(&line, &n, f) > 0) {
            if (strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0) {
                char *p = strchr(line, ':');
                flags = kf_strdup(p ? p + 1 : "");
                break;
            }
        }
        free(line);
        if (f) fclose(f);
    }
    if (!flags) flags = kf_strdup("");
    info->simd_bits = 128;
    if (has_word(flags, "avx") || has_word(flags, "avx2")) info->simd_bits = 256;
    if (has_word(flags, "avx512f")) info->simd_bits = 512;
    kf_buf arch = {0};
    kf_buf_puts(&arch, un.machine);
    static const char *const notable[] = {"avx512f", "avx512bw", "avx512_bf16", "avx2", "fma",
                                          "avx", "asimd", "sve", NULL};
    for (int i = 0; notable[i]; i++)
        if (has_word(flags, notable[i]) && arch.len + strlen(notable[i]) + 2 < sizeof info->arch)
            kf_buf_printf(&arch, " %s", notable[i]);
    snprintf(info->arch, sizeof info->arch, "%s", arch.data);
    kf_buf_free(&arch);
    free(flags);

    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        info->threads = CPU_COUNT(&set);
    } else {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        info->threads = n > 0 ? (int)n : 1;
        for (int c = 0; c < info->threads && c < CPU_SETSIZE; c++) CPU_SET(c, &set);
    }
    if (info->threads < 1) info->threads = 1;
    info->cores = count_cores(&set, info->threads);
    probe_caches(&set, info);

    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    info->mem_bytes = pages > 0 && psz > 0 ? (int64_t)pages * psz : 0;

    if (!ctx->cc_version[0]) {
        char **argv = NULL;
        int n = 0, cap = 0;
        split_words(ctx->cc, &argv, &n, &cap);
        if (n == 0) {
            free_words(argv, n);
            return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "no C compiler configured (KFORGE_CC is empty)");
        }
        push_word(&argv, &n, &cap, "--version");
        kf_buf out = {0};
        int ws = 0;
        char why[512];
        int rc = kf_run_capture(argv, 20.0, &out, CPU_LOG_CAP, &ws, why, sizeof why);
        free_words(argv, n);
        if (rc != 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            kf_buf_free(&out);
            return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                                "the C compiler '%s' does not run (set KFORGE_CC)", ctx->cc);
        }
        char *nl = out.data ? strchr(out.data, '\n') : NULL;
        if (nl) *nl = 0;
        snprintf(ctx->cc_version, sizeof ctx->cc_version, "%s", out.data ? out.data : "unknown");
        kf_buf_free(&out);
    }
    snprintf(info->compiler, sizeof info->compiler, "%s: %s", ctx->cc, ctx->cc_version);
    snprintf(info->flags, sizeof info->flags, "%s", ctx->flags);
    return KF_OK;
}

/* ---- compile ---- */

/* The first line of log that mentions "error", for a one-line message. */
static void first_error_line(const char *log, char *buf, size_t cap) {
    buf[0] = 0;
    if (!log) return;
    const char *p = strstr(log, "error");
    if (!p) return;
    const char *b = p;
    while (b > log && b[-1] != '\n') b--;
    size_t n = strcspn(b, "\n");
    if (n >= cap) n = cap - 1;
    memcpy(buf, b, n);
    buf[n] = 0;
}

static kf_status cpu_compile(void *vctx, const char *source, const char *flags,
                             const char *workdir, char *artifact, size_t cap, kf_buf *log,
                             kf_error *err) {
    cpu_ctx *ctx = vctx;
    kf_buf all = {0};
    kf_buf_puts(&all, ctx->flags);
    if (flags && flags[0]) kf_buf_printf(&all, " %s", flags);
    uint64_t h = kf_hash64(source, strlen(source), 0);
    h = kf_hash64(all.data, all.len, h);
    h = kf_hash64(ctx->cc, strlen(ctx->cc), h);
    h = kf_hash64(ctx->cc_version, strlen(ctx->cc_version), h);
    char hex[17];
    kf_hash_hex(h, hex);

    kf_status st = KF_OK;
    char cpath[4096], sopath[4096], tmpso[4096], tmpc[4096];
    int n1 = snprintf(cpath, sizeof cpath, "%s/%s.c", workdir, hex);
    int n2 = snprintf(sopath, sizeof sopath, "%s/%s.so", workdir, hex);
    /* temporaries unique per process and call: threads may compile the same candidate */
    static unsigned long compile_counter;
    unsigned long seq = __atomic_add_fetch(&compile_counter, 1, __ATOMIC_RELAXED);
    snprintf(tmpso, sizeof tmpso, "%s/%s.so.tmp%ld-%lu", workdir, hex, (long)getpid(), seq);
    snprintf(tmpc, sizeof tmpc, "%s/%s.c.tmp%ld-%lu", workdir, hex, (long)getpid(), seq);
    if (n1 < 0 || n2 < 0 || (size_t)n2 >= cap || (size_t)n1 + 16 >= sizeof cpath) {
        kf_buf_free(&all);
        return kf_error_set(err, KF_ERR_ARG, workdir, 0, 0, "workdir path is too long");
    }
    snprintf(artifact, cap, "%s", sopath);
    if (access(sopath, R_OK) == 0) {
        if (log) kf_buf_printf(log, "kforge: reusing %s (same source, flags and compiler)\n", sopath);
        kf_buf_free(&all);
        return KF_OK;
    }
    st = kf_write_file(tmpc, source, strlen(source), err);
    if (st != KF_OK) {
        kf_buf_free(&all);
        return st;
    }
    if (rename(tmpc, cpath) != 0) {
        unlink(tmpc);
        kf_buf_free(&all);
        return kf_error_set(err, KF_ERR_IO, cpath, 0, 0, "cannot write: %s", strerror(errno));
    }

    char **argv = NULL;
    int n = 0, acap = 0;
    split_words(ctx->cc, &argv, &n, &acap);
    split_words(all.data, &argv, &n, &acap);
    push_word(&argv, &n, &acap, "-o");
    push_word(&argv, &n, &acap, tmpso);
    push_word(&argv, &n, &acap, cpath);
    push_word(&argv, &n, &acap, "-lm");
    kf_buf_free(&all);

    kf_buf out = {0};
    kf_buf_puts(&out, "$");
    for (int i = 0; i < n; i++) kf_buf_printf(&out, " %s", argv[i]);
    kf_buf_puts(&out, "\n");
    size_t cmd_len = out.len;
    int ws = 0;
    char why[512];
    int rc = kf_run_capture(argv, CPU_COMPILE_TIMEOUT_S, &out, CPU_LOG_CAP, &ws, why, sizeof why);
    free_words(argv, n);
    if (rc != 0) {
        st = kf_error_set(err, KF_ERR_COMPILE, cpath, 0, 0, "%s", why);
        kf_buf_printf(&out, "kforge: %s\n", why);
    } else if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        char line[600];
        first_error_line(out.data + cmd_len, line, sizeof line);
        if (WIFEXITED(ws) && WEXITSTATUS(ws) == 127 && !line[0])
            st = kf_error_set(err, KF_ERR_COMPILE, cpath, 0, 0,
                              "the compiler '%s' could not be run", ctx->cc);
        else if (WIFEXITED(ws))
            st = kf_error_set(err, KF_ERR_COMPILE, cpath, 0, 0, "compiler exited with status %d%s%s",
                              WEXITSTATUS(ws), line[0] ? ": " : "", line);
        else
            st = kf_error_set(err, KF_ERR_COMPILE, cpath, 0, 0, "compiler killed by signal %d",
                              WTERMSIG(ws));
    } else if (rename(tmpso, sopath) != 0) {
        st = kf_error_set(err, KF_ERR_IO, sopath, 0, 0, "cannot rename artifact: %s", strerror(errno));
    }
    if (st != KF_OK) unlink(tmpso);
    if (log) kf_buf_putn(log, out.data, out.len);
    kf_buf_free(&out);
    return st;
}

/* ---- load / launch ---- */

static kf_status cpu_load(void *vctx, const char *artifact, const char *entry, void **module,
                          kf_error *err) {
    *module = NULL;
    dlerror();
    void *dl = dlopen(artifact, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *e = dlerror();
        return kf_error_set(err, KF_ERR_RUNTIME, artifact, 0, 0, "cannot load: %s", e ? e : "?");
    }
    const char *name = entry && entry[0] ? entry : "kforge_kernel";
    dlerror();
    void *sym = dlsym(dl, name);
    if (!sym) {
        const char *e = dlerror();
        kf_error_set(err, KF_ERR_RUNTIME, artifact, 0, 0, "entry '%s' not found: %s", name,
                     e ? e : "symbol is NULL");
        dlclose(dl);
        return KF_ERR_RUNTIME;
    }
    cpu_module *m = kf_calloc(1, sizeof *m);
    m->dl = dl;
    memcpy(&m->fn, &sym, sizeof m->fn);
    *module = m;
    return KF_OK;
}

static kf_status cpu_launch(void *vctx, void *module, void *const *args, int nargs,
                            kf_error *err) {
    cpu_module *m = module;
    if (!m || !m->fn) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "launch: no module");
    int rc = m->fn(args);
    if (rc != 0)
        return kf_error_set(err, KF_ERR_RUNTIME, NULL, 0, 0, "kernel returned %d", rc);
    return KF_OK;
}

static void cpu_unload(void *vctx, void *module) {
    cpu_module *m = module;
    if (!m) return;
    if (m->dl) dlclose(m->dl);
    free(m);
}

static void cpu_destroy(void *vctx) { free(vctx); }

static const kf_backend_iface cpu_iface = {
    .name = "cpu",
    .probe = cpu_probe,
    .compile = cpu_compile,
    .load = cpu_load,
    .launch = cpu_launch,
    .unload = cpu_unload,
    .destroy = cpu_destroy,
};

/* Constructor used by the registry in backend.c: hands back the CPU iface table and a new
 * context configured from the environment (KFORGE_CC, default "cc"). Never fails today;
 * the compiler is checked by probe. */
kf_status kf_backend_cpu_create(int index, const kf_backend_iface **iface, void **ctx,
                                kf_error *err) {
    if (index != 0)
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                            "the cpu platform has one device (cpu:0), not cpu:%d", index);
    cpu_ctx *c = kf_calloc(1, sizeof *c);
    const char *cc = getenv("KFORGE_CC");
    snprintf(c->cc, sizeof c->cc, "%s", cc && cc[0] ? cc : "cc");
    snprintf(c->flags, sizeof c->flags, "%s", CPU_DEFAULT_FLAGS);
    *iface = &cpu_iface;
    *ctx = c;
    return KF_OK;
}

/* The cpu platform's one device, probed; see kf_backend_list. */
kf_status kf_backend_cpu_list(kf_device_info **infos, int *n, kf_error *err) {
    const kf_backend_iface *iface;
    void *ctx;
    kf_status st = kf_backend_cpu_create(0, &iface, &ctx, err);
    if (st != KF_OK) return st;
    kf_device_info *d = kf_calloc(1, sizeof *d);
    st = iface->probe(ctx, d, err);
    iface->destroy(ctx);
    if (st != KF_OK) {
        free(d);
        return st;
    }
    *infos = d;
    *n = 1;
    return KF_OK;
}
