"""The loop every Relax rewrite of the model path ends with, and walks over a module's calls built on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def visit_functions(mutator: Any) -> Any:
    """The module a PyExprMutator was made on, with each of its Relax functions replaced by the mutator's visit."""
    from tvm import relax

    for gv, func in list(mutator.builder_.get().functions_items()):
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


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
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Calls(PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            new = rewrite(self.builder_, call, self.lookup_binding)
            return call if new is None else new

    return visit_functions(_Calls(mod))
