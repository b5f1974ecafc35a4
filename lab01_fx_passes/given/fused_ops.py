"""The fused Linear+GELU operator that :func:`fuse_linear_gelu` puts into graphs (harness: do not edit).

How is a fused Linear+GELU represented in a graph? The same way in every dialect: one
``call_function`` node whose target is the registered operator ``torch.ops.lab01.linear_gelu.default``::

    y = torch.ops.lab01.linear_gelu.default(x, weight, bias, approximate="none")
    # same value as  torch.nn.functional.gelu(torch.nn.functional.linear(x, weight, bias), approximate=...)

Why a registered operator (``torch.library.custom_op``) rather than a plain Python function or a module?

- It is a real operator: it has a schema, it can sit in an aten graph next to ``aten.addmm``,
  ``make_fx`` and ``torch.export`` can trace through a graph that calls it (thanks to the fake
  implementation below, which says what shape comes out without computing anything), and a
  backend can look it up by name (``lab01::linear_gelu``) to plug in its own fused kernel.
- A module-based graph (``symbolic_trace``) can hold ``call_function`` nodes as well, so one
  representation serves all three dialects: a pass, a test or a backend finds fused nodes with
  ``node.target is LINEAR_GELU``, whatever produced the graph. Only where the weights come from
  differs: ``get_attr`` nodes (``symbolic_trace``, ``make_fx``, an unlifted ``torch.export``
  module) or placeholders (Dynamo, whose graphs take parameters as inputs).

The CPU body below computes exactly what the unfused pair computes (same kernels, same rounding),
so fusing changes *how the graph reads*, not what it returns. A hardware backend would register a
kernel that keeps the Linear output in fast memory and applies GELU before writing it out (lab 3
writes such a kernel for LayerNorm+GELU). The operator is for inference: it has no autograd formula.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: Values ``approximate`` may take, as for :func:`torch.nn.functional.gelu`.
GELU_APPROXIMATIONS = ("none", "tanh")


@torch.library.custom_op("lab01::linear_gelu", mutates_args=())
def linear_gelu(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, approximate: str = "none"
) -> torch.Tensor:
    """``gelu(x @ weight.T + bias)``.

    Args:
        x: ``[..., in_features]``.
        weight: ``[out_features, in_features]`` (the layout of ``nn.Linear.weight``).
        bias: ``[out_features]`` or None.
        approximate: ``"none"`` (exact, erf) or ``"tanh"``.

    Returns:
        ``[..., out_features]``.
    """
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"approximate={approximate!r}: expected one of {GELU_APPROXIMATIONS}")
    return F.gelu(F.linear(x, weight, bias), approximate=approximate)


@linear_gelu.register_fake
def _linear_gelu_shape(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, approximate: str = "none"
) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


#: The graph target of a fused Linear+GELU node, in every dialect.
LINEAR_GELU = torch.ops.lab01.linear_gelu.default
