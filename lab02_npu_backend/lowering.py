"""Lower: turn one NPU partition (an FX graph) into an NPU program.

Each supported target has a *lowering rule* in :data:`LOWERINGS`: a function that receives the
node's arguments (tensors already replaced by :class:`Ref` handles to program tensors) and emits ISA
instructions through a :class:`ProgramBuilder`. Ops outside the ISA are **decomposed** into ISA
primitives where that is exact:

- ``linear`` -> ``permute`` + ``matmul`` + ``add``; ``addmm`` (GPT-2's ``Conv1D``) -> ``matmul`` + ``add``;
- ``neg`` -> ``mul`` by -1; ``x - y`` -> ``x + (-1 * y)``; ``x ** n`` (integer n) -> multiplications;
- ``x / c`` -> ``x * (1 / c)`` (one extra rounding of the constant);
- ``split``/``chunk`` -> one ``slice`` per piece; ReLU6/``hardtanh``/``clamp`` -> the activation unit's clamp;
- eval ``batch_norm`` -> per-channel ``scale = weight * rsqrt(var + eps)``, ``x * scale + shift``;
- ``scaled_dot_product_attention`` -> ``matmul`` (q k^T) -> ``mul`` (scale) -> [``add`` mask] ->
  ``softmax`` (causal flag) -> ``matmul`` (p v); grouped-query attention broadcasts instead of copying;
- ``multi_head_attention_forward`` (``nn.TransformerEncoderLayer``) -> projections + the above;
- the RMSNorm chain ``x * rsqrt(mean(x**2) + eps) * w`` -> a single ``rmsnorm`` instruction.

Nodes that do no work (eval dropout, ``contiguous``, a ``.to`` that keeps the dtype, a view to the
same shape, a cat with an empty tensor) emit no instruction: their rule returns the input's ``Ref``.

Shapes come from running the partition once on *fake* tensors of the real input shapes, so a
program is specialised to one set of input shapes (the backend caches one program per shape).

Given: :class:`Ref` and :class:`ProgramBuilder` (in :mod:`lab02_npu_backend.given.program_builder`; the
builder infers each result's shape by running your simulator kernel on meta tensors), with the rule
type :data:`LowerFn`, :class:`RmsNormChain` and :func:`rule_registrar`, which makes the decorator
:func:`lowers` of the :data:`LOWERINGS` registry; a few example rules.
You write the other rules, the RMSNorm chain finder and the driver :func:`lower_to_program`.
"""

from __future__ import annotations

# These are the imports the finished module uses; the ones marked `noqa: F401` stay unused until
# you write your code.
import math  # noqa: F401
import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

from lab02_npu_backend.given.graphs import fake_node_values, is_number, target_name  # noqa: F401
from lab02_npu_backend.given.ir import Program
from lab02_npu_backend.given.program_builder import (  # noqa: F401
    LowerFn,
    LoweringError,
    ProgramBuilder,
    Ref,
    RmsNormChain,
    rule_registrar,
)
from labkit.spellings import canonical_arguments  # noqa: F401  (one spelling of a call's arguments)

from .simulator import KERNELS  # noqa: F401

aten = torch.ops.aten


#: Every lowering rule, for both dialects (their targets never collide).
LOWERINGS: dict[Any, LowerFn] = {}
#: ``@lowers(target, ...)``: register the rule below it in :data:`LOWERINGS` for every target named.
lowers = rule_registrar(LOWERINGS)


# ------------------------------------------------------------------ example rules
# A rule receives the builder, the node's fake output value (``out.shape``, ``out.dtype``: handy
# for layout ops), then the node's own args and kwargs with every input node replaced by its
# lowered value (a Ref for a tensor, a tuple for a multi-output node, plain Python values as is).
# It returns a Ref (or a tuple, mirroring a multi-output node, with None for outputs it skips).


@lowers(torch.matmul, operator.matmul, "matmul", torch.mm, "mm", torch.bmm, "bmm", aten.mm.default, aten.bmm.default)
def _matmul(b, out, input, other, **_):
    return b.emit("matmul", [input, other])


@lowers(operator.neg, torch.neg, "neg", aten.neg.default)
def _neg(b, out, input):
    return b.emit("mul", [input, -1])  # an int -1 keeps integer and float dtypes unchanged


@lowers(F.dropout, "contiguous", aten.clone.default, aten.alias.default)
def _identity(b, out, input, *_, **__):
    return input  # no instruction: the result is the input tensor itself


# TODO: rules for every target of your support tables (both dialects).
# guidance: begin
# Among them:
#   linear (permute + matmul + add), addmm in both dialects (matmul + add: GPT-2's Conv1D),
#   conv2d / convolution, add / sub (alpha!) / mul / division by a constant, pow(x, n) for an
#   integer n (square-and-multiply: x**3 is x * (x * x), as eager computes it), rsqrt / mean /
#   adaptive_avg_pool2d to 1x1, relu / gelu (approximate="tanh" -> "gelu_tanh") / silu / sigmoid /
#   tanh, hardtanh / relu6 / clamp / clip (function="clamp" with the constant min and/or max),
#   softmax, layer_norm / native_layer_norm, rms_norm (Dynamo records F.rms_norm as torch.rms_norm;
#   eps=None is torch.finfo(x.dtype).eps), batch_norm (eval) /
#   _native_batch_norm_legit_no_training, scaled_dot_product_attention (+ grouped-query:
#   broadcast, do not copy) and its aten flash form: a float mask is added to the scores, a
#   boolean one is the softmax's mask operand, and the softmax sets zero_empty_rows (a query whose
#   every key is masked gets 0, not NaN, as eager); a mask of fewer dimensions broadcasts from the left,
#   and under grouped-query attention its head dimension splits like the queries' (or stays 1);
#   multi_head_attention_forward (sequence-first self-attention), view-like ops (reshape to
#   out.shape; the input itself when the shape does not change), expand (likewise), transpose /
#   t / permute / aten.numpy_T (x.T: every dimension reversed), getitem and
#   torch.Tensor.__getitem__ (slices, ints, None, Ellipsis, one constant list of ints: a slice
#   per index, concatenated), aten.slice / aten.select, split / chunk / aten.split /
#   aten.split_with_sizes (a tuple of slices; the pieces' lengths are in `out`), cat (torch.cat
#   skips 1-D empty tensors, e.g. a KV cache before its first entry: drop them, and a cat of one
#   tensor is that tensor), and the identities of your tables (clone, .to / .float / .type /
#   .type_as / aten._to_copy that keep the dtype: add them to _identity).
# guidance: end


def find_rmsnorm_chains(gm: fx.GraphModule) -> list[RmsNormChain]:
    """Every RMSNorm chain in ``gm`` whose intermediates are used only by the chain (so fusing is safe),
    in both dialects' targets. If another node also reads, say, the rsqrt, fusing would delete a
    value someone needs.
    """
    # guidance: begin
    # Match on targets of both dialects ("pow"/aten.pow.Tensor_Scalar, "mean"/aten.mean.dim,
    # operator.add/aten.add.Tensor, torch.rsqrt/aten.rsqrt.default, operator.mul/aten.mul.Tensor),
    # from each rsqrt up to its pow and down to the multiplications; check every intermediate has
    # exactly one user.
    # guidance: end
    # TODO
    raise NotImplementedError("find_rmsnorm_chains")


# ------------------------------------------------------------------ driver
def lower_to_program(gm: fx.GraphModule, example_inputs: Sequence[Any], *, name: str = "npu_partition") -> Program:
    """Lower an NPU partition to a program specialised to the shapes of ``example_inputs``.

    Args:
        gm: a graph whose call nodes all have lowering rules (an NPU partition).
        example_inputs: one value per placeholder: tensors become program inputs (in order, named
            after their placeholders: ``builder.add_input``); Python numbers (sizes under dynamic
            shapes) are baked into the program.
        name: the program's name.

    Returns:
        The program (plain JSON data, see :mod:`lab02_npu_backend.given.ir`), from ``builder.program``.

    Raises:
        LoweringError: naming the node that has no rule, or whose lowering's result does not have
            the shape and dtype the fake run recorded (check every node: it catches rule bugs early).

    """
    # guidance: begin
    # Steps: fake_node_values (from lab02_npu_backend.given.graphs) for every node's output;
    # builder = ProgramBuilder(name, KERNELS) (from lab02_npu_backend.given.program_builder); find the
    # RMSNorm chains; walk the nodes in order (builder.naming(node.name) before lowering each, so
    # tensors are named after nodes), mapping each node to its lowered value; emit rmsnorm at each
    # chain's result and nothing for its inner nodes; the output node's argument (a node or a tuple
    # of nodes) gives the outputs. Call each rule with canonical_arguments(node) (from
    # labkit.spellings): F.gelu(input=x) and F.gelu(x) are one call, and a graph may spell it either way.
    # guidance: end
    # TODO
    raise NotImplementedError("lower_to_program")
