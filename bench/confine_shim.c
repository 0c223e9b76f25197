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
