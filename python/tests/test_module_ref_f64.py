"""Module tasks' float64 GPU reference, --module-ref cuda-f64 (issue 26).

cuda-f64 is the float64 reference of cpu-f64 run on torch's CUDA device: the same tolerance
(nothing doubled, unlike cuda-f32), the same overflow marking (of.S where the module in
float32 gives an infinity or NaN that float64 does not), one device path with cuda-f32 (a
dtype apart), chosen by the user only and refused where torch has no CUDA device.

What runs where:
- everywhere: the refusal without a CUDA device (CUDA_VISIBLE_DEVICES="" makes that so on a
  GPU machine too) and on a graph task; the device settings; the tolerance NOT doubled and
  the overflow marking, both checked by running the cuda-f64 path of kforge_torch.reference
  with the CPU as its device (a KFORGE_PYTHON wrapper of this test's own, never a mode of
  kforge: kforge itself has no fallback);
- on a GPU machine only (KFORGE_TEST_GPU=cuda, torch with a CUDA device; skipped elsewhere,
  saying why): a module task on --target cuda against the cuda-f64 reference, and the
  cuda-f64 reference against the cpu-f64 one on the verifier's own input sets.

On the GPU machine: cd python && KFORGE_TEST_GPU=cuda python3 -m pytest tests/test_module_ref_f64.py -q
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import REPO, read, scripted_reply as reply
from test_module_gpu import (verify_keeping_sets, MODULES, first_prompt, import_task, need_cuda, read_bytes,
                             scaled_kernel, synth, zeros_cu)

PYDIR = os.path.join(REPO, "python")

# The GPU kinds of the reference process with the CPU as their device (both, so that the two
# kinds differ here by their dtype and kforge's handling alone). Logs the arguments kforge
# passed (the KIND among them).
FAKE_DEVICE = r'''#!/usr/bin/env python3
import json, os, sys
import torch
from kforge_torch import reference
assert sys.argv[1:3] == ["-m", "kforge_torch.reference"], sys.argv
log = os.environ.get("KF_TEST_ARGV_LOG")
if log:
    with open(log, "a") as f:
        f.write(json.dumps(sys.argv[3:]) + "\n")
reference.cuda_f32_device = lambda: torch.device("cpu")
reference.cuda_f64_device = lambda: torch.device("cpu")
reference.torch.cuda.synchronize = lambda dev=None: None
sys.exit(reference.main(sys.argv[3:]))
'''


def fake_python(tmp_path):
    w = tmp_path / "fake_cuda_python"
    w.write_text(FAKE_DEVICE)
    w.chmod(0o755)
    return str(w)


# ---- everywhere ----

def test_cuda_f64_reference_refused_without_a_cuda_device(kforge, tmp_path):
    """--module-ref cuda-f64 where torch has no CUDA device: exit 2 naming why (the process's
    exit 4), the model never asked; never a float64-on-the-CPU run instead. Refused on a
    graph task too."""
    task, _ = import_task(kforge, tmp_path, "branch_shrink")
    env = {"CUDA_VISIBLE_DEVICES": ""}
    good = read(os.path.join(MODULES, "branch_shrink_kernel.c"))
    p, run, reqs = synth(kforge, tmp_path, task, [reply(good, "c")], "--agent", "llm", "--module-ref", "cuda-f64", env)
    said = p.stdout + p.stderr
    assert p.returncode == 2, said
    assert "the float64 GPU reference (--module-ref cuda-f64) needs a CUDA device in torch" in said, said
    assert "torch.cuda.is_available() is False" in said and "CUDA_VISIBLE_DEVICES=''" in said, said
    assert "float64 reference on the GPU" in p.stdout, p.stdout  # the table said which reference it tried
    assert reqs == [] and (run is None or run.get("best_iter") is None), (reqs, run)
    kpath = tmp_path / "k.c"
    kpath.write_text(good)
    v = subprocess.run([kforge, "verify", str(task), str(kpath), "--module-ref", "cuda-f64"], capture_output=True,
                       text=True, env=dict(os.environ, **env))
    assert v.returncode == 2 and "(--module-ref cuda-f64) needs a CUDA device in torch" in v.stderr, \
        v.stdout + v.stderr
    g = subprocess.run([kforge, "synth", os.path.join(REPO, "tasks", "swish.kf"), "--module-ref", "cuda-f64",
                        "--no-store", "--out", str(tmp_path / "g")], capture_output=True, text=True)
    assert g.returncode == 2 and "--module-ref cuda-f64" in g.stderr and "applies to module tasks only" in g.stderr, \
        g.stdout + g.stderr
    h = subprocess.run([kforge, "synth", "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "cuda-f64" in h.stdout, h.stdout


def test_cuda_f64_device_settings(monkeypatch):
    """cuda-f64 takes the one device setup of cuda-f32 (cuda_device): cuDNN deterministic,
    benchmark off, TF32 off (read by its float32 overflow forward only); without a device,
    NoDevice naming cuda-f64."""
    from kforge_torch import reference
    b = torch.backends
    saved = (b.cudnn.deterministic, b.cudnn.benchmark)
    monkeypatch.setattr(reference, "fp32_full_precision", lambda: calls.append("fp32"))
    calls = []
    try:
        b.cudnn.deterministic, b.cudnn.benchmark = False, True
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        assert reference.cuda_f64_device().type == "cuda"
        assert b.cudnn.deterministic and not b.cudnn.benchmark and calls == ["fp32"]
    finally:
        b.cudnn.deterministic, b.cudnn.benchmark = saved
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(reference.NoDevice, match=r"float64 GPU reference \(--module-ref cuda-f64\)"):
        reference.cuda_f64_device()
    assert reference.DEVICE_DTYPE == {"cuda-f32": torch.float32, "cuda-f64": torch.float64}


@pytest.mark.parametrize("name", ["branch_shrink", "conv_gn_shrink", "lstm_cell"])
def test_cuda_f64_tolerance_not_doubled(kforge, tmp_path, name):
    """The cuda-f64 reference keeps the task's tolerance: a kernel off by 1.5e-4 relative on
    every element (NMSE 2.25e-8: beyond 1e-8, within cuda-f32's 4e-8) is a mismatch under
    cuda-f64 (and cpu-f64) while it passes under cuda-f32; the exact kernel passes under all
    three. The device path runs on the CPU device here (FAKE_DEVICE)."""
    task, spec = import_task(kforge, tmp_path, name)
    argv_log = tmp_path / "argv.jsonl"
    env = dict(os.environ, KFORGE_PYTHON=fake_python(tmp_path), KF_TEST_ARGV_LOG=str(argv_log))
    good = read(os.path.join(MODULES, f"{name}_kernel.c"))
    want = {1.0: {"cpu-f64": "ok", "cuda-f64": "ok", "cuda-f32": "ok"},
            1.00015: {"cpu-f64": "mismatch", "cuda-f64": "mismatch", "cuda-f32": "ok"}}
    for factor, by_kind in want.items():
        kpath = tmp_path / f"k{factor}.c"
        kpath.write_text(good if factor == 1.0 else scaled_kernel(good, spec, factor))
        for kind, status in by_kind.items():
            v = subprocess.run([kforge, "verify", str(task), str(kpath), "--module-ref", kind, "--seed", "3",
                                "--json"], capture_output=True, text=True, env=env)
            assert v.returncode in (0, 1), v.stdout + v.stderr
            r = json.loads(v.stdout)
            assert r["status"] == status, (factor, kind, r["status"], r["detail"])
            assert r["reference"].startswith(kind + ":"), r["reference"]
            if kind == "cuda-f64":
                assert "the task's tolerance" in r["reference"] and "doubled" not in r["reference"], r["reference"]
                assert "x2" not in r["detail"] and "float32 reference" not in r["detail"], r["detail"]
    kinds = [json.loads(line)[-1] for line in read(argv_log).splitlines()]
    assert kinds == ["cpu-f64", "cuda-f64", "cuda-f32"] * 2, kinds


def run_reference(tmp_path, spec_path, kind, xs, tag):
    """The reference process (the GPU kinds on the CPU device) on input sets xs (set number ->
    float32 array): (outputs per set as float64, the sets it marked of.S, its w.S bytes)."""
    d = tmp_path / f"{tag}_{kind}"
    d.mkdir()
    for s, x in xs.items():
        x.astype(np.float32).tofile(d / f"in.{s}")
    sets = ",".join(str(s) for s in xs)
    p = subprocess.run([fake_python(tmp_path), "-m", "kforge_torch.reference", str(spec_path), str(d), sets, "9", kind],
                       capture_output=True, text=True, cwd=PYDIR,
                       env=dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert p.returncode == 0, p.stderr
    outs = {s: np.fromfile(d / f"out.{s}", dtype=np.float64) for s in xs}
    marked = sorted(s for s in xs if (d / f"of.{s}").exists())
    ws = {s: read_bytes(d / f"w.{s}") for s in xs if s != 0}
    return outs, marked, ws


def test_cuda_f64_overflow_marking_and_values(kforge, tmp_path):
    """The cuda-f64 device path (on the CPU device) is the float64 reference of cpu-f64: the
    same outputs bit for bit on the same device (float64 throughout, tensors forward makes
    itself included), the same per-set params, and the same overflow marking: a set whose
    float32 forward overflows where float64 does not (x * scale beyond 3.4e38) is marked under
    both float64 kinds; a set whose infinity is the module's own (an infinite input, infinite
    in float64 too) is marked by neither (cuda-f32, which has no float64 to tell, marks
    both)."""
    _, spec = import_task(kforge, tmp_path, "branch_shrink")
    spec_path = tmp_path / "task_branch_shrink" / "branch_shrink.json"
    assert spec_path.is_file()
    shape = spec["inputs"][0]["shape"]
    rng = np.random.default_rng(4)
    plain = rng.standard_normal(shape).astype(np.float32)
    plain.flat[0] = 2.0  # a positive mean: softshrink(x * scale)
    plain -= min(0.0, float(plain.mean())) * 2
    big = plain.copy()
    big.flat[:8] = 3.3e38  # times scale (0.5 .. 1.5): beyond float32's range, not float64's
    own = plain.copy()
    own.flat[3] = np.inf
    xs = {0: plain, 1: plain, 2: big, 3: own}
    o64, m64, w64 = run_reference(tmp_path, spec_path, "cpu-f64", xs, "r")
    og, mg, wg = run_reference(tmp_path, spec_path, "cuda-f64", xs, "r")
    o32, m32, _ = run_reference(tmp_path, spec_path, "cuda-f32", xs, "r")
    assert m64 == [2] and mg == [2] and m32 == [2, 3], (m64, mg, m32)
    assert w64 == wg and w64[1] != b""
    for s in xs:
        assert np.array_equal(o64[s], og[s], equal_nan=True), f"set {s}: cuda-f64 (on the CPU) is not cpu-f64"
    # the float32 reference differs (it is float32): the check above can see a dtype slip
    assert not np.array_equal(o64[0], o32[0])
    assert np.isinf(og[2][:8]).sum() == 0 and np.isinf(og[3]).any()


# ---- on a GPU machine: KFORGE_TEST_GPU=cuda ----

@need_cuda
def test_cuda_module_task_cuda_f64(kforge, tmp_path):
    """A module task on --target cuda against the float64 GPU reference: the model's wrong
    kernel is a mismatch, its right one verifies; run.json, the result and the prompt say
    cuda-f64."""
    task, spec = import_task(kforge, tmp_path, "branch_shrink")
    good = read(os.path.join(MODULES, "branch_shrink_kernel.cu"))
    p, run, reqs = synth(kforge, tmp_path, task, [reply(zeros_cu(spec), "cuda"), reply(good, "cuda")],
                         "--target", "cuda", "--agent", "llm", "--module-ref", "cuda-f64")
    assert p.returncode == 0, p.stdout + p.stderr
    assert [i["status"] for i in run["iterations"]] == ["mismatch", "ok"], run["iterations"]
    assert run["device"]["platform"] == "cuda"
    assert run["reference"].startswith("cuda-f64:"), run["reference"]
    assert "float64 reference on the GPU" in run["result"]["detail"], run["result"]
    assert "float64 on a GPU" in first_prompt(reqs)


# Two float64 forwards of the same module on two devices differ by their reduction orders
# and library algorithms only: a few units of float64's rounding (2^-53, 1.1e-16) times the
# computation's growth, far below anything float32 can show. The check: every element
# within 1e-12 * max(1, RMS) + 1e-12 * |cpu| (the verifier's form of tolerance at 1e-8 of
# float32's 1e-4) and NMSE within 1e-20; non-finite elements, overflow marks and per-set
# params identical.
F64_TOL = 1e-12


@need_cuda
@pytest.mark.parametrize("name", ["branch_shrink", "conv_gn_shrink", "lstm_cell"])
def test_cuda_f64_reference_equals_cpu_f64(kforge, tmp_path, name):
    """On the verifier's own input sets (every distribution, its params per set, kept by a
    KFORGE_PYTHON wrapper), the module in float64 on the GPU against the module in float64
    on the CPU: equal to F64_TOL; and the sample kernel verifies against cuda-f64."""
    task, _, last = verify_keeping_sets(kforge, tmp_path, name, "cuda-f64")
    keep = tmp_path / "keep"  # the sets verify_keeping_sets kept
    assert sorted(last) == [str(s) for s in range(6)], last
    for s, (call, spec_path, seed) in sorted(last.items()):
        d, d64 = keep / call, tmp_path / f"f64_{s}"
        d64.mkdir()
        shutil.copy(d / f"in.{s}", d64 / f"in.{s}")
        p = subprocess.run([sys.executable, "-m", "kforge_torch.reference", spec_path, str(d64), s, seed, "cpu-f64"],
                           capture_output=True, text=True, cwd=PYDIR)
        assert p.returncode == 0, p.stderr
        if s != "0":
            assert read_bytes(d / f"w.{s}") == read_bytes(d64 / f"w.{s}"), "the params differ between kinds"
        assert (d / f"of.{s}").exists() == (d64 / f"of.{s}").exists(), f"set {s}: the overflow marks differ"
        rg = np.fromfile(d / f"out.{s}", dtype=np.float64)
        rc = np.fromfile(d64 / f"out.{s}", dtype=np.float64)
        fin = np.isfinite(rc)
        assert np.array_equal(fin, np.isfinite(rg)), f"set {s}: non-finite elements differ"
        a, b = rg[fin], rc[fin]
        scale = max(1.0, float(np.sqrt(np.mean(b * b)))) if b.size else 1.0
        err = np.abs(a - b)
        excess = err - (F64_TOL * scale + F64_TOL * np.abs(b))
        nmse = float(np.sum((a - b) ** 2) / max(np.sum(b * b), 1e-300))
        print(f"{name} set {s}: max |gpu - cpu| {err.max(initial=0):.3g} (scale {scale:.3g}), NMSE {nmse:.3g}")
        assert excess.max(initial=-1) <= 0, f"set {s}: cuda-f64 off cpu-f64 by {excess.max():.3g} beyond {F64_TOL}"
        assert nmse <= 1e-20, f"set {s}: NMSE {nmse:.3g} between the float64 references"
