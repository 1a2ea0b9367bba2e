"""Shared fixtures and fakes for every seam: the loop can run in milliseconds without TVM builds.

Test tiers (marker `slow`, declared in pyproject.toml, whose addopts deselect it by default):

- default, `python -m pytest -q` (the README's command and CI's): about 4 minutes on 2 cores, in two test
  processes (pytest-xdist's `-n 2`, in pyproject's addopts). Every area
  with its fastest representative tests: the tuning loop on fakes and one real tuning run end to end (tune,
  build_best), measurement (each failure kind of a real builder and runner is one result, a hanging kernel
  timed out; build timeouts), records, the cost model and the XGB tuner, CPU templates correct on one awkward
  shape per operator and CUDA templates generating matching source for one, model capture, extraction and
  build (CPU, CUDA source), the torch.compile backend, dynamic shapes (the CLI's --dynamic run and its
  dispatching kernel), RPC (a tracker and two servers measuring a tuning run), CLI errors.
- slow, `python -m pytest -q -m slow`: what is long or repeats a default test on more cases: the template
  sweeps over every shape, `autotune tune` runs through the CLI (tune/show/best, CUDA --build-only, killed
  and resumed), a second real tuning run (dense's relaid weight), RPC servers killed, hung or crashing mid-run,
  tune_model on CUDA tasks, model builds from real tuning runs and export-db into MetaSchedule, the FFT and
  importer fixes by both capture paths, worker start-up, thread and cleanup details in fresh processes, xgb
  against random search on loop features. About 5 minutes on 2 idle cores.
- everything: `python -m pytest -q -m "slow or not slow"`.

Tests do not depend on an idle machine: a measurement that is not the point of the test runs on one
kernel thread with a deadline a busy machine does not reach (`UNHURRIED`), and waits for processes or
servers are minutes, not seconds; only a test about a timeout (a hanging kernel, a hung server) is meant
to reach one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `tests.fake_templates` importable here and in worker processes
# builds in tests use the heuristic configs, whatever knowledge ships for the machine's class (tests/test_shipped.py
# turns it on where it is the subject)
os.environ["AUTOTUNE_NO_SHIPPED"] = "1"

from autotune.measure import RunnerOptions  # noqa: E402
# the fakes of the builder and runner seams that tests import from here: the tuning loop without TVM builds
from autotune.measure.replay import SimulatedBuilder as FakeBuilder, SimulatedRunner  # noqa: E402, F401
from autotune.task import make_task  # noqa: E402

TINY = "tests.fake_templates:TINY_MATMUL"
BUGGY = "tests.fake_templates:BUGGY_MATMUL"

# Real measurements in tests that are not about timing: one kernel thread (two threads on two cores that other
# work shares wait on each other at every parallel loop: a 3 us kernel timed for 100 ms took 14 s), short
# timings, and a deadline no busy machine reaches (the default 10 s was, under load).
UNHURRIED = RunnerOptions(threads=1, timeout=120, min_repeat_ms=5)
UNHURRIED_CLI = ["--threads", "1", "--timeout", "120", "--min-repeat-ms", "5"]


@pytest.fixture
def small_matmul():
    return make_task("matmul", {"M": 64, "N": 64, "K": 64})


@pytest.fixture
def cwd_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def worker_env(monkeypatch):
    """Worker processes started by a test find `tests.*` through PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


@pytest.fixture(autouse=True)
def _kernel_threads_env():
    """A kernel run in the test process sets TVM_NUM_THREADS (`use_target_threads`): kept from later tests."""
    before = os.environ.get("TVM_NUM_THREADS")
    yield
    if before is None:
        os.environ.pop("TVM_NUM_THREADS", None)
    else:
        os.environ["TVM_NUM_THREADS"] = before
