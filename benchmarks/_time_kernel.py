"""Time one kernel in a process of its own; prints seconds per call (median of 5 samples of >= 100 ms).

    python benchmarks/_time_kernel.py tvm LIB.so OP SHAPE [--config N] [--inputs X.npz]
        # a compiled TVM kernel, checked and timed by the runner the tuner uses (autotune.measure.worker.run);
        # --config: autotune's config N of the op's template (it may take a weight relaid ahead);
        # --inputs: the kernel's inputs, already relaid (a MetaSchedule kernel with its layout rewrite)
    python benchmarks/_time_kernel.py torch OP SHAPE [--prepacked]   # the operator in torch, on the same inputs

A fresh process per measurement keeps one library's threads (torch's OpenMP pool, TVM's pool) from
slowing another's. Thread counts come from the environment (TVM_NUM_THREADS, OMP_NUM_THREADS).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def time_tvm(lib_path: str, op: str, shape: str, config: int | None = None, inputs: str | None = None) -> float:
    import numpy as np

    from autotune import make_task
    from autotune.measure.worker import run
    from autotune.operators import default_template_ref

    task = make_task(op, shape)
    template = default_template_ref(task.op, task.target_kind) if config is not None else None
    relaid = None
    if inputs:
        with np.load(inputs) as npz:
            relaid = [npz[f"arg{i}"] for i in range(len(npz.files))]
    error, message, costs = run(lib_path, task, template, config, repeat=5, min_repeat_ms=100, cache_flush=False,
                                relaid=relaid)
    if error:
        raise SystemExit(f"{lib_path}: {error}: {message}")
    return sorted(costs)[len(costs) // 2]


def time_torch(op: str, shape: str, prepacked: bool = False) -> float:
    from _baselines import median_time, torch_fn

    from autotune import make_task
    from autotune.measure.worker import INPUT_SEED
    from autotune.operators import random_inputs

    task = make_task(op, shape)
    inputs = random_inputs(task.opdef, task.shape, task.dtype, INPUT_SEED)
    return median_time(torch_fn(task, inputs, prepacked), repeat=5, min_s=0.1)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["tvm", "torch"])
    ap.add_argument("rest", nargs="+", help="tvm: LIB OP SHAPE; torch: OP SHAPE")
    ap.add_argument("--config", type=int)
    ap.add_argument("--inputs")
    ap.add_argument("--prepacked", action="store_true")
    a = ap.parse_args()
    print(time_tvm(*a.rest, config=a.config, inputs=a.inputs) if a.kind == "tvm"
          else time_torch(*a.rest, prepacked=a.prepacked))
