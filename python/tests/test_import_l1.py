"""`kforge import` of the ATen ops that are several of kforge's ops (losses, vector norms,
instance norm, attention, concatenation, triangles and diagonals): each module here is
imported, synthesized on the CPU and its kernel compared with the module in PyTorch."""
import importlib.util
import subprocess

import pytest
import torch

from conftest import write
from kforge_torch.cpu_kernel import load_cpu_kernel

HEAD = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self{init_args}):
        super().__init__()
{init}
    def forward(self, {args}):
        return {body}

def get_inputs():
    return [{inputs}]

def get_init_inputs():
    return [{init_inputs}]
'''


def module(args, body, inputs, init_args="", init="        pass", init_inputs=""):
    return HEAD.format(args=args, body=body, inputs=inputs, init_args=init_args, init=init,
                       init_inputs=init_inputs)


MODULES = {
    "triangles": module(
        "a, b", "torch.triu(a @ b), torch.tril(a @ b, -1), torch.triu(a, 2), torch.tril(b.t(), 1) * 2",
        "torch.randn(7, 9), torch.randn(9, 7)"),
    "diagonals": module(
        "a, b, c", "torch.diag(a) @ b, torch.diag(c), torch.diag(a, -2), torch.diag(c, 1) + 1, "
        "torch.diag_embed(b, 1), torch.diagonal(b.t() @ b)",
        "torch.randn(6), torch.randn(6, 5), torch.randn(5, 7)"),
    "vector_norms": module(
        "x", "x / torch.norm(x, p='fro'), x / torch.norm(x, p=2, dim=1, keepdim=True), "
        "torch.linalg.vector_norm(x, 1, dim=(0, 2)), torch.linalg.vector_norm(x, float('inf'), dim=-1), "
        "torch.linalg.vector_norm(x, 3, dim=-1)",
        "torch.randn(4, 5, 6)"),
    "losses": module(
        "p, t, q", "F.smooth_l1_loss(p, t), F.smooth_l1_loss(p, t, beta=0.5, reduction='sum'), "
        "F.smooth_l1_loss(p, t, beta=0.0), F.huber_loss(p, t, delta=0.7, reduction='none'), F.mse_loss(p, t), "
        "F.l1_loss(p, t, reduction='sum'), F.kl_div(torch.log(q), t.softmax(-1), reduction='batchmean'), "
        "F.kl_div(p, t, reduction='sum', log_target=True), F.kl_div(p, q, reduction='none'), "
        "torch.mean(torch.clamp(1 - p * t, min=0))",
        "torch.randn(8, 16), torch.randn(8, 16), torch.rand(8, 16) + 0.1"),
    "broadcast_loss": module(
        "p, t", "F.smooth_l1_loss(p, t, reduction='none'), F.mse_loss(p, t)",
        "torch.randn(6, 16), torch.randn(16)"),
    "triplet": module(
        "a, p, n", "F.triplet_margin_loss(a, p, n), "
        "F.triplet_margin_loss(a, p, n, margin=0.5, p=1, swap=True, reduction='sum'), "
        "F.triplet_margin_loss(a, p, n, p=3, reduction='none')",
        "torch.randn(8, 16), torch.randn(8, 16), torch.randn(8, 16)"),
    "instance_norm": module(
        "x, y", "self.a(x), self.b(x), self.c(y)", "torch.randn(2, 3, 5, 6), torch.randn(4, 3, 10)",
        init_args=", c", init="        self.a = nn.InstanceNorm2d(c)\n        self.b = nn.InstanceNorm2d(c, affine=True)\n"
        "        nn.init.uniform_(self.b.weight, 0.5, 1.5)\n        nn.init.uniform_(self.b.bias, -1, 1)\n"
        "        self.c = nn.InstanceNorm1d(c, eps=1e-3)", init_inputs="3"),
    "attention": module(
        "q, k, v, m", "F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True), "
        "F.scaled_dot_product_attention(q, k, v, scale=0.3), F.scaled_dot_product_attention(q, k, v, attn_mask=m)",
        "torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4), torch.randn(5, 7)"),
    "cross_entropy": module(
        "x, y, p", "F.cross_entropy(x, y), F.cross_entropy(x, y, reduction='sum'), "
        "F.cross_entropy(x, y, reduction='none'), F.cross_entropy(x, p.softmax(-1))",
        # one target is ignore_index (-100): left out of the mean's count
        "torch.randn(12, 10), torch.randint(0, 10, (12,)).index_fill(0, torch.tensor([3]), -100), torch.randn(12, 10)"),
    # nll_loss with class weights, ignore_index a class (dropped) and outside them, torch.gather
    # along both dims of a matrix with an index smaller than the input elsewhere, and cross
    # entropy with weights and ignore_index (each a gather, no one-hot mask)
    "nll_gather": module(
        "x, y, i, j, w", "F.nll_loss(F.log_softmax(x, 1), y), F.nll_loss(x, y, reduction='sum', ignore_index=2), "
        "F.nll_loss(x, y, weight=w, reduction='none'), F.nll_loss(x, y, weight=w, ignore_index=3), "
        "torch.gather(x, 1, i), torch.gather(x, 0, j) * 2, F.cross_entropy(x, y, weight=w, ignore_index=4), "
        "F.cross_entropy(x, y, ignore_index=1, reduction='none')",
        "torch.randn(12, 10), torch.randint(0, 10, (12,)), torch.randint(0, 10, (11, 3)), "
        "torch.randint(0, 12, (5, 10)), torch.rand(10) + 0.5"),
    "concatenation": module(
        "x, y", "torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)), "
        "torch.cumsum(x.narrow(dim=1, start=0, length=x.size(1) - 1), dim=1)), dim=1), "
        "torch.cat([x, y, x], dim=-1), torch.cat([y, y], 0), x.narrow(0, -2, 2)",
        "torch.randn(4, 7), torch.randn(4, 3)"),
    "einsum": module(
        "a, b, c, d", "torch.einsum('bijl,lk->bijk', a, b), torch.einsum('bij,bjk->bik', c, d), "
        "torch.einsum('ij->ji', b), torch.einsum('ik,jk->ij', b, b), torch.einsum('bij,bij->bi', c, c), "
        "torch.einsum('bij,jk', c, d[0]), torch.einsum('bij->j', c)",
        "torch.randn(2, 3, 4, 5), torch.randn(5, 6), torch.randn(2, 3, 4), torch.randn(2, 4, 5)"),
    "mask": module(
        "x, m", "torch.cumsum(x * m, dim=1), (m * x).sum(0), x + m.t().t()",
        "torch.randn(4, 9), torch.rand(4, 9) < 0.5"),
}

# what the lowered text holds, per module (the rule that made it, not only its result)
LOWERED = {
    "triangles": ["triu(matmul_v)", "tril(matmul_1, diagonal=-1)", "triu(a, diagonal=2)"],
    "diagonals": ["diag_embed(a, offset=0)", "diagonal(c, offset=0)", "diag_embed(a, offset=-2)"],
    "vector_norms": ["sqrt(sum(square(x)))", "sum(abs(x), axes=[0, 2])", "max(abs(x), axes=[-1])", "pow("],
    "losses": ["minimum(", "log(maximum("],
    "broadcast_loss": ["expand(t, shape=[6, 16])"],
    "triplet": ["maximum(1 + "],
    "instance_norm": ["layer_norm(x, axes=[-2, -1], eps=1e-05)", "permute(expand(p_b_weight, shape=[5, 6, -1]), dims=[2, 0, 1])"],
    "attention": ["tril(", "value=-inf", "transpose_b=true"],
    "cross_entropy": ["logsumexp(x, axes=[1], keepdim=true)", "gather(x, ", "eq(", "range(-100, 9)"],
    "nll_gather": ["gather(x, i, axis=1)", "gather(x, j, axis=0)", "gather(reshape(w, shape=[10, 1]), ",
                   "-gather(log_softmax_v, ", "logsumexp(x, axes=[1], keepdim=true)"],
    "concatenation": ["pad(cumsum_v, pads=[1, 0])", "slice(x, dim=1, start=0, end=6)"],
    "einsum": ["matmul(reshape(a, shape=[1, 24, 5]), reshape(b, shape=[1, 5, 6]))", "permute(b, dims=[1, 0])",
               "sum(c, axes=[0, 1])"],
    "mask": ["input m: bool[4, 9]", "x * m", "cumsum("],
}


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def import_and_synth(kforge, tmp_path, name, src):
    model = write(tmp_path / f"{name}.py", src)
    bundle = tmp_path / "b"
    p = run([kforge, "import", model, "--out", str(bundle)])
    assert p.returncode == 0, p.stderr
    text = open(bundle / "task.kf").read()
    run_dir = tmp_path / "run"
    p = run([kforge, "synth", str(bundle / "task.kf"), "--iters", "1", "--memcheck", "off", "-q",
             "--out", str(run_dir)], timeout=600)
    assert p.returncode == 0, p.stderr + text
    return model, bundle, text, run_dir


@pytest.mark.filterwarnings("ignore:Using a target size")  # broadcast_loss's, on purpose
@pytest.mark.parametrize("name", sorted(MODULES))
def test_import_synthesize_and_match_pytorch(kforge, tmp_path, name):
    import json
    model, bundle, text, run_dir = import_and_synth(kforge, tmp_path, name, MODULES[name])
    for part in LOWERED[name]:
        assert part in text, (part, text)
    mod = load(model, name)
    torch.manual_seed(0)
    m = mod.Model(*mod.get_init_inputs()).eval()
    torch.manual_seed(1)
    inputs = mod.get_inputs()
    state = dict(m.named_parameters())
    g = json.load(open(bundle / "graph.json"))
    kin = [inputs[e["index"]] if e["kind"] == "input" else state[e["target"]].detach() for e in g["inputs"]]
    k = load_cpu_kernel(str(run_dir))
    with torch.no_grad():
        want = m(*inputs)
        got = k(*kin)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for i, (gt, wt) in enumerate(zip(got, want)):
        assert gt.shape == wt.shape, (i, gt.shape, wt.shape)
        torch.testing.assert_close(gt, wt, atol=1e-4, rtol=1e-4, msg=lambda s: f"output {i}: {s}")
    # the registry's PyTorch peers compute the same task
    from kforge_torch import kf_task
    fn = kf_task.torch_fn(kf_task.parse_task(text), kforge)
    with torch.no_grad():
        peer = fn(*kin)
    for pt, wt in zip(peer, want):
        torch.testing.assert_close(pt, wt, atol=1e-5, rtol=1e-5)


UNSUPPORTED_ATTRS = module(
    "x, y, q, z", "F.cross_entropy(x, y, label_smoothing=0.1), F.nll_loss(q, z), "
    "F.scaled_dot_product_attention(q, q, q, dropout_p=0.5), torch.linalg.vector_norm(x, 0)",
    "torch.randn(6, 5), torch.randint(0, 5, (6,)), torch.randn(1, 2, 3, 4), torch.randint(0, 2, (1, 3, 4))")


def test_unsupported_argument_values_are_named(kforge, tmp_path):
    """Argument values a rule does not lower are named, each with its node, never ignored."""
    model = write(tmp_path / "unsupported_attrs.py", UNSUPPORTED_ATTRS)
    p = run([kforge, "import", model, "--out", str(tmp_path / "b"), "--graph-only"])
    assert p.returncode == 2
    for part in ("label_smoothing other than 0", "scores that are not [batch, classes]", "dropout_p other than 0",
                 "ord 0", "4 nodes cannot be lowered"):
        assert part in p.stderr, (part, p.stderr)
