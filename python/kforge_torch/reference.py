"""The reference process of a module task: the module itself, in float64 on the CPU (or, by
the user's choice, in float64 or float32 on the GPU: KIND below).

usage: python3 -m kforge_torch.reference SPEC.json DIR SETS [SEED [KIND]]

SPEC.json is the module task's spec (kforge_torch.module_task writes it beside the task);
SETS a comma-separated list of input-set numbers. For each set S, DIR/in.S holds the
forward's tensor arguments as the kernel gets them (raw little-endian, in the spec's input
order, each dense in its dtype); this process writes DIR/out.S, every output as float64 in
order (the file appears complete or not at all: written as out.S.tmp, then renamed), and
DIR/of.S where the module in float32 gives an infinity or NaN that float64 does not (the
verifier then draws that set again at a smaller magnitude).

With SEED (the verifier's seed), every set but set 0 gets params of its own, so that a kernel
cannot hard-code the module's weights: this process draws them (set_params) and writes them
as DIR/w.S, in the weights file's layout, before out.S; the verifier hands them to the
kernel as that set's params. Set 0, and every set without SEED, keeps the weights file.

The module is built as kforge import built it: Model(*get_init_inputs()) under the spec's
seed, in its mode, then its state_dict replaced by the weights file (the values the kernel
gets as params), then converted to float64 (torch.nn.Module.double: floating parameters and
buffers). Float inputs are converted exactly to float64. The process refuses sockets (no
network: the module is the user's code, trusted as the reference, but nothing it does may
reach out) and, under cpu-f64, runs on the CPU only.

Why float64 on the CPU: float64 rounds 2^29 times finer than float32, so the reference's own
error is far below the tolerance a float32 kernel is held to (1e-4), whatever order the
module's reductions take; every CPU has it, and the verifier's interpreter is float64 too.
It is slow where the module is large (float64 convolutions and matmuls on the CPU run at a
fraction of float32's rate: docs/design-notes.md has the measured cost per input set).

KIND is cpu-f64 (the default: all of the above), cuda-f64 or cuda-f32 (kforge synth
--module-ref). cuda-f64: all of the above on torch's CUDA device instead of the CPU (the
float64 forward, and the float32 forward that tells its overflows, both on the GPU), for a
module too slow in float64 on the CPU where the GPU has FP64 units (H100, H200): the same
tolerance. cuda-f32: the module in float32 on torch's CUDA device, for a module too slow in
float64 on the CPU, with TF32 off (cuBLAS and cuDNN would otherwise round the products'
inputs to 10 mantissa bits, an error far beyond a float32 kernel's tolerance) and cuDNN's
deterministic algorithms (the same seed gives the same reference). Its own rounding error
is then as large as a correct float32 kernel's, which the verifier allows for (twice the
tolerance: docs/design-notes.md, "A float32 GPU reference"). DIR/of.S marks any infinity or
NaN in its outputs (there is no float64 forward to tell the float32 overflows from the
module's own). Both GPU kinds are one device path with a dtype (forward_on_device), with
the same settings (TF32 off, which only a float32 forward reads; cuDNN deterministic,
benchmark off). Without a CUDA device in torch either refuses (exit 4, naming why): never a
silent fall back to the CPU.

Exit status: 0 written, 2 a usage or spec error, 3 the module failed (the message names the
step), 4 the reference KIND cannot run here (no CUDA device in torch), other: a crash.
"""
import importlib.util
import json
import os
import socket
import sys

import numpy as np
import torch

NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i64": np.int64, "bool": np.bool_}
TORCH = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
         "i64": torch.int64, "bool": torch.bool}
ITEM = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i64": 8, "bool": 1}


class RefError(Exception):
    pass


class NoDevice(Exception):
    """the reference KIND cannot run on this machine"""


KINDS = ("cpu-f64", "cuda-f32", "cuda-f64")
# the dtype each GPU kind runs the module in
DEVICE_DTYPE = {"cuda-f32": torch.float32, "cuda-f64": torch.float64}


def new_precision_api():
    """torch has the per-backend float32 precision settings (2.9 on), where reading or mixing
    the legacy allow_tf32 flags with them is an error"""
    b = torch.backends
    return hasattr(b.cuda.matmul, "fp32_precision") and hasattr(getattr(b.cudnn, "conv", None), "fp32_precision") \
        and hasattr(getattr(b.cudnn, "rnn", None), "fp32_precision")


def fp32_full_precision():
    """cuBLAS's matmuls and cuDNN's convolutions and RNNs in full float32, TF32 off (cuDNN's
    default is TF32 for convolutions): the settings torch has, new or legacy, never both."""
    b = torch.backends
    if new_precision_api():
        b.cuda.matmul.fp32_precision = "ieee"
        b.cudnn.conv.fp32_precision = "ieee"
        b.cudnn.rnn.fp32_precision = "ieee"
    else:
        b.cuda.matmul.allow_tf32 = False
        b.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")


def cuda_device(kind):
    """torch's CUDA device for the GPU reference KIND (cuda-f32 or cuda-f64), with every
    reduced-precision path for float32 turned off (TF32 in cuBLAS and cuDNN: the float32
    forward of cuda-f32, and the float32 forward by which cuda-f64 tells overflows, are then
    full float32; float64 never uses TF32) and cuDNN's algorithms deterministic, benchmark
    off (the same seed gives the same reference). NoDevice naming why where torch has no
    CUDA device."""
    if not torch.cuda.is_available():
        built = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "built without CUDA"
        vis = os.environ.get("CUDA_VISIBLE_DEVICES")
        what = "float32" if kind == "cuda-f32" else "float64"
        raise NoDevice(f"the {what} GPU reference (--module-ref {kind}) needs a CUDA device in torch, and there "
                       f"is none: torch.cuda.is_available() is False (torch {torch.__version__}, {built}"
                       f"{'; CUDA_VISIBLE_DEVICES=' + repr(vis) if vis is not None else ''}); use --module-ref "
                       f"cpu-f64 (float64 on the CPU) or run on a machine with an NVIDIA GPU")
    fp32_full_precision()
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    return torch.device("cuda")


def cuda_f32_device():
    return cuda_device("cuda-f32")


def cuda_f64_device():
    return cuda_device("cuda-f64")


def no_network():
    def refuse(*a, **k):
        raise OSError("the reference process has no network")
    socket.socket = refuse
    socket.create_connection = refuse


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def tensor_from(buf, dt, shape):
    if dt == "bf16":
        a = np.frombuffer(buf, dtype=np.int16).copy()
        return torch.from_numpy(a).view(torch.bfloat16).reshape(shape)
    a = np.frombuffer(buf, dtype=NP[dt]).copy()
    return torch.from_numpy(a).reshape(shape)


# the random draws a forward may make itself (KernelBench's LSTMs draw h0 and c0 with
# torch.randn in forward): recorded at import, replayed in the reference, given to the
# kernel as params
RANDOM_FUNCS = (torch.randn, torch.rand, torch.randint, torch.randn_like, torch.rand_like, torch.randint_like,
                torch.normal, torch.randperm)
# a live dropout (training mode, 0 < p: KernelBench level 2's 66 and 83 run so): its mask of
# kept elements (1.0 kept, 0.0 dropped, the input's shape and dtype) is a draw as above, and
# the output is input * mask / (1 - p), torch's formula. Other random ops (bernoulli, a
# channel dropout, alpha dropout) are not recorded: such a forward stays refused.
DROPOUT_FUNCS = (torch.nn.functional.dropout,)


def dropout_args(args, kwargs):
    """(input, p, training, inplace) of a call of F.dropout(input, p=0.5, training=True,
    inplace=False)"""
    names, defaults = ("input", "p", "training", "inplace"), (None, 0.5, True, False)
    vals = [args[i] if i < len(args) else kwargs.get(n, d) for i, (n, d) in enumerate(zip(names, defaults))]
    return vals[0], float(vals[1]), bool(vals[2]), bool(vals[3])


class Draws(torch.overrides.TorchFunctionMode):
    """Inside: every call of RANDOM_FUNCS is recorded (record=True: its result appended to
    self.draws) or answered with the next recorded draw (converted to the dtype the call
    would give), and so is the mask of every live dropout (DROPOUT_FUNCS). A replay that
    runs out, or whose draw has another shape, raises."""

    def __init__(self, draws=None, record=False):
        super().__init__()
        self.draws = [] if draws is None else draws
        self.record = record
        self.next = 0
        self.what = []  # recording: what each draw is, for the task's comments
        self.masks = []  # recording: the indices in draws of live dropouts' masks

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in DROPOUT_FUNCS:
            x, p, training, inplace = dropout_args(args, kwargs)
            if training and p > 0 and isinstance(x, torch.Tensor) and x.is_floating_point():
                return self.dropout(x, p, inplace)
        out = func(*args, **kwargs)
        if func not in RANDOM_FUNCS:
            return out
        if self.record:
            self.draws.append(out.detach().clone())
            self.what.append(f"a random tensor forward draws ({getattr(func, '__name__', 'a draw')}), drawn once at import")
            return out
        rec = self.replayed(out.shape)
        with torch.no_grad():
            out.copy_(rec)
        return out

    def replayed(self, shape):
        """the next recorded draw, which must have this shape"""
        if self.next >= len(self.draws):
            raise RefError(f"forward drew more random tensors than at import ({len(self.draws)})")
        rec = self.draws[self.next]
        self.next += 1
        if tuple(rec.shape) != tuple(shape):
            raise RefError(f"forward's random draw {self.next - 1} is {list(shape)}, at import it was "
                           f"{list(rec.shape)}")
        return rec

    def dropout(self, x, p, inplace):
        """a live dropout of x: its mask drawn (recording) or replayed, x * mask / (1 - p)"""
        if self.record:
            keep = torch.empty(x.shape, dtype=x.dtype, device=x.device).bernoulli_(1.0 - p) if p < 1 \
                else torch.zeros(x.shape, dtype=x.dtype, device=x.device)
            self.masks.append(len(self.draws))
            self.draws.append(keep.detach().clone())
            self.what.append(f"the mask of a live dropout (p={p:g}), drawn once at import: 1 kept, 0 dropped; "
                             "the dropout's output is input * mask / (1 - p)")
        else:
            keep = self.replayed(x.shape).to(dtype=x.dtype, device=x.device)
        scale = keep / (1.0 - p) if p < 1 else keep
        return x.mul_(scale) if inplace else x * scale


def draws_of(spec, blob):
    """The recorded random draws among the spec's params, in draw order."""
    return [tensor_from(blob[p["offset"]:p["offset"] + numel(p["shape"]) * ITEM[p["dtype"]]], p["dtype"], p["shape"])
            for p in spec["params"] if p.get("draw")]


class ModelFactory:
    """Builds the module afresh, as kforge import built it: the source executed once, then
    per build Model(*get_init_inputs()) under the spec's seed, its mode, the weights file's
    values loaded. A fresh build per forward, not a deep copy: a module whose forward is a
    closure over its own submodules (`self.mlpf = lambda x: m.c_proj(...)`, KernelBench 44)
    would still call the original's."""

    def __init__(self, spec, spec_dir):
        self.spec = spec
        self.src = os.path.join(spec_dir, spec["source"])
        modspec = importlib.util.spec_from_file_location("kforge_reference_module", self.src)
        self.mod = importlib.util.module_from_spec(modspec)
        try:
            modspec.loader.exec_module(self.mod)
        except Exception as e:
            raise RefError(f"{self.src}: loading the module raised {type(e).__name__}: {e}") from e
        with open(os.path.join(spec_dir, spec["weights"]), "rb") as f:
            self.blob = f.read()

    def build(self, seed):
        """Model(*get_init_inputs()) after torch.manual_seed(seed), in the spec's mode: the
        module with its own initial weights under that seed."""
        spec = self.spec
        try:
            torch.manual_seed(seed)
            init = self.mod.get_init_inputs()
            model = getattr(self.mod, spec.get("class", "Model"))(*init)
        except Exception as e:
            raise RefError(f"{self.src}: building the module raised {type(e).__name__}: {e}") from e
        if spec.get("mode") == "eval":
            model.eval()
        return model

    def make(self, float64=False, blob=None):
        """The module as built at import, with the params of blob (default: the weights file)."""
        model = self.build(self.spec.get("seed", 0))
        try:
            load_state(model, self.spec, self.blob if blob is None else blob)
        except Exception as e:
            raise RefError(f"loading the weights into the module raised {type(e).__name__}: {e}") from e
        return to_float64(model) if float64 else model


def set_seed(seed, s):
    """The seed of set s's params under the verifier's seed (a 63-bit mix of both)."""
    x = (seed * 0x9E3779B97F4A7C15 + (s + 1) * 0xBF58476D1CE4E5B9) % (1 << 64)
    x ^= x >> 31
    return (x * 0x94D049BB133111EB % (1 << 64)) >> 1


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def param_of(model, state, p):
    """The tensor a built model (state: its state_dict) holds under param p's key (None: it
    holds none)."""
    owner, _, name = p["key"].rpartition(".")
    try:
        t = getattr(model.get_submodule(owner) if owner else model, name, None) if p.get("attr") else state.get(p["key"])
    except Exception:
        return None
    return t if isinstance(t, torch.Tensor) else None


def set_params(factory, seed, s):
    """Set s's params, in the weights file's layout, drawn under set_seed(seed, s) so that
    they are scaled like the module's own: each param is what the module's own init gives
    under that seed (Model(*get_init_inputs()) built afresh); a param the init makes the
    same whatever the seed and that holds one value throughout (a norm's weight of ones and
    bias of zeros, a running variance of ones, a scalar parameter) is drawn around it, each
    element c * U(0.5, 1.5) (sign kept: a variance stays positive) or U(-0.5, 0.5) where c
    is 0; a random tensor forward draws (`draw`) is the recorded one with its elements
    shuffled (the same distribution); anything else the init makes the same whatever the
    seed (a causal mask, a table of positions, an integer counter) is kept: it is part of the
    module's definition."""
    spec, blob = factory.spec, factory.blob
    sd = set_seed(seed, s)
    fresh = factory.build(sd)
    state = fresh.state_dict()
    gen = torch.Generator().manual_seed(sd)
    out = bytearray(blob)
    for p in spec["params"]:
        n = numel(p["shape"]) * ITEM[p["dtype"]]
        off = p["offset"]
        old = tensor_from(blob[off:off + n], p["dtype"], p["shape"])
        new = old
        if p.get("draw"):
            new = old.flatten()[torch.randperm(old.numel(), generator=gen)].reshape(old.shape)
        else:
            t = param_of(fresh, state, p)
            if t is not None and tuple(t.shape) == tuple(old.shape) and t.dtype == old.dtype and \
                    not torch.equal(t.detach(), old):
                new = t
            elif old.is_floating_point() and old.numel() and torch.isfinite(old).all() and \
                    bool((old == old.flatten()[0]).all()):
                c = float(old.flatten()[0])
                u = torch.rand(old.shape, generator=gen, dtype=torch.float64)
                new = (c * (0.5 + u) if c != 0 else u - 0.5).to(old.dtype)
        out[off:off + n] = tensor_bytes(new)
    return bytes(out)


def write_file(wdir, name, data):
    """DIR/name, complete or not at all."""
    tmp = os.path.join(wdir, f"{name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(wdir, name))


def load_model(spec, spec_dir):
    return ModelFactory(spec, spec_dir).make()


def load_state(model, spec, blob):
    """The spec's params from the weights blob into model: its state_dict (strict), then the
    tensors it holds as plain attributes ("attr": true, set on their submodule)."""
    state = {}
    for p in spec["params"]:
        if p.get("draw"):
            continue
        n = numel(p["shape"]) * ITEM[p["dtype"]]
        chunk = blob[p["offset"]:p["offset"] + n]
        if len(chunk) != n:
            raise RefError(f"the weights file is too short for '{p['key']}'")
        t = tensor_from(chunk, p["dtype"], p["shape"])
        if p.get("attr"):
            owner, _, name = p["key"].rpartition(".")
            setattr(model.get_submodule(owner) if owner else model, name, t)
        else:
            state[p["key"]] = t
    model.load_state_dict(state, strict=True)


def to_float64(model):
    """model in float64: its floating parameters and buffers (Module.double) and the floating
    tensors it holds as plain attributes."""
    return to_kind(model, torch.float64, None)


def to_kind(model, dtype, device):
    """model's floating parameters and buffers and the floating tensors it holds as plain
    attributes in dtype, every tensor of it on device (None: where it is)."""
    model = model.to(dtype)
    if device is not None:
        model = model.to(device)
    for m in model.modules():
        for name, t in list(vars(m).items()):
            if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter):
                if t.is_floating_point():
                    t = t.to(dtype)
                setattr(m, name, t if device is None else t.to(device))
    return model


def forward_on_device(factory, blob, args32, draws, dev, dtype):
    """The module's outputs (on the CPU, in dtype) with the params of blob, run in dtype
    (float32 or float64) on dev: floating arguments converted exactly to dtype, tensors
    forward makes itself on dev and, floating, in dtype (the default dtype, as the CPU
    float64 forward has it). A fresh copy of the module per call."""
    model = to_kind(factory.make(blob=blob), dtype, dev)
    args = [a.to(dev, dtype if a.dtype.is_floating_point else a.dtype) if isinstance(a, torch.Tensor) else a
            for a in args32]
    torch.set_default_device(dev)
    torch.set_default_dtype(dtype)
    try:
        outs = forward(model, args, draws)
        torch.cuda.synchronize(dev)
    finally:
        torch.set_default_dtype(torch.float32)
        torch.set_default_device("cpu")
    return [o.detach().cpu() if isinstance(o, torch.Tensor) else o for o in outs]


def forward(model, args, draws=()):
    with torch.no_grad(), Draws(list(draws)):
        out = model(*args)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (3, 4, 5):
        print("usage: python3 -m kforge_torch.reference SPEC.json DIR SETS [SEED [KIND]]", file=sys.stderr)
        return 2
    spec_path, wdir, sets = argv[:3]
    try:
        seed = int(argv[3]) if len(argv) >= 4 else None
    except ValueError:
        print(f"SEED must be an integer, not {argv[3]!r}", file=sys.stderr)
        return 2
    kind = argv[4] if len(argv) == 5 else "cpu-f64"
    if kind not in KINDS:
        print(f"KIND must be one of {', '.join(KINDS)}, not {kind!r}", file=sys.stderr)
        return 2
    no_network()
    dev = None
    if kind in DEVICE_DTYPE:
        try:
            dev = cuda_f32_device() if kind == "cuda-f32" else cuda_f64_device()
        except NoDevice as e:
            print(f"kforge reference: {e}", file=sys.stderr)
            return 4
    with open(spec_path) as f:
        spec = json.load(f)
    if spec.get("format") != "kforge-module":
        print(f"{spec_path}: not a kforge module spec", file=sys.stderr)
        return 2
    try:
        spec_dir = os.path.dirname(os.path.abspath(spec_path))
        factory = ModelFactory(spec, spec_dir)
        sizes = [numel(x["shape"]) * ITEM[x["dtype"]] for x in spec["inputs"]]
        for s in [int(t) for t in sets.split(",") if t]:
            with open(os.path.join(wdir, f"in.{s}"), "rb") as f:
                blob = f.read()
            if len(blob) != sum(sizes):
                raise RefError(f"input set {s}: {len(blob)} bytes, expected {sum(sizes)}")
            xs, off = [], 0
            for x, n in zip(spec["inputs"], sizes):
                xs.append(tensor_from(blob[off:off + n], x["dtype"], x["shape"]))
                off += n
            args32 = [xs[a["input"]] if "input" in a else a["value"] for a in spec["args"]]
            args64 = [a.double() if isinstance(a, torch.Tensor) and a.dtype.is_floating_point else a
                      for a in args32]
            wblob = factory.blob
            if seed is not None and s != 0:
                wblob = set_params(factory, seed, s)
                write_file(wdir, f"w.{s}", wblob)
            draws = draws_of(spec, wblob)
            try:
                if dev is not None:
                    outs = outs32 = forward_on_device(factory, wblob, args32, draws, dev, DEVICE_DTYPE[kind])
                    if kind == "cuda-f64":  # the float32 forward beside it, as on the CPU
                        outs32 = forward_on_device(factory, wblob, args32, draws, dev, torch.float32)
                else:
                    torch.set_default_dtype(torch.float64)  # tensors forward makes itself
                    try:
                        # a fresh copy per set: a module that keeps state between calls is
                        # taken at its first call on every set, whatever the sets' order
                        outs = forward(factory.make(float64=True, blob=wblob), args64, draws)
                    finally:
                        torch.set_default_dtype(torch.float32)
                    outs32 = forward(factory.make(blob=wblob), [a.clone() if isinstance(a, torch.Tensor) else a
                                                      for a in args32], draws)
            except Exception as e:
                raise RefError(f"forward on input set {s} raised {type(e).__name__}: {e}") from e
            want = spec["outputs"]
            if len(outs) != len(want):
                raise RefError(f"forward gave {len(outs)} outputs, the task has {len(want)}")
            for j, (o, w) in enumerate(zip(outs, want)):
                if not isinstance(o, torch.Tensor) or list(o.shape) != list(w["shape"]):
                    raise RefError(f"output {j} is {getattr(o, 'shape', type(o))}, the task says {w['shape']}")
            write_file(wdir, f"out.{s}", b"".join(o.detach().to(torch.float64).contiguous().numpy().tobytes()
                                                   for o in outs))
            # float64 (cpu-f64, cuda-f64): the float32 forward overflows where float64 does not;
            # cuda-f32 (outs32 is outs): any infinity or NaN, its own or the module's
            over = any((~torch.isfinite(b.double()) & (torch.isfinite(a.double()) if outs32 is not outs else True))
                       .any().item() for a, b in zip(outs, outs32) if a.dtype.is_floating_point)
            if over:
                open(os.path.join(wdir, f"of.{s}"), "w").close()
    except RefError as e:
        print(f"kforge reference: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
