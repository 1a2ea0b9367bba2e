"""Model subcommands: extract, tune-model, build, export-db (registered by `add_model_commands`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..cli_args import (add_cc_argument, add_runner_arguments, add_search_arguments, add_shipped_argument,
                        int_at_least, runner_options, shipped_flag, tuner_options)
from ..errors import AutotuneError
from ..measure.rpc import add_rpc_runner_arguments, runner_from_args
from ..target import cross_compiler, parse_target
from .build import build_model
from .capture import load_program
from .export_db import export_database
from .extract import collect_tasks, extract_tasks
from .scheduler import tune_model

TARGET_HELP = ("llvm (this CPU), cuda (the local GPU's arch, else sm_90), aarch64 (an ARM CPU, cross-compiled) or a "
               "JSON target dict")
MODEL_HELP = ("path/to/file.py:factory (runs that file; the factory returns (module, example_inputs)) or a saved "
              "torch.export .pt2 (read with pickling off, see --allow-pickle)")
PICKLE_HELP = ("load a .pt2 that holds pickles or an AOTInductor library: they run code when loaded, so only for a "
               "file you trust (refused without this flag)")
COMPILE_HELP = ("take the tasks of every graph torch.compile captures while running the example inputs "
                "(for programs torch.export cannot capture whole; used automatically when export fails)")


def add_model_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register the model subcommands; each sets `handler` (args -> exit code)."""
    e = subparsers.add_parser("extract", help="list a model's tunable tasks with weights and FLOPs")
    e.add_argument("model", help=MODEL_HELP)
    e.add_argument("--target", default="llvm", help=TARGET_HELP)
    e.add_argument("--compile", action="store_true", help=COMPILE_HELP)
    e.add_argument("--allow-pickle", action="store_true", help=PICKLE_HELP)
    e.set_defaults(handler=cmd_extract)

    t = subparsers.add_parser("tune-model", help="tune all tasks of a model in one trial budget (resumable)")
    t.add_argument("model", help=MODEL_HELP)
    t.add_argument("--trials", type=int_at_least(1), required=True,
                   help="trials in total over all tasks (the log's count), at least 1")
    t.add_argument("--log", required=True, help="log file shared by all tasks; re-running continues it")
    t.add_argument("--target", default="llvm", help=TARGET_HELP)
    add_cc_argument(t)
    t.add_argument("--tuner", default="xgb", help="random | grid | xgb (default)")
    t.add_argument("--round-trials", type=int_at_least(1), default=16, help="trials per scheduling round (>= 1)")
    t.add_argument("--seed", type=int_at_least(0), default=0, help="random seed of the search (>= 0)")
    add_runner_arguments(t)
    add_rpc_runner_arguments(t)
    t.add_argument("--compile", action="store_true", help=COMPILE_HELP)
    add_search_arguments(t, "the other logs beside --log, and the model's other tasks so far")
    t.add_argument("--allow-pickle", action="store_true", help=PICKLE_HELP)
    t.set_defaults(handler=cmd_tune_model)

    b = subparsers.add_parser("build", help="compile a model with the best schedules in logs")
    b.add_argument("model", help=MODEL_HELP)
    b.add_argument("--logs", nargs="*", default=[], help="tuning logs (none: default schedules only)")
    b.add_argument("-o", "--output", required=True,
                   help="shared library to write (load with autotune.model.load_library)")
    b.add_argument("--target", default="llvm", help=TARGET_HELP)
    add_cc_argument(b)
    add_shipped_argument(b, "a task without a record in --logs gets its heuristic config")
    b.add_argument("--allow-pickle", action="store_true", help=PICKLE_HELP)
    b.set_defaults(handler=cmd_build)

    d = subparsers.add_parser("export-db", help="write the best schedules as a MetaSchedule JSONDatabase")
    d.add_argument("logs", nargs="+", help="tuning logs (JSONL)")
    d.add_argument("-o", "--output", required=True, help="database directory (work_dir of JSONDatabase)")
    d.set_defaults(handler=cmd_export_db)


def _model(args: argparse.Namespace) -> Any:
    """The MODEL argument; a .pt2 given with --allow-pickle is loaded here, pickles and all."""
    if args.allow_pickle and str(args.model).endswith((".pt2", ".pt")) and ":" not in Path(args.model).name:
        return load_program(args.model, allow_pickle=True)
    return args.model


def _check_logs(paths: list[str]) -> None:
    for p in paths:
        if not Path(p).is_file():
            raise AutotuneError(f"log {p} does not exist or is not a file")


def cmd_extract(args: argparse.Namespace) -> int:
    left: list[str] = []
    if args.compile:
        collected = collect_tasks(_model(args), target=args.target)
        print(f"torch.compile captured {collected.graphs} graphs ({collected.calls} graph calls in one run)")
        for s in collected.skipped:
            print(f"  not imported: {s}")
        tasks, left = collected.tasks, collected.left
    else:
        tasks = extract_tasks(_model(args), target=args.target, left=left)
    for line in left:
        print(f"  left to TVM: {line}")
    if not tasks:
        print("no tunable operator (convolution: 1-d, 2-d, grouped, depthwise, transposed; matmul) found")
        return 1
    total = sum(t.flops * w for t, w in tasks)
    print(f"{len(tasks)} tasks, {sum(w for _, w in tasks):g} calls, {total / 1e9:.3f} GFLOP per inference")
    print(f"{'key':<30} {'weight':>6} {'GFLOP':>9} {'share':>6}  task")
    for t, w in sorted(tasks, key=lambda tw: -tw[0].flops * tw[1]):
        print(f"{t.key:<30} {w:>6g} {t.flops * w / 1e9:>9.4f} {100 * t.flops * w / total:>5.1f}%  {t}")
    return 0


def cmd_tune_model(args: argparse.Namespace) -> int:
    if args.round_trials < 1:
        raise AutotuneError("--round-trials must be >= 1")
    options_run, options = runner_options(args), tuner_options(args)  # checked before the model is loaded
    cross_compiler(parse_target(args.target))  # a cross target's linker, before any work
    remote = runner_from_args(args, options_run)  # None: measure on this machine
    try:
        result = tune_model(_model(args), trials=args.trials, log=args.log, target=args.target, tuner=args.tuner,
                            round_trials=args.round_trials, seed=args.seed, runner_options=options_run, runner=remote,
                            via="compile" if args.compile else "auto", transfer=args.transfer, retime=args.retime,
                            tuner_options=options, shipped=shipped_flag(args))
    finally:
        if remote is not None:
            remote.close()
    print(result.summary())
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    _check_logs(args.logs)
    cross_compiler(parse_target(args.target))  # a cross target's linker, before the build
    model = build_model(_model(args), logs=args.logs, target=args.target, shipped=shipped_flag(args))
    print(model.report.summary())
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    model.export_library(args.output)
    print(f"wrote {args.output} (inputs: {', '.join(map(str, model.inputs))})")
    return 0


def cmd_export_db(args: argparse.Namespace) -> int:
    _check_logs(args.logs)
    exported = export_database(args.logs, args.output)
    for e in exported:
        print(f"{e.task.key}  {e.task}  config #{e.config_index}  {e.mean_s * 1e3:.4f} ms  "
              f"workloads: {', '.join(e.workloads) or 'none'}")
        if e.skipped:
            print(f"  not written for {e.skipped}")
    print(f"wrote {sum(len(e.workloads) for e in exported)} records ({len(exported)} tasks) to {args.output}",
          file=sys.stderr)
    return 0
