"""Which records pre-train the cost model of a new task (transfer learning)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

from .records import Record, load_records
from .task import Task

MAX_TRANSFER_RECORDS = 2000


def transfer_records(task: Task, log: Path, logs: Sequence[str] | None) -> list[Record]:
    """Records of *other* tasks on the same target kind (at most `MAX_TRANSFER_RECORDS`, `select_transfer`).

    logs None (the default): every other `*.jsonl` beside `log` (so `logs/` accumulates
    knowledge); an empty list disables transfer; otherwise exactly the given logs.
    """
    return select_transfer(task, folder_records(log, logs, task.target_kind))


def select_transfer(task: Task, records: Sequence[Record], limit: int = MAX_TRANSFER_RECORDS) -> list[Record]:
    """Up to `limit` records of tasks other than `task`: every one of the same operator first, then the most
    recent of the others.

    Other shapes of the same operator teach a model the most about a new shape (a held-out shape was ranked
    better from other shapes of its operator alone than from other operators; see docs/experiments.md), so a
    folder full of other operators' logs must not crowd them out.
    """
    others = [r for r in records if r.task.key != task.key]
    keep = _latest([r for r in others if r.task.op == task.op], limit)
    return keep + _latest([r for r in others if r.task.op != task.op], limit - len(keep))


def _latest(records: list[Record], n: int) -> list[Record]:
    """The n most recent records, oldest first."""
    return sorted(records, key=lambda r: r.result.timestamp)[-n:] if n > 0 else []


def transfer_summary(task: Task, records: Sequence[Record]) -> str:
    """One line for the user: how many records of how many tasks pre-train the model, how many of its operator."""
    if not records:
        return "transfer: none (no records of other tasks)"
    keys = {r.task.key for r in records}
    same = {r.task.key for r in records if r.task.op == task.op}
    return (f"transfer: {len(records)} records of {len(keys)} other task{'s' * (len(keys) != 1)}, "
            f"{len(same)} of them {task.op}")


def folder_records(log: Path, logs: Sequence[str] | None, target_kind: str) -> list[Record]:
    """The records on `target_kind` of `logs`, or (None) of every other `*.jsonl` beside `log`."""
    if logs is None:
        paths = [p for p in sorted(Path(log).parent.glob("*.jsonl")) if p.resolve() != Path(log).resolve()]
    else:
        paths = [Path(p) for p in logs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = load_records(paths) if paths else []
    return [r for r in records if r.task.target_kind == target_kind]
