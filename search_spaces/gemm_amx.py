"""The GEMM templates' path for int8 and bf16 on a CPU with AMX (`amx_intrinsics`): matmul and dense; `matmul`
chooses it per task (`gemm_dot.instruction`).

The register tile of the other paths becomes one 32 x 32 block of four accumulator tiles, summed over a k chunk
(k1) in one call: parallel i0 x j0 tiles, k0 blocking, a mid tile of blocks (order a knob), then the call. The
function it schedules is the dot-product path's (`gemm_dot._dot_func`, B packed [N/32, K/group, 32, group]); int8
multiplies signed by signed, so A is read as it is (copied only into rows padded to whole blocks).
"""

from __future__ import annotations

import math
from typing import Any

from autotune.space import Config, ConfigSpace, Knob, choice_knob
from autotune.task import Task

from .amx_intrinsics import COLS, ROWS, TileInstruction
from .common import parallel_fused, tile_knob, vectorize_inner
from .gemm_dot import K_GROUPS, dot_func, operand_types, pack_choices, schedule_copies, split_tiles

K_MIN = 256  # bytes of A a call sums over at least: fewer repay the tile configuration and C's load and store less


def define_space(gemm, task: Task, ins: TileInstruction) -> ConfigSpace:
    """Tiles of i and j (whole 32-blocks), of k (in groups, whole k steps per call), mid order and B packing."""
    p = task.shape
    step = ins.k_step // ins.group  # groups per tile product
    tile_k = tile_knob("tile_k", p[gemm.k] // ins.group, 2, inner_max=K_GROUPS, lanes=step)
    long = [c for c in tile_k.candidates if c[-1] * ins.group * ins.element_bytes >= K_MIN]
    return ConfigSpace(knobs=(
        tile_knob("tile_i", p[gemm.m], 3, inner_max=ROWS, lanes=ROWS, pad=True),
        tile_knob("tile_j", p[gemm.n], 3, inner_max=COLS, lanes=COLS, pad=True),
        Knob(tile_k.name, tile_k.kind, tuple(long) or tile_k.candidates),
        choice_knob("mid_order", ("ij", "ji")),
        choice_knob("pack_b", pack_choices(gemm, task, ins)),
    ))


def preferences(gemm, task: Task, ins: TileInstruction) -> dict[str, Any]:
    """Untuned config: one block per tile, k chunks of 768 bytes of A."""
    return {"tile_i": (ROWS, 1), "tile_j": (COLS, 1), "tile_k": (768 // (ins.group * ins.element_bytes),),
            "mid_order": "ij", "pack_b": pack_choices(gemm, task, ins)[0]}


def apply(gemm, task: Task, cfg: Config, ins: TileInstruction):
    """Build the schedule of one config (raises on an illegal one)."""
    from tvm import s_tir

    p = task.shape
    rows, cols = math.prod(cfg["tile_i"]), math.prod(cfg["tile_j"])
    if rows < p[gemm.m] or cols < p[gemm.n] or cfg["tile_i"][-1] != ROWS or cfg["tile_j"][-1] != COLS:
        raise RuntimeError(f"tiles {cfg['tile_i']} x {cfg['tile_j']} are not 32-blocks covering "
                           f"{p[gemm.m]} x {p[gemm.n]}")
    kc = cfg["tile_k"][-1] * ins.group
    if kc % ins.k_step:
        raise RuntimeError(f"a k chunk of {kc} is not whole AMX steps of {ins.k_step}")
    sch = s_tir.Schedule(dot_func(gemm, task, ins, rows, cols, COLS, cfg["pack_b"] == "pre"))
    blk = sch.get_sblock("C_acc")
    (i0, _, i2), (j0, _, j2), (k0, k1), kg, mid = split_tiles(sch, blk, cfg)
    whole_k = cfg["tile_k"][0] == 1
    if whole_k:
        sch.reorder(i0, j0, *mid, k0, i2, j2, k1, kg)
    else:
        sch.reorder(i0, j0, k0, *mid, i2, j2, k1, kg)
    outer = parallel_fused(sch, [i0, j0])
    write_back = sch.get_sblock("C")
    sch.reverse_compute_at(write_back, mid[-1] if whole_k else outer)
    vectorize_inner(sch, write_back, 16)
    imported = schedule_copies(sch, gemm, task, cfg, ins, outer, a_copied=rows != p[gemm.m])
    init = sch.decompose_reduction(blk, k0)
    vectorize_inner(sch, init, 16)
    sch.tensorize(i2, ins.intrin(kc, *operand_types(gemm, task, ins, rows, cfg["pack_b"] == "pre")))
    sch.annotate(outer, "pragma_import_llvm", ins.llvm_import + imported)
    return sch
