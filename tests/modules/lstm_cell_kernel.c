/* The correct CPU kernel of tests/modules/lstm_cell.py (its module task: x [4, 5, 8], then
 * the params cell.weight_ih [64, 8], cell.weight_hh [64, 16], cell.bias_ih, cell.bias_hh
 * [64], head.weight [4, 16], head.bias [4], then the output [4, 4]): an LSTM cell stepped
 * over 5 steps (gates i, f, g, o in PyTorch's order), the last hidden state through the head. */
#include <math.h>
#include <stdint.h>

int kforge_kernel(void *const *args) {
    enum { B = 4, T = 5, I = 8, H = 16, O = 4 };
    const float *x = args[0], *wih = args[1], *whh = args[2], *bih = args[3], *bhh = args[4];
    const float *hw = args[5], *hb = args[6];
    float *y = args[7];
    for (int b = 0; b < B; b++) {
        double h[H] = {0}, c[H] = {0};
        for (int t = 0; t < T; t++) {
            double gate[4 * H];
            for (int r = 0; r < 4 * H; r++) {
                double s = (double)bih[r] + bhh[r];
                for (int k = 0; k < I; k++) s += (double)wih[r * I + k] * x[(b * T + t) * I + k];
                for (int k = 0; k < H; k++) s += (double)whh[r * H + k] * h[k];
                gate[r] = s;
            }
            for (int j = 0; j < H; j++) {
                double ig = 1 / (1 + exp(-gate[j])), fg = 1 / (1 + exp(-gate[H + j]));
                double gg = tanh(gate[2 * H + j]), og = 1 / (1 + exp(-gate[3 * H + j]));
                c[j] = fg * c[j] + ig * gg;
                h[j] = og * tanh(c[j]);
            }
        }
        for (int o = 0; o < O; o++) {
            double s = hb[o];
            for (int k = 0; k < H; k++) s += (double)hw[o * H + k] * h[k];
            y[b * O + o] = (float)s;
        }
    }
    return 0;
}
