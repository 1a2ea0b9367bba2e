"""The dynamic sites of a model exported with a symbolic size (torch.export `Dim`), and the tasks that tune them.

A site is a call of a tunable operator whose weight is a constant and whose activation has a symbolic leading
size, its range from the export's `Dim` bounds (`SITE_MATCHERS`):
- `matmul(x, W)`, W a constant [K, N] (a linear layer's weight, transposed), x with a symbolic size in its leading
  dimensions: a dynamic `dense` (x times the weight [N, K], transposed) over batch = the product of those
  dimensions, as a static build extracts a linear layer (its template packs the weight once, at build time);
- `conv2d(x, W)` (NCHW, one group) whose batch N is symbolic and image static: a dynamic `conv2d` over N; one
  whose image height or width is symbolic is im2col and a `matmul` by its weight by then (`import_dynamic`,
  `im2col.lower_symbolic_convs`): a dense site over its output pixels.
Sites of the same static parameters share one dynamic kernel (the union of their ranges).

To tune them within a model's budget, each site becomes static tasks of its chosen uKernels (the analytic
ranking, `ukernels.rank_ukernels`; on a CPU the tallest only, the build derives the others from it), weighted by
the site's time over the range (sizes spread log-uniformly, the planner's covers on predicted times) times its
calls: the task scheduler then spends trials where they cut the model's time over the range most.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..hardware import hardware_model
from ..model.rewrite import visit_calls
from ..operators import get_op
from ..task import Task
from .compose import Planner
from .spec import DynamicSpec, parse_dynamic, within_limits
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
    """The Relax module of an ExportedProgram with symbolic sizes, imported as a static model's is
    (`capture.decomposed`, `capture.to_relax`), constants folded (a transposed weight becomes a constant),
    convolutions of a symbolic image size as im2col and a dense (`im2col.lower_symbolic_convs`)."""
    from tvm import relax

    from ..model.capture import decomposed, to_relax
    from .im2col import lower_symbolic_convs

    return lower_symbolic_convs(relax.transform.FoldConstant()(to_relax(decomposed(program, name), name)))


@dataclass(frozen=True)
class DynamicCall:
    """One call of a dynamic site: an operator (`dense`, `conv2d`) whose first input's leading size is symbolic,
    its other input a constant weight."""

    op: str
    fixed: tuple[tuple[str, int], ...]  # the operator's static parameters
    x: Any  # the activation: dense's x [*lead, K], conv2d's [N, C, H, W]
    weight: Any  # the Relax constant: matmul's B [K, N] (the weight transposed), conv2d's [K, C, R, S]
    rows: Any  # the dynamic parameter's size expression (dense: the product of lead; conv2d: N)
    lead: tuple[Any, ...] = ()  # dense: x's leading dimensions, flattened to rows for the kernel

    @property
    def key(self) -> tuple[str, tuple[tuple[str, int], ...]]:
        return self.op, self.fixed

    def weight_array(self) -> np.ndarray:
        """The weight as the operator takes it (dense: [N, K])."""
        w = self.weight.value.numpy()
        return np.ascontiguousarray(w.T) if self.op == "dense" else w


def _static(dims: Any) -> list[int] | None:
    from tvm import tirx

    return [int(d) for d in dims] if all(isinstance(d, tirx.IntImm) for d in dims) else None


def flat_size(dims: Any) -> Any:
    """The product of sizes (symbolic ones too; 1 for none): the rows of leading dimensions flattened."""
    size = dims[0] if len(dims) else 1
    for d in list(dims)[1:]:
        size = size * d
    return size


def match_dense(call: Any) -> DynamicCall | None:
    """matmul(x [*lead, K], constant [K, N]) with a symbolic size in lead: a dynamic dense over their product."""
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
    return DynamicCall("dense", (("in_features", int(k)), ("out_features", w_shape[1])), x, w, flat_size(lead),
                       tuple(lead))


def match_conv2d(call: Any) -> DynamicCall | None:
    """conv2d(x [N, C, H, W], constant [K, C, R, S]), NCHW, one group, N symbolic and the rest static, the same
    stride, padding and dilation along both axes: a dynamic conv2d over N."""
    from tvm import ir

    if getattr(call.op, "name", "") != "relax.nn.conv2d" or len(call.args) != 2:
        return None
    x, w = call.args
    a = call.attrs
    if not isinstance(w, ir.expr.GenericConst) or str(x.ty.dtype) != "float32" or str(w.ty.dtype) != "float32":
        return None
    shape, w_shape = list(getattr(x.ty, "shape", None) or []), _static(getattr(w.ty, "shape", None) or [])
    if len(shape) != 4 or w_shape is None or _static(shape[:1]) is not None or _static(shape[1:]) is None:
        return None
    if (str(a.data_layout), str(a.kernel_layout), int(a.groups)) != ("NCHW", "OIHW", 1):
        return None
    strides, padding, dilation = ([int(v) for v in vals] for vals in (a.strides, a.padding, a.dilation))
    if len(set(strides)) != 1 or len(set(padding)) != 1 or len(set(dilation)) != 1:
        return None
    c, h, wd = _static(shape[1:])
    k, _, r, sz = w_shape
    fixed = (("C", c), ("H", h), ("W", wd), ("K", k), ("R", r), ("S", sz), ("stride", strides[0]),
             ("padding", padding[0]), ("dilation", dilation[0]))
    return DynamicCall("conv2d", fixed, x, w, shape[0])


SITE_MATCHERS = (match_dense, match_conv2d)


def match_site(call: Any) -> DynamicCall | None:
    """The call as a dynamic site (the first of `SITE_MATCHERS` that takes it), else None."""
    return next((site for site in (m(call) for m in SITE_MATCHERS) if site is not None), None)


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


def dynamic_specs(mod: Any, target: dict) -> dict[tuple, tuple[DynamicSpec, int]]:
    """`DynamicCall.key` -> the dynamic operator of the module's sites of that key (their ranges' union) and its
    calls per inference."""
    ana = analyzer(mod["main"])
    found: dict[tuple, tuple[int, int, int]] = {}  # key -> lo, hi, calls

    def visit(call: Any) -> None:
        site = match_site(call)
        if site is not None:
            lo, hi = size_range(ana, site.rows)
            old = found.get(site.key)
            found[site.key] = (min(lo, old[0]), max(hi, old[1]), old[2] + 1) if old else (lo, hi, 1)

    visit_calls(mod, visit)
    out = {}
    for (op, fixed), (lo, hi, calls) in found.items():
        dim = get_op(op).row_split.param
        hi = max(lo, within_limits(op, dict(fixed), dim, hi))
        text = ",".join([f"{dim}={lo}..{hi}", *(f"{k}={v}" for k, v in fixed)])
        out[(op, fixed)] = (parse_dynamic(op, text, target=target), calls)
    return out


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
    """(uKernel task, its weight) of a site, tallest first. On a CPU, the tallest chosen uKernel only: the build
    derives the others from its config (`load.model_ukernels`; tuned on their own with a model's small budget,
    each found the tallest's panels and tiles, for three times the fixed costs of a task), and its weight is the
    site's time per inference in calls of it (each height's pieces per call, the mean over the range, times its
    predicted time over the tallest's). On a GPU, each chosen uKernel, weighted by its pieces per inference (a
    fraction where most sizes take none). A weight is at least MIN_WEIGHT. A dense site's uKernels are tuned on
    the operator's default template (`ukernel_template_ref` is the same), as its static calls are."""
    hw = hardware_model(spec.target)
    heights = chosen_heights(rank_ukernels(spec, hw, max_kernels=max_kernels))
    pieces = pieces_per_call(spec, heights)
    if spec.target.get("kind") == "llvm":
        cost = op_cost(spec)
        tallest = predict_time(hw, cost, heights[0])
        calls_of_tallest = sum(n * predict_time(hw, cost, h) / tallest for h, n in pieces.items())
        return [(spec.task(heights[0]), max(MIN_WEIGHT, round(calls_of_tallest * calls, 2)))]
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
