"""Narrow element types on the CPU, side by side in one process: our tuned kernel in bf16 and int8 against PyTorch
in the same type and against our own tuned fp32 kernel of the same shape. Every kernel of ours is checked against
the numpy reference before it is timed.

PyTorch's side: bf16 `linear`/`matmul`/`conv2d` (oneDNN), the convolution both on NCHW tensors (as ours takes them)
and on channels-last ones (oneDNN's own layout, no conversion in the call); int8 `torch._int_mm` (int32 out, as
ours) and, for the convolution, the x86 quantized conv2d (`torch.ops.quantized.conv2d`, uint8 x int8, requantized to
uint8 out: a smaller output than our int32). The table's "vs torch" is against the fastest of PyTorch's variants.

Each (shape, dtype) is tuned first (resumable logs in benchmarks/work/dtypes/), then all variants are timed in
interleaved rounds; the table gives the median per call and the ratios. The CPU's dot-product extensions (and
whether PyTorch's oneDNN may use AMX) decide what each side runs: the machine's flags are stored with the result.

    python benchmarks/bench_dtypes.py                     # tune 64 trials per task, time, store `dtypes`
    python benchmarks/bench_dtypes.py --trials 16 --rounds 3 --no-write
    python benchmarks/bench_dtypes.py --without-amx       # as on a CPU without AMX: store `dtypes_without_amx`

`--without-amx` takes AMX out of our target (its kernels take the AVX-512 VNNI and BF16 paths, or widen) and out of
PyTorch's oneDNN (`ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16`, set before torch loads): the picture on a CPU with
AVX-512 VNNI and BF16 but no AMX (AMD Zen 4 and 5, Intel Cooper Lake), on this machine's cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from _common import reexec_clean, report  # noqa: E402

SHAPES = {  # name -> (op, shape)
    "dense 128x768->3072": ("dense", "batch=128,in_features=768,out_features=3072"),
    "matmul 1024^3": ("matmul", "M=1024,N=1024,K=1024"),
    "conv2d 64x56x56 3x3": ("conv2d", "N=1,C=64,H=56,W=56,K=64,R=3,S=3,padding=1"),
}
WORK = HERE / "work" / "dtypes"


def _ours(op: str, shape: str, dtype: str, trials: int, target: dict, work: Path):
    """The best tuned kernel of the task (tuned to `trials` first), as a callable on its inputs."""
    from autotune.kernel import compile_config
    from autotune.operators import check_output, random_inputs, reduction_size, reference_output
    from autotune.records import best_record, load_records
    from autotune.task import make_task
    from autotune.tune import tune

    task = make_task(op, shape, dtype, target=target)
    log = work / f"{op}-{dtype}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    tune(task, trials=trials, tuner="xgb", log=log)
    best = best_record([r for r in load_records(log) if r.task == task])
    kernel = compile_config(task, best.input.config.index, best.input.template)
    inputs = random_inputs(task.opdef, task.shape, dtype, seed=1)
    out = kernel(*inputs)
    problem = check_output(out, reference_output(task.opdef, task.shape, dtype, inputs),
                           reduction_size(task.opdef, task.shape), dtype)
    if problem:
        raise SystemExit(f"{task}: tuned kernel is wrong: {problem}")
    args = kernel._args(inputs)
    return task, (lambda: kernel.executable(*args)), inputs


def _torch(op: str, dtype: str, inputs, params) -> dict[str, object]:
    """PyTorch's calls of the same op on the same inputs (variant name -> callable)."""
    import torch

    a, b = (torch.from_numpy(x.astype("float32")) for x in inputs)
    if op == "conv2d":
        return _torch_conv(dtype, a, b, params["padding"])
    if dtype == "int8":  # _int_mm takes B as [K, N]: dense's W [N, K] transposed once, outside the timing
        a, b = a.to(torch.int8), b.to(torch.int8)
        b = b.t().contiguous() if op == "dense" else b
        return {"_int_mm": lambda: torch._int_mm(a, b)}
    t = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    a, b = a.to(t), b.to(t)
    if op == "dense":
        return {"linear": lambda: torch.nn.functional.linear(a, b)}
    return {"matmul": lambda: torch.matmul(a, b)}


def _torch_conv(dtype: str, x, w, padding: int) -> dict[str, object]:
    """bf16: conv2d on NCHW and on channels-last tensors; int8: the x86 quantized conv2d (uint8 input of the same
    integers shifted by its zero point 128, int8 weight, requantized output)."""
    import warnings

    import torch

    if dtype == "int8":
        torch.backends.quantized.engine = "x86"
        with warnings.catch_warnings():  # quantized tensors are deprecated, and what the x86 conv takes
            warnings.simplefilter("ignore")
            qx = torch.quantize_per_tensor(x, 1.0, 128, torch.quint8)
            qw = torch.quantize_per_tensor(w, 1.0, 0, torch.qint8)
        packed = torch.ops.quantized.conv2d_prepack(qw, None, [1, 1], [padding] * 2, [1, 1], 1)
        return {"quantized conv2d": lambda: torch.ops.quantized.conv2d(qx, packed, 64.0, 128)}
    x, w = x.to(torch.bfloat16), w.to(torch.bfloat16)
    xc, wc = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))
    return {"NCHW": lambda: torch.nn.functional.conv2d(x, w, padding=padding),
            "channels-last": lambda: torch.nn.functional.conv2d(xc, wc, padding=padding)}


def _time(fn, seconds: float = 0.3) -> float:
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        n += 1
    return (time.perf_counter() - t0) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--without-amx", action="store_true", help="neither our kernels nor PyTorch's use AMX")
    args = parser.parse_args()
    if args.without_amx:
        os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX512_CORE_BF16"
    reexec_clean(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    from autotune.target import cpu_features, cpu_name, parse_target

    target = parse_target("llvm")
    work = WORK / "without_amx" if args.without_amx else WORK
    if args.without_amx:
        target = {**target, "mattr": [m for m in target.get("mattr", ()) if "amx" not in m]}
    have = sorted(f for f in cpu_features(target) if "vnni" in f or "bf16" in f or f.startswith("amx"))
    rows, ratios = [], {"bfloat16": [], "int8": []}
    for name, (op, shape) in SHAPES.items():
        variants = {}
        for dtype in ("float32", "bfloat16", "int8"):
            task, fn, inputs = _ours(op, shape, dtype, args.trials, target, work)
            variants[("ours", dtype)] = fn
            if dtype != "float32":
                for label, theirs in _torch(op, dtype, inputs, task.shape).items():
                    variants[("torch", dtype, label)] = theirs
        times = {k: [] for k in variants}
        for _ in range(args.rounds):  # interleaved
            for k, fn in variants.items():
                times[k].append(_time(fn))
        med = {k: statistics.median(v) for k, v in times.items()}
        for dtype in ("bfloat16", "int8"):
            ours, f32 = med[("ours", dtype)], med[("ours", "float32")]
            theirs = {k[2]: t for k, t in med.items() if k[:2] == ("torch", dtype)}
            best = min(theirs, key=theirs.get)
            listed = "; ".join(f"{label} {t * 1e3:.3f}" for label, t in theirs.items())
            rows.append(f"| {name} | {dtype} | {ours * 1e3:.3f} | {task.flops / ours / 1e9:.0f} | {listed} | "
                        f"{theirs[best] / ours:.2f}x | {f32 * 1e3:.3f} | {f32 / ours:.2f}x |")
            ratios[dtype].append((theirs[best] / ours, f32 / ours))
    means = "".join(f"- {dtype}: {statistics.geometric_mean(r[0] for r in rs):.2f}x the fastest torch, "
                    f"{statistics.geometric_mean(r[1] for r in rs):.2f}x our fp32\n" for dtype, rs in ratios.items())
    body = ("# Narrow dtypes: bf16 and int8 GEMMs and conv2d against torch in the same type and our fp32 "
            "(`benchmarks/bench_dtypes.py`)\n\n"
            f"CPU {cpu_name(target)}; dot-product features: {', '.join(have) or 'none'}; {args.threads} threads; "
            + ("AMX off for both sides (our target without it; oneDNN at AVX512_CORE_BF16); " if args.without_amx
               else "")
            + f"{args.trials} trials per task (xgb); median of {args.rounds} interleaved rounds.\n\n"
            "| shape | dtype | ours ms | ours G/s | torch ms | vs fastest torch | our fp32 ms | vs our fp32 |\n"
            "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    name = "dtypes_without_amx" if args.without_amx else "dtypes"
    report(name, body + f"\nGeometric means over the shapes:\n{means}", write=not args.no_write)


if __name__ == "__main__":
    main()
