#!/usr/bin/env python3
"""Does the performance analysis agent help the search? For every task, `kforge synth` runs
with --analysis builtin (the builtin agent follows the diagnosis, then coordinate moves)
and with --analysis off (random search), same iteration budget, same machine, one after
the other in this one process, for each of --seeds seeds. A schedule's time is the median
of every measurement of it in any run of the task (both searches try many of the same
points, and pooling them keeps one noisy measurement from deciding the score), plus
--confirm re-timings of the five fastest schedules (within 15%; a schedule measured once
could otherwise be the reference by luck: the fastest of ~30 noisy single measurements is
biased low); the
reference is the fastest schedule's time, and for each run the script counts the
iterations until it had evaluated a schedule within 90% (--frac) of that (time <= best / 0.9). A
run that never got there counts as budget + 1. Prints a table and the mean over tasks;
--json writes every run's times and schedules, with the machine, date and commit. The runs
record into a fresh store in a temporary folder (--store to name one): a store that already
holds these candidates would serve them from its cache instead of measuring them.

usage: bench/analysis_ab.py [--kforge build/kforge] [--target cpu] [--iters 12]
                            [--seeds 3] [--scale 1] [--start default|random]
                            [--frac 0.9 ...] [--json FILE] TASK.kf ...
       bench/analysis_ab.py --from FILE.json [--from MORE.json ...] --frac 0.9 --frac 0.98
                            (re-score saved runs; several files of the same settings are merged)
--deadline S starts no new task after S seconds (for a machine whose calls have a time limit:
the JSON written after every task keeps what finished; merge the parts with --from).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run(kforge, task, target, iters, seed, mode, out, store, start):
    cmd = [kforge, "synth", task, "--target", target, "--iters", str(iters), "--seed", str(seed),
           "--analysis", mode, "--memcheck", "off", "--json", "-q", "--out", out, "--store", store,
           "--start", start]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    rec = json.loads(p.stdout)
    times = [it.get("time_ms") if it.get("status") == "ok" else None for it in rec["iterations"]]
    labels = [it.get("candidate") for it in rec["iterations"]]
    return times, labels, rec


def iters_to(labels, point_ms, target_ms, budget):
    for i, lab in enumerate(labels, 1):
        if lab in point_ms and point_ms[lab] <= target_ms:
            return i
    return budget + 1


def pooled(runs, confirms):
    """Every measurement of each schedule: the runs' and the confirmation re-timings'."""
    meas = {}
    for r in runs:
        for t, lab in zip(r["times_ms"], r["schedules"]):
            if t is not None:
                meas.setdefault(lab, []).append(t)
    for lab, ts in (confirms or {}).items():
        if lab in meas:
            meas[lab].extend(ts)
    return meas


def confirm(kforge, path, target, runs, n, within, store, tmp, most=5):
    """Time again, n times each in interleaved rounds, the `most` fastest schedules among those
    whose pooled median is within `within` of the fastest one's (each run measures a schedule once, so the fastest
    of ~30 single measurements is biased low: the winner's curse). Each re-timing is
    `kforge synth --pin LABEL --iters 1 --no-cache`: that one schedule, verified and timed
    afresh. Returns {label: [ms, ...]}."""
    meas = pooled(runs, None)
    if not meas or n <= 0:
        return {}
    point_ms = {lab: statistics.median(ts) for lab, ts in meas.items()}
    best = min(point_ms.values())
    top = sorted((lab for lab, ms in point_ms.items() if ms <= best / within), key=point_ms.get)[:most]
    out = {lab: [] for lab in top}
    for k in range(n):
        for lab in top:
            cmd = [kforge, "synth", path, "--target", target, "--iters", "1", "--seed", str(100 + k), "--pin", lab,
                   "--no-cache", "--memcheck", "off", "--json", "-q", "--out", os.path.join(tmp, "confirm"),
                   "--store", store]
            p = subprocess.run(cmd, capture_output=True, text=True)
            try:
                it = json.loads(p.stdout)["iterations"][0]
            except (json.JSONDecodeError, KeyError, IndexError):
                raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
            if it.get("candidate") != lab:
                raise RuntimeError(f"--pin {lab!r} ran {it.get('candidate')!r}")
            if it.get("status") == "ok":
                out[lab].append(it["time_ms"])
    return out


def load_merged(paths):
    """The saved runs of one or more --json files, merged; their settings must agree."""
    saved = None
    for path in paths:
        with open(path) as f:
            part = json.load(f)
        if saved is None:
            saved = part
            saved.setdefault("confirms", {})
            continue
        for key in ("target", "iters", "seeds", "start"):
            if part.get(key) != saved.get(key):
                sys.exit(f"analysis_ab.py: {path}: {key} {part.get(key)!r} differs from {paths[0]}'s "
                         f"{saved.get(key)!r}; only runs of the same settings can be merged")
        names = {r["task"] for r in saved["runs"]}
        dup = sorted(names & {r["task"] for r in part["runs"]})
        if dup:
            sys.exit(f"analysis_ab.py: {path}: tasks {', '.join(dup)} are in an earlier file too")
        saved["runs"].extend(part["runs"])
        saved["confirms"].update(part.get("confirms", {}))
        saved.setdefault("parts", [saved.get("meta", {})]).append(part.get("meta", {}))
    return saved


def score(runs, budget, seeds, fracs, confirms=None):
    """Print the table for every fraction in fracs from the recorded runs (and the
    confirmation re-timings, {task: {label: [ms]}})."""
    tasks = []
    for r in runs:
        if r["task"] not in tasks:
            tasks.append(r["task"])
    for frac in fracs:
        rows = []
        for name in tasks:
            rs = [r for r in runs if r["task"] == name]
            meas = pooled(rs, (confirms or {}).get(name))
            if not meas:
                continue
            point_ms = {lab: statistics.median(ts) for lab, ts in meas.items()}
            best = min(point_ms.values())
            tgt = best / frac

            def per(mode):
                return [iters_to(r["schedules"], point_ms, tgt, budget) for r in rs if r["mode"] == mode]

            def found(mode):
                return statistics.median(min(point_ms[l] for t, l in zip(r["times_ms"], r["schedules"]) if t is not None)
                                         for r in rs if r["mode"] == mode and any(t is not None for t in r["times_ms"]))
            on, off = per("builtin"), per("off")
            rows.append((name, best, statistics.mean(on), statistics.mean(off), found("builtin"), found("off"),
                         len(point_ms)))
        pct = round(100 * frac)
        print(f"\nreaching {pct}% of the fastest schedule's speed:")
        print(f"| task | fastest schedule ms | schedules seen | iters to {pct}%, analysis | iters to {pct}%, random | "
              "best found ms, analysis | best found ms, random |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r[0]} | {r[1]:.4g} | {r[6]} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.4g} | {r[5]:.4g} |")
        if rows:
            mon = statistics.mean(r[2] for r in rows)
            moff = statistics.mean(r[3] for r in rows)
            wins = sum(1 for r in rows if r[2] < r[3])
            ties = sum(1 for r in rows if r[2] == r[3])
            print(f"\nmean iterations to {pct}% of the fastest: analysis {mon:.2f}, random {moff:.2f} "
                  f"({len(rows)} tasks, {seeds} seeds, budget {budget}; never reached = {budget + 1}); "
                  f"analysis faster on {wins}, tied on {ties}, slower on {len(rows) - wins - ties}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", nargs="*")
    ap.add_argument("--kforge", default="build/kforge")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--scale", type=int, default=1, help="scale input dims >= 1024 (GPU sizes)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--start", default="default", choices=["default", "random"],
                    help="first candidate of both searches: the template's default point, or the "
                         "same random point (from the seed) for both, without the defaults' head start")
    ap.add_argument("--store", default=None, help="store the runs record into (default: a fresh one)")
    ap.add_argument("--frac", type=float, action="append",
                    help="fraction of the fastest schedule's speed to reach (repeatable; default 0.9)")
    ap.add_argument("--from", dest="from_json", action="append", default=None,
                    help="re-score the runs a previous --json saved instead of running kforge (with "
                         "--confirm and the task files: re-time them first, and --json saves the result); "
                         "repeat to merge the runs of several files made with the same settings")
    ap.add_argument("--deadline", type=float, default=0,
                    help="start no new task after this many seconds (0: no limit)")
    ap.add_argument("--confirm", type=int, default=3,
                    help="re-time a task's five fastest schedules (within 15%%) this many times (0: off)")
    a = ap.parse_args()
    fracs = a.frac or [0.9]
    tmp = tempfile.mkdtemp(prefix="kf-ab-")
    store = a.store or os.path.join(tmp, "store.db")
    if a.from_json:
        saved = load_merged(a.from_json)
        confirms = saved.get("confirms", {})
        if a.tasks and a.confirm > 0:
            for task in a.tasks:
                name = os.path.basename(task)[:-3]
                rs = [r for r in saved["runs"] if r["task"] == name]
                if rs:
                    confirms[name] = confirm(a.kforge, task, saved["target"], rs, a.confirm, 0.85, store, tmp)
                    print(f"{name}: re-timed {len(confirms[name])} schedules x {a.confirm}", file=sys.stderr,
                          flush=True)
            saved["confirms"] = confirms
            if a.json:
                with open(a.json, "w") as f:
                    json.dump(saved, f, indent=1)
        score(saved["runs"], saved["iters"], saved["seeds"], fracs, confirms)
        return 0
    if not a.tasks:
        ap.error("name the tasks to run (or --from FILE.json)")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        commit = ""
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": os.uname().nodename,
            "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
                        "") if os.path.exists("/proc/cpuinfo") else "",
            "commit": commit, "command": " ".join(sys.argv)}
    runs, done, confirms = [], 0, {}
    t0 = time.time()
    for task in a.tasks:
        name = os.path.basename(task)[:-3]
        if a.deadline > 0 and time.time() - t0 > a.deadline:
            print(f"{name}: not started (--deadline {a.deadline:.0f} s passed)", file=sys.stderr, flush=True)
            continue
        path = task
        if a.scale > 1:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
            from kforge_torch import kf_task as kf_torch  # needs torch; only for GPU sizes
            path = os.path.join(tmp, name + ".kf")
            with open(task) as f, open(path, "w") as g:
                g.write(kf_torch.scale_task(f.read(), a.scale))
        res = {"builtin": [], "off": []}
        meas = {}  # schedule -> every time measured for it
        try:
            for seed in range(1, a.seeds + 1):
                for mode in ("builtin", "off"):  # interleaved: drift hits both alike
                    times, labels, rec = run(a.kforge, path, a.target, a.iters, seed, mode,
                                             os.path.join(tmp, f"{name}-{mode}-{seed}"), store, a.start)
                    res[mode].append((times, labels))
                    for t, lab in zip(times, labels):
                        if t is not None:
                            meas.setdefault(lab, []).append(t)
                    runs.append({"task": name, "mode": mode, "seed": seed, "times_ms": times,
                                 "schedules": labels,
                                 "followed": [it.get("followed", "") for it in rec["iterations"]]})
        except (RuntimeError, json.JSONDecodeError) as e:
            print(f"{name}: error: {e}", file=sys.stderr)
            continue
        if not meas:
            print(f"{name}: no verified candidate", file=sys.stderr)
            continue
        task_runs = [r for r in runs if r["task"] == name]
        try:
            confirms[name] = confirm(a.kforge, path, a.target, task_runs, a.confirm, 0.85, store, tmp)
        except RuntimeError as e:
            print(f"{name}: confirmation error: {e}", file=sys.stderr)
        meas = pooled(task_runs, confirms.get(name))
        point_ms = {lab: statistics.median(ts) for lab, ts in meas.items()}
        tgt = min(point_ms.values()) / fracs[0]
        on = [iters_to(labs, point_ms, tgt, a.iters) for _, labs in res["builtin"]]
        off = [iters_to(labs, point_ms, tgt, a.iters) for _, labs in res["off"]]
        done += 1
        print(f"{name}: best {min(point_ms.values()):.4g} ms ({len(point_ms)} schedules); iterations to "
              f"{round(100 * fracs[0])}%: analysis {on} vs random {off}  [{time.time() - t0:.0f} s]",
              file=sys.stderr, flush=True)
        if a.json:  # after every task: a run cut short keeps what it measured
            with open(a.json, "w") as f:
                json.dump({"target": a.target, "iters": a.iters, "seeds": a.seeds, "start": a.start, "meta": meta,
                           "runs": runs, "confirms": confirms}, f, indent=1)
    score(runs, a.iters, a.seeds, fracs, confirms)
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
