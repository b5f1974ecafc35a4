"""The oneDNN operators, reasons and convolution record of lab 1's optional step 10 (harness: not edited).

``onednn_lowering.py`` (the file step 10 edits) imports everything here: the fused operators it
emits and their argument orders, the reasons it gives when it leaves a convolution (or a ReLU, or
an add) alone, which dtypes oneDNN takes on this CPU, :class:`Convolution`, a 2-D convolution
described the same way whatever dialect it was found in, :func:`is_relu_of`, and :class:`OneDNNLoweringBase`, what the
pass class is given (its counters, why it changed nothing, how it joins a pipeline).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.fx.passes.infra.pass_base import PassBase

from lab01_fx_passes.given.graph_tools import OpName, call_input
from lab01_fx_passes.given.interface import NO_CONVOLUTIONS, WEIGHTS_ARE_INPUTS  # noqa: F401  (shared with steps 1 and 6)
from lab01_fx_passes.given.pass_report import explain_skips

aten = torch.ops.aten
mkldnn = torch.ops.mkldnn
#: The fused operators this pass emits (their schemas: ``torch.ops.mkldnn._convolution_pointwise``).
#: ``CONV_POINTWISE(x, weight, bias, padding, stride, dilation, groups, attr, scalars, algorithm)``
CONV_POINTWISE = mkldnn._convolution_pointwise.default
#: ``CONV_BINARY(x, other, weight, bias, padding, stride, dilation, groups, binary_attr, alpha,
#: unary_attr, unary_scalars, unary_algorithm)``: ``unary(conv(x) <binary> other)``.
CONV_BINARY = mkldnn._convolution_pointwise.binary
#: Pre-packs a weight: ``(weight, padding, stride, dilation, groups, input_size)`` -> an opaque oneDNN tensor.
PACK_WEIGHT = mkldnn._reorder_convolution_weight

#: The 2-D convolutions the pass lowers, per dialect (``call_module`` ``nn.Conv2d`` as well).
ATEN_CONVOLUTION = aten.convolution.default
ATEN_CONV2D = aten.conv2d.default
TORCH_CONV2D = torch.conv2d

#: What a lowered convolution absorbed (the keys of :attr:`OneDNNLowering.lowered`).
CONV, CONV_RELU, CONV_ADD, CONV_ADD_RELU = "conv", "conv+relu", "conv+add", "conv+add+relu"

#: Why a convolution was left alone (the keys of :attr:`OneDNNLowering.skipped`; also
#: :data:`~lab01_fx_passes.given.interface.WEIGHTS_ARE_INPUTS` and
#: :data:`~lab01_fx_passes.given.interface.NO_CONVOLUTIONS`).
NO_EXAMPLE_INPUTS = "no example inputs: the input shapes and layouts are unknown (OneDNNLowering(example_inputs))"
NO_ONEDNN = "this PyTorch has no oneDNN (torch.backends.mkldnn.is_available() is False)"
TRAINING = "its module is in training mode: the fused kernels have no backward"
AUTOGRAD = (
    "its weight requires grad and grad mode is on: the fused kernels have no backward (lower under torch.no_grad())"
)
NOT_CPU = "its tensors are not on the CPU"
UNSUPPORTED_DTYPE = "oneDNN does not take its dtype on this CPU"
NOT_CHANNELS_LAST = "its output is not channels-last: run convert_to_channels_last first (this pass keeps layouts)"
UNSUPPORTED_PADDING = "padding mode or padding string that oneDNN's kernel does not take"
NOT_RUN = "the example run did not reach it"

#: Why a ReLU or an add was not fused into the convolution before it (the keys of :attr:`OneDNNLowering.unfused`).
CONV_OUTPUT_SHARED = "the convolution's output has another user"
SUM_SHARED = "the sum has another user besides the ReLU"
WRITES_OTHER_OPERAND = "the add writes its other operand in place"
NOT_A_PLAIN_ADD = "the add broadcasts, scales (alpha) or adds a non-tensor"


def onednn_dtypes() -> tuple[torch.dtype, ...]:
    """The dtypes oneDNN's convolution takes on this CPU: float32, and bfloat16/float16 where supported."""
    dtypes = [torch.float32]
    if mkldnn._is_mkldnn_bf16_supported():
        dtypes.append(torch.bfloat16)
    if mkldnn._is_mkldnn_fp16_supported():
        dtypes.append(torch.float16)
    return tuple(dtypes)


def is_relu_of(node: fx.Node, value: fx.Node, op: OpName | None) -> bool:
    """Whether ``node`` applies ReLU (in any dialect, in place or not) to ``value``.

    Args:
        node, value: two nodes of the graph.
        op: what ``op_name(node, modules)`` (step 0) calls ``node``: pass its answer.
    """
    return op is not None and op.name == "relu" and call_input(node) is value


def pair(value: Any) -> list[int]:
    """``3`` or ``(3,)`` or ``[3, 3]`` -> ``[3, 3]`` (Dynamo and aten may give a single value for both sides)."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return values * 2 if len(values) == 1 else values


@dataclass
class Convolution:
    """A 2-D convolution found in a graph, in dialect-neutral terms.

    Attributes:
        node: the convolution's node.
        x: the node of its input.
        weight, bias: the tensors (``bias`` may be None).
        stride, padding, dilation: two ints each; ``groups`` an int.
        constants: the ``get_attr`` nodes of ``weight`` and ``bias`` (erased if unused afterwards).
        training: whether its module is in training mode (``call_module`` convolutions only).
    """

    node: fx.Node
    x: fx.Node
    weight: torch.Tensor
    bias: torch.Tensor | None
    stride: list[int]
    padding: list[int]
    dilation: list[int]
    groups: int
    constants: tuple[fx.Node, ...] = ()
    training: bool = False

    def arguments(self) -> tuple[list[int], list[int], list[int], int]:
        """``(padding, stride, dilation, groups)``: the order oneDNN's operators take them in."""
        return self.padding, self.stride, self.dilation, self.groups


class OneDNNLoweringBase(PassBase):
    """What ``OneDNNLowering`` is given: its name, its counters, :meth:`why_unchanged`, and how it joins a pipeline.

    Attributes:
        example_inputs: what the graph is called with (a tuple), or None.
        lowered: what each lowered convolution absorbed (:data:`CONV`, ...) -> how many.
        skipped: reason -> how many convolutions were left alone for it.
        unfused: reason -> how many ReLUs or adds stayed separate after a lowered convolution.
    """

    name = "lower_to_onednn"

    def __init__(self, example_inputs: Sequence[Any] | None) -> None:
        super().__init__()
        self.example_inputs = None if example_inputs is None else tuple(example_inputs)
        self.lowered: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.unfused: Counter[str] = Counter()

    @property
    def lowered_count(self) -> int:
        """How many convolutions the last call lowered, whatever they absorbed."""
        return sum(self.lowered.values())

    def why_unchanged(self) -> str:
        """Why no convolution was lowered: each reason with its count, or :data:`NO_CONVOLUTIONS`."""
        return explain_skips(self.skipped, "convolution", NO_CONVOLUTIONS)

    @classmethod
    def appended_to(cls, manager: Any, example_inputs: Sequence[Any] | None) -> Any:
        """``manager``'s passes, then this lowering on ``example_inputs``: a new pass manager of the same
        class, validating on the same inputs with the same tolerance factor."""
        return type(manager)(
            [*manager.passes, cls(example_inputs)],
            example_inputs=example_inputs,
            tolerance_factor=manager.tolerance_factor,
        )
