"""Tune the uKernels of a dynamic operator: the tallest with the full budget, the others from its best.

Each uKernel is an ordinary static task tuned with `tune()` into one log, so logs, resume and
`autotune best` work as for any task. The smaller uKernels share the tallest one's N/K knobs
(same fixed parameters), so by default they only measure its best configs mapped onto their own
space ("seeds", logged like any trial); a larger budget continues with the xgb model pre-trained on
the uKernels already tuned. The tallest one may itself start from seeds of `transfer` records (e.g.
the uKernels of the same operator at other fixed sizes). One builder and one runner serve all.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..measure import Builder, LocalBuilder, LocalRunner, Runner, RunnerOptions, record_versions, runner_timing
from ..measure_types import MeasureInput
from ..records import LogWriter, Record
from ..retime import RETIMES
from ..space import ConfigSpace
from ..tune import TuneResult, resumable_records, tune
from ..hardware import hardware_model
from .spec import DynamicSpec
from .ukernels import Candidate, chosen_heights, rank_ukernels


@dataclass
class UKernelTuning:
    height: int
    trials: int  # the budget it was given
    seeded: int  # seeds measured in this run
    result: TuneResult
    wall_s: float

    @property
    def resumed(self) -> int:
        """Records found in the log before this run."""
        return self.result.resumed - self.seeded


@dataclass
class DynamicTuneResult:
    spec: DynamicSpec
    log: Path
    candidates: list[Candidate]
    ukernels: list[UKernelTuning] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def trials(self) -> int:
        return sum(len(u.result.records) for u in self.ukernels)


def default_log_path(spec: DynamicSpec) -> Path:
    """logs/<op>-dyn-<hash of op, fixed parameters, dtype, target>.jsonl (the range is left out)."""
    key = json.dumps([spec.op, spec.dim, spec.fixed, spec.dtype, spec.target], sort_keys=True)
    return Path("logs") / f"{spec.op}-dyn-{hashlib.sha1(key.encode()).hexdigest()[:12]}.jsonl"


def ukernel_budget(trials: int) -> int:
    """Trials of each smaller uKernel when the tallest gets `trials`: its best two or three, mapped."""
    return max(2, math.ceil(trials / 8))


def tune_dynamic(spec: DynamicSpec, trials: int = 64, log: str | Path | None = None, tuner: str = "xgb",
                 ukernel_trials: int | None = None, max_kernels: int = 3, heights: list[int] | None = None,
                 seed: int = 0, batch_size: int = 8, tuner_options: dict[str, Any] | None = None,
                 runner_options: RunnerOptions | None = None, builder: Builder | None = None,
                 runner: Runner | None = None, build_timeout: float = 60.0, transfer: list[Record] | None = None,
                 progress: Callable[[int, TuneResult], None] | None = None,
                 on_start: Callable[[int, int], None] | None = None, retime: int = RETIMES) -> DynamicTuneResult:
    """Rank uKernel heights analytically, then tune the chosen ones (resumable from `log`).

    trials: budget of the tallest uKernel; ukernel_trials: of each other one (default trials/8, >= 2).
    heights: tune these instead of the ranked choice. transfer: records of other tasks; the tallest
    uKernel measures a quarter of its budget mapped from their best and (xgb) pre-trains on them.
    progress(height, result) after each batch; on_start(height, budget) before each uKernel. retime: how many
    more times the tallest uKernel's contenders are timed (`autotune.retime`; the smaller ones measure too few
    configs for it to pay).
    """
    import search_spaces

    t0 = time.perf_counter()
    candidates = rank_ukernels(spec, hardware_model(spec.target), max_kernels=max_kernels)
    chosen = sorted(heights, reverse=True) if heights else chosen_heights(candidates)
    log_path = Path(log) if log else default_log_path(spec)
    out = DynamicTuneResult(spec, log_path, candidates)
    small_budget = ukernel_trials if ukernel_trials is not None else ukernel_budget(trials)
    own_builder, own_runner = builder is None, runner is None
    builder = builder or LocalBuilder(timeout=build_timeout)
    runner = runner or LocalRunner(runner_options)
    others = [r for r in (transfer or []) if not spec.matches(r.task) or r.task.shape[spec.dim] not in chosen]
    done: list[Record] = []  # records of the uKernels tuned so far: seeds and transfer for the next
    try:
        for n, height in enumerate(chosen):
            budget = trials if n == 0 else small_budget
            if on_start:
                on_start(height, budget)
            t1 = time.perf_counter()
            task = spec.task(height)
            donors, n_seeds = (others, budget // 4) if n == 0 else (done, budget)
            seeded = _measure_seeds(task, donors, n_seeds, log_path, builder, runner) if donors else 0
            options = dict(tuner_options or {})
            if tuner == "xgb":
                options.setdefault("transfer", list(done or others))
            result = tune(task, trials=budget, tuner=tuner, log=log_path, seed=seed, batch_size=batch_size,
                          template=search_spaces.ukernel_template_ref(task.op, task.target_kind),
                          tuner_options=options, builder=builder, runner=runner, retime=retime if n == 0 else 0,
                          progress=(lambda r, h=height: progress(h, r)) if progress else None)
            done += result.records
            out.ukernels.append(UKernelTuning(height, budget, seeded, result, time.perf_counter() - t1))
    finally:
        if own_builder:
            builder.close()
        if own_runner:
            runner.close()
    out.wall_s = time.perf_counter() - t0
    return out


def _measure_seeds(task, donors: list[Record], n: int, log: Path, builder: Builder, runner: Runner) -> int:
    """Measure (and log) up to n configs mapped from the donors' best, unless the log already has as many."""
    import search_spaces

    ref = search_spaces.ukernel_template_ref(task.op, task.target_kind)
    tmpl = search_spaces.resolve(ref)
    timing = runner_timing(runner, task)
    have = resumable_records(log, task, ref, tmpl.version, timing)
    space = tmpl.define_space(task)
    measured = {r.input.config.index for r in have}
    donors = [r for r in donors if r.input.template == ref and r.task.op == task.op]
    seeds = [i for i in mapped_configs(space, donors, n) if i not in measured][:max(0, n - len(measured))]
    if not seeds:
        return 0
    inputs = [MeasureInput(task, space.get(i), ref) for i in seeds]
    results = runner.run(inputs, builder.build(inputs))
    stamp = record_versions(runner, task)
    with LogWriter(log) as writer:
        for inp, res in zip(inputs, results):
            writer.write(Record(inp, res, tmpl.version, runner.threads, stamp, timing))
    return len(seeds)


def mapped_configs(space: ConfigSpace, donors: list[Record], n: int) -> list[int]:
    """The donors' best distinct configs (highest GFLOPS: donors may be other sizes) mapped onto `space`.

    `ConfigSpace.nearest`, its first config: a knob value the space also has is kept; a split it lacks becomes
    the space's closest split (least log2 distance of the inner factors, innermost first); any other missing value
    becomes its first equivalent in the space, else the first candidate.
    """
    out: list[int] = []
    for rec in sorted((r for r in donors if r.result.ok), key=lambda r: -r.gflops()):
        index = space.nearest(rec.input.config.knobs)[0]
        if index not in out:
            out.append(index)
        if len(out) >= n:
            break
    return out
