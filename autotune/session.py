"""One task's tuning session: propose -> build -> run -> record -> update, the one loop every tuning path runs.

`autotune tune`, `tune-model` (the task scheduler holds one live session per task), dynamic-shape tuning and the
benchmarks' replayed searches all drive a `TuningSession`. What happens to each batch of new records is a list of
callbacks: committing them to the records database (and so to the log), teaching the tuner, progress, early
stopping. After the search, `retime` times the contenders again (`autotune.retime`).

A session resumes from its records database: the task's records made by the same template version and timed the
same way are its trials so far (the tuner learns from them before it proposes), the later timings of a config its
re-timings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .database import TuningDatabase
from .measure import Builder, LocalBuilder, LocalRunner, Runner, RunnerOptions, record_versions, runner_timing
from .measure.types import MeasureInput, MeasureResult
from .records import Record
from .retime import next_round
from .space import ConfigSpace
from .task import Task
from .tuners.base import Tuner


class Callback(Protocol):
    """Told of every batch of new records of a session (`retime`: they are re-timings, not trials)."""

    def __call__(self, session: TuningSession, records: list[Record], retime: bool) -> None: ...


class Measurer:
    """A builder and a runner shared by every session of a run, and the records of what they measure.

    Given ones are the caller's to close; missing ones are made on first use (a `LocalBuilder` with
    `build_timeout`, a `LocalRunner` with `runner_options`: worker processes start only when something is
    measured) and closed by `close`.
    """

    def __init__(self, builder: Builder | None = None, runner: Runner | None = None,
                 runner_options: RunnerOptions | None = None, build_timeout: float = 60.0):
        self._builder, self._runner = builder, runner
        self._own: list[Builder | Runner] = []
        self.runner_options, self.build_timeout = runner_options, build_timeout

    @property
    def builder(self) -> Builder:
        if self._builder is None:
            self._builder = LocalBuilder(timeout=self.build_timeout)
            self._own.append(self._builder)
        return self._builder

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            self._runner = LocalRunner(self.runner_options)
            self._own.append(self._runner)
        return self._runner

    def timing(self, task: Task) -> str:
        """How the runner times the task's kernels, as records say ("warm" or "flushed")."""
        return runner_timing(self._runner, task, self.runner_options)

    def measure(self, inputs: Sequence[MeasureInput], template_version: str, timing: str) -> list[Record]:
        return self.measure_groups([(inputs, template_version, timing)])[0]

    def measure_groups(self, groups: Sequence[tuple[Sequence[MeasureInput], str, str]]) -> list[list[Record]]:
        """The records of each group of (inputs, template version, timing), all groups built as one batch (the
        builder's workers compile them side by side) and run as one."""
        flat = [inp for inputs, _, _ in groups for inp in inputs]
        if not flat:
            return [[] for _ in groups]
        results = self.runner.run(flat, self.builder.build(flat))
        out, start = [], 0
        for inputs, template_version, timing in groups:
            out.append(self.records(inputs, results[start:start + len(inputs)], template_version, timing))
            start += len(inputs)
        return out

    def records(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult], template_version: str,
                timing: str) -> list[Record]:
        """The records of what the runner measured: each result with the runner's threads and what it names of
        the software and device (`record_versions`)."""
        stamp = record_versions(self.runner, inputs[0].task) if inputs else {}
        return [Record(inp, res, template_version, self.runner.threads, stamp, timing)
                for inp, res in zip(inputs, results)]

    def close(self) -> None:
        while self._own:
            self._own.pop().close()

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class TuningSession:
    """The search of one task with one template. `tuner` is made on first need (a finished session makes none)."""

    task: Task
    template_ref: str
    space: ConfigSpace
    template_version: str
    db: TuningDatabase
    measurer: Measurer
    make_tuner: Callable[[], Tuner]
    callbacks: list[Callback] = field(default_factory=list)
    trials: list[Record] = field(default_factory=list)  # first measurements of configs, resumed ones first
    retimes: list[Record] = field(default_factory=list)  # later timings of the contenders
    resumed: int = 0
    stopped: str = ""  # why the search ended before its budget, if it did
    _tuner: Tuner | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.timing = self.measurer.timing(self.task)
        self.trials, self.retimes = self.db.resumable(self.task, self.template_ref, self.template_version,
                                                      self.timing)
        self.resumed = len(self.trials)
        self.measured = {r.input.config.index for r in self.trials}

    @property
    def tuner(self) -> Tuner:
        if self._tuner is None:
            self._tuner = self.make_tuner()
            if self.trials:
                self._tuner.update([r.input for r in self.trials], [r.result for r in self.trials])
        return self._tuner

    def tuner_if_made(self) -> Tuner | None:
        return self._tuner

    # ---- measuring -------------------------------------------------------------------------

    def measure(self, indices: Sequence[int], retime: bool = False) -> list[Record]:
        """Measure configs (trials, or re-timings of measured ones) and hand the records to every callback."""
        return self._measure([MeasureInput(self.task, self.space.get(i), self.template_ref) for i in indices],
                             retime)

    def _measure(self, inputs: list[MeasureInput], retime: bool) -> list[Record]:
        return self._take(self.measurer.measure(inputs, self.template_version, self.timing), retime)

    def _take(self, records: list[Record], retime: bool) -> list[Record]:
        """Add measured records to the session's trials (or re-timings) and hand them to every callback."""
        if retime:
            self.retimes += records
        else:
            self.trials += records
            self.measured.update(r.input.config.index for r in records)
        for callback in self.callbacks:
            callback(self, records, retime)
        return records

    # ---- the search ------------------------------------------------------------------------

    def goal(self, trials: int) -> int:
        """Trials the search can reach: `trials`, or the size of the space if smaller."""
        return min(trials, len(self.space))

    def search(self, trials: int, batch_size: int = 8) -> list[Record]:
        """Measure proposed configs in batches until `trials` configs are measured (resumed ones count), the space
        is exhausted or a callback stops the session; returns the new trials."""
        start = len(self.trials)
        while not self.stopped and len(self.trials) < self.goal(trials):
            want = min(batch_size, trials - len(self.trials))
            batch = [i for i in self.tuner.next_batch(want) if i not in self.measured][:want]
            if not batch:
                self.stopped = "search space exhausted"
                break
            self.measure(batch)
        return self.trials[start:]

    def retime(self, rounds: int, seed: int = 0) -> list[Record]:
        """Time the contenders `rounds` more times each (`autotune.retime`); returns the new re-timings."""
        start = len(self.retimes)
        retime_together([self], rounds, seed)
        return self.retimes[start:]

    def next_retimes(self, rounds: int, seed: int = 0) -> list[MeasureInput]:
        """The contenders of the next re-timing round (`retime.next_round`); [] once each has `rounds`."""
        return next_round(self.trials, self.retimes, rounds, seed, self.db.policy)

    # ---- what it found ---------------------------------------------------------------------

    @property
    def best(self) -> Record | None:
        """The best config of this session's records (`TuningDatabase.best`)."""
        return TuningDatabase(self.trials + self.retimes, policy=self.db.policy).best(self.task)


def retime_together(sessions: Sequence[TuningSession], rounds: int, seed: int = 0) -> None:
    """`TuningSession.retime` of sessions sharing one measurer, each round of all of them measured as one batch:
    a model's tasks have a few contenders each, one batch apiece would leave the builder's workers idle."""
    while due := [(s, inputs) for s in sessions if (inputs := s.next_retimes(rounds, seed))]:
        groups = due[0][0].measurer.measure_groups([(inputs, s.template_version, s.timing) for s, inputs in due])
        for (session, _), records in zip(due, groups):
            session._take(records, retime=True)


# ---- callbacks ---------------------------------------------------------------------------------

def commit(session: TuningSession, records: list[Record], retime: bool) -> None:
    """Append the records to the session's records database, so to its log."""
    session.db.commit(records)


def update_tuner(session: TuningSession, records: list[Record], retime: bool) -> None:
    """Teach the tuner the new trials (a tuner not made yet learns them when it is made)."""
    tuner = session.tuner_if_made()
    if tuner is not None and not retime:
        tuner.update([r.input for r in records], [r.result for r in records])


def progress(report: Callable[[TuningSession], None]) -> Callback:
    """Call `report(session)` after each batch of trials."""
    def callback(session: TuningSession, records: list[Record], retime: bool) -> None:
        if not retime:
            report(session)
    return callback


def early_stopping(patience: int) -> Callback:
    """Stop the search once `patience` trials in a row did not beat the best first measurement."""
    def callback(session: TuningSession, records: list[Record], retime: bool) -> None:
        if not retime and len(session.trials) - best_trial(session.trials) >= patience:
            session.stopped = f"no improvement in {patience} trials"
    return callback


def best_trial(records: list[Record]) -> int:
    """1-based trial number at which the best first measurement was made (0 if none is valid)."""
    best, at = math.inf, 0
    for i, r in enumerate(records, 1):
        if r.result.ok and r.result.mean_s < best:
            best, at = r.result.mean_s, i
    return at


STANDARD = (commit, update_tuner)  # what every session does with its records
