"""End-to-end models: autotune build with tuned logs vs the same build without logs vs PyTorch eager (and, with
`--inductor`, vs `torch.compile`'s default backend).

For ResNet-18, a TransformerEncoderLayer (d_model 768, seq 128) and a MobileNetV2-style stack:
extract the tasks, tune them in one budget per model (resumes the logs), build twice, check
both builds against PyTorch and time all of them in one process. Stores the table as the result
`models` (or the one `--section` names). `--dtype bfloat16` runs the models and PyTorch in bf16 (their
products are then bf16 tasks; outputs are checked within a few bf16 steps). `--dtype int8` quantizes each model
with PyTorch's PT2E flow (torchao's X86InductorQuantizer, calibrated on 4 random inputs): its convolutions and linear
layers are int8 tasks, outputs are checked against the quantized model's reference (eager), and PyTorch's int8
runtime is Inductor with freezing (oneDNN's quantized kernels): "PyTorch ms" is then that eager reference, which
computes in float32, and `--inductor` times the int8 kernels.

    python benchmarks/bench_model.py --trials 400              # tune (resumable) + compare
    python benchmarks/bench_model.py --trials 400 --no-tune    # compare only, from existing logs
    python benchmarks/bench_model.py --models transformer_layer --dtype bfloat16 --inductor --section models_bf16
    python benchmarks/bench_model.py --models resnet18 --dtype int8 --inductor --section models_int8
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from _common import reexec_clean, report


def median_ms(fn, warmup: int = 2, min_runs: int = 5, min_seconds: float = 1.0) -> float:
    """Median wall time of fn() in milliseconds."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def bench_one(name: str, factory, trials: int, logs_dir: str, tune: bool, threads: int, dtype: str,
              inductor: bool) -> tuple[str, list[str]]:
    """(table row, extraction lines) for one model."""
    import numpy as np
    import torch

    from autotune.model import build_model, capture, extract_tasks, tune_model

    model, inputs = in_dtype(*factory(), dtype)
    captured = capture(model, inputs)
    tasks = extract_tasks(captured)
    total = sum(t.flops * w for t, w in tasks)
    lines = [f"**{name}**: {len(tasks)} tasks, {sum(w for _, w in tasks)} calls, {total / 1e9:.2f} GFLOP", ""]
    lines += [f"- {t} x{w}: {100 * t.flops * w / total:.1f}% of FLOPs" for t, w in tasks]
    log = os.path.join(logs_dir, f"{name}.jsonl" if dtype == "float32" else f"{name}-{dtype}.jsonl")
    tune_s = 0.0
    if tune and trials > 0:
        t0 = time.time()
        result = tune_model(captured, trials=trials, log=log, tuner="xgb")
        tune_s = time.time() - t0
        print(result.summary(), file=sys.stderr)
    tuned = build_model(captured, logs=[log] if os.path.exists(log) else [])
    default = build_model(captured)
    print(tuned.report.summary(), file=sys.stderr)
    with torch.no_grad():
        ref = model(*inputs).float().numpy()
    # float32: 1e-3; bf16: a few bf16 roundings; int8: an activation's rounding that falls the other way (the
    # reference sums in float32) moves the output by a few of its quantization steps
    tol = {"float32": 1e-3, "int8": 0.02}.get(dtype, 8 * 2.0 ** -8) * (1.0 if dtype == "float32" else
                                                                      float(np.abs(ref).max()))
    errs = []
    for built in (tuned, default):
        out = np.asarray(built(*inputs)).astype(np.float32)
        np.testing.assert_allclose(out, ref, rtol=1e-3, atol=tol)
        errs.append(float(np.abs(out - ref).max()))
    torch.set_num_threads(threads)
    if dtype == "int8":  # PyTorch's int8 runtime for a PT2E model: Inductor with the weights frozen
        torch._inductor.config.freezing = True
    compiled = torch.compile(model) if inductor else None
    with torch.no_grad():
        if compiled is not None:
            np.testing.assert_allclose(compiled(*inputs).float().numpy(), ref, rtol=1e-3, atol=tol)
        torch_ms = median_ms(lambda: model(*inputs))
        inductor_ms = median_ms(lambda: compiled(*inputs)) if compiled is not None else None
    ms = []
    for built in (tuned, default):
        args = built.tvm_args(*inputs)
        ms.append(median_ms(lambda b=built, a=args: b.run_tvm(a)))
    n_tuned = sum(k.tuned for k in tuned.report.kernels)
    versus = f" {inductor_ms:.2f} | {inductor_ms / ms[0]:.2f}x |" if inductor_ms is not None else ""
    row = (f"| {name} | {trials} | {n_tuned}/{len(tasks)} | {ms[0]:.2f} | {ms[1]:.2f} | {torch_ms:.2f} | "
           f"{torch_ms / ms[0]:.2f}x |{versus} {max(errs):.1e} | {tune_s / 60:.1f} |")
    return row, lines


def in_dtype(model, inputs, dtype: str):
    """(model, inputs) in `dtype`: float32 as they are, bf16 cast, int8 quantized (`quantized_pt2e`)."""
    import torch

    if dtype == "int8":
        return quantized_pt2e(model, inputs), inputs
    if dtype != "float32":
        return model.to(getattr(torch, dtype)), tuple(x.to(getattr(torch, dtype)) for x in inputs)
    return model, inputs


def quantized_pt2e(model, inputs, calibration: int = 4):
    """`model` quantized to int8 by PyTorch's PT2E flow (torchao's X86InductorQuantizer, default config), calibrated
    on `calibration` random inputs like `inputs` (seeded)."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model, inputs).module(), quantizer)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(calibration):
            prepared(*(torch.randn(x.shape, generator=generator) for x in inputs))
    return convert_pt2e(prepared)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=400, help="total trials per model (the log's count)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--models", nargs="*", default=["resnet18", "transformer_layer", "mobilenet_blocks"])
    ap.add_argument("--logs", default="benchmarks/work/models")
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="print the table; store no result")
    ap.add_argument("--section", default="models", help="result name (benchmarks/results/NAME/)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "int8"),
                    help="the models' and PyTorch's (int8: PT2E, see above)")
    ap.add_argument("--inductor", action="store_true", help="also time torch.compile's default backend (Inductor)")
    args = ap.parse_args()
    reexec_clean(args.threads)
    warnings.simplefilter("ignore")
    import tvm
    from models import MODELS  # benchmarks/models.py

    from autotune.target import cpu_name, host_llvm_target

    os.makedirs(args.logs, exist_ok=True)
    rows, details = [], []
    for name in args.models:
        row, lines = bench_one(name, MODELS[name], args.trials, args.logs, not args.no_tune, args.threads, args.dtype,
                               args.inductor)
        rows.append(row)
        details += lines + [""]
        print(row, file=sys.stderr)
    cpu = cpu_name(host_llvm_target(args.threads))
    body = "\n".join([
        "## Whole models (benchmarks/bench_model.py)", "",
        (f"CPU {cpu}, {args.threads} threads for TVM (TVM_NUM_THREADS) and PyTorch (set_num_threads); "
        f"TVM {tvm.__version__}; {args.dtype}; batch 1; median wall time per inference in one process. "
        "\"tuned\" uses the best schedules of a `tune_model` run (xgb tuner) with the stated total trial budget; "
        "\"no logs\" is the same build with heuristic template configs and generic schedules."), "",
        ("| model | trials | tasks tuned | tuned ms | no logs ms | PyTorch ms | speed-up vs PyTorch |"
         + (" Inductor ms | speed-up vs Inductor |" if args.inductor else "") + " max abs err | tuning min |"),
        "|---|---|---|---|---|---|---|" + ("---|---|" if args.inductor else "") + "---|---|",
        *rows, "", "### Extracted tasks", "", *details])
    report(args.section, body, write=not args.no_write)


if __name__ == "__main__":
    main()
