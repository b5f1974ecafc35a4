"""Extension: FP8 input. LayerNorm + GELU of a per-tensor-scaled FP8 tensor, written in half precision.

FP8 halves the bytes of half precision: an activation stored as ``float8_e4m3fn`` (or ``float8_e5m2``)
is read at one byte per value, which for a memory-bound kernel like this one is half the time. An
8-bit float has few digits (e4m3fn: 3 mantissa bits, values up to 448), so a tensor is stored
*scaled*: each stored value ``q`` stands for ``q * scale``, with one fp32 ``scale`` per tensor chosen
so that the tensor's largest value lands near the format's largest (torchao's float8 training and
``torch._scaled_mm`` use the same convention).

The contract of :func:`layernorm_gelu_fp8`:

- compute ``gelu(layer_norm(x.float() * scale, weight, bias, eps))`` with every statistic in fp32, and
  round once, to ``out_dtype`` (``float16`` or ``bfloat16``), on the store;
- read ``scale`` *in the kernel*: it is a one-element fp32 tensor on ``x``'s device, and reading it on
  the host (``scale.item()``) would make the CPU wait for the GPU on every call (and break CUDA graphs);
- the tolerances (against a float64 computation of the same formula, rounded to ``out_dtype``): one
  unit in the last place of ``out_dtype``, ``rtol`` 2**-10 for float16 and 2**-7 for bfloat16.

**The trap: LayerNorm forgets scales.** ``layer_norm(s * x)`` is ``layer_norm(x)`` with ``eps / s**2``
in place of ``eps``: the mean and the spread scale alike, so a kernel that ignores ``scale`` is right
whenever the variance dwarfs ``eps``, which it does for most test data. It is wrong where the real
values are small (``scale`` 1e-3 on values near 1: a variance of 1e-6 against eps 1e-5), and for a
negative scale (the sign flips the normalised row). Apply the scale to the values, before the
statistics.

The reference extends the step-1 kernel with one constexpr flag (``HAS_SCALE``): the loads multiply
by the scale when it is set, and the plain kernel compiles exactly as before.
"""

from __future__ import annotations

import torch

from lab03_triton_lowering.given.interface import FP8_DTYPES, FP8_OUT_DTYPES

from .kernel import layernorm_gelu_forward
from .op import check_arguments


def check_fp8_arguments(x: torch.Tensor, scale: torch.Tensor, out_dtype: torch.dtype) -> None:
    """Raise a clear error, naming the argument, for what :func:`layernorm_gelu_fp8` does not take.

    Raises:
        TypeError: ``x`` is not a tensor of an FP8 dtype (:data:`FP8_DTYPES`), ``scale`` not an fp32
            tensor, or ``out_dtype`` not one of :data:`FP8_OUT_DTYPES`.
        ValueError: ``scale`` does not hold exactly one element, or is not on ``x``'s device.
    """
    if not isinstance(x, torch.Tensor) or x.dtype not in FP8_DTYPES:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"x must be an FP8 tensor ({', '.join(map(str, FP8_DTYPES))}), got {got}")
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        got = scale.dtype if isinstance(scale, torch.Tensor) else type(scale).__name__
        raise TypeError(f"scale must be a float32 tensor of one element, got {got}")
    if scale.numel() != 1:
        raise ValueError(f"scale must hold one element (a per-tensor scale), got shape {tuple(scale.shape)}")
    if scale.device != x.device:
        raise ValueError(f"scale is on {scale.device} but x is on {x.device}")
    if out_dtype not in FP8_OUT_DTYPES:
        raise TypeError(f"out_dtype={out_dtype}: expected one of {', '.join(map(str, FP8_OUT_DTYPES))}")


def layernorm_gelu_fp8(
    x: torch.Tensor,
    scale: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    approximate: str = "none",
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """``F.gelu(F.layer_norm(x.float() * scale, ...), approximate).to(out_dtype)`` in one kernel (the
    module docstring's contract); ``weight`` and ``bias`` as for ``layernorm_gelu``, any float dtype."""
    check_fp8_arguments(x, scale, out_dtype)
    # The rest as layernorm_gelu checks it, on a stand-in of x's shape and device (no memory: a 0-d expand).
    check_arguments(torch.empty((), device=x.device).expand(x.shape), weight, bias, eps, approximate)
    return layernorm_gelu_forward(x, weight, bias, float(eps), approximate, scale=scale, out_dtype=out_dtype)
