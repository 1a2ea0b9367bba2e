"""The tuning loop: one loop for every tuner, resumable from its log."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .errors import AutotuneError
from .measure import Builder, LocalBuilder, LocalRunner, Runner, RunnerOptions, record_versions, runner_timing
from .measure_types import MeasureInput
from .records import TIMINGS, LogReadStats, LogWriter, Record, best_record, iter_records, split_retimes, timings
from .retime import RETIMES, next_round
from .task import Task
from .tuners import get_tuner_class


@dataclass
class TuneResult:
    task: Task
    log: Path
    records: list[Record] = field(default_factory=list)  # this task's trials, resumed ones first
    resumed: int = 0
    stopped: str = ""  # why the loop ended early, if it did
    retimes: list[Record] = field(default_factory=list)  # later timings of the contenders (autotune.retime)

    @property
    def best(self) -> Record | None:
        """The fastest config, scored by the median of its timings."""
        return best_record(self.records + self.retimes)

    def timings(self, record: Record) -> int:
        """How many valid timings the config of `record` has."""
        return timings(self.records + self.retimes, record)

    @property
    def errors(self) -> int:
        return sum(not r.result.ok for r in self.records)


def default_log_path(task: Task) -> Path:
    return Path("logs") / f"{task.key}.jsonl"


def resumable_records(log: Path, task: Task, template_ref: str, template_version: str,
                      timing: str | None = None) -> list[Record]:
    """Records of this task made by this exact template (an edited template changes what an index means) and,
    when `timing` is given, timed that way (a warning counts the others: warm and flushed times do not compare)."""
    same = [r for r in iter_records(log, LogReadStats())
            if r.task.key == task.key and r.input.template == template_ref and r.template_version == template_version]
    kept = [r for r in same if timing is None or r.timing == timing]
    if len(kept) < len(same):
        other = next(words for name, words in TIMINGS.items() if name != timing)
        warnings.warn(f"{log}: {len(same) - len(kept)} records of {task} were timed {other}; this run times "
                      f"{TIMINGS[timing]} and leaves them out (they stay in the log)", stacklevel=2)
    return kept


def tune(task: Task, trials: int = 200, tuner: str = "random", log: str | Path | None = None, seed: int = 0,
         early_stopping: int | None = None, batch_size: int = 8, template: str | None = None,
         tuner_options: dict[str, Any] | None = None, runner_options: RunnerOptions | None = None,
         builder: Builder | None = None, runner: Runner | None = None, build_timeout: float = 60.0,
         progress: Callable[[TuneResult], None] | None = None, retime: int = RETIMES) -> TuneResult:
    """Tune `task` until `trials` configs have been measured (counting those already in `log`), then time
    the contenders for the best `retime` more times each (see `autotune.retime`; 0: never)."""
    import search_spaces

    template_ref = template or search_spaces.default_template_ref(task.op, task.target_kind)
    tmpl = search_spaces.resolve(template_ref)
    if tmpl.op != task.op or tmpl.target_kind != task.target_kind:
        raise AutotuneError(f"template {template_ref} is for {tmpl.op}/{tmpl.target_kind}, not {task.op}/"
                            f"{task.target_kind}")
    if runner is None:
        ensure_measurable(task)
    space = tmpl.define_space(task)
    log_path = Path(log) if log else default_log_path(task)
    result = TuneResult(task, log_path)
    timing = runner_timing(runner, task, runner_options)
    result.records, result.retimes = split_retimes(resumable_records(log_path, task, template_ref, tmpl.version,
                                                                     timing))
    result.resumed = len(result.records)
    searching = len(result.records) < min(trials, len(space))
    if not searching and not next_round(result.records, result.retimes, retime):
        return result  # finished before: no tuner (its model can cost seconds), no worker processes
    search = get_tuner_class(tuner)(task, space, template_ref, seed=seed, **(tuner_options or {})) \
        if searching else None
    if search is not None and result.records:
        search.update([r.input for r in result.records], [r.result for r in result.records])
    measured = {r.input.config.index for r in result.records}
    own_builder, own_runner = builder is None, runner is None
    builder = builder or LocalBuilder(timeout=build_timeout)
    runner = runner or LocalRunner(runner_options)

    def measure(inputs: list[MeasureInput], writer: LogWriter) -> list[Record]:
        results = runner.run(inputs, builder.build(inputs))
        records = [Record(inp, res, tmpl.version, runner.threads, record_versions(runner, task), timing)
                   for inp, res in zip(inputs, results)]
        for rec in records:
            writer.write(rec)
        return records

    best_at = _best_trial(result.records)
    try:
        with LogWriter(log_path) as writer:
            while search is not None and len(result.records) < min(trials, len(space)):
                want = min(batch_size, trials - len(result.records))
                batch = [i for i in search.next_batch(want) if i not in measured][:want]
                if not batch:
                    result.stopped = "search space exhausted"
                    break
                new = measure([MeasureInput(task, space.get(i), template_ref) for i in batch], writer)
                result.records += new
                measured.update(batch)
                search.update([r.input for r in new], [r.result for r in new])
                best_at = _best_trial(result.records)
                if progress:
                    progress(result)
                if early_stopping and len(result.records) - best_at >= early_stopping:
                    result.stopped = f"no improvement in {early_stopping} trials"
                    break
            while inputs := next_round(result.records, result.retimes, retime, seed):
                result.retimes += measure(inputs, writer)
    finally:
        if own_builder:
            builder.close()
        if own_runner:
            runner.close()
    return result


def ensure_measurable(task: Task) -> None:
    """Raise, with what to do instead, when this machine cannot measure the task's target."""
    if task.target_kind == "cuda" and not cuda_device_present():
        raise AutotuneError("no CUDA device is available on this machine for measurement: run on a machine with a "
                            "GPU, measure through an RPC server of a GPU machine (--rpc-key/--rpc-tracker), or pass "
                            "--build-only to build and validate candidates without measuring")


def cuda_device_present() -> bool:
    import tvm

    try:
        return bool(tvm.cuda(0).exist)
    except Exception:  # a TVM build without the CUDA runtime
        return False


def _best_trial(records: list[Record]) -> int:
    """1-based trial number at which the current best was found (0 if none)."""
    best, at = math.inf, 0
    for i, r in enumerate(records, 1):
        if r.result.ok and r.result.mean_s < best:
            best, at = r.result.mean_s, i
    return at
