"""Which logs pre-train the cost model of a new task (transfer learning); which of their records it learns from
is `TuningDatabase.transfer`'s choice. Where they hold no record of the task's operator, the shipped knowledge
(`autotune.shipped`) stands in: its records of the operator, whose configs are the first the tuner measures,
mapped by example, and its cost model, which the tuner's fits continue from (`start_options`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .database import TuningDatabase
from .records import Record
from .shipped import Knowledge, shipped_enabled
from .task import Task


def transfer_logs(log: str | Path, logs: Sequence[str] | None) -> list[Path]:
    """logs None (the default): every other `*.jsonl` beside `log` (so `logs/` accumulates knowledge); an empty
    list: none (transfer off); otherwise exactly the given logs."""
    if logs is None:
        return [p for p in sorted(Path(log).parent.glob("*.jsonl")) if p.resolve() != Path(log).resolve()]
    return [Path(p) for p in logs]


def transfer_records(task: Task, log: str | Path, logs: Sequence[str] | None,
                     shipped: bool | None = None) -> list[Record]:
    """The records of other tasks on the task's target kind in `transfer_logs(log, logs)` that its cost model
    learns from (`TuningDatabase.transfer`); where none is of its operator (and transfer is on: `logs` is not []),
    the shipped knowledge's of its operator and dtype (`shipped_records`; `shipped`: see `shipped_enabled`)."""
    paths = transfer_logs(log, logs)
    records = TuningDatabase.open(paths).transfer(task) if paths else []
    if logs != [] and shipped_enabled(shipped) and not any(r.task.op == task.op for r in records):
        records += shipped_records(task)
    return records


def shipped_records(task: Task) -> list[Record]:
    """The shipped best records of the task's operator and dtype that its target may use, but its own."""
    return [r for _, r in Knowledge.load(task.target).best()
            if (r.task.op, r.task.dtype) == (task.op, task.dtype) and r.task.key != task.key]


def shipped_classes(task: Task, records: Sequence[Record]) -> list[str]:
    """The classes of the shipped knowledge among `records` (the transfer records of `task`), sorted."""
    if not records:
        return []
    shipped = {(r.task.key, r.result.timestamp): c.name for c, r in Knowledge.load(task.target).best()}
    return sorted({shipped[key] for r in records if (key := (r.task.key, r.result.timestamp)) in shipped})


def start_options(task: Task, records: Sequence[Record], tuner: str, options: Any) -> Any:
    """The options the tuner `tuner` of `task` starts with from the transfer `records`: where they hold the shipped
    knowledge's (`transfer_records` adds it where the logs hold none of the task's operator) and the options (None:
    the tuner's defaults) are `XGBOptions` on loop features with no saved model of their own, the shipped cost
    model of the task's class is the one its fits continue from; else `options` as given."""
    from .tuners import options_type
    from .tuners.options import XGBOptions

    if options is None and options_type(tuner) is XGBOptions:
        options = XGBOptions()
    if not isinstance(options, XGBOptions) or options.cost_model is not None:
        return options
    if options.features != "loop" or options.model_kind != "xgb" or not shipped_classes(task, records):
        return options
    model = Knowledge.load(task.target).model()
    return dataclasses.replace(options, cost_model=str(model[1])) if model is not None else options


def transfer_summary(task: Task, records: Sequence[Record], options: Any = None) -> str:
    """One line for the user: how many records of how many tasks pre-train the model, how many of its operator
    (where they are the shipped knowledge's, which class's, and whether its cost model is the start: `options`,
    those `start_options` gave)."""
    if not records:
        return "transfer: none (no records of other tasks)"
    classes = shipped_classes(task, records)
    if classes:
        model = getattr(options, "cost_model", None)
        shipped_model = model is not None and Path(model).parent == Knowledge.load(task.target).folder
        return (f"transfer: shipped {', '.join(classes)} knowledge, {len(records)} records of "
                f"{len({r.task.key for r in records})} tasks" + (", and its cost model" if shipped_model else ""))
    keys = {r.task.key for r in records}
    same = {r.task.key for r in records if r.task.op == task.op}
    return (f"transfer: {len(records)} records of {len(keys)} other task{'s' * (len(keys) != 1)}, "
            f"{len(same)} of them {task.op}")
