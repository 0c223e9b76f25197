"""PyTorch pooling through `kforge import`: max_pool/avg_pool 1d/2d/3d and adaptive_avg_pool,
as torch.export writes them, lowered to pad + unfold + a reduction over the windows
(src/ir/import.c, lower_pool); the synthesized CPU kernel is run on the module's inputs
(infinities included) and compared with the module, and the task's PyTorch peer
(kf_task.torch_fn: full_like, pad's value=-inf) computes the same."""
import importlib.util
import subprocess

import pytest
import torch

from conftest import write
from kforge_torch.cpu_kernel import load_cpu_kernel

# The module's outputs, in groups: a task of every one of them has more stages than the
# builtin generator's parameter space holds (a pool is a window copy and a reduction).
GROUPS = {
    "max": [
        "F.max_pool1d(x1, 3, 2, 1, 2, ceil_mode=True)",
        "F.max_pool1d(x1, 4, 3, 2)",
        "F.max_pool2d(x2, (3, 2), (2, 1), (1, 0), (1, 2), ceil_mode=True)",
        "F.max_pool2d(x2, 3)",
        "F.max_pool3d(x3, 2, 2, 1, ceil_mode=True)",
        "F.max_pool3d(x3, (3, 2, 2), (2, 1, 2), (1, 0, 1), (1, 2, 1))",
        "F.max_pool2d(x2, 2, return_indices=True)[0]",
    ],
    "avg": [
        "F.avg_pool1d(x1, 3, 2, 1, ceil_mode=True, count_include_pad=False)",
        "F.avg_pool1d(x1, 4, 3, 2, ceil_mode=True)",
        "F.avg_pool2d(x2, 3, 2, 1, count_include_pad=False)",
        "F.avg_pool2d(x2, (2, 3), 2, (0, 1), ceil_mode=True)",
        "F.avg_pool2d(x2, 3, 2, 1, divisor_override=5)",
    ],
    "avg_3d": [
        "F.avg_pool3d(x3, 2)",
        "F.avg_pool3d(x3, 3, 2, 1, ceil_mode=True, count_include_pad=False)",
    ],
    "adaptive": [
        "F.adaptive_avg_pool1d(x1[..., :15], 5)",
        "F.adaptive_avg_pool2d(x2, 1)",
        "F.adaptive_avg_pool3d(x3, (7, 3, 1))",
    ],
}

POOLS = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """pooling attributes at odd shapes: stride != kernel, padding, dilation, ceil_mode both
    ways, count_include_pad both ways, divisor_override, return_indices' values"""
    def __init__(self):
        super().__init__()
    def forward(self, x1, x2, x3):
        return (EXPRS,)

def get_inputs():
    x1, x2, x3 = torch.randn(2, 3, 17), torch.randn(2, 3, 13, 11), torch.randn(2, 3, 7, 6, 5)
    x1[1, 2, 5] = -float("inf")
    x2[0, 1, 0, 0] = float("inf")
    x3[1, 0, 6, 5, 4] = -float("inf")
    return [x1, x2, x3]

def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_pooling_imports_and_matches_pytorch(kforge, tmp_path, group):
    model = write(tmp_path / "pools.py", POOLS.replace("EXPRS", ", ".join(GROUPS[group])))
    bundle = tmp_path / "b"
    p = subprocess.run([kforge, "import", model, "--out", str(bundle)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    text = open(bundle / "task.kf").read()
    marks = {"max": ("value=-inf", "dilation=2"), "avg": ("full_like(", ") / 5"), "avg_3d": ("full_like(", "mean("),
             "adaptive": ("keepdim=true",)}
    for kf_op in marks[group]:
        assert kf_op in text, (kf_op, text)
    run_dir = tmp_path / "run"
    p = subprocess.run([kforge, "synth", str(bundle / "task.kf"), "--iters", "1", "--memcheck", "off", "-q",
                        "--out", str(run_dir)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    spec = importlib.util.spec_from_file_location("pools", model)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    inputs = mod.get_inputs()
    k = load_cpu_kernel(str(run_dir))
    with torch.no_grad():
        want = mod.Model()(*inputs)
        got = k(*inputs)
    assert len(got) == len(want) == len(GROUPS[group])
    for i, (gt, wt) in enumerate(zip(got, want)):
        assert gt.shape == wt.shape, (GROUPS[group][i], gt.shape, wt.shape)
        torch.testing.assert_close(gt, wt, atol=1e-5, rtol=1e-5, equal_nan=True, msg=GROUPS[group][i])
    from kforge_torch import kf_task
    fn = kf_task.torch_fn(kf_task.parse_task(text), kforge)
    with torch.no_grad():
        peer = fn(*inputs)
    for i, (pt, wt) in enumerate(zip(peer, want)):
        torch.testing.assert_close(pt, wt, atol=1e-5, rtol=1e-5, equal_nan=True, msg="peer: " + GROUPS[group][i])


UNSUPPORTED_POOLS = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        v, i = F.max_pool1d(x, 2, return_indices=True)
        return F.adaptive_avg_pool1d(x, 3), i

def get_inputs():
    return [torch.randn(2, 3, 17)]

def get_init_inputs():
    return []
'''


def test_pool_indices_and_uneven_adaptive_windows_are_named(kforge, tmp_path):
    model = write(tmp_path / "bad_pools.py", UNSUPPORTED_POOLS)
    p = subprocess.run([kforge, "import", model, "--out", str(tmp_path / "b"), "--graph-only"], capture_output=True,
                       text=True)
    assert p.returncode == 2
    assert "adaptive pooling of 17 to 3 elements" in p.stderr, p.stderr
    assert "the indices of a max pool" in p.stderr, p.stderr
