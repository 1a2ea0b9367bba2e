"""The conv2d CPU template's path for int8 on a CPU with AVX-512 VNNI but no AMX: the implicit GEMM of
`conv2d_amx` (the same input copy, phases and flattened pixels: `conv2d_amx.geometry`), with a register tile of
pixels by output channels and one `vpdpbusd` (`dot_intrinsics`) per pixel and 16 output channels for 4 input
channels.

- **Input**: copied into D [N, P C'/4, L, 4] bytes, shifted by 128 into uint8 (VNNI multiplies unsigned by
  signed bytes): a pixel's 4 channels are the instruction's broadcast operand.
- **Weight**: packed ahead [R', S', K'/16, P C'/4, 16, 4] (output channels to whole 16-lane groups): 16 output
  channels x 4 input channels, the instruction's other operand, are 64 contiguous bytes.
- **Sums**: C_acc [N, K'/16, M', 16]; the 128 times each output channel's weight sum ("W_sum") is taken off as
  they are written to NCHW, in a pass of their own: exact.

Tiles: parallel n x k0 x m0, channel chunks c0, the mid tile, then taps and the chunk's channels, then the register
tile of m2 pixels x k2 lane groups, each one instruction (tensorized).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from autotune.space import Config, ConfigSpace, choice_knob
from autotune.task import Task
from autotune.templates import Relayout

from .base import output_shape
from .common import annotate_unroll, pads_little, parallel_fused, register_budget, split, tile_knob, unroll_knob
from .conv2d_amx import geometry, phase_element
from .dot_intrinsics import LANES, DotInstruction, dot_instruction, operand_value

REG_ROWS = 14  # register-tile pixels (m2) at most
REG_COLS = 64  # register-tile output channels (k2) at most: 4 instructions a pixel


def instruction(task: Task) -> DotInstruction | None:
    """VNNI for an int8 conv2d on a CPU that has it (the AMX path, where there is AMX, comes first), or None: at
    least 16 output channels and channels padded by at most MAX_PAD to whole groups of 4 (or fewer channels than a
    group, as an image's 3: padded to 4 it runs 6.6x faster than widened), not dilated and strided."""
    p = task.shape
    if task.op != "conv2d" or task.dtype != "int8" or p["K"] < LANES or (p["R"] == 1) != (p["S"] == 1):
        return None
    if p["stride"] > 1 and p["dilation"] > 1:
        return None
    ins = dot_instruction(task, 4 * -(-p["C"] // 4))
    channels = p["C"] < ins.group or pads_little(p["C"], ins.group) if ins else False
    return ins if channels and pads_little(p["K"], LANES) else None


def define_space(task: Task, ins: DotInstruction) -> ConfigSpace:
    """Tiles of output channels (whole 16-lane groups), pixels and channel groups; unrolling."""
    geo = geometry(task, ins.group)
    groups = geo.phases * geo.channels // ins.group
    return ConfigSpace(knobs=(
        tile_knob("tile_k", task.shape["K"], 3, inner_max=REG_COLS, lanes=LANES, pad=True),
        tile_knob("tile_m", geo.pixels, 3, inner_max=REG_ROWS, pad=True),
        tile_knob("tile_c", groups, 2, inner_max=groups),
        choice_knob("mid_order", ("km", "mk")),
        unroll_knob(),
    ), register=("tile_m", "tile_k"), max_register_tile=register_budget(task))


def preferences(task: Task, ins: DotInstruction) -> dict[str, Any]:
    """Untuned config: 7 pixels x 4 lane groups (28 accumulators), chunks of 64 channels."""
    return {"tile_k": (64, 1), "tile_m": (7, 1), "tile_c": (16,), "mid_order": "km", "auto_unroll": 64}


def relayouts(task: Task, ins: DotInstruction, cfg: Config) -> tuple[Relayout, ...]:
    """The weight [K, C, R, S] arrives as [R', S', K'/16, P C'/4, 16, 4], zero-padded."""
    geo = geometry(task, ins.group)
    t, grid, channels, g = geo.stride, geo.phase_grid, geo.channels, ins.group

    def index(k, c, r, s):
        cc = (r % t * grid + s % t) * channels + c
        return r // t, s // t, k // LANES, cc // g, k % LANES, cc % g

    shape = (*geo.taps, math.prod(cfg["tile_k"]) // LANES, geo.phases * channels // g, LANES, g)
    return (Relayout(1, index, shape),)


def apply(task: Task, cfg: Config, ins: DotInstruction):
    """Build the schedule of one config (raises on an illegal one)."""
    from tvm import s_tir

    geo = geometry(task, ins.group)
    kp, mp = math.prod(cfg["tile_k"]), math.prod(cfg["tile_m"])
    if kp < task.shape["K"] or mp < geo.pixels or cfg["tile_k"][-1] % LANES:
        raise RuntimeError(f"tiles {cfg['tile_k']} x {cfg['tile_m']} do not cover {task.shape['K']} x {geo.pixels}")
    tile_k = (*cfg["tile_k"][:-1], cfg["tile_k"][-1] // LANES)  # in lane groups
    sch = s_tir.Schedule(_conv_func(task, ins, kp, mp))
    blk = sch.get_sblock("C_acc")
    n, kb, m, lane, r, s, c, cl = sch.get_loops(blk)
    k0, k1, k2 = split(sch, kb, tile_k)
    m0, m1, m2 = split(sch, m, cfg["tile_m"])
    c0, c1 = split(sch, c, cfg["tile_c"])
    mid = (k1, m1) if cfg["mid_order"] == "km" else (m1, k1)
    sch.reorder(n, k0, m0, c0, *mid, r, s, c1, m2, k2, lane, cl)
    outer = parallel_fused(sch, [n, k0, m0])
    words = sch.get_sblock("D")
    wn, wc, wf, wl = sch.get_loops(words)
    sch.split(wf, (None, geo.width))
    parallel_fused(sch, [wn, wc])
    parallel_fused(sch, sch.get_loops(sch.get_sblock("W_sum"))[:1])
    out = sch.get_sblock("out")
    parallel_fused(sch, sch.get_loops(out)[:2])
    sch.unroll(m2)
    sch.unroll(k2)
    init = sch.decompose_reduction(blk, c0)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(lane, ins.intrin(ins.a_type, task.element.storage))
    annotate_unroll(sch, outer, cfg["auto_unroll"])
    return sch


@functools.lru_cache(maxsize=64)
def _conv_func(task: Task, ins: DotInstruction, kp: int, mp: int):
    """D (the input shifted into uint8), W_sum, C_acc [N, kp/16, mp, 16] and out [N, K, OH, OW] read from it less
    128 W_sum. Cached: configs that differ in their schedule only share it."""
    from tvm import te

    p, kind, g, geo = task.shape, task.element, ins.group, geometry(task, ins.group)
    (taps_r, taps_s), (step_r, step_s), wq = geo.taps, geo.tap_step, geo.width
    rows = -(-(mp + (taps_r - 1) * step_r + (taps_s - 1) * step_s) // wq)
    groups, acc = geo.phases * geo.channels // g, kind.accumulate
    data = te.placeholder((p["N"], p["C"], p["H"], p["W"]), kind.storage, name="data")
    weight = te.placeholder((taps_r, taps_s, kp // LANES, groups, LANES, g), kind.storage, name="weight")

    element = phase_element(task, geo, data)
    d = te.compute((p["N"], groups, rows * wq, g),  # shifted by 128
                   lambda n, cg, f, gl: (element(n, cg * g + gl, f).astype("int32") + 128).astype(ins.a_type),
                   name="D")
    wr = te.reduce_axis((0, taps_r), name="wr")
    ws = te.reduce_axis((0, taps_s), name="ws")
    wc = te.reduce_axis((0, groups), name="wc")
    wl = te.reduce_axis((0, g), name="wl")
    w_sum = te.compute((kp // LANES, LANES), lambda kb, lane: te.sum(
        weight[wr, ws, kb, wc, lane, wl].astype(acc), axis=[wr, ws, wc, wl]), name="W_sum")
    r = te.reduce_axis((0, taps_r), name="r")
    s = te.reduce_axis((0, taps_s), name="s")
    c = te.reduce_axis((0, groups), name="c")
    cl = te.reduce_axis((0, g), name="cg")
    c_acc = te.compute(
        (p["N"], kp // LANES, mp, LANES),
        lambda n, kb, m, lane: te.sum(operand_value(d[n, c, m + r * step_r + s * step_s, cl], ins.a_type, acc)
                                      * operand_value(weight[r, s, kb, c, lane, cl], kind.storage, acc),
                                      axis=[r, s, c, cl]),
        name="C_acc")
    out = te.compute(output_shape(task), lambda n, k, y, x: c_acc[n, k // LANES, y * wq + x, k % LANES]
                     - 128 * w_sum[k // LANES, k % LANES], name="out")
    return te.create_prim_func([data, weight, out])
