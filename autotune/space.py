"""Knobs, config spaces and configs: the vocabulary schedule templates are written in.

A space is an ordered list of knobs, each with a finite list of candidate values. A config
is a mixed-radix index into the space (the first knob varies slowest) and back.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np


SMALL_SPACE = 1 << 16  # `sample` looks at every config of a space this small when random draws fall short
NEIGHBOUR_TRIES = 16  # random one-knob steps `neighbour` tries before it stays put
MAX_NEAREST = 64  # configs `nearest` returns at most


@dataclass(frozen=True)
class Knob:
    """A named list of candidate values. `kind` is split / reorder / annotate / choice."""

    name: str
    kind: str
    candidates: tuple[Any, ...]

    def __len__(self) -> int:
        return len(self.candidates)

    def numeric(self, value: Any) -> list[float]:
        """Numbers describing a value, for knob features of the cost model."""
        if self.kind == "split":
            return [math.log2(f) for f in value]
        if self.kind == "reorder":
            return [float(v) for v in value]
        return [float(self.candidates.index(value))]


@functools.lru_cache(maxsize=4096)
def _divisors(n: int) -> tuple[int, ...]:
    """The divisors of n in ascending order (found up to its square root: fast for any extent)."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return tuple(small + large[::-1])


def _factorizations(n: int, parts: int) -> list[tuple[int, ...]]:
    """Every way to write n as a product of `parts` factors (outermost first), ordered by the product of the inner
    factors ascending, then likewise within it."""
    if parts == 1:
        return [(n,)]
    out = []
    for d in _divisors(n):
        out += [(n // d,) + rest for rest in _factorizations(d, parts - 1)]
    return out


def split_knob(name: str, extent: int, parts: int, policy: str = "factors",
               max_inner: int | None = None, inner_candidates: Iterable[int] | None = None) -> Knob:
    """Tile an axis of `extent` into `parts` loops (outermost first).

    policy "factors": every exact factorisation (product == extent);
    policy "power2": inner factors are powers of two, the outer loop is ceil(extent / inner)
    (templates must then handle the tail, e.g. with a predicate from split);
    `max_inner` bounds the product of the inner factors; `inner_candidates` restricts the
    innermost factor (e.g. multiples of the vector width).
    """
    if policy == "factors":
        cands = _factorizations(extent, parts)
    elif policy == "power2":
        pows = [2 ** i for i in range(int(math.log2(max(extent, 1))) + 1)]
        cands = [(math.ceil(extent / math.prod(inner)),) + inner for inner in itertools.product(pows, repeat=parts - 1)
                 if math.prod(inner) <= extent]
    else:
        raise ValueError(f"unknown split policy {policy!r}")
    if max_inner is not None:
        cands = [c for c in cands if math.prod(c[1:]) <= max_inner]
    if inner_candidates is not None:
        allowed = set(inner_candidates)
        cands = [c for c in cands if c[-1] in allowed] or cands
    return Knob(name, "split", tuple(cands))


def reorder_knob(name: str, orders: Sequence[Sequence[int]]) -> Knob:
    """Candidate loop orders, each a permutation given as indices."""
    return Knob(name, "reorder", tuple(tuple(o) for o in orders))


def annotate_knob(name: str, choices: Sequence[str]) -> Knob:
    """Annotation choices for a loop, e.g. ("none", "unroll", "vectorize")."""
    return Knob(name, "annotate", tuple(choices))


def choice_knob(name: str, values: Sequence[Any]) -> Knob:
    """A free list of values, e.g. auto_unroll_max_step in (0, 16, 64, 512)."""
    return Knob(name, "choice", tuple(values))


@dataclass(frozen=True)
class Config:
    """One point of a space: its index and the value of every knob."""

    index: int
    knobs: dict[str, Any] = field(hash=False, compare=False)

    def __getitem__(self, name: str) -> Any:
        return self.knobs[name]

    def to_dict(self) -> dict[str, Any]:
        knobs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.knobs.items()}
        return {"index": self.index, "knobs": knobs}


@dataclass(frozen=True)
class ConfigSpace:
    """The knobs of a template. `register`: the split knobs whose innermost factors make the register tile (the
    loops a template unrolls and vectorises); empty: every split knob's. `max_register_tile`: the largest product
    of those factors (accumulator elements) a config may have; configs above it stay indexable (a log's record
    keeps its meaning) but are never sampled or proposed (on the CPU: their accumulators would not fit in the
    vector registers and spill on every iteration). `equivalents`: knob name -> a value of another space of the
    template family -> the values of this one that do the same (`nearest`; dense's weight packed ahead, "pre", is
    packed in the kernel, "root" or "tile", in matmul's space)."""

    knobs: tuple[Knob, ...]
    register: tuple[str, ...] = ()
    max_register_tile: int | None = None
    equivalents: Mapping[str, Mapping[Any, tuple[Any, ...]]] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self):
        splits = {k.name for k in self.knobs if k.kind == "split"}
        if unknown := [n for n in self.register if n not in splits]:
            raise ValueError(f"register tile knobs {unknown} are not split knobs of this space")

    @property
    def dims(self) -> list[int]:
        return [len(k) for k in self.knobs]

    def __len__(self) -> int:
        return math.prod(self.dims)

    def __getitem__(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)

    def digits(self, index: int) -> list[int]:
        """Mixed-radix digits of `index`, first knob most significant."""
        if not 0 <= index < len(self):
            raise IndexError(f"config index {index} outside space of size {len(self)}")
        out = []
        for dim in reversed(self.dims):
            index, d = divmod(index, dim)
            out.append(d)
        return out[::-1]

    def index_of(self, digits: Sequence[int]) -> int:
        index = 0
        for d, dim in zip(digits, self.dims):
            index = index * dim + int(d)
        return index

    def index_of_values(self, values: Mapping[str, Any]) -> int:
        """Index of the config with these knob values (split factors as tuples); ValueError if one is no candidate."""
        return self.index_of([k.candidates.index(values[k.name]) for k in self.knobs])

    def nearest(self, values: Mapping[str, Any]) -> list[int]:
        """This space's configs closest to knob `values` of another space with the same knob names (another shape
        or operator of the template family): a value this space has is kept; a split it lacks becomes its closest
        split (least log2 distance of the factors, innermost first: the register tile is kept); a choice it lacks
        may be any of its `equivalents` for it, else any of its candidates, so every combination of those is
        returned (at most MAX_NEAREST), the first taking each one's first; a split knob missing from `values` takes
        its first candidate."""
        options: list[list[int]] = []
        for knob in self.knobs:
            value = values.get(knob.name)
            if value in knob.candidates:
                options.append([knob.candidates.index(value)])
            elif knob.kind == "split" and isinstance(value, tuple):
                def distance(cand: tuple, value: tuple = value) -> tuple[float, ...]:
                    return tuple(abs(math.log2(a) - math.log2(b)) for a, b in zip(cand[:0:-1], value[:0:-1]))

                options.append([min(range(len(knob)), key=lambda i, k=knob: distance(k.candidates[i]))])
            elif knob.kind == "split":
                options.append([0])
            else:
                same = [knob.candidates.index(v) for v in self.equivalents.get(knob.name, {}).get(value, ())
                        if v in knob.candidates]
                options.append(same or list(range(len(knob))))
        return [self.index_of(digits) for digits in itertools.islice(itertools.product(*options), MAX_NEAREST)]

    @property
    def register_knobs(self) -> tuple[str, ...]:
        """Names of the split knobs whose innermost factors make the register tile (`register`, else every split)."""
        return self.register or tuple(k.name for k in self.knobs if k.kind == "split")

    def allows(self, index: int) -> bool:
        """Whether a search may propose `index` (its register tile is within `max_register_tile`)."""
        return self.max_register_tile is None or math.prod(self.register_tile(index)) <= self.max_register_tile

    def allowed_count(self) -> int:
        """How many configs `allows` (counted over the register knobs' candidates, not config by config)."""
        if self.max_register_tile is None:
            return len(self)
        names = self.register_knobs
        tiles = [[c[-1] for c in self[name].candidates] for name in names]
        within = sum(1 for tile in itertools.product(*tiles) if math.prod(tile) <= self.max_register_tile)
        return within * math.prod(len(k) for k in self.knobs if k.name not in names)

    def get(self, index: int) -> Config:
        index = int(index)
        return Config(index, {k.name: k.candidates[d] for k, d in zip(self.knobs, self.digits(index))})

    def sample(self, rng: np.random.Generator, n: int, exclude: set[int] = frozenset()) -> list[int]:
        """Up to n distinct random indices that `allows`, not in `exclude`."""
        size = len(self)
        n = min(n, size - len(exclude))
        out: set[int] = set()
        tries = 0
        while len(out) < n and tries < 50 * n + 100:
            tries += 1
            i = int(rng.integers(size)) if size < 2**63 else int(rng.random() * size)
            if i not in exclude and self.allows(i):
                out.add(i)
        if len(out) < n and size <= SMALL_SPACE:  # few allowed configs left: find them all
            rest = [i for i in range(size) if i not in exclude and i not in out and self.allows(i)]
            out.update(rest[k] for k in rng.permutation(len(rest))[: n - len(out)])
        return sorted(out)

    def coverage(self, index: int) -> list[int]:
        """What a batch can cover of a config: its knob digits, then the innermost factor of each split.

        Two tilings that differ only in their outer factors share the innermost one (on the CPU, the register
        tile): counting it apart lets a diverse batch try other register tiles, not only other outer tilings.
        """
        return self.digits(index) + list(self._innermost(index))

    def register_tile(self, index: int) -> tuple[int, ...]:
        """The innermost factors of the `register` split knobs: on the CPU, the register tile; configs that share
        it differ in their outer and cache tiling, loop order or annotations (a basin of the search)."""
        return self._innermost(index, self.register)

    def _innermost(self, index: int, names: tuple[str, ...] = ()) -> tuple[int, ...]:
        """The innermost factor of each split knob named in `names` (empty: of every split knob)."""
        return tuple(k.candidates[d][-1] for k, d in zip(self.knobs, self.digits(index))
                     if k.kind == "split" and (not names or k.name in names))

    def inner_moves(self, index: int) -> list[int]:
        """The configs that differ from `index` in one split knob's innermost factor only: for each other
        innermost factor that knob offers, the candidate whose outer factors are closest to this one's (the
        outermost kept where the knob allows it). On the CPU: the same schedule with a register tile one axis
        wider or narrower, the moves that take a search from one register tile to the next."""
        digits = self.digits(index)
        moves = []
        for k, (knob, d) in enumerate(zip(self.knobs, digits)):
            if knob.kind != "split":
                continue
            here = knob.candidates[d]
            closest: dict[int, tuple] = {}
            for j, cand in enumerate(knob.candidates):
                if cand[-1] == here[-1]:
                    continue
                key = (cand[0] != here[0], sum(abs(math.log2(a / b)) for a, b in zip(cand[:-1], here[:-1])), j)
                if cand[-1] not in closest or key < closest[cand[-1]]:
                    closest[cand[-1]] = key
            moves += [self.index_of(digits[:k] + [key[-1]] + digits[k + 1:]) for key in sorted(closest.values())]
        return [i for i in moves if self.allows(i)]

    def neighbour(self, index: int, rng: np.random.Generator) -> int:
        """Change one knob to another random value (a step of simulated annealing); `index` itself when no
        neighbour tried is allowed."""
        movable = [i for i, dim in enumerate(self.dims) if dim > 1]
        for _ in range(NEIGHBOUR_TRIES if movable else 0):
            digits = self.digits(index)
            i = movable[int(rng.integers(len(movable)))]
            digits[i] = (digits[i] + 1 + int(rng.integers(self.dims[i] - 1))) % self.dims[i]
            if self.allows(step := self.index_of(digits)):
                return step
        return index

    def knob_features(self, index: int) -> list[float]:
        """Fixed-length numeric description of a config (the cheap `knob` features)."""
        cfg = self.get(index)
        return [x for k in self.knobs for x in k.numeric(cfg[k.name])]

    def describe(self) -> str:
        allowed = self.allowed_count()
        limit = f" ({allowed} within the register tile limit {self.max_register_tile})" if allowed < len(self) else ""
        return " x ".join(f"{k.name}:{len(k)}" for k in self.knobs) + f" = {len(self)}" + limit
