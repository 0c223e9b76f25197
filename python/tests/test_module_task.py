"""Module tasks (issue 26): `kforge import` of a module with an op kforge cannot lower writes
a module task (task.kf with `module`, the module's source, spec and weights beside it), and
the reference process computes the module's outputs in float64 from the files the
verifier writes."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import REPO, write
from kforge_torch import module_task, reference

MODULES = os.path.join(REPO, "tests", "modules")


def read(path):
    with open(path) as f:
        return f.read()


def test_kforge_import_writes_a_module_task_where_an_op_does_not_lower(kforge, tmp_path):
    out = tmp_path / "cgm"
    p = subprocess.run([kforge, "import", os.path.join(MODULES, "conv_gn_shrink.py"), "--out", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "aten.softshrink" in p.stderr and "writing a module task" in p.stderr
    assert "--agent llm" in p.stdout
    kf = read(out / "task.kf")
    assert "module conv_gn_shrink\n" in kf
    assert "input x: f32[2, 3, 10, 10]\n" in kf  # randn: no range, every distribution
    assert "param p_conv_weight: f32[8, 3, 3, 3]   # conv.weight" in kf
    assert "output out: f32[2, 8, 8, 8]" in kf
    # conv FLOPs as FlopCounterMode counts them: 2 * N*CO*OH*OW * CI*K*K
    assert f"cost flops={2 * 2 * 8 * 8 * 8 * 27} " in kf
    spec = json.loads(read(out / "conv_gn_shrink.json"))
    assert spec["init"] == [3, 8, 3, 4]
    assert [p["key"] for p in spec["params"]] == ["conv.weight", "conv.bias", "gn.weight", "gn.bias"]
    assert os.path.getsize(out / "conv_gn_shrink.weights") == 4 * (8 * 27 + 8 + 8 + 8)
    assert read(out / "conv_gn_shrink.py") == read(os.path.join(MODULES, "conv_gn_shrink.py"))
    # the weights are the module's own, under the seed
    torch.manual_seed(0)
    sys.path.insert(0, MODULES)
    try:
        import conv_gn_shrink as m
    finally:
        sys.path.pop(0)
    model = m.Model(*m.get_init_inputs())
    w = np.fromfile(out / "conv_gn_shrink.weights", dtype=np.float32)
    assert np.array_equal(w[:216], model.conv.weight.detach().numpy().ravel())


def test_domains_come_from_get_inputs(tmp_path):
    spec = module_task.write_module_task(os.path.join(MODULES, "lstm_cell.py"), str(tmp_path), name="lstm")
    kf = read(tmp_path / "task.kf")
    assert "input x: f32[4, 5, 8] range(0, 1)\n" in kf  # torch.rand
    assert spec["outputs"] == [{"name": "out", "dtype": "f32", "shape": [4, 4]}]
    model = write(tmp_path / "idx.py", """
import torch
class Model(torch.nn.Module):
    def forward(self, x, i):
        return torch.sort(x, dim=1).values + i.float().unsqueeze(1)
def get_inputs():
    return [torch.rand(4, 6) + 1.5, torch.randint(0, 10, (4,))]
def get_init_inputs():
    return []
""")
    module_task.write_module_task(model, str(tmp_path / "idx"), name="idx")
    kf = read(tmp_path / "idx" / "task.kf")
    assert "input x: f32[4, 6] range(1.5" in kf  # positive: its span
    assert "input i: i64[4] range(" in kf


def test_live_randomness_is_refused(tmp_path):
    """a random op that is not recorded (bernoulli; a live F.dropout's mask is recorded:
    test_module_dropout.py)"""
    model = write(tmp_path / "drop.py", """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.sort(x * torch.bernoulli(torch.full_like(x, 0.5))).values
def get_inputs():
    return [torch.randn(8, 8)]
def get_init_inputs():
    return []
""")
    with pytest.raises(module_task.ImportFailure, match="other outputs on the same inputs"):
        module_task.write_module_task(model, str(tmp_path / "d"))


def test_reference_process_computes_the_module_in_float64(tmp_path):
    spec = module_task.write_module_task(os.path.join(MODULES, "conv_gn_shrink.py"), str(tmp_path), name="cgm")
    x = torch.randn(2, 3, 10, 10) * 3
    (tmp_path / "in.4").write_bytes(x.numpy().tobytes())
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    p = subprocess.run([sys.executable, "-m", "kforge_torch.reference", str(tmp_path / "cgm.json"), str(tmp_path),
                        "4"], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    got = np.fromfile(tmp_path / "out.4", dtype=np.float64).reshape(spec["outputs"][0]["shape"])
    torch.manual_seed(0)
    sys.path.insert(0, MODULES)
    try:
        import conv_gn_shrink as m
    finally:
        sys.path.pop(0)
    model = m.Model(*m.get_init_inputs()).double()
    with torch.no_grad():
        want = model(x.double()).numpy()
    assert np.array_equal(got, want)
    assert not (tmp_path / "of.4").exists()


def test_float32_overflow_is_marked(tmp_path):
    model = write(tmp_path / "ex.py", """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.sort(torch.exp(x) * 1e-30, dim=1).values
def get_inputs():
    return [torch.randn(2, 4)]
def get_init_inputs():
    return []
""")
    module_task.write_module_task(model, str(tmp_path), name="ex")
    (tmp_path / "in.5").write_bytes((torch.ones(2, 4) * 100).numpy().tobytes())  # e^100 > FLT_MAX
    (tmp_path / "in.0").write_bytes(torch.ones(2, 4).numpy().tobytes())
    assert reference.main([str(tmp_path / "ex.json"), str(tmp_path), "0,5"]) == 0
    assert (tmp_path / "of.5").exists() and not (tmp_path / "of.0").exists()


def scripted_server(tmp_path, kernel):
    """tests/llm_server.py answering every request with kernel; (process, port)."""
    reply = {"body": {"choices": [{"message": {"role": "assistant", "content": f"```c\n{kernel}```\n"},
                                   "finish_reason": "stop"}], "usage": {"prompt_tokens": 10, "completion_tokens": 10}}}
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": [reply] * 3}))
    p = subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "llm_server.py"), str(script),
                          str(tmp_path / "log.jsonl")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return p, int(p.stdout.readline())


def test_bench_runs_a_module_task(kforge, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conv_gn_shrink.py").write_text(read(os.path.join(MODULES, "conv_gn_shrink.py")))
    base = [kforge, "bench", str(suite), "--iters", "1", "--no-compile", "--reps", "5"]
    # the builtin: the row says what to do
    p = subprocess.run(base + ["--out", str(tmp_path / "b1"), "--json", str(tmp_path / "b1.json")],
                       capture_output=True, text=True)
    row = json.loads(read(tmp_path / "b1.json"))["rows"][0]
    assert row["status"] == "unsupported" and "module task: use --agent llm" in row["detail"], row
    assert "aten.softshrink" in row["detail"] and p.returncode == 0, (row, p.stderr)
    # a model: the kernel is checked against the module and timed against it
    srv, port = scripted_server(tmp_path, read(os.path.join(MODULES, "conv_gn_shrink_kernel.c")))
    try:
        p = subprocess.run(base + ["--agent", "llm", "--llm-url", f"http://127.0.0.1:{port}/v1", "--model", "scripted",
                                   "--out", str(tmp_path / "b2"), "--json", str(tmp_path / "b2.json")],
                           capture_output=True, text=True)
    finally:
        srv.stdin.close()
        srv.wait()
    assert p.returncode == 0, p.stderr
    row = json.loads(read(tmp_path / "b2.json"))["rows"][0]
    assert row["status"] == "ok" and row["correct"] and row["module_task"], row
    assert row["max_abs_err"] < 1e-4


def module_run(tmp_path, name, kernel, args):
    """a run directory of module task NAME (in tmp_path) with kernel as its best kernel"""
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "kernel.c").write_text(kernel)
    cc = "cc -O2 -fopenmp -fPIC -shared -o kernel.so kernel.c -lm"
    (run / "manifest.json").write_text(json.dumps({"platform": "cpu", "task": name, "entry": "kforge_kernel",
                                                   "compile": cc, "source": "kernel.c", "args": args}))
    return run


def export_run(kforge, run, tmp_path, out="e.py"):
    return subprocess.run([kforge, "export", str(run), "--as", "torch", "--task", str(tmp_path / "task.kf"),
                           "--out", str(tmp_path / out)], capture_output=True, text=True)


def check_export(kforge, path, *more):
    return subprocess.run([kforge, "export", "--check", str(path), *more], capture_output=True, text=True)


CGM_ARGS = ["in x: f32[2, 3, 10, 10]", "in p_conv_weight: f32[8, 3, 3, 3]", "in p_conv_bias: f32[8]",
            "in p_gn_weight: f32[8]", "in p_gn_bias: f32[8]", "out out: f32[2, 8, 8, 8]"]


def test_export_of_a_module_task_run_matches_the_module(kforge, tmp_path):
    """the kernel as a custom op in ModelNew(Model): the module's own class (the copy beside
    the task), its params read off the module at call time in the task's order; --check
    matches Model under other seeds (other weights: nothing is baked in), eager and
    torch.compile; a wrong kernel's export is a mismatch"""
    module_task.write_module_task(os.path.join(MODULES, "conv_gn_shrink.py"), str(tmp_path), name="cgm")
    good = read(os.path.join(MODULES, "conv_gn_shrink_kernel.c"))
    p = export_run(kforge, module_run(tmp_path, "cgm", good, CGM_ARGS), tmp_path)
    assert p.returncode == 0 and "class ModelNew" in p.stdout, p.stdout + p.stderr
    text = read(tmp_path / "e.py")
    assert "PARAMS = [('conv.weight', 'f32'), ('conv.bias', 'f32'), ('gn.weight', 'f32'), ('gn.bias', 'f32')]" in text
    assert str(tmp_path / "cgm.py") in text
    c = check_export(kforge, tmp_path / "e.py")
    assert c.returncode == 0 and "check: ok" in c.stdout and "torch.compile(ModelNew)" in c.stdout, c.stdout + c.stderr
    c = check_export(kforge, tmp_path / "e.py", "--seed", "7", "--no-compile")
    assert c.returncode == 0 and "check: ok" in c.stdout, c.stdout + c.stderr
    # the group norm without the softshrink: caught by the check
    bad = good.replace("p[e] = (float)(v > 0.5 ? v - 0.5 : v < -0.5 ? v + 0.5 : 0.0);", "p[e] = (float)v;")
    assert bad != good
    p = export_run(kforge, module_run(tmp_path, "cgm", bad, CGM_ARGS), tmp_path, "bad.py")
    assert p.returncode == 0, p.stderr
    c = check_export(kforge, tmp_path / "bad.py", "--no-compile")
    assert c.returncode == 1 and "MISMATCH" in c.stdout, c.stdout + c.stderr
    # a run whose kernel is not this task's (the params in another order): refused, named
    swapped = CGM_ARGS[:1] + [CGM_ARGS[2], CGM_ARGS[1]] + CGM_ARGS[3:]
    p = export_run(kforge, module_run(tmp_path, "cgm", good, swapped), tmp_path, "sw.py")
    assert p.returncode == 2 and "are not module task cgm's" in p.stderr, p.stdout + p.stderr


def test_export_of_a_packed_module_task_run(kforge, tmp_path):
    """80 params packed into p_weights: ModelNew packs the module's tensors the same way"""
    module_task.write_module_task(write(tmp_path / "deep.py", DEEP), str(tmp_path), name="deep")
    run = module_run(tmp_path, "deep", DEEP_KERNEL, ["in x: f32[2, 4]", "in p_weights: f32[800]",
                                                     "out out: f32[2, 4]"])
    p = export_run(kforge, run, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    c = check_export(kforge, tmp_path / "e.py", "--seed", "3", "--no-compile")
    assert c.returncode == 0 and "check: ok" in c.stdout, c.stdout + c.stderr


def test_export_refuses_a_module_that_draws_in_forward(kforge, tmp_path):
    """the kernel takes forward's random draws as recorded at import: no ModelNew matches it"""
    module_task.write_module_task(write(tmp_path / "gru.py", RANDOM_STATE), str(tmp_path), name="gru")
    spec = json.loads(read(tmp_path / "gru.json"))
    args = [f"in {x['name']}: f32{x['shape']}" for x in spec["inputs"]]
    args += [f"in {q['name']}: f32{q['shape']}" for q in spec["params"]]
    args += [f"out {o['name']}: f32{o['shape']}" for o in spec["outputs"]]
    p = export_run(kforge, module_run(tmp_path, "gru", "int kforge_kernel(void *const *a) { return 0; }\n", args),
                   tmp_path)
    assert p.returncode == 2 and "draws random tensors (p_draw0)" in p.stderr, p.stdout + p.stderr


STATEFUL = """
import torch
class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = torch.nn.Linear(2 * n, n)
        self.hidden = torch.randn(3, n)          # a plain attribute: in no state_dict
    def forward(self, x):
        self.hidden = torch.tanh(self.lin(torch.cat((x, self.hidden), dim=1)))
        return torch.sort(self.hidden, dim=1).values
def get_inputs():
    return [torch.randn(3, 4)]
def get_init_inputs():
    return [4]
"""


def test_state_kept_between_calls_is_taken_at_the_first_call(tmp_path):
    """KernelBench 33/34 (vanilla RNNs) hold their hidden state as a plain tensor attribute
    and overwrite it in forward: the attribute is a param of the task (the kernel gets its
    value), and the reference runs a fresh copy of the module on every set"""
    model = write(tmp_path / "rnn.py", STATEFUL)
    spec = module_task.write_module_task(model, str(tmp_path), name="rnn")
    assert [(p["key"], p["attr"]) for p in spec["params"]] == [("lin.weight", False), ("lin.bias", False),
                                                                ("hidden", True)]
    assert "param p_hidden: f32[3, 4]   # hidden (a tensor attribute" in read(tmp_path / "task.kf")
    x = torch.randn(3, 4)
    for s in (0, 1):
        (tmp_path / f"in.{s}").write_bytes(x.numpy().tobytes())
    assert reference.main([str(tmp_path / "rnn.json"), str(tmp_path), "0,1"]) == 0
    out0, out1 = (np.fromfile(tmp_path / f"out.{s}", dtype=np.float64) for s in (0, 1))
    assert np.array_equal(out0, out1)  # the second set did not see the first one's state
    torch.manual_seed(0)
    ns = {}
    exec(STATEFUL, ns)
    m = ns["Model"](4).double()
    m.hidden = m.hidden.double()
    with torch.no_grad():
        want = m(x.double()).numpy().ravel()
    assert np.allclose(out0, want, rtol=0, atol=1e-15)


RANDOM_STATE = """
import torch
class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.cell = torch.nn.GRUCell(n, n)
    def forward(self, x):
        h = torch.randn(x.shape[0], x.shape[2])      # a random initial state, as KernelBench's LSTMs
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
        return h
def get_inputs():
    return [torch.randn(2, 3, 4)]
def get_init_inputs():
    return [4]
"""


def test_random_tensors_drawn_in_forward_are_fixed_params(tmp_path):
    """KernelBench 35-42 draw h0 (and c0) with torch.randn inside forward: recorded at
    import, a param of the task, replayed by the reference on every set"""
    model = write(tmp_path / "gru.py", RANDOM_STATE)
    spec = module_task.write_module_task(model, str(tmp_path), name="gru")
    draw = spec["params"][-1]
    assert draw["draw"] and draw["shape"] == [2, 4] and draw["name"] == "p_draw0", spec["params"]
    assert "param p_draw0: f32[2, 4]   # draw0 (a random tensor forward draws" in read(tmp_path / "task.kf")
    x = torch.randn(2, 3, 4)
    for s in (0, 1):
        (tmp_path / f"in.{s}").write_bytes(x.numpy().tobytes())
    assert reference.main([str(tmp_path / "gru.json"), str(tmp_path), "0,1"]) == 0
    out0, out1 = (np.fromfile(tmp_path / f"out.{s}", dtype=np.float64) for s in (0, 1))
    assert np.array_equal(out0, out1)
    # the module on the recorded draw, in float64
    blob = (tmp_path / "gru.weights").read_bytes()
    h0 = reference.draws_of(spec, blob)[0].double()
    torch.manual_seed(0)
    ns = {}
    exec(RANDOM_STATE, ns)
    m = ns["Model"](4)
    reference.load_state(m, spec, blob)
    m = m.double()
    with torch.no_grad():
        h = h0
        for t in range(3):
            h = m.cell(x[:, t].double(), h)
    assert np.allclose(out0, h.numpy().ravel(), rtol=0, atol=1e-14)


DEEP = """
import torch
import torch.nn.functional as F
class Model(torch.nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(depth)])
    def forward(self, x):
        return F.softshrink(self.layers(x), 0.5)
def get_inputs():
    return [torch.randn(2, 4)]
def get_init_inputs():
    return [40]
"""

DEEP_KERNEL = r'''
#include <math.h>
int kforge_kernel(void *const *args) {
    const float *x = args[0], *w = args[1];
    float *y = args[2];
    for (int r = 0; r < 2; r++) {
        double v[4], t[4];
        for (int i = 0; i < 4; i++) v[i] = x[r * 4 + i];
        for (int l = 0; l < 40; l++) {
            const float *W = w + l * 20, *b = W + 16;
            for (int o = 0; o < 4; o++) {
                double s = b[o];
                for (int i = 0; i < 4; i++) s += (double)W[o * 4 + i] * v[i];
                t[o] = (float)s;
            }
            for (int o = 0; o < 4; o++) v[o] = t[o];
        }
        for (int o = 0; o < 4; o++) y[r * 4 + o] = (float)(v[o] > 0.5 ? v[o] - 0.5 : v[o] < -0.5 ? v[o] + 0.5 : 0.0);
    }
    return 0;
}
'''


def test_many_params_are_packed_into_one_argument(kforge, tmp_path):
    """a kernel takes at most 64 buffers: 80 params (40 linear layers) become p_weights, its
    layout in the task, and a kernel reading it verifies against the module"""
    model = write(tmp_path / "deep.py", DEEP)
    module_task.write_module_task(model, str(tmp_path), name="deep")
    kf = read(tmp_path / "task.kf")
    assert "param p_weights: f32[800]   # every f32 parameter and buffer, packed" in kf, kf
    assert "#   p_weights[0:16] = layers.0.weight [4, 4]" in kf and "#   p_weights[16:20] = layers.0.bias [4]" in kf
    assert "param p_layers" not in kf
    kern = write(tmp_path / "k.c", DEEP_KERNEL)
    p = subprocess.run([kforge, "verify", str(tmp_path / "task.kf"), kern], capture_output=True, text=True)
    assert p.returncode == 0 and "ok (6 input sets)" in p.stdout, p.stdout + p.stderr
    wrong = write(tmp_path / "w.c", DEEP_KERNEL.replace("l * 20", "l * 20 + (l == 39)"))
    p = subprocess.run([kforge, "verify", str(tmp_path / "task.kf"), wrong], capture_output=True, text=True)
    assert p.returncode == 1 and "mismatch" in p.stdout, p.stdout + p.stderr


CLOSURE = """
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        m = self.fc
        self.f = lambda x: m(x)          # a closure over its own submodule (KernelBench 44)
    def forward(self, x):
        return torch.sort(self.f(x), dim=1).values
def get_inputs():
    return [torch.randn(3, 4)]
def get_init_inputs():
    return []
"""


def test_forward_closing_over_its_submodules_runs_in_float64(tmp_path):
    """a deep copy would keep calling the original's float32 Linear from the float64 copy"""
    model = write(tmp_path / "clo.py", CLOSURE)
    module_task.write_module_task(model, str(tmp_path), name="clo")
    (tmp_path / "in.0").write_bytes(torch.randn(3, 4).numpy().tobytes())
    assert reference.main([str(tmp_path / "clo.json"), str(tmp_path), "0"]) == 0
    assert (tmp_path / "out.0").stat().st_size == 12 * 8


GRU_KERNEL = r'''
#include <math.h>
/* x [2, 3, 4]; cell.weight_ih [12, 4], weight_hh [12, 4], bias_ih [12], bias_hh [12];
 * p_draw0 [2, 4] (h0); out [2, 4] */
int kforge_kernel(void *const *args) {
    const float *x = args[0], *wih = args[1], *whh = args[2], *bih = args[3], *bhh = args[4], *h0 = args[5];
    float *y = args[6];
    for (int b = 0; b < 2; b++) {
        double h[4];
        for (int j = 0; j < 4; j++) h[j] = h0[b * 4 + j];
        for (int t = 0; t < 3; t++) {
            double gi[12], gh[12], hn[4];
            for (int r = 0; r < 12; r++) {
                gi[r] = bih[r];
                gh[r] = bhh[r];
                for (int k = 0; k < 4; k++) {
                    gi[r] += (double)wih[r * 4 + k] * x[(b * 3 + t) * 4 + k];
                    gh[r] += (double)whh[r * 4 + k] * h[k];
                }
            }
            for (int j = 0; j < 4; j++) {
                double rg = 1 / (1 + exp(-(gi[j] + gh[j]))), zg = 1 / (1 + exp(-(gi[4 + j] + gh[4 + j])));
                double ng = tanh(gi[8 + j] + rg * gh[8 + j]);
                hn[j] = (1 - zg) * ng + zg * h[j];
            }
            for (int j = 0; j < 4; j++) h[j] = hn[j];
        }
        for (int j = 0; j < 4; j++) y[b * 4 + j] = (float)h[j];
    }
    return 0;
}
'''


def test_bench_replays_the_draws_on_both_sides(kforge, tmp_path):
    """a module drawing its initial state in forward: the kernel gets the task's draw as
    p_draw0 (verified by kforge synth against the reference's replay), and the bench's eager
    side replays the same draw, so the two agree"""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "gru.py").write_text(RANDOM_STATE)
    srv, port = scripted_server(tmp_path, GRU_KERNEL)
    try:
        p = subprocess.run([kforge, "bench", str(suite), "--iters", "1", "--reps", "5", "--agent", "llm",
                            "--llm-url", f"http://127.0.0.1:{port}/v1", "--model", "scripted",
                            "--out", str(tmp_path / "b"), "--json", str(tmp_path / "b.json")],
                           capture_output=True, text=True)
    finally:
        srv.stdin.close()
        srv.wait()
    assert p.returncode == 0, p.stderr
    row = json.loads(read(tmp_path / "b.json"))["rows"][0]
    assert row["status"] == "ok" and row["correct"] and row["max_abs_err"] < 1e-5, row
    assert "compile_skipped" in row and "compile_ms" not in row, row


NORMS = """
import torch
import torch.nn.functional as F
class Model(torch.nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.norms = torch.nn.Sequential(*[torch.nn.BatchNorm1d(4) for _ in range(depth)])
    def forward(self, x):
        return F.softshrink(self.norms(x), 0.5)
def get_inputs():
    return [torch.randn(8, 4)]
def get_init_inputs():
    return [20]
"""


def test_packed_params_one_argument_per_dtype(kforge, tmp_path):
    """20 BatchNorms: 100 buffers, 20 of them i64 batch counters: p_weights and p_weights_i64,
    and the task parses and runs its reference (a kernel writing zeros is a mismatch)"""
    module_task.write_module_task(write(tmp_path / "norms.py", NORMS), str(tmp_path), name="norms")
    kf = read(tmp_path / "task.kf")
    assert "param p_weights: f32[320]" in kf and "param p_weights_i64: i64[20]" in kf, kf
    assert "#   p_weights_i64[19:20] = norms.19.num_batches_tracked []" in kf, kf
    zeros = write(tmp_path / "z.c", "int kforge_kernel(void *const *a) { float *y = a[3];\n"
                                    "    for (int i = 0; i < 32; i++) y[i] = 0; return 0; }\n")
    p = subprocess.run([kforge, "verify", str(tmp_path / "task.kf"), zeros], capture_output=True, text=True)
    assert p.returncode == 1 and "mismatch" in p.stdout, p.stdout + p.stderr


SET_PARAMS = """
import torch
class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = torch.nn.Linear(n, n)
        self.bn = torch.nn.BatchNorm1d(n)
        self.register_buffer("mask", torch.tril(torch.ones(n, n)))
    def forward(self, x):
        h = self.bn(self.lin(x)) + torch.randn(x.shape[0], x.shape[1])
        return h @ self.mask
def get_inputs():
    return [torch.randn(3, 8)]
def get_init_inputs():
    return [8]
"""


def test_sets_other_than_the_first_get_params_of_their_own(tmp_path):
    """With the verifier's seed, set 0 keeps the weights file and every other set gets params
    drawn like the module's own init (w.S), which its reference uses: a kernel cannot
    hard-code the weights. Random init: drawn afresh under the set's seed; constant init (a
    norm's ones and zeros): drawn around it, sign kept; a structural buffer (a mask) and an
    integer counter: kept; a draw of forward: shuffled."""
    model = write(tmp_path / "sp.py", SET_PARAMS)
    spec = module_task.write_module_task(model, str(tmp_path), name="sp")
    spec = json.loads(read(tmp_path / "sp.json"))
    x = torch.randn(3, 8)
    for s in (0, 1, 2):
        (tmp_path / f"in.{s}").write_bytes(x.numpy().tobytes())
    assert reference.main([str(tmp_path / "sp.json"), str(tmp_path), "0,1,2", "77"]) == 0
    assert not (tmp_path / "w.0").exists()
    blob = (tmp_path / "sp.weights").read_bytes()
    w1, w2 = (tmp_path / "w.1").read_bytes(), (tmp_path / "w.2").read_bytes()
    assert len(w1) == len(blob) and w1 != w2

    def param(b, key):
        p = next(p for p in spec["params"] if p["key"] == key)
        n = reference.numel(p["shape"]) * reference.ITEM[p["dtype"]]
        return reference.tensor_from(b[p["offset"]:p["offset"] + n], p["dtype"], p["shape"])

    bound = 1 / 8 ** 0.5  # Linear's init: U(-1/sqrt(in), 1/sqrt(in))
    for key in ("lin.weight", "lin.bias"):
        a, b = param(blob, key), param(w1, key)
        assert not torch.equal(a, b) and b.abs().max() <= bound and b.std() > bound / 4, key
    assert torch.equal(param(w1, "mask"), param(blob, "mask"))
    assert torch.equal(param(w1, "bn.num_batches_tracked"), param(blob, "bn.num_batches_tracked"))
    for key, lo, hi in (("bn.weight", 0.5, 1.5), ("bn.running_var", 0.5, 1.5), ("bn.bias", -0.5, 0.5),
                        ("bn.running_mean", -0.5, 0.5)):
        b = param(w1, key)
        assert b.min() >= lo and b.max() <= hi and b.std() > 0.1, (key, b)
    d0, d1 = param(blob, "draw0"), param(w1, "draw0")
    assert not torch.equal(d0, d1) and torch.equal(d0.flatten().sort().values, d1.flatten().sort().values)
    # each set's reference is the module on that set's params (x is the same in every set)
    out = [np.fromfile(tmp_path / f"out.{s}", dtype=np.float64) for s in (0, 1, 2)]
    assert not np.allclose(out[0], out[1]) and not np.allclose(out[1], out[2])
    factory = reference.ModelFactory(spec, str(tmp_path))
    want = reference.forward(factory.make(float64=True, blob=w1), [x.double()], reference.draws_of(spec, w1))[0]
    assert np.array_equal(out[1], want.numpy().ravel())
    # the same seed draws the same params; without one, every set keeps the weights file
    assert reference.set_params(factory, 77, 1) == w1
    (tmp_path / "w.1").unlink()
    assert reference.main([str(tmp_path / "sp.json"), str(tmp_path), "1"]) == 0
    assert not (tmp_path / "w.1").exists()
    assert np.array_equal(np.fromfile(tmp_path / "out.1", dtype=np.float64), out[0])


SANDWICH = """
import torch
import torch.nn.functional as F
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 6)
        self.b = torch.nn.Linear(6, 4)
    def forward(self, x):
        h = F.softshrink(self.a(x), 0.5)
        return torch.relu(self.b(h)).view(2, 1, 4)
def get_inputs():
    return [torch.randn(2, 8)]
def get_init_inputs():
    return []
"""


def test_the_parts_kforge_lowers_are_written_beside_a_mixed_task(kforge, tmp_path):
    """An op in the middle that does not lower (softshrink between two linears): the graph
    splits into the part before it and the part after it, each a graph task kforge lowers,
    each reading and giving the module's values by name; the module task lists them."""
    model = write(tmp_path / "sandwich.py", SANDWICH)
    out = tmp_path / "sw"
    p = subprocess.run([kforge, "import", str(model), "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    kf = read(out / "task.kf")
    assert "# a mixed task" in kf and "sandwich.part0.kf" in kf and "sandwich.part1.kf" in kf, kf
    p0, p1 = read(out / "sandwich.part0.kf"), read(out / "sandwich.part1.kf")
    assert not (out / "sandwich.part2.kf").exists()
    # part 0: x and the first linear's params -> the linear's output, which softshrink reads
    assert "task sandwich_part0" in p0 and "input x: f32[2, 8]" in p0, p0
    assert "softshrink" not in p0.split("task sandwich_part0")[1]
    outs0 = [ln for ln in p0.splitlines() if ln.startswith("output ")]
    assert len(outs0) == 1, p0
    # part 1: softshrink's output (an input here) and the second linear's params -> the output
    assert "input softshrink: f32[2, 6]" in p1, p1
    assert "relu" in p1 and len([ln for ln in p1.splitlines() if ln.startswith("output ")]) == 1, p1
    assert "\nmodule " not in p0 and "\nmodule " not in p1  # graph tasks, lowered
