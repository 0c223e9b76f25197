#!/usr/bin/env python3
"""Measure and export-check every problem of the cpu-l1 suite.

For each NN_name.py beside this file: build Model(*get_init_inputs()), draw get_inputs()
under torch.manual_seed(0), run forward once to warm up, then time the median of 5 forwards
with torch.set_num_threads(2) (PyTorch eager, float32). Then torch.export.export the model
(no decompositions) and list the call_function targets of its graph.

The "other%" column is the share of all CPUs' time that other processes used while the
problem was timed: above BUSY_PCT the timing is flagged "busy" (measure again on a quiet
machine).

Flags: a median outside [5, 200] ms ("time"), a graph target outside the ops the kforge
importer lowers ("op"), a float input/parameter that is not float32 ("dtype"), an export
failure ("export"). Exit status 1 if anything is flagged.

usage: python3 suites/cpu-l1/measure.py [--threads N] [--runs N] [--no-export]
                                        [--quiet-wait S] [--retries K] [PATTERN ...]
"""
import argparse
import glob
import importlib.util
import operator
import os
import platform
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
LO_MS, HI_MS = 5.0, 200.0
BUSY_PCT = 10.0

ALLOWED = {
    "aten.relu.default", "aten.sigmoid.default", "aten.tanh.default", "aten.gelu.default",
    "aten.silu.default", "aten.selu.default", "aten.elu.default", "aten.hardsigmoid.default",
    "aten.hardtanh.default", "aten.softplus.default", "aten.leaky_relu.default",
    "aten.exp.default", "aten.log.default", "aten.sqrt.default", "aten.rsqrt.default",
    "aten.abs.default", "aten.neg.default", "aten.clamp.default",
    "aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor", "aten.div.Tensor",
    "aten.maximum.default", "aten.minimum.default",
    "aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor",
    "aten.sum.dim_IntList", "aten.sum.default", "aten.mean.dim", "aten.mean.default",
    "aten.amax.default", "aten.amin.default", "aten.max.dim", "aten.min.dim",
    "aten.prod.dim_int", "aten.prod.default", "aten.argmax.default", "aten.argmin.default",
    "aten.softmax.int", "aten._softmax.default", "aten.log_softmax.int",
    "aten._log_softmax.default", "aten.layer_norm.default", "aten.rms_norm.default",
    "aten.mm.default", "aten.bmm.default", "aten.matmul.default", "aten.linear.default",
    "aten.t.default", "aten.transpose.int", "operator.getitem",
}


def target_name(t):
    if t is operator.getitem:
        return "operator.getitem"
    if isinstance(t, torch._ops.OpOverload):
        return str(t)  # e.g. "aten.relu.default"
    return f"{getattr(t, '__module__', '?')}.{getattr(t, '__name__', repr(t))}"


def load(path):
    name = "cpu_l1_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def shape_of(out):
    if isinstance(out, torch.Tensor):
        s = "x".join(str(d) for d in out.shape) or "scalar"
        return s if out.dtype == torch.float32 else f"{s} {str(out.dtype).replace('torch.', '')}"
    if isinstance(out, (tuple, list)):
        return "(" + ", ".join(shape_of(o) for o in out) + ")"
    return type(out).__name__


def cpu_jiffies():
    """(all CPUs busy, all CPUs total, this process user+system) in clock ticks, or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        idle = v[3] + v[4]  # idle + iowait
        return sum(v[:8]) - idle, sum(v[:8]), int(st[11]) + int(st[12])
    except (OSError, ValueError, IndexError):
        return None


def time_forward(model, inputs, runs):
    """Median ms of `runs` forwards after one warm-up, and the share (%) of the machine's
    CPU time that other processes used meanwhile (None where /proc is not readable)."""
    with torch.no_grad():
        out = model(*inputs)  # warm-up
        ts = []
        j0 = cpu_jiffies()
        for _ in range(runs):
            t0 = time.perf_counter()
            out = model(*inputs)
            ts.append((time.perf_counter() - t0) * 1e3)
        j1 = cpu_jiffies()
    other = None
    if j0 and j1 and j1[1] > j0[1]:
        other = 100.0 * max(0, (j1[0] - j0[0]) - (j1[2] - j0[2])) / (j1[1] - j0[1])
    return statistics.median(ts), out, other


def wait_quiet(limit_s, probe_s=0.5):
    """Sleep until other processes use at most BUSY_PCT of the CPUs over a probe_s window,
    or limit_s has passed. Returns the last probe's share (%), or None without /proc."""
    t_end = time.monotonic() + limit_s
    while True:
        j0 = cpu_jiffies()
        time.sleep(probe_s)
        j1 = cpu_jiffies()
        if not (j0 and j1) or j1[1] <= j0[1]:
            return None
        other = 100.0 * max(0, (j1[0] - j0[0]) - (j1[2] - j0[2])) / (j1[1] - j0[1])
        if other <= BUSY_PCT or time.monotonic() >= t_end:
            return other


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--quiet-wait", type=float, default=0.0, metavar="S",
                    help="before timing a problem, wait up to S s for other processes to "
                         f"use under {BUSY_PCT:g}%% of the CPUs (default 0: do not wait)")
    ap.add_argument("--retries", type=int, default=0, metavar="K",
                    help="re-time a problem flagged busy up to K more times, keeping the "
                         "least disturbed attempt (default 0)")
    ap.add_argument("patterns", nargs="*", help="substrings of file names to keep")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    files = sorted(glob.glob(os.path.join(HERE, "[0-9][0-9]_*.py")))
    if a.patterns:
        files = [f for f in files if any(p in os.path.basename(f) for p in a.patterns)]

    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"{platform.machine()} {os.cpu_count()} CPUs, {a.runs} timed runs (median)")
    with open("/proc/loadavg") as f:
        print(f"# load average at start: {' '.join(f.read().split()[:3])}")
    print(f"{'file':<36} {'ms':>8} {'other%':>7}  {'output':<22} flags")
    total = 0.0
    nflag = 0
    ops_rows = []
    for path in files:
        base = os.path.basename(path)
        flags = []
        try:
            mod = load(path)
            model = mod.Model(*mod.get_init_inputs()).eval()
            torch.manual_seed(0)
            inputs = mod.get_inputs()
            for i, t in enumerate(list(inputs) + list(model.parameters()) + list(model.buffers())):
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float32:
                    flags.append(f"dtype({t.dtype})")
            best = None
            for _attempt in range(1 + max(0, a.retries)):
                if a.quiet_wait > 0:
                    wait_quiet(a.quiet_wait)
                ms, out, other = time_forward(model, inputs, a.runs)
                if best is None or (other or 0) < (best[2] or 0):
                    best = (ms, out, other)
                if other is None or other <= BUSY_PCT:
                    break
            ms, out, other = best
        except Exception as e:  # report, keep going
            print(f"{base:<36} {'-':>8} {'-':>7}  {'-':<22} ERROR {type(e).__name__}: {e}")
            nflag += 1
            continue
        total += ms
        if not (LO_MS <= ms <= HI_MS):
            flags.append(f"time(outside {LO_MS:g}-{HI_MS:g} ms)")
        if other is not None and other > BUSY_PCT:
            flags.append("busy")
        ops = []
        if not a.no_export:
            try:
                ep = torch.export.export(model, tuple(inputs))
                seen = []
                for n in ep.graph.nodes:
                    if n.op == "call_function":
                        tn = target_name(n.target)
                        if tn not in seen:
                            seen.append(tn)
                ops = seen
                bad = [o for o in ops if o not in ALLOWED]
                if bad:
                    flags.append("op(" + ", ".join(bad) + ")")
            except Exception as e:
                flags.append(f"export({type(e).__name__}: {str(e).splitlines()[0][:80]})")
        ops_rows.append((base, ops))
        nflag += bool(flags)
        oth = "-" if other is None else f"{other:.0f}"
        print(f"{base:<36} {ms:8.2f} {oth:>7}  {shape_of(out):<22} {' '.join(flags) or 'ok'}", flush=True)

    print(f"\n{len(files)} problems, sum of medians {total:.1f} ms, {nflag} flagged")
    if not a.no_export:
        print("\n# ATen targets per exported graph")
        for base, ops in ops_rows:
            print(f"{base:<36} {' '.join(o.replace('aten.', '') for o in ops)}")
        used = sorted({o for _, ops in ops_rows for o in ops})
        print(f"\n# {len(used)} distinct targets: {' '.join(used)}")
    return 1 if nflag else 0


if __name__ == "__main__":
    sys.exit(main())
