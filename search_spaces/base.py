"""The template interface: a space of knobs for a task, and a schedule for a config."""

from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from autotune.space import Config, ConfigSpace
from autotune.task import Task


PREPACK = "meta_schedule.layout_rewrite_preproc"  # annotation of a block that only relays a constant operand


@dataclass(frozen=True)
class Relayout:
    """The kernel takes operand `arg` in another layout: kernel_arg[index_map(*i)] = operand[i].

    For an operand that is constant where the kernel runs (a layer's weight): it is relaid once,
    at build time in a whole-model build and outside the timed call when a candidate is measured.
    `index_map` must be one-to-one and work on numpy integer arrays; the new shape is the largest
    index it gives plus one on each axis, and elements no index maps to are zero (padding).

    A schedule says so in one of two ways: its PrimFunc already takes the operand relaid (dense), or it
    copies the operand into the new layout in a block annotated PREPACK (MetaSchedule's layout-rewrite
    annotation, so an exported trace still runs on the operand as it is); `Template.kernel` drops that
    block and takes the copy's buffer as the argument.
    """

    arg: int
    index_map: Callable[..., tuple]


def relayout_array(array: np.ndarray, index_map: Callable[..., tuple]) -> np.ndarray:
    """`array` in the layout `index_map` sends each of its indices to (zero where nothing is sent)."""
    new = index_map(*np.indices(array.shape, sparse=False))
    out = np.zeros(tuple(int(ix.max()) + 1 for ix in new), dtype=array.dtype)
    hit = np.zeros(out.shape, dtype=bool)
    hit[new] = True
    if np.count_nonzero(hit) != array.size:
        raise ValueError(f"relayout {array.shape} -> {out.shape} sends two elements to one place")
    out[new] = array
    return out


def _no_relayouts(task: Task, config: Config) -> tuple[Relayout, ...]:
    return ()


@dataclass(frozen=True)
class Template:
    """A schedule template. `define_space` and `apply` are plain functions of the task.

    `apply(task, config)` returns a `tvm.s_tir.Schedule` of the task's PrimFunc (the one
    `prim_func(task)` builds); it raises (any exception) when the config is not legal. A schedule
    may take some operands in another layout (a weight packed ahead of time): `relayouts` says
    which and how, and `kernel_inputs` relays them.
    """

    name: str
    op: str
    target_kind: str
    define_space: Callable[[Task], ConfigSpace]
    apply: Callable[[Task, Config], object]
    relayouts: Callable[[Task, Config], tuple[Relayout, ...]] = _no_relayouts  # operands the kernel takes relaid
    # earlier versions whose spaces are this one's (only the schedule of a config changed): their records name the
    # same configs, so builds still choose by them (`current_records`); a resumed tuning run measures afresh
    compatible_versions: tuple[str, ...] = ()

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
            out[r.arg] = relayout_array(np.asarray(inputs[r.arg]), r.index_map)
        return out

    @cached_property
    def version(self) -> str:
        """Fingerprint of what the template does: its spaces and schedules on fixed probe tasks.

        Records made by other code are told apart (an edited template changes what an index means),
        while a refactor that leaves every schedule as it was keeps the logs usable. Computed once
        per source text and cached on disk (see `schedule_fingerprint`).
        """
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


# op -> (a small and a model-sized shape) on which a template's spaces and schedules are fingerprinted
PROBE_SHAPES: dict[str, tuple[dict[str, int], ...]] = {
    "matmul": ({"M": 64, "N": 48, "K": 32}, {"M": 512, "N": 768, "K": 3072}),
    "dense": ({"batch": 16, "in_features": 64, "out_features": 96},
              {"batch": 128, "in_features": 768, "out_features": 3072}),
    "batch_matmul": ({"B": 2, "M": 32, "N": 48, "K": 16}, {"B": 12, "M": 128, "N": 128, "K": 64}),
    "conv2d": ({"C": 16, "H": 14, "W": 14, "K": 32, "R": 3, "S": 3, "padding": 1},
               {"C": 64, "H": 56, "W": 56, "K": 128, "R": 3, "S": 3, "stride": 2, "padding": 1}),
    "group_conv2d": ({"C": 32, "H": 14, "W": 14, "K": 32, "R": 3, "S": 3, "groups": 4, "padding": 1},
                     {"C": 128, "H": 28, "W": 28, "K": 128, "R": 3, "S": 3, "groups": 32, "stride": 2, "padding": 1}),
    "depthwise_conv2d": ({"C": 16, "H": 14, "W": 14, "R": 3, "S": 3, "padding": 1},
                         {"C": 96, "H": 56, "W": 56, "R": 3, "S": 3, "stride": 2, "padding": 1}),
}
# target kind -> the targets a template is fingerprinted on (a CPU space's vector tiles and register cap follow
# the target's vector unit: AVX-512 and AVX2 both probed)
PROBE_TARGETS = {"llvm": ({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2},
                          {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}),
                 "cuda": ({"kind": "cuda", "arch": "sm_80"},)}
PROBE_CONFIGS = 6  # configs per probe task, spread over the space
FINGERPRINT_FORMAT = "2"  # 2: probed on an AVX2 target as well


def _cache_file():
    from pathlib import Path

    root = os.environ.get("AUTOTUNE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "autotune")
    return Path(root) / "template_versions.json"


def schedule_fingerprint(template: Template) -> str:
    """Hash of the knob candidates and the scheduled TIR of a few configs on the op's probe tasks.

    Falls back to the source hash for an op without probe shapes. Cached on disk by source hash,
    so the schedules are built once per edit of the template's code, not once per process.
    """
    import json

    key = f"{FINGERPRINT_FORMAT}:{template.source_hash}"
    path = _cache_file()
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return cache[key]
    if template.op not in PROBE_SHAPES or template.target_kind not in PROBE_TARGETS:
        return template.source_hash
    version = _compute_fingerprint(template)
    try:  # a read-only home only costs recomputing next time
        path.parent.mkdir(parents=True, exist_ok=True)
        cache[key] = version
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass
    return version


def _compute_fingerprint(template: Template) -> str:
    from autotune.task import make_task

    digest = hashlib.sha1(f"{template.op}:{template.target_kind}".encode())
    for target, shape in itertools.product(PROBE_TARGETS[template.target_kind], PROBE_SHAPES[template.op]):
        task = make_task(template.op, shape, target=target)
        try:
            space = template.define_space(task)
        except Exception as err:  # noqa: BLE001 - a template for other shapes only: that is what it does
            digest.update(f"no space: {type(err).__name__}".encode())
            continue
        digest.update(repr([(k.name, k.kind, k.candidates) for k in space.knobs]).encode())
        n = len(space)
        for index in sorted({(n - 1) * i // (PROBE_CONFIGS - 1) for i in range(PROBE_CONFIGS)} | {n // 3 + 1}):
            index = min(index, n - 1)
            try:
                text = template.apply(task, space.get(index)).mod.script()
            except Exception as err:  # noqa: BLE001 - a rejected config is part of what the template does
                text = f"rejected: {type(err).__name__}"
            digest.update(f"{index}:{text}".encode())
    return digest.hexdigest()[:12]


def conv_groups(task: Task) -> tuple[int, int, int]:
    """(groups, output channels of a group, input channels of a group) of a convolution task (1 group unless
    it is a group_conv2d)."""
    p = task.shape
    g = p.get("groups", 1)
    return g, p["K"] // g, p["C"] // g


def output_shape(task: Task) -> tuple[int, ...]:
    """The task's output shape (e.g. [N, K, OH, OW] for a convolution)."""
    return tuple(int(d) for d in task.opdef.output_shape(task.shape))


def gemm_schedule(task: Task):
    """A fresh schedule of a GEMM-family task: (schedule, block "C", batch loops, i, j, k)."""
    from tvm import s_tir

    sch = s_tir.Schedule(prim_func(task))
    blk = sch.get_sblock("C")
    loops = sch.get_loops(blk)
    return (sch, blk, loops[:-3], *loops[-3:])


@functools.lru_cache(maxsize=256)
def prim_func(task: Task):
    """The task's unscheduled PrimFunc (args: inputs..., output)."""
    from tvm import te

    return te.create_prim_func(task.opdef.compute(task.shape, task.dtype))
