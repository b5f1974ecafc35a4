"""What the pass manager reports: the per-pass record and the error naming a diverging pass.

Provided (not an exercise): these types are the pass manager's contract with its callers, so the
starter and the reference share them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import fx
from torch.fx.passes.infra.pass_base import PassResult

from labkit.numerics import OutputError

#: A pass: a callable from a GraphModule to a PassResult (a function, or a PassBase instance).
Pass = Callable[[fx.GraphModule], PassResult]


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
    """

    name: str
    nodes_before: int
    nodes_after: int
    seconds: float
    modified: bool
    changes_semantics: bool
    max_abs_error: float | None
    max_rel_error: float | None


def pass_name(pass_: Any) -> str:
    """A readable name for a pass: ``name`` attribute, ``__name__``, or the class name."""
    return getattr(pass_, "name", None) or getattr(pass_, "__name__", None) or type(pass_).__name__
