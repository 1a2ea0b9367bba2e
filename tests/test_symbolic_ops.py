"""The hand-written kernels of operators walking a symbolic size (`dynamic.symbolic_ops`): one compiled function,
checked against numpy at sizes with and without vector tails, and the Relax rewrite that calls them."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")


def _compiled(func):
    from autotune.dynamic.symbolic_ops import in_root_block

    return tvm.compile(tvm.IRModule({"main": in_root_block(func).with_attr("global_symbol", "main")}),
                       target="llvm")


@pytest.fixture(scope="module")
def batch_matmul():
    from autotune.dynamic.symbolic_ops import batch_matmul_func

    return _compiled(batch_matmul_func())


@pytest.fixture(scope="module")
def softmax():
    from autotune.dynamic.symbolic_ops import softmax_func

    return _compiled(softmax_func())


# (batch, m, n, k): 4-row and 1-row tiles, 32 and 16 lanes, overlapping last tiles, rows under 16 (plain loop)
@pytest.mark.parametrize("b, m, n, k", [(3, 37, 45, 64), (2, 1, 70, 19), (2, 6, 64, 33), (1, 5, 17, 8),
                                        (2, 2, 20, 3), (3, 7, 7, 64), (1, 1, 1, 1), (2, 4, 32, 1)])
def test_batch_matmul_matches_numpy_at_any_size(batch_matmul, b, m, n, k):
    rng = np.random.default_rng(m * n + k)
    x, y = rng.standard_normal((b, m, k), "float32"), rng.standard_normal((b, k, n), "float32")
    out = tvm.runtime.tensor(np.full((b, m, n), np.nan, "float32"))
    batch_matmul["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y), out)
    np.testing.assert_allclose(out.numpy(), x @ y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("b, m, n, k", [(3, 37, 45, 64), (2, 1, 70, 19), (2, 6, 20, 8), (1, 5, 17, 16),
                                        (2, 2, 3, 5), (3, 7, 33, 64)])
def test_batch_matmul_of_a_transposed_operand_matches_numpy(b, m, n, k):
    from autotune.dynamic.symbolic_ops import batch_matmul_nt_func

    lib = _compiled(batch_matmul_nt_func(k))
    rng = np.random.default_rng(m * n + k)
    x, keys = rng.standard_normal((b, m, k), "float32"), rng.standard_normal((b, n, k), "float32")
    out = tvm.runtime.tensor(np.full((b, m, n), np.nan, "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(keys), out)
    np.testing.assert_allclose(out.numpy(), x @ keys.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)


def test_kernels_on_vectors_of_8_lanes_match_numpy():
    """The kernels of an AVX2 target (8 fp32 lanes): tiles of 16 and 8 columns, softmax's passes in 8 lanes."""
    from autotune.dynamic.symbolic_ops import batch_matmul_func, batch_matmul_nt_func, softmax_func

    rng = np.random.default_rng(8)
    x, y, keys = (rng.standard_normal(s, "float32") for s in ((2, 9, 12), (2, 12, 21), (2, 21, 12)))
    for func, other, want in ((batch_matmul_func(8), y, x @ y),
                              (batch_matmul_nt_func(12, 8), keys, x @ keys.transpose(0, 2, 1))):
        out = tvm.runtime.tensor(np.full(want.shape, np.nan, "float32"))
        _compiled(func)["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(other), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
    z = rng.standard_normal((3, 21), "float32")
    out = tvm.runtime.tensor(np.full(z.shape, np.nan, "float32"))
    _compiled(softmax_func(8))["main"](tvm.runtime.tensor(z), out)
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("rows, n", [(5, 1), (3, 7), (4, 16), (6, 37), (2, 509)])
def test_softmax_matches_numpy_at_any_row_length(softmax, rows, n):
    x = np.random.default_rng(n).standard_normal((rows, n)).astype("float32") * 10
    x[0, 0] = -1e30  # a masked position: its probability is 0
    out = tvm.runtime.tensor(np.full((rows, n), np.nan, "float32"))
    softmax["main"](tvm.runtime.tensor(x), out)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("heads, t", [(3, 1), (2, 7), (2, 37)])
def test_safe_softmax_of_scores_plus_a_causal_mask_broadcast_over_heads_matches_torch(heads, t):
    """softmax(X + B) with B [t, t] shared by every head (row r takes B's row r % t), a row whose every position is
    masked all zeros (PyTorch's _safe_softmax), the others as torch's softmax."""
    import torch

    from autotune.dynamic.symbolic_ops import softmax_func

    rng = np.random.default_rng(t)
    x = rng.standard_normal((heads * t, t)).astype("float32") * 5
    mask = np.where(np.tril(np.ones((t, t), bool)), 0, -np.inf).astype("float32")
    mask[t // 2, :] = -np.inf  # one query row sees nothing
    out = tvm.runtime.tensor(np.full((heads * t, t), np.nan, "float32"))
    _compiled(softmax_func(biased=True, safe=True))["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(mask), out)
    scores = torch.from_numpy(x).reshape(heads, t, t) + torch.from_numpy(mask)
    want = torch.ops.aten._safe_softmax(scores, -1).reshape(heads * t, t).numpy()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-7)
    assert not out.numpy()[t // 2::t].any()


def test_rewrite_takes_symbolic_products_and_softmax_only():
    from tvm import relax, tirx

    from autotune.dynamic.symbolic_ops import rewrite_symbolic_ops

    n = tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    q = relax.Var("q", relax.TensorType((1, 2, n, 8), "float32"))
    k = relax.Var("k", relax.TensorType((1, 2, 8, n), "float32"))
    s = relax.Var("s", relax.TensorType((4, 8), "float32"))
    v = relax.Var("v", relax.TensorType((2, n, 8), "float32"))
    with bb.function("main", [q, k, s, v]):
        with bb.dataflow():
            scores = bb.emit(relax.op.nn.softmax(relax.op.matmul(q, k), axis=-1))  # both rewritten
            static = bb.emit(relax.op.nn.softmax(relax.op.matmul(s, relax.const(np.ones((8, 4), "float32")))))
            mixed = bb.emit(relax.op.matmul(relax.op.reshape(scores, (2, n, n)), v))  # 3-d: no reshape
            keys_t = bb.emit(relax.op.permute_dims(v, [0, 2, 1]))  # v's transpose: on the kernel taking v as it is
            by_keys = bb.emit(relax.op.matmul(v, keys_t))
            out = bb.emit_output(relax.Tuple([scores, static, mixed, by_keys]))
        bb.emit_func_output(out)
    mod, counts = rewrite_symbolic_ops(bb.get())
    assert counts == {"dynamic_batch_matmul": 2, "dynamic_softmax": 1, "dynamic_batch_matmul_nt_k8": 1}
    lib = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    rng = np.random.default_rng(0)
    for size in (1, 19, 40):
        args = [rng.standard_normal((1, 2, size, 8), "float32"), rng.standard_normal((1, 2, 8, size), "float32"),
                rng.standard_normal((4, 8), "float32"), rng.standard_normal((2, size, 8), "float32")]
        got = lib["main"](*[tvm.runtime.tensor(a) for a in args])
        z = args[0] @ args[1]
        e = np.exp(z - z.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
        np.testing.assert_allclose(got[0].numpy(), p, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(got[2].numpy(), p.reshape(2, size, size) @ args[3], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[3].numpy(), args[3] @ args[3].transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
        assert got[1].numpy().shape == (4, 4)


# (window, strides, top-left padding, dilation, h, w, input and output channels per group): vector columns with
# edges, strided taps, rows narrower than a vector (every column checked), padding beyond the window's reach, more
# rows than one job's; depthwise (1, 1), a channel multiplier (1, 2), groups of several channels (3, 2), (4, 1)
@pytest.mark.parametrize("window, strides, padding, dilation, h, w, per_group", [
    ((3, 3), (1, 1), (1, 1), (1, 1), 17, 40, (1, 1)), ((3, 3), (2, 2), (1, 1), (1, 1), 33, 50, (3, 2)),
    ((5, 5), (1, 1), (2, 2), (1, 1), 9, 7, (1, 1)), ((3, 3), (1, 1), (2, 2), (2, 2), 30, 31, (1, 2)),
    ((3, 1), (2, 1), (0, 0), (1, 1), 20, 45, (1, 1)), ((1, 1), (1, 1), (0, 0), (1, 1), 3, 1, (1, 1)),
    ((3, 3), (1, 1), (1, 1), (1, 1), 19, 21, (4, 1))])
def test_grouped_conv2d_matches_torch_at_any_size(window, strides, padding, dilation, h, w, per_group):
    torch = pytest.importorskip("torch")
    from autotune.dynamic.symbolic_ops import grouped_conv_func

    lib = _compiled(grouped_conv_func(window, strides, padding, dilation, *per_group, lanes=8))
    rng = np.random.default_rng(h * w)
    (g, m), groups = per_group, 5
    x = rng.standard_normal((2, groups * g, h, w), "float32")
    wt = rng.standard_normal((groups * m, g, *window), "float32")
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(wt), stride=strides, padding=padding,
                                      dilation=dilation, groups=groups).numpy()
    out = tvm.runtime.tensor(np.full(want.shape, np.nan, "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(wt), out)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
