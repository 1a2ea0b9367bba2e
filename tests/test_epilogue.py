"""Epilogue fusion in model builds: the elementwise ops after a kernel (bias, activation, residual add) are computed
in the kernel's write-back loop; what the write-back cannot take keeps loops of its own in the same function."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the model path needs PyTorch")
from torch import nn

from autotune.model import build_model, capture
from autotune.model.build import lower_captured
from autotune.model.epilogue import KERNEL, WRITE_BACK, narrowed_copy
from autotune.model.extract import resolve_target


class _Residual(nn.Module):
    """conv + bias + relu, then conv + bias + relu6 + the first conv's output: two kernels, five epilogue ops."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.point = nn.Conv2d(16, 16, 1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return nn.functional.relu6(self.point(y)) + y


def _blocks(func):
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    return [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]


def _lowered(model, inputs):
    warnings.simplefilter("ignore")
    return lower_captured(capture(model, inputs), resolve_target("llvm"), [])


def test_epilogue_ops_run_in_the_kernels_write_back_and_match_torch():
    from tvm import tirx

    torch.manual_seed(0)
    model, x = _Residual().eval(), torch.randn(1, 3, 10, 10)
    mod, report = _lowered(model, (x,))
    assert sorted(report.generic.values()) == ["epilogue fused (2 ops)", "epilogue fused (3 ops)"]
    funcs = [f for _, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)]
    assert len(funcs) == 2  # one function per kernel and its epilogue; the unfused kernels are gone
    for func in funcs:
        blocks = _blocks(func)
        assert all(KERNEL in b.annotations for b in blocks)  # no block of the epilogue left on its own
        (write_back,) = [b for b in blocks if int(b.annotations[KERNEL]) == WRITE_BACK]
        assert write_back.writes[0].source.same_as(func.params[-1])  # it writes the function's output
        assert len(func.params) == 4  # input, weight, bias; output (the kernel's own output is not a buffer now)
    built = build_model(capture(model, (x,)))
    with torch.no_grad():
        np.testing.assert_allclose(built(x.numpy()), model(x).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("features, how", [(1024, "epilogue fused (0 ops, 1 apart)"), (64, "epilogue fused (1 ops)")])
def test_an_epilogue_the_write_back_cannot_take_keeps_its_own_loops(features, how):
    """dense with 1000 outputs writes back under a predicate (N padded to whole vector tiles). Written back per
    outer tile (its default config splits K over 1024 features), TVM cannot inline the bias add there, so it is
    scheduled apart, in the same function; written back per register tile (all of K at once, 64 features, with
    16-lane vectors, on the AVX-512 Zens), it inlines. With 8-lane vectors (AVX2) the default configs of both write
    back apart, and on an AVX-512 Xeon (`rocketlake`) the 64-feature one does too. The result is right either
    way."""
    from autotune.target import vector_unit

    torch.manual_seed(0)
    model, x = nn.Linear(features, 1000).eval(), torch.randn(3, features)
    _, report = _lowered(model, (x,))
    apart = "epilogue fused (0 ops, 1 apart)"
    host = resolve_target("llvm")
    if vector_unit(host)[0] < 16 or host.get("mcpu") == "rocketlake":
        how = apart
    assert list(report.generic.values()) == [how]
    built = build_model(capture(model, (x,)))
    with torch.no_grad():
        np.testing.assert_allclose(built(x.numpy()), model(x).numpy(), rtol=1e-4, atol=1e-5)


class _ScaledByMean(nn.Module):
    """An epilogue with a scalar operand (the input's mean): no int32 copy of it is made, so the group is not fused."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return torch.relu(self.conv(x) * x.mean())


def test_a_group_that_cannot_be_narrowed_runs_unfused_and_right():
    torch.manual_seed(0)
    model, x = _ScaledByMean().eval(), torch.randn(1, 3, 8, 8)
    _, report = _lowered(model, (x,))
    assert not any("epilogue" in how for how in report.generic.values())
    assert {"add", "multiply", "relu"} <= set(report.generic)  # each on its own generic schedule
    built = build_model(capture(model, (x,)))
    with torch.no_grad():
        np.testing.assert_allclose(built(x.numpy()), model(x).numpy(), rtol=1e-4, atol=1e-5)


def test_narrowed_copy_only_where_int32_is_safe():
    import tvm
    from tvm import te

    def add_one(shape, dtype="float32"):
        a = te.placeholder([tvm.tirx.IntImm("int64", n) for n in shape], dtype, name="a")
        return te.create_prim_func([a, te.compute(a.shape, lambda *i: a(*i) + tvm.tirx.const(1, dtype), name="b")])

    small = narrowed_copy(add_one((8, 4096)))
    assert {str(d.ty) for d in small.params[0].shape} == {"int32"}
    assert narrowed_copy(add_one((2**20, 4096))) is None  # 2**32 elements: int32 indices would overflow
    assert narrowed_copy(add_one(())) is None  # a scalar
    assert narrowed_copy(add_one((8,), "int64")) is None  # integer data


def test_a_fusion_tvm_refuses_falls_back_to_the_unfused_build(monkeypatch):
    import tvm

    import autotune.model.build as build

    def refusing():
        @tvm.transform.module_pass(opt_level=0, name="Refuse")
        def run(mod, _ctx):
            raise RuntimeError("Check failed: a group TVM cannot fuse")

        return run

    monkeypatch.setattr(build, "narrow_epilogues", refusing)
    torch.manual_seed(0)
    model, x = _Residual().eval(), torch.randn(1, 3, 10, 10)
    with pytest.warns(UserWarning, match="epilogue fusion failed .*a group TVM cannot fuse.*unfused"):
        built = build_model(capture(model, (x,)))
    assert built.report.fusion.startswith("off (")
    assert "epilogue fusion off" in built.report.summary()
    assert not any("epilogue" in how for how in built.report.generic.values())
    with torch.no_grad():
        np.testing.assert_allclose(built(x.numpy()), model(x).numpy(), rtol=1e-4, atol=1e-5)
