"""Task scheduler: one trial budget for all tasks of a model, spent where end-to-end latency drops most.

Rounds of `round_trials` trials go to one task at a time. First every task gets one round
(warm-up, by FLOPs x weight), then the task with the most negative estimated gradient of weighted latency
(Ansor's task scheduler): a mix of the recent improvement per trial (backward) and an
optimistic decay of the current best (forward, best / trials). Everything is derived from the
log, so re-running the same command continues where it stopped.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AutotuneError
from ..records import Record, split_retimes
from ..retime import RETIMES
from ..task import Task
from .extract import extract_tasks

if TYPE_CHECKING:
    from ..measure import RunnerOptions

BACKWARD_WINDOW = 2  # rounds over which the recent improvement is measured
ALPHA = 0.2  # weight of the backward (observed) gradient against the forward (optimistic) one


@dataclass
class TaskState:
    """What the scheduler knows about one task: its trials so far and its best latency after each."""

    task: Task
    weight: int
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


def _resume(states: list[TaskState], log: Path, runner: Any, runner_options: RunnerOptions | None) -> None:
    import search_spaces

    from ..measure import runner_timing
    from ..tune import resumable_records

    for s in states:
        ref = search_spaces.default_template_ref(s.task.op, s.task.target_kind)
        s.add(split_retimes(resumable_records(log, s.task, ref, search_spaces.resolve(ref).version,
                                              runner_timing(runner, s.task, runner_options)))[0])


def _xgb_options(states: list[TaskState], log: Path, transfer: Sequence[str] | None,
                 tuner_options: dict[str, Any] | None) -> Callable[[TaskState], dict[str, Any]]:
    """Per round, the xgb tuner's options: transfer from the other tasks' records (the folder's logs, then this
    log's records of the model's other tasks so far), and one feature cache for all rounds."""
    from cost_models.features import FeatureCache

    from ..transfer import folder_records, select_transfer

    base = {"cache": FeatureCache(), **(tuner_options or {})}
    if transfer is not None and not transfer:
        base["transfer"] = []
    if "transfer" in base:  # chosen by the caller, or none
        return lambda state: base
    folder = folder_records(log, transfer, states[0].task.target_kind) if states else []

    def options(state: TaskState) -> dict[str, Any]:
        own = [r for s in states if s is not state for r in s.records]
        return {**base, "transfer": select_transfer(state.task, folder + own)}

    return options


def tune_model(model: Any, trials: int, log: str | Path, target: str | dict = "llvm", tuner: str = "xgb",
               inputs: Any = None, round_trials: int = 16, seed: int = 0,
               tune_fn: Callable[..., Any] | None = None, builder: Any = None, runner: Any = None,
               runner_options: RunnerOptions | None = None, progress: Callable[[str], None] | None = None,
               via: str = "auto", transfer: Sequence[str] | None = None, tuner_options: dict[str, Any] | None = None,
               retime: int = RETIMES, **tune_kwargs: Any) -> ModelTuneResult:
    """Tune every task of the model until `trials` trials in total are in the log (resumable).

    `tune_fn` defaults to `autotune.tune.tune`; `builder`/`runner` are shared by all rounds
    (created here when not given, so worker processes start once; `runner_options` for the one created).
    `via`: how tasks are extracted (see `extract_tasks`). With the xgb tuner, each round's cost model is
    pre-trained on the records of the model's other tasks so far and on the logs `transfer` names (None: the
    other logs beside `log`, as `autotune tune` does; [] turns transfer off); `tuner_options` go to the tuner as
    they are.
    Once the budget is spent, each task's contenders are timed `retime` more times (see `autotune.retime`).
    """
    from ..measure import LocalBuilder, LocalRunner
    from ..tune import ensure_measurable, tune
    from ..tuners import get_tuner_class

    if trials < 1:
        raise AutotuneError("--trials must be >= 1")
    get_tuner_class(tuner)
    tasks = extract_tasks(model, inputs, target, via=via)
    if not tasks:
        raise AutotuneError("the model has no tunable operator "
                            "(convolution: 1-d, 2-d, grouped, depthwise, transposed; matmul)")
    log = Path(log)
    states = [TaskState(t, w) for t, w in tasks]
    _resume(states, log, runner, runner_options)
    resumed = sum(s.trials for s in states)
    tune_fn = tune_fn or tune
    options_for = _xgb_options(states, log, transfer, tuner_options) if tuner == "xgb" else lambda s: tuner_options
    say = progress or (lambda msg: print(msg, file=sys.stderr))
    own_builder, own_runner = builder is None, runner is None
    if own_runner:
        for t, _ in tasks:
            ensure_measurable(t)
    builder = builder or LocalBuilder()
    runner = runner or LocalRunner(runner_options)
    try:
        while sum(s.trials for s in states) < trials:
            state = pick_task(states, round_trials)
            if state is None:
                say("every task's search space is exhausted")
                break
            want = min(round_trials, trials - sum(s.trials for s in states))
            before = state.trials
            result = tune_fn(state.task, trials=before + want, tuner=tuner, log=log, seed=seed + before,
                             batch_size=want, builder=builder, runner=runner, tuner_options=options_for(state),
                             retime=0, **tune_kwargs)
            new = result.records[before:] if len(result.records) >= before else []
            state.add(list(new))
            if not new or result.stopped == "search space exhausted":
                state.exhausted = True
            best = f"{state.best * 1e3:.4f} ms" if math.isfinite(state.best) else "none valid"
            say(f"[{sum(s.trials for s in states)}/{trials}] {state.task} x{state.weight}: "
                f"+{len(new)} trials, best {best}")
        if retime:
            say(f"timing each task's best configs {retime} more times")
            for state in (s for s in states if s.trials):  # its trials are all in the log: tune() only re-times
                best = tune_fn(state.task, trials=state.trials, tuner=tuner, log=log, seed=seed, builder=builder,
                               runner=runner, retime=retime, **tune_kwargs).best
                state.retimed_best = best.result.mean_s if best is not None else None
    finally:
        if own_builder:
            builder.close()
        if own_runner:
            runner.close()
    return ModelTuneResult(states, log, resumed, sum(s.trials for s in states) - resumed)

