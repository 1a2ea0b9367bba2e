"""Time one kernel in a process of its own; prints seconds per call (median of 5 samples of >= 100 ms).

    python benchmarks/_time_kernel.py tvm LIB.so INPUTS.npz      # a compiled TVM kernel (output checked)
    python benchmarks/_time_kernel.py torch OP SHAPE INPUTS.npz  # the operator in torch

INPUTS.npz holds the inputs (arr_0, arr_1, ...) and the reference output ("ref"). A fresh process per
measurement keeps one library's threads (torch's OpenMP pool, TVM's pool) from slowing another's.
Thread counts come from the environment (TVM_NUM_THREADS, OMP_NUM_THREADS).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _load(path: str):
    import numpy as np

    data = np.load(path)
    inputs = [data[f"arr_{i}"] for i in range(sum(k.startswith("arr_") for k in data.files))]
    return inputs, data["ref"]


def time_tvm(lib_path: str, inputs_path: str) -> float:
    import numpy as np
    import tvm

    inputs, ref = _load(inputs_path)
    lib = tvm.runtime.load_module(lib_path)
    dev = tvm.cpu(0)
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    out = tvm.runtime.empty(ref.shape, str(ref.dtype), dev)
    lib["main"](*args, out)
    if np.abs(out.numpy() - ref).max() > 1e-2 * max(1.0, float(np.abs(ref).max())):
        raise SystemExit(f"{lib_path}: wrong output")
    res = lib.time_evaluator("main", dev, number=1, repeat=5, min_repeat_ms=100)(*args, out)
    return float(sorted(res.results)[2])


def time_torch(op: str, shape: str, inputs_path: str) -> float:
    from _baselines import median_time, torch_fn

    from autotune import make_task

    inputs, _ = _load(inputs_path)
    return median_time(torch_fn(make_task(op, shape), inputs), repeat=5, min_s=0.1)


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    print(time_tvm(*rest) if kind == "tvm" else time_torch(*rest))
