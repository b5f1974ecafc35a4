"""Can the NPU run this node? One support table per graph dialect, checked against the ISA.

A backend receives graphs in one of two dialects, and the *same* model looks different in each:

- **torch** (what a plain ``torch.compile`` backend gets from Dynamo): targets are Python callables
  (``torch._C._nn.linear``, ``operator.add``, ``torch.nn.functional.layer_norm``) or, for
  ``call_method`` nodes, method names (``"view"``, ``"transpose"``);
- **aten** (what a backend gets through AOTAutograd): targets are ``OpOverload`` objects
  (``aten.addmm.default``, ``aten.native_layer_norm.default``).

A table written for one dialect matches *nothing* in the other: the classic "why is my accelerator
doing nothing?" bug. So each dialect has its own table, and both tables map a target to the ISA ops
its lowering emits; the dtype check then asks the ISA whether every one of those ops supports the
node's dtype. Constraints that depend on arguments (``pow`` only with a small integer exponent,
``dropout`` only when it is the identity, ...) live in :data:`CONSTRAINTS`.

The same predicate also says which nodes do no work at all (:meth:`NpuOperatorSupport.elision_reason`):
eval-mode dropout, a ``.to`` that keeps the dtype, a view to the same shape, an empty tensor. The
coverage report lists them as *elided*, outside the NPU fraction, so identities never pad it.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import fx
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.fx.passes.operator_support import OperatorSupport

from lab02_npu_backend.given.graphs import is_number, is_tuple_unpack, node_arg, node_value, target_name, tensors_in
from lab02_npu_backend.given.isa import DTYPE_NAMES, SHAPE_ONLY_OPS, Isa, default_isa
from lab02_npu_backend.given.support_tools import Constraint, SupportTable, Target, only_first_output_used, pow_check

aten = torch.ops.aten

_LINEAR = ("permute", "matmul", "add")
_ADDMM = ("matmul", "add")
_ATTENTION = ("permute", "matmul", "mul", "add", "softmax", "reshape")
_BATCH_NORM = ("reshape", "add", "rsqrt", "mul")

#: Dynamo's torch-level targets.
TORCH_SUPPORT: dict[Target, tuple[str, ...]] = {
    # matrix products
    torch._C._nn.linear: _LINEAR,
    torch.matmul: ("matmul",),
    operator.matmul: ("matmul",),
    "matmul": ("matmul",),
    torch.mm: ("matmul",),
    "mm": ("matmul",),
    torch.bmm: ("matmul",),
    "bmm": ("matmul",),
    torch.addmm: _ADDMM,
    "addmm": _ADDMM,  # GPT-2's Conv1D: bias + x @ w
    torch.conv2d: ("conv2d",),
    # elementwise arithmetic (sub, neg and division by a constant become add/mul)
    operator.add: ("add", "mul"),
    operator.iadd: ("add", "mul"),
    torch.add: ("add", "mul"),
    "add": ("add", "mul"),
    operator.sub: ("add", "mul"),
    operator.isub: ("add", "mul"),
    torch.sub: ("add", "mul"),
    "sub": ("add", "mul"),
    operator.mul: ("mul",),
    operator.imul: ("mul",),
    torch.mul: ("mul",),
    "mul": ("mul",),
    operator.truediv: ("mul",),
    torch.div: ("mul",),
    "div": ("mul",),
    operator.neg: ("mul",),
    torch.neg: ("mul",),
    "neg": ("mul",),
    operator.pow: ("mul",),
    torch.pow: ("mul",),
    "pow": ("mul",),
    torch.rsqrt: ("rsqrt",),
    "rsqrt": ("rsqrt",),
    torch.mean: ("mean",),
    "mean": ("mean",),
    F.adaptive_avg_pool2d: ("mean",),
    # activations, softmax, normalisation
    F.relu: ("activation",),
    torch.relu: ("activation",),
    "relu": ("activation",),
    F.gelu: ("activation",),
    F.silu: ("activation",),
    torch.sigmoid: ("activation",),
    F.sigmoid: ("activation",),
    "sigmoid": ("activation",),
    torch.tanh: ("activation",),
    F.tanh: ("activation",),
    "tanh": ("activation",),
    # the activation unit's output clamp: ReLU6 (nn.ReLU6 reaches Dynamo as hardtanh(x, 0, 6)), clamp/clip
    F.hardtanh: ("activation",),
    F.relu6: ("activation",),
    torch.clamp: ("activation",),
    "clamp": ("activation",),
    torch.clip: ("activation",),
    "clip": ("activation",),
    # MobileNetV3's hard activations, decomposed onto the clamp: x * relu6(x + 3) / 6 and relu6(x + 3) / 6
    F.hardswish: ("add", "activation", "mul"),
    F.hardsigmoid: ("add", "activation", "mul"),
    F.softmax: ("softmax",),
    torch.softmax: ("softmax",),
    "softmax": ("softmax",),
    F.layer_norm: ("layernorm",),
    F.rms_norm: ("rmsnorm",),
    torch.rms_norm: ("rmsnorm",),  # what Dynamo records for F.rms_norm and nn.RMSNorm
    F.batch_norm: _BATCH_NORM,
    F.scaled_dot_product_attention: _ATTENTION + ("expand",),
    F.multi_head_attention_forward: _LINEAR + _ATTENTION + ("slice",),
    F.dropout: (),
    # layout
    "view": ("reshape",),
    "reshape": ("reshape",),
    torch.reshape: ("reshape",),
    torch.flatten: ("reshape",),
    "flatten": ("reshape",),
    torch.unsqueeze: ("reshape",),
    "unsqueeze": ("reshape",),
    torch.squeeze: ("reshape",),
    "squeeze": ("reshape",),
    "contiguous": (),
    "clone": (),
    torch.clone: (),  # a functional program never needs a copy
    # conversions that keep the dtype and device are the identity; a real conversion falls back
    "to": (),
    "float": (),
    "type": (),
    "type_as": (),
    torch.transpose: ("permute",),
    "transpose": ("permute",),
    torch.permute: ("permute",),
    "permute": ("permute",),
    "t": ("permute",),
    aten.numpy_T: ("permute",),  # Dynamo records weight.T as aten.numpy_T
    operator.getitem: ("slice", "reshape"),
    "split": ("slice",),
    torch.split: ("slice",),
    "chunk": ("slice",),
    torch.chunk: ("slice",),
    torch.cat: ("concat",),
    "expand": ("expand",),
}

#: AOTAutograd's aten targets.
ATEN_SUPPORT: dict[Target, tuple[str, ...]] = {
    aten.mm.default: ("matmul",),
    aten.bmm.default: ("matmul",),
    aten.addmm.default: ("matmul", "add"),
    aten.convolution.default: ("conv2d",),
    aten.add.Tensor: ("add", "mul"),
    aten.sub.Tensor: ("add", "mul"),
    aten.mul.Tensor: ("mul",),
    aten.div.Tensor: ("mul",),
    aten.neg.default: ("mul",),
    aten.pow.Tensor_Scalar: ("mul",),
    aten.rsqrt.default: ("rsqrt",),
    aten.mean.dim: ("mean",),
    aten.relu.default: ("activation",),
    aten.gelu.default: ("activation",),
    aten.silu.default: ("activation",),
    aten.sigmoid.default: ("activation",),
    aten.tanh.default: ("activation",),
    aten.hardtanh.default: ("activation",),
    aten.clamp.default: ("activation",),
    aten.hardswish.default: ("add", "activation", "mul"),
    aten.hardsigmoid.default: ("add", "activation", "mul"),
    aten._softmax.default: ("softmax",),
    aten.native_layer_norm.default: ("layernorm",),
    aten._native_batch_norm_legit_no_training.default: _BATCH_NORM,
    aten._scaled_dot_product_flash_attention_for_cpu.default: _ATTENTION,
    aten.view.default: ("reshape",),
    aten._unsafe_view.default: ("reshape",),
    aten.reshape.default: ("reshape",),
    aten.unsqueeze.default: ("reshape",),
    aten.squeeze.dim: ("reshape",),
    aten.squeeze.dims: ("reshape",),
    aten.clone.default: (),
    aten.alias.default: (),
    aten._to_copy.default: (),
    aten.t.default: ("permute",),
    aten.transpose.int: ("permute",),
    aten.permute.default: ("permute",),
    aten.slice.Tensor: ("slice",),
    aten.select.int: ("slice", "reshape"),
    aten.split.Tensor: ("slice",),
    aten.split_with_sizes.default: ("slice",),
    aten.cat.default: ("concat",),
    aten.expand.default: ("expand",),
    # No operator.getitem: in aten graphs it only unpacks tuples, and CapabilityBasedPartitioner
    # moves those getitems into their producer's partition by itself.
}

#: The support table of each dialect.
TABLES: dict[str, SupportTable] = {"torch": TORCH_SUPPORT, "aten": ATEN_SUPPORT}


# ----------------------------------------------------------------------------------------------
# Argument constraints: target -> check(node) returning None (fine) or why the NPU cannot run it.
# ----------------------------------------------------------------------------------------------


def _clamp_check(node: fx.Node) -> str | None:
    """clamp/clip/hardtanh/relu6 become the activation unit's clamp: constant bounds only."""
    if node.target is F.relu6:
        return None
    if node.target in (F.hardtanh, aten.hardtanh.default):
        bounds = (node_arg(node, 1, "min_val", -1.0), node_arg(node, 2, "max_val", 1.0))
    else:
        bounds = (node_arg(node, 1, "min"), node_arg(node, 2, "max"))
    if all(b is None or is_number(b) for b in bounds) and any(b is not None for b in bounds):
        return None
    return "only clamping to constant bounds lowers to the NPU (the activation unit's clamp)"


def _keeps_dtype_and_device(node: fx.Node) -> str | None:
    """A ``.to``/``.float()``/``_to_copy`` is the identity only when it keeps the dtype and the device."""
    source, result = node_value(node.args[0]), node_value(node)
    if not isinstance(source, torch.Tensor) or not isinstance(result, torch.Tensor):
        return "a conversion of something that is not a tensor"
    if result.device != source.device:
        return f"moves a tensor from {source.device} to {result.device}"
    if result.dtype != source.dtype:
        return (
            f"converts dtype {str(source.dtype).removeprefix('torch.')} to {str(result.dtype).removeprefix('torch.')}: "
            "the ISA has no conversion op"
        )
    return None


def _split_check(node: fx.Node) -> str | None:
    # The size argument is split_size, split_size_or_sections, split_sizes or chunks, by target.
    sizes = (
        node.args[1]
        if len(node.args) > 1
        else next(
            (
                node.kwargs[k]
                for k in ("split_size", "split_size_or_sections", "split_sizes", "chunks")
                if k in node.kwargs
            ),
            None,
        )
    )
    dim = node_arg(node, 2, "dim", 0)
    sizes = sizes if isinstance(sizes, (list, tuple)) else [sizes]
    if all(isinstance(v, int) for v in (*sizes, dim)):
        return None
    return "split/chunk need constant sizes and a constant dimension"


def _div_check(node: fx.Node) -> str | None:
    ok = isinstance(node_arg(node, 0, "input"), fx.Node) and is_number(node_arg(node, 1, "other"))
    if ok and node_arg(node, 2, "rounding_mode") is None:
        return None
    return "only division of a tensor by a constant lowers to the NPU (as mul by its reciprocal)"


def _mean_check(node: fx.Node) -> str | None:
    dims = node_arg(node, 1, "dim")
    if dims is None or node_arg(node, 3, "dtype") is not None:
        return "only mean over explicit dimensions, without dtype conversion"
    return None


def _adaptive_pool_check(node: fx.Node) -> str | None:
    size = node_arg(node, 1, "output_size")
    return None if size in (1, (1, 1), [1, 1]) else "only adaptive_avg_pool2d to 1x1 lowers (as a mean)"


def _batch_norm_check(node: fx.Node) -> str | None:
    if node_arg(node, 5, "training", False):
        return "batch norm in training mode needs batch statistics"
    if getattr(node_value(node_arg(node, 0, "input")), "ndim", 0) < 2:
        return "batch norm of a tensor without a channel dimension (dim 1)"
    return None


def _dropout_check(node: fx.Node) -> str | None:
    active = node_arg(node, 2, "training", True) and node_arg(node, 1, "p", 0.5) != 0
    return "active dropout needs a random number generator" if active else None


def _softmax_check(node: fx.Node) -> str | None:
    dtype = node_arg(node, 3 if node.target is F.softmax else 2, "dtype")
    if node_arg(node, 1, "dim") is None:  # F.softmax(x): PyTorch picks a dimension by the rank (deprecated)
        return "softmax without a dim (PyTorch's implicit, deprecated choice)"
    return "softmax with a dtype conversion" if dtype is not None else None


def _gelu_check(node: fx.Node) -> str | None:
    return None if node_arg(node, 1, "approximate", "none") in ("none", "tanh") else "unknown gelu approximation"


def _sdpa_check(node: fx.Node) -> str | None:
    """Float masks are added to the scores; a boolean mask is the softmax unit's ``mask`` operand."""
    mask = node_arg(node, 3, "attn_mask")
    if node_arg(node, 4, "dropout_p", 0.0) != 0.0:
        return "attention dropout needs a random number generator"
    if mask is not None and not isinstance(mask, fx.Node):
        return "attn_mask must be a tensor"
    if mask is not None and node_arg(node, 5, "is_causal", False):
        return "attn_mask together with is_causal"
    return None


def _aten_sdpa_check(node: fx.Node) -> str | None:
    # AOTAutograd hands a boolean mask over as a float one (where(mask, 0, -inf)): the same additive mask.
    if node_arg(node, 3, "dropout_p", 0.0) != 0.0:
        return "attention dropout needs a random number generator"
    mask = node.kwargs.get("attn_mask")
    if mask is not None and (not isinstance(mask, fx.Node) or node_arg(node, 4, "is_causal", False)):
        return "attn_mask must be a tensor, without is_causal"
    return only_first_output_used(node)


def boolean_mask_inputs(node: fx.Node) -> set[fx.Node]:
    """The inputs of ``node`` that are boolean attention masks: the softmax unit reads them as its
    ``mask`` operand, so they are outside the rule that a node's tensors share one dtype."""
    if node.target is not F.scaled_dot_product_attention:
        return set()
    mask = node_arg(node, 3, "attn_mask")
    is_bool = isinstance(mask, fx.Node) and getattr(node_value(mask), "dtype", None) == torch.bool
    return {mask} if is_bool else set()


def _mha_check(node: fx.Node) -> str | None:
    """The common self-attention case of ``F.multi_head_attention_forward`` (what nn.TransformerEncoderLayer uses)."""
    args = dict(
        zip(
            (
                "query",
                "key",
                "value",
                "embed_dim",
                "num_heads",
                "in_proj_weight",
                "in_proj_bias",
                "bias_k",
                "bias_v",
                "add_zero_attn",
                "dropout_p",
                "out_proj_weight",
                "out_proj_bias",
                "training",
            ),
            node.args,
        )
    )
    args.update(node.kwargs)
    query = node_value(args.get("query"))
    problems = [
        (
            "query, key and value must be the same tensor",
            not (args.get("query") is args.get("key") is args.get("value")),
        ),
        ("query must be 3-D (seq, batch, embed)", getattr(query, "ndim", 0) != 3),
        (
            "bias_k/bias_v/add_zero_attn",
            args.get("bias_k") is not None or args.get("bias_v") is not None or args.get("add_zero_attn"),
        ),
        ("active attention dropout", args.get("training", True) and args.get("dropout_p", 0.0) != 0.0),
        ("attention masks", args.get("key_padding_mask") is not None or args.get("attn_mask") is not None),
        ("need_weights=True", args.get("need_weights", True)),
        ("separate q/k/v projection weights", args.get("use_separate_proj_weight", False)),
        ("static keys/values", args.get("static_k") is not None or args.get("static_v") is not None),
        ("is_causal without a mask", args.get("is_causal", False)),
    ]
    for message, broken in problems:
        if broken:
            return f"multi-head attention with {message} is not supported"
    return None


def _getitem_check(node: fx.Node) -> str | None:
    if is_tuple_unpack(node):
        return None
    index = node.args[1]
    items = index if isinstance(index, tuple) else (index,)
    for item in items:
        if isinstance(item, slice):
            parts = (item.start, item.stop, item.step)
            if not all(p is None or isinstance(p, int) for p in parts) or (item.step or 1) < 1:
                return "slices need constant bounds and a positive step"
        elif isinstance(item, list):  # x[..., [-2], :]: a gather by constant indices is slices (and a concat)
            if not item or not all(isinstance(i, int) and not isinstance(i, bool) for i in item):
                return "only a list of constant integers indexes like slices"
        elif isinstance(item, bool):  # x[True] adds a dimension of size 1, x[False] one of size 0: not a position
            return "a boolean index is a mask, not a position"
        elif not (item is None or item is Ellipsis or isinstance(item, int)):
            return "indexing with tensors (gather) is not in the ISA"
    if sum(isinstance(item, list) for item in items) > 1:
        return "more than one list index (advanced indexing moves dimensions)"
    return None


def _has_list_index(node: fx.Node) -> bool:
    index = node.args[1] if node.target is operator.getitem and len(node.args) > 1 else None
    return any(isinstance(item, list) for item in (index if isinstance(index, tuple) else (index,)))


def _alpha_check(node: fx.Node) -> str | None:
    return None if is_number(node.kwargs.get("alpha", 1)) else "alpha must be a constant"


def _addmm_check(node: fx.Node) -> str | None:
    return None if node.kwargs.get("beta", 1) == 1 and node.kwargs.get("alpha", 1) == 1 else "addmm with beta/alpha"


def _convolution_check(node: fx.Node) -> str | None:
    value = node_value(node.args[0])
    if getattr(value, "ndim", 0) != 4 or node.args[6]:
        return "only 2-D, non-transposed convolutions"
    return None


def _conv2d_check(node: fx.Node) -> str | None:
    return "string padding ('same'/'valid')" if isinstance(node_arg(node, 4, "padding", 0), str) else None


def _layer_norm_check(node: fx.Node) -> str | None:
    return only_first_output_used(node)


CONSTRAINTS: dict[Target, Constraint] = {
    **{t: pow_check for t in (operator.pow, torch.pow, "pow", aten.pow.Tensor_Scalar)},
    **{t: _div_check for t in (operator.truediv, torch.div, "div", aten.div.Tensor)},
    **{t: _mean_check for t in (torch.mean, "mean")},
    **{t: _alpha_check for t in (torch.add, "add", torch.sub, "sub", aten.add.Tensor, aten.sub.Tensor)},
    **{t: _softmax_check for t in (F.softmax, torch.softmax, "softmax")},
    F.adaptive_avg_pool2d: _adaptive_pool_check,
    F.batch_norm: _batch_norm_check,
    F.dropout: _dropout_check,
    F.gelu: _gelu_check,
    aten.gelu.default: _gelu_check,
    F.scaled_dot_product_attention: _sdpa_check,
    aten._scaled_dot_product_flash_attention_for_cpu.default: _aten_sdpa_check,
    F.multi_head_attention_forward: _mha_check,
    operator.getitem: _getitem_check,
    **{t: _addmm_check for t in (aten.addmm.default, torch.addmm, "addmm")},
    **{
        t: _clamp_check
        for t in (
            F.hardtanh,
            F.relu6,
            torch.clamp,
            "clamp",
            torch.clip,
            "clip",
            aten.hardtanh.default,
            aten.clamp.default,
        )
    },
    **{t: _keeps_dtype_and_device for t in ("to", "float", "type", "type_as", aten._to_copy.default)},
    **{
        t: _split_check
        for t in ("split", torch.split, "chunk", torch.chunk, aten.split.Tensor, aten.split_with_sizes.default)
    },
    aten.convolution.default: _convolution_check,
    torch.conv2d: _conv2d_check,
    aten.native_layer_norm.default: _layer_norm_check,
    aten._native_batch_norm_legit_no_training.default: _layer_norm_check,
    aten._softmax.default: lambda node: "softmax with half_to_float" if node.args[2] else None,
}


def _is_empty(tensor: torch.Tensor) -> bool:
    # statically_known_true: under dynamic shapes numel() is symbolic; "maybe empty" is not empty.
    return statically_known_true(tensor.numel() == 0)


def _same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.ndim == b.ndim and all(statically_known_true(x == y) for x, y in zip(a.shape, b.shape))


class NpuOperatorSupport(OperatorSupport):
    """PyTorch's ``OperatorSupport`` predicate for the NPU: a node is supported when

    1. it is a call (``call_function``/``call_method``): placeholders and outputs never are, or the
       partitioner would pull graph inputs into a partition;
    2. its target is in the dialect's table and its arguments pass :data:`CONSTRAINTS`;
    3. it produces tensors, all of one dtype shared with its tensor inputs (the NPU converts no
       dtype implicitly; a boolean attention mask is the softmax unit's own ``mask`` operand), the
       NPU can hold that dtype, and every ISA op its lowering emits supports it.

    :meth:`fallback_reason` says *why* a node is not supported; the partition report shows it.
    :meth:`elision_reason` says why a node does no work at all (supported or not).
    """

    def __init__(self, table: SupportTable, isa: Isa | None = None) -> None:
        super().__init__()
        self.table = table
        self.isa = isa or default_isa()
        unknown = sorted({op for ops in table.values() for op in ops} - set(self.isa.ops))
        if unknown:
            raise ValueError(f"support table names ops that are not in the ISA: {unknown}")

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: fx.Node) -> bool:
        return self.fallback_reason(node) is None

    def _isa_ops(self, node: fx.Node) -> tuple[str, ...] | None:
        """The table entry of ``node``'s target (``None``: not in the table, or an unhashable target)."""
        try:
            return self.table.get(node.target)
        except TypeError:
            return None

    def fallback_reason(self, node: fx.Node) -> str | None:
        """``None`` when the NPU can run ``node``, otherwise a one-line reason."""
        if node.op not in ("call_function", "call_method"):
            return f"{node.op} nodes do not run on the NPU"
        isa_ops = self._isa_ops(node)
        if isa_ops is None:
            return f"no NPU lowering for {target_name(node)}"
        constraint = CONSTRAINTS.get(node.target)
        problem = constraint(node) if constraint else None
        if problem:
            return problem
        if is_tuple_unpack(node):
            return None
        outputs = tensors_in(node_value(node))
        if not outputs:
            return "produces no tensor (size arithmetic stays on the host)"
        if not any(tensors_in(node_value(arg)) for arg in node.all_input_nodes):
            return "reads no tensor (a call on numbers alone stays on the host)"
        masks = boolean_mask_inputs(node)
        inputs = [t for arg in node.all_input_nodes if arg not in masks for t in tensors_in(node_value(arg))]
        dtypes = {t.dtype for t in outputs + inputs}
        if len(dtypes) > 1:
            names = ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))
            return f"mixes dtypes ({names}): the NPU never converts dtypes implicitly"
        (dtype,) = dtypes
        if dtype not in DTYPE_NAMES:
            return f"dtype {str(dtype).removeprefix('torch.')} cannot be held by the NPU"
        for op in isa_ops:
            if not self.isa[op].supports_dtype(dtype):
                return f"dtype {str(dtype).removeprefix('torch.')} is not supported by ISA op '{op}'"
        return None

    def elision_reason(self, node: fx.Node) -> str | None:
        """Why ``node`` does no work anywhere, or ``None`` when it does work (the usual case).

        A node does no work when its result is one of its inputs, unchanged, or has no elements:

        1. every tensor it produces is empty (``torch.tensor([])``, a KV cache before its first entry);
        2. its table entry is ``()`` and its arguments pass :data:`CONSTRAINTS`: eval dropout,
           ``contiguous``, a ``.to`` that keeps the dtype and the device (the entry says its lowering
           emits no instruction);
        3. its lowering emits only :data:`SHAPE_ONLY_OPS` and its one result has the shape and dtype
           of its only non-empty tensor input: a view to the same shape, a full slice, a cat with
           empty tensors. (A permute is left out: a transpose of a square matrix keeps the shape.)

        Elision does not depend on where the node runs: an empty ``torch.tensor([])`` stays on the host
        and is still elided. Everything else, a multiply by 1 included, is work.
        """
        if node.op not in ("call_function", "call_method") or is_tuple_unpack(node):
            return None
        outputs = tensors_in(node_value(node))
        if outputs and all(_is_empty(t) for t in outputs):
            return "produces an empty tensor: nothing to compute"
        isa_ops = self._isa_ops(node)
        constraint = CONSTRAINTS.get(node.target) if isa_ops is not None else None
        if isa_ops is None or (constraint and constraint(node)):
            return None
        if not isa_ops:
            return "returns its input unchanged: no instruction"
        inputs = [t for arg in node.all_input_nodes for t in tensors_in(node_value(arg)) if not _is_empty(t)]
        if _has_list_index(node):  # a gather can reorder elements without changing the shape
            return None
        if set(isa_ops) <= SHAPE_ONLY_OPS and len(outputs) == 1 and len(inputs) == 1:
            (result,), (source,) = outputs, inputs
            if result.dtype == source.dtype and _same_shape(result, source):
                return "keeps its input's shape and dtype: the result is its input"
        return None


def support_for_dialect(dialect: str, isa: Isa | None = None) -> NpuOperatorSupport:
    """The NPU's support predicate for graphs of ``dialect`` (``"torch"`` or ``"aten"``)."""
    if dialect not in TABLES:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {', '.join(TABLES)}")
    return NpuOperatorSupport(TABLES[dialect], isa)
