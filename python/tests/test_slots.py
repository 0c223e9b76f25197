"""`kforge bench --jobs N` (kforge_torch.slots): cores split into pinned slots, GPUs as
slots, and a real run in two slots where one task kills its worker and one hangs: the
others finish, the two are error rows, the table is in the suite's order."""
import json
import os
import subprocess

import pytest

from kforge_torch import slots as SL
from kforge_torch import suite as S

from test_suite_shards import small_suite


def test_split_cores():
    assert SL.split_cores([0, 1], 2) == [[0], [1]]
    assert SL.split_cores([0, 1, 2, 3, 4, 5, 6], 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert SL.split_cores([3, 1, 2, 0], 1) == [[0, 1, 2, 3]]
    assert SL.split_cores([0, 1], 3) == [[0], [1], [0]]  # fewer cores than slots: shared
    for n in range(1, 9):  # disjoint, all used, sizes differ by one at most
        parts = SL.split_cores(list(range(8)), n)
        flat = [c for p in parts for c in p]
        assert sorted(flat) == list(range(8)) and max(map(len, parts)) - min(map(len, parts)) <= 1


def test_gpu_slots(monkeypatch):
    monkeypatch.setattr(SL, "visible_gpus", lambda: ["0", "1", "2", "3"])
    assert SL.gpu_slots("cuda", 1) == (["0", "1", "2", "3"], None)
    assert SL.gpu_slots("cuda:0,2", 1) == (["0", "2"], None)
    assert SL.gpu_slots("cuda", 2) == (["0", "1"], None)
    gpus, why = SL.gpu_slots("cuda:7", 1)
    assert gpus is None and "no GPU 7" in why
    monkeypatch.setattr(SL, "visible_gpus", lambda: ["4", "6"])  # CUDA_VISIBLE_DEVICES=4,6
    assert SL.gpu_slots("cuda:1", 1) == (["6"], None)
    monkeypatch.setattr(SL, "visible_gpus", lambda: [])
    gpus, why = SL.gpu_slots("cuda", 1)
    assert gpus is None and "no GPU visible" in why


def test_visible_gpus_reads_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert SL.visible_gpus() == ["2", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert SL.visible_gpus() == []


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: no two pinned slots")
def test_two_slots_survive_a_crash_and_a_hang(kforge, tmp_path):
    suite = small_suite(tmp_path / "suite")
    with open(os.path.join(suite, "05_crash.py"), "w") as f:  # kills its worker when imported
        f.write("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n" + open(os.path.join(suite, "04_tanh.py")).read())
    with open(os.path.join(suite, "06_hang.py"), "w") as f:   # never returns
        f.write("import time\ntime.sleep(3600)\n" + open(os.path.join(suite, "04_tanh.py")).read())
    p = subprocess.run([kforge, "bench", suite, "--jobs", "2", "--iters", "2", "--reps", "5", "--no-compile",
                        "--task-timeout", "25", "--out", str(tmp_path / "w"), "--json", str(tmp_path / "j.json"),
                        "--csv", str(tmp_path / "j.csv")], capture_output=True, text=True, timeout=900)
    assert p.returncode == 1, p.stderr  # two error rows
    d = json.load(open(tmp_path / "j.json"))
    got = [(r["task"], r["status"]) for r in d["rows"]]
    assert got == [("01_relu", "ok"), ("02_softmax", "ok"), ("03_sort", "unsupported"), ("04_tanh", "ok"),
                   ("05_crash", "error"), ("06_hang", "error")], got
    rows = {r["task"]: r for r in d["rows"]}
    assert "killed by signal 9" in rows["05_crash"]["detail"]
    assert "no result after 25 s" in rows["06_hang"]["detail"]
    # pinned: each worker saw only its own core, and ran torch on one thread
    aff = [s["affinity"] for s in d["slots"]]
    assert len(aff) == 2 and all(len(a) == 1 for a in aff) and aff[0] != aff[1], d["slots"]
    assert all(s["threads"] == 1 for s in d["slots"])
    assert d["jobs"] == 2 and d["summary"]["tasks"] == 6 and d["summary"]["correct"] == 3
    # the output says how many cores each slot had; plain progress lines off a terminal
    assert "in 2 slots: slot 1 1 core (cpu " in p.stderr, p.stderr
    assert "total 6/6 done" in p.stderr and p.stderr.count("| total ") == 6
    assert "2 slots: slot 1 1 core" in p.stdout
    # the table is one process's (same code), rows in the suite's order
    assert p.stdout.index("01_relu") < p.stdout.index("04_tanh") < p.stdout.index("06_hang")


def test_gpu_slots_for_real(kforge, tmp_path):
    """--target cuda: one slot per visible GPU (needs GPUs and torch with CUDA)."""
    if not SL.visible_gpus():
        pytest.skip("no GPU visible here (nvidia-smi lists none): the one-slot-per-GPU run needs one")
    suite = small_suite(tmp_path / "suite")
    p = subprocess.run([kforge, "bench", suite, "--jobs", "8", "--target", "cuda", "--iters", "2", "--reps", "5",
                        "--no-compile", "--out", str(tmp_path / "w"), "--json", str(tmp_path / "j.json")],
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr
    d = json.load(open(tmp_path / "j.json"))
    assert d["jobs"] == min(8, len(SL.visible_gpus())) and all("gpu" in s for s in d["slots"])
    assert [r["status"] for r in d["rows"]] == ["ok", "ok", "unsupported", "ok"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: no two pinned slots")
def test_live_lines_on_a_terminal(kforge, tmp_path):
    """On a terminal: one line per slot and a total, redrawn in place (cursor up, clear line)."""
    import pty
    suite = small_suite(tmp_path / "suite")
    master, slave = pty.openpty()
    p = subprocess.Popen([kforge, "bench", suite, "--jobs", "2", "--iters", "2", "--reps", "5", "--no-compile",
                          "--out", str(tmp_path / "w")], stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the pty's other end closed
            break
        if not data:
            break
        chunks.append(data)
    assert p.wait(timeout=900) == 0
    text = b"".join(chunks).decode("utf-8", "replace")
    assert "\x1b[3F" in text and "\x1b[2Kslot 1 (1 core (cpu " in text and "\x1b[2Kslot 2 (1 core" in text
    assert "\x1b[2Ktotal 4/4 done" in text
    assert "| total " not in text  # no plain lines on a terminal
