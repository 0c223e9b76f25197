"""A KernelBench-format module whose ops kforge cannot all lower -> a module task.

usage: python3 -m kforge_torch.module_task --bundle DIR [--why TEXT] [--kforge PATH]
       python3 -m kforge_torch.module_task MODEL.py DIR [--seed N] [--name NAME] [--eval]

Writes DIR/task.kf (`module NAME`, the forward's tensor arguments as `input`s, the module's
state_dict as `param`s, the outputs with their types, the cost), and beside it NAME.py (the
module's source, copied), NAME.json (what the reference process needs: docs/task-format.md,
"Module tasks") and NAME.weights (the params' values, raw little-endian, in `param` order).
The module is built as the importer builds it: Model(*get_init_inputs()) under
torch.manual_seed(seed), get_inputs() under the same seed; its forward is run once in float32
(the outputs' shapes and dtypes, the FLOPs) and once in float64 (the tolerance check).
--bundle DIR takes the model, seed, name and mode from DIR/graph.json (kforge import writes
it before it tries to lower the graph); with --kforge (the kforge binary) and --why (kforge
import's message naming the nodes it cannot lower), the parts of the graph it can lower are
written beside the task too, as NAME.partK.kf (kforge_torch.parts: a mixed task).

Exit status: 0 written, 2 the module cannot become a module task (one line says why).
"""
import argparse
import json
import math
import os
import re
import shutil
import sys

import torch

from kforge_torch.importer import (DTYPES, ImportFailure, describe, load_module, task_name,
                                   user_step)

FORMAT = "kforge-module"
VERSION = 1
KEYWORDS = {"task", "input", "output", "tolerance", "module", "param", "cost", "range"}
ITEM_BYTES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i64": 8, "bool": 1}
# the most buffers (inputs, params, outputs) one kernel takes (src/verify/runproto.h)
MAX_BUFS = 64
# the verifier's default float32 tolerances (docs/task-format.md)
ATOL, RTOL, NMSE = 1e-4, 1e-4, 1e-8


def ident(text, taken):
    """text as a .kf name: [A-Za-z_][A-Za-z0-9_]*, at most 63 characters, no keyword, not
    in taken (a suffix makes it unique); added to taken."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", text)[:56] or "v"
    if not re.match(r"[A-Za-z_]", s):
        s = "v" + s
    base, k = s, 1
    while s in taken or s in KEYWORDS:
        s, k = f"{base}_{k}", k + 1
    taken.add(s)
    return s


def dtype_of(t, what):
    dt = DTYPES.get(t.dtype)
    if dt is None or dt == "i32":
        raise ImportFailure(f"{what} has dtype {t.dtype}, which kforge cannot pass to a kernel")
    return dt


def input_domain(x):
    """What the sample of a forward argument says its values are (docs/task-format.md): a
    float sample within [0, 1) was drawn by torch.rand: range(0, 1); a strictly positive one
    keeps its span; any other float input is drawn from every distribution; an integer one
    keeps its span (class indices)."""
    if not x.numel():
        return None
    if x.dtype.is_floating_point:
        lo, hi = x.min().item(), x.max().item()
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return None
        if 0 <= lo and hi < 1:
            return [0, 1]
        if 0 < lo < hi:
            return [lo, hi]
        return None
    if x.dtype == torch.int64:
        lo, hi = x.min().item(), x.max().item()
        return [lo, hi if hi > lo else lo + 1]
    return None


def count_flops(model, args):
    """FLOPs of one forward as torch.utils.flop_counter counts them (matmuls, convolutions,
    attention: the ops it has formulas for; elementwise ops count 0). Counted twice, as the
    module runs and with oneDNN off, and the larger kept: on the CPU an nn.LSTM runs as one
    fused oneDNN op the counter has no formula for (0 FLOPs), and without oneDNN as the
    matmuls it is made of."""
    import warnings
    from torch.utils.flop_counter import FlopCounterMode
    best = 0.0
    for onednn in (True, False):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with torch.backends.mkldnn.flags(enabled=onednn), FlopCounterMode(display=False) as fc, \
                        torch.no_grad():
                    model(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
            best = max(best, float(fc.get_total_flops()))
        except Exception:
            pass
    return best


def tolerance_needed(outs32, outs64):
    """(atol, nmse) when float32 PyTorch on the import sample would fail the default
    tolerances against float64 (a long chain of ops), else None: four times the error it
    showed for atol (in units of the output's RMS, as the verifier scales it), sixteen
    times its NMSE."""
    worst_a, worst_n = 0.0, 0.0
    for a, b in zip(outs32, outs64):
        if not a.dtype.is_floating_point:
            continue
        got, want = a.double(), b.double()
        fin = torch.isfinite(want) & torch.isfinite(got)
        if not fin.any():
            continue
        got, want = got[fin], want[fin]
        s = max(1.0, want.pow(2).mean().sqrt().item())
        excess = ((got - want).abs() - RTOL * want.abs()).max().item() / s
        den = want.pow(2).sum().item()
        nm = (got - want).pow(2).sum().item() / den if den > 0 else 0.0
        worst_a, worst_n = max(worst_a, excess), max(worst_n, nm)
    if worst_a <= ATOL / 2 and worst_n <= NMSE / 2:
        return None
    return max(ATOL, 4 * worst_a), max(NMSE, 16 * worst_n)


def module_state(model):
    """(key, tensor, is_attr) for what the module computes with besides its arguments: its
    state_dict (parameters and persistent buffers, in its order), then the tensors it holds
    as plain attributes (`self.hidden = torch.randn(...)`, no buffer: in no state_dict), by
    'submodule.attribute' key."""
    out = [(k, t, False) for k, t in model.state_dict().items()]
    seen = {id(t) for _, t, _ in out}
    for mname, m in model.named_modules():
        for aname, t in vars(m).items():
            if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter) and id(t) not in seen:
                seen.add(id(t))
                out.append((f"{mname}.{aname}" if mname else aname, t, True))
    return out


def build(model_path, seed, eval_mode, path_name):
    mod = load_module(model_path)
    torch.manual_seed(seed)
    init = user_step(model_path, "get_init_inputs()", mod.get_init_inputs)
    if not isinstance(init, (list, tuple)):
        raise ImportFailure(f"{model_path}: get_init_inputs() returned {describe(init)}, not a list")
    model = user_step(model_path, "Model(*get_init_inputs())", mod.Model, *init)
    if eval_mode:
        model.eval()
    torch.manual_seed(seed)
    inputs = user_step(model_path, "get_inputs()", mod.get_inputs)
    if not isinstance(inputs, (list, tuple)):
        raise ImportFailure(f"{model_path}: get_inputs() returned {describe(inputs)}, not a list")
    return mod, init, model, list(inputs)


def run(model, args, mode=None):
    import contextlib
    with torch.no_grad(), (mode or contextlib.nullcontext()):
        out = model(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            raise ImportFailure(f"forward's output {i} is {describe(o)}, not a tensor")
    return outs


def run64(model, args, mode=None):
    """forward in float64: the tensors forward makes itself (torch.zeros(...)) too."""
    torch.set_default_dtype(torch.float64)
    try:
        return run(model, args, mode)
    finally:
        torch.set_default_dtype(torch.float32)


def to64(args):
    return [a.double() if isinstance(a, torch.Tensor) and a.dtype.is_floating_point else a for a in args]


def write_module_task(model_path, out_dir, seed=0, name=None, eval_mode=False, why=None):
    name = name or task_name(model_path)
    mod, init, model, inputs = build(model_path, seed, eval_mode, name)
    taken = set()
    import inspect
    try:
        argnames = [p for p in inspect.signature(model.forward).parameters]
    except (TypeError, ValueError):
        argnames = []
    spec_inputs, spec_args, kf_inputs = [], [], []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            x = x.detach().contiguous()
            nm = ident(argnames[i] if i < len(argnames) else f"x{i}", taken)
            dt = dtype_of(x, f"get_inputs()[{i}]")
            dom = input_domain(x)
            spec_args.append({"input": len(spec_inputs)})
            spec_inputs.append({"name": nm, "index": i, "dtype": dt, "shape": list(x.shape), "range": dom})
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            spec_args.append({"value": x})
        else:
            raise ImportFailure(f"{model_path}: get_inputs()[{i}] is {describe(x)}, not a tensor or a number")
    if not spec_inputs:
        raise ImportFailure(f"{model_path}: forward takes no tensor")
    # every forward runs on a fresh copy of the module as built: a module that keeps state
    # between calls (a hidden state it assigns to itself) is taken at its first call, as
    # the reference process takes it on every input set
    # random tensors forward draws itself (torch.randn for an initial state) are recorded
    # here and replayed by the reference: the kernel gets them as params
    from kforge_torch.reference import Draws, RefError
    pristine = model

    def fresh():
        """the module built again as pristine was (a fresh build, not a deep copy: a forward
        that is a closure over its own submodules would still call the original's)"""
        torch.manual_seed(seed)
        m = mod.Model(*mod.get_init_inputs())
        return m.eval() if eval_mode else m
    rec = Draws(record=True)
    outs32 = user_step(model_path, "forward", run, fresh(), inputs, rec)
    try:
        again_model = fresh()
        torch.manual_seed(seed + 1)  # another RNG state: a random op Draws does not replay shows
        again = user_step(model_path, "forward (a second time)", run, again_model, inputs, Draws(list(rec.draws)))
    except RefError as e:
        raise ImportFailure(f"{model_path}: forward draws random tensors in another way on a second call: {e}")
    if any(not torch.equal(a, b) for a, b in zip(outs32, again)):
        raise ImportFailure(f"{model_path}: forward gives other outputs on the same inputs (a random op kforge "
                            "does not record, e.g. torch.bernoulli or a channel dropout; --eval imports inference "
                            "mode): no reference can be fixed")
    params, blobs, offset = [], [], 0
    state = [(k, t, a, False) for k, t, a in module_state(pristine)]
    state += [(f"draw{i}", t, False, True) for i, t in enumerate(rec.draws)]
    what = {f"draw{i}": w for i, w in enumerate(rec.what)}
    state = [(k, t.detach().contiguous(), a, d) for k, t, a, d in state]
    for key, t, attr, draw in state:
        dtype_of(t, f"parameter or buffer '{key}'")
    # a kernel takes at most MAX_BUFS arguments (the verifier's runner): a module with more
    # params (a ResNet's convolutions and norms) gets them packed, one argument per dtype
    # (p_weights for float32, p_weights_i64 for BatchNorm's batch counters, ...), each in
    # state_dict order, the layout written in the task
    packed = len(spec_inputs) + len(state) + len(outs32) > MAX_BUFS
    groups = []  # the dtypes, float32 first
    if packed:
        for _, t, _, _ in state:
            if t.dtype not in groups:
                groups.append(t.dtype)
        groups.sort(key=lambda d: d != torch.float32)
        state = [x for d in groups for x in state if x[1].dtype == d]
        if len(spec_inputs) + len(groups) + len(outs32) > MAX_BUFS:
            raise ImportFailure(f"{model_path}: too many tensors for one kernel's arguments (at most {MAX_BUFS}, "
                                "the params packed into one per dtype)")
    for key, t, attr, draw in state:
        dt = dtype_of(t, f"parameter or buffer '{key}'")
        params.append({"name": ident("p_" + key, taken), "key": key, "dtype": dt, "shape": list(t.shape),
                       "offset": offset, "attr": attr, "draw": draw, "packed": packed})
        blob = t.cpu().numpy().tobytes() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy().tobytes()
        blobs.append(blob)
        offset += len(blob)
    outputs = []
    for j, o in enumerate(outs32):
        outputs.append({"name": ident(f"out{j}" if len(outs32) > 1 else "out", taken),
                        "dtype": dtype_of(o, f"forward's output {j}"), "shape": list(o.shape)})
    from kforge_torch.reference import to_float64
    m64 = to_float64(fresh())
    outs64 = user_step(model_path, "forward in float64", run64, m64, to64(inputs), Draws(list(rec.draws)))
    flops = count_flops(fresh(), inputs)
    nbytes = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
    nbytes += sum(o.numel() * o.element_size() for o in outs32) + offset
    tol = tolerance_needed(outs32, outs64)

    os.makedirs(out_dir, exist_ok=True)
    dst = os.path.join(out_dir, f"{name}.py")
    if not (os.path.exists(dst) and os.path.samefile(model_path, dst)):
        shutil.copyfile(model_path, dst)
    with open(os.path.join(out_dir, f"{name}.weights"), "wb") as f:
        for b in blobs:
            f.write(b)
    spec = {"format": FORMAT, "version": VERSION, "name": name, "source": f"{name}.py",
            "class": "Model", "model": os.path.abspath(model_path), "seed": seed,
            "mode": "eval" if eval_mode else "train", "init": json.loads(json.dumps(init, default=repr)),
            "inputs": spec_inputs, "args": spec_args, "params": params, "weights": f"{name}.weights",
            "outputs": outputs, "flops": flops, "bytes": nbytes,
            "flops_from": "torch.utils.flop_counter.FlopCounterMode",
            "bytes_from": "inputs + outputs + parameters and buffers", "torch": torch.__version__}
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(spec, f, indent=1)
        f.write("\n")
    lines = [f"# module task: written by kforge import from {os.path.basename(model_path)} (class Model)"]
    if why:
        why_lines = [l.strip() for l in why.strip().splitlines() if l.strip()]
        lines += ["# not a graph task: " + why_lines[0]] + ["#   " + l for l in why_lines[1:8]]
    lines += ["# The reference is the module itself, run in float64 by a separate process",
              "# (python3 -m kforge_torch.reference); a kernel gets the inputs, then the params,",
              "# then writes the outputs (docs/task-format.md, \"Module tasks\").",
              f"# The module runs in {'inference (eval)' if eval_mode else 'training'} mode"
              + ("." if eval_mode else " (as KernelBench runs it: BatchNorm uses the batch's statistics)."),
              f"task {name}", f"module {name}"]

    def dims(shape):
        return "[" + ", ".join(str(d) for d in shape) + "]"
    for x in spec_inputs:
        rng = f" range({x['range'][0]!r}, {x['range'][1]!r})" if x["range"] else ""
        lines.append(f"input {x['name']}: {x['dtype']}{dims(x['shape'])}{rng}")
    for dt in dict.fromkeys(p["dtype"] for p in params if p["packed"]):
        packs = [p for p in params if p["packed"] and p["dtype"] == dt]
        item, base = ITEM_BYTES[dt], packs[0]["offset"]
        end = lambda p: (p["offset"] - base) // item + math.prod(p["shape"])  # noqa: E731
        pname = "p_weights" if dt == "f32" else f"p_weights_{dt}"
        lines.append(f"param {pname}: {dt}[{end(packs[-1])}]   # every {dt} parameter and buffer, packed "
                     "(element offsets):")
        for p in packs:
            lines.append(f"#   {pname}[{(p['offset'] - base) // item}:{end(p)}] = {p['key']} {dims(p['shape'])}"
                         + (" (a tensor attribute)" if p["attr"] else "") + (f" ({what[p['key']]})" if p["draw"] else ""))
    for p in params:
        if p["packed"]:
            continue
        lines.append(f"param {p['name']}: {p['dtype']}{dims(p['shape'])}   # {p['key']}"
                     + (" (a tensor attribute of the module, in no state_dict)" if p["attr"] else "")
                     + (f" ({what[p['key']]})" if p["draw"] else ""))
    for o in outputs:
        lines.append(f"output {o['name']}: {o['dtype']}{dims(o['shape'])}")
    lines.append(f"cost flops={flops:.17g} bytes={nbytes}")
    if tol:
        lines.append("# float32 PyTorch itself misses the default tolerance on the import sample:")
        lines.append(f"tolerance atol={tol[0]:.3g} nmse={tol[1]:.3g}")
    with open(os.path.join(out_dir, "task.kf"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return spec


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m kforge_torch.module_task")
    ap.add_argument("model", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--bundle", default=None)
    ap.add_argument("--why", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default=None)
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--kforge", default=None)
    a = ap.parse_args(argv)
    model, out, seed, name, ev = a.model, a.out, a.seed, a.name, a.eval
    if a.bundle:
        with open(os.path.join(a.bundle, "graph.json")) as f:
            g = json.load(f)
        model, out, seed, name, ev = g["model"], a.bundle, g.get("seed", 0), g.get("name"), g.get("mode") == "eval"
    if not model or not out:
        ap.error("MODEL.py DIR, or --bundle DIR")
    try:
        spec = write_module_task(model, out, seed, name, ev, a.why)
    except ImportFailure as e:
        print(f"kforge import: {e}", file=sys.stderr)
        return 2
    print(f"wrote {os.path.join(out, 'task.kf')}: module task {spec['name']}, {len(spec['inputs'])} inputs, "
          f"{len(spec['params'])} params, {len(spec['outputs'])} outputs, {spec['flops']:.3g} FLOPs, "
          f"{spec['bytes'] / 1e6:.3g} MB")
    if a.bundle and a.kforge:
        from kforge_torch import parts
        try:
            written, skipped = parts.write_parts(g, a.why, out, spec["name"], a.kforge)
        except (OSError, ValueError) as e:
            written, skipped = [], []
            print(f"kforge import: no parts written: {e}", file=sys.stderr)
        note = []
        # what no part covers, every node named (the header keeps only the first lines of
        # the reason): the run says it when the model's kernels all fail (src/agent/mixed.c)
        targets = {n["name"]: n["target"] for n in g.get("nodes", [])}
        bad = [n for n in targets if n in parts.failing_nodes(a.why)]
        if bad:
            note.append("# not lowered: " + ", ".join(f"{n} ({targets[n]})" for n in bad))
        for k, p in enumerate(written):
            note.append(f"# part {k} ({p['file']}): {', '.join(p['nodes'])} -> {', '.join(p['outputs'])}, lowered by "
                        "kforge (--agent both: the builtin writes its kernel for the model)")
        for nodes, why in skipped:
            note.append(f"# not a part ({', '.join(nodes)}): {why[0]}")
        if note:
            with open(os.path.join(out, "task.kf"), "a") as f:
                f.write("# a mixed task: the parts of the forward kforge lowers\n" + "\n".join(note) + "\n")
        for p in written:
            print(f"wrote {os.path.join(out, p['file'])}: part of the forward kforge lowers ({', '.join(p['nodes'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
