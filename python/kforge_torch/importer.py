"""KernelBench-format module -> kforge task bundle (graph.json, params/ref .safetensors).

usage: python3 -m kforge_torch.importer MODEL.py DIR [--seed N] [--name NAME] [--eval]

The module is run as KernelBench runs it: `Model(*get_init_inputs())`, inputs from
`get_inputs()`, both under torch.manual_seed(seed), in the mode it has after construction
(training mode: BatchNorm uses the batch's statistics; a live dropout's mask becomes an input
of the task, a draw), or in
inference mode with --eval. Its forward is exported with
torch.export.export, without decompositions, so the graph holds the ATen ops the module
calls (aten.softmax.int rather than its exp/sum/div pieces): the C core lowers those to its
own ops (src/ir/import.c) and names every one it cannot. The format is in docs/pytorch.md.

Exit status: 0 written, 2 the module could not be loaded, run or exported: one line says
the file, the step that failed and why (--verbose adds the traceback and what torch printed,
between that line and its repetition at the end), 3 an error of the importer itself.
"""
import argparse
import contextlib
import importlib.util
import json
import math
import operator
import os
import re
import sys
import tempfile
import traceback

import torch

FORMAT_VERSION = 1

DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.bool: "bool",
}


class ImportFailure(Exception):
    """The module cannot be imported: the message names the file, the step and why; the
    exception the user's code or torch raised, if any, is its __cause__."""


class ExportFailure(ImportFailure):
    """torch.export refused the forward (data-dependent control flow, ...): the module runs,
    so it can still be a module task (kforge_torch.module_task)."""


# exit status of `python3 -m kforge_torch.importer` when torch.export failed and a module
# task was written in its place (kforge import then has nothing to lower)
EXIT_MODULE_TASK = 10


def first_line(e, cap=300):
    """An exception's message, one line (torch's run to dozens): its first non-empty line."""
    text = str(e).strip()
    line = next((l.strip() for l in text.splitlines() if l.strip()), "")
    more = len(text.splitlines()) > 1
    if len(line) > cap:
        line, more = line[:cap], True
    return line + (" ..." if more else "")


def user_step(path, what, fn, *args):
    """fn(*args), a step that runs the user's code (or torch on it): whatever it raises
    becomes an ImportFailure naming the file and the step."""
    try:
        return fn(*args)
    except ImportFailure:
        raise
    except Exception as e:  # MemoryError and RecursionError included: a huge shape, a loop
        raise ImportFailure(f"{path}: {what} raised {type(e).__name__}: {first_line(e)}") from e


def describe(x):
    """What a value is, for a message: 'a dict', 'None', 'an int (3)'."""
    if x is None:
        return "None"
    name = type(x).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    if isinstance(x, (int, float, bool, str)):
        return f"{article} {name} ({x!r:.40})"
    return f"{article} {name}"


def load_module(path):
    """The KernelBench file as a module; its Model, get_inputs, get_init_inputs checked."""
    if not os.path.isfile(path):
        raise ImportFailure(f"{path}: no such file")
    if not path.endswith(".py"):
        raise ImportFailure(f"{path}: not a Python file (a KernelBench module ends in .py)")
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
    """An identifier from the file name, one the .kf parser takes: '19_ReLU.py' -> 'relu_19',
    '10_3D_tensor_matmul.py' -> 't3d_tensor_matmul_10': ASCII letters, digits and _,
    starting with a letter, never empty, at most 60 characters."""
    stem = os.path.splitext(os.path.basename(path))[0]
    s = re.sub(r"[^A-Za-z0-9]+", "_", stem).strip("_").lower() or "model"
    if s[0].isdigit():
        m = re.match(r"(\d+)_?(.*)", s)
        s = (m.group(2) + "_" + m.group(1)) if m.group(2) else "task_" + m.group(1)
    if not s[0].isalpha():  # what followed the number began with a digit too ('3d_tensor')
        s = "t" + s
    return s[:60].rstrip("_")


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


def export_graph(mod, seed, path="the module", eval_mode=False):
    """Runs the module as KernelBench does and exports its forward: (model, the inputs as
    drawn (before forward ran: it may write them), the outputs, the ExportedProgram). A
    forward that writes in place (x.relu_()) is exported functional, its writes to inputs
    left out of the outputs. The module stays in the mode it has after construction
    (training: BatchNorm normalizes by the batch's statistics, dropout is live), as
    KernelBench runs it; eval_mode switches it to inference semantics first."""
    torch.manual_seed(seed)
    init = user_step(path, "get_init_inputs()", mod.get_init_inputs)
    if not isinstance(init, (list, tuple)):
        raise ImportFailure(f"{path}: get_init_inputs() returned {describe(init)}, not a list of "
                            "Model's arguments")
    model = user_step(path, "Model(*get_init_inputs())", mod.Model, *init)
    if not isinstance(model, torch.nn.Module):
        raise ImportFailure(f"{path}: Model(*get_init_inputs()) is {describe(model)}, not a torch.nn.Module")
    if eval_mode:
        model.eval()
    torch.manual_seed(seed)
    inputs = user_step(path, "get_inputs()", mod.get_inputs)
    if not isinstance(inputs, (list, tuple)):
        raise ImportFailure(f"{path}: get_inputs() returned {describe(inputs)}, not a list of tensors")
    inputs = list(inputs)
    for i, x in enumerate(inputs):
        # a Python number is specialised by torch.export: the task holds the value drawn
        if not isinstance(x, (torch.Tensor, int, float)) or isinstance(x, bool):
            raise ImportFailure(f"{path}: get_inputs()[{i}] is {describe(x)}, not a tensor or a number "
                                "(kforge takes tensors, and numbers that it bakes into the task)")
    drawn = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]

    def fresh():
        return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in drawn)

    draws = []

    def forward():
        # a live dropout's mask recorded (reference.Draws), so that the bundle's sample
        # outputs can be recomputed from its sample inputs and masks
        from .reference import Draws
        rec = Draws(record=True)
        with torch.no_grad(), rec:
            out = model(*fresh())
        draws[:] = [rec.draws[i] for i in rec.masks]
        return out
    outs = user_step(path, "forward", forward)
    out_list = outs if isinstance(outs, (tuple, list)) else [outs]
    if not isinstance(outs, (torch.Tensor, tuple, list)) or not out_list:
        raise ImportFailure(f"{path}: forward returned {describe(outs) if not isinstance(outs, (tuple, list)) else 'nothing'}"
                            ", not a tensor or a tuple of tensors")
    for i, o in enumerate(out_list):
        if not isinstance(o, torch.Tensor):
            raise ImportFailure(f"{path}: forward's output {i} is {describe(o)}, not a tensor "
                                "(kforge takes a tensor or a tuple of tensors)")
    try:
        ep = user_step(path, "torch.export of forward", torch.export.export, model, fresh())
    except ImportFailure as e:
        raise ExportFailure(str(e)) from e.__cause__
    if any(n.op == "call_function" and getattr(getattr(n.target, "_schema", None), "is_mutable", False)
           for n in ep.graph.nodes):
        # in-place ops: their functional forms, with no op decomposed
        try:
            ep = user_step(path, "functionalizing the in-place ops of forward", ep.run_decompositions, {})
        except ImportFailure as e:
            raise ExportFailure(str(e)) from e.__cause__
    model.kforge_dropout_masks = draws  # the masks of the sample forward, in call order
    return model, drawn, outs, ep


def live_dropout_p(node):
    """p of a dropout node that drops elements (aten.dropout / aten.native_dropout in
    training mode, 0 < p < 1: KernelBench level 2's 66 and 83 run so), else None"""
    t = target_name(node.target)
    if t not in ("aten.dropout.default", "aten.native_dropout.default"):
        return None
    args = list(node.args) + [None] * 3
    p = node.kwargs.get("p", args[1])
    train = node.kwargs.get("train", args[2])
    if train is False or not isinstance(p, (int, float)) or not 0 < p < 1:
        return None  # off (the lowering passes the input through), or p = 1 (all dropped)
    if not isinstance(node.args[0], torch.fx.Node):
        return None
    return float(p)


def build_graph(name, model_path, seed, model, inputs, ep, eval_mode=False):
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
    # what the module's outputs depend on (a training-mode BatchNorm also counts its
    # batches in a 0-d buffer, an update no output reads)
    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    outs = out_node.args[0] if isinstance(out_node.args[0], (list, tuple)) else [out_node.args[0]]
    specs = list(sig.output_specs)
    if len(specs) == len(outs):
        outs = [o for o, sp in zip(outs, specs) if sp.kind.name == "USER_OUTPUT"]
    needed, todo = set(), [o for o in outs if isinstance(o, torch.fx.Node)]
    while todo:
        n = todo.pop()
        if n not in needed:
            needed.add(n)
            todo.extend(n.all_input_nodes)
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            kind, target = kinds.get(node.name, ("input", None))
            val = node.meta.get("val")
            if kind == "input" and not isinstance(val, torch.Tensor) and not node.users:
                user_index += 1  # a number forward argument, baked into the graph by export
                continue
            if kind != "input" and node not in needed:
                continue  # a parameter or buffer no output reads (BatchNorm's num_batches_tracked)
            if not isinstance(val, torch.Tensor):
                raise ImportFailure(f"graph input '{node.name}' is not a tensor")
            dt, shape = meta_of(val)
            entry = {"name": node.name, "kind": kind, "dtype": dt, "shape": shape}
            if kind == "input":
                entry["index"] = user_index
                # a strictly positive sample (torch.rand(...) + 0.5 for a log, a divisor)
                # is recorded; kforge import keeps it as the task's range only where an op
                # on a path from the input needs positive values (kf_graph_input_domains),
                # so relu & co. are still verified on negative values
                x = inputs[user_index]
                if x.dtype.is_floating_point and x.numel():
                    lo, hi = x.min().item(), x.max().item()
                    if 0 < lo < hi and math.isfinite(hi):
                        entry["range"] = [lo, hi]
                elif x.dtype == torch.int64 and x.numel():
                    # integers (class indices): verified on values of the sample's span
                    entry["range"] = [x.min().item(), x.max().item()]
                user_index += 1
            else:
                entry["target"] = target
                if target not in state:
                    raise ImportFailure(f"graph input '{node.name}' reads '{target}', which the "
                                        "module does not hold")
                tensors[target] = state[target].detach().contiguous()
            g_inputs.append(entry)
        elif node.op == "call_function":
            if node not in needed:
                continue  # state updates (running statistics) and other unused work
            dt, shape = meta_of(node.meta.get("val"))
            entry = {"name": node.name, "target": target_name(node.target),
                     "args": [encode_arg(a) for a in node.args],
                     "kwargs": {k: encode_arg(v) for k, v in node.kwargs.items()},
                     "dtype": dt, "shape": shape}
            p = live_dropout_p(node)
            if p is not None:
                # its mask of kept elements is an input of the task (a draw: kforge's
                # verifier draws it as any bool input; bench draws Bernoulli(1 - p) and
                # eager replays it), read by the node's lowering as x * mask / (1 - p)
                draw = f"p_draw{sum(1 for e in g_inputs if e['kind'] == 'draw')}"
                _, xshape = meta_of(node.args[0].meta.get("val"))
                g_inputs.append({"name": draw, "kind": "draw", "dtype": "bool", "shape": xshape, "p": p,
                                 "node": node.name,
                                 "target": f"of dropout '{node.name}', p={p:g}: its mask (1 kept, 0 dropped; "
                                           "output = input * mask / (1 - p))"})
                entry["draw"] = draw
            nodes.append(entry)
        elif node.op == "output":
            outs = node.args[0]
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            # the module's outputs only: not the writes to its inputs or buffers that the
            # functional graph returns beside them
            specs = list(sig.output_specs)
            if len(specs) == len(outs):
                outs = [o for o, sp in zip(outs, specs) if sp.kind.name == "USER_OUTPUT"]
            outputs = [encode_arg(o) for o in outs]
        else:
            raise ImportFailure(f"graph node '{node.name}' is a {node.op}, which kforge cannot "
                                "import")
    graph = {"format": "kforge-graph", "version": FORMAT_VERSION, "name": name,
             "model": os.path.abspath(model_path), "seed": seed, "torch": torch.__version__,
             "mode": "eval" if eval_mode else "train",
             "inputs": g_inputs, "nodes": nodes, "outputs": outputs}
    return graph, tensors


def write_bundle(model_path, out_dir, seed=0, name=None, eval_mode=False):
    """Writes DIR/graph.json, DIR/params.safetensors, DIR/ref.safetensors; returns graph."""
    from safetensors.torch import save_file
    mod = load_module(model_path)
    model, inputs, outs, ep = export_graph(mod, seed, model_path, eval_mode)
    graph, tensors = build_graph(name or task_name(model_path), model_path, seed, model, inputs, ep, eval_mode)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "graph.json"), "w") as f:
        json.dump(graph, f, indent=1)
        f.write("\n")
    save_file({k: v.clone() for k, v in tensors.items()}, os.path.join(out_dir, "params.safetensors"))
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    # each its own copy: a forward that returns an input, or one tensor twice, gives
    # tensors that share memory, which safetensors refuses
    ref = {f"in.{i}": x.detach().clone().contiguous() for i, x in enumerate(inputs)
           if isinstance(x, torch.Tensor)}  # numbers are baked into the graph
    ref.update({f"out.{i}": o.detach().clone().contiguous() for i, o in enumerate(outs)})
    # a live dropout's mask in the sample forward (1 kept, 0 dropped), by its task input; not
    # kept where a dropout no output reads was called too (the two lists do not pair up)
    masks = getattr(model, "kforge_dropout_masks", [])
    draw_names = [e["name"] for e in graph["inputs"] if e["kind"] == "draw"]
    if len(masks) == len(draw_names):
        ref.update({f"draw.{n}": m.to(torch.bool).contiguous() for n, m in zip(draw_names, masks)})
    save_file(ref, os.path.join(out_dir, "ref.safetensors"))
    return graph


@contextlib.contextmanager
def stderr_kept(keep):
    """What is written to file descriptor 2 inside (torch's logs and warnings, the module's
    own), held in a temporary file: keep(text) gets it at the end."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            keep(tmp.read().decode("utf-8", "replace"))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m kforge_torch.importer",
                                 description="KernelBench-format module -> kforge task bundle")
    ap.add_argument("model", help="MODEL.py (class Model, get_inputs(), get_init_inputs())")
    ap.add_argument("out", help="bundle directory to write")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default=None, help="task name (default: from the file name)")
    ap.add_argument("--eval", action="store_true",
                    help="export in inference mode (model.eval()); default: the mode after construction")
    ap.add_argument("--verbose", action="store_true",
                    help="on failure, the traceback and what torch printed as well")
    ap.add_argument("--graph-only", action="store_true",
                    help="a forward torch.export refuses is an error (default: a module task)")
    a = ap.parse_args(argv)
    printed = []
    err = None
    try:
        with stderr_kept(printed.append):
            g = write_bundle(a.model, a.out, a.seed, a.name, a.eval)
    except ImportFailure as e:
        err, line, code = e, f"kforge import: {e}", 2
    except Exception as e:  # the importer's own failure, not the module's
        err, line, code = e, f"kforge import: {a.model}: internal error: {type(e).__name__}: {first_line(e)}", 3
    if isinstance(err, ExportFailure) and not a.graph_only:
        # the module runs but does not export: the module itself becomes the task
        from kforge_torch import module_task
        print(f"{line}; writing a module task: its reference is the module itself (run in float64 by "
              "PyTorch), its kernel is written by a model (--agent llm)", file=sys.stderr)
        try:
            spec = module_task.write_module_task(a.model, a.out, a.seed, a.name, a.eval, why=str(err))
        except ImportFailure as e:
            print(f"kforge import: {e}", file=sys.stderr)
            return 2
        print(f"wrote {os.path.join(a.out, 'task.kf')}: module task {spec['name']}, {len(spec['inputs'])} inputs, "
              f"{len(spec['params'])} params, {len(spec['outputs'])} outputs")
        return EXIT_MODULE_TASK
    if err is None:
        sys.stderr.write("".join(printed))  # a module's warnings are its business: passed on
        print(f"{a.model}: {len(g['nodes'])} ATen nodes, {len(g['inputs'])} graph inputs -> {a.out}")
        return 0
    has_trace = err.__cause__ is not None or not isinstance(err, ImportFailure)
    has_output = bool("".join(printed).strip())
    if not a.verbose:
        hidden = " and ".join(w for w, h in (("the traceback", has_trace), ("what torch printed", has_output)) if h)
        print(f"{line} (--verbose for {hidden})" if hidden else line, file=sys.stderr)
        return code
    # kforge's line first and last, the dump between
    print(line, file=sys.stderr)
    sys.stderr.write("".join(printed))
    if has_trace:
        cause = err.__cause__ if err.__cause__ is not None else err
        traceback.print_exception(type(cause), cause, cause.__traceback__, file=sys.stderr)
    print(line, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
