"""The tuner interface: propose configs, learn from results. One loop drives every tuner."""

from __future__ import annotations

from typing import Protocol, Sequence

from ..measure_types import MeasureInput, MeasureResult


class Tuner(Protocol):
    """Constructed as Tuner(task, space, template_ref, seed=..., **options)."""

    def next_batch(self, n: int) -> list[int]:
        """Up to n config indices never proposed or measured before ([] when the space is exhausted)."""

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from measurements (also called once with the records of a resumed log)."""
