"""The conv2d CPU template's path for int8 and bf16 on a CPU with AMX (`amx_intrinsics`): the convolution as an
implicit GEMM of output channels by output pixels, each call one 32 x 32 block summed over every tap (r, s).

- **Input**: copied, in each call of the kernel, into "D" [N, C'/group, L] of 32-bit words, a word holding `group`
  consecutive channels of one pixel of the zero-padded image, whose rows (Wp = W + 2 padding pixels each) lie end
  to end, zero rows after them. A row of D is then one k group of a GEMM's B over pixels, as a B tile wants it.
- **Pixels**: output pixel (y, x) is m = y Wp + x, flattened over the padded width, so its tap (r, s) reads D at
  m + d (r Wp + s) (dilation d): the 32 pixels of a block are 32 consecutive words for every tap, a tap is an
  offset, and the block's call runs all taps. The columns x >= OW are computed and dropped (2 of 58 for a 3x3 on
  a 56-wide image).
- **Weight**: A, packed ahead [R, S, K', C'] (output channels K rounded up to whole 32-row blocks, channels C to
  whole AMX k steps, with zeros).
- **Output**: the sums C_acc [N, K', M'] (accumulation type) are written to NCHW in a pass of their own, rounded
  for bf16, contiguous along x.

Tiles: parallel n x k0 x m0, channel chunks c0, the mid tile (order a knob), then the call over the chunk's
channels and all taps. Stride 1 only (a strided tap is not an offset in this layout); other convolutions take the
fp32 schedule with widened inputs.
"""

from __future__ import annotations

import functools
import math
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
    """The AMX instruction of a conv2d task, or None: not on this path (another dtype or CPU, a stride, fewer than
    32 output channels, a 1 x S or R x 1 window, or channels padded by more than MAX_PAD to whole k steps).
    Output channels and pixels are padded to whole blocks however many that adds: the fp32 schedule is slower
    still."""
    ins = amx_instruction(task)
    p = task.shape
    if ins is None or task.op != "conv2d" or p["stride"] != 1 or p["K"] < ROWS or (p["R"] == 1) != (p["S"] == 1):
        return None
    return ins if pads_little(p["C"], ins.k_step) else None


def _channels(task: Task, ins: TileInstruction) -> int:
    """C': the input channels rounded up to whole k steps."""
    return -(-task.shape["C"] // ins.k_step) * ins.k_step


def _pixels(task: Task) -> tuple[int, int]:
    """(Wp, M): the padded width and the flattened output pixels (OH rows of Wp)."""
    p = task.shape
    wp = p["W"] + 2 * p["padding"]
    return wp, output_shape(task)[2] * wp


def _tap_step(task: Task) -> tuple[int, int]:
    """Words of D between taps r and r + 1, and s and s + 1."""
    d = task.shape["dilation"]
    return d * _pixels(task)[0], d


def define_space(task: Task, ins: TileInstruction) -> ConfigSpace:
    """Tiles of output channels and pixels (whole 32-blocks), channel chunks (whole k steps) and the mid order."""
    step = ins.k_step // ins.group
    return ConfigSpace(knobs=(
        _blocks_knob("tile_k", task.shape["K"], ROWS),
        _blocks_knob("tile_m", _pixels(task)[1], COLS),
        tile_knob("tile_c", _channels(task, ins) // ins.group, 2, inner_max=_channels(task, ins), lanes=step),
        choice_knob("mid_order", ("km", "mk")),
    ))


def _blocks_knob(name: str, extent: int, block: int) -> Knob:
    """Splits (outer, mid, block) of `extent` rounded up to whole blocks."""
    tiles = split_knob(name, -(-extent // block), 2).candidates
    return Knob(name, "split", tuple((*t, block) for t in tiles))


def preferences(task: Task, ins: TileInstruction) -> dict[str, Any]:
    """Untuned config: one block per tile, all channels in one call unless its weight exceeds WEIGHT_BLOCK."""
    p = task.shape
    words = _channels(task, ins) // ins.group
    per_word = ROWS * p["R"] * p["S"] * ins.group * ins.element_bytes
    chunk = max(ins.k_step // ins.group, min(words, WEIGHT_BLOCK // per_word))
    return {"tile_k": (ROWS, 1), "tile_m": (COLS, 2), "tile_c": (chunk,), "mid_order": "km"}


def relayouts(task: Task, ins: TileInstruction, cfg: Config) -> tuple[Relayout, ...]:
    """The weight [K, C, R, S] arrives as [R, S, K', C'], zero-padded."""
    p = task.shape
    shape = (p["R"], p["S"], math.prod(cfg["tile_k"]), _channels(task, ins))
    return (Relayout(1, lambda k, c, r, s: (r, s, k, c), shape),)


def apply(task: Task, cfg: Config, ins: TileInstruction):
    """Build the schedule of one config (raises on an illegal one)."""
    from tvm import s_tir

    p = task.shape
    kp, mp = math.prod(cfg["tile_k"]), math.prod(cfg["tile_m"])
    if cfg["tile_k"][-1] != ROWS or cfg["tile_m"][-1] != COLS or kp < p["K"] or mp < _pixels(task)[1]:
        raise RuntimeError(f"tiles {cfg['tile_k']} x {cfg['tile_m']} are not 32-blocks covering "
                           f"{p['K']} x {_pixels(task)[1]}")
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
    if p["R"] == p["S"] == 1:  # the tap loops, of one iteration, into the channels' (as `desc_1x1` has them)
        sch.fuse(r, s, c1)
    outer = parallel_fused(sch, [n, k0, m0])
    words = sch.get_sblock("D")
    wn, wc, wf = sch.get_loops(words)
    sch.split(wf, (None, _pixels(task)[0]))
    parallel_fused(sch, [wn, wc])
    out = sch.get_sblock("out")
    parallel_fused(sch, sch.get_loops(out)[:2])
    ow = output_shape(task)[3]
    vectorize_inner(sch, out, next(w for w in (16, 8, 4, 2, 1) if ow % w == 0))
    init = sch.decompose_reduction(blk, c0)
    vectorize_inner(sch, init, 16)
    sch.tensorize(k2, ins.conv_intrin(kc, (p["R"], p["S"]), _tap_step(task), task.element.storage))
    sch.annotate(outer, "pragma_import_llvm", ins.llvm_import)
    return sch


@functools.lru_cache(maxsize=64)
def _conv_func(task: Task, ins: TileInstruction, kp: int, mp: int):
    """D (the input as words), C_acc [N, kp, mp] = the implicit GEMM, and out [N, K, OH, OW] read from it.
    Cached: configs that differ in their schedule only share it."""
    from tvm import te, tirx

    p, kind, g = task.shape, task.element, ins.group
    channels, (wp, _), (step_r, step_s) = _channels(task, ins), _pixels(task), _tap_step(task)
    pad, height, width = p["padding"], p["H"], p["W"]
    rows = -(-(mp + (p["R"] - 1) * step_r + (p["S"] - 1) * step_s) // wp)  # of D: every tap of every block
    data = te.placeholder((p["N"], p["C"], height, width), kind.storage, name="data")
    weight = te.placeholder((p["R"], p["S"], kp, channels), kind.storage, name="weight")

    def element(n, c, y, x):  # the zero-padded image, zero channels past C
        inside = [y >= pad, y < height + pad, x >= pad, x < width + pad]
        if channels != p["C"]:
            inside.append(c < p["C"])
        index = (n, c if channels == p["C"] else te.min(c, p["C"] - 1), y - pad, x - pad)
        return tirx.if_then_else(tirx.all(*inside), data[index], tirx.const(0, kind.storage))

    words = te.compute((p["N"], channels // g, rows * wp),
                       lambda n, c, f: pack_word([element(n, c * g + i, f // wp, f % wp) for i in range(g)], ins),
                       name="D")
    r = te.reduce_axis((0, p["R"]), name="r")
    s = te.reduce_axis((0, p["S"]), name="s")
    c = te.reduce_axis((0, channels // g), name="c")
    cl = te.reduce_axis((0, g), name="cg")
    acc = kind.accumulate
    c_acc = te.compute(
        (p["N"], kp, mp),
        lambda n, k, m: te.sum(operand_value(weight[r, s, k, c * g + cl], kind.storage, acc)
                               * word_element(words[n, c, m + r * step_r + s * step_s], cl, ins),
                               axis=[r, s, c, cl]),
        name="C_acc")
    out = te.compute(output_shape(task), lambda n, k, y, x: in_type(c_acc[n, k, y * wp + x], kind.output),
                     name="out")
    return te.create_prim_func([data, weight, out])
