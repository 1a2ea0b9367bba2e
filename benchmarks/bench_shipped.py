"""Zero-trial builds: each model built with no log, once with the tuning knowledge autotune ships for this machine's
class (`autotune.shipped`) and once without (heuristic configs), against PyTorch eager and Inductor; all outputs
checked against eager, the four timed in turn, round after round, in one process.

    python benchmarks/bench_shipped.py --models resnet18 transformer_layer mobilenet_blocks

Models in the corpus the knowledge was made from (`recipes/shipped_knowledge.py`) find their own tasks there;
the others the nearest ones'. Stores the result `shipped_zero_trial` (or the one `--section` names).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import reexec_clean, report
from bench_model import median_ms


def bench_one(name: str, factory, rounds: int) -> str:
    """The table row of one model."""
    import numpy as np
    import torch

    from autotune.model import build_model, capture

    model, inputs = factory()
    captured = capture(model, inputs)
    shipped, heuristic = build_model(captured, shipped=True), build_model(captured, shipped=False)
    kernels = shipped.report.kernels
    exact = sum(bool(k.shipped) and not k.nearest for k in kernels)
    nearest = sum(bool(k.shipped) and k.nearest for k in kernels)
    reverted = sum("the heuristic config's speed here" in k.reason or "failed here" in k.reason for k in kernels)
    compiled = torch.compile(model)
    with torch.no_grad():
        ref = model(*inputs).numpy()
        for out in (shipped(*inputs), heuristic(*inputs), compiled(*inputs).numpy()):
            np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-3, atol=1e-3)
        args = [b.tvm_args(*inputs) for b in (shipped, heuristic)]
        runs = [lambda: shipped.run_tvm(args[0]), lambda: heuristic.run_tvm(args[1]), lambda: model(*inputs),
                lambda: compiled(*inputs)]
        times = [[] for _ in runs]
        for _ in range(rounds):  # interleaved: a slow phase of the machine hits every arm alike
            for i, run in enumerate(runs):
                times[i].append(median_ms(run, warmup=1, min_runs=5, min_seconds=0.3))
    ms = [statistics.median(t) for t in times]
    return (f"| {name} | {exact} + {nearest} of {len(kernels)} ({reverted} slower, heuristic kept) | {ms[0]:.2f} | {ms[1]:.2f} | {ms[2]:.2f} | "
            f"{ms[3]:.2f} | {ms[1] / ms[0]:.2f}x | {ms[2] / ms[0]:.2f}x | {ms[3] / ms[0]:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=["resnet18", "transformer_layer", "mobilenet_blocks"])
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="print the table; store no result")
    ap.add_argument("--section", default="shipped_zero_trial", help="result name (benchmarks/results/NAME/)")
    args = ap.parse_args()
    reexec_clean(args.threads)
    warnings.simplefilter("ignore")
    import torch
    import tvm
    from models import MODELS  # benchmarks/models.py

    from autotune.shipped import Knowledge, classes_of
    from autotune.target import cpu_name, host_llvm_target

    torch.set_num_threads(args.threads)
    target = host_llvm_target(args.threads)
    shipped = Knowledge.load(target).best()
    rows = [bench_one(name, MODELS[name], args.rounds) for name in args.models]
    body = "\n".join([
        "## Zero-trial builds with the shipped knowledge (benchmarks/bench_shipped.py)", "",
        (f"CPU {cpu_name(target)} (classes {', '.join(c.name for c in classes_of(target))}), {args.threads} threads; "
         f"TVM {tvm.__version__}; float32, batch 1; {len(shipped)} shipped tasks of "
         f"{', '.join(sorted({c.name for c, _ in shipped})) or 'no class'}. No tuning: \"shipped\" builds every task "
         "on the shipped config of the same task (exact) or the nearest one, the latter measured against the "
         "heuristic config at build and kept where faster; \"heuristic\" on the default configs. "
         f"Median of {args.rounds} interleaved rounds, each a median of at least 5 calls; outputs checked against "
         "eager."), "",
        "| model | tasks shipped (exact + nearest) | shipped ms | heuristic ms | eager ms | Inductor ms | "
        "vs heuristic | vs eager | vs Inductor |",
        "|---|---|---|---|---|---|---|---|---|", *rows])
    report(args.section, body, write=not args.no_write)


if __name__ == "__main__":
    main()
