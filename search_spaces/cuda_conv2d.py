"""CUDA template for conv2d NCHW (direct convolution, as AutoTVM's conv2d_nchw.cuda).

Loops of block "conv": n, k, y, x (spatial), c, r, s (reduction). Tiling:
  n*k0 (blockIdx.z) y0 (.y) x0 (.x) | k1 y1 x1 (vthread) | k2 y2 x2 (threadIdx z, y, x)
  | c0 r0 s0 | c1 r1 s1 | k3 y3 x3 (registers)
At s0 the input window (c1 channels x rows x cols that the block's outputs need for r1 x s1 taps)
and the weight tile [BK, c1, r1, s1] are copied to shared memory by all threads; the zero-padding
block is inlined into that copy. The accumulator is a per-thread local array.
A grouped convolution (`group_conv2d`) is `groups` convolutions side by side: k is split into the group g and the
channel within it, g joins n and k0 on blockIdx.z, and the tiles of k and c are tiles of one group's channels, so
a block stages only its group's input channels.
"""

from __future__ import annotations

from typing import Any

from autotune.gpu_limits import REGISTER_OVERHEAD, KernelResources
from autotune.space import Config, ConfigSpace
from autotune.task import Task
from autotune.templates import Relayout, Template, prim_func

from . import cuda_conv2d_tc
from .base import conv_groups, output_shape
from .cuda_common import (
    FLOAT_BYTES,
    accumulate_locally,
    annotate_unroll,
    bind_levels,
    block_tile,
    cooperative_fetch,
    gpu_tile_knob,
    reduce_tile_knob,
    split,
    thread_tile,
    unroll_knobs,
)

MAX_C_TILE = 64  # input channels staged in shared memory per step
MAX_THREAD_K = 16  # threadIdx.z of the output-channel axis (CUDA allows 64)


def define_space(task: Task) -> ConfigSpace:
    """4-level tiles of k, y, x (k: one group's channels); 2-level tiles of c (one group's), r, s; unrolling."""
    p = task.shape
    _, k_group, c_group = conv_groups(task)
    _, _, oh, ow = output_shape(task)
    return ConfigSpace(knobs=(
        gpu_tile_knob("tile_k", k_group, max_thread=MAX_THREAD_K),
        gpu_tile_knob("tile_y", oh),
        gpu_tile_knob("tile_x", ow),
        reduce_tile_knob("tile_c", c_group, 2, max_tile=MAX_C_TILE),
        reduce_tile_knob("tile_r", p["R"], 2, max_tile=p["R"]),
        reduce_tile_knob("tile_s", p["S"], 2, max_tile=p["S"]),
        *unroll_knobs(),
    ))


def apply(task: Task, cfg: Config):
    """Build the schedule of one config (raises on an illegal one)."""
    from tvm import s_tir

    sch = s_tir.Schedule(prim_func(task))
    blk = sch.get_sblock("conv")
    n, k, y, x, c, r, s = sch.get_loops(blk)
    groups, k_group, _ = conv_groups(task)
    g = []  # the group loop, outside the tiles of k
    if groups > 1:
        *g, k = sch.split(k, [groups, k_group])
    k0, k1, k2, k3 = split(sch, k, cfg["tile_k"])
    y0, y1, y2, y3 = split(sch, y, cfg["tile_y"])
    x0, x1, x2, x3 = split(sch, x, cfg["tile_x"])
    c0, c1 = split(sch, c, cfg["tile_c"])
    r0, r1 = split(sch, r, cfg["tile_r"])
    s0, s1 = split(sch, s, cfg["tile_s"])
    sch.reorder(n, *g, k0, y0, x0, k1, y1, x1, k2, y2, x2, c0, r0, s0, c1, r1, s1, k3, y3, x3)
    bz = sch.fuse(n, *g, k0)
    bind_levels(sch, [bz, y0, x0], [k1, y1, x1], [k2, y2, x2])
    accumulate_locally(sch, blk, x2)
    threads = (cfg["tile_k"][2], cfg["tile_y"][2], cfg["tile_x"][2])
    padded = task.shape["padding"] > 0
    cooperative_fetch(sch, blk, "pad" if padded else "data", s0, threads, 1)
    cooperative_fetch(sch, blk, "weight", s0, threads, 1)
    if padded:
        sch.compute_inline(sch.get_sblock("pad"))  # its only consumer is now the shared-memory copy
    if task.element.output != task.element.accumulate:  # rounded (fp16, bf16) as each thread writes its tile back
        sch.reverse_compute_inline(sch.get_sblock("conv_out"))
    sch.decompose_reduction(blk, c0)
    annotate_unroll(sch, bz, cfg["auto_unroll"], cfg["unroll_explicit"])
    return sch


def input_window(out_tile: int, taps: int, stride: int, dilation: int) -> int:
    """Input rows (or columns) that `out_tile` outputs read through `taps` kernel taps."""
    return (out_tile - 1) * stride + (taps - 1) * dilation + 1


def kernel_resources(task: Task, cfg: Config) -> KernelResources:
    """Threads, shared memory and registers of one config, from its knobs alone."""
    p = task.shape
    tk, ty, tx = cfg["tile_k"], cfg["tile_y"], cfg["tile_x"]
    c1, r1, s1 = cfg["tile_c"][1], cfg["tile_r"][1], cfg["tile_s"][1]
    rows = input_window(block_tile(ty), r1, p["stride"], p["dilation"])
    cols = input_window(block_tile(tx), s1, p["stride"], p["dilation"])
    shared = c1 * rows * cols + block_tile(tk) * c1 * r1 * s1
    acc = thread_tile(tk) * thread_tile(ty) * thread_tile(tx)
    return KernelResources(
        block=(tx[2], ty[2], tk[2]), grid=(tx[0], ty[0], p["N"] * conv_groups(task)[0] * tk[0]),
        shared_bytes=shared * FLOAT_BYTES,
        registers=acc + thread_tile(tk) + thread_tile(ty) * thread_tile(tx) + REGISTER_OVERHEAD,
        vthreads=tk[1] * ty[1] * tx[1])


def preferences(task: Task) -> dict[str, Any]:
    """The config an untuned build prefers (`Template.preferences`): 8 x 2 x 8 threads of 4 x 1 x 2 outputs
    (channels x rows x columns), 8 input channels and the whole 3 x 3 kernel staged per step."""
    return {"tile_k": (4, 8, 1), "tile_y": (1, 2, 1), "tile_x": (2, 8, 1), "tile_c": (8,), "tile_r": (3,),
            "tile_s": (3,), "auto_unroll": 512, "unroll_explicit": True}


# float16 and bfloat16: on the tensor cores where the GEMM's sizes are multiples of 16 (`cuda_conv2d_tc`), else the
# inputs widened as they are read; compatible_versions: the float32-only version (the same float32 space and
# schedules)
def conv_space(task: Task) -> ConfigSpace:
    """The tensor-core path's space where it applies (`cuda_conv2d_tc`), else the direct schedule's."""
    return cuda_conv2d_tc.define_space(task) if cuda_conv2d_tc.tiles(task) else define_space(task)


def conv_apply(task: Task, cfg: Config):
    return cuda_conv2d_tc.apply(task, cfg) if cuda_conv2d_tc.tiles(task) else apply(task, cfg)


def conv_resources(task: Task, cfg: Config) -> KernelResources:
    return cuda_conv2d_tc.resources(task, cfg) if cuda_conv2d_tc.tiles(task) else kernel_resources(task, cfg)


def conv_relayouts(task: Task, cfg: Config) -> tuple[Relayout, ...]:
    return cuda_conv2d_tc.relayouts(task, cfg) if cuda_conv2d_tc.tiles(task) else ()


def conv_preferences(task: Task) -> dict[str, Any]:
    return cuda_conv2d_tc.preferences(task) if cuda_conv2d_tc.tiles(task) else preferences(task)


CONV2D_CUDA = Template("conv2d_cuda", "conv2d", "cuda", conv_space, conv_apply, preferences=conv_preferences,
                       kernel_resources=conv_resources, relayouts=conv_relayouts,
                       dtypes=("float32", "float16", "bfloat16"),
                       compatible_versions=("a3a797b86d36",))
GROUP_CONV2D_CUDA = Template("group_conv2d_cuda", "group_conv2d", "cuda", define_space, apply,
                             preferences=preferences, kernel_resources=kernel_resources)
