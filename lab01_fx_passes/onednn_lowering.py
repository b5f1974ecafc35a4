"""Extension: lower Conv(+ReLU, +add) to oneDNN's fused convolution with a pre-packed weight.

After steps 1 to 9 every ResNet-50 convolution is a plain ``conv2d`` on channels-last data. Two
costs remain on a CPU, and neither is arithmetic:

- **The weight's layout, on every call.** oneDNN (the library behind PyTorch's CPU convolutions)
  computes in a *blocked* weight layout (``OIhw16i16o`` and the like: 16 output channels side by
  side, matching the vector registers), not in PyTorch's ``[O, I, kH, kW]``. A plain convolution
  reorders its weight into that layout on every call, and a 3x3 weight of ResNet-50's last stage
  is 9 MB. *Pre-packing* does the reorder once, at compile time
  (``torch.ops.mkldnn._reorder_convolution_weight``, for the input shape the graph will see): the
  graph then holds an opaque oneDNN tensor, and the convolution reads it as it is.
- **A pass over memory per elementwise op.** ``relu(conv(x))`` writes the convolution's output,
  reads it back for the ReLU and writes it again; ``relu(conv(x) + identity)`` makes two more
  passes. oneDNN applies such *post-ops* while the output tile is still in registers: one kernel,
  one write. ``torch.ops.mkldnn._convolution_pointwise`` is that fused kernel (``attr="relu"``, or
  ``"none"``), and its ``.binary`` form adds a second tensor first (``binary_attr="add"``), then
  optionally the ReLU (``unary_attr="relu"``). Inductor's CPU freezing passes
  (``torch/_inductor/fx_passes/mkldnn_fusion.py``) emit exactly these operators, and TorchScript's
  ``optimize_for_inference`` does the same with its own.

Folding BatchNorm (step 1) removed an affine map; this pass removes the weight reorders and two or
three memory passes per residual block, which is why it is faster than folding and channels-last
alone, and faster than ``optimize_for_inference``, which also pre-packs and fuses but converts
every activation to oneDNN's own blocked layout and back.

**When it is not safe** (each case is left alone, and :attr:`OneDNNLowering.skipped` or
:attr:`OneDNNLowering.unfused` says why):

- *Another user of an intermediate value.* The fused kernel never materialises ``conv(x)`` (nor
  ``conv(x) + other`` when a ReLU follows): if anything else reads it, the ReLU (or the add) stays
  a separate node and the convolution is lowered alone (``attr="none"``).
- *An add that writes its other operand* (``identity += conv(x)``): later readers expect the write,
  and the fused kernel writes a new tensor, so the add stays. (``conv(x) += identity`` is fine: the
  written value is the convolution's own output, which nothing else reads.) Broadcasting adds and
  an ``alpha`` other than 1 stay too.
- *Training, or autograd.* The fused operators have no backward (autograd would silently compute
  nothing through them), and a packed weight is a snapshot an optimiser step would not update. So
  a convolution module in training mode, or a weight that requires grad while grad mode is on, is
  left alone: lower for inference, under ``torch.no_grad()``.
- *Devices and dtypes oneDNN does not take.* Only CPU tensors; float32 always, bfloat16 and
  float16 only where this CPU has the instructions (:func:`onednn_dtypes`); never float64 or
  integers.
- *A layout the layout pass did not choose.* The fused kernel returns channels-last tensors. A
  convolution whose output is not channels-last already (step 6 left it contiguous, e.g. because a
  view downstream is written in place, or step 6 did not run) would change layout under the
  graph's views: left alone, with "run convert_to_channels_last first". This pass swaps kernels,
  never layouts.
- *Weights that are graph inputs* (Dynamo before freezing): nothing to pack once for all calls.

What each convolution is (input shape, output layout, dtype, device) is observed on one run of the
graph on the example inputs (:func:`~lab01_fx_passes.given.graph_tools.observe_tensors`): the same in
every dialect, and true of the graph as the earlier passes left it.

The price: the graph holds opaque oneDNN tensors, so it cannot be deep-copied, saved with
``torch.save`` or moved to another device, and it runs on CPUs only. That is why the lowering is
not part of :func:`default_pipeline`: :func:`onednn_pipeline` runs it after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch  # noqa: F401  (the TODOs below use it)
from torch import fx, nn
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.graph_tools import (  # noqa: F401  (what the TODOs below use)
    TensorInfo,
    add_attribute,
    call_argument,
    fetch_attr,
    observe_tensors,
)
from lab01_fx_passes.given.onednn_ops import (  # noqa: F401  (the operators, reasons and record this pass uses)
    ATEN_CONV2D,
    ATEN_CONVOLUTION,
    AUTOGRAD,
    CONV,
    CONV_ADD,
    CONV_ADD_RELU,
    CONV_BINARY,
    CONV_OUTPUT_SHARED,
    CONV_POINTWISE,
    CONV_RELU,
    NO_CONVOLUTIONS,
    NO_EXAMPLE_INPUTS,
    NO_ONEDNN,
    NOT_A_PLAIN_ADD,
    NOT_CHANNELS_LAST,
    NOT_CPU,
    NOT_RUN,
    PACK_WEIGHT,
    SUM_SHARED,
    TORCH_CONV2D,
    TRAINING,
    UNSUPPORTED_DTYPE,
    UNSUPPORTED_PADDING,
    WEIGHTS_ARE_INPUTS,
    WRITES_OTHER_OPERAND,
    Convolution,
    OneDNNLoweringBase,
    aten,
    is_relu_of,
    mkldnn,
    onednn_dtypes,
    pair,
)
from lab01_fx_passes.given.pass_report import unchanged  # noqa: F401  (the reason when nothing was lowered)

from .op_names import op_name  # noqa: F401  (step 0's: is_relu_of and the add check read its answer)
from .pass_manager import PassManager
from .pipeline import default_pipeline


def match_convolution(gm: fx.GraphModule, node: fx.Node, modules: dict[str, nn.Module]) -> Convolution | str | None:
    """Recognise a 2-D convolution with constant weights, in any dialect.

    Returns:
        A :class:`Convolution`; a reason (one of the module's constants) when ``node`` is a 2-D
        convolution that cannot be lowered whatever its inputs (weights that are graph inputs, a
        padding mode or string oneDNN does not take); None when ``node`` is not a 2-D convolution.
    """
    # TODO(step 10): recognise a 2-D convolution in each dialect.
    # guidance: begin
    #  - call_module on an nn.Conv2d: the module's weight, bias, stride, padding, dilation and
    #    groups (_pair each of the three tuples), training=module.training; a padding_mode other than
    #    "zeros", or a string padding ("same"), is UNSUPPORTED_PADDING;
    #  - call_function ATEN_CONVOLUTION (make_fx, core aten): args are (x, weight, bias, stride,
    #    padding, dilation, transposed, output_padding, groups); a transposed one is not a match;
    #  - call_function ATEN_CONV2D (torch.export): x and weight first, then read bias, stride,
    #    padding, dilation, groups with call_argument (an export graph leaves defaults out);
    #  - call_function TORCH_CONV2D (Dynamo): the same seven arguments by position, else by
    #    keyword (input, weight, bias, stride, padding, dilation, groups), else the defaults
    #    (None, 1, 0, 1, 1): torch.conv2d has no signature call_argument could read;
    #  - in the function forms, a weight or bias that is not a get_attr node (a placeholder) is
    #    WEIGHTS_ARE_INPUTS; fetch_attr the tensors; a weight that is not a 4-D strided tensor is
    #    not a match (a 1-D convolution, or one lowered already); record the get_attr nodes in
    #    `constants` (the pass erases them once unused).
    # guidance: end
    raise NotImplementedError("match_convolution: recognise a 2-D convolution in every dialect")


class OneDNNLowering(OneDNNLoweringBase):
    """Lower each safe 2-D convolution, with the ReLU or add (+ReLU) after it, to one oneDNN kernel.

    Usage: ``result = OneDNNLowering(example_inputs)(gm)``; modifies ``gm`` in place (new constants,
    never changed ones), returns ``PassResult(gm, modified)``. ``example_inputs`` are what ``gm`` is
    called with (Dynamo: parameters included): one run on them tells each convolution's input shape
    (the weights are packed for it; other shapes still compute correctly), its output layout, dtype
    and device. After a call: :attr:`lowered` counts the lowered convolutions by what they absorbed
    (:data:`CONV`, :data:`CONV_RELU`, :data:`CONV_ADD`, :data:`CONV_ADD_RELU`); :attr:`skipped`
    says why other convolutions were left alone, :attr:`unfused` why a ReLU or add after a lowered
    convolution stayed a separate node (reason -> count). Given
    (:class:`~lab01_fx_passes.given.onednn_ops.OneDNNLoweringBase`): the constructor, which keeps
    ``self.example_inputs`` (a tuple or None) and sets up the three counters, :attr:`lowered_count`,
    :meth:`why_unchanged` and the name ``"lower_to_onednn"``.
    """

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        """Lower every convolution :func:`match_convolution` finds and :meth:`refusal` allows.

        Returns ``PassResult(gm, True)``, or ``unchanged(gm, reason)`` when nothing was lowered
        (:data:`NO_ONEDNN`, :data:`NO_EXAMPLE_INPUTS`, or :meth:`why_unchanged`).
        """
        # TODO(step 10): lower the convolutions, fusing the ReLU or add (+ReLU) after each where safe.
        # guidance: begin
        #  - clear the three counters; no oneDNN (torch.backends.mkldnn.is_available()) or no
        #    example inputs: return unchanged(...) with NO_ONEDNN or NO_EXAMPLE_INPUTS;
        #  - tensors = observe_tensors(graph_module, self.example_inputs): node -> TensorInfo;
        #  - for each node (in graph order, over a copy of the node list): conv = match_convolution(...);
        #    a reason (a str), or self.refusal(conv, tensors), goes into self.skipped; else lower it:
        #  - choose what it absorbs. Its only user a ReLU of it, in place or not
        #    (is_relu_of(user, conv.node, op_name(user, modules))): CONV_RELU. Its only user an add
        #    of it and another node (op_name "add" or
        #    "iadd"; two positional operands, no alpha other than 1; the other operand a tensor of
        #    the convolution's output shape, dtype and device in `tensors`; an in-place add (add_,
        #    iadd) only when the convolution's output is the operand written, args[0]): CONV_ADD,
        #    and CONV_ADD_RELU when the add's only user is a ReLU of it. Anything else, and any
        #    conv output with more than one user: CONV alone. Count each declined fusion in
        #    self.unfused (CONV_OUTPUT_SHARED, SUM_SHARED, WRITES_OTHER_OPERAND, NOT_A_PLAIN_ADD);
        #  - pack the weight once: PACK_WEIGHT(conv.weight.detach(), padding, stride, dilation,
        #    groups, list(tensors[conv.x].shape)); register it and bias.detach() (if any) with
        #    add_attribute and read them with get_attr nodes inserted before the convolution;
        #  - insert before the LAST absorbed node (the ReLU, the add, or the convolution itself):
        #    CONV_POINTWISE(x, weight, bias, padding, stride, dilation, groups, attr, [], "") with
        #    attr "relu" or "none", or CONV_BINARY(x, other, weight, bias, padding, stride, dilation,
        #    groups, "add", None, unary, [], "") with unary "relu" or None; copy the last node's
        #    meta onto it, set tensors[fused] = tensors[last] (a later convolution may read it),
        #    last.replace_all_uses_with(fused), erase the absorbed nodes (last first) and the
        #    conv's constants that have no users left; self.lowered[form] += 1;
        #  - nothing lowered: unchanged(graph_module, self.why_unchanged()); else
        #    graph_module.delete_all_unused_submodules(), lint, recompile, PassResult(graph_module, True).
        # guidance: end
        raise NotImplementedError("OneDNNLowering.call: lower convolutions to oneDNN's fused kernels")

    @staticmethod
    def refusal(conv: Convolution, tensors: dict[fx.Node, TensorInfo]) -> str | None:
        """Why ``conv`` must stay a plain convolution (None when it may be lowered), from its observed tensors.

        In this order: :data:`TRAINING` (its module is in training mode); :data:`AUTOGRAD` (grad mode
        is on and its weight or bias requires grad); :data:`NOT_RUN` (``tensors`` lacks its input or
        output); :data:`NOT_CPU` (its input, output, weight or bias is not on the CPU);
        ``f"{UNSUPPORTED_DTYPE} ({dtype})"`` with the dtype's name (``float64``) when its input's
        dtype is not in :func:`onednn_dtypes` or its weight or bias has another dtype;
        :data:`NOT_CHANNELS_LAST` (its output is not ``is_channels_last()``).
        """
        # TODO(step 10): the safety checks of the module docstring, in the order above.
        raise NotImplementedError("OneDNNLowering.refusal: say why a convolution must not be lowered")


def lower_to_onednn(gm: fx.GraphModule, example_inputs: Sequence[Any] | None) -> PassResult:
    """Function form of :class:`OneDNNLowering`: ``PassResult(gm, modified)``, ``gm`` changed in place.

    When nothing was lowered the result says why (``unchanged(gm, reason)``).
    """
    return OneDNNLowering(example_inputs)(gm)


def onednn_pipeline(example_inputs: Sequence[Any] | None) -> PassManager:
    """:func:`default_pipeline`'s passes, then :class:`OneDNNLowering` on the same inputs, validated alike.

    Call it under ``torch.no_grad()`` (inference): with grad mode on, weights that require grad are
    not lowered. The result holds opaque oneDNN tensors (no ``deepcopy``, no ``torch.save``, CPU only).
    """
    return OneDNNLowering.appended_to(default_pipeline(example_inputs), example_inputs)  # given: OneDNNLoweringBase
