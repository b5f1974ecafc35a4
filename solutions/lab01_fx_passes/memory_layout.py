"""Memory layout: run 2-D convolutions in channels-last (NHWC) order.

A ``[N, C, H, W]`` tensor is usually stored with ``W`` varying fastest (NCHW, "contiguous").
CPU convolution kernels (oneDNN) are faster on NHWC ("channels-last") data: the ``C`` values of
one pixel sit next to each other, which is what a vectorised dot product over channels wants.
Handing them NCHW costs a layout conversion (a reorder) around every convolution.

PyTorch picks a convolution's layout from its operands: if the weight is channels-last, the
output is channels-last too, and the following BatchNorm/ReLU/add/pooling keep that layout, so the
whole network runs in NHWC with one conversion at its input. This pass therefore

1. gives every 2-D convolution a channels-last copy of its weight (a new module for
   ``call_module`` convolutions, a new ``get_attr`` constant for ``aten.convolution`` /
   ``aten.conv2d`` / Dynamo's ``torch.conv2d`` with a constant weight); values are unchanged, only
   strides differ;
2. turns every ``view`` downstream of a converted convolution into a ``reshape`` (see below);
3. passes every graph output through :func:`contiguous_output`, so callers still receive the
   default (contiguous) layout they received before: a caller's ``.view()`` keeps working.

**The pitfall: a layout change crosses a view.** ``view`` never copies: it only reinterprets
strides, and it fails when the new shape cannot be expressed with the old strides. Flattening
``[N, C, H, W]`` to ``[N, C*H*W]`` is such a case when the tensor is channels-last (``C`` is not
the slowest-varying of the three dimensions it merges). VGG and AlexNet end their features with
``flatten`` after an adaptive average pool; ``make_fx`` and core aten record that ``flatten`` as
``aten.view``, valid on the NCHW tensor it was traced with and invalid on the NHWC tensor this pass
makes: the graph raises *view size is not compatible with input tensor's size and stride*.
``reshape`` is ``view`` where a view is possible and a copy where it is not, so the pass rewrites
every view its layout change can reach (Inductor's ``view_to_reshape`` pass does the same).
A copy is not a view, though: if the view, or anything sharing its memory (the tensor it views,
another view of that tensor, a view of the view), is written in place after the view is taken
(``x.add_(1)``, ``relu_``, ``x[i] = v``: the copy would not see the write), the pass
leaves the convolutions upstream of it contiguous instead, and says so in
:attr:`ChannelsLastConverter.skipped`. (Writes before the view, and impure reads such as a random
draw, are harmless.)

The numbers are the same up to float32 rounding (NHWC kernels sum in a different order).
Dialects: ``symbolic_trace``, aten graphs, and Dynamo graphs once frozen (``freezing.py``): before
that, Dynamo's weights are graph inputs, and converting them would cost a reorder on every call.
"""

from __future__ import annotations

import copy

import torch
from torch import fx, nn
from torch.fx.node import map_arg
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.graph_tools import add_attribute, call_argument, call_input, fetch_attr, writes_in_place
from lab01_fx_passes.given.interface import (
    ATEN_CONV2DS,
    TORCH_CONV2DS,
    VIEW_MODIFIED_IN_PLACE,
    VIEW_TO_RESHAPE,
    WEIGHTS_ARE_INPUTS,
    ChannelsLastConverterBase,
    contiguous_output,
    is_view,
)
from lab01_fx_passes.given.pass_report import unchanged

from .freezing import shares_memory_with
from .op_names import op_name


def _channels_last(weight: torch.Tensor) -> torch.Tensor:
    return weight.detach().contiguous(memory_format=torch.channels_last)


def _downstream(sources: list[fx.Node]) -> set[fx.Node]:
    """Every node whose value depends on one of ``sources`` (the sources included)."""
    seen, stack = set(sources), list(sources)
    while stack:
        for user in stack.pop().users:
            if user not in seen:
                seen.add(user)
                stack.append(user)
    return seen


def _written_after(view: fx.Node, modules: dict[str, nn.Module]) -> bool:
    """Whether the view, or anything sharing its memory (the tensor it views, another view of that
    tensor, a view of the view), is written in place after the view is taken.

    Then the view must stay a view: a reshape that copies would not see the write (or not pass it
    on). Writes before the view are seen either way, and reads are harmless.
    """
    order = {node: index for index, node in enumerate(view.graph.nodes)}
    values = shares_memory_with(view, modules)
    return any(order[user] > order[view] and _writes(user, value, modules) for value in values for user in value.users)


def _writes(user: fx.Node, value: fx.Node, modules: dict[str, nn.Module]) -> bool:
    """Whether ``user`` writes ``value``: an in-place op writes its first argument (``total.add_(flat)`` writes
    ``total`` and only reads ``flat``), an ``out=`` call its ``out``."""
    first_written = call_input(user) is value and writes_in_place(user, op_name(user, modules))
    return first_written or user.kwargs.get("out") is value


class ChannelsLastConverter(ChannelsLastConverterBase):
    """Convert 2-D convolution weights to channels-last and restore the outputs' default layout.

    Usage: ``result = ChannelsLastConverter()(gm)``; modifies ``gm`` in place (new modules and
    constants, never changed ones), returns ``PassResult(gm, modified)``; :attr:`converted_count`
    says how many convolutions were converted, :attr:`reshaped_count` how many views became
    reshapes, :attr:`skipped` why the other convolutions were left alone (reason -> count). Given
    (:class:`~lab01_fx_passes.given.interface.ChannelsLastConverterBase`): the three counters, set by the
    constructor, and :meth:`why_unchanged`.
    """

    def _weight_node(self, gm: fx.GraphModule, node: fx.Node, modules: dict[str, nn.Module]) -> fx.Node | str | None:
        """What to convert for ``node``: its module's name, its constant weight node, or None (recorded in skipped)."""
        if node.op == "call_module":
            return node.target if isinstance(modules[node.target], nn.Conv2d) else None
        if node.op != "call_function" or node.target not in ATEN_CONV2DS + TORCH_CONV2DS:
            return None
        weight = call_argument(node, "weight")
        if call_argument(node, "transposed", False) or not isinstance(weight, fx.Node):
            return None
        if weight.op != "get_attr":
            self.skipped[WEIGHTS_ARE_INPUTS] += 1
            return None
        value = fetch_attr(gm, weight.target)
        return weight if isinstance(value, torch.Tensor) and value.dim() == 4 else None

    def _convert(self, gm: fx.GraphModule, node: fx.Node, weight: fx.Node | str, modules: dict[str, nn.Module]) -> None:
        if isinstance(weight, str):
            converted = copy.deepcopy(modules[node.target])
            converted.weight = nn.Parameter(_channels_last(converted.weight), converted.weight.requires_grad)
            node.target = add_attribute(gm, f"{node.target}_channels_last", converted)
            return
        name = add_attribute(gm, f"{weight.target}_channels_last", _channels_last(fetch_attr(gm, weight.target)))
        with gm.graph.inserting_before(node):
            converted_weight = gm.graph.get_attr(name)
        converted_weight.meta.update(weight.meta)
        node.replace_input_with(weight, converted_weight)

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        modules = dict(graph_module.named_modules())
        graph = graph_module.graph
        self.skipped.clear()
        candidates = {}
        for node in graph.nodes:
            weight = self._weight_node(graph_module, node, modules)
            if weight is not None:
                candidates[node] = weight
        # A view written in place after it is taken (through it or through its base) must stay a
        # view (a reshape may copy): no convolution upstream of it may change the layout it sees.
        pinned = {node for node in graph.nodes if is_view(node) and _written_after(node, modules)}
        if pinned:
            for conv in list(candidates):
                if _downstream([conv]) & pinned:
                    del candidates[conv]
                    self.skipped[VIEW_MODIFIED_IN_PLACE] += 1
        for conv, weight in candidates.items():
            self._convert(graph_module, conv, weight, modules)
        self.converted_count = len(candidates)
        self.reshaped_count = 0
        if candidates:
            self.reshaped_count = self._views_to_reshapes(graph, _downstream(list(candidates)))
            self._restore_output_layout(graph)
            graph.lint()
            graph_module.recompile()
            return PassResult(graph_module, True)
        return unchanged(graph_module, self.why_unchanged())

    @staticmethod
    def _views_to_reshapes(graph: fx.Graph, region: set[fx.Node]) -> int:
        """Rewrite every view in ``region`` as a reshape (of the same tensor, to the same shape); return how many."""
        views = [node for node in graph.nodes if node in region and is_view(node)]
        for view in views:
            with graph.inserting_before(view):
                if view.op == "call_method":
                    reshape = graph.call_method("reshape", view.args, view.kwargs)
                else:
                    # aten.view(self, size) -> aten.reshape(self, shape): the same values, other names
                    arguments = (call_input(view), call_argument(view, "size"))
                    reshape = graph.call_function(VIEW_TO_RESHAPE[view.target], arguments)
            reshape.meta.update(view.meta)
            view.replace_all_uses_with(reshape)
            graph.erase_node(view)
        return len(views)

    @staticmethod
    def _restore_output_layout(graph: fx.Graph) -> None:
        output = graph.find_nodes(op="output")[0]

        def restore(node: fx.Node) -> fx.Node:
            if node.op == "call_function" and node.target is contiguous_output:
                return node  # already restored by an earlier run of this pass
            with graph.inserting_before(output):
                return graph.call_function(contiguous_output, (node,))

        output.args = map_arg(output.args, restore)


def convert_to_channels_last(gm: fx.GraphModule) -> PassResult:
    """Function form of :class:`ChannelsLastConverter`: ``PassResult(gm, modified)``, ``gm`` changed in place.

    When nothing was converted the result says why (``unchanged(gm, reason)``).
    """
    return ChannelsLastConverter()(gm)
