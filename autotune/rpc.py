"""RPCRunner: time kernels on RPC servers registered at a TVM tracker; builds stay local.

A batch is spread over every free server under the key, one thread (and one isolated
client process) per server. Each candidate gets its own RPC session: upload the library,
load it, run it once on fixed random inputs, check the output against the numpy reference
computed here, then time it. A session that fails (server killed, kernel crashed, hang) is
retried once on another server if one is registered, then recorded as RUNTIME_ERROR or
RUN_TIMEOUT; the tuning run goes on.

Timeouts hold on both sides: the server ends a session after `session_timeout` seconds,
and the client kills its process 5 s after that, so a server that hangs or vanishes costs
only the candidates it held. Kernel threads are the servers' business: start them with
TVM_NUM_THREADS=N (`autotune rpc server --threads N`).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .errors import AutotuneError
from .measure import RunnerOptions, _to_measure_result
from .measure_types import BuildResult, ErrorKind, MeasureInput, MeasureResult
from .measure_worker import INPUT_SEED
from .ops import check_output, random_inputs, reduction_size
from .records import now
from .rpc_services import request_server, tracker_status
from .task import Task
from .workers import Worker

Server = tuple[str, int, str]  # host, port, match key (from the tracker)
RETRYABLE = (ErrorKind.RUNTIME_ERROR, ErrorKind.RUN_TIMEOUT)
CLIENT_GRACE_S = 5.0  # the client waits this long past session_timeout before killing its process
WORKER_ENV = {"TVM_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}  # the client side runs no kernels


# ---- what runs in the client processes ---------------------------------------------------

def measure_remote(server: Server, session_timeout: float, artifact: str, inputs: list[np.ndarray],
                   ref: np.ndarray, reduction: int, repeat: int, min_repeat_ms: float,
                   cache_flush: bool) -> tuple[str | None, str, list[float]]:
    """One RPC session: upload, load, check against `ref`, time. Same tuple as measure_worker.run."""
    import tvm
    from tvm import rpc

    host, port, matchkey = server
    t0 = time.monotonic()
    try:
        remote = rpc.connect(host, port, matchkey, session_timeout=session_timeout)
        remote.upload(artifact)
        lib = remote.load_module(os.path.basename(artifact))
        dev = remote.cpu(0)
        args = [tvm.runtime.tensor(a, dev) for a in inputs]
        out = tvm.runtime.tensor(np.full(ref.shape, np.nan, dtype=ref.dtype), dev)  # stale output must fail
        lib["main"](*args, out)
        problem = check_output(out.numpy(), ref, reduction)
        if problem:
            return "wrong_answer", problem, []
        timer = lib.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=int(min_repeat_ms),
                                   f_preproc="cache_flush_cpu_non_first_arg" if cache_flush else "")
        costs = [float(x) for x in timer(*args, out).results]
    except Exception as err:  # noqa: BLE001 - the server ends a session that outlives session_timeout: that is a timeout
        kind = "run_timeout" if time.monotonic() - t0 >= 0.95 * session_timeout else "runtime_error"
        return kind, f"{type(err).__name__}: {str(err).strip()[-500:]}", []
    return None, "", costs


def remote_threads(server: Server, session_timeout: float) -> int:
    """How many kernel threads TVM uses on the server."""
    from tvm import rpc

    host, port, matchkey = server
    remote = rpc.connect(host, port, matchkey, session_timeout=session_timeout)
    return int(remote.get_function("runtime.NumThreads")())


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
        self._workers: list[Worker] = []
        self._refs: dict[Task, tuple[list[np.ndarray], np.ndarray, int]] = {}
        self._check_registered()
        self.threads = self._server_threads()

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

    def _server_threads(self) -> int:
        """Kernel threads of the servers (asks one); must agree with options.threads when that is set."""
        try:
            server = request_server(*self.tracker, self.key, self.request_timeout)
        except (OSError, ValueError) as err:
            raise AutotuneError(f"no RPC server under key {self.key} at {self.address} became free: {err}") from None
        call = self._worker(0).call(remote_threads, (server, self.session_timeout),
                                    self.session_timeout + CLIENT_GRACE_S)
        if call.status != "ok":
            raise AutotuneError(f"RPC server {server[0]}:{server[1]} (key {self.key}) failed to answer: "
                                f"{call.message.strip().splitlines()[0] if call.message.strip() else call.status}")
        threads = int(call.value)
        if self.options.threads and self.options.threads != threads:
            raise AutotuneError(f"RPC servers under key {self.key} run {threads} kernel thread(s), not the "
                                f"{self.options.threads} asked for: restart them with TVM_NUM_THREADS="
                                f"{self.options.threads} (autotune rpc server --threads {self.options.threads})")
        return threads

    def _worker(self, i: int) -> Worker:
        with self._lock:
            while len(self._workers) <= i:
                self._workers.append(Worker(WORKER_ENV))
            return self._workers[i]

    def _servers(self) -> list[str]:
        """Servers registered under the key now ("host:port"); none if the tracker is unreachable."""
        try:
            return tracker_status(*self.tracker)["keys"].get(self.key, {}).get("servers", [])
        except OSError:
            return []

    def _free_servers(self) -> int:
        try:
            return tracker_status(*self.tracker)["keys"].get(self.key, {}).get("free", 0)
        except OSError:
            return 0

    def _reference(self, task: Task) -> tuple[list[np.ndarray], np.ndarray, int]:
        """Inputs, numpy reference output and reduction size of a task (the last few cached)."""
        with self._lock:
            if task not in self._refs:
                inputs = random_inputs(task.opdef, task.shape, task.dtype, INPUT_SEED)
                if len(self._refs) >= 4:
                    self._refs.pop(next(iter(self._refs)))
                self._refs[task] = (inputs, task.opdef.reference(task.shape, inputs),
                                    reduction_size(task.opdef, task.shape))
            return self._refs[task]

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        results: list[MeasureResult | None] = [None] * len(inputs)
        queue: deque[int] = deque()
        for i, b in enumerate(builds):
            if b.error is not None:
                results[i] = MeasureResult(None, b.error, b.message, b.build_s, now())
            else:
                queue.append(i)
        if queue and not self._servers():
            for i in queue:
                results[i] = self._error(builds[i], f"no RPC server left under key {self.key} at {self.address}")
            return results  # type: ignore[return-value]
        slots = max(1, min(len(queue), self._free_servers()))
        attempts = [0] * len(inputs)
        with ThreadPoolExecutor(slots) as pool:
            list(pool.map(lambda s: self._drain(s, queue, attempts, inputs, builds, results), range(slots)))
        return results  # type: ignore[return-value]

    def _drain(self, slot: int, queue: deque[int], attempts: list[int], inputs: Sequence[MeasureInput],
               builds: Sequence[BuildResult], results: list[MeasureResult | None]) -> None:
        """One server's share: take candidates until none is left; requeue a failed one once."""
        while True:
            with self._lock:
                if not queue:
                    return
                i = queue.popleft()
            try:
                res, where = self._measure(self._worker(slot), inputs[i], builds[i])
            except Exception as err:  # noqa: BLE001 - never let one candidate end the tuning run
                res, where = self._error(builds[i], f"{type(err).__name__}: {err}"), ""
            if res.error in RETRYABLE and attempts[i] == 0 and set(self._servers()) - {where}:
                with self._lock:
                    attempts[i] += 1
                    self.retried += 1
                    queue.append(i)
                continue
            results[i] = res

    def _measure(self, worker: Worker, inp: MeasureInput, build: BuildResult) -> tuple[MeasureResult, str]:
        """Measure one candidate on whichever server the tracker hands out: (result, "host:port")."""
        try:
            server = request_server(*self.tracker, self.key, self.request_timeout)
        except (OSError, ValueError) as err:
            return self._error(build, f"no RPC server under key {self.key} became free: {err}"), ""
        where = f"{server[0]}:{server[1]}"
        inputs, ref, reduction = self._reference(inp.task)
        o = self.options
        call = worker.call(measure_remote, (server, self.session_timeout, build.artifact, inputs, ref, reduction,
                                            o.repeat, o.min_repeat_ms, o.cache_flush),
                           self.session_timeout + CLIENT_GRACE_S)
        res = _to_measure_result(call, build.build_s)
        if res.ok:
            with self._lock:
                self.measured_by[where] += 1
            return res, where
        return dataclasses.replace(res, message=f"on RPC server {where}: {res.message}"), where

    @staticmethod
    def _error(build: BuildResult, message: str) -> MeasureResult:
        return MeasureResult(None, ErrorKind.RUNTIME_ERROR, message, build.build_s, now())

    def close(self) -> None:
        for w in self._workers:
            w.close()
        self._workers = []
