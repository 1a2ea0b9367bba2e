"""CUDA template for depthwise conv2d NCHW (multiplier 1).

Loops of block "conv": n, c, y, x (spatial), r, s (reduction, small: kept whole and left to the
unroller). Tiling:
  n*c0 (blockIdx.z) y0 (.y) x0 (.x) | c1 y1 x1 (vthread) | c2 y2 x2 (threadIdx z, y, x) | r s | c3 y3 x3
Knob "fetch": "shared" copies the block's input window [BC, rows, cols] and its weights [BC, R, S]
to shared memory once per block (neighbouring outputs share most of their inputs), with the
zero padding inlined into the copy; "global" reads both straight from global memory (through
L1), with the padding inlined into the convolution.
"""

from __future__ import annotations

from typing import Any

from autotune.gpu_limits import REGISTER_OVERHEAD, KernelResources
from autotune.space import Config, ConfigSpace, choice_knob
from autotune.task import Task
from autotune.templates import Template, prim_func

from .base import output_shape
from .cuda_common import (
    FLOAT_BYTES,
    accumulate_locally,
    annotate_unroll,
    bind_levels,
    block_tile,
    cooperative_fetch,
    gpu_tile_knob,
    split,
    thread_tile,
    unroll_knobs,
)
from .cuda_conv2d import input_window

MAX_THREAD_C = 16  # threadIdx.z of the channel axis (CUDA allows 64)


def define_space(task: Task) -> ConfigSpace:
    """4-level tiles of c, y, x; where inputs are read from; unrolling."""
    _, channels, oh, ow = output_shape(task)
    return ConfigSpace(knobs=(
        gpu_tile_knob("tile_c", channels, max_thread=MAX_THREAD_C),
        gpu_tile_knob("tile_y", oh),
        gpu_tile_knob("tile_x", ow),
        choice_knob("fetch", ("shared", "global")),
        *unroll_knobs(),
    ))


def apply(task: Task, cfg: Config):
    """Build the schedule of one config (raises on an illegal one)."""
    from tvm import s_tir

    sch = s_tir.Schedule(prim_func(task))
    blk = sch.get_sblock("conv")
    n, c, y, x, r, s = sch.get_loops(blk)
    c0, c1, c2, c3 = split(sch, c, cfg["tile_c"])
    y0, y1, y2, y3 = split(sch, y, cfg["tile_y"])
    x0, x1, x2, x3 = split(sch, x, cfg["tile_x"])
    sch.reorder(n, c0, y0, x0, c1, y1, x1, c2, y2, x2, r, s, c3, y3, x3)
    bz = sch.fuse(n, c0)
    bind_levels(sch, [bz, y0, x0], [c1, y1, x1], [c2, y2, x2])
    accumulate_locally(sch, blk, x2)
    padded = task.shape["padding"] > 0
    if cfg["fetch"] == "shared":
        threads = (cfg["tile_c"][2], cfg["tile_y"][2], cfg["tile_x"][2])
        cooperative_fetch(sch, blk, "pad" if padded else "data", x0, threads, 1)
        cooperative_fetch(sch, blk, "weight", x0, threads, 1)
    if padded:
        sch.compute_inline(sch.get_sblock("pad"))
    sch.decompose_reduction(blk, r)
    annotate_unroll(sch, bz, cfg["auto_unroll"], cfg["unroll_explicit"])
    return sch


def kernel_resources(task: Task, cfg: Config) -> KernelResources:
    """Threads, shared memory and registers of one config, from its knobs alone."""
    p = task.shape
    tc, ty, tx = cfg["tile_c"], cfg["tile_y"], cfg["tile_x"]
    shared = 0
    if cfg["fetch"] == "shared":
        rows = input_window(block_tile(ty), p["R"], p["stride"], 1)
        cols = input_window(block_tile(tx), p["S"], p["stride"], 1)
        shared = block_tile(tc) * (rows * cols + p["R"] * p["S"])
    acc = thread_tile(tc) * thread_tile(ty) * thread_tile(tx)
    return KernelResources(
        block=(tx[2], ty[2], tc[2]), grid=(tx[0], ty[0], p["N"] * tc[0]),
        shared_bytes=shared * FLOAT_BYTES,
        registers=acc + thread_tile(tc) + REGISTER_OVERHEAD,
        vthreads=tc[1] * ty[1] * tx[1])


def preferences(task: Task) -> dict[str, Any]:
    """The config an untuned build prefers (`Template.preferences`): 4 x 4 x 8 threads (channels x rows x
    columns), 2 x 2 outputs (rows x columns) each, the input window staged in shared memory."""
    return {"tile_c": (1, 4, 1), "tile_y": (2, 4, 1), "tile_x": (2, 8, 1), "fetch": "shared", "auto_unroll": 512,
            "unroll_explicit": True}


DEPTHWISE_CUDA = Template("depthwise_conv2d_cuda", "depthwise_conv2d", "cuda", define_space, apply,
                          preferences=preferences, kernel_resources=kernel_resources)
