"""Candidate uKernel heights for a dynamic operator, predicted and ranked from the hardware model alone.

A uKernel is the static task with the dynamic parameter set to a height h. Its predicted time is
a roofline of the hardware model: compute (peak x register-tile use x parallel balance) against
the bytes it moves (the fixed operand from the cache level it fits in, the rows from memory),
plus the per-call overhead. A set of heights is scored by how close its cheapest composition
(compose.Planner, padding included) comes to an exact-size kernel, over sizes spread
log-uniformly across the declared range; heights are added greedily, best improvement first.
On a CPU the range's low end also gets a uKernel of at most LOW_END_PADDING times its rows: it is
usually the most frequent size (a batch of 1, a prompt of one token), and a padded piece of a taller
uKernel computes its padding rows at the full cost of a tile while the measured time of one of a few
rows is about that of a matrix-vector product (the weight streamed once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .compose import Planner
from ..hardware import CpuModel, CudaModel
from .spec import DynamicSpec

CALL_OVERHEAD_S = 5e-6  # one uKernel piece: its parallel region's launch on the thread pool (a few microseconds)
PAD_FIXED_S = 2e-6  # a padded piece: slicing and two small copies
COPY_BYTES_PER_S = 10e9
ACHIEVED = 0.4  # share of FMA peak a uKernel tuned with a few dozen trials reaches
BYTES_PER_CYCLE = {"l2": 32.0, "l3": 8.0}  # per core
L2_SHARE = 0.5  # of a core's L2 the fixed operand may use (the rest: A, C, packed panels)
DRAM_BYTES_PER_S = 8e9  # per core
GPU_BYTES_PER_S = 2e12
COL_VECTORS = 4  # vectors per register-tile row (the template's 64 fp32 columns)
MAX_HEIGHT = 512  # taller uKernels gain nothing and make padding and tuning dear
LOW_END_PADDING = 4  # on a CPU, the smallest uKernel computes at most this many times the range's lowest rows
SAMPLES = 96  # sizes the score is averaged over


@dataclass(frozen=True)
class OpCost:
    """What one row of the dynamic dimension costs: flops and bytes, and the fixed operand's bytes."""

    flops_per_row: float
    row_bytes: float  # sliced inputs + output, per row
    fixed_bytes: float  # inputs not sliced (e.g. the weight B)
    cols: int  # output elements per row
    rows_per_unit: int  # rows one register tile covers (0: the hardware's register rows)


@dataclass(frozen=True)
class Candidate:
    """One uKernel height with its analytic figures; `rank` 1 is the most useful."""

    height: int
    rank: int
    predicted_s: float
    gflops: float
    intensity: float  # flops per byte moved
    parallel: float  # share of the cores kept busy
    score: float  # geomean slowdown vs exact-size kernels of the set up to this rank
    chosen: bool


def op_cost(spec: DynamicSpec) -> OpCost:
    """Per-row flops and bytes from the operator definition at sizes 1 and 2."""
    opdef = spec.task(1).opdef
    p1, p2 = ({**dict(spec.fixed), spec.dim: v} for v in (1, 2))
    width = 4  # float32
    sizes = [[math.prod(s) for s in opdef.input_shapes(p)] for p in (p1, p2)]
    outs = [math.prod(opdef.output_shape(p)) for p in (p1, p2)]
    row_bytes = width * (sum(b - a for a, b in zip(*sizes)) + outs[1] - outs[0])
    fixed = width * sum(a for a, sliced in zip(sizes[0], spec.split.sliced) if not sliced)
    return OpCost(float(opdef.flops(p1)), float(row_bytes), float(fixed), int(outs[0]), spec.split.rows_per_unit)


def predict_time(hw: CpuModel | CudaModel, cost: OpCost, height: int) -> float:
    """Analytic seconds of one uKernel call of `height` rows."""
    if isinstance(hw, CudaModel):
        return _predict_cuda(hw, cost, height)
    rows = cost.rows_per_unit or hw.register_rows
    r = min(height, rows)
    fma_cycles = COL_VECTORS * r / hw.fma_units
    load_cycles = (COL_VECTORS + r) / 2  # two load ports: B vectors + A broadcasts
    reg_eff = fma_cycles / max(fma_cycles, load_cycles) if cost.rows_per_unit == 0 else 1.0
    par = parallel_share(hw, cost, height)
    compute = cost.flops_per_row * height / (hw.peak_gflops * 1e9 * ACHIEVED * reg_eff * par)
    share = cost.fixed_bytes / hw.cores
    if cost.fixed_bytes <= hw.l2_bytes * L2_SHARE:  # each core's L2 can keep all of it between calls
        fixed_bw = BYTES_PER_CYCLE["l2"] * hw.ghz * 1e9
    elif cost.fixed_bytes <= hw.l3_bytes:
        fixed_bw = BYTES_PER_CYCLE["l3"] * hw.ghz * 1e9
    else:
        fixed_bw = DRAM_BYTES_PER_S
    memory = share / fixed_bw + cost.row_bytes * height / hw.cores / DRAM_BYTES_PER_S
    return CALL_OVERHEAD_S + compute + memory  # no overlap assumed: small heights pay their streaming


def _predict_cuda(hw: CudaModel, cost: OpCost, height: int) -> float:
    """Waves of 64x64 thread blocks over the SMs; rows beyond a block's 64 fill more blocks."""
    block_rows = min(64, max(hw.register_rows, 2 ** math.ceil(math.log2(height))))
    blocks = math.ceil(height / block_rows) * max(1, math.ceil(cost.cols / 64))
    waves = math.ceil(blocks / hw.sms)
    fill = blocks / (waves * hw.sms) * min(1.0, height / block_rows)
    compute = cost.flops_per_row * height / (hw.peak_gflops * 1e9 * ACHIEVED * fill)
    memory = (cost.fixed_bytes + cost.row_bytes * height) / GPU_BYTES_PER_S
    return CALL_OVERHEAD_S + max(compute, memory)


def candidate_heights(spec: DynamicSpec, hw: CpuModel | CudaModel) -> list[int]:
    """Powers of two and register-row multiples, up to the range's top (and MAX_HEIGHT)."""
    top = min(spec.hi, MAX_HEIGHT)
    rows = spec.split.rows_per_unit or hw.register_rows
    out = {1 << i for i in range(top.bit_length())} | {rows << i for i in range(top.bit_length())}
    return sorted(h for h in out if h <= top)


def sample_sizes(lo: int, hi: int, n: int = SAMPLES) -> list[int]:
    """About n distinct sizes spread log-uniformly over lo..hi (both ends included)."""
    return sorted({round(float(v)) for v in np.geomspace(lo, hi, n)} | {lo, hi})


def pad_cost_fn(row_bytes: float):
    """Seconds a padded piece adds: copying its valid rows in and out of the scratch buffer."""
    return lambda kernel, rows: PAD_FIXED_S + rows * row_bytes / COPY_BYTES_PER_S


def set_score(heights: list[int], times: list[float], ideal: dict[int, float], row_bytes: float) -> float:
    """Geometric mean over sizes of (cheapest composition time / exact-size kernel time)."""
    planner = Planner(heights, times, pad_cost_fn(row_bytes))
    return float(np.exp(np.mean([np.log(planner.cost(m) / t) for m, t in ideal.items()])))


def rank_ukernels(spec: DynamicSpec, hw: CpuModel | CudaModel, max_kernels: int = 3,
                  min_gain: float = 0.03) -> list[Candidate]:
    """Every candidate height, most useful first; the first few (`chosen`) are the uKernels to tune.

    Greedy: add the height that lowers the set score most; stop choosing at `max_kernels` or when
    the next one gains less than `min_gain` (3%). On a CPU, where the smallest chosen height is more
    than LOW_END_PADDING times the range's lowest size, the tallest candidate within that is chosen
    too. The rest stay ranked for reporting.
    """
    cost = op_cost(spec)
    heights = candidate_heights(spec, hw)
    pred = {h: predict_time(hw, cost, h) for h in heights}
    ideal = {m: predict_time(hw, cost, m) for m in sample_sizes(spec.lo, spec.hi)}
    picked: list[int] = []
    scores: list[float] = []
    current = math.inf
    while True:
        rest = [h for h in heights if h not in picked]
        trial = {h: set_score(picked + [h], [pred[x] for x in picked + [h]], ideal, cost.row_bytes) for h in rest}
        h = min(rest, key=lambda x: (trial[x], -x))
        gain = not picked or trial[h] < current * (1 - min_gain)
        if not gain or len(picked) == max_kernels or len(rest) == 1:
            n_chosen = len(picked) + (1 if gain and len(picked) < max_kernels else 0)
            ordered = sorted(rest, key=lambda x: (trial[x], -x))
            picked += ordered
            scores += [trial[x] for x in ordered]
            break
        picked.append(h)
        scores.append(trial[h])
        current = trial[h]
    if isinstance(hw, CpuModel) and min(picked[:n_chosen]) > LOW_END_PADDING * spec.lo:
        low = max(h for h in heights if h <= LOW_END_PADDING * spec.lo)
        i = picked.index(low)
        picked.insert(n_chosen, picked.pop(i))
        scores.pop(i)
        chosen = picked[:n_chosen + 1]
        scores.insert(n_chosen, set_score(chosen, [pred[x] for x in chosen], ideal, cost.row_bytes))
        n_chosen += 1
    out = []
    for rank, (h, score) in enumerate(zip(picked, scores), 1):
        bytes_moved = cost.fixed_bytes + cost.row_bytes * h
        flops = cost.flops_per_row * h
        out.append(Candidate(h, rank, pred[h], flops / pred[h] / 1e9, flops / bytes_moved,
                             parallel_share(hw, cost, h), score, rank <= n_chosen))
    return out


def parallel_share(hw: CpuModel | CudaModel, cost: OpCost, height: int) -> float:
    """Share of the cores (SMs) busy when a call's register tiles (thread blocks) are spread over them."""
    if isinstance(hw, CudaModel):
        units, workers = math.ceil(height / 64) * max(1, math.ceil(cost.cols / 64)), hw.sms
    else:
        rows = cost.rows_per_unit or hw.register_rows
        units = math.ceil(height / rows) * max(1, math.ceil(cost.cols / (COL_VECTORS * hw.lanes)))
        workers = hw.cores
    return units / (workers * math.ceil(units / workers))


def chosen_heights(candidates: list[Candidate]) -> list[int]:
    """The heights to tune, tallest first."""
    return sorted((c.height for c in candidates if c.chosen), reverse=True)
