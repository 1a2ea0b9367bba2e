"""How well the roofline prior (`cost_models/prior.py`) ranks configs before any measurement, offline.

    python benchmarks/eval_prior.py                 # bench_search.py's logs of its 4 tasks

Reads the logs `bench_search.py` wrote (--work) and uses the configs its random-search runs drew, a sample of
the whole space: the Spearman rank correlation of the prior with their measured throughput; and a cold run's
first batch replayed --draws times: from 64 of those configs (`COLD_POOL`), the 8 (`COLD_BATCH`) the xgb tuner
picks by the prior (`pick_batch`, as `XGBTuner` does), against 8 of them at random (the `--cold-start random`
rule); the best of each batch relative to the best of all the random configs, mean and 10th percentile over the
draws. No timing: this machine's CPU model (`autotune/hardware.py`) only sets the prior's lanes, registers,
cores and cache sizes. Stores the table as the result `roofline_prior`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import reexec_clean, report
from bench_search import TASKS, config_rows, search_records


def random_configs(work: Path, label: str):
    """(task, space, config indices, loop rows, throughputs) of the configs random search measured."""
    from autotune import make_task
    from autotune.templates import resolve, space_of

    task = make_task(*TASKS[label])
    _, drawn = search_records(work, task)
    data, indices = config_rows(drawn)
    space = space_of(resolve(drawn[0].input.template), task)
    return task, space, indices, data.X, data.y


def first_batches(space, indices, scores, y, draws: int, rng):
    """Best of the prior's first batch and of a random one, relative to max(y), over `draws` replays."""
    import numpy as np

    from autotune.tuners.batch import pick_batch
    from autotune.tuners.xgb import COLD_BATCH, COLD_POOL

    where = {i: k for k, i in enumerate(indices)}
    prior, blind = [], []
    for _ in range(draws):
        pool = rng.choice(len(indices), min(COLD_POOL, len(indices)), replace=False)
        picked = pick_batch({indices[k]: float(scores[k]) for k in pool}, COLD_BATCH, space)
        prior.append(max(y[where[i]] for i in picked))
        blind.append(y[pool[:COLD_BATCH]].max())
    top = y.max()
    return np.array(prior) / top, np.array(blind) / top


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="benchmarks/work/search", help="bench_search.py's work folder")
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--draws", type=int, default=300, help="first batches replayed per task")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    reexec_clean(args.threads)
    import numpy as np

    from autotune.hardware import cpu_model
    from autotune.tuners.xgb import COLD_BATCH, COLD_POOL
    from cost_models import rank_correlation
    from cost_models.prior import prior_scores

    t0 = time.time()
    rows = ["| task | random configs | Spearman, prior vs measured | best of the prior's first batch (mean / 10th "
            "percentile) | best of a random first batch (mean / 10th percentile) |", "|---|---|---|---|---|"]
    cpu = None
    for label in args.tasks:
        task, space, indices, X, y = random_configs(Path(args.work), label)
        cpu = cpu_model(task.target)
        scores = prior_scores(X, cpu)
        ok = np.isfinite(scores)
        prior, blind = first_batches(space, indices, scores, y, args.draws, np.random.default_rng(0))
        rows.append(f"| {label} | {len(indices)} | {rank_correlation(scores[ok], y[ok]):.2f} | "
                    f"{prior.mean():.0%} / {np.percentile(prior, 10):.0%} | "
                    f"{blind.mean():.0%} / {np.percentile(blind, 10):.0%} |")
        print(rows[-1], flush=True)
    report("roofline_prior", "\n".join([
        "## Cold start: the roofline prior, offline (`benchmarks/eval_prior.py`)", "",
        f"Command: `python benchmarks/eval_prior.py --work {args.work}`; {time.time() - t0:.0f} s. CPU model: "
        f"{cpu.name}, {cpu.lanes} fp32 lanes, {cpu.vector_registers} vector registers, {cpu.cores} cores, "
        f"L1 {cpu.l1d_bytes >> 10} KiB, L2 {cpu.l2_bytes >> 10} KiB, L3 {cpu.l3_bytes >> 20} MiB. On the configs "
        f"random search drew in `bench_search.py`'s runs: Spearman of the prior with measured throughput, and "
        f"{args.draws} replays of a cold run's first batch: {COLD_BATCH} configs picked by the prior from "
        f"{COLD_POOL} random ones, or {COLD_BATCH} random ones; the best of the batch relative to the best of "
        "all the random configs.", "", *rows]))


if __name__ == "__main__":
    main()
