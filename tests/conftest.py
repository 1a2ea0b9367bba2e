"""Shared fixtures and fakes for every seam: the loop can run in milliseconds without TVM builds."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `tests.fake_templates` importable here and in worker processes

from autotune.measure_types import BuildResult, ErrorKind, MeasureInput, MeasureResult  # noqa: E402
from autotune.records import now  # noqa: E402
from autotune.task import make_task  # noqa: E402

TINY = "tests.fake_templates:TINY_MATMUL"
BUGGY = "tests.fake_templates:BUGGY_MATMUL"


class FakeBuilder:
    """Builds nothing; every candidate 'succeeds' (the fake runner decides its fate)."""

    def __init__(self):
        self.built: list[int] = []

    def build(self, inputs):
        self.built += [i.config.index for i in inputs]
        return [BuildResult(f"fake-{i.config.index}", None, "", 0.0) for i in inputs]

    def close(self):
        pass


class SimulatedRunner:
    """Replays a cost function of the config (kernel_tuner's simulation idea); None -> runtime error."""

    def __init__(self, cost_fn, threads: int = 2):
        self.cost_fn, self.threads, self.measured = cost_fn, threads, []

    def run(self, inputs: list[MeasureInput], builds: list[BuildResult]) -> list[MeasureResult]:
        out = []
        for inp in inputs:
            self.measured.append(inp.config.index)
            cost = self.cost_fn(inp.config)
            out.append(MeasureResult((cost,), None, "", 0.0, now()) if cost is not None
                       else MeasureResult(None, ErrorKind.RUNTIME_ERROR, "simulated failure", 0.0, now()))
        return out

    def device(self, target_kind: str) -> dict[str, str]:
        return {"gpu": "simulated"} if target_kind == "cuda" else {}

    def close(self):
        pass


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
