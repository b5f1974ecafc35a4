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

from collections.abc import Mapping
from typing import Any

import torch
from torch import fx, nn
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.fused_ops import LINEAR_GELU  # noqa: F401  (the fused node's target)
from lab01_fx_passes.given.graph_tools import call_argument, node_value  # noqa: F401
from lab01_fx_passes.given.interface import LinearGeluFuserBase, LinearMatch  # noqa: F401  (given: what match_linear returns)

from .op_names import op_name  # noqa: F401

aten = torch.ops.aten


def match_linear(node: Any, modules: Mapping[str, nn.Module]) -> LinearMatch | None:
    """Recognise a Linear (in any dialect, see the table above) whose result is the value of ``node``.

    Returns:
        A :class:`LinearMatch`, or None when ``node`` is not the end of a Linear. Flattening views
        (aten graphs, 3-D inputs) must only flatten and restore ``x``'s leading dimensions, the
        bias must be 1-D, and an ``addmm`` given ``beta`` or ``alpha`` is not a Linear.
    """
    # TODO(step 5): recognise Linear in every dialect.
    # guidance: begin
    #  - call_module nn.Linear: weight/bias are the parameter names "<target>.weight"/"<target>.bias";
    #  - call_function linear (Dynamo's torch._C._nn.linear has no signature: read node.args);
    #  - aten: addmm(bias, x, t(w)) / mm(x, t(w)), t(w) may be permute(w, [1, 0]); with 3-D
    #    inputs a view before and a view after. Check shapes on node_value(...) (meta["val"]).
    # guidance: end
    raise NotImplementedError("match_linear: recognise Linear in every dialect")


def gelu_approximation(node: fx.Node, modules: Mapping[str, nn.Module]) -> str | None:
    """``"none"`` or ``"tanh"`` when ``node`` is an out-of-place GELU (any dialect), else None."""
    # TODO(step 5): recognise GELU in every dialect.
    # guidance: begin
    #  op_name(...) finds the GELU; nn.GELU keeps `approximate` as an attribute,
    #  functions as an argument (call_argument(node, "approximate", "none")).
    # guidance: end
    raise NotImplementedError("gelu_approximation: recognise GELU in every dialect")


class LinearGeluFuser(LinearGeluFuserBase):
    """Replace each safe ``Linear -> GELU`` pair by one fused-operator node.

    Usage: ``result = LinearGeluFuser()(gm)``; modifies ``gm`` in place, returns
    ``PassResult(gm, modified)``; :attr:`fused_count` says how many pairs were fused. Given
    (:class:`~lab01_fx_passes.given.interface.LinearGeluFuserBase`): :attr:`fused_count`, set to 0 by the
    constructor, and :meth:`apply`, the function form.
    """

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        # TODO(step 5): fuse every safe Linear -> GELU pair.
        # guidance: begin
        #  For every GELU fed by a matched Linear whose chain passes the single-user
        #  check, insert (before the GELU)
        #      graph.call_function(LINEAR_GELU, (x, weight, bias), {"approximate": approximate})
        #  (weights given by name need a graph.get_attr(name) node first), copy the GELU's meta onto
        #  it, redirect the GELU's users, erase the GELU and the chain, then the unused leftovers.
        #  Set self.fused_count; lint and recompile when something changed.
        # guidance: end
        raise NotImplementedError("LinearGeluFuser.call: fuse safe Linear+GELU pairs")


def fuse_linear_gelu(gm: fx.GraphModule) -> PassResult:
    """Function form of :class:`LinearGeluFuser`: ``PassResult(gm, modified)``, ``gm`` changed in place.

    When nothing was fused the result says so (``unchanged(gm, reason)``).
    """
    return LinearGeluFuser.apply(gm)  # given: LinearGeluFuserBase.apply
