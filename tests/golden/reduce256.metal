static inline float add2(float a, float b) { return a + b; }
/* the sum of buf[0..256) into buf[0]; every thread of the group calls it */
static inline void tree_sum(threadgroup float *buf, int lid) {
    for (int s = 128; s > 0; s >>= 1) {
        if (lid < s) buf[lid] = add2(buf[lid], buf[lid + s]);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
}
[[max_total_threads_per_threadgroup(256)]] kernel void reduce256(
    device const float *x [[buffer(0)]],
    device float *y [[buffer(1)]],
    device long *cnt [[buffer(2)]],
    uint3 kf_lid [[thread_position_in_threadgroup]],
    uint3 kf_grp [[threadgroup_position_in_grid]],
    uint3 kf_lsz [[threads_per_threadgroup]],
    uint3 kf_ngrp [[threadgroups_per_grid]]) {
    threadgroup float buf[256];
    int lid = (int)kf_lid.x;
    device const float *row = x + (int)kf_grp.x * 1024;
    float acc = 0.0f;
    for (int k = lid; k < 1024; k += (int)kf_lsz.x) acc += row[k];
    buf[lid] = acc;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    tree_sum(buf, lid);
    if (lid == 0) {
        y[(int)kf_grp.x] = buf[0];
        cnt[(int)kf_grp.x] = (long)(int)kf_ngrp.x * 4294967296L + (int)kf_grp.x;
    }
}
