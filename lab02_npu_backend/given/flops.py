"""What a graph node costs in arithmetic: a FLOP count for every op that computes, wherever it runs.

Coverage by FLOPs is only honest if every op that does arithmetic counts. PyTorch's own
``FlopCounterMode`` counts matrix products and convolutions, and attention only in its GPU forms:
on CPU, ``scaled_dot_product_attention`` (``_scaled_dot_product_flash_attention_for_cpu``) counts 0,
and so does every elementwise op. A backend that left attention on the CPU would still report 100%
of the FLOPs on the NPU. So this module counts the aten ops a node dispatches to (on fake tensors:
nothing is computed), with one cost model:

- matrix products and convolutions: PyTorch's formulas (2 FLOPs per multiply-add);
- attention, every form: its two matrix products (``2·B·H·L·S·(E + Ev)``) plus
  :data:`ATTENTION_SCORE_FLOPS` per score (scale, softmax; one more with a mask);
- an elementwise (``pointwise``) op: 1 FLOP per output element, whatever the function (an add and an
  ``exp`` alike: a lower bound, the same for the NPU and the CPU side);
- a reduction: 1 FLOP per input element; fused kernels by what they consist of
  (:data:`FLOPS_PER_ELEMENT`: softmax 5, layer norm 7, ...);
- data movement counts 0: views, copies, ``cat``, dtype conversions, ``embedding``/``gather``/
  indexing (a table lookup reads, it does not compute), tensor creation but ``arange``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

aten = torch.ops.aten

#: Per score of an attention: scale 1 + softmax 5 (the mask's add is one more).
ATTENTION_SCORE_FLOPS = 6
#: Fused kernels, in FLOPs per element of their first input (what their decomposition computes).
FLOPS_PER_ELEMENT: dict[Any, int] = {
    aten._softmax: 5,  # max, subtract, exp, sum, divide
    aten._log_softmax: 5,
    aten.native_layer_norm: 7,  # mean, subtract, square, mean, scale by rsqrt, weight, bias
    aten._fused_rms_norm: 4,  # square, mean, scale by rsqrt, weight
    aten.native_batch_norm: 2,  # eval: x * scale + shift (the per-channel scale and shift: negligible)
    aten._native_batch_norm_legit_no_training: 2,
    aten._native_batch_norm_legit: 2,
    aten.cumsum: 1,
    aten.arange: 1,  # start + i * step (counted on its output)
    aten.max_pool2d_with_indices: 1,  # a comparison per input element
    aten.avg_pool2d: 1,
    aten._adaptive_avg_pool2d: 1,
}
#: Attention ops without a PyTorch formula for their CPU form: (query, key, value) are the first three args.
ATTENTION_OPS = frozenset({aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_attention_math})


def _numel(value: Any) -> int:
    tensor = value[0] if isinstance(value, (tuple, list)) and value else value
    return int(tensor.numel()) if isinstance(tensor, torch.Tensor) else 0


def attention_flops(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, masked: bool) -> int:
    """``softmax(q k^T * scale [+ mask]) v`` (grouped-query attention included: k/v heads broadcast)."""
    *batch, length, embed = query.shape
    scores = int(torch.Size(batch).numel()) * length * key.shape[-2]
    return 2 * scores * (embed + value.shape[-1]) + scores * (ATTENTION_SCORE_FLOPS + masked)


def op_flops(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    """FLOPs of one aten op call (see the module docstring for the cost model)."""
    packet = func.overloadpacket
    if packet in ATTENTION_OPS:
        masked = kwargs.get("attn_mask") is not None or (len(args) > 3 and isinstance(args[3], torch.Tensor))
        return attention_flops(*args[:3], masked=masked)
    if packet in flop_registry:
        return int(flop_registry[packet](*args, **kwargs, out_val=out))
    if packet in FLOPS_PER_ELEMENT:
        counted = out if packet is aten.arange else args[0]
        return FLOPS_PER_ELEMENT[packet] * _numel(counted)
    if torch.Tag.pointwise in func.tags:
        return _numel(out)
    if torch.Tag.reduction in func.tags:
        return _numel(args[0])
    return 0


class FlopCount(TorchDispatchMode):
    """Counts :func:`op_flops` of every aten op run inside it (use it inside a ``FakeTensorMode``)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.flops += op_flops(func, args, kwargs, out)
        return out
