"""Build-only runs: propose configs, validate and compile them, measure nothing.

What a machine without the target device (e.g. no GPU) can still check: how many configs
pass the validity filter and how many compile.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..task import Task
from ..templates import resolve, space_of
from .local import LocalBuilder
from .types import BuildResult, ErrorKind, MeasureInput, error_summary


@dataclass
class BuildReport:
    proposed: int = 0
    built: int = 0
    invalid: int = 0
    compile_errors: int = 0
    reasons: Counter = field(default_factory=Counter)  # rejection reasons, numbers masked
    build_failures: list[BuildResult] = field(default_factory=list)  # what failed to compile, and why

    @property
    def valid(self) -> int:
        """Candidates that passed the validity filter (built or failed to build)."""
        return self.proposed - self.invalid

    def summary(self) -> str:
        lines = [f"{self.proposed} candidates: {self.valid} valid, {self.invalid} invalid, "
                 f"{self.built} built, {self.compile_errors} failed to build"]
        lines += [f"rejected: {n} x {r}" for r, n in self.reasons.most_common(5)]
        lines += [f"failed to build: {line}" for line in error_summary(self.build_failures, top=5)]
        return "\n".join(lines)


def build_only(task: Task, trials: int, template_ref: str, seed: int = 0, batch_size: int = 16,
               build_timeout: float = 60.0) -> BuildReport:
    """Random configs until `trials` of them pass the validity filter (and were compiled), or 50x as many drawn.

    Uniform draws, not the tuners' (which skip what breaks the target's limits): the report says how much of the
    space the filter rejects, and why.
    """
    space = space_of(resolve(template_ref), task)
    rng = np.random.default_rng(seed)
    drawn: set[int] = set()
    report = BuildReport()
    builder = LocalBuilder(timeout=build_timeout)
    try:
        while report.valid < trials and report.proposed < 50 * trials:
            batch = space.sample(rng, min(batch_size, trials - report.valid), exclude=drawn)
            if not batch:
                break
            drawn.update(batch)
            inputs = [MeasureInput(task, space.get(i), template_ref) for i in batch]
            for res in builder.build(inputs):
                report.proposed += 1
                if res.error is ErrorKind.INVALID_CONFIG:
                    report.invalid += 1
                    report.reasons[re.sub(r"\d+", "N", res.message)[:80]] += 1
                elif res.error is None:
                    report.built += 1
                else:
                    report.compile_errors += 1
                    report.build_failures.append(res)
    finally:
        builder.close()
    return report
