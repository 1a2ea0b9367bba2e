"""The GEMM templates' path for narrow inputs on a CPU with a dot-product instruction (`dot_intrinsics`):
int8 through AVX-512 VNNI, bf16 through AVX-512 BF16; matmul and dense (`matmul` chooses the path per task:
`instruction`).

Same loop structure as the fp32 path (parallel i0 x j0 tiles, k0 cache blocking, mid tile, k1, register tile
i2 x j2 with j2 whole instructions of 16 lanes), but k is split into K/group x group and each 16 lanes x group
step of the register tile is one instruction (tensorized). B is packed [N/j2, K/group, j2, group]: for dense a
layer's weight, packed once ahead ("pre", `Relayout`); for matmul in the kernel, all up front ("root") or one outer
tile's panel at a time ("tile"), one shuffle per packed row (`pack_intrinsics`). N is padded with zero columns to
whole register tiles, M to whole register rows (the rows past M copy A's last row, in a block "A_in").

int8 x int8: VNNI multiplies unsigned by signed bytes, so A is shifted by 128 into uint8 ("A_in") and 128 times
each column sum of B ("B_sum", itself summed with the instruction) is taken off the sums when they are written
back, in a pass over the output of its own: exact.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from autotune.space import Config, ConfigSpace, choice_knob
from autotune.task import Task
from autotune.templates import Relayout

from . import pack_intrinsics
from .amx_intrinsics import COLS, ROWS, TileInstruction, tile_instruction
from .common import (
    annotate_unroll,
    pads_little,
    parallel_fused,
    register_budget,
    split,
    tile_knob,
    unroll_knob,
    vectorize_inner,
)
from .dot_intrinsics import BITS, LANES, DotInstruction, dot_instruction, kernel_type, operand_value, to_bits

REG_ROWS = 16  # register-tile rows (i2) at most
REG_COLS = 64  # register-tile columns (j2) at most: 4 instructions per row
K_GROUPS = 512  # k1 (in groups) at most


def instruction(gemm, task: Task) -> DotInstruction | TileInstruction | None:
    """The instruction this task's GEMM uses: AMX tiles (`gemm_amx`), else a dot-product instruction (this module),
    else None (the fp32 path's schedule, inputs widened). Each only where M and N can be tiled by its blocks
    (padded by at most MAX_PAD)."""
    m, n, k = (task.shape[d] for d in (gemm.m, gemm.n, gemm.k))
    if pads_little(m, ROWS) and pads_little(n, COLS):
        tiles = tile_instruction(task, m, k)
        if tiles:
            return tiles
    if not pads_little(n, LANES):
        return None
    return dot_instruction(task, k)


def define_space(gemm, task: Task, ins: DotInstruction) -> ConfigSpace:
    """Tiles of i, j (whole instructions) and k (in groups), mid-tile order, B packing and unrolling."""
    p = task.shape
    return ConfigSpace(knobs=(
        tile_knob("tile_i", p[gemm.m], 3, inner_max=REG_ROWS, pad=True),
        tile_knob("tile_j", p[gemm.n], 3, inner_max=REG_COLS, lanes=LANES, pad=True),
        tile_knob("tile_k", p[gemm.k] // ins.group, 2, inner_max=K_GROUPS),
        choice_knob("mid_order", ("ij", "ji")),
        choice_knob("pack_b", pack_choices(gemm, task, ins)),
        unroll_knob(),
    ), register=("tile_i", "tile_j"), max_register_tile=register_budget(task))


def _shifts_a(task: Task, ins: DotInstruction | TileInstruction) -> bool:
    """Whether A is read shifted into the instruction's unsigned type (int8: A + 128, and B's column sums taken
    off the sums)."""
    return ins.a_type != task.element.storage


def pack_choices(gemm, task: Task, ins: DotInstruction | TileInstruction) -> tuple[str, ...]:
    """Dense's weight is packed ahead; matmul's B in the kernel, per outer tile too unless its column sums
    (int8) read all of it first."""
    if gemm.b_transposed:
        return ("pre",)
    return ("root",) if _shifts_a(task, ins) else ("root", "tile")


def preferences(gemm, task: Task, ins: DotInstruction) -> dict[str, Any]:
    """Untuned config: 4 rows x 2 instructions (8 accumulators), k blocks of 256 elements."""
    return {"tile_i": (4, 4), "tile_j": (32, 2), "tile_k": (256 // ins.group,), "mid_order": "ij",
            "pack_b": pack_choices(gemm, task, ins)[-1], "auto_unroll": 64}


def relayouts(gemm, task: Task, ins: DotInstruction | TileInstruction, cfg: Config) -> tuple[Relayout, ...]:
    """Dense's W [N, K] arrives as [N/j2, K/group, j2, group] ("pre"), N padded to whole tiles with zeros."""
    if cfg["pack_b"] != "pre":
        return ()
    jb, g, padded = cfg["tile_j"][-1], ins.group, math.prod(cfg["tile_j"])
    shape = (padded // jb, task.shape[gemm.k] // g, jb, g)
    return (Relayout(1, lambda jj, kk: (jj // jb, kk // g, jj % jb, kk % g), shape),)


def apply(gemm, task: Task, cfg: Config, ins: DotInstruction):
    """Build the schedule of one config (raises on an illegal one)."""
    from tvm import s_tir

    rows, cols = math.prod(cfg["tile_i"]), math.prod(cfg["tile_j"])
    p = task.shape
    if rows < p[gemm.m] or cols < p[gemm.n]:
        raise RuntimeError(f"tiles {rows} x {cols} do not cover {p[gemm.m]} x {p[gemm.n]}")
    jb = cfg["tile_j"][-1]
    sch = s_tir.Schedule(dot_func(gemm, task, ins, rows, cols, jb, cfg["pack_b"] == "pre"))
    blk = sch.get_sblock("C_acc")
    (i0, _, i2), (j0, _, j2), (k0, k1), kg, mid = split_tiles(sch, blk, cfg)
    jv, lanes = split(sch, j2, (jb // LANES, LANES))
    whole_k = cfg["tile_k"][0] == 1
    if whole_k:
        sch.reorder(i0, j0, *mid, k0, k1, i2, jv, lanes, kg)
    else:
        sch.reorder(i0, j0, k0, *mid, k1, i2, jv, lanes, kg)
    outer = parallel_fused(sch, [i0, j0])
    shifted = _shifts_a(task, ins)
    write_back = sch.get_sblock("C")
    if shifted:  # it reads the column sums too, made before the tiles: a pass of its own
        parallel_fused(sch, sch.get_loops(write_back)[:1])
    else:
        sch.reverse_compute_at(write_back, mid[-1] if whole_k else outer)
    vectorize_inner(sch, write_back, max(LANES, jb))
    imported = schedule_copies(sch, gemm, task, cfg, ins, outer, a_copied=shifted or rows != p[gemm.m])
    sch.unroll(i2)
    sch.unroll(jv)
    init = sch.decompose_reduction(blk, k0)
    vectorize_inner(sch, init, jb)
    a_type, b_type = operand_types(gemm, task, ins, rows, cfg["pack_b"] == "pre")
    sch.tensorize(lanes, ins.intrin(a_type, b_type))
    if shifted:
        _schedule_column_sums(sch, ins, b_type)
    annotate_unroll(sch, outer, cfg["auto_unroll"])
    if ins.llvm_import + imported:
        sch.annotate(outer, "pragma_import_llvm", ins.llvm_import + imported)
    return sch


def split_tiles(sch, blk, cfg: Config):
    """The GEMM block's loops split by the config's tiles: (i0, i1, i2), (j0, j1, j2), (k0, k1), the k group loop,
    and the mid-tile loops in the config's order."""
    i, j, k, kg = sch.get_loops(blk)
    ii, jj = split(sch, i, cfg["tile_i"]), split(sch, j, cfg["tile_j"])
    mid = (ii[1], jj[1]) if cfg["mid_order"] == "ij" else (jj[1], ii[1])
    return ii, jj, split(sch, k, cfg["tile_k"]), kg, mid


def schedule_copies(sch, gemm, task: Task, cfg: Config, ins, outer, a_copied: bool) -> str:
    """The kernel's own copies of its operands (`dot_func`), parallel: B packed in the kernel, one outer tile's
    panel at a time ("tile", cache-hot for the tile) or all up front ("root"), a packed row of B (`group` rows of
    B interleaved) at once (`pack_intrinsics`; vectorised where N is padded); A copied into shifted or padded rows,
    vectorised. Returns the LLVM IR the packing calls ("" for none)."""
    imported = ""
    if cfg["pack_b"] in ("tile", "root"):
        packed = sch.get_sblock("B_pack")
        if cfg["pack_b"] == "tile":
            sch.compute_at(packed, outer)
        else:
            parallel_fused(sch, sch.get_loops(packed)[:1])
        jb, bits = cfg["tile_j"][-1], task.element.numpy_storage.itemsize * 8
        if math.prod(cfg["tile_j"]) == task.shape[gemm.n]:
            storage = task.element.storage
            intrin = pack_intrinsics.intrin(jb, ins.group, storage, kernel_type(storage))
            sch.tensorize(sch.get_loops(packed)[-2], intrin)
            imported = pack_intrinsics.llvm(jb, ins.group, bits)
        else:  # the zero columns past N: an element-wise copy
            sch.fuse(*sch.get_loops(packed)[-2:])
            vectorize_inner(sch, packed, jb * ins.group)
    if a_copied:
        a_in = sch.get_sblock("A_in")
        parallel_fused(sch, sch.get_loops(a_in)[:1])
        vectorize_inner(sch, a_in, 64)
    return imported


def _schedule_column_sums(sch, ins: DotInstruction, b_type: str) -> None:
    """B_sum[j] = sum_k 128 * B[k, j], one instruction per 16 columns x group k (the constant operand "ones")."""
    ones = sch.get_sblock("ones")
    vectorize_inner(sch, ones, 64)
    blk = sch.get_sblock("B_sum")
    j, k, kg = sch.get_loops(blk)
    jo, lanes = split(sch, j, (int(sch.get(j).extent) // LANES, LANES))
    sch.reorder(jo, k, lanes, kg)
    sch.parallel(jo)
    init = sch.decompose_reduction(blk, k)
    vectorize_inner(sch, init, LANES)
    sch.tensorize(lanes, ins.intrin(ins.a_type, b_type))


def operand_types(gemm, task: Task, ins: DotInstruction | TileInstruction, rows: int, pre: bool) -> tuple[str, str]:
    """The types of A and B as the kernel's GEMM block reads them: its arguments as they are; its own copies (A
    shifted or padded, B packed in the kernel) as `kernel_type` has them (bf16 as bits); A shifted as uint8."""
    storage = task.element.storage
    if _shifts_a(task, ins):
        a_type = ins.a_type
    else:
        a_type = kernel_type(storage) if rows != task.shape[gemm.m] else storage
    return a_type, storage if pre else kernel_type(storage)


@functools.lru_cache(maxsize=256)
def dot_func(gemm, task: Task, ins: DotInstruction | TileInstruction, rows: int, padded: int, jb: int, pre: bool):
    """C_acc [rows, padded] = A_in B' in the accumulation type, k as (K/group, group); C = C_acc[:M, :N] (less
    B_sum for int8, rounded for bf16). Cached: configs that differ in their schedule only share it."""
    from tvm import te, tirx

    kind = task.element
    p = task.shape
    m, n, kk, g = p[gemm.m], p[gemm.n], p[gemm.k], ins.group
    a, b, _ = task.opdef.compute(p, task.dtype)
    shifted = _shifts_a(task, ins)
    a_type, b_type = operand_types(gemm, task, ins, rows, pre)
    if shifted or rows != m:
        def a_value(i, k):
            value = a[te.min(i, m - 1) if rows != m else i, k]
            if shifted:
                return (value.astype("int32") + 128).astype(ins.a_type)
            return to_bits(value) if a_type == BITS else value
        a_in = te.compute((rows, kk), a_value, name="A_in")
    else:
        a_in = a

    def b_value(j, k):  # B'[k, j], zero past N
        value = b[j, k] if gemm.b_transposed else b[k, j]
        return value if padded == n else te.if_then_else(j < n, value, tirx.const(0, kind.storage))

    shape = (padded // jb, kk // g, jb, g)
    if pre:
        arg = te.placeholder(shape, kind.storage, name=gemm.b_name)
        packed = arg
    else:
        arg = b
        def b_copy(jo, ko, jl, kl):
            value = b_value(jo * jb + jl, ko * g + kl)
            return to_bits(value) if b_type == BITS else value
        packed = te.compute(shape, b_copy, name="B_pack")
    acc = kind.accumulate
    ko = te.reduce_axis((0, kk // g), name="k")
    kl = te.reduce_axis((0, g), name="kg")
    c_acc = te.compute(
        (rows, padded),
        lambda i, j: te.sum(operand_value(a_in[i, ko * g + kl], a_type, acc)
                            * operand_value(packed[j // jb, ko, j % jb, kl], b_type, acc), axis=[ko, kl]),
        name="C_acc")
    if shifted:  # sum (A + 128) B = A B + 128 colsum(B)
        ones = te.compute((kk,), lambda k: tirx.const(128, ins.a_type), name="ones")
        so = te.reduce_axis((0, kk // g), name="k")
        sl = te.reduce_axis((0, g), name="kg")
        b_sum = te.compute(
            (padded,), lambda j: te.sum(operand_value(ones[so * g + sl], ins.a_type, acc)
                                        * operand_value(packed[j // jb, so, j % jb, sl], b_type, acc),
                                        axis=[so, sl]),
            name="B_sum")
        out = te.compute((m, n), lambda i, j: c_acc[i, j] - b_sum[j], name="C")
    else:
        out = te.compute((m, n), lambda i, j: c_acc[i, j].astype(kind.output), name="C")
    return te.create_prim_func([a, arg, out])

