"""Walking the calls of a Relax module's functions: visiting each one, or rewriting those a function replaces."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def visit_calls(mod: Any, visit: Callable[[Any], None]) -> None:
    """Call `visit` on every call of the module's Relax functions."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprVisitor, visitor

    @visitor
    class _Calls(PyExprVisitor):
        def visit_call_(self, call: Any) -> None:
            super().visit_call_(call)
            visit(call)

    calls = _Calls()
    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            calls.visit_expr(func)


def rewrite_calls(mod: Any, rewrite: Callable[[Any, Any, Callable[[Any], Any]], Any | None]) -> Any:
    """The module with the calls of its Relax functions that `rewrite(builder, call, lookup_binding)` replaces (it
    returns the replacing expression, or None to keep the call; it may emit bindings and add functions with the
    builder), inner calls first."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Calls(PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            new = rewrite(self.builder_, call, self.lookup_binding)
            return call if new is None else new

    calls = _Calls(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            calls.builder_.update_func(gv, calls.visit_expr(func))
    return calls.builder_.get()
