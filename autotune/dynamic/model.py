"""Build a model exported with a dynamic dimension (torch.export `Dim`): its matmuls use dynamic kernels.

Every `matmul(x, W)` whose weight W is a constant [K, N] and whose input x has a symbolic size in
its leading dimensions becomes a call to a dynamic kernel over M = product of those dimensions
(bounds from the export's `Dim` ranges), when the logs hold uKernels for that (N, K). The call goes
through a packed function registered in this process (`R.call_dps_packed`), which runs the kernel
on zero-copy numpy views of the VM's tensors. Everything else is left to TVM's default lowering.
The built model therefore runs in this process only (no export_library).
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..database import TuningDatabase
from ..errors import AutotuneError
from ..records import Record
from ..model.library import numpy_outputs
from ..target import parse_target, to_tvm_target, use_target_threads
from .dispatch import DynamicKernel, as_aligned
from .load import compile_ukernels, ukernel_records
from .spec import DynamicSpec, parse_dynamic

DEFAULT_BOUNDS = (1, 4096)  # a symbolic size without bounds
_counter = itertools.count()


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


@dataclass
class DynamicSite:
    """One rewritten matmul: its dynamic operator and whether tuned uKernels were found."""

    spec: DynamicSpec
    tuned: bool
    reason: str = ""

    def line(self) -> str:
        if self.tuned:
            return f"dynamic  {self.spec}: uKernels from the logs"
        return f"default  {self.spec}: {self.reason} (tune it: autotune tune matmul --shape " \
               f"{self.spec.dim}={self.spec.lo}..{self.spec.hi},{','.join(f'{k}={v}' for k, v in self.spec.fixed)} " \
               f"--dynamic)"


@dataclass
class DynamicBuiltModel:
    """A compiled model with symbolic input sizes; call it on numpy arrays or torch tensors."""

    name: str
    executable: Any
    sites: list[DynamicSite]
    kernels: dict[str, DynamicKernel] = field(default_factory=dict)  # packed-function name -> kernel
    _vm: Any = None

    @property
    def report(self) -> DynamicBuiltModel:
        """What `autotune build` prints (`report.summary()`), as for a static build."""
        return self

    def export_library(self, path: str | os.PathLike) -> None:
        raise AutotuneError(f"{self.name} calls its dynamic kernels back in this process; it cannot be exported "
                            f"to {path} (use autotune.model.build_model(...) from Python)")

    def summary(self) -> str:
        tuned = sum(s.tuned for s in self.sites)
        return "\n".join([f"{tuned} of {len(self.sites)} dynamic matmuls use tuned uKernels"]
                         + ["  " + s.line() for s in self.sites])

    def __call__(self, *args: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        import tvm
        from tvm import relax

        if self._vm is None:
            self._vm = relax.VirtualMachine(self.executable, tvm.cpu())
        arrays = [as_aligned(a) for a in args]
        out = self._vm["main"](*[tvm.runtime.tensor(a, tvm.cpu()) for a in arrays])
        flat = numpy_outputs(out)
        return flat[0] if len(flat) == 1 else tuple(flat)



def _analyzer(func: Any) -> Any:
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


def _range(ana: Any, expr: Any) -> tuple[int, int]:
    """Bounds of a size expression (DEFAULT_BOUNDS where the analyzer knows none)."""
    b = ana.const_int_bound(expr)
    lo = int(b.min_value) if int(b.min_value) >= 1 else DEFAULT_BOUNDS[0]
    hi = int(b.max_value) if int(b.max_value) < 2**40 else DEFAULT_BOUNDS[1]
    return lo, max(lo, hi)


def _register(kernel: DynamicKernel) -> str:
    """A global packed function running `kernel` on (a, b, out) TVM tensors; returns its name."""
    import tvm

    name = f"autotune.dynamic.k{next(_counter)}"

    def run(a: Any, b: Any, out: Any) -> None:
        kernel.run(np.from_dlpack(a), np.from_dlpack(b), np.from_dlpack(out))

    tvm.register_global_func(name, run, override=True)
    return name


def rewrite_matmuls(mod: Any, target: dict, records: TuningDatabase) -> tuple[Any, list[DynamicSite],
                                                                                   dict[str, DynamicKernel]]:
    """Replace each dynamic matmul by a call to its dynamic kernel (when the records tune it)."""
    from tvm import ir, relax, tirx
    from tvm.relax.expr_functor import PyExprMutator, mutator

    ana = _analyzer(mod["main"])
    sites: list[DynamicSite] = []
    kernels: dict[str, DynamicKernel] = {}
    by_fixed: dict[tuple[int, int], str | None] = {}

    def kernel_name(n: int, k: int, lo: int, hi: int) -> str | None:
        if (n, k) not in by_fixed:
            spec = parse_dynamic("matmul", f"M={lo}..{hi},N={n},K={k}", target=target)
            best = ukernel_records(spec, records)
            if best:
                kernel = DynamicKernel(spec, compile_ukernels(spec, best))
                name = _register(kernel)
                kernels[name] = kernel
                sites.append(DynamicSite(spec, True))
            else:
                name = None
                sites.append(DynamicSite(spec, False, "no uKernel records in the logs"))
            by_fixed[(n, k)] = name
        return by_fixed[(n, k)]

    @mutator
    class _Rewriter(PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.matmul" or len(call.args) != 2:
                return call
            x, w = call.args
            w_shape = [int(d) for d in getattr(w.ty, "shape", None) or []]
            if not isinstance(w, ir.expr.GenericConst) or len(w_shape) != 2 or str(w.ty.dtype) != "float32":
                return call
            shape = list(getattr(x.ty, "shape", None) or [])
            if len(shape) < 2 or str(x.ty.dtype) != "float32":
                return call
            lead, k = shape[:-1], shape[-1]
            if not isinstance(k, tirx.IntImm) or int(k) != w_shape[0]:
                return call
            if all(isinstance(d, tirx.IntImm) for d in lead):
                return call
            rows = lead[0]
            for d in lead[1:]:
                rows = rows * d
            n = w_shape[1]
            name = kernel_name(n, int(k), *_range(ana, rows))
            if name is None:
                return call
            x2 = self.builder_.emit(relax.op.reshape(x, [rows, k])) if len(lead) > 1 else x
            out = self.builder_.emit(relax.call_dps_packed(name, [x2, w], relax.TensorType([rows, n], "float32")))
            return relax.op.reshape(out, [*lead, n]) if len(lead) > 1 else out

    rewriter = _Rewriter(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get(), sites, kernels


def build_dynamic_model(program: Any, logs: Sequence[str | os.PathLike] = (), target: str | dict = "llvm",
                        records: TuningDatabase | Sequence[Record] | None = None,
                        name: str = "model") -> DynamicBuiltModel:
    """Compile an ExportedProgram with symbolic sizes; its dynamic matmuls use the uKernels in the logs."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from ..model.fold import fold_batch_norms

    tgt = parse_target(target)
    if tgt["kind"] != "llvm":
        raise AutotuneError("dynamic model builds run on the CPU (llvm) only")
    use_target_threads(tgt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            mod = from_exported_program(program, keep_params_as_input=False)
        except Exception as err:  # noqa: BLE001 - any importer failure becomes one line
            raise AutotuneError(f"TVM cannot import {name}: {type(err).__name__}: "
                                f"{str(err).splitlines()[0] if str(err) else ''}") from None
    recs = TuningDatabase.of(records) if records is not None else TuningDatabase.open(logs)
    mod = relax.transform.FoldConstant()(fold_batch_norms(mod))  # transposed weights become constants
    mod, sites, kernels = rewrite_matmuls(mod, tgt, recs)
    executable = tvm.compile(mod, target=to_tvm_target(tgt))
    return DynamicBuiltModel(name, executable, sites, kernels)
