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

import torch  # noqa: F401  (torch.is_grad_enabled())
from torch import fx, nn  # noqa: F401
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.graph_tools import add_attribute, is_module_state  # noqa: F401
from lab01_fx_passes.given.interface import (  # noqa: F401  (given: the aliasing ops, the reasons, the record)
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
from lab01_fx_passes.given.pass_report import unchanged  # noqa: F401

from .dce import is_impure  # noqa: F401  (step 2: in-place, random and stateful nodes)
from .op_names import op_name  # noqa: F401


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

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        """Freeze every placeholder that rules 1-3 of the module docstring allow; keep the others.

        Each frozen placeholder's uses read a new ``get_attr`` node (before the first computation)
        instead, and a :class:`FrozenValue` is recorded in :attr:`frozen`; each module-state
        placeholder left an input gets its reason in :attr:`kept` (``MODIFIED_IN_PLACE``,
        ``RETURNED``, ``REQUIRES_GRAD``, ``NOT_A_TENSOR``). Returns ``PassResult(gm, True)``, or
        ``unchanged(gm, reason)`` when nothing was frozen.
        """
        # TODO(step 8): freeze every parameter or buffer placeholder whose value cannot change.
        # guidance: begin
        #  - no example inputs: return unchanged(graph_module, NO_VALUES); a number of placeholders
        #    other than len(self.example_inputs): ValueError (see the class docstring);
        #  - for each placeholder (graph.find_nodes(op="placeholder"), in order) with its value:
        #    skip it unless is_module_state(node); keep it as an input, recording why in
        #    self.kept[node.name], when the value is not a tensor, requires grad while
        #    torch.is_grad_enabled(), or the node or any alias of it (follow node.users through
        #    ALIASING_OPS, named with op_name) is returned (a user whose op is "output") or read by
        #    an impure node (is_impure, step 2);
        #  - otherwise register value.detach() with add_attribute, insert a get_attr node before the
        #    first non-placeholder node, copy node.meta["example_value"] onto it,
        #    node.replace_all_uses_with(that get_attr), and append FrozenValue(index, node.name,
        #    value, value._version) to self.frozen. The placeholder stays: the graph is still
        #    called with every argument;
        #  - nothing frozen: unchanged(graph_module, NO_MODULE_STATE or the first reason kept);
        #    else lint, recompile, PassResult(graph_module, True).
        # guidance: end
        raise NotImplementedError("ParameterFreezer.call: turn parameter placeholders into constants")

    def guard_holds(self, args: Sequence[Any]) -> bool:
        """Whether the frozen graph may run on ``args``: every frozen position still holds the very
        tensor that was frozen, with the version counter it had (nothing wrote to it since)."""
        # TODO(step 8): the guard.
        # guidance: begin
        #  For every FrozenValue: args[index] is frozen.tensor (the same object, not an equal one)
        #  and args[index]._version == frozen.version.
        # guidance: end
        raise NotImplementedError("ParameterFreezer.guard_holds: check the frozen values are unchanged")


def freeze_parameters(gm: fx.GraphModule, example_inputs: Sequence[Any] | None) -> PassResult:
    """Function form of :class:`ParameterFreezer`: ``PassResult(gm, modified)``, ``gm`` changed in place."""
    return ParameterFreezer(example_inputs)(gm)
