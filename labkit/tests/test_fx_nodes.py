"""``labkit.fx_nodes``: run the graph you inspect, and tell a stale ``forward`` from a fresh one."""

from __future__ import annotations

import operator

import torch
from torch import fx

from labkit.fx_nodes import code_matches_graph, node_value, run_graph


def doubled_graph() -> fx.GraphModule:
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(operator.mul, (x, 2)))
    return fx.GraphModule(torch.nn.Module(), graph)


def test_a_graph_edited_without_recompile_runs_as_edited_and_is_told_apart():
    gm = doubled_graph()
    x = torch.ones(3)
    assert code_matches_graph(gm) and torch.equal(run_graph(gm, x), x * 2)
    node = next(node for node in gm.graph.nodes if node.op == "call_function")
    node.args = (node.args[0], 3)  # edited, not recompiled: forward still doubles
    assert torch.equal(gm(x), x * 2), "gm(...) runs the code of the graph as it was"
    assert torch.equal(run_graph(gm, x), x * 3), "run_graph runs the graph as it is"
    assert not code_matches_graph(gm)
    gm.recompile()
    assert code_matches_graph(gm) and torch.equal(gm(x), x * 3)


def test_node_value_passes_literals_through():
    assert node_value(3) == 3 and node_value(None) is None
