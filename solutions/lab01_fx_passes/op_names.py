"""Which operator does a node call? One answer for every graph dialect.

The same ReLU is spelled differently in each dialect:

=====================  =========================================================================
node                   example
=====================  =========================================================================
``call_module``        ``self.act`` where ``self.act = nn.ReLU(inplace=True)``
``call_function``      ``torch.relu``, ``torch.nn.functional.relu``, ``torch.relu_``
``call_method``        ``x.relu()``, ``x.relu_()``
``call_function``      ``torch.ops.aten.relu.default``, ``torch.ops.aten.relu_.default`` (aten)
=====================  =========================================================================

:func:`op_name` reduces all of them to ``OpName("relu", in_place=...)`` so a pass can match
operators by name without caring which tracer produced the graph. It only *names* nodes: how to
build a replacement in the node's own dialect is the pass's job. :class:`OpName` itself is given
(``given/graph_tools.py``; imported here, so ``op_names.OpName`` works too).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import fx, nn

from lab01_fx_passes.given.graph_tools import OpName, call_argument


def _split_in_place(name: str) -> tuple[str, bool]:
    """``"relu_"`` -> ``("relu", True)``; dunders such as ``"__add__"`` are not in-place."""
    if name.endswith("_") and not name.endswith("__"):
        return name[:-1], True
    return name, False


def op_name(node: fx.Node, modules: Mapping[str, nn.Module]) -> OpName | None:
    """Name the operator ``node`` calls, in any dialect.

    Args:
        node: any node of the graph.
        modules: ``dict(gm.named_modules())`` of the graph's module (resolves ``call_module`` targets).

    Returns:
        - ``call_module``: the module's class name in lower case (``nn.ReLU`` -> ``"relu"``,
          ``nn.Linear`` -> ``"linear"``); in-place when the module has ``inplace=True``.
        - ``call_function`` on an aten operator (``torch._ops.OpOverload``): the operator's name
          (``aten.relu_.default`` -> ``"relu"``, in-place).
        - ``call_function`` on a Python or torch function: its ``__name__`` (``torch.relu``,
          ``F.relu`` -> ``"relu"``; ``torch.relu_`` -> in-place); also in-place when called with
          ``inplace=True`` (positionally or by keyword).
        - ``call_method``: the method name (``"relu_"`` -> ``"relu"``, in-place).
        - A dunder name (``"__add__"``, ``"__getitem__"``) is returned as it is, with its
          underscores, and is never in-place: ``x.__add__(y)`` gives ``OpName("__add__", False)``,
          not ``"add"`` (``operator.add`` gives ``"add"``; ``operator.iadd`` gives ``"iadd"``).
        - ``None`` for ``placeholder``, ``get_attr`` and ``output`` nodes.
    """
    if node.op == "call_module":
        module = modules[node.target]
        return OpName(type(module).__name__.lower(), bool(getattr(module, "inplace", False)))
    if node.op == "call_method":
        return OpName(*_split_in_place(node.target))
    if node.op != "call_function":
        return None
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return OpName(*_split_in_place(target._opname))
    name = getattr(target, "__name__", None)
    if name is None:
        return None
    base, in_place = _split_in_place(name)
    return OpName(base, in_place or call_argument(node, "inplace", False) is True)
