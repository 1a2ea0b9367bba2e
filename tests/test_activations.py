"""Activations expanded for TVM's fast math, and odd-width loops vectorised with a scalar tail."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the model path needs PyTorch")
from torch import nn

from autotune.model import build_model, capture
from autotune.model.build import lower_captured
from autotune.model.extract import resolve_target

LIBM_CALLS = ("T.erf(", "T.exp(", "T.tanh(", "T.sigmoid(")


class _Activations(nn.Module):
    """Every expanded activation, after a kernel and on its own (after a transpose no kernel takes)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(24, 40)
        self.conv = nn.Conv1d(40, 40, 3, padding=1)

    def forward(self, x):
        y = nn.functional.gelu(self.fc(x)).transpose(1, 2)  # [1, 40, 19]: 19 columns, not whole vectors
        z = nn.functional.silu(self.conv(y))
        w = nn.functional.gelu(y.transpose(1, 2) * 3.0, approximate="tanh")
        return torch.sigmoid(z).sum() + nn.functional.silu(w) * 0.5 + torch.sigmoid(-2.0 * w)


def test_activations_become_fast_math_and_match_torch():
    from tvm import tirx

    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    model, x = _Activations().eval(), 3.0 * torch.randn(1, 19, 24)
    cap = capture(model, (x,))
    mod, report = lower_captured(cap, resolve_target("llvm"), [])
    scripts = [f.script() for _, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)]
    assert not [call for text in scripts for call in LIBM_CALLS if call in text]  # no libm call per element
    names = " ".join(report.generic)
    assert "fast_erf" in names and "fast_tanh" in names and "fast_exp" in names, names
    built = build_model(cap)
    with torch.no_grad():
        np.testing.assert_allclose(built(x), model(x).numpy(), rtol=1e-5, atol=1e-5)


def _scheduled(width: int, lanes: int = 16):
    import tvm
    from tvm import te

    from autotune.model.default_schedule import generic_schedule

    x = te.placeholder((8, width), "float32", name="x")
    y = te.compute((8, width), lambda i, j: x[i, j] * 2.0 + 1.0, name="y")
    target = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    func, how = generic_schedule(te.create_prim_func([x, y]), target, lanes)
    return func, how


@pytest.mark.parametrize("width, vectorised", [(3199, True), (64, True), (40, True), (30, True), (19, True), (13, True),
                                               (1, False)])
def test_odd_widths_get_whole_vectors_and_a_scalar_tail(width, vectorised):
    import tvm

    func, how = _scheduled(width)
    text = func.script()
    assert how == "generic" and ("T.vectorized" in text) == vectorised, text
    assert "T.where" not in text  # no vector under a predicate
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target="llvm")
    a = np.random.default_rng(0).standard_normal((8, width)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((8, width), "float32"))
    lib["main"](tvm.runtime.tensor(a), out)
    np.testing.assert_allclose(out.numpy(), a * 2.0 + 1.0, rtol=1e-6)


def _normalisation(kind: str, shape: tuple[int, ...]):
    """The fused PrimFunc of a softmax or a layer norm + GELU over the last axis, as a model build lowers it."""
    import tvm
    from tvm import relax

    from autotune.model.activations import expand_activations

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            if kind == "softmax":
                y = bb.emit(relax.op.nn.softmax(x, axis=-1))
            else:
                ones = relax.const(np.ones(shape[-1], "float32"))
                y = bb.emit(relax.op.nn.gelu(bb.emit(relax.op.nn.layer_norm(x, ones, ones, axes=[-1]))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = tvm.transform.Sequential([
        relax.transform.FastMathTransform(), relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR()])(expand_activations(
            bb.get()))
    [func] = [f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    return func


@pytest.mark.parametrize("kind, shape, how", [
    ("softmax", (4, 19, 19), "dlight-reduction"),  # odd rows, but DLight computes each row's exp once
    ("softmax", (4, 32, 32), "dlight-reduction"),
    ("layer_norm", (5, 77), "generic"),  # odd rows: whole vectors and a scalar tail
    ("layer_norm", (5, 64), "dlight-reduction"),
    ("layer_norm", (1, 1, 768), "generic"),  # one row (a decoding step): DLight would sum it again per element
    ("softmax", (1, 1, 64), "generic"),
])
def test_odd_rows_of_a_norm_leave_dlight_softmax_does_not(kind, shape, how):
    import tvm

    from autotune.model.default_schedule import generic_schedule

    target = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    func, used = generic_schedule(_normalisation(kind, shape), target, 16)
    assert used == how
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target="llvm")
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    out = tvm.runtime.tensor(np.zeros(shape, "float32"))
    params = [tvm.runtime.tensor(x)] + [tvm.runtime.tensor(np.ones(shape[-1], "float32"))] * (len(func.params) - 2)
    lib["main"](*params, out)
    t = torch.from_numpy(x)
    ref = torch.softmax(t, -1) if kind == "softmax" else torch.nn.functional.gelu(  # gamma and beta: ones
        torch.nn.functional.layer_norm(t, shape[-1:]) + 1.0)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
