/* tests/modules/branch_shrink.py's forward, written as a model would: the input's mean (in
 * double, as a sum of 96 float32 values), its sign choosing x or -x, times the per-column
 * scale, through softshrink(0.25). Args: x [6, 16], p_scale [16], out [6, 16]. */
int kforge_kernel(void *const *args) {
    const float *x = args[0], *scale = args[1];
    float *y = args[2];
    double s = 0;
    for (int i = 0; i < 96; i++) s += x[i];
    float sign = s / 96 > 0 ? 1.0f : -1.0f;
    for (int i = 0; i < 96; i++) {
        float v = sign * x[i] * scale[i % 16];
        y[i] = v > 0.25f ? v - 0.25f : v < -0.25f ? v + 0.25f : 0.0f;
    }
    return 0;
}
