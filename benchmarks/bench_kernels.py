"""Tune matmul 1024^3 and a ResNet-18 3x3 conv2d, then time the best kernels next to torch (oneDNN/MKL)
and numpy in the same process. Stores the table as the result `kernels` (or the one `--section` names).

    python benchmarks/bench_kernels.py --trials 200            # tune (resumes logs) + compare
    python benchmarks/bench_kernels.py --trials 200 --no-tune  # compare only, from existing logs
    python benchmarks/bench_kernels.py --tasks "dense 128x768->1001" --section kernels_dense_odd_n  # other shapes
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _baselines import PREPACKED_TORCH, median_time, torch_fn  # noqa: E402
from _common import blas_info, reexec_clean, write_section  # noqa: E402
from bench_search import OTHER_TASKS  # noqa: E402

TASKS = {
    "matmul 1024^3": ("matmul", "M=1024,N=1024,K=1024"),
    "conv2d 64x56x56 3x3": ("conv2d", "N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,padding=1"),
}
DEPTHWISE_TASKS = {  # MobileNetV2's depthwise 3x3 layers (224x224 input): early, middle, late
    f"depthwise {c}x{h}x{h} 3x3": ("depthwise_conv2d", f"N=1,C={c},H={h},W={h},R=3,S=3,stride=1,padding=1")
    for c, h in ((32, 112), (144, 56), (384, 14))
}
GROUPED_TASKS = {  # grouped 3x3 layers: RegNetY-800MF's stage 3 (group width 16), ResNeXt-50 32x4d's stages 1 and 3
    "group_conv2d 320x14x14 g20": ("group_conv2d", "N=1,C=320,H=14,W=14,K=320,R=3,S=3,groups=20,padding=1"),
    "group_conv2d 128x56x56 g32": ("group_conv2d", "N=1,C=128,H=56,W=56,K=128,R=3,S=3,groups=32,padding=1"),
    "group_conv2d 512x14x14 g32": ("group_conv2d", "N=1,C=512,H=14,W=14,K=512,R=3,S=3,groups=32,padding=1"),
}
GEMV_TASKS = {  # batch-1 linear layers (a language model's decoding step): BERT-base's FFN, a 4096-wide model's
    "dense 1x768->3072": ("dense", "batch=1,in_features=768,out_features=3072"),
    "dense 1x4096->4096": ("dense", "batch=1,in_features=4096,out_features=4096"),
    "dense 1x4096->11008": ("dense", "batch=1,in_features=4096,out_features=11008"),
}
ALL_TASKS = {**TASKS, **OTHER_TASKS, **DEPTHWISE_TASKS, **GROUPED_TASKS, **GEMV_TASKS}  # --tasks may name these


def _numpy_fn(task, arrays):
    if task.op == "matmul":
        return lambda: arrays[0] @ arrays[1]
    return lambda: task.opdef.reference(task.shape, arrays)  # im2col view + tensordot (BLAS)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--tuner", default="xgb")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--logs", default="benchmarks/work/kernels")
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(ALL_TASKS))
    ap.add_argument("--section", default="kernels", help="result name (benchmarks/results/NAME/)")
    args = ap.parse_args()
    reexec_clean(args.threads)

    import numpy as np
    import torch

    from autotune import build_best, load_records, make_task, tune
    from autotune.operators import random_inputs
    from autotune.records import split_retimes

    torch.set_num_threads(args.threads)
    rows, notes = [], []
    for label in args.tasks:
        task = make_task(*ALL_TASKS[label])
        log = os.path.join(args.logs, f"{task.key}.jsonl")
        t0 = time.time()
        if not args.no_tune:
            tune(task, trials=args.trials, tuner=args.tuner, log=log)
        tune_s = time.time() - t0
        trials = len(split_retimes(r for r in load_records(log) if r.task.key == task.key)[0])  # re-timings left out
        kernel = build_best(log, task)
        arrays = random_inputs(task.opdef, task.shape, "float32", seed=1)
        ref = task.opdef.reference(task.shape, arrays)
        assert np.abs(kernel(*arrays) - ref).max() < 1e-2, "tuned kernel disagrees with numpy"
        gf = lambda s: task.flops / s / 1e9  # noqa: E731
        ours = sorted(kernel.time(*arrays, repeat=7, min_repeat_ms=200))[3]
        t_torch = median_time(torch_fn(task, arrays))
        if task.op in PREPACKED_TORCH:  # a layer's weight: ours is packed ahead, so torch may take it packed too
            t_torch = min(t_torch, median_time(torch_fn(task, arrays, prepacked=True)))
        t_numpy = median_time(_numpy_fn(task, arrays))
        rows.append(f"| {label} | {trials} | {gf(ours):.0f} | {gf(t_torch):.0f} | {gf(t_numpy):.0f} | "
                    f"{t_torch / ours:.2f}x | {t_numpy / ours:.2f}x |")
        notes.append(f"- {label}: best config #{kernel.config.index} `{kernel.config.to_dict()['knobs']}`; "
                     f"tuning wall time {tune_s:.0f} s")
        print(rows[-1], flush=True)
    body = "\n".join([
        "## Kernels: tuned autotune kernel vs torch and numpy (`benchmarks/bench_kernels.py`)",
        "",
        f"Command: `python benchmarks/bench_kernels.py --trials {args.trials} --tuner {args.tuner}"
        + (" --tasks " + " ".join(f'"{t}"' for t in args.tasks) if args.tasks != list(TASKS) else "")
        + (f" --section {args.section}" if args.section != "kernels" else "") + "`; "
        f"{args.threads} threads everywhere (TVM_NUM_THREADS, torch.set_num_threads, OpenBLAS); "
        f"OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset in this process. numpy BLAS: {blas_info()}; "
        f"torch {torch.__version__} (matmul: MKL, convolutions: oneDNN; dense and conv2d: the faster of the weight "
        "as it is and oneDNN's kernel on it packed ahead). Median of 7 timed samples, same inputs, same process.",
        "",
        "| task | trials | autotune GFLOPS | torch GFLOPS | numpy GFLOPS | vs torch | vs numpy |",
        "|---|---|---|---|---|---|---|",
        *rows, "", *notes])
    write_section(args.section, body)
    print(body)


if __name__ == "__main__":
    main()
