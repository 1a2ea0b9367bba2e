"""CUDA resource limits per arch, and the pre-build check that rejects configs breaking them.

A CUDA template declares `Template.kernel_resources(task, cfg) -> KernelResources`, computed from
the knob values alone (no TVM call). `check_config(task, template, cfg)` compares that estimate
with the limits of the task's arch: None means "build it", a string is the reason the config is
invalid.

Shared memory: TVM 0.27 emits `__shared__` arrays (static) for scope "shared". ptxas refuses more
than 48 KiB of static shared memory on every arch (verified with nvcc 13 for sm_90: a 64 KiB
kernel fails), so that is the limit of static tiles. Past it, a kernel needs scope "shared.dyn"
(one `extern __shared__` buffer, its size passed at launch; TVM's CUDA runtime raises the kernel's
limit with cuFuncSetAttribute when it is over 48 KiB), up to the arch's opt-in size
(`max_shared_optin`). Only the GEMM template's double-buffered tiles use it (`dynamic_shared`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .space import Config
    from .task import Task

STATIC_SHARED_BYTES = 48 * 1024
REGISTERS_PER_BLOCK = 64 * 1024
REGISTER_OVERHEAD = 24  # addresses, loop counters and predicates beside the data held in registers

# opt-in shared memory per block (bytes) by compute capability; the default for unknown archs is 48 KiB
_SHARED_OPTIN = {70: 96 * 1024, 72: 96 * 1024, 75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024,
                 89: 99 * 1024, 90: 227 * 1024, 100: 227 * 1024, 120: 99 * 1024}


@dataclass(frozen=True)
class GpuLimits:
    """Per-block and per-thread limits of one CUDA arch, as the templates can use them."""

    arch: str
    max_threads_per_block: int = 1024
    max_shared_bytes: int = STATIC_SHARED_BYTES  # static shared memory
    max_shared_optin: int = STATIC_SHARED_BYTES  # dynamic shared memory after opt-in
    max_registers_per_thread: int = 255
    registers_per_block: int = REGISTERS_PER_BLOCK
    max_vthreads: int = 16  # product of virtual-thread factors: each multiplies the per-thread code
    warp_size: int = 32  # also the fewest threads a block may have when there are several blocks
    max_block_dims: tuple[int, int, int] = (1024, 1024, 64)  # threadIdx.x, .y, .z
    max_grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)  # blockIdx.x, .y, .z


@dataclass(frozen=True)
class KernelResources:
    """What one config asks of the GPU, estimated from its knob values."""

    block: tuple[int, int, int]  # threads along x, y, z
    grid: tuple[int, int, int]  # blocks along x, y, z
    shared_bytes: int  # bytes of shared memory per block
    registers: int  # estimated 32-bit registers per thread
    vthreads: int = 1  # product of the virtual-thread factors
    illegal: str = ""  # why the schedule cannot be built as asked (e.g. a vector width that does not divide)
    dynamic_shared: bool = False  # the shared memory is one dynamic buffer (scope "shared.dyn"), not static arrays

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.block[0] * self.block[1] * self.block[2]


def compute_capability(arch: str) -> int:
    """`sm_90` / `sm_90a` -> 90."""
    digits = "".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit())
    if not arch.startswith("sm_") or not digits:
        raise ValueError(f"CUDA arch must look like sm_XX; got {arch!r}")
    return int(digits)


def limits_for(arch: str) -> GpuLimits:
    """The limits of a CUDA arch string such as `sm_90`."""
    cc = compute_capability(arch)
    return GpuLimits(arch=arch, max_shared_optin=_SHARED_OPTIN.get(cc, STATIC_SHARED_BYTES))


def register_cap(limits: GpuLimits, threads: int) -> int:
    """Registers a thread may use before nvcc spills (__launch_bounds__(threads) caps it here)."""
    per_block = limits.registers_per_block // max(threads, 1)
    return min(limits.max_registers_per_thread, per_block - per_block % 8)


def check_resources(res: KernelResources, limits: GpuLimits) -> str | None:
    """None when `res` fits `limits`, else the first limit it breaks.

    Besides hard limits, a block of less than a warp is rejected when the work could fill more
    threads (there are several blocks): it idles most of every warp it runs on.
    """
    if res.illegal:
        return res.illegal
    if res.threads > limits.max_threads_per_block:
        return f"{res.threads} threads per block > {limits.max_threads_per_block}"
    shared_limit = limits.max_shared_optin if res.dynamic_shared else limits.max_shared_bytes
    if res.shared_bytes > shared_limit:
        kind = "dynamic" if res.dynamic_shared else "static"
        return f"{res.shared_bytes} bytes of {kind} shared memory > {shared_limit}"
    for axis, size, top in zip("xyz", res.block, limits.max_block_dims):
        if size > top:
            return f"threadIdx.{axis} extent {size} > {top}"
    blocks = res.grid[0] * res.grid[1] * res.grid[2]
    if res.threads < limits.warp_size and blocks > 1:
        return f"{res.threads} threads per block (less than a warp) while the grid has {blocks} blocks"
    if res.vthreads > limits.max_vthreads:
        return f"{res.vthreads} virtual threads > {limits.max_vthreads}"
    cap = register_cap(limits, res.threads)
    if res.registers > cap:
        return f"~{res.registers} registers per thread > {cap} available at {res.threads} threads (would spill)"
    for axis, size, top in zip("xyz", res.grid, limits.max_grid_dims):
        if size > top:
            return f"blockIdx.{axis} extent {size} > {top}"
    return None


class Estimated(Protocol):
    """What the check reads of a template (`autotune.templates.Template`)."""

    kernel_resources: Callable[[Task, Config], KernelResources] | None


def check_config(task: Task, template: Estimated, cfg: Config) -> str | None:
    """None when the config may be built for the task's GPU, else why not (never compiles anything).

    Templates without `kernel_resources` (all CPU templates) are never rejected here.
    """
    if task.target_kind != "cuda" or template.kernel_resources is None:
        return None
    return check_resources(template.kernel_resources(task, cfg), limits_for(str(task.target["arch"])))
