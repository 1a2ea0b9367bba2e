"""Which records pre-train the cost model of a new task (transfer learning)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

from .records import Record, load_records
from .task import Task

MAX_TRANSFER_RECORDS = 2000


def transfer_records(task: Task, log: Path, logs: Sequence[str] | None) -> list[Record]:
    """Records of *other* tasks on the same target kind.

    logs None (the default): every other `*.jsonl` beside `log` (so `logs/` accumulates
    knowledge); an empty list disables transfer; otherwise exactly the given logs.
    """
    out = [r for r in folder_records(log, logs, task.target_kind) if r.task.key != task.key]
    return out[-MAX_TRANSFER_RECORDS:]


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
