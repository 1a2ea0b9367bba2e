"""Wall-clock timing of a Python callable, for figures that include Python-side dispatch."""

from __future__ import annotations

import time
from collections.abc import Callable


def time_calls(fn: Callable[[], object], repeat: int = 7, min_s: float = 0.1) -> list[float]:
    """Seconds per call of fn(), one value per repeat; each repeat runs long enough (>= min_s) to time well.

    fn is called once first (warm-up), then the number of calls per repeat is doubled until one
    repeat lasts min_s.
    """
    fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t0 >= min_s:
            break
        n *= 2
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n)
    return samples
