"""A dynamic dense kernel on a GPU: its compiled cover (uKernels on the analytic model's heights, heuristic or
shipped configs, nothing tuned) against a kernel compiled for each exact size on the same template's heuristic
config, and the cost of the cover at M=1 (the dynamic kernel against its uKernel alone). Every output is checked
against numpy first.

    python3 benchmarks/gpu_dynamic.py --out DIR                  # on a GPU machine (benchmarks/gpu_check.sh run)
    python3 benchmarks/gpu_dynamic.py --target llvm --out DIR    # rehearsal on the CPU

Results go to DIR/gpu_dynamic.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

SIZES = (1, 7, 31, 64, 127, 257, 509, 1024)


def device_timer(target_kind: str):
    """(device, seconds per call of fn(*args) with the device's queue drained: `gpu_model.synced_ms`)."""
    import tvm

    from gpu_model import synced_ms

    dev = tvm.cuda(0) if target_kind == "cuda" else tvm.cpu(0)
    return dev, lambda fn, args: synced_ms(lambda: fn(*args), dev.sync) / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--shape", default="batch=1..1024,in_features=768,out_features=768")
    ap.add_argument("--out", default="benchmarks/work/gpu_dynamic")
    args = ap.parse_args()

    import numpy as np
    import tvm

    from autotune.dynamic.dispatch import DynamicKernel, UKernel
    from autotune.dynamic.load import default_ukernels
    from autotune.dynamic.spec import parse_dynamic
    from autotune.model.default_schedule import default_template_func
    from autotune.operators import ukernel_template_ref
    from autotune.target import compile_kernel
    from autotune.templates import resolve

    spec = parse_dynamic("dense", args.shape, target=args.target)
    t0 = time.perf_counter()
    ukernels, source = default_ukernels(spec)
    kernel = DynamicKernel(spec, ukernels)
    kernel.executable
    build_s = time.perf_counter() - t0
    print(kernel.describe(SIZES), flush=True)
    dev, seconds = device_timer(spec.target["kind"])
    n, k = spec.task(1).shape["out_features"], spec.task(1).shape["in_features"]
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, k)).astype("float32")
    template = resolve(ukernel_template_ref("dense", spec.task(1).target_kind))
    rows = []
    for m in SIZES:
        x = rng.standard_normal((m, k)).astype("float32")
        want = x.astype(np.float64) @ w.T.astype(np.float64)
        got = kernel(x, w)
        err = float(np.abs(got - want).max())
        assert err < 1e-4 * math.sqrt(k) * max(1.0, float(np.abs(want).max())), (m, err)
        out = np.zeros((m, n), "float32")
        dyn_args = [tvm.runtime.tensor(a, dev) for a in kernel.args(x, w, out)]
        t_dyn = seconds(kernel.executable["main"], dyn_args)
        task = spec.task(m)
        config = default_template_func(template, task)[1]
        exact = UKernel(m, task, template.kernel(task, config)["main"], 0.0, None, template, config)
        static = compile_kernel(tvm.IRModule({"main": exact.func}), spec.target)["main"]
        st_args = [tvm.runtime.tensor(a, dev) for a in (x, exact.fixed_operand(1, w), out)]
        t_static = seconds(static, st_args)
        rows.append({"m": m, "plan": kernel.plan(m).describe(), "dynamic_us": t_dyn * 1e6,
                     "static_us": t_static * 1e6, "ratio": t_static / t_dyn, "max_err": err})
        print(f"M={m:<5d} {rows[-1]['plan']:<24s} dynamic {t_dyn * 1e6:8.1f} us  exact-size kernel "
              f"{t_static * 1e6:8.1f} us  ({t_static / t_dyn:.2f}x)", flush=True)
    # the cover's cost at M=1: the dynamic kernel against the uKernel it runs, alone on arrays of its height
    uk = kernel.ukernels[kernel.plan(1).pieces[0].kernel]
    alone = compile_kernel(tvm.IRModule({"main": uk.func}), spec.target)["main"]
    ux = rng.standard_normal((uk.height, k)).astype("float32")
    u_args = [tvm.runtime.tensor(a, dev) for a in (ux, uk.fixed_operand(1, w), np.zeros((uk.height, n), "float32"))]
    t_alone = seconds(alone, u_args)
    one = next(r for r in rows if r["m"] == 1)
    overhead = one["dynamic_us"] - t_alone * 1e6
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    print(f"the cover at M=1: {overhead:.1f} us per call ({one['dynamic_us']:.1f} us in all, the {uk.height}-row "
          f"uKernel alone {t_alone * 1e6:.1f} us); dynamic vs exact-size kernels: {geo:.2f}x geomean; "
          f"uKernels on {source} configs; built in {build_s:.1f} s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_dynamic.json").write_text(json.dumps({
        "spec": str(spec), "target": spec.target, "device": str(dev), "ukernels": [u.height for u in kernel.ukernels],
        "source": source, "rows": rows, "cover_us_at_1": overhead, "ukernel_alone_us": t_alone * 1e6,
        "geomean_vs_exact": geo, "build_s": build_s, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }, indent=1))


if __name__ == "__main__":
    main()
