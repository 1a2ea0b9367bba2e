"""Split a captured FX graph where one build cannot take it whole: those parts run eagerly, the rest in segments.

A Dynamo graph with one op TVM's importer has no converter for (`torch.histc`, a custom op such as
transformers' `grouped_mm_fallback`), an in-place write to its inputs (a cache updated in place) or an output
that is a view of an input would otherwise run eagerly whole. Here the graph's exported (core ATen)
program names the ops TVM lacks and each is traced back to the node of the Dynamo graph it came from (its stack
trace's line in the graph's code). The other nodes form segments: runs of consecutive nodes in the graph's own
order, so that every node, eager or not, runs in that order (in-place writes stay where they were). Each segment
is a graph of its own, built and checked like one Dynamo hands over; the graph that calls them runs the rest
eagerly.

TVM's outputs are new tensors, never views, and a segment is functional, so some nodes stay eager with the ops
TVM lacks (`eager_nodes`), conservatively:
- an in-place op (`x[i] = v`, `x /= y`, `x.add_(y)`, `out=`/`inplace=True`) and every node whose value shares the
  storage it writes (in eager they see the write: a copy would not);
- allocations without values (`torch.empty_like`, ...): their contents are whatever the memory held;
- a value that leaves a segment as a view of the segment's inputs, or that is not a tensor: segments return new
  tensors only; and a node taking a value that is neither a tensor nor a number (a tuple of tensors) from outside
  its segment: it would be a constant of the build (`split_graph` takes such nodes out and splits again).
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from .fx_graph import WRITTEN, Exported, Refused, placeholders, storage

SEGMENT_PREFIX = "tvm_segment_"
_GRAPH_FRAME = 'File "<eval_with_key>'  # a frame of an FX GraphModule's generated forward
_ASSIGN = re.compile(r"^\s*(\w+) = ")  # the generated code assigns each node's value to the node's name
_IN_PLACE = {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
             operator.imod, operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor,
             operator.ilshift, operator.irshift}
_NUMBERS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)
_UNINITIALISED = {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided"}


@functools.lru_cache(maxsize=1)
def importable_ops() -> frozenset[str]:
    """Names of the ops an exported program's import converts (`add.Tensor`, ...): TVM's importer's, and PT2E's
    quantize / dequantize ops (`quantized`)."""
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    from .quantized import OPS

    return frozenset(ExportedProgramImporter().create_convert_map()) | OPS


def unimportable(program: Any) -> list[torch.fx.Node]:
    """The nodes of an exported program whose op TVM's importer has no converter for."""
    ops = importable_ops()
    return [n for n in program.graph.nodes
            if n.op == "call_function" and getattr(n.target, "__name__", str(n.target)) not in ops]


def source_node(exported: torch.fx.Node, nodes: dict[str, torch.fx.Node]) -> torch.fx.Node | None:
    """The node of a graph (`nodes`: its nodes by name) an exported node came from: the first frame of an FX
    graph's code in its stack trace (the graph the export called) is the line `name = op(...)` of that node.
    None where it cannot be told."""
    lines = (exported.meta.get("stack_trace") or "").splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.strip().startswith(_GRAPH_FRAME):
            match = _ASSIGN.match(lines[i + 1])
            return nodes.get(match.group(1)) if match else None
    return None


def _name(node: torch.fx.Node) -> str:
    return node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")


def _written(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes whose tensor `node` writes in place (recognised by name: the operator's augmented assignments
    and item assignment, methods and functions named with a trailing underscore, `out=` and `inplace=True`)."""
    first = node.args[0] if node.args else None
    name = _name(node)
    written = []
    if node.op == "call_function" and node.target in _IN_PLACE or node.kwargs.get("inplace") is True or (
            node.op in ("call_function", "call_method") and name.endswith("_") and not name.startswith("_")):
        written.append(first)
    out = node.kwargs.get("out")
    written += list(out) if isinstance(out, (list, tuple)) else [out]
    return [w for w in written if isinstance(w, torch.fx.Node)]


def _storage(node: torch.fx.Node) -> Any:
    return storage(node.meta.get("example_value"))


def eager_nodes(gm: torch.fx.GraphModule, unimportable_nodes: Iterable[torch.fx.Node]) -> set[torch.fx.Node]:
    """The nodes of a Dynamo graph that stay out of segments (module docstring): those TVM cannot import, the
    allocations without values, and each in-place write with the nodes sharing the storage it writes (by the
    storage of their example values)."""
    eager = set(unimportable_nodes)
    storages = {n: _storage(n) for n in gm.graph.nodes}
    for node in gm.graph.nodes:
        if node.op == "call_function" and _name(node) in _UNINITIALISED or node.op == "call_method" and \
                node.target in _UNINITIALISED:
            eager.add(node)
        for target in _written(node):
            shared = {target} | {m for m, s in storages.items() if s is not None and s == storages[target]}
            eager |= {node} | shared
    return eager


def _leaks(nodes: set[torch.fx.Node]) -> set[torch.fx.Node]:
    """The nodes of a segment whose value leaves it but cannot (not a tensor, or a view of the segment's inputs),
    and those that take a value that cannot enter it: neither a tensor nor a number (a tuple of tensors, as
    `torch.topk` returns, would become a constant of the build)."""
    inputs = {a for n in nodes for a in n.all_input_nodes if a not in nodes}
    storages = {_storage(a) for a in inputs} - {None}
    outputs = [n for n in nodes if any(u not in nodes for u in n.users)]
    unfit = {a for a in inputs if not isinstance(a.meta.get("example_value"), (torch.Tensor, *_NUMBERS))}
    return {n for n in outputs if not isinstance(n.meta.get("example_value"), torch.Tensor)
            or _storage(n) in storages} | {n for n in nodes if unfit & set(n.all_input_nodes)}


def _runs(gm: torch.fx.GraphModule, eager: set[torch.fx.Node]) -> list[list[torch.fx.Node]]:
    """Maximal runs of consecutive non-eager operations, in the graph's order, of two or more nodes (one is not
    worth a build). Placeholders and attribute reads neither join nor break a run."""
    runs: list[list[torch.fx.Node]] = [[]]
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            continue
        if node.op == "output" or node in eager:
            runs.append([])
        else:
            runs[-1].append(node)
    return [r for r in runs if len(r) >= 2]


def split_graph(gm: torch.fx.GraphModule, eager: Iterable[torch.fx.Node]) -> tuple[torch.fx.GraphModule, list[str]]:
    """A copy of `gm` in which the runs of nodes between the `eager` ones (`_runs`; a node whose value could not
    leave its run, `_leaks`, goes eager too) are segments: submodules named SEGMENT_PREFIX + number, returning
    tuples of tensors, called where their run was. Returns the new graph and its segments' names in the graph's
    order (none when no run is left)."""
    graph = torch.fx.Graph()
    copies: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.output(graph.graph_copy(gm.graph, copies))
    split = torch.fx.GraphModule(gm, graph)
    split.meta.update(gm.meta)
    keep_eager = {copies[n] for n in eager}
    while True:
        runs = _runs(split, keep_eager)
        leaks = set().union(*(_leaks(set(r)) for r in runs))
        if not leaks:
            break
        keep_eager |= leaks
    fuse_by_partitions(split, [dict.fromkeys(r) for r in runs], prefix=SEGMENT_PREFIX, always_return_tuple=True)
    names = [n.target for n in split.graph.nodes if n.op == "call_module" and n.target.startswith(SEGMENT_PREFIX)]
    return split, names


class Segment(torch.nn.Module):
    """A segment of a split graph, run by `runner` (called with the segment's arguments, returning its outputs)."""

    def __init__(self, runner: Callable[..., Sequence[Any]]):
        super().__init__()
        self.runner = runner

    def forward(self, *args: Any) -> tuple:
        return tuple(self.runner(*args))


def written_inputs(gm: torch.fx.GraphModule) -> set[int]:
    """Positions of the graph's inputs that an in-place op it has (`_written`) writes, or a view of them."""
    inputs = {_storage(p): k for k, p in enumerate(placeholders(gm)) if _storage(p) is not None}
    return {inputs[_storage(t)] for n in gm.graph.nodes for t in _written(n) if _storage(t) in inputs}


def split_for_tvm(gm: torch.fx.GraphModule, exported: Exported,
                  runner: Callable[[torch.fx.GraphModule], Callable[..., Sequence[Any]]]
                  ) -> tuple[torch.fx.GraphModule, str] | None:
    """`gm` split where one build cannot take it whole: ops TVM cannot import (`unimportable`), in-place writes
    to its inputs (`Exported.mutates`), outputs a build cannot give (`Exported.unfit_output`). Each segment is run
    by `runner(segment)` and labelled "graph <id> segment k/n" (`fx_graph.graph_label`). Returns the split graph
    and a one-line account of it, None where nothing stops one build; raises Refused where it cannot split."""
    missing = unimportable(exported.program)
    ops = ", ".join(sorted({getattr(n.target, "__name__", str(n.target)) for n in missing}))
    why = "; ".join(filter(None, [
        missing and f"TVM cannot import {ops}",
        exported.mutates and f"the graph writes its inputs or buffers in place ({exported.mutates})",
        exported.unfit_output]))
    if not why:
        return None
    by_name = {n.name: n for n in gm.graph.nodes}
    lacking = {source_node(n, by_name) for n in missing}
    if None in lacking:
        raise Refused(f"{why} (not traced back to the graph's nodes to split it)")
    if exported.mutates and not written_inputs(gm):
        raise Refused(f"{why}, by an op not recognised as an in-place write")
    split, names = split_graph(gm, eager_nodes(gm, lacking))
    if not names:
        raise Refused(f"{why}, and no run of two or more other ops is left to build")
    written = {_storage(t) for n in gm.graph.nodes for t in _written(n)} - {None}
    for k, name in enumerate(names):
        segment = getattr(split, name)
        segment.meta["dynamo_compile_id"] = f"{gm.meta.get('dynamo_compile_id', '?')} segment {k + 1}/{len(names)}"
        for p in placeholders(segment):  # a cache written in place is an input of each call, not a constant
            p.meta[WRITTEN] = _storage(p) in written
        setattr(split, name, Segment(runner(segment)))
    return split, f"{why}: those parts run eagerly, the rest as {len(names)} segment(s)"
