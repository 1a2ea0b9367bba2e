"""The two seams of measurement, Builder and Runner, the runner's options, and what records say of a runner."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Protocol, Sequence

from ..errors import AutotuneError
from ..target import host_cores
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


def _integer(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass
class RunnerOptions:
    """How a runner times a kernel: threads, a deadline per candidate, repeats, and warm or cache-flushed calls."""

    threads: int = 0            # kernel threads; 0 = every core
    timeout: float = 10.0       # per candidate: load + check + timing
    repeat: int = 3
    min_repeat_ms: float = 100.0
    cache_flush: bool = False

    def __post_init__(self) -> None:
        """Values no runner can use are an AutotuneError naming the valid range (a timeout of 0 or less would
        fail every candidate; 0 repeats would record every candidate as failed, never measured again)."""
        if not _integer(self.threads) or self.threads < 0:
            raise AutotuneError(f"threads must be 0 (every core) or a count of kernel threads >= 1, not "
                                f"{self.threads!r}")
        if not _integer(self.repeat) or self.repeat < 1:
            raise AutotuneError(f"repeat must be an integer >= 1 (timed samples per candidate), not {self.repeat!r}")
        for name, low, strict in (("timeout", 0.0, True), ("min_repeat_ms", 0.0, False)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
                    or value < low or (strict and value == low):
                raise AutotuneError(f"{name} must be a finite number {'>' if strict else '>='} {low:g}, not "
                                    f"{value!r}")

    def check_local(self) -> None:
        """Raise unless this machine can run `threads` kernel threads (a remote runner's servers decide their
        own count, and the runner checks it when they answer)."""
        if self.threads > host_cores():
            raise AutotuneError(f"threads {self.threads} is more than the {host_cores()} core(s) this process may "
                                f"use: give 0 (every core) or 1 to {host_cores()}")


def record_versions(runner: Runner, task: Task) -> dict[str, str]:
    """What the records of `task` measured by `runner` name: autotune, TVM, LLVM and xgboost versions, and the
    device's facts (for CUDA: the GPU, its driver, CUDA)."""
    return {**versions(), **runner.device(task.target_kind)}


def runner_timing(runner: Runner | None, task: Task, options: RunnerOptions | None = None) -> str:
    """How `runner` (None: a LocalRunner with `options`, to be created) times the task's kernels, as records say:
    "flushed" (CPU only: the operands after the first flushed from the cache before every call) or "warm"."""
    options = getattr(runner, "options", None) if runner is not None else options
    return "flushed" if options is not None and options.cache_flush and task.target_kind == "llvm" else "warm"
