// swish for python/tests/data/cuda_swish/swish.kf: y = x * sigmoid(x), x and y f32[256, 512]
// (131072 elements). Hand-written in the NVRTC form of docs/kernel-contract.md, with the
// manifest.json that `kforge synth --target cuda` writes for it.
// kforge:tunable WG 256 128 512
// kforge:launch swish global=cdiv(131072, WG)*WG local=WG args=0,1
#ifndef WG
#define WG 256
#endif

extern "C" __global__ void __launch_bounds__(WG)
swish(const float *__restrict__ x, float *__restrict__ y) {
    int i = blockIdx.x * WG + threadIdx.x;
    if (i < 131072) y[i] = x[i] / (1.0f + expf(-x[i]));
}
