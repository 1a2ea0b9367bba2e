"""Schedules without tuning: a heuristic template config for tunable ops, a generic one for the rest.

Generic schedule of a PrimFunc: TVM's DLight CPU reduction rule when it applies (softmax,
layer norm: parallel over rows) and the rows are whole vectors, else per block: inline injective producers, fuse
the leading spatial loops and run them in parallel, vectorise the innermost spatial loop (whole vectors, then a
scalar tail).
"""

from __future__ import annotations

import math
from typing import Any

from ..space import Config, ConfigSpace
from ..target import vector_unit
from ..task import Task

VECTOR = 16  # fp32 lanes of a 512-bit register
MIN_PARALLEL_WORK = 4096  # loop iterations below which threading costs more than it saves

# Preferred inner factors (innermost first) per split knob, per operator, for vectors of 16 fp32 lanes (AVX-512,
# 32 registers): register tiles of 8 accumulators (GEMM 4 rows x 2 vectors, conv2d 8 columns x 1 vector).
SPLIT_PREFS: dict[str, dict[str, tuple[int, ...]]] = {
    "gemm": {"tile_i": (4, 4), "tile_j": (32, 2), "tile_k": (256,)},
    "conv2d": {"tile_k": (16, 2), "tile_y": (1,), "tile_x": (8, 1), "tile_c": (32,)},
    "depthwise_conv2d": {"tile_c": (16,), "tile_y": (1,), "tile_x": (8,)},
}


def _lane_prefs(lanes: int) -> dict[str, dict[str, tuple[int, ...]]]:
    """The factors that follow the vector width, for narrower vectors (AVX2's 8 lanes and 16 registers): one vector
    of output channels by 8 columns, and GEMM rows of 3 vectors (4 x 3 = 12 accumulators), as the best configs
    found by tuning on an AVX2 CPU are; the AVX-512 factors there spill registers."""
    if lanes >= VECTOR:
        return {}
    return {"gemm": {"tile_j": (3 * lanes,)}, "conv2d": {"tile_k": (lanes, 2)},
            "depthwise_conv2d": {"tile_c": (lanes,)}}
CHOICE_PREFS: dict[str, dict[str, Any]] = {
    "gemm": {"mid_order": "ij", "auto_unroll": 64},
    "conv2d": {"vec_axis": "k", "c0_outer": True, "reduction_order": "c1_r_s", "pad": "root", "auto_unroll": 16},
    "depthwise_conv2d": {"vec_axis": "c", "input_at": "tile", "auto_unroll": 64},
}


# CUDA templates (4-level spatial tiles block/vthread/thread/inner, innermost first here): 16 x 16 threads of
# 4 x 4 outputs for GEMMs, 8 x 2 x 8 threads of conv2d outputs, shared tiles 16 deep.
CUDA_SPLIT_PREFS: dict[str, dict[str, tuple[int, ...]]] = {
    "gemm": {"tile_i": (4, 16, 1), "tile_j": (4, 16, 1), "tile_k": (4, 4)},
    "conv2d": {"tile_k": (4, 8, 1), "tile_y": (1, 2, 1), "tile_x": (2, 8, 1), "tile_c": (8,), "tile_r": (3,),
               "tile_s": (3,)},
    "depthwise_conv2d": {"tile_c": (1, 4, 1), "tile_y": (2, 4, 1), "tile_x": (2, 8, 1)},
}
CUDA_CHOICE_PREFS: dict[str, dict[str, Any]] = {
    "gemm": {"fetch_vec": 4, "double_buffer": False, "auto_unroll": 512, "unroll_explicit": True},
    "conv2d": {"auto_unroll": 512, "unroll_explicit": True},
    "depthwise_conv2d": {"fetch": "shared", "auto_unroll": 512, "unroll_explicit": True},
}
FALLBACK_SAMPLES = 256  # random configs tried for one the target can run when no heuristic one can


def _family(op: str) -> str:
    """Operators that share a template share its preferences."""
    return {"matmul": "gemm", "dense": "gemm", "batch_matmul": "gemm", "group_conv2d": "conv2d"}.get(op, op)


def _split_score(value: tuple[int, ...], prefs: tuple[int, ...]) -> float:
    inner = value[::-1][: len(prefs)]
    return sum(abs(math.log2(f) - math.log2(p)) for f, p in zip(inner, prefs))


def _pick(knob: Any, family: str, task: Task) -> Any:
    cuda = task.target_kind == "cuda"
    if knob.kind == "split":
        if cuda:
            prefs = CUDA_SPLIT_PREFS.get(family, {}).get(knob.name, (4,))
        else:
            lanes = vector_unit(task.target)[0] if task.target_kind == "llvm" else VECTOR
            prefs = (_lane_prefs(lanes).get(family, {}).get(knob.name)
                     or SPLIT_PREFS.get(family, {}).get(knob.name, (VECTOR,)))
        return min(knob.candidates, key=lambda v: _split_score(v, prefs))
    want = (CUDA_CHOICE_PREFS if cuda else CHOICE_PREFS).get(family, {}).get(knob.name)
    if knob.name == "pack_b":  # packing B costs a pass over it: only worth it with enough rows
        rows = task.shape.get("M", task.shape.get("batch", 1))
        want = "tile" if rows >= 16 else "none"
    return want if want in knob.candidates else knob.candidates[0]


def heuristic_configs(space: ConfigSpace, task: Task, count: int = 8) -> list[Config]:
    """The heuristic config first, then variants of it (one knob changed) as fallbacks."""
    family = _family(task.op)
    digits = [knob.candidates.index(_pick(knob, family, task)) for knob in space.knobs]
    out = [space.index_of(digits)]
    for i, knob in enumerate(space.knobs):
        for d in range(len(knob)):
            if len(out) >= count:
                break
            alt = digits[:i] + [d] + digits[i + 1:]
            if space.index_of(alt) not in out:
                out.append(space.index_of(alt))
    return [space.get(i) for i in out]


def default_candidates(template: Any, task: Task) -> list[Config]:
    """The heuristic configs (on CUDA then a random sample of the space) that the target can run: on a GPU, within
    its limits of threads, shared memory and registers (`gpu_limits.check_config`); [] where none is."""
    import numpy as np

    from ..gpu_limits import check_config

    space = template.define_space(task)
    candidates = heuristic_configs(space, task)
    if task.target_kind == "cuda":
        sample = space.sample(np.random.default_rng(0), FALLBACK_SAMPLES, exclude={c.index for c in candidates})
        candidates += [space.get(i) for i in sample]
    return [cfg for cfg in candidates if check_config(task, template, cfg) is None]


def default_template_func(template: Any, task: Task) -> tuple[Any, Config]:
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
    if any(e is None for e in extents):
        return False
    spatial = list(loops[:n_spatial])
    vector_loop = tail_loop = None
    if n_spatial == len(loops):  # purely spatial: vectorise the innermost loop
        inner = extents[n_spatial - 1]
        width = _vector_width(inner, lanes)
        if width == inner > 1:
            vector_loop = spatial.pop()
        elif width > 1:
            spatial[-1], vector_loop = sch.split(spatial[-1], factors=[None, width])
        elif tail and inner > lanes and len(spatial) > 1:  # an odd width: whole vectors, then a scalar tail
            tail_loop = spatial.pop()
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


def vectorize_with_tail(sch: Any, loop: Any, lanes: int) -> bool:
    """Vectorise a loop whose extent is not a multiple of `lanes`: it is partitioned into whole vectors (split and
    vectorised) and a scalar tail loop of its own, so no vector runs under a predicate (TVM would scalarise it).
    False when the loop is too short or not partitionable."""
    extent = _extent(sch, loop)
    if extent is None or extent < 2 * lanes:
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


def generic_schedule(func: Any, target: Any, lanes: int = VECTOR) -> tuple[Any, str]:
    """(scheduled PrimFunc marked scheduled, which schedule was used); `lanes`: fp32 lanes of the target's vectors.
    A reshape keeps loops the Relax VM recognises as one (RewriteDataflowReshape makes it a view, not a copy)."""
    from tvm import relax

    tail = not relax.analysis.has_reshape_pattern(func)
    sch = None if _rows_leave_dlight(func, lanes) else _dlight_reduction(func, target)
    how = "dlight-reduction"
    if sch is None:
        try:
            sch, how = _generic(func, lanes, tail), "generic"
        except Exception:  # noqa: BLE001 - nothing applies: leave the function unscheduled but valid
            return func.with_attr("tirx.is_scheduled", True), "unscheduled"
    return sch.mod["main"].with_attr("tirx.is_scheduled", True), how
