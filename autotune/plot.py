"""Tuning curves from logs: the best GFLOPS found so far against trials (or seconds of tuning), and a PNG of them.

A trial is a config's first record in a log; its later records (`autotune.retime`) time it again and are not
trials. A curve follows the first measurements, as the search saw them: `autotune best` scores the contenders by
the median of their re-timings, so a curve's last point and `best` can differ by the timing noise.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from .errors import AutotuneError
from .records import Record, by_task, split_retimes

X_AXES = {"trials": "trials", "seconds": "seconds of tuning"}


@dataclass(frozen=True)
class Curve:
    """One task's trials in one log, in the order they were measured."""

    label: str  # the log's path
    task_key: str
    title: str  # the task, in words
    gflops: tuple[float, ...]  # each trial's first measurement, 0 for an error
    seconds: tuple[float, ...]  # when each trial's result came, seconds after the log's first record

    def best_so_far(self) -> list[float]:
        return list(accumulate(self.gflops, max))

    def trials_to_reach(self, share: float = 0.95) -> int | None:
        """Trials until the best so far is within `share` of the curve's final best (None: no valid trial)."""
        best = self.best_so_far()
        if not best or best[-1] <= 0:
            return None
        return next(i + 1 for i, g in enumerate(best) if g >= share * best[-1])

    def x(self, axis: str) -> list[float]:
        return list(range(1, len(self.gflops) + 1)) if axis == "trials" else list(self.seconds)


@dataclass(frozen=True)
class ModelCurve:
    """A model's tuned kernels, estimated: the sum over its tasks of calls x best time so far, after each trial of
    a log (from the first trial after which every task has a valid one)."""

    label: str
    trials: tuple[int, ...]  # trials of the model's tasks so far
    seconds: tuple[float, ...]
    ms: tuple[float, ...]  # estimated milliseconds per inference in the tuned kernels
    missing: tuple[str, ...]  # the model's tasks without a valid trial in the log (then there is no estimate)

    def x(self, axis: str) -> list[float]:
        return list(self.trials) if axis == "trials" else list(self.seconds)


def model_curve(records: Iterable[Record], weights: Mapping[str, int], label: str) -> ModelCurve:
    """`weights`: task key -> calls per inference (`autotune.model.extract_tasks`); other tasks' records are left
    out."""
    trials, _ = split_retimes(r for r in records if r.task.key in weights)
    start = min((r.result.timestamp for r in trials), default=0.0)
    best: dict[str, float] = {}
    xs, secs, ms = [], [], []
    for n, r in enumerate(trials, 1):
        if r.result.ok:
            best[r.task.key] = min(best.get(r.task.key, math.inf), r.result.mean_s)
        if len(best) == len(weights):
            xs.append(n)
            secs.append(r.result.timestamp - start)
            ms.append(1e3 * sum(weights[k] * t for k, t in best.items()))
    return ModelCurve(label, tuple(xs), tuple(secs), tuple(ms), tuple(sorted(set(weights) - set(best))))


def curves(records: Iterable[Record], label: str) -> list[Curve]:
    """One curve per task of `records` (one log's, in file order); seconds count from the log's first record, so
    the tasks of one `tune-model` log share a clock."""
    records = list(records)
    start = min((r.result.timestamp for r in records), default=0.0)
    out = []
    for key, recs in by_task(records).items():
        trials, _ = split_retimes(recs)
        out.append(Curve(label, key, str(trials[0].task), tuple(r.gflops() for r in trials),
                         tuple(r.result.timestamp - start for r in trials)))
    return out


def log_labels(paths: Sequence[str | Path]) -> list[str]:
    """Short names for logs: the fewest trailing parts of each path (without the suffix) that tell them apart."""
    parts = [Path(p).with_suffix("").parts for p in paths]
    for n in range(1, max((len(p) for p in parts), default=1) + 1):
        names = ["/".join(p[-n:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]  # the same log given twice


def panels(all_curves: Iterable[Curve], axis: str = "trials") -> dict[str, dict[str, list[tuple[list, list]]]]:
    """Task -> log -> its (x, best so far) series, the shape `draw` takes; in each panel the logs are named
    by the shortest path endings that tell them apart (`log_labels`)."""
    by_title: dict[str, list[Curve]] = {}
    for c in all_curves:
        by_title.setdefault(c.title, []).append(c)
    out: dict[str, dict[str, list[tuple[list, list]]]] = {}
    for title, group in by_title.items():
        logs = list(dict.fromkeys(c.label for c in group))
        names = dict(zip(logs, log_labels(logs)))
        for c in group:
            out.setdefault(title, {}).setdefault(names[c.label], []).append((c.x(axis), c.best_so_far()))
    return out


def draw(panels_: Mapping[str, Mapping[str, Sequence[tuple[Sequence[float], Sequence[float]]]]], path: str | Path,
         xlabel: str = "trials", ylabel: str = "best GFLOPS so far", columns: int = 4,
         ylabels: Mapping[str, str] | None = None) -> None:
    """One panel per title, one line per label. A label with several series of the same x (seeds of one method)
    is drawn as their mean with a band from their least to their greatest. `ylabels`: title -> its own y label."""
    try:
        import matplotlib
    except ImportError:
        raise AutotuneError("plotting needs matplotlib: pip install 'autotune[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    if not panels_:
        raise AutotuneError("nothing to plot")
    cols = min(columns, len(panels_))
    rows = math.ceil(len(panels_) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.6 * rows), squeeze=False)
    for ax, (title, by_label) in zip(axes.flat, panels_.items()):
        for label, series in by_label.items():
            if len(series) == 1:
                ax.plot(series[0][0], series[0][1], label=label, drawstyle="steps-post")
                continue
            n = min(len(y) for _, y in series)
            ys = np.array([y[:n] for _, y in series])
            ax.plot(series[0][0][:n], ys.mean(0), label=label, drawstyle="steps-post")
            ax.fill_between(series[0][0][:n], ys.min(0), ys.max(0), alpha=0.15, step="post")
        ax.set_title(textwrap.fill(title.replace(",", ", "), 48), fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel((ylabels or {}).get(title, ylabel))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels_):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def model_summary(c: ModelCurve, name: str) -> str:
    if c.missing:
        return (f"{c.label}: {name}: no estimate, {len(c.missing)} of its tasks have no valid trial in the log "
                f"({', '.join(c.missing[:4])}{', ...' if len(c.missing) > 4 else ''})")
    return (f"{c.label}: {name}: tuned kernels (first measurements) {c.ms[0]:.3f} ms per inference after trial "
            f"{c.trials[0]} (the first with every task timed), {c.ms[-1]:.3f} ms after {c.trials[-1]} "
            f"({c.ms[0] / c.ms[-1]:.2f}x)")


def summary(c: Curve) -> str:
    """One line: trials, errors, best first measurement, trials (and seconds) to 95% of it."""
    errors = sum(g <= 0 for g in c.gflops)
    reach = c.trials_to_reach()
    best = c.best_so_far()[-1] if c.gflops else 0.0
    if reach is None:
        return f"{c.label}: {c.task_key}: {len(c.gflops)} trials, {errors} errors, no valid trial"
    return (f"{c.label}: {c.task_key}: {len(c.gflops)} trials, {errors} errors, best {best:.1f} GFLOPS "
            f"(first measurements), 95% of it after {reach} trials ({c.seconds[reach - 1]:.0f} s)")
