/* row_scale: y[i, j] = x[i, j] * w[j] / (sum_j |x[i, j]| + 1000), x f32[300, 257].
 * One block of WG threads per row: warp shuffles, then shared memory across warps. */
// kforge:tunable WG 128 64 256
// kforge:launch row_scale global=300*WG local=WG args=0,1,2
#ifndef WG
#define WG 128
#endif
#define C 257

extern "C" __global__ void __launch_bounds__(WG) row_scale(const float *__restrict__ x,
                                                           const float *__restrict__ w,
                                                           float *__restrict__ y) {
    __shared__ float warp_sum[WG / 32];
    const int row = blockIdx.x, t = threadIdx.x;
    const float *xr = x + (long)row * C;
    float s = 0.0f;
    for (int j = t; j < C; j += WG) s += fabsf(xr[j]);
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (t % 32 == 0) warp_sum[t / 32] = s;
    __syncthreads();
    float tot = 0.0f;
    for (int k = 0; k < WG / 32; k++) tot += warp_sum[k];
    const float inv = 1.0f / (tot + 1000.0f);
    for (int j = t; j < C; j += WG) y[(long)row * C + j] = xr[j] * w[j] * inv;
}
