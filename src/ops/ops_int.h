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

/* vmath.c: y[i] = f(x[i]) for i < n, f one of libm's functions, taken through glibc's vector
 * math library where the build found it (within a few ulp of libm's scalar function, the
 * same IEEE special values; tests/test_vmath.c), per element from libm otherwise. x and y
 * may be the same array; a value depends on its argument only, never on n or its index. */
void kf_vm_exp(const double *x, double *y, int64_t n);
void kf_vm_log(const double *x, double *y, int64_t n);
void kf_vm_tanh(const double *x, double *y, int64_t n);
void kf_vm_erfc(const double *x, double *y, int64_t n);
void kf_vm_expm1(const double *x, double *y, int64_t n);
void kf_vm_log1p(const double *x, double *y, int64_t n);

/* The variant the kf_vm_ functions take: KF_VM_AVX2 (libmvec, 4 lanes), KF_VM_SSE (libmvec,
 * 2 lanes), KF_VM_SCALAR (libm per element, a build without libmvec). kf_vm_set_path
 * chooses one for the tests (AVX2 only on a CPU that has it; -1: back to the CPU's choice;
 * ignored without libmvec) and returns the previous one; not for use while ops run. */
enum { KF_VM_SCALAR = 0, KF_VM_SSE = 1, KF_VM_AVX2 = 2 };
int kf_vm_path(void);
int kf_vm_set_path(int path);

#endif
