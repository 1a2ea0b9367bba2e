"""Plain values passed between tuner, builder, runner and log."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .space import Config
from .task import Task


class ErrorKind(str, enum.Enum):
    INVALID_CONFIG = "invalid_config"   # the template rejected the config (illegal schedule)
    COMPILE_ERROR = "compile_error"
    COMPILE_TIMEOUT = "compile_timeout"
    RUNTIME_ERROR = "runtime_error"     # includes a crashed runner process
    RUN_TIMEOUT = "run_timeout"
    WRONG_ANSWER = "wrong_answer"       # output differs from the numpy reference


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
