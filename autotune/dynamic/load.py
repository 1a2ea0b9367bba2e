"""The uKernels of a dynamic operator: from a log (every task of the operator at some size is a candidate), or,
for an operator no log tunes, on the shipped knowledge's configs (else heuristic ones) at the heights the analytic
model chooses."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import AutotuneError
from ..database import TuningDatabase
from ..hardware import hardware_model
from ..operators import ukernel_template_ref
from ..records import Record
from ..templates import resolve, space_of
from .dispatch import DynamicKernel, UKernel
from .spec import DynamicSpec, parse_dynamic
from .ukernels import LOW_END_PADDING, chosen_heights, op_cost, predict_time, rank_ukernels


def ukernel_records(spec: DynamicSpec, records: TuningDatabase | Iterable[Record]) -> dict[int, Record]:
    """Height -> the record of the best config (`TuningDatabase.best`) of each task of `spec`'s operator."""
    db = TuningDatabase.of(records)
    out: dict[int, Record] = {}
    for key in db.task_keys():
        best = db.best(key)
        if best is not None and spec.matches(best.task):
            out[best.task.shape[spec.dim]] = best
    return out


def make_ukernels(spec: DynamicSpec, best: dict[int, Record], heights: Sequence[int] | None = None) -> list[UKernel]:
    """The scheduled best config of each height (all heights in `best` unless `heights` names some)."""
    out = []
    for h in sorted(heights if heights is not None else best, reverse=True):
        if h not in best:
            raise AutotuneError(f"no valid record for the uKernel {spec.dim}={h} of {spec}")
        rec = best[h]
        template = resolve(rec.input.template)
        config = space_of(template, rec.task).get(rec.input.config.index)
        out.append(UKernel(h, rec.task, template.kernel(rec.task, config)["main"], rec.result.mean_s, rec,
                           template, config))
    return out


def default_ukernels(spec: DynamicSpec, shipped: bool = True,
                     heights: Sequence[int] | None = None) -> tuple[list[UKernel], str]:
    """(uKernels, where their configs come from: "shipped", "heuristic" or "shipped and heuristic") for an operator
    the logs do not tune: the heights `rank_ukernels` chooses (or `heights`), each on the shipped config of the
    same or the nearest task (mapped onto the uKernel template's space) where `shipped` and the knowledge has one,
    else the heuristic config. Where this machine can time them (`shipped_check.measurable_here`), a shipped config
    and the heuristic one are measured and the faster kept, its time the planner's cost; else the hardware model's
    prediction is."""
    from ..model.default_schedule import default_template_func
    from ..model.shipped_check import Contest, measurable_here, verdicts
    from ..shipped import Knowledge

    hw = hardware_model(spec.target)
    cost = op_cost(spec)
    ref = ukernel_template_ref(spec.op, spec.task(1).target_kind)
    template = resolve(ref)
    knowledge = Knowledge.load(spec.target) if shipped else None
    heights = chosen_heights(rank_ukernels(spec, hw)) if heights is None else list(heights)
    choices = []  # per height: (task, shipped config or None, heuristic config)
    for h in heights:
        task = spec.task(h)
        found = knowledge.config_for(task, space_of(template, task)) if knowledge is not None else None
        heuristic = default_template_func(template, task)[1]
        choices.append((task, found.config if found is not None and found.config != heuristic else None, heuristic))
    contests = [Contest(task, s, hc, ref) for task, s, hc in choices if s is not None]
    measured = iter(verdicts(contests) if measurable_here(spec.target) else [])
    out, sources = [], set()
    for h, (task, ship, heuristic) in zip(heights, choices):
        verdict = next(measured, None) if ship is not None else None
        keep = ship is not None and (verdict is None or verdict.keeps_shipped)
        config = ship if keep else heuristic
        sources.add("shipped" if keep else "heuristic")
        mean_s = verdict.fastest_s if verdict is not None and verdict.fastest_s < float("inf") else \
            predict_time(hw, cost, h)
        out.append(UKernel(h, task, template.kernel(task, config)["main"], mean_s, None, template, config))
    return out, " and ".join(sorted(sources, reverse=True))


NEAR = 2.0  # a logged uKernel within this factor of a chosen height stands in for it


def low_end_heights(spec: DynamicSpec, heights: Sequence[int]) -> list[int]:
    """On a CPU, the range's lowest sizes below the smallest of `heights`, tallest first: the multiples of `spec.lo`
    below LOW_END_PADDING times it (1, 2 and 3 rows from one). A few rows of a GEMM stream its weight once, so a
    kernel of exactly those rows takes about the time of a matrix-vector product, where a padded piece of the
    smallest computes every row of its height (a decoder block at 3 tokens ran 1.4x faster on a derived 3-row
    kernel than on a padded 4-row one: docs/experiments.md)."""
    if spec.target.get("kind") != "llvm" or not heights:
        return []
    return [h for h in range((LOW_END_PADDING - 1) * spec.lo, 0, -spec.lo) if h < min(heights)]


def derived_ukernels(spec: DynamicSpec, donors: Sequence[UKernel], heights: Sequence[int]) -> list[UKernel]:
    """uKernels at `heights` derived with no tuning from `donors`: each takes the config of the donor nearest its
    height (in ratio; the taller of two) mapped onto its space, as its template derives it
    (`Template.derived_knobs`: fewer rows than the register tile take more weight panels per parallel job), the
    weight panels and their packing kept. Its planner cost is the donor's time times the hardware model's predicted
    ratio of their times (`ukernels.predict_time`): up to a few dozen rows streaming the weight bounds a call, so
    half the rows take more than half the time (in GPT-2's prefill, costed by the ratio of their rows, 7 tokens
    ran on a 4- and a 3-row piece where one padded 8-row piece was 1.3x faster: docs/experiments.md). A donor
    without a config derives nothing."""
    hw, cost = hardware_model(spec.target), op_cost(spec)
    out = []
    for h in heights:
        donor = min(donors, key=lambda u: (abs(math.log(u.height / h)), -u.height))
        if donor.template is None or donor.config is None:
            continue
        task = spec.task(h)
        space = space_of(donor.template, task)
        derive = donor.template.derived_knobs
        knobs = dict(donor.config.knobs) if derive is None else derive(task, dict(donor.config.knobs))
        config = space.get(space.nearest(knobs)[0])
        ratio = predict_time(hw, cost, h) / predict_time(hw, cost, donor.height)
        out.append(UKernel(h, task, donor.template.kernel(task, config)["main"], donor.mean_s * ratio, None,
                           donor.template, config))
    return out


@dataclass(frozen=True)
class SiteUKernels:
    """A model's dynamic site's uKernels, where their configs come from ("logs", "shipped", "heuristic", or the
    logs' and, for heights they lack, those), and the heights derived from others (`derived_ukernels`)."""

    ukernels: list[UKernel]
    source: str
    derived: tuple[int, ...]


def model_ukernels(spec: DynamicSpec, records: TuningDatabase, shipped: bool = True) -> SiteUKernels:
    """The uKernels of a model's dynamic site: the records' uKernels, and each height the analytic model chooses
    that they lack (none of theirs within a factor NEAR of it: `tune_model` tunes a site's tallest uKernel only,
    `sites.ukernel_tasks`; torch.compile's sizes have no bound), on a CPU derived from the records' ones, else
    the default one (`default_ukernels`); on a CPU, the range's low end (`low_end_heights`) derived from them."""
    best = ukernel_records(spec, records)
    missing = [h for h in chosen_heights(rank_ukernels(spec, hardware_model(spec.target)))
               if not any(h / NEAR <= b <= h * NEAR for b in best)]
    tuned = make_ukernels(spec, best) if best else []
    if tuned and spec.target.get("kind") == "llvm":
        derived = derived_ukernels(spec, tuned, missing)
        derived += derived_ukernels(spec, tuned + derived, low_end_heights(spec, [u.height for u in tuned + derived]))
        return SiteUKernels(tuned + derived, "logs", tuple(u.height for u in derived))
    source = "logs"
    ukernels = tuned
    if missing:
        defaults, source = default_ukernels(spec, shipped, missing)
        ukernels, source = tuned + defaults, f"logs and {source}" if tuned else source
    low = derived_ukernels(spec, ukernels, low_end_heights(spec, [u.height for u in ukernels]))
    return SiteUKernels(ukernels + low, source, tuple(u.height for u in low))


def load(log: str | os.PathLike | Sequence[str | os.PathLike], op: str | DynamicSpec, shape: str | None = None,
         target: str | dict[str, Any] = "llvm", heights: Sequence[int] | None = None,
         dtype: str = "float32") -> DynamicKernel:
    """The dynamic kernel of `op` (e.g. "matmul", "M=1..4096,N=768,K=768") in `dtype` from the uKernels in the
    log(s).

    Every task of the operator with the same fixed parameters and target is used as a uKernel
    (its best valid config), with the range's low end derived from them (`low_end_heights`), unless `heights`
    names the ones to use.
    """
    spec = op if isinstance(op, DynamicSpec) else parse_dynamic(op, shape or "", dtype, target=target)
    db = TuningDatabase.open(log)
    best = ukernel_records(spec, db)
    if not best:
        stale = any(spec.matches(r.task) and r.result.ok for r in db)
        raise AutotuneError(f"no valid uKernel record of {spec} in {log}"
                            + (" made by the current template version (re-tune)" if stale else ""))
    ukernels = make_ukernels(spec, best, heights)
    low = derived_ukernels(spec, ukernels, low_end_heights(spec, list(best))) if heights is None else []
    return DynamicKernel(spec, ukernels + low)
