"""Binary ops on bool tensors computed on int8, which TVM 0.27's LLVM code generator can compile.

Its code generator takes a bool operand of a comparison for a float (`a == b` on two bools emits `fcmp oeq i1`,
which LLVM rejects) and refuses `<`, `<=`, max, min, + and * on bools outright, so a model comparing or combining
two masks did not compile. Each such call gets its bool
operands cast to int8 (0 / 1) first; an arithmetic op's result is cast back to bool (PyTorch's bool + is logical or,
* logical and, as int8 followed by != 0 is).
"""

from __future__ import annotations

from typing import Any

from .rewrite import visit_functions

COMPARISONS = ("relax.equal", "relax.not_equal", "relax.less", "relax.less_equal", "relax.greater",
               "relax.greater_equal")
ARITHMETIC = ("relax.maximum", "relax.minimum", "relax.add", "relax.multiply")


def _is_bool(expr: Any) -> bool:
    return str(getattr(expr.ty, "dtype", "")) == "bool"


def compute_bools_as_int8(mod: Any) -> Any:
    """`mod` with each comparison or arithmetic call on bool operands computed on int8 (module docstring)."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _BoolOps(PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            name = getattr(call.op, "name", "")
            if name not in COMPARISONS + ARITHMETIC or not any(_is_bool(arg) for arg in call.args[:2]):
                return call
            args = [self.builder_.emit(relax.op.astype(arg, "int8")) if _is_bool(arg) else arg
                    for arg in call.args[:2]]
            out = getattr(relax.op, name.removeprefix("relax."))(*args)
            return relax.op.astype(self.builder_.emit(out), "bool") if name in ARITHMETIC else out

    return visit_functions(_BoolOps(mod))
