"""Targets as plain JSON dicts: parse user input, detect the host CPU, convert to tvm.target.Target."""

from __future__ import annotations

import json
import os
from typing import Any

from .errors import AutotuneError

TARGET_KINDS = ("llvm", "cuda")
DEFAULT_CUDA_ARCH = "sm_90"


def host_cores() -> int:
    """Cores this process may run on (respects affinity / cgroup CPU sets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def host_llvm_target(num_cores: int | None = None) -> dict[str, Any]:
    """The llvm target of this machine: its CPU name and core count."""
    from tvm.target import codegen

    return {"kind": "llvm", "mcpu": str(codegen.llvm_get_system_cpu()), "num-cores": int(num_cores or host_cores())}


def parse_target(spec: str | dict[str, Any], arch: str | None = None) -> dict[str, Any]:
    """Turn `llvm`, `cuda` or a JSON dict (string or mapping) into a complete target dict."""
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("{"):
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as err:
                raise AutotuneError(f"target is not valid JSON: {err}") from None
        elif text in TARGET_KINDS:
            spec = {"kind": text}
        else:
            raise AutotuneError(f"unknown target {spec!r}; choose one of: {', '.join(TARGET_KINDS)} (or a JSON dict)")
    if not isinstance(spec, dict) or spec.get("kind") not in TARGET_KINDS:
        raise AutotuneError(f"target kind must be one of {', '.join(TARGET_KINDS)}; got {spec!r}")
    target = dict(spec)
    if target["kind"] == "llvm":
        host = host_llvm_target()
        target.setdefault("mcpu", host["mcpu"])
        target.setdefault("num-cores", host["num-cores"])
    else:
        if arch:
            target["arch"] = arch
        target.setdefault("arch", DEFAULT_CUDA_ARCH)
        if not str(target["arch"]).startswith("sm_"):
            raise AutotuneError(f"CUDA arch must look like sm_XX; got {target['arch']!r}")
    return target


def to_tvm_target(target: dict[str, Any]):
    """A tvm.target.Target for a target dict (Relax needs a Target object, not a dict)."""
    import tvm

    return tvm.target.Target(dict(target))
