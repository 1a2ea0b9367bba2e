"""CPU template for conv2d NCHW, with a packed-channel (NCHW[x]c-style) and a direct variant; also grouped.

Loops of block "conv": n, k, y, x (spatial), c, r, s (reduction). Tiling:
  parallel [n, k0, y0, x0] -> (c0 when "c_outer") -> mid [k1, y1, x1] -> (c0) -> c1, r, s
  (order a knob) -> register tile.
Variant "packed" (vec_axis "k"): register tile x2 x k2, k2 vectorised over output channels;
the weight is re-laid out to [K/k2, C, R, S, k2] and the accumulator to [N, K/k2, H, W, k2], so
every vector load/store is contiguous. The weight's copy is a PREPACK block: the compiled kernel
(`Template.kernel`) takes the weight packed ahead (`relayouts`), as a model's constant weight is,
once at build time; the schedule's trace keeps the copy, for a MetaSchedule database.
Variant "direct" (vec_axis "x"): register tile k2 x x2, vectorised over output width, NCHW
accumulator, weight read in place.
A grouped convolution (`group_conv2d`) is `groups` convolutions side by side: k is split into the group g and
the channel within it, g joins the parallel loops, and the tiles of k and c are tiles of one group's channels,
so a vector of output channels never spans two groups (their input channels differ).
bf16 and int8 conv2d tasks on a CPU with AMX take the implicit-GEMM path of `conv2d_amx`, int8 ones on a CPU with
AVX-512 VNNI only that of `conv2d_dot` (`conv_space` chooses); other narrow convolutions this schedule, with their
inputs widened, sums in the accumulation type and the bf16 rounding done as each tile is written back.
"""

from __future__ import annotations

from typing import Any

from autotune.space import Config, ConfigSpace, choice_knob
from autotune.task import Task
from autotune.templates import PREPACK, Relayout, Template, prim_func

from . import conv2d_amx, conv2d_dot
from .base import conv_groups, output_shape
from .common import (
    CPU_DTYPES,
    VECTOR_LANES,
    annotate_unroll,
    decompose,
    parallel_fused,
    register_budget,
    split,
    tile_knob,
    unroll_knob,
    vector_lanes,
    vectorize_inner,
    vectorize_loop,
)

REDUCTION_ORDERS = ("c1_r_s", "r_s_c1")


def define_space(task: Task) -> ConfigSpace:
    """Tiles of k, y, x, c (of one group's channels); variant; loop orders; padding placement; unrolling."""
    p = task.shape
    _, k_group, c_group = conv_groups(task)
    _, _, oh, ow = output_shape(task)
    return ConfigSpace(knobs=(
        choice_knob("vec_axis", ("k", "x")),
        tile_knob("tile_k", k_group, 3, inner_max=64, lanes=vector_lanes(task)),
        tile_knob("tile_y", oh, 2, inner_max=oh),
        tile_knob("tile_x", ow, 3, inner_max=16),
        tile_knob("tile_c", c_group, 2, inner_max=c_group),
        choice_knob("c0_outer", (True, False)),
        choice_knob("reduction_order", REDUCTION_ORDERS),
        choice_knob("pad", ("root", "inline") if p["padding"] > 0 else ("none",)),
        unroll_knob(),
    ), register=("tile_x", "tile_k"), max_register_tile=register_budget(task))


def apply(task: Task, cfg: Config):
    """Build the schedule of one config (raises on an illegal one)."""
    from tvm import s_tir

    sch = s_tir.Schedule(prim_func(task))
    blk = sch.get_sblock("conv")
    n, k, y, x, c, r, s = sch.get_loops(blk)
    groups, k_group, _ = conv_groups(task)
    g = []  # the group loop, outside the tiles of k
    if groups > 1:
        *g, k = sch.split(k, [groups, k_group])
    k0, k1, k2 = split(sch, k, cfg["tile_k"])
    y0, y1 = split(sch, y, cfg["tile_y"])
    x0, x1, x2 = split(sch, x, cfg["tile_x"])
    c0, c1 = split(sch, c, cfg["tile_c"])
    inner_red = [c1, r, s] if cfg["reduction_order"] == "c1_r_s" else [r, s, c1]
    packed = cfg["vec_axis"] == "k"
    reg = [x2, k2] if packed else [k2, x2]
    mid = [c0, k1, y1, x1] if cfg["c0_outer"] else [k1, y1, x1, c0]
    sch.reorder(n, *g, k0, y0, x0, *mid, *inner_red, *reg)
    acc = sch.cache_write(blk, 0, "global")
    kb = cfg["tile_k"][-1]
    if packed:
        sch.transform_layout(blk, ("write", 0), lambda a, b, h, w: (a, b // kb, h, w, b % kb))
        wpack = _pack_weight(sch, blk, kb)
    outer = parallel_fused(sch, [n, *g, k0, y0, x0])
    sch.reverse_compute_at(acc, outer)
    if task.element.output != task.element.accumulate:  # rounded (bf16) as each tile is written back
        sch.reverse_compute_inline(sch.get_sblock("conv_out"))
    sch.unroll(reg[0])
    vectorize_loop(sch, reg[1])
    decompose(sch, blk, mid[0])
    vectorize_inner(sch, acc, VECTOR_LANES)
    if packed:
        _parallel_outer_loops(sch, wpack, 1)
        vectorize_inner(sch, wpack, VECTOR_LANES)
    _place_pad(sch, cfg["pad"])
    annotate_unroll(sch, outer, cfg["auto_unroll"])
    return sch


def preferences(task: Task) -> dict[str, Any]:
    """The config an untuned build prefers (`Template.preferences`): the packed variant, register tiles of 8
    columns x one vector of output channels (8 accumulators on AVX-512), the padding run first."""
    return {"vec_axis": "k", "tile_k": (vector_lanes(task), 2), "tile_y": (1,), "tile_x": (8, 1), "tile_c": (32,),
            "c0_outer": True, "reduction_order": "c1_r_s", "pad": "root", "auto_unroll": 16}


def _weight_map(kb: int):
    """Weight [K, C, R, S] index -> its index in [K/kb, C, R, S, kb] (an output-channel block contiguous)."""
    return lambda k, c, r, s: (k // kb, c, r, s, k % kb)


def relayouts(task: Task, cfg: Config) -> tuple[Relayout, ...]:
    """The packed variant's kernel takes the weight packed ahead."""
    return (Relayout(1, _weight_map(cfg["tile_k"][-1])),) if cfg["vec_axis"] == "k" else ()


def _pack_weight(sch, blk, kb: int):
    """Copy weight [K, C, R, S] into [K/kb, C, R, S, kb], in a PREPACK block."""
    wpack = sch.cache_read(blk, "weight", "global")
    sch.transform_layout(wpack, ("write", 0), _weight_map(kb))
    sch.annotate(wpack, PREPACK, 1)
    k, c, r, s = sch.get_loops(wpack)
    ko, ki = split(sch, k, (int(sch.get(k).extent) // kb, kb))
    sch.reorder(ko, c, r, s, ki)
    return wpack


def _place_pad(sch, where: str) -> None:
    """Inline the padding into the convolution, or run it first as a parallel loop nest."""
    if where == "inline":
        sch.compute_inline(sch.get_sblock("pad"))
    elif where == "root":
        pad = sch.get_sblock("pad")
        _parallel_outer_loops(sch, pad, 2)
        vectorize_inner(sch, pad, VECTOR_LANES)


def _parallel_outer_loops(sch, block, count: int) -> None:
    """Fuse the first `count` loops of `block` and run them in parallel."""
    parallel_fused(sch, sch.get_loops(block)[:count])


def _path(task: Task):
    """(instruction, module of its schedules) of a convolution's narrow path (`conv2d_amx`, else `conv2d_dot`:
    `define_space`, `apply`, `preferences`, `relayouts`), or (None, None) for the fp32 schedules."""
    for path in (conv2d_amx, conv2d_dot):
        ins = path.instruction(task)
        if ins is not None:
            return ins, path
    return None, None


def conv_space(task: Task) -> ConfigSpace:
    """The space of a convolution task: its narrow path's where it has one, else the fp32 schedules' (narrow
    inputs widened, summed in their accumulation type)."""
    ins, path = _path(task)
    return path.define_space(task, ins) if path else define_space(task)


def conv_apply(task: Task, cfg: Config):
    """Schedule of one config, on the path `conv_space` chose."""
    ins, path = _path(task)
    return path.apply(task, cfg, ins) if path else apply(task, cfg)


def conv_relayouts(task: Task, cfg: Config) -> tuple[Relayout, ...]:
    """The weight's layout, on the path `conv_space` chose."""
    ins, path = _path(task)
    return path.relayouts(task, ins, cfg) if path else relayouts(task, cfg)


def conv_preferences(task: Task) -> dict[str, Any]:
    """The untuned config, on the path `conv_space` chose."""
    ins, path = _path(task)
    return path.preferences(task, ins) if path else preferences(task)


# compatible_versions: the fp32-only versions (the same fp32 spaces and schedules)
CONV2D_CPU = Template("conv2d_cpu", "conv2d", "llvm", conv_space, conv_apply, conv_relayouts,
                      compatible_versions=("013a49ea51e2",), preferences=conv_preferences, dtypes=CPU_DTYPES)
GROUP_CONV2D_CPU = Template("group_conv2d_cpu", "group_conv2d", "llvm", define_space, apply, relayouts,
                            compatible_versions=("adec9acf9256",), preferences=preferences, dtypes=CPU_DTYPES)
