#!/usr/bin/env python3
"""Size and import-check every problem of the gpu-l1 suite without allocating it.

The problems are sized for an H200 (inputs plus output up to a few GiB): this script never
draws them. For each NN_name.py beside this file it builds Model(*get_init_inputs()) and
get_inputs() on the meta device (`with torch.device("meta")`: shapes and dtypes, no data),
then:

- torch.export.export(model, inputs) (no decompositions, as `kforge import` exports) and
  lists the graph's ATen targets;
- counts the bytes of the inputs, the parameters and buffers, and the outputs, and the
  forward's FLOPs (torch.utils.flop_counter on the meta run: matmuls, convolutions,
  attention; 0 for everything else);
- estimates the H200's eager time as the larger of bytes / 3.5 TB/s (each input, parameter
  and output moved once: a floor, eager may move more) and FLOPs / 40 TFLOP/s (float32
  without TF32); flags it outside [0.5, 50] ms (`time`), inputs plus output over 4 GiB
  (`size`), a floating input or parameter that is not float32 (`dtype`);
- with --lower: writes the bundle's graph.json through kforge_torch.importer.build_graph
  (the shapes of the full-size export) and runs `kforge import --lower DIR` on it, the C
  lowering that `kforge import` and `kforge bench` run. The importer reads an input's sample
  only for the `range` it records (a strictly positive float input, an int64 input's
  [min, max]): those come from the problem drawn at a shrunk size (bench/kernelbench.py's
  shrink, at most 200,000 input elements), so an int64 range is the small sample's.

With --shrink DIR it instead writes shrunk copies of the problems to DIR (shrink(), at most
--cap input elements each; constants up to 16 are kept), for a CPU run of `kforge import`
or `kforge bench` at small shapes.

usage: python3 suites/gpu-l1/check.py [--lower] [--kforge PATH] [--work DIR] [--markdown]
                                      [--dir FOLDER] [PATTERN ...]
       python3 suites/gpu-l1/check.py --shrink DIR [--cap N] [PATTERN ...]

Exit status 1 if anything is flagged or fails to export or lower.
"""
import argparse
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
from kforge_torch import importer  # noqa: E402

BYTES_PER_S = 3.5e12   # H200 HBM3e, a sustained rate (4.8 TB/s peak)
FLOPS_PER_S = 40e12    # float32 without TF32 (about 60 TFLOP/s peak on the SXM part)
LO_MS, HI_MS = 0.5, 50.0
MAX_BYTES = 4 * 2 ** 30
RANGE_CAP = 200_000


def problems(patterns, folder=HERE):
    files = sorted(glob.glob(os.path.join(folder, "[0-9][0-9]_*.py")))
    if patterns:
        files = [f for f in files if any(p in os.path.basename(f) for p in patterns)]
    return files


def kernelbench_module():
    spec = importlib.util.spec_from_file_location("kforge_kernelbench", os.path.join(ROOT, "bench", "kernelbench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts if isinstance(t, torch.Tensor))


def on_meta(path, seed=0):
    """(module, model, inputs, outputs, flops, exported program), all on the meta device."""
    mod = importer.load_module(path)
    torch.manual_seed(seed)
    with torch.device("meta"):
        model = mod.Model(*mod.get_init_inputs())
        torch.manual_seed(seed)
        inputs = list(mod.get_inputs())
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        outs = model(*inputs)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    ep = torch.export.export(model, tuple(inputs))
    if any(n.op == "call_function" and getattr(getattr(n.target, "_schema", None), "is_mutable", False)
           for n in ep.graph.nodes):
        ep = ep.run_decompositions({})  # as the importer does for in-place ops
    return mod, model, inputs, outs, counter.get_total_flops(), ep


def small_sample(path, kb, seed=0):
    """get_inputs() of the problem shrunk to at most RANGE_CAP input elements, drawn."""
    with tempfile.TemporaryDirectory() as d:
        dst = os.path.join(d, os.path.basename(path))
        kb.shrink(path, dst, RANGE_CAP)
        mod = importer.load_module(dst)
        torch.manual_seed(seed)
        return list(mod.get_inputs())


def lower(path, model, inputs, ep, kb, kforge, work):
    """graph.json of the full-size export, lowered by `kforge import --lower`: (ok, text)."""
    sample = small_sample(path, kb)
    name = importer.task_name(path)
    graph, _ = importer.build_graph(name, path, 0, model, sample, ep)
    bundle = os.path.join(work, name)
    os.makedirs(bundle, exist_ok=True)
    with open(os.path.join(bundle, "graph.json"), "w") as f:
        json.dump(graph, f, indent=1)
        f.write("\n")
    p = subprocess.run([kforge, "import", "--lower", bundle], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    text = (p.stdout.strip().splitlines() or [""])[0] if p.returncode == 0 else (p.stderr.strip() or p.stdout.strip())
    return p.returncode == 0, text.replace("\n", " ")


def fmt_gib(b):
    return f"{b / 2 ** 30:.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("patterns", nargs="*", help="only files whose name contains one of these")
    ap.add_argument("--lower", action="store_true", help="also lower each graph with `kforge import --lower`")
    ap.add_argument("--kforge", default=None, help="the kforge binary (default: build/kforge, else kforge on PATH)")
    ap.add_argument("--work", default=None, help="where --lower writes the bundles (default: a temporary folder)")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--dir", default=HERE, help="the problems' folder (default: this suite; e.g. shrunk copies)")
    ap.add_argument("--shrink", default=None, metavar="DIR", help="write shrunk copies to DIR instead")
    ap.add_argument("--cap", type=int, default=RANGE_CAP, help="--shrink: input elements at most (default 200000)")
    a = ap.parse_args(argv)
    files = problems(a.patterns, a.dir)
    if not files:
        print("check.py: no problem matches", file=sys.stderr)
        return 1
    kb = kernelbench_module()
    if a.shrink:
        os.makedirs(a.shrink, exist_ok=True)
        for f in files:
            note = kb.shrink(f, os.path.join(a.shrink, os.path.basename(f)), a.cap)
            print(f"{os.path.basename(f)}: {note}")
        return 0
    kforge = None
    if a.lower:
        kforge = a.kforge or os.path.join(ROOT, "build", "kforge")
        if not os.path.exists(kforge):
            kforge = shutil.which("kforge")
        if not kforge:
            print("check.py: --lower needs the kforge binary (build it, or --kforge PATH)", file=sys.stderr)
            return 1
    work = a.work or tempfile.mkdtemp(prefix="gpul1-check-")
    rows, bad = [], 0
    for f in files:
        base = os.path.basename(f)
        t0 = time.time()
        row = {"file": base, "flags": []}
        try:
            mod, model, inputs, outs, flops, ep = on_meta(f)
        except Exception as e:
            row["flags"].append("export")
            row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            rows.append(row)
            bad += 1
            print(f"{base}: EXPORT FAILED: {row['error']}", file=sys.stderr)
            continue
        params = list(model.parameters()) + list(model.buffers())
        ib, ob, pb = nbytes(inputs), nbytes(outs), nbytes(params)
        moved = ib + ob + pb
        ms_mem, ms_flop = 1e3 * moved / BYTES_PER_S, 1e3 * flops / FLOPS_PER_S
        est = max(ms_mem, ms_flop)
        row.update(inputs=ib, outputs=ob, params=pb, flops=flops, est_ms=est,
                   bound="flops" if ms_flop > ms_mem else "bytes",
                   out_shape="x".join(str(d) for d in outs[0].shape) or "scalar",
                   out_dtype=str(outs[0].dtype).replace("torch.", ""),
                   targets=sorted({importer.target_name(n.target) for n in ep.graph.nodes if n.op == "call_function"}))
        for t in list(inputs) + params:
            if isinstance(t, torch.Tensor) and t.dtype.is_floating_point and t.dtype != torch.float32:
                row["flags"].append("dtype")
                break
        if not LO_MS <= est <= HI_MS:
            row["flags"].append("time")
        if ib + ob > MAX_BYTES:
            row["flags"].append("size")
        if a.lower:
            try:
                ok, text = lower(f, model, inputs, ep, kb, kforge, work)
            except Exception as e:
                ok, text = False, f"{type(e).__name__}: {e}"
            row["lowered"] = ok
            row["lower_text"] = text
            if not ok:
                row["flags"].append("lower")
        row["check_s"] = time.time() - t0
        bad += bool(row["flags"])
        rows.append(row)
        if not a.markdown:
            low = "" if not a.lower else ("  lowered" if row["lowered"] else f"  NOT LOWERED: {row['lower_text'][:300]}")
            print(f"{base:44s} in {fmt_gib(ib):>5s} GiB  out {fmt_gib(ob):>5s} GiB  params {pb / 2 ** 20:7.1f} MiB  "
                  f"{flops / 1e9:7.1f} GFLOP  est {est:6.2f} ms ({row['bound']})  {' '.join(row['flags'])}{low}",
                  flush=True)
    if a.markdown:
        print("| file | output | inputs GiB | output GiB | GFLOP | est. ms | bound | ATen targets |")
        print("|---|---|---:|---:|---:|---:|---|---|")
        for r in rows:
            if "est_ms" not in r:
                print(f"| `{r['file']}` | export failed: {r['error']} | | | | | | |")
                continue
            tg = " ".join(t.replace("aten.", "") for t in r["targets"])
            out = r["out_shape"] + ("" if r["out_dtype"] == "float32" else f" {r['out_dtype']}")
            print(f"| `{r['file']}` | {out} | {fmt_gib(r['inputs'] + r['params'])} | {fmt_gib(r['outputs'])} | "
                  f"{r['flops'] / 1e9:.0f} | {r['est_ms']:.2f} | {r['bound']} | {tg} |")
    total = sum(r.get("inputs", 0) + r.get("outputs", 0) + r.get("params", 0) for r in rows)
    print(f"\n{len(rows)} problems, {bad} flagged; inputs + params + outputs {total / 2 ** 30:.1f} GiB in all; "
          f"estimated eager sum {sum(r.get('est_ms', 0) for r in rows):.1f} ms"
          + (f"; bundles in {work}" if a.lower else ""), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
