import math

import pytest

from autotune.records import load_records
from autotune.tune import tune
from search_spaces import resolve

from conftest import TINY, FakeBuilder, SimulatedRunner


def _cost(cfg):  # fastest when both inner tiles are 8
    return 1e-3 * (1 + abs(math.log2(cfg["tile_i"][1]) - 3) + abs(math.log2(cfg["tile_j"][1]) - 3))


@pytest.mark.parametrize("tuner", ["random", "grid"])
def test_loop_measures_exactly_the_requested_trials(tmp_path, small_matmul, tuner):
    runner = SimulatedRunner(_cost)
    res = tune(small_matmul, trials=20, tuner=tuner, log=tmp_path / "l.jsonl", template=TINY, batch_size=6,
               builder=FakeBuilder(), runner=runner)
    assert len(res.records) == 20 == len(load_records(tmp_path / "l.jsonl"))
    assert len(set(runner.measured)) == 20
    if tuner == "grid":
        assert runner.measured == list(range(20))


def test_resume_continues_without_remeasuring(tmp_path, small_matmul):
    log = tmp_path / "l.jsonl"
    first = SimulatedRunner(_cost)
    tune(small_matmul, trials=10, tuner="random", log=log, template=TINY, builder=FakeBuilder(), runner=first)
    second = SimulatedRunner(_cost)
    res = tune(small_matmul, trials=25, tuner="random", log=log, template=TINY, builder=FakeBuilder(), runner=second)
    assert res.resumed == 10 and len(second.measured) == 15
    assert not set(first.measured) & set(second.measured)
    idx = [r.input.config.index for r in load_records(log)]
    assert len(idx) == len(set(idx)) == 25


def test_space_exhaustion_and_early_stopping(tmp_path, small_matmul):
    size = len(resolve(TINY).define_space(small_matmul))
    res = tune(small_matmul, trials=size + 50, tuner="grid", log=tmp_path / "a.jsonl", template=TINY,
               builder=FakeBuilder(), runner=SimulatedRunner(_cost))
    assert len(res.records) == size
    res = tune(small_matmul, trials=40, tuner="grid", log=tmp_path / "b.jsonl", template=TINY, batch_size=4,
               early_stopping=8, builder=FakeBuilder(), runner=SimulatedRunner(lambda c: 1.0))
    assert res.stopped.startswith("no improvement") and len(res.records) <= 12


def test_errors_are_never_best(tmp_path, small_matmul):
    runner = SimulatedRunner(lambda c: None if c.index % 2 else 1e-3 * (1 + c.index))
    res = tune(small_matmul, trials=10, tuner="grid", log=tmp_path / "l.jsonl", template=TINY,
               builder=FakeBuilder(), runner=runner)
    assert res.best.input.config.index == 0 and res.errors == 5


def test_real_tuning_end_to_end(tmp_path, small_matmul, worker_env):
    from autotune import build_best
    from autotune.ops import random_inputs

    res = tune(small_matmul, trials=6, tuner="random", log=tmp_path / "l.jsonl", template=TINY, batch_size=3)
    assert len(res.records) == 6 and res.best is not None and res.best.gflops() > 0
    kernel = build_best(tmp_path / "l.jsonl", small_matmul)
    a, b = random_inputs(small_matmul.opdef, small_matmul.shape, "float32", seed=5)
    assert abs(kernel(a, b) - a @ b).max() < 1e-4
    assert kernel.config.index == res.best.input.config.index and min(kernel.time(a, b, repeat=2)) > 0
