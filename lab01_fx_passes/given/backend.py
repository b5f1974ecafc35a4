"""A ``torch.compile`` backend built on the lab's passes (harness: do not edit).

    compiled = torch.compile(model, backend=lab_backend(lab))   # lab: the lab's public API
    with torch.no_grad():
        compiled(x)                                              # default_pipeline ran on Dynamo's graph

Dynamo captures the model's forward as a torch-level graph whose parameters and buffers are
placeholders, and calls the backend with that graph and ``example_inputs``: the actual tensors, the
module's parameters and buffers among them. The backend runs the lab's :func:`default_pipeline` on
them. Its first pass, freezing (``freezing.py``), turns the parameters into constants, so
Conv+BN folding, constant folding and the channels-last layout can fire, each validated by the pass
manager against float32's own error on these very inputs.

Frozen values must not change behind the graph's back, and Dynamo does not guard parameter values
(only their shapes, dtypes and devices). So the callable returned here checks the freezer's guard
(:meth:`ParameterFreezer.guard_holds`: the same tensors, with the version counters they had) on
every call: while it holds, the optimised graph runs; once a frozen parameter or buffer was
modified or replaced (``load_state_dict``, an optimiser step, ``bn.running_var.mul_(2)``), the graph
as Dynamo gave it runs instead, and :attr:`GuardedGraph.fallbacks` counts it.

The optimised graph runs through a ``GraphModule`` recompiled from the graph the pipeline returned,
so what runs is exactly the graph the pass manager's report describes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from torch import fx

from labkit.fx_nodes import concrete_inputs


class GuardedGraph:
    """What the backend hands Dynamo: the optimised graph, run while the freezer's guard holds.

    Attributes:
        optimized: the pipeline's graph, recompiled from ``graph`` (run what you inspect).
        original: the graph Dynamo gave the backend (run when the guard fails).
        report: the pass manager's report (one ``PassReport`` per pass).
        calls, fallbacks: how many calls ran, and how many of them ran ``original``.
    """

    def __init__(self, optimized: fx.GraphModule, original: fx.GraphModule, freezers: Sequence[Any],
                 report: Sequence[Any]) -> None:  # fmt: skip
        self.optimized = fx.GraphModule(optimized, optimized.graph)
        self.original = original
        self.freezers = list(freezers)
        self.report = list(report)
        self.calls = self.fallbacks = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if all(freezer.guard_holds(args) for freezer in self.freezers):
            return self.optimized(*args)
        self.fallbacks += 1
        return self.original(*args)


def lab_backend(lab: ModuleType) -> Callable[[fx.GraphModule, list[Any]], GuardedGraph]:
    """A ``torch.compile`` backend running ``lab.default_pipeline`` on each graph Dynamo captures.

    Args:
        lab: the lab's public API (the student's package or the reference: ``labkit.impl.load_lab``).

    Returns:
        The backend. Its ``compiled`` attribute lists the :class:`GuardedGraph` of every graph it
        compiled, in order (to inspect the reports and count fallbacks).
    """
    compiled: list[GuardedGraph] = []

    def backend(gm: fx.GraphModule, example_inputs: list[Any]) -> GuardedGraph:
        original = fx.GraphModule(gm, copy.deepcopy(gm.graph))  # the passes may rewrite gm in place
        manager = lab.default_pipeline(concrete_inputs(example_inputs))  # dynamic=True: SymInt sizes -> this call's
        result = manager(gm)
        freezers = [p for p in manager.passes if isinstance(p, lab.ParameterFreezer)]
        guarded = GuardedGraph(result.graph_module, original, freezers, manager.report)
        compiled.append(guarded)
        return guarded

    backend.compiled = compiled  # type: ignore[attr-defined]
    return backend
