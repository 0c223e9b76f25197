"""`kforge slurm` (kforge_torch.slurm): the job-array script, the merge script and the
submit script it writes, and its refusals. tests/slurm_real.sh submits them to a real
one-node cluster."""
import os
import subprocess
import sys

from test_suite_shards import small_suite


def run(kforge, *args, env=None):
    return subprocess.run([kforge, "slurm", *args], capture_output=True, text=True, timeout=120, env=env)


def test_writes_the_array_and_its_merge(kforge, tmp_path):
    suite = small_suite(tmp_path / "suite")
    out = tmp_path / "job"
    p = run(kforge, suite, "--array", "3", "--partition", "gpu", "--gpus-per-task", "1", "--time", "02:00:00",
            "--out", str(out), "--", "--iters", "5", "--no-compile")
    assert p.returncode == 0, p.stderr
    assert "4 tasks of" in p.stdout and "in 3 shards" in p.stdout
    arr = (out / "array.sbatch").read_text()
    assert "#SBATCH --array=0-2" in arr and "#SBATCH --partition=gpu" in arr
    assert "#SBATCH --gpus-per-task=1" in arr and "#SBATCH --time=02:00:00" in arr
    assert "I=$((SLURM_ARRAY_TASK_ID + 1))" in arr and "N=3" in arr
    assert '--shard "$I/$N"' in arr and 'KFORGE_STORE="$OUT/stores/shard-$I.db"' in arr
    assert "--target cuda --iters 5 --no-compile" in arr  # --gpus-per-task adds --target cuda
    assert os.path.realpath(suite) in arr and os.path.realpath(kforge) in arr  # absolute paths
    mer = (out / "merge.sbatch").read_text()
    assert "store merge" in mer and "bench --merge-from" in mer and "summary.json" in mer
    sub = (out / "submit.sh").read_text()
    assert "--dependency=afterok:" in sub
    # the scripts are valid bash
    for f in ("array.sbatch", "merge.sbatch", "submit.sh"):
        assert subprocess.run(["bash", "-n", str(out / f)]).returncode == 0, f
        assert os.access(out / f, os.X_OK)


def test_the_array_element_runs_its_shard(kforge, tmp_path):
    """array.sbatch run by hand as element 1 of 2 (what sbatch would do), with a fake
    kforge that prints its arguments: the shard is 2/2, the store and result its own."""
    suite = small_suite(tmp_path / "suite")
    fake = tmp_path / "kf"
    fake.write_text('#!/bin/sh\necho "KFORGE_STORE=$KFORGE_STORE ARGS=$*"\nexit 1\n')
    fake.chmod(0o755)
    out = tmp_path / "job"
    p = subprocess.run([kforge, "slurm", suite, "--array", "2", "--out", str(out)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, KFORGE=str(fake)))
    assert p.returncode == 0, p.stderr
    text = (out / "array.sbatch").read_text().replace(os.path.realpath(kforge), str(fake))
    (out / "array.sbatch").write_text(text)
    e = subprocess.run(["bash", str(out / "array.sbatch")], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, SLURM_ARRAY_TASK_ID="1"))
    assert e.returncode == 0, e.stderr  # the bench's exit 1 (a task not correct) is a result
    assert f"KFORGE_STORE={out}/stores/shard-2.db" in e.stdout
    assert f"--shard 2/2 --out {out}/work/shard-2 --json {out}/results/shard-2.json" in e.stdout


def test_refusals(kforge, tmp_path):
    suite = small_suite(tmp_path / "suite")
    p = run(kforge, suite, "--array", "2", "--out", str(tmp_path / "j"), "--", "--shard", "1/2")
    assert p.returncode == 2 and "--shard is set by the array script" in p.stderr
    p = run(kforge, suite, "--array", "0")
    assert p.returncode == 2 and "at least 1" in p.stderr
    p = run(kforge, str(tmp_path / "nope"), "--array", "2")
    assert p.returncode == 2 and "no such file" in p.stderr
    # --submit where there is no sbatch: said, the scripts still written
    env = dict(os.environ, PATH="/nonexistent", KFORGE_PYTHON=sys.executable)
    p = subprocess.run([kforge, "slurm", suite, "--array", "2", "--out", str(tmp_path / "k"), "--submit"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 2 and "cannot run sbatch" in p.stderr, p.stderr
    assert (tmp_path / "k" / "array.sbatch").exists()
    p = run(kforge, "--help")
    assert p.returncode == 0 and "SLURM_ARRAY_TASK_ID" in p.stdout
