"""Task: an operator with concrete shape parameters, dtype and target; a stable key."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from .errors import AutotuneError
from .operators import ElementType, OpDef, Params, element_type, get_op
from .target import parse_target

@dataclass(frozen=True)
class Task:
    op: str
    params: tuple[tuple[str, int], ...]  # in the operator's parameter order
    dtype: str
    target_json: str  # canonical JSON of the target dict (hashable, stable)

    @property
    def shape(self) -> Params:
        return dict(self.params)

    @property
    def target(self) -> dict[str, Any]:
        return json.loads(self.target_json)

    @property
    def target_kind(self) -> str:
        return self.target["kind"]

    @property
    def opdef(self) -> OpDef:
        return get_op(self.op)

    @property
    def element(self) -> ElementType:
        """What the dtype means: storage, accumulation and output types, test inputs, tolerance."""
        return element_type(self.dtype)

    @property
    def flops(self) -> float:
        return float(self.opdef.flops(self.shape))

    @property
    def key(self) -> str:
        """Same task -> same key, in every process and on every machine with the same target."""
        digest = hashlib.sha1(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.op}-{digest}"

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "params": self.shape, "dtype": self.dtype, "target": self.target}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        return make_task(d["op"], d["params"], d.get("dtype", "float32"), d["target"])

    def __str__(self) -> str:
        shape = ",".join(f"{k}={v}" for k, v in self.params)
        return f"{self.op}({shape}) {self.dtype} {self.target_kind}"


def parse_shape(text: str) -> dict[str, int]:
    """`M=1024,N=512` -> {"M": 1024, "N": 512}; a parameter given twice is an AutotuneError."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq:
            raise AutotuneError(f"bad shape item {part!r}: expected name=value, e.g. M=1024")
        if name in out:
            raise AutotuneError(f"shape parameter {name} is given twice ({name}={out[name]} and {part}): give it once")
        try:
            out[name] = int(value)
        except ValueError:
            raise AutotuneError(f"bad shape value {part!r}: {value!r} is not an integer") from None
    return out


def make_task(op: str, shape: dict[str, int] | str, dtype: str = "float32",
              target: str | dict[str, Any] = "llvm", arch: str | None = None) -> Task:
    """Validate everything and build a Task; raises AutotuneError with a one-line reason."""
    opdef = get_op(op)
    params = opdef.complete(parse_shape(shape) if isinstance(shape, str) else dict(shape))
    element_type(dtype)  # a known dtype, else a one-line error
    tgt = parse_target(target, arch=arch)
    if dtype != "float32":
        _check_dtype_template(opdef, dtype, tgt["kind"])
    return Task(op, tuple((p, params[p]) for p in opdef.params), dtype, json.dumps(tgt, sort_keys=True))


def _check_dtype_template(opdef: OpDef, dtype: str, kind: str) -> None:
    """AutotuneError unless the operator's default template on `kind` schedules `dtype` (`Template.dtypes`)."""
    from .operators import OPS
    from .templates import resolve

    def takes(op: OpDef) -> bool:
        return kind in op.templates and dtype in resolve(op.templates[kind]).dtypes

    if not takes(opdef):
        have = ", ".join(op.name for op in OPS.values() if takes(op)) or "none"
        raise AutotuneError(f"no {dtype} template for {opdef.name} on {kind} yet ({dtype} on {kind}: {have})")


WINDOW = frozenset({"R", "S", "stride", "padding", "dilation", "groups"})  # a convolution's window, not its size
WINDOW_WEIGHT = 4.0  # a stride of 2 for 1 is as far as a 5x larger size: the window changes the loop nest's kind


def shape_distance(a: Task, b: Task) -> float:
    """How far two tasks of one operator are apart (the nearest one's configs are the likeliest to transfer): the
    sum over their parameters of |log2 (x + 1) / (y + 1)|, `WINDOW_WEIGHT` times that for a parameter of the window
    (`WINDOW`)."""
    pa, pb = dict(a.params), dict(b.params)
    return sum(abs(math.log2((pa.get(k, 0) + 1) / (pb.get(k, 0) + 1))) * (WINDOW_WEIGHT if k in WINDOW else 1.0)
               for k in set(pa) | set(pb))
