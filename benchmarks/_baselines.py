"""Baselines measured in the benchmark's own process: torch (oneDNN / MKL) and TVM's MetaSchedule."""

from __future__ import annotations

import math
import os

import numpy as np

from autotune.timing import time_calls


def median_time(fn, repeat: int = 7, min_s: float = 0.2) -> float:
    """Median seconds per call of fn(), each sample long enough (>= min_s) to be timed well."""
    samples = time_calls(fn, repeat, min_s)
    return sorted(samples)[len(samples) // 2]


def torch_fn(task, arrays):
    """A zero-argument callable running the task's operator with torch on `arrays`."""
    import torch
    import torch.nn.functional as F

    p, ts = task.shape, [torch.from_numpy(a) for a in arrays]
    if task.op in ("matmul", "batch_matmul"):
        return lambda: torch.matmul(ts[0], ts[1])
    if task.op == "dense":
        return lambda: F.linear(ts[0], ts[1])
    if task.op == "conv2d":
        return lambda: F.conv2d(ts[0], ts[1], stride=p["stride"], padding=p["padding"], dilation=p["dilation"])
    if task.op == "depthwise_conv2d":
        return lambda: F.conv2d(ts[0], ts[1], stride=p["stride"], padding=p["padding"], groups=p["C"])
    raise ValueError(task.op)


def _fast_build(mod, target, _params):
    """MetaSchedule builder without the 15 s tensor-intrinsic import per worker (notes section 7)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm.tirx.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def metaschedule_kernel(task, trials: int, work_dir: str, seed: int = 0):
    """Tune the task's PrimFunc with MetaSchedule (tune_tir) for `trials`; returns the compiled best or None."""
    import sys

    import cloudpickle
    import tvm
    from tvm.s_tir import meta_schedule as ms

    import search_spaces

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # builder workers cannot import benchmarks/
    from autotune.target import host_cores, to_tvm_target

    mod = tvm.IRModule({"main": search_spaces.prim_func(task)})
    target = to_tvm_target(task.target)
    records = os.path.join(work_dir, "database_tuning_record.json")
    if os.path.exists(records) and sum(1 for _ in open(records)) >= trials:  # tuned before: reuse its database
        db = ms.database.JSONDatabase(os.path.join(work_dir, "database_workload.json"), records)
        sch = ms.tir_integration.compile_tir(db, mod, target)
        return None if sch is None else tvm.compile(sch.mod, target=target)
    db = ms.tune_tir(mod, target, work_dir=work_dir, max_trials_global=trials, num_trials_per_iter=32,
                     builder=ms.builder.LocalBuilder(f_build=_fast_build, max_workers=host_cores(), timeout_sec=120),
                     runner=ms.runner.LocalRunner(timeout_sec=60, evaluator_config=ms.runner.EvaluatorConfig(
                         number=3, repeat=1, min_repeat_ms=100, enable_cpu_cache_flush=False)),
                     num_tuning_cores=host_cores(), seed=seed)
    sch = ms.tir_integration.compile_tir(db, mod, target)
    return None if sch is None else tvm.compile(sch.mod, target=target)


def executable_fn(ex, task, arrays):
    """A zero-argument callable running a compiled TVM kernel on `arrays`; its output is checked first."""
    import tvm

    dev = tvm.cpu(0)
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    out = tvm.runtime.empty(task.opdef.output_shape(task.shape), task.dtype, dev)
    ex(*args, out)
    ref = task.opdef.reference(task.shape, arrays)
    assert np.abs(out.numpy() - ref).max() < 1e-2 * max(1.0, float(np.abs(ref).max())), "kernel output is wrong"
    return lambda: ex(*args, out)


def best_of(fns, rounds: int = 3) -> list[float]:
    """Per function, the least of `rounds` medians (5 samples of >= 50 ms), the functions interleaved round by
    round: on a shared machine the least is the one least disturbed, and no contender gets a quieter moment."""
    best = [math.inf] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], median_time(fn, repeat=5, min_s=0.05))
    return best
