/* Shared by the memory check's tests (test_memcheck, test_memcheck_tile). */
#ifndef KF_TEST_MEMCHECK_COMMON_H
#define KF_TEST_MEMCHECK_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Whether valgrind is on PATH (the same lookup the verifier makes). */
static inline int have_valgrind(void) {
    const char *path = getenv("PATH");
    char buf[4096];
    while (path && *path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        snprintf(buf, sizeof buf, "%.*s/valgrind", (int)len, path);
        if (len && access(buf, X_OK) == 0) return 1;
        if (!colon) break;
        path = colon + 1;
    }
    return 0;
}

#endif
