"""Offline: does a transferred record pool still help the model once the task has its own records?

For each task, the model is fitted on the first N records of each cold xgb-loop run of `bench_search.py`
(seeds 0-2; `--own-run xgb-transfer`: of the transfer runs) alone, or with the transfer pool xgb-transfer
learns from, weighted as `XGBTuner` weighs it (own rows `n_transfer / half-life` each) for several
half-lives; it then ranks every other config of the task that some run measured (first measurements).
Prints Spearman on all of them and on the top 20%, and the best measured config among the predicted top 10
relative to the best. `--compare features`: the model fitted on the own records alone, with loop features,
with knob features, and the two models' mean rank. No timing: runs on the logs.

    python benchmarks/eval_transfer_weight.py --model-logs benchmarks/work/extra
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_search import MODEL_LOGS, TASKS, first_measurements, transfer_records  # noqa: E402

ARMS = {"own only": None, "half-life 16 (default)": 16, "half-life 4": 4, "half-life 1": 1}
FEATURE_ARMS = ("loop, own only", "knob, own only", "loop and knob, mean rank")  # --compare features


def _rank(p: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(p)) / max(len(p) - 1, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="benchmarks/work/search")
    ap.add_argument("--model-logs", default=MODEL_LOGS)
    ap.add_argument("--tasks", nargs="+", default=["matmul 1024^3", "conv2d 64x56x56 3x3"], choices=list(TASKS))
    ap.add_argument("--own", type=int, nargs="+", default=[32, 64, 96])
    ap.add_argument("--own-run", default="xgb-loop", choices=["xgb-loop", "xgb-transfer"],
                    help="whose first N records are the task's own: a cold run's or a transfer run's")
    ap.add_argument("--compare", choices=("halflife", "features"), default="halflife",
                    help="the arms: weights of the transfer pool, or (own records only) loop vs knob features")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from autotune import load_records, make_task
    from autotune.templates import default_template, space_of
    from autotune.tuners.model_fit import training_rows
    from cost_models.dataset import records_dataset, throughput
    from cost_models.features import FeatureCache, extract
    from cost_models.xgb_model import XGBCostModel, rank_correlation

    work, cache = Path(args.work), FeatureCache()
    print("| task | own records | model | Spearman, all other configs | Spearman, their top 20% | "
          "best of predicted top 10 / best |\n|---|---|---|---|---|---|")
    for label in args.tasks:
        task = make_task(*TASKS[label])
        tdir = work / task.key
        pool = (records_dataset(transfer_records(work, task, Path(args.model_logs)), "loop", 512, 0, cache)
                if args.compare == "halflife" else None)
        template = default_template(task)
        first = first_measurements(tdir)
        every = sorted(first)
        space = space_of(template, task)
        X_all = extract(task, template, space, every, "loop", cache)
        K_all = extract(task, template, space, every, "knob", cache) if args.compare == "features" else None
        y_all = np.array([throughput(first[i]) for i in every])
        where = {i: k for k, i in enumerate(every)}
        for n in args.own:
            scores: dict[str, list[tuple[float, float, float]]] = {}
            for seed in (0, 1, 2):
                run = load_records(tdir / f"{args.own_run}-s{seed}.jsonl")[:n]
                own = sorted({where[r.input.config.index] for r in run})
                test = np.setdiff1d(np.flatnonzero(y_all > 0), own)
                if args.compare == "features":
                    fit = {k: XGBCostModel(seed=seed).fit(X[own], y_all[own], np.zeros(len(own), int)).predict(X[test])
                           for k, X in (("loop", X_all), ("knob", K_all))}
                    preds = dict(zip(FEATURE_ARMS, (fit["loop"], fit["knob"], _rank(fit["loop"]) + _rank(fit["knob"]))))
                else:
                    preds = {arm: XGBCostModel(seed=seed).fit(*training_rows(
                        X_all[own], y_all[own], pool if halflife else None, halflife or 1)).predict(X_all[test])
                        for arm, halflife in ARMS.items()}
                for arm, p in preds.items():
                    yt = y_all[test]
                    top = yt >= np.quantile(yt, 0.8)
                    scores.setdefault(arm, []).append((rank_correlation(p, yt), rank_correlation(p[top], yt[top]),
                                                       yt[np.argsort(-p)[:10]].max() / yt.max()))
            for arm, s in scores.items():
                a, b, c = np.mean(s, axis=0)
                print(f"| {label} | {n} | {arm} | {a:.2f} | {b:.2f} | {c:.3f} |", flush=True)


if __name__ == "__main__":
    main()
