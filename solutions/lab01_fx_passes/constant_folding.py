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

import torch
from torch import fx
from torch.fx.passes.infra.pass_base import PassResult
from torch.utils._pytree import tree_flatten

from lab01_fx_passes.given.graph_tools import add_attribute, storage_address
from lab01_fx_passes.given.interface import RANDOM_OPS, UNKNOWN, ConstantFolderBase

from .dce import is_impure
from .freezing import shares_memory_with
from .op_names import op_name


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
        if node.op == "placeholder":
            return UNKNOWN
        if node.op == "output":
            return None
        if node.op == "get_attr":
            value = super().run_node(node)
            return UNKNOWN if storage_address(value) in self._touched else value
        args, kwargs = self.fetch_args_kwargs_from_env(node)
        inputs, _ = tree_flatten((args, kwargs))
        if any(value is UNKNOWN for value in inputs) or is_impure(node, self._modules):
            return UNKNOWN
        value = super().run_node(node)
        self.constants[node] = value
        return value

    def _state_impure_nodes_may_write(self) -> set[int]:
        """The storages of the parameters and buffers that an impure node may write, directly or through
        views: every impure node's inputs but a random draw's (``rand_like(w)`` reads only ``w``'s shape)."""
        touched = set()
        for node in self.module.graph.nodes:
            if node.op == "output" or not is_impure(node, self._modules):
                continue
            op = op_name(node, self._modules)
            if op is not None and op.name in RANDOM_OPS and not op.in_place and node.kwargs.get("out") is None:
                continue
            for argument in node.all_input_nodes:
                for alias in shares_memory_with(argument, self._modules):
                    if alias.op == "get_attr":
                        touched.add(storage_address(self.fetch_attr(alias.target)))
        touched.discard(None)
        return touched

    def _foldable(self) -> set[fx.Node]:
        """Constant nodes that may be folded: not sharing memory with a value an impure node reads (a view
        of it, the tensor it views), not feeding, directly or through constants, an impure node or the output."""
        graph = self.module.graph
        blocked = {
            alias
            for node in graph.nodes
            if any(user.op != "output" and is_impure(user, self._modules) for user in node.users)
            for alias in shares_memory_with(node, self._modules)
            if alias in self.constants
        }
        for node in reversed(graph.nodes):
            if node in self.constants and any(
                user.op == "output" or user in blocked or is_impure(user, self._modules) for user in node.users
            ):
                blocked.add(node)
        return set(self.constants) - blocked

    def fold(self) -> fx.GraphModule:
        """Run the constant analysis, fold each frontier tensor into a buffer, drop the dead region.

        Returns:
            The same ``GraphModule``, rewritten in place (and recompiled when anything changed).
        """
        graph = self.module.graph
        self.constants.clear()
        self._touched = self._state_impure_nodes_may_write()
        self.run(enable_io_processing=False)  # placeholders are UNKNOWN: no inputs are needed
        foldable = self._foldable()
        frontier = [
            node
            for node in graph.nodes
            if node in foldable
            and isinstance(self.constants[node], torch.Tensor)
            and any(user not in foldable for user in node.users)
        ]
        for node in frontier:
            value = self.constants[node].detach().clone()  # own memory, not a view of a parameter
            name = add_attribute(self.module, f"_folded_{node.name}", value)
            with graph.inserting_before(node):
                buffer = graph.get_attr(name)
            buffer.meta.update(node.meta)
            node.replace_all_uses_with(buffer)
        self.folded_count = len(frontier)
        if frontier:
            # Remove what became dead: folded nodes and the constants only they read. Everything
            # else counts as "impure" here, so unrelated dead code is left to the DCE pass.
            removable = foldable | {
                source for node in foldable for source in node.all_input_nodes if source.op == "get_attr"
            }
            graph.eliminate_dead_code(is_impure_node=lambda node: node not in removable)
            graph.lint()
            self.module.recompile()
        return self.module


def fold_constants(gm: fx.GraphModule) -> PassResult:
    """Function form of :class:`ConstantFolder`: ``PassResult(gm, folded_count > 0)``, ``gm`` changed in place.

    When nothing was folded the result says why (``unchanged(gm, reason)``).
    """
    return ConstantFolder.apply(gm)  # given: ConstantFolderBase.apply
