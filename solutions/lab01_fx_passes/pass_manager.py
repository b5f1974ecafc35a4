"""Run passes in order, prove after each one that the outputs did not change, and report.

Every graph transformation must be shown to preserve the program's outputs. The pass manager does
that between passes, so a broken pass is caught *and named* the moment it diverges, not three
passes later in a benchmark:

1. before any pass, run the graph on the example inputs: these are the reference outputs;
2. after each pass, check the graph (``graph.lint()``), run it again and measure the distance
   to the reference with :func:`labkit.numerics.output_error`; outside the tolerance
   (``|actual - expected| <= atol + rtol * |expected|``, element by element) it raises
   :class:`PassValidationError` naming the pass and the error;
3. a pass that changes the outputs *on purpose* (``relu -> hardswish``) declares it with a
   ``changes_semantics = True`` attribute. It is not checked against the tolerance; its
   deviation is reported, and its outputs become the reference for the passes after it.

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

from lab01_fx_passes.pass_report import Pass, PassReport, PassValidationError, pass_name
from labkit.numerics import OutputError, output_error, outputs_close

class PassManager:
    """Apply passes in order with numerical validation after each one.

    Args:
        passes: callables ``GraphModule -> PassResult``. A pass with a true ``changes_semantics``
            attribute is allowed to change the outputs (reported, not checked).
        example_inputs: inputs to run the graph on (for Dynamo graphs, including the parameters);
            None skips validation (errors are then reported as None).
        rtol, atol: the tolerance, ``|actual - expected| <= atol + rtol * |expected|``. The default
            1e-5/1e-5 fits a float32 model whose outputs are of order one (see the handout).

    After a call, :attr:`report` holds one :class:`PassReport` per pass.

    Raises:
        TypeError: on construction, if a pass is not callable; during a call, if a pass does not
            return a ``PassResult``.
        ValueError: if a tolerance is negative.
        PassValidationError: during a call, naming the first pass whose outputs diverge.
    """

    def __init__(
        self,
        passes: Sequence[Pass],
        *,
        example_inputs: Sequence[Any] | None = None,
        rtol: float = 1e-5,
        atol: float = 1e-5,
    ) -> None:
        passes = list(passes)
        for index, pass_ in enumerate(passes):
            if not callable(pass_):
                raise TypeError(f"pass #{index} ({pass_!r}) is not callable")
        if rtol < 0 or atol < 0:
            raise ValueError(f"tolerances must be >= 0, got rtol={rtol}, atol={atol}")
        self.passes = passes
        self.example_inputs = None if example_inputs is None else tuple(example_inputs)
        self.rtol, self.atol = rtol, atol
        self.report: list[PassReport] = []

    def _run(self, gm: fx.GraphModule) -> Any:
        with torch.no_grad():
            return gm(*self.example_inputs)

    def __call__(self, graph_module: fx.GraphModule) -> PassResult:
        """Run every pass on ``graph_module`` (passes may modify it in place) and return the result."""
        self.report = []
        validate = self.example_inputs is not None
        reference = self._run(graph_module) if validate else None
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
                error, outputs = self._validate(name, gm, reference, changes_semantics)
                if changes_semantics:
                    reference = outputs  # later passes must preserve the new semantics
            self.report.append(
                PassReport(
                    name, nodes_before, len(gm.graph.nodes), seconds, bool(result.modified), changes_semantics,
                    None if error is None else error.max_abs, None if error is None else error.max_rel,
                )
            )  # fmt: skip
        return PassResult(gm, modified)

    def _validate(
        self, name: str, gm: fx.GraphModule, reference: Any, changes_semantics: bool
    ) -> tuple[OutputError, Any]:
        try:
            gm.graph.lint()
            outputs = self._run(gm)
            error = output_error(outputs, reference)
        except Exception as failure:  # a pass that breaks the graph is named like one that diverges
            raise PassValidationError(name, f"pass {name!r} broke the graph: {failure}") from failure
        if not changes_semantics and not outputs_close(outputs, reference, rtol=self.rtol, atol=self.atol):
            raise PassValidationError(
                name,
                f"pass {name!r} changed the outputs: max abs error {error.max_abs:.3e}, max rel error "
                f"{error.max_rel:.3e} (tolerance rtol={self.rtol:g}, atol={self.atol:g}); if the change "
                "is intended, give the pass a `changes_semantics = True` attribute",
                error,
            )
        return error, outputs
