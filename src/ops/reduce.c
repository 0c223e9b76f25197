/*
 * The REDUCE records: a combiner with its identity over a set of axes. The interpreter and
 * the reduction templates read the combiner (and the mean finaliser) from the record; no
 * code outside this file knows which op is which combiner.
 */
#include "ops_int.h"

#include <stddef.h>

#define AXES_ALL {"axes", KF_ATTR_AXES, offsetof(kf_attrs, axes), "all", "1", NULL}
#define KEEPDIM {"keepdim", KF_ATTR_BOOL, offsetof(kf_attrs, keepdim), "false", "2", NULL}
#define AXIS_LAST {"axis", KF_ATTR_AXIS, offsetof(kf_attrs, axes), "-1", "1", NULL}
#define REDUCE .cls = KF_CLASS_REDUCE, .kind = KF_KIND_REDUCE, .min_in = 1, .max_in = 1, .flops = 1

const kf_op_def kf_ops_reduce[] = {
    {.op = KF_OP_SUM, .name = "sum", REDUCE, .doc = "sum over axes", .attrs = {AXES_ALL, KEEPDIM},
     .aten = {"aten.sum"}, .combiner = KF_COMB_SUM,
     .torch = "lambda x, axes=None, keepdim=False: torch.sum(x, dim=_dims(x, axes), keepdim=keepdim)"},
    {.op = KF_OP_MEAN, .name = "mean", REDUCE, .doc = "mean over axes", .attrs = {AXES_ALL, KEEPDIM},
     .aten = {"aten.mean"}, .combiner = KF_COMB_SUM, .mean = 1,
     .torch = "lambda x, axes=None, keepdim=False: torch.mean(x, dim=_dims(x, axes), keepdim=keepdim)"},
    {.op = KF_OP_MAX, .name = "max", REDUCE, .doc = "maximum over axes, NaN propagating",
     .attrs = {AXES_ALL, KEEPDIM}, .aten = {"aten.amax"}, .combiner = KF_COMB_MAX,
     .torch = "lambda x, axes=None, keepdim=False: torch.amax(x, dim=_dims(x, axes), keepdim=keepdim)"},
    {.op = KF_OP_MIN, .name = "min", REDUCE, .doc = "minimum over axes, NaN propagating",
     .attrs = {AXES_ALL, KEEPDIM}, .aten = {"aten.amin"}, .combiner = KF_COMB_MIN,
     .torch = "lambda x, axes=None, keepdim=False: torch.amin(x, dim=_dims(x, axes), keepdim=keepdim)"},
    {.op = KF_OP_PROD, .name = "prod", REDUCE, .doc = "product over axes",
     .attrs = {AXES_ALL, KEEPDIM}, .aten = {"aten.prod"}, .combiner = KF_COMB_PROD,
     .torch = "_prod"},
    {.op = KF_OP_ARGMAX, .name = "argmax", REDUCE, .doc = "index (i64) of the first maximum along one axis",
     .attrs = {AXIS_LAST, KEEPDIM}, .aten = {"aten.argmax"}, .combiner = KF_COMB_ARGMAX,
     .index_ties = 1,
     .torch = "lambda x, axis=-1, keepdim=False: torch.argmax(x, dim=axis, keepdim=keepdim)"},
    {.op = KF_OP_ARGMIN, .name = "argmin", REDUCE, .doc = "index (i64) of the first minimum along one axis",
     .attrs = {AXIS_LAST, KEEPDIM}, .aten = {"aten.argmin"}, .combiner = KF_COMB_ARGMIN,
     .index_ties = 1,
     .torch = "lambda x, axis=-1, keepdim=False: torch.argmin(x, dim=axis, keepdim=keepdim)"},
};
const int kf_ops_reduce_count = sizeof kf_ops_reduce / sizeof kf_ops_reduce[0];
