"""Shards of a suite (`kforge bench --shard I/N`) and the merge of their results
(`kforge bench --merge-from DIR`): kforge_torch.suite, which needs no torch."""
import io
import json
import os
import subprocess
import sys

import pytest

from kforge_torch import suite as S

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPU_L1 = os.path.join(REPO, "suites", "cpu-l1")


def names(n):
    return [f"/s/{k:03d}_task_{k * 7919 % 1000}.py" for k in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_shards_partition_the_suite(n):
    files = S.suite_files(CPU_L1, None) + names(200)
    parts = [S.select_shard(files, (i, n)) for i in range(1, n + 1)]
    union = [f for p in parts for f in p]
    assert sorted(union) == sorted(files)          # nothing lost
    assert len(union) == len(set(union))            # nothing twice
    for p in parts:                                 # each part in the suite's order
        assert p == [f for f in files if f in set(p)]
    if n > 1:                                       # and no part is empty at this size
        assert all(len(p) > 0 for p in parts)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_adding_a_task_moves_no_other(n):
    files = S.suite_files(CPU_L1, None)
    before = {f: S.shard_of(f, n) for f in files}
    grown = files + [os.path.join(CPU_L1, "99_new_task.py"), os.path.join(CPU_L1, "00_first.py")]
    for i in range(1, n + 1):
        part = S.select_shard(grown, (i, n))
        for f in part:
            if f in before:
                assert before[f] == i
    # the rule is the documented one: 1 + FNV-1a 64 of the base name, mod N
    assert S.fnv1a64("") == 0xCBF29CE484222325 and S.fnv1a64("a") == 0xAF63DC4C8601EC8C
    assert S.shard_of("/x/y/01_relu.py", n) == 1 + S.fnv1a64("01_relu.py") % n


def test_parse_shard():
    assert S.parse_shard("1/1") == (1, 1) and S.parse_shard("3/4") == (3, 4)
    for bad in ("0/2", "3/2", "1", "a/2", "1/0", "", None, "-1/2"):
        assert S.parse_shard(bad) is None


def row(task, status, eager=None, kforge=None, compile_=None, floor=None):
    r = {"task": task, "file": f"/suite/{task}.py", "status": status}
    if status in ("ok", "wrong"):
        r.update(kforge_ms=kforge, eager_ms=eager, compile_ms=compile_, speedup_eager=eager / kforge,
                 speedup_compile=compile_ / kforge, floor_ms=floor, kforge_pct_floor=100 * floor / kforge,
                 eager_pct_floor=100 * floor / eager, max_abs_err=1e-6, correct=status == "ok")
    else:
        r["detail"] = "aten.sort"
    return r


ROWS = [row("01_relu", "ok", 2.0, 1.0, 1.5, 0.5), row("02_sort", "unsupported"),
        row("03_softmax", "ok", 3.0, 2.5, 2.0, 1.0), row("04_bad", "wrong", 1.0, 1.0, 1.0, 0.5),
        row("05_gelu", "ok", 4.0, 1.0, 3.0, 0.2), row("06_none", "no-kernel"), row("07_mm", "ok", 9.0, 4.0, 5.0, 3.0)]
META = {"suite": "/suite", "target": "cpu", "iters": 2, "prealloc": False, "compiled": True, "seed": 0,
        "torch": "x", "device": "cpu", "timing": "t", "threads": 2, "suite_tasks": len(ROWS)}


def single_run(tmp_path):
    """What one process prints and writes for ROWS."""
    out = io.StringIO()
    rc = S.finish(list(ROWS), dict(META, shard="1/1"), True, False, 12.0, str(tmp_path / "one.json"),
                  str(tmp_path / "one.csv"), out=out)
    return rc, out.getvalue(), json.load(open(tmp_path / "one.json")), open(tmp_path / "one.csv").read()


def write_shards(folder, n, rows=ROWS, drop=None):
    folder.mkdir()
    for i in range(1, n + 1):
        if drop == i:
            continue
        part = [r for r in rows if S.shard_of(r["file"], n) == i]
        S.write_json(str(folder / f"shard-{i}.json"), dict(META, shard=f"{i}/{n}"),
                     S.summarize(part, True) | {"wall_s": 5.0 + i}, part, False)


@pytest.mark.parametrize("n", [2, 3])
def test_merged_summary_is_the_single_process_summary(tmp_path, n):
    rc1, text1, doc1, csv1 = single_run(tmp_path)
    write_shards(tmp_path / "shards", n)
    # the shards really split the rows (else the test proves nothing)
    assert len({S.shard_of(r["file"], n) for r in ROWS}) > 1
    out = io.StringIO()
    sys.stdout, saved = out, sys.stdout
    try:
        rc2 = S.merge_main(["--merge-from", str(tmp_path / "shards"), "--json", str(tmp_path / "m.json"),
                            "--csv", str(tmp_path / "m.csv")])
    finally:
        sys.stdout = saved
    doc2 = json.load(open(tmp_path / "m.json"))
    assert rc2 == rc1 == 1  # a wrong task: exit 1 both ways
    assert doc2["rows"] == doc1["rows"]
    s1, s2 = dict(doc1["summary"]), dict(doc2["summary"])
    s1.pop("wall_s"), s2.pop("wall_s")
    assert s1 == s2 and s1["tasks"] == 7 and s1["correct"] == 4
    assert open(tmp_path / "m.csv").read() == csv1
    # the printed table and summary lines are the same, but for the wall time line
    t1 = [l for l in text1.splitlines() if "tasks in" not in l]
    t2 = [l for l in out.getvalue().splitlines() if "tasks in" not in l]
    assert t1 == t2
    assert doc2["merged_from"] == n and doc2["suite_tasks"] == 7


def test_merge_refuses_missing_duplicate_and_partial(tmp_path):
    write_shards(tmp_path / "miss", 3, drop=2)
    with pytest.raises(S.MergeError, match="missing shard.*2/3"):
        S.merge_docs(S.read_dir(str(tmp_path / "miss")))
    write_shards(tmp_path / "dup", 2)
    d = json.load(open(tmp_path / "dup" / "shard-1.json"))
    json.dump(d, open(tmp_path / "dup" / "again.json", "w"))
    with pytest.raises(S.MergeError, match="both shard 1/2"):
        S.merge_docs(S.read_dir(str(tmp_path / "dup")))
    write_shards(tmp_path / "part", 2)
    d = json.load(open(tmp_path / "part" / "shard-2.json"))
    d["partial"] = True
    json.dump(d, open(tmp_path / "part" / "shard-2.json", "w"))
    with pytest.raises(S.MergeError, match="partial"):
        S.merge_docs(S.read_dir(str(tmp_path / "part")))
    write_shards(tmp_path / "other", 2)
    d = json.load(open(tmp_path / "other" / "shard-2.json"))
    d["iters"] = 9
    json.dump(d, open(tmp_path / "other" / "shard-2.json", "w"))
    with pytest.raises(S.MergeError, match="iters"):
        S.merge_docs(S.read_dir(str(tmp_path / "other")))


def test_merge_through_the_binary(kforge, tmp_path):
    """`kforge bench --merge-from` runs without torch and says what is wrong, exit 2."""
    write_shards(tmp_path / "sh", 2)
    p = subprocess.run([kforge, "bench", "--merge-from", str(tmp_path / "sh"), "--json", str(tmp_path / "m.json")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr  # the suite has a wrong task
    assert "correct: 4 of 6 supported tasks" in p.stdout and json.load(open(tmp_path / "m.json"))["rows"]
    os.remove(tmp_path / "sh" / "shard-1.json")
    p = subprocess.run([kforge, "bench", "--merge-from", str(tmp_path / "sh")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "missing shard(s) 1/2" in p.stderr, p.stderr


SMALL = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return {expr}

def get_inputs():
    return [torch.randn(64, 256)]

def get_init_inputs():
    return []
'''


def small_suite(folder):
    folder.mkdir()
    for name, expr in (("01_relu", "torch.relu(x)"), ("02_softmax", "torch.softmax(x, dim=1)"),
                       ("03_sort", "torch.sort(x, dim=1).values"), ("04_tanh", "torch.tanh(x)")):
        (folder / f"{name}.py").write_text(SMALL.format(expr=expr))
    return str(folder)


def test_shards_for_real_merge_to_the_single_run(kforge, tmp_path):
    """Two `kforge bench --shard I/2` processes and their merge give the tasks, statuses and
    counts of one `kforge bench` of the same suite (timings are new measurements)."""
    suite = small_suite(tmp_path / "suite")
    common = ["--iters", "2", "--reps", "5", "--no-compile", "--out", str(tmp_path / "w")]
    one = subprocess.run([kforge, "bench", suite, *common, "--json", str(tmp_path / "one.json")],
                         capture_output=True, text=True, timeout=900)
    assert one.returncode == 0, one.stderr
    (tmp_path / "shards").mkdir()
    for i in (1, 2):
        p = subprocess.run([kforge, "bench", suite, *common, "--shard", f"{i}/2",
                            "--json", str(tmp_path / "shards" / f"{i}.json")], capture_output=True, text=True,
                           timeout=900)
        assert p.returncode == 0, p.stderr
        assert f"(shard {i}/2: " in p.stderr
    m = subprocess.run([kforge, "bench", "--merge-from", str(tmp_path / "shards"), "--json", str(tmp_path / "m.json")],
                       capture_output=True, text=True, timeout=120)
    assert m.returncode == 0, m.stderr
    d1, d2 = json.load(open(tmp_path / "one.json")), json.load(open(tmp_path / "m.json"))
    assert [(r["task"], r["status"]) for r in d1["rows"]] == [(r["task"], r["status"]) for r in d2["rows"]]
    for k in ("tasks", "supported", "correct", "correctness"):
        assert d1["summary"][k] == d2["summary"][k]
    assert d2["summary"]["tasks"] == 4 and d2["summary"]["correct"] == 3
