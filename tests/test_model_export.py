"""An exported model library keeps the captured-shape guard: TVM's VM checks every input it is given."""

from __future__ import annotations

import math

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


class _Powers(torch.nn.Module):
    def forward(self, x):  # GPT-2's GELU takes torch.pow(x, 3.0)
        return torch.pow(x, 3.0) + x ** 2, torch.pow(x.abs(), 2.5)


def test_squares_and_cubes_are_products_other_powers_stay():
    """x ** 2 and x ** 3 import as products (PyTorch computes them so; TVM's power calls the C library's scalar
    powf on every element), other exponents as TVM's power; all equal to PyTorch."""
    from autotune.model.capture import capture

    model, x = _Powers().eval(), torch.randn(4, 64) * 3
    powers = [line for line in capture(model, (x,)).mod.script().splitlines() if "R.power(" in line]
    assert len(powers) == 1 and "2.5" in powers[0], powers
    for got, want in zip(build_model(model, inputs=(x,))(x), model(x)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)


class _Masks(torch.nn.Module):
    """What TVM 0.27 imported or compiled wrong: a select from the end (read before the tensor), a cumsum of bools
    (kept bool), comparisons and arithmetic of two bool tensors (not compiled), index tensors after sliced
    dimensions (broadcast against them: not imported when their shapes differ, as in F.unfold), an arange counting
    down (two elements too many), an integer tensor times a float (kept integer), assignments through a bool mask
    (bool indices refused), any over all dimensions and unfold (no importer), as_strided windows that overlap,
    of a contiguous tensor or a transposed one (refused), and tensors filled with -inf or NaN (not compiled)."""

    def forward(self, x):
        a, b = x[..., 0] > 0, x[..., 1] > 0
        masked, lead = x.clone(), x[0].clone()
        masked[x > 0.5] = 0.0
        lead[x[0, :, 0, 0] > 0] = 1.0
        rows = torch.arange(3).reshape(3, 1, 1) + torch.arange(2).reshape(1, 2, 1)  # [3, 2, 1] and [1, 8]
        return (x[:, :, -1, :] * 2, torch.cumsum(a, dim=1), a == b, a != b, a < b, torch.maximum(a, b), a + b,
                a * b, x[:, :, rows, torch.arange(8).reshape(1, 8)],
                x[0, 0, :, :1] + torch.arange(x.shape[2], -x.shape[2], -2)[:, None],
                torch.arange(2.0, -1.0, -0.5) * x[0, 0, 0, :6], torch.arange(6) * 0.5 + x[0, 0, 1, :6], masked, lead,
                torch.any(x > 2.5), x.reshape(12, 16).as_strided((5, 4, 16), (32, 16, 1)) * 2,
                x.reshape(6, 32).t().as_strided((5, 8, 8), (32, 4, 1)) + 0, x[0, :, 0, :].t().unfold(1, 3, 2) + 1,
                torch.full_like(x, -math.inf).where(x > 0, x), x.masked_fill(x < -1, -math.inf) * 2,
                torch.full((2, 3), math.nan) + x[0, 0, 0, :3])


class _Fourier(torch.nn.Module):
    """FFTs of a real tensor (TVM has no complex tensors): FNet's token mixing, an inverse one, a one-sided one, a
    round trip and a normalised one's imaginary part."""

    def forward(self, x):
        mixed = torch.fft.fftn(x, dim=(1, 2))
        return (mixed.real + 1, mixed.imag, torch.fft.ifft(x, dim=1, norm="ortho").real, torch.fft.rfft(x).real,
                torch.fft.ifft(torch.fft.fft(x, dim=1), dim=1).real, torch.fft.fft(x, norm="forward").imag)


def _on_tvm(model, x, path: str) -> list:
    """The model's outputs built by `autotune build` ("export") or run by the torch.compile backend ("compile"),
    where its graph must run on TVM (a fallback to eager fails the test)."""
    import warnings

    import autotune.torch_backend as tb

    if path == "export":
        return build_model(model, inputs=(x,))(x)
    torch._dynamo.reset()
    tb.clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tb.AutotuneFallbackWarning)
        got = [t.numpy() for t in torch.compile(model, backend="autotune")(x)]
    torch._dynamo.reset()
    return got


@pytest.mark.slow  # a model build each way (export, compile)
@pytest.mark.parametrize("path", ["export", "compile"])
def test_fft_parts_are_real_matmuls(path):
    from autotune.model import capture, extract_tasks

    model = _Fourier().eval()
    x = torch.randn(2, 8, 16)
    if path == "export":
        assert {task.op for task, _ in extract_tasks(capture(model, (x,)))} == {"matmul"}
    for g, w in zip(_on_tvm(model, x, path), model(x)):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=2e-5)


@pytest.mark.slow  # a model build each way (export, compile)
@pytest.mark.parametrize("path", ["export", "compile"])
def test_importer_mismatches_are_mended(path):
    model = _Masks().eval()
    x = torch.randn(1, 6, 4, 8)
    want = [t.numpy() for t in model(x)]
    got = _on_tvm(model, x, path)
    assert [g.dtype for g in got] == [w.dtype for w in want]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
