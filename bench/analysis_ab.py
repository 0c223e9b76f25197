#!/usr/bin/env python3
"""Does the performance analysis agent help the search? For every task, `kforge synth` runs
with --analysis builtin (the builtin agent follows the diagnosis, then coordinate moves)
and with --analysis off (random search), same iteration budget, same machine, one after
the other in this one process, for each of --seeds seeds. The reference is the best time
any run of the task found; for each run the script counts the iterations until its best
so far was within 90% of that (time <= best / 0.9). A run that never got there counts as
budget + 1. Prints a table and the mean over tasks; --json writes every run's times.

usage: bench/analysis_ab.py [--kforge build/kforge] [--target cpu] [--iters 12]
                            [--seeds 3] [--scale 1] [--json FILE] [--markdown] TASK.kf ...
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run(kforge, task, target, iters, seed, mode, out):
    cmd = [kforge, "synth", task, "--target", target, "--iters", str(iters), "--seed", str(seed),
           "--analysis", mode, "--memcheck", "off", "--json", "-q", "--out", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    rec = json.loads(p.stdout)
    times = [it.get("time_ms") if it.get("status") == "ok" else None for it in rec["iterations"]]
    return times, rec


def iters_to(times, target_ms, budget):
    best = None
    for i, t in enumerate(times, 1):
        if t is not None and (best is None or t < best):
            best = t
        if best is not None and best <= target_ms:
            return i
    return budget + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--kforge", default="build/kforge")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--scale", type=int, default=1, help="scale input dims >= 1024 (GPU sizes)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kf-ab-")
    rows, runs = [], []
    t0 = time.time()
    for task in a.tasks:
        name = os.path.basename(task)[:-3]
        path = task
        if a.scale > 1:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import kf_torch  # needs torch; only for GPU sizes
            path = os.path.join(tmp, name + ".kf")
            with open(task) as f, open(path, "w") as g:
                g.write(kf_torch.scale_task(f.read(), a.scale))
        res = {"builtin": [], "off": []}
        try:
            for seed in range(1, a.seeds + 1):
                for mode in ("builtin", "off"):  # interleaved: drift hits both alike
                    times, rec = run(a.kforge, path, a.target, a.iters, seed, mode,
                                     os.path.join(tmp, f"{name}-{mode}-{seed}"))
                    res[mode].append(times)
                    runs.append({"task": name, "mode": mode, "seed": seed, "times_ms": times,
                                 "followed": [it.get("followed", "") for it in rec["iterations"]]})
        except (RuntimeError, json.JSONDecodeError) as e:
            print(f"{name}: error: {e}", file=sys.stderr)
            continue
        allt = [t for m in res.values() for ts in m for t in ts if t is not None]
        if not allt:
            print(f"{name}: no verified candidate", file=sys.stderr)
            continue
        best = min(allt)
        tgt = best / 0.9
        on = [iters_to(ts, tgt, a.iters) for ts in res["builtin"]]
        off = [iters_to(ts, tgt, a.iters) for ts in res["off"]]
        fin_on = statistics.median(min(t for t in ts if t is not None) for ts in res["builtin"] if any(ts))
        fin_off = statistics.median(min(t for t in ts if t is not None) for ts in res["off"] if any(ts))
        rows.append((name, best, statistics.mean(on), statistics.mean(off), fin_on, fin_off))
        print(f"{name}: best {best:.4g} ms; iterations to 90%: analysis {on} vs random {off}  "
              f"[{time.time() - t0:.0f} s]", file=sys.stderr, flush=True)
    hdr = ("| task | best ms (any run) | iters to 90%, analysis | iters to 90%, random | "
           "median best ms, analysis | median best ms, random |")
    print(hdr)
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:.4g} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.4g} | {r[5]:.4g} |")
    if rows:
        mon = statistics.mean(r[2] for r in rows)
        moff = statistics.mean(r[3] for r in rows)
        wins = sum(1 for r in rows if r[2] < r[3])
        ties = sum(1 for r in rows if r[2] == r[3])
        print(f"\nmean iterations to 90% of the best: analysis {mon:.2f}, random {moff:.2f} "
              f"({len(rows)} tasks, {a.seeds} seeds, budget {a.iters}; never reached = {a.iters + 1}); "
              f"analysis faster on {wins}, tied on {ties}, slower on {len(rows) - wins - ties}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"target": a.target, "iters": a.iters, "seeds": a.seeds, "runs": runs}, f, indent=1)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
