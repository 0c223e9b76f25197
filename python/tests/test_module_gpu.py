"""Module tasks (issue 26) on device targets, and the float32 GPU reference.

What runs where:
- everywhere (PoCL gives every machine an OpenCL device on the CPU): a module task and a
  mixed task on --target opencl against the scripted model of tests/llm_server.py, whose
  replies are OpenCL kernels in the kernel contract (docs/kernel-contract.md): the prompt
  carries the opencl contract and example, the candidate runs on the device, the reference
  stays the module process; a wrong, a half-written and a CLBlast-calling kernel are each
  rejected with their own status before the right one verifies;
- everywhere: --module-ref cuda-f32 is refused, naming why, where torch has no CUDA device
  (CUDA_VISIBLE_DEVICES="" makes that so on a GPU machine too), and on a graph task; the
  reference process turns TF32 off; the doubled tolerance of a float32 reference, checked by
  running the cuda-f32 path of kforge_torch.reference on the CPU device (a KFORGE_PYTHON
  wrapper of this test's own, never a mode of kforge: kforge itself has no fallback);
- on a GPU machine only (KFORGE_TEST_GPU=cuda, torch with a CUDA device; skipped elsewhere,
  saying why): the float32 GPU reference of every sample module within the float32 tolerance
  of the float64 one on the verifier's own input sets (the assumption the doubled tolerance
  rests on), and module and mixed tasks on --target cuda, with either reference.

On the GPU machine: cd python && KFORGE_TEST_GPU=cuda python3 -m pytest tests/test_module_gpu.py -q
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import REPO, read, scripted_reply

MODULES = os.path.join(REPO, "tests", "modules")
GPU = os.environ.get("KFORGE_TEST_GPU", "")
need_cuda = pytest.mark.skipif(GPU != "cuda" or not torch.cuda.is_available(),
                               reason="the CUDA checks run on a GPU machine: KFORGE_TEST_GPU=cuda with a CUDA "
                                      "device in torch")



def import_task(kforge, tmp_path, name):
    out = tmp_path / f"task_{name}"
    p = subprocess.run([kforge, "import", os.path.join(MODULES, f"{name}.py"), "--out", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return out / "task.kf", json.loads(read(out / f"{name}.json"))



def synth(kforge, tmp_path, task, replies, *args, tag="run"):
    """kforge synth TASK against the scripted model playing replies: (process, run.json or
    None, the requests the model got)"""
    script = tmp_path / f"{tag}.script.json"
    script.write_text(json.dumps({"responses": replies}))
    log = tmp_path / f"{tag}.log.jsonl"
    srv = subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "llm_server.py"), str(script), str(log)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out = tmp_path / tag
    try:
        port = int(srv.stdout.readline())
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path), KFORGE_CONFIG="")
        env.update(args[-1] if args and isinstance(args[-1], dict) else {})
        flags = [a for a in args if not isinstance(a, dict)]
        p = subprocess.run([kforge, "synth", str(task), "--llm-url", f"http://127.0.0.1:{port}/v1",
                            "--model", "scripted", "--iters", str(len(replies)), "--builtin-iters", "2",
                            "--memcheck", "off", "--no-store", "--seed", "5", "--out", str(out)] + flags,
                           capture_output=True, text=True, env=env)
    finally:
        srv.stdin.close()
        srv.wait()
    run = json.loads(read(out / "run.json")) if (out / "run.json").exists() else None
    reqs = [json.loads(line) for line in read(log).splitlines()] if log.exists() else []
    return p, run, reqs


def first_prompt(reqs):
    return reqs[0]["body"]["messages"][-1]["content"]


def opencl_device(kforge):
    p = subprocess.run([kforge, "devices", "--json"], capture_output=True, text=True)
    return p.returncode == 0 and any(d.get("platform") == "opencl" for d in json.loads(p.stdout or "[]"))


@pytest.fixture(scope="module")
def opencl(kforge):
    if not opencl_device(kforge):
        pytest.skip("no OpenCL device (`kforge devices` lists none: PoCL gives one on the CPU)")
    return "opencl"


def zeros_cl(spec):
    n = int(np.prod(spec["outputs"][0]["shape"]))
    k = len(spec["inputs"]) + len(spec["params"])
    args = ",".join(str(i) for i in range(k + 1))
    params = ", ".join(f"__global const float *a{i}" for i in range(k))
    return (f"// kforge:launch zero global=64 local=64 args={args}\n"
            f"__kernel void zero({params}, __global float *y) {{\n"
            f"    for (int i = get_global_id(0); i < {n}; i += 64) y[i] = 0.0f;\n}}\n")


def half_written(good, n):
    """the good kernel with its output's last half left unwritten (a store guarded by i < n/2)"""
    return good.replace("y[i] = v > 0.25f", f"if (i < {n // 2}) y[i] = v > 0.25f")


# ---- OpenCL (PoCL): runs on every machine ----

def test_opencl_module_task(kforge, tmp_path, opencl):
    """A module task no part of which lowers (branch_shrink: a data-dependent branch), its
    kernel written by the scripted model in the opencl contract: each wrong kernel rejected
    with its reason, then the right one verified against the module's float64 process."""
    task, spec = import_task(kforge, tmp_path, "branch_shrink")
    good = read(os.path.join(MODULES, "branch_shrink_kernel.cl"))
    half = half_written(good, 96)
    assert half != good
    clblast = "/* CLBlastSgemm would do this */\n" + good.replace("float s = 0.0f;", "float s = 0.0f; "
                                                                   "int CLBlastSgemm = 0; (void)CLBlastSgemm;")
    replies = [scripted_reply(zeros_cl(spec), "opencl"), scripted_reply(half, "opencl"), scripted_reply(clblast, "opencl"), scripted_reply(good, "opencl")]
    p, run, reqs = synth(kforge, tmp_path, task, replies, "--target", "opencl", "--agent", "llm")
    assert p.returncode == 0, p.stdout + p.stderr
    its = run["iterations"]
    assert [i["status"] for i in its] == ["mismatch", "unwritten", "forbidden-call", "ok"], its
    assert "CLBlast" in its[2]["detail"], its[2]
    assert run["best_iter"] == 4 and run["result"]["from"] == "llm"
    assert run["result"]["detail"].startswith("the model's kernel of iteration 4, verified against the module "
                                              "(its float64 reference)"), run["result"]
    assert run["reference"].startswith("cpu-f64: the module in float64 on the CPU"), run.get("reference")
    assert run["device"]["platform"] == "opencl", run["device"]
    assert os.path.isfile(tmp_path / "run" / "kernel.cl")
    # the prompt: the opencl contract and example, the module, its reference; not the CPU's
    ask = first_prompt(reqs)
    assert "The opencl contract" in ask and "```opencl\n" in ask and "__kernel void row_scale" in ask, ask[:3000]
    assert "int kforge_kernel(void *const *args)" not in ask
    assert "in the opencl contract\nabove" in ask or "in the opencl contract above" in ask, ask
    assert "class Model(nn.Module)" in ask and "run by PyTorch in float64 on the CPU" in ask
    # feedback of the wrong kernel reached the model, without the reference's values
    assert len(reqs) == 4
    fb = reqs[1]["body"]["messages"][-1]["content"]
    assert "mismatch" in fb.lower(), fb


def test_opencl_mixed_task(kforge, tmp_path, opencl):
    """A mixed task on opencl (--agent both): the builtin writes the part kforge lowers
    (conv2d + group norm) as an OpenCL kernel, verified against the interpreter, which the
    model gets in an opencl block; the model's whole-forward kernel verifies against the
    module."""
    task, _ = import_task(kforge, tmp_path, "conv_gn_shrink")
    good = read(os.path.join(MODULES, "conv_gn_shrink_kernel.cl"))
    p, run, reqs = synth(kforge, tmp_path, task, [scripted_reply(good, "opencl")], "--target", "opencl", "--agent", "both")
    assert p.returncode == 0, p.stdout + p.stderr
    assert [i["status"] for i in run["iterations"]] == ["ok"], run["iterations"]
    part = tmp_path / "run" / "part0" / "kernel.cl"
    assert part.is_file()
    ask = first_prompt(reqs)
    assert "Kernels for parts of this module's forward" in ask and "```opencl\n" in ask
    assert read(part).strip()[:200] in ask
    assert str(part) in run["result"]["detail"], run["result"]


# ---- the float32 GPU reference: what can be checked without a GPU ----

def test_cuda_f32_reference_refused_without_a_cuda_device(kforge, tmp_path):
    """--module-ref cuda-f32 where torch has no CUDA device: an error naming why, exit 2, the
    model never asked; never a silent float64-on-the-CPU run instead."""
    task, _ = import_task(kforge, tmp_path, "branch_shrink")
    env = {"CUDA_VISIBLE_DEVICES": ""}
    good = read(os.path.join(MODULES, "branch_shrink_kernel.c"))
    p, run, reqs = synth(kforge, tmp_path, task, [scripted_reply(good, "c")], "--agent", "llm", "--module-ref", "cuda-f32", env)
    said = p.stdout + p.stderr
    assert p.returncode == 2, said
    assert "needs a CUDA device in torch" in said and "torch.cuda.is_available() is False" in said, said
    assert "CUDA_VISIBLE_DEVICES=''" in said, said
    assert reqs == [] and (run is None or run.get("best_iter") is None), (reqs, run)
    # a mixed task: its part (a graph task, the interpreter its reference) still verifies
    mtask, _ = import_task(kforge, tmp_path, "conv_gn_shrink")
    p, run, reqs = synth(kforge, tmp_path, mtask, [scripted_reply(good, "c")], "--agent", "both", "--module-ref", "cuda-f32",
                         env, tag="mixed")
    assert p.returncode == 2 and "needs a CUDA device in torch" in p.stderr, p.stdout + p.stderr
    assert "part 0: verified" in p.stdout and (tmp_path / "mixed" / "part0" / "kernel.c").is_file(), p.stdout
    assert reqs == []
    # kforge verify says the same
    kpath = tmp_path / "k.c"
    kpath.write_text(good)
    v = subprocess.run([kforge, "verify", str(task), str(kpath), "--module-ref", "cuda-f32"], capture_output=True,
                       text=True, env=dict(os.environ, **env))
    assert v.returncode == 2 and "needs a CUDA device in torch" in v.stderr, v.stdout + v.stderr
    # an unknown kind and a graph task are refused too
    u = subprocess.run([kforge, "verify", str(task), str(kpath), "--module-ref", "cuda-f16"], capture_output=True,
                       text=True)
    assert u.returncode == 2 and "--module-ref takes cpu-f64, cuda-f64 or cuda-f32" in u.stderr, u.stderr
    gtask = os.path.join(REPO, "tasks", "swish.kf")
    g = subprocess.run([kforge, "synth", gtask, "--module-ref", "cuda-f32", "--no-store", "--out",
                        str(tmp_path / "g")], capture_output=True, text=True)
    assert g.returncode == 2 and "applies to module tasks only" in g.stderr, g.stdout + g.stderr


def test_cuda_f32_device_turns_reduced_precision_off(monkeypatch):
    """The reference process's CUDA setup: TF32 off in cuBLAS and in cuDNN's convolutions and
    RNNs (through torch's new per-backend settings where it has them, else the legacy flags),
    cuDNN deterministic (checked on the settings: no device needed)."""
    from kforge_torch import reference
    b = torch.backends
    new = reference.new_precision_api()
    leaves = [b.cuda.matmul, b.cudnn.conv, b.cudnn.rnn] if new else []
    saved = ([x.fp32_precision for x in leaves] if new else
             [b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32, torch.get_float32_matmul_precision()],
             b.cudnn.deterministic, b.cudnn.benchmark)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    try:
        if new:
            for x in leaves:
                x.fp32_precision = "tf32"
        else:
            b.cuda.matmul.allow_tf32 = b.cudnn.allow_tf32 = True
            torch.set_float32_matmul_precision("medium")
        b.cudnn.deterministic, b.cudnn.benchmark = False, True
        dev = reference.cuda_f32_device()
        assert dev.type == "cuda"
        if new:
            assert [x.fp32_precision for x in leaves] == ["ieee"] * 3
        else:
            assert not b.cuda.matmul.allow_tf32 and not b.cudnn.allow_tf32
            assert torch.get_float32_matmul_precision() == "highest"
        assert b.cudnn.deterministic and not b.cudnn.benchmark
    finally:
        if new:
            for x, v in zip(leaves, saved[0]):
                x.fp32_precision = v
        else:
            b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = saved[0][:2]
            torch.set_float32_matmul_precision(saved[0][2])
        b.cudnn.deterministic, b.cudnn.benchmark = saved[1:]


# The cuda-f32 path of the reference process with the CPU as its device: this test's own
# interpreter wrapper (KFORGE_PYTHON), so that the float32 reference's comparison can be
# checked on any machine. It logs the arguments kforge passed (the KIND among them).
FAKE_DEVICE = r'''#!/usr/bin/env python3
import json, os, sys
import torch
from kforge_torch import reference
assert sys.argv[1:3] == ["-m", "kforge_torch.reference"], sys.argv
with open(os.environ["KF_TEST_ARGV_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[3:]) + "\n")
reference.cuda_f32_device = lambda: torch.device("cpu")
reference.torch.cuda.synchronize = lambda dev=None: None
sys.exit(reference.main(sys.argv[3:]))
'''


def scaled_kernel(good, spec, factor):
    """the good CPU kernel, its output then multiplied by factor (a relative error of
    factor - 1 on every element)"""
    k = len(spec["inputs"]) + len(spec["params"])
    n = int(np.prod(spec["outputs"][0]["shape"]))
    return (f"#define kforge_kernel kf_good_kernel\n{good}\n#undef kforge_kernel\n"
            f"int kforge_kernel(void *const *args) {{\n    int rc = kf_good_kernel(args);\n"
            f"    float *y = args[{k}];\n    for (int i = 0; i < {n}; i++) y[i] *= {factor!r}f;\n    return rc;\n}}\n")


@pytest.mark.parametrize("name", ["branch_shrink", "conv_gn_shrink", "lstm_cell"])
def test_f32_reference_tolerance_doubled(kforge, tmp_path, name):
    """A float32 reference is allowed twice the tolerance (NMSE four times), no more: a
    kernel off by 1.5e-4 relative on every element (NMSE 2.25e-8: above float64's 1e-8,
    within 4e-8) fails against the float64 reference and passes against the float32 one; one
    off by 5e-4 fails against both. lstm_cell's forward makes tensors of its own (torch.zeros
    on the default device), as the cuda path must put on the GPU."""
    task, spec = import_task(kforge, tmp_path, name)
    wrapper = tmp_path / "fake_cuda_python"
    wrapper.write_text(FAKE_DEVICE)
    wrapper.chmod(0o755)
    argv_log = tmp_path / "argv.jsonl"
    env = dict(os.environ, KFORGE_PYTHON=str(wrapper), KF_TEST_ARGV_LOG=str(argv_log))
    good = read(os.path.join(MODULES, f"{name}_kernel.c"))
    want = {1.0: ("ok", "ok"), 1.00015: ("mismatch", "ok"), 1.0005: ("mismatch", "mismatch")}
    for factor, (f64, f32) in want.items():
        kpath = tmp_path / f"k{factor}.c"
        kpath.write_text(good if factor == 1.0 else scaled_kernel(good, spec, factor))
        for kind, status in (("cpu-f64", f64), ("cuda-f32", f32)):
            v = subprocess.run([kforge, "verify", str(task), str(kpath), "--module-ref", kind, "--seed", "3",
                                "--json"], capture_output=True, text=True, env=env)
            assert v.returncode in (0, 1), v.stdout + v.stderr
            r = json.loads(v.stdout)
            assert r["status"] == status, (factor, kind, r["status"], r["detail"])
            assert r["reference"].startswith(kind + ":"), r["reference"]
            if kind == "cuda-f32" and status == "mismatch":
                assert "a float32 reference, --module-ref cuda-f32" in r["detail"], r["detail"]
    kinds = [json.loads(line)[-1] for line in read(argv_log).splitlines()]
    assert kinds == ["cpu-f64", "cuda-f32"] * 3, kinds


# ---- on a GPU machine: KFORGE_TEST_GPU=cuda ----

KEEP_SETS = r'''#!/usr/bin/env python3
import os, shutil, sys
from kforge_torch import reference
rc = reference.main(sys.argv[3:])
keep = os.path.join(os.environ["KF_TEST_KEEP"], str(len(os.listdir(os.environ["KF_TEST_KEEP"]))))
shutil.copytree(sys.argv[4], keep)
with open(os.path.join(keep, "argv"), "w") as f:
    f.write("\n".join(sys.argv[3:]))
sys.exit(rc)
'''


def verify_keeping_sets(kforge, tmp_path, name, kind):
    """`kforge verify` of the sample module `name`'s kernel against its reference of `kind`
    (--seed 11), the reference process's input sets kept by the KEEP_SETS wrapper: returns
    (task, spec, last), last mapping each set to the last call that computed it, as
    (call, spec_path, seed) (a set whose float32 forward overflowed is drawn again: the last
    draw is the one kept)."""
    task, spec = import_task(kforge, tmp_path, name)
    wrapper = tmp_path / "keep_python"
    wrapper.write_text(KEEP_SETS)
    wrapper.chmod(0o755)
    keep = tmp_path / "keep"
    keep.mkdir()
    kpath = tmp_path / "k.c"
    kpath.write_text(read(os.path.join(MODULES, f"{name}_kernel.c")))
    v = subprocess.run([kforge, "verify", str(task), str(kpath), "--module-ref", kind, "--seed", "11", "--json"],
                       capture_output=True, text=True, env=dict(os.environ, KFORGE_PYTHON=str(wrapper),
                                                                  KF_TEST_KEEP=str(keep)))
    assert v.returncode == 0 and json.loads(v.stdout)["status"] == "ok", v.stdout + v.stderr
    last = {}
    for call in sorted(os.listdir(keep), key=int):
        spec_path, _, sets, seed, k = read(keep / call / "argv").split("\n")
        assert k == kind
        for s in sets.split(","):
            last[s] = (call, spec_path, seed)
    return task, spec, last


@need_cuda
@pytest.mark.parametrize("name", ["branch_shrink", "conv_gn_shrink", "lstm_cell"])
def test_cuda_f32_reference_within_float32_tolerance_of_float64(kforge, tmp_path, name):
    """The assumption behind the doubled tolerance: on the verifier's own input sets (every
    distribution, its params per set), the module in float32 on the GPU (TF32 off) is itself
    within the float32 tolerance of the module in float64 on the CPU (atol 1e-4 * max(1, rms)
    + rtol 1e-4 * |want| per element, NMSE 1e-8)."""
    task, spec, last = verify_keeping_sets(kforge, tmp_path, name, "cuda-f32")
    keep = tmp_path / "keep"  # the sets verify_keeping_sets kept
    assert sorted(last) == [str(s) for s in range(6)], last
    for s, (call, spec_path, seed) in sorted(last.items()):
        d, d64 = keep / call, tmp_path / f"f64_{s}"
        d64.mkdir()
        shutil.copy(d / f"in.{s}", d64 / f"in.{s}")
        p = subprocess.run([sys.executable, "-m", "kforge_torch.reference", spec_path, str(d64), s, seed, "cpu-f64"],
                           capture_output=True, text=True, cwd=os.path.join(REPO, "python"))
        assert p.returncode == 0, p.stderr
        if s != "0":
            assert read_bytes(d / f"w.{s}") == read_bytes(d64 / f"w.{s}"), "the params differ between kinds"
        r32 = np.fromfile(d / f"out.{s}", dtype=np.float64)
        r64 = np.fromfile(d64 / f"out.{s}", dtype=np.float64)
        fin = np.isfinite(r64)
        assert np.array_equal(fin, np.isfinite(r32)), f"set {s}: non-finite elements differ"
        a, b = r32[fin], r64[fin]
        scale = max(1.0, float(np.sqrt(np.mean(b * b)))) if b.size else 1.0
        excess = np.abs(a - b) - (1e-4 * scale + 1e-4 * np.abs(b))
        nmse = float(np.sum((a - b) ** 2) / max(np.sum(b * b), 1e-300))
        print(f"{name} set {s}: max |r32 - r64| {np.abs(a - b).max(initial=0):.3g}, NMSE {nmse:.3g}")
        assert excess.max(initial=-1) <= 0, f"set {s}: float32 reference off by {excess.max():.3g} beyond tol"
        assert nmse <= 1e-8, f"set {s}: float32 reference's NMSE {nmse:.3g} against float64"


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def zeros_cu(spec):
    n = int(np.prod(spec["outputs"][0]["shape"]))
    k = len(spec["inputs"]) + len(spec["params"])
    args = ",".join(str(i) for i in range(k + 1))
    params = ", ".join(f"const float *a{i}" for i in range(k))
    return (f"// kforge:launch zero global=64 local=64 args={args}\n"
            f"extern \"C\" __global__ void zero({params}, float *y) {{\n"
            f"    for (int i = threadIdx.x; i < {n}; i += 64) y[i] = 0.0f;\n}}\n")


@need_cuda
@pytest.mark.parametrize("kind", ["cpu-f64", "cuda-f32"])
def test_cuda_module_task(kforge, tmp_path, kind):
    """A module task on --target cuda: the prompt carries the cuda contract and example, the
    model's wrong kernel is a mismatch and its right one verifies on the GPU against the
    module (float64 on the CPU, or float32 on the GPU), the record saying which."""
    task, spec = import_task(kforge, tmp_path, "branch_shrink")
    good = read(os.path.join(MODULES, "branch_shrink_kernel.cu"))
    p, run, reqs = synth(kforge, tmp_path, task, [scripted_reply(zeros_cu(spec), "cuda"), scripted_reply(good, "cuda")],
                         "--target", "cuda", "--agent", "llm", "--module-ref", kind)
    assert p.returncode == 0, p.stdout + p.stderr
    assert [i["status"] for i in run["iterations"]] == ["mismatch", "ok"], run["iterations"]
    assert run["device"]["platform"] == "cuda"
    assert run["reference"].startswith(kind + ":"), run["reference"]
    assert ("float32 reference on the GPU" in run["result"]["detail"]) == (kind == "cuda-f32"), run["result"]
    assert os.path.isfile(tmp_path / "run" / "kernel.cu")
    ask = first_prompt(reqs)
    assert "The cuda contract" in ask and "```cuda\n" in ask and "extern \"C\" __global__ void __launch_bounds__" in ask
    assert "in the cuda contract" in ask and "int kforge_kernel(void *const *args)" not in ask
    assert ("float32 on a GPU" in ask) == (kind == "cuda-f32"), ask


@need_cuda
def test_cuda_mixed_task(kforge, tmp_path):
    """A mixed task on --target cuda with the float32 GPU reference: the builtin's CUDA kernel
    of the part (verified against the interpreter: a part is a graph task) goes to the model;
    the model's kernel verifies against the module."""
    task, _ = import_task(kforge, tmp_path, "conv_gn_shrink")
    good = read(os.path.join(MODULES, "conv_gn_shrink_kernel.cu"))
    p, run, reqs = synth(kforge, tmp_path, task, [scripted_reply(good, "cuda")], "--target", "cuda", "--agent", "both",
                         "--module-ref", "cuda-f32")
    assert p.returncode == 0, p.stdout + p.stderr
    assert [i["status"] for i in run["iterations"]] == ["ok"], run["iterations"]
    assert (tmp_path / "run" / "part0" / "kernel.cu").is_file()
    assert "Kernels for parts of this module's forward" in first_prompt(reqs)
