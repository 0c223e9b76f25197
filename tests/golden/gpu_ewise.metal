// kforge:launch kf_s0 global=16 local=16 args=0,1,2
kernel void kf_s0(
    device const float *b0 [[buffer(0)]],
    device const float *b1 [[buffer(1)]],
    device float *b5 [[buffer(2)]],
    uint3 kf_gid [[thread_position_in_grid]]) {
    /* 16 units of 4 (domain coalesced to 2 dims, inner 16); 16 items, 1 unit(s) each */
    {
        const int t0 = (int)kf_gid.x;
        for (int k = 0; k < 1; k++) {
            const int t = t0 + k * 16;
            const int e = t * 4;
            const int j = e % 16;
            int rem = e / 16;
            const int i0 = rem;
            const int f0 = i0 * 16 + j;
            const int f1 = j;
            const int f5 = i0 * 16 + j;
            const float4 v0 = kf_vload4(b0 + f0);
            const float4 v1 = kf_vload4(b1 + f1);
            float4 w5;
            {
                const float r0 = v0.x;
                const float r1 = v1.x;
                const float r2 = r0 + r1;
                const float r3 = 0.5f * r2 * (1.0f + kf_erff(r2 * 0.70710678118654752f));
                const float r5 = r3 * (5.000000000e-01f);
                w5.x = r5;
            }
            {
                const float r0 = v0.y;
                const float r1 = v1.y;
                const float r2 = r0 + r1;
                const float r3 = 0.5f * r2 * (1.0f + kf_erff(r2 * 0.70710678118654752f));
                const float r5 = r3 * (5.000000000e-01f);
                w5.y = r5;
            }
            {
                const float r0 = v0.z;
                const float r1 = v1.z;
                const float r2 = r0 + r1;
                const float r3 = 0.5f * r2 * (1.0f + kf_erff(r2 * 0.70710678118654752f));
                const float r5 = r3 * (5.000000000e-01f);
                w5.z = r5;
            }
            {
                const float r0 = v0.w;
                const float r1 = v1.w;
                const float r2 = r0 + r1;
                const float r3 = 0.5f * r2 * (1.0f + kf_erff(r2 * 0.70710678118654752f));
                const float r5 = r3 * (5.000000000e-01f);
                w5.w = r5;
            }
            kf_vstore4(b5 + f5, w5);
        }
    }
}

