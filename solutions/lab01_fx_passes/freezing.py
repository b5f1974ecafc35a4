"""Freezing: the parameters and buffers of a Dynamo graph become constants, so the passes can fold them.

A ``torch.compile`` backend receives a torch-level graph whose parameters and buffers are
**placeholders**: inputs, like the image. A pass sees a name, not a value, so Conv+BN folding,
constant folding and the layout pass cannot touch them (they say so: "weights are graph inputs:
freeze first"). Yet the backend also receives the values: ``example_inputs`` holds the module's
actual parameter and buffer tensors at the positions of their placeholders. Freezing uses them:
each such placeholder's uses read a ``get_attr`` constant holding that tensor instead, and every
later pass sees a value it can fold. ``torch._inductor``'s freezing (``torch._inductor.config.freezing``)
does exactly this before its constant folding.

The placeholder itself stays (unused), so the graph is still called with the same arguments: the
pass manager's example inputs, Dynamo's calling convention and the caller keep working.

Freezing bakes values into the graph, so it is safe only while those values cannot change. Four
rules make it so; the first three are checked here, the last one at every call:

1. **Only module state.** Only placeholders Dynamo marks as a parameter or buffer of the module
   (:func:`~lab01_fx_passes.given.graph_tools.is_module_state`) are frozen, never the call's own inputs.
2. **Not written by the graph.** A value the graph modifies in place (a training-mode BatchNorm
   updates its running statistics; ``num_batches_tracked.add_(1)``) is different on every call: a
   placeholder read by an impure node (:func:`~lab01_fx_passes.dce.is_impure`), directly or through
   a view of it (:data:`ALIASING_OPS`), stays an input. So does one the graph returns (or returns a
   view of): the caller would receive the constant itself. (Inductor's freezing has the same two rules.)
3. **Inference only.** A parameter that requires grad while grad mode is on stays an input:
   autograd needs it as an input to compute its gradient. Dynamo guards the grad mode (a graph
   captured under ``torch.no_grad()`` is recompiled, and frozen again, when called with grad on).
4. **Nobody changes the value between calls.** Dynamo guards shapes, dtypes and devices of
   parameters, not their values (their mark says ``"unguarded"``): ``load_state_dict``, an
   optimiser step or ``param.mul_(2)`` after compiling would leave the frozen graph computing with
   the old values, silently. The freezer records each frozen tensor and its version counter
   (``tensor._version``, bumped by every in-place write); :meth:`ParameterFreezer.guard_holds`
   says whether the arguments of a call are still those exact tensors, unmodified. The lab's
   ``torch.compile`` backend (``given/backend.py``) runs the frozen graph only while it holds, and the
   graph as Dynamo gave it otherwise. (A write through ``param.data`` bypasses the version counter,
   as it bypasses autograd's checks.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import fx, nn
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.graph_tools import add_attribute, call_input, is_module_state, writes_in_place
from lab01_fx_passes.given.interface import (
    ALIASING_OPS,
    MODIFIED_IN_PLACE,
    NO_MODULE_STATE,
    NO_VALUES,
    NOT_A_TENSOR,
    REQUIRES_GRAD,
    RETURNED,
    FrozenValue,
    ParameterFreezerBase,
)
from lab01_fx_passes.given.pass_report import unchanged

from .dce import is_impure
from .op_names import op_name


def _aliases(node: fx.Node, modules: dict[str, nn.Module]) -> list[fx.Node]:
    """``node`` and every node that may share its memory through a chain of :data:`ALIASING_OPS`."""
    found, stack = [node], [node]
    while stack:
        for user in stack.pop().users:
            name = op_name(user, modules)
            if name is not None and name.name in ALIASING_OPS and user not in found:
                found.append(user)
                stack.append(user)
    return found


def shares_memory_with(node: fx.Node, modules: dict[str, nn.Module]) -> list[fx.Node]:
    """``node`` and every node that may share its memory: up to the tensor it is a view of (through
    :data:`ALIASING_OPS` and in-place ops, which return their input), then down through
    every view of that tensor, of its views, ...

    A view's tensor is its call's input wherever the call passes it (``call_input``): by position, or by
    name (``torch.reshape(input=t, shape=...)``), never ``node.args[0]`` alone."""

    def aliases_input(user: fx.Node) -> bool:
        name = op_name(user, modules)
        return name is not None and (name.name in ALIASING_OPS or writes_in_place(user, name))

    root = node
    while aliases_input(root) and isinstance(call_input(root), fx.Node):
        root = call_input(root)
    found, stack = [root], [root]
    while stack:
        value = stack.pop()
        for user in value.users:
            if user not in found and aliases_input(user) and call_input(user) is value:
                found.append(user)
                stack.append(user)
    return found


class ParameterFreezer(ParameterFreezerBase):
    """Turn the parameter and buffer placeholders of a Dynamo graph into ``get_attr`` constants.

    Usage::

        freezer = ParameterFreezer(example_inputs)   # the values, one per placeholder, in order
        result = freezer(gm)                          # gm rewritten in place
        freezer.frozen                                # what was frozen (FrozenValue per placeholder)
        freezer.kept                                  # placeholder name -> why it stays an input
        freezer.guard_holds(args)                     # may the frozen graph run on these arguments?

    Args:
        example_inputs: the values of the graph's placeholders, in placeholder order (what a
            ``torch.compile`` backend receives as ``example_inputs``); None: nothing is frozen
            (the pass reports why).

    A graph without parameter placeholders (every dialect but Dynamo) is left unchanged, with a
    reason. Each frozen tensor is registered on ``gm`` as a buffer (``tensor.detach()``: the same
    memory, never a copy, never modified).

    Raises:
        ValueError: (on call) when the graph has a different number of placeholders than
            ``example_inputs`` has values.

    Given (:class:`~lab01_fx_passes.given.interface.ParameterFreezerBase`): the constructor
    (``self.example_inputs`` a tuple or None, :attr:`frozen` and :attr:`kept` empty) and the name
    ``"freeze_parameters"`` the pass manager reports.
    """

    def _why_not(self, node: fx.Node, value: Any, modules: dict[str, nn.Module]) -> str | None:
        if not isinstance(value, torch.Tensor):
            return NOT_A_TENSOR
        if value.requires_grad and torch.is_grad_enabled():
            return REQUIRES_GRAD
        for alias in _aliases(node, modules):
            for user in alias.users:
                if user.op == "output":
                    return RETURNED
                if is_impure(user, modules):
                    return MODIFIED_IN_PLACE
        return None

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        """Freeze every placeholder that rules 1-3 of the module docstring allow; keep the others.

        Each frozen placeholder's uses read a new ``get_attr`` node (before the first computation)
        instead, and a :class:`FrozenValue` is recorded in :attr:`frozen`; each module-state
        placeholder left an input gets its reason in :attr:`kept` (``MODIFIED_IN_PLACE``,
        ``RETURNED``, ``REQUIRES_GRAD``, ``NOT_A_TENSOR``). Returns ``PassResult(gm, True)``, or
        ``unchanged(gm, reason)`` when nothing was frozen.
        """
        graph = graph_module.graph
        placeholders = graph.find_nodes(op="placeholder")
        self.frozen, self.kept = [], {}
        if self.example_inputs is None:
            return unchanged(graph_module, NO_VALUES)
        if len(placeholders) != len(self.example_inputs):
            raise ValueError(
                f"freeze_parameters: the graph has {len(placeholders)} placeholders but "
                f"{len(self.example_inputs)} example inputs were given (one value per placeholder, in order)"
            )
        modules = dict(graph_module.named_modules())
        first_computation = next(node for node in graph.nodes if node.op != "placeholder")
        for index, (node, value) in enumerate(zip(placeholders, self.example_inputs)):
            if not is_module_state(node):
                continue
            why = self._why_not(node, value, modules)
            if why is not None:
                self.kept[node.name] = why
                continue
            name = add_attribute(graph_module, f"_frozen_{node.name}", value.detach())
            with graph.inserting_before(first_computation):
                constant = graph.get_attr(name)
            if "example_value" in node.meta:
                constant.meta["example_value"] = node.meta["example_value"]
            node.replace_all_uses_with(constant)
            self.frozen.append(FrozenValue(index, node.name, value, value._version))
        if not self.frozen:
            reason = next(iter(self.kept.values()), None)
            return unchanged(graph_module, NO_MODULE_STATE if reason is None else f"nothing frozen: {reason}")
        graph.lint()
        graph_module.recompile()
        return PassResult(graph_module, True)

    def guard_holds(self, args: Sequence[Any]) -> bool:
        """Whether the frozen graph may run on ``args``: every frozen position still holds the very
        tensor that was frozen, with the version counter it had (nothing wrote to it since)."""
        return all(
            frozen.index < len(args) and args[frozen.index] is frozen.tensor
            and args[frozen.index]._version == frozen.version
            for frozen in self.frozen
        )  # fmt: skip


def freeze_parameters(gm: fx.GraphModule, example_inputs: Sequence[Any] | None) -> PassResult:
    """Function form of :class:`ParameterFreezer`: ``PassResult(gm, modified)``, ``gm`` changed in place."""
    return ParameterFreezer(example_inputs)(gm)
