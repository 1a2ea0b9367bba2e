"""A/B of two sets of xgb tuner options (`XGBOptions`) on a tune-model run of a dynamic model, whose many uKernel
tasks each get rounds of a few trials: its tuning time, and the speed of what it tuned.

Each arm (`--arms NAME:KEY=VALUE,...`, two of them) tunes bench_dynamic_model.py's GPT block (prefill, lengths
1..1024) from scratch, `--trials` trials in rounds of an equal share per task, once per seed, the arms alternating
(A, B, B, A, ...); then the models built from each arm's first log are timed interleaved at a few lengths (the
least of 3 medians), every output checked against eager.

    python benchmarks/ab_tuner_options.py --arms full:sa_full_plan=1 scaled:sa_full_plan=8 --trials 56 --seeds 2
    python benchmarks/ab_tuner_options.py --arms in-process:feature_workers=0 workers:feature_workers=2
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _baselines import best_of  # noqa: E402
from _common import reexec_clean  # noqa: E402

LENGTHS = (1, 7, 31, 97, 256, 1024)


def parse_arm(text: str) -> tuple[str, dict[str, object]]:
    """`NAME:KEY=VALUE,KEY=VALUE` -> (NAME, {KEY: VALUE}), values as Python literals where they parse."""
    import ast

    name, _, spec = text.partition(":")
    options = {}
    for item in filter(None, spec.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"error: arm {text!r}: {item!r} is not KEY=VALUE")
        try:
            options[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            options[key.strip()] = value.strip()
    return name, options


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arms", nargs=2, required=True, metavar="NAME:KEY=VALUE,...",
                    help="the two arms: a name and XGBOptions fields (e.g. workers:feature_workers=2)")
    ap.add_argument("--trials", type=int, default=56)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="benchmarks/work/ab_tuner_options")
    args = ap.parse_args()
    arms = dict(parse_arm(a) for a in args.arms)
    if len(arms) != 2:
        raise SystemExit("error: the two arms need different names")
    reexec_clean(args.threads)

    import numpy as np
    import torch

    from autotune.errors import AutotuneError
    from autotune.model import build_model, extract_tasks, tune_model
    from autotune.tuners.options import XGBOptions
    from bench_dynamic_model import block, export_dynamic, phase_inputs

    model = block()
    program = export_dynamic(model, "prefill")
    rounds = max(1, args.trials // len(extract_tasks(program)))
    try:
        for options in arms.values():
            XGBOptions(**options)
    except (TypeError, AutotuneError) as err:
        raise SystemExit(f"error: {err}") from None
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    for seed in range(args.seeds):
        order = list(arms) if seed % 2 == 0 else list(reversed(arms))
        for arm in order:
            log = Path(args.work) / f"{arm}-s{seed}" / "log.jsonl"
            shutil.rmtree(log.parent, ignore_errors=True)
            options = XGBOptions(**arms[arm])
            t0 = time.perf_counter()
            tune_model(program, trials=args.trials, log=log, round_trials=rounds, seed=seed, tuner_options=options,
                       progress=lambda msg: None)
            seconds[arm].append(time.perf_counter() - t0)
            print(f"{arm} seed {seed}: {seconds[arm][-1]:.0f} s", flush=True)
    built = {arm: build_model(program, logs=[Path(args.work) / f"{arm}-s0" / "log.jsonl"]) for arm in arms}
    first, second = arms
    print("tuning s, mean per arm: " + ", ".join(f"{arm} {np.mean(s):.0f} ({', '.join(f'{v:.0f}' for v in s)})"
                                                 for arm, s in seconds.items()))
    print("length | " + " | ".join(f"{arm} ms" for arm in arms) + f" | {second} vs {first}")
    ratios = []
    for length in LENGTHS:
        inputs = phase_inputs("prefill", length)
        with torch.no_grad():
            want = [o.numpy() for o in model(*inputs)]
        args_of = {}
        for arm, b in built.items():
            for got, w in zip(b(*inputs), want):
                np.testing.assert_allclose(np.asarray(got), w, rtol=1e-3, atol=1e-3, err_msg=f"{arm} t={length}")
            args_of[arm] = b.tvm_args(*inputs)
        times = best_of([lambda b=b, a=args_of[arm]: b.run_tvm(a) for arm, b in built.items()])
        ratios.append(times[0] / times[1])
        print(f"{length} | " + " | ".join(f"{t * 1e3:.3f}" for t in times) + f" | {ratios[-1]:.2f}x", flush=True)
    geo = float(np.exp(np.mean(np.log(ratios))))
    print(f"{second} vs {first}, geometric mean over the lengths: {geo:.2f}x (above 1: {second}'s build is faster)")


if __name__ == "__main__":
    main()
