"""``labkit.fx_nodes``: run the graph you inspect, and tell a stale ``forward`` from a fresh one."""

from __future__ import annotations

import operator

import torch
from torch import fx

from labkit.fx_nodes import code_matches_graph, concrete_inputs, node_value, run_graph


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


def test_concrete_inputs_gives_a_dynamic_backend_the_sizes_of_its_call():
    """Under dynamic=True Dynamo hands the backend SymInt sizes: a view(s0, -1) refuses them, and
    concrete_inputs gives the graph the sizes this call had, without specialising it."""
    seen = []

    def backend(gm, example_inputs):
        seen.append([type(value).__name__ for value in example_inputs])
        inputs = concrete_inputs(example_inputs)
        seen.append([value for value in inputs if not isinstance(value, torch.Tensor)])
        torch.testing.assert_close(gm(*inputs)[0], torch.ones(5, 3 * 4))  # runs: every size is a number
        return gm.forward

    def flatten_rows(x):
        return (x.reshape(x.shape[0], -1),)

    torch._dynamo.reset()
    try:
        compiled = torch.compile(flatten_rows, backend=backend, dynamic=True)
        compiled(torch.ones(5, 3, 4))
        compiled(torch.ones(7, 3, 4))  # the same graph serves another batch: nothing was specialised
    finally:
        torch._dynamo.reset()
    assert "SymInt" in seen[0] and all(isinstance(value, int) for value in seen[1]) and 5 in seen[1]
    assert len(seen) == 2, "one compile: concrete_inputs added no guard on the batch size"
