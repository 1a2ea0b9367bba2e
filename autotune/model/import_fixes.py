"""Converters handed to TVM's importer (`from_exported_program(custom_convert_map=...)`) where its own lose what
the exported program knows.

- **slice** (`x[..., a:b]`): TVM's converter clamps the bounds into the dimension (`min(b, n) - min(a, n)`), and
  Relax cannot simplify the clamp of a symbolic size (it does not take the program's bounds on the size): a
  tensor computed from two such slices gets no shape, and TVM cannot legalize the ops on it (transformers' causal
  masks: `torch.diff` of the positions). Where torch's shapes prove the slice within the dimension, it is emitted
  as in bounds (its size `b - a`, as PyTorch's); a negative dimension is counted from the start (TVM's
  legalization of a symbolic slice takes no negative axis).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def converters() -> dict[str, Callable[[Any, Any], Any]]:
    """The importer's converters to replace, by ATen op name."""
    return {"slice.Tensor": _slice}


def _slice(node: Any, importer: Any) -> Any:
    from tvm import relax

    args = {"dim": 0, "start": None, "end": None, "step": 1}
    args.update(zip(args, node.args[1:]))
    args.update(node.kwargs)
    data, dim, step = node.args[0], args["dim"], args["step"]
    start = 0 if args["start"] is None else args["start"]
    end = sys.maxsize if args["end"] is None else args["end"]
    x = importer.env[data]
    dim = dim + len(importer.shape_of(x)) if dim < 0 else dim
    size = getattr(data.meta.get("val"), "shape", [None] * (dim + 1))[dim]  # as torch traced it
    lo, hi, stride = (_meta(v) for v in (start, end, step))
    if start == 0 and step == 1 and (isinstance(end, int) and end >= sys.maxsize or _proven(lambda: hi == size)):
        return x  # the whole dimension
    inbound = stride == 1 and _proven(lambda: lo >= 0) and _proven(lambda: lo <= hi) and _proven(lambda: hi <= size)
    bounds = [[importer.env[v] if hasattr(v, "op") else v] for v in (start, end, step)]  # a node: a symbolic size
    return importer.block_builder.emit(relax.op.strided_slice(x, [dim], *bounds, assume_inbound=inbound))


def _meta(value: Any) -> Any:
    """A bound's value as torch traced it: an int, or a SymInt for a node of the graph."""
    return value.meta.get("val") if hasattr(value, "op") else value


def _proven(relation: Any) -> bool:
    """Whether torch's shapes prove `relation()` (of ints and SymInts); False where a value is unknown."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    try:
        return bool(statically_known_true(relation()))
    except (TypeError, ValueError):  # a value torch did not trace (None), or one it cannot compare
        return False
