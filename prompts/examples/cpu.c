/* row_scale: y[i, j] = x[i, j] * w[j] / (sum_j |x[i, j]| + 1000), x f32[300, 257]. */
#include <math.h>
#include <stdint.h>

// kforge:tunable ROWS 4 1 16
#ifndef ROWS
#define ROWS 4
#endif

#define R 300
#define C 257

int kforge_kernel(void *const *args) {
    const float *restrict x = args[0]; /* inputs in the order of the input lines */
    const float *restrict w = args[1];
    float *restrict y = args[2];       /* then the outputs */
    #pragma omp parallel for schedule(static)
    for (int r0 = 0; r0 < R; r0 += ROWS) {
        int r1 = r0 + ROWS < R ? r0 + ROWS : R;
        for (int i = r0; i < r1; i++) {
            const float *xr = x + (long)i * C;
            float s = 0.0f;
            for (int j = 0; j < C; j++) s += fabsf(xr[j]);
            float inv = 1.0f / (s + 1000.0f);
            for (int j = 0; j < C; j++) y[(long)i * C + j] = xr[j] * w[j] * inv;
        }
    }
    return 0;
}
