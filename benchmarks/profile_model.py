"""Where a built model's time goes: per-function time inside the VM, and each tuned kernel timed alone.

    python benchmarks/profile_model.py transformer_layer --log benchmarks/work/models/transformer_layer.jsonl

Builds the model with the log, runs it under a VM instrument (wall time of every call, per function), then calls
each tuned kernel of the same compiled library alone on random inputs of its shapes, in the same process, warm
and with the caches evicted before each call. The columns differ when a kernel runs slower in the model than it
was tuned to run.
Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import reexec_clean
from bench_model import median_ms

EVICT_BYTES = 256 << 20


def in_model_ms(built, inputs, runs: int) -> tuple[float, dict[str, float]]:
    """(median wall ms per inference, {function: ms per inference under the instrument})."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    vm = VirtualMachine(built.executable, tvm.cpu())
    args = built.tvm_args(*inputs)
    wall = median_ms(lambda: vm["main"](*args), min_runs=runs)
    total: dict[str, float] = collections.defaultdict(float)
    start: dict[str, float] = {}

    def instrument(func, name, before_run, ret_value, *call_args):
        if before_run:
            start[name] = time.perf_counter()
        else:
            total[name] += time.perf_counter() - start[name]

    vm.set_instrument(instrument)
    for _ in range(runs):
        vm["main"](*args)
    return wall, {name: t / runs * 1e3 for name, t in total.items()}


def alone_ms(built, name: str, funcs: list, runs: int) -> tuple[float, float, object] | None:
    """(median ms warm, median ms with the caches evicted before each call, its PrimFunc) of the library function
    `name` called alone on random inputs, with the shapes of the first of `funcs` (the tasks' scheduled
    PrimFuncs) that it accepts; None when it accepts none."""
    import numpy as np
    import tvm

    call = built.executable.mod.get_function(name, query_imports=True)
    for func in funcs:
        shapes = [[int(d) for d in p.shape] for p in func.params]
        arrays = [tvm.runtime.tensor(np.random.rand(*s).astype("float32")) for s in shapes]
        try:
            call(*arrays)
        except Exception:  # noqa: BLE001, S112 - another task's shapes
            continue
        evict = np.zeros(EVICT_BYTES // 4, "float32")
        times: dict[bool, list[float]] = {False: [], True: []}
        for k in range(2 * runs):
            cold = k % 2 == 1
            if cold:
                evict += 1.0  # touches every line of a buffer larger than the last-level cache
            t0 = time.perf_counter()
            call(*arrays)
            times[cold].append(time.perf_counter() - t0)
        return statistics.median(times[False]) * 1e3, statistics.median(times[True]) * 1e3, func
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--log", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = ap.parse_args()
    reexec_clean(args.threads)
    warnings.simplefilter("ignore")
    from models import MODELS  # benchmarks/models.py

    from autotune import load_records
    from autotune.model import build_model, capture
    from autotune.model.build import best_by_task, kernel_for

    model, inputs = MODELS[args.model]()
    built = build_model(capture(model, inputs), logs=[args.log])
    wall, per_func = in_model_ms(built, inputs, args.runs)
    best = best_by_task(load_records(args.log))
    tasks = [(c.task, kernel_for(c.task, c.weight, best, set())[0].func) for c in built.report.kernels]
    print(f"{args.model}: {wall:.2f} ms per inference (median, plain), {sum(per_func.values()):.2f} ms instrumented")
    print("| function | ms per inference in the model | ms alone | ms alone, caches evicted | task |")
    print("|---|---|---|---|---|")
    for name, ms in sorted(per_func.items(), key=lambda kv: -kv[1]):
        if ms < 0.01:
            continue
        alone = alone_ms(built, name, [f for _, f in tasks], args.runs) if name.startswith("autotune_") else None
        task = next((t for t, f in tasks if alone and f is alone[2]), "")
        cols = f"{alone[0]:.3f} | {alone[1]:.3f}" if alone else " | "
        print(f"| {name} | {ms:.3f} | {cols} | {task} |")


if __name__ == "__main__":
    main()
