"""Which parts of the loop feature row rank configs: the cost model trained with parts of the row left out.

    python benchmarks/ablate_features.py                       # bench_search.py's logs, 4 tasks

Reads the logs `bench_search.py` wrote (--work). A loop feature row is four blocks: PerStoreFeature's
per-store rows pooled (`pooled`), the main block's innermost loop levels (`levels`), the reuse curve over
cache capacities (`curve`) and the register tile (`register`); `knob` is the config's knob values. `--sets`
picks feature sets. For each feature set and task:

- in-task: a model trained on 64 (and 300) of the task's random-search configs ranks the rest of them
  (Spearman, mean of 5 random splits), which is how well a cold tuning run can learn the task;
- leave-one-task-out: a model trained on all configs of the other tasks ranks all of this task's measured
  configs and its random-search configs (Spearman, mean of 3 model seeds, rows and columns subsampled to 80%
  so that the seeds differ);
- with `--extra-logs`, leave-one-task-out again with those logs' tasks added to the training set (never a
  record of the held-out task): how much a few more tasks, e.g. another shape of the same operator, help.

The default rank objective throughout. Stores the table as the result `feature_ablation`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import reexec_clean, report
from bench_search import TASKS, config_rows, search_records

FEATURE_SETS = ("all", "no register", "no curve", "no levels", "pooled", "knob")
IN_TASK_TRAIN = (64, 300)
SPLITS = 5
MODEL_SEEDS = 3


def columns(name: str):
    """Column selector of the loop row for a feature set (None: knob features)."""
    import numpy as np

    from cost_models.features import LOOP_DIM, POOLED_DIM
    from cost_models.loop_levels import CURVE_AT, REGISTER_AT

    levels = np.arange(POOLED_DIM, POOLED_DIM + CURVE_AT)
    curve = np.arange(POOLED_DIM + CURVE_AT, POOLED_DIM + REGISTER_AT)
    register = np.arange(POOLED_DIM + REGISTER_AT, LOOP_DIM)
    pooled = np.arange(POOLED_DIM)
    return {"all": np.arange(LOOP_DIM), "no register": np.concatenate([pooled, levels, curve]),
            "no curve": np.concatenate([pooled, levels, register]),
            "no levels": np.concatenate([pooled, curve, register]), "pooled": pooled, "knob": None}[name]


def task_data(work: Path, label: str):
    """(loop rows, knob rows, throughputs, drawn by random search?) of every measured config of a task."""
    import numpy as np

    from autotune import make_task

    task = make_task(*TASKS[label])
    records, random_records = search_records(work, task)
    drawn = {r.input.config.index for r in random_records}
    loop, order = config_rows(records, "loop")
    knob, _ = config_rows(records, "knob")
    return loop.X, knob.X, loop.y, np.array([i in drawn for i in order])


def in_task(X, y, n_train: int, rng) -> float:
    import numpy as np

    from cost_models import XGBCostModel, rank_correlation

    scores = []
    for _ in range(SPLITS):
        perm = rng.permutation(len(y))
        train, test = perm[:n_train], perm[n_train:]
        model = XGBCostModel().fit(X[train], y[train], np.zeros(len(train), dtype=int))
        scores.append(rank_correlation(model.predict(X[test]), y[test]))
    return float(np.mean(scores))


def extra_data(logs: list[str], held_out: set[str]):
    """Loop-feature `Dataset` of the records in `logs` (one group per task; tasks in `held_out` left out)."""
    from autotune import load_records
    from cost_models import records_dataset

    return records_dataset([r for r in load_records(logs) if r.result.ok and r.task.key not in held_out],
                           features="loop")


def leave_one_out(data: dict, label: str, cols, model_seeds: int = MODEL_SEEDS, extra=None) -> tuple[float, float]:
    """Spearman on the held-out task (all its configs, its random-search ones) of models trained on the other
    tasks of `data`, plus the tasks of the `extra` Dataset when given."""
    import numpy as np

    from cost_models import XGBCostModel, rank_correlation

    others = [o for o in data if o != label]
    X = np.vstack([data[o][0][:, cols] for o in others] + ([extra.X[:, cols]] if extra else []))
    y = np.concatenate([data[o][2] for o in others] + ([extra.y] if extra else []))
    groups = np.concatenate([np.full(len(data[o][2]), g) for g, o in enumerate(others)]
                            + ([extra.groups + len(others)] if extra else []))
    loop, _, y_test, drawn = data[label]
    every, random_ones = [], []
    for seed in range(model_seeds):
        model = XGBCostModel(seed=seed, subsample=0.8, colsample_bytree=0.8).fit(X, y, groups)
        pred = model.predict(loop[:, cols])
        every.append(rank_correlation(pred, y_test))
        random_ones.append(rank_correlation(pred[drawn], y_test[drawn]))
    return float(np.mean(every)), float(np.mean(random_ones))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="benchmarks/work/search", help="bench_search.py's work folder")
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--sets", nargs="+", default=list(FEATURE_SETS), choices=FEATURE_SETS, help="feature sets")
    ap.add_argument("--model-seeds", type=int, default=MODEL_SEEDS, help="leave-one-task-out: models averaged")
    ap.add_argument("--extra-logs", nargs="+", default=[], metavar="LOG",
                    help="logs of more tasks: leave-one-task-out is also run with them in every training set")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    reexec_clean(args.threads)
    import numpy as np

    from autotune import make_task

    t0 = time.time()
    data = {label: task_data(Path(args.work), label) for label in args.tasks}
    extra = extra_data(args.extra_logs, {make_task(*TASKS[label]).key for label in TASKS}) if args.extra_logs else None
    extra_head = " + extra tasks, all configs | same, random-search configs |" if extra else ""
    rows = ["| features | task | in-task, 64 configs | in-task, 300 configs | leave-one-task-out, all configs | "
            "same, random-search configs |" + extra_head, "|---|---|---|---|---|---|" + "---|---|" * bool(extra)]
    for name in args.sets:
        cols = columns(name)
        for label, (loop, knob, y, drawn) in data.items():
            X = knob if cols is None else loop[:, cols]
            rng = np.random.default_rng(0)
            cv = [in_task(X[drawn], y[drawn], n, rng) for n in IN_TASK_TRAIN]
            loto = [] if cols is None else list(leave_one_out(data, label, cols, args.model_seeds))
            if extra and cols is not None:
                loto += leave_one_out(data, label, cols, args.model_seeds, extra)
            cells = [f"{s:.2f}" for s in loto] or ["-"] * (2 + 2 * bool(extra))
            rows.append(f"| {name} | {label} | {cv[0]:.2f} | {cv[1]:.2f} | {' | '.join(cells)} |")
            print(rows[-1], flush=True)
    sizes = ", ".join(f"{label}: {len(d[2])} configs, {int(d[3].sum())} from random search"
                      for label, d in data.items())
    extra_note = (f" Extra tasks (`--extra-logs {' '.join(args.extra_logs)}`): "
                  + ", ".join(f"{key} ({n} configs)" for key, n in zip(extra.task_keys, np.bincount(extra.groups)))
                  + "; added to every leave-one-task-out training set." if extra else "")
    sets = " ".join(repr(n) if " " in n else n for n in args.sets)
    options = "".join([f" --sets {sets}" * (args.sets != list(FEATURE_SETS)),
                       f" --model-seeds {args.model_seeds}" * (args.model_seeds != MODEL_SEEDS),
                       f" --extra-logs {' '.join(args.extra_logs)}" * bool(args.extra_logs)])
    report("feature_ablation", "\n".join([
        "## Feature ablation (`benchmarks/ablate_features.py`)", "",
        f"Command: `python benchmarks/ablate_features.py --work {args.work}{options}`; {time.time() - t0:.0f} s. "
        f"Logs of `bench_search.py` ({sizes}). Spearman rank correlation of the rank-objective model's scores "
        f"with measured throughput. In-task: trained on 64 or 300 of the task's random-search configs, tested "
        f"on the others (mean of {SPLITS} splits). Leave-one-task-out: trained on all configs of the other "
        f"tasks (mean of {args.model_seeds} model seeds). Feature sets: all = the loop row; no register / no curve / "
        "no levels = without the register tile / the reuse curve / the per-loop-level block; pooled = "
        "PerStoreFeature's pooled rows only; knob = knob values (in-task only: they do not line up across "
        "templates)." + extra_note, "", *rows]))


if __name__ == "__main__":
    main()
