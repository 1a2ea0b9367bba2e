"""Which logs pre-train the cost model of a new task (transfer learning); which of their records it learns from
is `TuningDatabase.transfer`'s choice."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .database import TuningDatabase
from .records import Record
from .task import Task


def transfer_logs(log: str | Path, logs: Sequence[str] | None) -> list[Path]:
    """logs None (the default): every other `*.jsonl` beside `log` (so `logs/` accumulates knowledge); an empty
    list: none (transfer off); otherwise exactly the given logs."""
    if logs is None:
        return [p for p in sorted(Path(log).parent.glob("*.jsonl")) if p.resolve() != Path(log).resolve()]
    return [Path(p) for p in logs]


def transfer_records(task: Task, log: str | Path, logs: Sequence[str] | None) -> list[Record]:
    """The records of other tasks on the task's target kind in `transfer_logs(log, logs)` that its cost model
    learns from (`TuningDatabase.transfer`)."""
    paths = transfer_logs(log, logs)
    return TuningDatabase.open(paths).transfer(task) if paths else []


def transfer_summary(task: Task, records: Sequence[Record]) -> str:
    """One line for the user: how many records of how many tasks pre-train the model, how many of its operator."""
    if not records:
        return "transfer: none (no records of other tasks)"
    keys = {r.task.key for r in records}
    same = {r.task.key for r in records if r.task.op == task.op}
    return (f"transfer: {len(records)} records of {len(keys)} other task{'s' * (len(keys) != 1)}, "
            f"{len(same)} of them {task.op}")
