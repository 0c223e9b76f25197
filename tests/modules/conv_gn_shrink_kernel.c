/* The correct CPU kernel of tests/modules/conv_gn_shrink.py (its module task: the input,
 * then the params conv.weight, conv.bias, gn.weight, gn.bias, then the output). The test
 * of module tasks (tests/test_module_task.c) plays it as the scripted model's reply and
 * derives its wrong variants from it. */
#include <math.h>
#include <stdint.h>
/* conv2d 3->8, k3, on [2,3,10,10]; group norm 4 groups; softshrink (lambda 0.5) */
int kforge_kernel(void *const *args) {
    const float *x = args[0], *w = args[1], *b = args[2], *gw = args[3], *gb = args[4];
    float *y = args[5];
    enum { N = 2, CI = 3, H = 10, W = 10, CO = 8, K = 3, OH = 8, OW = 8, G = 4 };
    for (int n = 0; n < N; n++)
        for (int co = 0; co < CO; co++)
            for (int i = 0; i < OH; i++)
                for (int j = 0; j < OW; j++) {
                    double s = b[co];
                    for (int ci = 0; ci < CI; ci++)
                        for (int ki = 0; ki < K; ki++)
                            for (int kj = 0; kj < K; kj++)
                                s += (double)x[((n * CI + ci) * H + i + ki) * W + j + kj] * w[((co * CI + ci) * K + ki) * K + kj];
                    y[((n * CO + co) * OH + i) * OW + j] = (float)s;
                }
    int cpg = CO / G, m = cpg * OH * OW;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            float *p = y + (n * CO + g * cpg) * OH * OW;
            double mean = 0, var = 0;
            for (int e = 0; e < m; e++) mean += p[e];
            mean /= m;
            for (int e = 0; e < m; e++) var += (p[e] - mean) * (p[e] - mean);
            var /= m;
            double rs = 1.0 / sqrt(var + 1e-5);
            for (int e = 0; e < m; e++) {
                int c = g * cpg + e / (OH * OW);
                double v = (p[e] - mean) * rs * gw[c] + gb[c];
                p[e] = (float)(v > 0.5 ? v - 0.5 : v < -0.5 ? v + 0.5 : 0.0);
            }
        }
    return 0;
}
