"""Builders and runners that measure only what is new, or nothing: a search without a machine.

`ReplayRunner` serves each config's recorded result (from a log's records or a dict) and hands the configs it has
no result for to a fallback runner: a real one (each config is then measured once, later requests replay that
first result), or `SimulatedRunner`, whose cost is a function of the config (kernel_tuner's simulation runner).
`ReplayBuilder` builds only the configs the fallback will run. Tests run the whole tuning loop on these in
milliseconds; benchmarks compare search methods on one measurement per config.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, MutableMapping, Sequence
from typing import Protocol

from ..space import Config
from .interface import Builder, Runner, RunnerOptions
from .types import BuildResult, ErrorKind, MeasureInput, MeasureResult, now

REPLAYED = BuildResult("replayed", None, "", 0.0)  # what ReplayBuilder answers for a config it does not build
Key = Callable[[MeasureInput], Hashable]  # what identifies one config's result among those recorded


def result_key(inp: MeasureInput) -> tuple[str, str, int]:
    """Results of many tasks: task key, template reference, config index."""
    return inp.task.key, inp.template, inp.config.index


def config_index(inp: MeasureInput) -> int:
    """Results of one task and one template: the config index."""
    return inp.config.index


class Measured(Protocol):
    """What `first_results` reads of a record (`records.Record` is one)."""

    @property
    def input(self) -> MeasureInput: ...
    @property
    def result(self) -> MeasureResult: ...


def first_results(records: Iterable[Measured], key: Key = result_key) -> dict[Hashable, MeasureResult]:
    """Each config's earliest result among `records` (by timestamp), under key(input): what a replay serves.

    Give records of one template version: a config index means another config at another version.
    """
    first: dict[Hashable, MeasureResult] = {}
    for record in records:
        k = key(record.input)
        if k not in first or record.result.timestamp < first[k].timestamp:
            first[k] = record.result
    return first


class SimulatedBuilder:
    """Builds nothing: every candidate 'succeeds' (the runner decides its fate). `built`: config indices, in order."""

    def __init__(self) -> None:
        self.built: list[int] = []

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        self.built += [inp.config.index for inp in inputs]
        return [BuildResult(f"simulated-{inp.config.index}", None, "", 0.0) for inp in inputs]

    def close(self) -> None:
        pass


class SimulatedRunner:
    """Times nothing: config c costs cost(c) seconds, or fails with RUNTIME_ERROR where cost(c) is None.

    `measured`: the config indices it was asked to run, in order. CUDA records name the GPU "simulated".
    """

    def __init__(self, cost: Callable[[Config], float | None], threads: int = 2,
                 options: RunnerOptions | None = None):
        self.cost, self.threads, self.options = cost, threads, options
        self.measured: list[int] = []

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        out = []
        for inp, build in zip(inputs, builds):
            self.measured.append(inp.config.index)
            if build.error is not None:
                out.append(MeasureResult(None, build.error, build.message, build.build_s, now()))
                continue
            cost = self.cost(inp.config)
            out.append(MeasureResult((cost,), None, "", 0.0, now()) if cost is not None
                       else MeasureResult(None, ErrorKind.RUNTIME_ERROR, "simulated failure", 0.0, now()))
        return out

    def device(self, target_kind: str) -> dict[str, str]:
        return {"gpu": "simulated"} if target_kind == "cuda" else {}

    def close(self) -> None:
        pass


class ReplayBuilder:
    """Builds, with `builder`, only the configs `known` has no result for; the others get REPLAYED.

    Share `known` (and `key`) with the ReplayRunner the builds go to. `builder` (default: a SimulatedBuilder)
    belongs to the caller: close() leaves it open.
    """

    def __init__(self, known: MutableMapping[Hashable, MeasureResult], builder: Builder | None = None,
                 key: Key = result_key):
        self.known, self.key = known, key
        self.builder = builder if builder is not None else SimulatedBuilder()

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        todo = [k for k, inp in enumerate(inputs) if self.key(inp) not in self.known]
        built = dict(zip(todo, self.builder.build([inputs[k] for k in todo]))) if todo else {}
        return [built.get(k, REPLAYED) for k in range(len(inputs))]

    def close(self) -> None:
        pass


class ReplayRunner:
    """Serves the results in `known`; runs the other configs on `fallback` and, with `remember`, adds their results
    to `known` (a config is measured once, its later requests replay that result).

    Without a fallback, a config with no recorded result fails with RUNTIME_ERROR. `measured`: the keys of the
    configs the fallback ran, in order; `replayed`: how many results were served from `known`. The fallback
    belongs to the caller: close() leaves it open. Its threads, options and device are the ones records name.
    """

    def __init__(self, known: MutableMapping[Hashable, MeasureResult], fallback: Runner | None = None,
                 key: Key = result_key, remember: bool = True, threads: int = 1):
        self.known, self.fallback, self.key, self.remember = known, fallback, key, remember
        self.threads = fallback.threads if fallback is not None else threads
        self.options: RunnerOptions | None = getattr(fallback, "options", None)
        self.measured: list[Hashable] = []
        self.replayed = 0

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        keys = [self.key(inp) for inp in inputs]
        todo = [k for k, key in enumerate(keys) if key not in self.known]
        fresh = dict(zip(todo, self._measure([inputs[k] for k in todo], [builds[k] for k in todo])))
        self.measured += [keys[k] for k in todo]
        self.replayed += len(inputs) - len(todo)
        if self.remember and self.fallback is not None:
            self.known.update((keys[k], res) for k, res in fresh.items())
        return [fresh[k] if k in fresh else self.known[key] for k, key in enumerate(keys)]

    def _measure(self, inputs: list[MeasureInput], builds: list[BuildResult]) -> list[MeasureResult]:
        if not inputs:
            return []
        if self.fallback is not None:
            return self.fallback.run(inputs, builds)
        return [MeasureResult(None, ErrorKind.RUNTIME_ERROR, f"no recorded result of config {inp.config.index} "
                              "(a replay without a fallback runner)", 0.0, now()) for inp in inputs]

    def device(self, target_kind: str) -> dict[str, str]:
        return self.fallback.device(target_kind) if self.fallback is not None else {}

    def close(self) -> None:
        pass
