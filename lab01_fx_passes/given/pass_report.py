"""What the pass manager reports: the per-pass record, the error naming a diverging pass, and why
a pass changed nothing.

Provided (not an exercise): these types are the pass manager's contract with its callers, so the
starter and the reference share them.

A pass that silently does nothing is a bug to whoever runs it: ``PassResult(gm, False)`` says
*that* nothing changed, never *why*. The lab's passes answer with :func:`unchanged`, a
``PassResult`` that also carries a reason ("weights are graph inputs: freeze first"); the pass
manager copies it into the pass's :class:`PassReport` (:func:`reason_of` reads it from any result).
A pass that counts what it refused, by reason, words those counts with :func:`explain_skips`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import fx
from torch.fx.passes.infra.pass_base import PassResult

from labkit.numerics import OutputError

#: A pass: a callable from a GraphModule to a PassResult (a function, or a PassBase instance).
Pass = Callable[[fx.GraphModule], PassResult]


class _UnchangedResult(PassResult):
    """A ``PassResult(graph_module, False)`` with a ``reason`` attribute (no ``__slots__``: it has a ``__dict__``)."""

    reason: str


def unchanged(graph_module: fx.GraphModule, reason: str) -> PassResult:
    """``PassResult(graph_module, False)`` that says why the pass changed nothing.

    It is a ``PassResult`` (a named tuple) like any other, so PyTorch's pass infrastructure and code
    that unpacks ``graph_module, modified = result`` keep working; :func:`reason_of` reads the reason.
    """
    result = _UnchangedResult(graph_module, False)
    result.reason = reason
    return result


def reason_of(result: PassResult) -> str | None:
    """Why ``result``'s pass changed nothing, as the pass said (None when it said nothing)."""
    return getattr(result, "reason", None)


def explain_skips(skipped: Counter[str], noun: str, nothing_found: str) -> str:
    """Why a pass that counts what it refused changed nothing, from its counts.

    Args:
        skipped: reason -> how many candidates (pairs, convolutions) the pass refused for it.
        noun: what a candidate is, singular (``"pair"``, ``"convolution"``).
        nothing_found: the reason when nothing was refused, because nothing was found.

    Returns:
        ``nothing_found``, or each reason with its count, most frequent first:
        ``"weights are graph inputs: freeze first (freeze_parameters) (3 pairs); ..."``.
    """
    if not skipped:
        return nothing_found
    return "; ".join(f"{reason} ({count} {noun}{'s' * (count > 1)})" for reason, count in skipped.most_common())


class PassValidationError(RuntimeError):
    """A pass changed the outputs beyond the tolerance (or broke the graph).

    Attributes:
        pass_name: the pass that diverged.
        error: how far its outputs were from the reference (None if they could not be compared).
    """

    def __init__(self, pass_name: str, message: str, error: OutputError | None = None) -> None:
        super().__init__(message)
        self.pass_name = pass_name
        self.error = error


@dataclass(frozen=True)
class PassReport:
    """What one pass did.

    Attributes:
        name: the pass's name (its ``name`` attribute, else its ``__name__``, else its class name).
        nodes_before, nodes_after: ``len(graph.nodes)`` around the pass.
        seconds: the pass's own run time (without validation).
        modified: the pass's ``PassResult.modified``.
        changes_semantics: whether the pass declared that it changes the outputs.
        max_abs_error, max_rel_error: distance from the reference outputs after this pass (for a
            semantics-changing pass: its deviation); None without example inputs.
        reason: why the pass changed nothing, as its result said (:func:`reason_of`); None when it
            changed the graph or gave no reason.
    """

    name: str
    nodes_before: int
    nodes_after: int
    seconds: float
    modified: bool
    changes_semantics: bool
    max_abs_error: float | None
    max_rel_error: float | None
    reason: str | None = None

    def line(self) -> str:
        """One line for a log: what the pass did, or why it did nothing."""
        done = f"{self.nodes_before} -> {self.nodes_after} nodes" if self.modified else "unchanged"
        why = f" ({self.reason})" if not self.modified and self.reason else ""
        error = "" if self.max_abs_error is None else f", max |error| {self.max_abs_error:.2e}"
        return f"{self.name}: {done}{why}{error}, {self.seconds * 1e3:.1f} ms"


def pass_name(pass_: Any) -> str:
    """A readable name for a pass: ``name`` attribute, ``__name__``, or the class name."""
    return getattr(pass_, "name", None) or getattr(pass_, "__name__", None) or type(pass_).__name__
