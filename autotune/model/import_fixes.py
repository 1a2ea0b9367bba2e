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
    if start == 0 and step == 1 and (isinstance(end, int) and end >= sys.maxsize or _same_size(data, dim, end)):
        return importer.env[data]  # the whole dimension
    x = importer.env[data]
    dim = dim + len(importer.shape_of(x)) if dim < 0 else dim
    bounds = [[importer.env[v] if hasattr(v, "op") else v] for v in (start, end, step)]  # a node: a symbolic size
    return importer.block_builder.emit(relax.op.strided_slice(
        x, [dim], *bounds, assume_inbound=_within(data, dim, start, end, step)))


def _meta(value: Any) -> Any:
    """A bound's value as torch traced it: an int, or a SymInt for a node of the graph."""
    return value.meta.get("val") if hasattr(value, "op") else value


def _within(data: Any, dim: int, start: Any, end: Any, step: Any) -> bool:
    """Whether torch's shapes prove 0 <= start <= end <= the dimension's size, with step 1."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    start, end, step = _meta(start), _meta(end), _meta(step)
    size = getattr(data.meta.get("val"), "shape", None)
    if size is None or any(v is None for v in (start, end, step)) or not isinstance(step, int) or step != 1:
        return False
    size = size[dim]
    try:
        return bool(statically_known_true(start >= 0) and statically_known_true(start <= end)
                    and statically_known_true(end <= size))
    except (TypeError, ValueError):  # a bound torch could not compare
        return False


def _same_size(data: Any, dim: int, end: Any) -> bool:
    """Whether torch's shapes prove `end` the dimension's size."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    size, end = getattr(data.meta.get("val"), "shape", None), _meta(end)
    try:
        return size is not None and end is not None and bool(statically_known_true(end == size[dim]))
    except (TypeError, ValueError):
        return False
