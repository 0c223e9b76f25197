"""`kforge import` on modules that are broken, odd or just unusual (issue 28, items 13-16):
one line naming the file, the step and why, exit 2, the traceback and torch's output behind
--verbose; modules that write in place or return an input import; arguments are checked
before Python starts; a task name from any file name parses.

Most cases run the importer in this process (torch is loaded once: a `kforge import`
process pays seconds of torch start-up each); the binary is run where its own part is
under test (the exit code, the checks before Python, the C lowering)."""
import os
import stat
import subprocess

import pytest
import torch

from conftest import write
from kforge_torch import importer

MODULE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, *args):
        super().__init__()
        {init}
    def forward(self, x, *rest):
        {forward}

def get_inputs():
    {inputs}

def get_init_inputs():
    {init_inputs}
'''


def module(tmp_path, name, init="pass", forward="return x * 2", inputs="return [torch.randn(4, 8)]",
           init_inputs="return []"):
    return write(tmp_path / name, MODULE.format(init=init, forward=forward, inputs=inputs,
                                                init_inputs=init_inputs))


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def lines(text):
    return [l for l in text.splitlines() if l.strip()]


# (file, what the module does wrong, phrases the line must hold)
MALFORMED = [
    ("gi.py", dict(inputs="raise ValueError('no inputs today')"),
     ["get_inputs() raised ValueError: no inputs today"]),
    ("init.py", dict(init="raise RuntimeError('bad init')"),
     ["Model(*get_init_inputs()) raised RuntimeError: bad init"]),
    ("fwd.py", dict(forward="raise KeyError('boom')"), ["forward raised KeyError: 'boom'"]),
    ("none_init.py", dict(init_inputs="return None"), ["get_init_inputs() returned None"]),
    ("huge.py", dict(inputs="return [torch.randn(2**40, 2**20)]"), ["get_inputs() raised RuntimeError"]),
    ("tuple_int.py", dict(forward="return x * 2, 3"), ["forward's output 1 is an int (3), not a tensor"]),
    ("dict.py", dict(forward="return {'y': x}"), ["forward returned a dict"]),
    ("none_out.py", dict(forward="return None"), ["forward returned None"]),
    ("str_input.py", dict(inputs="return [torch.randn(4), 'a']"), ["get_inputs()[1] is a str ('a'), not a tensor or a number"]),
]


@pytest.mark.parametrize("name,fault,phrases", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_module_is_one_line_and_exit_2(tmp_path, capfd, name, fault, phrases):
    """13: each was a raw traceback with exit 1 (documented as "no verified kernel")"""
    path = module(tmp_path, name, **fault)
    rc = importer.main([path, str(tmp_path / "out")])
    err = capfd.readouterr().err
    assert rc == 2, err
    assert len(lines(err)) == 1, err
    assert err.startswith(f"kforge import: {path}: "), err
    for p in phrases:
        assert p in err, (p, err)
    assert "Traceback" not in err
    assert not (tmp_path / "out" / "graph.json").exists()


def test_verbose_shows_the_traceback_between_two_copies_of_the_line(tmp_path, capfd):
    path = module(tmp_path, "fwd.py", forward="raise KeyError('boom')")
    rc = importer.main([path, str(tmp_path / "out"), "--verbose"])
    err = lines(capfd.readouterr().err)
    assert rc == 2
    assert err[0] == err[-1] and err[0].startswith("kforge import: ") and "forward raised KeyError" in err[0], err
    assert any(l.startswith("Traceback") for l in err), err


def test_not_a_python_file(tmp_path, capfd):
    path = write(tmp_path / "notes.txt", "hello\n")
    assert importer.main([path, str(tmp_path / "out")]) == 2
    assert "not a Python file" in capfd.readouterr().err


def test_binary_exit_2_one_line(kforge, tmp_path):
    """13 through kforge: the exit code reaches the shell, and the line is all there is"""
    path = module(tmp_path, "fwd.py", forward="raise KeyError('boom')")
    p = run([kforge, "import", path, "--out", str(tmp_path / "out")], timeout=300)
    assert p.returncode == 2, p.stderr
    assert len(lines(p.stderr)) == 1 and "forward raised KeyError: 'boom'" in p.stderr, p.stderr
    assert "--verbose" in p.stderr


EXPORT_FAILS = dict(forward="return x * 2 if x.sum() > 0 else x - 1")  # data-dependent control flow


def test_export_failure_is_kforge_first_and_last(kforge, tmp_path):
    """15: kforge's line sat inside 34-38 lines of torch output (through the binary: torch
    logs to the process's stderr, which the importer holds back)"""
    path = module(tmp_path, "dyn.py", **EXPORT_FAILS)
    p = run([kforge, "import", path, "--out", str(tmp_path / "out"), "--graph-only"], timeout=300)
    err = lines(p.stderr)
    assert p.returncode == 2 and len(err) == 1, p.stderr
    assert err[0].startswith(f"kforge import: {path}: torch.export of forward raised "), err
    assert "--verbose for the traceback and what torch printed" in err[0], err
    p = run([kforge, "import", path, "--out", str(tmp_path / "out"), "--verbose", "--graph-only"], timeout=300)
    err = lines(p.stderr)
    assert p.returncode == 2, p.stderr
    assert len(err) > 3 and err[0] == err[-1] and "torch.export of forward raised" in err[0], p.stderr
    assert any(l.startswith("Traceback") for l in err), p.stderr


def test_in_place_and_returned_inputs_import(kforge, tmp_path):
    """14: these failed in safetensors ("tensors share memory"); a returned input was
    refused by the lowering ("nothing to compute")"""
    from safetensors.torch import load_file
    cases = {
        "inplace.py": dict(forward="x.relu_()\n        return x"),
        "returns_input.py": dict(forward="return x"),
        "input_and_more.py": dict(forward="return x, rest[0] * 2, x",
                                  inputs="return [torch.randn(4, 8), torch.randn(4, 8)]"),
        "twice.py": dict(forward="y = x * 2\n        return y, y"),
    }
    for name, fault in cases.items():
        path = module(tmp_path, name, **fault)
        out = tmp_path / name.replace(".py", "")
        importer.write_bundle(path, str(out), 0)
        p = run([kforge, "import", "--lower", str(out)])
        if name == "twice.py":  # one tensor returned twice: no graph task (a kernel writes
            # each output once), so the module is the task, its two outputs written apart
            assert p.returncode == 0 and "same tensor" in p.stderr, p.stderr
            text = (out / "task.kf").read_text()
            assert "output out0: f32[4, 8]" in text and "output out1: f32[4, 8]" in text, text
            p = run([kforge, "import", "--lower", str(out), "--graph-only"])
            assert p.returncode == 2 and "same tensor" in p.stderr, p.stderr
            continue
        assert p.returncode == 0, (name, p.stderr)
        ref = load_file(str(out / "ref.safetensors"))
        torch.manual_seed(0)
        drawn = torch.randn(4, 8)
        # the inputs as drawn, not as forward left them
        assert torch.equal(ref["in.0"], drawn), name
        text = (out / "task.kf").read_text()
        if name == "inplace.py":
            assert "relu(x)" in text and torch.equal(ref["out.0"], drawn.relu()), text
        else:
            assert "output x_out0 = x * 1.0" in text and torch.equal(ref["out.0"], drawn), text


def test_task_names_from_file_names_parse(kforge, tmp_path):
    """16: '10_3D_tensor_...py' gave a task name that did not parse ("malformed number")"""
    for stem in ("10_3D_tensor_matrix_multiplication", "1_2_3", "42", "9a", "héllo wörld"):
        name = importer.task_name(stem + ".py")
        assert name[0].isalpha() and all(c.isalnum() and c.isascii() or c == "_" for c in name), name
    path = module(tmp_path, "10_3D_tensor_matrix_multiplication.py")
    importer.write_bundle(path, str(tmp_path / "b"), 0)
    p = run([kforge, "import", "--lower", str(tmp_path / "b")])
    assert p.returncode == 0, p.stderr
    assert "task t3d_tensor_matrix_multiplication_10\n" in (tmp_path / "b" / "task.kf").read_text()


@pytest.fixture
def no_python(tmp_path):
    """A KFORGE_PYTHON that leaves a mark: the checks below must refuse before it starts."""
    mark = tmp_path / "python-started"
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!/bin/sh\ntouch '{mark}'\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, KFORGE_PYTHON=str(fake))
    yield env, mark
    assert not mark.exists(), "Python was started before the arguments were checked"


def test_arguments_are_checked_before_python(kforge, tmp_path, no_python):
    """16: a missing file took 13 s (Python and torch start) to be said; `kforge bench
    nosuchdir` exited 1"""
    env, _ = no_python
    good = module(tmp_path, "m.py")
    a_file = write(tmp_path / "taken", "x")
    cases = [
        (["import", str(tmp_path / "missing.py")], "no such file"),
        (["import", write(tmp_path / "m.txt", "x")], "not a Python file"),
        (["import", str(tmp_path)], "not a file"),
        (["import", good, "--seed", "abc"], "--seed"),
        (["import", good, "--name", "3x"], "not a task name"),
        (["import", good, "--out", a_file], "not a directory"),
        (["bench", str(tmp_path / "nosuchdir")], "no such file or folder"),
        (["bench", "--iters", "2", str(tmp_path / "nosuchdir")], "nosuchdir"),
    ]
    for args, phrase in cases:
        p = run([kforge] + args, env=env)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert phrase in p.stderr and len(lines(p.stderr)) == 1, (args, p.stderr)


def test_export_failure_becomes_a_module_task(kforge, tmp_path):
    """issue 26: a forward torch.export refuses (data-dependent control flow) still runs, so
    the module itself becomes the task, the export's error said first"""
    path = module(tmp_path, "dyn.py", **EXPORT_FAILS)
    out = tmp_path / "out"
    p = run([kforge, "import", path, "--out", str(out)], timeout=300)
    assert p.returncode == 0, p.stderr
    assert "torch.export of forward raised" in p.stderr and "writing a module task" in p.stderr, p.stderr
    assert "--agent llm" in p.stdout
    text = (out / "task.kf").read_text()
    assert "\nmodule dyn\n" in text and "input x: f32[4, 8]" in text and "output out: f32[4, 8]" in text, text
    assert not (out / "graph.json").exists()
