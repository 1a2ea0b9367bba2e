"""Helpers shared by the templates (a convolution's groups, an op's output shape, a fresh GEMM schedule).

The template interface itself lives in `autotune.templates`; its names are re-exported here for templates written
against `search_spaces.base`.
"""

from __future__ import annotations

from autotune.templates import PREPACK, Relayout, Template, prim_func, relayout_array
from autotune.task import Task

__all__ = ["PREPACK", "Relayout", "Template", "conv_groups", "gemm_schedule", "output_shape", "prim_func",
           "relayout_array"]


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
