"""`autotune tune OP --shape M=lo..hi,... --dynamic`: rank, tune the uKernels, report the dispatch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cli_args import checked_tuner_options, int_at_least, runner_options
from ..database import TuningDatabase
from ..errors import AutotuneError
from ..files import check_log_path
from ..progress import ProgressBar
from ..transfer import transfer_records
from ..tune import check_search_arguments, ensure_measurable
from .dispatch import DynamicKernel
from .load import derived_ukernels, low_end_heights, make_ukernels, ukernel_records
from .spec import parse_dynamic
from .tuning import default_log_path, tune_dynamic, ukernel_budget


def add_dynamic_arguments(parser: argparse.ArgumentParser) -> None:
    """The `tune` options of the dynamic path."""
    parser.add_argument("--dynamic", action="store_true",
                        help="one parameter is a range (e.g. M=1..4096): tune a few uKernels that cover every size; "
                             "--trials is the tallest uKernel's budget")
    parser.add_argument("--ukernel-trials", type=int_at_least(1),
                        help="--dynamic: trials of each smaller uKernel, at least 1 (default: --trials/8, at least 2)")
    parser.add_argument("--max-ukernels", type=int_at_least(1), default=3,
                        help="--dynamic: uKernels the analytic model chooses at most (>= 1); on a CPU, one more "
                             "of a few rows where the range's low end is below them")


def wants_dynamic(args: argparse.Namespace) -> bool:
    """True for --dynamic; a range without --dynamic is an error that says so."""
    if ".." in args.shape and not args.dynamic:
        raise AutotuneError(f"a range in --shape ({args.shape}) needs --dynamic")
    return bool(args.dynamic)


def cmd_tune_dynamic(args: argparse.Namespace) -> int:
    spec = parse_dynamic(args.op, args.shape, args.dtype, args.target, arch=args.arch)
    options = checked_tuner_options(args)  # validates the tuner and its options
    if args.trials < 1 or (args.ukernel_trials is not None and args.ukernel_trials < 1):
        raise AutotuneError("--trials and --ukernel-trials must be >= 1")
    if args.max_ukernels < 1:
        raise AutotuneError("--max-ukernels must be >= 1")
    check_search_arguments(args.trials, args.batch_size, args.early_stopping, args.seed, args.retime,
                           args.build_timeout, args.template)
    if args.build_only or getattr(args, "rpc_key", None):
        raise AutotuneError("--dynamic measures on this machine only (no --build-only or RPC yet)")
    ensure_measurable(spec.task(spec.lo))
    options_run = runner_options(args)
    log = args.log or str(default_log_path(spec))
    check_log_path(log)  # before any work: a regular file or a new name on a filesystem that can be written
    transfer = transfer_records(spec.task(spec.lo), Path(log), args.transfer)  # seeds, also for model-free tuners
    print(f"tuning {spec} dynamically  log={log}", file=sys.stderr)
    bar: list[ProgressBar] = []

    def start(height: int, budget: int) -> None:
        if bar:
            bar.pop().__exit__(None, None, None)
        print(f"uKernel {spec.dim}={height}: {budget} trials", file=sys.stderr)
        bar.append(ProgressBar(budget, spec.task(height), enabled=not args.quiet).__enter__())

    try:
        result = tune_dynamic(spec, trials=args.trials, log=log, tuner=args.tuner,
                              ukernel_trials=args.ukernel_trials or ukernel_budget(args.trials),
                              max_kernels=args.max_ukernels, seed=args.seed, batch_size=args.batch_size,
                              tuner_options=options, runner_options=options_run, build_timeout=args.build_timeout,
                              progress=lambda h, r: bar[-1].update(r) if bar else None, on_start=start,
                              transfer=transfer, retime=args.retime)
    finally:
        if bar:
            bar.pop().__exit__(None, None, None)
    print(candidates_table(result.candidates))
    resumed = sum(u.resumed for u in result.ukernels)
    if resumed:
        print(f"resumed {resumed} records from {log}", file=sys.stderr)
    best = ukernel_records(spec, TuningDatabase.open(log))
    heights = [u.height for u in result.ukernels]
    missing = [h for h in heights if h not in best]
    if missing:
        print(f"no valid config for the uKernel(s) {', '.join(f'{spec.dim}={h}' for h in missing)}")
        return 1
    ukernels = make_ukernels(spec, best, heights)
    low = derived_ukernels(spec, ukernels, low_end_heights(spec, heights))
    kernel = DynamicKernel(spec, ukernels + low)
    print(kernel.describe(_report_sizes(spec.lo, spec.hi)))
    print(f"{result.trials} trials in {result.wall_s:.0f} s; log: {log}\n"
          f"use it: autotune.dynamic.load({log!r}, {spec.op!r}, {args.shape!r}"
          + (f", dtype={spec.dtype!r})" if spec.dtype != "float32" else ")"))
    return 0


def candidates_table(candidates) -> str:
    """The analytic ranking: one line per candidate height, the chosen ones marked."""
    lines = [("uKernel candidates (analytic, no measurement): rank height predicted GFLOPS flop/byte cores-busy "
              "set-score")]
    for c in candidates:
        lines.append(f"  {'*' if c.chosen else ' '} {c.rank:>2d} {c.height:>5d} {c.predicted_s * 1e3:9.4f} ms "
                     f"{c.gflops:7.1f} {c.intensity:8.1f} {c.parallel:6.2f} {c.score:7.3f}")
    return "\n".join(lines)


def _report_sizes(lo: int, hi: int) -> list[int]:
    sizes = {lo, hi}
    v = 1
    while v < hi:
        if v > lo:
            sizes.add(v)
            sizes.add(min(hi, v + v // 2 + 1))
        v *= 4
    return sorted(sizes)
