"""Dynamic shapes: one dynamic matmul kernel (a few tuned uKernels) vs a kernel tuned for each exact M, and torch.

For N=K=768 and N=3072,K=768, over 24 values of M in 1..2048: tune each static shape with
--static-trials (xgb, no transfer, each shape on its own), tune the dynamic kernel's uKernels
(autotune.dynamic.tune_dynamic), then time static, dynamic and torch side by side in this process
and check every output against numpy. Logs and tuning wall times live under --work (re-running
resumes; times of earlier runs are kept). Stores the tables as the result `dynamic_shapes`.

    python benchmarks/bench_dynamic.py                 # full run (see --help for the budget)
    python benchmarks/bench_dynamic.py --quick         # 4 values of M, 4 trials: a smoke test
    python benchmarks/bench_dynamic.py --no-tune       # time and report from existing logs
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _baselines import best_of, torch_fn
from _common import reexec_clean, report

MS = [1, 2, 3, 5, 8, 13, 17, 31, 48, 64, 97, 128, 157, 211, 256, 384, 509, 640, 768, 1000, 1024, 1279, 1543, 2048]
MS_QUICK = [1, 17, 100, 509]
CONFIGS = [(768, 768), (3072, 768)]  # (N, K)
M_RANGE = (1, 2048)


def trial_estimate_s(m: int, n: int, k: int) -> float:
    """Rough wall seconds of one static trial here: build share + load/check + 3 timed repeats."""
    return 1.3 + 4 * 2.0 * m * n * k / 15e9


class Times:
    """Tuning wall seconds per run key, summed over invocations (a resumed run adds only its new work)."""

    def __init__(self, path: Path):
        self.path = path
        self.data = json.loads(path.read_text()) if path.exists() else {}

    def add(self, key: str, seconds: float) -> None:
        self.data[key] = self.data.get(key, 0.0) + seconds
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=1, sort_keys=True))

    def get(self, key: str) -> float:
        return self.data.get(key, 0.0)


def _count(log: Path, key: str | None = None) -> int:
    from autotune import load_records

    return sum(key is None or r.task.key == key for r in load_records(log)) if log.exists() else 0


def tune_all(args, ms, builder, runner, times: Times) -> None:
    from autotune import load_records, make_task, tune
    from autotune.dynamic import parse_dynamic, tune_dynamic

    dynamic_logs: list[Path] = []  # the uKernels of one (N, K) warm-start the tallest of the next

    for n, k in CONFIGS:
        for m in ms:
            task = make_task("matmul", {"M": m, "N": n, "K": k})
            log = Path(args.work) / f"static-N{n}-K{k}" / f"{task.key}.jsonl"
            before, t0 = _count(log, task.key), time.perf_counter()
            tune(task, trials=args.static_trials, tuner=args.tuner, log=log, batch_size=args.batch_size,
                 builder=builder, runner=runner)
            if _count(log, task.key) > before:
                times.add(f"static {task.key}", time.perf_counter() - t0)
            print(f"static M={m} N={n} K={k}: {time.perf_counter() - t0:.0f} s", flush=True)
        spec = parse_dynamic("matmul", f"M={M_RANGE[0]}..{M_RANGE[1]},N={n},K={k}")
        log = Path(args.work) / f"dynamic-N{n}-K{k}.jsonl"
        before, t0 = _count(log), time.perf_counter()
        trials = args.transfer_trials if dynamic_logs else args.dynamic_trials
        res = tune_dynamic(spec, trials=trials, log=log, tuner=args.tuner,
                           ukernel_trials=args.ukernel_trials, batch_size=args.batch_size, builder=builder,
                           runner=runner, transfer=load_records(dynamic_logs) if dynamic_logs else None)
        dynamic_logs.append(log)
        if _count(log) > before:
            times.add(f"dynamic {spec}", time.perf_counter() - t0)
        print(f"dynamic {spec}: uKernels {[u.height for u in res.ukernels]}, {res.trials} trials, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)


def aligned_inputs(m: int, n: int, k: int, seed: int):
    import numpy as np

    from autotune.dynamic import aligned_empty

    rng = np.random.default_rng(seed)
    a, b, c = aligned_empty((m, k)), aligned_empty((k, n)), aligned_empty((m, n))
    a[...] = rng.uniform(-1, 1, a.shape)
    b[...] = rng.uniform(-1, 1, b.shape)
    return a, b, c


def compare(args, ms, times: Times) -> str:
    import numpy as np
    import torch

    from autotune import build_best, make_task
    from autotune.dynamic import load, parse_dynamic

    torch.set_num_threads(args.threads)
    sections, all_ratios, all_torch = [], [], []
    static_s = dynamic_s = 0.0
    static_trials = dynamic_trials = 0
    for n, k in CONFIGS:
        spec = parse_dynamic("matmul", f"M={M_RANGE[0]}..{M_RANGE[1]},N={n},K={k}")
        dlog = Path(args.work) / f"dynamic-N{n}-K{k}.jsonl"
        kernel = load(dlog, spec)  # every uKernel in the log (all its tuning time is counted below)
        dynamic_s += times.get(f"dynamic {spec}")
        dynamic_trials += _count(dlog)
        rows, ratios, vs_torch = [], [], []
        for m in ms:
            task = make_task("matmul", {"M": m, "N": n, "K": k})
            slog = Path(args.work) / f"static-N{n}-K{k}" / f"{task.key}.jsonl"
            static_s += times.get(f"static {task.key}")
            static_trials += _count(slog, task.key)
            static = build_best(slog, task).executable["main"]
            a, b, c = aligned_inputs(m, n, k, seed=m)
            ref = a.astype(np.float64) @ b
            tol = 1e-4 * math.sqrt(k) * max(1.0, float(np.abs(ref).max()))
            static(a, b, c)
            assert np.abs(c - ref).max() < tol, f"static kernel wrong at M={m}"
            c[...] = np.nan
            kernel.run(a, b, c)
            assert np.abs(c - ref).max() < tol, f"dynamic kernel wrong at M={m}"
            t_static, t_dyn, t_torch = best_of([lambda f=static, x=(a, b, c): f(*x),
                                                lambda f=kernel.run, x=(a, b, c): f(*x), torch_fn(task, [a, b])])
            ratios.append(t_static / t_dyn)
            vs_torch.append(t_torch / t_dyn)
            gf = task.flops / 1e9
            rows.append(f"| {m} | {kernel.plan(m).describe()} | {gf / t_static:.0f} | {gf / t_dyn:.0f} | "
                        f"{gf / t_torch:.0f} | {t_static / t_dyn:.2f}x | {t_torch / t_dyn:.2f}x |")
            print(rows[-1], flush=True)
        all_ratios += ratios
        all_torch += vs_torch
        uk = ", ".join(f"M={u.height} ({u.task.flops / u.mean_s / 1e9:.0f} GFLOPS, "
                       f"{_count(dlog, u.task.key)} trials)" for u in kernel.ukernels)
        sections += [f"### N={n}, K={k}", "", f"uKernels: {uk}", "",
                     ("| M | dynamic plan | static GFLOPS | dynamic GFLOPS | torch GFLOPS | dynamic vs static | "
                      "dynamic vs torch |"), "|---|---|---|---|---|---|---|", *rows, "",
                     f"Geometric mean: dynamic vs static **{_geo(ratios):.2f}x**, dynamic vs torch "
                     f"{_geo(vs_torch):.2f}x.",
                     ""]
    overhead = dispatch_overhead(kernel)
    summary = [
        (f"- Dynamic vs per-shape tuned kernels, geometric mean over all {len(all_ratios)} shapes: "
         f"**{_geo(all_ratios):.2f}x** (goal >= 0.9x); vs torch {_geo(all_torch):.2f}x."),
        (f"- Tuning wall time: static {static_s:.0f} s ({static_trials} trials, {len(ms) * len(CONFIGS)} shapes) vs "
         f"dynamic {dynamic_s:.0f} s ({dynamic_trials} trials): **{static_s / max(dynamic_s, 1e-9):.1f}x less** "
         f"(goal >= 20x); trials {static_trials / max(dynamic_trials, 1):.1f}x fewer."),
        f"- The cover compiled into the kernel (plan lookup, pad copies), called from Python: {overhead}.",
    ]
    return "\n".join(summary + [""] + sections)


def dispatch_overhead(kernel) -> str:
    """The compiled dynamic kernel at M=1 against its uKernel alone (compiled on its own, called on arrays of its
    height): the cost of the cover (plan lookup, pad copies) per call."""
    import tvm

    from autotune.target import compile_kernel

    n, k = kernel.spec.task(1).shape["N"], kernel.spec.task(1).shape["K"]
    a, b, c = aligned_inputs(1, n, k, seed=0)
    args = kernel.args(a, b, c)
    dynamic = kernel.executable["main"]
    uk = kernel.ukernels[kernel.plan(1).pieces[0].kernel]
    alone = compile_kernel(tvm.IRModule({"main": uk.func}), kernel.spec.target)["main"]
    ua, ub, uc = aligned_inputs(uk.height, n, k, seed=0)
    uargs = [ua, uk.fixed_operand(1, ub), uc]
    t_dyn, t_uk = best_of([lambda: dynamic(*args), lambda: alone(*uargs)])
    return (f"{(t_dyn - t_uk) * 1e6:.1f} us per call at M=1 (N={n}: {t_dyn * 1e6:.1f} us in all, the "
            f"{uk.height}-row uKernel alone {t_uk * 1e6:.1f} us)")


def dispatch_only(args, times: Times) -> str:
    from autotune import load_records
    from autotune.dynamic import load, parse_dynamic, tune_dynamic

    n, k = CONFIGS[0]
    spec = parse_dynamic("matmul", f"M={M_RANGE[0]}..{M_RANGE[1]},N={n},K={k}")
    log = Path(args.work) / f"dynamic-N{n}-K{k}.jsonl"
    before, t0 = _count(log), time.perf_counter()
    tune_dynamic(spec, trials=args.dynamic_trials, log=log, tuner=args.tuner, ukernel_trials=args.ukernel_trials,
                 batch_size=args.batch_size)
    if _count(log) > before:
        times.add(f"dynamic {spec}", time.perf_counter() - t0)
    kernel = load(log, spec)
    rng_check(kernel, n, k)
    return f"{spec}, {len(load_records(log))} records: the cover compiled into the kernel: {dispatch_overhead(kernel)}"


def rng_check(kernel, n: int, k: int) -> None:
    """The dynamic kernel against numpy at a few sizes (the timing means nothing if it is wrong)."""
    import numpy as np

    for m in (1, 5, 77, 131):
        a, b, c = aligned_inputs(m, n, k, seed=m)
        ref = a.astype(np.float64) @ b
        kernel.run(a, b, c)
        assert np.abs(c - ref).max() < 1e-4 * math.sqrt(k) * max(1.0, float(np.abs(ref).max())), m


def _geo(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--static-trials", type=int, default=16, help="trials per static shape (B)")
    ap.add_argument("--dynamic-trials", type=int, help="trials of the tallest uKernel (default: B)")
    ap.add_argument("--transfer-trials", type=int,
                    help="trials of the tallest uKernel of N=3072, which starts from N=768's (default: B/2)")
    ap.add_argument("--ukernel-trials", type=int, help="trials of each smaller uKernel (default: B/8, >= 2)")
    ap.add_argument("--tuner", default="xgb")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="benchmarks/work/dynamic")
    ap.add_argument("--quick", action="store_true", help="4 values of M, 4 trials (smoke test; not written)")
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--ms", help="comma-separated values of M instead of the 24 (partial runs; not written)")
    ap.add_argument("--dispatch-only", action="store_true",
                    help="tune (or resume) only the dynamic kernel of the first (N, K) and print the cost of its cover "
                         "at M=1 (not written)")
    ap.add_argument("--configs", help="comma-separated NxK instead of 768x768,3072x768 (partial runs; not written)")
    args = ap.parse_args()
    reexec_clean(args.threads)
    if args.quick:
        args.static_trials, args.work = 4, os.path.join(args.work, "quick")
    args.dynamic_trials = args.dynamic_trials or args.static_trials
    args.transfer_trials = args.transfer_trials or max(2, args.dynamic_trials // 2)
    ms = MS_QUICK if args.quick else MS
    partial = args.quick or bool(args.ms or args.configs)
    if args.ms:
        ms = [int(v) for v in args.ms.split(",")]
    if args.configs:
        CONFIGS[:] = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]

    from autotune.measure import LocalBuilder, LocalRunner

    times = Times(Path(args.work) / "tuning_times.json")
    if args.dispatch_only:
        print(dispatch_only(args, times))
        return
    est = sum(trial_estimate_s(m, n, k) for n, k in CONFIGS for m in ms) * args.static_trials
    print(f"{len(ms)} values of M x {len(CONFIGS)} (N, K); static tuning estimate about {est / 60:.0f} min "
          f"(new logs), then a few minutes of dynamic tuning and timing", flush=True)
    if not args.no_tune:
        builder, runner = LocalBuilder(), LocalRunner()
        try:
            tune_all(args, ms, builder, runner, times)
        finally:
            builder.close()
            runner.close()
    body = compare(args, ms, times)
    command = "python benchmarks/bench_dynamic.py" + ("" if args.static_trials == 16 else
                                                       f" --static-trials {args.static_trials}")
    text = "\n".join([
        "## Dynamic shapes: one dynamic matmul kernel vs per-shape tuned kernels (`benchmarks/bench_dynamic.py`)",
        "",
        (f"Command: `{command}`; {args.threads} threads (TVM_NUM_THREADS, torch). Static: each of the "
         f"{len(ms)} values of M tuned on its own ({args.static_trials} trials, {args.tuner}, batch {args.batch_size}, "
         f"no transfer). Dynamic: uKernels chosen by the analytic model for M={M_RANGE[0]}..{M_RANGE[1]}, the tallest "
         f"tuned with {args.dynamic_trials} trials (xgb; N=3072: {args.transfer_trials}, starting from the uKernels of "
         f"N=768: a quarter of its trials are their best configs mapped, and xgb pre-trains on them), each other one "
         f"measures "
         f"{args.ukernel_trials or 'the default number of'} configs mapped from the best ones tuned before it "
         f"(`autotune.dynamic.tune_dynamic`). Every kernel is "
         f"called from Python on the same aligned numpy arrays, every output checked against numpy; times are the "
         f"least of 3 interleaved medians of 5 samples, same process. Tuning times are wall seconds "
         f"of the tuning calls (builds + measurements + search)."),
        "", body])
    report("dynamic_shapes", text, write=not partial)


if __name__ == "__main__":
    main()
