"""Command line: autotune tune | best | show | plot | ops | train-model | rpc | extract | tune-model | build |
export-db."""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
import threading
import warnings
from collections import Counter
from pathlib import Path

from cost_models import train_from_records

from .cli_args import add_cc_argument, add_runner_arguments, add_search_arguments, checked_tuner_options, \
    int_at_least, number_above, runner_options, shipped_flag
from .database import TuningDatabase
from .dynamic.cli import add_dynamic_arguments, cmd_tune_dynamic, wants_dynamic
from .errors import AutotuneError
from .measure import error_summary
from .measure.build_check import build_only
from .measure.rpc import add_rpc_runner_arguments, runner_from_args
from .measure.rpc_services import add_rpc_parser, cmd_rpc
from .model.cli import add_model_commands
from .model.extract import extract_tasks
from .operators import OPS, default_template_ref
from .plot import X_AXES, curves, draw, log_labels, model_curve, model_summary, panels, summary
from .progress import ProgressBar
from .files import check_log_path, check_output_path
from .records import config_key, write_log
from .target import CROSS_CC_ENV, cross_compiler
from .task import make_task
from .templates import resolve, space_of
from .transfer import start_options, transfer_records, transfer_summary
from .tune import check_search_arguments, default_log_path, ensure_measurable, tune
from .tuners import learns_from_transfer


class _OneLineErrors(argparse.ArgumentParser):
    """Bad arguments end with one line (`autotune tune: error: ...`), not the whole usage; `-h` shows it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The `autotune` command line (docs/reference/cli.md is rendered from it: `autotune.cli_reference`)."""
    p = _OneLineErrors(prog="autotune", description="Tune tensor operators with TVM 0.27.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("tune", help="tune one operator")
    t.add_argument("op", help="operator (see `autotune ops`)")
    t.add_argument("--shape", required=True, help="shape parameters, e.g. M=1024,N=1024,K=1024")
    t.add_argument("--dtype", default="float32", help="element type (see `autotune ops`)")
    t.add_argument("--target", default="llvm", help="llvm (this CPU), cuda, aarch64 (an ARM CPU, cross-compiled), or "
                                                     "a JSON target dict")
    add_cc_argument(t)
    t.add_argument("--arch", help="CUDA arch, e.g. sm_90 (default: the local GPU's, else sm_90)")
    t.add_argument("--trials", type=int_at_least(1), default=200,
                   help="configs to measure in total (a resumed log counts), at least 1")
    t.add_argument("--tuner", default="xgb", help="random | grid | xgb (default)")
    t.add_argument("--log", help="log file (default: logs/<task_key>.jsonl); re-running resumes it")
    t.add_argument("--seed", type=int_at_least(0), default=0, help="random seed of the search (>= 0)")
    t.add_argument("--early-stopping", type=int_at_least(1), metavar="N",
                   help="stop after N (>= 1) trials without improvement")
    t.add_argument("--batch-size", type=int_at_least(1), default=8,
                   help="configs built and measured per round, at least 1 (the xgb model is refitted after each)")
    t.add_argument("--template", help="template reference module:attr (default: the operator's own)")
    add_runner_arguments(t)
    t.add_argument("--build-timeout", type=number_above(0), default=60.0, help="seconds per candidate build, above 0")
    add_search_arguments(t, "other logs beside --log")
    t.add_argument("--cost-model", help="xgb: start from a saved model (autotune train-model)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    add_rpc_runner_arguments(t)
    t.add_argument("--build-only", action="store_true",
                   help="compile --trials random configs that pass the validity filter and report how many were "
                        "rejected and why; measure nothing (e.g. CUDA on a machine without a GPU)")
    add_dynamic_arguments(t)

    b = sub.add_parser("best", help="best valid config per task in logs")
    b.add_argument("logs", nargs="+", help="tuning logs (JSONL)")
    b.add_argument("--json", action="store_true", help="one JSON object per task")
    b.add_argument("-o", "--output", help="also write a log of just the best configs (every timing of each; "
                   "`build` and `tune-model` read it as any log), replacing the file whole")

    s = sub.add_parser("show", help="summary of logs: records, errors by kind, best GFLOPS")
    s.add_argument("logs", nargs="*", help="tuning logs (JSONL)")
    s.add_argument("--shipped", action="store_true",
                   help="list the tuning knowledge autotune ships for this machine's target classes instead")

    pl = sub.add_parser("plot", help="tuning curves of logs (best GFLOPS so far against trials) as a PNG")
    pl.add_argument("logs", nargs="+", help="tuning logs (JSONL), one line each")
    pl.add_argument("-o", "--output", default="tuning.png", help="image file (default: tuning.png)")
    pl.add_argument("--x", choices=list(X_AXES), default="trials", help="horizontal axis")
    pl.add_argument("--task", help="only the tasks whose key or description contains this text")
    pl.add_argument("--model", help="also the estimated time of this model's tuned kernels (calls x best time of "
                                    "each of its tasks) against the log's trials, e.g. of `autotune tune-model`")

    sub.add_parser("ops", help="list operators, their parameters and space sizes")
    add_rpc_parser(sub)
    add_model_commands(sub)

    m = sub.add_parser("train-model", help="train a cost model on logs and save it")
    m.add_argument("logs", nargs="+", help="tuning logs to train on")
    m.add_argument("-o", "--output", required=True, help="model file to write (JSON), replaced whole")
    m.add_argument("--features", default="loop", choices=["loop", "knob"],
                   help="features of the model: loop nests or knob values")
    return p


INTERRUPTED_MESSAGE = ("autotune: interrupted; every finished measurement is in the log; re-run the same command to "
                       "resume")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.simplefilter("ignore", FutureWarning)
    interrupted = []

    def on_sigint(signum, frame):  # remember Ctrl-C even if a library swallows the KeyboardInterrupt
        interrupted.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint) if threading.current_thread() is threading.main_thread() \
        else None
    cross_cc = os.environ.get(CROSS_CC_ENV)
    if getattr(args, "cc", None):  # builder processes inherit it
        os.environ[CROSS_CC_ENV] = args.cc
    try:
        handler = getattr(args, "handler", None) or COMMANDS[args.command]
        code = handler(args)
    except AutotuneError as err:
        print(f"autotune: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f" (writing {err.filename})" if err.filename else ""
        print(f"autotune: error: the disk is full{where}: every finished measurement is in the log and no file was "
              "left half-written; free some space and re-run the same command (a tuning run resumes)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(INTERRUPTED_MESSAGE, file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if getattr(args, "cc", None):
            os.environ.pop(CROSS_CC_ENV, None)
            if cross_cc is not None:
                os.environ[CROSS_CC_ENV] = cross_cc
    if interrupted:
        print(INTERRUPTED_MESSAGE, file=sys.stderr)
        return 130
    return code


def cmd_tune(args: argparse.Namespace) -> int:
    if wants_dynamic(args):
        return cmd_tune_dynamic(args)
    task = make_task(args.op, args.shape, args.dtype, args.target, arch=args.arch)
    cross_compiler(task.target)  # a cross target's linker, before any work
    options = checked_tuner_options(args)  # validates the tuner and its options before any work
    check_search_arguments(args.trials, args.batch_size, args.early_stopping, args.seed, args.retime,
                           args.build_timeout, args.template)
    if args.template:  # one that does not import, or is another operator's, fails before any work
        tmpl = resolve(args.template)
        if (tmpl.op, tmpl.target_kind) != (task.op, task.target_kind):
            raise AutotuneError(f"template {args.template} is for {tmpl.op}/{tmpl.target_kind}, not {task.op}/"
                                f"{task.target_kind}")
    if args.build_only:
        return _build_only(task, args)
    options_run = runner_options(args)  # checks --threads against this machine unless RPC measures
    log = Path(args.log) if args.log else default_log_path(task)
    check_log_path(log)  # before any work: a regular file or a new name on a filesystem that can be written
    if not getattr(args, "rpc_key", None):
        ensure_measurable(task)  # before any work: this machine measures it
    transfer = []
    if learns_from_transfer(args.tuner):
        transfer = transfer_records(task, log, args.transfer, shipped_flag(args))
        options = start_options(task, transfer, args.tuner, options)
        print(transfer_summary(task, transfer, options), file=sys.stderr)
    remote = runner_from_args(args, options_run)  # None: measure on this machine
    print(f"tuning {task}  key={task.key}  log={log}", file=sys.stderr)
    try:
        with ProgressBar(args.trials, task, enabled=not args.quiet) as bar:
            result = tune(task, trials=args.trials, tuner=args.tuner, log=log, seed=args.seed,
                          early_stopping=args.early_stopping, batch_size=args.batch_size, template=args.template,
                          tuner_options=options, transfer=transfer, runner_options=options_run, runner=remote,
                          progress=bar.update,
                          build_timeout=args.build_timeout, retime=args.retime)
    finally:
        if remote is not None:
            remote.close()
    if result.resumed:
        print(f"resumed {result.resumed} records from {log}", file=sys.stderr)
    if result.stopped:
        print(f"stopped early: {result.stopped}", file=sys.stderr)
    for line in error_summary(r.result for r in result.records):
        print(f"failed: {line}", file=sys.stderr)
    best = result.best
    if best is None:
        print(f"no valid config among {len(result.records)} trials ({result.errors} errors)")
        return 1
    timings = result.timings(best)
    print(f"best: {best.gflops():.1f} GFLOPS ({best.result.mean_s * 1e3:.4f} ms"
          f"{f', median of {timings} timings' if timings > 1 else ''}) config #{best.input.config.index} "
          f"{json.dumps(best.input.config.to_dict()['knobs'])}")
    print(f"{len(result.records)} trials, {result.errors} errors; log: {log}")
    return 0


def _build_only(task, args: argparse.Namespace) -> int:
    ref = args.template or default_template_ref(task.op, task.target_kind)
    print(f"building {task} ({ref}), measuring nothing", file=sys.stderr)
    report = build_only(task, args.trials, ref, seed=args.seed, batch_size=args.batch_size,
                        build_timeout=args.build_timeout)
    print(report.summary())
    return 0 if report.built else 1


def _open(paths: list[str]):
    """The records database of the logs named on the command line (each must be a file)."""
    for p in paths:
        if not Path(p).is_file():
            raise AutotuneError(f"log {p} does not exist or is not a file")
    db = TuningDatabase.open(paths)
    if db.stats.skipped and not db.stats.records:
        raise AutotuneError(f"no records in {', '.join(paths)}: all {db.stats.skipped} line(s) are corrupt "
                            "or break the record format; give the log of a tuning run")
    if db.stats.skipped:
        print(f"warning: skipped {db.stats.skipped} corrupt line(s)", file=sys.stderr)
    return db


def _stale_note(db, key: str) -> str:
    stale = db.stale(key)
    return (f" ({stale} records made by other versions of its template, or by a template not trusted here (see "
            "AUTOTUNE_TEMPLATES): not counted)") if stale else ""


def cmd_best(args: argparse.Namespace) -> int:
    if args.output and any(Path(args.output).resolve() == Path(p).resolve() for p in args.logs):
        raise AutotuneError(f"--output {args.output} is one of the logs read: name another file")
    if args.output:
        check_output_path(args.output, "--output")  # before any work: a regular file or a new name, writable
    db = _open(args.logs)
    kept = []
    for key in db.task_keys():
        best = db.best(key)
        if best is None:
            if not args.json:
                print(f"{key}: no valid record ({len(db.records(key))} records){_stale_note(db, key)}")
            continue
        timings = db.timings(best)
        kept += timings
        row = {"task_key": key, "op": best.task.op, "params": best.task.shape, "dtype": best.task.dtype,
               "target": best.task.target, "template": best.input.template, "config": best.input.config.to_dict(),
               "mean_s": best.result.mean_s, "gflops": round(best.gflops(), 3), "threads": best.threads,
               "timing": best.timing, "timings": len(timings)}
        if args.json:
            print(json.dumps(row))
        else:
            median = f" (median of {row['timings']} timings)" if row["timings"] > 1 else ""
            print(f"{key}  {best.task}  {row['gflops']:.1f} GFLOPS  {best.result.mean_s * 1e3:.4f} ms{median}  "
                  f"config #{best.input.config.index} {json.dumps(row['config']['knobs'])}")
    if args.output:
        write_log(args.output, kept)
        print(f"wrote {len(kept)} records of {len({r.task.key for r in kept})} tasks to {args.output}",
              file=sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    if args.shipped:
        return _show_shipped()
    if not args.logs:
        raise AutotuneError("show: give tuning logs, or --shipped")
    db = _open(args.logs)
    print(f"{db.stats.records} records, {db.stats.skipped} corrupt lines skipped")
    for key in db.task_keys():
        recs = db.records(key)
        errors = Counter(r.result.error.value for r in recs if not r.result.ok)
        best = db.best(key)
        best_txt = f"{best.gflops():.1f} GFLOPS ({best.result.mean_s * 1e3:.4f} ms)" if best else "none valid"
        err_txt = ", ".join(f"{k}={v}" for k, v in sorted(errors.items())) or "none"
        print(f"{key}  {recs[0].task}\n  records={len(recs)} configs={len({config_key(r) for r in recs})} "
              f"valid={len(recs) - sum(errors.values())} "
              f"errors: {err_txt}\n  best: {best_txt}  threads={best.threads if best else '-'}  "
              f"timing={best.timing if best else '-'}{_stale_note(db, key)}")
    return 0


def _show_shipped() -> int:
    """The shipped knowledge this machine may use (`autotune.shipped`), by class, its own first."""
    from .shipped import CLASSES, Knowledge, classes_of, machine
    from .target import host_llvm_target

    target = host_llvm_target()
    fits = classes_of(target)
    print(f"this machine's classes: {', '.join(c.name for c in fits) or 'none'} (of {len(CLASSES)})")
    knowledge = Knowledge.load(target)
    shipped = knowledge.best()
    for target_class, record in shipped:
        print(f"{target_class.name}  {record.task}  config #{record.input.config.index}  {record.gflops():.1f} "
              f"GFLOPS on {machine(record)}")
    for target_class, db in knowledge.by_class:
        if dropped := sum(db.stale(key) for key in db.task_keys()):
            print(f"{target_class.name}: {dropped} records of other template versions dropped "
                  "(recipes/shipped_knowledge.py makes them anew)")
    if (model := knowledge.model()) is not None:
        print(f"{model[0].name}  cost model {model[1].name}  ({model[1].stat().st_size / 1e3:.0f} kB): tuning starts "
              "from it where the logs hold none of a task's operator")
    if not shipped:
        print("no knowledge ships for them")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    logs = {path: _open([path]) for path in dict.fromkeys(args.logs)}
    found = [c for path, records in logs.items() for c in curves(records, path)]
    if args.task:
        found = [c for c in found if args.task in c.task_key or args.task in c.title]
    if not found:
        raise AutotuneError(f"no records{f' of a task matching {args.task!r}' if args.task else ''} in "
                            f"{', '.join(args.logs)}")
    for c in found:
        print(summary(c))
    to_draw, ylabels = panels(found, args.x), {}
    if args.model:
        title = f"{args.model}: tuned kernels (estimate)"
        model_panel = _model_panel(args.model, logs, args.x)
        if model_panel:
            to_draw, ylabels = {title: model_panel, **to_draw}, {title: "ms per inference"}
    draw(to_draw, args.output, xlabel=X_AXES[args.x], ylabels=ylabels)
    print(f"wrote {args.output}")
    return 0


def _model_panel(model: str, logs: dict, axis: str) -> dict:
    """Log -> its model curve's series (`autotune.plot.model_curve`), for the logs with an estimate; prints one
    line per log. The model's tasks are extracted for the target most of a log's records were made on."""
    weights: dict[str, dict[str, int]] = {}  # target JSON -> task key -> calls
    series = {}
    for (path, records), label in zip(logs.items(), log_labels(list(logs))):
        if not records:
            continue
        target = Counter(r.task.target_json for r in records).most_common(1)[0][0]
        if target not in weights:
            weights[target] = {t.key: w for t, w in extract_tasks(model, target=json.loads(target))}
        c = model_curve(records, weights[target], path)
        print(model_summary(c, model))
        if c.ms:
            series[label] = [(c.x(axis), list(c.ms))]
    return series


def cmd_ops(args: argparse.Namespace) -> int:
    for name, op in OPS.items():
        print(f"{name}: {op.doc}\n  parameters: {op.signature()}")
        task = make_task(name, op.example)
        for kind, ref in op.templates.items():
            space = space_of(resolve(ref), task)
            allowed = space.allowed_count()
            limit = f" ({allowed:,} within this target's register tile limit)" if allowed < len(space) else ""
            print(f"  {kind} template {ref}: {len(space):,} configs{limit} for {op.example}")
            print(f"    dtypes: {', '.join(resolve(ref).dtypes)}")
    return 0


def cmd_train_model(args: argparse.Namespace) -> int:
    check_output_path(args.output, "--output")
    db = _open(args.logs)
    records = db.records()
    if not any(r.result.ok for r in records):
        raise AutotuneError(f"no valid record to train on in {', '.join(args.logs)} ({len(records)} records, none "
                            "measured without error): tune first, or give the logs of a tuning run")
    if not any(r.result.ok for r in db.records(current=True)):
        raise AutotuneError(f"no valid record to train on in {', '.join(args.logs)}: every valid record was made by "
                            "another version of its template, or names a template that does not import here; "
                            "tune again with this autotune")
    model = train_from_records(db, features=args.features)
    model.save(args.output)
    print(f"trained on {len(records)} records of {len({r.task.key for r in records})} tasks; saved {args.output}")
    return 0


COMMANDS = {"tune": cmd_tune, "best": cmd_best, "show": cmd_show, "plot": cmd_plot, "ops": cmd_ops,
            "train-model": cmd_train_model, "rpc": cmd_rpc}

if __name__ == "__main__":
    sys.exit(main())
