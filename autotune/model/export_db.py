"""Export the best schedule of each task in tuning logs as a MetaSchedule JSONDatabase that TVM uses.

A MetaSchedule database holds workloads (PrimFuncs) and tuning records, each a trace of schedule primitives that
schedules its workload; `relax.transform.MetaScheduleApplyDatabase` replaces each function of a module that is
structurally equal to a workload (attributes included) by that workload scheduled by its best record. Each task's
best schedule is written for several workloads (`Exported.workloads`):

- "autotune": the task's own PrimFunc (`autotune.templates.prim_func`), for modules that hold it;
- "legalized", "legalized+op_pattern", "legalized+layout_free": TVM's PrimFunc of the operator, as TVM's pipelines
  hand it to MetaScheduleApplyDatabase (`legalized.FORMS`): a Relax model compiled by TVM picks the schedule up
  (e.g. `tvm.s_tir.meta_schedule.relax_integration.compile_relax`, or `relax.pipeline.zero_pipeline` inside
  the database's context).

A template's trace schedules the function the template starts from, which is not always the workload: TVM's
PrimFunc has other block names and, for some operators, an extra copy block or loop (`legalized.to_task_func`
removes them), and the GEMM templates schedule a function of their own, with a padded accumulator and B packed or
padded (their `Template.from_task_func` makes it from the task's PrimFunc). So a record's trace is those
steps, then the template's trace, which finds the task's blocks under the workload's names and the blocks those
steps made as the steps returned them. Before a record is written, the scheduled workload is checked against the
template's schedule: the same loop nests (extents, kinds, annotations) around the same blocks. What differs from
the template's schedule:

- GEMM configs whose register tiles pad M: the padded rows read zeros through a bounds check, where the template's
  function reads A's last row again;
- dense: its kernel takes W packed ahead. The trace packs W in a block of the function, marked PREPACK
  (`autotune.templates.PREPACK`, MetaSchedule's layout-rewrite annotation) as the conv2d template's own packed
  weight is: TVM's weight-prepack pipeline ("legalized+layout_free") runs it once, ahead of the calls; other
  pipelines run it in every call. Where N is padded the packed W holds zeros, a copy TVM's layout rewrite cannot
  move out of the kernel, so W is packed in every call (parallel, vectorised: as the template's "root" packing).

A function into which TVM fused other operators (a bias, an activation: "fused_conv2d_add_relu") is structurally
equal to no workload here. Opened as `JSONDatabase(work_dir=..., module_equality="anchor-block")`, the database
matches it by its anchor block (the conv2d's or matmul's), and TVM replays the trace on it with the fused
elementwise operators computed where the result is written back (`meta_schedule.ScheduleUsingAnchorTrace`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..database import TuningDatabase
from ..errors import AutotuneError
from ..space import Config
from ..target import to_tvm_target
from ..task import Task
from ..templates import Template, prim_func, resolve, space_of
from . import legalized

OWN = "autotune"  # the workload that is the task's own PrimFunc


@dataclass(frozen=True)
class Exported:
    """A task's best record, and the workloads its schedule was written for."""

    task: Task
    config_index: int
    mean_s: float
    workloads: tuple[str, ...] = ()  # the workloads written: OWN, then forms of `legalized.FORMS`
    skipped: str = ""  # why a workload was not written ("<workload>: <why>; ...")


def export_database(logs: Sequence[str | os.PathLike], work_dir: str | os.PathLike) -> list[Exported]:
    """Write the best valid record of every task in the logs into `work_dir`, once for each of its workloads that
    the schedule replays on; returns, per task, what was written and why the rest was not."""
    from tvm.s_tir import meta_schedule as ms

    best = TuningDatabase.open(list(logs)).best_by_task()
    if not best:
        raise AutotuneError(f"no valid record (of a current template version) in {', '.join(map(str, logs))}")
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=str(work_dir))
    out = []
    for rec in best.values():
        task = rec.task
        template = resolve(rec.input.template)
        try:
            schedules, skipped = workload_schedules(task, template,
                                                    space_of(template, task).get(rec.input.config.index))
        except Exception as err:  # noqa: BLE001 - the template rejects the config now: nothing to export
            schedules, skipped = {}, {"all": f"the template rejects the config ({_reason(err)})"}
        for workload_mod, sch in schedules.values():
            db.commit_tuning_record(ms.database.TuningRecord(
                sch.trace, db.commit_workload(workload_mod), run_secs=[rec.result.mean_s],
                target=to_tvm_target(task.target),
                args_info=ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
        out.append(Exported(task, rec.input.config.index, rec.result.mean_s, tuple(schedules),
                            "; ".join(f"{form}: {why}" for form, why in skipped.items())))
    return out


def workload_schedules(task: Task, template: Template, config: Config) -> tuple[dict[str, Any], dict[str, str]]:
    """The template's schedule of `config` on each workload of the task: workload -> (its IRModule, a traced
    Schedule of it), for those it replays on with the template's loops; and workload -> why not, for the rest."""
    import tvm

    normalize = tvm.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")
    reference = template.apply(task, config)
    want = loop_nests(reference.mod["main"])
    funcs = {OWN: normalize(prim_func(task))["main"]}
    skipped: dict[str, str] = {}
    try:
        funcs |= legalized.tvm_funcs(task)
    except Exception as err:  # noqa: BLE001 - an operator TVM has no Relax counterpart of: its own workload only
        skipped["legalized"] = _reason(err)
    out = {}
    for form, func in funcs.items():
        try:
            sch = _replay(func, task, template, config, reference.trace, own=form == OWN)
            got = loop_nests(sch.mod["main"])
        except Exception as err:  # noqa: BLE001 - a step TVM rejects on this function: the workload is left out
            skipped[form] = _reason(err)
            continue
        # a kernel that takes an operand relaid ahead: the function relays it, in loop nests of its own
        same = _subsequence(want, got) if template.relayouts(task, config) else want == got
        if same:
            out[form] = (tvm.IRModule({"main": func}), sch)
        else:
            skipped[form] = "the schedule's loops differ from the template's"
    return out, skipped


def _replay(func, task: Task, template: Template, config: Config, trace, own: bool):
    """A traced Schedule of `func`: the steps that make it the function the template starts from, then the
    template's trace, as one trace. The template's trace looks blocks up by name: a block of the task's PrimFunc
    under its name in `func`, and a block those steps made (`Template.from_task_func`) as the step that made it
    returned it, so the trace finds it as well in a function whose buffers have other names (TVM's, with an
    elementwise operator fused in, which a database matches by its anchor block)."""
    import tvm
    from tvm import s_tir
    from tvm.s_tir.schedule import Trace

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    names = {} if own else legalized.to_task_func(sch, task)
    parts = {}
    if template.from_task_func is not None:
        parts = template.from_task_func(sch, sch.get_sblock(names.get("C", "C")), task, config)
    insts, decisions = sch.trace.as_json()
    made = [(rv, name) for inst, json in zip(sch.trace.insts, insts) for rv, name in zip(inst.outputs, json[3])]
    part_rvs = {part: next(name for rv, name in made if rv.same_as(block)) for part, block in parts.items()}
    rvs: dict[str, str] = {}  # the template trace's random variables -> their names in the merged trace
    at = {}  # index of an instruction of the template's trace -> its index in the merged trace
    template_insts, template_decisions = trace.as_json()
    for i, (kind, inputs, attrs, outputs) in enumerate(template_insts):
        if kind == "GetSBlock" and attrs[0] in part_rvs:
            rvs[outputs[0]] = part_rvs[attrs[0]]
            continue
        if kind == "GetSBlock":
            attrs = [names.get(attrs[0], attrs[0]), *attrs[1:]]
        rvs.update((out, f"t{out}") for out in outputs if out != "_")  # apart from the first steps' names
        at[i] = len(insts)
        insts.append([kind, _rename(inputs, rvs), attrs, [rvs.get(out, out) for out in outputs]])
    decisions = [*decisions, *([at[i], decision] for i, decision in template_decisions)]
    out = s_tir.Schedule(tvm.IRModule({"main": func}))
    Trace.apply_json_to_schedule([insts, decisions], out)
    return out


def _rename(inputs, names: dict[str, str]):
    """An instruction's inputs (JSON) with the random variables `names` names renamed."""
    if isinstance(inputs, str):
        return names.get(inputs, inputs)
    return [_rename(x, names) for x in inputs] if isinstance(inputs, (list, tuple)) else inputs


def loop_nests(func) -> tuple[str, ...]:
    """The loops of a scheduled PrimFunc without its names: one entry per loop nest under its root block, each
    loop's extent, kind and annotations, and the blocks (with their annotation keys) they hold."""
    from tvm import s_tir, tirx

    def show(stmt) -> str:
        if isinstance(stmt, tirx.For):
            annotations = ",".join(f"{k}={v}" for k, v in sorted((str(k), str(v)) for k, v in stmt.annotations.items()))
            return f"for({int(stmt.extent)},{int(stmt.kind)},{annotations})[{show(stmt.body)}]"
        if isinstance(stmt, tirx.SeqStmt):
            return ",".join(show(s) for s in stmt)
        if isinstance(stmt, s_tir.SBlockRealize):
            block = stmt.block
            inner = show(block.body)
            return f"block({','.join(sorted(block.annotations.keys()))})" + (f"[{inner}]" if inner else "")
        return show(stmt.body) if hasattr(stmt, "body") else ""

    root = func.body.block.body
    return tuple(show(s) for s in root) if isinstance(root, tirx.SeqStmt) else (show(root),)


def _subsequence(part: Sequence[str], whole: Sequence[str]) -> bool:
    rest = iter(whole)
    return all(item in rest for item in part)


def _reason(err: Exception) -> str:
    """An exception in one line: its type and the last line of its message (TVM's says there what went wrong)."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else ''}"[:300]
