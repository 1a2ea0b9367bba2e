"""Tuning sessions against the code of another commit, side by side: the overhead of `tune-model` per round, and
whether a replayed search proposes the same configs.

Both measurements replace the machine by a simulation (a builder that builds nothing and a runner whose cost is
a fixed function of the config), so every second they take is overhead: proposing (cost model fits, loop
features, simulated annealing), bookkeeping, reading and writing logs. Each run is a fresh process of
`--tree`'s or this tree's code, the two alternating (`--repeats` pairs).

- overhead: `tune_model` of ResNet-18 (benchmarks/models.py) with the xgb tuner, `--trials` trials in rounds of
  16, no re-timing, without transfer and with transfer between the model's tasks; seconds per round (wall time
  less capturing the model, / rounds), and the part of it spent proposing (the tuner's `next_batch`).
- replay: `tune` of a matmul and a conv2d with the xgb tuner (loop and knob features), seed 0, 64 trials in
  batches of 8: the configs each code proposes, in order, must be the same.

    python benchmarks/bench_session.py --tree /tmp/base   # /tmp/base: `git worktree add /tmp/base <commit>`
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REPLAY_TASKS = {"matmul": "M=256,N=256,K=256", "conv2d": "N=1,C=32,H=28,W=28,K=64,R=3,S=3,padding=1"}


# ---- the simulated machine (only what every version of autotune accepts) ----------------------------------

class FakeBuilder:
    def build(self, inputs):
        from autotune import measure

        build_result = getattr(measure, "BuildResult", None)
        if build_result is None:  # code where the measure types live beside measure.py
            from autotune.measure_types import BuildResult as build_result
        return [build_result(f"sim-{i.config.index}", None, "", 0.0) for i in inputs]

    def close(self):
        pass


class CostRunner:
    """Seconds = a fixed pseudo-random function of the task and the config's knobs (the same in every process)."""

    threads = 2

    def run(self, inputs, builds):
        from autotune import measure

        result = getattr(measure, "MeasureResult", None)
        if result is None:
            from autotune.measure_types import MeasureResult as result
        out = []
        for inp in inputs:
            digest = hashlib.sha1(f"{inp.task.key}:{sorted(inp.config.knobs.items())}".encode()).digest()
            out.append(result((1e-4 * (1 + digest[0] / 64),), None, "", 0.0, 0.0))
        return out

    def device(self, target_kind):
        return {}

    def close(self):
        pass


def worker(args) -> dict:
    import warnings

    import autotune

    warnings.simplefilter("ignore")
    out = {"code": str(Path(autotune.__file__).resolve().parent.parent)}
    with tempfile.TemporaryDirectory() as tmp:
        if args.mode == "overhead":
            from autotune.model import tune_model
            from autotune.tuners.xgb import XGBTuner

            proposing = [0.0]
            next_batch = XGBTuner.next_batch

            def timed(self, n):  # seconds spent proposing (cost-model fits, features, annealing), in both codes
                t = time.perf_counter()
                try:
                    return next_batch(self, n)
                finally:
                    proposing[0] += time.perf_counter() - t

            XGBTuner.next_batch = timed
            scheduler = sys.modules["autotune.model.scheduler"]
            extract, capturing = scheduler.extract_tasks, [0.0]

            def timed_extract(*a, **kw):  # capturing the model is not tuning overhead
                t = time.perf_counter()
                try:
                    return extract(*a, **kw)
                finally:
                    capturing[0] += time.perf_counter() - t

            scheduler.extract_tasks = timed_extract
            t0 = time.perf_counter()
            result = tune_model(str(HERE / "models.py") + ":resnet18", trials=args.trials, log=Path(tmp) / "m.jsonl",
                                tuner="xgb", round_trials=16, builder=FakeBuilder(), runner=CostRunner(), retime=0,
                                transfer=None if args.transfer else [], progress=lambda msg: None)
            out.update(wall_s=time.perf_counter() - t0 - capturing[0], trials=sum(s.trials for s in result.states),
                       rounds=-(-args.trials // 16), proposing_s=proposing[0])
        else:
            from autotune.task import make_task
            from autotune.tune import tune

            out["sequences"] = {}
            for op, shape in REPLAY_TASKS.items():
                for features in ("loop", "knob"):
                    task = make_task(op, shape)
                    log = Path(tmp) / f"{op}-{features}.jsonl"
                    result = tune(task, trials=64, tuner="xgb", log=log, seed=0, batch_size=8, retime=0,
                                  builder=FakeBuilder(), runner=CostRunner(), **_options(features))
                    out["sequences"][f"{op} {features}"] = [r.input.config.index for r in result.records]
    return out


def _options(features: str) -> dict:
    """The tuner options of `features` in the form this code takes (typed options, or a dict)."""
    try:
        from autotune.tuners.options import XGBOptions
    except ImportError:
        return {"tuner_options": {"features": features}}
    return {"tuner_options": XGBOptions(features=features)}


def run_worker(tree: Path, mode: str, trials: int, transfer: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["PYTHONPATH"] = str(tree)
    env["TVM_NUM_THREADS"] = "1"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", mode, "--trials", str(trials),
           *(["--transfer"] if transfer else [])]
    done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{tree}: {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, help="a checkout of the code to compare with (git worktree add ...)")
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=1, help="overhead runs of each code, alternating")
    ap.add_argument("--worker", choices=["overhead", "replay"], help=argparse.SUPPRESS)
    ap.add_argument("--transfer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-write", action="store_true", help="print only; store no result")
    args = ap.parse_args()
    if args.worker:
        args.mode = args.worker
        print(json.dumps(worker(args)))
        return
    sys.path.insert(0, str(HERE))
    from _common import report

    base, this = args.tree.resolve(), ROOT
    commit = subprocess.run(["git", "-C", str(base), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(this), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    replay = {name: run_worker(tree, "replay", 64) for name, tree in (("base", base), ("this", this))}
    variants = {"no transfer": False, "transfer between the model's tasks (the default)": True}
    runs: dict[tuple[str, str], list[dict]] = {}
    for _ in range(args.repeats):
        for variant, transfer in variants.items():
            for name, tree in (("base", base), ("this", this)):
                runs.setdefault((variant, name), []).append(run_worker(tree, "overhead", args.trials, transfer))
    lines = [f"`tune-model` overhead and replayed searches: the code of {commit} (base) against this tree "
             f"({head} and its changes), a simulated machine (nothing built or run), each run a fresh process, "
             f"the two codes alternating.", "",
             f"Overhead of `tune-model` on ResNet-18, xgb tuner, {args.trials} trials in rounds of 16 (seconds; "
             "proposing: the xgb tuner's next_batch, i.e. cost-model fits, loop features and annealing; the rest: "
             "reading logs, making tuners, bookkeeping, writing records):", "",
             "| transfer | code | run | wall s | s per round | proposing, per round | the rest, per round |",
             "|---|---|---|---|---|---|---|"]
    for (variant, name), rs in runs.items():
        for k, r in enumerate(rs, 1):
            rest = (r["wall_s"] - r["proposing_s"]) / r["rounds"]
            lines.append(f"| {variant} | {name} | {k} | {r['wall_s']:.1f} | {r['wall_s'] / r['rounds']:.2f} | "
                         f"{r['proposing_s'] / r['rounds']:.2f} | {rest:.3f} |")
    lines.append("")
    for variant in variants:
        mean = {n: sum(r["wall_s"] for r in runs[variant, n]) / len(runs[variant, n]) for n in ("base", "this")}
        rest = {n: sum(r["wall_s"] - r["proposing_s"] for r in runs[variant, n]) / len(runs[variant, n])
                for n in ("base", "this")}
        lines.append(f"- {variant}: this tree's overhead per round is {mean['this'] / mean['base']:.2f}x the "
                     f"base's; outside proposing {rest['this'] / rest['base']:.2f}x.")
    lines += ["",
              "Replayed searches (xgb, seed 0, 64 trials in batches of 8): the configs proposed, in order:", "",
              "| search | same configs in the same order |", "|---|---|"]
    for key, seq in replay["base"]["sequences"].items():
        other = replay["this"]["sequences"][key]
        same = "yes" if seq == other else f"no (first difference at trial {_first_diff(seq, other) + 1})"
        lines.append(f"| {key} | {same} |")
    report("session", "\n".join(lines), write=not args.no_write)


def _first_diff(a: list, b: list) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


if __name__ == "__main__":
    main()
