/*
 * Theoretical occupancy of a CUDA-style kernel: how many of its thread groups one unit
 * (SM) holds at once, and which resource stops it holding more.
 *
 * Design note. The rules are those of NVIDIA's occupancy calculator (CUDA C Programming
 * Guide, "Occupancy Calculator" and "Features and Technical Specifications"), with every
 * number taken from the architecture database entry, never from code:
 *   - warps per group = ceil(threads / warp size);
 *   - registers are allocated per warp in units of reg_alloc_unit: a warp takes
 *     roundup(regs x warp size, reg_alloc_unit); groups by registers =
 *     floor(floor(regs_per_unit / per-warp registers) / warps per group);
 *   - shared memory is allocated per group in units of smem_alloc_unit, plus the
 *     entry's per-group reservation (1 KiB for the driver from compute capability 8.0 on;
 *     smem_reserved_per_group); groups by shared memory = floor(smem_per_unit / that);
 *   - groups by threads = floor(max_threads_per_unit / (warps per group x warp size));
 *   - groups by the group limit = max_groups_per_unit.
 * Occupancy = groups x warps per group / (max_threads_per_unit / warp size). It is an upper
 * bound of what runs (achieved occupancy comes from the profiler).
 */
#include "kforge/perf.h"

#include <string.h>

static long round_up(long v, long unit) { return unit > 1 ? (v + unit - 1) / unit * unit : v; }

/* See perf.h. */
kf_status kf_perf_occupancy(const kf_arch_entry *a, int threads, int regs, long smem,
                            kf_occupancy *out, kf_error *err) {
    memset(out, 0, sizeof *out);
    out->threads = threads;
    out->regs = regs;
    out->smem = smem;
    if (!a || a->simd_width <= 0 || a->regs_per_unit <= 0 || a->max_threads_per_unit <= 0 ||
        a->max_groups_per_unit <= 0 || a->smem_per_unit <= 0)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "occupancy: the architecture entry %s lacks the unit limits",
                            a ? a->id : "(none)");
    if (threads <= 0 || regs < 0 || smem < 0)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "occupancy: bad group (%d threads)", threads);
    if (a->max_threads_per_group > 0 && threads > a->max_threads_per_group)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "occupancy: %d threads per group, the device allows %d", threads,
                            a->max_threads_per_group);
    if (a->max_regs_per_thread > 0 && regs > a->max_regs_per_thread)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "occupancy: %d registers per thread, the device allows %d", regs,
                            a->max_regs_per_thread);
    int warp = a->simd_width;
    int warps = (threads + warp - 1) / warp;
    int max_warps = a->max_threads_per_unit / warp;

    long per_warp = round_up((long)(regs > 0 ? regs : 1) * warp, a->reg_alloc_unit);
    out->by_regs = (int)(a->regs_per_unit / per_warp / warps);
    long per_group = round_up(smem + a->smem_reserved_per_group, a->smem_alloc_unit);
    if (smem > 0 && a->smem_per_group > 0 && smem > a->smem_per_group)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "occupancy: %ld bytes of shared memory per group, the device allows %ld",
                            smem, a->smem_per_group);
    out->by_smem = per_group > 0 ? (int)(a->smem_per_unit / per_group) : a->max_groups_per_unit;
    out->by_threads = a->max_threads_per_unit / (warps * warp);
    out->by_groups = a->max_groups_per_unit;

    int g = out->by_groups;
    out->limiter = "groups";
    if (out->by_threads < g) g = out->by_threads, out->limiter = "threads";
    if (out->by_smem < g) g = out->by_smem, out->limiter = "shared memory";
    if (out->by_regs < g) g = out->by_regs, out->limiter = "registers";
    if (g <= 0)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "occupancy: one group of %d threads x %d registers, %ld B shared does not "
                            "fit on a unit (%s)", threads, regs, smem, out->limiter);
    out->groups_per_unit = g;
    out->theoretical = (double)(g * warps) / max_warps;
    if (out->theoretical > 1) out->theoretical = 1;
    return KF_OK;
}
