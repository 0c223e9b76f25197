"""suites/gpu-l1, the level-1 problems sized for an H200: every problem exports on the meta
device (nothing is allocated: inputs of 1-3 GiB stay shapes), keeps to the suite's size rule
(float32, inputs plus outputs at most 4 GiB, an estimated eager time between 0.5 and 50 ms on
the H200) and lowers to a kforge task with `kforge import --lower` at its full shape. The
checks are suites/gpu-l1/check.py's."""
import functools
import glob
import importlib.util
import os

import pytest
import torch

from conftest import REPO

SUITE = os.path.join(REPO, "suites", "gpu-l1")
FILES = sorted(glob.glob(os.path.join(SUITE, "[0-9][0-9]_*.py")))


def _load_check():
    spec = importlib.util.spec_from_file_location("gpu_l1_check", os.path.join(SUITE, "check.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CHECK = _load_check()


@functools.lru_cache(maxsize=None)
def on_meta(path):
    return CHECK.on_meta(path)


def test_the_suite_has_its_problems():
    assert len(FILES) >= 40
    names = [CHECK.importer.task_name(f) for f in FILES]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_problem_exports_on_meta_within_the_size_rule(path):
    _, model, inputs, outs, flops, ep = on_meta(path)
    assert all(isinstance(x, torch.Tensor) and x.device.type == "meta" for x in inputs if not isinstance(x, float))
    for t in list(inputs) + list(model.parameters()) + list(model.buffers()):
        if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
            assert t.dtype == torch.float32
    for o in outs:
        assert o.dtype in (torch.float32, torch.int64)
    params = list(model.parameters()) + list(model.buffers())
    moved = CHECK.nbytes(inputs) + CHECK.nbytes(outs) + CHECK.nbytes(params)
    assert CHECK.nbytes(inputs) + CHECK.nbytes(outs) <= CHECK.MAX_BYTES
    est_ms = 1e3 * max(moved / CHECK.BYTES_PER_S, flops / CHECK.FLOPS_PER_S)
    assert CHECK.LO_MS <= est_ms <= CHECK.HI_MS, f"estimated {est_ms:.2f} ms on the H200"
    assert any(n.op == "call_function" for n in ep.graph.nodes)


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_problem_lowers_at_full_shape(path, kforge, tmp_path):
    _, model, inputs, _, _, ep = on_meta(path)
    ok, text = CHECK.lower(path, model, inputs, ep, CHECK.kernelbench_module(), kforge, str(tmp_path))
    assert ok, text
    assert "wrote" in text
