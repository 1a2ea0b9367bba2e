"""Inference-time simplification of a captured model: batch norms folded away before tasks are extracted.

An inference batch norm (`training=False`, constant statistics and affine parameters) is a per-channel
`x * scale + shift`, scale = gamma / sqrt(var + eps), shift = beta - mean * scale. Where a convolution with a
constant weight feeds it and nothing else, the scale goes into that weight (one multiply per weight, once,
at build time) and only `+ shift` is left for the fused elementwise kernel after the convolution (with the
activation that follows, e.g. ReLU6); elsewhere the batch norm becomes that multiply and add. Left as it is,
TVM's legalized batch norm computes (x - mean) / sqrt(var + eps) * gamma + beta for every element.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _constant(expr: Any, bindings: dict[Any, Any]) -> np.ndarray | None:
    from tvm import ir, relax

    while isinstance(expr, relax.Var) and expr in bindings:
        expr = bindings[expr]
    return expr.value.numpy() if isinstance(expr, ir.Constant) else None


def _inference_bn(call: Any, bindings: dict[Any, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) of an inference batch norm over axis 1 with constant parameters, else None."""
    from tvm import relax

    if not isinstance(call, relax.Call) or getattr(call.op, "name", "") != "relax.nn.batch_norm":
        return None
    attrs = call.attrs
    if bool(attrs.training) or int(attrs.axis) != 1 or call.args[0].ty.ndim < 2:
        return None
    gamma, beta, mean, var = (_constant(a, bindings) for a in call.args[1:5])
    if any(p is None for p in (gamma, beta, mean, var)):
        return None
    gamma = gamma if bool(attrs.scale) else np.ones_like(mean)
    beta = beta if bool(attrs.center) else np.zeros_like(mean)
    scale = (gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + float(attrs.epsilon)))
    shift = beta.astype(np.float64) - mean.astype(np.float64) * scale
    return scale.astype(np.float32), shift.astype(np.float32)


def _foldable_conv(expr: Any, bindings: dict[Any, Any], uses: dict[Any, int]) -> Any | None:
    """The conv1d / conv2d / conv3d call bound to `expr` when its weight is constant (OIW, OIHW, OIDHW) and `expr`
    has no other use."""
    from tvm import relax

    call = bindings.get(expr) if isinstance(expr, relax.Var) and uses.get(expr, 0) == 1 else None
    layouts = {"relax.nn.conv2d": ("OIHW", "NCHW"), "relax.nn.conv1d": ("OIW", "NCW"),
               "relax.nn.conv3d": ("OIDHW", "NCDHW")}
    if not isinstance(call, relax.Call) or getattr(call.op, "name", "") not in layouts:
        return None
    if (call.attrs.kernel_layout, call.attrs.data_layout) != layouts[call.op.name]:
        return None
    return call if _constant(call.args[1], bindings) is not None else None


def _scan(func: Any) -> tuple[dict[Any, Any], dict[Any, int]]:
    """(var -> bound value, var -> number of bindings and outputs using it) of a Relax function."""
    from tvm import relax

    bindings: dict[Any, Any] = {}
    uses: dict[Any, int] = {}
    body = func.body
    for block in body.blocks:
        for binding in block.bindings:
            if isinstance(binding, relax.VarBinding):
                bindings[binding.var] = binding.value
            for var in relax.analysis.used_vars(binding.value):
                uses[var] = uses.get(var, 0) + 1
    for var in relax.analysis.used_vars(body.body):
        uses[var] = uses.get(var, 0) + 1
    return bindings, uses


def fold_batch_norms(mod: Any) -> Any:
    """`mod` with every inference batch norm of constant parameters folded (see the module docstring)."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Folder(PyExprMutator):
        def __init__(self, module: Any, bindings: dict[Any, Any], uses: dict[Any, int]):
            super().__init__(module)
            self.bindings = bindings
            self.norms: dict[Any, tuple[np.ndarray, np.ndarray]] = {}  # batch_norm call -> (scale, shift)
            self.conv_bn: dict[Any, tuple[np.ndarray, np.ndarray]] = {}  # conv call -> its norm's (scale, shift)
            self.in_conv: set[Any] = set()  # batch_norm calls folded into the weight of their conv
            for value in bindings.values():
                bn = _inference_bn(value, bindings)
                if bn is None:
                    continue
                self.norms[value] = bn
                conv = _foldable_conv(value.args[0], bindings, uses)
                if conv is not None:
                    self.conv_bn[conv] = bn
                    self.in_conv.add(value)

        def visit_call_(self, call: Any) -> Any:
            new = super().visit_call_(call)
            if call in self.conv_bn:  # conv(x, W * scale) + shift
                scale, shift = self.conv_bn[call]
                weight = _constant(call.args[1], self.bindings)
                spatial = (1,) * (weight.ndim - 2)
                weight = (weight * scale.reshape(-1, 1, *spatial)).astype(weight.dtype)
                conv = self.builder_.emit(relax.Call(call.op, [new.args[0], relax.const(weight)], call.attrs))
                return relax.op.add(conv, relax.const(shift.reshape(1, -1, *spatial).astype(weight.dtype)))
            if call not in self.norms:
                return new
            data = new.args[0]
            if call not in self.in_conv:  # data * scale + shift
                shape, dtype = (1, -1) + (1,) * (data.ty.ndim - 2), str(data.ty.dtype)
                scale, shift = (relax.const(p.reshape(shape).astype(dtype)) for p in self.norms[call])
                data = self.builder_.emit(relax.op.add(self.builder_.emit(relax.op.multiply(data, scale)), shift))
            return relax.Tuple([data, new.args[3], new.args[4]])  # (output, running mean, running var)

    for gv, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            folder = _Folder(mod, *_scan(func))
            folder.builder_.update_func(gv, folder.visit_expr(func))
            mod = folder.builder_.get()
    return relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(mod))
