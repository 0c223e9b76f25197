"""Tests of kforge_torch.cpu_kernel and kforge_torch.export (`kforge export RUN --as torch`).

The synthesized-kernel tests need the kforge binary: $KFORGE, else build/kforge of this
checkout (`make` builds it); they are skipped, saying so, without it. The hand-written-kernel
tests need only a C compiler (cc).
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PY_DIR = Path(__file__).resolve().parents[1]
REPO = PY_DIR.parent
sys.path.insert(0, str(PY_DIR))

from kforge_torch import cpu_kernel  # noqa: E402
from kforge_torch.export import export, import_file  # noqa: E402


def kforge_binary():
    path = Path(os.environ.get("KFORGE") or REPO / "build" / "kforge")
    return path if path.is_file() and os.access(path, os.X_OK) else None


needs_kforge = pytest.mark.skipif(
    kforge_binary() is None,
    reason="kforge binary not found (set KFORGE or build %s with `make`)" % (REPO / "build/kforge"))
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")


def run_export(*args, cwd=None):
    """python3 -m kforge_torch.export ARGS; the CompletedProcess."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PY_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "kforge_torch.export", *map(str, args)],
                          cwd=cwd or PY_DIR, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600)


def synth(task, out, cwd):
    """kforge synth TASK --out OUT (a small search: the tests check the export, not the search)."""
    r = subprocess.run([str(kforge_binary()), "synth", str(task), "--iters", "2", "--memcheck",
                        "off", "-q", "--out", str(out)], cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600)
    assert r.returncode == 0, "kforge synth %s failed:\n%s" % (task, r.stdout)
    assert (Path(cwd) / out / "manifest.json").is_file()
    return Path(cwd) / out


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Compiled kernels of this test go to its own cache (the synth subprocesses, started by
    the session fixtures, keep the user's calibration cache)."""
    monkeypatch.delenv("KFORGE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    return tmp_path / "xdg-cache" / "kforge" / "torch"


# ---------------------------------------------------------------------------------------------
# A hand-written kernel (no kforge binary needed): two inputs, two outputs, a range().

TWO_KF = """\
task two
input x: f32[8, 16]
input s: f32[16] range(0.5, 2)
output y = x * s
output z = log(s)
"""

TWO_C = r"""
#include <math.h>
int kforge_kernel(void *const *args) {
    const float *x = (const float *)args[0], *s = (const float *)args[1];
    float *y = (float *)args[2], *z = (float *)args[3];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 16; j++) y[i * 16 + j] = x[i * 16 + j] * s[j];
    for (int j = 0; j < 16; j++) z[j] = logf(s[j]);
    return RC;
}
"""

TWO_ARGS = ["in x: f32[8, 16]", "in s: f32[16]", "out y: f32[8, 16]", "out z: f32[16]"]
CC = "cc -O2 -fPIC -shared -o kernel.so kernel.c -lm"

TWO_REF_MODEL = """\
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, s):
        return x * s, torch.log(s)
"""


def make_run(root, platform="cpu", rc=0, task_path=None):
    """A run directory as `kforge synth` writes it, for the hand-written kernel."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "two.kf").write_text(TWO_KF)
    run = root / "run"
    run.mkdir()
    (run / "kernel.c").write_text(TWO_C.replace("RC", str(rc)))
    (run / "manifest.json").write_text(json.dumps({
        "args": TWO_ARGS, "compile": CC, "entry": "kforge_kernel", "platform": platform,
        "task": "two", "schedule": "by hand", "source": "kernel.c"}))
    (run / "run.json").write_text(json.dumps({"task": "two",
                                              "task_path": str(task_path or root / "two.kf")}))
    return run


@needs_cc
def test_loader_checks_inputs_and_caches(tmp_path, private_cache):
    run = make_run(tmp_path)
    before = sorted(p.name for p in run.iterdir())
    k = cpu_kernel.load_cpu_kernel(run)
    assert [a.name for a in k.inputs] == ["x", "s"] and [a.name for a in k.outputs] == ["y", "z"]
    assert k.library.is_file() and private_cache in k.library.parents
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written into the run
    x, s = torch.randn(8, 16), torch.rand(16) + 0.5
    y, z = k(x, s)
    assert y.dtype == torch.float32 and y.shape == (8, 16)
    torch.testing.assert_close(y, x * s)
    torch.testing.assert_close(z, torch.log(s))
    # a non-contiguous input (a transposed view) and a misaligned one (storage offset 1) are copied
    xt = torch.randn(16, 8).t()
    assert not xt.is_contiguous()
    torch.testing.assert_close(k(xt, s)[0], xt * s)
    s_off = (torch.rand(17) + 0.5)[1:]
    assert s_off.data_ptr() % 64 != 0
    torch.testing.assert_close(k(x, s_off)[1], torch.log(s_off))
    # preallocated outputs
    oy, oz = torch.empty(8, 16), torch.empty(16)
    assert k(x, s, out=[oy, oz])[0] is oy
    torch.testing.assert_close(oz, torch.log(s))
    with pytest.raises(TypeError, match="dtype"):
        k(x.double(), s)
    with pytest.raises(ValueError, match="shape"):
        k(torch.randn(8, 15), s)
    with pytest.raises(TypeError, match="takes 2 inputs"):
        k(x)
    # same source and command: the cached library, not a second build
    mtime = k.library.stat().st_mtime_ns
    k2 = cpu_kernel.load_cpu_kernel(run)
    assert k2.library == k.library and k2.library.stat().st_mtime_ns == mtime
    assert len(list(private_cache.iterdir())) == 1


@needs_cc
def test_loader_nonzero_return_and_dtypes(tmp_path):
    bad = cpu_kernel.load_cpu_kernel(source=TWO_C.replace("RC", "5"), command=CC,
                                     entry="kforge_kernel", args=TWO_ARGS, name="two_bad")
    with pytest.raises(RuntimeError, match="two_bad.*returned 5"):
        bad(torch.randn(8, 16), torch.ones(16))
    # f64 in, i64 scalar out
    argmax = r"""
    #include <stdint.h>
    int kforge_kernel(void *const *args) {
        const double *x = (const double *)args[0]; int64_t *o = (int64_t *)args[1];
        o[0] = 0;
        for (int i = 1; i < 5; i++) if (x[i] > x[o[0]]) o[0] = i;
        return 0;
    }"""
    k = cpu_kernel.load_cpu_kernel(source=argmax, command=CC, entry="kforge_kernel",
                                   args=["in x: f64[5]", "out i: i64[]"], name="am")
    r = k(torch.tensor([0.5, -1.0, 3.0, 2.0, 2.5], dtype=torch.float64))
    assert r.dtype == torch.int64 and r.shape == () and r.item() == 2
    assert cpu_kernel.parse_arg("in h: bf16[2, 3]").torch_dtype == torch.bfloat16
    assert cpu_kernel.parse_arg("out h: f16[7]").shape == (7,)
    with pytest.raises(ValueError, match="malformed"):
        cpu_kernel.parse_arg("inout x: f32[2]")
    with pytest.raises(RuntimeError, match="compile failed"):
        cpu_kernel.load_cpu_kernel(source="int kforge_kernel(void *const *a) { syntax error }",
                                   command=CC, entry="kforge_kernel", args=["in x: f32[1]",
                                                                            "out y: f32[1]"])


@needs_cc
def test_export_hand_written_two_outputs(tmp_path):
    run = make_run(tmp_path)
    r = run_export(run)
    assert r.returncode == 0, r.stderr
    out = run / "kforge_torch_export.py"
    assert out.is_file()
    mod = import_file(out)
    # standalone: the module embeds the kernel and does not need the run directory
    assert mod.KERNEL_SOURCE == (run / "kernel.c").read_text()
    alone = tmp_path / "alone" / "two_op.py"
    alone.parent.mkdir()
    shutil.copy(out, alone)
    shutil.move(str(run), str(tmp_path / "run-moved"))
    # kforge_torch made unimportable, the run directory gone, another directory
    code = ("import sys; sys.modules['kforge_torch'] = None\n"
            "import runpy, torch\n"
            "m = runpy.run_path('two_op.py')\n"
            "x, s = m['get_inputs']()\n"
            "y, z = m['ModelNew']()(x, s)\n"
            "assert torch.allclose(y, x * s) and torch.allclose(z, torch.log(s))\n"
            "print('standalone ok')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", code], cwd=alone.parent, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0 and "standalone ok" in r.stdout, r.stdout
    shutil.move(str(tmp_path / "run-moved"), str(run))
    inputs = mod.get_inputs()
    assert [tuple(t.shape) for t in inputs] == [(8, 16), (16,)]
    assert inputs[1].min() >= 0.5 and inputs[1].max() <= 2.0  # the task's range(0.5, 2)
    assert inputs[0].min() < 0  # no range: randn
    assert mod.get_init_inputs() == []
    m = mod.ModelNew()
    x, s = inputs
    y, z = m(x, s)
    torch.testing.assert_close(y, x * s)
    torch.testing.assert_close(z, torch.log(s))
    yc, zc = torch.compile(mod.ModelNew(), fullgraph=True)(x, s)
    assert torch.equal(yc, y) and torch.equal(zc, z)
    # the check against a reference model passes, and fails against a wrong one
    ref = tmp_path / "ref_model.py"
    ref.write_text(TWO_REF_MODEL)
    r = run_export("--check", out, "--model", ref)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "check: ok" in r.stdout and "fullgraph" in r.stdout
    wrong = tmp_path / "wrong_model.py"
    wrong.write_text(TWO_REF_MODEL.replace("torch.log(s)", "torch.log(s) * 1.01"))
    r = run_export("--check", out, "--model", wrong, "--no-compile")
    assert r.returncode == 1 and "MISMATCH" in r.stdout, r.stdout + r.stderr
    # a plain task has no reference of its own
    r = run_export("--check", out)
    assert r.returncode == 2 and "--model" in r.stderr


CONST_MODEL = """\
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        s = torch.linspace(0.5, 2.0, 16)  # torch.export lifts this as a tensor constant
        return x * s, torch.log(s)

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return []
"""


@needs_cc
def test_export_imported_constant_and_two_outputs(tmp_path):
    """An imported bundle whose second kernel input is a lifted constant (kind "constant",
    value in params.safetensors) and whose forward has two outputs."""
    from safetensors.torch import save_file
    bundle = tmp_path / "bundle"
    run = make_run(tmp_path, task_path=bundle / "task.kf")
    bundle.mkdir()
    (bundle / "task.kf").write_text(TWO_KF)
    (bundle / "model.py").write_text(CONST_MODEL)
    save_file({"lifted_tensor_0": torch.linspace(0.5, 2.0, 16)}, str(bundle / "params.safetensors"))
    (bundle / "graph.json").write_text(json.dumps({
        "format": "kforge-graph", "version": 1, "name": "two", "model": "model.py", "seed": 0,
        "inputs": [{"name": "s", "kind": "constant", "target": "lifted_tensor_0", "dtype": "f32",
                    "shape": [16]},
                   {"name": "x", "kind": "input", "index": 0, "dtype": "f32", "shape": [8, 16]}],
        "nodes": [], "outputs": [{"ref": "mul"}, {"ref": "log"}]}))
    out = tmp_path / "two_export.py"
    r = run_export(run, "--out", out)
    assert r.returncode == 0, r.stderr
    mod = import_file(out)
    assert mod.MODEL_PATH == str(bundle / "model.py")  # relative "model" resolved
    assert set(mod.CONSTANTS) == {"lifted_tensor_0"}
    (x,) = mod.get_inputs()
    y, z = mod.ModelNew()(x)
    want = torch.linspace(0.5, 2.0, 16)
    torch.testing.assert_close(y, x * want)
    torch.testing.assert_close(z, torch.log(want))
    r = run_export("--check", out)
    assert r.returncode == 0 and r.stdout.count(") ok") == 4, r.stdout + r.stderr
    assert "fullgraph" in r.stdout and "check: ok" in r.stdout


# ---------------------------------------------------------------------------------------------
# Errors


def test_error_missing_manifest(tmp_path):
    r = run_export(tmp_path)
    assert r.returncode == 2
    assert "manifest.json" in r.stderr and str(tmp_path) in r.stderr
    r = run_export(tmp_path / "nowhere")
    assert r.returncode == 2 and "not a directory" in r.stderr


def test_error_non_cpu_platform(tmp_path):
    run = make_run(tmp_path, platform="opencl")
    r = run_export(run)
    assert r.returncode == 2
    assert "platform 'opencl' is not supported by the torch export (cpu and cuda" in r.stderr
    assert str(run / "manifest.json") in r.stderr
    with pytest.raises(cpu_kernel.KernelRunError, match="'opencl' is not a CPU kernel"):
        cpu_kernel.load_cpu_kernel(run)
    assert not (run / "kforge_torch_export.py").exists()
    # a CPU manifest that says cuda is checked as a CUDA run (its C source has no launch
    # plan: the nvcc form), and the CPU loader sends it to the CUDA one
    run = make_run(tmp_path / "c", platform="cuda")
    with pytest.raises(cpu_kernel.KernelRunError, match="load_cuda_kernel"):
        cpu_kernel.load_cpu_kernel(run)


def test_error_missing_task(tmp_path):
    run = make_run(tmp_path, task_path=tmp_path / "gone.kf")
    r = run_export(run)
    assert r.returncode == 2 and "gone.kf not found" in r.stderr and "run.json" in r.stderr
    (run / "run.json").unlink()
    r = run_export(run)
    assert r.returncode == 2 and "run.json: missing" in r.stderr
    # --task fixes it, and a task that does not match the kernel is refused
    assert run_export(run, "--task", tmp_path / "two.kf").returncode == 0
    other = tmp_path / "other.kf"
    other.write_text("task two\ninput x: f32[8, 17]\ninput s: f32[16]\noutput y = x * s\n")
    r = run_export(run, "--task", other)
    assert r.returncode == 2 and "do not match" in r.stderr


# ---------------------------------------------------------------------------------------------
# Synthesized kernels


@pytest.fixture(scope="session")
def swish_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("swish")
    (d / "swish_small.kf").write_text("task swish_small\ninput x: f32[256, 512]\n"
                                      "output y = x * sigmoid(x)\n")
    # relative task path, as a user would type it: the export finds it beside the run dir
    return synth("swish_small.kf", "run", cwd=d)


@needs_kforge
def test_synth_plain_task(swish_run, tmp_path):
    out = tmp_path / "swish_export.py"
    r = run_export(swish_run, "--out", out)  # from another directory than synth's
    assert r.returncode == 0, r.stderr
    mod = import_file(out)
    assert mod.TASK == "swish_small"
    (x,) = mod.get_inputs()
    assert x.shape == (256, 512) and x.dtype == torch.float32
    y = mod.ModelNew()(x)
    torch.testing.assert_close(y, x * torch.sigmoid(x), atol=1e-5, rtol=1e-5)
    # the registered op, and an import of a second copy of the module reuses it
    torch.testing.assert_close(torch.ops.kforge.swish_small(x), y, atol=0, rtol=0)
    copy = tmp_path / "copy" / "swish_export.py"
    copy.parent.mkdir()
    shutil.copy(out, copy)
    assert import_file(copy).kforge_op is mod.kforge_op
    yc = torch.compile(mod.ModelNew(), fullgraph=True)(x)
    assert torch.equal(yc, y)
    # torch.compile composes it with other ops (the fake kernel gives shape and dtype)
    f = torch.compile(lambda t: mod.ModelNew()(t * 2.0).sum(dim=1), fullgraph=True)
    torch.testing.assert_close(f(x), mod.ModelNew()(x * 2.0).sum(dim=1))


LN_MODEL = """\
import torch
import torch.nn as nn

D = 256


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.nn.functional.layer_norm(x, (D,), self.weight, self.bias, 1e-5)


def get_inputs():
    return [torch.randn(64, D)]


def get_init_inputs():
    return [D]
"""

LN_KF = """\
task ln
input x: f32[64, 256]
input p_weight: f32[256]
input p_bias: f32[256]
output y = layer_norm(x, p_weight, p_bias, axes=-1, eps=1e-5)
"""


@pytest.fixture(scope="session")
def ln_bundle(tmp_path_factory):
    """A `kforge import` bundle written by hand (docs/pytorch.md), synthesized."""
    d = tmp_path_factory.mktemp("ln")
    bundle = d / "bundle"
    bundle.mkdir()
    (bundle / "model.py").write_text(LN_MODEL)
    (bundle / "task.kf").write_text(LN_KF)
    # torch.export lists the parameters first; the kernel takes x first
    graph = {
        "format": "kforge-graph", "version": 1, "name": "ln",
        "model": str(bundle / "model.py"), "seed": 0,
        "inputs": [
            {"name": "p_weight", "kind": "param", "target": "weight", "dtype": "f32", "shape": [256]},
            {"name": "p_bias", "kind": "param", "target": "bias", "dtype": "f32", "shape": [256]},
            {"name": "x", "kind": "input", "index": 0, "dtype": "f32", "shape": [64, 256]},
        ],
        "nodes": [{"name": "layer_norm", "target": "aten.layer_norm.default",
                   "args": [{"ref": "x"}, [256], {"ref": "p_weight"}, {"ref": "p_bias"}, 1e-05],
                   "kwargs": {}, "dtype": "f32", "shape": [64, 256]}],
        "outputs": [{"ref": "layer_norm"}],
    }
    (bundle / "graph.json").write_text(json.dumps(graph, indent=1))
    run = synth(bundle / "task.kf", d / "run", cwd=d)
    return bundle, run


@needs_kforge
def test_synth_imported_model(ln_bundle, tmp_path):
    bundle, run = ln_bundle
    r = run_export(run)
    assert r.returncode == 0, r.stderr
    out = run / "kforge_torch_export.py"
    text = out.read_text()
    assert "self.get_parameter('weight')" in text and "args[0]" in text
    # the check command: same seed, same parameters, eager and torch.compile both match
    r = run_export("--check", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("allclose(atol=rtol=0.0001) ok") == 2 and "fullgraph" in r.stdout
    # by hand, as KernelBench's harness does it
    mod = import_file(out)
    assert issubclass(mod.ModelNew, mod.Model)
    init = mod.get_init_inputs()
    assert init == [256]
    torch.manual_seed(42)
    ref = mod.Model(*init)
    torch.manual_seed(42)
    new = mod.ModelNew(*init)
    assert torch.equal(ref.weight, new.weight) and torch.equal(ref.bias, new.bias)
    (x,) = mod.get_inputs()
    with torch.no_grad():
        want = ref(x)
    got = new(x)  # parameters require grad: the kernel sees them detached
    assert not got.requires_grad
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    # the kernel really reads the module's parameters: changing one changes the output
    with torch.no_grad():
        new.bias.add_(1.0)
    torch.testing.assert_close(new(x), want + 1.0, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.compile(new, fullgraph=True)(x), want + 1.0,
                               atol=1e-4, rtol=1e-4)
    # --check fails against a model that computes something else
    wrong = tmp_path / "wrong.py"
    wrong.write_text(LN_MODEL.replace("1e-5)", "1e-5) * 1.001"))
    r = run_export("--check", out, "--model", wrong, "--no-compile")
    assert r.returncode == 1 and "MISMATCH" in r.stdout, r.stdout + r.stderr


@needs_kforge
def test_synth_imported_graph_mismatch(ln_bundle, tmp_path):
    """A graph.json whose inputs do not fit the kernel is refused with the file named."""
    bundle, run = ln_bundle
    bad = tmp_path / "bundle"
    shutil.copytree(bundle, bad)
    g = json.loads((bad / "graph.json").read_text())
    g["inputs"][0]["shape"] = [255]
    (bad / "graph.json").write_text(json.dumps(g))
    r = run_export(run, "--task", bad / "task.kf", "--out", tmp_path / "x.py")
    assert r.returncode == 2 and "graph.json" in r.stderr and "p_weight" in r.stderr
    assert not (tmp_path / "x.py").exists()
