"""Build a captured model with autotune's kernels: tuned ones from logs, default schedules elsewhere.

Pipeline: replace every tunable Relax call by a call_tir to autotune's own scheduled PrimFunc
(pattern kOutEWiseFusable: FuseOps fuses the elementwise ops after it, see `epilogue`) -> elementwise ops moved
above unit-dimension reshapes of its output (`reshapes`) -> activations expanded into exp / erf / tanh
(`activations`) -> their fast approximations (FastMathTransform) -> LegalizeOps ->
AnnotateTIROpPattern -> FoldConstant -> FuseOps -> int32 epilogues -> FuseTIR -> each kernel's epilogue
inlined into its write-back, generic schedules for the remaining functions -> compile -> VM.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..database import TuningDatabase
from ..errors import AutotuneError
from ..gpu_limits import check_config
from ..records import Record
from ..shipped import Knowledge, ShippedConfig, shipped_enabled
from ..space import Config
from ..target import (export_library, kernel_threads, to_tvm_target, use_target_threads,
                      vector_unit)
from ..task import Task
from ..templates import default_template, resolve, space_of
from ..thread_pool import load_executable
from .activations import expand_activations
from .capture import Captured, InputSpec, capture, to_numpy
from .default_schedule import default_template_func, generic_schedule, schedule_block, vectorize_with_tail
from .epilogue import mark_kernel, narrow_epilogues, schedule_fused
from .extract import Site, classify, find_sites, merge_sites, product_call, resolve_target
from .gpu_schedule import bind_block, gpu_generic_schedule
from .library import ThreadVMs, numpy_outputs, runtime_device
from .reshapes import sink_reshapes
from .rewrite import visit_functions
from .shipped_check import Contest, Verdict, measurable_here, verdicts


@dataclass(frozen=True)
class KernelChoice:
    """Which schedule a task got, and why."""

    task: Task
    weight: int
    tuned: bool
    config_index: int
    gflops: float = 0.0  # from the log, when tuned
    reason: str = ""  # why the default schedule was used
    shipped: str = ""  # where its shipped config came from (`ShippedConfig.describe`), when it has one
    nearest: bool = False  # its shipped config is another task's, mapped onto this one's space
    vs_heuristic: float = 0.0  # that config's speed over the heuristic one's, measured at build (0: not measured)

    def line(self) -> str:
        head = f"{self.task} x{self.weight}"
        if self.tuned:
            return f"tuned    {head}: config #{self.config_index}, {self.gflops:.1f} GFLOPS in the log"
        if self.shipped:
            measured = f"; {Verdict(self.vs_heuristic).describe()}" if self.vs_heuristic else ""
            return f"shipped  {head}: config #{self.config_index} of {self.shipped} ({self.reason}{measured})"
        return f"default  {head}: heuristic config #{self.config_index} ({self.reason})"


@dataclass
class BuildReport:
    kernels: list[KernelChoice] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # tunable-kind calls left to TVM
    generic: dict[str, str] = field(default_factory=dict)  # other PrimFunc -> schedule used
    fusion: str = "on"  # epilogue fusion: "on", or "off (why)" when TVM refused it and the build went without

    def summary(self) -> str:
        tuned = sum(k.tuned for k in self.kernels)
        shipped = sum(bool(k.shipped) for k in self.kernels)
        lines = [f"{tuned} of {len(self.kernels)} tasks tuned from logs, "
                 + (f"{shipped} from shipped knowledge, " if shipped else "")
                 + f"{len(self.kernels) - tuned - shipped} default"]
        lines += ["  " + k.line() for k in self.kernels]
        lines += [f"  left to TVM: {s}" for s in self.skipped]
        counts: dict[str, int] = {}
        for how in self.generic.values():
            counts[how] = counts.get(how, 0) + 1
        if self.fusion != "on":
            lines.append(f"  epilogue fusion {self.fusion}")
        lines.append(f"  other functions: {len(self.generic)} ("
                     + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + ")")
        return "\n".join(lines)


@dataclass
class BuiltModel:
    """A compiled model; call it on numpy arrays or torch tensors of the captured shapes."""

    name: str
    inputs: tuple[InputSpec, ...]
    executable: Any
    report: BuildReport
    device: str = "cpu"  # where it runs: "cpu" (llvm) or "cuda"
    threads: int = 1  # CPU threads of its parallel loops (the target's, see `target.kernel_threads`)
    target: dict = field(default_factory=dict)  # the target dict it was built for
    _vms: ThreadVMs | None = None

    def _check(self, args: Sequence[Any]) -> list[np.ndarray]:
        arrays = [np.asarray(to_numpy(a) if hasattr(a, "detach") else a) for a in args]
        got = [(tuple(a.shape), str(a.dtype)) for a in arrays]
        want = [(s.shape, s.dtype) for s in self.inputs]
        if got != want:
            raise AutotuneError(f"{self.name} was captured for inputs {_fmt(want)}; got {_fmt(got)} "
                                "(re-capture the model for other shapes)")
        return [np.ascontiguousarray(a) for a in arrays]

    def tvm_device(self) -> Any:
        return runtime_device(self.device, self.target, self.name)

    def vms(self) -> ThreadVMs:
        """Its virtual machines, one per calling thread (CPU kernels on the OpenMP pool, `thread_pool`)."""
        if self._vms is None:
            code = load_executable(self.executable, self.threads) if self.device == "cpu" else self.executable
            self._vms = ThreadVMs(code, self.tvm_device())
        return self._vms

    def vm(self) -> Any:
        """This thread's Relax virtual machine."""
        return self.vms().vm()

    def tvm_args(self, *args: Any) -> list[Any]:
        """Inputs checked against the guard and copied to TVM tensors on the model's device."""
        import tvm

        dev = self.tvm_device()
        return [tvm.runtime.tensor(a, dev) for a in self._check(args)]

    def run_tvm(self, tvm_args: Sequence[Any]) -> Any:
        """Run on prepared TVM tensors (for timing); returns TVM's output object."""
        return self.vms().main()(*tvm_args)

    def __call__(self, *args: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        outs = numpy_outputs(self.run_tvm(self.tvm_args(*args)))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def export_library(self, path: str | os.PathLike) -> None:
        export_library(self.executable, path, self.target)


def _fmt(specs: Iterable[tuple[tuple[int, ...], str]]) -> str:
    return ", ".join(f"{list(s)} {d}" for s, d in specs)



# ---- choosing kernels ---------------------------------------------------------------------

@dataclass(frozen=True)
class ModelKernel:
    """The scheduled PrimFunc of one task, and the template config it comes from."""

    func: Any
    template: Any
    config: Config

    def operand(self, task: Task, arg: int, expr: Any, emit: Callable[[Any], Any]) -> Any:
        """Operand `arg` as the kernel takes it: a constant (a layer's weight) relaid now, at build time, into a
        new Relax constant; any other expression relaid by a layout_transform the model runs (`emit`s)."""
        from tvm import ir, relax

        relayout = next((r for r in self.template.relayouts(task, self.config) if r.arg == arg), None)
        if relayout is None:
            return expr
        if isinstance(expr, ir.Constant):
            inputs: list[Any] = [None] * len(task.opdef.input_shapes(task.shape))
            inputs[arg] = expr.value.numpy()
            return relax.const(self.template.kernel_inputs(task, self.config, inputs)[arg])
        return emit(relax.op.layout_transform(expr, relayout.index_map))


def kernel_for(task: Task, weight: int, best: dict[str, Record], stale: set[str],
               knowledge: Knowledge | None = None) -> tuple[ModelKernel, KernelChoice]:
    """Autotune's kernel for a task: the best logged config, else the shipped knowledge's (`knowledge`), else the
    heuristic default."""
    rec = best.get(task.key)
    reason = "no valid record in the logs"
    if task.key in stale and rec is None:
        reason = "records only from another template version"
    if rec is not None:
        tmpl = resolve(rec.input.template)
        try:
            cfg = space_of(tmpl, task).get(rec.input.config.index)
            func = tmpl.kernel(task, cfg)["main"]
            return ModelKernel(func, tmpl, cfg), KernelChoice(task, weight, True, cfg.index, rec.gflops())
        except Exception as err:  # noqa: BLE001 - a logged config the template no longer accepts
            reason = f"logged config #{rec.input.config.index} failed to apply ({type(err).__name__})"
    tmpl = default_template(task)
    shipped = _shipped_kernel(tmpl, task, knowledge) if knowledge is not None else None
    if shipped is not None:
        kernel, source = shipped
        return kernel, KernelChoice(task, weight, False, kernel.config.index, 0.0, reason, source.describe(),
                                    not source.exact)
    func, cfg = default_template_func(tmpl, task)
    return ModelKernel(func, tmpl, cfg), KernelChoice(task, weight, False, cfg.index, 0.0, reason)


def _shipped_kernel(tmpl: Any, task: Task, knowledge: Knowledge) -> tuple[ModelKernel, ShippedConfig] | None:
    """(kernel, the shipped config and where it came from) of the shipped knowledge's config for `task`, None where
    it has none or the target cannot run it (a GPU's limits, a schedule the template refuses)."""
    shipped = knowledge.config_for(task, space_of(tmpl, task))
    if shipped is None or (task.target_kind == "cuda" and check_config(task, tmpl, shipped.config) is not None):
        return None
    try:
        return ModelKernel(tmpl.kernel(task, shipped.config)["main"], tmpl, shipped.config), shipped
    except Exception:  # noqa: BLE001 - a config mapped from another task that this one's schedule refuses
        return None


def check_nearest_shipped(kernels: dict[str, ModelKernel], choices: list[KernelChoice]) -> list[KernelChoice]:
    """The choices after each nearest task's shipped config was measured against the heuristic config
    (`shipped_check`): the heuristic kernel replaces a shipped one that ran slower (in `kernels` too)."""
    contests, heuristics = {}, {}
    for i, choice in enumerate(choices):
        if choice.shipped and choice.nearest:
            tmpl = default_template(choice.task)
            func, cfg = default_template_func(tmpl, choice.task)
            if cfg.index != choice.config_index:
                contests[i] = Contest(choice.task, kernels[choice.task.key].config, cfg)
                heuristics[i] = ModelKernel(func, tmpl, cfg)
    out = list(choices)
    for i, verdict in zip(contests, verdicts(list(contests.values()))):
        choice = choices[i]
        if verdict.keeps_shipped:
            out[i] = dataclasses.replace(choice, vs_heuristic=verdict.speedup)
            continue
        kernels[choice.task.key] = heuristics[i]
        why = f"{choice.reason}; config #{choice.config_index} of {choice.shipped} {verdict.describe()}"
        out[i] = KernelChoice(choice.task, choice.weight, False, heuristics[i].config.index, 0.0, why)
    return out


# ---- rewriting the Relax module -----------------------------------------------------------

def _replace_calls(mod: Any, target: dict, kernels: dict[str, ModelKernel], fuse: bool = True) -> Any:
    """Replace each tunable call by call_tir of its task's kernel (reshaping operands as needed; a constant
    weight a kernel takes packed, dense's or conv2d's, is relaid here, once, into the layout it reads)."""
    from tvm import ir, relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    step_ops = {"reshape": relax.op.reshape, "pad": relax.op.nn.pad, "permute": relax.op.permute_dims,
                "crop": lambda x, axes, begin, end: relax.op.strided_slice(x, axes=axes, begin=begin, end=end)}

    @mutator
    class _Rewriter(PyExprMutator):
        def __init__(self, module: Any):
            super().__init__(module)
            self.gvars: dict[str, Any] = {}

        def _gvar(self, task: Task) -> Any:
            if task.key not in self.gvars:
                name = f"autotune_{task.op}_{len(self.gvars)}"
                # private (no global symbol): DeadCodeElimination drops it once FuseTIR has copied it into a group
                func = mark_kernel(kernels[task.key].func, fuse).without_attr("global_symbol")
                self.gvars[task.key] = self.builder_.add_func(func, name)
            return self.gvars[task.key]

        def _as(self, expr: Any, shape: tuple[int, ...]) -> Any:
            if tuple(int(d) for d in expr.ty.shape) == shape:
                return expr
            if isinstance(expr, ir.Constant):  # a weight: reshaped now, so it is still a constant to relay out
                return relax.const(expr.value.numpy().reshape(shape))
            return self.builder_.emit(relax.op.reshape(expr, shape))

        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            site = classify(call, target, self.lookup_binding)
            if not isinstance(site, Site):
                return call
            product, _ = product_call(call, self.lookup_binding)
            b = site.weight if site.weight is not None else self._as(product.args[1], site.b_shape)
            a = self._as(self._steps(product.args[0], site.data_steps), site.a_shape)
            args = [a,
                    kernels[site.task.key].operand(site.task, 1, b, self.builder_.emit)]
            shape = tuple(int(d) for d in site.task.opdef.output_shape(site.task.shape))
            out = relax.call_tir(self._gvar(site.task), args, relax.TensorType(shape, site.task.element.output))
            if site.out_steps:
                out = self._steps(self.builder_.emit(out), site.out_steps)
                shape = tuple(int(d) for d in out.ty.shape)
            if shape != site.out_shape:
                out = relax.op.reshape(self.builder_.emit(out), site.out_shape)
            return out

        def _steps(self, expr: Any, steps: tuple) -> Any:
            """`expr` through the Relax ops `steps` names (see `extract.Step`), each emitted."""
            for kind, *args in steps:
                if kind == "taps":
                    axis, count, step, stride, length = args
                    taps = [self.builder_.emit(relax.op.strided_slice(
                        expr, axes=[axis], begin=[i * step], end=[i * step + (length - 1) * stride + 1],
                        strides=[stride])) for i in range(count)]
                    expr = self.builder_.emit(relax.op.stack(taps, axis=axis + 1))
                else:
                    expr = self.builder_.emit(step_ops[kind](expr, *args))
            return expr

    return visit_functions(_Rewriter(mod))


def _backend(kind: str) -> Any:
    """TVM's Relax pipeline module of a target kind (its dispatch and VM lowering passes; we fuse and schedule)."""
    if kind == "cuda":
        from tvm.relax.backend.cuda import pipeline
    else:
        from tvm.relax.backend.cpu_generic import pipeline
    return pipeline


def _schedulers(target: dict, tvm_target: Any) -> tuple[Callable, Callable | None, Callable]:
    """(schedule of an epilogue block left beside a kernel, vectorisation of a write-back loop or None, schedule of
    any other function) for the target: parallel loops and vectors on a CPU, thread bindings and DLight on CUDA."""
    if target["kind"] == "cuda":
        return bind_block, None, lambda func: gpu_generic_schedule(func, tvm_target)
    lanes = vector_unit(target)[0]
    return (lambda sch, blk: schedule_block(sch, blk, lanes), lambda sch, loop: vectorize_with_tail(sch, loop, lanes),
            lambda func: generic_schedule(func, tvm_target, lanes))


def lower_model(mod: Any, target: dict, kernels: dict[str, ModelKernel], tvm_target: Any,
                fuse: bool = True, regroup: Callable[[Callable, Callable | None], Any] | None = None
                ) -> tuple[Any, dict[str, str]]:
    """Rewrite, legalize, fuse and schedule: a module ready for the VM's lowering passes. `fuse`: the kernels'
    epilogues fused into them (else each kernel stays a function of its own). `regroup(schedule_rest,
    vectorize)`: a pass run on FuseOps' groups before FuseTIR (a dynamic build's dispatchers: `dynamic.fusion`)."""
    import tvm
    from tvm import relax, tirx

    mod = expand_activations(sink_reshapes(_replace_calls(mod, target, kernels, fuse)))
    with tvm_target:  # sort, scan (cumsum), sampling: LegalizeOps leaves them to the backend's dispatch passes
        mod = tvm.transform.Sequential(_backend(target["kind"]).library_dispatch_passes(tvm_target))(mod)
    schedule_rest, vectorize, schedule_other = _schedulers(target, tvm_target)
    mod = tvm.transform.Sequential([
        relax.transform.FastMathTransform(),  # softmax/exp/erf/tanh as vectorisable polynomials, not libm calls
        relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
        relax.transform.FuseOps(), *([narrow_epilogues()] if fuse else []),
        *([regroup(schedule_rest, vectorize)] if regroup is not None else []), relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination()])(mod)
    generic: dict[str, str] = {}
    for gv, func in list(mod.functions_items()):
        if not isinstance(func, tirx.PrimFunc) or int(func.attrs.get("tirx.is_scheduled", 0) or 0):
            continue
        # a kernel and the elementwise ops FuseOps put after it, else any other function
        mod[gv], generic[gv.name_hint] = schedule_fused(func, schedule_rest, vectorize) or schedule_other(func)
    return mod, generic


def compile_lowered(mod: Any, tvm_target: Any) -> Any:
    """Compile with the backend's VM lowering only (our fusion and schedules stay as they are)."""
    import tvm

    backend = _backend(str(tvm_target.kind.name))
    passes = tvm.transform.Sequential(backend.dataflow_lower_passes(tvm_target) + backend.finalize_passes(tvm_target)
                                      + [_shape_funcs_noalias()])
    return tvm.compile(mod, target=tvm_target, relax_pipeline=passes)


def _shape_funcs_noalias() -> Any:
    """A pass marking the VM's shape functions (symbolic sizes: one buffer each) `tirx.noalias`. Where one function
    of a module lacks it, LLVM compiles every kernel of the module without it: a dynamic model's kernels ran at
    half their speed."""
    import tvm
    from tvm import tirx

    @tvm.transform.module_pass(opt_level=0, name="ShapeFuncsNoAlias")
    def mark(mod: Any, _ctx: Any) -> Any:
        for gv, func in list(mod.functions_items()):
            attrs = func.attrs or {}
            if isinstance(func, tirx.PrimFunc) and attrs.get("tirx.is_host_func") and "tirx.noalias" not in attrs:
                mod[gv] = func.with_attr("tirx.noalias", True)
        return mod

    return mark


def build_model(model: Any, logs: Sequence[str | os.PathLike] = (), target: str | dict = "llvm",
                inputs: Any = None, records: TuningDatabase | Iterable[Record] | None = None,
                shipped: bool | None = None) -> BuiltModel:
    """Compile a model with the best schedule of each task in the logs (or `records`: a records database, or
    records), the shipped knowledge's config for a task they do not have (`autotune.shipped`; `shipped` False, or
    None with AUTOTUNE_NO_SHIPPED=1 set: none), default schedules elsewhere."""
    import warnings

    from ..dynamic.model import build_dynamic_model
    from ..dynamic.sites import dynamic_program

    program = None if isinstance(model, Captured) else dynamic_program(model)
    if program is not None:  # a symbolic input size (torch.export Dim): dynamic kernels for its matmuls
        name = os.path.basename(str(model)) if isinstance(model, (str, os.PathLike)) else "model"
        return build_dynamic_model(program, logs, target, records=records, name=name,
                                   shipped=shipped_enabled(shipped))
    tgt = resolve_target(target)
    use_target_threads(tgt)  # before FoldConstant or a first call starts TVM's thread pool
    captured = model if isinstance(model, Captured) else capture(model, inputs)
    recs = TuningDatabase.of(records) if records is not None else TuningDatabase.open(logs)
    knowledge = Knowledge.load(tgt) if shipped_enabled(shipped) else None
    try:
        mod, report = lower_captured(captured, tgt, recs, knowledge=knowledge)
        executable = compile_lowered(mod, to_tvm_target(tgt))
    except AutotuneError:
        raise
    except Exception as err:  # noqa: BLE001 - TVM refused a fused group: the unfused build is the known-good one
        lines = [line for line in str(err).splitlines() if line.strip()]
        why = f"{type(err).__name__}: {lines[-1][:200] if lines else ''}"
        warnings.warn(f"epilogue fusion failed ({why}); {captured.name} is built with its kernels unfused",
                      stacklevel=2)
        mod, report = lower_captured(captured, tgt, recs, fuse=False, knowledge=knowledge)
        executable = compile_lowered(mod, to_tvm_target(tgt))
        report.fusion = f"off ({why})"
    return BuiltModel(captured.name, captured.inputs, executable, report, "cuda" if tgt["kind"] == "cuda" else "cpu",
                      kernel_threads(tgt), tgt)


def lower_captured(captured: Captured, target: dict, records: TuningDatabase | Iterable[Record],
                   fuse: bool = True, knowledge: Knowledge | None = None) -> tuple[Any, BuildReport]:
    """(lowered Relax module, report): each task of the model on its best record's config (else the shipped
    knowledge's, else the default one), fused and scheduled as `lower_model` does; ready for `compile_lowered`."""
    return lower_relax(captured.mod, target, records, fuse, knowledge)


def lower_relax(mod: Any, target: dict, records: TuningDatabase | Iterable[Record], fuse: bool = True,
                knowledge: Knowledge | None = None, regroup: Callable | None = None) -> tuple[Any, BuildReport]:
    """`lower_captured` of a Relax module (a dynamic model's too: its calls of a static shape are its tasks;
    `regroup`: see `lower_model`)."""
    sites, skipped = find_sites(mod, target)
    db = TuningDatabase.of(records)
    best = db.best_by_task()
    stale = {r.task.key for r in db if r.result.ok}
    report = BuildReport(skipped=[f"{s.what}: {s.reason}" for s in skipped])
    kernels: dict[str, ModelKernel] = {}
    for task, weight in merge_sites(sites):
        task.opdef.template_ref(task.target_kind)  # fail early without a template
        kernels[task.key], choice = kernel_for(task, weight, best, stale, knowledge)
        report.kernels.append(choice)
    if knowledge is not None and measurable_here(target):
        report.kernels = check_nearest_shipped(kernels, report.kernels)
    mod, report.generic = lower_model(mod, target, kernels, to_tvm_target(target), fuse, regroup)
    return mod, report
