"""What runs inside builder and runner processes: build one candidate, time one kernel.

Functions here return plain tuples `(error_kind_value | None, message, payload)` so the
parent never has to parse exception text to classify a failure.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from ..gpu_limits import check_config
from ..operators import check_output, random_inputs, reduction_size, reference_output
from ..target import compile_kernel, export_library
from ..task import Task
from ..templates import resolve, space_of
from .timing import time_kernel

WORKER_IMPORTS = ("tvm", "search_spaces")  # a fresh worker imports them before its first call's deadline

INPUT_SEED = 0


def _template_and_space(task: Task, template_ref: str):
    template = resolve(template_ref)
    return template, space_of(template, task)


def build(task: Task, index: int, template_ref: str, out_path: str) -> tuple[str | None, str, float]:
    """Schedule config `index` of the task's space and export a shared library to out_path."""
    t0 = time.perf_counter()
    template, space = _template_and_space(task, template_ref)
    config = space.get(index)
    reason = check_config(task, template, config)  # GPU limits, before any compilation
    if reason:
        return "invalid_config", reason, 0.0
    try:
        mod = template.kernel(task, config)
    except Exception as err:  # the template rejected this config
        last_line = str(err).strip().splitlines()[-1] if str(err).strip() else ""
        return "invalid_config", f"{type(err).__name__}: {last_line}", 0.0
    try:
        export_library(compile_kernel(mod, task.target), out_path, task.target)
    except Exception as err:
        return "compile_error", f"{type(err).__name__}: {str(err).strip()[-500:]}", time.perf_counter() - t0
    return None, out_path, time.perf_counter() - t0


@functools.lru_cache(maxsize=4)
def _reference(task: Task) -> tuple[list[np.ndarray], np.ndarray]:
    inputs = random_inputs(task.opdef, task.shape, task.dtype, INPUT_SEED)
    return inputs, reference_output(task.opdef, task.shape, task.dtype, inputs)


def kernel_inputs(task: Task, template_ref: str | None, index: int | None,
                  inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The op's inputs as config `index`'s kernel takes them (constant operands relaid, untimed);
    as they are without a template."""
    if template_ref is None or index is None:
        return inputs
    template, space = _template_and_space(task, template_ref)
    return template.kernel_inputs(task, space.get(index), inputs)


def run(artifact: str, task: Task, template_ref: str | None, index: int | None, repeat: int, min_repeat_ms: float,
        cache_flush: bool, relaid: list[np.ndarray] | None = None) -> tuple[str | None, str, list[float]]:
    """Load a kernel, check it against the numpy reference, then time it (seconds per call).
    The kernel gets the task's inputs as config `index` of the template takes them, or `relaid`."""
    import tvm

    try:
        lib = tvm.runtime.load_module(artifact)
        dev = tvm.cuda(0) if task.target_kind == "cuda" else tvm.cpu(0)
        inputs, ref = _reference(task)
        kernel_args = relaid if relaid is not None else kernel_inputs(task, template_ref, index, inputs)
        args = [tvm.runtime.tensor(a, dev) for a in kernel_args]
        out = tvm.runtime.tensor(task.element.unfilled(ref.shape), dev)  # stale output must not pass the check
        lib["main"](*args, out)
    except Exception as err:
        return "runtime_error", f"{type(err).__name__}: {str(err).strip()[-500:]}", []
    problem = check_output(out.numpy(), ref, reduction_size(task.opdef, task.shape), task.dtype)
    if problem:
        return "wrong_answer", problem, []
    flush = cache_flush and task.target_kind == "llvm"
    return None, "", time_kernel(lib, dev, [*args, out], repeat, min_repeat_ms, flush)


def runtime_threads() -> int:
    """How many threads TVM's runtime uses in this process (for tests and records)."""
    import tvm

    return int(tvm.runtime.num_threads())
