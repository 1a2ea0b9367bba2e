"""Kill a real `autotune tune` run (SIGKILL, Ctrl-C) mid-way, resume it: nothing lost, nothing twice."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import TINY, UNHURRIED_CLI

pytestmark = pytest.mark.slow  # real tuning runs of 40 trials, killed and resumed

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
