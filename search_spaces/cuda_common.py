"""Helpers shared by the CUDA schedule templates: GPU tile knobs, binding, shared-memory fetch, unrolling.

A spatial axis is tiled in four levels (block, vthread, thread, inner): the block level is bound
to blockIdx, the vthread level to a virtual thread (strided sub-tiles of one thread, which spreads
shared-memory accesses over banks), the thread level to threadIdx, and the inner level is the
per-thread register tile. The knobs are bounded here so that most configs respect the GPU
limits; `autotune.gpu_limits.check_config` rejects the rest before building.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from autotune.gpu_limits import compute_capability
from autotune.space import Knob, choice_knob, split_knob

FLOAT_BYTES = 4
MAX_VTHREAD = 4  # per axis
MAX_THREAD = 32  # per axis
MAX_INNER = 8  # register tile per axis
MAX_THREAD_TILE = 16  # vthread * inner per axis: elements of one axis a thread computes
UNROLL_STEPS = (0, 16, 64, 512, 1500)
FETCH_VECTORS = (1, 2, 4)  # float, float2, float4 loads into shared memory
ASYNC_COPY_SINCE = 80  # compute capability of the first GPUs with cp.async (Ampere)


def gpu_tile_knob(name: str, extent: int, max_thread: int = MAX_THREAD, max_vthread: int = MAX_VTHREAD,
                  max_inner: int = MAX_INNER) -> Knob:
    """Exact 4-level split (block, vthread, thread, inner) of a spatial axis, with bounded inner levels."""
    cands = [c for c in split_knob(name, extent, 4).candidates
             if c[1] <= max_vthread and c[2] <= max_thread and c[3] <= max_inner and c[1] * c[3] <= MAX_THREAD_TILE]
    return Knob(name, "split", tuple(cands))


def reduce_tile_knob(name: str, extent: int, parts: int, max_tile: int, max_inner: int | None = None) -> Knob:
    """Exact split of a reduction axis; the product of the inner levels (the shared tile) is <= max_tile."""
    cands = [c for c in split_knob(name, extent, parts).candidates
             if math.prod(c[1:]) <= max_tile and (max_inner is None or c[-1] <= max_inner)]
    return Knob(name, "split", tuple(cands))


def unroll_knobs() -> tuple[Knob, Knob]:
    """`auto_unroll_max_step` (0 = none) and whether the unrolling is explicit (done by TVM) or a pragma."""
    return choice_knob("auto_unroll", UNROLL_STEPS), choice_knob("unroll_explicit", (True, False))


def fetch_vector_knob(name: str = "fetch_vec") -> Knob:
    """Vector width of the cooperative loads into shared memory."""
    return choice_knob(name, FETCH_VECTORS)


def block_tile(tile: Sequence[int]) -> int:
    """Elements of the axis one thread block covers."""
    return math.prod(tile[1:])


def thread_tile(tile: Sequence[int]) -> int:
    """Elements of the axis one thread computes (vthread * inner)."""
    return tile[1] * tile[3]


def split(sch, loop, factors: Sequence[int]) -> list:
    """Split `loop` by an exact factor tuple (outermost first)."""
    return list(sch.split(loop, factors=[int(f) for f in factors]))


def bind_levels(sch, block_loops: Sequence, vthread_loops: Sequence, thread_loops: Sequence) -> None:
    """Bind tiles to the GPU: the last loop of each level to .x, the one before to .y, then .z."""
    for level, kind in ((block_loops, "blockIdx"), (vthread_loops, "vthread"), (thread_loops, "threadIdx")):
        for loop, axis in zip(reversed(level), "xyz"):
            sch.bind(loop, f"{kind}.{axis}")


def cooperative_fetch(sch, consumer, buffer, anchor, threads: Sequence[int], vec: int, scope: str = "shared"):
    """Stage `buffer` of `consumer` in shared memory (`scope`: "shared" or "shared.dyn") at loop `anchor`,
    loaded by all threads together.

    `threads` are the thread extents (z, y, x order, outermost first, as bound on the main block);
    the copy's loops are fused and split over them with the innermost `vec` elements vectorised.
    """
    cache = sch.cache_read(consumer, buffer, scope)
    sch.compute_at(cache, anchor)
    loops = sch.get_loops(cache)
    anchor_stmt = sch.get(anchor)
    depth = next(n for n, loop in enumerate(loops) if sch.get(loop).same_as(anchor_stmt)) + 1
    copy_loops = loops[depth:] or [sch.add_unit_loop(cache)]  # a one-element tile has no loop of its own
    fused = sch.fuse(*copy_loops) if len(copy_loops) > 1 else copy_loops[0]
    # the outer loop (inferred) repeats the round; a partial last round is predicated
    parts = list(sch.split(fused, factors=[None, *[int(t) for t in threads], vec]))[1:]
    for loop, axis in zip(reversed(parts[:-1]), "xyz"):
        sch.bind(loop, f"threadIdx.{axis}")
    if vec > 1:
        sch.vectorize(parts[-1])
    return cache


def double_buffer(sch, loop, copies: int, arch: str) -> None:
    """Software-pipeline `loop`, whose body is `copies` shared-memory copies then the compute on them: the
    copies for iteration k + 1 run while iteration k computes, into a second buffer (the lowering doubles
    each shared tile). From sm_80 on the copies are asynchronous (cp.async, with `tirx.use_async_copy`:
    `autotune.target.compile_kernel`), so the loads are in flight during the compute."""
    sch.annotate(loop, "software_pipeline_stage", [0] * copies + [1])
    sch.annotate(loop, "software_pipeline_order", list(range(copies + 1)))
    if compute_capability(arch) >= ASYNC_COPY_SINCE:
        sch.annotate(loop, "software_pipeline_async_stages", [0])


def accumulate_locally(sch, block, thread_loop):
    """Accumulate `block`'s output in registers, written back to global memory per thread tile."""
    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, thread_loop)
    return local


def annotate_unroll(sch, loop, max_step: int, explicit: bool) -> None:
    """Ask the lowering to unroll inner loops of up to `max_step` iterations."""
    if max_step > 0:
        sch.annotate(loop, "pragma_auto_unroll_max_step", max_step)
        sch.annotate(loop, "pragma_unroll_explicit", int(explicit))


def vector_problem(name: str, cols: int, row_stride: int, vec: int) -> str:
    """Why a tile with rows of `cols` contiguous elements, `row_stride` apart in global memory, cannot be
    loaded `vec`-wide (aligned vectors need both to be multiples of `vec`); "" when it can.

    A tile that is not a multiple of threads x vec is fine: the last round is predicated per vector.
    """
    if vec > 1 and (cols % vec or row_stride % vec):
        return f"{name} tile rows of {cols} (stride {row_stride}) are not multiples of the fetch vector {vec}"
    return ""
