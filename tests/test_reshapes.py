"""Elementwise ops moved above unit-dimension reshapes, so a kernel's epilogue fuses into it."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.model.reshapes import operand_shape

torch = pytest.importorskip("torch", reason="the model path needs PyTorch")


@pytest.mark.parametrize("shape, before, after, expected", [
    ((1, 16, 1), (1, 16, 1, 20), (1, 16, 20), (1, 16, 1, 1)),  # conv1d bias after a height-1 conv2d
    ((20,), (1, 16, 1, 20), (1, 16, 20), (1, 1, 1, 20)),
    ((1, 16, 20), (1, 16, 1, 20), (1, 16, 20), (1, 16, 1, 20)),  # residual of the full shape
    ((), (1, 16, 1, 20), (1, 16, 20), ()),  # a scalar
    ((3072,), (128, 3072), (1, 128, 3072), (1, 3072)),  # a linear layer's bias on [1, T, D]
    ((1, 1, 3072), (128, 3072), (1, 128, 3072), (1, 3072)),
    ((16, 5), (1, 16, 1, 20), (1, 16, 20), None),  # does not broadcast against the output
    ((2, 128, 3072), (128, 3072), (1, 128, 3072), None),  # broadcasts the output over a size-1 dimension
])
def test_operand_shape(shape, before, after, expected):
    assert operand_shape(shape, before, after) == expected
    if expected is not None:  # f(reshape(x), c) == reshape(f(x, c')) on numbers
        x = np.random.default_rng(0).standard_normal(before)
        c = np.random.default_rng(1).standard_normal(shape)
        np.testing.assert_array_equal((x.reshape(after) + c), (x + c.reshape(expected)).reshape(after))


class _LinearGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 48)
        self.conv = torch.nn.Conv1d(48, 16, 3, padding=1)

    def forward(self, x):  # [1, T, 32]: dense on [T, 32], its bias add and GELU on [1, T, 48]
        y = torch.nn.functional.gelu(self.fc(x)).transpose(1, 2)
        return torch.sigmoid(self.conv(y) * 0.5 + y[:, :16])


def test_epilogues_after_a_reshape_fuse_into_the_kernel():
    from autotune.model import build_model, capture

    torch.manual_seed(0)
    model, x = _LinearGelu().eval(), torch.randn(1, 24, 32)
    built = build_model(capture(model, (x,)))
    fused = {name: how for name, how in built.report.generic.items() if "autotune" in name}
    assert len(fused) == 2 and all(how.startswith("epilogue fused") and "apart" not in how
                                   for how in fused.values()), built.report.generic
    # GELU (as the fast erf) in the dense's write-back, bias, scale, residual and sigmoid (fast exp) in the conv's
    assert [name for name in fused if "dense" in name and "fast_erf" in name], fused
    assert [name for name in fused if "conv2d" in name and "fast_exp" in name], fused
    assert not [name for name in built.report.generic if "autotune" not in name and "fast_e" in name]
    with torch.no_grad():
        np.testing.assert_allclose(built(x), model(x).numpy(), rtol=1e-4, atol=1e-5)


def test_an_elementwise_op_moves_above_a_reshape_of_a_symbolic_size():
    """A dynamic model's linear layer on [1, s, 32] runs on [s, 32]: its activation after the reshape back moves
    above it (so FuseOps puts it in the kernel's write-back), the shapes kept symbolic."""
    import tvm
    from tvm import relax, tirx

    from autotune.model.reshapes import sink_reshapes

    s = tirx.Var("s", "int64")
    x = relax.Var("x", relax.TensorType([s, 32], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.reshape(x, [1, s, 32]))
            z = bb.emit(relax.op.add(bb.emit(relax.op.nn.relu(y)), relax.const(np.ones((32,), "float32"))))
            out = bb.emit_output(z)
        bb.emit_func_output(out)
    main = relax.transform.DeadCodeElimination()(sink_reshapes(bb.get()))["main"]
    ops = [b.value.op.name for block in main.body.blocks for b in block.bindings if isinstance(b.value, relax.Call)]
    assert ops == ["relax.nn.relu", "relax.add", "relax.reshape"], ops
    executable = tvm.compile(relax.transform.LegalizeOps()(tvm.IRModule({"main": main})), target="llvm")
    vm = relax.VirtualMachine(executable, tvm.cpu())
    data = np.random.default_rng(0).standard_normal((5, 32)).astype("float32")
    got = vm["main"](tvm.runtime.tensor(data)).numpy()
    np.testing.assert_allclose(got, np.maximum(data, 0)[None] + 1, rtol=1e-6)
