"""tune-model with and without transfer between the model's tasks, at the same trial budget.

Each run tunes every task of the model in one log (`tune_model`, xgb tuner, loop features) in a folder of its
own, so no other log transfers: "cold" turns transfer off (every task's model learns from its own records
only), "transfer" pre-trains each round's model on the records of the model's other tasks so far (the default).
Scored by the tuned-kernel time of one inference (sum over tasks of calls x best time) after each share of the
budget, from the logs (first measurements), and by the end-to-end time of the two builds of each seed, timed
one after the other in rounds in this process. Stores the table as the result `model_transfer`.

    python benchmarks/bench_model_transfer.py --model resnet18 --trials 288 --seeds 0 1
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from _common import reexec_clean, report
from bench_model import median_ms

VARIANTS = {"cold": [], "transfer": None}  # tune_model's transfer logs (None: the default, the logs beside)
WORK = "benchmarks/work/model_transfer"
SHARES = (2 / 3, 5 / 6, 1.0)  # after every task's warm-up round (16 x tasks trials) at the default budget


def kernel_time_curve(records, weights: dict[str, int], trials: int) -> list[float]:
    """Tuned-kernel seconds per inference after each trial (inf until every task has a valid config)."""
    best: dict[str, float] = {}
    out = []
    for r in records[:trials]:
        if r.result.ok:
            best[r.task.key] = min(best.get(r.task.key, math.inf), r.result.mean_s)
        out.append(sum(w * best.get(k, math.inf) for k, w in weights.items()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--trials", type=int, default=288)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds of the builds")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--work", default=WORK)
    ap.add_argument("--no-write", action="store_true", help="print the table; store no result")
    ap.add_argument("--section", default="model_transfer", help="result name (benchmarks/results/NAME/)")
    args = ap.parse_args()
    reexec_clean(args.threads)
    warnings.simplefilter("ignore")
    import numpy as np
    import torch
    from models import MODELS  # benchmarks/models.py

    from autotune import load_records
    from autotune.model import build_model, capture, extract_tasks, tune_model

    model, inputs = MODELS[args.model]()
    captured = capture(model, inputs)
    weights = {t.key: w for t, w in extract_tasks(captured)}
    with torch.no_grad():
        ref = model(*inputs).numpy()
    curves, builds, minutes = {}, {}, {}
    for seed in args.seeds:
        for variant, transfer in VARIANTS.items():
            log = os.path.join(args.work, f"{args.model}-{variant}-s{seed}", "model.jsonl")
            os.makedirs(os.path.dirname(log), exist_ok=True)
            t0 = time.time()
            tune_model(captured, trials=args.trials, log=log, tuner="xgb", seed=seed, transfer=transfer,
                       progress=lambda msg: None)
            minutes[variant, seed] = (time.time() - t0) / 60
            curves[variant, seed] = kernel_time_curve(list(load_records(log)), weights, args.trials)
            built = build_model(captured, logs=[log])
            np.testing.assert_allclose(built(*inputs), ref, rtol=1e-3, atol=1e-3)
            builds[variant, seed] = built
            print(f"{variant} seed {seed}: tuned-kernel time {curves[variant, seed][-1] * 1e3:.3f} ms "
                  f"({minutes[variant, seed]:.1f} min)", file=sys.stderr, flush=True)
    times: dict[tuple[str, int], list[float]] = {key: [] for key in builds}
    for _ in range(args.rounds):
        for key, built in builds.items():
            tvm_args = built.tvm_args(*inputs)
            times[key].append(median_ms(lambda b=built, a=tvm_args: b.run_tvm(a)))

    def at(c, share):  # inf while a task has no valid config yet
        return c[max(0, round(share * args.trials) - 1)] * 1e3

    rows = [(f"| variant | seed | tuned-kernel ms after {' / '.join(f'{round(s * args.trials)}' for s in SHARES)} "
             "trials | end-to-end ms (least of rounds) | tuning min |"), "|---|---|---|---|---|"]
    for (variant, seed), c in curves.items():
        rows.append(f"| {variant} | {seed} | {' / '.join(f'{at(c, s):.2f}' for s in SHARES)} | "
                    f"{min(times[variant, seed]):.2f} | {minutes[variant, seed]:.1f} |")
    mean = {v: [np.mean([at(curves[v, s], share) for s in args.seeds]) for share in SHARES] for v in VARIANTS}
    e2e = {v: np.mean([min(times[v, s]) for s in args.seeds]) for v in VARIANTS}
    for v in VARIANTS:
        rows.append(f"| {v} | mean | {' / '.join(f'{x:.2f}' for x in mean[v])} | {e2e[v]:.2f} | |")
    body = "\n".join([
        "## tune-model: transfer between a model's tasks (`benchmarks/bench_model_transfer.py`)", "",
        (f"Command: `python benchmarks/bench_model_transfer.py --model {args.model} --trials {args.trials} --seeds "
         f"{' '.join(map(str, args.seeds))}"
         + (f" --work {args.work}" if args.work != WORK else "")
         + (f" --section {args.section}" if args.section != "model_transfer" else "")
         + f"`; {args.threads} threads; {len(weights)} tasks. Each run tunes all tasks "
         "in one log in a folder of its own (xgb, loop features, 16 trials a round): \"cold\" without transfer, "
         "\"transfer\" with each round's model pre-trained on the records of the model's other tasks so far. "
         "Tuned-kernel ms: sum over tasks of calls x best first measurement, from the log. End-to-end: the two "
         f"builds of every seed timed one after the other, {args.rounds} rounds, least median per build."), "",
        *rows])
    report(args.section, body, write=not args.no_write)


if __name__ == "__main__":
    main()
