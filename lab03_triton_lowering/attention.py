"""Extension (optional, step 7): attention in one Triton kernel, with an online softmax.  [YOU WRITE THIS]

Eager attention materialises the ``[M, N]`` score matrix ``S = Q K^T * scale`` in DRAM, reads it
back for the softmax, writes the probabilities ``P`` and reads them again for ``P V``. The fused
kernel never writes ``S`` or ``P``: each program owns ``BLOCK_M`` query rows of one (batch, head)
and walks over the keys in blocks of ``BLOCK_N``, keeping per row only a running maximum ``m``, a
running sum ``l`` of ``exp(s - m)`` and a running ``acc`` of ``exp(s - m) * v`` (the FlashAttention
recurrence, the handout's "Extension" section). When a block raises the maximum to ``m_new``,
``l`` and ``acc`` are re-shifted by ``alpha = exp(m - m_new)``; after the last block the output is
``acc / l``.

The rules of ``kernel.py`` hold here too (launch through ``kernel_for``; on CPU the interpreter, on a
GPU the compiler, ``python -m lab03_triton_lowering.given.simulated_gpu attention`` compiles your launches
for sm_90 without a GPU). And two of its own:

- ``tl.dot`` needs blocks of at least 16 on each side, and on a GPU it multiplies float32 in TF32
  (10 mantissa bits) unless asked otherwise: pass ``input_precision="ieee"`` for float32 inputs.
- The interpreter has no bfloat16 arithmetic, so this kernel takes float32 and float16 only
  (``ATTENTION_DTYPES``).
"""

from __future__ import annotations

import torch
import triton  # noqa: F401  (triton.jit, triton.cdiv, triton.next_power_of_2)
import triton.language as tl

from lab03_triton_lowering.given.interface import ATTENTION_DTYPES, MAX_HEAD_DIM  # noqa: F401  (given: what it accepts)
from labkit.triton_env import kernel_for  # noqa: F401  (launch the kernel through it: see fused_attention)


@triton.jit
def attention_kernel(
    q_ptr,  # [B, H, M, D]: pass every tensor's four strides, any layout works then
    k_ptr,  # [B, H, N, D]
    v_ptr,  # [B, H, N, D]
    out_ptr,  # [B, H, M, D], contiguous
    n_heads,
    n_queries,
    n_keys,
    head_dim,
    scale,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program computes ``BLOCK_M`` query rows of one (batch, head) (grid: query blocks x B*H).

    Contract (the parameters are a suggestion, add the strides; your launcher is the only caller):

    - scores ``s = q . k * scale`` and the recurrence (``m``, ``l``, ``acc``) in fp32 whatever the
      storage dtype; the output rounded once, on the store (``out_ptr.dtype.element_ty``), masked;
    - keys past ``n_keys`` and head dims past ``head_dim`` are masked (their scores are ``-inf``);
    - ``CAUSAL``: query ``i`` sees keys ``j <= i``. The diagonal is kept (a token attends to itself),
      and the mask is aligned to the top left when ``n_queries != n_keys``, as
      ``scaled_dot_product_attention(..., is_causal=True)``.
    """
    # TODO(step 7): the online softmax over key blocks.
    # guidance: begin
    # Suggested steps (see the handout's "Extension" section):
    #   1. block_m = tl.program_id(0), batch_head = tl.program_id(1) (batch = batch_head // n_heads, ...),
    #      both .to(tl.int64): row * stride can pass 2**31 elements on a long sequence;
    #      rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M), dims = tl.arange(0, BLOCK_D); load q once, masked.
    #   2. m = -inf, l = 0, acc = 0 (fp32, [BLOCK_M] and [BLOCK_M, BLOCK_D]).
    #   3. for start in range(0, n_keys, BLOCK_N) (causal: stop after the block holding the last row's
    #      diagonal): load k and v masked; s = tl.dot(q, tl.trans(k)) * scale; s = tl.where(visible, s, -inf);
    #      m_new = max(m, row max of s); alpha = exp(m - m_new); p = exp(s - m_new[:, None]);
    #      l = l * alpha + sum(p); acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v); m = m_new.
    #   4. store acc / l[:, None], masked.
    #   Key 0 is visible to every query, so after the first block m is finite: no exp(-inf - -inf).
    # guidance: end
    pass


def fused_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    """``F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)`` in one Triton kernel.

    Args:
        q: ``[batch, heads, M, head_dim]`` queries, float32 or float16 (``ATTENTION_DTYPES``), any strides.
        k, v: ``[batch, heads, N, head_dim]`` keys and values (N >= 1), q's dtype and device.
        causal: query ``i`` attends to keys ``0..i`` (its own included; top-left aligned when M != N).
        scale: the scores' factor; None means ``1 / sqrt(head_dim)``.

    Returns:
        a new contiguous ``[batch, heads, M, head_dim]`` tensor of q's dtype and device; M == 0 launches nothing.

    Raises:
        TypeError: q, k or v not a tensor, not of one dtype of ``ATTENTION_DTYPES``; causal not a bool.
        ValueError: q, k or v not 4-d, on another device than q; k and v of different shapes; q and k
            disagreeing on batch, heads or head_dim; head_dim above ``MAX_HEAD_DIM``; no keys; a scale
            that is not a positive number.
        Each message names the argument.
    """
    # TODO(step 7): check the arguments, allocate the output, launch attention_kernel.
    # guidance: begin
    # grid = (triton.cdiv(M, BLOCK_M), batch * heads); BLOCK_D = triton.next_power_of_2(head_dim), at least 16;
    # kernel_for(attention_kernel, q.device)[grid](q, k, v, out, *q.stride(), ..., num_warps=4).
    # guidance: end
    raise NotImplementedError("TODO(step 7): fused_attention: check the arguments, launch attention_kernel")
