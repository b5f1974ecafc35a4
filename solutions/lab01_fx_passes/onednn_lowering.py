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

import torch
from torch import fx, nn
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.graph_tools import (
    TensorInfo,
    add_attribute,
    binary_operands,
    call_argument,
    call_input,
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
from lab01_fx_passes.given.pass_report import unchanged

from .op_names import op_name
from .pass_manager import PassManager
from .pipeline import default_pipeline


def _function_convolution(gm: fx.GraphModule, node: fx.Node) -> Convolution | str | None:
    """An aten or Dynamo 2-D convolution (``None`` for anything else, a reason when it cannot be lowered)."""
    if node.target not in (ATEN_CONVOLUTION, ATEN_CONV2D, TORCH_CONV2D):
        return None
    if call_argument(node, "transposed", False):  # (aten.convolution's flag)
        return None
    x, weight, bias, stride, padding, dilation, groups = (
        call_argument(node, name, default)
        for name, default in (("input", None), ("weight", None), ("bias", None), ("stride", 1), ("padding", 0),
                              ("dilation", 1), ("groups", 1))
    )  # fmt: skip
    constants = [value for value in (weight, bias) if isinstance(value, fx.Node)]
    if any(value.op != "get_attr" for value in constants):
        return WEIGHTS_ARE_INPUTS
    weight_value = fetch_attr(gm, weight.target)
    if not isinstance(weight_value, torch.Tensor) or weight_value.dim() != 4 or weight_value.layout != torch.strided:
        return None  # not a 2-D convolution (or already lowered)
    if isinstance(padding, str):
        return UNSUPPORTED_PADDING
    bias_value = fetch_attr(gm, bias.target) if isinstance(bias, fx.Node) else None
    return Convolution(node, x, weight_value, bias_value, pair(stride), pair(padding), pair(dilation), groups,
                       tuple(constants))  # fmt: skip


def match_convolution(gm: fx.GraphModule, node: fx.Node, modules: dict[str, nn.Module]) -> Convolution | str | None:
    """Recognise a 2-D convolution with constant weights, in any dialect.

    Returns:
        A :class:`Convolution`; a reason (one of the module's constants) when ``node`` is a 2-D
        convolution that cannot be lowered whatever its inputs (weights that are graph inputs, a
        padding mode or string oneDNN does not take); None when ``node`` is not a 2-D convolution.
    """
    if node.op == "call_module":
        module = modules[node.target]
        if not isinstance(module, nn.Conv2d):
            return None
        if module.padding_mode != "zeros" or isinstance(module.padding, str):
            return UNSUPPORTED_PADDING
        return Convolution(node, call_input(node), module.weight, module.bias, pair(module.stride),
                           pair(module.padding), pair(module.dilation), module.groups,
                           training=module.training)  # fmt: skip
    if node.op == "call_function":
        return _function_convolution(gm, node)
    return None


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
        self.lowered.clear()
        self.skipped.clear()
        self.unfused.clear()
        if not torch.backends.mkldnn.is_available():
            return unchanged(graph_module, NO_ONEDNN)
        if self.example_inputs is None:
            return unchanged(graph_module, NO_EXAMPLE_INPUTS)
        tensors = observe_tensors(graph_module, self.example_inputs)
        modules = dict(graph_module.named_modules())
        for node in list(graph_module.graph.nodes):
            conv = match_convolution(graph_module, node, modules)
            if conv is None:
                continue
            reason = conv if isinstance(conv, str) else self.refusal(conv, tensors)
            if reason is not None:
                self.skipped[reason] += 1
                continue
            self._lower(graph_module, conv, modules, tensors)
        if not self.lowered:
            return unchanged(graph_module, self.why_unchanged())
        graph_module.delete_all_unused_submodules()
        graph_module.graph.lint()
        graph_module.recompile()
        return PassResult(graph_module, True)

    @staticmethod
    def refusal(conv: Convolution, tensors: dict[fx.Node, TensorInfo]) -> str | None:
        """Why ``conv`` must stay a plain convolution (None when it may be lowered), from its observed tensors."""
        if conv.training:
            return TRAINING
        parameters = [conv.weight] + ([conv.bias] if conv.bias is not None else [])
        if torch.is_grad_enabled() and any(p.requires_grad for p in parameters):
            return AUTOGRAD
        x, out = tensors.get(conv.x), tensors.get(conv.node)
        if x is None or out is None:
            return NOT_RUN
        if any(device.type != "cpu" for device in (x.device, out.device, *(p.device for p in parameters))):
            return NOT_CPU
        if x.dtype not in onednn_dtypes() or any(p.dtype != x.dtype for p in parameters):
            return f"{UNSUPPORTED_DTYPE} ({str(x.dtype).removeprefix('torch.')})"
        if not out.is_channels_last():
            return NOT_CHANNELS_LAST
        return None

    def _sum_after(self, conv: Convolution, modules: dict[str, nn.Module], tensors: dict[fx.Node, TensorInfo]):
        """``(add node, other operand)`` when the convolution's only user adds a same-shaped tensor to it."""
        add = next(iter(conv.node.users))
        name = op_name(add, modules)
        if name is None or name.name not in ("add", "iadd") or add.op == "call_module":
            return None
        operands = binary_operands(add)
        if operands is None or call_argument(add, "alpha", 1) != 1:
            self.unfused[NOT_A_PLAIN_ADD] += 1
            return None
        first, second = operands
        if (first is conv.node) == (second is conv.node):
            return None  # conv(x) + conv(x), or the conv is not an operand (a keyword)
        other = second if first is conv.node else first
        in_place = name.in_place or name.name == "iadd"
        if in_place and first is not conv.node:
            self.unfused[WRITES_OTHER_OPERAND] += 1
            return None
        out, other_value = tensors.get(conv.node), tensors.get(other) if isinstance(other, fx.Node) else None
        if other_value is None or (other_value.shape, other_value.dtype, other_value.device) != (
            out.shape,
            out.dtype,
            out.device,
        ):
            self.unfused[NOT_A_PLAIN_ADD] += 1
            return None
        return add, other

    def _lower(
        self, gm: fx.GraphModule, conv: Convolution, modules: dict[str, nn.Module], tensors: dict[fx.Node, TensorInfo]
    ) -> None:
        """Replace ``conv`` (and the ReLU or add (+ReLU) it feeds, where safe) by one oneDNN node."""
        graph = gm.graph
        users = list(conv.node.users)
        # What the fused node replaces, from the convolution to the node whose value it computes.
        absorbed, form, other = [conv.node], CONV, None
        if len(users) == 1 and is_relu_of(users[0], conv.node, op_name(users[0], modules)):
            absorbed, form = [conv.node, users[0]], CONV_RELU
        elif len(users) == 1 and (found := self._sum_after(conv, modules, tensors)) is not None:
            add, other = found
            absorbed, form = [conv.node, add], CONV_ADD
            add_users = list(add.users)
            if len(add_users) == 1 and is_relu_of(add_users[0], add, op_name(add_users[0], modules)):
                absorbed, form = [conv.node, add, add_users[0]], CONV_ADD_RELU
            elif any(is_relu_of(user, add, op_name(user, modules)) for user in add_users):
                self.unfused[SUM_SHARED] += 1
        elif len(users) > 1:
            self.unfused[CONV_OUTPUT_SHARED] += 1
        last = absorbed[-1]

        input_size = list(tensors[conv.x].shape)
        packed = PACK_WEIGHT(conv.weight.detach(), conv.padding, conv.stride, conv.dilation, conv.groups, input_size)
        with graph.inserting_before(conv.node):
            weight = graph.get_attr(add_attribute(gm, f"{conv.node.name}_onednn_weight", packed))
            bias = None
            if conv.bias is not None:
                bias = graph.get_attr(add_attribute(gm, f"{conv.node.name}_onednn_bias", conv.bias.detach()))
        with graph.inserting_before(last):
            if other is None:
                attr = "relu" if form == CONV_RELU else "none"
                fused = graph.call_function(CONV_POINTWISE, (conv.x, weight, bias, *conv.arguments(), attr, [], ""))
            else:
                unary = "relu" if form == CONV_ADD_RELU else None
                fused = graph.call_function(
                    CONV_BINARY, (conv.x, other, weight, bias, *conv.arguments(), "add", None, unary, [], "")
                )
        fused.meta.update(last.meta)
        tensors[fused] = tensors[last]  # later convolutions may read it as their input or other operand
        last.replace_all_uses_with(fused)
        for node in reversed(absorbed):
            graph.erase_node(node)
        for constant in conv.constants:
            if not constant.users:
                graph.erase_node(constant)
        self.lowered[form] += 1


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
