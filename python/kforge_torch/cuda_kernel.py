"""Load a kforge CUDA kernel into the PyTorch process and call it on torch CUDA tensors.

A CUDA run directory (`kforge synth TASK.kf --target cuda --out RUN`) holds kernel.cu and
manifest.json: "platform" ("cuda"), "args" (the buffers, inputs then outputs, as for the CPU:
"in x: f32[64, 256]"), "source", "build_options" (the NVRTC options kforge built it with,
tunables included: "--gpu-architecture=sm_90 -default-device --std=c++17 -DWG=256") and, for
a kernel in the NVRTC form (docs/kernel-contract.md), "launches" (the resolved launch plan:
[{"kernel", "global", "local", "args"}], args being buffer indices or scratch names) and
"scratch_bytes" ({name: bytes}).

    from kforge_torch.cuda_kernel import load_cuda_kernel
    k = load_cuda_kernel("RUN")          # NVRTC compile (cached) + cuModuleLoadData
    y = k(x)                             # x a CUDA tensor; y allocated on x's device
    k(x, out=[y])                        # or writes preallocated outputs (for timing)
    op = k.custom_op()                   # the torch custom op kforge::<task> (fake impl too)

The same interface as kforge_torch.cpu_kernel: `load_cuda_kernel`, `CudaKernel` (`inputs` /
`outputs` are `ArgSpec`s, `custom_op()`), `KernelRunError` for a run directory, manifest or
machine that cannot give a CUDA kernel, `CudaLaunchError` for a launch the driver refuses or
a fault it reports.

How it runs (docs/design-notes.md, "The CUDA benchmark loads kforge's kernel into the
PyTorch process through ctypes"): the driver API (libcuda.so.1) and NVRTC are called through
ctypes, no extension is built. The source is compiled by NVRTC with the manifest's options,
the architecture replaced by the device's own (the text is the one kforge verified; a CUBIN
only loads on its architecture), into a CUBIN cached under the same root as the CPU loader's
($KFORGE_CACHE_DIR/torch/cuda, ...). It is loaded into the device's primary context, the one
PyTorch uses, and each call queues the plan's launches with cuLaunchKernel on PyTorch's
current stream, without waiting: the call is asynchronous like any CUDA op. Scratch buffers
are allocated once per loaded kernel (torch tensors on the device), as the contract says.
`sync=True` (or KFORGE_CUDA_SYNC=1) waits after every launch, so that a fault is charged
to the launch that made it.

A kernel in the nvcc form (no `kforge:launch` line; `extern "C" int kforge_kernel(void *const
*args)` launching its own kernels on the legacy default stream) is built with nvcc into a
shared library (cached, like a CPU kernel) and called with device pointers; PyTorch's current
stream waits for it when it is another stream.

`kforge export RUN --as torch` pastes the part between the two "cuda loader" marker comments
(after the CPU loader's part, whose names it uses) into the module it writes.
"""
from pathlib import Path

from .cpu_kernel import (DTYPES, ArgSpec, KernelRunError, _check_tensor, _param_name,  # noqa: F401
                         _TorchOp, cache_dir, compile_kernel, parse_arg, read_manifest)

# --- kforge cuda loader begin ---
import ctypes
import hashlib
import os
import re
import shlex
import shutil

import torch

# The contract promises 256-byte aligned buffers; PyTorch's caching allocator gives 512, a
# view with a storage offset may not.
_CUDA_ALIGN = 256
_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class CudaLaunchError(RuntimeError):
    """A launch the driver refused, or a fault it reported (message: kernel, launch, error)."""


def _cuda_where(name, path):
    return "kernel %s (%s)" % (name, path)


class _Driver:
    """libcuda.so.1 in PyTorch's primary context of one device. KernelRunError (naming
    `where`) when the machine cannot run CUDA kernels: a PyTorch without CUDA, no driver, no
    device."""

    _cache = {}

    @classmethod
    def get(cls, device, where):
        key = device.index
        if key not in cls._cache:
            cls._cache[key] = cls(device, where)
        return cls._cache[key]

    def __init__(self, device, where):
        if torch.version.cuda is None:
            raise KernelRunError("%s: cannot run here: this PyTorch (%s) is built without CUDA"
                                 % (where, torch.__version__))
        try:
            self.cu = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise KernelRunError("%s: cannot run here: no CUDA driver (libcuda.so.1 not found: "
                                 "%s)" % (where, e)) from None
        if not torch.cuda.is_available():
            raise KernelRunError("%s: cannot run here: PyTorch sees no CUDA device "
                                 "(torch.cuda.is_available() is False; CUDA_VISIBLE_DEVICES=%r)"
                                 % (where, os.environ.get("CUDA_VISIBLE_DEVICES")))
        if device.index >= torch.cuda.device_count():
            raise KernelRunError("%s: cannot run here: no device %s (%d visible)"
                                 % (where, device, torch.cuda.device_count()))
        cu = self.cu
        cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        cu.cuLaunchKernel.restype = ctypes.c_int
        cu.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        cu.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        cu.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
        cu.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                                           ctypes.c_char_p]
        cu.cuFuncGetAttribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                          ctypes.c_void_p]
        cu.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        self.device = device
        torch.zeros(1, device=device)  # PyTorch creates (and holds) the primary context
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        self.check(cu.cuInit(0), "cuInit", where)
        self.check(cu.cuDeviceGet(ctypes.byref(dev), device.index), "cuDeviceGet", where)
        self.check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev),
                   "cuDevicePrimaryCtxRetain", where)
        self.ctx = ctx.value
        self.make_current(where)
        major, minor = torch.cuda.get_device_capability(device)
        self.arch = "sm_%d%d" % (major, minor)

    def error(self, rc):
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.cu.cuGetErrorName(rc, ctypes.byref(name))
        self.cu.cuGetErrorString(rc, ctypes.byref(text))
        return "%s (%s)" % (name.value.decode() if name.value else "CUresult %d" % rc,
                            text.value.decode() if text.value else "?")

    def check(self, rc, what, where, exc=KernelRunError):
        if rc != 0:
            raise exc("%s: %s: %s" % (where, what, self.error(rc)))

    def make_current(self, where):
        """The primary context current on this thread (torch.compile and autograd may call
        from threads where the driver API has none yet)."""
        cur = ctypes.c_void_p()
        self.cu.cuCtxGetCurrent(ctypes.byref(cur))
        if cur.value != self.ctx:
            self.check(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent", where)


def _nvrtc_candidates():
    """Where libnvrtc is looked for: the toolkit ($CUDA_HOME, /usr/local/cuda), the NVIDIA
    wheels PyTorch depends on, then the loader's path."""
    names = ["libnvrtc.so.13", "libnvrtc.so", "libnvrtc.so.12"]
    dirs = []
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            dirs += [os.path.join(home, "lib64"), os.path.join(home, "lib")]
    try:
        import nvidia  # the namespace package of PyTorch's CUDA wheels
        for base in getattr(nvidia, "__path__", []):
            dirs += [os.path.join(base, "cu13", "lib"), os.path.join(base, "cuda_nvrtc", "lib")]
    except ImportError:
        pass
    return [os.path.join(d, n) for d in dirs for n in names] + names


def _load_nvrtc(candidates=None, where="kforge"):
    """The NVRTC library (ctypes.CDLL); KernelRunError listing what was tried if none loads."""
    tried = []
    for c in candidates if candidates is not None else _nvrtc_candidates():
        if os.sep in c and not os.path.exists(c):
            continue
        try:
            return ctypes.CDLL(c)
        except OSError as e:
            tried.append("%s (%s)" % (c, e))
    raise KernelRunError("%s: NVRTC not found (libnvrtc.so.13, .so or .so.12 in $CUDA_HOME/lib64, "
                         "/usr/local/cuda/lib64, the nvidia wheels or the loader path; set "
                         "CUDA_HOME)%s" % (where, ": " + "; ".join(tried[-3:]) if tried else ""))


def _cuda_include():
    """-I for the toolkit's headers (cuda_fp16.h, cuda_bf16.h), when one is found."""
    dirs = [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    try:
        import nvidia
        dirs += [os.path.join(b, "cu13") for b in getattr(nvidia, "__path__", [])]
    except ImportError:
        pass
    for d in dirs:
        if d and os.path.isfile(os.path.join(d, "include", "cuda_fp16.h")):
            return "-I" + os.path.join(d, "include")
    return None


def nvrtc_options(build_options, arch=None):
    """The manifest's build options as NVRTC arguments, the architecture replaced by `arch`
    (e.g. "sm_90") when given, the toolkit's include folder added."""
    opts = shlex.split(build_options or "")
    if arch:
        opts = [o for o in opts if not re.match(r"^(--gpu-architecture|-arch)=", o)]
        opts.insert(0, "--gpu-architecture=" + arch)
    inc = _cuda_include()
    if inc and inc not in opts:
        opts.append(inc)
    return opts


def nvrtc_compile(source, options, where, source_name="kernel.cu", cache=None, nvrtc=None):
    """A CUBIN of `source` built by NVRTC with `options` (cached by source, options and NVRTC
    version); RuntimeError with NVRTC's log, naming `where`, if it fails."""
    nv = nvrtc or _load_nvrtc(where=where)
    major, minor = ctypes.c_int(), ctypes.c_int()
    nv.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    key = hashlib.sha256("\0".join([source, " ".join(options), source_name,
                                    "nvrtc %d.%d" % (major.value, minor.value)]).encode()).hexdigest()[:32]
    root = (Path(cache) if cache is not None else cache_dir()) / "cuda"
    path = root / (key + ".cubin")
    if path.is_file():
        return path.read_bytes()
    nv.nvrtcGetErrorString.restype = ctypes.c_char_p
    prog = ctypes.c_void_p()
    rc = nv.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), source_name.encode(), 0, None, None)
    if rc:
        raise RuntimeError("%s: nvrtcCreateProgram: %s" % (where, nv.nvrtcGetErrorString(rc).decode()))
    try:
        arr = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        rc = nv.nvrtcCompileProgram(prog, len(options), arr)
        if rc:
            n = ctypes.c_size_t()
            nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            log = ctypes.create_string_buffer(n.value + 1)
            nv.nvrtcGetProgramLog(prog, log)
            raise RuntimeError("%s: NVRTC compile failed (%s) with options %s:\n%s"
                               % (where, nv.nvrtcGetErrorString(rc).decode(), " ".join(options),
                                  log.value.decode(errors="replace")[-3000:]))
        n = ctypes.c_size_t()
        rc = nv.nvrtcGetCUBINSize(prog, ctypes.byref(n))
        if rc or n.value == 0:
            raise RuntimeError("%s: NVRTC gave no CUBIN (%s): the options must name a real "
                               "architecture, --gpu-architecture=sm_XY" % (where, " ".join(options)))
        cubin = ctypes.create_string_buffer(n.value)
        nv.nvrtcGetCUBIN(prog, cubin)
    finally:
        nv.nvrtcDestroyProgram(ctypes.byref(prog))
    data = cubin.raw
    try:  # write then rename: a concurrent process never reads half a file
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / ("%s.%d.tmp" % (key, os.getpid()))
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache costs a compile per process, nothing else
    return data


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_launch_plan(launches, scratch_bytes, nargs, where):
    """The manifest's resolved plan as [(kernel, grid(3), block(3), args, smem)], scratch as
    {name: bytes}; KernelRunError (naming `where` and the launch) for anything malformed:
    the sizes, a global size not a multiple of the block, a buffer index or scratch name
    that does not exist."""
    if not isinstance(launches, list) or not launches:
        raise KernelRunError("%s: no \"launches\" (the NVRTC form needs its resolved launch plan; "
                             "kforge synth writes it)" % where)
    scratch = scratch_bytes if scratch_bytes is not None else {}
    if not isinstance(scratch, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in scratch.items()):
        raise KernelRunError("%s: \"scratch_bytes\" must map names to byte counts >= 0" % where)
    plan = []
    for i, l in enumerate(launches):
        at = "%s: launch %d" % (where, i)
        if not isinstance(l, dict):
            raise KernelRunError("%s: not an object" % at)
        k = l.get("kernel")
        if not isinstance(k, str) or not _IDENT.match(k):
            raise KernelRunError("%s: \"kernel\" %r is not a kernel name" % (at, k))
        g, b, a = l.get("global"), l.get("local"), l.get("args")
        for key, v in (("global", g), ("local", b)):
            if (not isinstance(v, list) or not 1 <= len(v) <= 3 or
                    not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v)):
                raise KernelRunError("%s (%s): %r must be 1 to 3 positive integers" % (at, k, key))
        if len(g) != len(b):
            raise KernelRunError("%s (%s): global %s and local %s have different dimensions"
                                 % (at, k, g, b))
        if any(x % y for x, y in zip(g, b)):
            raise KernelRunError("%s (%s): global %s is not a multiple of local %s" % (at, k, g, b))
        grid = [x // y for x, y in zip(g, b)] + [1] * (3 - len(g))
        block = list(b) + [1] * (3 - len(b))
        if block[0] * block[1] * block[2] > 1024:
            raise KernelRunError("%s (%s): block %s has more than 1024 threads" % (at, k, b))
        if grid[0] > 2 ** 31 - 1 or grid[1] > 65535 or grid[2] > 65535:
            raise KernelRunError("%s (%s): grid %s exceeds CUDA's limits" % (at, k, grid))
        smem = l.get("smem", 0)
        if isinstance(smem, bool) or not isinstance(smem, int) or smem < 0:
            raise KernelRunError("%s (%s): \"smem\" %r must be a byte count >= 0" % (at, k, smem))
        if not isinstance(a, list):
            raise KernelRunError("%s (%s): no \"args\" list" % (at, k))
        for x in a:
            if isinstance(x, bool) or not (isinstance(x, int) and 0 <= x < nargs or
                                           isinstance(x, str) and x in scratch):
                raise KernelRunError("%s (%s): argument %r is neither a buffer index 0..%d nor a "
                                     "scratch buffer (%s)" % (at, k, x, nargs - 1,
                                                              ", ".join(scratch) or "none"))
        plan.append((k, tuple(grid), tuple(block), tuple(a), smem))
    return plan, dict(scratch)


def _nvcc(where):
    for c in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME") or "/usr/local/cuda", "bin", "nvcc"),
              "/usr/local/cuda/bin/nvcc"):
        if c and os.access(c, os.X_OK):
            return c
    raise KernelRunError("%s: nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): the "
                         "kernel is in the nvcc form (no kforge:launch plan)" % where)


def nvcc_command(nvcc, arch, build_options):
    """The nvcc form's build, as kforge's (docs/kernel-contract.md): the tunables' -D/-U
    flags of the manifest's options; the NVRTC-only ones are dropped."""
    flags = [o for o in shlex.split(build_options or "") if o.startswith(("-D", "-U"))]
    return " ".join(shlex.quote(w) for w in [nvcc, "-O3", "-arch=" + arch, "-Xcompiler", "-fPIC",
                                             "-shared"] + flags + ["-o", "kernel.so", "kernel.cu"])


class CudaKernel(_TorchOp):
    """A kforge CUDA kernel, callable on torch CUDA tensors.

    `k(*inputs, out=None)`: one tensor per "in" argument, in order, of the declared dtype and
    shape on the kernel's device (non-contiguous or misaligned ones are copied); returns the
    output (a tuple when there are several), allocated on that device unless `out` gives them.
    The launches are queued on PyTorch's current stream; the call does not wait for them
    (`sync=True` does, after every launch).

    `load=False` checks the arguments and the plan only (no driver, no compile): `k.load()`
    does the rest.
    """

    fake_device = "cuda"

    def __init__(self, source, build_options, args, launches=None, scratch_bytes=None,
                 name="kernel", source_path="kernel.cu", where=None, device=None, cache=None,
                 sync=None, load=True):
        specs = [a if isinstance(a, ArgSpec) else parse_arg(a) for a in args]
        self.name = name
        self.source = source
        self.build_options = build_options or ""
        self.source_path = str(source_path)
        self.where = _cuda_where(name, self.source_path)
        where = where or self.where
        self.inputs = [a for a in specs if a.io == "in"]
        self.outputs = [a for a in specs if a.io == "out"]
        if specs != self.inputs + self.outputs:
            raise KernelRunError("%s: arguments must be the inputs, then the outputs" % where)
        if not self.outputs:
            raise KernelRunError("%s: no output argument" % where)
        self.form = "nvrtc" if "kforge:launch" in source else "nvcc"
        if self.form == "nvrtc":
            self.plan, self.scratch_bytes = check_launch_plan(launches, scratch_bytes, len(specs), where)
        else:
            self.plan, self.scratch_bytes = [], {}
        self.device = torch.device(device if device is not None else "cuda")
        if self.device.type != "cuda":
            raise KernelRunError("%s: device %s is not a CUDA device" % (where, self.device))
        self.sync = bool(int(os.environ.get("KFORGE_CUDA_SYNC") or 0)) if sync is None else sync
        self._cache = cache
        self._loaded = False
        h = hashlib.sha256()
        for part in ["cuda", source, self.build_options, repr(self.plan), repr(sorted(self.scratch_bytes.items()))] + \
                [str(a) for a in specs]:
            h.update(part.encode() + b"\0")
        self.digest = h.hexdigest()  # identifies what the kernel computes, and how
        if load:
            self.load()

    def load(self):
        """Driver, compile, module, functions, scratch; KernelRunError / RuntimeError naming
        the source file when one of them fails."""
        if self._loaded:
            return self
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device()
                                       if torch.cuda.is_available() else 0)
        drv = _Driver.get(self.device, self.where)
        self._drv = drv
        self.arch = drv.arch
        if self.form == "nvrtc":
            self.options = nvrtc_options(self.build_options, drv.arch)
            cubin = nvrtc_compile(self.source, self.options, self.where,
                                  os.path.basename(self.source_path), self._cache)
            drv.make_current(self.where)
            mod = ctypes.c_void_p()
            rc = drv.cu.cuModuleLoadData(ctypes.byref(mod), cubin)
            drv.check(rc, "cuModuleLoadData (CUBIN for %s)" % drv.arch, self.where)
            self._module = mod
            self._fns = {}
            for kname, grid, block, _, smem in self.plan:
                if kname not in self._fns:
                    f = ctypes.c_void_p()
                    rc = drv.cu.cuModuleGetFunction(ctypes.byref(f), mod, kname.encode())
                    if rc:
                        raise KernelRunError("%s: the plan launches %s, which the program does not "
                                             "define as an extern \"C\" __global__ function (%s)"
                                             % (self.where, kname, drv.error(rc)))
                    self._fns[kname] = f
                if smem > 0:  # dynamic shared memory: opt the kernel in (past 48 KiB it must)
                    rc = drv.cu.cuFuncSetAttribute(self._fns[kname], _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                   smem)
                    if rc:
                        raise KernelRunError("%s: launch of %s with %d bytes of dynamic shared memory: %s"
                                             % (self.where, kname, smem, drv.error(rc)))
                limit = ctypes.c_int()
                drv.cu.cuFuncGetAttribute(ctypes.byref(limit), _CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                          self._fns[kname])
                if limit.value and block[0] * block[1] * block[2] > limit.value:
                    raise KernelRunError("%s: launch of %s with block %s: the kernel allows at most "
                                         "%d threads a block on %s" % (self.where, kname, list(block),
                                                                      limit.value, drv.arch))
            self._scratch = {k: torch.empty(max(v, 1), dtype=torch.uint8, device=self.device)
                             for k, v in self.scratch_bytes.items()}
        else:
            self.command = nvcc_command(_nvcc(self.where), drv.arch, self.build_options)
            lib = compile_kernel(self.source, self.command, "kernel.cu", self._cache)
            self._dll = ctypes.CDLL(str(lib))
            try:
                fn = self._dll.kforge_kernel
            except AttributeError:
                raise KernelRunError("%s: %s does not define extern \"C\" kforge_kernel"
                                     % (self.where, lib)) from None
            fn.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
            fn.restype = ctypes.c_int
            self._entry = fn
        self._loaded = True
        return self

    def _check(self, t, spec, what):
        _check_tensor(t, spec, what, self.name)
        if t.device.type != "cuda" or (self.device.index is not None and t.device != self.device):
            raise ValueError("kernel %s: %s %s is on %s; this is a CUDA kernel on %s"
                             % (self.name, what, spec.name, t.device,
                                self.device if self.device.index is not None else "cuda"))

    def __call__(self, *inputs, out=None):
        if len(inputs) != len(self.inputs):
            raise TypeError("kernel %s takes %d inputs (%s), got %d"
                            % (self.name, len(self.inputs), ", ".join(a.name for a in self.inputs),
                               len(inputs)))
        if out is not None and len(out) != len(self.outputs):
            raise TypeError("kernel %s writes %d outputs, out= gives %d"
                            % (self.name, len(self.outputs), len(out)))
        ins = []
        for t, spec in zip(inputs, self.inputs):
            self._check(t, spec, "input")
            t = t.detach()
            if not t.is_contiguous() or t.data_ptr() % _CUDA_ALIGN:
                t = t.clone(memory_format=torch.contiguous_format)
            ins.append(t)
        if self.device.index is None and ins:  # bound to the first call's device
            self.device = ins[0].device
            for t, spec in zip(ins, self.inputs):
                self._check(t, spec, "input")
        if out is not None:
            outs = list(out)
            for t, spec in zip(outs, self.outputs):
                self._check(t, spec, "output")
                if not t.is_contiguous() or t.data_ptr() % _CUDA_ALIGN:
                    raise ValueError("kernel %s: output %s must be contiguous and %d-byte aligned"
                                     % (self.name, spec.name, _CUDA_ALIGN))
        self.load()
        if out is None:
            outs = [torch.empty(a.shape, dtype=a.torch_dtype, device=self.device) for a in self.outputs]
        bufs = [t.data_ptr() for t in ins + outs]
        drv = self._drv
        drv.make_current(self.where)
        stream = torch.cuda.current_stream(self.device)
        if self.form == "nvrtc":
            for i, (kname, grid, block, args, smem) in enumerate(self.plan):
                ptrs = [bufs[a] if isinstance(a, int) else self._scratch[a].data_ptr() for a in args]
                vals = (ctypes.c_uint64 * max(len(ptrs), 1))(*ptrs)
                base = ctypes.addressof(vals)
                params = (ctypes.c_void_p * max(len(ptrs), 1))(*[base + 8 * j for j in range(len(ptrs))])
                rc = drv.cu.cuLaunchKernel(self._fns[kname], *grid, *block, smem, stream.cuda_stream,
                                           params, None)
                what = "launch %d of %d, %s<<<%s, %s>>>" % (i + 1, len(self.plan), kname,
                                                           list(grid), list(block))
                drv.check(rc, what + ": cuLaunchKernel", self.where, CudaLaunchError)
                if self.sync:
                    drv.check(drv.cu.cuStreamSynchronize(stream.cuda_stream),
                              what + ": after the launch", self.where, CudaLaunchError)
        else:
            legacy = torch.cuda.default_stream(self.device)
            if stream.cuda_stream != legacy.cuda_stream:
                legacy.wait_stream(stream)
            ptrs = (ctypes.c_void_p * len(bufs))(*bufs)
            rc = self._entry(ptrs)
            if rc != 0:
                raise CudaLaunchError("%s: kforge_kernel returned %d" % (self.where, rc))
            if stream.cuda_stream != legacy.cuda_stream:
                stream.wait_stream(legacy)
            if self.sync:
                drv.check(drv.cu.cuStreamSynchronize(legacy.cuda_stream), "after kforge_kernel",
                          self.where, CudaLaunchError)
        return outs[0] if len(outs) == 1 else tuple(outs)
# --- kforge cuda loader end ---


def check_cuda_manifest(man, where):
    """Raise KernelRunError unless `man` describes a CUDA kernel with the fields needed (the
    launch plan is checked with the source, which says the form)."""
    plat = man.get("platform")
    if plat != "cuda":
        hint = (" (a CPU run: kforge_torch.cpu_kernel.load_cpu_kernel loads it)" if plat == "cpu"
                else "")
        raise KernelRunError("%s: platform %r is not a CUDA kernel (`kforge synth TASK.kf "
                             "--target cuda` makes one)%s" % (where, plat, hint))
    if "args" not in man:
        raise KernelRunError("%s: no 'args' field" % where)
    if not isinstance(man.get("build_options", ""), str):
        raise KernelRunError("%s: 'build_options' is not a string" % where)
    try:
        [parse_arg(a) for a in man["args"]]
    except (TypeError, ValueError) as e:
        raise KernelRunError("%s: %s" % (where, e)) from None


def read_cuda_run(run_dir):
    """(manifest, source text, source path) of a CUDA run directory; KernelRunError
    (file: reason) otherwise."""
    man = read_manifest(run_dir)
    where = str(Path(run_dir) / "manifest.json")
    check_cuda_manifest(man, where)
    src = Path(run_dir) / man.get("source", "kernel.cu")
    if not src.is_file():
        raise KernelRunError("%s: the kernel source %s named by the manifest is missing" % (where, src))
    return man, src.read_text(), src


def load_cuda_kernel(run_dir=None, *, source=None, build_options=None, args=None, launches=None,
                     scratch_bytes=None, name=None, device=None, cache=None, sync=None, load=True):
    """A CudaKernel from a run directory (`load_cuda_kernel("RUN")`), or from explicit fields
    (`source` text, `build_options`, `args` strings, `launches`/`scratch_bytes` as in the
    manifest). KernelRunError for a bad run directory, a malformed plan, or a machine without
    CUDA (no driver, no device, no NVRTC)."""
    where = name or "kernel"
    source_path = "kernel.cu"
    if run_dir is not None:
        man, text, source_path = read_cuda_run(run_dir)
        where = str(Path(run_dir) / "manifest.json")
        source = source if source is not None else text
        build_options = build_options if build_options is not None else man.get("build_options", "")
        args = args or man["args"]
        launches = launches if launches is not None else man.get("launches")
        scratch_bytes = scratch_bytes if scratch_bytes is not None else man.get("scratch_bytes")
        name = name or man.get("task", "kernel")
    if source is None or args is None:
        raise TypeError("load_cuda_kernel needs run_dir, or source, build_options, args and "
                        "launches")
    return CudaKernel(source, build_options, args, launches, scratch_bytes, name=name or "kernel",
                      source_path=source_path, where=where, device=device, cache=cache, sync=sync,
                      load=load)

