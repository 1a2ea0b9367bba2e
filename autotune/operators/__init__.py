"""The operator registry: every tunable operator, each defined once (`OpDef`: parameters, compute, numpy
reference, FLOPs, example and probe shapes, dynamic dimension, templates per target kind).

Adding an operator means adding its `OpDef` to a module of this package and to `OPS`, and writing its template
modules (which the `OpDef` names by reference).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ..errors import AutotuneError
from .conv import CONV2D, DEPTHWISE_CONV2D, GROUP_CONV2D
from .definition import OpDef, Params, RowSplit
from .gemm import BATCH_MATMUL, DENSE, MATMUL
from .dtypes import DTYPES, ELEMENT_TYPES, ElementType, element_type, in_type
from .numerics import check_output, random_inputs, reduction_size, reference_output

OPS: Mapping[str, OpDef] = MappingProxyType(
    {op.name: op for op in (MATMUL, DENSE, BATCH_MATMUL, CONV2D, GROUP_CONV2D, DEPTHWISE_CONV2D)})


def get_op(name: str) -> OpDef:
    """The operator called `name`; AutotuneError naming the valid ones when there is none."""
    try:
        return OPS[name]
    except KeyError:
        raise AutotuneError(f"unknown operator {name!r}; choose one of: {', '.join(OPS)}") from None


def default_template_ref(op: str, target_kind: str) -> str:
    """Reference ("module:attribute") of the default template of `op` on `target_kind`."""
    return get_op(op).template_ref(target_kind)


def ukernel_template_ref(op: str, target_kind: str) -> str:
    """Reference of the template for the uKernels of a dynamic-shape `op` (its own, else the default)."""
    return get_op(op).ukernel_template_ref(target_kind)


def default_template_refs() -> dict[tuple[str, str], str]:
    """(op, target kind) -> reference of the default template, for every operator and kind that has one."""
    return {(op.name, kind): ref for op in OPS.values() for kind, ref in op.templates.items()}


__all__ = ["DTYPES", "ELEMENT_TYPES", "ElementType", "OPS", "OpDef", "Params", "RowSplit", "check_output",
           "default_template_ref", "default_template_refs", "element_type", "get_op", "in_type", "random_inputs",
           "reduction_size", "reference_output", "ukernel_template_ref"]
