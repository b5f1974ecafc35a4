"""Run passes in order, prove after each one that the outputs did not change, and report.

Every graph transformation must be shown to preserve the program's outputs. The pass manager does
that between passes, so a broken pass is caught *and named* the moment it diverges, not three
passes later in a benchmark:

1. before any pass, measure the reference with :meth:`labkit.numerics.ReferenceOutputs.measure`:
   the graph's outputs on the example inputs, and the same outputs computed in float64, which say
   how far float32 itself already is from the exact answer on this model;
2. after each pass, check the graph (``graph.lint()``), run it again and compare with
   :meth:`ReferenceOutputs.compare`: each output may move by at most ``tolerance_factor`` times
   float32's own error on it; beyond that it raises :class:`PassValidationError` naming the pass,
   its error and the budget;
3. a pass that changes the outputs *on purpose* (``relu -> hardswish``) declares it with a
   ``changes_semantics = True`` attribute. It is not checked against the budget; its deviation is
   reported, and its outputs (measured again, float64 included) become the reference for the
   passes after it.

Why a measured budget and not a fixed ``atol``: see :mod:`labkit.numerics` and the handout. A
ResNet-50 whose logits are of order 1e4 is ~4e-3 away from exact in plain float32; a correct fold
moves it by about as much, which a fixed ``atol = 1e-3`` would call a bug.

PyTorch has a pass manager too (``torch.fx.passes.infra.pass_manager.PassManager``), with the same
``PassResult`` convention; its checks receive only the module, not inputs, so numerical checks
need a manager like this one, which owns the example inputs and the reference outputs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx
from torch.fx.passes.infra.pass_base import PassResult

from lab01_fx_passes.given.pass_report import (
    Pass,
    PassReport,
    PassValidationError,
    pass_name,
    reason_of,
)
from labkit.numerics import (
    TOLERANCE_FACTOR,
    OutputError,
    ReferenceOutputs,
    fresh_copies,
    output_error,
)


class PassManager:
    """Apply passes in order with numerical validation after each one.

    Args:
        passes: callables ``GraphModule -> PassResult``. A pass with a true ``changes_semantics``
            attribute is allowed to change the outputs (reported, not checked).
        example_inputs: inputs to run the graph on (for Dynamo graphs, including the parameters);
            None skips validation (errors are then reported as None).
        tolerance_factor: how many times float32's own error (measured against a float64 run of
            the graph) each output may move; the default 4 is explained in :mod:`labkit.numerics`.

    After a call, :attr:`report` holds one :class:`PassReport` per pass; a pass that changed nothing
    has its reason there (``reason_of(result)``), so a pipeline that silently does nothing on some
    dialect says why.

    Raises:
        TypeError: on construction, if a pass is not callable; during a call, if a pass does not
            return a ``PassResult``.
        ValueError: if ``tolerance_factor`` is not positive.
        PassValidationError: during a call, naming the first pass whose outputs diverge.
    """

    def __init__(
        self,
        passes: Sequence[Pass],
        *,
        example_inputs: Sequence[Any] | None = None,
        tolerance_factor: float = TOLERANCE_FACTOR,
    ) -> None:
        passes = list(passes)
        for index, pass_ in enumerate(passes):
            if not callable(pass_):
                raise TypeError(f"pass #{index} ({pass_!r}) is not callable")
        if not tolerance_factor > 0:
            raise ValueError(f"tolerance_factor must be positive, got {tolerance_factor}")
        self.passes = passes
        self.example_inputs = None if example_inputs is None else tuple(example_inputs)
        self.tolerance_factor = tolerance_factor
        self.report: list[PassReport] = []

    def _run(self, gm: fx.GraphModule) -> Any:
        with torch.no_grad():  # fresh copies: a graph that writes an input in place must not drift run to run
            return gm(*fresh_copies(self.example_inputs))

    def __call__(self, graph_module: fx.GraphModule) -> PassResult:
        """Run every pass on ``graph_module`` (passes may modify it in place) and return the result."""
        self.report = []
        validate = self.example_inputs is not None
        reference = ReferenceOutputs.measure(graph_module, self.example_inputs) if validate else None
        gm, modified = graph_module, False
        for pass_ in self.passes:
            name = pass_name(pass_)
            changes_semantics = bool(getattr(pass_, "changes_semantics", False))
            nodes_before = len(gm.graph.nodes)
            start = time.perf_counter()
            result = pass_(gm)
            seconds = time.perf_counter() - start
            if not isinstance(result, PassResult):
                raise TypeError(f"pass {name!r} returned {type(result).__name__}, expected a PassResult")
            gm, modified = result.graph_module, modified or bool(result.modified)
            error = None
            if validate:
                error = self._validate(name, gm, reference, changes_semantics)
                if changes_semantics:  # later passes must preserve the new semantics
                    reference = ReferenceOutputs.measure(gm, self.example_inputs)
            self.report.append(
                PassReport(
                    name, nodes_before, len(gm.graph.nodes), seconds, bool(result.modified), changes_semantics,
                    None if error is None else error.max_abs, None if error is None else error.max_rel,
                    None if result.modified else reason_of(result),
                )
            )  # fmt: skip
        return PassResult(gm, modified)

    def _validate(
        self, name: str, gm: fx.GraphModule, reference: ReferenceOutputs, changes_semantics: bool
    ) -> OutputError:
        try:
            gm.graph.lint()
            outputs = self._run(gm)
            if changes_semantics:
                return output_error(outputs, reference.outputs)
            verdict = reference.compare(outputs, factor=self.tolerance_factor)
        except Exception as failure:  # a pass that breaks the graph is named like one that diverges
            raise PassValidationError(name, f"pass {name!r} broke the graph: {failure}") from failure
        if not verdict.ok:
            raise PassValidationError(
                name,
                f"pass {name!r} changed the outputs: {verdict.describe()}; if the change is intended, "
                "give the pass a `changes_semantics = True` attribute",
                verdict.error,
            )
        return verdict.error
