"""Convolutions whose image size varies: im2col and a dynamic dense (`autotune.dynamic.im2col`)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _cnn():
    """3x3 (padding 1), then 3x5 of stride 2 and dilation (1, 2), then 1x1: ReLUs and biases between them."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, (3, 5), stride=2, padding=(1, 3), dilation=(1, 2)), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 12, 1)).eval()


def _export(model, batch: bool, channels: int = 3):
    h, w = torch.export.Dim("h", min=6, max=64), torch.export.Dim("w", min=6, max=64)
    dims = {2: h, 3: w} | ({0: torch.export.Dim("n", min=1, max=4)} if batch else {})
    return torch.export.export(model, (torch.randn(2, channels, 20, 16),), dynamic_shapes={"input": dims})


@pytest.fixture(scope="module")
def cnn_built():
    from autotune.model import build_model

    model = _cnn()
    program = _export(model, batch=True)
    return model, program, build_model(program, shipped=False)


def test_a_varying_image_size_makes_dense_sites_over_its_pixels(cnn_built):
    """Each convolution of a symbolic height and width is a dynamic dense over N*OH*OW rows of its windows
    (R*S*C wide): its uKernels are the model's tasks, and the build reports three dynamic layers."""
    from autotune.model import extract_tasks

    _, program, built = cnn_built
    tasks = [t for t, _ in extract_tasks(program)]
    assert {t.op for t in tasks} == {"dense"}
    assert {(t.shape["in_features"], t.shape["out_features"]) for t in tasks} == {(27, 8), (120, 16), (16, 12)}
    summary = built.report.summary()
    assert "0 of 3 dynamic layers use tuned uKernels" in summary
    assert "dense(batch=36..16384,in_features=27,out_features=8)" in summary  # 1x6x6 .. 4x64x64 pixels


@pytest.mark.parametrize("shape", [(1, 3, 6, 6), (2, 3, 17, 9), (3, 3, 64, 31), (4, 3, 23, 64)])
def test_convolutions_of_any_image_size_match_torch(cnn_built, shape):
    """Padding, stride, dilation and a non-square window at sizes across the range, odd ones among them."""
    model, _, built = cnn_built
    x = torch.randn(*shape)
    with torch.no_grad():
        want = model(x).numpy()
    got = built(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_grouped_and_depthwise_convolutions_of_a_varying_image_run_on_their_symbolic_kernels():
    """A grouped convolution is not one dense: it runs on the hand-written kernel of its window, strides, padding,
    dilation and channels per group (`symbolic_ops.grouped_conv_func`; a depthwise one, one channel per group,
    named so), one function for every image size."""
    from autotune.model import build_model

    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, padding=1, groups=4), torch.nn.ReLU(),
                                torch.nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4), torch.nn.ReLU(),
                                torch.nn.Conv2d(4, 6, 3, padding=1, groups=2)).eval()
    built = build_model(_export(model, batch=False, channels=4), shipped=False)
    summary = built.report.summary()
    assert "no dynamic layer" in summary
    assert ("1 calls on dynamic_depthwise_3x3_1x1_1x1_1x1, 1 calls on dynamic_depthwise_3x3_2x2_1x1_1x1, "
            "1 calls on dynamic_group_conv_2to3_3x3_1x1_1x1_1x1") in summary
    for shape in ((2, 4, 11, 7), (2, 4, 40, 37)):
        x = torch.randn(*shape)
        with torch.no_grad():
            np.testing.assert_allclose(built(x), model(x).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.slow  # an export and a load: 10 s
def test_a_cnn_of_a_varying_image_size_exports_and_loads(cnn_built, tmp_path):
    from autotune.model import load_library

    model, _, built = cnn_built
    built.export_library(tmp_path / "cnn.so")
    loaded = load_library(tmp_path / "cnn.so")
    for shape in ((1, 3, 7, 40), (2, 3, 33, 33)):
        x = torch.randn(*shape)
        with torch.no_grad():
            np.testing.assert_allclose(loaded(x), model(x).numpy(), rtol=1e-4, atol=1e-4)


def test_windows_run_in_parallel_over_output_pixels_only():
    """The im2col loop nest's generic schedule: the output pixels in parallel, the window's positions serial inside
    (each pixel's position computed once), the channels in vectors."""
    import tvm
    from tvm import te, tirx

    from autotune.dynamic.im2col import im2col_compute
    from autotune.model.default_schedule import generic_schedule

    h, w = tirx.Var("h", "int64"), tirx.Var("w", "int64")
    x = te.placeholder((1, h, w, 32), name="x")
    cols = im2col_compute(x, (3, 3), (1, 1), (1, 1), (1, 1), (h, w))
    func, how = generic_schedule(te.create_prim_func([x, cols]), tvm.target.Target("llvm"), lanes=8)
    kinds, stmt = [], func.body
    while not isinstance(stmt, tirx.For):  # the root block
        stmt = stmt.block.body if hasattr(stmt, "block") else stmt.body
    while isinstance(stmt, tirx.For):  # outermost first
        kinds.append((tirx.ForKind(int(stmt.kind)).name, stmt.extent))
        stmt = stmt.body
    assert how == "generic" and [k for k, _ in kinds] == ["PARALLEL", "SERIAL", "SERIAL", "VECTORIZED"]
    assert [int(e) for _, e in kinds[1:]] == [9, 4, 8]


def test_rows_back_to_nchw_walk_the_channels_inside_the_pixels():
    """The rows [N*OH*OW, K] read as [N, K, OH, OW] (a transpose): the channel loop runs inside the image rows, next
    to the pixel loop, so that the rows one image row reads stay in cache over every channel; numbers unchanged."""
    import tvm
    from tvm import te, tirx

    from autotune.dynamic.im2col import rows_to_nchw
    from autotune.model.default_schedule import generic_schedule

    h, w = tirx.Var("h", "int64"), tirx.Var("w", "int64")
    rows = te.placeholder((h * w, 24), name="rows")
    out = rows_to_nchw(rows, (1, 24, h, w))
    func, how = generic_schedule(te.create_prim_func([rows, out]), tvm.target.Target("llvm"), lanes=8)
    loops, stmt = [], func.body
    while not isinstance(stmt, tirx.For):
        stmt = stmt.block.body if hasattr(stmt, "block") else stmt.body
    while isinstance(stmt, tirx.For):
        loops.append(stmt)
        stmt = stmt.body
    assert how == "generic" and [tirx.ForKind(int(f.kind)).name for f in loops] == ["PARALLEL", "SERIAL"]
    channel = stmt.iter_values[1]  # the block's binding of its channel axis
    channel = channel.value if isinstance(channel, tirx.Cast) else channel
    # the parallel loop fuses (image row, channel), channels fastest: the channel is the fused index modulo 24
    assert isinstance(channel, tirx.FloorMod) and int(channel.b) == 24, channel
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    y = np.random.default_rng(0).standard_normal((7 * 9, 24), "float32")
    got = tvm.runtime.tensor(np.zeros((1, 24, 7, 9), "float32"))
    lib["main"](tvm.runtime.tensor(y), got)
    np.testing.assert_array_equal(got.numpy(), y.reshape(1, 7, 9, 24).transpose(0, 3, 1, 2))
