"""The PyTorch peers that the op registry names (kforge ops --json, read by
kforge_torch.kf_task.ops) against plain loops, for the scans' reverse and exclusive forms,
and a task using them run through torch_fn."""
import torch

from kforge_torch import kf_task


def naive_scan(x, axis, prod, reverse, exclusive):
    x = x.movedim(axis, -1)
    y = torch.empty_like(x)
    n = x.shape[-1]
    for idx in torch.cartesian_prod(*[torch.arange(s) for s in x.shape[:-1]]).reshape(-1, x.dim() - 1).tolist() \
            if x.dim() > 1 else [[]]:
        acc = 1.0 if prod else 0.0
        order = range(n - 1, -1, -1) if reverse else range(n)
        for k in order:
            v = float(x[tuple(idx) + (k,)])
            if exclusive:
                y[tuple(idx) + (k,)] = acc
            acc = acc * v if prod else acc + v
            if not exclusive:
                y[tuple(idx) + (k,)] = acc
    return y.movedim(-1, axis)


def test_scan_peers_follow_the_records_definition(kforge):
    ops = kf_task.ops(kforge)
    g = torch.Generator().manual_seed(3)
    x = torch.rand(3, 5, 4, generator=g, dtype=torch.float64) + 0.5
    for name, prod in (("cumsum", False), ("cumprod", True)):
        for axis in (0, 1, -1):
            for reverse in (False, True):
                for exclusive in (False, True):
                    got = ops[name](x, axis=axis, reverse=reverse, exclusive=exclusive)
                    want = naive_scan(x, axis, prod, reverse, exclusive)
                    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12,
                                               msg=f"{name} axis={axis} reverse={reverse} exclusive={exclusive}")
    # the defaults: the last axis, forward, inclusive (torch.cumsum's own)
    torch.testing.assert_close(ops["cumsum"](x), torch.cumsum(x, dim=-1))


def test_task_with_scans_runs_through_torch_fn(kforge, tmp_path):
    path = tmp_path / "scan.kf"
    path.write_text("task scan\ninput x: f32[4, 6]\n"
                    "output y = cumsum(x, axis=0, reverse=true, exclusive=true)\n")
    task = kf_task.parse_task(path.read_text(), str(path))
    fn = kf_task.torch_fn(task, kforge)
    x = torch.randn(4, 6)
    (y,) = fn(x)
    torch.testing.assert_close(y, naive_scan(x.double(), 0, False, True, True).float())
