"""Schedules without tuning: a heuristic template config for tunable ops (`templates.heuristic_configs`), a
generic one for the rest.

Generic schedule of a PrimFunc: TVM's DLight CPU reduction rule when it applies (softmax,
layer norm: parallel over rows) and the rows are whole vectors, else per block: inline injective producers, fuse
the leading spatial loops and run them in parallel (of a block annotated PARALLEL_LOOPS, that many), vectorise the
innermost spatial loop (whole vectors, then a scalar tail).
"""

from __future__ import annotations

import math
from typing import Any

from ..gpu_limits import check_config
from ..space import Config
from ..task import Task
from ..templates import VECTOR, Template, heuristic_configs, space_of

MIN_PARALLEL_WORK = 4096  # loop iterations below which threading costs more than it saves
FALLBACK_SAMPLES = 256  # random configs tried for one the target can run when no heuristic one can
PARALLEL_LOOPS = "autotune.parallel_loops"  # a block annotation (a TE compute's attrs): of its symbolic loop nest's
# spatial loops, how many outer ones run in parallel; the inner ones stay serial, so that what they compute from the
# outer indices (a window's position from an output pixel) is computed once per outer iteration


def default_candidates(template: Template, task: Task) -> list[Config]:
    """The heuristic configs (on CUDA then a random sample of the space) that the target can run: on a GPU, within
    its limits of threads, shared memory and registers (`gpu_limits.check_config`); [] where none is."""
    import numpy as np

    space = space_of(template, task)
    candidates = heuristic_configs(template, task)
    if task.target_kind == "cuda":
        sample = space.sample(np.random.default_rng(0), FALLBACK_SAMPLES, exclude={c.index for c in candidates})
        candidates += [space.get(i) for i in sample]
    return [cfg for cfg in candidates if check_config(task, template, cfg) is None]


def default_template_func(template: Template, task: Task) -> tuple[Any, Config]:
    """PrimFunc of the first of the `default_candidates` the template accepts."""
    errors = []
    for cfg in default_candidates(template, task):
        try:
            return template.kernel(task, cfg)["main"], cfg
        except Exception as err:  # noqa: BLE001 - an illegal config: try the next fallback
            errors.append(f"#{cfg.index}: {type(err).__name__}")
    raise RuntimeError(f"no heuristic config of {template.name} applies: {'; '.join(errors[:8]) or 'none fits'}")


# ---- generic schedule of any PrimFunc -----------------------------------------------------

def _dlight_reduction(func: Any, target: Any) -> Any | None:
    from tvm.s_tir.dlight.cpu import Reduction

    try:
        sch = Reduction().apply(func, target, False)
    except Exception:  # noqa: BLE001 - the rule's analysis does not cover this function
        return None
    return sch


def _inline_producers(sch: Any) -> None:
    blocks = sch.get_child_blocks(sch.get_sblock("root")) if _has_root(sch) else []
    for blk in list(blocks)[:-1]:
        try:
            sch.compute_inline(blk)
        except Exception:  # noqa: BLE001, S110 - not injective or not inlinable: keep it as its own loop nest
            pass


def _has_root(sch: Any) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except Exception:  # noqa: BLE001 - a function without a root block
        return False


def _extent(sch: Any, loop: Any) -> int | None:
    ext = sch.get(loop).extent
    return int(ext) if hasattr(ext, "value") else None


def _vector_width(inner: int, lanes: int) -> int:
    """Lanes to vectorise an innermost loop of `inner` iterations by: all of them when they fit one vector, else
    the largest power of two up to `lanes` that divides `inner` (1: not vectorised)."""
    if inner <= lanes:
        return inner if inner >= 2 else 1
    width = lanes
    while width > 1 and inner % width:
        width //= 2
    return width


def spatial_prefix(sch: Any, blk: Any) -> int:
    """How many of a block's loops, from the outermost, are data-parallel (0 where its loops are not one per
    block variable, e.g. already split)."""
    loops, iters = sch.get_loops(blk), sch.get(blk).iter_vars
    if not loops or len(loops) != len(iters):
        return 0
    kinds = [int(iv.iter_type) for iv in iters]  # 0 = data parallel
    return next((i for i, k in enumerate(kinds) if k != 0), len(kinds))


def schedule_block(sch: Any, blk: Any, lanes: int, tail: bool = True) -> bool:
    """Parallelise and vectorise one block's loop nest (vectors of `lanes` fp32); False when it is left as is.
    `tail`: vectorise an odd innermost loop by partitioning off a scalar tail (else it stays scalar)."""
    loops = sch.get_loops(blk)
    n_spatial = spatial_prefix(sch, blk)
    if n_spatial == 0:
        return False
    extents = [_extent(sch, lp) for lp in loops]
    if any(e is None for e in extents):  # a symbolic size: its spatial loops in parallel, vectors where static
        return _schedule_symbolic(sch, blk, loops, extents, n_spatial, lanes)
    spatial = list(loops[:n_spatial])
    vector_loop = tail_loop = None
    if n_spatial == len(loops):  # purely spatial: vectorise the innermost loop
        inner = extents[n_spatial - 1]
        width = _vector_width(inner, lanes)
        if width == inner > 1:
            vector_loop = spatial.pop()
        elif tail and 2 * width < lanes and inner > lanes and len(spatial) > 1:
            tail_loop = spatial.pop()  # an odd width (30 = 2 x 15): whole vectors, then a scalar tail
        elif width > 1:
            spatial[-1], vector_loop = sch.split(spatial[-1], factors=[None, width])
    outer = [lp for lp in spatial if lp is not None]
    work = math.prod(extents)
    if outer and work >= MIN_PARALLEL_WORK:
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        if _extent(sch, fused) and _extent(sch, fused) > 1:
            sch.parallel(fused)
    if vector_loop is not None:
        sch.vectorize(vector_loop)
    if tail_loop is not None:
        vectorize_with_tail(sch, tail_loop, lanes)
    return True


def _last_axis_reads(sch: Any, blk: Any) -> list[Any]:
    """The expressions that index the last axis of each buffer the block reads (the axis it reads contiguously)."""
    return [region.region[-1].min for region in sch.get(blk).reads if region.region]


def _walks_rows(sch: Any, blk: Any, n_spatial: int) -> bool:
    """Whether a reduction block reads some buffer along its innermost spatial variable (its last index: a
    product's second operand, B[k, j]), so that the reduction is better outside that loop; a row's reduction
    (softmax's max and sum, x[i, k]) reads along the reduction and keeps it innermost."""
    inner = sch.get(blk).iter_vars[n_spatial - 1].var
    return any(last.same_as(inner) for last in _last_axis_reads(sch, blk))


def _row_walk(sch: Any, blk: Any, extents: list[int | None], n_spatial: int) -> int | None:
    """The outer spatial loop (of a static extent) that indexes the last axis of some buffer the block reads (a
    transpose: rows [P, K] read as [N, K, OH, OW]), else None."""
    outer = [iv.var for iv in sch.get(blk).iter_vars[:n_spatial - 1]]
    return next((k for last in _last_axis_reads(sch, blk) for k, var in enumerate(outer)
                 if last.same_as(var) and extents[k] is not None), None)


def _schedule_symbolic(sch: Any, blk: Any, loops: list[Any], extents: list[int | None], n_spatial: int,
                       lanes: int) -> bool:
    """A loop nest with a symbolic extent (a model exported with a dynamic size): the innermost loop vectorised
    where it is spatial, static and fits a vector's multiple (where it is symbolic, left serial: LLVM's vectoriser
    makes whole vectors and a scalar tail of it), the other spatial loops fused and parallel (their
    work unknown at build time: parallel, as for a large one). A reduction (a product of two activations: attention)
    runs its reduction loops outside the innermost spatial loop, so that the innermost loop walks the output row
    and the second operand's row contiguously (vectorised where static, else left to LLVM's vectoriser). A block
    annotated PARALLEL_LOOPS runs only that many outer spatial loops in parallel. Where an outer loop walks some
    buffer's last axis (`_row_walk`: a transpose), it moves next to the innermost one, so that the rows the innermost
    loop reads stay in cache while that loop walks along them."""
    spatial = list(loops[:n_spatial])
    vector_loop = None
    reduction = list(loops[n_spatial:])
    walk = _row_walk(sch, blk, extents, n_spatial) if not reduction and n_spatial >= 3 else None
    if walk is not None and walk < n_spatial - 2:
        order = [*spatial[:walk], *spatial[walk + 1:-1], spatial[walk], spatial[-1]]
        sch.reorder(*order)
        spatial = order
    if reduction and n_spatial >= 2 and _walks_rows(sch, blk, n_spatial):
        inner = spatial.pop()
        sch.reorder(*reduction, inner)
        if extents[n_spatial - 1] is not None and _vector_width(extents[n_spatial - 1], lanes) == \
                extents[n_spatial - 1] > 1:
            vector_loop = inner
    elif n_spatial == len(loops) and extents[-1] is not None:
        width = _vector_width(extents[-1], lanes)
        if width == extents[-1] > 1:
            vector_loop = spatial.pop()
        elif width > 1:
            spatial[-1], vector_loop = sch.split(spatial[-1], factors=[None, width])
    elif n_spatial == len(loops) and n_spatial >= 2:
        spatial.pop()  # a symbolic innermost loop stays serial: LLVM vectorises it (fused, it would not be)
    outer = sch.get(blk).annotations.get(PARALLEL_LOOPS)
    if outer is not None:
        spatial = spatial[:int(outer)]
    if spatial:
        sch.parallel(sch.fuse(*spatial) if len(spatial) > 1 else spatial[0])
    if vector_loop is not None:
        sch.vectorize(vector_loop)
    return True


def vectorize_with_tail(sch: Any, loop: Any, lanes: int) -> bool:
    """Vectorise a loop whose extent is not a multiple of `lanes`: it is partitioned into whole vectors (split and
    vectorised) and a scalar tail loop of its own, so no vector runs under a predicate (TVM would scalarise it).
    False when the loop is not longer than one vector or not partitionable."""
    extent = _extent(sch, loop)
    if extent is None or extent <= lanes:
        return False
    main = extent // lanes * lanes
    try:
        body = sch.loop_partition(loop, [main, None])[0] if main < extent else loop
        _, inner = sch.split(body, factors=[None, lanes])
        sch.vectorize(inner)
    except Exception:  # noqa: BLE001 - an annotated loop or a block the primitives refuse: left scalar
        return False
    return True


def _generic(func: Any, lanes: int, tail: bool = True) -> Any:
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    _inline_producers(sch)
    for blk in sch.get_child_blocks(sch.get_sblock("root")):
        try:
            schedule_block(sch, blk, lanes, tail)
        except Exception:  # noqa: BLE001, S112 - a primitive refused: this block stays serial
            continue
    return sch


def _rows_leave_dlight(func: Any, lanes: int) -> bool:
    """Whether the per-block schedule beats DLight's rule: the output's rows (last dimension) are longer than a
    vector but not whole vectors, which DLight vectorises under a predicate (TVM scalarises that), and no reduction
    reads a block that computes over its domain (softmax's sum of exp, which DLight computes once per row and the
    per-block schedule, inlining it, twice). Norms and their activations over such rows run faster this way;
    softmax stays with DLight, which is faster there."""
    from tvm import s_tir
    from tvm.ir.expr import TensorLoad

    try:
        last = int(func.params[-1].ty.shape[-1])
    except (AttributeError, TypeError, IndexError):  # a scalar, a symbolic width
        return False
    if last <= lanes or last % lanes == 0:
        return False
    try:
        sch = s_tir.Schedule(func)
        blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    except Exception:  # noqa: BLE001 - not a schedulable function: DLight decides
        return False

    def reduces(blk: Any) -> bool:
        return any(int(iv.iter_type) != 0 for iv in sch.get(blk).iter_vars)

    def computes_over(blk: Any, reduction: Any) -> bool:
        """`blk` computes (not a copy) an element per element of the reduction's domain (not one per row)."""
        block, body = sch.get(blk), sch.get(blk).body
        if len(block.iter_vars) < len(sch.get(reduction).iter_vars):
            return False
        return not (hasattr(body, "value") and isinstance(body.value, TensorLoad))

    return not any(computes_over(p, b) for b in blocks if reduces(b) for p in sch.get_producers(b) if not reduces(p))


def _one_row(func: Any) -> bool:
    """Whether the output is a single row (every dimension but the last of size 1: a decoding step's norm). DLight's
    rule takes the row's elements for its rows there, and computes the row's sums again for every element."""
    try:
        shape = [int(d) for d in func.params[-1].ty.shape]
    except (AttributeError, TypeError):  # a scalar, a symbolic size
        return False
    return len(shape) >= 1 and math.prod(shape[:-1]) == 1 and shape[-1] > 1


def generic_schedule(func: Any, target: Any, lanes: int = VECTOR) -> tuple[Any, str]:
    """(scheduled PrimFunc marked scheduled, which schedule was used); `lanes`: fp32 lanes of the target's vectors.
    A reshape keeps loops the Relax VM recognises as one (RewriteDataflowReshape makes it a view, not a copy)."""
    from tvm import relax

    tail = not relax.analysis.has_reshape_pattern(func)
    sch = None if _one_row(func) or _rows_leave_dlight(func, lanes) else _dlight_reduction(func, target)
    how = "dlight-reduction"
    if sch is None:
        try:
            sch, how = _generic(func, lanes, tail), "generic"
        except Exception:  # noqa: BLE001 - nothing applies: leave the function unscheduled but valid
            return func.with_attr("tirx.is_scheduled", True), "unscheduled"
    return sch.mod["main"].with_attr("tirx.is_scheduled", True), how
