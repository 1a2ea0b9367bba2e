"""The local builder and runner: compile candidates in parallel isolated processes, then time them
one at a time in an isolated runner process, with timeouts and a correctness check."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

from ..files import remove_stale
from ..gpu import gpu_facts
from ..target import host_cores
from . import worker
from .interface import RunnerOptions
from .pool import CallResult, Worker, WorkerPool
from .types import BuildResult, ErrorKind, MeasureInput, MeasureResult, now


BUILD_DIR = re.compile(r"autotune-build-(?P<pid>\d+)-\w+")  # a builder's folder in the temporary directory


class LocalBuilder:
    """Builds in `workers` processes; a build over `timeout` seconds is COMPILE_TIMEOUT. A batch's libraries are
    deleted when the next batch is built (the runner has run them by then) and at close()."""

    def __init__(self, workers: int | None = None, timeout: float = 60.0):
        self.timeout = timeout
        self._pool = WorkerPool(workers or host_cores())
        # named by this process: a later builder removes the folders of runs that were killed (kill -9)
        remove_stale(Path(tempfile.gettempdir()), BUILD_DIR)
        self._dir = Path(tempfile.mkdtemp(prefix=f"autotune-build-{os.getpid()}-"))
        self._count = 0
        self._last: list[Path] = []

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        for path in self._last:
            path.unlink(missing_ok=True)
        self._last = [self._dir / f"cand{self._count + k}.so" for k in range(1, len(inputs) + 1)]
        self._count += len(inputs)
        args = [(inp.task, inp.config.index, inp.template, str(path)) for inp, path in zip(inputs, self._last)]
        return [_to_build_result(c) for c in self._pool.map(worker.build, args, self.timeout)]

    def close(self) -> None:
        self._pool.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def _to_build_result(call: CallResult) -> BuildResult:
    if call.status == "timeout":
        return BuildResult(None, ErrorKind.COMPILE_TIMEOUT, call.message, 0.0)
    if call.status != "ok":
        return BuildResult(None, ErrorKind.COMPILE_ERROR, call.message[:500], 0.0)
    kind, message, build_s = call.value
    if kind is None:
        return BuildResult(message, None, "", build_s)
    return BuildResult(None, ErrorKind(kind), message, build_s)


class LocalRunner:
    """Times kernels one at a time in one isolated process (nothing else runs while it times)."""

    def __init__(self, options: RunnerOptions | None = None):
        self.options = options or RunnerOptions()
        self.threads = self.options.threads or host_cores()
        self._worker = Worker({"TVM_NUM_THREADS": str(self.threads), "OMP_NUM_THREADS": "1"})

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        o = self.options
        results = []
        for inp, b in zip(inputs, builds):
            if b.error is not None:
                results.append(MeasureResult(None, b.error, b.message, b.build_s, now()))
                continue
            call = self._worker.call(worker.run, (b.artifact, inp.task, inp.template, inp.config.index,
                                                  o.repeat, o.min_repeat_ms, o.cache_flush), o.timeout)
            results.append(_to_measure_result(call, b.build_s))
        return results

    def device(self, target_kind: str) -> dict[str, str]:
        """This machine's GPU (model, driver, CUDA version) for CUDA kernels; nothing more for CPU ones (the
        target names the CPU)."""
        return gpu_facts() if target_kind == "cuda" else {}

    def close(self) -> None:
        self._worker.close()


def _to_measure_result(call: CallResult, build_s: float) -> MeasureResult:
    if call.status == "timeout":
        return MeasureResult(None, ErrorKind.RUN_TIMEOUT, call.message, build_s, now())
    if call.status != "ok":
        return MeasureResult(None, ErrorKind.RUNTIME_ERROR, call.message[:500], build_s, now())
    kind, message, costs = call.value
    if kind is None:
        return MeasureResult(tuple(costs), None, "", build_s, now())
    return MeasureResult(None, ErrorKind(kind), message, build_s, now())
