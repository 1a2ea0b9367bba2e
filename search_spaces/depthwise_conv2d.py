"""CPU template for depthwise conv2d NCHW (multiplier 1), packed-channel or direct variant.

Loops of block "conv": n, c, y, x (spatial), r, s (reduction). Tiling:
  parallel [n, c0, y0] -> y1 -> x0 -> r, s -> register tile.
Variant "c" (packed): register tile x1 x c1, vectorised over channels; the padded input is
produced as [N, C/c1, H, W, c1] (the padding block, or a copy of the input, does the
re-layout), the weight is read as [C/c1, R, S, 1, c1], the accumulator is [N, C/c1, OH, OW, c1].
The weight's copy is a PREPACK block: the compiled kernel takes the weight packed ahead (a layer's
weight is packed once, when the model is built), as the conv2d template's packed variant does.
Variant "x" (direct): register tile c1 x x1, vectorised over output width, NCHW throughout.
The padded/packed input is produced per parallel tile ("tile"), up front ("root"), or, for
the direct variant, inlined into the convolution ("inline").
"""

from __future__ import annotations

from typing import Any

from autotune.space import Config, ConfigSpace, choice_knob
from autotune.task import Task
from autotune.templates import PREPACK, Relayout, Template, prim_func
from .common import (
    CPU_DTYPES,
    VECTOR_LANES,
    annotate_unroll,
    decompose,
    parallel_fused,
    split,
    tile_knob,
    unroll_knob,
    vector_lanes,
    vectorize_inner,
    vectorize_loop,
)


def define_space(task: Task) -> ConfigSpace:
    """Tiles of c, y, x; variant; input placement; unrolling."""
    _, channels, oh, ow = (int(d) for d in task.opdef.output_shape(task.shape))
    return ConfigSpace(knobs=(
        choice_knob("vec_axis", ("c", "x")),
        tile_knob("tile_c", channels, 2, inner_max=64, lanes=vector_lanes(task), also_rows=4),
        tile_knob("tile_y", oh, 2, inner_max=oh),
        tile_knob("tile_x", ow, 2, inner_max=32),
        choice_knob("input_at", ("tile", "root", "inline")),
        unroll_knob(),
    ), register=("tile_x", "tile_c"))


def apply(task: Task, cfg: Config):
    """Build the schedule of one config (raises on an illegal one)."""
    from tvm import s_tir

    sch = s_tir.Schedule(prim_func(task))
    blk = sch.get_sblock("conv")
    n, c, y, x, r, s = sch.get_loops(blk)
    c0, c1 = split(sch, c, cfg["tile_c"])
    y0, y1 = split(sch, y, cfg["tile_y"])
    x0, x1 = split(sch, x, cfg["tile_x"])
    packed = cfg["vec_axis"] == "c"
    reg = [x1, c1] if packed else [c1, x1]
    sch.reorder(n, c0, y0, y1, x0, r, s, *reg)
    acc = sch.cache_write(blk, 0, "global")
    cb = cfg["tile_c"][-1]
    if packed:
        sch.transform_layout(blk, ("write", 0), lambda a, b, h, w: (a, b // cb, h, w, b % cb))
        _pack_weight(sch, blk, cb)
    outer = parallel_fused(sch, [n, c0, y0])
    sch.reverse_compute_at(acc, outer)
    if task.element.output != task.element.accumulate:  # rounded (bf16) as each tile is written back
        sch.reverse_compute_inline(sch.get_sblock("conv_out"))
    sch.unroll(reg[0])
    vectorize_loop(sch, reg[1])
    decompose(sch, blk, r)
    vectorize_inner(sch, acc, VECTOR_LANES)
    _place_input(sch, blk, task, cfg["input_at"], cb if packed else 0, outer)
    annotate_unroll(sch, outer, cfg["auto_unroll"])
    return sch


def _place_input(sch, blk, task: Task, where: str, cb: int, outer) -> None:
    """Produce the (padded, and when cb > 0 channel-packed) input where the config asks."""
    has_pad = task.shape["padding"] > 0
    if cb == 0 and (where == "inline" or not has_pad):
        if has_pad:
            sch.compute_inline(sch.get_sblock("pad"))
        return
    if where == "inline":
        raise ValueError("the packed variant cannot inline its input re-layout")
    producer = sch.get_sblock("pad") if has_pad else sch.cache_read(blk, "data", "global")
    if cb > 0:  # [N, C, H, W] -> [N, C/cb, H, W, cb], iterated in that order (cb innermost)
        index_map = lambda a, b, h, w: (a, b // cb, h, w, b % cb)  # noqa: E731
        sch.transform_layout(producer, ("write", 0), index_map)
        sch.transform_block_layout(producer, index_map)
    if where == "tile":
        sch.compute_at(producer, outer)
    else:
        parallel_fused(sch, sch.get_loops(producer)[:3])
    vectorize_inner(sch, producer, VECTOR_LANES)


def preferences(task: Task) -> dict[str, Any]:
    """The config an untuned build prefers (`Template.preferences`): the packed variant, register tiles of 8
    columns x one vector of channels, the input padded per parallel tile."""
    return {"vec_axis": "c", "tile_c": (vector_lanes(task),), "tile_y": (1,), "tile_x": (8,), "input_at": "tile",
            "auto_unroll": 64}


def _weight_map(cb: int):
    """Weight [C, 1, R, S] index -> its index in [C/cb, R, S, 1, cb] (a channel block contiguous)."""
    return lambda b, one, h, w: (b // cb, h, w, one, b % cb)


def relayouts(task: Task, cfg: Config) -> tuple[Relayout, ...]:
    """The packed variant's kernel takes the weight packed ahead."""
    return (Relayout(1, _weight_map(cfg["tile_c"][-1])),) if cfg["vec_axis"] == "c" else ()


def _pack_weight(sch, blk, cb: int) -> None:
    """Copy weight [C, 1, R, S] into [C/cb, R, S, 1, cb], in a PREPACK block (parallel over channel blocks)."""
    wpack = sch.cache_read(blk, "weight", "global")
    sch.transform_layout(wpack, ("write", 0), _weight_map(cb))
    sch.annotate(wpack, PREPACK, 1)
    c, one, r, s = sch.get_loops(wpack)
    co, ci = split(sch, c, (int(sch.get(c).extent) // cb, cb))
    sch.reorder(co, one, r, s, ci)
    sch.parallel(co)


# compatible_versions: the float32-only version (the same float32 space and schedules)
DEPTHWISE_CPU = Template("depthwise_conv2d_cpu", "depthwise_conv2d", "llvm", define_space, apply, relayouts,
                         preferences=preferences, dtypes=CPU_DTYPES, compatible_versions=("9ce2b6f3357c",))
