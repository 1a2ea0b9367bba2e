"""CUDA template for the GEMM family (matmul, dense, batch_matmul), one schedule for all three.

Loop structure of block "C" (SSS RRR SS, as AutoTVM's dense_large_batch and MetaSchedule's GPU rule):
  [batch] i0 j0 (blockIdx) | i1 j1 (vthread) | i2 j2 (threadIdx) | k0 k1 k2 | i3 j3 (registers)
At k0 both operand tiles (BM x BK and BK x BN) are copied to shared memory by all threads of the
block (optionally with float2/float4 loads); at k2 each thread copies its row/column fragments to
registers; the accumulator is a per-thread local array written back after the reduction.
Knob `double_buffer`: the k0 loop is software-pipelined, the tiles of step k0 + 1 loading (with cp.async
from sm_80 on) into a second pair of shared tiles while step k0 computes, as fast SGEMMs do. Double
tiles over 48 KiB go to dynamic shared memory ("shared.dyn"), up to the arch's opt-in limit.
float16 and bfloat16 matmul and dense whose sizes are multiples of 16 take the tensor-core path instead
(`cuda_gemm_tc`); other such tasks this schedule, with the inputs widened and the output rounded as each thread
writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.gpu_limits import REGISTER_OVERHEAD, STATIC_SHARED_BYTES, KernelResources
from autotune.space import Config, ConfigSpace, choice_knob
from autotune.task import Task
from autotune.templates import Template

from . import cuda_gemm_tc, wmma_intrinsics
from .base import gemm_schedule
from .cuda_common import (
    FLOAT_BYTES,
    accumulate_locally,
    annotate_unroll,
    bind_levels,
    block_tile,
    cooperative_fetch,
    double_buffer,
    fetch_vector_knob,
    gpu_tile_knob,
    reduce_tile_knob,
    split,
    thread_tile,
    unroll_knobs,
    vector_problem,
)

MAX_BK = 64  # shared tile depth: 128 x 64 x 2 operands already fills 64 KiB
MAX_K_INNER = 16  # k2, the reduction steps between two register fetches


@dataclass(frozen=True)
class CudaGemm:
    """How an operator maps onto C[b, i, j] = sum_k A[b, i, k] * B'[b, k, j]."""

    m: str
    n: str
    k: str
    batch: str | None = None
    b_transposed: bool = False  # second operand stored [N, K] (dense's W) instead of [K, N]


MATMUL = CudaGemm("M", "N", "K")
DENSE = CudaGemm("batch", "out_features", "in_features", b_transposed=True)
BATCH_MATMUL = CudaGemm("M", "N", "K", batch="B")


def define_gemm_space(gemm: CudaGemm, task: Task) -> ConfigSpace:
    """4-level tiles of i and j, 3-level tile of k, fetch vector width, unrolling."""
    p = task.shape
    return ConfigSpace(knobs=(
        gpu_tile_knob("tile_i", p[gemm.m]),
        gpu_tile_knob("tile_j", p[gemm.n]),
        reduce_tile_knob("tile_k", p[gemm.k], 3, max_tile=MAX_BK, max_inner=MAX_K_INNER),
        fetch_vector_knob(),
        choice_knob("double_buffer", (False, True)),
        *unroll_knobs(),
    ))


def apply_gemm(gemm: CudaGemm, task: Task, cfg: Config):
    """Build the schedule of one config (raises on an illegal one)."""
    sch, blk, batch, i, j, k = gemm_schedule(task)
    i0, i1, i2, i3 = split(sch, i, cfg["tile_i"])
    j0, j1, j2, j3 = split(sch, j, cfg["tile_j"])
    k0, k1, k2 = split(sch, k, cfg["tile_k"])
    sch.reorder(*batch, i0, j0, i1, j1, i2, j2, k0, k1, k2, i3, j3)
    bind_levels(sch, [*batch, i0, j0], [i1, j1], [i2, j2])
    accumulate_locally(sch, blk, j2)
    threads = (cfg["tile_i"][2], cfg["tile_j"][2])
    scope = "shared.dyn" if gemm_resources(gemm, task, cfg).dynamic_shared else "shared"
    for operand in (0, 1):  # read index 0 = A (or X), 1 = B (or W); stays valid after each cache_read
        cooperative_fetch(sch, blk, operand, k0, threads, cfg["fetch_vec"], scope)
    for operand in (0, 1):
        sch.compute_at(sch.cache_read(blk, operand, "local"), k2)
    if task.element.output != task.element.accumulate:  # rounded (fp16) as each thread writes its tile back
        sch.reverse_compute_inline(sch.get_sblock("C_out"))
    sch.decompose_reduction(blk, k0)
    if cfg["double_buffer"]:
        double_buffer(sch, k0, 2, str(task.target["arch"]))
    annotate_unroll(sch, (batch or [i0])[0], cfg["auto_unroll"], cfg["unroll_explicit"])
    return sch


def gemm_resources(gemm: CudaGemm, task: Task, cfg: Config) -> KernelResources:
    """Threads, shared memory, registers and legality of one config, from its knobs alone."""
    p = task.shape
    ti, tj, tk = cfg["tile_i"], cfg["tile_j"], cfg["tile_k"]
    bm, bn, bk = block_tile(ti), block_tile(tj), tk[1] * tk[2]
    vec = cfg["fetch_vec"]
    b_row = (bk, p[gemm.k]) if gemm.b_transposed else (bn, p[gemm.n])
    illegal = vector_problem("A", bk, p[gemm.k], vec) or vector_problem("B", *b_row, vec)
    rm, rn = thread_tile(ti), thread_tile(tj)
    shared = (bm * bk + bk * bn) * FLOAT_BYTES * (2 if cfg["double_buffer"] else 1)
    return KernelResources(
        block=(tj[2], ti[2], 1), grid=(tj[0], ti[0], p[gemm.batch] if gemm.batch else 1),
        shared_bytes=shared, registers=rm * rn + rm + rn + vec + REGISTER_OVERHEAD,
        vthreads=ti[1] * tj[1], illegal=illegal,
        dynamic_shared=cfg["double_buffer"] and shared > STATIC_SHARED_BYTES)


_GEMMS = {"matmul": MATMUL, "dense": DENSE, "batch_matmul": BATCH_MATMUL}


def _tensor_cores(task: Task) -> bool:
    """Whether the task takes the tensor-core path (`cuda_gemm_tc`): float16 or bfloat16, M, N and K multiples of
    16."""
    gemm = _GEMMS[task.op]
    return task.dtype in wmma_intrinsics.OPERANDS and gemm.batch is None and cuda_gemm_tc.tiles(task, gemm) is not None


def gemm_space(task: Task) -> ConfigSpace:
    """Space of a GEMM-family task (the operator comes from the task): the tensor-core path's for float16 and
    bfloat16 where it applies, else the one below (narrow inputs widened)."""
    gemm = _GEMMS[task.op]
    return cuda_gemm_tc.define_space(gemm, task) if _tensor_cores(task) else define_gemm_space(gemm, task)


def gemm_apply(task: Task, cfg: Config):
    """Schedule of one config of a GEMM-family task, on the path `gemm_space` chose."""
    gemm = _GEMMS[task.op]
    return cuda_gemm_tc.apply(gemm, task, cfg) if _tensor_cores(task) else apply_gemm(gemm, task, cfg)


def kernel_resources(task: Task, cfg: Config) -> KernelResources:
    """What a config of a GEMM-family task asks of the GPU (`Template.kernel_resources`)."""
    gemm = _GEMMS[task.op]
    return cuda_gemm_tc.resources(gemm, task, cfg) if _tensor_cores(task) else gemm_resources(gemm, task, cfg)


def preferences(task: Task) -> dict[str, Any]:
    """The config an untuned build prefers (`Template.preferences`): 16 x 16 threads of 4 x 4 outputs, shared
    tiles 16 deep, float4 fetches (the tensor-core path: `cuda_gemm_tc.preferences`)."""
    if _tensor_cores(task):
        return cuda_gemm_tc.preferences(_GEMMS[task.op], task)
    return {"tile_i": (4, 16, 1), "tile_j": (4, 16, 1), "tile_k": (4, 4), "fetch_vec": 4, "double_buffer": False,
            "auto_unroll": 512, "unroll_explicit": True}


GPU_DTYPES = ("float32", "float16", "bfloat16")  # float16, bfloat16: tensor cores (`cuda_gemm_tc`)
# compatible_versions: the float32-only versions, and the float32 + float16 ones (the same float32 and float16
# spaces and schedules)
MATMUL_CUDA = Template("matmul_cuda", "matmul", "cuda", gemm_space, gemm_apply, preferences=preferences,
                       kernel_resources=kernel_resources, dtypes=GPU_DTYPES,
                       compatible_versions=("a1cf8fe55c0a", "75e7546b67a6"))
DENSE_CUDA = Template("dense_cuda", "dense", "cuda", gemm_space, gemm_apply, preferences=preferences,
                      kernel_resources=kernel_resources, dtypes=GPU_DTYPES,
                      compatible_versions=("eb53327f29d1", "48af6aab660b"))
BATCH_MATMUL_CUDA = Template("batch_matmul_cuda", "batch_matmul", "cuda", gemm_space, gemm_apply,
                             preferences=preferences, kernel_resources=kernel_resources)
