"""The loop every Relax rewrite of the model path ends with."""

from __future__ import annotations

from typing import Any


def visit_functions(mutator: Any) -> Any:
    """The module a PyExprMutator was made on, with each of its Relax functions replaced by the mutator's visit."""
    from tvm import relax

    for gv, func in list(mutator.builder_.get().functions_items()):
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()
