"""Compiled kernels' parallel loops on the process's OpenMP pool (autotune.thread_pool), and model libraries
loaded next to PyTorch (autotune.model.load_library)."""

from __future__ import annotations

import ctypes
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the OpenMP pool shared with PyTorch needs PyTorch")

import autotune.thread_pool as tp  # noqa: E402
from autotune.errors import AutotuneError  # noqa: E402
from autotune.model import build_model, load_library  # noqa: E402

needs_compiler = pytest.mark.skipif(shutil.which(os.environ.get("CC") or "cc") is None, reason="no C compiler")


class _Convs(torch.nn.Module):
    """Big enough that TVM's default schedules run parallel loops."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 8, 3, padding=1)

    def forward(self, x):
        return self.c2(torch.relu(self.c1(x))).softmax(dim=1)


@pytest.fixture(scope="module")
def built():
    torch.manual_seed(0)
    model = _Convs().eval()
    x = torch.randn(1, 8, 32, 32)
    with torch.no_grad():
        return model, x, model(x), build_model(model, inputs=(x,))


@pytest.fixture
def fresh_launcher():
    """A launcher decided anew by the test (and again after it, with the real environment)."""
    tp._launcher.cache_clear()
    yield
    tp._launcher.cache_clear()


def _pointer(path, name="__TVMBackendParallelLaunch") -> int:
    lib = ctypes.CDLL(str(path), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    return ctypes.c_void_p.in_dll(lib, name).value


@needs_compiler
def test_launcher_uses_the_openmp_runtime_pytorch_loaded():
    found = tp.launcher()
    assert found is not None, tp.launcher_status()
    assert tp.launcher_status().startswith("OpenMP (libgomp")
    runtime = os.path.realpath(found.lib.autotune_omp_runtime().decode())
    assert runtime in tp._torch_openmp()  # PyTorch's libgomp, not a second copy (xgboost bundles its own)
    assert set(found.addresses) == set(tp.POINTERS) and all(found.addresses.values())


@needs_compiler
def test_library_kernels_point_at_the_launcher_and_match_pytorch(built, tmp_path):
    model, x, ref, model_built = built
    path = tmp_path / "convs.so"
    model_built.export_library(path)
    lib = load_library(path, threads=2)
    assert _pointer(path) == tp.launcher().addresses["__TVMBackendParallelLaunch"]
    assert tp.launcher().threads() == 2
    out = lib(x)  # torch in, torch out
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    for _ in range(3):  # eager parallel ops and the kernels, alternating on one pool
        with torch.no_grad():
            model.c1(x)
        torch.testing.assert_close(lib(x), ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lib(x.numpy()), ref.numpy(), rtol=1e-4, atol=1e-5)  # numpy in, numpy out


@needs_compiler
def test_built_model_runs_on_the_launcher_and_matches_pytorch(built):
    model, x, ref, model_built = built
    np.testing.assert_allclose(model_built(x), ref.numpy(), rtol=1e-4, atol=1e-5)
    assert model_built.threads >= 1


def test_without_a_compiler_kernels_keep_tvms_pool(built, fresh_launcher, monkeypatch, tmp_path):
    model, x, ref, _ = built
    monkeypatch.setattr(tp, "_compiler", lambda: None)
    assert tp.launcher() is None
    assert tp.launcher_status() == "TVM's own pool: no C compiler (set CC)"
    path = tmp_path / "convs.so"
    build_model(model, inputs=(x,)).export_library(path)
    lib = load_library(path)
    assert _pointer(path) != 0  # TVM's own launch, as the library was loaded
    torch.testing.assert_close(lib(x), ref, rtol=1e-4, atol=1e-5)


def test_a_compiler_that_fails_leaves_no_file_behind(fresh_launcher, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", shutil.which("false") or "/bin/false")
    assert tp.launcher() is None
    assert "did not compile" in tp.launcher_status()
    assert list((tmp_path / "autotune" / "native").iterdir()) == []


def test_loading_a_library_prints_nothing(built, tmp_path, capfd):
    path = tmp_path / "convs.so"
    built[3].export_library(path)
    capfd.readouterr()
    load_library(path)
    assert capfd.readouterr().err == ""  # TVM's loader prints a line per memory scope; silenced


def test_a_library_called_with_other_shapes_or_dtypes_says_so_in_one_line(built, tmp_path):
    path = tmp_path / "convs.so"
    built[3].export_library(path)
    lib = load_library(path)
    with pytest.raises(AutotuneError, match=r"convs.so: .*shape\[0\] mismatch") as info:
        lib(torch.randn(2, 8, 32, 32))
    assert "\n" not in str(info.value)
    with pytest.raises(AutotuneError, match="expect Tensor with dtype float32 but get float64"):
        lib(np.zeros((1, 8, 32, 32)))


def test_load_library_refuses_what_is_not_a_library(tmp_path):
    with pytest.raises(AutotuneError, match="does not exist"):
        load_library(tmp_path / "missing.so")
    bad = tmp_path / "bad.so"
    bad.write_text("not a library")
    with pytest.raises(AutotuneError, match="is not a model library"):
        load_library(bad)


@needs_compiler
def test_where_pytorch_runs_another_openmp_kernels_keep_tvms_pool(fresh_launcher, monkeypatch):
    monkeypatch.setattr(tp, "_torch_openmp", lambda: {"/opt/intel/lib/libiomp5.so"})
    assert tp.launcher() is None
    assert tp.launcher_status().startswith("TVM's own pool: PyTorch runs libiomp5.so, the launcher ")


def test_a_library_called_from_two_threads_at_once(built, tmp_path):
    """Each calling thread has a VM of its own (one VM called from two threads corrupts its registers) and an
    OpenMP team of its own."""
    from concurrent.futures import ThreadPoolExecutor

    model, x, ref, model_built = built
    path = tmp_path / "convs.so"
    model_built.export_library(path)
    lib = load_library(path, threads=2)
    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda _: lib(x), range(8)))
    for out in outs:
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


@needs_compiler
def test_a_forked_child_runs_the_kernels_on_one_thread(built, tmp_path):
    """A child of fork() has none of the parent's OpenMP threads: a parallel region there would wait forever
    (TVM's own pool hangs the same way); the launcher runs the loops in the calling thread instead."""
    import signal

    model, x, ref, model_built = built
    path = tmp_path / "convs.so"
    model_built.export_library(path)
    lib = load_library(path, threads=2)
    torch.testing.assert_close(lib(x), ref, rtol=1e-4, atol=1e-5)  # the parent's pool is started
    pid = os.fork()
    if pid == 0:  # the child: exit 0 if the kernels run and match, die by the alarm if they hang
        signal.alarm(60)
        ok = False
        try:
            ok = torch.allclose(lib(x), ref, rtol=1e-4, atol=1e-5)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


@needs_compiler
def test_an_executable_that_cannot_be_linked_stays_on_tvms_pool():
    class Unlinkable:  # export_library fails as it does without a linker (or where /tmp cannot hold code)
        def export_library(self, path):
            raise RuntimeError("no linker")

    code = Unlinkable()
    assert tp.launcher() is not None
    assert tp.load_executable(code, 2) is code
