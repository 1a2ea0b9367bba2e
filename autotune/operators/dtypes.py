"""Element types a task may have: what its inputs are stored as, what its sums accumulate in, what it outputs,
and how its test inputs are drawn (how close a kernel must come to the reference: `numerics.check_output`).

- float32: fp32 in, fp32 sums, fp32 out.
- bfloat16: bf16 in (a model in `torch.bfloat16`), sums in fp32, rounded to bf16 out (as PyTorch's bf16 linear
  and matmul give it). The reference sums the same bf16 inputs in float64 and is compared before rounding: a kernel
  may be off by its own fp32 round-off plus half a bf16 step.
- float16: fp16 in, sums in fp32, rounded to fp16 out (CUDA tensor cores; as bfloat16 otherwise).
- int8: int8 x int8 in, int32 sums and output (as `torch._int_mm`): exact, so the check is equality.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import AutotuneError



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

    @property
    def output_rounding(self) -> float:
        """How far rounding to the output type may move a value, relative to it: half a step of its significand
        (0 where the output is the sums' own type)."""
        return {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}.get(self.output, 0.0)

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
    ElementType("float16", "float16", "float32", "float16", "fp16 in, fp32 sums, fp16 out"),
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


def output_of(acc, dtype: str, name: str):
    """The output of an operator whose sums are the TE tensor `acc`: `acc` itself, or rounded to the dtype's output
    type in a block `name` (bfloat16)."""
    from tvm import te

    kind = element_type(dtype)
    if kind.output == kind.accumulate:
        return acc
    return te.compute(acc.shape, lambda *ix: acc(*ix).astype(kind.output), name=name)
