"""Compiled code and eager PyTorch code alternating: call by call from the first call, eager, autotune, Inductor.

Models (defined here, so `tune_model("benchmarks/bench_alternation.py:NAME", via="compile")` tunes them):
  breaks   a stem and four residual blocks, each followed by a data-dependent `if` on float(y.mean()): a graph
           break per block, so every block is a graph of its own and eager code runs between them
  split    the same blocks with an op TVM cannot import (erfinv) after each: one graph, split; the erfinv calls
           run eagerly between the segments on TVM
  mixed    a plain module whose eager convolutions call a compiled residual block between them
  trivial  Linear(16, 16) + ReLU on 4x16: the floor of a call
Backends, each model and backend in a process of its own, rounds interleaved: eager; autotune (the kernels'
parallel loops on the OpenMP pool PyTorch runs on, `autotune.thread_pool`); autotune-tvmpool (the same builds with
the kernels on TVM's own thread pool, as before the shared pool); inductor. Calls 1..N are timed one by one:
the first (with its builds), the second, and the steady state (median of the second half of the calls).

Library: an Inception-style block, tuned and built (`build_model`, `export_library`), loaded with
`autotune.model.load_library` and called (a) in a process that runs nothing else and (b) right after eager calls of
the same block in PyTorch, with its kernels on the OpenMP pool and on TVM's pool.

    python benchmarks/bench_alternation.py                       # tune (resumable), time, store `alternation`
    python benchmarks/bench_alternation.py --trials 0 --rounds 1 --no-write   # untuned, quick
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from _common import reexec_clean, report  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

BACKENDS = ("eager", "autotune", "autotune-tvmpool", "inductor")
LIBRARY_MODES = ("alone", "after-eager")
LOOP_CALLS = 3000  # calls of the trivial module timed in one loop


class Block(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))


class Blocks(nn.Module):
    """A stem and four residual blocks, written out (Dynamo inlines none of it into a loop)."""

    def __init__(self, c: int = 32):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.b0, self.b1, self.b2, self.b3 = (Block(c) for _ in range(4))


class Breaks(Blocks):
    def forward(self, x):
        y = self.b0(self.stem(x))
        if float(y.mean()) > 0:  # a graph break after each block
            y = y * 1.0
        y = self.b1(y)
        if float(y.mean()) > 0:
            y = y * 1.0
        y = self.b2(y)
        if float(y.mean()) > 0:
            y = y * 1.0
        y = self.b3(y)
        if float(y.mean()) > 0:
            y = y * 1.0
        return y


class Split(Blocks):
    def forward(self, x):
        y = torch.erfinv(torch.tanh(self.b0(self.stem(x))) * 0.5)  # TVM cannot import erfinv: the graph splits
        y = torch.erfinv(torch.tanh(self.b1(y)) * 0.5)
        y = torch.erfinv(torch.tanh(self.b2(y)) * 0.5)
        return torch.erfinv(torch.tanh(self.b3(y)) * 0.5)


class Mixed(nn.Module):
    """Eager convolutions around a compiled block (`compile_core` compiles it)."""

    def __init__(self, c: int = 32):
        super().__init__()
        self.pre = nn.Sequential(nn.Conv2d(3, c, 3, stride=2, padding=1), nn.ReLU())
        self.core = Block(c)
        self.post = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.post(self.core(self.pre(x)))


class Inception(nn.Module):
    def __init__(self, c: int = 192):
        super().__init__()
        self.b1 = nn.Conv2d(c, 64, 1)
        self.b2 = nn.Sequential(nn.Conv2d(c, 96, 1), nn.ReLU(), nn.Conv2d(96, 128, 3, padding=1))
        self.b3 = nn.Sequential(nn.Conv2d(c, 16, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                                nn.Conv2d(32, 32, 3, padding=1))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(c, 32, 1))

    def forward(self, x):
        return torch.relu(torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], dim=1))


class Trivial(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.fc(x))


def _ready(model: nn.Module, *inputs: torch.Tensor) -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    for m in model.modules():  # non-trivial batch-norm statistics
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval(), inputs


def breaks():
    torch.manual_seed(0)
    return _ready(Breaks(), torch.randn(1, 3, 112, 112))


def split():
    torch.manual_seed(0)
    return _ready(Split(), torch.randn(1, 3, 112, 112))


def mixed():
    torch.manual_seed(0)
    return _ready(Mixed(), torch.randn(1, 3, 112, 112))


def trivial():
    torch.manual_seed(0)
    return _ready(Trivial(), torch.randn(4, 16))


def inception():
    torch.manual_seed(0)
    return _ready(Inception(), torch.randn(1, 192, 28, 28))


MODELS = {"breaks": breaks, "split": split, "mixed": mixed, "trivial": trivial}


def _use_tvm_pool() -> None:
    """Kernels on TVM's own thread pool: what every build did before the shared pool (for comparison only)."""
    import autotune.thread_pool as tp

    tp.launcher = lambda: None


def _compiled(name: str, backend: str, logs: list[str]):
    model, inputs = MODELS[name]()
    if backend == "eager":
        return model, model, inputs
    options = {"logs": logs} if backend.startswith("autotune") else None
    kind = "autotune" if backend.startswith("autotune") else backend
    if name == "mixed":  # the plain module stays plain; only its block is compiled
        compiled = Mixed()
        compiled.load_state_dict(model.state_dict())
        compiled.eval().core = torch.compile(compiled.core, backend=kind, options=options)
        return model, compiled, inputs
    return model, torch.compile(model, backend=kind, options=options), inputs


def run_model(name: str, backend: str, calls: int, logs: list[str]) -> dict:
    """Worker: the model's calls 1..`calls` on new inputs each, each timed (ms), and the largest difference of
    their outputs from eager's (computed after the timing)."""
    import autotune.torch_backend as tb

    if backend == "autotune-tvmpool":
        _use_tvm_pool()
    model, fn, inputs = _compiled(name, backend, logs)
    torch.manual_seed(1)
    fresh = [[torch.randn_like(t) for t in inputs] for _ in range(calls)]  # new data every call, as in use
    times, outs = [], []
    with torch.no_grad():
        for args in fresh:
            t0 = time.perf_counter()
            outs.append(fn(*args))
            times.append((time.perf_counter() - t0) * 1e3)
        err = max(float((out - model(*args)).abs().max()) for out, args in zip(outs, fresh))
        loop_us = None
        if name == "trivial":  # the floor: a call's cost in a tight loop, without a timer around each call
            t0 = time.perf_counter()
            for _ in range(LOOP_CALLS):
                fn(*inputs)
            loop_us = (time.perf_counter() - t0) / LOOP_CALLS * 1e6
    from autotune.thread_pool import launcher_status

    return {"times": times, "err": err, "loop_us": loop_us, "graphs": tb.STATS.graphs, "builds": tb.STATS.builds,
            "fallbacks": tb.STATS.fallbacks, "pool": launcher_status() if backend == "autotune" else ""}


def run_library(path: str, mode: str, pool: str, calls: int) -> dict:
    """Worker: a loaded library's calls (ms), alone or each right after an eager call of the same block."""
    from autotune.model import load_library

    if pool == "tvm":
        _use_tvm_pool()
    model, (x,) = inception()
    lib = load_library(path)
    times = []
    with torch.no_grad():
        out = lib(x)
        for _ in range(calls):
            if mode == "after-eager":
                model(x)
            t0 = time.perf_counter()
            out = lib(x)
            times.append((time.perf_counter() - t0) * 1e3)
        err = float((out - model(x)).abs().max())  # after the timing: "alone" runs no eager op before it
    return {"times": times, "err": err}


def _worker(args: list[str], timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--worker", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"worker {args} failed: {done.stderr.strip().splitlines()[-3:]}")
    return json.loads(lines[-1])


LOGS = {"breaks": "blocks", "split": "blocks", "mixed": "blocks", "inception": "inception"}  # models sharing tasks


def tune(work: Path, trials: int) -> dict[str, list[str]]:
    """Tune the models' tasks (and the Inception block's) to `trials` trials per log, resumably; each model's logs.
    The residual models share their convolutions, and their log."""
    from autotune.model import tune_model

    logs = {}
    for name, log_name in LOGS.items():
        log = work / f"{log_name}.jsonl"
        if trials > 0:
            via = "export" if name == "inception" else "compile"
            tune_model(f"{__file__}:{name}", trials=trials, log=log, via=via, progress=lambda m: None)
        logs[name] = [str(log)] if log.exists() else []
    return {name: logs.get(name, []) for name in [*MODELS, "inception"]}


def build_library(work: Path, logs: list[str]) -> str:
    from autotune.model import build_model

    model, inputs = inception()
    path = work / "inception.so"
    build_model(model, logs=logs, inputs=inputs).export_library(path)
    return str(path)


def _steady(times: list[float]) -> float:
    """The steady state of a process's calls: the median of their second half."""
    return statistics.median(times[len(times) // 2:])


def _row_model(name: str, backend: str, runs: list[dict], eager_ms: float, inductor_ms: float) -> str:
    first = statistics.median(r["times"][0] for r in runs)
    second = statistics.median(r["times"][1] for r in runs)
    steady = statistics.median(_steady(r["times"]) for r in runs)
    err = max(r["err"] for r in runs)
    graphs = f"{runs[0]['builds']} builds, {runs[0]['fallbacks']} eager" if backend.startswith("autotune") else ""
    return (f"| {name} | {backend} | {first:.1f} | {second:.2f} | {steady:.3f} | {second / steady:.2f} | "
            f"{eager_ms / steady:.2f}x | {inductor_ms / steady:.2f}x | {err:.1e} | {graphs} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--trials", type=int, default=200, help="trials per model's log (0: default schedules)")
    ap.add_argument("--calls", type=int, default=60, help="calls timed per process")
    ap.add_argument("--rounds", type=int, default=3, help="processes per model and backend, interleaved")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--backends", nargs="*", default=list(BACKENDS))
    ap.add_argument("--work", default=str(HERE / "work" / "alternation"))
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    reexec_clean(args.threads)
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    if args.worker:
        kind, *rest = args.worker
        if kind == "model":
            name, backend, calls, *logs = rest
            print(json.dumps(run_model(name, backend, int(calls), logs)))
        else:
            path, mode, pool, calls = rest
            print(json.dumps(run_library(path, mode, pool, int(calls))))
        return

    from autotune.target import cpu_name, host_llvm_target

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    logs = tune(work, args.trials)
    tune_min = (time.time() - t0) / 60
    library = build_library(work, logs["inception"])
    runs: dict[tuple[str, str], list[dict]] = {}
    lib_runs: dict[tuple[str, str], list[dict]] = {}
    for _ in range(args.rounds):  # interleaved: each round runs every model and backend once
        for name in args.models:
            for backend in args.backends:
                runs.setdefault((name, backend), []).append(
                    _worker(["model", name, backend, str(args.calls), *logs[name]], args.timeout))
        for pool in ("openmp", "tvm"):
            for mode in LIBRARY_MODES:
                lib_runs.setdefault((mode, pool), []).append(
                    _worker(["library", library, mode, pool, str(args.calls)], args.timeout))

    def steady(name: str, backend: str) -> float:
        got = runs.get((name, backend))
        return statistics.median(_steady(r["times"]) for r in got) if got else float("nan")

    pool = runs[(args.models[0], "autotune")][0]["pool"] if "autotune" in args.backends else "-"
    lines = [f"CPU {cpu_name(host_llvm_target(args.threads))}, {args.threads} threads (TVM_NUM_THREADS, "
             f"OMP_NUM_THREADS, torch.set_num_threads); {args.rounds} round(s), each model and backend in a process "
             f"of its own, {args.calls} calls timed one by one; logs tuned to {args.trials} trials each "
             f"({tune_min:.1f} min of tuning in this run); kernels' pool for `autotune`: {pool}.",
             "",
             "| model | backend | first call (ms) | second (ms) | steady (ms) | second / steady | "
             "speed-up over eager | over Inductor | max abs error | autotune graphs |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in args.models:
        for backend in args.backends:
            if (name, backend) in runs:
                lines.append(_row_model(name, backend, runs[(name, backend)], steady(name, "eager"),
                                        steady(name, "inductor")))
    if "trivial" in args.models:
        lines += ["", f"Floor: the trivial module called {LOOP_CALLS} times in a loop (no timer around each call), "
                  "median over rounds.", "", "| backend | per call (us) | Inductor's time / this |", "|---|---|---|"]
        floor = {b: statistics.median(r["loop_us"] for r in runs[("trivial", b)]) for b in args.backends}
        for backend, us in floor.items():
            lines.append(f"| {backend} | {us:.1f} | {floor.get('inductor', float('nan')) / us:.2f}x |")
    lines += ["", f"Library: the Inception block (1x192x28x28) built with its log and loaded with `load_library`; "
              f"median of {args.calls} calls per process, median over rounds.", "",
              "| kernels' pool | alone (ms) | right after eager calls (ms) | after eager / alone | max abs error |",
              "|---|---|---|---|---|"]
    for pool in ("openmp", "tvm"):
        alone, after = (statistics.median(statistics.median(r["times"]) for r in lib_runs[(m, pool)])
                        for m in LIBRARY_MODES)
        err = max(r["err"] for m in LIBRARY_MODES for r in lib_runs[(m, pool)])
        lines.append(f"| {pool} | {alone:.3f} | {after:.3f} | {after / alone:.2f} | {err:.1e} |")
    report("alternation", "\n".join(lines), write=not args.no_write)


if __name__ == "__main__":
    main()
