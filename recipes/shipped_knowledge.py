"""Recipe for the tuning knowledge autotune ships (`autotune.shipped`): tune a corpus of common workloads on a
machine, then write, for its target class, the best config of every task and a cost model trained on all their
records into the package data (`autotune/shipped/<class>.jsonl`, `<class>.model.json`).

    python recipes/shipped_knowledge.py tune --trials-per-task 32
    python recipes/shipped_knowledge.py write

`tune` extracts the tasks of the corpus models (benchmarks/models.py, random weights, batch 1; `--dtypes`
float32 bfloat16: the models in bf16 too) and tunes each with the xgb tuner, its records in a log of its own
under `--work`/<class>/ (each task learning from the logs already there). It resumes: a task whose log holds its
trials is skipped, one cut short continues. It runs in pieces: `--models`, `--dtypes`, and `--part K/N` (the
tasks K, K+N, K+2N, ...) for several machines of a class or several sittings. The target is this machine's CPU,
or `--target` (a GPU, another machine's CPU) measured over RPC (`--rpc-key`, `--rpc-tracker`: `autotune rpc`,
docs/guides/rpc.md). `write` reads every log of the class (a record of another template version is dropped),
replaces the class's best configs whole and trains its cost model on every record (loop features, the tuner's
ranking objective); it prints their sizes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ("resnet18", "resnet50", "transformer_layer", "gpt_prefill", "gpt_decode")  # benchmarks/models.py's
sys.path.insert(0, str(ROOT / "benchmarks"))  # the corpus models
sys.path.insert(0, str(ROOT))


def corpus_tasks(models: list[str], dtypes: list[str], target: dict) -> list:
    """The distinct tasks of the corpus models in each dtype for `target`, in a fixed order (by model, then first
    call)."""
    from bench_model import in_dtype  # benchmarks/bench_model.py
    from models import MODELS  # benchmarks/models.py

    from autotune.model import extract_tasks

    tasks = {}
    for dtype in dtypes:
        for name in models:
            for task, _ in extract_tasks(*in_dtype(*MODELS[name](), dtype), target=target):
                tasks.setdefault(task.key, task)
    return list(tasks.values())


def class_folder(work: Path, target: dict) -> tuple[str, Path]:
    """(the target's class, its logs' folder)."""
    from autotune.shipped import classes_of

    own = classes_of(target)
    if not own:
        raise SystemExit(f"the target fits no target class of autotune.shipped.CLASSES: {target}")
    return own[0].name, work / own[0].name


def target_of(args: argparse.Namespace) -> dict:
    """--target (default: this machine's CPU)."""
    from autotune.target import host_llvm_target, parse_target

    return parse_target(args.target) if args.target else host_llvm_target()


def cmd_tune(args: argparse.Namespace) -> None:
    from autotune.database import TuningDatabase
    from autotune.measure import RunnerOptions
    from autotune.measure.rpc import runner_from_args
    from autotune.tune import tune

    target = target_of(args)
    name, folder = class_folder(args.work, target)
    folder.mkdir(parents=True, exist_ok=True)
    k, n = (int(v) for v in args.part.split("/"))
    tasks = corpus_tasks(args.models, args.dtypes, target)[k::n]
    runner = runner_from_args(args, RunnerOptions())  # None: measured on this machine
    start = time.time()
    for i, task in enumerate(tasks):
        log = folder / f"{task.key}.jsonl"
        others = [p for p in sorted(folder.glob("*.jsonl")) if p != log]
        transfer = TuningDatabase.open(others).transfer(task) if others else []
        result = tune(task, trials=args.trials_per_task, tuner="xgb", log=log, transfer=transfer, runner=runner)
        best = f"{result.best.gflops():.1f} GFLOPS" if result.best is not None else "no valid config"
        print(f"[{i + 1}/{len(tasks)}] {task}: {best} ({time.time() - start:.0f} s)", flush=True)
    print(f"{name}: {len(tasks)} tasks tuned in {(time.time() - start) / 60:.1f} min, logs in {folder}")


def cmd_write(args: argparse.Namespace) -> None:
    from autotune.database import TuningDatabase
    from autotune.records import write_log
    from autotune.shipped import DATA, MODEL_SUFFIX
    from cost_models import train_from_records

    name, folder = class_folder(args.work, target_of(args))
    db = TuningDatabase.open(sorted(folder.glob("*.jsonl")))
    best = [r for key in db.task_keys() if (r := db.best(key)) is not None]
    if not best:
        raise SystemExit(f"no valid record under {folder}: run `tune` first")
    data = args.data if args.data is not None else DATA
    data.mkdir(exist_ok=True)
    path = data / f"{name}.jsonl"
    write_log(path, best)
    print(f"{path}: {len(best)} tasks, {path.stat().st_size / 1e3:.0f} kB")
    records = db.records(current=True)
    model_path = data / f"{name}{MODEL_SUFFIX}"
    train_from_records(records, features="loop").save(model_path)
    print(f"{model_path}: trained on {len(records)} records of {len({r.task.key for r in records})} tasks, "
          f"{model_path.stat().st_size / 1e3:.0f} kB")


def main() -> None:
    from autotune.measure.rpc import add_rpc_runner_arguments

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tune", help="tune the corpus on this machine (resumable)")
    t.add_argument("--models", nargs="+", default=list(CORPUS), help=f"default: {' '.join(CORPUS)}")
    t.add_argument("--dtypes", nargs="+", default=["float32"], choices=("float32", "bfloat16"))
    t.add_argument("--trials-per-task", type=int, default=64)
    t.add_argument("--part", default="0/1", help="K/N: every N-th task from the K-th (0-based)")
    w = sub.add_parser("write", help="write this class's best configs and cost model into the package data")
    w.add_argument("--data", type=Path, help="write them into this folder instead (default: autotune/shipped/)")
    add_rpc_runner_arguments(t)
    for p in (t, w):
        p.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "work" / "shipped")
        p.add_argument("--target", help="the target (a name or JSON, as autotune tune takes it) whose class is "
                       "tuned; default: this machine's CPU. Another machine's: measure there with --rpc-key")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    {"tune": cmd_tune, "write": cmd_write}[args.command](args)


if __name__ == "__main__":
    main()
