"""A/B of the xgb tuner's annealing on small plans (`XGBOptions.sa_full_plan`) where it matters most: the tune-model
run of a dynamic model, whose many uKernel tasks each get rounds of a few trials.

Arms: "full" (the default) anneals every plan for all of `sa_steps` (sa_full_plan=1), "scaled" plans of fewer
than 8 configs for proportionally fewer steps (sa_full_plan=8). Each arm tunes bench_dynamic_model.py's GPT block
(prefill, lengths 1..1024) from scratch, `--trials` trials in rounds of an equal share per task, once per seed, the
arms alternating (full, scaled, scaled, full, ...); then the models built from each arm's first log are timed
interleaved at a few lengths (the least of 3 medians), every output checked against eager.

    python benchmarks/ab_small_plans.py --trials 56 --seeds 2
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

ARMS = {"full": 1, "scaled": 8}  # sa_full_plan
LENGTHS = (1, 7, 31, 97, 256, 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=56)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="benchmarks/work/ab_small_plans")
    args = ap.parse_args()
    reexec_clean(args.threads)

    import numpy as np
    import torch

    from autotune.model import build_model, extract_tasks, tune_model
    from autotune.tuners.options import XGBOptions
    from bench_dynamic_model import block, export_dynamic, phase_inputs

    model = block()
    program = export_dynamic(model, "prefill")
    rounds = max(1, args.trials // len(extract_tasks(program)))
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for seed in range(args.seeds):
        order = list(ARMS) if seed % 2 == 0 else list(reversed(ARMS))
        for arm in order:
            log = Path(args.work) / f"{arm}-s{seed}" / "log.jsonl"
            shutil.rmtree(log.parent, ignore_errors=True)
            options = XGBOptions(sa_full_plan=ARMS[arm])
            t0 = time.perf_counter()
            tune_model(program, trials=args.trials, log=log, round_trials=rounds, seed=seed, tuner_options=options,
                       progress=lambda msg: None)
            seconds[arm].append(time.perf_counter() - t0)
            print(f"{arm} seed {seed}: {seconds[arm][-1]:.0f} s", flush=True)
    built = {arm: build_model(program, logs=[Path(args.work) / f"{arm}-s0" / "log.jsonl"]) for arm in ARMS}
    print("tuning s, mean per arm: " + ", ".join(f"{arm} {np.mean(s):.0f} ({', '.join(f'{v:.0f}' for v in s)})"
                                                 for arm, s in seconds.items()))
    print("length | " + " | ".join(f"{arm} ms" for arm in ARMS) + " | scaled vs full")
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
    print(f"scaled vs full, geometric mean over the lengths: {geo:.2f}x (above 1: the scaled arm's build is faster)")


if __name__ == "__main__":
    main()
