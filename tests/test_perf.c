/*
 * Tests of the roofline floor (src/perf/roofline.c): floors of hand-built graphs against
 * floors computed by hand, the memory/compute choice, unknown (zero) ceilings, and where a
 * measured time is placed (GB/s, GFLOP/s, % of floor).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kforge/perf.h"

#define close_to(a, b) cr_assert(fabs((a) - (b)) <= 1e-9 * fabs(b) + 1e-300, \
                                 "%s = %.12g, want %.12g", #a, (double)(a), (double)(b))

static kf_ceilings ceil_of(double copy_gbs, double peak32) {
    kf_ceilings c;
    memset(&c, 0, sizeof c);
    snprintf(c.device_key, sizeof c.device_key, "test-device");
    c.measured = 1;
    c.threads = 2;
    c.copy_gbs = copy_gbs;
    c.read_gbs = copy_gbs / 2; /* different on purpose: must not be used */
    c.write_gbs = copy_gbs / 3;
    c.peak_gflops_f32 = peak32;
    c.peak_gflops_f64 = peak32 / 7;
    return c;
}

static int input(kf_graph *g, const char *name, kf_dtype dt, int rank, int64_t d0, int64_t d1) {
    kf_shape s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    s.d[0] = d0;
    s.d[1] = d1;
    kf_error err = {0};
    int id = kf_graph_add_input(g, name, dt, &s, &err);
    cr_assert_geq(id, 0, "add_input: %s", err.msg);
    return id;
}

static int node(kf_graph *g, kf_op op, int a, int b) {
    int ins[2] = {a, b};
    kf_error err = {0};
    int id = kf_graph_add_node(g, op, ins, b < 0 ? 1 : 2, NULL, NULL, 0, 0, &err);
    cr_assert_geq(id, 0, "add_node: %s", err.msg);
    return id;
}

static void output(kf_graph *g, int v) {
    kf_error err = {0};
    cr_assert_eq(kf_graph_mark_output(g, v, &err), KF_OK, "mark_output: %s", err.msg);
}

/* y = relu(x), x f32[1000]: 4000 bytes in + 4000 out, 1000 flops. */
static kf_graph *relu_1000(void) {
    kf_graph *g = kf_graph_new("relu");
    int x = input(g, "x", KF_F32, 1, 1000, 0);
    output(g, node(g, KF_OP_RELU, x, -1));
    return g;
}

/* c = a @ b, 64x64x64 f32: 3 * 64*64*4 = 49152 bytes, 2 * 64^3 = 524288 flops. */
static kf_graph *matmul_64(void) {
    kf_graph *g = kf_graph_new("mm");
    int a = input(g, "a", KF_F32, 2, 64, 64);
    int b = input(g, "b", KF_F32, 2, 64, 64);
    output(g, node(g, KF_OP_MATMUL, a, b));
    return g;
}

Test(roofline, elementwise_is_memory_bound) {
    kf_graph *g = relu_1000();
    kf_ceilings c = ceil_of(10.0, 100.0);
    kf_roofline r;
    kf_roofline_of(g, &c, &r);
    close_to(r.bytes, 8000.0);
    close_to(r.flops, 1000.0);
    close_to(r.mem_floor_s, 8000.0 / 10e9);     /* 8e-7 s */
    close_to(r.compute_floor_s, 1000.0 / 100e9); /* 1e-8 s */
    close_to(r.floor_s, 8e-7);
    cr_assert_str_eq(r.bound, "memory");
    close_to(r.bw_gbs, 10.0);
    close_to(r.peak_gflops, 100.0);
    cr_assert_eq(r.measured, 1);
    kf_graph_free(g);
}

Test(roofline, binary_with_broadcast_counts_graph_io_only) {
    /* z = x * y + x, x f32[100, 10], y f32[10] (broadcast). Intermediates are free:
     * bytes = x + y + z, flops = 2 * 1000. */
    kf_graph *g = kf_graph_new("fma");
    int x = input(g, "x", KF_F32, 2, 100, 10);
    int y = input(g, "y", KF_F32, 1, 10, 0);
    int t = node(g, KF_OP_MUL, x, y);
    output(g, node(g, KF_OP_ADD, t, x));
    kf_ceilings c = ceil_of(20.0, 50.0);
    kf_roofline r;
    kf_roofline_of(g, &c, &r);
    close_to(r.bytes, 4000.0 + 40.0 + 4000.0);
    close_to(r.flops, 2000.0);
    close_to(r.mem_floor_s, 8040.0 / 20e9);
    close_to(r.compute_floor_s, 2000.0 / 50e9);
    close_to(r.floor_s, 8040.0 / 20e9);
    cr_assert_str_eq(r.bound, "memory");
    kf_graph_free(g);
}

Test(roofline, matmul_is_compute_bound) {
    kf_graph *g = matmul_64();
    kf_ceilings c = ceil_of(10.0, 100.0);
    kf_roofline r;
    kf_roofline_of(g, &c, &r);
    close_to(r.bytes, 49152.0);
    close_to(r.flops, 524288.0);
    close_to(r.mem_floor_s, 49152.0 / 10e9);      /* 4.9152 us */
    close_to(r.compute_floor_s, 524288.0 / 100e9); /* 5.24288 us */
    close_to(r.floor_s, 5.24288e-6);
    cr_assert_str_eq(r.bound, "compute");
    /* more bandwidth does not change a compute-bound floor; less peak does */
    c = ceil_of(1000.0, 100.0);
    kf_roofline_of(g, &c, &r);
    close_to(r.floor_s, 5.24288e-6);
    c = ceil_of(10.0, 1000.0);
    kf_roofline_of(g, &c, &r);
    cr_assert_str_eq(r.bound, "memory");
    close_to(r.floor_s, 4.9152e-6);
    kf_graph_free(g);
}

/* An f32 contraction on a device with a TF32 matrix rate: the compute ceiling is
 * max(f32 peak, tf32 / 3) (3xTF32 on tensor cores keeps f32 accuracy at a third of the TF32
 * rate), so the floor stays under what such a kernel can reach; elementwise work and a
 * device whose tf32 / 3 is below its f32 peak keep the f32 peak; an unknown f32 peak stays
 * unknown; a 16-bit matmul keeps its matrix rate. */
Test(roofline, f32_matmul_against_tf32_over_3) {
    kf_graph *g = matmul_64();
    cr_assert(kf_graph_has_mm32(g));
    kf_ceilings c = ceil_of(10.0, 100.0);
    c.peak_gflops_tf32 = 600.0; /* / 3 = 200 > 100 */
    kf_roofline r;
    kf_roofline_of(g, &c, &r);
    close_to(r.peak_gflops, 200.0);
    close_to(r.compute_floor_s, 524288.0 / 200e9);
    close_to(r.floor_s, 49152.0 / 10e9); /* now under the memory floor */
    cr_assert_str_eq(r.bound, "memory");
    c.peak_gflops_tf32 = 240.0; /* / 3 = 80 < 100: the f32 peak stays */
    kf_roofline_of(g, &c, &r);
    close_to(r.peak_gflops, 100.0);
    c.peak_gflops_tf32 = NAN;
    kf_roofline_of(g, &c, &r);
    close_to(r.peak_gflops, 100.0);
    c = ceil_of(10.0, 0.0);
    c.peak_gflops_tf32 = 600.0;
    kf_roofline_of(g, &c, &r);
    cr_assert_eq(r.peak_gflops, 0.0, "an unknown f32 peak became %g", r.peak_gflops);
    kf_graph_free(g);

    g = relu_1000(); /* no contraction: the f32 peak */
    cr_assert(!kf_graph_has_mm32(g));
    c = ceil_of(10.0, 100.0);
    c.peak_gflops_tf32 = 600.0;
    kf_roofline_of(g, &c, &r);
    close_to(r.peak_gflops, 100.0);
    kf_graph_free(g);

    g = kf_graph_new("mm16"); /* bf16 operands: the 16-bit rate, tf32 aside */
    int a = input(g, "a", KF_BF16, 2, 64, 64), b = input(g, "b", KF_BF16, 2, 64, 64);
    output(g, node(g, KF_OP_MATMUL, a, b));
    cr_assert(!kf_graph_has_mm32(g));
    c.peak_gflops_mm16 = 1000.0;
    kf_roofline_of(g, &c, &r);
    close_to(r.peak_gflops, 1000.0);
    c.peak_gflops_mm16 = 0;
    kf_roofline_of(g, &c, &r);
    cr_assert_eq(r.peak_gflops, 0.0);
    kf_graph_free(g);
}

Test(roofline, zero_ceilings_give_zero_floors) {
    kf_graph *g = matmul_64();
    kf_ceilings c = ceil_of(0.0, 100.0);
    c.measured = 0;
    kf_roofline r;
    kf_roofline_of(g, &c, &r);
    close_to(r.mem_floor_s, 0.0);
    close_to(r.compute_floor_s, 524288.0 / 100e9);
    close_to(r.floor_s, r.compute_floor_s);
    cr_assert_str_eq(r.bound, "compute");
    cr_assert_eq(r.measured, 0);
    c = ceil_of(10.0, 0.0);
    kf_roofline_of(g, &c, &r);
    close_to(r.compute_floor_s, 0.0);
    close_to(r.floor_s, 49152.0 / 10e9);
    cr_assert_str_eq(r.bound, "memory");
    c = ceil_of(0.0, 0.0);
    kf_roofline_of(g, &c, &r);
    cr_assert_eq(r.floor_s, 0.0);
    cr_assert_str_eq(r.bound, "memory");
    close_to(r.bytes, 49152.0); /* counts are still reported */
    close_to(r.flops, 524288.0);
    c = ceil_of(NAN, -5.0);
    kf_roofline_of(g, &c, &r);
    cr_assert_eq(r.floor_s, 0.0);
    cr_assert_eq(r.bw_gbs, 0.0);
    cr_assert_eq(r.peak_gflops, 0.0);
    kf_graph_free(g);
}

Test(perf_place, rates_and_percent_of_floor) {
    kf_graph *g = relu_1000();
    kf_ceilings c = ceil_of(10.0, 100.0);
    kf_roofline r;
    kf_roofline_of(g, &c, &r);
    kf_perf_point p;
    kf_perf_place(&r, 1.6e-6, &p); /* twice the 0.8 us floor */
    close_to(p.time_s, 1.6e-6);
    close_to(p.gbs, 8000.0 / 1.6e-6 / 1e9);     /* 5 GB/s */
    close_to(p.gflops, 1000.0 / 1.6e-6 / 1e9);  /* 0.625 GFLOP/s */
    close_to(p.pct_floor, 50.0);
    kf_perf_place(&r, 8e-7, &p);
    close_to(p.pct_floor, 100.0);
    close_to(p.gbs, 10.0); /* at the floor, exactly the bandwidth ceiling */
    kf_graph_free(g);

    g = matmul_64();
    kf_roofline_of(g, &c, &r);
    kf_perf_place(&r, 1e-5, &p);
    close_to(p.gflops, 524288.0 / 1e-5 / 1e9); /* 52.4288 */
    close_to(p.gbs, 49152.0 / 1e-5 / 1e9);     /* 4.9152 */
    close_to(p.pct_floor, 100.0 * 5.24288e-6 / 1e-5);
    kf_perf_place(&r, 2e-6, &p); /* faster than the floor: > 100 %, flagged by callers */
    cr_assert_gt(p.pct_floor, 100.0);
    kf_graph_free(g);
}

Test(perf_place, bad_times_give_zeros) {
    kf_graph *g = relu_1000();
    kf_ceilings c = ceil_of(10.0, 100.0);
    kf_roofline r;
    kf_roofline_of(g, &c, &r);
    const double bad[] = {0.0, -1.0, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kf_perf_point p;
        kf_perf_place(&r, bad[i], &p);
        cr_assert_eq(p.gbs, 0.0);
        cr_assert_eq(p.gflops, 0.0);
        cr_assert_eq(p.pct_floor, 0.0);
    }
    kf_graph_free(g);
}
