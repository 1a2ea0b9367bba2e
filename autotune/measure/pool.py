"""Isolated worker processes with parent-enforced timeouts.

Each worker is one spawned Python process that runs functions (picklable by reference)
sent over a pipe. The parent waits with a deadline and kills the process on timeout, so
a kernel that hangs while holding the GIL, or that segfaults, costs one call, never the
caller. A fresh process replaces a dead one on the next call. A call's deadline covers the
call only: the process start and the import of the function's module (TVM: seconds on a
cold disk) come first, under their own, longer deadline (IMPORT_TIMEOUT).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import subprocess
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[2]  # where `autotune` is importable
WORKER_MAIN = "autotune.measure._worker_main"  # the module a worker process runs
IMPORT_TIMEOUT = 300.0  # seconds for a fresh worker to start and import a called function's module


SIGNAL_HINTS = {
    signal.SIGILL: "an instruction this CPU does not have: compile for this machine (the target's mcpu / mattr)",
    signal.SIGKILL: "killed from outside, often by the out-of-memory killer",
}


def describe_exit(code: int | None) -> str:
    """A worker's exit code for a log line: the signal that killed it by name, with a hint for the telling ones."""
    if code is None or code >= 0:
        return f"exit code {code}"
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"exit code {code}"
    hint = SIGNAL_HINTS.get(sig)
    return f"exit code {code}, {sig.name}" + (f": {hint}" if hint else "")


@dataclass(frozen=True)
class CallResult:
    status: str  # "ok" | "error" (exception, message = traceback) | "timeout" | "crash"
    value: Any = None
    message: str = ""


def _import(module: str) -> None:
    """Import `module` and the modules it lists in WORKER_IMPORTS (those its functions import when called), TVM
    first (`import_tvm_without_torch`)."""
    import_tvm_without_torch()
    for name in (module, *getattr(importlib.import_module(module), "WORKER_IMPORTS", ())):
        importlib.import_module(name)


def import_tvm_without_torch() -> None:
    """Import TVM with torch hidden: tvm_ffi imports torch whenever it can, which doubles the start of a worker,
    an RPC server or tracker (4.5 against 2 s on a 2-core Zen 3) and its memory (400 against 200 MB), and none
    of them needs it. torch stays importable after."""
    if "tvm" in sys.modules or "torch" in sys.modules:
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError
    try:
        importlib.import_module("tvm")
    except ImportError:
        pass
    finally:
        del sys.modules["torch"]


def _die_with_parent() -> None:
    try:  # Linux: SIGKILL this worker when the parent dies (e.g. kill -9 of the tuner)
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # pragma: no cover - non-Linux
        pass


def _serve(conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _die_with_parent()
    sys.path[:0] = [p for p in conn.recv() if p not in sys.path]  # the parent's import path
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", fn(*args), "")
        except BaseException as err:  # report every failure of the call as data
            reply = ("error", None, f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=-3)}")
        conn.send(reply)


class Worker:
    """One isolated process (`python -m autotune.measure._worker_main`); `env` is set before it starts."""

    def __init__(self, env: dict[str, str] | None = None):
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        self._env = {**os.environ, **(env or {}), "PYTHONPATH": path}
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._imported: set[str] = set()  # modules this process has imported (their functions can be called)

    def _ensure(self) -> Connection:
        if self._proc is not None and self._proc.poll() is None and self._conn is not None:
            return self._conn
        self.close()
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        self._proc = subprocess.Popen([sys.executable, "-m", WORKER_MAIN, str(down_r), str(up_w)],
                                      pass_fds=(down_r, up_w), env=self._env, stdin=subprocess.DEVNULL)
        os.close(down_r)
        os.close(up_w)
        self._conn = _Duplex(Connection(up_r, writable=False), Connection(down_w, readable=False))
        self._conn.send(list(sys.path))
        return self._conn

    def call(self, fn: Callable, args: Sequence[Any], timeout: float | None) -> CallResult:
        if fn.__module__ not in self._imported:  # start-up and imports first: not the call's time
            loaded = self._send(_import, (fn.__module__,), IMPORT_TIMEOUT)
            if loaded.status != "ok":
                return loaded
            self._imported.add(fn.__module__)
        return self._send(fn, args, timeout)

    def _send(self, fn: Callable, args: Sequence[Any], timeout: float | None) -> CallResult:
        conn = self._ensure()
        try:
            conn.send((fn, tuple(args)))
            if not conn.poll(timeout):
                self.close()
                return CallResult("timeout", message=f"no answer after {timeout:g} s; worker killed")
            status, value, message = conn.recv()
            return CallResult(status, value, message)
        except (EOFError, OSError):
            code = self._proc.wait(5) if self._proc is not None else None
            self.close()
            return CallResult("crash", message=f"worker process died ({describe_exit(code)})")

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait(5)
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None
        self._imported = set()


class _Duplex:
    """Two one-way pipe connections used as one."""

    def __init__(self, reader: Connection, writer: Connection):
        self.reader, self.writer = reader, writer

    def send(self, obj: Any) -> None:
        self.writer.send(obj)

    def recv(self) -> Any:
        return self.reader.recv()

    def poll(self, timeout: float | None) -> bool:
        return self.reader.poll(timeout)

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


class WorkerPool:
    """n isolated workers; `map` runs calls in parallel, one at a time per worker."""

    def __init__(self, n: int, env: dict[str, str] | None = None):
        self.workers = [Worker(env) for _ in range(max(1, n))]
        self._threads = ThreadPoolExecutor(len(self.workers))

    def map(self, fn: Callable, arg_lists: Sequence[Sequence[Any]], timeout: float | None) -> list[CallResult]:
        free = list(self.workers)
        results: list[CallResult | None] = [None] * len(arg_lists)

        def run(i: int) -> None:
            worker = free.pop()
            try:
                results[i] = worker.call(fn, arg_lists[i], timeout)
            finally:
                free.append(worker)

        list(self._threads.map(run, range(len(arg_lists))))
        return results  # type: ignore[return-value]

    def close(self) -> None:
        for w in self.workers:
            w.close()
        self._threads.shutdown(wait=False)


def serve_fds(read_fd: int, write_fd: int) -> None:
    """Entry point of a worker process: serve calls on the two pipe ends it was given."""
    _serve(_Duplex(Connection(read_fd, writable=False), Connection(write_fd, readable=False)))
