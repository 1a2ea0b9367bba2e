"""An operator's test inputs, and the check of a kernel's output against its numpy reference."""

from __future__ import annotations

import numpy as np

from .definition import OpDef, Params


def random_inputs(op: OpDef, params: Params, dtype: str, seed: int = 0) -> list[np.ndarray]:
    """Deterministic inputs in [-1, 1): the same for the same task, in every process."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, size=shape).astype(dtype) for shape in op.input_shapes(params)]


def check_output(out: np.ndarray, ref: np.ndarray, reduction: int) -> str | None:
    """None when `out` matches `ref` within fp32 round-off for a sum of `reduction` terms, else why not."""
    if out.shape != ref.shape:
        return f"output shape {out.shape} != reference {ref.shape}"
    if not np.all(np.isfinite(out)):
        return "output has NaN/Inf"
    tol = 1e-5 * max(1.0, np.sqrt(reduction)) * max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(out.astype(np.float64) - ref).max())
    return None if err <= tol else f"max abs error {err:.3g} > tolerance {tol:.3g}"


def reduction_size(op: OpDef, params: Params) -> int:
    """Terms summed per output element (sets the correctness tolerance)."""
    return max(1, int(op.flops(params) / 2 / np.prod(op.output_shape(params))))
