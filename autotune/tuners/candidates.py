"""The configs one search may still propose: their feature rows, which ones the target cannot run or the template
rejects, which ones were proposed, and (with loop features) which ones schedule the TIR of a proposed one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from cost_models.base import CostModel
from cost_models.features import FeatureCache, RowSource, extract

from ..space import ConfigSpace
from ..task import Task
from .base import runnable_filter

if TYPE_CHECKING:
    from ..templates import Template


class Candidates:
    """Feature rows and bookkeeping of one task's configs (`features`: a kind of `cost_models.features.KINDS`)."""

    def __init__(self, task: Task, space: ConfigSpace, template_ref: str, template: Template, features: str,
                 cache: FeatureCache, pool: RowSource | None = None):
        self.task, self.space, self.template, self.features = task, space, template, features
        self.cache, self.pool = cache, pool
        self.runnable = runnable_filter(task, space, template_ref)  # None: the target has no limits to check
        self.proposed: set[int] = set()
        self.proposed_rows: set[bytes] = set()  # loop-feature rows of proposed configs (same TIR = same row)
        self.invalid: set[int] = set()  # the template rejects them or the target cannot run them: never proposed

    def may_propose(self, index: int) -> bool:
        """Neither proposed nor known invalid."""
        return index not in self.proposed and index not in self.invalid

    def rows(self, indices: Sequence[int]) -> np.ndarray:
        return extract(self.task, self.template, self.space, indices, self.features, self.cache, self.pool)

    def breaks_limits(self, indices: Sequence[int]) -> np.ndarray:
        """Mask of configs the target cannot run (e.g. too many GPU threads)."""
        if self.runnable is None:
            return np.zeros(len(indices), dtype=bool)
        return np.array([not self.runnable(i) for i in indices], dtype=bool)

    def score(self, model: CostModel, indices: Sequence[int]) -> np.ndarray:
        """The model's scores, -inf (and marked invalid) for configs the template rejects or the target cannot run."""
        X = self.rows(indices)
        bad = ~np.isfinite(X).all(axis=1) | self.breaks_limits(indices)
        self.invalid.update(i for i, b in zip(indices, bad) if b)
        scores = model.predict(X)
        scores[bad] = -np.inf
        return scores

    def measured_rows(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Rows of measured configs and the mask of those the template accepts; the others are marked invalid,
        and with loop features the accepted rows count as proposed (measured configs of a resumed log too)."""
        X = self.rows(indices)
        ok = np.isfinite(X).all(axis=1)
        self.invalid.update(i for i, good in zip(indices, ok) if not good)
        if self.features == "loop":
            self.proposed_rows.update(row.tobytes() for row in X[ok])
        return X, ok

    def propose(self, batch: Sequence[int]) -> None:
        self.proposed.update(batch)
        if self.features == "loop" and batch:
            self.proposed_rows.update(row.tobytes() for row in self.rows(batch))

    def distinct(self, scored: dict[int, float], taken: Sequence[int] = ()) -> dict[int, float]:
        """With loop features, one config per distinct row, none with the row of a proposed config (or of one
        `taken` for the batch being planned).

        Knob values that leave the scheduled TIR unchanged (e.g. an unroll limit above every loop's extent)
        give the same row: measuring the twin of a measured config teaches nothing and costs a trial.
        """
        if self.features != "loop" or not scored:
            return scored
        order = sorted(scored, key=lambda i: (-scored[i], i))
        seen = self.proposed_rows | {row.tobytes() for row in self.rows(list(taken))}
        out = {}
        for i, row in zip(order, self.rows(order)):
            key = row.tobytes()
            if key not in seen:
                seen.add(key)
                out[i] = scored[i]
        return out

    def draw(self, n: int, taken: set[int], rng: np.random.Generator) -> list[int]:
        """n random indices never proposed nor `taken` that the target can run; with loop features, only configs
        the template accepts."""
        out: list[int] = []
        for _ in range(8):
            if len(out) >= n:
                break
            exclude = self.proposed | self.invalid | taken | set(out)
            cands = self.space.sample(rng, 2 * (n - len(out)), exclude=exclude)
            if not cands:
                break
            cands = [cands[k] for k in rng.permutation(len(cands))]
            broken = self.breaks_limits(cands)
            self.invalid.update(i for i, b in zip(cands, broken) if b)
            cands = [i for i, b in zip(cands, broken) if not b]
            if self.features == "loop":
                ok = np.isfinite(self.rows(cands)).all(axis=1)
                self.invalid.update(i for i, good in zip(cands, ok) if not good)
                cands = [i for i, good in zip(cands, ok) if good]
            out += cands[: n - len(out)]
        return out
