"""Targets as plain JSON dicts: parse user input, detect the host CPU, convert to tvm.target.Target.

A CPU target whose `mtriple` names another architecture than this machine's (`aarch64`, or a JSON dict with
"mtriple": "aarch64-linux-gnu") is a cross target: its kernels are compiled here by LLVM and linked by a cross
toolchain (`cross_compiler`), and run on the device (over RPC).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import warnings
from pathlib import Path
from typing import Any

from . import gpu
from .errors import AutotuneError

TARGET_KINDS = ("llvm", "cuda")
DEFAULT_CUDA_ARCH = "sm_90"
DEFAULT_GHZ = 2.0  # the clock read_cpuinfo reports when /proc/cpuinfo names none
# short names of cross targets: the target dict each stands for (NEON: 4 fp32 lanes, 32 vector registers)
CROSS_TARGETS = {"aarch64": {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "generic", "mattr": ["+neon"]}}
CROSS_CORES = 4  # a cross target's cores where it names none (its kernels' parallel loops split this many ways)
CROSS_CC_ENV = "AUTOTUNE_CROSS_CC"  # the cross compiler's path, where it is not the triple's g++ on PATH
_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64", "x64": "x86_64"}


def _affinity_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


# Read once, when autotune is imported: TVM's thread pool, once started, pins the thread that started it to one
# core, and every later read in that thread said 1 ("llvm" then resolved to num-cores 1: other task keys than
# those tuned).
_HOST_CORES = _affinity_cores()


def host_cores() -> int:
    """Cores this process may run on (respects affinity / cgroup CPU sets), as when autotune was imported."""
    return _HOST_CORES


def kernel_threads(target: dict[str, Any]) -> int:
    """Threads a CPU kernel's parallel loops run on: TVM_NUM_THREADS where set, else the target's `num-cores`."""
    env = os.environ.get("TVM_NUM_THREADS", "")
    return int(env) if env.isdigit() and int(env) > 0 else int(target.get("num-cores") or host_cores())


def use_target_threads(target: dict[str, Any]) -> None:
    """Run this process's CPU kernels on the target's `num-cores` threads, as the tuner measured them.

    With TVM_NUM_THREADS unset, TVM's thread pool takes half the logical CPUs on x86: 1 on a 2-vCPU VM, where a
    kernel tuned on 2 threads then runs at half its speed. The pool reads
    TVM_NUM_THREADS once, when it starts (first parallel kernel, or `tvm.runtime.num_threads()`): this sets it,
    unless the user did, and starts the pool. Warns when the pool had already started with another count.
    """
    if target.get("kind") != "llvm" or "TVM_NUM_THREADS" in os.environ:
        return
    want = kernel_threads(target)
    os.environ["TVM_NUM_THREADS"] = str(want)
    import tvm

    got = int(tvm.runtime.num_threads())
    # the pool never runs more threads than there are CPUs (os.cpu_count: a started pool pins this thread to one)
    if got != min(want, os.cpu_count() or 1):
        warnings.warn(f"TVM's thread pool already runs {got} thread(s), not the target's {want}: kernels run slower "
                      f"than tuned; set TVM_NUM_THREADS={want} before the process starts", stacklevel=2)


# LLVM feature -> /proc/cpuinfo flag of the x86 instruction-set extensions compiled kernels may use
X86_FEATURE_FLAGS = {
    "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c", "bmi": "bmi1", "bmi2": "bmi2",
    "avx512f": "avx512f", "avx512cd": "avx512cd", "avx512bw": "avx512bw", "avx512dq": "avx512dq",
    "avx512vl": "avx512vl", "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi", "avx512vbmi2": "avx512_vbmi2",
    "avx512vnni": "avx512_vnni", "avx512bitalg": "avx512_bitalg", "avx512vpopcntdq": "avx512_vpopcntdq",
    "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16", "avxvnni": "avx_vnni",
    "amx-tile": "amx_tile", "amx-int8": "amx_int8", "amx-bf16": "amx_bf16",
}


def unsupported_features(cpu_features: set[str], host_flags: set[str]) -> list[str]:
    """The extensions an LLVM CPU model has (`cpu_features`) that this machine's CPU flags lack: a hypervisor
    may hide some (e.g. AVX-512 on a Zen 4 that LLVM names znver4), and code using them dies of SIGILL."""
    return sorted(f for f, flag in X86_FEATURE_FLAGS.items() if f in cpu_features and flag not in host_flags)


def read_cpuinfo(path: str | Path) -> tuple[set[str], float]:
    """(flags, GHz) of the first processor in /proc/cpuinfo."""
    flags: set[str] = set()
    ghz = 0.0
    try:
        text = Path(path).read_text()
    except OSError:
        return flags, DEFAULT_GHZ
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags" and not flags:
            flags = set(value.split())
        elif key.strip() == "cpu MHz" and not ghz:
            try:
                ghz = float(value) / 1000
            except ValueError:
                pass
    return flags, ghz or DEFAULT_GHZ


def extra_features(cpu_features: set[str], host_flags: set[str]) -> list[str]:
    """The extensions this machine's CPU flags offer that its LLVM CPU model lacks: a hypervisor may report an
    older CPU model (LLVM names a Sapphire Rapids guest rocketlake, without AVX-512 BF16 and AMX)."""
    return sorted(f for f, flag in X86_FEATURE_FLAGS.items() if f not in cpu_features and flag in host_flags)


@functools.lru_cache(maxsize=None)
def _host_cpu() -> tuple[str, tuple[str, ...]]:
    """(LLVM's name of this machine's CPU, the `mattr` that switches off what the CPU model has and it lacks, and
    switches on what it lacks and the CPU has)."""
    from tvm.target import codegen

    cpu = str(codegen.llvm_get_system_cpu())
    flags = read_cpuinfo("/proc/cpuinfo")[0]
    if not flags or not str(codegen.llvm_get_system_triple()).startswith(("x86_64", "i386", "i686")):
        return cpu, ()
    model = set(_llvm_features(cpu))
    return cpu, tuple([f"-{f}" for f in unsupported_features(model, flags)]
                      + [f"+{f}" for f in extra_features(model, flags)])


def host_llvm_target(num_cores: int | None = None) -> dict[str, Any]:
    """The llvm target of this machine: its CPU name (plus `mattr` switching off the extensions its CPU model
    has and this machine does not offer) and core count."""
    cpu, mattr = _host_cpu()
    target = {"kind": "llvm", "mcpu": cpu, "num-cores": int(num_cores or host_cores())}
    return {**target, "mattr": list(mattr)} if mattr else target


@functools.lru_cache(maxsize=None)
def _llvm_features(mcpu: str | None, mattr: tuple[str, ...] = (), mtriple: str | None = None) -> frozenset[str]:
    """The features LLVM gives code compiled for this CPU (`mattr` applied)."""
    import tvm
    from tvm.target import codegen

    spec = {"kind": "llvm", "mcpu": mcpu, "mattr": list(mattr), "mtriple": mtriple}
    target = tvm.target.Target({k: v for k, v in spec.items() if v})
    return frozenset(str(f) for f in codegen.llvm_get_cpu_features(target))


def cpu_features(target: dict[str, Any]) -> frozenset[str]:
    """The LLVM features code compiled for an llvm target may use: its `mcpu`'s, with its `mattr` applied."""
    return _llvm_features(target.get("mcpu"), tuple(target.get("mattr", ())), target.get("mtriple"))


def vector_unit(target: dict[str, Any]) -> tuple[int, int]:
    """(fp32 lanes per vector register, vector registers) of the instruction set an llvm target compiles for: its
    `mcpu` less what its `mattr` switches off (a znver4 without AVX-512 gets AVX2's 8 lanes and 16 registers)."""
    features = cpu_features(target)
    if "avx512f" in features:
        return 16, 32
    if "avx" in features:
        return 8, 16
    if "neon" in features:
        return 4, 32
    return 4, 16  # SSE


def cpu_name(target: dict[str, Any]) -> str:
    """An llvm target's CPU for a report: `mcpu`, what its `mattr` switches off and what it switches on
    ("znver4 without AVX-512", "rocketlake with AMX, avx512bf16")."""
    def named(sign: str, whole_avx512: bool) -> str:
        names = {f[1:] for f in target.get("mattr", []) if f.startswith(sign)}
        return ", ".join(sorted({"AVX-512" if whole_avx512 and f.startswith("avx512") else
                                 "AMX" if f.startswith("amx") else f for f in names}))

    off, on = named("-", True), named("+", False)
    return str(target.get("mcpu", "generic")) + (f" without {off}" if off else "") + (f" with {on}" if on else "")


def default_cuda_arch() -> str:
    """The local GPU's arch when this machine has one (nvidia-smi), else DEFAULT_CUDA_ARCH."""
    local = gpu.local_gpu()
    return local["arch"] if local else DEFAULT_CUDA_ARCH


def _arch(name: str) -> str:
    name = name.lower()
    return _ARCH_ALIASES.get(name, name)


def host_arch() -> str:
    """This machine's architecture as a triple names it (x86_64, aarch64)."""
    return _arch(platform.machine())


def target_arch(target: dict[str, Any]) -> str:
    """The architecture a CPU target compiles for: its `mtriple`'s, else this machine's."""
    triple = target.get("mtriple")
    return _arch(str(triple).split("-")[0]) if triple else host_arch()


def is_cross(target: dict[str, Any]) -> bool:
    """Whether a CPU target's kernels are for another architecture than this machine's."""
    return target.get("kind") == "llvm" and target_arch(target) != host_arch()


def check_runs_here(target: dict[str, Any], name: str) -> None:
    """Raise, saying where it runs instead, when `name` (a built model) was built for another architecture."""
    if is_cross(target):
        raise AutotuneError(f"{name} was built for {target_arch(target)}, not this {host_arch()} machine "
                            "(export_library it and run it there, or over RPC)")


def cross_compiler(target: dict[str, Any]) -> str | None:
    """The C++ compiler that links a cross target's kernels ($AUTOTUNE_CROSS_CC, else `<mtriple>-g++` on PATH);
    None for a target of this machine. An AutotuneError says what to install where there is none."""
    if not is_cross(target):
        return None
    named = os.environ.get(CROSS_CC_ENV)
    if named:
        found = shutil.which(named)
        if found is None:
            raise AutotuneError(f"the cross compiler {named!r} (${CROSS_CC_ENV}, --cc) is not an executable")
        return found
    triple = str(target["mtriple"])
    found = shutil.which(f"{triple}-g++")
    if found is None:
        raise AutotuneError(f"no C++ cross compiler for {triple} on this {host_arch()} machine to link its kernels: "
                            f"install one (Debian: apt-get install g++-{triple}) or name it with --cc")
    return found


def export_library(module: Any, path: str | os.PathLike, target: dict[str, Any]) -> None:
    """`module.export_library(path)`, linked by the cross compiler for a cross target."""
    cc = cross_compiler(target)
    if cc is None:
        module.export_library(str(path))
    else:
        from tvm.support import cc as tvm_cc

        module.export_library(str(path), fcompile=tvm_cc.cross_compiler(cc))


def parse_target(spec: str | dict[str, Any], arch: str | None = None) -> dict[str, Any]:
    """Turn `llvm`, `cuda`, a cross target's short name (`aarch64`) or a JSON dict (string or mapping) into a
    complete target dict."""
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("{"):
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as err:
                raise AutotuneError(f"target is not valid JSON: {err}") from None
        elif text in TARGET_KINDS:
            spec = {"kind": text}
        elif text in CROSS_TARGETS:
            spec = dict(CROSS_TARGETS[text])
        else:
            names = ", ".join(TARGET_KINDS + tuple(CROSS_TARGETS))
            raise AutotuneError(f"unknown target {spec!r}; choose one of: {names} (or a JSON dict)")
    if not isinstance(spec, dict) or spec.get("kind") not in TARGET_KINDS:
        raise AutotuneError(f"target kind must be one of {', '.join(TARGET_KINDS)}; got {spec!r}")
    target = dict(spec)
    if is_cross(target):  # not this machine's CPU: its own name (generic: the architecture's base ISA)
        target.setdefault("mcpu", "generic")
        target.setdefault("num-cores", CROSS_CORES)
        _check_cpu(target)
    elif target["kind"] == "llvm":
        host = host_llvm_target()
        if "mcpu" not in target:  # the host's CPU, with what this machine lacks of it switched off
            target["mcpu"] = host["mcpu"]
            if "mattr" in host and "mattr" not in target:
                target["mattr"] = host["mattr"]
        target.setdefault("num-cores", host["num-cores"])
    else:
        if arch:
            target["arch"] = arch
        target.setdefault("arch", default_cuda_arch())
        if not str(target["arch"]).startswith("sm_"):
            raise AutotuneError(f"CUDA arch must look like sm_XX; got {target['arch']!r}")
    cores = target.get("num-cores")
    if target["kind"] == "llvm" and (isinstance(cores, bool) or not isinstance(cores, int) or cores < 1):
        raise AutotuneError(f"target num-cores must be an integer >= 1, not {cores!r}")
    check_target(json.dumps(target, sort_keys=True))
    return target


def _check_cpu(target: dict[str, Any]) -> None:
    """Raise unless LLVM knows a cross target's `mcpu` for its `mtriple` (LLVM would compile for the generic CPU
    instead, saying so only on stderr)."""
    import tvm
    from tvm.target import codegen

    if target["mcpu"] == "generic":
        return
    known = [str(c) for c in codegen.llvm_get_cpu_archlist(tvm.target.Target({"kind": "llvm",
                                                                             "mtriple": target["mtriple"]}))]
    if target["mcpu"] not in known:
        near = [c for c in known if c.split("-")[0] == str(target["mcpu"]).split("-")[0]][:8] or known[:8]
        raise AutotuneError(f"LLVM knows no CPU {target['mcpu']!r} for {target['mtriple']}; e.g. "
                            f"{', '.join(near)} (or generic)")


@functools.lru_cache(maxsize=256)
def check_target(target_json: str) -> None:
    """Raise an AutotuneError unless TVM accepts the target (JSON of a target dict): an option its kind does not
    have, or a value of the wrong type, would otherwise fail every candidate's build."""
    import tvm

    try:
        tvm.target.Target(json.loads(target_json))
    except Exception as err:  # TVM reports a bad option as a ValueError, a malformed value as a TypeError
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        reason = reason.split(" Target creation from config dict failed")[0].replace("ffi.SmallStr", "str")
        raise AutotuneError(f"TVM does not accept the target {target_json}: {reason}") from None


def to_tvm_target(target: dict[str, Any]):
    """A tvm.target.Target for a target dict (Relax needs a Target object, not a dict)."""
    import tvm

    return tvm.target.Target(dict(target))


def compile_kernel(mod: Any, target: dict[str, Any]):
    """tvm.compile of a scheduled kernel for a target dict.

    CUDA kernels are compiled with `tirx.use_async_copy`: the copies a software pipeline marks async (the
    templates' double-buffered shared tiles, on sm_80 and later) become cp.async. It changes nothing else.
    """
    import tvm

    if target["kind"] != "cuda":
        return tvm.compile(mod, target=to_tvm_target(target))
    outer = tvm.transform.PassContext.current()
    config = {**dict(outer.config), "tirx.use_async_copy": True}
    with tvm.transform.PassContext(opt_level=outer.opt_level, config=config):
        return tvm.compile(mod, target=to_tvm_target(target))
