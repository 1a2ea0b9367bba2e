"""Whole models built for a GPU: autotune's build (tuned kernels from --logs, else heuristic template configs;
DLight for the other functions) against TVM's own CUDA pipeline (DLight for every function, nothing tuned) and
PyTorch eager on the same device, each checked against PyTorch on the CPU first.

    python3 benchmarks/gpu_model.py --models resnet18 transformer_layer --out DIR          # on a GPU machine
    python3 benchmarks/gpu_model.py --target llvm --models resnet18                        # rehearsal on a CPU

benchmarks/gpu_check.sh runs it inside a device lease. Results go to DIR/gpu_model.json after each model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from bench_model import median_ms  # noqa: E402


def synced_ms(fn, sync) -> float:
    """Median wall time of fn() followed by sync() (a device's queue drained), in milliseconds."""
    return median_ms(lambda: (fn(), sync()), min_runs=10, min_seconds=0.5)


def tvm_default_build(captured, target: dict):
    """TVM's own pipeline for the target on the same Relax module (DLight schedules on CUDA), as a callable."""
    import tvm
    from tvm import relax

    from autotune.target import to_tvm_target

    tvm_target = to_tvm_target(target)
    executable = tvm.compile(captured.mod, target=tvm_target)
    dev = tvm.device(target["kind"] if target["kind"] == "cuda" else "cpu")
    vm = relax.VirtualMachine(executable, dev)
    return vm, dev


def outputs(out) -> list:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [a for item in out for a in outputs(item)]


def bench(name: str, target: dict, logs: list[str]) -> dict:
    import numpy as np
    import torch
    import tvm

    from autotune.model import build_model, capture
    from models import MODELS

    model, inputs = MODELS[name]()
    with torch.no_grad():
        ref = model(*inputs).numpy()
    captured = capture(model, inputs)
    t0 = time.time()
    built = build_model(captured, logs=logs, target=target)
    build_s = time.time() - t0
    row: dict = {"model": name, "build_s": round(build_s, 1), "report": built.report.summary()}
    got = built(*inputs)
    row["max_abs_err"] = float(np.abs(got - ref).max())
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)
    dev = built.tvm_device()
    args = built.tvm_args(*inputs)
    row["autotune_ms"] = synced_ms(lambda: built.run_tvm(args), dev.sync)
    try:
        vm, tdev = tvm_default_build(captured, target)
        targs = [tvm.runtime.tensor(np.ascontiguousarray(x.numpy()), tdev) for x in inputs]
        np.testing.assert_allclose(outputs(vm["main"](*targs))[0], ref, rtol=1e-3, atol=1e-3)
        row["tvm_default_ms"] = synced_ms(lambda: vm["main"](*targs), tdev.sync)
    except Exception as err:  # noqa: BLE001 - TVM's own pipeline refusing a model is a result too
        row["tvm_default_error"] = f"{type(err).__name__}: {str(err).splitlines()[-1][:200] if str(err) else ''}"
    cuda = target["kind"] == "cuda" and torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    tmodel, tinputs = model.to(device), [x.to(device) for x in inputs]
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False  # fp32 as ours
    torch.backends.cudnn.benchmark = True
    with torch.no_grad():
        row["torch_ms"] = synced_ms(lambda: tmodel(*tinputs), torch.cuda.synchronize if cuda else (lambda: None))
    row["torch_device"] = device
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "transformer_layer"])
    ap.add_argument("--target", default="cuda", help="cuda (the GPU here, its arch read off it) or llvm")
    ap.add_argument("--logs", nargs="*", default=[], help="tuning logs (none: heuristic configs)")
    ap.add_argument("--out", default=".", help="folder for gpu_model.json")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from autotune.target import parse_target

    if args.target == "cuda":
        import tvm

        arch = "sm_" + tvm.cuda(0).compute_version.replace(".", "") if tvm.cuda(0).exist else "sm_90"
        target = parse_target({"kind": "cuda", "arch": arch})
    else:
        target = parse_target(args.target)
    out = Path(args.out) / "gpu_model.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models:
        try:
            row = bench(name, target, args.logs)
        except Exception:  # noqa: BLE001 - one model failing must not lose the others' results
            row = {"model": name, "error": traceback.format_exc()[-2000:]}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "report"}), flush=True)
        print(row.get("report", ""), flush=True)
        out.write_text(json.dumps({"target": target, "rows": rows}, indent=1))
    print("| model | autotune ms | TVM default pipeline ms | PyTorch eager ms | vs TVM | vs PyTorch | max abs err |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "autotune_ms" in r:
            ours, tvm_ms, torch_ms = r["autotune_ms"], r.get("tvm_default_ms"), r["torch_ms"]
            vs_tvm = f"{tvm_ms / ours:.2f}x" if tvm_ms else r.get("tvm_default_error", "-")
            print(f"| {r['model']} | {ours:.3f} | {tvm_ms or float('nan'):.3f} | {torch_ms:.3f} | {vs_tvm} | "
                  f"{torch_ms / ours:.2f}x | {r['max_abs_err']:.1e} |")


if __name__ == "__main__":
    main()
