"""Re-timing the contenders after the last trial, so that the best config is not a lucky timing.

One timing of a kernel varies by a few percent and a machine's speed can drift by as much within a minute,
so the best of hundreds of single timings is partly luck. After the last trial, the contenders (the configs
first measured within `RetimePolicy.share` of the best one, at most `RetimePolicy.top` of them,
`records.contenders`) are timed `rounds` more times, each round over all of them in a shuffled order, and
`records.best_record` scores each contender by the median of its timings. Re-timings are ordinary records
of the same config in the log: a run stopped among them resumes with the rounds still missing.
"""

from __future__ import annotations

import random
from collections import Counter

from .measure.types import MeasureInput
from .records import RETIME, Record, RetimePolicy, config_key, contenders

RETIMES = RETIME.rounds  # default rounds: with the first timing, a median of 3


def next_round(trials: list[Record], retimes: list[Record], rounds: int, seed: int = 0,
               policy: RetimePolicy = RETIME) -> list[MeasureInput]:
    """The contenders still short of `rounds` re-timings and timed the fewest times, in a shuffled order
    (empty when every contender has its `rounds`)."""
    done = Counter(config_key(r) for r in retimes)
    short = [r for r in contenders(trials, policy) if done[config_key(r)] < rounds]
    if not short:
        return []
    fewest = min(done[config_key(r)] for r in short)
    inputs = [r.input for r in short if done[config_key(r)] == fewest]
    random.Random(seed + len(retimes)).shuffle(inputs)
    return inputs
