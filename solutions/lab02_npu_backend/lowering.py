"""Lower: turn one NPU partition (an FX graph) into an NPU program.

Each supported target has a *lowering rule* in :data:`LOWERINGS`: a function that receives the
node's arguments (tensors already replaced by :class:`Ref` handles to program tensors) and emits ISA
instructions through a :class:`ProgramBuilder`. Ops outside the ISA are **decomposed** into ISA
primitives where that is exact:

- ``linear`` -> ``permute`` + ``matmul`` + ``add``; ``addmm`` (GPT-2's ``Conv1D``) -> ``matmul`` + ``add``;
- ``neg`` -> ``mul`` by -1; ``x - y`` -> ``x + (-1 * y)``; ``x ** n`` (integer n) -> multiplications;
- ``x / c`` -> ``x * (1 / c)`` (one extra rounding of the constant);
- ``split``/``chunk`` -> one ``slice`` per piece; ReLU6/``hardtanh``/``clamp`` -> the activation unit's clamp;
- ``hardswish`` -> ``x * clamp(x + 3, 0, 6) * (1 / 6)``, ``hardsigmoid`` -> ``clamp(x + 3, 0, 6) * (1 / 6)``;
- eval ``batch_norm`` -> per-channel ``scale = weight * rsqrt(var + eps)``, ``x * scale + shift``;
- ``scaled_dot_product_attention`` -> ``matmul`` (q k^T) -> ``mul`` (scale) -> [``add`` mask] ->
  ``softmax`` (causal flag) -> ``matmul`` (p v); grouped-query attention broadcasts instead of copying;
- ``multi_head_attention_forward`` (``nn.TransformerEncoderLayer``) -> projections + the above;
- the RMSNorm chain ``x * rsqrt(mean(x**2) + eps) * w`` -> a single ``rmsnorm`` instruction.

Nodes that do no work (eval dropout, ``contiguous``, a ``.to`` that keeps the dtype, a view to the
same shape, a cat with an empty tensor) emit no instruction: their rule returns the input's ``Ref``.

Shapes come from running the partition once on *fake* tensors of the real input shapes, so a
program is specialised to one set of input shapes (the backend caches one program per shape).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

from lab02_npu_backend.given.graphs import fake_node_values, is_number, target_name
from lab02_npu_backend.given.ir import Program
from lab02_npu_backend.given.program_builder import (  # noqa: F401
    LowerFn,
    LoweringError,
    ProgramBuilder,
    Ref,
    RmsNormChain,
    rule_registrar,
)
from labkit.spellings import canonical_arguments

from .simulator import KERNELS

aten = torch.ops.aten


#: Every lowering rule, for both dialects (their targets never collide).
LOWERINGS: dict[Any, LowerFn] = {}
#: ``@lowers(target, ...)``: register the rule below it in :data:`LOWERINGS` for every target named.
lowers = rule_registrar(LOWERINGS)


# ------------------------------------------------------------------ matrix products
def linear(b: ProgramBuilder, x: Ref, weight: Ref, bias: Ref | None) -> Ref:
    """``x @ weight.T + bias``."""
    y = b.emit("matmul", [x, b.emit("permute", [weight], dims=[1, 0])])
    return b.emit("add", [y, bias]) if bias is not None else y


@lowers(torch._C._nn.linear)
def _linear(b, out, input, weight, bias=None):
    return linear(b, input, weight, bias)


@lowers(torch.matmul, operator.matmul, "matmul", torch.mm, "mm", torch.bmm, "bmm", aten.mm.default, aten.bmm.default)
def _matmul(b, out, input, other, **_):
    return b.emit("matmul", [input, other])


@lowers(torch.addmm, "addmm", aten.addmm.default)
def _addmm(b, out, bias, mat1, mat2, **_):
    return b.emit("add", [b.emit("matmul", [mat1, mat2]), bias])


def _pair(value: Any) -> list[int]:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)] * 2


@lowers(torch.conv2d)
def _conv2d(b, out, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return b.emit(
        "conv2d",
        [input, weight, bias],
        stride=_pair(stride),
        padding=_pair(padding),
        dilation=_pair(dilation),
        groups=int(groups),
    )


@lowers(aten.convolution.default)
def _convolution(b, out, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return _conv2d(b, out, input, weight, bias, stride, padding, dilation, groups)


# ------------------------------------------------------------------ elementwise arithmetic
@lowers(operator.add, operator.iadd, torch.add, "add", aten.add.Tensor)
def _add(b, out, input, other, alpha=1):
    if alpha != 1:  # alpha scales `other`, before the operands may swap: torch.add(2, x, alpha=3) is 2 + 3x
        other = other * alpha if is_number(other) else b.emit("mul", [other, alpha])
    if not isinstance(input, Ref):  # 2 + x == x + 2
        input, other = other, input
    return b.emit("add", [input, other])


@lowers(operator.sub, operator.isub, torch.sub, "sub", aten.sub.Tensor)
def _sub(b, out, input, other, alpha=1):
    if isinstance(input, Ref):  # x - y == x + (-alpha * y)
        negated = -alpha * other if is_number(other) else b.emit("mul", [other, -alpha])
        return b.emit("add", [input, negated])
    return b.emit("add", [b.emit("mul", [other, -alpha]), input])  # c - y == (-alpha * y) + c


@lowers(operator.mul, operator.imul, torch.mul, "mul", aten.mul.Tensor)
def _mul(b, out, input, other):
    if not isinstance(input, Ref):
        input, other = other, input
    return b.emit("mul", [input, other])


@lowers(operator.truediv, torch.div, "div", aten.div.Tensor)
def _div(b, out, input, other, rounding_mode=None):
    # x / 0.0 is x * inf and x / -0.0 is x * -inf (IEEE 754: 0 / 0 is nan either way); Python's 1.0 / 0.0 raises
    reciprocal = 1.0 / other if other != 0 else math.copysign(math.inf, other)
    return b.emit("mul", [input, reciprocal])


@lowers(operator.neg, torch.neg, "neg", aten.neg.default)
def _neg(b, out, input):
    return b.emit("mul", [input, -1])


def integer_power(b: ProgramBuilder, x: Ref, exponent: int) -> Ref:
    """``x ** exponent`` (exponent >= 1) by square-and-multiply: ``x**3`` is ``x * (x * x)``, like eager's."""
    result, power = None, x
    while exponent:
        if exponent & 1:
            result = power if result is None else b.emit("mul", [result, power])
        exponent >>= 1
        if exponent:
            power = b.emit("mul", [power, power])
    return result


@lowers(operator.pow, torch.pow, "pow", aten.pow.Tensor_Scalar)
def _pow(b, out, input, exponent):
    return integer_power(b, input, int(exponent))


@lowers(torch.rsqrt, "rsqrt", aten.rsqrt.default)
def _rsqrt(b, out, input):
    return b.emit("rsqrt", [input])


def _wrapped(dim: Any, ndim: int) -> int:
    """``dim`` as a non-negative index; a 0-dim tensor takes dims 0 and -1, as PyTorch's own wrapping does."""
    return int(dim) % max(ndim, 1)


def _dims(dim: Any, ndim: int) -> list[int]:
    return [_wrapped(d, ndim) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]


@lowers(torch.mean, "mean", aten.mean.dim)
def _mean(b, out, input, dim, keepdim=False, dtype=None):
    return b.emit("mean", [input], dims=_dims(dim, input.ndim), keepdim=bool(keepdim))


@lowers(F.adaptive_avg_pool2d)
def _global_avg_pool(b, out, input, output_size):
    return b.emit("mean", [input], dims=[input.ndim - 2, input.ndim - 1], keepdim=True)


# ------------------------------------------------------------------ activations, softmax, norms
@lowers(F.relu, torch.relu, "relu", aten.relu.default)
def _relu(b, out, input, inplace=False):
    return b.emit("activation", [input], function="relu")


@lowers(F.gelu, aten.gelu.default)
def _gelu(b, out, input, approximate="none"):
    return b.emit("activation", [input], function="gelu_tanh" if approximate == "tanh" else "gelu")


@lowers(F.silu, aten.silu.default)
def _silu(b, out, input, inplace=False):
    return b.emit("activation", [input], function="silu")


@lowers(torch.sigmoid, F.sigmoid, "sigmoid", aten.sigmoid.default)
def _sigmoid(b, out, input):
    return b.emit("activation", [input], function="sigmoid")


@lowers(torch.tanh, F.tanh, "tanh", aten.tanh.default)
def _tanh(b, out, input):
    return b.emit("activation", [input], function="tanh")


def clamp(b: ProgramBuilder, x: Ref, low: float | None, high: float | None) -> Ref:
    """The activation unit's output clamp; an omitted bound is not sent."""
    bounds = {name: value for name, value in (("min", low), ("max", high)) if value is not None}
    return b.emit("activation", [x], function="clamp", **bounds)


@lowers(F.hardtanh, aten.hardtanh.default)
def _hardtanh(b, out, input, min_val=-1.0, max_val=1.0, inplace=False):
    return clamp(b, input, min_val, max_val)


@lowers(F.relu6)
def _relu6(b, out, input, inplace=False):
    return clamp(b, input, 0.0, 6.0)


@lowers(F.hardswish, aten.hardswish.default)
def _hardswish(b, out, input, inplace=False):
    """``x * relu6(x + 3) / 6``, PyTorch's own formula (the division as a multiplication by 1/6)."""
    return b.emit("mul", [b.emit("mul", [input, clamp(b, b.emit("add", [input, 3.0]), 0.0, 6.0)]), 1.0 / 6.0])


@lowers(F.hardsigmoid, aten.hardsigmoid.default)
def _hardsigmoid(b, out, input, inplace=False):
    """``relu6(x + 3) / 6``."""
    return b.emit("mul", [clamp(b, b.emit("add", [input, 3.0]), 0.0, 6.0), 1.0 / 6.0])


@lowers(torch.clamp, "clamp", torch.clip, "clip", aten.clamp.default)
def _clamp(b, out, input, min=None, max=None):
    return clamp(b, input, min, max)


@lowers(F.softmax, torch.softmax, "softmax", aten._softmax.default)
def _softmax(b, out, input, dim, *_, **__):
    return b.emit("softmax", [input], dim=_wrapped(dim, input.ndim))


@lowers(F.layer_norm)
def _layer_norm(b, out, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return b.emit("layernorm", [input, weight, bias], normalized_ndim=len(normalized_shape), eps=float(eps))


@lowers(aten.native_layer_norm.default)
def _native_layer_norm(b, out, input, normalized_shape, weight, bias, eps):
    return _layer_norm(b, out, input, normalized_shape, weight, bias, eps), None, None


@lowers(F.rms_norm, torch.rms_norm)
def _rms_norm(b, out, input, normalized_shape, weight=None, eps=None):
    eps = torch.finfo(input.dtype).eps if eps is None else eps
    return b.emit("rmsnorm", [input, weight], normalized_ndim=len(normalized_shape), eps=float(eps))


def batch_norm(b: ProgramBuilder, x: Ref, mean: Ref, var: Ref, weight: Ref | None, bias: Ref | None, eps: float) -> Ref:
    """Eval batch norm as ``x * scale + shift`` with per-channel ``scale``/``shift``."""
    scale = b.emit("rsqrt", [b.emit("add", [var, float(eps)])])
    if weight is not None:
        scale = b.emit("mul", [scale, weight])
    shift = b.emit("mul", [b.emit("mul", [mean, scale]), -1])
    if bias is not None:
        shift = b.emit("add", [shift, bias])
    channel_shape = [x.shape[1]] + [1] * (x.ndim - 2)
    scale, shift = b.emit("reshape", [scale], shape=channel_shape), b.emit("reshape", [shift], shape=channel_shape)
    return b.emit("add", [b.emit("mul", [x, scale]), shift])


@lowers(F.batch_norm)
def _batch_norm(
    b, out, input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5
):
    return batch_norm(b, input, running_mean, running_var, weight, bias, eps)


@lowers(aten._native_batch_norm_legit_no_training.default)
def _aten_batch_norm(b, out, input, weight, bias, running_mean, running_var, momentum, eps):
    return batch_norm(b, input, running_mean, running_var, weight, bias, eps), None, None


# ------------------------------------------------------------------ attention
def attention(b: ProgramBuilder, q: Ref, k: Ref, v: Ref, *, mask: Ref | None, causal: bool, scale: float | None) -> Ref:
    """``softmax(q k^T * scale + mask) v``; grouped-query attention when k/v have fewer heads than q.

    A float mask is added to the scores; a boolean one is the softmax's ``mask`` operand (zero weight
    where it is false: the additive -inf mask PyTorch makes of it).
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out_shape = None
    if mask is not None and mask.ndim < q.ndim:  # [L, S] or [B, L, S] masks broadcast as [1, 1, L, S]
        mask = b.emit("reshape", [mask], shape=[1] * (q.ndim - mask.ndim) + list(mask.shape))
    if q.ndim == 4 and k.shape[1] != q.shape[1]:  # GQA: [B, Hkv, G, L, E] @ [B, Hkv, 1, E, S] broadcasts
        batch, heads, length, _ = q.shape
        groups = heads // k.shape[1]
        out_shape = [batch, heads, length, v.shape[-1]]
        q = b.emit("reshape", [q], shape=[batch, k.shape[1], groups, length, q.shape[-1]])
        k = b.emit("reshape", [k], shape=[k.shape[0], k.shape[1], 1, *k.shape[2:]])
        v = b.emit("reshape", [v], shape=[v.shape[0], v.shape[1], 1, *v.shape[2:]])
        if mask is not None:  # a mask's head dimension splits like the queries' (or broadcasts)
            mask_heads = [k.shape[1], groups] if mask.shape[1] != 1 else [1, 1]
            mask = b.emit("reshape", [mask], shape=[mask.shape[0], *mask_heads, *mask.shape[2:]])
    dims = list(range(k.ndim))
    dims[-1], dims[-2] = dims[-2], dims[-1]
    scores = b.emit("mul", [b.emit("matmul", [q, b.emit("permute", [k], dims=dims)]), float(scale)])
    boolean = mask is not None and mask.dtype == torch.bool
    if mask is not None and not boolean:
        scores = b.emit("add", [scores, mask])
    weights = b.emit(
        "softmax",
        [scores, mask] if boolean else [scores],
        dim=scores.ndim - 1,
        causal=bool(causal),
        zero_empty_rows=True,  # a query that may see no key attends to nothing (0), as eager's attention
    )
    result = b.emit("matmul", [weights, v])
    return b.emit("reshape", [result], shape=out_shape) if out_shape else result


@lowers(F.scaled_dot_product_attention)
def _sdpa(b, out, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return attention(b, query, key, value, mask=attn_mask, causal=is_causal, scale=scale)


@lowers(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _aten_sdpa(b, out, query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    return attention(b, query, key, value, mask=attn_mask, causal=is_causal, scale=scale), None


@lowers(F.multi_head_attention_forward)
def _multi_head_attention(
    b,
    out,
    query,
    key,
    value,
    embed_dim_to_check,
    num_heads,
    in_proj_weight,
    in_proj_bias,
    bias_k,
    bias_v,
    add_zero_attn,
    dropout_p,
    out_proj_weight,
    out_proj_bias,
    *_,
    **__,
):
    """Self-attention of ``nn.MultiheadAttention`` (sequence-first ``[L, N, E]``), decomposed."""
    length, batch, embed = query.shape
    head_dim = embed // num_heads
    qkv = linear(b, query, in_proj_weight, in_proj_bias)
    heads = []
    for i in range(3):
        part = b.emit("slice", [qkv], dim=2, start=i * embed, end=(i + 1) * embed, step=1)
        part = b.emit("reshape", [part], shape=[length, batch * num_heads, head_dim])
        part = b.emit("permute", [part], dims=[1, 0, 2])
        heads.append(b.emit("reshape", [part], shape=[batch, num_heads, length, head_dim]))
    attended = attention(b, *heads, mask=None, causal=False, scale=None)
    attended = b.emit("permute", [attended], dims=[2, 0, 1, 3])
    attended = b.emit("reshape", [attended], shape=[length * batch, embed])
    projected = linear(b, attended, out_proj_weight, out_proj_bias)
    return b.emit("reshape", [projected], shape=[length, batch, embed]), None


# ------------------------------------------------------------------ layout
@lowers(
    F.dropout,
    "contiguous",
    "clone",
    torch.clone,
    aten.clone.default,
    aten.alias.default,
    "to",
    "float",
    "type",
    "type_as",
    aten._to_copy.default,
)
def _identity(b, out, input, *_, **__):
    return input  # support.py admits these only when they return their input unchanged


@lowers(
    "view",
    "reshape",
    torch.reshape,
    torch.flatten,
    "flatten",
    torch.unsqueeze,
    "unsqueeze",
    torch.squeeze,
    "squeeze",
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.unsqueeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
)
def _reshape(b, out, input, *_, **__):
    if tuple(out.shape) == input.shape:
        return input  # a view to the same shape is the input itself (the report lists it as elided)
    return b.emit("reshape", [input], shape=list(out.shape))


@lowers("expand", aten.expand.default)
def _expand(b, out, input, *_, **__):
    if tuple(out.shape) == input.shape:
        return input
    return b.emit("expand", [input], shape=list(out.shape))


@lowers(torch.transpose, "transpose", aten.transpose.int)
def _transpose(b, out, input, dim0, dim1):
    dims = list(range(input.ndim))
    if dims:  # a 0-dim tensor transposes to itself
        first, second = _wrapped(dim0, input.ndim), _wrapped(dim1, input.ndim)
        dims[first], dims[second] = dims[second], dims[first]
    return b.emit("permute", [input], dims=dims)


@lowers("t", aten.t.default)
def _t(b, out, input):
    return b.emit("permute", [input], dims=[1, 0]) if input.ndim == 2 else input


@lowers(aten.numpy_T)
def _numpy_t(b, out, input):
    """``x.T``: every dimension reversed."""
    return b.emit("permute", [input], dims=list(reversed(range(input.ndim)))) if input.ndim >= 2 else input


@lowers(torch.permute, "permute", aten.permute.default)
def _permute(b, out, input, *dims):
    dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else dims
    return b.emit("permute", [input], dims=_dims(dims, input.ndim))


def _slice(b: ProgramBuilder, x: Ref, dim: int, start: Any, end: Any, step: Any) -> Ref:
    start, end, step = slice(start, end, step).indices(x.shape[dim])
    if (start, end, step) == (0, x.shape[dim], 1):
        return x
    return b.emit("slice", [x], dim=dim, start=start, end=max(end, start), step=step)


@lowers(operator.getitem, torch.Tensor.__getitem__)
def _getitem(b, out, input, index):
    if isinstance(input, (tuple, list)):  # unpacking a multi-output node
        return input[index]
    items = list(index) if isinstance(index, tuple) else [index]
    if Ellipsis in items:
        at = items.index(Ellipsis)
        explicit = sum(item is not None for item in items) - 1
        items[at : at + 1] = [slice(None)] * (input.ndim - explicit)
    result, dim = input, 0
    for item in items:
        if item is None:
            continue
        if isinstance(item, int):
            position = item % input.shape[dim]
            result = _slice(b, result, dim, position, position + 1, 1)
        elif isinstance(item, list):  # a gather by constant indices: one slice each, concatenated
            pieces = [_slice(b, result, dim, i % input.shape[dim], i % input.shape[dim] + 1, 1) for i in item]
            result = pieces[0] if len(pieces) == 1 else b.emit("concat", [pieces], dim=dim)
        else:
            result = _slice(b, result, dim, item.start, item.stop, item.step)
        dim += 1
    if tuple(result.shape) != tuple(out.shape):  # ints drop dimensions, None adds them
        result = b.emit("reshape", [result], shape=list(out.shape))
    return result


@lowers(aten.slice.Tensor)
def _aten_slice(b, out, input, dim=0, start=None, end=None, step=1):
    return _slice(b, input, _wrapped(dim, input.ndim), start, end, step)


@lowers(aten.select.int)
def _select(b, out, input, dim, index):
    dim = _wrapped(dim, input.ndim)
    position = index % input.shape[dim]
    return b.emit("reshape", [_slice(b, input, dim, position, position + 1, 1)], shape=list(out.shape))


@lowers("split", torch.split, "chunk", torch.chunk, aten.split.Tensor, aten.split_with_sizes.default)
def _split(b, out, input, sizes, *rest, **kwargs):
    """One slice per piece; the pieces' lengths come from the node's own result (``out``)."""
    dim = rest[0] if rest else kwargs.get("dim", 0)
    dim, start, pieces = _wrapped(dim, input.ndim), 0, []
    for piece in out:
        pieces.append(_slice(b, input, dim, start, start + piece.shape[dim], 1))
        start += piece.shape[dim]
    return tuple(pieces)


@lowers(torch.cat, aten.cat.default)
def _cat(b, out, tensors, dim=0):
    # torch.cat skips 1-D empty tensors (a KV cache before its first entry); a cat of one tensor is that tensor.
    tensors = [t for t in tensors if t.shape != (0,)] or list(tensors[:1])
    if len(tensors) == 1:
        return tensors[0]
    return b.emit("concat", [tensors], dim=_wrapped(dim, tensors[0].ndim))


# ------------------------------------------------------------------ the RMSNorm chain
_POW = {operator.pow, torch.pow, "pow", aten.pow.Tensor_Scalar}
_MEAN = {torch.mean, "mean", aten.mean.dim}
_ADD = {operator.add, torch.add, "add", aten.add.Tensor}
_RSQRT = {torch.rsqrt, "rsqrt", aten.rsqrt.default}
_MUL = {operator.mul, torch.mul, "mul", aten.mul.Tensor}


def _single_use(node: Any, kinds: set) -> bool:
    return isinstance(node, fx.Node) and node.op != "placeholder" and node.target in kinds and len(node.users) == 1


def _operands(node: fx.Node, count: int) -> tuple[Any, ...] | None:
    """``node``'s first ``count`` arguments by position however the call spells them (``torch.rsqrt(input=v)``
    is ``(v,)``: :func:`canonical_arguments`), or None when the call has fewer or names another one (a method's
    keyword): such a call is not matched, and lowers op by op."""
    args, kwargs = canonical_arguments(node)
    return None if len(args) != count or kwargs else tuple(args)


def _other_operand(node: fx.Node, known: Any) -> Any:
    operands = _operands(node, 2)
    if operands is None:
        return None
    a, b = operands
    return b if a is known else a if b is known else None


def find_rmsnorm_chains(gm: fx.GraphModule) -> list[RmsNormChain]:
    """Every RMSNorm chain whose intermediate values are used only by the chain (so fusing is safe). Each call
    is read through :func:`_operands`, so ``torch.add(input=m, other=1e-6)`` is matched like ``m + 1e-6``."""
    chains = []
    for rsqrt in gm.graph.nodes:
        if not _single_use(rsqrt, _RSQRT) or (rsqrt_operands := _operands(rsqrt, 1)) is None:
            continue
        (add,) = rsqrt_operands
        if not (_single_use(add, _ADD) and (add_operands := _operands(add, 2)) and is_number(add_operands[1])):
            continue
        mean, eps = add_operands
        if not _single_use(mean, _MEAN) or not _is_last_dim_keepdim(mean):
            continue
        square = next(iter(canonical_arguments(mean)[0]), None)
        if not (_single_use(square, _POW) and (square_operands := _operands(square, 2)) and square_operands[1] == 2):
            continue
        x = square_operands[0]
        scaled = next(iter(rsqrt.users))
        if scaled.target not in _MUL or _other_operand(scaled, rsqrt) is not x:
            continue
        result, weight, inner = scaled, None, (square, mean, add, rsqrt)
        if len(scaled.users) == 1:
            user = next(iter(scaled.users))
            candidate = _other_operand(user, scaled) if user.target in _MUL else None
            value = (
                candidate.meta.get("val", candidate.meta.get("example_value"))
                if isinstance(candidate, fx.Node)
                else None
            )
            if isinstance(value, torch.Tensor) and value.ndim == 1:
                result, weight, inner = user, candidate, inner + (scaled,)
        chains.append(RmsNormChain(x, weight, float(eps), result, inner))
    return chains


def _is_last_dim_keepdim(mean: fx.Node) -> bool:
    dim = mean.args[1] if len(mean.args) > 1 else mean.kwargs.get("dim")
    keepdim = mean.args[2] if len(mean.args) > 2 else mean.kwargs.get("keepdim", False)
    return dim in (-1, [-1], (-1,)) and bool(keepdim)


# ------------------------------------------------------------------ driver
def lower_to_program(gm: fx.GraphModule, example_inputs: Sequence[Any], *, name: str = "npu_partition") -> Program:
    """Lower an NPU partition to a program specialised to the shapes of ``example_inputs``.

    Args:
        gm: a graph whose call nodes all have lowering rules (an NPU partition).
        example_inputs: one value per placeholder: tensors become program inputs (in order);
            Python numbers (sizes under dynamic shapes) are baked into the program.
        name: the program's name.

    Raises:
        LoweringError: naming the node that has no rule or whose lowering has the wrong shape/dtype.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise LoweringError(f"{name}: the graph has {len(placeholders)} inputs, got {len(example_inputs)} values")
    values = fake_node_values(gm, example_inputs)
    chains = find_rmsnorm_chains(gm)
    fused = {chain.result: chain for chain in chains}
    skipped = {node for chain in chains for node in chain.inner}
    builder = ProgramBuilder(name, KERNELS)
    env: dict[fx.Node, Any] = {}
    inputs = iter(example_inputs)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = next(inputs)
            env[node] = builder.add_input(node.name, value) if isinstance(value, torch.Tensor) else value
        elif node.op == "output":
            outputs = node.args[0] if isinstance(node.args[0], (tuple, list)) else [node.args[0]]
            refs = [env[o] if isinstance(o, fx.Node) else o for o in outputs]
            if not all(isinstance(r, Ref) for r in refs):
                raise LoweringError(f"{name}: every output of an NPU partition must be a tensor")
            return builder.program(refs)
        elif node in skipped:
            continue
        elif node.op in ("call_function", "call_method"):
            builder.naming(node.name)
            if node in fused:
                chain = fused[node]
                result = _rms_norm(builder, None, env[chain.x], [1], env.get(chain.weight), chain.eps)
            else:
                result = _lower_node(builder, node, env, values[node])
            _check_result(name, node, result, values[node])
            env[node] = result
        else:
            raise LoweringError(f"{name}: cannot lower {node.op} node {node.name!r}")
    raise LoweringError(f"{name}: the graph has no output node")


def _lower_node(builder: ProgramBuilder, node: fx.Node, env: dict[fx.Node, Any], out: Any) -> Any:
    rule = LOWERINGS.get(node.target)
    if rule is None:
        raise LoweringError(f"no lowering rule for node {node.name!r} ({target_name(node)})")
    args, kwargs = canonical_arguments(node)  # aten.add(self=x, other=y) is aten.add(x, y): one spelling per call
    args = fx.node.map_arg(args, lambda n: env[n])
    kwargs = fx.node.map_arg(kwargs, lambda n: env[n])
    return rule(builder, out, *args, **kwargs)


def _check_result(name: str, node: fx.Node, result: Any, expected: Any) -> None:
    pairs = zip(result, expected) if isinstance(result, tuple) else [(result, expected)]
    for got, want in pairs:
        if got is None or want is None:
            continue
        if not isinstance(got, Ref) or tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
            shown = f"{got.dtype}{list(got.shape)}" if isinstance(got, Ref) else repr(got)
            raise LoweringError(
                f"{name}: lowering {node.name!r} ({target_name(node)}) gave {shown}, "
                f"expected {want.dtype}{list(want.shape)}"
            )
