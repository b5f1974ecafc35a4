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

import torch  # noqa: F401  (torch.channels_last)
from torch import fx, nn  # noqa: F401
from torch.fx.node import map_arg  # noqa: F401  (rewrites every node inside output.args)
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.graph_tools import (  # noqa: F401  (writes_in_place(node, op_name(node, modules)))
    add_attribute,
    call_argument,
    fetch_attr,
    writes_in_place,
)
from lab01_fx_passes.given.interface import (  # noqa: F401  (given: the targets, the reasons, the output wrapper)
    ATEN_CONV2DS,
    NO_CONVOLUTIONS,
    TORCH_CONV2DS,
    VIEW_MODIFIED_IN_PLACE,
    VIEW_TO_RESHAPE,
    WEIGHTS_ARE_INPUTS,
    ChannelsLastConverterBase,
    contiguous_output,
    is_view,
)
from lab01_fx_passes.given.pass_report import unchanged  # noqa: F401  (the reason when nothing was converted)

from .op_names import op_name  # noqa: F401  (in-place writes: a view written after it is taken stays a view)


class ChannelsLastConverter(ChannelsLastConverterBase):
    """Convert 2-D convolution weights to channels-last and restore the outputs' default layout.

    Usage: ``result = ChannelsLastConverter()(gm)``; modifies ``gm`` in place (new modules and
    constants, never changed ones), returns ``PassResult(gm, modified)``; :attr:`converted_count`
    says how many convolutions were converted, :attr:`reshaped_count` how many views became
    reshapes, :attr:`skipped` why the other convolutions were left alone (reason -> count). Given
    (:class:`~lab01_fx_passes.given.interface.ChannelsLastConverterBase`): the three counters, set by the
    constructor, and :meth:`why_unchanged`.
    """

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
        #     (writes_in_place(node, op_name(node, modules))) after the view is taken, through the
        #     view or anything sharing its memory (the tensor it views, its other views, views of
        #     the view: follow ALIASING_OPS, from given/interface.py, up and down): a reshape may copy,
        #     and a copy misses the write;
        #  3. if anything changed, wrap every graph output in a call_function to contiguous_output
        #     (once: a second run must not wrap them again), lint, recompile; else return
        #     unchanged(graph_module, self.why_unchanged()). Set the counts.
        # guidance: end
        raise NotImplementedError("ChannelsLastConverter.call: convert convolution weights to channels-last")


def convert_to_channels_last(gm: fx.GraphModule) -> PassResult:
    """Function form of :class:`ChannelsLastConverter`: ``PassResult(gm, modified)``, ``gm`` changed in place.

    When nothing was converted the result says why (``unchanged(gm, reason)``).
    """
    return ChannelsLastConverter()(gm)
