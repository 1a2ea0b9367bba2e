"""Baselines (torch with oneDNN / MKL, TVM's MetaSchedule) and timing helpers: in the benchmark's own process
or, with `isolated_best_of`, each measurement in a fresh process (`_time_kernel.py`)."""

from __future__ import annotations

import math
import os

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


def best_of(fns, rounds: int = 3) -> list[float]:
    """Per function, the least of `rounds` medians (5 samples of >= 50 ms), the functions interleaved round by
    round: on a shared machine the least is the one least disturbed, and no contender gets a quieter moment."""
    best = [math.inf] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], median_time(fn, repeat=5, min_s=0.05))
    return best


def isolated_best_of(commands, rounds: int = 3) -> list[float]:
    """Per command (argv of benchmarks/_time_kernel.py), the least of `rounds` timings, each in a fresh
    process, the commands interleaved round by round."""
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_time_kernel.py")
    best = [math.inf] * len(commands)
    for _ in range(rounds):
        for i, argv in enumerate(commands):
            out = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True, check=True)
            best[i] = min(best[i], float(out.stdout.strip().splitlines()[-1]))
    return best
