"""The records database: which records count, how the best config is chosen, commits; and that every reader
(`autotune best -o`, `build`) chooses the same configs from a log that mixes template versions and timings."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from autotune import files
from autotune.cli import main
from autotune.database import TuningDatabase
from autotune.errors import AutotuneError
from autotune.measure.types import ErrorKind, MeasureInput, MeasureResult
from autotune.operators import default_template_ref
from autotune.records import Record, RetimePolicy, iter_records
from autotune.task import make_task
from autotune.templates import resolve

REF = "search_spaces.matmul:MATMUL_CPU"
TASK = make_task("matmul", {"M": 64, "N": 48, "K": 32})
STALE = "0123456789ab"  # a version of the template no code has


def _rec(task, ref, index, seconds, version=None, timing="warm", stamp=0.0, error=None):
    template = resolve(ref)
    space = template.define_space(task)
    result = (MeasureResult(None, error, "failed", 0.0, stamp) if error else
              MeasureResult((seconds,), None, "", 0.0, stamp))
    return Record(MeasureInput(task, space.get(index), ref), result, version or template.version, 1, {}, timing)


def test_best_skips_other_template_versions_and_counts_them():
    db = TuningDatabase([_rec(TASK, REF, 1, 2e-5), _rec(TASK, REF, 2, 1e-6, version=STALE), _rec(TASK, REF, 3, 3e-5)])
    assert db.best(TASK).input.config.index == 1
    assert db.stale(TASK) == 1 and len(db.records(TASK)) == 3 and len(db.records(TASK, current=True)) == 2


def test_a_template_that_does_not_import_is_stale_not_an_error():
    rec = _rec(TASK, REF, 1, 1e-5)
    gone = Record(MeasureInput(TASK, rec.input.config, "no_such_module:T"), rec.result, "v", 1, {})
    db = TuningDatabase([gone, rec])
    assert db.best(TASK) is rec and db.stale(TASK) == 1


def test_warm_and_flushed_timings_are_never_compared():
    """A task timed both ways is scored by the way of its latest record."""
    older_flushed = _rec(TASK, REF, 1, 1e-6, timing="flushed", stamp=1.0)
    warm = [_rec(TASK, REF, 2, 2e-5, stamp=2.0), _rec(TASK, REF, 3, 3e-5, stamp=3.0)]
    assert TuningDatabase([older_flushed, *warm]).best(TASK).input.config.index == 2
    newer_flushed = _rec(TASK, REF, 4, 9e-5, timing="flushed", stamp=4.0)
    assert TuningDatabase([older_flushed, *warm, newer_flushed]).best(TASK).input.config.index == 1


def test_best_is_the_median_of_the_contenders_timings_and_failures_never_count():
    first = [_rec(TASK, REF, 1, 1.00e-5), _rec(TASK, REF, 2, 1.05e-5), _rec(TASK, REF, 5, 0.5e-5)]
    failed = _rec(TASK, REF, 5, 0.0, error=ErrorKind.WRONG_ANSWER)  # config 5 once gave a wrong answer
    retimes = [_rec(TASK, REF, 1, 1.3e-5), _rec(TASK, REF, 1, 1.2e-5), _rec(TASK, REF, 2, 1.0e-5),
               _rec(TASK, REF, 2, 1.1e-5)]
    db = TuningDatabase(first + [failed] + retimes)
    best = db.best(TASK)
    assert best.input.config.index == 2 and best.result.mean_s == 1.05e-5  # median of 1.05, 1.0, 1.1
    assert [r.result.mean_s for r in db.timings(best)] == [1.05e-5, 1.0e-5, 1.1e-5]
    assert [r.input.config.index for r in db.top_k(TASK, 5)] == [2, 1]  # never config 5
    assert db.top_k(TASK, 1) == [best] and db.top_k(TASK, 0) == []


def test_the_policy_decides_the_contenders():
    recs = [_rec(TASK, REF, 1, 1.0e-5), _rec(TASK, REF, 2, 1.2e-5), _rec(TASK, REF, 1, 2.0e-5),
            _rec(TASK, REF, 1, 2.0e-5), _rec(TASK, REF, 2, 1.2e-5)]
    assert TuningDatabase(recs).best(TASK).input.config.index == 1  # 2 was first timed outside 90% of 1
    assert TuningDatabase(recs, policy=RetimePolicy(share=0.8)).best(TASK).input.config.index == 2


@pytest.mark.parametrize("n,want", [(3, 2), (5, 2), (12, 3), (20, 5), (40, 8)])
def test_a_task_has_one_contender_per_four_trials_at_least_two_at_most_eight(n, want):
    from autotune.records import contenders

    trials = [_rec(TASK, REF, i, 1e-5 * (1 + i / 100)) for i in range(n)]  # every one within 90% of the best
    assert [r.input.config.index for r in contenders(trials)] == list(range(want))


def test_commit_appends_to_the_log_and_answers_at_once(tmp_path):
    log = tmp_path / "t.jsonl"
    with TuningDatabase(log=log) as db:
        db.commit([_rec(TASK, REF, 1, 2e-5)])
        assert db.best(TASK).input.config.index == 1
        db.commit([_rec(TASK, REF, 2, 1e-5)])
    assert [r.input.config.index for r in iter_records(log)] == [1, 2]
    again = TuningDatabase.open([log, log], log=log)  # the log named twice is read once
    assert len(again) == 2 and again.best(TASK).input.config.index == 2


def test_resumable_splits_trials_and_retimes_of_one_template_version(tmp_path):
    template = resolve(REF)
    recs = [_rec(TASK, REF, 1, 2e-5), _rec(TASK, REF, 2, 1e-5), _rec(TASK, REF, 2, 1e-5),
            _rec(TASK, REF, 3, 1e-5, version=STALE), _rec(TASK, REF, 4, 1e-5, timing="flushed")]
    with pytest.warns(UserWarning, match="1 records of .* were timed with the cache flushed"):
        trials, retimes = TuningDatabase(recs).resumable(TASK, REF, template.version, "warm")
    assert [r.input.config.index for r in trials] == [1, 2] and [r.input.config.index for r in retimes] == [2]


def test_transfer_takes_other_tasks_of_the_target_kind_only():
    other = make_task("matmul", {"M": 32, "N": 48, "K": 32})
    cuda = make_task("matmul", {"M": 32, "N": 48, "K": 32}, target="cuda")
    recs = [_rec(TASK, REF, 1, 1e-5), _rec(other, REF, 2, 1e-5),
            _rec(cuda, "search_spaces.cuda_gemm:MATMUL_CUDA", 2, 1e-5)]
    assert [r.task for r in TuningDatabase(recs).transfer(TASK)] == [other]


def test_best_output_holds_exactly_the_configs_build_applies(tmp_path, capsys):
    """A log mixing template versions and timings: `autotune best -o` writes the configs `build` applies (from
    the log, and from its output)."""
    torch = pytest.importorskip("torch")
    from autotune.model import build_model, capture, extract_tasks
    from tests.models import convnet

    warnings.simplefilter("ignore")
    model, inputs = convnet()
    captured = capture(model, inputs)
    log, out = tmp_path / "mixed.jsonl", tmp_path / "best.jsonl"
    expected = {}
    records = []
    for n, (task, _) in enumerate(extract_tasks(captured)):
        ref = default_template_ref(task.op, task.target_kind)
        template = resolve(ref)
        space = template.define_space(task)
        ok = [i for i in range(0, len(space), max(1, len(space) // 40)) if _applies(template, task, space.get(i))]
        a, b, c, d = ok[:4]
        expected[task.key] = c
        records += [_rec(task, ref, a, 3e-5, stamp=n + 0.1),
                    _rec(task, ref, b, 1e-7, version=STALE, stamp=n + 0.2),  # fastest, of another version
                    _rec(task, ref, d, 1e-7, timing="flushed", stamp=n + 0.3),  # timed the other way, earlier
                    _rec(task, ref, c, 2e-5, stamp=n + 0.4)]
    with log.open("w") as fh:
        fh.writelines(r.to_json() + "\n" for r in records)
    assert main(["best", str(log), "-o", str(out), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {row["task_key"]: row["config"]["index"] for row in rows} == expected
    written = {r.task.key: r.input.config.index for r in iter_records(out)}
    assert written == expected
    for logs in ([log], [out]):
        built = build_model(captured, logs=logs)
        assert {k.task.key: k.config_index for k in built.report.kernels if k.tuned} == expected
    with torch.no_grad():
        assert abs(built(*inputs) - model(*inputs).numpy()).max() < 1e-4


def _applies(template, task, config) -> bool:
    try:
        template.kernel(task, config)
    except Exception:  # noqa: BLE001 - a config the template rejects for this shape
        return False
    return True


@pytest.mark.parametrize("kind", ["device", "directory", "fifo"])
def test_a_log_to_write_that_is_not_a_regular_file_is_refused_before_any_read(tmp_path, kind):
    path = {"device": "/dev/zero", "directory": str(tmp_path), "fifo": str(tmp_path / "fifo")}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(AutotuneError, match=r"is a directory|is not a regular file"):
        TuningDatabase(log=path)  # /dev/zero read to the end, or a fifo read, would never return


def test_an_unwritable_log_is_one_error_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_read_only", lambda folder: True)
    monkeypatch.setattr(files.os, "access", lambda path, mode: False)
    with pytest.raises(AutotuneError, match=r"cannot write log .*run.jsonl: read-only file system; name a writable"):
        TuningDatabase(log=tmp_path / "run.jsonl")


def test_the_log_is_locked_while_a_database_writes_it_and_an_unused_new_log_is_not_left(tmp_path):
    log = tmp_path / "run.jsonl"
    with TuningDatabase(log=log) as db:
        with pytest.raises(AutotuneError, match=r"run.jsonl is in use by another autotune run"):
            TuningDatabase(log=log)
        assert len(TuningDatabase.open([log])) == 0  # reading needs no lock
    assert not log.exists()  # nothing committed: no empty log
    with TuningDatabase(log=log) as db:
        db.commit([_rec(TASK, REF, 1, 2e-5)])
    assert len(TuningDatabase.open([log])) == 1


@pytest.mark.parametrize("case", ["symlink", "device", "directory", "file as folder", "read-only folder"])
def test_best_output_follows_a_symlink_and_refuses_what_is_not_a_file_in_one_line(case, tmp_path, capsys,
                                                                                  monkeypatch):
    log = tmp_path / "run.jsonl"
    log.write_text(_rec(TASK, REF, 1, 2e-5).to_json() + "\n")
    real, out = tmp_path / "real.jsonl", tmp_path / "best.jsonl"
    if case == "symlink":
        out.symlink_to(real)
        assert main(["best", str(log), "-o", str(out)]) == 0
        assert out.is_symlink() and len(list(iter_records(real))) == 1
        return
    if case == "read-only folder":
        monkeypatch.setattr(files, "_read_only", lambda folder: True)
        monkeypatch.setattr(files.os, "access", lambda path, mode: False)
    target = {"device": "/dev/null", "directory": str(tmp_path), "file as folder": str(log / "b.jsonl"),
              "read-only folder": str(out)}[case]
    assert main(["best", str(log), "-o", target]) == 2
    out_text, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("autotune: error: ") and not out_text
    assert {"device": "is not a regular file", "directory": "is a directory", "file as folder": "is not a folder",
            "read-only folder": "read-only file system"}[case] in err
    assert Path("/dev/null").is_char_device() and sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]
