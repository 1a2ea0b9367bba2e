"""Real builder and runner processes on deliberately broken kernels: every failure is one result."""

import time
from pathlib import Path

import pytest

from autotune.measure import LocalBuilder, LocalRunner, RunnerOptions
from autotune.measure.types import ErrorKind, MeasureInput
from autotune.task import make_task
from autotune.measure.pool import Worker, describe_exit
from autotune.measure import worker as measure_worker
from autotune.templates import resolve

from conftest import BUGGY, UNHURRIED

RUN_TIMEOUT = 5  # the hanging kernel's deadline; an ok kernel's run takes 0.1 s with two busy loops on two cores


def test_each_failure_costs_one_result_and_the_run_goes_on(worker_env):
    task = make_task("matmul", "M=32,N=32,K=32")
    space = resolve(BUGGY).define_space(task)
    modes = ["ok", "wrong", "hang", "crash", "invalid", "ok"]
    index = {m: next(i for i in range(len(space)) if space.get(i)["mode"] == m) for m in modes}
    inputs = [MeasureInput(task, space.get(index[m] + (1 if j == 5 else 0)), BUGGY) for j, m in enumerate(modes)]
    builder = LocalBuilder(workers=2)
    runner = LocalRunner(RunnerOptions(timeout=RUN_TIMEOUT, min_repeat_ms=5, threads=1))
    try:
        builds = builder.build(inputs)
        t0 = time.time()
        results = runner.run(inputs, builds)
        elapsed = time.time() - t0
    finally:
        builder.close()
        runner.close()
    kinds = [r.error for r in results]
    assert kinds == [None, ErrorKind.WRONG_ANSWER, ErrorKind.RUN_TIMEOUT, ErrorKind.RUNTIME_ERROR,
                     ErrorKind.INVALID_CONFIG, None]
    assert "exit code -11, SIGSEGV" in results[3].message  # a crash in the runner process
    assert results[0].costs and all(c > 0 for c in results[0].costs) and results[5].costs
    assert f"no answer after {RUN_TIMEOUT} s" in results[2].message  # the hang cost its deadline, no more
    assert elapsed < 120  # and the run went on: one deadline and three worker starts, on a busy machine too


def test_a_killed_worker_is_named_by_its_signal():
    assert describe_exit(-4) == ("exit code -4, SIGILL: an instruction this CPU does not have: compile for this "
                                 "machine (the target's mcpu / mattr)")
    assert describe_exit(-11) == "exit code -11, SIGSEGV" and describe_exit(3) == "exit code 3"
    assert describe_exit(None) == "exit code None" and describe_exit(-999) == "exit code -999"


def test_build_timeout_is_recorded(worker_env):
    task = make_task("matmul", "M=32,N=32,K=32")
    space = resolve(BUGGY).define_space(task)
    builder = LocalBuilder(workers=1, timeout=0.01)
    try:
        res = builder.build([MeasureInput(task, space.get(0), BUGGY)])
    finally:
        builder.close()
    assert res[0].error is ErrorKind.COMPILE_TIMEOUT


@pytest.mark.slow  # a fresh builder worker importing TVM
def test_builder_keeps_only_the_libraries_of_the_batch_being_run(worker_env):
    task = make_task("matmul", "M=32,N=32,K=32")
    space = resolve(BUGGY).define_space(task)
    ok = [MeasureInput(task, space.get(i), BUGGY) for i in range(len(space)) if space.get(i)["mode"] == "ok"][:2]
    builder = LocalBuilder(workers=1)
    try:
        [first] = builder.build(ok[:1])
        assert Path(first.artifact).exists()
        [second] = builder.build(ok[1:])
        assert not Path(first.artifact).exists() and Path(second.artifact).exists()
    finally:
        builder.close()
    assert not Path(second.artifact).parent.exists()


@pytest.mark.slow  # two fresh workers importing TVM
def test_runner_threads_are_set_explicitly():
    for n in (1, 2):
        w = Worker({"TVM_NUM_THREADS": str(n)})
        try:
            assert w.call(measure_worker.runtime_threads, (), 60).value == n
        finally:
            w.close()


def test_a_worker_imports_tvm_without_torch_and_can_import_torch_after():
    pytest.importorskip("torch")
    from tests.worker_probe import imported, torch_version

    w = Worker()
    try:
        assert w.call(imported, ("tvm",), 60).value is True  # TVM comes with the first call's imports
        assert w.call(imported, ("torch",), 60).value is False
        assert w.call(torch_version, (), 60).value.startswith("2.")
    finally:
        w.close()


@pytest.mark.slow  # two worker starts of 3 s imports
def test_call_deadline_leaves_out_worker_start_and_imports(worker_env):
    from tests.slow_import import quick  # 3 s of imports in a fresh worker, then an instant call

    w = Worker()
    try:
        for _ in range(2):  # also after the worker was replaced
            t0 = time.time()
            result = w.call(quick, (), 2.0)  # an instant call; the imports before it take 3 s
            assert result.status == "ok" and result.value == 42, result
            assert time.time() - t0 > 2.9  # the imports ran in the worker, before the call
            w.close()
    finally:
        w.close()


class _FakeTimer:
    """Stands in for a TVM module: records the time_evaluator arguments, returns calls of 1, 2, 3, ... ms."""

    def __init__(self):
        self.calls = []

    def time_evaluator(self, name, dev, number, repeat, min_repeat_ms=0, f_preproc=""):
        self.calls.append({"number": number, "repeat": repeat, "min_repeat_ms": min_repeat_ms, "f_preproc": f_preproc})

        class Result:
            results = [1e-3 * (k + 1) for k in range(repeat)]

        return lambda *args: Result()


def test_flushed_timing_flushes_before_every_call_and_groups_calls_into_repeats():
    """TVM's evaluator flushes once per repeat: a flushed timing must make each repeat one call, and average
    enough of them (min_repeat_ms worth) into each value it returns."""
    from autotune.measure.timing import time_kernel

    warm = _FakeTimer()
    assert time_kernel(warm, None, [], repeat=3, min_repeat_ms=100) == [1e-3, 2e-3, 3e-3]
    assert warm.calls == [{"number": 1, "repeat": 3, "min_repeat_ms": 100, "f_preproc": ""}]

    cold = _FakeTimer()
    values = time_kernel(cold, None, [], repeat=3, min_repeat_ms=4, cache_flush=True)
    estimate, timed = cold.calls  # one call (1 ms) to size the groups: 4 calls make 4 ms
    assert estimate["repeat"] == 1 and timed == {"number": 1, "repeat": 12, "min_repeat_ms": 0,
                                                 "f_preproc": "cache_flush_cpu_non_first_arg"}
    assert values == [2.5e-3, 6.5e-3, 10.5e-3]  # means of 1-4, 5-8, 9-12 ms


@pytest.mark.slow  # a real build and run; the flushed grouping is tested on a fake timer above
def test_flushed_timing_of_a_real_kernel(worker_env):
    task = make_task("matmul", "M=64,N=64,K=64")
    template = resolve("search_spaces.matmul:MATMUL_CPU")
    inp = MeasureInput(task, template.define_space(task).get(0), "search_spaces.matmul:MATMUL_CPU")
    options = RunnerOptions(threads=UNHURRIED.threads, timeout=UNHURRIED.timeout, min_repeat_ms=5, repeat=2,
                            cache_flush=True)
    builder, runner = LocalBuilder(workers=1), LocalRunner(options)
    try:
        [res] = runner.run([inp], builder.build([inp]))
    finally:
        builder.close()
        runner.close()
    assert res.ok and len(res.costs) == 2 and all(c > 0 for c in res.costs)
