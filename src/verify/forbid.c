/*
 * No PyTorch, Python, vendor library or dynamic loader in a kernel (docs/kernel-contract.md,
 * "What the kernel must compute itself"): checked in the parent, from outside the
 * candidate, after the build and before anything of it runs.
 *
 * Design note. A kernel that calls cblas_sgemm, cudnnConvolutionForward, at::conv2d or
 * PyRun_SimpleString computes nothing itself: it would be timed as a kernel while a library
 * does the work, and a module task's reference is that library. Two checks, one per kind of
 * artifact, and no platform is named (the artifact says which applies):
 *   - an ELF artifact (a CPU kernel's .so, an nvcc-form CUDA candidate's .so): every
 *     undefined symbol of its dynamic symbol table (what the loader must find elsewhere:
 *     every call out of the kernel, whatever the source spelled: an asm label, a weak
 *     declaration) and every DT_NEEDED library is classified by name; the parent reads the
 *     file itself, nothing is loaded. On a device backend, an .so that holds a statically
 *     linked CUDA runtime (nvcc's default) may call the loader: that runtime loads the
 *     driver with dlopen; its source is checked for it instead. A CPU kernel never may;
 *   - the source of every candidate, the one check for an artifact that is no ELF (NVRTC's
 *     .cuk, an OpenCL program built by its driver: device code cannot call a host library,
 *     but a source naming one is still refused): its identifiers (a cublas_v2.h include, a
 *     cudnn call, at:: or torch::, dlopen, an asm label "dlopen"), comments left out. The
 *     names of programs (system, exec*) and Fortran routines are not looked for there (a
 *     kernel's own variable may be called `system` or `acc_`).
 * The names (forbid_classify): libtorch/ATen/c10 and caffe2 (C++ names in those namespaces,
 * AOTInductor's aoti_torch_ shim), Python's C API (Py*, _Py*, THP*), BLAS and LAPACK (cblas_,
 * LAPACKE_, the Fortran routines' lowercase names with a trailing underscore, OpenBLAS,
 * MKL), cuBLAS, cuBLASLt, cuDNN, cuFFT, cuSPARSE, cuSOLVER, oneDNN/MKL-DNN, CLBlast, rocBLAS,
 * MIOpen, the dynamic loader's loading and resolving (dlopen, dlmopen, dlsym, dlvsym, its
 * private _dl_ and __libc_dl entries; not dladdr, dlinfo or dl_iterate_phdr, which only say
 * what is loaded where: the sandbox's tests use dladdr) and starting a program (system, popen, the
 * exec family, posix_spawn: the way to a Python with torch in it). This is a tripwire for
 * a kernel that names a library, not a barrier against one that hides it (a raw syscall
 * instruction, a hand-walked link map): those still run under the sandbox's limits.
 */
#include "verify/verify_int.h"

#include <ctype.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest artifact read whole for its symbols. */
#define FORBID_MAX_ARTIFACT ((size_t)1 << 30)

typedef struct {
    const char *name; /* a prefix, or the whole name where exact */
    int exact;
    const char *what;
} forbid_rule;

static const forbid_rule k_rules[] = {
    {"cblas_", 0, "a BLAS library (CBLAS)"},
    {"LAPACKE_", 0, "LAPACK"},
    {"openblas_", 0, "OpenBLAS"},
    {"mkl_", 0, "Intel MKL"},
    {"MKL_", 0, "Intel MKL"},
    {"cublasLt", 0, "cuBLASLt"},
    {"cublas", 0, "cuBLAS"},
    {"cudnn", 0, "cuDNN"},
    {"cufft", 0, "cuFFT"},
    {"cusparse", 0, "cuSPARSE"},
    {"cusolver", 0, "cuSOLVER"},
    {"dnnl_", 0, "oneDNN"},
    {"mkldnn_", 0, "oneDNN (MKL-DNN)"},
    {"CLBlast", 0, "CLBlast"},
    {"clblast", 0, "CLBlast"},
    {"rocblas_", 0, "rocBLAS"},
    {"miopen", 0, "MIOpen"},
    {"aoti_torch_", 0, "libtorch (AOTInductor's C shim)"},
    {"THP", 0, "PyTorch's Python bindings"},
    {"_Py", 0, "Python's C API"},
    {"dlopen", 1, "the dynamic loader (dlopen)"},
    {"dlmopen", 1, "the dynamic loader (dlmopen)"},
    {"dlsym", 1, "the dynamic loader (dlsym)"},
    {"dlvsym", 1, "the dynamic loader (dlvsym)"},
    {"_dl_", 0, "the dynamic loader's private entries"},
    {"__libc_dl", 0, "the dynamic loader's private entries"},
};

/* Starting a program: checked in artifacts only (a kernel's own variable may be `system`). */
static const forbid_rule k_spawn[] = {
    {"system", 1, "starting a program (system)"},
    {"popen", 1, "starting a program (popen)"},
    {"execl", 1, "starting a program (execl)"},
    {"execlp", 1, "starting a program (execlp)"},
    {"execle", 1, "starting a program (execle)"},
    {"execv", 1, "starting a program (execv)"},
    {"execvp", 1, "starting a program (execvp)"},
    {"execvpe", 1, "starting a program (execvpe)"},
    {"execve", 1, "starting a program (execve)"},
    {"execveat", 1, "starting a program (execveat)"},
    {"fexecve", 1, "starting a program (fexecve)"},
    {"posix_spawn", 1, "starting a program (posix_spawn)"},
    {"posix_spawnp", 1, "starting a program (posix_spawnp)"},
};

/* C++ namespaces whose names a kernel may not call (the first nested name of a mangled
 * symbol, or a source's `NS::`). */
static const struct {
    const char *ns;
    const char *what;
} k_namespaces[] = {
    {"at", "libtorch (ATen)"},     {"c10", "libtorch (c10)"},        {"torch", "libtorch"},
    {"caffe2", "libtorch (caffe2)"}, {"dnnl", "oneDNN"},              {"mkldnn", "oneDNN (MKL-DNN)"},
    {"ideep", "oneDNN (ideep)"},   {"pybind11", "Python (pybind11)"}, {"cudnn_frontend", "cuDNN"},
};

static const char *match_rules(const forbid_rule *r, size_t n, const char *name, size_t len) {
    for (size_t i = 0; i < n; i++) {
        size_t k = strlen(r[i].name);
        if (r[i].exact ? len == k && memcmp(name, r[i].name, k) == 0 : len >= k && memcmp(name, r[i].name, k) == 0)
            return r[i].what;
    }
    return NULL;
}

static const char *match_namespace(const char *ns, size_t len) {
    for (size_t i = 0; i < sizeof k_namespaces / sizeof *k_namespaces; i++)
        if (strlen(k_namespaces[i].ns) == len && memcmp(ns, k_namespaces[i].ns, len) == 0) return k_namespaces[i].what;
    return NULL;
}

/* The library a mangled C++ name's outermost namespace belongs to, or NULL
 * (_ZN[rVKRO]*<len><name>..., _ZNK..., _ZZN... for a local entity). */
static const char *mangled(const char *s) {
    if (strncmp(s, "_Z", 2) != 0) return NULL;
    s += 2;
    if (*s == 'Z') s++; /* a local name: its function's name follows */
    if (*s != 'N') return NULL;
    s++;
    while (*s == 'r' || *s == 'V' || *s == 'K' || *s == 'R' || *s == 'O') s++;
    if (s[0] == 'S' && s[1] == 't') return NULL; /* std:: */
    if (!isdigit((unsigned char)*s)) return NULL;
    long n = strtol(s, (char **)&s, 10);
    if (n <= 0 || n > 64 || strlen(s) < (size_t)n) return NULL;
    return match_namespace(s, (size_t)n);
}

/* Fortran BLAS/LAPACK (sgemm_, dgesv_, isamax_): lowercase letters and digits, one
 * trailing underscore, no other. */
static int fortran_routine(const char *s, size_t len) {
    if (len < 4 || len > 10 || s[len - 1] != '_' || !islower((unsigned char)s[0])) return 0;
    for (size_t i = 1; i + 1 < len; i++)
        if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* What the symbol (or identifier, in_source) name of length len belongs to, or NULL. */
static const char *forbid_classify(const char *name, size_t len, int in_source) {
    const char *w = match_rules(k_rules, sizeof k_rules / sizeof *k_rules, name, len);
    if (w) return w;
    if (len > 2 && name[0] == 'P' && name[1] == 'y' && (isupper((unsigned char)name[2]) || name[2] == '_'))
        return "Python's C API";
    if (in_source) return len == 6 && memcmp(name, "Python", 6) == 0 ? "Python's C API (Python.h)" : NULL;
    if ((w = match_rules(k_spawn, sizeof k_spawn / sizeof *k_spawn, name, len))) return w;
    if (fortran_routine(name, len)) return "a BLAS or LAPACK library (a Fortran routine)";
    return mangled(name);
}

/* A DT_NEEDED library that is one of the forbidden ones. */
static const char *forbid_library(const char *so) {
    static const struct {
        const char *part, *what;
    } libs[] = {{"torch", "libtorch"},     {"c10", "libtorch (c10)"}, {"python", "Python"},    {"blas", "a BLAS library"},
                {"lapack", "LAPACK"},      {"cudnn", "cuDNN"},        {"mkl", "Intel MKL"},    {"dnnl", "oneDNN"},
                {"cufft", "cuFFT"},        {"cusparse", "cuSPARSE"},  {"cusolver", "cuSOLVER"}, {"miopen", "MIOpen"}};
    for (size_t i = 0; i < sizeof libs / sizeof *libs; i++)
        if (strstr(so, libs[i].part)) return libs[i].what;
    return NULL;
}

static void say(char *why, size_t cap, const char *kind, const char *name, size_t len, const char *what) {
    snprintf(why, cap,
             "the kernel %s '%.*s' (%s): a kernel computes the task itself, with no call into PyTorch, "
             "Python, a vendor library or the dynamic loader (docs/kernel-contract.md)",
             kind, (int)(len > 120 ? 120 : len), name, what);
}

/* Reads ELF64 or ELF32 fields of the host's byte order. */
#define ELF_SCAN(BITS)                                                                                           \
    static int scan_elf##BITS(const char *d, size_t n, int device, char *why, size_t cap) {                                \
        const Elf##BITS##_Ehdr *eh = (const void *)d;                                                           \
        if (n < sizeof *eh || eh->e_shentsize != sizeof(Elf##BITS##_Shdr) || eh->e_shoff > n ||                \
            (size_t)eh->e_shnum * sizeof(Elf##BITS##_Shdr) > n - eh->e_shoff)                                   \
            return 0;                                                                                           \
        const Elf##BITS##_Shdr *sh = (const void *)(d + eh->e_shoff);                                           \
        int runtime = 0; /* a statically linked CUDA runtime: it loads the driver with dlopen */               \
        for (int i = 0; i < eh->e_shnum && device && !runtime; i++) {                                           \
            if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum || sh[i].sh_offset > n ||          \
                sh[i].sh_size > n - sh[i].sh_offset)                                                            \
                continue;                                                                                       \
            const Elf##BITS##_Shdr *st = &sh[sh[i].sh_link];                                                    \
            if (st->sh_offset > n || st->sh_size > n - st->sh_offset) continue;                                 \
            const Elf##BITS##_Sym *sym = (const void *)(d + sh[i].sh_offset);                                   \
            for (size_t k = 1; k < sh[i].sh_size / sizeof *sym && !runtime; k++)                                \
                runtime = sym[k].st_shndx != SHN_UNDEF && sym[k].st_name < st->sh_size &&                       \
                          strncmp(d + st->sh_offset + sym[k].st_name, "cudaLaunchKernel",                      \
                                  st->sh_size - sym[k].st_name) == 0;                                           \
        }                                                                                                       \
        for (int i = 0; i < eh->e_shnum; i++) {                                                                 \
            int dyn = sh[i].sh_type == SHT_DYNAMIC;                                                              \
            if (sh[i].sh_type != SHT_DYNSYM && !dyn) continue;                                                 \
            if (sh[i].sh_link >= eh->e_shnum || sh[i].sh_offset > n || sh[i].sh_size > n - sh[i].sh_offset)     \
                continue;                                                                                       \
            const Elf##BITS##_Shdr *st = &sh[sh[i].sh_link];                                                    \
            if (st->sh_offset > n || st->sh_size > n - st->sh_offset || st->sh_size == 0) continue;             \
            const char *str = d + st->sh_offset;                                                                \
            size_t strn = st->sh_size;                                                                          \
            if (dyn) {                                                                                          \
                const Elf##BITS##_Dyn *e = (const void *)(d + sh[i].sh_offset);                                 \
                for (size_t k = 0; k < sh[i].sh_size / sizeof *e && e[k].d_tag != DT_NULL; k++) {               \
                    if (e[k].d_tag != DT_NEEDED || e[k].d_un.d_val >= strn) continue;                           \
                    const char *so = str + e[k].d_un.d_val;                                                     \
                    size_t len = strnlen(so, strn - e[k].d_un.d_val);                                           \
                    const char *w = forbid_library(so);                                                         \
                    if (w) return say(why, cap, "is linked against", so, len, w), 1;                           \
                }                                                                                               \
                continue;                                                                                       \
            }                                                                                                   \
            const Elf##BITS##_Sym *sym = (const void *)(d + sh[i].sh_offset);                                   \
            for (size_t k = 1; k < sh[i].sh_size / sizeof *sym; k++) {                                          \
                if (sym[k].st_shndx != SHN_UNDEF || sym[k].st_name == 0 || sym[k].st_name >= strn) continue;    \
                const char *name = str + sym[k].st_name;                                                        \
                size_t len = strnlen(name, strn - sym[k].st_name);                                              \
                const char *w = forbid_classify(name, len, 0);                                                  \
                if (w && runtime && strncmp(w, "the dynamic loader", 18) == 0) w = NULL;                        \
                if (w) return say(why, cap, "calls", name, len, w), 1;                                          \
            }                                                                                                   \
        }                                                                                                       \
        return 0;                                                                                               \
    }
ELF_SCAN(64)
ELF_SCAN(32)

/* 1 with why set when the source's identifiers name a forbidden library, else 0. */
static int scan_source(const char *s, char *why, size_t cap) {
    while (*s) {
        if (s[0] == '/' && s[1] == '/') {
            while (*s && *s != '\n') s++;
        } else if (s[0] == '/' && s[1] == '*') {
            const char *e = strstr(s + 2, "*/");
            s = e ? e + 2 : s + strlen(s);
        } else if (isalpha((unsigned char)*s) || *s == '_') {
            const char *b = s;
            while (isalnum((unsigned char)*s) || *s == '_') s++;
            size_t len = (size_t)(s - b);
            const char *w = forbid_classify(b, len, 1);
            if (!w && s[0] == ':' && s[1] == ':') w = match_namespace(b, len);
            if (w) return say(why, cap, "names", b, len, w), 1;
        } else if (isdigit((unsigned char)*s)) {
            while (isalnum((unsigned char)*s) || *s == '_' || *s == '.') s++;
        } else {
            s++;
        }
    }
    return 0;
}

int kf_verify_forbidden(const char *source, const char *artifact, int device, char *why, size_t cap) {
    why[0] = 0;
    FILE *f = artifact ? fopen(artifact, "rb") : NULL;
    unsigned char id[EI_NIDENT] = {0};
    int elf = f && fread(id, 1, sizeof id, f) == sizeof id && memcmp(id, ELFMAG, SELFMAG) == 0;
    if (f) fclose(f);
    const int host_data = *(const unsigned char *)&(const uint16_t){1} ? ELFDATA2LSB : ELFDATA2MSB;
    if (elf && id[EI_DATA] == host_data && (id[EI_CLASS] == ELFCLASS64 || id[EI_CLASS] == ELFCLASS32)) {
        char *d = NULL;
        size_t n = 0;
        int hit = 0;
        if (kf_read_file_max(artifact, FORBID_MAX_ARTIFACT, &d, &n, NULL) == KF_OK)
            hit = id[EI_CLASS] == ELFCLASS64 ? scan_elf64(d, n, device, why, cap) : scan_elf32(d, n, device, why, cap);
        free(d);
        if (hit) return 1;
    }
    /* the source too: what a GPU artifact cannot show, and the loader calls of an nvcc-form
     * candidate, whose .so's own CUDA runtime calls dlopen */
    return source ? scan_source(source, why, cap) : 0;
}
