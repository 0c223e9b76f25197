[[max_total_threads_per_threadgroup(128)]] kernel void warp(
    device const float *x [[buffer(0)]],
    device float *y [[buffer(1)]],
    device float *z [[buffer(2)]],
    device int *lane [[buffer(3)]],
    uint3 kf_gid [[thread_position_in_grid]],
    uint3 kf_grp [[threadgroup_position_in_grid]],
    uint3 kf_lsz [[threads_per_threadgroup]],
    uint kf_sg_size [[threads_per_simdgroup]],
    uint kf_sg_lid [[thread_index_in_simdgroup]],
    uint kf_sg_id [[simdgroup_index_in_threadgroup]]) {
    int g = (int)kf_gid.x;
    float v = x[g];
    float s = simd_sum(v);
    float mx = simd_max(v);
    float mn = simd_min(v);
    float o = simd_shuffle_xor(v, (ushort)5);
    int w = (int)kf_grp.x * ((int)kf_lsz.x / (int)kf_sg_size) + (int)kf_sg_id;
    if ((int)kf_sg_lid == 0) {
        y[3 * w] = s;
        y[3 * w + 1] = mx;
        y[3 * w + 2] = mn;
    }
    z[g] = o;
    lane[g] = (int)kf_sg_lid;
}
