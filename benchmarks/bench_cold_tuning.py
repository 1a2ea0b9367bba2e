"""Tuning a model's kernels warm vs with the cache flushed before every timed call, judged by the built model.

    python benchmarks/bench_cold_tuning.py --models transformer_layer resnet18 --trials 400 --seeds 0 1 2

In a model, a kernel finds its weights out of cache (other layers ran since its last call), while tuning times it
back to back on the same, cached, operands. For each seed, tunes the model twice (xgb, same budget): with the
default warm timing and with `RunnerOptions(cache_flush=True)` (`--cache-flush`); logs under --work (resumable).
Then builds every log and times all builds in rounds, one after the other, least median per build. Stores one
result per model, `cold_tuning_MODEL`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import reexec_clean, report
from bench_model import median_ms

MODES = {"warm": False, "flushed": True}


def compare(name: str, args) -> list[str]:
    """Table rows of one model: per seed, the warm- and flush-tuned builds, and their mean."""
    import torch
    from models import MODELS  # benchmarks/models.py

    from autotune.measure import LocalRunner, RunnerOptions
    from autotune.model import build_model, capture, tune_model

    model, inputs = MODELS[name]()
    captured = capture(model, inputs)
    builds, tune_min = {}, {}
    for seed in args.seeds:
        for mode, flush in MODES.items():
            log = os.path.join(args.work, f"{name}-{mode}-s{seed}.jsonl")
            runner = LocalRunner(RunnerOptions(cache_flush=flush))
            t0 = time.time()
            try:
                tune_model(captured, trials=args.trials, log=log, tuner="xgb", seed=seed, runner=runner)
            finally:
                runner.close()
            tune_min[mode, seed] = (time.time() - t0) / 60
            builds[mode, seed] = build_model(captured, logs=[log])
    tvm_args = {key: built.tvm_args(*inputs) for key, built in builds.items()}
    torch.set_num_threads(args.threads)
    best = {key: float("inf") for key in [*builds, "torch"]}
    for _ in range(args.rounds):
        for key, built in builds.items():
            best[key] = min(best[key], median_ms(lambda b=built, a=tvm_args[key]: b.run_tvm(a)))
        with torch.no_grad():
            best["torch"] = min(best["torch"], median_ms(lambda: model(*inputs)))
    eager = best["torch"]

    def row(seed: str, warm: float, flushed: float, minutes: str) -> str:
        return (f"| {name} | {seed} | {warm:.2f} | {flushed:.2f} | {warm / flushed:.2f}x | {eager:.2f} | "
                f"{eager / warm:.2f}x / {eager / flushed:.2f}x | {minutes} |")

    rows = [row(str(seed), best["warm", seed], best["flushed", seed],
                f"{tune_min['warm', seed]:.1f} / {tune_min['flushed', seed]:.1f}") for seed in args.seeds]
    mean = {mode: statistics.mean(best[mode, s] for s in args.seeds) for mode in MODES}
    return rows + [row("mean", mean["warm"], mean["flushed"], "")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["transformer_layer"])
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--work", default=os.path.join(ROOT, "benchmarks", "work", "cold_tuning"))
    ap.add_argument("--tag", default="", help="appended to each result's name (cold_tuning_MODEL, e.g. to keep another machine's beside it)")
    args = ap.parse_args()
    reexec_clean(args.threads)
    warnings.simplefilter("ignore")
    from autotune.target import cpu_name, host_llvm_target

    os.makedirs(args.work, exist_ok=True)
    cpu = cpu_name(host_llvm_target(args.threads))
    for name in args.models:
        rows = compare(name, args)
        body = "\n".join([
            f"## Tuning warm vs with the cache flushed: {name} (`benchmarks/bench_cold_tuning.py`)", "",
            f"CPU {cpu}, {args.threads} threads. Command: `python benchmarks/bench_cold_tuning.py --models {name} "
            f"--trials {args.trials} --seeds {' '.join(map(str, args.seeds))} --work {args.work}"
            + (f" --tag {args.tag}" if args.tag else "") + "`. Per seed, two "
            f"`tune_model` runs (xgb, {args.trials} trials): warm timing (the default) and `--cache-flush` (the "
            "operands after the first flushed before every timed call); each log built and the builds timed in "
            f"{args.rounds} rounds one after the other, PyTorch eager last in each round (least median ms per "
            "inference; tuning minutes include compilation, retuning skipped when a log is complete).", "",
            "| model | seed | warm-tuned build ms | flush-tuned build ms | speed-up of flush-tuned | PyTorch eager ms "
            "(same rounds) | speed-up vs PyTorch, warm / flushed | tuning min warm / flushed |",
            "|---|---|---|---|---|---|---|---|", *rows])
        report(f"cold_tuning_{name}{args.tag}", body)


if __name__ == "__main__":
    main()
