/*
 * libFuzzer harness for the lowering of a PyTorch graph.json (src/ir/import.c,
 * kf_import_torch_graph): the JSON the Python importer writes becomes .kf text, which the
 * parser then checks. The input is handed over as a file (the function takes a path), an
 * in-memory one (memfd) so that a run writes nothing to disk.
 *
 * Build and run: docs/fuzzing.md.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kforge/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;
    int fd = memfd_create("graph.json", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    char *text = NULL;
    kf_graph *g = NULL;
    kf_error err;
    memset(&err, 0, sizeof err);
    kf_status st = kf_import_torch_graph(path, &text, &g, &err);
    if (st == KF_OK && !g) abort();
    if (st != KF_OK && (g != NULL || err.msg[0] == 0)) abort();
    kf_graph_free(g);
    free(text);
    close(fd);
    return 0;
}
