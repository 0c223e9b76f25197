"""suites/gpu-l2, the level-2 chains sized for an H200: every problem exports on the meta device
(nothing allocated), keeps to the suite's size rule (float32, inputs plus outputs at most 2 GiB,
an estimated eager time between 0.5 and 50 ms on the H200), lowers to a kforge task with
`kforge import --lower` at its full shape, and imports for real (`kforge import`) at the shrunk
shapes a CPU run uses. The checks are suites/gpu-l2/check.py's (gpu-l1's with a 2 GiB rule)."""
import functools
import glob
import importlib.util
import os
import subprocess

import pytest
import torch

from conftest import REPO

SUITE = os.path.join(REPO, "suites", "gpu-l2")
FILES = sorted(glob.glob(os.path.join(SUITE, "[0-9][0-9]_*.py")))


def _load_check():
    spec = importlib.util.spec_from_file_location("gpu_l2_check", os.path.join(SUITE, "check.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.load_l1_check()


CHECK = _load_check()


@functools.lru_cache(maxsize=None)
def on_meta(path):
    return CHECK.on_meta(path)


def test_the_suite_has_its_problems():
    assert 14 <= len(FILES) <= 16
    names = [CHECK.importer.task_name(f) for f in FILES]
    assert len(set(names)) == len(names)
    assert CHECK.MAX_BYTES == 2 * 2 ** 30


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_problem_exports_on_meta_within_the_size_rule(path):
    _, model, inputs, outs, flops, ep = on_meta(path)
    for t in list(inputs) + list(model.parameters()) + list(model.buffers()):
        if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
            assert t.dtype == torch.float32
    assert all(o.dtype == torch.float32 for o in outs)
    params = list(model.parameters()) + list(model.buffers())
    moved = CHECK.nbytes(inputs) + CHECK.nbytes(outs) + CHECK.nbytes(params)
    assert CHECK.nbytes(inputs) + CHECK.nbytes(outs) <= CHECK.MAX_BYTES
    assert flops <= 1e11  # the float64 reference stays a few seconds on a 16-core host
    est_ms = 1e3 * max(moved / CHECK.BYTES_PER_S, flops / CHECK.FLOPS_PER_S)
    assert CHECK.LO_MS <= est_ms <= CHECK.HI_MS, f"estimated {est_ms:.2f} ms on the H200"


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_problem_lowers_at_full_shape(path, kforge, tmp_path):
    _, model, inputs, _, _, ep = on_meta(path)
    ok, text = CHECK.lower(path, model, inputs, ep, CHECK.kernelbench_module(), kforge, str(tmp_path))
    assert ok, text
    assert "wrote" in text


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_problem_imports_shrunk(path, kforge, tmp_path):
    small = tmp_path / os.path.basename(path)
    note = CHECK.kernelbench_module().shrink(path, str(small), CHECK.RANGE_CAP)
    assert "not shrunk" not in note, note
    out = tmp_path / "bundle"
    p = subprocess.run([kforge, "import", str(small), "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "output " in open(out / "task.kf").read()
