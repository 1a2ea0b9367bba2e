"""Activations written as the elementwise ops and exp / erf / tanh they are made of, so FastMathTransform (which
replaces exp, erf and tanh by TVM's vectorisable polynomial approximations, as it already does for softmax) reaches
them.

LegalizeOps turns R.nn.gelu into a call of erf, R.sigmoid and R.nn.silu into one of exp, R.nn.gelu_tanh into
one of tanh; on the llvm target each is a scalar libm call per element (erff, or LLVM's vector exp intrinsic
expanded into one expf call per lane), several times the cost of the kernel's own write-back. Expanded first:
    gelu(x)      = 0.5 x (1 + erf(x / sqrt 2))
    gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    sigmoid(x)   = 1 / (1 + exp(-x))
    silu(x)      = x / (1 + exp(-x))
"""

from __future__ import annotations

import math
from typing import Any

from .rewrite import visit_functions

EXPANDED = ("relax.nn.gelu", "relax.nn.gelu_tanh", "relax.sigmoid", "relax.nn.silu")


def expand_activations(mod: Any) -> Any:
    """`mod` with every float32 gelu, gelu_tanh, sigmoid and silu call expanded (see the module docstring)."""
    from tvm import relax

    from tvm.relax.expr_functor import PyExprMutator, mutator

    op = relax.op

    @mutator
    class _Expander(PyExprMutator):
        def _const(self, value: float) -> Any:
            return relax.const(value, "float32")

        def _emit(self, expr: Any) -> Any:
            return self.builder_.emit(expr)

        def _one_plus_exp_neg(self, x: Any) -> Any:
            return self._emit(op.add(self._const(1.0), self._emit(op.exp(self._emit(op.negative(x))))))

        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            name = getattr(call.op, "name", "")
            if name not in EXPANDED or str(getattr(call.args[0].ty, "dtype", "")) != "float32":
                return call
            x, c = call.args[0], self._const
            if name == "relax.sigmoid":
                return op.divide(c(1.0), self._one_plus_exp_neg(x))
            if name == "relax.nn.silu":
                return op.divide(x, self._one_plus_exp_neg(x))
            if name == "relax.nn.gelu":
                inner = self._emit(op.erf(self._emit(op.multiply(x, c(1.0 / math.sqrt(2.0))))))
            else:
                cube = self._emit(op.multiply(self._emit(op.multiply(x, x)), x))
                poly = self._emit(op.add(x, self._emit(op.multiply(cube, c(0.044715)))))
                inner = self._emit(op.tanh(self._emit(op.multiply(poly, c(math.sqrt(2.0 / math.pi))))))
            half_x = self._emit(op.multiply(x, c(0.5)))
            return op.multiply(half_x, self._emit(op.add(c(1.0), inner)))

    return visit_functions(_Expander(mod))
