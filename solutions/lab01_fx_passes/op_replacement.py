"""Operator replacement: swap one activation function for another, in the graph's own dialect.

Why: an accelerator may lack an operator the model uses. A mobile NPU with a fast ``hardswish``
unit and no ``relu`` lookup, say, runs ``{"relu": "hardswish"}``. Unlike the other passes of the
lab, this one **changes what the model computes** (``hardswish(x) != relu(x)``): it declares so
(``changes_semantics = True``) and the pass manager reports the deviation instead of failing.

A replacement is built in the dialect of the node it replaces, so the graph stays uniform:

================================  ===============================================================
original node                     replacement
================================  ===============================================================
``call_module`` ``nn.ReLU``       ``call_module`` on a new ``nn.Hardswish`` (``inplace`` kept)
``call_function`` ``F.relu`` /    ``call_function`` ``F.hardswish`` (``inplace=True`` kept), or
``torch.relu``                    ``torch.hardswish`` where ``F`` has no such function
``call_method`` ``x.relu()``      ``x.hardswish()`` if ``Tensor`` has that method, else the
                                  ``call_function`` above
``aten.relu.default`` /           ``aten.hardswish.default`` / ``aten.hardswish_.default``
``aten.relu_.default``
================================  ===============================================================

Only unary activations (:data:`ACTIVATIONS`) can be swapped: the replacement receives the
original's input tensor and nothing else (``gelu``'s ``approximate`` or ``elu``'s ``alpha`` are
dropped, the new op's defaults apply). An in-place original gets an in-place replacement, because
later nodes may rely on the input having been overwritten; where the new op has no in-place form
the pass raises instead of silently changing that behaviour.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.graph_tools import add_attribute, call_input
from lab01_fx_passes.given.interface import ACTIVATIONS, OpReplacerBase

from .op_names import op_name


def _accepts_inplace(fn: Callable) -> bool:
    try:
        return "inplace" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _torch_function(name: str, in_place: bool) -> tuple[Callable, dict]:
    """The torch-level function (and kwargs) computing activation ``name``, in place if asked."""
    functional = getattr(F, name, None)
    if not in_place:
        return (functional if functional is not None else getattr(torch, name)), {}
    if functional is not None and _accepts_inplace(functional):
        return functional, {"inplace": True}
    if hasattr(torch, f"{name}_"):
        return getattr(torch, f"{name}_"), {}
    raise ValueError(f"cannot replace an in-place op by {name!r}: it has no in-place form")


def _activation_module(name: str, in_place: bool) -> nn.Module:
    cls = ACTIVATIONS[name]
    if not in_place:
        return cls()
    if _accepts_inplace(cls):
        return cls(inplace=True)
    raise ValueError(f"cannot replace an in-place module by {name!r}: nn.{cls.__name__} has no inplace option")


def _aten_op(name: str, in_place: bool) -> torch._ops.OpOverload:
    packet = getattr(torch.ops.aten, f"{name}_" if in_place else name, None)
    if packet is None or not hasattr(packet, "default"):
        raise ValueError(f"no aten operator {name}{'_' if in_place else ''}.default to replace with")
    return packet.default


class OpReplacer(OpReplacerBase):
    """Replace activation functions by name, e.g. ``OpReplacer({"relu": "hardswish"})(gm)``.

    The mapping applies to the graph as it was given, all at once: each node is replaced at most once,
    so ``{"relu": "hardswish", "hardswish": "relu"}`` swaps the two.

    Modifies ``gm`` in place and returns ``PassResult(gm, modified)``; :attr:`replaced_count` says
    how many nodes were replaced. The pass changes the model's outputs on purpose:
    ``changes_semantics`` is True, which is how :class:`~.pass_manager.PassManager` knows. Given
    (:class:`~lab01_fx_passes.given.interface.OpReplacerBase`): ``changes_semantics`` and :attr:`name`.

    Raises:
        TypeError: if ``mapping`` is not a mapping of strings to strings.
        ValueError: if it names an activation not in :data:`ACTIVATIONS`, or is empty.
    """

    def __init__(self, mapping: Mapping[str, str]) -> None:
        super().__init__()
        if not isinstance(mapping, Mapping) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in mapping.items()
        ):
            raise TypeError(f"mapping must map op names to op names, e.g. {{'relu': 'hardswish'}}; got {mapping!r}")
        if not mapping:
            raise ValueError("mapping is empty: nothing to replace")
        unknown = sorted({name for pair in mapping.items() for name in pair} - set(ACTIVATIONS))
        if unknown:
            raise ValueError(f"unsupported op name(s) {unknown}; supported: {', '.join(sorted(ACTIVATIONS))}")
        self.mapping = dict(mapping)
        self.replaced_count = 0

    def _replacement(self, gm: fx.GraphModule, node: fx.Node, new: str, in_place: bool) -> fx.Node:
        graph = gm.graph
        source = call_input(node)
        if node.op == "call_module":
            module = add_attribute(gm, f"{node.target}_as_{new}", _activation_module(new, in_place))
            return graph.call_module(module, (source,))
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            return graph.call_function(_aten_op(new, in_place), (source,))
        method = f"{new}_" if in_place else new
        if node.op == "call_method" and hasattr(torch.Tensor, method):
            return graph.call_method(method, (source,))
        function, kwargs = _torch_function(new, in_place)
        return graph.call_function(function, (source,), kwargs)

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        modules = dict(graph_module.named_modules())
        replaced = 0
        for node in list(graph_module.graph.nodes):
            op = op_name(node, modules)
            if op is None or op.name not in self.mapping:
                continue
            with graph_module.graph.inserting_before(node):
                replacement = self._replacement(graph_module, node, self.mapping[op.name], op.in_place)
            replacement.meta.update(node.meta)  # same shape and dtype: elementwise and unary
            node.replace_all_uses_with(replacement)
            graph_module.graph.erase_node(node)
            replaced += 1
        self.replaced_count = replaced
        if replaced:
            graph_module.graph.lint()
            graph_module.recompile()
        return PassResult(graph_module, replaced > 0)


def replace_ops(gm: fx.GraphModule, mapping: Mapping[str, str]) -> PassResult:
    """Function form of :class:`OpReplacer`: ``replace_ops(gm, {"relu": "hardswish"})``."""
    return OpReplacer(mapping)(gm)
