"""KernelBench-format module -> kforge task bundle (graph.json, params/ref .safetensors).

usage: python3 -m kforge_torch.importer MODEL.py DIR [--seed N] [--name NAME]

The module is run as KernelBench runs it: `Model(*get_init_inputs())`, inputs from
`get_inputs()`, both under torch.manual_seed(seed). Its forward is exported with
torch.export.export, without decompositions, so the graph holds the ATen ops the module
calls (aten.softmax.int rather than its exp/sum/div pieces): the C core lowers those to its
own ops (src/ir/import.c) and names every one it cannot. The format is in docs/pytorch.md.

Exit status: 0 written, 2 the module could not be loaded, run or exported (the message
says which step and why).
"""
import argparse
import importlib.util
import json
import math
import operator
import os
import re
import sys

import torch

FORMAT_VERSION = 1

DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.bool: "bool",
}


class ImportFailure(Exception):
    pass


def load_module(path):
    """The KernelBench file as a module; its Model, get_inputs, get_init_inputs checked."""
    if not os.path.isfile(path):
        raise ImportFailure(f"{path}: no such file")
    name = "kforge_model_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # the user's code: report whatever it raised
        raise ImportFailure(f"{path}: loading the module failed: {type(e).__name__}: {e}") from e
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, attr):
            raise ImportFailure(f"{path}: not in KernelBench format: no '{attr}' "
                                "(expected class Model, get_inputs(), get_init_inputs())")
    return mod


def task_name(path):
    """An identifier from the file name: '19_ReLU.py' -> 'relu_19' style, never empty."""
    stem = os.path.splitext(os.path.basename(path))[0]
    s = re.sub(r"\W+", "_", stem).strip("_").lower() or "model"
    if s[0].isdigit():
        m = re.match(r"(\d+)_?(.*)", s)
        s = (m.group(2) + "_" + m.group(1)) if m.group(2) else "task_" + m.group(1)
    return s[:60]


def dtype_name(dt):
    if dt not in DTYPES:
        raise ImportFailure(f"dtype {dt} has no kforge equivalent")
    return DTYPES[dt]


def meta_of(val):
    """dtype/shape of a node's example value (a FakeTensor, or a tuple of them)."""
    if isinstance(val, torch.Tensor):
        return dtype_name(val.dtype), [int(d) for d in val.shape]
    if isinstance(val, (tuple, list)):
        return None, [dict(zip(("dtype", "shape"), meta_of(v))) if isinstance(v, torch.Tensor)
                      else {"dtype": None, "shape": None} for v in val]
    return None, None


def encode_arg(a):
    if isinstance(a, torch.fx.Node):
        return {"ref": a.name}
    if isinstance(a, (list, tuple)):
        return [encode_arg(x) for x in a]
    if isinstance(a, bool) or a is None or isinstance(a, (int, str)):
        return a
    if isinstance(a, float):
        if math.isnan(a):
            return "nan"
        if math.isinf(a):
            return "inf" if a > 0 else "-inf"
        return a
    if isinstance(a, torch.dtype):
        return {"dtype": dtype_name(a)}
    if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
        return str(a)
    raise ImportFailure(f"an argument of type {type(a).__name__} ({a!r}) cannot be written")


def target_name(t):
    if t is operator.getitem:
        return "getitem"
    s = str(t)  # OpOverload prints as aten.relu.default
    return s


def export_graph(mod, seed):
    torch.manual_seed(seed)
    model = mod.Model(*mod.get_init_inputs())
    model.eval()
    torch.manual_seed(seed)
    inputs = list(mod.get_inputs())
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise ImportFailure(f"get_inputs()[{i}] is a {type(x).__name__}, not a tensor "
                                "(kforge takes tensor arguments only)")
    with torch.no_grad():
        outs = model(*inputs)
    try:
        ep = torch.export.export(model, tuple(inputs))
    except Exception as e:
        raise ImportFailure(f"torch.export.export failed: {type(e).__name__}: {e}") from e
    return model, inputs, outs, ep


def build_graph(name, model_path, seed, model, inputs, ep):
    sig = ep.graph_signature
    kinds = {}
    for spec in sig.input_specs:
        k = spec.kind.name.lower()  # USER_INPUT, PARAMETER, BUFFER, CONSTANT_TENSOR, ...
        kinds[spec.arg.name] = ({"user_input": "input", "parameter": "param", "buffer": "buffer",
                                 "constant_tensor": "constant"}.get(k, k), spec.target)
    state = dict(model.named_parameters())
    state.update(dict(model.named_buffers()))
    state.update({k: v for k, v in ep.constants.items() if isinstance(v, torch.Tensor)})
    g_inputs, nodes, outputs, tensors = [], [], [], {}
    user_index = 0
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            kind, target = kinds.get(node.name, ("input", None))
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise ImportFailure(f"graph input '{node.name}' is not a tensor")
            dt, shape = meta_of(val)
            entry = {"name": node.name, "kind": kind, "dtype": dt, "shape": shape}
            if kind == "input":
                entry["index"] = user_index
                # a strictly positive sample (torch.rand(...) + 0.5 for a log, a divisor)
                # asks kforge to draw its verification inputs from the same range
                x = inputs[user_index]
                if x.dtype.is_floating_point and x.numel():
                    lo, hi = x.min().item(), x.max().item()
                    if 0 < lo < hi and math.isfinite(hi):
                        entry["range"] = [lo, hi]
                user_index += 1
            else:
                entry["target"] = target
                if target not in state:
                    raise ImportFailure(f"graph input '{node.name}' reads '{target}', which the "
                                        "module does not hold")
                tensors[target] = state[target].detach().contiguous()
            g_inputs.append(entry)
        elif node.op == "call_function":
            dt, shape = meta_of(node.meta.get("val"))
            nodes.append({"name": node.name, "target": target_name(node.target),
                          "args": [encode_arg(a) for a in node.args],
                          "kwargs": {k: encode_arg(v) for k, v in node.kwargs.items()},
                          "dtype": dt, "shape": shape})
        elif node.op == "output":
            outs = node.args[0]
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            outputs = [encode_arg(o) for o in outs]
        else:
            raise ImportFailure(f"graph node '{node.name}' is a {node.op}, which kforge cannot "
                                "import")
    graph = {"format": "kforge-graph", "version": FORMAT_VERSION, "name": name,
             "model": os.path.abspath(model_path), "seed": seed, "torch": torch.__version__,
             "inputs": g_inputs, "nodes": nodes, "outputs": outputs}
    return graph, tensors


def write_bundle(model_path, out_dir, seed=0, name=None):
    """Writes DIR/graph.json, DIR/params.safetensors, DIR/ref.safetensors; returns graph."""
    from safetensors.torch import save_file
    mod = load_module(model_path)
    model, inputs, outs, ep = export_graph(mod, seed)
    graph, tensors = build_graph(name or task_name(model_path), model_path, seed, model, inputs, ep)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "graph.json"), "w") as f:
        json.dump(graph, f, indent=1)
        f.write("\n")
    save_file({k: v.clone() for k, v in tensors.items()}, os.path.join(out_dir, "params.safetensors"))
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    ref = {f"in.{i}": x.detach().contiguous() for i, x in enumerate(inputs)}
    ref.update({f"out.{i}": o.detach().contiguous() for i, o in enumerate(outs)})
    save_file(ref, os.path.join(out_dir, "ref.safetensors"))
    return graph


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m kforge_torch.importer",
                                 description="KernelBench-format module -> kforge task bundle")
    ap.add_argument("model", help="MODEL.py (class Model, get_inputs(), get_init_inputs())")
    ap.add_argument("out", help="bundle directory to write")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default=None, help="task name (default: from the file name)")
    a = ap.parse_args(argv)
    try:
        g = write_bundle(a.model, a.out, a.seed, a.name)
    except ImportFailure as e:
        print(f"kforge import: {e}", file=sys.stderr)
        return 2
    print(f"{a.model}: {len(g['nodes'])} ATen nodes, {len(g['inputs'])} graph inputs -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
