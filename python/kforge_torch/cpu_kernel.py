"""Load a kforge CPU kernel into the Python process and call it on torch tensors.

A kforge run directory (`kforge synth TASK.kf --out RUN`) holds kernel.c and manifest.json:
"args" (the entry's pointer arguments, inputs then outputs, e.g. "in x: f32[64, 256]"),
"compile" (the exact command that builds kernel.so from kernel.c, run in the source's
directory), "entry" (the C symbol, `int ENTRY(void *const *args)`) and "platform" ("cpu").

    from kforge_torch.cpu_kernel import load_cpu_kernel
    k = load_cpu_kernel("RUN")           # compiles once per (source, command, CPU), cached
    y = k(x)                             # checks x, allocates y, calls the entry
    k(x, out=[y])                        # or writes preallocated outputs (for timing)

    op = k.custom_op()                   # the torch custom op kforge::<task>

The API is `load_cpu_kernel`, `CpuKernel` (its `inputs`/`outputs` are `ArgSpec`s,
`custom_op()`), `compile_kernel`, `cache_dir`, `parse_arg`, `DTYPES` and `KernelRunError`.

The compiled library is cached in $KFORGE_CACHE_DIR/torch, else $XDG_CACHE_HOME/kforge/torch,
else ~/.cache/kforge/torch (the same root as kforge's own cache), in a folder named by a hash
of the source, the command and the CPU; nothing is written into the run directory.

The kernel runs with the OpenMP settings the process already has (OMP_NUM_THREADS etc. as
inherited): nothing here sets them.

`kforge export RUN --as torch` pastes the part between the two "loader" marker comments into
the module it writes, so that module runs without kforge_torch installed: keep that part to
the standard library and torch, and its top-level names free for the generated code.
"""
# --- kforge loader begin ---
import ctypes
import hashlib
import json
import keyword
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path

import torch

# kforge dtype names -> torch dtypes. f16/bf16 are IEEE binary16 / bfloat16 bit patterns in
# the kernel contract, which is torch's layout too.
DTYPES = {
    "f32": torch.float32,
    "f64": torch.float64,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i64": torch.int64,
    "i32": torch.int32,
    "bool": torch.bool,
}

# The kernel contract promises every buffer starts on a 64-byte boundary; torch's CPU
# allocator gives that, but a view with a storage offset may not.
_ALIGN = 64


class KernelRunError(ValueError):
    """A run directory or manifest that cannot give a CPU kernel (message: file: reason)."""


@dataclass(frozen=True)
class ArgSpec:
    """One pointer argument of the entry: "in"/"out", name, kforge dtype, shape."""
    io: str
    name: str
    dtype: str
    shape: tuple

    @property
    def torch_dtype(self):
        return DTYPES[self.dtype]

    def __str__(self):
        return "%s %s: %s[%s]" % (self.io, self.name, self.dtype, ", ".join(map(str, self.shape)))


_ARG_RE = re.compile(r"^\s*(in|out)\s+([A-Za-z_][A-Za-z0-9_]*)\s*:\s*([a-z0-9]+)\s*\[([0-9,\s]*)\]\s*$")


def parse_arg(text):
    """ "in x: f32[64, 256]" -> ArgSpec("in", "x", "f32", (64, 256)); ValueError if malformed."""
    m = _ARG_RE.match(text)
    if not m:
        raise ValueError("malformed argument %r (expected 'in|out NAME: DTYPE[D0, ...]')" % text)
    io, name, dtype, dims = m.groups()
    if dtype not in DTYPES:
        raise ValueError("argument %r: dtype %s is not supported (supported: %s)"
                         % (text, dtype, ", ".join(DTYPES)))
    shape = tuple(int(d) for d in dims.split(",") if d.strip())
    return ArgSpec(io, name, dtype, shape)


def cache_dir():
    """Where compiled kernels go: $KFORGE_CACHE_DIR/torch, $XDG_CACHE_HOME/kforge/torch or
    ~/.cache/kforge/torch."""
    if os.environ.get("KFORGE_CACHE_DIR"):
        return Path(os.environ["KFORGE_CACHE_DIR"]) / "torch"
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "kforge" / "torch"
    return Path.home() / ".cache" / "kforge" / "torch"


def _cpu_identity():
    """The machine and its CPU flags: the commands use -march=native, so a library built on
    one CPU may not run on another sharing the same home directory."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return platform.machine() + "\0" + flags


def _output_name(argv):
    """The file the command writes (its -o argument), default kernel.so."""
    for i, a in enumerate(argv):
        if a == "-o" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("-o") and len(a) > 2:
            return a[2:]
    return "kernel.so"


def compile_kernel(source, command, source_name="kernel.c", cache=None):
    """Build `source` with `command` (run in a fresh folder holding the source as
    `source_name`) unless an identical build is cached; returns the library's path.
    RuntimeError with the compiler's output if the command fails."""
    argv = shlex.split(command)
    if not argv:
        raise ValueError("empty compile command")
    out_name = _output_name(argv)
    key = hashlib.sha256("\0".join([source, command, source_name, _cpu_identity()])
                         .encode()).hexdigest()[:32]
    root = Path(cache) if cache is not None else cache_dir()
    final = root / key
    lib = final / out_name
    if lib.is_file():
        return lib
    root.mkdir(parents=True, exist_ok=True)
    # Build in a private folder, then rename it into place: a concurrent build of the same
    # kernel never sees a half-written library, and the loser of the race just uses the
    # winner's folder.
    tmp = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    try:
        (tmp / source_name).write_text(source)
        try:
            proc = subprocess.run(argv, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=600)
        except FileNotFoundError:
            raise RuntimeError("kforge kernel: compiler %r not found (command: %s)"
                               % (argv[0], command)) from None
        if proc.returncode != 0 or not (tmp / out_name).is_file():
            raise RuntimeError("kforge kernel: compile failed (exit %d): %s\n%s"
                               % (proc.returncode, command, proc.stdout[-4000:]))
        if final.exists() and not lib.is_file():
            shutil.rmtree(final, ignore_errors=True)  # left by an interrupted older version
        try:
            os.rename(tmp, final)
        except OSError:
            if not lib.is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return lib


def _check_tensor(t, spec, what, kernel):
    """TypeError/ValueError unless t is a tensor of spec's dtype and shape (the device is the
    caller's check)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError("kernel %s: %s %s must be a tensor, got %s"
                        % (kernel, what, spec.name, type(t).__name__))
    if t.dtype != spec.torch_dtype:
        raise TypeError("kernel %s: %s %s has dtype %s, expected %s (%s)"
                        % (kernel, what, spec.name, t.dtype, spec.torch_dtype, spec.dtype))
    # a 0-d tensor where the task has [1]: kforge import reads PyTorch's 0-d parameters and
    # constants as [1] (the same one element in memory)
    if tuple(t.shape) != spec.shape and not (t.dim() == 0 and tuple(spec.shape) == (1,)):
        raise ValueError("kernel %s: %s %s has shape %s, expected %s"
                         % (kernel, what, spec.name, list(t.shape), list(spec.shape)))


class _TorchOp:
    """What the CPU and CUDA kernels share: `custom_op()`, over the subclass's `name`,
    `inputs`, `outputs`, `digest` and `__call__`."""

    fake_device = "cpu"  # where the fake implementation puts outputs when there are no inputs

    def custom_op(self, name=None):
        """This kernel as the torch custom op kforge::NAME (default: the kernel's name), with a
        fake implementation giving the outputs' shapes and dtypes, so that torch.compile
        traces through it. If another kernel holds that name, kforge::NAME_<hash>. An op
        cannot be registered twice, so a table shared by the whole process (a module in
        sys.modules, which every exported file uses too) gives a second request for the same
        kernel the op registered first."""
        name = name or self.name
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise ValueError("op name %r is not an identifier" % name)
        table = sys.modules.setdefault("_kforge_torch_ops", types.ModuleType("_kforge_torch_ops"))
        ops = table.__dict__.setdefault("ops", {})
        params = ", ".join("Tensor " + _param_name(a.name) for a in self.inputs)
        ret = "Tensor" if len(self.outputs) == 1 else "(%s)" % ", ".join(["Tensor"] * len(self.outputs))

        def impl(*inputs):
            return self(*inputs)

        def fake(*inputs):
            device = inputs[0].device if inputs else self.fake_device
            outs = [torch.empty(a.shape, dtype=a.torch_dtype, device=device) for a in self.outputs]
            return outs[0] if len(outs) == 1 else tuple(outs)

        for candidate in (name, "%s_%s" % (name, self.digest[:12])):
            qual = "kforge::" + candidate
            if qual in ops:
                if ops[qual][0] == self.digest:
                    return ops[qual][1]
                continue
            if hasattr(torch.ops.kforge, candidate):  # registered by something else
                continue
            op = torch.library.custom_op(qual, impl, mutates_args=(),
                                         schema="(%s) -> %s" % (params, ret))
            op.register_fake(fake)
            ops[qual] = (self.digest, op)
            return op
        raise RuntimeError("kernel %s: kforge::%s and its hashed name are both taken" % (self.name, name))


class CpuKernel(_TorchOp):
    """A compiled kforge CPU kernel, callable on torch tensors.

    `k(*inputs, out=None)`: one tensor per "in" argument, in order, each of the declared dtype
    and shape on the CPU (non-contiguous or misaligned ones are copied); returns the output
    (a tuple when there are several), freshly allocated unless `out` gives them. A non-zero
    return from the entry raises RuntimeError naming the kernel.
    """

    def __init__(self, source, command, entry, args, name="kernel", source_name="kernel.c",
                 cache=None):
        specs = [a if isinstance(a, ArgSpec) else parse_arg(a) for a in args]
        self.name = name
        self.entry = entry
        self.inputs = [a for a in specs if a.io == "in"]
        self.outputs = [a for a in specs if a.io == "out"]
        if specs != self.inputs + self.outputs:
            raise ValueError("kernel %s: arguments must be the inputs, then the outputs" % name)
        if not self.outputs:
            raise ValueError("kernel %s: no output argument" % name)
        self.library = compile_kernel(source, command, source_name, cache)
        self._dll = ctypes.CDLL(str(self.library))
        try:
            fn = getattr(self._dll, entry)
        except AttributeError:
            raise RuntimeError("kernel %s: %s does not define %s" % (name, self.library, entry)) from None
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        fn.restype = ctypes.c_int
        self._fn = fn
        self._nargs = len(specs)
        h = hashlib.sha256()
        for part in [source, command, entry] + [str(a) for a in specs]:
            h.update(part.encode() + b"\0")
        self.digest = h.hexdigest()  # identifies what the kernel computes, and how

    def _check(self, t, spec, what):
        _check_tensor(t, spec, what, self.name)
        if t.device.type != "cpu":
            raise ValueError("kernel %s: %s %s is on %s; this is a CPU kernel"
                             % (self.name, what, spec.name, t.device))

    def __call__(self, *inputs, out=None):
        if len(inputs) != len(self.inputs):
            raise TypeError("kernel %s takes %d inputs (%s), got %d"
                            % (self.name, len(self.inputs), ", ".join(a.name for a in self.inputs),
                               len(inputs)))
        ins = []
        for t, spec in zip(inputs, self.inputs):
            self._check(t, spec, "input")
            t = t.detach()
            if not t.is_contiguous() or t.data_ptr() % _ALIGN:
                t = t.clone(memory_format=torch.contiguous_format)
            ins.append(t)
        if out is None:
            outs = [torch.empty(a.shape, dtype=a.torch_dtype) for a in self.outputs]
        else:
            outs = list(out)
            if len(outs) != len(self.outputs):
                raise TypeError("kernel %s writes %d outputs, out= gives %d"
                                % (self.name, len(self.outputs), len(outs)))
            for t, spec in zip(outs, self.outputs):
                self._check(t, spec, "output")
                if not t.is_contiguous() or t.data_ptr() % _ALIGN:
                    raise ValueError("kernel %s: output %s must be contiguous and 64-byte aligned"
                                     % (self.name, spec.name))
        ptrs = (ctypes.c_void_p * self._nargs)(*[t.data_ptr() for t in ins + outs])
        rc = self._fn(ptrs)  # ctypes releases the GIL for the call
        if rc != 0:
            raise RuntimeError("kforge kernel %s (%s in %s) returned %d"
                               % (self.name, self.entry, self.library, rc))
        return outs[0] if len(outs) == 1 else tuple(outs)


def _param_name(name):
    """An argument name usable in Python and in a torch op schema."""
    return name + "_" if keyword.iskeyword(name) or name in ("self", "out", "torch", "args") else name
# --- kforge loader end ---


def read_manifest(run_dir):
    """RUN/manifest.json as a dict; KernelRunError (file: reason) if absent or malformed."""
    path = Path(run_dir) / "manifest.json"
    if not Path(run_dir).is_dir():
        raise KernelRunError("%s: not a directory (expected a kforge run directory)" % run_dir)
    if not path.is_file():
        raise KernelRunError("%s: no manifest.json (not a kforge run directory; "
                             "`kforge synth TASK.kf --out DIR` writes one)" % path)
    try:
        man = json.loads(path.read_text())
    except ValueError as e:
        raise KernelRunError("%s: not valid JSON: %s" % (path, e)) from None
    if not isinstance(man, dict):
        raise KernelRunError("%s: not a JSON object" % path)
    return man


def check_cpu_manifest(man, where):
    """Raise KernelRunError unless `man` describes a CPU kernel with every field needed."""
    plat = man.get("platform")
    if plat != "cpu":
        hint = (" (a CUDA run: kforge_torch.cuda_kernel.load_cuda_kernel loads it)"
                if plat == "cuda" else " (kernels of platforms 'cpu' and 'cuda' can be loaded)")
        raise KernelRunError("%s: platform %r is not a CPU kernel%s" % (where, plat, hint))
    for key in ("args", "compile", "entry"):
        if key not in man:
            raise KernelRunError("%s: no %r field" % (where, key))
    try:
        [parse_arg(a) for a in man["args"]]
    except (TypeError, ValueError) as e:
        raise KernelRunError("%s: %s" % (where, e)) from None


def load_cpu_kernel(run_dir=None, *, source=None, command=None, entry=None, args=None,
                    name=None, cache=None):
    """A CpuKernel from a run directory (`load_cpu_kernel("RUN")`), or from explicit fields
    (`source` text, `command`, `entry`, `args` strings; `name` for messages). Fields given
    next to `run_dir` override the manifest's. KernelRunError for a bad run directory."""
    source_name = "kernel.c"
    if run_dir is not None:
        man = read_manifest(run_dir)
        where = str(Path(run_dir) / "manifest.json")
        check_cpu_manifest(man, where)
        source_name = man.get("source", "kernel.c")
        if source is None:
            src = Path(run_dir) / source_name
            if not src.is_file():
                raise KernelRunError("%s: the kernel source %s named by the manifest is missing"
                                     % (where, src))
            source = src.read_text()
        command = command or man["compile"]
        entry = entry or man["entry"]
        args = args or man["args"]
        name = name or man.get("task", "kernel")
    if source is None or command is None or entry is None or args is None:
        raise TypeError("load_cpu_kernel needs run_dir, or source, command, entry and args")
    return CpuKernel(source, command, entry, args, name=name or "kernel",
                     source_name=Path(source_name).name, cache=cache)
