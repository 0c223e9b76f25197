#!/usr/bin/env python3
"""A KernelBench checkout's problems through kforge: the import sweep and `kforge bench`.

usage: bench/kernelbench.py KERNELBENCH_DIR [--level 1] [--cap N] [--only A,B] [--work DIR]
                            [--json FILE] [--bench [kforge bench options ...]]

KernelBench is public and is not copied into this repository: fetch it (git clone
https://github.com/ScalingIntelligence/KernelBench) and point this script at the checkout.

Its problems are sized for a datacenter GPU. With --cap N (default 4,000,000; 0 keeps the
official shapes) each problem is copied into the work folder (default
kforge-out/kernelbench/levelL) with its module-level integer constants (batch_size, dim, N,
in_channels, ...) halved, the largest ones first (equal ones together), until its inputs hold at most N elements
(counted on the meta device, nothing allocated); constants up to 16 (kernel sizes, strides,
padding, dilation, groups) are never changed. A halving that breaks the problem (its forward,
run on the meta device, raises: a LayerNorm over a width whose size another constant sets) is
not taken: the largest constants are halved together, else with the next size down, else one
or two at a time; if none fits, the problem stays above the cap. Then the module is built and
run on real CPU tensors at the shapes reached: where it raises there or gives an empty output
(an assertion on the image size the meta device never reached, a pool that shrinks to
nothing), the halvings are undone one at a time until it runs, back to the official shapes if
need be. Each copy's header says what was shrunk. The
copies are the user's problems at smaller shapes, not kforge's own suite. KernelBench level
3's 48 and 49 import einops (scripts/setup.sh installs it).

Without --bench: `kforge import` on every copy; prints one row per problem (imported, or the
ops that stopped it) and the count, and writes --json. With --bench: `kforge bench` on the
work folder, with the options that follow --bench.

Exit status: 0 when it ran (whatever imported), 2 on a usage error.
"""
import argparse
import ast
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KEEP_BELOW = 17  # constants up to 16 are kernel sizes, strides, paddings, groups: kept


def module_ints(tree):
    """The module-level `NAME = <int expression>` assignments (4096, 256 * 8, 2 ** 10, a
    previous name times a number), unpackings (`depth, height, width = 16, 32, 32`) and
    chains (`height = width = 128`),
    evaluated: {name: value}; and tuples of ints as NAME__i."""
    out, env = {}, {}

    def let(name, val):
        if type(val) is int:
            out[name] = env[name] = val
        elif isinstance(val, tuple) and val and all(type(x) is int for x in val):
            env[name] = val
            for i, x in enumerate(val):
                out[f"{name}__{i}"] = x

    for st in tree.body:
        if not isinstance(st, ast.Assign):
            continue
        try:
            val = eval(compile(ast.Expression(st.value), "<const>", "eval"), {"__builtins__": {}}, dict(env))
        except Exception:
            continue
        for target in st.targets:  # `height = width = 128` has two
            if isinstance(target, ast.Name):
                let(target.id, val)
            elif (isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(t, ast.Name) for t in target.elts)
                  and isinstance(val, (tuple, list)) and len(val) == len(target.elts)):
                for t, v in zip(target.elts, val):
                    let(t.id, v)
    return out


def assignments(consts):
    """Python lines that set the constants (tuples put back together)."""
    lines, tuples = [], {}
    for k, v in consts.items():
        if "__" in k and k.rsplit("__", 1)[1].isdigit():
            base, i = k.rsplit("__", 1)
            tuples.setdefault(base, {})[int(i)] = v
        else:
            lines.append(f"{k} = {v}")
    for base, parts in tuples.items():
        lines.append(f"{base} = ({', '.join(str(parts[i]) for i in sorted(parts))},)")
    return lines


def input_numel(src, consts, run_forward=False):
    """Elements in get_inputs() and in the module's parameters with these constants, on the
    meta device; with run_forward, the forward runs there too (its shape checks: a LayerNorm
    over a dim that another constant sets) and whatever it raises propagates."""
    import torch
    ns = {}
    code = src + "\n" + "\n".join(assignments(consts)) + "\n"
    with torch.device("meta"):
        exec(compile(code, "<kernelbench>", "exec"), ns)
        ins = ns["get_inputs"]()
        model = None
        try:
            model = ns["Model"](*ns["get_init_inputs"]())
            params = sum(p.numel() for p in model.parameters())
        except Exception:
            if run_forward:
                raise
            params = 0
        if run_forward:
            with torch.no_grad():
                model(*ins)
    n = sum(x.numel() for x in ins if hasattr(x, "numel"))
    return n + params


def real_forward_error(src, consts):
    """None where the problem, with these constants, builds and runs its forward on real CPU
    tensors (under seed 0, no grad); else what it raised, one line. The meta device's checks
    are not the module's own (a Python assertion on a size that another path makes, a
    library the meta build skips), so the shapes kept are the ones the module ran at."""
    import torch
    ns = {}
    code = src + "\n" + "\n".join(assignments(consts)) + "\n"
    try:
        exec(compile(code, "<kernelbench>", "exec"), ns)
        torch.manual_seed(0)
        model = ns["Model"](*ns["get_init_inputs"]())
        torch.manual_seed(0)
        ins = ns["get_inputs"]()
        with torch.no_grad():
            out = model(*ins)
        outs = out if isinstance(out, (tuple, list)) else [out]
        empty = [i for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.numel() == 0]
        if empty:
            return f"output {empty[0]} has no elements"
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
    return None


def halvings(cur):
    """The sets of constants to try halving next, in order: the largest ones together (equal
    sizes may have to match), then with the next size down as well (a channel count that
    must follow a spatial size: LayerNorm(out_channels) over the width), then each one
    alone, then each pair, largest first."""
    big = sorted((k for k, v in cur.items() if v >= KEEP_BELOW), key=lambda k: -cur[k])
    sizes = sorted({cur[k] for k in big}, reverse=True)
    groups = [[k for k in big if cur[k] == v] for v in sizes]
    out = []
    if groups:
        out.append(groups[0])
        out += [groups[0] + g for g in groups[1:]]
    out += [[k] for k in big]
    out += [[a, b] for i, a in enumerate(big) for b in big[i + 1:]]
    seen, uniq = set(), []
    for c in out:
        key = frozenset(c)
        if key not in seen:
            seen.add(key)
            uniq.append(c)
    return uniq


def shrink(path, dst, cap):
    """Copies the problem to dst with its large constants halved until its inputs fit cap.
    Returns a note of what changed."""
    src = open(path).read()
    if cap <= 0:
        open(dst, "w").write(src)
        return "official shapes"
    consts = module_ints(ast.parse(src))
    cur = dict(consts)
    try:
        n = input_numel(src, cur)
        try:  # a forward that runs on the meta device must still run after each halving
            input_numel(src, cur, run_forward=True)
            check = True
        except Exception:
            check = False
        history = [(dict(cur), n)]
        while n > cap:
            for keys in halvings(cur):
                trial = dict(cur)
                for k in keys:
                    trial[k] = max(KEEP_BELOW - 1, trial[k] // 2)
                try:
                    m = input_numel(src, trial, run_forward=check)
                except Exception:
                    continue  # these shapes break the problem: another set
                cur, n = trial, m
                history.append((dict(cur), n))
                break
            else:
                break  # no halving keeps the problem running: left above the cap
        # the module itself must run at the shapes kept (on the meta device a forward may
        # pass that raises on real tensors, or not run at all): the smallest shapes of the
        # way down at which it does, else the official ones
        refused = None
        while len(history) > 1:
            # (a state far above the cap is not run for real: memory and time)
            why = real_forward_error(src, history[-1][0]) if history[-1][1] <= 16 * cap else "not tried"
            if why is None:
                break
            refused = refused or why
            history.pop()
        cur, n = history[-1]
    except Exception as e:  # the problem itself fails at these shapes: leave it as it is
        open(dst, "w").write(src)
        return f"not shrunk ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''})"
    if cur == consts:
        open(dst, "w").write(src)
        return "official shapes" + (f" (the module refuses every smaller shape tried: {refused})" if refused else "")
    changed = {k: (consts[k], v) for k, v in cur.items() if consts[k] != v}
    note = ", ".join(f"{k} {a}->{b}" for k, (a, b) in changed.items()) or "unchanged"
    lines = [line + "  # set by kernelbench.py" for line in assignments(cur)]
    header = (f"# {os.path.basename(path)} from KernelBench, shapes shrunk by bench/kernelbench.py "
              f"to at most {cap} input elements: {note}\n")
    # the overrides go after the last module-level constant, before get_inputs reads them
    tree = ast.parse(src)
    last = max((st.end_lineno for st in tree.body if isinstance(st, ast.Assign)), default=0)
    body = src.splitlines()
    body[last:last] = lines
    open(dst, "w").write(header + "\n".join(body) + "\n")
    return f"{note} ({n} elements)"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    bench_args = None
    if "--bench" in argv:
        i = argv.index("--bench")
        argv, bench_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernelbench")
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--cap", type=int, default=4_000_000)
    ap.add_argument("--only", default=None)
    ap.add_argument("--work", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--kforge", default=os.path.join(ROOT, "build", "kforge"))
    a = ap.parse_args(argv)
    d = os.path.join(a.kernelbench, "KernelBench", f"level{a.level}")
    if not os.path.isdir(d):
        d = os.path.join(a.kernelbench, f"level{a.level}")
    if not os.path.isdir(d):
        print(f"kernelbench.py: no level{a.level} folder under {a.kernelbench}", file=sys.stderr)
        return 2
    work = a.work or os.path.join(ROOT, "kforge-out", "kernelbench", f"level{a.level}")
    os.makedirs(work, exist_ok=True)
    files = sorted((f for f in os.listdir(d) if f.endswith(".py")), key=lambda f: (int(f.split("_")[0]) if f.split("_")[0].isdigit() else 1 << 30, f))
    if a.only:
        keys = a.only.split(",")  # problem numbers ("4,12") or parts of names ("conv")
        files = [f for f in files if any(f.split("_")[0] == k if k.isdigit() else k in f for k in keys)]
    notes = {}
    for f in files:
        notes[f] = shrink(os.path.join(d, f), os.path.join(work, f), a.cap)
    if bench_args is not None:
        cmd = [a.kforge, "bench", work] + bench_args
        print("+ " + " ".join(cmd), flush=True)
        return subprocess.call(cmd)
    rows, ok = [], 0
    for f in files:
        t0 = time.time()
        out = os.path.join(work, "import", f[:-3])
        p = subprocess.run([a.kforge, "import", os.path.join(work, f), "--out", out],
                           capture_output=True, text=True)
        msg = (p.stderr or p.stdout).strip()
        blockers = sorted(set(re.findall(r"\((aten\.[\w.]+|[\w.]+)\):", msg)))
        kind = None
        if p.returncode == 0:  # a graph task, or a module task (some op does not lower): a
            # mixed one where parts of its graph lower (NAME.partK.kf beside it)
            with open(os.path.join(out, "task.kf")) as tf:
                kind = "module" if any(l.startswith("module ") for l in tf) else "graph"
            if kind == "module" and any(re.search(r"\.part\d+\.kf$", f) for f in os.listdir(out)):
                kind = "mixed"
        row = {"problem": f, "imported": p.returncode == 0, "kind": kind, "exit": p.returncode, "shapes": notes[f],
               "blockers": blockers, "message": msg[-2000:] if p.returncode else "", "seconds": round(time.time() - t0, 1)}
        ok += row["imported"]
        rows.append(row)
        why = (", ".join(blockers) if kind in ("module", "mixed") else "") if row["imported"] else \
            (", ".join(blockers) or msg.splitlines()[-1][:150] if msg else "?")
        tag = {"graph": "ok  ", "module": "mod ", "mixed": "mix "}.get(kind, "FAIL")
        print(f"{tag} {f:70s} {why}", flush=True)
    nmod = sum(r["kind"] == "module" for r in rows)
    nmix = sum(r["kind"] == "mixed" for r in rows)
    print(f"\n{ok} of {len(rows)} level-{a.level} problems imported ({ok - nmod - nmix} graph tasks, {nmod} module "
          f"tasks, {nmix} mixed tasks: module tasks with parts kforge lowers)")
    if a.json:
        json.dump({"level": a.level, "cap": a.cap, "imported": ok, "total": len(rows), "rows": rows},
                  open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
