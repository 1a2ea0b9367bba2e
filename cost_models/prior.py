"""A roofline estimate of a CPU config's speed from its loop-feature row: the xgb tuner's cold-start prior.

Before a task has two measurements that differ, the cost model has nothing to learn from, and the first
batch used to be random. This prior ranks a random sample instead, from what the loop features already
say about the dominant block, per iteration of it (one scalar multiply-add):

- issue: 1 / (2 FMA units x the lanes the innermost loop fills), worse (up to 4x) when the register tile's
  accumulators need more vector registers than the CPU has;
- register loads: the bytes the register tile reads per iteration, at two vector loads per cycle;
- cache traffic: for L1, L2 and L3 (this CPU's sizes), the bytes the reuse curve says that cache size
  brings in per iteration, at 64 / 32 / 8 bytes per cycle (typical of x86 cores: L2 -> L1, L3 -> L2,
  memory -> L3);

the slowest of these, divided by the share of the cores the parallel loops keep busy.

It ranks convolution configs well and GEMM configs only roughly, and the configs it picks are faster than a
random first batch. In tuning runs it reaches a good conv2d config in far fewer trials than random search, but
on the GEMMs the runs end lower than with a random first batch, so `XGBTuner` uses it only when asked
(`cold_start="roofline"`; see docs/experiments.md).
"""

from __future__ import annotations

import numpy as np

from autotune.hardware import CpuModel

from .features import POOLED_DIM
from .loop_levels import CURVE_AT, CURVE_CAPACITIES, LEVELS, PER_LEVEL, REGISTER_AT

_PARALLEL, _VECTORIZED = 1, 2  # tirx.ForKind
CACHE_BYTES_PER_CYCLE = (64.0, 32.0, 8.0)  # into L1, L2, L3
VECTOR_LOADS_PER_CYCLE = 2
ACCUMULATOR_REGISTERS = 0.85  # share of the vector registers the accumulators may take before they spill
SPILL_MAX = 4.0  # spilled accumulators cost a load and a store per FMA at most, not more the more there are


def roofline_cycles(X: np.ndarray, cpu: CpuModel) -> np.ndarray:
    """Estimated cycles per scalar FMA of each loop-feature row (inf for the rows of rejected configs)."""
    X = np.asarray(X, dtype=np.float64)
    ok = np.isfinite(X).all(axis=1)
    L = np.where(ok[:, None], X, 0.0)[:, POOLED_DIM:]

    def level(lvl: int, col: int) -> np.ndarray:  # column 0: log2 extent; 1 + kind: the loop's kind flags
        return L[:, lvl * PER_LEVEL + col]

    inner = np.exp2(level(0, 0))
    lanes = np.where(level(0, 1 + _VECTORIZED) > 0, inner / np.ceil(inner / cpu.lanes), 1.0)
    accumulators = np.exp2(L[:, REGISTER_AT]) / (4 * cpu.lanes)  # vector registers of fp32 accumulators
    spill = np.clip(accumulators / (ACCUMULATOR_REGISTERS * cpu.vector_registers), 1.0, SPILL_MAX)
    terms = [spill / (cpu.fma_units * lanes),
             (np.exp2(L[:, REGISTER_AT + 1]) - 1.0) / (VECTOR_LOADS_PER_CYCLE * 4 * cpu.lanes)]
    for size, rate in zip((cpu.l1d_bytes, cpu.l2_bytes, cpu.l3_bytes or cpu.l2_bytes), CACHE_BYTES_PER_CYCLE):
        c = max([k for k, cap in enumerate(CURVE_CAPACITIES) if cap <= size], default=0)
        terms.append(np.exp2(L[:, CURVE_AT + 2 * c]) / rate)
    parallel = np.ones(len(L))
    for lvl in range(LEVELS):
        parallel = np.where(level(lvl, 1 + _PARALLEL) > 0, parallel * np.exp2(level(lvl, 0)), parallel)
    busy = parallel / (cpu.cores * np.ceil(parallel / cpu.cores))  # last wave of a parallel loop part-idle
    cycles = np.max(terms, axis=0) / busy
    return np.where(ok, cycles, np.inf)


def prior_scores(X: np.ndarray, cpu: CpuModel) -> np.ndarray:
    """Higher is faster: -log2 of `roofline_cycles` (-inf for rejected configs)."""
    return -np.log2(roofline_cycles(X, cpu))

