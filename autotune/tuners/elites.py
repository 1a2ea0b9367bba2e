"""Transfer by example: the fastest configs of other tasks of the same template family, mapped onto a new task's
space (`ConfigSpace.nearest`), as the first configs a tuner measures.

Measured side by side with cold xgb (benchmarks/RESULTS.md, bench_search_s43): the first config by example ran at
0.87-0.97 of the best kernel any run found on the four search tasks (matmul from dense, dense from matmul, each
conv2d from the other), cold xgb's first at 0.05-0.60; 95% of the best in 1 / 4 / 27 trials against 25 / 33 / 67
on the two convolutions and dense, 47 against 53 on matmul. Again with 5 seeds (bench_search_s45): 1 against
> 96 (matmul), 23 against 52 (conv2d 64x56x56), 4 against 81 (dense); on conv2d 256x14x14 neither reached it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..records import Record
from ..space import ConfigSpace
from ..task import Task


def donor_configs(task: Task, space: ConfigSpace, records: Iterable[Record]) -> list[list[int]]:
    """For each config of the other tasks whose template has this space's knobs, fastest first per task and the
    tasks taken in turn (those of `task`'s operator first), the configs of `space` nearest to it (a choice value
    this space lacks leaves several). A config with a failed measurement is left out."""
    names = {knob.name for knob in space.knobs}
    best: dict[str, dict[int, float]] = {}  # task key -> config index -> least seconds
    knobs: dict[tuple[str, int], dict] = {}
    ops: dict[str, str] = {}
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
        knobs[key], ops[r.task.key] = r.input.config.knobs, r.task.op
    order = sorted(best, key=lambda k: ops[k] != task.op)
    ranked = [[i for i in sorted(best[k], key=best[k].get) if (k, i) not in failed] for k in order]
    out: list[list[int]] = []
    for rank in range(max(map(len, ranked), default=0)):
        out += [space.nearest(knobs[(k, configs[rank])]) for k, configs in zip(order, ranked) if rank < len(configs)]
    return out
