"""The identities, reasons and observed run of lab 1's optional step 11 (harness: not edited).

``algebraic.py`` (the file step 11 edits) imports everything here: which operator names each
identity is about (as step 0's ``op_name`` spells them, so one table serves every dialect), the
reasons the pass gives when it leaves an identity alone, :func:`observe_values`, what every node
computed on a real run, and :class:`AlgebraicSimplifierBase`, what the pass class is given.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx
from torch.fx.passes.infra.pass_base import PassBase

from lab01_fx_passes.given.pass_report import explain_skips

# -- What each identity is about, by op_name(...).name ------------------------------------------------
#: ``x + 0`` and ``0 + x`` (``operator.add``, ``torch.add``, ``x.add(0)``, ``aten.add.Tensor``/``.Scalar``).
ADDITIONS = frozenset({"add"})
#: ``x - 0`` only: ``0 - x`` is ``-x``.
SUBTRACTIONS = frozenset({"sub", "subtract"})
#: ``x * 1`` and ``1 * x``.
MULTIPLICATIONS = frozenset({"mul", "multiply"})
#: ``x / 1`` only (true division: ``operator.truediv``, ``torch.div``, ``aten.div.Tensor``): ``1 / x`` is not ``x``.
DIVISIONS = frozenset({"div", "divide", "truediv", "true_divide"})
#: ``-(-x)``.
NEGATIONS = frozenset({"neg", "negative"})
#: Two of these in a row may put every dimension back: ``x.t().t()``, ``x.transpose(0, 1).transpose(1, 0)``,
#: ``x.permute(1, 0).permute(1, 0)`` (core aten spells ``t`` as ``permute``), or a mix of them.
PERMUTATIONS = frozenset({"t", "transpose", "permute"})
#: A view to the shape ``x`` already has: ``x.reshape(4, 8)`` of a 4x8 ``x`` (also ``aten.view``, ``_unsafe_view``).
RESHAPES = frozenset({"reshape", "view", "_unsafe_view"})
#: The calls whose value is fixed by their arguments (no graph input but, for ``*_like``, its shape):
#: a ``zeros`` or ``full(shape, -0.0)`` made in the graph can be an identity operand. A ``get_attr``
#: tensor cannot: it is module state, and state may change between calls.
CONSTANT_CREATIONS = frozenset({"zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "scalar_tensor"})

# -- The rules (the keys of ``AlgebraicSimplifier.simplified``) ----------------------------------------
ADD_ZERO = "x + 0"
SUBTRACT_ZERO = "x - 0"
MULTIPLY_ONE = "x * 1"
DIVIDE_ONE = "x / 1"
DOUBLE_NEGATION = "-(-x)"
PERMUTATION_UNDONE = "a permutation undone"
SAME_SHAPE_RESHAPE = "a reshape to x's own shape"

# -- Why an identity was left alone (the keys of ``AlgebraicSimplifier.skipped``) ---------------------
#: ``x + zeros(2, *x.shape)`` is a bigger tensor than ``x``.
CHANGES_SHAPE = "the result has another shape than x (broadcasting)"
#: ``int_x * 1.0`` is float, ``bool_x + 0`` is int64.
CHANGES_DTYPE = "the result has another dtype or device than x (type promotion)"
#: ``x[:, ::2] * 1`` is contiguous, ``x[:, ::2]`` is not: later kernels would see other strides.
CHANGES_STRIDES = "the result has other strides than x"
#: IEEE 754: ``-0.0 + 0.0 == +0.0``, so ``x + 0`` and ``x - (-0.0)`` are not ``x`` on floats.
SIGNED_ZERO = "x + 0 turns -0.0 into +0.0 (only x + (-0.0) and x - 0 keep x's signed zeros)"
#: ``(inf + 0j) * 1`` is ``inf + nanj``: the product's imaginary part is ``inf * 0``.
COMPLEX = "complex x: x * 1 is not x where a part is infinite"
#: ``torch.add(x, 0, alpha=2)``, ``torch.div(x, 1, rounding_mode="floor")``: other operations.
OTHER_ARGUMENTS = "called with alpha or rounding_mode: not the plain operation"
#: ``y = x * 1; y.add_(1)`` (or a write to ``x``, or to a view of either): they must stay two tensors.
WRITTEN_IN_PLACE = "x or the result is written in place: they must stay two tensors"
#: ``return x * 1`` where ``x`` is an input: the caller would get its own tensor back.
RETURNED_ALIAS = "the result is returned, and x is an input, a constant or another output it would alias"
#: The reason when nothing was rewritten and nothing was refused.
NO_IDENTITIES = "no algebraic identity in this graph"
#: The pass observes a real run: it needs the graph's inputs.
NO_EXAMPLE_INPUTS = "no example inputs: the pass needs a run of the graph to see shapes, dtypes and memory"


def observe_values(gm: fx.GraphModule, inputs: Sequence[Any]) -> dict[fx.Node, Any]:
    """Run ``gm.graph`` on ``inputs``, node by node and without autograd; keep every node's value.

    All values stay alive until the dictionary is dropped, so no two live tensors can have been
    given the same memory: two nodes' tensors share memory exactly when
    ``a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()`` (and it is not 0, the
    address of an empty storage). In-place nodes return their (written) input, so they share its memory.

    Returns:
        node -> its value, for every node but the output (``placeholder``: the input itself).
    """
    seen: dict[fx.Node, Any] = {}

    class Keeper(fx.Interpreter):
        def run_node(self, node: fx.Node) -> Any:
            value = super().run_node(node)
            if node.op != "output":
                seen[node] = value
            return value

    with torch.no_grad():
        Keeper(gm, garbage_collect_values=False).run(*inputs)
    return seen


class AlgebraicSimplifierBase(PassBase):
    """What ``AlgebraicSimplifier`` is given: its name, its options and counters, and :meth:`why_unchanged`.

    Attributes:
        example_inputs: what the graph is called with (a tuple), or None.
        keep_signed_zeros: True (the default) keeps IEEE 754 exactly: ``x + 0`` on floats stays.
            False is compilers' "no signed zeros" (``-fno-signed-zeros``): ``x + 0`` becomes ``x``,
            and a ``-0.0`` the original would have turned into ``+0.0`` stays ``-0.0`` (equal under ``==``).
        simplified: the rule that fired (``"x + 0"``, ``"x * 1"``, ``"-(-x)"``, ...) -> how many times.
        skipped: reason -> how many identities were left alone for it.
    """

    name = "simplify_algebra"

    def __init__(self, example_inputs: Sequence[Any] | None, *, keep_signed_zeros: bool = True) -> None:
        super().__init__()
        self.example_inputs = None if example_inputs is None else tuple(example_inputs)
        self.keep_signed_zeros = keep_signed_zeros
        self.simplified: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()

    @property
    def simplified_count(self) -> int:
        """How many nodes the last call replaced by the value they equal."""
        return sum(self.simplified.values())

    def why_unchanged(self) -> str:
        """Why nothing was simplified: each reason with its count, or :data:`NO_IDENTITIES`."""
        return explain_skips(self.skipped, "identity", NO_IDENTITIES)
