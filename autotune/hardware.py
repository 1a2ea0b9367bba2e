"""Analytic hardware models of a CPU or a CUDA arch, for the uKernel ranking and the cold-start prior.

The CPU model is read from this machine (its clock from /proc/cpuinfo: `target.read_cpuinfo`; /sys cache sizes)
plus the target's vector unit (`target.vector_unit`) and core count; a cross target's (another architecture's
CPU) has that vector unit and core count with a typical clock and caches (`CROSS_CPU`). The CUDA model comes
from a small table keyed by compute capability.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .gpu_limits import compute_capability, limits_for
from .target import DEFAULT_GHZ, host_cores, host_llvm_target, is_cross, read_cpuinfo, vector_unit

_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


@dataclass(frozen=True)
class CpuModel:
    """One CPU as the analytic model sees it (fp32)."""

    name: str
    lanes: int  # fp32 lanes per vector register
    vector_registers: int
    cores: int
    ghz: float
    l1d_bytes: int
    l2_bytes: int  # per core
    l3_bytes: int  # shared
    fma_units: int = 2

    @property
    def peak_gflops(self) -> float:
        """FMA peak of all cores: cores x lanes x 2 flops x FMA units x GHz."""
        return self.cores * self.lanes * 2 * self.fma_units * self.ghz

    @property
    def register_rows(self) -> int:
        """Rows of the largest register tile: rows x 4 vectors of C + 4 of B + 1 broadcast of A fit."""
        return max(1, (self.vector_registers - 4 - 1) // 4)


@dataclass(frozen=True)
class CudaModel:
    """One CUDA arch: SMs, memory per SM and block, registers, warp size."""

    arch: str
    sms: int
    shared_per_block: int  # bytes the templates may use (static shared memory)
    shared_per_sm: int
    registers_per_sm: int
    max_threads_per_block: int
    warp_size: int
    peak_gflops: float  # fp32, without tensor cores

    @property
    def register_rows(self) -> int:
        """Rows one thread accumulates in registers in a typical 8x8 thread tile."""
        return 8


# compute capability -> (SMs, shared memory per SM in KiB, fp32 GFLOPS) of the usual part of that arch
_CUDA_TABLE = {70: (80, 96, 15700), 75: (40, 64, 8100), 80: (108, 164, 19500), 86: (84, 100, 35600),
               89: (58, 100, 30300), 90: (132, 228, 67000), 100: (148, 228, 80000)}


def cuda_model(arch: str) -> CudaModel:
    """The model of `sm_XX` (the nearest lower arch of the table when XX is not in it)."""
    cc = compute_capability(arch)
    known = max([c for c in _CUDA_TABLE if c <= cc], default=min(_CUDA_TABLE))
    sms, smem_kib, gflops = _CUDA_TABLE[known]
    lim = limits_for(arch)
    return CudaModel(arch, sms, lim.max_shared_bytes, smem_kib * 1024, 64 * 1024, lim.max_threads_per_block,
                     lim.warp_size, float(gflops))


def parse_size(text: str) -> int:
    """`48K` -> 49152 (sysfs cache size syntax); 0 when unreadable."""
    m = _SIZE.match(text)
    return int(m.group(1)) * _UNITS[m.group(2).upper()] if m else 0


def cache_sizes(cpu_dir: str | Path = "/sys/devices/system/cpu/cpu0/cache") -> dict[int, int]:
    """Data/unified cache bytes per level of cpu0 (instruction caches left out)."""
    out: dict[int, int] = {}
    for index in sorted(Path(cpu_dir).glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and size:
            out[level] = size
    return out


# a cross target's caches (L1 data, L2 per core, L3 shared): an ARM core of the Cortex-A7x / Neoverse N class
CROSS_CACHES = {1: 64 * 1024, 2: 1024 * 1024, 3: 0}


def cpu_model(target: dict[str, Any] | None = None, cpuinfo: str | Path = "/proc/cpuinfo",
              cache_dir: str | Path = "/sys/devices/system/cpu/cpu0/cache") -> CpuModel:
    """The model of this machine's CPU (a cross target's: `CROSS_CACHES`, DEFAULT_GHZ); cores come from the
    target's `num-cores` when given."""
    target = target or {}
    cross = is_cross(target)
    ghz = DEFAULT_GHZ if cross else read_cpuinfo(cpuinfo)[1]
    lanes, regs = vector_unit(target if target.get("mcpu") else host_llvm_target())  # what kernels compile for
    caches = CROSS_CACHES if cross else cache_sizes(cache_dir)
    cores = int(target.get("num-cores") or host_cores())
    return CpuModel(str(target.get("mcpu", "host")), lanes, regs, cores, ghz, caches.get(1, 32 * 1024),
                    caches.get(2, 1024 * 1024), caches.get(3, 0))


def hardware_model(target: dict[str, Any]) -> CpuModel | CudaModel:
    """The analytic model of a target dict (llvm: this machine's CPU; cuda: its arch)."""
    if target.get("kind") == "cuda":
        return cuda_model(str(target.get("arch", "sm_90")))
    return cpu_model(target)
