"""A/B of whole-model builds made by two checkouts: build from each, then time the builds side by side.

    python benchmarks/ab_build.py build resnet18 /abs/before.so              # from the old checkout
    python benchmarks/ab_build.py build resnet18 /abs/after.so               # from the new one
    python benchmarks/ab_build.py time resnet18 /abs/before.so /abs/after.so --section ab_build_NAME

`build` captures a model of benchmarks/models.py and builds it with `--logs` (none: every task on its default,
heuristic schedule), then exports the compiled model. `time` loads the exported builds in one process, checks
that they compute the same outputs (and against PyTorch), and times them in rounds, one after the other (least
median ms per build); it stores its table as the result `--section` names (what the A/B decided goes to
docs/experiments.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import report
from bench_model import median_ms


def build(args) -> None:
    from models import MODELS  # benchmarks/models.py

    from autotune.model import build_model, capture

    warnings.simplefilter("ignore")
    model, inputs = MODELS[args.model]()
    t0 = time.time()
    built = build_model(capture(model, inputs), logs=args.logs)
    built.export_library(args.paths[0])
    print(f"{args.paths[0]}: built in {time.time() - t0:.0f} s\n{built.report.summary()}")


def time_builds(args) -> None:
    import numpy as np
    import torch
    import tvm
    from models import MODELS
    from tvm import relax

    from autotune.model.library import numpy_outputs
    from autotune.target import parse_target, use_target_threads

    use_target_threads(parse_target("llvm"))
    model, inputs = MODELS[args.model]()
    with torch.no_grad():
        out = model(*inputs)
    expected = [t.numpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]
    tvm_args = [tvm.runtime.tensor(x.numpy()) for x in inputs]
    vms = {p: relax.VirtualMachine(tvm.runtime.load_module(p), tvm.cpu())["main"] for p in args.paths}
    for path, run in vms.items():
        for got, want in zip(numpy_outputs(run(*tvm_args)), expected):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=path)
    best = {p: float("inf") for p in vms}
    for _ in range(args.rounds):
        for path, run in vms.items():
            best[path] = min(best[path], median_ms(lambda r=run: r(*tvm_args)))
    first = best[args.paths[0]]
    rows = ["| build | ms per inference | speed-up over the first |", "|---|---|---|"]
    rows += [f"| {os.path.basename(p)} | {ms:.2f} | {first / ms:.2f}x |" for p, ms in best.items()]
    report(args.section, "\n".join([
        f"## Whole-model builds side by side (`benchmarks/ab_build.py`, {args.model})", "",
        f"Command: `python benchmarks/ab_build.py time {args.model} {' '.join(map(os.path.basename, args.paths))} "
        f"--section {args.section}`, after `build` from each checkout. Each build's outputs checked against "
        f"PyTorch; {args.rounds} rounds, the builds one after the other in each, least median ms.", "", *rows]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("action", choices=("build", "time"))
    ap.add_argument("model")
    ap.add_argument("paths", nargs="+", help="build: the .so to write; time: the .so files to compare")
    ap.add_argument("--logs", nargs="*", default=[], help="build: tuning logs (none: default schedules)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--section", default="ab_build", help="result name (benchmarks/results/NAME/)")
    args = ap.parse_args()
    build(args) if args.action == "build" else time_builds(args)


if __name__ == "__main__":
    main()
