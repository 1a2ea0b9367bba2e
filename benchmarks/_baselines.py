"""Baselines (torch with oneDNN / MKL, TVM's MetaSchedule) and timing helpers: in the benchmark's own process
or, with `isolated_best_of`, each measurement in a fresh process (`_time_kernel.py`)."""

from __future__ import annotations

import math
import os

from autotune.measure.timing import time_calls


def median_time(fn, repeat: int = 7, min_s: float = 0.2) -> float:
    """Median seconds per call of fn(), each sample long enough (>= min_s) to be timed well."""
    samples = time_calls(fn, repeat, min_s)
    return sorted(samples)[len(samples) // 2]


# Operators whose weight is a layer's constant, which every library may pack once, ahead of the calls: per op, how
# torch runs it on a weight packed ahead (torch_fn's `prepacked`) and on the weight as it is.
PREPACKED_TORCH = {
    "dense": ("oneDNN's `_reorder_linear_weight` + `_linear_pointwise`", "`F.linear`"),
    "conv2d": ("oneDNN's `mkldnn_reorder_conv2d_weight` + `_convolution_pointwise`", "`F.conv2d`"),
    "depthwise_conv2d": ("oneDNN's `mkldnn_reorder_conv2d_weight` + `_convolution_pointwise` (groups=C)",
                         "`F.conv2d(groups=C)`"),
    "group_conv2d": ("oneDNN's `mkldnn_reorder_conv2d_weight` + `_convolution_pointwise` (groups)",
                     "`F.conv2d(groups=groups)`"),
}


def _groups(task) -> int:
    return {"depthwise_conv2d": task.shape["C"], "group_conv2d": task.shape.get("groups", 1)}.get(task.op, 1)


def torch_fn(task, arrays, prepacked: bool = False):
    """A zero-argument callable running the task's operator with torch on `arrays`. prepacked (PREPACKED_TORCH):
    oneDNN's kernel on a weight reordered once, ahead (what torch does for inference with constant weights)."""
    import torch
    import torch.nn.functional as F

    p, ts = task.shape, [torch.from_numpy(a) for a in arrays]
    if task.op in ("matmul", "batch_matmul"):
        return lambda: torch.matmul(ts[0], ts[1])
    if task.op == "dense":
        per_call = lambda: F.linear(ts[0], ts[1])  # noqa: E731
    elif task.op in ("conv2d", "depthwise_conv2d", "group_conv2d"):
        per_call = lambda: F.conv2d(ts[0], ts[1], stride=p["stride"], padding=p["padding"],  # noqa: E731
                                    dilation=p.get("dilation", 1), groups=_groups(task))
    else:
        raise ValueError(task.op)
    if not prepacked:
        return per_call
    packed = _onednn_prepacked(task, ts)
    assert torch.allclose(packed(), per_call(), atol=1e-3), f"oneDNN's prepacked {task.op} is wrong"
    return packed


def _onednn_prepacked(task, ts):
    """oneDNN's dense or convolution on the weight ts[1] reordered once, now (PREPACKED_TORCH)."""
    import torch

    p = task.shape
    if task.op == "dense":
        w = torch.ops.mkldnn._reorder_linear_weight(ts[1], p["batch"])
        return lambda: torch.ops.mkldnn._linear_pointwise(ts[0], w, None, "none", [], "")
    conv = [[p.get(k, 1)] * 2 for k in ("padding", "stride", "dilation")]
    groups = _groups(task)
    w = torch._C._nn.mkldnn_reorder_conv2d_weight(ts[1].to_mkldnn(), *conv, groups, list(ts[0].shape))
    return lambda: torch.ops.mkldnn._convolution_pointwise(ts[0], w, None, *conv, groups, "none", [None], "")


def _fast_build(mod, target, _params):
    """MetaSchedule builder without the 15 s tensor-intrinsic import per worker (notes section 7)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm.tirx.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def _with_gpu_limits(target: dict) -> dict:
    """MetaSchedule's CUDA rules need the block limits in the target (autotune's own CUDA targets do not)."""
    if target["kind"] != "cuda":
        return target
    from autotune.gpu_limits import limits_for

    limits = limits_for(target["arch"])
    return {"max_threads_per_block": limits.max_threads_per_block, "max_shared_memory_per_block":
            limits.max_shared_bytes, "thread_warp_size": 32, "registers_per_block": limits.registers_per_block,
            **target}


def metaschedule_kernel(task, trials: int, work_dir: str, seed: int = 0, layout_free: tuple[int, ...] = ()):
    """Tune the task's PrimFunc with MetaSchedule (tune_tir) for `trials`: (compiled best, relay) or None.

    layout_free: operands that are constant (a weight), which MetaSchedule may then take in a layout of its
    choice (its layout rewrite, as for a weight in a model). The kernel is compiled without the rewrite
    block, and relay(inputs) gives its inputs with those operands in its layout (identity without them).
    """
    import sys

    import cloudpickle
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from autotune.templates import prim_func

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # builder workers cannot import benchmarks/
    from autotune.target import host_cores, to_tvm_target

    func = prim_func(task)
    if layout_free:
        func = func.with_attr("layout_free_buffers", list(layout_free))
    mod = tvm.IRModule({"main": func})
    target = to_tvm_target(_with_gpu_limits(task.target))
    records = os.path.join(work_dir, "database_tuning_record.json")
    if os.path.exists(records) and sum(1 for _ in open(records)) >= trials:  # tuned before: reuse its database
        db = ms.database.JSONDatabase(os.path.join(work_dir, "database_workload.json"), records)
    else:
        db = ms.tune_tir(mod, target, work_dir=work_dir, max_trials_global=trials, num_trials_per_iter=32,
                         builder=ms.builder.LocalBuilder(f_build=_fast_build, max_workers=host_cores(),
                                                         timeout_sec=120),
                         runner=ms.runner.LocalRunner(timeout_sec=60, evaluator_config=ms.runner.EvaluatorConfig(
                             number=3, repeat=1, min_repeat_ms=100, enable_cpu_cache_flush=False)),
                         num_tuning_cores=host_cores(), seed=seed)
    sch = ms.tir_integration.compile_tir(db, mod, target)
    if sch is None:
        return None
    maps = _layout_rewrites(sch)
    if not maps:
        return tvm.compile(sch.mod, target=target), lambda inputs: list(inputs)
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from autotune.templates import relayout_array

    kernel = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod)
    names = [p.name for p in func.params]

    def relay(inputs):
        out = list(inputs)
        for name, index_map in maps.items():
            out[names.index(name)] = relayout_array(inputs[names.index(name)], index_map)
        return out

    return tvm.compile(kernel, target=target), relay


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


def _layout_rewrites(sch) -> dict:
    """{operand name: index map (numpy)} of MetaSchedule's layout-rewrite blocks (children of the root block)."""
    from cost_models.loop_levels import eval_index

    def buffer(region):
        return region.source if hasattr(region, "source") else region.buffer

    maps = {}
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(rv)
        if not block.annotations.get("meta_schedule.layout_rewrite_preproc"):
            continue
        [src], [dst] = block.reads, block.writes
        iters = [iv.var for iv in block.iter_vars]
        assert [str(r.min) for r in src.region] == [str(v) for v in iters], "rewrite block reads its operand permuted"
        maps[buffer(src).name] = lambda *idx, it=iters, r=dst.region: tuple(
            eval_index(d.min, {}, dict(zip(it, idx))) for d in r)
    return maps
