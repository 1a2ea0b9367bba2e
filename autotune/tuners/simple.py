"""Model-free tuners: random sampling and grid (index order).

On a GPU, both skip configs the device cannot run (`gpu_limits.check_config`: threads per block, shared
memory, registers), as the model-guided tuner does, so that no trial is spent on a config rejected before it
is compiled (about half or more of uniform random conv2d and matmul configs can break a limit).
Neither takes options or learns from other tasks' records: `make_tuner`'s options must be None, and its transfer
records and feature cache are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Sequence

import numpy as np

from ..measure.types import MeasureInput, MeasureResult
from ..records import Record
from ..space import ConfigSpace
from ..task import Task
from .base import runnable_filter


class RandomTuner:
    """Uniform random configs among those the space allows and the target can run, never one proposed before."""

    options_type: ClassVar[type | None] = None
    learns_from_transfer: ClassVar[bool] = False

    def __init__(self, task: Task, space: ConfigSpace, template_ref: str, seed: int = 0, options: Any = None,
                 transfer: Iterable[Record] = (), cache: Any = None):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.visited: set[int] = set()
        self.runnable = runnable_filter(task, space, template_ref)

    def next_batch(self, n: int) -> list[int]:
        batch: list[int] = []
        for _ in range(20):  # on a GPU, resample what breaks a limit (rejected configs are never drawn again)
            drawn = self.space.sample(self.rng, n - len(batch), exclude=self.visited)
            self.visited.update(drawn)
            batch += drawn if self.runnable is None else [i for i in drawn if self.runnable(i)]
            if len(batch) >= n or not drawn:
                break
        self.rng.shuffle(batch)
        return batch

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        self.visited.update(inp.config.index for inp in inputs)

    def add_transfer(self, records: Iterable[Record]) -> None:
        """Records of other tasks change nothing here."""


class GridTuner:
    """Configs in index order, skipping those already measured and those the space does not allow."""

    options_type: ClassVar[type | None] = None
    learns_from_transfer: ClassVar[bool] = False

    def __init__(self, task: Task, space: ConfigSpace, template_ref: str, seed: int = 0, options: Any = None,
                 transfer: Iterable[Record] = (), cache: Any = None):
        self.space = space
        self.cursor = 0
        self.visited: set[int] = set()
        self.runnable = runnable_filter(task, space, template_ref)

    def next_batch(self, n: int) -> list[int]:
        batch: list[int] = []
        while len(batch) < n and self.cursor < len(self.space):
            i = self.cursor
            if i not in self.visited and self.space.allows(i) and (self.runnable is None or self.runnable(i)):
                batch.append(i)
            self.cursor += 1
        self.visited.update(batch)
        return batch

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        self.visited.update(inp.config.index for inp in inputs)

    def add_transfer(self, records: Iterable[Record]) -> None:
        """Records of other tasks change nothing here."""
