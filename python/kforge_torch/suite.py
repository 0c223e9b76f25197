"""A suite for `kforge bench`: its task list, shards of it, the summary of its rows, and the
merge of results written by several processes (shards, slots, Slurm array elements).

Nothing here needs torch, so that `kforge bench --merge-from DIR` and the parent of
`kforge bench --jobs N` start at once.

The shard rule (`--shard I/N`): a task belongs to shard 1 + (FNV-1a 64 of its file's base
name, UTF-8, e.g. "01_relu.py") mod N. A task's shard depends on its own name only, so
adding a task (at the end or anywhere) moves no other task, and any scheduler can split a
suite by running I = 1..N.

usage (merge): kforge bench --merge-from DIR [--json FILE] [--csv FILE]
DIR holds the JSON files that `kforge bench --json` wrote, one per shard (or slot); the
rows are put back in the suite's order and summarized as one process would have.
"""
import argparse
import csv
import glob
import json
import math
import os
import statistics
import sys
import time

P_VALUES = (0.0, 1.0, 1.5, 2.0)
FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- the task list and its shards ----

def list_tasks(suite, only):
    if os.path.isfile(suite):
        files = [suite]
    else:
        if not os.path.isdir(suite):
            log(f"kforge bench: {suite}: no such file or folder")
            raise SystemExit(2)  # a usage error, as the C side says before Python starts
        files = sorted(glob.glob(os.path.join(suite, "*.py")) + glob.glob(os.path.join(suite, "*.kf")))
    files = [f for f in files if not os.path.basename(f).startswith("_")]
    if only:
        keys = [k for k in only.split(",") if k]
        files = [f for f in files if any(k in os.path.basename(f) for k in keys)]
    return files


def is_problem(path):
    """A KernelBench problem defines Model, get_inputs and get_init_inputs at top level
    (read from the text, so that helper scripts in the folder are not run)."""
    with open(path) as f:
        text = f.read()
    return all(k in text for k in ("class Model", "def get_inputs", "def get_init_inputs"))


def suite_files(suite, only):
    """The suite's tasks in the order one process runs them (file-name order)."""
    return [f for f in list_tasks(suite, only) if f.endswith(".kf") or is_problem(f)]


def fnv1a64(text):
    h = FNV_OFFSET
    for b in text.encode("utf-8"):
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def shard_of(path, n):
    """The shard (1..n) of a task file: its base name's FNV-1a 64 hash mod n, plus one."""
    return 1 + fnv1a64(os.path.basename(path)) % n


def parse_shard(text):
    """(I, N) from "I/N" with 1 <= I <= N, or None."""
    i, sep, n = (text or "").partition("/")
    if not sep or not i.isdigit() or not n.isdigit():
        return None
    i, n = int(i), int(n)
    return (i, n) if 1 <= i <= n else None


def select_shard(files, shard):
    """The files of shard (I, N), in their order; all of them when shard is None."""
    if not shard:
        return list(files)
    i, n = shard
    return [f for f in files if shard_of(f, n) == i]


def order_key(row):
    """Rows in the order one process runs the suite: sorted by file path."""
    return row.get("file") or row.get("task") or ""


def bench_parser(description):
    """kforge bench's options (one parser for the single process, its slots and its shards)."""
    ap = argparse.ArgumentParser(prog="kforge bench", description=description)
    ap.add_argument("suite", nargs="?", help="a folder of KernelBench-format .py files and/or .kf tasks (or one file)")
    ap.add_argument("--kforge", default=os.environ.get("KFORGE", "kforge"), help=argparse.SUPPRESS)
    ap.add_argument("--target", default="cpu",
                    help="cpu (default: the kernel, eager and torch.compile on the CPU) or cuda[:N] "
                         "(all three on GPU N, timed with CUDA events, the L2 flushed before each "
                         "call); with --jobs, cuda (one slot per visible GPU) or cuda:0,2 (those GPUs)")
    ap.add_argument("--iters", type=int, default=3, help="candidates per task (default 3)")
    ap.add_argument("--time-budget", type=float, default=None, help="seconds of search per task")
    ap.add_argument("--memcheck", default="off", help="kforge synth --memcheck (default off)")
    ap.add_argument("--no-fuse", action="store_true",
                    help="kforge synth --no-fuse: every epilogue computed as its own stage (to compare)")
    ap.add_argument("--reps", type=int, default=20, help="timed rounds at most (default 20)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="kforge-out/bench", help="work folder (bundles, runs)")
    ap.add_argument("--json", default=None, help="write rows and summary as JSON")
    ap.add_argument("--csv", default=None, help="write the rows as CSV")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--prealloc", action="store_true",
                    help="time the kernel writing into outputs allocated once (default: it allocates "
                         "them on every call, as the module and the exported op do)")
    ap.add_argument("--eval", action="store_true",
                    help="import the modules in inference mode (model.eval()); default: the mode "
                         "they have after construction, as KernelBench runs them")
    ap.add_argument("--only", default=None,
                    help="only files whose name contains this (several: comma-separated)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    ap.add_argument("--agent", default=None, help="kforge synth --agent (builtin, llm, both); module tasks need llm")
    ap.add_argument("--llm-url", default=None, help="kforge synth --llm-url (the model's endpoint)")
    ap.add_argument("--model", default=None, help="kforge synth --model")
    ap.add_argument("--shard", default=None, metavar="I/N",
                    help="only the I-th of N parts of the suite: a task is in part 1 + (FNV-1a 64 "
                         "of its file name) mod N, so adding a task moves no other (docs/cluster.md)")
    ap.add_argument("--jobs", type=int, default=1, metavar="N",
                    help="tasks in N parallel slots: on the CPU each slot pinned to its own cores, "
                         "with --target cuda one slot per GPU (docs/cluster.md)")
    ap.add_argument("--task-timeout", type=float, default=3600, metavar="S",
                    help="with --jobs: a slot whose task gives no result in S seconds is killed "
                         "and the task counted as an error (default 3600)")
    ap.add_argument("--merge-from", default=None, metavar="DIR",
                    help="no run: the summary of the JSON results kforge bench --json wrote into "
                         "DIR (one per shard), as one process would print it")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return ap


# ---- the summary ----

def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(rows, compiled):
    n = len(rows)
    supported = [r for r in rows if r["status"] not in ("unsupported",)]
    correct = [r for r in rows if r["status"] == "ok"]
    s = {"tasks": n, "supported": len(supported), "correct": len(correct),
         "correctness": len(correct) / len(supported) if supported else None}
    for base in ("eager",) + (("compile",) if compiled else ()):
        key = f"speedup_{base}"
        for p in P_VALUES:
            s[f"fast_{p:g}_{base}"] = sum(1 for r in correct if r.get(key, 0) > p) / n if n else None
        s[f"geomean_{base}"] = geomean([r.get(key) for r in correct])
    s["mean_kforge_pct_floor"] = (statistics.mean(r["kforge_pct_floor"] for r in correct if "kforge_pct_floor" in r)
                                  if any("kforge_pct_floor" in r for r in correct) else None)
    s["mean_eager_pct_floor"] = (statistics.mean(r["eager_pct_floor"] for r in correct if "eager_pct_floor" in r)
                                 if any("eager_pct_floor" in r for r in correct) else None)
    return s


def fmt(v, spec="{:.2f}"):
    return "-" if v is None else spec.format(v)


def print_table(rows, s, compiled, out=sys.stdout, gpu=False):
    hdr = ["task", "status", "floor ms", "kforge ms", "eager ms"] + (["compile ms"] if compiled else []) + \
          ["x eager"] + (["x compile"] if compiled else []) + ["kforge %floor", "eager %floor", "max err"]
    lines = [hdr]
    for r in rows:
        line = [r["task"], r["status"], fmt(r.get("floor_ms"), "{:.3f}"), fmt(r.get("kforge_ms")),
                fmt(r.get("eager_ms"))]
        if compiled:
            line.append(fmt(r.get("compile_ms")))
        line.append(fmt(r.get("speedup_eager")))
        if compiled:
            line.append(fmt(r.get("speedup_compile")))
        line += [fmt(r.get("kforge_pct_floor"), "{:.0f}%"), fmt(r.get("eager_pct_floor"), "{:.0f}%"),
                 fmt(r.get("max_abs_err"), "{:.1e}")]
        lines.append(line)
    w = [max(len(str(l[c])) for l in lines) for c in range(len(hdr))]
    for k, l in enumerate(lines):
        print("  ".join(str(x).ljust(w[c]) if c < 2 else str(x).rjust(w[c]) for c, x in enumerate(l)), file=out)
        if k == 0:
            print("  ".join("-" * x for x in w), file=out)
    print(file=out)
    print(f"correct: {s['correct']} of {s['supported']} supported tasks ({fmt(s['correctness'] and 100 * s['correctness'], '{:.0f}%')}); "
          f"{s['tasks'] - s['supported']} unsupported", file=out)
    for base in ("eager",) + (("compile",) if compiled else ()):
        fp = ", ".join(f"fast_{p:g} {fmt(s[f'fast_{p:g}_{base}'], '{:.2f}')}" for p in P_VALUES)
        print(f"vs {base:7s}: {fp}; geomean speedup {fmt(s[f'geomean_{base}'])}x", file=out)
    how = ("both from this process's GPU times, CUDA events, L2 flushed before each call, as are "
           "the ratios" if gpu else "kforge's from kforge synth's time, caches flushed between runs; "
           "eager's from this process's warm-cache time, as are the ratios")
    print(f"mean % of roofline floor: kforge {fmt(s['mean_kforge_pct_floor'], '{:.0f}%')}, "
          f"eager {fmt(s['mean_eager_pct_floor'], '{:.0f}%')} ({how})", file=out)


def write_json(path, meta, summary, rows, partial):
    if not path:
        return
    doc = dict(meta)
    doc.update(partial=partial, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), summary=summary, rows=rows)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, path)  # a reader (a merge) never sees half a file


def write_csv(path, rows):
    if not path:
        return
    keys = sorted({k for r in rows for k in r})
    with open(path, "w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=keys)
        wr.writeheader()
        wr.writerows(rows)


def finish(rows, meta, compiled, gpu, wall_s, json_path, csv_path, out=None):
    """Orders the rows as one process would, prints the table and the summary, writes the
    JSON and CSV; returns the exit status (1 when a supported task is not correct)."""
    out = out or sys.stdout
    rows = sorted(rows, key=order_key)
    s = summarize(rows, compiled)
    s["wall_s"] = round(wall_s, 1)
    print_table(rows, s, compiled, out=out, gpu=gpu)
    print(f"({len(rows)} tasks in {s['wall_s']:.0f} s)", file=out)
    write_json(json_path, meta, s, rows, False)
    write_csv(csv_path, rows)
    bad = [r for r in rows if r["status"] not in ("ok", "unsupported")]
    return 1 if bad else 0


# ---- merging the results of several processes ----

class MergeError(Exception):
    pass


def merge_docs(docs):
    """(meta, rows, notes) from the JSON documents of several shards of one suite: every
    shard of 1..N present once, none partial, the same settings, no task twice. Raises
    MergeError naming what is wrong."""
    if not docs:
        raise MergeError("no results to merge (no *.json written by kforge bench --json)")
    same = ("suite", "target", "iters", "prealloc", "compiled", "seed")
    first = docs[0][1]
    for path, d in docs:
        for k in same:
            if d.get(k) != first.get(k):
                raise MergeError(f"{path}: {k} is {d.get(k)!r}, {docs[0][0]} has {first.get(k)!r} "
                                 f"(results of different runs)")
        if d.get("partial"):
            raise MergeError(f"{path}: partial results (its kforge bench did not finish)")
    shards = {}
    for path, d in docs:
        sh = d.get("shard") or "1/1"
        if sh in shards:
            raise MergeError(f"{path} and {shards[sh]} are both shard {sh}")
        shards[sh] = path
    ns = {int(sh.split("/")[1]) for sh in shards}
    if len(ns) != 1:
        raise MergeError(f"shards of different splits: {', '.join(sorted(shards))}")
    n = ns.pop()
    missing = [f"{i}/{n}" for i in range(1, n + 1) if f"{i}/{n}" not in shards]
    if missing:
        raise MergeError(f"missing shard(s) {', '.join(missing)} of {n}")
    rows, seen = [], {}
    for path, d in docs:
        for r in d.get("rows", []):
            k = order_key(r)
            if k in seen:
                raise MergeError(f"task {r.get('task')} is in both {seen[k]} and {path}")
            seen[k] = path
            rows.append(r)
    total = {d.get("suite_tasks") for _, d in docs} - {None}
    if len(total) == 1 and len(rows) != total.pop():
        raise MergeError(f"{len(rows)} rows, but the suite has {docs[0][1]['suite_tasks']} tasks")
    meta = {k: v for k, v in first.items() if k not in ("summary", "rows", "partial", "date", "shard", "wall_s")}
    meta["merged_from"] = len(docs)
    return meta, rows, max(d.get("summary", {}).get("wall_s", 0) or 0 for _, d in docs)


def read_dir(folder):
    docs = []
    for p in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(p) as f:
            try:
                d = json.load(f)
            except json.JSONDecodeError as e:
                raise MergeError(f"{p}: not JSON ({e})")
        if isinstance(d, dict) and "rows" in d and "suite" in d:
            docs.append((p, d))
    return docs


def merge_main(argv=None):
    ap = argparse.ArgumentParser(prog="kforge bench --merge-from",
                                 description="the summary of a suite from the results of its shards")
    ap.add_argument("--merge-from", required=True, metavar="DIR",
                    help="a folder of the JSON files kforge bench --json wrote, one per shard")
    ap.add_argument("--kforge", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help="write the merged rows and summary as JSON")
    ap.add_argument("--csv", default=None, help="write the merged rows as CSV")
    a, rest = ap.parse_known_args(argv)
    if rest:
        log(f"kforge bench --merge-from: {' '.join(rest)}: not an option of a merge (only --json, --csv)")
        return 2
    if not os.path.isdir(a.merge_from):
        log(f"kforge bench --merge-from: {a.merge_from}: no such folder")
        return 2
    try:
        docs = read_dir(a.merge_from)
        meta, rows, wall = merge_docs(docs)
    except MergeError as e:
        log(f"kforge bench --merge-from {a.merge_from}: {e}")
        return 2
    log(f"kforge bench: merged {len(rows)} tasks from {len(docs)} result files in {a.merge_from}")
    return finish(rows, meta, meta.get("compiled", True), meta.get("device", "cpu") != "cpu", wall, a.json, a.csv)


if __name__ == "__main__":
    sys.exit(merge_main())
