"""Recipe for the tuning knowledge autotune ships (`autotune.shipped`): tune a corpus of common workloads on this
machine, then write, for its target class, the best config of every task into the package data
(`autotune/shipped/<class>.jsonl`).

    python recipes/shipped_knowledge.py tune --models resnet18 transformer_layer --trials-per-task 32
    python recipes/shipped_knowledge.py write

`tune` extracts the tasks of the corpus models (benchmarks/models.py, random weights, batch 1; `--dtypes`
float32 bfloat16: the models in bf16 too) and tunes each with the xgb tuner, its records in a log of its own
under `--work`/<class>/ (each task learning from the logs already there). It resumes: a task whose log holds its
trials is skipped, one cut short continues. It runs in pieces: `--models`, `--dtypes`, and `--part K/N` (the
tasks K, K+N, K+2N, ...) for several machines of a class or several sittings. `write` reads every log of the
class (a record of another template version is dropped) and replaces the class's file whole; it prints its size.
The target is this machine (its class: `autotune.shipped.classes_of`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the corpus models
sys.path.insert(0, str(ROOT))


def corpus_tasks(models: list[str], dtypes: list[str]) -> list:
    """The distinct tasks of the corpus models in each dtype, in a fixed order (by model, then first call)."""
    from bench_model import in_dtype  # benchmarks/bench_model.py
    from models import MODELS  # benchmarks/models.py

    from autotune.model import extract_tasks

    tasks = {}
    for dtype in dtypes:
        for name in models:
            for task, _ in extract_tasks(*in_dtype(*MODELS[name](), dtype)):
                tasks.setdefault(task.key, task)
    return list(tasks.values())


def class_folder(work: Path) -> tuple[str, Path]:
    """(this machine's target class, its logs' folder)."""
    from autotune.shipped import classes_of
    from autotune.target import host_llvm_target

    own = classes_of(host_llvm_target())
    if not own:
        raise SystemExit("this machine fits no target class of autotune.shipped.CLASSES")
    return own[0].name, work / own[0].name


def cmd_tune(args: argparse.Namespace) -> None:
    from autotune.database import TuningDatabase
    from autotune.tune import tune

    name, folder = class_folder(args.work)
    folder.mkdir(parents=True, exist_ok=True)
    k, n = (int(v) for v in args.part.split("/"))
    tasks = corpus_tasks(args.models, args.dtypes)[k::n]
    start = time.time()
    for i, task in enumerate(tasks):
        log = folder / f"{task.key}.jsonl"
        others = [p for p in sorted(folder.glob("*.jsonl")) if p != log]
        transfer = TuningDatabase.open(others).transfer(task) if others else []
        result = tune(task, trials=args.trials_per_task, tuner="xgb", log=log, transfer=transfer)
        best = f"{result.best.gflops():.1f} GFLOPS" if result.best is not None else "no valid config"
        print(f"[{i + 1}/{len(tasks)}] {task}: {best} ({time.time() - start:.0f} s)", flush=True)
    print(f"{name}: {len(tasks)} tasks tuned in {(time.time() - start) / 60:.1f} min, logs in {folder}")


def cmd_write(args: argparse.Namespace) -> None:
    from autotune.database import TuningDatabase
    from autotune.records import write_log
    from autotune.shipped import DATA

    name, folder = class_folder(args.work)
    db = TuningDatabase.open(sorted(folder.glob("*.jsonl")))
    best = [r for key in db.task_keys() if (r := db.best(key)) is not None]
    if not best:
        raise SystemExit(f"no valid record under {folder}: run `tune` first")
    DATA.mkdir(exist_ok=True)
    path = DATA / f"{name}.jsonl"
    write_log(path, best)
    print(f"{path}: {len(best)} tasks, {path.stat().st_size / 1e3:.0f} kB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tune", help="tune the corpus on this machine (resumable)")
    t.add_argument("--models", nargs="+", default=["resnet18", "transformer_layer", "mobilenet_blocks"])
    t.add_argument("--dtypes", nargs="+", default=["float32"], choices=("float32", "bfloat16"))
    t.add_argument("--trials-per-task", type=int, default=64)
    t.add_argument("--part", default="0/1", help="K/N: every N-th task from the K-th (0-based)")
    w = sub.add_parser("write", help="write this class's best configs into the package data")
    for p in (t, w):
        p.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "work" / "shipped")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    {"tune": cmd_tune, "write": cmd_write}[args.command](args)


if __name__ == "__main__":
    main()
