"""Whole-model path: extraction, build (default and tuned), guard, task scheduler, CLI (export-db: see
test_export_db.py)."""

from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the model path needs PyTorch")

from autotune.errors import AutotuneError
from autotune.model import build_model, capture, extract_tasks, tune_model
from autotune.model.cli import add_model_commands
from autotune.model.scheduler import TaskState, gradient, pick_task
from autotune.task import make_task
from tests.conftest import UNHURRIED, FakeBuilder, SimulatedRunner
from tests.models import conv1d_block, convnet, grouped_block, tiny_attention, upsample_block, video_block

CONVNET = "tests/models.py:convnet"


@pytest.fixture(scope="module")
def conv_captured():
    warnings.simplefilter("ignore")
    model, inputs = convnet()
    return model, inputs, capture(model, inputs)


@pytest.fixture(scope="module")
def attn_captured():
    model, inputs = tiny_attention()
    return model, inputs, capture(model, inputs)


def _summary(tasks):
    return sorted((t.op, tuple(sorted(t.shape.items())), w) for t, w in tasks)


def _expect(op, weight, **shape):
    return (op, tuple(sorted(make_task(op, shape).shape.items())), weight)


def test_extract_convnet(conv_captured):
    _, _, cap = conv_captured
    assert _summary(extract_tasks(cap)) == sorted([
        _expect("conv2d", 1, N=1, C=3, H=16, W=16, K=16, R=3, S=3, stride=1, padding=1, dilation=1),
        _expect("depthwise_conv2d", 1, N=1, C=16, H=16, W=16, R=3, S=3, stride=2, padding=1),
        _expect("conv2d", 2, N=1, C=16, H=8, W=8, K=16, R=3, S=3, stride=1, padding=1, dilation=1),
        _expect("dense", 1, batch=1, in_features=16, out_features=10),  # the classifier: a linear layer
    ])


def test_extract_attention_folds_batch_dims(attn_captured):
    _, _, cap = attn_captured
    assert _summary(extract_tasks(cap)) == sorted([
        _expect("dense", 1, batch=16, in_features=32, out_features=96),  # qkv: [1,16,32] @ W^T, batch folded
        _expect("batch_matmul", 2, B=2, M=16, N=16, K=16),  # q@k^T and att@v: [1,2,16,*] -> B=2
        _expect("dense", 1, batch=16, in_features=32, out_features=32),
    ])


class _Bilinear(torch.nn.Module):
    """x @ W^T with W a parameter (a dense task) and x @ y with y an input (stays a matmul)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(24, 16))

    def forward(self, x, y):
        return x @ self.w.t() @ y


def test_only_a_constant_weight_makes_a_dense_task():
    model, inputs = _Bilinear().eval(), (torch.randn(8, 16), torch.randn(24, 12))
    cap = capture(model, inputs)
    assert _summary(extract_tasks(cap)) == sorted([
        _expect("dense", 1, batch=8, in_features=16, out_features=24),
        _expect("matmul", 1, M=8, N=12, K=24),
    ])
    built = build_model(cap)
    with torch.no_grad():
        np.testing.assert_allclose(built(*inputs), model(*inputs).numpy(), rtol=1e-4, atol=1e-4)


def test_extract_from_factory_and_pt2(tmp_path):
    model, inputs = convnet()
    path = tmp_path / "convnet.pt2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.export.save(torch.export.export(model, inputs), str(path))
    assert _summary(extract_tasks(str(path))) == _summary(extract_tasks(CONVNET))


class _ConvOfAnInput(torch.nn.Module):
    """A convolution whose weight is an input, not a constant: the model itself must pack it."""

    def __init__(self, groups: int = 1):
        super().__init__()
        self.groups = groups

    def forward(self, x, w):
        return torch.nn.functional.conv2d(x, w, padding=1, groups=self.groups)


PACKED_VARIANTS = {"conv2d": ("vec_axis", "k", 1), "depthwise_conv2d": ("vec_axis", "c", 16),
                   "group_conv2d": ("vec_axis", "k", 4)}  # knob, value, groups


@pytest.mark.parametrize("op", list(PACKED_VARIANTS))
@pytest.mark.parametrize("weight", ["constant", "input"])
def test_packed_conv_kernel_gets_its_weight_packed(op, weight, tmp_path):
    """A conv2d (or depthwise) kernel of the packed variant takes its weight packed ahead: a constant weight is
    packed at build time, any other one by a layout_transform the built model runs."""
    from autotune.templates import default_template, space_of
    from autotune.tune import tune

    knob, packed_value, groups = PACKED_VARIANTS[op]
    x, w = torch.randn(1, 16, 8, 8), torch.randn(16, 16 // groups, 3, 3)
    if weight == "constant":
        model, inputs = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False, groups=groups).eval(), (x,)
        with torch.no_grad():
            model.weight.copy_(w)
    else:
        model, inputs = _ConvOfAnInput(groups), (x, w)
    cap = capture(model, inputs)
    [(task, _)] = extract_tasks(cap)
    assert task.op == op
    log = tmp_path / "conv.jsonl"
    tune(task, trials=12, tuner="random", log=log, builder=FakeBuilder(), retime=0,
         runner=SimulatedRunner(lambda cfg: 1e-4 if cfg[knob] == packed_value else 1e-3))
    built = build_model(cap, logs=[log])
    [kernel] = built.report.kernels
    space = space_of(default_template(task), task)
    assert kernel.tuned and space.get(kernel.config_index)[knob] == packed_value
    packs = [name for name in built.report.generic if "layout_transform" in name]
    assert bool(packs) == (weight == "input"), built.report.generic  # a constant weight is packed at build time
    with torch.no_grad():
        np.testing.assert_allclose(built(*inputs), model(*inputs).numpy(), rtol=1e-4, atol=1e-4)


def test_grouped_convolutions_are_tasks_and_build_right():
    """Grouped convolutions (ResNeXt, RegNet), dilated depthwise ones and depthwise ones with a channel multiplier
    are group_conv2d tasks (the batch norm after one folded into it); strides that differ over H and W are a stride-1
    convolution over the data's phases (`_phase_split`), dilations that differ an undilated one over the phases
    batched (`_dilation_split`), and the model builds right."""
    model, inputs = grouped_block()
    cap = capture(model, inputs)
    assert _summary(extract_tasks(cap)) == sorted([
        _expect("conv2d", 1, C=16, H=12, W=12, K=32, R=1, S=1),
        _expect("group_conv2d", 1, C=32, H=12, W=12, K=32, R=3, S=3, groups=4, padding=1),
        _expect("conv2d", 1, C=32, H=12, W=12, K=16, R=1, S=1),
        _expect("group_conv2d", 1, C=16, H=12, W=12, K=24, R=3, S=3, groups=2, stride=2, padding=2, dilation=2),
        _expect("group_conv2d", 1, C=24, H=6, W=6, K=24, R=3, S=3, groups=24, padding=2, dilation=2),
        _expect("group_conv2d", 1, C=24, H=6, W=6, K=48, R=3, S=3, groups=24, padding=1),
        _expect("group_conv2d", 1, C=96, H=4, W=8, K=24, R=2, S=3, groups=3),  # strides (2, 1): 2 row phases
        _expect("conv2d", 1, N=2, C=24, H=5, W=5, K=8, R=3, S=3),  # dilations (1, 2): 2 column phases, batched
    ])
    built = build_model(cap)
    assert len(built.report.kernels) == 8
    assert [s.split(":")[1].strip() for s in built.report.skipped] == [
        "dilations (1, 2) differ and the convolution is strided"]
    with torch.no_grad():
        np.testing.assert_allclose(built(*inputs), model(*inputs).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("conv,op", [
    (dict(in_channels=6, out_channels=6, kernel_size=(3, 2), padding=(2, 1), dilation=(2, 3), groups=6),
     "depthwise_conv2d"),
    (dict(in_channels=4, out_channels=8, kernel_size=3, padding=(0, 3), dilation=(3, 1), groups=2), "group_conv2d"),
    (dict(in_channels=3, out_channels=5, kernel_size=(2, 3), dilation=(2, 1)), "conv2d"),
], ids=["depthwise", "grouped", "odd-sizes"])
def test_dilations_that_differ_are_phases_of_an_undilated_convolution(conv, op):
    """Over data of odd height and width (the phases' outputs cropped), grouped and depthwise too."""
    model = torch.nn.Conv2d(**conv).eval()
    x = torch.randn(2, conv["in_channels"], 11, 9)
    cap = capture(model, (x,))
    [(task, calls)] = extract_tasks(cap)
    dh, dw = conv["dilation"]
    assert calls == 1 and task.op == op and task.shape["N"] == 2 * dh * dw and task.shape.get("dilation", 1) == 1
    built = build_model(cap)
    with torch.no_grad():
        np.testing.assert_allclose(built(x), model(x).numpy(), rtol=1e-4, atol=1e-5)


def test_conv1d_and_one_axis_padding_are_tasks_and_build_right():
    """A 1-d convolution is a conv2d of height 1 (grouped and depthwise ones too, a batch norm after one folded
    into its weight); padding on one axis only (Inception's 1x7, a 1-d one's) is a pad before a task with
    padding 0."""
    model, inputs = conv1d_block()
    cap = capture(model, inputs)
    script = cap.mod.script()
    assert "batch_norm" not in script and script.count("R.multiply") == 1  # the model's own 2 * y
    assert _summary(extract_tasks(cap)) == sorted([
        _expect("conv2d", 1, C=8, H=1, W=42, K=16, R=1, S=3, stride=2),
        _expect("depthwise_conv2d", 1, C=16, H=1, W=26, R=1, S=7),
        _expect("group_conv2d", 1, C=16, H=1, W=24, K=24, R=1, S=3, groups=4, dilation=2),
        _expect("conv2d", 1, C=24, H=2, W=26, K=16, R=1, S=7),
        _expect("conv2d", 1, C=16, H=4, W=20, K=8, R=3, S=1),
    ])
    built = build_model(cap)
    assert len(built.report.kernels) == 5 and not built.report.skipped
    # the bias adds and ReLUs after the [N, K, 1, W] -> [N, K, W] views run in the kernels' write-backs
    epilogues = {name: how for name, how in built.report.generic.items() if "add" in name or "relu" in name}
    assert len(epilogues) == 4 and all(name.startswith("fused_autotune") for name in epilogues), epilogues
    assert all(how.startswith("epilogue fused") and "apart" not in how for how in epilogues.values()), epilogues
    with torch.no_grad():
        np.testing.assert_allclose(built(*inputs), model(*inputs).numpy(), rtol=1e-4, atol=1e-4)


def test_transposed_convolutions_are_conv2d_tasks_and_build_right():
    """A transposed convolution is a conv2d over its input with one output channel per (channel, phase), shuffled
    and cropped: U-Net's 2x2 stride 2 is a 1x1 conv2d of 4x the channels, DCGAN's 4x4 stride 2 a 2x2 one; a
    grouped one a group_conv2d (FCN's depthwise upsampling: 4 outputs per channel), a depthwise one of stride 1 a
    depthwise_conv2d; a dilated one of stride 1 a dilated conv2d, a strided one that of its kernel with zeros
    between the taps."""
    model, inputs = upsample_block()
    cap = capture(model, inputs)
    assert _summary(extract_tasks(cap)) == sorted([
        _expect("conv2d", 1, C=8, H=3, W=5, K=32, R=1, S=1),
        _expect("conv2d", 1, C=8, H=6, W=10, K=24, R=2, S=2, padding=1),
        _expect("conv2d", 1, C=6, H=12, W=20, K=16, R=2, S=2, padding=1),  # the output padding's row: padding 1
        _expect("conv2d", 1, C=4, H=25, W=40, K=8, R=2, S=1),  # padded (1, 0, 0, 0) by a pad
        _expect("group_conv2d", 1, C=4, H=50, W=43, K=4, R=3, S=3, groups=2),  # padded (2, 1, 2, 1)
        _expect("group_conv2d", 1, C=4, H=47, W=40, K=16, R=2, S=2, groups=4, padding=1),
        _expect("depthwise_conv2d", 1, C=4, H=97, W=83, R=3, S=3),
        _expect("conv2d", 1, C=4, H=100, W=86, K=4, R=3, S=3, dilation=2),  # stride 1: padded (4, 2, 4, 2)
        _expect("conv2d", 1, C=4, H=96, W=82, K=16, R=3, S=3),  # stride 2: the 5x5 kernel with zero taps
        _expect("conv2d", 1, C=4, H=1, W=159, K=16, R=1, S=2),  # 1-d, stride 8: padded (0, 0, 1, 1)
    ])
    built = build_model(cap)
    assert built.report.skipped == []
    with torch.no_grad():
        np.testing.assert_allclose(built(*inputs), model(*inputs).numpy(), rtol=1e-4, atol=1e-5)


def test_conv3d_is_a_conv2d_over_depth_slices_and_builds_right():
    """A 3-d convolution is a conv2d (grouped: group_conv2d) batched over the output's depth slices, with the
    kernel's depth taps in the channels; its batch norm folds into the weight; H and W strides that differ split
    the slices into phases."""
    model, inputs = video_block()
    cap = capture(model, inputs)
    assert "batch_norm" not in cap.mod.script()
    assert _summary(extract_tasks(cap)) == sorted([
        _expect("conv2d", 1, N=6, C=9, H=10, W=10, K=8, R=3, S=3, padding=1),
        _expect("conv2d", 1, N=6, C=8, H=10, W=10, K=8, R=3, S=3, stride=2, padding=1),
        _expect("conv2d", 1, N=6, C=24, H=5, W=5, K=8, R=1, S=1),
        _expect("conv2d", 1, N=3, C=16, H=5, W=5, K=8, R=2, S=2, stride=2),
        _expect("group_conv2d", 1, N=3, C=24, H=2, W=2, K=8, R=3, S=3, groups=2, padding=1),
        _expect("group_conv2d", 1, N=3, C=24, H=2, W=2, K=8, R=3, S=3, groups=8, padding=1),
        _expect("conv2d", 1, N=3, C=16, H=1, W=2, K=4, R=1, S=1),  # strides (1, 2, 1): 2 row phases
    ])
    built = build_model(cap)
    assert built.report.skipped == []
    with torch.no_grad():
        np.testing.assert_allclose(built(*inputs), model(*inputs).numpy(), rtol=1e-4, atol=1e-5)


def test_transposed_weight_computes_conv_transpose():
    """Each (stride, kernel, padding) of conv_transpose2d equals the conv2d of `transposed_weight`, shuffled and
    cropped, on numbers."""
    from autotune.model.extract import transposed_weight

    rng = np.random.default_rng(0)
    for stride, kernel, padding, groups in [((2, 2), (2, 2), (0, 0), 1), ((2, 2), (4, 4), (1, 1), 1),
                                            ((3, 2), (5, 3), (2, 1), 1), ((1, 1), (3, 3), (1, 1), 1),
                                            ((2, 2), (1, 1), (0, 0), 1), ((2, 2), (4, 4), (1, 1), 2),
                                            ((2, 1), (3, 3), (1, 1), 6)]:
        x = torch.from_numpy(rng.standard_normal((1, 6, 5, 6)).astype("float32"))
        w = rng.standard_normal((6, 6 // groups, *kernel)).astype("float32")
        ref = torch.nn.functional.conv_transpose2d(x, torch.from_numpy(w), stride=stride, padding=padding,
                                                   groups=groups)
        v = torch.from_numpy(transposed_weight(w, stride, groups))
        rs, ss = v.shape[2:]
        phases = torch.nn.functional.conv2d(torch.nn.functional.pad(x, (ss - 1, 4, rs - 1, 4)), v, groups=groups)
        n, k, h, wd = phases.shape
        shuffled = phases.reshape(n, 6, *stride, h, wd).permute(0, 1, 4, 2, 5, 3).reshape(n, 6, h * stride[0],
                                                                                        wd * stride[1])
        top, left = padding
        got = shuffled[:, :, top:top + ref.shape[2], left:left + ref.shape[3]]
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("which", ["conv", "attn"])
def test_build_without_logs_matches_torch(which, conv_captured, attn_captured):
    model, inputs, cap = conv_captured if which == "conv" else attn_captured
    built = build_model(cap)
    assert not any(k.tuned for k in built.report.kernels)
    assert all("no valid record" in k.reason for k in built.report.kernels)
    x = torch.randn(*inputs[0].shape)
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(built(x), ref, rtol=1e-4, atol=1e-5)
    assert "generic" in set(built.report.generic.values())


def test_guard_rejects_other_shapes(conv_captured):
    _, _, cap = conv_captured
    built = build_model(cap)
    with pytest.raises(AutotuneError, match=r"captured for inputs \[1, 3, 16, 16\] float32; got \[1, 3, 8, 8\]"):
        built(np.zeros((1, 3, 8, 8), "float32"))
    with pytest.raises(AutotuneError, match="float64"):
        built(np.zeros((1, 3, 16, 16), "float64"))


@pytest.mark.slow  # a real tuning run (the build from a log: test_packed_conv_kernel_gets_its_weight_packed)
def test_build_with_tuned_log(conv_captured, tmp_path, worker_env):
    from autotune.tune import tune

    model, inputs, cap = conv_captured
    task = next(t for t, w in extract_tasks(cap) if t.op == "conv2d" and w == 2)
    log = tmp_path / "model.jsonl"
    result = tune(task, trials=2, tuner="random", log=log, batch_size=2, runner_options=UNHURRIED)
    assert result.best is not None, [r.result.message for r in result.records]
    built = build_model(cap, logs=[log])
    tuned = [k for k in built.report.kernels if k.tuned]
    assert [k.task.key for k in tuned] == [task.key]
    assert tuned[0].config_index == result.best.input.config.index and tuned[0].gflops > 0
    assert "tuned" in built.report.summary()
    with torch.no_grad():
        ref = model(*inputs).numpy()
    np.testing.assert_allclose(built(*inputs), ref, rtol=1e-4, atol=1e-5)
    built.export_library(tmp_path / "model.so")
    assert (tmp_path / "model.so").stat().st_size > 0


# ---- task scheduler -----------------------------------------------------------------------

def _state(weight, history, trials=None):
    s = TaskState(make_task("matmul", {"M": 8, "N": 8, "K": 8}), weight)
    s.best_history = list(history)
    s.trials = len(history) if trials is None else trials
    return s


def test_gradient_prefers_heavy_and_improving_tasks():
    flat = _state(1, [1e-3] * 32)
    improving = _state(1, [2e-3] * 16 + [1e-3] * 16)
    heavy = _state(10, [1e-3] * 32)
    assert gradient(improving, 16) < gradient(flat, 16)
    assert gradient(heavy, 16) < gradient(flat, 16)
    assert pick_task([flat, heavy], 16) is heavy
    cold = _state(1, [1e-3] * 4)
    assert pick_task([heavy, cold], 16) is cold  # warm-up round first


def test_tune_model_budget_weights_and_resume(tmp_path):
    """The real loop with a fake builder and a simulated runner: no kernel is built."""
    log = tmp_path / "m.jsonl"
    fake = {"builder": FakeBuilder(), "runner": SimulatedRunner(lambda cfg: 1e-3 / (1 + cfg.index % 7))}
    first = tune_model(CONVNET, trials=80, log=log, tuner="random", round_trials=8, progress=lambda m: None, **fake)
    counts = {s.task.key: s.trials for s in first.states}
    assert sum(counts.values()) == 80 and first.resumed == 0
    assert all(c >= 8 for c in counts.values())  # everyone got the warm-up round
    again = tune_model(CONVNET, trials=96, log=log, tuner="random", round_trials=8, progress=lambda m: None, **fake)
    assert again.resumed == 80 and again.spent == 16
    assert "96 trials" in again.summary()


def test_tune_model_retimes_each_task_once_the_budget_is_spent(tmp_path):
    """Rounds never re-time; after the last one each task's contenders are timed twice more, every task's in one
    batch per round; its best is the median of the best config's timings (as `autotune build` will pick), and a
    resume counts no re-timing as a trial."""
    from autotune.records import best_record, by_task, load_records, split_retimes

    timed: dict[int, int] = {}

    def cost(cfg):  # every later timing of a config index is 30% slower than its first
        timed[cfg.index] = timed.get(cfg.index, 0) + 1
        return 1e-3 / (1 + cfg.index % 7) * (1 if timed[cfg.index] == 1 else 1.3)

    class Batches(FakeBuilder):  # the tasks of each batch built
        def __init__(self):
            super().__init__()
            self.batches = []

        def build(self, inputs):
            self.batches.append({inp.task.key for inp in inputs})
            return super().build(inputs)
    log = tmp_path / "m.jsonl"
    fake = {"builder": Batches(), "runner": SimulatedRunner(cost)}
    result = tune_model(CONVNET, trials=32, log=log, tuner="random", round_trials=8, progress=lambda m: None, **fake)
    keys = {s.task.key for s in result.states}
    assert len(keys) == 4 and fake["builder"].batches[-2:] == [keys, keys]  # two rounds, each of every task
    logged = by_task(load_records(log))
    for state in result.states:
        trials, retimes = split_retimes(logged[state.task.key])
        assert len(trials) == state.trials == 8 and 2 <= len(retimes) <= 16
        assert state.best == best_record(logged[state.task.key]).result.mean_s > min(state.best_history)
    again = tune_model(CONVNET, trials=32, log=log, tuner="random", round_trials=8, progress=lambda m: None, **fake)
    assert again.resumed == 32 and again.spent == 0 and len(load_records(log)) == sum(map(len, logged.values()))


def test_tune_model_transfers_other_tasks_records_to_xgb(tmp_path, monkeypatch):
    """Each task's xgb tuner lives across its rounds: made at its first round, pre-trained on the folder's other
    logs and the model's other tasks so far (never on the task itself), and before each later round taught the
    other tasks' newer records; all tuners share one feature cache; transfer=[] turns it off."""
    from autotune import tune
    from autotune.tuners.options import XGBOptions
    from autotune.tuners.simple import RandomTuner

    other = make_task("matmul", {"M": 4, "N": 4, "K": 4})
    tune(other, trials=3, tuner="random", log=tmp_path / "other.jsonl", builder=FakeBuilder(),
         runner=SimulatedRunner(lambda cfg: 1e-3), retime=0)
    calls = []

    def spy(name, task, space, ref, *, seed, options, transfer, cache):  # records what the tuner is given
        calls.append({"key": task.key, "name": name, "options": options, "transfer": list(transfer), "cache": cache,
                      "added": []})
        tuner = RandomTuner(task, space, ref, seed=seed)
        tuner.add_transfer = calls[-1]["added"].extend
        return tuner

    monkeypatch.setattr(sys.modules["autotune.tune"], "make_tuner", spy)  # `autotune.tune` names the function
    fake = {"builder": FakeBuilder(), "runner": SimulatedRunner(lambda cfg: 1e-3 / (1 + cfg.index % 7))}
    tune_model(CONVNET, trials=40, log=tmp_path / "m.jsonl", round_trials=8, retime=0,
               progress=lambda m: None, tuner_options=XGBOptions(features="knob"), **fake)
    assert len(calls) == 4 and {c["name"] for c in calls} == {"xgb"}  # one tuner per task for all its rounds
    seen: dict[str, int] = {}  # task key -> its trials before the next tuner was made
    for c in calls:
        keys = [r.task.key for r in c["transfer"]]
        assert c["key"] not in keys and keys.count(other.key) == 3
        assert len(keys) - 3 == sum(seen.values())  # every earlier trial of the others
        assert c["options"].features == "knob" and c["cache"] is calls[0]["cache"]
        seen[c["key"]] = 8
    [again] = [(n, c) for n, c in enumerate(calls) if c["added"]]  # the one task with a second round
    n, c = again
    assert len(c["added"]) == 8 * (len(calls) - 1 - n) and c["key"] not in {r.task.key for r in c["added"]}
    calls.clear()
    tune_model(CONVNET, trials=48, log=tmp_path / "m.jsonl", round_trials=8, transfer=[], retime=0,
               progress=lambda m: None, **fake)
    assert [c["transfer"] for c in calls] == [[]] and calls[0]["added"] == []


# ---- CLI ----------------------------------------------------------------------------------

def _run(argv):
    parser = argparse.ArgumentParser(prog="autotune")
    add_model_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_cli_extract_and_build(tmp_path, capsys):
    assert _run(["extract", CONVNET]) == 0
    out = capsys.readouterr().out
    assert "4 tasks, 5 calls" in out and "depthwise_conv2d" in out and "%" in out
    assert _run(["build", CONVNET, "-o", str(tmp_path / "m.so")]) == 0
    assert "0 of 4 tasks tuned" in capsys.readouterr().out and (tmp_path / "m.so").exists()
    with pytest.raises(AutotuneError, match="does not exist"):
        _run(["build", CONVNET, "--logs", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "x.so")])
    with pytest.raises(AutotuneError, match="no function"):
        _run(["extract", "tests/models.py:nope"])


@pytest.mark.parametrize("flags", [[], ["--compile"]])
def test_cli_extract_says_which_calls_are_left_to_tvm(flags, capsys):
    assert _run(["extract", "tests/models.py:grouped_block", *flags]) == 0
    out = capsys.readouterr().out
    assert "8 tasks, 8 calls" in out
    [line] = [line for line in out.splitlines() if "left to TVM" in line]
    assert "conv2d data=(1, 8, 3, 6)" in line and line.endswith("dilations (1, 2) differ and the convolution is strided")


def test_generic_schedule_vectorises_by_the_largest_power_of_two_dividing_the_inner_loop():
    from autotune.model.default_schedule import _vector_width

    lanes = 8  # AVX2
    assert [_vector_width(n, lanes) for n in (56, 28, 14, 7, 1, 9, 64)] == [8, 4, 2, 7, 1, 1, 8]
    assert _vector_width(56, 16) == 8  # AVX-512: a 56-wide row still takes 8-lane vectors


@pytest.mark.parametrize("mcpu, lanes, gemm_j", [("haswell", 8, 24), ("skylake-avx512", 16, 32)])
def test_heuristic_register_tiles_follow_the_targets_vectors(mcpu, lanes, gemm_j):
    """Untuned builds: one vector of output channels per conv2d register tile, GEMM rows of 3 AVX2 vectors (the
    AVX-512 tiles would spill AVX2's 16 registers) or 2 AVX-512 ones."""
    from autotune.model.default_schedule import heuristic_configs
    from autotune.templates import default_template

    target = {"kind": "llvm", "mcpu": mcpu, "num-cores": 2}
    conv = make_task("conv2d", {"N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3, "stride": 1,
                                "padding": 1, "dilation": 1}, target=target)
    dense = make_task("dense", {"batch": 128, "in_features": 768, "out_features": 3072}, target=target)
    first = {}
    for task in (conv, dense):
        first[task.op] = heuristic_configs(default_template(task), task)[0]
    assert first["conv2d"]["tile_k"][-1] == lanes
    assert first["dense"]["tile_j"][-1] == gemm_j
