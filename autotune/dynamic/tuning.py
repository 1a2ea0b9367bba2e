"""Tune the uKernels of a dynamic operator: the tallest with the full budget, the others from its best.

Each uKernel is an ordinary static task tuned by a tuning session (`autotune.session`) into one log, so logs,
resume and `autotune best` work as for any task. The smaller uKernels share the tallest one's N/K knobs
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

from ..database import TuningDatabase
from ..hardware import hardware_model
from ..measure import Builder, Runner, RunnerOptions
from ..operators import ukernel_template_ref
from ..records import Record
from ..retime import RETIMES
from ..session import STANDARD, Measurer, TuningSession
from ..session import progress as progress_callback
from ..space import ConfigSpace
from ..tune import TuneResult, open_session
from ..tuners import learns_from_transfer
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
        return self.result.resumed


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
                 seed: int = 0, batch_size: int = 8, tuner_options: Any = None,
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
    t0 = time.perf_counter()
    candidates = rank_ukernels(spec, hardware_model(spec.target), max_kernels=max_kernels)
    chosen = sorted(heights, reverse=True) if heights else chosen_heights(candidates)
    log_path = Path(log) if log else default_log_path(spec)
    out = DynamicTuneResult(spec, log_path, candidates)
    small_budget = ukernel_trials if ukernel_trials is not None else ukernel_budget(trials)
    others = [r for r in (transfer or []) if not spec.matches(r.task) or r.task.shape[spec.dim] not in chosen]
    done: list[Record] = []  # records of the uKernels tuned so far: seeds and transfer for the next
    learns = learns_from_transfer(tuner)
    with TuningDatabase(log=log_path) as db, Measurer(builder, runner, runner_options, build_timeout) as measurer:
        for n, height in enumerate(chosen):
            budget = trials if n == 0 else small_budget
            if on_start:
                on_start(height, budget)
            t1 = time.perf_counter()
            task = spec.task(height)
            callbacks = list(STANDARD)
            if progress:
                callbacks.append(progress_callback(lambda s, h=height: progress(h, TuneResult.of(s, log_path))))
            ref = ukernel_template_ref(task.op, task.target_kind)
            session = open_session(task, db, measurer, tuner, ref, seed, tuner_options,
                                   list(done or others) if learns else [], callbacks=callbacks)
            donors, n_seeds = (others, budget // 4) if n == 0 else (done, budget)
            seeded = _measure_seeds(session, donors, n_seeds) if donors else 0
            session.search(budget, batch_size)
            session.retime(retime if n == 0 else 0, seed)
            result = TuneResult.of(session, log_path)
            done += result.records
            out.ukernels.append(UKernelTuning(height, budget, seeded, result, time.perf_counter() - t1))
    out.wall_s = time.perf_counter() - t0
    return out


def _measure_seeds(session: TuningSession, donors: list[Record], n: int) -> int:
    """Measure (and log) up to n configs mapped from the donors' best, unless the session already has as many."""
    donors = [r for r in donors if r.input.template == session.template_ref and r.task.op == session.task.op]
    seeds = [i for i in mapped_configs(session.space, donors, n)
             if i not in session.measured][:max(0, n - len(session.measured))]
    session.measure(seeds)
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
