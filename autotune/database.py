"""The records database: tuning logs read once, and every question about their records answered in one place.

Which configs count (the template-version filter, one timing kind per task), how a config is scored (the
median of its timings among the contenders, `records.best_record`), which records are the best, which records
a new task learns from (transfer) and which a resumed run continues from: each is decided here, so `best`,
`show`, `plot`, `build`, the torch.compile backend, `export-db`, dynamic-shape loading, the cost model's data,
resume and transfer all agree. New records are committed to the log (appended whole and flushed, see
`records.LogWriter`) and answered at once.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

from .errors import AutotuneError
from .records import (RETIME, TIMINGS, LogReadStats, LogWriter, Record, RetimePolicy, best_record, config_key,
                      iter_records, median_record, split_retimes)
from .task import Task
from .templates import resolve_trusted

MAX_TRANSFER_RECORDS = 2000  # records of other tasks a new task's cost model learns from, at most

Logs = str | os.PathLike | Sequence[str | os.PathLike]


class TuningDatabase:
    """The records of some logs (and of `commit`), indexed by task.

    `log`: where `commit` appends (locked while the database is open, left out if nothing was committed to a new
    one); the records already in it are read too.
    A template that no longer imports, or a record made by a version of its template whose configs are not the
    current one's (`Template.reads_records_of`), is *stale*: kept (`records(..., current=False)`), never scored.
    """

    def __init__(self, records: Iterable[Record] = (), log: str | os.PathLike | None = None,
                 policy: RetimePolicy = RETIME, stats: LogReadStats | None = None):
        self.policy = policy
        self.stats = stats if stats is not None else LogReadStats()
        self.log = Path(log) if log is not None else None
        self._all: list[Record] = []  # in the order read and committed
        self._by_task: dict[str, list[Record]] = {}
        self._reads: dict[tuple[str, str], bool] = {}  # (template ref, version) -> its records name current configs
        # the log is checked and locked (`records.LogWriter`) before any work: a second run on it is an error
        self._writer: LogWriter | None = LogWriter(self.log) if self.log is not None else None
        self._add(records)
        if self.log is not None:
            self._add(iter_records(self.log, self.stats))

    @classmethod
    def open(cls, logs: Logs, log: str | os.PathLike | None = None, policy: RetimePolicy = RETIME,
             quiet: bool = True) -> TuningDatabase:
        """The records of `logs` (files; a missing one has none, a directory is an error); `quiet`: corrupt lines
        are skipped silently (counted in `stats.skipped`) instead of with a warning per log."""
        paths = [logs] if isinstance(logs, (str, os.PathLike)) else list(logs)
        stats = LogReadStats()
        records: list[Record] = []
        for p in paths:
            if log is not None and Path(p).resolve() == Path(log).resolve():
                continue  # read below, once
            with warnings.catch_warnings():
                if quiet:
                    warnings.simplefilter("ignore")
                records += iter_records(p, stats)
        return cls(records, log=log, policy=policy, stats=stats)

    @classmethod
    def of(cls, records: TuningDatabase | Iterable[Record]) -> TuningDatabase:
        """`records` as a database (itself if it is one)."""
        return records if isinstance(records, TuningDatabase) else cls(records)

    # ---- reading ---------------------------------------------------------------------------

    def _add(self, records: Iterable[Record]) -> None:
        for r in records:
            self._all.append(r)
            self._by_task.setdefault(r.task.key, []).append(r)

    def __len__(self) -> int:
        return len(self._all)

    def __iter__(self):
        return iter(self._all)

    def task_keys(self) -> list[str]:
        """Every task with records, in the order first seen."""
        return list(self._by_task)

    def records(self, task: Task | str | None = None, current: bool = False) -> list[Record]:
        """The records of `task` (all tasks: None), in log order; `current`: only those of current template
        versions."""
        recs = self._all if task is None else self._by_task.get(_key(task), [])
        return [r for r in recs if self.is_current(r)] if current else list(recs)

    def is_current(self, record: Record) -> bool:
        """Whether the record's config index names a config of its template as this code defines it."""
        key = (record.input.template, record.template_version)
        if key not in self._reads:
            self._reads[key] = _reads_records_of(*key)
        return self._reads[key]

    def stale(self, task: Task | str) -> int:
        """How many records of `task` were made by other versions of their template (or a missing one)."""
        return sum(not self.is_current(r) for r in self._by_task.get(_key(task), []))

    def scored(self, task: Task | str) -> list[Record]:
        """The records the best config of `task` is chosen from: current template versions, timed one way
        (warm and flushed timings do not compare: where a task has both, the way of its latest record)."""
        recs = self.records(task, current=True)
        if len({r.timing for r in recs}) > 1:
            latest = max(recs, key=lambda r: r.result.timestamp).timing
            recs = [r for r in recs if r.timing == latest]
        return recs

    def best(self, task: Task | str) -> Record | None:
        """The record of the best config of `task` (`records.best_record` over `scored`), None if none is valid."""
        return best_record(self.scored(task), self.policy)

    def best_by_task(self) -> dict[str, Record]:
        """Task key -> the record of its best config, for every task with one."""
        out = {}
        for key in self._by_task:
            if (best := self.best(key)) is not None:
                out[key] = best
        return out

    def timings(self, record: Record) -> list[Record]:
        """The valid timings of the config of `record` that scored it (its first measurement and re-timings)."""
        key = config_key(record)
        return [r for r in self.scored(record.task.key) if r.result.ok and config_key(r) == key]

    def top_k(self, task: Task | str, k: int) -> list[Record]:
        """Up to k distinct configs of `task`, best first: the best config (`best`), then the others by the median
        of their timings (a config with a failed measurement never counts)."""
        recs = self.scored(task)
        best = best_record(recs, self.policy)
        if best is None or k < 1:
            return []
        timings: dict[tuple[str, str, str, int], list[Record]] = {}
        failed = {config_key(r) for r in recs if not r.result.ok} | {config_key(best)}
        for r in recs:
            if config_key(r) not in failed:
                timings.setdefault(config_key(r), []).append(r)
        others = sorted(map(median_record, timings.values()), key=lambda r: r.result.mean_s)
        return [best] + others[:k - 1]

    def resumable(self, task: Task, template_ref: str, template_version: str,
                  timing: str | None = None) -> tuple[list[Record], list[Record]]:
        """(trials, re-timings) a run of `task` with this exact template version continues from; `timing`:
        only those timed that way (a warning counts the others, which stay in the log)."""
        same = [r for r in self._by_task.get(task.key, [])
                if r.input.template == template_ref and r.template_version == template_version]
        kept = [r for r in same if timing is None or r.timing == timing]
        if len(kept) < len(same):
            other = next(words for name, words in TIMINGS.items() if name != timing)
            warnings.warn(f"{self.log or 'the logs'}: {len(same) - len(kept)} records of {task} were timed {other};"
                          f" this run times {TIMINGS[timing]} and leaves them out (they stay in the log)",
                          stacklevel=2)
        return split_retimes(kept)

    def transfer(self, task: Task, limit: int = MAX_TRANSFER_RECORDS) -> list[Record]:
        """Up to `limit` records of other tasks on the task's target kind that its cost model learns from: every
        one of the same operator first, then the most recent of the others.

        Other shapes of the same operator teach a model the most about a new shape (a held-out shape was ranked
        better from other shapes of its operator alone than from other operators; see docs/experiments.md), so a
        folder full of other operators' logs must not crowd them out.
        """
        others = [r for key, recs in self._by_task.items() if key != task.key for r in recs
                  if r.task.target_kind == task.target_kind]
        keep = _latest([r for r in others if r.task.op == task.op], limit)
        return keep + _latest([r for r in others if r.task.op != task.op], limit - len(keep))

    # ---- writing ---------------------------------------------------------------------------

    def commit(self, records: Iterable[Record]) -> None:
        """Append records to the log (each line whole and flushed before the next) and to the database."""
        if self.log is None:
            raise AutotuneError("this records database has no log to commit to")
        if self._writer is None:
            self._writer = LogWriter(self.log)
        for r in records:
            self._writer.write(r)
            self._add([r])

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> TuningDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _key(task: Task | str) -> str:
    return task if isinstance(task, str) else task.key


def _latest(records: list[Record], n: int) -> list[Record]:
    """The n most recent records, oldest first."""
    return sorted(records, key=lambda r: r.result.timestamp)[-n:] if n > 0 else []


def _reads_records_of(template_ref: str, version: str) -> bool:
    """Whether the template `template_ref` names reads records of `version` (False: it no longer imports, or it is
    not one a log may import, `templates.resolve_trusted`)."""
    try:
        return resolve_trusted(template_ref).reads_records_of(version)
    except AutotuneError:
        return False
