"""Schedule templates as autotune uses them: the `Template` interface, the operator's PrimFunc a template
schedules, and the lookups (a reference to its template, a template and task to its space), each cached.

A reference is "module:attribute" (e.g. "search_spaces.matmul:MATMUL_CPU"): records name templates that way,
so a builder process imports exactly the template the tuner used, including templates outside `search_spaces`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .errors import AutotuneError
from .fingerprint import schedule_fingerprint
from .gpu_limits import KernelResources
from .operators import default_template_ref
from .space import Config, ConfigSpace, Knob
from .task import Task

PREPACK = "meta_schedule.layout_rewrite_preproc"  # annotation of a block that only relays a constant operand
VECTOR = 16  # fp32 lanes of a 512-bit register
CUDA_INNER = 4  # the inner split factor preferred on CUDA where the template states none


@dataclass(frozen=True)
class Relayout:
    """The kernel takes operand `arg` in another layout: kernel_arg[index_map(*i)] = operand[i].

    For an operand that is constant where the kernel runs (a layer's weight): it is relaid once,
    at build time in a whole-model build and outside the timed call when a candidate is measured.
    `index_map` must be one-to-one and work on numpy integer arrays; the new shape is `shape`, else the largest
    index it gives plus one on each axis, and elements no index maps to are zero (padding).

    A schedule says so in one of two ways: its PrimFunc already takes the operand relaid (dense), or it
    copies the operand into the new layout in a block annotated PREPACK (MetaSchedule's layout-rewrite
    annotation, so an exported trace still runs on the operand as it is); `Template.kernel` drops that
    block and takes the copy's buffer as the argument.
    """

    arg: int
    index_map: Callable[..., tuple]
    shape: tuple[int, ...] | None = None  # the new shape, where padding reaches past the largest index mapped


def relayout_array(array: np.ndarray, index_map: Callable[..., tuple],
                   shape: tuple[int, ...] | None = None) -> np.ndarray:
    """`array` in the layout `index_map` sends each of its indices to (zero where nothing is sent), of `shape`
    (None: the largest index sent plus one on each axis)."""
    new = index_map(*np.indices(array.shape, sparse=False))
    out = np.zeros(shape or tuple(int(ix.max()) + 1 for ix in new), dtype=array.dtype)
    hit = np.zeros(out.shape, dtype=bool)
    hit[new] = True
    if np.count_nonzero(hit) != array.size:
        raise ValueError(f"relayout {array.shape} -> {out.shape} sends two elements to one place")
    out[new] = array
    return out


def _no_relayouts(task: Task, config: Config) -> tuple[Relayout, ...]:
    return ()


def _no_preferences(task: Task) -> Mapping[str, Any]:
    return {}


@dataclass(frozen=True)
class Template:
    """A schedule template. `define_space` and `apply` are plain functions of the task.

    `apply(task, config)` returns a `tvm.s_tir.Schedule` of the task's PrimFunc (the one
    `prim_func(task)` builds); it raises (any exception) when the config is not legal. A schedule
    may take some operands in another layout (a weight packed ahead of time): `relayouts` says
    which and how, and `kernel_inputs` relays them.

    `preferences(task)`: knob name -> the value an untuned build prefers (a split knob: its inner factors,
    innermost first, the closest candidate is taken; another knob: that value when it is a candidate); knobs it
    leaves out get a generic choice (`autotune.model.default_schedule`).
    `kernel_resources(task, config)`: what a config asks of a GPU (threads, shared memory, registers), from its
    knob values alone; configs over the GPU's limits are rejected before building (`gpu_limits.check_config`).
    None: never rejected (CPU templates).
    `dtypes`: the element types of the tasks it schedules; a task of another dtype gets no space from it.
    `derived_knobs(task, knobs)`: the knobs of another task's config (a dynamic site's tuned uKernel) made fit
    for `task`, a kernel derived from it without tuning (`autotune.dynamic.load.derived_ukernels`: the heights a
    site's tuned uKernels lack); the closest config of `task`'s space is taken. None: the knobs as they are.
    `from_task_func(sch, block, task, config)`: for a template whose `apply` schedules a function of its own
    rather than `prim_func(task)`: makes that function in `sch`, a schedule of the task's PrimFunc whose main
    block is `block`, and returns the blocks that play the parts of its named blocks (name -> block), so that the
    trace of `apply` runs after it (a MetaSchedule database, `autotune.model.export_db`). None: `apply` schedules
    `prim_func(task)` itself.
    """

    name: str
    op: str
    target_kind: str
    define_space: Callable[[Task], ConfigSpace]
    apply: Callable[[Task, Config], object]
    relayouts: Callable[[Task, Config], tuple[Relayout, ...]] = _no_relayouts  # operands the kernel takes relaid
    # earlier versions whose spaces are this one's (only the schedule of a config changed): their records name the
    # same configs, so builds still choose by them; a resumed tuning run measures afresh
    compatible_versions: tuple[str, ...] = ()
    preferences: Callable[[Task], Mapping[str, Any]] = _no_preferences
    kernel_resources: Callable[[Task, Config], KernelResources] | None = None
    from_task_func: Callable[[Any, Any, Task, Config], Mapping[str, Any]] | None = None
    dtypes: tuple[str, ...] = ("float32",)  # the task element types it schedules (`autotune.operators.dtypes`)
    derived_knobs: Callable[[Task, dict[str, Any]], dict[str, Any]] | None = None

    def kernel(self, task: Task, config: Config):
        """The IRModule to compile for `config`: the schedule's, less any PREPACK block (the kernel then
        takes that operand relaid, as `relayouts` says and `kernel_inputs` gives it)."""
        mod = self.apply(task, config).mod
        if not self.relayouts(task, config):
            return mod
        import tvm
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        main = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)["main"]
        return tvm.IRModule({"main": main.with_body(main.body)})  # rebuilt: the pass leaves its type (.ty) stale

    def kernel_inputs(self, task: Task, config: Config, inputs: list[Any]) -> list[Any]:
        """The op's inputs (numpy arrays) as the scheduled kernel of `config` takes them."""
        out = list(inputs)
        for r in self.relayouts(task, config):
            out[r.arg] = relayout_array(np.asarray(inputs[r.arg]), r.index_map, r.shape)
        return out

    @cached_property
    def version(self) -> str:
        """Fingerprint of what the template does: its spaces and schedules on fixed probe tasks
        (`autotune.fingerprint.schedule_fingerprint`, cached on disk per source text)."""
        return schedule_fingerprint(self)

    def reads_records_of(self, version: str | None) -> bool:
        """Whether records made by `version` of this template name its configs: this version's, or one it
        declares compatible (`compatible_versions`)."""
        return version == self.version or version in self.compatible_versions

    @cached_property
    def source_hash(self) -> str:
        """Hash of the template's module and of the modules of its package it uses."""
        module = sys.modules[self.apply.__module__]
        package = module.__name__.split(".")[0]
        used = {getattr(v, "__module__", None) or getattr(v, "__name__", "") for v in vars(module).values()}
        names = sorted({module.__name__} | {m for m in used if m and m.split(".")[0] == package and m in sys.modules})
        src = "".join(inspect.getsource(sys.modules[m]) for m in names)
        return hashlib.sha1(f"{self.name}:{self.op}:{self.target_kind}:{src}".encode()).hexdigest()[:12]


@functools.lru_cache(maxsize=256)
def prim_func(task: Task):
    """The task's unscheduled PrimFunc (args: inputs..., output), from its operator's compute."""
    from tvm import te

    return te.create_prim_func(task.opdef.compute(task.shape, task.dtype))


@functools.lru_cache(maxsize=None)
def resolve(ref: str) -> Template:
    """The template a reference ("module:attribute") names, imported once per process."""
    module, _, attr = ref.partition(":")
    try:
        template = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise AutotuneError(f"cannot load template {ref!r}: {err}") from None
    if not isinstance(template, Template):
        raise AutotuneError(f"{ref!r} is not a Template")
    return template


def registry_refs() -> frozenset[str]:
    """Every template the operator registry names (`OpDef.templates` and `ukernel_templates` of each operator)."""
    from .operators import OPS

    return frozenset(ref for op in OPS.values() for refs in (op.templates, op.ukernel_templates)
                     for ref in refs.values())


TRUSTED_ENV = "AUTOTUNE_TEMPLATES"  # modules of the user's own templates that logs may name, comma-separated


def resolve_trusted(ref: str) -> Template:
    """The template a reference read from a log names, only where importing it runs no code the log chose: a
    template of the operator registry (`registry_refs`), one whose module this process has imported already (the
    template the user named with `--template`, resolved before any log is read), or one whose module the user
    lists in the environment variable AUTOTUNE_TEMPLATES. AutotuneError otherwise: the log's records of it are
    stale (`TuningDatabase.is_current`)."""
    module = ref.partition(":")[0]
    listed = {m.strip() for m in os.environ.get(TRUSTED_ENV, "").split(",") if m.strip()}
    if ref not in registry_refs() and module not in sys.modules and module not in listed:
        raise AutotuneError(f"template {ref!r} is not one of the operator registry's, nor named with --template, "
                            f"nor listed in {TRUSTED_ENV}: not imported")
    return resolve(ref)


@functools.lru_cache(maxsize=256)
def space_of(template: Template, task: Task) -> ConfigSpace:
    """The template's space for a task, defined once per process (define_space may enumerate many
    factorisations)."""
    return template.define_space(task)


def _split_score(value: tuple[int, ...], prefs: tuple[int, ...]) -> float:
    inner = value[::-1][: len(prefs)]
    return sum(abs(math.log2(f) - math.log2(p)) for f, p in zip(inner, prefs))


def _pick(knob: Knob, want: Any, task: Task) -> Any:
    """The candidate of `knob` closest to the preferred value `want` (None: no preference)."""
    if knob.kind == "split":
        prefs = want if want is not None else ((CUDA_INNER,) if task.target_kind == "cuda" else (VECTOR,))
        return min(knob.candidates, key=lambda v: _split_score(v, prefs))
    return want if want in knob.candidates else knob.candidates[0]


def heuristic_configs(template: Template, task: Task, count: int = 8) -> list[Config]:
    """The heuristic config first, then variants of it (one knob changed) as fallbacks. The heuristic config: every
    knob at the value the template prefers (`Template.preferences`; for a split knob the candidate whose inner
    factors are closest to the preferred ones); a knob without a preference takes its first candidate, or for a
    split knob the inner factor closest to one vector (CPU) or 4 (CUDA). Untuned builds use it, and a tuner measures
    it first (`XGBOptions.untuned_first`)."""
    space = space_of(template, task)
    prefs = template.preferences(task)
    digits = [knob.candidates.index(_pick(knob, prefs.get(knob.name), task)) for knob in space.knobs]
    out = [space.index_of(digits)]
    for i, knob in enumerate(space.knobs):
        for d in range(len(knob)):
            if len(out) >= count:
                break
            alt = digits[:i] + [d] + digits[i + 1:]
            if space.index_of(alt) not in out:
                out.append(space.index_of(alt))
    return [space.get(i) for i in out]


def default_template(task: Task) -> Template:
    """The default template of the task's operator on its target kind (`OpDef.templates`)."""
    return resolve(default_template_ref(task.op, task.target_kind))


__all__ = ["PREPACK", "Relayout", "TRUSTED_ENV", "Template", "default_template", "heuristic_configs", "prim_func",
           "registry_refs", "relayout_array", "resolve", "resolve_trusted", "space_of"]
