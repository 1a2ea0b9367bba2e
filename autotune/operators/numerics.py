"""An operator's test inputs and numpy reference, and the check of a kernel's output against it."""

from __future__ import annotations

import numpy as np

from .definition import OpDef, Params
from .dtypes import element_type



def random_inputs(op: OpDef, params: Params, dtype: str, seed: int = 0) -> list[np.ndarray]:
    """Deterministic inputs of the task's element type (`ElementType.random`): the same for the same task, in every
    process."""
    rng = np.random.default_rng(seed)
    kind = element_type(dtype)
    return [kind.random(rng, shape) for shape in op.input_shapes(params)]


def reference_output(op: OpDef, params: Params, dtype: str, inputs: list[np.ndarray]) -> np.ndarray:
    """The operator's numpy reference on `inputs`: in float32 for float32 tasks; in float64 on the same (rounded)
    inputs otherwise (exact for int8's integer sums), to be compared before any rounding to the output type."""
    if dtype == "float32":
        return op.reference(params, inputs)
    return op.reference(params, [np.asarray(a).astype(np.float64) for a in inputs])


def check_output(out: np.ndarray, ref: np.ndarray, reduction: int, dtype: str = "float32") -> str | None:
    """None when a kernel's `out` matches the reference `ref` as closely as `dtype` allows, else why not: equal for
    integers; within fp32 round-off of a sum of `reduction` terms (plus half a step of the output type of the
    largest value, for bfloat16 and float16) otherwise."""
    kind = element_type(dtype)
    if out.shape != ref.shape:
        return f"output shape {out.shape} != reference {ref.shape}"
    if kind.exact:
        wrong = np.count_nonzero(out.astype(np.int64) != ref.astype(np.int64))
        return None if not wrong else f"{wrong} of {out.size} outputs differ from the exact integer reference"
    got = out.astype(np.float64)
    if not np.all(np.isfinite(got)):
        return "output has NaN/Inf"
    largest = float(np.abs(ref).max())
    tol = 1e-5 * max(1.0, np.sqrt(reduction)) * max(1.0, largest)
    tol += kind.output_rounding * largest
    err = float(np.abs(got - ref).max())
    return None if err <= tol else f"max abs error {err:.3g} > tolerance {tol:.3g}"


def reduction_size(op: OpDef, params: Params) -> int:
    """Terms summed per output element (sets the correctness tolerance)."""
    return max(1, int(op.flops(params) / 2 / np.prod(op.output_shape(params))))
