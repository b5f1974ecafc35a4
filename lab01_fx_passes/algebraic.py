"""Algebraic simplification: remove the nodes that compute a value the graph already has.

Optional step 11. ``x + 0``, ``x * 1``, ``x.t().t()`` look like free wins, and on paper they are.
On tensors each identity hides a condition, and a pass that forgets one is wrong on some input:

========================  ====================================================================
the identity              what it hides
========================  ====================================================================
``x + zeros(2, 4, 8)``    broadcasting: the result is bigger than ``x`` (4x8)
``int_x * 1.0``           type promotion: the result is float, ``x`` is not
``x + 0`` on floats       signed zeros: ``-0.0 + 0.0 == +0.0``, and ``1 / +0.0 == +inf`` while
                          ``1 / -0.0 == -inf``; only ``x + (-0.0)`` and ``x - 0`` are exact
``(inf + 0j) * 1``        complex products: the imaginary part is ``inf * 0 = nan``
``y = x * 1; y.add_(1)``  aliasing: ``y`` is a new tensor; replaced by ``x``, the write lands in ``x``
``return x * 1``          the caller gets its own input back instead of a new tensor
``x[:, ::2] * 1``         strides: the result is contiguous, ``x`` is not
========================  ====================================================================

and some rewrites that look like identities are not: ``x * 0`` is ``nan`` where ``x`` is
``inf`` or ``nan``, ``x - x`` likewise, ``0 - x`` is ``-x``, ``1 / x`` is not ``x``,
``torch.div(x, 1, rounding_mode="floor")`` is ``floor(x)``. The pass leaves them alone.

The rules (keys of :attr:`simplified`), each checked on a real run of the graph
(:func:`~lab01_fx_passes.given.algebra_ops.observe_values` on :attr:`example_inputs`):

- **arithmetic** (``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1``, ``-(-x)``):
  the identity operand is a Python number (``0``, ``-0.0``, ``1``, ``True``; never complex) or a
  tensor made in the graph by a :data:`~lab01_fx_passes.given.algebra_ops.CONSTANT_CREATIONS` call from
  constant arguments, whose every element is the identity. The result must look exactly like
  ``x`` (same shape, strides, dtype and device: :class:`TensorInfo`), ``x`` must not be complex,
  an addition's zeros must be ``-0.0`` and a subtraction's ``+0.0`` on floating ``x`` (unless
  ``keep_signed_zeros=False``), no node may write in place to ``x``, the result, or a tensor
  sharing memory with either, anywhere in the graph, and a returned result must not become an
  input, a ``get_attr`` or another output (or share memory with one). ``alpha`` and
  ``rounding_mode`` other than the defaults make other operations.
- **views** (two permutations that put every dimension back, a reshape or view to ``x``'s own
  shape): the result is already a view of ``x`` with ``x``'s layout, so ``x`` itself is the same
  memory; only the layout is checked.

In-place nodes (``x.add_(0)``, ``x.t_()``) are writes, not values: never rewritten. Nodes a rewrite
leaves without users are erased when they are the rule's own (the inner ``neg`` or permutation,
the identity operand's creation). The pass is exact: the simplified graph's outputs are the
original's, bit for bit (with ``keep_signed_zeros=False``: equal under ``==``).
"""

from __future__ import annotations

import math  # noqa: F401  (math.copysign tells -0.0 from 0.0)
from collections.abc import Sequence
from typing import Any

import torch  # noqa: F401
from torch import fx
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.algebra_ops import (  # noqa: F401  (the names, reasons and run this pass uses)
    ADD_ZERO,
    ADDITIONS,
    CHANGES_DTYPE,
    CHANGES_SHAPE,
    CHANGES_STRIDES,
    COMPLEX,
    CONSTANT_CREATIONS,
    DIVIDE_ONE,
    DIVISIONS,
    DOUBLE_NEGATION,
    MULTIPLICATIONS,
    MULTIPLY_ONE,
    NEGATIONS,
    NO_EXAMPLE_INPUTS,
    OTHER_ARGUMENTS,
    PERMUTATION_UNDONE,
    PERMUTATIONS,
    RESHAPES,
    RETURNED_ALIAS,
    SAME_SHAPE_RESHAPE,
    SIGNED_ZERO,
    SUBTRACT_ZERO,
    SUBTRACTIONS,
    WRITTEN_IN_PLACE,
    AlgebraicSimplifierBase,
    observe_values,
)
from lab01_fx_passes.given.graph_tools import OpName, TensorInfo, writes_in_place  # noqa: F401
from lab01_fx_passes.given.pass_report import unchanged  # noqa: F401  (the reason when nothing was simplified)

from .op_names import op_name  # noqa: F401


class AlgebraicSimplifier(AlgebraicSimplifierBase):
    """Replace identities by the value they equal: ``AlgebraicSimplifier(example_inputs)(gm)``.

    Modifies ``gm`` in place; returns ``PassResult(gm, True)`` when a node was replaced, otherwise
    ``unchanged(gm, reason)`` naming why each identity found was left alone. Given
    (:class:`~lab01_fx_passes.given.algebra_ops.AlgebraicSimplifierBase`): :attr:`example_inputs`,
    :attr:`keep_signed_zeros`, the counters :attr:`simplified` (rule -> count) and :attr:`skipped`
    (reason -> count), :attr:`simplified_count` and :meth:`why_unchanged`.
    """

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        # TODO(step 11): replace every identity the run shows is exact; count it in self.simplified[rule]
        #  or, when a condition fails, count the reason in self.skipped[reason].
        # guidance: begin
        #  - self.simplified.clear(); self.skipped.clear(); no example inputs -> unchanged(gm, NO_EXAMPLE_INPUTS).
        #  - values = observe_values(graph_module, self.example_inputs): every node's tensor on a real run.
        #    TensorInfo.of(value) is its layout; value.untyped_storage().data_ptr() says which memory it is.
        #  - Match by op_name(node, modules).name against ADDITIONS, SUBTRACTIONS, ... (never an in-place op).
        #    Which operand is the identity? Both sides for + and *, the second only for - and /.
        #  - Check, in the module docstring's order: complex, layout (shape, dtype, strides), signed zeros,
        #    writes in place (writes_in_place(n, op_name(n, modules)) and out=), a returned result.
        #  - A rewrite moves memory: once y is replaced by x, y's views are views of x. Keep track.
        #  - node.replace_all_uses_with(x); erase node and the rule's own leftovers; gm.recompile().
        # guidance: end
        raise NotImplementedError("AlgebraicSimplifier.call: replace the exact identities")


def simplify_algebra(
    gm: fx.GraphModule, example_inputs: Sequence[Any] | None, *, keep_signed_zeros: bool = True
) -> PassResult:
    """Function form of :class:`AlgebraicSimplifier`: ``simplify_algebra(gm, inputs)``."""
    return AlgebraicSimplifier(example_inputs, keep_signed_zeros=keep_signed_zeros)(gm)
