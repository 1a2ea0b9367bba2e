"""CPU templates for the GEMM family: matmul, dense (B = W^T) and batch_matmul, sharing one schedule.

Structure (SRSRS): parallel fused [batch] x i0 x j0 tiles; k0 cache blocking; mid tile i1 x j1
(order is a knob); k1; register tile i2 x j2 with j2 vectorised (whole vectors of the target,
8 or 16 lanes). The accumulator C_acc is written back to C per outer tile, or per register tile right
after it is summed when the k0 loop has one iteration (then C_acc shrinks to one register tile and stays
in L1 instead of a C-sized buffer written and read again). The B operand can be
packed into a tile-contiguous layout [.., N/j2, K, j2], all up front ("root") or one outer tile's
panel at a time inside the parallel loop ("tile"). Dense's W [N, K] is a layer's weight: its kernel
takes W already in that layout ("pre"), packed once at build time (`Relayout`).

When j2 does not divide N, N is padded to the next multiple of j2 (at most MAX_PAD more): the packed
B (or a row-major padded copy of it) has zero columns there, C_acc is computed padded and only
C's own columns are written back. An N without a whole-vector divisor (1001 = 7 x 11 x 13) thus
still gets vector tiles, and one that has some gets the others too (1024 -> 1032 with 4 x 24).
M is padded the same way to a multiple of i2: the rows past M read A's last row (no copy of A) and
are not written back. So M = 1024 also gets 5-, 6-, 12- and 14-row register tiles (5x64 holds 20 of
AVX-512's 32 registers, 14x32 28; 8 rows x 2 vectors at most without it), which brought tuned matmul
much closer to a vendor BLAS (see docs/experiments.md).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any

from autotune.operators import in_type
from autotune.space import Config, ConfigSpace, choice_knob
from autotune.task import Task
from autotune.templates import PREPACK, Relayout, Template

from . import gemm_amx, gemm_dot
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
from .gemm_dot import instruction

REG_ROWS = 16  # register-tile rows (i2) at most
REG_COLS = 64  # register-tile columns (j2) at most: 4 zmm (8 ymm) registers per row
FEW_ROWS = 8  # an untuned GEMM of fewer rows streams B two panels at a time (`gemm_preferences`)
FEW_ROWS_K_STEP = 4  # rows of K a few-row kernel reads of one panel of B before the next's
DERIVED_PANELS = 4  # panels of B per parallel job of a derived few-row kernel (`gemm_derived_knobs`)


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
    pad: bool = True  # may pad N to a whole number of vector tiles, and M to a whole number of register tiles


MATMUL = Gemm("M", "N", "K")
DENSE = Gemm("batch", "out_features", "in_features", b_name="W", b_transposed=True, pack_choices=("pre",))
BATCH_MATMUL = Gemm("M", "N", "K", batch="B", b_name="Bm")
# A uKernel of a dynamic-shape matmul runs many times per call on row blocks of A: packing B in
# each call would repeat the same copy, so its template reads B in place (and so cannot pad it).
MATMUL_UKERNEL = Gemm("M", "N", "K", pack_choices=("none",), pad=False)
GEMMS = {"matmul": MATMUL, "dense": DENSE, "batch_matmul": BATCH_MATMUL}  # an operator's default templates' Gemm


def define_gemm_space(gemm: Gemm, task: Task) -> ConfigSpace:
    """Tiles of i, j, k, mid-tile order, B packing and unrolling for one GEMM-family task."""
    p = task.shape
    return ConfigSpace(knobs=(
        tile_knob("tile_i", p[gemm.m], 3, inner_max=REG_ROWS, pad=gemm.pad),
        tile_knob("tile_j", p[gemm.n], 3, inner_max=REG_COLS, lanes=vector_lanes(task), pad=gemm.pad),
        tile_knob("tile_k", p[gemm.k], 2, inner_max=1024),
        choice_knob("mid_order", ("ij", "ji")),
        choice_knob("pack_b", gemm.pack_choices),
        unroll_knob(),
    ), register=("tile_i", "tile_j"), max_register_tile=register_budget(task), equivalents=PACK_EQUIVALENTS)


# B packed ahead ("pre", a constant weight) and packed in the kernel ("root", "tile") read the same layout
PACK_EQUIVALENTS = {"pack_b": {"pre": ("root", "tile"), "root": ("pre", "tile"), "tile": ("pre", "root")}}


def apply_gemm(gemm: Gemm, task: Task, cfg: Config):
    """Build the schedule of one config (raises on an illegal one)."""
    from tvm import s_tir

    jb = cfg["tile_j"][-1]
    rows, cols = math.prod(cfg["tile_i"]), math.prod(cfg["tile_j"])
    if rows < task.shape[gemm.m] or cols < task.shape[gemm.n]:
        raise RuntimeError(f"tiles {rows} x {cols} do not cover {task.shape[gemm.m]} x {task.shape[gemm.n]}")
    source = _b_source(gemm, task, cfg)
    sch = s_tir.Schedule(_gemm_func(gemm, task, rows, cols, jb, source))
    blk = sch.get_sblock("C_acc")
    *outer_b, i, j, k = sch.get_loops(blk)
    i0, i1, i2 = split(sch, i, cfg["tile_i"])
    j0, j1, j2 = split(sch, j, cfg["tile_j"])
    k0, k1 = split(sch, k, cfg["tile_k"])
    mid = (i1, j1) if cfg["mid_order"] == "ij" else (j1, i1)
    whole_k = cfg["tile_k"][0] == 1  # each register tile sums all of K at once: written back right after
    if whole_k:  # (k0 has extent 1: below the mid loops, the init goes there too, and C_acc shrinks to one tile)
        sch.reorder(*outer_b, i0, j0, *mid, k0, k1, i2, j2)
    else:
        sch.reorder(*outer_b, i0, j0, k0, *mid, k1, i2, j2)
    outer = parallel_fused(sch, [*outer_b, i0, j0])
    write_back = sch.get_sblock("C")
    sch.reverse_compute_at(write_back, mid[-1] if whole_k else outer)
    sch.unroll(i2)
    vectorize_loop(sch, j2)
    decompose(sch, blk, k0)
    vectorize_inner(sch, write_back, max(VECTOR_LANES, jb))
    if cfg["pack_b"] == "tile":  # pack just the outer tile's panel of B, cache-hot for the tile
        packed = sch.get_sblock("B_pack")
        sch.compute_at(packed, outer)
        vectorize_inner(sch, packed, VECTOR_LANES)
    elif source in ("pack", "pad"):  # all of B first, as its own parallel loop nest
        copy = sch.get_sblock("B_pack" if source == "pack" else "B_pad")
        parallel_fused(sch, sch.get_loops(copy)[:len(outer_b) + 1])
        vectorize_inner(sch, copy, jb if source == "pack" else VECTOR_LANES)
    annotate_unroll(sch, outer, cfg["auto_unroll"])
    return sch


def _b_source(gemm: Gemm, task: Task, cfg: Config) -> str:
    """Where the kernel reads B' from: "pre" (its argument, packed ahead), "pack" (B packed in the kernel), "pad"
    (a row-major copy of B with zero columns) or "in_place" (B itself)."""
    if cfg["pack_b"] in ("root", "tile"):
        return "pack"
    if cfg["pack_b"] == "pre":
        return "pre"
    return "pad" if math.prod(cfg["tile_j"]) != task.shape[gemm.n] else "in_place"


@functools.lru_cache(maxsize=256)
def _gemm_func(gemm: Gemm, task: Task, rows: int, padded: int, jb: int, source: str):
    """The PrimFunc a config schedules: C_acc [.., rows, padded] = A B' (M rounded up to `rows`, its extra rows
    reading A's last; N to `padded`, a multiple of jb; B' read as `source` says), and C = C_acc[.., :M, :N].
    Cached: configs that differ in their schedule only share it."""
    from tvm import te

    a, b, _ = task.opdef.compute(task.shape, task.dtype)
    p = task.shape
    m, n, kk = p[gemm.m], p[gemm.n], p[gemm.k]
    batch = (p[gemm.batch],) if gemm.batch else ()

    def b_in_place(bi, k, j):  # B'[bi, k, j] read from B
        return b[j, k] if gemm.b_transposed else b[(*bi, k, j)]

    def b_at(bi, k, j):  # B'[bi, k, j], zero in the padding
        value = b_in_place(bi, k, j)
        return value if padded == n else te.if_then_else(j < n, value, te.const(0, task.element.storage))

    arg, bt = b, b_in_place
    if source == "pre":
        arg = te.placeholder((*batch, padded // jb, kk, jb), task.element.storage, name=gemm.b_name)
        bt = _packed_reader(arg, jb)
    elif source == "pack":
        packed = te.compute((*batch, padded // jb, kk, jb), lambda *ix: b_at(ix[:-3], ix[-2], ix[-3] * jb + ix[-1]),
                            name="B_pack")
        bt = _packed_reader(packed, jb)
    elif source == "pad":
        copy = te.compute((*batch, kk, padded), lambda *ix: b_at(ix[:-2], ix[-2], ix[-1]), name="B_pad")
        bt = lambda bi, k, j: copy[(*bi, k, j)]  # noqa: E731
    red = te.reduce_axis((0, kk), name="k")
    def a_at(bi, i, k):  # A[bi, i, k], the last row again past M
        return a[(*bi, i if rows == m else te.min(i, m - 1), k)]

    kind = task.element  # products summed in its accumulation type (the dtype's instructions: `gemm_dot`)
    acc = te.compute((*batch, rows, padded),
                     lambda *ix: te.sum(in_type(a_at(ix[:-2], ix[-2], red), kind.accumulate)
                                        * in_type(bt(ix[:-2], red, ix[-1]), kind.accumulate), axis=red), name="C_acc")
    out = te.compute((*batch, p[gemm.m], n), lambda *ix: in_type(acc[ix], kind.output), name="C")
    return te.create_prim_func([a, arg, out])


def _packed_reader(packed, jb: int):
    """B'[bi, k, j] read from a buffer in the layout [.., N/jb, K, jb]."""
    return lambda bi, k, j: packed[(*bi, j // jb, k, j % jb)]


def _packed_index_map(gemm: Gemm, jb: int):
    """B's index -> its index in [.., N/jb, K, jb], where a register tile's row of B is contiguous."""
    if gemm.b_transposed:
        return lambda jj, kk: (jj // jb, kk, jj % jb)  # W[N, K]
    if gemm.batch:
        return lambda b, kk, jj: (b, jj // jb, kk, jj % jb)
    return lambda kk, jj: (jj // jb, kk, jj % jb)


def from_task_func(sch, block, task: Task, cfg: Config) -> dict[str, Any]:
    """Make, in `sch`, the function `apply_gemm` schedules for `cfg` out of the task's own PrimFunc (or out of TVM's
    PrimFunc of the operator, the same loops under other names), so that the trace of `apply_gemm` runs after it:
    a MetaSchedule database holds traces that start from such a function (`autotune.model.export_db`).
    `block`: the GEMM block (C = A B, B read as [.., K, N], or as dense's W [N, K]).

    Returns the blocks that play the parts of `_gemm_func`'s blocks the trace looks up by name ("C_acc", "C", and
    "B_pack" or "B_pad"). Padding comes from `pad_einsum`: rows past M read zeros through a bounds check where
    `_gemm_func` reads A's last row again. A weight the kernel takes packed ahead ("pre") is packed by a block of
    the function: a plain copy marked PREPACK, which TVM's layout rewrite moves out of the kernel; when N is padded
    the copy writes zeros too, which that rewrite cannot move, so it packs in the kernel (parallel, vectorised).
    """
    gemm = GEMMS[task.op]
    p = task.shape
    rows, cols, jb = math.prod(cfg["tile_i"]), math.prod(cfg["tile_j"]), cfg["tile_j"][-1]
    pad_rows, pad_cols = int(rows != p[gemm.m]), int(cols != p[gemm.n])
    transposed = _reads_w(sch, block)
    layout = _packed_index_map(replace(gemm, b_transposed=transposed), jb)
    parts: dict[str, Any] = {"C_acc": block}
    copy = None  # the padded copy of B
    if pad_rows or pad_cols:
        sch.pad_einsum(block, [*([p[gemm.batch]] if gemm.batch else []), rows, cols, p[gemm.k]])
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        at = [sch.get(b).name_hint for b in blocks].index(sch.get(block).name_hint)
        pads = blocks[at - pad_rows - pad_cols:at]  # A's, then B's
        parts["C"] = blocks[at + 1]
        if pad_rows:
            sch.compute_inline(pads[0])
        if pad_cols:
            copy = pads[-1]
    else:
        parts["C"] = sch.cache_write(block, 0, "global")
    source = _b_source(gemm, task, cfg)
    if source == "pad":
        parts["B_pad"] = copy
    elif source == "pack" or (source == "pre" and copy is not None):
        copy = sch.cache_read(block, 1, "global") if copy is None else copy
        sch.transform_layout(copy, ("write", 0), layout)
        sch.transform_block_layout(copy, layout)
        if source == "pack":
            parts["B_pack"] = copy
        else:  # as the "root" packing
            parallel_fused(sch, sch.get_loops(copy)[:1])
            vectorize_inner(sch, copy, jb)
    elif source == "pre":  # a plain copy, in B's order (the layout rewrite takes its indices from it)
        copy = sch.cache_read(block, 1, "global")
        sch.transform_layout(copy, ("write", 0), layout)
        sch.annotate(copy, PREPACK, 1)
        *_, first, second = sch.get_loops(copy)
        j, k = (first, second) if transposed else (second, first)
        jo, ji = split(sch, j, (int(sch.get(j).extent) // jb, jb))
        sch.reorder(jo, k, ji)
        sch.parallel(jo)
        vectorize_loop(sch, ji)
    return parts


def _reads_w(sch, block) -> bool:
    """Whether a GEMM block reads its second operand as [N, K] (dense's W) rather than as [.., K, N]."""
    blk = sch.get(block)
    return blk.reads[1].region[-2].min.same_as(blk.iter_vars[-2].var)


def gemm_relayouts(gemm: Gemm, task: Task, cfg: Config) -> tuple[Relayout, ...]:
    """Operand 1 arrives packed (zero-padded to whole tiles: N to the tiles' product) when the config says
    "pre"."""
    if cfg["pack_b"] != "pre":
        return ()
    jb = cfg["tile_j"][-1]
    batch = (task.shape[gemm.batch],) if gemm.batch else ()
    shape = (*batch, math.prod(cfg["tile_j"]) // jb, task.shape[gemm.k], jb)
    return (Relayout(1, _packed_index_map(gemm, jb), shape),)


def gemm_preferences(gemm: Gemm, task: Task) -> dict[str, Any]:
    """The config an untuned build prefers (`Template.preferences`). Register tiles of 8 accumulators on AVX-512
    (4 rows x 2 vectors); on narrower vectors rows of 3 vectors (AVX2: 4 x 3 = 12 accumulators of its 16
    registers, as the best configs tuned on an AVX2 CPU are; the AVX-512 tiles spill there). B is packed per tile
    only with enough rows to repay the pass over it. With fewer than FEW_ROWS rows the time goes to reading B:
    each parallel job takes two panels of it and reads FEW_ROWS_K_STEP rows of K of one, then of the other (on
    Zen 3 a decoder block's untuned build ran 1.2-1.7x faster with it at 1 to 7 tokens, slower from 9; four panels
    per job, as `gemm_derived_knobs` takes, ran 1.1-1.2x faster at 1 token but 0.6x at 2: docs/experiments.md)."""
    lanes = vector_lanes(task)
    width = 2 * lanes if lanes >= VECTOR_LANES else 3 * lanes
    few = task.shape[gemm.m] < FEW_ROWS
    return {"tile_i": (4, 4), "tile_j": (width, 2) if few or lanes >= VECTOR_LANES else (width,),
            "tile_k": (FEW_ROWS_K_STEP,) if few else (256,), "mid_order": "ij",
            "pack_b": "tile" if task.shape[gemm.m] >= 16 else "none", "auto_unroll": 64}


def _path(gemm: Gemm, task: Task):
    """(instruction, module of its schedules) of a task's narrow path (`gemm_amx` or `gemm_dot`: `define_space`,
    `apply`, `preferences`, `relayouts`), or (None, None) for the fp32 path."""
    ins = instruction(gemm, task)
    if ins is None:
        return None, None
    return ins, gemm_amx if isinstance(ins, gemm_amx.TileInstruction) else gemm_dot


def gemm_space(gemm: Gemm, task: Task) -> ConfigSpace:
    """The space of a GEMM-family task: AMX's or the dot-product path's where its dtype has an instruction on the
    target, else the fp32 path's (narrow inputs widened)."""
    ins, path = _path(gemm, task)
    return path.define_space(gemm, task, ins) if path else define_gemm_space(gemm, task)


def gemm_apply(gemm: Gemm, task: Task, cfg: Config):
    """Schedule of one config, on the path `gemm_space` chose."""
    ins, path = _path(gemm, task)
    return path.apply(gemm, task, cfg, ins) if path else apply_gemm(gemm, task, cfg)


def gemm_relayouts_of(gemm: Gemm, task: Task, cfg: Config) -> tuple[Relayout, ...]:
    """The operands a config's kernel takes relaid, on the path `gemm_space` chose (both narrow paths pack B
    alike)."""
    ins, path = _path(gemm, task)
    return gemm_dot.relayouts(gemm, task, ins, cfg) if path else gemm_relayouts(gemm, task, cfg)


def gemm_preferences_of(gemm: Gemm, task: Task) -> dict[str, Any]:
    """The untuned config, on the path `gemm_space` chose."""
    ins, path = _path(gemm, task)
    return path.preferences(gemm, task, ins) if path else gemm_preferences(gemm, task)


def gemm_from_task_func(sch, block, task: Task, cfg: Config) -> dict[str, Any]:
    """`from_task_func` of the fp32 path; the dot-product path's kernels are not exported to MetaSchedule."""
    gemm = GEMMS[task.op]
    if instruction(gemm, task):
        raise RuntimeError(f"{task.dtype} kernels using dot-product instructions are not exported to MetaSchedule")
    return from_task_func(sch, block, task, cfg)


def matmul_space(task: Task) -> ConfigSpace:
    """Space of the matmul template."""
    return gemm_space(MATMUL, task)


def matmul_apply(task: Task, cfg: Config):
    """Schedule of one matmul config."""
    return gemm_apply(MATMUL, task, cfg)


def matmul_preferences(task: Task) -> dict[str, Any]:
    """Untuned matmul config."""
    return gemm_preferences_of(MATMUL, task)


def matmul_ukernel_space(task: Task) -> ConfigSpace:
    """Space of the matmul uKernel template (B read in place)."""
    return define_gemm_space(MATMUL_UKERNEL, task)


def matmul_ukernel_apply(task: Task, cfg: Config):
    """Schedule of one matmul uKernel config."""
    return apply_gemm(MATMUL_UKERNEL, task, cfg)


def matmul_ukernel_preferences(task: Task) -> dict[str, Any]:
    """Untuned matmul uKernel config."""
    return gemm_preferences(MATMUL_UKERNEL, task)


def dense_space(task: Task) -> ConfigSpace:
    """Space of the dense template."""
    return gemm_space(DENSE, task)


def dense_apply(task: Task, cfg: Config):
    """Schedule of one dense config (W taken packed, see `dense_relayouts`)."""
    return gemm_apply(DENSE, task, cfg)


def dense_relayouts(task: Task, cfg: Config) -> tuple[Relayout, ...]:
    """W [N, K] -> [N/j2, K, j2] (fp32 path) or [N/j2, K/group, j2, group] (dot path): packed once, ahead of the
    calls."""
    return gemm_relayouts_of(DENSE, task, cfg)


def dense_preferences(task: Task) -> dict[str, Any]:
    """Untuned dense config."""
    return gemm_preferences_of(DENSE, task)


def batch_matmul_space(task: Task) -> ConfigSpace:
    """Space of the batch_matmul template."""
    return define_gemm_space(BATCH_MATMUL, task)


def batch_matmul_apply(task: Task, cfg: Config):
    """Schedule of one batch_matmul config."""
    return apply_gemm(BATCH_MATMUL, task, cfg)


def batch_matmul_preferences(task: Task) -> dict[str, Any]:
    """Untuned batch_matmul config."""
    return gemm_preferences(BATCH_MATMUL, task)


def gemm_derived_knobs(gemm: Gemm, task: Task, knobs: dict[str, Any]) -> dict[str, Any]:
    """`Template.derived_knobs`: another GEMM config's knobs for a kernel of other rows, its weight panels (width,
    packing) kept. With fewer rows than its register tile, each parallel job takes DERIVED_PANELS panels (fewer
    where that would leave fewer than two jobs) and reads FEW_ROWS_K_STEP rows of K of each in turn. With one row,
    the time goes to streaming the weight: where the weights nearly fill the L3 cache, a 1-token model of three
    768 x 3072 linear layers ran 20% faster on two panels per job than on one, and a decoder block 10-19% faster at
    1 and 2 tokens on four than on two (docs/experiments.md). With as many rows as its register tile or more, and
    on a narrow path's space (`_path`), the knobs come back as they are (the space's closest config fits the tile
    loops to the rows: a 4-row kernel so derived from a 64-row one ran 1.4-1.9x faster than with the rule)."""
    if _path(gemm, task)[0] is not None or task.shape[gemm.m] >= knobs["tile_i"][-1]:
        return knobs
    outer, mid, width = knobs["tile_j"]
    panels = outer * mid
    per_job = next((p for p in (DERIVED_PANELS, 2) if panels % p == 0 and panels // p >= 2), mid)
    k = math.prod(knobs["tile_k"])
    step = FEW_ROWS_K_STEP if k % FEW_ROWS_K_STEP == 0 else knobs["tile_k"][-1]
    return {**knobs, "tile_j": (panels // per_job, per_job, width), "tile_k": (k // step, step)}


def matmul_derived_knobs(task: Task, knobs: dict[str, Any]) -> dict[str, Any]:
    return gemm_derived_knobs(MATMUL, task, knobs)


def dense_derived_knobs(task: Task, knobs: dict[str, Any]) -> dict[str, Any]:
    return gemm_derived_knobs(DENSE, task, knobs)


# compatible_versions: the version that wrote every register tile back per outer tile (same space, same configs),
# for matmul and dense the version before their dot-product path (same fp32 spaces and schedules), the one whose
# AMX call summed one tap only, and matmul's whose narrow paths packed B element by element (same spaces).
# They schedule `_gemm_func`: a trace that starts from the task's PrimFunc runs `from_task_func` first.
MATMUL_CPU = Template("matmul_cpu", "matmul", "llvm", matmul_space, matmul_apply,
                      compatible_versions=("687b25bbcf06", "22c7e3a1e764", "010ca9a55a37", "34e400309078"),
                      preferences=matmul_preferences, from_task_func=gemm_from_task_func, dtypes=CPU_DTYPES,
                      derived_knobs=matmul_derived_knobs)
MATMUL_UKERNEL_CPU = Template("matmul_ukernel_cpu", "matmul", "llvm", matmul_ukernel_space, matmul_ukernel_apply,
                              compatible_versions=("c7fd1b95abe8",), preferences=matmul_ukernel_preferences,
                              from_task_func=from_task_func)
DENSE_CPU = Template("dense_cpu", "dense", "llvm", dense_space, dense_apply, dense_relayouts,
                     compatible_versions=("c6685a3bcb85", "8d0abcca033e", "cef8a84581a8"),
                     preferences=dense_preferences, from_task_func=gemm_from_task_func, dtypes=CPU_DTYPES,
                     derived_knobs=dense_derived_knobs)
BATCH_MATMUL_CPU = Template("batch_matmul_cpu", "batch_matmul", "llvm", batch_matmul_space, batch_matmul_apply,
                            compatible_versions=("8d7ab524a85b",), preferences=batch_matmul_preferences,
                            from_task_func=from_task_func)
