"""The conv2d CPU template's path for int8 and bf16 on a CPU with AMX (`amx_intrinsics`): the convolution as an
implicit GEMM of output channels by output pixels, each call one 32 x 32 block summed over every tap (r, s).

- **Input**: copied, in each call of the kernel, into "D" [N, P C'/group, L] of 32-bit words, a word holding `group`
  consecutive channels of one pixel of the zero-padded image, whose rows (Wp = W + 2 padding pixels each) lie end
  to end, zero rows after them. A row of D is then one k group of a GEMM's B over pixels, as a B tile wants it.
- **Pixels**: output pixel (y, x) is m = y Wp + x, flattened over the padded width, so its tap (r, s) reads D at
  m + d (r Wp + s) (dilation d): the 32 pixels of a block are 32 consecutive words for every tap, a tap is an
  offset, and the block's call runs all taps. The columns x >= OW are computed and dropped (2 of 58 for a 3x3 on
  a 56-wide image).
- **Strides**: a convolution of stride t reads, for tap (r, s), the padded input's phase (r mod t, s mod t) (its
  pixels (t y' + r mod t, t x' + s mod t)) at (y + r div t, x + s div t). D then holds the P = t x t phases one
  after another as channels (P C' in all), each phase an image of width Wq = ceil(Wp / t), and the convolution is
  one of stride 1 with ceil(R / t) x ceil(S / t) taps over the phases: output pixel m = y Wq + x, a tap an offset
  again. The weight is zero for the taps a phase does not have (a 3x3 of stride 2: 16 taps' products for 9). A 1x1
  convolution of stride t reads one phase only (P = 1).
- **Weight**: A, packed ahead [R', S', K', P C'] (output channels K rounded up to whole 32-row blocks, channels C to
  whole AMX k steps, with zeros).
- **Output**: the sums C_acc [N, K', M'] (accumulation type) are written to NCHW in a pass of their own, rounded
  for bf16, contiguous along x.

Tiles: parallel n x k0 x m0, channel chunks c0, the mid tile (order a knob), then the call over the chunk's
channels and all taps.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from autotune.operators import in_type
from autotune.space import Config, ConfigSpace, Knob, choice_knob, split_knob
from autotune.task import Task
from autotune.templates import Relayout

from .amx_intrinsics import COLS, ROWS, TileInstruction, amx_instruction, pack_word, word_element
from .base import output_shape
from .common import pads_little, parallel_fused, split, tile_knob, vectorize_inner
from .dot_intrinsics import operand_value

WEIGHT_BLOCK = 256 * 1024  # bytes of weight one call reads at most in the untuned config (its chunk of channels)


def instruction(task: Task) -> TileInstruction | None:
    """The AMX instruction of a conv2d task, or None: not on this path (another dtype or CPU, a dilated strided
    convolution, fewer than 32 output channels, a 1 x S or R x 1 window, or channels padded by more than MAX_PAD to
    whole k steps). Output channels and pixels are padded to whole blocks however many that adds: the fp32 schedule
    is slower still."""
    ins = amx_instruction(task)
    p = task.shape
    if ins is None or task.op != "conv2d" or p["K"] < ROWS or (p["R"] == 1) != (p["S"] == 1):
        return None
    if p["stride"] > 1 and p["dilation"] > 1:
        return None
    return ins if pads_little(p["C"], ins.k_step) else None


@dataclass(frozen=True)
class Geometry:
    """How a convolution task maps onto the implicit GEMM (see the module's docstring)."""

    stride: int  # t
    phase_grid: int  # phases per axis: t, or 1 for a stride of 1 or a 1x1 window
    taps: tuple[int, int]  # (R', S')
    width: int  # Wq: words of a row of D
    pixels: int  # M = OH x Wq
    tap_step: tuple[int, int]  # words of D between taps r' and r' + 1, s' and s' + 1
    channels: int  # C' of one phase (whole k steps)

    @property
    def phases(self) -> int:
        return self.phase_grid ** 2


def geometry(task: Task, step: int) -> Geometry:
    """The task's implicit GEMM, its channels padded to whole `step`s."""
    p = task.shape
    t, d = p["stride"], p["dilation"]
    wp = p["W"] + 2 * p["padding"]
    channels = -(-p["C"] // step) * step
    oh = output_shape(task)[2]
    if t == 1:
        return Geometry(1, 1, (p["R"], p["S"]), wp, oh * wp, (d * wp, d), channels)
    width = -(-wp // t)
    return Geometry(t, t if p["R"] > 1 else 1, (-(-p["R"] // t), -(-p["S"] // t)), width, oh * width, (width, 1),
                    channels)


def define_space(task: Task, ins: TileInstruction) -> ConfigSpace:
    """Tiles of output channels and pixels (whole 32-blocks), channel chunks (whole k steps) and the mid order."""
    step, geo = ins.k_step // ins.group, geometry(task, ins.k_step)
    words = geo.phases * geo.channels // ins.group
    return ConfigSpace(knobs=(
        _blocks_knob("tile_k", task.shape["K"], ROWS),
        _blocks_knob("tile_m", geo.pixels, COLS),
        tile_knob("tile_c", words, 2, inner_max=words, lanes=step),
        choice_knob("mid_order", ("km", "mk")),
    ))


def _blocks_knob(name: str, extent: int, block: int) -> Knob:
    """Splits (outer, mid, block) of `extent` rounded up to whole blocks."""
    tiles = split_knob(name, -(-extent // block), 2).candidates
    return Knob(name, "split", tuple((*t, block) for t in tiles))


def preferences(task: Task, ins: TileInstruction) -> dict[str, Any]:
    """Untuned config: one block per tile, all channels in one call unless its weight exceeds WEIGHT_BLOCK."""
    geo = geometry(task, ins.k_step)
    words = geo.phases * geo.channels // ins.group
    per_word = ROWS * geo.taps[0] * geo.taps[1] * ins.group * ins.element_bytes
    chunk = max(ins.k_step // ins.group, min(words, WEIGHT_BLOCK // per_word))
    return {"tile_k": (ROWS, 1), "tile_m": (COLS, 2), "tile_c": (chunk,), "mid_order": "km"}


def relayouts(task: Task, ins: TileInstruction, cfg: Config) -> tuple[Relayout, ...]:
    """The weight [K, C, R, S] arrives as [R', S', K', P C'], zero-padded: tap (r, s) at (r div t, s div t), its
    channels in phase (r mod t, s mod t)'s block."""
    geo = geometry(task, ins.k_step)
    t, grid, channels = geo.stride, geo.phase_grid, geo.channels
    shape = (*geo.taps, math.prod(cfg["tile_k"]), geo.phases * channels)
    return (Relayout(1, lambda k, c, r, s: (r // t, s // t, k, (r % t * grid + s % t) * channels + c), shape),)


def apply(task: Task, cfg: Config, ins: TileInstruction):
    """Build the schedule of one config (raises on an illegal one)."""
    from tvm import s_tir

    p, geo = task.shape, geometry(task, ins.k_step)
    kp, mp = math.prod(cfg["tile_k"]), math.prod(cfg["tile_m"])
    if cfg["tile_k"][-1] != ROWS or cfg["tile_m"][-1] != COLS or kp < p["K"] or mp < geo.pixels:
        raise RuntimeError(f"tiles {cfg['tile_k']} x {cfg['tile_m']} are not 32-blocks covering "
                           f"{p['K']} x {geo.pixels}")
    kc = cfg["tile_c"][-1] * ins.group
    if kc % ins.k_step:
        raise RuntimeError(f"a chunk of {kc} channels is not whole AMX steps of {ins.k_step}")
    sch = s_tir.Schedule(_conv_func(task, ins, kp, mp))
    blk = sch.get_sblock("C_acc")
    n, k, m, r, s, c, cl = sch.get_loops(blk)
    k0, k1, k2 = split(sch, k, cfg["tile_k"])
    m0, m1, m2 = split(sch, m, cfg["tile_m"])
    c0, c1 = split(sch, c, cfg["tile_c"])
    mid = (k1, m1) if cfg["mid_order"] == "km" else (m1, k1)
    if cfg["tile_c"][0] == 1:
        sch.reorder(n, k0, m0, *mid, c0, k2, m2, r, s, c1, cl)
    else:
        sch.reorder(n, k0, m0, c0, *mid, k2, m2, r, s, c1, cl)
    if geo.taps == (1, 1):  # the tap loops, of one iteration, into the channels' (as `desc_1x1` has them)
        sch.fuse(r, s, c1)
    outer = parallel_fused(sch, [n, k0, m0])
    words = sch.get_sblock("D")
    wn, wc, wf = sch.get_loops(words)
    sch.split(wf, (None, geo.width))
    parallel_fused(sch, [wn, wc])
    out = sch.get_sblock("out")
    parallel_fused(sch, sch.get_loops(out)[:2])
    ow = output_shape(task)[3]
    vectorize_inner(sch, out, next(w for w in (16, 8, 4, 2, 1) if ow % w == 0))
    init = sch.decompose_reduction(blk, c0)
    vectorize_inner(sch, init, 16)
    sch.tensorize(k2, ins.conv_intrin(kc, geo.taps, geo.tap_step, task.element.storage))
    sch.annotate(outer, "pragma_import_llvm", ins.llvm_import)
    return sch


def phase_element(task: Task, geo: Geometry, data):
    """(n, channel, f) -> the value D holds for `channel` (of all phases: P C') at pixel f of its phase: the
    zero-padded input `data` there, zero past C."""
    from tvm import te, tirx

    p = task.shape
    pad, height, width, t, grid, wq = p["padding"], p["H"], p["W"], geo.stride, geo.phase_grid, geo.width

    def element(n, channel, f):
        phase, c = channel // geo.channels, channel % geo.channels
        y = f // wq * t + phase // grid - pad  # the input pixel, in the unpadded image
        x = f % wq * t + phase % grid - pad
        inside = [y >= 0, y < height, x >= 0, x < width]
        if geo.channels != p["C"]:
            inside.append(c < p["C"])
        index = (n, c if geo.channels == p["C"] else te.min(c, p["C"] - 1), y, x)
        return tirx.if_then_else(tirx.all(*inside), data[index], tirx.const(0, data.dtype))

    return element


@functools.lru_cache(maxsize=64)
def _conv_func(task: Task, ins: TileInstruction, kp: int, mp: int):
    """D (the input as words), C_acc [N, kp, mp] = the implicit GEMM, and out [N, K, OH, OW] read from it.
    Cached: configs that differ in their schedule only share it."""
    from tvm import te

    p, kind, g, geo = task.shape, task.element, ins.group, geometry(task, ins.k_step)
    (taps_r, taps_s), (step_r, step_s), wq = geo.taps, geo.tap_step, geo.width
    rows = -(-(mp + (taps_r - 1) * step_r + (taps_s - 1) * step_s) // wq)  # of D: every tap of every block
    words = geo.phases * geo.channels // g
    data = te.placeholder((p["N"], p["C"], p["H"], p["W"]), kind.storage, name="data")
    weight = te.placeholder((taps_r, taps_s, kp, geo.phases * geo.channels), kind.storage, name="weight")

    element = phase_element(task, geo, data)
    d = te.compute((p["N"], words, rows * wq),
                   lambda n, c, f: pack_word([element(n, c * g + i, f) for i in range(g)], ins), name="D")
    r = te.reduce_axis((0, taps_r), name="r")
    s = te.reduce_axis((0, taps_s), name="s")
    c = te.reduce_axis((0, words), name="c")
    cl = te.reduce_axis((0, g), name="cg")
    acc = kind.accumulate
    c_acc = te.compute(
        (p["N"], kp, mp),
        lambda n, k, m: te.sum(operand_value(weight[r, s, k, c * g + cl], kind.storage, acc)
                               * word_element(d[n, c, m + r * step_r + s * step_s], cl, ins),
                               axis=[r, s, c, cl]),
        name="C_acc")
    out = te.compute(output_shape(task), lambda n, k, y, x: in_type(c_acc[n, k, y * wq + x], kind.output),
                     name="out")
    return te.create_prim_func([data, weight, out])
