"""The local NVIDIA GPU as `nvidia-smi` reports it: the arch a CUDA target defaults to, and what records name.

Read without initialising CUDA in this process (the tuner's worker processes own the GPU).
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess

NVIDIA_SMI_TIMEOUT_S = 20.0


def _smi(*args: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def parse_gpu(query_csv: str, banner: str) -> dict[str, str] | None:
    """GPU 0 from `nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader` and the CUDA
    version from plain `nvidia-smi`'s banner: {"gpu", "gpu_driver", "cuda", "arch"}."""
    lines = [line for line in query_csv.splitlines() if line.strip()]
    if not lines:
        return None
    fields = [f.strip() for f in lines[0].split(",")]
    if len(fields) != 3 or not re.fullmatch(r"\d+\.\d+", fields[2]):
        return None
    name, driver, cap = fields
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", banner)
    return {"gpu": name, "gpu_driver": driver, "cuda": cuda.group(1) if cuda else "unknown",
            "arch": "sm_" + cap.replace(".", "")}


@functools.lru_cache(maxsize=1)
def local_gpu() -> dict[str, str] | None:
    """This machine's first NVIDIA GPU ({"gpu", "gpu_driver", "cuda", "arch"}), or None without one."""
    query = _smi("--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader")
    return parse_gpu(query, _smi() or "") if query else None


def gpu_facts() -> dict[str, str]:
    """What a record of a kernel timed on this machine's GPU names: model, driver and CUDA version."""
    gpu = local_gpu()
    return {k: v for k, v in gpu.items() if k != "arch"} if gpu else {}
