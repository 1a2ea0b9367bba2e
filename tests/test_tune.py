import json
import math
import os
import subprocess
import sys

import pytest

from autotune.errors import AutotuneError
from autotune.records import best_record, load_records
from autotune.templates import resolve
from autotune.tune import tune

from conftest import TINY, UNHURRIED, FakeBuilder, SimulatedRunner


def _cost(cfg):  # fastest when both inner tiles are 8
    return 1e-3 * (1 + abs(math.log2(cfg["tile_i"][1]) - 3) + abs(math.log2(cfg["tile_j"][1]) - 3))


@pytest.mark.parametrize("tuner", ["random", "grid"])
def test_loop_measures_exactly_the_requested_trials(tmp_path, small_matmul, tuner):
    runner = SimulatedRunner(_cost)
    res = tune(small_matmul, trials=20, tuner=tuner, log=tmp_path / "l.jsonl", template=TINY, batch_size=6,
               builder=FakeBuilder(), runner=runner, retime=0)
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
    assert res.resumed == 10 and len(res.records) == 25
    assert not set(first.measured) & set(second.measured[:15])  # the new trials, before any re-timing
    assert len({r.input.config.index for r in load_records(log)}) == 25


def test_resume_uses_only_records_timed_the_same_way(tmp_path, small_matmul):
    """Warm and flushed times of a kernel do not compare: a run timing the other way leaves the log's records out
    (they stay in the log), and each run resumes its own."""
    from autotune.measure import RunnerOptions

    log = tmp_path / "l.jsonl"

    def runner(flush):
        r = SimulatedRunner(_cost)
        r.options = RunnerOptions(cache_flush=flush)
        return r

    tune(small_matmul, trials=6, tuner="grid", log=log, template=TINY, builder=FakeBuilder(), runner=runner(False),
         retime=0)
    flushed = runner(True)
    with pytest.warns(UserWarning, match="6 records .* were timed warm; this run times with the cache flushed"):
        res = tune(small_matmul, trials=4, tuner="grid", log=log, template=TINY, builder=FakeBuilder(),
                   runner=flushed, retime=0)
    assert res.resumed == 0 and flushed.measured == [0, 1, 2, 3]
    assert [r.timing for r in load_records(log)] == ["warm"] * 6 + ["flushed"] * 4
    warm = runner(False)
    with pytest.warns(UserWarning, match="4 records .* were timed with the cache flushed; this run times warm"):
        res = tune(small_matmul, trials=8, tuner="grid", log=log, template=TINY, builder=FakeBuilder(), runner=warm,
                   retime=0)
    assert res.resumed == 6 and warm.measured == [6, 7]


def _lucky(first_costs: dict[int, float], later: float = 1.2e-3, others: float = 3e-3):
    """Configs in `first_costs` time as given the first time and `later` after; every other config `others`."""
    seen: set[int] = set()

    def cost(cfg):
        lucky = cfg.index in first_costs and cfg.index not in seen
        seen.add(cfg.index)
        return first_costs[cfg.index] if lucky else later if cfg.index in first_costs else others
    return cost


def test_contenders_are_retimed_and_best_is_their_median(tmp_path, small_matmul):
    """Config 0 is timed lucky once (0.95 ms, then 1.2 ms), config 1 steadily at 1.0 ms: both are contenders
    (within 90% of the best first timing), each is timed twice more after the trials, and config 1, whose
    median is faster, is best. Configs first timed outside the 90% are never re-timed."""
    costs = {0: 0.95e-3, 1: 1.0e-3}
    steady = _lucky(costs)
    runner = SimulatedRunner(lambda cfg: 1.0e-3 if cfg.index == 1 else steady(cfg))
    log = tmp_path / "l.jsonl"
    res = tune(small_matmul, trials=12, tuner="grid", log=log, template=TINY, batch_size=4, builder=FakeBuilder(),
               runner=runner)
    assert len(res.records) == 12 and sorted(r.input.config.index for r in res.retimes) == [0, 0, 1, 1]
    assert runner.measured[:12] == list(range(12)) and sorted(runner.measured[12:]) == [0, 0, 1, 1]
    assert res.best.input.config.index == 1 and res.timings(res.best) == 3
    logged = [r.input.config.index for r in load_records(log)]
    assert logged == runner.measured  # re-timings are records of the same config in the log
    assert best_record(load_records(log)).input.config.index == 1  # `autotune best` / build agree


def test_retiming_resumes_and_is_not_repeated(tmp_path, small_matmul):
    log = tmp_path / "l.jsonl"
    first = SimulatedRunner(_lucky({0: 0.95e-3, 1: 1.0e-3}))
    tune(small_matmul, trials=8, tuner="grid", log=log, template=TINY, builder=FakeBuilder(), runner=first, retime=1)
    assert sorted(first.measured[8:]) == [0, 1]
    second = SimulatedRunner(_cost)
    res = tune(small_matmul, trials=8, tuner="grid", log=log, template=TINY, builder=FakeBuilder(), runner=second)
    assert sorted(second.measured) == [0, 1] and res.resumed == 8  # only the missing round, no new trial
    third = SimulatedRunner(_cost)
    res = tune(small_matmul, trials=8, tuner="grid", log=log, template=TINY, builder=FakeBuilder(), runner=third)
    assert third.measured == [] and len(res.retimes) == 4


def test_a_config_failing_a_retiming_is_never_best(tmp_path, small_matmul):
    calls = {0: 0}

    def cost(cfg):  # config 0 is fastest but fails when timed again
        if cfg.index == 0:
            calls[0] += 1
            return 1e-3 if calls[0] == 1 else None
        return 1.05e-3 if cfg.index == 1 else 5e-3
    res = tune(small_matmul, trials=6, tuner="grid", log=tmp_path / "l.jsonl", template=TINY,
               builder=FakeBuilder(), runner=SimulatedRunner(cost))
    assert res.best.input.config.index == 1 and res.errors == 0  # errors counts trials only


def test_space_exhaustion_and_early_stopping(tmp_path, small_matmul):
    size = len(resolve(TINY).define_space(small_matmul))
    res = tune(small_matmul, trials=size + 50, tuner="grid", log=tmp_path / "a.jsonl", template=TINY,
               builder=FakeBuilder(), runner=SimulatedRunner(_cost), retime=0)
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
    from autotune.operators import random_inputs

    res = tune(small_matmul, trials=6, tuner="random", log=tmp_path / "l.jsonl", template=TINY, batch_size=3,
               runner_options=UNHURRIED)
    assert len(res.records) == 6 and res.best is not None and res.best.gflops() > 0
    kernel = build_best(tmp_path / "l.jsonl", small_matmul)
    a, b = random_inputs(small_matmul.opdef, small_matmul.shape, "float32", seed=5)
    assert abs(kernel(a, b) - a @ b).max() < 1e-4
    assert kernel.config.index == res.best.input.config.index and min(kernel.time(a, b, repeat=2)) > 0
    # a log made by another version of the template: its indices name other configs, so nothing is built from it
    lines = (tmp_path / "l.jsonl").read_text().splitlines()
    stale = [json.loads(line) for line in lines]
    for d in stale:
        d["template"]["version"] = "an-older-one"
    (tmp_path / "old.jsonl").write_text("".join(json.dumps(d) + "\n" for d in stale))
    with pytest.raises(AutotuneError, match=f"{len(lines)} made by other versions of its template"):
        build_best(tmp_path / "old.jsonl", small_matmul)


@pytest.mark.slow  # a second real tuning run (dense's packed weight: test_search_spaces in the default tier)
def test_dense_weight_is_relaid_for_the_runner_and_the_kernel(tmp_path, worker_env):
    """Dense kernels take W packed ahead: the runner relays it outside the timed call (every trial passes
    the correctness check), and a built kernel takes W in its own layout."""
    from autotune import build_best, make_task
    from autotune.operators import random_inputs

    task = make_task("dense", {"batch": 16, "in_features": 64, "out_features": 96})
    res = tune(task, trials=4, tuner="random", log=tmp_path / "d.jsonl", batch_size=4, retime=0,
               runner_options=UNHURRIED)
    assert res.errors == 0 and all(r.input.config["pack_b"] == "pre" for r in res.records)
    kernel = build_best(tmp_path / "d.jsonl", task)
    x, w = random_inputs(task.opdef, task.shape, "float32", seed=5)
    assert abs(kernel(x, w) - x @ w.T).max() < 1e-4


_THREADS_SCRIPT = """
import sys, warnings
import numpy as np
import tvm
from autotune import make_task
from autotune.kernel import compile_config
from autotune.target import parse_target
cores = parse_target("llvm")["num-cores"]
if sys.argv[1] == "pool-started":
    tvm.runtime.num_threads()  # starts TVM's pool with its own default
task = make_task("matmul", "M=16,N=16,K=16", target={"kind": "llvm", "num-cores": 3})
a = np.ones((16, 16), "float32")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    kernel = compile_config(task, 0)
    assert abs(kernel(a, a) - 16).max() < 1e-5
assert parse_target("llvm")["num-cores"] == cores  # a started pool pins this thread to one core: read once
print(tvm.runtime.num_threads(), sum("TVM_NUM_THREADS=3" in str(w.message) for w in caught))
"""


@pytest.mark.slow  # a fresh Python process importing TVM for each case
@pytest.mark.parametrize("case, env", [
    ("fresh", None),  # the target's num-cores (at most the cores there are), not TVM's default
    ("fresh", "1"),  # the user's TVM_NUM_THREADS wins
    ("pool-started", None),  # too late to change: a warning names the fix
])
def test_kernels_run_on_the_targets_threads(case, env):
    full = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    if env:
        full["TVM_NUM_THREADS"] = env
    out = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT, case], env=full, capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    target_threads = min(3, os.cpu_count() or 1)
    tvm_default = max(1, (os.cpu_count() or 1) // 2)  # TVM's own choice on x86: half the logical CPUs
    if env:
        assert out == [env, "0"]
    elif case == "fresh":
        assert out == [str(target_threads), "0"]
    elif tvm_default != target_threads:
        assert out == [str(tvm_default), "1"]
