"""The threads compiled CPU kernels run their parallel loops on: the process's OpenMP pool, PyTorch's own.

TVM runs parallel loops on a thread pool of its own, and PyTorch runs eager ops on OpenMP's. Where the two
alternate (a graph break, the eager parts of a split graph, a built model called from a PyTorch program), the
threads of one pool still spin, waiting for work, while the other's run: on a 2-core machine a model's kernels
then take two to four times as long (benchmark `alternation`). A kernel library calls TVM's pool through two
pointers it holds (`__TVMBackendParallelLaunch`, `__TVMBackendParallelBarrier`); `load_library` points them at a
small launcher (`native/omp_launch.c`) that runs each parallel loop as an OpenMP parallel region instead. The same
threads then serve both, and an OpenMP thread still spinning after an eager op takes the kernel's next loop at once.

The launcher is compiled once per machine with the C compiler (`$CC`, else `cc`) into autotune's cache folder. It
links the OpenMP runtime PyTorch loaded (libgomp). Without a compiler, or where PyTorch runs another OpenMP runtime
(Intel's, LLVM's, a renamed libgomp), kernels run on TVM's pool as before: `launcher_status()` says which, and why.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("native") / "omp_launch.c"
POINTERS = {"__TVMBackendParallelLaunch": "autotune_omp_launch", "__TVMBackendParallelBarrier": "autotune_omp_barrier"}


@dataclass(frozen=True)
class Launcher:
    """The compiled launcher, loaded: the addresses kernel libraries are pointed at."""

    addresses: dict[str, int]  # kernel library pointer name -> function address
    lib: Any  # the ctypes library (kept loaded)

    def set_threads(self, threads: int) -> None:
        """Threads per parallel loop (the count kernels were tuned with); one count for the process, set by the
        library loaded last."""
        self.lib.autotune_omp_set_threads(int(threads))

    def threads(self) -> int:
        return int(self.lib.autotune_omp_threads())


def cache_dir() -> Path:
    """autotune's per-user cache folder ($XDG_CACHE_HOME/autotune, else ~/.cache/autotune)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "autotune"


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc")


def _loaded_libraries() -> set[str]:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return {line.split()[-1] for line in f if "/" in line}
    except OSError:
        return set()


def _compile(compiler: str, out: Path) -> None:
    """Compile the launcher to `out`, whole or not at all (a temporary file, then renamed)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=f".{os.getpid()}.tmp", dir=out.parent)
    os.close(fd)
    try:
        cmd = [compiler, "-O2", "-fPIC", "-shared", "-fopenmp", str(SOURCE), "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise OSError(f"{' '.join(cmd)} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _torch_openmp() -> set[str]:
    """The OpenMP runtime files PyTorch's package loaded (empty where torch is not imported, or uses the system's)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return set()
    root = os.path.dirname(os.path.realpath(torch.__file__))
    inside = (root + os.sep, root + ".libs" + os.sep)  # torch/lib, or the torch.libs of a repaired wheel
    return {os.path.realpath(p) for p in _loaded_libraries()
            if "omp" in os.path.basename(p) and os.path.realpath(p).startswith(inside)}


@functools.lru_cache(maxsize=1)
def _launcher() -> tuple[Launcher | None, str]:
    if not os.path.exists("/proc/self/maps"):
        return None, "not Linux"
    compiler = _compiler()
    if compiler is None:
        return None, "no C compiler (set CC)"
    key = hashlib.sha256(SOURCE.read_bytes() + compiler.encode()).hexdigest()[:16]
    path = cache_dir() / "native" / f"omp_launch-{key}.so"
    try:
        if not path.exists():
            _compile(compiler, path)
        lib = ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"the launcher did not compile or load: {err}"
    lib.autotune_omp_runtime.restype = ctypes.c_char_p
    runtime = os.path.realpath(lib.autotune_omp_runtime().decode())
    theirs = _torch_openmp()
    if theirs and runtime not in theirs:  # one OpenMP pool is the point: another runtime is another pool
        return None, f"PyTorch runs {', '.join(sorted(map(os.path.basename, theirs)))}, the launcher {runtime}"
    addresses = {ptr: ctypes.cast(getattr(lib, fn), ctypes.c_void_p).value for ptr, fn in POINTERS.items()}
    return Launcher(addresses, lib), f"OpenMP ({os.path.basename(runtime)})"


def launcher() -> Launcher | None:
    """The process's launcher (compiled and loaded on first use), or None where kernels keep TVM's pool."""
    return _launcher()[0]


def launcher_status() -> str:
    """Which pool compiled kernels' parallel loops run on, e.g. 'OpenMP (libgomp.so.1)' or 'TVM's own: why'."""
    found, why = _launcher()
    return why if found is not None else f"TVM's own pool: {why}"


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence what TVM's C++ prints on stderr while a library loads (a "Scope Loaded:" line per memory scope)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def attach(path: str | os.PathLike, threads: int) -> bool:
    """Point the kernel library loaded from `path` at the OpenMP launcher; False where it keeps TVM's pool."""
    found = launcher()
    if found is None:
        return False
    lib = ctypes.CDLL(str(path), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    slots = {}
    for name in POINTERS:
        try:
            slots[name] = ctypes.c_void_p.in_dll(lib, name)
        except ValueError:  # a library without parallel loops (or barriers) holds no such pointer
            continue
    found.set_threads(threads)
    for name, slot in slots.items():
        slot.value = found.addresses[name]
    return True


def load_library(path: str | os.PathLike, threads: int) -> Any:
    """Load a built library (`autotune build -o`, `export_library`) with its kernels on the OpenMP pool."""
    import tvm

    with _quiet_stderr():
        lib = tvm.runtime.load_module(str(path))
    attach(path, threads)
    return lib


def load_executable(executable: Any, threads: int) -> Any:
    """A compiled CPU executable (tvm.compile's), as a library whose kernels run on the OpenMP pool. Where that
    is impossible (no launcher, no compiler to link a library, a temporary folder mounted noexec), the executable
    itself."""
    if launcher() is None:
        return executable
    with tempfile.TemporaryDirectory(prefix="autotune-lib-") as folder:
        path = os.path.join(folder, "model.so")
        try:
            executable.export_library(path)
            return load_library(path, threads)
        except Exception:  # noqa: BLE001 - no linker, or a temporary folder that cannot hold code: TVM's pool
            return executable
