"""`kforge bench SUITE`: every task of a folder, synthesized by kforge and timed against
PyTorch eager and torch.compile in one process.

usage: kforge bench SUITE [--target cpu|cuda[:N]] [--iters N] [--time-budget S] [--reps R]
                          [--json FILE] [--csv FILE] [--no-compile] [--out DIR] [--only SUBSTR,...]
                          [--shard I/N] [--jobs N [--task-timeout S]]
       kforge bench --merge-from DIR [--json FILE] [--csv FILE]

A task is a KernelBench-format module (NN_name.py: class Model, get_inputs(),
get_init_inputs()) or a .kf file. For each, in file-name order:

1. a module is imported (`kforge import`: torch.export, lowered to kforge's ops); one that
   uses an op kforge cannot lower becomes a module task (docs/task-format.md, "Module
   tasks"): its reference is the module itself, and only a model writes its kernel
   (`--agent llm` with `--llm-url`/`--model`, passed to kforge synth; without them its row
   is unsupported, "module task: use --agent llm", the ops named);
2. `kforge synth` searches for the kernel and verifies every candidate against the float64
   interpreter on freshly drawn inputs (the harness of kforge synth, at the task's shape);
3. here, in this process: the kernel is loaded (kforge_torch.cpu_kernel, or
   kforge_torch.cuda_kernel for --target cuda), run on the inputs get_inputs() gives
   (parameters and buffers: the module's own values; for cuda the module and its inputs
   moved to the GPU, the kernel's outputs poisoned with NaN first) and compared with the
   module's output; then the module (eager), torch.compile(module) and the kernel are timed
   in interleaved rounds (median of each), so that a ratio holds even if the machine's speed
   drifts. On the CPU each call is timed with perf_counter, caches warm; on the GPU with
   CUDA events, the 60 MB L2 flushed by a 512 MiB write before every call (which also keeps
   the GPU busy while Python enqueues the call, so the events time the GPU's work).

Without a GPU that PyTorch sees, --target cuda stops at once (exit 2): nothing runs on the
CPU in its place. --target opencl is refused: its buffers cannot be torch tensors.

Metrics, as KernelBench defines them over all the suite's tasks: fast_p = the fraction of
tasks whose kernel is correct and more than p times faster than the baseline, for p in 0, 1,
1.5, 2, against eager and against torch.compile; the geometric-mean speedup over the correct
tasks; the correctness rate over the supported tasks; % of the roofline floor (the floor from
kforge's measured ceilings, as kforge synth prints it).

Exit status: 0 when every supported task is correct, 1 otherwise, 2 on a usage error.
"""
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch._dynamo

from . import importer, kf_task
from .suite import P_VALUES, bench_parser, finish, parse_shard, select_shard, suite_files, write_json  # noqa: F401
from .cpu_kernel import load_cpu_kernel
from .cuda_kernel import load_cuda_kernel

# an output matches PyTorch's when |got - want| <= ATOL + RTOL * |want| everywhere (f32; the
# kernel was already checked against the float64 interpreter by kforge synth)
ATOL, RTOL = 1e-4, 1e-3


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, timeout=None):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p, time.time() - t0


def max_err(got, want, chunk=1 << 26):
    """(max abs error, ok) of got against want, compared in float64 a chunk of elements at a
    time (at KernelBench's official shapes an output is 6 GiB in float32: whole float64
    copies of both would not fit beside the model on an 80 GB GPU)."""
    if got.shape != want.shape:
        return math.inf, False
    if not want.dtype.is_floating_point:
        bad = (got != want).sum().item()
        return float(bad), bad == 0
    g_all, w_all = got.reshape(-1), want.reshape(-1)
    worst, ok, g_nan, w_nan = 0.0, True, False, False
    for at in range(0, g_all.numel(), chunk):
        g, w = g_all[at:at + chunk].double(), w_all[at:at + chunk].double()
        g_nan |= bool(torch.isnan(g).any())
        w_nan |= bool(torch.isnan(w).any())
        d = (g - w).abs()
        ok = ok and bool((d <= ATOL + RTOL * w.abs()).all())
        if d.numel():
            worst = max(worst, d.max().item())
        del g, w, d
    if g_nan != w_nan:
        return math.inf, False
    return worst, ok


def time_interleaved(fns, reps, warmup=2):
    """Median seconds of each callable, timed in interleaved rounds."""
    for f in fns:
        for _ in range(warmup):
            f()
    samples = [[] for _ in fns]
    for _ in range(reps):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            samples[i].append(time.perf_counter() - t0)
    return [statistics.median(s) for s in samples]


def l2_flush_buffer(device="cuda"):
    """512 MiB on the GPU: writing it flushes the H200's 60 MB L2, and its ~0.1-0.2 ms of GPU
    time covers the host's time to enqueue the timed call, so the events time the GPU's work,
    not Python's."""
    return torch.empty(1 << 27, dtype=torch.float32, device=device)


def cuda_event_ms(fn, flush):
    """Milliseconds of GPU time of one call of fn, between two CUDA events on the current
    stream, the L2 flushed (a write of `flush`) just before."""
    flush.zero_()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e)


def cuda_interleaved(fns, reps, flush, warm=3):
    """{name: median ms}, {name: (min, max) ms} of the callables in `fns` (a dict), timed
    with CUDA events in interleaved rounds, the L2 flushed before every call."""
    for f in fns.values():
        for _ in range(warm):
            f()
    torch.cuda.synchronize()
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            times[k].append(cuda_event_ms(f, flush))
    return ({k: statistics.median(v) for k, v in times.items()},
            {k: (min(v), max(v)) for k, v in times.items()})


def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def float64_outputs(model, inputs):
    """The module's outputs in float64 (a copy of it and of its floating inputs), or None
    where it is not a module or does not run in float64."""
    if not isinstance(model, torch.nn.Module):
        return None
    try:
        import copy
        m64 = copy.deepcopy(model).double()
        x64 = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
        with torch.no_grad():
            return as_tuple(m64(*x64))
    except Exception:  # the module's own code: a dtype it fixes, an op without float64
        return None


def peers_for_module(path, bundle, seed, device="cpu"):
    """(model callable, kernel inputs, sample inputs) for a KernelBench module, built as
    `kforge import` built it: same seed, parameters from the module itself; then the model
    and the inputs moved to `device`."""
    mod = importer.load_module(path)
    torch.manual_seed(seed)
    model = mod.Model(*mod.get_init_inputs())
    with open(os.path.join(bundle, "graph.json")) as f:
        graph = json.load(f)
    model.train(graph.get("mode", "eval") == "train")  # as it was imported (bundles before "mode": eval)
    torch.manual_seed(seed)
    inputs = list(mod.get_inputs())
    if device != "cpu":
        model = model.to(device)
        inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]
    state = dict(model.named_parameters())
    state.update(dict(model.named_buffers()))
    kin, saved, masks = [], None, []
    for e in graph["inputs"]:
        if e["kind"] == "input":
            kin.append(inputs[e["index"]])
        elif e["kind"] == "draw":
            # a live dropout's mask: Bernoulli(1 - p) from the seed, given to the kernel and
            # replayed in eager's dropout (reference.Draws), so both drop the same elements
            gen = torch.Generator().manual_seed(seed + 1 + len(masks))
            m = torch.rand(e["shape"], generator=gen) >= e["p"]
            masks.append(m.to(device))
            kin.append(masks[-1])
        elif e["target"] in state:
            kin.append(state[e["target"]].detach())
        else:
            # a constant torch.export lifted out of the forward (lifted_tensor_0): the module
            # holds no attribute of it, the bundle's parameter file does
            if saved is None:
                from safetensors.torch import load_file
                pf = os.path.join(bundle, "params.safetensors")
                saved = load_file(pf) if os.path.exists(pf) else {}
            if e["target"] not in saved:
                raise RuntimeError(f"graph input {e['name']} reads {e['target']}, which neither the module "
                                   "nor the bundle holds")
            kin.append(saved[e["target"]].to(device))
    if masks:  # every draw a dropout's mask: compile may run the module with its own
        model = replaying(model, masks, compile_own=True)
    return model, [t.contiguous() for t in kin], inputs


def replaying(module, draws, compile_own=False):
    """module's forward with forward's random draws (a live dropout's masks, torch.randn's
    results) replayed by reference.Draws, in call order. torch.compile cannot trace the
    replay: with compile_own (every draw a dropout's mask) the module itself, drawing its
    own masks, is compile's timed peer (kforge_compile_own), else compile is not run."""
    from . import reference

    def model(*args):
        with reference.Draws(list(draws)):
            return module(*args)
    model.kforge_replays = True
    model.kforge_compile_own = module if compile_own else None
    return model


def peers_for_module_task(path, bundle, seed, device="cpu"):
    """(model, kernel inputs, sample inputs) for a module task (kforge_torch.module_task):
    the module built under the seed with the task's weights loaded (the values the
    verifier gave the kernel), the kernel's inputs the forward's tensors then the params, in
    the spec's order."""
    from . import reference
    spec = next(json.load(open(os.path.join(bundle, f))) for f in sorted(os.listdir(bundle))
                if f.endswith(".json") and f != "graph.json")
    mod = importer.load_module(path)
    torch.manual_seed(seed)
    model = mod.Model(*mod.get_init_inputs())
    model.train(spec.get("mode") != "eval")
    with open(os.path.join(bundle, spec["weights"]), "rb") as f:
        blob = f.read()
    reference.load_state(model, spec, blob)
    torch.manual_seed(seed)
    inputs = list(mod.get_inputs())
    if device != "cpu":
        model = model.to(device)
        inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]
    sd = model.state_dict()

    draws = [t.to(device) for t in reference.draws_of(spec, blob)]
    it = iter(draws)

    def value(p):
        if p.get("draw"):
            return next(it)
        if not p.get("attr"):
            return sd[p["key"]].detach()
        owner, _, name = p["key"].rpartition(".")
        return getattr(model.get_submodule(owner) if owner else model, name).to(device)
    vals = [(p, value(p)) for p in spec["params"]]
    kin = [inputs[x["index"]] for x in spec["inputs"]]
    for dt in dict.fromkeys(p["dtype"] for p, _ in vals if p.get("packed")):  # one argument per dtype
        kin.append(torch.cat([v.reshape(-1) for p, v in vals if p.get("packed") and p["dtype"] == dt]))
    kin += [v for p, v in vals if not p.get("packed")]
    if draws:  # forward draws random tensors: eager replays the ones the kernel gets
        model = replaying(model, draws)
    return model, [t.contiguous() for t in kin], inputs


def is_module_task(task_kf):
    with open(task_kf) as f:
        return any(line.startswith("module ") for line in f)


def peers_for_kf(path, seed, device="cpu", kforge=None):
    with open(path) as f:
        task = kf_task.parse_task(f.read(), path)
    fn = kf_task.torch_fn(task, kforge)
    gen = torch.Generator().manual_seed(seed)
    inputs = [t.to(device) for t in kf_task.make_inputs(task, "cpu", gen)]  # same values on any device
    return fn, inputs, inputs


def bench_task(path, a, i, n):
    name = os.path.splitext(os.path.basename(path))[0]
    row = {"task": name, "file": path, "status": None}
    work = os.path.join(a.out, name)
    os.makedirs(work, exist_ok=True)
    t_task = time.time()
    # 1. import
    if path.endswith(".py"):
        # `kforge import` in two halves: the export here, in this process, which has torch
        # loaded and exported before (a `kforge import` process pays ~4 s of torch import and
        # ~3 s of first export per task on a 2-core VM), then the C lowering of the bundle
        bundle = os.path.join(work, "bundle")
        try:
            try:
                importer.write_bundle(path, bundle, a.seed, eval_mode=a.eval)
            except importer.ExportFailure as e:  # the module runs but does not export: a module task
                from . import module_task
                module_task.write_module_task(path, bundle, a.seed, eval_mode=a.eval, why=str(e))
        except importer.ImportFailure as e:  # what `kforge import` reports with exit status 2
            p = subprocess.CompletedProcess([], 2, "", f"kforge import: {e}")
        except Exception as e:  # an importer failure of its own (`kforge import` would exit 1)
            p = subprocess.CompletedProcess([], 1, "", f"kforge import: {path}: {type(e).__name__}: {e}")
        else:
            p, _ = run([a.kforge, "import", "--lower", bundle]) if os.path.exists(os.path.join(bundle, "graph.json")) \
                else (subprocess.CompletedProcess([], 0, "", ""), 0)
        if p.returncode != 0:
            msg = (p.stderr.strip() or p.stdout.strip()).replace("\n", " ")
            row.update(status="unsupported" if p.returncode == 2 else "import-error", detail=msg[:600])
            log(f"[{i}/{n}] {name}: {row['status']}: {msg[:300]}")
            return row
        task_kf = os.path.join(bundle, "task.kf")
        if is_module_task(task_kf) and a.agent != "llm":
            # only a model writes a module task's kernel: without one the task is unsupported,
            # as before module tasks (not a failure of the builtin), the ops named
            msg = (p.stderr.strip() or "torch.export failed").replace("\n", " ")
            row.update(status="unsupported", module_task=True, detail=f"module task: use --agent llm ({msg})"[:600])
            log(f"[{i}/{n}] {name}: unsupported: module task: use --agent llm ({msg[:250]})")
            return row
    else:
        bundle, task_kf = None, path
    # 2. synthesis (verified against the float64 interpreter)
    rundir = os.path.join(work, "run")
    cmd = [a.kforge, "synth", task_kf, "--target", a.target, "--iters", str(a.iters), "--out", rundir,
           "-q", "--seed", str(a.seed)]
    if a.time_budget:
        cmd += ["--time-budget", str(a.time_budget)]
    if a.memcheck:
        cmd += ["--memcheck", a.memcheck]
    if a.no_fuse:
        cmd += ["--no-fuse"]
    if a.agent:
        cmd += ["--agent", a.agent]
    if a.llm_url:
        cmd += ["--llm-url", a.llm_url]
    if a.model:
        cmd += ["--model", a.model]
    if not a.prealloc and a.device.type == "cpu":  # search on what the module's caller sees:
        cmd += ["--fresh-outputs"]                    # outputs on fresh pages
    p, synth_s = run(cmd)
    row["synth_s"] = round(synth_s, 1)
    rj = os.path.join(rundir, "run.json")
    if p.returncode != 0 or not os.path.exists(rj):
        msg = (p.stderr.strip().splitlines() or ["no output"])[-1]
        row.update(status="no-kernel", detail=msg[:600])
        log(f"[{i}/{n}] {name}: kforge synth found no verified kernel ({synth_s:.0f} s): {msg[:300]}")
        return row
    with open(rj) as f:
        record = json.load(f)
    best = next((it for it in record["iterations"] if it.get("iter") == record.get("best_iter")), None)
    roof = record.get("roofline", {})
    row["floor_ms"] = roof.get("floor_ms")
    row["bound"] = roof.get("bound")
    row["kforge_synth_ms"] = best.get("time_ms") if best else None
    row["schedule"] = best.get("candidate") if best else None
    # 3. against PyTorch, in this process
    cuda = a.device.type == "cuda"
    if bundle and is_module_task(task_kf):
        row["module_task"] = True
        model, kin, inputs = peers_for_module_task(path, bundle, a.seed, a.device)
    elif bundle:
        model, kin, inputs = peers_for_module(path, bundle, a.seed, a.device)
    else:
        model, kin, inputs = peers_for_kf(path, a.seed, a.device, a.kforge)
    eager = lambda: model(*inputs)  # noqa: E731
    kern = load_cuda_kernel(rundir, device=a.device, sync=True) if cuda else load_cpu_kernel(rundir)
    with torch.no_grad():
        want = as_tuple(eager())
        if cuda:
            # outputs poisoned first (NaN, or a sentinel for integers): an element the kernel
            # does not write fails; each launch waited for, so a fault names its launch
            got = [torch.full(o.shape, float("nan") if o.torch_dtype.is_floating_point else -7,
                              dtype=o.torch_dtype, device=a.device) for o in kern.outputs]
            kern(*kin, out=got)
            torch.cuda.synchronize(a.device)
            kern.sync = False
        else:
            got = as_tuple(kern(*kin))
        errs = [max_err(g, w) for g, w in zip(got, want)]
        correct = len(got) == len(want) and all(ok for _, ok in errs)
        if not correct and len(got) == len(want) and not getattr(model, "kforge_replays", False):
            # eager is float32 as well, and on an ill-conditioned output (a group norm of one
            # element per group: rstd = 1/sqrt(eps) amplifies x's rounding) it is the one far
            # from the exact result: the module run in float64 (the ground truth kforge synth
            # verified against) decides, with the same tolerance; eager's distance is recorded
            ref = float64_outputs(model, inputs)
            if ref is not None and len(ref) == len(got):
                errs64 = [max_err(g, r) for g, r in zip(got, ref)]
                row["checked_against"] = "float64"
                row["max_abs_err_vs_eager"] = max(e for e, _ in errs)
                row["eager_max_abs_err_f64"] = max(max_err(w, r)[0] for w, r in zip(want, ref))
                errs, correct = errs64, all(ok for _, ok in errs64)
            del ref
        del got  # the timing allocates outputs of its own; at official shapes memory counts
        row["max_abs_err"] = max(e for e, _ in errs) if errs else None
        row["correct"] = correct
        # the kernel allocates its outputs on every call, as the module does (and as the
        # exported custom op does): fresh pages cost the same on both sides. --prealloc
        # times the kernel alone, writing into outputs allocated once (kforge synth's way;
        # the module still allocates, so that favours kforge)
        if a.prealloc:
            outs = [torch.empty_like(w) for w in want]
            fns = {"eager": eager, "kforge": lambda: kern(*kin, out=outs)}
        else:
            fns = {"eager": eager, "kforge": lambda: kern(*kin)}
        if not a.no_compile and getattr(model, "kforge_compile_own", None) is not None:
            # live dropouts only: torch.compile of the module as it is, its dropouts drawing
            # their own masks (Philox in its kernels), is timed as the peer; its output
            # cannot be compared with eager's replayed masks (the row says so)
            torch._dynamo.reset()
            compiled = torch.compile(model.kforge_compile_own)
            ct = as_tuple(compiled(*inputs))  # compiles
            row["compile_matches_eager"] = None
            row["compile_unchecked"] = ("live dropout: compile runs the module's own dropout (masks from its own "
                                        "RNG), timed but not compared")
            del ct
            fns = {"eager": eager, "compile": lambda: compiled(*inputs), "kforge": fns["kforge"]}
        elif not a.no_compile and getattr(model, "kforge_replays", False):
            row["compile_skipped"] = "forward draws random tensors: eager replays the task's draws, compile does not"
        elif not a.no_compile:
            torch._dynamo.reset()  # a fresh compile cache per task (Dynamo's recompile limit)
            compiled = torch.compile(model)
            ct = as_tuple(compiled(*inputs))  # compiles; also checked against eager
            row["compile_matches_eager"] = all(max_err(c, w)[1] for c, w in zip(ct, want))
            del ct
            fns = {"eager": eager, "compile": lambda: compiled(*inputs), "kforge": fns["kforge"]}
        del want  # the comparisons are done; the timed calls allocate their own outputs
        if cuda:
            # GPU time: CUDA events around each call, the L2 flushed before it, interleaved
            reps = max(5, a.reps)
            med, _ = cuda_interleaved(fns, reps, a.flush)
            times = {k: v / 1e3 for k, v in med.items()}
        else:
            t_eager = time_interleaved([eager], 1, warmup=1)[0]
            reps = max(5, min(a.reps, int(1.5 / max(t_eager, 1e-4))))
            times = dict(zip(fns, time_interleaved(list(fns.values()), reps)))
    for lab, t in times.items():
        row[f"{lab}_ms"] = t * 1e3
    row["reps"] = reps
    row["status"] = "ok" if correct else "wrong"
    k = row["kforge_ms"]
    row["speedup_eager"] = row["eager_ms"] / k
    if "compile_ms" in row:
        row["speedup_compile"] = row["compile_ms"] / k
    if row["floor_ms"]:
        # CPU: % of floor from kforge synth's own time (caches flushed between reps, as the
        # floor assumes); the ratios above are this process's warm-cache times, where a
        # task that fits the last-level cache can beat a DRAM floor (both sides alike).
        # CUDA: this process's times are L2-flushed already, so both come from them.
        if cuda:
            row["kforge_pct_floor"] = 100 * row["floor_ms"] / k
        elif row["kforge_synth_ms"]:
            row["kforge_pct_floor"] = 100 * row["floor_ms"] / row["kforge_synth_ms"]
        row["eager_pct_floor"] = 100 * row["floor_ms"] / row["eager_ms"]
    if cuda:
        del kern
        torch.cuda.empty_cache()
    sc = f", compile {row['compile_ms']:.2f} ms ({row['speedup_compile']:.2f}x)" if "compile_ms" in row else ""
    log(f"[{i}/{n}] {name}: {'ok' if correct else 'WRONG (max err %.3g)' % row['max_abs_err']}; kforge "
        f"{k:.2f} ms ({row.get('kforge_pct_floor', 0):.0f}% of floor), eager {row['eager_ms']:.2f} ms "
        f"({row['speedup_eager']:.2f}x){sc}; synth {synth_s:.0f} s, task {time.time() - t_task:.0f} s")
    return row


TIMING = {"cpu": "perf_counter around each call, warm caches, interleaved rounds, median",
          "cuda": "CUDA events around each call on the current stream, the L2 flushed (512 MiB "
                  "write) before each, interleaved rounds, median"}


def bench_device(target):
    """The torch device the comparison runs on for `--target`, or None (the reason logged):
    cpu, or cuda[:N] when PyTorch sees that GPU. Never a silent fall back to the CPU."""
    plat, _, index = target.partition(":")
    if plat == "cpu" and not index:
        return torch.device("cpu")
    if plat == "cuda":
        if index and not index.isdigit():
            log(f"kforge bench: --target {target}: N in cuda:N must be a device number")
            return None
        if not torch.cuda.is_available():
            why = ("this PyTorch is built without CUDA" if torch.version.cuda is None else
                   "no GPU or no driver; CUDA_VISIBLE_DEVICES=%r" % os.environ.get("CUDA_VISIBLE_DEVICES"))
            log(f"kforge bench: --target {target}: PyTorch sees no CUDA device ({why}; torch "
                f"{torch.__version__}); nothing was run (--target cpu runs on the CPU)")
            return None
        n = int(index or 0)
        if n >= torch.cuda.device_count():
            log(f"kforge bench: --target {target}: PyTorch sees {torch.cuda.device_count()} CUDA "
                f"device(s), no device {n}")
            return None
        return torch.device("cuda", n)
    if plat in ("opencl", "metal"):
        log(f"kforge bench: --target {target}: the PyTorch comparison runs kforge's cpu and cuda "
            f"kernels only ({plat} buffers are not torch tensors); use --target cpu or cuda, or "
            f"kforge synth --target {target} for kforge's own timing")
        return None
    log(f"kforge bench: --target {target}: unknown target (cpu or cuda[:N])")
    return None


def worker(a, meta):
    """`--worker` (kforge bench --jobs N starts one per slot): a JSON line of the slot's
    settings, then for each line "I<TAB>N<TAB>FILE" read from stdin, the task's row as one JSON
    line on stdout (the log on stderr, as usual). The answers go to stdout's own descriptor;
    anything else that writes to stdout, Python or C (a kernel's printf), goes to stderr."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    print(json.dumps({"hello": dict(meta, affinity=sorted(os.sched_getaffinity(0)))}), file=proto, flush=True)
    for line in sys.stdin:
        i, n, f = line.rstrip("\n").split("\t", 2)
        print(json.dumps({"row": run_one(f, a, int(i), int(n))}), file=proto, flush=True)
    return 0


def run_one(f, a, i, n):
    try:
        return bench_task(f, a, i, n)
    except Exception as e:  # one broken task must not lose the others
        name = os.path.splitext(os.path.basename(f))[0]
        log(f"[{i}/{n}] {name}: error: {type(e).__name__}: {e}")
        return {"task": name, "file": f, "status": "error", "detail": f"{type(e).__name__}: {e}"}


def main(argv=None):
    a = bench_parser(__doc__.split("\n\n")[0]).parse_args(argv)
    if a.jobs != 1 or a.merge_from:
        log("kforge bench: --jobs and --merge-from are run by kforge_torch.slots and kforge_torch.suite "
            "(kforge bench routes them there)")
        return 2
    if not a.suite:
        log("kforge bench: give a SUITE (a folder of tasks, or one file), or --merge-from DIR")
        return 2
    shard = parse_shard(a.shard) if a.shard else None
    if a.shard and not shard:
        log(f"kforge bench: --shard {a.shard}: I/N with 1 <= I <= N")
        return 2
    a.device = bench_device(a.target)
    if a.device is None:
        return 2
    if a.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # f32 on both sides, as kforge verifies
        torch.backends.cudnn.allow_tf32 = False
        a.flush = l2_flush_buffer(a.device)
    torch.set_num_threads(a.threads or len(os.sched_getaffinity(0)) or 1)  # a Slurm cgroup, a slot: its cores
    meta = {"suite": a.suite, "target": a.target, "iters": a.iters, "prealloc": a.prealloc,
            "compiled": not a.no_compile, "seed": a.seed, "torch": torch.__version__,
            "device": torch.cuda.get_device_name(a.device) if a.device.type == "cuda" else "cpu",
            "timing": TIMING[a.device.type], "threads": torch.get_num_threads()}
    os.makedirs(a.out, exist_ok=True)
    if a.worker:
        return worker(a, meta)
    all_files = suite_files(a.suite, a.only)
    if not all_files:
        log(f"kforge bench: {a.suite}: no tasks (.py in KernelBench format, or .kf)")
        return 2
    files = select_shard(all_files, shard)
    meta.update(suite_tasks=len(all_files), shard=a.shard or "1/1")
    where = (f"on {torch.cuda.get_device_name(a.device)} ({a.device})" if a.device.type == "cuda"
             else f"with {torch.get_num_threads()} threads")
    part = f" (shard {a.shard}: {len(files)} of {len(all_files)})" if shard else ""
    log(f"kforge bench: {len(files)} tasks from {a.suite}{part}, target {a.target}, {a.iters} candidates "
        f"each, torch {torch.__version__} {where}")
    t0 = time.time()
    rows = []
    write_json(a.json, meta, None, rows, True)
    for i, f in enumerate(files, 1):
        rows.append(run_one(f, a, i, len(files)))
        write_json(a.json, meta, None, rows, True)  # the rows so far, should the run be cut short
    return finish(rows, meta, not a.no_compile, a.device.type == "cuda", time.time() - t0, a.json, a.csv)


if __name__ == "__main__":
    sys.exit(main())
