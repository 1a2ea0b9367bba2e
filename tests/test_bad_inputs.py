"""Bad command-line inputs: each one ends with exit code 2 and one line on stderr (`... error: <what, and the
valid range or what to do>`), before any work and without a traceback. Run through `autotune.cli.main` in this
process, with the steps that would do work (transfer, tuning, building) replaced by ones that fail the test."""

from __future__ import annotations

import json
import os

import pytest

import autotune.cli as cli
from autotune.errors import AutotuneError
from autotune.measure import RunnerOptions
from autotune.measure.types import ErrorKind, MeasureInput, MeasureResult
from autotune.records import Record, write_log
from autotune.target import host_cores
from autotune.task import make_task
from autotune.templates import resolve, space_of
from autotune.tune import check_search_arguments
from autotune.tuners.options import XGBOptions

TUNE = ["tune", "matmul", "--shape", "M=16,N=16,K=16", "--trials", "2", "--quiet"]
MAIN_REF = "search_spaces.matmul:MATMUL_CPU"
OTHER_REF = "search_spaces.matmul:MATMUL_UKERNEL_CPU"


def _records(ref: str, n: int, ok: bool = True) -> list[Record]:
    task = make_task("matmul", {"M": 16, "N": 16, "K": 16})
    tmpl = resolve(ref)
    space = space_of(tmpl, task)
    result = (lambda i: MeasureResult((1e-6 * (i + 1),), None, "", 0.0, 0.0)) if ok else \
        (lambda i: MeasureResult(None, ErrorKind.RUNTIME_ERROR, "failed", 0.0, 0.0))
    return [Record(MeasureInput(task, space.get(i), ref), result(i), tmpl.version, 1, {}) for i in range(n)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Model files and logs the table names as {name}."""
    d = tmp_path_factory.mktemp("bad_inputs")
    (d / "empty.json").write_text("")
    (d / "text.json").write_text("hello")
    (d / "other.json").write_text(json.dumps({"format": "something-else", "version": 1}))
    (d / "folder").mkdir()
    write_log(d / "failed.jsonl", _records(MAIN_REF, 3, ok=False))
    (d / "garbage.jsonl").write_text("not a record\n{\"format\": 1}\n")
    write_log(d / "two_templates.jsonl", _records(MAIN_REF, 4) + _records(OTHER_REF, 4))
    from cost_models import train_from_records
    train_from_records(_records(MAIN_REF, 6), features="knob", n_rounds=2).save(d / "knob.json")
    read_only = d / "read_only"
    read_only.mkdir()
    read_only.chmod(0o555)
    names = {p.name.split(".")[0]: str(p) for p in d.iterdir()}
    yield {**names, "missing": str(d / "missing.json"), "dir": str(d), "cores": str(host_cores() + 1)}
    read_only.chmod(0o755)


@pytest.fixture
def no_work(monkeypatch):
    """Any step that would do work fails the test: a bad input must be refused before it."""
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the bad input was refused")

    for name in ("tune", "transfer_records", "_build_only"):
        monkeypatch.setattr(cli, name, forbidden)
    import cost_models.dataset
    monkeypatch.setattr(cost_models.dataset, "extract", forbidden)  # a cost model's features
    import autotune.dynamic.cli as dynamic_cli
    for name in ("tune_dynamic", "transfer_records"):
        monkeypatch.setattr(dynamic_cli, name, forbidden)
    import autotune.model.cli as model_cli
    monkeypatch.setattr(model_cli, "tune_model", forbidden)


BAD = [  # (id, argv, a fragment of the one stderr line)
    ("timeout", [*TUNE, "--timeout", "-1"], "--timeout: must be a finite number > 0, not -1"),
    ("timeout-zero", [*TUNE, "--timeout", "0"], "--timeout: must be a finite number > 0"),
    ("build-timeout", [*TUNE, "--build-timeout", "-1"], "--build-timeout: must be a finite number > 0"),
    ("repeat", [*TUNE, "--repeat", "0"], "--repeat: must be >= 1, not 0"),
    ("threads-negative", [*TUNE, "--threads", "-2"], "--threads: must be >= 0, not -2"),
    ("threads-too-many", [*TUNE, "--threads", "{cores}"], "more than the"),
    ("min-repeat-ms", [*TUNE, "--min-repeat-ms", "-5"], "--min-repeat-ms: must be a finite number >= 0"),
    ("min-repeat-ms-nan", [*TUNE, "--min-repeat-ms", "nan"], "--min-repeat-ms: must be a finite number >= 0"),
    ("batch-size", [*TUNE, "--batch-size", "0"], "--batch-size: must be >= 1, not 0"),
    ("early-stopping", [*TUNE, "--early-stopping", "-1"], "--early-stopping: must be >= 1, not -1"),
    ("seed", [*TUNE, "--seed", "-1"], "--seed: must be >= 0, not -1"),
    ("retime", [*TUNE, "--retime", "-1"], "--retime: must be >= 0, not -1"),
    ("trials", ["tune", "matmul", "--shape", "M=16,N=16,K=16", "--trials", "0"], "--trials: must be >= 1, not 0"),
    ("trials-text", [*TUNE, "--trials", "ten"], "expected an integer >= 1, not 'ten'"),
    ("ukernel-trials", [*TUNE, "--ukernel-trials", "0"], "--ukernel-trials: must be >= 1"),
    ("max-ukernels", [*TUNE, "--max-ukernels", "0"], "--max-ukernels: must be >= 1"),
    ("round-trials", ["tune-model", "m.py:f", "--trials", "4", "--log", "x.jsonl", "--round-trials", "0"],
     "--round-trials: must be >= 1"),
    ("tune-model-seed", ["tune-model", "m.py:f", "--trials", "4", "--log", "x.jsonl", "--seed", "-3"],
     "--seed: must be >= 0"),
    ("tune-model-threads", ["tune-model", "m.py:f", "--trials", "4", "--log", "x.jsonl", "--threads", "{cores}"],
     "more than the"),
    ("duplicate-shape-key", ["tune", "matmul", "--shape", "M=64,M=32,N=16,K=16"], "M is given twice"),
    ("target-value-type", [*TUNE, "--target", '{"kind": "llvm", "num-cores": "x"}'],
     "num-cores must be an integer >= 1, not 'x'"),
    ("target-unknown-key", [*TUNE, "--target", '{"kind": "llvm", "bogus": 1}'], "Unknown config option 'bogus'"),
    ("target-cuda-unknown-key", [*TUNE, "--target", '{"kind": "cuda", "bogus": 1}', "--build-only"],
     "Unknown config option 'bogus'"),
    ("target-mattr-type", [*TUNE, "--target", '{"kind": "llvm", "mattr": "avx2"}'], "Option 'mattr'"),
    ("huge-shape", ["tune", "matmul", "--shape", "M=1000000000,N=16,K=16"], "more than the 2,147,483,647"),
    ("dynamic-duplicate-shape-key", ["tune", "matmul", "--shape", "M=1..64,M=32,N=4,K=4", "--dynamic"],
     "M is given twice"),
    ("dynamic-huge-range", ["tune", "matmul", "--shape", "M=1..10000000000,N=4,K=4", "--dynamic"],
     "more than the 2,147,483,647"),
    ("dynamic-threads-too-many", ["tune", "matmul", "--shape", "M=1..64,N=4,K=4", "--dynamic", "--threads",
                                  "{cores}"], "more than the"),
    ("dynamic-cost-model-missing", ["tune", "matmul", "--shape", "M=1..64,N=4,K=4", "--dynamic", "--cost-model",
                                    "{missing}"], "does not exist"),
    ("cost-model-empty", [*TUNE, "--cost-model", "{empty}"], "is not JSON"),
    ("cost-model-missing", [*TUNE, "--cost-model", "{missing}"], "does not exist"),
    ("cost-model-folder", [*TUNE, "--cost-model", "{folder}"], "is not a file"),
    ("cost-model-other-format", [*TUNE, "--cost-model", "{other}"], "is not an autotune cost model file"),
    ("cost-model-text", [*TUNE, "--cost-model", "{text}"], "is not JSON"),
    ("cost-model-other-features", [*TUNE, "--cost-model", "{knob}"], "was trained on knob features, not loop"),
    ("template-colon", [*TUNE, "--template", ":"], "bad template reference ':'"),
    ("template-relative", [*TUNE, "--template", "..x:y"], "bad template reference"),
    ("template-no-attribute", [*TUNE, "--template", "search_spaces.matmul"], "expected module:attribute"),
    ("template-missing-module", [*TUNE, "--template", "nosuchmodule:X"], "cannot load template"),
    ("template-of-another-op", [*TUNE, "--template", "search_spaces.conv2d:CONV2D_CPU"], "is for conv2d"),
    ("log-is-a-folder", [*TUNE, "--log", "{dir}"], "is a directory"),
    ("train-failed-records", ["train-model", "{failed}", "-o", "{dir}/m.json"], "no valid record to train on"),
    ("train-only-corrupt-lines", ["train-model", "{garbage}", "-o", "{dir}/m.json"], "no records in"),
    ("best-only-corrupt-lines", ["best", "{garbage}"], "all 2 line(s) are corrupt"),
    ("train-knob-two-templates", ["train-model", "{two_templates}", "-o", "{dir}/m.json", "--features", "knob"],
     "knob features need records of one template"),
]
if os.geteuid() != 0:  # root writes anywhere
    BAD.append(("log-read-only-folder", [*TUNE, "--log", "{read_only}/run.jsonl"], "cannot"))


def _fill(text: str, files: dict[str, str]) -> str:
    for name, value in files.items():
        text = text.replace(f"{{{name}}}", value)
    return text


@pytest.mark.parametrize("argv,needle", [pytest.param(a, n, id=i) for i, a, n in BAD])
def test_bad_input_is_one_line_before_any_work(argv, needle, files, no_work, capsys):
    try:
        code = cli.main([_fill(a, files) for a in argv])
    except SystemExit as exit_:  # argparse's errors
        code = exit_.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "error: " in lines[0] and "Traceback" not in err, err
    assert _fill(needle, files) in lines[0], err


@pytest.mark.parametrize("kwargs,needle", [
    (dict(timeout=-1), "timeout must be a finite number > 0"), (dict(timeout=0), "timeout"),
    (dict(timeout=float("inf")), "timeout"), (dict(repeat=0), "repeat must be an integer >= 1"),
    (dict(threads=-2), "threads must be 0"), (dict(min_repeat_ms=-1.0), "min_repeat_ms"),
    (dict(threads=1.5), "threads must be 0")])
def test_runner_options_refuse_values_no_runner_can_use(kwargs, needle):
    with pytest.raises(AutotuneError, match=needle):
        RunnerOptions(**kwargs)


def test_runner_options_threads_fit_this_machine():
    RunnerOptions(threads=host_cores()).check_local()
    RunnerOptions(threads=0).check_local()
    with pytest.raises(AutotuneError, match=f"1 to {host_cores()}"):
        RunnerOptions(threads=host_cores() + 1).check_local()


@pytest.mark.parametrize("kwargs,needle", [
    (dict(trials=0), "trials must be an integer >= 1"), (dict(batch_size=0), "batch_size"),
    (dict(seed=-1), "seed must be an integer >= 0"), (dict(retime=-1), "retime"),
    (dict(early_stopping=0), "early_stopping"), (dict(build_timeout=-1), "build_timeout"),
    (dict(template=":"), "bad template reference"), (dict(template="a.b:"), "bad template reference")])
def test_search_arguments_checked_for_the_python_api_too(kwargs, needle):
    with pytest.raises(AutotuneError, match=needle):
        check_search_arguments(**kwargs)
    check_search_arguments(trials=1, batch_size=1, early_stopping=None, seed=0, retime=0, template=MAIN_REF)


def test_xgb_options_check_the_cost_model_file(files):
    with pytest.raises(AutotuneError, match="does not exist"):
        XGBOptions(cost_model=files["missing"]).saved_model()
    with pytest.raises(AutotuneError, match="was trained on knob features, not loop"):
        XGBOptions(cost_model=files["knob"]).saved_model()
    with pytest.raises(AutotuneError, match="is not JSON"):
        XGBOptions(cost_model=files["empty"]).saved_model()
    assert XGBOptions(features="knob", cost_model=files["knob"]).saved_model().features == "knob"
