// python/tests/data/cuda_rowsum: s[r] = sum_c x[r, c] + b[r], t = 2 x; x f32[64, 1000].
// Two inputs, two outputs, two launches through a scratch buffer: launch 1 writes 4 partial
// sums per row into `part` (and t), launch 2 adds them and b. Hand-written, NVRTC form.
// kforge:scratch part 64*4*4
// kforge:launch partial global=256,64 local=256,1 args=0,part,3
// kforge:launch finish global=64 local=64 args=part,1,2
extern "C" __global__ void partial(const float *__restrict__ x, float *__restrict__ part,
                                   float *__restrict__ t) {
    __shared__ float acc[256];
    int r = blockIdx.y, tid = threadIdx.x, q = tid / 64, lane = tid % 64;
    float s = 0.0f;
    for (int c = q * 250 + lane; c < (q + 1) * 250; c += 64) {
        s += x[r * 1000 + c];
        t[r * 1000 + c] = 2.0f * x[r * 1000 + c];
    }
    acc[tid] = s;
    __syncthreads();
    for (int w = 32; w > 0; w /= 2) {
        if (lane < w) acc[tid] += acc[tid + w];
        __syncthreads();
    }
    if (lane == 0) part[r * 4 + q] = acc[tid];
}

extern "C" __global__ void finish(const float *__restrict__ part, const float *__restrict__ b,
                                  float *__restrict__ s) {
    int r = threadIdx.x;
    s[r] = part[r * 4] + part[r * 4 + 1] + part[r * 4 + 2] + part[r * 4 + 3] + b[r];
}
