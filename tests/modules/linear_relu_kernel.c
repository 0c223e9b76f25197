/* tests/modules/linear_relu.py's forward in the CPU contract: the graph task's inputs in its
 * order (fc.weight [6, 8], fc.bias [6], x [4, 8]), then the output [4, 6]. */
int kforge_kernel(void *const *args) {
    const float *w = args[0], *b = args[1], *x = args[2];
    float *y = args[3];
    for (int r = 0; r < 4; r++)
        for (int o = 0; o < 6; o++) {
            float s = b[o];
            for (int i = 0; i < 8; i++) s += w[o * 8 + i] * x[r * 8 + i];
            y[r * 6 + o] = s > 0.0f ? s : 0.0f;
        }
    return 0;
}
