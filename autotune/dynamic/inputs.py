"""The inputs a dynamic model takes (the guard): each input's shape, of static sizes and symbolic ones with the
ranges they were exported with, and its dtype; arguments outside them are a one-line error before anything runs
(as torch.export's own program refuses them: a size beyond its range may index past a table sized for it, a
position embedding)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import AutotuneError


@dataclass(frozen=True)
class SymbolicSize:
    """A dimension exported as a `torch.export.Dim`: its symbol and range (hi None: unbounded)."""

    symbol: str
    lo: int
    hi: int | None

    def __str__(self) -> str:
        return f"{self.symbol} in {self.lo}..{'' if self.hi is None else self.hi}"

    def holds(self, n: int) -> bool:
        return self.lo <= n and (self.hi is None or n <= self.hi)


@dataclass(frozen=True)
class SymbolicInput:
    """One user input of a dynamic model: `x [1, s0 in 1..1024, 768] float32`."""

    name: str
    dims: tuple[int | SymbolicSize, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.name} [{', '.join(map(str, self.dims))}] {self.dtype}"


def symbolic_inputs(program: Any) -> tuple[SymbolicInput, ...]:
    """Each user input of an ExportedProgram with its sizes' ranges (`program.range_constraints`)."""
    ranges = {str(sym): (int(r.lower), None if math.isinf(float(r.upper)) else int(r.upper))
              for sym, r in program.range_constraints.items()}
    user = set(program.graph_signature.user_inputs)
    out = []
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in user:
            val = node.meta["val"]
            dims = tuple(int(d) if isinstance(d, int) or str(d) not in ranges else SymbolicSize(str(d), *ranges[str(d)])
                         for d in val.shape)
            out.append(SymbolicInput(node.name, dims, str(val.dtype).removeprefix("torch.")))
    return tuple(out)


def check_inputs(inputs: Sequence[SymbolicInput], arrays: Sequence[np.ndarray], name: str) -> None:
    """AutotuneError (one line) unless the arrays fit the inputs: their number, ranks, static sizes, dtypes, each
    symbolic size within its range and the same wherever it appears."""
    if not inputs:
        return
    got = ", ".join(f"[{', '.join(map(str, a.shape))}] {a.dtype}" for a in arrays)
    wanted = f"{name} was exported for inputs {', '.join(map(str, inputs))}; got {got or 'none'}"
    if len(arrays) != len(inputs):
        raise AutotuneError(wanted)
    seen: dict[str, int] = {}
    for spec, a in zip(inputs, arrays):
        if str(a.dtype) != spec.dtype or a.ndim != len(spec.dims):
            raise AutotuneError(wanted)
        for dim, n in zip(spec.dims, a.shape):
            if isinstance(dim, int):
                if n != dim:
                    raise AutotuneError(wanted)
            elif not dim.holds(n):
                raise AutotuneError(f"{wanted} ({dim.symbol} = {n} is outside {dim.lo}.."
                                    f"{'' if dim.hi is None else dim.hi})")
            elif seen.setdefault(dim.symbol, n) != n:
                raise AutotuneError(f"{wanted} ({dim.symbol} is {seen[dim.symbol]} and {n})")
