"""Model-free tuners: random sampling and grid (index order)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..measure_types import MeasureInput, MeasureResult
from ..space import ConfigSpace
from ..task import Task


class RandomTuner:
    """Uniform random configs among those the space allows, never one proposed or measured before."""

    def __init__(self, task: Task, space: ConfigSpace, template_ref: str, seed: int = 0):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.visited: set[int] = set()

    def next_batch(self, n: int) -> list[int]:
        batch = self.space.sample(self.rng, n, exclude=self.visited)
        self.rng.shuffle(batch)
        self.visited.update(batch)
        return batch

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        self.visited.update(inp.config.index for inp in inputs)


class GridTuner:
    """Configs in index order, skipping those already measured and those the space does not allow."""

    def __init__(self, task: Task, space: ConfigSpace, template_ref: str, seed: int = 0):
        self.space = space
        self.cursor = 0
        self.visited: set[int] = set()

    def next_batch(self, n: int) -> list[int]:
        batch: list[int] = []
        while len(batch) < n and self.cursor < len(self.space):
            if self.cursor not in self.visited and self.space.allows(self.cursor):
                batch.append(self.cursor)
            self.cursor += 1
        self.visited.update(batch)
        return batch

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        self.visited.update(inp.config.index for inp in inputs)
