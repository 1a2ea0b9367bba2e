"""Schedules for the functions of a CUDA model that are not tuned kernels.

A function of its own (softmax, layer norm, a reshape, an elementwise op autotune did not fuse into a kernel): the
first of DLight's GPU rules that applies, in the order TVM's CUDA pipeline tries them (Matmul, GEMV, Reduction,
GeneralReduction, Fallback). A block left beside a kernel in a fused function (an epilogue op that could not be
inlined into the kernel's write-back): its spatial loops fused and bound to blocks of `THREADS` threads.
"""

from __future__ import annotations

from typing import Any

from ..errors import AutotuneError
from .default_schedule import spatial_prefix

GPU_RULES = ("Matmul", "GEMV", "Reduction", "GeneralReduction", "Fallback")
THREADS = 256


def gpu_generic_schedule(func: Any, target: Any) -> tuple[Any, str]:
    """(scheduled PrimFunc marked scheduled, the DLight rule used); `target`: a CUDA tvm Target."""
    from tvm import s_tir
    from tvm.s_tir.dlight import gpu

    for name in GPU_RULES:
        try:
            sch = getattr(gpu, name)().apply(func, target, False)
        except Exception:  # noqa: BLE001, S112 - the rule's analysis does not cover this function
            continue
        if sch is None:
            continue
        sch = sch if isinstance(sch, s_tir.Schedule) else sch[0]
        return sch.mod["main"].with_attr("tirx.is_scheduled", True), f"dlight-{name.lower()}"
    raise AutotuneError(f"no GPU schedule applies to {func.attrs.get('global_symbol', 'a function')} "
                        "(none of DLight's rules)")


def bind_block(sch: Any, blk: Any) -> None:
    """Bind a block's leading spatial loops, fused, to blockIdx.x / threadIdx.x (`THREADS` a block); its reduction
    loops run inside each thread. Raises where the block has no spatial loop to bind."""
    loops, n_spatial = sch.get_loops(blk), spatial_prefix(sch, blk)
    if n_spatial == 0:
        raise ValueError("no spatial loop to bind")
    fused = sch.fuse(*loops[:n_spatial]) if n_spatial > 1 else loops[0]
    extent = int(sch.get(fused).extent)
    bx, tx = sch.split(fused, factors=[None, min(THREADS, extent)])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
