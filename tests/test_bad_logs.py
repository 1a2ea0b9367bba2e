"""Bad records in a log: each one that breaks the record schema is skipped and counted like a corrupt line, and
`best` (text and --json), `show`, resume and `build` all use the log's other records as if it were not there."""

from __future__ import annotations

import json
import math
import sys

import pytest

from autotune.cli import main
from autotune.database import TuningDatabase
from autotune.measure.types import MeasureInput, MeasureResult
from autotune.model.build import kernel_for
from autotune.records import Record
from autotune.task import make_task
from autotune.templates import resolve

REF = "search_spaces.matmul:MATMUL_CPU"
TASK = make_task("matmul", {"M": 64, "N": 48, "K": 32})


def _line(index: int, seconds: float) -> dict:
    template = resolve(REF)
    cfg = template.define_space(TASK).get(index)
    rec = Record(MeasureInput(TASK, cfg, REF), MeasureResult((seconds,), None, "", 0.0, 1.0), template.version, 1,
                 {"autotune": "0"})
    return json.loads(rec.to_json())


def _set(path: str, value):
    """A change to a good record: `path` (dotted) set to `value` (`DELETE`: removed)."""
    def change(d: dict) -> dict:
        *outer, last = path.split(".")
        node = d
        for key in outer:
            node = node[key]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
        return d
    return change


DELETE = object()

# name -> how a good record (config #3, the fastest of the log if it counted) is broken
BAD = {
    "cost 0": _set("result.costs", [0.0]),
    "negative cost": _set("result.costs", [-1e-6]),
    "NaN cost": _set("result.costs", [math.nan]),
    "infinite cost": _set("result.costs", [math.inf]),
    "no costs": _set("result.costs", []),
    "cost not a number": _set("result.costs", ["fast"]),
    "cost true": _set("result.costs", [True]),
    "costs not a list": _set("result.costs", 1e-6),
    "costs and error": _set("result.error", "wrong_answer"),
    "neither costs nor error": _set("result.costs", DELETE),
    "unknown error kind": lambda d: {**d, "result": {"error": "segfault", "message": "", "build_s": 0.0,
                                                     "timestamp": 1.0}},
    "negative build_s": _set("result.build_s", -1.0),
    "NaN timestamp": _set("result.timestamp", math.nan),
    "shape value 32.7": _set("task.params.M", 32.7),
    "shape value a string": _set("task.params.M", "64"),
    "shape value true": _set("task.params.M", True),
    "config index -1": _set("config.index", -1),
    "config index 2.5": _set("config.index", 2.5),
    "config index a string": _set("config.index", "3"),
    "knob value an object": _set("config.knobs.tile_i", {"a": 1}),
    "template ref not module:attr": _set("template.ref", "not a ref"),
    "template version a number": _set("template.version", 3),
    "threads -1": _set("threads", -1),
    "threads 1.5": _set("threads", 1.5),
    "versions not strings": _set("versions", {"tvm": 27}),
    "unknown timing": _set("timing", "lukewarm"),
    "format 2": _set("format", 2),
    "not an object": lambda d: [d],
}


@pytest.fixture(scope="module")
def good():
    return [_line(1, 2e-5), _line(2, 3e-5)]


@pytest.mark.filterwarnings("ignore:.*skipped 1 corrupt record")
@pytest.mark.parametrize("name", list(BAD))
@pytest.mark.parametrize("first", [True, False], ids=["first", "last"])
def test_a_bad_record_is_skipped_and_counted_and_the_others_count(name, first, good, tmp_path, capsys):
    bad = BAD[name](json.loads(json.dumps(_line(3, 1e-6))))
    lines = [bad, *good] if first else [*good, bad]
    log = tmp_path / "bad.jsonl"
    log.write_text("".join(json.dumps(d) + "\n" for d in lines))  # NaN and Infinity as Python's json writes them

    assert main(["best", str(log)]) == 0  # best: config #1, the bad line counted
    out, err = capsys.readouterr()
    assert f"{TASK.key}  " in out and "config #1 " in out and "no valid record" not in out
    assert err.strip() == "warning: skipped 1 corrupt line(s)"

    assert main(["best", "--json", str(log)]) == 0  # best --json: valid JSON, finite numbers only
    out, _ = capsys.readouterr()
    rows = [json.loads(line, parse_constant=pytest.fail) for line in out.splitlines()]
    assert [(r["task_key"], r["config"]["index"]) for r in rows] == [(TASK.key, 1)]

    assert main(["show", str(log)]) == 0  # show: two records, one skipped
    out, _ = capsys.readouterr()
    assert out.startswith("2 records, 1 corrupt lines skipped") and "records=2 " in out

    with TuningDatabase(log=log) as db:  # resume: a re-run continues from the same two trials
        trials, retimes = db.resumable(TASK, REF, resolve(REF).version, timing="warm")
    assert [r.input.config.index for r in trials] == [1, 2] and not retimes and db.stats.skipped == 1

    best = db.best_by_task()  # build: the tuned config #1, not the default schedule
    _, choice = kernel_for(TASK, 1, best, {r.task.key for r in db if r.result.ok})
    assert choice.tuned and choice.config_index == 1


def test_a_byte_order_mark_does_not_drop_the_first_record(good, tmp_path, capsys):
    log = tmp_path / "bom.jsonl"
    log.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(d) + "\n" for d in good).encode())
    assert main(["show", str(log)]) == 0
    assert capsys.readouterr().out.startswith("2 records, 0 corrupt lines skipped")


def test_a_template_a_log_names_is_not_imported_and_its_records_are_stale(good, tmp_path, capsys):
    """`this` prints the Zen of Python when imported: a log naming it must not run it."""
    assert "this" not in sys.modules
    log = tmp_path / "this.jsonl"
    log.write_text("".join(json.dumps(d) + "\n" for d in [_set("template.ref", "this:X")(_line(3, 1e-6)), *good]))
    assert main(["best", str(log)]) == 0 and main(["show", str(log)]) == 0
    out, err = capsys.readouterr()
    assert "this" not in sys.modules and "Beautiful is better" not in out + err
    assert "config #1 " in out
    assert "(1 records made by other versions of its template, or by a template not trusted here" in out


def test_a_template_module_the_user_lists_in_autotune_templates_is_imported(tmp_path, monkeypatch):
    """The user's own template module, named by a log, is imported once the user lists it (and not before)."""
    from autotune.errors import AutotuneError
    from autotune.templates import TRUSTED_ENV, resolve_trusted

    (tmp_path / "listed_template_module.py").write_text(
        "import pathlib\nfrom tests.fake_templates import TINY_MATMUL as T\n"
        "pathlib.Path(__file__).with_name('imported').write_text('yes')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(TRUSTED_ENV, raising=False)
    with pytest.raises(AutotuneError, match=TRUSTED_ENV):
        resolve_trusted("listed_template_module:T")
    assert not (tmp_path / "imported").exists()
    monkeypatch.setenv(TRUSTED_ENV, "some_other_module, listed_template_module")
    try:
        assert resolve_trusted("listed_template_module:T").op == "matmul"
        assert (tmp_path / "imported").read_text() == "yes"
    finally:
        sys.modules.pop("listed_template_module", None)
