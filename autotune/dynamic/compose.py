"""Cover a run-time size with uKernels: a dynamic program over rows, cheapest predicted time first.

Each uKernel computes `height` rows in `cost_s` seconds. A size m is covered by whole uKernels
plus at most one padded piece (fewer valid rows than its height) at the tail, which pays a copy
through a scratch buffer. The same table serves every size, so it is computed once and grown on
demand; plans are cached per size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    """Rows [offset, offset + rows) computed by uKernel `kernel` (of `height` rows; padded if rows < height)."""

    kernel: int
    offset: int
    rows: int
    height: int

    @property
    def padded(self) -> bool:
        return self.rows < self.height


@dataclass(frozen=True)
class Plan:
    size: int
    pieces: tuple[Piece, ...]
    predicted_s: float

    def describe(self, heights: Sequence[int] | None = None) -> str:
        """`3x64 + 1x16 + pad 5/8`: how many of each uKernel, then the padded tail."""
        counts: dict[int, int] = {}
        for p in self.pieces:
            if not p.padded:
                counts[p.height] = counts.get(p.height, 0) + 1
        parts = [f"{n}x{h}" for h, n in sorted(counts.items(), reverse=True)]
        parts += [f"pad {p.rows}/{p.height}" for p in self.pieces if p.padded]
        return " + ".join(parts) or "empty"


PLANNED_ROWS = 4096  # sizes planned exactly (the compiled plan table's); beyond them and the tallest uKernel's
# height, a size takes as many more pieces of the tallest as bring the rest into the last `tallest` planned sizes


def extra_tallest(top: int, tallest: int, size: int) -> int:
    """Pieces of the tallest uKernel (`tallest` rows) a size takes before the plan of the rest, which then lies in
    the planned sizes' last `tallest` (up to `top`); 0 within them."""
    return max(0, (size - top + tallest - 1) // tallest)


class Planner:
    """Cheapest covering of any size by uKernels of given heights and per-call costs (exactly up to PLANNED_ROWS
    plus the tallest height; a larger size: pieces of the tallest, then the cover of the rest).

    pad_cost(kernel, rows): extra seconds of a padded piece with `rows` valid rows (the copies).
    """

    def __init__(self, heights: Sequence[int], costs: Sequence[float],
                 pad_cost: Callable[[int, int], float] = lambda k, r: 0.0):
        if not heights or len(heights) != len(costs) or min(heights) < 1:
            raise ValueError("need one positive height and one cost per uKernel")
        self.heights, self.costs, self.pad_cost = list(heights), list(costs), pad_cost
        self._tallest = self.heights.index(max(self.heights))
        self._best = [0.0]  # _best[m]: cheapest cover of m rows
        self._choice = [-1]  # uKernel of the last piece of that cover
        self._plans: dict[int, Plan] = {}

    def _grow(self, size: int) -> None:
        for m in range(len(self._best), size + 1):
            best, choice = float("inf"), -1
            for k, (h, c) in enumerate(zip(self.heights, self.costs)):
                cost = self._best[m - h] + c if h <= m else c + self.pad_cost(k, m)
                # ties: the larger uKernel (fewer calls)
                if cost < best - 1e-15 or (abs(cost - best) <= 1e-15 and h > self.heights[choice]):
                    best, choice = cost, k
            self._best.append(best)
            self._choice.append(choice)

    def _extra(self, size: int) -> int:
        """Pieces of the tallest uKernel `size` takes before its planned rest."""
        tallest = self.heights[self._tallest]
        return extra_tallest(PLANNED_ROWS + tallest, tallest, size)

    def cost(self, size: int) -> float:
        """Predicted seconds of the cheapest cover of `size` rows."""
        extra = self._extra(size)
        rest = size - extra * self.heights[self._tallest]
        self._grow(rest)
        return self._best[rest] + extra * self.costs[self._tallest]

    def plan(self, size: int) -> Plan:
        """Pieces covering rows [0, size) exactly once: whole uKernels first, the padded one last."""
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        plan = self._plans.get(size)
        if plan is None:
            whole: list[int] = [self._tallest] * self._extra(size)
            padded: tuple[int, int] | None = None
            m = size - len(whole) * self.heights[self._tallest]
            self._grow(m)
            while m > 0:
                k = self._choice[m]
                h = self.heights[k]
                if h <= m:
                    whole.append(k)
                    m -= h
                else:
                    padded, m = (k, m), 0
            pieces, offset = [], 0
            for k in sorted(whole, key=lambda k: -self.heights[k]):
                pieces.append(Piece(k, offset, self.heights[k], self.heights[k]))
                offset += self.heights[k]
            if padded is not None:
                pieces.append(Piece(padded[0], offset, padded[1], self.heights[padded[0]]))
            plan = self._plans[size] = Plan(size, tuple(pieces), self.cost(size))
        return plan
