"""Kill a real `autotune tune` run (SIGKILL, Ctrl-C) mid-way, resume it: nothing lost, nothing twice. Faults on
the way (a full disk, what a killed run left behind) end in one line and are cleaned up by the next run."""

import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import TINY, UNHURRIED_CLI, FakeBuilder, SimulatedRunner

import autotune.cli
from autotune.measure.local import LocalBuilder
from autotune.tune import tune

CMD = [sys.executable, "-m", "autotune.cli", "tune", "matmul", "--shape", "M=64,N=64,K=64", "--tuner", "random",
       "--template", TINY, "--batch-size", "4", "--quiet", *UNHURRIED_CLI]


def _lines(log):
    return log.read_text().splitlines() if log.exists() else []


def _start(log, trials):
    """The run, its temporary files (the builder's libraries) under the log's folder: a killed run leaves them."""
    env = {**os.environ, "TMPDIR": str(log.parent)}
    return subprocess.Popen(CMD + ["--trials", str(trials), "--log", str(log)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)


def _wait_for_lines(proc, log, n, limit=300):
    t0 = time.time()
    while len(_lines(log)) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.time() - t0 < limit, "tuning made no progress"
        time.sleep(0.05)


@pytest.mark.slow  # real tuning runs of 40 trials, killed and resumed
def test_sigkill_then_resume(tmp_path, worker_env):
    log = tmp_path / "run.jsonl"
    proc = _start(log, 40)
    _wait_for_lines(proc, log, 9)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = len(_lines(log))
    assert 9 <= killed_at < 40
    done = subprocess.run(CMD + ["--trials", "40", "--log", str(log)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"resumed {killed_at}" in done.stderr
    records = [json.loads(line) for line in _lines(log) if line.strip()]  # every line parses
    indices = [r["config"]["index"] for r in records]
    assert indices[:40] == list(dict.fromkeys(indices)) and len(set(indices)) == 40  # 40 trials, then re-timings


@pytest.mark.slow
def test_ctrl_c_keeps_the_log_and_says_how_to_resume(tmp_path, worker_env):
    log = tmp_path / "run.jsonl"
    proc = _start(log, 40)
    _wait_for_lines(proc, log, 4)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "re-run the same command to resume" in err and "Traceback" not in err
    assert not list(tmp_path.glob("autotune-build-*"))  # the builder's folder went with the run
    records = [json.loads(line) for line in _lines(log)]
    assert len(records) >= 4 and len({r["config"]["index"] for r in records}) == len(records)


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_a_full_disk_mid_run_ends_in_one_line_and_the_same_command_resumes(tmp_path, monkeypatch, capsys):
    """`autotune tune` (measured by a simulated runner) whose disk fills at its 7th record: one line, exit 2, the
    six earlier records whole; the same command resumes from them."""
    monkeypatch.setattr(autotune.cli, "tune", lambda *a, **kw: tune(*a, **{
        **kw, "builder": FakeBuilder(), "runner": SimulatedRunner(lambda cfg: 1e-3 / cfg.index if cfg.index else 1)}))
    log = tmp_path / "run.jsonl"
    argv = ["tune", "matmul", "--shape", "M=64,N=64,K=64", "--tuner", "random", "--template", TINY, "--batch-size",
            "4", "--quiet", "--trials", "12", "--log", str(log), "--retime", "0"]
    fsync, calls = os.fsync, []

    def fills_up(fd):
        calls.append(fd)
        if len(calls) > 6:
            raise OSError(errno.ENOSPC, "No space left on device")
        fsync(fd)

    monkeypatch.setattr(os, "fsync", fills_up)
    assert autotune.cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("autotune: error: the disk is full: every measurement before this one is in the log ")
    assert err.endswith("re-run the same command to resume")
    monkeypatch.setattr(os, "fsync", fsync)
    lines = log.read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(line) for line in lines)
    assert autotune.cli.main(argv) == 0
    assert "resumed 6 records" in capsys.readouterr().err and len(log.read_text().splitlines()) == 12


def test_a_builder_removes_the_folders_that_killed_runs_left(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    killed = tmp_path / f"autotune-build-{_dead_pid()}-x1y2"  # kill -9 of a tune left it, with its libraries
    killed.mkdir()
    (killed / "cand1.so").write_bytes(b"\0")
    running = tmp_path / f"autotune-build-{os.getppid()}-a1b2"  # a run still going keeps its own
    running.mkdir()
    builder = LocalBuilder(workers=1)
    try:
        assert not killed.exists() and running.exists()
        assert builder._dir.parent == tmp_path and builder._dir.name.startswith(f"autotune-build-{os.getpid()}-")
    finally:
        builder.close()
    assert not builder._dir.exists()
