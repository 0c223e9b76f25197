/*
 * kforge roofline: the floor no kernel can beat on a device, and where a measured time
 * sits against it.
 *
 * Design note. The floor of a task is max(min_bytes / bandwidth, flops / peak): a kernel
 * must at least move the graph's inputs and outputs once (kf_graph_min_bytes) and do its
 * FLOPs (kf_graph_flops). The bandwidth is the streaming copy ceiling (read+write bytes,
 * the faster of plain and streaming stores), the peak is the f32 FMA peak, whatever the
 * task's dtype: both are the highest rates the device showed, so the floor stays a true
 * lower bound (f64 or narrow-dtype tasks get a lower, still valid, floor). A ceiling of 0
 * (unknown) gives a floor of 0 for that side: no floor is better than a wrong one.
 *
 * The exception is a task with an f16/bf16 matmul: tensor cores run those several times
 * faster than the f32 FMA peak, so its FLOPs are placed against the 16-bit matrix peak
 * (peak_gflops_mm16, the datasheet's dense rate) or, when that is unknown, against no
 * compute ceiling at all.
 *
 * Likewise an f32 contraction can run on TF32 tensor cores at f32 accuracy by splitting
 * each operand into two TF32 parts and summing three products (3xTF32; kforge's own CUDA
 * template does, gpu_mma32.c), a third of the TF32 matrix rate, which on Ampere and Hopper
 * is above the f32 FMA peak. A graph with an f32 contraction (or a composite that may lower
 * to one) is therefore placed against max(f32 peak, peak_gflops_tf32 / 3): a ceiling only
 * raised, so the floor only lowered and still a true lower bound for an f32-accurate
 * kernel. (A kernel that rounded its f32 operands to TF32 or 16 bits once could go faster
 * still; at large K the contraction tolerance may accept it, and this floor would call
 * it impossible: docs/design-notes.md.)
 */
#include "kforge/perf.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* Contract: 1 when g has a matmul node whose operands are f16 or bf16, else 0. */
int kf_graph_has_mm16(const kf_graph *g) {
    for (int i = 0; i < g->nnodes; i++) {
        const kf_node *n = &g->nodes[i];
        kf_dtype t = g->values[n->in[0]].dtype;
        if (kf_op_get(n->op)->kind == KF_KIND_MATMUL && (t == KF_F16 || t == KF_BF16)) return 1;
    }
    return 0;
}

/* Contract: 1 when g has a CONTRACT or COMPOSITE node whose first operand is f32, else 0. */
int kf_graph_has_mm32(const kf_graph *g) {
    for (int i = 0; i < g->nnodes; i++) {
        const kf_node *n = &g->nodes[i];
        const kf_op_def *d = kf_op_get(n->op);
        if (n->nin < 1 || (d->cls != KF_CLASS_CONTRACT && d->cls != KF_CLASS_COMPOSITE)) continue;
        if (g->values[n->in[0]].dtype == KF_F32) return 1;
    }
    return 0;
}

/* Contract: fill *out with g's bytes, FLOPs and floors on a device with ceilings c. Never
 * fails; g, c and out must be non-NULL. bound is "memory" unless the compute floor is the
 * strictly larger one. Non-positive or non-finite ceilings count as unknown (floor 0). */
void kf_roofline_of(const kf_graph *g, const kf_ceilings *c, kf_roofline *out) {
    assert(g && c && out);
    memset(out, 0, sizeof *out);
    out->bytes = kf_graph_min_bytes(g);
    out->flops = kf_graph_flops(g);
    out->bw_gbs = isfinite(c->copy_gbs) && c->copy_gbs > 0 ? c->copy_gbs : 0;
    /* an f32 contraction: 3xTF32 on tensor cores where that beats the FMA peak; a 16-bit
     * matmul: the tensor-core rate, the highest a unit offers (none if unknown) */
    double peak = c->peak_gflops_f32;
    double tf32 = isfinite(c->peak_gflops_tf32) && c->peak_gflops_tf32 > 0 ? c->peak_gflops_tf32 / 3 : 0;
    /* (an unknown f32 peak stays unknown: tf32 / 3 bounds f32 work only where it is the higher) */
    if (peak > 0 && tf32 > peak && kf_graph_has_mm32(g)) peak = tf32;
    if (kf_graph_has_mm16(g)) {
        const double mm16 = c->peak_gflops_mm16;
        peak = isfinite(mm16) && mm16 > 0 ? (peak > mm16 ? peak : mm16) : 0;
    }
    out->peak_gflops = isfinite(peak) && peak > 0 ? peak : 0;
    out->measured = c->measured;
    out->mem_floor_s = out->bw_gbs > 0 ? out->bytes / (out->bw_gbs * 1e9) : 0;
    out->compute_floor_s = out->peak_gflops > 0 ? out->flops / (out->peak_gflops * 1e9) : 0;
    if (out->compute_floor_s > out->mem_floor_s) {
        out->floor_s = out->compute_floor_s;
        out->bound = "compute";
    } else {
        out->floor_s = out->mem_floor_s;
        out->bound = "memory";
    }
}

/* Contract: place a measured time against roofline r: achieved GB/s and GFLOP/s (1e9) and
 * the percentage of the floor reached (100 = at the floor; above 100 would be faster than
 * physically possible). A non-positive or non-finite time gives zero rates and pct_floor. */
void kf_perf_place(const kf_roofline *r, double time_s, kf_perf_point *out) {
    assert(r && out);
    memset(out, 0, sizeof *out);
    out->time_s = time_s;
    if (!(time_s > 0) || !isfinite(time_s)) return;
    out->gbs = r->bytes / time_s / 1e9;
    out->gflops = r->flops / time_s / 1e9;
    out->pct_floor = 100.0 * r->floor_s / time_s;
}
