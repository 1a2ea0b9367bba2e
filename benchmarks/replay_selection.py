"""Offline replay of batch-selection rules over the configs bench_search.py has measured.

    python benchmarks/replay_selection.py --runs 20          # after bench_search.py has filled its work folder

Each simulated run starts from 8 of the task's random-search configs, then, 7 times, fits the cost model on
what it has "measured", scores every other logged config of the task, and picks 8 by a rule (the pick is
"measured" by looking its logged result up). Reported: runs that reach 95% of the best logged config within
64 trials, and the mean best reached. Only logged configs can be picked, a pool far denser in good configs
than the whole space, so this compares rules; it does not predict real search figures. Stores the table as
the result `batch_selection_replay`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import write_section
from bench_search import TASKS, first_measurements

RULES = {  # name -> (knob_weight, min_distance, random picks per batch)
    "top (no diversity)": (0.0, 1, 1),
    "top, 2 knob changes apart (before)": (0.0, 2, 1),
    "coverage bonus 0.1 (default)": (0.1, 1, 1),
    "coverage bonus 0.1, 2 knob changes apart": (0.1, 2, 1),
    "coverage bonus 0.1, 2 random": (0.1, 1, 2),
}


def task_pool(work: Path, label: str):
    """Logged configs of a task: indices, GFLOPS, loop-feature rows, which ones random search drew, the space."""
    from autotune import load_records, make_task
    from autotune.templates import resolve, space_of
    from cost_models.features import extract

    task = make_task(*TASKS[label])
    tdir = work / task.key
    known = first_measurements(tdir)
    ref = next(r.input.template for r in load_records(min(tdir.glob("random-*.jsonl"))))
    template = resolve(ref)
    space = space_of(template, task)
    drawn = {r.input.config.index for p in tdir.glob("random-*.jsonl") for r in load_records(p)}
    idx = np.array(sorted(known))
    gflops = np.array([task.flops / known[i].mean_s / 1e9 if known[i].ok else 0.0 for i in idx])
    X = extract(task, template, space, idx.tolist(), "loop")
    ok = np.isfinite(X).all(axis=1)
    return idx[ok], gflops[ok], X[ok], np.array([i in drawn for i in idx[ok]]), space


def replay(pool, rule, seed: int, trials: int = 64, batch: int = 8) -> list[float]:
    """GFLOPS of each simulated trial."""
    from autotune.tuners.batch import pick_batch
    from cost_models.xgb_model import XGBCostModel

    idx, y, X, drawn, space = pool
    knob_weight, min_distance, n_random = rule
    rng = np.random.default_rng(seed)
    measured = list(rng.choice(np.flatnonzero(drawn), batch, replace=False))
    while len(measured) < trials:
        m = np.array(measured)
        rest = np.setdiff1d(np.arange(len(y)), m)
        model = XGBCostModel(seed=len(measured)).fit(X[m], y[m], np.zeros(len(m), int))
        scores = model.predict(X[rest])
        position = {int(idx[r]): j for j, r in enumerate(rest)}
        scored = {int(idx[r]): float(scores[j]) for j, r in enumerate(rest)}
        chosen = [position[i] for i in pick_batch(scored, batch - n_random, space, knob_weight, min_distance)]
        others = np.setdiff1d(np.arange(len(rest)), chosen)
        chosen += list(rng.choice(others, n_random, replace=False))
        measured += [rest[j] for j in chosen]
    return [float(y[i]) for i in measured[:trials]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--work", default="benchmarks/work/search")
    args = ap.parse_args()
    rows = ["| rule | " + " | ".join(f"{t}: runs reaching 95% / mean best (x best)" for t in args.tasks) + " |",
            "|---|" + "---|" * len(args.tasks)]
    pools = {t: task_pool(Path(args.work), t) for t in args.tasks}
    for name, rule in RULES.items():
        cells = []
        for t in args.tasks:
            best = pools[t][1].max()
            finals = [max(replay(pools[t], rule, s)) / best for s in range(args.runs)]
            cells.append(f"{sum(f >= 0.95 for f in finals)}/{args.runs} / {np.mean(finals):.3f}")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    body = ["## Batch selection rules, offline replay (`benchmarks/replay_selection.py`)", "",
            (f"Command: `python benchmarks/replay_selection.py --runs {args.runs}`. {args.runs} simulated cold runs "
             "per rule and task over the configs bench_search.py logged (picks limited to them, so the figures "
             "compare rules, not real searches); 95% of the best logged config; mean best as a share of it."), "",
            *rows]
    write_section("batch_selection_replay", "\n".join(body))
    print("\n".join(body))


if __name__ == "__main__":
    main()
