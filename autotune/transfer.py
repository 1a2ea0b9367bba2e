"""Which records pre-train the cost model of a new task (transfer learning)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence

from .records import Record, load_records
from .task import Task

MAX_TRANSFER_RECORDS = 2000


def transfer_records(task: Task, log: Path, logs: Sequence[str] | None) -> list[Record]:
    """Records of *other* tasks on the same target kind.

    logs None (the default): every other `*.jsonl` beside `log` (so `logs/` accumulates
    knowledge); an empty list disables transfer; otherwise exactly the given logs.
    """
    if logs is None:
        paths = [p for p in sorted(Path(log).parent.glob("*.jsonl")) if p.resolve() != Path(log).resolve()]
    else:
        paths = [Path(p) for p in logs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = load_records(paths) if paths else []
    out = [r for r in records if r.task.key != task.key and r.task.target_kind == task.target_kind]
    return out[-MAX_TRANSFER_RECORDS:]
