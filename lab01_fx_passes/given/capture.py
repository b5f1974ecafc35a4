"""Capture one model as FX graphs in every dialect the lab's passes must handle (harness: do not edit).

The same ``Linear -> GELU`` model gives three different graphs depending on who traced it:

========================  ==========================================  ===============================
dialect                   a Linear+GELU looks like                    parameters arrive as
========================  ==========================================  ===============================
``symbolic_trace``        ``call_module fc`` -> ``call_module act``   inside the submodules
``dynamo``                ``torch._C._nn.linear`` -> ``gelu``         placeholders (graph inputs)
``make_fx``               ``aten.t`` + ``aten.addmm`` -> ``aten.gelu``  ``get_attr`` constants
``export``                ``aten.linear`` -> ``aten.gelu``            ``get_attr`` (unlifted module)
``export_core_aten``      ``aten.permute`` + ``aten.addmm`` -> gelu   ``get_attr`` (unlifted module)
========================  ==========================================  ===============================

(3-D inputs add ``aten.view`` nodes around ``addmm`` in the last two aten forms.) A pass that
matches one form silently matches nothing in the others, so the tests run every pass on every
dialect it claims and check that it *fires*.

Within a dialect, one call can also be *spelled* several ways: ``F.linear(x, w, b)`` or
``F.linear(x, w, bias=b)``, ``aten.native_batch_norm(x, w, b, m, v, False, 0.1, 1e-3)`` or the same
with ``eps=1e-3`` by name. ``capture(..., spelling="keywords")`` (or ``"positional"``, ``"shortest"``)
returns the captured graph with every call respelled (:mod:`labkit.spellings`): a pass must read an
argument wherever the call put it (:func:`~lab01_fx_passes.given.graph_tools.call_argument` does).

:func:`capture` returns a :class:`CapturedGraph`: the ``GraphModule`` plus the exact inputs to call
it with (for Dynamo that is the parameters followed by the model's inputs, in placeholder order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn

from labkit.fx_nodes import run_graph
from labkit.spellings import ARGUMENT_SPELLINGS, respelled

#: The dialects :func:`capture` produces, in the order the handout introduces them.
DIALECTS = ("symbolic_trace", "dynamo", "make_fx", "export", "export_core_aten")
#: The aten dialects (graphs of ``torch.ops.aten`` operators).
ATEN_DIALECTS = ("make_fx", "export", "export_core_aten")


@dataclass
class CapturedGraph:
    """A graph captured from a model, and what to call it with.

    Attributes:
        dialect: one of :data:`DIALECTS`.
        graph_module: the captured graph.
        inputs: positional inputs for ``graph_module`` (Dynamo: parameters and buffers, then the
            model's own inputs, in placeholder order).
        spelling: ``None`` for the calls as the tracer wrote them, else one of
            :data:`labkit.spellings.ARGUMENT_SPELLINGS`.
        respelled_calls: how many calls the respelling changed (0 for the calls as traced).
        dynamic_batch: the batch size is a symbol (:func:`capture_dynamic_batch`), not the example's.
    """

    dialect: str
    graph_module: fx.GraphModule
    inputs: tuple[Any, ...]
    spelling: str | None = None
    respelled_calls: int = 0
    dynamic_batch: bool = False

    @property
    def name(self) -> str:
        """The dialect, with the spelling when the calls were respelled and the symbolic batch (for messages)."""
        name = self.dialect if self.spelling is None else f"{self.dialect} (arguments respelled: {self.spelling})"
        return f"{name} (dynamic batch)" if self.dynamic_batch else name

    def run(self, graph_module: fx.GraphModule | None = None) -> Any:
        """Execute ``graph_module`` (default: the captured one) on :attr:`inputs`, without autograd.

        It runs the graph itself, node by node (``labkit.fx_nodes.run_graph``), not its ``forward``:
        the program that runs is the graph a test inspects, even if ``forward`` was not regenerated.
        """
        return run_graph(graph_module or self.graph_module, *self.inputs)


def _symbolic_trace(model: nn.Module, inputs: tuple[Any, ...]) -> CapturedGraph:
    return CapturedGraph("symbolic_trace", fx.symbolic_trace(model), inputs)


def _dynamo(model: nn.Module, inputs: tuple[Any, ...]) -> CapturedGraph:
    """Run ``torch.compile`` with a backend that records the graph it receives instead of compiling it."""
    recorded: list[tuple[fx.GraphModule, list[Any]]] = []

    def record_graph(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        recorded.append((gm, list(example_inputs)))
        return gm.forward

    # A fresh Dynamo cache for each capture: many models of the same class would otherwise hit the
    # recompile limit, after which Dynamo silently runs eagerly and no graph is recorded.
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=record_graph, fullgraph=True, dynamic=False)
    with torch.no_grad():
        compiled(*inputs)
    torch._dynamo.reset()
    if len(recorded) != 1:
        raise RuntimeError(f"expected Dynamo to produce one graph, got {len(recorded)}")
    gm, example_inputs = recorded[0]
    return CapturedGraph("dynamo", gm, tuple(example_inputs))


def _make_fx(model: nn.Module, inputs: tuple[Any, ...]) -> CapturedGraph:
    from torch.fx.experimental.proxy_tensor import make_fx

    with torch.no_grad():
        return CapturedGraph("make_fx", make_fx(model)(*inputs), inputs)


def _export(model: nn.Module, inputs: tuple[Any, ...]) -> CapturedGraph:
    return CapturedGraph("export", torch.export.export(model, inputs).module(), inputs)


def _export_core_aten(model: nn.Module, inputs: tuple[Any, ...]) -> CapturedGraph:
    program = torch.export.export(model, inputs).run_decompositions()
    return CapturedGraph("export_core_aten", program.module(), inputs)


_CAPTURES: dict[str, Callable[[nn.Module, tuple[Any, ...]], CapturedGraph]] = {
    "symbolic_trace": _symbolic_trace,
    "dynamo": _dynamo,
    "make_fx": _make_fx,
    "export": _export,
    "export_core_aten": _export_core_aten,
}


def capture(model: nn.Module, inputs: Sequence[Any], dialect: str, spelling: str | None = None) -> CapturedGraph:
    """Capture ``model(*inputs)`` as an FX graph of the given dialect.

    Args:
        model: the module to trace (its mode, train or eval, is traced as it is).
        inputs: example inputs (Dynamo, ``make_fx`` and ``torch.export`` specialise on their shapes).
        dialect: one of :data:`DIALECTS`.
        spelling: ``None`` (the calls as traced) or one of :data:`labkit.spellings.ARGUMENT_SPELLINGS`: every
            call of the graph passes its arguments that way (checked to compute exactly the same).

    Raises:
        ValueError: for an unknown dialect or spelling.
    """
    if dialect not in _CAPTURES:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {', '.join(DIALECTS)}")
    if spelling is not None and spelling not in ARGUMENT_SPELLINGS:
        raise ValueError(f"unknown spelling {spelling!r}; expected one of {', '.join(ARGUMENT_SPELLINGS)}")
    captured = _CAPTURES[dialect](model, tuple(inputs))
    if spelling is None:
        return captured
    graph_module, changed = respelled(captured.graph_module, spelling, captured.inputs)
    return CapturedGraph(dialect, graph_module, captured.inputs, spelling, changed)


#: The aten dialects :func:`capture_dynamic_batch` produces (``torch.export`` with a symbolic batch size).
DYNAMIC_DIALECTS = ("export", "export_core_aten")
#: The batch sizes a graph from :func:`capture_dynamic_batch` admits (its guards refuse others).
DYNAMIC_BATCH = (2, 64)


def capture_dynamic_batch(model: nn.Module, inputs: Sequence[Any], dialect: str = "export") -> CapturedGraph:
    """Capture ``model(*inputs)`` with ``torch.export``, the batch dimension of every input symbolic.

    The graph serves every batch size in :data:`DYNAMIC_BATCH`: shapes in ``node.meta["val"]`` hold a
    ``SymInt`` (``s0``) where the batch is, and sizes that depend on it are expressions of it
    (``5*s0``). A pass that reads a size as a number (``int(s0)`` gives the example's) bakes the
    example into a graph that must serve every size. ``dialect``: one of :data:`DYNAMIC_DIALECTS`.
    """
    from torch.export import Dim

    if dialect not in DYNAMIC_DIALECTS:
        raise ValueError(f"unknown dynamic dialect {dialect!r}; expected one of {', '.join(DYNAMIC_DIALECTS)}")
    batch = Dim("batch", min=DYNAMIC_BATCH[0], max=DYNAMIC_BATCH[1])
    shapes = tuple({0: batch} for _ in inputs)
    program = torch.export.export(model, tuple(inputs), dynamic_shapes=shapes)
    if dialect == "export_core_aten":
        program = program.run_decompositions()
    return CapturedGraph(dialect, program.module(), tuple(inputs), dynamic_batch=True)
