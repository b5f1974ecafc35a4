"""Every sample PyTorch's own test suite gives an operator, run through the backend and compared with eager.

PyTorch tests each of its operators against one database, the OpInfos
(``torch.testing._internal.common_methods_invocations.op_db``). An OpInfo's *sample inputs* pass each
argument at values other than its default (negative dims, ``keepdim``, ``eps``, ``approximate="tanh"``,
``alpha``, a scalar on either side, broadcasting, 0-dim, empty and non-contiguous tensors); its *reference
inputs*, five times as many, add data that finds bugs (infinities, NaN, huge and tiny values). Those samples
are written from each operator's schema by the people who wrote the operator, not from the cases this course
thought of, which is why the lab borrows them instead of listing arguments by hand. Where the OpInfos pass an
argument at one value only, :data:`WRITTEN_SAMPLES` adds calls that pass it at another.

:data:`COURSE_OPS` names the OpInfos of the operators the standard models produce (what a support table
claims). :func:`op_samples` turns each of their samples into an :class:`OpSample`, a call on tensors;
:func:`samples_off_eager` compiles the samples with the backend of one dialect and names those whose answer
differs from eager's. A sample a backend does not support falls back to the CPU and is right, so the only way
to fail is to claim a call and then lower it wrongly, or to raise. The graded test runs the sample inputs in
both dialects (about a minute); the reference inputs are there for you (``op_samples(reference_inputs=True)``).

The database lives in PyTorch's test utilities: importing it takes a few seconds and needs the
``expecttest`` package (a course dependency), so this module imports it on first use.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from lab02_npu_backend.given import coverage
from lab02_npu_backend.given.checks import RespellingBackend, what_was_raised
from lab02_npu_backend.given.coverage import NpuCoverageWarning
from labkit.numerics import fresh_copies, output_error, outputs_close
from labkit.spellings import ARGUMENT_SPELLINGS

#: OpInfo names (``name`` or ``name.variant``) of the operators the standard models produce, in both dialects.
#: (Not ``nn.functional.multi_head_attention_forward``: its 256 samples, each keyword alone, would make a
#: graded test of five minutes; the hand-written tests give it masks and weights.)
COURSE_OPS: tuple[str, ...] = (
    # arithmetic, with scalars on either side and broadcasting
    "add", "sub", "rsub", "__rsub__", "mul", "__rmul__", "div.no_rounding_mode", "div.trunc_rounding",
    "div.floor_rounding", "true_divide", "__rdiv__", "neg", "pow", "__rpow__", "rsqrt",
    # activations
    "nn.functional.relu", "nn.functional.relu6", "nn.functional.gelu", "nn.functional.silu", "sigmoid", "tanh",
    "nn.functional.hardtanh", "nn.functional.hardswish", "nn.functional.hardsigmoid", "clamp", "clamp_min", "clamp_max",
    # reductions and normalizations
    "mean", "softmax", "softmax.with_dtype", "nn.functional.layer_norm", "nn.functional.batch_norm",
    "nn.functional.rms_norm",
    # matrix products and their modules' functions
    "mm", "bmm", "matmul", "addmm", "addmm.decomposed", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.scaled_dot_product_attention", "nn.functional.adaptive_avg_pool2d", "nn.functional.dropout",
    # views, copies and layout
    "view", "reshape", "flatten", "unflatten", "squeeze", "squeeze.multiple", "unsqueeze", "permute", "transpose",
    "t", "T", "mT", "movedim", "expand", "select", "slice", "narrow", "__getitem__", "split", "split.list_args",
    "chunk", "cat", "clone", "contiguous", "to",
)  # fmt: skip

#: Calls no OpInfo sample above makes, with the shapes of their tensors. Each passes an argument that the OpInfos
#: pass at one value only (or never leave at its default): in-place activations (on a graph input, a write the
#: caller sees, and on an intermediate), ``alpha``/``beta`` of the methods, ``dtype`` of ``mean``, ``end_dim``,
#: ``memory_format``, the attention's ``scale``, eval dropout in place; or spells the call in a way no OpInfo
#: sample reaches a Dynamo graph with (``x.relu()``, ``-x``, ``x / 2.0``, ``F.softmax``, ``torch.clip``,
#: ``x.float()``, ``x.type_as(y)``): every target a support table may claim is met; or spells dims as separate
#: arguments (``x.permute(2, 0, 1)``), indexes by negative list entries, or gives data where an argument decides
#: the answer (a default eps on rows of tiny variance). (Samples that draw random
#: numbers cannot be compared here, :func:`_replayable`: a graded test of its own runs dropout in training.) They were
#: found by reading the calls the samples put into a backend's graphs against their signatures' defaults, where a
#: signature can be read (an instructor test of the course does so, and names any argument still met at one
#: value only); they run with their OpInfo's samples.
#: Data that finds the shortcuts: ``x * (x > 0)`` for relu is nan at -inf.
_EXTREMES = torch.tensor([[-math.inf, math.inf, math.nan, -2.0, -0.0, 0.0, 3.0]])

#: A boolean attention mask (5 queries, 6 keys) that leaves every query at least one key, and a shift that moves the
#: last key (masked for all queries but the last) 1e6 along every axis: a mask written as a finite fill (``-1e4``)
#: lets it win.
_BOOLEAN_MASK = torch.ones(5, 6, dtype=torch.bool).tril(1)
_LAST_KEY_FAR = torch.zeros(6, 8).index_fill_(0, torch.tensor([5]), 1e6)

#: (A tensor's shape draws it from :data:`SAMPLE_DTYPE`'s normal distribution; where the data itself is the point,
#: the tensor is written out: infinities and NaN, a dtype other than float32, a 0-dim operand, a mask.)
WRITTEN_SAMPLES: dict[str, tuple[tuple[str, Callable[..., Any], tuple[tuple[int, ...] | torch.Tensor, ...]], ...]] = {
    "add": (
        ("x.add(y, alpha=2)", lambda x, y: x.add(y, alpha=2), ((3, 4), (3, 4))),
        ("x.add_(y, alpha=-0.5)", lambda x, y: x.add_(y, alpha=-0.5), ((3, 4), (4,))),
        # alpha=0 turns the term off: `alpha or 1` reads it as not given (so do beta, min and max below)
        ("x.add(y, alpha=0)", lambda x, y: x.add(y, alpha=0), ((3, 4), (3, 4))),
        ("torch.add(x, y, alpha=0.0)", lambda x, y: torch.add(x, y, alpha=0.0), ((3, 4), (3, 4))),
        ("x + torch.tensor(0.5), x float16 (a 0-dim float32 operand does not promote)", lambda x, c: x + c,
         (torch.linspace(-2, 2, 12).reshape(3, 4).half(), torch.tensor(0.5))),
    ),
    "mul": (("x * torch.tensor(2) (a 0-dim int64 operand)", lambda x, two: x * two, ((3, 4), torch.tensor(2))),),
    "sub": (
        ("x.sub(y, alpha=2)", lambda x, y: x.sub(y, alpha=2), ((3, 4), (3, 4))),
        ("x.sub_(y, alpha=3)", lambda x, y: x.sub_(y, alpha=3), ((3, 4), (1, 4))),
        ("x.sub(y, alpha=0)", lambda x, y: x.sub(y, alpha=0), ((3, 4), (3, 4))),
        ("torch.sub(x, y, alpha=0.0)", lambda x, y: torch.sub(x, y, alpha=0.0), ((3, 4), (3, 4))),
    ),
    "addmm": (
        ("x.addmm(a, b, beta=0.5)", lambda x, a, b: x.addmm(a, b, beta=0.5), ((2, 3), (2, 4), (4, 3))),
        ("x.addmm_(a, b, alpha=2)", lambda x, a, b: x.addmm_(a, b, alpha=2), ((2, 3), (2, 4), (4, 3))),
        ("torch.addmm(x, a, b, alpha=2)", lambda x, a, b: torch.addmm(x, a, b, alpha=2), ((2, 3), (2, 4), (4, 3))),
        ("x.addmm(a, b, beta=0)", lambda x, a, b: x.addmm(a, b, beta=0), ((2, 3), (2, 4), (4, 3))),
        ("x.addmm(a, b, alpha=0)", lambda x, a, b: x.addmm(a, b, alpha=0), ((2, 3), (2, 4), (4, 3))),
        ("torch.addmm(x, a, b, beta=0.0)", lambda x, a, b: torch.addmm(x, a, b, beta=0.0), ((2, 3), (2, 4), (4, 3))),
        ("torch.addmm(x, a, b, alpha=0.0)", lambda x, a, b: torch.addmm(x, a, b, alpha=0.0), ((2, 3), (2, 4), (4, 3))),
    ),
    # Exponents other than 2 (OpInfo's Tensor_Scalar samples square): x ** 3, a root, a reciprocal.
    "pow": (
        ("x ** 3", lambda x: x**3, ((3, 4),)),
        ("(x.abs() + 0.5) ** 0.5", lambda x: (x.abs() + 0.5) ** 0.5, ((3, 4),)),
        ("(x.abs() + 0.5).pow(-1.0)", lambda x: (x.abs() + 0.5).pow(-1.0), ((3, 4),)),
    ),
    # A transposed convolution is an aten.convolution with transposed=True (positional); a dilation alone.
    "nn.functional.conv2d": (
        ("F.conv_transpose2d(x, w)", lambda x, w: torch.nn.functional.conv_transpose2d(x, w),
         ((1, 3, 5, 5), (3, 3, 3, 3))),
        ("F.conv2d(x, w, dilation=2)", lambda x, w: torch.nn.functional.conv2d(x, w, dilation=2),
         ((1, 3, 7, 7), (4, 3, 3, 3))),
    ),
    "chunk": (("x.chunk(2)", lambda x: x.chunk(2), ((4, 3),)),),
    # Data where an argument matters: eps decides a normalisation only where the variance is small.
    "nn.functional.layer_norm": (
        ("F.layer_norm(x * 1e-3, (8,))", lambda x: torch.nn.functional.layer_norm(x * 1e-3, (8,)), ((4, 8),)),
        ("F.layer_norm(x, (8,), weight=w)", lambda x, w: torch.nn.functional.layer_norm(x, (8,), weight=w),
         ((4, 8), (8,))),
        ("F.layer_norm(x, (8,), bias=b)", lambda x, b: torch.nn.functional.layer_norm(x, (8,), bias=b),
         ((4, 8), (8,))),
        ("F.layer_norm(x * 1e-3, (8,), eps=0.0)", lambda x: torch.nn.functional.layer_norm(x * 1e-3, (8,), eps=0.0),
         ((4, 8),)),
        ("F.layer_norm(x * 1e-3, (3, 8), eps=1e-4)",
         lambda x: torch.nn.functional.layer_norm(x * 1e-3, (3, 8), eps=1e-4), ((2, 3, 8),)),
    ),
    "nn.functional.batch_norm": (
        ("F.batch_norm(x, mean, var * 1e-6, w, b)",
         lambda x, m, v, w, b: torch.nn.functional.batch_norm(x * 1e-3, m * 1e-3, v.abs() * 1e-6, w, b),
         ((2, 3, 4), (3,), (3,), (3,), (3,))),
        ("F.batch_norm(x, mean, var, weight=w)", lambda x, m, v, w: torch.nn.functional.batch_norm(
            x, m, v.abs() + 0.5, weight=w), ((2, 3, 4), (3,), (3,), (3,))),
        ("F.batch_norm(x, mean, var, bias=b)", lambda x, m, v, b: torch.nn.functional.batch_norm(
            x, m, v.abs() + 0.5, bias=b), ((2, 3, 4), (3,), (3,), (3,))),
        ("F.batch_norm(x, mean, var * 1e-6, eps=1e-3)", lambda x, m, v: torch.nn.functional.batch_norm(
            x * 1e-3, m * 1e-3, v.abs() * 1e-6, eps=1e-3), ((2, 3, 4), (3,), (3,))),
        ("F.batch_norm(x, mean, var * 1e-6, eps=0.0)", lambda x, m, v: torch.nn.functional.batch_norm(
            x * 1e-3, m * 1e-3, v.abs() * 1e-6, eps=0.0), ((2, 3, 4), (3,), (3,))),
        ("F.batch_norm(x, mean, var, momentum=0.5)", lambda x, m, v: torch.nn.functional.batch_norm(
            x, m, v.abs() + 0.5, momentum=0.5), ((2, 3, 4), (3,), (3,))),
    ),
    "nn.functional.rms_norm": (
        ("F.rms_norm(x * 1e-3, (8,), eps=1e-4)", lambda x: torch.nn.functional.rms_norm(x * 1e-3, (8,), eps=1e-4),
         ((4, 8),)),
        ("F.rms_norm(x * 1e-3, (8,), eps=0.0)", lambda x: torch.nn.functional.rms_norm(x * 1e-3, (8,), eps=0.0),
         ((4, 8),)),
    ),
    # Varargs and index spellings the OpInfos never use: dims as separate arguments, negative list indices.
    "permute": (("x.permute(2, 0, 1)", lambda x: x.permute(2, 0, 1), ((2, 3, 4),)),),
    "view": (("x.view(4, -1)", lambda x: x.view(4, -1), ((2, 3, 4),)),),
    "reshape": (("x.reshape(-1, 3)", lambda x: x.reshape(-1, 3), ((2, 3, 4),)),),
    "expand": (("x.expand(2, -1, -1)", lambda x: x.expand(2, -1, -1), ((1, 3, 4),)),),
    "__getitem__": (
        ("x[:, [0, -1]]", lambda x: x[:, [0, -1]], ((3, 4),)),
        ("x[None, 0]", lambda x: x[None, 0], ((3, 4),)),
    ),
    # Rounding division by a constant (the OpInfos divide by tensors only, which the NPU leaves to the CPU).
    "div.floor_rounding": (("torch.div(x * 3, 2.0, rounding_mode='floor')",
                            lambda x: torch.div(x * 3, 2.0, rounding_mode="floor"), ((3, 4),)),),
    "div.trunc_rounding": (("x.div(3, rounding_mode='trunc')", lambda x: x.div(3, rounding_mode="trunc"), ((3, 4),)),),
    # Spellings the OpInfos never produce in a Dynamo graph (a method, an operator, an alias of the function).
    "bmm": (("x.bmm(y)", lambda x, y: x.bmm(y), ((2, 3, 4), (2, 4, 5))),),
    "neg": (
        ("x.neg()", lambda x: x.neg(), ((3, 4),)),
        ("-x", lambda x: -x, ((3, 4),)),
        ("-x on int32", lambda x: -x, (torch.tensor([[3, -2, 0]], dtype=torch.int32),)),
    ),
    "div.no_rounding_mode": (
        ("x / 2.0", lambda x: x / 2.0, ((3, 4),)),
        ("x / y", lambda x, y: x / y, ((3, 4), (4,))),
    ),
    "tanh": (
        ("x.tanh()", lambda x: x.tanh(), ((3, 4),)),
        ("F.tanh(x)", lambda x: torch.nn.functional.tanh(x), ((3, 4),)),
    ),
    "sigmoid": (("F.sigmoid(x)", lambda x: torch.nn.functional.sigmoid(x), ((3, 4),)),),
    "softmax": (
        ("F.softmax(x, dim=-1)", lambda x: torch.nn.functional.softmax(x, dim=-1), ((3, 4),)),
        ("F.softmax(x) (no dim: PyTorch's implicit choice)", lambda x: torch.nn.functional.softmax(x), ((3, 4),)),
        ("F.softmax(x, -1, _stacklevel=5)", lambda x: torch.nn.functional.softmax(x, -1, _stacklevel=5), ((3, 4),)),
        ("F.softmax(x, 0, dtype=torch.float64)", lambda x: torch.nn.functional.softmax(x, 0, dtype=torch.float64),
         ((3, 4),)),
    ),
    "split": (
        ("torch.split(tensor=x, split_size_or_sections=2, dim=1)",
         lambda x: torch.split(tensor=x, split_size_or_sections=2, dim=1), ((3, 5),)),
        ("x.split(2, dim=1)", lambda x: x.split(2, dim=1), ((3, 5),)),
        ("x.split(2)", lambda x: x.split(2), ((5, 3),)),
        ("x.split(3, dim=1)", lambda x: x.split(3, dim=1), ((3, 5),)),
        ("x.split([1, 4], dim=1)", lambda x: x.split([1, 4], dim=1), ((3, 5),)),
    ),
    "clamp": (
        ("x.clamp(max=0.5)", lambda x: x.clamp(max=0.5), ((3, 4),)),
        ("torch.clamp(x, min=-0.5)", lambda x: torch.clamp(x, min=-0.5), ((3, 4),)),
        ("x.clip(-0.5, 0.5)", lambda x: x.clip(-0.5, 0.5), ((3, 4),)),
        ("x.clip(max=0.5)", lambda x: x.clip(max=0.5), ((3, 4),)),
        ("x.clip(min=-0.5)", lambda x: x.clip(min=-0.5), ((3, 4),)),
        ("torch.clip(x, max=0.25)", lambda x: torch.clip(x, max=0.25), ((3, 4),)),
        ("torch.clip(x, -0.25)", lambda x: torch.clip(x, -0.25), ((3, 4),)),
        ("x.clamp(min=0)", lambda x: x.clamp(min=0), ((3, 4),)),
        ("x.clamp(max=0.0)", lambda x: x.clamp(max=0.0), ((3, 4),)),
        ("torch.clamp(x, 0.0)", lambda x: torch.clamp(x, 0.0), ((3, 4),)),
        ("torch.clamp(x, max=0)", lambda x: torch.clamp(x, max=0), ((3, 4),)),
        ("x.clip(0.0)", lambda x: x.clip(0.0), ((3, 4),)),
        ("x.clip(-1.0, 0.0)", lambda x: x.clip(-1.0, 0.0), ((3, 4),)),
        ("torch.clip(x, min=0.0)", lambda x: torch.clip(x, min=0.0), ((3, 4),)),
        ("torch.clip(x, max=0.0)", lambda x: torch.clip(x, max=0.0), ((3, 4),)),
    ),
    "clone": (
        ("x.clone(memory_format=torch.channels_last)", lambda x: x.clone(memory_format=torch.channels_last),
         ((2, 3, 4, 5),)),
        ("torch.clone(x, memory_format=torch.channels_last)",
         lambda x: torch.clone(x, memory_format=torch.channels_last), ((2, 3, 4, 5),)),
    ),
    "flatten": (
        ("x.flatten(0, 1)", lambda x: x.flatten(0, 1), ((2, 3, 4, 5),)),
        ("torch.flatten(x, 1, 2)", lambda x: torch.flatten(x, 1, 2), ((2, 3, 4, 5),)),
        ("torch.flatten(x, end_dim=1)", lambda x: torch.flatten(x, end_dim=1), ((2, 3, 4, 5),)),
    ),
    "mean": (
        ("x.mean(-1) in float16 over 1000 values (their sum is past float16's range)", lambda x: x.mean(-1),
         (torch.full((2, 1000), 100.0, dtype=torch.float16),)),
        ("x.mean(-1, dtype=torch.float64)", lambda x: x.mean(-1, dtype=torch.float64), ((3, 4),)),
        ("torch.mean(x, dtype=torch.float64)", lambda x: torch.mean(x, dtype=torch.float64), ((3, 4),)),
    ),
    "nn.functional.relu": (
        ("x.relu()", lambda x: x.relu(), ((3, 4),)),
        ("torch.relu(x)", lambda x: torch.relu(x), ((3, 4),)),
        ("F.relu(x) on -inf, inf and nan", lambda x: torch.nn.functional.relu(x), (_EXTREMES,)),
        ("F.relu(x, inplace=True)", lambda x: torch.nn.functional.relu(x, inplace=True), ((3, 4),)),
        ("F.relu(x * 2, inplace=True)", lambda x: torch.nn.functional.relu(x * 2, inplace=True), ((3, 4),)),
    ),
    "nn.functional.relu6": (
        ("F.relu6(x * 4, inplace=True)", lambda x: torch.nn.functional.relu6(x * 4, inplace=True), ((3, 4),)),
    ),
    "nn.functional.hardtanh": (
        ("F.hardtanh(x, -0.5, 0.5, True)", lambda x: torch.nn.functional.hardtanh(x, -0.5, 0.5, True), ((3, 4),)),
        ("F.hardtanh(x * 2)", lambda x: torch.nn.functional.hardtanh(x * 2), ((3, 4),)),
        ("F.hardtanh(x * 2, inplace=True)", lambda x: torch.nn.functional.hardtanh(x * 2, inplace=True), ((3, 4),)),
    ),
    "nn.functional.hardswish": (
        ("F.hardswish(x * 3, inplace=True)", lambda x: torch.nn.functional.hardswish(x * 3, inplace=True), ((3, 4),)),
        ("F.hardswish(x, inplace=True)", lambda x: torch.nn.functional.hardswish(x, inplace=True), ((3, 4),)),
    ),
    "nn.functional.dropout": (
        ("F.dropout(x, training=False)", lambda x: torch.nn.functional.dropout(x, training=False), ((3, 4),)),
        ("F.dropout(x, 0.3, False, True)", lambda x: torch.nn.functional.dropout(x, 0.3, False, True), ((3, 4),)),
    ),
    "nn.functional.scaled_dot_product_attention": (
        ("sdpa(q, k, v, scale=0.3)", lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, scale=0.3), ((2, 2, 5, 8), (2, 2, 6, 8), (2, 2, 6, 8))),
        ("sdpa(q, k, v, scale=0.0)", lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, scale=0.0), ((2, 2, 5, 8), (2, 2, 6, 8), (2, 2, 6, 8))),
        ("sdpa(q.abs(), k + far, v, attn_mask=boolean) (a masked key scoring far above the others)",
         lambda q, k, v, mask, far: torch.nn.functional.scaled_dot_product_attention(
             q.abs(), k + far, v, attn_mask=mask),
         ((1, 2, 5, 8), (1, 2, 6, 8), (1, 2, 6, 8), _BOOLEAN_MASK, _LAST_KEY_FAR)),
        ("sdpa(q, k, v, is_causal=True, scale=2.0)", lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=2.0), ((2, 2, 5, 8), (2, 2, 6, 8), (2, 2, 6, 8))),
    ),
    "to": (
        ("x.to(memory_format=torch.channels_last)", lambda x: x.to(memory_format=torch.channels_last),
         ((2, 3, 4, 5),)),
        ("x.float()", lambda x: x.float() * 2, ((3, 4),)),
        ("x.double()", lambda x: x.double(), ((3, 4),)),
        ("x.type(torch.float32)", lambda x: x.type(torch.float32) * 2, ((3, 4),)),
        ("x.type(torch.float64)", lambda x: x.type(torch.float64), ((3, 4),)),
        ("x.type_as(y)", lambda x, y: x.type_as(y) + y, ((3, 4), (3, 4))),
    ),
}  # fmt: skip

#: The dtype every sample is drawn in: the one every ISA op supports.
SAMPLE_DTYPE = torch.float32

#: The seed each sample runs from, in eager and compiled, so that a random op draws the same numbers in both.
SAMPLE_SEED = 0


@dataclass(frozen=True)
class OpSample:
    """One OpInfo sample as a call on tensors: ``call(*tensors)`` is the operator applied to the sample.

    The sample's other arguments (numbers, dims, shapes, flags) are constants inside ``call``, as a tracer
    records them; :attr:`description` spells the whole call, for messages.
    """

    op: str
    description: str
    call: Callable[..., Any]
    tensors: tuple[torch.Tensor, ...]


@cache
def _op_db() -> dict[str, Any]:
    # Importing PyTorch's test utilities freezes torch.backends' flags (torch.backends.disable_global_flags), for
    # PyTorch's own suite; imported inside torch.backends' own "mutation allowed" block, they stay as they were.
    # (torch.backends is a module subclass, so its private helper is reached through a function's globals.)
    allow_mutation = torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation"]
    with allow_mutation():
        from torch.testing._internal.common_methods_invocations import op_db

    return {op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""): op for op in op_db}


def _spelled(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        strided = "" if value.is_contiguous() else ", strided"
        return f"Tensor{list(value.shape)}{strided}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_spelled(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, float):
        return f"{value:.4g}"
    return repr(value)


def _describe(name: str, sample: Any) -> str:
    arguments = [_spelled(sample.input), *(_spelled(a) for a in sample.args)]
    arguments += [f"{key}={_spelled(value)}" for key, value in sample.kwargs.items()]
    return f"{name}({', '.join(arguments)})"


#: OpInfos whose function seeds the generator inside the call (``wrapper_set_seed``), which Dynamo runs eagerly,
#: untested: their samples call the operator itself (a sample that draws numbers is then left out, unreplayable).
_SEEDED_INSIDE: dict[str, Callable[..., Any]] = {
    "nn.functional.scaled_dot_product_attention": torch.nn.functional.scaled_dot_product_attention,
    "nn.functional.dropout": torch.nn.functional.dropout,
}


def _variants(op: Any) -> list[tuple[str, Callable[..., Any]]]:
    """The spellings of ``op`` a model may use, each with the name a message shows: the function
    (``torch.add``), the method (``Tensor.add``), the operator (``operator.add``: ``x + y``), and the in-place
    method and operator (``Tensor.add_``, ``operator.iadd``: ``x += y``)."""
    variants = [(op.name, _SEEDED_INSIDE.get(op.name, op.op))]
    for kind in ("method_variant", "operator_variant", "inplace_variant", "inplace_operator_variant"):
        variant = getattr(op, kind, None)
        if variant is not None:
            owner = "Tensor" if "method" in kind or kind == "inplace_variant" else "operator"
            variants.append((f"{owner}.{getattr(variant, '__name__', kind)}", variant))
    return variants


def _as_call(function: Callable[..., Any], sample: Any) -> tuple[Callable[..., Any], tuple[torch.Tensor, ...]]:
    leaves, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def call(*tensors: torch.Tensor) -> Any:
        filled = list(leaves)
        for position, tensor in zip(positions, tensors, strict=True):
            filled[position] = tensor
        first, args, kwargs = tree_unflatten(filled, spec)
        return function(first, *args, **kwargs)

    return call, tuple(leaves[i] for i in positions)


def _each_keyword_alone(sample: Any) -> list[Any]:
    """``sample``, then, where it passes two or more keywords, one sample per keyword with only that one:
    OpInfo often moves several arguments together (``addmm(..., beta=0.2, alpha=0.6)``), and a support check
    that reads one of them refuses the call for the wrong reason and never meets the other alone."""
    alone = []
    if len(sample.kwargs) > 1:
        alone = [
            type(sample)(sample.input, args=sample.args, kwargs={key: value}) for key, value in sample.kwargs.items()
        ]
    return [sample, *alone]


def known_op_names() -> set[str]:
    """The OpInfo names this PyTorch has (``name`` or ``name.variant``)."""
    return set(_op_db())


def _replayable(call: Callable[..., Any], tensors: Sequence[torch.Tensor]) -> bool:
    """Eager runs ``call`` and gives the same answer from two seeds (a random op that OpInfo seeds inside the call
    cannot be replayed by seeding outside it, so it cannot be compared)."""
    try:
        first, second = (_run_seeded(call, tensors, seed) for seed in (SAMPLE_SEED, SAMPLE_SEED + 1))
    except Exception:  # a sample that checks eager's own error message, or a variant this sample cannot take
        return False
    return outputs_close(first, second, rtol=0, atol=0)


def op_samples(names: Iterable[str] = COURSE_OPS, *, reference_inputs: bool = False) -> list[OpSample]:
    """The samples of the OpInfos ``names`` (their sample inputs, or with ``reference_inputs`` their reference
    inputs, a superset five times larger), in :data:`SAMPLE_DTYPE` on the CPU, each one eager can run and
    replay (:func:`_replayable`). A name this PyTorch has no OpInfo for is skipped.

    Each sample is spelled in one of the operator's variants (:func:`_variants`), in turn: the first sample as
    the function, the next as the method, then the operator, the in-place method and the in-place operator,
    each falling to the next variant where eager refuses it (``x += y`` cannot broadcast ``x``). So a table
    that knows ``torch.add`` but lowers ``x.add(y)`` or ``x += y`` wrongly meets them too, without running
    every sample five times."""
    database = _op_db()
    samples = []
    for name in names:
        op = database.get(name)
        if op is None:  # an older PyTorch without this OpInfo (the pinned one has each: a course test checks)
            continue
        variants = _variants(op)
        generate = op.reference_inputs if reference_inputs else op.sample_inputs
        generated = generate("cpu", SAMPLE_DTYPE, requires_grad=False)
        for index, sample in enumerate(alone for sample in generated for alone in _each_keyword_alone(sample)):
            for turn in range(len(variants)):
                spelling, function = variants[(index + turn) % len(variants)]
                call, tensors = _as_call(function, sample)
                if _replayable(call, tensors):
                    samples.append(OpSample(name, _describe(spelling, sample), call, tensors))
                    break
        samples += _written_samples(name)
    return samples


def _written_samples(name: str) -> list[OpSample]:
    """The :data:`WRITTEN_SAMPLES` of the OpInfo ``name``: each tensor written out, or drawn from a fixed seed."""
    generator = torch.Generator().manual_seed(SAMPLE_SEED)
    samples = []
    for description, call, shapes in WRITTEN_SAMPLES.get(name, ()):
        tensors = tuple(
            t.clone() if isinstance(t, torch.Tensor) else torch.randn(t, generator=generator, dtype=SAMPLE_DTYPE)
            for t in shapes
        )
        if not _replayable(call, tensors):
            raise AssertionError(f"the written sample {description} cannot be replayed from a seed")
        samples.append(OpSample(name, description, call, tensors))
    return samples


def _run_seeded(function: Callable[..., Any], tensors: Sequence[torch.Tensor], seed: int = SAMPLE_SEED) -> Any:
    """``function``'s answer from ``seed``, on copies of ``tensors`` (same strides), and those copies after the
    call: an in-place variant's write is part of the answer."""
    copies = fresh_copies(tensors)
    torch.manual_seed(seed)
    with torch.no_grad():
        return function(*copies), copies


def _difference(sample: OpSample, got: Any, want: Any, tolerance: float, what: str = "") -> str | None:
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        got, want = tuple(got), tuple(want)
    if outputs_close(got, want, rtol=tolerance, atol=tolerance):
        return None
    try:
        return f"{sample.description}{what} (off by {output_error(got, want).max_abs:.3g})"
    except Exception:
        return f"{sample.description}{what} (a different shape, dtype or structure)"


def _compiled_off_eager(backend: Any, samples: Sequence[OpSample], tolerance: float) -> list[str]:
    """Compile ``samples`` (one operator's) as one function, one output each; if that raises, each half alone
    (so a few raising samples among a hundred cost a few compiles each, not a hundred)."""

    def every_sample(*tensors: torch.Tensor) -> tuple[Any, ...]:
        answers, start = [], 0
        for sample in samples:
            answers.append(sample.call(*tensors[start : start + len(sample.tensors)]))
            start += len(sample.tensors)
        return tuple(answers)

    tensors = [t for sample in samples for t in sample.tensors]
    want, inputs_after_eager = _run_seeded(every_sample, tensors)
    torch._dynamo.reset()
    try:
        got, inputs_after = _run_seeded(torch.compile(every_sample, backend=backend), tensors)
    except Exception as error:
        if len(samples) == 1:
            return [f"{samples[0].description} (raised {what_was_raised(error, limit=200)})"]
        half = len(samples) // 2
        return _compiled_off_eager(backend, samples[:half], tolerance) + _compiled_off_eager(
            backend, samples[half:], tolerance
        )
    wrong, start = [], 0
    for sample, answer, eager_answer in zip(samples, got, want, strict=True):
        end = start + len(sample.tensors)
        wrong.append(
            _difference(sample, answer, eager_answer, tolerance)
            or _difference(sample, inputs_after[start:end], inputs_after_eager[start:end], tolerance, ": its inputs")
        )
        start = end
    return [message for message in wrong if message is not None]


def _groups(lab: Any, dialect: str, samples: Sequence[OpSample]) -> list[tuple[Any, list[OpSample]]]:
    """The samples in compile groups, each with its backend: one group per operator in the aten dialect; in the
    torch dialect three, the operator's samples dealt in turn to each :data:`~labkit.spellings.ARGUMENT_SPELLINGS`
    (by name, by position with the defaults written out, the defaults left out), as models spell calls."""
    by_op: dict[str, list[OpSample]] = {}
    for sample in samples:
        by_op.setdefault(sample.op, []).append(sample)
    if dialect == "aten":
        return [(lab.npu_aot_backend, group) for group in by_op.values()]
    groups = []
    for group in by_op.values():
        for turn, spelling in enumerate(ARGUMENT_SPELLINGS):
            dealt = [replace(s, description=f"{s.description} [spelled: {spelling}]") for s in group[turn::3]]
            if dealt:
                groups.append((RespellingBackend(lab, dialect, spelling), dealt))
    return groups


def samples_off_eager(
    lab: Any, dialect: str, samples: Sequence[OpSample], *, tolerance: float
) -> tuple[list[str], list[coverage.GraphCoverage]]:
    """Compile the samples with ``lab``'s backend of ``dialect`` (Dynamo's torch-level graphs, each call's arguments
    respelled in turn; or AOTAutograd's aten graphs through ``lab.npu_aot_backend``) and run them from
    :data:`SAMPLE_SEED`, as eager ran; the samples whose answer differs (or whose compile or run raised, a starter's
    TODO excepted: that is raised), and the coverage of every graph compiled. The samples of one operator (and
    spelling) compile together, one output each."""
    # One operator's samples may recompile a frame once each (an OpInfo wrapper that breaks the graph); past
    # Dynamo's usual limit it would run them eagerly, untested.
    limits = torch._dynamo.config.patch(recompile_limit=100_000, accumulated_recompile_limit=100_000)
    with warnings.catch_warnings(), coverage.collect() as graphs, limits:
        warnings.simplefilter("ignore", NpuCoverageWarning)
        wrong = [
            message
            for backend, group in _groups(lab, dialect, samples)
            for message in _compiled_off_eager(backend, group, tolerance)
        ]
    return wrong, graphs
