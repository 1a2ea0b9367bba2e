"""Where a built model's time goes: per-function time inside the VM, and each tuned kernel timed alone.

    python benchmarks/profile_model.py transformer_layer --log benchmarks/work/models/transformer_layer.jsonl

Builds the model with the log, runs it under a VM instrument (wall time of every call, per function), then calls
each function holding a kernel (with the epilogue fused into it) of the same compiled library alone on random
inputs of its parameters' shapes, in the same process, warm and with the caches evicted before each call. The
columns differ when a kernel runs slower in the model than alone.
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
from bench_model import in_dtype, median_ms

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


def alone_ms(built, name: str, params: list[tuple[list[int], str]], runs: int) -> tuple[float, float]:
    """(median ms warm, median ms with the caches evicted before each call) of the library function `name` called
    alone on random inputs of `params` (its parameters' shapes and dtypes)."""
    import ml_dtypes
    import numpy as np
    import tvm

    call = built.executable.mod.get_function(name, query_imports=True)
    arrays = [tvm.runtime.tensor(np.random.rand(*s).astype(ml_dtypes.bfloat16 if d == "bfloat16" else d))
              for s, d in params]
    evict = np.zeros(EVICT_BYTES // 4, "float32")
    times: dict[bool, list[float]] = {False: [], True: []}
    for k in range(2 * runs):
        cold = k % 2 == 1
        if cold:
            evict += 1.0  # touches every line of a buffer larger than the last-level cache
        t0 = time.perf_counter()
        call(*arrays)
        times[cold].append(time.perf_counter() - t0)
    return statistics.median(times[False]) * 1e3, statistics.median(times[True]) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--log", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "int8"),
                    help="the model's (int8: quantized as bench_model.py does)")
    args = ap.parse_args()
    reexec_clean(args.threads)
    warnings.simplefilter("ignore")
    from models import MODELS  # benchmarks/models.py

    from autotune import load_records
    from autotune.model import BuiltModel, capture
    from autotune.model.build import compile_lowered, lower_captured
    from autotune.model.extract import resolve_target
    from autotune.target import to_tvm_target, use_target_threads
    from tvm import tirx

    model, inputs = in_dtype(*MODELS[args.model](), args.dtype)
    captured = capture(model, inputs)
    target = resolve_target("llvm")
    use_target_threads(target)
    # build_model's steps, keeping the lowered module: its functions' parameter shapes, for timing them alone
    lowered, report = lower_captured(captured, target, load_records(args.log))
    built = BuiltModel(captured.name, captured.inputs, compile_lowered(lowered, to_tvm_target(target)), report)
    wall, per_func = in_model_ms(built, inputs, args.runs)
    params = {gv.name_hint: [([int(d) for d in p.shape], str(p.dtype)) for p in f.params]
              for gv, f in lowered.functions_items() if isinstance(f, tirx.PrimFunc)}
    # kernels are numbered in the order the build meets them: the order of the report's tasks
    tasks = {f"autotune_{c.task.op}_{i}": c.task for i, c in enumerate(built.report.kernels)}
    print(f"{args.model}: {wall:.2f} ms per inference (median, plain), {sum(per_func.values()):.2f} ms instrumented")
    print("| function | ms per inference in the model | ms alone | ms alone, caches evicted | task |")
    print("|---|---|---|---|---|")
    for name, ms in sorted(per_func.items(), key=lambda kv: -kv[1]):
        if ms < 0.01:
            continue
        kernel = next((k for k in tasks if k == name or name.startswith(f"fused_{k}_")), None)
        cols = " | "
        if kernel is not None and name in params:
            cols = "{:.3f} | {:.3f}".format(*alone_ms(built, name, params[name], args.runs))
        print(f"| {name} | {ms:.3f} | {cols} | {tasks.get(kernel, '')} |")

if __name__ == "__main__":
    main()
