"""The template interface: a space of knobs for a task, and a schedule for a config."""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from autotune.space import Config, ConfigSpace
from autotune.task import Task


@dataclass(frozen=True)
class Template:
    """A schedule template. `define_space` and `apply` are plain functions of the task.

    `apply(task, config)` returns a `tvm.s_tir.Schedule` of the task's PrimFunc (the one
    `prim_func(task)` builds); it raises (any exception) when the config is not legal.
    """

    name: str
    op: str
    target_kind: str
    define_space: Callable[[Task], ConfigSpace]
    apply: Callable[[Task, Config], object]

    @cached_property
    def version(self) -> str:
        """Hash of the template's source and of the helpers it uses from its own package.

        Records made by other code are told apart: an edited template changes what an index means.
        """
        module = sys.modules[self.apply.__module__]
        package = module.__name__.split(".")[0]
        used = {getattr(v, "__module__", None) or getattr(v, "__name__", "") for v in vars(module).values()}
        names = sorted({module.__name__} | {m for m in used if m and m.split(".")[0] == package and m in sys.modules
                                            and m != __name__})  # the interface itself does not schedule
        src = "".join(inspect.getsource(sys.modules[m]) for m in names)
        return hashlib.sha1(src.encode()).hexdigest()[:12]


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
