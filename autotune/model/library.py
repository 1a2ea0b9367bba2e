"""A model library written by `autotune build -o`, loaded to be called from a Python (PyTorch) program.

    model = load_library("resnet18.so")
    out = model(x)          # torch tensors in and out (no copies), or numpy arrays in and out

Its kernels' parallel loops run on the process's OpenMP pool (`autotune.thread_pool`), the one PyTorch's eager
ops run on: called right after eager code, it runs as fast as in a process of its own.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import AutotuneError
from ..target import check_runs_here, kernel_threads
from ..thread_pool import load_library as _load


def numpy_outputs(out: Any) -> list[Any]:
    """A VM result (one tensor, or nested tuples of them) as a flat list of numpy arrays."""
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [a for item in out for a in numpy_outputs(item)]


def runtime_device(kind: str, target: dict[str, Any], name: str) -> Any:
    """The TVM device ("cpu" or "cuda") a model built for `target` runs on here (one-line errors where it cannot:
    another machine's target, no such device)."""
    import tvm

    check_runs_here(target, name)
    dev = tvm.device(kind)
    if not dev.exist:
        raise AutotuneError(f"{name} was built for {kind} and this machine has no {kind} device "
                            "(export_library it and run it where there is one)")
    return dev


class ThreadVMs:
    """A Relax VM per calling thread over one loaded executable: a VM keeps its registers in itself, so two
    threads calling one VM at once corrupt each other's calls."""

    def __init__(self, code: Any, device: Any):
        self.code, self.device, self.local = code, device, threading.local()

    def vm(self) -> Any:
        got = getattr(self.local, "vm", None)
        if got is None:
            from tvm import relax

            got = self.local.vm = relax.VirtualMachine(self.code, self.device)
            self.local.main = got["main"]
        return got

    def main(self) -> Callable[..., Any]:
        """This thread's VM's `main`."""
        main = getattr(self.local, "main", None)
        if main is None:
            self.vm()
            main = self.local.main
        return main


def torch_caller(vms: ThreadVMs) -> Callable[[Sequence[Any]], list[Any]]:
    """Call a VM function on torch tensors; its outputs as torch tensors, both ways without copies. Called with
    torch tensors, TVM's FFI gives torch tensors back (PyTorch's DLPack exchange API); DLPack converts the rest."""
    import torch

    tensor, from_dlpack = torch.Tensor, torch.from_dlpack

    def flat(out: Any) -> list[Any]:
        if isinstance(out, tensor):
            return [out]
        if hasattr(out, "shape"):
            return [from_dlpack(out)]
        return [t for item in out for t in flat(item)]

    def call(args: Sequence[Any]) -> list[Any]:
        out = vms.main()(*args)
        if type(out) is tensor:
            return [out]
        items = list(out)  # the usual result: a tuple of tensors, already torch's
        for t in items:
            if type(t) is not tensor:
                return flat(out)
        return items

    return call


class ModelLibrary:
    """A loaded model library: call it on torch tensors (torch tensors back) or numpy arrays (numpy back; no
    PyTorch needed)."""

    def __init__(self, path: str | os.PathLike, threads: int | None = None):
        import tvm

        if not os.path.isfile(path):
            raise AutotuneError(f"model library {path} does not exist or is not a file")
        self.path = str(path)
        self.threads = int(threads or kernel_threads({"kind": "llvm"}))  # TVM_NUM_THREADS, else every core
        try:
            self.vms = ThreadVMs(_load(self.path, self.threads), tvm.cpu())
            self.vms.vm()
        except Exception as err:  # noqa: BLE001 - not a TVM library: one line
            raise AutotuneError(f"{path} is not a model library autotune built: {str(err).splitlines()[0]}") from None
        self._torch: Callable[[Sequence[Any]], list[Any]] | None = None  # made at the first call on torch tensors

    def _call_torch(self, args: Sequence[Any]) -> list[Any]:
        if self._torch is None:
            self._torch = torch_caller(self.vms)
        return self._torch(args)

    def __call__(self, *args: Any) -> Any:
        torch = sys.modules.get("torch")
        try:
            if torch is not None and args and all(isinstance(a, torch.Tensor) for a in args):
                outs = self._call_torch([a.detach().contiguous() for a in args])
            else:
                import numpy as np
                import tvm

                outs = numpy_outputs(self.vms.main()(*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in args]))
        except (RuntimeError, TypeError, ValueError, AssertionError) as err:  # TVM's VM checks every input (a
            # dynamic model also its sizes' ranges, `dynamic.inputs.assert_ranges`): its reason, one line
            raise AutotuneError(f"{os.path.basename(self.path)}: {str(err).strip().splitlines()[-1]}") from None
        return outs[0] if len(outs) == 1 else tuple(outs)


def load_library(path: str | os.PathLike, threads: int | None = None) -> ModelLibrary:
    """Load a model library (`autotune build -o`); `threads`: its kernels' threads (default: TVM_NUM_THREADS,
    else every core this process may use)."""
    return ModelLibrary(path, threads)
