[[max_total_threads_per_threadgroup(128)]] kernel void warp2d(
    device const float *x [[buffer(0)]],
    device float *y [[buffer(1)]],
    device int *lane [[buffer(2)]],
    uint3 kf_lid [[thread_position_in_threadgroup]],
    uint3 kf_grp [[threadgroup_position_in_grid]],
    uint3 kf_lsz [[threads_per_threadgroup]],
    uint kf_sg_lid [[thread_index_in_simdgroup]],
    uint kf_sg_id [[simdgroup_index_in_threadgroup]]) {
    int t = (int)kf_lid.y * (int)kf_lsz.x + (int)kf_lid.x;
    int g = (int)kf_grp.x * 128 + t;
    float s = simd_sum(x[g]);
    if ((int)kf_sg_lid == 0) y[(int)kf_grp.x * 4 + (int)kf_sg_id] = s;
    lane[g] = (int)kf_sg_lid;
}
