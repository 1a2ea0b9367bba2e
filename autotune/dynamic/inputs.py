"""The inputs a dynamic model takes (the guard): each input's shape, of static sizes and symbolic ones with the
ranges they were exported with, and its dtype. Arguments outside them are a one-line error before anything runs
(as torch.export's own program refuses them: a size beyond its range may index past a table sized for it, a
position embedding): `check_inputs` in the process that built the model, `assert_ranges` (the sizes' ranges,
compiled into the module) wherever its library is loaded.
"""

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


def assert_ranges(mod: Any) -> Any:
    """`mod` with its `main` asserting, before anything runs, that each symbolic size of its inputs lies within
    the range it was exported with (the importer's `tir_var_lower_bound` / `tir_var_upper_bound`): compiled into
    the module, so that a library loaded in another process refuses such a size too (TVM's VM raises the assert's
    message: `x dimension 1 = 1500 is outside its exported range 1..1024`)."""
    from tvm import relax, tirx

    main = mod["main"]
    attrs = main.attrs or {}
    lower, upper = attrs.get("tir_var_lower_bound", {}), attrs.get("tir_var_upper_bound", {})
    bindings, seen = [], set()
    for param in main.params:
        for axis, size in enumerate(getattr(param.ty, "shape", None) or []):
            name = getattr(size, "name", None)
            if not isinstance(size, tirx.Var) or name in seen or (name not in lower and name not in upper):
                continue
            seen.add(name)
            lo, hi = (int(lower[name]) if name in lower else None), (int(upper[name]) if name in upper else None)
            holds = tirx.all(*[c for c in (lo is not None and size >= lo, hi is not None and size <= hi)
                               if c is not False])
            text = f"{param.name} dimension {axis} = {{}} is outside its exported range " \
                   f"{'' if lo is None else lo}..{'' if hi is None else hi}"
            check = relax.op.assert_op(relax.prim_value(holds), [relax.prim_value(size)], format=text)
            bindings.append(relax.VarBinding(relax.Var(f"in_range_{name}", relax.ObjectType()), check))
    if not bindings:
        return mod
    body = relax.SeqExpr([relax.BindingBlock(bindings), *main.body.blocks], main.body.body)
    mod = mod.clone()
    mod["main"] = relax.Function(main.params, body, main.ret_ty, is_pure=False, attrs=main.attrs, span=main.span)
    return mod
