"""Capture a PyTorch model as a Relax module: load it, torch.export it, import it into TVM.

A model is given as `path/to/file.py:factory` (a function returning `(module, example_inputs)`),
as a saved `torch.export` program (`.pt2`; random example inputs of its input shapes), or
directly as a `torch.nn.Module` with its inputs, or an `ExportedProgram`.

Both kinds of file are code: `file.py:factory` runs that file, and a `.pt2` can hold pickles, which run code
when unpickled, AOTInductor libraries, and shape expressions that torch evaluates as Python. `load_program`
reads a `.pt2` only when it holds none of them (the graph, raw tensors and arithmetic shape expressions, as
`torch.export.save` writes a plain module), unless `allow_pickle` is given.
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import re
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import AutotuneError
from . import quantized
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


def to_numpy(tensor: Any) -> np.ndarray:
    """A torch tensor's values as a numpy array (bf16 as ml_dtypes' bfloat16: numpy has no type of its own)."""
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


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
    except (Exception, SystemExit) as err:  # noqa: BLE001 - any failure of user code or of the importer: one line
        raise AutotuneError(f"cannot import {file}: {_why(err)}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise AutotuneError(f"{file} has no function {attr!r}")
    try:
        result = factory()
    except (Exception, SystemExit) as err:  # noqa: BLE001 - user code: any failure (sys.exit too) is one line
        raise AutotuneError(f"model {ref}: {attr}() raised {_why(err)}") from None
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


PICKLE_FLAG = "--allow-pickle (Python: allow_pickle=True)"
# What a symbolic shape expression of a .pt2 may contain: torch.export.load parses each with sympy.sympify,
# which evaluates it as Python. Symbols, numbers, operators, plain string literals (a symbol's name, in
# the srepr form torch writes: "Mul(Integer(2), Symbol('s0', positive=True, integer=True))"), keyword
# arguments and these functions only: no attribute, no subscript, no other name.
_EXPR_FUNCTIONS = frozenset({
    "Abs", "Add", "And", "CeilDiv", "CeilToInt", "CleanDiv", "Eq", "Float", "FloatPow", "FloatTrueDiv", "FloorDiv",
    "FloorToInt", "Ge", "Gt", "Identity", "IntTrueDiv", "Integer", "IsNonOverlappingAndDenseIndicator", "LShift",
    "Le", "Lt", "Max", "Min", "Mod", "ModularIndexing", "Mul", "Ne", "Not", "Or", "Pow", "PowByNatural", "PythonMod",
    "RShift", "Rational", "RoundDecimal", "RoundToInt", "Symbol", "ToFloat", "TruncToFloat", "TruncToInt", "Where",
    "ceiling", "floor", "int_oo", "oo", "sqrt", "true", "false", "True", "False"})
_EXPR_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+-*/%()<>=!&|~^.,' ")


def _safe_expr(text: str) -> bool:
    """Whether a symbolic shape expression is arithmetic only (see `_EXPR_FUNCTIONS`)."""
    if not set(text) <= _EXPR_CHARS:
        return False
    rest = re.sub(r"'[A-Za-z0-9_.+-]*'", "0", text)  # a symbol's name, a float's digits
    rest = re.sub(r"(?<![A-Za-z0-9_])\d+(\.\d*)?([eE][+-]?\d+)?", "0", rest)
    rest = re.sub(r"(?<![A-Za-z0-9_])[a-z_]+=(?!=)", "", rest)  # keyword arguments: positive=True
    if "." in rest or "'" in rest:  # an attribute, another string
        return False
    return all(re.fullmatch(r"[a-z]+\d+", name) or name in _EXPR_FUNCTIONS
               for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", rest))


def _expressions(value: Any) -> list[str]:
    """Every "expr_str" in a JSON value."""
    if isinstance(value, dict):
        own = [value["expr_str"]] if isinstance(value.get("expr_str"), str) else []
        return own + [e for v in value.values() for e in _expressions(v)]
    if isinstance(value, list):
        return [e for v in value for e in _expressions(v)]
    return []


def _unsafe_part(data: bytes) -> str | None:
    """What in a `.pt2` archive (its bytes) runs code when torch.export.load reads it, or None.

    torch.export.load evaluates each symbolic shape expression as Python (sympy.sympify); it unpickles, with
    pickling allowed, weights and constants marked `use_pickle`, custom and
    opaque objects, the legacy `.pt` weight files and the older archive format, and the sample inputs when
    `torch.load(weights_only=True)` fails on them; it loads AOTInductor libraries (native code).
    """
    torch = _import_torch()
    from torch.export.pt2_archive import constants as pt2
    from torch.export.pt2_archive._package import PT2ArchiveReader

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = archive.namelist()
    except (zipfile.BadZipFile, ValueError) as err:
        return f"not a torch.export archive ({err})"
    if any("/" not in name for name in entries):  # the legacy layout (a root "version"): read with pickling on
        return "an archive in the older torch.export format (pickled)"
    try:
        with PT2ArchiveReader(io.BytesIO(data)) as reader:
            names = reader.get_file_names()
            if pt2.ARCHIVE_VERSION_PATH not in names:
                return "not a torch.export archive (no archive_version)"
            if any(n.startswith(pt2.AOTINDUCTOR_DIR) for n in names):
                return "an AOTInductor library (native code)"
            models = [n[len(pt2.MODELS_DIR):-len(".json")] for n in names
                      if n.startswith(pt2.MODELS_DIR) and n.endswith(".json")]
            for model in models:
                for expr in _expressions(json.loads(reader.read_string(f"{pt2.MODELS_DIR}{model}.json"))):
                    if not _safe_expr(expr):
                        return f"a shape expression that is not arithmetic ({expr[:60]!r})"
                if f"{pt2.WEIGHTS_DIR}{model}.pt" in names or f"{pt2.CONSTANTS_DIR}{model}.pt" in names:
                    return f"pickled weights of {model!r} (legacy .pt files)"
                for kind, config, raw in (("weight", pt2.WEIGHTS_CONFIG_FILENAME_FORMAT, pt2.WEIGHT_FILENAME_PREFIX),
                                          ("constant", pt2.CONSTANTS_CONFIG_FILENAME_FORMAT,
                                           pt2.TENSOR_CONSTANT_FILENAME_PREFIX)):
                    file = config.format(model)
                    payloads = json.loads(reader.read_string(file))["config"] if file in names else {}
                    for fqn, meta in payloads.items():  # raw tensors only: custom and opaque objects are pickles
                        if meta.get("use_pickle") or not str(meta.get("path_name", "")).startswith(raw):
                            return f"a pickled {kind} {fqn!r}"
                sample = pt2.SAMPLE_INPUTS_FILENAME_FORMAT.format(model)
                if sample in names:
                    try:
                        torch.load(io.BytesIO(reader.read_bytes(sample)), weights_only=True)
                    except Exception:  # noqa: BLE001 - torch.export.load would unpickle them with pickling on
                        return "sample inputs that only load with pickling on"
    except Exception as err:  # noqa: BLE001 - a malformed archive: torch's reader and json raise many kinds
        return f"not a readable torch.export archive ({_why(err)})"
    return None


def load_program(path: str | Path, allow_pickle: bool = False) -> Any:
    """The ExportedProgram saved in a `.pt2` file, read with pickling off: an archive that holds pickles,
    native code or shape expressions other than arithmetic (see `_unsafe_part`) is refused unless
    `allow_pickle` (the file is then trusted code)."""
    torch = _import_torch()
    path = Path(path)
    if not path.is_file():
        raise AutotuneError(f"exported program {path} does not exist or is not a file")
    data = path.read_bytes()  # checked and loaded from the same bytes
    if not allow_pickle:
        unsafe = _unsafe_part(data)
        if unsafe is not None:
            raise AutotuneError(f"{path} holds {unsafe}, which runs code when loaded; if you trust the file, "
                                f"load it with {PICKLE_FLAG}")
    quantized.register_ops()  # a quantized program's ops
    quiet = logging.getLogger("torch.export")  # it logs a traceback before trying the older format
    was, quiet.disabled = quiet.disabled, True
    try:
        return torch.export.load(io.BytesIO(data))
    except Exception as err:  # noqa: BLE001 - any failure of the deserializer becomes one line
        raise AutotuneError(f"cannot load exported program {path}: {_why(err)}") from None
    finally:
        quiet.disabled = was


def _load_program(path: Path, allow_pickle: bool = False) -> tuple[Any, tuple]:
    """A saved ExportedProgram and random inputs of its user input shapes."""
    program = load_program(path, allow_pickle)
    return program, _program_inputs(program)


def _program_inputs(program: Any) -> tuple:
    user = set(program.graph_signature.user_inputs)
    vals = [n.meta["val"] for n in program.graph.nodes if n.op == "placeholder" and n.name in user]
    for v in vals:
        if not all(isinstance(d, int) for d in v.shape):
            raise AutotuneError(f"exported program has a dynamic input shape {tuple(v.shape)}; "
                                "export it with static shapes")
    return tuple(_random_like(tuple(v.shape), v.dtype, seed=i) for i, v in enumerate(vals))


def export_program(model: Any, inputs: Sequence[Any] | None = None,
                   allow_pickle: bool = False) -> tuple[Any, tuple, str]:
    """(ExportedProgram, example inputs as torch tensors, display name) of any accepted model form.

    allow_pickle: load a `.pt2` that runs code when loaded (see `load_program`)."""
    torch = _import_torch()
    if isinstance(model, (str, Path)):
        text = str(model)
        if text.endswith((".pt2", ".pt")) and ":" not in Path(text).name:
            if not Path(text).is_file():
                raise AutotuneError(f"exported program {text} does not exist")
            program, example = _load_program(Path(text), allow_pickle)
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
    example = example_tensors(inputs, name)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            program = torch.export.export(evaluating(model), example)
        except Exception as err:  # noqa: BLE001 - any failure of user code or of the importer becomes one line
            raise ExportFailed(f"torch.export failed for {name}: {_why(err)}") from None
    return program, example, name


def evaluating(model: Any) -> Any:
    """The module in eval mode. A module made by torch.export (a model PT2E converted) refuses `eval()`; it runs as
    it was exported."""
    try:
        return model.eval()
    except NotImplementedError:
        return model


def example_tensors(inputs: Any, name: str) -> tuple:
    """A model's example inputs as torch tensors; one that is not a tensor or an array is a one-line error."""
    torch = _import_torch()
    try:
        return tuple(torch.as_tensor(x) for x in (inputs if isinstance(inputs, (list, tuple)) else (inputs,)))
    except Exception as err:  # noqa: BLE001 - whatever the factory returned
        raise AutotuneError(f"model {name}: example inputs must be tensors or arrays: {_why(err)}") from None


def capture(model: Any, inputs: Sequence[Any] | None = None, allow_pickle: bool = False) -> Captured:
    """Export the model and import it into Relax, weights embedded as constants (decomposed to core ATen and
    mended where TVM's importer disagrees with PyTorch, as the torch.compile path does: `aten_fixes`).
    allow_pickle: see `load_program`."""
    program, example, name = export_program(model, inputs, allow_pickle)
    return import_program(program, example, name)


def to_relax(program: Any, name: str) -> Any:
    """The Relax module of a decomposed ExportedProgram (`decomposed`; weights embedded as constants, symbolic
    sizes kept), batch norms folded, bool arithmetic on int8. ImportFailed (one line) where TVM cannot import it."""
    from tvm.relax.frontend.torch import from_exported_program

    from .import_fixes import converters

    convert = {**converters(), **(quantized.convert_map(program) if quantized.is_quantized(program) else {})}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            mod = from_exported_program(program, keep_params_as_input=False, run_ep_decomposition=False,
                                        custom_convert_map=convert)
        except quantized.Unsupported as err:
            raise ImportFailed(f"{name} is quantized (PT2E), and autotune cannot compute {err} in int8") from None
        except Exception as err:  # noqa: BLE001 - any failure of user code or of the importer becomes one line
            raise ImportFailed(f"TVM cannot import {name}: {_why(err)}") from None
    return compute_bools_as_int8(fold_batch_norms(mod))


def decomposed(program: Any, name: str) -> Any:
    """The ExportedProgram decomposed to core ATen and mended where TVM's importer disagrees with PyTorch
    (`aten_fixes`); one that already is (the torch.compile backend's) as it is."""
    from .aten_fixes import FIXED, decompositions, fix_graph

    if program.graph_module.meta.get(FIXED):
        return program
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            program = program.run_decompositions(decompositions())
        except Exception as err:  # noqa: BLE001 - any failure of user code or of the importer becomes one line
            raise AutotuneError(f"cannot decompose {name}: {_why(err)}") from None
    fix_graph(program.graph_module)
    return program


def import_program(program: Any, example: Sequence[Any], name: str) -> Captured:
    """Import an ExportedProgram into Relax (`decomposed`, then `to_relax`); `example`: its user inputs."""
    mod = to_relax(decomposed(program, name), name)
    params = mod["main"].params
    specs = tuple(InputSpec(p.name, tuple(int(d) for d in p.ty.shape), str(p.ty.dtype)) for p in params)
    arrays = [np.ascontiguousarray(to_numpy(x)) for x in example]
    return Captured(name, mod, specs, arrays)
