#!/usr/bin/env python3
"""kforge's CUDA kernels against PyTorch eager and torch.compile, timed in one process.

For every task: scales its shapes for the GPU (python/kforge_torch/kf_task.py: dimensions >= 1024 times
--scale), runs `kforge synth --target cuda` on it (the builtin agent's search, each
candidate verified against the float64 reference in kforge's sandbox), then loads the
kernel kforge handed back (kernel.cu, compiled here with NVRTC and the manifest's build
options; launched by the manifest's resolved launch plan through the driver API, on
PyTorch's stream, in PyTorch's context) and times it against the same computation in
PyTorch eager and under torch.compile (translated operator by operator from the task, never
by its name).

Checks in this process, on fresh random inputs: kforge's output buffers are filled with
NaN before the run (an unwritten element fails), and every output is compared with PyTorch
evaluated in float64 on the same inputs: relative L2 error ||out - ref|| / ||ref||, or the
fraction of equal indices for argmax/argmin. PyTorch's own error (its result in the task's
dtype) is printed beside.

Timing: CUDA events around one call, the L2 flushed (a 512 MiB write) before each call, the
three contenders interleaved call by call, median of --reps calls after warm-up. The floor is
the task's roofline floor from kforge's count of bytes and flops over the copy bandwidth
measured in this process (device-to-device copy of 2 GiB, read + write) and, for
compute-bound tasks, the FLOP rate of torch.matmul at 4096^3 in f32 with TF32 off (tasks
with f16/bf16 inputs: at 8192^3 in bf16, on the tensor cores).

usage: bench/cuda_vs_torch.py [--kforge build/kforge] [--scale 2] [--iters 10]
                              [--reps 30] [--out DIR] [--json FILE] [--no-compile]
                              [--markdown] [TASK.kf ...]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

import torch
import torch._dynamo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kforge_torch import kf_task as kf_torch  # noqa: E402
# the loader (NVRTC compile of kernel.cu with the manifest's options, the resolved launch plan
# launched with cuLaunchKernel on PyTorch's stream, in PyTorch's primary context)
from kforge_torch.cuda_kernel import load_cuda_kernel  # noqa: E402
# CUDA events around each call, a flush before it, contenders interleaved, median (and span)
from kforge_torch.bench import cuda_interleaved as bench_interleaved, l2_flush_buffer  # noqa: E402


# ---- measurement ----

def ceilings(flush):
    n = 1 << 29  # 2 GiB of f32
    a = torch.empty(n, dtype=torch.float32, device="cuda").normal_()
    b = torch.empty_like(a)
    t, _ = bench_interleaved({"copy": lambda: b.copy_(a)}, 10, flush)
    copy_gbs = 2 * a.numel() * 4 / (t["copy"] * 1e-3) / 1e9
    del a, b
    m = 4096
    x = torch.randn(m, m, device="cuda")
    y = torch.randn(m, m, device="cuda")
    t, _ = bench_interleaved({"mm": lambda: x @ y}, 10, flush)
    mm_gflops = 2 * m ** 3 / (t["mm"] * 1e-3) / 1e9
    # the 16-bit matrix rate (tensor cores through cuBLAS), for tasks with f16/bf16 matmuls
    m = 8192
    x = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    t, _ = bench_interleaved({"mm": lambda: x @ y}, 10, flush)
    mm16_gflops = 2 * m ** 3 / (t["mm"] * 1e-3) / 1e9
    return copy_gbs, {"f32": mm_gflops, "16": mm16_gflops}


def run_synth(kforge, task_path, outdir, iters, memcheck):
    cmd = [kforge, "synth", task_path, "--target", "cuda", "--iters", str(iters), "--out", outdir,
           "--json", "-q"]
    if memcheck:
        cmd += ["--memcheck", memcheck]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-600:]}")
    with open(os.path.join(outdir, "run.json")) as f:
        rec = json.load(f)
    return rec, wall


def check_outputs(task, got, ref64, ref32):
    """[(name, kforge error, torch f32 error, kind)] against the float64 reference."""
    res = []
    for name, g, r, r32 in zip(task.outputs, got, ref64, ref32):
        if not g.dtype.is_floating_point:
            eq = (g == r).double().mean().item()
            res.append((name, 1.0 - eq, 1.0 - (r32 == r).double().mean().item(), "mismatch"))
        else:
            res.append((name, kf_torch.rel_l2(g, r), kf_torch.rel_l2(r32, r), "rel_l2"))
    return res


def one_task(args, path, outroot, flush, copy_gbs, mm_gflops):
    with open(path) as f:
        text = kf_torch.scale_task(f.read(), args.scale)
    base = os.path.splitext(os.path.basename(path))[0]
    tdir = os.path.join(outroot, "tasks")
    os.makedirs(tdir, exist_ok=True)
    spath = os.path.join(tdir, base + ".kf")
    with open(spath, "w") as f:
        f.write(text)
    task = kf_torch.parse_task(text, spath)
    outdir = os.path.join(outroot, base)
    rec, wall = run_synth(args.kforge, spath, outdir, args.iters, args.memcheck)
    row = {"task": base, "shapes": " ".join(f"{n}{list(s)}" for n, _, s, _ in task.inputs),
           "synth_wall_s": wall, "plan": rec["plan"], "bound": rec["roofline"]["bound"],
           "bytes": rec["roofline"]["bytes"], "flops": rec["roofline"]["flops"],
           "kforge_floor_ms": rec["roofline"]["floor_ms"], "memcheck": rec.get("memcheck"),
           "statuses": [i["status"] for i in rec["iterations"]]}
    best = next((i for i in rec["iterations"] if i["iter"] == rec.get("best_iter")), None)
    if not best:
        row["error"] = "no verified kernel: " + ",".join(sorted(set(row["statuses"])))
        return row
    row["schedule"] = best["candidate"]
    row["kforge_sandbox_ms"] = best["time_ms"]

    gen = torch.Generator(device="cuda").manual_seed(1234)
    inputs = kf_torch.make_inputs(task, "cuda", gen)
    fn = kf_torch.torch_fn(task, args.kforge)
    with torch.no_grad():
        ref32 = fn(*inputs)
        ref64 = fn(*[t.double() if t.dtype.is_floating_point else t for t in inputs])
    outs = [torch.empty_like(r) for r in ref32]
    for o in outs:
        o.fill_(float("nan") if o.dtype.is_floating_point else -7)
    kk = load_cuda_kernel(outdir, sync=True)  # the check: a fault names its launch
    kk(*inputs, out=outs)
    kk.sync = False
    torch.cuda.synchronize()
    row["check"] = check_outputs(task, outs, ref64, ref32)
    del ref64

    contenders = {"kforge": lambda: kk(*inputs, out=outs), "eager": lambda: fn(*inputs)}
    if not args.no_compile:
        # every task's function is compiled through the same torch wrapper frame, which
        # Dynamo recompiles per task: past its recompile limit (8) it would run eagerly
        torch._dynamo.reset()
        cfn = torch.compile(fn, dynamic=False)
        t0 = time.time()
        with torch.no_grad():
            cout = cfn(*inputs)
        torch.cuda.synchronize()
        row["compile_s"] = time.time() - t0
        row["compile_check"] = [kf_torch.rel_l2(c, r) if c.dtype.is_floating_point
                                else float((c != r).double().mean()) for c, r in zip(cout, ref32)]
        contenders["compile"] = lambda: cfn(*inputs)
    with torch.no_grad():
        med, span = bench_interleaved(contenders, args.reps, flush)
    row["ms"], row["span_ms"] = med, span
    floor = row["bytes"] / (copy_gbs * 1e9)
    if row["bound"] == "compute":
        # a task with 16-bit inputs is a tensor-core matmul (the only 16-bit op kforge takes)
        rate = mm_gflops["16"] if any(dt in ("f16", "bf16") for _, dt, _, _ in task.inputs) else mm_gflops["f32"]
        floor = max(floor, row["flops"] / (rate * 1e9))
    row["floor_ms"] = floor * 1e3
    return row


def fmt_table(rows, markdown, no_compile):
    hdr = ["task", "shapes", "bound", "floor us", "kforge us", "eager us"]
    if not no_compile:
        hdr += ["compile us"]
    hdr += ["eager/kforge"]
    if not no_compile:
        hdr += ["compile/kforge"]
    hdr += ["kforge %floor", "eager %floor", "max err (f64 ref)", "kforge schedule"]
    lines = []
    for r in rows:
        if "error" in r:
            lines.append([r["task"], r.get("shapes", "")] + ["-"] * (len(hdr) - 3) +
                         ["error: " + r["error"][:100]])
            continue
        ms = r["ms"]
        l = [r["task"], r["shapes"], r["bound"], f"{r['floor_ms'] * 1e3:.1f}",
             f"{ms['kforge'] * 1e3:.1f}", f"{ms['eager'] * 1e3:.1f}"]
        if not no_compile:
            l += [f"{ms['compile'] * 1e3:.1f}"]
        l += [f"{ms['eager'] / ms['kforge']:.2f}x"]
        if not no_compile:
            l += [f"{ms['compile'] / ms['kforge']:.2f}x"]
        err = max(c[1] for c in r["check"])
        l += [f"{100 * r['floor_ms'] / ms['kforge']:.0f}%", f"{100 * r['floor_ms'] / ms['eager']:.0f}%",
              f"{err:.1e}", r["schedule"]]
        lines.append(l)
    if markdown:
        out = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
        out += ["| " + " | ".join(l) + " |" for l in lines]
    else:
        w = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h) for i, h in enumerate(hdr)]
        out = ["  ".join(h.ljust(w[i]) for i, h in enumerate(hdr))]
        out += ["  ".join(c.ljust(w[i]) for i, c in enumerate(l)) for l in lines]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tasks", nargs="*")
    ap.add_argument("--kforge", default="build/kforge")
    ap.add_argument("--scale", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--memcheck", default=None, help="passed to kforge synth --memcheck")
    ap.add_argument("--out", default="kforge-out/cuda-bench")
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("cuda_vs_torch: PyTorch sees no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    tasks = args.tasks or sorted(glob.glob("tasks/*.kf"))
    flush = l2_flush_buffer()
    copy_gbs, mm_gflops = ceilings(flush)
    print(f"ceilings measured in this process: copy {copy_gbs:.0f} GB/s (read+write), "
          f"torch.matmul f32 4096^3 (TF32 off) {mm_gflops['f32'] / 1e3:.1f} TFLOP/s, "
          f"bf16 8192^3 {mm_gflops['16'] / 1e3:.1f} TFLOP/s", file=sys.stderr)
    rows = []
    for t in tasks:
        try:
            row = one_task(args, t, args.out, flush, copy_gbs, mm_gflops)
        except Exception as e:  # one task's failure is a row, not the end
            row = {"task": os.path.basename(t), "error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        if "error" in row:
            print(f"{row['task']}: {row['error']}", file=sys.stderr)
        else:
            ms = row["ms"]
            print(f"{row['task']}: synth {row['synth_wall_s']:.0f} s; kforge {ms['kforge'] * 1e3:.1f} us, "
                  f"eager {ms['eager'] * 1e3:.1f} us" +
                  (f", compile {ms['compile'] * 1e3:.1f} us" if "compile" in ms else "") +
                  f"; errors {[(c[0], f'{c[1]:.1e}') for c in row['check']]}", file=sys.stderr)
        sys.stderr.flush()
        torch.cuda.empty_cache()
    dev = torch.cuda.get_device_properties(0)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {dev.name}, {dev.multi_processor_count} SMs; "
          f"torch {torch.__version__}; copy {copy_gbs:.0f} GB/s, f32 matmul {mm_gflops['f32'] / 1e3:.1f} TFLOP/s, "
          f"bf16 {mm_gflops['16'] / 1e3:.1f} TFLOP/s "
          f"(same process); scale x{args.scale}; {args.iters} candidates per task; median of {args.reps} "
          f"interleaved calls, L2 flushed before each")
    print(fmt_table(rows, args.markdown, args.no_compile))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_gbs": copy_gbs, "mm_gflops": mm_gflops, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
