/*
 * Inside the PyTorch importer: the lowering state and the helpers that import.c (the
 * driver, the elementwise, reduction, view and matmul rules) shares with import_nn.c (the
 * rules for losses, norms, attention, concatenation and diagonals, which write several
 * .kf statements per ATen node).
 */
#ifndef KF_IMPORT_INT_H
#define KF_IMPORT_INT_H

#include "kforge/ir.h"

#include <jansson.h>

/* A lowered value: the .kf expression text that names it, or a view of one. */
typedef struct lval {
    char name[64];   /* FX node name */
    char kf[64];     /* .kf value name ("" until lowered) */
    int rank;
    int is_tuple;
    json_t *node;    /* the graph.json node (borrowed), NULL for inputs */
    json_t *meta;    /* an input's graph.json entry (dtype, shape; borrowed) */
    char *expr;      /* its .kf expression, when it has a statement (owned) */
    int order;       /* position among the statements */
    int is_output;
    int visiting;    /* being lowered: a reference back to it is a cycle */
    int failed;      /* could not be lowered (noted once) */
} lval;

/* A statement of its own for part of one node's lowering (a loss's difference, used
 * twice): never an output. */
typedef struct ltmp {
    char kf[80];
    char *expr;      /* owned */
    int order;
} ltmp;

typedef struct lower {
    const char *path;
    json_t *root;
    lval *v;
    int nv;
    int nstmt;       /* statements so far */
    kf_buf unsupported;
    int nunsupported;
    ltmp *t;         /* the temporaries (kf_imp_tmp), nt of cap */
    int nt, tcap;
    kf_error *err;
} lower;

/* Notes node n as not lowerable, with the reason (every such node is named at the end). */
void kf_imp_unsupported(lower *L, json_t *n, const char *why);
/* The i-th positional argument of node n, or its keyword argument kw, or NULL. */
json_t *kf_imp_arg(json_t *n, size_t i, const char *kw);
/* 1 when an argument is absent or None. */
int kf_imp_is_null(json_t *a);
/* A numeric literal argument (ints, floats, booleans) into *d; 0 if it is not one. */
int kf_imp_num(json_t *a, double *d);
/* d as the shortest text that reads back to the same double; returns buf. */
const char *kf_imp_numtxt(double d, char *buf, size_t cap);
/* The tensor operand an argument names, lowered on demand; NULL with the reason in *why
 * (NULL too when the operand's own node was noted already). */
lval *kf_imp_operand(lower *L, json_t *a, const char **why);
/* An operand as .kf text (a tensor's name or a finite number literal); 0 with *why. */
int kf_imp_term(lower *L, json_t *a, char *out, size_t cap, const char **why);
/* An int or int-list argument as "[a, b]" ("" for None or []: all axes); 0 if neither. */
int kf_imp_axes_text(json_t *a, char *out, size_t cap);
/* Writes "NAME = EXPR" for v (its FX name, made a .kf name). */
void kf_imp_emit(lower *L, lval *v, const char *expr);
/* A temporary statement "NAME = EXPR" for part of v's lowering, placed before v's own;
 * its .kf name (derived from v's FX name and a counter) into name. */
void kf_imp_tmp(lower *L, const lval *v, const char *expr, char *name, size_t cap);
/* Whether the ATen target t is op ("aten.relu" matches every overload "aten.relu.*"). */
int kf_imp_target_is(const char *t, const char *op);
const char *kf_imp_node_target(json_t *n);
/* The rank and the dims PyTorch recorded for a lowered value (a node's output or an
 * input); dim k counts from the end when negative; -1 when unknown. */
int kf_imp_rank(const lval *v);
int64_t kf_imp_dim(const lval *v, int k);

/* The rules of import_nn.c for node v (target t): 1 lowered, 0 not lowerable (noted),
 * -1 when t is none of its targets. */
int kf_imp_lower_nn(lower *L, lval *v, const char *t);
/* getitem k of a tuple node these rules made (aten.broadcast_tensors): 1 lowered, 0 noted,
 * -1 when the tuple is none of theirs. */
int kf_imp_getitem_nn(lower *L, lval *v, const lval *tuple, long long k);

#endif
