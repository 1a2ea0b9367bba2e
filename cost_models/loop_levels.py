"""Per-loop-level features of a scheduled PrimFunc: the loop order, which PerStoreFeature pools away.

For the block doing most of the work (the leaf block with the most loop iterations around it), each
of its innermost `LEVELS` loops (extent > 1, innermost first) gives: log2 extent; its kind (serial,
parallel, vectorised, unrolled, thread-bound; a serial loop software-pipelined over S stages, as a CUDA
GEMM's double-buffered k loop, has S in its serial slot instead of 1); for the written buffer and the two
read buffers with the largest footprints, log2 of the bytes that the loops from this one inward touch (the
footprint), and log2(1 + |stride|) of the access along this loop (elements; 0 means the loop reuses the
data); and log2 of all buffers' footprints together (the working set of this loop level).

After the levels comes a reuse curve over cache capacities (`CURVE_CAPACITIES`, 4 KiB to 32 MiB, powers of
two): for each capacity, the outermost loop level whose working set fits in it, and there log2 of the bytes
that level brings in per iteration of the block (its working set / its iterations: each byte comes into a
cache that holds the whole working set once per execution of that level) and log2 of how many times the
level runs. It says, without knowing the machine's caches, how much traffic each cache size would see.
On matmul it is what the rest of the row misses (the model ranks matmul configs clearly better with it, both
trained on the task's own configs and on other tasks); dense gains a little, the convolutions nothing (see
docs/experiments.md).

Last, the register tile (`register_tile`): the innermost run of vectorised and unrolled loops, its
accumulator bytes, the bytes it reads per iteration, and the reduction loops around it that reuse the
accumulators before they are written back: the micro-kernel's arithmetic intensity, which decides GEMM speed
once the caches are served (it improves the ranking of held-out GEMM tasks and leaves the convolutions
unchanged).

The working-set curve tells apart schedules that PerStoreFeature gives identical rows, e.g. a conv2d
whose reduction over input channels runs outside the mid tile (its weight slice stays in L1) or inside
it (the whole weight block streams through for every register tile): same stores, same totals,
several times apart in speed.

Index expressions are evaluated in Python (sums, products, floordiv/floormod of loop variables);
the footprint of a buffer dimension is the box sum_v |d index / d v| * (extent_v - 1) + 1, capped at the
dimension's size.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator

import numpy as np

LEVELS = 10
N_KINDS = 5  # tirx.ForKind: serial, parallel, vectorized, unrolled, thread binding
N_BUFFERS = 3  # written buffer + the two largest reads
PER_LEVEL = 1 + N_KINDS + 2 * N_BUFFERS + 1
CURVE_CAPACITIES = tuple(1 << p for p in range(12, 26))  # bytes: 4 KiB .. 32 MiB
CURVE_DIM = 2 * len(CURVE_CAPACITIES)
N_LOOPS_AT = LEVELS * PER_LEVEL  # index of the loop count
CURVE_AT = N_LOOPS_AT + 1
REGISTER_DIM = 5
REGISTER_AT = CURVE_AT + CURVE_DIM
LEVEL_DIM = REGISTER_AT + REGISTER_DIM
_NO_FIT = 30.0  # log2 bytes per iteration where not even the innermost loop's working set fits


def level_features(func) -> np.ndarray:
    """[LEVEL_DIM] float32 features of a scheduled PrimFunc (zeros when it has no loop nest)."""
    out = np.zeros(LEVEL_DIM, dtype=np.float32)
    block = _dominant_block(func)
    if block is None:
        return out
    loops, realize = block
    loops = [f for f in loops if _const(f.extent) > 1]
    env = {b.var: v for b, v in zip(realize.block.iter_vars, realize.iter_values)}
    loop_vars = [f.loop_var for f in loops]
    accesses = _accesses(realize.block, env, loop_vars)
    if not accesses:
        return out
    inner = loops[::-1]  # innermost first
    # footprints[lvl][b]: bytes of buffer b that the loops from inner[lvl] inward touch
    footprints = [[acc.footprint(inner[: lvl + 1]) for acc in accesses] for lvl in range(len(inner))]
    out[N_LOOPS_AT] = len(loops)
    out[CURVE_AT:REGISTER_AT] = reuse_curve(inner, [sum(fps) for fps in footprints])
    out[REGISTER_AT:] = register_tile(inner, accesses, footprints)
    for lvl, loop in enumerate(inner[:LEVELS]):
        base = lvl * PER_LEVEL
        out[base] = math.log2(_const(loop.extent))
        out[base + 1 + min(int(loop.kind), N_KINDS - 1)] = _pipeline_stages(loop)
        for b, acc in enumerate(accesses[:N_BUFFERS]):
            out[base + 1 + N_KINDS + 2 * b] = math.log2(1.0 + footprints[lvl][b])
            out[base + 2 + N_KINDS + 2 * b] = math.log2(1.0 + abs(acc.stride(loop)))
        out[base + PER_LEVEL - 1] = math.log2(1.0 + sum(footprints[lvl]))
    return out


def reuse_curve(inner, working_sets) -> np.ndarray:
    """[CURVE_DIM]: per capacity, log2 bytes per iteration and log2 runs of the outermost level that fits.

    `inner`: the loops innermost first; `working_sets[lvl]`: bytes all buffers touch from inner[lvl] inward."""
    out = np.zeros(CURVE_DIM, dtype=np.float32)
    iters = list(itertools.accumulate((_const(f.extent) for f in inner), operator.mul))
    for c, capacity in enumerate(CURVE_CAPACITIES):
        fit = bisect.bisect_right(working_sets, capacity)  # working sets grow outward: a prefix fits
        if fit:
            out[2 * c] = math.log2(working_sets[fit - 1] / iters[fit - 1])
            out[2 * c + 1] = math.log2(iters[-1] / iters[fit - 1])
        else:
            out[2 * c] = _NO_FIT
            out[2 * c + 1] = math.log2(iters[-1])
    return out


_IN_REGISTERS = (2, 3)  # tirx.ForKind: vectorized, unrolled


def register_tile(inner, accesses, footprints) -> np.ndarray:
    """[REGISTER_DIM]: the register tile (the innermost run of vectorised and unrolled loops) and its reuse.

    log2 of: the written buffer's bytes in the tile (the accumulators), the bytes read per iteration of the
    tile, the tile's iterations, how many times the accumulators are reused in a row (the loops just
    outside the tile that do not move the written buffer: the reduction), and the bytes that one such
    reuse step reads. `footprints[lvl][b]`: bytes of accesses[b] from inner[lvl] inward."""
    def inward(n):  # footprints of the innermost n loops
        return footprints[n - 1] if n else [acc.footprint([]) for acc in accesses]

    r = 0
    while r < len(inner) and int(inner[r].kind) in _IN_REGISTERS:
        r += 1
    reuse_end = r
    while reuse_end < len(inner) and accesses[0].stride(inner[reuse_end]) == 0:
        reuse_end += 1
    iters = math.prod(_const(f.extent) for f in inner[:r])
    reuse = math.prod(_const(f.extent) for f in inner[r:reuse_end])
    tile, step = inward(r), inward(reuse_end)
    return np.array([math.log2(tile[0]), math.log2(1.0 + sum(tile[1:]) / iters), math.log2(iters),
                     math.log2(reuse), math.log2(1.0 + sum(step[1:]))], dtype=np.float32)


class _Access:
    """One buffer region of the block, as integer functions of the loop variables."""

    def __init__(self, buffer, region, env, loop_vars):
        import tvm

        self.shape = [_const(s) for s in buffer.shape]
        dtype = tvm.DataType(str(buffer.dtype))
        self.elem_bytes = max(1, dtype.bits * dtype.lanes // 8)
        self.extents = [_const(r.extent) for r in region]
        mins = [r.min for r in region]
        zero = {v: 0 for v in loop_vars}
        at0 = [eval_index(m, env, zero) for m in mins]
        # d index_d / d loop var, as the change from var = 0 to var = 1 with the other loops at 0
        self.delta = {v: [eval_index(m, env, {**zero, v: 1}) - a for m, a in zip(mins, at0)] for v in loop_vars}
        row = 1
        self.row_stride = []
        for s in reversed(self.shape):
            self.row_stride.insert(0, row)
            row *= s

    def footprint(self, loops) -> float:
        """Bytes touched while the given loops run over their extents (the others fixed)."""
        total = float(self.elem_bytes)
        for d, size in enumerate(self.shape):
            span = self.extents[d] + sum(abs(self.delta[f.loop_var][d]) * (_const(f.extent) - 1) for f in loops)
            total *= min(size, span)
        return total

    def stride(self, loop) -> int:
        """Elements between the accesses of two consecutive iterations of `loop`."""
        return sum(d * s for d, s in zip(self.delta[loop.loop_var], self.row_stride))

    def size(self) -> float:
        return float(np.prod(self.shape)) * self.elem_bytes


def _accesses(block, env, loop_vars) -> list[_Access]:
    """Written buffer first, then the reads (not the written one) by decreasing buffer size."""
    writes = [_Access(_buffer(w), w.region, env, loop_vars) for w in block.writes[:1]]
    written = {_buffer(w).name for w in block.writes}
    reads = [_Access(_buffer(r), r.region, env, loop_vars) for r in block.reads
             if _buffer(r).name not in written]
    reads.sort(key=lambda a: -a.size())
    return writes + reads


def _buffer(region):
    """The buffer of a block's read/write region (TVM 0.27 calls it `source`)."""
    return region.source if hasattr(region, "source") else region.buffer


def _dominant_block(func):
    """(enclosing For loops outermost first, SBlockRealize) of the leaf block with the most iterations."""
    best, best_key = None, None
    for loops, realize in _leaf_blocks(func.body, []):
        if not realize.block.reads:
            continue  # an init block
        iters = 1
        for f in loops:
            iters *= max(1, _const(f.extent))
        key = (iters, len(loops))
        if best_key is None or key > best_key:
            best, best_key = (loops, realize), key
    return best


def _leaf_blocks(stmt, loops):
    """Yield (loops, realize) for every block realize that has no block inside it."""
    from tvm import s_tir, tirx

    if isinstance(stmt, s_tir.SBlockRealize):
        children = list(_leaf_blocks(stmt.block.body, loops))
        if children:
            yield from children
        elif stmt.block.name_hint != "root":
            yield loops, stmt
    elif isinstance(stmt, tirx.For):
        yield from _leaf_blocks(stmt.body, [*loops, stmt])
    elif isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            yield from _leaf_blocks(s, loops)
    elif isinstance(stmt, tirx.IfThenElse):
        yield from _leaf_blocks(stmt.then_case, loops)
        if stmt.else_case is not None:
            yield from _leaf_blocks(stmt.else_case, loops)
    elif hasattr(stmt, "body") and stmt.body is not None:  # attributes, allocations, lets
        yield from _leaf_blocks(stmt.body, loops)


def _pipeline_stages(loop) -> float:
    """1, or the stages a `software_pipeline_stage` annotation spreads the loop's body over."""
    stages = loop.annotations.get("software_pipeline_stage")
    return float(1 + max(int(s) for s in stages)) if stages else 1.0


def _const(x) -> int:
    return int(x.value) if hasattr(x, "value") else int(x)


def eval_index(expr, env, values) -> int:
    """Integer value of an index expression: block iter vars through `env`, loop vars from `values`.

    Affine maps (+, -, *, // and % by constants) also evaluate on numpy index arrays given as `values`."""
    from tvm.tirx import expr as E

    if isinstance(expr, E.IntImm):
        return int(expr.value)
    if isinstance(expr, E.Var):
        if expr in values:
            return values[expr]
        if expr in env:
            return eval_index(env[expr], env, values)
        return 0  # a variable bound outside the loop nest
    if isinstance(expr, E.Cast):
        return eval_index(expr.value, env, values)
    a = eval_index(expr.a, env, values) if hasattr(expr, "a") else 0
    b = eval_index(expr.b, env, values) if hasattr(expr, "b") else 0
    if isinstance(expr, E.Add):
        return a + b
    if isinstance(expr, E.Sub):
        return a - b
    if isinstance(expr, E.Mul):
        return a * b
    if isinstance(expr, (E.FloorDiv, E.Div)):
        return a // b if b else 0
    if isinstance(expr, (E.FloorMod, E.Mod)):
        return a % b if b else 0
    if isinstance(expr, E.Min):
        return min(a, b)
    if isinstance(expr, E.Max):
        return max(a, b)
    return 0  # anything else (a select, a call) counts as a fixed index
