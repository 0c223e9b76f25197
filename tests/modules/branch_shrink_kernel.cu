/* tests/modules/branch_shrink.py's forward in the cuda contract (NVRTC form), as a model
 * would write it (python/tests/test_module_gpu.py plays it as the scripted model's reply on
 * a GPU machine): one block of 64 threads, a shared-memory tree sum of x for the sign of its
 * mean, then softshrink(0.25) of sign * x * scale. Args: x [6, 16], p_scale [16], out [6, 16]. */
// kforge:launch bshrink global=64 local=64 args=0,1,2
extern "C" __global__ void bshrink(const float *__restrict__ x, const float *__restrict__ scale,
                                   float *__restrict__ y) {
    __shared__ float part[64];
    const int t = threadIdx.x;
    float s = 0.0f;
    for (int i = t; i < 96; i += 64) s += x[i];
    part[t] = s;
    __syncthreads();
    for (int h = 32; h > 0; h /= 2) {
        if (t < h) part[t] += part[t + h];
        __syncthreads();
    }
    const float sign = part[0] / 96 > 0 ? 1.0f : -1.0f;
    for (int i = t; i < 96; i += 64) {
        const float v = sign * x[i] * scale[i % 16];
        y[i] = v > 0.25f ? v - 0.25f : v < -0.25f ? v + 0.25f : 0.0f;
    }
}
