"""`kforge slurm SUITE --array N`: a Slurm job array that runs `kforge bench` on a suite in N
shards, each into its own store and result file under one shared folder, and a job that
depends on the array (afterok), merges the stores and writes the suite's summary.

usage: kforge slurm SUITE --array N [--partition P] [--gpus-per-task G] [--cpus-per-task C]
                   [--time T] [--account A] [--out DIR] [--submit] [-- BENCH OPTIONS...]

Written into DIR (default kforge-out/slurm/<suite name>), every path in them absolute:
  array.sbatch   the array: element K (SLURM_ARRAY_TASK_ID = K, 0..N-1) runs
                 `kforge bench SUITE --shard K+1/N` with KFORGE_STORE=DIR/stores/shard-K+1.db
                 and --json DIR/results/shard-K+1.json; a bench that ran and found a task not
                 correct (exit 1) counts as done, so the merge still runs
  merge.sbatch   `kforge store merge DIR/merged.db DIR/stores/*.db`, then
                 `kforge bench --merge-from DIR/results` -> DIR/summary.{txt,json,csv}
  submit.sh      the two sbatch calls, the merge depending on the array (what --submit runs)
Options after `--` (or any this command does not know) go to every `kforge bench`, e.g.
`-- --target cuda --iters 5`. With --gpus-per-task and no --target, --target cuda is added.
DIR and the kforge binary must be on a file system the compute nodes share. Needs no torch.
docs/cluster.md says more.
"""
import argparse
import os
import shlex
import subprocess
import sys

from . import suite as S


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def q(x):
    return shlex.quote(str(x))


def header(name, log_path, a, array=None):
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --output={log_path}"]
    if array:
        lines.append(f"#SBATCH --array={array}")
    if a.partition:
        lines.append(f"#SBATCH --partition={a.partition}")
    if a.account:
        lines.append(f"#SBATCH --account={a.account}")
    if a.time:
        lines.append(f"#SBATCH --time={a.time}")
    return lines


def array_script(a, kforge, suite, out, bench_args):
    h = header(f"kforge-{a.name}", os.path.join(out, "logs", "shard-%a.log"), a, f"0-{a.array - 1}")
    h.append("#SBATCH --ntasks=1")
    if a.cpus_per_task:
        h.append(f"#SBATCH --cpus-per-task={a.cpus_per_task}")
    if a.gpus_per_task:
        h.append(f"#SBATCH --gpus-per-task={a.gpus_per_task}")
    n = a.array
    body = f"""
# kforge slurm: element K of the array (SLURM_ARRAY_TASK_ID = K, 0..{n - 1}) runs shard K+1 of {n}
# of the suite: the tasks whose file name hashes to it (kforge bench --shard; docs/cluster.md)
set -uo pipefail
N={n}
I=$((SLURM_ARRAY_TASK_ID + 1))
OUT={q(out)}
mkdir -p "$OUT/stores" "$OUT/results" "$OUT/work"
export KFORGE_STORE="$OUT/stores/shard-$I.db"
echo "kforge slurm: shard $I/$N on $(hostname), job ${{SLURM_ARRAY_JOB_ID:-?}}_${{SLURM_ARRAY_TASK_ID}}"
{q(kforge)} bench {q(suite)} --shard "$I/$N" --out "$OUT/work/shard-$I" --json "$OUT/results/shard-$I.json" \\
    {' '.join(q(x) for x in bench_args)}
rc=$?
# exit 1: the bench ran and some task is not correct -- a result, which the merge reports
if [ "$rc" -eq 1 ]; then exit 0; fi
exit "$rc"
"""
    return "\n".join(h) + "\n" + body


def merge_script(a, kforge, out):
    h = header(f"kforge-{a.name}-merge", os.path.join(out, "logs", "merge.log"), a)
    body = f"""
# kforge slurm: after every element of the array ended well (afterok): the shards' stores
# into one, and the suite's summary from the shards' results, as one process would print it
set -uo pipefail
OUT={q(out)}
shopt -s nullglob
stores=("$OUT"/stores/shard-*.db)
if [ "${{#stores[@]}}" -gt 0 ]; then
    {q(kforge)} store merge "$OUT/merged.db" "${{stores[@]}}" || exit $?
fi
{q(kforge)} bench --merge-from "$OUT/results" --json "$OUT/summary.json" --csv "$OUT/summary.csv" \\
    > "$OUT/summary.txt"
rc=$?
cat "$OUT/summary.txt"
if [ "$rc" -eq 1 ]; then exit 0; fi
exit "$rc"
"""
    return "\n".join(h) + "\n" + body


def submit_script(out):
    return f"""#!/bin/bash
# kforge slurm: submits the array, then the merge to run after it has ended well
set -euo pipefail
OUT={q(out)}
array=$(sbatch --parsable "$OUT/array.sbatch")
array=${{array%%;*}}
merge=$(sbatch --parsable --dependency=afterok:"$array" "$OUT/merge.sbatch")
merge=${{merge%%;*}}
echo "array job $array, merge job $merge; summary in $OUT/summary.txt when done"
"""


def parse(argv):
    ap = argparse.ArgumentParser(prog="kforge slurm", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("suite", help="a folder of tasks (as for kforge bench), on a shared file system")
    ap.add_argument("--kforge", default=os.environ.get("KFORGE", "kforge"), help=argparse.SUPPRESS)
    ap.add_argument("--array", type=int, required=True, metavar="N", help="elements of the array (shards)")
    ap.add_argument("--partition", default=None, help="sbatch --partition")
    ap.add_argument("--account", default=None, help="sbatch --account")
    ap.add_argument("--gpus-per-task", default=None, metavar="G", help="sbatch --gpus-per-task (adds --target cuda)")
    ap.add_argument("--cpus-per-task", type=int, default=None, metavar="C", help="sbatch --cpus-per-task")
    ap.add_argument("--time", default=None, metavar="T", help="sbatch --time of each element and of the merge")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help="the shared folder for scripts, stores, results and logs "
                         "(default kforge-out/slurm/<suite name>)")
    ap.add_argument("--submit", action="store_true", help="submit with sbatch (else only write the scripts)")
    return ap.parse_known_args(argv)


def main(argv=None):
    a, bench_args = parse(argv)
    if bench_args and bench_args[0] == "--":
        bench_args = bench_args[1:]
    if a.array < 1:
        log(f"kforge slurm: --array {a.array}: at least 1")
        return 2
    if not os.path.exists(a.suite):
        log(f"kforge slurm: {a.suite}: no such file or folder")
        return 2
    for bad in ("--shard", "--json", "--csv", "--out", "--merge-from"):
        if any(x == bad or x.startswith(bad + "=") for x in bench_args):
            log(f"kforge slurm: {bad} is set by the array script (each element's shard, result and work folder)")
            return 2
    if a.gpus_per_task and not any(x == "--target" or x.startswith("--target=") for x in bench_args):
        bench_args = ["--target", "cuda"] + bench_args
    suite = os.path.abspath(a.suite)
    a.name = os.path.basename(suite.rstrip("/")) or "suite"
    out = os.path.abspath(a.out or os.path.join("kforge-out", "slurm", a.name))
    kforge = os.path.abspath(a.kforge) if os.path.sep in a.kforge else a.kforge
    files = S.suite_files(suite, None)
    sizes = [len(S.select_shard(files, (i, a.array))) for i in range(1, a.array + 1)]
    for sub in ("logs", "stores", "results", "work"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    for name, text in (("array.sbatch", array_script(a, kforge, suite, out, bench_args)),
                       ("merge.sbatch", merge_script(a, kforge, out)), ("submit.sh", submit_script(out))):
        path = os.path.join(out, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
    print(f"kforge slurm: {len(files)} tasks of {suite} in {a.array} shards ({', '.join(map(str, sizes))} tasks)")
    print(f"  {out}/array.sbatch  the array, element K = shard K+1/{a.array}")
    print(f"  {out}/merge.sbatch  the merge (store and summary), after the array")
    print(f"  {out}/submit.sh     submits both")
    if 0 in sizes:
        log(f"kforge slurm: {sizes.count(0)} shard(s) have no task (the split is by file name: "
            f"docs/cluster.md); they finish at once")
    if not a.submit:
        print(f"submit with: {out}/submit.sh   (or sbatch by hand: docs/cluster.md)")
        return 0
    try:
        p = subprocess.run(["sbatch", "--parsable", os.path.join(out, "array.sbatch")], capture_output=True,
                           text=True, timeout=120)
    except OSError as e:
        log(f"kforge slurm: cannot run sbatch: {e} (is Slurm installed here? the scripts are written)")
        return 2
    if p.returncode != 0:
        log(f"kforge slurm: sbatch refused the array: {p.stderr.strip()}")
        return 2
    array_id = p.stdout.strip().split(";")[0]
    p = subprocess.run(["sbatch", "--parsable", f"--dependency=afterok:{array_id}", os.path.join(out, "merge.sbatch")],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        log(f"kforge slurm: sbatch refused the merge job (the array {array_id} is submitted): {p.stderr.strip()}")
        return 2
    merge_id = p.stdout.strip().split(";")[0]
    with open(os.path.join(out, "jobs"), "w") as f:
        f.write(f"array {array_id}\nmerge {merge_id}\n")
    print(f"submitted: array job {array_id} ({a.array} elements), merge job {merge_id} after it; "
          f"summary: {out}/summary.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
