"""CUDA tensor-core path of the matmul and dense templates: float16 (bfloat16) inputs, float32 sums, float16
(bfloat16) output, through WMMA 16 x 16 x 16 fragment products (`wmma_intrinsics`); `cuda_gemm` chooses it for
float16 and bfloat16 tasks whose M, N and K are multiples of 16.

Loop structure, in 16 x 16 x 16 tiles (the product of one fragment per operand):
  i0 j0 (blockIdx) | i1 j1 (warps: threadIdx.y) | k0 | k1 | i2 j2 (a warp's fragments) | the fragment product
At k0 both operands' tiles (BM x BK and BK x BN, or W's BN x BK for dense) are copied to shared memory by all
threads of the block, `fetch_vec` halves at a time, rows padded by 8 halves (16 bytes) against bank conflicts; at
k1 each warp loads its fragments of them. The accumulator fragments are stored, once the sums are done, to a shared
tile of the block's outputs, which all threads then copy out rounded to fp16 (coalesced). Knob `double_buffer`:
the k0 loop is software-pipelined (cp.async from sm_80 on), as in `cuda_gemm`. The operands' tiles are in dynamic
shared memory; the output tile (fp32) in static shared memory (TVM merges the dynamic buffers into one, typed as the
operands, which the fp32 fragment stores cannot address), so at most 48 KiB.
"""

from __future__ import annotations

from typing import Any

from autotune.gpu_limits import REGISTER_OVERHEAD, STATIC_SHARED_BYTES, KernelResources
from autotune.space import Config, ConfigSpace, Knob, choice_knob, split_knob
from autotune.task import Task
from autotune.templates import prim_func

from . import wmma_intrinsics as wmma
from .cuda_common import annotate_unroll, double_buffer, split, unroll_knobs

TILE = wmma.FRAGMENT
MAX_WARPS = 8  # per axis of a block; 16 warps (512 threads) at most in all
MAX_FRAGMENTS = 4  # per axis of a warp: 4 x 4 accumulator fragments, 128 registers a thread
MAX_K_CHUNK = 4  # fragments along k per shared tile (64 deep)
MAX_BLOCK_WARPS = 16
FETCH_VECTORS = (2, 4, 8)  # halves per load into shared memory (8: 16 bytes)
PAD = 8  # halves a shared row is padded by
SCOPE = "shared.dyn"  # the operands' tiles
OUT_SCOPE = "shared"  # the output tile (fp32): TVM merges the dynamic buffers into one of the operands' type


def tiles(task: Task, gemm) -> tuple[int, int, int] | None:
    """(M, N, K) in 16-element tiles, or None when one of them is not a multiple of 16."""
    dims = [task.shape[d] for d in (gemm.m, gemm.n, gemm.k)]
    return None if any(d % TILE for d in dims) else tuple(d // TILE for d in dims)


def _warp_knob(name: str, extent: int) -> Knob:
    """(blocks, warps, fragments per warp) of an axis of `extent` tiles."""
    cands = [c for c in split_knob(name, extent, 3).candidates if c[1] <= MAX_WARPS and c[2] <= MAX_FRAGMENTS]
    return Knob(name, "split", tuple(cands))


def define_space(gemm, task: Task) -> ConfigSpace:
    """The space of a GEMM task (`space_of_tiles`)."""
    return space_of_tiles(*tiles(task, gemm))


def space_of_tiles(m: int, n: int, k: int) -> ConfigSpace:
    """Block, warp and fragment tiles of i and j (`m`, `n` 16-element tiles), k chunks (of `k`), fetch width,
    double buffering and unrolling."""
    return ConfigSpace(knobs=(
        _warp_knob("tile_i", m),
        _warp_knob("tile_j", n),
        Knob("tile_k", "split", tuple(c for c in split_knob("tile_k", k, 2).candidates if c[1] <= MAX_K_CHUNK)),
        choice_knob("fetch_vec", FETCH_VECTORS),
        choice_knob("double_buffer", (False, True)),
        *unroll_knobs(),
    ))


def preferences(gemm, task: Task) -> dict[str, Any]:
    """Untuned config: 2 x 2 warps of 2 x 2 fragments (64 x 64 outputs a block), 32 deep, 16-byte fetches,
    double-buffered."""
    return {"tile_i": (2, 2), "tile_j": (2, 2), "tile_k": (2,), "fetch_vec": 8, "double_buffer": True,
            "auto_unroll": 16, "unroll_explicit": True}


def resources(gemm, task: Task, cfg: Config) -> KernelResources:
    """Threads, dynamic shared memory and registers of one config of a GEMM task (`resources_of`)."""
    return resources_of(gemm.b_transposed, cfg)


def resources_of(b_transposed: bool, cfg: Config) -> KernelResources:
    """Threads, dynamic shared memory and registers of one config, from its knobs alone (B stored [N, K] when
    `b_transposed`)."""
    ti, tj, tk = cfg["tile_i"], cfg["tile_j"], cfg["tile_k"]
    bm, bn, bk = ti[1] * ti[2] * TILE, tj[1] * tj[2] * TILE, tk[1] * TILE
    b_tile = bn * (bk + PAD) if b_transposed else bk * (bn + PAD)
    operands = (bm * (bk + PAD) + b_tile) * 2 * (2 if cfg["double_buffer"] else 1)
    warps = ti[1] * tj[1]
    illegal = f"{warps} warps a block (at most {MAX_BLOCK_WARPS})" if warps > MAX_BLOCK_WARPS else ""
    if bm * bn * 4 > STATIC_SHARED_BYTES:
        illegal = illegal or f"an output tile of {bm} x {bn} fp32 exceeds static shared memory"
    row = bn if not b_transposed else bk
    if bk % cfg["fetch_vec"] or row % cfg["fetch_vec"]:
        illegal = illegal or f"shared rows of {bk} and {row} halves are not whole fetch vectors of {cfg['fetch_vec']}"
    return KernelResources(block=(32, warps, 1), grid=(tj[0], ti[0], 1), shared_bytes=operands + bm * bn * 4,
                           registers=8 * ti[2] * tj[2] + 4 * (ti[2] + tj[2]) + REGISTER_OVERHEAD, illegal=illegal,
                           dynamic_shared=True)


def apply(gemm, task: Task, cfg: Config):
    """Build the schedule of one config of a GEMM task (raises on an illegal one)."""
    from tvm import s_tir

    sch = s_tir.Schedule(prim_func(task))
    return schedule(sch, task, cfg, gemm.b_transposed)


def schedule(sch, task: Task, cfg: Config, b_transposed: bool, staged: tuple[str, ...] = (), b_vec: int | None = None):
    """Schedule block "C" of `sch`, C[i, j] = sum_k A[i, k] B[k, j] (B[j, k] when `b_transposed`), on the tensor
    cores. `staged`: blocks computing the operands (a convolution's patches), inlined into the shared-memory copies
    of their tiles; `b_vec`: B's fetch width when it is not the `fetch_vec` knob's (a gather)."""
    blk = sch.get_sblock("C")
    i, j, k = sch.get_loops(blk)
    i, it = sch.split(i, [None, TILE])
    j, jt = sch.split(j, [None, TILE])
    k, kt = sch.split(k, [None, TILE])
    sch.reorder(i, j, k, it, jt, kt)
    tile = sch.blockize(it)  # one fragment product; `blk` is now the 16 x 16 x 16 block inside it
    i0, i1, i2 = split(sch, i, cfg["tile_i"])
    j0, j1, j2 = split(sch, j, cfg["tile_j"])
    k0, k1 = split(sch, k, cfg["tile_k"])
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    warp = sch.fuse(i1, j1)
    sch.bind(warp, "threadIdx.y")
    warps = cfg["tile_i"][1] * cfg["tile_j"][1]
    for operand, vec in ((0, cfg["fetch_vec"]), (1, b_vec or cfg["fetch_vec"])):
        _fetch(sch, tile, operand, k0, warps, vec)
    for name in staged:
        sch.compute_inline(sch.get_sblock(name))
    fragments = [sch.cache_read(tile, operand, f"wmma.matrix_{name}") for operand, name in ((0, "a"), (1, "b"))]
    for fragment in fragments:
        sch.compute_at(fragment, k1)
    out = sch.cache_write(tile, 0, OUT_SCOPE)  # the block's outputs in shared memory, copied out by all threads
    sch.reverse_compute_at(out, j0)
    accumulator = sch.cache_write(tile, 0, "wmma.accumulator")
    sch.reverse_compute_at(accumulator, warp)
    _copy_out(sch, out, task, warps, cfg["fetch_vec"])
    init = sch.decompose_reduction(tile, k0)
    dtype = task.element.storage
    sch.tensorize(_tile16(sch, fragments[0]), wmma.load("a", SCOPE, False, dtype))
    sch.tensorize(_tile16(sch, fragments[1]), wmma.load("b", SCOPE, b_transposed, dtype))
    sch.tensorize(_tile16(sch, accumulator), wmma.store(OUT_SCOPE))
    sch.tensorize(sch.get_loops(sch.get_child_blocks(init)[0])[-2], wmma.fill())
    sch.tensorize(sch.get_loops(blk)[-3], wmma.multiply(b_transposed, dtype))
    if cfg["double_buffer"]:
        double_buffer(sch, k0, 2, str(task.target["arch"]))
    annotate_unroll(sch, i0, cfg["auto_unroll"], cfg["unroll_explicit"])
    return sch


def _fetch(sch, tile, operand: int, k0, warps: int, vec: int) -> None:
    """Operand `operand`'s tile staged in shared memory at k0 by all threads, `vec` halves a load, its rows padded."""
    shared = sch.cache_read(tile, operand, SCOPE)
    sch.compute_at(shared, k0)
    fused = sch.fuse(*sch.get_loops(shared)[-2:])
    _, ty, tx, lanes = sch.split(fused, [None, warps, 32, vec])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(lanes)
    sch.storage_align(shared, 0, axis=-2, factor=32, offset=PAD)


def _copy_out(sch, out, task: Task, warps: int, vec: int) -> None:
    """The block's output tile from shared memory to C (rounded to the output type: `C_out` inlined into the
    copy), by all threads."""
    if task.element.output != task.element.accumulate:
        sch.reverse_compute_inline(sch.get_sblock("C_out"))
    fused = sch.fuse(*sch.get_loops(out)[-2:])
    _, ty, tx, lanes = sch.split(fused, [None, warps, 32, min(vec, 4)])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(lanes)


def _tile16(sch, block):
    """The block's last two loops split into 16 x 16 tiles; the loop a fragment intrinsic tensorizes."""
    rows, cols = sch.get_loops(block)[-2:]
    r0, r1 = sch.split(rows, [None, TILE])
    c0, c1 = sch.split(cols, [None, TILE])
    sch.reorder(r0, c0, r1, c1)
    return r1
