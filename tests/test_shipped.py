"""Shipped tuning knowledge (`autotune.shipped`): target classes matched safely, a shipped config mapped onto a
task's space (the same task measured on another machine of the class, else the nearest task), builds using it
for tasks the user's logs lack, and `autotune show --shipped`."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.records import write_log
from autotune.shipped import CLASSES, Knowledge, classes_of, shape_distance
from autotune.target import host_llvm_target
from autotune.task import make_task
from autotune.tune import tune
from conftest import UNHURRIED


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
