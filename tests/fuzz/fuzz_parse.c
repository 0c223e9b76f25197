/*
 * libFuzzer harness for the .kf task parser (src/ir/parse.c) and what it drives: the lexer,
 * the expression grammar, the shape and dtype rules of kf_graph_add_node, constant folding
 * and the FLOP and byte counts of a parsed graph. Any crash, sanitizer report or leak is a
 * defect; a rejected text is fine (it only needs a message).
 *
 * Build and run: docs/fuzzing.md (cmake -DKF_FUZZ=ON with clang; `make fuzz`).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > KF_TASK_MAX_BYTES) return 0; /* kf_parse_file refuses these */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0; /* an embedded NUL ends the text, as kf_parse_string documents */
    kf_graph *g = NULL;
    kf_error err;
    memset(&err, 0, sizeof err);
    kf_status st = kf_parse_string(text, "fuzz.kf", &g, &err);
    if (st == KF_OK) {
        /* a graph the parser accepted must be whole: counts and names work on it */
        volatile double f = kf_graph_flops(g) + kf_graph_min_bytes(g);
        (void)f;
        for (int i = 0; i < g->nvalues; i++)
            if (kf_graph_find(g, g->values[i].name) != i) abort();
        kf_graph_free(g);
    } else {
        if (g != NULL || err.msg[0] == 0) abort(); /* a failure is a message, never a graph */
    }
    free(text);
    return 0;
}
