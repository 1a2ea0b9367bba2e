"""A shipped config mapped from another task (the corpus's nearest one: `autotune.shipped`) is measured against
the heuristic config before a build trusts it, where that is cheap: the build's target is a CPU this machine can
run (its instructions are this machine's). Both kernels are built and timed in worker processes, each checked
against the reference, as a tuning trial is; the faster one is built. A config of the same task, measured on a
machine of the class, is trusted as it is."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..measure import LocalBuilder, LocalRunner, MeasureInput, RunnerOptions
from ..operators import default_template_ref
from ..space import Config
from ..target import cpu_features, host_cores, host_llvm_target
from ..task import Task

TIMING = RunnerOptions(repeat=3, min_repeat_ms=20.0)  # a ranking of two kernels, not a record of their speed


@dataclass(frozen=True)
class Contest:
    """A task's shipped config (mapped from another task) against its heuristic one."""

    task: Task
    shipped: Config
    heuristic: Config
    template: str | None = None  # reference of the configs' template (None: the operator's default)


@dataclass(frozen=True)
class Verdict:
    """A contest's outcome: the shipped config's speed over the heuristic one's (0: the shipped kernel failed)."""

    speedup: float
    fastest_s: float = float("inf")  # the faster kernel's mean seconds here (inf: both failed)

    @property
    def keeps_shipped(self) -> bool:
        return self.speedup >= 1.0

    def describe(self) -> str:
        """For a build report: "1.90x the heuristic config here", or why the shipped config was left out."""
        if self.keeps_shipped:
            return f"{self.speedup:.2f}x the heuristic config here"
        return "failed here" if self.speedup == 0.0 else f"ran {self.speedup:.2f}x the heuristic config's speed here"


def measurable_here(target: dict[str, Any]) -> bool:
    """Whether this machine can time kernels built for `target`: a CPU target whose instructions it has."""
    return target.get("kind") == "llvm" and cpu_features(target) <= cpu_features(host_llvm_target())


def verdicts(contests: Sequence[Contest]) -> list[Verdict]:
    """For each contest, the shipped config's speed over the heuristic one's (its time over the shipped one's),
    measured here: 0 where the shipped kernel failed (to build, to run, or to match the reference), inf where the
    heuristic one did."""
    if not contests:
        return []
    inputs = [MeasureInput(c.task, cfg, c.template or default_template_ref(c.task.op, c.task.target_kind))
              for c in contests for cfg in (c.shipped, c.heuristic)]
    threads = min(int(contests[0].task.target.get("num-cores", 0) or 0), host_cores())
    builder, runner = LocalBuilder(), LocalRunner(dataclasses.replace(TIMING, threads=threads))
    try:
        results = runner.run(inputs, builder.build(inputs))
    finally:
        builder.close()
        runner.close()
    return [Verdict(0.0 if not shipped.ok else heuristic.mean_s / shipped.mean_s if heuristic.ok else float("inf"),
                    min((r.mean_s for r in (shipped, heuristic) if r.ok), default=float("inf")))
            for shipped, heuristic in zip(results[::2], results[1::2])]
