"""Timing: a compiled kernel with TVM's time evaluator, and a Python callable by wall clock."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

FLUSHED_CALLS_MAX = 400  # timed calls of one kernel with the CPU cache flushed before each


def time_kernel(lib: Any, dev: Any, args: Sequence[Any], repeat: int, min_repeat_ms: float,
                cache_flush: bool = False) -> list[float]:
    """Seconds per call of lib["main"](*args), one value per repeat (local or RPC module).

    Warm: each repeat calls the kernel back to back for at least min_repeat_ms. With cache_flush (CPU only),
    every timed call starts with the operands after the first flushed from the cache: TVM's time evaluator
    flushes once per repeat, so each of its repeats is one call, and `repeat` groups of calls (together about
    min_repeat_ms each, at most FLUSHED_CALLS_MAX calls in all) are averaged into the values returned.
    """
    if not cache_flush:
        timer = lib.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=int(min_repeat_ms))
        return [float(x) for x in timer(*args).results]
    once = float(lib.time_evaluator("main", dev, number=1, repeat=1)(*args).results[0])
    per_group = max(1, min(FLUSHED_CALLS_MAX // repeat, math.ceil(min_repeat_ms / 1e3 / max(once, 1e-7))))
    timer = lib.time_evaluator("main", dev, number=1, repeat=repeat * per_group, min_repeat_ms=0,
                               f_preproc="cache_flush_cpu_non_first_arg")
    calls = [float(x) for x in timer(*args).results]
    return [sum(calls[g * per_group:(g + 1) * per_group]) / per_group for g in range(repeat)]


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
