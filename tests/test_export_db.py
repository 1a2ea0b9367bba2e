"""export-db: the best schedules as a MetaSchedule database that TVM reopens, applies and compiles.

For every CPU operator, records of a few random valid configs are exported (one log each), reopened with TVM's
`JSONDatabase` and applied with `relax.transform.MetaScheduleApplyDatabase` to a module holding autotune's own
PrimFunc and to one TVM's LegalizeOps made from the Relax operator; the applied function must carry the template's
loop nests and compute what numpy does. Then TVM's own pipelines on a Relax model (and a torch model) pick the
exported conv2d and dense schedules up.
"""

from __future__ import annotations

import argparse
import random
import warnings
from dataclasses import replace

import numpy as np
import pytest

from autotune.model.export_db import OWN, export_database, loop_nests
from autotune.model.legalized import FORMS, relax_call, relax_model
from autotune.operators import get_op
from autotune.records import load_records, write_log
from autotune.task import make_task
from autotune.templates import PREPACK, default_template, prim_func, space_of
from autotune.target import to_tvm_target
from tests.conftest import UNHURRIED, FakeBuilder, SimulatedRunner

SHAPES = {  # awkward sizes: padded register tiles (M, N), odd channels, strides, no padding
    "matmul": {"M": 30, "N": 45, "K": 16},
    "dense": {"batch": 5, "in_features": 16, "out_features": 30},
    "batch_matmul": {"B": 2, "M": 15, "N": 24, "K": 8},
    "conv2d": {"N": 1, "C": 8, "H": 9, "W": 9, "K": 16, "R": 3, "S": 3, "stride": 2, "padding": 1},
    "group_conv2d": {"N": 1, "C": 16, "H": 8, "W": 8, "K": 16, "R": 3, "S": 3, "groups": 4, "padding": 1},
    "depthwise_conv2d": {"N": 1, "C": 16, "H": 8, "W": 8, "R": 3, "S": 3, "padding": 0},
}
CONFIGS = 3  # random valid configs exported per operator


def _valid_configs(task, count: int, seed: int = 0):
    """`count` random configs of the task's default template that the template schedules."""
    template, rng = default_template(task), random.Random(seed)
    space = space_of(template, task)
    out = []
    while len(out) < count:
        cfg = space.get(rng.randrange(len(space)))
        try:
            template.apply(task, cfg)
        except Exception:  # noqa: BLE001 - a config the template rejects
            continue
        out.append(cfg)
    return out


def _log(path, task, configs, seconds=1e-3):
    """A log holding one simulated measurement of each config (the first one fastest)."""
    proto_log = path.with_name(f"{path.stem}.proto.jsonl")
    from autotune.tune import tune

    tune(task, trials=1, tuner="random", log=proto_log, builder=FakeBuilder(), runner=SimulatedRunner(lambda c: 1.0),
         retime=0)
    [proto] = load_records([proto_log])
    write_log(path, [replace(proto, input=replace(proto.input, config=cfg),
                             result=replace(proto.result, costs=(seconds * (i + 1),)))
                     for i, cfg in enumerate(configs)])
    return path


def _call_tir_module(func, in_shapes, out_shape):
    """A Relax module whose main calls `func` (as autotune's model build holds its PrimFuncs)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(in_shapes)]
    with bb.function("main", params):
        gv = bb.add_func(func, "kernel")
        with bb.dataflow():
            out = bb.emit_output(relax.call_tir(gv, params, relax.TensorType(out_shape, "float32")))
        bb.emit_func_output(out)
    return bb.get()


def _prim_funcs(mod):
    from tvm import tirx

    return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}


def _assert_tuned(func, task, cfg, prepacked: bool = False):
    """`func` was scheduled by the database and has the loop nests of the template's schedule of `cfg` (a kernel
    that takes its weight packed ahead: the function may pack it in loop nests of its own; `prepacked`: TVM moved
    the PREPACK loop nests out of the function)."""
    assert int(func.attrs["tirx.is_scheduled"]) == 1
    template = default_template(task)
    want = [n for n in loop_nests(template.apply(task, cfg).mod["main"]) if not (prepacked and PREPACK in n)]
    got = list(loop_nests(func))
    if template.relayouts(task, cfg):
        rest = iter(got)
        assert all(nest in rest for nest in want), (want, got)
    else:
        assert got == want


def _run(mod, target, inputs):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())
    out = vm["main"](*(tvm.runtime.tensor(x) for x in inputs))
    return out.numpy() if hasattr(out, "numpy") else out[0].numpy()


@pytest.mark.parametrize("op", list(SHAPES))
def test_export_reopens_and_applies(op, tmp_path):
    """Each of a few random valid configs is exported and the database reopens in TVM. Applied to autotune's own
    PrimFunc and to TVM's legalized one (and, the database opened by anchor block, to TVM's function of the
    operator with a ReLU fused in), it gives the template's loops and numpy's result."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    task = make_task(op, SHAPES[op])
    target = to_tvm_target(task.target)
    inputs = [np.random.default_rng(0).uniform(-1, 1, s).astype("float32") for s in task.opdef.input_shapes(task.shape)]
    ref = task.opdef.reference(task.shape, inputs)
    own = _call_tir_module(prim_func(task).without_attr("global_symbol"), task.opdef.input_shapes(task.shape),
                           task.opdef.output_shape(task.shape))
    legal = relax.transform.LegalizeOps()(relax_model(task))
    fused = relax.pipeline.zero_pipeline()(_with_relu(task))
    forms = (OWN, *FORMS) if get_op(op).weights else (OWN, *[f for f in FORMS if f != "legalized+layout_free"])
    for i, cfg in enumerate(_valid_configs(task, CONFIGS)):
        work_dir = tmp_path / f"db{i}"
        [exported] = export_database([_log(tmp_path / f"{i}.jsonl", task, [cfg])], work_dir)
        assert (exported.config_index, exported.workloads, exported.skipped) == (cfg.index, forms, "")
        db = ms.database.JSONDatabase(work_dir=str(work_dir))  # replays every trace on its workload
        assert len(db) == len(forms)
        anchored = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="anchor-block")
        for mod, database, want in ((own, db, ref), (legal, db, ref), (fused, anchored, np.maximum(ref, 0))):
            with target, database:
                applied = relax.transform.MetaScheduleApplyDatabase()(mod)
            [func] = [f for n, f in _prim_funcs(applied).items() if n != "transpose"]
            _assert_tuned(func, task, cfg)
            np.testing.assert_allclose(_run(applied, target, inputs), want, rtol=1e-4, atol=1e-4)


def _with_relu(task):
    """A Relax module: the task's operator (on parameters), then a ReLU."""
    from tvm import relax

    shapes = task.opdef.input_shapes(task.shape)
    params = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(relax_call(task, params)))
        bb.emit_func_output(out)
    return bb.get()


def test_dense_weight_is_packed_in_a_prepack_block_unless_padded(tmp_path):
    """Dense's kernel takes W packed ahead: the exported trace packs it in a PREPACK block (TVM's layout rewrite
    moves it out of the kernel) when the packed W is a plain copy, and in the kernel when N is padded."""
    from tvm.s_tir import meta_schedule as ms

    task = make_task("dense", {"batch": 4, "in_features": 16, "out_features": 240})  # 240: padded tiles and not
    template, rng, by_padding = default_template(task), random.Random(1), {}
    space = space_of(template, task)
    while len(by_padding) < 2:
        cfg = space.get(rng.randrange(len(space)))
        by_padding.setdefault(int(np.prod(cfg["tile_j"])) != 240, cfg)
    for padded, cfg in sorted(by_padding.items()):
        work_dir = tmp_path / f"db{int(padded)}"
        [exported] = export_database([_log(tmp_path / f"{int(padded)}.jsonl", task, [cfg])], work_dir)
        assert exported.workloads == (OWN, *FORMS) and not exported.skipped
        for record in ms.database.JSONDatabase(work_dir=str(work_dir)).get_all_tuning_records():
            assert (PREPACK in str(record.trace)) == (not padded)


def test_export_db_writes_dense_although_its_kernel_takes_w_relaid(tmp_path):
    """A dense log from a (simulated) tuning run: the best schedule is written for every workload, its trace
    packing W in the function (the kernel the template compiles takes W packed ahead)."""
    from autotune.tune import tune

    task = make_task("dense", {"batch": 4, "in_features": 16, "out_features": 32})
    tune(task, trials=2, tuner="random", log=tmp_path / "d.jsonl", builder=FakeBuilder(),
         runner=SimulatedRunner(lambda cfg: 1e-3), retime=0)
    [written] = export_database([tmp_path / "d.jsonl"], tmp_path / "db")
    assert written.task.key == task.key and written.workloads == (OWN, *FORMS) and not written.skipped
    assert (tmp_path / "db" / "database_tuning_record.json").read_text().count("\n") == len(FORMS) + 1


@pytest.mark.slow  # a real tuning run, then a MetaSchedule compile
def test_export_db_round_trip_and_legalized_match(tmp_path, worker_env):
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from autotune.tune import tune

    task = make_task("conv2d", {"N": 1, "C": 16, "H": 8, "W": 8, "K": 16, "R": 3, "S": 3, "stride": 1, "padding": 1})
    log = tmp_path / "conv.jsonl"
    best = tune(task, trials=2, tuner="random", log=log, batch_size=2, runner_options=UNHURRIED).best
    assert best is not None
    [written] = export_database([log], tmp_path / "db")
    assert written.config_index == best.input.config.index
    db = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    target = to_tvm_target(task.target)
    shapes = [(1, 16, 8, 8), (16, 16, 3, 3)]
    mod = _call_tir_module(prim_func(task).without_attr("global_symbol"), shapes, (1, 16, 8, 8))
    with target, db:
        applied = relax.transform.MetaScheduleApplyDatabase()(mod)
    assert int(applied["kernel"].attrs["tirx.is_scheduled"]) == 1
    assert "parallel" in applied["kernel"].script()
    ex = tvm.compile(applied, target=target)
    x, w = (np.random.default_rng(0).uniform(-1, 1, s).astype("float32") for s in shapes)
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w))
    np.testing.assert_allclose(out.numpy(), task.opdef.reference(task.shape, [x, w]), rtol=1e-4, atol=1e-4)

    # LegalizeOps' conv2d of the same shape is a different PrimFunc (int64 indices, blocks "pad_temp"/"conv2d_nchw"
    # instead of "pad"/"conv"); the database holds it as a workload of its own, so it is scheduled too.
    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", xs):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d(xs[0], xs[1], padding=1))
        bb.emit_func_output(out)
    legal = relax.transform.LegalizeOps()(bb.get())
    with target, db:
        legal = relax.transform.MetaScheduleApplyDatabase()(legal)
    [conv] = _prim_funcs(legal).values()
    assert int(conv.attrs["tirx.is_scheduled"]) == 1
    with pytest.raises(Exception, match="StructuralEqual check failed"):
        tvm.ir.assert_structural_equal(conv.with_attr("global_symbol", "main"), prim_func(task))


# ---- TVM's own pipelines --------------------------------------------------------------------

CONV = {"N": 1, "C": 3, "H": 8, "W": 8, "K": 16, "R": 3, "S": 3, "padding": 1}
DENSE = {"batch": 1, "in_features": 1024, "out_features": 10}


@pytest.fixture(scope="module")
def conv_dense_db(tmp_path_factory):
    """A database exported from a log of a conv2d [1,3,8,8] x [16,3,3,3] and a dense [1,1024] x [10,1024]^T
    (one valid config each), and those tasks and configs."""
    root = tmp_path_factory.mktemp("conv_dense")
    tasks = [make_task("conv2d", CONV), make_task("dense", DENSE)]
    configs = [_valid_configs(t, 1, seed=3)[0] for t in tasks]
    logs = [_log(root / f"{t.op}.jsonl", t, [c]) for t, c in zip(tasks, configs)]
    exported = export_database(logs, root / "db")
    assert all(e.workloads == (OWN, *FORMS) for e in exported)
    return root / "db", tasks, configs


def _conv_dense_model(w1, w2, bias: bool):
    """x [1,3,8,8] -> conv2d (w1 [16,3,3,3], constant) -> [1,1024] -> linear (w2 [10,1024], constant); with `bias`,
    a bias and a ReLU after the conv2d and a bias after the linear (TVM fuses them into the conv2d and matmul)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(w1), padding=1))
            if bias:
                y = bb.emit(relax.op.nn.relu(relax.op.add(y, relax.const(np.full((1, 16, 1, 1), 0.5, "float32")))))
            y = bb.emit(relax.op.reshape(y, (1, 1024)))
            out = bb.emit_output(relax.op.linear(y, relax.const(w2), relax.const(np.ones(10, "float32")) if bias
                                                 else None))
        bb.emit_func_output(out)
    return bb.get()


def _conv_dense_reference(x, w1, w2, bias: bool):
    conv, dense = make_task("conv2d", CONV), make_task("dense", DENSE)
    y = conv.opdef.reference(conv.shape, [x, w1])
    y = np.maximum(y + 0.5, 0) if bias else y
    return dense.opdef.reference(dense.shape, [y.reshape(1, 1024), w2]) + (1.0 if bias else 0.0)


def _weights():
    rng = np.random.default_rng(0)
    return (rng.uniform(-1, 1, s).astype("float32") for s in [(1, 3, 8, 8), (16, 3, 3, 3), (10, 1024)])


def test_tvm_pipelines_pick_up_conv2d_and_dense(conv_dense_db):
    """A Relax model legalized and compiled by TVM: its conv2d and its dense (a matmul after TVM folds the weight's
    transpose) get the exported schedules, with relax.pipeline.zero_pipeline, compile_relax, and the weight-prepack
    pipeline (which packs the dense and conv2d weights once, at build time, as autotune's kernels take them)."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    work_dir, (conv, dense), (conv_cfg, dense_cfg) = conv_dense_db
    target = to_tvm_target(conv.target)
    x, w1, w2 = _weights()
    mod, ref = _conv_dense_model(w1, w2, bias=False), _conv_dense_reference(x, w1, w2, bias=False)
    db = ms.database.JSONDatabase(work_dir=str(work_dir))

    with target, db:
        zero = relax.pipeline.zero_pipeline()(mod)  # LegalizeOps .. FuseTIR, then MetaScheduleApplyDatabase
    funcs = _prim_funcs(zero)
    _assert_tuned(funcs["conv2d"], conv, conv_cfg)
    _assert_tuned(funcs["matmul"], dense, dense_cfg)
    np.testing.assert_allclose(_run(zero, target, [x]), ref, rtol=1e-4, atol=1e-4)

    ex = ms.relax_integration.compile_relax(db, mod, target, params=None)
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)

    prepack = relax.get_pipeline("static_shape_tuning", total_trials=0, target=target, work_dir=str(work_dir),
                                 cpu_weight_prepack=True)(mod)
    funcs = _prim_funcs(prepack)
    for name, task, cfg in (("conv2d", conv, conv_cfg), ("matmul", dense, dense_cfg)):
        [kernel] = [f for n, f in funcs.items() if n.startswith(name) and n.endswith("_prepacked")]
        _assert_tuned(kernel, task, cfg, prepacked=True)
    np.testing.assert_allclose(_run(prepack, target, [x]), ref, rtol=1e-4, atol=1e-4)


def test_fused_functions_match_only_by_their_anchor_block(conv_dense_db):
    """TVM fuses a bias and a ReLU into the conv2d and a bias into the matmul: those functions are structurally
    equal to no workload, so the database as TVM opens it by default leaves them alone; opened with
    module_equality="anchor-block", TVM replays the trace on the fused function (the epilogue inlined)."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    work_dir, (conv, dense), (conv_cfg, dense_cfg) = conv_dense_db
    target = to_tvm_target(conv.target)
    x, w1, w2 = _weights()
    mod, ref = _conv_dense_model(w1, w2, bias=True), _conv_dense_reference(x, w1, w2, bias=True)
    for equality, scheduled in (("structural", False), ("anchor-block", True)):
        with target, ms.database.JSONDatabase(work_dir=str(work_dir), module_equality=equality):
            applied = relax.pipeline.zero_pipeline()(mod)
        funcs = {name.rstrip("0123456789"): f for name, f in _prim_funcs(applied).items()}  # fused_matmul_add1
        assert {n: "tirx.is_scheduled" in f.attrs for n, f in funcs.items()} == {
            "fused_conv2d_add_relu": scheduled, "fused_matmul_add": scheduled, "reshape": False}
        if scheduled:  # the template's loops, the bias (and ReLU) computed where the result is written back
            _assert_tuned(funcs["fused_conv2d_add_relu"], conv, conv_cfg)
            _assert_tuned(funcs["fused_matmul_add"], dense, dense_cfg)
        np.testing.assert_allclose(_run(applied, target, [x]), ref, rtol=1e-4, atol=1e-4)


def test_torch_model_compiled_by_tvm_picks_up_the_schedules(conv_dense_db):
    """A torch model (conv2d, ReLU, linear) imported by TVM's frontend and compiled with compile_relax on the
    database opened by anchor block: its conv2d and linear run the exported schedules."""
    torch = pytest.importorskip("torch")
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program
    from tvm.s_tir import meta_schedule as ms

    work_dir, (conv, _), _ = conv_dense_db
    target = to_tvm_target(conv.target)
    _, w1, w2 = _weights()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(1024, 10)).eval()
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(w1))
        model[3].weight.copy_(torch.from_numpy(w2))
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = model(x).numpy()
        mod = from_exported_program(torch.export.export(model, (x,)), keep_params_as_input=False)
    db = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="anchor-block")
    with target, db:
        applied = relax.pipeline.zero_pipeline()(mod)
    scheduled = sorted(n for n, f in _prim_funcs(applied).items() if "tirx.is_scheduled" in f.attrs)
    assert [n.split("_")[1] for n in scheduled] == ["conv2d", "matmul"], scheduled
    ex = ms.relax_integration.compile_relax(db, mod, target, params=None)
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    np.testing.assert_allclose(out[0].numpy(), ref, rtol=1e-4, atol=1e-4)


# ---- CLI ----------------------------------------------------------------------------------

def test_cli_export_db(tmp_path, capsys):
    from autotune.model.cli import add_model_commands

    task = make_task("matmul", {"M": 16, "N": 32, "K": 8})
    [cfg] = _valid_configs(task, 1)
    log = _log(tmp_path / "m.jsonl", task, [cfg])
    parser = argparse.ArgumentParser(prog="autotune")
    add_model_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["export-db", str(log), "-o", str(tmp_path / "db")])
    assert args.handler(args) == 0
    out, err = capsys.readouterr()
    assert f"config #{cfg.index}" in out and "autotune, legalized, legalized+op_pattern" in out
    assert "wrote 3 records (1 tasks)" in err
    assert (tmp_path / "db" / "database_tuning_record.json").read_text().count("\n") == 3
