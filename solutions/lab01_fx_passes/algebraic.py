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

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.algebra_ops import (
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
from lab01_fx_passes.given.graph_tools import (
    OpName,
    TensorInfo,
    binary_operands,
    call_argument,
    call_input,
    storage_address,
    writes_in_place,
)
from lab01_fx_passes.given.pass_report import unchanged

from .op_names import op_name

#: An operand that is no identity (the arithmetic rules' answer when the operand does not qualify).
_NOT_AN_IDENTITY = None


def _operands(node: fx.Node) -> tuple[Any, Any]:
    """The two operands of a binary call, positional or by keyword (``input``/``self``, ``other``)."""
    return binary_operands(node) or (call_input(node), call_argument(node, "other"))


def _has_nodes(values: Any) -> bool:
    return any(isinstance(leaf, fx.Node) for leaf in torch.utils._pytree.tree_leaves(values))


class AlgebraicSimplifier(AlgebraicSimplifierBase):
    """Replace identities by the value they equal: ``AlgebraicSimplifier(example_inputs)(gm)``.

    Modifies ``gm`` in place; returns ``PassResult(gm, True)`` when a node was replaced, otherwise
    ``unchanged(gm, reason)`` naming why each identity found was left alone. Given
    (:class:`~lab01_fx_passes.given.algebra_ops.AlgebraicSimplifierBase`): :attr:`example_inputs`,
    :attr:`keep_signed_zeros`, the counters :attr:`simplified` (rule -> count) and :attr:`skipped`
    (reason -> count), :attr:`simplified_count` and :meth:`why_unchanged`.
    """

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        self.simplified.clear()
        self.skipped.clear()
        if self.example_inputs is None:
            return unchanged(graph_module, NO_EXAMPLE_INPUTS)
        self._values = observe_values(graph_module, self.example_inputs)
        self._memory = {node: storage_address(value) for node, value in self._values.items()}
        self._modules = dict(graph_module.named_modules())
        self._written = self._written_storages(graph_module)
        graph = graph_module.graph
        for node in list(graph.nodes):
            found = self._identity(node)
            if found is None:
                continue
            rule, source, reason = found
            if reason is not None:
                self.skipped[reason] += 1
                continue
            leftovers = [arg for arg in node.all_input_nodes if arg is not source]
            self._now_in(source, node)
            node.replace_all_uses_with(source)
            graph.erase_node(node)
            for leftover in leftovers:
                if not leftover.users and self._is_own_leftover(leftover):
                    graph.erase_node(leftover)
            self.simplified[rule] += 1
        del self._values, self._memory, self._modules, self._written
        if not self.simplified:
            return unchanged(graph_module, self.why_unchanged())
        graph.lint()
        graph_module.recompile()
        return PassResult(graph_module, True)

    # -- what the run showed ------------------------------------------------------------------------
    def _op(self, node: Any) -> OpName | None:
        if not isinstance(node, fx.Node):
            return None
        return op_name(node, self._modules)

    def _now_in(self, source: fx.Node, node: fx.Node) -> None:
        """``node`` is replaced by ``source``: what lived in ``node``'s memory (its views) now lives in ``source``'s."""
        old, new = self._memory.get(node), self._memory.get(source)
        if old is not None:
            for other, memory in self._memory.items():
                if memory == old:
                    self._memory[other] = new

    def _written_storages(self, graph_module: fx.GraphModule) -> set[int]:
        """The memory any node writes: an in-place node's first argument, a call's ``out=``."""
        written: set[int] = set()
        for node in graph_module.graph.nodes:
            targets = []
            if writes_in_place(node, self._op(node)):
                targets.append(call_input(node))
            if isinstance(node.kwargs.get("out"), fx.Node):
                targets.append(node.kwargs["out"])
            written.update(memory for memory in map(self._memory.get, targets) if memory is not None)
        return written

    def _tensor(self, node: Any) -> torch.Tensor | None:
        value = self._values.get(node) if isinstance(node, fx.Node) else None
        return value if isinstance(value, torch.Tensor) and value.layout == torch.strided else None

    # -- which rule, if any -------------------------------------------------------------------------
    def _identity(self, node: fx.Node) -> tuple[str, fx.Node, str | None] | None:
        """``(rule, x, reason)`` when ``node`` is an identity on ``x`` (reason None: safe to replace)."""
        op = self._op(node)
        if op is None or op.in_place or node.op == "call_module":
            return None
        if op.name in NEGATIONS:
            inner = call_input(node)
            inner_op = self._op(inner)
            if inner_op is None or inner_op.in_place or inner_op.name not in NEGATIONS or call_input(inner) is None:
                return None
            return self._checked_new_tensor(DOUBLE_NEGATION, node, call_input(inner))
        if op.name in PERMUTATIONS:
            return self._undone_permutation(node)
        if op.name in RESHAPES:
            return self._same_shape_view(node, SAME_SHAPE_RESHAPE)
        return self._arithmetic(node, op.name)

    def _arithmetic(self, node: fx.Node, name: str) -> tuple[str, fx.Node, str | None] | None:
        first, second = _operands(node)
        if name in ADDITIONS:
            rule, candidates, want = ADD_ZERO, ((first, second), (second, first)), 0
        elif name in SUBTRACTIONS:
            rule, candidates, want = SUBTRACT_ZERO, ((first, second),), 0
        elif name in MULTIPLICATIONS:
            rule, candidates, want = MULTIPLY_ONE, ((first, second), (second, first)), 1
        elif name in DIVISIONS:
            rule, candidates, want = DIVIDE_ONE, ((first, second),), 1
        else:
            return None
        for source, operand in candidates:
            negative_zero = self._identity_operand(operand, want)
            if negative_zero is _NOT_AN_IDENTITY or self._tensor(source) is None:
                continue
            if call_argument(node, "alpha", 1) != 1 or call_argument(node, "rounding_mode") is not None:
                return rule, source, OTHER_ARGUMENTS
            found = self._checked_new_tensor(rule, node, source)
            exact_zero = "negative" if rule == ADD_ZERO else "positive"
            floating = self._tensor(source).is_floating_point()
            if found and found[2] is None and want == 0 and floating and negative_zero != exact_zero:
                return (rule, source, SIGNED_ZERO) if self.keep_signed_zeros else found
            return found
        return None

    def _identity_operand(self, operand: Any, want: int) -> str | None:
        """Whether ``operand`` is the identity ``want`` (0 or 1), and for zeros their sign.

        Returns ``"positive"``/``"negative"``/``"mixed"`` for zeros, ``"one"`` for ones, or None.
        """
        if isinstance(operand, bool | int | float):
            if operand != want:
                return _NOT_AN_IDENTITY
            if want == 1:
                return "one"
            return "negative" if isinstance(operand, float) and math.copysign(1.0, operand) < 0 else "positive"
        op = self._op(operand)
        if op is None or op.in_place or op.name not in CONSTANT_CREATIONS:
            return _NOT_AN_IDENTITY
        arguments = [*operand.args, *operand.kwargs.values()]
        if op.name.endswith("_like"):  # zeros_like(x) reads x's shape, not its values
            arguments = [value for value in arguments if value is not call_input(operand)]
        value = self._tensor(operand)
        if _has_nodes(arguments) or value is None or value.is_complex() or not bool((value == want).all()):
            return _NOT_AN_IDENTITY
        if want == 1:
            return "one"
        if not value.is_floating_point():
            return "positive"
        signs = torch.signbit(value)
        return "negative" if bool(signs.all()) else "positive" if not bool(signs.any()) else "mixed"

    def _undone_permutation(self, node: fx.Node) -> tuple[str, fx.Node, str | None] | None:
        inner = call_input(node)
        inner_op = self._op(inner)
        if inner_op is None or inner_op.in_place or inner_op.name not in PERMUTATIONS:
            return None
        source = call_input(inner)
        x = self._tensor(source)
        if x is None or self._tensor(inner) is None:
            return None
        first = self._permutation(inner, inner_op.name, x.dim())
        second = self._permutation(node, self._op(node).name, x.dim())
        if first is None or second is None or [first[i] for i in second] != list(range(x.dim())):
            return None
        return self._same_shape_view(node, PERMUTATION_UNDONE, source)

    @staticmethod
    def _permutation(node: fx.Node, name: str, ndim: int) -> list[int] | None:
        """Which input dimension each output dimension of ``node`` is (``y.shape[i] == x.shape[p[i]]``)."""
        order = list(range(ndim))
        if name == "t":
            return order[::-1] if ndim == 2 else order
        if name == "transpose":
            if node.op == "call_method":
                dims = list(node.args[1:3]) or [node.kwargs.get("dim0"), node.kwargs.get("dim1")]
            else:
                dims = [call_argument(node, "dim0"), call_argument(node, "dim1")]
            if len(dims) != 2 or not all(isinstance(d, int) for d in dims) or ndim == 0:
                return None
            a, b = (d % ndim for d in dims)
            order[a], order[b] = order[b], order[a]
            return order
        if node.op == "call_method":  # x.permute(0, 2, 1) or x.permute([0, 2, 1])
            dims = node.args[1] if len(node.args) == 2 and isinstance(node.args[1], list | tuple) else node.args[1:]
            dims = list(dims or node.kwargs.get("dims", ()))
        else:
            dims = list(call_argument(node, "dims") or ())
        if len(dims) != ndim or not all(isinstance(d, int) for d in dims):
            return None
        return [d % ndim for d in dims] if ndim else []

    # -- the checks ---------------------------------------------------------------------------------
    def _layout_reason(self, node: fx.Node, source: Any) -> str | None:
        x, y = self._tensor(source), self._tensor(node)
        if x is None or y is None:
            return CHANGES_DTYPE
        if x.shape != y.shape:
            return CHANGES_SHAPE
        if (x.dtype, x.device) != (y.dtype, y.device):
            return CHANGES_DTYPE
        if TensorInfo.of(x) != TensorInfo.of(y):
            return CHANGES_STRIDES
        return None

    def _same_shape_view(self, node: fx.Node, rule: str, source: Any = None) -> tuple[str, fx.Node, str | None] | None:
        """A view rule: ``node`` must already be ``source``'s memory with ``source``'s layout (else no identity)."""
        source = call_input(node) if source is None else source
        x, y = self._tensor(source), self._tensor(node)
        if x is None or y is None or self._memory[source] != self._memory[node]:
            return None
        if self._layout_reason(node, source) is not None:
            return None
        return rule, source, None

    def _checked_new_tensor(self, rule: str, node: fx.Node, source: Any) -> tuple[str, fx.Node, str | None] | None:
        """An arithmetic rule: ``node`` is a new tensor equal to ``source``; may ``source`` stand for it?"""
        x, y = self._tensor(source), self._tensor(node)
        if x is None or y is None:
            return None
        if x.is_complex() or y.is_complex():
            return rule, source, COMPLEX
        reason = self._layout_reason(node, source)
        if reason is not None:
            return rule, source, reason
        if {self._memory.get(source), self._memory.get(node)} & self._written:
            return rule, source, WRITTEN_IN_PLACE
        if self._returned_alias(node, source):
            return rule, source, RETURNED_ALIAS
        return rule, source, None

    def _returned_alias(self, node: fx.Node, source: fx.Node) -> bool:
        """Whether ``node`` (or a view of it) is returned while ``source``'s memory is already reachable
        from outside: an input's, a ``get_attr``'s, or another returned value's."""
        graph = node.graph
        output = next(n for n in reversed(graph.nodes) if n.op == "output")
        returned = output.all_input_nodes
        mine = self._memory.get(node)
        if not any(n is node or (mine is not None and self._memory.get(n) == mine) for n in returned):
            return False
        # The other returned values: none of them shares the result's memory but its own views (it is a new tensor).
        outside = [n for n in graph.nodes if n.op in ("placeholder", "get_attr")]
        outside += [n for n in returned if n is not node]
        memory = self._memory.get(source)
        return source in outside or (memory is not None and memory in {self._memory.get(n) for n in outside})

    def _is_own_leftover(self, node: fx.Node) -> bool:
        op = self._op(node)
        own = NEGATIONS | PERMUTATIONS | CONSTANT_CREATIONS
        return node.op in ("call_function", "call_method") and op is not None and not op.in_place and op.name in own


def simplify_algebra(
    gm: fx.GraphModule, example_inputs: Sequence[Any] | None, *, keep_signed_zeros: bool = True
) -> PassResult:
    """Function form of :class:`AlgebraicSimplifier`: ``simplify_algebra(gm, inputs)``."""
    return AlgebraicSimplifier(example_inputs, keep_signed_zeros=keep_signed_zeros)(gm)
