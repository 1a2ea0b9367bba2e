"""Batch picking over scored configs: simulated annealing, diverse top picks, stale register tiles."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..space import ConfigSpace

SHORTLIST = 0.25  # the batch is picked, for score and knob coverage, from this best share of the search's points
Scorer = Callable[[Sequence[int]], np.ndarray]


def anneal(space: ConfigSpace, score: Scorer, starts: Sequence[int], steps: int, rng: np.random.Generator,
           temperature: float = 1.0) -> dict[int, float]:
    """Parallel simulated annealing from `starts` (one chain each); returns every visited index with its score.

    The temperature starts at `temperature` times the spread of the start scores and falls linearly to 0;
    a chain moves to a random neighbour when it scores higher, or with probability exp(delta / T).
    """
    chains = list(starts)
    scores = score(chains)
    visited = dict(zip(chains, scores.tolist()))
    finite = scores[np.isfinite(scores)]
    t0 = temperature * (float(finite.std()) if len(finite) > 1 and finite.std() > 0 else 1.0)
    for step in range(steps):
        temp = t0 * (1.0 - step / steps) + 1e-12
        moves = [space.neighbour(c, rng) for c in chains]
        new = score(moves)
        visited.update(zip(moves, new.tolist()))
        draws = rng.random(len(chains))
        for c, (old_s, new_s) in enumerate(zip(scores, new)):
            if new_s >= old_s or (np.isfinite(new_s) and draws[c] < math.exp((new_s - old_s) / temp)):
                chains[c], scores[c] = moves[c], new_s
    return visited


def stale_trials(measured: Mapping[int, float], space: ConfigSpace) -> dict[tuple[int, ...], int]:
    """For each register tile (`ConfigSpace.register_tile`) of the `measured` configs (index -> throughput, in
    the order measured): the trials spent on it since the best of them was measured."""
    best: dict[tuple[int, ...], float] = {}
    stale: dict[tuple[int, ...], int] = {}
    for index, value in measured.items():
        tile = space.register_tile(index)
        if tile not in best or value > best[tile]:
            best[tile], stale[tile] = value, 0
        else:
            stale[tile] += 1
    return stale


def diverse_top(candidates: dict[int, float], n: int, space: ConfigSpace, knob_weight: float = 0.1,
                min_distance: int = 1, penalty: Mapping[int, float] | None = None,
                chosen: Sequence[int] = ()) -> list[int]:
    """Diversity-aware batch: greedily the index whose score percentile among the candidates, plus
    `knob_weight` for each knob value (and each innermost split factor, `ConfigSpace.coverage`) that no
    index picked so far has, minus its `penalty` if any, is highest (a submodular pick).

    A pick within `min_distance` knob changes of an earlier one (or of one already `chosen` for the batch) is
    taken only when nothing else is left.
    The coverage bonus keeps a batch from spending all its trials on the cheap knobs (unroll, loop order)
    or the outer tiles of one register tile the model likes: it also tries the next best register tiles.
    """
    ranked = sorted((i for i, s in candidates.items() if np.isfinite(s)), key=lambda i: (-candidates[i], i))
    if not ranked or n <= 0:
        return []
    digits = np.array([space.digits(i) for i in ranked])
    cover = np.array([space.coverage(i) for i in ranked])
    gain_base = 1.0 - np.arange(len(ranked)) / len(ranked)  # score percentile, 1 for the best
    if penalty:
        gain_base -= np.array([penalty.get(i, 0.0) for i in ranked])
    covered = np.zeros_like(cover, dtype=bool)  # covered[r, c]: candidate r's value c is in the batch
    near = np.zeros(len(ranked), dtype=bool)  # within min_distance of a pick
    taken = np.zeros(len(ranked), dtype=bool)
    for c in chosen:
        covered |= cover == np.array(space.coverage(c))
        near |= (digits != np.array(space.digits(c))).sum(axis=1) < min_distance
    picked: list[int] = []
    for _ in range(min(n, len(ranked))):
        gain = gain_base + knob_weight * (~covered).sum(axis=1) - 2.0 * near  # near-duplicates: only as a last resort
        gain[taken] = -np.inf
        r = int(np.argmax(gain))
        picked.append(ranked[r])
        taken[r] = True
        covered |= cover == cover[r]
        near |= (digits != digits[r]).sum(axis=1) < min_distance
    return picked


def pick_batch(scored: dict[int, float], n: int, space: ConfigSpace, knob_weight: float = 0.1,
               min_distance: int = 1, penalty: Mapping[int, float] | None = None,
               chosen: Sequence[int] = ()) -> list[int]:
    """The model's picks of a batch: `diverse_top` over the best SHORTLIST share of the scored points
    (at least 4n of them), so the coverage bonus trades score only among configs the model rates well."""
    ranked = sorted(scored, key=lambda i: (-scored[i], i))
    shortlist = {i: scored[i] for i in ranked[: max(4 * n, int(SHORTLIST * len(ranked)))]}
    return diverse_top(shortlist, n, space, knob_weight, min_distance, penalty, chosen)
