"""Plain values passed between tuner, builder, runner and log: what is measured, what came of it, and why it failed."""

from __future__ import annotations

import enum
import re
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from ..space import Config
from ..task import Task


class ErrorKind(str, enum.Enum):
    """Why a candidate has no costs (records store the value)."""

    INVALID_CONFIG = "invalid_config"   # the template rejected the config (illegal schedule)
    COMPILE_ERROR = "compile_error"
    COMPILE_TIMEOUT = "compile_timeout"
    RUNTIME_ERROR = "runtime_error"     # includes a crashed runner process
    RUN_TIMEOUT = "run_timeout"
    WRONG_ANSWER = "wrong_answer"       # output differs from the numpy reference


def now() -> float:
    """The timestamp a result records: seconds since the epoch, to the millisecond."""
    return round(time.time(), 3)


@dataclass(frozen=True)
class MeasureInput:
    task: Task
    config: Config
    template: str  # template reference "module:attr"


@dataclass(frozen=True)
class BuildResult:
    artifact: str | None      # path of the exported library, or None on error
    error: ErrorKind | None
    message: str
    build_s: float


@dataclass(frozen=True)
class MeasureResult:
    """Costs (seconds per run) or an error kind with a message, never both."""

    costs: tuple[float, ...] | None
    error: ErrorKind | None
    message: str
    build_s: float
    timestamp: float

    def __post_init__(self) -> None:
        if (self.costs is None) == (self.error is None):
            raise ValueError("a MeasureResult holds costs or an error, exactly one of them")

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def mean_s(self) -> float:
        return sum(self.costs) / len(self.costs) if self.costs else float("inf")


def failure_reason(message: str) -> str:
    """One line saying why a build or a run failed, from its error text: the first line naming an error (else the
    first line), temporary paths and numbers masked so that equal causes count together."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return "no message"
    line = next((x for x in lines if re.search(r"\berror\b", x, re.I)), lines[0])
    line = re.sub(r"/tmp/\S*?/", "", line)
    return re.sub(r"\d+", "N", line)[:160]


def error_summary(results: Iterable[BuildResult | MeasureResult], top: int = 3) -> list[str]:
    """The most common causes of failed builds or measurements, e.g. "5 x compile_error: ld: error adding ..."."""
    causes = Counter(f"{r.error.value}: {failure_reason(r.message)}" for r in results if r.error is not None)
    return [f"{n} x {cause}" for cause, n in causes.most_common(top)]
