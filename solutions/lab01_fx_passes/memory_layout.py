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
   ``aten.conv2d`` with a constant weight); values are unchanged, only strides differ;
2. passes every graph output through :func:`contiguous_output`, so callers still receive the
   default (contiguous) layout they received before: a caller's ``.view()`` keeps working.

The numbers are the same up to float32 rounding (NHWC kernels sum in a different order).
Dialects: ``symbolic_trace`` and aten graphs with ``get_attr`` weights (Dynamo's weights are
inputs: converting them would cost a reorder on every call).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import fx, nn
from torch.fx.node import map_arg
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from lab01_fx_passes.graph_tools import add_attribute, call_argument, fetch_attr

aten = torch.ops.aten
#: aten 2-D convolutions whose constant weight the pass converts.
ATEN_CONVOLUTIONS = (aten.convolution.default, aten.conv2d.default)


def contiguous_output(value: Any) -> Any:
    """A tensor in the default (contiguous) layout; anything else unchanged. Inserted before the output."""
    return value.contiguous() if isinstance(value, torch.Tensor) else value


def _channels_last(weight: torch.Tensor) -> torch.Tensor:
    return weight.detach().contiguous(memory_format=torch.channels_last)


class ChannelsLastConverter(PassBase):
    """Convert 2-D convolution weights to channels-last and restore the outputs' default layout.

    Usage: ``result = ChannelsLastConverter()(gm)``; modifies ``gm`` in place (new modules and
    constants, never changed ones), returns ``PassResult(gm, modified)``; :attr:`converted_count`
    says how many convolutions were converted.
    """

    def __init__(self) -> None:
        super().__init__()
        self.converted_count = 0

    def _convert(self, gm: fx.GraphModule, node: fx.Node, modules: dict[str, nn.Module]) -> bool:
        if node.op == "call_module" and isinstance(modules[node.target], nn.Conv2d):
            converted = copy.deepcopy(modules[node.target])
            converted.weight = nn.Parameter(_channels_last(converted.weight), converted.weight.requires_grad)
            node.target = add_attribute(gm, f"{node.target}_channels_last", converted)
            return True
        if node.op != "call_function" or node.target not in ATEN_CONVOLUTIONS:
            return False
        weight = call_argument(node, "weight")
        if call_argument(node, "transposed", False) or not (isinstance(weight, fx.Node) and weight.op == "get_attr"):
            return False
        value = fetch_attr(gm, weight.target)
        if not isinstance(value, torch.Tensor) or value.dim() != 4:
            return False
        name = add_attribute(gm, f"{weight.target}_channels_last", _channels_last(value))
        with gm.graph.inserting_before(node):
            converted_weight = gm.graph.get_attr(name)
        converted_weight.meta.update(weight.meta)
        node.replace_input_with(weight, converted_weight)
        return True

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        modules = dict(graph_module.named_modules())
        converted = sum(self._convert(graph_module, node, modules) for node in list(graph_module.graph.nodes))
        self.converted_count = converted
        if converted:
            self._restore_output_layout(graph_module.graph)
            graph_module.graph.lint()
            graph_module.recompile()
        return PassResult(graph_module, converted > 0)

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
    """Function form of :class:`ChannelsLastConverter`: ``PassResult(gm, modified)``, ``gm`` changed in place."""
    return ChannelsLastConverter()(gm)
