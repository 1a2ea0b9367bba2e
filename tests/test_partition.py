"""Splitting a Dynamo graph around the ops TVM cannot import (`autotune.model.partition`)."""

from __future__ import annotations

import operator

import pytest

torch = pytest.importorskip("torch", reason="partitioning works on PyTorch FX graphs")

from autotune.model.fx_graph import export_graph, static_inputs
from autotune.model.partition import SEGMENT_PREFIX, eager_nodes, source_node, split_graph, unimportable
from tests.compile_models import tiny_moe


@pytest.fixture(scope="module")
def moe_graph():
    """TinyMoE's Dynamo graph, its arguments, and the graph nodes of the ops TVM cannot import."""
    torch._dynamo.reset()
    model, (x,) = tiny_moe()
    captured = []

    def spy(gm, example_inputs):
        captured.append((gm, list(example_inputs)))
        return gm

    with torch.no_grad():
        torch.compile(model, backend=spy)(x)
        [(gm, args)] = captured
        exported = export_graph(gm, args, static_inputs(gm, args))
    torch._dynamo.reset()
    return gm, args, {source_node(n, {m.name: m for m in gm.graph.nodes}) for n in unimportable(exported.program)}


def test_unimportable_ops_traced_back_to_the_graph(moe_graph):
    gm, _, lacking = moe_graph
    assert None not in lacking and len(lacking) == 4  # histc, two grouped_mm, the stable sort
    assert any("histc" in str(n.target) for n in lacking)
    assert sum("grouped_mm" in str(n.target) for n in lacking) == 2


def test_writes_and_what_shares_their_storage_stay_eager(moe_graph):
    gm, _, lacking = moe_graph
    eager = eager_nodes(gm, lacking)
    writes = [n for n in gm.graph.nodes if n.target in (operator.itruediv, operator.setitem)]
    assert len(writes) == 2 and all(n in eager for n in writes)
    assert all(n.args[0] in eager for n in writes)  # the routing weights, the inverse permutation
    assert any("empty_like" in str(n.target) and n in eager for n in gm.graph.nodes)
    assert lacking <= eager


def test_split_graph_runs_in_the_graphs_order(moe_graph):
    gm, args, lacking = moe_graph
    eager = eager_nodes(gm, lacking)
    split, names = split_graph(gm, eager)
    assert len(names) >= 3 and all(n.startswith(SEGMENT_PREFIX) for n in names)
    in_segments = {n.name for name in names for n in getattr(split, name).graph.nodes
                   if n.op not in ("placeholder", "output")}
    assert not in_segments & {n.name for n in eager}
    for name in names:  # tensors (or numbers) in, new tensors out: no tuple of tensors enters as a constant
        segment = getattr(split, name)
        ins = [n.meta.get("example_value") for n in segment.graph.nodes if n.op == "placeholder"]
        assert ins and all(isinstance(v, (torch.Tensor, int, float, bool)) for v in ins)
        out = segment.graph.output_node().args[0]
        assert isinstance(out, tuple) and all(isinstance(o.meta.get("example_value"), torch.Tensor) for o in out)
    with torch.no_grad():  # the segments run eagerly here: the split graph must compute what the graph does
        torch.testing.assert_close(split(*args), gm(*args), rtol=0, atol=0)
    assert len(list(gm.graph.nodes)) > len(list(split.graph.nodes))  # the original graph is left as it was
