"""Models quantized by PyTorch (PT2E's pattern: quantize / dequantize around float32 products): their convolutions
and linear layers become int8 tasks, a build computes them in int8 and matches the quantized model run by PyTorch;
a quantized product autotune cannot compute in int8 is refused with its reason.

The models write PT2E's converted pattern by hand (`torch.ops.quantized_decomposed`), so these tests need no
quantizer; one test runs torchao's X86InductorQuantizer where torchao is installed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers the quantized_decomposed ops
from autotune.errors import AutotuneError
from autotune.model import build_model, capture
from autotune.model.extract import find_sites, resolve_target

qd = torch.ops.quantized_decomposed


def _quantized(x: torch.Tensor, scale: float, zero: int, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """x quantized and dequantized per tensor, as PT2E's converted model does before each product."""
    low, high = (0, 255) if dtype == torch.uint8 else (-128, 127)
    return qd.dequantize_per_tensor(qd.quantize_per_tensor(x, scale, zero, low, high, dtype), scale, zero, low, high,
                                    dtype)


class QuantizedNet(nn.Module):
    """Two convolutions and a linear layer as PT2E converts them: uint8 activations with a zero point (the padding
    must be the activation's zero: 131 - 128 for the input, 0 - 128 after the ReLU), int8 activations before the
    linear layer, int8 weights per output channel. The first convolution reads 3 channels (an image).
    `weight_zero`: the first weight's zero point (PT2E's are 0)."""

    def __init__(self, weight_zero: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(0)

        def weight(*shape: int) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.randint(-128, 128, shape, generator=g, dtype=torch.int8), \
                torch.rand(shape[0], generator=g, dtype=torch.float64) * 0.004 + 0.001

        for name, shape in (("1", (32, 3, 3, 3)), ("2", (64, 32, 3, 3)), ("3", (10, 64))):
            w, s = weight(*shape)
            self.register_buffer("w" + name, w)
            self.register_buffer("s" + name, s)
            self.register_buffer("z" + name, torch.full((shape[0],), weight_zero if name == "1" else 0))
        self.register_buffer("b1", torch.randn(32, generator=g))
        self.register_buffer("b3", torch.randn(10, generator=g))

    def _weight(self, name: str) -> torch.Tensor:
        w, s, z = (getattr(self, k + name) for k in "wsz")
        return qd.dequantize_per_channel(w, s, z, 0, -128, 127, torch.int8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.conv2d(_quantized(x, 0.02, 131), self._weight("1"), self.b1, padding=1)
        y = F.conv2d(_quantized(F.relu(y), 0.03, 0), self._weight("2"), None, stride=2, padding=1)
        y = _quantized(y.mean((2, 3)), 0.05, 3, torch.int8)
        return F.linear(y, self._weight("3"), self.b3)


def test_a_quantized_models_products_are_int8_tasks_and_build_right() -> None:
    model, x = QuantizedNet().eval(), torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    captured = capture(model, (x,))
    sites, skipped = find_sites(captured.mod, resolve_target("llvm"))
    assert not skipped
    assert [(s.task.op, s.task.dtype) for s in sites] == [("conv2d", "int8"), ("conv2d", "int8"), ("dense", "int8")]
    # the padding is explicit (the activation's zero is not int8's 0), so the convolutions' tasks pad nothing
    assert [(t.shape["H"], t.shape["padding"]) for t in (sites[0].task, sites[1].task)] == [(18, 0), (18, 0)]
    out = np.asarray(build_model(captured)(x))
    with torch.no_grad():
        ref = model(x).numpy()
    # int8 products are exact; PyTorch's reference sums in float32, so a rounding in between may fall the other way
    np.testing.assert_allclose(out, ref, rtol=0, atol=0.02 * float(np.abs(ref).max()))
    assert float(np.abs(out - ref).mean()) < 1e-3 * float(np.abs(ref).max())


class QuantizedLinear(nn.Module):
    """A linear layer of a 3-d input (a transformer's): its matrix product reads the dequantized input through a
    view (PT2E quantizes before flattening)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.register_buffer("w", torch.randint(-128, 128, (48, 64), generator=g, dtype=torch.int8))
        self.register_buffer("s", torch.rand(48, generator=g, dtype=torch.float64) * 0.004 + 0.001)
        self.register_buffer("z", torch.zeros(48, dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = qd.dequantize_per_channel(self.w, self.s, self.z, 0, -128, 127, torch.int8)
        return F.linear(_quantized(x, 0.03, 120), w)


def test_a_quantized_linear_layer_of_a_3d_input_is_an_int8_dense_task() -> None:
    model, x = QuantizedLinear().eval(), torch.randn(2, 10, 64)
    captured = capture(model, (x,))
    sites, skipped = find_sites(captured.mod, resolve_target("llvm"))
    assert [(s.task.op, s.task.dtype, s.task.shape["batch"]) for s in sites] == [("dense", "int8", 20)]
    assert not skipped
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(np.asarray(build_model(captured)(x)), ref, rtol=0, atol=1e-5 * float(np.abs(ref).max()))


def test_a_quantized_product_autotune_cannot_compute_in_int8_is_refused_with_the_reason() -> None:
    with pytest.raises(AutotuneError) as err:
        capture(QuantizedNet(weight_zero=1).eval(), (torch.randn(1, 3, 8, 8),))
    assert str(err.value) == ("QuantizedNet is quantized (PT2E), and autotune cannot compute weight zero points other "
                              "than 0 in int8")


def test_a_product_of_a_quantized_activation_and_a_float_weight_is_refused() -> None:
    class HalfQuantized(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 8)

        def forward(self, x):
            return self.fc(_quantized(x, 0.05, 128))

    with pytest.raises(AutotuneError, match="^HalfQuantized is quantized \\(PT2E\\), and autotune cannot compute a "
                                            "matrix product of which one operand only is quantized in int8$"):
        capture(HalfQuantized().eval(), (torch.randn(4, 16),))


def test_a_saved_quantized_program_loads(tmp_path) -> None:
    x = torch.randn(1, 3, 8, 8)
    path = tmp_path / "quantized.pt2"
    torch.export.save(torch.export.export(QuantizedNet().eval(), (x,)), str(path))
    sites, _ = find_sites(capture(str(path)).mod, resolve_target("llvm"))
    assert [s.task.dtype for s in sites] == ["int8"] * 3


def test_torchaos_x86_quantizer_model_builds_right() -> None:
    x86 = pytest.importorskip("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer")
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, stride=2, padding=1),
                          nn.Flatten(), nn.Linear(32 * 8 * 8, 10)).eval()
    x = torch.randn(1, 3, 16, 16)
    quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    prepared(x)
    converted = convert_pt2e(prepared)
    captured = capture(converted, (x,))
    sites, _ = find_sites(captured.mod, resolve_target("llvm"))
    assert [(s.task.op, s.task.dtype) for s in sites] == [("conv2d", "int8"), ("conv2d", "int8"), ("dense", "int8")]
    out = np.asarray(build_model(captured)(x))
    with torch.no_grad():
        ref = converted(x).numpy()
    np.testing.assert_allclose(out, ref, rtol=0, atol=0.02 * float(np.abs(ref).max()))


def test_the_torch_compile_backend_builds_a_quantized_model_whole() -> None:
    from autotune import torch_backend as tb

    torch._dynamo.reset()
    tb.clear_cache()
    model, x = QuantizedNet().eval(), torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        out = torch.compile(model, backend="autotune")(x)
        ref = model(x)
    torch._dynamo.reset()
    assert (tb.STATS.graphs, tb.STATS.builds, tb.STATS.splits, tb.STATS.fallbacks) == (1, 1, 0, 0), tb.STATS
    torch.testing.assert_close(out, ref, rtol=0, atol=0.02 * float(ref.abs().max()))


def test_the_backends_check_allows_a_quantized_graph_a_step_but_not_more() -> None:
    from autotune.torch_backend import QUANTIZED_RTOL, Refused, check_outputs

    ref = torch.linspace(-1, 1, 50)
    near = ref + 0.5 * QUANTIZED_RTOL * (torch.arange(50) == 7)
    check_outputs([near], ref, quantized=True)
    with pytest.raises(Refused, match="differs from eager"):
        check_outputs([near], ref)
    with pytest.raises(Refused, match="differs from eager"):
        check_outputs([ref + 3 * QUANTIZED_RTOL * (torch.arange(50) == 7)], ref, quantized=True)
