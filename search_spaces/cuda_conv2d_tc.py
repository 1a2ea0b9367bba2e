"""CUDA tensor-core path of the conv2d template: float16 (bfloat16) inputs, float32 sums, output in the input type,
as an implicit GEMM on WMMA fragments, scheduled as `cuda_gemm_tc` schedules a GEMM:

    C[k, p] = sum_q W'[k, q] X'[q, p]    q = (c, r, s) a tap of an input channel, p = (n, y, x) an output pixel

W' is the weight [K, C, R, S] as [K, C R S] (relaid once, as a constant: `relayouts`); X' the patches,
X'[(c, r, s), (n, y, x)] = the padded input at [n, c, y t + r d, x t + s d], never stored: the shared-memory copy of
each tile reads them from the input (the padding inlined), one element a thread at a time (a gather). The sums
leave through the shared output tile, rounded, into the NCHW output. `cuda_conv2d` chooses this path for float16
and bfloat16 conv2d whose K, C R S and N OH OW are multiples of 16.
"""

from __future__ import annotations

from typing import Any

from autotune.gpu_limits import KernelResources
from autotune.space import Config, ConfigSpace
from autotune.task import Task
from autotune.templates import Relayout

from . import cuda_gemm_tc, wmma_intrinsics
from .base import output_shape

STAGED = ("patches", "pad")  # inlined into the patches tile's shared-memory copy, in this order


def tiles(task: Task) -> tuple[int, int, int] | None:
    """(K, N OH OW, C R S) in 16-element tiles, or None where one is not a multiple of 16 or the task is not a
    float16 / bfloat16 conv2d."""
    p = task.shape
    if task.op != "conv2d" or task.dtype not in wmma_intrinsics.OPERANDS:
        return None
    n, k, oh, ow = output_shape(task)
    dims = (k, n * oh * ow, p["C"] * p["R"] * p["S"])
    return None if any(d % cuda_gemm_tc.TILE for d in dims) else tuple(d // cuda_gemm_tc.TILE for d in dims)


def gemm_func(task: Task) -> Any:
    """The convolution as the GEMM above (blocks "pad", "patches", "C", "C_out"), with the task's arguments but
    the weight relaid: data [N, C, H, W], weight [K, C R S], output [N, K, OH, OW]."""
    from tvm import te, tirx

    p, kind = task.shape, task.element
    n, k, oh, ow = output_shape(task)
    c, r, s, pad, st, dl = p["C"], p["R"], p["S"], p["padding"], p["stride"], p["dilation"]
    data = te.placeholder((n, c, p["H"], p["W"]), kind.storage, name="data")
    weight = te.placeholder((k, c * r * s), kind.storage, name="weight")
    zero = tirx.const(0, kind.storage)
    padded = te.compute(
        (n, c, p["H"] + 2 * pad, p["W"] + 2 * pad),
        lambda b, ch, y, x: tirx.if_then_else(tirx.all(y >= pad, y < p["H"] + pad, x >= pad, x < p["W"] + pad),
                                              data[b, ch, y - pad, x - pad], zero), name="pad")
    pixels, taps = oh * ow, r * s
    patches = te.compute(
        (c * taps, n * pixels),
        lambda q, px: padded[px // pixels, q // taps, px % pixels // ow * st + q % taps // s * dl,
                             px % ow * st + q % s * dl], name="patches")
    q = te.reduce_axis((0, c * taps), name="q")
    acc = kind.accumulate
    sums = te.compute((k, n * pixels), lambda o, px: te.sum(weight[o, q].astype(acc) * patches[q, px].astype(acc),
                                                            axis=q), name="C")
    out = te.compute((n, k, oh, ow), lambda b, o, y, x: sums[o, b * pixels + y * ow + x].astype(kind.output),
                     name="C_out")
    return te.create_prim_func([data, weight, out])


def define_space(task: Task) -> ConfigSpace:
    """The GEMM's space over its tiles (`cuda_gemm_tc.space_of_tiles`)."""
    return cuda_gemm_tc.space_of_tiles(*tiles(task))


def apply(task: Task, cfg: Config):
    """Build the schedule of one config (raises on an illegal one)."""
    from tvm import s_tir

    sch = s_tir.Schedule(gemm_func(task))
    return cuda_gemm_tc.schedule(sch, task, cfg, b_transposed=False, staged=STAGED, b_vec=1)


def relayouts(task: Task, cfg: Config) -> tuple[Relayout, ...]:
    """The weight [K, C, R, S] arrives as [K, C R S]."""
    p = task.shape
    return (Relayout(1, lambda k, c, r, s: (k, (c * p["R"] + r) * p["S"] + s)),)


def resources(task: Task, cfg: Config) -> KernelResources:
    """The GEMM's threads, shared memory and registers (B, the patches, stored [K, N])."""
    return cuda_gemm_tc.resources_of(False, cfg)


def preferences(task: Task) -> dict[str, Any]:
    """The GEMMs' untuned config."""
    return cuda_gemm_tc.preferences(None, task)
