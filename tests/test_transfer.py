"""Which records of other tasks pre-train a new task's model."""

from autotune.measure.types import MeasureInput, MeasureResult
from autotune.records import LogWriter, Record
from autotune.space import ConfigSpace, split_knob
from autotune.task import make_task
from autotune.database import TuningDatabase
from autotune.transfer import transfer_records, transfer_summary

SPACE = ConfigSpace((split_knob("i", 64, 2),))
MM = make_task("matmul", {"M": 64, "N": 64, "K": 64}, target="llvm")
MM2 = make_task("matmul", {"M": 32, "N": 64, "K": 128}, target="llvm")
CONV = make_task("conv2d", {"N": 1, "C": 8, "H": 8, "W": 8, "K": 8, "R": 3, "S": 3}, target="llvm")
DENSE = make_task("dense", {"batch": 4, "in_features": 16, "out_features": 32}, target="llvm")


def _rec(task, index, timestamp):
    res = MeasureResult((1e-3,), None, "", 0.1, timestamp)
    return Record(MeasureInput(task, SPACE.get(index), "m:T"), res, "v1", 2, {})


def test_same_operator_records_are_kept_first_then_the_most_recent_others():
    old_same = [_rec(MM2, i, 1.0 + i) for i in range(3)]
    others = [_rec(CONV, i, 100.0 + i) for i in range(4)] + [_rec(DENSE, i, 50.0 + i) for i in range(4)]
    own = [_rec(MM, i, 200.0) for i in range(2)]
    def select_transfer(task, records, limit):
        return TuningDatabase(records).transfer(task, limit)

    picked = select_transfer(MM, others + old_same + own, limit=6)
    assert picked[:3] == old_same  # never crowded out by newer records of other operators
    assert [(r.task.op, r.result.timestamp) for r in picked[3:]] == [("conv2d", 101.0), ("conv2d", 102.0),
                                                                     ("conv2d", 103.0)]
    assert all(r.task.key != MM.key for r in select_transfer(MM, own + others, limit=100))
    assert select_transfer(MM, old_same, limit=2) == old_same[1:]
    assert select_transfer(MM, others, limit=0) == []


def test_folder_default_reads_the_other_logs_beside_the_log(tmp_path):
    with LogWriter(tmp_path / "conv.jsonl") as w:
        w.write(_rec(CONV, 1, 5.0))
    with LogWriter(tmp_path / "mm.jsonl") as w:
        w.write(_rec(MM2, 2, 1.0))
        w.write(_rec(MM, 3, 2.0))  # the task itself: never its own teacher
    with LogWriter(tmp_path / "this.jsonl") as w:
        w.write(_rec(DENSE, 4, 9.0))  # the run's own log is not read for transfer
    picked = transfer_records(MM, tmp_path / "this.jsonl", None)
    assert [(r.task.key, r.input.config.index) for r in picked] == [(MM2.key, 2), (CONV.key, 1)]
    assert transfer_records(MM, tmp_path / "this.jsonl", []) == []
    named = transfer_records(MM, tmp_path / "this.jsonl", [str(tmp_path / "this.jsonl")])
    assert [r.task.key for r in named] == [DENSE.key]


def test_summary_names_the_records_tasks_and_those_of_the_same_operator():
    records = [_rec(MM2, 1, 1.0), _rec(MM2, 2, 2.0), _rec(CONV, 1, 3.0)]
    assert transfer_summary(MM, records) == "transfer: 3 records of 2 other tasks, 1 of them matmul"
    assert transfer_summary(MM, []) == "transfer: none (no records of other tasks)"
