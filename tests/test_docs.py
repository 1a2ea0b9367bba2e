"""The reference pages agree with the code: the CLI page with the parsers, the log schema with real records."""

import json
from pathlib import Path

import pytest

from autotune.cli_reference import render
from autotune.measure.types import ErrorKind
from autotune.schemas import record_schema
from autotune.task import make_task
from autotune.tune import tune
from conftest import UNHURRIED, FakeBuilder, SimulatedRunner

jsonschema = pytest.importorskip("jsonschema")
ROOT = Path(__file__).resolve().parents[1]


def test_cli_reference_is_up_to_date():
    page = ROOT / "docs" / "reference" / "cli.md"
    assert page.read_text() == render(), "run: python -m autotune.cli_reference -o docs/reference/cli.md"


def test_cli_reference_lists_every_option_of_every_command():
    from autotune.cli import build_parser

    page = render()
    for flag in ("--trials", "--rpc-key", "--cache-flush", "--build-only", "--ukernel-trials", "--port-end"):
        assert f"`{flag}" in page
    for command in ("tune", "tune-model", "build", "export-db", "rpc server", "train-model"):
        assert f"## `autotune {command}`" in page or f"### `autotune {command}`" in page
    assert build_parser().prog == "autotune"


def _validator():
    schema = record_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_records_a_real_tuning_run_writes_match_the_schema(tmp_path):
    log = tmp_path / "mm.jsonl"
    res = tune(make_task("matmul", {"M": 32, "N": 32, "K": 32}), trials=3, tuner="random", log=log, retime=1,
               runner_options=UNHURRIED)
    assert res.best is not None
    lines = log.read_text().splitlines()
    assert len(lines) >= 3
    validator = _validator()
    for line in lines:
        assert not list(validator.iter_errors(json.loads(line))), line


def test_error_and_cuda_records_match_the_schema(tmp_path):
    log = tmp_path / "gpu.jsonl"
    task = make_task("dense", {"batch": 16, "in_features": 32, "out_features": 32},
                     target={"kind": "cuda", "arch": "sm_80"})
    tune(task, trials=6, tuner="random", log=log, builder=FakeBuilder(),
         runner=SimulatedRunner(lambda c: None if c.index % 2 else 1e-4))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert any("error" in r["result"] for r in records) and any("costs" in r["result"] for r in records)
    validator = _validator()
    for record in records:
        assert not list(validator.iter_errors(record)), record


def test_the_schema_rejects_what_is_not_a_record(tmp_path):
    log = tmp_path / "mm.jsonl"
    tune(make_task("matmul", {"M": 64, "N": 64, "K": 64}), trials=1, tuner="random", log=log,
         builder=FakeBuilder(), runner=SimulatedRunner(lambda c: 1e-3))
    good = json.loads(log.read_text().splitlines()[0])
    validator = _validator()
    bad = [
        {**good, "result": {**good["result"], "costs": [0.0]}},          # a cost of zero
        {**good, "result": {**good["result"], "costs": []}},             # no timing
        {**good, "task": {**good["task"], "params": {"M": 32.7}}},      # a fractional shape
        {k: v for k, v in good.items() if k != "config"},                # no config
        {**good, "result": {"error": "exploded", "message": "", "build_s": 0, "timestamp": 0}},
    ]
    for record in bad:
        assert list(validator.iter_errors(record)), record


def test_the_schema_knows_every_error_kind():
    kinds = record_schema()["properties"]["result"]["oneOf"][1]["properties"]["error"]["enum"]
    assert kinds == [k.value for k in ErrorKind]
