"""Shipped tuning knowledge (`autotune.shipped`): target classes matched safely, a shipped config mapped onto a
task's space (the same task measured on another machine of the class, else the nearest task), builds using it
for tasks the user's logs lack, and `autotune show --shipped`."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.records import write_log
from autotune.shipped import CLASSES, MODEL_SUFFIX, Knowledge, classes_of
from autotune.target import host_llvm_target
from autotune.task import make_task, shape_distance
from autotune.tune import tune
from cost_models import train_from_records
from conftest import UNHURRIED, FakeBuilder, SimulatedRunner


def _names(target: dict) -> list[str]:
    return [c.name for c in classes_of(target)]


def test_a_target_uses_the_knowledge_of_the_classes_whose_instructions_it_has() -> None:
    amx = {"kind": "llvm", "mcpu": "sapphirerapids"}
    assert _names(amx) == [c.name for c in CLASSES if c.kind == "llvm"]  # its own class first
    assert _names({"kind": "llvm", "mcpu": "znver4"}) == ["x86-avx512-vnni-bf16", "x86-avx512-vnni", "x86-avx512",
                                                          "x86-avx2"]
    assert _names({"kind": "llvm", "mcpu": "haswell"}) == ["x86-avx2"]
    assert _names({"kind": "llvm", "mcpu": "znver4", "mattr": ["-avx512f"]}) == ["x86-avx2"]  # AVX-512 switched off
    assert _names({"kind": "cuda", "arch": "sm_90"}) == ["cuda-sm_90", "cuda-sm_80"]
    assert _names({"kind": "cuda", "arch": "sm_80"}) == ["cuda-sm_80"]
    assert _names({"kind": "cuda", "arch": "sm_75"}) == []


@pytest.fixture(scope="module")
def shipped_dense(tmp_path_factory):
    """A data folder shipping one dense task's best config, measured with 1 core: another machine of this
    machine's class (its task key differs from the one this machine builds)."""
    folder = tmp_path_factory.mktemp("shipped")
    target = {**host_llvm_target(), "num-cores": 1}
    task = make_task("dense", "batch=8,in_features=64,out_features=32", target=target)
    result = tune(task, trials=6, tuner="random", log=folder / "tuning.jsonl", batch_size=6, retime=0,
                  runner_options=UNHURRIED)
    own = classes_of(host_llvm_target())[0]
    write_log(folder / f"{own.name}.jsonl", [result.best])
    train_from_records(result.records).save(folder / f"{own.name}{MODEL_SUFFIX}")
    return folder, result.best, own


def test_a_shipped_config_maps_onto_the_same_task_and_the_nearest_one(shipped_dense) -> None:
    from autotune.templates import default_template, space_of

    folder, record, own = shipped_dense
    knowledge = Knowledge.load(host_llvm_target(), folder)
    assert [(c, r.task.key) for c, r in knowledge.best()] == [(own, record.task.key)]
    same = make_task("dense", "batch=8,in_features=64,out_features=32", target=host_llvm_target())
    shipped = knowledge.config_for(same, space_of(default_template(same), same))
    assert shipped.exact and shipped.config.knobs == record.input.config.knobs
    assert shipped.describe() == f"shipped {own.name} knowledge ({host_llvm_target()['mcpu']}, 1 cores)"
    other = make_task("dense", "batch=16,in_features=96,out_features=32", target=host_llvm_target())
    space = space_of(default_template(other), other)
    nearest = knowledge.config_for(other, space)
    assert not nearest.exact and nearest.config.index == space.nearest(record.input.config.knobs)[0]
    assert nearest.describe().endswith(f", from {record.task}")
    assert knowledge.config_for(make_task("matmul", "M=8,N=8,K=8", target=host_llvm_target()),
                                space_of(default_template(same), same)) is None  # no matmul ships
    assert shape_distance(same, other) == pytest.approx(np.log2(17 / 9) + np.log2(97 / 65))


def test_a_build_takes_the_shipped_config_for_a_task_its_logs_lack(shipped_dense, monkeypatch) -> None:
    import torch

    from autotune import shipped
    from autotune.model import build_model

    folder, record, own = shipped_dense
    monkeypatch.setattr(shipped, "DATA", folder)
    model, x = torch.nn.Linear(64, 32).eval(), torch.randn(8, 64)
    built = build_model(model, inputs=(x,), shipped=True)
    [choice] = built.report.kernels
    assert not choice.tuned and choice.config_index == record.input.config.index
    assert choice.line().startswith(f"shipped  dense(batch=8,in_features=64,out_features=32) float32 llvm x1: config "
                                    f"#{record.input.config.index} of shipped {own.name} knowledge")
    assert built.report.summary().splitlines()[0] == "0 of 1 tasks tuned from logs, 1 from shipped knowledge, 0 default"
    np.testing.assert_allclose(built(x.numpy()), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)
    monkeypatch.setenv("AUTOTUNE_NO_SHIPPED", "1")  # as the tests' conftest has it
    assert not build_model(model, inputs=(x,)).report.kernels[0].shipped
    monkeypatch.setenv("AUTOTUNE_NO_SHIPPED", "0")
    assert build_model(model, inputs=(x,)).report.kernels[0].shipped
    assert not build_model(model, inputs=(x,), shipped=False).report.kernels[0].shipped


def test_show_shipped_lists_this_machines_classes_and_their_knowledge(shipped_dense, monkeypatch, capsys) -> None:
    from autotune import shipped
    from autotune.cli import main

    folder, record, own = shipped_dense
    monkeypatch.setattr(shipped, "DATA", folder)
    assert main(["show", "--shipped"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"this machine's classes: {own.name}")
    assert lines[1] == (f"{own.name}  {record.task}  config #{record.input.config.index}  {record.gflops():.1f} GFLOPS "
                        f"on {host_llvm_target()['mcpu']}, 1 cores")
    assert lines[2].startswith(f"{own.name}  cost model {own.name}{MODEL_SUFFIX}  (")


def test_tuning_transfers_from_the_shipped_configs_where_the_logs_hold_none_of_the_operator(shipped_dense, tmp_path,
                                                                                             monkeypatch) -> None:
    from autotune import shipped
    from autotune.transfer import transfer_records, transfer_summary

    folder, record, own = shipped_dense
    monkeypatch.setattr(shipped, "DATA", folder)
    task = make_task("dense", "batch=16,in_features=96,out_features=32", target=host_llvm_target())
    log = tmp_path / "this.jsonl"
    picked = transfer_records(task, log, None, shipped=True)  # no other log beside it
    assert [r.task.key for r in picked] == [record.task.key]
    assert transfer_summary(task, picked) == f"transfer: shipped {own.name} knowledge, 1 records of 1 tasks"
    assert transfer_records(task, log, None, shipped=False) == []
    assert transfer_records(task, log, [], shipped=True) == []  # transfer off
    assert transfer_records(make_task("matmul", "M=8,N=8,K=8", target=host_llvm_target()), log, None,
                            shipped=True) == []  # none of its operator ships
    write_log(tmp_path / "mine.jsonl", tune(make_task("dense", "batch=4,in_features=32,out_features=16"), trials=2,
                                            tuner="random", batch_size=2, retime=0, runner_options=UNHURRIED).records)
    mine = transfer_records(task, log, None, shipped=True)  # the user's own dense records come first, alone
    assert {r.task.key for r in mine} == {make_task("dense", "batch=4,in_features=32,out_features=16").key}


def test_tuning_from_the_shipped_configs_starts_from_the_shipped_cost_model(shipped_dense, tmp_path,
                                                                            monkeypatch) -> None:
    from autotune import shipped
    from autotune.transfer import start_options, transfer_records, transfer_summary
    from autotune.tuners.options import XGBOptions
    from cost_models.xgb_model import XGBCostModel

    folder, record, own = shipped_dense
    monkeypatch.setattr(shipped, "DATA", folder)
    task = make_task("dense", "batch=16,in_features=96,out_features=32", target=host_llvm_target())
    picked = transfer_records(task, tmp_path / "this.jsonl", None, shipped=True)
    options = start_options(task, picked, "xgb", None)
    assert options == XGBOptions(cost_model=str(folder / f"{own.name}{MODEL_SUFFIX}"))
    assert transfer_summary(task, picked, options) == (f"transfer: shipped {own.name} knowledge, 1 records of 1 "
                                                       "tasks, and its cost model")
    mine = XGBOptions(cost_model="mine.json")
    assert start_options(task, picked, "xgb", mine) is mine  # the user's own model is kept
    assert start_options(task, picked, "xgb", XGBOptions(features="knob")).cost_model is None  # features differ
    assert start_options(task, picked, "random", None) is None
    simulated = {"builder": FakeBuilder(), "runner": SimulatedRunner(lambda cfg: 1e-5 * (1 + cfg.index % 5))}
    own_logs = tune(make_task("dense", "batch=4,in_features=32,out_features=16"), trials=2, tuner="random",
                    batch_size=2, retime=0, **simulated).records
    assert start_options(task, own_logs, "xgb", None).cost_model is None  # the user's records, not shipped ones
    loaded, load = [], XGBCostModel.load.__func__
    monkeypatch.setattr(XGBCostModel, "load",
                        classmethod(lambda cls, path: loaded.append(str(path)) or load(cls, path)))
    result = tune(task, trials=4, tuner="xgb", log=tmp_path / "warm.jsonl", transfer=picked, batch_size=4, retime=0,
                  **simulated)
    assert len(result.records) == 4 and result.best is not None
    assert loaded and set(loaded) == {options.cost_model}  # the tuner's fits continue from the shipped model


def test_the_nearest_task_weighs_a_convolutions_window_above_its_size() -> None:
    def conv(params: str):
        return make_task("conv2d", f"N=1,{params},dilation=1", target=host_llvm_target())

    task = conv("C=96,H=40,W=40,K=160,R=3,S=3,stride=1,padding=1")
    same_window = conv("C=256,H=14,W=14,K=256,R=3,S=3,stride=1,padding=1")
    same_size = conv("C=96,H=40,W=40,K=160,R=1,S=1,stride=2,padding=0")
    assert shape_distance(task, same_window) < shape_distance(task, same_size)


@pytest.mark.slow  # builds and measures a contest: 7 s; the default tier applies shipped configs in the tests above
def test_a_build_measures_a_nearest_tasks_shipped_config_and_keeps_the_faster(shipped_dense, monkeypatch) -> None:
    import torch

    from autotune import shipped
    from autotune.model import build, build_model, shipped_check
    from autotune.model.default_schedule import default_template_func
    from autotune.templates import default_template, space_of

    folder, record, own = shipped_dense
    monkeypatch.setattr(shipped, "DATA", folder)
    model, x = torch.nn.Linear(96, 48).eval(), torch.randn(16, 96)  # not the shipped task: its nearest
    task = make_task("dense", "batch=16,in_features=96,out_features=48", target=host_llvm_target())
    mapped = Knowledge.load(task.target).config_for(task, space_of(default_template(task), task)).config
    heuristic = default_template_func(default_template(task), task)[1]
    [verdict] = shipped_check.verdicts([shipped_check.Contest(task, mapped, heuristic)])
    assert 0.0 < verdict.speedup < float("inf")  # both kernels built, checked against the reference and timed here
    for measured, kept in ((1.5, True), (0.5, False)):  # as if the shipped config ran faster, then slower
        monkeypatch.setattr(build, "verdicts",
                            lambda contests, r=measured: [shipped_check.Verdict(r)] * len(contests))
        built = build_model(model, inputs=(x,), shipped=True)
        [choice] = built.report.kernels
        assert bool(choice.shipped) == kept and choice.config_index == (mapped if kept else heuristic).index
        if kept:
            assert choice.nearest and choice.line().endswith("; 1.50x the heuristic config here)")
        else:
            assert "ran 0.50x the heuristic config's speed here" in choice.reason
        np.testing.assert_allclose(built(x.numpy()), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_build_best_takes_the_shipped_config_where_the_logs_hold_none(shipped_dense, tmp_path, monkeypatch) -> None:
    from autotune import shipped
    from autotune.errors import AutotuneError
    from autotune.kernel import build_best

    folder, record, own = shipped_dense
    monkeypatch.setattr(shipped, "DATA", folder)
    task = make_task("dense", "batch=8,in_features=64,out_features=32", target=host_llvm_target())
    log = tmp_path / "empty.jsonl"
    log.write_text("")
    kernel = build_best(log, task, shipped=True)
    assert kernel.config.index == record.input.config.index and kernel.record is None
    assert kernel.source == f"shipped {own.name} knowledge ({host_llvm_target()['mcpu']}, 1 cores)"
    x, w = np.random.rand(8, 64).astype("float32"), np.random.rand(32, 64).astype("float32")
    np.testing.assert_allclose(kernel(x, w), x @ w.T, rtol=1e-4, atol=1e-5)
    with pytest.raises(AutotuneError, match="no valid record"):
        build_best(log, task, shipped=False)


@pytest.mark.slow  # trains a cost model in a process of its own (15 s)
def test_the_recipe_writes_a_class_best_configs_and_cost_model(tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path

    from autotune.database import TuningDatabase
    from cost_models.xgb_model import XGBCostModel

    own = classes_of(host_llvm_target())[0]
    logs = tmp_path / "work" / own.name
    logs.mkdir(parents=True)
    runs = [tune(make_task("dense", f"batch=4,in_features={k},out_features=16"), trials=3, tuner="random",
                 log=logs / f"{k}.jsonl", batch_size=3, retime=0, runner_options=UNHURRIED) for k in (32, 48)]
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "shipped_knowledge.py"
    done = subprocess.run([sys.executable, str(recipe), "write", "--work", str(tmp_path / "work"), "--data",
                           str(tmp_path / "data")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    written = TuningDatabase.open([tmp_path / "data" / f"{own.name}.jsonl"])
    assert sorted(r.input.config.index for r in written.records()) == sorted(r.best.input.config.index for r in runs)
    model = XGBCostModel.load(tmp_path / "data" / f"{own.name}{MODEL_SUFFIX}")
    assert model.features == "loop" and 0 < model.n_samples_ <= sum(len(r.records) for r in runs)
