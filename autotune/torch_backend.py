"""The `autotune` backend of torch.compile: every graph Dynamo captures runs on autotune's kernels.

    model = torch.compile(model, backend="autotune", options={"logs": ["logs/model.jsonl"]})

Each FX graph is specialised to the concrete shapes it is called with, exported with torch.export
(parameters and buffers embedded as constants), imported into Relax and built by `build_model`:
the best logged config per task, default schedules elsewhere. Builds are cached by the exported
graph, input shapes and dtypes and the identity of the embedded weights, so a guard failure
that leads back to known shapes costs no build. The first run of each build is checked against
eager. A graph whose sizes Dynamo made symbolic (`dynamic=True`, or a size seen to change) is exported with them
dynamic and built once on dynamic kernels (`autotune.dynamic`) for every size, each size's first call checked;
where that cannot be, each shape builds on its own. A graph one build cannot take whole (ops TVM cannot import,
in-place writes to its inputs, an output that is a view of an input) is split (`model.partition`): those parts run
eagerly, each segment between them is a graph of its own. A graph that cannot be built, or whose outputs differ,
runs eagerly with one warning.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .database import TuningDatabase
from .errors import AutotuneError
from .model.fx_graph import (Exported, Refused, call_key, export_graph, graph_identity, graph_label, one_line,
                             scalar_inputs, static_inputs, symbolic_sizes)
from .model.library import torch_caller
from .model.quantized import is_quantized
from .shipped import shipped_enabled
from .model.partition import split_for_tvm, written_inputs

BACKEND_NAME = "autotune"
OPTIONS = {"logs": "tuning logs (paths)", "target": "llvm or a JSON target dict (CPU only)",
           "verify": "check each new build against eager on its first call (default True)",
           "max_shapes": "builds per graph before new shapes run eagerly (default 8)",
           "shipped": "a task without a record in the logs takes autotune's shipped config (default True, unless "
                      "AUTOTUNE_NO_SHIPPED=1)"}


class AutotuneFallbackWarning(RuntimeWarning):
    """A captured graph runs eagerly; the message names the graph and the reason."""


@dataclass
class BackendStats:
    """Counters since the last clear_cache(), for tests and benchmarks."""

    graphs: int = 0  # graphs Dynamo handed over
    builds: int = 0  # TVM builds
    hits: int = 0  # a new call signature served by an existing build
    fallbacks: int = 0  # call signatures that run eagerly
    eager_graphs: int = 0  # graphs with at least one call signature run eagerly (each warned once)
    splits: int = 0  # graphs split where one build cannot take them whole (their segments count as graphs)
    dynamic: int = 0  # builds of a graph's symbolic sizes (one serves every size; counted in `builds` too)
    reasons: list[str] = field(default_factory=list)  # one per fallback: "label: reason"


STATS = BackendStats()
_BUILDS: dict[str, Any] = {}  # level-2 cache: exported graph + shapes + weights -> BuiltModel
_SEEN: dict[tuple, tuple[Any, list[int]]] = {}  # before the export: graph identity + call key -> (BuiltModel, user)
_RECORDS: dict[tuple, TuningDatabase] = {}


def builds() -> list[Any]:
    """The BuiltModels in the cache (each has a BuildReport: which kernels were tuned)."""
    return list(_BUILDS.values())


def clear_cache() -> None:
    """Forget every build and reset the counters (Dynamo's own caches are torch._dynamo.reset())."""
    _BUILDS.clear()
    _SEEN.clear()
    _RECORDS.clear()
    for name, value in vars(BackendStats()).items():
        setattr(STATS, name, value)


@dataclass(frozen=True)
class Settings:
    logs: tuple[str, ...] = ()
    target: Any = "llvm"
    verify: bool = True
    max_shapes: int = 8
    shipped: bool | None = None  # None: unless AUTOTUNE_NO_SHIPPED=1 (`shipped.shipped_enabled`)

    @staticmethod
    def parse(options: dict | None) -> Settings:
        from .model.extract import resolve_target

        options = dict(options or {})
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise AutotuneError(f"unknown autotune backend option(s) {unknown}; valid: {sorted(OPTIONS)}")
        logs = options.get("logs", ())
        logs = (logs,) if isinstance(logs, (str, os.PathLike)) else tuple(logs)
        for p in logs:
            if not os.path.isfile(p):
                raise AutotuneError(f"log {p} does not exist or is not a file")
        target = options.get("target", "llvm")
        if resolve_target(target)["kind"] != "llvm":
            raise AutotuneError("the autotune torch.compile backend builds for the llvm (CPU) target only")
        shipped = options.get("shipped")
        return Settings(tuple(map(str, logs)), target, bool(options.get("verify", True)),
                        int(options.get("max_shapes", 8)), None if shipped is None else bool(shipped))

    def fingerprint(self) -> str:
        stamps = [(p, os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in self.logs]
        return repr((stamps, self.target, shipped_enabled(self.shipped)))

    def records(self) -> TuningDatabase:
        """The records database of the logs (read again only when a log changed)."""
        key = (self.fingerprint(),)
        if key not in _RECORDS:
            _RECORDS[key] = TuningDatabase.open(self.logs)
        return _RECORDS[key]


# ---- running a graph ----------------------------------------------------------------------

def tvm_runner(built: Any, user: list[int]) -> Callable[[Sequence[Any]], list[Any]]:
    """Call a BuiltModel on the graph's arguments: torch tensors in and out by DLPack, no copies. TVM's VM checks
    each input's shape and dtype (never wrong through the cache keys; a build that raises runs eagerly)."""
    import tvm

    call = torch_caller(built.vms())

    empty: dict[tuple, Any] = {}

    def tensor(t: torch.Tensor) -> Any:  # an empty one as TVM's: torch gives its dimensions before a 0 stride 0
        if t.numel():
            return t.detach().contiguous()
        key = (tuple(t.shape), str(t.dtype).removeprefix("torch."))
        if key not in empty:
            empty[key] = tvm.runtime.empty(*key)
        return empty[key]

    def run(args: Sequence[Any]) -> list[Any]:
        return call([tensor(args[i]) for i in user])

    return run


# A quantized graph (PT2E) sums its products exactly in int8 where eager sums them in float32: a value between two
# quantization steps may round to the other, which moves the outputs after it by a few of their steps.
QUANTIZED_RTOL = 0.02


def check_outputs(got: Sequence[Any], ref: Any, what: str = "output", quantized: bool = False) -> None:
    """Refuse outputs that differ from eager: rtol r, atol 1e-4 + r max|finite ref| with r = 1e-3, or 4 steps of a
    narrower float type (bf16: 0.031; infinities and NaN where eager has them), or QUANTIZED_RTOL for a quantized
    graph, equal (other). `what`: the values' name in the reason."""
    ref = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    if len(got) != len(ref):
        raise Refused(f"{len(got)} {what}s instead of {len(ref)}")
    for k, (g, r) in enumerate(zip(got, ref)):
        if not isinstance(r, torch.Tensor) or not isinstance(g, torch.Tensor):
            if type(g) is not type(r) or g != r:  # a split graph's eager parts give numbers, None, ...
                raise Refused(f"{what} {k} is {g!r:.80}, eager gives {r!r:.80}")
            continue
        if g.shape != r.shape or g.dtype != r.dtype:
            raise Refused(f"{what} {k} is {list(g.shape)} {g.dtype}, eager gives {list(r.shape)} {r.dtype}")
        if r.dtype.is_floating_point:
            finite = r[torch.isfinite(r)]  # -inf masks and NaN compare as equal values, not in the scale
            rtol = QUANTIZED_RTOL if quantized else max(1e-3, 4 * torch.finfo(r.dtype).eps)
            atol = 1e-4 + rtol * float(finite.abs().max()) if finite.numel() else 1e-4
            if not torch.allclose(g, r, rtol=rtol, atol=atol, equal_nan=True):
                err = float((g - r).abs().max())
                raise Refused(f"{what} {k} differs from eager (max abs error {err:.3g}, atol {atol:.3g})")
        elif not torch.equal(g, r):
            raise Refused(f"{what} {k} ({r.dtype}) differs from eager")


class GraphRunner:
    """What Dynamo calls for one graph: a build per call signature, eager where that is impossible."""

    def __init__(self, gm: Any, settings: Settings):
        self.gm, self.settings, self.label = gm, settings, graph_label(gm)
        self.quantized = is_quantized(gm)
        self.static: set[int] | None = None
        self.versioned: set[int] = set()  # the static inputs whose storage and version are in the call key
        self.scalars: set[int] = set()  # 0-d tensors read as numbers (`fx_graph.scalar_inputs`): values in the key
        self.identity: tuple | None = None  # graph_identity (computed with `static`)
        self.by_key: dict[tuple, Callable[[Sequence[Any]], Any]] = {}
        self.builds = 0
        self.warned = False
        self.split: torch.fx.GraphModule | None = None  # the graph split (`_segments`), once it had to be
        self.written: list[int] = []  # positions of the inputs a split graph writes in place (its eager parts)
        self.dynamic: Callable[[Sequence[Any]], Any] | None = None  # the build of its symbolic sizes, once made
        self.dynamic_tried = False

    def __call__(self, *args: Any) -> Any:
        if self.static is None:
            self.static = static_inputs(self.gm, args)
            # a buffer the graph writes in place (a running statistic) changes every call: keyed by its shape, it
            # does not make each call a new signature (its eager part writes it, the segments take it as an input)
            self.versioned = self.static - written_inputs(self.gm)
            self.identity = graph_identity(self.gm)
            self.scalars = scalar_inputs(self.gm)
        key = call_key(args, self.versioned, self.scalars)
        fn = self.by_key.get(key)
        if fn is None:
            fn, result = self._prepare(args, key)
            # `versioned` loses the weights the graph wrote
            self.by_key[call_key(args, self.versioned, self.scalars)] = fn
            if result is not None:  # the graph already ran for this call (eager reference or checked build)
                return result
        if fn == self._eager:
            return fn(args)
        try:
            return fn(args)
        except Exception as err:  # noqa: BLE001 - a build that stops working: eager from now on
            fn = self.by_key[key] = self._fallback(f"the build failed to run: {one_line(err)}")
            return fn(args)

    def _eager(self, args: Sequence[Any]) -> Any:
        return self.gm(*args)  # a tuple or list, as Dynamo expects

    def _prepare(self, args: Sequence[Any], key: tuple) -> tuple[Callable[[Sequence[Any]], Any], Any]:
        """The runner for a new call signature, and this call's outputs when they were computed (never twice)."""
        seen = None if self.identity is None else (
            self.identity, frozenset(self.static), key, torch.is_grad_enabled(), self.settings.fingerprint())
        try:
            if seen is not None and seen in _SEEN:  # an equal graph (a recompiled frame) was built for this call
                STATS.hits += 1
                return tvm_runner(*_SEEN[seen]), None
            if not self.dynamic_tried and self.split is None and symbolic_sizes(self.gm):
                self.dynamic_tried = True
                self.dynamic = self._dynamic_build(args)
            elif self.dynamic is not None:
                STATS.hits += 1
            if self.dynamic is not None:  # one build for every size: each new size's first call checked
                return self.dynamic, self._checked_run(self.dynamic, args) if self.settings.verify else None
            if self.builds >= self.settings.max_shapes:
                raise Refused(f"more than {self.settings.max_shapes} input shapes (each shape is a build)")
            exported = None
            if self.split is None:  # a split graph's new shapes reach only its segments (each exports, builds)
                exported = export_graph(self.gm, args, self.static, self.settings.fingerprint())
                built = _BUILDS.get(exported.key)
                if built is not None:
                    STATS.hits += 1
                    if seen is not None:
                        _SEEN[seen] = (built, exported.user)
                    return tvm_runner(built, exported.user), None
            built, run = None, self._segments(exported)  # None: one build takes the whole graph
            if run is None:
                built = self._build(exported, args)
                run = tvm_runner(built, exported.user)
            got = None
            if self.settings.verify:
                got = self._checked_run(run, args)
            if built is not None:
                _BUILDS[exported.key] = built
                if seen is not None:
                    _SEEN[seen] = (built, exported.user)
                STATS.builds += 1
                self.builds += 1
            return run, got
        except Refused as why:
            return self._fallback(why.reason), why.result
        except Exception as err:  # noqa: BLE001 - the user's program never fails because of the backend
            return self._fallback(f"unexpected {one_line(err)}"), None

    def _dynamic_build(self, args: Sequence[Any]) -> Callable[[Sequence[Any]], Any] | None:
        """The runner of a build of the graph's symbolic sizes (the graph exported with them dynamic: dynamic
        kernels, `autotune.dynamic`), or None where that cannot be (each shape then builds on its own; the reason
        is in STATS.reasons)."""
        from .dynamic.sites import dynamic_program

        try:
            exported = export_graph(self.gm, args, self.static, self.settings.fingerprint(), dynamic=True)
            if exported.mutates or exported.unfit_output or dynamic_program(exported.program) is None:
                raise Refused(exported.mutates or exported.unfit_output or "the export fixed every size")
            built = _BUILDS.get(exported.key)
            if built is None:
                built = _BUILDS[exported.key] = self._build(exported, args)
                STATS.builds += 1
                STATS.dynamic += 1
            return tvm_runner(built, exported.user)
        except Refused as why:
            STATS.reasons.append(f"{self.label}: no build of its symbolic sizes ({why.reason}): a build per shape")
            return None

    def _build(self, exported: Exported, args: Sequence[Any]) -> Any:
        """A build of the exported graph: of its shapes, or where the export kept sizes symbolic, of every size."""
        from .dynamic.sites import dynamic_program
        from .model.build import build_model
        from .model.capture import import_program

        try:
            model = exported.program if dynamic_program(exported.program) is not None else import_program(
                exported.program, [args[i] for i in exported.user], "the graph")
            return build_model(model, target=self.settings.target, records=self.settings.records(),
                               shipped=self.settings.shipped)
        except AutotuneError as err:
            raise Refused(str(err)) from None
        except Exception as err:  # noqa: BLE001 - whatever TVM cannot take runs eagerly
            raise Refused(f"TVM cannot build it: {one_line(err)}") from None

    def _segments(self, exported: Exported | None) -> Callable[[Sequence[Any]], Any] | None:
        """Run the graph split where one build cannot take it whole (`partition.split_for_tvm`, decided once, on
        `exported`): those parts run eagerly, each segment through a GraphRunner of its own (built, checked, eager
        where it must be, per shapes). None where one build takes the whole graph."""
        if self.split is None:
            def runner(segment: torch.fx.GraphModule) -> GraphRunner:
                STATS.graphs += 1
                return GraphRunner(segment, self.settings)

            made = split_for_tvm(self.gm, exported, runner)
            if made is None:
                return None
            self.split, account = made
            self.written = sorted(written_inputs(self.gm))
            STATS.splits += 1
            warnings.warn(f"autotune backend: {self.label}: {account} on TVM", AutotuneFallbackWarning, stacklevel=5)
        split = self.split
        return lambda args: split(*args)

    def _checked_run(self, run: Callable[[Sequence[Any]], Any], args: Sequence[Any]) -> Any:
        """This call through `run`, checked against eager. Eager runs on copies of what the graph may write in place
        (the inputs it writes, its buffers): the real ones are written once, by `run`, and compared with the copies
        (restored from them where they differ). A buffer the graph wrote leaves the call key (`versioned`)."""
        copied = sorted(set(self.written) | {i for i in self.static if not isinstance(args[i], torch.nn.Parameter)})
        before = [a.clone() if i in copied else a for i, a in enumerate(args)]
        versions = {i: args[i]._version for i in self.static}
        got = self._first_run(run, args)
        self.versioned -= {i for i, v in versions.items() if args[i]._version != v}
        ref = self.gm(*before)
        try:
            check_outputs(got, ref, quantized=self.quantized)
            check_outputs([args[i] for i in copied], [before[i] for i in copied], "input written in place")
        except Refused as why:  # eager's result and state stand
            for i in copied:
                args[i].copy_(before[i])
            why.result = ref
            raise
        return got

    @staticmethod
    def _first_run(run: Callable[[Sequence[Any]], list[Any]], args: Sequence[Any]) -> list[Any]:
        try:
            return run(args)
        except Exception as err:  # noqa: BLE001 - a build that fails to run is a build we do not use
            raise Refused(f"the build failed to run: {one_line(err)}") from None

    def _fallback(self, reason: str) -> Callable[[Sequence[Any]], Any]:
        STATS.fallbacks += 1
        STATS.reasons.append(f"{self.label}: {reason}")
        if not self.warned:
            self.warned = True
            STATS.eager_graphs += 1
            warnings.warn(f"autotune backend: {self.label} runs eagerly: {reason}", AutotuneFallbackWarning,
                          stacklevel=4)
        return self._eager


def autotune_backend(gm: Any, example_inputs: Sequence[Any], options: dict | None = None) -> Callable[..., Any]:
    """torch.compile backend: `torch.compile(model, backend="autotune", options={"logs": [...]})`."""
    runner = GraphRunner(gm, Settings.parse(options))
    STATS.graphs += 1
    return runner


def _register() -> None:
    """Register with Dynamo unless its entry point (pyproject.toml) is already known: the name must stay unique."""
    if BACKEND_NAME not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(autotune_backend, name=BACKEND_NAME)


_register()
