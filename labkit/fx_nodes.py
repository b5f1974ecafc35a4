"""Small facts about FX nodes that every lab needs, whatever the graph dialect."""

from __future__ import annotations

from typing import Any

from torch import fx


def node_value(node: Any) -> Any:
    """The example value recorded for ``node``, usually a FakeTensor.

    ``make_fx`` and ``torch.export`` record it in ``meta['val']``, Dynamo in ``meta['example_value']``;
    ``symbolic_trace`` records none (None is returned). Non-nodes (literals in ``node.args``) are
    returned as they are, so ``node_value`` can be mapped over a node's arguments.
    """
    if not isinstance(node, fx.Node):
        return node
    return node.meta.get("val", node.meta.get("example_value"))


def run_graph(gm: fx.GraphModule, *args: Any) -> Any:
    """Run ``gm.graph`` itself on ``args`` through ``fx.Interpreter``, not ``gm.forward``.

    A test that inspects a returned graph (counts its nodes, reads its partitions) runs *that graph*:
    ``forward`` is code generated from the graph by ``recompile()``, and a module whose graph was
    rewritten without it would still run the old code.
    """
    return fx.Interpreter(gm).run(*args)
