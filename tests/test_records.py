import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import AutotuneError
from autotune.measure.types import ErrorKind, MeasureInput, MeasureResult
from autotune.records import (LogFullError, LogReadStats, LogWriter, Record, best_record, iter_records, load_records,
                              write_log)
from autotune.space import ConfigSpace, split_knob


def _rec(task, index, cost=None, error=None):
    space = ConfigSpace((split_knob("i", 64, 2),))
    res = MeasureResult((cost,) if cost is not None else None, error, "boom" if error else "", 0.1, 1.0)
    return Record(MeasureInput(task, space.get(index), "m:T"), res, "v1", 2, {"autotune": "0"})


def test_round_trip(tmp_path, small_matmul):
    log = tmp_path / "a.jsonl"
    with LogWriter(log) as w:
        w.write(_rec(small_matmul, 1, 1e-3))
        w.write(_rec(small_matmul, 2, error=ErrorKind.WRONG_ANSWER))
    recs = load_records(log)
    assert [r.input.config.index for r in recs] == [1, 2]
    assert recs[0].result.costs == (1e-3,) and recs[1].result.error is ErrorKind.WRONG_ANSWER
    assert recs[0].task == small_matmul and recs[0].threads == 2
    d = json.loads(log.read_text().splitlines()[0])
    assert d["task"]["target"]["mcpu"] and d["versions"] and d["template"]["version"] == "v1"
    assert d["timing"] == "warm" == recs[0].timing


def test_timing_is_kept_and_older_lines_without_it_read_as_warm(tmp_path, small_matmul):
    import dataclasses

    log = tmp_path / "a.jsonl"
    with LogWriter(log) as w:
        w.write(dataclasses.replace(_rec(small_matmul, 1, 1e-3), timing="flushed"))
    line = json.loads(log.read_text())
    older = {k: v for k, v in line.items() if k != "timing"}
    log.write_text("\n".join(json.dumps(d) for d in (line, older, {**line, "timing": "lukewarm"})) + "\n")
    stats = LogReadStats()
    with pytest.warns(UserWarning, match="skipped 1 corrupt record"):
        recs = load_records(log, stats)
    assert [r.timing for r in recs] == ["flushed", "warm"] and stats.skipped == 1


def test_corrupt_and_truncated_lines_are_skipped_and_counted(tmp_path, small_matmul):
    log = tmp_path / "a.jsonl"
    with LogWriter(log) as w:
        w.write(_rec(small_matmul, 1, 1e-3))
    with log.open("a") as fh:
        fh.write("not json\n{\"task\": 1}\n")
        fh.write(_rec(small_matmul, 3, 2e-3).to_json()[:40])  # killed mid-write: no newline
    stats = LogReadStats()
    with pytest.warns(UserWarning, match=r"a.jsonl: skipped 3 corrupt records \(first at line 2: ") as caught:
        recs = load_records(log, stats)
    assert len(recs) == 1 and stats.skipped == 3 and len(caught) == 1  # one warning per log, not per line
    with LogWriter(log) as w:  # appending after a partial line must not glue onto it
        w.write(_rec(small_matmul, 4, 5e-4))
    stats = LogReadStats()
    with pytest.warns(UserWarning):
        recs = load_records(log, stats)
    assert [r.input.config.index for r in recs] == [1, 4] and stats.skipped == 3


def test_best_scores_a_config_by_the_median_of_its_timings(small_matmul):
    lucky = [_rec(small_matmul, 1, 0.9e-3), _rec(small_matmul, 1, 1.3e-3), _rec(small_matmul, 1, 1.2e-3)]
    steady = [_rec(small_matmul, 2, 1.0e-3), _rec(small_matmul, 2, 1.1e-3)]
    best = best_record(lucky + steady)
    assert best.input.config.index == 2 and best.result.mean_s == 1.1e-3  # the slower middle of an even count
    assert best_record(lucky + steady[:1]).result.mean_s == 1.0e-3
    assert best_record(lucky + [_rec(small_matmul, 2, error=ErrorKind.RUN_TIMEOUT)] + steady) is lucky[2]


def test_best_is_a_contender_even_when_its_retimings_ran_slow(small_matmul):
    """Configs 1 and 2 were first timed fastest (the contenders) and re-timed while the machine ran at half speed;
    config 3, first timed outside 90% of the best, was never re-timed: its one timing, taken at another moment,
    does not outrank them. Before the re-timings it is not best either; a faster newcomer is (one timing)."""
    def timed(index, *ms):
        return [_rec(small_matmul, index, t * 1e-3) for t in ms]

    trials = timed(1, 0.44) + timed(2, 0.46) + timed(3, 0.50)
    retimes = timed(1, 0.64, 0.62) + timed(2, 0.89, 0.93)
    best = best_record(trials + retimes)
    assert best.input.config.index == 1 and best.result.mean_s == 0.62e-3
    assert best_record(trials).input.config.index == 1
    assert best_record(trials + retimes + timed(4, 0.40)).input.config.index == 4  # a new best trial in a resume


def test_best_ignores_errors(small_matmul):
    recs = [_rec(small_matmul, 1, 2e-3), _rec(small_matmul, 2, error=ErrorKind.WRONG_ANSWER), _rec(small_matmul, 3, 1e-3)]
    assert best_record(recs).input.config.index == 3
    assert best_record(recs[1:2]) is None
    with pytest.raises(ValueError):
        MeasureResult((1.0,), ErrorKind.RUN_TIMEOUT, "", 0, 0)


def test_a_second_writer_of_a_log_is_refused_while_the_first_writes(tmp_path, small_matmul):
    log = tmp_path / "a.jsonl"
    with LogWriter(log) as w:
        w.write(_rec(small_matmul, 1, 1e-3))
        with pytest.raises(AutotuneError, match=r"a.jsonl is in use by another autotune run"):
            LogWriter(log)
        assert len(load_records(log)) == 1  # readers do not lock
    with LogWriter(log) as w:  # the lock went with the first writer
        w.write(_rec(small_matmul, 2, 1e-3))
    assert len(load_records(log)) == 2


def test_a_full_disk_is_one_error_and_leaves_the_earlier_records_whole(tmp_path, small_matmul, monkeypatch):
    log = tmp_path / "a.jsonl"
    w = LogWriter(log)
    w.write(_rec(small_matmul, 1, 1e-3))

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(LogFullError, match=r"the disk is full: every measurement before this one is in the log .*"
                                           r"a.jsonl; free some space and re-run the same command to resume"):
        w.write(_rec(small_matmul, 2, 1e-3))
    w.close()  # nothing left to flush: no second error
    monkeypatch.undo()
    assert log.read_text().count("\n") == 1 and [r.input.config.index for r in load_records(log)] == [1]


@pytest.mark.parametrize("kind", ["directory", "device", "fifo"])
def test_a_log_that_is_not_a_regular_file_is_refused_before_reading_it(tmp_path, kind):
    path = {"directory": tmp_path, "device": Path("/dev/zero"), "fifo": tmp_path / "fifo"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(AutotuneError, match="is a directory|is not a regular file"):
        LogWriter(path)
    with pytest.raises(AutotuneError, match="is a directory|is not a regular file"):
        list(iter_records(path))


def test_a_byte_order_mark_at_the_start_of_a_log_is_not_part_of_its_first_record(tmp_path, small_matmul):
    log = tmp_path / "a.jsonl"
    log.write_text("\ufeff" + _rec(small_matmul, 1, 1e-3).to_json() + "\n", encoding="utf-8")
    assert [r.input.config.index for r in load_records(log)] == [1]


def test_write_log_replaces_regular_files_follows_symlinks_and_refuses_the_rest(tmp_path, small_matmul):
    records = [_rec(small_matmul, 1, 1e-3)]
    real = tmp_path / "real.jsonl"
    real.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    write_log(link, records)
    assert link.is_symlink() and [r.input.config.index for r in load_records(real)] == [1]
    for bad, why in [(tmp_path, "is a directory"), ("/dev/null", "is not a regular file"),
                     (real / "x.jsonl", "is not a folder")]:
        with pytest.raises(AutotuneError, match=why):
            write_log(bad, records)
    assert Path("/dev/null").is_char_device()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.jsonl", "real.jsonl"]  # no temporary left
    write_log(tmp_path / "new" / "folder" / "best.jsonl", records)  # a new folder is made
    assert len(load_records(tmp_path / "new" / "folder" / "best.jsonl")) == 1


def test_write_log_removes_the_temporaries_of_killed_writers(tmp_path, small_matmul):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".out.jsonl.{int(dead.stdout)}.tmp"  # a `best -o out.jsonl` killed mid-write
    stale.write_text("partial")
    alive = tmp_path / f".out.jsonl.{os.getppid()}.tmp"  # one of a writer still running stays
    alive.write_text("partial")
    write_log(tmp_path / "out.jsonl", [_rec(small_matmul, 1, 1e-3)])
    assert not stale.exists() and alive.exists() and len(load_records(tmp_path / "out.jsonl")) == 1
