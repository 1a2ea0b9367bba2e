"""Elementwise ops moved above the reshapes that only add or drop size-1 dimensions, so they fuse into the kernel.

A kernel's output often reaches its epilogue through such a reshape: a conv1d runs as a conv2d of height 1 and
its [N, K, 1, W] output is viewed as [N, K, W] before the bias add and the activation; a linear layer on
[1, T, D] runs as dense on [T, D]. FuseOps fuses elementwise ops into a kernel only when they read its output
directly, so the reshape left each of them a pass of its own over the output. `sink_reshapes` rewrites
    y = reshape(x, S); z = f(y, c)   into   z' = f(x, c'); z = reshape(z', S)
for elementwise f (c' is c with the same size-1 dimensions added or dropped; sizes may be symbolic, a dynamic
model's), repeatedly, and collapses a reshape of a reshape, so the ops run on the kernel's own output and FuseOps
puts them in its write-back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .rewrite import visit_functions

# Relax ops applied element by element (with numpy broadcasting): f(reshape(x)) == reshape(f(x))
ELEMENTWISE = frozenset(
    f"relax.{name}" for name in (
        "add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "negative", "abs", "exp", "log",
        "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "clip", "nn.relu", "nn.gelu", "nn.gelu_tanh", "nn.silu",
        "nn.leakyrelu", "nn.softplus"))


@dataclass(frozen=True)
class Symbolic:
    """A symbolic size (a dynamic model's), equal to another of the same expression."""

    text: str
    expr: Any = field(compare=False, hash=False)


Dim = int | Symbolic


def _shape(expr: Any) -> tuple[Dim, ...] | None:
    """A tensor's shape (a symbolic size as `Symbolic`), None where it has none known."""
    from tvm import tirx

    shape = getattr(getattr(expr, "ty", None), "shape", None)
    if shape is None:
        return None
    return tuple(int(d) if isinstance(d, tirx.IntImm) else Symbolic(str(d), d) for d in shape)


def _dims(shape: tuple[Dim, ...]) -> list[Any]:
    """The shape as Relax takes it."""
    return [d.expr if isinstance(d, Symbolic) else d for d in shape]


def _core(shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
    return tuple(d for d in shape if d != 1)


def operand_shape(shape: tuple[Dim, ...], before: tuple[Dim, ...], after: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """The shape an operand of `shape`, broadcast against `after`, takes to broadcast the same way against
    `before` (`before` and `after` differ by size-1 dimensions only); None where it cannot (it broadcasts over
    one of the size-1 dimensions)."""
    if not shape:  # a scalar broadcasts against anything
        return ()
    if len(shape) > len(after):
        return None
    aligned = (1,) * (len(after) - len(shape)) + tuple(shape)
    if any(a != 1 and a != d for a, d in zip(aligned, after)):
        return None
    if any(a != 1 for a, d in zip(aligned, after) if d == 1):
        return None
    sizes = iter(a for a, d in zip(aligned, after) if d != 1)
    return tuple(next(sizes) if d != 1 else 1 for d in before)


def sink_reshapes(mod: Any) -> Any:
    """`mod` with elementwise ops moved above unit-dimension reshapes and reshape chains collapsed."""
    from tvm import ir, relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Sinker(PyExprMutator):
        def _reshape_source(self, expr: Any) -> Any | None:
            """x when `expr` is a variable bound to reshape(x, ...) with a known shape, else None."""
            value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
            if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.reshape":
                return value.args[0] if _shape(value.args[0]) is not None else None
            return None

        def _reshaped(self, expr: Any, shape: tuple[Dim, ...]) -> Any:
            if _shape(expr) == shape:
                return expr
            if isinstance(expr, ir.Constant):
                return relax.const(expr.value.numpy().reshape(shape))
            source = self._reshape_source(expr)
            if source is not None:
                return self._reshaped(source, shape)
            return self.builder_.emit(relax.op.reshape(expr, _dims(shape)))

        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            name = getattr(call.op, "name", "")
            if name == "relax.reshape":
                source = self._reshape_source(call.args[0])
                out = _shape(self.builder_.normalize(call))
                if source is None or out is None:
                    return call
                return source if _shape(source) == out else relax.op.reshape(source, _dims(out))
            if name not in ELEMENTWISE:
                return call
            after = _shape(self.builder_.normalize(call))
            if after is None:
                return call
            for arg in call.args:
                source = self._reshape_source(arg)
                if source is None or _shape(arg) != after:
                    continue
                before = _shape(source)
                if _core(before) != _core(after):
                    continue
                shapes = [operand_shape(_shape(a) or (), before, after) if isinstance(a.ty, relax.TensorType)
                          else () for a in call.args]
                if any(s is None or _shape(a) is None for s, a in zip(shapes, call.args)
                       if isinstance(a.ty, relax.TensorType)):
                    return call
                args = [self._reshaped(a, s) if isinstance(a.ty, relax.TensorType) else a
                        for a, s in zip(call.args, shapes)]
                inner = self.builder_.emit(relax.Call(call.op, args, call.attrs, call.ty_args))
                return relax.op.reshape(inner, _dims(after))
            return call

    return visit_functions(_Sinker(mod))
