"""A .kf task as a PyTorch program, and its inputs as tensors: the peer the benchmarks time
kforge's kernels against (bench/cuda_vs_torch.py, kforge_torch.bench for .kf suites).

The translation is by operator, never by task: each .kf operator maps to the PyTorch call
with the same meaning (attribute names and defaults as `kforge ops` lists them), and a
task's statements are evaluated in order with those functions in scope. A .kf expression is
already Python syntax apart from the literals `true` / `false`.

scale_task() rewrites a task's input shapes for the GPU: every dimension of 1024 or more is
multiplied by the factor, so a 4096x4096 example becomes 8192x8192 and the 2048^3 matmul
4096^3, while small batch dimensions stay as they are.
"""
import math
import re

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


def _norm_shape(x, axes):
    ds = _dims(x, axes)
    if list(ds) != list(range(x.dim() - len(ds), x.dim())):
        raise ValueError("normalised axes must be the trailing ones")
    return tuple(x.shape[d] for d in ds)


OPS = {
    "relu": torch.relu,
    "leaky_relu": lambda x, negative_slope=0.01: F.leaky_relu(x, negative_slope),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "swish": F.silu,
    "selu": F.selu,
    "elu": lambda x, alpha=1.0: F.elu(x, alpha),
    "hardsigmoid": F.hardsigmoid,
    "hardtanh": lambda x, min_val=-1.0, max_val=1.0: F.hardtanh(x, min_val, max_val),
    "softplus": lambda x, beta=1.0, threshold=20.0: F.softplus(x, beta, threshold),
    "softsign": F.softsign,
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "abs": torch.abs,
    "neg": torch.neg,
    "square": torch.square,
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "maximum": lambda a, b: torch.maximum(*_pair(a, b)),
    "minimum": lambda a, b: torch.minimum(*_pair(a, b)),
    "pow": torch.pow,
    "sum": lambda x, axes=None, keepdim=False: torch.sum(x, dim=_dims(x, axes), keepdim=keepdim),
    "mean": lambda x, axes=None, keepdim=False: torch.mean(x, dim=_dims(x, axes), keepdim=keepdim),
    "max": lambda x, axes=None, keepdim=False: torch.amax(x, dim=_dims(x, axes), keepdim=keepdim),
    "min": lambda x, axes=None, keepdim=False: torch.amin(x, dim=_dims(x, axes), keepdim=keepdim),
    "prod": _prod,
    "argmax": lambda x, axis=-1, keepdim=False: torch.argmax(x, dim=axis, keepdim=keepdim),
    "argmin": lambda x, axis=-1, keepdim=False: torch.argmin(x, dim=axis, keepdim=keepdim),
    "softmax": lambda x, axis=-1: torch.softmax(x, dim=axis),
    "log_softmax": lambda x, axis=-1: torch.log_softmax(x, dim=axis),
    "layer_norm": lambda x, w=None, b=None, axes=-1, eps=1e-5:
        F.layer_norm(x, _norm_shape(x, axes), w, b, eps),
    "rms_norm": lambda x, w=None, axes=-1, eps=1e-6: F.rms_norm(x, _norm_shape(x, axes), w, eps),
    "matmul": lambda a, b, transpose_a=False, transpose_b=False:
        torch.matmul(a.transpose(-1, -2) if transpose_a else a, b.transpose(-1, -2) if transpose_b else b),
}

_LIT = re.compile(r"\btrue\b|\bfalse\b")


def torch_fn(task):
    """A function of the task's inputs (tensors, in declaration order) returning its
    outputs (a tuple, in declaration order). It is plain Python source with the operators
    as globals, so torch.compile traces it like any user function."""
    args = ", ".join(i[0] for i in task.inputs)
    body = [f"    {n} = {_LIT.sub(lambda m: 'True' if m.group(0) == 'true' else 'False', e)}"
            for n, e in task.stmts]
    outs = ", ".join(task.outputs)
    src = f"def kf_task_{task.name}({args}):\n" + "\n".join(body) + f"\n    return ({outs},)\n"
    env = dict(OPS)
    exec(compile(src, f"<kforge task {task.name}>", "exec"), env)
    fn = env["kf_task_" + task.name]
    fn.source = src
    return fn


_DT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
       "i64": torch.int64, "i32": torch.int32}


def make_inputs(task, device, gen):
    """Random inputs: uniform over the declared range, else standard normal."""
    out = []
    for _, dt, shape, rng in task.inputs:
        t = torch.empty(shape, dtype=_DT[dt], device=device)
        if rng:
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
