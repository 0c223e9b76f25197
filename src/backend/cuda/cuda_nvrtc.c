/*
 * CUDA compilers that need no device: NVRTC (in-process, loaded with dlopen) for the
 * NVRTC form, and nvcc (a child process) for the nvcc form. See cuda_int.h for the two
 * forms and cuda.c for how the backend uses them.
 *
 * NVRTC is loaded once per process. It has no C library headers; the toolkit's include
 * folder is passed with -I (when found) so that cuda_fp16.h and friends resolve. A compile
 * error's position is read from NVRTC's "candidate.cu(LINE): error: ..." log lines.
 *
 * nvcc runs through posix_spawn (the parent may hold a CUDA context and many driver
 * threads: a vfork-style spawn copies none of that) in its own process group, with stdout
 * and stderr captured through one pipe and a wall-clock limit; on timeout the whole group
 * (nvcc, cicc, ptxas, the host compiler) is killed.
 */
#include <nvrtc.h>

#include "backend/cuda/cuda_int.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CUDA_LOG_LINES 8             /* lines of a compiler log quoted in an error message */
#define NVCC_TIMEOUT_S 300.0
#define NVCC_LOG_CAP (1 << 20)       /* keep at most this much compiler output */

extern char **environ;

int kf_cuda_is_nvrtc_form(const char *source) {
    return source && strstr(source, "kforge:launch") != NULL;
}

/* ---- words ---- */

/* Split s into malloc'd words on blanks, honouring '...' and "..." quotes and backslashes;
 * appended to *v (count *n, NULL-terminated). */
static void split_words(const char *s, char ***v, int *n) {
    const char *p = s ? s : "";
    for (;;) {
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p) break;
        kf_buf w = {0};
        char q = 0;
        for (; *p && (q || !isspace((unsigned char)*p)); p++) {
            if (q && *p == q) q = 0;
            else if (!q && (*p == '\'' || *p == '"')) q = *p;
            else if (*p == '\\' && p[1] && q != '\'') kf_buf_putn(&w, ++p, 1);
            else kf_buf_putn(&w, p, 1);
        }
        *v = kf_realloc(*v, (size_t)(*n + 2) * sizeof **v);
        (*v)[(*n)++] = kf_buf_take(&w);
        (*v)[*n] = NULL;
    }
}

static void push_word(char ***v, int *n, const char *w) {
    *v = kf_realloc(*v, (size_t)(*n + 2) * sizeof **v);
    (*v)[(*n)++] = kf_strdup(w);
    (*v)[*n] = NULL;
}

static void free_words(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* The first lines of a compiler log from its first error (or its start): at most
 * CUDA_LOG_LINES lines into buf; the line number of "NAME(LINE): error" in *line. */
static void log_excerpt(const char *log, char *buf, size_t cap, int *line) {
    buf[0] = 0;
    *line = 0;
    if (!log) return;
    /* "error:" first: a path in the log may hold the word itself */
    const char *p = strstr(log, "error:");
    if (!p) p = strstr(log, "error");
    if (!p) p = log;
    while (p > log && p[-1] != '\n') p--;
    const char *q = p;
    for (int i = 0; i < CUDA_LOG_LINES && *q; i++) {
        q += strcspn(q, "\n");
        if (*q) q++;
    }
    size_t len = (size_t)(q - p);
    while (len && (p[len - 1] == '\n' || p[len - 1] == ' ')) len--;
    if (len >= cap) len = cap - 1;
    memcpy(buf, p, len);
    buf[len] = 0;
    const char *paren = strchr(buf, '(');
    const char *nl = strchr(buf, '\n');
    if (paren && (!nl || paren < nl)) {
        int l = 0;
        if (sscanf(paren, "(%d)", &l) == 1 && l > 0) *line = l;
    }
}

/* ---- NVRTC ---- */

static struct {
    __typeof__(nvrtcVersion) *Version;
    __typeof__(nvrtcGetErrorString) *GetErrorString;
    __typeof__(nvrtcCreateProgram) *CreateProgram;
    __typeof__(nvrtcDestroyProgram) *DestroyProgram;
    __typeof__(nvrtcCompileProgram) *CompileProgram;
    __typeof__(nvrtcGetProgramLogSize) *GetProgramLogSize;
    __typeof__(nvrtcGetProgramLog) *GetProgramLog;
    __typeof__(nvrtcGetCUBINSize) *GetCUBINSize;
    __typeof__(nvrtcGetCUBIN) *GetCUBIN;
    int ok;
    char version[32];
    char include_opt[600]; /* "-I<toolkit>/include" or "" */
    char why[1024];
} nv;
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void *nv_sym(void *h, const char *name, int *missing) {
    void *p = dlsym(h, name);
    if (!p && !*missing) {
        *missing = 1;
        snprintf(nv.why, sizeof nv.why, "NVRTC lacks %s", name);
    }
    return p;
}

static void nv_load(void) {
    const char *home = getenv("CUDA_HOME");
    char paths[8][512];
    int np = 0;
    snprintf(paths[np++], sizeof paths[0], "libnvrtc.so.13");
    snprintf(paths[np++], sizeof paths[0], "libnvrtc.so");
    snprintf(paths[np++], sizeof paths[0], "libnvrtc.so.12");
    if (home && home[0]) {
        snprintf(paths[np++], sizeof paths[0], "%s/lib64/libnvrtc.so.13", home);
        snprintf(paths[np++], sizeof paths[0], "%s/lib64/libnvrtc.so", home);
    }
    snprintf(paths[np++], sizeof paths[0], "/usr/local/cuda/lib64/libnvrtc.so.13");
    snprintf(paths[np++], sizeof paths[0], "/usr/local/cuda/lib64/libnvrtc.so");
    void *h = NULL;
    kf_buf tried = {0};
    for (int i = 0; i < np && !h; i++) {
        dlerror();
        h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror();
            kf_buf_printf(&tried, "%s%s", i ? "; " : "", e ? e : paths[i]);
        }
    }
    if (!h) {
        snprintf(nv.why, sizeof nv.why, "NVRTC not found (tried %s)", tried.data);
        kf_buf_free(&tried);
        return;
    }
    kf_buf_free(&tried);
    int missing = 0;
#define NV(field, name)                                                                        \
    do {                                                                                       \
        void *p_ = nv_sym(h, name, &missing);                                                  \
        memcpy(&nv.field, &p_, sizeof p_);                                                     \
    } while (0)
    NV(Version, "nvrtcVersion");
    NV(GetErrorString, "nvrtcGetErrorString");
    NV(CreateProgram, "nvrtcCreateProgram");
    NV(DestroyProgram, "nvrtcDestroyProgram");
    NV(CompileProgram, "nvrtcCompileProgram");
    NV(GetProgramLogSize, "nvrtcGetProgramLogSize");
    NV(GetProgramLog, "nvrtcGetProgramLog");
    NV(GetCUBINSize, "nvrtcGetCUBINSize");
    NV(GetCUBIN, "nvrtcGetCUBIN");
#undef NV
    if (missing) return;
    int major = 0, minor = 0;
    if (nv.Version(&major, &minor) != NVRTC_SUCCESS) {
        snprintf(nv.why, sizeof nv.why, "nvrtcVersion failed");
        return;
    }
    snprintf(nv.version, sizeof nv.version, "NVRTC %d.%d", major, minor);
    /* the toolkit's headers, where the library's own toolkit most likely keeps them */
    const char *dirs[3] = {home && home[0] ? home : NULL, "/usr/local/cuda", NULL};
    for (int i = 0; i < 2; i++) {
        if (!dirs[i]) continue;
        char probe[600];
        snprintf(probe, sizeof probe, "%s/include/cuda_fp16.h", dirs[i]);
        if (access(probe, R_OK) == 0) {
            snprintf(nv.include_opt, sizeof nv.include_opt, "-I%s/include", dirs[i]);
            break;
        }
    }
    nv.ok = 1;
}

kf_status kf_cuda_nvrtc_version(char *version, size_t cap, kf_error *err) {
    pthread_once(&nv_once, nv_load);
    if (!nv.ok) {
        if (cap) version[0] = 0;
        return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0, "%s", nv.why);
    }
    snprintf(version, cap, "%s", nv.version);
    return KF_OK;
}

static int names_arch(char *const *w, int n) {
    for (int i = 0; i < n; i++)
        if (strncmp(w[i], "--gpu-architecture", 18) == 0 || strncmp(w[i], "-arch", 5) == 0)
            return 1;
    return 0;
}

kf_status kf_cuda_nvrtc_compile(const char *source, const char *arch, const char *options,
                                kf_buf *cubin, kf_buf *log, kf_error *err) {
    char ver[32];
    kf_status st = kf_cuda_nvrtc_version(ver, sizeof ver, err);
    if (st != KF_OK) return st;
    char **w = NULL;
    int n = 0;
    split_words(options, &w, &n);
    if (arch && arch[0] && !names_arch(w, n)) {
        char a[80];
        snprintf(a, sizeof a, "--gpu-architecture=%s", arch);
        push_word(&w, &n, a);
    }
    if (nv.include_opt[0]) push_word(&w, &n, nv.include_opt);

    nvrtcProgram prog = NULL;
    nvrtcResult rc = nv.CreateProgram(&prog, source, "candidate.cu", 0, NULL, NULL);
    if (rc != NVRTC_SUCCESS) {
        free_words(w, n);
        return kf_error_set(err, rc == NVRTC_ERROR_OUT_OF_MEMORY ? KF_ERR_NOMEM : KF_ERR_COMPILE,
                            NULL, 0, 0, "nvrtcCreateProgram: %s", nv.GetErrorString(rc));
    }
    rc = nv.CompileProgram(prog, n, (const char *const *)w);
    free_words(w, n);
    char *text = NULL;
    size_t lsz = 0;
    if (nv.GetProgramLogSize(prog, &lsz) == NVRTC_SUCCESS && lsz > 0) {
        text = kf_malloc(lsz + 1);
        if (nv.GetProgramLog(prog, text) != NVRTC_SUCCESS) text[0] = 0;
        text[lsz] = 0;
        if (log) kf_buf_puts(log, text);
    }
    if (rc != NVRTC_SUCCESS) {
        char first[800];
        int line = 0;
        log_excerpt(text, first, sizeof first, &line);
        st = kf_error_set(err, KF_ERR_COMPILE, line ? "candidate.cu" : NULL, line, 0,
                          "NVRTC compile failed (%s)%s%s", nv.GetErrorString(rc),
                          first[0] ? ":\n" : "", first);
        if (log) kf_buf_printf(log, "kforge: nvrtcCompileProgram: %s\n", nv.GetErrorString(rc));
    } else {
        size_t csz = 0;
        rc = nv.GetCUBINSize(prog, &csz);
        if (rc != NVRTC_SUCCESS || csz == 0) {
            st = kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0,
                              "NVRTC produced no CUBIN (%s): the architecture must be a real "
                              "one such as sm_90, not a virtual compute_XY",
                              rc != NVRTC_SUCCESS ? nv.GetErrorString(rc) : "0 bytes");
        } else {
            char *bin = kf_malloc(csz);
            rc = nv.GetCUBIN(prog, bin);
            if (rc == NVRTC_SUCCESS) kf_buf_putn(cubin, bin, csz);
            else
                st = kf_error_set(err, KF_ERR_COMPILE, NULL, 0, 0, "nvrtcGetCUBIN: %s",
                                  nv.GetErrorString(rc));
            free(bin);
        }
    }
    free(text);
    nv.DestroyProgram(&prog);
    return st;
}

/* ---- nvcc ---- */

kf_status kf_cuda_nvcc_find(char *path, size_t cap, kf_error *err) {
    const char *envpath = getenv("PATH");
    if (envpath) {
        const char *p = envpath;
        while (*p) {
            size_t len = strcspn(p, ":");
            if (len > 0) {
                snprintf(path, cap, "%.*s/nvcc", (int)len, p);
                if (access(path, X_OK) == 0) return KF_OK;
            }
            p += len;
            if (*p) p++;
        }
    }
    const char *home = getenv("CUDA_HOME");
    if (home && home[0]) {
        snprintf(path, cap, "%s/bin/nvcc", home);
        if (access(path, X_OK) == 0) return KF_OK;
    }
    snprintf(path, cap, "/usr/local/cuda/bin/nvcc");
    if (access(path, X_OK) == 0) return KF_OK;
    path[0] = 0;
    return kf_error_set(err, KF_ERR_UNSUPPORTED, NULL, 0, 0,
                        "nvcc not found (on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin): "
                        "a CUDA candidate without kforge:launch lines (the nvcc form) needs "
                        "the CUDA toolkit");
}


/* The last line of `nvcc --version` ("Build cuda_13.0.r13.0/compiler.NNN_0"), once per
 * nvcc path; "" when it cannot be run. */
static void nvcc_version(const char *nvcc, char *buf, size_t cap) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char cached_path[4096], cached[256];
    pthread_mutex_lock(&mu);
    if (strcmp(cached_path, nvcc) != 0) {
        char *argv[] = {(char *)nvcc, "--version", NULL};
        kf_buf out = {0};
        int ws = 0;
        char why[256];
        cached[0] = 0;
        if (kf_run_capture(argv, 60, &out, NVCC_LOG_CAP, &ws, why, sizeof why) == 0 && out.data) {
            size_t len = out.len;
            while (len && (out.data[len - 1] == '\n' || out.data[len - 1] == '\r')) len--;
            size_t b = len;
            while (b && out.data[b - 1] != '\n') b--;
            snprintf(cached, sizeof cached, "%.*s", (int)(len - b), out.data + b);
        }
        kf_buf_free(&out);
        snprintf(cached_path, sizeof cached_path, "%s", nvcc);
    }
    snprintf(buf, cap, "%s", cached);
    pthread_mutex_unlock(&mu);
}

kf_status kf_cuda_nvcc_compile(const char *source, const char *arch, const char *flags,
                               const char *workdir, char *artifact, size_t cap, kf_buf *log,
                               kf_error *err) {
    char nvcc[4096];
    kf_status st = kf_cuda_nvcc_find(nvcc, sizeof nvcc, err);
    if (st != KF_OK) return st;
    char ver[256];
    nvcc_version(nvcc, ver, sizeof ver);
    char archopt[80];
    snprintf(archopt, sizeof archopt, "-arch=%s", arch && arch[0] ? arch : "sm_90");
    uint64_t h = kf_hash64(source, strlen(source), 0);
    h = kf_hash64(archopt, strlen(archopt), h);
    if (flags) h = kf_hash64(flags, strlen(flags), h);
    h = kf_hash64(nvcc, strlen(nvcc), h);
    h = kf_hash64(ver, strlen(ver), h);
    char hex[17];
    kf_hash_hex(h, hex);

    char cu[4096], so[4096], tmpso[4200], tmpcu[4200];
    int n1 = snprintf(cu, sizeof cu, "%s/%s.cu", workdir, hex);
    int n2 = snprintf(so, sizeof so, "%s/%s.so", workdir, hex);
    if (n1 < 0 || n2 < 0 || (size_t)n1 >= sizeof cu || (size_t)n2 >= cap)
        return kf_error_set(err, KF_ERR_ARG, workdir, 0, 0, "workdir path is too long");
    if (access(so, R_OK) == 0) {
        if (log) kf_buf_printf(log, "kforge: reusing %s (same source, flags and nvcc)\n", so);
        snprintf(artifact, cap, "%s", so);
        return KF_OK;
    }
    /* temporaries unique per process and call: threads may compile the same candidate */
    static unsigned long counter;
    unsigned long seq = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    snprintf(tmpso, sizeof tmpso, "%s.tmp%ld-%lu", so, (long)getpid(), seq);
    snprintf(tmpcu, sizeof tmpcu, "%s.tmp%ld-%lu", cu, (long)getpid(), seq);
    st = kf_write_file(tmpcu, source, strlen(source), err);
    if (st != KF_OK) return st;
    if (rename(tmpcu, cu) != 0) {
        unlink(tmpcu);
        return kf_error_set(err, KF_ERR_IO, cu, 0, 0, "cannot write: %s", strerror(errno));
    }
    char **argv = NULL;
    int n = 0;
    push_word(&argv, &n, nvcc);
    push_word(&argv, &n, "-O3");
    push_word(&argv, &n, archopt);
    push_word(&argv, &n, "-Xcompiler");
    push_word(&argv, &n, "-fPIC");
    push_word(&argv, &n, "-shared");
    split_words(flags, &argv, &n);
    push_word(&argv, &n, "-o");
    push_word(&argv, &n, tmpso);
    push_word(&argv, &n, cu);

    kf_buf out = {0};
    kf_buf_puts(&out, "$");
    for (int i = 0; i < n; i++) kf_buf_printf(&out, " %s", argv[i]);
    kf_buf_puts(&out, "\n");
    size_t cmd_len = out.len;
    int ws = 0;
    char why[600];
    int rc = kf_run_capture(argv, NVCC_TIMEOUT_S, &out, NVCC_LOG_CAP, &ws, why, sizeof why);
    free_words(argv, n);
    if (rc != 0) {
        st = kf_error_set(err, KF_ERR_COMPILE, cu, 0, 0, "%s", why);
        kf_buf_printf(&out, "kforge: %s\n", why);
    } else if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        char first[800];
        int line = 0;
        log_excerpt(out.data + cmd_len, first, sizeof first, &line);
        if (WIFEXITED(ws))
            st = kf_error_set(err, KF_ERR_COMPILE, cu, line, 0, "nvcc exited with status %d%s%s",
                              WEXITSTATUS(ws), first[0] ? ":\n" : "", first);
        else
            st = kf_error_set(err, KF_ERR_COMPILE, cu, 0, 0, "nvcc killed by signal %d",
                              WTERMSIG(ws));
    } else if (rename(tmpso, so) != 0) {
        st = kf_error_set(err, KF_ERR_IO, so, 0, 0, "cannot rename artifact: %s", strerror(errno));
    }
    if (st != KF_OK) unlink(tmpso);
    else snprintf(artifact, cap, "%s", so);
    if (log) kf_buf_putn(log, out.data ? out.data : "", out.len);
    kf_buf_free(&out);
    return st;
}
