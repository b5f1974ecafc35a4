"""What a support table is made of, and the argument checks the lab gives you (harness: do not edit).

:mod:`lab02_npu_backend.support` (yours) writes the tables and most of the checks; this module
holds what is given, once, for your code and the reference alike:

- :data:`Target`, :data:`SupportTable`, :data:`Constraint`: the types of a table's keys, of a
  table, and of an argument check (``check(node)`` returns ``None`` when the NPU can run the node,
  otherwise a one-line reason);
- :func:`pow_check` and :data:`MAX_POW_EXPONENT`: ``pow`` reaches the NPU only as multiplications,
  so only with a small integer exponent;
- :func:`only_first_output_used`: a multi-output aten op whose extra outputs are used (saved for
  backward) cannot run on the NPU.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from torch import fx

from lab02_npu_backend.given.graphs import is_number, node_arg

#: A node target: a callable (torch dialect), an ``OpOverload`` (aten) or a method name (``call_method``).
Target = Any
#: A support table: target -> the ISA ops its lowering emits (``()`` for an identity, e.g. eval dropout).
SupportTable = Mapping[Target, tuple[str, ...]]
#: An argument check: ``check(node)`` -> ``None`` (the NPU can run it) or why it cannot.
Constraint = Callable[[fx.Node], str | None]

#: The largest integer exponent ``pow`` lowers to multiplications (square-and-multiply: at most 4).
MAX_POW_EXPONENT = 8


def pow_check(node: fx.Node) -> str | None:
    """``pow(x, n)`` runs on the NPU only for a tensor ``x`` and an integer ``n`` from 2 to
    :data:`MAX_POW_EXPONENT` (a float with an integer value, GPT-2's ``pow(x, 3.0)``, counts):
    the ISA has no ``pow``, and the lowering multiplies instead."""
    exponent = node_arg(node, 1, "exponent")
    integral = is_number(exponent) and float(exponent).is_integer() and 2 <= exponent <= MAX_POW_EXPONENT
    if isinstance(node_arg(node, 0, "input"), fx.Node) and integral:  # torch.pow(input=x, exponent=2) names it
        return None
    return f"only pow(x, n) with an integer n from 2 to {MAX_POW_EXPONENT} lowers to the NPU (as multiplications)"


def only_first_output_used(node: fx.Node) -> str | None:
    """For multi-output aten ops (``native_layer_norm``, attention): the NPU computes only output 0.

    In training, AOTAutograd keeps the other outputs (the mean and the reciprocal standard deviation,
    the attention's log-sum-exp) for the backward pass; a node whose users read any of them stays on
    the CPU. ``None`` when every user is ``getitem(node, 0)``.
    """
    for user in node.users:
        if not (user.target is operator.getitem and user.args[1] == 0):
            return "only its first output can run on the NPU (the others are saved for backward)"
    return None
