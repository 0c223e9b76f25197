"""A live dropout (training mode, 0 < p, as KernelBench runs level 2's 66 and 83) becomes a
module task: its mask is a draw of forward, recorded at import and given to the kernel as a
param, and the reference computes input * mask / (1 - p) with it (issue 26: every
KernelBench problem imports as a task)."""
import subprocess

import numpy as np
import torch

from conftest import write
from kforge_torch import module_task, reference

# KernelBench level 2's 66 in small: a linear layer, a live dropout, a softmax
DROP = """
import torch
class Model(torch.nn.Module):
    def __init__(self, n_in, n_out, p):
        super().__init__()
        self.fc = torch.nn.Linear(n_in, n_out)
        self.drop = torch.nn.Dropout(p)
    def forward(self, x):
        return torch.softmax(self.drop(self.fc(x)), dim=1)
def get_inputs():
    return [torch.rand(4, 8)]
def get_init_inputs():
    return [8, 6, 0.25]
"""

# its kernel: the mask (args[3], after x, fc.weight, fc.bias) times the linear layer over 1 - p
DROP_KERNEL = r'''
#include <math.h>
int kforge_kernel(void *const *args) {
    const float *x = args[0], *w = args[1], *b = args[2], *m = args[3];
    float *y = args[4];
    for (int r = 0; r < 4; r++) {
        double t[6], mx = -INFINITY, s = 0;
        for (int o = 0; o < 6; o++) {
            double a = b[o];
            for (int i = 0; i < 8; i++) a += (double)w[o * 8 + i] * x[r * 8 + i];
            t[o] = a * m[r * 6 + o] / 0.75;
            if (t[o] > mx) mx = t[o];
        }
        for (int o = 0; o < 6; o++) { t[o] = exp(t[o] - mx); s += t[o]; }
        for (int o = 0; o < 6; o++) y[r * 6 + o] = (float)(t[o] / s);
    }
    return 0;
}
'''


def read(path):
    with open(path) as f:
        return f.read()


def test_a_live_dropout_mask_is_a_recorded_draw(tmp_path):
    model = write(tmp_path / "drop.py", DROP)
    spec = module_task.write_module_task(model, str(tmp_path), name="drop")
    draw = spec["params"][-1]
    assert draw["draw"] and draw["shape"] == [4, 6] and draw["name"] == "p_draw0", spec["params"]
    kf = read(tmp_path / "task.kf")
    assert "param p_draw0: f32[4, 6]   # draw0 (the mask of a live dropout (p=0.25)" in kf, kf
    blob = (tmp_path / "drop.weights").read_bytes()
    mask = reference.draws_of(spec, blob)[0]
    assert set(mask.unique().tolist()) <= {0.0, 1.0} and 0 < mask.sum() < mask.numel(), mask
    # the reference: the module in float64 with that mask, on set 0 (the weights file) and on
    # set 1 (params of its own: the mask's elements shuffled, still 0 and 1)
    x = torch.rand(4, 8)
    for s in (0, 1):
        (tmp_path / f"in.{s}").write_bytes(x.numpy().tobytes())
    assert reference.main([str(tmp_path / "drop.json"), str(tmp_path), "0,1", "7"]) == 0
    for s in (0, 1):
        wblob = blob if s == 0 else (tmp_path / "w.1").read_bytes()
        m = reference.draws_of(spec, wblob)[0].double()
        assert set(m.unique().tolist()) <= {0.0, 1.0} and m.sum() == mask.sum()
        w = torch.from_numpy(np.frombuffer(wblob[:8 * 6 * 4], dtype=np.float32).copy()).double().reshape(6, 8)
        b = torch.from_numpy(np.frombuffer(wblob[8 * 6 * 4:8 * 6 * 4 + 24], dtype=np.float32).copy()).double()
        want = torch.softmax((x.double() @ w.T + b) * m / 0.75, dim=1)
        got = np.fromfile(tmp_path / f"out.{s}", dtype=np.float64)
        assert np.allclose(got, want.numpy().ravel(), rtol=0, atol=1e-14), s


def test_kforge_import_and_verify_of_a_live_dropout(kforge, tmp_path):
    """kforge import makes it a module task (its graph's dropout does not lower); a kernel
    that applies the mask verifies, one that leaves the dropout out (inference mode) does not"""
    model = write(tmp_path / "drop.py", DROP)
    out = tmp_path / "task"
    p = subprocess.run([kforge, "import", model, "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    kf = read(out / "task.kf")
    assert "\nmodule drop\n" in kf and "param p_draw0: f32[4, 6]" in kf, kf
    good = write(tmp_path / "k.c", DROP_KERNEL)
    p = subprocess.run([kforge, "verify", str(out / "task.kf"), good], capture_output=True, text=True)
    assert p.returncode == 0 and "ok (6 input sets)" in p.stdout, p.stdout + p.stderr
    no_mask = write(tmp_path / "n.c", DROP_KERNEL.replace("a * m[r * 6 + o] / 0.75", "a"))
    assert "m[r * 6 + o]" not in read(no_mask)
    p = subprocess.run([kforge, "verify", str(out / "task.kf"), no_mask], capture_output=True, text=True)
    assert p.returncode == 1 and "mismatch" in p.stdout, p.stdout + p.stderr
