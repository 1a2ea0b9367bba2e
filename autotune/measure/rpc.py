"""RPCRunner: time kernels on RPC servers registered at a TVM tracker; builds stay local.

A batch is spread over every server under the key, one thread per server. Each candidate
gets its own RPC session: upload the library, load it, run it once on fixed random inputs,
check the output against the numpy reference computed here, then time it. A session that
fails (server killed, kernel crashed, hang) is retried once on another server if one is
registered, then recorded as RUNTIME_ERROR or RUN_TIMEOUT; the tuning run goes on.

Timeouts hold on both sides: the server ends a session after `session_timeout` seconds,
and the client abandons the session's thread 5 s after that (TVM's RPC calls release the
GIL), so a server that hangs or vanishes costs only the candidates it held. Kernel threads
are the servers' business: start them with TVM_NUM_THREADS=N (`autotune rpc server
--threads N`); the runner asks one server and reports that number (or refuses a different
options.threads). Servers under one key are assumed identical.
"""

from __future__ import annotations

import argparse
import os
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import AutotuneError
from ..operators import check_output, element_type, random_inputs, reduction_size, reference_output
from ..task import Task
from .interface import RunnerOptions
from .timing import time_kernel
from .tracker import DEFAULT_TRACKER, parse_address, request_server, tracker_status
from .types import BuildResult, ErrorKind, MeasureInput, MeasureResult, now
from .worker import INPUT_SEED, kernel_inputs

Server = tuple[str, int, str]  # host, port, match key (from the tracker)
RETRYABLE = (ErrorKind.RUNTIME_ERROR, ErrorKind.RUN_TIMEOUT)
CLIENT_GRACE_S = 5.0  # the client waits this long past session_timeout before abandoning a session


# ---- one remote session (runs in its own thread) ------------------------------------------

def measure_remote(server: Server, session_timeout: float, artifact: str, target_kind: str, inputs: list[np.ndarray],
                   ref: np.ndarray, reduction: int, dtype: str, repeat: int, min_repeat_ms: float,
                   cache_flush: bool) -> tuple[str | None, str, list[float]]:
    """One RPC session: upload, load, check against `ref` (as `dtype` allows), time: (error kind value | None,
    message, costs).

    target_kind "cuda" runs on the server's GPU 0 (not yet tried on a GPU server), anything else on its CPU.
    """
    import tvm
    from tvm import rpc

    host, port, matchkey = server
    t0 = time.monotonic()
    try:
        remote = rpc.connect(host, port, matchkey, session_timeout=session_timeout)
        remote.upload(artifact)
        lib = remote.load_module(os.path.basename(artifact))
        dev = remote.cuda(0) if target_kind == "cuda" else remote.cpu(0)
        args = [tvm.runtime.tensor(a, dev) for a in inputs]
        out = tvm.runtime.tensor(element_type(dtype).unfilled(ref.shape), dev)  # stale output must fail
        lib["main"](*args, out)
        problem = check_output(out.numpy(), ref, reduction, dtype)
        if problem:
            return "wrong_answer", problem, []
        costs = time_kernel(lib, dev, [*args, out], repeat, min_repeat_ms, cache_flush and target_kind != "cuda")
    except Exception as err:  # noqa: BLE001 - any failure of the session is a result
        # the server ends a session that outlives session_timeout: that is a timeout
        kind = "run_timeout" if time.monotonic() - t0 >= 0.95 * session_timeout else "runtime_error"
        return kind, f"{type(err).__name__}: {str(err).strip()[-500:]}", []
    return None, "", costs


def remote_facts(server: Server, session_timeout: float) -> tuple[int, dict[str, str]]:
    """How many kernel threads TVM uses on the server, and its GPU 0 as records name it (model, the CUDA version its
    driver supports; empty without a GPU)."""
    from tvm import rpc

    host, port, matchkey = server
    remote = rpc.connect(host, port, matchkey, session_timeout=session_timeout)
    threads = int(remote.get_function("runtime.NumThreads")())
    try:
        dev = remote.cuda(0)
        gpu = {"gpu": str(dev.device_name), "cuda": str(dev.driver_version)} if dev.exist else {}
    except Exception:  # noqa: BLE001 - a server built without CUDA has no CUDA device API
        gpu = {}
    return threads, gpu


def call_with_timeout(fn: Callable[..., Any], args: tuple, timeout: float) -> tuple[str, Any]:
    """Run fn(*args) in a daemon thread: ("ok", value), ("error", exception) or ("timeout", None).

    On timeout the thread is abandoned; it ends when the server closes the session.
    """
    box: queue.SimpleQueue = queue.SimpleQueue()

    def target() -> None:
        try:
            box.put(("ok", fn(*args)))
        except Exception as err:  # noqa: BLE001 - handed to the caller as data
            box.put(("error", err))

    threading.Thread(target=target, daemon=True, name=f"rpc-{fn.__name__}").start()
    try:
        return box.get(timeout=timeout)
    except queue.Empty:
        return "timeout", None


# ---- the runner ---------------------------------------------------------------------------

class RPCRunner:
    """Runner protocol over RPC: `run(inputs, builds)` measures on the servers under `key`.

    session_timeout: seconds one candidate's session may take (upload, load, check, timing);
    default options.timeout + 10. request_timeout: seconds to wait for a free server.
    `measured_by` counts valid measurements per server "host:port"; `retried` counts retries.
    """

    def __init__(self, key: str, tracker_host: str = "127.0.0.1", tracker_port: int = 9190,
                 options: RunnerOptions | None = None, session_timeout: float | None = None,
                 request_timeout: float = 60.0):
        self.key = key
        self.tracker = (tracker_host, tracker_port)
        self.options = options or RunnerOptions()
        self.session_timeout = session_timeout or self.options.timeout + 10.0
        self.request_timeout = request_timeout
        self.measured_by: Counter[str] = Counter()
        self.retried = 0
        self._lock = threading.Lock()
        self._refs: dict[Task, tuple[list[np.ndarray], np.ndarray, int]] = {}
        self._check_registered()
        self.threads, self._gpu = self._server_facts()

    @property
    def address(self) -> str:
        return f"{self.tracker[0]}:{self.tracker[1]}"

    def _check_registered(self) -> None:
        try:
            keys = tracker_status(*self.tracker)["keys"]
        except OSError as err:
            raise AutotuneError(f"cannot reach RPC tracker at {self.address}: {err}") from None
        if not keys.get(self.key, {}).get("servers"):
            seen = ", ".join(sorted(k for k, v in keys.items() if v["servers"])) or "none"
            raise AutotuneError(f"no RPC server registered under key {self.key} at {self.address} (keys seen: {seen})")

    def _server_facts(self) -> tuple[int, dict[str, str]]:
        """Kernel threads and GPU of the servers (asks one); the threads must agree with options.threads when set."""
        try:
            server = request_server(*self.tracker, self.key, self.request_timeout)
        except (OSError, ValueError) as err:
            raise AutotuneError(f"no RPC server under key {self.key} at {self.address} became free: {err}") from None
        status, value = call_with_timeout(remote_facts, (server, self.session_timeout),
                                          self.session_timeout + CLIENT_GRACE_S)
        if status != "ok":
            why = "no answer" if status == "timeout" else f"{type(value).__name__}: {str(value).strip()[-300:]}"
            raise AutotuneError(f"RPC server {server[0]}:{server[1]} (key {self.key}) failed to answer: "
                                + why.replace("\n", " "))
        threads, gpu = int(value[0]), value[1]
        if self.options.threads and self.options.threads != threads:
            raise AutotuneError(f"RPC servers under key {self.key} run {threads} kernel thread(s), not the "
                                f"{self.options.threads} asked for: restart them with TVM_NUM_THREADS="
                                f"{self.options.threads} (autotune rpc server --threads {self.options.threads})")
        return threads, gpu

    def device(self, target_kind: str) -> dict[str, str]:
        """The servers' GPU (asked of one when the runner started) for CUDA kernels; nothing for CPU ones."""
        return dict(self._gpu) if target_kind == "cuda" else {}

    def _servers(self) -> list[str]:
        """Servers registered under the key now ("host:port"); none if the tracker is unreachable."""
        try:
            return tracker_status(*self.tracker)["keys"].get(self.key, {}).get("servers", [])
        except OSError:
            return []

    def _reference(self, task: Task) -> tuple[list[np.ndarray], np.ndarray, int]:
        """Inputs, numpy reference output and reduction size of a task (the last few cached)."""
        with self._lock:
            if task not in self._refs:
                inputs = random_inputs(task.opdef, task.shape, task.dtype, INPUT_SEED)
                if len(self._refs) >= 4:
                    self._refs.pop(next(iter(self._refs)))
                self._refs[task] = (inputs, reference_output(task.opdef, task.shape, task.dtype, inputs),
                                    reduction_size(task.opdef, task.shape))
            return self._refs[task]

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        results: list[MeasureResult | None] = [None] * len(inputs)
        pending: deque[int] = deque()
        for i, b in enumerate(builds):
            if b.error is not None:
                results[i] = MeasureResult(None, b.error, b.message, b.build_s, now())
            else:
                pending.append(i)
        servers = self._servers() if pending else []
        if pending and not servers:
            for i in pending:
                results[i] = self._error(builds[i], f"no RPC server left under key {self.key} at {self.address}")
            return results  # type: ignore[return-value]
        slots = max(1, min(len(pending), len(servers)))  # busy servers too: the tracker queues our requests
        attempts = [0] * len(inputs)
        with ThreadPoolExecutor(slots) as pool:
            list(pool.map(lambda _: self._drain(pending, attempts, inputs, builds, results), range(slots)))
        return results  # type: ignore[return-value]

    def _drain(self, pending: deque[int], attempts: list[int], inputs: Sequence[MeasureInput],
               builds: Sequence[BuildResult], results: list[MeasureResult | None]) -> None:
        """One server's share: take candidates until none is left; requeue a failed one once."""
        while True:
            with self._lock:
                if not pending:
                    return
                i = pending.popleft()
            try:
                res, where = self._measure(inputs[i], builds[i])
            except Exception as err:  # noqa: BLE001 - never let one candidate end the tuning run
                res, where = self._error(builds[i], f"{type(err).__name__}: {err}"), ""
            if res.error in RETRYABLE and attempts[i] == 0 and set(self._servers()) - {where}:
                with self._lock:
                    attempts[i] += 1
                    self.retried += 1
                    pending.append(i)
                continue
            results[i] = replace(res, message=f"{res.message} (after a retry)") if attempts[i] and not res.ok else res

    def _measure(self, inp: MeasureInput, build: BuildResult) -> tuple[MeasureResult, str]:
        """Measure one candidate on whichever server the tracker hands out: (result, "host:port")."""
        try:
            server = request_server(*self.tracker, self.key, self.request_timeout)
        except (OSError, ValueError) as err:
            return self._error(build, f"no RPC server under key {self.key} became free: {err}"), ""
        where = f"{server[0]}:{server[1]}"
        inputs, ref, reduction = self._reference(inp.task)
        inputs = kernel_inputs(inp.task, inp.template, inp.config.index, inputs)
        o = self.options
        args = (server, self.session_timeout, build.artifact, inp.task.target_kind, inputs, ref, reduction,
                inp.task.dtype, o.repeat, o.min_repeat_ms, o.cache_flush)
        status, value = call_with_timeout(measure_remote, args, self.session_timeout + CLIENT_GRACE_S)
        if status == "timeout":
            wait = self.session_timeout + CLIENT_GRACE_S
            return MeasureResult(None, ErrorKind.RUN_TIMEOUT, f"no answer from RPC server {where} within {wait:g} s",
                                 build.build_s, now()), where
        if status == "error":
            return self._error(build, f"on RPC server {where}: {type(value).__name__}: {str(value)[-500:]}"), where
        kind, message, costs = value
        if kind is not None:
            message = f"on RPC server {where}: {message}"
            return MeasureResult(None, ErrorKind(kind), message, build.build_s, now()), where
        with self._lock:
            self.measured_by[where] += 1
        return MeasureResult(tuple(costs), None, "", build.build_s, now()), where

    @staticmethod
    def _error(build: BuildResult, message: str) -> MeasureResult:
        return MeasureResult(None, ErrorKind.RUNTIME_ERROR, message, build.build_s, now())

    def close(self) -> None:
        """Nothing to release: sessions end with their candidate (abandoned ones when the server ends them)."""


# ---- command-line options --------------------------------------------------------------

def add_rpc_runner_arguments(parser: argparse.ArgumentParser) -> None:
    """`--rpc-key/--rpc-tracker/--rpc-session-timeout` for `autotune tune` (see `runner_from_args`)."""
    parser.add_argument("--rpc-key", help="measure on the RPC servers registered under this key (autotune rpc)")
    parser.add_argument("--rpc-tracker", default=DEFAULT_TRACKER, help="tracker HOST:PORT for --rpc-key")
    parser.add_argument("--rpc-session-timeout", type=float,
                        help="seconds one remote measurement may take (default: --timeout + 10)")


def runner_from_args(args: argparse.Namespace, options: RunnerOptions) -> RPCRunner | None:
    """An RPCRunner when --rpc-key was given, else None (measure locally)."""
    if not args.rpc_key:
        return None
    host, port = parse_address(args.rpc_tracker)
    return RPCRunner(args.rpc_key, host, port, options, session_timeout=args.rpc_session_timeout)
