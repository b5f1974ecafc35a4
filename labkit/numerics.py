"""How far apart two model outputs are.

Every transform in this course is proven numerically equal to eager within a stated tolerance.
This module measures the distance once, the same way everywhere: outputs may be a tensor or any
pytree of tensors (tuples, lists, dicts), and the comparison reports the worst element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten


@dataclass(frozen=True)
class OutputError:
    """The worst-case difference between two outputs.

    Attributes:
        max_abs: ``max |actual - expected|`` over every element of every tensor.
        max_rel: ``max |actual - expected| / max(|expected|, tiny)`` over the same elements.
        elements: how many elements were compared.
    """

    max_abs: float
    max_rel: float
    elements: int


def _leaves(output: Any) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(output)
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def output_error(actual: Any, expected: Any) -> OutputError:
    """Measure the worst absolute and relative error between two outputs.

    Args:
        actual: a tensor or pytree of tensors (the transformed program's output).
        expected: the same structure (the original program's output).

    Raises:
        ValueError: if the structures, shapes or dtypes differ (a transform must not change them).
    """
    actual_leaves, expected_leaves = _leaves(actual), _leaves(expected)
    if len(actual_leaves) != len(expected_leaves):
        raise ValueError(
            f"output structure changed: {len(actual_leaves)} tensors, expected {len(expected_leaves)}"
        )
    max_abs = max_rel = 0.0
    elements = 0
    for index, (got, want) in enumerate(zip(actual_leaves, expected_leaves)):
        if got.shape != want.shape or got.dtype != want.dtype:
            raise ValueError(
                f"output {index} changed from {want.dtype}{list(want.shape)} to {got.dtype}{list(got.shape)}"
            )
        if want.numel() == 0:
            continue
        got64, want64 = got.detach().double().cpu(), want.detach().double().cpu()
        if not torch.equal(torch.isnan(got64), torch.isnan(want64)):
            return OutputError(float("inf"), float("inf"), elements + want.numel())
        diff = (got64 - want64).nan_to_num(0.0).abs()
        scale = want64.abs().clamp_min(torch.finfo(torch.float64).tiny)
        max_abs = max(max_abs, diff.max().item())
        max_rel = max(max_rel, (diff / scale).max().item())
        elements += want.numel()
    return OutputError(max_abs, max_rel, elements)


def outputs_close(actual: Any, expected: Any, *, rtol: float, atol: float) -> bool:
    """Exact ``allclose`` over pytrees: every element within ``atol + rtol * |expected|``."""
    try:
        pairs = list(zip(_leaves(actual), _leaves(expected), strict=True))
    except ValueError:
        return False
    return all(
        got.shape == want.shape
        and got.dtype == want.dtype
        and torch.allclose(got.detach().cpu(), want.detach().cpu(), rtol=rtol, atol=atol, equal_nan=True)
        for got, want in pairs
    )
