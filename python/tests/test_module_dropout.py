"""A live dropout (training mode, 0 < p, as KernelBench runs level 2's 66 and 83): its mask
is a draw of forward. In a module task it is recorded at import and given to the kernel as a
param, and the reference computes input * mask / (1 - p) with it (issue 26: every
KernelBench problem imports as a task); `kforge import` lowers it into a graph task whose
input p_draw0 is the mask (issue 29: every level-2 problem verifies with the builtin)."""
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


def test_kforge_verify_of_a_module_task_with_a_dropout(kforge, tmp_path):
    """the module task (as `kforge import` writes one where another op does not lower): a
    kernel that applies the recorded mask verifies, one that leaves the dropout out
    (inference mode) does not"""
    model = write(tmp_path / "drop.py", DROP)
    module_task.write_module_task(model, str(tmp_path), name="drop")
    kf = read(tmp_path / "task.kf")
    assert "\nmodule drop\n" in kf and "param p_draw0: f32[4, 6]" in kf, kf
    good = write(tmp_path / "k.c", DROP_KERNEL)
    p = subprocess.run([kforge, "verify", str(tmp_path / "task.kf"), good], capture_output=True, text=True)
    assert p.returncode == 0 and "ok (6 input sets)" in p.stdout, p.stdout + p.stderr
    no_mask = write(tmp_path / "n.c", DROP_KERNEL.replace("a * m[r * 6 + o] / 0.75", "a"))
    assert "m[r * 6 + o]" not in read(no_mask)
    p = subprocess.run([kforge, "verify", str(tmp_path / "task.kf"), no_mask], capture_output=True, text=True)
    assert p.returncode == 1 and "mismatch" in p.stdout, p.stdout + p.stderr


# the graph task's kernel: its inputs fc.weight, fc.bias, x, then the mask (bool: one byte,
# 1 kept, 0 dropped); the linear layer times the mask over 1 - p, then the softmax
GRAPH_KERNEL = DROP_KERNEL.replace(
    "    const float *x = args[0], *w = args[1], *b = args[2], *m = args[3];\n",
    "    const float *w = args[0], *b = args[1], *x = args[2];\n    const unsigned char *m = args[3];\n")
assert GRAPH_KERNEL != DROP_KERNEL


def test_kforge_import_and_verify_of_a_live_dropout(kforge, tmp_path):
    """kforge import lowers the live dropout: a graph task whose input p_draw0 is the mask
    (bool) and whose dropout is x * mask / (1 - p); a kernel that applies the mask verifies,
    one that leaves the dropout out (inference mode) or forgets the scale does not"""
    model = write(tmp_path / "drop.py", DROP)
    out = tmp_path / "task"
    p = subprocess.run([kforge, "import", model, "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    kf = read(out / "task.kf")
    assert "\nmodule " not in kf and "\ninput p_draw0: bool[4, 6]   # draw of dropout 'dropout', p=0.25" in kf, kf
    assert "= linear * p_draw0 * 1.3333333333333333\n" in kf, kf
    # the bundle keeps the sample forward's mask: its outputs follow from its inputs
    from safetensors.torch import load_file
    ref = load_file(str(out / "ref.safetensors"))
    mask = ref["draw.p_draw0"]
    assert mask.dtype == torch.bool and mask.shape == (4, 6), mask
    params = load_file(str(out / "params.safetensors"))
    want = torch.softmax((ref["in.0"] @ params["fc.weight"].T + params["fc.bias"]) * mask / 0.75, dim=1)
    assert torch.allclose(ref["out.0"], want, rtol=1e-6, atol=1e-7), (ref["out.0"], want)
    good = write(tmp_path / "k.c", GRAPH_KERNEL)
    p = subprocess.run([kforge, "verify", str(out / "task.kf"), good], capture_output=True, text=True)
    assert p.returncode == 0 and "ok (6 input sets)" in p.stdout, p.stdout + p.stderr
    for bad in ("a", "a * m[r * 6 + o]"):
        k = write(tmp_path / "n.c", GRAPH_KERNEL.replace("a * m[r * 6 + o] / 0.75", bad))
        assert "a * m[r * 6 + o] / 0.75" not in read(k)
        p = subprocess.run([kforge, "verify", str(out / "task.kf"), k], capture_output=True, text=True)
        assert p.returncode == 1 and "mismatch" in p.stdout, bad + p.stdout + p.stderr


def test_bench_replays_the_mask_it_gives_the_kernel(tmp_path):
    """kforge bench's peers: the kernel gets a mask drawn from the seed, and eager's dropout
    drops the same elements (its forward replays the mask), so the two outputs agree"""
    from kforge_torch import bench, importer
    model = write(tmp_path / "drop.py", DROP)
    bundle = tmp_path / "b"
    graph = importer.write_bundle(model, str(bundle), 0)
    assert [e["kind"] for e in graph["inputs"]] == ["param", "param", "input", "draw"], graph["inputs"]
    fn, kin, inputs = bench.peers_for_module(model, str(bundle), 0)
    assert getattr(fn, "kforge_replays", False)
    w, b, x, m = kin
    assert m.dtype == torch.bool and 0 < int(m.sum()) < m.numel(), m
    want = torch.softmax((x @ w.T + b) * m.float() / 0.75, dim=1)
    with torch.no_grad():
        got = fn(*inputs)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-7), (got, want)
    # another seed, another mask
    _, kin2, _ = bench.peers_for_module(model, str(bundle), 1)
    assert not torch.equal(kin2[3], m)


def test_export_of_a_dropout_task_draws_a_mask_per_call(kforge, tmp_path):
    """kforge export of the graph task's kernel: ModelNew draws its mask on every call, as
    nn.Dropout does (two calls drop different elements; each row is still a softmax of the
    linear layer with some logits zeroed and the rest scaled by 1 / (1 - p)); in eval mode it
    refuses, the kernel being the training-mode computation"""
    import importlib.util
    import os
    import sys
    model = write(tmp_path / "drop.py", DROP)
    out = tmp_path / "task"
    p = subprocess.run([kforge, "import", model, "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    run = tmp_path / "run"
    p = subprocess.run([kforge, "synth", str(out / "task.kf"), "--iters", "1", "--no-store", "--memcheck", "off",
                        "--out", str(run), "-q"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    exported = tmp_path / "exp.py"
    p = subprocess.run([sys.executable, "-m", "kforge_torch.export", str(run), "--out", str(exported)],
                       capture_output=True, text=True, env=env, cwd=here)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "_dropout_mask(self, [4, 6], 0.25, args)" in read(exported)
    spec = importlib.util.spec_from_file_location("exp_drop", exported)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(3)
    new = mod.ModelNew(*mod.get_init_inputs())
    (x,) = mod.get_inputs()
    lin = (x @ new.fc.weight.T + new.fc.bias).detach()
    outs = [new(x) for _ in range(4)]
    # every row is softmax(lin * m / 0.75) for some mask m in {0, 1}^6: found among all 64
    every = torch.tensor([[(k >> j) & 1 for j in range(6)] for k in range(64)], dtype=torch.float32)
    kept = 0
    for y in outs:
        for r in range(4):
            cand = torch.softmax(lin[r] * every / 0.75, dim=1)
            err = (cand - y[r]).abs().max(dim=1).values
            assert err.min() < 1e-5, (r, y[r], err.min())
            kept += int(every[int(err.argmin())].sum())
    # 96 elements kept with probability 0.75 each: 72 expected, sd 4.2
    assert 48 <= kept <= 91, kept
    assert any(not torch.equal(outs[0], o) for o in outs[1:]), "the same mask on every call"
    new.eval()
    try:
        new(x)
        raise AssertionError("eval mode ran the training-mode kernel")
    except RuntimeError as e:
        assert "training mode" in str(e)


def test_kforge_bench_of_a_dropout_module(kforge, tmp_path):
    """kforge bench on the module: correct against eager (same masks), and torch.compile of
    the module with its own dropout timed as the peer, its output not compared (it draws
    other masks), which the row says"""
    import json
    src = tmp_path / "suite"
    src.mkdir()
    write(src / "drop.py", DROP)
    out = tmp_path / "rows.json"
    p = subprocess.run([kforge, "bench", str(src), "--iters", "1", "--reps", "3", "--json", str(out),
                        "--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    (row,) = json.load(open(out))["rows"]
    assert row["status"] == "ok" and row["correct"], row
    assert row["compile_ms"] > 0 and "not compared" in row["compile_unchecked"], row
    assert row["compile_matches_eager"] is None and "compile_skipped" not in row, row
