"""Tuning knowledge shipped with autotune: for each target class, the best config of every task of a corpus of
common workloads, as log records, and a cost model trained on all the corpus's records (package data:
`autotune/shipped/<class>.jsonl` and `<class>.model.json`, written by `recipes/shipped_knowledge.py`; nothing is
downloaded).

A target class is a kind of machine named by the instructions its configs may use (`CLASSES`). A target may use
the knowledge of every class whose instructions it has, its own (the most specific) first; knowledge that needs an
instruction the target lacks is never used. Records of another version of their template are dropped, as in any
log (`TuningDatabase`). A shipped config is mapped onto a task's space by its knob values (`ConfigSpace.nearest`):
the same task's where the corpus has it (same operator, shape and dtype, on another CPU of the class), else the
nearest task's of the same operator and dtype. The cost model reads loop-nest features, not knobs, so it stays
usable when a template changes (it ranks less well until it is trained again).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .database import TuningDatabase
from .records import Record
from .space import Config, ConfigSpace
from .task import Task, shape_distance

DATA = Path(__file__).with_name("shipped")
MODEL_SUFFIX = ".model.json"  # a class's cost model: <class>.model.json beside <class>.jsonl
NO_SHIPPED = "AUTOTUNE_NO_SHIPPED"  # set to 1: no shipped knowledge where a call does not say (`shipped_enabled`)


def shipped_enabled(flag: bool | None) -> bool:
    """Whether to use the shipped knowledge: `flag` where given, else unless AUTOTUNE_NO_SHIPPED=1 is set."""
    return flag if flag is not None else os.environ.get(NO_SHIPPED, "") != "1"


@dataclass(frozen=True)
class TargetClass:
    """Machines whose targets have `requires`: CPU features (LLVM's names) for llvm, the arch ("sm_80") for cuda
    (that arch or a later one)."""

    name: str
    kind: str
    requires: frozenset[str]

    def fits(self, target: dict[str, Any]) -> bool:
        """Whether `target` has every instruction this class's configs may use."""
        from .target import cpu_features

        if target.get("kind") != self.kind:
            return False
        if self.kind == "cuda":
            return _arch_number(str(target.get("arch", ""))) >= min(map(_arch_number, self.requires))
        return self.requires <= cpu_features(target)


def _arch_number(arch: str) -> int:
    """80 for "sm_80" (0 for an unknown arch: no class fits it)."""
    digits = arch.removeprefix("sm_").rstrip("a")
    return int(digits) if digits.isdigit() else 0


_AVX512 = frozenset({"avx512f", "avx512bw", "avx512vl"})
CLASSES = (  # most specific first within a kind: the first a target fits is its own
    TargetClass("x86-avx512-amx", "llvm", _AVX512 | {"avx512vnni", "avx512bf16", "amx-tile", "amx-int8", "amx-bf16"}),
    TargetClass("x86-avx512-vnni-bf16", "llvm", _AVX512 | {"avx512vnni", "avx512bf16"}),
    TargetClass("x86-avx512-vnni", "llvm", _AVX512 | {"avx512vnni"}),
    TargetClass("x86-avx512", "llvm", _AVX512),
    TargetClass("x86-avx2", "llvm", frozenset({"avx2", "fma"})),
    TargetClass("cuda-sm_90", "cuda", frozenset({"sm_90"})),
    TargetClass("cuda-sm_80", "cuda", frozenset({"sm_80"})),
)


def classes_of(target: dict[str, Any]) -> list[TargetClass]:
    """The classes whose knowledge `target` may use, its own first."""
    return [c for c in CLASSES if c.fits(target)]


def machine(record: Record) -> str:
    """The machine a shipped record was measured on: "sapphirerapids, 2 cores" (llvm) or "sm_90" (cuda)."""
    t = record.task.target
    if record.task.target_kind == "cuda":
        return str(t.get("arch", "cuda"))
    return f"{t.get('mcpu', 'generic')}, {t.get('num-cores', '?')} cores"


@dataclass(frozen=True)
class ShippedConfig:
    """A shipped config mapped onto a task's space, and where it came from."""

    config: Config
    record: Record  # the shipped record (its task: the same one on another machine, or the nearest one)
    target_class: TargetClass
    exact: bool  # the same task's (operator, shape, dtype), not the nearest one's

    def describe(self) -> str:
        where = f"shipped {self.target_class.name} knowledge ({machine(self.record)})"
        return where if self.exact else f"{where}, from {self.record.task}"


class Knowledge:
    """The shipped records a target may use, by class (its own first)."""

    def __init__(self, by_class: list[tuple[TargetClass, TuningDatabase]], classes: list[TargetClass] = (),
                 folder: Path = DATA):
        self.by_class = by_class
        self.classes, self.folder = list(classes), folder  # the target's classes, own first; the data's folder
        # the best record of each shipped task (dropped: those of other template versions), by class
        self._best = [(c, r) for c, db in by_class for key in db.task_keys() if (r := db.best(key)) is not None]

    @classmethod
    def load(cls, target: dict[str, Any], data: Path | None = None) -> Knowledge:
        """The knowledge shipped for the classes `target` fits (none where no file ships for them); `data`: the
        folder of the class files (default: the package's)."""
        folder = data if data is not None else DATA
        found = [(c, folder / f"{c.name}.jsonl") for c in classes_of(target)]
        return cls([(c, _class_records(str(path), path.stat().st_mtime_ns)) for c, path in found if path.is_file()],
                   classes_of(target), folder)

    def model(self) -> tuple[TargetClass, Path] | None:
        """The shipped cost model of the most specific class that has one, and its file (None: none ships)."""
        return next(((c, path) for c in self.classes if (path := self.folder / f"{c.name}{MODEL_SUFFIX}").is_file()),
                    None)

    def best(self) -> list[tuple[TargetClass, Record]]:
        """The best record of each shipped task (dropped: those of other template versions), by class."""
        return list(self._best)

    def config_for(self, task: Task, space: ConfigSpace) -> ShippedConfig | None:
        """The shipped config for `task` in `space` (module docstring), None where the knowledge has no task of
        its operator and dtype on `space`'s knobs."""
        names = {knob.name for knob in space.knobs}
        for target_class, _ in self.by_class:
            same_kind = [r for c, r in self._best if c == target_class and (r.task.op, r.task.dtype) ==
                         (task.op, task.dtype) and set(r.input.config.knobs) == names]
            if not same_kind:
                continue
            exact = [r for r in same_kind if r.task.params == task.params]
            record = exact[0] if exact else min(same_kind, key=lambda r: shape_distance(r.task, task))
            return ShippedConfig(space.get(space.nearest(record.input.config.knobs)[0]), record, target_class,
                                 bool(exact))
        return None


@functools.lru_cache(maxsize=16)
def _class_records(path: str, mtime_ns: int) -> TuningDatabase:
    """A class file's records, read once per version of the file (every build of a process asks)."""
    return TuningDatabase.open([path])
