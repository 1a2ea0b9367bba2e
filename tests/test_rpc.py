"""RPC measurement on 127.0.0.1: a tracker, real servers, faults, and the `autotune rpc` helpers."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import time

import pytest
from conftest import BUGGY, TINY

from autotune.errors import AutotuneError
from autotune.measure import LocalBuilder, RunnerOptions
from autotune.measure.pool import ROOT
from autotune.measure.rpc import CLIENT_GRACE_S, RPCRunner, add_rpc_runner_arguments, runner_from_args
from autotune.measure.rpc_services import add_rpc_parser, cmd_rpc, start_server, start_tracker, stop, wait_for_servers
from autotune.measure.tracker import tracker_status
from autotune.measure.types import ErrorKind, MeasureInput
from autotune.records import load_records
from autotune.task import make_task
from autotune.tune import tune
from autotune.templates import resolve

KEY = "test-cpu"
OPTIONS = RunnerOptions(timeout=30, repeat=2, min_repeat_ms=5)  # sessions of 40 s: a busy machine's take < 2 s
SERVER_ENV = {"TVM_NUM_THREADS": "1"}
WAIT_S = 120  # for servers to register, or to come back: each starts a Python process that imports TVM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A tracker and servers on 127.0.0.1; every process is stopped by `close`."""

    def __init__(self, logs):
        self.logs, self.port, self.procs = logs, free_port(), []
        self.procs.append(start_tracker("127.0.0.1", self.port, log=logs / "tracker.log", wait=0))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add_server(self, key: str = KEY) -> subprocess.Popen:
        port = free_port()
        proc = start_server(self.address, key, "127.0.0.1", port, env=SERVER_ENV, port_end=port + 1,
                            log=self.logs / f"server{len(self.procs)}.log")
        self.procs.append(proc)
        return proc

    def servers(self, key: str = KEY) -> list[str]:
        return tracker_status("127.0.0.1", self.port)["keys"].get(key, {}).get("servers", [])

    def runner(self, **kw) -> RPCRunner:
        return RPCRunner(KEY, "127.0.0.1", self.port, kw.pop("options", OPTIONS), **kw)

    def close(self) -> None:
        for p in reversed(self.procs):
            stop(p)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("rpc"))
    try:
        c.add_server()
        c.add_server()
        wait_for_servers("127.0.0.1", c.port, KEY, 2, timeout=WAIT_S)
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def builder():
    b = LocalBuilder(workers=1)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def task():
    return make_task("matmul", "M=32,N=32,K=32")


def test_tuning_spreads_over_every_server(cluster, task, tmp_path, worker_env):
    runner = cluster.runner()
    try:
        assert runner.threads == 1  # what the servers run (TVM_NUM_THREADS=1)
        res = tune(task, trials=12, tuner="random", template=TINY, log=tmp_path / "l.jsonl", runner=runner, retime=0,
                   batch_size=4)
    finally:
        runner.close()
    records = load_records(tmp_path / "l.jsonl")
    assert len(res.records) == 12 == len(records) == len({r.input.config.index for r in records})
    assert all(r.result.ok for r in records), [r.result.message for r in records if not r.result.ok]
    assert all(r.threads == 1 for r in records)
    assert sorted(runner.measured_by) == sorted(cluster.servers()) and min(runner.measured_by.values()) >= 1


@pytest.mark.slow
def test_killed_server_costs_the_run_nothing(cluster, task, tmp_path, worker_env):
    victim = cluster.add_server()
    wait_for_servers("127.0.0.1", cluster.port, KEY, 3, timeout=WAIT_S)
    runner = cluster.runner()

    def kill_after_first_batch(result):
        if len(result.records) == 4:
            os.killpg(victim.pid, signal.SIGKILL)

    try:
        res = tune(task, trials=12, tuner="random", template=TINY, log=tmp_path / "l.jsonl", runner=runner, retime=0,
                   batch_size=4, progress=kill_after_first_batch)
    finally:
        runner.close()
        stop(victim)
    records = load_records(tmp_path / "l.jsonl")
    assert len(res.records) == 12 == len(records)
    assert sum(r.result.ok for r in records) >= 8  # the first batch, and every later one on the two survivors
    assert len(cluster.servers()) == 2


@pytest.mark.slow  # waits out a session deadline
def test_hung_server_is_timed_out_by_the_client_and_its_candidate_retried(cluster, builder, task):
    space = resolve(TINY).define_space(task)
    inputs = [MeasureInput(task, space.get(i), TINY) for i in range(3)]
    hung = cluster.add_server()
    try:
        builds = builder.build(inputs)
        wait_for_servers("127.0.0.1", cluster.port, KEY, 3, timeout=WAIT_S)
        runner = cluster.runner(session_timeout=8)  # the hung server's is reached; no good session's, under load
        _wait_free(cluster, 3)  # the server that answered the runner's probe is back in the queue
        os.killpg(hung.pid, signal.SIGSTOP)  # registered and handed out, but never answers
        t0 = time.monotonic()
        results = runner.run(inputs, builds)
        elapsed = time.monotonic() - t0
    finally:
        stop(hung)  # SIGKILL ends a stopped group too
    assert all(r.ok for r in results), [r.message for r in results]
    assert runner.retried == 1 and f"127.0.0.1:{_port_of(hung, cluster)}" not in runner.measured_by
    assert elapsed < runner.session_timeout + CLIENT_GRACE_S + 30  # the hung session was given up at its deadline


@pytest.mark.slow  # both servers restart after the segfaults
def test_crashing_kernel_costs_its_candidate_not_the_servers(cluster, builder, task):
    space = resolve(BUGGY).define_space(task)
    first = {m: MeasureInput(task, space.get(next(i for i in range(len(space)) if space.get(i)["mode"] == m)), BUGGY)
             for m in ("crash", "wrong", "ok")}
    inputs = [first["crash"], first["wrong"]]
    runner = cluster.runner()
    crash, wrong = runner.run(inputs, builder.build(inputs))
    assert crash.error is ErrorKind.RUNTIME_ERROR and "after a retry" in crash.message
    assert wrong.error is ErrorKind.WRONG_ANSWER and runner.retried == 1
    wait_for_servers("127.0.0.1", cluster.port, KEY, 2, timeout=WAIT_S)  # both came back after the segfaults
    ok = [first["ok"], first["ok"]]
    assert all(r.ok for r in runner.run(ok, builder.build(ok)))


def _wait_free(cluster: Cluster, n: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while tracker_status("127.0.0.1", cluster.port)["keys"][KEY]["free"] < n:
        assert time.monotonic() < deadline, tracker_status("127.0.0.1", cluster.port)
        time.sleep(0.1)


def _port_of(proc: subprocess.Popen, cluster: Cluster) -> int:
    """The port a server started by the cluster bound (the first line of its log says it)."""
    log = cluster.logs / f"server{cluster.procs.index(proc)}.log"
    return int(log.read_text().split("RPC server on 127.0.0.1:", 1)[1].split(",", 1)[0])


def test_unreachable_tracker_is_a_one_line_error():
    port = free_port()
    with pytest.raises(AutotuneError, match=f"cannot reach RPC tracker at 127.0.0.1:{port}: ") as err:
        RPCRunner(KEY, "127.0.0.1", port, OPTIONS)
    assert "\n" not in str(err.value)


def test_unknown_key_lists_the_keys_seen(cluster):
    with pytest.raises(AutotuneError, match=rf"no RPC server registered under key gpu at {cluster.address} "
                                            rf"\(keys seen: {KEY}\)"):
        RPCRunner("gpu", "127.0.0.1", cluster.port, OPTIONS)


def test_thread_count_must_match_the_servers(cluster, worker_env):
    with pytest.raises(AutotuneError, match="run 1 kernel thread.*TVM_NUM_THREADS=2"):
        cluster.runner(options=RunnerOptions(threads=2))


def test_rpc_status_command(cluster, capsys):
    parser = argparse.ArgumentParser()
    add_rpc_parser(parser.add_subparsers(dest="command"))
    assert cmd_rpc(parser.parse_args(["rpc", "status", "--tracker", cluster.address])) == 0
    out = capsys.readouterr().out
    assert f"tracker {cluster.address}" in out and KEY in out
    for addr in cluster.servers():
        assert addr in out
    with pytest.raises(AutotuneError, match="bad tracker address"):
        cmd_rpc(parser.parse_args(["rpc", "status", "--tracker", "nowhere"]))


def test_tune_arguments_make_a_runner(cluster):
    parser = argparse.ArgumentParser()
    add_rpc_runner_arguments(parser)
    assert runner_from_args(parser.parse_args([]), OPTIONS) is None
    runner = runner_from_args(parser.parse_args(["--rpc-key", KEY, "--rpc-tracker", cluster.address]), OPTIONS)
    assert isinstance(runner, RPCRunner) and runner.threads == 1 and runner.session_timeout == OPTIONS.timeout + 10


@pytest.mark.parametrize("argv", [
    ["rpc", "tracker", "--host", "0.0.0.0"],
    ["rpc", "server", "--key", KEY, "--host", "0.0.0.0"],
    ["rpc", "server", "--key", KEY, "--host", "10.1.2.3", "--tracker", "10.1.2.4:9190"],
])
def test_listening_beyond_loopback_needs_allow_remote(argv, capsys):
    from autotune.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "RPC has no authentication" in err and "--allow-remote" in err, err
    with pytest.raises(AutotuneError, match="--allow-remote"):
        start_server("127.0.0.1:9190", KEY, host="::")
    with pytest.raises(AutotuneError, match="--allow-remote"):
        start_tracker("0.0.0.0", free_port())


def test_loopback_names():
    from autotune.measure.rpc_services import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "", "10.0.0.1", "no-such-host.invalid"))


def _started_child(parent: subprocess.Popen, timeout: float = WAIT_S) -> int:
    """The pid of the process `autotune rpc ...` started (its only child)."""
    import psutil

    deadline = time.monotonic() + timeout
    while not (children := psutil.Process(parent.pid).children()):
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.1)
    return children[0].pid


def _gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow  # a server and a tracker each start a Python process that imports TVM
def test_killed_rpc_commands_leave_no_process_behind(cluster, tmp_path):
    """SIGKILL of `autotune rpc server` (its whole group) ends its server process, which leaves the tracker;
    the same for `autotune rpc tracker`."""
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    port, key = free_port(), "orphan-check"
    cli = [sys.executable, "-m", "autotune.cli", "rpc"]
    server = subprocess.Popen([*cli, "server", "--key", key, "--tracker", cluster.address, "--port", str(port),
                               "--port-end", str(port + 1)], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tracker_port = free_port()
    tracker = subprocess.Popen([*cli, "tracker", "--port", str(tracker_port)], env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children = []
    try:
        wait_for_servers("127.0.0.1", cluster.port, key, 1, timeout=WAIT_S)
        children = [_started_child(server), _started_child(tracker)]
        deadline = time.monotonic() + WAIT_S
        while True:  # the tracker answers
            try:
                tracker_status("127.0.0.1", tracker_port)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        for parent in (server, tracker):
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait()
        deadline = time.monotonic() + 5
        while not all(_gone(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_gone(pid) for pid in children)
        deadline = time.monotonic() + 30  # the tracker drops a server whose connection closed
        while cluster.servers(key) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cluster.servers(key) == []
    finally:
        for pid in children:
            if not _gone(pid):
                os.killpg(pid, signal.SIGKILL)
        for parent in (server, tracker):
            if parent.poll() is None:
                os.killpg(parent.pid, signal.SIGKILL)
