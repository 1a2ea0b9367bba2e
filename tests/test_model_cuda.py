"""The model path on CUDA: extraction, build with default and logged configs, epilogue fusion, DLight for the other
functions; the generated CUDA is compiled by nvcc here (no GPU), run and compared with PyTorch on a GPU machine."""

from __future__ import annotations

import re
import shutil
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the model path needs PyTorch")

from autotune.errors import AutotuneError
from autotune.model import build_model, capture, extract_tasks
from autotune.database import TuningDatabase
from tests.conftest import FakeBuilder, SimulatedRunner

CUDA = {"kind": "cuda", "arch": "sm_90"}


class _Net(torch.nn.Module):
    """A conv + batch norm + ReLU, a depthwise conv with GELU and a residual add, a grouped conv, a linear layer,
    layer norm and softmax."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.grouped = torch.nn.Conv2d(16, 16, 3, padding=1, groups=4)
        self.fc, self.ln = torch.nn.Linear(16 * 8 * 8, 10), torch.nn.LayerNorm(10)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.nn.functional.gelu(self.dw(y)) + y
        return torch.softmax(self.ln(self.fc(self.grouped(y).flatten(1))), -1)


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    model, x = _Net().eval(), torch.randn(2, 3, 8, 8)
    with torch.no_grad():  # batch norm statistics that are not the identity
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    warnings.simplefilter("ignore")
    return model, (x,), capture(model, (x,))


def _cuda_source(built) -> str:
    def find(mod):
        if mod.kind == "cuda":
            return mod
        return next((m for m in map(find, mod.imports) if m is not None), None)

    cuda = find(built.executable.mod)
    assert cuda is not None, "no CUDA module in the executable"
    return cuda.inspect_source()


def test_extract_on_cuda(net):
    left: list[str] = []
    tasks = extract_tasks(net[2], target=CUDA, left=left)
    assert sorted(t.op for t, _ in tasks) == ["conv2d", "dense", "depthwise_conv2d", "group_conv2d"]
    assert all(t.target_kind == "cuda" and t.target["arch"] == "sm_90" for t, _ in tasks)
    assert left == []


def test_an_op_without_a_template_for_the_target_is_left_to_tvm(net, monkeypatch):
    import dataclasses

    from autotune import operators

    grouped = operators.OPS["group_conv2d"]
    cpu_only = dataclasses.replace(grouped, templates={k: r for k, r in grouped.templates.items() if k != "cuda"})
    monkeypatch.setattr(operators, "OPS", {**operators.OPS, "group_conv2d": cpu_only})
    left: list[str] = []
    tasks = extract_tasks(net[2], target=CUDA, left=left)
    assert "group_conv2d" not in {t.op for t, _ in tasks}
    assert len(left) == 1 and "no cuda template for group_conv2d" in left[0]
    built = build_model(net[2], target=CUDA)
    assert len(built.report.kernels) == 3 and "group_conv2d" in built.report.skipped[0]


def test_a_task_no_cuda_config_can_run_is_left_to_tvm():
    """Batch-1 dense over 1000 outputs: at most 25 threads a block (divisors of 1000 up to 32 per axis), which the
    GPU limits reject for a grid of many blocks; a DLight rule takes it."""
    model = torch.nn.Linear(512, 1000).eval()
    cap = capture(model, (torch.randn(1, 512),))
    left: list[str] = []
    assert extract_tasks(cap, target=CUDA, left=left) == []
    assert len(left) == 1 and "within the GPU's limits" in left[0]
    built = build_model(cap, target=CUDA)
    assert built.report.kernels == [] and list(built.report.generic.values()) == ["dlight-reduction"]


def test_cuda_build_with_default_schedules_compiles(net):
    built = build_model(net[2], target=CUDA)
    report = built.report
    assert built.device == "cuda" and report.fusion == "on"
    assert [k.tuned for k in report.kernels] == [False] * 4
    how = set(report.generic.values())
    assert any(h.startswith("epilogue fused") for h in how), how  # bias, batch norm, ReLU, GELU into the kernels
    assert any(h.startswith("dlight-") for h in how), how  # layer norm, softmax
    src = _cuda_source(built)
    assert len(re.findall(r"__global__ void", src)) >= len(report.generic)
    if shutil.which("nvcc") is not None:  # the whole model's CUDA compiles (ptxas included)
        import tvm
        from tvm.support import nvcc

        with tvm.target.Target(CUDA):
            assert len(nvcc.compile_cuda(src, target_format="cubin", arch="sm_90", compiler="nvcc")) > 0
    if not tvm_cuda_exists():
        with pytest.raises(AutotuneError, match="no cuda device"):
            built(*net[1])


def test_cuda_build_applies_the_logged_config(net, tmp_path):
    from autotune.templates import default_template, space_of
    from autotune.tune import tune

    [dense] = [t for t, _ in extract_tasks(net[2], target=CUDA) if t.op == "dense"]
    log = tmp_path / "dense.jsonl"
    tune(dense, trials=12, tuner="random", log=log, builder=FakeBuilder(), retime=0,
         runner=SimulatedRunner(lambda cfg: 1e-5 if cfg["fetch_vec"] == 1 else 1e-3))
    built = build_model(net[2], logs=[log], target=CUDA)
    [kernel] = [k for k in built.report.kernels if k.task.op == "dense"]
    space = space_of(default_template(dense), dense)
    assert kernel.tuned and space.get(kernel.config_index)["fetch_vec"] == 1
    assert "__global__" in _cuda_source(built)


@pytest.mark.slow  # 32 xgb trials on loop features of CUDA schedules, then a CUDA build
def test_tune_model_on_cuda_then_build(net, tmp_path):
    """tune_model's whole loop on CUDA tasks (the xgb tuner on loop features of CUDA schedules; the GPU simulated),
    then a build from its log: every task on its logged best config."""
    from autotune.model import tune_model

    log = tmp_path / "net.jsonl"
    runner = SimulatedRunner(lambda cfg: 1e-4 * (1 + cfg.index % 7))
    result = tune_model(net[2], trials=32, log=log, target=CUDA, tuner="xgb", builder=FakeBuilder(), runner=runner,
                        round_trials=8, retime=0)
    assert result.spent == 32 and sum(s.trials for s in result.states) == 32
    built = build_model(net[2], logs=[log], target=CUDA)
    best = TuningDatabase.open([log]).best_by_task()
    assert [k.tuned for k in built.report.kernels] == [True] * 4
    assert [k.config_index for k in built.report.kernels] == [best[k.task.key].input.config.index
                                                             for k in built.report.kernels]
    assert "__global__" in _cuda_source(built)


def test_torch_backend_refuses_cuda():
    from autotune.torch_backend import Settings

    with pytest.raises(AutotuneError, match="llvm"):
        Settings.parse({"target": "cuda"})


def tvm_cuda_exists() -> bool:
    import tvm

    return bool(tvm.cuda(0).exist)


def test_cuda_model_matches_torch_on_gpu(net):
    if not tvm_cuda_exists():
        pytest.skip("no CUDA device: the built model runs on a GPU machine")
    model, inputs, captured = net
    built = build_model(captured, target=CUDA)
    with torch.no_grad():
        np.testing.assert_allclose(built(*inputs), model(*inputs).numpy(), rtol=1e-4, atol=1e-5)


STEPS = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}  # half a step of each type's significand


@pytest.fixture(scope="module", params=list(STEPS))
def narrow_mlp(request):
    """A float16 (bfloat16) MLP whose linear layers are dense tasks of its type on the tensor cores (batch and
    widths multiples of 16)."""
    torch.manual_seed(0)
    dtype = getattr(torch, request.param)
    model = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)).eval().to(dtype)
    x = torch.randn(32, 256).to(dtype)
    return request.param, model, (x,), capture(model, (x,))


def test_a_narrow_float_model_builds_on_tensor_cores(narrow_mlp):
    dtype, _, _, captured = narrow_mlp
    built = build_model(captured, target=CUDA)
    assert [str(k.task) for k in built.report.kernels] == [
        f"dense(batch=32,in_features=256,out_features=128) {dtype} cuda",
        f"dense(batch=32,in_features=128,out_features=64) {dtype} cuda"]
    assert sorted(built.report.generic.values()) == ["epilogue fused (1 ops)", "epilogue fused (2 ops)"]
    src = _cuda_source(built)
    assert src.count("wmma::mma_sync") >= 2
    if shutil.which("nvcc") is not None:
        import tvm
        from tvm.support import nvcc

        with tvm.target.Target(CUDA):
            assert len(nvcc.compile_cuda(src, target_format="cubin", arch="sm_90", compiler="nvcc")) > 0


@pytest.fixture(scope="module")
def half_convnet():
    """A float16 convolution stack whose convolutions are implicit GEMMs on the tensor cores (weights relaid)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 32, 3, stride=2, padding=1)).eval().half()
    x = torch.randn(1, 16, 16, 16).half()
    return model, (x,), capture(model, (x,))


def test_a_float16_convnet_builds_on_tensor_cores(half_convnet):
    built = build_model(half_convnet[2], target=CUDA)
    assert [(k.task.op, k.task.dtype) for k in built.report.kernels] == [("conv2d", "float16")] * 2
    src = _cuda_source(built)
    assert src.count("wmma::mma_sync") >= 2
    if shutil.which("nvcc") is not None:
        import tvm
        from tvm.support import nvcc

        with tvm.target.Target(CUDA):
            assert len(nvcc.compile_cuda(src, target_format="cubin", arch="sm_90", compiler="nvcc")) > 0


def test_float16_convnet_matches_torch_on_gpu(half_convnet):
    if not tvm_cuda_exists():
        pytest.skip("no CUDA device: the built model runs on a GPU machine")
    model, inputs, captured = half_convnet
    out = np.asarray(build_model(captured, target=CUDA)(*inputs)).astype(np.float32)
    with torch.no_grad():
        ref = model(*inputs).float().numpy()
    assert np.abs(out - ref).max() <= 8 * STEPS["float16"] * np.abs(ref).max()


def test_narrow_float_model_matches_torch_on_gpu(narrow_mlp):
    if not tvm_cuda_exists():
        pytest.skip("no CUDA device: the built model runs on a GPU machine")
    dtype, model, inputs, captured = narrow_mlp
    out = np.asarray(build_model(captured, target=CUDA)(*inputs)).astype(np.float32)
    with torch.no_grad():
        ref = model(*inputs).float().numpy()
    assert np.abs(out - ref).max() <= 8 * STEPS[dtype] * np.abs(ref).max()  # a few roundings of the type
