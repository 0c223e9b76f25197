"""The CI sample of module tasks (issue 26): one KernelBench-format module per kind, each taken
end to end from a clean checkout: `kforge import` (the kind it makes), `kforge synth` against
the scripted model of tests/llm_server.py (a wrong kernel first, then the module's kernel),
the run's record (which path gave the result), and `kforge export` of the run checked
against the module by `kforge export --check`.

The kinds (docs/pytorch.md, "Module tasks"):
- module: tests/modules/branch_shrink.py, a forward torch.export refuses (a data-dependent
  branch): no graph, no part; the model writes it alone (--agent llm);
- mixed: tests/modules/conv_gn_shrink.py (conv2d and group norm lower, softshrink does not)
  and tests/modules/lstm_cell.py (the LSTM cells do not lower, the linear head does): the
  builtin synthesizes the part first, the model gets its kernel (--agent both).
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, read, scripted_reply

MODULES = os.path.join(REPO, "tests", "modules")

# name, agent, parts kforge import writes, what the task's header says of the rest
SAMPLE = [
    ("branch_shrink", "llm", 0, "# not a graph task: "),
    ("conv_gn_shrink", "both", 1, "# not lowered: softshrink (aten.softshrink.default)"),
    ("lstm_cell", "both", 1, "lstm_cell_4 (aten.lstm_cell.default)"),
]




def zeros_kernel(spec):
    """a kernel of the task's arguments that writes zeros: wrong for every module here"""
    k = len(spec["inputs"]) + len(spec["params"])
    n = 1
    for d in spec["outputs"][0]["shape"]:
        n *= d
    return (f"int kforge_kernel(void *const *args) {{\n    float *y = args[{k}];\n"
            f"    for (long i = 0; i < {n}; i++) y[i] = 0.0f;\n    return 0;\n}}\n")


@pytest.mark.parametrize("name,agent,nparts,rest", SAMPLE, ids=[s[0] for s in SAMPLE])
def test_module_sample_end_to_end(kforge, tmp_path, name, agent, nparts, rest):
    task_dir = tmp_path / "task"
    p = subprocess.run([kforge, "import", os.path.join(MODULES, f"{name}.py"), "--out", str(task_dir)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    task = task_dir / "task.kf"
    text = read(task)
    assert f"\nmodule {name}\n" in text and rest in text, text
    parts = sorted(f for f in os.listdir(task_dir) if f.startswith(f"{name}.part"))
    assert len(parts) == nparts, parts
    spec = json.loads(read(task_dir / f"{name}.json"))

    script = tmp_path / "script.json"
    good = read(os.path.join(MODULES, f"{name}_kernel.c"))
    script.write_text(json.dumps({"responses": [scripted_reply(zeros_kernel(spec)), scripted_reply(good)]}))
    log = tmp_path / "log.jsonl"
    srv = subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "llm_server.py"), str(script), str(log)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(srv.stdout.readline())
        out = tmp_path / "out"
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path), KFORGE_CONFIG="")
        p = subprocess.run([kforge, "synth", str(task), "--agent", agent, "--llm-url", f"http://127.0.0.1:{port}/v1",
                            "--model", "scripted", "--iters", "2", "--builtin-iters", "2", "--memcheck", "off",
                            "--no-store", "--seed", "5", "--out", str(out)], capture_output=True, text=True, env=env)
    finally:
        srv.stdin.close()
        srv.wait()
    assert p.returncode == 0, p.stdout + p.stderr
    run = json.loads(read(out / "run.json"))
    its = run["iterations"]
    assert [i["agent"] for i in its] == ["llm", "llm"] and its[0]["status"] == "mismatch", its
    assert its[1]["status"] == "ok" and run["best_iter"] == 2, its[1]
    # the record says which path gave the result
    assert run["result"]["from"] == "llm", run["result"]
    assert run["result"]["detail"].startswith("the model's kernel of iteration 2, verified against the module")
    requests = [json.loads(line) for line in read(log).splitlines()]
    assert len(requests) == 2
    ask = requests[0]["body"]["messages"][-1]["content"]
    if nparts:  # the part's verified kernel, handed to the model
        assert os.path.isfile(out / "part0" / "kernel.c")
        assert "Kernels for parts of this module's forward" in ask and f"{name}_part0" in ask
        assert f"{out}/part0/kernel.c ({name}_part0)" in run["result"]["detail"], run["result"]
    else:
        assert "Kernels for parts" not in ask and not (out / "part0").exists()

    # the run as a torch custom op in ModelNew, checked against the module (two seeds: other
    # weights and inputs; branch_shrink takes its positive branch under seed 0, its negative under 1)
    p = subprocess.run([kforge, "export", str(out), "--as", "torch", "--out", str(tmp_path / "e.py")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    for seed in ("0", "1"):
        c = subprocess.run([kforge, "export", "--check", str(tmp_path / "e.py"), "--seed", seed, "--no-compile"],
                           capture_output=True, text=True)
        assert c.returncode == 0 and "check: ok" in c.stdout, c.stdout + c.stderr
