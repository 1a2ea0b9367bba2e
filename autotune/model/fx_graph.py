"""One FX graph handed over by Dynamo, exported for the concrete inputs it is called with.

Dynamo passes parameters and buffers as graph inputs; they become buffers of a wrapper module
(so the import embeds them as constants), scalar inputs (symbolic sizes) become constants, and
`torch.export` turns the rest into an ATen program that `capture.import_program` takes.
"""

from __future__ import annotations

import hashlib
import operator
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .aten_fixes import decompositions, fix_graph


class Refused(Exception):
    """Why a graph cannot run on autotune's kernels: becomes the one warning of the eager fallback."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
        self.result: Any = None  # the call's eager outputs, where they were computed before the refusal


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200] if text else ''}"


def placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


WRITTEN = "autotune_written"  # placeholder meta: the tensor is written in place elsewhere (never a constant)


def static_inputs(gm: torch.fx.GraphModule, args: Sequence[Any]) -> set[int]:
    """Positions of the graph inputs that are parameters or buffers (embedded as constants), but for those
    marked WRITTEN (a segment's input that the graph around it writes in place, `partition`)."""
    out = set()
    for i, (node, a) in enumerate(zip(placeholders(gm), args)):
        if node.meta.get(WRITTEN):
            continue
        tensor_dict = node.meta.get("tensor_dict") or {}
        if isinstance(a, torch.nn.Parameter) or tensor_dict.get("_dynamo_static_input_type"):
            out.add(i)
    return out


def graph_label(gm: torch.fx.GraphModule) -> str:
    """'graph 0/1 (file.py:12 in forward)': Dynamo's compile id and the source line of the first op."""
    where = ""
    for n in gm.graph.nodes:
        trace = n.meta.get("stack_trace") if n.op in ("call_function", "call_method", "call_module") else None
        frames = [t.strip() for t in (trace or "").splitlines() if t.strip().startswith("File ")]
        if frames:
            file, _, rest = frames[-1][5:].partition(", line ")
            num, _, func = rest.partition(", in ")
            where = f" ({os.path.basename(file.strip(chr(34)))}:{num} in {func})"
            break
    return f"graph {gm.meta.get('dynamo_compile_id', '?')}{where}"


def graph_identity(gm: torch.fx.GraphModule) -> tuple | None:
    """What the graph computes, whichever Dynamo compile made it: its code, the functions it calls and the contents
    of its own constants. A frame recompiled for a guard that does not touch the graph (a float after a graph
    break, grad mode, ...) hands over an equal graph: with `call_key`, its build is found without an export.
    None where the graph holds something this cannot tell apart (a module called by name)."""
    parts: list[Any] = [gm.code]
    for n in gm.graph.nodes:
        if n.op == "call_function":
            parts.append(n.target)
        elif n.op == "call_module":
            sub = gm.get_submodule(n.target)
            inner = graph_identity(sub) if isinstance(sub, torch.fx.GraphModule) else None
            if inner is None:
                return None
            parts.append(inner)
        elif n.op == "get_attr":
            val = operator.attrgetter(n.target)(gm)
            if isinstance(val, torch.fx.GraphModule):
                val = graph_identity(val)
                if val is None:
                    return None
            elif isinstance(val, torch.Tensor):
                val = _content_hash(val)
            elif not isinstance(val, (int, float, bool, str, type(None))):
                return None
            parts.append((n.target, val))
    try:
        hash(identity := tuple(parts))  # a call target that cannot be a key: no identity
    except TypeError:
        return None
    return identity


def _reads_value_only(node: torch.fx.Node) -> bool:
    return bool(node.users) and all((u.op == "call_method" and u.target == "item")
                                    or u.target is torch.ops.aten.item.default for u in node.users)


def scalar_inputs(gm: torch.fx.GraphModule) -> set[int]:
    """Positions of the 0-d tensor inputs the graph reads only as a number (`.item()`): Dynamo's float attributes
    under `dynamic=True` (a norm's eps). An export cannot trace their value: builds fix it (`Specialised`), and it
    is in the call key."""
    return {i for i, n in enumerate(placeholders(gm)) if isinstance(v := n.meta.get("example_value"), torch.Tensor)
            and v.ndim == 0 and _reads_value_only(n)}


def call_key(args: Sequence[Any], static: set[int], scalars: set[int] = frozenset()) -> tuple:
    """What a build depends on: input shapes and dtypes, scalar values (`scalar_inputs` too), identity and version
    of the weights.

    Called on every call of a compiled graph, so kept cheap: a weight is its storage pointer and
    version counter (any in-place change bumps the version; a new tensor has a new pointer).
    """
    key = []
    for i, a in enumerate(args):
        if i in static:
            key.append((a.data_ptr(), a._version))
        elif i in scalars:
            key.append(("value", a.item()))
        elif isinstance(a, torch.Tensor):
            key.append((a.shape, a.dtype, a.device))
        else:
            key.append((type(a), a) if isinstance(a, (int, float, bool)) else repr(a))
    return tuple(key)


def _symbol(size: Any) -> str | None:
    """The expression of a size Dynamo made symbolic (`s27`), None for a fixed one (Dynamo's SymInts of a constant
    value too)."""
    expr = getattr(getattr(size, "node", None), "expr", None)
    return str(expr) if isinstance(size, torch.SymInt) and getattr(expr, "free_symbols", None) else None


def symbolic_sizes(gm: torch.fx.GraphModule) -> dict[int, dict[int, str]]:
    """Input position -> {dimension: symbol} of the graph's tensor inputs with sizes Dynamo made symbolic
    (`torch.compile(dynamic=True)`, or a size seen to change); {} for a graph of static shapes."""
    out: dict[int, dict[int, str]] = {}
    for i, node in enumerate(placeholders(gm)):
        val = node.meta.get("example_value")
        dims = {d: sym for d, size in enumerate(getattr(val, "shape", ())) if (sym := _symbol(size)) is not None}
        if isinstance(val, torch.Tensor) and dims:
            out[i] = dims
    return out


class Specialised(torch.nn.Module):
    """The graph with its weights as buffers and its scalar inputs fixed; forward takes the user tensors. With
    `sizes` (a graph of symbolic sizes exported with them dynamic), a scalar input that is a symbolic size is read
    from the user tensor that has it (input position -> (user index, dimension)) instead of fixed."""

    def __init__(self, gm: torch.fx.GraphModule, args: Sequence[Any], static: set[int],
                 sizes: dict[int, tuple[int, int]] | None = None):
        super().__init__()
        scalars = scalar_inputs(gm)
        self.gm = _numbers_for(gm, scalars) if scalars else gm
        self.plan: list[tuple[str, Any]] = []
        self.name_of: dict[int, str] = {}
        n_user = 0
        for i, (node, a) in enumerate(zip(placeholders(gm), args)):
            if i in scalars:
                self.plan.append(("value", a.item()))
            elif i in static:
                self.name_of[i] = f"{WEIGHT_PREFIX}{node.name}"  # the same in the static and dynamic graph
                self.register_buffer(self.name_of[i], a.detach())
                self.plan.append(("attr", self.name_of[i]))
            elif isinstance(a, torch.Tensor):
                self.plan.append(("input", n_user))
                n_user += 1
            elif sizes and i in sizes:
                self.plan.append(("size", sizes[i]))
            else:
                self.plan.append(("value", int(a) if isinstance(a, torch.SymInt) else a))

    def forward(self, *inputs: Any) -> Any:
        vals = [getattr(self, v) if kind == "attr" else inputs[v] if kind == "input" else
                inputs[v[0]].shape[v[1]] if kind == "size" else v for kind, v in self.plan]
        return self.gm(*vals)


def _numbers_for(gm: torch.fx.GraphModule, scalars: set[int]) -> torch.fx.GraphModule:
    """A copy of the graph taking the `scalar_inputs` at `scalars` as numbers (their `.item()` calls removed)."""
    import copy

    out = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    nodes = placeholders(out)
    for i in scalars:
        for use in list(nodes[i].users):
            use.replace_all_uses_with(nodes[i])
            out.graph.erase_node(use)
    out.recompile()
    return out


def _dynamic_plan(gm: torch.fx.GraphModule, user: list[int]) -> tuple[dict[int, tuple[int, int]], dict]:
    """(scalar inputs that are symbolic sizes -> the (user index, dimension) holding them, torch.export's
    dynamic_shapes of the user inputs: Dim.DYNAMIC where Dynamo's size is symbolic). Refused where a symbolic
    scalar is no user tensor's size."""
    dims = symbolic_sizes(gm)
    where = {sym: (k, d) for k, i in enumerate(user) for d, sym in dims.get(i, {}).items()}
    sizes = {}
    for i, node in enumerate(placeholders(gm)):
        sym = _symbol(node.meta.get("example_value"))
        if sym is not None:
            if sym not in where:
                raise Refused(f"the symbolic size {sym} is no input's size")
            sizes[i] = where[sym]
    made: dict[str, Any] = {}

    def dim(i: int, d: int) -> Any:
        sym = dims[i][d]
        if sym not in made:
            lo, hi = _size_range(placeholders(gm)[i].meta["example_value"].shape[d])
            made[sym] = torch.export.Dim(f"d{len(made)}", min=lo, **({} if hi is None else {"max": hi}))
        return made[sym]

    shapes = {"inputs": tuple({d: dim(i, d) for d in dims[i]} if i in dims else None for i in user)}
    return sizes, shapes


def _size_range(size: torch.SymInt) -> tuple[int, int | None]:
    """Dynamo's bounds of a symbolic size (its shape environment's); None for an upper one it does not know. No
    bound is made up: TVM plans a model's memory for its sizes' upper bounds (an image of 4096 x 4096 pixels, at
    every layer), and the dynamic kernels plan sizes without one as up to `dynamic.sites.DEFAULT_BOUNDS`."""
    from torch.utils._sympy.numbers import int_oo

    node = size.node
    bounds = node.shape_env.bound_sympy(node.expr)
    lo = 1 if bounds.lower in (-int_oo, int_oo) else max(int(bounds.lower), 1)
    return lo, None if bounds.upper in (-int_oo, int_oo) else max(int(bounds.upper), lo)


WEIGHT_PREFIX = "autotune_w_"


@dataclass
class Exported:
    """A graph exported for concrete inputs: the program, its user inputs (positions in args), a cache key, and
    what keeps the graph from being one TVM build (`export_graph`; the backend splits such graphs)."""

    program: Any  # torch.export.ExportedProgram
    user: list[int]
    key: str
    mutates: str = ""  # "BUFFER_MUTATION, ...": the graph writes its inputs or buffers in place
    unfit_output: str = ""  # why an output cannot come from a build (a view of an input, not a tensor)


def _export(wrapper: torch.nn.Module, inputs: tuple[Any, ...], shapes: dict | None) -> Any:
    """torch.export of the wrapper; where the symbolic sizes' ranges break a guard the trace holds (a convolution's
    output not 1 pixel wide, which no range of its input states), again with those sizes `Dim.AUTO`: the guard
    stays the program's own, the ranges are torch.export's (a constant where one is forced)."""
    try:
        return torch.export.export(wrapper, inputs, dynamic_shapes=shapes, strict=False)
    except torch._dynamo.exc.UserError as err:
        if shapes is None or "Constraints violated" not in str(err):
            raise
    auto = {"inputs": tuple(None if dims is None else dict.fromkeys(dims, torch.export.Dim.AUTO)
                            for dims in shapes["inputs"])}
    return torch.export.export(wrapper, inputs, dynamic_shapes=auto, strict=False)


def export_graph(gm: torch.fx.GraphModule, args: Sequence[Any], static: set[int], salt: str = "",
                 dynamic: bool = False) -> Exported:
    """Export the graph specialised to `args` (`dynamic`: its symbolic sizes left dynamic, `symbolic_sizes`), or
    refuse (device, autograd, export failure, random numbers). In-place writes to its inputs and outputs a build
    cannot give are noted (`Exported.mutates`, `unfit_output`)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if any(t.device.type != "cpu" for t in tensors):
        raise Refused("inputs are not on the CPU (the backend builds for llvm only)")
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise Refused("gradients are needed (autotune builds inference kernels: run under torch.no_grad())")
    user = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in static | scalar_inputs(gm)]
    sizes, shapes = _dynamic_plan(gm, user) if dynamic else ({}, None)
    wrapper = Specialised(gm, args, static, sizes)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            program = _export(wrapper, tuple(args[i] for i in user), shapes)
            program = program.run_decompositions(decompositions())  # core ATen, functional: mutations -> outputs
        except Exception as err:  # noqa: BLE001 - any export failure means: run eagerly
            raise Refused(f"torch.export failed: {one_line(err)}") from None
    kinds = {s.kind.name for s in program.graph_signature.output_specs} - {"USER_OUTPUT"}
    random = sorted({str(n.target) for n in program.graph.nodes if n.op == "call_function"
                     and torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())})
    if random:
        raise Refused(f"the graph draws random numbers ({', '.join(random)})")
    fix_graph(program.graph_module)
    digest = hashlib.sha256(program.graph_module.code.encode())
    symbolic = symbolic_sizes(gm) if dynamic else {}
    digest.update(repr([(tuple(symbolic.get(i, {}).get(d, n) for d, n in enumerate(args[i].shape)),
                         str(args[i].dtype)) for i in user]).encode())
    for i in sorted(static):
        digest.update(repr((wrapper.name_of[i], args[i].data_ptr(), args[i]._version)).encode())
    for name, t in sorted({**program.state_dict, **program.constants}.items()):
        if isinstance(t, torch.Tensor) and not name.startswith(WEIGHT_PREFIX):  # the graph's own constants
            digest.update(name.encode() + _content_hash(t))
    digest.update(salt.encode())
    return Exported(program, user, digest.hexdigest(), ", ".join(sorted(kinds)), unfit_output(gm))


def storage(val: Any) -> Any:
    """The storage of a tensor (a FakeTensor of the graph's example values too), comparable with ==; None else."""
    from torch.multiprocessing.reductions import StorageWeakRef

    return StorageWeakRef(val.untyped_storage()) if isinstance(val, torch.Tensor) else None


def unfit_output(gm: torch.fx.GraphModule) -> str:
    """Why an output of the graph cannot come from a build ("" if none): a non-tensor, or a view of an input
    (TVM returns new tensors)."""
    inputs = {storage(n.meta.get("example_value")) for n in placeholders(gm)} - {None}
    outs = gm.graph.output_node().args[0]
    for k, out in enumerate(outs if isinstance(outs, (list, tuple)) else [outs]):
        val = out.meta.get("example_value") if isinstance(out, torch.fx.Node) else out
        if not isinstance(val, torch.Tensor):
            return f"output {k} is a {type(val).__name__}, not a tensor"
        if storage(val) in inputs:
            return f"output {k} is a view of an input (kept eager to keep the aliasing)"
    return ""


def _content_hash(t: torch.Tensor) -> bytes:
    data = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
    return hashlib.sha256(data.tobytes()).digest() + repr((tuple(t.shape), str(t.dtype))).encode()
