"""`kforge synth TASK --agent llm` on a KernelBench-format module of each kind kforge import
makes, against the scripted model of tests/llm_server.py (issue 26's first done-when item):
a wrong kernel first (a mismatch), then the right one (verified), the record saying which
path gave the result.

- graph: tests/modules/linear_relu.py (every op lowers), checked against the float64
  interpreter;
- module: tests/modules/branch_shrink.py (torch.export refuses its branch), checked against
  the module run in float64;
- mixed: tests/modules/conv_gn_shrink.py (conv2d and group norm lower, softshrink does not)
  under --agent llm alone: the parts are not synthesized, the model gets the module only.

test_module_sample.py takes the module and mixed kinds further (--agent both, export)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, read, scripted_reply

MODULES = os.path.join(REPO, "tests", "modules")

# name, kind, what the run is checked against (run.json's result detail), the kernel's
# buffers before its output (the task's input and param lines), the output's elements
SAMPLE = [
    ("linear_relu", "graph", "the float64 interpreter", 3, 4 * 6),
    ("branch_shrink", "module", "the module (its float64 reference", 2, 6 * 16),
    ("conv_gn_shrink", "mixed", "the module (its float64 reference", 5, 2 * 8 * 8 * 8),
]




@pytest.mark.parametrize("name,kind,against,k,n", SAMPLE, ids=[s[0] for s in SAMPLE])
def test_llm_agent_on_each_kind(kforge, tmp_path, name, kind, against, k, n):
    task_dir = tmp_path / "task"
    p = subprocess.run([kforge, "import", os.path.join(MODULES, f"{name}.py"), "--out", str(task_dir)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    text = read(task_dir / "task.kf")
    parts = [f for f in os.listdir(task_dir) if ".part" in f and f.endswith(".kf")]
    is_module = f"\nmodule {name}\n" in text
    assert (kind == "graph") == (not is_module), text
    assert (kind == "mixed") == bool(parts), parts
    assert sum(l.startswith(("input ", "param ")) for l in text.splitlines()) == k, text
    zeros = (f"int kforge_kernel(void *const *args) {{\n    float *y = args[{k}];\n"
             f"    for (long i = 0; i < {n}; i++) y[i] = 0.0f;\n    return 0;\n}}\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": [scripted_reply(zeros), scripted_reply(read(os.path.join(MODULES, f"{name}_kernel.c")))]}))
    log = tmp_path / "log.jsonl"
    srv = subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "llm_server.py"), str(script), str(log)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(srv.stdout.readline())
        out = tmp_path / "out"
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path), KFORGE_CONFIG="")
        p = subprocess.run([kforge, "synth", str(task_dir / "task.kf"), "--agent", "llm", "--llm-url",
                            f"http://127.0.0.1:{port}/v1", "--model", "scripted", "--iters", "2", "--memcheck", "off",
                            "--no-store", "--seed", "3", "--out", str(out)], capture_output=True, text=True, env=env)
    finally:
        srv.stdin.close()
        srv.wait()
    assert p.returncode == 0, p.stdout + p.stderr
    run = json.loads(read(out / "run.json"))
    its = run["iterations"]
    assert [i["agent"] for i in its] == ["llm", "llm"], its
    assert its[0]["status"] == "mismatch" and its[1]["status"] == "ok" and run["best_iter"] == 2, its
    assert run["result"]["from"] == "llm", run["result"]
    assert run["result"]["detail"].startswith(f"the model's kernel of iteration 2, verified against {against}"), \
        run["result"]
    requests = [json.loads(line) for line in read(log).splitlines()]
    assert len(requests) == 2
    ask = requests[0]["body"]["messages"][-1]["content"]
    # a module task's prompt carries the module's source; a graph task's its ops
    assert ("class Model" in ask) == is_module, ask[:2000]
    assert "Kernels for parts" not in ask and not (out / "part0").exists()
