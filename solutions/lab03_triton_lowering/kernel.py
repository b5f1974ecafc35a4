"""The fused LayerNorm + GELU Triton kernel, and the launcher that sizes and starts it.

Eager PyTorch runs ``F.gelu(F.layer_norm(x))`` as two kernels: LayerNorm reads ``x`` and writes a
normalised copy to DRAM, GELU reads that copy back and writes the result. For a memory-bound op
that is four passes over the tensor. This kernel does the same arithmetic in one pass: each
program loads a few rows into registers, computes their mean and variance in fp32, normalises,
applies the optional affine and GELU, and stores the rows once (two passes: one read, one write).

Programming model in one paragraph: a Triton *program* is one instance of the kernel (a CUDA
thread block). ``tl.program_id(0)`` says which rows it owns; ``tl.arange(0, BLOCK_SIZE)`` is a
*block* of column indices that the compiler spreads over the program's warps, so one
``tl.load`` of a block becomes coalesced, vectorised loads by 32 threads per warp. Block sizes are
compile-time constants (``tl.constexpr``) and powers of two, so a row whose length is not a power
of two is handled with a *mask*: lanes past the end neither load nor store.

Launches go through :func:`labkit.triton_env.kernel_for`, which picks the kernel's form for the
tensors' device: compiled (and traceable by Inductor) on CUDA, Triton's interpreter on CPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from lab03_triton_lowering.given.interface import GELU_APPROXIMATIONS  # noqa: F401  (op.py and lowering.py read it here)
from labkit.triton_env import kernel_for

#: The widest block: rows up to this length are held in registers and read once; longer rows are
#: processed in a loop of blocks this wide (the second pass re-reads the row from L2). Measured on an
#: H200, a 4096-wide loop beat one 8192- or 16384-wide block at every longer d (registers spill, fewer
#: programs fit on an SM).
MAX_BLOCK_SIZE = 4096
#: Rows per program and warps per program for a row held in one block, by block width: the fastest
#: configuration of ``python -m lab03_triton_lowering.given.benchmark --tune`` on an H200 (float16, 65536
#: rows). Narrower blocks take :data:`NARROW_BLOCK_ELEMENTS` elements per program with 4 warps.
SINGLE_TILE_LAUNCH = {4096: (2, 8), 2048: (2, 4)}
NARROW_BLOCK_ELEMENTS = 8192
#: Short rows still leave enough programs to fill the GPU: 65536 rows of 100 make 4096 programs.
MAX_ROWS_PER_PROGRAM = 16


@triton.jit
def _tanh(z):
    # tanh(z) = sign(z) * (1 - e^(-2|z|)) / (1 + e^(-2|z|)). Written with exp because the
    # interpreter has no libdevice.tanh; the exponent is never positive, so exp cannot overflow.
    e = tl.exp(-2.0 * tl.abs(z))
    magnitude = (1.0 - e) / (1.0 + e)
    return tl.where(z >= 0, magnitude, -magnitude)


@triton.jit
def _erf(z, FAST_ERF: tl.constexpr):
    if FAST_ERF:
        # Abramowitz & Stegun 7.1.26: |error| <= 1.5e-7 over the whole line, one exp and one
        # division, no branches (libdevice's erf evaluates two polynomials and picks one).
        a = tl.abs(z)
        t = 1.0 / (1.0 + 0.3275911 * a)
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        r = 1.0 - poly * tl.exp(-a * a)
        return tl.where(z >= 0, r, -r)
    else:
        return tl.erf(z)


@triton.jit
def _gelu(y, APPROXIMATE_TANH: tl.constexpr, FAST_ERF: tl.constexpr):
    """GELU of an fp32 block: ``0.5 * y * (1 + erf(y / sqrt 2))`` or the tanh polynomial."""
    # The constants are literals on purpose: a kernel may not read a plain Python global (the
    # interpreter allows it, the GPU compiler does not).
    half_y = 0.5 * y
    if APPROXIMATE_TANH:  # 0.79788... = sqrt(2 / pi)
        inner = _tanh(0.7978845608028654 * (y + 0.044715 * y * y * y))
    else:  # 0.70710... = 1 / sqrt(2)
        inner = _erf(y * 0.7071067811865476, FAST_ERF)
    return half_y + half_y * inner


@triton.jit
def _load_fp32(ptrs, mask, x_scale, HAS_SCALE: tl.constexpr, MASKED: tl.constexpr):
    """A block of ``x`` in fp32 (masked lanes 0); an FP8 ``x`` is dequantized here, times its scale, so
    every statistic is of the real values (the optional step 8)."""
    if MASKED:
        v = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    else:
        v = tl.load(ptrs).to(tl.float32)
    if HAS_SCALE:
        v = v * x_scale
    return v


@triton.jit
def _affine_gelu_store(
    normed,
    out_ptrs,
    cols,
    col_mask,
    mask,
    weight_ptr,
    bias_ptr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    APPROXIMATE_TANH: tl.constexpr,
    FAST_ERF: tl.constexpr,
    MASKED: tl.constexpr,
):
    """``out = gelu(normed * weight + bias)`` for a [ROWS, BLOCK] block, rounded once to the output dtype."""
    y = normed
    if HAS_WEIGHT:  # constexpr: the branch not taken is not compiled at all
        y = y * tl.load(weight_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS:
        y = y + tl.load(bias_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    y = _gelu(y, APPROXIMATE_TANH, FAST_ERF).to(out_ptrs.dtype.element_ty)
    if MASKED:
        tl.store(out_ptrs, y, mask=mask)
    else:
        tl.store(out_ptrs, y)


@triton.jit
def layernorm_gelu_kernel(
    x_ptr,  # [n_rows, n_cols] input; columns contiguous, rows x_row_stride elements apart
    weight_ptr,  # [n_cols] or None
    bias_ptr,  # [n_cols] or None
    out_ptr,  # [n_rows, n_cols] output, contiguous (its dtype may differ from x's: FP8 in, fp16 out)
    scale_ptr,  # one fp32 element: x's dequantization scale (FP8 input), or None
    n_rows,
    n_cols,
    x_row_stride,
    out_row_stride,
    eps,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    APPROXIMATE_TANH: tl.constexpr,
    HAS_SCALE: tl.constexpr,  # x is FP8: each value is x * scale
    BLOCK_SIZE: tl.constexpr,  # columns per block, a power of two
    ROWS_PER_PROGRAM: tl.constexpr,  # rows one program normalises (a power of two)
    NUM_TILES: tl.constexpr,  # blocks per row: 1 keeps the row in registers, more loops over it
    MASKED: tl.constexpr,  # False when every row and column of every program is in bounds
    FAST_ERF: tl.constexpr,
):
    """One program normalises ``ROWS_PER_PROGRAM`` rows: ``out[r] = gelu(layer_norm(x[r]) * weight + bias)``."""
    # A Python float arrives as fp32 from an eager launch but as fp64 from Inductor's generated
    # code; without this cast the whole row would be computed in (slow) fp64 there.
    eps = tl.cast(eps, tl.float32)
    x_scale = 1.0
    if HAS_SCALE:  # read on the device: a host read (scale.item()) would wait for the GPU
        x_scale = tl.load(scale_ptr).to(tl.float32)
    # int64 row offsets: n_rows * n_cols can exceed 2**31 for real activations.
    rows = tl.program_id(0).to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    row_mask = rows < n_rows
    x_rows = x_ptr + rows[:, None] * x_row_stride  # [ROWS, 1] pointers to each row's start
    out_rows = out_ptr + rows[:, None] * out_row_stride
    # Statistics are taken of (x - shift), shift being each row's first element: when the mean is
    # large next to the spread (mean 1000, std 1), sums of raw values lose the digits that matter.
    shift = _load_fp32(x_rows, row_mask[:, None], x_scale, HAS_SCALE, True)  # [ROWS, 1]

    if NUM_TILES == 1:
        # Each row fits one block: load the rows once and keep them in registers. The affine
        # parameters are loaded once per program and shared by its rows.
        cols = tl.arange(0, BLOCK_SIZE)
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        x = _load_fp32(x_rows + cols[None, :], mask, x_scale, HAS_SCALE, MASKED) - shift
        if MASKED:
            # Masked lanes load 0, and 0 - shift is not 0: zero them so they add nothing to the sums.
            x = tl.where(mask, x, 0.0)
        mean = tl.sum(x, axis=1) / n_cols  # of the shifted values
        centered = x - mean[:, None]
        if MASKED:
            centered = tl.where(mask, centered, 0.0)
        var = tl.sum(centered * centered, axis=1) / n_cols
        normed = centered * tl.rsqrt(var + eps)[:, None]
        _affine_gelu_store(
            normed,
            out_rows + cols[None, :],
            cols,
            col_mask,
            mask,
            weight_ptr,
            bias_ptr,
            HAS_WEIGHT,
            HAS_BIAS,
            APPROXIMATE_TANH,
            FAST_ERF,
            MASKED,
        )
    else:
        # The row is longer than a block. Pass 1 accumulates sums of (x - shift) lane by lane;
        # pass 2 re-reads the row (from L2 on a GPU: the program just read it) to normalise and
        # store it. (The loop bound is a constexpr: some interpreter versions cannot loop to a
        # runtime bound.)
        acc = tl.zeros([ROWS_PER_PROGRAM, BLOCK_SIZE], dtype=tl.float32)
        acc_sq = tl.zeros([ROWS_PER_PROGRAM, BLOCK_SIZE], dtype=tl.float32)
        for tile in range(0, NUM_TILES):
            cols = tile * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            d = _load_fp32(x_rows + cols[None, :], mask, x_scale, HAS_SCALE, MASKED) - shift
            if MASKED:
                d = tl.where(mask, d, 0.0)
            acc += d
            acc_sq += d * d
        shifted_mean = tl.sum(acc, axis=1) / n_cols
        var = tl.maximum(tl.sum(acc_sq, axis=1) / n_cols - shifted_mean * shifted_mean, 0.0)
        mean = tl.sum(shift, axis=1) + shifted_mean
        rstd = tl.rsqrt(var + eps)
        for tile in range(0, NUM_TILES):
            cols = tile * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            x = _load_fp32(x_rows + cols[None, :], mask, x_scale, HAS_SCALE, MASKED)
            _affine_gelu_store(
                (x - mean[:, None]) * rstd[:, None],
                out_rows + cols[None, :],
                cols,
                col_mask,
                mask,
                weight_ptr,
                bias_ptr,
                HAS_WEIGHT,
                HAS_BIAS,
                APPROXIMATE_TANH,
                FAST_ERF,
                MASKED,
            )


@dataclass(frozen=True)
class LaunchConfig:
    """How the rows are tiled: block width, rows per program, warps per program (and which erf)."""

    block_size: int
    rows_per_program: int
    num_warps: int
    fast_erf: bool = True

    def num_tiles(self, n_cols: int) -> int:
        """Blocks per row: 1 when the row fits one block (kept in registers), else the loop's length."""
        return triton.cdiv(n_cols, self.block_size)


@functools.lru_cache(maxsize=4096)  # called on every launch: host time counts on small inputs
def launch_config(n_cols: int, n_rows: int = 1 << 16) -> LaunchConfig:
    """Choose block, rows per program and warps for ``n_rows`` rows of ``n_cols`` elements.

    The block is the next power of two (a Triton requirement), capped at :data:`MAX_BLOCK_SIZE`
    (longer rows loop over blocks, one row per program, 4 warps). A row held in one block shares its
    program with a few others, so that each program moves enough bytes to keep loads in flight and
    loads the affine parameters once for several rows; how many, and with how many warps, is the
    measured :data:`SINGLE_TILE_LAUNCH` (about 32 values per thread; measured in float16). At most
    :data:`MAX_ROWS_PER_PROGRAM` rows, and never more rows per program than there are rows.
    """
    if n_cols < 1:
        raise ValueError(f"rows must have at least one element, got n_cols={n_cols}")
    block_size = min(triton.next_power_of_2(n_cols), MAX_BLOCK_SIZE)
    if n_cols > block_size:
        return LaunchConfig(block_size, rows_per_program=1, num_warps=4)
    rows, warps = SINGLE_TILE_LAUNCH.get(block_size, (NARROW_BLOCK_ELEMENTS // block_size, 4))
    rows = min(rows, MAX_ROWS_PER_PROGRAM, triton.next_power_of_2(max(n_rows, 1)))
    return LaunchConfig(block_size, rows_per_program=rows, num_warps=warps)


def layernorm_gelu_forward(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    approximate: str,
    config: LaunchConfig | None = None,
    *,
    scale: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Allocate the output and launch :func:`layernorm_gelu_kernel` over the rows of ``x``.

    Arguments are trusted (the public ``layernorm_gelu`` validates them). Any leading shape is
    flattened into rows; a row layout the kernel cannot address (last dimension not contiguous)
    is copied first, and so are a strided ``weight`` or ``bias`` (the kernel reads them at ``cols``).
    ``config`` overrides :func:`launch_config` (the benchmark's tuning sweep).
    Returns a new contiguous tensor shaped like ``x``, of ``x``'s dtype or ``out_dtype``; with ``scale``
    (FP8 input, step 8), each value of ``x`` is ``x * scale``, the scale read in the kernel.

    The launch goes through ``kernel_for(kernel, device)``: on CUDA, while traced by ``make_fx`` (as
    Inductor's pattern replacement does), that is ``wrap_triton``, so the launch is recorded as a
    ``triton_kernel_wrapper`` node and Inductor compiles the kernel itself; on CPU it is the
    interpreter.
    """
    if x.numel() == 0:  # zero rows or zero columns: nothing to launch
        return torch.empty(x.shape, dtype=out_dtype or x.dtype, device=x.device)
    n_cols = x.shape[-1]
    rows = x.reshape(-1, n_cols)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    # The kernel reads weight and bias at ``cols``: a strided view (weight[::2]) must be copied first.
    weight = weight.contiguous() if weight is not None else None
    bias = bias.contiguous() if bias is not None else None
    n_rows = rows.shape[0]
    out = torch.empty((n_rows, n_cols), dtype=out_dtype or x.dtype, device=x.device)
    config = config or launch_config(n_cols, n_rows)
    num_tiles = config.num_tiles(n_cols)
    grid = (triton.cdiv(n_rows, config.rows_per_program),)
    masked = n_cols % config.block_size != 0 or n_rows % config.rows_per_program != 0
    kernel_for(layernorm_gelu_kernel, x.device)[grid](
        rows,
        weight,
        bias,
        out,
        scale,
        n_rows,
        n_cols,
        rows.stride(0),
        out.stride(0),
        eps,
        HAS_WEIGHT=weight is not None,
        HAS_BIAS=bias is not None,
        APPROXIMATE_TANH=approximate == "tanh",
        HAS_SCALE=scale is not None,
        BLOCK_SIZE=config.block_size,
        ROWS_PER_PROGRAM=config.rows_per_program,
        NUM_TILES=num_tiles,
        MASKED=masked,
        FAST_ERF=config.fast_erf,
        num_warps=config.num_warps,
    )
    return out.view(x.shape)
