#!/usr/bin/env python3
"""What a module task's reference costs per input set, for each reference kind (issue 26).

usage: python3 bench/module_ref_cost.py MODEL.py [MODEL.py ...] [--kinds K,K] [--sets N]
                                        [--work DIR] [--json FILE]

For each KernelBench-format module (at the shapes its file gives): the module task is made
(python3 -m kforge_torch.module_task, as `kforge import` makes one), N input sets are drawn
as the verifier lays them out (uniform [0, 1) as KernelBench's get_inputs draws; the
verifier's own distributions cost the same to run), and the reference process
(python3 -m kforge_torch.reference, the process `kforge synth` starts) is timed per KIND:
once with set 0 alone and once with sets 0..N-1, each a fresh process, so per set =
(t_N - t_1) / (N - 1) and the process's start (torch's import, the module's first build) is
t_1 less one set. KINDS default cpu-f64,cuda-f64,cuda-f32 (a GPU kind without a CUDA device
in torch is reported as refused: exit 4). Nothing here is asserted: it prints and writes rows.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PYPATH = os.path.join(HERE, "..", "python")
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i64": np.int64, "bool": np.bool_}


def run(cmd, env):
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return time.monotonic() - t0, p.returncode, (p.stderr or p.stdout).strip().splitlines()[-1:] or [""]


def draw_sets(spec, wdir, n):
    rng = np.random.default_rng(1)
    for s in range(n):
        with open(os.path.join(wdir, f"in.{s}"), "wb") as f:
            for x in spec["inputs"]:
                shape = x["shape"]
                if x["dtype"] == "bool":
                    a = rng.random(shape) < 0.5
                elif x["dtype"] == "i64":
                    a = rng.integers(0, 2, size=shape, dtype=np.int64)
                else:
                    a = rng.random(shape, dtype=np.float32).astype(NP[x["dtype"]])
                f.write(np.ascontiguousarray(a).tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--kinds", default="cpu-f64,cuda-f64,cuda-f32")
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--work", default="/tmp/kf-refcost")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.sets < 2:
        ap.error("--sets must be at least 2 (per set = (t_N - t_1) / (N - 1))")
    env = dict(os.environ)
    env["PYTHONPATH"] = PYPATH + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    rows = []
    for m in a.models:
        name = os.path.splitext(os.path.basename(m))[0]
        d = os.path.join(a.work, name)
        os.makedirs(d, exist_ok=True)
        t, rc, last = run([sys.executable, "-m", "kforge_torch.module_task", m, d, "--name", "t"], env)
        print(f"== {name}: module task made in {t:.1f} s (exit {rc}) {last[0]}", flush=True)
        if rc != 0:
            rows.append({"model": name, "error": last[0]})
            continue
        spec_path = os.path.join(d, "t.json")
        spec = json.load(open(spec_path))
        draw_sets(spec, d, a.sets)
        for kind in a.kinds.split(","):
            sets_all = ",".join(str(s) for s in range(a.sets))
            t1, rc1, l1 = run([sys.executable, "-m", "kforge_torch.reference", spec_path, d, "0", "5", kind], env)
            tn, rcn, ln = (0.0, rc1, l1) if rc1 != 0 else \
                run([sys.executable, "-m", "kforge_torch.reference", spec_path, d, sets_all, "5", kind], env)
            row = {"model": name, "kind": kind, "flops": spec.get("flops"), "sets": a.sets,
                   "t_1set_s": round(t1, 3), "t_nsets_s": round(tn, 3), "exit": rcn}
            if rc1 == 0 and rcn == 0:
                per = (tn - t1) / (a.sets - 1)
                row.update(per_set_s=round(per, 3), start_s=round(t1 - per, 3))
                print(f"  {kind:9s} 1 set {t1:7.2f} s  {a.sets} sets {tn:7.2f} s  per set {per:7.2f} s  "
                      f"start {t1 - per:6.2f} s", flush=True)
            else:
                row["error"] = (ln or l1)[0]
                print(f"  {kind:9s} exit {rc1}/{rcn}: {row['error']}", flush=True)
            rows.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
