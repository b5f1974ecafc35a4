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

Two ways to write it: extend your step-1 kernel with one constexpr flag (say ``HAS_SCALE``: the loads
multiply by the scale when it is set, and the plain kernel compiles exactly as before; the launcher
then takes ``scale`` and ``out_dtype``), or write a second kernel here. The first keeps one kernel.
"""

from __future__ import annotations

import torch

from lab03_triton_lowering.given.interface import FP8_DTYPES, FP8_OUT_DTYPES  # noqa: F401  (what the step accepts)


def check_fp8_arguments(x: torch.Tensor, scale: torch.Tensor, out_dtype: torch.dtype) -> None:
    """Raise a clear error, naming the argument, for what :func:`layernorm_gelu_fp8` does not take.

    Raises:
        TypeError: ``x`` is not a tensor of an FP8 dtype (:data:`FP8_DTYPES`), ``scale`` not an fp32
            tensor, or ``out_dtype`` not one of :data:`FP8_OUT_DTYPES`.
        ValueError: ``scale`` does not hold exactly one element, or is not on ``x``'s device.
    """
    # TODO(step 8): the checks, each message naming its argument (x, scale, out_dtype).
    raise NotImplementedError("TODO(step 8): check_fp8_arguments")


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
    module docstring's contract); ``weight`` and ``bias`` as for ``layernorm_gelu``, any float dtype.

    Returns a new contiguous tensor of ``x``'s shape and dtype ``out_dtype``.
    """
    # TODO(step 8): check the arguments (check_fp8_arguments, then the rest as op.check_arguments does),
    # then launch a kernel that dequantizes on load.
    # guidance: begin
    # 1. check_fp8_arguments(x, scale, out_dtype); weight, bias, eps and approximate as check_arguments
    #    checks them (it wants a tensor of x's shape and device: torch.empty((), device=x.device).expand(x.shape)
    #    costs no memory).
    # 2. The kernel: tl.load(...).to(tl.float32) already widens an FP8 value exactly; multiply by the scale
    #    (tl.load(scale_ptr), once per program) before any statistic; allocate the output in out_dtype (the
    #    store's .to(out_ptr.dtype.element_ty) then rounds once, to it).
    # 3. Rows longer than a block go through the same loop as in step 2: dequantize in both passes.
    # guidance: end
    raise NotImplementedError("TODO(step 8): layernorm_gelu_fp8")
