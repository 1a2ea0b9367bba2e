"""A dynamic operator: one shape parameter varies over a range, the others are fixed.

`M=1..4096,N=768,K=768` for matmul: M varies. The varying parameter is the one the output's
leading axis follows (the operator's `OpDef.row_split`: matmul M, dense batch, batch_matmul B), so a
run-time size is covered by contiguous row slices of the inputs and the output (zero-copy views).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import AutotuneError
from ..operators import OPS, RowSplit, get_op
from ..target import parse_target
from ..task import Task, make_task

_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*$")


@dataclass(frozen=True)
class DynamicSpec:
    """An operator with one parameter ranging over lo..hi (inclusive) and the others fixed."""

    op: str
    dim: str
    lo: int
    hi: int
    fixed: tuple[tuple[str, int], ...]
    dtype: str
    target_json: str

    @property
    def target(self) -> dict[str, Any]:
        return json.loads(self.target_json)

    @property
    def split(self) -> RowSplit:
        return get_op(self.op).row_split

    def task(self, value: int) -> Task:
        """The static task with the dynamic parameter set to `value`."""
        return make_task(self.op, {**dict(self.fixed), self.dim: int(value)}, self.dtype, self.target)

    def matches(self, task: Task) -> bool:
        """Is `task` this operator at some value of the dynamic parameter (a possible uKernel)?"""
        shape = task.shape
        return (task.op == self.op and task.dtype == self.dtype and task.target == self.target
                and all(shape[k] == v for k, v in self.fixed))

    def __str__(self) -> str:
        fixed = ",".join(f"{k}={v}" for k, v in self.fixed)
        return f"{self.op}({self.dim}={self.lo}..{self.hi},{fixed})"


def within_limits(op: str, fixed: dict[str, int], dim: str, hi: int) -> int:
    """`hi`, or the largest size of `dim` below it at which the operator's tensors stay within TVM's 32-bit
    indexing (a model's range multiplied out: a batch times an image's pixels)."""
    opdef = get_op(op)

    def fits(value: int) -> bool:
        try:
            opdef.complete({**fixed, dim: value})
        except AutotuneError:
            return False
        return True

    if fits(hi):
        return hi
    lo, top = 1, hi  # fits(lo) or nothing does (then parse_dynamic says why)
    while top - lo > 1:
        mid = (lo + top) // 2
        lo, top = (mid, top) if fits(mid) else (lo, mid)
    return lo


def parse_dynamic(op: str, text: str, dtype: str = "float32", target: str | dict[str, Any] = "llvm",
                  arch: str | None = None) -> DynamicSpec:
    """`M=1..4096,N=768,K=768` -> DynamicSpec; raises AutotuneError with a one-line reason."""
    opdef = get_op(op)
    split = opdef.row_split
    if split is None:
        dynamic = [name for name, o in OPS.items() if o.row_split is not None]
        raise AutotuneError(f"--dynamic supports {', '.join(dynamic)}; not {op}")
    fixed: dict[str, int] = {}
    ranges: dict[str, tuple[int, int]] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = (s.strip() for s in part.partition("="))
        if not eq:
            raise AutotuneError(f"bad shape item {part!r}: expected name=value or name=lo..hi, e.g. M=1..4096")
        if name in fixed or name in ranges:
            raise AutotuneError(f"shape parameter {name} is given twice ({part} and another): give it once")
        if ".." in value:
            m = _RANGE.match(value)
            if not m:
                raise AutotuneError(f"bad range {part!r}: expected {name}=lo..hi with integers, e.g. {name}=1..4096")
            ranges[name] = (int(m.group(1)), int(m.group(2)))
            continue
        try:
            fixed[name] = int(value)
        except ValueError:
            raise AutotuneError(f"bad shape value {part!r}: {value!r} is not an integer or a range lo..hi") from None
    if set(ranges) != {split.param}:
        got = ", ".join(ranges) or "none"
        raise AutotuneError(f"{op} --dynamic needs exactly one range, on {split.param} (e.g. {split.param}=1..4096); "
                            f"got ranges on: {got}")
    lo, hi = ranges[split.param]
    if not 1 <= lo <= hi:
        raise AutotuneError(f"bad range {split.param}={lo}..{hi}: need 1 <= lo <= hi")
    params = opdef.complete({**fixed, split.param: lo})  # unknown / missing / impossible parameters
    opdef.complete({**fixed, split.param: hi})  # the tallest size within the limits too
    tgt = parse_target(target, arch=arch)
    ordered = tuple((p, params[p]) for p in opdef.params if p != split.param)
    spec = DynamicSpec(op, split.param, lo, hi, ordered, dtype, json.dumps(tgt, sort_keys=True))
    spec.task(lo)  # dtype
    return spec
