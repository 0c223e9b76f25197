"""PyTorch convolutions, batch and group norm, reshapes and number arguments through `kforge
import`: conv1d/2d/3d and conv_transpose1d/2d/3d become kforge's conv / conv_transpose records
(their own float64 reference; the kernels their lowering: src/ops/conv.c), BatchNorm in
training mode normalizes by the batch's statistics (as KernelBench runs modules), and the
synthesized CPU kernel is run on the module's inputs and compared with the module."""
import importlib.util
import subprocess

import pytest
import torch

from conftest import write
from kforge_torch.cpu_kernel import load_cpu_kernel

GROUPS = {
    "conv": [
        "F.conv1d(x1, w1, b1, stride=2, padding=1, dilation=2)",
        "F.conv2d(x2, w2, None, stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)",
        "F.conv3d(x3, w3, None, stride=(1, 2, 1), padding=1)",
        "F.conv2d(x2, wd, None, padding=1, groups=4)",  # depthwise: its taps summed
        "F.conv2d(x2, wp)",  # pointwise (1x1)
    ],
    "conv_transpose": [
        "F.conv_transpose1d(x1, t1, None, stride=3, padding=1, output_padding=2, dilation=1)",
        "F.conv_transpose2d(x2, t2, tb, stride=(2, 3), padding=(1, 0), output_padding=(1, 1), groups=2, "
        "dilation=(1, 2))",
        "F.conv_transpose3d(x3, t3, None, stride=2, padding=(0, 1, 1))",
    ],
    # more strided ones (a task of their own: six are more stages than the builtin generator's
    # parameters hold): 3D with groups, a stride sharing a factor with the dilation, stride 5
    "conv_transpose:strided": [
        "F.conv_transpose3d(x3, t4, None, stride=2, padding=1, output_padding=1, groups=2)",
        "F.conv_transpose2d(x2, t2, tb, stride=2, padding=1, dilation=2, groups=2)",
        "F.conv_transpose2d(x2, t5, None, stride=5, padding=1, dilation=2)",
    ],
}

CONVS = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """convolutions at odd shapes: strides, padding, dilation, groups, output padding"""
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        r = lambda *s: nn.Parameter(torch.randn(*s, generator=g) * 0.3)
        self.w1, self.b1, self.w2, self.w3 = r(5, 4, 3), r(5), r(6, 2, 3, 2), r(3, 4, 2, 3, 2)
        self.wd, self.wp = r(4, 1, 3, 3), r(7, 4, 1, 1)
        self.t1, self.t2, self.tb, self.t3 = r(4, 3, 4), r(4, 3, 3, 2), r(6), r(4, 2, 2, 3, 3)
        self.t4, self.t5 = r(4, 2, 3, 3, 3), r(4, 5, 3, 3)
    def forward(self, x1, x2, x3):
        w1, b1, w2, w3, wd, wp = self.w1, self.b1, self.w2, self.w3, self.wd, self.wp
        t1, t2, tb, t3, t4, t5 = self.t1, self.t2, self.tb, self.t3, self.t4, self.t5
        return (EXPRS,)

def get_inputs():
    return [torch.randn(2, 4, 17), torch.randn(2, 4, 11, 9), torch.randn(2, 4, 5, 7, 6)]

def get_init_inputs():
    return []
'''


def synth_and_compare(kforge, tmp_path, model, n_out, names, eval_flag=()):
    bundle = tmp_path / "b"
    p = subprocess.run([kforge, "import", model, "--out", str(bundle), *eval_flag], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    text = open(bundle / "task.kf").read()
    run_dir = tmp_path / "run"
    p = subprocess.run([kforge, "synth", str(bundle / "task.kf"), "--iters", "1", "--memcheck", "off", "-q",
                        "--out", str(run_dir)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    spec = importlib.util.spec_from_file_location("m", model)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    m = mod.Model(*mod.get_init_inputs())
    if eval_flag:
        m.eval()
    torch.manual_seed(0)
    inputs = mod.get_inputs()
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    k = load_cpu_kernel(str(run_dir))
    state = dict(m.named_parameters())
    state.update(dict(m.named_buffers()))
    import json
    graph = json.load(open(bundle / "graph.json"))
    kin = [tensors[e["index"]] if e["kind"] == "input" else state[e["target"]].detach() for e in graph["inputs"]]
    with torch.no_grad():
        want = m(*inputs)
        got = k(*kin)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want) == n_out
    for i, (gt, wt) in enumerate(zip(got, want)):
        assert gt.shape == wt.shape, (names[i], gt.shape, wt.shape)
        torch.testing.assert_close(gt, wt, atol=2e-5, rtol=2e-5, msg=names[i])
    return text


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_convolutions_import_and_match_pytorch(kforge, tmp_path, group):
    model = write(tmp_path / "convs.py", CONVS.replace("EXPRS", ", ".join(GROUPS[group])))
    text = synth_and_compare(kforge, tmp_path, model, len(GROUPS[group]), GROUPS[group])
    assert f"{group.split(':')[0]}(" in text, text


NORMS = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """BatchNorm (training mode unless imported with --eval), GroupNorm, reshapes, a number"""
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(6)
        self.gn = nn.GroupNorm(3, 6)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5); self.bn.bias.uniform_(-1, 1)
            self.bn.running_mean.uniform_(-1, 1); self.bn.running_var.uniform_(0.5, 2)
            self.gn.weight.uniform_(0.5, 1.5); self.gn.bias.uniform_(-1, 1)
    def forward(self, x, s):
        y = self.bn(x) * s
        z = self.gn(x).flatten(1).unsqueeze(0).squeeze(0)
        return y, z.view(2, 6, -1).transpose(1, 2).reshape(2, -1)

def get_inputs():
    return [torch.randn(2, 6, 5, 7) * 3 + 1, 2.5]

def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_norms_reshapes_and_numbers_import_and_match_pytorch(kforge, tmp_path, mode):
    model = write(tmp_path / "norms.py", NORMS)
    flag = ("--eval",) if mode == "eval" else ()
    text = synth_and_compare(kforge, tmp_path, model, 2, ["batch norm", "group norm + reshapes"], flag)
    assert "reshape(" in text and "2.5" in text, text
    # training mode normalizes by the batch (a mean over N, H, W); eval by the running statistics
    assert ("mean(x, axes=[0, 2, 3]" in text) == (mode == "train"), text
