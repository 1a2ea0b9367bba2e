"""Build a model exported with a dynamic dimension (torch.export `Dim`): its linear layers and convolutions use
dynamic kernels.

Every dynamic site (`sites.py`: a matmul by a constant weight, its rows of a symbolic size, a convolution of a
symbolic image size among them as im2col; a conv2d of a symbolic batch) becomes a call to a dynamic kernel of its
operator: on the logs' uKernels for its shape, else on the shipped knowledge's configs or heuristic ones. The
kernel's compiled cover (`compiled.dispatch_func`) is added to the module and called with `R.call_tir`, the weight
(packed for each uKernel that takes it packed) and the plan table as constants. Products of two activations and
softmax over a symbolic size run on hand-written kernels (`symbolic_ops`). The rest of the model is legalized, fused
and scheduled as a static build's functions without a tuned kernel are. The module exports like a static build's.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..database import TuningDatabase
from ..errors import AutotuneError
from ..records import Record
from ..model.library import ThreadVMs, numpy_outputs, runtime_device
from ..operators import get_op
from ..thread_pool import load_executable
from ..target import (export_library, kernel_threads, parse_target, to_tvm_target,
                      use_target_threads, vector_unit)
from .compiled import build_context
from .dispatch import DynamicKernel, as_aligned
from .load import model_ukernels
from .fusion import fuse_dispatch_groups
from .inputs import SymbolicInput, assert_ranges, check_inputs, symbolic_inputs
from .symbolic_ops import rewrite_symbolic_ops
from ..model.rewrite import rewrite_calls
from .sites import dynamic_specs, import_dynamic, match_site
from .spec import DynamicSpec

@dataclass
class DynamicSite:
    """One dynamic layer of the model (a linear layer, a convolution) and where its uKernels' configs come from:
    "logs" (tuned), "shipped" (the shipped knowledge's, not tuned here), "heuristic", or the logs' and (for heights
    they lack) those."""

    spec: DynamicSpec
    source: str
    derived: tuple[int, ...] = ()  # heights of its uKernels derived from the others (`load.derived_ukernels`)
    fused: list[list[str]] = field(default_factory=list)  # per call fused with its epilogue: the epilogue's functions

    @property
    def tuned(self) -> bool:
        return self.source == "logs"

    def line(self) -> str:
        ops = ", ".join(dict.fromkeys(re.sub(r"\d+$", "", op) for ops in self.fused for op in ops))
        heights = [str(h) for h in self.derived]
        listed = " and ".join(filter(None, (", ".join(heights[:-1]), *heights[-1:])))
        derived = f"; {listed} row{'' if heights == ['1'] else 's'} derived from them" if heights else ""
        return self._line() + derived + (f" (the epilogue in their write-back: {ops})" if ops else "")

    def _line(self) -> str:
        if self.tuned:
            return f"dynamic  {self.spec}: uKernels from the logs"
        if self.source.startswith("logs"):
            return f"dynamic  {self.spec}: uKernels from the logs, the heights they lack on " \
                   f"{self.source.removeprefix('logs and ')} configs"
        return f"dynamic  {self.spec}: uKernels on {self.source} configs, not tuned (tune it: autotune " \
               f"tune-model, or autotune tune {self.spec.op} --shape {self.spec.dim}={self.spec.lo}..{self.spec.hi}," \
               f"{','.join(f'{k}={v}' for k, v in self.spec.fixed)} --dynamic)"


@dataclass
class DynamicBuiltModel:
    """A compiled model with symbolic input sizes; call it on numpy arrays or torch tensors."""

    name: str
    executable: Any
    sites: list[DynamicSite]
    static: Any = None  # the BuildReport of its calls of a static shape (each a task, as in a static build)
    inputs: tuple[SymbolicInput, ...] = ()  # what it takes (the guard, `inputs.check_inputs`)
    threads: int = 1  # CPU threads of its parallel loops (the target's, see `target.kernel_threads`)
    symbolic: dict[str, int] = field(default_factory=dict)  # hand-written kernel -> calls (`symbolic_ops`)
    target: dict = field(default_factory=dict)  # the target dict it was built for
    _vms: Any = None

    @property
    def report(self) -> DynamicBuiltModel:
        """What `autotune build` prints (`report.summary()`), as for a static build."""
        return self

    def export_library(self, path: str | os.PathLike) -> None:
        export_library(self.executable, path, self.target)

    def summary(self) -> str:
        tuned = sum(s.tuned for s in self.sites)
        lines = [f"{tuned} of {len(self.sites)} dynamic layers use tuned uKernels" if self.sites
                 else "no dynamic layer (no linear layer's rows or convolution's batch vary)"]
        lines += ["  " + s.line() for s in self.sites]
        if self.symbolic:
            lines.append("walking a symbolic size: " + ", ".join(f"{n} calls on {k}" for k, n in self.symbolic.items()))
        if self.static is not None and self.static.kernels:
            lines += ["calls of a static shape: " + self.static.summary()]
        return "\n".join(lines)

    @property
    def device(self) -> str:
        """Where it runs: "cpu" (llvm) or "cuda"."""
        return "cuda" if self.target.get("kind") == "cuda" else "cpu"

    def tvm_args(self, *args: Any) -> list[Any]:
        """Inputs (numpy arrays or torch tensors) checked against the guard and copied to TVM tensors on the
        model's device."""
        import tvm

        arrays = [as_aligned(a, None) for a in args]
        check_inputs(self.inputs, arrays, self.name)
        dev = runtime_device(self.device, self.target, self.name)
        return [tvm.runtime.tensor(a, dev) for a in arrays]

    def vms(self) -> ThreadVMs:
        """Its virtual machines, one per calling thread; on the CPU its kernels' parallel loops run on the OpenMP
        pool, as a static build's do (`thread_pool`)."""
        if self._vms is None:
            dev = runtime_device(self.device, self.target, self.name)
            code = load_executable(self.executable, self.threads) if self.device == "cpu" else self.executable
            self._vms = ThreadVMs(code, dev)
        return self._vms

    def run_tvm(self, tvm_args: Sequence[Any]) -> Any:
        """Run on prepared TVM tensors (for timing); returns TVM's output object."""
        return self.vms().main()(*tvm_args)

    def __call__(self, *args: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        flat = numpy_outputs(self.run_tvm(self.tvm_args(*args)))
        return flat[0] if len(flat) == 1 else tuple(flat)


def rewrite_sites(mod: Any, target: dict, records: TuningDatabase, shipped: bool = True,
                  fuse: bool = True) -> tuple[Any, list[DynamicSite], dict[str, DynamicKernel]]:
    """Replace each dynamic site's call (`sites.match_site`) by a call to its dynamic kernel: on the records'
    uKernels, else on the shipped knowledge's configs (`shipped`) or heuristic ones. Returns the module, the
    sites and the dispatchers by function name; where `fuse`, each dispatcher has a tuned kernel's pattern, so that
    FuseOps groups it with its epilogue (`fusion.fuse_dispatch_groups`)."""
    from tvm import relax, tirx

    from ..model.epilogue import OUT_EWISE_FUSABLE

    specs = dynamic_specs(mod, target)
    sites: list[DynamicSite] = []
    kernels: dict[tuple, DynamicKernel] = {}  # site key -> its kernel
    gvars: dict[tuple, Any] = {}  # (site key, fusable) -> the GlobalVar of its dispatcher

    def kernel_of(key: tuple, builder: Any, fusable: bool) -> tuple[Any, DynamicKernel]:
        """The compiled cover's GlobalVar in the module (`fusable`: one FuseOps may group with its epilogue) and
        its kernel."""
        if key not in kernels:
            spec = specs[key][0]
            found = model_ukernels(spec, records, shipped)
            sites.append(DynamicSite(spec, found.source, found.derived))
            kernels[key] = DynamicKernel(spec, found.ukernels)
        if (key, fusable) not in gvars:
            spec, func = kernels[key].spec, kernels[key].func.without_attr("global_symbol")
            name = "dynamic_" + "_".join([spec.op, *(f"{k}{v}" for k, v in spec.fixed)])
            gvars[key, fusable] = builder.add_func(func.with_attr("op_pattern", OUT_EWISE_FUSABLE) if fusable
                                                   else func, name)
        return gvars[key, fusable], kernels[key]

    def rewrite(builder: Any, call: Any, lookup: Any) -> Any | None:
        site = match_site(call)
        if site is None:
            return None
        # fused with its epilogue where its rows are one symbolic size (`fusion`: bound to each height)
        gv, kernel = kernel_of(site.key, builder, fuse and isinstance(site.rows, tirx.Var))
        weight = site.weight_array()
        fixed = [relax.const(u.fixed_operand(i, weight)) for u, f in zip(kernel.ukernels, kernel.params.fixed)
                 for i, _ in f]
        x = site.x
        if len(site.lead) > 1:  # dense over the product of x's leading dimensions
            x = builder.emit(relax.op.reshape(x, [site.rows, x.ty.shape[-1]]))
        params = {**dict(kernel.spec.fixed), kernel.spec.dim: site.rows}
        shape = list(get_op(kernel.spec.op).output_shape(params))
        table = [] if kernel.params.table is None else [relax.const(kernel.table)]  # on a GPU: in the code
        out = relax.call_tir(gv, [x, *fixed, *table], relax.TensorType(shape, "float32"))
        if len(site.lead) > 1:
            return relax.op.reshape(builder.emit(out), [*site.lead, shape[-1]])
        return out

    mod = rewrite_calls(mod, rewrite)
    by_name = {gv.name_hint: kernels[key] for (key, _), gv in gvars.items()}
    return mod, sites, by_name


def build_dynamic_model(program: Any, logs: Sequence[str | os.PathLike] = (), target: str | dict = "llvm",
                        records: TuningDatabase | Sequence[Record] | None = None,
                        name: str = "model", shipped: bool = True) -> DynamicBuiltModel:
    """Compile an ExportedProgram with symbolic sizes; its dynamic layers use the uKernels in the logs (else the
    shipped knowledge's configs where `shipped`, else heuristic ones)."""
    from ..model.build import compile_lowered, lower_relax
    from ..model.capture import decomposed
    from ..shipped import Knowledge

    program = decomposed(program, name)  # once: both builds below import it
    tgt = parse_target(target)
    gpu = tgt["kind"] == "cuda"
    use_target_threads(tgt)
    recs = TuningDatabase.of(records) if records is not None else TuningDatabase.open(logs)
    knowledge = Knowledge.load(tgt) if shipped else None

    def built(fuse: bool) -> tuple[Any, list[DynamicSite], dict[str, int], Any]:
        """(executable, sites, hand-written kernel calls, the static calls' report)."""
        mod, sites, dispatchers = rewrite_sites(assert_ranges(import_dynamic(program, name)), tgt, recs, shipped, fuse)
        # on a GPU, DLight's rules schedule attention's symbolic loop nests (they are written for them)
        mod, symbolic = (mod, {}) if gpu else rewrite_symbolic_ops(mod, vector_unit(tgt)[0])
        epilogues: dict[str, list[list[str]]] = {}  # dispatcher -> the epilogue of each call fused into it
        regroup = (lambda rest, vectorize: fuse_dispatch_groups(dispatchers, rest, vectorize, epilogues)) \
            if fuse else None
        # its calls of a static shape on their tasks' kernels, the rest legalized, fused and on the default schedules
        mod, static = lower_relax(mod, tgt, recs, knowledge=knowledge, regroup=regroup)
        for dispatcher, ops in epilogues.items():
            spec = dispatchers[dispatcher].spec
            next(site for site in sites if site.spec == spec).fused.extend(ops)
        with build_context(gpu):
            return compile_lowered(mod, to_tvm_target(tgt)), sites, symbolic, static

    try:
        executable, sites, symbolic, static = built(fuse=True)
    except AutotuneError:
        raise
    except Exception as err:  # noqa: BLE001 - TVM refused a fused group: the unfused build is the known-good one
        warnings.warn(f"dynamic kernels' epilogue fusion failed ({type(err).__name__}: "
                      f"{str(err).strip().splitlines()[-1][:200] if str(err).strip() else ''}); built unfused",
                      stacklevel=2)
        executable, sites, symbolic, static = built(fuse=False)
    return DynamicBuiltModel(name, executable, sites, static, symbolic_inputs(program), kernel_threads(tgt),
                             symbolic, tgt)
