/* row_scale: y[i, j] = x[i, j] * w[j] / (sum_j |x[i, j]| + 1000), x f32[300, 257].
 * One work-group of WG items per row: a local-memory tree sum, then the scaled row. */
// kforge:tunable WG 64 128 256
// kforge:launch row_scale global=300*WG local=WG args=0,1,2
#ifndef WG
#define WG 64
#endif
#define C 257

__kernel void row_scale(__global const float *restrict x, __global const float *restrict w,
                        __global float *restrict y) {
    __local float part[WG];
    const int row = get_group_id(0), t = get_local_id(0);
    __global const float *xr = x + (long)row * C;
    float s = 0.0f;
    for (int j = t; j < C; j += WG) s += fabs(xr[j]);
    part[t] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = WG / 2; h > 0; h /= 2) {
        if (t < h) part[t] += part[t + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float inv = 1.0f / (part[0] + 1000.0f);
    for (int j = t; j < C; j += WG) y[(long)row * C + j] = xr[j] * w[j] * inv;
}
