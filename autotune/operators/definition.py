"""What an operator is: its parameters, TE compute, numpy reference and FLOPs, the shapes it is shown and
fingerprinted on, the dimension a dynamic shape varies, and its templates per target kind.

Block names are part of the contract with the templates: the main computation is always the block "C" (GEMM
family) or "conv" (convolutions); a zero-padding block, when the convolution pads, is "pad".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import AutotuneError

Params = dict[str, int]

# Elements one tensor (an input or the output) may have: TVM indexes buffers with 32-bit integers, and a tensor
# this large (8 GiB of float32) is beyond what a tuning run can allocate and time many times over.
MAX_TENSOR_ELEMENTS = 2**31 - 1


@dataclass(frozen=True)
class RowSplit:
    """How an operator is cut along its dynamic parameter: contiguous row slices of the sliced inputs and of the
    output (zero-copy views) compute a slice of the output."""

    param: str  # the parameter that may vary (the output's leading axis follows it)
    sliced: tuple[bool, ...]  # per input: is it sliced along axis 0 with the output?
    rows_per_unit: int = 0  # rows of one register tile along the dim (0: the CPU model's register rows)


def _no_problem(params: Params) -> str | None:
    return None


@dataclass(frozen=True)
class OpDef:
    """One operator, all of it.

    `templates` and `ukernel_templates` name templates by reference ("module:attribute", resolved by
    `autotune.templates.resolve`): target kind -> the default template, and -> the template of the uKernels of a
    dynamic-shape kernel where it differs from the default.
    """

    name: str
    doc: str
    params: tuple[str, ...]
    defaults: Params
    input_shapes: Callable[[Params], list[tuple[int, ...]]]
    output_shape: Callable[[Params], tuple[int, ...]]
    compute: Callable[[Params, str], list]  # -> [inputs..., output] te tensors
    reference: Callable[[Params, list[np.ndarray]], np.ndarray]
    flops: Callable[[Params], float]
    example: str  # a typical shape, as `autotune ops` shows it (e.g. "M=1024,N=1024,K=1024")
    probe_shapes: tuple[Params, ...]  # a small and a model-sized shape its templates are fingerprinted on
    templates: Mapping[str, str] = field(default_factory=dict)
    ukernel_templates: Mapping[str, str] = field(default_factory=dict)
    row_split: RowSplit | None = None  # None: no dynamic shapes
    # how a model computes it in Relax: the Relax operator applied to operands (Relax expressions), and the inputs
    # that are a layer's weight (constant in a model)
    relax_call: Callable[[Params, list], Any] | None = None
    weights: tuple[int, ...] = ()
    # gives the PrimFunc TVM's LegalizeOps makes of `relax_call` (in a schedule) this operator's loops and returns
    # the names, in that schedule, of the blocks of this operator's PrimFunc ("C"; "conv" and "pad")
    legalized_blocks: Callable[[Any, Params], dict[str, str]] | None = None
    check: Callable[[Params], str | None] = _no_problem  # why a shape is impossible beyond sizes < 1, or None
    narrow_probe_shapes: tuple[Params, ...] = ()  # fingerprinted in the narrow dtypes too (paths only they take)

    def complete(self, given: Params) -> Params:
        """Fill defaults, reject unknown/missing/impossible parameters."""
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            raise AutotuneError(
                f"unknown parameter(s) {', '.join(unknown)} for {self.name}; valid: {', '.join(self.params)}")
        out = {**self.defaults, **given}
        missing = [p for p in self.params if p not in out]
        if missing:
            raise AutotuneError(f"missing parameter(s) {', '.join(missing)} for {self.name}; "
                                f"needs: {self.signature()}")
        out = {p: int(out[p]) for p in self.params}
        lower = {"padding": 0}
        for p, v in out.items():
            if v < lower.get(p, 1):
                raise AutotuneError(f"impossible shape for {self.name}: {p}={v} must be >= {lower.get(p, 1)}")
        for dim in self.output_shape(out):
            if dim < 1:
                raise AutotuneError(f"impossible shape for {self.name}: output would be {self.output_shape(out)}")
        for what, shape in [*(("input", s) for s in self.input_shapes(out)), ("output", self.output_shape(out))]:
            if math.prod(shape) > MAX_TENSOR_ELEMENTS:
                raise AutotuneError(f"shape too large for {self.name}: its {what} {tuple(shape)} has "
                                    f"{math.prod(shape):,} elements, more than the {MAX_TENSOR_ELEMENTS:,} (2**31 - 1) "
                                    "a tensor may have (TVM indexes buffers with 32-bit integers)")
        problem = self.check(out)
        if problem:
            raise AutotuneError(f"impossible shape for {self.name}: {problem}")
        return out

    def signature(self) -> str:
        return ", ".join(f"{p}={self.defaults[p]}" if p in self.defaults else p for p in self.params)

    def template_ref(self, target_kind: str) -> str:
        """Reference of the default template for `target_kind`; AutotuneError when there is none."""
        try:
            return self.templates[target_kind]
        except KeyError:
            have = ", ".join(sorted(self.templates)) or "none"
            raise AutotuneError(f"no {target_kind} template for {self.name} yet (templates exist for: {have})"
                                ) from None

    def ukernel_template_ref(self, target_kind: str) -> str:
        """Template for the uKernels of a dynamic-shape kernel: its own where one exists, else the default."""
        return self.ukernel_templates.get(target_kind) or self.template_ref(target_kind)
