"""Fuse ``Linear -> GELU`` into one call of the fused operator, in every graph dialect.

The four steps of every graph optimisation, in miniature:

1. **Match** a GELU whose input is produced by a Linear. What a "Linear" looks like depends on
   who traced the graph:

   ==================  =======================================================================
   dialect             the Linear feeding the GELU
   ==================  =======================================================================
   symbolic_trace      ``call_module`` on an ``nn.Linear`` (weights: ``<name>.weight``/``.bias``)
   Dynamo              ``call_function torch._C._nn.linear(x, w, b)`` (w, b: placeholders)
   torch.export        ``aten.linear.default(x, w, b)``
   make_fx, core aten  ``aten.addmm(b, x, aten.t(w))`` (or ``aten.permute(w, [1, 0])``; ``aten.mm``
                       without bias); for 3-D inputs ``aten.view`` flattens ``x`` to 2-D before and
                       another ``aten.view`` restores the leading dimensions after
   ==================  =======================================================================

2. **Check** that fusing is safe: every intermediate value (the Linear's output, and the ``view``
   after ``addmm``) must have exactly one user, the next node of the chain. If anything else
   reads the Linear's output, it needs the value *before* GELU, which the fused op never
   materialises: fusing would change the program.
3. **Rewrite**: one ``call_function`` node on :data:`~lab01_fx_passes.given.fused_ops.LINEAR_GELU`
   (``torch.ops.lab01.linear_gelu.default(x, weight, bias, approximate=...)``) takes the GELU's
   place; the chain behind it is erased.
4. **Verify**: the tests (and the pass manager) compare outputs before and after.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import fx, nn
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.fused_ops import LINEAR_GELU
from lab01_fx_passes.given.graph_tools import call_argument, call_input, node_value
from lab01_fx_passes.given.interface import LinearGeluFuserBase, LinearMatch

from .op_names import op_name

aten = torch.ops.aten
_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _aten_transposed_weight(node: Any) -> fx.Node | None:
    """``w`` when ``node`` is ``aten.t(w)`` or ``aten.permute(w, [1, 0])``."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return None
    if node.target is aten.t.default:
        return call_input(node)
    if node.target is aten.permute.default and list(call_argument(node, "dims")) == [1, 0]:
        return call_input(node)
    return None


def _match_aten_matmul(node: fx.Node) -> LinearMatch | None:
    """``[view ->] addmm/mm [-> view]`` computing ``x @ w.T + b``; shapes checked on recorded values."""
    chain, out_view = [], None
    if node.op == "call_function" and node.target in _VIEWS:
        out_view, node = node, call_input(node)
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return None
    if node.target is aten.addmm.default:
        if call_argument(node, "beta") != 1 or call_argument(node, "alpha") != 1:
            return None  # bias * beta + (x @ w.T) * alpha: a Linear only when both are 1
        bias, x2d, transposed = (call_argument(node, name) for name in ("self", "mat1", "mat2"))
    elif node.target is aten.mm.default:
        (x2d, transposed), bias = (call_argument(node, name) for name in ("self", "mat2")), None
    else:
        return None
    weight = _aten_transposed_weight(transposed)
    if weight is None:
        return None
    bias_value = node_value(bias)
    if bias is not None and (bias_value is None or bias_value.dim() != 1):
        return None  # addmm also accepts a 2-D "bias": that is not a Linear
    chain = [node] if out_view is None else [node, out_view]
    leftovers = [transposed]
    x = x2d
    if out_view is not None:
        # Accept only a flatten of x's leading dimensions, undone by the view after the matmul.
        if not (isinstance(x2d, fx.Node) and x2d.op == "call_function" and x2d.target in _VIEWS):
            return None
        x = call_input(x2d)
        x_value, out_value = node_value(x), node_value(out_view)
        weight_value = node_value(weight)
        if x_value is None or out_value is None or weight_value is None:
            return None
        if tuple(out_value.shape) != (*x_value.shape[:-1], weight_value.shape[0]):
            return None
        if tuple(node_value(x2d).shape) != (math.prod(x_value.shape[:-1]), x_value.shape[-1]):
            return None
        leftovers.append(x2d)
    return LinearMatch(x, weight, bias, chain, leftovers)


def match_linear(node: Any, modules: Mapping[str, nn.Module]) -> LinearMatch | None:
    """Recognise a Linear (in any dialect) whose result is the value of ``node``."""
    if not isinstance(node, fx.Node):
        return None
    if node.op == "call_module" and isinstance(modules[node.target], nn.Linear):
        has_bias = modules[node.target].bias is not None
        return LinearMatch(
            call_input(node), f"{node.target}.weight", f"{node.target}.bias" if has_bias else None, [node], []
        )
    op = op_name(node, modules)
    if node.op == "call_function" and op is not None and op.name == "linear":
        weight, bias = call_argument(node, "weight"), call_argument(node, "bias")
        return LinearMatch(call_input(node), weight, bias, [node], [])
    return _match_aten_matmul(node)


def gelu_approximation(node: fx.Node, modules: Mapping[str, nn.Module]) -> str | None:
    """``"none"`` or ``"tanh"`` when ``node`` is an out-of-place GELU (any dialect), else None."""
    op = op_name(node, modules)
    if op is None or op.name != "gelu" or op.in_place or node.op == "call_method":
        return None
    if node.op == "call_module":
        return modules[node.target].approximate
    return call_argument(node, "approximate", "none")


class LinearGeluFuser(LinearGeluFuserBase):
    """Replace each safe ``Linear -> GELU`` pair by one fused-operator node.

    Usage: ``result = LinearGeluFuser()(gm)``; modifies ``gm`` in place, returns
    ``PassResult(gm, modified)``; :attr:`fused_count` says how many pairs were fused. Given
    (:class:`~lab01_fx_passes.given.interface.LinearGeluFuserBase`): :attr:`fused_count`, set to 0 by the
    constructor, and :meth:`apply`, the function form.
    """

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        graph = graph_module.graph
        modules = dict(graph_module.named_modules())
        fused = 0
        for gelu in list(graph.nodes):
            approximate = gelu_approximation(gelu, modules)
            if approximate is None:
                continue
            match = match_linear(call_input(gelu), modules)
            if match is None or not self._only_used_along_chain(match, gelu):
                continue
            with graph.inserting_before(gelu):
                weight, bias = (graph.get_attr(t) if isinstance(t, str) else t for t in (match.weight, match.bias))
                fused_node = graph.call_function(LINEAR_GELU, (match.x, weight, bias), {"approximate": approximate})
            fused_node.meta.update(gelu.meta)  # same value as the GELU it replaces
            gelu.replace_all_uses_with(fused_node)
            for node in [gelu, *reversed(match.chain)]:
                graph.erase_node(node)
            for node in match.leftovers:
                if not node.users:
                    graph.erase_node(node)
            fused += 1
        self.fused_count = fused
        if fused:
            graph.lint()
            graph_module.recompile()
        return PassResult(graph_module, fused > 0)

    @staticmethod
    def _only_used_along_chain(match: LinearMatch, gelu: fx.Node) -> bool:
        """The safety check: each intermediate value is read only by the next node of the chain."""
        following = [*match.chain[1:], gelu]
        return all(list(node.users) == [after] for node, after in zip(match.chain, following))


def fuse_linear_gelu(gm: fx.GraphModule) -> PassResult:
    """Function form of :class:`LinearGeluFuser`: ``PassResult(gm, modified)``, ``gm`` changed in place.

    When nothing was fused the result says so (``unchanged(gm, reason)``).
    """
    return LinearGeluFuser.apply(gm)  # given: LinearGeluFuserBase.apply
