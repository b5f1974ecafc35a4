"""How far apart two model outputs are, and how far apart float32 lets them be.

Every transform in this course is proven numerically equal to the original within a stated
tolerance. This module measures the distance once, the same way everywhere: outputs may be a tensor
or any pytree of tensors (tuples, lists, dicts), and the comparison reports the worst element.

Two tools:

- :func:`output_error` / :func:`outputs_close`: the plain distance, and a fixed elementwise
  ``atol + rtol * |expected|`` bound. Fine for one layer whose outputs are of order one (the graded
  tests of single passes use it).
- :class:`ReferenceOutputs`: **the comparator for whole programs**, which knows what float32 can
  promise. A fixed ``atol`` rejects correct transforms of any model whose outputs are large: a
  ResNet-50 with logits of order 1e4 is already ~4e-3 away from the exact answer in plain float32
  eager, so a correct Conv+BN fold moves it by ~5e-3, and ``atol = 1e-3`` calls that a bug. A loose
  ``atol`` would let wrong transforms through on small outputs. So the budget is *measured*:

  1. run the original program in its own dtype (the reference outputs) and once more in float64
     (the "exact" answer; float64 rounding is 2**29 times finer);
  2. per output tensor, float32's own error is ``own = max |original - exact|``: how far the
     original program already is from exact, on this model, these inputs, this depth;
  3. a transformed output passes when ``max |transformed - original| <= factor * max(own, ulp)``,
     ``ulp = eps(dtype) * max |exact|`` (one unit in the last place of the tensor's magnitude: the
     floor for programs that float32 happens to compute exactly).

  Why ``factor = 4``: a transform that is exactly as accurate as the original can sit up to
  ``2 * own`` away from it (both errors, opposite directions); 4 leaves room for a transform that
  rounds somewhat differently (a folded weight, a reordered sum, a channels-last convolution
  kernel). Measured: correct folds land at 1.0x-1.8x ``own``; wrong folds at 38x to 1e9x.

  When the program cannot run in float64 (it hard-codes float32 somewhere), ``own`` cannot be
  measured; the budget then falls back to :data:`FALLBACK_RELATIVE_ERROR` of each tensor's
  magnitude, and the comparison says so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map

#: A transform may move each output tensor by at most this many times float32's own error on it.
TOLERANCE_FACTOR = 4.0
#: Float32's own error assumed, relative to a tensor's magnitude, when no float64 run is possible
#: (about 4x what ResNet-50 shows: ~4e-7 of its logits' magnitude).
FALLBACK_RELATIVE_ERROR = 2e-6


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


def _paired_leaves(actual: Any, expected: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The tensors of two outputs, pairwise.

    Raises:
        ValueError: if the structures, shapes or dtypes differ (a transform must not change them).
    """
    actual_leaves, expected_leaves = _leaves(actual), _leaves(expected)
    if len(actual_leaves) != len(expected_leaves):
        raise ValueError(f"output structure changed: {len(actual_leaves)} tensors, expected {len(expected_leaves)}")
    for index, (got, want) in enumerate(zip(actual_leaves, expected_leaves)):
        if got.shape != want.shape or got.dtype != want.dtype:
            raise ValueError(
                f"output {index} changed from {want.dtype}{list(want.shape)} to {got.dtype}{list(got.shape)}"
            )
    return list(zip(actual_leaves, expected_leaves))


def _as_float64(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().cpu().to(torch.complex128 if tensor.is_complex() else torch.float64)


def _tensor_error(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float] | None:
    """(max abs, max rel) error of one pair; None when their NaNs sit in different places."""
    got64, want64 = _as_float64(got), _as_float64(want)
    if not torch.equal(torch.isnan(got64), torch.isnan(want64)):
        return None
    diff = (got64 - want64).abs().nan_to_num(0.0)
    scale = want64.abs().clamp_min(torch.finfo(torch.float64).tiny)
    return diff.max().item(), (diff / scale).max().item()


def output_error(actual: Any, expected: Any) -> OutputError:
    """Measure the worst absolute and relative error between two outputs.

    Args:
        actual: a tensor or pytree of tensors (the transformed program's output).
        expected: the same structure (the original program's output).

    Raises:
        ValueError: if the structures, shapes or dtypes differ (a transform must not change them).
    """
    max_abs = max_rel = 0.0
    elements = 0
    for got, want in _paired_leaves(actual, expected):
        if want.numel() == 0:
            continue
        error = _tensor_error(got, want)
        elements += want.numel()
        if error is None:
            return OutputError(float("inf"), float("inf"), elements)
        max_abs, max_rel = max(max_abs, error[0]), max(max_rel, error[1])
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


# ---------------------------------------------------------------- what float32 can promise


def fresh_copies(inputs: Sequence[Any]) -> tuple[Any, ...]:
    """``inputs`` with every tensor cloned (same values, dtype and strides), other leaves as they are.

    Run a program you validate on fresh copies, every time: a graph may write its inputs in place
    (``x.sub_(mean)``, a Dynamo graph's buffer ``count.add_(1)``), and a second run on the written
    tensors computes something else than the first, so a comparison would blame whatever ran in
    between. The caller's tensors are never written.
    """
    with torch.no_grad():
        return tuple(tree_map(lambda leaf: leaf.detach().clone() if isinstance(leaf, torch.Tensor) else leaf,
                              tuple(inputs)))  # fmt: skip


def _float64_copy(value: Any) -> Any:
    """``value`` with every floating (or complex) tensor in double precision; other leaves as they are."""

    def widen(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
            return leaf.detach().to(torch.complex128 if leaf.is_complex() else torch.float64)
        return leaf

    return tree_map(widen, value)


def _float64_module(module: nn.Module) -> nn.Module:
    """A float64 deep copy of ``module``: parameters, buffers and plain tensor attributes (the
    ``_tensor_constant`` values of aten graphs, folded constants) of every submodule."""
    widened = copy.deepcopy(module).to(torch.float64)
    for submodule in widened.modules():
        for name, value in list(vars(submodule).items()):
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                setattr(submodule, name, value.to(torch.float64))
    return widened


def run_in_float64(program: Callable[..., Any], inputs: Sequence[Any]) -> Any:
    """Run ``program`` on ``inputs`` with every floating value in float64 (the program is not changed).

    A module (a ``GraphModule`` included) is deep-copied and converted; a plain function only gets
    float64 inputs. Runs under ``torch.no_grad()``.

    Raises:
        whatever the program raises when float64 values reach an op that insists on float32.
    """
    runnable = _float64_module(program) if isinstance(program, nn.Module) else program
    with torch.no_grad():
        return runnable(*_float64_copy(fresh_copies(inputs)))  # a float64 input is not copied by .to()


@dataclass(frozen=True)
class Comparison:
    """The verdict of :meth:`ReferenceOutputs.compare`.

    Attributes:
        ok: every output tensor is within its budget.
        error: distance from the original outputs (:func:`output_error`).
        worst_error, worst_budget: of the output tensor closest to (or furthest over) its budget.
        own_error: float32's own error on that tensor (``max |original - float64|``), or None when
            the program could not run in float64 (then the budget is the fallback).
        magnitude: ``max |exact|`` of that tensor (``max |original|`` without a float64 run).
        factor: the factor the budget was computed with.
    """

    ok: bool
    error: OutputError
    worst_error: float
    worst_budget: float
    own_error: float | None
    magnitude: float
    factor: float

    def describe(self) -> str:
        """One line: the error, the budget and where the budget comes from."""
        if self.own_error is None:
            source = (
                f"no float64 run possible: {FALLBACK_RELATIVE_ERROR:g} of the outputs' magnitude "
                f"{self.magnitude:.3e}, times {self.factor:g}"
            )
        else:
            source = (
                f"{self.factor:g} x float32's own error {self.own_error:.3e} against a float64 run, "
                f"on outputs of magnitude {self.magnitude:.3e}"
            )
        budget = f"budget {self.worst_budget:.3e} ({source})"
        if self.worst_error == self.error.max_abs:
            return f"max abs error {self.error.max_abs:.3e}, {budget}"
        return (
            f"max abs error {self.error.max_abs:.3e}; the output tensor furthest over its budget moved by "
            f"{self.worst_error:.3e}, {budget}"
        )


class ReferenceOutputs:
    """A program's reference outputs, and how exact float32 already is on them (see the module docstring).

    Usage::

        reference = ReferenceOutputs.measure(gm, example_inputs)   # runs gm twice: as is and in float64
        ...                                                         # transform gm
        verdict = reference.compare(gm(*example_inputs))
        if not verdict.ok:
            raise ValueError(verdict.describe())

    Attributes:
        outputs: the original program's outputs, in their own dtypes.
        exact: the same outputs computed in float64, or None when the program cannot run in float64.
        float64_failure: why there is no float64 run (empty when there is one).
    """

    def __init__(self, outputs: Any, exact: Any | None = None, float64_failure: str = "") -> None:
        self.outputs = outputs
        self.exact = exact
        self.float64_failure = float64_failure

    @classmethod
    def measure(cls, program: Callable[..., Any], inputs: Sequence[Any]) -> "ReferenceOutputs":
        """Run ``program`` on ``inputs`` as it is and in float64 (both under ``torch.no_grad()``, each on
        :func:`fresh_copies` of ``inputs``: a program that writes its inputs sees the same values twice).

        Raises:
            whatever ``program`` raises on its own inputs; a failure of the float64 run only is
            recorded in :attr:`float64_failure`.
        """
        with torch.no_grad():
            outputs = program(*fresh_copies(inputs))  # both runs start from the same values
        try:
            exact = run_in_float64(program, inputs)
            _paired_leaves(_float64_copy(outputs), exact)  # the float64 run must mirror the original
        except Exception as failure:  # noqa: BLE001 - any op may refuse float64: fall back, say why
            return cls(outputs, None, f"{type(failure).__name__}: {failure}")
        return cls(outputs, exact)

    def compare(self, actual: Any, *, factor: float = TOLERANCE_FACTOR) -> Comparison:
        """Is ``actual`` (a transformed program's outputs) within what float32 can promise?

        Raises:
            ValueError: if the structure, a shape or a dtype changed, or ``factor`` is not positive.
        """
        if not factor > 0:
            raise ValueError(f"factor must be positive, got {factor}")
        error = output_error(actual, self.outputs)
        pairs = _paired_leaves(actual, self.outputs)
        exact = _leaves(self.exact) if self.exact is not None else [None] * len(pairs)
        ok, worst = True, (0.0, 0.0, 0.0, None, 0.0)  # (ratio, error, budget, own, magnitude)
        for (got, want), truth in zip(pairs, exact):
            if want.numel() == 0:
                continue
            tensor_error = _tensor_error(got, want)
            if not (want.is_floating_point() or want.is_complex()):  # integers and booleans: exact
                budget, own, magnitude = 0.0, 0.0, 0.0
            else:
                budget, own, magnitude = self._budget(want, truth, factor)
            error_abs = float("inf") if tensor_error is None else tensor_error[0]
            within = error_abs <= budget
            ok = ok and within
            ratio = float("inf") if not within and budget == 0 else error_abs / budget if budget else 0.0
            if ratio >= worst[0]:
                worst = (ratio, error_abs, budget, own, magnitude)
        _, worst_error, worst_budget, own_error, magnitude = worst
        return Comparison(ok, error, worst_error, worst_budget, own_error, magnitude, factor)

    @staticmethod
    def _budget(original: torch.Tensor, exact: torch.Tensor | None, factor: float) -> tuple[float, float | None, float]:
        """(budget, float32's own error or None, magnitude) of one floating output tensor."""
        eps = torch.finfo(original.dtype).eps
        if exact is None:
            magnitude = _as_float64(original).abs().nan_to_num(0.0, 0.0, 0.0).max().item()
            return factor * max(FALLBACK_RELATIVE_ERROR, eps) * magnitude, None, magnitude
        exact = exact.detach().cpu()
        magnitude = exact.abs().nan_to_num(0.0, 0.0, 0.0).max().item()
        own = (_as_float64(original) - exact).abs().nan_to_num(0.0, 0.0, 0.0).max().item()
        return factor * max(own, eps * magnitude), own, magnitude
