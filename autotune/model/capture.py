"""Capture a PyTorch model as a Relax module: load it, torch.export it, import it into TVM.

A model is given as `path/to/file.py:factory` (a function returning `(module, example_inputs)`),
as a saved `torch.export` program (`.pt2`; random example inputs of its input shapes), or
directly as a `torch.nn.Module` with its inputs, or an `ExportedProgram`.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import AutotuneError
from .bool_ops import compute_bools_as_int8
from .fold import fold_batch_norms


class ExportFailed(AutotuneError):
    """torch.export cannot capture the program whole (extraction can go through torch.compile instead)."""


class ImportFailed(AutotuneError):
    """TVM's importer cannot take the exported program (an op it has no converter for, ...): extraction can go
    through torch.compile instead, which splits graphs around such ops."""


@dataclass(frozen=True)
class InputSpec:
    """Shape and dtype of one model input: what the built model accepts (the guard)."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.name}{list(self.shape)} {self.dtype}"


@dataclass
class Captured:
    """A model imported into TVM: the Relax module (not yet legalized) and its inputs."""

    name: str
    mod: Any  # tvm.IRModule with a Relax "main"
    inputs: tuple[InputSpec, ...]
    example_inputs: list[np.ndarray]


def _why(err: BaseException) -> str:
    """An exception as one line: its type and its message's first line."""
    text = str(err).splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def _import_torch():
    try:
        import torch
    except ImportError:
        raise AutotuneError("model commands need PyTorch: pip install torch") from None
    return torch


def load_factory(ref: str) -> tuple[Any, tuple]:
    """Call `path/to/file.py:factory` and return its `(module, example_inputs)`."""
    path, sep, attr = ref.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise AutotuneError(f"model {ref!r}: expected path/to/file.py:factory or a .pt2 file")
    file = Path(path)
    if not file.is_file():
        raise AutotuneError(f"model file {file} does not exist")
    spec = importlib.util.spec_from_file_location(f"autotune_model_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - any failure of user code or of the importer becomes one line
        raise AutotuneError(f"cannot import {file}: {type(err).__name__}: {err}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise AutotuneError(f"{file} has no function {attr!r}")
    result = factory()
    if not (isinstance(result, tuple) and len(result) == 2):
        raise AutotuneError(f"{ref} must return (module, example_inputs)")
    model, inputs = result
    return model, tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)


def _random_like(shape: Sequence[int], dtype: Any, seed: int) -> Any:
    torch = _import_torch()
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=gen).to(dtype)
    return torch.zeros(*shape, dtype=dtype)


def _load_program(path: Path) -> tuple[Any, tuple]:
    """A saved ExportedProgram and random inputs of its user input shapes."""
    torch = _import_torch()
    try:
        program = torch.export.load(str(path))
    except Exception as err:  # noqa: BLE001 - any failure of user code or of the importer becomes one line
        raise AutotuneError(f"cannot load exported program {path}: {type(err).__name__}: {err}") from None
    return program, _program_inputs(program)


def _program_inputs(program: Any) -> tuple:
    user = set(program.graph_signature.user_inputs)
    vals = [n.meta["val"] for n in program.graph.nodes if n.op == "placeholder" and n.name in user]
    for v in vals:
        if not all(isinstance(d, int) for d in v.shape):
            raise AutotuneError(f"exported program has a dynamic input shape {tuple(v.shape)}; "
                                "export it with static shapes")
    return tuple(_random_like(tuple(v.shape), v.dtype, seed=i) for i, v in enumerate(vals))


def export_program(model: Any, inputs: Sequence[Any] | None = None) -> tuple[Any, tuple, str]:
    """(ExportedProgram, example inputs as torch tensors, display name) of any accepted model form."""
    torch = _import_torch()
    if isinstance(model, (str, Path)):
        text = str(model)
        if text.endswith((".pt2", ".pt")) and ":" not in Path(text).name:
            if not Path(text).is_file():
                raise AutotuneError(f"exported program {text} does not exist")
            program, example = _load_program(Path(text))
            return program, example, Path(text).name
        model, example = load_factory(text)
        name = text
        inputs = inputs if inputs is not None else example
    else:
        name = type(model).__name__
    if isinstance(model, torch.export.ExportedProgram):
        return model, tuple(inputs) if inputs is not None else _program_inputs(model), name
    if not isinstance(model, torch.nn.Module):
        raise AutotuneError(f"cannot capture a {type(model).__name__}: give a torch.nn.Module, an ExportedProgram, "
                            "path/to/file.py:factory or a .pt2 file")
    if inputs is None:
        raise AutotuneError("a torch.nn.Module needs example inputs")
    example = tuple(torch.as_tensor(x) for x in (inputs if isinstance(inputs, (list, tuple)) else (inputs,)))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            program = torch.export.export(model.eval(), example)
        except Exception as err:  # noqa: BLE001 - any failure of user code or of the importer becomes one line
            raise ExportFailed(f"torch.export failed for {name}: {_why(err)}") from None
    return program, example, name


def capture(model: Any, inputs: Sequence[Any] | None = None) -> Captured:
    """Export the model and import it into Relax, weights embedded as constants (decomposed to core ATen and
    mended where TVM's importer disagrees with PyTorch, as the torch.compile path does: `aten_fixes`)."""
    from .aten_fixes import decompositions, fix_graph

    program, example, name = export_program(model, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            program = program.run_decompositions(decompositions())
        except Exception as err:  # noqa: BLE001 - any failure of user code or of the importer becomes one line
            raise AutotuneError(f"cannot decompose {name}: {_why(err)}") from None
    fix_graph(program.graph_module)
    return import_program(program, example, name, decomposed=True)


def import_program(program: Any, example: Sequence[Any], name: str, decomposed: bool = False) -> Captured:
    """Import an ExportedProgram into Relax (weights embedded as constants); `example`: its user inputs.

    decomposed: the program already went through `run_decompositions()` (not done twice).
    """
    from tvm.relax.frontend.torch import from_exported_program

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            mod = from_exported_program(program, keep_params_as_input=False, run_ep_decomposition=not decomposed)
        except Exception as err:  # noqa: BLE001 - any failure of user code or of the importer becomes one line
            raise ImportFailed(f"TVM cannot import {name}: {_why(err)}") from None
    mod = compute_bools_as_int8(fold_batch_norms(mod))
    params = mod["main"].params
    specs = tuple(InputSpec(p.name, tuple(int(d) for d in p.ty.shape), str(p.ty.dtype)) for p in params)
    arrays = [np.ascontiguousarray(x.detach().cpu().numpy()) for x in example]
    return Captured(name, mod, specs, arrays)
