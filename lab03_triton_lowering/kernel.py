"""The fused LayerNorm + GELU Triton kernel, and the launcher that sizes and starts it.  [YOU WRITE THIS]

Eager PyTorch runs ``F.gelu(F.layer_norm(x))`` as two kernels: LayerNorm reads ``x`` and writes a
normalised copy to DRAM, GELU reads that copy back and writes the result. For a memory-bound op
that is four passes over the tensor. Your kernel does the same arithmetic in two: each program
loads one row into registers, computes its mean and variance in fp32, normalises, applies the
optional affine and GELU, and stores the row once.

Programming model in one paragraph: a Triton *program* is one instance of the kernel (a CUDA
thread block). ``tl.program_id(0)`` says which row it owns; ``tl.arange(0, BLOCK_SIZE)`` is a
*block* of column indices that the compiler spreads over the program's warps, so one
``tl.load`` of a block becomes coalesced, vectorised loads by 32 threads per warp. Block sizes are
compile-time constants (``tl.constexpr``) and powers of two, so a row whose length is not a power
of two is handled with a *mask*: lanes past the end neither load nor store.

Rules that hold on both machines you target (the tests check both):

- On CPU the kernel runs in Triton's interpreter (NumPy). It has no ``libdevice.tanh`` and no
  bf16 arithmetic: write tanh with ``tl.exp``, and convert loads to fp32 before any math.
- On a GPU the kernel is compiled. A kernel may not read plain Python globals (use literals), and
  every construct must be Triton, not Python (``python -m lab03_triton_lowering.given.simulated_gpu kernel``
  compiles your launches for an sm_90 GPU without needing one).
- One process may hold both: a GPU machine runs the CPU tests too. Launch through
  ``labkit.triton_env.kernel_for(kernel, x.device)``, which picks, per launch, the compiled kernel
  for CUDA tensors (through ``wrap_triton`` while something traces it) and the interpreter for CPU
  tensors.
- Loop bounds must be ``tl.constexpr`` (e.g. the number of blocks per row): the interpreter of some
  Triton releases cannot loop to a runtime value (``only 0-dimensional arrays can be converted``).
- ``eps`` is a scalar argument, and its type depends on who launches: in the interpreter it is a
  plain Python float (so ``eps.to(tl.float32)`` fails there: ``'float' object has no attribute
  'to'``), compiled it is fp32 from an eager launch and fp64 from Inductor's generated code.
  ``tl.cast(eps, tl.float32)`` works in all three (and keeps the row in fp32 under Inductor).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from lab03_triton_lowering.given.interface import GELU_APPROXIMATIONS  # noqa: F401  (given: the GELU forms)
from labkit.triton_env import kernel_for  # noqa: F401  (launch the kernel through it: see layernorm_gelu_forward)

#: The largest block one program holds in registers. Rows up to this length are read exactly once;
#: longer rows are processed in a loop of blocks (a statistics pass, then a normalise pass).
MAX_BLOCK_SIZE = 8192


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
    NUM_TILES: tl.constexpr,  # blocks per row: 1 when the row fits one block
):
    """One program normalises one row: ``out[row] = gelu(layer_norm(x[row]) * weight + bias)``.

    Contract (keep the name: the GPU tests look for ``layernorm_gelu_kernel`` in Inductor's code;
    the parameters are a suggestion, your launcher is the only caller):

    - statistics in fp32 whatever the input dtype; variance is the biased one (divide by n_cols),
      ``rstd = 1 / sqrt(var + eps)``, exactly as ``F.layer_norm``;
    - GELU exact: ``0.5 * y * (1 + erf(y / sqrt(2)))``; tanh form:
      ``0.5 * y * (1 + tanh(sqrt(2 / pi) * (y + 0.044715 * y**3)))``;
    - store in the output's dtype (``out_ptr.dtype.element_ty``), masked;
    - rows longer than one block (``NUM_TILES > 1``): every accumulator in fp32 too (sums of
      thousands of half-precision values in half lose the statistics entirely).
    """
    # TODO(step 1): rows that fit one block (NUM_TILES == 1). TODO(step 2): the loop over blocks.
    # guidance: begin
    # Suggested steps (see the handout):
    #   1. row = tl.program_id(0), as int64 (row * stride can exceed 2**31); pointers to the row;
    #      eps = tl.cast(eps, tl.float32) (not eps.to(...): a Python float in the interpreter).
    #   2. NUM_TILES == 1 (the row fits one block): cols = tl.arange(0, BLOCK_SIZE), mask = cols < n_cols,
    #      load once, .to(tl.float32), mean, variance of (x - mean) with masked lanes zeroed, rstd, normalise.
    #   3. otherwise (step 2): loop over blocks accumulating fp32 statistics, then loop again to normalise
    #      and store. Beware E[x^2] - E[x]^2 when the mean is large (subtract a shift first). The number of
    #      blocks per row must be a constexpr parameter, not range(0, n_cols, BLOCK_SIZE).
    #   4. affine (HAS_WEIGHT / HAS_BIAS are constexpr: the branch not taken is not compiled), GELU, store.
    #   Helper functions decorated with @triton.jit (e.g. a tanh written with tl.exp) may be called here.
    # guidance: end
    pass


@dataclass(frozen=True)
class LaunchConfig:
    """How one row is tiled: the block width, the warps per program, and whether one block holds the row."""

    block_size: int
    num_warps: int
    single_tile: bool


def launch_config(n_cols: int) -> LaunchConfig:
    """Choose the block and warp count for rows of ``n_cols`` elements.

    Contract: ``block_size`` is a power of two, at most :data:`MAX_BLOCK_SIZE`, and at least
    ``n_cols`` whenever ``n_cols <= MAX_BLOCK_SIZE`` (then ``single_tile`` is True). ``num_warps``
    is a power of two between 1 and 16, growing with the block (aim for ~8-16 elements per thread).

    Raises:
        ValueError: if ``n_cols < 1``.
    """
    # TODO(step 1): the block and warps for a row length.
    # guidance: begin
    # triton.next_power_of_2 helps; single_tile is n_cols <= MAX_BLOCK_SIZE.
    # guidance: end
    raise NotImplementedError("TODO(step 1): choose block_size, num_warps and single_tile for a row length")


def layernorm_gelu_forward(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, approximate: str
) -> torch.Tensor:
    """Allocate the output and launch :func:`layernorm_gelu_kernel`, one program per row.

    Arguments are trusted (the public ``layernorm_gelu`` validates them). Contract:

    - any leading shape (flatten to rows with ``reshape(-1, n)``), zero rows (launch nothing),
      any strides (copy only when the last dimension is not contiguous; otherwise pass the row stride);
    - ``weight`` and ``bias`` with any stride too (``weight[::2]`` is a valid weight, and the kernel reads
      them at ``cols``: pass ``.contiguous()`` ones);
    - returns a NEW contiguous tensor with ``x``'s shape and dtype;
    - launch with ``kernel_for(layernorm_gelu_kernel, x.device)[grid](...)``: on CUDA that is the
      compiled kernel, a plain launch when run eagerly and, while traced, ``wrap_triton``'s node that
      Inductor can compile (the lowering relies on it); on CPU it is Triton's interpreter.
      Pass ``num_warps`` as a launch keyword.
    """
    # TODO(step 1): allocate, launch, reshape back.
    # guidance: begin
    # rows = x.reshape(-1, n); copy only if rows.stride(-1) != 1; weight/bias .contiguous() when given;
    # out = torch.empty (not empty_like: x may be non-contiguous); grid = (n_rows,);
    # kernel_for(layernorm_gelu_kernel, x.device)[grid](..., num_warps=...);
    # return out.view(x.shape).
    # guidance: end
    raise NotImplementedError("TODO(step 1): launch layernorm_gelu_kernel over the rows of x")
