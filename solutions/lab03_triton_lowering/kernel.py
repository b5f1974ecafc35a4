"""The fused LayerNorm + GELU Triton kernel, and the launcher that sizes and starts it.

Eager PyTorch runs ``F.gelu(F.layer_norm(x))`` as two kernels: LayerNorm reads ``x`` and writes a
normalised copy to DRAM, GELU reads that copy back and writes the result. For a memory-bound op
that is four passes over the tensor. This kernel does the same arithmetic in one pass: each
program loads one row into registers, computes its mean and variance in fp32, normalises, applies
the optional affine and GELU, and stores the row once (two passes: one read, one write).

Programming model in one paragraph: a Triton *program* is one instance of the kernel (a CUDA
thread block). ``tl.program_id(0)`` says which row it owns; ``tl.arange(0, BLOCK_SIZE)`` is a
*block* of column indices that the compiler spreads over the program's warps, so one
``tl.load`` of a block becomes coalesced, vectorised loads by 32 threads per warp. Block sizes are
compile-time constants (``tl.constexpr``) and powers of two, so a row whose length is not a power
of two is handled with a *mask*: lanes past the end neither load nor store.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch.library import wrap_triton

#: The largest block one program holds in registers. Rows up to this length are read exactly once;
#: longer rows are processed in a loop of blocks (a statistics pass, then a normalise pass).
MAX_BLOCK_SIZE = 8192
#: The GELU forms the kernel implements, named as ``F.gelu``'s ``approximate`` argument.
GELU_APPROXIMATIONS = ("none", "tanh")


@triton.jit
def _tanh(z):
    # tanh(z) = sign(z) * (1 - e^(-2|z|)) / (1 + e^(-2|z|)). Written with exp because the
    # interpreter has no libdevice.tanh; the exponent is never positive, so exp cannot overflow.
    e = tl.exp(-2.0 * tl.abs(z))
    magnitude = (1.0 - e) / (1.0 + e)
    return tl.where(z >= 0, magnitude, -magnitude)


@triton.jit
def _affine_gelu(normed, cols, mask, weight_ptr, bias_ptr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                 APPROXIMATE_TANH: tl.constexpr):
    """``gelu(normed * weight + bias)`` on one block, in fp32."""
    y = normed
    if HAS_WEIGHT:  # constexpr: the branch not taken is not compiled at all
        y = y * tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y = y + tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    # The constants are literals on purpose: a kernel may not read a plain Python global (the
    # interpreter allows it, the GPU compiler does not).
    if APPROXIMATE_TANH:  # 0.79788... = sqrt(2 / pi)
        return 0.5 * y * (1.0 + _tanh(0.7978845608028654 * (y + 0.044715 * y * y * y)))
    return 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))  # 0.70710... = 1 / sqrt(2)


@triton.jit
def layernorm_gelu_kernel(
    x_ptr,  # [n_rows, n_cols] input; columns contiguous, rows x_row_stride elements apart
    weight_ptr,  # [n_cols] or None
    bias_ptr,  # [n_cols] or None
    out_ptr,  # [n_rows, n_cols] output, contiguous
    x_row_stride,
    out_row_stride,
    n_cols,
    eps,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    APPROXIMATE_TANH: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    SINGLE_TILE: tl.constexpr,
):
    """One program normalises one row: ``out[row] = gelu(layer_norm(x[row]) * weight + bias)``."""
    # int64 row offsets: n_rows * n_cols can exceed 2**31 for real activations.
    row = tl.program_id(0).to(tl.int64)
    # A Python float arrives as fp32 from an eager launch but as fp64 from Inductor's generated
    # code; without this cast the whole row would be computed in (slow) fp64 there.
    eps = tl.cast(eps, tl.float32)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride

    if SINGLE_TILE:
        # The whole row fits in one block: load it once and keep it in registers.
        cols = tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        # Masked lanes hold 0, and 0 - mean is not 0: zero them so they add nothing to the variance.
        centered = tl.where(mask, x - mean, 0.0)
        var = tl.sum(centered * centered, axis=0) / n_cols
        rstd = tl.rsqrt(var + eps)
        y = _affine_gelu(centered * rstd, cols, mask, weight_ptr, bias_ptr, HAS_WEIGHT, HAS_BIAS, APPROXIMATE_TANH)
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        # The row is longer than a block. Pass 1 accumulates sums of (x - shift) lane by lane;
        # shifting by the row's first element keeps sum-of-squares from cancelling when the mean
        # is large compared with the spread. Pass 2 re-reads the row (from L2 on a GPU: a program's
        # row was just read) to normalise and store it.
        shift = tl.load(x_row).to(tl.float32)
        acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        acc_sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_SIZE):
            cols = start + tl.arange(0, BLOCK_SIZE)
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - shift, 0.0)
            acc += d
            acc_sq += d * d
        shifted_mean = tl.sum(acc, axis=0) / n_cols
        var = tl.maximum(tl.sum(acc_sq, axis=0) / n_cols - shifted_mean * shifted_mean, 0.0)
        mean = shift + shifted_mean
        rstd = tl.rsqrt(var + eps)
        for start in range(0, n_cols, BLOCK_SIZE):
            cols = start + tl.arange(0, BLOCK_SIZE)
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            y = _affine_gelu((x - mean) * rstd, cols, mask, weight_ptr, bias_ptr, HAS_WEIGHT, HAS_BIAS,
                             APPROXIMATE_TANH)
            tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@dataclass(frozen=True)
class LaunchConfig:
    """How one row is tiled: the block width, the warps per program, and whether one block holds the row."""

    block_size: int
    num_warps: int
    single_tile: bool


def launch_config(n_cols: int) -> LaunchConfig:
    """Choose the block and warp count for rows of ``n_cols`` elements.

    The block is the next power of two (a Triton requirement) so a row fits in one block when it
    can, capped at :data:`MAX_BLOCK_SIZE` to bound registers per thread. Warps grow with the block
    so each thread holds ~8-16 elements: enough for 128-bit vector loads, few enough to avoid
    register spills. (The same rule as Triton's LayerNorm tutorial, allowing 16 warps for 4-8K rows.)
    """
    if n_cols < 1:
        raise ValueError(f"rows must have at least one element, got n_cols={n_cols}")
    block_size = min(triton.next_power_of_2(n_cols), MAX_BLOCK_SIZE)
    num_warps = min(max(block_size // 256, 1), 16)
    return LaunchConfig(block_size=block_size, num_warps=num_warps, single_tile=n_cols <= block_size)


def layernorm_gelu_forward(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, approximate: str
) -> torch.Tensor:
    """Allocate the output and launch :func:`layernorm_gelu_kernel`, one program per row.

    Arguments are trusted (the public ``layernorm_gelu`` validates them). Any leading shape is
    flattened into rows; a row layout the kernel cannot address (last dimension not contiguous)
    is copied first. Returns a new contiguous tensor shaped and typed like ``x``.

    The launch goes through ``wrap_triton``: run eagerly it is a plain kernel launch, and traced
    by ``make_fx`` (as Inductor's pattern replacement does on CUDA) it is recorded as a
    ``triton_kernel_wrapper`` node, so Inductor compiles and schedules the kernel itself.
    """
    if x.numel() == 0:  # zero rows or zero columns: nothing to launch
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n_cols = x.shape[-1]
    rows = x.reshape(-1, n_cols)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty((rows.shape[0], n_cols), dtype=x.dtype, device=x.device)
    config = launch_config(n_cols)
    wrap_triton(layernorm_gelu_kernel)[(rows.shape[0],)](
        rows,
        weight,
        bias,
        out,
        rows.stride(0),
        out.stride(0),
        n_cols,
        eps,
        HAS_WEIGHT=weight is not None,
        HAS_BIAS=bias is not None,
        APPROXIMATE_TANH=approximate == "tanh",
        BLOCK_SIZE=config.block_size,
        SINGLE_TILE=config.single_tile,
        num_warps=config.num_warps,
    )
    return out.view(x.shape)
