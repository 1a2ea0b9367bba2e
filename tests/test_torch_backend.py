"""torch.compile(backend="autotune"): graph breaks, guards and recompiles, eager fallback, tuned logs, extraction."""

from __future__ import annotations

import argparse
import math
import warnings

import pytest

torch = pytest.importorskip("torch", reason="the torch.compile backend needs PyTorch")
from torch import nn

import autotune.torch_backend as tb
from autotune.model.cli import add_model_commands
from autotune.model.extract import collect_tasks, extract_tasks
from autotune.task import make_task
from autotune.tune import tune
from tests.compile_models import branchy, print_item, tiny_moe
from tests.conftest import FakeBuilder, SimulatedRunner


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    tb.clear_cache()
    yield
    torch._dynamo.reset()


def _compiled(model, **options):
    return torch.compile(model, backend="autotune", options=options or None)


def _same(a, b):
    a, b = (x if isinstance(x, (tuple, list)) else (x,) for x in (a, b))
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


def _fallbacks(record):
    return [w for w in record if issubclass(w.category, tb.AutotuneFallbackWarning)]


def test_registered_with_dynamo():
    from torch._dynamo.backends.registry import lookup_backend

    assert "autotune" in torch._dynamo.list_backends()
    assert lookup_backend("autotune") is tb.autotune_backend


def test_data_dependent_branch_both_ways_on_tvm():
    model, (x,) = branchy()
    fn = _compiled(model)
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for inp in (x, -x * 3, x):  # both branches, then back
            _same(fn(inp), model(inp))
    assert not _fallbacks(record), [str(w.message) for w in record]
    assert tb.STATS.graphs >= 2 and tb.STATS.builds >= 2 and tb.STATS.fallbacks == 0
    assert all(any(k.task.op == "dense" for k in b.report.kernels) for b in tb.builds())


def test_print_and_item_graph_breaks(capsys):
    model, (x,) = print_item()
    fn = _compiled(model)
    with torch.no_grad():
        for inp in (x, x * 0.01):  # .item() steers the scale both ways
            _same(fn(inp), model(inp))
    assert capsys.readouterr().out.count("PrintItem: after a") == 4  # twice compiled, twice eager
    assert tb.STATS.graphs >= 2 and tb.STATS.fallbacks == 0 and tb.STATS.builds >= 2


def test_shape_change_recompiles_then_hits_the_cache():
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8)).eval()  # one graph
    fn = _compiled(model)
    a, b = torch.randn(4, 16), torch.randn(6, 16)
    with torch.no_grad():
        _same(fn(a), model(a))
        assert (tb.STATS.builds, tb.STATS.hits) == (1, 0)
        _same(fn(b), model(b))  # guard fails -> Dynamo recompiles (dynamic) -> a build for the new shape
        assert tb.STATS.builds == 2
        _same(fn(a), model(a))  # back to the first shape: Dynamo's dynamic graph, our cached build
        _same(fn(b), model(b))
    assert tb.STATS.builds == 2 and tb.STATS.hits >= 1 and tb.STATS.fallbacks == 0


def test_a_graph_of_symbolic_sizes_builds_once_for_every_size():
    """torch.compile(dynamic=True): Dynamo's graph has a symbolic batch (and the norm's eps as a 0-d tensor read
    by .item()); one build on dynamic kernels serves every size, each size's first call checked against eager."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 24), nn.LayerNorm(24), nn.GELU(), nn.Linear(24, 8)).eval()
    fn = torch.compile(model, backend="autotune", dynamic=True, options={"shipped": False})
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for rows in (3, 17, 5, 40):
            x = torch.randn(rows, 16)
            _same(fn(x), model(x))
    assert not _fallbacks(record), [str(w.message) for w in record]
    assert (tb.STATS.builds, tb.STATS.dynamic, tb.STATS.hits) == (1, 1, 3), tb.STATS


def _same_size_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1)).eval()


@pytest.mark.slow  # Dynamo's trace and a dynamic build of convolutions: 15 s each
@pytest.mark.parametrize("make", ["strided", "same size"])
def test_a_cnn_of_symbolic_image_sizes_builds_once_for_every_size(make):
    """torch.compile(dynamic=True) of a CNN: Dynamo's graph has a symbolic batch, height and width; one build (its
    convolutions as im2col and dynamic dense kernels) serves every image size. Strided: the trace guards its
    outputs' widths (not 1), which no range of the input states: exported with the ranges torch.export infers.
    Same size: Dynamo knows no upper bound of the sizes, and the build plans no memory for one."""
    from test_dynamic_conv import _cnn

    model = _cnn() if make == "strided" else _same_size_cnn()
    fn = torch.compile(model, backend="autotune", dynamic=True, options={"shipped": False})
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for shape in ((2, 3, 20, 16), (2, 3, 33, 17), (2, 3, 9, 40)):  # a batch of 1 Dynamo specialises
            x = torch.randn(*shape)
            _same(fn(x), model(x))
    assert not _fallbacks(record), [str(w.message) for w in record]
    assert (tb.STATS.builds, tb.STATS.dynamic, tb.STATS.hits) == (1, 1, 2), tb.STATS


def test_recompiled_equal_graph_reuses_its_build_without_an_export(monkeypatch):
    """A float after a graph break is specialised by Dynamo's first compile: a new value recompiles the resume
    function, whose graph is the same; its build is found before any torch.export."""
    lin = nn.Linear(16, 16).eval()

    def f(x):
        y = torch.relu(lin(x))
        if float(y.mean()) > 0:  # graph break; the resume function guards on the float
            y = y * 1.0
        return lin(y) + 1

    fn = _compiled(f)
    exports = []
    real_export = tb.export_graph
    monkeypatch.setattr(tb, "export_graph", lambda *a, **k: exports.append(1) or real_export(*a, **k))
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, 16)
            _same(fn(x), f(x))
    assert tb.STATS.builds == 2 and tb.STATS.hits >= 1 and tb.STATS.fallbacks == 0
    assert len(exports) == 2  # one per build, none for the recompiled resume function


def test_batch_norm_in_training_mode_is_prepared_once(monkeypatch):
    """Running statistics written in place every call (their eager part) keep the call signature: the split
    graph is prepared (checked against eager) once, not on every call."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).train()
    twin = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).train()
    twin.load_state_dict(model.state_dict())
    prepared = []
    real = tb.GraphRunner._prepare
    monkeypatch.setattr(tb.GraphRunner, "_prepare", lambda self, *a: prepared.append(self.label) or real(self, *a))
    fn = _compiled(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(4):
            x = torch.randn(2, 3, 10, 10)
            _same(fn(x), twin(x))
    _same(model[1].running_mean, twin[1].running_mean)
    assert len([p for p in prepared if "segment" not in p]) == 1, prepared


def test_weights_changed_in_place_are_not_stale():
    model, (x,) = branchy()
    fn = _compiled(model)
    with torch.no_grad():
        _same(fn(x), model(x))
        model.neg.weight.mul_(-2.0)
        _same(fn(x), model(x))
    assert tb.STATS.fallbacks == 0 and tb.STATS.builds >= 2


class FastPathAndCumsum(nn.Module):
    """nn.TransformerEncoderLayer's fused eval kernel and a cumsum of a bool mask: both need ATen fixes for TVM."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)

    def forward(self, x):
        positions = torch.cumsum(x[..., 0] > 0, dim=1)  # int64 in PyTorch
        return self.layer(x), positions


def test_fast_path_encoder_layer_and_bool_cumsum_run_on_tvm():
    model = FastPathAndCumsum().eval()
    fn = _compiled(model)
    x = torch.randn(1, 6, 16)
    with torch.no_grad():
        _same(fn(x), model(x))
    assert (tb.STATS.builds, tb.STATS.fallbacks) == (1, 0)


class Unsupported(nn.Module):
    def __init__(self, only: bool = False):
        super().__init__()
        self.only = only
        self.fc = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x):
        if self.only:
            return torch.special.erfinv(x)  # no TVM importer for erfinv
        return self.fc2(torch.special.erfinv(torch.tanh(self.fc(x)) * 0.5)) + 1


def test_op_tvm_cannot_import_runs_eagerly_between_segments_on_tvm():
    model = Unsupported().eval()
    fn = _compiled(model)
    x = torch.randn(3, 8)
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            _same(fn(x), model(x))
    [w] = _fallbacks(record)
    assert "erfinv" in str(w.message) and "the rest as 2 segment(s) on TVM" in str(w.message)
    assert (tb.STATS.splits, tb.STATS.builds, tb.STATS.fallbacks) == (1, 2, 0)  # linear-tanh-mul, linear-add


def test_graph_of_one_op_tvm_cannot_import_runs_eager_with_one_warning():
    model = Unsupported(only=True).eval()
    fn = _compiled(model)
    x = torch.rand(3, 8) - 0.5
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            _same(fn(x), model(x))
    [w] = _fallbacks(record)
    assert "runs eagerly" in str(w.message) and "erfinv" in str(w.message)
    assert tb.STATS.builds == 0


def test_mixture_of_experts_splits_around_histc_and_a_custom_op():
    model, (x,) = tiny_moe()
    fn = _compiled(model)
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for inp in (x, x.flip(0) * 2, x):  # another routing, then back
            _same(fn(inp), model(inp))
    [w] = _fallbacks(record)
    assert "histc" in str(w.message) and "grouped_mm" in str(w.message)
    assert tb.STATS.splits == 1 and tb.STATS.builds >= 3 and tb.STATS.fallbacks == 0


class Mutating(nn.Module):
    """Updates a buffer in place or returns a view of its input; with `work`, around layers worth a build."""

    def __init__(self, view: bool, work: bool = False):
        super().__init__()
        self.view, self.work = view, work
        self.register_buffer("calls", torch.zeros(1))
        self.register_buffer("cache", torch.zeros(4, 3))
        self.fc = nn.Linear(3, 3)
        self.fc2 = nn.Linear(3, 3)

    def forward(self, x):
        if self.view:
            return x.t(), (self.fc(x) if self.work else x) * 2
        if not self.work:
            self.calls += 1
            return x * self.calls
        k = torch.tanh(self.fc(x))
        self.cache[1:3] = k  # a cache written in place between two layers
        self.calls += 1
        return self.fc2(self.cache.sum(dim=0, keepdim=True) + x) * 2


@pytest.mark.parametrize("view", [False, True])
def test_input_mutation_and_views_of_inputs_stay_eager(view):
    model = Mutating(view)
    fn = _compiled(model)
    x = torch.randn(2, 3)
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = [fn(x) for _ in range(3)]
    if view:
        assert out[2][0].data_ptr() == x.data_ptr() and torch.equal(out[2][1], x * 2)  # still a view
    else:
        assert float(model.calls) == 3 and torch.equal(out[2], x * 3)  # the graph ran once per call
    [w] = _fallbacks(record)
    assert ("view of an input" if view else "writes its inputs or buffers in place (BUFFER_MUTATION)") in \
        str(w.message)
    assert "runs eagerly" in str(w.message) and tb.STATS.builds == 0


@pytest.mark.parametrize("view", [False, True])
def test_input_mutation_and_views_of_inputs_split_off_the_layers(view):
    model, twin = Mutating(view, work=True), Mutating(view, work=True)
    twin.load_state_dict(model.state_dict())
    fn = _compiled(model)
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for seed in range(3):
            x = torch.randn(2, 3, generator=torch.Generator().manual_seed(seed))
            got, want = fn(x), twin(x)
            _same(got, want)
            torch.testing.assert_close(model.cache, twin.cache)  # the writes happened, once per call
            assert float(model.calls) == float(twin.calls) == (0 if view else seed + 1)
            if view:
                assert got[0].data_ptr() == x.data_ptr()  # still a view
    [w] = _fallbacks(record)
    assert ("view of an input" if view else "writes its inputs or buffers in place") in str(w.message)
    assert "segment(s) on TVM" in str(w.message)
    assert tb.STATS.splits == 1 and tb.STATS.builds == (1 if view else 2) and tb.STATS.fallbacks == 0


def test_bad_option_is_reported():
    with pytest.raises(Exception, match="unknown autotune backend option"):
        _compiled(nn.Linear(2, 2), logz=["x"])(torch.randn(1, 2))


def test_tuned_log_is_applied(tmp_path):
    model, (x,) = branchy()
    task = make_task("dense", {"batch": 4, "in_features": 16, "out_features": 8})  # the last linear
    log = tmp_path / "tuned.jsonl"
    result = tune(task, trials=6, tuner="random", log=log, builder=FakeBuilder(),
                  runner=SimulatedRunner(lambda cfg: 1e-3 / (1 + cfg.index % 5)))
    fn = _compiled(model, logs=[str(log)])
    with torch.no_grad():
        _same(fn(x), model(x))
    kernels = [k for b in tb.builds() for k in b.report.kernels if k.task.key == task.key]
    assert kernels and all(k.tuned and k.config_index == result.best.input.config.index for k in kernels)
    others = [k for b in tb.builds() for k in b.report.kernels if k.task.key != task.key]
    assert others and not any(k.tuned for k in others)


def test_extract_through_compile_merges_graphs_with_weights():
    model, inputs = print_item()
    collected = collect_tasks(model, inputs)
    assert collected.graphs >= 2 and collected.skipped == []
    mm = make_task("dense", {"batch": 4, "in_features": 16, "out_features": 16})
    assert [(t.key, w) for t, w in collected.tasks] == [(mm.key, 2)]  # a and b, in two graphs
    assert math.isclose(sum(t.flops * w for t, w in collected.tasks), 2 * 2 * 4 * 16 * 16)


def test_tune_model_through_compile(tmp_path):
    from autotune.model import tune_model

    fake = {"builder": FakeBuilder(), "runner": SimulatedRunner(lambda cfg: 1e-3)}
    result = tune_model("tests/compile_models.py:print_item", trials=8, log=tmp_path / "m.jsonl", tuner="random",
                        round_trials=8, progress=lambda m: None, via="compile", **fake)
    assert [(s.task.op, s.weight, s.trials) for s in result.states] == [("dense", 2, 8)]


def test_extract_auto_falls_back_to_compile(capsys):
    tasks = extract_tasks("tests/compile_models.py:branchy")  # export fails on the branch
    assert "torch.export failed" in capsys.readouterr().err
    got = sorted((t.shape["out_features"], w) for t, w in tasks)
    model, (x,) = branchy()
    assert got == ([(8, 1), (16, 2)] if torch.relu(model.inp(x)).mean() > 0.2 else [(8, 1), (16, 1)])
    with pytest.raises(Exception, match="torch.export failed"):
        extract_tasks("tests/compile_models.py:branchy", via="export")


def test_cli_extract_compile(capsys):
    parser = argparse.ArgumentParser(prog="autotune")
    add_model_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["extract", "tests/compile_models.py:print_item", "--compile"])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "torch.compile captured" in out and "1 tasks, 2 calls" in out


@pytest.mark.slow  # Dynamo recompiles for dynamic shapes; the split itself: test_mixture_of_experts_splits_...
def test_a_split_graph_called_with_new_shapes_keeps_its_split():
    model, (x,) = tiny_moe()
    fn = _compiled(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for tokens in (8, 6, 5, 7):  # Dynamo's first graph is static, its second takes any number of tokens
            _same(fn(x[:tokens]), model(x[:tokens]))
    assert tb.STATS.splits <= 2 and tb.STATS.fallbacks == 0  # one split per Dynamo graph, not per shape


@pytest.mark.slow  # the split around histc runs in test_mixture_of_experts_splits_around_histc_and_a_custom_op
def test_extraction_splits_around_ops_tvm_cannot_import(capsys):
    model, (x,) = tiny_moe()
    tasks = extract_tasks(model, (x,))  # exports whole, TVM cannot import histc: through torch.compile
    assert "TVM cannot import" in capsys.readouterr().err
    want = [make_task("dense", {"batch": 8, "in_features": 16, "out_features": n}).key for n in (4, 16)]
    assert sorted(t.key for t, _ in tasks) == sorted(want)  # the router and the output layer, in two segments
    collected = collect_tasks(model, (x,))
    assert collected.skipped == [] and collected.graphs >= 3 and collected.calls >= 2
