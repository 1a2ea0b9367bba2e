"""A/B of two versions of the xgb tuner (two checkouts) on bench_search.py's tasks, sharing one work folder.

    python benchmarks/ab_search.py --arm before --work /abs/ab --tasks "matmul 1024^3"   # from the old checkout
    python benchmarks/ab_search.py --arm after --work /abs/ab --tasks "matmul 1024^3"    # from the new one
    python benchmarks/ab_search.py --report --work /abs/ab --tasks "matmul 1024^3"       # after both

Arms whose templates differ (another template version: a config index names another config) run in work folders of
their own, and `--report --work DIR_A DIR_B` compares them, each scored by its own measurements.

Each arm runs cold xgb (loop features; `--tuner random`: random search, a baseline arm; `--cold-start roofline`: xgb
whose first batch the roofline prior picks; `--features knob`: xgb on the knob values) for --trials per seed into
`<work>/<task>/<arm>-s<seed>.jsonl` (with --transfer-from, xgb pre-trained as bench_search.py's xgb-transfer: on the
other tasks' xgb-loop logs in that work folder and on --model-logs; its report is the result `ab_search_transfer`). A config one arm measured is replayed for the other (its first measurement), so the arms differ only in
what they pick, not in timing noise. The report scores each config by that first measurement (no re-timing: on a
machine where hundreds of configs come within 10% of the best, bench_search.py's re-timing of contenders would take
longer than the runs), and gives per arm the seeds that reach 95% (`--target`) of the best any arm found, their
median trials, the mean final best, and how many distinct register tiles (innermost factors of the split knobs) each
run measured; and, per task, the share of all measured configs that reach the target (how hard it is to reach at
all). Stores the report as the result `ab_search` (or the one `--section` names); what an A/B decided goes to
docs/experiments.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import reexec_clean, report
from bench_search import (
    OTHER_TASKS,
    TASKS,
    curve,
    first_measurements,
    per_trial,
    transfer_records,
    trials_to_reach,
)

from autotune.tuners.options import XGBOptions  # noqa: E402

AB_TASKS = {**TASKS, **OTHER_TASKS}
DEFAULT_WORK = Path(ROOT, "benchmarks", "work", "ab").resolve()
EARLY = (8, 16, 32)  # the report gives each arm's mean best after these many trials


def shown(path) -> str:
    """A path as the report prints it: relative to this checkout when inside it, else absolute (arms run from other
    worktrees share one report)."""
    path = Path(path).resolve()
    return os.path.relpath(path, ROOT) if path.is_relative_to(ROOT) else str(path)


def arm_label(args, commit: str) -> str:
    """How the report names an arm's tuner: its commit, and the options that differ from cold xgb's defaults."""
    if args.tuner != "xgb":
        return f"{commit}, {args.tuner} search"
    if args.transfer_from:
        return (f"{commit}, transfer from {shown(args.transfer_from)} and {shown(args.model_logs)}"
                + (f", {args.transfer_explore:.0%} of the first batch random" if args.transfer_explore is not None
                   else "")
                + (f", transfer half-life {args.transfer_halflife}" if args.transfer_halflife is not None else "")
                + (f", transfer fit {args.transfer_fit}" if args.transfer_fit is not None else ""))
    if args.features != "loop":
        return f"{commit}, {args.features} features"
    if args.cold_start == "roofline":
        return f"{commit}, cold start roofline" + (f", {args.cold_random:.0%} random" if args.cold_random else "")
    return commit


def run_arm(args, work: Path) -> None:
    from autotune import make_task, tune
    from autotune.measure import LocalBuilder, LocalRunner
    from autotune.measure.replay import ReplayBuilder, ReplayRunner, config_index

    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip()
    arms = work / "arms.json"
    known_arms = json.loads(arms.read_text()) if arms.exists() else {}
    known_arms[args.arm] = arm_label(args, commit)
    arms.write_text(json.dumps(known_arms, indent=1))
    builder, runner = LocalBuilder(), LocalRunner()
    try:
        for label in args.tasks:
            task = make_task(*AB_TASKS[label])
            tdir = work / task.key
            tdir.mkdir(parents=True, exist_ok=True)
            known = first_measurements(tdir)
            chosen = {"features": args.features, "cold_start": args.cold_start, "cold_random": args.cold_random}
            transfer = []
            if args.transfer_from and args.tuner == "xgb":
                transfer = transfer_records(Path(args.transfer_from), task, Path(args.model_logs))
                chosen.update({k: v for k, v in (("transfer_explore", args.transfer_explore),
                                                 ("transfer_halflife", args.transfer_halflife),
                                                 ("transfer_fit", args.transfer_fit)) if v is not None})
            options = XGBOptions(**chosen) if args.tuner == "xgb" else None
            for seed in args.seeds:
                t0 = time.time()
                res = tune(task, trials=args.trials, tuner=args.tuner, log=tdir / f"{args.arm}-s{seed}.jsonl",
                           seed=seed, tuner_options=options, transfer=transfer,
                           builder=ReplayBuilder(known, builder, config_index),
                           runner=ReplayRunner(known, runner, config_index), retime=0)
                print(f"{label} {args.arm} seed {seed}: best {res.best.gflops() if res.best else 0:.1f} GFLOPS "
                      f"({time.time() - t0:.0f} s)", flush=True)
    finally:
        builder.close()
        runner.close()


def register_tiles(records, space) -> int:
    """Distinct register tiles among a run's configs: the innermost factors of the template's `register` split knobs
    (before 2026-12-03, of every split knob), read from the recorded knob values (an arm of another template version
    may number its configs otherwise)."""
    return len({tuple(r.input.config.knobs[n][-1] for n in space.register_knobs) for r in records})


def report_arms(args, work: list[Path]) -> None:
    import numpy as np

    from autotune import load_records, make_task
    from autotune.target import cpu_name, host_llvm_target
    from autotune.templates import resolve, space_of

    arms, folder = {}, {}  # arm -> its label, and the work folder it ran in
    for w in work:
        for arm, text in json.loads((w / "arms.json").read_text()).items():
            arms[arm], folder[arm] = text, w
    if args.arms:
        unknown = set(args.arms) - set(arms)
        if unknown:
            raise SystemExit(f"no arm {', '.join(sorted(unknown))} in {', '.join(str(w / 'arms.json') for w in work)} "
                             f"(arms: {', '.join(arms)})")
        arms = {arm: arms[arm] for arm in args.arms}
    rows = []
    early = [n for n in EARLY if n < args.trials]
    for label in args.tasks:
        task = make_task(*AB_TASKS[label])
        runs = {arm: [load_records(folder[arm] / task.key / f"{arm}-s{s}.jsonl")[: args.trials] for s in args.seeds]
                for arm in arms}
        scores = {w: {i: task.flops / res.mean_s / 1e9 if res.ok else 0.0
                      for i, res in first_measurements(w / task.key).items()} for w in {folder[a] for a in arms}}
        every = [g for by_index in scores.values() for g in by_index.values()]
        best = max(every)
        target = args.target * best
        easy = sum(g >= target for g in every) / len(every)
        space = space_of(resolve(runs[next(iter(arms))][0][0].input.template), task)
        for arm, by_seed in runs.items():
            curves = [curve(per_trial(rs, args.trials, scores[folder[arm]]), args.trials) for rs in by_seed]
            reach = [t for t in (trials_to_reach(c, target) for c in curves) if t is not None]
            median = f"{int(np.median(reach))}" if reach else f"> {args.trials}"
            final = np.mean([c[-1] for c in curves])
            rows.append(f"| {label} | {target:.0f} ({easy:.0%} of {len(every)}) | {arm} ({arms[arm]}) | "
                        f"{len(reach)}/{len(curves)} | {median} | "
                        f"{' / '.join(f'{np.mean([c[n - 1] for c in curves]):.0f}' for n in early)} | "
                        f"{final:.1f} | "
                        f"{np.mean([c[args.trials // 2 - 1] for c in curves]) / best:.3f} / {final / best:.3f} | "
                        f"{np.mean([register_tiles(rs, space) for rs in by_seed]):.1f} |")
    title = "A/B of tuner versions, with transfer (`benchmarks/ab_search.py --transfer-from`)" if args.transfer_from \
        else "A/B of tuner versions (`benchmarks/ab_search.py`)"
    body = [f"## {title}", "",
            f"CPU {cpu_name(host_llvm_target(args.threads))}, {args.threads} threads. Command: `python "
            f"benchmarks/ab_search.py --arm NAME --trials {args.trials} --seeds {' '.join(map(str, args.seeds))} "
            f"--tasks {' '.join(repr(t) for t in args.tasks)}"
            + (f" --work {' '.join(shown(w) for w in work)}" if work != [DEFAULT_WORK] else "")
            + (f" --transfer-from {shown(args.transfer_from)} --model-logs {shown(args.model_logs)}"
               if args.transfer_from else "")
            + "` from each arm's checkout, then `--report"
            + (f" --arms {' '.join(arms)}" if args.arms else "")
            + (f" --target {args.target}" if args.target != 0.95 else "")
            + (f" --section {args.section}" if args.section else "") + "`; "
            + ("xgb pre-trained on the other tasks' records" if args.transfer_from else "cold xgb")
            + ", loop features unless the arm says otherwise; a config measured by one arm is replayed for the "
            "others in its work folder; scores are first measurements.",
            "", f"| task | {args.target:.0%} of best any, GFLOPS (share of measured configs reaching it) | "
            "arm (commit) | "
            f"seeds reaching it | median trials to reach | mean best after {' / '.join(map(str, early))} trials | "
            f"mean final best | mean best after {args.trials // 2} / {args.trials} trials, share of best any | "
            "distinct register tiles per run |",
            "|---|---|---|---|---|---|---|---|---|", *rows]
    report(args.section or ("ab_search_transfer" if args.transfer_from else "ab_search"), "\n".join(body))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arm", help="name of this checkout's tuner version (runs it)")
    ap.add_argument("--report", action="store_true", help="compare the arms run so far")
    ap.add_argument("--tuner", choices=("xgb", "random"), default="xgb",
                    help="the arm's tuner (random: the baseline the xgb arms' sample efficiency is judged by)")
    ap.add_argument("--features", choices=("loop", "knob"), default="loop",
                    help="xgb: the cost model's features (an arm of the tuner with knob features)")
    ap.add_argument("--cold-start", choices=("roofline", "random"), default="random",
                    help="xgb: how the first batch is picked (an arm of the tuner with the other rule)")
    ap.add_argument("--transfer-explore", type=float, metavar="SHARE", help="with --transfer-from: the random "
                    "share of batches while only transferred records guide the search (default: the tuner's)")
    ap.add_argument("--transfer-halflife", type=int, metavar="N", help="with --transfer-from: own records after "
                    "which the task's own rows weigh as much as all transferred ones (default: the tuner's)")
    ap.add_argument("--transfer-fit", choices=("pool", "finetune"), help="with --transfer-from: how the transferred "
                    "and the task's own records train the model (XGBTuner transfer_fit; default: the tuner's)")
    ap.add_argument("--cold-random", type=float, default=0.0, metavar="SHARE",
                    help="xgb, roofline cold start: share of the first batch drawn at random instead")
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--tasks", nargs="+", default=["matmul 1024^3"], choices=list(AB_TASKS))
    ap.add_argument("--work", nargs="+", default=[str(DEFAULT_WORK)],
                    help="work folder (--report: one or more; arms whose template versions differ run in folders of "
                    "their own, as a config index means another config at another version)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--transfer-from", metavar="DIR", help="bench_search.py work folder: pre-train each run on "
                    "the other tasks' xgb-loop logs there (and on --model-logs)")
    ap.add_argument("--model-logs", default=os.path.join(ROOT, "benchmarks", "work", "models"))
    ap.add_argument("--target", type=float, default=0.95, help="report: share of the best any arm found to reach")
    ap.add_argument("--arms", nargs="+", help="arms the report compares (default: every arm run in --work)")
    ap.add_argument("--section", help="result name of the report (default: ab_search, or ab_search_transfer "
                    "with --transfer-from), to keep an earlier A/B's result beside it")
    args = ap.parse_args()
    if bool(args.arm) == args.report:
        ap.error("give either --arm NAME or --report")
    reexec_clean(args.threads)
    work = [Path(w).resolve() for w in args.work]
    if args.arm:
        if len(work) > 1:
            ap.error("an arm runs in one --work folder")
        work[0].mkdir(parents=True, exist_ok=True)
        run_arm(args, work[0])
    else:
        report_arms(args, work)


if __name__ == "__main__":
    main()
