"""Constant folding: compute once, when the pass runs, what every call would compute the same way.

A node is *constant* when it is a pure call (see :func:`~.dce.is_impure`) whose inputs are all
constants: ``get_attr`` values (parameters, buffers, tensor constants), literals, or other constant
nodes. ``(self.a @ self.b).relu() + 1`` is constant; anything reached from a placeholder is not, and
neither is ``torch.rand(3)`` (each call must draw new numbers) or anything computed from it.

Folding runs the graph once with an ``fx.Interpreter`` in which every placeholder is *unknown*:
a node whose inputs are known is evaluated for real, a node with an unknown input becomes unknown.
Afterwards each constant region is cut at its *frontier*, the constant nodes that a non-constant
node reads: each frontier value becomes one buffer read by one ``get_attr`` node, and the
region behind it, now dead, is removed. Every call after that skips the work: the latency win.

The price: the folded value is frozen. If a parameter it was computed from changes later
(fine-tuning), the buffer is stale; fold for inference only. Two more rules keep folding sound:

- a constant that an in-place or otherwise impure node consumes is not folded (nor anything it is
  computed from): the in-place op would change the buffer, and the change would leak into the next
  call, where the original program starts from a fresh value. Nor is a constant that shares memory
  with one (a view of it, the tensor it views, another view of that tensor): ``v = c.view(2, 2)``
  then ``c.add_(x)`` changes ``v`` too, and a folded ``v`` would keep the value from before the write;
- a constant that is a graph *output* is not folded: the caller would receive the buffer itself and
  could modify it;
- nothing computed from a parameter or buffer that an impure node consumes is constant, wherever in
  the graph it is read: ``self.count.view(2, 2).add_(1)`` then ``self.count * 2`` reads the buffer as
  the write left it, and the write persists from call to call. Memory, not nodes, decides: aten
  graphs read one buffer through several ``get_attr`` nodes (``_tensor_constant0`` twice).

In Dynamo graphs parameters are placeholders, so only subgraphs built from literals (``torch.ones``,
``torch.arange``) are constant there; in ``symbolic_trace`` and aten graphs parameters are
``get_attr`` constants.
"""

from __future__ import annotations

from typing import Any

import torch  # noqa: F401
from torch import fx
from torch.fx.passes.infra.pass_base import PassResult
from torch.utils._pytree import tree_flatten  # noqa: F401  (finds UNKNOWN inside nested args)

from lab01_fx_passes.given.graph_tools import add_attribute, storage_address  # noqa: F401  (buffers; memory)
from lab01_fx_passes.given.interface import (  # noqa: F401  (given: the analysis' unknown value, random ops)
    RANDOM_OPS,
    UNKNOWN,
    ConstantFolderBase,
)

from .dce import is_impure  # noqa: F401  (step 2's: a random or in-place call is never constant)
from .op_names import op_name  # noqa: F401  (step 0's: a node's operator, in any dialect)


class ConstantFolder(ConstantFolderBase):
    """Evaluate the constant subgraphs of a ``GraphModule`` once and replace each by one buffer.

    Usage::

        folder = ConstantFolder(gm)
        gm = folder.fold()          # gm itself, rewritten in place
        folder.folded_count         # how many buffers were created (one per folded frontier node)

    :attr:`constants` maps every constant call node to its value (filled by :meth:`fold`).

    Given (:class:`~lab01_fx_passes.given.interface.ConstantFolderBase`): the constructor (an
    ``fx.Interpreter`` that keeps every value; :attr:`constants` empty, :attr:`folded_count` 0,
    ``self._modules`` the module's submodules by name) and :meth:`apply`, the function form.
    """

    def run_node(self, node: fx.Node) -> Any:
        """Evaluate ``node`` if it is constant (recording it in :attr:`constants`), else return ``UNKNOWN``.

        Placeholders are unknown (no inputs are given: that is the point), ``get_attr`` values are
        known, a call is constant when it is pure (:func:`~.dce.is_impure`, step 2) and none of its
        arguments is unknown.
        """
        # TODO(step 3): propagate constants through the graph.
        # guidance: begin
        #  - placeholder -> UNKNOWN;
        #  - get_attr -> its real value (super().run_node(node)), unless an impure node that may
        #    write (not a mere random draw: rand_like(w) reads only w's shape) consumes that tensor's
        #    memory, directly or through a view: then UNKNOWN. Find those first (fold(), before
        #    self.run); storage_address(value) says which memory a tensor is;
        #  - a call whose arguments (self.fetch_args_kwargs_from_env(node)) contain UNKNOWN (search
        #    nested args with tree_flatten), or that is impure (is_impure(node, self._modules)) -> UNKNOWN;
        #  - any other call: evaluate it (super().run_node), record it in self.constants, return it.
        # guidance: end
        raise NotImplementedError("ConstantFolder.run_node: propagate constants, mark the rest UNKNOWN")

    def fold(self) -> fx.GraphModule:
        """Run the constant analysis, fold each frontier tensor into a buffer, drop the dead region.

        A constant that feeds (directly or through other constants) an impure node or the output is
        not folded (see the module docstring for why); each remaining constant tensor read by a
        non-constant node becomes one buffer (a detached clone) read by one ``get_attr`` node.

        Returns:
            The same ``GraphModule``, rewritten in place (and recompiled when anything changed).
        """
        # TODO(step 3): fold the constant frontier into buffers.
        # guidance: begin
        #  1. self.run(enable_io_processing=False) runs the analysis without inputs;
        #  2. block constants that feed (directly, or through other constants) an impure node or
        #     the output;
        #  3. the frontier: unblocked constant *tensors* with at least one user that is not an
        #     unblocked constant. For each, add_attribute(...) a detached clone, insert a get_attr
        #     node, and node.replace_all_uses_with(that get_attr);
        #  4. erase what became dead (the folded region and the get_attr nodes only it read),
        #     set self.folded_count, lint and recompile.
        # guidance: end
        raise NotImplementedError("ConstantFolder.fold: fold the constant frontier into buffers")


def fold_constants(gm: fx.GraphModule) -> PassResult:
    """Function form of :class:`ConstantFolder`: ``PassResult(gm, folded_count > 0)``, ``gm`` changed in place.

    When nothing was folded the result says why (``unchanged(gm, reason)``).
    """
    return ConstantFolder.apply(gm)  # given: ConstantFolderBase.apply
