"""Real builder and runner processes on deliberately broken kernels: every failure is one result."""

import time

from autotune.measure import LocalBuilder, LocalRunner, RunnerOptions
from autotune.measure_types import ErrorKind, MeasureInput
from autotune.task import make_task
from autotune.workers import Worker
from autotune import measure_worker
from search_spaces import resolve

from conftest import BUGGY


def test_each_failure_costs_one_result_and_the_run_goes_on(worker_env):
    task = make_task("matmul", "M=32,N=32,K=32")
    space = resolve(BUGGY).define_space(task)
    modes = ["ok", "wrong", "hang", "crash", "invalid", "ok"]
    index = {m: next(i for i in range(len(space)) if space.get(i)["mode"] == m) for m in modes}
    inputs = [MeasureInput(task, space.get(index[m] + (1 if j == 5 else 0)), BUGGY) for j, m in enumerate(modes)]
    builder, runner = LocalBuilder(workers=2), LocalRunner(RunnerOptions(timeout=4, min_repeat_ms=5, threads=1))
    try:
        t0 = time.time()
        results = runner.run(inputs, builder.build(inputs))
        elapsed = time.time() - t0
    finally:
        builder.close()
        runner.close()
    kinds = [r.error for r in results]
    assert kinds == [None, ErrorKind.WRONG_ANSWER, ErrorKind.RUN_TIMEOUT, ErrorKind.RUNTIME_ERROR,
                     ErrorKind.INVALID_CONFIG, None]
    assert "exit code -11" in results[3].message  # SIGSEGV in the runner process
    assert results[0].costs and all(c > 0 for c in results[0].costs) and results[5].costs
    assert elapsed < 60


def test_build_timeout_is_recorded(worker_env):
    task = make_task("matmul", "M=32,N=32,K=32")
    space = resolve(BUGGY).define_space(task)
    builder = LocalBuilder(workers=1, timeout=0.01)
    try:
        res = builder.build([MeasureInput(task, space.get(0), BUGGY)])
    finally:
        builder.close()
    assert res[0].error is ErrorKind.COMPILE_TIMEOUT


def test_runner_threads_are_set_explicitly():
    for n in (1, 2):
        w = Worker({"TVM_NUM_THREADS": str(n)})
        try:
            assert w.call(measure_worker.runtime_threads, (), 60).value == n
        finally:
            w.close()
