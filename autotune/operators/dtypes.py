"""Element types a task may have: what its inputs are stored as, what its sums accumulate in, what it outputs,
how its test inputs are drawn, how its numpy reference is rounded and how close a kernel must come to it.

- float32: fp32 in, fp32 sums, fp32 out.
- bfloat16: bf16 in (a model in `torch.bfloat16`), sums in fp32, rounded to bf16 out (as PyTorch's bf16 linear
  and matmul give it). The reference sums the same bf16 inputs in float64 and is compared before rounding: a kernel
  may be off by its own fp32 round-off plus half a bf16 step.
- int8: int8 x int8 in, int32 sums and output (as `torch._int_mm`): exact, so the check is equality.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import AutotuneError

BF16_STEP = 2.0 ** -7  # bf16's 8-bit significand: a value v is stored within |v| * 2**-8 (half a step)


@dataclass(frozen=True)
class ElementType:
    name: str  # the task's dtype
    storage: str  # the inputs' element type
    accumulate: str  # what products are summed in
    output: str  # the output's element type
    doc: str

    @property
    def numpy_storage(self) -> np.dtype:
        return _numpy_dtype(self.storage)

    @property
    def numpy_output(self) -> np.dtype:
        return _numpy_dtype(self.output)

    @property
    def exact(self) -> bool:
        return self.accumulate.startswith("int")

    def random(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Test inputs: uniform in [-1, 1) (rounded to bf16 for bfloat16), every int8 value for int8."""
        if self.exact:
            return rng.integers(-128, 128, size=shape).astype(self.numpy_storage)
        return rng.uniform(-1.0, 1.0, size=shape).astype(np.float32).astype(self.numpy_storage)

    def unfilled(self, shape: tuple[int, ...]) -> np.ndarray:
        """An output buffer's content before a kernel runs: one no correct kernel leaves (NaN; for integers the
        most negative value, which no int8 product sum of a test's size reaches)."""
        fill = np.iinfo(self.numpy_output).min if self.exact else np.nan
        return np.full(shape, fill, dtype=self.numpy_output)


def _numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


ELEMENT_TYPES = {t.name: t for t in (
    ElementType("float32", "float32", "float32", "float32", "fp32 in, fp32 sums, fp32 out"),
    ElementType("bfloat16", "bfloat16", "float32", "bfloat16", "bf16 in, fp32 sums, bf16 out"),
    ElementType("int8", "int8", "int32", "int32", "int8 x int8 in, int32 sums and out"),
)}
DTYPES = tuple(ELEMENT_TYPES)


def element_type(dtype: str) -> ElementType:
    """The element type called `dtype`; AutotuneError naming the valid ones when there is none."""
    try:
        return ELEMENT_TYPES[dtype]
    except KeyError:
        raise AutotuneError(f"unsupported dtype {dtype!r}; choose one of: {', '.join(DTYPES)}") from None


def in_type(expr, dtype: str):
    """A TE expression cast to `dtype` (unchanged when it is already of that type)."""
    return expr if str(expr.dtype) == dtype else expr.astype(dtype)


def check_against(out: np.ndarray, ref: np.ndarray, reduction: int, dtype: str) -> str | None:
    """None when a kernel's `out` matches the float64 reference sum `ref` as closely as `dtype` allows, else why
    not: equal for integers; within fp32 round-off of a sum of `reduction` terms (plus half a bf16 step of the
    largest value for bfloat16) otherwise."""
    kind = element_type(dtype)
    if out.shape != ref.shape:
        return f"output shape {out.shape} != reference {ref.shape}"
    if kind.exact:
        wrong = np.count_nonzero(out.astype(np.int64) != ref.astype(np.int64))
        return None if not wrong else f"{wrong} of {out.size} outputs differ from the exact integer reference"
    got = out.astype(np.float64)
    if not np.all(np.isfinite(got)):
        return "output has NaN/Inf"
    scale = max(1.0, float(np.abs(ref).max()))
    tol = 1e-5 * max(1.0, np.sqrt(reduction)) * scale
    if kind.output == "bfloat16":
        tol += BF16_STEP / 2 * float(np.abs(ref).max())
    err = float(np.abs(got - ref).max())
    return None if err <= tol else f"max abs error {err:.3g} > tolerance {tol:.3g}"
