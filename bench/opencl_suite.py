#!/usr/bin/env python3
"""OpenCL benchmark of the builtin agent over the example tasks, against the CPU backend.

For every task: runs `kforge synth --target cpu` and then `kforge synth --target opencl[:N]`
(same binary, same machine, one right after the other, so both see the same machine state),
reads both run records and prints each best kernel's time, the OpenCL / CPU time ratio, and
where the OpenCL kernel sits on the roofline of the device it ran on.

On PoCL (an OpenCL device that is this CPU) both backends share one roofline, so the ratio
says what the OpenCL path costs against kforge's own C + OpenMP kernels on the same cores.

usage: bench/opencl_suite.py [--iters N] [--target opencl:0] [--kforge build/kforge]
                             [--markdown] [TASK.kf ...]
"""
import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import time


def run_synth(kforge, task, target, iters, outdir):
    cmd = [kforge, "synth", task, "--target", target, "--iters", str(iters), "--out", outdir,
           "--json", "-q", "--memcheck", "off"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    with open(os.path.join(outdir, "run.json")) as f:
        rec = json.load(f)
    best = next((i for i in rec["iterations"] if i["iter"] == rec.get("best_iter")), None)
    return rec, best, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tasks", nargs="*")
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--target", default="opencl")
    ap.add_argument("--kforge", default="build/kforge")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    tasks = args.tasks or sorted(glob.glob("tasks/*.kf"))
    rows, cdev, odev = [], None, None
    with tempfile.TemporaryDirectory() as tmp:
        for t in tasks:
            name = os.path.splitext(os.path.basename(t))[0]
            row = {"task": name}
            try:
                crec, cbest, cw = run_synth(args.kforge, t, "cpu", args.iters,
                                            os.path.join(tmp, name + "-cpu"))
                orec, obest, ow = run_synth(args.kforge, t, args.target, args.iters,
                                            os.path.join(tmp, name + "-ocl"))
            except Exception as e:  # one task's failure is a row, not the end
                row["error"] = str(e)
                rows.append(row)
                print(f"{name}: error: {e}", file=sys.stderr)
                continue
            cdev, odev = crec["device"], orec["device"]
            row.update(plan=orec["plan"], bound=orec["roofline"]["bound"],
                       floor_ms=orec["roofline"]["floor_ms"], cpu=cbest, ocl=obest,
                       ocl_status=[i["status"] for i in orec["iterations"]])
            rows.append(row)
            print(f"{name}: cpu {cw:.0f} s, opencl {ow:.0f} s", file=sys.stderr)

    hdr = ["task", "plan", "bound", "floor ms", "cpu best ms", "opencl best ms", "opencl/cpu",
           "opencl GB/s", "opencl % floor", "opencl schedule"]
    lines = []
    for r in rows:
        if "error" in r:
            lines.append([r["task"]] + ["-"] * 8 + ["error: " + r["error"][:80]])
            continue
        c, o = r["cpu"], r["ocl"]
        if not o:
            bad = ",".join(sorted(set(r["ocl_status"])))
            lines.append([r["task"], r["plan"], r["bound"], f"{r['floor_ms']:.3f}",
                          f"{c['time_ms']:.3f}" if c else "-", "-", "-", "-", "-",
                          "no verified kernel (" + bad + ")"])
            continue
        lines.append([r["task"], r["plan"], r["bound"], f"{r['floor_ms']:.3f}",
                      f"{c['time_ms']:.3f}" if c else "-", f"{o['time_ms']:.3f}",
                      f"{o['time_ms'] / c['time_ms']:.2f}x" if c else "-", f"{o['gbs']:.1f}",
                      f"{o['pct_floor']:.0f}%", o["candidate"]])
    if odev:
        oc = odev["ceilings"]
        print(f"machine: {platform.node()}; cpu: {cdev['name']} ({cdev['threads']} threads); "
              f"opencl: {odev['name']} ({odev.get('compiler', '')}); opencl ceilings: copy "
              f"{oc['copy_gbs']:.1f} GB/s, peak f32 {oc['peak_gflops_f32']:.1f} GFLOP/s; "
              f"{args.iters} iterations per task and target; "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if args.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        for l in lines:
            print("| " + " | ".join(l) + " |")
    else:
        w = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h)
             for i, h in enumerate(hdr)]
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
        for l in lines:
            print("  ".join(c.ljust(w[i]) for i, c in enumerate(l)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
