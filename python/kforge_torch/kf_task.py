"""A .kf task as a PyTorch program, and its inputs as tensors: the peer the benchmarks time
kforge's kernels against (bench/cuda_vs_torch.py, kforge_torch.bench for .kf suites).

The translation is by operator, never by task: each .kf operator maps to the PyTorch call
with the same meaning, as its record in kforge's op registry gives it (`kforge ops --json`,
field `torch`; attribute names and defaults as the record lists them), and a task's
statements are evaluated in order with those functions in scope. A .kf expression is
already Python syntax apart from the literals `true` / `false` (and `inf`, a name here).

scale_task() rewrites a task's input shapes for the GPU: every dimension of 1024 or more is
multiplied by the factor, so a 4096x4096 example becomes 8192x8192 and the 2048^3 matmul
4096^3, while small batch dimensions stay as they are.
"""
import json
import math
import os
import re
import shutil
import subprocess

import torch
import torch.nn.functional as F

_INPUT = re.compile(r"^\s*input\s+(\w+)\s*:\s*(\w+)\s*\[([^\]]*)\]\s*(?:range\(([^)]*)\))?\s*$")
_STMT = re.compile(r"^\s*(output\s+)?(\w+)\s*=\s*(.+?)\s*$")
_TASK = re.compile(r"^\s*task\s+(\w+)\s*$")


class Task:
    def __init__(self, name, inputs, stmts, outputs):
        self.name = name
        self.inputs = inputs      # [(name, dtype, shape tuple, (lo, hi) or None)]
        self.stmts = stmts        # [(name, expression)]
        self.outputs = outputs    # [name] in declaration order


def parse_task(text, path="<task>"):
    name, inputs, stmts, outputs = None, [], [], []
    for ln, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _TASK.match(line)
        if m:
            name = m.group(1)
            continue
        m = _INPUT.match(line)
        if m:
            dims = tuple(int(d) for d in m.group(3).split(",") if d.strip())
            rng = tuple(float(v) for v in m.group(4).split(",")) if m.group(4) else None
            inputs.append((m.group(1), m.group(2), dims, rng))
            continue
        m = _STMT.match(line)
        if m:
            stmts.append((m.group(2), m.group(3)))
            if m.group(1):
                outputs.append(m.group(2))
            continue
        raise ValueError(f"{path}:{ln}: cannot read this line for the PyTorch peer: {raw!r}")
    if not name or not outputs:
        raise ValueError(f"{path}: no task name or no output")
    return Task(name, inputs, stmts, outputs)


def scale_task(text, factor):
    """The task's text with every input dimension >= 1024 multiplied by factor."""
    def dims(m):
        ds = [int(d) for d in m.group(2).split(",") if d.strip()]
        ds = [d * factor if d >= 1024 else d for d in ds]
        return m.group(1) + "[" + ", ".join(str(d) for d in ds) + "]"
    out = []
    for line in text.splitlines():
        if line.lstrip().startswith("input"):
            line = re.sub(r"(:\s*\w+\s*)\[([^\]]*)\]", dims, line, count=1)
        out.append(line)
    return "\n".join(out) + "\n"


# ---- the operators, by their .kf names ----

def _dims(x, axes):
    if axes is None or axes == "all":
        return tuple(range(x.dim()))
    if isinstance(axes, int):
        axes = [axes]
    return tuple(a % x.dim() for a in axes)


def _pair(a, b):
    """torch.maximum/minimum take tensors only: a scalar operand becomes one."""
    if not torch.is_tensor(a):
        a = torch.tensor(a, dtype=b.dtype, device=b.device)
    if not torch.is_tensor(b):
        b = torch.tensor(b, dtype=a.dtype, device=a.device)
    return a, b


def _prod(x, axes=None, keepdim=False):
    for d in sorted(_dims(x, axes), reverse=True):
        x = torch.prod(x, dim=d, keepdim=keepdim)
    return x


def _scan(fn, x, axis, reverse, exclusive):
    """kforge's SCAN records (cumsum, cumprod) in PyTorch: reverse runs from the end of
    the axis, exclusive shifts by one with the combiner's identity first."""
    if reverse:
        x = x.flip(axis)
    y = fn(x, dim=axis)
    if exclusive:
        ident = torch.zeros_like if fn is torch.cumsum else torch.ones_like
        first = ident(x.narrow(axis, 0, 1))
        y = torch.cat([first, y.narrow(axis, 0, x.shape[axis] - 1)], dim=axis)
    return y.flip(axis) if reverse else y


def _norm_shape(x, axes):
    ds = _dims(x, axes)
    if list(ds) != list(range(x.dim() - len(ds), x.dim())):
        raise ValueError("normalised axes must be the trailing ones")
    return tuple(x.shape[d] for d in ds)


_OPS = {}


def find_kforge(kforge=None):
    """The kforge binary: the argument, $KFORGE, this checkout's build/kforge, or PATH."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "kforge")
    for c in (kforge, os.environ.get("KFORGE"), here, shutil.which("kforge")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise RuntimeError("kforge not found: pass its path, set $KFORGE, or build it (make) so that "
                       "build/kforge exists")


def ops(kforge=None):
    """The operators by their .kf names, as PyTorch callables: read from kforge's op registry
    (`kforge ops --json`, each record's `torch` field, with its attribute names and
    defaults), never from a list kept here. Cached per binary."""
    exe = find_kforge(kforge)
    if exe not in _OPS:
        res = subprocess.run([exe, "ops", "--json"], capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"{exe} ops --json failed (exit {res.returncode}): {res.stderr.strip()}")
        scope = {"torch": torch, "F": F, "_dims": _dims, "_pair": _pair, "_prod": _prod,
                 "_norm_shape": _norm_shape, "_scan": _scan}
        table = {}
        for rec in json.loads(res.stdout):
            try:
                table[rec["name"]] = eval(rec["torch"], scope)  # the registry's own text
            except Exception as e:
                raise RuntimeError(f"op {rec['name']}: its PyTorch peer {rec['torch']!r} does not "
                                   f"evaluate: {e}") from e
        _OPS[exe] = table
    return _OPS[exe]


_LIT = re.compile(r"\btrue\b|\bfalse\b")


def torch_fn(task, kforge=None):
    """A function of the task's inputs (tensors, in declaration order) returning its
    outputs (a tuple, in declaration order). It is plain Python source with the operators
    (ops(kforge)) as globals, so torch.compile traces it like any user function."""
    args = ", ".join(i[0] for i in task.inputs)
    body = [f"    {n} = {_LIT.sub(lambda m: 'True' if m.group(0) == 'true' else 'False', e)}"
            for n, e in task.stmts]
    outs = ", ".join(task.outputs)
    src = f"def kf_task_{task.name}({args}):\n" + "\n".join(body) + f"\n    return ({outs},)\n"
    env = dict(ops(kforge))
    env["inf"] = math.inf  # an attribute value: tril(s, value=-inf)
    exec(compile(src, f"<kforge task {task.name}>", "exec"), env)
    fn = env["kf_task_" + task.name]
    fn.source = src
    return fn


_DT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
       "i64": torch.int64, "i32": torch.int32, "bool": torch.bool}


def make_inputs(task, device, gen):
    """Random inputs: uniform over the declared range, else standard normal."""
    out = []
    for _, dt, shape, rng in task.inputs:
        t = torch.empty(shape, dtype=_DT[dt], device=device)
        if dt == "bool":  # a mask: 0 and 1 alike
            t = torch.rand(shape, generator=gen).to(device) < 0.5
        elif rng:
            t.uniform_(rng[0], rng[1], generator=gen)
        else:
            t.normal_(0.0, 1.0, generator=gen)
        out.append(t)
    return out


def nbytes(t):
    return t.numel() * t.element_size()


def rel_l2(got, want):
    """||got - want|| / ||want|| in float64 (inf when got has a NaN)."""
    g, w = got.double(), want.double()
    if torch.isnan(g).any():
        return math.inf
    den = torch.linalg.vector_norm(w).item()
    num = torch.linalg.vector_norm(g - w).item()
    return num / den if den > 0 else num
