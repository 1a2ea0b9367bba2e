"""Export the best schedule of each task in a log as a MetaSchedule JSONDatabase.

Each workload is the task's own IRModule (`prim_func(task)` as "main"), each record the trace
of the template's schedule for the best config. TVM users apply it with
`relax.transform.MetaScheduleApplyDatabase` to any function structurally equal to that
workload. Functions that TVM's LegalizeOps produces for the same operator are *not*
structurally equal to autotune's (different block structure and index expressions), so the
database only matches modules that contain autotune's own PrimFuncs (see tests/test_model.py).
Schedules whose function takes an operand in another layout (dense: W packed ahead) are left out:
applying one would change the function's signature, and a database cannot carry the relayout of
the weight. A schedule that packs a weight in a block of its own (conv2d) is exported with that
block, marked as MetaSchedule marks a layout rewrite of a constant (`search_spaces.base.PREPACK`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import AutotuneError
from ..records import load_records
from ..task import Task
from .build import best_by_task


@dataclass(frozen=True)
class Exported:
    task: Task
    config_index: int
    mean_s: float
    skipped: str = ""  # why the record was not written


def export_database(logs: Sequence[str | os.PathLike], work_dir: str | os.PathLike) -> list[Exported]:
    """Write the best valid record of every task in the logs into `work_dir`; returns what was written
    (and, with `skipped` set, what was not)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    import search_spaces

    from ..target import to_tvm_target

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = load_records(list(logs))
    best = best_by_task(records)
    if not best:
        raise AutotuneError(f"no valid record (of a current template version) in {', '.join(map(str, logs))}")
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=str(work_dir))
    out = []
    for rec in best.values():
        task = rec.task
        tmpl = search_spaces.resolve(rec.input.template)
        cfg = tmpl.define_space(task).get(rec.input.config.index)
        sch = tmpl.apply(task, cfg)
        workload_mod = tvm.IRModule({"main": search_spaces.prim_func(task)})
        if _shapes(sch.mod["main"]) != _shapes(workload_mod["main"]):
            out.append(Exported(task, cfg.index, rec.result.mean_s, "takes an operand relaid ahead (packed weight)"))
            continue
        workload = db.commit_workload(workload_mod)
        db.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, workload, run_secs=[rec.result.mean_s], target=to_tvm_target(task.target),
            args_info=ms.arg_info.ArgInfo.from_prim_func(workload_mod["main"])))
        out.append(Exported(task, rec.input.config.index, rec.result.mean_s))
    return out


def _shapes(func) -> list[tuple[int, ...]]:
    """The shapes of a PrimFunc's arguments."""
    from tvm.s_tir import meta_schedule as ms

    return [tuple(int(d) for d in arg.shape) for arg in ms.arg_info.ArgInfo.from_prim_func(func)]
