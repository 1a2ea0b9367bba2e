"""Time one kernel in a process of its own; prints seconds per call (median of 5 samples of >= 100 ms).

    python benchmarks/_time_kernel.py tvm LIB.so OP SHAPE   # a compiled TVM kernel, checked and timed by the
                                                            # runner the tuner uses (autotune.measure_worker.run)
    python benchmarks/_time_kernel.py torch OP SHAPE        # the operator in torch, on the same inputs

A fresh process per measurement keeps one library's threads (torch's OpenMP pool, TVM's pool) from
slowing another's. Thread counts come from the environment (TVM_NUM_THREADS, OMP_NUM_THREADS).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def time_tvm(lib_path: str, op: str, shape: str) -> float:
    from autotune import make_task
    from autotune.measure_worker import run

    error, message, costs = run(lib_path, make_task(op, shape), repeat=5, min_repeat_ms=100, cache_flush=False)
    if error:
        raise SystemExit(f"{lib_path}: {error}: {message}")
    return sorted(costs)[len(costs) // 2]


def time_torch(op: str, shape: str) -> float:
    from _baselines import median_time, torch_fn

    from autotune import make_task
    from autotune.measure_worker import INPUT_SEED
    from autotune.ops import random_inputs

    task = make_task(op, shape)
    inputs = random_inputs(task.opdef, task.shape, task.dtype, INPUT_SEED)
    return median_time(torch_fn(task, inputs), repeat=5, min_s=0.1)


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    print(time_tvm(*rest) if kind == "tvm" else time_torch(*rest))
