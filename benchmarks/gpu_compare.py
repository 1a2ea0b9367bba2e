"""On a CUDA machine: tune conv2d (64x56x56 3x3) and matmul 1024^3 for the GPU, then time the best
kernels next to torch (cuDNN / cuBLAS) on the same GPU in the same process.

    python3 benchmarks/gpu_compare.py --trials 200 --out DIR     (benchmarks/gpu_check.sh runs it)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

TASKS = {
    "conv2d 64x56x56 3x3": ("conv2d", "N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,padding=1"),
    "matmul 1024^3": ("matmul", "M=1024,N=1024,K=1024"),
}


def torch_time(task, arrays) -> float:
    """Median ms of the torch op on the GPU, with CUDA events."""
    import torch
    import torch.nn.functional as F

    ts = [torch.from_numpy(a).cuda() for a in arrays]
    fn = (lambda: torch.matmul(*ts)) if task.op == "matmul" else (lambda: F.conv2d(ts[0], ts[1], padding=1))
    for _ in range(10):
        fn()
    times = []
    for _ in range(50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 20 / 1e3)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--tuner", default="xgb")
    ap.add_argument("--out", default="benchmarks/work/gpu")
    args = ap.parse_args()
    import tvm

    from autotune import build_best, make_task, tune
    from autotune.ops import random_inputs

    if not tvm.cuda(0).exist:
        sys.exit("no CUDA device here: run this on a GPU machine (benchmarks/gpu_check.sh)")
    arch = "sm_" + tvm.cuda(0).compute_version.replace(".", "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, (op, shape) in TASKS.items():
        task = make_task(op, shape, target="cuda", arch=arch)
        log = out / f"{task.key}.jsonl"
        t0 = time.time()
        res = tune(task, trials=args.trials, tuner=args.tuner, log=log, tuner_options={"transfer": []}
                   if args.tuner == "xgb" else None)
        kernel = build_best(log, task)
        arrays = random_inputs(task.opdef, task.shape, "float32", seed=1)
        ours = sorted(kernel.time(*arrays, repeat=15, min_repeat_ms=100))[7]
        theirs = torch_time(task, arrays)
        gf = lambda s: task.flops / s / 1e9  # noqa: E731
        rows.append({"task": label, "arch": arch, "trials": len(res.records), "errors": res.errors,
                     "autotune_gflops": gf(ours), "torch_gflops": gf(theirs), "ratio_vs_torch": theirs / ours,
                     "tune_s": time.time() - t0, "config": kernel.config.to_dict()})
        print(json.dumps(rows[-1]), flush=True)
    (out / "gpu_results.json").write_text(json.dumps(rows, indent=1))
    print("| task | autotune GFLOPS | torch GFLOPS | ratio |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {r['autotune_gflops']:.0f} | {r['torch_gflops']:.0f} | {r['ratio_vs_torch']:.2f}x |")


if __name__ == "__main__":
    main()
