"""The replay and simulation runners (autotune/measure/replay.py): recorded results served, the rest measured once."""

from __future__ import annotations

import math

import pytest
from conftest import TINY

from autotune.measure import ErrorKind, MeasureInput, MeasureResult, RunnerOptions, runner_timing
from autotune.measure.replay import (
    REPLAYED,
    ReplayBuilder,
    ReplayRunner,
    SimulatedBuilder,
    SimulatedRunner,
    config_index,
    first_results,
    result_key,
)
from autotune.records import load_records
from autotune.templates import resolve
from autotune.tune import tune


def _cost(cfg):  # fastest when both inner tiles are 8
    return 1e-3 * (1 + abs(math.log2(cfg["tile_i"][1]) - 3) + abs(math.log2(cfg["tile_j"][1]) - 3))


@pytest.fixture
def inputs(small_matmul):
    space = resolve(TINY).define_space(small_matmul)
    return [MeasureInput(small_matmul, space.get(i), TINY) for i in range(6)]


def _ok(cost: float, timestamp: float = 1.0) -> MeasureResult:
    return MeasureResult((cost,), None, "", 0.0, timestamp)


def test_recorded_results_are_served_and_nothing_is_measured(inputs):
    known = {result_key(inp): _ok(1e-3 * (k + 1)) for k, inp in enumerate(inputs)}
    fallback = SimulatedRunner(lambda cfg: 1.0)
    runner = ReplayRunner(known, fallback)
    results = runner.run(inputs, ReplayBuilder(known).build(inputs))
    assert [r.costs for r in results] == [(1e-3 * (k + 1),) for k in range(6)]
    assert fallback.measured == [] and runner.measured == [] and runner.replayed == 6


def test_unknown_configs_fall_back_once_then_replay(inputs):
    known = {config_index(inp): _ok(5.0) for inp in inputs[:2]}
    fallback = SimulatedRunner(_cost)
    builder = SimulatedBuilder()
    replay_builder = ReplayBuilder(known, builder, config_index)
    runner = ReplayRunner(known, fallback, config_index)
    builds = replay_builder.build(inputs[:4])
    assert builder.built == [2, 3] and builds[:2] == [REPLAYED, REPLAYED]
    first = runner.run(inputs[:4], builds)
    assert [r.costs for r in first[:2]] == [(5.0,), (5.0,)]
    assert [r.costs for r in first[2:]] == [(_cost(inputs[2].config),), (_cost(inputs[3].config),)]
    assert fallback.measured == [2, 3] and runner.measured == [2, 3] and runner.replayed == 2
    again = runner.run(inputs[:4], replay_builder.build(inputs[:4]))  # measured once: now replayed
    assert again == first and fallback.measured == [2, 3] and builder.built == [2, 3] and runner.replayed == 6


def test_without_remember_unknown_configs_are_measured_every_time(inputs):
    known: dict = {}
    fallback = SimulatedRunner(_cost)
    runner = ReplayRunner(known, fallback, remember=False)
    runner.run(inputs[:2], ReplayBuilder(known).build(inputs[:2]))
    runner.run(inputs[:2], ReplayBuilder(known).build(inputs[:2]))
    assert fallback.measured == [0, 1, 0, 1] and known == {} and runner.replayed == 0


def test_without_fallback_an_unknown_config_is_an_error(inputs):
    known = {result_key(inputs[0]): _ok(1e-3)}
    runner = ReplayRunner(known, threads=4)
    results = runner.run(inputs[:2], ReplayBuilder(known).build(inputs[:2]))
    assert results[0].ok and results[1].error is ErrorKind.RUNTIME_ERROR
    assert "no recorded result of config 1" in results[1].message
    assert result_key(inputs[1]) not in known and runner.threads == 4 and runner.device("cuda") == {}


def test_first_results_keep_each_configs_earliest(small_matmul, inputs):
    class Rec:
        def __init__(self, inp, res):
            self.input, self.result = inp, res

    later, earlier = _ok(2e-3, timestamp=20.0), _ok(1e-3, timestamp=10.0)
    first = first_results([Rec(inputs[0], later), Rec(inputs[0], earlier), Rec(inputs[1], later)])
    assert first == {result_key(inputs[0]): earlier, result_key(inputs[1]): later}
    assert first_results([Rec(inputs[0], later)], config_index) == {0: later}


def test_simulated_runner_fails_where_the_cost_is_none_and_passes_build_errors_on(inputs):
    runner = SimulatedRunner(lambda cfg: None if cfg.index == 1 else 1e-3)
    builds = SimulatedBuilder().build(inputs[:3])
    builds[2] = type(builds[2])(None, ErrorKind.COMPILE_ERROR, "ld: error", 0.5)
    ok, failed, not_built = runner.run(inputs[:3], builds)
    assert ok.costs == (1e-3,)
    assert failed.error is ErrorKind.RUNTIME_ERROR and failed.message == "simulated failure"
    assert not_built.error is ErrorKind.COMPILE_ERROR and not_built.build_s == 0.5
    assert runner.device("cuda") == {"gpu": "simulated"} and runner.device("llvm") == {}


def test_records_name_the_fallbacks_threads_device_and_timing(small_matmul):
    fallback = SimulatedRunner(_cost, threads=3, options=RunnerOptions(cache_flush=True))
    runner = ReplayRunner({}, fallback)
    assert runner.threads == 3 and runner.device("cuda") == {"gpu": "simulated"}
    assert runner_timing(runner, small_matmul) == "flushed"


def test_a_search_replayed_from_its_log_proposes_the_same_configs(tmp_path, small_matmul):
    """The same seed on a replay of a log: the same configs in the same order, with the recorded results, and
    nothing measured."""
    first_log, replay_log = tmp_path / "first.jsonl", tmp_path / "replay.jsonl"
    tune(small_matmul, trials=12, tuner="random", log=first_log, template=TINY, batch_size=4, seed=3,
         builder=SimulatedBuilder(), runner=SimulatedRunner(_cost), retime=0)
    recorded = load_records(first_log)
    known = first_results(recorded)
    runner = ReplayRunner(known)  # no fallback: a config the first run did not measure would fail
    builder = ReplayBuilder(known)
    tune(small_matmul, trials=12, tuner="random", log=replay_log, template=TINY, batch_size=4, seed=3,
         builder=builder, runner=runner, retime=0)
    replayed = load_records(replay_log)
    assert [r.input.config.index for r in replayed] == [r.input.config.index for r in recorded]
    assert [r.result.costs for r in replayed] == [r.result.costs for r in recorded]
    assert runner.measured == [] and runner.replayed == 12 and builder.builder.built == []
