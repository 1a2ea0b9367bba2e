"""The dynamic sites of a model exported with a symbolic size (torch.export `Dim`), and the tasks that tune them.

A site is a `matmul(x, W)` whose weight W is a constant [K, N] (a linear layer's weight, transposed) and whose
input x has a symbolic size in its leading dimensions: a dynamic `dense` (a linear layer: x times the weight
[N, K], transposed) over batch = the product of those dimensions, its range from the export's `Dim` bounds, as
a static build extracts a linear layer (its template packs the weight once, at build time). Sites of the same
(N, K) share one dynamic kernel (the union of their ranges).

To tune them within a model's budget, each site becomes the static tasks of its chosen uKernels (the analytic
ranking, `ukernels.rank_ukernels`), each weighted by how many pieces of it a call takes on average over the range
(sizes spread log-uniformly, the planner's covers on predicted times) times the site's calls: the task
scheduler then spends trials where they cut the model's time over the range most.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import AutotuneError
from ..hardware import hardware_model
from ..task import Task
from .compose import Planner
from .spec import DynamicSpec, parse_dynamic
from .ukernels import chosen_heights, op_cost, pad_cost_fn, predict_time, rank_ukernels, sample_sizes

DEFAULT_BOUNDS = (1, 4096)  # a symbolic size without bounds
MIN_WEIGHT = 0.05  # pieces per inference of a uKernel task (the scheduler still gives it its warm-up round)


def dynamic_program(model: Any) -> Any | None:
    """The ExportedProgram when `model` is one (or a saved .pt2) with a symbolic input size, else None."""
    try:
        import torch
    except ImportError:
        return None
    program = model
    if isinstance(model, (str, os.PathLike)) and str(model).endswith((".pt2", ".pt")) and os.path.isfile(model):
        from ..model.capture import load_program

        try:
            program = load_program(model)  # pickling off
        except Exception:  # noqa: BLE001 - not loadable here (or refused): the static path reports it
            return None
    if not isinstance(program, torch.export.ExportedProgram):
        return None
    user = set(program.graph_signature.user_inputs)
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in user and not all(isinstance(d, int)
                                                                      for d in node.meta["val"].shape):
            return program
    return None


def import_dynamic(program: Any, name: str = "model") -> Any:
    """The Relax module of an ExportedProgram with symbolic sizes, batch norms folded and constants folded (a
    transposed weight becomes a constant)."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from ..model.fold import fold_batch_norms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            mod = from_exported_program(program, keep_params_as_input=False)
        except Exception as err:  # noqa: BLE001 - any importer failure becomes one line
            raise AutotuneError(f"TVM cannot import {name}: {type(err).__name__}: "
                                f"{str(err).splitlines()[0] if str(err) else ''}") from None
    return relax.transform.FoldConstant()(fold_batch_norms(mod))


@dataclass(frozen=True)
class MatmulSite:
    """One dynamic matmul call: x [*lead, K] (some of lead symbolic) times the constant w [K, N]."""

    x: Any
    w: Any
    lead: tuple[Any, ...]
    rows: Any  # the product of lead (a size expression)
    k: int
    n: int


def match_matmul(call: Any) -> MatmulSite | None:
    """The call as a dynamic matmul site, else None."""
    from tvm import ir, tirx

    if getattr(call.op, "name", "") != "relax.matmul" or len(call.args) != 2:
        return None
    x, w = call.args
    if not isinstance(w, ir.expr.GenericConst):
        return None
    w_shape = [int(d) for d in getattr(w.ty, "shape", None) or []]
    if len(w_shape) != 2 or str(w.ty.dtype) != "float32":
        return None
    shape = list(getattr(x.ty, "shape", None) or [])
    if len(shape) < 2 or str(x.ty.dtype) != "float32":
        return None
    lead, k = shape[:-1], shape[-1]
    if not isinstance(k, tirx.IntImm) or int(k) != w_shape[0] or all(isinstance(d, tirx.IntImm) for d in lead):
        return None
    rows = lead[0]
    for d in lead[1:]:
        rows = rows * d
    return MatmulSite(x, w, tuple(lead), rows, int(k), w_shape[1])


def analyzer(func: Any) -> Any:
    """An arithmetic analyzer knowing each symbolic input size's bounds (the export's Dim ranges)."""
    import tvm
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer  # tvm.arith in older TVM

    attrs = func.attrs or {}
    lower = {str(k): int(v) for k, v in attrs.get("tir_var_lower_bound", {}).items()}
    upper = {str(k): int(v) for k, v in attrs.get("tir_var_upper_bound", {}).items()}
    ana = Analyzer()
    for param in func.params:
        for dim in getattr(param.ty, "shape", None) or []:
            if isinstance(dim, tirx.Var):
                lo, hi = lower.get(dim.name, DEFAULT_BOUNDS[0]), upper.get(dim.name, DEFAULT_BOUNDS[1])
                ana.bind(dim, tvm.ir.Range(lo, hi + 1))
    return ana


def size_range(ana: Any, expr: Any) -> tuple[int, int]:
    """Bounds of a size expression (DEFAULT_BOUNDS where the analyzer knows none)."""
    b = ana.const_int_bound(expr)
    lo = int(b.min_value) if int(b.min_value) >= 1 else DEFAULT_BOUNDS[0]
    hi = int(b.max_value) if int(b.max_value) < 2**40 else DEFAULT_BOUNDS[1]
    return lo, max(lo, hi)


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


def dynamic_specs(mod: Any, target: dict) -> dict[tuple[int, int], tuple[DynamicSpec, int]]:
    """(N, K) -> the dynamic dense of the module's sites of that weight shape (their ranges' union) and its calls
    per inference."""
    ana = analyzer(mod["main"])
    found: dict[tuple[int, int], tuple[int, int, int]] = {}  # (n, k) -> lo, hi, calls

    def visit(call: Any) -> None:
        site = match_matmul(call)
        if site is not None:
            lo, hi = size_range(ana, site.rows)
            old = found.get((site.n, site.k))
            found[(site.n, site.k)] = (min(lo, old[0]), max(hi, old[1]), old[2] + 1) if old else (lo, hi, 1)

    visit_calls(mod, visit)
    return {(n, k): (parse_dynamic("dense", f"batch={lo}..{hi},in_features={k},out_features={n}", target=target),
                     calls)
            for (n, k), (lo, hi, calls) in found.items()}


def pieces_per_call(spec: DynamicSpec, heights: list[int]) -> dict[int, float]:
    """Height -> pieces of that uKernel one call takes, on average over sizes spread log-uniformly over the
    range (the planner's covers on the hardware model's predicted times)."""
    hw = hardware_model(spec.target)
    cost = op_cost(spec)
    planner = Planner(heights, [predict_time(hw, cost, h) for h in heights], pad_cost_fn(cost.row_bytes))
    sizes = sample_sizes(spec.lo, spec.hi)
    counts = dict.fromkeys(heights, 0.0)
    for m in sizes:
        for piece in planner.plan(m).pieces:
            counts[heights[piece.kernel]] += 1.0 / len(sizes)
    return counts


def ukernel_tasks(spec: DynamicSpec, calls: int, max_kernels: int = 3) -> list[tuple[Task, float]]:
    """(uKernel task, its pieces per inference: the mean over the range, a fraction where most sizes take none) of
    a site, tallest first; a uKernel few sampled sizes use still gets MIN_WEIGHT. A dense site's uKernels are tuned
    on the operator's default template (`ukernel_template_ref` is the same), as its static calls are."""
    heights = chosen_heights(rank_ukernels(spec, hardware_model(spec.target), max_kernels=max_kernels))
    pieces = pieces_per_call(spec, heights)
    return [(spec.task(h), max(MIN_WEIGHT, round(pieces[h] * calls, 2))) for h in heights]


def dynamic_tasks(program: Any, target: dict, name: str = "model") -> list[tuple[Task, float]]:
    """(task, weight) of every dynamic site's uKernels (a task two sites share: its weights summed), then of the
    program's calls of a static shape (`extract.find_sites`, as a static build finds them: weight = calls)."""
    from ..model.extract import find_sites, merge_sites

    mod = import_dynamic(program, name)
    merged: dict[Task, float] = {}
    for spec, calls in dynamic_specs(mod, target).values():
        for task, weight in ukernel_tasks(spec, calls):
            merged[task] = round(merged.get(task, 0.0) + weight, 2)
    static = [(task, weight) for task, weight in merge_sites(find_sites(mod, target)[0]) if task not in merged]
    return list(merged.items()) + static
