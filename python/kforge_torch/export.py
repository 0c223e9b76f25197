"""`kforge export RUN --as torch`: a kforge CPU or CUDA kernel as a PyTorch custom op and a ModelNew.

    python3 -m kforge_torch.export RUN [--out FILE.py] [--task TASK.kf]
    python3 -m kforge_torch.export --check FILE.py [--model MODEL.py] [--seed N] [--no-compile]

The first form writes a self-contained Python module (default RUN/kforge_torch_export.py). It
embeds the kernel source, compile command, entry and argument specs (for a CUDA run: the
NVRTC build options, the resolved launch plan and the scratch sizes), and a copy of the
loader of kforge_torch/cpu_kernel.py (and of cuda_kernel.py for a CUDA run), so it needs
neither the run directory nor kforge_torch. On import it compiles the kernel (cached, see
cpu_kernel.py and cuda_kernel.py; a CUDA kernel for the current GPU), registers it as the custom op
`kforge::<task>` with a fake (meta) implementation, so that it composes with torch.compile,
and defines:

- for a task made by `kforge import` (graph.json beside the task, docs/pytorch.md):
  `ModelNew(Model)`, the model file's Model (so same constructor, same parameters under the
  same seed) whose forward calls the op on the graph's inputs: forward arguments, parameters,
  buffers and lifted constants; get_inputs()/get_init_inputs() are the model file's. The
  model file is imported by its path, recorded at export; $KFORGE_TORCH_MODEL overrides it.
- for a plain .kf task: `ModelNew(nn.Module)` whose forward takes the task's inputs and
  returns its outputs, get_inputs() drawing inputs of the task's shapes (from the inputs'
  range(LO, HI) where the task gives one) and get_init_inputs() returning [].

The kernel is forward-only: ModelNew passes detached tensors, so its outputs never require
grad (a kernel without a backward cannot take part in autograd, and torch.compile would
otherwise trace a backward for parameters that require grad).

`--check` imports such a module, builds the reference Model (the model file's, or --model's)
and ModelNew under the same torch.manual_seed, runs both on get_inputs() and reports the
largest absolute and relative errors; then the same for torch.compile(ModelNew). For a CUDA
export both models and the inputs are moved to the kernel's GPU first. Exit codes:
0 match, 1 mismatch (or torch.compile failed), 2 usage or run-directory error, 3 internal.
"""
import argparse
import ast
import base64
import hashlib
import importlib.util
import json
import math
import os
import re
import struct
import sys
from pathlib import Path

import torch

from .cpu_kernel import KernelRunError, _param_name, check_cpu_manifest, parse_arg, read_manifest
from .cuda_kernel import CudaKernel, check_cuda_manifest

DEFAULT_OUT = "kforge_torch_export.py"
# Embedded lifted constants (kind "constant") are meant to be scalars and small tables.
MAX_EMBEDDED_BYTES = 1 << 20
_SAFETENSORS_DTYPES = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16",
                       "I64": "int64", "I32": "int32", "BOOL": "bool"}


# ---------------------------------------------------------------------------------------------
# Reading the run directory and its task


def _find_task(run_dir, run, override):
    """The task file: --task, else run.json's task_path (relative to the current directory,
    where `kforge synth` was most likely run, else to one of the run directory's parents,
    since the default output is kforge-out/<task> under that directory)."""
    if override:
        p = Path(override)
        if not p.is_file():
            raise KernelRunError("%s: no such task file" % override)
        return p
    where = run_dir / "run.json"
    if run is None:
        raise KernelRunError("%s: missing (it names the task file); pass --task TASK.kf" % where)
    tp = run.get("task_path")
    if not tp:
        raise KernelRunError("%s: no task_path; pass --task TASK.kf" % where)
    p = Path(tp)
    tried = [p] if p.is_absolute() else [p] + [a / p for a in list(run_dir.resolve().parents)[:3]]
    for c in tried:
        if c.is_file():
            return c
    raise KernelRunError("%s: task file %s not found (looked at %s); pass --task TASK.kf"
                         % (where, tp, ", ".join(str(c) for c in tried)))


_INPUT_RE = re.compile(r"^\s*input\s+([A-Za-z_]\w*)\s*:\s*(\w+)\s*\[([^\]]*)\]\s*"
                       r"(?:range\s*\(\s*(-?[\d.eE+-]+)\s*,\s*(-?[\d.eE+-]+)\s*\))?\s*$")


def parse_task_inputs(path):
    """The `input` lines of a .kf file: [(name, dtype, shape, (lo, hi) or None)]. The C parser
    has already accepted the file; this reads only what get_inputs() needs."""
    out = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0]
        if not re.match(r"^\s*input\b", line):
            continue
        m = _INPUT_RE.match(line)
        if not m:
            raise KernelRunError("%s: cannot read input line %r" % (path, line.strip()))
        name, dt, dims, lo, hi = m.groups()
        shape = tuple(int(d) for d in dims.split(",") if d.strip())
        out.append((name, dt, shape, (float(lo), float(hi)) if lo is not None else None))
    return out


def _read_safetensors(path, names):
    """{name: (torch dtype name, shape, raw bytes)} for `names` in a .safetensors file
    (8-byte little-endian header length, JSON header, little-endian data)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name in names:
            if name not in header:
                raise KernelRunError("%s: no tensor %r" % (path, name))
            h = header[name]
            if h["dtype"] not in _SAFETENSORS_DTYPES:
                raise KernelRunError("%s: tensor %r has dtype %s" % (path, name, h["dtype"]))
            a, b = h["data_offsets"]
            f.seek(base + a)
            out[name] = (_SAFETENSORS_DTYPES[h["dtype"]], tuple(h["shape"]), f.read(b - a))
    return out


def _map_graph_inputs(graph, ins, where):
    """The graph.json input feeding each kernel input: by name when every kernel input names
    one (the lowering may drop unused placeholders), else by position."""
    g_in = graph.get("inputs")
    if not isinstance(g_in, list):
        raise KernelRunError("%s: no \"inputs\" list" % where)
    by_name = {g.get("name"): g for g in g_in}
    if all(a.name in by_name for a in ins):
        chosen = [by_name[a.name] for a in ins]
    elif len(g_in) == len(ins):
        chosen = list(g_in)
    else:
        raise KernelRunError("%s: the kernel's inputs (%s) do not match the graph's (%s)"
                             % (where, ", ".join(a.name for a in ins),
                                ", ".join(str(g.get("name")) for g in g_in)))
    for a, g in zip(ins, chosen):
        if g.get("dtype") != a.dtype or tuple(g.get("shape") or ()) != a.shape:
            raise KernelRunError("%s: graph input %s is %s%s but kernel input %s is %s%s"
                                 % (where, g.get("name"), g.get("dtype"), g.get("shape"),
                                    a.name, a.dtype, list(a.shape)))
        kind = g.get("kind")
        if kind == "input" and not isinstance(g.get("index"), int):
            raise KernelRunError("%s: input %s has no \"index\"" % (where, g.get("name")))
        if kind in ("param", "buffer", "constant") and not isinstance(g.get("target"), str):
            raise KernelRunError("%s: %s %s has no \"target\"" % (where, kind, g.get("name")))
        if kind == "draw" and not (isinstance(g.get("p"), (int, float)) and 0 < g["p"] < 1):
            raise KernelRunError("%s: draw %s has no \"p\" in (0, 1)" % (where, g.get("name")))
        if kind not in ("input", "param", "buffer", "constant", "draw"):
            raise KernelRunError("%s: input %s has unknown kind %r" % (where, g.get("name"), kind))
    return chosen


# ---------------------------------------------------------------------------------------------
# Writing the module


def _py_str(s):
    """A Python literal for s, readable (raw triple-quoted) when s allows it."""
    if "'''" not in s and "\r" not in s and "\0" not in s and not s.endswith("\\") and s.isascii():
        return "r'''" + s + "'''"
    return repr(s)


def _marked(file, what):
    text = Path(__file__).with_name(file).read_text()
    begin, end = "# --- kforge %s begin ---\n" % what, "# --- kforge %s end ---\n" % what
    return text[text.index(begin):text.index(end) + len(end)]


def _loader_source(platform="cpu"):
    """The loader part of cpu_kernel.py, between its marker comments; for cuda, followed by
    that of cuda_kernel.py (which uses the CPU part's ArgSpec, custom_op, cache)."""
    text = _marked("cpu_kernel.py", "loader")
    if platform == "cuda":
        text += "\n\n" + _marked("cuda_kernel.py", "cuda loader")
    return text


_IMPORTED_RUNTIME = '''
def _load_model_module():
    """The model file, imported by path once per process (a second exported module, or
    --check, gets the same classes)."""
    path = os.path.abspath(os.environ.get("KFORGE_TORCH_MODEL") or MODEL_PATH)
    if not os.path.isfile(path):
        raise ImportError("kforge export: model file %s not found (set KFORGE_TORCH_MODEL)" % path)
    name = "_kforge_model_" + hashlib.sha256(path.encode()).hexdigest()[:16]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


# decoded once: torch.compile traces _constant, which then only looks values up
_CONSTANT_VALUES = {
    k: torch.frombuffer(bytearray(base64.b64decode(data)), dtype=getattr(torch, dtype)).reshape(shape)
    for k, (dtype, shape, data) in CONSTANTS.items()}


def _constant(module, target):
    """A lifted tensor constant: the module's tensor attribute of that name, else the value
    recorded by `kforge import`."""
    obj = module
    for part in target.split("."):
        obj = getattr(obj, part, None)
    if isinstance(obj, torch.Tensor):
        return obj
    if target not in _CONSTANT_VALUES:
        raise RuntimeError("kforge export: constant %s is neither a tensor attribute of the "
                           "model nor recorded" % target)
    return _CONSTANT_VALUES[target]'''


def _randn_expr(dt, shape, rng, device=None):
    """A torch expression drawing one input (on `device`, when given)."""
    e = _randn_cpu_expr(dt, shape, rng)
    return e if not device else "(%s).to(%r)" % (e, device)


def _randn_cpu_expr(dt, shape, rng):
    tdt = {"f32": "torch.float32", "f64": "torch.float64", "f16": "torch.float16",
           "bf16": "torch.bfloat16", "i64": "torch.int64", "i32": "torch.int32", "bool": "torch.bool"}[dt]
    sh = repr(tuple(shape))
    if dt == "bool":
        return "(torch.rand(%s) < 0.5)" % sh
    if dt in ("i64", "i32"):
        lo, hi = (int(rng[0]), int(rng[1]) + 1) if rng else (0, 100)
        return "torch.randint(%d, %d, %s, dtype=%s)" % (lo, hi, sh, tdt)
    if rng:
        lo, hi = rng
        return "torch.rand(%s, dtype=%s) * %r + %r" % (sh, tdt, hi - lo, lo)
    return "torch.randn(%s, dtype=%s)" % (sh, tdt)


_HEADER = '''"""kforge kernel for task %(task)r as a PyTorch custom op, and ModelNew using it.

Generated by `kforge export RUN --as torch`; do not edit. Run directory: %(run)s
Task: %(task_path)s
Schedule: %(schedule)s; %(time_ms)s ms on %(device)s.
Kernel arguments: %(args)s.
At import the kernel is compiled (cached in $KFORGE_CACHE_DIR/torch, else
$XDG_CACHE_HOME/kforge/torch or ~/.cache/kforge/torch) and registered as kforge::%(task)s (or
kforge::%(task)s_<hash> when another kernel holds that name). It is forward-only: ModelNew
passes detached tensors, so its outputs do not require grad.%(platform_note)s
"""
import base64
import importlib.util

import torch
import torch.nn as nn

%(loader)s

TASK = %(task)r
PLATFORM = %(platform)r
%(kernel_fields)s
SOURCE_NAME = %(source_name)r
ARGS = %(arglist)r
KFORGE = %(meta)r  # where the kernel comes from

'''

_IMPORTED_MODEL = '''MODEL_PATH = %(model)r
GRAPH = %(graph)r
MODE = %(mode)r  # the module's mode at import: "train" (BatchNorm's batch statistics) or "eval"
CONSTANTS = %(constants)r  # lifted tensor constants recorded by `kforge import`

%(runtime)s

_model_module = _load_model_module()
Model = _model_module.Model


def _dropout_mask(model, shape, p, args):
    """a live dropout's mask for one call, as nn.Dropout draws it: 1 kept (probability 1 - p),
    0 dropped; the kernel computes input * mask / (1 - p)"""
    if not model.training:
        raise RuntimeError("this kernel was built for the module in training mode (a live dropout); "
                           "import the module with --eval for inference")
    dev = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
    return torch.rand(shape, device=dev) >= p


class ModelNew(Model):
    """%(stem)s.Model with its forward computed by the kforge kernel (inference only)."""

    def forward(self, *args):
        return kforge_op(
%(exprs)s
        )


def get_inputs():
    return _model_module.get_inputs()


def get_init_inputs():
    f = getattr(_model_module, "get_init_inputs", None)
    return f() if f is not None else []
'''

_PLAIN_MODEL = '''
class ModelNew(nn.Module):
    """Task %(task)s computed by the kforge kernel (inference only): forward(%(names)s) -> %(outs)s."""

    def __init__(self, *args, **kwargs):
        # takes (and ignores) constructor arguments, as a harness may pass a model's
        super().__init__()

    def forward(self, %(names)s):
        return kforge_op(%(detached)s)


def get_inputs():
    return [
%(draws)s
    ]


def get_init_inputs():
    return []
'''

# The kernel source comes last (it is long); then the kernel is compiled and the op
# registered. ModelNew.forward looks kforge_op up when it is called.
_TRAILER = '''

# ---------------------------------------------------------------------------------------------
# The kernel (%(src)s)
KERNEL_SOURCE = %(source)s

%(construct)s
kforge_op = _kernel.custom_op()  # kforge::TASK
'''

_CONSTRUCT = {
    "cpu": "_kernel = CpuKernel(KERNEL_SOURCE, COMPILE, ENTRY, ARGS, name=TASK, source_name=SOURCE_NAME)",
    # bound to the current CUDA device at import (NVRTC compile, module load)
    "cuda": "_kernel = CudaKernel(KERNEL_SOURCE, BUILD_OPTIONS, ARGS, LAUNCHES, SCRATCH_BYTES, name=TASK,\n"
            "                     source_path=SOURCE_NAME)",
}
_CUDA_NOTE = """
A CUDA kernel: compiled by NVRTC for the current GPU and launched on PyTorch's current
stream; ModelNew takes CUDA tensors (model.cuda(), inputs on the GPU)."""


def _imported_part(graph_path, task_path, ins, outs):
    """ModelNew(Model) and the delegating get_inputs/get_init_inputs, from graph.json."""
    try:
        graph = json.loads(graph_path.read_text())
    except ValueError as e:
        raise KernelRunError("%s: not valid JSON: %s" % (graph_path, e)) from None
    if not isinstance(graph, dict) or graph.get("format") != "kforge-graph":
        raise KernelRunError("%s: not a kforge graph (\"format\" is not \"kforge-graph\")"
                             % graph_path)
    model = graph.get("model")
    if not isinstance(model, str):
        raise KernelRunError("%s: no \"model\" path" % graph_path)
    model_path = Path(model) if Path(model).is_absolute() else (graph_path.parent / model)
    if not model_path.is_file():
        print("kforge export: warning: %s: model file %s not found; set KFORGE_TORCH_MODEL "
              "when importing the exported module" % (graph_path, model_path), file=sys.stderr)
    if len(graph.get("outputs") or []) != len(outs):
        raise KernelRunError("%s: the graph has %d outputs, the kernel %d"
                             % (graph_path, len(graph.get("outputs") or []), len(outs)))
    chosen = _map_graph_inputs(graph, ins, graph_path)
    consts = [g["target"] for g in chosen if g["kind"] == "constant"]
    embedded = {}
    st = task_path.parent / "params.safetensors"
    if consts and st.is_file():
        raw = _read_safetensors(st, consts)
        if sum(len(v[2]) for v in raw.values()) > MAX_EMBEDDED_BYTES:
            raise KernelRunError("%s: constants %s are too large to embed" % (st, ", ".join(consts)))
        embedded = {k: (d, s, base64.b64encode(b).decode()) for k, (d, s, b) in raw.items()}
    forms = {"input": "args[%(index)d]", "param": "self.get_parameter(%(target)r)",
             "buffer": "self.get_buffer(%(target)r)", "constant": "_constant(self, %(target)r)",
             "draw": "_dropout_mask(self, %(shape)r, %(p)r, args)"}
    exprs = ["            %s.detach(),  # %s %s" % (forms[g["kind"]] % g, g["kind"], g.get("name"))
             for g in chosen]
    return _IMPORTED_MODEL % dict(
        model=str(model_path.resolve()), graph=str(graph_path.resolve()), constants=embedded,
        mode=graph.get("mode", "eval"),
        runtime=_IMPORTED_RUNTIME, stem=model_path.stem, exprs="\n".join(exprs))


_MODULE_MODEL = '''MODEL_PATH = %(model)r
SPEC = %(spec)r
MODE = %(mode)r  # the module's mode at import: "train" (BatchNorm's batch statistics) or "eval"
CONSTANTS = {}
INPUT_INDEX = %(index)r  # the kernel's inputs: these positions of forward's arguments
PARAMS = %(params)r  # then the module's tensors, by attribute path, in the task's order
PACKED = %(packed)r  # the params packed into one flat argument per dtype (more than 64 buffers)

%(runtime)s

_model_module = _load_model_module()
Model = _model_module.Model


def _state(module, key):
    """The module's tensor at dotted attribute path key (a state_dict key or an attribute)."""
    obj = module
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


class ModelNew(Model):
    """%(stem)s.Model with its forward computed by the kforge kernel (inference only)."""

    def forward(self, *args):
        ins = [args[i].detach() for i in INPUT_INDEX]
        if PACKED:
            groups = {}
            for key, dt in PARAMS:
                groups.setdefault(dt, []).append(_state(self, key).detach().reshape(-1))
            ps = [torch.cat(ts) for ts in groups.values()]
        else:
            ps = [_state(self, key).detach() for key, _ in PARAMS]
        return kforge_op(*ins, *ps)


def get_inputs():
    return _model_module.get_inputs()


def get_init_inputs():
    f = getattr(_model_module, "get_init_inputs", None)
    return f() if f is not None else []
'''


def _module_part(task_path, name, ins, outs, where):
    """ModelNew(Model) of a module task (docs/task-format.md, "Module tasks"): the module's
    Model (the copy beside the task, the reference's), whose forward hands the kernel the
    tensors among its arguments, then the module's params and tensor attributes, read off
    the module at call time, in the task's order (packed per dtype where the task packs
    them). Refused: a forward that draws random tensors (the kernel takes the draws recorded
    at import, which no ModelNew call could match to the Model's own)."""
    spec_path = task_path.parent / ("%s.json" % name)
    try:
        spec = json.loads(spec_path.read_text())
    except OSError as e:
        raise KernelRunError("%s: module task %s has no spec: %s" % (where, name, e.strerror or e)) from None
    except ValueError as e:
        raise KernelRunError("%s: not valid JSON: %s" % (spec_path, e)) from None
    if spec.get("format") != "kforge-module":
        raise KernelRunError("%s: not a kforge module spec" % spec_path)
    params = spec.get("params") or []
    draws = [p["name"] for p in params if p.get("draw")]
    if draws:
        raise KernelRunError("%s: module task %s: its forward draws random tensors (%s), which the kernel "
                             "takes as the values recorded at import; a ModelNew could not match the Model's "
                             "own draws, so it is not exported" % (where, name, ", ".join(draws)))
    packed = any(p.get("packed") for p in params)
    kin = [(a.name, a.dtype, tuple(a.shape)) for a in ins]
    want = [(x["name"], x["dtype"], tuple(x["shape"])) for x in spec.get("inputs") or []]
    if packed:
        for dt in dict.fromkeys(p["dtype"] for p in params):  # module_task.py's packing
            n = sum(math.prod(p["shape"]) for p in params if p["dtype"] == dt)
            want.append(("p_weights" if dt == "f32" else "p_weights_%s" % dt, dt, (n,)))
    else:
        want += [(p["name"], p["dtype"], tuple(p["shape"])) for p in params]
    if kin != want:
        raise KernelRunError("%s: the kernel's inputs %s are not module task %s's (%s): pass --task with the task "
                             "of this run" % (where, kin, name, want))
    outs_want = [(o["name"], o["dtype"], tuple(o["shape"])) for o in spec.get("outputs") or []]
    if [(a.name, a.dtype, tuple(a.shape)) for a in outs] != outs_want:
        raise KernelRunError("%s: the kernel's outputs are not module task %s's (%s)" % (where, name, outs_want))
    model_path = task_path.parent / spec.get("source", "%s.py" % name)
    if not model_path.is_file():
        raise KernelRunError("%s: module task %s: its module's source %s is missing" % (where, name, model_path))
    return _MODULE_MODEL % dict(
        model=str(model_path.resolve()), spec=str(spec_path.resolve()), mode=spec.get("mode", "eval"),
        index=[x["index"] for x in spec["inputs"]], params=[(p["key"], p["dtype"]) for p in params],
        packed=packed, runtime=_IMPORTED_RUNTIME, stem=model_path.stem)


def _plain_part(task, task_path, ins, outs, names, where, device=None):
    """ModelNew(nn.Module) taking the task's inputs, get_inputs() from the task's inputs."""
    tin = parse_task_inputs(task_path)
    got = [(n, d, s) for n, d, s, _ in tin]
    want = [(a.name, a.dtype, a.shape) for a in ins]
    if got != want:
        raise KernelRunError("%s: the task's inputs %s do not match the kernel's %s (%s); pass "
                             "--task with the task of this run" % (task_path, got, want, where))
    return _PLAIN_MODEL % dict(
        task=task, names=", ".join(names), outs=", ".join(a.name for a in outs),
        detached=", ".join(n + ".detach()" for n in names),
        draws="\n".join("        %s,  # %s" % (_randn_expr(d, s, rng, device), n) for n, d, s, rng in tin))


def generate(run_dir, task_override=None):
    """The exported module's text for RUN; KernelRunError for a bad run directory."""
    run_dir = Path(run_dir)
    man = read_manifest(run_dir)
    where = run_dir / "manifest.json"
    platform = man.get("platform")
    if platform == "cuda":
        check_cuda_manifest(man, str(where))
    elif platform == "cpu":
        check_cpu_manifest(man, str(where))
    else:
        raise KernelRunError("%s: platform %r is not supported by the torch export (cpu and cuda "
                             "kernels are)" % (where, platform))
    src_path = run_dir / man.get("source", "kernel.c" if platform == "cpu" else "kernel.cu")
    if not src_path.is_file():
        raise KernelRunError("%s: the kernel source %s is missing" % (where, src_path))
    source = src_path.read_text()
    specs = [parse_arg(a) for a in man["args"]]
    ins = [a for a in specs if a.io == "in"]
    outs = [a for a in specs if a.io == "out"]
    if not ins or not outs:
        raise KernelRunError("%s: the kernel needs at least one input and one output" % where)
    task = man.get("task") or "kernel"
    if not re.match(r"^[A-Za-z_]\w*$", task):
        raise KernelRunError("%s: task name %r is not an identifier" % (where, task))
    run = None
    if (run_dir / "run.json").is_file():
        try:
            run = json.loads((run_dir / "run.json").read_text())
        except ValueError as e:
            raise KernelRunError("%s: not valid JSON: %s" % (run_dir / "run.json", e)) from None
    task_path = _find_task(run_dir, run, task_override)
    module_line = next((line.split()[1] for line in task_path.read_text().splitlines()
                        if line.startswith("module ") and len(line.split()) == 2), None)
    graph_path = task_path.parent / "graph.json"

    names = [_param_name(a.name) for a in ins]
    meta = {k: man.get(k) for k in ("schedule", "time_ms", "pct_floor", "device", "compiler_version")}
    meta.update(run=str(run_dir.resolve()), task_path=str(task_path.resolve()))
    if platform == "cuda":
        # the plan and the options, checked now (a malformed plan fails here, not at import)
        kern = CudaKernel(source, man.get("build_options", ""), man["args"], man.get("launches"),
                          man.get("scratch_bytes"), name=task, source_path=src_path.name,
                          where=str(where), load=False)
        fields = "BUILD_OPTIONS = %r\nLAUNCHES = %r\nSCRATCH_BYTES = %r" % (
            kern.build_options, man.get("launches") if kern.form == "nvrtc" else None,
            man.get("scratch_bytes") if kern.form == "nvrtc" else None)
    else:
        fields = "ENTRY = %r\nCOMPILE = %r" % (man["entry"], man["compile"])
    text = _HEADER % dict(
        task=task, run=run_dir.resolve(), task_path=task_path.resolve(), schedule=man.get("schedule", "?"),
        time_ms=man.get("time_ms", "?"), device=man.get("device", "?"),
        args="; ".join(man["args"]), loader=_loader_source(platform), platform=platform,
        kernel_fields=fields, source_name=src_path.name,
        platform_note=_CUDA_NOTE if platform == "cuda" else "",
        arglist=list(man["args"]), meta=meta)
    if module_line:  # a module task: the module's own Model, its params read off the module
        text += _module_part(task_path, module_line, ins, outs, where)
    elif graph_path.is_file():  # the task came from `kforge import`
        text += _imported_part(graph_path, task_path, ins, outs)
    else:
        text += _plain_part(task, task_path, ins, outs, names, where,
                            "cuda" if platform == "cuda" else None)
    text += _TRAILER % dict(src="%s of run %s" % (src_path.name, run_dir.resolve()),
                            source=_py_str(source), construct=_CONSTRUCT[platform])
    # The generated text must parse and carry the kernel source unchanged.
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "KERNEL_SOURCE":
            if ast.literal_eval(node.value) != source:
                raise AssertionError("kernel source not embedded faithfully")
    return text


def export(run_dir, out=None, task=None):
    """Writes the module for RUN to `out` (default RUN/kforge_torch_export.py); its path."""
    text = generate(run_dir, task)
    path = Path(out) if out else Path(run_dir) / DEFAULT_OUT
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as e:  # a usage error (exit 2) naming the path, not a traceback
        bad = e.filename or path
        raise KernelRunError("%s: cannot write the module: %s" % (bad, e.strerror or e)) from None
    return path


# ---------------------------------------------------------------------------------------------
# --check


def import_file(path):
    """Imports a Python file by path (a module name derived from it)."""
    path = os.path.abspath(path)
    name = "_kforge_export_" + hashlib.sha256(path.encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _tolerance(dtype):
    return {torch.float16: 1e-2, torch.bfloat16: 2e-2}.get(dtype, 1e-4) if dtype.is_floating_point else 0.0


def compare(got, want):
    """(ok, [lines]) for two outputs (tensors or tuples), allclose per output at atol=rtol
    of the dtype (1e-4 for f32/f64, 1e-2 f16, 2e-2 bf16, exact for integers)."""
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    if len(got) != len(want):
        return False, ["%d outputs, the reference has %d" % (len(got), len(want))]
    ok, lines = True, []
    for i, (g, r) in enumerate(zip(got, want)):
        if g.shape != r.shape or g.dtype != r.dtype:
            ok = False
            lines.append("output %d: %s %s, reference %s %s"
                         % (i, g.dtype, list(g.shape), r.dtype, list(r.shape)))
            continue
        tol = _tolerance(r.dtype)
        gd, rd = g.detach().double(), r.detach().double()
        diff = (gd - rd).abs()
        big = rd.abs() > tol  # relative error where the reference is not near zero
        max_abs = diff.max().item() if diff.numel() else 0.0
        max_rel = (diff[big] / rd.abs()[big]).max().item() if big.any() else 0.0
        close = torch.allclose(gd, rd, atol=tol, rtol=tol, equal_nan=True)
        ok = ok and close
        lines.append("output %d %s: max abs err %.3g, max rel err %.3g, allclose(atol=rtol=%g) %s"
                     % (i, list(r.shape), max_abs, max_rel, tol, "ok" if close else "MISMATCH"))
    return ok, lines


def check(file, model=None, seed=0, compile_=True, out=sys.stdout):
    """--check: 0 when ModelNew (eager and compiled) matches the reference Model, else 1."""
    if model:
        if not Path(model).is_file():
            raise KernelRunError("%s: no such model file" % model)
        os.environ["KFORGE_TORCH_MODEL"] = os.path.abspath(model)
    if not Path(file).is_file():
        raise KernelRunError("%s: no such file" % file)
    gen = import_file(file)
    if model and getattr(gen, "MODEL_PATH", None) is None:
        ref_mod = import_file(model)  # a plain task checked against a hand-written Model
    elif getattr(gen, "MODEL_PATH", None) is not None:
        ref_mod = gen._model_module
    else:
        raise KernelRunError("%s: exported from a plain .kf task, which has no reference Model; "
                             "pass --model MODEL.py" % file)
    if not hasattr(ref_mod, "Model"):
        raise KernelRunError("%s: no class Model" % getattr(ref_mod, "__file__", model))
    init_fn = getattr(ref_mod, "get_init_inputs", None) or gen.get_init_inputs
    inputs_fn = getattr(ref_mod, "get_inputs", None) or gen.get_inputs
    init = list(init_fn())
    torch.manual_seed(seed)
    ref = ref_mod.Model(*init)
    torch.manual_seed(seed)
    new = gen.ModelNew(*init)
    ref.train(getattr(gen, "MODE", "eval") == "train")  # the semantics the kernel was imported with
    new.train(getattr(gen, "MODE", "eval") == "train")
    torch.manual_seed(seed)
    inputs = list(inputs_fn())
    ok = True
    ref_state, new_state = ref.state_dict(), new.state_dict()
    for k, v in ref_state.items():
        if k in new_state and not torch.equal(v, new_state[k]):
            print("state %s differs between Model and ModelNew under seed %d" % (k, seed), file=out)
            ok = False
    where = "on the CPU"
    if getattr(gen, "PLATFORM", "cpu") == "cuda":  # both models and the inputs on the GPU
        dev = gen._kernel.device
        ref, new = ref.to(dev), new.to(dev)
        inputs = [t.to(dev) if isinstance(t, torch.Tensor) else t for t in inputs]
        where = "on %s (%s)" % (dev, torch.cuda.get_device_name(dev))
    with torch.no_grad():
        want = ref(*inputs)
        got = new(*inputs)
        good, lines = compare(got, want)
        ok = ok and good
        print("%s: ModelNew vs Model (seed %d) %s:" % (file, seed, where), file=out)
        for line in lines:
            print("  " + line, file=out)
        if compile_:
            try:
                compiled = torch.compile(new, fullgraph=True)
                got_c = compiled(*inputs)
                how = "fullgraph"
            except Exception as e:  # report, then try once more allowing graph breaks
                print("  torch.compile(fullgraph=True) failed: %s: %s" % (type(e).__name__, e),
                      file=out)
                torch._dynamo.reset()
                try:
                    got_c = torch.compile(new)(*inputs)
                    how = "with graph breaks"
                except Exception as e2:
                    print("  torch.compile failed: %s: %s" % (type(e2).__name__, e2), file=out)
                    return 1
            good, lines = compare(got_c, want)
            ok = ok and good
            print("torch.compile(ModelNew) (%s) vs Model:" % how, file=out)
            for line in lines:
                print("  " + line, file=out)
    print("check: %s" % ("ok" if ok else "MISMATCH"), file=out)
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="kforge export",
        description="Write a kforge CPU or CUDA kernel as a torch custom op and a ModelNew (RUN), or "
                    "check such a module against its reference model (--check FILE.py).")
    ap.add_argument("run", nargs="?", help="kforge run directory (kforge synth --out RUN)")
    ap.add_argument("--out", help="output .py file (default RUN/%s)" % DEFAULT_OUT)
    ap.add_argument("--task", help="the run's .kf task, when run.json's task_path does not resolve")
    ap.add_argument("--check", metavar="FILE.py", help="check an exported module")
    ap.add_argument("--model", metavar="MODEL.py",
                    help="with --check: the reference model file (class Model, get_inputs, "
                         "get_init_inputs); default the one recorded at export")
    ap.add_argument("--seed", type=int, default=0, help="with --check: torch.manual_seed (0)")
    ap.add_argument("--no-compile", action="store_true", help="with --check: skip torch.compile")
    a = ap.parse_args(argv)
    try:
        if a.check:
            if a.run or a.out or a.task:
                ap.error("--check takes FILE.py only (with --model, --seed, --no-compile)")
            return check(a.check, a.model, a.seed, not a.no_compile)
        if not a.run:
            ap.error("give a run directory RUN or --check FILE.py")
        path = export(a.run, a.out, a.task)
        print("kforge export: wrote %s (custom op kforge::%s, class ModelNew)"
              % (path, read_manifest(a.run).get("task")))
        return 0
    except KernelRunError as e:
        print("kforge export: error: %s" % e, file=sys.stderr)
        return 2
    except (OSError, RuntimeError, ImportError) as e:
        print("kforge export: error: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 3
    except Exception:  # a bug here or in the checked module: the traceback says where
        import traceback
        traceback.print_exc()
        print("kforge export: internal error", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
