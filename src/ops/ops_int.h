/*
 * Inside src/ops: the per-class record arrays the registry (registry.c) indexes.
 */
#ifndef KF_OPS_INT_H
#define KF_OPS_INT_H

#include "kforge/ops.h"

extern const kf_op_def kf_ops_pointwise[];
extern const int kf_ops_pointwise_count;
extern const kf_op_def kf_ops_reduce[];
extern const int kf_ops_reduce_count;
extern const kf_op_def kf_ops_composite[];
extern const int kf_ops_composite_count;
extern const kf_op_def kf_ops_scan[];
extern const int kf_ops_scan_count;
extern const kf_op_def kf_ops_view[];
extern const int kf_ops_view_count;
extern const kf_op_def kf_ops_conv[];
extern const int kf_ops_conv_count;
extern const kf_op_def kf_ops_gather[];
extern const int kf_ops_gather_count;

#endif
