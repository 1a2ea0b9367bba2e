"""The dynamic kernel: compiled uKernels plus a planner; one call covers any size with row views.

Each piece of a plan runs its uKernel on contiguous row slices of the sliced inputs and of the
output (numpy views, no copy; TVM's FFI takes them through DLPack). TVM kernels assume 64-byte
aligned buffers (a misaligned one segfaults), so a piece whose views are not aligned, and the
padded tail piece, go through a per-uKernel scratch buffer instead: copy the valid rows in, run,
copy them out. Not thread-safe (the scratch buffers are shared).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import AutotuneError
from ..operators import element_type
from ..records import Record
from ..task import Task
from ..templates import Relayout, relayout_array
from ..measure.timing import time_calls
from .compose import Plan, Planner
from .spec import DynamicSpec
from .ukernels import CALL_OVERHEAD_S, op_cost, pad_cost_fn

ALIGN = 64  # bytes: TVM's default buffer alignment, which its generated loads rely on


def aligned_empty(shape: Sequence[int], dtype: Any = "float32", zero: bool = False) -> np.ndarray:
    """A C-contiguous array whose data starts on a 64-byte boundary."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape)) if len(shape) else 1
    raw = (np.zeros if zero else np.empty)(n * dt.itemsize + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + n * dt.itemsize].view(dt).reshape(tuple(shape))


def as_aligned(a: Any, dtype: Any = "float32") -> np.ndarray:
    """`a` itself when it is an aligned C-contiguous array of `dtype`, else an aligned copy."""
    arr = np.asarray(a.detach().cpu().numpy() if hasattr(a, "detach") else a)
    if arr.dtype == dtype and arr.flags.c_contiguous and _ptr(arr) % ALIGN == 0:
        return arr
    out = aligned_empty(arr.shape, dtype)
    out[...] = arr
    return out


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@dataclass
class UKernel:
    """One compiled uKernel: the static task at `height` rows, its entry function and measured time."""

    height: int
    task: Task
    func: Any  # the compiled module's "main"
    mean_s: float  # measured when it was tuned (the planner's cost)
    record: Record | None = None
    scratch: list[np.ndarray] = field(default_factory=list)
    relayouts: tuple[Relayout, ...] = ()  # fixed operands its kernel takes relaid (dense's weight, packed)


class DynamicKernel:
    """Call it on numpy arrays (or torch tensors) of any size of the dynamic dimension."""

    def __init__(self, spec: DynamicSpec, ukernels: Sequence[UKernel]):
        if not ukernels:
            raise AutotuneError(f"no uKernel for {spec}")
        self.spec = spec
        self.ukernels = sorted(ukernels, key=lambda u: -u.height)
        self._sliced = (*spec.split.sliced, True)  # inputs..., output
        kind = element_type(spec.dtype)
        self._types = (*(kind.numpy_storage for _ in spec.split.sliced), kind.numpy_output)  # inputs..., output
        cost = op_cost(spec)
        self.planner = Planner([u.height for u in self.ukernels],
                               [u.mean_s + CALL_OVERHEAD_S for u in self.ukernels], pad_cost_fn(cost.row_bytes))

    def plan(self, size: int) -> Plan:
        """The composition used for `size` (cached)."""
        return self.planner.plan(size)

    def output_shape(self, size: int) -> tuple[int, ...]:
        params = {**dict(self.spec.fixed), self.spec.dim: size}
        return tuple(int(d) for d in self.spec.task(1).opdef.output_shape(params))

    def __call__(self, *inputs: Any) -> np.ndarray:
        """Inputs of any size along the dynamic dimension (axis 0) -> a new output array."""
        arrays = [as_aligned(a, t) for a, t in zip(inputs, self._types)]
        if len(arrays) != len(self.spec.split.sliced) or arrays[0].ndim < 1:
            raise AutotuneError(f"{self.spec.op} takes {len(self.spec.split.sliced)} inputs, got {len(arrays)}")
        size = arrays[0].shape[0]
        opdef = self.spec.task(1).opdef
        want = opdef.input_shapes({**dict(self.spec.fixed), self.spec.dim: size})
        if [tuple(a.shape) for a in arrays] != [tuple(s) for s in want]:
            raise AutotuneError(f"{self.spec} expects inputs of shapes {want} for {self.spec.dim}={size}, got "
                                f"{[tuple(a.shape) for a in arrays]}")
        out = aligned_empty(self.output_shape(size), self._types[-1])
        self.run(*arrays, out)
        return out

    def run(self, *arrays: np.ndarray) -> None:
        """Compute into the last array (inputs..., output: C-contiguous numpy arrays of the right dtype)."""
        size = arrays[0].shape[0]
        if size < 1:
            return
        if arrays[-1].shape[0] != size:
            raise AutotuneError(f"output has {arrays[-1].shape[0]} rows, inputs {size}")
        plan = self.planner.plan(size)
        sliced = self._sliced
        fixed_ok = all(s or _ptr(a) % ALIGN == 0 for a, s in zip(arrays, sliced))
        if not fixed_ok:  # an unaligned fixed operand (e.g. a weight): one aligned copy for this call
            arrays = tuple(a if s else as_aligned(a, t) for a, s, t in zip(arrays, sliced, self._types))
        bases = [(_ptr(a), a.strides[0]) if s else None for a, s in zip(arrays, sliced)]
        relaid: dict[int, Sequence[np.ndarray]] = {}  # uKernel -> the arrays with its fixed operands relaid
        for piece in plan.pieces:
            uk = self.ukernels[piece.kernel]
            if piece.kernel not in relaid:
                relaid[piece.kernel] = self._relaid(uk, arrays)
            args = relaid[piece.kernel]
            lo, hi = piece.offset, piece.offset + piece.rows
            if not piece.padded and all(b is None or (b[0] + lo * b[1]) % ALIGN == 0 for b in bases):
                uk.func(*[a[lo:hi] if s else a for a, s in zip(args, sliced)])
            else:
                self._run_scratch(uk, args, lo, hi)

    def _relaid(self, uk: UKernel, arrays: Sequence[np.ndarray]) -> Sequence[np.ndarray]:
        """`arrays` with the fixed operands `uk` takes in another layout relaid (once per call and uKernel)."""
        if not uk.relayouts:
            return arrays
        out = list(arrays)
        for r in uk.relayouts:
            out[r.arg] = as_aligned(relayout_array(arrays[r.arg], r.index_map, r.shape), self._types[r.arg])
        return out

    def _run_scratch(self, uk: UKernel, arrays: Sequence[np.ndarray], lo: int, hi: int) -> None:
        if not uk.scratch:
            uk.scratch = [aligned_empty((uk.height, *a.shape[1:]), t, zero=True) if s else None
                          for a, s, t in zip(arrays, self._sliced, self._types)]
        rows = hi - lo
        args = []
        for a, s, buf in zip(arrays[:-1], self._sliced, uk.scratch):
            if s:
                buf[:rows] = a[lo:hi]
                args.append(buf)
            else:
                args.append(a)
        uk.func(*args, uk.scratch[-1])
        arrays[-1][lo:hi] = uk.scratch[-1][:rows]

    def time(self, *inputs: Any, repeat: int = 7, min_s: float = 0.1) -> list[float]:
        """Seconds per call of `run` on prepared arrays (Python dispatch included), one per repeat."""
        arrays = [as_aligned(a, t) for a, t in zip(inputs, self._types)]
        out = aligned_empty(self.output_shape(arrays[0].shape[0]), self._types[-1])
        return time_calls(lambda: self.run(*arrays, out), repeat, min_s)

    def describe(self, sizes: Sequence[int] = ()) -> str:
        """The uKernels, then the plan and predicted time of each size in `sizes`."""
        lines = [f"dynamic {self.spec}: {len(self.ukernels)} uKernels"]
        for u in self.ukernels:
            gf = u.task.flops / u.mean_s / 1e9
            lines.append(f"  uKernel {self.spec.dim}={u.height:<5d} {u.task.key}  {u.mean_s * 1e3:.4f} ms  "
                         f"{gf:.1f} GFLOPS  config #{u.record.input.config.index if u.record else '?'}")
        for m in sizes:
            p = self.plan(m)
            flops = self.spec.task(m).flops
            lines.append(f"  {self.spec.dim}={m:<6d} {p.describe():<28s} predicted {p.predicted_s * 1e3:.4f} ms "
                         f"({flops / p.predicted_s / 1e9:.1f} GFLOPS)")
        return "\n".join(lines)
