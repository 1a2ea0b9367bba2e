"""tune-model with and without transfer, at the same trial budget.

Each run tunes every task of the model in one log (`tune_model`, xgb tuner, loop features) in a folder of its
own, so no other log transfers: "cold" turns transfer off (every task's model learns from its own records
only), "transfer" pre-trains each round's model on the records of the model's other tasks so far (the default
without shipped knowledge), "shipped" adds the knowledge autotune ships for this machine's class (`autotune.shipped`:
the corpus's configs by example and its cost model, for a task whose operator the log holds none of; its builds
take the shipped config of a task not yet tuned). Scored by the tuned-kernel time of one inference (sum over tasks
of calls x best time) after each share of the budget, from the logs (first measurements), and by the end-to-end
time of the builds from each share's first records, timed one after the other in rounds in this process. Stores
the table as the result `model_transfer` (or `--section`).

    python benchmarks/bench_model_transfer.py --model resnet18 --trials 288 --seeds 0 1
    python benchmarks/bench_model_transfer.py --trials 400 --shares 0.25 1 --variants cold shipped --seeds 0 \
        --section model_shipped_vs_cold
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

VARIANTS = {"cold": ([], False), "transfer": (None, False), "shipped": (None, True)}  # tune_model's transfer logs
#   (None: the default, the logs beside) and whether the shipped knowledge is used (in tuning and in the builds)
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
    ap.add_argument("--variants", nargs="+", default=["cold", "transfer"], choices=list(VARIANTS))
    ap.add_argument("--shares", type=float, nargs="+", default=list(SHARES),
                    help="shares of the budget after which the model is scored (built from that many records)")
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
    from autotune.records import write_log
    from autotune.target import cpu_name, host_llvm_target

    def trials_at(share: float) -> int:
        return max(1, round(share * args.trials))

    model, inputs = MODELS[args.model]()
    captured = capture(model, inputs)
    weights = {t.key: w for t, w in extract_tasks(captured)}
    with torch.no_grad():
        ref = model(*inputs).numpy()
    curves, builds, minutes = {}, {}, {}
    for seed in args.seeds:
        for variant in args.variants:
            transfer, shipped = VARIANTS[variant]
            log = os.path.join(args.work, f"{args.model}-{variant}-s{seed}", "model.jsonl")
            os.makedirs(os.path.dirname(log), exist_ok=True)
            t0 = time.time()
            tune_model(captured, trials=args.trials, log=log, tuner="xgb", seed=seed, transfer=transfer,
                       shipped=shipped, progress=lambda msg: None)
            minutes[variant, seed] = (time.time() - t0) / 60
            records = list(load_records(log))
            curves[variant, seed] = kernel_time_curve(records, weights, args.trials)
            for share in args.shares:  # the build a user would make from the log after this many trials
                prefix = os.path.join(os.path.dirname(log), "builds", f"first-{trials_at(share)}.jsonl")
                os.makedirs(os.path.dirname(prefix), exist_ok=True)  # not beside the log: no transfer from it
                write_log(prefix, records[:trials_at(share)])
                built = build_model(captured, logs=[prefix], shipped=shipped)
                np.testing.assert_allclose(built(*inputs), ref, rtol=1e-3, atol=1e-3)
                builds[variant, seed, share] = built
            print(f"{variant} seed {seed}: tuned-kernel time {curves[variant, seed][-1] * 1e3:.3f} ms "
                  f"({minutes[variant, seed]:.1f} min)", file=sys.stderr, flush=True)
    times: dict[tuple[str, int, float], list[float]] = {key: [] for key in builds}
    for _ in range(args.rounds):
        for key, built in builds.items():
            tvm_args = built.tvm_args(*inputs)
            times[key].append(median_ms(lambda b=built, a=tvm_args: b.run_tvm(a)))

    def at(c, share):  # "-" while a task has no valid config yet
        ms = c[max(0, trials_at(share) - 1)] * 1e3
        return f"{ms:.2f}" if math.isfinite(ms) else "-"

    after = " / ".join(str(trials_at(s)) for s in args.shares)
    rows = [f"| variant | seed | tuned-kernel ms after {after} trials | end-to-end ms after {after} trials "
            "(least of rounds) | tuning min |", "|---|---|---|---|---|"]
    for (variant, seed), c in curves.items():
        rows.append(f"| {variant} | {seed} | {' / '.join(at(c, s) for s in args.shares)} | "
                    f"{' / '.join(f'{min(times[variant, seed, s]):.2f}' for s in args.shares)} | "
                    f"{minutes[variant, seed]:.1f} |")
    for v in args.variants:
        e2e = [np.mean([min(times[v, seed, s]) for seed in args.seeds]) for s in args.shares]
        rows.append(f"| {v} | mean | | {' / '.join(f'{x:.2f}' for x in e2e)} | |")
    body = "\n".join([
        "## tune-model: transfer between a model's tasks (`benchmarks/bench_model_transfer.py`)", "",
        (f"Command: `python benchmarks/bench_model_transfer.py --model {args.model} --trials {args.trials} --seeds "
         f"{' '.join(map(str, args.seeds))}"
         + (f" --variants {' '.join(args.variants)}" if args.variants != ["cold", "transfer"] else "")
         + (f" --shares {' '.join(f'{x:g}' for x in args.shares)}" if args.shares != list(SHARES) else "")
         + (f" --work {args.work}" if args.work != WORK else "")
         + (f" --section {args.section}" if args.section != "model_transfer" else "")
         + f"`; CPU {cpu_name(host_llvm_target(args.threads))}, {args.threads} threads; {len(weights)} tasks. "
         "Each run tunes all tasks in one log in a folder of its own (xgb, loop features, 16 trials a round): "
         "\"cold\" without transfer, \"transfer\" with each round's model pre-trained on the records of the "
         "model's other tasks so far, \"shipped\" with the shipped knowledge too (tasks of an operator the log holds "
         "none of start from its configs and cost model; builds take its config for a task not tuned yet). "
         "Tuned-kernel ms: sum over tasks of calls x best first measurement, from the log (\"-\": a task has no "
         "record yet). End-to-end: the builds from the log's first records after each share of the budget, all "
         f"timed one after the other, {args.rounds} rounds, least median per build."), "",
        *rows])
    report(args.section, body, write=not args.no_write)


if __name__ == "__main__":
    main()
