"""Small facts about FX nodes and graphs that every lab needs, whatever the graph dialect.

Run what you inspect. A test that counts nodes in ``gm.graph`` and then calls ``gm(...)`` checks
two different things: ``gm(...)`` runs ``gm.forward``, Python code generated from the graph when
``gm.recompile()`` last ran (or any ``forward`` set on the instance), which need not be the graph
counted. A pass that rewrites the graph but never recompiles (or that hands back the original
``forward``) would show the rewrite and run the original program. :func:`run_graph` executes the
graph itself, node by node, and :func:`code_matches_graph` says whether ``gm.code`` is the code of
``gm.graph``.

A backend's example inputs are not always values you can run: under ``torch.compile(..., dynamic=True)``
Dynamo passes each symbolic size as a ``torch.SymInt`` (``s0``), and an op that needs a number
(``view(s0, -1)``) refuses it. :func:`concrete_inputs` gives the values this very call had.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
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


def concrete_inputs(example_inputs: Sequence[Any]) -> list[Any]:
    """``example_inputs`` with every symbolic number replaced by the value it has in this call.

    Dynamo hands a ``dynamic=True`` backend its symbolic sizes as ``torch.SymInt`` (and may hand
    ``SymFloat``/``SymBool``): each carries the value of the call being compiled, its *hint*
    (``value.node.hint``), read here without adding a guard (``int(s0)`` would specialise the graph
    to that size). Everything else is returned as it is.

    Raises:
        ValueError: for a symbol with no value in this call (a data-dependent, *unbacked* size).
    """
    concrete = []
    for position, value in enumerate(example_inputs):
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            if value.node.hint is None:
                raise ValueError(f"example input {position} ({value}) is a symbol with no value in this call")
            value = value.node.hint
        concrete.append(value)
    return concrete


def run_graph(gm: fx.GraphModule, *args: Any) -> Any:
    """Execute ``gm.graph`` on ``args`` with ``torch.fx.Interpreter``, without autograd.

    Whatever ``gm.forward`` holds, this runs exactly the nodes of ``gm.graph`` (reading ``gm``'s
    submodules, parameters and buffers): the program a test inspected.
    """
    with torch.no_grad():
        return fx.Interpreter(gm, garbage_collect_values=True).run(*args)


def code_matches_graph(gm: fx.GraphModule) -> bool:
    """Whether ``gm.code`` (what ``gm(...)`` runs) is the code ``gm.graph`` generates now.

    False when the graph was edited without ``gm.recompile()``. (An instance attribute ``forward``
    set by hand is not seen here; :func:`run_graph` does not run it.)
    """
    return gm.code == gm.graph.python_code(root_module="self").src
