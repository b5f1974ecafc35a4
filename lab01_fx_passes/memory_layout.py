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

from typing import Any

import torch
from torch import fx, nn  # noqa: F401
from torch.fx.node import map_arg  # noqa: F401  (rewrites every node inside output.args)
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from lab01_fx_passes.graph_tools import add_attribute, call_argument, fetch_attr  # noqa: F401

aten = torch.ops.aten
#: aten 2-D convolutions whose constant weight the pass converts.
ATEN_CONVOLUTIONS = (aten.convolution.default, aten.conv2d.default)


def contiguous_output(value: Any) -> Any:
    """A tensor in the default (contiguous) layout; anything else unchanged. Inserted before the output."""
    return value.contiguous() if isinstance(value, torch.Tensor) else value


class ChannelsLastConverter(PassBase):
    """Convert 2-D convolution weights to channels-last and restore the outputs' default layout.

    Usage: ``result = ChannelsLastConverter()(gm)``; modifies ``gm`` in place (new modules and
    constants, never changed ones), returns ``PassResult(gm, modified)``; :attr:`converted_count`
    says how many convolutions were converted.
    """

    def __init__(self) -> None:
        super().__init__()
        self.converted_count = 0

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        # TODO(step 6): for each nn.Conv2d call_module, point the node at a converted copy of the
        #  module (weight.detach().contiguous(memory_format=torch.channels_last), wrapped in an
        #  nn.Parameter); for each aten 2-D convolution (not transposed) with a 4-D get_attr weight,
        #  point it at a new get_attr constant holding the converted weight. Then, if anything
        #  changed, wrap every graph output in a call_function to contiguous_output (once: a second
        #  run must not wrap them again), lint, recompile. Set self.converted_count.
        raise NotImplementedError("ChannelsLastConverter.call: convert convolution weights to channels-last")


def convert_to_channels_last(gm: fx.GraphModule) -> PassResult:
    """Function form of :class:`ChannelsLastConverter`: ``PassResult(gm, modified)``, ``gm`` changed in place."""
    return ChannelsLastConverter()(gm)
