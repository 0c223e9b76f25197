/* tests/modules/conv_gn_shrink.py's forward in the cuda contract (NVRTC form;
 * python/tests/test_module_gpu.py plays it as the scripted model's reply on a GPU machine):
 * conv2d 3->8 k3 on [2,3,10,10], group norm (4 groups of 2 channels), softshrink(0.5). One
 * thread per (image, group): its 2 channels' 8x8 outputs, then their mean and variance (two
 * passes over what it wrote), then the normalised values.
 * Args: x, conv.weight, conv.bias, gn.weight, gn.bias, y. */
// kforge:launch conv_gn_shrink global=8 local=8 args=0,1,2,3,4,5
#define CI 3
#define H 10
#define W 10
#define CO 8
#define K 3
#define OH 8
#define OW 8
#define G 4
#define CPG 2
extern "C" __global__ void conv_gn_shrink(const float *x, const float *w, const float *b, const float *gw,
                                          const float *gb, float *y) {
    const int n = threadIdx.x / G, g = threadIdx.x % G;
    float *p = y + (n * CO + g * CPG) * OH * OW;
    float mean = 0.0f;
    for (int c = 0; c < CPG; c++) {
        const int co = g * CPG + c;
        for (int i = 0; i < OH; i++)
            for (int j = 0; j < OW; j++) {
                float s = b[co];
                for (int ci = 0; ci < CI; ci++)
                    for (int ki = 0; ki < K; ki++)
                        for (int kj = 0; kj < K; kj++)
                            s += x[((n * CI + ci) * H + i + ki) * W + j + kj] * w[((co * CI + ci) * K + ki) * K + kj];
                p[(c * OH + i) * OW + j] = s;
                mean += s;
            }
    }
    const int m = CPG * OH * OW;
    mean /= m;
    float var = 0.0f;
    for (int e = 0; e < m; e++) var += (p[e] - mean) * (p[e] - mean);
    var /= m;
    const float rs = rsqrtf(var + 1e-5f);
    for (int e = 0; e < m; e++) {
        const int c = g * CPG + e / (OH * OW);
        const float v = (p[e] - mean) * rs * gw[c] + gb[c];
        p[e] = v > 0.5f ? v - 0.5f : v < -0.5f ? v + 0.5f : 0.0f;
    }
}
