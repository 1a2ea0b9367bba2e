"""Dynamic kernels and dynamic models on CUDA: the cover compiled into host code (checked here against the plan
table, on the CPU), the dispatcher's CUDA compiled by nvcc here (no GPU); run against numpy and PyTorch on a GPU
machine (the tests named `on_gpu`, which `benchmarks/gpu_check.sh run` runs)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from autotune.dynamic.compiled import cover_of, periodic_rows, plan_of, plan_table
from autotune.dynamic.compose import Planner

CUDA = {"kind": "cuda", "arch": "sm_90"}
SIZES = (1, 2, 3, 15, 16, 17, 31, 100, 127, 128, 129, 255, 256, 257, 300, 511, 512)  # primes, heights and +-1


def tvm_cuda_exists() -> bool:
    import tvm

    return bool(tvm.cuda(0).exist)


# skipped before their fixtures build anything
on_gpu = pytest.mark.skipif(not tvm_cuda_exists(), reason="no CUDA device: it runs on a GPU machine")


def _covers_in_code(table: np.ndarray, heights: list[int], sizes: list[int]) -> dict[int, tuple[int, ...]]:
    """The cover of each size computed by `cover_of` from the table compiled into code (as on a GPU), run on the
    CPU: (whole pieces per uKernel..., tail uKernel, tail rows)."""
    import tvm
    from tvm import tirx

    m = tirx.Var("m", "int64")
    size = tirx.decl_buffer([m], "float32", "size")  # its length is m
    n = len(heights)
    out = tirx.decl_buffer([n + 2], "int64", "out")
    stmts, counts, tail_kernel, tail_rows = cover_of(table, heights, m)
    values = [*counts, tail_kernel, tail_rows]
    stmts += [tirx.BufferStore(out, v, [tirx.IntImm("int64", i)]) for i, v in enumerate(values)]
    func = tirx.PrimFunc([size, out], tirx.SeqStmt(stmts)).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    got = {}
    for s in sizes:
        res = tvm.runtime.tensor(np.zeros(n + 2, "int64"))
        lib["main"](tvm.runtime.tensor(np.zeros(s, "float32")), res)
        got[s] = tuple(int(v) for v in res.numpy())
    return got


@pytest.mark.parametrize("heights, seconds", [([96, 32, 12], [30e-6, 12e-6, 6e-6]), ([256, 128, 16],
                                                                                      [40e-6, 40e-6, 13e-6])])
def test_the_cover_compiled_into_code_is_the_tables(heights, seconds):
    """On a GPU the host reads no table: its covers, from a prefix of the table as comparisons in the code, are the
    plan table's (`plan_of`) at every size, above the table's rows too (the tallest uKernel repeated)."""
    planner = Planner(heights, seconds, lambda kernel, rows: 1e-9 * rows)
    table = plan_table(planner, 600)
    rows = periodic_rows(table, heights)
    assert max(heights) <= rows < table.shape[0]  # the prefix is shorter than the table
    sizes = list(range(1, 700))
    got = _covers_in_code(table[:rows], heights, sizes)
    for s in sizes:
        want = plan_of(table, heights, s)
        assert got[s] == (*want.counts, want.tail_kernel, want.tail_rows), s


@pytest.fixture(scope="module")
def dense_kernel():
    """A dynamic dense kernel for CUDA on the analytic model's heights, heuristic configs (nothing is timed
    here)."""
    from autotune.dynamic.dispatch import DynamicKernel
    from autotune.dynamic.load import default_ukernels
    from autotune.dynamic.spec import parse_dynamic

    spec = parse_dynamic("dense", "batch=1..512,in_features=256,out_features=128", target=CUDA)
    ukernels, _ = default_ukernels(spec, shipped=False)
    return DynamicKernel(spec, ukernels)


@pytest.mark.slow
def test_a_dynamic_kernel_compiles_for_cuda(dense_kernel):
    """Each uKernel's whole pieces are one launch (the piece its blockIdx.z), the plan is in the host code (no
    table parameter), the uKernels share the weight, and the CUDA source compiles."""
    kernel = dense_kernel
    assert kernel.params.table is None and len(kernel.func.params) == 3  # x, the weight (shared), the output
    src = kernel.executable.mod.imports[0].inspect_source()
    assert src.count("blockIdx.z") >= len(kernel.ukernels)
    if shutil.which("nvcc") is not None:
        import tvm
        from tvm.support import nvcc

        with tvm.target.Target(CUDA):
            assert len(nvcc.compile_cuda(src, target_format="ptx", arch="sm_90", compiler="nvcc")) > 0


@on_gpu
def test_a_dynamic_kernel_matches_numpy_on_gpu(dense_kernel):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((128, 256)).astype("float32")
    for size in SIZES:
        x = rng.standard_normal((size, 256)).astype("float32")
        np.testing.assert_allclose(dense_kernel(x, w), x @ w.T, rtol=1e-4, atol=1e-4, err_msg=f"batch={size}")


def _cuda_source(mod) -> str:
    """The CUDA source of a module's CUDA import."""
    if mod.kind == "cuda":
        return mod.inspect_source()
    return next((src for src in (_cuda_source(m) for m in mod.imports) if src), "")


class _Block:
    """A GPT-style block's dynamic parts: two linear layers with GELU and a residual add, attention scores over a
    symbolic length and their softmax-weighted sum."""

    @staticmethod
    def program():
        torch = pytest.importorskip("torch", reason="the model path needs PyTorch")

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1, self.fc2 = torch.nn.Linear(128, 256), torch.nn.Linear(256, 128)

            def forward(self, x):
                y = self.fc2(torch.nn.functional.gelu(self.fc1(x))) + x
                return torch.softmax(y @ y.transpose(-1, -2) / 16, dim=-1) @ y

        torch.manual_seed(0)
        model = Block().eval()
        seq = torch.export.Dim("seq", min=1, max=512)
        return model, torch.export.export(model, (torch.randn(1, 7, 128),), dynamic_shapes={"x": {1: seq}})


@pytest.fixture(scope="module")
def cuda_block():
    from autotune.model import build_model

    model, program = _Block.program()
    return model, build_model(program, target=CUDA, shipped=False)


@pytest.mark.slow
def test_a_dynamic_model_builds_for_cuda_and_exports(cuda_block, tmp_path):
    from autotune.errors import AutotuneError

    _, built = cuda_block
    assert [s.spec.op for s in built.sites] == ["dense", "dense"] and built.target["kind"] == "cuda"
    # the bias, GELU and the residual add in the uKernels' write-back
    assert [sorted({op.rstrip("0123456789") for ops in s.fused for op in ops}) for s in built.sites] == [
        ["add", "fast_erf", "multiply"], ["add"]]
    src = _cuda_source(built.executable.mod)
    if shutil.which("nvcc") is not None:  # the whole model's CUDA compiles (ptxas included)
        import tvm
        from tvm.support import nvcc

        with tvm.target.Target(CUDA):
            assert len(nvcc.compile_cuda(src, target_format="cubin", arch="sm_90", compiler="nvcc")) > 0
    built.export_library(tmp_path / "block.so")
    assert (tmp_path / "block.so").stat().st_size > 0
    if not tvm_cuda_exists():
        with pytest.raises(AutotuneError, match="no cuda device"):
            built(np.zeros((1, 5, 128), "float32"))


@on_gpu
def test_a_dynamic_model_matches_torch_on_gpu(cuda_block, tmp_path):
    import torch

    from autotune.model import load_library

    model, built = cuda_block
    built.export_library(tmp_path / "block.so")
    loaded = load_library(tmp_path / "block.so")
    for length in (1, 2, 7, 31, 100, 257, 512):
        x = torch.randn(1, length, 128)
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(built(x), want, rtol=1e-3, atol=1e-4, err_msg=f"seq={length}")
        np.testing.assert_allclose(np.asarray(loaded(x)), want, rtol=1e-3, atol=1e-4, err_msg=f"seq={length}")


@pytest.fixture(scope="module")
def cuda_cnn():
    from test_dynamic_conv import _cnn, _export

    from autotune.model import build_model

    model = _cnn()
    return model, build_model(_export(model, batch=True), target=CUDA, shipped=False)


@pytest.mark.slow
def test_a_cnn_of_a_varying_image_size_builds_for_cuda(cuda_cnn):
    """Its convolutions as im2col and dynamic dense kernels on CUDA (the windows and layout changes scheduled by
    DLight); the module's CUDA compiles."""
    _, built = cuda_cnn
    assert [s.spec.op for s in built.sites] == ["dense"] * 3
    src = _cuda_source(built.executable.mod)
    assert "im2col" in src
    if shutil.which("nvcc") is not None:
        import tvm
        from tvm.support import nvcc

        with tvm.target.Target(CUDA):
            assert len(nvcc.compile_cuda(src, target_format="cubin", arch="sm_90", compiler="nvcc")) > 0


@on_gpu
def test_a_cnn_of_a_varying_image_size_matches_torch_on_gpu(cuda_cnn):
    import torch

    model, built = cuda_cnn
    for shape in ((1, 3, 6, 6), (2, 3, 17, 9), (4, 3, 64, 61)):
        x = torch.randn(*shape)
        with torch.no_grad():
            np.testing.assert_allclose(built(x), model(x).numpy(), rtol=1e-3, atol=1e-4, err_msg=f"{shape}")
