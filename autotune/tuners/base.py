"""The tuner interface: propose configs, learn from results. One loop drives every tuner."""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from ..measure_types import MeasureInput, MeasureResult
from ..space import ConfigSpace
from ..task import Task


class Tuner(Protocol):
    """Constructed as Tuner(task, space, template_ref, seed=..., **options)."""

    def next_batch(self, n: int) -> list[int]:
        """Up to n config indices never proposed or measured before ([] when the space is exhausted)."""

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from measurements (also called once with the records of a resumed log)."""


def runnable_filter(task: Task | None, space: ConfigSpace, template_ref: str) -> Callable[[int], bool] | None:
    """Predicate on config indices: False for a config that breaks the target's limits; None where none apply."""
    if task is None or task.target_kind != "cuda":
        return None
    import search_spaces

    from ..gpu_limits import check_config

    template = search_spaces.resolve(template_ref)
    return lambda i: check_config(task, template, space.get(i)) is None
