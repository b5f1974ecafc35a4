"""Extension: attention in one Triton kernel, with an online softmax (the FlashAttention recurrence).

Eager attention materialises the ``[M, N]`` score matrix ``S = Q K^T * scale`` in DRAM, reads it
back for the softmax, writes the probabilities ``P`` and reads them again for ``P V``: for long
sequences that traffic, not the arithmetic, sets the time. The fused kernel never writes ``S`` or
``P``. Each program owns ``BLOCK_M`` query rows of one (batch, head) and walks over the keys in
blocks of ``BLOCK_N``, keeping per row only three things in registers:

- ``m``: the largest score seen so far (the softmax's shift, for stability),
- ``l``: the sum of ``exp(s - m)`` over the keys seen so far,
- ``acc``: the sum of ``exp(s - m) * v`` over the same keys (``BLOCK_M x head_dim``).

When a new block raises the maximum from ``m`` to ``m_new``, everything accumulated so far was
shifted by the old maximum: multiplying ``l`` and ``acc`` by ``alpha = exp(m - m_new)`` re-shifts
it exactly. After the last block, ``acc / l`` is ``softmax(S) V``. That is the *online softmax*.

**Causal attention** (``is_causal=True`` in ``F.scaled_dot_product_attention``): query ``i`` sees
keys ``j <= i``: the diagonal is *kept* (a token attends to itself), the mask aligned to the top
left when ``M != N``. Key blocks entirely right of a query block's last row are skipped; the block
that straddles the diagonal is masked element by element.

Scores and the recurrence are fp32 whatever the storage dtype; the two matrix products take their
inputs in the storage dtype (fp32 products in IEEE precision, not TF32) and accumulate in fp32
(``P`` is rounded to the storage dtype for the second product, as FlashAttention does), and the
output is rounded once, on the store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from lab03_triton_lowering.given.interface import ATTENTION_DTYPES, MAX_HEAD_DIM
from labkit.triton_env import kernel_for


@triton.jit
def attention_kernel(
    q_ptr,  # [B, H, M, D], any strides
    k_ptr,  # [B, H, N, D]
    v_ptr,  # [B, H, N, D]
    out_ptr,  # [B, H, M, D], contiguous
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    n_heads,
    n_queries,
    n_keys,
    head_dim,
    scale,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    # Which query rows, of which (batch, head), this program owns.
    # int64 offsets: one (batch, head) slice alone can pass 2**31 elements (q transposed from [B, S, H, D]
    # with H * D = 4096 and S > 524288), and rows * stride_qm with it.
    block_m = tl.program_id(0).to(tl.int64)
    batch_head = tl.program_id(1).to(tl.int64)  # batch * stride_qb can pass 2**31 elements
    batch = batch_head // n_heads
    head = batch_head % n_heads
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    row_ok = rows < n_queries
    dim_ok = dims < head_dim

    # Load the query block once; it stays in registers for the whole walk over the keys.
    q_base = q_ptr + batch * stride_qb + head * stride_qh
    q = tl.load(
        q_base + rows[:, None] * stride_qm + dims[None, :] * stride_qd,
        mask=row_ok[:, None] & dim_ok[None, :],
        other=0.0,
    )
    k_base = k_ptr + batch * stride_kb + head * stride_kh
    v_base = v_ptr + batch * stride_vb + head * stride_vh

    # The running maximum, sum and weighted sum of values, per query row (fp32).
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)  # noqa: E741  (the paper's name)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Causal: keys past this block's last row are masked for every row of it; stop before them.
    if CAUSAL:
        end = tl.minimum(n_keys, (block_m + 1) * BLOCK_M)
    else:
        end = n_keys
    for start in range(0, end, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N).to(tl.int64)  # keys * stride_kn: int64 too
        key_ok = keys < n_keys
        kv_mask = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_base + keys[:, None] * stride_kn + dims[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(v_base + keys[:, None] * stride_vn + dims[None, :] * stride_vd, mask=kv_mask, other=0.0)

        # Scores of this block, fp32; keys past the end (and, causal, right of the diagonal) get -inf.
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])  # <=: a query sees its own key
        s = tl.where(visible, s, float("-inf"))

        # The online softmax: raise the maximum, re-shift what was accumulated, add this block.
        # Key 0 is visible to every row, so after the first block m is finite and no exp sees -inf - -inf.
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)  # noqa: E741
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m = m_new

    # Normalise once, round once on the store.
    out = acc / l[:, None]
    out_base = out_ptr + batch * stride_ob + head * stride_oh
    tl.store(
        out_base + rows[:, None] * stride_om + dims[None, :] * stride_od,
        out.to(out_ptr.dtype.element_ty),
        mask=row_ok[:, None] & dim_ok[None, :],
    )


@dataclass(frozen=True)
class AttentionLaunch:
    """How :func:`attention_kernel` is launched: query and key block sizes, head block, warps."""

    block_m: int
    block_n: int
    block_d: int
    num_warps: int


def launch_config(head_dim: int) -> AttentionLaunch:
    """Blocks of 32 queries by 32 keys (``tl.dot`` needs at least 16 per side), the head dimension
    padded to a power of two (at least 16), 4 warps: the query, key and value blocks of a 128-wide
    head then fit the registers of one program on an sm_90 GPU."""
    return AttentionLaunch(block_m=32, block_n=32, block_d=max(16, triton.next_power_of_2(head_dim)), num_warps=4)


def _check_arguments(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None) -> None:
    """Raise a clear error for inputs :func:`fused_attention` does not take (see its docstring)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-d (batch, heads, sequence, head_dim), got shape {list(t.shape)}")
        if t.dtype not in ATTENTION_DTYPES or t.dtype != q.dtype:
            raise TypeError(f"{name} is {t.dtype}: q, k and v share one dtype of {ATTENTION_DTYPES}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape, got {list(k.shape)} and {list(v.shape)}")
    if q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q {list(q.shape)} and k {list(k.shape)} must agree on batch, heads and head_dim")
    if not 1 <= q.shape[-1] <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be between 1 and {MAX_HEAD_DIM}, got {q.shape[-1]}")
    if k.shape[2] == 0:
        raise ValueError("k and v have no keys: softmax over an empty sequence is undefined")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if scale is not None and (not isinstance(scale, (int, float)) or isinstance(scale, bool) or scale <= 0):
        raise ValueError(f"scale must be a positive number or None, got {scale!r}")


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
    _check_arguments(q, k, v, causal, scale)
    batch, heads, n_queries, head_dim = q.shape
    n_keys = k.shape[2]
    out = torch.empty((batch, heads, n_queries, head_dim), dtype=q.dtype, device=q.device)
    if out.numel() == 0:  # no queries (or no batch, no heads): nothing to launch
        return out
    config = launch_config(head_dim)
    grid = (triton.cdiv(n_queries, config.block_m), batch * heads)
    kernel_for(attention_kernel, q.device)[grid](
        q, k, v, out,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        heads, n_queries, n_keys, head_dim,
        1.0 / math.sqrt(head_dim) if scale is None else float(scale),
        CAUSAL=causal,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_D=config.block_d,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=config.num_warps,
    )  # fmt: skip
    return out
