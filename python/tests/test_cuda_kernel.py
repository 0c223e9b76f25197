"""Tests of kforge_torch.cuda_kernel, `kforge bench --target cuda` and the CUDA export.

Without a GPU (CI, the 2-CPU dev machine): the manifest and launch-plan checks of two
recorded CUDA run directories (python/tests/data/cuda_swish, cuda_rowsum: hand-written
NVRTC-form kernels with the manifest `kforge synth --target cuda` writes), the argument
checks, the NVRTC compile itself (NVRTC needs no device; skipped without libnvrtc), the
errors for a machine without a driver, `kforge bench --target cuda` refusing at once, and the
exported module's text (its loader names all resolve, it runs without kforge_torch up to the
driver). With a GPU (torch.cuda.is_available(); bench/torch_cuda_smoke.sh on the H200): the
kernels called against torch, on a side stream too, the custom op under
torch.compile(fullgraph=True), a device fault named by its launch (in a child process: the
context is lost), `kforge bench --target cuda` on a 2-task suite, `kforge export` + --check of
a recorded and a synthesized CUDA run.
"""
import dis
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

PY_DIR = Path(__file__).resolve().parents[1]
REPO = PY_DIR.parent
DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(PY_DIR))

from kforge_torch import cuda_kernel  # noqa: E402
from kforge_torch.cpu_kernel import KernelRunError  # noqa: E402
from kforge_torch.cuda_kernel import CudaLaunchError, load_cuda_kernel  # noqa: E402
from kforge_torch.export import generate, import_file  # noqa: E402

# the environment before the fixtures change it: kforge runs started by the tests keep the
# user's calibration cache (a fresh one would re-measure the GPU for every test)
KFORGE_ENV = dict(os.environ)
GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="no CUDA device (torch.cuda.is_available() is False)")
no_gpu = pytest.mark.skipif(GPU, reason="checks the no-GPU behaviour; this machine has a GPU")


def kforge_binary():
    path = Path(os.environ.get("KFORGE") or REPO / "build" / "kforge")
    return path if path.is_file() and os.access(path, os.X_OK) else None


needs_kforge = pytest.mark.skipif(kforge_binary() is None,
                                  reason="kforge binary not found (set KFORGE=/path/to/kforge)")


def _nvrtc_loadable():
    try:
        cuda_kernel._load_nvrtc()
        return True
    except KernelRunError:
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc_loadable(), reason="no libnvrtc on this machine")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("KFORGE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    return tmp_path / "xdg-cache" / "kforge" / "torch"


def copy_run(name, tmp_path, edit=None):
    """A copy of a recorded run directory, its manifest changed by edit(manifest)."""
    dst = tmp_path / name
    shutil.copytree(DATA / name, dst)
    if edit:
        man = json.loads((dst / "manifest.json").read_text())
        edit(man)
        (dst / "manifest.json").write_text(json.dumps(man))
    return dst


def run_py(args, cwd=None, env=None, timeout=600):
    e = dict(os.environ)
    e["PYTHONPATH"] = str(PY_DIR) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return subprocess.run([sys.executable] + [str(a) for a in args], cwd=cwd or PY_DIR, env=e,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# No GPU needed: manifests, plans, arguments


def test_recorded_runs_parse():
    k = load_cuda_kernel(DATA / "cuda_swish", load=False)
    assert k.name == "swish" and k.form == "nvrtc"
    assert [str(a) for a in k.inputs] == ["in x: f32[256, 512]"]
    assert [str(a) for a in k.outputs] == ["out y: f32[256, 512]"]
    assert k.plan == [("swish", (1024, 1, 1), (128, 1, 1), (0, 1), 0)]  # 131072 / 128 blocks
    assert k.scratch_bytes == {}
    assert k.source_path == str(DATA / "cuda_swish" / "kernel.cu")
    r = load_cuda_kernel(DATA / "cuda_rowsum", load=False)
    assert [a.name for a in r.inputs] == ["x", "b"] and [a.name for a in r.outputs] == ["s", "t"]
    assert r.plan == [("partial", (1, 64, 1), (256, 1, 1), (0, "part", 3), 0),
                      ("finish", (1, 1, 1), (64, 1, 1), ("part", 1, 2), 0)]
    assert r.scratch_bytes == {"part": 1024}
    assert r.digest != k.digest
    # the architecture is replaced by the device's; the tunable and the other options stay
    opts = cuda_kernel.nvrtc_options(k.build_options, "sm_100")
    assert opts[0] == "--gpu-architecture=sm_100" and "--gpu-architecture=sm_90" not in opts
    assert "-DWG=128" in opts and "-default-device" in opts and "--std=c++17" in opts


def _set(path, value):
    def edit(man):
        obj = man
        for p in path[:-1]:
            obj = obj[p]
        if value is KeyError:
            del obj[path[-1]]
        else:
            obj[path[-1]] = value
    return edit


@pytest.mark.parametrize("path, value, message", [
    (("launches", 0, "global"), [131000], r"launch 0 \(swish\): global \[131000\] is not a multiple of local \[128\]"),
    (("launches", 0, "args"), [0, 2], r"argument 2 is neither a buffer index 0..1 nor a scratch buffer \(none\)"),
    (("launches", 0, "args"), [0, "tmp"], r"argument 'tmp' is neither"),
    (("launches", 0, "local"), [2048], r"block \[2048\] has more than 1024 threads"),
    (("launches", 0, "local"), [128, 1], r"global \[131072\] and local \[128, 1\] have different dimensions"),
    (("launches", 0, "global"), [0], r"'global' must be 1 to 3 positive integers"),
    (("launches", 0, "kernel"), "swish-2", r"launch 0: \"kernel\" 'swish-2' is not a kernel name"),
    (("launches",), [], r"no \"launches\""),
    (("launches",), KeyError, r"no \"launches\""),
    (("scratch_bytes",), {"part": -1}, r"scratch_bytes"),
    (("launches", 0, "smem"), -16, r"launch 0 \(swish\): \"smem\" -16 must be a byte count >= 0"),
    (("launches", 0, "smem"), "64k", r"\"smem\" '64k' must be a byte count"),
])
def test_plan_errors_name_the_manifest(tmp_path, path, value, message):
    run = copy_run("cuda_swish", tmp_path, _set(path, value))
    with pytest.raises(KernelRunError, match=message) as e:
        load_cuda_kernel(run, load=False)
    assert str(run / "manifest.json") in str(e.value)


def test_plan_keeps_dynamic_shared_memory(tmp_path):
    run = copy_run("cuda_swish", tmp_path, _set(("launches", 0, "smem"), 98304))
    k = load_cuda_kernel(run, load=False)
    assert k.plan == [("swish", (1024, 1, 1), (128, 1, 1), (0, 1), 98304)]


def test_not_a_cuda_run(tmp_path):
    run = copy_run("cuda_swish", tmp_path, _set(("platform",), "cpu"))
    with pytest.raises(KernelRunError, match="platform 'cpu' is not a CUDA kernel.*load_cpu_kernel"):
        load_cuda_kernel(run)
    with pytest.raises(KernelRunError, match="no manifest.json"):
        load_cuda_kernel(tmp_path)
    with pytest.raises(KernelRunError, match="not a directory"):
        load_cuda_kernel(tmp_path / "nowhere")
    run = copy_run("cuda_rowsum", tmp_path)
    (run / "kernel.cu").unlink()
    with pytest.raises(KernelRunError, match=r"kernel source .*kernel.cu named by the manifest is missing"):
        load_cuda_kernel(run)
    # and the CPU loader sends a CUDA run to this one
    from kforge_torch.cpu_kernel import load_cpu_kernel
    with pytest.raises(KernelRunError, match="platform 'cuda' is not a CPU kernel.*load_cuda_kernel"):
        load_cpu_kernel(DATA / "cuda_swish")


def test_argument_checks_before_any_driver_call():
    """dtype, shape, count and device are checked before the kernel is loaded: on CPU
    tensors here, where a wrong dtype or shape is named first, then the device."""
    k = load_cuda_kernel(DATA / "cuda_rowsum", load=False)
    x, b = torch.randn(64, 1000), torch.randn(64)
    with pytest.raises(TypeError, match=r"kernel rowsum: input x has dtype torch.float64, expected torch.float32 \(f32\)"):
        k(x.double(), b)
    with pytest.raises(ValueError, match=r"input x has shape \[64, 999\], expected \[64, 1000\]"):
        k(torch.randn(64, 999), b)
    with pytest.raises(TypeError, match=r"takes 2 inputs \(x, b\), got 1"):
        k(x)
    with pytest.raises(TypeError, match="input x must be a tensor, got list"):
        k([0.0] * 64, b)
    with pytest.raises(ValueError, match="input x is on cpu; this is a CUDA kernel"):
        k(x, b)
    with pytest.raises(TypeError, match="writes 2 outputs, out= gives 1"):
        k(x, b, out=[torch.empty(64)])
    assert not k._loaded


def test_nvcc_form_command():
    src = (DATA / "cuda_swish" / "kernel.cu").read_text().replace("kforge:launch", "kforge: no plan")
    k = cuda_kernel.CudaKernel(src, "--gpu-architecture=sm_90 -default-device --std=c++17 -DWG=128",
                               ["in x: f32[256, 512]", "out y: f32[256, 512]"], name="swish", load=False)
    assert k.form == "nvcc" and k.plan == []
    cmd = cuda_kernel.nvcc_command("/usr/local/cuda/bin/nvcc", "sm_90", k.build_options)
    assert cmd == ("/usr/local/cuda/bin/nvcc -O3 -arch=sm_90 -Xcompiler -fPIC -shared -DWG=128 "
                   "-o kernel.so kernel.cu")


@needs_nvrtc
def test_nvrtc_compiles_the_recorded_kernels(private_cache):
    """NVRTC needs no GPU: the recorded sources build with their manifests' options into
    CUBINs holding their kernels, cached; a broken source gives NVRTC's log with the file."""
    for name, kernels in (("cuda_swish", [b"swish"]), ("cuda_rowsum", [b"partial", b"finish"])):
        k = load_cuda_kernel(DATA / name, load=False)
        opts = cuda_kernel.nvrtc_options(k.build_options, "sm_90")
        cubin = cuda_kernel.nvrtc_compile(k.source, opts, k.where)
        assert cubin[:4] == b"\x7fELF"
        for kn in kernels:
            assert kn in cubin
        cached = sorted((private_cache / "cuda").glob("*.cubin"))
        assert len(cached) == 1  # one per (source, options, NVRTC version)
        cached[0].write_bytes(b"from the cache")  # the cache is what a second build reads
        assert cuda_kernel.nvrtc_compile(k.source, opts, k.where) == b"from the cache"
        assert cuda_kernel.nvrtc_compile(k.source, opts + ["-DX=1"], k.where)[:4] == b"\x7fELF"
        shutil.rmtree(private_cache / "cuda")
    k = load_cuda_kernel(DATA / "cuda_swish", load=False)
    opts = cuda_kernel.nvrtc_options(k.build_options, "sm_90")
    with pytest.raises(RuntimeError, match=r"(?s)kernel swish \(.*kernel.cu\): NVRTC compile failed "
                                           r"\(NVRTC_ERROR_COMPILATION\).*kernel.cu\(\d+\): error"):
        cuda_kernel.nvrtc_compile(k.source.replace("expf(-x[i])", "expf(-x[i]"), opts, k.where,
                                  "kernel.cu")


def test_nvrtc_missing_is_named():
    with pytest.raises(KernelRunError, match=r"kernel k \(a.cu\): NVRTC not found .*set CUDA_HOME"):
        cuda_kernel._load_nvrtc(["/nonexistent/libnvrtc.so.13", "libnvrtc-not-there.so"],
                                where="kernel k (a.cu)")


@no_gpu
def test_no_gpu_load_fails_clearly():
    with pytest.raises(KernelRunError) as e:
        load_cuda_kernel(DATA / "cuda_swish")
    msg = str(e.value)
    assert msg.startswith("kernel swish (%s): cannot run here: " % (DATA / "cuda_swish" / "kernel.cu"))
    assert "no CUDA driver (libcuda.so.1 not found" in msg or "PyTorch sees no CUDA device" in msg \
        or "built without CUDA" in msg


@no_gpu
@needs_kforge
def test_bench_cuda_without_gpu_exits_2_at_once(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(REPO / "suites" / "cpu-l1" / "01_relu.py", suite)
    work = tmp_path / "work"
    p = subprocess.run([str(kforge_binary()), "bench", str(suite), "--target", "cuda", "--out", str(work),
                        "--json", str(tmp_path / "b.json")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "--target cuda: PyTorch sees no CUDA device" in p.stderr and "nothing was run" in p.stderr
    assert not work.exists() and not (tmp_path / "b.json").exists()  # no synth, no CPU run
    p = subprocess.run([str(kforge_binary()), "bench", str(suite), "--target", "opencl"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 2 and "cpu and cuda kernels only" in p.stderr


def _globals_used(code):
    names = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            names.add(ins.argval)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _globals_used(c)
    return names


def test_export_text_of_a_cuda_run(tmp_path):
    run = copy_run("cuda_rowsum", tmp_path)
    text = generate(run)
    assert "PLATFORM = 'cuda'" in text and "LAUNCHES = [" in text and "SCRATCH_BYTES = {'part': 1024}" in text
    assert "# --- kforge cuda loader begin ---" in text and "# --- kforge loader begin ---" in text
    assert "_kernel = CudaKernel(KERNEL_SOURCE, BUILD_OPTIONS" in text
    assert ".to('cuda')" in text  # the plain task's get_inputs() draws on the GPU
    # every global name the module's code reads is defined in it (or a builtin): the pasted
    # loader parts stand alone
    code = compile(text, "export.py", "exec")
    defined = set(dir(__builtins__) if isinstance(__builtins__, types.ModuleType) else __builtins__)
    import ast
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.alias):
            defined.add((node.asname or node.name).split(".")[0])
    missing = _globals_used(code) - defined - {"__annotations__"}  # a dataclass's
    assert not missing, "the exported module reads undefined names: %s" % sorted(missing)
    # a plan error is found at export, not at import
    bad = copy_run("cuda_swish", tmp_path / "bad", _set(("launches", 0, "global"), [100]))
    p = run_py(["-m", "kforge_torch.export", bad])
    assert p.returncode == 2 and "is not a multiple of local" in p.stderr, p.stderr
    other = copy_run("cuda_swish", tmp_path / "ocl", _set(("platform",), "opencl"))
    p = run_py(["-m", "kforge_torch.export", other])
    assert p.returncode == 2 and "platform 'opencl' is not supported by the torch export" in p.stderr


STANDALONE = """\
import sys; sys.modules['kforge_torch'] = None
import runpy, torch
try:
    m = runpy.run_path(sys.argv[1])
except Exception as e:
    print('import failed: %s: %s' % (type(e).__name__, e))
    raise SystemExit(0 if not torch.cuda.is_available() else 1)
x, b = m['get_inputs']()
assert x.is_cuda and b.is_cuda
s, t = m['ModelNew']()(x, b)
torch.testing.assert_close(s, x.sum(1) + b, atol=1e-4, rtol=1e-4)
torch.testing.assert_close(t, 2 * x, atol=0, rtol=0)
print('standalone ok')
"""


def test_exported_cuda_module_runs_without_kforge_torch(tmp_path):
    """Without kforge_torch (blocked) and the run directory (gone): with a GPU it computes
    the task; without one it gets as far as the driver and says so."""
    run = copy_run("cuda_rowsum", tmp_path)
    p = run_py(["-m", "kforge_torch.export", run, "--out", tmp_path / "alone" / "rowsum_op.py"])
    assert p.returncode == 0, p.stderr
    shutil.rmtree(run)
    (tmp_path / "t.py").write_text(STANDALONE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, str(tmp_path / "t.py"), "rowsum_op.py"], cwd=tmp_path / "alone",
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    if GPU:
        assert "standalone ok" in r.stdout, r.stdout
    else:
        assert "import failed: KernelRunError: kernel rowsum (kernel.cu): cannot run here" in r.stdout, r.stdout


# ---------------------------------------------------------------------------------------------
# GPU


@needs_gpu
def test_gpu_kernels_against_torch():
    k = load_cuda_kernel(DATA / "cuda_swish")
    assert k.arch.startswith("sm_") and k.device.type == "cuda"
    x = torch.randn(256, 512, device="cuda")
    y = k(x)
    assert y.is_cuda and y.shape == (256, 512) and y.dtype == torch.float32
    torch.testing.assert_close(y, x * torch.sigmoid(x), atol=1e-5, rtol=1e-5)
    # every element written: outputs poisoned with NaN first
    out = torch.full((256, 512), float("nan"), device="cuda")
    assert k(x, out=[out]) is out and not torch.isnan(out).any()
    torch.testing.assert_close(out, y, atol=0, rtol=0)
    # a non-contiguous input is copied; a misaligned output is refused
    xt = torch.randn(512, 256, device="cuda").t()
    torch.testing.assert_close(k(xt), xt * torch.sigmoid(xt), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="contiguous and 256-byte aligned"):
        k(x, out=[torch.empty(256 * 512 + 1, device="cuda")[1:].view(256, 512)])
    with pytest.raises(TypeError, match="dtype torch.float16"):
        k(x.half())
    # on a side stream: the launches follow the stream's order
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x2 = torch.randn(256, 512, device="cuda") * 3
        y2 = k(x2)
    s.synchronize()
    torch.testing.assert_close(y2, x2 * torch.sigmoid(x2), atol=1e-5, rtol=1e-5)
    # two launches through scratch, two inputs and two outputs, called twice
    r = load_cuda_kernel(DATA / "cuda_rowsum", sync=True)
    for _ in range(2):
        x, b = torch.randn(64, 1000, device="cuda"), torch.randn(64, device="cuda")
        s_, t_ = r(x, b)
        torch.testing.assert_close(s_, x.sum(1) + b, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(t_, 2 * x, atol=0, rtol=0)


@needs_gpu
def test_gpu_custom_op_under_torch_compile():
    k = load_cuda_kernel(DATA / "cuda_swish")
    op = k.custom_op()
    assert op is k.custom_op()  # registered once
    x = torch.randn(256, 512, device="cuda")
    torch.testing.assert_close(torch.ops.kforge.swish(x), x * torch.sigmoid(x), atol=1e-5, rtol=1e-5)
    f = torch.compile(lambda t: op(t * 2.0).sum(dim=1) + 1.0, fullgraph=True)
    torch.testing.assert_close(f(x), (op(x * 2.0)).sum(dim=1) + 1.0, atol=1e-4, rtol=1e-5)
    with torch._subclasses.fake_tensor.FakeTensorMode():  # the fake impl: shape, dtype, device
        fx = torch.empty(256, 512, device="cuda")
        fy = op(fx)
        assert fy.shape == (256, 512) and fy.device.type == "cuda"


BAD_CU = """\
// kforge:launch bad global=256 local=256 args=0,1
extern "C" __global__ void bad(const float *x, float *y) {
    y[threadIdx.x + (1LL << 40)] = x[threadIdx.x];  // far outside any allocation
}
"""

FAULT = """\
import sys, torch
sys.path.insert(0, sys.argv[1])
from kforge_torch.cuda_kernel import CudaKernel, CudaLaunchError
k = CudaKernel(open(sys.argv[2]).read(), "", ["in x: f32[256]", "out y: f32[256]"],
               [{"kernel": "bad", "global": [256], "local": [256], "args": [0, 1]}], {},
               name="bad", source_path=sys.argv[2], sync=True)
try:
    k(torch.randn(256, device="cuda"))
except CudaLaunchError as e:
    print("CudaLaunchError:", e)
"""


@needs_gpu
def test_gpu_fault_and_block_limit_are_named(tmp_path):
    (tmp_path / "bad.cu").write_text(BAD_CU)
    (tmp_path / "fault.py").write_text(FAULT)
    r = subprocess.run([sys.executable, str(tmp_path / "fault.py"), str(PY_DIR), str(tmp_path / "bad.cu")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert ("CudaLaunchError: kernel bad (%s): launch 1 of 1, bad<<<[1, 1, 1], [256, 1, 1]>>>: "
            "after the launch: CUDA_ERROR_" % (tmp_path / "bad.cu")) in r.stdout, r.stdout
    # a block larger than the kernel's __launch_bounds__(WG=128) allows
    run = copy_run("cuda_swish", tmp_path, _set(("launches", 0, "local"), [256]))
    with pytest.raises(KernelRunError, match=r"block \[256, 1, 1\]: the kernel allows at most 128 threads"):
        load_cuda_kernel(run)


SMALL = '''\
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return {expr}

def get_inputs():
    return [torch.randn(256, 512)]

def get_init_inputs():
    return []
'''


@needs_gpu
@needs_kforge
def test_gpu_bench_smoke(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "01_relu.py").write_text(SMALL.format(expr="torch.relu(x)"))
    (suite / "02_softmax.py").write_text(SMALL.format(expr="torch.softmax(x, dim=1)"))
    out_json, out_csv = tmp_path / "b.json", tmp_path / "b.csv"
    p = subprocess.run([str(kforge_binary()), "bench", str(suite), "--target", "cuda", "--iters", "2",
                        "--reps", "5", "--out", str(tmp_path / "w"), "--json", str(out_json),
                        "--csv", str(out_csv)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=900, env=dict(KFORGE_ENV, KFORGE_STORE=os.environ["KFORGE_STORE"]))
    print(p.stdout, p.stderr)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[1/2] 01_relu: ok" in p.stderr and "[2/2] 02_softmax: ok" in p.stderr, p.stderr
    r = json.load(open(out_json))
    assert r["target"] == "cuda" and "CUDA events" in r["timing"] and r["device"] != "cpu"
    s = r["summary"]
    assert s["tasks"] == 2 and s["correct"] == 2 and s["correctness"] == 1.0
    for base in ("eager", "compile"):
        assert s[f"fast_0_{base}"] == 1.0 and s[f"geomean_{base}"] > 0
    for row in r["rows"]:
        assert row["correct"] and row["compile_matches_eager"]
        assert row["kforge_ms"] > 0 and row["eager_ms"] > 0 and row["compile_ms"] > 0
        assert row["max_abs_err"] < 1e-3
    man = json.load(open(tmp_path / "w" / "01_relu" / "run" / "manifest.json"))
    assert man["platform"] == "cuda"
    assert "x compile" in p.stdout and "CUDA events" in p.stdout


CHECK_MODEL = '''\
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, b):
        return x.sum(1) + b{wrong}, 2 * x

def get_inputs():
    return [torch.randn(64, 1000), torch.randn(64)]

def get_init_inputs():
    return []
'''


@needs_gpu
def test_gpu_export_check_recorded_run(tmp_path):
    run = copy_run("cuda_rowsum", tmp_path)
    out = tmp_path / "rowsum_op.py"
    assert run_py(["-m", "kforge_torch.export", run, "--out", out]).returncode == 0
    ref = tmp_path / "ref.py"
    ref.write_text(CHECK_MODEL.format(wrong=""))
    p = run_py(["-m", "kforge_torch.export", "--check", out, "--model", ref])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "on cuda:0" in p.stdout and "fullgraph" in p.stdout and "check: ok" in p.stdout
    ref.write_text(CHECK_MODEL.format(wrong=" * 1.01"))
    p = run_py(["-m", "kforge_torch.export", "--check", out, "--model", ref, "--no-compile"])
    assert p.returncode == 1 and "MISMATCH" in p.stdout, p.stdout + p.stderr


LN_MODEL = '''\
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        with torch.no_grad():
            self.ln.weight.normal_()
            self.ln.bias.normal_()
    def forward(self, x):
        return self.ln(x)

def get_inputs():
    return [torch.randn(128, 512)]

def get_init_inputs():
    return [512]
'''


@needs_gpu
@needs_kforge
def test_gpu_import_synth_export_check(tmp_path):
    """The whole path on the GPU: kforge import, synth --target cuda, export, --check."""
    (tmp_path / "ln.py").write_text(LN_MODEL)
    k = str(kforge_binary())
    p = subprocess.run([k, "import", "ln.py", "--out", "bundle"], cwd=tmp_path, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert p.returncode == 0, p.stdout
    p = subprocess.run([k, "synth", "bundle/task.kf", "--target", "cuda", "--iters", "2", "--memcheck",
                        "off", "-q", "--out", "run"], cwd=tmp_path, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600,
                       env=dict(KFORGE_ENV, KFORGE_STORE=os.environ["KFORGE_STORE"]))
    assert p.returncode == 0, p.stdout
    assert json.load(open(tmp_path / "run" / "manifest.json"))["platform"] == "cuda"
    p = run_py(["-m", "kforge_torch.export", tmp_path / "run", "--out", tmp_path / "ln_op.py"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    p = run_py(["-m", "kforge_torch.export", "--check", tmp_path / "ln_op.py"], cwd=tmp_path)
    print(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "on cuda:0" in p.stdout and "check: ok" in p.stdout
    mod = import_file(tmp_path / "ln_op.py")
    m = mod.ModelNew(*mod.get_init_inputs()).cuda()
    (x,) = mod.get_inputs()
    y = m(x.cuda())
    assert y.is_cuda and y.shape == (128, 512)
