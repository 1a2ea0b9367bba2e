"""The tuner interface: propose configs, learn from results. One loop drives every tuner."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Callable, ClassVar, Protocol, Sequence

from ..gpu_limits import check_config
from ..measure.types import MeasureInput, MeasureResult
from ..records import Record
from ..space import ConfigSpace
from ..task import Task
from ..templates import resolve


class Tuner(Protocol):
    """Constructed as Tuner(task, space, template_ref, seed=..., options=..., transfer=..., cache=...)
    (`autotune.tuners.make_tuner`); `options` is of `options_type`, None for the defaults."""

    options_type: ClassVar[type | None]  # None: the tuner takes no options
    learns_from_transfer: ClassVar[bool]  # False: transfer records are ignored (callers need not read them)

    def __init__(self, task: Task, space: ConfigSpace, template_ref: str, seed: int = 0, options: Any = None,
                 transfer: Iterable[Record] = (), cache: Any = None) -> None: ...

    def next_batch(self, n: int) -> list[int]:
        """Up to n config indices never proposed or measured before ([] when the space is exhausted)."""

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from measurements (also called once with the records of a resumed log)."""

    def add_transfer(self, records: Iterable[Record]) -> None:
        """Learn from more records of other tasks (a tuner that does not learn from them ignores them)."""


def runnable_filter(task: Task | None, space: ConfigSpace, template_ref: str) -> Callable[[int], bool] | None:
    """Predicate on config indices: False for a config that breaks the target's limits; None where none apply."""
    if task is None or task.target_kind != "cuda":
        return None
    template = resolve(template_ref)
    return lambda i: check_config(task, template, space.get(i)) is None
