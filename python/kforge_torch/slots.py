"""`kforge bench SUITE --jobs N`: the suite's tasks in N parallel slots on this machine.

On the CPU the machine's cores (those this process may use) are split into N sets of
neighbouring cores, as even as can be, and each slot is one `kforge_torch.bench --worker`
process pinned to its set (sched_setaffinity before it starts, so torch, kforge synth, the
compiler and the kernel's sandbox, all its children, inherit it) with as many torch threads
as it has cores; kforge synth sizes its kernels' threads from the same affinity. With
--target cuda each slot is one GPU (every visible one, or those of cuda:0,2), the worker
seeing only its GPU (CUDA_VISIBLE_DEVICES). A slot takes the next task when it is done
with one, so long tasks do not hold a fixed share back.

A worker that dies (a task that crashes Python, say) costs that task an `error` row and is
started again; one that gives no result for --task-timeout seconds is killed with its
children (its own session) and the same happens. The other slots go on.

Progress on stderr: on a terminal one live line per slot and a total with the time left
(the mean time of a finished task, times the tasks left, over the slots); otherwise one
plain line per finished task with the same total. Each worker's own log (the lines one
process prints) is in OUT/slots/slot-K.log. The table, JSON and CSV are those of one
process (kforge_torch.suite.finish), in the suite's order; the JSON adds `jobs` and `slots`.

This module imports no torch: the workers do.
"""
import json
import os
import selectors
import signal
import subprocess
import sys
import time

from . import suite as S


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def split_cores(cores, n):
    """n lists of neighbouring cores, sizes differing by one at most; when there are fewer
    cores than slots, slots share cores round robin (said in the output)."""
    cores = sorted(cores)
    if n <= len(cores):
        q, r = divmod(len(cores), n)
        out, at = [], 0
        for k in range(n):
            size = q + (1 if k < r else 0)
            out.append(cores[at:at + size])
            at += size
        return out
    return [[cores[k % len(cores)]] for k in range(n)]


def visible_gpus():
    """The GPU numbers a process here may use: CUDA_VISIBLE_DEVICES's entries when set,
    else the GPUs nvidia-smi lists; [] when there is none."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [x.strip() for x in env.split(",") if x.strip() and x.strip() != "-1"]
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(k) for k, line in enumerate(p.stdout.splitlines()) if line.startswith("GPU ")]


def gpu_slots(target, jobs):
    """The GPUs of the slots for --target cuda / cuda:N / cuda:0,2, or (None, reason)."""
    plat, _, index = target.partition(":")
    vis = visible_gpus()
    if index:
        want = [x for x in index.split(",") if x]
        if not all(x.isdigit() for x in want):
            return None, f"--target {target}: cuda:N,M,... takes GPU numbers"
        bad = [x for x in want if int(x) >= len(vis)]
        if bad:
            return None, f"--target {target}: no GPU {', '.join(bad)} here ({len(vis)} visible)"
        gpus = [vis[int(x)] for x in want]
    else:
        gpus = vis
    if not gpus:
        return None, f"--target {target}: no GPU visible (nvidia-smi lists none; CUDA_VISIBLE_DEVICES=" \
                     f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
    if jobs and 1 < jobs < len(gpus):
        gpus = gpus[:jobs]
    return gpus, None


def fmt_s(s):
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Slot:
    def __init__(self, k, cores=None, gpu=None):
        self.k, self.cores, self.gpu = k, cores, gpu
        self.proc, self.buf, self.hello = None, b"", None
        self.task, self.started, self.last = None, 0.0, "starting"
        self.done = 0

    def what(self):
        if self.gpu is not None:
            return f"GPU {self.gpu}"
        c = self.cores
        span = f"{c[0]}-{c[-1]}" if len(c) > 1 and c == list(range(c[0], c[-1] + 1)) else ",".join(map(str, c))
        return f"{len(c)} core{'s' if len(c) != 1 else ''} (cpu {span})"


class Runner:
    def __init__(self, a, files, meta):
        self.a, self.files, self.meta = a, files, meta
        self.queue = list(enumerate(files, 1))
        self.rows, self.times = [], []
        self.sel = selectors.DefaultSelector()
        self.tty = sys.stderr.isatty()
        self.drawn = 0
        self.t0 = time.time()
        os.makedirs(os.path.join(a.out, "slots"), exist_ok=True)

    def worker_cmd(self, slot):
        a = self.a
        cmd = [sys.executable, "-m", "kforge_torch.bench", a.suite, "--worker", "--kforge", a.kforge,
               "--iters", str(a.iters), "--memcheck", a.memcheck, "--reps", str(a.reps), "--seed", str(a.seed),
               "--out", a.out]
        if a.time_budget:
            cmd += ["--time-budget", str(a.time_budget)]
        for opt in ("agent", "llm_url", "model"):
            if getattr(a, opt):
                cmd += ["--" + opt.replace("_", "-"), getattr(a, opt)]
        for flag in ("no_compile", "prealloc", "eval", "no_fuse"):
            if getattr(a, flag):
                cmd.append("--" + flag.replace("_", "-"))
        if slot.gpu is not None:
            cmd += ["--target", "cuda"]
            if a.threads:
                cmd += ["--threads", str(a.threads)]
        else:
            cmd += ["--target", a.target, "--threads", str(a.threads or len(slot.cores))]
        return cmd

    def start(self, slot):
        env = dict(os.environ)
        if slot.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = slot.gpu
        cores = slot.cores
        logf = open(os.path.join(self.a.out, "slots", f"slot-{slot.k}.log"), "ab")
        slot.proc = subprocess.Popen(self.worker_cmd(slot), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=logf, env=env, start_new_session=True,
                                     preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
        logf.close()
        slot.buf, slot.hello, slot.task = b"", None, None
        slot.started = time.time()  # the hello is waited for as a task is
        self.sel.register(slot.proc.stdout, selectors.EVENT_READ, slot)

    def stop(self, slot, kill):
        if not slot.proc:
            return
        try:
            self.sel.unregister(slot.proc.stdout)
        except (KeyError, ValueError):
            pass
        if kill:
            try:
                os.killpg(slot.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            try:
                slot.proc.stdin.close()
            except OSError:
                pass
        try:
            slot.proc.wait(timeout=None if kill else 60)
        except subprocess.TimeoutExpired:
            os.killpg(slot.proc.pid, signal.SIGKILL)
            slot.proc.wait()
        slot.proc.stdout.close()
        slot.proc = None

    def give(self, slot):
        if not self.queue:
            return
        i, f = self.queue.pop(0)
        slot.task, slot.started = (i, f), time.time()
        slot.last = f"{os.path.splitext(os.path.basename(f))[0]}"
        try:
            slot.proc.stdin.write(f"{i}\t{len(self.files)}\t{f}\n".encode())
            slot.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the worker died: its EOF comes next and the task is counted there

    def lost(self, slot, why):
        """The slot's worker is gone or killed: its task (if any) becomes an error row."""
        if slot.task:
            i, f = slot.task
            name = os.path.splitext(os.path.basename(f))[0]
            logp = os.path.join(self.a.out, "slots", f"slot-{slot.k}.log")
            self.add_row(slot, {"task": name, "file": f, "status": "error",
                                "detail": f"slot {slot.k} ({slot.what()}): {why}; its log: {logp}"})
        elif slot.hello is None:
            log(f"kforge bench: slot {slot.k}: its worker did not start: {why} "
                f"(see {os.path.join(self.a.out, 'slots', f'slot-{slot.k}.log')})")
        slot.task = None

    def add_row(self, slot, row):
        self.rows.append(row)
        self.times.append(time.time() - slot.started)
        slot.done += 1
        slot.last = f"{row['task']} {row['status']} ({time.time() - slot.started:.0f} s)"
        S.write_json(self.a.json, self.meta, None, sorted(self.rows, key=S.order_key), True)
        if not self.tty:
            log(f"slot {slot.k} ({slot.what()}): {slot.last} | {self.total_line()}")

    def total_line(self):
        n, done = len(self.files), len(self.rows)
        left = ""
        if self.times and done < n:
            per = sum(self.times) / len(self.times)
            busy = [s for s in self.slots if s.task]
            # a task in flight has the mean time less what it has run left; the rest go round the slots
            rest = (n - done - len(busy)) * per + sum(max(per - (time.time() - s.started), 0) for s in busy)
            left = f", about {fmt_s(rest / max(len(self.slots), 1))} left"
        return f"total {done}/{n} done, {fmt_s(time.time() - self.t0)} so far{left}"

    def draw(self):
        if not self.tty:
            return
        lines = []
        for s in self.slots:
            now = (f"{s.last} ... {time.time() - s.started:.0f} s" if s.task else
                   "done" if not self.queue and not s.task and s.hello is not None else s.last)
            lines.append(f"slot {s.k} ({s.what()}): {now}")
        lines.append(self.total_line())
        out = ("\x1b[%dF" % self.drawn if self.drawn else "") + "".join(f"\x1b[2K{l}\n" for l in lines)
        sys.stderr.write(out)
        sys.stderr.flush()
        self.drawn = len(lines)

    def on_line(self, slot, line):
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            return
        if "hello" in msg:
            slot.hello = msg["hello"]
            self.give(slot)
        elif "row" in msg and slot.task:
            self.add_row(slot, msg["row"])
            slot.task = None
            self.give(slot)

    def run(self, slots):
        """The tasks through the slots; the workers (each in its own session, out of reach of
        the terminal's ^C) are killed with their children if this process is interrupted or
        terminated (scancel, a Slurm time limit)."""
        self.slots = slots
        old = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        try:
            return self.loop(slots)
        finally:
            for s in slots:
                if s.proc:
                    self.stop(s, kill=True)
            signal.signal(signal.SIGTERM, old)

    def loop(self, slots):
        for s in slots:
            self.start(s)
        timeout = self.a.task_timeout
        while any(s.proc for s in slots):
            for key, _ in self.sel.select(timeout=1.0):
                slot = key.data
                data = os.read(slot.proc.stdout.fileno(), 65536)
                if not data:
                    rc = slot.proc.wait()
                    why = (f"its worker was killed by signal {-rc}" if rc < 0 else f"its worker exited with status {rc}")
                    self.stop(slot, kill=True)
                    self.lost(slot, why + " while running this task" if slot.task else why)
                    if self.queue and slot.hello is not None:
                        self.start(slot)
                    continue
                slot.buf += data
                while b"\n" in slot.buf:
                    line, slot.buf = slot.buf.split(b"\n", 1)
                    self.on_line(slot, line.decode("utf-8", "replace"))
            now = time.time()
            for s in slots:
                if s.proc and (s.task or s.hello is None) and now - s.started > timeout:
                    self.stop(s, kill=True)
                    self.lost(s, f"no result after {timeout:g} s (--task-timeout): the slot was killed")
                    if self.queue:
                        self.start(s)
                if s.proc and s.hello is not None and not s.task and not self.queue:
                    self.stop(s, kill=False)
            self.draw()
        # a task given to no slot (every worker failed to start) is an error too
        for i, f in self.queue:
            self.rows.append({"task": os.path.splitext(os.path.basename(f))[0], "file": f, "status": "error",
                              "detail": "no slot could run it (the workers did not start)"})
        self.queue = []
        return self.rows


def main(argv=None):
    a = S.bench_parser("kforge bench with parallel slots").parse_args(argv)
    if not a.suite:
        log("kforge bench: give a SUITE (a folder of tasks, or one file)")
        return 2
    if a.jobs < 1:
        log(f"kforge bench: --jobs {a.jobs}: at least 1")
        return 2
    shard = S.parse_shard(a.shard) if a.shard else None
    if a.shard and not shard:
        log(f"kforge bench: --shard {a.shard}: I/N with 1 <= I <= N")
        return 2
    all_files = S.suite_files(a.suite, a.only)
    if not all_files:
        log(f"kforge bench: {a.suite}: no tasks (.py in KernelBench format, or .kf)")
        return 2
    files = S.select_shard(all_files, shard)
    gpu = a.target.partition(":")[0] == "cuda"
    if gpu:
        gpus, why = gpu_slots(a.target, a.jobs)
        if gpus is None:
            log(f"kforge bench: {why}; nothing was run")
            return 2
        slots = [Slot(k, gpu=g) for k, g in enumerate(gpus, 1)]
    else:
        cores = sorted(os.sched_getaffinity(0))
        slots = [Slot(k, cores=c) for k, c in enumerate(split_cores(cores, a.jobs), 1)]
        if a.jobs > len(cores):
            log(f"kforge bench: --jobs {a.jobs} on {len(cores)} cores: slots share cores (timings disturb "
                f"each other)")
    os.makedirs(a.out, exist_ok=True)
    meta = {"suite": a.suite, "target": a.target, "iters": a.iters, "prealloc": a.prealloc,
            "compiled": not a.no_compile, "seed": a.seed, "suite_tasks": len(all_files), "shard": a.shard or "1/1",
            "jobs": len(slots),
            "slots": [{"gpu": s.gpu} if gpu else {"cores": s.cores} for s in slots]}
    part = f" (shard {a.shard}: {len(files)} of {len(all_files)})" if shard else ""
    log(f"kforge bench: {len(files)} tasks from {a.suite}{part}, target {a.target}, {a.iters} candidates each, "
        f"in {len(slots)} slots: " + "; ".join(f"slot {s.k} {s.what()}" for s in slots))
    r = Runner(a, files, meta)
    t0 = time.time()
    rows = r.run(slots)
    hello = next((s.hello for s in slots if s.hello), None) or {}
    for k in ("torch", "device", "timing", "threads"):
        if k in hello:
            meta[k] = hello[k]
    for s in slots:  # what each worker reported of itself (its affinity, its threads)
        if s.hello:
            meta["slots"][s.k - 1].update(affinity=s.hello.get("affinity"), threads=s.hello.get("threads"))
    rc = S.finish(rows, meta, not a.no_compile, gpu, time.time() - t0, a.json, a.csv)
    print(f"{len(slots)} slots: " + "; ".join(f"slot {s.k} {s.what()}, {s.done} tasks" for s in slots))
    return rc


if __name__ == "__main__":
    sys.exit(main())
