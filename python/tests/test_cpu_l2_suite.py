"""suites/cpu-l2, the level-2 chains sized for 2 cores: every problem imports with `kforge import`
(torch.export, then the C lowering) into a task, and the GEMM chains plan with their pointwise
epilogue in the contraction's store stage (`matmul+ewise[..]`: one stage, issue 29), the row
reductions after a GEMM in its store stage (`matmul+sum(..)`, `s<k>.red`)."""
import glob
import os
import subprocess

import pytest

from conftest import REPO

SUITE = os.path.join(REPO, "suites", "cpu-l2")
FILES = sorted(glob.glob(os.path.join(SUITE, "[0-9][0-9]_*.py")))


def test_the_suite_has_its_problems():
    assert 8 <= len(FILES) <= 16


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(f)[:-3] for f in FILES])
def test_problem_imports(kforge, tmp_path, path):
    out = tmp_path / "bundle"
    p = subprocess.run([kforge, "import", path, "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    text = open(out / "task.kf").read()
    assert "output " in text


def test_gemm_chain_is_one_stage(kforge, tmp_path):
    path = os.path.join(SUITE, "02_gemm_scale_clamp.py")
    out = tmp_path / "bundle"
    p = subprocess.run([kforge, "import", path, "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    calls = {}
    for extra, epi, plan in (([], "epi=1", "matmul+ewise[3 ops]"),
                             (["--no-fuse"], "epi=0", "matmul -> ewise[3 ops]")):
        run = tmp_path / ("run" + epi)
        p = subprocess.run([kforge, "synth", str(out / "task.kf"), "--iters", "1", "--no-store", "--memcheck", "off",
                            "--out", str(run)] + extra, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "plan " + plan in p.stdout + p.stderr, p.stdout + p.stderr
        src = open(run / "kernel.c").read()
        assert epi in src.splitlines()[1], src.splitlines()[1]
        entry = src[src.index("int kforge_kernel("):]
        calls[epi] = entry.count("    kf_stage")
    assert calls == {"epi=1": 1, "epi=0": 2}, calls


@pytest.mark.parametrize("name,op", [("13_gemm_gelu_sum_rows", "sum"), ("15_gemm_logsumexp_rows", "logsumexp")])
def test_gemm_row_reduction_is_one_stage(kforge, tmp_path, name, op):
    out = tmp_path / "bundle"
    p = subprocess.run([kforge, "import", os.path.join(SUITE, name + ".py"), "--out", str(out)], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    for extra, red, plan in (([], "red=1", "matmul+" + op + "(ewise["),
                             (["--no-fuse"], "red=0", "matmul -> " + op + "(ewise[")):
        run = tmp_path / ("run" + red)
        p = subprocess.run([kforge, "synth", str(out / "task.kf"), "--iters", "1", "--no-store", "--memcheck", "off",
                            "--out", str(run)] + extra, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr  # 0: the kernel verified
        assert "plan " + plan in p.stdout + p.stderr, p.stdout + p.stderr
        src = open(run / "kernel.c").read()
        assert red in src.splitlines()[1], src.splitlines()[1]
        assert ("_red(" in src) == (red == "red=1")
