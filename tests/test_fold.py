"""Inference batch norms folded at capture: into the weight of the convolution feeding them, else into a
per-channel multiply and add; the built model still computes what PyTorch does."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the model path needs PyTorch")
from torch import nn

from autotune.model import build_model, capture


class _Norms(nn.Module):
    """Each kind of batch norm the fold meets: after a bias-free conv (folded into its weight), after a conv with
    a bias, on the input itself, after a conv whose output is also used elsewhere, and a 1-d one after a linear."""

    def __init__(self):
        super().__init__()
        self.bn_in = nn.BatchNorm2d(3)
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.biased = nn.Conv2d(8, 8, 1)
        self.bn_biased = nn.BatchNorm2d(8)
        self.shared = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn_shared = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 6)
        self.bn_fc = nn.BatchNorm1d(6)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(self.bn_in(x))))
        y = torch.relu(self.bn_biased(self.biased(y)))
        z = self.shared(y)
        y = self.bn_shared(z) + z  # the conv's output is used twice: its weight stays as it is
        return self.bn_fc(self.fc(y.mean(dim=(2, 3))))


def _model():
    torch.manual_seed(0)
    model = _Norms()
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return model.eval(), (torch.randn(2, 3, 12, 12),)


@pytest.fixture(scope="module")
def captured():
    warnings.simplefilter("ignore")
    model, inputs = _model()
    return model, inputs, capture(model, inputs)


def test_batch_norms_are_folded_away(captured):
    model, _, cap = captured
    text = cap.mod.script()
    assert "batch_norm" not in text
    assert text.count("R.nn.conv2d(") == 3
    # one multiply per batch norm not folded into a weight: the input's, the biased conv's, the shared conv's, fc's
    assert text.count("R.multiply(") == 4


def test_the_scale_goes_into_the_weight_of_a_conv_feeding_only_the_norm(captured):
    model, _, cap = captured
    bn = model.bn
    scale = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach().numpy()
    expected = model.conv.weight.detach().numpy() * scale.reshape(-1, 1, 1, 1)
    weights = [c.value.numpy() for c in _constants(cap.mod) if tuple(c.value.shape) == (8, 3, 3, 3)]
    assert len(weights) == 1
    np.testing.assert_allclose(weights[0], expected, rtol=1e-6)
    shared = [c.value.numpy() for c in _constants(cap.mod) if tuple(c.value.shape) == (8, 8, 3, 3)]
    assert len(shared) == 1 and np.array_equal(shared[0], model.shared.weight.detach().numpy())


def test_the_built_model_matches_torch(captured):
    model, inputs, cap = captured
    built = build_model(cap)
    x = torch.randn(*inputs[0].shape)
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(built(x), ref, rtol=1e-4, atol=1e-5)


def _constants(mod):
    from tvm import ir, relax

    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if isinstance(e, ir.Constant) else None)
    return [c for c in found if hasattr(c.value, "numpy")]  # tensors, not scalar attributes
