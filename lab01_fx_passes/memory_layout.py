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

import operator
from collections import Counter
from typing import Any

import torch
from torch import fx, nn  # noqa: F401
from torch.fx.node import map_arg  # noqa: F401  (rewrites every node inside output.args)
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from lab01_fx_passes.graph_tools import add_attribute, call_argument, fetch_attr  # noqa: F401
from lab01_fx_passes.pass_report import unchanged  # noqa: F401  (the reason when nothing was converted)

from .op_names import op_name  # noqa: F401  (in-place writes: a view written after it is taken stays a view)

aten = torch.ops.aten
#: aten and Dynamo 2-D convolutions whose constant weight the pass converts.
ATEN_CONVOLUTIONS = (aten.convolution.default, aten.conv2d.default)
TORCH_CONVOLUTIONS = (torch.conv2d,)


def writes_in_place(node: fx.Node, modules: dict[str, nn.Module]) -> bool:
    """Whether ``node`` writes its first argument in place (``x.add_(1)``, ``relu_``, ``x[i] = v``)."""
    if node.op == "call_function" and node.target is operator.setitem:
        return True
    name = op_name(node, modules)
    return name is not None and name.in_place


#: View operators and the reshape that replaces them (``call_function`` targets; ``call_method``
#: ``view`` becomes ``reshape``).
VIEW_TO_RESHAPE = {aten.view.default: aten.reshape.default, aten._unsafe_view.default: aten.reshape.default}

#: Why a convolution was not converted (the keys of :attr:`ChannelsLastConverter.skipped`).
WEIGHTS_ARE_INPUTS = "weights are graph inputs: freeze first (freeze_parameters)"
VIEW_MODIFIED_IN_PLACE = "a view downstream of it is modified in place: the region stays contiguous"
NO_CONVOLUTIONS = "no 2-D convolution in this graph"


def contiguous_output(value: Any) -> Any:
    """A tensor in the default (contiguous) layout; anything else unchanged. Inserted before the output."""
    return value.contiguous() if isinstance(value, torch.Tensor) else value


def is_view(node: fx.Node) -> bool:
    """Whether ``node`` is a shape ``view`` (aten ``view``/``_unsafe_view``, or ``x.view(sizes)``), not a dtype view."""
    if node.op == "call_function":
        return node.target in VIEW_TO_RESHAPE
    if node.op != "call_method" or node.target != "view":
        return False
    return not any(isinstance(arg, torch.dtype) for arg in node.args[1:])


class ChannelsLastConverter(PassBase):
    """Convert 2-D convolution weights to channels-last and restore the outputs' default layout.

    Usage: ``result = ChannelsLastConverter()(gm)``; modifies ``gm`` in place (new modules and
    constants, never changed ones), returns ``PassResult(gm, modified)``; :attr:`converted_count`
    says how many convolutions were converted, :attr:`reshaped_count` how many views became
    reshapes, :attr:`skipped` why the other convolutions were left alone (reason -> count).
    """

    def __init__(self) -> None:
        super().__init__()
        self.converted_count = 0
        self.reshaped_count = 0
        self.skipped: Counter[str] = Counter()

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        # TODO(step 6): convert the 2-D convolutions' weights, make the views they reach reshapes.
        # guidance: begin
        #  1. for each nn.Conv2d call_module, point the node at a converted copy of the module
        #     (weight.detach().contiguous(memory_format=torch.channels_last), wrapped in an
        #     nn.Parameter); for each aten or Dynamo 2-D convolution (not transposed) with a 4-D
        #     get_attr weight, point it at a new get_attr constant holding the converted weight.
        #     A placeholder weight (Dynamo before freezing) is skipped as WEIGHTS_ARE_INPUTS.
        #  2. every node downstream of a converted convolution (follow node.users) may now be
        #     channels-last: replace each view among them (is_view) by a reshape with the same
        #     arguments (VIEW_TO_RESHAPE, or call_method "reshape"). Before converting, leave out
        #     (VIEW_MODIFIED_IN_PLACE) every convolution upstream of a view that is written in place
        #     (writes_in_place) after the view is taken, through the view or anything sharing its
        #     memory (the tensor it views, its other views, views of the view: follow ALIASING_OPS,
        #     from .freezing, up and down): a reshape may copy, and a copy misses the write;
        #  3. if anything changed, wrap every graph output in a call_function to contiguous_output
        #     (once: a second run must not wrap them again), lint, recompile; else return
        #     unchanged(graph_module, self.why_unchanged()). Set the counts.
        # guidance: end
        raise NotImplementedError("ChannelsLastConverter.call: convert convolution weights to channels-last")

    def why_unchanged(self) -> str:
        """Why no convolution was converted: each reason with its count, or :data:`NO_CONVOLUTIONS`."""
        if not self.skipped:
            return NO_CONVOLUTIONS
        return "; ".join(
            f"{reason} ({count} convolution{'s' * (count > 1)})" for reason, count in self.skipped.most_common()
        )


def convert_to_channels_last(gm: fx.GraphModule) -> PassResult:
    """Function form of :class:`ChannelsLastConverter`: ``PassResult(gm, modified)``, ``gm`` changed in place.

    When nothing was converted the result says why (``unchanged(gm, reason)``).
    """
    return ChannelsLastConverter()(gm)
