"""Helpers shared by the CPU schedule templates: bounded tile knobs, unroll knob, loop utilities."""

from __future__ import annotations

from typing import Sequence

from autotune.space import Knob, choice_knob, split_knob
from autotune.target import vector_unit
from autotune.task import Task

VECTOR_LANES = 16  # fp32 lanes a write-back or copy loop is vectorised by (one AVX-512 register, two of AVX2)
UNROLL_STEPS = (0, 16, 64, 512)
SPARE_REGISTERS = 2  # vector registers a register tile leaves for the operands it loads and broadcasts
MAX_PAD = 1 / 8  # the most a padded vector tile may add to its axis (as a share of the extent)
CPU_DTYPES = ("float32", "bfloat16", "int8")  # of the templates with narrow paths (AMX, VNNI, AVX-512 BF16)


def register_budget(task: Task) -> int:
    """The most fp32 accumulators a register tile may hold on the task's target: its vector registers less
    SPARE_REGISTERS, times their lanes (AVX2: 112, AVX-512: 480). A larger tile spills accumulators to the stack on
    every iteration: in random samples of GEMM and conv2d configs, those whose accumulators took all the vector
    registers or more were never near the task's best."""
    lanes, registers = vector_unit(task.target)
    return (registers - SPARE_REGISTERS) * lanes


def vector_lanes(task: Task) -> int:
    """fp32 lanes of one vector register of the task's target (AVX2: 8, AVX-512: 16): the step of a vector tile."""
    return vector_unit(task.target)[0]


def tile_knob(name: str, extent: int, parts: int, inner_max: int, lanes: int = 0,
              tile_max: int | None = None, also_rows: int = 0, pad: bool = False) -> Knob:
    """Exact `parts`-way split of `extent` whose innermost factor is <= inner_max.

    With `lanes` (a vector tile), innermost factors that are whole vectors (multiples of `lanes`)
    are kept when the extent has any (else every bounded factor), plus those <= `also_rows` (for
    variants that use the axis as unrolled rows instead); `tile_max` bounds the product of the
    inner factors. With `pad`, every innermost factor up to inner_max (with `lanes`: every whole
    vector) is offered: one that does not divide the extent splits it rounded up to its next
    multiple, when that adds at most MAX_PAD (the template pads the axis). Never empty: the
    all-outer split (extent, 1, ..., 1) always qualifies.
    """
    cands = [c for c in split_knob(name, extent, parts).candidates if c[-1] <= inner_max]
    if pad:
        for inner in range(lanes or 1, inner_max + 1, lanes or 1):
            padded = -(-extent // inner) * inner
            if padded != extent and padded - extent <= MAX_PAD * extent:
                cands += [(*c, inner) for c in split_knob(name, padded // inner, parts - 1).candidates]
    if tile_max is not None:
        cands = [c for c in cands if _prod(c[1:]) <= tile_max]
    if lanes:
        wide = [c for c in cands if c[-1] % lanes == 0 or (c[-1] <= also_rows and extent % lanes == 0)]
        cands = wide or cands
    return Knob(name, "split", tuple(cands))


def pads_little(extent: int, block: int) -> bool:
    """Whether whole blocks cover `extent` with at most MAX_PAD of padding."""
    return -(-extent // block) * block - extent <= MAX_PAD * extent


def unroll_knob() -> Knob:
    """Choice of `pragma_auto_unroll_max_step` for the outermost loop (0 = no pragma)."""
    return choice_knob("auto_unroll", UNROLL_STEPS)


def annotate_unroll(sch, loop, max_step: int) -> None:
    """Ask the lowering to unroll inner loops up to `max_step` iterations, explicitly."""
    if max_step > 0:
        sch.annotate(loop, "pragma_auto_unroll_max_step", max_step)
        sch.annotate(loop, "pragma_unroll_explicit", 1)


def split(sch, loop, factors: Sequence[int]) -> list:
    """Split `loop` by an exact factor tuple (outermost first)."""
    return list(sch.split(loop, factors=[int(f) for f in factors]))


def vectorize_loop(sch, loop) -> None:
    """Vectorise `loop` unless it has a single iteration (a 1-lane vector does not lower).

    An even extent that is not a power of two (24, 48) is split: its largest power-of-two factor
    vectorised, the rest unrolled. LLVM widens a 24- or 48-lane vector to the next power of two and
    then loads and stores it element by element: a 4x24 register tile on AVX2 runs about ten times
    slower that way than split into 3 x 8 lanes.
    """
    extent = int(sch.get(loop).extent)
    width = extent & -extent  # the largest power of two dividing it
    if 1 < width < extent:
        rest, loop = sch.split(loop, factors=[extent // width, width])
        sch.unroll(rest)
    if extent > 1:
        sch.vectorize(loop)


def vectorize_inner(sch, block, width: int) -> None:
    """Vectorise the innermost loop of `block`, split to `width` lanes when it is longer.

    Nothing happens when that loop is not the block's own (all of the block's loops had extent 1 and
    the innermost one around it also holds other blocks).
    """
    loop = sch.get_loops(block)[-1]
    if len(sch.get_child_blocks(loop)) != 1:
        return
    extent = int(sch.get(loop).extent)
    if extent > width and extent % width == 0:
        loop = sch.split(loop, factors=[None, width])[1]
    elif extent > width:
        return
    vectorize_loop(sch, loop)


def decompose(sch, block, loop) -> None:
    """Hoist the reduction's init above `loop` (vectorised), unless the reduction is trivial."""
    if all(int(iv.dom.extent) == 1 for iv in sch.get(block).iter_vars if iv.iter_type == 2):
        return  # every reduction axis has extent 1: TVM refuses to decompose; T.init lowers fine
    init = sch.decompose_reduction(block, loop)
    vectorize_loop(sch, sch.get_loops(init)[-1])


def parallel_fused(sch, loops: Sequence):
    """Fuse `loops` (outermost first) and mark the result parallel; returns the fused loop."""
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    sch.parallel(fused)
    return fused


def _prod(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out
