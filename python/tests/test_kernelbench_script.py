"""bench/kernelbench.py's shape cap: the constants it halves keep the problem running."""
import ast
import importlib.util
import os

import torch

from conftest import REPO, write

spec = importlib.util.spec_from_file_location("kernelbench_script", os.path.join(REPO, "bench", "kernelbench.py"))
KB = importlib.util.module_from_spec(spec)
spec.loader.exec_module(KB)

# the shape of KernelBench level 2's 34: LayerNorm(out_channels) normalizes the last dim of a
# strided transposed convolution's output (2 * W), which is out_channels only because the
# official sizes make it so; the spatial sizes come from an unpacking, height and width from a
# chain
LAYERNORM_OVER_WIDTH = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, 4, stride=2, padding=1)
        self.layer_norm = nn.LayerNorm(out_channels)

    def forward(self, x, y):
        return self.layer_norm(self.conv_transpose(x)), y * 2


batch_size = 32
in_channels = 32
out_channels = 64
D, H, W = 16, 32, 32
side = other = 48


def get_inputs():
    return [torch.rand(batch_size, in_channels, D, H, W), torch.rand(side, other)]


def get_init_inputs():
    return [in_channels, out_channels]
'''


def test_unpackings_and_chains_are_constants():
    consts = KB.module_ints(ast.parse(LAYERNORM_OVER_WIDTH))
    assert {k: consts[k] for k in ("D", "H", "W", "side", "other")} == \
        {"D": 16, "H": 32, "W": 32, "side": 48, "other": 48}, consts


def test_the_cap_keeps_a_layernorm_over_a_width_consistent(tmp_path):
    """Halving out_channels alone breaks the forward (normalized_shape != 2 * W): the cap
    halves it with W, and the copy runs at shapes within the cap."""
    src = write(tmp_path / "34_like.py", LAYERNORM_OVER_WIDTH)
    dst = str(tmp_path / "out.py")
    cap = 1_100_000
    note = KB.shrink(src, dst, cap)
    assert "not shrunk" not in note, note
    ns = {}
    exec(compile(open(dst).read(), dst, "exec"), ns)
    assert ns["out_channels"] == 2 * ns["W"], note
    assert ns["W"] < 32 and ns["out_channels"] < 64, note
    with torch.device("meta"):
        model = ns["Model"](*ns["get_init_inputs"]())
        ins = ns["get_inputs"]()
        model(*ins)  # raises if the shapes no longer fit
    n = sum(x.numel() for x in ins) + sum(p.numel() for p in model.parameters())
    assert n <= cap, (n, note)
