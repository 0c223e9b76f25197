#!/usr/bin/env python3
"""CPU benchmark of the builtin agent over the example tasks.

For every task: runs `kforge synth` (same binary, same machine, one after the other), reads its
run record, and prints the first candidate's time next to the best one's, the achieved GB/s and
GFLOP/s, and the fraction of the machine's measured limits (copy bandwidth for memory-bound
tasks, f32 FMA peak for compute-bound ones). For matmul tasks it also times OpenBLAS sgemm at
the same shape in the same run (bench/sgemm_openblas, built by `make bench`) and prints
kforge / OpenBLAS.

"% of limit" is achieved GB/s over the measured streaming read bandwidth (reductions) or copy
bandwidth (everything else) for memory-bound tasks, and achieved GFLOP/s over the measured f32
peak for compute-bound ones.

usage: bench/cpu_suite.py [--iters N] [--kforge build/kforge] [--sgemm build/sgemm_openblas]
                          [--markdown] [TASK.kf ...]
"""
import argparse
import glob
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time


def run_synth(kforge, task, iters, outdir):
    cmd = [kforge, "synth", task, "--iters", str(iters), "--out", outdir, "--json", "-q"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    with open(os.path.join(outdir, "run.json")) as f:
        return json.load(f), wall


def matmul_shape(task):
    """(M, N, K, batch) of a single-matmul task, read from the .kf text, or None."""
    text = open(task).read()
    ins = dict(re.findall(r"^input\s+(\w+)\s*:\s*f32\[([^\]]*)\]", text, re.M))
    m = re.search(r"matmul\((\w+)\s*,\s*(\w+)([^)]*)\)", text)
    if not m or m.group(1) not in ins or m.group(2) not in ins:
        return None
    a = [int(x) for x in ins[m.group(1)].split(",")]
    b = [int(x) for x in ins[m.group(2)].split(",")]
    ta = "transpose_a=true" in m.group(3)
    tb = "transpose_b=true" in m.group(3)
    M, K = (a[-1], a[-2]) if ta else (a[-2], a[-1])
    N = b[-2] if tb else b[-1]
    batch = 1
    for d in (a[:-2] if len(a) > len(b) else b[:-2]):
        batch *= d
    return M, N, K, batch, ta, tb


def run_sgemm(sgemm, outdir, shape, threads):
    """Time the best kernel and OpenBLAS sgemm interleaved in one process (bench/sgemm_openblas.c).
    Returns (kernel_ms, openblas_ms) or None."""
    M, N, K, batch, ta, tb = shape
    if batch != 1:
        return None
    man = json.load(open(os.path.join(outdir, "manifest.json")))
    so = os.path.join(outdir, "kernel.so")
    cc = man["compiler"].split()[0]
    build = [cc] + man["flags"].split() + ["-o", so, os.path.join(outdir, "kernel.c"), "-lm"]
    if subprocess.run(build, capture_output=True).returncode != 0:
        return None
    p = subprocess.run([sgemm, so, str(M), str(N), str(K), str(int(ta)), str(int(tb)), "7",
                        str(threads), "3"], capture_output=True, text=True)
    k = re.search(r"^kernel\s+median ([0-9.]+) ms", p.stdout, re.M)
    o = re.search(r"^openblas median ([0-9.]+) ms", p.stdout, re.M)
    if p.returncode != 0 or not k or not o:
        return None
    return float(k.group(1)), float(o.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tasks", nargs="*")
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--kforge", default="build/kforge")
    ap.add_argument("--sgemm", default="build/sgemm_openblas")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    tasks = args.tasks or sorted(glob.glob("tasks/*.kf"))
    rows = []
    dev = None
    with tempfile.TemporaryDirectory() as tmp:
        for t in tasks:
            name = os.path.splitext(os.path.basename(t))[0]
            try:
                rec, wall = run_synth(args.kforge, t, args.iters, os.path.join(tmp, name))
            except Exception as e:  # keep going: one task's failure is a row, not the end
                rows.append({"task": name, "error": str(e)})
                print(f"{name}: error: {e}", file=sys.stderr)
                continue
            dev = rec["device"]
            its = rec["iterations"]
            first = its[0] if its else None
            best = next((i for i in its if i["iter"] == rec.get("best_iter")), None)
            row = {"task": name, "plan": rec["plan"], "bound": rec["roofline"]["bound"],
                   "floor_ms": rec["roofline"]["floor_ms"], "wall_s": wall, "iters": len(its),
                   "first_ms": first.get("time_ms") if first else None,
                   "first_status": first["status"] if first else "-"}
            if best:
                row.update(best_ms=best["time_ms"], gbs=best["gbs"], gflops=best["gflops"],
                           pct=best["pct_floor"], schedule=best["candidate"])
            shape = matmul_shape(t) if rec["plan"] == "matmul" else None
            if shape and best and os.path.exists(args.sgemm):
                res = run_sgemm(args.sgemm, os.path.join(tmp, name), shape, dev["threads"])
                if res:
                    row["pair_kernel_ms"], row["openblas_ms"] = res
            rows.append(row)
            print(f"{name}: done in {wall:.0f} s", file=sys.stderr)

    ceil = dev["ceilings"] if dev else {}
    hdr = ["task", "plan", "bound", "first ms", "best ms", "best/first", "GB/s", "GFLOP/s",
           "% of limit", "% floor", "kforge ms (paired)", "OpenBLAS ms", "kforge/OpenBLAS"]
    lines = []
    for r in rows:
        if "error" in r or "best_ms" not in r:
            lines.append([r["task"], r.get("plan", "-"), "-", "-", "-", "-", "-", "-", "-", "-", "-", "-",
                          "error" if "error" in r else "no verified kernel"])
            continue
        # memory-bound: against streaming read bandwidth for reductions (they mostly read),
        # copy bandwidth otherwise; compute-bound: against the f32 FMA peak
        reduces = any(op in r["plan"] for op in ("sum", "mean", "max", "min", "prod", "argm"))
        bw = ceil["read_gbs"] if reduces else ceil["copy_gbs"]
        limit = (100.0 * r["gbs"] / bw) if r["bound"] == "memory" else \
                (100.0 * r["gflops"] / ceil["peak_gflops_f32"])
        ob = r.get("openblas_ms")
        pk = r.get("pair_kernel_ms")
        lines.append([r["task"], r["plan"], r["bound"],
                      f"{r['first_ms']:.3f}" if r["first_ms"] else r["first_status"],
                      f"{r['best_ms']:.3f}",
                      f"{r['first_ms'] / r['best_ms']:.2f}x" if r["first_ms"] else "-",
                      f"{r['gbs']:.1f}", f"{r['gflops']:.1f}", f"{limit:.0f}%", f"{r['pct']:.0f}%",
                      f"{pk:.3f}" if pk else "-", f"{ob:.3f}" if ob else "-",
                      f"{100.0 * ob / pk:.0f}%" if ob else "-"])
    if dev:
        print(f"machine: {dev['name']} ({dev['cores']} cores, {dev['threads']} threads, SIMD {dev['simd_bits']} bits), "
              f"{platform.node()}; measured copy {ceil['copy_gbs']:.1f} GB/s, read {ceil['read_gbs']:.1f} GB/s, "
              f"peak f32 {ceil['peak_gflops_f32']:.1f} GFLOP/s; {args.iters} iterations per task; "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if args.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        for l in lines:
            print("| " + " | ".join(l) + " |")
    else:
        w = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h) for i, h in enumerate(hdr)]
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
        for l in lines:
            print("  ".join(c.ljust(w[i]) for i, c in enumerate(l)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
