"""The dynamic kernel: its uKernels and their cover of every size, compiled into one function.

The planner (`compose.Planner`) chooses the cover of each size; its plans, as a table, and the uKernels' scheduled
bodies make one TIR function (`compiled.dispatch_func`) that runs every piece on views of the rows, the padded
tail through scratch buffers. A call from Python passes the arrays through DLPack (no copy) to that function;
arrays not on a 64-byte boundary (TVM kernels assume it) are copied to aligned ones first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import AutotuneError
from ..operators import element_type
from ..records import Record
from ..space import Config
from ..target import compile_kernel, use_target_threads
from ..task import Task
from ..measure.timing import time_calls
from ..templates import relayout_array
from .compiled import build_context, dispatch_func, plan_table
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
    """`a` itself when it is an aligned C-contiguous array of `dtype` (None: its own), else an aligned copy."""
    arr = np.asarray(a.detach().cpu().numpy() if hasattr(a, "detach") else a)
    dtype = arr.dtype if dtype is None else np.dtype(dtype)
    if arr.dtype == dtype and arr.flags.c_contiguous and _ptr(arr) % ALIGN == 0:
        return arr
    out = aligned_empty(arr.shape, dtype)
    out[...] = arr
    return out


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _on_device(arrays: Sequence[np.ndarray], spec: DynamicSpec) -> list[Any]:
    """Copies of the arrays on the first CUDA device (a one-line error where there is none)."""
    import tvm

    from ..model.library import runtime_device

    dev = runtime_device("cuda", spec.target, f"the dynamic kernel {spec}")
    return [tvm.runtime.tensor(a, dev) for a in arrays]


@dataclass
class UKernel:
    """One uKernel: the static task at `height` rows, its scheduled PrimFunc and measured time."""

    height: int
    task: Task
    func: Any  # the scheduled PrimFunc (the template's kernel for the record's config)
    mean_s: float  # measured when it was tuned (the planner's cost)
    record: Record | None = None
    template: Any = None  # the Template of `config`: the fixed operands it takes relaid
    config: Config | None = None

    @property
    def relayouts(self) -> tuple:
        return self.template.relayouts(self.task, self.config) if self.template is not None else ()

    def fixed_operand(self, arg: int, array: np.ndarray) -> np.ndarray:
        """Input `arg` (not sliced: a weight) as this uKernel takes it (relaid where its template says so)."""
        relayout = next((r for r in self.relayouts if r.arg == arg), None)
        return array if relayout is None else relayout_array(array, relayout.index_map, relayout.shape)


class DynamicKernel:
    """Call it on numpy arrays (or torch tensors) of any size of the dynamic dimension."""

    def __init__(self, spec: DynamicSpec, ukernels: Sequence[UKernel]):
        if not ukernels:
            raise AutotuneError(f"no uKernel for {spec}")
        self.spec = spec
        self.sliced = spec.split.sliced  # per input, whether it is cut by rows
        self.ukernels = sorted(ukernels, key=lambda u: -u.height)
        kind = element_type(spec.dtype)
        self._types = (*(kind.numpy_storage for _ in self.sliced), kind.numpy_output)  # inputs..., output
        cost = op_cost(spec)
        self.planner = Planner([u.height for u in self.ukernels],
                               [u.mean_s + CALL_OVERHEAD_S for u in self.ukernels], pad_cost_fn(cost.row_bytes))
        self.table = as_aligned(plan_table(self.planner, spec.hi), "int32")
        self.gpu = spec.target["kind"] == "cuda"  # the plan in the host code, the pieces kernel launches
        # the uKernels that take a weight as it is (not relaid for their tiles) share it: one copy, not one each
        as_given = [[i for i, s in enumerate(self.sliced) if not s and all(r.arg != i for r in u.relayouts)]
                    for u in self.ukernels]
        self.func, self.params = dispatch_func(self.sliced, [(u.height, u.func) for u in self.ukernels],
                                               self.table, name="main", gpu=self.gpu, as_given=as_given)
        self._executable: Any = None

    @property
    def executable(self) -> Any:
        """The compiled function (built on first use)."""
        if self._executable is None:
            import tvm

            use_target_threads(self.spec.target)
            with build_context(self.gpu):
                self._executable = compile_kernel(tvm.IRModule({"main": self.func}), self.spec.target)
        return self._executable

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

    def args(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """The compiled function's arguments for (inputs..., output): aligned, the fixed operands relaid for
        each uKernel, the plan table."""
        inputs = [as_aligned(a, t) for a, t in zip(arrays[:-1], self._types)]
        sliced = [a for a, s in zip(inputs, self.sliced) if s]
        fixed = [u.fixed_operand(i, inputs[i]) for u, f in zip(self.ukernels, self.params.fixed) for i, _ in f]
        table = [] if self.params.table is None else [self.table]
        return [*sliced, *(as_aligned(a, a.dtype) for a in fixed), *table, arrays[-1]]

    def run(self, *arrays: np.ndarray) -> None:
        """Compute into the last array (inputs..., output: C-contiguous numpy arrays of the right dtype)."""
        size = arrays[0].shape[0]
        if arrays[-1].shape[0] != size:
            raise AutotuneError(f"output has {arrays[-1].shape[0]} rows, inputs {size}")
        if size < 1:
            return
        out = arrays[-1]
        target = out if _ptr(out) % ALIGN == 0 and out.flags.c_contiguous else aligned_empty(out.shape, out.dtype)
        args = self.args(*arrays[:-1], target)
        if self.gpu:
            on_device = _on_device(args, self.spec)
            self.executable["main"](*on_device)
            target[...] = on_device[-1].numpy()
        else:
            self.executable["main"](*args)
        if target is not out:
            out[...] = target

    def time(self, *inputs: Any, repeat: int = 7, min_s: float = 0.1) -> list[float]:
        """Seconds per call of the compiled function on prepared arguments (the FFI call from Python included),
        one per repeat."""
        out = aligned_empty(self.output_shape(np.asarray(inputs[0]).shape[0]), self._types[-1])
        args = self.args(*inputs, out)
        main = self.executable["main"]
        if not self.gpu:
            return time_calls(lambda: main(*args), repeat, min_s)
        args = _on_device(args, self.spec)
        device = args[-1].device
        return time_calls(lambda: (main(*args), device.sync()), repeat, min_s)

    def describe(self, sizes: Sequence[int] = ()) -> str:
        """The uKernels, then the plan and predicted time of each size in `sizes`."""
        lines = [f"dynamic {self.spec}: {len(self.ukernels)} uKernels"]
        for u in self.ukernels:
            gf = u.task.flops / u.mean_s / 1e9
            lines.append(f"  uKernel {self.spec.dim}={u.height:<5d} {u.task.key}  {u.mean_s * 1e3:.4f} ms  "
                         f"{gf:.1f} GFLOPS  " + (f"config #{u.record.input.config.index}" if u.record else "not tuned"))
        for m in sizes:
            p = self.plan(m)
            flops = self.spec.task(m).flops
            lines.append(f"  {self.spec.dim}={m:<6d} {p.describe():<28s} predicted {p.predicted_s * 1e3:.4f} ms "
                         f"({flops / p.predicted_s / 1e9:.1f} GFLOPS)")
        return "\n".join(lines)
