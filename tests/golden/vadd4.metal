[[max_total_threads_per_threadgroup(64)]] kernel void vadd4(
    device const float *a [[buffer(0)]],
    device const float *b [[buffer(1)]],
    device float *c [[buffer(2)]],
    uint3 kf_gid [[thread_position_in_grid]]) {
    int i = (int)kf_gid.x * 4;
    float4 va = kf_vload4(a + i);
    float4 vb = kf_vload4(b + i);
    float4 s = va + vb * 2.0f - float4(0.0f, 1.0f, 2.0f, 3.0f);
    kf_vstore4(c + i, s);
}
