"""The two seams of measurement, Builder and Runner, the runner's options, and what records say of a runner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from ..task import Task
from ..version import versions
from .types import BuildResult, MeasureInput, MeasureResult


class Builder(Protocol):
    """Compiles candidates: one BuildResult per input, in order (an artifact, or an error kind and message)."""

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]: ...
    def close(self) -> None: ...


class Runner(Protocol):
    """Times built candidates: one MeasureResult per input, in order; `threads`: the kernel threads records name."""

    threads: int

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]: ...
    def device(self, target_kind: str) -> dict[str, str]: ...  # what records name of the device (GPU model...)
    def close(self) -> None: ...


@dataclass
class RunnerOptions:
    """How a runner times a kernel: threads, a deadline per candidate, repeats, and warm or cache-flushed calls."""

    threads: int = 0            # kernel threads; 0 = every core
    timeout: float = 10.0       # per candidate: load + check + timing
    repeat: int = 3
    min_repeat_ms: float = 100.0
    cache_flush: bool = False


def record_versions(runner: Runner, task: Task) -> dict[str, str]:
    """What the records of `task` measured by `runner` name: autotune, TVM, LLVM and xgboost versions, and the
    device's facts (for CUDA: the GPU, its driver, CUDA)."""
    return {**versions(), **runner.device(task.target_kind)}


def runner_timing(runner: Runner | None, task: Task, options: RunnerOptions | None = None) -> str:
    """How `runner` (None: a LocalRunner with `options`, to be created) times the task's kernels, as records say:
    "flushed" (CPU only: the operands after the first flushed from the cache before every call) or "warm"."""
    options = getattr(runner, "options", None) if runner is not None else options
    return "flushed" if options is not None and options.cache_flush and task.target_kind == "llvm" else "warm"
