"""`autotune plot`: tuning curves from logs (trials are first records, re-timings are not), and the PNG."""

import sys

import pytest

from autotune.cli import main
from autotune.errors import AutotuneError
from autotune.measure.types import ErrorKind, MeasureInput, MeasureResult
from autotune.plot import curves, draw, log_labels, model_curve, panels
from autotune.records import LogWriter, Record, load_records
from autotune.space import ConfigSpace, split_knob
from autotune.task import make_task

SPACE = ConfigSpace((split_knob("i", 64, 2),))


def _rec(task, index, cost, timestamp):
    error = None if cost else ErrorKind.RUNTIME_ERROR
    res = MeasureResult((cost,) if cost else None, error, "" if cost else "boom", 0.1, timestamp)
    return Record(MeasureInput(task, SPACE.get(index), "m:T"), res, "v1", 2, {"autotune": "0"})


def _write(path, rows):
    with LogWriter(path, fsync=False) as w:
        for row in rows:
            w.write(_rec(*row))
    return path


@pytest.fixture
def two_task_log(tmp_path, small_matmul):
    """matmul: 4 trials (one failed) and a re-timing of config 2; a second task (conv2d) with 2 trials."""
    conv = make_task("conv2d", "C=8,H=8,W=8,K=8,R=3,S=3,padding=1")
    s = small_matmul.flops * 1e-9  # seconds that make a 1-GFLOPS kernel
    rows = [(small_matmul, 1, s / 2, 100.0), (small_matmul, 2, s / 8, 101.0), (conv, 1, conv.flops * 1e-9, 101.5),
            (small_matmul, 3, None, 102.0), (conv, 2, conv.flops * 1e-9 / 3, 103.0),
            (small_matmul, 4, s / 4, 104.0), (small_matmul, 2, s / 9, 110.0)]
    return _write(tmp_path / "run.jsonl", rows), small_matmul, conv


def test_curves_follow_first_measurements(two_task_log):
    log, mm, conv = two_task_log
    by_key = {c.task_key: c for c in curves(load_records(log), "run")}
    c = by_key[mm.key]
    assert c.gflops == pytest.approx((2.0, 8.0, 0.0, 4.0))  # the re-timing of config 2 is not a trial
    assert c.best_so_far() == pytest.approx([2.0, 8.0, 8.0, 8.0])
    assert c.seconds == pytest.approx((0.0, 1.0, 2.0, 4.0))
    assert c.trials_to_reach(0.95) == 2 and c.trials_to_reach(0.2) == 1
    assert by_key[conv.key].gflops == pytest.approx((1.0, 3.0))
    assert by_key[conv.key].seconds == pytest.approx((1.5, 3.0))  # the log's clock


def test_model_curve_sums_calls_times_best_once_every_task_has_one(two_task_log):
    log, mm, conv = two_task_log
    s, c = mm.flops * 1e-9, conv.flops * 1e-9
    curve = model_curve(load_records(log), {mm.key: 1, conv.key: 2}, "run")
    assert curve.trials == (3, 4, 5, 6) and curve.seconds == pytest.approx((1.5, 2.0, 3.0, 4.0))
    assert curve.ms == pytest.approx([1e3 * (s / 8 + 2 * c)] * 2 + [1e3 * (s / 8 + 2 * c / 3)] * 2)
    assert not curve.missing
    other = make_task("dense", "batch=1,in_features=8,out_features=8")
    partial = model_curve(load_records(log), {mm.key: 1, other.key: 1}, "run")
    assert partial.ms == () and partial.missing == (other.key,)


@pytest.mark.slow  # captures a model and draws it; the curves: test_model_curve_sums_calls_times_best_...
def test_plot_model_estimates_a_tune_model_log(tmp_path, capsys):
    """A tune-model log (fake builds, simulated timings): the model panel's last estimate is the sum over the
    model's tasks of calls x best time."""
    from conftest import FakeBuilder, SimulatedRunner

    from autotune.model import extract_tasks, tune_model
    from autotune.records import by_task

    model, log, png = "tests/models.py:convnet", tmp_path / "m.jsonl", tmp_path / "m.png"
    fake = {"builder": FakeBuilder(), "runner": SimulatedRunner(lambda cfg: 1e-3 / (1 + cfg.index % 7))}
    tune_model(model, trials=40, log=log, tuner="random", round_trials=8, progress=lambda m: None, retime=0, **fake)
    best = {k: min(r.result.mean_s for r in recs) for k, recs in by_task(load_records(log)).items()}
    expected = 1e3 * sum(w * best[t.key] for t, w in extract_tasks(model))
    assert main(["plot", str(log), "--model", model, "-o", str(png)]) == 0
    out = capsys.readouterr().out
    assert f"{model}: tuned kernels" in out and f"{expected:.3f} ms after 40" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_log_labels_are_the_shortest_endings_that_differ():
    assert log_labels(["a/x.jsonl", "a/y.jsonl"]) == ["x", "y"]
    assert log_labels(["w/a/q/x.jsonl", "w/b/q/x.jsonl"]) == ["a/q/x", "b/q/x"]
    assert log_labels(["x.jsonl", "x.jsonl"]) == ["x.jsonl", "x.jsonl"]


def test_panels_keep_two_runs_apart(tmp_path, small_matmul):
    s = small_matmul.flops * 1e-9
    a = _write(tmp_path / "a" / "run.jsonl", [(small_matmul, 1, s, 0.0), (small_matmul, 2, s / 2, 1.0)])
    b = _write(tmp_path / "b" / "run.jsonl", [(small_matmul, 3, s / 3, 0.0)])
    found = curves(load_records(a), str(a)) + curves(load_records(b), str(b))
    (title, by_log), = panels(found, "seconds").items()
    assert title == str(small_matmul)
    assert by_log == {"a/run": [([0.0, 1.0], pytest.approx([1.0, 2.0]))], "b/run": [([0.0], pytest.approx([3.0]))]}


def test_plot_command_writes_png_and_summary(two_task_log, tmp_path, capsys):
    log, mm, conv = two_task_log
    png = tmp_path / "curves.png"
    assert main(["plot", str(log), "-o", str(png)]) == 0
    out = capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert f"{mm.key}: 4 trials, 1 errors, best 8.0 GFLOPS" in out and "95% of it after 2 trials (1 s)" in out
    assert f"{conv.key}: 2 trials, 0 errors, best 3.0 GFLOPS" in out

    assert main(["plot", str(log), "--task", "conv2d", "--x", "seconds", "-o", str(png)]) == 0
    out = capsys.readouterr().out
    assert conv.key in out and mm.key not in out


def test_plot_command_errors(two_task_log, tmp_path, capsys):
    log, _, _ = two_task_log
    assert main(["plot", str(log), "--task", "nosuchop", "-o", str(tmp_path / "p.png")]) == 2
    assert "no records of a task matching 'nosuchop'" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "missing.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("not json\n")
    assert main(["plot", str(empty), "-o", str(tmp_path / "p.png")]) == 2
    assert "no records in" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


def test_draw_without_matplotlib_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(AutotuneError, match=r"pip install 'autotune\[plot\]'"):
        draw({"t": {"a": [([1], [1.0])]}}, tmp_path / "p.png")
