"""Transfer by example: the fastest configs of other tasks of the same template family, mapped onto a new task's
space (`ConfigSpace.nearest`), as the first configs a tuner measures.

A related task's fastest configs, mapped over, are usually close to the new task's best already, so
in side-by-side runs against a cold xgb tuner the first configs were far faster and the search reached a good
config in fewer trials (see docs/experiments.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..records import Record
from ..space import ConfigSpace
from ..task import Task, shape_distance


def donor_configs(task: Task, space: ConfigSpace, records: Iterable[Record]) -> list[list[int]]:
    """For each config of the other tasks whose template has this space's knobs, fastest first per task and the
    tasks taken in turn (those of `task`'s operator and dtype first, the nearest in shape first: `shape_distance`),
    the configs of `space` nearest to it (a choice value this space lacks leaves several). A config with a failed
    measurement is left out."""
    names = {knob.name for knob in space.knobs}
    best: dict[str, dict[int, float]] = {}  # task key -> config index -> least seconds
    knobs: dict[tuple[str, int], dict] = {}
    tasks: dict[str, Task] = {}
    failed: set[tuple[str, int]] = set()
    for r in records:
        if r.task.key == task.key or set(r.input.config.knobs) != names:
            continue
        key = (r.task.key, r.input.config.index)
        if not r.result.ok:
            failed.add(key)
            continue
        table = best.setdefault(r.task.key, {})
        table[key[1]] = min(table.get(key[1], float("inf")), r.result.mean_s)
        knobs[key], tasks[r.task.key] = r.input.config.knobs, r.task
    kind = (task.op, task.dtype)
    order = sorted(best, key=lambda k: ((tasks[k].op, tasks[k].dtype) != kind,
                                        shape_distance(tasks[k], task) if tasks[k].op == task.op else 0.0))
    ranked = [[i for i in sorted(best[k], key=best[k].get) if (k, i) not in failed] for k in order]
    out: list[list[int]] = []
    for rank in range(max(map(len, ranked), default=0)):
        out += [space.nearest(knobs[(k, configs[rank])]) for k, configs in zip(order, ranked) if rank < len(configs)]
    return out
