"""Models in bfloat16: their products become bf16 tasks, a build computes them with the bf16 kernels and matches
PyTorch in bf16 (layer norms in float32, as PyTorch computes them); what has no bf16 task is left to TVM with its
reason."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from autotune.model import build_model, capture
from autotune.model.extract import find_sites, resolve_target

BF16_STEP = 2.0 ** -8  # half of bf16's significand step: the rounding of one value


def _model(which: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if which == "mlp":
        return nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 32, bias=False)), torch.randn(40, 64)
    if which == "conv":
        return nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1, bias=False),
                             nn.Conv2d(64, 32, 3, stride=2, padding=1)), torch.randn(1, 32, 12, 12)
    if which == "mobile":  # an inverted residual's convolutions: expand, depthwise, project
        return nn.Sequential(nn.Conv2d(32, 64, 1), nn.ReLU6(), nn.Conv2d(64, 64, 3, padding=1, groups=64),
                             nn.ReLU6(), nn.Conv2d(64, 32, 1)), torch.randn(1, 32, 10, 10)
    return nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0), torch.randn(2, 16, 64)


@pytest.mark.parametrize("which,ops", [
    ("mlp", ["dense", "dense"]),
    ("conv", ["conv2d", "conv2d", "conv2d"]),
    ("mobile", ["conv2d", "depthwise_conv2d", "conv2d"]),
    ("encoder", ["dense", "dense", "dense", "dense"]),  # the in-projection a bmm by the expanded weight in torch
])
def test_bf16_model_products_are_bf16_tasks_and_build_right(which, ops) -> None:
    model, x = _model(which)
    model, x = model.eval().to(torch.bfloat16), x.to(torch.bfloat16)
    captured = capture(model, (x,))
    sites, skipped = find_sites(captured.mod, resolve_target("llvm"))
    narrow = [s.task for s in sites if s.task.dtype == "bfloat16"]
    assert [t.op for t in narrow] == ops
    assert not skipped
    out = np.asarray(build_model(captured)(x))
    assert str(out.dtype) == "bfloat16"
    ref = model(x).detach().float().numpy()
    err = float(np.abs(out.astype(np.float32) - ref).max())
    assert err <= 8 * BF16_STEP * float(np.abs(ref).max()), err  # a few roundings apart, as PyTorch's own bf16 is


def test_a_float16_model_on_the_cpu_is_left_to_tvm_with_the_reason() -> None:
    model = nn.Sequential(nn.Linear(64, 96), nn.ReLU()).eval().half()
    sites, skipped = find_sites(capture(model, (torch.randn(8, 64).half(),)).mod, resolve_target("llvm"))
    assert not sites
    assert [(s.what, s.reason) for s in skipped] == [
        ("dense(batch=8,in_features=64,out_features=96) float16 llvm",
         "no float16 template for dense on llvm yet (float16 on llvm: none)")]


def test_the_torch_compile_backend_runs_a_bf16_model() -> None:
    import warnings

    import autotune.torch_backend as tb

    model, x = _model("mlp")
    model, x = model.eval().to(torch.bfloat16), x.to(torch.bfloat16)
    torch._dynamo.reset()
    tb.clear_cache()
    try:
        with torch.no_grad(), warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            out = torch.compile(model, backend="autotune")(x)
            ref = model(x)
    finally:
        torch._dynamo.reset()
    assert not [w for w in record if issubclass(w.category, tb.AutotuneFallbackWarning)]
    assert out.dtype == torch.bfloat16 and tb.STATS.builds == 1
    assert float((out.float() - ref.float()).abs().max()) <= 8 * BF16_STEP * float(ref.float().abs().max())
