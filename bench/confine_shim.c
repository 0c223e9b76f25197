/* LD_PRELOAD shim for bench/confine_probe: logs the socket(), connect() and bind() calls
 * the CUDA driver makes (family, path; '@' = abstract), then makes them. Diagnostic only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

int socket(int domain, int type, int protocol) {
    int (*real)(int, int, int) = (int (*)(int, int, int))dlsym(RTLD_NEXT, "socket");
    int r = real(domain, type, protocol);
    int e = errno;
    fprintf(stderr, "  [shim] socket(family %d, type %#x) -> %d%s%s\n", domain, type, r, r < 0 ? " " : "",
            r < 0 ? strerror(e) : "");
    errno = e;
    return r;
}

static void show(const char *what, const struct sockaddr *a, socklen_t n, int r, int e) {
    char path[120] = "";
    if (a && a->sa_family == AF_UNIX && n > sizeof(sa_family_t)) {
        const struct sockaddr_un *u = (const struct sockaddr_un *)a;
        size_t len = n - sizeof(sa_family_t);
        if (len >= sizeof path) len = sizeof path - 1;
        memcpy(path, u->sun_path, len);
        path[len] = 0;
        if (path[0] == 0) path[0] = '@';
    }
    fprintf(stderr, "  [shim] %s(family %d, '%s') -> %d%s%s\n", what, a ? a->sa_family : -1, path, r,
            r < 0 ? " " : "", r < 0 ? strerror(e) : "");
}

int connect(int fd, const struct sockaddr *a, socklen_t n) {
    int (*real)(int, const struct sockaddr *, socklen_t) =
        (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
    int r = real(fd, a, n), e = errno;
    show("connect", a, n, r, e);
    errno = e;
    return r;
}

int bind(int fd, const struct sockaddr *a, socklen_t n) {
    int (*real)(int, const struct sockaddr *, socklen_t) =
        (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
    int r = real(fd, a, n), e = errno;
    show("bind", a, n, r, e);
    errno = e;
    return r;
}

/* opens for writing and directory creation: where the driver writes */
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>

static int logged_open(const char *fn, int dirfd, const char *path, int flags, mode_t mode) {
    int r;
    if (dirfd == -100000) {
        int (*real)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, fn);
        r = real(path, flags, mode);
    } else {
        int (*real)(int, const char *, int, ...) = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, fn);
        r = real(dirfd, path, flags, mode);
    }
    int e = errno;
    if ((flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) || r < 0)
        fprintf(stderr, "  [shim] %s(%s, %#x) -> %d%s%s\n", fn, path, flags, r, r < 0 ? " " : "",
                r < 0 ? strerror(e) : "");
    errno = e;
    return r;
}

#define MODE_ARG                                                                     \
    mode_t mode = 0;                                                                 \
    if (flags & (O_CREAT | __O_TMPFILE)) {                                           \
        va_list ap;                                                                  \
        va_start(ap, flags);                                                         \
        mode = (mode_t)va_arg(ap, int);                                              \
        va_end(ap);                                                                  \
    }
int open(const char *p, int flags, ...) { MODE_ARG return logged_open("open", -100000, p, flags, mode); }
int open64(const char *p, int flags, ...) { MODE_ARG return logged_open("open64", -100000, p, flags, mode); }
int openat(int d, const char *p, int flags, ...) { MODE_ARG return logged_open("openat", d, p, flags, mode); }
int openat64(int d, const char *p, int flags, ...) { MODE_ARG return logged_open("openat64", d, p, flags, mode); }
int mkdir(const char *p, mode_t m) {
    int (*real)(const char *, mode_t) = (int (*)(const char *, mode_t))dlsym(RTLD_NEXT, "mkdir");
    int r = real(p, m), e = errno;
    fprintf(stderr, "  [shim] mkdir(%s) -> %d%s%s\n", p, r, r < 0 ? " " : "", r < 0 ? strerror(e) : "");
    errno = e;
    return r;
}

/* stdio opens (glibc's fopen calls open internally, past the hooks above) */
#include <stdio.h>
static FILE *logged_fopen(const char *fn, const char *p, const char *m) {
    FILE *(*real)(const char *, const char *) = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, fn);
    FILE *r = real(p, m);
    int e = errno;
    if (strpbrk(m, "wa+") || !r)
        fprintf(stderr, "  [shim] %s(%s, \"%s\") -> %s%s\n", fn, p, m, r ? "ok" : "NULL ", r ? "" : strerror(e));
    errno = e;
    return r;
}
FILE *fopen(const char *p, const char *m) { return logged_fopen("fopen", p, m); }
FILE *fopen64(const char *p, const char *m) { return logged_fopen("fopen64", p, m); }
