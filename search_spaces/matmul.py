"""CPU templates for the GEMM family: matmul, dense (B = W^T) and batch_matmul, sharing one schedule.

Structure (SRSRS): parallel fused [batch] x i0 x j0 tiles; k0 cache blocking; mid tile i1 x j1
(order is a knob); k1; register tile i2 x j2 with j2 vectorised (whole vectors of the target,
8 or 16 lanes, when N allows). The accumulator C_global is written back per outer tile. The B
operand can be packed into a tile-contiguous layout [.., N/j2, K, j2], all up front ("root") or
one outer tile's panel at a time inside the parallel loop ("tile"). Dense's W [N, K] is a layer's weight:
its kernel takes W already in that layout ("pre"), packed once at build time (`Relayout`).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.space import Config, ConfigSpace, choice_knob
from autotune.task import Task

from .base import Relayout, Template, gemm_schedule
from .common import (
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

REG_ROWS = 16  # register-tile rows (i2) at most
REG_COLS = 64  # register-tile columns (j2) at most: 4 zmm (8 ymm) registers per row


@dataclass(frozen=True)
class Gemm:
    """How an operator maps onto C[b, i, j] = sum_k A[b, i, k] * B'[b, k, j]."""

    m: str
    n: str
    k: str
    batch: str | None = None
    b_name: str = "B"  # the second operand's buffer name
    b_transposed: bool = False  # B operand stored [N, K] (dense) instead of [K, N]
    pack_choices: tuple[str, ...] = ("none", "root", "tile")  # "pre": B arrives packed (a constant weight)


MATMUL = Gemm("M", "N", "K")
DENSE = Gemm("batch", "out_features", "in_features", b_name="W", b_transposed=True, pack_choices=("pre",))
BATCH_MATMUL = Gemm("M", "N", "K", batch="B", b_name="Bm")
# A uKernel of a dynamic-shape matmul runs many times per call on row blocks of A: packing B in
# each call would repeat the same copy, so its template reads B in place.
MATMUL_UKERNEL = Gemm("M", "N", "K", pack_choices=("none",))


def define_gemm_space(gemm: Gemm, task: Task) -> ConfigSpace:
    """Tiles of i, j, k, mid-tile order, B packing and unrolling for one GEMM-family task."""
    p = task.shape
    return ConfigSpace(knobs=(
        tile_knob("tile_i", p[gemm.m], 3, inner_max=REG_ROWS),
        tile_knob("tile_j", p[gemm.n], 3, inner_max=REG_COLS, lanes=vector_lanes(task)),
        tile_knob("tile_k", p[gemm.k], 2, inner_max=1024),
        choice_knob("mid_order", ("ij", "ji")),
        choice_knob("pack_b", gemm.pack_choices),
        unroll_knob(),
    ), register=("tile_i", "tile_j"), max_register_tile=register_budget(task))


def apply_gemm(gemm: Gemm, task: Task, cfg: Config):
    """Build the schedule of one config (raises on an illegal one)."""
    sch, blk, outer_b, i, j, k = gemm_schedule(task)
    if cfg["pack_b"] == "pre":
        sch.transform_layout(blk, gemm.b_name, _packed_index_map(gemm, cfg["tile_j"][-1]))
    i0, i1, i2 = split(sch, i, cfg["tile_i"])
    j0, j1, j2 = split(sch, j, cfg["tile_j"])
    k0, k1 = split(sch, k, cfg["tile_k"])
    mid = (i1, j1) if cfg["mid_order"] == "ij" else (j1, i1)
    sch.reorder(*outer_b, i0, j0, k0, *mid, k1, i2, j2)
    acc = sch.cache_write(blk, 0, "global")
    packed = _pack_b(sch, blk, gemm, cfg["tile_j"][-1]) if cfg["pack_b"] in ("root", "tile") else None
    outer = parallel_fused(sch, [*outer_b, i0, j0])
    sch.reverse_compute_at(acc, outer)
    sch.unroll(i2)
    vectorize_loop(sch, j2)
    decompose(sch, blk, k0)
    vectorize_inner(sch, acc, max(VECTOR_LANES, cfg["tile_j"][-1]))
    if cfg["pack_b"] == "root":
        _parallel_pack(sch, packed, cfg["tile_j"][-1])
    elif cfg["pack_b"] == "tile":  # pack just the outer tile's panel of B, cache-hot for the tile
        sch.compute_at(packed, outer)
        vectorize_inner(sch, packed, VECTOR_LANES)
    annotate_unroll(sch, outer, cfg["auto_unroll"])
    return sch


def _packed_index_map(gemm: Gemm, jb: int):
    """B's index -> its index in [.., N/jb, K, jb], where a register tile's row of B is contiguous."""
    if gemm.b_transposed:
        return lambda jj, kk: (jj // jb, kk, jj % jb)  # W[N, K]
    if gemm.batch:
        return lambda b, kk, jj: (b, jj // jb, kk, jj % jb)
    return lambda kk, jj: (jj // jb, kk, jj % jb)


def _pack_b(sch, blk, gemm: Gemm, jb: int):
    """Copy the B operand into its packed layout, in the kernel (B is not constant)."""
    packed = sch.cache_read(blk, gemm.b_name, "global")
    sch.transform_layout(packed, ("write", 0), _packed_index_map(gemm, jb))
    return packed


def gemm_relayouts(gemm: Gemm, cfg: Config) -> tuple[Relayout, ...]:
    """Operand 1 arrives packed when the config says "pre"."""
    if cfg["pack_b"] != "pre":
        return ()
    return (Relayout(1, _packed_index_map(gemm, cfg["tile_j"][-1])),)


def _parallel_pack(sch, packed, jb: int) -> None:
    """Run the packing copy as its own loop nest [batch, j/jb (parallel), k, jb (vectorised)]."""
    loops = sch.get_loops(packed)
    batch, (kk, jj) = loops[:-2], loops[-2:]
    jo, ji = split(sch, jj, (int(sch.get(jj).extent) // jb, jb))
    sch.reorder(*batch, jo, kk, ji)
    parallel_fused(sch, [*batch, jo])
    vectorize_loop(sch, ji)


def matmul_space(task: Task) -> ConfigSpace:
    """Space of the matmul template."""
    return define_gemm_space(MATMUL, task)


def matmul_apply(task: Task, cfg: Config):
    """Schedule of one matmul config."""
    return apply_gemm(MATMUL, task, cfg)


def matmul_ukernel_space(task: Task) -> ConfigSpace:
    """Space of the matmul uKernel template (B read in place)."""
    return define_gemm_space(MATMUL_UKERNEL, task)


def matmul_ukernel_apply(task: Task, cfg: Config):
    """Schedule of one matmul uKernel config."""
    return apply_gemm(MATMUL_UKERNEL, task, cfg)


def dense_space(task: Task) -> ConfigSpace:
    """Space of the dense template."""
    return define_gemm_space(DENSE, task)


def dense_apply(task: Task, cfg: Config):
    """Schedule of one dense config (W taken packed, see `dense_relayouts`)."""
    return apply_gemm(DENSE, task, cfg)


def dense_relayouts(task: Task, cfg: Config) -> tuple[Relayout, ...]:
    """W [N, K] -> [N/j2, K, j2]: packed once, ahead of the calls."""
    return gemm_relayouts(DENSE, cfg)


def batch_matmul_space(task: Task) -> ConfigSpace:
    """Space of the batch_matmul template."""
    return define_gemm_space(BATCH_MATMUL, task)


def batch_matmul_apply(task: Task, cfg: Config):
    """Schedule of one batch_matmul config."""
    return apply_gemm(BATCH_MATMUL, task, cfg)


MATMUL_CPU = Template("matmul_cpu", "matmul", "llvm", matmul_space, matmul_apply)
MATMUL_UKERNEL_CPU = Template("matmul_ukernel_cpu", "matmul", "llvm", matmul_ukernel_space, matmul_ukernel_apply)
DENSE_CPU = Template("dense_cpu", "dense", "llvm", dense_space, dense_apply, dense_relayouts)
BATCH_MATMUL_CPU = Template("batch_matmul_cpu", "batch_matmul", "llvm", batch_matmul_space, batch_matmul_apply)
