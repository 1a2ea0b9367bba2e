"""Task scheduler: one trial budget for all tasks of a model, spent where end-to-end latency drops most.

Rounds of `round_trials` trials go to one task at a time. First every task gets one round
(warm-up, by FLOPs x weight), then the task with the most negative estimated gradient of weighted latency
(Ansor's task scheduler): a mix of the recent improvement per trial (backward) and an
optimistic decay of the current best (forward, best / trials). Each task keeps one live tuning session
(`autotune.session`) across its rounds; every record goes to the log, so re-running the same command
continues where it stopped.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cost_models.features import FeatureCache

from ..database import TuningDatabase
from ..errors import AutotuneError
from ..measure import RunnerOptions
from ..records import Record
from ..retime import RETIMES
from ..session import Measurer, TuningSession, retime_together
from ..task import Task
from ..shipped import shipped_enabled
from ..transfer import shipped_records, start_options, transfer_logs, transfer_summary
from ..tune import ensure_measurable, open_session
from ..tuners import learns_from_transfer
from .extract import extract_tasks


BACKWARD_WINDOW = 2  # rounds over which the recent improvement is measured
ALPHA = 0.2  # weight of the backward (observed) gradient against the forward (optimistic) one


@dataclass
class TaskState:
    """What the scheduler knows about one task: its trials so far and its best latency after each."""

    task: Task
    weight: float  # calls per inference (a dynamic site's uKernel: `autotune.dynamic.sites.ukernel_tasks`)
    trials: int = 0
    best_history: list[float] = field(default_factory=list)  # best seconds after each trial (inf: none yet)
    exhausted: bool = False
    records: list[Record] = field(default_factory=list, repr=False)  # its records so far (transfer to the others)
    retimed_best: float | None = None  # once its contenders are re-timed: the best config's median seconds

    @property
    def best(self) -> float:
        if self.retimed_best is not None:
            return self.retimed_best
        return self.best_history[-1] if self.best_history else math.inf

    def add(self, records: list[Record]) -> None:
        best = self.best
        for r in records:
            if r.result.ok:
                best = min(best, r.result.mean_s)
            self.best_history.append(best)
        self.trials += len(records)
        self.records += records

    def weighted_latency(self) -> float:
        return self.weight * self.best if math.isfinite(self.best) else math.inf


def gradient(state: TaskState, window: int) -> float:
    """Estimated change of weighted latency per extra trial (more negative: more promising)."""
    if not math.isfinite(state.best):
        return -math.inf  # no valid schedule yet: its latency is unknown, so it is the most urgent
    hist = state.best_history
    past = hist[-window - 1] if len(hist) > window else hist[0]
    backward = (state.best - past) / min(window, max(1, len(hist) - 1)) if math.isfinite(past) else 0.0
    forward = -state.best / max(1, state.trials)
    return state.weight * (ALPHA * backward + (1 - ALPHA) * forward)


def pick_task(states: list[TaskState], round_trials: int) -> TaskState | None:
    """The next task to tune: warm-up order first, then the steepest estimated gradient."""
    open_ = [s for s in states if not s.exhausted]
    if not open_:
        return None
    cold = [s for s in open_ if s.trials < round_trials]
    if cold:  # warm-up, largest share of the model's FLOPs first (a small budget goes where it matters)
        return max(cold, key=lambda s: s.task.flops * s.weight)
    return min(open_, key=lambda s: (gradient(s, BACKWARD_WINDOW * round_trials), -s.weighted_latency()))


@dataclass
class ModelTuneResult:
    states: list[TaskState]
    log: Path
    resumed: int  # trials already in the log when this run started
    spent: int  # trials run by this call

    def summary(self) -> str:
        total = sum(s.weighted_latency() for s in self.states if math.isfinite(s.best))
        lines = [(f"{sum(s.trials for s in self.states)} trials in {self.log} ({self.resumed} resumed, "
                 f"{self.spent} new); tuned-kernel time per inference {total * 1e3:.3f} ms")]
        for s in self.states:
            best = f"{s.best * 1e3:.4f} ms, {s.task.flops / s.best / 1e9:.1f} GFLOPS" if math.isfinite(s.best) \
                else "no valid config"
            lines.append(f"  {s.task} x{s.weight}: {s.trials} trials, best {best}")
        return "\n".join(lines)


def tune_model(model: Any, trials: int, log: str | Path, target: str | dict = "llvm", tuner: str = "xgb",
               inputs: Any = None, round_trials: int = 16, seed: int = 0, builder: Any = None, runner: Any = None,
               runner_options: RunnerOptions | None = None, progress: Callable[[str], None] | None = None,
               via: str = "auto", transfer: Sequence[str] | None = None, tuner_options: Any = None,
               retime: int = RETIMES, template: str | None = None, shipped: bool | None = None) -> ModelTuneResult:
    """Tune every task of the model until `trials` trials in total are in the log (resumable).

    Each task has one tuning session for the whole run (its tuner and cost model live across its rounds);
    `builder`/`runner` are shared by all (made here when not given, `runner_options` for the runner made).
    `via`: how tasks are extracted (see `extract_tasks`). A tuner that learns from other tasks (xgb) starts from
    the records of the logs `transfer` names (None: the other logs beside `log`, as `autotune tune` does; []
    turns transfer off) and of the model's other tasks so far, and before each of its rounds learns the other
    tasks' newer records, or where none is of a task's operator, the shipped knowledge's of it (`shipped`: see
    `autotune.shipped.shipped_enabled`); `tuner_options` go to the tuner as they are.
    Once the budget is spent, each task's contenders are timed `retime` more times (see `autotune.retime`).
    """
    if trials < 1:
        raise AutotuneError("--trials must be >= 1")
    learns = learns_from_transfer(tuner)
    tasks = extract_tasks(model, inputs, target, via=via)  # a dynamic program's: `autotune.dynamic.sites`
    if not tasks:
        raise AutotuneError("the model has no tunable operator "
                            "(convolution: 1-d, 2-d, grouped, depthwise, transposed; matmul)")
    log = Path(log)
    say = progress or (lambda msg: print(msg, file=sys.stderr))
    if runner is None:
        (runner_options or RunnerOptions()).check_local()
        for t, _ in tasks:
            ensure_measurable(t)
    transfer_on = learns and transfer != []
    folder = TuningDatabase.open(transfer_logs(log, transfer)) if transfer_on else TuningDatabase()
    cache = FeatureCache() if learns else None  # one for every task's tuner: transfer rows are shared
    with TuningDatabase(log=log) as db, Measurer(builder, runner, runner_options) as measurer:
        states = [TaskState(t, w) for t, w in tasks]
        sessions: dict[str, TuningSession] = {}
        synced: dict[str, int] = {}  # task key -> records in the log when its tuner last learned the others' records

        def session_of(state: TaskState) -> TuningSession:
            """The task's session; before a round of its tuner, the other tasks' records it has not learned yet."""
            key = state.task.key
            if key not in sessions:
                sessions[key] = open_session(state.task, db, measurer, tuner, template, seed, tuner_options,
                                             lambda: transfer_of(state.task), cache)
            elif transfer_on and (made := sessions[key].tuner_if_made()) is not None:
                if new := [r for r in db.records()[synced[key]:] if r.task.key != key]:
                    made.add_transfer(new)
                synced[key] = len(db)
            return sessions[key]

        def transfer_of(task: Task) -> list[Record]:
            """What the task's tuner starts from, when it is made: the other tasks' records so far (the shipped
            knowledge's of its operator where none is of it: `transfer.shipped_records`)."""
            synced[task.key] = len(db)
            if not transfer_on:
                return []
            records = TuningDatabase([*folder, *db]).transfer(task)
            if shipped_enabled(shipped) and not any(r.task.op == task.op for r in records) and (
                    extra := shipped_records(task)):
                records += extra
                say(f"{task}: {transfer_summary(task, records, start_options(task, records, tuner, tuner_options))}")
            return records

        for s in states:
            s.add(session_of(s).trials)
        resumed = sum(s.trials for s in states)
        while sum(s.trials for s in states) < trials:
            state = pick_task(states, round_trials)
            if state is None:
                say("every task's search space is exhausted")
                break
            want = min(round_trials, trials - sum(s.trials for s in states))
            session = session_of(state)
            new = session.search(state.trials + want, batch_size=want)
            state.add(new)
            if not new or session.stopped == "search space exhausted":
                state.exhausted = True
            best = f"{state.best * 1e3:.4f} ms" if math.isfinite(state.best) else "none valid"
            say(f"[{sum(s.trials for s in states)}/{trials}] {state.task} x{state.weight}: "
                f"+{len(new)} trials, best {best}")
        if retime:
            say(f"timing each task's best configs {retime} more times")
            tuned = [s for s in states if s.trials]
            retime_together([sessions[s.task.key] for s in tuned], retime, seed)
            for state in tuned:
                best = sessions[state.task.key].best
                state.retimed_best = best.result.mean_s if best is not None else None
    return ModelTuneResult(states, log, resumed, sum(s.trials for s in states) - resumed)
