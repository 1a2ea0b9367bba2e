"""An exported model library keeps the captured-shape guard: TVM's VM checks every input it is given."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the model path needs PyTorch")

from autotune.model import build_model  # noqa: E402


class _Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


def test_exported_library_runs_and_rejects_other_shapes_and_dtypes(tmp_path):
    import tvm
    from tvm import relax

    model = _Small().eval()
    x = torch.randn(2, 8)
    built = build_model(model, inputs=(x,))
    path = tmp_path / "small.so"
    built.export_library(path)
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x.numpy()))
    out = out[0] if not hasattr(out, "numpy") else out
    np.testing.assert_allclose(out.numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception, match=r"shape\[0\] mismatch"):
        vm["main"](tvm.runtime.tensor(np.zeros((3, 8), "float32")))
    with pytest.raises(Exception, match="dtype float32"):
        vm["main"](tvm.runtime.tensor(np.zeros((2, 8), "float64")))


class _Activations(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(32, 48)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc(x))
        return torch.softmax(h, dim=-1) + torch.tanh(h) + torch.exp(-h * h)


def test_fast_math_activations_match_torch():
    """Softmax, exp, erf (GELU) and tanh are built as fast polynomials; they still match PyTorch."""
    model = _Activations().eval()
    x = torch.randn(4, 16, 32) * 3
    built = build_model(model, inputs=(x,))
    np.testing.assert_allclose(built(x), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)  # fp32 sums of the linears
