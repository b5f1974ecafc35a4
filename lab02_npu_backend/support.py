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

To see which targets a model produces, print its graphs::

    from lab02_npu_backend.given.graphs import capture_graphs
    captured = capture_graphs(model, *inputs)
    print(captured.torch[0].graph); print(captured.aten[0].graph)

Given (:mod:`lab02_npu_backend.given.support_tools`): the table types :data:`Target` and
:data:`SupportTable`, the check type :data:`Constraint`, ``pow``'s check (:func:`pow_check`) and
:func:`only_first_output_used` for multi-output aten ops; :mod:`lab02_npu_backend.given.graphs` reads
arguments and values (:func:`node_arg`, :func:`is_number`, :func:`tensors_in`, :func:`node_value`).
"""

from __future__ import annotations

# These are the imports the finished module uses; the ones marked `noqa: F401` stay unused until
# you write your code.
import operator
from collections.abc import Mapping

import torch
import torch.nn.functional as F  # noqa: F401
from torch import fx
from torch.fx.experimental.symbolic_shapes import statically_known_true  # noqa: F401
from torch.fx.passes.operator_support import OperatorSupport

from lab02_npu_backend.given.graphs import is_number, is_tuple_unpack, node_arg, node_value, target_name, tensors_in  # noqa: F401
from lab02_npu_backend.given.isa import DTYPE_NAMES, SHAPE_ONLY_OPS, Isa, default_isa  # noqa: F401
from lab02_npu_backend.given.support_tools import (  # noqa: F401
    Constraint,
    SupportTable,
    Target,
    only_first_output_used,
    pow_check,
)

aten = torch.ops.aten

#: Dynamo's torch-level targets.
TORCH_SUPPORT: dict[Target, tuple[str, ...]] = {
    # One entry as an example: F.linear (Dynamo records it as torch._C._nn.linear) lowers to
    # permute (the weight), matmul, and add (the bias).
    torch._C._nn.linear: ("permute", "matmul", "add"),
    # TODO: every target the standard models produce that the ISA can express.
    # guidance: begin
    # Matrix products (addmm too: GPT-2's Conv1D), conv2d, elementwise arithmetic (+ sub, neg,
    # pow(x, n) for a small integer n, division by a constant), rsqrt, mean, activations (relu, gelu,
    # silu, sigmoid, tanh; hardtanh/relu6/clamp/clip on the activation unit's clamp), softmax,
    # layer/rms/batch norm (F.rms_norm reaches Dynamo as torch.rms_norm), attention
    # (scaled_dot_product_attention, with a float or a boolean mask, and multi_head_attention_forward),
    # and layout ops: view/reshape/flatten/(un)squeeze,
    # transpose/permute/t (Dynamo records weight.T as aten.numpy_T), getitem (slicing), split/chunk,
    # cat, expand. Identities map to () (no instruction): dropout in eval mode, contiguous, clone,
    # and .to/.float/.type/.type_as when they keep the dtype and device (a constraint checks that).
    # Remember call_method nodes: their target is the method name, e.g. "view".
    # guidance: end
}

#: AOTAutograd's aten targets.
ATEN_SUPPORT: dict[Target, tuple[str, ...]] = {
    aten.addmm.default: ("matmul", "add"),
    # TODO: the aten ops of the same models (print the aten graphs).
    # guidance: begin
    # Among them split.Tensor / split_with_sizes, hardtanh / clamp / sigmoid / tanh, attention
    # (_scaled_dot_product_flash_attention_for_cpu: AOTAutograd hands a boolean mask over as a float
    # one), and the identities clone / alias / _to_copy (when it keeps the dtype). Do not list
    # operator.getitem: in aten graphs it only unpacks tuples, and the partitioner places those by itself.
    # guidance: end
}

#: The support table of each dialect.
TABLES: dict[str, SupportTable] = {"torch": TORCH_SUPPORT, "aten": ATEN_SUPPORT}


#: Argument constraints: target -> check(node) returning None (fine) or why the NPU cannot run it.
CONSTRAINTS: dict[Target, Constraint] = {
    **{t: pow_check for t in (operator.pow, torch.pow, "pow", aten.pow.Tensor_Scalar)},
    # TODO: a check for every target whose arguments decide whether the NPU can run it.
    # guidance: begin
    # Division only by a constant; mean only over explicit dims; batch norm and dropout only in eval
    # mode; attention without dropout (and a mask only as a tensor, never with is_causal); getitem
    # without tensor indices (a constant list of ints, x[..., [-2], :], is slices); multi-output aten
    # ops only when output 0 alone is used (only_first_output_used); addmm without beta/alpha;
    # clamp/hardtanh only to constant bounds; split/chunk only with constant sizes; .to/.float/.type/
    # .type_as/_to_copy only when they keep the dtype and the device (say "converts dtype A to B"
    # when they do not: the ISA has no conversion op); ...
    # guidance: end
}


class NpuOperatorSupport(OperatorSupport):
    """PyTorch's ``OperatorSupport`` predicate for the NPU.

    Args:
        table: the support table of the dialect of the graphs it will see.
        isa: the ISA to check dtypes against (the lab's ``isa.json`` by default).

    Raises:
        ValueError: the table names an op that is not in the ISA.
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

    def fallback_reason(self, node: fx.Node) -> str | None:
        """``None`` when the NPU can run ``node``, otherwise a one-line reason (shown in reports).

        A node is supported when:

        1. it is a ``call_function`` or ``call_method`` (never a placeholder or the output: the
           partitioner would pull graph inputs into a partition);
        2. its target is in ``self.table`` (note: some targets are unhashable; treat those as absent)
           and its arguments pass :data:`CONSTRAINTS`;
        3. tuple unpacking (:func:`~lab02_npu_backend.given.graphs.is_tuple_unpack`) is always fine;
           otherwise the node produces at least one tensor and reads at least one (size arithmetic on
           ints, and a call on numbers alone such as ``aten.add.Tensor(2.0, 3.0)``, stay on the host);
        4. all tensors it reads and writes (:func:`~lab02_npu_backend.given.graphs.node_value`) share one
           dtype: the NPU never converts dtypes implicitly (one exception: a boolean ``attn_mask`` of
           ``scaled_dot_product_attention`` is the softmax unit's own boolean ``mask`` operand); the
           NPU can hold that dtype (it is in ``DTYPE_NAMES``), even for an entry ``()`` that emits
           no instruction;
        5. every ISA op of its table entry supports that dtype (``self.isa[op].supports_dtype``).

        Say what failed: "no NPU lowering for <target_name(node)>", "dtype int64 is not supported by
        ISA op 'matmul'", "mixes dtypes (...)", ... The tests look for the word "dtype" in dtype reasons.
        """
        # TODO: implement the five rules above.
        raise NotImplementedError("NpuOperatorSupport.fallback_reason")

    def elision_reason(self, node: fx.Node) -> str | None:
        """Why ``node`` does no work anywhere (a one-line reason), or ``None`` when it does work.

        The coverage report lists elided nodes but keeps them outside the NPU fraction, so that
        identities cannot pad it; every node that does work, a multiply by 1 included, is counted.
        A call node (never a placeholder, the output or a tuple unpack) does no work when:

        1. every tensor it produces is empty (``torch.tensor([])``: a KV cache before its first
           entry), whether or not the NPU supports it;
        2. its table entry is ``()`` and its arguments pass :data:`CONSTRAINTS`: eval dropout,
           ``contiguous``, a ``.to`` that keeps the dtype and the device;
        3. its entry names only :data:`SHAPE_ONLY_OPS`, its arguments pass :data:`CONSTRAINTS`, and
           its one result has the shape and dtype of its only non-empty tensor input: a view to the
           same shape, a full slice, a cat with an empty tensor. (Not permute: a transpose of a
           square matrix keeps the shape but moves elements; nor a getitem with a list index, a
           gather that may reorder elements.)

        Elision is about work, not placement: a supported identity may still sit in an NPU partition
        (its lowering emits nothing), and an empty ``torch.tensor([])`` on the host is still elided.
        Under dynamic shapes sizes are symbolic: ``statically_known_true(t.numel() == 0)`` asks
        "certainly empty?" without adding guards.
        """
        # TODO: implement the three rules above.
        raise NotImplementedError("NpuOperatorSupport.elision_reason")


def support_for_dialect(dialect: str, isa: Isa | None = None) -> NpuOperatorSupport:
    """The NPU's support predicate for graphs of ``dialect`` (``"torch"`` or ``"aten"``)."""
    if dialect not in TABLES:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {', '.join(TABLES)}")
    return NpuOperatorSupport(TABLES[dialect], isa)
